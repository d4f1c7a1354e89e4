
# The topic of a cube is deleted and created again under the same name
# while the cube consumes it and messages flow.  The new topic's offsets
# start over at 0, below the cube's positions: the receiver must not read
# on from its old positions (nor skip anything), it pauses the cube in the
# catalog with a reason naming streamcube_set_positions.  The pause
# survives a restart; streamcube_wait returns false at once; the operator
# moves the positions to "earliest" (journalled in
# streamcube.position_changes), resumes, and the cube then holds the new
# topic exactly, next to the rows of the old one.
#
# B. A second cube's topic is deleted and not created again (yet).  Its
# receiver must pause that cube too ("topic ... no longer exists"); the
# pause holds across the restart; once the topic exists again the
# operator sets the position with the object form ('{"0": "earliest"}').
#
# The two incarnations share offsets, so their rows are told apart by
# their event time: the old topic's events start on 2026-11-01, the new
# topic's on 2026-11-10.  sckafka sends message i to partition i % 2 with
# ts = start + i seconds, so on partition p the row at offset o must have
# ts = start + 2 o + p: a row read from the wrong place shows.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;
use Time::HiRes qw(time sleep);

sc_require_env();

my $partitions = 2;
my $old_ts = 1793491200;    # 2026-11-01 00:00:00 UTC: the old topic
my $new_ts = 1794268800;    # 2026-11-10 00:00:00 UTC: the new topic
my $backlog = 4000;

my $node = sc_node('recreated');
my $topic = sc_topic('recreated');
sc_create_topic($topic, $partitions);
sc_produce($topic, count => $backlog, 'start-ts' => $old_ts, seed => 1);
sc_create_cube($node, 'ev', $topic);

# B: the cube 'gone' consumed its topic, then the topic is deleted.
my $topic_b = sc_topic('gone');
sc_create_topic($topic_b, 1);
sc_produce($topic_b, count => 500, 'start-ts' => $old_ts, seed => 11);
sc_create_cube($node, 'gone', $topic_b);
is($node->safe_psql('postgres', "SELECT streamcube_wait('gone', '60 s')"),
	't', 'B: the cube consumed its topic');
sc_delete_topic($topic_b);
my $deleted_b = time;

# Poll an SQL condition for at most $secs seconds.
sub poll_for
{
	my ($sql, $secs) = @_;
	my $deadline = time + $secs;
	while (1)
	{
		return 1 if $node->safe_psql('postgres', $sql) eq 't';
		return 0 if time > $deadline;
		sleep 0.2;
	}
}

# Messages flow: the time series goes on, ~2,000 messages a second.
my $producer = sc_produce_start($topic, count => 0, rate => 2000,
	'start-ts' => $old_ts + $backlog, seed => 2);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) >= @{[ $backlog + 2000 ]} FROM ev"),
	'the cube consumes the backlog and the live messages');
