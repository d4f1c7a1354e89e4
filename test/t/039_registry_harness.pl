
# The schema registry of the test bench, and its producers, before any
# format uses them: test/run-tests starts Apicurio Registry beside the
# broker, and test/tools/scregistry produces with Confluent's own
# serializers.  Checked here, against what kcat reads back from Kafka and
# what the registry answers with curl (not through scregistry): every
# message is framed (byte 0 is 0, bytes 1-4 the id the registry gave at
# registration, big-endian; Protobuf then the message-index array), for
# Avro, Protobuf (schema stored as the serializer's base64
# FileDescriptorProto, or as .proto text) and JSON Schema; an explicit
# partition is kept; the HTTPS listener answers with the broker's
# certificate; and the registry stopped and started again answers with the
# same schemas under the same ids (its storage is a file, not Apicurio's
# in-memory default, which would forget them).  No PostgreSQL here.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use IPC::Run ();
use JSON::PP ();
use MIME::Base64 qw(decode_base64);
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;

sc_require_env();
sc_require_registry();

my $json = JSON::PP->new->canonical;

# GET a path of the registry's Confluent API with curl: (HTTP status,
# body); status 000 when nothing answered.
sub registry_get
{
	my ($path, @curl) = @_;
	my ($out, $err) = ('', '');
	my $base = $ENV{SC_REGISTRY};
	$base = $ENV{SC_REGISTRY_HTTPS} if grep { $_ eq '--cacert' || $_ eq 'https' } @curl;
	@curl = grep { $_ ne 'https' } @curl;
	IPC::Run::run([ 'curl', '-s', '--max-time', '10', '-w', '\n%{http_code}',
			@curl, "$base$path" ], '<', \undef, '>', \$out, '2>', \$err);
	my ($body, $code) = $out =~ /^(.*)\n(\d{3})$/s or return ('000', $err);
	return ($code, $body);
}

# Every message of a topic, byte for byte, with kcat: a list of
# [partition, offset, value] (value undef for a tombstone).  kcat prints
# each value's size before it, so binary values are read exactly.
sub kafka_messages
{
	my ($topic) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'kcat', '-C', '-b', $ENV{SC_KAFKA}, '-t', $topic,
			'-o', 'beginning', '-e', '-q', '-f', '%p %o %S\n%s' ],
		'<', \undef, '>', \$out, '2>', \$err)
	  or die "kcat -C failed: $err";
	my @m;
	while (length $out)
	{
		$out =~ s/^(\d+) (\d+) (-?\d+)\n// or die "kcat output not understood at: "
		  . substr($out, 0, 40);
		my ($p, $o, $size) = ($1, $2, $3);
		my $value = $size < 0 ? undef : substr($out, 0, $size, '');
		push @m, [ $p, $o, $value ];
	}
	return @m;
}

