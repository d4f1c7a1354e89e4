
# StreamcubeTest.pm - helpers shared by streamcube's TAP tests (test/t/*.pl).
#
# The tests run against the real Kafka broker of the test bench, named by
# these environment variables (set by test/run-tests):
#
#   SC_KAFKA       bootstrap of the broker, 127.0.0.1:PORT
#   SC_KAFKA_SH    absolute path of test/kafka/kafka.sh
#   SC_KAFKA_DIR   the broker's directory (kafka.sh stop/start --dir)
#   SC_SCKAFKA     absolute path of test/tools/sckafka
#
# and the schema registry beside it (sc_require_registry checks these):
#
#   SC_REGISTRY        its Confluent API, http://127.0.0.1:PORT/apis/ccompat/v7
#   SC_REGISTRY_HTTPS  the same over HTTPS (trust SC_REGISTRY_CA_PEM)
#   SC_REGISTRY_SH, SC_REGISTRY_DIR  test/registry/registry.sh and the
#                      registry's directory (sc_registry_stop/start)
#   SC_SCREGISTRY, SC_PYTHON  test/tools/scregistry and the venv's python
#
# A test run without them (a bare "prove t/") bails out: it could test
# nothing.  Tests that stop and start the broker (sc_broker_stop/sc_broker_start) need to run as the
# user that owns the broker process and its directory.
#
# Expected values are never taken from streamcube itself: they come from
# Kafka (kcat reads the whole topic back) or from what the test produced.

package StreamcubeTest;

use strict;
use warnings;

use Exporter 'import';
use File::Basename qw(dirname);
use IPC::Run ();
use JSON::PP ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

our @EXPORT = qw(
  sc_require_env sc_node sc_topic sc_create_topic sc_produce
  sc_produce_start sc_produce_finish sc_kcat_produce sc_kafka_contents
  sc_create_cube sc_check_exact sc_check_positions_match_rows
  sc_wait_positions_at_high sc_broker_stop sc_broker_start sc_broker_running
  sc_delete_records sc_elapsed
);

my $t0 = time;

# PostgreSQL::Test::Cluster->init runs pg_regress --config-auth; outside the
# PostgreSQL source tree PG_REGRESS must name the installed pg_regress.
if (!$ENV{PG_REGRESS})
{
	my $pgxs = `pg_config --pgxs`;
	chomp $pgxs;
	$ENV{PG_REGRESS} = dirname($pgxs) . '/../test/regress/pg_regress';
}

# Seconds since the test started, for diagnostics.
sub sc_elapsed { return sprintf('%.1f s', time - $t0); }

# Skip the whole test unless the bench's environment is there.
sub sc_require_env
{
	for my $var (qw(SC_KAFKA SC_KAFKA_SH SC_KAFKA_DIR SC_SCKAFKA))
	{
		# A bare "prove t/" would skip every file and call it a success.
		BAIL_OUT("$var is not set: run the TAP tests through test/run-tests "
			  . "(test/run-tests tap [FILE...]), which starts the Kafka broker they need")
		  unless defined $ENV{$var} && $ENV{$var} ne '';
	}
	plan skip_all => 'kcat is not installed'
	  unless system('sh', '-c', 'command -v kcat >/dev/null') == 0;
	return;
}

# A started node with streamcube loaded, the extension created and Kafka
# cluster 'k' registered.  Extra postgresql.conf lines may be given.
sub sc_node
{
	my ($name, @conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);

	$node->init;
	$node->append_conf('postgresql.conf', join("\n",
		"shared_preload_libraries = 'streamcube'",
		"streamcube.database = 'postgres'",
		"max_worker_processes = 16",
		"log_min_messages = info",
		# tests stamp events in the past to have windows due at once, and
		# count partitions a window each; t/042 tests buckets of history
		"streamcube.history_buckets = off",
		@conf) . "\n");
	$node->start;
	# test/run-tests SC_PG_CASSERT=1: the nodes run the build with assertions
	BAIL_OUT("SC_PG_CASSERT is set, but node $name runs a server without assertions")
	  if $ENV{SC_PG_CASSERT}
	  && $node->safe_psql('postgres', 'SHOW debug_assertions') ne 'on';
	$node->safe_psql('postgres', 'CREATE EXTENSION streamcube');
	$node->safe_psql('postgres',
		"SELECT streamcube_add_cluster('k', '$ENV{SC_KAFKA}')");
	return $node;
}

# A topic name that no other test (or earlier run) uses.
sub sc_topic
{
	my ($tag) = @_;
	return sprintf('sc_%s_%d_%d_%04d', $tag, $$, time, int(rand(10000)));
}

