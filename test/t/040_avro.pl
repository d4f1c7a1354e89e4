
# Format avro against the real broker and the real schema registry
# (Apicurio, Confluent API), with messages framed by Confluent's own
# serializer (scregistry):
#
#  1. mapping: fields to columns by name, a "fields" path into a nested
#     record, a nullable union, an enum, an array as jsonb, logical
#     timestamp-millis as the time column, the whole record as jsonb;
#  2. a schema evolved twice mid-stream (a field added, a field removed, an
#     int promoted to long): every message under its own writer schema;
#  3. a crash: exact counts, (_partition, _offset) unique;
#  4. the registry down: a restart of PostgreSQL goes on for the ids it has
#     seen (streamcube.schemas); messages of an id not seen wait, 30 s, with
#     the reason in last_error and no dead letter, and land when the
#     registry is back;
#  5. bad messages: an id the registry does not have, a message that is not
#     framed, a truncated record: dead letters that say so;
#  6. registry settings: only http/https URLs, credentials masked and
#     refused to non-admins;
#  7. JSON in the same framing (JSON Schema serializer) read by format json;
#  8. bare Avro records of the schema in option "schema".

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

my $node = sc_node('avro');
sub q1 { return $node->safe_psql('postgres', $_[0]); }

q1("SELECT streamcube_alter_cluster('k', properties => '{\"schema.registry.url\": \"$ENV{SC_REGISTRY}\"}')");

# ---------------------------------------------------------------------
# 1. mapping
# ---------------------------------------------------------------------
my $topic = sc_topic('avro');
sc_create_topic($topic, 3);
my %user = (type => 'record', name => 'User', fields => [
		{ name => 'id', type => 'long' },
		{ name => 'name', type => [ 'null', 'string' ], default => undef } ]);
my @v1_fields = (
	{ name => 'ts', type => { type => 'long', logicalType => 'timestamp-millis' } },
	{ name => 'country', type => 'string' },
	{ name => 'amount', type => 'double' },
	{ name => 'qty', type => 'int' },
	{ name => 'kind', type => { type => 'enum', name => 'Kind', symbols => [ 'view', 'buy' ] } },
	{ name => 'tags', type => { type => 'array', items => 'string' } },
	{ name => 'user', type => \%user });
my $json = JSON::PP->new->canonical;
my $v1 = $json->encode({ type => 'record', name => 'Event', namespace => 'sc', fields => \@v1_fields });
my $base_ms = (int(time / 3600) - 2) * 3600 * 1000;    # two hours ago, on the hour

sub records
{
	my ($from, $n, $version) = @_;
	my @r;
	for my $i ($from .. $from + $n - 1)
	{
		my %r = (ts => $base_ms + $i * 1000, country => ('de', 'fr', 'us')[ $i % 3 ],
			amount => $i * 0.5, qty => $i % 10 + 1);
		$r{kind} = ('view', 'buy')[ $i % 2 ] if $version <= 2;
		$r{tags} = [ "t$i", 'x' ] if $version <= 2;
		$r{user} = { id => 1000 + $i, name => $i % 5 ? "u$i" : undef };
		$r{extra} = "e$i" if $version >= 2;
		$r{qty} = 3_000_000_000 + $i if $version >= 3;    # a long now
		push @r, \%r;
	}
	return \@r;
}

my $p1 = sc_registry_produce($topic, format => 'avro', schema => $v1, records => records(0, 600, 1));
my $id1 = $p1->{schema_ids}[0];
q1("SELECT streamcube_create_cube('av', 'k', '$topic', "
	  . "'ts timestamptz, country text, amount float8, qty bigint, kind text, tags jsonb, "
	  . "user_id bigint, user_name text, extra text, doc jsonb', 'ts', '1 hour', 'avro', "
	  . "'{\"fields\": {\"user_id\": \"user.id\", \"user_name\": \"user.name\", \"doc\": {\"kafka\": \"value\"}}}')");
