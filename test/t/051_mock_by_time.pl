
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

$node->stop;
done_testing();