sub _run
{
	my ($what, @cmd) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	die "$what failed: @cmd\n$out$err" unless $ok;
	return ($out, $err);
}

sub sc_create_topic
{
	my ($topic, $partitions) = @_;
	_run('create-topic', $ENV{SC_SCKAFKA}, 'create-topic',
		'--bootstrap', $ENV{SC_KAFKA}, $topic, $partitions);
	return;
}

sub _produce_cmd
{
	my ($topic, %o) = @_;
	my @cmd = ($ENV{SC_SCKAFKA}, 'produce', '--bootstrap', $ENV{SC_KAFKA},
		'--topic', $topic, '--count', $o{count},
		'--format', $o{format} // 'json');
	for my $k (qw(partitions rate start-ts step-ms seed))
	{
		push @cmd, "--$k", $o{$k} if defined $o{$k};
	}
	push @cmd, '--meta' if $o{meta};
	push @cmd, '--ordered' if $o{ordered};
	return @cmd;
}

# Produce synchronously; dies unless every message was delivered.
sub sc_produce
{
	my ($topic, %o) = @_;
	my (undef, $err) = _run('produce', _produce_cmd($topic, %o));
	note "sckafka: " . ($err =~ /(produced .*)/ ? $1 : $err);
	return;
}

# Produce in the background; sc_produce_finish waits for it.
sub sc_produce_start
{
	my ($topic, %o) = @_;
	my %h = (out => '', err => '');
	my @cmd = _produce_cmd($topic, %o);
	$h{cmd} = \@cmd;
	$h{harness} = IPC::Run::start(\@cmd, '<', \undef, '>', \$h{out},
		'2>', \$h{err});
	return \%h;
}

# Wait for a background producer; true when it delivered everything.
sub sc_produce_finish
{
	my ($h) = @_;
	$h->{harness}->finish;
	my $rc = $h->{harness}->result(0);
	note "sckafka (background): " . ($h->{err} =~ /(produced .*)/ ? $1 : '')
	  . " exit $rc";
	diag "background producer failed: $h->{err}" if $rc != 0;
	return $rc == 0;
}

sub sc_producer_running
{
	my ($h) = @_;
	$h->{harness}->pump_nb;
	return $h->{harness}->pumpable;
}
push @EXPORT, 'sc_producer_running';

# Produce raw messages, one per element, to one partition, with kcat.
sub sc_kcat_produce
{
	my ($topic, $partition, @payloads) = @_;
	my $in = join('', map { "$_\n" } @payloads);
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'kcat', '-P', '-b', $ENV{SC_KAFKA}, '-t', $topic,
			'-p', $partition ], '<', \$in, '>', \$out, '2>', \$err)
	  or die "kcat -P failed: $err";
	return;
}

# Read the whole topic back with kcat and summarise it per partition:
# { partitions => { p => { count, low, high, good, qty, amount_cents } },
#   count, good, qty, amount_cents }.  A message is "good" when it is one
# of sckafka's JSON events (it has a ts string, an amount and a qty).
sub sc_kafka_contents
{
	my ($topic, $expect_total) = @_;
	my ($out, $err) = ('', '');

	IPC::Run::run([ 'kcat', '-C', '-b', $ENV{SC_KAFKA}, '-t', $topic,
			'-o', 'beginning', '-e', '-q', '-f', '%p\t%o\t%s\n' ],
		'<', \undef, '>', \$out, '2>', \$err)
	  or die "kcat -C failed: $err";

	my %r = (partitions => {}, count => 0, good => 0, qty => 0,
		amount_cents => 0);
	for my $line (split /\n/, $out)
	{
		my ($p, $o, $payload) = split /\t/, $line, 3;
		my $s = $r{partitions}{$p} //= { count => 0, good => 0, qty => 0,
			amount_cents => 0, low => $o, high => $o + 1 };
		$s->{count}++;
		$r{count}++;
		$s->{low} = $o if $o < $s->{low};
		$s->{high} = $o + 1 if $o + 1 > $s->{high};
		if (defined $payload
			&& $payload =~ /^\{"ts":"[^"]+","country":"\w+","device":"\w+","amount":(\d+)\.(\d\d),"qty":(\d+)\}$/)
		{
			$s->{good}++;
			$r{good}++;
			$s->{qty} += $3;
			$r{qty} += $3;
			$s->{amount_cents} += $1 * 100 + $2;
			$r{amount_cents} += $1 * 100 + $2;
		}
	}
	return \%r;
}

