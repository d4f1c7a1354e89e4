/*-------------------------------------------------------------------------
 *
 * kafka_consumer.c
 *		The Kafka consumer: created on a cluster's configuration, assigned
 *		partitions by hand, polled, paused, asked for watermarks, destroyed;
 *		the timestamps at given offsets, which a short-lived consumer reads;
 *		and the commits of a receiver's positions to the cube's progress
 *		group, for Kafka's tools.
 *
 * No consumer group protocol is used, and positions live in PostgreSQL:
 * the receiver assigns the partitions and says where to read.  The
 * consumer's queue wakes the receiver through a pipe it waits on together
 * with its latch, and messages are handed out as plain structs whose
 * handles keep librdkafka's alive until released.  The rules of kafka.c's
 * header hold here too: no librdkafka thread reaches PostgreSQL, and no
 * ERROR is raised while a librdkafka call is on the stack.  The consumer
 * is built on kafka.c's configuration, handles, events and metadata
 * (kafka_internal.h); kafka.c calls nothing here.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include <fcntl.h>
#include <unistd.h>

#include "kafka_internal.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
#include "utils/memutils.h"

/* A consumer, and the client that commits for it (kafka.h: opaque). */
struct ScKafkaConsumer
{
	rd_kafka_t *rk;
	rd_kafka_queue_t *consumer_queue;
	rd_kafka_queue_t *main_queue;
	rd_kafka_topic_partition_list_t *assignment;
	rd_kafka_message_t **batch;
	int			batch_size;
	int			pipefd[2];
	ScTopicList topics;			/* what source partitions are of; n = 0 unassigned */
	rd_kafka_topic_t **held;	/* a handle on each of topics (see below) */
	rd_kafka_topic_t *last_rkt; /* the topic of the last message polled ... */
	int32		last_base;		/* ... and its first source partition */
	TimestampTz last_nudge;		/* see sc_kafka_consumer_nudge() */
	int64		nudge_messages; /* the queue may have stopped the fetcher */
	int64		nudge_bytes;	/* ... once this much went through it */
	int64		drained_messages;	/* taken since the queue was last empty */
	int64		drained_bytes;
	int			fetch_wait_ms;	/* fetch.wait.max.ms, as librdkafka uses it */
	int			fetch_min_bytes;	/* fetch.min.bytes, likewise */
	bool		fetch_derived;	/* both derived from batch_max_ms */
	ScKafkaEvents events;
	rd_kafka_conf_t *commit_conf;	/* the consumer's, for committer */
	rd_kafka_t *committer;		/* commits for Kafka's tools; NULL until one */
	rd_kafka_queue_t *commit_queue; /* the committer's, for the answers */
	rd_kafka_topic_partition_list_t *commit_latest; /* the newest positions */
	bool		commit_unsent;	/* commit_latest not asked for yet */
	int			commits_waiting;	/* made and not answered yet: 0 or 1 */
	bool		commit_failed;	/* the answer to commit_latest was a failure */
	int			commit_backoff_ms;	/* from a failed try to the next */
	TimestampTz commit_made_at; /* when commit_latest was last asked for */
};

/* ----------------------------------------------------------------
 * Consumer
 * ----------------------------------------------------------------
 */

/*
 * The prefetch is bounded in bytes by streamcube.fetch_queue_size (B).
 * queued.max.messages.kbytes = B bounds the payloads waiting in the
 * queue, but librdkafka keeps a few hundred bytes of its own for every
 * queued message, and a fetch response (up to fetch.max.bytes,
 * compressed) lands whole even above the bound.  So, unless the
 * cluster's properties set them:
 *	- queued.min.messages = B / 320: for small messages the count bounds
 *	  the bookkeeping (16 MB -> 52,428 messages);
 *	- fetch.max.bytes = B / 16 (at least message.max.bytes, which
 *	  librdkafka requires) and fetch.message.max.bytes = B / 64: what
 *	  one fetch adds above the bound (1 MB and 256 kB at 16 MB).
 * A small queue runs at full speed only with sc_kafka_consumer_nudge().
 * Kafka returns a batch larger than these limits whole, so they never
 * stop a partition with large messages.
 */
static void
sc_kafka_conf_prefetch(rd_kafka_conf_t *conf, const ScKafkaConnInfo *conn, int queue_kbytes)
{
	char		errbuf[512];

	static const struct
	{
		const char *name;
		const char *alias;
		int64		divisor;
	}			derived[] = {
		{"queued.min.messages", NULL, 320},
		{"fetch.max.bytes", NULL, 16},
		{"fetch.message.max.bytes", "max.partition.fetch.bytes", 64},
	};

	for (int i = 0; i < lengthof(derived); i++)
	{
		char		value[32];
		int64		v;

		if (sc_kafka_has_property(conn, derived[i].name) ||
			(derived[i].alias && sc_kafka_has_property(conn, derived[i].alias)))
			continue;
		v = Max((int64) queue_kbytes * 1024 / derived[i].divisor, 1024);

		/*
		 * librdkafka refuses a fetch.max.bytes below message.max.bytes,
		 * and one a user-set receive.message.max.bytes cannot hold.
		 */
		if (strcmp(derived[i].name, "fetch.max.bytes") == 0)
		{
			char		mmb[32];
			size_t		size = sizeof(mmb);

			if (sc_kafka_has_property(conn, "receive.message.max.bytes"))
				continue;
			if (rd_kafka_conf_get(conf, "message.max.bytes", mmb, &size) == RD_KAFKA_CONF_OK)
				v = Max(v, strtoll(mmb, NULL, 10));
		}
		snprintf(value, sizeof(value), INT64_FORMAT, v);
		if (rd_kafka_conf_set(conf, derived[i].name, value, errbuf, sizeof(errbuf)) != RD_KAFKA_CONF_OK)
		{
			rd_kafka_conf_destroy(conf);
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not configure the Kafka consumer: %s", errbuf)));
		}
	}
}

/* A property's value in conf as a number; fallback if it has none. */
static int64
sc_kafka_conf_int(rd_kafka_conf_t *conf, const char *name, int64 fallback)
{
	char		v[32];
	size_t		size = sizeof(v);

	if (rd_kafka_conf_get(conf, name, v, &size) != RD_KAFKA_CONF_OK)
		return fallback;
	return strtoll(v, NULL, 10);
}

