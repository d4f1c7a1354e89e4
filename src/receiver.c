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
 * This file is the batch side, new partitions and topics, and the main
 * loop; receiver_control.c is the control side (the slot, the catalog,
 * the consumer's life, Kafka's health), and receiver_internal.h the state
 * both share.
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

PGDLLEXPORT void sc_receiver_main(Datum main_arg);

static bool sc_receiver_prepare(int n);
static int32 sc_receiver_advance_positions(const int64 *newpos);

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

	if (MyReceiver->consumer == NULL)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		return;
	}
	if (MyReceiver->wait_set == NULL)
	{
		MyReceiver->wait_set = CreateWaitEventSet(TopMemoryContext, 3);
		AddWaitEventToSet(MyReceiver->wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(MyReceiver->wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
		AddWaitEventToSet(MyReceiver->wait_set, WL_SOCKET_READABLE,
						  sc_kafka_consumer_wait_fd(MyReceiver->consumer), NULL, NULL);
	}
	if (latch_only && MyReceiver->latch_set == NULL)
	{
		MyReceiver->latch_set = CreateWaitEventSet(TopMemoryContext, 2);
		AddWaitEventToSet(MyReceiver->latch_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(MyReceiver->latch_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	}
	(void) WaitEventSetWait(latch_only ? MyReceiver->latch_set : MyReceiver->wait_set,
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
		if (TimestampDifferenceExceeds(MyReceiver->topic_checked_at, GetCurrentTimestamp(),
									   SC_TOPIC_CHECK_INTERVAL_MS))
		{
			MyReceiver->topic_checked_at = GetCurrentTimestamp();
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
				 errmsg("offset out of range on partition %s of cube %s: %s",
						sc_partition_name(MyReceiver->cube, res->partition),
						MyReceiver->cube->qualified, res->message),
				 errhint("streamcube never skips messages silently; the receiver starts again from its committed position.")));
	}
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("Kafka consumer of cube %s failed: %s", MyReceiver->cube->qualified, res->message)));
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
	if (MyReceiver->cube != NULL && MyReceiver->cube->rollups != NIL)
		return Max(sc_batch_max_rows, sc_rollup_batch_max_rows);
	return sc_batch_max_rows;
}