# streamcube_create_cube with the demo columns, JSON, 1 hour windows.
sub sc_create_cube
{
	my ($node, $name, $topic, $options) = @_;
	$options //= '{}';
	$node->safe_psql('postgres',
		"SELECT streamcube_create_cube('$name', 'k', '$topic', "
		  . "'ts timestamptz, country text, device text, amount numeric, qty int', "
		  . "'ts', '1 hour', 'json', '$options')");
	return;
}

sub _cents
{
	my ($c) = @_;
	return sprintf('%d.%02d', int($c / 100), $c % 100);
}

# The assertions a user would make once everything is consumed, against
# what Kafka holds ($k from sc_kafka_contents): exact row count, unique
# (_partition, _offset), per partition the row count and max(_offset) + 1
# equal to the partition's message count, and the sums of qty and amount.
sub sc_check_exact
{
	my ($node, $cube, $k, $label) = @_;
	sc_check_exact_where($node, $cube, $k, $label, 'true');
	return;
}

# In one snapshot, for each partition of the cube, with pos its committed
# consume position (its checkpoint while it has none): no row lies at or
# beyond pos, and the rows plus the dead letters in [checkpoint, pos) are
# exactly pos - checkpoint messages.  Rows and positions move together.
# (Dead letters are logged: after a crash they may lie beyond pos.)
# Returns the offending partitions, '' when all agree.
sub sc_positions_vs_rows_sql
{
	my ($cube, $several) = @_;
	# A cube of several topics: each source partition (topic_no << 20 |
	# partition) is a (_topic, _partition) of the rows and the dead letters;
	# a cube of one topic has no _topic (and maybe no streamcube.cube_topics).
	my ($k_topic, $k_join, $r_topic, $d_topic) = $several
	  ? ('t.topic',
		'JOIN streamcube.cube_topics t ON t.cube_id = k.cube_id AND t.topic_no = k.partition >> 20',
		'_topic', 'd.topic')
	  : ("''::text", '', "''::text", "''::text");
	return qq{
		WITH c AS (SELECT cube_id FROM streamcube.cubes WHERE relid = '$cube'::regclass),
		k AS (SELECT $k_topic AS topic, k.partition & 1048575 AS partition, k."offset" AS start,
		             coalesce(p.position, k."offset") AS pos
		      FROM streamcube.checkpoints k
		      LEFT JOIN streamcube.consume_positions p USING (cube_id, partition)
		      $k_join
		      WHERE k.cube_id = (SELECT cube_id FROM c)),
		r AS (SELECT x.topic, x.partition, count(*) AS n,
		             count(*) FILTER (WHERE x._offset >= k.start AND x._offset < k.pos) AS inside
		      FROM (SELECT $r_topic AS topic, _partition AS partition, _offset FROM $cube) x
		      JOIN k USING (topic, partition) GROUP BY 1, 2),
		d AS (SELECT k.topic, k.partition, count(*) AS n
		      FROM streamcube.dead_letters d JOIN k ON k.partition = d.partition AND k.topic = $d_topic
		      WHERE d.cube_id = (SELECT cube_id FROM c)
		        AND d."offset" >= k.start AND d."offset" < k.pos
		      GROUP BY 1, 2)
		SELECT k.topic, k.partition, k.start, k.pos, coalesce(r.n, 0) AS rows,
		       coalesce(r.inside, 0) AS rows_inside, coalesce(d.n, 0) AS dead_letters
		FROM k LEFT JOIN r USING (topic, partition) LEFT JOIN d USING (topic, partition)
		WHERE coalesce(r.n, 0) <> coalesce(r.inside, 0)
		   OR k.pos - k.start <> coalesce(r.n, 0) + coalesce(d.n, 0)
		ORDER BY 1, 2};
}

sub sc_check_positions_match_rows
{
	my ($node, $cube, $label) = @_;
	my $several = $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_catalog.pg_attribute WHERE attrelid = '$cube'::regclass "
		  . "AND attname = '_topic' AND NOT attisdropped");
	is($node->safe_psql('postgres', sc_positions_vs_rows_sql($cube, $several)),
		'', "$label: each consume position = checkpoint + its rows and dead letters, no row beyond it");
	return;
}

# Wait until streamcube.consumers shows positions equal to the high
# watermarks, and check those are Kafka's high watermarks.
sub sc_wait_positions_at_high
{
	my ($node, $cube, $k, $label) = @_;
	my $want = '{'
	  . join(',',
		map { $k->{partitions}{$_}{high} }
		sort { $a <=> $b } keys %{ $k->{partitions} })
	  . '}';
	ok( $node->poll_query_until('postgres',
			"SELECT positions::text = '$want' AND high_watermarks::text = '$want' "
			  . "FROM streamcube.consumers WHERE cube = '$cube'::regclass"),
		"$label: streamcube.consumers shows positions = high watermarks = $want")
	  or diag $node->safe_psql('postgres',
		"SELECT * FROM streamcube.consumers");
	return;
}

