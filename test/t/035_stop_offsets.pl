
# Stop points: streamcube_resume(cube, until => ...) reads each partition
# up to its stop offset and no further, then the cube pauses by itself and
# streamcube_wait() returns true; option end makes a backfill cube; option
# start {"cube": ...} starts a new cube exactly where another stops.
#
#  1. A running cube under a running producer stops at "latest", on a topic
#     with an idle partition, while a new cube is cut over at the same
#     point: every message in exactly one of the two, each cube's rows
#     exactly the messages on its side of the stop offsets.
#  2. A crash (immediate stop) empties the active windows: the cube paused
#     at its stop point reads up to it again, and no further.
#  3. A transactional topic whose last records are commit markers (and an
#     aborted transaction in the middle): a backfill cube (option end)
#     stops there.
#  4. A backfill by time: option start and end as timestamps.
#  5. A compacted topic whose stop offset was compacted away.
#  6. Errors, and resume without until forgets the stop point.

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

my $node = sc_node('stops');

sub q1 { return $node->safe_psql('postgres', $_[0]); }

# partition => stop offset, from streamcube.stops
sub stops_of
{
	my ($cube) = @_;
	my %s = map { split /\|/ } split /\n/,
	  q1("SELECT partition, stop_offset FROM streamcube.stops WHERE cube = '$cube'::regclass");
	return \%s;
}

# partition => committed position
sub positions_of
{
	my ($cube) = @_;
	my %p = map { split /\|/ } split /\n/,
	  q1("SELECT partition, position FROM streamcube.consume_positions p "
		  . "JOIN streamcube.cubes c USING (cube_id) WHERE c.relid = '$cube'::regclass");
	return \%p;
}

sub show { my ($h) = @_; return join(',', map { "$_:$h->{$_}" } sort { $a <=> $b } keys %$h); }

