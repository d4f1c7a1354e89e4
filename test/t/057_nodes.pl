
# Nodes (issue 47, its first part): other PostgreSQL servers named by a
# foreign server of postgres_fdw, checked before they are recorded.
#
# - A superuser adds a node through a user mapping; streamcube.nodes
#   shows its version and system identifier, and nothing of its
#   credentials; a member of streamcube_admin adds one only with a
#   password of its own that the other server asks for (postgres_fdw's
#   rule), and a role that is neither may not add one.
# - Refused with a clear error each: a missing server, a server of another
#   foreign-data wrapper, no USAGE on it, no user mapping, a server without
#   streamcube, one of another streamcube version, this server itself, a
#   name taken; a server that does not answer is given up on at the
#   statement's timeout (the wait answers interrupts).
# - Dropping a node forgets it; its server and mappings stay.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use IO::Socket::INET;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;
use Time::HiRes qw(time);

sc_require_env();

my $home = sc_node('home');
my $other = sc_node('other');
my $bare = PostgreSQL::Test::Cluster->new('bare');    # no streamcube
$bare->init;
$bare->start;

my $secret = 'n0de-s3cret-pw';
# On the other server a role that must give its password.
$other->safe_psql('postgres', "CREATE ROLE sc_remote LOGIN PASSWORD '$secret'");
$other->safe_psql('postgres', 'GRANT USAGE ON SCHEMA streamcube TO sc_remote');
unlink $other->data_dir . '/pg_hba.conf';
$other->append_conf('pg_hba.conf', "local all sc_remote scram-sha-256\nlocal all all trust\n");
$other->reload;

sub server_options
{
	my ($n) = @_;
	return sprintf("host '%s', port '%d', dbname 'postgres'", $n->host, $n->port);
}

$home->safe_psql('postgres', join(";\n",
	'CREATE EXTENSION postgres_fdw',
	'CREATE SERVER other_srv FOREIGN DATA WRAPPER postgres_fdw OPTIONS (' . server_options($other) . ')',
	'CREATE SERVER bare_srv FOREIGN DATA WRAPPER postgres_fdw OPTIONS (' . server_options($bare) . ')',
	'CREATE SERVER self_srv FOREIGN DATA WRAPPER postgres_fdw OPTIONS (' . server_options($home) . ')',
	'CREATE FOREIGN DATA WRAPPER not_pg',
	'CREATE SERVER other_kind FOREIGN DATA WRAPPER not_pg',
	"CREATE USER MAPPING FOR postgres SERVER other_srv OPTIONS (user 'postgres')",
	"CREATE USER MAPPING FOR postgres SERVER bare_srv OPTIONS (user 'postgres')",
	"CREATE USER MAPPING FOR postgres SERVER self_srv OPTIONS (user 'postgres')",
	'CREATE ROLE sc_admin LOGIN IN ROLE streamcube_admin',
	'CREATE ROLE sc_plain LOGIN'));

# psql as a role; (stdout, the error's first line, SQLSTATE).
sub try_as
{
	my ($role, $sql) = @_;
	my ($rc, $out, $err) = $home->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		extra_params => [ '-U', $role ]);
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	$err =~ s/\n.*//s;
	return ($out, $err, $state // '');
}

# ---------------------------------------------------------------- a superuser
is($home->safe_psql('postgres', "SELECT streamcube_add_node('other', 'other_srv')"), '',
	'a superuser adds a node by a foreign server of postgres_fdw');
is( $home->safe_psql('postgres',
		'SELECT name, server, server_exists, version = (SELECT extversion FROM pg_extension '
		  . "WHERE extname = 'streamcube') FROM streamcube.nodes"),
	'other|other_srv|t|t', 'streamcube.nodes shows the node, its server and its streamcube version');
is( $home->safe_psql('postgres', 'SELECT system_identifier FROM streamcube.nodes'),
	$other->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()'),
	'and the other server\'s system identifier');

my ($out, $err, $state) = try_as('postgres', "SELECT streamcube_add_node('other', 'other_srv')");
is($state, '42710', 'a node name taken is refused (42710)');
like($err, qr/node "other" already exists/, '... and named');