# The first offset Kafka still holds for a partition (its low watermark),
# read with kcat; undef when the partition is empty.
sub sc_first_offset
{
	my ($topic, $partition) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'kcat', '-C', '-b', $ENV{SC_KAFKA}, '-t', $topic,
			'-p', $partition, '-o', 'beginning', '-c', '1', '-e', '-q',
			'-f', '%o\n' ], '<', \undef, '>', \$out, '2>', \$err)
	  or die "kcat -C failed: $err";
	return $out =~ /^(\d+)/ ? $1 : undef;
}
push @EXPORT, 'sc_first_offset';

# ---------------------------------------------------------------- broker

sub _broker_props
{
	my $file = "$ENV{SC_KAFKA_DIR}/server.properties";
	open my $fh, '<', $file or die "cannot read $file: $!";
	my %p;
	while (<$fh>)
	{
		$p{version} = $1 if /^# written by .* for Kafka (\S+)/;
		$p{cport} = $1 if /^controller\.quorum\.voters=\d+@[^:]+:(\d+)/;
		$p{port} = $1 if /^listeners=PLAINTEXT:\/\/[^:]+:(\d+)/;
	}
	close $fh;
	return \%p;
}

sub sc_broker_running
{
	return system($ENV{SC_KAFKA_SH}, 'status', '--dir', $ENV{SC_KAFKA_DIR})
	  == 0;
}

sub _check_broker_access
{
	my $dir = $ENV{SC_KAFKA_DIR};
	die "the broker directory $dir is not writable by uid $> "
	  . "(run-tests must start the broker as the user running the tests)\n"
	  unless -w $dir && -w "$dir/kafka.log";
	if (open my $fh, '<', "$dir/kafka.pid")
	{
		my $pid = <$fh>;
		chomp $pid;
		my $uid = (stat "/proc/$pid")[4];
		die "the broker (pid $pid) runs as uid $uid, not as uid $> "
		  . "(run-tests must start it as the user running the tests)\n"
		  if defined $uid && $uid != $> && $> != 0;
	}
	return;
}

sub sc_broker_stop
{
	_check_broker_access();
	my $t = time;
	_run('kafka.sh stop', $ENV{SC_KAFKA_SH}, 'stop', '--dir',
		$ENV{SC_KAFKA_DIR});
	note sprintf('broker stopped in %.1f s', time - $t);
	return;
}

sub sc_broker_start
{
	_check_broker_access();
	my $p = _broker_props();
	my ($port) = $ENV{SC_KAFKA} =~ /:(\d+)$/;
	my @cmd = ($ENV{SC_KAFKA_SH}, 'start', '--dir', $ENV{SC_KAFKA_DIR},
		'--port', $port);
	push @cmd, '--controller-port', $p->{cport} if $p->{cport};
	push @cmd, '--version', $p->{version} if $p->{version};
	my $t = time;
	my ($out) = _run('kafka.sh start', @cmd);
	note sprintf('broker started in %.1f s: %s', time - $t, $out);
	return;
}

# Delete the records of a partition below an offset, with Kafka's own
# DeleteRecordsCommand from the jars kafka.sh fetched.
sub sc_delete_records
{
	my ($topic, $partition, $offset) = @_;
	_delete_records_json(
		qq({"version":1,"partitions":[{"topic":"$topic","partition":$partition,"offset":$offset}]}\n));
	return;
}

sub _delete_records_json
{
	my ($json_text) = @_;
	my $json = PostgreSQL::Test::Utils::tempdir() . "/delete-records.json";
	PostgreSQL::Test::Utils::append_to_file($json, $json_text);
	my $out = sc_kafka_tool('org.apache.kafka.tools.DeleteRecordsCommand',
		'--bootstrap-server', $ENV{SC_KAFKA}, '--offset-json-file', $json);
	note "delete-records: $out";
	return;
}

