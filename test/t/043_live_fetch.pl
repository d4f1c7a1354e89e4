
# A live stream's fetch settings (issue 25): what a receiver derives from
# streamcube.batch_max_ms, what a cluster's own properties override, and
# that a live stream is read whole, at once and exactly, with them.
#
#   - with the defaults, each receiver says in the server log that it
#     fetches with fetch.wait.max.ms 45 and fetch.min.bytes 131072 (half of
#     fetch.message.max.bytes, 256 kB at the default fetch_queue_size) and
#     holds a batch open 5 ms;
#   - a cluster that sets fetch.wait.max.ms keeps its value (the other one
#     is still derived), one that sets fetch.min.bytes = 1 gets the old
#     behaviour: the receiver holds its batch open batch_max_ms;
#   - a new batch_max_ms reaches a receiver when it opens its consumer
#     again (pause, resume);
#   - a cube over a topic the cluster lacks is refused, on a cluster of
#     several topics (the receivers and streamcube_create_cube ask for one
#     topic's metadata);
#   - a stream of 500 messages/s for 6 s is committed exactly, each row
#     visible well within seconds (a loose bound: the point is that no
#     message waits for fetch.min.bytes to fill);
#   - a minute without a message, the receiver fetches with librdkafka's
#     own settings; a steady stream brings the derived ones back, and every
#     message is there exactly once.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;

sc_require_env();

my $node = sc_node('live_fetch', 'track_commit_timestamp = on');
$node->safe_psql('postgres', <<"SQL");
SELECT streamcube_add_cluster('k_wait', '$ENV{SC_KAFKA}', '{"fetch.wait.max.ms": 200}');
SELECT streamcube_add_cluster('k_min1', '$ENV{SC_KAFKA}', '{"fetch.min.bytes": 1}');
SQL

my $live = sc_topic('live');
my $other = sc_topic('other');
my $third = sc_topic('third');
sc_create_topic($live, 4);
sc_create_topic($other, 2);
sc_create_topic($third, 3);
# a few more topics on the cluster, which no cube reads
sc_create_topic(sc_topic("more$_"), 1) for 1 .. 5;

my $log = -s $node->logfile;
sc_create_cube($node, 'lf', $live);
$node->safe_psql('postgres', <<"SQL");
SELECT streamcube_create_cube('lw', 'k_wait', '$other',
       'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 hour', 'json');
SELECT streamcube_create_cube('l1', 'k_min1', '$third',
       'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 hour', 'json');
SQL
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 3 FROM streamcube.consumers WHERE state = 'running'"),
	'three receivers running');
is( $node->safe_psql('postgres',
		"SELECT partitions FROM streamcube.consumers WHERE cube = 'lf'::regclass"),
	'{0,1,2,3}', 'the cube over one topic of several has its topic\'s partitions');

my $fetch_line = sub {
	my ($cube, $since) = @_;
	my $text = sc_log_since($node, $since);
	my @lines = $text =~ /(streamcube receiver of cube public\.\Q$cube\E fetches with [^\n]*)/g;
	return $lines[-1] // '';
};
isnt($fetch_line->('lf', $log), '', 'the receiver says how it fetches in the server log');
like(
	$fetch_line->('lf', $log),
	qr/fetch\.wait\.max\.ms 45 and fetch\.min\.bytes 131072 \(from streamcube\.batch_max_ms\), and holds a batch open 5 ms$/,
	'defaults: fetch.wait.max.ms 9/10 of batch_max_ms, fetch.min.bytes half of fetch.message.max.bytes');
like(
	$fetch_line->('lw', $log),
	qr/fetch\.wait\.max\.ms 200 and fetch\.min\.bytes 131072, and holds a batch open 5 ms$/,
	'a cluster\'s fetch.wait.max.ms wins; fetch.min.bytes is still derived');
