
# Bad input never crash-loops a receiver.  About 300 messages, generated
# from a fixed seed, go to one partition: valid events and variants of
# them, random bytes, invalid UTF-8, NUL bytes inside and outside strings,
# numbers no column type takes (1e999999, 400-digit integers), JSON nested
# 100,000 levels deep (and 300, and exactly at the 256 limit, also inside
# the jsonb column), huge strings and a 10 MB message, truncated JSON,
# copies of valid messages with random bytes flipped, odd time values, an
# empty message and a tombstone.
#
# Two cubes read the topic: 'fz' (ts, name, qty, doc jsonb: the general
# JSON parser) and 'fz_flat' (ts, name, qty: flat messages take the fast
# path).  For each: every offset ends up exactly once as a row or as a dead
# letter, dead letters keep the payload byte for byte, the messages known
# to be valid are rows with exactly their values, the messages known to be
# bad are dead letters, and the receiver never restarted (same pid, same
# started_at, no ERROR or FATAL from it, no "stack depth limit exceeded").

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use Digest::MD5 qw(md5_hex);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;

sc_require_env();

# ---------------------------------------------------------------- PRNG
# xorshift32 with a fixed seed: the same messages on every run and every
# platform.
my $state = 0x5eed1234;

sub rnd
{
	my ($n) = @_;    # 0 .. n-1
	$state ^= ($state << 13) & 0xffffffff;
	$state ^= $state >> 17;
	$state ^= ($state << 5) & 0xffffffff;
	return $state % $n;
}
sub rnd_bytes { my ($len) = @_; return join('', map { chr(rnd(256)) } 1 .. $len); }

# ---------------------------------------------------------------- messages
# Each message: p (payload; undef for a tombstone), kind:
#   valid    a row in both cubes, with e (name, qty, ts, doc) exactly
#   bad      a dead letter in both cubes (err: its error, when known)
#   bad_doc  a dead letter in fz (its doc is bad), anything in fz_flat
#   any      either, in both
my @msgs;

sub ts_of { my ($i) = @_; return sprintf('2026-01-01T00:%02d:%02dZ', int($i / 60) % 60, $i % 60); }
sub epoch_of { my ($i) = @_; return 1767225600 + (int($i / 60) % 60) * 60 + $i % 60; }

# A valid event and what its row must hold.
sub event
{
	my ($i, %o) = @_;
	my $name = exists $o{name_json} ? $o{name_json} : qq("ev-$i");
	my $qty = exists $o{qty_json} ? $o{qty_json} : ($i * 7) % 1000;
	my $doc = exists $o{doc_json} ? $o{doc_json} : qq({"i":$i,"tags":["a","b"],"s":"x$i"});
	my @fields = (
		[ ts => qq("@{[ ts_of($i) ]}") ],
		[ name => $name ], [ qty => $qty ]);
	push @fields, [ doc => $doc ] if defined $doc;
	@fields = reverse @fields if $o{reverse};
	push @fields, @{ $o{extra} } if $o{extra};
	my $sep = $o{space} ? " ,\n\t " : ',';
	my $p = '{' . join($sep, map { qq("$_->[0]":$_->[1]) } @fields) . '}';
	$p = " \n\t$p \r\n" if $o{space};
	return $p;
}

