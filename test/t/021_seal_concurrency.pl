
# Sealing against other sessions:
#
#   1. two sessions call streamcube_seal_due() at once (while late messages
#      keep arriving): every due window is sealed exactly once, journalled
#      once, and the rows stay exact;
#   2. a long query holds the cube: the seal copies, retries its swap
#      (lock_timeout 100 ms, every 300 ms) and succeeds once the query is
#      over; meanwhile other sessions' queries on the cube are never held
#      up for more than ~200 ms;
#   3. a lock held longer than the seal's 50 tries: streamcube_seal_due()
#      warns, changes nothing in that cube, seals the others; the next call
#      seals it;
#   4. seal + streamcube_pause, seal + streamcube_drop_cube (keep_data or
#      not), seal_due + drop: no error, no row lost, nothing left over;
#   5. a long query on the view ca_sealed: the seal, which rebuilds it,
#      tries its lock without holding the cube, whose receiver goes on
#      writing; after its 50 tries it fails and changes nothing.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX qw(strftime);

sc_require_env();

my $hour = 3600;
# every window in the past: due for streamcube_seal_due() (grace 0)
my $base = (int(time / $hour) - 12) * $hour;

my $node = sc_node('seal_conc');

sub ts_sql
{
	my ($epoch) = @_;
	return strftime("'%Y-%m-%d %H:%M:%S+00'", gmtime $epoch);
}

my %topic;
sub make_cube
{
	my ($cube, $partitions) = @_;
	$topic{$cube} = sc_topic("seal_conc_$cube");
	sc_create_topic($topic{$cube}, $partitions);
	# Seals one window at a time here; compaction (t/027) is off, or the
	# sealed windows of a past day would merge into one partition.
	sc_create_cube($node, $cube, $topic{$cube}, '{"compact": []}');
	return;
}

sub wait_cube
{
	my ($cube, $label) = @_;
	is($node->safe_psql('postgres', "SELECT streamcube_wait('$cube', '60 s')"),
		't', "$label: streamcube_wait($cube): everything in Kafka is consumed");
	return;
}

# Exact against Kafka, per partition and per hourly window.
sub check_exact
{
	my ($cube, $label) = @_;
	my $k = sc_records_contents(sc_kafka_records($topic{$cube}));
	sc_check_exact($node, $cube, $k, "$label ($cube)");
	sc_check_hours($node, $cube, $k, "$label ($cube)");
	return $k;
}

# No window journalled twice as sealed; each sealed window journalled.
sub check_journal
{
	my ($label) = @_;
	is( $node->safe_psql('postgres',
			"SELECT cube, window_start, count(*) FROM streamcube.segment_log "
			  . "WHERE action = 'sealed' GROUP BY 1, 2 HAVING count(*) <> 1"),
		'', "$label: no window was journalled as sealed more than once");
	is( $node->safe_psql('postgres', q{
			SELECT s.cube, s.window_start FROM streamcube.segments s
			WHERE s.state = 'sealed' AND NOT EXISTS (
			    SELECT 1 FROM streamcube.segment_log l
			    WHERE l.cube = s.cube AND l.window_start = s.window_start AND l.action = 'sealed')}),
		'', "$label: every sealed window is journalled");
	is( $node->safe_psql('postgres',
			"SELECT string_agg(relname, ', ') FROM pg_class WHERE relname LIKE '%\\_sealing%'"),
		'', "$label: no twin of a seal is left over");
	return;
}

sub states
{
	my ($cube, $from, $to) = @_;
	return $node->safe_psql('postgres',
		"SELECT string_agg(state, ',' ORDER BY window_start) FROM streamcube.segments "
		  . "WHERE cube = '$cube'::regclass AND window_start >= " . ts_sql($from)
		  . " AND window_start < " . ts_sql($to));
}

# A session that holds a cube in ACCESS SHARE mode for $secs seconds.
sub hold
{
	my ($cube, $secs, $how) = @_;
	$how //= 'lock';
	my $tag = "hold_${cube}_$secs";
	my $sql = $how eq 'lock'
	  ? "BEGIN; LOCK TABLE $cube IN ACCESS SHARE MODE; SELECT '$tag', pg_sleep($secs); COMMIT"
	  : "BEGIN; SELECT count(*) FROM $cube; SELECT '$tag', pg_sleep($secs); COMMIT";
	my $h = sc_psql_bg($node, $sql);
	ok( $node->poll_query_until('postgres', qq{
			SELECT count(*) > 0 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
			WHERE l.relation = '$cube'::regclass AND l.granted AND a.query LIKE '%''$tag''%'
			  AND a.wait_event = 'PgSleep'}),
		"a session holds $cube ($how) for $secs s");
	return $h;
}

