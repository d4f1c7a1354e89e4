
# The owner of a cube is the owner of its table, and its receiver connects
# as that role.
#
#   A. The owner loses LOGIN: the launcher does not start the receiver (it
#      would die at once with FATAL "role ... is not permitted to log in",
#      again and again); streamcube.consumers shows state 'failed' and why.
#      This holds across a server restart.  With LOGIN back the receiver
#      runs again and the cube ends up exact.
#   B. ALTER TABLE ... OWNER TO another role moves the cube: the receiver
#      starts again as the new owner, and ingest goes on exactly.
#   C. DROP EXTENSION streamcube while cubes exist, their receivers run and
#      messages flow: the receivers exit quietly (no ERROR, no FATAL, no
#      non-zero exit in the server log) and none is left.
#
# The node logs the backend type (%b) of every line, so that lines of
# receivers are told apart from the test's own sessions.

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

my $start_ts = 1793491200;    # 2026-11-01 00:00:00 UTC

my $node = sc_node('owner', "log_line_prefix = '%m [%p] %b %q%a '",
	'streamcube.launcher_naptime = 1000');

$node->safe_psql('postgres', q{
	CREATE ROLE alice LOGIN;
	CREATE ROLE bob LOGIN;
	GRANT streamcube_admin TO alice;
	GRANT CREATE ON SCHEMA public TO alice, bob;
});

my $topic = sc_topic('owner');
sc_create_topic($topic, 2);
sc_produce($topic, count => 2000, 'start-ts' => $start_ts, seed => 1);
$node->safe_psql('postgres',
	"SET ROLE alice; SELECT streamcube_create_cube('ev', 'k', '$topic', "
	  . "'ts timestamptz, country text, device text, amount numeric, qty int', "
	  . "'ts', '1 hour', 'json')");
is($node->safe_psql('postgres', "SELECT tableowner FROM pg_tables WHERE tablename = 'ev'"),
	'alice', 'alice owns the cube she created');
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"),
	't', 'the first 2,000 messages are consumed');

# The user name of the cube's receiver, as pg_stat_activity shows it.
sub receiver_user
{
	return $node->safe_psql('postgres',
		"SELECT a.usename || ':' || a.backend_type FROM streamcube.consumers s "
		  . "JOIN pg_stat_activity a USING (pid) WHERE s.cube = 'ev'::regclass");
}
is(receiver_user(), 'alice:streamcube receiver', 'the receiver connects as alice');

# Lines of the server log since $offset that match $re.
sub log_lines
{
	my ($offset, $re) = @_;
	return grep { /$re/ } split /\n/, sc_log_since($node, $offset);
}

# ---------------------------------------------------------------- A
my $log_a = -s $node->logfile;
$node->safe_psql('postgres', 'ALTER ROLE alice NOLOGIN');
my $pid = $node->safe_psql('postgres',
	"SELECT pid FROM streamcube.consumers WHERE cube = 'ev'::regclass");
# The running receiver has its connection; make it start again.
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");