# How many messages have the Confluent framing with schema id $id and,
# when given, the message-index bytes $indexes after it.
sub framed_with
{
	my ($msgs, $id, $indexes) = @_;
	my $head = pack('CN', 0, $id) . ($indexes // '');
	return scalar grep { defined $_->[2] && substr($_->[2], 0, length $head) eq $head } @$msgs;
}

sub first_bytes
{
	my ($msgs) = @_;
	return @$msgs && defined $msgs->[0][2]
	  ? unpack('H*', substr($msgs->[0][2], 0, 8)) : 'none';
}

# ---------------------------------------------------------------- answers
my ($code, $body) = registry_get('/subjects');
is($code, '200', 'the registry answers GET /subjects on SC_REGISTRY');
like($body, qr/^\[.*\]$/s, 'with a JSON array');

($code) = registry_get('/subjects', '--cacert', $ENV{SC_REGISTRY_CA_PEM});
is($code, '200', 'the HTTPS listener answers, with a certificate the CA of SC_REGISTRY_CA_PEM signed');
($code) = registry_get('/subjects', 'https');
is($code, '000', 'and a client without that CA refuses it');

# ---------------------------------------------------------------- Avro
my $avro_schema = $json->encode({
	type => 'record', name => 'Event', namespace => 'streamcube.test',
	fields => [
		{ name => 'ts', type => { type => 'long', logicalType => 'timestamp-millis' } },
		{ name => 'country', type => 'string' },
		{ name => 'qty', type => 'int' },
		{ name => 'note', type => [ 'null', 'string' ], default => undef } ] });

my $avro_topic = sc_topic('reg_avro');
sc_create_topic($avro_topic, 2);
my $avro_id = sc_registry_register("$avro_topic-value", 'avro', $avro_schema);
like($avro_id, qr/^\d+$/, "Avro schema registered: id $avro_id");

($code, $body) = registry_get("/schemas/ids/$avro_id");
my $stored = $json->decode($body);
is($stored->{schemaType}, undef, 'the registry gives no schemaType for Avro (absent means Avro)');
is_deeply($json->decode($stored->{schema}), $json->decode($avro_schema),
	'and the schema registered');

my @avro_records = map {
	{ ts => 1793491200000 + $_ * 1000, country => (qw(fr de it))[ $_ % 3 ],
	  qty => $_, note => ($_ % 2 ? undef : "n$_") }
} 1 .. 100;
my $r = sc_registry_produce($avro_topic, format => 'avro',
	schema => $avro_schema, records => \@avro_records);
is($r->{count}, 100, 'scregistry produced 100 Avro messages');
is_deeply($r->{schema_ids}, [$avro_id], 'framed, it says, with the registered id');

my @avro = kafka_messages($avro_topic);
is(scalar @avro, 100, 'kcat reads 100 messages back');
is(framed_with(\@avro, $avro_id), 100,
	"each starts with byte 0 and then id $avro_id, big-endian (first: " . first_bytes(\@avro) . ')');
# Avro's binary encoding, by hand: longs and ints are zigzag varints,
# strings their length then bytes, a union its branch then the value.
sub avro_long
{
	my ($n) = @_;
	my $z = $n >= 0 ? 2 * $n : -2 * $n - 1;
	my $out = '';
	while ($z >= 0x80) { $out .= chr(($z & 0x7f) | 0x80); $z >>= 7; }
	return $out . chr($z);
}

sub avro_record
{
	my ($rec) = @_;
	return avro_long($rec->{ts}) . avro_long(length $rec->{country}) . $rec->{country}
	  . avro_long($rec->{qty})
	  . (defined $rec->{note}
		? avro_long(1) . avro_long(length $rec->{note}) . $rec->{note}
		: avro_long(0));
}
my %want = map { avro_record($_) => 1 } @avro_records;
is(scalar(grep { $want{ substr($_->[2], 5) } } @avro), 100,
	'after the 5 bytes, each is the Avro binary encoding of one of the records');

# ---------------------------------------------------------------- Protobuf
my $proto = <<'EOF';
syntax = "proto3";
package streamcube.test;
import "google/protobuf/timestamp.proto";
message Event {
  google.protobuf.Timestamp ts = 1;
  string country = 2;
  int32 qty = 3;
  int64 big = 4;
}
message Other { string x = 1; }
EOF
my @pb_records = map {
	{ ts => sprintf('2026-11-01T00:%02d:%02dZ', int($_ / 60), $_ % 60),
	  country => (qw(fr de it))[ $_ % 3 ], qty => $_, big => "${_}000000000" }
} 1 .. 100;

# As the serializer registers it: a base64 FileDescriptorProto.
my $pb_topic = sc_topic('reg_pb');
sc_create_topic($pb_topic, 2);
$r = sc_registry_produce($pb_topic, format => 'protobuf', schema => $proto,
	records => \@pb_records, partition => 1);
is($r->{count}, 100, 'scregistry produced 100 Protobuf messages');
is(scalar @{ $r->{schema_ids} }, 1, 'all with one schema id');
my $pb_id = $r->{schema_ids}[0];

($code, $body) = registry_get("/subjects/$pb_topic-value/versions/latest");
$stored = $json->decode($body);
is($stored->{id}, $pb_id, "the serializer registered the subject $pb_topic-value itself, id $pb_id");
is($stored->{schemaType}, 'PROTOBUF', 'as PROTOBUF');
unlike($stored->{schema}, qr/syntax|message/, 'not as .proto text');
like(decode_base64($stored->{schema}), qr/Event.*google\.protobuf\.Timestamp/s,
	'but as a base64 FileDescriptorProto');

my @pb = kafka_messages($pb_topic);
is(scalar @pb, 100, 'kcat reads 100 messages back');
is(scalar(grep { $_->[0] == 1 } @pb), 100, 'all in partition 1, the one asked for');
is(framed_with(\@pb, $pb_id, "\x00"), 100,
	"each starts with byte 0, id $pb_id and the message index [0] as one 0 byte (first: "
	  . first_bytes(\@pb) . ')');

# As .proto text, registered first; the second message type's index array
# is [1]: count 1 and index 1 as zigzag varints, 02 02.
my $pt_topic = sc_topic('reg_pt');
sc_create_topic($pt_topic, 1);
my $pt_id = sc_registry_register("$pt_topic-value", 'protobuf', $proto);
$r = sc_registry_produce($pt_topic, format => 'protobuf', schema => $proto,
	proto_schema => 'text', message => 'Other',
	records => [ map { { x => "x$_" } } 1 .. 10 ]);
is_deeply($r->{schema_ids}, [$pt_id], "the .proto text's id $pt_id frames them");
($code, $body) = registry_get("/schemas/ids/$pt_id");
like($json->decode($body)->{schema}, qr/^syntax = "proto3";/,
	'and the registry keeps the .proto text');
my @pt = kafka_messages($pt_topic);
is(framed_with(\@pt, $pt_id, "\x02\x02"), 10,
	'10 messages framed with the id and the index array [1] (first: ' . first_bytes(\@pt) . ')');
is(scalar(grep { substr($_->[2], 7) eq "\x0a" . chr(length('x' . ($_->[1] + 1))) . 'x' . ($_->[1] + 1) } @pt),
	10, 'each payload is the Protobuf encoding of its record');

# ---------------------------------------------------------------- JSON Schema
my $js_topic = sc_topic('reg_json');
sc_create_topic($js_topic, 1);
my $js_schema = $json->encode({ type => 'object',
	properties => { country => { type => 'string' }, qty => { type => 'integer' } },
	required => ['country'] });
$r = sc_registry_produce($js_topic, format => 'json', schema => $js_schema,
	key => 'country',
	records => [ { country => 'fr', qty => 1 }, undef, { country => 'de', qty => 2 } ]);
my $js_id = $r->{schema_ids}[0];
my @js = kafka_messages($js_topic);
is(scalar @js, 3, 'JSON Schema: 3 messages, one a tombstone');
is(framed_with(\@js, $js_id), 2, "the two records framed with id $js_id");
is_deeply([ map { defined $_->[2] ? $json->decode(substr($_->[2], 5)) : undef } @js ],
	[ { country => 'fr', qty => 1 }, undef, { country => 'de', qty => 2 } ],
	'the JSON text follows the 5 bytes; the tombstone has no value');

# ---------------------------------------------------------------- restart
sub registry_rss
{
	my $pid = PostgreSQL::Test::Utils::slurp_file("$ENV{SC_REGISTRY_DIR}/registry.pid");
	chomp $pid;
	my $status = eval { PostgreSQL::Test::Utils::slurp_file("/proc/$pid/status") } // '';
	return $status =~ /^VmRSS:\s+(\d+) kB/m ? sprintf('%.0f MB', $1 / 1024) : '?';
}
note 'registry RSS after the messages above: ' . registry_rss();
ok(sc_registry_running(), 'registry.sh status: running');
sc_registry_stop();
ok(!sc_registry_running(), 'stopped');
($code) = registry_get('/subjects');
is($code, '000', 'nothing answers on its port');
sc_registry_start();
($code, $body) = registry_get('/subjects');
is($code, '200', 'started again, it answers');
my %subjects = map { $_ => 1 } @{ $json->decode($body) };
ok($subjects{"$avro_topic-value"} && $subjects{"$pb_topic-value"}
	  && $subjects{"$pt_topic-value"} && $subjects{"$js_topic-value"},
	'with every subject registered before the restart');
($code, $body) = registry_get("/schemas/ids/$avro_id");
is($code, '200', "id $avro_id is still known");
is_deeply(eval { $json->decode($json->decode($body)->{schema}) }, $json->decode($avro_schema),
	"and still the Avro schema");
is(sc_registry_register("$avro_topic-value", 'avro', $avro_schema), $avro_id,
	'registering it again gives the same id');
($code) = registry_get('/subjects', '--cacert', $ENV{SC_REGISTRY_CA_PEM});
is($code, '200', 'HTTPS answers again');
is(sc_registry_register("$avro_topic-value", 'avro', $avro_schema, registry => 'https'),
	$avro_id, 'and registers through HTTPS too, same id');

$r = sc_registry_produce($avro_topic, format => 'avro', schema => $avro_schema,
	records => [ @avro_records[ 0 .. 9 ] ]);
@avro = kafka_messages($avro_topic);
is(framed_with(\@avro, $avro_id), 110, 'messages produced after the restart carry the same id');
note 'registry RSS after its restart: ' . registry_rss();

done_testing();
