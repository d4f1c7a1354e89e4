
# A cube of two topics while the Kafka broker is down, and after: the
# views tell the truth for it as for a cube of one topic (t/012), and no
# message of either topic is lost or read twice.
#
# - Both receivers (two replica sets, each with partitions of both topics)
#   show disconnected within seconds, with a lag in time that rises.
# - streamcube.lag(), which asks Kafka per topic, answers within its
#   timeouts (an error that names Kafka, or rows), never hangs.
# - A receiver that starts while the broker is down (PostgreSQL restarted)
#   fails with a Kafka error, visible, and is restarted.
# - Once the broker is back: running, healthy, and each topic exact.
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

my $start_ts = 1796025600;    # 2026-12-01 00:00:00 UTC
my $node = sc_node('topics_outage', 'streamcube.kafka_timeout = 3000');
my @topics = map { sc_topic("outage_t$_") } (1, 2);
sc_create_topic($_, 2) for @topics;
sc_produce($_, count => 20_000, 'start-ts' => $start_ts, seed => 1) for @topics;
$node->safe_psql('postgres',
	"SELECT streamcube_create_replica_set('oa'), streamcube_create_replica_set('ob')");
sc_create_cube($node, 'ev', '[' . join(', ', map { "\"$_\"" } @topics) . ']',
	'{"replica_sets": ["oa", "ob"]}');
# The view shows what each receiver holds: poll, since a receiver takes its
# partitions a moment after the cube is created.
my $held_sql =
    "SELECT string_agg(replica_set || '=' || array_to_string(topics, ','), ' ' ORDER BY replica_set) "
  . "FROM streamcube.consumers WHERE cube = 'ev'::regclass";
my $held_want = "oa=$topics[0],$topics[1] ob=$topics[0],$topics[1]";
ok($node->poll_query_until('postgres', $held_sql, $held_want),
	'each replica set reads a partition of each topic')
  or diag "held: " . $node->safe_psql('postgres', $held_sql);

my @producers = map {
	sc_produce_start($_, count => 30_000, rate => 2000, 'start-ts' => $start_ts + 3600, seed => 2)
} @topics;
ok($node->poll_query_until('postgres', 'SELECT count(*) >= 45000 FROM ev'), 'ingest is under way');

$broker_stopped = 1;
sc_broker_stop();
ok(!sc_broker_running(), 'the broker is stopped');

my $stopped_at = time;
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 2 AND bool_and(state = 'disconnected' AND disconnected_since IS NOT NULL) "
		  . "FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'both receivers of the cube of two topics show as disconnected')
  or diag $node->safe_psql('postgres', 'SELECT * FROM streamcube.consumers');
my $seen_after = time - $stopped_at;
cmp_ok($seen_after, '<', 10, 'disconnected within 10 s of the broker stopping');
note sprintf 'disconnected shown after %.1f s', $seen_after;

my $lag1 = $node->safe_psql('postgres',
	"SELECT min(lag_seconds) FROM streamcube.consumers WHERE cube = 'ev'::regclass");
sleep 3;
my $lag2 = $node->safe_psql('postgres',
	"SELECT min(lag_seconds) FROM streamcube.consumers WHERE cube = 'ev'::regclass");
note "lag_seconds while disconnected: $lag1, then $lag2";
cmp_ok($lag2, '>=', $lag1 + 2.5, 'lag_seconds rises while Kafka does not answer');
is( $node->safe_psql('postgres',
		"SELECT state, unhealthy_since IS NOT NULL FROM streamcube.health WHERE cube = 'ev'::regclass"),
	'disconnected|t', 'streamcube.health: the cube is disconnected, and since when');

# streamcube.lag() asks Kafka for each topic: it answers within its
# timeouts (3 s a round trip here), with an error that says Kafka.
my $t0 = time;
my ($rc, $out, $err) = $node->psql('postgres', "SELECT count(*) FROM streamcube.lag('ev')");
my $took = time - $t0;
note sprintf 'streamcube.lag() while the broker is down: rc %d after %.1f s: %s', $rc, $took, $err || $out;
cmp_ok($took, '<', 15, 'streamcube.lag() does not hang while the broker is down');
like($rc == 0 ? 'answered' : $err, qr/answered|Kafka|broker/i,
	'it answers, or says that Kafka does not');

# A receiver started while the broker is down fails, says why, and is
# restarted with back-off.
$node->restart;
ok( $node->poll_query_until('postgres',
		"SELECT bool_or(state = 'failed' AND last_error LIKE '%Kafka%') FROM streamcube.consumers "
		  . "WHERE cube = 'ev'::regclass"),
	'a receiver started while the broker is down fails with a Kafka error')
  or diag $node->safe_psql('postgres', 'SELECT * FROM streamcube.consumers');
sc_check_positions_match_rows($node, 'ev', 'after a restart during the outage');

sc_broker_start();
$broker_stopped = 0;
ok(sc_broker_running(), 'the broker runs again');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 2 AND bool_and(state = 'running' AND last_error IS NULL AND disconnected_since IS NULL) "
		  . "FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'both receivers run again, healthy')
  or diag $node->safe_psql('postgres', 'SELECT * FROM streamcube.consumers');

ok(sc_produce_finish($_), 'a producer delivered everything across the outage') for @producers;
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '120 s')"),
	't', 'streamcube_wait: everything in Kafka is consumed');
for my $t (@topics)
{
	sc_check_exact_where($node, 'ev', sc_kafka_contents($t), "topic $t, after a broker outage",
		"_topic = '$t'");
}
is( $node->safe_psql('postgres',
		'SELECT count(*) = count(DISTINCT (_topic, _partition, _offset)) FROM ev'),
	't', '(_topic, _partition, _offset) is unique');
sc_check_positions_match_rows($node, 'ev', 'at the end');
is($node->safe_psql('postgres', 'SELECT count(*) FROM streamcube.dead_letters'),
	'0', 'no dead letters');

$node->stop;
done_testing();
