
# Several topics into one cube, on the real broker.
#
# A. Three topics of 3, 2 and 3 partitions into one cube of two replica
#    sets while producers write to all three: a receiver killed with
#    SIGKILL (the server restarts, the unlogged rows and positions start
#    over from the checkpoints), a reassignment that moves partitions of
#    two topics under load, another SIGKILL.  Then, per topic, the rows
#    are exactly Kafka's messages, (_topic, _partition, _offset) unique,
#    and the positions match the rows.
# B. A pattern: a topic created while the cube ingests is picked up within
#    streamcube.metadata_interval and read from its first message.
# C. One topic of a list deleted and created again: the cube pauses and
#    names the topic and the set_positions call; after it the new topic's
#    messages are read exactly, and the other topics lost nothing.
# E. A topic taken out of the list under load and put back: exact.
# F. Avro from two topics, each with its own subject and schema.
# G. The Kafka-visible progress group of a cube of two topics.
# D. A 0.3.0 cube holding data, updated to 0.4.0: exact, ingesting on,
#    and its topic is topic 0 of streamcube.topics.

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

my $node = sc_node('topics', "streamcube.metadata_interval = '1s'", 'restart_after_crash = on');
my $columns = 'ts timestamptz, country text, device text, amount numeric, qty int';
my $start_ts = 1793491200;    # 2026-11-01 00:00:00 UTC

# Per topic: rows = good messages in Kafka, unique, per partition.
sub check_topics_exact
{
	my ($cube, $label, @topics) = @_;
	for my $t (@topics)
	{
		my $k = sc_kafka_contents($t);
		sc_check_exact_where($node, $cube, $k, "$label, topic $t", "_topic = '$t'");
	}
	my $in = join(', ', map { "'$_'" } @topics);
	is( $node->safe_psql('postgres',
			"SELECT count(*) = count(DISTINCT (_topic, _partition, _offset)) FROM $cube WHERE _topic IN ($in)"),
		't', "$label: (_topic, _partition, _offset) is unique");
	return;
}

# Wait until the cube has read everything Kafka holds now.
sub wait_cube
{
	my ($cube, $label) = @_;
	is($node->safe_psql('postgres', "SELECT streamcube_wait('$cube', '120 s')"),
		't', "$label: streamcube_wait says $cube caught up");
	return;
}

# Each partition's committed position (or checkpoint) is its rows and
# dead letters past the checkpoint, per topic (the catalog's partition is
# topic_no << 20 | partition).
sub check_positions
{
	my ($cube, $label) = @_;
	is( $node->safe_psql('postgres', qq{
			WITH c AS (SELECT cube_id FROM streamcube.cubes WHERE relid = '$cube'::regclass),
			k AS (SELECT t.topic, k.partition & 1048575 AS partition, k."offset" AS start,
			             coalesce(p.position, k."offset") AS pos
			      FROM streamcube.checkpoints k
			      JOIN streamcube.cube_topics t ON t.cube_id = k.cube_id AND t.topic_no = k.partition >> 20
			      LEFT JOIN streamcube.consume_positions p ON p.cube_id = k.cube_id AND p.partition = k.partition
			      WHERE k.cube_id = (SELECT cube_id FROM c)),
			r AS (SELECT _topic AS topic, _partition AS partition, count(*) AS n,
			             count(*) FILTER (WHERE _offset >= k.start AND _offset < k.pos) AS inside
			      FROM $cube JOIN k ON k.topic = _topic AND k.partition = _partition GROUP BY 1, 2)
			SELECT k.topic, k.partition, k.start, k.pos, coalesce(r.n, 0), coalesce(r.inside, 0)
			FROM k LEFT JOIN r USING (topic, partition)
			WHERE coalesce(r.n, 0) <> coalesce(r.inside, 0) OR k.pos - k.start <> coalesce(r.n, 0)
			ORDER BY 1, 2}),
		'', "$label: each position = checkpoint + its rows, none beyond it");
	return;
}

sub receiver_pid
{
	my ($cube, $set) = @_;
	my $pid;
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM streamcube.consumers WHERE cube = '$cube'::regclass "
		  . "AND replica_set = '$set' AND state = 'running' AND pid IS NOT NULL")
	  or die "no running receiver of $cube ($set)";
	$pid = $node->safe_psql('postgres',
		"SELECT pid FROM streamcube.consumers WHERE cube = '$cube'::regclass AND replica_set = '$set'");
	return $pid;
}

