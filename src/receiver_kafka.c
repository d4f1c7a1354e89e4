/*-------------------------------------------------------------------------
 *
 * receiver_kafka.c
 *		A receiver and Kafka: its consumer's life, whether Kafka still
 *		holds what the cube needs, whether Kafka answers at all.
 *
 * When the receiver opens a consumer (or its topics change) it asks Kafka
 * for the cube's topics: a position below the low watermark (retention
 * deleted it), above the high one (the topic was re-created), a topic
 * gone, another cluster behind the same bootstrap list: each pauses the
 * cube with a reason an operator can act on, and nothing is read.  While
 * it runs, it counts the partitions of each topic (for partitions added
 * and for streamcube.consumers' unassigned ones), probes Kafka when
 * fetches are quiet (state disconnected), and, paused, still looks at
 * Kafka's ends so that lag stays true.  The progress group Kafka's tools
 * show is named here.
 *
 * The control side it serves: receiver_control.c.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "receiver_internal.h"

#include "cube_catalog.h"
#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "positions.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/*
 * How many partitions the cube's topics have, asked through the consumer
 * (kafka_consumer.c), each topic's count kept for streamcube.consumers to
 * name the unassigned ones; -1 when Kafka does not say.
 */
int
sc_receiver_count_partitions(int timeout_ms)
{
	int			ntopics = Min(MyReceiver->cube->topics.n, SC_SOURCE_MAX_TOPICS);
	int		   *counts = palloc(sizeof(int) * Max(ntopics, 1));
	int			n = sc_kafka_consumer_topic_partitions(MyReceiver->consumer, timeout_ms, counts, ntopics);

	/* a look that failed (Kafka down) keeps what the last one saw */
	if (n >= 0)
	{
		memcpy(MyReceiver->topic_counts, counts, sizeof(int) * ntopics);
		MyReceiver->topic_partitions = n;
		MyReceiver->ntopic_counts = ntopics;
	}
	pfree(counts);
	return n;
}

/* The same, counted in Kafka's description of the cube's topics. */
static void
sc_receiver_count_described(List *partitions)
{
	int			ntopics = Min(MyReceiver->cube->topics.n, SC_SOURCE_MAX_TOPICS);
	ListCell   *lc;

	for (int t = 0; t < ntopics; t++)
		MyReceiver->topic_counts[t] = 0;
	foreach(lc, partitions)
	{
		int			t = sc_source_topic_no(((ScKafkaPartitionInfo *) lfirst(lc))->source);

		if (t < ntopics)
			MyReceiver->topic_counts[t]++;
	}
	MyReceiver->topic_partitions = list_length(partitions);
	MyReceiver->ntopic_counts = ntopics;
}

/* ----------------------------------------------------------------
 * Kafka
 * ----------------------------------------------------------------
 */

/*
 * Pause the cube in the catalog, for a reason an operator must act on, and
 * say so in the server log.  Only the cube's row is written (a cube gone
 * meanwhile has none): waiting for it is in lock order, as nothing else
 * of the cube is held.
 */
static void
sc_receiver_pause_for(const char *reason)
{
	sc_receiver_begin("pausing cube");
	sc_cube_row_pause_for(MyReceiver->cube_id, reason);
	sc_receiver_commit();
	MyReceiver->cube->paused = true;
	ereport(WARNING,
			(errcode(ERRCODE_DATA_EXCEPTION),
			 errmsg("cube %s paused: %s", MyReceiver->cube->qualified, reason)));
}

/*
 * A cube created before streamcube knew cluster ids (or by a broker that
 * did not tell) learns the id of the cluster its positions come from.
 * Another receiver of the cube may have recorded one meanwhile: the id
 * stored is returned, the one to compare with.  NULL if the cube is gone.
 */
static char *
sc_receiver_note_cluster_id(const char *cluster_id)
{
	char	   *stored;

	/* Only the row, as in sc_receiver_pause_for. */
	sc_receiver_begin("recording the Kafka cluster id");
	SPI_connect();
	stored = sc_cube_row_set_kafka_cluster_id(MyReceiver->cube_id, cluster_id);
	if (stored != NULL)
		stored = MemoryContextStrdup(MyReceiver->cube_cxt, stored);
	SPI_finish();
	sc_receiver_commit();
	if (stored != NULL)
		MyReceiver->cube->kafka_cluster_id = stored;
	return stored;
}

