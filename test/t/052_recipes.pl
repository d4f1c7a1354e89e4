
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
#  3. "Backfill a range" and "Move a cube to a new table layout" from the
#     same page, as written (cluster prod, topic events, on the real
#     broker): the backfill holds exactly the messages stamped in November,
#     and the cut-over, under a running producer, puts every message in
#     exactly one of the two cubes.

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
sub q1;
my $node = sc_node('recipes',
	"shared_preload_libraries = 'streamcube,pg_cron'",
	"cron.database_name = 'postgres'",
	"cron.host = '$PostgreSQL::Test::Cluster::test_pghost'");

sub q1 { return $node->safe_psql('postgres', $_[0]); }

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
# The messages' times run from 8 minutes ago to 2 minutes ahead, so that
# however long the cube takes to read them, windows that ended hold rows
# and so does one that has not (when they ended at the time they were
# produced, a seal after the next full minute sealed every row).
sc_produce($topic, count => $count, 'start-ts' => int(time) - 480, 'step-ms' => 300, seed => 3);
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

# --------------------------------- 3. backfill a range, cut over a layout

q1("SELECT streamcube_drop_cube('events')");
q1("SELECT streamcube_add_cluster('prod', '$real_kafka')");
sc_create_topic('events', 4);
# 30 days of events from October 31, one every 15 minutes, stamped an hour
# after their time (sckafka --meta): Kafka timestamps from Oct 31 01:00.
# In order in every partition (--ordered): a range by time is a range of
# offsets only then, and a batch retried into the topic just created once
# landed after later ones (partition 2 began at Nov 24; 2,307 of 2,880).
my $nov1 = 1793491200;    # 2026-11-01 00:00:00 UTC
my $dec1 = 1796083200;    # 2026-12-01 00:00:00 UTC
my $n_hist = 3000;
sc_produce('events', count => $n_hist, 'start-ts' => $nov1 - 86400, 'step-ms' => 900_000,
	meta => 1, seed => 4, ordered => 1);
my $in_november = 0;
{
	my ($o, $e) = ('', '');
	IPC::Run::run([ 'kcat', '-C', '-b', $real_kafka, '-t', 'events', '-o', 'beginning', '-e', '-q',
			'-f', '%T\n' ], '<', \undef, '>', \$o, '2>', \$e) or die "kcat: $e";
	$in_november = grep { $_ >= $nov1 * 1000 && $_ < $dec1 * 1000 } split /\n/, $o;
}
note "$in_november of $n_hist messages are stamped in November";

my $backfill = sql_block_after(slurp('docs/operations.md'), '**Backfill a range**', 'docs/operations.md');
($rc, $out, $err) = $node->psql('postgres', $backfill, extra_params => [ '-v', 'ON_ERROR_STOP=1' ]);
is($rc, 0, '"Backfill a range" runs as written') or diag "psql: $err";
like($out, qr/\bt\z/, 'its streamcube_wait says the backfill is done');
is(q1('SELECT count(*), count(DISTINCT (_partition, _offset)) FROM events_november'),
	"$in_november|$in_november", 'the backfill holds exactly the messages stamped in November, once each');
is(q1("SELECT paused, stop_reached_at IS NOT NULL FROM streamcube.cube_status WHERE cube = 'events_november'::regclass"),
	't|t', 'and stopped at its end by itself');

# The cut-over, with a producer writing all along.
q1("SELECT streamcube_create_cube('events', 'prod', 'events', "
	  . "'ts timestamptz, country text, amount numeric', 'ts', '1 day', 'json')");
is(q1("SELECT streamcube_wait('events', '60 s')"), 't', 'cut-over: the old cube caught up');
{
	local $ENV{SC_KAFKA} = $real_kafka;
	$generator = sc_produce_start('events', count => 4000, rate => 1000,
		'start-ts' => int(time), 'step-ms' => 1, seed => 5);
}
sleep 1;
my $cutover = sql_block_after(slurp('docs/operations.md'), '**Move a cube to a new table layout**',
	'docs/operations.md');
($rc, $out, $err) = $node->psql('postgres', $cutover, extra_params => [ '-v', 'ON_ERROR_STOP=1' ]);
is($rc, 0, '"Move a cube to a new table layout" runs as written') or diag "psql: $err";
ok(sc_produce_finish($generator), 'the producer delivered its 4,000 messages');
$generator = undef;
is(q1("SELECT streamcube_wait('events_v2', '60 s')"), 't', 'cut-over: the new cube caught up');
my $total = $n_hist + 4000;
is(q1('SELECT count(*), count(DISTINCT (_partition, _offset)) FROM events_all'), "$total|$total",
	"cut-over: every message in exactly one of the two cubes ($total)");
cmp_ok(q1('SELECT count(*) FROM events_v2'), '>', 0, 'cut-over: the new cube took the messages after the stop point');

$node->stop;
done_testing();
