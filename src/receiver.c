/*-------------------------------------------------------------------------
 *
 * receiver.c
 *		The receiver: one dynamic background worker per (cube, replica set)
 *		that consumes the set's Kafka partitions into the cube.
 *
 * States (shown in streamcube.consumers):
 *
 *	  starting --> running <--> paused
 *	                  |            |
 *	                  +--> stopping --> stopped      (asked to stop)
 *	  any error --> failed  (the launcher restarts it after a back-off)
 *
 * A receiver connects as the cube's owner, reads its assigned partitions
 * and their consume positions, and assigns them to a librdkafka consumer
 * at exactly those offsets (no consumer group, no offsets in Kafka).  Its
 * loop collects a batch (bounded by streamcube.batch_max_rows, _bytes and
 * _ms), then commits, in ONE transaction, the batch's rows, its dead
 * letters and the new consume positions.  Positions are advanced with a
 * compare-and-set on the previous value, so two receivers that somehow
 * consumed the same partition could never both commit.  Messages below a
 * partition's position (a re-delivery) are dropped before parsing.
 *
 * When Kafka no longer holds what the cube needs (its positions lie below
 * a partition's low watermark, or above its high watermark because the
 * topic was deleted and created again, or the topic is gone), the
 * receiver pauses the cube in the catalog with a reason saying what
 * happened and what to do; it stays paused across restarts until an
 * operator acts (streamcube_set_positions, streamcube_resume).
 *
 * A relcache callback on the cube's table tells the receiver when the
 * table changed (a column added or dropped, a window partition created,
 * detached or dropped): before its next batch it reads the columns again,
 * so the batch is built for the table as it is.  The windows it knew stay
 * known: the batch checks each as it locks it (ingest_windows.c).
 *
 * Pausing closes the Kafka consumer; resuming opens a new one at the
 * positions read again from the catalog.  Nothing read but not committed can therefore be
 * skipped, whatever librdkafka had prefetched.  The same holds after a
 * crash: unlogged rows and unlogged positions are emptied together, and
 * the receiver starts again from the logged checkpoints.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

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

PGDLLEXPORT void sc_receiver_main(Datum main_arg);

typedef struct ScReceiver
{
	int			slotno;
	ScReceiverSlot *slot;
	int32		cube_id;
	char		replica_set[NAMEDATALEN];

	ScCube	   *cube;
	ScIngest   *ing;
	ScKafkaConnInfo *conn;
	ScKafkaConsumer *consumer;
	WaitEventSet *wait_set;		/* latch, postmaster, consumer's wake-up pipe */
	WaitEventSet *latch_set;	/* latch and postmaster only */
	bool		fetch_idle;		/* consumer opened with librdkafka's fetch defaults */
	bool		fetch_derived;	/* the open consumer's fetch settings are derived */
	TimestampTz last_message_at;	/* last batch collected, or the consumer opened */
	TimestampTz pace_since;		/* start of the count of batches below */
	int			pace_batches;	/* batches collected since pace_since */

	int			nparts;
	int32	   *parts;
	int		   *part_slot;		/* Kafka partition -> index in parts, -1 */
	int32		part_slot_len;	/* entries of part_slot: max(parts) + 1 */
	int64	   *positions;		/* committed: next offset to read */
	int64	   *epochs;			/* assignment epoch of each partition */
	int64	   *high;			/* last known high watermarks */
	int64	   *eof;			/* end of partition seen at this offset, -1 */
	int64	   *stops;			/* first offset not to read (a stop point), -1 */
	int64	   *next_ts;		/* Kafka timestamp of the first message held, -1 */
	int64	   *last_ts;		/* Kafka timestamp of the last message committed, -1 */
	TimestampTz *caught_up_at;	/* last seen with nothing left to read; 0 */
	bool		stop_told;		/* told the catalog that its partitions are there */
	long		prepare_backoff_ms; /* waiting for what a batch needs (a registry); 0 */
	long		row_backoff_ms; /* a batch waiting to write the cube's row; 0 */
	int64		assignment_epoch;	/* the cube's, when the assignment was read */
	TimestampTz assignment_changed_at;	/* last change of the consumer's partitions */
	int			known_partitions;	/* partitions the cube knows (checkpoints) */

	ScKafkaMessage *messages;
	int			maxmessages;
	int			carried;		/* messages kept from the last batch, at the front */
	char		group[320];		/* the consumer's group.id */
	int64		current_window;
	bool		table_changed;	/* relcache invalidation of the cube's table */
	MemoryContext cube_cxt;		/* holds cube; replaced when the table changes */
	MemoryContext conn_cxt;		/* holds conn; replaced when the cluster changes */
	TimestampTz metadata_at;	/* last look at the topic's partition count */
	TimestampTz contact_at;		/* Kafka last answered: a fetch, a probe; 0 */
	TimestampTz disconnected_since; /* Kafka stopped answering; 0 while it does */
	TimestampTz paused_probe_at;	/* a paused receiver's last look at Kafka's ends */
	TimestampTz topic_checked_at;	/* last look after "unknown topic" */
	bool		topic_gone;		/* the consumer's topic was deleted */
	int			topic_partitions;
	uint64		tombstones_skipped;
	uint64		rows_direct;
	uint64		rows_copy;
	uint64		batches;

	/* throughput */
	uint64		rows_total;
	uint64		rate_rows;
	TimestampTz rate_since;
	double		rows_per_sec;
	TimestampTz last_batch_at;
} ScReceiver;

static ScReceiver receiver;

/*
 * Two changes of a consumer's partitions closer than this make the receiver
 * open a new consumer rather than ask librdkafka for the second: a removed
 * partition's stop may still be under way in librdkafka, and removing or
 * adding it again before it completes trips an assertion in 2.0.2.
 */
#define SC_ASSIGNMENT_SETTLE_MS 250

static void sc_receiver_close_consumer(void);
static void sc_receiver_cube_gone(void);

/* ----------------------------------------------------------------
 * Shared-memory slot
 * ----------------------------------------------------------------
 */
static void
sc_receiver_set_state(ScReceiverState state)
{
	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	sc_slot_transition(receiver.slot, state);
	LWLockRelease(sc_shared->lock);
}