/*
 * Partition i is below what Kafka holds (low): when the operator asked for
 * "earliest" and nothing was read since, that means low now
 * (sc_positions_earliest_again), and the receiver goes on from there.
 */
static bool
sc_receiver_earliest_again(int i, int64 low)
{
	bool		moved;
	MemoryContext cxt = CurrentMemoryContext;

	sc_receiver_begin("moving a position to \"earliest\" again");
	SPI_connect();
	moved = sc_positions_earliest_again(MyReceiver->cube, MyReceiver->parts[i], MyReceiver->positions[i], low);
	SPI_finish();
	sc_receiver_commit();
	MemoryContextSwitchTo(cxt);
	if (moved)
	{
		ereport(LOG,
				(errmsg("streamcube receiver of cube %s starts partition %d at offset " INT64_FORMAT ", \"earliest\" now: retention deleted offsets " INT64_FORMAT " to " INT64_FORMAT " after streamcube_set_positions",
						MyReceiver->cube->qualified, MyReceiver->parts[i], low, MyReceiver->positions[i], low - 1)));
		MyReceiver->positions[i] = low;
	}
	return moved;
}

/*
 * What streamcube_set_positions() takes to read a partition from its
 * start again: every partition of a cube of one topic, that one of a cube
 * of several.
 */
static char *
sc_receiver_earliest_request(int32 source)
{
	if (MyReceiver->cube->topics_kind == SC_TOPICS_ONE)
		return "'\"earliest\"'";
	return psprintf("'{\"%s\": \"earliest\"}'", sc_partition_name(MyReceiver->cube, source));
}

/* Why the cube pauses when Kafka lists none of a topic's partitions. */
static char *
sc_receiver_topic_gone_reason(List *partitions)
{
	const char *cube = MyReceiver->cube->qualified;
	StringInfoData gone;
	StringInfoData request;

	if (MyReceiver->cube->topics_kind == SC_TOPICS_ONE)
		return psprintf("topic \"%s\" no longer exists on Kafka cluster \"%s\". "
						"Nothing was skipped. If it was deleted and created again, its offsets "
						"start over: check it, then call streamcube_set_positions('%s', '\"earliest\"') "
						"and streamcube_resume('%s')",
						MyReceiver->cube->topic, MyReceiver->cube->cluster, cube, cube);

	/* the topics of the receiver's partitions that Kafka did not describe */
	initStringInfo(&gone);
	initStringInfo(&request);
	for (int i = 0; i < MyReceiver->nparts; i++)
	{
		const char *topic = sc_kafka_source_topic(&MyReceiver->cube->topics, MyReceiver->parts[i]);
		bool		described = false;
		ListCell   *lc;

		foreach(lc, partitions)
			described |= sc_source_topic_no(((ScKafkaPartitionInfo *) lfirst(lc))->source) ==
				sc_source_topic_no(MyReceiver->parts[i]);
		if (described)
			continue;
		if (strstr(gone.data, psprintf("\"%s\"", topic)) == NULL)
			appendStringInfo(&gone, "%s\"%s\"", gone.len > 0 ? ", " : "", topic);
		appendStringInfo(&request, "%s\"%s\": \"earliest\"", request.len > 0 ? ", " : "",
						 sc_partition_name(MyReceiver->cube, MyReceiver->parts[i]));
	}
	return psprintf("topic %s of cube %s no longer exists on Kafka cluster \"%s\". Nothing was "
					"skipped. If it was deleted and created again, its offsets start over: check it, "
					"then call streamcube_set_positions('%s', '{%s}') and streamcube_resume('%s')",
					gone.len > 0 ? gone.data : "(one of its topics)", cube, MyReceiver->cube->cluster,
					cube, request.data, cube);
}

/*
 * Does Kafka still hold what the cube needs?  Compares every position with
 * the partition's watermarks, asked through the consumer via (not assigned
 * yet), or through a client of its own when via is NULL.  When it does
 * not, the cube is paused with a reason that names the partition, the
 * offsets and what to do, and false is returned.  Never skips anything.
 */
