
# Roll-ups: kept by the receivers in the batch's transaction, so that their
# totals equal the same aggregates over the raw rows, exactly (count, sum,
# min, max, avg's sum and count) or within the sketches' bounds (hll,
# tdigest), through a creation on a live cube, crashes during ingest,
# seals, late rows into sealed windows and a reassignment.  Each batch
# appends partial rows (aggregated in the receiver) to active windows; a
# seal or compaction merges a window to one row per group; the view
# <roll-up>_merged reads one row per group over both.  Also: a cube that
# keeps no raw rows; retention of raw rows leaving the roll-up whole and
# the roll-up's own retention; drop; errors; privileges; the views.

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

my $node = sc_node('rollups');
my $hour = 3600;
my $now = int(time / $hour) * $hour;

# Measures over the default event columns (sc_create_cube).
my $measures = '{"n": "count(*)", "amount": "sum(amount)", "top": "max(amount)", '
  . '"low": "min(qty)", "avg_amount": "avg(amount)", "nq": "count(qty)", '
  . '"users": "hll(amount)", "p": "tdigest(amount)"}';

# Per minute, country and device: the roll-up against the raw rows, the
# exact measures; '' when they agree.  hll and tdigest are checked apart.
sub diff_exact
{
	my ($cube, $rollup, $since) = @_;
	my $where = $since ? "WHERE bucket >= $since" : '';
	return $node->safe_psql('postgres', qq{
		WITH raw AS (SELECT date_bin('1 minute', ts, '2001-01-01') AS bucket, country, device,
		                    count(*) AS n, sum(amount) AS amount, max(amount) AS top, min(qty) AS low,
		                    sum(amount) AS avg_amount_sum, count(amount) AS avg_amount_count,
		                    count(qty) AS nq
		             FROM $cube GROUP BY 1, 2, 3),
		     r AS (SELECT bucket, country, device, n, amount, top, low, avg_amount_sum,
		                  avg_amount_count, nq FROM ${rollup}_merged $where),
		     raw2 AS (SELECT * FROM raw $where)
		SELECT count(*) FROM ((TABLE raw2 EXCEPT ALL TABLE r) UNION ALL (TABLE r EXCEPT ALL TABLE raw2)) d
		HAVING count(*) > 0});
}

sub totals
{
	my ($rollup) = @_;
	return $node->safe_psql('postgres',
		"SELECT sum(n), sum(amount), max(top), min(low), sum(nq) FROM $rollup");
}

sub raw_totals
{
	my ($cube) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*), sum(amount), max(amount), min(qty), count(qty) FROM $cube");
}

# The view <roll-up>_sealed, for standbys: "view|rows|differences", the
# view streamcube.rollups names, its rows (cols), and how many rows differ
# between it and the roll-up's logged (sealed) partitions.
sub sealed_view
{
	my ($rollup, $cols) = @_;
	return $node->safe_psql('postgres', qq{
		WITH logged AS (SELECT $cols FROM $rollup
		                WHERE tableoid IN (SELECT c.oid FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid
		                                   WHERE i.inhparent = '$rollup'::regclass AND c.relpersistence = 'p')),
		     v AS (SELECT $cols FROM ${rollup}_sealed)
		SELECT (SELECT sealed_view FROM streamcube.rollups WHERE rollup = '$rollup'::regclass),
		       (SELECT count(*) FROM v),
		       (SELECT count(*) FROM ((TABLE logged EXCEPT ALL TABLE v) UNION ALL (TABLE v EXCEPT ALL TABLE logged)) d)});
}

sub wait_rows
{
	my ($cube, $n) = @_;
	return $node->poll_query_until('postgres', "SELECT count(*) >= $n FROM $cube");
}

# ---------------------------------------------------------------------
# Errors before the extensions exist
# ---------------------------------------------------------------------
my $t1 = sc_topic('rollup');
sc_create_topic($t1, 4);
# No compaction: a compacted day is dropped only once all of it is past,
# so run just after midnight the retention checks below would find
# yesterday's day whole (cube "daily" tests compaction).
sc_create_cube($node, 'events', $t1, '{"replica_sets": ["a", "b"], "compact": []}');

