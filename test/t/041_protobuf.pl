
# Format protobuf against the real broker and the real schema registry
# (Apicurio), with messages framed by Confluent's own Protobuf serializer
# (scregistry), which registers a base64 FileDescriptorProto, and with the
# .proto text registered instead:
#
#  1. mapping: scalars, an enum, a repeated field and a map as jsonb, a
#     nested message's field by a "fields" path, a wrapper (NULL when
#     absent), google.protobuf.Timestamp as the time column, the whole
#     message as jsonb;
#  2. evolution: a field added and one removed, the schema registered as
#     .proto text this time; a message type other than the file's first
#     (the message-index array);
#  3. a crash: exact counts, (_partition, _offset) unique;
#  4. the registry down: messages of a new id wait, no dead letter;
#  5. bad messages: an unknown id, a malformed message;
#  6. Timestamps of every form;
#  7. the rules of the specification, message by message against Python's
#     protobuf (the reference) reading the same bytes: a oneof member set
#     again after another, closed proto2 enums, aliases, UTF-8 of proto3
#     strings in every occurrence and every field, wire types that do not
#     match (unknown fields), with cubes mapping all, some or few fields,
#     and cubes read in one pass (their fields singular, in no oneof).

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

my $node = sc_node('protobuf');
sub q1 { return $node->safe_psql('postgres', $_[0]); }
q1("SELECT streamcube_alter_cluster('k', properties => '{\"schema.registry.url\": \"$ENV{SC_REGISTRY}\"}')");

my $v1 = <<'PROTO';
syntax = "proto3";
package sc;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
message Event {
  google.protobuf.Timestamp ts = 1;
  string country = 2;
  double amount = 3;
  int32 qty = 4;
  enum Kind { VIEW = 0; BUY = 1; }
  Kind kind = 5;
  repeated string tags = 6;
  message User { int64 id = 1; google.protobuf.StringValue name = 2; }
  User user = 7;
  map<string, int64> attrs = 8;
}
PROTO
(my $v2 = $v1) =~ s/  repeated string tags = 6;\n/  reserved 6;\n  string extra = 9;\n/;
my $v3 = $v2 . "message Other {\n  google.protobuf.Timestamp ts = 1;\n  string country = 2;\n  int32 qty = 3;\n}\n";

my $base = (int(time / 3600) - 2) * 3600;    # two hours ago, on the hour
sub iso { my ($s) = @_; my @t = gmtime($s); return sprintf('%04d-%02d-%02dT%02d:%02d:%02dZ', $t[5] + 1900, $t[4] + 1, @t[3, 2, 1, 0]); }

sub records
{
	my ($from, $n, $version) = @_;
	my @r;
	for my $i ($from .. $from + $n - 1)
	{
		my %r = (ts => iso($base + $i), country => ('de', 'fr', 'us')[ $i % 3 ],
			amount => $i * 0.5, qty => $i % 10 + 1, kind => ('VIEW', 'BUY')[ $i % 2 ],
			user => { id => 1000 + $i }, attrs => { a => $i, b => -$i });
		$r{user}{name} = "u$i" if $i % 5;
		$r{tags} = [ "t$i", 'x' ] if $version == 1;
		$r{extra} = "e$i" if $version >= 2;
		push @r, \%r;
	}
	return \@r;
}

# ---------------------------------------------------------------------
# 1. mapping
# ---------------------------------------------------------------------
my $topic = sc_topic('proto');
sc_create_topic($topic, 3);
my $p1 = sc_registry_produce($topic, format => 'protobuf', schema => $v1, message => 'Event',
	records => records(0, 300, 1));
q1("SELECT streamcube_create_cube('pb', 'k', '$topic', "
	  . "'ts timestamptz, country text, amount float8, qty int, kind text, tags jsonb, "
	  . "user_id bigint, user_name text, attrs jsonb, extra text, doc jsonb', 'ts', '1 hour', 'protobuf', "
	  . "'{\"fields\": {\"user_id\": \"user.id\", \"user_name\": \"user.name\", "
	  . "\"doc\": {\"kafka\": \"value\"}}}')");