my $cannot_login = qr/^cube (public\.)?ev cannot be consumed: its owner, role "alice", cannot log in/;
ok( $node->poll_query_until('postgres',
		"SELECT state = 'failed' AND last_error LIKE '%cannot log in%' "
		  . "FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'A: owner without LOGIN: the receiver is failed')
  or diag $node->safe_psql('postgres', 'SELECT * FROM streamcube.consumers');
like( $node->safe_psql('postgres',
		"SELECT last_error FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	$cannot_login, 'A: last_error says the owner cannot log in');

# Messages flow meanwhile.
my $producer = sc_produce_start($topic, count => 10_000, rate => 1000,
	'start-ts' => $start_ts + 2000, seed => 2);
ok($node->poll_query_until('postgres',
		"SELECT sum(high_watermark) >= 5000 FROM streamcube_check_cluster('k') WHERE topic = '$topic'"),
	'A: 3,000 more messages are in Kafka');
my $rows = $node->safe_psql('postgres', 'SELECT count(*) FROM ev');
is($rows, 2000, 'A: none of them is ingested while the owner cannot log in');

$node->restart;
ok( $node->poll_query_until('postgres',
		"SELECT state = 'failed' AND last_error LIKE '%cannot log in%' "
		  . "FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'A: after a restart the receiver is still failed, for the same reason');
# Several reconciliations of the launcher (launcher_naptime = 1 s).
sleep 5;
is($node->safe_psql('postgres', 'SELECT count(*) FROM ev'),
	$rows, 'A: still nothing ingested');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'streamcube receiver'"),
	'0', 'A: no receiver process');
# (The receiver terminated above logs its own FATAL "terminating background
# worker"; any other FATAL would be a start that failed.)
my @fatal = grep { !/^\S+ \S+ \S+ \[$pid\] streamcube receiver FATAL:  terminating background worker/ }
  log_lines($log_a, qr/is not permitted to log in|streamcube receiver.*FATAL:/);
is(scalar(@fatal), 0, 'A: no receiver tried to log in as alice (no FATAL in the log)')
  or diag join("\n", @fatal[ 0 .. ($#fatal < 9 ? $#fatal : 9) ]);
# A receiver that ran would have set its pid and start time in the slot.
is($node->safe_psql('postgres',
		"SELECT pid IS NULL AND started_at IS NULL FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	't', 'A: the launcher started no receiver after the restart (no pid, no start time)');

$node->safe_psql('postgres', 'ALTER ROLE alice LOGIN');
ok( $node->poll_query_until('postgres',
		"SELECT state = 'running' FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'A: with LOGIN back the receiver runs');
is(receiver_user(), 'alice:streamcube receiver', 'A: ... as alice');
ok(sc_produce_finish($producer), 'A: the producer delivered all 10,000 messages');
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"),
	't', 'A: everything in Kafka is consumed');
my $k = sc_kafka_contents($topic);
is($k->{count}, 12_000, 'A: Kafka holds the 12,000 messages produced');
sc_check_exact($node, 'ev', $k, 'A: after LOGIN is back');
sc_check_positions_match_rows($node, 'ev', 'A');

# ---------------------------------------------------------------- B
$pid = $node->safe_psql('postgres',
	"SELECT pid FROM streamcube.consumers WHERE cube = 'ev'::regclass");
$node->safe_psql('postgres', 'ALTER TABLE ev OWNER TO bob');
$producer = sc_produce_start($topic, count => 4000, rate => 2000,
	'start-ts' => $start_ts + 12_000, seed => 3);
ok( $node->poll_query_until('postgres',
		"SELECT s.pid <> $pid AND s.state = 'running' AND a.usename = 'bob' "
		  . "FROM streamcube.consumers s JOIN pg_stat_activity a USING (pid) "
		  . "WHERE s.cube = 'ev'::regclass"),
	'B: after OWNER TO bob a new receiver runs as bob')
  or diag $node->safe_psql('postgres', 'SELECT * FROM streamcube.consumers');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid"),
	'0', "B: alice's receiver is gone");
is(receiver_user(), 'bob:streamcube receiver', 'B: the receiver connects as bob');
ok(sc_produce_finish($producer), 'B: the producer delivered all 4,000 messages');
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"),
	't', 'B: everything in Kafka is consumed');
$k = sc_kafka_contents($topic);
is($k->{count}, 16_000, 'B: Kafka holds the 16,000 messages produced');
sc_check_exact($node, 'ev', $k, 'B: after OWNER TO bob');
sc_check_positions_match_rows($node, 'ev', 'B');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'streamcube receiver'"),
	'1', 'B: exactly one receiver');

# ---------------------------------------------------------------- C
my $topic2 = sc_topic('owner2');
sc_create_topic($topic2, 3);
sc_produce($topic2, count => 3000, 'start-ts' => $start_ts, seed => 4);
sc_create_cube($node, 'ev2', $topic2, '{"replica_sets": ["a", "b"]}');
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev2', '60 s')"),
	't', 'C: the second cube consumed its backlog');
my $p1 = sc_produce_start($topic, count => 0, rate => 2000,
	'start-ts' => $start_ts + 16_000, seed => 5);
my $p2 = sc_produce_start($topic2, count => 0, rate => 2000,
	'start-ts' => $start_ts + 3000, seed => 6);
my $before = $node->safe_psql('postgres',
	'SELECT (SELECT count(*) FROM ev) + (SELECT count(*) FROM ev2)');
ok( $node->poll_query_until('postgres',
		"SELECT (SELECT count(*) FROM ev) + (SELECT count(*) FROM ev2) >= $before + 2000"),
	'C: both cubes ingest live messages');
my $receivers = $node->safe_psql('postgres',
	"SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity "
	  . "WHERE backend_type = 'streamcube receiver'");
my @receivers = split /,/, $receivers;
is(scalar(@receivers), 3, "C: three receivers run ($receivers)");

my $log_c = -s $node->logfile;
$node->safe_psql('postgres', 'DROP EXTENSION streamcube');
my $t = time;
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'streamcube receiver'"),
	'C: after DROP EXTENSION no receiver is left');
my $gone_after = time - $t;
cmp_ok($gone_after, '<', 10, sprintf('C: ... within %.1f s', $gone_after));
my $deadline = time + 10;
sleep 0.1 while grep({ kill 0, $_ } @receivers) && time < $deadline;
is(join(',', grep { kill 0, $_ } @receivers), '',
	sprintf('C: the receiver processes have exited (%.1f s after the drop)', time - $t));
sleep 3;    # messages keep coming: would anything start again?
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'streamcube receiver'"),
	'0', 'C: a few seconds later, still no receiver');
sc_produce_kill($_) for $p1, $p2;

my $receiver_re = join('|', @receivers);
my @noisy = log_lines($log_c,
	qr/streamcube receiver\S* (ERROR|FATAL|PANIC):|\[($receiver_re)\] .*(ERROR|FATAL|PANIC):|background worker "streamcube receiver[^"]*" \(PID \d+\) exited with exit code [1-9]/);
is(scalar(@noisy), 0, 'C: no ERROR or FATAL from a receiver, no receiver exited with an error')
  or diag join("\n", @noisy[ 0 .. ($#noisy < 19 ? $#noisy : 19) ]);
my @quiet = log_lines($log_c, qr/streamcube receiver stops: extension streamcube was dropped/);
note 'receivers that logged their quiet exit: ' . scalar(@quiet);
my @launcher = log_lines($log_c, qr/streamcube launcher.*(ERROR|FATAL|PANIC|WARNING):/);
note "launcher after the drop:\n" . join("\n", @launcher) if @launcher;
is($node->safe_psql('postgres', "SELECT count(*) > 0 FROM ev2"),
	't', 'C: the cube tables and their rows are still there');

$node->stop;
done_testing();
