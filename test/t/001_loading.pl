# Loading rules: streamcube works only when the postmaster preloads it, and
# installs only in the database named by streamcube.database.
#
# One node, three lives: without streamcube in shared_preload_libraries (the
# extension refuses to load, with a hint), with it (CREATE EXTENSION refuses
# any database but streamcube.database, with a hint, and succeeds there),
# and with streamcube.database pointing elsewhere (the launcher follows);
# then a database in LATIN1 is refused and one in SQL_ASCII taken.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('loading');
$node->init;
$node->start;

# ---------------------------------------------------------------- not preloaded
my ($ret, $stdout, $stderr) = $node->psql('postgres', 'CREATE EXTENSION streamcube');
isnt($ret, 0, 'CREATE EXTENSION fails when streamcube is not preloaded');
like($stderr, qr/ERROR:  streamcube must be loaded via shared_preload_libraries/,
	'the error says streamcube must be preloaded');
like($stderr,
	qr/HINT:  Add streamcube to shared_preload_libraries in postgresql\.conf .*shared_preload_libraries = 'streamcube'.* and restart the server\./,
	'the hint says what to add and that a restart is needed');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_extension WHERE extname = 'streamcube'"),
	'0', 'no extension recorded');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_namespace WHERE nspname = 'streamcube'"),
	'0', 'no schema streamcube left behind');

($ret, $stdout, $stderr) = $node->psql('postgres', "LOAD 'streamcube'");
isnt($ret, 0, 'LOAD fails too');
like($stderr, qr/ERROR:  streamcube must be loaded via shared_preload_libraries/,
	'LOAD gives the same error');

is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'streamcube%'"),
	'0', 'no streamcube worker runs');
is($node->safe_psql('postgres', 'SELECT 42'), '42',
	'the session and the server are unharmed');

# ---------------------------------------------------------------- preloaded
$node->stop;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'streamcube'
streamcube.database = 'postgres'
});
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE other');

($ret, $stdout, $stderr) = $node->psql('other', 'CREATE EXTENSION streamcube');
isnt($ret, 0, 'CREATE EXTENSION fails outside streamcube.database');
like($stderr, qr/ERROR:  streamcube can only be installed in database "postgres"/,
	'the error names the database of streamcube.database');
like($stderr, qr/DETAIL:  The current database is "other"/,
	'the detail names the current database');
like($stderr,
	qr/HINT:  Connect to database "postgres", or set streamcube\.database = 'other' in postgresql\.conf and restart the server\./,
	'the hint says both ways out');
is($node->safe_psql('other',
		"SELECT count(*) FROM pg_namespace WHERE nspname = 'streamcube'"),
	'0', 'nothing left behind in the other database');
is($node->safe_psql('other',
		"SELECT count(*) FROM pg_roles WHERE rolname = 'streamcube_admin'"),
	'0', 'the refused install created no role');

($ret, $stdout, $stderr) = $node->psql('postgres', 'CREATE EXTENSION streamcube');
is($ret, 0, 'CREATE EXTENSION works in streamcube.database') or diag($stderr);
is($node->safe_psql('postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'streamcube'"),
	'0.4.0', 'extension 0.4.0 installed');
ok($node->poll_query_until('postgres',
		"SELECT datname FROM pg_stat_activity WHERE backend_type = 'streamcube launcher'",
		'postgres'),
	'the launcher runs in database postgres');

# ---------------------------------------------------------------- streamcube.database elsewhere
$node->append_conf('postgresql.conf', "streamcube.database = 'other'\n");
$node->restart;
ok($node->poll_query_until('postgres',
		"SELECT datname FROM pg_stat_activity WHERE backend_type = 'streamcube launcher'",
		'other'),
	'after a restart the launcher runs in the new streamcube.database');
($ret, $stdout, $stderr) = $node->psql('other', 'CREATE EXTENSION streamcube');
is($ret, 0, 'CREATE EXTENSION now works in database other') or diag($stderr);
($ret, $stdout, $stderr) = $node->psql('postgres', 'CREATE EXTENSION streamcube CASCADE');
# (already installed there earlier: the error is PostgreSQL's own)
like($stderr, qr/already exists/, 'postgres still has its earlier install');
$node->safe_psql('postgres', 'CREATE DATABASE third');
($ret, $stdout, $stderr) = $node->psql('third', 'CREATE EXTENSION streamcube');
like($stderr, qr/ERROR:  streamcube can only be installed in database "other"/,
	'a third database is refused with the new name');

# ---------------------------------------------------------------- upgrade
# 0.1.0 updated to 0.4.0 (through 0.2.0 and 0.3.0) has the same functions,
# all with a fixed search_path, and the same catalog columns as a fresh
# 0.4.0.
my $catalog_shape = q{
	SELECT string_agg(x, E'\n' ORDER BY x) FROM (
	  SELECT p.oid::regprocedure::text || ' ' || coalesce(array_to_string(p.proconfig, ','), '-') AS x
	  FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
	  WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'streamcube')
	  UNION ALL
	  SELECT c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
	  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	  WHERE c.relnamespace = 'streamcube'::regnamespace AND c.relkind IN ('r', 'v')) s};
