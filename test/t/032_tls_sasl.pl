
# The security examples of docs/configuration.md against a real broker:
# the test broker's SASL_SSL listener (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512,
# server certificate from a throwaway CA) and its SSL listener (client
# certificate required), with certificates and keys given inline as
# ssl.ca.pem, ssl.certificate.pem and ssl.key.pem, in the three ways the
# docs show to get real newlines into them:
#
#  - psql variables read from the files (\set ca `cat ca.pem`) and
#    jsonb_build_object: SASL_SSL + PLAIN;
#  - the PEM pasted between dollar quotes: SASL_SSL + SCRAM-SHA-512;
#  - a JSON text with the newlines escaped as \n: SASL_SSL + SCRAM-SHA-256;
#  - pg_read_file() on the server: SSL with a client certificate.
#
# Each cluster gets a cube on one topic; every cube holds every message
# exactly once.  Then what a user meets when something is wrong, with the
# texts streamcube shows:
#
#  - a wrong password: streamcube_check_cluster and streamcube_create_cube
#    fail with the broker's SASL error; a running cube whose password is
#    changed to a wrong one shows it in streamcube.consumers.last_error and
#    consumes nothing until the password is right again;
#  - SASL_SSL without sasl.mechanisms is GSSAPI (librdkafka's default):
#    refused to an admin (it runs kinit), and for a superuser librdkafka
#    asks for a Kerberos keytab;
#  - PEM that does not parse (the "..." of a placeholder, a PEM whose line
#    breaks were lost, a damaged or mismatched key) fails at
#    streamcube_add_cluster; a certificate without its key, or the wrong
#    CA, fails at the first connection;
#
# and no password or private key shows anywhere: not in the properties of
# streamcube.clusters, streamcube.kafka_clusters, streamcube.config_log,
# streamcube.consumers or the server log.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;

sc_require_env();
for my $var (qw(SC_KAFKA_SASL_SSL SC_KAFKA_SSL SC_KAFKA_CA_PEM
	SC_KAFKA_CLIENT_CERT_PEM SC_KAFKA_CLIENT_KEY_PEM))
{
	plan skip_all => "$var is not set (test/run-tests sets it)"
	  unless $ENV{$var};
}

my ($ca_file, $cert_file, $key_file) = @ENV{
	qw(SC_KAFKA_CA_PEM SC_KAFKA_CLIENT_CERT_PEM SC_KAFKA_CLIENT_KEY_PEM)};
my $ca = slurp_file($ca_file);
my $key = slurp_file($key_file);
like($ca, qr/\A-----BEGIN CERTIFICATE-----\n.*\n-----END CERTIFICATE-----\n\z/s,
	'the test CA is a PEM certificate');
# The lines of the private key between its BEGIN and END lines: none may
# show anywhere.
my @key_lines = grep { !/^-----/ && $_ ne '' } split /\n/, $key;
ok(scalar @key_lines, 'the client key has a body');

# Messages of a few hours ago: neither too early (early_rejection_period)
# nor in another day's window whatever the clock.
my $ts = int(time / 3600) * 3600 - 6 * 3600;
# Statements hold passwords and keys: log_statement = all (the test
# framework's default) would write them to the server log, which is
# checked below for what streamcube itself writes.
my $node = sc_node('tls', 'log_statement = none');
my $topic = sc_topic('tls');
sc_create_topic($topic, 2);
sc_produce($topic, count => 300, 'start-ts' => $ts, seed => 1);

# The psql variables of the docs' example: the files as they are, real
# newlines included.
my $vars = "\\set ca `cat '$ca_file'`\n"
  . "\\set cert `cat '$cert_file'`\n"
  . "\\set key `cat '$key_file'`\n";

sub create_cube
{
	my ($cube, $cluster) = @_;
	$node->safe_psql('postgres',
		"SELECT streamcube_create_cube('$cube', '$cluster', '$topic', "
		  . "'ts timestamptz, country text, device text, amount numeric, qty int', "
		  . "'ts', '1 hour', 'json')");
	return;
}

# ---------------------------------------------------------------- clusters

# SASL/PLAIN over TLS: the broker's certificate is checked against the CA
# (and its name, 127.0.0.1, against the certificate's subjectAltName).
$node->safe_psql('postgres', $vars . <<"SQL");
SELECT streamcube_add_cluster('plain_tls', '$ENV{SC_KAFKA_SASL_SSL}', jsonb_build_object(
    'security.protocol', 'SASL_SSL',
    'sasl.mechanisms',   'PLAIN',
    'sasl.username',     'alice',
    'sasl.password',     'alice-secret',
    'ssl.ca.pem',        :'ca'));
