
# DDL fuzz: whatever the owner of a cube does to its table and its windows,
# no server process crashes, the cube either ingests or is paused with a
# reason, and once the DDL is undone and the cube resumed, every message is
# there exactly once.
#
# A producer writes events stamped over the last two and a half hours (a
# replay: many 5-minute windows, each soon due), while a loop runs
# streamcube_seal_due() (seal, compact, retention) as pg_cron would, and
# the test applies random DDL as the cube's owner, a role that is not a
# superuser: rename, drop and retype columns (the time column and a column
# option "fields" maps among them), add columns with and without defaults,
# NOT NULL, CHECK, generated columns, indexes on expressions (plain SQL and
# the owner's own PL/pgSQL function), row triggers, detach and attach
# windows, a window replaced with a view or with a sub-partitioned table,
# rename the table, move it to another schema.  Each change is undone
# later, newest first; rows of a detached window are moved back into the
# cube as they were (_partition and _offset kept).
#
# SC_FUZZ_SEED picks another sequence (the seed is printed); SC_FUZZ_SECONDS
# the length of the run (default 60).

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;
use Time::HiRes qw(time sleep);

sc_require_env();

my $seed = $ENV{SC_FUZZ_SEED} // int(rand(1 << 30));
my $seconds = $ENV{SC_FUZZ_SECONDS} // 60;
note "seed $seed, $seconds s";
my $state = $seed || 1;

sub rnd
{
	my ($n) = @_;
	$state ^= ($state << 13) & 0xffffffff;
	$state ^= $state >> 17;
	$state ^= ($state << 5) & 0xffffffff;
	return $state % $n;
}

my $node = sc_node('ddlfuzz', "log_line_prefix = '%m [%p] %b '",
	'streamcube.launcher_naptime = 500', 'max_locks_per_transaction = 256');
my $log_start = -s $node->logfile;

$node->safe_psql('postgres', q{
	CREATE ROLE own LOGIN;
	GRANT streamcube_admin TO own;
	CREATE SCHEMA app AUTHORIZATION own;
	CREATE SCHEMA app2 AUTHORIZATION own;
});

my $topic = sc_topic('ddlfuzz');
sc_create_topic($topic, 4);

my $count = 8000;
my $step_ms = 1000;                                  # 8000 s of event time
my $start_ts = int(time) - 9000;                     # 2.5 h ago, ending ~17 min ago
$node->safe_psql('postgres', qq{
	SET ROLE own;
	SELECT streamcube_create_cube('app.fz', 'k', '$topic',
	  'ts timestamptz, country text, device text, amount numeric, qty int, extra text',
	  'ts', '5 minutes', 'json',
	  '{"fields": {"device": "device"}, "grace": "1 minute"}');
});

my $producer = sc_produce_start($topic, count => $count, rate => int($count / ($seconds * 0.8)),
	'start-ts' => $start_ts, 'step-ms' => $step_ms, seed => 29);

# pg_cron's job, in a loop of its own.
my $sealer = IPC::Run::start(
	[ 'bash', '-c',
		'end=$((SECONDS + ' . ($seconds + 30) . ')); '
		  . 'while [ $SECONDS -lt $end ]; do '
		  . 'psql -X -q -d "$0" -c "SELECT streamcube_seal_due()" >/dev/null 2>&1; '
		  . 'sleep 0.3; done', $node->connstr('postgres') ],
	'<', \undef, '>', \my $sealer_out, '2>', \my $sealer_err);

# ---------------------------------------------------------------- DDL
my $cube = 'app.fz';    # its name now

# Run SQL as the owner (or as the superuser); returns '' or the error.
sub run_sql
{
	my ($sql, %o) = @_;
	my $role = $o{superuser} ? '' : 'SET ROLE own; ';
	my ($ret, $out, $err) = $node->psql('postgres',
		"SET statement_timeout = '30s'; SET lock_timeout = '10s'; $role$sql");
	return $ret == 0 ? '' : ($err || "exit $ret");
}

# The view <cube>_sealed uses every column: a column it shows cannot be
# dropped or retyped while it exists.  The owner drops it first (the next
# seal makes it again), as the docs say.
my $drop_view = 'DROP VIEW IF EXISTS app.fz_sealed, app2.fz_sealed, app.fz_renamed_sealed, app2.fz_renamed_sealed; ';