my ($rc, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_create_rollup('events', 'e_users', '1 minute', ARRAY['country'], '{\"u\": \"hll(qty)\"}')");
like($err, qr/measure "u" needs the extension hll.*\n.*HINT:.*postgresql-15-hll/s,
	'hll without the extension: an error naming the package');
($rc, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_create_rollup('events', 'e_p', '1 minute', ARRAY['country'], '{\"p\": \"tdigest(amount)\"}')");
like($err, qr/needs the extension tdigest.*postgresql-15-tdigest/s, 'tdigest without the extension too');

$node->safe_psql('postgres', 'CREATE EXTENSION hll; CREATE EXTENSION tdigest');

for my $case (
	[ "'7 minutes', ARRAY['country'], '{\"n\": \"count(*)\"}'", qr/granularity 00:07:00 neither divides the window of cube "events" \(01:00:00\) nor is a whole number of them/, 'a granularity that does not divide the window' ],
	[ "'90 minutes', ARRAY['country'], '{\"n\": \"count(*)\"}'", qr/granularity 01:30:00 neither divides the window/, 'a granularity of one and a half windows' ],
	[ "'1 minute', ARRAY['nope'], '{\"n\": \"count(*)\"}'", qr/dimension "nope" is not a column of cube "events"/, 'an unknown dimension' ],
	[ "'1 minute', ARRAY['ts'], '{\"n\": \"count(*)\"}'", qr/dimension "ts" is the time column/, 'the time column as a dimension' ],
	[ "'1 minute', ARRAY['country'], '{\"s\": \"sum(nope)\"}'", qr/measure "s" names column "nope", which cube .* does not have/, 'a measure of an unknown column' ],
	[ "'1 minute', ARRAY['country'], '{\"s\": \"sum(country)\"}'", qr/measure "s" cannot be sum of column "country" \(type text\)/, 'sum of a text column' ],
	[ "'1 minute', ARRAY['country'], '{\"s\": \"median(qty)\"}'", qr/measure "s" is not an aggregate a roll-up keeps/, 'an aggregate streamcube does not keep' ],
	[ "'1 minute', ARRAY['country'], '{\"country\": \"count(*)\"}'", qr/would be a second column of that name/, 'a measure named like a dimension' ],
	[ "'1 minute', ARRAY['country'], '{\"n\": \"count(*)\"}', '{\"keep\": 1}'", qr/unknown roll-up option "keep"/, 'an unknown option' ],
	[ "'1 minute', ARRAY['country'], '{\"s\": \"sum(qty) FILTER (WHERE nope > 1)\"}'", qr/the FILTER of measure "s" is not a condition on the columns of cube .*\n.*column "nope" does not exist/, 'a FILTER naming an unknown column' ],
	[ "'1 minute', ARRAY['country'], '{\"s\": \"sum(qty) FILTER (WHERE ts > now())\"}'", qr/the FILTER of measure "s" is not immutable/, 'a FILTER that is not immutable' ],
	[ "'1 minute', ARRAY['country'], '{\"s\": \"sum(qty) FILTER (WHERE qty > (SELECT 1))\"}'", qr/the FILTER of measure "s" is not a condition on the row/, 'a FILTER with a subquery' ],
	[ "'1 minute', ARRAY['country'], '{\"s\": \"sum(qty) FILTER (qty > 1)\"}'", qr/measure "s" is not an aggregate a roll-up keeps/, 'a FILTER without WHERE' ],
	[ "'1 minute', ARRAY['nope(country) AS x'], '{\"n\": \"count(*)\"}'", qr/dimension "x" is not an expression of the columns of cube .*\n.*function nope\(text\) does not exist/, 'a dimension expression calling no function' ],
	[ "'1 minute', ARRAY['now()::text AS x'], '{\"n\": \"count(*)\"}'", qr/the dimension "x" is not immutable/, 'a dimension expression that is not immutable' ],
	[ "'1 minute', ARRAY['max(qty) AS x'], '{\"n\": \"count(*)\"}'", qr/dimension "x" is not an expression of one row/, 'a dimension expression that aggregates' ])
{
	($rc, $out, $err) = $node->psql('postgres',
		"SELECT streamcube_create_rollup('events', 'e_bad', $case->[0])", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, $case->[1], "error: $case->[2]");
	like($err, qr/ERROR:  (22023|42703|42804|42701|42P17):/, "error: $case->[2] has its SQLSTATE") if $case->[2] !~ /unknown option|not an aggregate|FILTER without/;
}
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_class WHERE relname LIKE 'e_bad%'"), '0',
	'the failed creations left no table behind');

# ---------------------------------------------------------------------
# A roll-up created on a live cube: exact at the edge
# ---------------------------------------------------------------------
# 3 hours of events, 1 a second, from 4 hours ago: windows to seal later.
my $start = $now - 4 * $hour;
my $bg = sc_produce_start($t1, count => 10800, 'start-ts' => $start, 'step-ms' => 1000, rate => 2000);
wait_rows('events', 2000) or die 'no rows';
my $rollup = $node->safe_psql('postgres',
	"SELECT streamcube_create_rollup('events', 'events_by_minute', '1 minute', "
	  . "ARRAY['country', 'device'], '$measures')");
is($rollup, 'events_by_minute', 'created while the cube ingests; returns its table');
like(sealed_view('events_by_minute', 'bucket, country, device, n'), qr/^events_by_minute_sealed\|\d+\|0$/,
	'its view for standbys exists from the start and reads its sealed partitions');
ok(sc_produce_finish($bg), 'producer delivered everything');
$node->safe_psql('postgres', "SELECT streamcube_wait('events', '60 s')");
is(raw_totals('events') =~ /^10800\|/ ? 1 : 0, 1, 'the cube holds every message');
is(diff_exact('events', 'events_by_minute'), '', 'roll-up equals the raw rows per bucket and dimensions (exact measures)');
is(totals('events_by_minute'), raw_totals('events'), 'and in total');

my ($hll, $distinct) = split /\|/, $node->safe_psql('postgres',
	"SELECT (SELECT round(hll_cardinality(hll_union_agg(users))) FROM events_by_minute), "
	  . "(SELECT count(DISTINCT amount) FROM events)");
ok(abs($hll - $distinct) <= 0.02 * $distinct, "hll: distinct amounts $hll against count(DISTINCT) $distinct");
my ($p95, $exact95) = split /\|/, $node->safe_psql('postgres',
	"SELECT (SELECT tdigest_percentile(p, 0.95) FROM events_by_minute), "
	  . "(SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY amount) FROM events)");
ok(abs($p95 - $exact95) <= 0.01 * $exact95, "tdigest: p95 $p95 against percentile_cont $exact95");

# ---------------------------------------------------------------------
# Seal, late rows into sealed windows, a crash while producing
# ---------------------------------------------------------------------
# A view dropped by hand is forgotten (no OID is left to name another
# relation later); the next seal makes it again.
$node->safe_psql('postgres', 'DROP VIEW events_by_minute_sealed');
is($node->safe_psql('postgres',
		"SELECT sealed_view IS NULL FROM streamcube.rollups WHERE rollup = 'events_by_minute'::regclass"),
	't', 'a roll-up view dropped by hand is forgotten');
my $sealed = $node->safe_psql('postgres', "SELECT streamcube_seal('events')");
ok($sealed >= 3, "sealed $sealed windows");
is($node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.rollup_windows w JOIN pg_class c ON c.oid = w.relid "
		  . "WHERE w.state = 'sealed' AND c.relpersistence = 'p'"),
	$node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.segment_catalog WHERE state = 'sealed'"),
	'each sealed window has a logged roll-up partition');