# Wait until a background statement holds a SHARE lock on a window (a seal
# copying, or retrying its swap).
sub wait_seal_holds
{
	my ($sql, $label) = @_;
	ok( $node->poll_query_until('postgres', qq{
			SELECT count(*) > 0 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
			WHERE a.query = \$q\$$sql\$q\$ AND l.locktype = 'relation'
			  AND l.mode = 'ShareLock' AND l.granted}),
		"$label: the seal holds a window (SHARE)");
	return;
}

sub finish_ok
{
	my ($h, $label) = @_;
	my ($rc, $out, $err) = sc_psql_bg_finish($h);
	is($rc, 0, "$label: exit status 0") or diag "stderr: $err";
	is($err, '', "$label: no error or warning");
	return $out;
}

make_cube('ca', 3);
make_cube('cb', 2);
sc_produce($topic{ca}, count => 12_000, 'start-ts' => $base, 'step-ms' => 1800, seed => 1);
sc_produce($topic{cb}, count => 4_000, 'start-ts' => $base, 'step-ms' => 3600, seed => 2);
wait_cube($_, 'setup') for qw(ca cb);

# ---------------------------------------------------------------- 1
# Two streamcube_seal_due() at once.  A session holds ca for 2 s so that
# the two are certainly running together (the first waits to swap, the
# second for the first); late messages for the windows keep coming.
my $late = sc_produce_start($topic{ca}, count => 3_000, rate => 1_000,
	'start-ts' => $base + 1, 'step-ms' => 7199, seed => 3);
my $h1 = hold('ca', 2);
my @seals = map { sc_psql_bg($node, 'SELECT streamcube_seal_due()') } 1 .. 2;
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM pg_stat_activity WHERE query = 'SELECT streamcube_seal_due()' AND state = 'active'"),
	'1: two streamcube_seal_due() run at once');
my @n = map { finish_ok($_, '1: streamcube_seal_due()') } @seals;
finish_ok($h1, '1: the session holding ca');
note "1: the two calls sealed $n[0] and $n[1] windows";
my $journalled = $node->safe_psql('postgres',
	"SELECT count(*) FROM streamcube.segment_log WHERE action = 'sealed'");
cmp_ok($n[0] + $n[1], '>=', 10, '1: together they sealed the 6 + 4 windows with rows (at least)');
is($n[0] + $n[1], $journalled, '1: as many windows journalled as sealed');
is(states('ca', $base, $base + 6 * $hour), join(',', ('sealed') x 6), '1: the 6 windows of ca are sealed');
is(states('cb', $base, $base + 4 * $hour), join(',', ('sealed') x 4), '1: the 4 windows of cb are sealed');
check_journal('1');
ok(sc_produce_finish($late), '1: the late messages are delivered');
wait_cube($_, '1') for qw(ca cb);
check_exact($_, '1: after two concurrent seal_due') for qw(ca cb);
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.segments WHERE cube = 'ca'::regclass "
		  . "AND state = 'sealed' AND rows > 0"),
	'6', '1: the late rows went into the sealed windows (no other window has rows)');

# ---------------------------------------------------------------- 2
# A long query holds ca: the seal waits for it without holding up others.
sc_produce($topic{ca}, count => 1_200, 'start-ts' => $base - 2 * $hour,
	'step-ms' => 6000, seed => 4);
wait_cube('ca', '2');
is(states('ca', $base - 2 * $hour, $base), 'active,active', '2: two new windows are due');

my $reader = $node->background_psql('postgres');
my $count_sql = "SELECT count(*) FROM ca WHERE ts > now() - interval '100 years'";
$reader->query_safe($count_sql);
my $long = hold('ca', 3, 'query');
my $t0 = time;
my $seal = sc_psql_bg($node, "SELECT streamcube_seal('ca')");
# What the seal waits for, sampled every 5 ms by another session until it
# is gone: the lock (a try of its swap), or the pause between tries.
my $sampler = sc_psql_bg($node, q{
	DO $$
	DECLARE
		w text;
		seen text[] := '{}';
		hit boolean := false;
	BEGIN
		FOR i IN 1 .. 6000 LOOP
			PERFORM pg_stat_clear_snapshot();
			SELECT wait_event_type || ':' || wait_event INTO w FROM pg_stat_activity
			WHERE query = $q$SELECT streamcube_seal('ca')$q$;
			IF FOUND THEN
				hit := true;
				IF w IS NOT NULL AND NOT w = ANY (seen) THEN
					seen := seen || w;
				END IF;
			ELSIF hit THEN
				EXIT;
			END IF;
			PERFORM pg_sleep(0.005);
		END LOOP;
		RAISE NOTICE 'seen: %', array_to_string(seen, ' ');
	END $$});
