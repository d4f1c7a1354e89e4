
# The decoders' limits (docs/operations.md, "Decoders' limits"), against
# the real broker and registry, with messages framed by hand (00, the
# schema id, the body): a serializer would itself spend the k^n values.
#
#  1. Avro schemas that expand: a record of 20 records of ... of nulls
#     (8 levels: 20^8 values in 0 bytes; 5 levels mapped whole to jsonb),
#     refused when parsed; 20 unions of a record of 8421 nulls (past the
#     message's budget), an array of 10^8 such records in 5 bytes (past it
#     at once).  Each is a dead letter with its reason, fast; the rows
#     around them are ingested exactly once.
#  2. For Avro and Protobuf, a receiver busy with messages dear to decode
#     but within bounds (Avro: 59,000 values of nulls each, read twice and
#     written whole as jsonb; Protobuf: 2,000 empty children of a type of
#     150 fields, 2.7 MB of JSON of defaults from 4 kB) answers
#     streamcube_pause and pg_terminate_backend promptly, and
#     streamcube_set_positions right after a pause returns promptly; rows
#     after it are ingested exactly once.  Batches are of 64 MB of lines,
#     seconds of writing: the pause ends a batch early.
#  3. pg_ctl stop -m fast, on a node of its own, with both receivers busy.
#
# "Promptly" is asserted as SC_PROMPT seconds (default 2: the target is
# 1 s, the rest is slack for a loaded machine); the bug held each for
# 70 s and more.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;
use Time::HiRes qw(time sleep);

sc_require_env();
sc_require_registry();

my $prompt = $ENV{SC_PROMPT} // 2;
my $json = JSON::PP->new->canonical;

my $node = sc_node('bounds');
sub q1 { return $node->safe_psql('postgres', $_[0]); }
q1("SELECT streamcube_alter_cluster('k', properties => '{\"schema.registry.url\": \"$ENV{SC_REGISTRY}\"}')");

# Avro's zigzag varint, as hex.
sub zz
{
	my ($v) = @_;
	my $u = $v >= 0 ? 2 * $v : -2 * $v - 1;
	my $h = '';
	while ($u >= 0x80)
	{
		$h .= sprintf('%02x', ($u & 0x7f) | 0x80);
		$u = int($u / 128);
	}
	return $h . sprintf('%02x', $u);
}
sub framed { my ($id, $body) = @_; return sprintf('00%08x', $id) . $body; }

# A record of k records of ... of k nulls, n levels: R0 .. Rn.
sub expanding
{
	my ($k, $n, $prefix) = @_;
	my $t = { type => 'record', name => "${prefix}0",
		fields => [ map { { name => sprintf('f%02d', $_), type => 'null' } } 0 .. $k - 1 ] };
	for my $l (1 .. $n)
	{
		my $prev = $t;
		$t = { type => 'record', name => "$prefix$l",
			fields => [ map { { name => sprintf('f%02d', $_), type => $_ == 0 ? $prev : "$prefix" . ($l - 1) } }
				  0 .. $k - 1 ] };
	}
	return $t;
}

sub register
{
	my ($subject, $schema) = @_;
	return sc_registry_register($subject, 'avro', ref $schema ? $json->encode($schema) : $schema);
}

# Wait (server side) until the query is true; seconds waited, or -1.
sub wait_true
{
	my ($sql, $timeout) = @_;
	my $t = time;
	while (time - $t < $timeout)
	{
		return time - $t if q1($sql) eq 't';
		sleep 0.05;
	}
	return -1;
}

# ---------------------------------------------------------------------
# 1. schemas that expand
# ---------------------------------------------------------------------
my $topic = sc_topic('bounds');
sc_create_topic($topic, 1);
my $t1 = sc_topic('bounds_s');
my $good = register("$t1-good", { type => 'record', name => 'Good', fields => [ { name => 'n', type => 'int' } ] });
my $deep8 = register("$t1-deep8", { type => 'record', name => 'Top8',
		fields => [ { name => 'x', type => expanding(20, 8, 'E') } ] });
my $deep5 = register("$t1-deep5", { type => 'record', name => 'Top5',
		fields => [ { name => 'x', type => expanding(20, 5, 'F') } ] });
my $r2 = expanding(20, 2, 'G');    # 20 x (1 + 20 x 21) + 1 = 8421 values, 0 bytes
my $unions = register("$t1-unions", { type => 'record', name => 'TopU',
		fields => [ { name => 'n', type => 'int' },
			map { { name => sprintf('u%02d', $_), type => [ 'null', $_ == 0 ? $r2 : 'G2' ] } } 0 .. 19 ] });
my $r2b = expanding(20, 2, 'H');
my $array = register("$t1-array", { type => 'record', name => 'TopA',
		fields => [ { name => 'n', type => 'int' }, { name => 'xs', type => { type => 'array', items => $r2b } } ] });