# An attached partition of the cube, at random: [name, lo, hi] or undef.
# Active windows (UNLOGGED), or with $sealed a sealed or compacted one.
sub some_window
{
	my ($sealed) = @_;
	my $persistence = $sealed ? 'p' : 'u';
	my $rows = $node->safe_psql('postgres', qq{
		SELECT c.oid::regclass::text, pg_get_expr(c.relpartbound, c.oid)
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = '$cube'::regclass AND c.relpersistence = '$persistence' ORDER BY c.oid});
	my @w = grep { $_ ne '' } split /\n/, $rows;
	return undef unless @w;
	my ($name, $bound) = split /\|/, $w[ rnd(scalar @w) ];
	my ($lo, $hi) = $bound =~ /FROM \('([^']+)'\) TO \('([^']+)'\)/;
	return [ $name, $lo, $hi ];
}

# Give a table that was a window of [lo, hi) back to the cube: attached
# again when nothing took its place (the cube's catalog still has it as
# that window), else its rows inserted into the cube as they were
# (_partition, _offset kept; a sealed window's guard trigger is a user
# trigger, off under session_replication_role = replica) and the table
# dropped.  As the superuser, the cube locked against receivers meanwhile.
sub move_back
{
	my ($table, $lo, $hi) = @_;
	return run_sql(qq{
		BEGIN;
		LOCK TABLE $cube IN SHARE ROW EXCLUSIVE MODE;
		SET LOCAL session_replication_role = replica;
		DO \$\$
		DECLARE cols text;
		BEGIN
			BEGIN
				ALTER TABLE $cube ATTACH PARTITION $table FOR VALUES FROM ('$lo') TO ('$hi');
				RETURN;
			EXCEPTION WHEN invalid_object_definition THEN
				NULL;	-- a new window took its place
			END;
			SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols
			FROM pg_attribute WHERE attrelid = '$table'::regclass AND attnum > 0
			  AND NOT attisdropped AND attgenerated = '';
			EXECUTE format('INSERT INTO %s (%s) SELECT %s FROM %s', '$cube', cols, cols, '$table');
			DROP TABLE $table CASCADE;
		END \$\$;
		COMMIT;}, superuser => 1);
}

my %ops = (
	rename_time => [
		sub { run_sql("ALTER TABLE $cube RENAME COLUMN ts TO ts_renamed") },
		sub { run_sql("ALTER TABLE $cube RENAME COLUMN ts_renamed TO ts") } ],
	rename_mapped => [
		sub { run_sql("ALTER TABLE $cube RENAME COLUMN device TO device_renamed") },
		sub { run_sql("ALTER TABLE $cube RENAME COLUMN device_renamed TO device") } ],
	drop_extra => [
		sub { run_sql("BEGIN; $drop_view ALTER TABLE $cube DROP COLUMN extra; COMMIT;") },
		sub { run_sql("ALTER TABLE $cube ADD COLUMN extra text") } ],
	drop_mapped => [
		sub { run_sql("BEGIN; $drop_view ALTER TABLE $cube DROP COLUMN device; COMMIT;") },
		sub { run_sql("ALTER TABLE $cube ADD COLUMN device text") } ],
	retype_qty => [
		sub { run_sql("BEGIN; $drop_view ALTER TABLE $cube ALTER COLUMN qty TYPE bigint; COMMIT;") },
		sub { run_sql("BEGIN; $drop_view ALTER TABLE $cube ALTER COLUMN qty TYPE int; COMMIT;") } ],
	retype_country => [
		sub { run_sql("BEGIN; $drop_view ALTER TABLE $cube ALTER COLUMN country TYPE varchar(64); COMMIT;") },
		sub { run_sql("BEGIN; $drop_view ALTER TABLE $cube ALTER COLUMN country TYPE text; COMMIT;") } ],
	add_default => [
		sub { run_sql("ALTER TABLE $cube ADD COLUMN f_default int DEFAULT 7") },
		sub { run_sql("ALTER TABLE $cube DROP COLUMN f_default CASCADE") } ],
	add_plain => [
		sub { run_sql("ALTER TABLE $cube ADD COLUMN f_plain text") },
		sub { run_sql("ALTER TABLE $cube DROP COLUMN f_plain CASCADE") } ],
	not_null => [
		sub { run_sql("ALTER TABLE $cube ALTER COLUMN country SET NOT NULL") },
		sub { run_sql("ALTER TABLE $cube ALTER COLUMN country DROP NOT NULL") } ],
	check => [
		sub { run_sql("ALTER TABLE $cube ADD CONSTRAINT fz_qty CHECK (qty > -1000000)") },
		sub { run_sql("ALTER TABLE $cube DROP CONSTRAINT fz_qty") } ],
	generated => [
		sub { run_sql("ALTER TABLE $cube ADD COLUMN f_gen numeric GENERATED ALWAYS AS (amount * 2) STORED") },
		sub { run_sql("ALTER TABLE $cube DROP COLUMN f_gen CASCADE") } ],
	expr_index => [
		sub { run_sql("CREATE INDEX fz_lower ON $cube (lower(country))") },
		sub { run_sql("DROP INDEX IF EXISTS app.fz_lower; DROP INDEX IF EXISTS app2.fz_lower") } ],
	plpgsql_index => [
		sub {
			run_sql(q{CREATE OR REPLACE FUNCTION app.f_idx(int) RETURNS int LANGUAGE plpgsql IMMUTABLE
				AS $$ BEGIN RETURN $1 + 1; END $$})
			  || run_sql("CREATE INDEX fz_fidx ON $cube (app.f_idx(qty))") },
		sub { run_sql("DROP INDEX IF EXISTS app.fz_fidx; DROP INDEX IF EXISTS app2.fz_fidx") } ],
	trigger => [
		sub {
			run_sql(q{CREATE OR REPLACE FUNCTION app.f_trg() RETURNS trigger LANGUAGE plpgsql
				AS $$ BEGIN NEW.extra := coalesce(NEW.extra, 'trg'); RETURN NEW; END $$})
			  || run_sql("CREATE TRIGGER fz_trg BEFORE INSERT ON $cube FOR EACH ROW EXECUTE FUNCTION app.f_trg()") },
		sub { run_sql("DROP TRIGGER IF EXISTS fz_trg ON $cube") } ],
	rename_table => [
		sub { my $e = run_sql("ALTER TABLE $cube RENAME TO fz_renamed"); $cube =~ s/fz$/fz_renamed/ unless $e; $e },
		sub { my $e = run_sql("ALTER TABLE $cube RENAME TO fz"); $cube =~ s/fz_renamed$/fz/ unless $e; $e } ],
	set_schema => [
		sub { my $e = run_sql("ALTER TABLE $cube SET SCHEMA app2"); $cube =~ s/^app\./app2./ unless $e; $e },
		sub { my $e = run_sql("ALTER TABLE $cube SET SCHEMA app"); $cube =~ s/^app2\./app./ unless $e; $e } ],
);