sub add_valid
{
	my ($i, %o) = @_;
	my $e = {
		name => exists $o{name} ? $o{name} : "ev-$i",
		qty => exists $o{qty} ? $o{qty} : ($i * 7) % 1000,
		ts => epoch_of($i),
		doc => exists $o{doc} ? $o{doc} : qq({"i":$i,"tags":["a","b"],"s":"x$i"}),
	};
	push @msgs, { p => event($i, %o), kind => 'valid', e => $e, what => $o{what} // 'valid event' };
	return;
}
sub add { my ($kind, $p, $what, $err) = @_; push @msgs, { p => $p, kind => $kind, what => $what, err => $err }; return; }

my $deep_err = 'JSON nested deeper than 256 levels';
my $n = 0;    # event numbers

# 90 plain valid events, and valid variants
add_valid($n++) for 1 .. 90;
add_valid($n++, reverse => 1, what => 'keys in another order');
add_valid($n++, space => 1, what => 'whitespace everywhere');
add_valid($n++, extra => [ [ zz => '[1,{"b":null}]' ], [ country => '"de"' ] ], what => 'unknown keys');
add_valid($n++, qty_json => '"5"', qty => 5, what => 'qty as a string');
add_valid($n++, qty_json => '-2147483648', qty => -2147483648, what => 'smallest int');
add_valid($n++, qty_json => 'null', qty => undef, name_json => 'null', name => undef, doc_json => 'null', doc => undef, what => 'nulls');
add_valid($n++, doc_json => undef, doc => undef, what => 'no doc key');
add_valid($n++, name_json => '"tab\\there\\nnl \\\\N \\\\. back\\\\slash \\"q\\" \\/"',
	name => "tab\there\nnl \\N \\. back\\slash \"q\" /", what => 'escapes in a string');
add_valid($n++, name_json => '"\\\\N"', name => '\\N', what => 'the string \\N');
add_valid($n++, name_json => '"\\u00e9\\ud83d\\ude00 caf\\u00E9"', name => "\xc3\xa9\xf0\x9f\x98\x80 caf\xc3\xa9", what => 'unicode escapes');
add_valid($n++, name_json => "\"\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"", name => "\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", what => 'raw UTF-8');
add_valid($n++, name_json => '"' . ('[' x 100_000) . '"', name => '[' x 100_000, what => '100,000 brackets inside a string');
add_valid($n++, name_json => '"' . ('{\\"' x 1000) . '"', name => ('{"' x 1000), what => 'escaped quotes and braces in a string');
add_valid($n++, name_json => '123.5e3', name => '123.5e3', what => 'a number for a text column');
add_valid($n++, name_json => '{"x":[1,2]}', name => '{"x":[1,2]}', what => 'an object for a text column');
add_valid($n++, doc_json => '"just a string"', doc => '"just a string"', what => 'a string for the jsonb column');
my $digits = '9' x 400;
add_valid($n++, doc_json => qq({"big":$digits}), doc => qq({"big":$digits}), what => '400-digit number in doc');
my $deep_ok = ('[' x 254) . ('1') . (']' x 254);    # 1 (root) + 1 (doc) + 254 = 256
add_valid($n++, doc_json => "{\"d\":$deep_ok}", doc => "{\"d\":$deep_ok}", what => 'nested exactly 256 levels');
my $deep200 = ('{"a":' x 200) . '1' . ('}' x 200);
add_valid($n++, doc_json => $deep200, doc => $deep200, what => 'doc nested 200 levels');
add_valid($n++, name_json => '"' . ('n' x (5 * 1024 * 1024)) . '"', name => 'n' x (5 * 1024 * 1024), what => '5 MB name');
add_valid($n++, doc_json => '{"s":"' . ('d' x (2 * 1024 * 1024)) . '"}', doc => '{"s":"' . ('d' x (2 * 1024 * 1024)) . '"}', what => '2 MB string in doc');
add_valid($n++, extra => [ [ ('k' x (1024 * 1024)) => '1' ] ], what => '1 MB key');
add_valid($n++, extra => [ map { [ "key$_" => $_ ] } 1 .. 100_000 ], what => '100,000 keys');
{
	my $ten = 10 * 1024 * 1024;
	my $base = event($n, name_json => '""');
	my $name = 'T' x ($ten - length($base));
	add_valid($n++, name_json => qq("$name"), name => $name, what => '10 MB message');
	die 'the 10 MB message is not 10 MB' unless length($msgs[-1]{p}) == $ten;
}

# bad for sure, in both cubes
add('bad', rnd_bytes(1 + rnd(3000)), 'random bytes') for 1 .. 30;
for my $bytes ("\xc3\x28", "\xff\xfe", "\xc0\xaf", "\x80", "\xed\xa0\x80", "\xe2\x82", "\xf8\x88\x80\x80\x80", "ab\xfe")
{
	add('bad', event($n++, name_json => qq("x$bytes")), 'invalid UTF-8 in name');
}
add('bad_doc', event($n++, doc_json => qq({"s":"\xc3\x28"})), 'invalid UTF-8 in doc');
add('bad_doc', event($n++, doc_json => qq({"\xff":1})), 'invalid UTF-8 in a doc key');
add('any', event($n++, extra => [ [ zz => "\"\xff\xfe\"" ] ]), 'invalid UTF-8 in an ignored value');
add('any', event($n++, extra => [ [ "z\xff" => '1' ] ]), 'invalid UTF-8 in an ignored key');
add('bad', event($n++, name_json => "\"a\x00b\""), 'NUL inside a string');
add('bad', event($n++) . "\x00", 'NUL after the object');
add('bad', "\x00" . event($n++), 'NUL before the object');
add('bad', event($n++, extra => [ [ "k\x00" => '1' ] ]), 'NUL inside a key');
{
	my $e = event($n++);
	$e =~ s/,/,\x00/;
	add('bad', $e, 'NUL between tokens');
}
add('bad', event($n++, name_json => '"a\\u0000b"'), '\\u0000 in a string');
add('bad', event($n++, doc_json => '{"s":"\\u0000"}'), '\\u0000 in doc');
add('bad', "\x00", 'a lone NUL');
add('bad', "\x00" x 1000, '1,000 NULs');
add('bad', event($n++, name_json => '"\\ud800"'), 'lone surrogate escape');
add('bad', event($n++, qty_json => '1e999999'), 'qty 1e999999');
add('bad', event($n++, qty_json => $digits), 'qty with 400 digits');
add('bad', event($n++, qty_json => "-$digits"), 'qty with 400 digits, negative');
add('bad', event($n++, qty_json => '1.5'), 'qty 1.5');
add('bad', event($n++, qty_json => '2147483648'), 'qty 2^31');
add('bad', event($n++, qty_json => 'true'), 'qty true');
add('bad', event($n++, qty_json => '01'), 'qty 01 (not JSON)');
add('bad', event($n++, qty_json => '-'), 'qty - (not JSON)');
add('bad_doc', event($n++, doc_json => '{"n":1e999999}'), 'doc number 1e999999');
add('any', event($n++, doc_json => '{"n":1e-999999}'), 'doc number 1e-999999');
add('bad', event($n++, extra => [ [ a => ('[' x 100_000) . (']' x 100_000) ] ]), $deep_err);
add('bad', event($n++, extra => [ [ a => ('{"a":' x 100_000) . '1' . ('}' x 100_000) ] ]), $deep_err);
add('bad', event($n++, extra => [ [ a => ('[' x 300) . (']' x 300) ] ]), $deep_err);
add('bad', event($n++, doc_json => ('[' x 300) . (']' x 300)), $deep_err);
add('bad', event($n++, doc_json => "{\"d\":[$deep_ok]}"), $deep_err);    # 257 levels
add('bad', '{"a":' . ('[' x 100_000), $deep_err . ', unclosed');
add('bad', '[' x 100_000, $deep_err . ', nothing else');
add('bad', (']' x 100_000) . ('[' x 100_000), 'closing brackets first');
add('bad', '{"a":"' . ('[' x 100_000), 'unterminated string of brackets');
for (1 .. 20)
{
	my $e = event($n++);
	add('bad', substr($e, 0, 1 + rnd(length($e) - 1)), 'truncated JSON');
}
add('bad', substr(event($n++, name_json => '"' . ('t' x 3_000_000) . '"'), 0, 2_000_000), 'truncated 3 MB message');
add('bad', '', 'empty message', 'message is empty');
add('bad', undef, 'tombstone', 'tombstone: the message has no value (a NULL payload)');
add('bad', '[1,2]', 'an array');
add('bad', '"x"', 'a string');
add('bad', '42', 'a number');
add('bad', 'null', 'null');
add('bad', 'true', 'true');
add('bad', '{}', 'an empty object');
add('bad', '{"name":"x","qty":1}', 'no ts');
add('bad', '{"ts":null,"name":"x"}', 'ts null');
add('bad', '{"ts":"2026-13-45T00:00:00Z"}', 'ts invalid');
add('bad', '{"ts":"2999-01-01T00:00:00Z"}', 'ts too far in the future');
add('bad', '{"ts":1e999999}', 'ts 1e999999');
add('bad', '{"ts":"' . ('9' x 10_000) . '"}', 'ts of 10,000 digits');
add('bad', '{"ts":{"a":1}}', 'ts an object');
add('bad', '{"ts":"2026-01-01T00:00:00Z"' . (' ' x 100_000), 'unterminated object');
for my $ts ('infinity', '-infinity', 'epoch', 'now', 'today', 'allballs', 'tomorrow',
	'4714-11-24 00:00:00+00 BC', '4714-11-24 00:59:59+00 BC', '4714-11-24 00:30:00+01 BC',
	'0001-01-01 00:00:00+00 BC', '294276-12-31 23:59:59+00', '2026-01-01T00:00:00.1234567Z',
	'2026-01-01T05:30:00+05:30', '2026-01-01T00:00:00+15:59', '2026-01-01T00:00:00-99:99',
	'2026-02-29T00:00:00Z', "2026-01-01T00:00:00Z\x00")
{
	add('any', qq({"ts":"$ts","name":"odd time","qty":1}), "ts $ts");
}
add('any', "\xef\xbb\xbf" . event($n++), 'BOM before the object');
add('any', '{"t\\u0073":"2026-01-01T00:00:00Z","name":"escaped key","qty":1}', 'escaped key');
add('any', '{"ts":"2026-01-01T00:00:00Z","ts":"2026-01-01T00:00:01Z","name":"dup"}', 'duplicate keys');
add('any', '{"ts":"2026-01-01T00:00:00Z","name":"\\", "qty":1}', 'backslash quote');

# copies of valid messages with 1 to 4 bytes replaced
for (1 .. 40)
{
	my $e = event($n++);
	substr($e, rnd(length($e)), 1) = chr(rnd(256)) for 0 .. rnd(4);
	add('any', $e, 'mutated copy');
}

# shuffle (Fisher-Yates)
for (my $i = $#msgs; $i > 0; $i--)
{
	my $j = rnd($i + 1);
	@msgs[ $i, $j ] = @msgs[ $j, $i ];
}
my $total = scalar(@msgs);
note sprintf('%d messages: %s', $total,
	join(', ', map { my $k = $_; "$k " . scalar(grep { $_->{kind} eq $k } @msgs) } qw(valid bad bad_doc any)));

# ---------------------------------------------------------------- node, cubes
my $node = sc_node('fuzz', "log_line_prefix = '%m [%p] %b %q%a '");
my $topic = sc_topic('fuzz');
sc_create_topic_config($topic, 1, 'max.message.bytes' => 20_000_000);
$node->safe_psql('postgres',
	"SELECT streamcube_create_cube('fz', 'k', '$topic', "
	  . "'ts timestamptz, name text, qty int, doc jsonb', 'ts', '1 hour', 'json')");
$node->safe_psql('postgres',
	"SELECT streamcube_create_cube('fz_flat', 'k', '$topic', "
	  . "'ts timestamptz, name text, qty int', 'ts', '1 hour', 'json')");
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM streamcube.consumers WHERE state = 'running'"),
	'both receivers run');
my $receivers_sql = "SELECT cube, pid, started_at FROM streamcube.consumers ORDER BY 1";
my $receivers = $node->safe_psql('postgres', $receivers_sql);
my $log_offset = -s $node->logfile;

# ---------------------------------------------------------------- produce
# Non-empty payloads go one file each to kcat (one message per file, in
# order); kcat skips empty input, so the empty message and the tombstone
# go through stdin with a key delimiter ("k:" is key k and an empty value;
# with -Z a line ":" is a NULL key and a NULL value).
my $dir = PostgreSQL::Test::Utils::tempdir();
my @kcat = ('kcat', '-P', '-b', $ENV{SC_KAFKA}, '-t', $topic, '-p', '0',
	'-X', 'message.max.bytes=20000000');
my @files;

sub kcat_run
{
	my ($in, @args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ @kcat, @args ], '<', defined $in ? \$in : \undef,
		'>', \$out, '2>', \$err)
	  or die "kcat -P failed: $err";
	return;
}

sub flush_files
{
	return unless @files;
	kcat_run(undef, @files);
	@files = ();
	return;
}
for my $i (0 .. $#msgs)
{
	my $p = $msgs[$i]{p};
	if (defined $p && $p ne '')
	{
		my $f = sprintf('%s/m%04d', $dir, $i);
		open my $fh, '>:raw', $f or die "cannot write $f: $!";
		print $fh $p;
		close $fh;
		push @files, $f;
		next;
	}
	flush_files();
	if (defined $p)
	{
		kcat_run("k:\n", '-K', ':');    # key "k", empty value
	}
	else
	{
		kcat_run(":\n", '-K', ':', '-Z');    # NULL key, NULL value
	}
}
flush_files();
note 'produced, ' . sc_elapsed();

# What Kafka holds: offset and size of each message, in production order.
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'kcat', '-C', '-b', $ENV{SC_KAFKA}, '-t', $topic, '-o', 'beginning',
			'-e', '-q', '-X', 'fetch.message.max.bytes=20000000', '-f', '%o %S\n' ],
		'<', \undef, '>', \$out, '2>', \$err)
	  or die "kcat -C failed: $err";
	my $want = join('', map { "$_ " . (defined $msgs[$_]{p} ? length($msgs[$_]{p}) : -1) . "\n" } 0 .. $#msgs);
	is($out, $want, "Kafka holds the $total messages in order, offset i = message i");
}

