/*
 * sckafka.c — the streamcube test bench's Kafka tool (librdkafka 2.0.2).
 *
 * One small binary, seven jobs, so that tests and the quickstart never need a
 * JVM just to poke at Kafka:
 *
 *   mock          runs a librdkafka mock cluster (N brokers on random loopback
 *                 ports), prints its bootstrap list as the first line of
 *                 stdout, then obeys control commands (broker down/up, move a
 *                 partition leader or a group's coordinator, create a topic)
 *                 read line by line from stdin and from an optional FIFO,
 *                 until SIGTERM/SIGINT/quit.
 *                 The FIFO exists because the quickstart runs the mock
 *                 detached with stdin=/dev/null; it is reopened after every
 *                 writer closes, so `echo down 1 > FIFO` works any number of
 *                 times.
 *   create-topic  creates a topic (optionally with topic configs) on a real
 *                 broker through the Admin API and waits until every
 *                 partition has a leader.
 *   delete-topic  deletes a topic the same way and waits until metadata no
 *                 longer lists it.
 *   add-partitions
 *                 raises a topic's partition count the same way and waits
 *                 until metadata shows every new partition with a leader.
 *   committed     prints the offsets a consumer group has committed for a
 *                 topic (the mock has no Admin API for Kafka's own tools).
 *   produce       generates events of the demo cube (event time, two text
 *                 dimensions, two numeric measures) as JSON, CSV or bare Avro
 *                 records, message i going to partition i % P, so
 *                 per-partition counts and (with --start-ts) event-time
 *                 windows are known in advance.
 *   avro-schema   prints the Avro schema of produce --format avro's records.
 *
 * The main thread does everything; librdkafka's callbacks (delivery reports)
 * are served from rd_kafka_poll()/rd_kafka_flush() on that same thread.
 * Signals only set a flag (and, for mock, write to a self-pipe that wakes
 * poll()).  Exit status: 0 success, 1 Kafka/runtime failure, 2 usage error.
 * See usage() for the exact command lines.
 */
#define _GNU_SOURCE /* getopt_long, strtok_r, mkfifo, pipe2 */

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#define EXIT_KAFKA 1
#define EXIT_USAGE 2

static const char *const usage_text =
	"sckafka - the streamcube test bench's Kafka tool (librdkafka %s)\n"
	"\n"
	"usage:\n"
	"  sckafka mock [--brokers N] --topic NAME:PARTITIONS [--topic ...]\n"
	"               [--control FIFO_PATH] [--pidfile FILE]\n"
	"  sckafka create-topic --bootstrap B NAME PARTITIONS [--replication R]\n"
	"               [--if-not-exists] [--config KEY=VALUE ...]\n"
	"  sckafka delete-topic --bootstrap B NAME\n"
	"  sckafka add-partitions --bootstrap B NAME TOTAL\n"
	"  sckafka committed --bootstrap B --group G --topic T [--timeout MS]\n"
	"  sckafka produce --bootstrap B --topic T --count N [--rate MSGS_PER_SEC]\n"
	"               [--format json|csv|avro] [--partitions P] [--shape wide|narrow|dims]\n"
	"               [--start-ts EPOCH_SECONDS] [--step-ms MS] [--seed S]\n"
	"               [--transactional-id ID [--end commit|abort|hold]] [--meta] [--ordered]\n"
	"  sckafka avro-schema [--shape wide|narrow]\n"
	"  sckafka --help\n"
	"\n"
	"mock\n"
	"  Runs a librdkafka mock cluster of N brokers (default 1; ids 1..N) on\n"
	"  random 127.0.0.1 ports and creates each --topic with replication\n"
	"  factor min(N,3). The first line of stdout is the bootstrap list; once\n"
	"  it is printed the FIFO is ready, and then the pidfile is written. Runs\n"
	"  until SIGTERM, SIGINT or `quit`. Control commands, one per line, are\n"
	"  read from stdin and from the FIFO (created if missing, removed on exit,\n"
	"  reopened after each writer closes); each is answered on stdout with\n"
	"  `ok` or `error: ...`:\n"
	"    down BROKER_ID                    refuse connections (-1: all)\n"
	"    up BROKER_ID                      accept connections again (-1: all)\n"
	"    leader TOPIC PARTITION BROKER_ID  move a leader (-1: leaderless)\n"
	"    coordinator group GROUP BROKER_ID make BROKER_ID (1..N) the group's\n"
	"                                      coordinator, up or down\n"
	"    rtt BROKER_ID MS                  delay the broker's answers by MS\n"
	"                                      (-1: all; 0: no delay)\n"
	"    topic NAME PARTITIONS             create another topic\n"
	"    quit                              stop the cluster and exit\n"
	"  down/up do not move leaders: partitions led by a down broker stay\n"
	"  unavailable until `up` or `leader`. `leader` accepts only topics this\n"
	"  tool created (the mock would silently auto-create others). A group's\n"
	"  coordinator is a broker chosen by a hash of its name, unless set with\n"
	"  `coordinator`; a set coordinator stays on its broker while that broker\n"
	"  is down, so `down` of it stops the group's coordinator and nothing\n"
	"  else when the topic's leaders are on other brokers.\n"
	"  LIMITS: each mock partition keeps only about 5 MiB / 100,000 message\n"
	"  sets and silently drops older data beyond that; use more partitions\n"
	"  (and lz4, as `produce` does) for large loads. Ports are random (no\n"
	"  fixed-port option in 2.0.2). The mock has no Admin API: use the\n"
	"  `topic` command, not create-topic. A client asking for an unknown\n"
	"  topic auto-creates it (4 partitions): the mock ignores\n"
	"  allow.auto.create.topics.\n"
	"\n"
	"create-topic\n"
	"  Creates NAME with PARTITIONS partitions and replication factor R\n"
	"  (default 1) through the Admin API of a real broker, then waits (30 s\n"
	"  at most) until metadata shows every partition with a leader. An\n"
	"  existing topic is an error, unless --if-not-exists (then it must have\n"
	"  PARTITIONS partitions). Each --config (repeatable) sets a topic config,\n"
	"  e.g. --config max.message.bytes=20000000; the broker rejects unknown\n"
	"  names and bad values. An existing topic's configs are not checked.\n"
	"\n"
	"delete-topic\n"
	"  Deletes NAME through the Admin API, then waits (30 s at most) until\n"
	"  metadata no longer lists it. A missing topic is an error. A topic\n"
	"  created again under the same name is a new topic: offsets restart at 0.\n"
	"\n"
	"add-partitions\n"
	"  Raises NAME's partition count to TOTAL through the Admin API, then\n"
	"  waits (30 s at most) until metadata shows TOTAL partitions, each with\n"
	"  a leader. TOTAL must be above the current count (Kafka cannot remove\n"
	"  partitions). Existing keys may map to other partitions afterwards.\n"
	"\n"
	"committed\n"
	"  Prints the offsets group G has committed for each partition of T,\n"
	"  one line `PARTITION OFFSET` per partition in order, OFFSET `-` when\n"
	"  the group has none for it. Asks the group's coordinator (OffsetFetch)\n"
	"  without joining the group; fails (exit 1) when no answer comes within\n"
	"  MS milliseconds (default 10000), e.g. while the coordinator is down.\n"
	"  Works against the mock cluster, which has no Admin API.\n"
	"\n"
	"produce\n"
	"  Produces N events (--count 0: until SIGTERM/SIGINT) to topic T, at\n"
	"  MSGS_PER_SEC (--rate 0, the default: as fast as possible). Message i\n"
	"  goes to partition i %% P (P defaults to the topic's partition count).\n"
	"  --topic may be repeated (at most 1000 topics of as many partitions as\n"
	"  the first): message i then goes to topic i %% K, partition (i / K) %% P;\n"
	"  N and MSGS_PER_SEC count all topics together.\n"
	"  One event per message, fields in this order:\n"
	"    json: {\"ts\":\"2026-11-29T08:00:00.123Z\",\"country\":\"de\","
	"\"device\":\"ios\",\"amount\":12.34,\"qty\":3}\n"
	"    csv:  2026-11-29T08:00:00.123Z,de,ios,12.34,3\n"
	"    avro: one record of the schema avro-schema prints, bare (no\n"
	"          Confluent framing), in Avro's binary encoding: ts a long\n"
	"          (timestamp-millis), country and device strings, amount a\n"
	"          double (12.34), qty an int\n"
	"  --shape narrow gives three fields instead: ts, k (k00..k99) and v,\n"
	"  a bigint: {\"ts\":\"...\",\"k\":\"k42\",\"v\":7919} or ts,k42,7919\n"
	"  (in Avro: ts, k a string, v a long).\n"
	"  --shape dims (json and csv only) gives the roll-up benchmark's\n"
	"  events: ts, country (c00..c99), device (d00..d99), user_id (a bigint,\n"
	"  0..99999) and latency (milliseconds, 0.001..1000.000, skewed: 1000 u^4\n"
	"  for u uniform in [0, 1), p95 about 815):\n"
	"  {\"ts\":\"...\",\"country\":\"c42\",\"device\":\"d07\",\"user_id\":4711,"
	"\"latency\":12.345}\n"
	"  or ts,c42,d07,4711,12.345; its values are drawn after the other\n"
	"  shapes' (same seed, same amount_cents and qty draws).\n"
	"  ts is UTC with milliseconds: with --start-ts, ts = start + i * MS\n"
	"  (--step-ms, default 1000), else the wall clock. country is one of\n"
	"  de fr us gb jp br in es, device one of ios android web desktop,\n"
	"  amount 0.01..999.99, qty 1..10, drawn from a PRNG seeded with S\n"
	"  (default 1), so a run is reproducible. lz4, linger.ms=5; flushes at\n"
	"  the end and exits 1 if any delivery failed (a message not delivered\n"
	"  within 60 s fails). Last line on stderr:\n"
	"    produced N messages in S s (R msg/s)\n"
	"  With --transactional-id ID all messages go into one Kafka transaction,\n"
	"  which --end commits (the default) or aborts, or holds: `open` is\n"
	"  printed on stdout once every message is written, and the transaction\n"
	"  stays open until SIGTERM/SIGINT, then is aborted.\n"
	"  --meta gives every message a key, a timestamp and headers, known in\n"
	"  advance: key \"key-<i>\" (none when i %% 7 == 6); timestamp (CreateTime)\n"
	"  ts + 1 hour, in milliseconds (the event time plus an hour, so the two\n"
	"  are told apart); headers trace-id: \"t-<i>\", then source: \"sckafka\",\n"
	"  then, when i %% 5 == 0, trace-id again: \"t-<i>-last\", and when\n"
	"  i %% 3 == 0 a header \"empty\" without a value.\n"
	"  --ordered makes the producer idempotent, so that a batch retried (a\n"
	"  topic just created, its leaders not yet known) cannot land after a\n"
	"  later one: each partition holds its messages in the order produced.\n"
	"\n"
	"avro-schema\n"
	"  Prints the Avro schema (JSON, one line) of the records that produce\n"
	"  --format avro writes for the same --shape (default wide), e.g. for a\n"
	"  cube's option schema: {\"schema\": <that line>}. The same events in\n"
	"  every format: the same --seed gives the same values, and amount's\n"
	"  double is the number the JSON has (its shortest text drops a\n"
	"  trailing zero: 952.6 for 952.60).\n"
	"\n"
	"exit status: 0 ok, 1 Kafka or runtime failure, 2 usage error\n";