q1("SELECT streamcube_create_cube('bx', 'k', '$topic', 'ts timestamptz, n int, doc jsonb', 'ts', '1 hour', 'avro', "
	  . "'{\"fields\": {\"ts\": {\"kafka\": \"timestamp\"}, \"doc\": {\"kafka\": \"value\"}}}')");
q1("SELECT streamcube_create_cube('by', 'k', '$topic', 'ts timestamptz, n int', 'ts', '1 hour', 'avro', "
	  . "'{\"fields\": {\"ts\": {\"kafka\": \"timestamp\"}}}')");

my @msgs = map { framed($good, zz($_)) } 1 .. 5;
push @msgs, framed($deep8, '');                                   # 20^8 values in 0 bytes
push @msgs, framed($deep5, '');                                   # 20^5, the whole record as jsonb
push @msgs, framed($unions, zz(0) . ('02' x 20));                 # 20 x 8422 values in 21 bytes
push @msgs, framed($array, zz(0) . zz(100_000_000) . '00');       # 10^8 x 8421 values in 6 bytes
push @msgs, map { framed($good, zz($_)) } 6 .. 10;
my $t0 = time;
is(sc_kafka_raw('raw', $topic, @msgs), scalar @msgs, 'produced good, expanding and good messages');
my $took = wait_true("SELECT (SELECT count(*) FROM bx) + (SELECT count(*) FROM by) = 20 AND "
	  . "(SELECT count(*) FROM streamcube.dead_letters) = 8", 120);
note sprintf('the expanding messages became dead letters, the rows landed, in %.2f s', $took);
ok($took >= 0 && $took < 30, "dead letters and rows within 30 s (the bug: 75 s for the first, hours for the last): "
	  . sprintf('%.2f s', $took));
for my $cube ('bx', 'by')
{
	is(q1("SELECT count(*), count(DISTINCT (_partition, _offset)), sum(n) FROM $cube"), '10|10|55',
		"$cube: the rows around them, each once");
	my @errors = split /\n/, q1("SELECT \"offset\" || ': ' || error FROM streamcube.dead_letters "
		  . "WHERE cube = '$cube'::regclass ORDER BY \"offset\"");
	is(scalar @errors, 4, "$cube: four dead letters");
	like($errors[0] // '', qr/^5: schema id $deep8: not a valid Avro schema: record "E3" takes no bytes yet stands for 168421 values .*more than 65536.* such a schema is refused/,
		"$cube: 8 levels: the schema is refused, saying which record expands");
	like($errors[1] // '', qr/^6: schema id $deep5: not a valid Avro schema: record "F3" takes no bytes yet stands for 168421 values/,
		"$cube: 5 levels: the same");
	like($errors[2] // '', qr/^7: invalid Avro record \(schema id $unions\): field "u\d\d[.f\d]*": the message is read as more than 66208 values \(65536 plus 32 per byte of its 21; nulls and records of nulls count/,
		"$cube: 20 unions of 8421 nulls: past the message's budget");
	like($errors[3] // '', qr/^8: invalid Avro record \(schema id $array\): field "xs": 100000000 items of no bytes, 8421 values each, in a message of 6 bytes/,
		"$cube: an array of 10^8 records of nulls: past the budget at once");
}
is(q1("SELECT count(*) FROM streamcube.cubes WHERE paused"), 0, 'no cube paused');

# ---------------------------------------------------------------------
# 2. a receiver busy with dear messages answers
# ---------------------------------------------------------------------
# Batches of 64 MB of lines: jsonb of many small objects is read at some
# 12 MB/s, so such a batch takes five seconds and more to write.  A pause
# must not wait for it: the batch ends at its next run of lines (1 MB).
q1("ALTER SYSTEM SET streamcube.batch_max_bytes = '64MB'");
q1('SELECT pg_reload_conf()');

# Avro: 7 of 20 unions of a record of 8421 nulls: 58,955 values, within
# the budget of 65,536 + 32 x 22; the whole record is about 0.5 MB of JSON.
my $heavy_avro = framed($unions, zz(1) . ('02' x 7) . ('00' x 13));
my $atopic = sc_topic('bounds_avro');
sc_create_topic($atopic, 1);
is(sc_kafka_raw('raw', $atopic, ($heavy_avro) x 3000), 3000, '3000 heavy Avro messages');

# Protobuf: 2,000 empty children of a type of 150 fields.
my $proto = "syntax = \"proto3\";\nmessage Outer {\n  repeated Big kids = 1;\n  int32 n = 2;\n}\nmessage Big {\n"
  . join('', map { "  int32 f$_ = $_;\n" } 1 .. 150) . "}\n";
