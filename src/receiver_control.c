/*-------------------------------------------------------------------------
 *
 * receiver_control.c
 *		The control side of a receiver: its shared-memory slot, the
 *		catalog rows it follows, its Kafka consumer's life and Kafka's health.
 *
 * The batch side (receiver.c) asks this file, between batches, whether
 * anything changed and what to read: a new config_version reloads the
 * cube and its assignment (partitions, positions, epochs, stop points); a
 * partition gained or lost changes the consumer's assignment; a position
 * moved under the consumer opens a new one.  Errors the receiver cannot
 * retry past pause the cube in the catalog with a reason.
 *
 * What a receiver is and how it commits: receiver.c; its consumer and
 * what Kafka says: receiver_kafka.c.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "receiver_internal.h"

#include "cube_catalog.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "ingest.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "commands/extension.h"
#include "positions.h"
#include "reassign.h"
#include "storage/lmgr.h"
#include "tcop/tcopprot.h"
#include "utils/inval.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

static ScReceiver receiver_data;
ScReceiver *MyReceiver = &receiver_data;

/*
 * Two changes of a consumer's partitions closer than this make the receiver
 * open a new consumer rather than ask librdkafka for the second: a removed
 * partition's stop may still be under way in librdkafka, and removing or
 * adding it again before it completes trips an assertion in 2.0.2.
 */
#define SC_ASSIGNMENT_SETTLE_MS 250

static void sc_receiver_cube_gone(void);
static void sc_receiver_topics_for(const ScPositions *pos);

/* ----------------------------------------------------------------
 * Shared-memory slot
 * ----------------------------------------------------------------
 */
void
sc_receiver_set_state(ScReceiverState state)
{
	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	sc_slot_transition(MyReceiver->slot, state);
	LWLockRelease(sc_shared->lock);
}

/*
 * Is this receiver wanted for something its batch should not delay: a
 * pause, a stop (its replica set lost the cube), a change of the cube (a
 * reassignment, an operator's)?  The launcher sets these in the slot; a
 * batch asks now and then (sc_ingest_create) and ends early.  Read without
 * the lock: each is one aligned word, and a late answer only waits for the
 * next question.
 */
bool
sc_receiver_wanted_elsewhere(void)
{
	volatile ScReceiverSlot *slot = MyReceiver->slot;

	return slot->pause_wanted || slot->stop_wanted ||
		(MyReceiver->cube != NULL &&
		 (int32) (slot->config_version - (uint32) MyReceiver->cube->config_version) > 0);
}

void
sc_receiver_detach(int code, Datum arg)
{
	ScReceiverSlot *slot = MyReceiver->slot;

	if (slot == NULL)
		return;
	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	if (slot->pid == MyProcPid)
	{
		slot->pid = 0;
		if (code != 0 && slot->state != SC_RECEIVER_FAILED)
			sc_slot_set_error(slot, "receiver was terminated (pg_terminate_backend, shutdown or a FATAL error; see the server log)");
		if (slot->state != SC_RECEIVER_FAILED)
			sc_slot_transition(slot, code == 0 ? SC_RECEIVER_STOPPED : SC_RECEIVER_FAILED);
	}
	LWLockRelease(sc_shared->lock);
}


/* Publish positions, watermarks (from the consumer's cache) and throughput. */
void
sc_receiver_publish(void)
{
	if (MyReceiver->consumer)
		for (int i = 0; i < MyReceiver->nparts; i++)
		{
			int64		hw = sc_kafka_consumer_high_watermark(MyReceiver->consumer, MyReceiver->parts[i]);

			/*
			 * At the end of a partition, its end is where a read_committed
			 * consumer stops (the last stable offset), as streamcube_wait()
			 * sees it; before that, the high watermark of the last fetch.
			 */
			if (MyReceiver->eof[i] >= 0 && MyReceiver->eof[i] == MyReceiver->positions[i])
				MyReceiver->high[i] = MyReceiver->eof[i];
			else if (hw >= 0)
				MyReceiver->high[i] = hw;
		}
	sc_receiver_publish_stats();
}