static void
usage(FILE *out)
{
	fprintf(out, usage_text, rd_kafka_version_str());
}

/* ------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------ */

static void
fail(int status, const char *fmt, ...)
{
	va_list ap;

	fputs("sckafka: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(status);
}

/* Parses a whole decimal integer within [min, max]; false if it is not one. */
static bool
parse_int(const char *s, long long min, long long max, long long *out)
{
	char	   *end;
	long long	v;

	if (s == NULL || *s == '\0' || isspace((unsigned char) *s))
		return false;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < min || v > max)
		return false;
	*out = v;
	return true;
}

/* parse_int for a command-line option: exits with a usage error. */
static long long
option_int(const char *what, const char *s, long long min, long long max)
{
	long long	v;

	if (!parse_int(s, min, max, &v))
		fail(EXIT_USAGE, "%s must be an integer in %lld..%lld, not '%s'",
			 what, min, max, s);
	return v;
}

/* Kafka's rule for topic names: 1..249 of [a-zA-Z0-9._-], not "." or "..". */
static bool
valid_topic_name(const char *name)
{
	size_t		len = strlen(name);

	if (len == 0 || len > 249 || strcmp(name, ".") == 0 ||
		strcmp(name, "..") == 0)
		return false;
	for (const char *p = name; *p; p++)
		if (!isalnum((unsigned char) *p) && *p != '.' && *p != '_' && *p != '-')
			return false;
	return true;
}

static double
monotonic_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Sets a librdkafka property or exits: these are all known-good names. */
static void
conf_set(rd_kafka_conf_t *conf, const char *name, const char *value)
{
	char		errstr[512];

	if (rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr)) !=
		RD_KAFKA_CONF_OK)
		fail(EXIT_USAGE, "%s=%s: %s", name, value, errstr);
}

static rd_kafka_t *
new_producer(rd_kafka_conf_t *conf)
{
	char		errstr[512];
	rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr,
								  sizeof(errstr));

	if (rk == NULL)
		fail(EXIT_KAFKA, "cannot create a Kafka client: %s", errstr);
	return rk;
}

/*
 * The common getopt_long loop error: an unknown option or a missing value.
 * optstring starts with ':' so a missing value comes back as ':'.
 */
static void
bad_option(const char *command, int opt, char **argv)
{
	if (opt == ':')
		fail(EXIT_USAGE, "%s: option '%s' needs a value (see --help)",
			 command, argv[optind - 1]);
	fail(EXIT_USAGE, "%s: unknown option '%s' (see --help)",
		 command, argv[optind - 1]);
}

/* ------------------------------------------------------------------------
 * Signals: a counter, plus a self-pipe so a blocking poll() wakes up.
 * ------------------------------------------------------------------------ */

static volatile sig_atomic_t signals_received;
static int	signal_pipe[2] = {-1, -1};

static void
on_stop_signal(int signo)
{
	int			saved_errno = errno;

	(void) signo;
	signals_received++;
	if (signal_pipe[1] >= 0 && write(signal_pipe[1], "", 1) < 0)
	{
		/* The pipe is full: poll() will wake up anyway. */
	}
	errno = saved_errno;
}

static void
install_stop_signals(bool with_pipe)
{
	struct sigaction sa;

	if (with_pipe && pipe2(signal_pipe, O_NONBLOCK | O_CLOEXEC) != 0)
		fail(EXIT_KAFKA, "pipe: %s", strerror(errno));

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	/* A reader that went away must not kill us; writes just fail. */
	signal(SIGPIPE, SIG_IGN);
}

/* ------------------------------------------------------------------------
 * mock: a mock cluster driven by line commands
 * ------------------------------------------------------------------------ */

typedef struct MockTopic
{
	char	   *name;
	int			partitions;
} MockTopic;

typedef struct MockCluster
{
	rd_kafka_t *rk;				/* handle the cluster is attached to */
	rd_kafka_mock_cluster_t *mcluster;
	int			brokers;		/* broker ids are 1..brokers */
	int			replication;	/* min(brokers, 3) */
	MockTopic  *topics;			/* topics created by this tool */
	int			ntopics;
} MockCluster;

/* One source of command lines (stdin or the FIFO), split into lines. */
typedef struct LineInput
{
	const char *path;			/* FIFO path, or NULL for stdin */
	int			fd;				/* -1 once stdin reached EOF */
	bool		discarding;		/* skipping the rest of a too-long line */
	size_t		len;
	char		buf[4096];
} LineInput;