/* Room for a batch of the current size in MyReceiver->messages. */
static void
sc_receiver_size_messages(void)
{
	int			want = sc_receiver_batch_rows();

	if (MyReceiver->messages == NULL)
	{
		MyReceiver->messages = MemoryContextAllocZero(TopMemoryContext, sizeof(ScKafkaMessage) * want);
		MyReceiver->maxmessages = want;
	}
	else if (want > MyReceiver->maxmessages)
	{
		MyReceiver->messages = repalloc(MyReceiver->messages, sizeof(ScKafkaMessage) * want);
		MyReceiver->maxmessages = want;
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
	int			max = Min(sc_receiver_batch_rows(), MyReceiver->maxmessages);
	int64		max_bytes = (int64) sc_batch_max_kbytes * 1024;
	int64		bytes = 0;
	int			n = MyReceiver->carried;
	TimestampTz first = n > 0 ? GetCurrentTimestamp() : 0;
	int			hold_ms = sc_kafka_consumer_batch_hold_ms(MyReceiver->consumer, sc_batch_max_ms);

	for (int i = 0; i < n; i++)
		bytes += MyReceiver->messages[i].len;
	MyReceiver->carried = 0;

	for (;;)
	{
		ScKafkaPollResult res;
		int			got = n >= max ? 0 :
			sc_kafka_consumer_poll(MyReceiver->consumer, MyReceiver->messages + n, max - n, &res);

		if (n >= max)
			return n;
		if (res.status == SC_KAFKA_TOPIC_UNKNOWN)
		{
			sc_receiver_poll_failure(&res);
			if (MyReceiver->cube->paused)
			{
				sc_kafka_messages_release(MyReceiver->messages, n + got);
				return -1;
			}
			res.message[0] = '\0';
		}
		else if (res.status != SC_KAFKA_OK)
		{
			sc_kafka_messages_release(MyReceiver->messages, n + got);
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
			ScKafkaMessage *m = &MyReceiver->messages[i];
			int			p = sc_receiver_part_index(m->partition);

			if (p >= 0 && m->eof)
				MyReceiver->eof[p] = Max(MyReceiver->eof[p], MyReceiver->stops[p] >= 0
									  ? Min(m->offset, MyReceiver->stops[p]) : m->offset);
			if (p < 0 || m->eof || m->offset < MyReceiver->positions[p] || sc_receiver_past_stop(p, m))
			{
				sc_kafka_messages_release(m, 1);
				*m = MyReceiver->messages[n + got - 1];
				MyReceiver->messages[n + got - 1].handle = NULL;
				got--;
				i--;
				continue;
			}
			if (MyReceiver->next_ts[p] < 0)
				MyReceiver->next_ts[p] = m->timestamp;
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
	if (MyReceiver->consumer == NULL || MyReceiver->disconnected_since != 0)
		return;
	if (n > 0)
	{
		MyReceiver->last_message_at = now;
		MyReceiver->pace_batches++;
	}
	if (!MyReceiver->fetch_idle)
	{
		if (MyReceiver->fetch_derived &&
			TimestampDifferenceExceeds(MyReceiver->last_message_at, now, SC_IDLE_AFTER_MS))
		{
			MyReceiver->fetch_idle = true;
			sc_receiver_close_consumer();	/* opened again at the top */
		}
		return;
	}
	if (!TimestampDifferenceExceeds(MyReceiver->pace_since, now, SC_PACE_MS))
		return;
	if (MyReceiver->pace_batches >= SC_STEADY_BATCHES)
	{
		MyReceiver->fetch_idle = false;
		sc_receiver_close_consumer();
		return;
	}
	MyReceiver->pace_since = now;
	MyReceiver->pace_batches = 0;
}

/* Does some partition end past its position (control records only)? */
static bool
sc_receiver_eof_ahead(void)
{
	for (int p = 0; p < MyReceiver->nparts; p++)
		if (MyReceiver->eof[p] > MyReceiver->positions[p])
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
	int			np = MyReceiver->nparts;
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
		for (int j = i; j > 0 && MyReceiver->parts[order[j - 1]] > MyReceiver->parts[order[j]]; j--)
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
	sc_cube_row_lock_nowait(MyReceiver->cube_id);
	if (outcome->skip_used)
		sc_cube_row_skip_done(MyReceiver->cube_id);
	if (outcome->paused)
		sc_cube_row_pause_at(MyReceiver->cube_id, outcome->bad_partition, outcome->bad_offset,
							 outcome->bad_error);
	SPI_finish();
}

/* The row alone, before a batch whose last try found it held. */
static void
sc_receiver_lock_row_fn(void *arg)
{
	SPI_connect();
	sc_cube_row_lock_nowait(MyReceiver->cube_id);
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
		sc_ingest_end_batch(MyReceiver->ing, false);
	}
	else
		sc_receiver_commit();
	MyReceiver->carried = n;
	MyReceiver->row_backoff_ms = Min(Max(MyReceiver->row_backoff_ms * 2, 100), 1000);
	ereport(DEBUG1,
			(errmsg_internal("streamcube receiver of cube %s waits for the cube's row, held by another transaction; "
							 "tries again in %ld ms",
							 MyReceiver->cube->qualified, MyReceiver->row_backoff_ms)));
	pgstat_report_activity(STATE_RUNNING, "waiting for the cube's row");
	/* the latch only: messages coming in would cut the wait short */
	sc_receiver_wait_for(MyReceiver->row_backoff_ms, true);
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
	sc_ingest_end_batch(MyReceiver->ing, false);
	ereport(LOG,
			(errmsg("streamcube receiver of cube %s (%s) rolled back a batch: partition %s was reassigned",
					MyReceiver->cube->qualified, MyReceiver->replica_set,
					sc_partition_name(MyReceiver->cube, partition))));

	/*
	 * Nothing of the batch committed: all of it waits for the next batch,
	 * and following the new assignment drops the messages of partitions
	 * no longer ours.
	 */
	MyReceiver->carried = n;
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
		ScKafkaMessage *prev = &MyReceiver->messages[kept - 1];
		ScKafkaMessage *m = &MyReceiver->messages[i];

		if (m->partition == prev->partition && m->offset == prev->offset)
			sc_kafka_messages_release(m, 1);
		else
			MyReceiver->messages[kept++] = *m;
	}
	return kept;
}

/* The positions after the batch: past every message before its cut. */
static void
sc_receiver_new_positions(int64 *newpos, int n, const ScBatchOutcome *outcome)
{
	memcpy(newpos, MyReceiver->positions, sizeof(int64) * MyReceiver->nparts);
	for (int i = 0; i < outcome->cut; i++)
	{
		int			p = sc_receiver_part_index(MyReceiver->messages[i].partition);

		newpos[p] = Max(newpos[p], MyReceiver->messages[i].offset + 1);
	}
	/* Every message before a partition's end was in this batch or earlier. */
	if (outcome->cut == n)
		for (int p = 0; p < MyReceiver->nparts; p++)
			newpos[p] = Max(newpos[p], MyReceiver->eof[p]);
	/* Never past a stop point (an end seen before it was set). */
	for (int p = 0; p < MyReceiver->nparts; p++)
		if (MyReceiver->stops[p] >= 0)
			newpos[p] = Min(newpos[p], Max(MyReceiver->stops[p], MyReceiver->positions[p]));
}

/*
 * After COMMIT, the Kafka timestamps the lag in time is told by: of the
 * last message committed and of the first one kept for the next batch, by
 * partition (the messages are sorted).
 */
static void
sc_receiver_note_stamps(int n, int cut)
{
	for (int p = 0; p < MyReceiver->nparts; p++)
		MyReceiver->next_ts[p] = -1;
	for (int i = 0; i < n; i++)
	{
		int			p = sc_receiver_part_index(MyReceiver->messages[i].partition);

		if (i < cut)
			MyReceiver->last_ts[p] = MyReceiver->messages[i].timestamp;
		else if (MyReceiver->next_ts[p] < 0)
			MyReceiver->next_ts[p] = MyReceiver->messages[i].timestamp;
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

	sc_kafka_messages_release(MyReceiver->messages, outcome->cut);
	if (outcome->paused)
		sc_kafka_messages_release(MyReceiver->messages + outcome->cut, n - outcome->cut);
	else if (outcome->cut < n)
	{
		memmove(MyReceiver->messages, MyReceiver->messages + outcome->cut,
				sizeof(ScKafkaMessage) * (n - outcome->cut));
		MyReceiver->carried = n - outcome->cut;
		/* A window being sealed holds the rest back: do not spin. */
		if (outcome->cut == 0 && sc_ingest_missing_windows(MyReceiver->ing) == 0)
			sc_receiver_wait(100);
	}

	if (outcome->skip_used)
		MyReceiver->cube->skip_partition = -1;
	if (outcome->paused)
	{
		MyReceiver->cube->paused = true;
		ereport(WARNING,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("cube %s paused by a bad message at partition %s offset " INT64_FORMAT ": %s",
						MyReceiver->cube->qualified,
						sc_partition_name(MyReceiver->cube, outcome->bad_partition), outcome->bad_offset,
						outcome->bad_error),
				 errhint("Fix the cause and call streamcube_resume('%s'), or skip the message with streamcube_resume('%s', skip_bad_message => true).",
						 MyReceiver->cube->qualified, MyReceiver->cube->qualified)));
		pfree(outcome->bad_error);
	}

	/* Throughput over windows of at least a second. */
	now = GetCurrentTimestamp();
	MyReceiver->rows_total += outcome->rows;
	MyReceiver->rate_rows += outcome->rows;
	MyReceiver->tombstones_skipped += outcome->tombstones_skipped;
	MyReceiver->rows_direct += outcome->rows_direct;
	MyReceiver->rows_copy += outcome->rows_copy;
	if (outcome->cut > 0)
		MyReceiver->batches++;
	MyReceiver->last_batch_at = now;
	if (TimestampDifferenceExceeds(MyReceiver->rate_since, now, 1000))
	{
		MyReceiver->rows_per_sec = MyReceiver->rate_rows * 1000000.0 / (double) (now - MyReceiver->rate_since);
		MyReceiver->rate_rows = 0;
		MyReceiver->rate_since = now;
	}
	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	MyReceiver->slot->failures = 0;
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
	int64	   *newpos = palloc(sizeof(int64) * Max(MyReceiver->nparts, 1));
	int32		lost;

	sc_receiver_sort(MyReceiver->messages, n);
	n = sc_receiver_drop_duplicates(n);

	if (!sc_ingest_ready(MyReceiver->ing, MyReceiver->messages, n) && !sc_receiver_prepare(n))
	{
		pfree(newpos);
		return;					/* the messages wait, carried */
	}

	MyReceiver->carried = n;		/* kept if the cube changed: see begin_work */
	if (!sc_receiver_begin_work("ingesting a batch"))
	{
		/* Paused: the consumer starts again from the committed positions. */
		if (MyReceiver->cube->paused)
		{
			sc_kafka_messages_release(MyReceiver->messages, MyReceiver->carried);
			MyReceiver->carried = 0;
		}
		pfree(newpos);
		return;
	}
	/* The last try found the cube's row held: take it before writing again. */
	if (MyReceiver->row_backoff_ms > 0 && !sc_try_nowait(sc_receiver_lock_row_fn, NULL))
	{
		sc_receiver_row_busy(n, false);
		pfree(newpos);
		return;
	}
	MyReceiver->carried = 0;
	sc_ingest_batch(MyReceiver->ing, MyReceiver->messages, n, &outcome);
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
	MyReceiver->row_backoff_ms = 0;

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
	sc_ingest_end_batch(MyReceiver->ing, true);
	memcpy(MyReceiver->positions, newpos, sizeof(int64) * MyReceiver->nparts);
	pfree(newpos);
	sc_receiver_note_stamps(n, outcome.cut);
	/* Durable now: Kafka's tools may see them (option progress_group). */
	if (MyReceiver->cube->progress_group != NULL && MyReceiver->consumer != NULL)
		sc_kafka_consumer_commit_async(MyReceiver->consumer, MyReceiver->nparts,
									   MyReceiver->parts, MyReceiver->positions);
	sc_receiver_after_batch(n, &outcome);

	/* Windows the batch met that do not exist yet: their own transaction. */
	if (sc_ingest_missing_windows(MyReceiver->ing) > 0)
	{
		if (!sc_receiver_begin_work("creating windows"))
			return;
		SPI_connect();
		sc_ingest_create_windows(MyReceiver->ing);
		SPI_finish();
		sc_receiver_commit();
		sc_ingest_end_batch(MyReceiver->ing, true);
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
	ready = sc_ingest_prepare(MyReceiver->ing, MyReceiver->messages, n, &why);
	/* why is in SPI's memory, freed by SPI_finish: kept past the commit */
	if (!ready)
		why = MemoryContextStrdup(TopMemoryContext, why);
	SPI_finish();
	sc_receiver_commit();
	if (ready)
	{
		MyReceiver->prepare_backoff_ms = 0;
		return true;
	}
	MyReceiver->carried = n;
	if (MyReceiver->prepare_backoff_ms == 0)
		ereport(LOG,
				(errmsg("streamcube receiver of cube %s waits: %s", MyReceiver->cube->qualified, why)));
	sc_receiver_warn(why);
	pfree(why);
	MyReceiver->prepare_backoff_ms = Min(Max(MyReceiver->prepare_backoff_ms * 2, 250), 30000);
	sc_receiver_wait(MyReceiver->prepare_backoff_ms);
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
	int64	   *epochs = palloc(sizeof(int64) * Max(MyReceiver->nparts, 1));
	int32	   *parts = palloc(sizeof(int32) * Max(MyReceiver->nparts, 1));
	int64	   *from = palloc(sizeof(int64) * Max(MyReceiver->nparts, 1));
	int64	   *to = palloc(sizeof(int64) * Max(MyReceiver->nparts, 1));
	int32		lost;
	TimestampTz asked = 0;
	long		pause_ms = 100;	/* doubled up to 1 s: each try is a subtransaction */

	/* parts[] ascends: the order in which receivers lock positions */
	for (int p = 0; p < MyReceiver->nparts; p++)
		if (newpos[p] != MyReceiver->positions[p])
		{
			epochs[n] = MyReceiver->epochs[p];
			parts[n] = MyReceiver->parts[p];
			from[n] = MyReceiver->positions[p];
			to[n] = newpos[p];
			n++;
		}
	while (!sc_positions_lock_advance(MyReceiver->cube_id, MyReceiver->cube->qualified,
									  MyReceiver->replica_set, n, epochs, parts, from, to, &lost))
	{
		TimestampTz now = GetCurrentTimestamp();

		pgstat_report_activity(STATE_RUNNING, "waiting for the positions (a reassignment in progress?)");
		if (MyReceiver->consumer != NULL && TimestampDifferenceExceeds(asked, now, 1000))
		{
			for (int i = 0; i < MyReceiver->nparts; i++)
			{
				int64		hw = sc_kafka_consumer_query_high_watermark(MyReceiver->consumer, MyReceiver->parts[i],
																	   Min(sc_kafka_timeout_ms, 1000));

				if (hw >= 0)
					MyReceiver->high[i] = Max(MyReceiver->high[i], hw);
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
	if (!sc_ingest_invalidation_due(MyReceiver->ing))
		return;
	sc_receiver_begin("invalidating the cube's table");
	sc_ingest_send_invalidation(MyReceiver->ing);
	sc_receiver_commit();
	sc_ingest_end_batch(MyReceiver->ing, true);
}

/* Create the partitions of the current and next window when time moves on. */
static void
sc_receiver_windows_ahead(void)
{
	int64		now = sc_cube_time(MyReceiver->cube, GetCurrentTimestamp());
	int64		window = sc_window_start(MyReceiver->cube, now);

	if (window == MyReceiver->current_window && !MyReceiver->table_changed)
		return;
	if (!sc_receiver_begin_work("creating windows ahead"))
		return;
	SPI_connect();
	sc_ingest_prepare_windows(MyReceiver->ing, now);
	SPI_finish();
	sc_receiver_commit();
	sc_ingest_end_batch(MyReceiver->ing, true);
	MyReceiver->current_window = window;
}

/* ----------------------------------------------------------------
 * New partitions and topics
 * ----------------------------------------------------------------
 * Look at the topics' partition counts every streamcube.metadata_interval,
 * so that partitions added to a topic are assigned (option new_partitions
 * = assign) or show in streamcube.consumers as unassigned_partitions, and
 * at the topics a cube's pattern matches, so that new ones are read.
 */

/*
 * In a subtransaction: ask Kafka for the topics' partitions (a pattern's
 * new topics among them), assign the new ones.
 */
static void
sc_receiver_adopt_cb(void *arg)
{
	ScCube	   *cube = MyReceiver->cube;
	List	   *new_topics = NIL;
	ScTopicList topics = cube->topics;
	List	   *kafka;

	if (cube->topic_pattern != NULL)
	{
		List	   *all = sc_kafka_describe_topics(MyReceiver->conn, NULL, false,
												   sc_kafka_timeout_ms, NULL, NULL);
		ListCell   *lc;

		new_topics = sc_topics_match_kafka(cube, all);
		if (new_topics == NIL && !*(bool *) arg)
			return;				/* no new topic; the others did not grow */
		/* described as they will be numbered: after the cube's others */
		topics.n = cube->topics.n + list_length(new_topics);
		topics.names = palloc(sizeof(char *) * topics.n);
		topics.removed = palloc0(sizeof(bool) * topics.n);
		memcpy(topics.names, cube->topics.names, sizeof(char *) * cube->topics.n);
		for (int t = 0; t < cube->topics.n; t++)
			topics.removed[t] = sc_topic_removed(&cube->topics, t);
		foreach(lc, new_topics)
			topics.names[cube->topics.n + foreach_current_index(lc)] = strVal(lfirst(lc));
	}
	kafka = sc_kafka_describe_topics(MyReceiver->conn, &topics, true, sc_kafka_timeout_ms, NULL, NULL);

	/* the cube changed meanwhile: read it again, then look again */
	if (sc_reassign_adopt_partitions(cube, kafka, new_topics) >= 0)
		MyReceiver->known_partitions = Max(MyReceiver->known_partitions, list_length(kafka));
}

static void
sc_receiver_refresh_metadata(void)
{
	int			n;
	bool		grew;

	if (!TimestampDifferenceExceeds(MyReceiver->metadata_at, GetCurrentTimestamp(),
									sc_metadata_interval_ms))
		return;
	n = sc_receiver_count_partitions(Min(sc_kafka_timeout_ms, 2000));
	MyReceiver->metadata_at = GetCurrentTimestamp();

	/*
	 * A topic grew (under new_partitions = assign), or the cube has a
	 * pattern, which may match new topics: give the new partitions to the
	 * cube's replica sets (the launcher then tells every receiver of the
	 * cube, this one included).
	 */
	grew = n > MyReceiver->known_partitions && MyReceiver->cube->assign_new_partitions;
	if (grew || MyReceiver->cube->topic_pattern != NULL)
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
		edata = sc_try(sc_receiver_adopt_cb, &grew);
		sc_receiver_commit();
		MemoryContextSwitchTo(old);
		if (edata != NULL)
		{
			/* Kafka did not answer: look again at the next interval. */
			sc_receiver_warn(edata->message);
			ereport(LOG,
					(errmsg("streamcube receiver of cube %s could not assign the partitions added to its topics: %s",
							MyReceiver->cube->qualified, edata->message)));
		}
		MemoryContextDelete(cxt);
	}
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
	MyReceiver->rate_since = GetCurrentTimestamp();
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
		stop = MyReceiver->slot->stop_wanted;
		pause = MyReceiver->slot->pause_wanted;
		config_version = MyReceiver->slot->config_version;
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
		if ((int32) (config_version - (uint32) MyReceiver->cube->config_version) > 0)
			sc_receiver_reload(config_version);

		if (sc_receiver_at_stop() && !MyReceiver->stop_told)
			sc_receiver_tell_stop();

		/*
		 * A cube paused at its stop point still reads up to it, when a
		 * crash took its positions back to the checkpoints.
		 */
		if (pause || sc_receiver_at_stop() ||
			(MyReceiver->cube->paused && !MyReceiver->cube->stop_reached))
		{
			if (MyReceiver->consumer != NULL)
			{
				/* Kafka's ends are asked for again at once. */
				sc_receiver_close_consumer();
				MyReceiver->rows_per_sec = 0;
				MyReceiver->paused_probe_at = 0;
				ereport(LOG, (errmsg("streamcube receiver of cube %s paused",
									 MyReceiver->cube->qualified)));
			}
			sc_receiver_set_state(SC_RECEIVER_PAUSED);
			sc_receiver_paused_probe();
			sc_receiver_wait(1000);
			continue;
		}
		sc_receiver_follow_group();
		if (MyReceiver->consumer == NULL)
		{
			if (!sc_receiver_open_consumer())
				continue;		/* paused: Kafka lost what the cube needs */
			sc_receiver_reached_kafka(GetCurrentTimestamp());	/* it checked the topic */
			sc_receiver_set_state(SC_RECEIVER_RUNNING);
			sc_receiver_publish();
		}

		sc_receiver_windows_ahead();
		if (MyReceiver->consumer == NULL)
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
			if (TimestampDifferenceExceeds(MyReceiver->last_batch_at, GetCurrentTimestamp(), 2000))
				MyReceiver->rows_per_sec = 0;
			if (MyReceiver->consumer == NULL)
				continue;		/* a new one opens at the top of the loop */
			sc_kafka_consumer_report(MyReceiver->consumer);
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
	MyReceiver->topic_counts = MemoryContextAlloc(TopMemoryContext, sizeof(int) * SC_SOURCE_MAX_TOPICS);
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
	MyReceiver->slotno = slotno;
	MyReceiver->slot = slot;
	MyReceiver->cube_id = slot->cube_id;
	MyReceiver->topic_partitions = -1;
	MyReceiver->ntopic_counts = 0;
	slot->ntopics = 0;
	slot->epoch = -1;
	slot->contact_at = 0;
	slot->disconnected_since = 0;
	strlcpy(MyReceiver->replica_set, slot->replica_set, NAMEDATALEN);
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