/* Publish what the receiver knows now, as it is. */
void
sc_receiver_publish_stats(void)
{
	ScReceiverSlot *slot = MyReceiver->slot;
	ScPartitionStat *parts = sc_slot_parts(slot);
	int			n = MyReceiver->nparts;	/* <= slot_partitions: see take_positions */
	TimestampTz now = GetCurrentTimestamp();

	/*
	 * Nothing left to read, as far as Kafka's last answer says: every
	 * message still to come is newer than now.  Lag in time counts from
	 * here by the server's clock when a producer's does not hold
	 * (consumers.c).  Not while Kafka does not answer: its ends are old.
	 */
	if (MyReceiver->disconnected_since == 0)
		for (int i = 0; i < n; i++)
			if (MyReceiver->high[i] >= 0 && MyReceiver->positions[i] >= MyReceiver->high[i])
				MyReceiver->caught_up_at[i] = now;

	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	slot->npartitions = n;
	for (int i = 0; i < n; i++)
	{
		parts[i].partition = MyReceiver->parts[i];
		parts[i].position = MyReceiver->positions[i];
		parts[i].high_watermark = MyReceiver->high[i];
		parts[i].oldest_ts = MyReceiver->next_ts[i] >= 0 ? MyReceiver->next_ts[i] : MyReceiver->last_ts[i];
		parts[i].caught_up_at = MyReceiver->caught_up_at[i];
	}
	slot->contact_at = MyReceiver->contact_at;
	slot->disconnected_since = MyReceiver->disconnected_since;
	slot->rows_total = MyReceiver->rows_total;
	slot->rows_per_sec = MyReceiver->rows_per_sec;
	slot->last_batch_at = MyReceiver->last_batch_at;
	slot->topic_partitions = MyReceiver->topic_partitions;
	slot->ntopics = MyReceiver->ntopic_counts <= sc_shared->slot_partitions ? MyReceiver->ntopic_counts : 0;
	memcpy(sc_slot_topic_counts(slot), MyReceiver->topic_counts, sizeof(int32) * slot->ntopics);
	slot->tombstones_skipped = MyReceiver->tombstones_skipped;
	slot->rows_direct = MyReceiver->rows_direct;
	slot->rows_copy = MyReceiver->rows_copy;
	slot->batches = MyReceiver->batches;
	slot->epoch = MyReceiver->assignment_epoch;
	LWLockRelease(sc_shared->lock);
}

void
sc_receiver_warn(const char *message)
{
	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	sc_slot_set_error(MyReceiver->slot, message);
	LWLockRelease(sc_shared->lock);
}

/* ----------------------------------------------------------------
 * Catalog
 * ----------------------------------------------------------------
 */