is(diff_exact('events', 'events_by_minute'), '', 'after the seal: still equal');

# Late rows (into the sealed windows) and current ones, with a crash in between.
$bg = sc_produce_start($t1, count => 6000, 'start-ts' => $start + 1800, 'step-ms' => 1500, rate => 1000, seed => 7);
wait_rows('events', 12000) or die 'late rows did not come';
$node->stop('immediate');
$node->start;
ok(sc_produce_finish($bg), 'second producer delivered everything');
$node->safe_psql('postgres', "SELECT streamcube_wait('events', '90 s')");
is($node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT (_partition, _offset)) FROM events'),
	'16800|16800', 'after the crash: every message once');
is(diff_exact('events', 'events_by_minute'), '', 'after the crash and the late rows: roll-up equals the raw rows');
like(sealed_view('events_by_minute', 'bucket, country, device, n'), qr/^events_by_minute_sealed\|[1-9]\d*\|0$/,
	'events_by_minute_sealed holds exactly the sealed partitions, late rows with them');

# A reassignment under load, and a second crash right after it.
$node->safe_psql('postgres', "SELECT streamcube_reassign('events', '{\"a\": [0, 1], \"b\": [2, 3]}')");
$bg = sc_produce_start($t1, count => 4000, rate => 1000, seed => 9);
wait_rows('events', 18000) or die 'no rows after the reassignment';
$node->stop('immediate');
$node->start;
ok(sc_produce_finish($bg), 'third producer delivered everything');
$node->safe_psql('postgres', "SELECT streamcube_wait('events', '90 s')");
is($node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT (_partition, _offset)) FROM events'),
	'20800|20800', 'after a reassignment and a crash: every message once');
is(diff_exact('events', 'events_by_minute'), '', 'and the roll-up still equals the raw rows');

# How the roll-up is stored: the table and its active partitions have no
# key (batches append); each sealed partition has one, which compares the
# text dimensions bytewise (their collation is deterministic), and holds
# one row per group.
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_index WHERE indrelid = 'events_by_minute'::regclass "
		  . "UNION ALL SELECT count(*) FROM streamcube.rollup_windows w JOIN pg_index i ON i.indrelid = w.relid "
		  . "WHERE w.state = 'active'"),
	"0\n0", 'neither the roll-up nor its active partitions have a key');
is($node->safe_psql('postgres',
		"SELECT count(DISTINCT w.relid) = count(i.indexrelid) "
		  . "AND bool_and(pg_get_indexdef(i.indexrelid) ~ '\\(bucket, country COLLATE \"C\", device COLLATE \"C\"\\) NULLS NOT DISTINCT') "
		  . "FROM streamcube.rollup_windows w JOIN streamcube.rollup_catalog r USING (rollup_id) "
		  . "LEFT JOIN pg_index i ON i.indrelid = w.relid "
		  . "WHERE r.relid = 'events_by_minute'::regclass AND w.state = 'sealed'"),
	't', 'each sealed partition has the key, comparing country and device bytewise');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM (SELECT 1 FROM events_by_minute WHERE tableoid IN "
		  . "(SELECT relid FROM streamcube.rollup_windows WHERE state = 'sealed') "
		  . "GROUP BY bucket, country, device HAVING count(*) > 1) d"),
	'0', 'the sealed windows hold one row per bucket and dimensions, late rows and all');

# ---------------------------------------------------------------------
# Partial rows: each batch appends its groups, aggregated; the seal merges
# ---------------------------------------------------------------------
# Three batches of the same 300 events (8 countries x 4 devices) into one
# minute of a window three hours old, then its seal, then the same events
# late into the sealed window.
my $t4 = sc_topic('partials');
sc_create_topic($t4, 1);
sc_create_cube($node, 'parts', $t4, '{"compact": []}');
(my $parts_measures = $measures) =~ s/\}$/, "de": "count(*) FILTER (WHERE country = \x27de\x27)", "big": "sum(amount) FILTER (WHERE qty > 2 AND device <> \x27web\x27)", "avg_big": "avg(amount) FILTER (WHERE qty > 2)"}/;
$parts_measures =~ s/'/''/g;
$node->safe_psql('postgres',
	"SELECT streamcube_create_rollup('parts', 'parts_by_minute', '1 minute', ARRAY['country', 'device'], '$parts_measures')");
# The FILTER measures, per bucket and dimensions, against the raw rows: '' when equal.
my $filter_diff = q{
	WITH raw AS (SELECT date_bin('1 minute', ts, '2001-01-01') AS bucket, country, device,
	                    count(*) FILTER (WHERE country = 'de') AS de,
	                    sum(amount) FILTER (WHERE qty > 2 AND device <> 'web') AS big,
	                    sum(amount) FILTER (WHERE qty > 2) AS s, count(amount) FILTER (WHERE qty > 2) AS c
	             FROM parts GROUP BY 1, 2, 3),
	     r AS (SELECT bucket, country, device, de, big, avg_big_sum, avg_big_count FROM parts_by_minute_merged)
	SELECT count(*) FROM ((TABLE raw EXCEPT ALL TABLE r) UNION ALL (TABLE r EXCEPT ALL TABLE raw)) d
	HAVING count(*) > 0};
# Expression dimensions: a function of a column, a CASE over another.
$node->safe_psql('postgres',
	"SELECT streamcube_create_rollup('parts', 'parts_by_kind', '1 minute', "
	  . "ARRAY['upper(country) AS cc', 'CASE WHEN qty > 2 THEN ''many'' ELSE ''few'' END AS size'], "
	  . "'{\"n\": \"count(*)\", \"amount\": \"sum(amount)\"}')");
