
# Replays by time on a cluster that cannot look up offsets by time.
# librdkafka's mock cluster (the quickstart's embedded Kafka, sckafka
# mock here) answers every ListOffsets by time with -1, "the end": taken
# at its word, streamcube_set_positions by time moved every partition to
# its end and skipped what it was asked to replay, without a word, and a
# cube created with option start or end by time started at the end or
# reached its stop point at once.  Each is a clear error now (0A000,
# naming the cluster), with nothing changed and nothing created; a time
# after every message still means the end; and a move forward by offset
# says what it skips (a NOTICE, column skipped).  t/033 replays by time
# on the real broker, exactly.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use POSIX qw(strftime floor);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;
use Time::HiRes qw(time sleep);

sc_require_env();

my $partitions = 2;
my $topic = sc_topic('mock_by_time');
my %mock = (in => '', out => '');

# run-tests' timeout sends SIGTERM: die, so that the END block still runs.
$SIG{TERM} = $SIG{INT} = sub { die "killed by signal $_[0]\n"; };

END
{
	my $rc = $?;
	eval { $mock{harness}->kill_kill if $mock{harness}; 1 };
	$? = $rc;
}

$mock{timeout} = IPC::Run::timeout(30);
$mock{log} = PostgreSQL::Test::Utils::tempdir() . '/mock.log';
$mock{harness} = IPC::Run::start(
	[ $ENV{SC_SCKAFKA}, 'mock', '--brokers', 1, '--topic', "$topic:$partitions" ],
	'<', \$mock{in}, '>', \$mock{out}, '2>', $mock{log}, $mock{timeout});
$mock{harness}->pump until $mock{out} =~ /\n/;
my ($bootstrap) = $mock{out} =~ /^(\S+)\n/;
note "mock cluster: $bootstrap";
$mock{timeout}->start(3600);

my $node = sc_node('mock_by_time');
$ENV{SC_KAFKA} = $bootstrap;
$node->safe_psql('postgres', "SELECT streamcube_add_cluster('mock', '$bootstrap')");

# 1,000 messages stamped ten minutes ago to now, one per 600 ms.
my $start = int(time) - 600;
sc_produce($topic, count => 1000, 'start-ts' => $start, 'step-ms' => 600, seed => 1);

sub ts_text
{
	my ($s) = @_;
	return strftime('%Y-%m-%d %H:%M:%S+00', gmtime(floor($s)));
}

my $cols = "'ts timestamptz, country text, device text, amount numeric, qty int'";
$node->safe_psql('postgres',
	"SELECT streamcube_create_cube('ev', 'mock', '$topic', $cols, 'ts', '1 hour', 'json')");
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"), 't',
	'the cube reads the mock cluster');