void
sc_receiver_begin(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

/*
 * Commit, and hand the table statistics of what the transaction did to the
 * cumulative statistics (at most once a second; a backend does so when it
 * goes idle, a background worker only when asked): pg_stat_user_tables
 * counts the rows receivers insert, and autovacuum, which reads those
 * counts, analyzes active partitions.
 */
void
sc_receiver_commit(void)
{
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	pgstat_report_stat(false);
}

/* The cube's table changed: columns, or the set of its partitions. */
void
sc_receiver_relcache_cb(Datum arg, Oid relid)
{
	if (MyReceiver->cube == NULL || relid == InvalidOid || relid == MyReceiver->cube->relid)
		MyReceiver->table_changed = true;
	if (MyReceiver->ing != NULL)
		sc_ingest_relcache_event(MyReceiver->ing, relid);
}

/*
 * (Re)load the cube in the current transaction, into a memory context of
 * its own that replaces the previous one.  Returns false when the cube is
 * gone.
 */
static bool
sc_receiver_load_cube(void)
{
	MemoryContext cxt = AllocSetContextCreate(TopMemoryContext, "streamcube cube",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	ScCube	   *cube = sc_cube_load(MyReceiver->cube_id, true);

	if (cube == NULL)
	{
		MemoryContextSwitchTo(old);
		MemoryContextDelete(cxt);
		return false;
	}
	if (MyReceiver->conn == NULL)
	{
		MyReceiver->conn_cxt = AllocSetContextCreate(TopMemoryContext, "streamcube cluster",
												  ALLOCSET_SMALL_SIZES);
		MemoryContextSwitchTo(MyReceiver->conn_cxt);
		MyReceiver->conn = sc_cluster_conninfo(cube->cluster);
	}
	MemoryContextSwitchTo(old);

	/*
	 * What changed since the last load, for the reason of a pause: kept
	 * with the cube, past this transaction.
	 */
	cube->broken = sc_cube_check_table(cube, MyReceiver->cube);
	if (cube->broken != NULL)
		cube->broken = MemoryContextStrdup(cxt, cube->broken);

	if (MyReceiver->ing == NULL)
		MyReceiver->ing = sc_ingest_create(cube, sc_receiver_wanted_elsewhere);
	else
		sc_ingest_set_cube(MyReceiver->ing, cube);
	if (MyReceiver->cube_cxt != NULL)
		MemoryContextDelete(MyReceiver->cube_cxt);
	MyReceiver->cube_cxt = cxt;
	MyReceiver->cube = cube;
	MyReceiver->table_changed = false;
	return true;
}

/*
 * Every message asks for its partition's index: a table per topic indexed
 * by Kafka partition, not a search.
 */
static void
sc_receiver_make_part_slots(const int32 *sources, int n)
{
	for (int t = 0; t < MyReceiver->part_slot_topics; t++)
		pfree(MyReceiver->part_slot[t]);
	if (MyReceiver->part_slot)
	{
		pfree(MyReceiver->part_slot);
		pfree(MyReceiver->part_slot_len);
	}
	MyReceiver->part_slot = NULL;
	MyReceiver->part_slot_len = NULL;
	MyReceiver->part_slot_topics = 0;
	for (int i = 0; i < n; i++)
		MyReceiver->part_slot_topics = Max(MyReceiver->part_slot_topics,
										   sc_source_topic_no(sources[i]) + 1);
	MyReceiver->part_slot = MemoryContextAllocZero(TopMemoryContext,
												   sizeof(int *) * Max(MyReceiver->part_slot_topics, 1));
	MyReceiver->part_slot_len = MemoryContextAllocZero(TopMemoryContext,
													   sizeof(int32) * Max(MyReceiver->part_slot_topics, 1));
	for (int i = 0; i < n; i++)
	{
		int			t = sc_source_topic_no(sources[i]);

		MyReceiver->part_slot_len[t] = Max(MyReceiver->part_slot_len[t],
										   sc_source_kafka_partition(sources[i]) + 1);
	}
	for (int t = 0; t < MyReceiver->part_slot_topics; t++)
	{
		MyReceiver->part_slot[t] = MemoryContextAlloc(TopMemoryContext,
													  sizeof(int) * Max(MyReceiver->part_slot_len[t], 1));
		memset(MyReceiver->part_slot[t], -1, sizeof(int) * Max(MyReceiver->part_slot_len[t], 1));
	}
	for (int i = 0; i < n; i++)
		MyReceiver->part_slot[sc_source_topic_no(sources[i])][sc_source_kafka_partition(sources[i])] = i;
}

/*
 * Take a set of partitions, positions and epochs as the receiver's own,
 * replacing the previous one.
 */
static void
sc_receiver_take_positions(ScPositions *pos)
{
	int64	   *high;
	int64	   *eof;
	int64	   *next_ts;
	int64	   *last_ts;
	TimestampTz *caught_up_at;

	/* What the slot cannot show, the receiver does not consume. */
	if (pos->n > sc_shared->slot_partitions)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("replica set \"%s\" of cube %s has %d partitions, more than streamcube.max_receiver_partitions (%d)",
						MyReceiver->replica_set, MyReceiver->cube->qualified, pos->n, sc_shared->slot_partitions),
				 errhint("Raise streamcube.max_receiver_partitions and restart the server, or spread the partitions over more replica sets with streamcube_reassign().")));
	high = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * Max(pos->n, 1));
	eof = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * Max(pos->n, 1));
	next_ts = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * Max(pos->n, 1));
	last_ts = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * Max(pos->n, 1));
	caught_up_at = MemoryContextAlloc(TopMemoryContext, sizeof(TimestampTz) * Max(pos->n, 1));

	/* Kafka's watermarks stay known for partitions kept at their position. */
	for (int i = 0; i < pos->n; i++)
	{
		int			p = sc_receiver_part_index(pos->partitions[i]);
		bool		kept = p >= 0 && MyReceiver->positions[p] == pos->positions[i];

		high[i] = kept ? MyReceiver->high[p] : -1;
		eof[i] = kept && MyReceiver->consumer != NULL ? MyReceiver->eof[p] : -1;
		next_ts[i] = kept && MyReceiver->consumer != NULL ? MyReceiver->next_ts[p] : -1;
		last_ts[i] = kept ? MyReceiver->last_ts[p] : -1;
		caught_up_at[i] = kept ? MyReceiver->caught_up_at[p] : 0;
		if (pos->stops[i] >= 0)
			eof[i] = Min(eof[i], pos->stops[i]);
	}
	if (MyReceiver->parts)
	{
		pfree(MyReceiver->parts);
		pfree(MyReceiver->positions);
		pfree(MyReceiver->epochs);
		pfree(MyReceiver->high);
		pfree(MyReceiver->eof);
		pfree(MyReceiver->stops);
		pfree(MyReceiver->next_ts);
		pfree(MyReceiver->last_ts);
		pfree(MyReceiver->caught_up_at);
	}
	MyReceiver->nparts = pos->n;
	MyReceiver->parts = pos->partitions;

	sc_receiver_make_part_slots(pos->partitions, pos->n);
	MyReceiver->positions = pos->positions;
	MyReceiver->epochs = pos->epochs;
	MyReceiver->assignment_epoch = pos->assignment_epoch;
	MyReceiver->known_partitions = pos->known;
	MyReceiver->high = high;
	MyReceiver->eof = eof;
	MyReceiver->stops = pos->stops;
	MyReceiver->stop_told = false;
	MyReceiver->next_ts = next_ts;
	MyReceiver->last_ts = last_ts;
	MyReceiver->caught_up_at = caught_up_at;
	pfree(pos->handed_at);
	pfree(pos);
}

/* What an assignment changes for this receiver. */
typedef struct ScAssignmentDiff
{
	int32	   *gained;			/* partitions to add to the consumer */
	int64	   *gained_offsets;
	int			ngained;
	int32	   *lost;			/* partitions to remove from it */
	int64	   *lost_offsets;
	int			nlost;
	bool		rekeyed;		/* a partition kept, at another epoch */
	int32		moved;			/* a partition kept at its epoch whose position
								 * someone else moved, or -1 */
	int64		gained_epoch;	/* the newest epoch of a gained partition */
	TimestampTz handed;			/* when that epoch's partitions were handed over */
} ScAssignmentDiff;

