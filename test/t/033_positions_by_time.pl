
# Positions by time: a cube's option "start" and streamcube_set_positions
# take a timestamp, and each partition moves to its first message stamped
# at or after it (Kafka's ListOffsets by time), or to its end when none is
# that late.  Checked on a topic with CreateTime stamps (the producer's,
# sckafka --meta: the event time plus an hour) and on one with
# LogAppendTime (the broker's), against the stamps kcat reads back: every
# cube holds exactly the messages at or after its position, once.
#
# Also: the per-partition form mixed with offsets, "earliest" and a time
# after every message; the journal; what a bad timestamp says.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use POSIX qw(strftime floor);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;
use Time::HiRes qw(time sleep);

sc_require_env();

my $node = sc_node('by_time');

# Every message of a topic: partition => [ [offset, timestamp ms], ... ].
sub stamps
{
	my ($topic) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'kcat', '-C', '-b', $ENV{SC_KAFKA}, '-t', $topic,
			'-o', 'beginning', '-e', '-q', '-f', '%p %o %T\n' ],
		'<', \undef, '>', \$out, '2>', \$err)
	  or die "kcat -C failed: $err";
	my %s;
	for (split /\n/, $out)
	{
		my ($p, $o, $t) = split / /;
		push @{ $s{$p} }, [ $o, $t ];
	}
	return \%s;
}

# The first offset stamped at or after $ms (the end when none is).
sub offset_at
{
	my ($msgs, $ms) = @_;
	for my $m (@$msgs)
	{
		return $m->[0] if $m->[1] >= $ms;
	}
	return scalar(@$msgs);
}

# A timestamp PostgreSQL reads, from milliseconds since 1970.
sub ts_text
{
	my ($ms) = @_;
	return strftime('%Y-%m-%d %H:%M:%S', gmtime(floor($ms / 1000)))
	  . sprintf('.%03d+00', $ms % 1000);
}

# The cube holds exactly the messages from $from->{p} on, once.
sub check_from
{
	my ($cube, $s, $from, $what) = @_;
	my ($want_rows, $want) = (0, '');
	for my $p (sort { $a <=> $b } keys %$s)
	{
		my $n = scalar(@{ $s->{$p} }) - $from->{$p};
		$want_rows += $n;
		$want .= "$p|$n|" . ($n > 0 ? $from->{$p} : '') . "\n" if $n > 0;
	}
	chomp $want;
	is( $node->safe_psql('postgres',
			"SELECT _partition, count(*), min(_offset) FROM $cube GROUP BY 1 ORDER BY 1"),
		$want, "$what: per partition, the rows from the position on");
	is( $node->safe_psql('postgres',
			"SELECT count(*), count(DISTINCT (_partition, _offset)) FROM $cube"),
		"$want_rows|$want_rows", "$what: $want_rows rows, each message once");
}

# ---------------------------------------------------------------- CreateTime

my $ct = sc_topic('by_create_time');
sc_create_topic_config($ct, 4, 'retention.ms' => -1);
my $start = int(time) - 600;
sc_produce($ct, count => 400, 'start-ts' => $start, 'step-ms' => 1000,
	seed => 1, meta => 1);
my $s = stamps($ct);
is(join(',', map { scalar @{ $s->{$_} } } sort keys %$s), '100,100,100,100',
	'400 messages over 4 partitions');
is($s->{0}[0][1], ($start + 3600) * 1000,
	'the CreateTime of the first message is its event time plus an hour (sckafka --meta)');

# Option start as a time: the 200th second of the stamps.
my $t1 = ($start + 3600 + 200) * 1000 + 500;
my %from1 = map { $_ => offset_at($s->{$_}, $t1) } keys %$s;
sc_create_cube($node, 'ct_start', $ct, '{"start": "' . ts_text($t1) . '"}');
is($node->safe_psql('postgres', "SELECT streamcube_wait('ct_start', '60 s')"),
	't', 'a cube started at a time catches up');