bool
sc_receiver_check_kafka(ScKafkaConsumer *via)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "streamcube position check",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	bool		missing;
	char	   *cluster_id = NULL;
	List	   *partitions = via != NULL
		? sc_kafka_consumer_describe(via, MyReceiver->conn, &MyReceiver->cube->topics,
									 sc_kafka_timeout_ms, &missing, &cluster_id)
		: sc_kafka_describe_topics(MyReceiver->conn, &MyReceiver->cube->topics, true,
								   sc_kafka_timeout_ms, &missing, &cluster_id);
	const char *cube = MyReceiver->cube->qualified;
	char	   *reason = NULL;
	ListCell   *lc;
	StringInfoData lost;
	StringInfoData earliest;
	int			nlost = 0;

	initStringInfo(&lost);
	initStringInfo(&earliest);
	MyReceiver->topic_gone = missing;

	/*
	 * Offsets mean something in one Kafka cluster only.  A bootstrap list
	 * changed to another cluster (streamcube_alter_cluster) must not resume
	 * the cube at offsets of the old one: whatever they point at there is
	 * not what the cube has not read yet.
	 */
	if (cluster_id != NULL && MyReceiver->cube->kafka_cluster_id == NULL)
	{
		sc_receiver_note_cluster_id(cluster_id);
		MemoryContextSwitchTo(cxt);		/* the commit left it elsewhere */
	}
	if (cluster_id != NULL && MyReceiver->cube->kafka_cluster_id != NULL &&
		strcmp(cluster_id, MyReceiver->cube->kafka_cluster_id) != 0)
		reason = psprintf("Kafka cluster \"%s\" now reaches another Kafka cluster (id %s) than the one "
						  "the cube's positions are offsets of (id %s). Nothing was read from it. If the "
						  "cluster was changed by mistake, change it back with streamcube_alter_cluster() "
						  "and call streamcube_resume('%s'); if the topic was moved there, set the "
						  "positions it has there with streamcube_set_positions('%s', ...), then resume",
						  MyReceiver->cube->cluster, cluster_id, MyReceiver->cube->kafka_cluster_id, cube, cube);
	if (reason == NULL && missing)
		reason = sc_receiver_topic_gone_reason(partitions);
	sc_receiver_count_described(partitions);
	for (int i = 0; i < MyReceiver->nparts && reason == NULL && !missing; i++)
	{
		ScKafkaPartitionInfo *p = NULL;

		foreach(lc, partitions)
			if (((ScKafkaPartitionInfo *) lfirst(lc))->source == MyReceiver->parts[i])
				p = lfirst(lc);
		if (p == NULL)
			reason = psprintf("partition %d of topic \"%s\" no longer exists: the topic was deleted "
							  "and created with fewer partitions. Nothing was skipped. Recreate the "
							  "cube, or the partition",
							  sc_source_kafka_partition(MyReceiver->parts[i]),
							  sc_kafka_source_topic(&MyReceiver->cube->topics, MyReceiver->parts[i]));
		else if (MyReceiver->positions[i] < p->low_watermark &&
				 sc_receiver_earliest_again(i, p->low_watermark))
			MyReceiver->high[i] = p->high_watermark;
		else if (MyReceiver->positions[i] < p->low_watermark)
		{
			/* every partition so far behind, named in one reason */
			appendStringInfo(&lost, "%s" INT64_FORMAT " to " INT64_FORMAT " of partition %s",
							 lost.len > 0 ? ", " : "", MyReceiver->positions[i], p->low_watermark - 1,
							 sc_partition_name(MyReceiver->cube, p->source));
			appendStringInfo(&earliest, "%s\"%s\": \"earliest\"", earliest.len > 0 ? ", " : "",
							 sc_partition_name(MyReceiver->cube, p->source));
			nlost++;
		}
		else if (MyReceiver->positions[i] > p->high_watermark)
			reason = psprintf("partition %d of topic \"%s\" ends at offset " INT64_FORMAT ", before the "
							  "cube's position " INT64_FORMAT ": the topic was probably deleted and created "
							  "again, and its offsets started over. Nothing was skipped. Check the topic, "
							  "then call streamcube_set_positions('%s', %s) and "
							  "streamcube_resume('%s')",
							  p->partition, p->topic, p->high_watermark,
							  MyReceiver->positions[i], cube, sc_receiver_earliest_request(p->source), cube);
		else
			MyReceiver->high[i] = p->high_watermark;
	}
	if (reason == NULL && nlost > 0)
		reason = psprintf("offsets %s%s %s no longer in Kafka: retention deleted them "
						  "before the cube read them (or read them again after a crash). Nothing was "
						  "skipped. To accept the loss, call streamcube_set_positions('%s', '{%s}') and "
						  "streamcube_resume('%s'), and raise the topic's retention.ms",
						  lost.data, MyReceiver->cube->topics_kind == SC_TOPICS_ONE
						  ? psprintf(" of topic \"%s\"", MyReceiver->cube->topic) : "",
						  nlost > 1 ? "are all" : "are", cube, earliest.data, cube);
	MemoryContextSwitchTo(old);
	if (reason != NULL)
		reason = pstrdup(reason);
	MemoryContextDelete(cxt);

	if (reason == NULL)
		return true;
	sc_receiver_pause_for(reason);
	return false;
}