is(q1("SELECT streamcube_wait('pb', '60 s')"), 't', 'the Protobuf cube consumed the topic');
is(q1("SELECT count(*), count(DISTINCT (_partition, _offset)), sum(qty), sum(amount), sum(user_id) FROM pb"),
	'300|300|1650|22425|' . (300 * 1000 + 299 * 300 / 2), 'every message once: count, unique, sums');
is(q1("SELECT ts = to_timestamp($base + 7), country, amount, qty, kind, tags, user_name, attrs, extra IS NULL FROM pb WHERE user_id = 1007"),
	"t|fr|3.5|8|BUY|[\"t7\", \"x\"]|u7|{\"a\": 7, \"b\": -7}|t",
	'a row: Timestamp, string, double, int32, enum by name, repeated and map as jsonb, a wrapper by a path');
is(q1("SELECT user_name IS NULL FROM pb WHERE user_id = 1005"), 't', 'an absent wrapper is NULL');
is(q1("SELECT doc->>'country', doc->'user'->>'id', doc->'tags'->>0 FROM pb WHERE user_id = 1007"),
	'fr|1007|t7', 'the whole message as jsonb');

my ($rc, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_create_cube('pchk', 'k', '$topic', 'ts timestamptz, nothere int', 'ts', '1 hour', 'protobuf', "
	  . "'{\"subject\": \"$topic-value\"}')", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/42703.*column "nothere" of cube "pchk" has no field in the latest schema of subject/s,
	'creation checks the subject\'s latest schema (a base64 descriptor importing well-known types)');

# ---------------------------------------------------------------------
# 2. evolution, the .proto text, another message type
# ---------------------------------------------------------------------
my $p2 = sc_registry_produce($topic, format => 'protobuf', schema => $v2, message => 'Event',
	proto_schema => 'text', records => records(300, 100, 2));
my $p3 = sc_registry_produce($topic, format => 'protobuf', schema => $v3, message => 'Other',
	proto_schema => 'text', records => [ map { { ts => iso($base + $_), country => 'jp', qty => 100 } } 400 .. 449 ]);
is(q1("SELECT streamcube_wait('pb', '60 s')"), 't', 'the evolved messages are consumed');
is(q1("SELECT count(*) FILTER (WHERE user_id BETWEEN 1300 AND 1399 AND extra = 'e' || (user_id - 1000) AND tags IS NULL), "
		  . "count(*) FILTER (WHERE country = 'jp' AND qty = 100 AND user_id IS NULL AND kind IS NULL), "
		  . "count(*) FILTER (WHERE user_id < 1300 AND extra IS NULL AND tags IS NOT NULL) FROM pb"),
	'100|50|300', 'v2 (text form) with extra and without tags; sc.Other (message index [1]) by field names; v1 as it was');
is(q1("SELECT count(*) FROM streamcube.schemas WHERE schema_type = 'PROTOBUF'"), 3, 'the writer schemas are kept');

# ---------------------------------------------------------------------
# 3. a crash
# ---------------------------------------------------------------------
$node->stop('immediate');
$node->start;
is(q1("SELECT streamcube_wait('pb', '120 s')"), 't', 'consumed again after a crash');
is(q1("SELECT count(*), count(DISTINCT (_partition, _offset)) FROM pb"), '450|450', 'after the crash: every message once');

# ---------------------------------------------------------------------
# 4. the registry down
# ---------------------------------------------------------------------
my $scratch = sc_topic('proto_new');
sc_create_topic($scratch, 3);
(my $v4 = $v3) =~ s/  string extra = 9;\n/  string extra = 9;\n  string note = 10;\n/;
my $p4 = sc_registry_produce($scratch, format => 'protobuf', schema => $v4, message => 'Event',
	subject => "$topic-value", records => records(500, 100, 2));
sc_registry_stop();
is(sc_kafka_raw('copy', $scratch, $topic, 100), 100, 'with the registry down: 100 messages of a new id');
my $t0 = time;
my $waiting = 0;
while (time - $t0 < 10)
{
	$waiting ||= q1("SELECT count(*) FROM streamcube.consumers WHERE cube = 'pb'::regclass "
		  . "AND last_error LIKE '%does not answer%schema id $p4->{schema_ids}[0]%'");
	sleep(1);
}
ok($waiting, 'last_error says the registry does not answer');
is(q1("SELECT count(*) FROM pb"), 450, 'the messages of the new id wait');
is(q1("SELECT count(*) FROM streamcube.dead_letters"), 0, '... and none is a dead letter');
sc_registry_start();
is(q1("SELECT streamcube_wait('pb', '120 s')"), 't', 'the registry is back');
is(q1("SELECT count(*), count(DISTINCT (_partition, _offset)) FROM pb"), '550|550', 'nothing lost, nothing twice');

# ---------------------------------------------------------------------
# 5. bad messages
# ---------------------------------------------------------------------
my $id1 = sprintf('%08x', $p1->{schema_ids}[0]);
sc_kafka_raw('raw', $topic, '000001869f000a01', "00${id1}000a05616263");
is(q1("SELECT streamcube_wait('pb', '60 s')"), 't', 'bad messages passed');
my @errors = split /\n/, q1("SELECT error FROM streamcube.dead_letters WHERE cube = 'pb'::regclass ORDER BY \"offset\"");
is(scalar(@errors), 2, 'two dead letters');
like($errors[0], qr/schema id 99999 does not exist in the schema registry/, 'an id the registry does not have');
like($errors[1], qr/invalid Protobuf message \(schema id \d+\)/, 'a truncated message');

# a field whose type cannot become its column's: every message of that type
(my $v5 = $v1) =~ s/  int32 qty = 4;/  bool qty = 4;/;
my @r5 = map { { %$_, qty => JSON::PP::true } } @{ records(600, 2, 1) };
my $p5 = sc_registry_produce($topic, format => 'protobuf', schema => $v5, message => 'Event',
	subject => "$topic-wrong", records => \@r5);
is(q1("SELECT streamcube_wait('pb', '60 s')"), 't', 'messages of a misfit schema passed');
is(q1("SELECT count(*) FROM streamcube.dead_letters WHERE cube = 'pb'::regclass "
		  . "AND error = 'schema id $p5->{schema_ids}[0]: field \"qty\" (bool) cannot become column \"qty\" (integer)'"),
	2, 'a field that cannot become its column: dead letters naming the schema id, the field and the column');

# ---------------------------------------------------------------------
# 6. Timestamps as timestamptz and as timestamp: fractions, negative
#    seconds, and forms other than the usual one (fields out of order or
#    repeated, an unknown field, a two-byte tag, the message in two pieces)
# ---------------------------------------------------------------------
sub varint
{
	my $u = $_[0] & 0xFFFFFFFFFFFFFFFF;
	my $s = '';
	while ($u >= 0x80) { $s .= chr(($u & 0x7f) | 0x80); $u >>= 7; }
	return $s . chr($u);
}
sub fld { my ($num, $wt, $v) = @_; return varint($num << 3 | $wt) . ($wt == 2 ? varint(length $v) . $v : varint($v)); }
sub framed    # Event (schema v1) of user.id $uid and the Timestamp pieces given
{
	my ($uid, @ts) = @_;
	my $body = join('', map { fld(1, 2, $_) } @ts) . fld(7, 2, fld(1, 0, $uid));
	return unpack('H*', "\0" . pack('N', $p1->{schema_ids}[0]) . "\0" . $body);
}
my @ts_msgs = (
	framed(2001, fld(1, 0, $base + 10) . fld(2, 0, 123456789)),
	framed(2002, fld(2, 0, 500000000) . fld(1, 0, 7) . fld(3, 0, 99) . fld(1, 0, $base + 11)),
	framed(2003, fld(1, 0, $base + 12), fld(2, 0, 250000000)),
	framed(2004, fld(1, 0, -1) . fld(2, 0, 500000999)),
	framed(2005, "\x88\x00" . varint($base + 13) . fld(2, 0, 999)));
my $ts_want = join("\n", "2001|" . ($base + 10) . ".123456", "2002|" . ($base + 11) . ".500000",
	"2003|" . ($base + 12) . ".250000", '2004|-0.500000', "2005|" . ($base + 13) . ".000000");
sc_kafka_raw('raw', $topic, @ts_msgs);
is(q1("SELECT streamcube_wait('pb', '60 s')"), 't', 'Timestamps of every form passed');
is(q1("SELECT user_id, extract(epoch FROM ts) FROM pb WHERE user_id > 2000 ORDER BY 1"), $ts_want,
	'Timestamps into timestamptz: nanos truncated to micros, negative seconds, last field wins, pieces merged');
my $ts_topic = sc_topic('proto_ts');
sc_create_topic($ts_topic, 1);
sc_kafka_raw('raw', $ts_topic, @ts_msgs);
q1("SELECT streamcube_create_cube('pbl', 'k', '$ts_topic', 'ts timestamp, user_id bigint', 'ts', '1 hour', "
	  . "'protobuf', '{\"fields\": {\"user_id\": \"user.id\"}}')");
is(q1("SELECT streamcube_wait('pbl', '60 s')"), 't', 'a cube of timestamp without time zone consumed them');
is(q1("SELECT user_id, extract(epoch FROM ts) FROM pbl ORDER BY 1"), $ts_want,
	'Timestamps into timestamp without time zone: their UTC time');
is(q1("SELECT count(*) FROM streamcube.dead_letters WHERE cube IN ('pb'::regclass, 'pbl'::regclass) AND error LIKE '%Timestamp%'"),
	0, 'no Timestamp was a dead letter');

# ---------------------------------------------------------------------
# 7. The rules of the specification.  Hand-made messages (the reference
#    serializer never writes most of them), each read by Python's protobuf
#    (the reference: its parse, or its refusal) and by three cubes of one
#    topic mapping the whole message, some fields, or one: a message the
#    reference refuses is a dead letter in every cube, for the same
#    reason; the others are rows with the reference's values.
# ---------------------------------------------------------------------
sub fixed32 { my ($num, $v) = @_; return varint($num << 3 | 5) . pack('V', $v); }
sub reference    # [ { error } or { json, enums, oneof } ] per message, by Python's protobuf
{
	my ($proto, $message, @hex) = @_;
	my $code = <<'PY';
import base64, json, sys
from importlib.machinery import SourceFileLoader
from google.protobuf import json_format
sc = SourceFileLoader('scregistry', sys.argv[1]).load_module()
cls = sc.compile_proto(open(sys.argv[2]).read(), sys.argv[3])
for h in sys.argv[4:]:
    b = bytes.fromhex(h)[6:]    # the framing: magic, schema id, message index [0]
    m = cls()
    try:
        m.ParseFromString(b)
    except Exception as e:
        print(json.dumps({'error': str(e)}))
        continue
    enums = {f.name: f.enum_type.values_by_number[getattr(m, f.name)].name
             for f in m.DESCRIPTOR.fields if f.enum_type is not None and not f.is_repeated
             and getattr(m, f.name) in f.enum_type.values_by_number}
    oneofs = {o.name: m.WhichOneof(o.name) for o in m.DESCRIPTOR.oneofs}
    print(json.dumps({'json': json_format.MessageToDict(m, preserving_proto_field_name=True),
                      'enums': enums, 'oneof': oneofs}))
PY
	my $file = PostgreSQL::Test::Utils::tempdir() . "/$message.proto";
	open(my $fh, '>', $file) or die "$file: $!";
	print $fh $proto;
	close $fh;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $ENV{SC_PYTHON}, '-c', $code, $ENV{SC_SCREGISTRY}, $file, $message, @hex ],
		'<', \undef, '>', \$out, '2>', \$err) or die "the reference failed: $err";
	return [ map { JSON::PP->new->decode($_) } split /\n/, $out ];
}
sub pb_framed    # message index [0]: the file's first message
{
	my ($id, $body) = @_;
	return unpack('H*', "\0" . pack('N', $id) . "\0" . $body);
}
sub rows_or_letters    # per cube: offset -> { row } or { error }
{
	my ($cube, @cols) = @_;
	my %r;
	my $sel = join(", ", map { "coalesce($_\::text, '<NULL>')" } @cols);
	for (split /\n/, q1("SELECT _offset, $sel FROM $cube"))
	{
		my ($off, @v) = split /\|/, $_, -1;
		$r{$off} = { map { $cols[$_] => ($v[$_] eq '<NULL>' ? undef : $v[$_]) } 0 .. $#cols };
	}
	for (split /\n/, q1("SELECT \"offset\", error FROM streamcube.dead_letters WHERE cube = '$cube'::regclass"))
	{
		my ($off, $e) = split /\|/, $_, 2;
		$r{$off} = { error => $e };
	}
	return \%r;
}

my $r3 = <<'PROTO';
syntax = "proto3";
package scr;
import "google/protobuf/timestamp.proto";
message Q {    // the file's first message: message index [0]
  int64 id = 10;
  google.protobuf.Timestamp t = 11;
  oneof pick { Inner om = 1; int32 oi = 2; }
  string str = 3;
  int32 n = 4;
  Inner in = 5;
  Al al = 6;
  repeated int32 rn = 7;
}
message Inner { int32 a = 1; int32 b = 2; string s = 3; }
enum Al { option allow_alias = true; Z = 0; A = 1; B = 1; }
PROTO
my $r2 = <<'PROTO';
syntax = "proto2";
package scr2;
enum E { option allow_alias = true; ONE = 1; UNO = 1; TWO = 2; }
enum E0 { Z = 0; ONE0 = 1; }
message M {
  optional int64 id = 10;
  optional E e = 1 [default = TWO];
  repeated E re = 2;
  repeated E pe = 3 [packed = true];
  map<string, E0> me = 4;
  optional E d = 5 [default = UNO];
  optional string s = 6;
  optional string s2 = 7;
  oneof o { E oe = 8; int32 oint = 9; }
}
PROTO
my $tq = sc_topic('proto_rules3');
my $tm = sc_topic('proto_rules2');
sc_create_topic($tq, 1);
sc_create_topic($tm, 1);
my $pq = sc_registry_produce($tq, format => 'protobuf', schema => $r3, message => 'Q', records => [ { id => 1 } ]);
# (proto2 registered as .proto text: the alias default reaches the parser as written)
my $pm = sc_registry_produce($tm, format => 'protobuf', schema => $r2, message => 'M', proto_schema => 'text',
	records => [ { id => 1 } ]);
my $bad = "\xff\xfe";
my @q = (
	# 1: om, then oi (clears om), then om again: om is the last one alone
	fld(10, 0, 1) . fld(1, 2, fld(1, 0, 5)) . fld(2, 0, 7) . fld(1, 2, fld(2, 0, 9)),
	# 2: om twice: merged
	fld(10, 0, 2) . fld(1, 2, fld(1, 0, 5)) . fld(1, 2, fld(2, 0, 9)),
	# 3: oi, om, oi: oi
	fld(10, 0, 3) . fld(2, 0, 4) . fld(1, 2, fld(1, 0, 5)) . fld(2, 0, 6),
	# 4: a string of bad UTF-8 that a later occurrence overrides
	fld(10, 0, 4) . fld(3, 2, $bad) . fld(3, 2, 'ok'),
	# 5: bad UTF-8 in a string of a message no column but the whole reads
	fld(10, 0, 5) . fld(5, 2, fld(3, 2, "x$bad")),
	# 6: wire types that do not match: unknown fields (the value before stays)
	fld(10, 0, 6) . fld(4, 2, 'zz') . fld(5, 2, fld(1, 0, 3) . fixed32(1, 8)) . fld(1, 2, fixed32(2, 1)),
	# 7: a message of bad bytes (a truncated varint) no column but the whole reads
	fld(10, 0, 7) . fld(5, 2, "\x08"),
	# 8: packed values of bad bytes, in a field no column but the whole reads
	fld(10, 0, 8) . fld(7, 2, "\x01\x80"),
	# 9: an aliased number; a NUL in a string (fine for the reference; text cannot hold it)
	fld(10, 0, 9) . fld(6, 0, 1) . fld(5, 2, fld(3, 2, "a\0b")),
	# 10: a NUL in a string some cubes read
	fld(10, 0, 10) . fld(3, 2, "a\0b"),
	# 11: a message field twice (merged) and a number twice (the last wins) around an unknown field of a two-byte tag
	fld(10, 0, 11) . fld(5, 2, fld(1, 0, 5)) . fld(4, 0, 1) . fld(100, 0, 5) . fld(5, 2, fld(2, 0, 9)) . fld(4, 0, 300),
	# 12: each field once, out of order: a negative number (ten bytes), a string of two-byte characters
	fld(6, 0, 1) . fld(4, 0, -5) . fld(3, 2, "h\xc3\xa9llo") . fld(10, 0, 12) . fld(5, 2, fld(3, 2, 's') . fld(2, 0, 2)),
	# 13: a Timestamp of bad bytes (a truncated varint) no column but the whole reads
	fld(10, 0, 13) . fld(11, 2, "\x08\x80"),
	# 14: a Timestamp no column but the whole reads
	fld(10, 0, 14) . fld(11, 2, fld(1, 0, 1700000000) . fld(2, 0, 5000)));
my @m = (
	# 1: a closed enum's unknown number: unset (its declared default)
	fld(10, 0, 1) . fld(1, 0, 7) . fld(8, 0, 7),
	# 2: a known number, then an unknown one: the known one stays; a oneof member unknown does not clear the other
	fld(10, 0, 2) . fld(1, 0, 1) . fld(1, 0, 7) . fld(9, 0, 3) . fld(8, 0, 7),
	# 3: repeated, packed or not, and a map: unknown numbers left out, and entries holding them
	fld(10, 0, 3) . fld(2, 0, 1) . fld(2, 0, 7) . fld(2, 0, 2) . fld(3, 2, varint(1) . varint(7) . varint(2))
	  . fld(4, 2, fld(1, 2, 'a') . fld(2, 0, 1)) . fld(4, 2, fld(1, 2, 'b') . fld(2, 0, 7))
	  . fld(4, 2, fld(1, 2, 'c') . fld(2, 0, 7) . fld(2, 0, 1)),
	# 4: the default an alias: the first name of its number; an aliased number from the data
	fld(10, 0, 4) . fld(1, 0, 1) . fld(8, 0, 1),
	# 5: proto2 strings are not checked: bad UTF-8 overridden is fine
	fld(10, 0, 5) . fld(6, 2, $bad) . fld(6, 2, 'ok'),
	# 6: ... and in a field only the whole message reads: a value text cannot hold
	fld(10, 0, 6) . fld(7, 2, $bad),
	# 7: each field once
	fld(10, 0, 7) . fld(6, 2, 'a') . fld(1, 0, 2) . fld(5, 0, 1));
my @qhex = map { pb_framed($pq->{schema_ids}[0], $_) } @q;
my @mhex = map { pb_framed($pm->{schema_ids}[0], $_) } @m;
my $qref = reference($r3, 'Q', @qhex);
my $mref = reference($r2, 'M', @mhex);
sc_kafka_raw('raw', $tq, @qhex);
sc_kafka_raw('raw', $tm, @mhex);

my $ts = '"ts": {"kafka": "timestamp"}';
q1("SELECT streamcube_create_cube('rq_whole', 'k', '$tq', 'ts timestamptz, id bigint, doc jsonb', 'ts', '1 hour', "
	  . "'protobuf', '{\"fields\": {$ts, \"doc\": {\"kafka\": \"value\"}}}')");
q1("SELECT streamcube_create_cube('rq_some', 'k', '$tq', 'ts timestamptz, id bigint, n int, oi int, "
	  . "om_a int, om_b int, in_a int, al text, str text', 'ts', '1 hour', "
	  . "'protobuf', '{\"fields\": {$ts, \"om_a\": \"om.a\", \"om_b\": \"om.b\", \"in_a\": \"in.a\"}}')");
q1("SELECT streamcube_create_cube('rq_few', 'k', '$tq', 'ts timestamptz, id bigint', 'ts', '1 hour', "
	  . "'protobuf', '{\"fields\": {$ts}}')");
# (read in one pass: every field a column reads singular, in no oneof, read whole)
q1("SELECT streamcube_create_cube('rq_flat', 'k', '$tq', 'ts timestamptz, id bigint, n int, str text, al text, "
	  . "inr jsonb', 'ts', '1 hour', 'protobuf', '{\"fields\": {$ts, \"inr\": \"in\"}}')");
q1("SELECT streamcube_create_cube('rm_flat', 'k', '$tm', 'ts timestamptz, id bigint, e text, d text, s text', "
	  . "'ts', '1 hour', 'protobuf', '{\"fields\": {$ts}}')");
q1("SELECT streamcube_create_cube('rm_whole', 'k', '$tm', 'ts timestamptz, id bigint, doc jsonb', 'ts', '1 hour', "
	  . "'protobuf', '{\"fields\": {$ts, \"doc\": {\"kafka\": \"value\"}}}')");
q1("SELECT streamcube_create_cube('rm_some', 'k', '$tm', 'ts timestamptz, id bigint, e text, re jsonb, pe jsonb, "
	  . "me jsonb, d text, oe text, oint int, s text', 'ts', '1 hour', 'protobuf', '{\"fields\": {$ts}}')");
for my $c (qw(rq_whole rq_some rq_few rq_flat rm_whole rm_some rm_flat))
{
	is(q1("SELECT streamcube_wait('$c', '60 s')"), 't', "cube $c consumed its topic");
}

my %cols = (rq_some => [qw(id n oi om_a om_b in_a al str)], rq_flat => [qw(id n str al inr)],
	rm_some => [qw(id e re pe me d oe oint s)], rm_flat => [qw(id e d s)]);
my %got = map { $_ => rows_or_letters($_, $_ =~ /whole/ ? qw(id doc) : $cols{$_} ? @{ $cols{$_} } : qw(id)) }
  qw(rq_whole rq_some rq_few rq_flat rm_whole rm_some rm_flat);
my $jp = JSON::PP->new->canonical;

# the message's outcome in each cube: the reference's refusal everywhere, or rows
sub outcome
{
	my ($what, $off, $ref, $want_error, @cubes) = @_;
	my @e = map { $got{$_}{$off} && $got{$_}{$off}{error} } @cubes;
	if (defined $ref->{error})
	{
		is(scalar(grep { defined $_ && $_ eq $e[0] } @e), scalar(@cubes),
			"$what: refused by the reference, a dead letter in every cube for one reason")
		  or diag explain { map { $cubes[$_] => $got{ $cubes[$_] }{$off} } 0 .. $#cubes };
		like($e[0] // '', $want_error, "$what: the reason names the field and the fault");
		return 0;
	}
	is(scalar(grep { defined $got{$_}{$off} && !defined $got{$_}{$off}{error} } @cubes), scalar(@cubes),
		"$what: read by the reference, a row in every cube")
	  or diag explain { map { $_ => $got{$_}{$off} } @cubes };
	return 1;
}
sub num { my ($v) = @_; return defined $v ? 0 + $v : 0; }

my @q3 = qw(rq_whole rq_some rq_few rq_flat);
for my $i (0 .. $#q)
{
	my ($off, $ref) = ($i + 1, $qref->[$i]);
	my $what = "Q message " . ($i + 1);
	my $want = {
		4 => qr/^invalid Protobuf message \(schema id \d+\): field "str": a string that is not valid UTF-8 \(at byte \d+\)$/,
		5 => qr/: field "in\.s": a string that is not valid UTF-8/,
		7 => qr/: field "in\.a": truncated varint/,
		8 => qr/: field "rn": truncated varint/,
		13 => qr/: field "t\.seconds": truncated varint/ }->{$i + 1};
	if ($i + 1 == 9 || $i + 1 == 10)
	{
		# the reference reads it; a string of a NUL is a value text cannot hold: the cubes reading it refuse it
		ok(!defined $ref->{error}, "$what: read by the reference");
		my $str = $i + 1 == 9 ? 'in.s' : 'str';
		is($got{rq_some}{$off}{al} // 'NULL', $ref->{enums}{al}, "$what: an aliased number by its first name")
		  if $i + 1 == 9;
		ok(defined $got{rq_few}{$off} && !defined $got{rq_few}{$off}{error}, "$what: a row where no column reads \"$str\"");
		like($got{rq_whole}{$off}{error} // '', qr/field "\Q$str\E": a string holding a NUL byte, which text cannot hold/,
			"$what: a dead letter saying it is a NUL where the whole message is read");
		like($got{rq_flat}{$off}{error} // '', qr/field "\Q$str\E": a string holding a NUL byte, which text cannot hold/,
			"$what: the same where it is read in one pass");
		next;
	}
	next unless outcome($what, $off, $ref, $want, @q3);
	my $j = $ref->{json};
	my $row = $got{rq_some}{$off};
	my $oneof = $ref->{oneof}{pick} // '';
	is(join('|', map { $_ // 'NULL' } @$row{qw(n oi om_a om_b in_a al)}),
		join('|', num($j->{n}), $oneof eq 'oi' ? $j->{oi} : 'NULL',
			$oneof eq 'om' ? (num($j->{om}{a}), num($j->{om}{b})) : ('NULL', 'NULL'),
			defined $j->{in} ? num($j->{in}{a}) : 'NULL', $ref->{enums}{al}),
		"$what: n, oi, om.a, om.b, in.a and al as the reference reads them");
	my $doc = $jp->decode($got{rq_whole}{$off}{doc} // '{}');
	is($jp->encode([ map { $doc->{$_} } qw(oi om) ]),
		$jp->encode([ $oneof eq 'oi' ? $j->{oi} : undef,
			$oneof eq 'om' ? { a => num($j->{om}{a}), b => num($j->{om}{b}), s => $j->{om}{s} // '' } : undef ]),
		"$what: the oneof in the whole message's JSON as the reference reads it");
	my $flat = $got{rq_flat}{$off};
	my $str = $j->{str} // '';
	utf8::encode($str);    # psql's bytes
	is(join('|', map { $_ // 'NULL' } @$flat{qw(id n str al)}), join('|', $j->{id}, num($j->{n}), $str, $ref->{enums}{al}),
		"$what: id, n, str and al read in one pass as the reference reads them");
	is($jp->encode($jp->decode($flat->{inr} // 'null')),
		$jp->encode(defined $j->{in} ? { a => num($j->{in}{a}), b => num($j->{in}{b}), s => $j->{in}{s} // '' } : undef),
		"$what: in, read whole in one pass, as the reference reads it");
}

my @m2 = qw(rm_whole rm_some rm_flat);
for my $i (0 .. $#m)
{
	my ($off, $ref) = ($i + 1, $mref->[$i]);
	my $what = "M message " . ($i + 1);
	if ($i + 1 == 6)
	{
		ok(!defined $ref->{error}, "$what: proto2 strings are not checked by the reference");
		ok(defined $got{rm_some}{$off} && !defined $got{rm_some}{$off}{error}, "$what: a row where no column reads \"s2\"");
		ok(defined $got{rm_flat}{$off} && !defined $got{rm_flat}{$off}{error}, "$what: the same where it is read in one pass");
		like($got{rm_whole}{$off}{error} // '', qr/field "s2": a string that is not valid UTF-8/,
			"$what: a dead letter where the whole message is read (text cannot hold it)");
		next;
	}
	next unless outcome($what, $off, $ref, undef, @m2);
	my $j = $ref->{json};
	my $row = $got{rm_some}{$off};
	my $oneof = $ref->{oneof}{o} // '';
	is(join('|', map { $_ // 'NULL' } @$row{qw(e d oe oint s)}),
		join('|', $ref->{enums}{e}, $ref->{enums}{d}, $oneof eq 'oe' ? $ref->{enums}{oe} : 'NULL',
			$oneof eq 'oint' ? $j->{oint} : 'NULL', $j->{s} // ''),
		"$what: e, d, oe, oint and s as the reference reads them");
	is(join('|', map { $_ // 'NULL' } @{ $got{rm_flat}{$off} }{qw(id e d s)}),
		join('|', $j->{id}, $ref->{enums}{e}, $ref->{enums}{d}, $j->{s} // ''),
		"$what: id, e, d and s read in one pass as the reference reads them");
	is($jp->encode([ map { $jp->decode($row->{$_} // 'null') } qw(re pe me) ]),
		$jp->encode([ $j->{re} // [], $j->{pe} // [], $j->{me} // {} ]),
		"$what: re, pe and me as the reference reads them");
	my $doc = $jp->decode($got{rm_whole}{$off}{doc} // '{}');
	is($jp->encode([ @$doc{qw(e d re pe me)} ]), $jp->encode([ @$row{qw(e d)}, map { $jp->decode($row->{$_} // 'null') } qw(re pe me) ]),
		"$what: the whole message's JSON says the same");
}

$node->stop;
done_testing();