check_from('ct_start', $s, \%from1, 'option start as a time (CreateTime)');
is( $node->safe_psql('postgres',
		"SELECT string_agg(partition || ':' || \"offset\", ',' ORDER BY partition) "
		  . "FROM streamcube.checkpoints k JOIN streamcube.cubes c USING (cube_id) "
		  . "WHERE c.relid = 'ct_start'::regclass"),
	join(',', map { "$_:$from1{$_}" } sort keys %from1),
	'its first checkpoints are the offsets of that time');

# streamcube_set_positions by time, for every partition.
my $t2 = ($start + 3600 + 300) * 1000;
my %from2 = map { $_ => offset_at($s->{$_}, $t2) } keys %$s;
sc_create_cube($node, 'ct_set', $ct, '{"start": "latest"}');
$node->safe_psql('postgres', "SELECT streamcube_pause('ct_set')");
is( $node->safe_psql('postgres',
		"SELECT string_agg(partition || ':' || old_position || '->' || new_position, ',' ORDER BY partition) "
		  . "FROM streamcube_set_positions('ct_set', '{\"timestamp\": \"" . ts_text($t2) . "\"}')"),
	join(',', map { "$_:100->$from2{$_}" } sort keys %from2),
	'set_positions by time moves every partition to its first message at or after it');
is( $node->safe_psql('postgres',
		"SELECT DISTINCT requested FROM streamcube.position_changes WHERE cube = 'ct_set'::regclass"),
	'timestamp ' . ts_text($t2), 'the journal says what was asked');
$node->safe_psql('postgres', "SELECT streamcube_resume('ct_set')");
is($node->safe_psql('postgres', "SELECT streamcube_wait('ct_set', '60 s')"),
	't', 'resumed, it catches up');
check_from('ct_set', $s, \%from2, 'set_positions by time (CreateTime)');

# By partition: a time, an offset, "earliest", a time after every message.
my $t3 = ($start + 3600 + 50) * 1000;
my %from3 = (0 => offset_at($s->{0}, $t3), 1 => 7, 2 => 0, 3 => 100);
sc_create_cube($node, 'ct_mixed', $ct, '{"start": "latest"}');
$node->safe_psql('postgres', "SELECT streamcube_pause('ct_mixed')");
is( $node->safe_psql('postgres',
		"SELECT string_agg(partition || ':' || new_position, ',' ORDER BY partition) "
		  . "FROM streamcube_set_positions('ct_mixed', '{\"0\": {\"timestamp\": \"" . ts_text($t3)
		  . "\"}, \"1\": 7, \"2\": \"earliest\", \"3\": {\"timestamp\": \"2100-01-01 00:00+00\"}}')"),
	join(',', map { "$_:$from3{$_}" } 0 .. 3),
	'by partition: a time, an offset, earliest, and a time after every message (the end)');
$node->safe_psql('postgres', "SELECT streamcube_resume('ct_mixed')");
is($node->safe_psql('postgres', "SELECT streamcube_wait('ct_mixed', '60 s')"),
	't', 'resumed, it catches up');
check_from('ct_mixed', $s, \%from3, 'set_positions by partition');

