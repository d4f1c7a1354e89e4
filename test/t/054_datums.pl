
# Values given as datums (format.h, sc_line_field_datum): Avro and
# Protobuf numbers, bools and timestamps, and the text of text columns
# (sc_text_datum), reach the row without their text being written (and
# escaped) and read back, on the direct path; the COPY fallback and
# lines that need an escape get the datums' text written in.  Each must
# give exactly what the value's text gives through the column type's
# input function, which is what this test checks, against the real broker
# and registry:
#
#  - an oracle cube reads every field as varchar, which takes no datum;
#    the typed cubes must hold,
#    per (_partition, _offset), what that text cast to each type gives,
#    compared as text (so -0 is not 0, NaN is NaN): integers at their
#    limits, floats (denormal, largest, -0, NaN, infinities), booleans,
#    timestamps before 1970 and with microseconds, local timestamps into
#    timestamp (a datum) and timestamptz (text, in the session's zone),
#    integers, floats and doubles into numeric (a datum made as numeric_in
#    reads their text, display scale and all: compared as text), a
#    field feeding a column that takes its datum and one with a typmod
#    that does not, a nullable union and a wrapper, strings into text (a
#    datum) and the same strings into varchar in the same rows, which need
#    an escape (the line's ends taken back, the text datums written in);
#  - the same typed cube with a trigger on its table, so that every row
#    goes through COPY (rows_copy), with the datums written as text;
#  - values a column cannot hold (a long into smallint, into a domain
#    with a CHECK; a uint64 past bigint, a fixed32 past int) are dead
#    letters with PostgreSQL's own words, the other rows exact;
#  - every cube: produced = rows (+ dead letters), (_partition, _offset)
#    unique.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;

sc_require_env();
sc_require_registry();

my $node = sc_node('datums');
sub q1 { return $node->safe_psql('postgres', $_[0]); }
q1("SELECT streamcube_alter_cluster('k', properties => '{\"schema.registry.url\": \"$ENV{SC_REGISTRY}\"}')");
q1("CREATE DOMAIN posint AS bigint CHECK (VALUE > 0)");
q1("CREATE FUNCTION keep_row() RETURNS trigger LANGUAGE plpgsql AS \$\$BEGIN RETURN NEW; END\$\$");

my $N = 240;
my $base_us = (int(time / 3600) - 2) * 3600 * 1_000_000;    # two hours ago, on the hour

my @longs = ('0', '1', '-1', '32767', '32768', '-32769', '2147483648', '-2147483649',
	'9223372036854775807', '-9223372036854775808', '123456789012');
my @ints = ('0', '-1', '2147483647', '-2147483648', '65536');
my @floats = ('0.1', '-0.0', '1e-45', '3.4028234e38', '1.5', 'NaN', 'Infinity', '-Infinity');
my @doubles = ('0.1', '-0.0', '5e-324', '1.7976931348623157e308', '0.3333333333333333',
	'NaN', 'Infinity', '-Infinity', '123456.789');
my @strings = ('plain', "a\\ttab", "back\\\\slash", "new\\nline", "\\u00fcn\\u00efcode");

# the i-th value of a list, as JSON (Python's json reads NaN and Infinity bare)
sub pick { my ($list, $i) = @_; return $list->[ $i % scalar(@$list) ]; }
sub iso_us
{
	my ($us) = @_;
	my $s = int($us / 1_000_000);
	$s-- if $us < 0 && $us % 1_000_000;
	my @t = gmtime($s);
	return sprintf('%04d-%02d-%02dT%02d:%02d:%02d.%06dZ', $t[5] + 1900, $t[4] + 1, @t[ 3, 2, 1, 0 ],
		$us - $s * 1_000_000);
}
sub ts_us { my ($i) = @_; return $base_us + $i * 1_000_003; }
# local timestamps and other instants: some before 1970
sub local_us { my ($i) = @_; return ($i % 7 == 0 ? -1_000_000_000_123 : 1_600_000_000_000_000) + $i * 37; }
sub old_us { my ($i) = @_; return ($i % 6 == 0 ? -2_000_000_000_000_000 : 1_700_000_000_000_000) + $i * 1_001_000; }

