
# What a schema registry says in a refusal reaches the user cut to 200
# bytes, "..." included, whatever its length (issue 42: a message of 201 or
# 202 characters had its "..." written up to 2 bytes past its allocation,
# and came out 203 bytes long).  A stand-in registry on 127.0.0.1 answers
# every request with HTTP 403 and {"error_code": 40301, "message": M},
# M of a length that grows by one per request, around the cut.

use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use StreamcubeTest;
use Test::More;
use Time::HiRes qw(sleep);

sc_require_env();

my $dir = PostgreSQL::Test::Utils::tempdir();
my $server = <<'PY';
import http.server, json, sys
lengths = iter(range(int(sys.argv[2]), 10**6))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        n = next(lengths)
        body = json.dumps({"error_code": 40301, "message": ("m%d-" % n + "x" * n)[:n]}).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(str(s.server_address[1]))
s.serve_forever()
PY
my $first = 170;
my $pid = fork();
die "fork: $!" unless defined $pid;
if ($pid == 0)
{
	exec('python3', '-c', $server, "$dir/port", $first) or die "exec python3: $!";
}
my $port;
for (1 .. 200)
{
	if (-s "$dir/port") { $port = slurp_file("$dir/port"); last; }
	sleep 0.05;
}
ok($port, 'the stand-in registry listens');

my $node = sc_node('answers');
$node->safe_psql('postgres',
	"SELECT streamcube_alter_cluster('k', properties => '{\"schema.registry.url\": \"http://127.0.0.1:$port\"}')");
my $topic = sc_topic('answers');
sc_create_topic($topic, 1);
my %seen;
for my $i (0 .. 20)
{
	my ($rc, $out, $err) = $node->psql('postgres',
		"SELECT streamcube_create_cube('a$i', 'k', '$topic', 'ts timestamptz', 'ts', '1 hour', 'avro', "
		  . "'{\"subject\": \"s\"}')");
	my ($said) = $err =~ /user\.info\)(.*)$/m;
	next unless defined $said;
	$seen{length $said} = $said;
	ok(length($said) <= 200, "a refusal's message of the registry is at most 200 bytes: " . length($said));
}
ok(scalar(grep { $_ >= 198 } keys %seen) >= 2, 'answers around the cut were seen: ' . join(',', sort keys %seen));
like($seen{200} // '', qr/\.\.\.$/, 'one cut ends in "..."');

kill 'TERM', $pid;
waitpid($pid, 0);
unlike(slurp_file($node->logfile), qr/terminated by signal/, 'no process died');
$node->stop;
done_testing();
