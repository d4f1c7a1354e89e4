
# Message metadata as columns, and format jsonb, through a crash.
#
# Three cubes read topics whose every message has a key (but one in
# seven), a CreateTime timestamp an hour after its event time, and headers
# (sckafka produce --meta):
#   mj  JSON: payload columns, the key, the Kafka timestamp, one header
#       and all headers;
#   md  jsonb: the whole document, the key beside it;
#   mc  CSV: the time column is the Kafka timestamp, the key into bytea.
# PostgreSQL crashes (stop -m immediate) while messages flow.  Afterwards
# every cube holds every message exactly once (count, unique
# (_partition, _offset), sums against Kafka) and every metadata value is
# the one produced.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;

sc_require_env();

my $start_ts = 1796083200;    # 2026-12-01 00:00:00 UTC
my $step_ms = 100;
my ($backlog, $live) = (30_000, 30_000);

my $node = sc_node('metadata', 'restart_after_crash = on');
my $json = sc_topic('meta_json');
my $csv = sc_topic('meta_csv');
# The messages' CreateTime is their event time plus an hour, fixed: once it
# is older than Kafka's time retention (7 days by default) the broker would
# delete them under the test.  The topics keep everything.
sc_create_topic_config($json, 4, 'retention.ms' => -1);
sc_create_topic_config($csv, 4, 'retention.ms' => -1);
sc_produce($json, count => $backlog, 'start-ts' => $start_ts,
	'step-ms' => $step_ms, seed => 1, meta => 1);
sc_produce($csv, count => $backlog, 'start-ts' => $start_ts,
	'step-ms' => $step_ms, seed => 1, meta => 1, format => 'csv');

$node->safe_psql('postgres', <<"SQL");
SELECT streamcube_create_cube('mj', 'k', '$json',
       'ts timestamptz, country text, device text, amount numeric, qty int, '
       'k text, kts timestamptz, trace text, hdrs jsonb', 'ts', '1 hour', 'json',
       '{"fields": {"k": {"kafka": "key"}, "kts": {"kafka": "timestamp"},
                    "trace": {"kafka": "header", "name": "trace-id"},
                    "hdrs": {"kafka": "headers"}}}');
SELECT streamcube_create_cube('md', 'k', '$json', 'ts timestamptz, k text, doc jsonb',
       'ts', '1 hour', 'jsonb', '{"fields": {"k": {"kafka": "key"}}}');
SELECT streamcube_create_cube('mc', 'k', '$csv',
       'event_ts timestamptz, country text, device text, amount numeric, qty int, '
       'kts timestamptz, k bytea', 'kts', '1 hour', 'csv',
       '{"fields": {"kts": {"kafka": "timestamp"}, "k": {"kafka": "key"}}}');
SQL

my $pj = sc_produce_start($json, count => $live, rate => 5000,
	'start-ts' => $start_ts + $backlog * $step_ms / 1000,
	'step-ms' => $step_ms, seed => 2, meta => 1);
my $pc = sc_produce_start($csv, count => $live, rate => 5000,
	'start-ts' => $start_ts + $backlog * $step_ms / 1000,
	'step-ms' => $step_ms, seed => 2, meta => 1, format => 'csv');

ok( $node->poll_query_until('postgres',
		'SELECT (SELECT count(*) FROM mj) >= 20000 AND (SELECT count(*) FROM mc) >= 20000 '
		  . 'AND (SELECT count(*) FROM md) >= 20000'),
	'the three cubes are ingesting');
my $before = $node->safe_psql('postgres', 'SELECT count(*) FROM mj');
$node->stop('immediate');
$node->start;
sc_check_positions_match_rows($node, $_, "$_ right after crash recovery") for qw(mj md mc);
note "mj held $before rows at the crash";

ok(sc_produce_finish($pj), 'the JSON producer delivered everything');
ok(sc_produce_finish($pc), 'the CSV producer delivered everything');
is( $node->safe_psql('postgres',
		"SELECT streamcube_wait('mj', '120 s') AND streamcube_wait('md', '120 s') "
		  . "AND streamcube_wait('mc', '120 s')"),
	't', 'every cube caught up with its topic');

my $k = sc_kafka_contents($json);
is($k->{count}, $backlog + $live, 'Kafka holds every JSON message');
sc_check_exact($node, 'mj', $k, 'JSON cube with metadata, after a crash');

# Message i of a run has no key when i % 7 = 6.
my $nokey = 0;
for my $n ($backlog, $live) { $nokey += int(($n + 1) / 7); }
my $total = $backlog + $live;
is( $node->safe_psql('postgres', <<'SQL'),
SELECT count(*) FILTER (WHERE kts = ts + interval '1 hour'),
       count(*) FILTER (WHERE k IS NULL),
       count(*) FILTER (WHERE k ~ '^key-[0-9]+$'),
       count(*) FILTER (WHERE trace ~ '^t-[0-9]+(-last)?$' AND hdrs ->> 'trace-id' = trace
                          AND hdrs ->> 'source' = 'sckafka')
FROM mj
SQL
	join('|', $total, $nokey, $total - $nokey, $total),
	'every key, Kafka timestamp and header is the one produced');

is( $node->safe_psql('postgres', <<'SQL'),
SELECT count(*), count(DISTINCT (_partition, _offset)), count(k),
       sum((doc ->> 'qty')::int), sum((doc ->> 'amount')::numeric),
       count(*) FILTER (WHERE (doc ->> 'ts')::timestamptz = ts)
FROM md
SQL
	join('|', $total, $total, $total - $nokey, $k->{qty},
		sprintf('%d.%02d', int($k->{amount_cents} / 100), $k->{amount_cents} % 100), $total),
	'the jsonb cube holds every document once, whole');

is( $node->safe_psql('postgres', <<'SQL'),
SELECT count(*), count(DISTINCT (_partition, _offset)),
       count(*) FILTER (WHERE kts = event_ts + interval '1 hour'),
       count(*) FILTER (WHERE convert_from(k, 'UTF8') ~ '^key-[0-9]+$'),
       (SELECT count(*) FROM streamcube.dead_letters)
FROM mc
SQL
	join('|', $total, $total, $total, $total - $nokey, 0),
	'the CSV cube, windowed by Kafka timestamp, holds every record once');
is( $node->safe_psql('postgres',
		"SELECT string_agg(to_char(window_start AT TIME ZONE 'UTC', 'HH24:MI'), ' ' ORDER BY window_start) "
		  . "FROM streamcube.segments WHERE cube = 'mc'::regclass AND rows > 0"),
	'01:00 02:00', 'its windows follow the Kafka timestamp (an hour after the events of 00:00-01:40)');

$node->stop;
done_testing();