# ---------------------------------------------------------------------
# Avro
# ---------------------------------------------------------------------
my $avro_schema = '{"type": "record", "name": "D", "namespace": "sc", "fields": ['
  . '{"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}}, '
  . '{"name": "i", "type": "long"}, {"name": "n", "type": "int"}, '
  . '{"name": "f", "type": "float"}, {"name": "d", "type": "double"}, '
  . '{"name": "b", "type": "boolean"}, '
  . '{"name": "lt", "type": {"type": "long", "logicalType": "local-timestamp-micros"}}, '
  . '{"name": "s", "type": "string"}, {"name": "u", "type": ["null", "long"], "default": null}, '
  . '{"name": "o", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}';
my @avro;
for my $i (0 .. $N - 1)
{
	push @avro, sprintf('{"ts": %s, "i": %s, "n": %s, "f": %s, "d": %s, "b": %s, "lt": %s, "s": "%s", '
		  . '"u": %s, "o": %s}',
		ts_us($i), pick(\@longs, $i), pick(\@ints, $i), pick(\@floats, $i), pick(\@doubles, $i),
		$i % 3 == 0 ? 'true' : 'false', local_us($i), pick(\@strings, $i),
		$i % 4 == 0 ? 'null' : $i * 1000 - 70000, int(old_us($i) / 1000));
}

my $atopic = sc_topic('datums_avro');
sc_create_topic($atopic, 2);
my $typed = "'ts timestamptz, i8 bigint, i4 int, f4 real, f8 float8, b boolean, lt timestamp, "
  . "ltz timestamptz, ms timestamptz(3), s text, u bigint, o timestamptz, sv varchar, "
  . "ln numeric, fn numeric, dn numeric'";
my $typed_fields = '"i8": "i", "i4": "n", "f4": "f", "f8": "d", "ltz": "lt", "ms": "ts", "sv": "s", '
  . '"ln": "i", "fn": "f", "dn": "d"';
q1("SELECT streamcube_create_cube('ax', 'k', '$atopic', "
	  . "'ts timestamptz, tst varchar, i varchar, n varchar, f varchar, d varchar, b varchar, lt varchar, "
	  . "s varchar, u varchar, o varchar', "
	  . "'ts', '1 hour', 'avro', '{\"fields\": {\"tst\": \"ts\"}}')");
for my $c ('at', 'ac')
{
	q1("SELECT streamcube_create_cube('$c', 'k', '$atopic', $typed, 'ts', '1 hour', 'avro', "
		  . "'{\"fields\": {$typed_fields}}')");
}
q1("CREATE TRIGGER keep BEFORE INSERT ON ac FOR EACH ROW EXECUTE FUNCTION keep_row()");
q1("SELECT streamcube_create_cube('a2', 'k', '$atopic', 'ts timestamptz, i2 smallint', 'ts', '1 hour', "
	  . "'avro', '{\"fields\": {\"i2\": \"i\"}}')");
q1("SELECT streamcube_create_cube('ap', 'k', '$atopic', 'ts timestamptz, p posint', 'ts', '1 hour', "
	  . "'avro', '{\"fields\": {\"p\": \"i\"}}')");
sc_registry_produce($atopic, format => 'avro', schema => $avro_schema, records => \@avro);
for my $c (qw(ax at ac a2 ap))
{
	is(q1("SELECT streamcube_wait('$c', '120 s')"), 't', "avro cube $c consumed the topic");
}
for my $c (qw(ax at ac))
{
	is(q1("SELECT count(*), count(DISTINCT (_partition, _offset)) FROM $c"), "$N|$N",
		"avro cube $c: every message once");
}
my $avro_same = "SELECT count(*) FROM %s t JOIN ax x USING (_partition, _offset) "
  . "WHERE (t.ts::text, t.i8::text, t.i4::text, t.f4::text, t.f8::text, t.b::text, t.lt::text, "
  . "       t.ltz::text, t.ms::text, t.s, t.u::text, t.o::text, t.sv::text, "
  . "       t.ln::text, t.fn::text, t.dn::text) IS DISTINCT FROM "
  . "      (x.tst::timestamptz::text, x.i::bigint::text, x.n::int::text, x.f::real::text, "
  . "       x.d::float8::text, x.b::boolean::text, x.lt::timestamp::text, x.lt::timestamptz::text, "
  . "       x.tst::timestamptz(3)::text, x.s::text, x.u::bigint::text, x.o::timestamptz::text, x.s::text, "
  . "       x.i::numeric::text, x.f::numeric::text, x.d::numeric::text)";
