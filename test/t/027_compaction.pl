
# Compaction against the real broker, real PostgreSQL and real pg_cron.
#
#   part 1  a backlog of three past days arrives while streamcube_seal_due()
#           runs again and again (what pg_cron runs): windows are sealed and
#           days compacted while their messages and late rows still arrive;
#           the cube is exact, the days are one partition each;
#   part 2  late rows into a compacted day; then a crash (stop -m
#           immediate): the active window is lost and its receiver replays
#           from its checkpoint, which lies before the compacted days'
#           messages: each must be skipped by its window's sealed_upto;
#   part 3  a crash during a compaction (done, not committed): nothing of
#           it remains, the windows are as they were, then pg_cron compacts
#           them;
#   part 4  a cube with many windows under default settings
#           (max_locks_per_transaction = 64): a backlog over 1,200 windows
#           is ingested in bounded batches, streamcube_seal_due() seals a
#           bounded number per call, and streamcube_drop_cube() drops it
#           in steps, by the launcher.
#
# After each part: count, unique (_partition, _offset), per-partition sums
# against what Kafka holds.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX qw(strftime);

sc_require_env();
my $pkglibdir = `pg_config --pkglibdir`;
chomp $pkglibdir;
plan skip_all => 'pg_cron is not installed' unless -e "$pkglibdir/pg_cron.so";

my $day = 86_400;
# Three whole days in the past, and the day before today: all complete.
my $d0 = (int(time / $day) - 4) * $day;

my $node = sc_node('compaction',
	"shared_preload_libraries = 'streamcube,pg_cron'",
	"cron.database_name = 'postgres'",
	"cron.host = '$PostgreSQL::Test::Cluster::test_pghost'",
	'restart_after_crash = on',
	# a year of windows is created 200 at a time between batches
	'streamcube.batch_max_windows = 200');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_cron');
is($node->safe_psql('postgres', 'SHOW max_locks_per_transaction'), '64',
	'max_locks_per_transaction is the default');

sub ts_sql
{
	my ($epoch) = @_;
	return strftime("'%Y-%m-%d %H:%M:%S+00'", gmtime $epoch);
}

sub segments
{
	my ($cube, $from, $to) = @_;
	return $node->safe_psql('postgres',
		"SELECT string_agg(concat_ws(' ', to_char(window_start AT TIME ZONE 'UTC', 'MM-DD HH24'), state, windows), ', ' "
		  . "ORDER BY window_start) FROM streamcube.segments WHERE cube = '$cube'::regclass "
		  . "AND window_start >= " . ts_sql($from) . " AND window_start < " . ts_sql($to));
}

sub wait_cube
{
	my ($cube, $label) = @_;
	is($node->safe_psql('postgres', "SELECT streamcube_wait('$cube', '120 s')"),
		't', "$label: streamcube_wait($cube)");
	return;
}

# ------------------------------------------------------------------ part 1
my $topic = sc_topic('compaction');
sc_create_topic($topic, 3);
# A few events two hours ahead first (windows that stay active all along):
# their first offsets, and so the checkpoints after sealing, lie before the
# backlog (part 2 replays it).
sc_produce($topic, count => 300, rate => 0, 'start-ts' => int(time) + 7200, 'step-ms' => 1_000);
sc_create_cube($node, 'ev', $topic);
wait_cube('ev', '1');

# 36,000 events over days d0 .. d0 + 1 (48 hourly windows), 6 s of them.
my $producer = sc_produce_start($topic, count => 36_000, rate => 6_000,
	'start-ts' => $d0, 'step-ms' => 4_800);
my ($calls, $compacted_during, $sealed) = (0, 0, 0);
while (sc_producer_running($producer))
{
	$sealed += $node->safe_psql('postgres', 'SELECT streamcube_seal_due()');
	$calls++;
	$compacted_during = $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.segment_log WHERE cube = 'ev'::regclass AND action = 'compacted'");
	sleep 0.3;
}
ok(sc_produce_finish($producer), '1: the backlog was produced');
note "1: $calls calls of streamcube_seal_due() while producing; $sealed windows sealed; $compacted_during days compacted";
ok($calls >= 5, "1: streamcube_seal_due() ran $calls times during ingest");
cmp_ok($compacted_during, '>', 0, '1: the first day was compacted while messages still arrived');
wait_cube('ev', '1');
for (1 .. 3) { $node->safe_psql('postgres', 'SELECT streamcube_seal_due()'); }
is(segments('ev', $d0, $d0 + 2 * $day),
	strftime('%m-%d 00', gmtime $d0) . ' compacted 24, '
	  . strftime('%m-%d 00', gmtime($d0 + $day)) . ' compacted 24',
	'1: each past day is one compacted partition');
