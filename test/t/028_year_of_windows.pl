
# A cube with a year of hourly windows under default settings
# (max_locks_per_transaction = 64): what streamcube does itself must work
# at that size.  One event per hour over 366 days reaches the cube as a
# backlog; the receiver creates its 8,784 windows in bounded transactions
# and writes at most 64 windows per batch; streamcube_seal_due() seals a
# bounded number per call; a plain DROP TABLE of the cube runs out of locks
# while streamcube_drop_cube() drops it, in steps, by the launcher.
#
# Slow by nature (6 to 8 minutes here, more than run-tests allows one TAP
# file by default): PostgreSQL 15 rebuilds a parent's partition descriptor
# for every partition attached, so building n windows costs O(n^2).  So it
# runs on request only:
#
#   SC_LONG_TESTS=1 SC_TEST_TIMEOUT=1500 test/run-tests tap test/t/028_year_of_windows.pl
#
# t/027_compaction.pl runs the same steps on 1,200 windows in every run;
# test/bench/compaction measures a year before and after compaction.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;
use Time::HiRes qw(time);

sc_require_env();
plan skip_all => 'a year of windows takes minutes: set SC_LONG_TESTS=1 (and SC_TEST_TIMEOUT=1500)'
  unless $ENV{SC_LONG_TESTS};

my $node = sc_node('year', 'streamcube.batch_max_windows = 200');
is($node->safe_psql('postgres', 'SHOW max_locks_per_transaction'), '64',
	'max_locks_per_transaction is the default');

my $nwin = 366 * 24;
my $topic = sc_topic('year');
sc_create_topic($topic, 2);
my $y0 = (int(time / 3600) - $nwin) * 3600;
sc_produce($topic, count => $nwin, rate => 0, 'start-ts' => $y0, 'step-ms' => 3_600_000);

my $t = time;
sc_create_cube($node, 'yr', $topic, '{"compact": []}');
is($node->safe_psql('postgres', "SELECT streamcube_wait('yr', '1800 s')"), 't',
	'a year of windows is ingested');
note sprintf('%d windows created and filled in %.1f s', $nwin, time - $t);
is($node->safe_psql('postgres',
		"SELECT count(*) >= $nwin, count(*) FILTER (WHERE state = 'active') >= $nwin "
		  . "FROM streamcube.segments WHERE cube = 'yr'::regclass"),
	't|t', 'a partition per hour of the year, all active');
is($node->safe_psql('postgres',
		"SELECT sum(rows) FROM streamcube.segments WHERE cube = 'yr'::regclass"),
	$nwin, 'every event is in (counted partition by partition)');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.dead_letters WHERE cube = 'yr'::regclass"),
	'0', 'no dead letter');

my ($rc, $out, $err) = $node->psql('postgres', 'SELECT streamcube_seal_due()');
is($rc, 0, 'streamcube_seal_due() with a year of due windows does not fail');
is($out, '96', 'it seals a bounded number of windows per call (96)');
($rc, $out, $err) = $node->psql('postgres', 'SELECT streamcube_seal_due()');
is($out, '96', 'and as many at the next call');

($rc, $out, $err) = $node->psql('postgres', 'BEGIN; DROP TABLE yr CASCADE; ROLLBACK;');
like($err, qr/out of shared memory/, 'a plain DROP TABLE of the cube runs out of locks');

$t = time;
($rc, $out, $err) = $node->psql('postgres', "SELECT streamcube_drop_cube('yr')");
is($rc, 0, 'streamcube_drop_cube() succeeds');
like($err, qr/goes in steps/, 'and says the table goes in steps');
ok($node->poll_query_until('postgres',
		"SELECT NOT EXISTS (SELECT 1 FROM streamcube.pending_drops) AND to_regclass('yr') IS NULL"),
	'the launcher dropped the table');
note sprintf('dropped in steps in %.1f s', time - $t);
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_class WHERE relname LIKE 'yr\\_%'"),
	'0', 'no partition of it is left');
is($node->safe_psql('postgres', 'SELECT count(*) FROM streamcube.segment_catalog'),
	'0', 'the catalog forgot its windows');

$node->stop;
done_testing();
