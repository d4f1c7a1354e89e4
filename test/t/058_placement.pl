
# Replica sets placed on a node (issue 47): a set's partitions are handed
# over by its home server and adopted by the node at exactly the positions
# the home server stopped at, under load, through crashes of either server
# and a node that is down, with no message lost or ingested twice across
# the two servers.
#
# - Four replica sets of one cube on the home server, one partition each.
# - pb is placed on the node while messages arrive: the node makes the
#   cube and consumes pb's partition from where home stopped; home's pb
#   receiver stops; the journals of both servers say so.
# - Refusals, each with its SQLSTATE: placing again, a set without
#   partitions, a node that does not exist, a role that is not an
#   administrator, a reassignment that would take a placed partition, the
#   drop of a node that runs a set.
# - pc: placed while the node holds its cube's row (adoption waits), then
#   the node stops (adoption never commits), then the home server crashes
#   and starts again while the node is down: the placement is tried again,
#   says why it failed, and completes once the node is back.  Home's
#   crash took its positions back to the checkpoints: its stopped sets
#   read again up to their stop points, no further.
# - pd: the node adopts while the home server is down (home crashed
#   after asking): the next try finds it done and says so.
# - At the end, the rows of both servers (home's table and the node's,
#   read through postgres_fdw) are exactly Kafka's messages, each once.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;
use Time::HiRes qw(time sleep);

sc_require_env();

my $start_ts = 1796025600;    # 2026-12-01 00:00:00 UTC
my $home = sc_node('home');
my $n1 = sc_node('n1');
my $topic = sc_topic('place');
sc_create_topic($topic, 4);
sc_produce($topic, count => 20_000, 'start-ts' => $start_ts, seed => 1);

sub server_options
{
	my ($n) = @_;
	return sprintf("host '%s', port '%d', dbname 'postgres'", $n->host, $n->port);
}

$home->safe_psql('postgres', join(";\n",
	'CREATE EXTENSION postgres_fdw',
	'CREATE SERVER n1_srv FOREIGN DATA WRAPPER postgres_fdw OPTIONS (' . server_options($n1) . ')',
	"CREATE USER MAPPING FOR postgres SERVER n1_srv OPTIONS (user 'postgres')",
	"SELECT streamcube_add_node('n1', 'n1_srv')",
	'CREATE ROLE sc_plain LOGIN',
	"SELECT streamcube_create_replica_set(s) FROM unnest('{pa,pb,pc,pd}'::text[]) s"));
sc_create_cube($home, 'ev', $topic, '{"replica_sets": ["pa", "pb", "pc", "pd"]}');

sub part_of
{
	my ($set) = @_;
	return $home->safe_psql('postgres',
		"SELECT partition FROM streamcube.assignments a JOIN streamcube.cubes c USING (cube_id) "
		  . "WHERE c.relid = 'ev'::regclass AND replica_set = '$set'");
}
my %part = map { $_ => part_of($_) } qw(pa pb pc pd);
is(join(',', sort map { $part{$_} } keys %part), '0,1,2,3', 'four sets, one partition each');

my $producer = sc_produce_start($topic, count => 40_000, rate => 2000,
	'start-ts' => $start_ts + 3600, seed => 2);
ok($home->poll_query_until('postgres', 'SELECT count(*) >= 24000 FROM ev'), 'ingest is under way');

# ---------------------------------------------------------------- pb, live
my $placed = $home->safe_psql('postgres',
	"SELECT r->>'node', r->>'replica_set', r->'partitions', (r->'positions'->>0)::bigint > 0 "
	  . "FROM streamcube_place('ev', 'pb', 'n1') r");
is($placed, "n1|pb|[$part{pb}]|t",
	'streamcube_place hands pb\'s partition over, at the position home stopped at');
ok( $home->poll_query_until('postgres',
		"SELECT state = 'placed' AND attempts = 1 AND last_error IS NULL AND adopted_at IS NOT NULL "
		  . "FROM streamcube.placements WHERE replica_set = 'pb'"),
	'the node adopted pb (streamcube.placements: placed)')
  or diag $home->safe_psql('postgres', 'SELECT * FROM streamcube.placements');
ok( $n1->poll_query_until('postgres',
		"SELECT partitions::text = '{$part{pb}}' FROM streamcube.consumers "
		  . "WHERE cube = 'ev'::regclass AND replica_set = 'pb' AND state = 'running'"),
	'on the node, cube ev exists and pb consumes its partition')
  or diag $n1->safe_psql('postgres', 'SELECT * FROM streamcube.consumers');
