# The launcher: a static background worker that the postmaster starts,
# restarts after it is terminated (bgw_restart_time 5 s) and after a server
# restart; it reloads its configuration on SIGHUP without exiting, and stops
# cleanly with the server.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('launcher');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'streamcube'
streamcube.database = 'postgres'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION streamcube');

my $launcher_q = "SELECT pid FROM pg_stat_activity WHERE backend_type = 'streamcube launcher'";

# Wait until exactly one launcher other than $old runs; returns its pid.
sub wait_launcher
{
	my ($old) = @_;
	my $cond = "SELECT count(*) = 1 AND bool_and(pid <> " . ($old // 0) . ") "
	  . "FROM pg_stat_activity WHERE backend_type = 'streamcube launcher'";
	$node->poll_query_until('postgres', $cond)
	  or return undef;
	return $node->safe_psql('postgres', $launcher_q);
}

# ---------------------------------------------------------------- running
my $pid1 = wait_launcher();
like($pid1, qr/^\d+$/, 'one launcher is running');
is($node->safe_psql('postgres',
		"SELECT datname || ' / ' || application_name FROM pg_stat_activity WHERE pid = $pid1"),
	'postgres / streamcube launcher',
	'it is connected to streamcube.database and named in application_name');
ok($node->log_contains(qr/streamcube launcher started in database "postgres"/),
	'its start is logged');

# ---------------------------------------------------------------- SIGTERM
my $t0 = time;
is($node->safe_psql('postgres', "SELECT pg_terminate_backend($pid1)"), 't',
	'pg_terminate_backend signals the launcher');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid1"),
	'the terminated launcher exits');
my $pid2 = wait_launcher($pid1);
my $restart_s = time - $t0;
ok(defined $pid2 && $pid2 ne $pid1, 'the postmaster starts a new launcher');
cmp_ok($restart_s, '<=', 15, 'within 15 s (bgw_restart_time is 5 s)');
note(sprintf('launcher back after %.1f s', $restart_s));
ok($node->log_contains(
		qr/background worker "streamcube launcher" \(PID $pid1\) exited with exit code 1/),
	'the terminated launcher exited with code 1 (an orderly exit, not a crash)');

# ---------------------------------------------------------------- SIGHUP
my $log_offset = -s $node->logfile;
$node->safe_psql('postgres', "ALTER SYSTEM SET streamcube.launcher_naptime = '1s'");
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
$node->wait_for_log(qr/received SIGHUP, reloading configuration files/, $log_offset);
# give the launcher several wake-ups to process the reload and loop again
sleep 3;
is($node->safe_psql('postgres', $launcher_q), $pid2,
	'after SIGHUP the same launcher is still running');
is($node->safe_psql('postgres', 'SHOW streamcube.launcher_naptime'), '1s',
	'the new naptime is in effect');
my $after_hup = slurp_file($node->logfile, $log_offset);
unlike($after_hup, qr/streamcube launcher.*(exited|terminated)/,
	'the launcher did not exit on SIGHUP');

# ---------------------------------------------------------------- restart
$node->restart;
my $pid3 = wait_launcher($pid2);
ok(defined $pid3, 'after a server restart a launcher runs again');

# ---------------------------------------------------------------- clean stop
$log_offset = -s $node->logfile;
$t0 = time;
$node->stop('fast');
my $stop_s = time - $t0;
cmp_ok($stop_s, '<', 30, 'the server stops promptly with the launcher running');
my $stop_log = slurp_file($node->logfile, $log_offset);
like($stop_log, qr/database system is shut down/, 'the shutdown completes');
unlike($stop_log,
	qr/terminated by signal|exited with exit code [2-9]|terminating any other active server processes/,
	'no process crashed during shutdown');

# over the whole life of the node, nothing crashed
my $all = slurp_file($node->logfile);
unlike($all, qr/terminated by signal|was terminated by exception|PANIC/,
	'no crash in the server log');

done_testing();
