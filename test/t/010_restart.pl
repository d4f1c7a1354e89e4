
# A clean restart of PostgreSQL (pg_ctl restart -m fast) in the middle of
# ingest: the unlogged active segments and consume positions survive a clean
# shutdown, so ingest resumes exactly where it was -- no row lost, none
# twice, and the restarted receiver does not read from the beginning again.

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
my $backlog = 120_000;    # in Kafka before the cube exists
my $live = 80_000;        # produced while ingest runs, across the restart
my $total = $backlog + $live;
my $start_ts = 1796025600;    # 2026-12-01 00:00:00 UTC
my $step_ms = 100;            # 200,000 messages span 5.6 hours: 6 windows

my $node = sc_node('restart');
my $topic = sc_topic('restart');
sc_create_topic($topic, $partitions);

sc_produce($topic, count => $backlog, 'start-ts' => $start_ts,
	'step-ms' => $step_ms, seed => 1);

sc_create_cube($node, 'ev', $topic);

# The rest arrives while the cube consumes, and keeps arriving during the
# restart: messages 120,000.. continue the event time of the backlog.
my $producer = sc_produce_start($topic, count => $live, rate => 8000,
	'start-ts' => $start_ts + $backlog * $step_ms / 1000,
	'step-ms' => $step_ms, seed => 2);

ok($node->poll_query_until('postgres', 'SELECT count(*) >= 60000 FROM ev'),
	'ingest is under way');
sc_check_positions_match_rows($node, 'ev', 'during ingest');

my $before = $node->safe_psql('postgres', 'SELECT count(*) FROM ev');
my $positions_before = $node->safe_psql('postgres',
	'SELECT positions FROM streamcube.consumers');
ok($before > 0 && $before < $total,
	"some but not all rows are in before the restart ($before of $total)");
note 'the producer is ' . (sc_producer_running($producer) ? 'still producing' : 'done');
note "before restart: $before rows, positions $positions_before, " . sc_elapsed();

$node->restart;    # fast mode: a clean shutdown

# Nothing committed before the shutdown is lost, and positions still match
# the rows exactly (they are one transaction).
my $after = $node->safe_psql('postgres', 'SELECT count(*) FROM ev');
cmp_ok($after, '>=', $before,
	"rows committed before the restart are still there ($after >= $before)");
sc_check_positions_match_rows($node, 'ev', 'right after the restart');

ok($node->poll_query_until('postgres',
		"SELECT state = 'running' FROM streamcube.consumers"),
	'the receiver runs again after the restart');

ok(sc_produce_finish($producer), "the producer delivered all $live messages");
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"),
	't', 'streamcube_wait: everything in Kafka is consumed');
note 'consumed, ' . sc_elapsed();

my $k = sc_kafka_contents($topic);
is($k->{count}, $total, "Kafka holds the $total messages produced");
sc_check_exact($node, 'ev', $k, 'after a clean restart');
sc_check_positions_match_rows($node, 'ev', 'at the end');
sc_wait_positions_at_high($node, 'ev', $k, 'at the end');

# The receiver started after the restart read only what was not committed
# before it: had it started again from the beginning, it would have
# ingested all $total rows (and the uniqueness check above would fail).
my $rows_total = $node->safe_psql('postgres',
	'SELECT rows_total FROM streamcube.consumers');
cmp_ok($rows_total, '<=', $total - $before,
	"the restarted receiver ingested only the rest ($rows_total <= $total - $before)");
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.segments WHERE cube = 'ev'::regclass AND rows > 0"),
	'6', 'the rows span 6 one-hour windows');
is($node->safe_psql('postgres', 'SELECT count(*) FROM streamcube.dead_letters'),
	'0', 'no dead letters');

$node->stop;
done_testing();
