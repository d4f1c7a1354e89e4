
# Live reassignment against the real broker, under continuous production.
# Every scenario ends with exact counts and unique (_partition, _offset)
# against what Kafka holds.
#
#   1. moves between two sets, a third set added, a set removed (it
#      retires), everything swapped and back, while a producer runs;
#   2. a receiver held back in its batch loses a partition: the batch rolls
#      back, nothing doubles; a batch in flight that does not finish makes
#      the call time out at step pause, naming the set, and nothing moves;
#      the broker stopped makes it fail at step validate;
#   3. the caller's transaction rolls back: the old assignment runs on;
#   4. two reassignments of one cube at once serialise; reassign with
#      seal, pause and drop;
#   5. a crash at a random moment of a reassignment, three times;
#   6. partitions added to the topic while ingesting: new_partitions =
#      assign (the default) assigns them to the least loaded set, from their
#      first offset; new_partitions = ignore leaves them unassigned until a
#      reassignment takes them.

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

my $node = sc_node('reassign', "streamcube.metadata_interval = '2s'");
$node->safe_psql('postgres', "SELECT streamcube_create_replica_set(s) FROM unnest('{a,b,c}'::text[]) s");

my $topic = sc_topic('reassign');
sc_create_topic($topic, 8);
sc_create_cube($node, 'rc', $topic, '{"replica_sets": ["a", "b"]}');

sub assignment
{
	my ($cube) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT string_agg(format('%s:%s', a.replica_set, a.partition), ' ' ORDER BY a.partition)
		FROM streamcube.assignments a JOIN streamcube.cubes c USING (cube_id)
		WHERE c.relid = '$cube'::regclass});
}

# The receivers running agree with the catalog: one per set, with its partitions.
sub receivers_follow
{
	my ($cube, $label) = @_;
	ok( $node->poll_query_until('postgres', qq{
			SELECT coalesce(string_agg(format('%s:%s', r.replica_set, array_to_string(r.partitions, ',')),
			                           ' ' ORDER BY r.replica_set), '')
			     = (SELECT coalesce(string_agg(format('%s:%s', replica_set, ps), ' ' ORDER BY replica_set), '')
			        FROM (SELECT replica_set, string_agg(partition::text, ',' ORDER BY partition) ps
			              FROM streamcube.assignments a JOIN streamcube.cubes c USING (cube_id)
			              WHERE c.relid = '$cube'::regclass GROUP BY 1) x)
			FROM streamcube.consumers r WHERE r.cube = '$cube'::regclass AND r.state = 'running'}),
		"$label: the running receivers are exactly the committed assignment");
	return;
}

sub reassign
{
	my ($cube, $assignment, $options) = @_;
	$options //= '{}';
	return $node->safe_psql('postgres',
		"SELECT streamcube_reassign('$cube', '$assignment', '$options')");
}

sub exact
{
	my ($cube, $t, $label) = @_;
	is($node->safe_psql('postgres', "SELECT streamcube_wait('$cube', '90 s')"),
		't', "$label: streamcube_wait: everything in Kafka is consumed");
	my $k = sc_records_contents(sc_kafka_records($t));
	sc_check_exact($node, $cube, $k, $label);
	return;
}

# ---------------------------------------------------------------- 1
my $prod;
my %steps = (
	'two sets, half moves'  => '{"a": [0, 1, 2, 3, 4, 5], "b": [6, 7]}',
	'a third set'           => '{"a": [0, 1, 2], "b": [3, 4, 5], "c": [6, 7]}',
	'set b removed'         => '{"a": [0, 1, 2, 3, 4], "c": [5, 6, 7], "b": []}',
	'everything swapped'    => '{"c": [0, 1, 2, 3, 4], "a": [5, 6, 7]}',
	'and back'              => '{"a": [0, 1, 2, 3, 4], "c": [5, 6, 7]}');
my $seed = 1;
for my $step ('two sets, half moves', 'a third set', 'set b removed',
	'everything swapped', 'and back')
{
	# a reassignment in the middle of 3 s of production
	$prod = sc_produce_start($topic, count => 6_000, rate => 2_000, seed => $seed++);
	sleep 1.5;
	my $r = reassign('rc', $steps{$step});
	like($r, qr/"noop": false/, "1: $step: partitions moved");
	receivers_follow('rc', "1: $step");
	ok(sc_produce_finish($prod), "1: $step: the producer delivered everything");
	exact('rc', $topic, "1: $step");
}
is(assignment('rc'), 'a:0 a:1 a:2 a:3 a:4 c:5 c:6 c:7', '1: the last assignment is committed');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM streamcube.consumers WHERE cube = 'rc'::regclass AND replica_set = 'b'"),
	'1: set b has no receiver any more');