# Run a tool of the Kafka distribution (a main class of its jars) against
# the test broker's version; returns its stdout, dies when it fails.
sub sc_kafka_tool
{
	my ($class, @args) = @_;
	my $p = _broker_props();
	my $version = $p->{version} // '3.9.1';
	my $jars = dirname($ENV{SC_KAFKA_SH}) . "/.jars/$version";
	# warnings only, to stderr (log4j 1 for Kafka 3, log4j 2 for Kafka 4)
	my $log = PostgreSQL::Test::Utils::tempdir() . "/tools-log.properties";
	my $log_opt;
	if ($version =~ /^(\d+)/ && $1 >= 4)
	{
		PostgreSQL::Test::Utils::append_to_file($log,
			"appender.err.type = Console\n"
			  . "appender.err.name = ERR\n"
			  . "appender.err.target = SYSTEM_ERR\n"
			  . "appender.err.layout.type = PatternLayout\n"
			  . "appender.err.layout.pattern = [%d] %p %m (%c)%n\n"
			  . "rootLogger.level = warn\n"
			  . "rootLogger.appenderRef.err.ref = ERR\n");
		$log_opt = "-Dlog4j2.configurationFile=$log";
	}
	else
	{
		PostgreSQL::Test::Utils::append_to_file($log,
			"log4j.rootLogger=WARN, err\n"
			  . "log4j.appender.err=org.apache.log4j.ConsoleAppender\n"
			  . "log4j.appender.err.Target=System.err\n"
			  . "log4j.appender.err.layout=org.apache.log4j.PatternLayout\n"
			  . "log4j.appender.err.layout.ConversionPattern=[%d] %p %m (%c)%n\n");
		$log_opt = "-Dlog4j.configuration=file:$log";
	}
	my ($out) = _run($class, 'java',
		'-XX:TieredStopAtLevel=1', '-XX:+UseSerialGC', '-Xmx256m', $log_opt,
		'-cp', "$jars/*", $class, @args);
	$out =~ s/\s+$//;
	return $out;
}
push @EXPORT, 'sc_kafka_tool';

# ---------------------------------------------------------------- added for
# 016_topic_recreated, 017_owner_and_extension and 018_fuzz

# create-topic with topic configs: sc_create_topic_config($topic, $n,
# 'max.message.bytes' => 20000000, ...).
sub sc_create_topic_config
{
	my ($topic, $partitions, %config) = @_;
	_run('create-topic', $ENV{SC_SCKAFKA}, 'create-topic',
		'--bootstrap', $ENV{SC_KAFKA}, $topic, $partitions,
		map { ('--config', "$_=$config{$_}") } sort keys %config);
	return;
}
push @EXPORT, 'sc_create_topic_config';

# Delete a topic; returns once metadata no longer lists it.
sub sc_delete_topic
{
	my ($topic) = @_;
	my ($out) = _run('delete-topic', $ENV{SC_SCKAFKA}, 'delete-topic',
		'--bootstrap', $ENV{SC_KAFKA}, $topic);
	$out =~ s/\s+$//;
	note "delete-topic: $out";
	return;
}
push @EXPORT, 'sc_delete_topic';

# Raise a topic's partition count to $total.
sub sc_add_partitions
{
	my ($topic, $total) = @_;
	_run('add-partitions', $ENV{SC_SCKAFKA}, 'add-partitions',
		'--bootstrap', $ENV{SC_KAFKA}, $topic, $total);
	return;
}
push @EXPORT, 'sc_add_partitions';

# Kill a background producer (SIGKILL: what it had not delivered is lost)
# and reap it.
sub sc_produce_kill
{
	my ($h) = @_;
	eval { $h->{harness}->signal('KILL'); 1 } or note "signal: $@";
	eval { $h->{harness}->finish; 1 };
	note 'background producer killed: '
	  . ($h->{err} =~ /(produced .*)/ ? $1 : 'no summary');
	return;
}
push @EXPORT, 'sc_produce_kill';

# sc_check_exact for the rows of $cube that satisfy $where only (an SQL
# condition), e.g. the rows of one incarnation of a topic, told apart by
# their time range.
sub sc_check_exact_where
{
	my ($node, $cube, $k, $label, $where) = @_;
	my $from = "$cube WHERE $where";
	is($node->safe_psql('postgres', "SELECT count(*) FROM $from"),
		$k->{good},
		"$label: row count equals the $k->{good} good messages in Kafka");
	is( $node->safe_psql('postgres',
			"SELECT count(*) = count(DISTINCT (_partition, _offset)) FROM $from"),
		't', "$label: (_partition, _offset) is unique");
	my $want = join("\n",
		map {
			my $s = $k->{partitions}{$_};
			"$_|$s->{good}|$s->{high}"
		} sort { $a <=> $b } keys %{ $k->{partitions} });
	is( $node->safe_psql('postgres',
			"SELECT _partition, count(*), max(_offset) + 1 FROM $from "
			  . "GROUP BY 1 ORDER BY 1"),
		$want,
		"$label: per partition, rows and max(_offset) + 1 match Kafka");
	is( $node->safe_psql('postgres',
			"SELECT coalesce(sum(qty), 0), coalesce(sum(amount), 0.00) FROM $from"),
		"$k->{qty}|" . _cents($k->{amount_cents}),
		"$label: sum(qty) and sum(amount) match Kafka");
	return;
}
push @EXPORT, 'sc_check_exact_where';