/* Compare the assignment in the catalog with what the receiver consumes. */
static void
sc_assignment_diff(const ScPositions *pos, ScAssignmentDiff *d)
{
	memset(d, 0, sizeof(*d));
	d->moved = -1;
	d->gained = palloc(sizeof(int32) * Max(pos->n, 1));
	d->gained_offsets = palloc(sizeof(int64) * Max(pos->n, 1));
	d->lost = palloc(sizeof(int32) * Max(MyReceiver->nparts, 1));
	d->lost_offsets = palloc(sizeof(int64) * Max(MyReceiver->nparts, 1));
	for (int i = 0; i < pos->n; i++)
	{
		int			p = sc_receiver_part_index(pos->partitions[i]);

		if (p >= 0 && MyReceiver->epochs[p] == pos->epochs[i])
		{
			if (MyReceiver->positions[p] != pos->positions[i] && d->moved < 0)
				d->moved = pos->partitions[i];
			continue;
		}
		d->rekeyed |= p >= 0;
		d->gained_offsets[d->ngained] = pos->positions[i];
		d->gained[d->ngained++] = pos->partitions[i];
		if (pos->epochs[i] > d->gained_epoch)
		{
			d->gained_epoch = pos->epochs[i];
			d->handed = pos->handed_at[i];
		}
	}
	for (int p = 0; p < MyReceiver->nparts; p++)
	{
		bool		kept = false;

		for (int i = 0; i < pos->n && !kept; i++)
			kept = pos->partitions[i] == MyReceiver->parts[p] && pos->epochs[i] == MyReceiver->epochs[p];
		if (kept)
			continue;
		d->lost_offsets[d->nlost] = MyReceiver->positions[p];
		d->lost[d->nlost++] = MyReceiver->parts[p];
	}
}

/*
 * Journal the change in streamcube.reassign_log: "start" with what the
 * receiver starts from, "retire" when the replica set is left without
 * partitions.
 */
static void
sc_assignment_journal(const ScPositions *pos, const ScAssignmentDiff *d, bool final,
					  TimestampTz now)
{
	List	   *gl = NIL;
	List	   *ll = NIL;

	for (int i = 0; i < d->ngained; i++)
		gl = lappend_int(gl, d->gained[i]);
	for (int i = 0; i < d->nlost; i++)
		ll = lappend_int(ll, d->lost[i]);
	if (gl != NIL && d->gained_epoch > 0 && !final)
		sc_reassign_journal_receiver(MyReceiver->cube_id, d->gained_epoch, "start", MyReceiver->replica_set,
									 gl, d->gained_offsets, d->handed != 0 ? d->handed : now,
									 d->handed != 0 && d->handed <= now ? (double) (now - d->handed) / 1000.0 : -1);
	if (ll != NIL && pos->n == 0)
		sc_reassign_journal_receiver(MyReceiver->cube_id, pos->assignment_epoch, "retire",
									 MyReceiver->replica_set, ll, d->lost_offsets, now, -1);
}

/*
 * A message at or past its partition's stop offset is not read: it shows
 * that nothing below the stop is left, as the end of the partition does.
 * Returns whether m is such a message.
 */
bool
sc_receiver_past_stop(int p, const ScKafkaMessage *m)
{
	if (MyReceiver->stops[p] < 0 || m->offset < MyReceiver->stops[p])
		return false;
	MyReceiver->eof[p] = Max(MyReceiver->eof[p], MyReceiver->stops[p]);
	return true;
}

/* Messages kept for the next batch: only of partitions still ours, below their stops. */
static void
sc_receiver_drop_carried(const ScAssignmentDiff *d)
{
	int			kept = 0;

	for (int i = 0; i < MyReceiver->carried; i++)
	{
		ScKafkaMessage *m = &MyReceiver->messages[i];
		int			p = sc_receiver_part_index(m->partition);
		bool		drop = p < 0 || sc_receiver_past_stop(p, m);

		for (int j = 0; j < d->nlost && !drop; j++)
			drop = d->lost[j] == m->partition;
		if (drop)
			sc_kafka_messages_release(m, 1);
		else
			MyReceiver->messages[kept++] = *m;
	}
	MyReceiver->carried = kept;
}

/*
 * librdkafka: lost partitions are removed and gained ones added, at exactly
 * their positions; the others fetch on undisturbed.  A partition given
 * back at another epoch, two changes in quick succession (the stop of a
 * removed partition may still be under way in librdkafka), or a change
 * librdkafka refuses: a new consumer instead, opened by the main loop at
 * the committed positions.
 */
