
# An offset a receiver needs has fallen out of Kafka (retention, or records
# deleted by an admin): the receiver must pause the cube, persistently, with
# a reason naming the lost range, shown in streamcube.consumers.last_error,
# and never skip ahead; only streamcube_set_positions() moves it on.
# Records are deleted with Kafka's own DeleteRecordsCommand.
#
#   A. the cube consumed part of a partition, PostgreSQL is stopped cleanly,
#      the records from its position on are deleted, PostgreSQL starts;
#   C. the receiver runs but lags behind (its COPY waits for a lock held by
#      a test session, librdkafka's fetch queue is small), and the records
#      ahead of what it fetched are deleted under its feet;
#   B. PostgreSQL crashes after a cube consumed everything, and the cube's
#      start offsets are deleted before it comes back: the receivers would
#      have to start again from them.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;

sc_require_env();

my $start_ts = 1796025600;    # 2026-12-01 00:00:00 UTC

my $node = sc_node('retention', 'streamcube.fetch_queue_size = 1024');

sub lost_range_re
{
	my ($from, $to, $partition, $topic) = @_;
	return qr/^offsets $from to $to of partition $partition of topic "\Q$topic\E" are no longer in Kafka: .*streamcube_set_positions/;
}

# Wait until the cube is paused with a reason like $re; returns it.
sub wait_failed
{
	my ($cube, $re, $label) = @_;
	my $ok = $node->poll_query_until('postgres',
		"SELECT state = 'paused' AND last_error LIKE 'offsets % are no longer in Kafka%' "
		  . "FROM streamcube.consumers WHERE cube = '$cube'::regclass");
	my $error = $node->safe_psql('postgres',
		"SELECT last_error FROM streamcube.consumers WHERE cube = '$cube'::regclass");
	ok($ok, "$label: the cube $cube is paused");
	like($error, $re, "$label: its last_error names the lost range")
	  or diag $node->safe_psql('postgres', 'SELECT * FROM streamcube.consumers');
	return $error;
}

sub rows_of
{
	my ($cube, $partition) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*), coalesce(min(_offset), -1), coalesce(max(_offset), -1), "
		  . "count(DISTINCT _offset) FROM $cube WHERE _partition = $partition");
}

# ---------------------------------------------------------------- A
# 2 partitions; 250 messages each are consumed, PostgreSQL stops, each
# partition grows to 1,000 messages and partition 0 loses offsets 0..499.
my $topic_a = sc_topic('retention_a');
sc_create_topic($topic_a, 2);
sc_produce($topic_a, count => 500, 'start-ts' => $start_ts, 'step-ms' => 1000);
sc_create_cube($node, 'ev_a', $topic_a);
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev_a', '60 s')"),
	't', 'A: the first 250 messages of each partition are consumed');

$node->stop;
sc_produce($topic_a, count => 1500, 'start-ts' => $start_ts + 500,
	'step-ms' => 1000, seed => 2);
sc_delete_records($topic_a, 0, 500);
is(sc_first_offset($topic_a, 0), 500, 'A: partition 0 now starts at offset 500');
$node->start;

my $error_a = wait_failed('ev_a', lost_range_re(250, 499, 0, $topic_a), 'A');
is(rows_of('ev_a', 0), '250|0|249|250',
	'A: partition 0 holds exactly offsets 0..249, nothing beyond the lost range');
is( $node->safe_psql('postgres', "SELECT streamcube_wait('ev_a', '2 s')"),
	'f', 'A: streamcube_wait does not report the cube caught up');

# ---------------------------------------------------------------- C
# 1 partition.  The receiver is idle at offset 1,000 when a session locks
# the cube's table; 100,000 more messages arrive; the receiver's batch
# waits for the lock, librdkafka fetches no further than its 1 MB queue.
# Offsets below 100,900 are deleted, then the lock is released.
my $topic_c = sc_topic('retention_c');
sc_create_topic($topic_c, 1);
sc_produce($topic_c, count => 1000, 'start-ts' => $start_ts, 'step-ms' => 1);
sc_create_cube($node, 'ev_c', $topic_c);
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev_c', '60 s')"),
	't', 'C: the first 1,000 messages are consumed');

my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN; LOCK TABLE ev_c IN ACCESS EXCLUSIVE MODE');
sc_produce($topic_c, count => 100_000, 'start-ts' => $start_ts + 1,
	'step-ms' => 1, seed => 2);
ok( $node->poll_query_until('postgres',
		"SELECT wait_event_type = 'Lock' FROM pg_stat_activity "
		  . "WHERE backend_type = 'streamcube receiver' AND query LIKE '%batch%' "
		  . "AND pid = (SELECT pid FROM streamcube.consumers WHERE cube = 'ev_c'::regclass)"),
	'C: the receiver waits for the lock with a batch in hand');
sleep 2;    # let librdkafka fill its fetch queue
sc_delete_records($topic_c, 0, 100_900);
is(sc_first_offset($topic_c, 0), 100_900, 'C: the partition now starts at offset 100,900');
$locker->query_safe('COMMIT');
$locker->quit;