# Window operations: their undo needs what the do found.
my %window_ops = (
	# a sealed or compacted partition, detached and attached back at once
	detach_sealed => sub {
		my $w = some_window(1) or return ('no window', undef);
		my ($name, $lo, $hi) = @$w;
		my $e = run_sql("BEGIN; ALTER TABLE $cube DETACH PARTITION $name; "
			  . "ALTER TABLE $cube ATTACH PARTITION $name FOR VALUES FROM ('$lo') TO ('$hi'); COMMIT;");
		return ($e, sub { '' });
	},
	detach => sub {
		my $w = some_window() or return ('no window', undef);
		my ($name, $lo, $hi) = @$w;
		my $e = run_sql("ALTER TABLE $cube DETACH PARTITION $name");
		return ($e, sub { $e eq '' ? move_back($name, $lo, $hi) : '' });
	},
	view => sub {
		my $w = some_window() or return ('no window', undef);
		my ($name, $lo, $hi) = @$w;
		my $old = "${name}_old";
		(my $bare = $old) =~ s/^.*\.//;
		my $e = run_sql("BEGIN; ALTER TABLE $cube DETACH PARTITION $name; ALTER TABLE $name RENAME TO $bare; "
			  . "CREATE VIEW $name AS SELECT * FROM $old; COMMIT;");
		return ($e, sub { $e eq '' ? (run_sql("DROP VIEW $name") || move_back($old, $lo, $hi)) : '' });
	},
	subpartitioned => sub {
		my $w = some_window() or return ('no window', undef);
		my ($name, $lo, $hi) = @$w;
		my $sub = "${name}_sub";
		my $leaf = "${name}_leaf";
		my $e = run_sql(qq{
			BEGIN;
			ALTER TABLE $cube DETACH PARTITION $name;
			CREATE TABLE $sub (LIKE $cube) PARTITION BY RANGE (ts);
			CREATE TABLE $leaf PARTITION OF $sub FOR VALUES FROM ('$lo') TO ('$hi');
			INSERT INTO $sub SELECT * FROM $name;
			ALTER TABLE $cube ATTACH PARTITION $sub FOR VALUES FROM ('$lo') TO ('$hi');
			COMMIT;});
		return ($e, sub {
			return '' if $e ne '';
			return run_sql("ALTER TABLE $cube DETACH PARTITION $sub; DROP TABLE $sub")
			  || move_back($name, $lo, $hi);
		});
	},
);