# The server log of a node from byte $offset on.
sub sc_log_since
{
	my ($node, $offset) = @_;
	return PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset // 0);
}
push @EXPORT, 'sc_log_since';

# ---------------------------------------------------------------- added for
# the sealing tests (020_seal_crash ... 023_seal_standby)

# Every message of a topic as kcat reads it now, keyed "partition:offset":
# [partition, offset, hour, qty, amount_cents] for sckafka's JSON events
# (hour is the UTC hour of their ts, "YYYY-MM-DDTHH"), [partition, offset]
# for anything else.  Merge the hashes of several reads
# (%all = (%all, %{ sc_kafka_records($topic) })) to keep what was deleted
# from Kafka since (sc_delete_records).
sub sc_kafka_records
{
	my ($topic) = @_;
	my ($out, $err) = ('', '');

	IPC::Run::run([ 'kcat', '-C', '-b', $ENV{SC_KAFKA}, '-t', $topic,
			'-o', 'beginning', '-e', '-q', '-f', '%p\t%o\t%s\n' ],
		'<', \undef, '>', \$out, '2>', \$err)
	  or die "kcat -C failed: $err";
	my %r;
	for my $line (split /\n/, $out)
	{
		my ($p, $o, $payload) = split /\t/, $line, 3;
		if (defined $payload
			&& $payload =~ /^\{"ts":"(\d\d\d\d-\d\d-\d\dT\d\d):[^"]+","country":"\w+","device":"\w+","amount":(\d+)\.(\d\d),"qty":(\d+)\}$/)
		{
			$r{"$p:$o"} = [ $p, $o, $1, $4, $2 * 100 + $3 ];
		}
		else
		{
			$r{"$p:$o"} = [ $p, $o ];
		}
	}
	return \%r;
}
push @EXPORT, 'sc_kafka_records';

# Summarise records from sc_kafka_records the way sc_kafka_contents does
# (so sc_check_exact takes it), plus hours => { hour => good messages }.
sub sc_records_contents
{
	my ($records) = @_;
	my %r = (partitions => {}, hours => {}, count => 0, good => 0, qty => 0,
		amount_cents => 0);
	for my $m (values %$records)
	{
		my ($p, $o, $hour, $qty, $cents) = @$m;
		my $s = $r{partitions}{$p} //= { count => 0, good => 0, qty => 0,
			amount_cents => 0, low => $o, high => $o + 1 };
		$s->{count}++;
		$r{count}++;
		$s->{low} = $o if $o < $s->{low};
		$s->{high} = $o + 1 if $o + 1 > $s->{high};
		next unless defined $hour;
		$s->{good}++;
		$r{good}++;
		$r{hours}{$hour}++;
		$s->{qty} += $qty;
		$r{qty} += $qty;
		$s->{amount_cents} += $cents;
		$r{amount_cents} += $cents;
	}
	return \%r;
}
push @EXPORT, 'sc_records_contents';

# The rows of each hourly window of a cube (time column ts) equal the good
# messages of that hour in $k (from sc_records_contents).
sub sc_check_hours
{
	my ($node, $cube, $k, $label) = @_;
	my $want = join("\n",
		map { "$_|$k->{hours}{$_}" } sort keys %{ $k->{hours} });
	is( $node->safe_psql('postgres',
			"SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24'), count(*) "
			  . "FROM $cube GROUP BY 1 ORDER BY 1"),
		$want,
		"$label: per hourly window, the rows equal Kafka's messages of that hour");
	return;
}
push @EXPORT, 'sc_check_hours';

# Delete the records below an offset in several partitions of a topic at
# once (one DeleteRecordsCommand): sc_delete_records_below($topic,
# { partition => offset, ... }).
sub sc_delete_records_below
{
	my ($topic, $offsets) = @_;
	my @parts = map { qq({"topic":"$topic","partition":$_,"offset":$offsets->{$_}}) }
	  sort { $a <=> $b } keys %$offsets;
	return unless @parts;
	_delete_records_json(
		qq({"version":1,"partitions":[) . join(',', @parts) . qq(]}\n));
	return;
}
push @EXPORT, 'sc_delete_records_below';