is(q1("SELECT streamcube_wait('av', '60 s')"), 't', 'the Avro cube consumed the topic');
is(q1("SELECT count(*), count(DISTINCT (_partition, _offset)), sum(qty), sum(amount) FROM av"),
	'600|600|3300|89850', 'every message once: count, (_partition, _offset) unique, sums');
is(q1("SELECT ts = to_timestamp(($base_ms + 7 * 1000) / 1000.0), country, amount, qty, kind, tags, user_id, "
		  . "user_name, extra IS NULL FROM av WHERE user_id = 1007"),
	"t|fr|3.5|8|buy|[\"t7\", \"x\"]|1007|u7|t",
	'a row: timestamp-millis, string, double, int, enum, array as jsonb, nested path, nullable union; a field the writer lacks is NULL');
is(q1("SELECT user_name IS NULL FROM av WHERE user_id = 1005"), 't', 'a null union branch is NULL');
is(q1("SELECT doc->>'country', doc->'user'->>'id', doc->'tags'->>0 FROM av WHERE user_id = 1007"),
	'fr|1007|t7', 'the whole record as jsonb (option fields: {"kafka": "value"})');
is(q1("SELECT count(*) FROM streamcube.schemas WHERE schema_id = $id1 AND schema_type = 'AVRO'"), 1,
	'the writer schema is kept in streamcube.schemas');

# ---------------------------------------------------------------------
# 2. evolution: a field added (v2), a field removed and an int promoted (v3)
# ---------------------------------------------------------------------
my @v2_fields = (@v1_fields, { name => 'extra', type => [ 'null', 'string' ], default => undef });
my $v2 = $json->encode({ type => 'record', name => 'Event', namespace => 'sc', fields => \@v2_fields });
my @v3_fields = grep { $_->{name} ne 'tags' && $_->{name} ne 'kind' } @v2_fields;
$_ = { name => 'qty', type => 'long' } for grep { $_->{name} eq 'qty' } @v3_fields;
my $v3 = $json->encode({ type => 'record', name => 'Event', namespace => 'sc', fields => \@v3_fields });
my $p2 = sc_registry_produce($topic, format => 'avro', schema => $v2, records => records(600, 200, 2));
my $p3 = sc_registry_produce($topic, format => 'avro', schema => $v3, records => records(800, 200, 3));
isnt($p2->{schema_ids}[0], $id1, 'v2 has an id of its own');
is(q1("SELECT streamcube_wait('av', '60 s')"), 't', 'the evolved messages are consumed');
is(q1("SELECT count(*) FILTER (WHERE user_id < 1600 AND extra IS NULL AND kind IS NOT NULL), "
		  . "count(*) FILTER (WHERE user_id BETWEEN 1600 AND 1799 AND extra = 'e' || (user_id - 1000) AND tags IS NOT NULL), "
		  . "count(*) FILTER (WHERE user_id >= 1800 AND extra IS NOT NULL AND tags IS NULL AND kind IS NULL "
		  . "                 AND qty = 3000000000 + (user_id - 1000)) FROM av"),
	'600|200|200', 'each message under its own writer schema: v1 without extra, v2 with it, v3 without tags and kind, qty a long');

# ---------------------------------------------------------------------
# 3. a crash
# ---------------------------------------------------------------------
$node->stop('immediate');
$node->start;
is(q1("SELECT streamcube_wait('av', '120 s')"), 't', 'consumed again after a crash');
is(q1("SELECT count(*), count(DISTINCT (_partition, _offset)), sum(user_id) FROM av"),
	'1000|1000|' . (1000 * 1000 + 999 * 1000 / 2), 'after the crash: every message once');

# ---------------------------------------------------------------------
# 4. the registry down
# ---------------------------------------------------------------------
my $scratch_known = sc_topic('avro_known');
my $scratch_new = sc_topic('avro_new');
sc_create_topic($scratch_known, 3);
sc_create_topic($scratch_new, 3);
sc_registry_produce($scratch_known, format => 'avro', schema => $v3, subject => "$topic-value",
	records => records(1000, 300, 3));