like(
	$fetch_line->('l1', $log),
	qr/fetch\.wait\.max\.ms 45 and fetch\.min\.bytes 1, and holds a batch open 50 ms$/,
	'a cluster\'s fetch.min.bytes = 1: the receiver holds its batch open batch_max_ms');

# A new batch_max_ms, at the next opening of the consumer.
$log = -s $node->logfile;
$node->append_conf('postgresql.conf', "streamcube.batch_max_ms = 200\n");
$node->reload;
$node->safe_psql('postgres', "SELECT streamcube_pause('lf')");
ok( $node->poll_query_until('postgres',
		"SELECT state = 'paused' FROM streamcube.consumers WHERE cube = 'lf'::regclass"),
	'paused');
$node->safe_psql('postgres', "SELECT streamcube_resume('lf')");
ok( $node->poll_query_until('postgres',
		"SELECT state = 'running' FROM streamcube.consumers WHERE cube = 'lf'::regclass"),
	'running again');
like(
	$fetch_line->('lf', $log),
	qr/fetch\.wait\.max\.ms 180 and fetch\.min\.bytes 131072 \(from streamcube\.batch_max_ms\), and holds a batch open 20 ms$/,
	'batch_max_ms 200: fetch.wait.max.ms 180, a batch held open 20 ms');
$node->append_conf('postgresql.conf', "streamcube.batch_max_ms = 50\n");
$node->reload;

# A topic the cluster lacks.
my ($rc, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_create_cube('nope', 'k', 'sc_no_such_topic_$$', "
	  . "'ts timestamptz, qty int', 'ts', '1 hour', 'json')");
like($err, qr/topic "sc_no_such_topic_\d+" does not exist on Kafka cluster "k"/,
	'a cube over a missing topic is refused');

# A live stream, stamped with the wall clock: 3,000 messages at 500/s.
sc_produce($live, count => 3000, rate => 500, partitions => 4, seed => 7);
is($node->safe_psql('postgres', "SELECT streamcube_wait('lf', '60 s')"), 't', 'caught up');
sc_check_exact($node, 'lf', sc_kafka_contents($live), 'live stream');
my $median = $node->safe_psql('postgres',
	"SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM pg_xact_commit_timestamp(xmin) - ts)) FROM lf");
note "median wait from ts to commit: $median s";
cmp_ok($median, '<', 5, 'rows of a live stream become visible within seconds');

# Idle for a minute: librdkafka's own settings (an idle consumer asks its
# broker twice a second, not twenty times); a steady stream brings the
# derived ones back.  'lw' keeps its cluster's settings throughout.
$log = -s $node->logfile;
my $waited = 0;
while ($fetch_line->('lf', $log) eq '' && $waited < 180)
{
	sleep 1;
	$waited++;
}
like(
	$fetch_line->('lf', $log),
	qr/fetch\.wait\.max\.ms 500 and fetch\.min\.bytes 1 \(librdkafka's own while the topic is idle\), and holds a batch open 50 ms$/,
	'a minute without a message: librdkafka\'s own fetch settings');
is($fetch_line->('lw', $log), '', 'a cluster that sets fetch.wait.max.ms keeps its consumer');
$log = -s $node->logfile;
my $producer = sc_produce_start($live, count => 30000, rate => 1000, partitions => 4, seed => 8);
$waited = 0;
while ($fetch_line->('lf', $log) eq '' && $waited < 90)
{
	sleep 1;
	$waited++;
}
ok(sc_produce_finish($producer), 'the producer delivered everything');
is($node->safe_psql('postgres', "SELECT streamcube_wait('lf', '60 s')"), 't', 'caught up again');
like(
	$fetch_line->('lf', $log),
	qr/fetch\.wait\.max\.ms 45 and fetch\.min\.bytes 131072 \(from streamcube\.batch_max_ms\)/,
	'a steady stream again: the derived fetch settings');
sc_check_exact($node, 'lf', sc_kafka_contents($live), 'after two changes of pace');

$node->stop;
done_testing();
