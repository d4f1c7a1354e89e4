
# Option progress_group with the group's coordinator stopped and nothing
# else (issue 24): the commit to Kafka is asynchronous and one-way, so
# while no coordinator answers, batches go on at their pace, in the same
# receiver, exactly once, and the group catches up once the coordinator is
# back, with or without a batch after it (a failed commit is made again).
#
# The test bench's single real broker is the coordinator of every group and
# the leader of every partition, so it cannot lose the one and keep the
# other: this test runs on its own librdkafka mock cluster (sckafka mock) of
# two brokers, the topic's leaders on broker 1 and the group's coordinator
# on broker 2, and takes broker 2 down while a producer writes.  The
# group's offsets are read with sckafka committed (OffsetFetch): the mock
# has no Admin API for Kafka's own tools.
#
# The cluster's session.timeout.ms is 6 s: librdkafka keeps a commit that
# finds no coordinator that long (45 s by default), then fails it.  So the
# test also sees, within a minute, that once every batch's commit has
# failed, the receivers' own tries bring the group up to date when the
# coordinator is back, and so does the first batch after it.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use IPC::Run ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;
use Time::HiRes qw(time sleep);

sc_require_env();

my $partitions = 3;
my $backlog = 1200;
my $rate = 400;                 # messages per second while the coordinator goes away
my $live = 30 * $rate;          # 30 s of them
my $outage_watch = 20;          # seconds watched with the coordinator down
my $session_timeout_ms = 6000;
my $start_ts = 1796025600;      # 2026-12-01 00:00:00 UTC
my $step_ms = 100;

my $topic = sc_topic('coord');
my $group = "sc-coord-$$";

# ---------------------------------------------------------------- the mock

my %mock = (in => '', out => '');
my $producer;

# run-tests' timeout sends SIGTERM: die, so that the END block still runs.
$SIG{TERM} = $SIG{INT} = sub { die "killed by signal $_[0]\n"; };

END
{
	my $rc = $?;
	eval { $producer->{harness}->kill_kill if $producer; 1 };
	eval { $mock{harness}->kill_kill if $mock{harness}; 1 };
	$? = $rc;
}

# The mock answers each command at once: 30 s without an answer is a hang.
# Its log goes to a file: a pipe read only while a command is answered
# could fill up and block the mock's brokers.
$mock{timeout} = IPC::Run::timeout(30);
$mock{log} = PostgreSQL::Test::Utils::tempdir() . '/mock.log';
$mock{harness} = IPC::Run::start(
	[ $ENV{SC_SCKAFKA}, 'mock', '--brokers', 2, '--topic', "$topic:$partitions" ],
	'<', \$mock{in}, '>', \$mock{out}, '2>', $mock{log}, $mock{timeout});
$mock{harness}->pump until $mock{out} =~ /\n/;
my ($bootstrap) = $mock{out} =~ /^(\S+)\n/;
note "mock cluster: $bootstrap";

# One control command; returns the mock's answer (ok or error: ...).
sub mock_command
{
	my ($command) = @_;
	my $answered = () = $mock{out} =~ /\n/g;
	$mock{timeout}->start(30);
	$mock{in} .= "$command\n";
	$mock{harness}->pump while (() = $mock{out} =~ /\n/g) == $answered;
	my ($answer) = $mock{out} =~ /([^\n]*)\n\z/;
	return $answer;
}

# The group's committed offsets, "partition:offset,..." in partition order
# (offset "-" where it has none), or undef when sckafka committed got no
# answer within $timeout_ms.
sub committed
{
	my ($timeout_ms) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ $ENV{SC_SCKAFKA}, 'committed', '--bootstrap', $bootstrap,
			'--group', $group, '--topic', $topic, '--timeout', $timeout_ms // 10000 ],
		'<', \undef, '>', \$out, '2>', \$err);
	note "sckafka committed: $err" if !$ok;
	return undef if !$ok;
	return join(',', map { join(':', split ' ') } split /\n/, $out);
}

for my $p (0 .. $partitions - 1)
{
	is(mock_command("leader $topic $p 1"), 'ok', "partition $p is led by broker 1");
}
is(mock_command("coordinator group $group 2"), 'ok',
	"the coordinator of group $group is broker 2");

# ---------------------------------------------------------------- the cube

