
# Sealed windows on a physical streaming standby.
#
# Active windows are UNLOGGED partitions: their contents never reach the
# WAL, and during recovery PostgreSQL refuses any query that touches an
# unlogged relation.  A query on the cube's parent table scans every
# partition, so on a standby
#
#     SELECT count(*) FROM cube
#
# fails with "cannot access temporary or unlogged relations during
# recovery" (the planner refuses to open an unlogged relation during
# recovery, and the cube's active windows of now and of the next window
# always exist).  A now()-relative predicate does not help: now() is not a
# constant, so the planner cannot prune the active windows away before it
# opens them.  Only constant bounds that prune every active window at plan
# time let a query on the cube itself run on a standby.
# Sealed windows are logged tables: they replicate, and each can be
# queried on the standby.  The view <cube>_sealed is the UNION ALL of
# exactly the sealed partitions (rebuilt at every seal), so that standby
# readers can use ordinary SQL, now()-relative predicates included.

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

my $hour = 3600;
# The predicates below are relative to the current hour: do not start in
# the last minute of one.
if (time % $hour > $hour - 60)
{
	my $wait = $hour - time % $hour + 2;
	note "waiting $wait s for the next hour";
	sleep($wait);
}
# Four hourly windows, 6 to 2 hours before the current hour.
my $h0 = int(time / $hour) * $hour;
my $base = $h0 - 6 * $hour;

# The primary: what sc_node does, with allows_streaming (wal_level
# replica, WAL senders).
my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', join("\n",
	"shared_preload_libraries = 'streamcube'",
	"streamcube.database = 'postgres'",
	"max_worker_processes = 16",
	"log_min_messages = info",
	"streamcube.history_buckets = off") . "\n");
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION streamcube');
$primary->safe_psql('postgres', "SELECT streamcube_add_cluster('k', '$ENV{SC_KAFKA}')");
is($primary->safe_psql('postgres', 'SHOW wal_level'), 'replica', 'the primary writes replica WAL');

my $topic = sc_topic('seal_standby');
sc_create_topic($topic, 2);
sc_create_cube($primary, 'ev', $topic);
sc_produce($topic, count => 8_000, 'start-ts' => $base, 'step-ms' => 1800, seed => 1);
is($primary->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"),
	't', 'the primary consumed the events');
# A roll-up of the cube: its sealed partitions reach the standby the same
# way, through its view ev_by_minute_sealed.
is($primary->safe_psql('postgres',
		"SELECT streamcube_create_rollup('ev', 'ev_by_minute', '1 minute', ARRAY['country'], "
		  . "'{\"n\": \"count(*)\", \"amount\": \"sum(amount)\"}')"),
	'ev_by_minute', 'a roll-up of the cube');

# The standby, from a base backup, streaming.
$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'the standby is in recovery');

# Seal the four windows on the primary, while the standby streams.
is($primary->safe_psql('postgres', "SELECT streamcube_seal('ev', now() - interval '2 hours')"),
	'4', 'the primary sealed the four windows');
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));

my $k = sc_records_contents(sc_kafka_records($topic));
sc_check_exact($primary, 'ev', $k, 'primary');

my @sealed = split /\n/, $primary->safe_psql('postgres',
	"SELECT relation FROM streamcube.segments WHERE cube = 'ev'::regclass AND state = 'sealed' ORDER BY window_start");
is(scalar(@sealed), 4, 'four sealed partitions: ' . join(', ', @sealed));

# Each sealed partition reads the same on the standby.
for my $part (@sealed)
{
	my $q = "SELECT count(*), sum(qty), min(ts), max(ts) FROM $part";
	my $want = $primary->safe_psql('postgres', $q);
	is($standby->safe_psql('postgres', $q), $want, "standby: $part reads as on the primary ($want)");
}

# The cube itself cannot be read on a standby: its active windows are
# unlogged.
my ($ret, $out, $err) = $standby->psql('postgres', 'SELECT count(*) FROM ev');
isnt($ret, 0, 'standby: SELECT count(*) FROM ev fails');
like($err, qr/cannot access temporary or unlogged relations during recovery/,
	'standby: because the active windows are unlogged');

# Nor with a now()-relative predicate that would leave out the active
# windows: now() is not a constant, the planner cannot prune with it.
($ret, $out, $err) = $standby->psql('postgres',
	"SELECT count(*) FROM ev WHERE ts < now() - interval '3 hours'");
like($err, qr/cannot access temporary or unlogged relations during recovery/,
	'standby: a now()-relative predicate on ev fails the same way');
# With constant bounds that prune every active window at plan time, the
# planner never opens them: that query runs.
is( $standby->safe_psql('postgres',
		"SELECT count(*) FROM ev WHERE ts >= to_timestamp($base) AND ts < to_timestamp("
		  . ($base + 4 * $hour) . ")"),
	$k->{good}, 'standby: ev with constant bounds on the sealed windows can be read');