my $pid_schema = sc_registry_register("$t1-proto", 'protobuf', $proto);
my $heavy_proto = sprintf('00%08x', $pid_schema) . '00' . ('0a00' x 2000) . '1001';
my $ptopic = sc_topic('bounds_proto');
sc_create_topic($ptopic, 1);
my $nproto = 0;
$nproto += sc_kafka_raw('raw', $ptopic, ($heavy_proto) x 100) for 1 .. 15;    # within ARG_MAX
is($nproto, 1500, '1500 heavy Protobuf messages');

my %heavy = (avro => $atopic, protobuf => $ptopic);
for my $format ('avro', 'protobuf')
{
	my $cube = "h_$format";
	q1("SELECT streamcube_create_cube('$cube', 'k', '$heavy{$format}', 'ts timestamptz, n int, doc jsonb', 'ts', '1 hour', "
		  . "'$format', '{\"fields\": {\"ts\": {\"kafka\": \"timestamp\"}, \"doc\": {\"kafka\": \"value\"}}}')");
	my $busy = "SELECT EXISTS (SELECT FROM streamcube.consumers WHERE cube = '$cube'::regclass "
	  . "AND state = 'running' AND rows_total > 0) AND (SELECT count(*) FROM $cube) < "
	  . ($format eq 'avro' ? 2500 : 1200);
	ok(wait_true($busy, 120) >= 0, "$format: the receiver is busy with the heavy messages");
	is(q1("SELECT count(*) FROM streamcube.dead_letters WHERE cube = '$cube'::regclass"), 0,
		"$format: the heavy messages are within bounds: no dead letter");

	# streamcube_pause
	my $t = time;
	q1("SELECT streamcube_pause('$cube')");
	my $w = wait_true("SELECT state = 'paused' FROM streamcube.consumers WHERE cube = '$cube'::regclass", 60);
	my $paused = time - $t;
	note sprintf('%s: paused in %.2f s', $format, $paused);
	ok($w >= 0 && $paused < $prompt, sprintf('%s: a busy receiver answers streamcube_pause in %.2f s', $format, $paused));
	q1("SELECT streamcube_resume('$cube')");
	ok(wait_true($busy, 60) >= 0, "$format: busy again after the resume");

	# pg_terminate_backend
	my $pid = q1("SELECT pid FROM streamcube.consumers WHERE cube = '$cube'::regclass");
	$t = time;
	q1("SELECT pg_terminate_backend($pid)");
	$w = wait_true("SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $pid)", 60);
	my $gone = time - $t;
	note sprintf('%s: terminated in %.2f s', $format, $gone);
	ok($w >= 0 && $gone < $prompt, sprintf('%s: a busy receiver answers pg_terminate_backend in %.2f s', $format, $gone));
	ok(wait_true($busy, 60) >= 0, "$format: started again, busy");

	# streamcube_set_positions right after a pause: past what is left
	my $high = q1("SELECT high_watermarks[1] FROM streamcube.consumers WHERE cube = '$cube'::regclass");
	q1("SELECT streamcube_pause('$cube')");
	$t = time;
	q1("SELECT streamcube_set_positions('$cube', '{\"0\": $high}')");
	my $set = time - $t;
	note sprintf('%s: set_positions returned in %.2f s', $format, $set);
	ok($set < $prompt, sprintf('%s: streamcube_set_positions right after a pause returns in %.2f s', $format, $set));
	q1("SELECT streamcube_resume('$cube')");
}

# Rows after it: ingested once, positions and rows agree.
sc_kafka_raw('raw', $atopic, map { framed($good, zz(1000 + $_)) } 1 .. 20);
sc_registry_produce($ptopic, format => 'protobuf', schema => $proto, subject => "$t1-proto", message => 'Outer',
	records => [ map { { n => 1000 + $_ } } 1 .. 20 ]);
for my $format ('avro', 'protobuf')
{
	my $cube = "h_$format";
	is(q1("SELECT streamcube_wait('$cube', '120 s')"), 't', "$format: consumed to the end");
	is(q1("SELECT count(*) FILTER (WHERE n > 1000), sum(n) FILTER (WHERE n > 1000), "
			  . "count(*) = count(DISTINCT (_partition, _offset)) FROM $cube"),
		'20|20210|t', "$format: the rows after the set_positions, each once; (_partition, _offset) unique");
}

# ---------------------------------------------------------------------
# 3. a fast shutdown, on a node of its own, both receivers busy
# ---------------------------------------------------------------------
my $node2 = sc_node('bounds_stop');
$node2->safe_psql('postgres', "SELECT streamcube_alter_cluster('k', properties => '{\"schema.registry.url\": \"$ENV{SC_REGISTRY}\"}')");
for my $format ('avro', 'protobuf')
{
	$node2->safe_psql('postgres', "SELECT streamcube_create_cube('h_$format', 'k', '$heavy{$format}', "
		  . "'ts timestamptz, n int, doc jsonb', 'ts', '1 hour', '$format', "
		  . "'{\"fields\": {\"ts\": {\"kafka\": \"timestamp\"}, \"doc\": {\"kafka\": \"value\"}}}')");
}
my $both_busy = "SELECT count(*) = 2 FROM streamcube.consumers WHERE state = 'running' AND rows_total > 0 "
  . "AND positions[1] < high_watermarks[1] - 200";