my $node = sc_node('progress_coord');

# Everything StreamcubeTest produces or reads goes to the mock.
$ENV{SC_KAFKA} = $bootstrap;
$node->safe_psql('postgres',
	"SELECT streamcube_add_cluster('mock', '$bootstrap', "
	  . "'{\"session.timeout.ms\": \"$session_timeout_ms\"}')");

sub cube_positions
{
	return join(',', split /\n/, $node->safe_psql('postgres',
		"SELECT partition || ':' || position FROM streamcube.consume_positions p "
		  . "JOIN streamcube.cubes c USING (cube_id) "
		  . "WHERE c.relid = 'coord'::regclass ORDER BY partition"));
}

# Poll the group until it shows the cube's positions ($within s at most).
sub committed_matches
{
	my ($what, $within) = @_;
	my ($got, $want);
	my $t0 = time;
	$within //= 30;
	while (time - $t0 < $within)
	{
		$want = cube_positions();
		$got = committed(5000) // 'no answer';
		last if $got eq $want;
		sleep(0.5);
	}
	is($got, $want, $what);
	return;
}

sc_produce($topic, count => $backlog, 'start-ts' => $start_ts,
	'step-ms' => $step_ms, seed => 1);
$node->safe_psql('postgres',
	"SELECT streamcube_create_cube('coord', 'mock', '$topic', "
	  . "'ts timestamptz, country text, device text, amount numeric, qty int', "
	  . "'ts', '1 hour', 'json', '{\"progress_group\": \"$group\"}')");
is($node->safe_psql('postgres', "SELECT streamcube_wait('coord', '60 s')"),
	't', 'the backlog is consumed');
committed_matches('with the coordinator up, the group shows the cube\'s positions');

my ($pid, $started_at) = split /\|/, $node->safe_psql('postgres',
	"SELECT pid, started_at FROM streamcube.consumers WHERE cube = 'coord'::regclass");

# ---------------------------------------------------------------- the outage

$producer = sc_produce_start($topic, count => $live, rate => $rate,
	'start-ts' => $start_ts + $backlog * $step_ms / 1000,
	'step-ms' => $step_ms, seed => 2);
ok($node->poll_query_until('postgres',
		"SELECT count(*) >= $backlog + $rate FROM coord"),
	'live ingest is under way');

is(mock_command('down 2'), 'ok', 'broker 2, the group\'s coordinator, is down');
note 'coordinator down, ' . sc_elapsed();
my $log_at_down = -s $node->logfile;
my $down_at = time;

# Watch the receiver: every sample must show the same process running, a
# batch committed less than 3 s ago, and rows keep arriving.
my (%states, %errors, %pids);
my $oldest_batch_ms = 0;
my $rows_from = $node->safe_psql('postgres', 'SELECT count(*) FROM coord');
my $watch_from = time;
my $samples = 0;
while (time - $watch_from < $outage_watch)
{
	my ($state, $p, $age_ms, $error) = split /\|/, $node->safe_psql('postgres',
		"SELECT state, pid, round(extract(epoch FROM clock_timestamp() - last_batch_at) * 1000), "
		  . "coalesce(last_error, '') FROM streamcube.consumers WHERE cube = 'coord'::regclass"), 4;
	$states{$state}++;
	$pids{$p}++;
	$errors{$error}++ if $error ne '';
	$oldest_batch_ms = $age_ms if $age_ms > $oldest_batch_ms;
	$samples++;
	sleep(0.25);
}
my $rows_during = $node->safe_psql('postgres', 'SELECT count(*) FROM coord') - $rows_from;
my $watched = time - $watch_from;

# What last_error should show: a commit that failed for want of the
# coordinator, or the committer's failure to reach it.  A commit already
# sent to broker 2 when it went down is retried there by librdkafka and
# fails only after socket.timeout.ms (60 s), not session.timeout.ms, and
# the committer's connection errors are logged seldom (identical ones are
# suppressed): when the watch saw neither, last_error is read on, up to
# 75 s into the outage, until it shows one.
my $coordinator_error =
  qr/COMMITFAIL: offset commit failed .*: Local: (?:Waiting for coordinator|Timed out)|GroupCoordinator: .*failed/;