# The sealed view: exactly the sealed partitions.
sub check_view
{
	my ($label) = @_;
	my $view = $primary->safe_psql('postgres',
		"SELECT sealed_view FROM streamcube.cubes WHERE relid = 'ev'::regclass");
	is($view, 'ev_sealed', "$label: the cube's sealed view is ev_sealed");
	$view = 'ev_sealed';
	my $union = join(' UNION ALL ', map { "SELECT * FROM ONLY $_" } @sealed);
	my @queries = (
		[ 'count(*), sum(qty), sum(amount)', 'count(*), sum(qty), sum(amount)', 'true', '' ],
		[ 'now()-relative predicate', 'count(*), sum(qty)',
			"ts >= date_trunc('hour', now()) - interval '4 hours'", '' ],
		[ 'now()-relative predicate, per hour', "date_trunc('hour', ts) AS h, count(*)",
			"ts >= date_trunc('hour', now()) - interval '5 hours'", 'GROUP BY h ORDER BY h' ],
	);
	for my $q (@queries)
	{
		my ($what, $select, $where, $tail) = @$q;
		my $want = $primary->safe_psql('postgres',
			"SELECT $select FROM ($union) s WHERE $where $tail");
		is($standby->safe_psql('postgres', "SELECT $select FROM $view WHERE $where $tail"),
			$want, "$label: standby: $view, $what, equals the sealed partitions on the primary");
		is($primary->safe_psql('postgres', "SELECT $select FROM $view WHERE $where $tail"),
			$want, "$label: primary: $view, $what, too");
	}
	# and Kafka's count of the sealed hours
	my $sealed_hours = 0;
	for my $hr (keys %{ $k->{hours} })
	{
		$sealed_hours += $k->{hours}{$hr};
	}
	is($standby->safe_psql('postgres', "SELECT count(*) FROM $view"),
		$sealed_hours, "$label: standby: $view holds every event of the sealed hours in Kafka");

	# The roll-up's view: the same sealed hours, aggregated.
	is($standby->safe_psql('postgres', 'SELECT sum(n), sum(amount) FROM ev_by_minute_sealed'),
		$standby->safe_psql('postgres', 'SELECT count(*), sum(amount) FROM ev_sealed'),
		"$label: standby: ev_by_minute_sealed counts and sums exactly the rows of ev_sealed");
	is($standby->safe_psql('postgres',
			'SELECT count(*) FROM (SELECT bucket, country, count(*) FROM ev_by_minute_sealed '
			  . 'GROUP BY 1, 2 HAVING count(*) > 1) d'),
		'0', "$label: standby: one row a bucket and country");
	return;
}
check_view('after the seal');

# Late rows for a sealed window reach the standby through the view.
sc_produce($topic, count => 200, 'start-ts' => $base + 60, 'step-ms' => 60_000, seed => 2);
is($primary->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"),
	't', 'the primary consumed the late events');
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));
$k = sc_records_contents(sc_kafka_records($topic));
sc_check_exact($primary, 'ev', $k, 'primary, with late rows');
check_view('with late rows');

# The roll-up's table itself has active (UNLOGGED) partitions too.
($ret, $out, $err) = $standby->psql('postgres', 'SELECT count(*) FROM ev_by_minute');
like($err, qr/cannot access temporary or unlogged relations during recovery/,
	'standby: the roll-up cannot be read whole, its view can');

# Events of the current hour stay in an active window: not in the view.
sc_produce($topic, count => 100, 'start-ts' => $h0, 'step-ms' => 1000, seed => 3);
is($primary->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"),
	't', 'the primary consumed events of the current hour');
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));
is($standby->safe_psql('postgres',
		"SELECT count(*) FROM ev_sealed WHERE ts >= date_trunc('hour', now())"),
	'0', 'standby: the active window of the current hour is not in ev_sealed');
is($primary->safe_psql('postgres',
		"SELECT count(*) FROM ev WHERE ts >= to_timestamp($h0)"),
	'100', 'primary: the cube has them');

# Monitoring on the standby: what it holds, never an error.
my $segs = $primary->safe_psql('postgres',
	"SELECT count(*) FILTER (WHERE state = 'sealed') || '|' || count(*) FILTER (WHERE state = 'active') "
	  . "FROM streamcube.segments WHERE cube = 'ev'::regclass");
($ret, $out, $err) = $standby->psql('postgres',
	"SELECT count(*) FILTER (WHERE state = 'sealed' AND rows IS NOT NULL) || '|' || "
	  . "count(*) FILTER (WHERE state = 'active' AND rows IS NULL) "
	  . "FROM streamcube.segments WHERE cube = 'ev'::regclass");
is($ret, 0, 'standby: streamcube.segments can be read') or diag $err;
is($out, $segs, 'standby: sealed windows with their rows, active ones without (not available there)');
is($standby->safe_psql('postgres',
		"SELECT sum(rows) FROM streamcube.segments WHERE cube = 'ev'::regclass AND state = 'sealed'"),
	$primary->safe_psql('postgres',
		"SELECT sum(rows) FROM streamcube.segments WHERE cube = 'ev'::regclass AND state = 'sealed'"),
	'standby: the sealed windows count the rows the primary counts');
($ret, $out, $err) = $standby->psql('postgres',
	"SELECT count(*), count(position), count(checkpoint), bool_and(last_stable_offset <= high_watermark) "
	  . "FROM streamcube.lag('ev')");
is($ret, 0, 'standby: streamcube.lag() works') or diag $err;
is($out, '2|0|2|t', 'standby: lag() shows Kafka and the checkpoints, and no committed position (unlogged)');
($ret, $out, $err) = $standby->psql('postgres', "SELECT streamcube_wait('ev', '10 s')");
is($out, 'f', 'standby: streamcube_wait() is false at once');
like($err, qr/cube "ev" is not consumed on a standby/, 'and says why');
($ret, $out, $err) = $standby->psql('postgres',
	"SELECT state, last_error FROM streamcube.consumers WHERE cube = 'ev'::regclass");
is($ret, 0, 'standby: streamcube.consumers can be read') or diag $err;
like($out, qr/^standby\|not consumed on a standby/, 'standby: consumers says the cube is not consumed there');

$standby->stop;
$primary->stop;
done_testing();