is($node->safe_psql('postgres',
		"SELECT count(*) > 0 FROM streamcube.reassign_log WHERE step = 'retire' AND replica_set = 'b'"),
	't', '1: the retirement of set b is journalled');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM streamcube.reassign_log l
		WHERE l.step = 'assign' AND l.outcome = 'ok' AND NOT EXISTS (
		    SELECT 1 FROM streamcube.reassign_log s
		    WHERE s.reassign_id = l.reassign_id AND s.step = 'start')}),
	'0', '1: every reassignment has its start step journalled by a receiver');
my $unconsumed = $node->safe_psql('postgres',
	"SELECT round(max(unconsumed_ms)) FROM streamcube.reassign_log WHERE step = 'start'");
note "1: the longest a moved partition went unconsumed: $unconsumed ms";
cmp_ok($unconsumed, '<', 5000, '1: moved partitions are taken over within seconds');

# ---------------------------------------------------------------- 2
# A receiver held back before its batch commits (its table is locked): the
# reassignment does not wait for it; when it goes on, the batch holds a
# partition that is no longer its own and rolls back.
$prod = sc_produce_start($topic, count => 6_000, rate => 2_000, seed => 2);
sleep 1;
my $log = -s $node->logfile;
my $holder = sc_psql_bg($node, "BEGIN; LOCK TABLE rc IN SHARE MODE; SELECT 'holding', pg_sleep(2); COMMIT");
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%''holding''%' AND wait_event = 'PgSleep'"),
	'2: a session holds the cube table');
sleep 0.3;
my $t0 = time;
like(reassign('rc', '{"c": [0, 1, 2, 3, 4, 5, 6, 7]}'), qr/"removed": \{"a": \[0, 1, 2, 3, 4\]\}/,
	'2: partitions move away from the held receiver of set a');
cmp_ok(time - $t0, '<', 1.5, '2: the call did not wait for the held receiver');
sc_psql_bg_finish($holder);
receivers_follow('rc', '2: held receiver');
ok(sc_produce_finish($prod), '2: the producer delivered everything');
exact('rc', $topic, '2: after a held receiver lost its partitions');
like(sc_log_since($node, $log), qr/rolled back a batch: partition \d+ was reassigned/,
	'2: the held receiver rolled its batch back');

# A batch in flight that never finishes: here a session holds the position
# of partition 0 as a receiver's batch does between its update and COMMIT.
my $inflight = sc_psql_bg($node, q{
	BEGIN;
	SELECT 1 FROM streamcube.consume_positions WHERE partition = 0
	  AND cube_id = (SELECT cube_id FROM streamcube.cubes WHERE relid = 'rc'::regclass) FOR UPDATE;
	SELECT 'inflight', pg_sleep(3);
	COMMIT});
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%''inflight''%' AND wait_event = 'PgSleep'"),
	'2: a batch of partition 0 is in flight');
my ($rc, $out, $err) = $node->psql('postgres',
	q{SELECT streamcube_reassign('rc', '{"a": [0, 1, 2, 3], "c": [4, 5, 6, 7]}', '{"timeout": "500 ms"}')});
isnt($rc, 0, '2: the call fails');
like($err, qr/timed out at step pause: replica set "c" did not finish its batch of partitions 0, 1, 2, 3 within 500 ms/,
	'2: the error names the step, the replica set and its partitions');
like($err, qr/the current assignment keeps running/, '2: and says nothing changed');
is(assignment('rc'), join(' ', map { "c:$_" } 0 .. 7), '2: the assignment did not change');
sc_psql_bg_finish($inflight);
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM streamcube.reassign_log WHERE outcome = 'failed' AND step = 'pause'"),
	'2: the launcher journalled the failed call, at step pause');

# The broker stopped: the call needs the topic's partitions and fails at
# step validate within its timeout; the assignment runs on.
sc_broker_stop();
$t0 = time;
($rc, $out, $err) = $node->psql('postgres',
	q{SELECT streamcube_reassign('rc', '{"a": [0, 1, 2, 3], "c": [4, 5, 6, 7]}', '{"timeout": "2 s"}')});