/*
 * How long the broker holds a fetch for more data, from batch_max_ms.
 *
 * With librdkafka's defaults (fetch.min.bytes 1) the broker answers a
 * fetch as soon as a single byte is there: a live stream of 20,000
 * messages/s came as hundreds of small responses a second, each one woke
 * the receiver, and the receiver still held its batch batch_max_ms open
 * after the first message.  Waiting is cheaper where the data is: unless
 * the cluster's properties set them,
 *	- fetch.wait.max.ms = 9/10 of batch_max_ms (at most 500 ms,
 *	  librdkafka's default): the broker gathers the stream for that long;
 *	- fetch.min.bytes = half of the smaller of fetch.message.max.bytes and
 *	  fetch.max.bytes: a partition behind (catching up) always has that much
 *	  to give, so a catch-up is never held back, not even on a topic of one
 *	  partition.
 * The receiver then holds a batch open only for the rest of batch_max_ms
 * (sc_kafka_consumer_batch_hold_ms), so that a message waits at most
 * batch_max_ms in the broker and the receiver together, as it did in the
 * receiver alone.  Below 10 ms there is nothing worth gathering: librdkafka's
 * defaults stay.
 */
static void
sc_kafka_conf_fetch_wait(ScKafkaConsumer *c, rd_kafka_conf_t *conf,
						 const ScKafkaConnInfo *conn, int batch_max_ms)
{
	bool		set_wait = sc_kafka_has_property(conn, "fetch.wait.max.ms");
	bool		set_min = sc_kafka_has_property(conn, "fetch.min.bytes");
	char		errbuf[512];
	char		value[32];

	if (batch_max_ms >= 10 && !set_wait)
	{
		snprintf(value, sizeof(value), "%d", Min(batch_max_ms * 9 / 10, 500));
		if (rd_kafka_conf_set(conf, "fetch.wait.max.ms", value, errbuf, sizeof(errbuf)) != RD_KAFKA_CONF_OK)
			goto fail;
	}
	if (batch_max_ms >= 10 && !set_min)
	{
		int64		most = Min(sc_kafka_conf_int(conf, "fetch.message.max.bytes", 1048576),
							   sc_kafka_conf_int(conf, "fetch.max.bytes", 52428800));

		snprintf(value, sizeof(value), INT64_FORMAT, Max(most / 2, 1));
		if (rd_kafka_conf_set(conf, "fetch.min.bytes", value, errbuf, sizeof(errbuf)) != RD_KAFKA_CONF_OK)
			goto fail;
	}
	c->fetch_wait_ms = (int) sc_kafka_conf_int(conf, "fetch.wait.max.ms", 500);
	c->fetch_min_bytes = (int) sc_kafka_conf_int(conf, "fetch.min.bytes", 1);
	c->fetch_derived = batch_max_ms >= 10 && !set_wait && !set_min;
	return;

fail:
	rd_kafka_conf_destroy(conf);
	ereport(ERROR,
			(errcode(ERRCODE_INTERNAL_ERROR),
			 errmsg("could not configure the Kafka consumer: %s", errbuf)));
}

/*
 * How long a receiver holds a batch open after its first message.  When
 * the broker gathers the stream (fetch.min.bytes above 1), a message may
 * have waited up to fetch.wait.max.ms there already: the batch closes after
 * the rest of batch_max_ms, but never at once, as the partitions of one
 * fetch response come into the queue one after the other (a tenth of
 * batch_max_ms at least).  With fetch.min.bytes 1 every message comes as
 * soon as it is there, and the receiver gathers the batch itself, as
 * before: batch_max_ms.
 */
int
sc_kafka_consumer_batch_hold_ms(ScKafkaConsumer *c, int batch_max_ms)
{
	if (c->fetch_min_bytes <= 1)
		return batch_max_ms;
	return Max(Max(batch_max_ms - c->fetch_wait_ms, batch_max_ms / 10), 1);
}

/* The fetch settings the consumer runs with, for the server log. */
void
sc_kafka_consumer_fetch_settings(ScKafkaConsumer *c, int *wait_ms, int *min_bytes,
								 bool *derived)
{
	*wait_ms = c->fetch_wait_ms;
	*min_bytes = c->fetch_min_bytes;
	*derived = c->fetch_derived;
}

/*
 * Create a consumer with manual assignment.  No consumer group protocol is
 * used: librdkafka only needs a group.id for its consumer API, offsets are
 * never committed to Kafka (positions live in PostgreSQL).
 */