ok( $home->poll_query_until('postgres',
		"SELECT pid IS NULL AND state = 'placed' AND last_error LIKE 'runs on a node%' "
		  . "FROM streamcube.consumers WHERE cube = 'ev'::regclass AND replica_set = 'pb'"),
	'home runs no receiver for pb once it reached its stop point: streamcube.consumers says it is placed')
  or diag $home->safe_psql('postgres', 'SELECT * FROM streamcube.consumers');
# ev_all: home's rows and the node's, through postgres_fdw.
my $plan = $home->safe_psql('postgres',
	"EXPLAIN (VERBOSE, COSTS OFF) SELECT count(*) FROM ev_all WHERE ts >= '2026-12-01 01:00:00+00'");
like($plan, qr/Async Foreign Scan on public\.ev_at_n1/, 'ev_all reads the node with an asynchronous foreign scan');
like($plan, qr/Remote SQL: SELECT .* FROM public\.ev WHERE \(\(ts >= /,
	'... and sends the WHERE clause on the time column to the node');
ok($home->poll_query_until('postgres', 'SELECT (SELECT count(*) FROM ev_all) > (SELECT count(*) FROM ev)'),
	'ev_all holds the node\'s rows too');
is( $home->safe_psql('postgres',
		"SELECT relkind::text || ' ' || pg_get_userbyid(relowner) FROM pg_class WHERE relname IN ('ev_all', 'ev_at_n1') ORDER BY relname"),
	"v postgres\nf postgres", 'the view and the foreign table belong to the cube\'s owner');
is( $home->safe_psql('postgres', "SELECT state, last_error IS NULL FROM streamcube.health WHERE cube = 'ev'::regclass"),
	'running|t', 'streamcube.health: the cube runs here, a placed set is no error');
is( $n1->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.reassign_log WHERE origin = 'streamcube_adopt' AND step = 'assign'"),
	'1', 'the node journals its adoption (origin streamcube_adopt)');
is( $home->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.reassign_log WHERE origin = 'streamcube_place' AND step = 'assign'"),
	'1', 'home journals the hand-over (origin streamcube_place)');
is( $n1->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.assignments a JOIN streamcube.cubes c USING (cube_id) "
		  . "WHERE c.relid = 'ev'::regclass"),
	'1', 'the node consumes only the partition placed there');
is( $n1->safe_psql('postgres',
		"SELECT options->>'new_partitions', options->>'home' FROM streamcube.cubes WHERE relid = 'ev'::regclass"),
	'ignore|' . $home->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()'),
	'and leaves partitions added to the topic to home, which it names (option home)');

# ---------------------------------------------------------------- refusals
sub try_sql
{
	my ($node, $sql, @opts) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql", @opts);
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	$err =~ s/\n.*//s;
	return ($state // '', $err);
}
my ($state, $err) = try_sql($home, "SELECT streamcube_place('ev', 'pb', 'n1')");
is($state, '42710', 'placing a placed set again is refused (42710)');
like($err, qr/replica set "pb" of cube .*ev is placed on node "n1" already/, '... and says where');
$home->safe_psql('postgres', "SELECT streamcube_create_replica_set('pe')");
($state, $err) = try_sql($home, "SELECT streamcube_place('ev', 'pe', 'n1')");
is($state, '55000', 'a set that consumes no partition is refused (55000)');
($state, $err) = try_sql($home, "SELECT streamcube_place('ev', 'pc', 'nowhere')");
is($state, '42704', 'a node that does not exist is refused (42704)');
like($err, qr/node "nowhere" does not exist/, '... and named');
($state, $err) = try_sql($home, "SELECT streamcube_place('ev', 'pc', 'n1')", extra_params => [ '-U', 'sc_plain' ]);
is($state, '42501', 'a role that is not an administrator may not place (42501)');
($state, $err) = try_sql($home,
	"SELECT streamcube_reassign('ev', '{\"pa\": [$part{pa}, $part{pb}], \"pc\": [$part{pc}], \"pd\": [$part{pd}]}')");
is($state, '55000', 'a reassignment that takes a placed partition is refused (55000)');
like($err, qr/replica set "pb" of cube .*ev runs on node "n1": partition $part{pb} cannot move away from it/,
	'... naming the set, the node and the partition');
($state, $err) = try_sql($home, "SELECT streamcube_drop_node('n1')");
is($state, '2BP01', 'a node that runs a replica set cannot be dropped (2BP01)');
($state, $err) = try_sql($home, "SELECT streamcube_resume('ev', until => '\"latest\"')");
is($state, '0A000', 'a stop point on a cube with a placed set is refused (0A000)');
my $topic2 = sc_topic('place2');
sc_create_topic($topic2, 2);
($state, $err) = try_sql($home, "SELECT streamcube_alter_cube('ev', '{\"topic\": [\"$topic\", \"$topic2\"]}')");
is($state, '0A000', 'so is a change of its topics (0A000)');
like($err, qr/has a replica set placed on a node: its topics cannot change/, '... and says why');
is( $home->safe_psql('postgres',
		"SELECT (streamcube_reassign('ev', '{\"pa\": [$part{pa}], \"pb\": [$part{pb}], \"pc\": [$part{pc}], "
		  . "\"pd\": [$part{pd}]}'))->>'noop'"),
	'true', 'an assignment that names the placed set with its partition is accepted');

# ------------------------------------------- pc: node down, home crashed
# The node's cube row held: its adoption waits.
my $holder = sc_psql_bg($n1,
	"BEGIN; SELECT 1 FROM streamcube.cubes WHERE relid = 'ev'::regclass FOR NO KEY UPDATE; "
	  . "SELECT pg_sleep(60); COMMIT");
ok($n1->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%pg_sleep(60)%' AND wait_event = 'PgSleep'"),
	'the node\'s cube row is held');
is($home->safe_psql('postgres', "SELECT (streamcube_place('ev', 'pc', 'n1'))->>'replica_set'"),
	'pc', 'pc is placed while the node cannot adopt yet');
ok( $n1->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%streamcube_adopt%' AND wait_event_type = 'Lock'"),
	'the node\'s adoption waits for the row');
$n1->stop('immediate');
sc_psql_bg_finish($holder);
ok( $home->poll_query_until('postgres',
		"SELECT attempts >= 1 AND state = 'moving' FROM streamcube.placements WHERE replica_set = 'pc'"),
	'the adoption that died with the node counts as a failed try');
$home->stop('immediate');
$home->start;
ok( $home->poll_query_until('postgres',
		"SELECT attempts >= 2 AND state = 'moving' AND last_error LIKE '%node \"n1\"%' "
		  . "FROM streamcube.placements WHERE replica_set = 'pc'"),
	'after home\'s crash, the node is tried again, and streamcube.placements says why it failed')
  or diag $home->safe_psql('postgres', 'SELECT * FROM streamcube.placements');
$n1->start;
ok( $home->poll_query_until('postgres',
		"SELECT state = 'placed' AND last_error IS NULL FROM streamcube.placements WHERE replica_set = 'pc'"),
	'once the node is back, it adopts pc')
  or diag $home->safe_psql('postgres', 'SELECT * FROM streamcube.placements');

# ------------------------------------ pd: adopted while home was down
$holder = sc_psql_bg($n1,
	"BEGIN; SELECT 1 FROM streamcube.cubes WHERE relid = 'ev'::regclass FOR NO KEY UPDATE; "
	  . "SELECT pg_sleep(4); COMMIT");
ok($n1->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%pg_sleep(4)%' AND wait_event = 'PgSleep'"),
	'the node\'s cube row is held again');
$home->safe_psql('postgres', "SELECT streamcube_place('ev', 'pd', 'n1')");
ok( $n1->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%streamcube_adopt%' AND wait_event_type = 'Lock'"),
	'the node\'s adoption of pd waits for the row');
$home->stop('immediate');
sc_psql_bg_finish($holder);
ok( $n1->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM streamcube.assignments a JOIN streamcube.cubes c USING (cube_id) "
		  . "WHERE c.relid = 'ev'::regclass AND a.replica_set = 'pd'"),
	'the node adopted pd though home went down before it answered');
$home->start;
ok( $home->poll_query_until('postgres',
		"SELECT state = 'placed' FROM streamcube.placements WHERE replica_set = 'pd'"),
	'home tries again, finds pd adopted, and marks it placed');
is( $n1->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.reassign_log WHERE origin = 'streamcube_adopt' AND step = 'assign'"),
	'3', 'the node adopted each set once (the second try for pd was a no-op)');

# ---------------------------------------------------------------- exact
ok(sc_produce_finish($producer), 'the producer delivered everything');
my $k = sc_kafka_contents($topic);
my $want_n1 = join(',', sort { $a <=> $b } map { $k->{partitions}{ $part{$_} }{high} } qw(pb pc pd));
ok( $n1->poll_query_until('postgres',
		"SELECT string_agg(positions[1]::text, ',' ORDER BY positions[1]) = '$want_n1' "
		  . "FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
	'the node read its partitions to their ends')
  or diag $n1->safe_psql('postgres', 'SELECT * FROM streamcube.consumers');
ok( $home->poll_query_until('postgres',
		"SELECT positions[1] = $k->{partitions}{$part{pa}}{high} FROM streamcube.consumers "
		  . "WHERE cube = 'ev'::regclass AND replica_set = 'pa'"),
	'home read pa to its end');
my ($wrc, $wout, $werr) = $home->psql('postgres', "SELECT streamcube_wait('ev', '60 s')");
is($wout, 't', 'streamcube_wait on home: this server\'s share is consumed (placed sets up to their stop points)');
like($werr, qr/waits for the share of cube "ev" that this server consumes/, '... and a NOTICE says the rest is on the nodes');
is($n1->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"), 't', 'streamcube_wait on the node');
ok( $home->poll_query_until('postgres',
		"SELECT count(*) = 3 AND bool_and(pid IS NULL AND state = 'placed') FROM streamcube.consumers "
		  . "WHERE cube = 'ev'::regclass AND replica_set <> 'pa'"),
	'home runs no receiver for the placed sets once they read up to their stop points again')
  or diag $home->safe_psql('postgres', 'SELECT * FROM streamcube.consumers');
sc_check_exact($home, 'ev_all', $k, 'both servers');
is( $home->safe_psql('postgres',
		"SELECT count(*) FROM ev WHERE _partition IN ($part{pb}, $part{pc}, $part{pd}) "
		  . "AND _offset >= (SELECT min(u.stop) FROM streamcube.placement_catalog x, "
		  . "unnest(x.partitions, x.positions) u(p, stop) WHERE u.p = _partition)"),
	'0', 'home holds no row of a placed partition at or beyond its stop point');
sc_check_positions_match_rows($home, 'ev', 'home');
sc_check_positions_match_rows($n1, 'ev', 'node');

($state, $err) = try_sql($home, "SELECT streamcube_place('ev', 'pa', 'n1')");
is($state, '55000', 'the last set that runs here cannot be placed while new partitions are dealt here (55000)');
like($err, qr/replica set "pa" is the last of cube .*ev that runs on this server/, '... and says so');

# A name taken by something streamcube did not make is refused, not replaced.
$home->safe_psql('postgres', join(";\n",
	"SELECT streamcube_create_replica_set('qa'), streamcube_create_replica_set('qb')",
	"SELECT streamcube_create_cube('ew', 'k', '$topic2', 'ts timestamptz, country text, device text, "
	  . "amount numeric, qty int', 'ts', '1 hour', 'json', '{\"replica_sets\": [\"qa\", \"qb\"], \"new_partitions\": \"ignore\"}')",
	"CREATE VIEW ew_all AS SELECT 'mine' AS whose"));
sc_produce($topic2, count => 10, 'start-ts' => $start_ts, seed => 3);
($state, $err) = try_sql($home, "SELECT streamcube_place('ew', 'qa', 'n1')");
is($state, '42P07', 'a view of that name that streamcube did not make is refused (42P07)');
like($err, qr/cannot make the view of all its rows of cube .*ew: the name "ew_all" is taken/, '... and named');
is($home->safe_psql('postgres', 'SELECT whose FROM ew_all'), 'mine', '... and left as it was');

# The view renamed: the drop of the cube finds it all the same.
$home->safe_psql('postgres', 'ALTER VIEW ev_all RENAME TO ev_everything');
$home->safe_psql('postgres', "SELECT streamcube_drop_cube('ev')");
is( $home->safe_psql('postgres',
		"SELECT count(*) FROM pg_class WHERE relname IN ('ev', 'ev_everything', 'ev_at_n1')"),
	'0', 'dropping the cube drops its view (renamed since) and the foreign table with it');
is($home->safe_psql('postgres', 'SELECT count(*) FROM streamcube.placements'), '0',
	'... and its placements');

done_testing();