SQL
create_cube('ev_plain', 'plain_tls');

# SCRAM-SHA-512 over TLS, the certificate pasted into the statement
# between dollar quotes, line breaks and all.
$node->safe_psql('postgres', <<"SQL");
SELECT streamcube_add_cluster('scram512', '$ENV{SC_KAFKA_SASL_SSL}', jsonb_build_object(
    'security.protocol', 'SASL_SSL',
    'sasl.mechanisms',   'SCRAM-SHA-512',
    'sasl.username',     'bob',
    'sasl.password',     'bob-secret',
    'ssl.ca.pem',        \$pem\$$ca\$pem\$));
SQL
create_cube('ev_scram512', 'scram512');

# SCRAM-SHA-256 over TLS, the properties as one JSON text: in a JSON
# string a line break is written \n (standard_conforming_strings keeps the
# backslash for JSON to read).
(my $ca_json = $ca) =~ s/\n/\\n/g;
$node->safe_psql('postgres', <<"SQL");
SELECT streamcube_add_cluster('scram256', '$ENV{SC_KAFKA_SASL_SSL}', '{
    "security.protocol": "SASL_SSL",
    "sasl.mechanisms": "SCRAM-SHA-256",
    "sasl.username": "alice",
    "sasl.password": "alice-secret",
    "ssl.ca.pem": "$ca_json"
}');
SQL
create_cube('ev_scram256', 'scram256');

# TLS with a client certificate (the broker requires one), the files read
# by the server (a superuser, or a member of pg_read_server_files).
$node->safe_psql('postgres', <<"SQL");
SELECT streamcube_add_cluster('mtls', '$ENV{SC_KAFKA_SSL}', jsonb_build_object(
    'security.protocol',   'SSL',
    'ssl.ca.pem',          pg_read_file('$ca_file'),
    'ssl.certificate.pem', pg_read_file('$cert_file'),
    'ssl.key.pem',         pg_read_file('$key_file')));
SQL
create_cube('ev_mtls', 'mtls');

my @cubes = qw(ev_plain ev_scram512 ev_scram256 ev_mtls);

is( $node->safe_psql('postgres',
		"SELECT name, properties->>'security.protocol', "
		  . "coalesce(properties->>'sasl.mechanisms', '-'), "
		  . "coalesce(properties->>'sasl.password', '-'), "
		  . "coalesce(properties->>'ssl.key.pem', '-'), "
		  . "left(properties->>'ssl.ca.pem', 27) "
		  . "FROM streamcube.kafka_clusters WHERE name <> 'k' ORDER BY name"),
	"mtls|SSL|-|-|********|-----BEGIN CERTIFICATE-----\n"
	  . "plain_tls|SASL_SSL|PLAIN|********|-|-----BEGIN CERTIFICATE-----\n"
	  . "scram256|SASL_SSL|SCRAM-SHA-256|********|-|-----BEGIN CERTIFICATE-----\n"
	  . "scram512|SASL_SSL|SCRAM-SHA-512|********|-|-----BEGIN CERTIFICATE-----",
	'streamcube.kafka_clusters shows the four clusters, password and key masked');
# psql's backticks drop the file's last line break, which PEM does not need.
(my $ca_trimmed = $ca) =~ s/\n\z//;
is( $node->safe_psql('postgres',
		"SELECT properties->>'ssl.ca.pem' = \$\$$ca_trimmed\$\$ FROM streamcube.clusters WHERE name = 'plain_tls'"),
	't', 'the CA is stored as read, with its line breaks');
is( $node->safe_psql('postgres',
		"SELECT properties->>'ssl.ca.pem' = \$\$$ca\$\$ FROM streamcube.clusters WHERE name = 'scram256'"),
	't', 'and from the JSON text: each \\n became a line break');