is( $node->safe_psql('postgres',
		"SELECT state FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'running', 'the receiver runs');

# ---------------------------------------------------------------- delete
sc_delete_topic($topic);
# What the producer had not delivered to the old topic is lost with it (it
# would otherwise be delivered to the new topic once it exists).
sc_produce_kill($producer);
sc_create_topic($topic, $partitions);
note 'topic deleted and created again, ' . sc_elapsed();
# A few messages at once, fewer than the cube's positions.
sc_produce($topic, count => 100, 'start-ts' => $new_ts, seed => 3);

ok( $node->poll_query_until('postgres',
		"SELECT c.paused AND c.paused_reason IS NOT NULL AND s.state = 'paused' "
		  . "FROM streamcube.cubes c JOIN streamcube.consumers s ON s.cube = c.relid "
		  . "WHERE c.relid = 'ev'::regclass"),
	'the receiver pauses the cube in the catalog')
  or diag $node->safe_psql('postgres', 'SELECT * FROM streamcube.consumers');
my $reason = $node->safe_psql('postgres',
	"SELECT paused_reason FROM streamcube.cubes WHERE relid = 'ev'::regclass");
note "paused_reason: $reason";
like( $reason,
	qr/^(partition [01] of topic "\Q$topic\E" ends at offset \d+, before the cube's position \d+: the topic was probably deleted and created again|topic "\Q$topic\E" no longer exists on Kafka cluster "k")/,
	'paused_reason says what happened');
like($reason, qr/streamcube_set_positions\('(public\.)?ev', /,
	'paused_reason says what to do (streamcube_set_positions)');
is( $node->safe_psql('postgres',
		"SELECT last_error FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	$reason, 'streamcube.consumers.last_error shows the reason');

# The old rows: on each partition offsets 0..n-1 once each, each with the
# event time of the old topic's message at that offset.
my $old_where = "ts < to_timestamp($new_ts)";
my $old_rows_sql = "SELECT _partition, count(*), count(DISTINCT _offset), max(_offset) + 1, "
  . "count(*) FILTER (WHERE ts <> to_timestamp($old_ts + 2 * _offset + _partition)), "
  . "sum(qty), sum(amount) FROM ev WHERE $old_where GROUP BY 1 ORDER BY 1";
my $old_rows = $node->safe_psql('postgres', $old_rows_sql);
note "old rows per partition: $old_rows";
my @old = map { [ split /\|/ ] } split /\n/, $old_rows;
is(scalar(@old), $partitions, 'rows of the old topic on both partitions');
for my $r (@old)
{
	ok( $r->[1] == $r->[2] && $r->[1] == $r->[3] && $r->[4] == 0,
		"old topic, partition $r->[0]: offsets 0..$r->[3] - 1 once each, at the right event times");
}
my $old_count = $node->safe_psql('postgres', "SELECT count(*) FROM ev WHERE $old_where");
is($node->safe_psql('postgres', "SELECT count(*) FROM ev"),
	$old_count, 'nothing of the new topic was ingested');
my $positions = $node->safe_psql('postgres',
	"SELECT string_agg(p.partition || ':' || p.position, ',' ORDER BY p.partition) "
	  . "FROM streamcube.consume_positions p JOIN streamcube.cubes c USING (cube_id) "
	  . "WHERE c.relid = 'ev'::regclass");
is( $positions,
	join(',', map { "$_->[0]:$_->[3]" } @old),
	'the consume positions are where the old rows end');

# B: while the server runs, the receiver of 'gone' has met the missing
# topic for a while now.
my $gone_paused_sql = "SELECT c.paused AND s.state = 'paused' "
  . "FROM streamcube.cubes c JOIN streamcube.consumers s ON s.cube = c.relid "
  . "WHERE c.relid = 'gone'::regclass";
ok(poll_for($gone_paused_sql, 15 - (time - $deleted_b)),
	'B: the running receiver pauses its cube when the topic is deleted');
note 'B, before the restart: '
  . $node->safe_psql('postgres',
	"SELECT state || ' | ' || coalesce(last_error, '') FROM streamcube.consumers "
	  . "WHERE cube = 'gone'::regclass");

# ---------------------------------------------------------------- restart
$node->restart;
ok( $node->poll_query_until('postgres',
		"SELECT state = 'paused' FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'after a restart the receiver is paused');
is( $node->safe_psql('postgres',
		"SELECT paused, paused_reason FROM streamcube.cubes WHERE relid = 'ev'::regclass"),
	"t|$reason", 'after a restart the cube is still paused, for the same reason');
is( $node->safe_psql('postgres',
		"SELECT last_error FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	$reason, 'after a restart last_error still shows the reason');

ok(poll_for($gone_paused_sql, 30),
	'B: after a restart the cube of the deleted topic is paused');
my $reason_b = $node->safe_psql('postgres',
	"SELECT paused_reason FROM streamcube.cubes WHERE relid = 'gone'::regclass");
like( $reason_b,
	qr/^topic "\Q$topic_b\E" no longer exists on Kafka cluster "k"\. Nothing was skipped\./,
	'B: paused_reason says the topic no longer exists');
like($reason_b, qr/streamcube_set_positions\('(public\.)?gone', '"earliest"'\)/,
	'B: paused_reason says what to do (streamcube_set_positions)');
is( $node->safe_psql('postgres',
		"SELECT last_error FROM streamcube.consumers WHERE cube = 'gone'::regclass"),
	$reason_b, 'B: streamcube.consumers.last_error shows the reason');
{
	my ($rc_b, $out_b, $err_b) = $node->psql('postgres',
		"SELECT streamcube_wait('gone', '30 s')");
	is($out_b, 'f', 'B: streamcube_wait returns false for the paused cube of a deleted topic');
	like($err_b, qr/WARNING:  cube "gone" is paused: /, 'B: ... with a WARNING');
}

# More messages on the new topic while the cube is paused.
sc_produce($topic, count => 900, 'start-ts' => $new_ts + 100, seed => 4);
$node->safe_psql('postgres', 'SELECT pg_sleep(1)');
is($node->safe_psql('postgres', 'SELECT count(*) FROM ev'),
	$old_count, 'a paused cube ingests nothing');

my ($stdout, $stderr) = ('', '');
my $t = time;
$node->psql('postgres', "SELECT streamcube_wait('ev', '30 s')",
	stdout => \$stdout, stderr => \$stderr);
my $waited = time - $t;
is($stdout, 'f', 'streamcube_wait returns false for a paused cube');
cmp_ok($waited, '<', 10, sprintf('... at once (%.1f s), not at the timeout', $waited));
like($stderr, qr/WARNING:  cube "ev" is paused: \Q$reason\E/,
	'... with a WARNING giving the reason');

# ---------------------------------------------------------------- set positions
my $user = $node->safe_psql('postgres', 'SELECT current_user');
is( $node->safe_psql('postgres',
		q{SELECT partition, old_position, new_position FROM streamcube_set_positions('ev', '"earliest"') ORDER BY 1}),
	join("\n", map { "$_->[0]|$_->[3]|0" } @old),
	'streamcube_set_positions(earliest): from the old positions to 0');
is( $node->safe_psql('postgres',
		"SELECT partition, requested, old_position, old_checkpoint, new_position, "
		  . "changed_by, reason = \$r\$$reason\$r\$, changed_at <= now() "
		  . "FROM streamcube.position_changes WHERE cube = 'ev'::regclass ORDER BY partition"),
	join("\n", map { "$_->[0]|earliest|$_->[3]|0|0|$user|t|t" } @old),
	'streamcube.position_changes journals both changes, with who and why');
is( $node->safe_psql('postgres',
		"SELECT paused, paused_reason IS NULL FROM streamcube.cubes WHERE relid = 'ev'::regclass"),
	't|t', 'the reason is cleared, the cube stays paused');
is( $node->safe_psql('postgres',
		"SELECT string_agg(k.partition || ':' || k.\"offset\" || ':' || p.position, ',' ORDER BY k.partition) "
		  . "FROM streamcube.checkpoints k JOIN streamcube.consume_positions p USING (cube_id, partition) "
		  . "JOIN streamcube.cubes c USING (cube_id) WHERE c.relid = 'ev'::regclass"),
	'0:0:0,1:0:0', 'checkpoints and consume positions are 0');
is($node->safe_psql('postgres', 'SELECT count(*) FROM ev'),
	$old_count, 'still nothing of the new topic ingested before resume');

# ---------------------------------------------------------------- resume
$node->safe_psql('postgres', "SELECT streamcube_resume('ev')");
$producer = sc_produce_start($topic, count => 3000, rate => 2000,
	'start-ts' => $new_ts + 1000, seed => 5);
ok( $node->poll_query_until('postgres',
		"SELECT state = 'running' FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'the receiver runs again');
ok(sc_produce_finish($producer), 'the producer delivered all 3,000 messages');
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"),
	't', 'streamcube_wait: everything in the new topic is consumed');

my $k = sc_kafka_contents($topic);
is($k->{count}, 4000, 'the new topic holds the 4,000 messages produced to it');
sc_check_exact_where($node, 'ev', $k, 'new topic', "ts >= to_timestamp($new_ts)");
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM ev WHERE ts >= to_timestamp($new_ts) "
		  . "AND ts <> to_timestamp($new_ts + 2 * _offset + _partition)"),
	'0', 'new topic: every row has the event time of the message at its offset');
is($node->safe_psql('postgres', $old_rows_sql),
	$old_rows, 'the rows of the old topic are untouched');
is($node->safe_psql('postgres', 'SELECT count(*) FROM ev'),
	$old_count + $k->{good}, 'rows = old rows + the good messages of the new topic');
is($node->safe_psql('postgres', 'SELECT count(*) FROM streamcube.dead_letters'),
	'0', 'no dead letter');
sc_wait_positions_at_high($node, 'ev', $k, 'at the end');
is( $node->safe_psql('postgres',
		"SELECT paused, paused_reason IS NULL FROM streamcube.cubes WHERE relid = 'ev'::regclass"),
	'f|t', 'the cube is no longer paused');

# ---------------------------------------------------------------- B again
# The topic of 'gone' exists again, with 300 new messages.
sc_create_topic($topic_b, 1);
sc_produce($topic_b, count => 300, 'start-ts' => $new_ts, seed => 12);
is( $node->safe_psql('postgres',
		q{SELECT partition, old_position, new_position FROM streamcube_set_positions('gone', '{"0": "earliest"}')}),
	'0|500|0', 'B: streamcube_set_positions({"0": "earliest"}): from 500 to 0');
is( $node->safe_psql('postgres',
		"SELECT partition, requested, old_position, old_checkpoint, new_position, "
		  . "changed_by, reason = \$r\$$reason_b\$r\$ "
		  . "FROM streamcube.position_changes WHERE cube = 'gone'::regclass"),
	"0|earliest|500|0|0|$user|t", 'B: the change is journalled, with the reason');
$node->safe_psql('postgres', "SELECT streamcube_resume('gone')");
is($node->safe_psql('postgres', "SELECT streamcube_wait('gone', '60 s')"),
	't', 'B: the new topic is consumed');
my $k_b = sc_kafka_contents($topic_b);
is($k_b->{count}, 300, 'B: the new topic holds 300 messages');
sc_check_exact_where($node, 'gone', $k_b, 'B: new topic', "ts >= to_timestamp($new_ts)");
is( $node->safe_psql('postgres',
		"SELECT count(*), count(DISTINCT _offset), max(_offset) + 1, "
		  . "count(*) FILTER (WHERE ts <> to_timestamp($old_ts + _offset)) "
		  . "FROM gone WHERE ts < to_timestamp($new_ts)"),
	'500|500|500|0', 'B: the 500 rows of the old topic are untouched');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM gone WHERE ts >= to_timestamp($new_ts) "
		  . "AND ts <> to_timestamp($new_ts + _offset)"),
	'0', 'B: new topic: every row has the event time of the message at its offset');

# Positions of a running cube cannot be set.
my ($rc, $out, $err) = $node->psql('postgres',
	q{SELECT * FROM streamcube_set_positions('ev', '"latest"')});
isnt($rc, 0, 'streamcube_set_positions on a running cube fails');
like($err, qr/cube "ev" must be paused to set its positions/, '... saying the cube must be paused');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.position_changes WHERE cube = 'ev'::regclass"),
	'2', '... and journals nothing');

$node->stop;
done_testing();
