
# Workers killed during ingest: the launcher (pg_terminate_backend) comes
# back and adopts the receivers that kept running, never starting a second
# one for the same partitions; a receiver killed the same way is restarted
# by the launcher with its last error visible meanwhile.  Either way every
# message lands exactly once.

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
my $backlog = 60_000;
my $live = 60_000;
my $total = $backlog + $live;
my $start_ts = 1796025600;    # 2026-12-01 00:00:00 UTC

my $node = sc_node('terminate');
my $topic = sc_topic('terminate');
sc_create_topic($topic, $partitions);
sc_produce($topic, count => $backlog, 'start-ts' => $start_ts, 'step-ms' => 100, seed => 1);

# Two replica sets: two receivers, partitions {0,2} and {1,3}.
sc_create_cube($node, 'ev', $topic, '{"replica_sets": ["left", "right"]}');
my $producer = sc_produce_start($topic, count => $live, rate => 6000,
	'start-ts' => $start_ts + $backlog / 10, 'step-ms' => 100, seed => 2);

ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM streamcube.consumers WHERE state = 'running'"),
	'two receivers run');
ok($node->poll_query_until('postgres', 'SELECT count(*) >= 20000 FROM ev'),
	'ingest is under way');

# 1. The launcher dies; the postmaster starts a new one, which adopts the
#    running receivers instead of starting more.
my $launcher = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'streamcube launcher'");
my $receivers = $node->safe_psql('postgres',
	"SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity "
	  . "WHERE backend_type = 'streamcube receiver'");
$node->safe_psql('postgres', "SELECT pg_terminate_backend($launcher)");
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'streamcube launcher' "
		  . "AND pid <> $launcher"),
	'a new launcher runs');
# give the new launcher a few reconciliations
$node->safe_psql('postgres', 'SELECT pg_sleep(2)');
is( $node->safe_psql('postgres',
		"SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity "
		  . "WHERE backend_type = 'streamcube receiver'"),
	$receivers,
	'the new launcher adopted the same two receivers and started no other');
sc_check_positions_match_rows($node, 'ev', 'after the launcher restart');

# 2. A receiver dies; the launcher restarts it (after a back-off of about a
#    second) and the consumers view says why it went away.
my $victim = $node->safe_psql('postgres',
	"SELECT pid FROM streamcube.consumers WHERE replica_set = 'left'");
$node->safe_psql('postgres', "SELECT pg_terminate_backend($victim)");
ok( $node->poll_query_until('postgres',
		"SELECT last_error LIKE 'receiver was terminated%' FROM streamcube.consumers "
		  . "WHERE replica_set = 'left'"),
	'the consumers view shows why the receiver went away');
ok( $node->poll_query_until('postgres',
		"SELECT state = 'running' AND pid <> $victim FROM streamcube.consumers "
		  . "WHERE replica_set = 'left'"),
	'the launcher restarted the receiver');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'streamcube receiver'"),
	'2', 'still exactly two receivers');

ok(sc_produce_finish($producer), "the producer delivered all $live messages");
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"),
	't', 'streamcube_wait: everything in Kafka is consumed');

my $k = sc_kafka_contents($topic);
is($k->{count}, $total, "Kafka holds the $total messages produced");
sc_check_exact($node, 'ev', $k, 'after killing the launcher and a receiver');
sc_check_positions_match_rows($node, 'ev', 'at the end');
is( $node->safe_psql('postgres',
		"SELECT string_agg(replica_set || ':' || partitions::text, ' ' ORDER BY replica_set) "
		  . "FROM streamcube.consumers"),
	'left:{0,2} right:{1,3}', 'the partitions stayed with their replica sets');

$node->stop;
done_testing();