my $kind_diff = q{
	WITH raw AS (SELECT date_bin('1 minute', ts, '2001-01-01') AS bucket, upper(country) AS cc,
	                    CASE WHEN qty > 2 THEN 'many' ELSE 'few' END AS size, count(*) AS n, sum(amount) AS amount
	             FROM parts GROUP BY 1, 2, 3),
	     r AS (SELECT bucket, cc, size, n, amount FROM parts_by_kind_merged)
	SELECT count(*) FROM ((TABLE raw EXCEPT ALL TABLE r) UNION ALL (TABLE r EXCEPT ALL TABLE raw)) d
	HAVING count(*) > 0};
is($node->safe_psql('postgres',
		"SELECT dimensions, dimension_exprs FROM streamcube.rollups WHERE rollup = 'parts_by_kind'::regclass"),
	"{cc,size}|{upper(country),\"CASE WHEN qty > 2 THEN 'many' ELSE 'few' END\"}",
	'an expression dimension is named, and its expression kept');
my $minute = $now - 3 * $hour;
for my $i (1 .. 3)
{
	sc_produce($t4, count => 300, 'start-ts' => $minute, 'step-ms' => 100, seed => 31);
	$node->safe_psql('postgres', "SELECT streamcube_wait('parts', '60 s')");
}
my ($part_rows, $groups, $raw_rows) = split /\|/, $node->safe_psql('postgres',
	"SELECT (SELECT count(*) FROM parts_by_minute WHERE bucket = to_timestamp($minute)), "
	  . "(SELECT count(DISTINCT (country, device)) FROM parts), (SELECT count(*) FROM parts)");
is($raw_rows, '900', 'three batches of 300 rows');
cmp_ok($part_rows, '>', $groups, "each batch appended its partial rows: $part_rows rows for $groups groups");
cmp_ok($part_rows, '<=', 3 * $groups, 'each batch one row per group it holds: aggregated in the receiver');
is(diff_exact('parts', 'parts_by_minute'), '', 'the merged view equals the raw rows');
is($node->safe_psql('postgres', $filter_diff), '', 'FILTER measures equal the same filtered aggregates of the raw rows');
is($node->safe_psql('postgres', $kind_diff), '', 'expression dimensions group as the same expressions over the raw rows');
cmp_ok($node->safe_psql('postgres', 'SELECT sum(de) FROM parts_by_minute_merged'), '>', 0, 'and some rows passed the filter');
is($node->safe_psql('postgres', 'SELECT count(*) FROM parts_by_minute_merged'), $groups,
	'one merged row per group');
my $partial_totals = totals('parts_by_minute');
is($partial_totals, raw_totals('parts'), 'partial rows add up to the raw totals');
# A REPEATABLE READ snapshot taken before the seal (that has not read the
# roll-up yet: one that had would hold the seal off) reads, after it, the
# partial rows it could see, not the merged ones.
my $rr_before = $node->safe_psql('postgres', 'SELECT count(*), sum(n), sum(amount) FROM parts_by_minute');
my $rr = $node->background_psql('postgres');
$rr->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$rr->query_safe('SELECT count(*) FROM pg_class');
ok($node->safe_psql('postgres', "SELECT streamcube_seal('parts')") >= 1, 'the window is sealed');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM parts_by_minute WHERE bucket = to_timestamp($minute)"), $groups,
	'the seal merged the window to one row per group');
is($rr->query_safe('SELECT count(*), sum(n), sum(amount) FROM parts_by_minute'), $rr_before,
	'a snapshot older than the seal still reads the partial rows it saw');
$rr->query_safe('COMMIT');
$rr->quit;
is(totals('parts_by_minute'), $partial_totals, 'the merged rows hold the same totals');
is(diff_exact('parts', 'parts_by_minute'), '', 'and equal the raw rows');
my ($hll_m, $distinct_m) = split /\|/, $node->safe_psql('postgres',
	"SELECT (SELECT round(hll_cardinality(users)) FROM parts_by_minute_merged LIMIT 1) IS NOT NULL, "
	  . "(SELECT round(hll_cardinality(hll_union_agg(users))) FROM parts_by_minute) = "
	  . "(SELECT round(hll_cardinality(hll_union_agg(users))) FROM parts_by_minute_merged)");
is("$hll_m|$distinct_m", 't|t', 'hll: merged the same before and after');
sc_produce($t4, count => 300, 'start-ts' => $minute, 'step-ms' => 100, seed => 31);
$node->safe_psql('postgres', "SELECT streamcube_wait('parts', '60 s')");
is($node->safe_psql('postgres',
		"SELECT count(*), sum(n) FROM parts_by_minute WHERE bucket = to_timestamp($minute)"), "$groups|1200",
	'late rows into the sealed window: added to its rows, still one per group');
is(diff_exact('parts', 'parts_by_minute'), '', 'and equal to the raw rows');
is($node->safe_psql('postgres', $filter_diff), '', 'FILTER measures too, after the seal and the late rows');
is($node->safe_psql('postgres', $kind_diff), '', 'and expression dimensions');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM (SELECT 1 FROM parts_by_kind WHERE tableoid IN "
		  . "(SELECT relid FROM streamcube.rollup_windows WHERE state = 'sealed') "
		  . "GROUP BY bucket, cc, size HAVING count(*) > 1) d"),
	'0', 'whose sealed window holds one row per group');
my ($avg_view, $avg_raw) = split /\|/, $node->safe_psql('postgres',
	"SELECT (SELECT sum(avg_amount * avg_amount_count) / sum(avg_amount_count) FROM parts_by_minute_merged)::numeric(20,6), "
	  . "(SELECT avg(amount) FROM parts)::numeric(20,6)");
is($avg_view, $avg_raw, 'the merged view\'s avg is the average');
$node->safe_psql('postgres', "SELECT streamcube_drop_cube('parts')");