ScKafkaConsumer *
sc_kafka_consumer_create(const ScKafkaConnInfo *conn, const char *group_id,
						 int queue_kbytes, int batch_max_ms)
{
	ScKafkaConsumer *c = palloc0(sizeof(ScKafkaConsumer));
	char		errbuf[512];
	char		kbytes[32];
	rd_kafka_conf_t *conf;

	conf = sc_kafka_conf_build(conn, &c->events, errbuf, sizeof(errbuf));
	if (conf == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid configuration for Kafka cluster \"%s\": %s",
						conn->cluster_name, errbuf)));

	snprintf(kbytes, sizeof(kbytes), "%d", queue_kbytes);

	sc_kafka_conf_prefetch(conf, conn, queue_kbytes);
	sc_kafka_conf_fetch_wait(c, conf, conn, batch_max_ms);
	if (rd_kafka_conf_set(conf, "group.id", group_id, errbuf, sizeof(errbuf)) != RD_KAFKA_CONF_OK ||
		rd_kafka_conf_set(conf, "enable.auto.commit", "false", errbuf, sizeof(errbuf)) != RD_KAFKA_CONF_OK ||
		rd_kafka_conf_set(conf, "enable.auto.offset.store", "false", errbuf, sizeof(errbuf)) != RD_KAFKA_CONF_OK ||
		rd_kafka_conf_set(conf, "auto.offset.reset", "error", errbuf, sizeof(errbuf)) != RD_KAFKA_CONF_OK ||
		rd_kafka_conf_set(conf, "enable.partition.eof", "true", errbuf, sizeof(errbuf)) != RD_KAFKA_CONF_OK ||
		rd_kafka_conf_set(conf, "queued.max.messages.kbytes", kbytes, errbuf, sizeof(errbuf)) != RD_KAFKA_CONF_OK)
	{
		rd_kafka_conf_destroy(conf);
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not configure the Kafka consumer: %s", errbuf)));
	}

	/*
	 * The queue's thresholds, as librdkafka will apply them: half of either
	 * taken between two empty polls means the fetcher may have stopped.
	 */
	{
		char		v[32];
		size_t		size = sizeof(v);

		c->nudge_messages = rd_kafka_conf_get(conf, "queued.min.messages", v, &size) == RD_KAFKA_CONF_OK
			? strtoll(v, NULL, 10) / 2 : 50000;
		c->nudge_bytes = (int64) queue_kbytes * 1024 / 2;
	}

	c->commit_conf = rd_kafka_conf_dup(conf);
	c->rk = sc_kafka_new_handle(RD_KAFKA_CONSUMER, conf, errbuf, sizeof(errbuf));
	if (c->rk == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not create a Kafka consumer for cluster \"%s\": %s",
						conn->cluster_name, errbuf)));

	c->consumer_queue = rd_kafka_queue_get_consumer(c->rk);
	c->main_queue = rd_kafka_queue_get_main(c->rk);

	if (pipe(c->pipefd) != 0 ||
		fcntl(c->pipefd[0], F_SETFL, O_NONBLOCK) != 0 ||
		fcntl(c->pipefd[1], F_SETFL, O_NONBLOCK) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create a pipe for the Kafka consumer: %m")));
	rd_kafka_queue_io_event_enable(c->consumer_queue, c->pipefd[1], "c", 1);
	rd_kafka_queue_io_event_enable(c->main_queue, c->pipefd[1], "m", 1);
	return c;
}

/*
 * sc_kafka_describe_topics() through the consumer's own client: no second
 * client to start and connect, and the consumer's connections to the
 * leaders are up by the time it is assigned (a receiver's first fetch
 * starts at once).
 */
List *
sc_kafka_consumer_describe(ScKafkaConsumer *c, const ScKafkaConnInfo *conn,
						   const ScTopicList *topics, int timeout_ms, bool *topic_missing,
						   char **cluster_id)
{
	return sc_kafka_describe_topics_with(c->rk, &c->events, conn, topics, true, timeout_ms,
										 topic_missing, cluster_id);
}

/* Forget the consumer's topics, and let go of their handles. */
static void
sc_kafka_consumer_drop_topics(ScKafkaConsumer *c)
{
	for (int t = 0; t < c->topics.n; t++)
	{
		if (c->held != NULL && c->held[t] != NULL)
			rd_kafka_topic_destroy(c->held[t]);
		pfree(c->topics.names[t]);
	}
	if (c->topics.names != NULL)
		pfree(c->topics.names);
	if (c->topics.removed != NULL)
		pfree(c->topics.removed);
	if (c->held != NULL)
		pfree(c->held);
	c->topics.n = 0;
	c->topics.names = NULL;
	c->topics.removed = NULL;
	c->held = NULL;
	c->last_rkt = NULL;
}

/*
 * A copy of topics as the consumer's own, in the consumer's context, with
 * a handle on each: librdkafka keeps one topic object per name, and while
 * the consumer holds it no other topic's object can take its address, so
 * sc_kafka_message_source() may know a topic by its object.
 */
static void
sc_kafka_consumer_set_topics(ScKafkaConsumer *c, const ScTopicList *topics)
{
	MemoryContext cxt = GetMemoryChunkContext(c);
	char	  **names;
	bool	   *removed;
	rd_kafka_topic_t **held;

	if (topics->n < 1 || topics->n > SC_SOURCE_MAX_TOPICS)
		elog(ERROR, "a consumer reads 1 to %d topics, not %d", SC_SOURCE_MAX_TOPICS, topics->n);
	names = MemoryContextAlloc(cxt, sizeof(char *) * topics->n);
	removed = MemoryContextAllocZero(cxt, sizeof(bool) * topics->n);
	held = MemoryContextAllocZero(cxt, sizeof(rd_kafka_topic_t *) * topics->n);
	for (int t = 0; t < topics->n; t++)
	{
		names[t] = MemoryContextStrdup(cxt, topics->names[t]);
		removed[t] = sc_topic_removed(topics, t);
	}
	sc_kafka_consumer_drop_topics(c);
	c->topics.n = topics->n;
	c->topics.names = names;
	c->topics.removed = removed;
	c->held = held;
	/* no handle on a topic taken out of the cube: it may be gone from Kafka */
	for (int t = 0; t < topics->n; t++)
		if (!removed[t])
			held[t] = rd_kafka_topic_new(c->rk, names[t], NULL);
}

/* Are these the consumer's topics, by the same numbers? */
static bool
sc_kafka_consumer_same_topics(ScKafkaConsumer *c, const ScTopicList *topics)
{
	if (topics->n != c->topics.n)
		return false;
	for (int t = 0; t < topics->n; t++)
		if (sc_topic_removed(topics, t) != sc_topic_removed(&c->topics, t))
			return false;
	return true;
}

/* The topic of a source partition of the consumer's topics. */
static inline const char *
sc_kafka_consumer_topic(ScKafkaConsumer *c, int32 source)
{
	return sc_kafka_source_topic(&c->topics, source);
}

/*
 * A list of (topic, partition) pairs for n source partitions (offsets[i]
 * as their offsets, or none).  Every source is checked first: an error
 * leaves nothing of librdkafka's behind.
 */
static rd_kafka_topic_partition_list_t *
sc_kafka_consumer_pairs(ScKafkaConsumer *c, int n, const int32 *sources, const int64 *offsets)
{
	rd_kafka_topic_partition_list_t *list;

	for (int i = 0; i < n; i++)
		(void) sc_kafka_consumer_topic(c, sources[i]);
	list = rd_kafka_topic_partition_list_new(Max(n, 1));
	for (int i = 0; i < n; i++)
		rd_kafka_topic_partition_list_add(list, sc_kafka_consumer_topic(c, sources[i]),
										  sc_source_kafka_partition(sources[i]))->offset =
			offsets != NULL ? offsets[i] : RD_KAFKA_OFFSET_INVALID;
	return list;
}