sc_produce($topic, count => 200, 'start-ts' => $ts + 300, seed => 2);
my $k = sc_kafka_contents($topic);
is($k->{good}, 500, 'Kafka holds the 500 messages produced');
for my $cube (@cubes)
{
	is($node->safe_psql('postgres', "SELECT streamcube_wait('$cube', '60 s')"),
		't', "$cube consumed its topic");
	is($node->safe_psql('postgres', "SELECT count(*) FROM $cube"),
		'500', "$cube holds the 500 messages");
}
is( $node->safe_psql('postgres',
		"SELECT string_agg(format('%s %s %s', cube, state, coalesce(last_error, '-')), ', ' ORDER BY cube::text) "
		  . "FROM streamcube.consumers WHERE cube::text LIKE 'ev_%'"),
	'ev_mtls running -, ev_plain running -, ev_scram256 running -, ev_scram512 running -',
	'the four receivers run without an error');

# ---------------------------------------------------------------- wrong password

# Adding a cluster connects to nothing: a wrong password shows at the
# first use.
$node->safe_psql('postgres', $vars . <<"SQL");
SELECT streamcube_add_cluster('badpw', '$ENV{SC_KAFKA_SASL_SSL}', jsonb_build_object(
    'security.protocol', 'SASL_SSL',
    'sasl.mechanisms',   'SCRAM-SHA-512',
    'sasl.username',     'alice',
    'sasl.password',     'hunter2-wrong-scram',
    'ssl.ca.pem',        :'ca'));
SQL
my $scram_refused = qr/SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512/;
my ($rc, $out, $err) = $node->psql('postgres',
	"SELECT * FROM streamcube_check_cluster('badpw')");
like($err,
	qr/ERROR:  could not get metadata from Kafka cluster "badpw": Local: Broker transport failure\n.*DETAIL:  Last client error: sasl_ssl:\/\/\Q$ENV{SC_KAFKA_SASL_SSL}\E\/bootstrap: $scram_refused/s,
	'a wrong password: streamcube_check_cluster says the broker refused it');
like($err, qr/HINT:  The brokers refused the connection's security: check the cluster's SASL credentials/,
	'and the hint speaks of credentials, not of reaching the brokers');
($rc, $out, $err) = $node->psql('postgres',
	"SELECT streamcube_create_cube('ev_badpw', 'badpw', '$topic', 'ts timestamptz', 'ts', '1 hour', 'json')");
like($err, $scram_refused, 'and streamcube_create_cube says the same');

# A running cube whose password becomes wrong.
my $log = -s $node->logfile;
$node->safe_psql('postgres',
	"SELECT streamcube_alter_cluster('scram512', properties => '{\"sasl.password\": \"hunter2-wrong-alter\"}')");
ok( $node->poll_query_until('postgres',
		"SELECT last_error ~ 'SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512' "
		  . "FROM streamcube.consumers WHERE cube = 'ev_scram512'::regclass"),
	'a running cube given a wrong password shows the SASL error in streamcube.consumers.last_error');
like( $node->safe_psql('postgres',
		"SELECT last_error FROM streamcube.consumers WHERE cube = 'ev_scram512'::regclass"),
	qr/^could not get metadata from Kafka cluster "scram512": Local: Broker transport failure \(Last client error: sasl_ssl:\/\/\Q$ENV{SC_KAFKA_SASL_SSL}\E\/bootstrap: $scram_refused/,
	'last_error names the cluster and the broker\'s answer');
like(sc_log_since($node, $log), qr/ERROR:  could not get metadata from Kafka cluster "scram512".*\n.*DETAIL:  Last client error: .*$scram_refused/,
	'the server log has the same error');
sc_produce($topic, count => 100, 'start-ts' => $ts + 500, seed => 3);
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev_plain', '60 s')"),
	't', 'the other cubes consume the new messages');
is($node->safe_psql('postgres', 'SELECT count(*) FROM ev_scram512'),
	'500', 'the cube with the wrong password consumes nothing');
$node->safe_psql('postgres',
	"SELECT streamcube_alter_cluster('scram512', properties => '{\"sasl.password\": \"bob-secret\"}')");

$k = sc_kafka_contents($topic);
is($k->{good}, 600, 'Kafka holds the 600 messages produced');
for my $cube (@cubes)
{
	is($node->safe_psql('postgres', "SELECT streamcube_wait('$cube', '60 s')"),
		't', "$cube caught up");
	sc_check_exact($node, $cube, $k, $cube);
}

# ---------------------------------------------------------------- no mechanism

# SASL_SSL without sasl.mechanisms is librdkafka's default mechanism,
# GSSAPI (Kerberos), which runs kinit: an admin may not set it ...
$node->safe_psql('postgres',
	'CREATE ROLE ops LOGIN; GRANT streamcube_admin TO ops');