isnt($rc, 0, '2: broker stopped: the call fails');
like($err, qr/failed at step validate/, '2: broker stopped: at step validate');
cmp_ok(time - $t0, '<', 10, '2: broker stopped: within the timeout (and Kafka\'s)');
is(assignment('rc'), join(' ', map { "c:$_" } 0 .. 7), '2: broker stopped: nothing changed');
sc_broker_start();
sc_produce($topic, count => 800, seed => 3);
exact('rc', $topic, '2: after the failed calls');

# ---------------------------------------------------------------- 3
$prod = sc_produce_start($topic, count => 6_000, rate => 2_000, seed => 4);
sleep 0.5;
my $tx = sc_psql_bg($node, q{
	BEGIN;
	SELECT streamcube_reassign('rc', '{"a": [0, 1, 2, 3], "b": [4, 5, 6, 7]}');
	SELECT 'held', pg_sleep(3);
	ROLLBACK});
# While the open call holds the positions, the receiver's batches wait for
# them: its lag is Kafka's end minus its committed position, and grows.
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%''held''%' AND wait_event = 'PgSleep'"),
	'3: the call holds the positions in its open transaction');
my ($lag_first, $lag_max) = (undef, 0);
for (1 .. 20)
{
	my $lag = $node->safe_psql('postgres',
		"SELECT coalesce(sum(lag), 0) FROM streamcube.consumers WHERE cube = 'rc'::regclass");
	$lag_first //= $lag;
	$lag_max = $lag if $lag > $lag_max;
	sleep 0.1;
}
cmp_ok($lag_max, '>=', 500, "3: the lag shows the stall (at most $lag_max of ~2,000 messages a second)");
cmp_ok($lag_max, '>', $lag_first, "3: and grows while it lasts ($lag_first, then $lag_max)");
my (undef, undef, $txerr) = sc_psql_bg_finish($tx);
is($txerr, '', '3: the transaction ran and rolled back');
is(assignment('rc'), join(' ', map { "c:$_" } 0 .. 7), '3: the old assignment stands');
receivers_follow('rc', '3: after the rollback');
ok(sc_produce_finish($prod), '3: the producer delivered everything');
exact('rc', $topic, '3: after a rolled back reassignment');

# ---------------------------------------------------------------- 4
# Two calls at once: the second waits for the first and reassigns from
# what the first committed.
$prod = sc_produce_start($topic, count => 8_000, rate => 2_000, seed => 5);
sleep 0.5;
my $first = sc_psql_bg($node, q{
	BEGIN;
	SELECT streamcube_reassign('rc', '{"a": [0, 1, 2, 3], "c": [4, 5, 6, 7]}');
	SELECT 'first', pg_sleep(1.5);
	COMMIT});
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%''first''%' AND wait_event = 'PgSleep'"),
	'4: the first call is in its transaction');
my $second = sc_psql_bg($node,
	q{SELECT streamcube_reassign('rc', '{"b": [0, 1, 2, 3], "c": [4, 5, 6, 7]}')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%\"b\": [0, 1, 2, 3]%' AND wait_event_type = 'Lock'"),
	'4: the second call waits for the first');
my (undef, undef, $e1) = sc_psql_bg_finish($first);
my ($rc2, $o2, $e2) = sc_psql_bg_finish($second);
is($e1 . $e2, '', '4: both calls succeed');
like($o2, qr/"removed": \{"a": \[0, 1, 2, 3\]\}/, '4: the second moved what the first had committed');
is(assignment('rc'), 'b:0 b:1 b:2 b:3 c:4 c:5 c:6 c:7', '4: the last call wins');
receivers_follow('rc', '4: serialised calls');

# With sealing, a pause and a drop: windows of the past hours to seal.
sc_produce($topic, count => 2_400, 'start-ts' => (int(time / 3600) - 4) * 3600,
	'step-ms' => 4500, seed => 7);
is($node->safe_psql('postgres', "SELECT streamcube_wait('rc', '90 s')"), 't',
	'4: messages of the past hours are in');
my $seal = sc_psql_bg($node, "SELECT streamcube_seal('rc')");
like(reassign('rc', '{"a": [0, 1, 2, 3], "c": [4, 5, 6, 7]}'), qr/"noop": false/,
	'4: reassign while a seal runs');