void
sc_kafka_consumer_assign(ScKafkaConsumer *c, const ScTopicList *topics,
						 int n, const int32 *sources, const int64 *offsets)
{
	rd_kafka_resp_err_t err;

	rd_kafka_topic_partition_list_t *list;

	sc_kafka_consumer_set_topics(c, topics);
	list = sc_kafka_consumer_pairs(c, n, sources, offsets);
	if (c->assignment)
		rd_kafka_topic_partition_list_destroy(c->assignment);
	c->assignment = list;

	err = rd_kafka_assign(c->rk, c->assignment);
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not assign partitions of topic \"%s\"%s: %s",
						topics->names[0], topics->n > 1 ? " and others" : "",
						rd_kafka_err2str(err))));
}

/*
 * Add partitions to (gained) or remove them from (!gained) the consumer's
 * assignment, without touching the others: their fetch goes on.  topics:
 * the cube's topics now, which a pattern only ever extends (the numbers
 * of the consumer's stay).  Returns false, with the reason in errbuf, when
 * librdkafka refuses; the caller then opens a new consumer.
 */
bool
sc_kafka_consumer_change(ScKafkaConsumer *c, const ScTopicList *topics, bool gained, int n,
						 const int32 *sources, const int64 *offsets,
						 char *errbuf, size_t errlen)
{
	rd_kafka_topic_partition_list_t *list;
	rd_kafka_topic_partition_list_t *now = NULL;
	rd_kafka_error_t *error;

	if (n == 0)
		return true;
	if (!sc_kafka_consumer_same_topics(c, topics))
	{
		for (int t = 0; t < Min(topics->n, c->topics.n); t++)
			if (strcmp(topics->names[t], c->topics.names[t]) != 0)
			{
				snprintf(errbuf, errlen, "topic %d is \"%s\", no longer \"%s\"", t,
						 topics->names[t], c->topics.names[t]);
				return false;
			}
		sc_kafka_consumer_set_topics(c, topics);
		c->last_rkt = NULL;
	}
	list = sc_kafka_consumer_pairs(c, n, sources, gained ? offsets : NULL);
	error = gained ? rd_kafka_incremental_assign(c->rk, list)
		: rd_kafka_incremental_unassign(c->rk, list);
	rd_kafka_topic_partition_list_destroy(list);
	if (error != NULL)
	{
		snprintf(errbuf, errlen, "%s", rd_kafka_error_string(error));
		rd_kafka_error_destroy(error);
		return false;
	}

	c->last_rkt = NULL;

	/* What pause and resume act on. */
	if (rd_kafka_assignment(c->rk, &now) == RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		if (c->assignment)
			rd_kafka_topic_partition_list_destroy(c->assignment);
		c->assignment = now;
	}
	return true;
}

/* A descriptor that becomes readable when the consumer has something. */
int
sc_kafka_consumer_wait_fd(ScKafkaConsumer *c)
{
	return c->pipefd[0];
}

/*
 * Wake the fetcher up when it stopped behind the high watermark.
 *
 * librdkafka stops fetching while its queue holds queued.min.messages or
 * queued.max.messages.kbytes, and in 2.0.2 it decides to fetch again only
 * when its broker thread wakes up for some other reason, up to a second
 * later (fetch.queue.backoff.ms, which bounds that wait, came in 2.1).  A
 * receiver draining the queue faster than that waited for Kafka with data
 * still to read, which is why the prefetch had to be large.  When the queue
 * runs empty after at least half of a threshold went through it since it
 * was last empty (so the fetcher may have stopped; a receiver keeping up
 * with a live stream never gets there), and some partition is known to
 * have more messages, the receiver sends a ListOffsets request and does not
 * wait for its answer: queuing the request wakes the broker threads of
 * those partitions' leaders, which then look at their partitions again and
 * fetch.  At most once every SC_NUDGE_INTERVAL_MS; nothing is consumed or
 * skipped by it.
 */
#define SC_NUDGE_INTERVAL_MS 5

static void
sc_kafka_consumer_nudge(ScKafkaConsumer *c)
{
	rd_kafka_topic_partition_list_t *probe;
	TimestampTz now;
	bool		behind = false;

	if (c->assignment == NULL || c->assignment->cnt == 0)
		return;
	now = GetCurrentTimestamp();
	if (!TimestampDifferenceExceeds(c->last_nudge, now, SC_NUDGE_INTERVAL_MS))
		return;

	probe = rd_kafka_topic_partition_list_copy(c->assignment);
	if (rd_kafka_position(c->rk, probe) == RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		for (int i = 0; i < probe->cnt && !behind; i++)
		{
			rd_kafka_topic_partition_t *tp = &probe->elems[i];
			int64_t		low,
						high;

			if (tp->offset >= 0 &&
				rd_kafka_get_watermark_offsets(c->rk, tp->topic, tp->partition,
											   &low, &high) == RD_KAFKA_RESP_ERR_NO_ERROR &&
				high > tp->offset)
				behind = true;
		}
	}
	if (behind)
	{
		c->last_nudge = now;
		for (int i = 0; i < probe->cnt; i++)
			probe->elems[i].offset = RD_KAFKA_OFFSET_END;
		/* Times out at once by design; a late answer is dropped. */
		(void) rd_kafka_offsets_for_times(c->rk, probe, 0);
	}
	rd_kafka_topic_partition_list_destroy(probe);
}

/*
 * The source partition of a message or a partition's event: its topic's
 * number among the consumer's, looked up by name once for each run of
 * messages of one topic (librdkafka keeps one topic object per name while
 * a partition of it is assigned; the cache is dropped when the assignment
 * changes).  -1 for a topic the consumer was not given.  A consumer of one
 * topic is given messages of that topic alone: topic 0.
 */
