
# What a reader sees while windows are sealed and compacted under load.
#
#   A. A REPEATABLE READ reader runs in a loop: it takes its snapshot,
#      counts the cube's rows per hour, waits, and counts again in the same
#      transaction, while a producer writes a replay of the last three hours
#      (and late events into windows already sealed) and
#      streamcube_seal_due() seals and compacts in a loop, as pg_cron would.
#      Both counts of every round are the same (0.2.0: a window sealed in
#      between read as empty), and the cube ends up exact.
#   B. pg_dump, taken again and again while streamcube_seal_due() seals and
#      compacts a paused cube, always holds exactly the cube's rows.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;
use Time::HiRes qw(time sleep);

sc_require_env();

my $seconds = 40;
my $node = sc_node('readers', 'streamcube.launcher_naptime = 500');
my $log_start = -s $node->logfile;

my $topic = sc_topic('readers');
sc_create_topic($topic, 4);
# 5-minute windows: due a minute after they end, compacted to hours.
$node->safe_psql('postgres', q{
	SELECT streamcube_create_cube('ev', 'k', '} . $topic . q{',
	  'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '5 minutes', 'json',
	  '{"grace": "1 minute", "compact": ["1 hour"]}')});

# Three hours of events, replayed over the run; late ones, into the first
# hours, meanwhile.
my $hour0 = int(time / 3600) * 3600 - 4 * 3600;
my $count = 12_000;
my $late = 2_000;
my $replay = sc_produce_start($topic, count => $count, rate => int($count / ($seconds * 0.75)),
	'start-ts' => $hour0, 'step-ms' => 900, seed => 31);
my $latecomer = sc_produce_start($topic, count => $late, rate => int($late / ($seconds * 0.75)),
	'start-ts' => $hour0 + 60, 'step-ms' => 3000, seed => 32);

sub sealer
{
	my ($secs) = @_;
	return IPC::Run::start(
		[ 'bash', '-c',
			"end=\$((SECONDS + $secs)); while [ \$SECONDS -lt \$end ]; do "
			  . 'psql -X -q -d "$0" -c "SELECT streamcube_seal_due()" >/dev/null 2>&1; sleep 0.2; done',
			$node->connstr('postgres') ],
		'<', \undef, '>', \my $o, '2>', \my $e);
}
my $sealer = sealer($seconds + 20);

# ---------------------------------------------------------------- A
my $per_hour = q{SELECT coalesce(string_agg(h || '=' || n, ' ' ORDER BY h), '')
	FROM (SELECT to_char(date_trunc('hour', ts), 'HH24') AS h, count(*) AS n FROM ev GROUP BY 1) s};
my $reader = $node->background_psql('postgres');
my ($rounds, $mismatches, $nonempty) = (0, 0, 0);
my $t_end = time + $seconds;
while (time < $t_end)
{
	$reader->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
	my $first = $reader->query_safe($per_hour);
	$reader->query_safe('SELECT pg_sleep(0.3)');
	my $second = $reader->query_safe($per_hour);
	$reader->query_safe('COMMIT');
	$rounds++;
	$nonempty++ if $first ne '';
	if ($first ne $second)
	{
		$mismatches++;
		diag "round $rounds: snapshot read [$first], then [$second]" if $mismatches <= 5;
	}
}
$reader->quit;
ok(sc_produce_finish($replay), 'the replay was delivered');
ok(sc_produce_finish($latecomer), 'the late events were delivered');
cmp_ok($rounds, '>', 30, "the reader ran $rounds rounds");
is($mismatches, 0, 'every round read the same rows twice from its snapshot');
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '120 s')"), 't', 'everything was consumed');
$sealer->finish;

my $states = $node->safe_psql('postgres',
	"SELECT string_agg(state || ' ' || n, ', ' ORDER BY state) FROM "
	  . "(SELECT state, count(*) AS n FROM streamcube.segments WHERE cube = 'ev'::regclass GROUP BY 1) s");
note "partitions after the run: $states";
like($states, qr/compacted \d+/, 'hours were compacted while the reader ran');
like($states, qr/sealed \d+|compacted/, 'windows were sealed while the reader ran');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.segment_log s JOIN streamcube.cubes c USING (cube_id) "
		  . "WHERE c.relid = 'ev'::regclass AND s.action IN ('sealed', 'compacted')") > 0 ? 't' : 'f',
	't', 'the segment log has the seals and compactions');
sc_check_exact($node, 'ev', sc_kafka_contents($topic, $count + $late), 'after sealing under readers');

# ---------------------------------------------------------------- B
# More windows to seal: a fourth hour, produced and consumed, then the cube
# paused so its rows stay put while pg_dump runs against the seals.
sc_produce($topic, count => 3_000, 'start-ts' => $hour0 + 3 * 3600, 'step-ms' => 1000, seed => 33);
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"), 't', 'the fourth hour was consumed');
$node->safe_psql('postgres', "SELECT streamcube_pause('ev')");
ok($node->poll_query_until('postgres', "SELECT state = 'paused' FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'the cube is paused');
my $rows = $node->safe_psql('postgres', 'SELECT count(*) FROM ev');
my $active_before = $node->safe_psql('postgres',
	"SELECT count(*) FROM streamcube.segments WHERE cube = 'ev'::regclass AND state = 'active' AND rows > 0");
$sealer = sealer(15);
my ($dumps, $wrong, $raced) = (0, 0, 0);
my $t_dump = time + 12;
while (time < $t_dump)
{
	my ($out, $err) = ('', '');

	# pg_dump lists the tables in its snapshot, then locks them one by one:
	# a seal that commits in between has dropped a partition it listed, and
	# its LOCK TABLE fails (docs/operations.md).  Such a dump is taken again;
	# any other failure ends the test.
	if (!IPC::Run::run([ 'pg_dump', '--data-only', '--table=public.ev*', '-d', $node->connstr('postgres') ],
			'<', \undef, '>', \$out, '2>', \$err))
	{
		die "pg_dump failed: $err"
		  unless $err =~ /LOCK TABLE public\.ev\S* IN ACCESS SHARE MODE/ && $err =~ /does not exist/;
		$raced++;
		next;
	}
	my ($n, $in) = (0, 0);
	for my $line (split /\n/, $out)
	{
		if ($line =~ /^COPY public\.ev\S* .* FROM stdin;$/) { $in = 1; next; }
		if ($line eq '\.') { $in = 0; next; }
		$n++ if $in;
	}
	$dumps++;
	$wrong++ if $n != $rows;
	diag "dump $dumps holds $n rows, not $rows" if $n != $rows && $wrong <= 5;
	sleep 0.3;    # room for the seals' locks
}
$sealer->finish;
my $active_after = $node->safe_psql('postgres',
	"SELECT count(*) FROM streamcube.segments WHERE cube = 'ev'::regclass AND state = 'active' AND rows > 0");
cmp_ok($active_after, '<', $active_before, "windows were sealed while pg_dump ran ($active_before, then $active_after active with rows)");
cmp_ok($dumps, '>', 3, "pg_dump ran $dumps times ($raced more lost the race with a seal to a dropped partition)");
is($wrong, 0, "every dump holds exactly the cube's $rows rows");

my $log = sc_log_since($node, $log_start);
unlike($log, qr/terminated by signal|reinitializing/, 'no server process crashed');

$node->stop;
done_testing();