# Each window made active was sealed once.  The receiver may be behind the
# producer when a day is compacted (a day is compacted once every window of
# it that the catalog knows is sealed): the compaction adds the windows not
# made yet, sealed, straight into the day's partition (compact.c), and no
# seal is journalled for them; the rows that come later for them land
# there (checked exact below).  So: no window sealed twice.
my ($seals, $sealed_windows) = split /\|/, $node->safe_psql('postgres',
	"SELECT count(*), count(DISTINCT window_start) FROM streamcube.segment_log "
	  . "WHERE cube = 'ev'::regclass AND action = 'sealed' "
	  . "AND window_start >= " . ts_sql($d0) . " AND window_start < " . ts_sql($d0 + 2 * $day));
note "1: $sealed_windows of the 48 windows were made active and sealed one by one";
cmp_ok($sealed_windows, '>', 0, '1: windows of the two days were sealed one by one');
is($seals, $sealed_windows, '1: no window of the two days was sealed twice');
my $k = sc_kafka_contents($topic);
sc_check_exact($node, 'ev', $k, '1');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_class WHERE relname LIKE 'ev\\_%compacting%'"),
	'0', '1: no table of a compaction is left');

# ------------------------------------------------------------------ part 2
# Late rows into the compacted first day: they land in its partition.
my @late = map {
	sprintf('{"ts":"%s","country":"late","device":"d","amount":1.00,"qty":%d}',
		strftime('%Y-%m-%dT%H:%M:%S.000Z', gmtime($d0 + 3600 * $_ + 60)), $_ + 1)
} 0 .. 23;
sc_kcat_produce($topic, $_ % 3, $late[$_]) for 0 .. $#late;
$k = sc_kafka_contents($topic);
wait_cube('ev', '2');
is($node->safe_psql('postgres',
		"SELECT count(*), min(tableoid::regclass::text), max(tableoid::regclass::text) "
		  . "FROM ev WHERE country = 'late'"),
	'24|' . strftime('ev_%Y%m%d', gmtime $d0) . '|' . strftime('ev_%Y%m%d', gmtime $d0),
	'2: the late rows are in the compacted day');
sc_check_exact($node, 'ev', $k, '2: after late rows');

my $checkpoints = $node->safe_psql('postgres',
	"SELECT string_agg(\"offset\"::text, ',' ORDER BY partition) FROM streamcube.checkpoints "
	  . "WHERE cube_id = (SELECT cube_id FROM streamcube.cubes WHERE relid = 'ev'::regclass)");
note "2: checkpoints before the crash: $checkpoints";
ok($node->safe_psql('postgres',
		"SELECT bool_and(\"offset\" < 150) FROM streamcube.checkpoints "
		  . "WHERE cube_id = (SELECT cube_id FROM streamcube.cubes WHERE relid = 'ev'::regclass)") eq 't',
	'2: the checkpoints lie before the compacted days (the active window began first)');
$node->stop('immediate');
$node->start;
wait_cube('ev', '2: after the crash');
sc_check_exact($node, 'ev', $k, '2: after the crash, replay skipped what the compacted days hold');

# ------------------------------------------------------------------ part 3
# The third day: sealed, then compacted in a transaction a crash cuts short.
sc_produce($topic, count => 12_000, rate => 0, 'start-ts' => $d0 + 2 * $day, 'step-ms' => 7_200);
$k = sc_kafka_contents($topic);
wait_cube('ev', '3');
$node->safe_psql('postgres', 'SELECT streamcube_seal(\'ev\', ' . ts_sql($d0 + 3 * $day) . ')');
my $third_day = "SELECT count(*) FILTER (WHERE state = 'sealed') || ' sealed of ' || count(*) "
  . "FROM streamcube.segments WHERE cube = 'ev'::regclass "
  . "AND window_start >= " . ts_sql($d0 + 2 * $day) . " AND window_start < " . ts_sql($d0 + 3 * $day);
is($node->safe_psql('postgres', $third_day), '24 sealed of 24', '3: the third day is 24 sealed windows');
my $bg = sc_psql_bg($node,
	"BEGIN; SELECT streamcube_compact('ev'); SELECT pg_sleep(60); COMMIT;");
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE 'BEGIN; SELECT streamcube_compact%' "
		  . "AND wait_event = 'PgSleep'"),
	'3: the compaction is done, not committed');
$node->stop('immediate');
sc_psql_bg_finish($bg);
$node->start;
is($node->safe_psql('postgres', $third_day), '24 sealed of 24',
	'3: after the crash the third day is still 24 sealed windows');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_class WHERE relname LIKE 'ev\\_%compacting%'"),
	'0', '3: nothing of the compaction remains');
wait_cube('ev', '3: after the crash');
sc_check_exact($node, 'ev', $k, '3: after the crash');

# pg_cron compacts it.
my $job = $node->safe_psql('postgres', "SELECT streamcube_schedule_sealing('* * * * *')");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM streamcube.segments WHERE cube = 'ev'::regclass "
		  . "AND state = 'compacted' AND window_start = " . ts_sql($d0 + 2 * $day)),
	'3: pg_cron compacted the third day');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM cron.job_run_details WHERE jobid = $job AND status = 'succeeded'") > 0
	  ? 'yes' : 'no', 'yes', '3: by its job');
