
# The Kafka broker goes away in the middle of ingest and comes back: no
# message is lost, none is ingested twice.  The receiver either rides out
# the outage (librdkafka reconnects) or fails and is restarted by the
# launcher; either way it goes on from its committed positions.
#
# This test stops and starts the broker SHARED by all tests (SC_KAFKA_DIR):
# it must not run in parallel with other tests, and it starts the broker
# again whatever happens (END block).

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

my $broker_stopped = 0;

# run-tests' timeout sends SIGTERM: die, so that the END block still runs.
$SIG{TERM} = $SIG{INT} = sub { die "killed by signal $_[0]\n"; };

END
{
	# Whatever happened, leave the shared broker running.
	if ($broker_stopped && !sc_broker_running())
	{
		my $rc = $?;
		eval { sc_broker_start(); };
		diag "could not start the broker again: $@" if $@;
		$? = $rc;
	}
}

my $partitions = 4;
my $backlog = 100_000;
my $live = 60_000;      # at 4,000/s: produced before, during and after the outage
my $after = 20_000;     # produced once the broker is back
my $start_ts = 1796025600;    # 2026-12-01 00:00:00 UTC
my $step_ms = 100;

my $node = sc_node('outage', 'streamcube.kafka_timeout = 3000');
my $topic = sc_topic('outage');
sc_create_topic($topic, $partitions);

sc_produce($topic, count => $backlog, 'start-ts' => $start_ts,
	'step-ms' => $step_ms, seed => 1);
sc_create_cube($node, 'ev', $topic);

my $producer = sc_produce_start($topic, count => $live, rate => 4000,
	'start-ts' => $start_ts + $backlog * $step_ms / 1000,
	'step-ms' => $step_ms, seed => 2);

ok($node->poll_query_until('postgres', 'SELECT count(*) >= 40000 FROM ev'),
	'ingest is under way');
my $before = $node->safe_psql('postgres', 'SELECT count(*) FROM ev');
note "stopping the broker at $before rows, " . sc_elapsed();

$broker_stopped = 1;
sc_broker_stop();
ok(!sc_broker_running(), 'the broker is stopped');

# Watch streamcube.consumers for a while; returns the states seen and the
# samples that were not 'running' but showed no last_error.
sub watch
{
	my ($seconds, $label) = @_;
	my (%states, %errors, @unexplained);
	my $until = time + $seconds;
	while (time < $until)
	{
		my $r = $node->safe_psql('postgres',
			"SELECT state, coalesce(last_error, '') FROM streamcube.consumers");
		my ($state, $error) = split /\|/, $r, 2;
		$states{$state}++;
		$errors{$error}++ if $error ne '';
		push @unexplained, $state if $state ne 'running' && $error eq '';
		sleep 0.2;
	}
	note "$label: receiver states: "
	  . join(', ', map { "$_ x$states{$_}" } sort keys %states);
	note "$label: last_error: $_" for sort keys %errors;
	return (\%states, \@unexplained);
}

# The view says so within seconds: state disconnected, since when, and a
# lag in time that rises while Kafka does not answer (the producer goes
# on writing into librdkafka's queue: messages wait, as far as anyone
# here can tell).
my $stopped_at = time;
ok( $node->poll_query_until('postgres',
		"SELECT state = 'disconnected' AND disconnected_since IS NOT NULL FROM streamcube.consumers"),
	'the receiver shows as disconnected while the broker is down')
  or diag $node->safe_psql('postgres', 'SELECT * FROM streamcube.consumers');
my $seen_after = time - $stopped_at;
cmp_ok($seen_after, '<', 10, 'state disconnected within 10 s of the broker stopping');
note sprintf 'disconnected shown after %.1f s', $seen_after;
my $lag1 = $node->safe_psql('postgres', 'SELECT lag_seconds FROM streamcube.consumers');
sleep 3;
my $lag2 = $node->safe_psql('postgres', 'SELECT lag_seconds FROM streamcube.consumers');
note "lag_seconds while disconnected: $lag1, then $lag2";
cmp_ok($lag2, '>=', $lag1 + 2.5, 'lag_seconds rises while Kafka does not answer');
cmp_ok($lag2, '>=', 3, 'lag_seconds counts from the last answer');
isnt($node->safe_psql('postgres', 'SELECT lag FROM streamcube.consumers'), '',
	'lag in messages still shows the last known ends');