/*
 * The consumer's group.id: the cube's option progress_group, to which the
 * receiver commits its positions for Kafka's tools, or a name of its own
 * that nothing commits to (librdkafka's consumer needs one).
 */
static void
sc_receiver_group(char *buf, size_t size)
{
	if (MyReceiver->cube->progress_group != NULL)
		strlcpy(buf, MyReceiver->cube->progress_group, size);
	else
		snprintf(buf, size, "streamcube-%u-%d-%s", MyDatabaseId, MyReceiver->cube_id,
				 MyReceiver->replica_set);
}

/*
 * Option progress_group changed: close the consumer, so that the main loop
 * opens one of the new group at the committed positions.
 */
void
sc_receiver_follow_group(void)
{
	char		group[sizeof(MyReceiver->group)];

	if (MyReceiver->consumer == NULL)
		return;
	sc_receiver_group(group, sizeof(group));
	if (strcmp(group, MyReceiver->group) != 0)
		sc_receiver_close_consumer();
}

/*
 * Open a Kafka consumer at the committed positions, read again from the
 * catalog; false (and the cube paused) when Kafka no longer holds them.
 */
bool
sc_receiver_open_consumer(void)
{
	ScKafkaConsumer *consumer;

	sc_receiver_apply_assignment(false);
	/* Positions may have been set back below the sealed windows' marks. */
	sc_ingest_forget_windows(MyReceiver->ing);
	sc_receiver_group(MyReceiver->group, sizeof(MyReceiver->group));
	/* The check goes through the consumer: its connections are then up. */
	consumer = sc_kafka_consumer_create(MyReceiver->conn, MyReceiver->group, sc_fetch_queue_kbytes,
										MyReceiver->fetch_idle ? 0 : sc_batch_max_ms);
	if (!sc_receiver_check_kafka(consumer))
	{
		sc_kafka_consumer_destroy(consumer);	/* never assigned */
		return false;
	}
	{
		int			wait_ms,
					min_bytes;
		bool		derived;

		sc_kafka_consumer_fetch_settings(consumer, &wait_ms, &min_bytes, &derived);
		ereport(LOG,
				(errmsg("streamcube receiver of cube %s fetches with fetch.wait.max.ms %d and fetch.min.bytes %d%s, and holds a batch open %d ms",
						MyReceiver->cube->qualified, wait_ms, min_bytes,
						derived ? " (from streamcube.batch_max_ms)" :
						MyReceiver->fetch_idle ? " (librdkafka's own while the topic is idle)" : "",
						sc_kafka_consumer_batch_hold_ms(consumer, sc_batch_max_ms))));
		MyReceiver->fetch_derived = derived;
		MyReceiver->last_message_at = MyReceiver->pace_since = GetCurrentTimestamp();
		MyReceiver->pace_batches = 0;
	}
	MyReceiver->consumer = consumer;
	sc_kafka_consumer_assign(MyReceiver->consumer, &MyReceiver->cube->topics, MyReceiver->nparts,
							 MyReceiver->parts, MyReceiver->positions);
	MyReceiver->metadata_at = GetCurrentTimestamp();
	MyReceiver->assignment_changed_at = MyReceiver->metadata_at;
	return true;
}

