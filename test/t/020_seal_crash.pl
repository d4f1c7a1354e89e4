
# Sealing and crashes.  Four rounds; in each, a background producer writes
# events spread over three hourly windows in the past while the test seals
# them progressively (streamcube_seal with a growing older_than, so a window
# may be sealed while its messages are still arriving: those become late
# rows), produces late messages into windows already sealed, and crashes
# PostgreSQL at a random moment (srand: the same moments every run):
#
#   round 0  pg_ctl stop -m immediate, then start;
#   round 1  SIGKILL of the receiver while a seal is running (its swap is
#            held back by a session that holds the cube), so the postmaster
#            reinitialises under the seal: the seal must leave nothing;
#   round 2  stop -m immediate after windows were sealed; while PostgreSQL
#            is down, Kafka deletes every record below the checkpoints: the
#            receivers must start again from the checkpoints (reading from
#            the cube's start would meet the deleted range and pause);
#   round 3  SIGKILL of the receiver a random moment after a seal started
#            in the background (before, during or after it).
#
# Crash recovery empties the UNLOGGED active windows and consume positions;
# sealed windows, their sealed_upto and the checkpoints are logged.  After
# each round the cube must be exact against what Kafka holds (and held,
# before the deletion): every good message once, per partition and per
# hourly window, with a single 'sealed' journal row per sealed window.

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
srand(20_020);

my $partitions = 3;
my $per_round = 24_000;    # over 3 hourly windows: 8,000 each
my $rate = 4_000;          # so about 6 s per round
my $late_count = 300;
my $hour = 3600;
# Every window lies well in the past: streamcube_seal refuses older_than
# after now.  Round r writes the windows base + 4r h .. base + 4r h + 3 h.
my $base = (int(time / $hour) - 24) * $hour;

my $node = sc_node('seal_crash', 'restart_after_crash = on');
my $topic = sc_topic('seal_crash');
sc_create_topic($topic, $partitions);
sc_create_cube($node, 'ev', $topic);

# What Kafka holds or held: reads are merged, so records deleted in round 2
# are still expected in the cube (they are in its sealed windows).
my %records;
sub refresh_records
{
	my $now = sc_kafka_records($topic);
	@records{ keys %$now } = values %$now;
	return;
}

sub ts_sql
{
	my ($epoch) = @_;
	return strftime("'%Y-%m-%d %H:%M:%S+00'", gmtime $epoch);
}

sub receiver_pid
{
	return $node->safe_psql('postgres',
		"SELECT pid FROM streamcube.consumers WHERE cube = 'ev'::regclass");
}

sub wait_running
{
	my ($label) = @_;
	ok( $node->poll_query_until('postgres',
			"SELECT state = 'running' FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
		"$label: the receiver runs again")
	  or diag $node->safe_psql('postgres', 'SELECT * FROM streamcube.consumers');
	return;
}

# Crash: stop -m immediate and start, or SIGKILL the receiver and wait for
# the postmaster's reinitialisation.
sub crash
{
	my ($mode, $label, $while_down) = @_;
	if ($mode eq 'immediate')
	{
		$node->stop('immediate');
		$while_down->() if $while_down;
		$node->start;
		pass("$label: stopped -m immediate and started again");
	}
	else
	{
		my $pid = receiver_pid();
		my $log_offset = -s $node->logfile;
		ok(kill('KILL', $pid), "$label: SIGKILL to the receiver (pid $pid)");
		$node->wait_for_log(
			qr/all server processes terminated; reinitializing.*database system is ready to accept connections/s,
			$log_offset);
		pass("$label: the postmaster went through crash recovery");
	}
	note "$label: crashed ($mode), " . sc_elapsed();
	wait_running($label);
	return;
}

# Whatever happened, the catalog must agree with itself: a window is sealed
# exactly when it was journalled once as sealed; a sealed window is a
# logged table, an active one unlogged; no half-made twin is left.
sub check_catalog
{
	my ($label) = @_;
	is( $node->safe_psql('postgres', q{
			SELECT count(*) FROM streamcube.segments s JOIN pg_class p ON p.oid = s.relation
			WHERE s.cube = 'ev'::regclass
			  AND ((s.state = 'sealed') <> ((SELECT count(*) FROM streamcube.segment_log l
			                                 WHERE l.cube = s.cube AND l.window_start = s.window_start
			                                   AND l.action = 'sealed') = 1)
			       OR p.relpersistence <> CASE s.state WHEN 'sealed' THEN 'p' ELSE 'u' END
			       OR (s.state = 'sealed') <> (s.sealed_at IS NOT NULL AND s.sealed_upto IS NOT NULL))}),
		'0',
		"$label: each window is sealed (logged, with sealed_at and sealed_upto) iff journalled once as sealed");
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM streamcube.segment_log WHERE cube = 'ev'::regclass "
			  . "GROUP BY window_start, action HAVING count(*) > 1"),
		'', "$label: no window was journalled twice");
	is( $node->safe_psql('postgres',
			"SELECT string_agg(relname, ', ') FROM pg_class WHERE relname LIKE 'ev\\_%sealing%'"),
		'', "$label: no twin of a seal is left over");
	return;
}