$node->safe_psql('postgres', "SELECT cron.unschedule($job)");
sc_check_exact($node, 'ev', $k, '3: after pg_cron compacted');

# ------------------------------------------------------------------ part 4
# Many windows: 1,200 hourly windows, one event each, from 50 days ago:
# more than streamcube locks in one batch, seals in one call or drops in
# one transaction.  (A whole year takes PostgreSQL 15 many minutes to
# attach, O(n) per partition: test/bench/compaction builds one, and drops
# it the same way.)
my $year = sc_topic('compaction_many');
sc_create_topic($year, 2);
my $nwin = 1_200;
my $y0 = (int(time / 3600) - 50 * 24) * 3600;
sc_produce($year, count => $nwin, rate => 0, 'start-ts' => $y0, 'step-ms' => 3_600_000);
my $t = time;
sc_create_cube($node, 'yr', $year, '{"compact": []}');
is($node->safe_psql('postgres', "SELECT streamcube_wait('yr', '600 s')"), 't',
	'4: streamcube_wait(yr): a backlog over 1,200 windows is consumed (64 windows per batch at most)');
note sprintf('4: %d windows created and filled in %.1f s', $nwin, time - $t);
is($node->safe_psql('postgres',
		"SELECT count(*) >= $nwin FROM streamcube.segment_catalog "
		  . "WHERE cube_id = (SELECT cube_id FROM streamcube.cubes WHERE relid = 'yr'::regclass)"),
	't', '4: the cube has a window per hour');
# Counted partition by partition, as the view does.
is($node->safe_psql('postgres',
		"SELECT sum(rows), count(DISTINCT relation) >= $nwin FROM streamcube.segments WHERE cube = 'yr'::regclass"),
	"$nwin|t", '4: every event is in, once (rows counted partition by partition)');
# Rows of one batch share their transaction id: no batch wrote more than
# 64 windows (the bound on the locks one batch holds).
is($node->safe_psql('postgres',
		"SELECT max(n) <= 64, count(*) >= $nwin / 64 FROM "
		  . "(SELECT xmin::text, count(DISTINCT tableoid) AS n FROM yr GROUP BY 1) b"),
	't|t', '4: each batch wrote at most 64 windows; the rest waited for the next');
# Reassignment over that many windows: partition 1 moves to another set
# while later events for a hundred of the windows arrive.
$node->safe_psql('postgres', "SELECT streamcube_create_replica_set('rs_b')");
$node->safe_psql('postgres', "SELECT streamcube_reassign('yr', '{\"default\": [0], \"rs_b\": [1]}')");
sc_produce($year, count => 100, rate => 0, 'start-ts' => $y0 + 1800, 'step-ms' => 36_000_000);
is($node->safe_psql('postgres', "SELECT streamcube_wait('yr', '120 s')"), 't',
	'4: reassigned, and everything consumed');
is($node->safe_psql('postgres',
		"SELECT sum(rows) FROM streamcube.segments WHERE cube = 'yr'::regclass"),
	$nwin + 100, '4: every event once, the later ones too');
is($node->safe_psql('postgres',
		"SELECT string_agg(replica_set || ':' || array_to_string(partitions, ','), ' ' ORDER BY replica_set) "
		  . "FROM streamcube.consumers WHERE cube = 'yr'::regclass"),
	'default:0 rs_b:1', '4: each set consumes its partition');
my ($rc, $out, $err) = $node->psql('postgres', 'SELECT streamcube_seal_due()');
is($rc, 0, '4: streamcube_seal_due() with 1,200 due windows does not fail');
is($out, '96', '4: it sealed a bounded number of windows (96, all cubes together)');
ok($node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.segments WHERE cube = 'yr'::regclass AND state = 'sealed'") >= 90,
	'4: most of them of this cube (its windows come after the other cube\'s)');
($rc, $out, $err) = $node->psql('postgres', "SELECT streamcube_drop_cube('yr')");
is($rc, 0, '4: streamcube_drop_cube() succeeds');
like($err, qr/goes in steps/, '4: and says the table goes in steps');
is($node->safe_psql('postgres', "SELECT count(*) FROM streamcube.cubes WHERE relid::text = 'yr'"), '0',
	'4: the cube is gone at once');
ok($node->poll_query_until('postgres',
		"SELECT NOT EXISTS (SELECT 1 FROM streamcube.pending_drops) AND to_regclass('yr') IS NULL"),
	'4: the launcher dropped the table in steps');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_class WHERE relname LIKE 'yr\\_%'"),
	'0', '4: no partition of it is left');
sc_check_exact($node, 'ev', $k, '4: the other cube is untouched');

$node->stop;
done_testing();