static inline int32
sc_kafka_message_source(ScKafkaConsumer *c, const rd_kafka_message_t *m)
{
	if (likely(c->topics.n == 1))
		return m->partition < SC_SOURCE_MAX_PARTITIONS ? m->partition : -1;
	if (m->rkt != c->last_rkt)
	{
		const char *name = m->rkt != NULL ? rd_kafka_topic_name(m->rkt) : NULL;

		c->last_base = -1;
		for (int t = 0; name != NULL && t < c->topics.n; t++)
			if (strcmp(c->topics.names[t], name) == 0)
			{
				c->last_base = sc_source_partition(t, 0);
				break;
			}
		c->last_rkt = m->rkt;
	}
	if (c->last_base < 0 || m->partition < 0 || m->partition >= SC_SOURCE_MAX_PARTITIONS)
		return -1;
	return c->last_base | m->partition;
}

/* A message as the receiver sees it; its handle keeps librdkafka's alive. */
static inline void
sc_kafka_message_take(ScKafkaConsumer *c, ScKafkaMessage *out, rd_kafka_message_t *m)
{
	rd_kafka_timestamp_type_t tstype;

	out->partition = sc_kafka_message_source(c, m);
	out->offset = m->offset;
	out->payload = m->payload;
	out->len = m->payload ? m->len : 0;
	out->key = m->key;
	out->key_len = m->key ? m->key_len : 0;
	out->timestamp = rd_kafka_message_timestamp(m, &tstype);
	out->timestamp_type =
		tstype == RD_KAFKA_TIMESTAMP_CREATE_TIME ? 'C' :
		tstype == RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME ? 'L' : 0;
	if (out->timestamp_type == 0)
		out->timestamp = -1;
	out->eof = false;
	out->handle = m;
}

/*
 * The end of a partition, at the offset the next message will have.
 * Offsets below it that never came are control records of transactions
 * (or aborted messages): the position may move there.
 */
static inline void
sc_kafka_message_eof(ScKafkaConsumer *c, ScKafkaMessage *out, const rd_kafka_message_t *m)
{
	out->partition = sc_kafka_message_source(c, m);
	out->offset = m->offset;
	out->payload = NULL;
	out->len = 0;
	out->key = NULL;
	out->key_len = 0;
	out->timestamp = -1;
	out->timestamp_type = 0;
	out->eof = true;
	out->handle = NULL;
}

/* An error the queue delivered in place of a message, into result. */
static void
sc_kafka_poll_error(ScKafkaConsumer *c, ScKafkaPollResult *result, rd_kafka_message_t *m)
{
	if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET ||
		m->err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE)
	{
		result->status = SC_KAFKA_OUT_OF_RANGE;
		result->partition = sc_kafka_message_source(c, m);
		snprintf(result->message, sizeof(result->message), "%s",
				 rd_kafka_message_errstr(m));
	}
	else if ((m->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
			  m->err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC ||
			  m->err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION) &&
			 result->status == SC_KAFKA_OK)
	{
		/* Often transient (a leader moving); the receiver looks. */
		result->status = SC_KAFKA_TOPIC_UNKNOWN;
		result->partition = sc_kafka_message_source(c, m);
		snprintf(result->message, sizeof(result->message), "%s",
				 rd_kafka_message_errstr(m));
	}
	else if (m->err == RD_KAFKA_RESP_ERR__FATAL)
	{
		result->status = SC_KAFKA_FATAL;
		snprintf(result->message, sizeof(result->message), "%s",
				 rd_kafka_message_errstr(m));
	}
	else if (result->status == SC_KAFKA_OK)
		snprintf(result->message, sizeof(result->message), "%s",
				 rd_kafka_message_errstr(m));
}

/* Serve logs and client errors queued on the main queue, into result. */
static void
sc_kafka_poll_events(ScKafkaConsumer *c, ScKafkaPollResult *result)
{
	rd_kafka_poll(c->rk, 0);
	if (c->events.fatal && result->status == SC_KAFKA_OK)
	{
		result->status = SC_KAFKA_FATAL;
		strlcpy(result->message, c->events.last_error, sizeof(result->message));
	}
	else if (c->events.topic_unknown && result->status == SC_KAFKA_OK)
	{
		result->status = SC_KAFKA_TOPIC_UNKNOWN;
		strlcpy(result->message, c->events.last_error, sizeof(result->message));
	}
	else if (result->message[0] == '\0' && c->events.nevents > 0)
	{
		for (int i = c->events.nevents - 1; i >= 0; i--)
			if (c->events.levels[i] <= SC_SYSLOG_WARNING)
			{
				strlcpy(result->message, c->events.text[i], sizeof(result->message));
				break;
			}
	}
	c->events.topic_unknown = false;
}

/*
 * Take up to max_messages messages without blocking.  Error events are
 * folded into *result: a lost offset range or a fatal client error stops
 * the receiver, anything else is transient (librdkafka retries by itself)
 * and left in result->message for the monitoring view.
 */
int
sc_kafka_consumer_poll(ScKafkaConsumer *c, ScKafkaMessage *messages,
					   int max_messages, ScKafkaPollResult *result)
{
	char		drain[64];
	ssize_t		n;
	int			got = 0;

	result->status = SC_KAFKA_OK;
	result->partition = -1;
	result->message[0] = '\0';

	/* Empty the wake-up pipe first: new events after this write again. */
	while ((n = read(c->pipefd[0], drain, sizeof(drain))) > 0)
		;

	if (c->batch_size < max_messages)
	{
		if (c->batch)
			pfree(c->batch);
		c->batch = MemoryContextAlloc(TopMemoryContext,
									  sizeof(rd_kafka_message_t *) * max_messages);
		c->batch_size = max_messages;
	}

	n = rd_kafka_consume_batch_queue(c->consumer_queue, 0, c->batch, max_messages);
	for (ssize_t i = 0; i < n; i++)
	{
		rd_kafka_message_t *m = c->batch[i];

		if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			sc_kafka_message_take(c, &messages[got++], m);
			c->drained_messages++;
			c->drained_bytes += m->len;
			continue;
		}
		if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
			sc_kafka_message_eof(c, &messages[got++], m);
		else
			sc_kafka_poll_error(c, result, m);
		rd_kafka_message_destroy(m);
	}

	if (n < max_messages)
	{
		if (c->drained_messages >= c->nudge_messages || c->drained_bytes >= c->nudge_bytes)
			sc_kafka_consumer_nudge(c);
		c->drained_messages = c->drained_bytes = 0;
	}
	sc_kafka_poll_events(c, result);
	return got;
}