is(q1(sprintf($avro_same, 'at')), 0, 'avro, direct path: every value is what its text gives');
is(q1(sprintf($avro_same, 'ac')), 0, 'avro, COPY (a trigger on the table): every value is what its text gives');
is(q1("SELECT count(*) FROM ax WHERE s ~ '[\\t\\n\\\\]'"), $N * 3 / 5, 'the rows hold strings that need an escape');
is(q1("SELECT count(*) FILTER (WHERE f::real::text = '-0'), count(*) FILTER (WHERE d = 'NaN'), "
		  . "count(*) FILTER (WHERE lt::timestamp < '1970-01-01'), "
		  . "count(*) FILTER (WHERE o::timestamptz < '1970-01-01'), count(*) FILTER (WHERE u IS NULL) FROM ax"),
	'30|27|35|40|60', 'the edges are there: -0, NaN, timestamps before 1970, a null union');
is(q1("SELECT rows_direct, rows_copy FROM streamcube.consumers WHERE cube = 'at'::regclass"),
	"$N|0", 'the typed cube wrote its rows on the direct path');
is(q1("SELECT rows_direct, rows_copy FROM streamcube.consumers WHERE cube = 'ac'::regclass"),
	"0|$N", 'the cube with a trigger wrote its rows through COPY');

my $fit2 = q1("SELECT count(*) FROM ax WHERE i::numeric BETWEEN -32768 AND 32767");
is(q1("SELECT count(*), count(DISTINCT (_partition, _offset)) FROM a2"), "$fit2|$fit2",
	'a long into smallint: the rows that fit');
is(q1("SELECT count(*) FROM a2 JOIN ax USING (_partition, _offset) WHERE i2 <> i::smallint"), 0,
	'... with their values');
is(q1("SELECT count(*), count(*) FILTER (WHERE error LIKE '%out of range for type smallint%') "
		  . "FROM streamcube.dead_letters WHERE cube = 'a2'::regclass"),
	($N - $fit2) . '|' . ($N - $fit2), '... the others dead letters, in PostgreSQL\'s words');
my $fitp = q1("SELECT count(*) FROM ax WHERE i::numeric > 0");
is(q1("SELECT count(*), count(*) FILTER (WHERE p <> i::bigint) FROM ap JOIN ax USING (_partition, _offset)"),
	"$fitp|0", 'a long into a domain with a CHECK: the rows that pass it');
is(q1("SELECT count(*), count(*) FILTER (WHERE error LIKE '%violates check constraint%') "
		  . "FROM streamcube.dead_letters WHERE cube = 'ap'::regclass"),
	($N - $fitp) . '|' . ($N - $fitp), '... the others dead letters, the domain\'s check');

# ---------------------------------------------------------------------
# Protobuf
# ---------------------------------------------------------------------
my $proto = <<'PROTO';
syntax = "proto3";
package sc;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
message D {
  google.protobuf.Timestamp ts = 1;
  int64 i = 2;
  int32 n = 3;
  float f = 4;
  double d = 5;
  bool b = 6;
  sint64 z = 7;
  uint64 w = 8;
  google.protobuf.Int64Value u = 9;
  string s = 10;
  fixed32 x = 11;
  google.protobuf.Timestamp o = 12;
}
PROTO
my @uint64s = ('0', '1', '9223372036854775807', '9223372036854775808', '18446744073709551615', '77');
my @fixed32s = ('0', '2147483647', '2147483648', '4294967295', '5');
my @proto;
for my $i (0 .. $N - 1)
{
	# proto3 JSON: 64-bit integers and NaN/infinities as strings
	my ($f, $d) = (pick(\@floats, $i), pick(\@doubles, $i));
	$f = "\"$f\"" if $f =~ /[NI]/;
	$d = "\"$d\"" if $d =~ /[NI]/;
	push @proto, sprintf('{"ts": "%s", "i": "%s", "n": %s, "f": %s, "d": %s, "b": %s, "z": "%s", '
		  . '"w": "%s", %s"s": "%s", "x": %s, "o": "%s"}',
		iso_us(ts_us($i)), pick(\@longs, $i),
		pick(\@ints, $i), $f, $d, $i % 3 == 0 ? 'true' : 'false', pick(\@longs, $i + 3),
		pick(\@uint64s, $i), $i % 4 == 0 ? '' : '"u": "' . ($i * 1000 - 70000) . '", ',
		pick(\@strings, $i), pick(\@fixed32s, $i), iso_us(old_us($i)));
}
my $ptopic = sc_topic('datums_proto');
sc_create_topic($ptopic, 2);
q1("SELECT streamcube_create_cube('px', 'k', '$ptopic', "
	  . "'ts timestamptz, tst varchar, i varchar, n varchar, f varchar, d varchar, b varchar, z varchar, "
	  . "w varchar, u varchar, s varchar, x varchar, o varchar', 'ts', '1 hour', 'protobuf', "
	  . "'{\"fields\": {\"tst\": \"ts\"}}')");