static void
sc_receiver_change_consumer(const ScAssignmentDiff *d, TimestampTz now)
{
	char		errbuf[256] = "";
	bool		ok = !d->rekeyed &&
		TimestampDifferenceExceeds(MyReceiver->assignment_changed_at, now, SC_ASSIGNMENT_SETTLE_MS);

	if (ok)
		ok = sc_kafka_consumer_change(MyReceiver->consumer, &MyReceiver->cube->topics, false,
									  d->nlost, d->lost, NULL, errbuf, sizeof(errbuf)) &&
			sc_kafka_consumer_change(MyReceiver->consumer, &MyReceiver->cube->topics, true,
									 d->ngained, d->gained, d->gained_offsets, errbuf, sizeof(errbuf));
	if (ok)
	{
		for (int p = 0; p < MyReceiver->nparts; p++)
			for (int i = 0; i < d->ngained; i++)
				if (MyReceiver->parts[p] == d->gained[i])
					MyReceiver->eof[p] = -1;
	}
	else
	{
		if (errbuf[0] != '\0')
			ereport(LOG,
					(errmsg("streamcube receiver of cube %s (%s) opens a new Kafka consumer: %s",
							MyReceiver->cube->qualified, MyReceiver->replica_set, errbuf)));
		sc_receiver_close_consumer();
	}
	MyReceiver->assignment_changed_at = now;
}

/*
 * Read the replica set's partitions, positions and epochs again, in a
 * transaction of its own, and follow them: at start, whenever a consumer
 * is opened (after a pause an operator may have set positions), when the
 * cube's catalog changed, and when a batch found a partition no longer
 * ours.  Partitions gained are added to the Kafka consumer at exactly the
 * offsets they were handed over at; partitions lost are dropped, with
 * whatever was fetched of them and not committed.  A partition handed over
 * by a reassignment is journalled (step start, with how long it went
 * unconsumed), and so is the receiver's retirement when it lost its last
 * partition.  With final, only the journal: the receiver is stopping.
 */