my $nomech = "SELECT streamcube_add_cluster('nomech', '$ENV{SC_KAFKA_SASL_SSL}', jsonb_build_object(
    'security.protocol', 'SASL_SSL',
    'sasl.username',     'alice',
    'sasl.password',     'alice-secret-nomech',
    'ssl.ca.pem',        :'ca'))";
($rc, $out, $err) = $node->psql('postgres',
	$vars . "SET ROLE ops;\n$nomech;\n");
like($err,
	qr/ERROR:  permission denied to use SASL mechanism GSSAPI in Kafka cluster "nomech"\nDETAIL:  GSSAPI \(librdkafka's default SASL mechanism\) makes the server run a program \(the Kerberos kinit command\); only superusers and members of pg_execute_server_program may set it\./,
	'SASL_SSL without a mechanism is GSSAPI: refused to an admin');
# ... and a superuser gets librdkafka's word: the default kinit command
# needs a keytab.
($rc, $out, $err) = $node->psql('postgres', $vars . "$nomech;\n");
like($err,
	qr/ERROR:  invalid properties for Kafka cluster "nomech": Invalid sasl.kerberos.kinit.cmd value: Property not available: "sasl.kerberos.keytab"/,
	'for a superuser, librdkafka asks for a Kerberos keytab');
is($node->safe_psql('postgres', "SELECT count(*) FROM streamcube.clusters WHERE name = 'nomech'"),
	'0', 'the cluster is not stored');

# ---------------------------------------------------------------- bad PEM

sub add_fails
{
	my ($name, $props, $want, $label) = @_;
	my ($rc, $out, $err) = $node->psql('postgres',
		$vars . "SELECT streamcube_add_cluster('$name', '$ENV{SC_KAFKA_SSL}', jsonb_build_object($props));\n");
	like($err, $want, $label);
	return;
}

# The placeholder of the old example.
my ($rc2, $out2, $err2) = $node->psql('postgres',
	"SELECT streamcube_add_cluster('dots', '$ENV{SC_KAFKA_SASL_SSL}', '{\"security.protocol\": \"SASL_SSL\", "
	  . "\"sasl.mechanisms\": \"PLAIN\", \"sasl.username\": \"alice\", \"sasl.password\": \"alice-secret\", "
	  . "\"ssl.ca.pem\": \"-----BEGIN CERTIFICATE-----\\n...\\n-----END CERTIFICATE-----\"}')");
like($err2,
	qr/ERROR:  invalid properties for Kafka cluster "dots": failed to read certificate #0 from ssl.ca.pem: not in PEM format\?: error:[0-9A-F]+:PEM routines::bad base64 decode/,
	'a placeholder "..." in place of the certificate: bad base64 decode, at streamcube_add_cluster');
add_fails('oneline',
	"'security.protocol', 'SSL', 'ssl.ca.pem', replace(:'ca', E'\\n', ' ')",
	qr/ERROR:  invalid properties for Kafka cluster "oneline": failed to read certificate #0 from ssl.ca.pem: not in PEM format\?: error:[0-9A-F]+:PEM routines::no start line/,
	'a PEM whose line breaks became spaces: no start line');
add_fails('badkey',
	"'security.protocol', 'SSL', 'ssl.ca.pem', :'ca', 'ssl.certificate.pem', :'cert', "
	  . "'ssl.key.pem', replace(:'key', E'\\n', E'\\n!')",
	qr/ERROR:  invalid properties for Kafka cluster "badkey": ssl.key.pem failed: not in PEM format\?/,
	'a damaged key: ssl.key.pem failed');
add_fails('certaskey',
	"'security.protocol', 'SSL', 'ssl.ca.pem', :'ca', 'ssl.certificate.pem', :'cert', 'ssl.key.pem', :'ca'",
	qr/ERROR:  invalid properties for Kafka cluster "certaskey": ssl.key.pem failed: not in PEM format\?/,
	'a certificate in place of the key: ssl.key.pem failed');
my $other_key = slurp_file("$ENV{SC_KAFKA_DIR}/tls/broker.key");
add_fails('mismatch',
	"'security.protocol', 'SSL', 'ssl.ca.pem', :'ca', 'ssl.certificate.pem', :'cert', "
	  . "'ssl.key.pem', \$k\$$other_key\$k\$",
	qr/ERROR:  invalid properties for Kafka cluster "mismatch": ssl.key.pem failed: error:[0-9A-F]+:x509 certificate routines::key values mismatch/,
	'the key of another certificate: key values mismatch');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.clusters WHERE name IN ('dots', 'oneline', 'badkey', 'certaskey', 'mismatch')"),
	'0', 'none of them is stored');