# ---------------------------------------------------------------------
# The view; readers need SELECT on the roll-up
# ---------------------------------------------------------------------
$node->safe_psql('postgres', 'ANALYZE events_by_minute; ANALYZE events');
like($node->safe_psql('postgres',
		"SELECT rollup, cube, granularity, dimensions, windows > 0 FROM streamcube.rollups"),
	qr/^events_by_minute\|events\|00:01:00\|\{country,device\}\|t$/, 'streamcube.rollups lists it');
is($node->safe_psql('postgres',
		"SELECT rows = (SELECT count(*) FROM events_by_minute), "
		  . "buckets = (SELECT count(DISTINCT bucket) FROM events_by_minute), "
		  . "cube_rows = (SELECT count(*) FROM events), "
		  . "rows_per_rollup_row = round((SELECT count(*) FROM events)::numeric / rows, 1), "
		  . "bytes > 0 FROM streamcube.rollups"),
	't|t|t|t|t', 'with its rows, buckets, bytes and the cube rows one roll-up row stands for');
$node->safe_psql('postgres', 'CREATE ROLE reader LOGIN; GRANT SELECT ON events TO reader');
($rc, $out, $err) = $node->psql('postgres', 'SELECT count(*) FROM events_by_minute',
	extra_params => [ '-U', 'reader' ]);
like($err, qr/permission denied for table events_by_minute/, 'a reader of the cube needs SELECT on the roll-up');
($rc, $out, $err) = $node->psql('postgres', 'SELECT count(*) FROM events_by_minute_merged',
	extra_params => [ '-U', 'reader' ]);
like($err, qr/permission denied for view events_by_minute_merged/, 'and on its merged view');
is($node->safe_psql('postgres', 'SELECT rollup, rows IS NULL, buckets IS NULL FROM streamcube.rollups',
		extra_params => [ '-U', 'reader' ]),
	'events_by_minute|t|t', 'the view shows a reader of the cube the roll-up, without its rows');
$node->safe_psql('postgres', 'GRANT SELECT ON events_by_minute TO reader');
is($node->safe_psql('postgres', 'SELECT sum(n) FROM events_by_minute', extra_params => [ '-U', 'reader' ]),
	'20800', 'and reads it once granted');
$node->safe_psql('postgres', 'GRANT SELECT ON events_by_minute_merged TO reader');
is($node->safe_psql('postgres', 'SELECT sum(n) FROM events_by_minute_merged', extra_params => [ '-U', 'reader' ]),
	'20800', 'the merged view too, once granted');
($rc, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_create_rollup('events', 'r2', '1 minute', ARRAY[]::text[], '{\"n\": \"count(*)\"}')",
	extra_params => [ '-U', 'reader' ]);
like($err, qr/permission denied to create a roll-up of cube "events"/, 'only the owner or an admin creates roll-ups');
($rc, $out, $err) = $node->psql('postgres', "SELECT streamcube_drop_rollup('events_by_minute')",
	extra_params => [ '-U', 'reader' ]);
like($err, qr/permission denied to drop a roll-up of cube/, 'or drops them');

# ---------------------------------------------------------------------
# Retention of raw rows leaves the roll-up whole; the roll-up's own
# ---------------------------------------------------------------------
my $before = totals('events_by_minute');
my $hourly = $node->safe_psql('postgres',
	"SELECT streamcube_create_rollup('events', 'events_by_hour', '1 hour', ARRAY['country'], "
	  . "'{\"n\": \"count(*)\"}', '{\"retention\": \"2 hours\"}')");
is($node->safe_psql('postgres', 'SELECT sum(n) FROM events_by_hour'), '20800',
	'a second roll-up, created on the cube as it is, holds every row');
$node->safe_psql('postgres', "SELECT streamcube_alter_cube('events', '{\"retention\": \"1 hour\"}')");
$node->safe_psql('postgres', 'SELECT streamcube_seal_due()');
# A partition goes once all of it is past the horizon.
my $old_windows = $node->safe_psql('postgres',
	"SELECT count(*) FROM (SELECT relid FROM streamcube.segment_catalog GROUP BY relid "
	  . "HAVING max(window_end) <= now() - interval '1 hour') p");
is($old_windows, '0', 'retention dropped the raw partitions past an hour');
cmp_ok($node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.segment_log WHERE action = 'dropped'"),
	'>', 0, 'and journalled the drops');
is(totals('events_by_minute'), $before, 'the roll-up without retention is whole');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.rollup_windows w JOIN streamcube.rollup_catalog r USING (rollup_id) "
		  . "WHERE r.relid = 'events_by_hour'::regclass GROUP BY w.relid "
		  . "HAVING max(w.window_end) <= now() - interval '2 hours'"),
	'', 'the roll-up with retention 2 hours lost its partitions past 2 hours');
cmp_ok($node->safe_psql('postgres', 'SELECT count(*) FROM events_by_hour'), '>', 0, 'and kept the others');
like(sealed_view('events_by_hour', 'bucket, country, n'), qr/^events_by_hour_sealed\|\d+\|0$/,
	'its view reads the sealed partitions retention left');
like(sealed_view('events_by_minute', 'bucket, country, device, n'), qr/^events_by_minute_sealed\|[1-9]\d*\|0$/,
	'and the other roll-up\'s view all of its own');

# ---------------------------------------------------------------------
# Drop leaves the cube untouched
# ---------------------------------------------------------------------
my $rows = $node->safe_psql('postgres', 'SELECT count(*), sum(amount) FROM events');
$node->safe_psql('postgres', "SELECT streamcube_drop_rollup('events_by_hour')");
is($node->safe_psql('postgres',
		"SELECT to_regclass('events_by_hour') IS NULL, to_regclass('events_by_hour_sealed') IS NULL, "
		  . "count(*) FROM streamcube.rollup_catalog"),
	't|t|1', 'drop_rollup dropped the table, its view and the catalog row');
is($node->safe_psql('postgres', "SELECT to_regclass('events_by_hour_merged') IS NULL"), 't',
	'and its merged view');