my @v4_fields = (@v3_fields, { name => 'note', type => [ 'null', 'string' ], default => undef });
my $v4 = $json->encode({ type => 'record', name => 'Event', namespace => 'sc', fields => \@v4_fields });
my $p4 = sc_registry_produce($scratch_new, format => 'avro', schema => $v4, subject => "$topic-value",
	records => records(1300, 300, 3));

sc_registry_stop();
$node->restart;
is(sc_kafka_raw('copy', $scratch_known, $topic, 300), 300, 'with the registry down: 300 messages of a known id');
is(q1("SELECT streamcube_wait('av', '60 s')"), 't', 'a restart with the registry down goes on for the ids already seen');
is(q1("SELECT count(*) FROM av"), 1300, '... all of them');

is(sc_kafka_raw('copy', $scratch_new, $topic, 300), 300, 'then 300 messages of an id the cube has not seen');
my $t0 = time;
my $waiting = 0;
while (time - $t0 < 30)
{
	$waiting ||= q1("SELECT count(*) FROM streamcube.consumers WHERE cube = 'av'::regclass "
		  . "AND last_error LIKE '%schema registry%does not answer%schema id $p4->{schema_ids}[0]%'");
	sleep(1);
}
ok($waiting, 'last_error says the registry does not answer, naming the id');
is(q1("SELECT count(*) FROM av"), 1300, 'for 30 s the messages of the new id wait');
is(q1("SELECT count(*) FROM streamcube.dead_letters"), 0, '... and none is a dead letter');
is(q1("SELECT state FROM streamcube.consumers WHERE cube = 'av'::regclass"), 'running', 'the receiver keeps running');
sc_registry_start();
is(q1("SELECT streamcube_wait('av', '120 s')"), 't', 'the registry is back: consumed');
is(q1("SELECT count(*), count(DISTINCT (_partition, _offset)), count(*) FILTER (WHERE user_id >= 2300) FROM av"),
	'1600|1600|300', 'nothing lost, nothing twice');
is(q1("SELECT count(*) FROM streamcube.dead_letters"), 0, 'no dead letters');

# ---------------------------------------------------------------------
# 5. bad messages
# ---------------------------------------------------------------------
sc_kafka_raw('raw', $topic, '000001869f0102', '7b7d', '00' . sprintf('%08x', $id1) . '02');
is(q1("SELECT streamcube_wait('av', '60 s')"), 't', 'bad messages passed');
my @errors = split /\n/, q1("SELECT error FROM streamcube.dead_letters WHERE cube = 'av'::regclass ORDER BY \"offset\"");
is(scalar(@errors), 3, 'three dead letters');
like($errors[0], qr/schema id 99999 does not exist in the schema registry/, 'an id the registry does not have');
like($errors[1], qr/not in the Confluent wire format/, 'a message that is not framed');
like($errors[2], qr/invalid Avro record \(schema id $id1\)/, 'a truncated record');
is(q1("SELECT count(*) FROM av"), 1600, 'no row from them');

# a field whose type cannot become its column's: every message of that schema
my @v5_fields = map { $_->{name} eq 'qty' ? { name => 'qty', type => 'boolean' } : $_ } @v3_fields;
my $v5 = $json->encode({ type => 'record', name => 'Event', namespace => 'sc', fields => \@v5_fields });
my @r5 = map { { %$_, qty => JSON::PP::true } } @{ records(3000, 2, 3) };
my $p5 = sc_registry_produce($topic, format => 'avro', schema => $v5, subject => "$topic-wrong", records => \@r5);
is(q1("SELECT streamcube_wait('av', '60 s')"), 't', 'messages of a misfit schema passed');
is(q1("SELECT count(*) FROM streamcube.dead_letters WHERE cube = 'av'::regclass "
		  . "AND error = 'schema id $p5->{schema_ids}[0]: field \"qty\" (boolean) cannot become column \"qty\" (bigint)'"),
	2, 'a field that cannot become its column: dead letters naming the schema id, the field and the column');