# ---------------------------------------------------------------- refusals
($out, $err, $state) = try_as('postgres', "SELECT streamcube_add_node('n', 'nowhere')");
is($state, '42704', 'a missing foreign server is refused (42704)');
like($err, qr/foreign server "nowhere" of node "n" does not exist/, '... and named');
($out, $err, $state) = try_as('postgres', "SELECT streamcube_add_node('n', 'other_kind')");
is($state, '42809', 'a server of another foreign-data wrapper is refused (42809)');
like($err, qr/uses foreign-data wrapper "not_pg", not postgres_fdw/, '... and says which');
($out, $err, $state) = try_as('postgres', "SELECT streamcube_add_node('n', 'bare_srv')");
is($state, '55000', 'a server without streamcube is refused (55000)');
like($err, qr/does not have the extension streamcube/, '... and says so');
($out, $err, $state) = try_as('postgres', "SELECT streamcube_add_node('n', 'self_srv')");
is($state, '22023', 'this server itself is refused (22023)');
like($err, qr/reaches this server, or a copy of it/, '... and says so');

# Another version: the other server's catalog moved back to 0.3.0 (the
# same library: a server updated without ALTER EXTENSION ... UPDATE).
my $third = sc_node('third');
$third->safe_psql('postgres', 'DROP EXTENSION streamcube');
$third->safe_psql('postgres', "CREATE EXTENSION streamcube VERSION '0.3.0'");
$home->safe_psql('postgres', join(";\n",
	'CREATE SERVER third_srv FOREIGN DATA WRAPPER postgres_fdw OPTIONS (' . server_options($third) . ')',
	"CREATE USER MAPPING FOR postgres SERVER third_srv OPTIONS (user 'postgres')"));
($out, $err, $state) = try_as('postgres', "SELECT streamcube_add_node('n', 'third_srv')");
is($state, '55000', 'a node of another streamcube version is refused (55000)');
like($err, qr/runs streamcube 0\.3\.0 \(library [^)]+\), and this server 0\.4\.0/, '... naming both versions');