is($node->safe_psql('postgres', 'SELECT count(*), sum(amount) FROM events'), $rows, 'the cube is untouched');

# ---------------------------------------------------------------------
# Compaction: a day of windows becomes one partition, the roll-up's too;
# late rows into the compacted day, also into an hour that never had a
# window, are counted once
# ---------------------------------------------------------------------
my $day = int(time / 86400) * 86400 - 86400;
my $t3 = sc_topic('daily');
sc_create_topic($t3, 2);
sc_create_cube($node, 'daily', $t3);
$node->safe_psql('postgres',
	"SELECT streamcube_create_rollup('daily', 'daily_by_minute', '1 minute', ARRAY['country'], "
	  . "'{\"n\": \"count(*)\", \"amount\": \"sum(amount)\", \"top\": \"max(amount)\"}')");
# A roll-up by day of a cube of hourly windows: each window keeps its own
# partial rows (a crash loses and replays them with the window's rows);
# compaction of the day merges them to one row per group.
$node->safe_psql('postgres',
	"SELECT streamcube_create_rollup('daily', 'daily_by_day', '1 day', ARRAY['country'], "
	  . "'{\"n\": \"count(*)\", \"amount\": \"sum(amount)\", \"users\": \"hll(qty)\"}')");
my $day_diff = q{
	WITH raw AS (SELECT date_bin('1 day', ts, '2001-01-01') AS bucket, country,
	                    count(*) AS n, sum(amount) AS amount, hll_cardinality(hll_add_agg(hll_hash_integer(qty))) AS u
	             FROM daily GROUP BY 1, 2),
	     r AS (SELECT bucket, country, n, amount, hll_cardinality(users) FROM daily_by_day_merged)
	SELECT count(*) FROM ((TABLE raw EXCEPT ALL TABLE r) UNION ALL (TABLE r EXCEPT ALL TABLE raw)) d
	HAVING count(*) > 0};
my $day_groups = q{SELECT count(*) = count(DISTINCT (bucket, country)) FROM daily_by_day};
sc_produce($t3, count => 3000, 'start-ts' => $day, 'step-ms' => 3600, seed => 11);
$node->safe_psql('postgres', "SELECT streamcube_wait('daily', '60 s')");
is($node->safe_psql('postgres', $day_diff), '', 'a roll-up by day of hourly windows equals the raw rows');
is($node->safe_psql('postgres', $day_groups), 'f', 'its windows hold their own rows of each day and country');
my $daily_diff = q{
	WITH raw AS (SELECT date_bin('1 minute', ts, '2001-01-01') AS bucket, country,
	                    count(*) AS n, sum(amount) AS amount, max(amount) AS top
	             FROM daily GROUP BY 1, 2),
	     r AS (SELECT bucket, country, n, amount, top FROM daily_by_minute_merged)
	SELECT count(*) FROM ((TABLE raw EXCEPT ALL TABLE r) UNION ALL (TABLE r EXCEPT ALL TABLE raw)) d
	HAVING count(*) > 0};
$node->safe_psql('postgres', "SELECT streamcube_seal('daily')");
is($node->safe_psql('postgres', "SELECT streamcube_compact('daily')"), '1', 'the day is compacted');
is($node->safe_psql('postgres',
		"SELECT count(*), count(DISTINCT w.relid), min(c.relkind::text), min(c.relpersistence::text) "
		  . "FROM streamcube.rollup_windows w JOIN pg_class c ON c.oid = w.relid "
		  . "WHERE w.rollup_id = (SELECT rollup_id FROM streamcube.rollup_catalog "
		  . "                     WHERE relid = 'daily_by_minute'::regclass) "
		  . "AND w.window_start >= to_timestamp($day) AND w.window_start < to_timestamp($day + 86400)"),
	'24|1|r|p', "the roll-up's windows of the day are one logged partition, all 24 of them");
is($node->safe_psql('postgres', $daily_diff), '', 'after compaction: roll-up equals the raw rows');
is($node->safe_psql('postgres', $day_diff), '', 'the roll-up by day too');
is($node->safe_psql('postgres', $day_groups), 't', 'compaction merged the day to one row per country');
like(sealed_view('daily_by_minute', 'bucket, country, n'), qr/^daily_by_minute_sealed\|[1-9]\d*\|0$/,
	'its view reads the compacted partition');
# Hour 10 of that day never had a window; hour 1 had one.
sc_produce($t3, count => 400, 'start-ts' => $day + 10 * $hour, 'step-ms' => 2000, seed => 12);
sc_produce($t3, count => 200, 'start-ts' => $day + 1 * $hour, 'step-ms' => 3000, seed => 13);
$node->safe_psql('postgres', "SELECT streamcube_wait('daily', '60 s')");
is($node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT (_partition, _offset)) FROM daily'),
	'3600|3600', 'the late rows are in the compacted day');
is($node->safe_psql('postgres', $daily_diff), '', 'and counted once in the roll-up');
$node->stop('immediate');
$node->start;
$node->safe_psql('postgres', "SELECT streamcube_wait('daily', '60 s')");
is($node->safe_psql('postgres', $daily_diff), '', 'after a crash too');
is($node->safe_psql('postgres', $day_diff), '', 'the roll-up by day counts the late rows once too');
is($node->safe_psql('postgres', $day_groups), 't', 'and keeps one row per day and country');
like(sealed_view('daily_by_minute', 'bucket, country, n'), qr/^daily_by_minute_sealed\|[1-9]\d*\|0$/,
	'and its view the late rows of the compacted day');

# A roll-up created on a cube whose day is compacted already gets one
# partition for the day, as compaction leaves a roll-up's, not one per
# window (a year of compacted days would take 8,760 partitions, and as
# many locks, in one transaction).
$node->safe_psql('postgres',
	"SELECT streamcube_create_rollup('daily', 'daily_by_hour', '1 hour', ARRAY['country'], "
	  . "'{\"n\": \"count(*)\", \"amount\": \"sum(amount)\"}')");