my (undef, $sout, $serr) = sc_psql_bg_finish($seal);
is($serr, '', '4: the seal succeeds too');
cmp_ok($sout, '>=', 3, '4: it sealed the past windows');
$node->safe_psql('postgres', "SELECT streamcube_pause('rc')");
like(reassign('rc', '{"b": [0, 1, 2, 3], "c": [4, 5, 6, 7]}'), qr/"noop": false/,
	'4: reassign a paused cube');
$node->safe_psql('postgres', "SELECT streamcube_resume('rc')");
receivers_follow('rc', '4: after pause, reassign, resume');
ok(sc_produce_finish($prod), '4: the producer delivered everything');
exact('rc', $topic, '4: after concurrent calls, a seal and a pause');

my $dtopic = sc_topic('reassign_drop');
sc_create_topic($dtopic, 2);
sc_create_cube($node, 'rd', $dtopic, '{"replica_sets": ["a"]}');
sc_produce($dtopic, count => 500, seed => 6);
my $dtx = sc_psql_bg($node, q{
	BEGIN;
	SELECT streamcube_reassign('rd', '{"b": [0, 1]}');
	SELECT 'dropper', pg_sleep(1);
	COMMIT});
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%''dropper''%' AND wait_event = 'PgSleep'"),
	'4: a reassignment of rd is open');
$node->safe_psql('postgres', "SELECT streamcube_drop_cube('rd')");
my (undef, undef, $derr) = sc_psql_bg_finish($dtx);
is($derr, '', '4: the drop waited for the reassignment, which committed');
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = (SELECT count(DISTINCT replica_set) FROM streamcube.assignments)
		FROM pg_stat_activity WHERE backend_type = 'streamcube receiver'}),
	'4: the dropped cube has no receiver left');

# ---------------------------------------------------------------- 5
# A crash at three moments, each at a random point within it: while the
# call waits in step pause, between the call and COMMIT, and just after
# COMMIT while receivers take the partitions over.
my @layouts = ('{"a": [0, 1, 2, 3], "c": [4, 5, 6, 7]}',
	'{"c": [0, 1, 2, 3], "b": [4, 5, 6, 7]}',
	'{"b": [0, 1, 2, 3, 4, 5, 6, 7]}');
for my $i (0 .. 2)
{
	$prod = sc_produce_start($topic, count => 4_000, rate => 2_000, seed => 10 + $i);
	sleep 0.5;
	my $before = assignment('rc');
	my $want = assignment_of($layouts[$i]);
	my ($hold, $call, $moment);
	if ($i == 0)
	{
		# every partition moves or not; hold the position of one that does
		my ($p) = grep { (split / /, $before)[$_] ne (split / /, $want)[$_] } 0 .. 7;
		$hold = sc_psql_bg($node, qq{
			BEGIN;
			SELECT 1 FROM streamcube.consume_positions WHERE partition = $p
			  AND cube_id = (SELECT cube_id FROM streamcube.cubes WHERE relid = 'rc'::regclass) FOR UPDATE;
			SELECT 'crashhold', pg_sleep(5);
			COMMIT});
		ok($node->poll_query_until('postgres',
				"SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%''crashhold''%' AND wait_event = 'PgSleep'"),
			"5.$i: a batch of partition $p is in flight");
		$call = sc_psql_bg($node, "BEGIN; SELECT streamcube_reassign('rc', '$layouts[$i]'); COMMIT");
		ok($node->poll_query_until('postgres',
				"SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%streamcube_reassign%' AND wait_event_type = 'Lock'"),
			"5.$i: the call waits in step pause");
		$moment = 'in step pause';
	}
	elsif ($i == 1)
	{
		$call = sc_psql_bg($node,
			"BEGIN; SELECT streamcube_reassign('rc', '$layouts[$i]'); SELECT 'precommit', pg_sleep(1); COMMIT");
		ok($node->poll_query_until('postgres',
				"SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE '%''precommit''%' AND wait_event = 'PgSleep'"),
			"5.$i: the call returned, its transaction is open");
		$moment = 'between the call and COMMIT';
	}
	else
	{
		$call = sc_psql_bg($node, "SELECT streamcube_reassign('rc', '$layouts[$i]')");
		ok($node->poll_query_until('postgres', qq{
				SELECT string_agg(format('%s:%s', a.replica_set, a.partition), ' ' ORDER BY a.partition) = '$want'
				FROM streamcube.assignments a JOIN streamcube.cubes c USING (cube_id)
				WHERE c.relid = 'rc'::regclass}),
			"5.$i: the call committed");
		$moment = 'just after COMMIT';
	}
	my $delay = rand(0.3);
	sleep $delay;
	$node->stop('immediate');
	sc_psql_bg_finish($call);
	sc_psql_bg_finish($hold) if $hold;
	$node->start;
	my $after = assignment('rc');
	note sprintf('5.%d: crash %s (+%.2f s)', $i, $moment, $delay);
	is($after, $i == 2 ? $want : $before,
		"5.$i: crash $moment: the " . ($i == 2 ? 'new' : 'old') . ' assignment runs, whole');
	receivers_follow('rc', "5.$i: after the crash");
	ok(sc_produce_finish($prod), "5.$i: the producer delivered everything");
	exact('rc', $topic, "5.$i: after a crash $moment");
}

