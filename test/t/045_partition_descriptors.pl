
# A reader must see a window's rows whoever attached its partition, and
# whenever (docs/architecture.md, "Partition descriptors").
#
# PostgreSQL 15 builds a partitioned table's partition descriptor from a
# scan of pg_inherits, then looks up each partition's bound; the first
# catalog lock the transaction takes in between takes in invalidations.  A
# window a receiver attaches (ATTACH PARTITION needs only SHARE UPDATE
# EXCLUSIVE on the cube, so it commits while queries read it) whose
# invalidation is taken in there is missing from the descriptor the build
# then caches, and that backend would not see the window's rows until the
# cube's table next changes.  The receiver invalidates the cube's table a
# second time after it created windows, so that the next query of such a
# backend builds its descriptor again.
#
# The moment is made here with gdb: a reader's backend is stopped right
# after its pg_inherits scan while a receiver creates a window and writes
# into it, then goes on.  Its next query must see the window's row.
# Skipped where gdb is missing or cannot attach to a backend.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time sleep);

sc_require_env();

my $gdb = `command -v gdb 2>/dev/null`;
chomp $gdb;
plan skip_all => 'gdb is not installed' if $gdb eq '';

my $node = sc_node('partdesc');
my $topic = sc_topic('partdesc');
sc_create_topic($topic, 1);
sc_create_cube($node, 'pd', $topic);

# Windows two days ago: each message of a new hour makes the receiver
# create that hour's window (an ATTACH), in a transaction of its own.
my $base = int(time() / 86_400) * 86_400 - 2 * 86_400 + 10 * 3_600;

sub produce_hour
{
	my ($h) = @_;
	sc_produce($topic, count => 1, 'start-ts' => $base + $h * 3_600, seed => 10 + $h);
	is($node->safe_psql('postgres', "SELECT streamcube_wait('pd', '60 s')"), 't',
		"the message of hour $h is in the cube");
	return;
}

produce_hour(0);
my $reader = $node->background_psql('postgres');
is($reader->query_safe('SELECT count(*) FROM pd'), '1', 'the reader counts the first hour');

# A second window: the reader's cached descriptor is invalid, and the
# reader has not met that partition (its bound is a cache miss: the first
# pg_class lookup of the reader's next transaction happens inside the build).
produce_hour(1);
my $pid = $reader->query_safe('SELECT pg_backend_pid()');

# What gdb runs while the reader is stopped after its pg_inherits scan: a
# third hour, created and written by the receiver, committed.
my $dir = PostgreSQL::Test::Utils::tempdir();
my $psql = $node->installed_command('psql');
my $connstr = $node->connstr('postgres');
open(my $sh, '>', "$dir/third_hour.sh") or die;
printf $sh <<'EOS', $ENV{SC_SCKAFKA}, $ENV{SC_KAFKA}, $topic, $base + 2 * 3_600, $psql, $connstr, "$dir/third_hour.out";
#!/bin/sh
'%s' produce --bootstrap '%s' --topic '%s' --count 1 --format json --start-ts %d --seed 12 >/dev/null 2>&1
'%s' -XAt -d '%s' -c "SELECT streamcube_wait('pd', '60 s')" > '%s' 2>&1
EOS
close $sh;
chmod 0755, "$dir/third_hour.sh";
open(my $cmds, '>', "$dir/gdb.cmds") or die;
print $cmds <<"EOC";
set pagination off
set confirm off
handle SIGUSR1 SIGUSR2 SIGINT SIGTERM SIGHUP SIGALRM SIGPIPE nostop noprint pass
break find_inheritance_children_extended
shell touch $dir/gdb.ready
continue
finish
shell $dir/third_hour.sh
delete
detach
quit
EOC
close $cmds;

my ($gout, $gerr) = ('', '');
my $g = IPC::Run::start([ $gdb, '-q', '-batch', '-x', "$dir/gdb.cmds", '-p', $pid ],
	'<', \undef, '>', \$gout, '2>', \$gerr);
my $until = time() + 60;
# gdb's output is not flushed to a pipe: a file says the breakpoint is set
while (time() < $until && $g->pumpable && !-e "$dir/gdb.ready")
{
	$g->pump_nb;
	sleep 0.05;
}
SKIP:
{
	if (!-e "$dir/gdb.ready")
	{
		$g->kill_kill;
		skip "gdb could not attach to a backend: $gerr", 6;
	}

	# The reader's query stops in the build, goes on once the third hour is in.
	my $during = $reader->query_safe('SELECT count(*) FROM pd');
	# gdb ends by itself once it detached; never wait on it for ever (a
	# breakpoint that was not met would keep it attached)
	$until = time() + 60;
	while (time() < $until && $g->pumpable)
	{
		$g->pump_nb;
		sleep 0.05;
	}
	$g->kill_kill if $g->pumpable;
	$g->finish;
	note "gdb: $gout | $gerr";
	# "finish" stops where the scan returns to: the descriptor's build (gdb
	# prints the source line between the two where it has the source, as
	# for a PostgreSQL built here: SC_PG_CASSERT)
	like($gout, qr/Breakpoint 1, .*find_inheritance_children_extended.*\n(?:.*\n)*?.* in Relation\w*PartitionDesc/,
		'the reader was stopped after its pg_inherits scan');
	is(slurp_file("$dir/third_hour.out"), "t\n",
		'meanwhile the receiver created the third hour and wrote into it');
	is($during, '2', 'the query in flight saw the partitions of its scan: two hours');

	# The receiver's second invalidation comes 100 ms after the window's
	# transaction, or later: wait for it, then the reader reads.
	sleep 1.5;
	is($reader->query_safe('SELECT count(*) FROM pd'), '3', 'the reader\'s next query sees the third hour');
	is($reader->query_safe("SELECT count(*) FROM pd WHERE ts >= to_timestamp($base + 7200)"), '1',
		'and its row');
	is($reader->query_safe("SELECT count(*) FROM pd WHERE ts < to_timestamp($base + 7200)"), '2',
		'and the two hours before');
}
$reader->quit;

is($node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT (_partition, _offset)) FROM pd'),
	'3|3', 'every message once');

$node->stop;
done_testing();