while (!grep({ $_ =~ $coordinator_error } keys %errors) && time - $down_at < 75)
{
	my $error = $node->safe_psql('postgres',
		"SELECT coalesce(last_error, '') FROM streamcube.consumers WHERE cube = 'coord'::regclass");
	$errors{$error}++ if $error ne '';
	sleep(0.1);
}
note sprintf('%d samples over %.1f s: states %s; %d rows; a batch at most %d ms old',
	$samples, $watched, join(', ', map { "$_ x$states{$_}" } sort keys %states),
	$rows_during, $oldest_batch_ms);
note "last_error while the coordinator is down: $_" for sort keys %errors;

is_deeply([ sort keys %states ], ['running'],
	'the receiver stays running while the coordinator is down');
is_deeply([ keys %pids ], [$pid], 'in the same process: no restart');
cmp_ok($oldest_batch_ms, '<', 3000,
	'at every sample the last batch is less than 3 s old: commits to Kafka do not hold batches back');
cmp_ok($rows_during, '>=', int(0.8 * $rate * $watched),
	"rows arrive at the producer's pace ($rate/s)");
ok((grep { $_ =~ $coordinator_error } keys %errors),
	'last_error shows the commits that found no coordinator, or the coordinator not reached');
sc_check_positions_match_rows($node, 'coord', 'during the outage');

is(committed(3000), undef,
	'the coordinator is really away: the group\'s offsets cannot be read');

ok(sc_produce_finish($producer), "the producer delivered all $live messages");
undef $producer;
is($node->safe_psql('postgres', "SELECT streamcube_wait('coord', '60 s')"),
	't', 'everything is consumed with the coordinator still down');

my $k = sc_kafka_contents($topic);
is($k->{count}, $backlog + $live, 'the mock holds every message produced');
sc_check_exact($node, 'coord', $k, 'with the coordinator down');

# A partition that a reassignment gives a running receiver meanwhile is
# read at once: the receiver's commits, waiting for the coordinator, are
# another client's (librdkafka 2.0.2 fetches a partition added to a
# consumer only once that consumer has no commit waiting).
my $more_ts = $start_ts + ($backlog + $live) * $step_ms / 1000;
$node->safe_psql('postgres', "SELECT streamcube_create_replica_set('rs_b')");
$node->safe_psql('postgres', q{SELECT streamcube_reassign('coord', '{"default": [0, 1], "rs_b": [2]}')});
sc_produce($topic, count => 300, 'start-ts' => $more_ts, 'step-ms' => $step_ms, seed => 4);
is($node->safe_psql('postgres', "SELECT streamcube_wait('coord', '60 s')"),
	't', 'a new replica set reads partition 2 with the coordinator down (its commits wait)');
# A steady stream: rs_b commits a batch every few hundred ms, each waiting.
$producer = sc_produce_start($topic, count => 2000, rate => 200, 'start-ts' => $more_ts + 30,
	'step-ms' => $step_ms, seed => 5);
sleep(2);
my $p1 = $node->safe_psql('postgres',
	"SELECT position FROM streamcube.consume_positions p JOIN streamcube.cubes c USING (cube_id) "
	  . "WHERE c.relid = 'coord'::regclass AND partition = 1");
$node->safe_psql('postgres', q{SELECT streamcube_reassign('coord', '{"default": [0], "rs_b": [1, 2]}')});
my $t_moved = time;
my $moved = 0;
while (!$moved && time - $t_moved < 5)
{
	$moved = $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.consume_positions p JOIN streamcube.cubes c USING (cube_id) "
		  . "WHERE c.relid = 'coord'::regclass AND partition = 1 AND replica_set = 'rs_b' AND position > $p1");
	sleep(0.2);
}
ok($moved, sprintf('partition 1, given to that running receiver, is read at once with the coordinator still down (%.1f s)',
		time - $t_moved));
ok(sc_produce_finish($producer), 'the producer delivered everything');
undef $producer;
is($node->safe_psql('postgres', "SELECT streamcube_wait('coord', '60 s')"), 't', 'all consumed');
sc_check_exact($node, 'coord', sc_kafka_contents($topic), 'after the reassignments during the outage');
$more_ts += 30 + 2000 * $step_ms / 1000;

# ---------------------------------------------------------------- back up