my @applied;    # [name, undo]
my (%done, %failed, @states);
my $t_end = time + $seconds;
my $steps = 0;
while (time < $t_end)
{
	$steps++;
	if (@applied && (rnd(100) < 45 || @applied >= 5))
	{
		my $top = pop @applied;
		my $e = $top->[1]->();
		note "undo $top->[0]: " . ($e eq '' ? 'ok' : $e);
		# Refused (a lock timeout behind a seal's swap): still applied, as
		# the owner would see it, and undone again later.  A window
		# operation's undo is two steps, not to be run twice.
		push @applied, $top if $e ne '' && $ops{ $top->[0] };
		# As the owner would: resume; a cube still unable to ingest pauses again.
		run_sql("SELECT streamcube_resume('$cube')");
	}
	else
	{
		my @names = ((sort keys %ops), (sort keys %window_ops));
		my $name = $names[ rnd(scalar @names) ];
		next if grep { $_->[0] eq $name } @applied;
		# One window operation at a time: their undo moves rows back.
		next if $window_ops{$name} && grep { $window_ops{ $_->[0] } } @applied;
		my ($e, $undo);
		if ($ops{$name}) { $e = $ops{$name}[0]->(); $undo = $ops{$name}[1]; }
		else { ($e, $undo) = $window_ops{$name}->(); }
		$done{$name}++;
		if ($e eq '')
		{
			push @applied, [ $name, $undo ];
		}
		else { $failed{$name}++; }
		note "do $name: " . ($e eq '' ? 'ok' : $e);
	}
	sleep(0.2 + rnd(8) / 10);
	my $s = $node->safe_psql('postgres',
		"SELECT coalesce(string_agg(state, ';'), 'none') FROM streamcube.consumers");
	push @states, $s;
	BAIL_OUT("the server crashed (step $steps)")
	  if sc_log_since($node, $log_start) =~ /terminated by signal|reinitializing/;
}
note "steps: $steps; applied: " . join(', ', map { "$_ $done{$_}" } sort keys %done);
note "refused: " . join(', ', map { "$_ $failed{$_}" } sort keys %failed);

# Undo what is still applied, newest first, then let everything in.
while (my $top = pop @applied)
{
	my $e = $top->[1]->();
	note "final undo $top->[0]: " . ($e eq '' ? 'ok' : $e);
	is($e, '', "undo of $top->[0] succeeds");
}
ok(sc_produce_finish($producer), 'the producer delivered every message');
is($cube, 'app.fz', 'the cube has its name back');

$node->safe_psql('postgres', "SELECT streamcube_resume('app.fz')");
is($node->safe_psql('postgres', "SELECT streamcube_wait('app.fz', '120 s')"),
	't', 'after the DDL is undone and the cube resumed, it consumes everything');
$sealer->kill_kill;
$node->safe_psql('postgres', "SELECT streamcube_seal_due()");

cmp_ok($node->safe_psql('postgres',
		"SELECT count(*) FROM streamcube.segment_log s JOIN streamcube.cubes c USING (cube_id) "
		  . "WHERE c.relid = 'app.fz'::regclass AND s.action IN ('sealed', 'compacted')"),
	'>', 0, 'windows were sealed (and compacted) while the DDL ran');
my $log = sc_log_since($node, $log_start);
unlike($log, qr/terminated by signal/, 'no server process was terminated by a signal');
unlike($log, qr/reinitializing/, 'the postmaster never reinitialized');

# The receiver either ingested or paused the cube with a reason: it never
# failed (an ERROR, then a restart after a back-off, again and again).
my @errors = grep { /streamcube receiver (ERROR|FATAL)/ } split /\n/, $log;
is(scalar @errors, 0, 'the receiver never failed') or diag join("\n", @errors[0 .. ($#errors < 9 ? $#errors : 9)]);
my %states;
$states{$1}++ for map { /^(\w+)/ ? $1 : () } @states;
note "states sampled: " . join(', ', map { "$_ $states{$_}" } sort keys %states);
my %reasons;
$reasons{ substr($1, 0, 60) }++ for $log =~ /WARNING:  cube \S+ paused: ([^\n]*)/g;
note "paused $reasons{$_} times: $_" for sort keys %reasons;

# Every message exactly once: no dead letter, every row against Kafka.
is($node->safe_psql('postgres', 'SELECT count(*) FROM streamcube.dead_letters'),
	'0', 'no message became a dead letter');
my $k = sc_kafka_contents($topic, $count);
sc_check_exact($node, 'app.fz', $k, 'after the DDL fuzz');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid
	WHERE i.inhparent = 'app.fz'::regclass AND c.relowner <> 'own'::regrole}),
	'0', 'every partition of the cube belongs to its owner');

done_testing();
