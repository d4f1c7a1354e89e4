
# A receiver that pauses its cube because the cube's table changed so that
# it cannot go on (here: its time column renamed) writes the cube's row in
# a transaction of its own, not while it holds the cube's table (the lock
# order of docs/architecture.md: the row, lock 2, before the table, lock
# 3).  A seal that wrote the cube's row (its sealed view) holds the row to
# its commit, after its compactions, whose swap needs the table
# ACCESS EXCLUSIVE; a receiver that waited for the row while holding the
# table kept the swap retrying for its whole budget (a fresh-clone CI run
# of t/029 stalled 20 s on it).  Here a session holds the row as such a
# seal does, the time column is renamed, and the table must stay free for
# ACCESS EXCLUSIVE while the receiver waits; once the row is free, the cube
# is paused with the reason, and resumes exact once the column is back.
#
# A bad message under policy "pause" pauses the cube in the batch's own
# transaction (the pause commits with the positions), which holds the
# table: there the row is taken without waiting, and a batch that finds it
# held rolls back and tries again later.  The same hold, a bad message:
# the table stays free, nothing commits meanwhile, and once the row is
# free the cube pauses at the bad message with the rows before it.
#
# A receiver that sees its topic grow assigns the new partitions
# (new_partitions = assign) under the cube's row: it takes the row with
# nothing of the cube held.  The same hold while the topic grows: the
# table stays free, and once the row is free the new partitions are
# assigned and read, exact.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;

my $node = sc_node('pause_lock', "streamcube.metadata_interval = '1s'");
my $topic = sc_topic('pause_lock');
sc_create_topic($topic, 2);
sc_produce($topic, count => 1000);
sc_create_cube($node, 'pl', $topic);
is($node->safe_psql('postgres', "SELECT streamcube_wait('pl', '60 s')"),
	't', 'the first 1,000 messages are in');

# The row, held as a seal that wrote the sealed view holds it.
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN; SELECT 1 FROM streamcube.cubes '
	  . "WHERE relid = 'pl'::regclass FOR NO KEY UPDATE");

$node->safe_psql('postgres', 'ALTER TABLE pl RENAME COLUMN ts TO ts_renamed');
# The receiver sees the change at its next transaction: more messages.
sc_produce($topic, count => 100, seed => 2);
ok( $node->poll_query_until('postgres',
		"SELECT wait_event_type = 'Lock' AND query = 'pausing the cube' FROM pg_stat_activity "
		  . "WHERE pid = (SELECT pid FROM streamcube.consumers WHERE cube = 'pl'::regclass)"),
	'the receiver waits for the cube\'s row to pause the cube');
my ($ret, $out, $err) = $node->psql('postgres',
	"SET lock_timeout = '2s'; BEGIN; LOCK TABLE pl IN ACCESS EXCLUSIVE MODE; COMMIT;");
is($ret, 0, 'meanwhile the cube\'s table can be locked ACCESS EXCLUSIVE (the receiver does not hold it)')
  or diag $err;

$holder->query_safe('COMMIT');
$holder->quit;
ok( $node->poll_query_until('postgres',
		"SELECT paused_reason LIKE 'time column \"ts\" of cube public.pl was renamed to \"ts_renamed\"%' "
		  . "FROM streamcube.cubes WHERE relid = 'pl'::regclass"),
	'then the cube is paused, with the reason');

$node->safe_psql('postgres', 'ALTER TABLE pl RENAME COLUMN ts_renamed TO ts');
$node->safe_psql('postgres', "SELECT streamcube_resume('pl')");
is($node->safe_psql('postgres', "SELECT streamcube_wait('pl', '60 s')"),
	't', 'resumed, it reads the rest');
is($node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT (_partition, _offset)) FROM pl'),
	'1100|1100', 'exact: 1,100 rows, (_partition, _offset) unique');

# A bad message under policy "pause", the row held.
my $bad = sc_topic('pause_lock_bad');
sc_create_topic($bad, 1);
sc_kcat_produce($bad, 0, '{"ts":"2026-01-01T00:00:00Z","qty":1}',
	'{"ts":"2026-01-01T00:00:01Z","qty":2}');
sc_create_cube($node, 'plb', $bad, '{"bad_message": "pause"}');
is($node->safe_psql('postgres', "SELECT streamcube_wait('plb', '60 s')"),
	't', 'the first two messages are in');

$holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN; SELECT 1 FROM streamcube.cubes '
	  . "WHERE relid = 'plb'::regclass FOR NO KEY UPDATE");