my @lat;
while (sc_psql_bg_running($seal) && time - $t0 < 60)
{
	my $t = time;
	$reader->query_safe($count_sql);
	push @lat, [ time - $t, $t - $t0 ];
	sleep(0.01);
}
my $out = finish_ok($seal, '2: the seal held up by a long query');
my $took = time - $t0;
cmp_ok($out, '>=', 2, "2: it sealed the two windows ($out)");
cmp_ok($took, '>', 2, sprintf('2: it waited for the long query to end (%.1f s)', $took));
finish_ok($long, '2: the long query');
is(states('ca', $base - 2 * $hour, $base), 'sealed,sealed', '2: the two windows are sealed');
my @sorted = sort { $b->[0] <=> $a->[0] } @lat;
note sprintf('2: %d queries of other sessions meanwhile; slowest %s (ms, at s after the seal began)',
	scalar(@lat),
	join(', ', map { sprintf('%.0f at %.2f', $_->[0] * 1000, $_->[1]) }
		  @sorted[0 .. ($#sorted < 4 ? $#sorted : 4)]));
cmp_ok(scalar(@lat), '>=', 10, '2: other sessions queried the cube all along');
my (undef, undef, $seen) = sc_psql_bg_finish($sampler);
note "2: the seal was $seen";
like($seen, qr/Lock:relation/, '2: the seal was seen waiting for its lock (a try)');
like($seen, qr/Extension:Extension/, '2: and seen pausing between tries');
cmp_ok($sorted[0][0] * 1000, '<', 250,
	'2: no query of another session waited more than ~200 ms for the seal');
$reader->quit;
check_journal('2');
check_exact('ca', '2');

# ---------------------------------------------------------------- 3
# ca stays locked longer than the 50 tries: seal_due warns and goes on.
sc_produce($topic{ca}, count => 1_200, 'start-ts' => $base - 4 * $hour,
	'step-ms' => 6000, seed => 5);
sc_produce($topic{cb}, count => 800, 'start-ts' => $base - 2 * $hour,
	'step-ms' => 9000, seed => 6);
wait_cube($_, '3') for qw(ca cb);
my $before = $node->safe_psql('postgres', 'SELECT count(*) FROM ca');
my $h3 = hold('ca', 60);
$t0 = time;
my ($rc, $err);
($rc, $out, $err) = sc_psql_bg_finish(sc_psql_bg($node, 'SELECT streamcube_seal_due()'));
$took = time - $t0;
note sprintf('3: streamcube_seal_due() returned %s after %.1f s', $out, $took);
is($rc, 0, '3: streamcube_seal_due() does not fail');
like($err, qr/WARNING:  could not seal cube \S+: could not seal window .* of cube public\.ca: its table or its sealed views stayed locked/,
	'3: it warns that ca stayed locked');
cmp_ok($out, '>=', 2, '3: it sealed the two due windows of cb');
is(states('cb', $base - 2 * $hour, $base), 'sealed,sealed', '3: cb: sealed');
is(states('ca', $base - 4 * $hour, $base - 2 * $hour), 'active,active', '3: ca: still active');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.segment_log WHERE cube = 'ca'::regclass "
		  . "AND window_start < " . ts_sql($base - 2 * $hour)),
	'0', '3: ca: nothing journalled');
is($node->safe_psql('postgres', 'SELECT count(*) FROM ca'), $before, '3: ca: the same rows');
$node->safe_psql('postgres',
	"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%''hold_ca_60''%' AND pid <> pg_backend_pid()");
sc_psql_bg_finish($h3);
cmp_ok($node->safe_psql('postgres', 'SELECT streamcube_seal_due()'), '>=', 2,
	'3: once ca is free, the next streamcube_seal_due() seals its windows');
is(states('ca', $base - 4 * $hour, $base - 2 * $hour), 'sealed,sealed', '3: ca: sealed');
check_journal('3');
check_exact($_, '3') for qw(ca cb);

# ---------------------------------------------------------------- 4
# streamcube_pause while a seal waits to swap.
sc_produce($topic{ca}, count => 1_200, 'start-ts' => $base - 6 * $hour,
	'step-ms' => 6000, seed => 7);
wait_cube('ca', '4');
my $h4 = hold('ca', 2);
my $seal_sql = "SELECT streamcube_seal('ca')";
$seal = sc_psql_bg($node, $seal_sql);
wait_seal_holds($seal_sql, '4 pause');
$t0 = time;
my $pause = sc_psql_bg($node, "SELECT streamcube_pause('ca')");
finish_ok($pause, '4: streamcube_pause during the seal');
note sprintf('4: streamcube_pause took %.2f s', time - $t0);
is(finish_ok($seal, '4: the seal during streamcube_pause'), '2', '4: the seal sealed its two windows');
finish_ok($h4, '4: the session holding ca');
is(states('ca', $base - 6 * $hour, $base - 4 * $hour), 'sealed,sealed', '4: sealed');
ok( $node->poll_query_until('postgres',
		"SELECT state = 'paused' FROM streamcube.consumers WHERE cube = 'ca'::regclass"),
	'4: the cube is paused');
# messages while paused: late ones for sealed windows, and a new window
$before = $node->safe_psql('postgres', 'SELECT count(*) FROM ca');
sc_produce($topic{ca}, count => 600, 'start-ts' => $base - 7 * $hour,
	'step-ms' => 18_000, seed => 8);
is($node->safe_psql('postgres', "SELECT streamcube_seal('ca')"), '0',
	'4: sealing the paused cube finds nothing more to seal');
sleep(1);
is($node->safe_psql('postgres', 'SELECT count(*) FROM ca'), $before,
	'4: nothing is ingested while paused');
$node->safe_psql('postgres', "SELECT streamcube_resume('ca')");
wait_cube('ca', '4, resumed');
check_journal('4');
check_exact('ca', '4, resumed');

# streamcube_drop_cube(keep_data => true) while a seal waits to swap.
make_cube('cc', 2);
sc_produce($topic{cc}, count => 3_000, 'start-ts' => $base, 'step-ms' => 3600, seed => 9);
wait_cube('cc', '4');
my $kc = sc_records_contents(sc_kafka_records($topic{cc}));
my $h5 = hold('cc', 2);
$seal_sql = "SELECT streamcube_seal('cc')";
$seal = sc_psql_bg($node, $seal_sql);
wait_seal_holds($seal_sql, '4 drop keep_data');
my $drop = sc_psql_bg($node, "SELECT streamcube_drop_cube('cc', keep_data => true)");
finish_ok($h5, '4: the session holding cc');
my ($seal_rc, $seal_out, $seal_err) = sc_psql_bg_finish($seal);
my ($drop_rc, $drop_out, $drop_err) = sc_psql_bg_finish($drop);
note "4: seal: exit $seal_rc, '$seal_out', '$seal_err'; drop: exit $drop_rc, '$drop_err'";
is("$seal_rc|$seal_err", '0|', '4: the seal during streamcube_drop_cube(keep_data) succeeds');
is("$drop_rc|$drop_err", '0|', '4: streamcube_drop_cube(keep_data) during the seal succeeds');
is($node->safe_psql('postgres', "SELECT count(*) FROM streamcube.cubes WHERE relid::text = 'cc'"),
	'0', '4: cc is no longer a cube');
sc_check_exact($node, 'cc', $kc, '4: the table cc kept');
sc_check_hours($node, 'cc', $kc, '4: the table cc kept');

# streamcube_drop_cube while streamcube_seal_due() waits to swap (the
# other cubes have nothing due: the seal waits in cd).
$node->safe_psql('postgres', 'SELECT streamcube_seal_due()');
make_cube('cd', 2);
sc_produce($topic{cd}, count => 3_000, 'start-ts' => $base, 'step-ms' => 3600, seed => 10);
wait_cube('cd', '4');
my $h6 = hold('cd', 2);
$seal_sql = 'SELECT streamcube_seal_due()';
$seal = sc_psql_bg($node, $seal_sql);
wait_seal_holds($seal_sql, '4 drop');
$drop = sc_psql_bg($node, "SELECT streamcube_drop_cube('cd')");
finish_ok($h6, '4: the session holding cd');
($seal_rc, $seal_out, $seal_err) = sc_psql_bg_finish($seal);
($drop_rc, $drop_out, $drop_err) = sc_psql_bg_finish($drop);
note "4: seal_due: exit $seal_rc, '$seal_out', '$seal_err'; drop: exit $drop_rc, '$drop_err'";
is("$seal_rc|$seal_err", '0|', '4: streamcube_seal_due() during streamcube_drop_cube succeeds, no warning');
is("$drop_rc|$drop_err", '0|', '4: streamcube_drop_cube during streamcube_seal_due() succeeds');
is( $node->safe_psql('postgres',
		"SELECT string_agg(relname, ', ') FROM pg_class WHERE relname = 'cd' OR relname LIKE 'cd\\_%'"),
	'', '4: nothing of cd is left');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.segment_catalog s LEFT JOIN streamcube.cubes c USING (cube_id) WHERE c.cube_id IS NULL"),
	'0', '4: the catalog keeps no window of a dropped cube');

# ---------------------------------------------------------------- 5
# A long query reads ca's view of its sealed windows (ca_sealed) while ca
# has windows due.  A seal rebuilds that view, under an ACCESS EXCLUSIVE
# lock that waits for the query: the seal must wait for it without holding
# the cube, whose receiver goes on writing meanwhile, and after its 50
# tries fail saying so, having changed nothing; once the query is over the
# next seal seals.
sc_produce($topic{ca}, count => 1_200, 'start-ts' => $base - 10 * $hour,
	'step-ms' => 6000, seed => 11);
wait_cube('ca', '5');
is(states('ca', $base - 10 * $hour, $base - 8 * $hour), 'active,active', '5: two new windows are due');
my $view_tag = 'hold_ca_sealed';
my $hv = sc_psql_bg($node,
	"BEGIN; SELECT count(*) FROM ca_sealed; SELECT '$view_tag', pg_sleep(40); COMMIT");
ok( $node->poll_query_until('postgres', qq{
		SELECT count(*) > 0 FROM pg_stat_activity
		WHERE query LIKE '%''$view_tag''%' AND wait_event = 'PgSleep' AND pid <> pg_backend_pid()}),
	'5: a session reads ca_sealed in a long transaction');
$seal_sql = "SELECT streamcube_seal('ca')";
$t0 = time;
$seal = sc_psql_bg($node, $seal_sql);
wait_seal_holds($seal_sql, '5');
# past its copy: it waits for a lock (the view's; before 0.4.0, holding
# the cube's table, after its swap)
ok( $node->poll_query_until('postgres', qq{
		SELECT count(*) > 0 FROM pg_stat_activity
		WHERE query = \$q\$$seal_sql\$q\$ AND wait_event_type = 'Lock'}),
	'5: the seal waits for a lock');
$before = $node->safe_psql('postgres', 'SELECT count(*) FROM ca');
sc_produce($topic{ca}, count => 300, 'start-ts' => int(time) - 60, 'step-ms' => 100, seed => 12);
my $t_rows = time;
my $written = 0;
while (!$written && time - $t_rows < 10)
{
	$written = $node->safe_psql('postgres', "SELECT count(*) = $before + 300 FROM ca") eq 't';
	sleep(0.1) unless $written;
}
ok($written, sprintf('5: the receiver writes new messages into ca while the seal waits for the view (in %.1f s)',
		time - $t_rows));
ok(sc_psql_bg_running($seal), sprintf('5: ... and the seal was still waiting then (%.1f s after it began)',
		time - $t0));
($rc, $out, $err) = sc_psql_bg_finish($seal);
$took = time - $t0;
note sprintf('5: the seal ended after %.1f s', $took);
isnt($rc, 0, '5: the seal fails once its tries are spent');
like($err, qr/ERROR:  could not seal window .* of cube public\.ca: its table or its sealed views stayed locked/,
	'5: it says the cube or its sealed views stayed locked');
like($err, qr/HINT:  A long query or transaction holds the cube or reads one of those views\. Nothing was changed/,
	'5: its hint says what holds them, and that nothing changed');
is(states('ca', $base - 10 * $hour, $base - 8 * $hour), 'active,active', '5: the windows are still active');
$node->safe_psql('postgres',
	"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%''$view_tag''%' AND pid <> pg_backend_pid()");
sc_psql_bg_finish($hv);
cmp_ok($node->safe_psql('postgres', "SELECT streamcube_seal('ca')"), '>=', 2,
	'5: once the view is free, the next seal seals them');
is(states('ca', $base - 10 * $hour, $base - 8 * $hour), 'sealed,sealed', '5: sealed');
wait_cube('ca', '5');
check_journal('5');
check_exact('ca', '5');

# the other cubes are untouched
check_journal('end');
check_exact($_, 'end') for qw(ca cb);
is( $node->safe_psql('postgres',
		"SELECT string_agg(cube::text || ':' || state, ', ' ORDER BY cube::text) FROM streamcube.consumers"),
	'ca:running, cb:running', 'end: ca and cb run');

$node->stop;
done_testing();