is($node->safe_psql('postgres',
		"SELECT count(*), count(DISTINCT w.relid), min(w.state), min(c.relpersistence::text), "
		  . "bool_and(pg_get_expr(c.relpartbound, c.oid) = pg_get_expr(d.relpartbound, d.oid)) "
		  . "FROM streamcube.rollup_windows w JOIN pg_class c ON c.oid = w.relid "
		  . "JOIN streamcube.segment_catalog s ON s.window_start = w.window_start "
		  . "     AND s.cube_id = (SELECT cube_id FROM streamcube.cubes WHERE relid = 'daily'::regclass) "
		  . "JOIN pg_class d ON d.oid = s.relid "
		  . "WHERE w.rollup_id = (SELECT rollup_id FROM streamcube.rollup_catalog "
		  . "                     WHERE relid = 'daily_by_hour'::regclass) "
		  . "AND w.window_start >= to_timestamp($day) AND w.window_start < to_timestamp($day + 86400)"),
	'24|1|sealed|p|t', 'a roll-up created after the day was compacted: one logged partition of the day\'s bounds');
my $hourly_diff = q{
	WITH raw AS (SELECT date_bin('1 hour', ts, '2001-01-01') AS bucket, country,
	                    count(*) AS n, sum(amount) AS amount
	             FROM daily GROUP BY 1, 2),
	     r AS (SELECT bucket, country, n, amount FROM daily_by_hour_merged)
	SELECT count(*) FROM ((TABLE raw EXCEPT ALL TABLE r) UNION ALL (TABLE r EXCEPT ALL TABLE raw)) d
	HAVING count(*) > 0};
is($node->safe_psql('postgres', $hourly_diff), '', 'filled from the compacted day: equals the raw rows');
# Hour 5 of the day never had a row.
sc_produce($t3, count => 100, 'start-ts' => $day + 5 * $hour, 'step-ms' => 5000, seed => 14);
$node->safe_psql('postgres', "SELECT streamcube_wait('daily', '60 s')");
is($node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT (_partition, _offset)) FROM daily'),
	'3700|3700', 'late rows into another hour of the compacted day');
is($node->safe_psql('postgres', $hourly_diff), '', 'counted once in the roll-up created after the compaction');
is($node->safe_psql('postgres', $daily_diff), '', 'and in the one created before');
like(sealed_view('daily_by_hour', 'bucket, country, n'), qr/^daily_by_hour_sealed\|[1-9]\d*\|0$/,
	'whose view reads the day');
# Moved to another schema, a roll-up leaves its view where it was, and
# streamcube still knows it: dropping the roll-up drops both.
$node->safe_psql('postgres', 'CREATE SCHEMA moved; ALTER TABLE daily_by_hour SET SCHEMA moved');
$node->safe_psql('postgres', "SELECT streamcube_drop_rollup('moved.daily_by_hour')");
is($node->safe_psql('postgres',
		"SELECT to_regclass('moved.daily_by_hour') IS NULL, to_regclass('daily_by_hour_sealed') IS NULL, "
		  . "to_regclass('daily_by_hour_merged') IS NULL"),
	't|t|t', 'a roll-up moved to another schema is dropped with its views');

# ---------------------------------------------------------------------
# A cube that keeps no raw rows
# ---------------------------------------------------------------------
# Its topic holds 9000 messages before the cube exists: a backlog, which a
# cube with roll-ups reads in batches larger than streamcube.batch_max_rows
# (up to streamcube.rollup_batch_max_rows), as its batches cost per group
# merged.  A cube without roll-up reading the same backlog stays within
# batch_max_rows.
$node->safe_psql('postgres', 'ALTER SYSTEM SET streamcube.batch_max_rows = 500');
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
my $t2 = sc_topic('noraw');
sc_create_topic($t2, 3);
sc_produce($t2, count => 9000, 'start-ts' => $now - 2 * $hour, 'step-ms' => 500, seed => 3);
$node->safe_psql('postgres',
	"BEGIN; SELECT streamcube_create_cube('noraw', 'k', '$t2', "
	  . "'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 hour', 'json', "
	  . "'{\"raw_rows\": \"none\"}'); "
	  . "SELECT streamcube_create_rollup('noraw', 'noraw_by_minute', '1 minute', ARRAY['device'], "
	  . "'{\"n\": \"count(*)\", \"amount\": \"sum(amount)\", \"top\": \"max(amount)\"}'); COMMIT");
sc_create_cube($node, 'plain', $t2);
$node->safe_psql('postgres', "SELECT streamcube_wait('noraw', '60 s')");
$node->safe_psql('postgres', "SELECT streamcube_wait('plain', '60 s')");
my ($noraw_batches, $plain_batches) = split /\n/, $node->safe_psql('postgres',
	"SELECT max(rows_total / NULLIF(batches, 0)) FROM streamcube.consumers WHERE cube = 'noraw'::regclass "
	  . "UNION ALL SELECT max(rows_total / NULLIF(batches, 0)) FROM streamcube.consumers WHERE cube = 'plain'::regclass");
cmp_ok($noraw_batches, '>', 500, "the cube with a roll-up read its backlog in batches of $noraw_batches rows on average");
cmp_ok($plain_batches, '<=', 500, "the cube without one in batches of $plain_batches rows at most (batch_max_rows)");
is($node->safe_psql('postgres', "SELECT count(*) FROM plain"), '9000', 'the cube without roll-up read the backlog');
$node->safe_psql('postgres', "SELECT streamcube_drop_cube('plain')");
$node->safe_psql('postgres', 'ALTER SYSTEM RESET streamcube.batch_max_rows');
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
$node->poll_query_until('postgres', 'SELECT coalesce(sum(n), 0) = 9000 FROM noraw_by_minute')
  or diag 'roll-up of the no-raw cube incomplete';