# psql in the background (IPC::Run) on a node, for statements that may
# block or be killed by a crash: returns a handle for sc_psql_bg_finish.
sub sc_psql_bg
{
	my ($node, $sql, @opts) = @_;
	my %h = (out => '', err => '');
	my @cmd = ('psql', '-X', '-A', '-t', '-v', 'ON_ERROR_STOP=1',
		'-d', $node->connstr('postgres'), @opts, '-c', $sql);
	$h{harness} = IPC::Run::start(\@cmd, '<', \undef, '>', \$h{out},
		'2>', \$h{err});
	return \%h;
}
push @EXPORT, 'sc_psql_bg';

# Wait for a background psql: returns (exit status, stdout, stderr).
sub sc_psql_bg_finish
{
	my ($h) = @_;
	eval { $h->{harness}->finish; 1 };
	my $rc = $h->{harness}->result(0) // -1;
	my ($out, $err) = ($h->{out}, $h->{err});
	s/\s+$// for $out, $err;
	return ($rc, $out, $err);
}
push @EXPORT, 'sc_psql_bg_finish';

# Is a background psql still running?
sub sc_psql_bg_running
{
	my ($h) = @_;
	$h->{harness}->pump_nb;
	return $h->{harness}->pumpable;
}
push @EXPORT, 'sc_psql_bg_running';

# ---------------------------------------------------------------- schema
# registry: Apicurio Registry (test/registry/registry.sh) and Confluent's
# serializers (test/tools/scregistry, always under timeout: a hang of the
# Python serializer was seen once)

# Seconds a scregistry command may take.
my $scregistry_timeout = 120;

# Skip the whole test unless the registry's environment is there (as
# sc_require_env, a bare prove bails out).
sub sc_require_registry
{
	for my $var (qw(SC_REGISTRY SC_REGISTRY_HTTPS SC_REGISTRY_SH SC_REGISTRY_DIR
		SC_SCREGISTRY SC_PYTHON))
	{
		BAIL_OUT("$var is not set: run the TAP tests through test/run-tests "
			  . "(test/run-tests tap [FILE...]), which starts the schema registry they need")
		  unless defined $ENV{$var} && $ENV{$var} ne '';
	}
	return;
}
push @EXPORT, 'sc_require_registry';

sub _scregistry
{
	my ($what, $stdin, @args) = @_;
	my ($out, $err) = ('', '');
	my @cmd = ('timeout', '-k', '5', $scregistry_timeout, $ENV{SC_PYTHON},
		$ENV{SC_SCREGISTRY}, @args);
	IPC::Run::run(\@cmd, '<', \$stdin, '>', \$out, '2>', \$err)
	  or die "scregistry $what failed (exit " . ($? >> 8) . "): @args\n$out$err";
	return $out;
}

# The registry URL and its CA for scregistry: $o{registry} may be
# 'https' (SC_REGISTRY_HTTPS) or a URL; SC_REGISTRY by default.
sub _registry_args
{
	my (%o) = @_;
	my $url = $o{registry} // $ENV{SC_REGISTRY};
	$url = $ENV{SC_REGISTRY_HTTPS} if $url eq 'https';
	my @a = ('--registry', $url);
	push @a, '--ca', $o{ca} // $ENV{SC_REGISTRY_CA_PEM}
	  if $url =~ /^https:/;
	return @a;
}

# Register a schema under a subject: sc_registry_register($subject,
# 'avro' | 'protobuf' | 'json', $schema_text [, registry => 'https']);
# returns the id the registry gave (the same one again for a schema the
# subject has).
sub sc_registry_register
{
	my ($subject, $type, $schema, %o) = @_;
	my $out = _scregistry('register', undef, 'register', _registry_args(%o),
		'--subject', $subject, '--type', $type, '--schema', $schema);
	$out =~ /^(\d+)\s*$/ or die "scregistry register printed no id: $out";
	return $1;
}
push @EXPORT, 'sc_registry_register';

# Produce Confluent-framed messages with Confluent's serializer:
# sc_registry_produce($topic, format => 'avro' | 'protobuf' | 'json',
#   schema => $text, records => [ {...}, ... ] (hashes, or JSON texts, or
#   undef for a tombstone), and optionally subject => $s (default
#   "$topic-value"), partition => $p, key => $field, message => $name and
#   proto_schema => 'descriptor' | 'text' (Protobuf: see scregistry),
#   registry => 'https').  Returns scregistry's summary: { count,
#   schema_ids => [...], subject, topic }; dies unless every message was
#   delivered.
sub sc_registry_produce
{
	my ($topic, %o) = @_;
	my $json = JSON::PP->new->canonical;
	my $in = join('',
		map { (!defined $_ ? 'null' : ref $_ ? $json->encode($_) : $_) . "\n" }
		  @{ $o{records} });
	my @args = ('produce', _registry_args(%o), '--bootstrap', $ENV{SC_KAFKA},
		'--topic', $topic, '--format', $o{format}, '--schema', $o{schema});
	push @args, '--subject', $o{subject} if defined $o{subject};
	push @args, '--partition', $o{partition} if defined $o{partition};
	push @args, '--key', $o{key} if defined $o{key};
	push @args, '--message', $o{message} if defined $o{message};
	push @args, '--proto-schema', $o{proto_schema} if defined $o{proto_schema};
	my $t = time;
	my $out = _scregistry('produce', $in, @args);
	my $r = $json->decode($out);
	note sprintf('scregistry: %d %s messages to %s in %.1f s, schema ids %s',
		$r->{count}, $o{format}, $topic, time - $t,
		join(',', @{ $r->{schema_ids} }));
	return $r;
}
push @EXPORT, 'sc_registry_produce';

