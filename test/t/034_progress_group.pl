
# Progress Kafka's tools can see: with option progress_group, receivers
# commit their positions to that Kafka consumer group after each batch is
# durable in PostgreSQL, asynchronously, for kafka-consumer-groups and the
# like; streamcube never reads them back.  Checked with the Kafka
# distribution's own ConsumerGroupCommand --describe against the broker:
# its current offsets are the cube's positions, after a backlog and after
# more messages; a cube without the option commits to no group; changing
# the group moves the commits to the new one; only admins set it.

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

my $node = sc_node('progress_group');

# partition => current offset, as ConsumerGroupCommand --describe prints it
# ('-' when the group has none); undef when the group does not exist.
sub group_offsets
{
	my ($group, $topic) = @_;
	my $out = sc_kafka_tool('org.apache.kafka.tools.consumer.group.ConsumerGroupCommand',
		'--bootstrap-server', $ENV{SC_KAFKA}, '--describe', '--group', $group);
	return undef if $out =~ /does not exist/;
	my %o;
	for (split /\n/, $out)
	{
		my @f = split ' ';
		$o{ $f[2] } = $f[3] if @f >= 6 && $f[0] eq $group && $f[1] eq $topic;
	}
	return \%o;
}

sub cube_positions
{
	my ($cube) = @_;
	my %p = map { split /\|/ } split /\n/, $node->safe_psql('postgres',
		"SELECT partition, position FROM streamcube.consume_positions p "
		  . "JOIN streamcube.cubes c USING (cube_id) WHERE c.relid = '$cube'::regclass");
	return \%p;
}

sub show { my ($h) = @_; return join(',', map { "$_:$h->{$_}" } sort { $a <=> $b } keys %$h); }

# Poll the group until it shows the cube's positions (60 s at most).
sub group_matches
{
	my ($group, $topic, $cube, $what) = @_;
	my ($got, $want);
	my $t0 = time;
	while (time - $t0 < 60)
	{
		$want = show(cube_positions($cube));
		my $o = group_offsets($group, $topic);
		$got = defined $o ? show($o) : 'no group';
		last if $got eq $want;
		sleep(1);
	}
	is($got, $want, $what);
	return;
}

my $topic = sc_topic('progress');
sc_create_topic($topic, 3);
sc_produce($topic, count => 600, seed => 1);

my $group = "sc-progress-$$";
sc_create_cube($node, 'pg_on', $topic, qq({"progress_group": "$group"}));
sc_create_cube($node, 'pg_off', $topic);
is($node->safe_psql('postgres',
		"SELECT streamcube_wait('pg_on', '60 s') AND streamcube_wait('pg_off', '60 s')"),
	't', 'both cubes consumed the backlog');
is(show(cube_positions('pg_on')), '0:200,1:200,2:200', 'the positions are at the end');
group_matches($group, $topic, 'pg_on',
	'kafka-consumer-groups --describe shows the cube\'s positions as the group\'s current offsets');

sc_produce($topic, count => 300, seed => 2);
is($node->safe_psql('postgres', "SELECT streamcube_wait('pg_on', '60 s')"), 't',
	'more messages consumed');
group_matches($group, $topic, 'pg_on', 'and the group follows after each batch');

my $default_group = $node->safe_psql('postgres',
	"SELECT format('streamcube-%s-%s-default', d.oid, c.cube_id) FROM streamcube.cubes c, pg_database d "
	  . "WHERE c.relid = 'pg_off'::regclass AND d.datname = current_database()");
is(group_offsets($default_group, $topic), undef,
	"a cube without progress_group commits to no group (not even its consumer's, $default_group)");
is(show(cube_positions('pg_off')), '0:300,1:300,2:300', 'while it consumed everything');

# A new group: the receiver opens a consumer of it, and commits there.
my $group2 = "sc-progress2-$$";
$node->safe_psql('postgres',
	qq(SELECT streamcube_alter_cube('pg_on', '{"progress_group": "$group2"}')));
sc_produce($topic, count => 30, seed => 3);
is($node->safe_psql('postgres', "SELECT streamcube_wait('pg_on', '60 s')"), 't',
	'consumed after the change');
group_matches($group2, $topic, 'pg_on', 'after streamcube_alter_cube, the new group shows the positions');
is( $node->safe_psql('postgres',
		"SELECT count(*), count(DISTINCT (_partition, _offset)) FROM pg_on"),
	'930|930', 'every message once in the cube, through the change of group');

# A pause closes the receiver's consumer: the positions it has not
# committed to the group yet are committed before it goes, so Kafka's
# tools show where the cube stopped.
sc_produce($topic, count => 60, seed => 4);
is($node->safe_psql('postgres', "SELECT streamcube_wait('pg_on', '60 s')"), 't',
	'consumed before the pause');
$node->safe_psql('postgres', "SELECT streamcube_pause('pg_on')");
ok($node->poll_query_until('postgres',
		"SELECT bool_and(state = 'paused') FROM streamcube.consumers WHERE cube = 'pg_on'::regclass"),
	'the receiver is paused (its consumer closed)');
group_matches($group2, $topic, 'pg_on', 'after streamcube_pause, the group shows where the cube stopped');
$node->safe_psql('postgres', "SELECT streamcube_resume('pg_on')");

# Only admins set it: a cube owner who is not one may not point it
# anywhere, but may change other options and remove it.
$node->safe_psql('postgres', q{
	CREATE ROLE cube_owner LOGIN;
	GRANT USAGE, CREATE ON SCHEMA public TO cube_owner;
	ALTER TABLE pg_on OWNER TO cube_owner;
});
my ($rc, $out, $err) = $node->psql('postgres',
	qq(SET ROLE cube_owner; SELECT streamcube_alter_cube('pg_on', '{"progress_group": "payments-service"}')));
like($err, qr/ERROR:  permission denied to set cube option "progress_group"\nDETAIL:  Receivers commit to that Kafka consumer group with the cluster's credentials/,
	'a cube owner who is not an admin cannot point progress_group at another group');
($rc, $out, $err) = $node->psql('postgres',
	qq(SET ROLE cube_owner; SELECT streamcube_alter_cube('pg_on', '{"grace": "1 minute"}') ->> 'progress_group'));
is($out, $group2, 'but changes other options, the group kept');
($rc, $out, $err) = $node->psql('postgres',
	qq(SET ROLE cube_owner; SELECT streamcube_alter_cube('pg_on', '{"progress_group": null}') ? 'progress_group'));
is($out, 'f', 'and may remove it');
($rc, $out, $err) = $node->psql('postgres',
	qq(SELECT streamcube_create_cube('pg_bad', 'k', '$topic', 'ts timestamptz', 'ts', '1 hour', 'json', '{"progress_group": ""}')));
like($err, qr/ERROR:  cube option "progress_group" must be a Kafka group id of 1 to 255 characters/,
	'an empty group id is refused');

$node->stop;
done_testing();