sub check_exact
{
	my ($label) = @_;
	refresh_records();
	my $k = sc_records_contents(\%records);
	sc_check_exact($node, 'ev', $k, $label);
	sc_check_hours($node, 'ev', $k, $label);
	# streamcube.segments counts the same per window
	my $want = join("\n",
		map { "$_|$k->{hours}{$_}" } sort keys %{ $k->{hours} });
	is( $node->safe_psql('postgres',
			"SELECT to_char(window_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24'), rows "
			  . "FROM streamcube.segments WHERE cube = 'ev'::regclass AND rows > 0 ORDER BY 1"),
		$want, "$label: streamcube.segments shows the same rows per window");
	return $k;
}

# streamcube_wait, with what the receiver is doing when it times out.
sub wait_consumed
{
	my ($label) = @_;
	is($node->safe_psql('postgres', "SELECT streamcube_wait('ev', '60 s')"),
		't', "$label: streamcube_wait: everything in Kafka is consumed")
	  or diag join("\n", map { $node->safe_psql('postgres', $_) } (
		"SELECT * FROM streamcube.consumers",
		"SELECT * FROM streamcube.consume_positions",
		"SELECT * FROM streamcube.checkpoints",
		"SELECT partition, high_watermark FROM streamcube_check_cluster('k') WHERE topic = '$topic'",
		"SELECT pid, backend_type, state, wait_event_type, wait_event, xact_start, query FROM pg_stat_activity",
		"SELECT locktype, relation::regclass, mode, granted, pid FROM pg_locks WHERE NOT granted",
		"SELECT window_start, state, rows, relation, sealed_upto FROM streamcube.segments WHERE cube = 'ev'::regclass ORDER BY 1"));
	return;
}

sub seal
{
	my ($upto, $label) = @_;
	my $n = $node->safe_psql('postgres',
		"SELECT streamcube_seal('ev', " . ts_sql($upto) . ")");
	note "$label: streamcube_seal(ev, " . ts_sql($upto) . ") sealed $n, " . sc_elapsed();
	return $n;
}

# What psql says when a crash ends (or refuses) its session.
my $crash_re = qr/terminating connection|server closed the connection|connection to server was lost|the database system is (?:in recovery mode|shutting down|starting up)/;

my @modes = qw(immediate kill immediate kill);
my $total_sealed = 0;

