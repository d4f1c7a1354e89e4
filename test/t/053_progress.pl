
# streamcube.progress: long work shows how far it is, as PostgreSQL's
# pg_stat_progress_* views show theirs.  Each piece of work is held up
# half-way by another session's lock on a partition it reads next, so
# that what the view says is certain: a seal of three windows after the
# first, a roll-up filled from three sealed partitions after the first.
# Only readers of the cube see the rows; the row goes when the work ends.

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

my $node = sc_node('progress');
sub q1 { return $node->safe_psql('postgres', $_[0]); }

# Three hourly windows two days ago, four partitions.
my $start = int((time - 2 * 86400) / 3600) * 3600;
my $topic = sc_topic('progress');
sc_create_topic($topic, 4);
sc_produce($topic, count => 3 * 360, 'start-ts' => $start, 'step-ms' => 10_000);
sc_create_cube($node, 'ev', $topic);
is(q1("SELECT streamcube_wait('ev', '60 s')"), 't', 'caught up');
q1('CREATE ROLE reader LOGIN; GRANT SELECT ON ev TO reader; CREATE ROLE stranger LOGIN');

# A session that holds a lock on a relation until told to commit.
sub locker
{
	my ($lock) = @_;
	my %h = (in => "BEGIN;\n$lock;\nSELECT 'locked';\n", out => '', err => '');
	$h{harness} = IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres') ],
		'<', \$h{in}, '>', \$h{out}, '2>', \$h{err}, IPC::Run::timeout(120));
	$h{harness}->pump until $h{out} =~ /locked/;
	return \%h;
}

sub release
{
	my ($h) = @_;
	$h->{in} .= "COMMIT;\n";
	$h->{harness}->finish;
	return;
}

# Work in a session of its own; returns when it has started.
sub background
{
	my ($sql) = @_;
	my %h = (out => '', err => '');
	$h{harness} = IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c', $sql ],
		'<', \undef, '>', \$h{out}, '2>', \$h{err}, IPC::Run::timeout(120));
	return \%h;
}

my $progress = "SELECT command, phase, done, total, unit, coalesce(target, '-'), percent "
  . "FROM streamcube.progress WHERE cube = 'ev'::regclass";

# ------------------------------------------------------------------ seal

my @windows = split /\n/, q1("SELECT relation FROM streamcube.segments "
	  . "WHERE cube = 'ev'::regclass AND rows > 0 ORDER BY window_start");
is(scalar(@windows), 3, 'three windows with rows');
my $lock = locker("LOCK TABLE $windows[1] IN ROW EXCLUSIVE MODE");
my $seal = background("SELECT streamcube_seal('ev')");
ok($node->poll_query_until('postgres', "$progress AND done = 1", 'seal|copying windows into logged partitions|1|3|partitions|-|33.3'),
	'a seal held up at its second window: 1 of 3 partitions copied')
  or diag q1('SELECT * FROM streamcube.progress');
is($node->safe_psql('postgres', "SELECT count(*) FROM streamcube.progress", extra_params => [ '-U', 'reader' ]),
	'1', 'a reader of the cube sees it');
is($node->safe_psql('postgres', "SELECT count(*) FROM streamcube.progress", extra_params => [ '-U', 'stranger' ]),
	'0', 'a role that may not read the cube does not');
release($lock);
$seal->{harness}->finish;
like($seal->{out}, qr/^\d+$/, 'the seal ends') or diag $seal->{err};
is(q1('SELECT count(*) FROM streamcube.progress'), '0', 'and its row is gone');

# ------------------------------------------------------ roll-up fill

my @sealed = split /\n/, q1("SELECT relation FROM streamcube.segments "
	  . "WHERE cube = 'ev'::regclass AND state = 'sealed' ORDER BY window_start");
cmp_ok(scalar(@sealed), '>=', 3, 'the windows are sealed');
$lock = locker("LOCK TABLE $sealed[1] IN ACCESS EXCLUSIVE MODE");
my $fill = background("SELECT streamcube_create_rollup('ev', 'ev_per_hour', '1 hour', "
	  . "ARRAY['country'], '{\"n\": \"count(*)\"}')");
ok($node->poll_query_until('postgres', "$progress AND done = 1",
		'fill roll-up|filling sealed partitions|1|' . scalar(@sealed) . '|partitions|public.ev_per_hour|'
		  . sprintf('%.1f', 100 / scalar(@sealed))),
	'a roll-up filled from the cube, held up at its second sealed partition: 1 done')
  or diag q1('SELECT * FROM streamcube.progress');
release($lock);
$fill->{harness}->finish;
is($fill->{err}, '', 'the fill ends') or diag $fill->{err};
is(q1('SELECT count(*) FROM streamcube.progress'), '0', 'and its row is gone');
is(q1('SELECT sum(n) FROM ev_per_hour'), q1('SELECT count(*) FROM ev'), 'the roll-up counts every row');

$node->stop;
done_testing();