void
sc_kafka_messages_release(ScKafkaMessage *messages, int n)
{
	for (int i = 0; i < n; i++)
	{
		if (messages[i].handle)
			rd_kafka_message_destroy((rd_kafka_message_t *) messages[i].handle);
		messages[i].handle = NULL;
	}
}

/*
 * The header at index of a message, in the order the producer gave them:
 * 1 with *name, *value (NULL for a header without a value) and *size; 0
 * past the last one (or when the message has none); -1 when librdkafka
 * cannot parse the message's headers.  Parsed on the first call only.
 */
int
sc_kafka_message_header(const ScKafkaMessage *message, int index,
						const char **name, const char **value, size_t *size)
{
	rd_kafka_headers_t *headers;
	rd_kafka_resp_err_t err;
	const void *v;

	if (message->handle == NULL)
		return 0;
	err = rd_kafka_message_headers((rd_kafka_message_t *) message->handle, &headers);
	if (err == RD_KAFKA_RESP_ERR__NOENT)
		return 0;
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
		return -1;
	if (rd_kafka_header_get_all(headers, index, name, &v, size) != RD_KAFKA_RESP_ERR_NO_ERROR)
		return 0;
	*value = v;
	if (v == NULL)
		*size = 0;
	return 1;
}

/*
 * Stop or restart fetching.  librdkafka resumes from the position of the
 * last message handed to us, which the receiver has committed.
 */
void
sc_kafka_consumer_set_paused(ScKafkaConsumer *c, bool paused)
{
	if (c->assignment == NULL)
		return;
	if (paused)
		rd_kafka_pause_partitions(c->rk, c->assignment);
	else
		rd_kafka_resume_partitions(c->rk, c->assignment);
}

/* Kafka's high watermark as last seen in a fetch response; -1 if unknown. */
int64
sc_kafka_consumer_high_watermark(ScKafkaConsumer *c, int32 source)
{
	int64_t		lo,
				hi;

	if (c->topics.n == 0 ||
		rd_kafka_get_watermark_offsets(c->rk, sc_kafka_consumer_topic(c, source),
									   sc_source_kafka_partition(source), &lo, &hi) != RD_KAFKA_RESP_ERR_NO_ERROR ||
		hi < 0)
		return -1;
	return hi;
}

/*
 * Kafka's high watermark now, asked of the partition's leader (a
 * ListOffsets request on the consumer's connections); -1 when it does not
 * answer within timeout_ms.  For a receiver that cannot fetch (it waits
 * for a lock): the cached value stops moving once its queue is full.
 */
int64
sc_kafka_consumer_query_high_watermark(ScKafkaConsumer *c, int32 source, int timeout_ms)
{
	int64_t		lo,
				hi;

	if (c->topics.n == 0 ||
		rd_kafka_query_watermark_offsets(c->rk, sc_kafka_consumer_topic(c, source),
										 sc_source_kafka_partition(source), &lo, &hi,
										 timeout_ms) != RD_KAFKA_RESP_ERR_NO_ERROR ||
		hi < 0)
		return -1;
	return hi;
}

/*
 * Did librdkafka say, since the last call, that the connections to every
 * broker of the cluster are down (RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)?
 * Served by sc_kafka_consumer_report() or a poll.  librdkafka says it once
 * per outage and nothing when a broker is back: the caller finds that out
 * by asking the cluster (sc_kafka_consumer_query_high_watermark).
 */
bool
sc_kafka_consumer_take_all_down(ScKafkaConsumer *c)
{
	bool		down = c->events.all_down;

	c->events.all_down = false;
	return down;
}

/*
 * How many partitions topic topic_no of the consumer's has now, from a
 * metadata request on the consumer's own connections; -1 when the broker
 * does not answer within timeout_ms or the topic is not there.
 */