# A receiver that has not seen the pause yet: pause, set_positions and
# resume in one session right after the cube is created, so that the new
# receiver may load the cube before the pause and open its consumer (at
# "latest") after the positions moved, seeing all three at once.  The
# consumer it opened is of the old positions: its partitions' ends would
# look "ahead" of the positions set back, and a receiver that followed
# them skipped every message in between (0 rows of 280, and then a
# crash on the empty first batch).  It must open a new consumer at the
# positions.  The timing is a race: 24 tries at delays of 0, 5 and 10 ms,
# the ones the receiver lost most often on this machine (about one try in
# twenty before the fix).
for my $k (1 .. 24)
{
	my $cube = "ct_race$k";
	my $at = ($start + 3600 + 50 + $k) * 1000;
	my %from = (0 => offset_at($s->{0}, $at), 1 => 7, 2 => 0, 3 => 100);
	sc_create_cube($node, $cube, $ct, '{"start": "latest"}');
	sleep(($k % 3) * 0.005);
	$node->safe_psql('postgres',
		"SELECT streamcube_pause('$cube'); "
		  . "SELECT FROM streamcube_set_positions('$cube', '{\"0\": {\"timestamp\": \"" . ts_text($at)
		  . "\"}, \"1\": 7, \"2\": \"earliest\", \"3\": \"latest\"}'); "
		  . "SELECT streamcube_resume('$cube')");
	$node->safe_psql('postgres', "SELECT streamcube_wait('$cube', '60 s')");
	my $want = 0;
	$want += scalar(@{ $s->{$_} }) - $from{$_} for keys %$s;
	is( $node->safe_psql('postgres',
			"SELECT count(*) || '|' || count(DISTINCT (_partition, _offset)) || '|' || "
			  . "coalesce(string_agg(DISTINCT _partition || ':' || m, ',' ORDER BY _partition || ':' || m), '') "
			  . "FROM (SELECT *, min(_offset) OVER (PARTITION BY _partition) AS m FROM $cube) r"),
		"$want|$want|" . join(',', map { "$_:$from{$_}" } grep { $from{$_} < 100 } sort keys %from),
		"set_positions before the new receiver saw the pause ($k): $want rows from the positions set, once");
	$node->safe_psql('postgres', "SELECT streamcube_drop_cube('$cube')");
}

# ------------------------------------------------------------- LogAppendTime

my $lat = sc_topic('by_log_append_time');
sc_create_topic_config($lat, 2, 'message.timestamp.type' => 'LogAppendTime',
	'retention.ms' => -1);
sc_produce($lat, count => 100, 'start-ts' => int(time), 'step-ms' => 10, seed => 2);
sleep(1.5);
my $cut = int(time * 1000);
sleep(1.5);
sc_produce($lat, count => 100, 'start-ts' => int(time), 'step-ms' => 10, seed => 3);
my $l = stamps($lat);
my %from4 = map { $_ => offset_at($l->{$_}, $cut) } keys %$l;
is(join(',', map { $from4{$_} } sort keys %from4), '50,50',
	'LogAppendTime: the broker stamped the first 100 messages before the cut, the next 100 after');
sc_create_cube($node, 'lat_start', $lat, '{"start": "' . ts_text($cut) . '"}');
is($node->safe_psql('postgres', "SELECT streamcube_wait('lat_start', '60 s')"),
	't', 'a cube started at a time on a LogAppendTime topic catches up');
check_from('lat_start', $l, \%from4, 'option start as a time (LogAppendTime)');

# ---------------------------------------------------------------- mistakes

my ($rc, $out, $err) = $node->psql('postgres',
	"SELECT * FROM streamcube_set_positions('ct_mixed', '{\"timestamp\": \"soon\"}')");
like($err, qr/must be paused/, 'a running cube: set_positions says pause first');
$node->safe_psql('postgres', "SELECT streamcube_pause('ct_mixed')");
($rc, $out, $err) = $node->psql('postgres',
	"SELECT * FROM streamcube_set_positions('ct_mixed', '{\"timestamp\": \"soon\"}')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  22007: invalid timestamp "soon" for a position by time\n.*HINT:  Use/s,
	'a timestamp that does not parse: 22007, the text, a hint');
($rc, $out, $err) = $node->psql('postgres',
	"SELECT * FROM streamcube_set_positions('ct_mixed', '{\"timestamp\": \"2026-01-01\", \"0\": 5}')");
like($err, qr/ERROR:  positions for cube public.ct_mixed by time must have "timestamp" as their only key/,
	'"timestamp" beside partitions is refused');
($rc, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_create_cube('bad_start', 'k', '$ct', 'ts timestamptz', 'ts', '1 hour', 'json', "
	  . "'{\"start\": \"whenever\"}')");
like($err, qr/ERROR:  invalid timestamp "whenever" for cube option "start"\nHINT:  Use "earliest", "latest" or a timestamp/,
	'option start that is neither earliest, latest nor a time: refused, nothing created');
is($node->safe_psql('postgres', "SELECT to_regclass('bad_start') IS NULL"), 't',
	'no table left behind');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.position_changes WHERE cube = 'ct_mixed'::regclass"),
	'4', 'refused requests journal nothing');

$node->stop;
done_testing();