is($node->safe_psql('postgres', 'SELECT count(*) FROM ev'), '1000', 'all 1,000 messages');
$node->safe_psql('postgres', "SELECT streamcube_pause('ev')");
ok($node->poll_query_until('postgres',
		"SELECT state = 'paused' FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'paused');

# ------------------------------------------------------- set_positions by time

my $before = $node->safe_psql('postgres',
	"SELECT string_agg(partition || ':' || position, ',' ORDER BY partition) "
	  . "FROM streamcube.consume_positions");
my ($rc, $out, $err) = $node->psql('postgres',
	"SELECT * FROM streamcube_set_positions('ev', '{\"timestamp\": \"" . ts_text($start + 300) . "\"}')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
isnt($rc, 0, 'set_positions by time on the mock cluster fails');
like($err, qr/ERROR:  0A000: Kafka cluster "mock" does not look up offsets by time\nDETAIL:  Asked for the first message of partition \d of topic "\Q$topic\E" stamped at or after .*, it answered the end of the partition, though its last message \(offset \d+\) is stamped .*\nHINT:  Nothing was changed\./s,
	'the error names the cluster (0A000), what it answered and why that cannot be');
is( $node->safe_psql('postgres',
		"SELECT string_agg(partition || ':' || position, ',' ORDER BY partition) "
		  . "FROM streamcube.consume_positions"),
	$before, 'no position moved');
is($node->safe_psql('postgres', 'SELECT count(*) FROM streamcube.position_changes'), '0',
	'nothing journalled');

# A time after every message: the end, as on a broker (nothing to check).
is( $node->safe_psql('postgres',
		"SELECT string_agg(partition || ':' || coalesce(skipped, -1), ',' ORDER BY partition) "
		  . "FROM streamcube_set_positions('ev', '{\"timestamp\": \"2100-01-01 00:00+00\"}')"),
	join(',', map { "$_:0" } 0 .. $partitions - 1),
	'a time after every message: the end, where the cube already is (skipped 0)');

# ------------------------------------------------- a move forward says so

$node->safe_psql('postgres', "SELECT streamcube_set_positions('ev', '\"earliest\"')");
($rc, $out, $err) = $node->psql('postgres',
	"SELECT partition, old_position, new_position, skipped "
	  . "FROM streamcube_set_positions('ev', '{\"0\": 100, \"1\": \"latest\"}') ORDER BY 1");
my ($high1) = $node->safe_psql('postgres',
	"SELECT count(*) FROM ev WHERE _partition = 1");
is($out, "0|0|100|100\n1|0|$high1|$high1",
	'column skipped: the offsets each partition moves forward past');
like($err, qr/NOTICE:  cube public.ev moves forward past \d+ offsets it has not read\nDETAIL:  Skipped per partition: partition 0: 100 \(offsets 0 to 99\), partition 1: $high1 \(offsets 0 to \d+\)\./,
	'a NOTICE says how many offsets each partition skips');
($rc, $out, $err) = $node->psql('postgres',
	"SELECT skipped FROM streamcube_set_positions('ev', '{\"0\": 50}')");
is($out, '0', 'a move back skips nothing');
unlike($err, qr/NOTICE/, 'and says nothing');

# ------------------------------------------------- option start and end by time

($rc, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_create_cube('ev_start', 'mock', '$topic', $cols, 'ts', '1 hour', 'json', "
	  . "'{\"start\": \"" . ts_text($start + 300) . "\"}')");
like($err, qr/ERROR:  Kafka cluster "mock" does not look up offsets by time/,
	'option start by time on the mock cluster: the same error');
is($node->safe_psql('postgres', "SELECT to_regclass('ev_start') IS NULL"), 't',
	'no table left behind');
is($node->safe_psql('postgres', 'SELECT count(*) FROM streamcube.cubes'), '1',
	'no cube left behind');

($rc, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_create_cube('ev_end', 'mock', '$topic', $cols, 'ts', '1 hour', 'json', "
	  . "'{\"end\": {\"timestamp\": \"" . ts_text($start + 300) . "\"}}')");
like($err, qr/ERROR:  Kafka cluster "mock" does not look up offsets by time/,
	'option end by time on the mock cluster: the same error');
is($node->safe_psql('postgres', "SELECT to_regclass('ev_end') IS NULL"), 't',
	'no table left behind');

# A stop point by time in the future is refused on any cluster: which
# offset is first stamped at or after it is not known yet (a broker
# answers "the end", and the cube stopped at once with nothing read).
($rc, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_create_cube('ev_end2', 'mock', '$topic', $cols, 'ts', '1 hour', 'json', "
	  . "'{\"end\": {\"timestamp\": \"" . ts_text(time + 7200) . "\"}}')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  22023: stop point timestamp .* of cube public.ev_end2 is in the future\nDETAIL:  .*\nHINT:  Give a time that has passed/s,
	'a stop point by time in the future: 22023, with a hint');
is($node->safe_psql('postgres', "SELECT to_regclass('ev_end2') IS NULL"), 't',
	'no table left behind');

# ------------------------------------- lag while paused, stamps from the future

# The quickstart's generator stamps each message an hour after its event
# (sckafka --meta does the same): a stamp from the future tells no age.
# While a cube is paused its receiver asks Kafka for the ends every 10 s,
# so lag counts what waits, and lag_seconds rises by the server's clock
# from when the partitions were last caught up.
$node->safe_psql('postgres',
	"SELECT streamcube_create_cube('fut', 'mock', '$topic', $cols, 'ts', '1 hour', 'json', "
	  . "'{\"start\": \"latest\"}')");
ok($node->poll_query_until('postgres',
		"SELECT state = 'running' AND lag = 0 AND lag_seconds = 0 FROM streamcube.consumers "
		  . "WHERE cube = 'fut'::regclass"),
	'a cube at the end: lag 0, lag_seconds 0');
$node->safe_psql('postgres', "SELECT streamcube_pause('fut')");
is($node->safe_psql('postgres', "SELECT state, paused_reason, last_error IS NULL FROM streamcube.consumers WHERE cube = 'fut'::regclass"),
	'pausing|paused by streamcube_pause()|t',
	'right after streamcube_pause: state pausing, paused_reason says who, no error')
  if $node->safe_psql('postgres', "SELECT state FROM streamcube.consumers WHERE cube = 'fut'::regclass") eq 'pausing';
ok($node->poll_query_until('postgres',
		"SELECT state = 'paused' FROM streamcube.consumers WHERE cube = 'fut'::regclass"),
	'then paused');
sc_produce($topic, count => 200, 'start-ts' => int(time), 'step-ms' => 1, seed => 4, meta => 1);
ok($node->poll_query_until('postgres',
		"SELECT lag = 200 FROM streamcube.consumers WHERE cube = 'fut'::regclass"),
	'paused, its lag counts the 200 messages that wait (Kafka asked every 10 s)')
  or diag $node->safe_psql('postgres', "SELECT * FROM streamcube.consumers WHERE cube = 'fut'::regclass");
my $l1 = $node->safe_psql('postgres', "SELECT lag_seconds FROM streamcube.consumers WHERE cube = 'fut'::regclass");
sleep 2;
my $l2 = $node->safe_psql('postgres', "SELECT lag_seconds FROM streamcube.consumers WHERE cube = 'fut'::regclass");
note "paused, stamps an hour ahead: lag_seconds $l1, then $l2";
cmp_ok($l1, '>', 0, 'lag_seconds is not 0 while messages stamped in the future wait');
cmp_ok($l2, '>=', $l1 + 1.5, 'and rises by the server\'s clock');
cmp_ok($l2, '<', 600, 'bounded by when the cube was last caught up, not by the stamps');
is( $node->safe_psql('postgres',
		"SELECT state, lag, lag_seconds > 0, catch_up_eta IS NULL, paused_reason FROM streamcube.health WHERE cube = 'fut'::regclass"),
	'paused|200|t|t|paused by streamcube_pause()',
	'streamcube.health: paused, what waits, no time to catch up while paused, and why');
is( $node->safe_psql('postgres',
		"SELECT bool_and(oldest_unconsumed_at > now() AND lag_seconds IS NULL) FROM streamcube.lag('fut') WHERE lag > 0"),
	't', 'streamcube.lag: the oldest stamp is in the future, so lag_seconds says NULL, not 0');
$node->safe_psql('postgres', "SELECT streamcube_resume('fut')");
is($node->safe_psql('postgres', "SELECT streamcube_wait('fut', '60 s')"), 't', 'resumed, it catches up');
is($node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT (_partition, _offset)) FROM fut'),
	'200|200', 'exactly the 200 messages, once each');

# A move back on a cube with roll-ups warns: their partial rows count the
# messages read again, and cannot be deleted by offset as rows can.
$node->safe_psql('postgres',
	"SELECT streamcube_create_rollup('fut', 'fut_per_minute', '1 minute', ARRAY['country'], '{\"n\": \"count(*)\"}')");
$node->safe_psql('postgres', "SELECT streamcube_pause('fut')");
($rc, $out, $err) = $node->psql('postgres', "SELECT count(*) FROM streamcube_set_positions('fut', '\"earliest\"')");
like($err, qr/WARNING:  cube public.fut has roll-ups: the messages it reads again are counted again in their active windows/,
	'a move back on a cube with roll-ups: a WARNING says they count those messages again');

$node->stop;
done_testing();
