
# Monitoring that tells the truth:
#
#   - partitions added to a topic after its cube was created, under option
#     new_partitions = ignore, are consumed by no replica set (under the
#     default, assign, see 024_reassign.pl); streamcube.consumers shows them as
#     unassigned_partitions (an alert can fire), and streamcube_wait()
#     returns false with a WARNING, while the old partitions are still
#     ingested exactly once;
#   - a receiver that is not running (its owner cannot log in) makes
#     streamcube_wait() false, even when every position is at its end;
#   - option tombstones = skip: tombstones are counted in
#     streamcube.consumers.tombstones_skipped and are neither rows nor
#     dead letters;
#   - streamcube.lag() on a live stream: the last stable offset of a
#     partition is never above its high watermark;
#   - pg_stat_user_tables counts the rows receivers insert.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;

sc_require_env();

my $start_ts = 1796025600;    # 2026-12-01 00:00:00 UTC
my $node = sc_node('monitoring');

# ---------------------------------------------------------------- added partitions
my $topic = sc_topic('added');
sc_create_topic($topic, 2);
sc_produce($topic, count => 200, 'start-ts' => $start_ts, 'step-ms' => 1000);
sc_create_cube($node, 'ev', $topic, '{"new_partitions": "ignore"}');
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"),
	't', 'the cube consumes its two partitions');
is($node->safe_psql('postgres',
		"SELECT unassigned_partitions FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'{}', 'no partition is unassigned');

# The receivers' inserts reach the cumulative statistics (a background
# worker reports them only when it asks to), where autovacuum reads them.
ok( $node->poll_query_until('postgres',
		"SELECT sum(s.n_tup_ins) FROM pg_stat_user_tables s JOIN pg_inherits i ON i.inhrelid = s.relid "
		  . "WHERE i.inhparent = 'ev'::regclass",
		'200'),
	'pg_stat_user_tables counts the 200 rows the receiver inserted into the partitions');

sc_add_partitions($topic, 4);
sc_produce($topic, count => 400, 'start-ts' => $start_ts + 1000, 'step-ms' => 1000);

# Receivers look at the topic's partition count every streamcube.metadata_interval (30 s).
ok( $node->poll_query_until('postgres',
		"SELECT unassigned_partitions = '{2,3}' FROM streamcube.consumers "
		  . "WHERE cube = 'ev'::regclass"),
	'streamcube.consumers shows partitions 2 and 3 as unassigned')
  or diag $node->safe_psql('postgres', 'SELECT * FROM streamcube.consumers');
is($node->safe_psql('postgres',
		"SELECT state, partitions FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'running|{0,1}', 'the receiver still runs on partitions 0 and 1');

my ($ret, $out, $err) = $node->psql('postgres', "SELECT streamcube_wait('ev', '30 s')");
is($out, 'f', 'streamcube_wait is false while partitions are unassigned');
like($err, qr/WARNING:  partitions 2, 3 of topic "\Q$topic\E" are not consumed by cube "ev"/,
	'and says which partitions');

# The assigned partitions are still ingested exactly: 100 + 100 of the first
# batch, and 100 each of the 400 (message i goes to partition i % 4).
ok( $node->poll_query_until('postgres',
		"SELECT positions = '{200,200}' FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'partitions 0 and 1 reach their ends');
is($node->safe_psql('postgres',
		"SELECT _partition, count(*), count(DISTINCT _offset), max(_offset) + 1 "
		  . "FROM ev GROUP BY 1 ORDER BY 1"),
	"0|200|200|200\n1|200|200|200",
	'partitions 0 and 1: 200 rows each, once each');

# ---------------------------------------------------------------- receiver not running
$node->safe_psql('postgres', 'CREATE ROLE carol LOGIN IN ROLE streamcube_admin');
$node->safe_psql('postgres', 'GRANT CREATE ON SCHEMA public TO carol');
my $topic2 = sc_topic('notrunning');
sc_create_topic($topic2, 1);
sc_produce($topic2, count => 10, 'start-ts' => $start_ts, 'step-ms' => 1000);
$node->safe_psql('postgres',
	"SET ROLE carol; SELECT streamcube_create_cube('ev2', 'k', '$topic2', "
	  . "'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 hour')");
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev2', '60 s')"),
	't', 'carol\'s cube consumes its topic');
$node->safe_psql('postgres', 'ALTER ROLE carol NOLOGIN');
$node->safe_psql('postgres',
	"SELECT pg_terminate_backend(pid) FROM streamcube.consumers WHERE cube = 'ev2'::regclass");
ok( $node->poll_query_until('postgres',
		"SELECT state = 'failed' AND last_error LIKE '%cannot log in%' "
		  . "FROM streamcube.consumers WHERE cube = 'ev2'::regclass"),
	'the receiver of carol\'s cube is not running: its owner cannot log in');
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev2', '2 s')"),
	'f', 'streamcube_wait is false while the receiver is not running, positions at the end or not');
$node->safe_psql('postgres', 'ALTER ROLE carol LOGIN');
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev2', '60 s')"),
	't', 'once the owner can log in again, streamcube_wait is true');

# ---------------------------------------------------------------- tombstones skipped
my $topic3 = sc_topic('tombstones');
sc_create_topic($topic3, 1);
my $in = qq(a:{"ts":"2026-12-01T00:00:01Z","qty":1}\nb:\nc:{"ts":"2026-12-01T00:00:02Z","qty":2}\nd:\n);
my ($o, $e) = ('', '');
IPC::Run::run([ 'kcat', '-P', '-b', $ENV{SC_KAFKA}, '-t', $topic3, '-p', '0', '-K:', '-Z' ],
	'<', \$in, '>', \$o, '2>', \$e)
  or die "kcat -P failed: $e";
$node->safe_psql('postgres',
	"SELECT streamcube_create_cube('tomb', 'k', '$topic3', 'ts timestamptz, qty int', 'ts', "
	  . "'1 hour', 'json', '{\"tombstones\": \"skip\"}')");
is($node->safe_psql('postgres', "SELECT streamcube_wait('tomb', '60 s')"),
	't', 'the cube with tombstones = skip consumes its topic');
is($node->safe_psql('postgres', "SELECT _offset, qty FROM tomb ORDER BY 1"),
	"0|1\n2|2", 'the two events are rows');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.dead_letters WHERE cube = 'tomb'::regclass"),
	'0', 'no tombstone is a dead letter');
is($node->safe_psql('postgres',
		"SELECT tombstones_skipped, positions FROM streamcube.consumers WHERE cube = 'tomb'::regclass"),
	'2|{4}', 'both tombstones are counted as skipped, and the position is past them');

# ---------------------------------------------------------------- lag() on a live stream
my $live = sc_topic('live');
sc_create_topic($live, 4);
sc_create_cube($node, 'live', $live);
my $producer = sc_produce_start($live, count => 60000, rate => 6000, seed => 19);
my ($samples, $bad) = (0, '');
while (sc_producer_running($producer))
{
	my $rows = $node->safe_psql('postgres',
		"SELECT string_agg(partition || ':' || last_stable_offset || '>' || high_watermark, ' ') "
		  . "FROM streamcube.lag('live') WHERE last_stable_offset > high_watermark");
	$bad .= "$rows " if $rows ne '';
	$samples++;
}
ok(sc_produce_finish($producer), 'the live stream was delivered');
cmp_ok($samples, '>', 5, "lag() was read $samples times while the stream ran");
is($bad, '', 'the last stable offset never exceeded the high watermark');

$node->stop;
done_testing();