static int
sc_kafka_consumer_count_partitions(ScKafkaConsumer *c, int topic_no, int timeout_ms)
{
	rd_kafka_topic_t *rkt;
	const struct rd_kafka_metadata *md = NULL;
	int			n = -1;

	rkt = rd_kafka_topic_new(c->rk, c->topics.names[topic_no], NULL);
	if (rkt == NULL)
		return -1;
	if (rd_kafka_metadata(c->rk, 0, rkt, &md, timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
			n = md->topics[0].partition_cnt;
		rd_kafka_metadata_destroy(md);
	}
	rd_kafka_topic_destroy(rkt);
	return n;
}

/*
 * How many partitions the consumer's topics have now, all together; -1
 * when one of them is not known (within timeout_ms).  each, when given,
 * gets the count of each topic by number, neach of them: 0 for a topic
 * taken out of the cube, -1 for one not known.  One metadata request for
 * all of them: the topics librdkafka knows locally are the consumer's, on
 * which it holds a handle each (and a topic of one is asked alone).
 */
int
sc_kafka_consumer_topic_partitions(ScKafkaConsumer *c, int timeout_ms, int *each, int neach)
{
	const struct rd_kafka_metadata *md = NULL;
	int			total = 0;
	int			live = 0;

	for (int t = 0; t < neach; t++)
		each[t] = -1;
	if (c->topics.n == 0)
		return -1;
	for (int t = 0; t < c->topics.n; t++)
		live += !sc_topic_removed(&c->topics, t);
	if (c->topics.n == 1)
	{
		int			n = live == 1 ? sc_kafka_consumer_count_partitions(c, 0, timeout_ms) : 0;

		if (neach > 0)
			each[0] = n;
		return n;
	}
	/* no topic held: librdkafka would ask for every topic of the cluster */
	if (live == 0)
	{
		for (int t = 0; t < Min(c->topics.n, neach); t++)
			each[t] = 0;
		return 0;
	}
	if (rd_kafka_metadata(c->rk, 0, NULL, &md, timeout_ms) != RD_KAFKA_RESP_ERR_NO_ERROR)
		return -1;
	for (int t = 0; t < c->topics.n; t++)
	{
		int			n = sc_topic_removed(&c->topics, t) ? 0 : -1;

		for (int i = 0; n < 0 && i < md->topic_cnt; i++)
			if (strcmp(md->topics[i].topic, c->topics.names[t]) == 0 &&
				md->topics[i].err == RD_KAFKA_RESP_ERR_NO_ERROR)
				n = md->topics[i].partition_cnt;
		if (t < neach)
			each[t] = n;
		if (n < 0)
			total = -1;
		else if (total >= 0)
			total += n;
	}
	rd_kafka_metadata_destroy(md);
	return total;
}

static void sc_kafka_consumer_flush_commits(ScKafkaConsumer *c);

void
sc_kafka_consumer_destroy(ScKafkaConsumer *c)
{
	if (c == NULL)
		return;
	if (c->rk)
	{
		rd_kafka_queue_io_event_enable(c->consumer_queue, -1, NULL, 0);
		rd_kafka_queue_io_event_enable(c->main_queue, -1, NULL, 0);
		rd_kafka_assign(c->rk, NULL);
		rd_kafka_queue_destroy(c->consumer_queue);
		rd_kafka_queue_destroy(c->main_queue);
		if (c->assignment)
			rd_kafka_topic_partition_list_destroy(c->assignment);
		sc_kafka_consumer_drop_topics(c);

		/*
		 * No consumer close: there is no group to leave and no offset to
		 * commit (positions live in PostgreSQL), and rd_kafka_consumer_close()
		 * can wait forever for a partition of a deleted topic.
		 */
		rd_kafka_destroy_flags(c->rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
	}
	if (c->committer)
	{
		sc_kafka_consumer_flush_commits(c);
		rd_kafka_queue_destroy(c->commit_queue);
		rd_kafka_destroy_flags(c->committer, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
	}
	else if (c->commit_conf)
		rd_kafka_conf_destroy(c->commit_conf);
	if (c->commit_latest)
		rd_kafka_topic_partition_list_destroy(c->commit_latest);
	close(c->pipefd[0]);
	close(c->pipefd[1]);
	if (c->batch)
		pfree(c->batch);
	pfree(c);
}

/*
 * The Kafka timestamps of the messages at offsets[] of parts[] (the first
 * message at or after each offset a consumer of the cluster reads), in
 * ms[], -1 where none came within a few seconds, -2 where the partition
 * ends there after all: a short-lived consumer fetches them.
 */
void
sc_kafka_timestamps_at(const ScKafkaConnInfo *conn, const ScTopicList *topics, int n,
					   const int32 *parts, const int64 *offsets, int64 *ms)
{
	ScKafkaConsumer *c;
	ScKafkaMessage messages[64];
	volatile int pending = n;
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   Min(sc_kafka_timeout_ms, 5000));

	for (int i = 0; i < n; i++)
		ms[i] = -1;
	if (n == 0)
		return;
	c = sc_kafka_consumer_create(conn, "streamcube-timestamps", 1024, 0);
	PG_TRY();
	{
		sc_kafka_consumer_assign(c, topics, n, parts, offsets);
		while (pending > 0 && GetCurrentTimestamp() < deadline)
		{
			ScKafkaPollResult res;
			int			got = sc_kafka_consumer_poll(c, messages, lengthof(messages), &res);

			for (int m = 0; m < got; m++)
				for (int i = 0; i < n; i++)
					if (parts[i] == messages[m].partition && ms[i] == -1 &&
						messages[m].offset >= offsets[i])
					{
						/* at the end (nothing to read after all): -2 */
						ms[i] = messages[m].eof ? -2 : Max(messages[m].timestamp, -2);
						pending--;
					}
			sc_kafka_messages_release(messages, got);
			if (got == 0)
			{
				(void) WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_SOCKET_READABLE | WL_TIMEOUT |
										 WL_EXIT_ON_PM_DEATH, sc_kafka_consumer_wait_fd(c), 100,
										 PG_WAIT_EXTENSION);
				ResetLatch(MyLatch);
				CHECK_FOR_INTERRUPTS();
			}
		}
	}
	PG_FINALLY();
	{
		sc_kafka_consumer_destroy(c);
	}
	PG_END_TRY();
}

/* ----------------------------------------------------------------
 * Commits to the progress group (option progress_group), for Kafka's tools
 * ----------------------------------------------------------------
 */

/* Commits for Kafka's tools are tried again from 1 s apart up to 10 s. */
#define SC_COMMIT_BACKOFF_MIN_MS 1000
#define SC_COMMIT_BACKOFF_MAX_MS 10000
/* How long a consumer that goes waits for its last commits. */
#define SC_COMMIT_FLUSH_MS 500

/*
 * The answer to a commit, inside rd_kafka_poll() of the committer.  After
 * a failure the next try, of the same positions or newer ones, waits (see
 * sc_kafka_consumer_serve_commits); a success lets the next go at once.
 */
static void
sc_kafka_commit_answered(rd_kafka_t *rk, rd_kafka_resp_err_t err,
						 rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
	ScKafkaConsumer *c = opaque;
	rd_kafka_resp_err_t first = err;
	int			nfailed = 0;
	int			n = offsets != NULL ? offsets->cnt : 0;
	bool		failed;

	c->commits_waiting--;
	if (err == RD_KAFKA_RESP_ERR__DESTROY)
		return;
	for (int i = 0; i < n; i++)
		if (offsets->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			if (first == RD_KAFKA_RESP_ERR_NO_ERROR)
				first = offsets->elems[i].err;
			nfailed++;
		}
	failed = first != RD_KAFKA_RESP_ERR_NO_ERROR;
	if (failed)
	{
		char		text[256];

		/* librdkafka logs no COMMITFAIL when the answer has a callback */
		snprintf(text, sizeof(text), "COMMITFAIL: offset commit failed for %d/%d partition(s): %s",
				 err != RD_KAFKA_RESP_ERR_NO_ERROR ? n : nfailed, n, rd_kafka_err2str(first));
		sc_kafka_push_event(&c->events, SC_SYSLOG_WARNING, text);
	}
	c->commit_failed = failed;
	if (!failed)
		c->commit_backoff_ms = SC_COMMIT_BACKOFF_MIN_MS;
}

/* Ask the committer to commit c->commit_latest; its answer comes later. */
static void
sc_kafka_commit_latest(ScKafkaConsumer *c)
{
	c->commit_unsent = false;
	c->commit_failed = false;
	c->commit_made_at = GetCurrentTimestamp();
	c->commits_waiting++;
	if (rd_kafka_commit_queue(c->committer, c->commit_latest, c->commit_queue,
							  sc_kafka_commit_answered, c) != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		/* refused at once (no answer will come): try again later */
		c->commits_waiting--;
		c->commit_failed = true;
	}
}

/*
 * Serve the committer's answers, then, if no commit is waiting, commit the
 * latest positions if they are newer than the last try, or if the last try
 * failed: after a failure, from 1 s after it, doubling to 10 s while tries
 * keep failing fast (a try that waits for a coordinator already takes
 * session.timeout.ms).
 *
 * One commit at a time.  librdkafka keeps a commit made while the group's
 * coordinator is unknown and sends it once the coordinator is found, but
 * a commit made just after that can be sent first: the group would be
 * left at the older positions.  And a receiver in a coordinator outage
 * has one commit waiting, not one for every batch (each failing with a
 * COMMITFAIL warning after session.timeout.ms).
 */
static void
sc_kafka_consumer_serve_commits(ScKafkaConsumer *c)
{
	if (c->committer == NULL)
		return;
	(void) rd_kafka_poll(c->committer, 0);
	if (c->commits_waiting > 0 || c->commit_latest == NULL)
		return;
	if (c->commit_failed)
	{
		if (!TimestampDifferenceExceeds(c->commit_made_at, GetCurrentTimestamp(), c->commit_backoff_ms))
			return;
		c->commit_backoff_ms = Min(c->commit_backoff_ms * 2, SC_COMMIT_BACKOFF_MAX_MS);
		sc_kafka_commit_latest(c);
	}
	else if (c->commit_unsent)
		sc_kafka_commit_latest(c);
}

/*
 * Before the committer goes (a pause, a stop point, a replica set retired,
 * a new consumer; not a server shutdown, which ends the receiver without
 * closing its consumer): the latest positions, if not asked for yet or
 * failed, are committed once more, and the answers waited for up to
 * SC_COMMIT_FLUSH_MS, so that Kafka's tools show where the receiver
 * stopped.  A coordinator that
 * does not answer by then is not waited for: the group then catches up
 * at the first batch after the consumer is opened again.
 */
static void
sc_kafka_consumer_flush_commits(ScKafkaConsumer *c)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), SC_COMMIT_FLUSH_MS);
	bool		sent = false;

	if (c->commit_latest == NULL)
		return;
	for (;;)
	{
		(void) rd_kafka_poll(c->committer, 0);
		if (c->commits_waiting == 0)
		{
			if (sent || !(c->commit_unsent || c->commit_failed))
				break;
			sc_kafka_commit_latest(c);
			sent = true;
			if (c->commits_waiting == 0)
				break;			/* refused at once */
		}
		if (GetCurrentTimestamp() >= deadline)
			break;
		(void) rd_kafka_poll(c->committer, 10);
	}
}