sub assignment_of
{
	my ($json) = @_;
	my %p;
	while ($json =~ /"(\w+)": \[([\d, ]*)\]/g)
	{
		my $set = $1;
		$p{$_} = $set for split /, /, $2;
	}
	return join(' ', map { "$p{$_}:$_" } sort { $a <=> $b } keys %p);
}

# ---------------------------------------------------------------- 6
# The topic grows while ingesting.  With new_partitions = assign (the
# default) the new partitions go to the least loaded set from their first
# offset; the journal says so.
reassign('rc', '{"a": [0, 1, 2, 3, 4], "c": [5, 6, 7]}');
$prod = sc_produce_start($topic, count => 6_000, rate => 2_000, seed => 20);
sleep 0.5;
sc_add_partitions($topic, 11);
my $grow = sc_produce_start($topic, count => 3_300, rate => 1_100, seed => 21);
ok($node->poll_query_until('postgres', q{
		SELECT count(*) = 11 FROM streamcube.assignments a JOIN streamcube.cubes c USING (cube_id)
		WHERE c.relid = 'rc'::regclass}),
	'6: the three new partitions are assigned');
is(assignment('rc'), 'a:0 a:1 a:2 a:3 a:4 c:5 c:6 c:7 c:8 c:9 a:10',
	'6: each went to the least loaded set (c, c, then a)');
is( $node->safe_psql('postgres', q{
		SELECT origin, partitions, offsets FROM streamcube.reassign_log
		WHERE step = 'assign' AND origin = 'new_partitions'}),
	'new_partitions|{8,9,10}|{0,0,0}', '6: journalled, from their first offset');
receivers_follow('rc', '6: new partitions');
ok(sc_produce_finish($prod) && sc_produce_finish($grow), '6: the producers delivered everything');
exact('rc', $topic, '6: after the topic grew (new_partitions = assign)');

# new_partitions = ignore: the new partitions stay unassigned, and show so.
my $itopic = sc_topic('reassign_ignore');
sc_create_topic($itopic, 2);
sc_create_cube($node, 'ri', $itopic, '{"replica_sets": ["a"], "new_partitions": "ignore"}');
$prod = sc_produce_start($itopic, count => 2_000, rate => 1_000, seed => 30);
sleep 0.5;
sc_add_partitions($itopic, 3);
ok(sc_produce_finish($prod), '6: ignore: the producer delivered everything');
sc_produce($itopic, count => 600, seed => 31);
ok($node->poll_query_until('postgres',
		"SELECT unassigned_partitions = '{2}' FROM streamcube.consumers WHERE cube = 'ri'::regclass"),
	'6: ignore: partition 2 shows as unassigned');
sleep 3;    # longer than streamcube.metadata_interval
is(assignment('ri'), 'a:0 a:1', '6: ignore: nothing was assigned');
is($node->safe_psql('postgres', "SELECT streamcube_wait('ri', '5 s')"), 'f',
	'6: ignore: streamcube_wait() says the cube is not caught up');
{
	my $all = sc_kafka_records($itopic);
	my $rest = sc_records_contents({ map { $all->{$_}[0] == 2 ? () : ($_ => $all->{$_}) } keys %$all });
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = $rest->{good} FROM ri"),
		'6: ignore: partitions 0 and 1 are consumed');
	sc_check_exact_where($node, 'ri', $rest, '6: ignore: partitions 0 and 1', 'true');
}
like(reassign('ri', '{"a": [0, 1], "b": [2]}'), qr/"added": \{"b": \[2\]\}/,
	'6: ignore: a reassignment takes partition 2');
exact('ri', $itopic, '6: ignore: after partition 2 was assigned');

$node->stop;
done_testing();