my $fresh = $node->safe_psql('other', $catalog_shape);
$node->safe_psql('other', 'DROP EXTENSION streamcube');
$node->safe_psql('other', "CREATE EXTENSION streamcube VERSION '0.1.0'");
# A cluster stored by 0.1.0 under the second names of two properties.
$node->safe_psql('other',
	"INSERT INTO streamcube.clusters (name, bootstrap_servers, properties) VALUES "
	  . "('old', '127.0.0.1:1', '{\"sasl.mechanism\": \"PLAIN\", \"max.in.flight\": 3, \"client.id\": \"x\"}')");
$node->safe_psql('other', 'ALTER EXTENSION streamcube UPDATE');
is($node->safe_psql('other', "SELECT properties FROM streamcube.clusters WHERE name = 'old'"),
	'{"client.id": "x", "sasl.mechanisms": "PLAIN", "max.in.flight.requests.per.connection": 3}',
	'the update stores properties under the names librdkafka knows them by');
$node->safe_psql('other', "DELETE FROM streamcube.clusters WHERE name = 'old'");
is($node->safe_psql('other',
		"SELECT extversion FROM pg_extension WHERE extname = 'streamcube'"),
	'0.4.0', '0.1.0 updates to 0.4.0');
is($node->safe_psql('other', $catalog_shape), $fresh,
	'the updated extension has the functions, settings and columns of a fresh 0.4.0');

# ---------------------------------------------------------------- encoding
# Kafka's text is UTF-8: a database in LATIN1 would store é as Ã© without
# an error, so streamcube refuses to be installed there; SQL_ASCII stores
# the bytes as they come and is allowed.
$node->safe_psql('postgres',
	"CREATE DATABASE latin ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
$node->safe_psql('postgres',
	"CREATE DATABASE ascii ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
$node->append_conf('postgresql.conf', "streamcube.database = 'latin'\n");
$node->restart;
($ret, $stdout, $stderr) = $node->psql('latin', 'CREATE EXTENSION streamcube');
isnt($ret, 0, 'CREATE EXTENSION fails in a database in LATIN1');
like($stderr,
	qr/ERROR:  streamcube cannot be installed in database "latin" of encoding LATIN1/,
	'the error names the database and its encoding');
like($stderr, qr/DETAIL:  Kafka messages carry text in UTF-8/, 'the detail says why');
like($stderr, qr/HINT:  Install streamcube in a database created with ENCODING 'UTF8'/,
	'the hint says what to do');
is($node->safe_psql('latin',
		"SELECT count(*) FROM pg_namespace WHERE nspname = 'streamcube'"),
	'0', 'nothing left behind in the LATIN1 database');
$node->append_conf('postgresql.conf', "streamcube.database = 'ascii'\n");
$node->restart;
($ret, $stdout, $stderr) = $node->psql('ascii', 'CREATE EXTENSION streamcube');
is($ret, 0, 'CREATE EXTENSION works in a database in SQL_ASCII') or diag($stderr);

$node->stop;
done_testing();