static void
reply(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stdout, fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

static const MockTopic *
mock_find_topic(const MockCluster *mc, const char *name)
{
	for (int i = 0; i < mc->ntopics; i++)
		if (strcmp(mc->topics[i].name, name) == 0)
			return &mc->topics[i];
	return NULL;
}

/* Creates a topic; on failure writes the reason into err and returns false. */
static bool
mock_create_topic(MockCluster *mc, const char *name, long long partitions,
				  char *err, size_t errsize)
{
	rd_kafka_resp_err_t rc;
	MockTopic  *grown;

	if (!valid_topic_name(name))
	{
		snprintf(err, errsize, "invalid topic name '%s' (1..249 of a-z A-Z "
				 "0-9 . _ -)", name);
		return false;
	}
	if (partitions < 1 || partitions > 10000)
	{
		snprintf(err, errsize, "partitions must be 1..10000, not %lld",
				 partitions);
		return false;
	}

	rc = rd_kafka_mock_topic_create(mc->mcluster, name, (int) partitions,
									mc->replication);
	if (rc != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		snprintf(err, errsize, "cannot create topic '%s': %s (%s)", name,
				 rd_kafka_err2name(rc), rd_kafka_err2str(rc));
		return false;
	}

	grown = realloc(mc->topics, (mc->ntopics + 1) * sizeof(MockTopic));
	if (grown == NULL || (grown[mc->ntopics].name = strdup(name)) == NULL)
		fail(EXIT_KAFKA, "out of memory");
	grown[mc->ntopics].partitions = (int) partitions;
	mc->topics = grown;
	mc->ntopics++;
	return true;
}

/* BROKER_ID of down/up/leader: 1..N, or -1 meaning all (down/up) or none. */
static bool
mock_broker_arg(const MockCluster *mc, const char *s, int32_t *id)
{
	long long	v;

	if (!parse_int(s, -1, mc->brokers, &v) || v == 0)
	{
		reply("error: broker id must be 1..%d or -1, not '%s'",
			  mc->brokers, s);
		return false;
	}
	*id = (int32_t) v;
	return true;
}

/* Checks a command's word count, answering with its syntax if wrong. */
static bool
expect_words(int nwords, int want, const char *syntax)
{
	if (nwords == want)
		return true;
	reply("error: usage: %s", syntax);
	return false;
}

static void
mock_reply_rc(rd_kafka_resp_err_t rc)
{
	if (rc == RD_KAFKA_RESP_ERR_NO_ERROR)
		reply("ok");
	else
		reply("error: %s (%s)", rd_kafka_err2name(rc), rd_kafka_err2str(rc));
}

/* Runs one control command line and answers it; sets *quit on `quit`. */
static void
mock_command(MockCluster *mc, char *line, bool *quit)
{
	char	   *words[5];
	int			nwords = 0;
	char	   *save = NULL;
	char	   *w;
	int32_t		broker;
	long long	n;
	char		err[512];

	for (w = strtok_r(line, " \t\r", &save); w != NULL;
		 w = strtok_r(NULL, " \t\r", &save))
	{
		if (nwords == 5)
		{
			reply("error: too many words");
			return;
		}
		words[nwords++] = w;
	}
	if (nwords == 0)
		return;					/* blank line: nothing to answer */

	if (strcmp(words[0], "down") == 0 || strcmp(words[0], "up") == 0)
	{
		bool		down = words[0][0] == 'd';

		if (!expect_words(nwords, 2, "down|up BROKER_ID"))
			return;
		if (!mock_broker_arg(mc, words[1], &broker))
			return;
		mock_reply_rc(down ? rd_kafka_mock_broker_set_down(mc->mcluster, broker)
					  : rd_kafka_mock_broker_set_up(mc->mcluster, broker));
	}
	else if (strcmp(words[0], "leader") == 0)
	{
		const MockTopic *topic;

		if (!expect_words(nwords, 4, "leader TOPIC PARTITION BROKER_ID"))
			return;
		/* The mock would auto-create an unknown topic: refuse instead. */
		if ((topic = mock_find_topic(mc, words[1])) == NULL)
		{
			reply("error: no topic '%s' was created by this tool", words[1]);
			return;
		}
		if (!parse_int(words[2], 0, topic->partitions - 1, &n))
		{
			reply("error: partition of '%s' must be 0..%d, not '%s'",
				  topic->name, topic->partitions - 1, words[2]);
			return;
		}
		if (!mock_broker_arg(mc, words[3], &broker))
			return;
		mock_reply_rc(rd_kafka_mock_partition_set_leader(mc->mcluster,
														 topic->name,
														 (int32_t) n, broker));
	}
	else if (strcmp(words[0], "coordinator") == 0)
	{
		if (!expect_words(nwords, 4, "coordinator group GROUP BROKER_ID"))
			return;
		if (strcmp(words[1], "group") != 0)
		{
			reply("error: usage: coordinator group GROUP BROKER_ID");
			return;
		}
		/* The mock asserts that a set coordinator is one of its brokers. */
		if (!parse_int(words[3], 1, mc->brokers, &n))
		{
			reply("error: broker id must be 1..%d, not '%s'", mc->brokers,
				  words[3]);
			return;
		}
		mock_reply_rc(rd_kafka_mock_coordinator_set(mc->mcluster, "group",
													words[2], (int32_t) n));
	}
	else if (strcmp(words[0], "rtt") == 0)
	{
		if (!expect_words(nwords, 3, "rtt BROKER_ID MS"))
			return;
		if (!mock_broker_arg(mc, words[1], &broker))
			return;
		if (!parse_int(words[2], 0, 60000, &n))
		{
			reply("error: rtt must be 0..60000 ms, not '%s'", words[2]);
			return;
		}
		mock_reply_rc(rd_kafka_mock_broker_set_rtt(mc->mcluster, broker, (int) n));
	}
	else if (strcmp(words[0], "topic") == 0)
	{
		if (!expect_words(nwords, 3, "topic NAME PARTITIONS"))
			return;
		if (!parse_int(words[2], 1, 10000, &n))
		{
			reply("error: partitions must be 1..10000, not '%s'", words[2]);
			return;
		}
		if (mock_create_topic(mc, words[1], n, err, sizeof(err)))
			reply("ok");
		else
			reply("error: %s", err);
	}
	else if (strcmp(words[0], "quit") == 0)
	{
		if (!expect_words(nwords, 1, "quit"))
			return;
		*quit = true;
		reply("ok");
	}
	else
		reply("error: unknown command '%s' (down, up, leader, coordinator, "
			  "rtt, topic, quit)",
			  words[0]);
}

/*
 * Opens the control FIFO without blocking for a writer.  A fresh open also
 * clears the hang-up state left by the previous writer, which is why the
 * FIFO is reopened after each EOF.
 */
static void
fifo_open(LineInput *in)
{
	in->fd = open(in->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (in->fd < 0)
		fail(EXIT_KAFKA, "cannot open control FIFO %s: %s", in->path,
			 strerror(errno));
	in->len = 0;
	in->discarding = false;
}

/* Runs every complete line in the buffer, keeping a partial last line. */
static void
input_run_lines(LineInput *in, MockCluster *mc, bool at_eof, bool *quit)
{
	char	   *start = in->buf;
	char	   *end = in->buf + in->len;
	char	   *nl;

	while (!*quit && (nl = memchr(start, '\n', end - start)) != NULL)
	{
		*nl = '\0';
		if (in->discarding)
			in->discarding = false;
		else
			mock_command(mc, start, quit);
		start = nl + 1;
	}
	in->len = end - start;
	memmove(in->buf, start, in->len);

	if (at_eof && in->len > 0 && !*quit)
	{
		/* A last line without a newline still counts. */
		in->buf[in->len] = '\0';
		if (!in->discarding)
			mock_command(mc, in->buf, quit);
		in->len = 0;
	}
	else if (in->len == sizeof(in->buf) - 1)
	{
		reply("error: command line longer than %zu bytes", in->len);
		in->len = 0;
		in->discarding = true;
	}
}

/* Reads what is ready on one input and runs its lines. */
static void
input_read(LineInput *in, MockCluster *mc, bool *quit)
{
	ssize_t		got = read(in->fd, in->buf + in->len,
						   sizeof(in->buf) - 1 - in->len);

	if (got < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (got > 0)
	{
		in->len += got;
		input_run_lines(in, mc, false, quit);
		return;
	}

	/* EOF (or a read error): finish a last partial line. */
	input_run_lines(in, mc, true, quit);
	close(in->fd);
	if (in->path != NULL)
		fifo_open(in);			/* the writer closed: wait for the next */
	else
		in->fd = -1;			/* stdin is done; keep running */
}

/* Parses NAME:PARTITIONS of --topic. */
static void
parse_topic_spec(const char *spec, char **name, long long *partitions)
{
	const char *colon = strrchr(spec, ':');

	if (colon == NULL || colon == spec)
		fail(EXIT_USAGE, "mock: --topic wants NAME:PARTITIONS, not '%s'", spec);
	*name = strndup(spec, colon - spec);
	if (*name == NULL)
		fail(EXIT_KAFKA, "out of memory");
	*partitions = option_int("--topic partitions", colon + 1, 1, 10000);
}

static void
write_pidfile(const char *path)
{
	char		tmp[4096];
	FILE	   *f;

	/* Write then rename, so a reader never sees a half-written file. */
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int) sizeof(tmp))
		fail(EXIT_USAGE, "mock: pidfile path too long");
	if ((f = fopen(tmp, "w")) == NULL ||
		fprintf(f, "%ld\n", (long) getpid()) < 0 || fclose(f) != 0 ||
		rename(tmp, path) != 0)
		fail(EXIT_KAFKA, "mock: cannot write pidfile %s: %s", path,
			 strerror(errno));
}

static int
cmd_mock(int argc, char **argv)
{
	static const struct option options[] = {
		{"brokers", required_argument, NULL, 'b'},
		{"topic", required_argument, NULL, 't'},
		{"control", required_argument, NULL, 'c'},
		{"pidfile", required_argument, NULL, 'p'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	long long	brokers = 1;
	const char **topic_specs = calloc(argc, sizeof(char *));
	int			ntopic_specs = 0;
	const char *fifo_path = NULL;
	const char *pidfile = NULL;
	bool		created_fifo = false;
	rd_kafka_conf_t *conf;
	MockCluster mc = {0};
	LineInput	in_stdin = {.path = NULL, .fd = STDIN_FILENO};
	LineInput	in_fifo = {.path = NULL, .fd = -1};
	bool		quit = false;
	int			opt;

	if (topic_specs == NULL)
		fail(EXIT_KAFKA, "out of memory");
	while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1)
	{
		switch (opt)
		{
			case 'b':
				brokers = option_int("--brokers", optarg, 1, 100);
				break;
			case 't':
				topic_specs[ntopic_specs++] = optarg;
				break;
			case 'c':
				fifo_path = optarg;
				break;
			case 'p':
				pidfile = optarg;
				break;
			case 'h':
				usage(stdout);
				return 0;
			default:
				bad_option("mock", opt, argv);
		}
	}
	if (optind != argc)
		fail(EXIT_USAGE, "mock: unexpected argument '%s'", argv[optind]);
	if (ntopic_specs == 0)
		fail(EXIT_USAGE, "mock: give at least one --topic NAME:PARTITIONS");

	install_stop_signals(true);

	/*
	 * The cluster needs a client handle for its bookkeeping; it stays idle,
	 * so hush its notice that it has no bootstrap.servers.
	 */
	conf = rd_kafka_conf_new();
	conf_set(conf, "log_level", "4");
	mc.rk = new_producer(conf);
	mc.brokers = (int) brokers;
	mc.replication = mc.brokers < 3 ? mc.brokers : 3;
	mc.mcluster = rd_kafka_mock_cluster_new(mc.rk, mc.brokers);
	if (mc.mcluster == NULL)
		fail(EXIT_KAFKA, "mock: cannot start a mock cluster of %d brokers",
			 mc.brokers);

	for (int i = 0; i < ntopic_specs; i++)
	{
		char	   *name;
		long long	partitions;
		char		err[512];

		parse_topic_spec(topic_specs[i], &name, &partitions);
		if (!mock_create_topic(&mc, name, partitions, err, sizeof(err)))
			fail(EXIT_USAGE, "mock: %s", err);
		free(name);
	}
	free(topic_specs);

	if (fifo_path != NULL)
	{
		struct stat st;

		if (mkfifo(fifo_path, 0600) == 0)
			created_fifo = true;
		else if (errno != EEXIST || stat(fifo_path, &st) != 0 ||
				 !S_ISFIFO(st.st_mode))
			fail(EXIT_KAFKA, "mock: cannot create control FIFO %s: %s",
				 fifo_path, errno == EEXIST ? "exists and is not a FIFO"
				 : strerror(errno));
		in_fifo.path = fifo_path;
		fifo_open(&in_fifo);
	}

	reply("%s", rd_kafka_mock_cluster_bootstraps(mc.mcluster));
	if (pidfile != NULL)
		write_pidfile(pidfile);

	while (!quit && signals_received == 0)
	{
		struct pollfd fds[3];
		int			nfds = 0;
		int			stdin_slot = -1;
		int			fifo_slot = -1;

		fds[nfds++] = (struct pollfd) {.fd = signal_pipe[0], .events = POLLIN};
		if (in_stdin.fd >= 0)
		{
			stdin_slot = nfds;
			fds[nfds++] = (struct pollfd) {.fd = in_stdin.fd, .events = POLLIN};
		}
		if (in_fifo.fd >= 0)
		{
			fifo_slot = nfds;
			fds[nfds++] = (struct pollfd) {.fd = in_fifo.fd, .events = POLLIN};
		}

		if (poll(fds, nfds, -1) < 0)
		{
			if (errno == EINTR)
				continue;
			fail(EXIT_KAFKA, "mock: poll: %s", strerror(errno));
		}
		/* POLLHUP/POLLERR/POLLNVAL show up as EOF or an error in read(). */
		if (stdin_slot >= 0 && fds[stdin_slot].revents != 0)
			input_read(&in_stdin, &mc, &quit);
		if (!quit && fifo_slot >= 0 && fds[fifo_slot].revents != 0)
			input_read(&in_fifo, &mc, &quit);
	}

	if (in_fifo.fd >= 0)
		close(in_fifo.fd);
	if (created_fifo)
		unlink(fifo_path);
	if (pidfile != NULL)
		unlink(pidfile);
	rd_kafka_mock_cluster_destroy(mc.mcluster);
	rd_kafka_destroy(mc.rk);
	for (int i = 0; i < mc.ntopics; i++)
		free(mc.topics[i].name);
	free(mc.topics);
	return 0;
}

/* ------------------------------------------------------------------------
 * create-topic, delete-topic, add-partitions: Admin API, then wait until
 * metadata shows the result
 * ------------------------------------------------------------------------ */

#define ADMIN_TIMEOUT_MS 30000	/* Admin request, and then the metadata wait */

typedef enum TopicState
{
	TOPIC_READY,				/* exists, every partition has a leader */
	TOPIC_NOT_YET,				/* missing or some partition leaderless */
	TOPIC_WRONG_PARTITIONS		/* exists with another partition count */
} TopicState;

/*
 * Asks a broker for the topic's metadata.  *found_partitions is set when the
 * topic exists.  Transient errors count as TOPIC_NOT_YET.
 */
static TopicState
topic_state(rd_kafka_t *rk, rd_kafka_topic_t *rkt, int partitions,
			int timeout_ms, int *found_partitions)
{
	const struct rd_kafka_metadata *md;
	const struct rd_kafka_metadata_topic *t;
	TopicState	state = TOPIC_READY;

	if (rd_kafka_metadata(rk, 0, rkt, &md, timeout_ms) !=
		RD_KAFKA_RESP_ERR_NO_ERROR)
		return TOPIC_NOT_YET;

	if (md->topic_cnt != 1 || md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR)
		state = TOPIC_NOT_YET;
	else
	{
		t = &md->topics[0];
		*found_partitions = t->partition_cnt;
		if (t->partition_cnt != partitions)
			state = TOPIC_WRONG_PARTITIONS;
		for (int i = 0; state == TOPIC_READY && i < t->partition_cnt; i++)
			if (t->partitions[i].err != RD_KAFKA_RESP_ERR_NO_ERROR ||
				t->partitions[i].leader < 0)
				state = TOPIC_NOT_YET;
	}
	rd_kafka_metadata_destroy(md);
	return state;
}

/*
 * Polls topic_state() for up to timeout_ms until the topic has PARTITIONS
 * partitions, each with a leader.  Another partition count ends the wait at
 * once, unless wait_for_count (add-partitions: metadata may still show the
 * old count for a moment).
 */
static TopicState
wait_for_topic(rd_kafka_t *rk, const char *name, int partitions,
			   int timeout_ms, bool wait_for_count, int *found)
{
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, name, NULL);
	double		deadline = monotonic_seconds() + timeout_ms / 1000.0;
	TopicState	state;

	for (;;)
	{
		int			left_ms = (int) ((deadline - monotonic_seconds()) * 1000);

		state = topic_state(rk, rkt, partitions, left_ms > 1000 ? left_ms : 1000,
							found);
		if (state == TOPIC_READY || monotonic_seconds() >= deadline ||
			(state == TOPIC_WRONG_PARTITIONS && !wait_for_count))
			break;
		rd_kafka_poll(rk, 100);
	}
	rd_kafka_topic_destroy(rkt);
	return state;
}

/*
 * Whether a metadata request for all topics lists NAME; false if the broker
 * did not answer.  Asking for all topics can never auto-create NAME.
 */
static bool
topic_listed(rd_kafka_t *rk, const char *name, int timeout_ms, bool *listed)
{
	const struct rd_kafka_metadata *md;

	if (rd_kafka_metadata(rk, 1, NULL, &md, timeout_ms) !=
		RD_KAFKA_RESP_ERR_NO_ERROR)
		return false;
	*listed = false;
	for (int i = 0; i < md->topic_cnt && !*listed; i++)
		*listed = strcmp(md->topics[i].topic, name) == 0;
	rd_kafka_metadata_destroy(md);
	return true;
}

/* A client for the Admin API commands; it never auto-creates a topic. */
static rd_kafka_t *
new_admin_client(const char *bootstrap)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();

	conf_set(conf, "bootstrap.servers", bootstrap);
	conf_set(conf, "allow.auto.create.topics", "false");
	return new_producer(conf);
}