void
sc_receiver_apply_assignment(bool final)
{
	MemoryContext cxt = AllocSetContextCreate(TopMemoryContext, "streamcube assignment",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old;
	ScPositions *pos;
	ScAssignmentDiff d;
	TimestampTz now;

	sc_receiver_begin("reading assignment");
	pos = sc_positions_load(MyReceiver->cube_id, MyReceiver->replica_set, TopMemoryContext);
	sc_receiver_topics_for(pos);
	now = GetCurrentTimestamp();
	old = MemoryContextSwitchTo(cxt);
	sc_assignment_diff(pos, &d);
	MemoryContextSwitchTo(old);
	if (d.ngained > 0 || d.nlost > 0)
		sc_assignment_journal(pos, &d, final, now);
	sc_receiver_commit();

	if (d.nlost > 0 || (d.ngained > 0 && MyReceiver->parts != NULL))
		ereport(LOG,
				(errmsg("streamcube receiver of cube %s (%s) now consumes %d partitions: %d added, %d released (assignment epoch " INT64_FORMAT ")",
						MyReceiver->cube->qualified, MyReceiver->replica_set, pos->n,
						d.ngained, d.nlost, pos->assignment_epoch)));
	sc_receiver_take_positions(pos);
	sc_receiver_drop_carried(&d);

	/*
	 * A position moved under the consumer (streamcube_set_positions while
	 * the receiver had not yet seen the pause it needs): what the consumer
	 * fetched, and the ends it saw, are of the old position.  Taken as they
	 * are, a partition set back would see its old end "ahead" and jump
	 * there, skipping what lies between.  A new consumer opens at the
	 * positions, as after a pause.
	 */
	if (MyReceiver->consumer != NULL && !final && d.moved >= 0)
	{
		ereport(LOG,
				(errmsg("streamcube receiver of cube %s (%s) opens a new Kafka consumer: the position of partition %d was set while it was consuming",
						MyReceiver->cube->qualified, MyReceiver->replica_set, d.moved)));
		sc_receiver_close_consumer();
	}
	else if (MyReceiver->consumer != NULL && !final && (d.nlost > 0 || d.ngained > 0))
		sc_receiver_change_consumer(&d, now);
	MemoryContextDelete(cxt);
	sc_receiver_publish();
}

/* Load the cube and its assignment; false when the cube is gone. */
bool
sc_receiver_load(void)
{
	bool		found;

	sc_receiver_begin("loading cube");
	found = sc_receiver_load_cube();
	sc_receiver_commit();
	if (found)
		sc_receiver_apply_assignment(false);
	return found;
}

static bool
sc_conninfo_equal(const ScKafkaConnInfo *a, const ScKafkaConnInfo *b)
{
	ListCell   *la,
			   *lb;

	if (strcmp(a->bootstrap_servers, b->bootstrap_servers) != 0 ||
		list_length(a->properties) != list_length(b->properties))
		return false;
	forboth(la, a->properties, lb, b->properties)
	{
		ScKafkaProperty *pa = lfirst(la);
		ScKafkaProperty *pb = lfirst(lb);

		if (strcmp(pa->name, pb->name) != 0 || strcmp(pa->value, pb->value) != 0)
			return false;
	}
	return true;
}

/*
 * The cluster's configuration changed (streamcube_alter_cluster): take the
 * new one and close the consumer; the main loop opens a new one at the
 * committed positions.  Messages prefetched with the old one are dropped
 * unconsumed, so nothing is lost or read twice.
 */
static void
sc_receiver_reload_cluster(void)
{
	MemoryContext cxt = AllocSetContextCreate(TopMemoryContext, "streamcube cluster",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	ScKafkaConnInfo *conn = sc_cluster_conninfo(MyReceiver->cube->cluster);

	MemoryContextSwitchTo(old);
	if (sc_conninfo_equal(conn, MyReceiver->conn))
	{
		MemoryContextDelete(cxt);
		return;
	}
	ereport(LOG,
			(errmsg("streamcube receiver of cube %s (%s) reconnects: the configuration of Kafka cluster \"%s\" changed",
					MyReceiver->cube->qualified, MyReceiver->replica_set, MyReceiver->cube->cluster)));
	sc_receiver_close_consumer();
	MemoryContextDelete(MyReceiver->conn_cxt);
	MyReceiver->conn_cxt = cxt;
	MyReceiver->conn = conn;
}

/*
 * The cube's topics as they are now (its pattern, its topics by number), in
 * the cube's memory, if they changed.
 */
static void
sc_receiver_take_topics(const ScCube *cube)
{
	const ScTopicList *fresh = &cube->topics;
	ScTopicList *topics = &MyReceiver->cube->topics;
	bool		same = fresh->n == topics->n;

	if (strcmp(cube->topic, MyReceiver->cube->topic) != 0)
	{
		MyReceiver->cube->topic = MemoryContextStrdup(MyReceiver->cube_cxt, cube->topic);
		MyReceiver->cube->topic_pattern = cube->topic_pattern
			? MemoryContextStrdup(MyReceiver->cube_cxt, cube->topic_pattern) : NULL;
	}

	for (int t = 0; same && t < fresh->n; t++)
		same = sc_topic_removed(fresh, t) == sc_topic_removed(topics, t);
	if (same)
		return;
	topics->names = MemoryContextAlloc(MyReceiver->cube_cxt, sizeof(char *) * fresh->n);
	topics->removed = MemoryContextAllocZero(MyReceiver->cube_cxt, sizeof(bool) * fresh->n);
	for (int t = 0; t < fresh->n; t++)
	{
		topics->names[t] = MemoryContextStrdup(MyReceiver->cube_cxt, fresh->names[t]);
		topics->removed[t] = sc_topic_removed(fresh, t);
	}
	topics->n = fresh->n;
}

/*
 * The assignment names a topic the receiver does not know, or knows taken
 * out (it changed since the cube was read): the cube's topics as this
 * transaction sees them, which the assignment was read with.
 */
static void
sc_receiver_topics_for(const ScPositions *pos)
{
	MemoryContext cxt;
	MemoryContext old;
	ScCube	   *fresh;
	bool		stale = false;

	for (int i = 0; i < pos->n && !stale; i++)
	{
		int			t = sc_source_topic_no(pos->partitions[i]);

		stale = t >= MyReceiver->cube->topics.n || sc_topic_removed(&MyReceiver->cube->topics, t);
	}
	if (!stale)
		return;
	cxt = AllocSetContextCreate(CurrentMemoryContext, "streamcube topics", ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(cxt);
	fresh = sc_cube_load(MyReceiver->cube_id, true);
	if (fresh != NULL)
		sc_receiver_take_topics(fresh);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
}

/* Re-read what may change while the cube runs: pause and skip. */
void
sc_receiver_reload(uint32 config_version)
{
	ScCube	   *fresh;
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "streamcube reload",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old;

	sc_receiver_begin("reloading cube");
	old = MemoryContextSwitchTo(cxt);
	fresh = sc_cube_load(MyReceiver->cube_id, true);
	MemoryContextSwitchTo(MyReceiver->cube_cxt);
	if (fresh != NULL)
	{
		MyReceiver->cube->paused = fresh->paused;
		MyReceiver->cube->paused_reason = fresh->paused_reason ? pstrdup(fresh->paused_reason) : NULL;
		MyReceiver->cube->stop_reached = fresh->stop_reached;
		MyReceiver->cube->skip_partition = fresh->skip_partition;
		MyReceiver->cube->skip_offset = fresh->skip_offset;
		MyReceiver->cube->skip_error = fresh->skip_error ? pstrdup(fresh->skip_error) : NULL;
		MyReceiver->cube->config_version = fresh->config_version;
		MyReceiver->cube->kafka_cluster_id = fresh->kafka_cluster_id ? pstrdup(fresh->kafka_cluster_id) : NULL;

		/*
		 * Topics added (by its pattern, by streamcube_alter_cube) or taken
		 * out: the new assignment follows.  A topic keeps its number.
		 */
		sc_receiver_take_topics(fresh);

		/*
		 * Options or roll-ups changed (streamcube_alter_cube,
		 * streamcube_create_rollup): read the whole cube
		 * again before the next batch, as after a change of its table.
		 */
		if (strcmp(fresh->options_text, MyReceiver->cube->options_text) != 0 ||
			strcmp(fresh->rollups_key, MyReceiver->cube->rollups_key) != 0)
			MyReceiver->table_changed = true;
	}
	if (fresh != NULL)
		sc_receiver_reload_cluster();
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
	sc_receiver_commit();

	/* A reassignment changes the config version too. */
	if (fresh != NULL)
		sc_receiver_apply_assignment(false);
}

/*
 * Lock the cube's catalog row for the rest of the transaction, so that
 * streamcube_drop_cube() waits for the batch in flight, and the cube's
 * table, so that DDL on it waits too; returns false when the cube is gone.
 * *version is the row's config_version as locked: a change that waited for
 * the batch before (a stop point, streamcube_resume) shows up here.  A
 * change of the table since the last batch is taken in here, before the
 * batch is built.  Locks 2 and 3 of "Lock order", docs/architecture.md.
 */
static bool
sc_receiver_lock_cube(int64 *version)
{
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(MyReceiver->cube_id);
	bool		exists;

	static SPIPlanPtr plan = NULL;	/* every batch runs it: planned once */

	SPI_connect();
	sc_catalog_exec_kept(&plan, "SELECT config_version FROM streamcube.cubes "
						 "WHERE cube_id = $1 FOR KEY SHARE",
						 1, &type, &value, NULL, false, 1);
	exists = SPI_processed > 0;
	if (exists)
	{
		bool		isnull;

		*version = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	SPI_finish();
	if (!exists)
		return false;

	/* Takes in invalidations: a change of the table shows up now. */
	LockRelationOid(MyReceiver->cube->relid, RowExclusiveLock);
	if (MyReceiver->table_changed)
	{
		/*
		 * The catalogs as the DDL we may have waited for left them: the
		 * snapshot taken at the start of the transaction is older.
		 */
		PopActiveSnapshot();
		PushActiveSnapshot(GetTransactionSnapshot());
		ereport(DEBUG1,
				(errmsg_internal("streamcube receiver of cube %s reads its table again: it changed",
								 MyReceiver->cube->qualified)));
		if (!sc_receiver_load_cube())
			return false;
		sc_ingest_table_changed(MyReceiver->ing);
	}
	return true;
}

/*
 * Begin a transaction that works on the cube: lock it as above, and take
 * in a change of its table.  A cube that can no longer be ingested as its
 * catalog row says (its time column renamed, a column that "fields" maps
 * dropped or renamed, a metadata column retyped, a table attached in a
 * window's place: sc_cube_check_table)
 * is paused with that reason, in a transaction of its own, and false is
 * returned: the caller does nothing.  So it is when the cube's row changed
 * since the receiver last read it: the receiver reads it again first
 * (messages the caller kept in MyReceiver->carried stay, as far as the new
 * assignment and stop point let them).  The cube being dropped ends the
 * receiver.
 */
bool
sc_receiver_begin_work(const char *activity)
{
	int64		known = MyReceiver->cube->config_version;
	int64		version = 0;

	sc_receiver_begin(activity);
	if (!sc_receiver_lock_cube(&version))
		sc_receiver_cube_gone();
	if (version != known)
	{
		sc_receiver_commit();
		sc_receiver_reload((uint32) version);
		return false;
	}
	if (MyReceiver->cube->broken == NULL)
		return true;

	/*
	 * Writing the cube's row takes lock 2 up to FOR NO KEY UPDATE: not
	 * while this transaction holds the table (lock 3).  A seal that wrote
	 * the row (its sealed view) holds it until its compaction commits, and
	 * the compaction's swap needs the table: it would retry for its whole
	 * budget against our lock while we waited for its row.
	 */
	sc_receiver_commit();
	sc_receiver_begin("pausing the cube");
	SPI_connect();
	sc_cube_row_pause_for(MyReceiver->cube_id, MyReceiver->cube->broken);
	SPI_finish();
	sc_receiver_commit();
	MyReceiver->cube->paused = true;
	ereport(WARNING,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("cube %s paused: %s", MyReceiver->cube->qualified, MyReceiver->cube->broken)));
	return false;
}

/*
 * An error that retrying cannot mend, because the cube's table or its
 * owner's code causes it for every batch: a trigger or an index expression
 * that fails (a column it names is gone, a function raises), a privilege
 * the owner lost, a feature the table uses that a receiver cannot.
 * Errors of the data are dead letters already; the others (a lock, the
 * network, the server shutting down) are worth a restart.
 */
static bool
sc_receiver_error_is_persistent(const ErrorData *edata)
{
	int			class = ERRCODE_TO_CATEGORY(edata->sqlerrcode);

	if (edata->sqlerrcode == ERRCODE_UNDEFINED_TABLE)
		return false;			/* a window dropped meanwhile: read again */
	return class == ERRCODE_SYNTAX_ERROR_OR_ACCESS_RULE_VIOLATION ||
		class == ERRCODE_FEATURE_NOT_SUPPORTED ||
		class == ERRCODE_SQL_ROUTINE_EXCEPTION ||
		class == ERRCODE_EXTERNAL_ROUTINE_EXCEPTION ||
		class == ERRCODE_EXTERNAL_ROUTINE_INVOCATION_EXCEPTION ||
		class == ERRCODE_PLPGSQL_ERROR ||
		class == ERRCODE_WITH_CHECK_OPTION_VIOLATION;
}

/*
 * After an error the receiver cannot retry past (above), pause the cube
 * with it as the reason, in a transaction of its own, instead of failing
 * and restarting for ever.  True when the cube is paused; the caller exits,
 * and the launcher starts a receiver that finds the cube paused.
 */
bool
sc_receiver_pause_after(ErrorData *edata)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool paused = false;
	char	   *reason;

	if (MyReceiver->cube == NULL || !sc_receiver_error_is_persistent(edata))
		return false;
	reason = psprintf("the receiver failed: %s%s%s; fix the cause (a trigger or an index expression of "
					  "the table, a privilege of its owner, the cube's cluster), then call streamcube_resume('%s')",
					  edata->message, edata->detail ? " " : "", edata->detail ? edata->detail : "",
					  sc_cube_name_literal(MyReceiver->cube));
	AbortCurrentTransaction();
	PG_TRY();
	{
		sc_receiver_begin("pausing cube");

		/*
		 * The table changed hands since this receiver connected (it lost
		 * its rights with it): a receiver started as the new owner goes on.
		 */
		if (sc_relation_owner(MyReceiver->cube->relid) != GetUserId())
			sc_receiver_commit();
		else
		{
			SPI_connect();
			sc_cube_row_pause_for(MyReceiver->cube_id, reason);
			SPI_finish();
			sc_receiver_commit();
			paused = true;
		}
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
	if (paused)
		ereport(WARNING,
				(errcode(edata->sqlerrcode),
				 errmsg("cube %s paused: %s", MyReceiver->cube->qualified, reason)));
	return paused;
}

/* Close the receiver's consumer, if it has one (see below for a Kafka pause). */
void
sc_receiver_close_consumer(void)
{
	if (MyReceiver->consumer == NULL)
		return;

	/*
	 * librdkafka 2.0.2 cannot destroy a consumer whose topic was deleted
	 * under it: rd_kafka_destroy() waits forever for a broker thread.  The
	 * receiver exits instead (the cube is paused in the catalog already);
	 * the launcher starts a new one, which stays paused.  So does every
	 * receiver of a cube that streamcube paused for what it found in Kafka
	 * (paused_reason, not a stop point): another receiver of the cube may
	 * be the one that found the topic gone, and this one's consumer may
	 * hold partitions of it too.
	 */
	if (MyReceiver->topic_gone ||
		(MyReceiver->cube->paused && MyReceiver->cube->paused_reason != NULL &&
		 !MyReceiver->cube->stop_reached))
	{
		ereport(LOG,
				(errmsg("streamcube receiver of cube %s exits: the Kafka consumer of a deleted topic cannot be closed in place",
						MyReceiver->cube->qualified)));
		proc_exit(0);
	}
	sc_kafka_messages_release(MyReceiver->messages, MyReceiver->carried);
	MyReceiver->carried = 0;
	if (MyReceiver->wait_set != NULL)
	{
		/* it watches the consumer's pipe, whose descriptor is closed now */
		FreeWaitEventSet(MyReceiver->wait_set);
		MyReceiver->wait_set = NULL;
	}
	if (MyReceiver->latch_set != NULL)
	{
		FreeWaitEventSet(MyReceiver->latch_set);
		MyReceiver->latch_set = NULL;
	}
	sc_kafka_consumer_destroy(MyReceiver->consumer);
	MyReceiver->consumer = NULL;
	for (int p = 0; p < MyReceiver->nparts; p++)
		MyReceiver->eof[p] = -1;
	MyReceiver->disconnected_since = 0;	/* looked at again by the next consumer */
}

/* The cube was dropped under us: nothing to keep, stop quietly. */
static void
sc_receiver_cube_gone(void)
{
	AbortCurrentTransaction();
	ereport(LOG,
			(errmsg("streamcube receiver stops: cube %s was dropped", MyReceiver->cube->qualified)));
	sc_receiver_set_state(SC_RECEIVER_STOPPED);
	proc_exit(0);
}

/* Has every partition of the receiver reached its stop offset? */
bool
sc_receiver_at_stop(void)
{
	if (MyReceiver->nparts == 0 || MyReceiver->stops[0] < 0)
		return false;
	for (int p = 0; p < MyReceiver->nparts; p++)
		if (MyReceiver->positions[p] < MyReceiver->stops[p])
			return false;
	return true;
}

/*
 * The receiver's partitions reached their stop offsets: tell the catalog,
 * which pauses the cube when every other receiver's are there too.  Once
 * per arrival: the receiver then idles until its assignment changes.
 */
void
sc_receiver_tell_stop(void)
{
	bool		paused;

	sc_receiver_begin("reaching the stop point");
	SPI_connect();
	paused = sc_cube_row_stop_reached(MyReceiver->cube_id);
	SPI_finish();
	sc_receiver_commit();
	MyReceiver->stop_told = true;
	ereport(LOG,
			(errmsg(paused ? "streamcube cube %s reached its stop point and paused"
					: "streamcube receiver of cube %s (%s) reached its stop point",
					MyReceiver->cube->qualified, MyReceiver->replica_set)));
}
