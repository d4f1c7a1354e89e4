
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

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;

my $node = sc_node('pause_lock');
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

$node->stop;
done_testing();