static rd_kafka_AdminOptions_t *
admin_options(rd_kafka_t *rk, rd_kafka_admin_op_t op, const char *command)
{
	rd_kafka_AdminOptions_t *adminopts = rd_kafka_AdminOptions_new(rk, op);
	char		errstr[512];

	if (rd_kafka_AdminOptions_set_request_timeout(adminopts, ADMIN_TIMEOUT_MS,
												  errstr, sizeof(errstr)) ||
		rd_kafka_AdminOptions_set_operation_timeout(adminopts, ADMIN_TIMEOUT_MS,
													errstr, sizeof(errstr)))
		fail(EXIT_KAFKA, "%s: %s", command, errstr);
	return adminopts;
}

/* Waits for the result event of an Admin request; exits on a request error. */
static rd_kafka_event_t *
admin_result(rd_kafka_queue_t *queue, const char *command, const char *name,
			 const char *bootstrap)
{
	/* The request times out by itself; this bound is only a safety net. */
	rd_kafka_event_t *ev = rd_kafka_queue_poll(queue, 2 * ADMIN_TIMEOUT_MS);

	if (ev == NULL)
		fail(EXIT_KAFKA, "%s %s: no answer from %s", command, name, bootstrap);
	if (rd_kafka_event_error(ev))
		fail(EXIT_KAFKA, "%s %s: %s", command, name,
			 rd_kafka_event_error_string(ev));
	return ev;
}

/*
 * The error of the single topic result of an Admin request.  Exits with the
 * broker's explanation unless it is NO_ERROR or `tolerated`.
 */
