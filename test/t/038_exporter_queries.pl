
# monitoring/postgres_exporter.yaml: every query of the postgres_exporter
# queries file runs, as a monitoring role that may only SELECT the cube,
# and returns the columns its metrics declare, with the values the cube
# has: lag 0 and running once caught up, a dead letter counted, the windows
# due to be sealed and then the partitions due to be merged by compaction
# counted as streamcube_seal_due() works them off.  A role that may not read
# the cube gets no rows.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use CPAN::Meta::YAML;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;
use Time::HiRes qw(time sleep);

sc_require_env();

my $file = "$FindBin::RealBin/../../monitoring/postgres_exporter.yaml";
my $yaml = CPAN::Meta::YAML->read($file) or die CPAN::Meta::YAML->errstr;
my $queries = $yaml->[0];
is_deeply([ sort keys %$queries ],
	[qw(streamcube_cube streamcube_health streamcube_partition streamcube_receiver)],
	'the queries file has the four metric groups');

# monitoring/grafana-dashboard.json draws only series the queries file
# exports (<group>_<metric>, labels among the group's), and is a dashboard
# Grafana imports: JSON with a title, a uid and panels with targets.
{
	my %series;
	for my $g (keys %$queries)
	{
		for my $m (@{ $queries->{$g}{metrics} })
		{
			my ($k) = keys %$m;
			$series{"${g}_$k"} = 1 if $m->{$k}{usage} ne 'LABEL';
		}
	}
	open my $fh, '<', "$FindBin::RealBin/../../monitoring/grafana-dashboard.json" or die $!;
	local $/;
	my $dash = JSON::PP->new->decode(<$fh>);
	close $fh;
	ok($dash->{title} && $dash->{uid} && @{ $dash->{panels} }, 'the Grafana dashboard has a title, a uid and panels');
	my @exprs = map { map { $_->{expr} } @{ $_->{targets} // [] } } @{ $dash->{panels} };
	cmp_ok(scalar(@exprs), '>=', 6, 'its panels query the exporter\'s series');
	my @unknown = grep { !$series{$_} } map { /\b(streamcube_[a-z_]+)/g } @exprs;
	is_deeply(\@unknown, [], 'every series it draws is one the queries file exports');
}

my $node = sc_node('exporter');
sub q1 { return $node->safe_psql('postgres', $_[0]); }

# Two days ago, on the hour: five hourly windows, all long past their grace.
my $start = int((time - 2 * 86400) / 3600) * 3600;
my $topic = sc_topic('exporter');
sc_create_topic($topic, 2);
sc_produce($topic, count => 300, 'start-ts' => $start, 'step-ms' => 60000);
sc_kcat_produce($topic, 0, 'not json');
sc_create_cube($node, 'mon', $topic);
is(q1("SELECT streamcube_wait('mon', '60 s')"), 't', 'caught up');
q1("CREATE ROLE mon_exporter LOGIN; GRANT SELECT ON mon TO mon_exporter; CREATE ROLE mon_nobody LOGIN;");

# Run a query as a role: [column names], [rows as { column => value }].
sub run_as
{
	my ($role, $sql) = @_;
	$sql =~ s/\s+\z//;
	my $out = $node->safe_psql('postgres', "COPY ($sql) TO STDOUT WITH (FORMAT csv, HEADER)",
		extra_params => [ '-U', $role ]);
	my @lines = split /\n/, $out;
	my @cols = split /,/, shift @lines;
	my @rows = map { my @v = split /,/, $_, -1; my %r; @r{@cols} = @v; \%r } @lines;
	return (\@cols, \@rows);
}

my %rows;
for my $name (sort keys %$queries)
{
	my $q = $queries->{$name};
	my @metrics = map { (keys %$_)[0] } @{ $q->{metrics} };
	my ($cols, $rows) = run_as('mon_exporter', $q->{query});
	is_deeply($cols, \@metrics, "$name: the query's columns are its metrics, in order");
	cmp_ok(scalar(@$rows), '>', 0, "$name: rows for the monitoring role");
	my @bad = grep { my $m = $_; my ($k) = keys %$m; !grep { $m->{$k}{usage} eq $_ } qw(LABEL GAUGE COUNTER) }
	  @{ $q->{metrics} };
	is(scalar(@bad), 0, "$name: every metric is a LABEL, GAUGE or COUNTER");
	my (undef, $none) = run_as('mon_nobody', $q->{query});
	is(scalar(@$none), 0, "$name: no rows for a role that may not read the cube");
	$rows{$name} = $rows;
}

my @parts = sort { $a->{partition} <=> $b->{partition} } @{ $rows{streamcube_partition} };
is(join(',', map { "$_->{partition}:$_->{lag_messages}:$_->{lag_seconds}" } @parts), '0:0:0,1:0:0',
	'streamcube_partition: per partition, lag 0 messages and 0 s once caught up');
is(join(',', map { $_->{position} } @parts),
	q1("SELECT string_agg(position::text, ',' ORDER BY partition) FROM streamcube.consume_positions"),
	'streamcube_partition: the positions are the committed ones');
my ($r) = @{ $rows{streamcube_receiver} };
is("$r->{cube}|$r->{state}|$r->{running}|$r->{rows_total}", 'mon|running|1|300',
	'streamcube_receiver: running, with its rows');
cmp_ok($r->{last_batch_age_seconds}, '<', 60, 'streamcube_receiver: the last batch\'s age in seconds');

sub cube_row
{
	my (undef, $rows) = run_as('mon_exporter', $queries->{streamcube_cube}{query});
	my ($c) = @$rows;
	return "$c->{paused}|$c->{dead_letters}|$c->{windows_to_seal}|$c->{partitions_to_compact}";
}
my $hours = q1("SELECT count(DISTINCT date_trunc('hour', ts)) FROM mon");
cmp_ok($hours, '>=', 5, "the rows lie in $hours hourly windows");
is(cube_row(), "0|1|$hours|0", 'streamcube_cube: not paused, 1 dead letter, every past window due to be sealed');
q1("SELECT streamcube_seal_due()");
is(cube_row(), "0|1|0|$hours", 'after a seal: nothing to seal, the sealed hours due to be merged into days');
q1("SELECT streamcube_seal_due()");
is(cube_row(), "0|1|0|0", 'after a compaction: nothing due');
{
	my (undef, $rows) = run_as('mon_exporter', $queries->{streamcube_health}{query});
	my ($h) = @$rows;
	is("$h->{cube}|$h->{state}|$h->{unhealthy}|$h->{lag_messages}|$h->{catch_up_seconds}|$h->{dead_letters_last_hour}|$h->{unhealthy_seconds}",
		'mon|running|0|0|0|1|', 'streamcube_health: running, healthy, caught up, the dead letter of the last hour');
}
q1("SELECT streamcube_pause('mon')");
is((split /\|/, cube_row())[0], 1, 'streamcube_cube: paused');

$node->stop;
done_testing();