sc_kcat_produce($bad, 0, '{"ts":"2026-01-01T00:00:02Z","qty":3}',
	'broken', '{"ts":"2026-01-01T00:00:04Z","qty":5}');
ok( $node->poll_query_until('postgres',
		"SELECT query = 'waiting for the cube''s row' FROM pg_stat_activity "
		  . "WHERE pid = (SELECT pid FROM streamcube.consumers WHERE cube = 'plb'::regclass)"),
	'the batch with the bad message waits for the cube\'s row, with nothing of it held');
($ret, $out, $err) = $node->psql('postgres',
	"SET lock_timeout = '2s'; BEGIN; LOCK TABLE plb IN ACCESS EXCLUSIVE MODE; COMMIT;");
is($ret, 0, 'meanwhile the cube\'s table can be locked ACCESS EXCLUSIVE')
  or diag $err;
is($node->safe_psql('postgres',
		"SELECT (SELECT count(*) FROM plb), paused FROM streamcube.cubes WHERE relid = 'plb'::regclass"),
	'2|f', 'nothing of the waiting batch committed, the cube is not paused yet');

$holder->query_safe('COMMIT');
$holder->quit;
ok( $node->poll_query_until('postgres',
		"SELECT paused AND bad_partition = 0 AND bad_offset = 3 "
		  . "FROM streamcube.cubes WHERE relid = 'plb'::regclass"),
	'then the cube pauses at the bad message (partition 0, offset 3)');
is($node->safe_psql('postgres', 'SELECT string_agg(qty::text, \',\' ORDER BY _offset) FROM plb'),
	'1,2,3', 'with the rows before it, committed with the pause');

$node->safe_psql('postgres', "SELECT streamcube_resume('plb', skip_bad_message => true)");
is($node->safe_psql('postgres', "SELECT streamcube_wait('plb', '60 s')"),
	't', 'resumed past the bad message, it reads the rest');
is($node->safe_psql('postgres',
		"SELECT count(*), count(DISTINCT (_partition, _offset)), string_agg(qty::text, ',' ORDER BY _offset) FROM plb"),
	'4|4|1,2,3,5', 'exact: the four good messages, (_partition, _offset) unique');
is($node->safe_psql('postgres',
		"SELECT \"offset\" FROM streamcube.dead_letters WHERE cube = 'plb'::regclass"),
	'3', 'the bad message is a dead letter');

# The topic grows, the row held.
my $grow = sc_topic('pause_lock_grow');
sc_create_topic($grow, 1);
sc_kcat_produce($grow, 0, map { sprintf('{"ts":"2026-01-01T00:00:%02dZ","qty":%d}', $_, $_) } 1 .. 5);
sc_create_cube($node, 'plg', $grow);
is($node->safe_psql('postgres', "SELECT streamcube_wait('plg', '60 s')"),
	't', 'the first five messages are in');

$holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN; SELECT 1 FROM streamcube.cubes '
	  . "WHERE relid = 'plg'::regclass FOR NO KEY UPDATE");
sc_add_partitions($grow, 3);
ok( $node->poll_query_until('postgres',
		"SELECT wait_event_type = 'Lock' AND query = 'assigning new partitions' FROM pg_stat_activity "
		  . "WHERE pid = (SELECT pid FROM streamcube.consumers WHERE cube = 'plg'::regclass)"),
	'the receiver waits for the cube\'s row to assign the new partitions');
($ret, $out, $err) = $node->psql('postgres',
	"SET lock_timeout = '2s'; BEGIN; LOCK TABLE plg IN ACCESS EXCLUSIVE MODE; COMMIT;");
is($ret, 0, 'meanwhile the cube\'s table can be locked ACCESS EXCLUSIVE')
  or diag $err;

$holder->query_safe('COMMIT');
$holder->quit;
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 3 FROM streamcube.assignments a JOIN streamcube.cubes c USING (cube_id) "
		  . "WHERE c.relid = 'plg'::regclass"),
	'then the new partitions are assigned');
sc_kcat_produce($grow, 1, '{"ts":"2026-01-01T00:01:00Z","qty":6}');
sc_kcat_produce($grow, 2, '{"ts":"2026-01-01T00:01:01Z","qty":7}');
ok( $node->poll_query_until('postgres', 'SELECT count(*) = 7 FROM plg'),
	'and read');
is($node->safe_psql('postgres',
		"SELECT count(*), count(DISTINCT (_partition, _offset)), string_agg(qty::text, ',' ORDER BY qty) FROM plg"),
	'7|7|1,2,3,4,5,6,7', 'exact: seven rows, (_partition, _offset) unique');

$node->stop;
done_testing();