/*
 * Commit positions (the next offset to read, as Kafka counts) to the
 * consumer's group, asynchronously: for Kafka's tools only.  Never waits
 * and never fails: the request waits in librdkafka for the group's
 * coordinator (up to session.timeout.ms), and streamcube's positions stay
 * in PostgreSQL (they are never read back from Kafka).  While a commit is
 * waiting, newer positions only replace the ones to commit next; if the
 * latest fail, sc_kafka_consumer_serve_commits() commits them again until
 * they are in, so that the group catches up when the coordinator is back
 * even if no batch comes after.
 *
 * The commits go through a client of their own in the same group, made
 * from the consumer's configuration: librdkafka 2.0.2 starts fetching a
 * partition added to a consumer only once that consumer has no commit
 * waiting, so with the coordinator down a reassigned partition would not
 * be read at all.  Its answers and logs are served here and in
 * sc_kafka_consumer_report(), into the consumer's events (last_error).
 */
void
sc_kafka_consumer_commit_async(ScKafkaConsumer *c, int n,
							   const int32 *sources, const int64 *positions)
{
	rd_kafka_topic_partition_list_t *list;

	if (n == 0)
		return;
	if (c->committer == NULL)
	{
		char		errbuf[512];

		if (c->commit_conf == NULL)
			return;				/* could not be made before: no commits */
		c->committer = sc_kafka_new_handle(RD_KAFKA_CONSUMER, c->commit_conf, errbuf, sizeof(errbuf));
		c->commit_conf = NULL;	/* taken, or destroyed on failure */
		if (c->committer == NULL)
		{
			sc_kafka_push_event(&c->events, SC_SYSLOG_WARNING, errbuf);
			return;
		}
		c->commit_queue = rd_kafka_queue_get_main(c->committer);
		c->commit_backoff_ms = SC_COMMIT_BACKOFF_MIN_MS;
	}
	for (int i = 0; i < n; i++)
		(void) sc_kafka_consumer_topic(c, sources[i]);	/* errors before the list */
	list = rd_kafka_topic_partition_list_new(n);
	for (int i = 0; i < n; i++)
		if (positions[i] >= 0)
			rd_kafka_topic_partition_list_add(list, sc_kafka_consumer_topic(c, sources[i]),
											  sc_source_kafka_partition(sources[i]))->offset = positions[i];
	if (list->cnt == 0)
	{
		rd_kafka_topic_partition_list_destroy(list);
		return;
	}
	if (c->commit_latest != NULL)
		rd_kafka_topic_partition_list_destroy(c->commit_latest);
	c->commit_latest = list;
	c->commit_unsent = true;
	sc_kafka_consumer_serve_commits(c);
}

/*
 * Write librdkafka's queued log lines and errors to the server log; serve
 * the answers to commits for Kafka's tools.
 */
void
sc_kafka_consumer_report(ScKafkaConsumer *c)
{
	rd_kafka_poll(c->rk, 0);
	sc_kafka_consumer_serve_commits(c);
	sc_kafka_flush_events(&c->events, "kafka");
}