# ---------------------------------------------------------------- A
my @list = map { sc_topic("mt$_") } (1 .. 3);
sc_create_topic($list[0], 3);
sc_create_topic($list[1], 2);
sc_create_topic($list[2], 3);
$node->safe_psql('postgres', "SELECT streamcube_create_replica_set('ra'), streamcube_create_replica_set('rb')");
sc_produce($_, count => 3000, 'start-ts' => $start_ts) for @list;
my $list_json = '[' . join(', ', map { "\"$_\"" } @list) . ']';
sc_create_cube($node, 'ev', $list_json, '{"replica_sets": ["ra", "rb"]}');
is( $node->safe_psql('postgres',
		"SELECT string_agg(topic, ',' ORDER BY topic_no) FROM streamcube.topics WHERE cube = 'ev'::regclass"),
	join(',', @list), 'A: streamcube.topics lists the three topics, numbered in the order given');

my @producers = map { sc_produce_start($_, count => 20000, rate => 2000, 'start-ts' => $start_ts + 3600) } @list;
$node->poll_query_until('postgres', "SELECT count(*) > 9000 FROM ev") or die 'nothing ingested';

my $pid = receiver_pid('ev', 'ra');
ok(kill('KILL', $pid), "A: SIGKILL to receiver ra (pid $pid) while three topics flow");
$node->poll_query_until('postgres',
	"SELECT count(*) = 2 FROM streamcube.consumers WHERE cube = 'ev'::regclass AND state = 'running'")
  or die 'receivers did not come back';
check_positions('ev', 'A, after the first SIGKILL');

# Move partitions of two topics: topic 1's partition 0 and topic 2's
# partition 1 change sets, whoever held them.
my %owner = map { split /\|/ } split /\n/, $node->safe_psql('postgres',
	"SELECT topic || ':' || partition, replica_set FROM streamcube.lag('ev')");
my %other = (ra => 'rb', rb => 'ra');
my @moved = ("$list[0]:0", "$list[1]:1");
$owner{$_} = $other{ $owner{$_} } for @moved;
my $assignment = '{' . join(', ',
	map { my $set = $_; "\"$set\": [" . join(', ', map { "\"$_\"" } sort grep { $owner{$_} eq $set } keys %owner) . ']' }
	  qw(ra rb)) . '}';
my $result = $node->safe_psql('postgres', "SELECT streamcube_reassign('ev', '$assignment')");
like($result, qr/"moved": \[\{.*"partition": "\Q$moved[0]\E".*"partition": "\Q$moved[1]\E"/,
	'A: the reassignment under load moves a partition of each of two topics, named "topic:partition"');

$pid = receiver_pid('ev', 'rb');
ok(kill('KILL', $pid), "A: SIGKILL to receiver rb (pid $pid) after the reassignment");

ok(sc_produce_finish($_), 'A: a producer delivered everything') for @producers;
wait_cube('ev', 'A');
check_topics_exact('ev', 'A, after two SIGKILLs and a reassignment', @list);
check_positions('ev', 'A, at the end');
is( $node->safe_psql('postgres',
		"SELECT string_agg(topic || ':' || partition || '=' || replica_set, ' ' ORDER BY topic, partition) "
		  . "FROM streamcube.consumer_partitions WHERE cube = 'ev'::regclass"),
	join(' ', map { "$_=$owner{$_}" } sort keys %owner),
	'A: streamcube.consumer_partitions shows each topic\'s partitions where the reassignment put them');

# Seal the three topics' windows (all in the past), produce more into
# them (late rows), then crash: the active windows start over from the
# checkpoints, the sealed ones keep their rows, and each topic is still
# exactly its messages.
ok($node->safe_psql('postgres', 'SELECT streamcube_seal_due()') > 0, 'A: windows of the three topics sealed');
sc_produce($_, count => 600, 'start-ts' => $start_ts) for @list;
$node->poll_query_until('postgres',
	"SELECT count(*) = 3 * (23000 + 600) FROM ev") or diag 'A: the late rows did not all come';
$pid = receiver_pid('ev', 'ra');
ok(kill('KILL', $pid), "A: SIGKILL to receiver ra (pid $pid) after the seal");
$node->poll_query_until('postgres',
	"SELECT count(*) = 2 FROM streamcube.consumers WHERE cube = 'ev'::regclass AND state = 'running'")
  or die 'receivers did not come back';
wait_cube('ev', 'A, sealed');
check_topics_exact('ev', 'A, sealed, late rows and a crash', @list);
is( $node->safe_psql('postgres',
		"SELECT count(*) > 0 FROM streamcube.segments WHERE cube = 'ev'::regclass AND state IN ('sealed', 'compacted') "
		  . "AND sealed_upto ?& ARRAY['$list[0]:2', '$list[1]:1', '$list[2]:0']"),
	't', 'A: sealed windows keep their sealed_upto by partition of each topic, named "topic:partition"');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.reassign_log WHERE cube = 'ev'::regclass AND step = 'merge' "
		  . "AND topics = ARRAY['$list[0]', '$list[1]'] AND partitions = '{0,1}'"),
	'1', 'A: streamcube.reassign_log names the moved partitions by topic and partition');