is(q1("SELECT count(*) FROM av"), 1600, 'no row from them either');

# ---------------------------------------------------------------------
# 6. registry settings
# ---------------------------------------------------------------------
for my $url ('file:///etc/passwd', 'ftp://127.0.0.1/x', 'gopher://127.0.0.1/', 'http://user:pw@127.0.0.1/')
{
	my ($rc, $out, $err) = $node->psql('postgres',
		"SELECT streamcube_alter_cluster('k', properties => '{\"schema.registry.url\": \"$url\"}')",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/22023.*invalid property "schema.registry.url"/s, "schema.registry.url $url is refused");
}
q1("CREATE ROLE av_admin LOGIN IN ROLE streamcube_admin");
q1("SET ROLE av_admin; SELECT streamcube_add_cluster('k2', '$ENV{SC_KAFKA}', "
	  . "'{\"schema.registry.url\": \"$ENV{SC_REGISTRY}\", \"schema.registry.basic.auth.user.info\": \"reader:s3cret\"}')");
is(q1("SELECT properties->>'schema.registry.basic.auth.user.info' FROM streamcube.kafka_clusters WHERE name = 'k2'"),
	'********', 'the registry credentials are masked');
q1("CREATE ROLE av_user LOGIN");
my ($rc, $out, $err) = $node->psql('postgres',
	"SET ROLE av_user; SELECT streamcube_alter_cluster('k2', properties => '{\"schema.registry.basic.auth.user.info\": \"x:y\"}')");
like($err, qr/permission denied/, 'a plain role may not set them');
($rc, $out, $err) = $node->psql('postgres',
	"SET ROLE av_admin; SELECT streamcube_alter_cluster('k2', properties => '{\"schema.registry.ssl.ca.location\": \"/etc/passwd\"}')");
like($err, qr/permission denied to set property "schema.registry.ssl.ca.location"/,
	'a CA file the server would read is for superusers (and pg_read_server_files) only');
# (log_statement = all logs the statement that set it, as for any secret)
is(scalar(grep { /s3cret/ && !/ LOG:  statement: / } split /\n/, slurp_file($node->logfile)), 0,
	'the password is in no log line but the logged statement that set it');
($rc, $out, $err) = $node->psql('postgres', "SELECT streamcube_check_cluster('k2')");
unlike($err, qr/s3cret/, 'nor in what streamcube_check_cluster says');