my $ptyped = "'ts timestamptz, i8 bigint, i4 int, f4 real, f8 float8, b boolean, z bigint, wn numeric, "
  . "u bigint, s text, ms timestamptz(3), o timestamptz, sv varchar, ln numeric, fn numeric, dn numeric'";
my $ptyped_fields = '"i8": "i", "i4": "n", "f4": "f", "f8": "d", "wn": "w", "ms": "ts", "sv": "s", '
  . '"ln": "i", "fn": "f", "dn": "d"';
for my $c ('pt', 'pc')
{
	q1("SELECT streamcube_create_cube('$c', 'k', '$ptopic', $ptyped, 'ts', '1 hour', 'protobuf', "
		  . "'{\"fields\": {$ptyped_fields}}')");
}
q1("CREATE TRIGGER keep BEFORE INSERT ON pc FOR EACH ROW EXECUTE FUNCTION keep_row()");
q1("SELECT streamcube_create_cube('pe', 'k', '$ptopic', 'ts timestamptz, w bigint, x int', 'ts', '1 hour', "
	  . "'protobuf')");
sc_registry_produce($ptopic, format => 'protobuf', schema => $proto, message => 'D', records => \@proto);
for my $c (qw(px pt pc pe))
{
	is(q1("SELECT streamcube_wait('$c', '120 s')"), 't', "protobuf cube $c consumed the topic");
}
for my $c (qw(px pt pc))
{
	is(q1("SELECT count(*), count(DISTINCT (_partition, _offset)) FROM $c"), "$N|$N",
		"protobuf cube $c: every message once");
}
my $proto_same = "SELECT count(*) FROM %s t JOIN px x USING (_partition, _offset) "
  . "WHERE (t.ts::text, t.i8::text, t.i4::text, t.f4::text, t.f8::text, t.b::text, t.z::text, "
  . "       t.wn::text, t.u::text, t.s, t.ms::text, t.o::text, t.sv::text, "
  . "       t.ln::text, t.fn::text, t.dn::text) IS DISTINCT FROM "
  . "      (x.tst::timestamptz::text, x.i::bigint::text, x.n::int::text, x.f::real::text, "
  . "       x.d::float8::text, x.b::boolean::text, x.z::bigint::text, x.w::numeric::text, "
  . "       x.u::bigint::text, x.s::text, x.tst::timestamptz(3)::text, x.o::timestamptz::text, x.s::text, "
  . "       x.i::numeric::text, x.f::numeric::text, x.d::numeric::text)";
is(q1(sprintf($proto_same, 'pt')), 0, 'protobuf, direct path: every value is what its text gives');
is(q1(sprintf($proto_same, 'pc')), 0, 'protobuf, COPY (a trigger on the table): every value is what its text gives');
is(q1("SELECT count(*) FILTER (WHERE u IS NULL), count(*) FILTER (WHERE i = '0'), "
		  . "count(*) FILTER (WHERE o::timestamptz < '1970-01-01') FROM px"),
	'60|22|40', 'the edges are there: absent wrappers, absent zeros (their defaults), Timestamps before 1970');
is(q1("SELECT rows_direct, rows_copy FROM streamcube.consumers WHERE cube = 'pt'::regclass"),
	"$N|0", 'the typed cube wrote its rows on the direct path');
is(q1("SELECT rows_direct, rows_copy FROM streamcube.consumers WHERE cube = 'pc'::regclass"),
	"0|$N", 'the cube with a trigger wrote its rows through COPY');
my $fite = q1("SELECT count(*) FROM px WHERE w::numeric <= 9223372036854775807 AND x::numeric <= 2147483647");
is(q1("SELECT count(*), count(*) FILTER (WHERE (e.w, e.x) IS DISTINCT FROM (x.w::bigint, x.x::int)) "
		  . "FROM pe e JOIN px x USING (_partition, _offset)"),
	"$fite|0", 'a uint64 into bigint, a fixed32 into int: the rows that fit, exact');
is(q1("SELECT count(*), count(*) FILTER (WHERE error LIKE '%out of range for type%') "
		  . "FROM streamcube.dead_letters WHERE cube = 'pe'::regclass"),
	($N - $fite) . '|' . ($N - $fite), '... the others dead letters, in PostgreSQL\'s words');

done_testing();
