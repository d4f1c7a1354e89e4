
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
#  5. bad messages: an unknown id, a malformed message.

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

$node->stop;
done_testing();