# Accepted, but the first connection fails.
$node->safe_psql('postgres', $vars . <<"SQL");
SELECT streamcube_add_cluster('nokey', '$ENV{SC_KAFKA_SSL}', jsonb_build_object(
    'security.protocol', 'SSL', 'ssl.ca.pem', :'ca', 'ssl.certificate.pem', :'cert'));
SELECT streamcube_add_cluster('noclientcert', '$ENV{SC_KAFKA_SSL}', jsonb_build_object(
    'security.protocol', 'SSL', 'ssl.ca.pem', :'ca'));
SELECT streamcube_add_cluster('wrongca', '$ENV{SC_KAFKA_SASL_SSL}', jsonb_build_object(
    'security.protocol', 'SASL_SSL', 'sasl.mechanisms', 'PLAIN',
    'sasl.username', 'alice', 'sasl.password', 'alice-secret', 'ssl.ca.pem', :'cert'));
SQL
for my $c (
	[ 'nokey', 'a certificate without its key' ],
	[ 'noclientcert', 'no client certificate where the broker requires one' ])
{
	($rc, $out, $err) = $node->psql('postgres',
		"SET streamcube.kafka_timeout = '3s'; SELECT * FROM streamcube_check_cluster('$c->[0]')");
	like($err,
		qr/ERROR:  could not get metadata from Kafka cluster "$c->[0]": Local: Broker transport failure\n.*DETAIL:  Last client error: ssl:\/\/\Q$ENV{SC_KAFKA_SSL}\E\/bootstrap: .*SSL routines::.*alert bad certificate/s,
		"$c->[1]: the broker refuses the handshake (bad certificate)");
	like($err, qr/HINT:  The brokers refused the connection's security/,
		"$c->[1]: the hint speaks of certificates");
}
($rc, $out, $err) = $node->psql('postgres',
	"SET streamcube.kafka_timeout = '3s'; SELECT * FROM streamcube_check_cluster('wrongca')");
like($err,
	# (librdkafka words its first report of it a little differently)
	qr/DETAIL:  Last client error: sasl_ssl:\/\/\Q$ENV{SC_KAFKA_SASL_SSL}\E\/bootstrap: (SSL handshake failed: )?error:[0-9A-F]+:SSL routines::certificate verify failed/,
	'a CA that did not sign the broker\'s certificate: certificate verify failed');

# ---------------------------------------------------------------- secrets

my @secrets = ('alice-secret', 'bob-secret', 'hunter2-wrong-scram',
	'hunter2-wrong-alter', @key_lines);
my $secret_re = join('|', map { quotemeta } @secrets);
is( $node->safe_psql('postgres',
		"SELECT string_agg(name, ', ' ORDER BY name) FROM streamcube.clusters "
		  . "WHERE properties::text ~ '$secret_re' OR properties::text LIKE '%PRIVATE KEY%'"),
	'', 'no password or private key in the visible properties of streamcube.clusters');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.kafka_clusters "
		  . "WHERE properties::text ~ '$secret_re' OR properties::text LIKE '%PRIVATE KEY%'"),
	'0', 'nor in streamcube.kafka_clusters');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.config_log "
		  . "WHERE coalesce(old_value::text, '') || coalesce(new_value::text, '') ~ '$secret_re'"),
	'0', 'nor in streamcube.config_log');
is( $node->safe_psql('postgres',
		"SELECT string_agg(new_value->'properties'->>'sasl.password', ', ' ORDER BY log_id) "
		  . "FROM streamcube.config_log WHERE cluster = 'scram512'"),
	'********, ********', 'which journals both password changes, masked');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.consumers WHERE last_error ~ '$secret_re'"),
	'0', 'nor in streamcube.consumers');
my $server_log = sc_log_since($node, 0);
unlike($server_log, qr/$secret_re/, 'nor in the server log');
unlike($server_log, qr/PRIVATE KEY/, 'no key in the server log at all');

$node->stop;
done_testing();
