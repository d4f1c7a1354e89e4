
# streamcube_alter_cluster under load: a cube consumes through the test
# broker's SASL_PLAINTEXT listener (mechanism PLAIN) while messages flow.
#
#  1. The credentials are rotated (user alice -> user bob): the receiver
#     opens a new consumer in place (same process), at its committed
#     positions, and goes on.
#  2. A wrong password: the receiver cannot authenticate, says so in
#     streamcube.consumers, and consumes nothing more.
#  3. The right password again: it catches up.
#  4. The cluster reaches another Kafka cluster (by its id): the cube
#     pauses and reads nothing until its positions are set there.
#
# At the end the cube holds every message exactly once (count, unique
# (_partition, _offset), per-partition offsets and sums against Kafka),
# the journal holds the four changes with the password masked, and no
# password reached the server log.

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
plan skip_all => 'SC_KAFKA_SASL is not set (test/run-tests sets it)'
  unless $ENV{SC_KAFKA_SASL};

my $ts = 1796083200;    # 2026-12-01 00:00:00 UTC
# Statements hold passwords: the test framework's log_statement = all
# would write them to the log, which is checked below for streamcube's own
# messages.
my $node = sc_node('altercl', 'log_statement = none');
my $topic = sc_topic('altercl');
sc_create_topic($topic, 2);
sc_produce($topic, count => 3000, 'start-ts' => $ts, seed => 1);

$node->safe_psql('postgres',
	"SELECT streamcube_add_cluster('s', '$ENV{SC_KAFKA_SASL}', "
	  . "'{\"security.protocol\": \"SASL_PLAINTEXT\", \"sasl.mechanisms\": \"PLAIN\", "
	  . "\"sasl.username\": \"alice\", \"sasl.password\": \"alice-secret\"}')");
$node->safe_psql('postgres',
	"SELECT streamcube_create_cube('ev', 's', '$topic', "
	  . "'ts timestamptz, country text, device text, amount numeric, qty int', "
	  . "'ts', '1 hour', 'json')");
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"),
	't', 'the cube consumes its topic as alice over SASL/PLAIN');

my $pid = $node->safe_psql('postgres',
	"SELECT pid FROM streamcube.consumers WHERE cube = 'ev'::regclass");
my $producer = sc_produce_start($topic, count => 24000, rate => 1000,
	'start-ts' => $ts + 3000, seed => 2);

sub rows { return $node->safe_psql('postgres', 'SELECT count(*) FROM ev'); }

ok($node->poll_query_until('postgres', 'SELECT count(*) >= 5000 FROM ev'),
	'live messages arrive');

# 1. Rotate the credentials.
my $log = -s $node->logfile;
$node->safe_psql('postgres',
	"SELECT streamcube_alter_cluster('s', properties => "
	  . "'{\"sasl.username\": \"bob\", \"sasl.password\": \"bob-secret\"}')");
my $deadline = time + 30;
sleep 0.2
  until sc_log_since($node, $log) =~ /reconnects: the configuration of Kafka cluster "s" changed/
  || time > $deadline;
like(sc_log_since($node, $log),
	qr/streamcube receiver of cube public\.ev \(default\) reconnects: the configuration of Kafka cluster "s" changed/,
	'the receiver reconnects with the new credentials');
my $after = rows();
ok($node->poll_query_until('postgres', "SELECT count(*) >= $after + 2000 FROM ev"),
	'and goes on consuming as bob');