is($node->safe_psql('postgres', 'SELECT count(*) FROM noraw'), '0', 'the no-raw cube keeps no rows');
my $k = sc_kafka_contents($t2);
is($node->safe_psql('postgres', 'SELECT sum(n), sum(amount) FROM noraw_by_minute'),
	"9000|" . sprintf('%.2f', $k->{amount_cents} / 100), 'its roll-up counts every message once, with the sum Kafka holds');
is($node->safe_psql('postgres',
		"SELECT sum(\"position\") FROM streamcube.consume_positions p JOIN streamcube.cubes c USING (cube_id) "
		  . "WHERE c.relid = 'noraw'::regclass"), '9000', 'and its positions moved past every message');

# ---------------------------------------------------------------------
# The roll-up belongs to the cube's owner, and follows the cube
# ---------------------------------------------------------------------
$node->safe_psql('postgres',
	'CREATE ROLE cubeowner LOGIN; GRANT CREATE ON SCHEMA public TO cubeowner; ALTER TABLE events OWNER TO cubeowner');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
		  . "WHERE i.inhparent = 'events_by_minute'::regclass AND c.relowner <> 'cubeowner'::regrole "
		  . "UNION ALL SELECT count(*) FROM pg_class WHERE oid = 'events_by_minute'::regclass "
		  . "AND relowner <> 'cubeowner'::regrole"), "0\n0",
	'ALTER TABLE cube OWNER TO moves the roll-up and its partitions too');
($rc, $out, $err) = $node->psql('postgres', 'ALTER TABLE events_by_minute OWNER TO reader');
like($err, qr/events_by_minute" of cube "events" would belong to role "reader"/,
	'a roll-up cannot be given to another role than the cube\'s owner');
is($node->safe_psql('postgres', "SELECT string_agg(relowner::regrole::text, ',') FROM pg_class "
		  . "WHERE oid IN ('events_by_minute_sealed'::regclass, 'events_by_minute_merged'::regclass)"),
	'cubeowner,cubeowner', 'its views moved with the cube');
($rc, $out, $err) = $node->psql('postgres', 'ALTER VIEW events_by_minute_merged OWNER TO reader');
like($err, qr/view "events_by_minute_merged" of cube "events" would belong to role "reader"/,
	'the merged view cannot be given away either');
($rc, $out, $err) = $node->psql('postgres', 'ALTER VIEW events_by_minute_sealed OWNER TO reader');
like($err, qr/view "events_by_minute_sealed" of cube "events" would belong to role "reader"/,
	'nor can its view');
# An administrator (not a superuser) creates a roll-up of another role's
# cube: it is made, filled and owned as the cube's owner.
$node->safe_psql('postgres', 'CREATE ROLE adm LOGIN IN ROLE streamcube_admin');
is($node->safe_psql('postgres',
		"SELECT streamcube_create_rollup('events', 'events_by_device', '1 hour', ARRAY['device'], "
		  . "'{\"n\": \"count(*)\"}')", extra_params => [ '-U', 'adm' ]),
	'events_by_device', 'an admin creates a roll-up of cubeowner\'s cube');
is($node->safe_psql('postgres',
		"SELECT relowner::regrole FROM pg_class WHERE oid = 'events_by_device'::regclass"),
	'cubeowner', 'it belongs to the cube\'s owner');
# A FILTER runs in the receivers as the cube's owner: an admin may not make
# it call a function of its own.
$node->safe_psql('postgres', 'CREATE SCHEMA admfns AUTHORIZATION adm');
$node->safe_psql('postgres',
	"CREATE FUNCTION admfns.is_big(int) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT \$1 > 2'",
	extra_params => [ '-U', 'adm' ]);
# (the cube's owner may see the schema: the function resolves, and is refused)
$node->safe_psql('postgres', 'GRANT USAGE ON SCHEMA admfns TO cubeowner', extra_params => [ '-U', 'adm' ]);
($rc, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_create_rollup('events', 'events_adm', '1 hour', ARRAY['device'], "
	  . "'{\"n\": \"count(*) FILTER (WHERE admfns.is_big(qty))\"}')",
	extra_params => [ '-U', 'adm', '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  42501: the FILTER of measure "n" calls a function that neither a superuser nor the owner of cube \S*events created/,
	'a FILTER calling a function of the admin is refused');
is($node->safe_psql('postgres', "SELECT to_regclass('events_adm') IS NULL"), 't', 'and nothing is made');
is($node->safe_psql('postgres', 'SELECT sum(n) FROM events_by_device'),
	$node->safe_psql('postgres', 'SELECT count(*) FROM events'), 'filled with every row the cube holds');
sc_produce($t1, count => 500, seed => 21);
$node->safe_psql('postgres', "SELECT streamcube_wait('events', '60 s')");
is(diff_exact('events', 'events_by_minute',
		"(SELECT min(window_start) FROM streamcube.segment_catalog s JOIN streamcube.cubes c USING (cube_id) "
		  . "WHERE c.relid = 'events'::regclass)"), '',
	'the new owner\'s receivers keep the roll-up exact (over the windows the cube still has)');
is($node->safe_psql('postgres', 'SELECT sum(n) FROM events_by_device'),
	$node->safe_psql('postgres', 'SELECT count(*) FROM events'), 'and the admin\'s roll-up too');

# Dropping a cube drops its roll-ups' views with them.
$node->safe_psql('postgres', "SELECT streamcube_drop_cube('noraw')");
is($node->safe_psql('postgres',
		"SELECT to_regclass('noraw_by_minute') IS NULL, to_regclass('noraw_by_minute_sealed') IS NULL, "
		  . "to_regclass('noraw_by_minute_merged') IS NULL"),
	't|t|t', 'drop_cube dropped the roll-up and its views');

$node->stop;
done_testing();