# The schema with an id as the registry gives it: { id, schemaType, schema }.
sub sc_registry_schema
{
	my ($id, %o) = @_;
	my $out = _scregistry('get', undef, 'get', _registry_args(%o), '--id', $id);
	return JSON::PP->new->decode($out);
}
push @EXPORT, 'sc_registry_schema';

# Is the registry running (registry.sh status)?
sub sc_registry_running
{
	my ($out, $err) = ('', '');
	return IPC::Run::run([ $ENV{SC_REGISTRY_SH}, 'status', '--dir',
			$ENV{SC_REGISTRY_DIR} ], '<', \undef, '>', \$out, '2>', \$err) ? 1 : 0;
}
push @EXPORT, 'sc_registry_running';

sub _check_registry_access
{
	my $dir = $ENV{SC_REGISTRY_DIR};
	die "the registry directory $dir is not writable by uid $> "
	  . "(run-tests must start the registry as the user running the tests)\n"
	  unless -w $dir && -w "$dir/registry.log";
	return;
}

# Stop the registry (SIGTERM, by its PID); its schemas stay in its
# directory (file storage) for sc_registry_start.
sub sc_registry_stop
{
	_check_registry_access();
	my $t = time;
	_run('registry.sh stop', $ENV{SC_REGISTRY_SH}, 'stop', '--dir',
		$ENV{SC_REGISTRY_DIR});
	note sprintf('registry stopped in %.1f s', time - $t);
	return;
}
push @EXPORT, 'sc_registry_stop';

# Start it again: same ports, certificate and storage as before; returns
# once its Confluent API answers.
sub sc_registry_start
{
	_check_registry_access();
	my $t = time;
	my ($out) = _run('registry.sh start', $ENV{SC_REGISTRY_SH}, 'start',
		'--dir', $ENV{SC_REGISTRY_DIR});
	$out =~ s/\s+$//;
	note sprintf('registry started in %.1f s: %s', time - $t, $out);
	return;
}
push @EXPORT, 'sc_registry_start';

# Raw messages with the test venv's confluent_kafka (SC_PYTHON):
# sc_kafka_raw('copy', $from_topic, $to_topic, $n) copies n messages, each
# to the same partition; sc_kafka_raw('raw', $topic, @hex) produces the
# bytes of each hex string to partition 0.  Returns how many it produced.
sub sc_kafka_raw
{
	my (@args) = @_;
	my $code = <<'PY';
import sys
from confluent_kafka import Consumer, Producer, TopicPartition
bs, cmd = sys.argv[1], sys.argv[2]
p = Producer({'bootstrap.servers': bs})
if cmd == 'copy':
    src, dst, n = sys.argv[3], sys.argv[4], int(sys.argv[5])
    c = Consumer({'bootstrap.servers': bs, 'group.id': 'sc-copier', 'enable.auto.commit': False})
    md = c.list_topics(src, timeout=10)
    c.assign([TopicPartition(src, q, 0) for q in md.topics[src].partitions])
    got = 0
    while got < n:
        m = c.poll(10)
        if m is None:
            break
        if m.error():
            continue
        p.produce(dst, m.value(), partition=m.partition())
        got += 1
    c.close()
else:
    dst = sys.argv[3]
    got = 0
    for h in sys.argv[4:]:
        p.produce(dst, bytes.fromhex(h), partition=0)
        got += 1
p.flush(30)
print(got)
PY
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'timeout', '-k', '5', '120', $ENV{SC_PYTHON}, '-c', $code, $ENV{SC_KAFKA}, @args ],
		'<', \undef, '>', \$out, '2>', \$err)
	  or die "sc_kafka_raw @args failed: $out$err";
	chomp $out;
	return $out;
}

push @EXPORT, 'sc_kafka_raw';

1;
