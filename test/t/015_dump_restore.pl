
# pg_dump during ingest, restored in one transaction into another server:
# the catalogs (rows of the extension's configuration tables), the cube's
# rows and its consume positions come from one snapshot, so the restored
# cube resumes exactly where the dump left it -- every message once.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;

sc_require_env();

my $backlog = 40_000;
my $live = 40_000;
my $total = $backlog + $live;
my $start_ts = 1796025600;    # 2026-12-01 00:00:00 UTC

my $source = sc_node('dump_source');
my $topic = sc_topic('dump');
sc_create_topic($topic, 2);
sc_produce($topic, count => $backlog, 'start-ts' => $start_ts, 'step-ms' => 100, seed => 1);
sc_create_cube($source, 'ev', $topic);
my $producer = sc_produce_start($topic, count => $live, rate => 5000,
	'start-ts' => $start_ts + $backlog / 10, 'step-ms' => 100, seed => 2);

ok($source->poll_query_until('postgres', 'SELECT count(*) >= 20000 FROM ev'),
	'ingest is under way on the source');

my $dump = $PostgreSQL::Test::Utils::tmp_check . '/streamcube.dump';
command_ok(
	[ 'pg_dump', '-h', $source->host, '-p', $source->port, '-U', 'postgres',
		'-Fc', '-f', $dump, 'postgres' ],
	'pg_dump of the database during ingest');

# The target: streamcube preloaded, the extension not yet created.
my $target = PostgreSQL::Test::Cluster->new('dump_target');
$target->init;
$target->append_conf('postgresql.conf', join("\n",
	"shared_preload_libraries = 'streamcube'",
	"streamcube.database = 'postgres'",
	"max_worker_processes = 16") . "\n");
$target->start;
command_ok(
	[ 'pg_restore', '-h', $target->host, '-p', $target->port, '-U', 'postgres',
		'--single-transaction', '-d', 'postgres', $dump ],
	'pg_restore in one transaction');

# The rows the dump held are those of the restore's one transaction (the
# oldest xmin of the table): the launcher may start the receiver, which adds
# rows of its own, before this query runs.
my $restored = $target->safe_psql('postgres',
	'SELECT count(*) FROM ev WHERE xmin::text::bigint = (SELECT min(xmin::text::bigint) FROM ev)');
ok($restored > 0 && $restored < $total, "the dump held part of the stream ($restored rows)");
sc_check_positions_match_rows($target, 'ev', 'right after the restore');
ok( $target->poll_query_until('postgres',
		"SELECT state = 'running' FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'the restored cube has a running receiver');

ok(sc_produce_finish($producer), "the producer delivered all $live messages");
is($target->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"),
	't', 'the restored cube consumed everything in Kafka');

my $k = sc_kafka_contents($topic);
is($k->{count}, $total, "Kafka holds the $total messages produced");
sc_check_exact($target, 'ev', $k, 'on the restored server');
sc_check_positions_match_rows($target, 'ev', 'at the end');
cmp_ok($target->safe_psql('postgres', 'SELECT rows_total FROM streamcube.consumers'),
	'<=', $total - $restored,
	'the restored receiver read only what the dump did not hold');

$source->stop;
$target->stop;
done_testing();