is( $node->safe_psql('postgres',
		"SELECT state, unhealthy_since IS NOT NULL, lag_seconds >= 3 FROM streamcube.health WHERE cube = 'ev'::regclass"),
	'disconnected|t|t', 'streamcube.health: the cube is disconnected, since when, and its lag in time');

# Meanwhile the receiver stays up (librdkafka reconnects by itself; were
# it to fail instead, the launcher would restart it: either is fine,
# stopping or pausing is not), and nothing is lost or read twice.
my ($states) = watch(5, 'broker down');
is_deeply([ grep { !/^(disconnected|running|starting|failed)$/ } keys %$states ], [],
	'the receiver is disconnected (or failing and restarted) while the broker is down');
sc_check_positions_match_rows($node, 'ev', 'during the outage');

# A receiver that starts while the broker is down (here: PostgreSQL is
# restarted during the outage) cannot reach Kafka: it fails, says why in
# streamcube.consumers.last_error, and is restarted with back-off.
$node->restart;
sc_check_positions_match_rows($node, 'ev', 'after a restart during the outage');
ok( $node->poll_query_until('postgres',
		"SELECT state = 'failed' AND last_error LIKE '%Kafka%' FROM streamcube.consumers"),
	'a receiver started while the broker is down fails with a Kafka error')
  or diag $node->safe_psql('postgres', 'SELECT * FROM streamcube.consumers');
note 'last_error: '
  . $node->safe_psql('postgres', 'SELECT last_error FROM streamcube.consumers');
my (undef, $unexplained) = watch(8, 'broker down, receiver restarting');
is(scalar(@$unexplained), 0,
	'while it fails and is restarted, its last error stays visible')
  or diag 'samples without last_error, by state: ' . join(', ', @$unexplained);

sc_broker_start();
$broker_stopped = 0;
ok(sc_broker_running(), 'the broker runs again');

# Not failed for good: running again after the launcher's back-off.
ok($node->poll_query_until('postgres',
		"SELECT state = 'running' FROM streamcube.consumers"),
	'the receiver is running after the broker is back')
  or diag $node->safe_psql('postgres', 'SELECT * FROM streamcube.consumers');

# Healthy again, last_error clears: what it was moves to previous_error.
ok( $node->poll_query_until('postgres',
		"SELECT state = 'running' AND last_error IS NULL AND previous_error IS NOT NULL "
		  . "AND disconnected_since IS NULL FROM streamcube.consumers"),
	'once healthy, last_error is cleared and kept as previous_error')
  or diag $node->safe_psql('postgres', 'SELECT * FROM streamcube.consumers');
note 'previous_error: '
  . $node->safe_psql('postgres', 'SELECT previous_error FROM streamcube.consumers');
is( $node->safe_psql('postgres',
		"SELECT state, unhealthy_since IS NULL, last_error IS NULL FROM streamcube.health WHERE cube = 'ev'::regclass"),
	'running|t|t', 'streamcube.health: running again, healthy, no error');

ok(sc_produce_finish($producer),
	"the producer delivered all $live messages across the outage");
sc_produce($topic, count => $after,
	'start-ts' => $start_ts + ($backlog + $live) * $step_ms / 1000,
	'step-ms' => $step_ms, seed => 3);

is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"),
	't', 'streamcube_wait: everything in Kafka is consumed');
note 'consumed, ' . sc_elapsed();

my $k = sc_kafka_contents($topic);
my $produced = $backlog + $live + $after;
if ($k->{count} != $produced)
{
	# The test producer is not idempotent: a retried produce request may
	# have been written twice by the broker.  Kafka's contents stay the
	# reference for the cube either way.
	diag "Kafka holds $k->{count} messages, $produced were produced";
}
is($k->{good}, $k->{count}, 'every message in Kafka is a good event');
sc_check_exact($node, 'ev', $k, 'after a broker outage');
sc_check_positions_match_rows($node, 'ev', 'at the end');
sc_wait_positions_at_high($node, 'ev', $k, 'at the end');
is($node->safe_psql('postgres', 'SELECT count(*) FROM streamcube.dead_letters'),
	'0', 'no dead letters');

$node->stop;
done_testing();