# The records of sc_kafka_records below (or at and past) the stops.
sub records_split
{
	my ($records, $stops) = @_;
	my (%below, %above);
	for my $k (keys %$records)
	{
		my ($p, $o) = @{ $records->{$k} };
		if ($o < ($stops->{$p} // 0)) { $below{$k} = $records->{$k}; }
		else { $above{$k} = $records->{$k}; }
	}
	return (\%below, \%above);
}

sub wait_stopped
{
	my ($cube, $what) = @_;
	is(q1("SELECT streamcube_wait('$cube', '120 s')"), 't', "$what: streamcube_wait returns true");
	my $t0 = time;
	my $state;
	while (time - $t0 < 30)
	{
		$state = q1("SELECT paused, paused_reason LIKE 'reached its stop point%', "
			  . "stop_reached_at IS NOT NULL FROM streamcube.cubes WHERE relid = '$cube'::regclass");
		last if $state eq 't|t|t';
		sleep(0.2);
	}
	is($state, 't|t|t', "$what: the cube paused by itself, saying it reached its stop point");
	is(show(positions_of($cube)), show(stops_of($cube)), "$what: every position equals its stop offset");
	return;
}

# ---------------------------------------------------------------------
# 1. Stop at "latest" under load, idle partition, cut-over
# ---------------------------------------------------------------------
my $topic = sc_topic('stops');
sc_create_topic($topic, 3);
sc_produce($topic, count => 3000, partitions => 2);    # partition 2 stays empty
sc_create_cube($node, 'old', $topic);
my $producer = sc_produce_start($topic, count => 30000, rate => 3000, partitions => 2, seed => 2);
sleep(2);

q1("SELECT streamcube_resume('old', until => '\"latest\"')");
my $stops = stops_of('old');
is(scalar(keys %$stops), 3, 'a stop offset for each of the 3 partitions');
is($stops->{2}, 0, 'the idle partition stops at 0');
cmp_ok($stops->{0}, '>=', 1500, 'partition 0 stops at or past what was produced before');
is(q1("SELECT requested FROM streamcube.stops WHERE cube = 'old'::regclass ORDER BY partition LIMIT 1"),
	'latest', 'streamcube.stops says what was asked');

# The new cube starts where the old one stops, while both run.
sc_create_cube($node, 'new', $topic, '{"start": {"cube": "old"}}');
is(show({ map { split /\|/ } split /\n/, q1(
		"SELECT partition, \"offset\" FROM streamcube.checkpoints k JOIN streamcube.cubes c USING (cube_id) "
		  . "WHERE c.relid = 'new'::regclass") }),
	show($stops), 'the new cube starts at the old one\'s stop offsets');

wait_stopped('old', 'stop at "latest" under load');
ok(sc_produce_finish($producer), 'the producer delivered everything');
is(q1("SELECT streamcube_wait('new', '120 s')"), 't', 'the new cube caught up');

my $records = sc_kafka_records($topic);
my ($below, $above) = records_split($records, $stops);
sc_check_exact($node, 'old', sc_records_contents($below), 'old cube: the messages below the stops');
sc_check_exact($node, 'new', sc_records_contents($above), 'new cube: the messages at and past the stops');
sc_check_exact($node, '(SELECT * FROM old UNION ALL SELECT * FROM new) AS u',
	sc_records_contents($records), 'old and new together: every message exactly once');
is(q1("SELECT count(*) FROM old o JOIN new n USING (_partition, _offset)"), 0,
	'no message is in both cubes');
is(q1("SELECT state FROM streamcube.consumers WHERE cube = 'old'::regclass"), 'paused',
	'the stopped cube\'s receiver is paused');

# A cube at its stop point stays there while messages arrive.
sc_produce($topic, count => 200, partitions => 3, seed => 3);
is(q1("SELECT streamcube_wait('new', '60 s')"), 't', 'the new cube reads the new messages');
sleep(1);
sc_check_exact($node, 'old', sc_records_contents($below), 'old cube after more messages: still its stop point only');

# ---------------------------------------------------------------------
# 2. A crash: the cube paused at its stop point reads up to it again
# ---------------------------------------------------------------------
$node->stop('immediate');
$node->start;
# The receiver reads up to the stop point again at once: a count of the
# cube here would race it.  That the crash emptied the windows shows in
# what its new process wrote: every row below the stops, again.
is(q1("SELECT streamcube_wait('old', '120 s')"), 't', 'after the crash, streamcube_wait waits until the stop point again');
is(q1("SELECT rows_direct + rows_copy FROM streamcube.consumers WHERE cube = 'old'::regclass"),
	scalar(keys %$below), 'the crash emptied the active windows of the stopped cube: its receiver wrote them again');
sc_check_exact($node, 'old', sc_records_contents($below), 'old cube after the crash: the messages below the stops, once');
is(q1("SELECT paused, stop_reached_at IS NOT NULL FROM streamcube.cubes WHERE relid = 'old'::regclass"), 't|t',
	'it is still paused at its stop point');
is(q1("SELECT streamcube_wait('new', '120 s')"), 't', 'the new cube caught up after the crash');
my (undef, $above2) = records_split(sc_kafka_records($topic), $stops);
sc_check_exact($node, 'new', sc_records_contents($above2), 'new cube after the crash: the messages past the stops, once');

# ---------------------------------------------------------------------
# 3. Transactions: commit markers at the end, an aborted one inside
# ---------------------------------------------------------------------
my $ttopic = sc_topic('stops_txn');
sc_create_topic($ttopic, 1);
for my $run ([ 'commit', 100 ], [ 'abort', 50 ], [ 'commit', 30 ])
{
	my ($end, $count) = @$run;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $ENV{SC_SCKAFKA}, 'produce', '--bootstrap', $ENV{SC_KAFKA}, '--topic', $ttopic,
			'--count', $count, '--seed', $count, '--transactional-id', "sc-stops-$$", '--end', $end ],
		'<', \undef, '>', \$out, '2>', \$err) or die "transactional produce failed: $err";
}
sc_create_cube($node, 'txn', $ttopic, '{"end": "latest"}');
my $tstops = stops_of('txn');
is($tstops->{0}, 183, 'stop at the end: 180 records and 3 markers');
wait_stopped('txn', 'transactional topic ending in a marker');
sc_check_exact($node, 'txn', sc_records_contents(sc_kafka_records($ttopic)),
	'transactional topic: the 130 committed messages, once');

# ---------------------------------------------------------------------
# 4. A backfill by time
# ---------------------------------------------------------------------
my $btopic = sc_topic('stops_time');
# The messages are stamped (CreateTime) in the past: with Kafka's default
# time retention (7 days) the broker's retention check, every 5 minutes,
# would delete them once that date is more than a week ago.
sc_create_topic_config($btopic, 2, 'retention.ms' => -1);
my $base = 1795132800;    # 2026-11-20 00:00 UTC
sc_produce($btopic, count => 1000, meta => 1, 'start-ts' => $base, 'step-ms' => 1000, seed => 4);
# --meta stamps each message ts + 1 hour (CreateTime): message i at base + i s + 1 h
my ($from, $to) = ($base + 3600 + 200, $base + 3600 + 700);
sc_create_cube($node, 'backfill', $btopic,
	sprintf('{"start": "%s", "end": {"timestamp": "%s"}}',
		q1("SELECT to_timestamp($from)"), q1("SELECT to_timestamp($to)")));