# Partitions of two topics left to no replica set (allow_partial):
# streamcube.consumers names them, with their topics; put back, none is.
my %partial = %owner;
delete @partial{ "$list[0]:2", "$list[2]:1" };
my $assign_of = sub {
	my ($of) = @_;
	return '{' . join(', ',
		map { my $set = $_; "\"$set\": [" . join(', ', map { "\"$_\"" } sort grep { $of->{$_} eq $set } keys %$of) . ']' }
		  qw(ra rb)) . '}';
};
$node->safe_psql('postgres',
	"SELECT streamcube_reassign('ev', '" . $assign_of->(\%partial) . "', '{\"allow_partial\": true}')");
ok( $node->poll_query_until('postgres',
		"SELECT bool_and(unassigned_partitions = '{2,1}' AND unassigned_topics = '{$list[0],$list[2]}') "
		  . "FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'A: streamcube.consumers names the partitions of two topics left unassigned, and their topics');
$node->safe_psql('postgres', "SELECT streamcube_reassign('ev', '" . $assign_of->(\%owner) . "')");
ok( $node->poll_query_until('postgres',
		"SELECT bool_and(unassigned_partitions = '{}' AND unassigned_topics = '{}') "
		  . "FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'A: assigned again, none is unassigned');

# ---------------------------------------------------------------- B
my $prefix = sc_topic('pat');
sc_create_topic("${prefix}_a", 2);
sc_produce("${prefix}_a", count => 1000, 'start-ts' => $start_ts);
sc_create_cube($node, 'pat', "{\"pattern\": \"${prefix}_.*\"}", '{"replica_sets": ["ra", "rb"]}');
my $live = sc_produce_start("${prefix}_a", count => 6000, rate => 2000, 'start-ts' => $start_ts);
$node->poll_query_until('postgres', "SELECT count(*) > 1000 FROM pat") or die 'pattern cube ingests nothing';
sc_create_topic("${prefix}_b", 3);
sc_produce("${prefix}_b", count => 1500, 'start-ts' => $start_ts);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM streamcube.topics WHERE cube = 'pat'::regclass"),
	'B: a topic created during ingest is matched by the pattern');
is( $node->safe_psql('postgres',
		"SELECT topic_no, added_by FROM streamcube.topics WHERE cube = 'pat'::regclass AND topic = '${prefix}_b'"),
	'1|pattern', 'B: it is topic 1, added by the pattern');
sc_produce("${prefix}_b", count => 500, 'start-ts' => $start_ts);
ok(sc_produce_finish($live), 'B: the producer of the first topic delivered everything');
wait_cube('pat', 'B');
check_topics_exact('pat', 'B', "${prefix}_a", "${prefix}_b");
is( $node->safe_psql('postgres', "SELECT min(_offset) FROM pat WHERE _topic = '${prefix}_b' GROUP BY _partition"),
	"0\n0\n0", 'B: the new topic is read from its first message on every partition');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.reassign_log WHERE cube = 'pat'::regclass AND step = 'assign' "
		  . "AND new_assignment::text LIKE '%${prefix}_b:2%'"),
	'1', 'B: its partitions\' assignment is journalled in streamcube.reassign_log');

# ---------------------------------------------------------------- C
my $re_ts = 1794268800;    # 2026-11-10: the re-created topic's events
my $offset = -s $node->logfile;
sc_delete_topic($list[2]);
sleep 2;
sc_create_topic($list[2], 3);
sc_produce($list[2], count => 300, 'start-ts' => $re_ts);
ok( $node->poll_query_until('postgres',
		"SELECT paused FROM streamcube.cube_status WHERE cube = 'ev'::regclass"),
	'C: a topic deleted and created again pauses the cube');
my $reason = $node->safe_psql('postgres',
	"SELECT paused_reason FROM streamcube.cube_status WHERE cube = 'ev'::regclass");
like($reason, qr/\Q$list[2]\E/, 'C: the reason names the topic');
like($reason, qr/\Q"$list[2]:\E\d\Q": "earliest"\E/, 'C: and the set_positions call for its partitions only');
unlike($reason, qr/\Q'"earliest"'\E/, 'C: not a move of every partition to earliest');
$node->safe_psql('postgres',
	"SELECT count(*) FROM streamcube_set_positions('ev', "
	  . "'{\"$list[2]:0\": \"earliest\", \"$list[2]:1\": \"earliest\", \"$list[2]:2\": \"earliest\"}')");
$node->safe_psql('postgres', "SELECT streamcube_resume('ev')");
wait_cube('ev', 'C');
check_topics_exact('ev', 'C, the topics that stayed', @list[0, 1]);
sc_check_exact_where($node, 'ev', sc_kafka_contents($list[2]), 'C, the re-created topic',
	"_topic = '$list[2]' AND ts >= to_timestamp($re_ts)");

# ---------------------------------------------------------------- E
# A topic taken out of the list while messages flow, then put back: it
# goes on where it stopped, and nothing of it or the others is lost or
# read twice.
my $list_of = sub { '[' . join(', ', map { "\"$_\"" } @_) . ']' };
@producers = map { sc_produce_start($_, count => 6000, rate => 2000, 'start-ts' => $start_ts + 7200) } @list[0, 1];
$node->poll_query_until('postgres', "SELECT count(*) > 47000 FROM ev WHERE _topic IN ('$list[0]', '$list[1]')")
  or die 'E: nothing ingested';
$node->safe_psql('postgres',
	"SELECT streamcube_alter_cube('ev', '{\"topic\": " . $list_of->(@list[0, 2]) . "}')");
is( $node->safe_psql('postgres',
		"SELECT topic FROM streamcube.topics WHERE cube = 'ev'::regclass AND removed_at IS NOT NULL"),
	$list[1], 'E: the topic taken out shows in streamcube.topics');
my $out_rows = $node->safe_psql('postgres', "SELECT count(*) FROM ev WHERE _topic = '$list[1]'");
sleep 2;
is($node->safe_psql('postgres', "SELECT count(*) FROM ev WHERE _topic = '$list[1]'"),
	$out_rows, 'E: nothing of it is read while it is out');
$node->safe_psql('postgres',
	"SELECT streamcube_alter_cube('ev', '{\"topic\": " . $list_of->(@list) . "}')");
ok(sc_produce_finish($_), 'E: a producer delivered everything') for @producers;
wait_cube('ev', 'E');
check_topics_exact('ev', 'E, after a topic was taken out and put back under load', @list[0, 1]);
sc_check_exact_where($node, 'ev', sc_kafka_contents($list[2]), 'E, the re-created topic',
	"_topic = '$list[2]' AND ts >= to_timestamp($re_ts)");

# ---------------------------------------------------------------- F
# Avro from two topics, each with its own subject and schema (Confluent's
# TopicNameStrategy: "<topic>-value"): option subject "{topic}-value" is
# checked for each topic at creation; messages are read by their ids.
sc_require_registry();
$node->safe_psql('postgres',
	"SELECT streamcube_alter_cluster('k', properties => '{\"schema.registry.url\": \"$ENV{SC_REGISTRY}\"}')");
my @av = map { sc_topic("av$_") } (1, 2);
sc_create_topic($_, 2) for @av;
my $ts_type = { type => 'long', logicalType => 'timestamp-millis' };
my $schema_a = JSON::PP->new->canonical->encode({ type => 'record', name => 'A',
		fields => [ { name => 'ts', type => $ts_type }, { name => 'n', type => 'long' } ] });
my $schema_b = JSON::PP->new->canonical->encode({ type => 'record', name => 'B',
		fields => [ { name => 'n', type => 'long' }, { name => 'extra', type => 'string' },
			{ name => 'ts', type => $ts_type } ] });
sc_registry_produce($av[0], format => 'avro', schema => $schema_a,
	records => [ map { { ts => $start_ts * 1000 + $_ * 1000, n => $_ } } 1 .. 300 ]);
sc_registry_produce($av[1], format => 'avro', schema => $schema_b,
	records => [ map { { ts => $start_ts * 1000 + $_ * 1000, n => 1000 + $_, extra => "x$_" } } 1 .. 200 ]);
my $av_list = '[' . join(', ', map { "\"$_\"" } @av) . ']';
my ($rc, $stdout, $stderr) = $node->psql('postgres',
	"SELECT streamcube_create_cube('av_bad', 'k', '$av_list', 'ts timestamptz, n bigint', 'ts', '1 hour', 'avro', "
	  . "'{\"subject\": \"{topic}-nothere\"}')");
like($stderr, qr/subject "\Q$av[0]\E-nothere" does not exist/,
	'F: a subject "{topic}-..." is checked for each topic, and one missing named');
$node->safe_psql('postgres',
	"SELECT streamcube_create_cube('av', 'k', '$av_list', 'ts timestamptz, n bigint', 'ts', '1 hour', 'avro', "
	  . "'{\"subject\": \"{topic}-value\"}')");
wait_cube('av', 'F');
is( $node->safe_psql('postgres',
		"SELECT _topic, count(*), sum(n), count(DISTINCT (_partition, _offset)) FROM av GROUP BY 1 ORDER BY 1"),
	"$av[0]|300|45150|300\n$av[1]|200|220100|200",
	'F: each topic read by its own schema, exactly');

# ---------------------------------------------------------------- G
# The progress group of a cube of two topics: Kafka's own tools see each
# topic's partitions at the cube's positions.
my @pg = map { sc_topic("pg$_") } (1, 2);
sc_create_topic($pg[0], 2);
sc_create_topic($pg[1], 3);
sc_produce($pg[0], count => 400);
sc_produce($pg[1], count => 300);
my $group = "sc-topics-$$";
sc_create_cube($node, 'pgc', '[' . join(', ', map { "\"$_\"" } @pg) . ']', qq({"progress_group": "$group"}));
wait_cube('pgc', 'G');
for my $t (@pg)
{
	my $k = sc_kafka_contents($t);
	my $want = join(',', map { "$_:$k->{partitions}{$_}{high}" } sort { $a <=> $b } keys %{ $k->{partitions} });
	my $got = '';
	for (1 .. 30)
	{
		my $out = sc_kafka_tool('org.apache.kafka.tools.consumer.group.ConsumerGroupCommand',
			'--bootstrap-server', $ENV{SC_KAFKA}, '--describe', '--group', $group);
		my %o;
		for (split /\n/, $out)
		{
			my @f = split ' ';
			$o{ $f[2] } = $f[3] if @f >= 6 && $f[0] eq $group && $f[1] eq $t;
		}
		$got = join(',', map { "$_:$o{$_}" } sort { $a <=> $b } keys %o);
		last if $got eq $want;
		sleep 1;
	}
	is($got, $want, "G: the progress group shows topic $t at the cube's positions, by its own partitions");
}

# ---------------------------------------------------------------- D
my $old = sc_node('topics_update');
$old->safe_psql('postgres', 'DROP EXTENSION streamcube');
$old->safe_psql('postgres', "CREATE EXTENSION streamcube VERSION '0.3.0'");
$old->safe_psql('postgres', "SELECT streamcube_add_cluster('k', '$ENV{SC_KAFKA}')");
my $one = sc_topic('upd');
sc_create_topic($one, 2);
sc_produce($one, count => 2000, 'start-ts' => $start_ts);
sc_create_cube($old, 'up', $one);
sc_kcat_produce($one, 0, 'not json');
is($old->safe_psql('postgres', "SELECT streamcube_wait('up', '120 s')"), 't', 'D: the 0.3.0 cube caught up');
is($old->safe_psql('postgres', 'SELECT count(*) FROM streamcube.dead_letters'), '1',
	'D: a dead letter on the 0.3.0 catalog, written by this library');
$old->safe_psql('postgres', 'ALTER EXTENSION streamcube UPDATE');
sc_kcat_produce($one, 1, 'not json either');
my $more = sc_produce_start($one, count => 3000, rate => 3000, 'start-ts' => $start_ts);
ok(sc_produce_finish($more), 'D: produced on after the update');
is($old->safe_psql('postgres', "SELECT streamcube_wait('up', '120 s')"), 't', 'D: the updated cube caught up');
sc_check_exact($old, 'up', sc_kafka_contents($one), 'D, after the update');
is( $old->safe_psql('postgres', "SELECT topic, topic_no, added_by FROM streamcube.topics"),
	"$one|0|create", 'D: the updated cube reads its topic as topic 0');
is( $old->safe_psql('postgres', "SELECT topic, partition FROM streamcube.dead_letters ORDER BY recorded_at"),
	"$one|0\n$one|1", 'D: dead letters before and after the update say their topic');
is( $old->safe_psql('postgres',
		"SELECT count(*) FROM pg_attribute WHERE attrelid = 'up'::regclass AND attname = '_topic'"),
	'0', 'D: a cube of one topic has no _topic column');

# The updated cube of one topic takes a second topic: it becomes a cube of
# a list, its topic first (topic 0), its table gains _topic (its rows,
# sealed ones too, say their topic without being rewritten), and ingest
# goes on, exact for both topics.
ok($old->safe_psql('postgres', 'SELECT streamcube_seal_due()') > 0, 'D: windows of the updated cube sealed');
my $sealed_before = $old->safe_psql('postgres', 'SELECT count(*) FROM up_sealed');
my ($out, $err);
($rc, $out, $err) = $old->psql('postgres', "SELECT streamcube_alter_cube('up', '{\"topic\": \"elsewhere\"}')");
like($err, qr/"topic" of cube "up" cannot be changed.*\n.*HINT:.*give a list with its topic first/s,
	'D: another single topic is refused, with the way to add one');
my $two = sc_topic('upd2');
sc_create_topic($two, 3);
sc_produce($two, count => 1500, 'start-ts' => $start_ts);
$more = sc_produce_start($one, count => 3000, rate => 3000, 'start-ts' => $start_ts + 7200);
($rc, $out, $err) = $old->psql('postgres', "SELECT streamcube_alter_cube('up', '{\"topic\": [\"$one\", \"$two\"]}') IS NOT NULL");
is($rc, 0, 'D: the cube of one topic takes a list of it and another, under load');
like($err, qr/reads a list of topics now, its topic first/, 'D: ... and says it reads a list now');
ok(sc_produce_finish($more), 'D: produced on meanwhile');
sc_produce($two, count => 500, 'start-ts' => $start_ts + 7200);
is($old->safe_psql('postgres', "SELECT streamcube_wait('up', '120 s')"), 't', 'D: the cube of two topics caught up');
for my $t ($one, $two)
{
	sc_check_exact_where($old, 'up', sc_kafka_contents($t), "D, topic $t after the change", "_topic = '$t'");
}
is($old->safe_psql('postgres', 'SELECT count(*) = count(DISTINCT (_topic, _partition, _offset)) FROM up'),
	't', 'D: (_topic, _partition, _offset) is unique');
is( $old->safe_psql('postgres', 'SELECT string_agg(topic || \'|\' || topic_no || \'|\' || added_by, \' \' ORDER BY topic_no) FROM streamcube.topics'),
	"$one|0|create $two|1|alter", 'D: its topic is topic 0 still, the new one topic 1');
is( $old->safe_psql('postgres',
		"SELECT count(*) FILTER (WHERE _topic = '$one') >= $sealed_before, count(*) FILTER (WHERE _topic = '$two') > 0 "
		  . 'FROM up_sealed'),
	't|t', 'D: through <cube>_sealed, the rows sealed before say their topic, and late rows of the new topic are there');
$old->stop;

$node->stop;
done_testing();