my $ok = 0;
for (1 .. 2400)
{
	if ($node2->safe_psql('postgres', $both_busy) eq 't') { $ok = 1; last; }
	sleep 0.05;
}
ok($ok, 'both receivers busy on the second node');
my $t = time;
$node2->stop('fast');
my $stopped = time - $t;
note sprintf('fast shutdown in %.2f s', $stopped);
ok($stopped < $prompt + 2, sprintf('pg_ctl stop -m fast with both receivers busy: %.2f s', $stopped));
my $log2 = slurp_file($node2->logfile);
unlike($log2, qr/terminated by signal/, 'no worker terminated by a signal');

# ---------------------------------------------------------------------
# 4. Strings no column reads: UTF-8 is checked whatever the cube maps (the
#    reference readers refuse such a message), a NUL only where a value
#    becomes text; the reasons say which of the two it was.
# ---------------------------------------------------------------------
my $st = sc_topic('bounds_str');
sc_create_topic($st, 1);
my $sid = register("$st-value", { type => 'record', name => 'S',
		fields => [ { name => 'n', type => 'int' }, { name => 's', type => 'string' },
			{ name => 'm', type => { type => 'map', values => 'int' } } ] });
sub str_hex { my ($b) = @_; return zz(length $b) . unpack('H*', $b); }
my @smsgs = (
	framed($sid, zz(1) . str_hex('ok') . '00'),                                      # 0: good
	framed($sid, zz(2) . str_hex("a\xff") . '00'),                                   # 1: s not UTF-8
	framed($sid, zz(3) . str_hex("ab\x00") . '00'),                                  # 2: s holds a NUL
	framed($sid, zz(4) . str_hex('ok') . zz(1) . str_hex("k\xc3") . zz(7) . '00'),  # 3: a map key not UTF-8
	framed($sid, zz(5) . str_hex('ok') . '00'));                                     # 4: good
q1("SELECT streamcube_create_cube('sw', 'k', '$st', 'ts timestamptz, n int, doc jsonb', 'ts', '1 hour', 'avro', "
	  . "'{\"fields\": {\"ts\": {\"kafka\": \"timestamp\"}, \"doc\": {\"kafka\": \"value\"}}}')");
q1("SELECT streamcube_create_cube('sn', 'k', '$st', 'ts timestamptz, n int', 'ts', '1 hour', 'avro', "
	  . "'{\"fields\": {\"ts\": {\"kafka\": \"timestamp\"}}}')");
is(sc_kafka_raw('raw', $st, @smsgs), scalar @smsgs, 'produced messages with bad strings');
ok(wait_true("SELECT (SELECT count(*) FROM sw) + (SELECT count(*) FROM sn) "
	  . "+ (SELECT count(*) FROM streamcube.dead_letters WHERE cube IN ('sw'::regclass, 'sn'::regclass)) = 10", 60) >= 0,
	'every message a row or a dead letter in both cubes');
is(q1("SELECT string_agg(n::text, ',' ORDER BY n) FROM sw"), '1,5', 'whole record: the good messages only');
is(q1("SELECT string_agg(n::text, ',' ORDER BY n) FROM sn"), '1,3,5',
	'column n only: the NUL in a field it does not read is no fault of its row');
my %dl = map { split /\|/, $_, 2 } split /\n/, q1("SELECT cube::text || ':' || \"offset\" || '|' || error "
	  . "FROM streamcube.dead_letters WHERE cube IN ('sw'::regclass, 'sn'::regclass)");
for my $cube ('sw', 'sn')
{
	like($dl{"$cube:1"} // '', qr/field "s": a string that is not valid UTF-8 \(at byte 1 of it\)/,
		"$cube: a string no column reads that is not UTF-8 is a dead letter, saying so");
	like($dl{"$cube:3"} // '', qr/a map key that is not valid UTF-8 \(at byte 1 of it\)/,
		"$cube: a map key that is not UTF-8 too");
}
like($dl{'sw:2'} // '', qr/field "s": a string that holds a NUL \(at byte 2 of it\), which PostgreSQL's text cannot hold/,
	'whole record: the NUL, named as a NUL');

my $log = slurp_file($node->logfile);
unlike($log, qr/terminated by signal/, 'no worker terminated by a signal (first node)');

$node->stop;
done_testing();