static void
sc_receiver_detach(int code, Datum arg)
{
	ScReceiverSlot *slot = receiver.slot;

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

static void sc_receiver_publish_stats(void);
static void sc_receiver_reached_kafka(TimestampTz now);
static int32 sc_receiver_advance_positions(const int64 *newpos);
static bool sc_receiver_prepare(int n);

/* Publish positions, watermarks (from the consumer's cache) and throughput. */
static void
sc_receiver_publish(void)
{
	if (receiver.consumer)
		for (int i = 0; i < receiver.nparts; i++)
		{
			int64		hw = sc_kafka_consumer_high_watermark(receiver.consumer, receiver.parts[i]);

			/*
			 * At the end of a partition, its end is where a read_committed
			 * consumer stops (the last stable offset), as streamcube_wait()
			 * sees it; before that, the high watermark of the last fetch.
			 */
			if (receiver.eof[i] >= 0 && receiver.eof[i] == receiver.positions[i])
				receiver.high[i] = receiver.eof[i];
			else if (hw >= 0)
				receiver.high[i] = hw;
		}
	sc_receiver_publish_stats();
}

/* Publish what the receiver knows now, as it is. */
static void
sc_receiver_publish_stats(void)
{
	ScReceiverSlot *slot = receiver.slot;
	ScPartitionStat *parts = sc_slot_parts(slot);
	int			n = receiver.nparts;	/* <= slot_partitions: see take_positions */
	TimestampTz now = GetCurrentTimestamp();

	/*
	 * Nothing left to read, as far as Kafka's last answer says: every
	 * message still to come is newer than now.  Lag in time counts from
	 * here by the server's clock when a producer's does not hold
	 * (consumers.c).  Not while Kafka does not answer: its ends are old.
	 */
	if (receiver.disconnected_since == 0)
		for (int i = 0; i < n; i++)
			if (receiver.high[i] >= 0 && receiver.positions[i] >= receiver.high[i])
				receiver.caught_up_at[i] = now;

	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	slot->npartitions = n;
	for (int i = 0; i < n; i++)
	{
		parts[i].partition = receiver.parts[i];
		parts[i].position = receiver.positions[i];
		parts[i].high_watermark = receiver.high[i];
		parts[i].oldest_ts = receiver.next_ts[i] >= 0 ? receiver.next_ts[i] : receiver.last_ts[i];
		parts[i].caught_up_at = receiver.caught_up_at[i];
	}
	slot->contact_at = receiver.contact_at;
	slot->disconnected_since = receiver.disconnected_since;
	slot->rows_total = receiver.rows_total;
	slot->rows_per_sec = receiver.rows_per_sec;
	slot->last_batch_at = receiver.last_batch_at;
	slot->topic_partitions = receiver.topic_partitions;
	slot->tombstones_skipped = receiver.tombstones_skipped;
	slot->rows_direct = receiver.rows_direct;
	slot->rows_copy = receiver.rows_copy;
	slot->batches = receiver.batches;
	slot->epoch = receiver.assignment_epoch;
	LWLockRelease(sc_shared->lock);
}

static void
sc_receiver_warn(const char *message)
{
	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	sc_slot_set_error(receiver.slot, message);
	LWLockRelease(sc_shared->lock);
}

/* ----------------------------------------------------------------
 * Catalog
 * ----------------------------------------------------------------
 */
static void
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
static void
sc_receiver_commit(void)
{
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	pgstat_report_stat(false);
}

/* The cube's table changed: columns, or the set of its partitions. */
static void
sc_receiver_relcache_cb(Datum arg, Oid relid)
{
	if (receiver.cube == NULL || relid == InvalidOid || relid == receiver.cube->relid)
		receiver.table_changed = true;
	if (receiver.ing != NULL)
		sc_ingest_relcache_event(receiver.ing, relid);
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
	ScCube	   *cube = sc_cube_load(receiver.cube_id, true);

	if (cube == NULL)
	{
		MemoryContextSwitchTo(old);
		MemoryContextDelete(cxt);
		return false;
	}
	if (receiver.conn == NULL)
	{
		receiver.conn_cxt = AllocSetContextCreate(TopMemoryContext, "streamcube cluster",
												  ALLOCSET_SMALL_SIZES);
		MemoryContextSwitchTo(receiver.conn_cxt);
		receiver.conn = sc_cluster_conninfo(cube->cluster);
	}
	MemoryContextSwitchTo(old);

	/*
	 * What changed since the last load, for the reason of a pause: kept
	 * with the cube, past this transaction.
	 */
	cube->broken = sc_cube_check_table(cube, receiver.cube);
	if (cube->broken != NULL)
		cube->broken = MemoryContextStrdup(cxt, cube->broken);

	if (receiver.ing == NULL)
		receiver.ing = sc_ingest_create(cube);
	else
		sc_ingest_set_cube(receiver.ing, cube);
	if (receiver.cube_cxt != NULL)
		MemoryContextDelete(receiver.cube_cxt);
	receiver.cube_cxt = cxt;
	receiver.cube = cube;
	receiver.table_changed = false;
	return true;
}

static int
sc_receiver_part_index(int32 partition)
{
	return partition >= 0 && partition < receiver.part_slot_len ? receiver.part_slot[partition] : -1;
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
						receiver.replica_set, receiver.cube->qualified, pos->n, sc_shared->slot_partitions),
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
		bool		kept = p >= 0 && receiver.positions[p] == pos->positions[i];

		high[i] = kept ? receiver.high[p] : -1;
		eof[i] = kept && receiver.consumer != NULL ? receiver.eof[p] : -1;
		next_ts[i] = kept && receiver.consumer != NULL ? receiver.next_ts[p] : -1;
		last_ts[i] = kept ? receiver.last_ts[p] : -1;
		caught_up_at[i] = kept ? receiver.caught_up_at[p] : 0;
		if (pos->stops[i] >= 0)
			eof[i] = Min(eof[i], pos->stops[i]);
	}
	if (receiver.parts)
	{
		pfree(receiver.parts);
		pfree(receiver.positions);
		pfree(receiver.epochs);
		pfree(receiver.high);
		pfree(receiver.eof);
		pfree(receiver.stops);
		pfree(receiver.next_ts);
		pfree(receiver.last_ts);
		pfree(receiver.caught_up_at);
	}
	receiver.nparts = pos->n;
	receiver.parts = pos->partitions;

	/* Every message asks for its partition's index: a table, not a search. */
	if (receiver.part_slot)
		pfree(receiver.part_slot);
	receiver.part_slot_len = 0;
	for (int i = 0; i < pos->n; i++)
		receiver.part_slot_len = Max(receiver.part_slot_len, pos->partitions[i] + 1);
	receiver.part_slot = MemoryContextAlloc(TopMemoryContext, sizeof(int) * Max(receiver.part_slot_len, 1));
	memset(receiver.part_slot, -1, sizeof(int) * Max(receiver.part_slot_len, 1));
	for (int i = 0; i < pos->n; i++)
		receiver.part_slot[pos->partitions[i]] = i;
	receiver.positions = pos->positions;
	receiver.epochs = pos->epochs;
	receiver.assignment_epoch = pos->assignment_epoch;
	receiver.known_partitions = pos->known;
	receiver.high = high;
	receiver.eof = eof;
	receiver.stops = pos->stops;
	receiver.stop_told = false;
	receiver.next_ts = next_ts;
	receiver.last_ts = last_ts;
	receiver.caught_up_at = caught_up_at;
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
	d->lost = palloc(sizeof(int32) * Max(receiver.nparts, 1));
	d->lost_offsets = palloc(sizeof(int64) * Max(receiver.nparts, 1));
	for (int i = 0; i < pos->n; i++)
	{
		int			p = sc_receiver_part_index(pos->partitions[i]);

		if (p >= 0 && receiver.epochs[p] == pos->epochs[i])
		{
			if (receiver.positions[p] != pos->positions[i] && d->moved < 0)
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
	for (int p = 0; p < receiver.nparts; p++)
	{
		bool		kept = false;

		for (int i = 0; i < pos->n && !kept; i++)
			kept = pos->partitions[i] == receiver.parts[p] && pos->epochs[i] == receiver.epochs[p];
		if (kept)
			continue;
		d->lost_offsets[d->nlost] = receiver.positions[p];
		d->lost[d->nlost++] = receiver.parts[p];
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
		sc_reassign_journal_receiver(receiver.cube_id, d->gained_epoch, "start", receiver.replica_set,
									 gl, d->gained_offsets, d->handed != 0 ? d->handed : now,
									 d->handed != 0 && d->handed <= now ? (double) (now - d->handed) / 1000.0 : -1);
	if (ll != NIL && pos->n == 0)
		sc_reassign_journal_receiver(receiver.cube_id, pos->assignment_epoch, "retire",
									 receiver.replica_set, ll, d->lost_offsets, now, -1);
}

/*
 * A message at or past its partition's stop offset is not read: it shows
 * that nothing below the stop is left, as the end of the partition does.
 * Returns whether m is such a message.
 */
static bool
sc_receiver_past_stop(int p, const ScKafkaMessage *m)
{
	if (receiver.stops[p] < 0 || m->offset < receiver.stops[p])
		return false;
	receiver.eof[p] = Max(receiver.eof[p], receiver.stops[p]);
	return true;
}

/* Messages kept for the next batch: only of partitions still ours, below their stops. */
static void
sc_receiver_drop_carried(const ScAssignmentDiff *d)
{
	int			kept = 0;

	for (int i = 0; i < receiver.carried; i++)
	{
		ScKafkaMessage *m = &receiver.messages[i];
		int			p = sc_receiver_part_index(m->partition);
		bool		drop = p < 0 || sc_receiver_past_stop(p, m);

		for (int j = 0; j < d->nlost && !drop; j++)
			drop = d->lost[j] == m->partition;
		if (drop)
			sc_kafka_messages_release(m, 1);
		else
			receiver.messages[kept++] = *m;
	}
	receiver.carried = kept;
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
		TimestampDifferenceExceeds(receiver.assignment_changed_at, now, SC_ASSIGNMENT_SETTLE_MS);

	if (ok)
		ok = sc_kafka_consumer_change(receiver.consumer, false, d->nlost, d->lost, NULL,
									  errbuf, sizeof(errbuf)) &&
			sc_kafka_consumer_change(receiver.consumer, true, d->ngained, d->gained, d->gained_offsets,
									 errbuf, sizeof(errbuf));
	if (ok)
	{
		for (int p = 0; p < receiver.nparts; p++)
			for (int i = 0; i < d->ngained; i++)
				if (receiver.parts[p] == d->gained[i])
					receiver.eof[p] = -1;
	}
	else
	{
		if (errbuf[0] != '\0')
			ereport(LOG,
					(errmsg("streamcube receiver of cube %s (%s) opens a new Kafka consumer: %s",
							receiver.cube->qualified, receiver.replica_set, errbuf)));
		sc_receiver_close_consumer();
	}
	receiver.assignment_changed_at = now;
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
static void
sc_receiver_apply_assignment(bool final)
{
	MemoryContext cxt = AllocSetContextCreate(TopMemoryContext, "streamcube assignment",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old;
	ScPositions *pos;
	ScAssignmentDiff d;
	TimestampTz now;

	sc_receiver_begin("reading assignment");
	pos = sc_positions_load(receiver.cube_id, receiver.replica_set, TopMemoryContext);
	now = GetCurrentTimestamp();
	old = MemoryContextSwitchTo(cxt);
	sc_assignment_diff(pos, &d);
	MemoryContextSwitchTo(old);
	if (d.ngained > 0 || d.nlost > 0)
		sc_assignment_journal(pos, &d, final, now);
	sc_receiver_commit();

	if (d.nlost > 0 || (d.ngained > 0 && receiver.parts != NULL))
		ereport(LOG,
				(errmsg("streamcube receiver of cube %s (%s) now consumes %d partitions: %d added, %d released (assignment epoch " INT64_FORMAT ")",
						receiver.cube->qualified, receiver.replica_set, pos->n,
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
	if (receiver.consumer != NULL && !final && d.moved >= 0)
	{
		ereport(LOG,
				(errmsg("streamcube receiver of cube %s (%s) opens a new Kafka consumer: the position of partition %d was set while it was consuming",
						receiver.cube->qualified, receiver.replica_set, d.moved)));
		sc_receiver_close_consumer();
	}
	else if (receiver.consumer != NULL && !final && (d.nlost > 0 || d.ngained > 0))
		sc_receiver_change_consumer(&d, now);
	MemoryContextDelete(cxt);
	sc_receiver_publish();
}

/* Load the cube and its assignment; false when the cube is gone. */
static bool
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
	ScKafkaConnInfo *conn = sc_cluster_conninfo(receiver.cube->cluster);

	MemoryContextSwitchTo(old);
	if (sc_conninfo_equal(conn, receiver.conn))
	{
		MemoryContextDelete(cxt);
		return;
	}
	ereport(LOG,
			(errmsg("streamcube receiver of cube %s (%s) reconnects: the configuration of Kafka cluster \"%s\" changed",
					receiver.cube->qualified, receiver.replica_set, receiver.cube->cluster)));
	sc_receiver_close_consumer();
	MemoryContextDelete(receiver.conn_cxt);
	receiver.conn_cxt = cxt;
	receiver.conn = conn;
}

/* Re-read what may change while the cube runs: pause and skip. */
static void
sc_receiver_reload(uint32 config_version)
{
	ScCube	   *fresh;
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "streamcube reload",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old;

	sc_receiver_begin("reloading cube");
	old = MemoryContextSwitchTo(cxt);
	fresh = sc_cube_load(receiver.cube_id, true);
	MemoryContextSwitchTo(receiver.cube_cxt);
	if (fresh != NULL)
	{
		receiver.cube->paused = fresh->paused;
		receiver.cube->stop_reached = fresh->stop_reached;
		receiver.cube->skip_partition = fresh->skip_partition;
		receiver.cube->skip_offset = fresh->skip_offset;
		receiver.cube->skip_error = fresh->skip_error ? pstrdup(fresh->skip_error) : NULL;
		receiver.cube->config_version = fresh->config_version;
		receiver.cube->kafka_cluster_id = fresh->kafka_cluster_id ? pstrdup(fresh->kafka_cluster_id) : NULL;

		/*
		 * Options or roll-ups changed (streamcube_alter_cube,
		 * streamcube_create_rollup): read the whole cube
		 * again before the next batch, as after a change of its table.
		 */
		if (strcmp(fresh->options_text, receiver.cube->options_text) != 0 ||
			strcmp(fresh->rollups_key, receiver.cube->rollups_key) != 0)
			receiver.table_changed = true;
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
	Datum		value = Int32GetDatum(receiver.cube_id);
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
	LockRelationOid(receiver.cube->relid, RowExclusiveLock);
	if (receiver.table_changed)
	{
		/*
		 * The catalogs as the DDL we may have waited for left them: the
		 * snapshot taken at the start of the transaction is older.
		 */
		PopActiveSnapshot();
		PushActiveSnapshot(GetTransactionSnapshot());
		ereport(DEBUG1,
				(errmsg_internal("streamcube receiver of cube %s reads its table again: it changed",
								 receiver.cube->qualified)));
		if (!sc_receiver_load_cube())
			return false;
		sc_ingest_table_changed(receiver.ing);
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
 * (messages the caller kept in receiver.carried stay, as far as the new
 * assignment and stop point let them).  The cube being dropped ends the
 * receiver.
 */
static bool
sc_receiver_begin_work(const char *activity)
{
	int64		known = receiver.cube->config_version;
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
	if (receiver.cube->broken == NULL)
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
	sc_cube_row_pause_for(receiver.cube_id, receiver.cube->broken);
	SPI_finish();
	sc_receiver_commit();
	receiver.cube->paused = true;
	ereport(WARNING,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("cube %s paused: %s", receiver.cube->qualified, receiver.cube->broken)));
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
static bool
sc_receiver_pause_after(ErrorData *edata)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool paused = false;
	char	   *reason;

	if (receiver.cube == NULL || !sc_receiver_error_is_persistent(edata))
		return false;
	reason = psprintf("the receiver failed: %s%s%s; fix the cause (a trigger or an index expression of "
					  "the table, a privilege of its owner, the cube's cluster), then call streamcube_resume('%s')",
					  edata->message, edata->detail ? " " : "", edata->detail ? edata->detail : "",
					  sc_cube_name_literal(receiver.cube));
	AbortCurrentTransaction();
	PG_TRY();
	{
		sc_receiver_begin("pausing cube");

		/*
		 * The table changed hands since this receiver connected (it lost
		 * its rights with it): a receiver started as the new owner goes on.
		 */
		if (sc_relation_owner(receiver.cube->relid) != GetUserId())
			sc_receiver_commit();
		else
		{
			SPI_connect();
			sc_cube_row_pause_for(receiver.cube_id, reason);
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
				 errmsg("cube %s paused: %s", receiver.cube->qualified, reason)));
	return paused;
}

/* The cube was dropped under us: nothing to keep, stop quietly. */
static void
sc_receiver_cube_gone(void)
{
	AbortCurrentTransaction();
	ereport(LOG,
			(errmsg("streamcube receiver stops: cube %s was dropped", receiver.cube->qualified)));
	sc_receiver_set_state(SC_RECEIVER_STOPPED);
	proc_exit(0);
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
	sc_cube_row_pause_for(receiver.cube_id, reason);
	sc_receiver_commit();
	receiver.cube->paused = true;
	ereport(WARNING,
			(errcode(ERRCODE_DATA_EXCEPTION),
			 errmsg("cube %s paused: %s", receiver.cube->qualified, reason)));
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
	stored = sc_cube_row_set_kafka_cluster_id(receiver.cube_id, cluster_id);
	if (stored != NULL)
		stored = MemoryContextStrdup(receiver.cube_cxt, stored);
	SPI_finish();
	sc_receiver_commit();
	if (stored != NULL)
		receiver.cube->kafka_cluster_id = stored;
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
	moved = sc_positions_earliest_again(receiver.cube, receiver.parts[i], receiver.positions[i], low);
	SPI_finish();
	sc_receiver_commit();
	MemoryContextSwitchTo(cxt);
	if (moved)
	{
		ereport(LOG,
				(errmsg("streamcube receiver of cube %s starts partition %d at offset " INT64_FORMAT ", \"earliest\" now: retention deleted offsets " INT64_FORMAT " to " INT64_FORMAT " after streamcube_set_positions",
						receiver.cube->qualified, receiver.parts[i], low, receiver.positions[i], low - 1)));
		receiver.positions[i] = low;
	}
	return moved;
}

/*
 * Does Kafka still hold what the cube needs?  Compares every position with
 * the partition's watermarks, asked through the consumer via (not assigned
 * yet), or through a client of its own when via is NULL.  When it does
 * not, the cube is paused with a reason that names the partition, the
 * offsets and what to do, and false is returned.  Never skips anything.
 */
static bool
sc_receiver_check_kafka(ScKafkaConsumer *via)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "streamcube position check",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	bool		missing;
	char	   *cluster_id = NULL;
	List	   *partitions = via != NULL
		? sc_kafka_consumer_describe(via, receiver.conn, receiver.cube->topic,
									 sc_kafka_timeout_ms, &missing, &cluster_id)
		: sc_kafka_describe(receiver.conn, receiver.cube->topic, true,
							sc_kafka_timeout_ms, &missing, &cluster_id);
	const char *cube = receiver.cube->qualified;
	char	   *reason = NULL;
	ListCell   *lc;
	StringInfoData lost;
	StringInfoData earliest;
	int			nlost = 0;

	initStringInfo(&lost);
	initStringInfo(&earliest);
	receiver.topic_gone = missing;

	/*
	 * Offsets mean something in one Kafka cluster only.  A bootstrap list
	 * changed to another cluster (streamcube_alter_cluster) must not resume
	 * the cube at offsets of the old one: whatever they point at there is
	 * not what the cube has not read yet.
	 */
	if (cluster_id != NULL && receiver.cube->kafka_cluster_id == NULL)
	{
		sc_receiver_note_cluster_id(cluster_id);
		MemoryContextSwitchTo(cxt);		/* the commit left it elsewhere */
	}
	if (cluster_id != NULL && receiver.cube->kafka_cluster_id != NULL &&
		strcmp(cluster_id, receiver.cube->kafka_cluster_id) != 0)
		reason = psprintf("Kafka cluster \"%s\" now reaches another Kafka cluster (id %s) than the one "
						  "the cube's positions are offsets of (id %s). Nothing was read from it. If the "
						  "cluster was changed by mistake, change it back with streamcube_alter_cluster() "
						  "and call streamcube_resume('%s'); if the topic was moved there, set the "
						  "positions it has there with streamcube_set_positions('%s', ...), then resume",
						  receiver.cube->cluster, cluster_id, receiver.cube->kafka_cluster_id, cube, cube);
	if (reason == NULL && missing)
		reason = psprintf("topic \"%s\" no longer exists on Kafka cluster \"%s\". "
						  "Nothing was skipped. If it was deleted and created again, its offsets "
						  "start over: check it, then call streamcube_set_positions('%s', '\"earliest\"') "
						  "and streamcube_resume('%s')",
						  receiver.cube->topic, receiver.cube->cluster, cube, cube);
	receiver.topic_partitions = list_length(partitions);
	for (int i = 0; i < receiver.nparts && reason == NULL && !missing; i++)
	{
		ScKafkaPartitionInfo *p = NULL;

		foreach(lc, partitions)
			if (((ScKafkaPartitionInfo *) lfirst(lc))->partition == receiver.parts[i])
				p = lfirst(lc);
		if (p == NULL)
			reason = psprintf("partition %d of topic \"%s\" no longer exists: the topic was deleted "
							  "and created with fewer partitions. Nothing was skipped. Recreate the "
							  "cube, or the partition",
							  receiver.parts[i], receiver.cube->topic);
		else if (receiver.positions[i] < p->low_watermark &&
				 sc_receiver_earliest_again(i, p->low_watermark))
			receiver.high[i] = p->high_watermark;
		else if (receiver.positions[i] < p->low_watermark)
		{
			/* every partition so far behind, named in one reason */
			appendStringInfo(&lost, "%s" INT64_FORMAT " to " INT64_FORMAT " of partition %d",
							 lost.len > 0 ? ", " : "", receiver.positions[i], p->low_watermark - 1,
							 p->partition);
			appendStringInfo(&earliest, "%s\"%d\": \"earliest\"", earliest.len > 0 ? ", " : "",
							 p->partition);
			nlost++;
		}
		else if (receiver.positions[i] > p->high_watermark)
			reason = psprintf("partition %d of topic \"%s\" ends at offset " INT64_FORMAT ", before the "
							  "cube's position " INT64_FORMAT ": the topic was probably deleted and created "
							  "again, and its offsets started over. Nothing was skipped. Check the topic, "
							  "then call streamcube_set_positions('%s', '\"earliest\"') and "
							  "streamcube_resume('%s')",
							  p->partition, receiver.cube->topic, p->high_watermark,
							  receiver.positions[i], cube, cube);
		else
			receiver.high[i] = p->high_watermark;
	}
	if (reason == NULL && nlost > 0)
		reason = psprintf("offsets %s of topic \"%s\" %s no longer in Kafka: retention deleted them "
						  "before the cube read them (or read them again after a crash). Nothing was "
						  "skipped. To accept the loss, call streamcube_set_positions('%s', '{%s}') and "
						  "streamcube_resume('%s'), and raise the topic's retention.ms",
						  lost.data, receiver.cube->topic, nlost > 1 ? "are all" : "are",
						  cube, earliest.data, cube);
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
	if (receiver.cube->progress_group != NULL)
		strlcpy(buf, receiver.cube->progress_group, size);
	else
		snprintf(buf, size, "streamcube-%u-%d-%s", MyDatabaseId, receiver.cube_id,
				 receiver.replica_set);
}

/*
 * Option progress_group changed: close the consumer, so that the main loop
 * opens one of the new group at the committed positions.
 */
static void
sc_receiver_follow_group(void)
{
	char		group[sizeof(receiver.group)];

	if (receiver.consumer == NULL)
		return;
	sc_receiver_group(group, sizeof(group));
	if (strcmp(group, receiver.group) != 0)
		sc_receiver_close_consumer();
}

/*
 * Open a Kafka consumer at the committed positions, read again from the
 * catalog; false (and the cube paused) when Kafka no longer holds them.
 */
static bool
sc_receiver_open_consumer(void)
{
	ScKafkaConsumer *consumer;

	sc_receiver_apply_assignment(false);
	/* Positions may have been set back below the sealed windows' marks. */
	sc_ingest_forget_windows(receiver.ing);
	sc_receiver_group(receiver.group, sizeof(receiver.group));
	/* The check goes through the consumer: its connections are then up. */
	consumer = sc_kafka_consumer_create(receiver.conn, receiver.group, sc_fetch_queue_kbytes,
										receiver.fetch_idle ? 0 : sc_batch_max_ms);
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
						receiver.cube->qualified, wait_ms, min_bytes,
						derived ? " (from streamcube.batch_max_ms)" :
						receiver.fetch_idle ? " (librdkafka's own while the topic is idle)" : "",
						sc_kafka_consumer_batch_hold_ms(consumer, sc_batch_max_ms))));
		receiver.fetch_derived = derived;
		receiver.last_message_at = receiver.pace_since = GetCurrentTimestamp();
		receiver.pace_batches = 0;
	}
	receiver.consumer = consumer;
	sc_kafka_consumer_assign(receiver.consumer, receiver.cube->topic, receiver.nparts,
							 receiver.parts, receiver.positions);
	receiver.metadata_at = GetCurrentTimestamp();
	receiver.assignment_changed_at = receiver.metadata_at;
	return true;
}

static void
sc_receiver_close_consumer(void)
{
	if (receiver.consumer == NULL)
		return;

	/*
	 * librdkafka 2.0.2 cannot destroy a consumer whose topic was deleted
	 * under it: rd_kafka_destroy() waits forever for a broker thread.  The
	 * receiver exits instead (the cube is paused in the catalog already);
	 * the launcher starts a new one, which stays paused.
	 */
	if (receiver.topic_gone)
	{
		ereport(LOG,
				(errmsg("streamcube receiver of cube %s exits: the Kafka consumer of a deleted topic cannot be closed in place",
						receiver.cube->qualified)));
		proc_exit(0);
	}
	sc_kafka_messages_release(receiver.messages, receiver.carried);
	receiver.carried = 0;
	if (receiver.wait_set != NULL)
	{
		/* it watches the consumer's pipe, whose descriptor is closed now */
		FreeWaitEventSet(receiver.wait_set);
		receiver.wait_set = NULL;
	}
	if (receiver.latch_set != NULL)
	{
		FreeWaitEventSet(receiver.latch_set);
		receiver.latch_set = NULL;
	}
	sc_kafka_consumer_destroy(receiver.consumer);
	receiver.consumer = NULL;
	for (int p = 0; p < receiver.nparts; p++)
		receiver.eof[p] = -1;
	receiver.disconnected_since = 0;	/* looked at again by the next consumer */
}

/* ----------------------------------------------------------------
 * Batches
 * ----------------------------------------------------------------
 */
/*
 * Sleep until the latch is set, the consumer has something (unless
 * latch_only), or timeout_ms.  A live stream wakes a receiver each time a
 * fetch response finds the queue empty (it writes to the pipe), so the wait
 * sets are made once per consumer: WaitLatchOrSocket() would create, fill and
 * close an epoll set at every wake-up (epoll_create1, three epoll_ctl and
 * a close around each epoll_wait).
 */
static void
sc_receiver_wait_for(long timeout_ms, bool latch_only)
{
	WaitEvent	event;

	if (receiver.consumer == NULL)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		return;
	}
	if (receiver.wait_set == NULL)
	{
		receiver.wait_set = CreateWaitEventSet(TopMemoryContext, 3);
		AddWaitEventToSet(receiver.wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(receiver.wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
		AddWaitEventToSet(receiver.wait_set, WL_SOCKET_READABLE,
						  sc_kafka_consumer_wait_fd(receiver.consumer), NULL, NULL);
	}
	if (latch_only && receiver.latch_set == NULL)
	{
		receiver.latch_set = CreateWaitEventSet(TopMemoryContext, 2);
		AddWaitEventToSet(receiver.latch_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(receiver.latch_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	}
	(void) WaitEventSetWait(latch_only ? receiver.latch_set : receiver.wait_set,
							timeout_ms, &event, 1, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
}

static void
sc_receiver_wait(long timeout_ms)
{
	sc_receiver_wait_for(timeout_ms, false);
}

/* How often an "unknown topic" error makes the receiver look at Kafka. */
#define SC_TOPIC_CHECK_INTERVAL_MS 5000

/*
 * A poll reported a failure.  An offset out of range means Kafka lost what
 * the cube needs, or the topic was created again: the check pauses the
 * cube and this returns.  Anything else is an error: the receiver restarts
 * after a back-off, from its committed positions.
 */
static void
sc_receiver_poll_failure(ScKafkaPollResult *res)
{
	if (res->status == SC_KAFKA_TOPIC_UNKNOWN)
	{
		/* Deleted?  Look at most every few seconds; else it is transient. */
		if (TimestampDifferenceExceeds(receiver.topic_checked_at, GetCurrentTimestamp(),
									   SC_TOPIC_CHECK_INTERVAL_MS))
		{
			receiver.topic_checked_at = GetCurrentTimestamp();
			if (!sc_receiver_check_kafka(NULL))
				return;
		}
		sc_receiver_warn(res->message);
		return;
	}
	if (res->status == SC_KAFKA_OUT_OF_RANGE)
	{
		if (!sc_receiver_check_kafka(NULL))
			return;
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("offset out of range on partition %d of topic \"%s\": %s",
						res->partition, receiver.cube->topic, res->message),
				 errhint("streamcube never skips messages silently; the receiver starts again from its committed position.")));
	}
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("Kafka consumer of cube %s failed: %s", receiver.cube->qualified, res->message)));
}

/*
 * How many messages a batch may take: streamcube.batch_max_rows, or more
 * for a cube with roll-ups (streamcube.rollup_batch_max_rows): a batch
 * appends a roll-up row per group it holds, and a larger batch fewer of
 * them.
 */
static int
sc_receiver_batch_rows(void)
{
	if (receiver.cube != NULL && receiver.cube->rollups != NIL)
		return Max(sc_batch_max_rows, sc_rollup_batch_max_rows);
	return sc_batch_max_rows;
}

/* Room for a batch of the current size in receiver.messages. */
static void
sc_receiver_size_messages(void)
{
	int			want = sc_receiver_batch_rows();

	if (receiver.messages == NULL)
	{
		receiver.messages = MemoryContextAllocZero(TopMemoryContext, sizeof(ScKafkaMessage) * want);
		receiver.maxmessages = want;
	}
	else if (want > receiver.maxmessages)
	{
		receiver.messages = repalloc(receiver.messages, sizeof(ScKafkaMessage) * want);
		receiver.maxmessages = want;
	}
}

/*
 * Collect up to batch_max_rows new messages, holding the batch open at most
 * batch_max_ms after the first one (less when the broker gathers the stream
 * too: sc_kafka_consumer_batch_hold_ms); messages carried over from the
 * last batch come first.  While the batch is open the receiver sleeps until
 * it closes, deaf to the consumer's wake-ups: what comes meanwhile waits in
 * librdkafka's queue, and one poll at the end takes it all, instead of a
 * wake-up and a poll for every fetch response.  Returns 0 after an idle
 * wait, -1 when a poll failure paused the cube.
 */
static int
sc_receiver_collect(void)
{
	int			max = Min(sc_receiver_batch_rows(), receiver.maxmessages);
	int64		max_bytes = (int64) sc_batch_max_kbytes * 1024;
	int64		bytes = 0;
	int			n = receiver.carried;
	TimestampTz first = n > 0 ? GetCurrentTimestamp() : 0;
	int			hold_ms = sc_kafka_consumer_batch_hold_ms(receiver.consumer, sc_batch_max_ms);

	for (int i = 0; i < n; i++)
		bytes += receiver.messages[i].len;
	receiver.carried = 0;

	for (;;)
	{
		ScKafkaPollResult res;
		int			got = n >= max ? 0 :
			sc_kafka_consumer_poll(receiver.consumer, receiver.messages + n, max - n, &res);

		if (n >= max)
			return n;
		if (res.status == SC_KAFKA_TOPIC_UNKNOWN)
		{
			sc_receiver_poll_failure(&res);
			if (receiver.cube->paused)
			{
				sc_kafka_messages_release(receiver.messages, n + got);
				return -1;
			}
			res.message[0] = '\0';
		}
		else if (res.status != SC_KAFKA_OK)
		{
			sc_kafka_messages_release(receiver.messages, n + got);
			sc_receiver_poll_failure(&res);
			return -1;
		}
		if (res.message[0] != '\0')
			sc_receiver_warn(res.message);
		if (got > 0)
			sc_receiver_reached_kafka(GetCurrentTimestamp());	/* fetched: messages, ends */

		/*
		 * Keep only messages at or past the committed position and below
		 * the stop offset; note where partitions end.
		 */
		for (int i = n; i < n + got; i++)
		{
			ScKafkaMessage *m = &receiver.messages[i];
			int			p = sc_receiver_part_index(m->partition);

			if (p >= 0 && m->eof)
				receiver.eof[p] = Max(receiver.eof[p], receiver.stops[p] >= 0
									  ? Min(m->offset, receiver.stops[p]) : m->offset);
			if (p < 0 || m->eof || m->offset < receiver.positions[p] || sc_receiver_past_stop(p, m))
			{
				sc_kafka_messages_release(m, 1);
				*m = receiver.messages[n + got - 1];
				receiver.messages[n + got - 1].handle = NULL;
				got--;
				i--;
				continue;
			}
			if (receiver.next_ts[p] < 0)
				receiver.next_ts[p] = m->timestamp;
			bytes += m->len;
		}
		n += got;

		if (n > 0 && first == 0)
			first = GetCurrentTimestamp();
		if (n >= max || bytes >= max_bytes)
			return n;
		if (n == 0)
		{
			sc_receiver_wait(1000);
			return 0;
		}
		if (TimestampDifferenceExceeds(first, GetCurrentTimestamp(), hold_ms))
			return n;
		if (got == 0)
		{
			long		secs;
			int			usecs;

			TimestampDifference(GetCurrentTimestamp(),
								TimestampTzPlusMilliseconds(first, hold_ms),
								&secs, &usecs);
			sc_receiver_wait_for(secs * 1000 + usecs / 1000 + 1, true);
			CHECK_FOR_INTERRUPTS();
		}
	}
}

/*
 * Derived fetch settings make the broker answer every fetch.wait.max.ms
 * (sc_kafka_conf_fetch_wait): about twenty requests a second, each worth a
 * little CPU, where librdkafka's own settings send two while nothing comes.
 * An idle receiver cost twice what it did.  So a receiver whose topic has
 * brought nothing for SC_IDLE_AFTER_MS opens its consumer again with
 * librdkafka's settings (fetch.min.bytes 1: a message that comes is fetched
 * at once, and the batch is held open batch_max_ms, as before), and goes
 * back to the derived ones once a stream flows steadily again: at least
 * SC_STEADY_BATCHES batches collected within SC_PACE_MS.  Opening a
 * consumer again takes some tens of milliseconds, once per change of pace.
 * A cluster that sets fetch.wait.max.ms or fetch.min.bytes itself is left
 * alone.
 */
#define SC_IDLE_AFTER_MS 60000
#define SC_PACE_MS 2000
#define SC_STEADY_BATCHES 10

static void
sc_receiver_follow_pace(int n)
{
	TimestampTz now = GetCurrentTimestamp();

	/* Not while Kafka does not answer: a new consumer could not start. */
	if (receiver.consumer == NULL || receiver.disconnected_since != 0)
		return;
	if (n > 0)
	{
		receiver.last_message_at = now;
		receiver.pace_batches++;
	}
	if (!receiver.fetch_idle)
	{
		if (receiver.fetch_derived &&
			TimestampDifferenceExceeds(receiver.last_message_at, now, SC_IDLE_AFTER_MS))
		{
			receiver.fetch_idle = true;
			sc_receiver_close_consumer();	/* opened again at the top */
		}
		return;
	}
	if (!TimestampDifferenceExceeds(receiver.pace_since, now, SC_PACE_MS))
		return;
	if (receiver.pace_batches >= SC_STEADY_BATCHES)
	{
		receiver.fetch_idle = false;
		sc_receiver_close_consumer();
		return;
	}
	receiver.pace_since = now;
	receiver.pace_batches = 0;
}

/* Does some partition end past its position (control records only)? */
static bool
sc_receiver_eof_ahead(void)
{
	for (int p = 0; p < receiver.nparts; p++)
		if (receiver.eof[p] > receiver.positions[p])
			return true;
	return false;
}

/* Stable order for the batch: by partition, then offset. */
static int
sc_message_cmp(const void *a, const void *b)
{
	const ScKafkaMessage *x = a;
	const ScKafkaMessage *y = b;

	if (x->partition != y->partition)
		return x->partition < y->partition ? -1 : 1;
	return x->offset < y->offset ? -1 : (x->offset > y->offset ? 1 : 0);
}

/*
 * Put one partition's run of a batch in offset order.  The run is made of a
 * few ascending pieces: librdkafka 2.0.2 hands a partition's messages out
 * in offset order within a fetched message set, but not always the sets
 * in order (measured: a set's messages ahead of the one before it, in most
 * batches of a fast catch-up), and a message fetched twice (a partition
 * removed and added again) starts a piece too.  Merging the pieces takes
 * linear time for a few of them; qsort() of such runs cost 1.7 % of a
 * receiver's instructions.  Many pieces: qsort().
 */
static void
sc_receiver_sort_run(ScKafkaMessage *run, int n)
{
	int			bounds[17];		/* piece k is [bounds[k], bounds[k + 1]) */
	int			nb = 1;
	ScKafkaMessage *src = run;
	ScKafkaMessage *dst;

	bounds[0] = 0;
	for (int i = 1; i < n; i++)
		if (run[i].offset < run[i - 1].offset)
		{
			if (nb == lengthof(bounds) - 1)
			{
				qsort(run, n, sizeof(ScKafkaMessage), sc_message_cmp);
				return;
			}
			bounds[nb++] = i;
		}
	bounds[nb] = n;
	if (nb == 1)
		return;

	dst = palloc(sizeof(ScKafkaMessage) * n);
	while (nb > 1)
	{
		int			merged = 0;

		for (int k = 0; k < nb; k += 2)
		{
			int			lo = bounds[k];
			int			mid = bounds[k + 1];
			int			hi = k + 2 <= nb ? bounds[k + 2] : mid;
			int			a = lo,
						b = mid,
						o = lo;

			/* equal offsets (a message fetched twice) keep their order */
			while (a < mid && b < hi)
				dst[o++] = src[b].offset < src[a].offset ? src[b++] : src[a++];
			while (a < mid)
				dst[o++] = src[a++];
			while (b < hi)
				dst[o++] = src[b++];
			bounds[merged++] = lo;
		}
		bounds[merged] = n;
		nb = merged;
		{
			ScKafkaMessage *t = src;

			src = dst;
			dst = t;
		}
	}
	if (src != run)
	{
		memcpy(run, src, sizeof(ScKafkaMessage) * n);
		pfree(src);
	}
	else
		pfree(dst);
}

/*
 * Put the batch in that order.  librdkafka hands out each partition's
 * messages in offset order, nearly: a stable counting sort by partition
 * does the job in linear time (qsort() of a 20,000-message batch was 8-10 %
 * of a receiver's CPU), and a partition whose run is not in offset order is
 * put in order on its own (sc_receiver_sort_run).
 */
static void
sc_receiver_sort(ScKafkaMessage *messages, int n)
{
	int			np = receiver.nparts;
	int		   *order;			/* partition indexes by partition number */
	int		   *slot;			/* partition index -> rank in that order */
	int		   *start;			/* rank -> first position in the output */
	int		   *index;			/* message -> its partition's index */
	ScKafkaMessage *out;

	if (n < 2)
		return;
	index = palloc(sizeof(int) * n);
	for (int i = 0; i < n; i++)
		if ((index[i] = sc_receiver_part_index(messages[i].partition)) < 0)
		{
			/* not one of ours any more: let the general sort place it */
			pfree(index);
			qsort(messages, n, sizeof(ScKafkaMessage), sc_message_cmp);
			return;
		}

	order = palloc(sizeof(int) * np);
	slot = palloc(sizeof(int) * np);
	start = palloc0(sizeof(int) * (np + 1));
	for (int i = 0; i < np; i++)
		order[i] = i;
	/* insertion sort: np is small */
	for (int i = 1; i < np; i++)
		for (int j = i; j > 0 && receiver.parts[order[j - 1]] > receiver.parts[order[j]]; j--)
		{
			int			t = order[j];

			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	for (int r = 0; r < np; r++)
		slot[order[r]] = r;

	for (int i = 0; i < n; i++)
		start[slot[index[i]] + 1]++;
	for (int r = 0; r < np; r++)
		start[r + 1] += start[r];

	out = palloc(sizeof(ScKafkaMessage) * n);
	{
		int		   *next = palloc(sizeof(int) * np);

		memcpy(next, start, sizeof(int) * np);
		for (int i = 0; i < n; i++)
			out[next[slot[index[i]]]++] = messages[i];
		pfree(next);
	}
	memcpy(messages, out, sizeof(ScKafkaMessage) * n);
	pfree(out);

	for (int r = 0; r < np; r++)
		for (int i = start[r] + 1; i < start[r + 1]; i++)
			if (messages[i].offset < messages[i - 1].offset)
			{
				sc_receiver_sort_run(messages + start[r], start[r + 1] - start[r]);
				break;
			}
	pfree(index);
	pfree(order);
	pfree(slot);
	pfree(start);
}

/*
 * Record what a batch did to the cube row: a skip used, a pause.  Both
 * must commit with the batch's positions.  The batch holds the cube's
 * table (lock 3), so it takes the row (lock 2) without waiting; the lock
 * and the updates in one subtransaction, so that the row needs no
 * MultiXactId for them (see sc_positions_lock_advance).
 */
static void
sc_receiver_record_outcome_fn(void *arg)
{
	ScBatchOutcome *outcome = arg;

	SPI_connect();
	sc_cube_row_lock_nowait(receiver.cube_id);
	if (outcome->skip_used)
		sc_cube_row_skip_done(receiver.cube_id);
	if (outcome->paused)
		sc_cube_row_pause_at(receiver.cube_id, outcome->bad_partition, outcome->bad_offset,
							 outcome->bad_error);
	SPI_finish();
}

/* The row alone, before a batch whose last try found it held. */
static void
sc_receiver_lock_row_fn(void *arg)
{
	SPI_connect();
	sc_cube_row_lock_nowait(receiver.cube_id);
	SPI_finish();
}

/*
 * The batch must write the cube's row and another transaction holds it:
 * waiting for it while the batch holds the cube's table would keep a
 * seal's swap (which needs the table, and commits the row with it) from
 * ever getting there.  End the transaction (rolled back when the batch
 * wrote anything), keep the messages for the next try, and wait a
 * back-off (100 ms, doubling to 1 s) with nothing of the cube held.  The
 * next try takes the row before it writes anything, so a row held for
 * long costs a try a lock, not a batch written and rolled back.
 */
static void
sc_receiver_row_busy(int n, bool written)
{
	if (written)
	{
		AbortCurrentTransaction();
		sc_ingest_end_batch(receiver.ing, false);
	}
	else
		sc_receiver_commit();
	receiver.carried = n;
	receiver.row_backoff_ms = Min(Max(receiver.row_backoff_ms * 2, 100), 1000);
	ereport(DEBUG1,
			(errmsg_internal("streamcube receiver of cube %s waits for the cube's row, held by another transaction; "
							 "tries again in %ld ms",
							 receiver.cube->qualified, receiver.row_backoff_ms)));
	pgstat_report_activity(STATE_RUNNING, "waiting for the cube's row");
	/* the latch only: messages coming in would cut the wait short */
	sc_receiver_wait_for(receiver.row_backoff_ms, true);
}

/*
 * A batch met a partition that a reassignment gave to another replica set
 * since the receiver last looked: none of it may commit.  Roll the batch
 * back, forget its messages (they are read again, by whoever owns each
 * partition now) and follow the new assignment.  No error: nothing failed.
 */
static void
sc_receiver_lost_partition(int32 partition, int n)
{
	AbortCurrentTransaction();
	sc_ingest_end_batch(receiver.ing, false);
	ereport(LOG,
			(errmsg("streamcube receiver of cube %s (%s) rolled back a batch: partition %d was reassigned",
					receiver.cube->qualified, receiver.replica_set, partition)));

	/*
	 * Nothing of the batch committed: all of it waits for the next batch,
	 * and following the new assignment drops the messages of partitions
	 * no longer ours.
	 */
	receiver.carried = n;
	sc_receiver_apply_assignment(false);
}

/*
 * A message fetched twice (a partition removed from the consumer and added
 * again while its old fetch was still queued) counts once; the messages
 * are sorted.  Returns how many are left.
 */
static int
sc_receiver_drop_duplicates(int n)
{
	int			kept = n > 0 ? 1 : 0;

	for (int i = 1; i < n; i++)
	{
		ScKafkaMessage *prev = &receiver.messages[kept - 1];
		ScKafkaMessage *m = &receiver.messages[i];

		if (m->partition == prev->partition && m->offset == prev->offset)
			sc_kafka_messages_release(m, 1);
		else
			receiver.messages[kept++] = *m;
	}
	return kept;
}

/* The positions after the batch: past every message before its cut. */
static void
sc_receiver_new_positions(int64 *newpos, int n, const ScBatchOutcome *outcome)
{
	memcpy(newpos, receiver.positions, sizeof(int64) * receiver.nparts);
	for (int i = 0; i < outcome->cut; i++)
	{
		int			p = sc_receiver_part_index(receiver.messages[i].partition);

		newpos[p] = Max(newpos[p], receiver.messages[i].offset + 1);
	}
	/* Every message before a partition's end was in this batch or earlier. */
	if (outcome->cut == n)
		for (int p = 0; p < receiver.nparts; p++)
			newpos[p] = Max(newpos[p], receiver.eof[p]);
	/* Never past a stop point (an end seen before it was set). */
	for (int p = 0; p < receiver.nparts; p++)
		if (receiver.stops[p] >= 0)
			newpos[p] = Min(newpos[p], Max(receiver.stops[p], receiver.positions[p]));
}

/*
 * After COMMIT, the Kafka timestamps the lag in time is told by: of the
 * last message committed and of the first one kept for the next batch, by
 * partition (the messages are sorted).
 */
static void
sc_receiver_note_stamps(int n, int cut)
{
	for (int p = 0; p < receiver.nparts; p++)
		receiver.next_ts[p] = -1;
	for (int i = 0; i < n; i++)
	{
		int			p = sc_receiver_part_index(receiver.messages[i].partition);

		if (i < cut)
			receiver.last_ts[p] = receiver.messages[i].timestamp;
		else if (receiver.next_ts[p] < 0)
			receiver.next_ts[p] = receiver.messages[i].timestamp;
	}
}

/*
 * After COMMIT: release what the batch took, carry what it left for the
 * next batch, report a pause, count.
 */
static void
sc_receiver_after_batch(int n, ScBatchOutcome *outcome)
{
	TimestampTz now;

	sc_kafka_messages_release(receiver.messages, outcome->cut);
	if (outcome->paused)
		sc_kafka_messages_release(receiver.messages + outcome->cut, n - outcome->cut);
	else if (outcome->cut < n)
	{
		memmove(receiver.messages, receiver.messages + outcome->cut,
				sizeof(ScKafkaMessage) * (n - outcome->cut));
		receiver.carried = n - outcome->cut;
		/* A window being sealed holds the rest back: do not spin. */
		if (outcome->cut == 0 && sc_ingest_missing_windows(receiver.ing) == 0)
			sc_receiver_wait(100);
	}

	if (outcome->skip_used)
		receiver.cube->skip_partition = -1;
	if (outcome->paused)
	{
		receiver.cube->paused = true;
		ereport(WARNING,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("cube %s paused by a bad message at partition %d offset " INT64_FORMAT ": %s",
						receiver.cube->qualified, outcome->bad_partition, outcome->bad_offset,
						outcome->bad_error),
				 errhint("Fix the cause and call streamcube_resume('%s'), or skip the message with streamcube_resume('%s', skip_bad_message => true).",
						 receiver.cube->qualified, receiver.cube->qualified)));
		pfree(outcome->bad_error);
	}

	/* Throughput over windows of at least a second. */
	now = GetCurrentTimestamp();
	receiver.rows_total += outcome->rows;
	receiver.rate_rows += outcome->rows;
	receiver.tombstones_skipped += outcome->tombstones_skipped;
	receiver.rows_direct += outcome->rows_direct;
	receiver.rows_copy += outcome->rows_copy;
	if (outcome->cut > 0)
		receiver.batches++;
	receiver.last_batch_at = now;
	if (TimestampDifferenceExceeds(receiver.rate_since, now, 1000))
	{
		receiver.rows_per_sec = receiver.rate_rows * 1000000.0 / (double) (now - receiver.rate_since);
		receiver.rate_rows = 0;
		receiver.rate_since = now;
	}
	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	receiver.slot->failures = 0;
	LWLockRelease(sc_shared->lock);
	sc_receiver_publish();
}

/*
 * Commit one batch: rows, dead letters and positions in one transaction.
 * Messages past the batch's cut (a bad message under policy "pause", or the
 * windows one batch may create used up) are not committed; unless the cube
 * paused they are kept, in order, for the next batch.  Then the windows the
 * batch met that do not exist yet, in a transaction of their own.
 */
static void
sc_receiver_process(int n)
{
	ScBatchOutcome outcome;
	int64	   *newpos = palloc(sizeof(int64) * Max(receiver.nparts, 1));
	int32		lost;

	sc_receiver_sort(receiver.messages, n);
	n = sc_receiver_drop_duplicates(n);

	if (!sc_ingest_ready(receiver.ing, receiver.messages, n) && !sc_receiver_prepare(n))
	{
		pfree(newpos);
		return;					/* the messages wait, carried */
	}

	receiver.carried = n;		/* kept if the cube changed: see begin_work */
	if (!sc_receiver_begin_work("ingesting a batch"))
	{
		/* Paused: the consumer starts again from the committed positions. */
		if (receiver.cube->paused)
		{
			sc_kafka_messages_release(receiver.messages, receiver.carried);
			receiver.carried = 0;
		}
		pfree(newpos);
		return;
	}
	/* The last try found the cube's row held: take it before writing again. */
	if (receiver.row_backoff_ms > 0 && !sc_try_nowait(sc_receiver_lock_row_fn, NULL))
	{
		sc_receiver_row_busy(n, false);
		pfree(newpos);
		return;
	}
	receiver.carried = 0;
	sc_ingest_batch(receiver.ing, receiver.messages, n, &outcome);
	sc_receiver_new_positions(newpos, n, &outcome);

	/*
	 * What the batch did to the cube's row first, then the positions: a
	 * reassignment locks the cube's row, then positions, in that order.
	 */
	if ((outcome.skip_used || outcome.paused) &&
		!sc_try_nowait(sc_receiver_record_outcome_fn, &outcome))
	{
		sc_receiver_row_busy(n, true);
		pfree(newpos);
		if (outcome.paused)
			pfree(outcome.bad_error);
		return;
	}
	receiver.row_backoff_ms = 0;

	lost = sc_receiver_advance_positions(newpos);
	if (lost >= 0)
	{
		sc_receiver_lost_partition(lost, n);
		pfree(newpos);
		if (outcome.paused)
			pfree(outcome.bad_error);
		return;
	}
	sc_receiver_commit();
	sc_ingest_end_batch(receiver.ing, true);
	memcpy(receiver.positions, newpos, sizeof(int64) * receiver.nparts);
	pfree(newpos);
	sc_receiver_note_stamps(n, outcome.cut);
	/* Durable now: Kafka's tools may see them (option progress_group). */
	if (receiver.cube->progress_group != NULL && receiver.consumer != NULL)
		sc_kafka_consumer_commit_async(receiver.consumer, receiver.cube->topic, receiver.nparts,
									   receiver.parts, receiver.positions);
	sc_receiver_after_batch(n, &outcome);

	/* Windows the batch met that do not exist yet: their own transaction. */
	if (sc_ingest_missing_windows(receiver.ing) > 0)
	{
		if (!sc_receiver_begin_work("creating windows"))
			return;
		SPI_connect();
		sc_ingest_create_windows(receiver.ing);
		SPI_finish();
		sc_receiver_commit();
		sc_ingest_end_batch(receiver.ing, true);
	}
}

/*
 * What the batch's messages need from outside the cube (format avro: their
 * writer schemas, from the schema registry), in a transaction of its own,
 * so that what the registry gave is kept whatever the batch does.  When it
 * cannot be had now (the registry does not answer), no message is the
 * worse for it: all of them wait, in order, carried to the next try, and
 * the receiver says why in last_error and waits a back-off (doubling from
 * 250 ms to 30 s; a pause or a stop still wakes it).
 */
static bool
sc_receiver_prepare(int n)
{
	char	   *why = NULL;
	bool		ready;

	sc_receiver_begin("resolving message schemas");
	SPI_connect();
	ready = sc_ingest_prepare(receiver.ing, receiver.messages, n, &why);
	/* why is in SPI's memory, freed by SPI_finish: kept past the commit */
	if (!ready)
		why = MemoryContextStrdup(TopMemoryContext, why);
	SPI_finish();
	sc_receiver_commit();
	if (ready)
	{
		receiver.prepare_backoff_ms = 0;
		return true;
	}
	receiver.carried = n;
	if (receiver.prepare_backoff_ms == 0)
		ereport(LOG,
				(errmsg("streamcube receiver of cube %s waits: %s", receiver.cube->qualified, why)));
	sc_receiver_warn(why);
	pfree(why);
	receiver.prepare_backoff_ms = Min(Max(receiver.prepare_backoff_ms * 2, 250), 30000);
	sc_receiver_wait(receiver.prepare_backoff_ms);
	return false;
}

/*
 * Lock and advance the positions the batch moved (those in newpos[] that
 * differ), all of them in one go (sc_positions_lock_advance).  While they
 * are held by someone else (a reassignment's transaction), ask Kafka for
 * its high watermarks about once a second and publish them, so that
 * streamcube.consumers shows the lag growing (Kafka's end minus the
 * committed position) instead of the lag of the last batch.  Returns the
 * first partition found no longer the receiver's (the batch must roll
 * back), or -1.
 */
static int32
sc_receiver_advance_positions(const int64 *newpos)
{
	int			n = 0;
	int64	   *epochs = palloc(sizeof(int64) * Max(receiver.nparts, 1));
	int32	   *parts = palloc(sizeof(int32) * Max(receiver.nparts, 1));
	int64	   *from = palloc(sizeof(int64) * Max(receiver.nparts, 1));
	int64	   *to = palloc(sizeof(int64) * Max(receiver.nparts, 1));
	int32		lost;
	TimestampTz asked = 0;
	long		pause_ms = 100;	/* doubled up to 1 s: each try is a subtransaction */

	/* parts[] ascends: the order in which receivers lock positions */
	for (int p = 0; p < receiver.nparts; p++)
		if (newpos[p] != receiver.positions[p])
		{
			epochs[n] = receiver.epochs[p];
			parts[n] = receiver.parts[p];
			from[n] = receiver.positions[p];
			to[n] = newpos[p];
			n++;
		}
	while (!sc_positions_lock_advance(receiver.cube_id, receiver.cube->qualified,
									  receiver.replica_set, n, epochs, parts, from, to, &lost))
	{
		TimestampTz now = GetCurrentTimestamp();

		pgstat_report_activity(STATE_RUNNING, "waiting for the positions (a reassignment in progress?)");
		if (receiver.consumer != NULL && TimestampDifferenceExceeds(asked, now, 1000))
		{
			for (int i = 0; i < receiver.nparts; i++)
			{
				int64		hw = sc_kafka_consumer_query_high_watermark(receiver.consumer, receiver.parts[i],
																	   Min(sc_kafka_timeout_ms, 1000));

				if (hw >= 0)
					receiver.high[i] = Max(receiver.high[i], hw);
			}
			sc_receiver_publish_stats();
			asked = now;
		}
		sc_receiver_wait(pause_ms);
		pause_ms = Min(pause_ms * 2, 1000);
		CHECK_FOR_INTERRUPTS();
	}
	pfree(epochs);
	pfree(parts);
	pfree(from);
	pfree(to);
	return lost;
}

/*
 * The second invalidation of the cube's table (and its roll-ups') after
 * the receiver created windows, when no batch came to send it
 * (docs/architecture.md, "Partition descriptors").  A transaction that
 * locks nothing of the cube: it waits for no one.
 */
static void
sc_receiver_invalidate_again(void)
{
	if (!sc_ingest_invalidation_due(receiver.ing))
		return;
	sc_receiver_begin("invalidating the cube's table");
	sc_ingest_send_invalidation(receiver.ing);
	sc_receiver_commit();
	sc_ingest_end_batch(receiver.ing, true);
}

/* Create the partitions of the current and next window when time moves on. */
static void
sc_receiver_windows_ahead(void)
{
	int64		now = sc_cube_time(receiver.cube, GetCurrentTimestamp());
	int64		window = sc_window_start(receiver.cube, now);

	if (window == receiver.current_window && !receiver.table_changed)
		return;
	if (!sc_receiver_begin_work("creating windows ahead"))
		return;
	SPI_connect();
	sc_ingest_prepare_windows(receiver.ing, now);
	SPI_finish();
	sc_receiver_commit();
	sc_ingest_end_batch(receiver.ing, true);
	receiver.current_window = window;
}

/*
 * Look at the topic's partition count every streamcube.metadata_interval,
 * so that partitions added to the topic are assigned (option
 * new_partitions = assign) or show in streamcube.consumers as
 * unassigned_partitions.
 */
/* In a subtransaction: ask Kafka for the topic's partitions, assign the new ones. */
static void
sc_receiver_adopt_cb(void *arg)
{
	List	   *kafka = sc_kafka_describe(receiver.conn, receiver.cube->topic, true,
										  sc_kafka_timeout_ms, NULL, NULL);

	/* the cube changed meanwhile: read it again, then look again */
	if (sc_reassign_adopt_partitions(receiver.cube, kafka) >= 0)
		receiver.known_partitions = Max(receiver.known_partitions, list_length(kafka));
}

static void
sc_receiver_refresh_metadata(void)
{
	int			n;

	if (!TimestampDifferenceExceeds(receiver.metadata_at, GetCurrentTimestamp(),
									sc_metadata_interval_ms))
		return;
	n = sc_kafka_consumer_topic_partitions(receiver.consumer, Min(sc_kafka_timeout_ms, 2000));
	if (n >= 0)
		receiver.topic_partitions = n;
	receiver.metadata_at = GetCurrentTimestamp();

	/*
	 * The topic grew: under new_partitions = assign, give the new
	 * partitions to the cube's replica sets (the launcher then tells every
	 * receiver of the cube, this one included).
	 */
	if (n > receiver.known_partitions && receiver.cube->assign_new_partitions)
	{
		MemoryContext cxt = AllocSetContextCreate(TopMemoryContext, "streamcube new partitions",
												  ALLOCSET_SMALL_SIZES);
		MemoryContext old = MemoryContextSwitchTo(cxt);
		ErrorData  *edata;

		/*
		 * Nothing of the cube held before: Kafka is asked for the topic's
		 * partitions first, then the cube's row is taken to assign them
		 * (lock 2), which would wait out of order while holding the table.
		 */
		sc_receiver_begin("assigning new partitions");
		MemoryContextSwitchTo(cxt);
		edata = sc_try(sc_receiver_adopt_cb, NULL);
		sc_receiver_commit();
		MemoryContextSwitchTo(old);
		if (edata != NULL)
		{
			/* Kafka did not answer: look again at the next interval. */
			sc_receiver_warn(edata->message);
			ereport(LOG,
					(errmsg("streamcube receiver of cube %s could not assign the partitions added to topic \"%s\": %s",
							receiver.cube->qualified, receiver.cube->topic, edata->message)));
		}
		MemoryContextDelete(cxt);
	}
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
static void
sc_receiver_reached_kafka(TimestampTz now)
{
	receiver.contact_at = now;
	if (receiver.disconnected_since != 0)
	{
		ereport(LOG,
				(errmsg("streamcube receiver of cube %s reaches Kafka again, disconnected since %s",
						receiver.cube->qualified, timestamptz_to_str(receiver.disconnected_since))));
		receiver.disconnected_since = 0;
	}
}

/*
 * An error the receiver got over moves from last_error to previous_error
 * once it has gone SC_ERROR_SETTLE_MS without a new one and a batch or an
 * answer from Kafka came after it: last_error says what is wrong now.
 */
#define SC_ERROR_SETTLE_MS 10000

static void
sc_receiver_watch_health(void)
{
	ScReceiverSlot *slot = receiver.slot;
	TimestampTz now = GetCurrentTimestamp();
	bool		all_down = sc_kafka_consumer_take_all_down(receiver.consumer);

	if (all_down || TimestampDifferenceExceeds(receiver.contact_at, now, SC_PROBE_MS))
	{
		int			n = sc_kafka_consumer_topic_partitions(receiver.consumer,
														   Min(sc_kafka_timeout_ms, 1000));

		now = GetCurrentTimestamp();
		if (n >= 0)
		{
			receiver.topic_partitions = n;
			sc_receiver_reached_kafka(now);
		}
		else if (receiver.disconnected_since == 0)
		{
			receiver.disconnected_since = now;
			ereport(LOG,
					(errmsg("streamcube receiver of cube %s cannot reach Kafka: no answer since %s",
							receiver.cube->qualified, timestamptz_to_str(receiver.contact_at))));
		}
	}
	if (receiver.disconnected_since != 0)
		return;
	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	if (slot->last_error[0] != '\0' &&
		Max(receiver.last_batch_at, receiver.contact_at) > slot->last_error_at &&
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
	List	   *kafka = sc_kafka_describe(receiver.conn, receiver.cube->topic, true,
										  Min(sc_kafka_timeout_ms, 2000), NULL, NULL);
	ListCell   *lc;

	foreach(lc, kafka)
	{
		ScKafkaPartitionInfo *p = lfirst(lc);
		int			i = sc_receiver_part_index(p->partition);

		if (i >= 0)
			receiver.high[i] = p->high_watermark;
	}
}

static void
sc_receiver_paused_probe(void)
{
	ErrorData  *edata;

	if (!TimestampDifferenceExceeds(receiver.paused_probe_at, GetCurrentTimestamp(), SC_PAUSED_PROBE_MS))
		return;
	sc_receiver_begin("asking Kafka where the partitions of a paused cube end");
	edata = sc_try(sc_receiver_paused_probe_cb, NULL);
	sc_receiver_commit();
	receiver.paused_probe_at = GetCurrentTimestamp();
	if (edata != NULL)
	{
		for (int i = 0; i < receiver.nparts; i++)
			receiver.high[i] = -1;
		FreeErrorData(edata);
	}
	else
		receiver.contact_at = receiver.paused_probe_at;
	sc_receiver_publish_stats();
}

/* Has every partition of the receiver reached its stop offset? */
static bool
sc_receiver_at_stop(void)
{
	if (receiver.nparts == 0 || receiver.stops[0] < 0)
		return false;
	for (int p = 0; p < receiver.nparts; p++)
		if (receiver.positions[p] < receiver.stops[p])
			return false;
	return true;
}

/*
 * The receiver's partitions reached their stop offsets: tell the catalog,
 * which pauses the cube when every other receiver's are there too.  Once
 * per arrival: the receiver then idles until its assignment changes.
 */
static void
sc_receiver_tell_stop(void)
{
	bool		paused;

	sc_receiver_begin("reaching the stop point");
	SPI_connect();
	paused = sc_cube_row_stop_reached(receiver.cube_id);
	SPI_finish();
	sc_receiver_commit();
	receiver.stop_told = true;
	ereport(LOG,
			(errmsg(paused ? "streamcube cube %s reached its stop point and paused"
					: "streamcube receiver of cube %s (%s) reached its stop point",
					receiver.cube->qualified, receiver.replica_set)));
}

/* ----------------------------------------------------------------
 * Main loop
 * ----------------------------------------------------------------
 */
static void
sc_receiver_run(void)
{
	TimestampTz last_publish = 0;

	if (!sc_receiver_load())
		return;					/* the cube is gone */
	CacheRegisterRelcacheCallback(sc_receiver_relcache_cb, (Datum) 0);

	sc_receiver_size_messages();
	receiver.rate_since = GetCurrentTimestamp();
	sc_receiver_publish();

	for (;;)
	{
		bool		stop,
					pause;
		uint32		config_version;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		LWLockAcquire(sc_shared->lock, LW_SHARED);
		stop = receiver.slot->stop_wanted;
		pause = receiver.slot->pause_wanted;
		config_version = receiver.slot->config_version;
		LWLockRelease(sc_shared->lock);

		if (stop)
		{
			/*
			 * Retired by a reassignment (the launcher stops a replica set
			 * left with no partition of the cube)?  Journal it before
			 * leaving: reading the assignment finds nothing left.
			 */
			sc_receiver_apply_assignment(true);
			break;
		}
		/* Newer than what the receiver read (it may have read further). */
		if ((int32) (config_version - (uint32) receiver.cube->config_version) > 0)
			sc_receiver_reload(config_version);

		if (sc_receiver_at_stop() && !receiver.stop_told)
			sc_receiver_tell_stop();

		/*
		 * A cube paused at its stop point still reads up to it, when a
		 * crash took its positions back to the checkpoints.
		 */
		if (pause || sc_receiver_at_stop() ||
			(receiver.cube->paused && !receiver.cube->stop_reached))
		{
			if (receiver.consumer != NULL)
			{
				/* Kafka's ends are asked for again at once. */
				sc_receiver_close_consumer();
				receiver.rows_per_sec = 0;
				receiver.paused_probe_at = 0;
				ereport(LOG, (errmsg("streamcube receiver of cube %s paused",
									 receiver.cube->qualified)));
			}
			sc_receiver_set_state(SC_RECEIVER_PAUSED);
			sc_receiver_paused_probe();
			sc_receiver_wait(1000);
			continue;
		}
		sc_receiver_follow_group();
		if (receiver.consumer == NULL)
		{
			if (!sc_receiver_open_consumer())
				continue;		/* paused: Kafka lost what the cube needs */
			sc_receiver_reached_kafka(GetCurrentTimestamp());	/* it checked the topic */
			sc_receiver_set_state(SC_RECEIVER_RUNNING);
			sc_receiver_publish();
		}

		sc_receiver_windows_ahead();
		if (receiver.consumer == NULL)
			continue;			/* the cube changed: a new one opens at the top */
		sc_receiver_invalidate_again();
		sc_receiver_size_messages();	/* the settings or roll-ups changed */

		{
			int			n = sc_receiver_collect();

			if (n < 0)
				continue;		/* paused */
			if (n > 0 || sc_receiver_eof_ahead())
				sc_receiver_process(n);
			sc_receiver_follow_pace(n);
		}

		if (TimestampDifferenceExceeds(last_publish, GetCurrentTimestamp(), 1000))
		{
			if (TimestampDifferenceExceeds(receiver.last_batch_at, GetCurrentTimestamp(), 2000))
				receiver.rows_per_sec = 0;
			if (receiver.consumer == NULL)
				continue;		/* a new one opens at the top of the loop */
			sc_kafka_consumer_report(receiver.consumer);
			sc_receiver_watch_health();
			sc_receiver_refresh_metadata();
			sc_receiver_publish();
			/* statistics the last commits left pending, when idle */
			pgstat_report_stat(false);
			last_publish = GetCurrentTimestamp();
		}
	}

	sc_receiver_set_state(SC_RECEIVER_STOPPING);
	sc_receiver_close_consumer();
}

/*
 * After an error: is the extension still installed?  DROP EXTENSION takes
 * the catalog away under a running receiver; that is no failure, and the
 * receiver exits quietly.
 */
static bool
sc_receiver_extension_gone(void)
{
	bool		gone;

	AbortCurrentTransaction();
	StartTransactionCommand();
	gone = !OidIsValid(get_extension_oid("streamcube", true));
	CommitTransactionCommand();
	return gone;
}

void
sc_receiver_main(Datum main_arg)
{
	int			slotno = DatumGetInt32(main_arg);
	uint32		generation;
	ScReceiverSlot *slot;
	Oid			dboid,
				owner;

	memcpy(&generation, MyBgworkerEntry->bgw_extra, sizeof(generation));

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/* Claim the slot, unless a newer registration owns it. */
	slot = &sc_shared->slots[slotno];
	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	if (!slot->in_use || slot->generation != generation || slot->pid != 0)
	{
		LWLockRelease(sc_shared->lock);
		proc_exit(0);
	}
	slot->pid = MyProcPid;
	sc_slot_transition(slot, SC_RECEIVER_STARTING);
	slot->started_at = GetCurrentTimestamp();
	/* last_error stays: it tells why the previous attempt failed. */
	dboid = slot->dboid;
	owner = slot->owner;
	receiver.slotno = slotno;
	receiver.slot = slot;
	receiver.cube_id = slot->cube_id;
	receiver.topic_partitions = -1;
	slot->epoch = -1;
	slot->contact_at = 0;
	slot->disconnected_since = 0;
	strlcpy(receiver.replica_set, slot->replica_set, NAMEDATALEN);
	LWLockRelease(sc_shared->lock);
	before_shmem_exit(sc_receiver_detach, (Datum) 0);

	BackgroundWorkerInitializeConnectionByOid(dboid, owner, 0);
	pgstat_report_appname("streamcube receiver");
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	/* Nothing on the owner's search path runs inside the receiver's SQL. */
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_SESSION);

	PG_TRY();
	{
		sc_receiver_run();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(TopMemoryContext);
		edata = CopyErrorData();
		FlushErrorState();
		LWLockReleaseAll();
		if (sc_receiver_extension_gone())
		{
			ereport(LOG,
					(errmsg("streamcube receiver stops: extension streamcube was dropped")));
			sc_receiver_set_state(SC_RECEIVER_STOPPED);
			proc_exit(0);
		}
		if (sc_receiver_pause_after(edata))
			proc_exit(0);

		/*
		 * The detail often says what went wrong (librdkafka's last client
		 * error: a refused password, an unknown host): keep it with the
		 * message.  Built before the lock: nothing that can fail under it.
		 */
		{
			const char *message = edata->detail
				? psprintf("%s (%s)", edata->message, edata->detail)
				: edata->message;

			LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
			sc_slot_set_error(slot, message);
		}
		sc_slot_transition(slot, SC_RECEIVER_FAILED);
		LWLockRelease(sc_shared->lock);
		ReThrowError(edata);
	}
	PG_END_TRY();

	sc_receiver_close_consumer();
	proc_exit(0);
}
