
# Roll-ups made by 0.3.0 (a key on the table, and so on every partition,
# rows merged in place) holding data, taken through ALTER EXTENSION ...
# UPDATE to 0.4.0 (partial rows appended to active partitions, merged at
# seal): before the update the new library keeps them as 0.3.0 did; the
# update moves the key to the sealed partitions and makes the view
# <roll-up>_merged; after it, with late rows, a crash and a seal, every
# message is counted once.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;
use Time::HiRes qw(time);

sc_require_env();

my $node = sc_node('rollup_update');
my $hour = 3600;
my $now = int(time / $hour) * $hour;

$node->safe_psql('postgres', 'DROP EXTENSION streamcube');
$node->safe_psql('postgres', "CREATE EXTENSION streamcube VERSION '0.3.0'");
$node->safe_psql('postgres', 'CREATE EXTENSION hll; CREATE EXTENSION tdigest');
$node->safe_psql('postgres', "SELECT streamcube_add_cluster('k', '$ENV{SC_KAFKA}')");

my $topic = sc_topic('rollup_update');
sc_create_topic($topic, 2);
sc_create_cube($node, 'ev', $topic, '{"compact": []}');
$node->safe_psql('postgres',
	"SELECT streamcube_create_rollup('ev', 'ev_by_minute', '1 minute', ARRAY['country', 'device'], "
	  . "'{\"n\": \"count(*)\", \"amount\": \"sum(amount)\", \"top\": \"max(amount)\", "
	  . "\"avg_amount\": \"avg(amount)\", \"users\": \"hll(qty)\", \"p\": \"tdigest(amount)\"}')");
like($node->safe_psql('postgres',
		"SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'ev_by_minute'::regclass"),
	qr/UNIQUE INDEX .* \(bucket, country COLLATE "C", device COLLATE "C"\) NULLS NOT DISTINCT/,
	'on a 0.3.0 catalog a roll-up is made as 0.3.0 made it: keyed');

# The rows of each (bucket, dimensions) against the raw rows; '' when equal.
# Read from the table grouped, which is right for both shapes.
sub diff_exact
{
	return $node->safe_psql('postgres', q{
		WITH raw AS (SELECT date_bin('1 minute', ts, '2001-01-01') AS bucket, country, device,
		                    count(*) AS n, sum(amount) AS amount, max(amount) AS top,
		                    sum(amount) AS s, count(amount) AS c
		             FROM ev GROUP BY 1, 2, 3),
		     r AS (SELECT bucket, country, device, sum(n) AS n, sum(amount) AS amount, max(top) AS top,
		                  sum(avg_amount_sum) AS s, sum(avg_amount_count) AS c
		           FROM ev_by_minute GROUP BY 1, 2, 3)
		SELECT count(*) FROM ((TABLE raw EXCEPT ALL TABLE r) UNION ALL (TABLE r EXCEPT ALL TABLE raw)) d
		HAVING count(*) > 0});
}

sub one_row_per_group
{
	my ($where) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM (SELECT 1 FROM ev_by_minute WHERE $where "
		  . "GROUP BY bucket, country, device HAVING count(*) > 1) d");
}

# Three hours of events, in two batches' worth of producers; two windows sealed.
sc_produce($topic, count => 3000, 'start-ts' => $now - 3 * $hour, 'step-ms' => 3000, seed => 1);
sc_produce($topic, count => 3000, 'start-ts' => $now - 3 * $hour, 'step-ms' => 3000, seed => 1);
$node->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')");
cmp_ok($node->safe_psql('postgres', "SELECT streamcube_seal('ev')"), '>=', 2, 'windows sealed before the update');
is(diff_exact(), '', 'before the update: the roll-up equals the raw rows');
is(one_row_per_group('true'), '0', 'and holds one row per group everywhere (0.3.0 merged in place)');

$node->safe_psql('postgres', 'ALTER EXTENSION streamcube UPDATE');
is($node->safe_psql('postgres', "SELECT extversion FROM pg_extension WHERE extname = 'streamcube'"),
	'0.4.0', 'updated to 0.4.0');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_index WHERE indrelid = 'ev_by_minute'::regclass "
		  . "UNION ALL SELECT count(*) FROM streamcube.rollup_windows w JOIN pg_index i ON i.indrelid = w.relid "
		  . "WHERE w.state = 'active' "
		  . "UNION ALL SELECT count(DISTINCT w.relid) - count(i.indexrelid) FROM streamcube.rollup_windows w "
		  . "LEFT JOIN pg_index i ON i.indrelid = w.relid AND i.indisunique WHERE w.state = 'sealed'"),
	"0\n0\n0", 'the update took the key from the table and the active partitions, and left it on each sealed one');
is($node->safe_psql('postgres',
		"SELECT merged_view FROM streamcube.rollups WHERE rollup = 'ev_by_minute'::regclass"),
	'ev_by_minute_merged', 'and made the view ev_by_minute_merged');
is(diff_exact(), '', 'the rows stay exact');

# After the update: current rows, late rows into the sealed windows, a crash.
my $bg = sc_produce_start($topic, count => 4000, 'start-ts' => $now - 3 * $hour, 'step-ms' => 2500, rate => 2000,
	seed => 2);
$node->poll_query_until('postgres', 'SELECT count(*) >= 8000 FROM ev') or die 'no rows after the update';
$node->stop('immediate');
$node->start;
ok(sc_produce_finish($bg), 'the producer delivered everything');
$node->safe_psql('postgres', "SELECT streamcube_wait('ev', '90 s')");
is($node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT (_partition, _offset)) FROM ev'),
	'10000|10000', 'after the update and a crash: every message once');
is(diff_exact(), '', 'and the roll-up equals the raw rows');
# Two batches of the same events into one minute of the current window.
my $minute = int(time / 60) * 60 - 60;
$minute = $now if $minute < $now;
for my $i (1 .. 2)
{
	sc_produce($topic, count => 200, 'start-ts' => $minute, 'step-ms' => 100, seed => 3);
	$node->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')");
}
is($node->safe_psql('postgres',
		"SELECT (SELECT count(*) FROM ev_by_minute WHERE bucket = to_timestamp($minute)) "
		  . ">= 2 * (SELECT count(*) FROM ev_by_minute_merged WHERE bucket = to_timestamp($minute))"),
	't', 'batches after the update append partial rows to the active window');
is(one_row_per_group("tableoid IN (SELECT relid FROM streamcube.rollup_windows WHERE state = 'sealed')"), '0',
	'late rows into the windows sealed by 0.3.0 were added to their rows');
$node->safe_psql('postgres', "SELECT streamcube_seal('ev')");
is(one_row_per_group("tableoid IN (SELECT relid FROM streamcube.rollup_windows WHERE state = 'sealed')"), '0',
	'windows sealed after the update hold one row per group');
is(diff_exact(), '', 'and the roll-up still equals the raw rows');

$node->stop;
done_testing();
