
# A crash of PostgreSQL (pg_ctl stop -m immediate) in the middle of ingest.
# Crash recovery empties the unlogged active segments and the unlogged
# consume positions together; the receivers start again from the cube's
# start offsets (the logged checkpoints), so the cube ends up exact: every
# good message once, no duplicate.  Dead letters live in a logged table that
# survives the crash: the bad messages are met again after it and must still
# be recorded exactly once each.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;

sc_require_env();

my $partitions = 4;
my $backlog1 = 40_000;    # in Kafka before the cube exists, then
my $backlog2 = 80_000;    # three bad messages, then more good ones
my $backlog = $backlog1 + $backlog2;
my $live = 80_000;
my $start_ts = 1796025600;    # 2026-12-01 00:00:00 UTC
my $step_ms = 100;

my $node = sc_node('crash', 'restart_after_crash = on');
my $topic = sc_topic('crash');
sc_create_topic($topic, $partitions);

sc_produce($topic, count => $backlog1, 'start-ts' => $start_ts,
	'step-ms' => $step_ms, seed => 1);

# Three bad messages, each at offset 10,000 of partitions 0, 1 and 2.
my @bad = (
	[ 0, 'not json', qr/^invalid JSON/ ],
	[ 1, '{"ts": null}', qr/^time column "ts" is null$/ ],
	[ 2, '{"ts":"2026-11-29T08:00:00Z","qty":"abc"}',
		qr/invalid input syntax for type integer: "abc"/ ],
);
sc_kcat_produce($topic, $_->[0], $_->[1]) for @bad;
sc_produce($topic, count => $backlog2,
	'start-ts' => $start_ts + $backlog1 * $step_ms / 1000,
	'step-ms' => $step_ms, seed => 2);

sc_create_cube($node, 'ev', $topic);

my $producer = sc_produce_start($topic, count => $live, rate => 8000,
	'start-ts' => $start_ts + $backlog * $step_ms / 1000,
	'step-ms' => $step_ms, seed => 3);

# Crash once the bad messages are dead letters and ingest is under way.
ok( $node->poll_query_until('postgres',
		'SELECT (SELECT count(*) FROM streamcube.dead_letters) = 3 '
		  . 'AND (SELECT count(*) FROM ev) >= 60000'),
	'ingest is under way and the three bad messages are dead letters');
my $before = $node->safe_psql('postgres', 'SELECT count(*) FROM ev');
ok($before > 0 && $before < $backlog + $live,
	"some but not all rows are in before the crash ($before)");
note 'the producer is ' . (sc_producer_running($producer) ? 'still producing' : 'done');
note "before crash: $before rows, " . sc_elapsed();

$node->stop('immediate');
$node->start;

# Rows and positions were emptied together: whatever the receiver has
# committed since the start, positions match it exactly.
sc_check_positions_match_rows($node, 'ev', 'right after crash recovery');
my $after = $node->safe_psql('postgres', 'SELECT count(*) FROM ev');
cmp_ok($after, '<', $before,
	"crash recovery emptied the active segments ($after rows now, $before before)");

ok(sc_produce_finish($producer), "the producer delivered all $live messages");
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"),
	't', 'streamcube_wait: everything in Kafka is consumed');
note 'consumed, ' . sc_elapsed();

my $k = sc_kafka_contents($topic);
is($k->{count}, $backlog + $live + 3,
	'Kafka holds the messages produced and the 3 bad ones');
is($k->{good}, $backlog + $live, 'Kafka holds the good messages');
sc_check_exact($node, 'ev', $k, 'after a crash');
sc_check_positions_match_rows($node, 'ev', 'at the end');
sc_wait_positions_at_high($node, 'ev', $k, 'at the end');

# The receiver of the recovered server started from the cube's start
# offsets (0): it ingested every good message itself.
is($node->safe_psql('postgres', 'SELECT rows_total FROM streamcube.consumers'),
	$backlog + $live,
	'after the crash the receiver read the topic again from the start offsets');

# Exactly the bad messages are dead letters, once each.
my $per = $backlog1 / $partitions;
is( $node->safe_psql('postgres',
		'SELECT partition, "offset", convert_from(payload, \'UTF8\') '
		  . 'FROM streamcube.dead_letters ORDER BY 1, 2'),
	join("\n", map { "$_->[0]|$per|$_->[1]" } @bad),
	'the dead letters are exactly the three bad messages, once each');
for my $b (@bad)
{
	like( $node->safe_psql('postgres',
			"SELECT error FROM streamcube.dead_letters WHERE partition = $b->[0]"),
		$b->[2], "dead letter of partition $b->[0] has the right error");
}
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM ev WHERE (_partition, _offset) IN "
		  . "(SELECT partition, \"offset\" FROM streamcube.dead_letters)"),
	'0', 'no row comes from a dead-lettered message');

# A second kind of crash: one server process dies by SIGKILL (here the
# receiver itself, in the middle of ingest) and the postmaster reinitialises
# everything and runs crash recovery, without a stop.  The same must hold.
# The cube is paused while they are produced, so that they all wait for
# the receiver: read while they were produced, they could all be in before
# the kill below (a CI run met that once), which must come in the middle
# of their ingest.
my $more = 400_000;
$node->safe_psql('postgres', "SELECT streamcube_pause('ev')");
sc_produce($topic, count => $more,
	'start-ts' => $start_ts + ($backlog + $live) * $step_ms / 1000,
	'step-ms' => $step_ms, seed => 4);
$node->safe_psql('postgres', "SELECT streamcube_resume('ev')");
ok( $node->poll_query_until('postgres',
		"SELECT count(*) >= @{[ $backlog + $live + 20_000 ]} FROM ev"),
	'ingest of the next messages is under way');
my $pid = $node->safe_psql('postgres', 'SELECT pid FROM streamcube.consumers');
$before = $node->safe_psql('postgres', 'SELECT count(*) FROM ev');
ok($before < $backlog + $live + $more,
	"some but not all of them are in before the SIGKILL ($before)");
my $log_offset = -s $node->logfile;
ok(kill('KILL', $pid), "SIGKILL to the receiver (pid $pid)");
$node->wait_for_log(
	qr/all server processes terminated; reinitializing.*database system is ready to accept connections/s,
	$log_offset);
pass('the postmaster went through crash recovery');
ok( $node->poll_query_until('postgres',
		"SELECT pid <> $pid AND state = 'running' FROM streamcube.consumers"),
	'a new receiver runs');
sc_check_positions_match_rows($node, 'ev', 'after the SIGKILL');

is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"),
	't', 'streamcube_wait: everything in Kafka is consumed');
$k = sc_kafka_contents($topic);
is($k->{good}, $backlog + $live + $more, 'Kafka holds the good messages');
sc_check_exact($node, 'ev', $k, 'after a SIGKILL');
sc_check_positions_match_rows($node, 'ev', 'at the end, after the SIGKILL');
sc_wait_positions_at_high($node, 'ev', $k, 'at the end, after the SIGKILL');
is( $node->safe_psql('postgres',
		'SELECT partition, "offset" FROM streamcube.dead_letters ORDER BY 1, 2'),
	join("\n", map { "$_->[0]|$per" } @bad),
	'after the SIGKILL too, the dead letters are the three bad messages, once each');

$node->stop;
done_testing();