wait_stopped('backfill', 'backfill from start to end by time');
is(q1("SELECT count(*), min(ts) = to_timestamp($from - 3600), max(ts) = to_timestamp($to - 3600 - 1) FROM backfill"),
	'500|t|t', 'the backfill holds exactly the messages stamped in [start, end)');
is(q1("SELECT count(*) = count(DISTINCT (_partition, _offset)) FROM backfill"), 't',
	'backfill: (_partition, _offset) is unique');

# ---------------------------------------------------------------------
# 5. A compacted topic: the stop offset was compacted away
# ---------------------------------------------------------------------
my $ctopic = sc_topic('stops_compact');
_create_compacted($ctopic);
sub _create_compacted
{
	my ($t) = @_;
	IPC::Run::run([ $ENV{SC_SCKAFKA}, 'create-topic', '--bootstrap', $ENV{SC_KAFKA}, $t, 1,
			'--config', 'cleanup.policy=compact', '--config', 'segment.ms=100',
			'--config', 'min.cleanable.dirty.ratio=0.001', '--config', 'delete.retention.ms=0',
			'--config', 'min.compaction.lag.ms=0' ],
		'<', \undef, '>', \my $o, '2>', \my $e) or die "create-topic failed";
	return;
}
sub _kcat_keyed
{
	my ($t, @lines) = @_;
	my $in = join('', map { "$_\n" } @lines);
	IPC::Run::run([ 'kcat', '-P', '-b', $ENV{SC_KAFKA}, '-t', $t, '-p', 0, '-K', '|' ],
		'<', \$in, '>', \my $o, '2>', \my $e) or die "kcat -P failed";
	return;
}
my $event = '{"ts":"2026-11-30T10:00:00.000Z","country":"de","device":"ios","amount":1.00,"qty":1}';
# offsets 0..19 under keys of their own (kept), 20..99 under k0..k9 (90..99 kept)
_kcat_keyed($ctopic, (map { "u$_|$event" } 0 .. 19), (map { sprintf('k%d|%s', $_ % 10, $event) } 20 .. 99));
my $t0 = time;
my $gone;
while (time - $t0 < 90)
{
	sleep(1);
	_kcat_keyed($ctopic, "roll|$event");    # rolls the segment, so the cleaner can take the rest
	my $r = sc_kafka_records($ctopic);
	$gone = !exists $r->{'0:50'} && exists $r->{'0:95'} && exists $r->{'0:10'};
	last if $gone;
}
ok($gone, 'Kafka compacted offset 50 away (offsets 20 to 89 are gone)');
q1("SELECT streamcube_create_cube('comp', 'k', '$ctopic', "
	  . "'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 hour', 'json', "
	  . "'{\"end\": {\"0\": 50}}')");
wait_stopped('comp', 'compacted topic, stop offset compacted away');
my ($cbelow) = records_split(sc_kafka_records($ctopic), { 0 => 50 });
sc_check_exact($node, 'comp', sc_records_contents($cbelow),
	'compacted topic: exactly the messages Kafka keeps below the stop');

# ---------------------------------------------------------------------
# 6. Errors; resume without until forgets the stop point
# ---------------------------------------------------------------------
my ($rc, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_resume('new', until => '\"earliest\"')", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/22023.*invalid stop point "earliest" for cube/s, 'until "earliest" is refused (22023)');
($rc, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_resume('new', until => '{\"0\": 1}')", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/22023.*stop offset 1 of partition 0 is below the position/s,
	'a stop offset below the position is refused (22023)');
like($err, qr/HINT:  Give an offset at or past the position/, '... with a hint');
($rc, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_create_cube('x', 'k', '$topic', 'ts timestamptz', 'ts', '1 hour', 'json', "
	  . "'{\"start\": {\"cube\": \"new\"}}')", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/55000.*cube new runs without a stop point/s, 'starting where a running cube without a stop point is refused (55000)');
($rc, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_create_cube('x', 'k', '$ttopic', 'ts timestamptz', 'ts', '1 hour', 'json', "
	  . "'{\"start\": {\"cube\": \"old\"}}')", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/22023.*cube old reads topic/s, 'starting where a cube of another topic stops is refused (22023)');
($rc, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_alter_cube('txn', '{\"end\": \"latest\"}')", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/0A000.*"end" of cube "txn" cannot be changed/s, 'option end cannot be altered (0A000)');

q1("SELECT streamcube_resume('old')");
is(q1("SELECT count(*) FROM streamcube.stops WHERE cube = 'old'::regclass"), 0,
	'resume without until forgets the stop point');
is(q1("SELECT streamcube_wait('old', '120 s')"), 't', 'the old cube reads on');
sc_check_exact($node, 'old', sc_records_contents(sc_kafka_records($topic)), 'old cube resumed: every message');

$node->stop;
done_testing();