for my $round (0 .. 3)
{
	my $w = $base + 4 * $hour * $round;
	my $mode = $modes[$round];
	my $R = "round $round";
	note "$R: windows from " . ts_sql($w) . ", crash by $mode";

	my $producer = sc_produce_start($topic, count => $per_round,
		rate => $rate, 'start-ts' => $w,
		'step-ms' => 3 * $hour * 1000 / $per_round, seed => 10 + $round);

	# Late messages: into the previous round's (sealed) windows and this
	# round's first window (sealed by then or not); in round 0 into this
	# round's first window only.
	my $late_from = $round == 0 ? $w : $w - 4 * $hour;
	my $late_span = $round == 0 ? $hour : 5 * $hour;
	my %actions = (
		seal1 => sub { seal($w + $hour, "$R seal1") },
		late => sub {
			sc_produce($topic, count => $late_count, 'start-ts' => $late_from,
				'step-ms' => $late_span * 1000 / $late_count,
				seed => 100 + $round);
			note "$R: $late_count late messages produced, " . sc_elapsed();
		},
		seal2 => sub { seal($w + 2 * $hour, "$R seal2") },
	);
	my @order = qw(seal1 late seal2);

	# Wait until ingest of the round is under way.
	ok( $node->poll_query_until('postgres',
			"SELECT count(*) > 1000 FROM ev WHERE ts >= " . ts_sql($w)),
		"$R: ingest is under way");

	if ($round == 0 || $round == 3)
	{
		# the crash at a random place among the actions (round 3: always
		# after seal1, and right after a background seal2 began)
		my $at = $round == 0 ? int(rand(4)) : 2;
		for my $i (0 .. $#order)
		{
			if ($i == $at)
			{
				last if $round == 3;
				sleep(rand(1.5));
				crash($mode, $R);
			}
			sleep(0.3 + rand(1.2));
			$actions{ $order[$i] }->();
		}
		crash($mode, $R) if $at == 3 && $round == 0;
		if ($round == 3)
		{
			sleep(0.3 + rand(1.2));
			my $before = $node->safe_psql('postgres',
				"SELECT count(*) FROM streamcube.segment_log WHERE cube = 'ev'::regclass");
			my $seal = sc_psql_bg($node,
				"SELECT streamcube_seal('ev', " . ts_sql($w + 2 * $hour) . ")");
			my $delay = rand(0.06);
			sleep($delay);
			note sprintf('%s: crash %.0f ms after the background seal began', $R, $delay * 1000);
			crash($mode, $R);
			my ($rc, $out, $err) = sc_psql_bg_finish($seal);
			note "$R: background seal: exit $rc, out '$out', err '$err'";
			my $after = $node->safe_psql('postgres',
				"SELECT count(*) FROM streamcube.segment_log WHERE cube = 'ev'::regclass");
			if ($rc == 0)
			{
				is($after - $before, $out,
					"$R: the seal committed before the crash: its $out windows are journalled");
			}
			else
			{
				like($err, $crash_re, "$R: the seal was cut short by the crash");
				is($after, $before, "$R: the seal that was cut short journalled nothing");
				# seal again, now that it runs on a recovered server
				$actions{seal2}->();
			}
		}
	}
	elsif ($round == 1)
	{
		for my $a (qw(seal1 late))
		{
			sleep(0.3 + rand(1.2));
			$actions{$a}->();
		}

		# A session holds the cube (ACCESS SHARE): seal2 copies its windows,
		# then retries the swap; the receiver is killed meanwhile.
		my $win = ts_sql($w + $hour);
		ok( $node->poll_query_until('postgres',
				"SELECT count(*) > 0 FROM ev WHERE ts >= $win"),
			"$R: the window of " . ts_sql($w + $hour) . " receives rows");
		my $holder = sc_psql_bg($node,
			'BEGIN; LOCK TABLE ev IN ACCESS SHARE MODE; SELECT pg_sleep(120); COMMIT');
		ok( $node->poll_query_until('postgres', q{
				SELECT count(*) > 0 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
				WHERE l.relation = 'ev'::regclass AND l.granted AND a.query LIKE '%pg_sleep(120)%'}),
			"$R: a session holds the cube");
		my $seal = sc_psql_bg($node,
			"SELECT streamcube_seal('ev', " . ts_sql($w + 2 * $hour) . ")");
		ok( $node->poll_query_until('postgres', qq{
				SELECT count(*) > 0 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
				JOIN streamcube.segments s ON s.relation = l.relation::regclass
				WHERE a.query LIKE 'SELECT streamcube_seal%' AND l.mode = 'ShareLock' AND l.granted
				  AND s.window_start = $win}),
			"$R: the seal holds the window of " . ts_sql($w + $hour) . " (SHARE)");
		sleep(1 + rand(1));    # its swap is retried meanwhile
		ok(sc_psql_bg_running($seal), "$R: the seal is still running (retrying its swap)");
		crash($mode, "$R, during the seal");
		my ($rc, $out, $err) = sc_psql_bg_finish($seal);
		isnt($rc, 0, "$R: the seal did not complete");
		like($err, $crash_re, "$R: the seal's session was ended by the crash")
		  or diag "seal: exit $rc, out '$out', err '$err'";
		sc_psql_bg_finish($holder);
		is( $node->safe_psql('postgres',
				"SELECT state FROM streamcube.segments WHERE cube = 'ev'::regclass AND window_start = $win"),
			'active', "$R: the window the seal was sealing is still active");
		is( $node->safe_psql('postgres',
				"SELECT count(*) FROM streamcube.segment_log WHERE cube = 'ev'::regclass AND window_start = $win"),
			'0', "$R: and was not journalled");
		check_catalog("$R, right after the crash during a seal");
		$actions{seal2}->();
	}
	else
	{
		# round 2: seal, then crash; delete below the checkpoints while down
		for my $a (@order)
		{
			sleep(0.3 + rand(1.2));
			$actions{$a}->();
		}
		my %ckpt = map { split /\|/ } split /\n/,
		  $node->safe_psql('postgres',
			"SELECT k.partition, k.\"offset\" FROM streamcube.checkpoints k "
			  . "JOIN streamcube.cubes c USING (cube_id) WHERE c.relid = 'ev'::regclass");
		my %low = map { $_ => sc_first_offset($topic, $_) } 0 .. $partitions - 1;
		note "$R: checkpoints " . join(', ', map { "$_: $ckpt{$_}" } sort keys %ckpt)
		  . "; Kafka starts at " . join(', ', map { "$_: $low{$_}" } sort keys %low);
		is(scalar(grep { $ckpt{$_} > $low{$_} } 0 .. $partitions - 1), $partitions,
			"$R: every partition's checkpoint is past the first offset Kafka holds");
		refresh_records();    # what is deleted next is still expected
		crash($mode, $R, sub {
			sc_delete_records_below($topic, \%ckpt);
			is( join(',', map { sc_first_offset($topic, $_) } 0 .. $partitions - 1),
				join(',', map { $ckpt{$_} } 0 .. $partitions - 1),
				"$R: while PostgreSQL is down, Kafka deleted every record below the checkpoints");
		});
	}

	check_catalog("$R, after the crash");
	ok(sc_produce_finish($producer), "$R: the producer delivered all $per_round messages");
	wait_consumed($R);
	is( $node->safe_psql('postgres',
			"SELECT state, last_error IS NULL FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
		'running|t', "$R: the cube runs and reports no error (it was not paused)");
	check_exact("$R, after the crash");

	# Seal the rest of the round's windows: checkpoints then reach the
	# positions, and the rows are still exact.
	seal($w + 4 * $hour, "$R final seal");
	check_catalog("$R, all sealed");
	check_exact("$R, all sealed");
	my $k = sc_records_contents(\%records);
	my $want = join(',', map { $k->{partitions}{$_}{high} } 0 .. $partitions - 1);
	is( $node->safe_psql('postgres',
			"SELECT array_to_string(positions, ','), array_to_string(checkpoints, ',') "
			  . "FROM streamcube.consumers WHERE cube = 'ev'::regclass"),
		"$want|$want",
		"$R: every window with rows is sealed: the checkpoints are the positions, Kafka's high watermarks");
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM streamcube.segments WHERE cube = 'ev'::regclass "
			  . "AND state = 'active' AND window_start < " . ts_sql($w + 4 * $hour)),
		'0', "$R: no window of the round is left active");
	note "$R done, " . sc_elapsed();
}

# The deletion of round 2 really took records away, and the cube has them.
my $k = sc_records_contents(\%records);
cmp_ok(sc_first_offset($topic, 0), '>', 0, 'Kafka no longer holds the first records');
is($node->safe_psql('postgres', 'SELECT count(*) FROM ev WHERE _partition = 0 AND _offset = 0'),
	'1', 'the cube still holds them, in a sealed window');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.segment_log WHERE cube = 'ev'::regclass AND action = 'sealed'"),
	scalar(keys %{ $k->{hours} }),
	'one seal journalled per window with rows, and no more');

$node->stop;
done_testing();