/*
 * Is Kafka answering?  Fetches that bring messages (or a partition's end)
 * say it is.  When none came for SC_PROBE_MS, and at once when librdkafka
 * says every broker is down, the receiver asks the cluster for its topic's
 * metadata (at most one request a second per receiver, only while nothing
 * flows; librdkafka bounds its wait by the timeout, where a ListOffsets
 * request to a leader that went away waits out socket.timeout.ms, a
 * minute).  No answer within a second: the receiver is
 * disconnected from then until an answer or a message comes;
 * streamcube.consumers says so, and its lag_seconds counts at least from
 * the last answer (docs/operations.md, "When Kafka cannot be reached").
 */
#define SC_PROBE_MS 2000

/* Kafka answered at now. */
void
sc_receiver_reached_kafka(TimestampTz now)
{
	MyReceiver->contact_at = now;
	if (MyReceiver->disconnected_since != 0)
	{
		ereport(LOG,
				(errmsg("streamcube receiver of cube %s reaches Kafka again, disconnected since %s",
						MyReceiver->cube->qualified, timestamptz_to_str(MyReceiver->disconnected_since))));
		MyReceiver->disconnected_since = 0;
	}
}

/*
 * An error the receiver got over moves from last_error to previous_error
 * once it has gone SC_ERROR_SETTLE_MS without a new one and a batch or an
 * answer from Kafka came after it: last_error says what is wrong now.
 */
#define SC_ERROR_SETTLE_MS 10000

void
sc_receiver_watch_health(void)
{
	ScReceiverSlot *slot = MyReceiver->slot;
	TimestampTz now = GetCurrentTimestamp();
	bool		all_down = sc_kafka_consumer_take_all_down(MyReceiver->consumer);

	if (all_down || TimestampDifferenceExceeds(MyReceiver->contact_at, now, SC_PROBE_MS))
	{
		int			n = sc_receiver_count_partitions(Min(sc_kafka_timeout_ms, 1000));

		now = GetCurrentTimestamp();
		if (n >= 0)
		{
			sc_receiver_reached_kafka(now);
		}
		else if (MyReceiver->disconnected_since == 0)
		{
			MyReceiver->disconnected_since = now;
			ereport(LOG,
					(errmsg("streamcube receiver of cube %s cannot reach Kafka: no answer since %s",
							MyReceiver->cube->qualified, timestamptz_to_str(MyReceiver->contact_at))));
		}
	}
	if (MyReceiver->disconnected_since != 0)
		return;
	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	if (slot->last_error[0] != '\0' &&
		Max(MyReceiver->last_batch_at, MyReceiver->contact_at) > slot->last_error_at &&
		TimestampDifferenceExceeds(slot->last_error_at, now, SC_ERROR_SETTLE_MS))
		sc_slot_retire_error(slot);
	LWLockRelease(sc_shared->lock);
}

/*
 * A paused receiver has no consumer.  Every SC_PAUSED_PROBE_MS it asks
 * Kafka for the ends of its partitions through a short-lived client, so
 * that lag shows what waits while the cube is paused; when Kafka does not
 * answer, the ends are unknown (lag NULL), not the old ones.
 */
#define SC_PAUSED_PROBE_MS 10000

static void
sc_receiver_paused_probe_cb(void *arg)
{
	List	   *kafka = sc_kafka_describe_topics(MyReceiver->conn, &MyReceiver->cube->topics, true,
												 Min(sc_kafka_timeout_ms, 2000), NULL, NULL);
	ListCell   *lc;

	foreach(lc, kafka)
	{
		ScKafkaPartitionInfo *p = lfirst(lc);
		int			i = sc_receiver_part_index(p->source);

		if (i >= 0)
			MyReceiver->high[i] = p->high_watermark;
	}
}

void
sc_receiver_paused_probe(void)
{
	ErrorData  *edata;

	if (!TimestampDifferenceExceeds(MyReceiver->paused_probe_at, GetCurrentTimestamp(), SC_PAUSED_PROBE_MS))
		return;
	sc_receiver_begin("asking Kafka where the partitions of a paused cube end");
	edata = sc_try(sc_receiver_paused_probe_cb, NULL);
	sc_receiver_commit();
	MyReceiver->paused_probe_at = GetCurrentTimestamp();
	if (edata != NULL)
	{
		for (int i = 0; i < MyReceiver->nparts; i++)
			MyReceiver->high[i] = -1;
		FreeErrorData(edata);
	}
	else
		MyReceiver->contact_at = MyReceiver->paused_probe_at;
	sc_receiver_publish_stats();
}