# A server that accepts the connection and never answers: given up on at
# the statement's timeout, not after the connect timeout.
my $hole = IO::Socket::INET->new(Listen => 5, LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp')
  or die "cannot listen: $!";
$home->safe_psql('postgres', join(";\n",
	"CREATE SERVER hole_srv FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '127.0.0.1', port '"
	  . $hole->sockport . "', dbname 'postgres')",
	"CREATE USER MAPPING FOR postgres SERVER hole_srv OPTIONS (user 'postgres')"));
my $t0 = time;
($out, $err, $state) = try_as('postgres',
	"SET statement_timeout = '1s'; SELECT streamcube_add_node('n', 'hole_srv')");
my $took = time - $t0;
is($state, '57014', 'a server that does not answer: the statement is cancelled at its timeout');
cmp_ok($took, '<', 5, sprintf('... within seconds (%.1f s): the wait answers interrupts', $took));
close $hole;

# ---------------------------------------------------------------- roles
($out, $err, $state) = try_as('sc_plain', "SELECT streamcube_add_node('n2', 'other_srv')");
is($state, '42501', 'a role outside streamcube_admin may not add a node');
($out, $err, $state) = try_as('sc_plain', 'SELECT * FROM streamcube.nodes');
is($state, '42501', '... nor read streamcube.nodes');

($out, $err, $state) = try_as('sc_admin', "SELECT streamcube_add_node('n2', 'other_srv')");
is($state, '42501', 'an admin without USAGE on the server is refused (42501)');
like($err, qr/permission denied for foreign server "other_srv" of node "n2"/, '... and told which');
$home->safe_psql('postgres', 'GRANT USAGE ON FOREIGN SERVER other_srv TO sc_admin');
($out, $err, $state) = try_as('sc_admin', "SELECT streamcube_add_node('n2', 'other_srv')");
is($state, '42704', 'an admin without a user mapping is refused (42704)');
like($err, qr/role "sc_admin" has no user mapping for foreign server "other_srv"/, '... and told which');

# A mapping without a password: the server's own identity is not lent.
$home->safe_psql('postgres', "CREATE USER MAPPING FOR sc_admin SERVER other_srv OPTIONS (user 'postgres')");
($out, $err, $state) = try_as('sc_admin', "SELECT streamcube_add_node('n2', 'other_srv')");
is($state, '2F003', 'an admin\'s mapping without a password is refused (2F003)');
like($err, qr/has no password/, '... and says so');
# An empty password is none: libpq would read this server's password file.
$home->safe_psql('postgres', "ALTER USER MAPPING FOR sc_admin SERVER other_srv OPTIONS (ADD password '')");
($out, $err, $state) = try_as('sc_admin', "SELECT streamcube_add_node('n2', 'other_srv')");
is($state, '2F003', 'an admin\'s mapping with an empty password is refused too (2F003)');
$home->safe_psql('postgres', "ALTER USER MAPPING FOR sc_admin SERVER other_srv OPTIONS (DROP password)");
# A password the other server does not ask for (trust): refused too.
$home->safe_psql('postgres', "ALTER USER MAPPING FOR sc_admin SERVER other_srv OPTIONS (ADD password 'unused')");
($out, $err, $state) = try_as('sc_admin', "SELECT streamcube_add_node('n2', 'other_srv')");
is($state, '2F003', 'a password the other server does not ask for is refused (2F003)');
like($err, qr/did not ask for the password/, '... and says so');
# Its own role there, with a password the other server asks for: added.
$home->safe_psql('postgres',
	"ALTER USER MAPPING FOR sc_admin SERVER other_srv OPTIONS (SET user 'sc_remote', SET password '$secret')");
($out, $err, $state) = try_as('sc_admin', "SELECT streamcube_add_node('n2', 'other_srv')");
is($err, '', 'an admin adds a node with a password of its own that the other server asks for');
is( $home->safe_psql('postgres', "SELECT added_by FROM streamcube.nodes WHERE name = 'n2'"),
	'sc_admin', 'streamcube.nodes says who added it');

# Nothing of the credentials anywhere streamcube writes.
is( $home->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.nodes n WHERE n::text LIKE '%$secret%'"),
	'0', 'streamcube.nodes holds no password');
is( $home->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.node_catalog n WHERE n::text LIKE '%$secret%'"),
	'0', 'nor does streamcube.node_catalog');
($out, $err, $state) = try_as('sc_admin', 'SELECT * FROM streamcube.node_catalog');
is($state, '42501', 'streamcube.node_catalog is not readable by an admin (the view is)');

# ---------------------------------------------------------------- check
is( $home->safe_psql('postgres',
		"SELECT node, server, version = (SELECT extversion FROM pg_extension WHERE extname = 'streamcube'), "
		  . "answered_ms > 0 FROM streamcube_check_node('other')"),
	'other|other_srv|t|t', 'streamcube_check_node connects again and says what the node is');
($out, $err, $state) = try_as('postgres', "SELECT * FROM streamcube_check_node('nowhere')");
is($state, '42704', 'streamcube_check_node of no such node (42704)');
($out, $err, $state) = try_as('sc_plain', "SELECT * FROM streamcube_check_node('other')");
is($state, '42501', '... and not for a role outside streamcube_admin');
$other->stop;
$t0 = time;
($out, $err, $state) = try_as('postgres', "SELECT * FROM streamcube_check_node('other')");
is($state, '08001', 'a node that is down: streamcube_check_node says it cannot be reached (08001)');
like($err, qr/node "other" \(foreign server "other_srv"\) cannot be reached/, '... naming the node and its server');
cmp_ok(time - $t0, '<', 10, '... at once');
$other->start;
$home->safe_psql('postgres', "UPDATE streamcube.node_catalog SET system_identifier = '42' WHERE name = 'other'");
($out, $err, $state) = try_as('postgres', "SELECT * FROM streamcube_check_node('other')");
is($state, '55000', 'a node that is another server than the one added is refused (55000)');
like($err, qr/is another server now: system identifier \d+, and 42 when it was added/, '... with both identifiers');

# ---------------------------------------------------------------- drop
is($home->safe_psql('postgres', "SELECT streamcube_drop_node('n2')"), '', 'a node is dropped');
($out, $err, $state) = try_as('postgres', "SELECT streamcube_drop_node('n2')");
is($state, '42704', 'dropping it again: no such node (42704)');
is( $home->safe_psql('postgres', "SELECT count(*) FROM pg_user_mappings WHERE srvname = 'other_srv'"),
	'2', 'its server and user mappings stay');
$home->safe_psql('postgres', 'DROP SERVER other_srv CASCADE');
is($home->safe_psql('postgres', "SELECT server_exists FROM streamcube.nodes WHERE name = 'other'"),
	'f', 'a node whose foreign server was dropped shows server_exists false');

# (the test's own statements are logged, log_statement = all: not those)
my @leaks = grep { /\Q$secret\E/ && !/057_nodes\.pl LOG:  statement: / } split /\n/, slurp_file($home->logfile);
is(scalar(@leaks), 0, 'the password never reaches the server log from streamcube')
  or diag join("\n", @leaks);

$_->stop for ($home, $other, $bare, $third);
done_testing();