is( $node->safe_psql('postgres',
		"SELECT pid FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	$pid, 'in the same process: no restart');

# 2. A wrong password.
$node->safe_psql('postgres',
	"SELECT streamcube_alter_cluster('s', properties => '{\"sasl.password\": \"not-bobs\"}')");
ok( $node->poll_query_until('postgres',
		"SELECT last_error LIKE '%SASL authentication error: Authentication failed%' "
		  . "FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'a wrong password shows in streamcube.consumers');
my $stuck = rows();
sleep 2;
is(rows(), $stuck, 'and nothing is consumed meanwhile');

# 3. The right one again.
$node->safe_psql('postgres',
	"SELECT streamcube_alter_cluster('s', properties => '{\"sasl.password\": \"bob-secret\"}')");
# The receiver failed and waits out a growing back-off; a change of its
# cluster restarts it at once.
my $fixed = time;
ok($node->poll_query_until('postgres', "SELECT count(*) >= $stuck + 2000 FROM ev"),
	'with the right password it catches up');
cmp_ok(time - $fixed, '<', 30, 'within seconds, not after the back-off');

# 4. The cluster reaches another Kafka cluster.  There is one broker
# here, so the catalog is made to say that the cube's positions are offsets
# of another cluster: what it would hold after a bootstrap list was pointed
# at a different cluster.
my $real_id = $node->safe_psql('postgres',
	"SELECT kafka_cluster_id FROM streamcube.cubes WHERE relid = 'ev'::regclass");
like($real_id, qr/^[A-Za-z0-9_-]{16,}$/,
	'the cube holds the id of the Kafka cluster its positions are offsets of');
$node->safe_psql('postgres',
	"UPDATE streamcube.cubes SET kafka_cluster_id = 'OtherKafkaClusterId000' WHERE relid = 'ev'::regclass");
$node->safe_psql('postgres',
	"SELECT streamcube_alter_cluster('s', properties => '{\"client.id\": \"moved\"}')");
ok($node->poll_query_until('postgres',
		"SELECT paused FROM streamcube.cubes WHERE relid = 'ev'::regclass"),
	'a cube whose cluster now reaches another Kafka cluster pauses');
like( $node->safe_psql('postgres',
		"SELECT paused_reason FROM streamcube.cubes WHERE relid = 'ev'::regclass"),
	qr/Kafka cluster "s" now reaches another Kafka cluster \(id \Q$real_id\E\) than the one the cube's positions are offsets of \(id OtherKafkaClusterId000\)\. Nothing was read from it\./,
	'and says why, with both ids');
my $held = rows();
sleep 2;
is(rows(), $held, 'nothing is read from the other cluster');
# Setting some partitions only is refused: the others would keep offsets
# of the other cluster.
my ($rc, $out, $err) = $node->psql('postgres',
	"SELECT count(*) FROM streamcube_set_positions('ev', "
	  . "(SELECT jsonb_build_object(min(partition)::text, min(position)) FROM streamcube.lag('ev')))");
like($err, qr/has positions of another Kafka cluster \(id OtherKafkaClusterId000\).*\n.*DETAIL:  Partition \d+ would keep a position of the other cluster/s,
	'setting some positions only is refused');
# The way out when the topic really moved: set the positions it has there
# (here the same offsets), which makes them offsets of that cluster.
$node->safe_psql('postgres',
	"SELECT count(*) FROM streamcube_set_positions('ev', "
	  . "(SELECT jsonb_object_agg(partition::text, position) FROM streamcube.lag('ev')))");
is( $node->safe_psql('postgres',
		"SELECT kafka_cluster_id FROM streamcube.cubes WHERE relid = 'ev'::regclass"),
	$real_id, 'streamcube_set_positions ties the positions to the cluster that answers now');
$node->safe_psql('postgres', "SELECT streamcube_resume('ev')");

ok(sc_produce_finish($producer), 'the producer delivered everything');
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '120 s')"),
	't', 'the cube caught up with the topic');
sc_check_exact($node, 'ev', sc_kafka_contents($topic), 'after three changes of credentials');

# The journal and the log.
is( $node->safe_psql('postgres',
		"SELECT string_agg(format('%s %s', new_value->'properties'->>'sasl.username', "
		  . "new_value->'properties'->>'sasl.password'), ', ' ORDER BY log_id) "
		  . "FROM streamcube.config_log WHERE cluster = 's'"),
	'bob ********, bob ********, bob ********, bob ********',
	'the journal holds the four changes, passwords masked');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.config_log WHERE cluster = 's' AND "
		  . "(old_value::text ~ 'secret|not-bobs' OR new_value::text ~ 'secret|not-bobs')"),
	'0', 'no password in the journal');
unlike(sc_log_since($node, 0), qr/alice-secret|bob-secret|not-bobs/,
	'no password in the server log');

$node->stop;
done_testing();