# ---------------------------------------------------------------- checks
for my $cube (qw(fz fz_flat))
{
	is($node->safe_psql('postgres', "SELECT streamcube_wait('$cube', '120 s')"),
		't', "$cube: streamcube_wait: every message is consumed");
}
note 'consumed, ' . sc_elapsed();

is($node->safe_psql('postgres', $receivers_sql), $receivers,
	'the receivers never restarted: same pids, same started_at');

my $log = sc_log_since($node, $log_offset);
unlike($log, qr/stack depth limit exceeded/, 'no "stack depth limit exceeded" in the server log');
my @noisy = grep { /streamcube receiver\S* (ERROR|FATAL|PANIC):|background worker "streamcube receiver[^"]*" \(PID \d+\) (exited with exit code [1-9]|was terminated by signal)|server process .* was terminated/ }
  split /\n/, $log;
is(scalar(@noisy), 0, 'no ERROR or FATAL from a receiver, no receiver died')
  or diag join("\n", map { substr($_, 0, 300) } @noisy[ 0 .. ($#noisy < 9 ? $#noisy : 9) ]);

# The expected payloads, as SQL: offset, md5 of the payload (NULL for the
# tombstone).
my $payloads = 'VALUES '
  . join(',', map { "($_, " . (defined $msgs[$_]{p} ? "'" . md5_hex($msgs[$_]{p}) . "'" : 'NULL') . ')' } 0 .. $#msgs);

sub sql_str
{
	my ($s) = @_;
	return 'NULL' unless defined $s;
	return "convert_from('\\x" . unpack('H*', $s) . "'::bytea, 'UTF8')";
}

# The rows the valid messages must give: offset, md5 of the name, qty, ts, doc.
my @valid = grep { $msgs[$_]{kind} eq 'valid' } 0 .. $#msgs;
my $expected_rows = 'VALUES '
  . join(',',
	map {
		my $e = $msgs[$_]{e};
		"($_, " . (defined $e->{name} ? "'" . md5_hex($e->{name}) . "'" : 'NULL') . ', '
		  . ($e->{qty} // 'NULL') . ", to_timestamp($e->{ts}), "
		  . (defined $e->{doc} ? sql_str($e->{doc}) . '::jsonb' : 'NULL::jsonb') . ')'
	} @valid);

my %bad_in = (fz => [qw(bad bad_doc)], fz_flat => [qw(bad)]);
for my $cube (qw(fz fz_flat))
{
	my $dl = "streamcube.dead_letters d WHERE d.cube = '$cube'::regclass";
	my $counts = $node->safe_psql('postgres',
		"SELECT (SELECT count(*) FROM $cube), (SELECT count(*) FROM $dl)");
	my ($rows, $dead) = split /\|/, $counts;
	note "$cube: $rows rows, $dead dead letters";
	is($rows + $dead, $total, "$cube: rows + dead letters = the $total messages");
	# What became of the messages that may go either way, for the log.
	my %error = map { split /\|/, $_, 2 } split /\n/, $node->safe_psql('postgres',
		"SELECT d.\"offset\", left(regexp_replace(d.error, '[^[:print:]]', '?', 'g'), 90) FROM $dl");
	note "$cube: $_ ($msgs[$_]{what}): " . ($error{$_} // 'row')
	  for grep { $msgs[$_]{kind} eq 'any' || $msgs[$_]{kind} eq 'bad_doc' } 0 .. $#msgs;
	is( $node->safe_psql('postgres',
			"SELECT o FROM generate_series(0, $total - 1) o "
			  . "WHERE (SELECT count(*) FROM $cube WHERE _partition = 0 AND _offset = o) "
			  . "    + (SELECT count(*) FROM $dl AND partition = 0 AND \"offset\" = o) <> 1 ORDER BY 1"),
		'', "$cube: every offset 0..@{[ $total - 1 ]} is exactly one row or one dead letter");
	is( $node->safe_psql('postgres',
			"SELECT count(*) = count(DISTINCT (_partition, _offset)), "
			  . "count(*) FILTER (WHERE _partition <> 0 OR _offset NOT BETWEEN 0 AND $total - 1) "
			  . "FROM $cube"),
		't|0', "$cube: (_partition, _offset) unique, nothing outside the topic");

	is( $node->safe_psql('postgres',
			"SELECT d.\"offset\" FROM $dl AND NOT EXISTS (SELECT 1 FROM ($payloads) e(o, md5) "
			  . "WHERE e.o = d.\"offset\" AND e.md5 IS NOT DISTINCT FROM md5(d.payload)) "
			  . "ORDER BY 1"),
		'', "$cube: every dead letter holds its message byte for byte");

	my $bad = join(',', grep { my $k = $msgs[$_]{kind}; grep { $_ eq $k } @{ $bad_in{$cube} } } 0 .. $#msgs);
	is( $node->safe_psql('postgres',
			"SELECT o FROM unnest('{$bad}'::bigint[]) o WHERE NOT EXISTS "
			  . "(SELECT 1 FROM $dl AND \"offset\" = o) ORDER BY 1"),
		'', "$cube: every message known to be bad is a dead letter")
	  or diag explain [ map { "$_: $msgs[$_]{what}" } split /,/, $bad ];

	my $missing = $node->safe_psql('postgres',
		"SELECT e.o FROM ($expected_rows) e(o, name_md5, qty, ts, doc) "
		  . "WHERE NOT EXISTS (SELECT 1 FROM $cube r WHERE r._offset = e.o "
		  . "AND md5(r.name) IS NOT DISTINCT FROM e.name_md5 "
		  . "AND r.qty IS NOT DISTINCT FROM e.qty AND r.ts = e.ts"
		  . ($cube eq 'fz' ? ' AND r.doc IS NOT DISTINCT FROM e.doc' : '')
		  . ") ORDER BY 1");
	is($missing, '', "$cube: the " . scalar(@valid) . ' valid messages are rows with exactly their values')
	  or diag join("\n", map { "$_: $msgs[$_]{what}: "
		  . $node->safe_psql('postgres', "SELECT coalesce((SELECT left(error, 200) FROM $dl AND \"offset\" = $_), 'a row, with other values')") }
		split /\n/, $missing);

	# the errors that are known exactly
	for my $i (grep { defined $msgs[$_]{err} || $msgs[$_]{what} =~ /^\Q$deep_err\E$/ } 0 .. $#msgs)
	{
		my $want = $msgs[$i]{err} // $deep_err;
		is( $node->safe_psql('postgres', "SELECT error FROM $dl AND \"offset\" = $i"),
			$want, "$cube: dead letter of offset $i ($msgs[$i]{what}) says why");
	}
	is( $node->safe_psql('postgres',
			"SELECT payload IS NULL FROM $dl AND \"offset\" = "
			  . (grep { !defined $msgs[$_]{p} } 0 .. $#msgs)[0]),
		't', "$cube: the tombstone's dead letter has a NULL payload");
}

# The 10 MB row is whole.
my ($ten) = grep { $msgs[$_]{what} eq '10 MB message' } 0 .. $#msgs;
is( $node->safe_psql('postgres',
		"SELECT length(name), md5(name) FROM fz WHERE _offset = $ten"),
	length($msgs[$ten]{e}{name}) . '|' . md5_hex($msgs[$ten]{e}{name}),
	'the 10 MB message is a row, its name whole');

# Ingest goes on after all that.
sc_kcat_produce($topic, 0, event(100_000));
for my $cube (qw(fz fz_flat))
{
	is($node->safe_psql('postgres', "SELECT streamcube_wait('$cube', '30 s')"),
		't', "$cube: a message after the fuzz is consumed");
	is( $node->safe_psql('postgres',
			"SELECT name FROM $cube WHERE _offset = $total"),
		'ev-100000', "$cube: ... and is a row");
}
is($node->safe_psql('postgres', $receivers_sql), $receivers,
	'still the same receivers');

$node->stop;
done_testing();