my $error_c = wait_failed('ev_c', qr/^offsets \d+ to 100899 of partition 0 of topic "\Q$topic_c\E" are no longer in Kafka: /, 'C');
my ($from_c) = $error_c =~ /^offsets (\d+) to/;
$from_c //= -1;
is(rows_of('ev_c', 0), join('|', $from_c, 0, $from_c - 1, $from_c),
	"C: the cube holds exactly offsets 0..$from_c - 1, the range named starts right after");
note "C: lost range starts at $from_c";

# ---------------------------------------------------------------- B
# 1 partition, 1,000 messages, all consumed; crash; offsets 0..499 are
# deleted while PostgreSQL is down.
my $topic_b = sc_topic('retention_b');
sc_create_topic($topic_b, 1);
sc_produce($topic_b, count => 1000, 'start-ts' => $start_ts, 'step-ms' => 1000);
sc_create_cube($node, 'ev_b', $topic_b);
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev_b', '60 s')"),
	't', 'B: all 1,000 messages are consumed');
is(rows_of('ev_b', 0), '1000|0|999|1000', 'B: the cube holds offsets 0..999');

$node->stop('immediate');
sc_delete_records($topic_b, 0, 500);
is(sc_first_offset($topic_b, 0), 500, 'B: the partition now starts at offset 500');
$node->start;

wait_failed('ev_b', lost_range_re(0, 499, 0, $topic_b),
	'B: after a crash, the start offsets are gone');
is(rows_of('ev_b', 0), '0|-1|-1|0',
	'B: no row of offsets 500..999 was ingested out of order');

# The crash emptied the other cubes too; they stay paused, with the reason
# they were paused for, and hold no row.
for my $cube ('ev_a', 'ev_c')
{
	is($node->safe_psql('postgres',
			"SELECT state, last_error LIKE 'offsets % are no longer in Kafka%' "
			  . "FROM streamcube.consumers WHERE cube = '$cube'::regclass"),
		'paused|t', "$cube after the crash: still paused, with its reason");
	is($node->safe_psql('postgres', "SELECT count(*) FROM $cube"), '0',
		"$cube after the crash: no row at all");
}

# The pause is persistent: a restart keeps it, streamcube_wait() says false,
# and resuming without moving the position pauses again; nothing is skipped.
$node->restart;
wait_failed('ev_b', lost_range_re(0, 499, 0, $topic_b), 'B after a restart');
my ($ret, $out, $err) = $node->psql('postgres', "SELECT streamcube_wait('ev_b', '5 s')");
is($out, 'f', 'B: streamcube_wait() is false while the cube is paused');
like($err, qr/is paused: offsets 0 to 499/, 'B: and says why');
$node->safe_psql('postgres', "SELECT streamcube_resume('ev_b')");
wait_failed('ev_b', lost_range_re(0, 499, 0, $topic_b), 'B, resumed without a new position');
is(rows_of('ev_b', 0), '0|-1|-1|0', 'B, resumed without a new position: still no row');

# The operator accepts the loss: the position moves to what Kafka holds,
# journalled, and the cube ingests exactly offsets 500..999.
is($node->safe_psql('postgres',
		"SELECT partition, old_position, new_position FROM streamcube_set_positions('ev_b', '\"earliest\"')"),
	'0|0|500', 'B: streamcube_set_positions moves partition 0 from 0 to 500');
is($node->safe_psql('postgres',
		"SELECT requested, old_position, new_position, reason LIKE 'offsets 0 to 499%' "
		  . "FROM streamcube.position_changes WHERE cube = 'ev_b'::regclass"),
	'earliest|0|500|t', 'B: the change is journalled with the reason');

# Retention goes on deleting before the operator resumes: "earliest"
# means what Kafka holds when the cube reads it, not at the call.
sc_delete_records($topic_b, 0, 700);
is(sc_first_offset($topic_b, 0), 700, 'B: before the resume, the partition now starts at 700');
$node->safe_psql('postgres', "SELECT streamcube_resume('ev_b')");
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev_b', '60 s')"),
	't', 'B: resumed, the cube catches up from what Kafka holds now, without pausing again');
is(rows_of('ev_b', 0), '300|700|999|300', 'B: exactly offsets 700..999, once each');
is($node->safe_psql('postgres',
		"SELECT requested, old_position, new_position, reason LIKE '\"earliest\" when the cube read it: retention deleted offsets 500 to 699%' "
		  . "FROM streamcube.position_changes WHERE cube = 'ev_b'::regclass ORDER BY change_id DESC LIMIT 1"),
	'earliest|500|700|t', 'B: the move at resume is journalled, with the offsets retention took');

# Not for a position that was not set to "earliest": offsets 700..799
# deleted under a cube that read them all changes nothing; a cube whose
# position is an offset the operator gave pauses as before.
$node->safe_psql('postgres', "SELECT streamcube_pause('ev_b')");
$node->safe_psql('postgres', "SELECT streamcube_set_positions('ev_b', '{\"0\": 750}')");
sc_delete_records($topic_b, 0, 800);
$node->safe_psql('postgres', "SELECT streamcube_resume('ev_b')");
wait_failed('ev_b', lost_range_re(750, 799, 0, $topic_b),
	'B: a position given as an offset below what Kafka holds pauses the cube');

$node->stop;
done_testing();