# Each commit made during the outage waited session.timeout.ms in
# librdkafka and failed.  Once every batch's own commit is older than that,
# bring the coordinator back: with no batch since, the group must still
# come up to the cube's positions, because a receiver commits its latest
# positions again until they are in (from 1 s after a failed try, doubling
# to 10 s).
ok($node->poll_query_until('postgres',
		"SELECT bool_and(clock_timestamp() - last_batch_at > interval '"
		  . ($session_timeout_ms + 2000) . " ms') FROM streamcube.consumers "
		  . "WHERE cube = 'coord'::regclass"),
	'no batch since the commits of the outage timed out');
my $no_batch_since = $node->safe_psql('postgres',
	"SELECT max(last_batch_at) FROM streamcube.consumers WHERE cube = 'coord'::regclass");
# Each receiver has one commit waiting at a time: during the outage a
# receiver's commits fail one every session.timeout.ms (6 s), each with a
# COMMITFAIL warning, where one commit for every batch would fail (about
# ten a second at the producer's 400 messages a second).
my $outage_s = time - $down_at;
my $commitfails = () = slurp_file($node->logfile, $log_at_down) =~ /COMMITFAIL/g;
cmp_ok($commitfails, '<=', int($outage_s),
	sprintf('one commit at a time: %d COMMITFAIL warnings in the %.0f s of the outage, with one or two receivers',
		$commitfails, $outage_s));
is(mock_command('up 2'), 'ok', 'broker 2 is up again');
note 'coordinator up, ' . sc_elapsed();
# A try may be waiting out session.timeout.ms, the next one 10 s after it.
committed_matches('with no batch since, the failed commits are made again: the group comes up to the cube\'s positions', 60);
is($node->safe_psql('postgres',
		"SELECT max(last_batch_at) = '$no_batch_since' FROM streamcube.consumers "
		  . "WHERE cube = 'coord'::regclass"),
	't', 'no batch brought it there');

sc_produce($topic, count => 30, 'start-ts' => $more_ts, 'step-ms' => $step_ms, seed => 3);
is($node->safe_psql('postgres', "SELECT streamcube_wait('coord', '60 s')"),
	't', 'a batch after the coordinator is back');
committed_matches('its commit brings the group up to the cube\'s positions');
$more_ts += 10;

# ---------------------------------------------------------------- a pause

# A pause closes each receiver's consumer: the positions not committed to
# the group yet are committed before it goes.  With the coordinator's
# answers 100 ms late and a steady stream, a commit is waiting when most
# batches end, so a receiver's last positions are usually not sent yet
# when the pause comes: without the commit on close the group would stay
# behind the cube until it is resumed.
is(mock_command('rtt 2 100'), 'ok', 'the coordinator answers 100 ms late');
$producer = sc_produce_start($topic, count => 1600, rate => 400, 'start-ts' => $more_ts,
	'step-ms' => $step_ms, seed => 6);
sleep(2);
$node->safe_psql('postgres', "SELECT streamcube_pause('coord')");
ok($node->poll_query_until('postgres',
		"SELECT bool_and(state = 'paused') FROM streamcube.consumers WHERE cube = 'coord'::regclass"),
	'both receivers paused in the middle of the stream');
committed_matches('paused: the group shows where the cube stopped', 10);
ok(sc_produce_finish($producer), 'the producer delivered everything');
undef $producer;
is(mock_command('rtt 2 0'), 'ok', 'the coordinator answers at once again');
$node->safe_psql('postgres', "SELECT streamcube_resume('coord')");
is($node->safe_psql('postgres', "SELECT streamcube_wait('coord', '60 s')"),
	't', 'resumed, all consumed');
committed_matches('and the group follows again');

$k = sc_kafka_contents($topic);
sc_check_exact($node, 'coord', $k, 'at the end');
is( $node->safe_psql('postgres',
		"SELECT pid || '|' || started_at FROM streamcube.consumers "
		  . "WHERE cube = 'coord'::regclass AND replica_set = 'default'"),
	"$pid|$started_at", 'the receiver that started before the outage is still the one');
is($node->safe_psql('postgres', 'SELECT count(*) FROM streamcube.dead_letters'),
	'0', 'no dead letters');

$node->stop;
is(mock_command('quit'), 'ok', 'the mock cluster stops');
$mock{harness}->finish;
done_testing();
