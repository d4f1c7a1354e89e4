
# Limits that are never silent.
#
#   A. A receiver consumes every partition of a topic of 300 partitions
#      (more than the 256 a slot kept before 0.3.0): streamcube.consumers
#      shows all of them, streamcube_wait() returns true, the cube is
#      exact.  With streamcube.max_receiver_partitions below the number
#      of partitions, the receiver does not start and says why.
#   B. With every receiver slot taken (streamcube.max_receivers = 2), a new
#      cube is created with a WARNING, shows in streamcube.consumers as
#      waiting with the reason, streamcube_wait() returns false at once
#      with that reason, and the launcher's log names the cube.  Once a
#      slot is free, the cube is consumed exactly.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;
use Time::HiRes qw(sleep);

sc_require_env();

my $start_ts = 1796025600;    # 2026-12-01 00:00:00 UTC
my $node = sc_node('limits', 'streamcube.max_receivers = 2', 'streamcube.launcher_naptime = 500');

# ---------------------------------------------------------------- A
my $wide_topic = sc_topic('wide');
sc_create_topic($wide_topic, 300);
sc_produce($wide_topic, count => 6000, partitions => 300, 'start-ts' => $start_ts, 'step-ms' => 500, seed => 30);
sc_create_cube($node, 'wide', $wide_topic);
is($node->safe_psql('postgres', "SELECT streamcube_wait('wide', '120 s')"),
	't', 'the cube over 300 partitions is consumed');
is($node->safe_psql('postgres',
		"SELECT cardinality(partitions), cardinality(positions), lag FROM streamcube.consumers WHERE cube = 'wide'::regclass"),
	'300|300|0', 'streamcube.consumers shows all 300 partitions of its receiver');
sc_check_exact($node, 'wide', sc_kafka_contents($wide_topic, 6000), 'cube over 300 partitions');

$node->append_conf('postgresql.conf', "streamcube.max_receiver_partitions = 100\n");
$node->restart;
ok($node->poll_query_until('postgres',
		"SELECT last_error LIKE '%has 300 partitions, more than streamcube.max_receiver_partitions (100)%' "
		  . "FROM streamcube.consumers WHERE cube = 'wide'::regclass"),
	'with max_receiver_partitions = 100 the receiver does not start, and says why')
  or diag $node->safe_psql('postgres', 'SELECT state, last_error FROM streamcube.consumers');
$node->safe_psql('postgres', "SELECT streamcube_drop_cube('wide')");
$node->append_conf('postgresql.conf', "streamcube.max_receiver_partitions = 1024\n");
$node->restart;

# ---------------------------------------------------------------- B
my $topic = sc_topic('slots');
sc_create_topic($topic, 2);
sc_produce($topic, count => 1000, 'start-ts' => $start_ts, 'step-ms' => 1000, seed => 31);
sc_create_cube($node, 'a', $topic);
sc_create_cube($node, 'b', $topic);
my $log_offset = -s $node->logfile;
my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_create_cube('c', 'k', '$topic', 'ts timestamptz, country text, device text, amount numeric, qty int', 'ts')");
is($ret, 0, 'a third cube is created with two slots taken');
like($err, qr/WARNING:  cube "c" needs 1 receiver slot, and only 0 of the 2 are free/,
	'with a WARNING that says no slot is free');
ok($node->poll_query_until('postgres',
		"SELECT state = 'waiting' AND last_error LIKE 'no receiver slot is free: all 2 receiver slots%' "
		  . "FROM streamcube.consumers WHERE cube = 'c'::regclass"),
	'streamcube.consumers shows cube c waiting, and why')
  or diag $node->safe_psql('postgres', 'SELECT cube, state, last_error FROM streamcube.consumers');
my $t0 = time;
($ret, $out, $err) = $node->psql('postgres', "SELECT streamcube_wait('c', '60 s')");
is($out, 'f', 'streamcube_wait() on the waiting cube is false');
cmp_ok(time - $t0, '<', 10, 'at once, not after its timeout');
like($err, qr/replica set "default" of cube "c" has no receiver: all 2 receiver slots are in use/, 'and says why');
my $named = 0;
for (1 .. 100)
{
	$named = sc_log_since($node, $log_offset) =~
	  /1 receiver cannot start: all 2 receiver slots are in use\n.*DETAIL:  Not consumed: public\.c \(default\)/;
	last if $named;
	sleep 0.1;
}
ok($named, 'the launcher log names the cube that is not consumed');

$node->safe_psql('postgres', "SELECT streamcube_drop_cube('b')");
ok($node->poll_query_until('postgres',
		"SELECT state = 'running' FROM streamcube.consumers WHERE cube = 'c'::regclass"),
	'once b is dropped and its slot freed, cube c gets a receiver');
is($node->safe_psql('postgres', "SELECT streamcube_wait('c', '60 s')"),
	't', 'and cube c is consumed');
sc_check_exact($node, 'c', sc_kafka_contents($topic, 1000), 'cube c');

$node->stop;
done_testing();
