
# Sealing by a real pg_cron job.  pg_cron is preloaded with streamcube, the
# job is registered with streamcube_schedule_sealing('* * * * *') by an
# admin role nothing else uses (so the seals it journals are the job's), and a
# cube with 1-minute windows receives events stamped with the current
# time.  Nothing in the test seals: the job must (pg_cron runs it at the
# start of each minute, so within about two minutes), as the job's user,
# and cron.job_run_details must show the run as succeeded.  The job
# connects over libpq (pg_cron's default), to the node's socket directory.

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
my $pkglibdir = `pg_config --pkglibdir`;
chomp $pkglibdir;
plan skip_all => 'pg_cron is not installed' unless -e "$pkglibdir/pg_cron.so";

# sc_node sets shared_preload_libraries = 'streamcube': the later line wins.
my $node = sc_node('seal_cron',
	"shared_preload_libraries = 'streamcube,pg_cron'",
	"cron.database_name = 'postgres'",
	"cron.host = '$PostgreSQL::Test::Cluster::test_pghost'");
is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'streamcube,pg_cron', 'streamcube and pg_cron are preloaded');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_cron');
# The job belongs to a role of its own, which nothing else in this test
# uses: a seal journalled as done by it was done by the job, not by this
# test's sessions (which run as the bootstrap superuser).
$node->safe_psql('postgres', q{
	CREATE ROLE cron_sealer LOGIN;
	GRANT streamcube_admin TO cron_sealer;
	GRANT USAGE ON SCHEMA cron TO cron_sealer;
});
my $job = $node->safe_psql('postgres',
	"SET ROLE cron_sealer; SELECT streamcube_schedule_sealing('* * * * *')");
like($job, qr/^\d+$/, "streamcube_schedule_sealing registered pg_cron job $job");
my $user = $node->safe_psql('postgres', "SELECT username FROM cron.job WHERE jobid = $job");
is($user, 'cron_sealer', 'the job runs as the role that scheduled it');
isnt($node->safe_psql('postgres', 'SELECT current_user'), $user,
	"the test's own sessions run as another role");
is( $node->safe_psql('postgres',
		"SELECT schedule, command, active FROM cron.job WHERE jobid = $job"),
	'* * * * *|SELECT public.streamcube_seal_due()|t',
	'the job runs streamcube_seal_due() every minute');

# pg_cron runs the job at the start of each minute: begin early in a
# minute, so that the events are made and consumed, and "nothing is sealed
# yet" checked, before the next run (CI once reached it at 07:48:00.49,
# just after the job of 07:48 had sealed the minute before).
my $into_minute = time % 60;
sleep(61 - $into_minute) if $into_minute > 20;

my $topic = sc_topic('seal_cron');
sc_create_topic($topic, 2);
$node->safe_psql('postgres',
	"SELECT streamcube_create_cube('ev', 'k', '$topic', "
	  . "'ts timestamptz, country text, device text, amount numeric, qty int', "
	  . "'ts', '1 minute')");
is( $node->safe_psql('postgres',
		"SELECT segment_interval, options->'grace' FROM streamcube.cubes WHERE relid = 'ev'::regclass"),
	'00:01:00|', 'the cube has 1-minute windows and the default grace (0)');

# Events of the last 40 seconds and of the next 20: the current minute's
# window and its neighbours get rows; each is due when its minute is over.
my $now = int(time);
sc_produce($topic, count => 600, 'start-ts' => $now - 40, 'step-ms' => 100, seed => 1);
is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"),
	't', 'the events are consumed');
my $k = sc_records_contents(sc_kafka_records($topic));
sc_check_exact($node, 'ev', $k, 'before any seal');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.segment_log WHERE cube = 'ev'::regclass"),
	'0', 'nothing is sealed yet');

# Wait (150 s at most) for the job to seal a window with rows.
my $t0 = time;
my $sealed = 0;
while (time - $t0 < 150)
{
	$sealed = $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.segments WHERE cube = 'ev'::regclass "
		  . "AND state = 'sealed' AND rows > 0");
	last if $sealed > 0;
	sleep(1);
}
note sprintf('a window with rows was sealed after %.0f s', time - $t0);
cmp_ok($sealed, '>', 0, 'the pg_cron job sealed a window with rows within 150 s')
  or diag $node->safe_psql('postgres',
	"SELECT * FROM cron.job_run_details ORDER BY runid");

is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.segment_log WHERE cube = 'ev'::regclass "
		  . "AND action = 'sealed' AND done_by <> '$user'"),
	'0', "every seal is journalled as done by the job's user ($user)");
cmp_ok( $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.segment_log WHERE cube = 'ev'::regclass "
		  . "AND action = 'sealed' AND done_by = '$user'"),
	'>', 0, "the seals are journalled, done by $user");
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM streamcube.segments s JOIN pg_class p ON p.oid = s.relation
		WHERE s.cube = 'ev'::regclass AND s.state = 'sealed'
		  AND (p.relpersistence <> 'p' OR s.window_end > s.sealed_at)}),
	'0', 'the sealed windows are logged tables, sealed after they ended');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM cron.job_run_details WHERE jobid = $job "
		  . "AND command = 'SELECT public.streamcube_seal_due()' AND status = 'succeeded'"),
	'cron.job_run_details shows a succeeded run of SELECT public.streamcube_seal_due()')
  or diag $node->safe_psql('postgres', 'SELECT * FROM cron.job_run_details ORDER BY runid');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM cron.job_run_details WHERE jobid = $job AND status = 'failed'"),
	'0', 'no run of the job failed');

# Sealing moved nothing: every event is still there once.
sc_check_exact($node, 'ev', $k, 'after the job sealed');
sc_check_hours($node, 'ev', $k, 'after the job sealed');

$node->safe_psql('postgres', "SELECT cron.unschedule($job)");
$node->stop;
done_testing();
