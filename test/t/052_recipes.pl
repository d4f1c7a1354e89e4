
# The README tour and the operations recipes run as printed.
#
#  1. The tour: the SQL block under "A five-minute tour" in README.md,
#     taken from the file (so the two cannot drift), pasted as one block
#     into one psql session with ON_ERROR_STOP, after the quickstart's
#     set-up: its embedded Kafka (librdkafka's mock cluster, 3 brokers,
#     topic demo with 4 partitions), its two minutes of backlog and live
#     generator (sckafka produce --meta), and the SQL that ./quickstart
#     runs (taken from the quickstart script, likewise).  It must run to
#     its end, drop step included.
#  2. "Replay the last hour" from docs/operations.md, on a cube of the real
#     broker with sealed and active windows: as written, and afterwards the
#     cube holds every message exactly once.

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

my $pkglibdir = `pg_config --pkglibdir`;
chomp $pkglibdir;
plan skip_all => 'pg_cron is not installed' unless -e "$pkglibdir/pg_cron.so";

my $root = "$FindBin::RealBin/../..";

# The text of a file of the repository.
sub slurp
{
	my ($path) = @_;
	open my $fh, '<', "$root/$path" or die "cannot read $path: $!";
	local $/;
	my $text = <$fh>;
	close $fh;
	return $text;
}

# The first ```sql block after $marker in $text.
sub sql_block_after
{
	my ($text, $marker, $what) = @_;
	my $at = index($text, $marker);
	die "$what: \"$marker\" not found" if $at < 0;
	my ($block) = substr($text, $at) =~ /```sql\n(.*?)\n```/s
	  or die "$what: no ```sql block after \"$marker\"";
	return $block;
}

my %mock = (in => '', out => '');
my $generator;

# run-tests' timeout sends SIGTERM: die, so that the END block still runs.
$SIG{TERM} = $SIG{INT} = sub { die "killed by signal $_[0]\n"; };

END
{
	my $rc = $?;
	eval { $generator->{harness}->kill_kill if $generator; 1 };
	eval { $mock{harness}->kill_kill if $mock{harness}; 1 };
	$? = $rc;
}

my $real_kafka = $ENV{SC_KAFKA};
my $node = sc_node('recipes',
	"shared_preload_libraries = 'streamcube,pg_cron'",
	"cron.database_name = 'postgres'",
	"cron.host = '$PostgreSQL::Test::Cluster::test_pghost'");

# ------------------------------------------------------------ 1. the tour

$mock{timeout} = IPC::Run::timeout(30);
$mock{log} = PostgreSQL::Test::Utils::tempdir() . '/mock.log';
$mock{harness} = IPC::Run::start(
	[ $ENV{SC_SCKAFKA}, 'mock', '--brokers', 3, '--topic', 'demo:4' ],
	'<', \$mock{in}, '>', \$mock{out}, '2>', $mock{log}, $mock{timeout});
$mock{harness}->pump until $mock{out} =~ /\n/;
my ($bootstrap) = $mock{out} =~ /^(\S+)\n/;
$mock{timeout}->start(3600);
note "embedded Kafka: $bootstrap";

my $quickstart = slurp('quickstart');
my ($backlog_count, $backlog_back, $backlog_step) =
  $quickstart =~ /produce --bootstrap "\$\(bootstrap\)" --topic demo --count (\d+) \\\n\s+--start-ts \$\(\( \$\(date \+%s\) - (\d+) \)\) --step-ms (\d+)/
  or die 'the quickstart\'s backlog command not found';
my ($demo_sql) = $quickstart =~ /sql -v bootstrap="\$boot" <<'EOF'\n(.*?)\nEOF\n/s
  or die 'the quickstart\'s demo SQL not found';
{
	local $ENV{SC_KAFKA} = $bootstrap;
	sc_produce('demo', count => $backlog_count, 'start-ts' => int(time) - $backlog_back,
		'step-ms' => $backlog_step, meta => 1, seed => 1);
	$generator = sc_produce_start('demo', count => 0, rate => 500, meta => 1, seed => 2);
}
my ($rc, $out, $err) = $node->psql('postgres', $demo_sql,
	extra_params => [ '-v', "bootstrap=$bootstrap", '-v', 'ON_ERROR_STOP=1' ]);
is($rc, 0, "the quickstart's SQL runs") or diag $err;
is($node->safe_psql('postgres', "SELECT streamcube_wait('events', '60 s')"), 't',
	'the demo cube reads its backlog');

my $tour = sql_block_after(slurp('README.md'), '## A five-minute tour', 'README.md');
note 'the tour: ' . scalar(split /\n/, $tour) . ' lines';
my $t0 = time;
($rc, $out, $err) = $node->psql('postgres', $tour,
	extra_params => [ '-v', 'ON_ERROR_STOP=1' ]);
note sprintf 'the tour ran in %.1f s', time - $t0;
is($rc, 0, 'the README tour runs as printed, to its end') or diag "psql: $err";
unlike($err, qr/ERROR/, 'no statement of it fails');
like($out, qr/"reassign_id": 1/, 'step 7 reassigned');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.cubes"), '0', 'step 9 dropped every cube it made');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.kafka_clusters WHERE name = 'demo'"), '0',
	'and the cluster');

$generator->{harness}->kill_kill;
$generator = undef;

# ----------------------------------------------- 2. replay the last hour

my $topic = sc_topic('replay');
sc_create_topic($topic, 4);
my $count = 2000;
sc_produce($topic, count => $count, 'start-ts' => int(time) - 600, 'step-ms' => 300, seed => 3);
$node->safe_psql('postgres',
	"SELECT streamcube_create_cube('events', 'k', '$topic', "
	  . "'ts timestamptz, country text, device text, amount numeric, qty int', "
	  . "'ts', '1 minute', 'json')");
is($node->safe_psql('postgres', "SELECT streamcube_wait('events', '60 s')"), 't',
	'replay: the cube read every message');
cmp_ok($node->safe_psql('postgres', "SELECT streamcube_seal('events')"), '>', 5,
	'replay: the windows that ended are sealed');
is( $node->safe_psql('postgres',
		"SELECT bool_or(state = 'sealed') AND bool_or(state = 'active') "
		  . "FROM streamcube.segments WHERE cube = 'events'::regclass AND rows > 0"),
	't', 'replay: rows in sealed windows and in active ones');

my $recipe = sql_block_after(slurp('docs/operations.md'), '**Replay the last hour**',
	'docs/operations.md');
($rc, $out, $err) = $node->psql('postgres', $recipe, extra_params => [ '-v', 'ON_ERROR_STOP=1' ]);
is($rc, 0, '"Replay the last hour" runs as written') or diag "psql: $err";
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.position_changes WHERE cube = 'events'::regclass "
		  . "AND requested LIKE 'timestamp %'"),
	'4', 'every partition was set back by time (the producer stamped the messages now)');
is($node->safe_psql('postgres', "SELECT streamcube_wait('events', '60 s')"), 't',
	'replay: read again');
is( $node->safe_psql('postgres',
		'SELECT count(*), count(DISTINCT (_partition, _offset)) FROM events'),
	"$count|$count", "replay: every message exactly once ($count rows)");
is($node->safe_psql('postgres', 'SELECT count(*) FROM streamcube.dead_letters'), '0',
	'replay: no dead letters');

$node->stop;
done_testing();