# checks at creation against the subject's latest schema (v4)
for my $case ([ 'ts timestamptz, nothere int', qr/42703.*column "nothere" of cube "chk" has no field in the latest schema of subject/s ],
	[ 'ts timestamptz, "user" int', qr/42804.*field "user" \(record\) cannot become column "user" \(integer\)/s ])
{
	($rc, $out, $err) = $node->psql('postgres',
		"SELECT streamcube_create_cube('chk', 'k', '$topic', '$case->[0]', 'ts', '1 hour', 'avro', "
		  . "'{\"subject\": \"$topic-value\"}')", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, $case->[1], "creation checks the subject's latest schema: $case->[0]");
}
($rc, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_create_cube('chk', 'k', '$topic', 'ts timestamptz', 'ts', '1 hour', 'avro', "
	  . "'{\"subject\": \"no-such-subject\"}')", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/42704.*subject "no-such-subject" does not exist/s, 'a subject the registry does not have');
is(q1("SELECT streamcube_create_cube('chk', 'k', '$topic', 'ts timestamptz, country text, note text', 'ts', '1 hour', 'avro', "
		  . "'{\"subject\": \"$topic-value\"}') IS NOT NULL"), 't', 'columns the latest schema feeds: created');

# an https registry, with its CA (a file the server reads: superusers)
q1("SELECT streamcube_add_cluster('k3', '$ENV{SC_KAFKA}', "
	  . "'{\"schema.registry.url\": \"$ENV{SC_REGISTRY_HTTPS}\", \"schema.registry.ssl.ca.location\": \"$ENV{SC_REGISTRY_CA_PEM}\"}')");
($rc, $out, $err) = $node->psql('postgres', "SELECT count(*) > 0 FROM streamcube_check_cluster('k3')");
is($out, 't', 'streamcube_check_cluster reaches an https registry with its CA');
q1("SELECT streamcube_alter_cluster('k3', properties => '{\"schema.registry.ssl.ca.location\": null}')");
($rc, $out, $err) = $node->psql('postgres', "SELECT count(*) FROM streamcube_check_cluster('k3')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/08000.*schema registry of Kafka cluster "k3" refuses the request/s,
	'without the CA the certificate is refused, and streamcube_check_cluster says so');

# ---------------------------------------------------------------------
# 7. JSON Schema framing, read by format json
# ---------------------------------------------------------------------
my $jtopic = sc_topic('avro_json');
sc_create_topic($jtopic, 1);
my $jschema = '{"type": "object", "properties": {"ts": {"type": "string"}, "qty": {"type": "integer"}}}';
my $ts0 = q1("SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')");
sc_registry_produce($jtopic, format => 'json', schema => $jschema,
	records => [ map { { ts => $ts0, qty => $_ } } 1 .. 50 ]);
q1("SELECT streamcube_create_cube('js', 'k', '$jtopic', 'ts timestamptz, qty int', 'ts', '1 hour', 'json')");
is(q1("SELECT streamcube_wait('js', '60 s')"), 't', 'format json over JSON Schema framed messages');
is(q1("SELECT count(*), sum(qty) FROM js"), '50|1275', '... read past the five leading bytes');
is(q1("SELECT count(*) FROM streamcube.dead_letters WHERE cube = 'js'::regclass"), 0, '... no dead letters');

# ---------------------------------------------------------------------
# 8. bare records of the cube's own schema
# ---------------------------------------------------------------------
my $btopic = sc_topic('avro_bare');
sc_create_topic($btopic, 1);
my $bare_schema = '{"type": "record", "name": "B", "fields": [{"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}}, {"name": "v", "type": "long"}]}';
# zig-zag varints: ts = base_ms * 1000 micros, v = 21 (0x2a)
sub zigzag
{
	my ($n) = @_;
	my $z = $n >= 0 ? 2 * $n : -2 * $n - 1;
	my $h = '';
	while ($z >= 0x80) { $h .= sprintf('%02x', ($z & 0x7f) | 0x80); $z >>= 7; }
	return $h . sprintf('%02x', $z);
}
sc_kafka_raw('raw', $btopic, map { zigzag($base_ms * 1000 + $_) . zigzag($_) } 1 .. 20);
q1("SELECT streamcube_create_cube('bare', 'k', '$btopic', 'ts timestamptz, v bigint', 'ts', '1 hour', 'avro', "
	  . "'{\"schema\": $bare_schema}')");
is(q1("SELECT streamcube_wait('bare', '60 s')"), 't', 'bare Avro records of option schema');
is(q1("SELECT count(*), sum(v), min(ts) = to_timestamp($base_ms / 1000.0) + interval '1 microsecond' FROM bare"),
	'20|210|t', '... decoded with it (timestamp-micros to the microsecond)');

# ---------------------------------------------------------------------
# 9. every other mapping rule, on one bare record made by hand
# ---------------------------------------------------------------------
my $ltopic = sc_topic('avro_types');
sc_create_topic($ltopic, 1);
my $types_schema = $json->encode({ type => 'record', name => 'T', fields => [
		{ name => 'ts', type => { type => 'long', logicalType => 'timestamp-millis' } },
		{ name => 'd', type => { type => 'int', logicalType => 'date' } },
		{ name => 'price', type => { type => 'bytes', logicalType => 'decimal', precision => 10, scale => 2 } },
		{ name => 'id', type => { type => 'string', logicalType => 'uuid' } },
		{ name => 'raw', type => 'bytes' },
		{ name => 'tod', type => { type => 'long', logicalType => 'time-micros' } },
		{ name => 'attrs', type => { type => 'map', values => 'long' } },
		{ name => 'ok', type => 'boolean' },
		{ name => 'f', type => 'float' },
		{ name => 'h', type => { type => 'fixed', name => 'H', size => 2 } } ] });
sub avro_str { my ($s) = @_; return zigzag(length($s)) . unpack('H*', $s); }
my $rec = zigzag($base_ms)                        # ts
  . zigzag(20423)                                  # 2025-12-01
  . zigzag(2) . 'cf2c'                              # -12500 unscaled: -125.00
  . avro_str('123e4567-e89b-12d3-a456-426614174000')
  . zigzag(3) . '00ff10'                            # bytes
  . zigzag((13 * 3600 + 14 * 60 + 15) * 1000000 + 500)   # 13:14:15.0005
  . zigzag(2) . avro_str('a') . zigzag(1) . avro_str('b') . zigzag(-2) . '00'    # {"a": 1, "b": -2}
  . '01'                                            # true
  . '0000c03f'                                      # 1.5f
  . 'beef';                                         # fixed
sc_kafka_raw('raw', $ltopic, $rec);
q1("SELECT streamcube_create_cube('types', 'k', '$ltopic', "
	  . "'ts timestamptz, d date, price numeric, id uuid, raw bytea, tod time, attrs jsonb, ok boolean, f real, h bytea', "
	  . "'ts', '1 hour', 'avro', '{\"schema\": $types_schema}')");
is(q1("SELECT streamcube_wait('types', '60 s')"), 't', 'a record of every other logical and complex type');
is(q1("SELECT d, price, id, raw, tod, attrs, ok, f, h FROM types"),
	"2025-12-01|-125.00|123e4567-e89b-12d3-a456-426614174000|\\x00ff10|13:14:15.0005|{\"a\": 1, \"b\": -2}|t|1.5|\\xbeef",
	'date, decimal (exact, its scale), uuid, bytes, time-micros, map as jsonb, boolean, float, fixed');

# ---------------------------------------------------------------------
# 10. a column added to the table later: filled from the messages whose
#     writer schema has the field (the known ids are planned again)
# ---------------------------------------------------------------------
q1("ALTER TABLE av ADD COLUMN region text");
my @v6_fields = (@v3_fields, { name => 'region', type => 'string' });
my $v6 = $json->encode({ type => 'record', name => 'Event', namespace => 'sc', fields => \@v6_fields });
sc_registry_produce($topic, format => 'avro', schema => $v6,
	records => [ map { { %$_, region => "r$_->{user}{id}" } } @{ records(4000, 50, 3) } ]);
sc_registry_produce($topic, format => 'avro', schema => $v3, records => records(4050, 50, 3));
is(q1("SELECT streamcube_wait('av', '60 s')"), 't', 'consumed after ALTER TABLE ADD COLUMN');
is(q1("SELECT count(*) FILTER (WHERE region = 'r' || user_id), count(*) FILTER (WHERE user_id >= 5050 AND region IS NULL), "
		  . "count(*) FILTER (WHERE user_id < 5000 AND region IS NOT NULL) FROM av"),
	'50|50|0', 'the new column is filled from the new field, NULL under the schemas without it');
is(q1("SELECT count(*) FROM streamcube.dead_letters WHERE cube = 'av'::regclass AND error LIKE '%not known%'"), 0,
	'no message is a dead letter for the change of the table');

$node->stop;
done_testing();