static rd_kafka_resp_err_t
topic_result(const rd_kafka_topic_result_t **results, size_t nresults,
			 rd_kafka_resp_err_t tolerated, const char *command,
			 const char *name)
{
	rd_kafka_resp_err_t err;
	const char *detail;

	if (nresults != 1)
		fail(EXIT_KAFKA, "%s %s: %zu results, expected 1", command, name,
			 nresults);
	err = rd_kafka_topic_result_error(results[0]);
	if (err == RD_KAFKA_RESP_ERR_NO_ERROR || err == tolerated)
		return err;
	detail = rd_kafka_topic_result_error_string(results[0]);
	fail(EXIT_KAFKA, "%s %s: %s (%s)", command, name, rd_kafka_err2name(err),
		 detail ? detail : rd_kafka_err2str(err));
	return err;
}

static int
cmd_create_topic(int argc, char **argv)
{
	static const struct option options[] = {
		{"bootstrap", required_argument, NULL, 'b'},
		{"replication", required_argument, NULL, 'r'},
		{"if-not-exists", no_argument, NULL, 'e'},
		{"config", required_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *bootstrap = NULL;
	long long	replication = 1;
	bool		if_not_exists = false;
	const char **configs = calloc(argc, sizeof(char *));	/* KEY=VALUE */
	int			nconfigs = 0;
	const char *name;
	int			partitions;
	int			found = 0;
	int			opt;
	char		errstr[512];
	rd_kafka_t *rk;
	rd_kafka_NewTopic_t *newt;
	rd_kafka_AdminOptions_t *adminopts;
	rd_kafka_queue_t *queue;
	rd_kafka_event_t *ev;
	const rd_kafka_topic_result_t **results;
	size_t		nresults;
	bool		existed;
	TopicState	state;

	if (configs == NULL)
		fail(EXIT_KAFKA, "out of memory");
	while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1)
	{
		switch (opt)
		{
			case 'b':
				bootstrap = optarg;
				break;
			case 'r':
				replication = option_int("--replication", optarg, 1, 1000);
				break;
			case 'e':
				if_not_exists = true;
				break;
			case 'c':
				if (optarg[0] == '=' || strchr(optarg, '=') == NULL)
					fail(EXIT_USAGE, "create-topic: --config wants KEY=VALUE, "
						 "not '%s'", optarg);
				configs[nconfigs++] = optarg;
				break;
			case 'h':
				usage(stdout);
				return 0;
			default:
				bad_option("create-topic", opt, argv);
		}
	}
	if (bootstrap == NULL)
		fail(EXIT_USAGE, "create-topic: --bootstrap is required");
	if (argc - optind != 2)
		fail(EXIT_USAGE, "create-topic: want NAME PARTITIONS (see --help)");
	name = argv[optind];
	if (!valid_topic_name(name))
		fail(EXIT_USAGE, "create-topic: invalid topic name '%s'", name);
	partitions = (int) option_int("PARTITIONS", argv[optind + 1], 1, 100000);

	rk = new_admin_client(bootstrap);

	newt = rd_kafka_NewTopic_new(name, partitions, (int) replication,
								 errstr, sizeof(errstr));
	if (newt == NULL)
		fail(EXIT_USAGE, "create-topic: %s", errstr);
	for (int i = 0; i < nconfigs; i++)
	{
		char	   *key = strdup(configs[i]);
		char	   *eq;
		rd_kafka_resp_err_t err;

		if (key == NULL)
			fail(EXIT_KAFKA, "out of memory");
		eq = strchr(key, '=');
		*eq = '\0';
		/* The broker checks names and values; this only copies them. */
		err = rd_kafka_NewTopic_set_config(newt, key, eq + 1);
		if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
			fail(EXIT_USAGE, "create-topic: --config %s: %s", configs[i],
				 rd_kafka_err2str(err));
		free(key);
	}
	free(configs);
	adminopts = admin_options(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS,
							  "create-topic");

	queue = rd_kafka_queue_new(rk);
	rd_kafka_CreateTopics(rk, &newt, 1, adminopts, queue);
	ev = admin_result(queue, "create-topic", name, bootstrap);
	results = rd_kafka_CreateTopics_result_topics(
		rd_kafka_event_CreateTopics_result(ev), &nresults);
	existed = topic_result(results, nresults,
						   if_not_exists ? RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS
						   : RD_KAFKA_RESP_ERR_NO_ERROR,
						   "create-topic", name) != RD_KAFKA_RESP_ERR_NO_ERROR;
	rd_kafka_event_destroy(ev);
	rd_kafka_queue_destroy(queue);
	rd_kafka_AdminOptions_destroy(adminopts);
	rd_kafka_NewTopic_destroy(newt);

	/* The controller has it; wait until every partition has a leader. */
	state = wait_for_topic(rk, name, partitions, ADMIN_TIMEOUT_MS, false,
						   &found);
	rd_kafka_destroy(rk);

	if (state == TOPIC_WRONG_PARTITIONS)
		fail(EXIT_KAFKA, "create-topic %s: exists with %d partitions, not %d",
			 name, found, partitions);
	if (state == TOPIC_NOT_YET)
		fail(EXIT_KAFKA, "create-topic %s: not every partition has a leader "
			 "after %d s", name, ADMIN_TIMEOUT_MS / 1000);
	printf("%s topic %s: %d partitions, every one with a leader\n",
		   existed ? "existing" : "created", name, partitions);
	return 0;
}

static int
cmd_delete_topic(int argc, char **argv)
{
	static const struct option options[] = {
		{"bootstrap", required_argument, NULL, 'b'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *bootstrap = NULL;
	const char *name;
	int			opt;
	rd_kafka_t *rk;
	rd_kafka_DeleteTopic_t *delt;
	rd_kafka_AdminOptions_t *adminopts;
	rd_kafka_queue_t *queue;
	rd_kafka_event_t *ev;
	const rd_kafka_topic_result_t **results;
	size_t		nresults;
	bool		answered;
	bool		listed = true;
	double		deadline;

	while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1)
	{
		switch (opt)
		{
			case 'b':
				bootstrap = optarg;
				break;
			case 'h':
				usage(stdout);
				return 0;
			default:
				bad_option("delete-topic", opt, argv);
		}
	}
	if (bootstrap == NULL)
		fail(EXIT_USAGE, "delete-topic: --bootstrap is required");
	if (argc - optind != 1)
		fail(EXIT_USAGE, "delete-topic: want NAME (see --help)");
	name = argv[optind];
	if (!valid_topic_name(name))
		fail(EXIT_USAGE, "delete-topic: invalid topic name '%s'", name);

	rk = new_admin_client(bootstrap);
	delt = rd_kafka_DeleteTopic_new(name);
	adminopts = admin_options(rk, RD_KAFKA_ADMIN_OP_DELETETOPICS,
							  "delete-topic");

	queue = rd_kafka_queue_new(rk);
	rd_kafka_DeleteTopics(rk, &delt, 1, adminopts, queue);
	ev = admin_result(queue, "delete-topic", name, bootstrap);
	results = rd_kafka_DeleteTopics_result_topics(
		rd_kafka_event_DeleteTopics_result(ev), &nresults);
	topic_result(results, nresults, RD_KAFKA_RESP_ERR_NO_ERROR,
				 "delete-topic", name);
	rd_kafka_event_destroy(ev);
	rd_kafka_queue_destroy(queue);
	rd_kafka_AdminOptions_destroy(adminopts);
	rd_kafka_DeleteTopic_destroy(delt);

	/* The controller dropped it; wait until the broker's metadata does too. */
	deadline = monotonic_seconds() + ADMIN_TIMEOUT_MS / 1000.0;
	for (;;)
	{
		int			left_ms = (int) ((deadline - monotonic_seconds()) * 1000);

		answered = topic_listed(rk, name, left_ms > 1000 ? left_ms : 1000,
								&listed);
		if ((answered && !listed) || monotonic_seconds() >= deadline)
			break;
		rd_kafka_poll(rk, 100);
	}
	rd_kafka_destroy(rk);

	if (!answered)
		fail(EXIT_KAFKA, "delete-topic %s: no metadata from %s within %d s",
			 name, bootstrap, ADMIN_TIMEOUT_MS / 1000);
	if (listed)
		fail(EXIT_KAFKA, "delete-topic %s: still listed in metadata after "
			 "%d s", name, ADMIN_TIMEOUT_MS / 1000);
	printf("deleted topic %s\n", name);
	return 0;
}

static int
cmd_add_partitions(int argc, char **argv)
{
	static const struct option options[] = {
		{"bootstrap", required_argument, NULL, 'b'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *bootstrap = NULL;
	const char *name;
	int			total;
	int			found = 0;
	int			opt;
	char		errstr[512];
	rd_kafka_t *rk;
	rd_kafka_NewPartitions_t *newp;
	rd_kafka_AdminOptions_t *adminopts;
	rd_kafka_queue_t *queue;
	rd_kafka_event_t *ev;
	const rd_kafka_topic_result_t **results;
	size_t		nresults;
	TopicState	state;

	while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1)
	{
		switch (opt)
		{
			case 'b':
				bootstrap = optarg;
				break;
			case 'h':
				usage(stdout);
				return 0;
			default:
				bad_option("add-partitions", opt, argv);
		}
	}
	if (bootstrap == NULL)
		fail(EXIT_USAGE, "add-partitions: --bootstrap is required");
	if (argc - optind != 2)
		fail(EXIT_USAGE, "add-partitions: want NAME TOTAL (see --help)");
	name = argv[optind];
	if (!valid_topic_name(name))
		fail(EXIT_USAGE, "add-partitions: invalid topic name '%s'", name);
	total = (int) option_int("TOTAL", argv[optind + 1], 1, 100000);

	rk = new_admin_client(bootstrap);
	newp = rd_kafka_NewPartitions_new(name, total, errstr, sizeof(errstr));
	if (newp == NULL)
		fail(EXIT_USAGE, "add-partitions: %s", errstr);
	adminopts = admin_options(rk, RD_KAFKA_ADMIN_OP_CREATEPARTITIONS,
							  "add-partitions");

	queue = rd_kafka_queue_new(rk);
	rd_kafka_CreatePartitions(rk, &newp, 1, adminopts, queue);
	ev = admin_result(queue, "add-partitions", name, bootstrap);
	results = rd_kafka_CreatePartitions_result_topics(
		rd_kafka_event_CreatePartitions_result(ev), &nresults);
	/* TOTAL not above the current count is INVALID_PARTITIONS. */
	topic_result(results, nresults, RD_KAFKA_RESP_ERR_NO_ERROR,
				 "add-partitions", name);
	rd_kafka_event_destroy(ev);
	rd_kafka_queue_destroy(queue);
	rd_kafka_AdminOptions_destroy(adminopts);
	rd_kafka_NewPartitions_destroy(newp);

	/* Wait until metadata shows TOTAL partitions, each with a leader. */
	state = wait_for_topic(rk, name, total, ADMIN_TIMEOUT_MS, true, &found);
	rd_kafka_destroy(rk);

	if (state == TOPIC_WRONG_PARTITIONS)
		fail(EXIT_KAFKA, "add-partitions %s: metadata shows %d partitions, "
			 "not %d, after %d s", name, found, total, ADMIN_TIMEOUT_MS / 1000);
	if (state == TOPIC_NOT_YET)
		fail(EXIT_KAFKA, "add-partitions %s: not every partition has a leader "
			 "after %d s", name, ADMIN_TIMEOUT_MS / 1000);
	printf("topic %s: %d partitions, every one with a leader\n", name, total);
	return 0;
}

/* ------------------------------------------------------------------------
 * produce: the demo cube's event generator
 * ------------------------------------------------------------------------ */

static const char *const countries[] = {"de", "fr", "us", "gb", "jp", "br",
"in", "es"};
static const char *const devices[] = {"ios", "android", "web", "desktop"};

#define lengthof(a) (sizeof(a) / sizeof((a)[0]))

typedef struct DeliveryStats
{
	long long	delivered;
	long long	failed;
	rd_kafka_resp_err_t first_error;
} DeliveryStats;

/* Delivery report callback: runs inside rd_kafka_poll()/flush(). */
static void
on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque)
{
	DeliveryStats *stats = opaque;

	(void) rk;
	if (msg->err == RD_KAFKA_RESP_ERR_NO_ERROR)
		stats->delivered++;
	else if (stats->failed++ == 0)
		stats->first_error = msg->err;
}

/* splitmix64: small, fast, and the same sequence for the same seed. */
static uint64_t
next_random(uint64_t *state)
{
	uint64_t	z = (*state += UINT64_C(0x9E3779B97F4A7C15));

	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

/*
 * Avro's binary encoding of the produced events (bare records, no
 * framing): a long or an int is its zig-zag varint, a string its length
 * (a long) then its bytes, a double 8 bytes little-endian.  Each writer
 * returns the position after what it wrote.
 */
static const char avro_schema_wide[] =
	"{\"type\":\"record\",\"name\":\"event\",\"namespace\":\"sckafka\",\"fields\":["
	"{\"name\":\"ts\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}},"
	"{\"name\":\"country\",\"type\":\"string\"},"
	"{\"name\":\"device\",\"type\":\"string\"},"
	"{\"name\":\"amount\",\"type\":\"double\"},"
	"{\"name\":\"qty\",\"type\":\"int\"}]}";
static const char avro_schema_narrow[] =
	"{\"type\":\"record\",\"name\":\"event_narrow\",\"namespace\":\"sckafka\",\"fields\":["
	"{\"name\":\"ts\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}},"
	"{\"name\":\"k\",\"type\":\"string\"},"
	"{\"name\":\"v\",\"type\":\"long\"}]}";

static char *
avro_long(char *o, int64_t v)
{
	uint64_t	z = ((uint64_t) v << 1) ^ (uint64_t) (v >> 63);

	while (z >= 0x80)
	{
		*o++ = (char) (0x80 | (z & 0x7f));
		z >>= 7;
	}
	*o++ = (char) z;
	return o;
}

static char *
avro_string(char *o, const char *str)
{
	size_t		len = strlen(str);

	o = avro_long(o, (int64_t) len);
	memcpy(o, str, len);
	return o + len;
}

static char *
avro_double(char *o, double d)
{
	uint64_t	bits;

	memcpy(&bits, &d, sizeof(bits));
	for (int b = 0; b < 8; b++)
		*o++ = (char) (bits >> (8 * b));
	return o;
}

/* Writes "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC) for epoch milliseconds. */
static void
format_ts(int64_t epoch_ms, char *out, size_t outsize)
{
	static int64_t cached_second = INT64_MIN;
	static char cached[32];		/* "YYYY-MM-DDTHH:MM:SS" of cached_second */
	int64_t		second = epoch_ms / 1000;
	int			ms = (int) (epoch_ms % 1000);

	if (ms < 0)
	{
		ms += 1000;
		second--;
	}
	if (second != cached_second)
	{
		time_t		t = (time_t) second;
		struct tm	tm;

		gmtime_r(&t, &tm);
		strftime(cached, sizeof(cached), "%Y-%m-%dT%H:%M:%S", &tm);
		cached_second = second;
	}
	snprintf(out, outsize, "%s.%03dZ", cached, ms);
}

static int64_t
wall_clock_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Looks the topic up (without creating it) and returns its partitions;
 * command names the caller in the messages.
 */
static int
topic_partition_count(rd_kafka_t *rk, const char *topic, const char *command)
{
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
	const struct rd_kafka_metadata *md;
	rd_kafka_resp_err_t err;
	int			count;

	err = rd_kafka_metadata(rk, 0, rkt, &md, 10000);
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
		fail(EXIT_KAFKA, "%s: cannot read metadata of %s: %s", command, topic,
			 rd_kafka_err2str(err));
	if (md->topic_cnt != 1 || md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR)
		fail(EXIT_KAFKA, "%s: topic %s: %s", command, topic,
			 rd_kafka_err2str(md->topic_cnt == 1 ? md->topics[0].err
							  : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC));
	count = md->topics[0].partition_cnt;
	rd_kafka_metadata_destroy(md);
	rd_kafka_topic_destroy(rkt);
	return count;
}

static int
cmd_produce(int argc, char **argv)
{
	static const struct option options[] = {
		{"bootstrap", required_argument, NULL, 'b'},
		{"topic", required_argument, NULL, 't'},
		{"count", required_argument, NULL, 'n'},
		{"rate", required_argument, NULL, 'r'},
		{"format", required_argument, NULL, 'f'},
		{"partitions", required_argument, NULL, 'p'},
		{"start-ts", required_argument, NULL, 's'},
		{"step-ms", required_argument, NULL, 'm'},
		{"seed", required_argument, NULL, 'S'},
		{"shape", required_argument, NULL, 'w'},
		{"meta", no_argument, NULL, 'M'},
		{"ordered", no_argument, NULL, 'O'},
		{"transactional-id", required_argument, NULL, 'x'},
		{"end", required_argument, NULL, 'e'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *bootstrap = NULL;
	const char *topic = NULL;
	const char *topics[1000];
	int			ntopics = 0;
	bool		narrow = false;
	bool		dims = false;		/* --shape dims */
	bool		meta = false;
	bool		ordered = false;
	const char *transactional_id = NULL;
	const char *end = "commit";
	rd_kafka_error_t *txn_error;
	long long	count = -1;
	long long	rate = 0;
	enum
	{
		FORMAT_JSON, FORMAT_CSV, FORMAT_AVRO
	}			format = FORMAT_JSON;
	long long	partitions = 0;		/* 0: all of the topic's */
	bool		deterministic_ts = false;
	long long	start_ts = 0;
	long long	step_ms = 1000;
	long long	seed = 1;
	uint64_t	rng;
	int			opt;
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;
	int			topic_partitions;
	DeliveryStats stats = {0};
	long long	sent = 0;
	double		t0, elapsed;
	int			signals_at_flush;
	rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;

	while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1)
	{
		switch (opt)
		{
			case 'b':
				bootstrap = optarg;
				break;
			case 't':
				if (ntopics == (int) lengthof(topics))
					fail(EXIT_USAGE, "produce: at most %d topics", (int) lengthof(topics));
				topics[ntopics++] = optarg;
				topic = topics[0];
				break;
			case 'n':
				count = option_int("--count", optarg, 0, LLONG_MAX);
				break;
			case 'r':
				rate = option_int("--rate", optarg, 0, 100000000);
				break;
			case 'f':
				if (strcmp(optarg, "csv") == 0)
					format = FORMAT_CSV;
				else if (strcmp(optarg, "json") == 0)
					format = FORMAT_JSON;
				else if (strcmp(optarg, "avro") == 0)
					format = FORMAT_AVRO;
				else
					fail(EXIT_USAGE, "produce: --format is json, csv or avro, "
						 "not '%s'", optarg);
				break;
			case 'p':
				partitions = option_int("--partitions", optarg, 1, 100000);
				break;
			case 's':
				/* 0001-01-01 .. 9999-12-31, so the year has four digits */
				start_ts = option_int("--start-ts", optarg, -62135596800LL,
									  253402300799LL);
				deterministic_ts = true;
				break;
			case 'm':
				step_ms = option_int("--step-ms", optarg, 0, 86400000);
				break;
			case 'S':
				seed = option_int("--seed", optarg, LLONG_MIN, LLONG_MAX);
				break;
			case 'w':
				narrow = dims = false;
				if (strcmp(optarg, "narrow") == 0)
					narrow = true;
				else if (strcmp(optarg, "dims") == 0)
					dims = true;
				else if (strcmp(optarg, "wide") != 0)
					fail(EXIT_USAGE, "produce: --shape is wide, narrow or dims, not "
						 "'%s'", optarg);
				break;
			case 'x':
				transactional_id = optarg;
				break;
			case 'M':
				meta = true;
				break;
			case 'O':
				ordered = true;
				break;
			case 'e':
				if (strcmp(optarg, "commit") != 0 && strcmp(optarg, "abort") != 0 &&
					strcmp(optarg, "hold") != 0)
					fail(EXIT_USAGE, "produce: --end is commit, abort or hold, not "
						 "'%s'", optarg);
				end = optarg;
				break;
			case 'h':
				usage(stdout);
				return 0;
			default:
				bad_option("produce", opt, argv);
		}
	}
	if (optind != argc)
		fail(EXIT_USAGE, "produce: unexpected argument '%s'", argv[optind]);
	if (bootstrap == NULL || topic == NULL || count < 0)
		fail(EXIT_USAGE, "produce: --bootstrap, --topic and --count are "
			 "required");
	if (dims && format == FORMAT_AVRO)
		fail(EXIT_USAGE, "produce: --shape dims is json or csv, not avro");

	conf = rd_kafka_conf_new();
	conf_set(conf, "bootstrap.servers", bootstrap);
	conf_set(conf, "allow.auto.create.topics", "false");
	conf_set(conf, "linger.ms", "5");
	conf_set(conf, "compression.type", "lz4");
	conf_set(conf, "batch.num.messages", "10000");
	conf_set(conf, "batch.size", "1000000");
	conf_set(conf, "queue.buffering.max.messages", "1000000");
	conf_set(conf, "queue.buffering.max.kbytes", "1048576");
	/* Give up on a message after a minute, not librdkafka's five. */
	conf_set(conf, "message.timeout.ms", "60000");
	if (transactional_id != NULL)
		conf_set(conf, "transactional.id", transactional_id);
	else if (ordered)
		conf_set(conf, "enable.idempotence", "true");
	rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
	rd_kafka_conf_set_opaque(conf, &stats);
	rk = new_producer(conf);
	if (transactional_id != NULL &&
		((txn_error = rd_kafka_init_transactions(rk, 30000)) != NULL ||
		 (txn_error = rd_kafka_begin_transaction(rk)) != NULL))
		fail(EXIT_KAFKA, "produce: cannot start a transaction: %s",
			 rd_kafka_error_string(txn_error));

	topic_partitions = topic_partition_count(rk, topic, "produce");
	if (partitions == 0)
		partitions = topic_partitions;
	else if (partitions > topic_partitions)
		fail(EXIT_USAGE, "produce: --partitions %lld, but %s has only %d",
			 partitions, topic, topic_partitions);

	install_stop_signals(false);
	rng = (uint64_t) seed;
	t0 = monotonic_seconds();

	for (long long i = 0; (count == 0 || i < count) && signals_received == 0; i++)
	{
		char		ts[40];
		char		value[256];
		int			len;
		const char *country;
		const char *device;
		int64_t		amount_cents;
		int			qty;
		int64_t		ts_ms;

		/* Pace: message i is due at t0 + i / rate. */
		if (rate > 0)
		{
			double		ahead;

			while ((ahead = t0 + (double) i / rate - monotonic_seconds()) >= 0.001
				   && signals_received == 0)
				rd_kafka_poll(rk, ahead > 0.1 ? 100 : (int) (ahead * 1000));
			if (signals_received != 0)
				break;
		}

		country = countries[next_random(&rng) % lengthof(countries)];
		device = devices[next_random(&rng) % lengthof(devices)];
		amount_cents = 1 + (int64_t) (next_random(&rng) % 99999);
		qty = 1 + (int) (next_random(&rng) % 10);
		ts_ms = deterministic_ts ? start_ts * 1000 + i * step_ms : wall_clock_ms();
		format_ts(ts_ms, ts, sizeof(ts));

		if (dims)
		{
			/* drawn after the common draws, which stay those of the other shapes */
			int			c = (int) (next_random(&rng) % 100);
			int			d = (int) (next_random(&rng) % 100);
			int64_t		user = (int64_t) (next_random(&rng) % 100000);
			double		u = (double) (next_random(&rng) >> 11) / 9007199254740992.0;
			int64_t		lat_us = 1 + (int64_t) (u * u * u * u * 999999.0);

			if (format == FORMAT_CSV)
				len = snprintf(value, sizeof(value), "%s,c%02d,d%02d,%" PRId64 ",%" PRId64 ".%03" PRId64,
							   ts, c, d, user, lat_us / 1000, lat_us % 1000);
			else
				len = snprintf(value, sizeof(value),
							   "{\"ts\":\"%s\",\"country\":\"c%02d\",\"device\":\"d%02d\","
							   "\"user_id\":%" PRId64 ",\"latency\":%" PRId64 ".%03" PRId64 "}",
							   ts, c, d, user, lat_us / 1000, lat_us % 1000);
		}
		else if (format == FORMAT_AVRO)
		{
			char	   *o = avro_long(value, ts_ms);

			if (narrow)
			{
				char		k[8];

				snprintf(k, sizeof(k), "k%02d", (int) (amount_cents % 100));
				o = avro_string(o, k);
				o = avro_long(o, amount_cents * 7919);
			}
			else
			{
				o = avro_string(o, country);
				o = avro_string(o, device);
				/* the double nearest to the JSON's number: the same text */
				o = avro_double(o, (double) amount_cents / 100.0);
				o = avro_long(o, qty);
			}
			len = (int) (o - value);
		}
		else if (narrow && format == FORMAT_CSV)
			len = snprintf(value, sizeof(value), "%s,k%02d,%" PRId64,
						   ts, (int) (amount_cents % 100), amount_cents * 7919);
		else if (narrow)
			len = snprintf(value, sizeof(value), "{\"ts\":\"%s\",\"k\":\"k%02d\",\"v\":%" PRId64 "}",
						   ts, (int) (amount_cents % 100), amount_cents * 7919);
		else if (format == FORMAT_CSV)
			len = snprintf(value, sizeof(value),
						   "%s,%s,%s,%" PRId64 ".%02" PRId64 ",%d",
						   ts, country, device, amount_cents / 100,
						   amount_cents % 100, qty);
		else
			len = snprintf(value, sizeof(value),
						   "{\"ts\":\"%s\",\"country\":\"%s\",\"device\":\"%s\","
						   "\"amount\":%" PRId64 ".%02" PRId64 ",\"qty\":%d}",
						   ts, country, device, amount_cents / 100,
						   amount_cents % 100, qty);

		if (meta)
		{
			char		key[32];
			char		trace[48];
			int			keylen = snprintf(key, sizeof(key), "key-%lld", (long long) i);
			const char *keyptr = i % 7 == 6 ? NULL : key;
			size_t		keysize = i % 7 == 6 ? 0 : (size_t) keylen;
			rd_kafka_headers_t *headers = rd_kafka_headers_new(4);
			int64_t		ms = ts_ms + 3600000;

			snprintf(trace, sizeof(trace), "t-%lld", (long long) i);
			rd_kafka_header_add(headers, "trace-id", -1, trace, -1);
			rd_kafka_header_add(headers, "source", -1, "sckafka", -1);
			if (i % 5 == 0)
			{
				snprintf(trace, sizeof(trace), "t-%lld-last", (long long) i);
				rd_kafka_header_add(headers, "trace-id", -1, trace, -1);
			}
			if (i % 3 == 0)
				rd_kafka_header_add(headers, "empty", -1, NULL, 0);
			for (;;)
			{
				/* librdkafka owns the headers once the message is queued */
				rd_kafka_headers_t *copy = rd_kafka_headers_copy(headers);

				err = rd_kafka_producev(rk,
										RD_KAFKA_V_TOPIC(topics[i % ntopics]),
										RD_KAFKA_V_PARTITION((int32_t) ((i / ntopics) % partitions)),
										RD_KAFKA_V_VALUE(value, (size_t) len),
										RD_KAFKA_V_KEY(keyptr, keysize),
										RD_KAFKA_V_TIMESTAMP(ms),
										RD_KAFKA_V_HEADERS(copy),
										RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
										RD_KAFKA_V_END);
				if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
					rd_kafka_headers_destroy(copy);
				if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL || signals_received != 0)
					break;
				rd_kafka_poll(rk, 10);
			}
			rd_kafka_headers_destroy(headers);
		}
		else
			while ((err = rd_kafka_producev(rk,
											RD_KAFKA_V_TOPIC(topics[i % ntopics]),
											RD_KAFKA_V_PARTITION((int32_t) ((i / ntopics) % partitions)),
											RD_KAFKA_V_VALUE(value, (size_t) len),
											RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
											RD_KAFKA_V_END)) ==
				   RD_KAFKA_RESP_ERR__QUEUE_FULL && signals_received == 0)
				rd_kafka_poll(rk, 10);	/* let deliveries drain the queue */
		if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
			break;
		sent++;
		rd_kafka_poll(rk, 0);	/* serve delivery reports */
	}
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR && err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
		fprintf(stderr, "sckafka: produce: stopped after %lld messages: %s\n",
				sent, rd_kafka_err2str(err));
	else if (count > 0 && sent < count)
		fprintf(stderr, "sckafka: produce: interrupted after %lld of %lld "
				"messages\n", sent, count);

	/* Wait for every delivery report; another signal gives up on the rest. */
	signals_at_flush = signals_received;
	while (rd_kafka_flush(rk, 200) == RD_KAFKA_RESP_ERR__TIMED_OUT)
	{
		if (signals_received != signals_at_flush)
		{
			rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
			rd_kafka_flush(rk, 5000);	/* serves the purged messages' reports */
			break;
		}
	}
	elapsed = monotonic_seconds() - t0;

	/*
	 * --end hold: say so on stdout and keep the transaction open until a
	 * signal, then abort it (what a test needs to see a last stable offset
	 * below the high watermark).
	 */
	if (transactional_id != NULL && stats.failed == 0)
	{
		if (strcmp(end, "hold") == 0)
		{
			int			signals_at_hold = signals_received;

			printf("open\n");
			fflush(stdout);
			while (signals_received == signals_at_hold)
				rd_kafka_poll(rk, 100);
		}
		txn_error = strcmp(end, "commit") == 0 ? rd_kafka_commit_transaction(rk, 30000)
			: rd_kafka_abort_transaction(rk, 30000);
		if (txn_error != NULL)
			fail(EXIT_KAFKA, "produce: cannot end the transaction: %s",
				 rd_kafka_error_string(txn_error));
	}
	rd_kafka_destroy(rk);

	fprintf(stderr, "produced %lld messages in %.3f s (%.0f msg/s)\n",
			stats.delivered, elapsed,
			elapsed > 0 ? stats.delivered / elapsed : 0.0);
	if (stats.failed > 0 || stats.delivered != sent)
	{
		fprintf(stderr, "sckafka: produce: %lld of %lld messages failed "
				"delivery (first error: %s)\n",
				sent - stats.delivered, sent,
				stats.failed > 0 ? rd_kafka_err2str(stats.first_error)
				: "no delivery report");
		return EXIT_KAFKA;
	}
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR && signals_received == 0)
		return EXIT_KAFKA;
	return 0;
}

/* ------------------------------------------------------------------------
 * avro-schema: the schema of produce --format avro's records
 * ------------------------------------------------------------------------ */

static int
cmd_avro_schema(int argc, char **argv)
{
	static const struct option options[] = {
		{"shape", required_argument, NULL, 'w'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	bool		narrow = false;
	int			opt;

	while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1)
	{
		switch (opt)
		{
			case 'w':
				if (strcmp(optarg, "narrow") == 0)
					narrow = true;
				else if (strcmp(optarg, "wide") == 0)
					narrow = false;
				else
					fail(EXIT_USAGE, "avro-schema: --shape is wide or narrow, "
						 "not '%s'", optarg);
				break;
			case 'h':
				usage(stdout);
				return 0;
			default:
				bad_option("avro-schema", opt, argv);
		}
	}
	if (optind != argc)
		fail(EXIT_USAGE, "avro-schema: unexpected argument '%s'", argv[optind]);
	puts(narrow ? avro_schema_narrow : avro_schema_wide);
	return fflush(stdout) == 0 ? 0 : EXIT_KAFKA;
}

/* ------------------------------------------------------------------------
 * committed: a group's committed offsets, without joining the group
 * ------------------------------------------------------------------------ */

static int
cmd_committed(int argc, char **argv)
{
	static const struct option options[] = {
		{"bootstrap", required_argument, NULL, 'b'},
		{"group", required_argument, NULL, 'g'},
		{"topic", required_argument, NULL, 't'},
		{"timeout", required_argument, NULL, 'T'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *bootstrap = NULL;
	const char *group = NULL;
	const char *topic = NULL;
	long long	timeout_ms = 10000;
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;
	rd_kafka_topic_partition_list_t *list;
	rd_kafka_resp_err_t err;
	char		errstr[512];
	int			partitions;
	int			opt;

	while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1)
	{
		switch (opt)
		{
			case 'b':
				bootstrap = optarg;
				break;
			case 'g':
				group = optarg;
				break;
			case 't':
				topic = optarg;
				break;
			case 'T':
				timeout_ms = option_int("--timeout", optarg, 1, 3600000);
				break;
			case 'h':
				usage(stdout);
				return 0;
			default:
				bad_option("committed", opt, argv);
		}
	}
	if (optind != argc)
		fail(EXIT_USAGE, "committed: unexpected argument '%s'", argv[optind]);
	if (bootstrap == NULL || group == NULL || topic == NULL)
		fail(EXIT_USAGE, "committed: --bootstrap, --group and --topic are "
			 "required");

	/* A consumer of the group that never subscribes: it joins nothing. */
	conf = rd_kafka_conf_new();
	conf_set(conf, "bootstrap.servers", bootstrap);
	conf_set(conf, "group.id", group);
	conf_set(conf, "enable.auto.commit", "false");
	rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
	if (rk == NULL)
		fail(EXIT_KAFKA, "cannot create a Kafka client: %s", errstr);

	partitions = topic_partition_count(rk, topic, "committed");
	list = rd_kafka_topic_partition_list_new(partitions);
	for (int p = 0; p < partitions; p++)
		rd_kafka_topic_partition_list_add(list, topic, p);
	err = rd_kafka_committed(rk, list, (int) timeout_ms);
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
		fail(EXIT_KAFKA, "committed: group %s, topic %s: %s", group, topic,
			 rd_kafka_err2str(err));
	for (int i = 0; i < list->cnt; i++)
		if (list->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR)
			fail(EXIT_KAFKA, "committed: group %s, %s [%d]: %s", group, topic,
				 (int) list->elems[i].partition,
				 rd_kafka_err2str(list->elems[i].err));
	for (int i = 0; i < list->cnt; i++)
	{
		if (list->elems[i].offset >= 0)
			printf("%d %" PRId64 "\n", (int) list->elems[i].partition,
				   list->elems[i].offset);
		else
			printf("%d -\n", (int) list->elems[i].partition);
	}
	rd_kafka_topic_partition_list_destroy(list);

	/* Nothing to leave or commit: do not wait for the coordinator. */
	rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
	return fflush(stdout) == 0 ? 0 : EXIT_KAFKA;
}

/* ------------------------------------------------------------------------ */

int
main(int argc, char **argv)
{
	if (argc < 2)
		fail(EXIT_USAGE, "no command (mock, create-topic, delete-topic, "
			 "add-partitions, committed, produce, avro-schema); see --help");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
		strcmp(argv[1], "help") == 0)
	{
		usage(stdout);
		return 0;
	}

	/* The subcommand is argv[0] of its own option parsing. */
	opterr = 0;
	if (strcmp(argv[1], "mock") == 0)
		return cmd_mock(argc - 1, argv + 1);
	if (strcmp(argv[1], "create-topic") == 0)
		return cmd_create_topic(argc - 1, argv + 1);
	if (strcmp(argv[1], "delete-topic") == 0)
		return cmd_delete_topic(argc - 1, argv + 1);
	if (strcmp(argv[1], "add-partitions") == 0)
		return cmd_add_partitions(argc - 1, argv + 1);
	if (strcmp(argv[1], "committed") == 0)
		return cmd_committed(argc - 1, argv + 1);
	if (strcmp(argv[1], "produce") == 0)
		return cmd_produce(argc - 1, argv + 1);
	if (strcmp(argv[1], "avro-schema") == 0)
		return cmd_avro_schema(argc - 1, argv + 1);

	fail(EXIT_USAGE, "unknown command '%s' (mock, create-topic, delete-topic, "
		 "add-partitions, committed, produce, avro-schema, --help)", argv[1]);
	return EXIT_USAGE;
}
