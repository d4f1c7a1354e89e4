
# Lag in time: streamcube.lag() and streamcube.consumers show how old (by
# Kafka timestamp) the oldest message not consumed yet is, 0 when the cube
# is caught up.  While a cube is paused its lag in time rises, as lag()
# shows (it reads the waiting message's stamp from Kafka); consumers shows
# the lag too (the paused receiver asks Kafka for the ends every 10 s), its
# wait bounded by the server's clock.  The messages'
# stamps are the producer's (CreateTime, sckafka --meta: event time + 1 h),
# checked against what kcat reads back.

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

my $node = sc_node('lag_time');
sub q1 { return $node->safe_psql('postgres', $_[0]); }

# partition => [offset, timestamp ms] of every message
sub stamps
{
	my ($topic) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'kcat', '-C', '-b', $ENV{SC_KAFKA}, '-t', $topic,
			'-o', 'beginning', '-e', '-q', '-f', '%p %o %T\n' ],
		'<', \undef, '>', \$out, '2>', \$err)
	  or die "kcat -C failed: $err";
	my %s;
	for (split /\n/, $out)
	{
		my ($p, $o, $t) = split / /;
		$s{$p}{$o} = $t;
	}
	return \%s;
}

my $topic = sc_topic('lag_time');
sc_create_topic($topic, 2);
my $now = int(time);
# stamped an hour and 200 s to an hour ago (event time + 1 h)
sc_produce($topic, count => 200, meta => 1, 'start-ts' => $now - 7200 - 200, 'step-ms' => 1000);
sc_create_cube($node, 'lt', $topic);
is(q1("SELECT streamcube_wait('lt', '60 s')"), 't', 'caught up');
is(q1("SELECT string_agg(format('%s:%s:%s', partition, lag_seconds, oldest_unconsumed_at IS NULL), ',' ORDER BY partition) "
		  . "FROM streamcube.lag('lt')"),
	'0:0:t,1:0:t', 'lag(): 0 s and no waiting message when caught up');
is(q1("SELECT lag_seconds FROM streamcube.consumers WHERE cube = 'lt'::regclass"), '0.000',
	'consumers: 0 s when caught up');

q1("SELECT streamcube_pause('lt')");
sleep(1.5);
# stamped an hour to an hour less 100 s ago: they wait while the cube is paused
sc_produce($topic, count => 100, meta => 1, 'start-ts' => $now - 7200, 'step-ms' => 1000, seed => 2);
my $s = stamps($topic);
my $first = q1("SELECT string_agg(format('%s:%s', partition, (extract(epoch FROM oldest_unconsumed_at) * 1000)::bigint), ',' ORDER BY partition) "
	  . "FROM streamcube.lag('lt')");
is($first, "0:$s->{0}{100},1:$s->{1}{100}",
	'lag(): the oldest message not consumed is the one at each position, with its Kafka timestamp');
my $lag1 = q1("SELECT max(lag_seconds) FROM streamcube.lag('lt')");
cmp_ok($lag1, '>=', 3590, 'lag(): about an hour while paused');
cmp_ok($lag1, '<', 3700, '... and not more');
sleep(2);
my $lag2 = q1("SELECT max(lag_seconds) FROM streamcube.lag('lt')");
cmp_ok($lag2 - $lag1, '>=', 1.5, "lag(): rising while paused ($lag1 s, then $lag2 s)");
# A paused receiver asks Kafka for the ends every 10 s: the 100 messages
# show in consumers too, their wait bounded by the server's clock (the
# partitions were caught up when the cube paused, seconds ago: the
# messages' stamps, an hour old, are not how long they have waited here).
ok($node->poll_query_until('postgres',
		"SELECT lag = 100 FROM streamcube.consumers WHERE cube = 'lt'::regclass"),
	'consumers: while paused, lag counts what waits (Kafka asked every 10 s)');
my $paused_lag = q1("SELECT lag_seconds FROM streamcube.consumers WHERE cube = 'lt'::regclass");
cmp_ok($paused_lag, '<', 60, "consumers: lag_seconds counts from when the cube was caught up, by the server's clock ($paused_lag s)");

q1("SELECT streamcube_resume('lt')");
is(q1("SELECT streamcube_wait('lt', '60 s')"), 't', 'caught up again');
is(q1("SELECT max(lag_seconds), bool_and(oldest_unconsumed_at IS NULL) FROM streamcube.lag('lt')"), '0|t',
	'lag(): 0 s again');
is(q1("SELECT lag_seconds FROM streamcube.consumers WHERE cube = 'lt'::regclass"), '0.000',
	'consumers: 0 s again');

$node->stop;
done_testing();
