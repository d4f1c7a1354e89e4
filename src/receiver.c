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
 * Pausing closes the Kafka consumer; resuming opens a new one at the
 * committed positions.  Nothing read but not committed can therefore be
 * skipped, whatever librdkafka had prefetched.  The same holds after a
 * crash: unlogged rows and unlogged positions are emptied together, and
 * the receiver starts again from the logged checkpoints.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

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
#include "tcop/tcopprot.h"
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

	int			nparts;
	int32	   *parts;
	int64	   *positions;		/* committed: next offset to read */
	int64	   *high;			/* last known high watermarks */
	int64	   *eof;			/* end of partition seen at this offset, -1 */

	ScKafkaMessage *messages;
	int			maxmessages;
	SPIPlanPtr	position_plan;
	int64		current_window;

	/* throughput */
	uint64		rows_total;
	uint64		rate_rows;
	TimestampTz rate_since;
	double		rows_per_sec;
	TimestampTz last_batch_at;
} ScReceiver;

static ScReceiver receiver;

/* ----------------------------------------------------------------
 * Shared-memory slot
 * ----------------------------------------------------------------
 */
static void
sc_receiver_set_state(ScReceiverState state)
{
	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	receiver.slot->state = state;
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
			slot->state = code == 0 ? SC_RECEIVER_STOPPED : SC_RECEIVER_FAILED;
	}
	LWLockRelease(sc_shared->lock);
}

/* Publish positions, watermarks and throughput. */
static void
sc_receiver_publish(void)
{
	ScReceiverSlot *slot = receiver.slot;
	int			n = Min(receiver.nparts, SC_MAX_SLOT_PARTITIONS);

	if (receiver.consumer)
		for (int i = 0; i < receiver.nparts; i++)
		{
			int64		hw = sc_kafka_consumer_high_watermark(receiver.consumer, receiver.parts[i]);

			if (hw >= 0)
				receiver.high[i] = hw;
		}

	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	slot->npartitions = n;
	for (int i = 0; i < n; i++)
	{
		slot->parts[i].partition = receiver.parts[i];
		slot->parts[i].position = receiver.positions[i];
		slot->parts[i].high_watermark = receiver.high[i];
	}
	slot->rows_total = receiver.rows_total;
	slot->rows_per_sec = receiver.rows_per_sec;
	slot->last_batch_at = receiver.last_batch_at;
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

static void
sc_receiver_commit(void)
{
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * Load the cube, the assigned partitions and their positions.  Positions
 * missing (first start, or after a crash emptied the unlogged table) are
 * taken from the logged checkpoints.
 */
static bool
sc_receiver_load(void)
{
	MemoryContext cxt = TopMemoryContext;
	ScPrivilegeSave save;
	Datum		args[2];
	Oid			types[2] = {INT4OID, TEXTOID};
	MemoryContext old;

	sc_receiver_begin("loading cube");
	old = MemoryContextSwitchTo(cxt);
	receiver.cube = sc_cube_load(receiver.cube_id, true);
	if (receiver.cube == NULL)
	{
		MemoryContextSwitchTo(old);
		sc_receiver_commit();
		return false;
	}
	receiver.conn = sc_cluster_conninfo(receiver.cube->cluster);
	MemoryContextSwitchTo(old);

	args[0] = Int32GetDatum(receiver.cube_id);
	args[1] = CStringGetTextDatum(receiver.replica_set);
	SPI_connect();
	sc_catalog_enter(&save);
	SPI_execute_with_args("INSERT INTO streamcube.consume_positions (cube_id, partition, position) "
						  "SELECT k.cube_id, k.partition, k.\"offset\" "
						  "FROM streamcube.checkpoints k "
						  "JOIN streamcube.assignments a USING (cube_id, partition) "
						  "WHERE k.cube_id = $1 AND a.replica_set = $2 "
						  "ON CONFLICT DO NOTHING",
						  2, types, args, NULL, false, 0);
	SPI_execute_with_args("SELECT p.partition, p.position "
						  "FROM streamcube.consume_positions p "
						  "JOIN streamcube.assignments a USING (cube_id, partition) "
						  "WHERE p.cube_id = $1 AND a.replica_set = $2 "
						  "ORDER BY p.partition",
						  2, types, args, NULL, false, 0);
	sc_catalog_leave(&save);

	receiver.nparts = (int) SPI_processed;
	receiver.parts = MemoryContextAlloc(cxt, sizeof(int32) * Max(receiver.nparts, 1));
	receiver.positions = MemoryContextAlloc(cxt, sizeof(int64) * Max(receiver.nparts, 1));
	receiver.high = MemoryContextAlloc(cxt, sizeof(int64) * Max(receiver.nparts, 1));
	receiver.eof = MemoryContextAlloc(cxt, sizeof(int64) * Max(receiver.nparts, 1));
	for (int i = 0; i < receiver.nparts; i++)
	{
		bool		isnull;

		receiver.parts[i] = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		receiver.positions[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
		receiver.high[i] = -1;
		receiver.eof[i] = -1;
	}
	SPI_finish();

	old = MemoryContextSwitchTo(cxt);
	receiver.ing = sc_ingest_create(receiver.cube);
	MemoryContextSwitchTo(old);
	sc_receiver_commit();
	return true;
}

/* Re-read what may change while the cube runs: pause and skip. */
static void
sc_receiver_reload(uint32 config_version)
{
	ScCube	   *fresh;

	sc_receiver_begin("reloading cube");
	fresh = sc_cube_load(receiver.cube_id, true);
	if (fresh != NULL)
	{
		receiver.cube->paused = fresh->paused;
		receiver.cube->skip_partition = fresh->skip_partition;
		receiver.cube->skip_offset = fresh->skip_offset;
		if (receiver.cube->skip_error)
			pfree(receiver.cube->skip_error);
		receiver.cube->skip_error = fresh->skip_error ? MemoryContextStrdup(TopMemoryContext, fresh->skip_error) : NULL;
		receiver.cube->config_version = fresh->config_version;
	}
	sc_receiver_commit();
}

/*
 * Lock the cube's catalog row for the rest of the transaction, so that
 * streamcube_drop_cube() waits for the batch in flight; returns false when
 * the cube is gone.
 */
static bool
sc_receiver_lock_cube(void)
{
	ScPrivilegeSave save;
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(receiver.cube_id);
	bool		exists;

	SPI_connect();
	sc_catalog_enter(&save);
	SPI_execute_with_args("SELECT 1 FROM streamcube.cubes WHERE cube_id = $1 FOR KEY SHARE",
						  1, &type, &value, NULL, false, 1);
	sc_catalog_leave(&save);
	exists = SPI_processed > 0;
	SPI_finish();
	return exists;
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

static int
sc_receiver_part_index(int32 partition)
{
	for (int i = 0; i < receiver.nparts; i++)
		if (receiver.parts[i] == partition)
			return i;
	return -1;
}

/* ----------------------------------------------------------------
 * Kafka
 * ----------------------------------------------------------------
 */

/* Fail loudly if a position has left Kafka's retention. */
static void
sc_receiver_check_retention(void)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "streamcube retention check",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	List	   *partitions = sc_kafka_describe(receiver.conn, receiver.cube->topic, true,
											   sc_kafka_timeout_ms);
	ListCell   *lc;

	foreach(lc, partitions)
	{
		ScKafkaPartitionInfo *p = lfirst(lc);
		int			i = sc_receiver_part_index(p->partition);

		if (i < 0)
			continue;
		receiver.high[i] = p->high_watermark;
		if (receiver.positions[i] < p->low_watermark)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("offsets " INT64_FORMAT " to " INT64_FORMAT " of partition %d of topic \"%s\" are no longer in Kafka",
							receiver.positions[i], p->low_watermark - 1, p->partition, receiver.cube->topic),
					 errdetail("Cube %s needs offset " INT64_FORMAT "; the earliest offset Kafka still holds is " INT64_FORMAT ". Kafka deleted the messages in between (retention) before streamcube could read them, or read them again after a crash.",
							   receiver.cube->qualified, receiver.positions[i], p->low_watermark),
					 errhint("streamcube never skips messages silently. Recreate the cube to start over, and raise the topic's retention.ms.")));
		if (receiver.positions[i] > p->high_watermark)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("partition %d of topic \"%s\" ends at offset " INT64_FORMAT ", before the position " INT64_FORMAT " of cube %s",
							p->partition, receiver.cube->topic, p->high_watermark,
							receiver.positions[i], receiver.cube->qualified),
					 errhint("Was the topic deleted and created again? Recreate the cube.")));
	}
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
}

static void
sc_receiver_open_consumer(void)
{
	char		group[NAMEDATALEN * 2 + 64];

	sc_receiver_check_retention();
	snprintf(group, sizeof(group), "streamcube-%u-%d-%s", MyDatabaseId, receiver.cube_id,
			 receiver.replica_set);
	receiver.consumer = sc_kafka_consumer_create(receiver.conn, group, sc_fetch_queue_kbytes);
	sc_kafka_consumer_assign(receiver.consumer, receiver.cube->topic, receiver.nparts,
							 receiver.parts, receiver.positions);
}

static void
sc_receiver_close_consumer(void)
{
	if (receiver.consumer == NULL)
		return;
	sc_kafka_consumer_destroy(receiver.consumer);
	receiver.consumer = NULL;
	for (int p = 0; p < receiver.nparts; p++)
		receiver.eof[p] = -1;
}

/* ----------------------------------------------------------------
 * Batches
 * ----------------------------------------------------------------
 */
static void
sc_receiver_wait(long timeout_ms)
{
	int			events = WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH;
	pgsocket	fd = PGINVALID_SOCKET;

	if (receiver.consumer)
	{
		events |= WL_SOCKET_READABLE;
		fd = sc_kafka_consumer_wait_fd(receiver.consumer);
	}
	(void) WaitLatchOrSocket(MyLatch, events, fd, timeout_ms, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
}

static void
sc_receiver_poll_failure(ScKafkaPollResult *res)
{
	if (res->status == SC_KAFKA_OUT_OF_RANGE)
	{
		/* Name the lost range precisely if Kafka tells us the low watermark. */
		sc_receiver_check_retention();
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("offset out of range on partition %d of topic \"%s\": %s",
						res->partition, receiver.cube->topic, res->message),
				 errhint("streamcube never skips messages silently. Recreate the cube to start over.")));
	}
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("Kafka consumer of cube %s failed: %s", receiver.cube->qualified, res->message)));
}

/*
 * Collect up to batch_max_rows new messages, waiting at most batch_max_ms
 * after the first one.  Returns 0 after an idle wait.
 */
static int
sc_receiver_collect(void)
{
	int			max = Min(sc_batch_max_rows, receiver.maxmessages);
	int64		max_bytes = (int64) sc_batch_max_kbytes * 1024;
	int64		bytes = 0;
	int			n = 0;
	TimestampTz first = 0;

	for (;;)
	{
		ScKafkaPollResult res;
		int			got = sc_kafka_consumer_poll(receiver.consumer, receiver.messages + n,
												 max - n, &res);

		if (res.status != SC_KAFKA_OK)
		{
			sc_kafka_messages_release(receiver.messages, n + got);
			sc_receiver_poll_failure(&res);
		}
		if (res.message[0] != '\0')
			sc_receiver_warn(res.message);

		/*
		 * Keep only messages at or past the committed position; note where
		 * partitions end.
		 */
		for (int i = n; i < n + got; i++)
		{
			ScKafkaMessage *m = &receiver.messages[i];
			int			p = sc_receiver_part_index(m->partition);

			if (p >= 0 && m->eof)
				receiver.eof[p] = Max(receiver.eof[p], m->offset);
			if (p < 0 || m->eof || m->offset < receiver.positions[p])
			{
				sc_kafka_messages_release(m, 1);
				*m = receiver.messages[n + got - 1];
				receiver.messages[n + got - 1].handle = NULL;
				got--;
				i--;
				continue;
			}
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
		if (TimestampDifferenceExceeds(first, GetCurrentTimestamp(), sc_batch_max_ms))
			return n;
		if (got == 0)
		{
			long		secs;
			int			usecs;

			TimestampDifference(GetCurrentTimestamp(),
								TimestampTzPlusMilliseconds(first, sc_batch_max_ms),
								&secs, &usecs);
			sc_receiver_wait(secs * 1000 + usecs / 1000 + 1);
			CHECK_FOR_INTERRUPTS();
		}
	}
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

static void
sc_receiver_advance(int index, int64 from, int64 to)
{
	Datum		values[4];
	ScPrivilegeSave save;
	int			ret;

	if (receiver.position_plan == NULL)
	{
		Oid			types[4] = {INT4OID, INT4OID, INT8OID, INT8OID};

		sc_catalog_enter(&save);
		receiver.position_plan =
			SPI_prepare("UPDATE streamcube.consume_positions "
						"SET position = $3, updated_at = now() "
						"WHERE cube_id = $1 AND partition = $2 AND position = $4",
						4, types);
		sc_catalog_leave(&save);
		SPI_keepplan(receiver.position_plan);
	}
	values[0] = Int32GetDatum(receiver.cube_id);
	values[1] = Int32GetDatum(receiver.parts[index]);
	values[2] = Int64GetDatum(to);
	values[3] = Int64GetDatum(from);
	sc_catalog_enter(&save);
	ret = SPI_execute_plan(receiver.position_plan, values, NULL, false, 0);
	sc_catalog_leave(&save);
	if (ret != SPI_OK_UPDATE || SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("consume position of partition %d of cube %s is no longer " INT64_FORMAT,
						receiver.parts[index], receiver.cube->qualified, from),
				 errdetail("Another receiver moved it, or the cube was dropped; this batch is rolled back.")));
}

/* Commit one batch: rows, dead letters and positions in one transaction. */
static void
sc_receiver_process(int n)
{
	ScBatchOutcome outcome;
	int64	   *newpos = palloc(sizeof(int64) * receiver.nparts);
	TimestampTz now;

	qsort(receiver.messages, n, sizeof(ScKafkaMessage), sc_message_cmp);

	sc_receiver_begin("ingesting a batch");
	if (!sc_receiver_lock_cube())
		sc_receiver_cube_gone();
	sc_ingest_batch(receiver.ing, receiver.messages, n, &outcome);

	memcpy(newpos, receiver.positions, sizeof(int64) * receiver.nparts);
	for (int i = 0; i < outcome.cut; i++)
	{
		int			p = sc_receiver_part_index(receiver.messages[i].partition);

		newpos[p] = Max(newpos[p], receiver.messages[i].offset + 1);
	}
	/* Every message before a partition's end was in this batch or earlier. */
	if (!outcome.paused)
		for (int p = 0; p < receiver.nparts; p++)
			newpos[p] = Max(newpos[p], receiver.eof[p]);

	SPI_connect();
	for (int p = 0; p < receiver.nparts; p++)
		if (newpos[p] != receiver.positions[p])
			sc_receiver_advance(p, receiver.positions[p], newpos[p]);

	if (outcome.skip_used || outcome.paused)
	{
		ScPrivilegeSave save;
		Oid			types[4] = {INT4OID, INT4OID, INT8OID, TEXTOID};
		Datum		values[4];

		values[0] = Int32GetDatum(receiver.cube_id);
		values[1] = Int32GetDatum(outcome.bad_partition);
		values[2] = Int64GetDatum(outcome.bad_offset);
		values[3] = CStringGetTextDatum(outcome.bad_error ? outcome.bad_error : "");
		sc_catalog_enter(&save);
		if (outcome.skip_used)
			SPI_execute_with_args("UPDATE streamcube.cubes SET skip_partition = NULL, skip_offset = NULL, skip_error = NULL "
								  "WHERE cube_id = $1", 1, types, values, NULL, false, 0);
		if (outcome.paused)
			SPI_execute_with_args("UPDATE streamcube.cubes SET paused = true, "
								  "bad_partition = $2, bad_offset = $3, bad_error = $4, "
								  "config_version = config_version + 1 WHERE cube_id = $1",
								  4, types, values, NULL, false, 0);
		sc_catalog_leave(&save);
	}
	SPI_finish();
	sc_receiver_commit();
	sc_ingest_end_batch(receiver.ing, true);

	memcpy(receiver.positions, newpos, sizeof(int64) * receiver.nparts);
	pfree(newpos);
	sc_kafka_messages_release(receiver.messages, n);

	if (outcome.skip_used)
		receiver.cube->skip_partition = -1;
	if (outcome.paused)
	{
		receiver.cube->paused = true;
		ereport(WARNING,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("cube %s paused by a bad message at partition %d offset " INT64_FORMAT ": %s",
						receiver.cube->qualified, outcome.bad_partition, outcome.bad_offset,
						outcome.bad_error),
				 errhint("Fix the cause and call streamcube_resume('%s'), or skip the message with streamcube_resume('%s', skip_bad_message => true).",
						 receiver.cube->qualified, receiver.cube->qualified)));
		pfree(outcome.bad_error);
	}

	/* Throughput over windows of at least a second. */
	now = GetCurrentTimestamp();
	receiver.rows_total += outcome.rows;
	receiver.rate_rows += outcome.rows;
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

/* Create the partitions of the current and next window when time moves on. */
static void
sc_receiver_windows_ahead(void)
{
	int64		now = (int64) GetCurrentTimestamp();
	int64		window;

	if (receiver.cube->time_type == TIMESTAMPOID)
		now = (int64) DatumGetTimestamp(DirectFunctionCall1(timestamptz_timestamp,
															TimestampTzGetDatum(now)));
	window = sc_window_start(receiver.cube, now);
	if (window == receiver.current_window)
		return;
	sc_receiver_begin("creating windows ahead");
	if (!sc_receiver_lock_cube())
		sc_receiver_cube_gone();
	SPI_connect();
	sc_ingest_prepare_windows(receiver.ing, now);
	SPI_finish();
	sc_receiver_commit();
	sc_ingest_end_batch(receiver.ing, true);
	receiver.current_window = window;
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

	receiver.maxmessages = sc_batch_max_rows;
	receiver.messages = MemoryContextAllocZero(TopMemoryContext,
											   sizeof(ScKafkaMessage) * receiver.maxmessages);
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
			if (sc_batch_max_rows > receiver.maxmessages)
			{
				receiver.messages = repalloc(receiver.messages,
											 sizeof(ScKafkaMessage) * sc_batch_max_rows);
				receiver.maxmessages = sc_batch_max_rows;
			}
		}

		LWLockAcquire(sc_shared->lock, LW_SHARED);
		stop = receiver.slot->stop_wanted;
		pause = receiver.slot->pause_wanted;
		config_version = receiver.slot->config_version;
		LWLockRelease(sc_shared->lock);

		if (stop)
			break;
		if (config_version != (uint32) receiver.cube->config_version)
			sc_receiver_reload(config_version);

		if (pause || receiver.cube->paused)
		{
			if (receiver.consumer != NULL)
			{
				/* Without a consumer, Kafka's watermarks are unknown. */
				sc_receiver_close_consumer();
				for (int i = 0; i < receiver.nparts; i++)
					receiver.high[i] = -1;
				receiver.rows_per_sec = 0;
				sc_receiver_publish();
				ereport(LOG, (errmsg("streamcube receiver of cube %s paused",
									 receiver.cube->qualified)));
			}
			sc_receiver_set_state(SC_RECEIVER_PAUSED);
			sc_receiver_wait(1000);
			continue;
		}
		if (receiver.consumer == NULL)
		{
			sc_receiver_open_consumer();
			sc_receiver_set_state(SC_RECEIVER_RUNNING);
		}

		sc_receiver_windows_ahead();

		{
			int			n = sc_receiver_collect();

			if (n > 0 || sc_receiver_eof_ahead())
				sc_receiver_process(n);
		}

		if (TimestampDifferenceExceeds(last_publish, GetCurrentTimestamp(), 1000))
		{
			if (TimestampDifferenceExceeds(receiver.last_batch_at, GetCurrentTimestamp(), 2000))
				receiver.rows_per_sec = 0;
			sc_kafka_consumer_report(receiver.consumer);
			sc_receiver_publish();
			last_publish = GetCurrentTimestamp();
		}
	}

	sc_receiver_set_state(SC_RECEIVER_STOPPING);
	sc_receiver_close_consumer();
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
	slot->state = SC_RECEIVER_STARTING;
	slot->started_at = GetCurrentTimestamp();
	/* last_error stays: it tells why the previous attempt failed. */
	dboid = slot->dboid;
	owner = slot->owner;
	receiver.slotno = slotno;
	receiver.slot = slot;
	receiver.cube_id = slot->cube_id;
	strlcpy(receiver.replica_set, slot->replica_set, NAMEDATALEN);
	LWLockRelease(sc_shared->lock);
	before_shmem_exit(sc_receiver_detach, (Datum) 0);

	BackgroundWorkerInitializeConnectionByOid(dboid, owner, 0);
	pgstat_report_appname("streamcube receiver");
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);

	PG_TRY();
	{
		sc_receiver_run();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(TopMemoryContext);
		edata = CopyErrorData();
		LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
		sc_slot_set_error(slot, edata->message);
		slot->state = SC_RECEIVER_FAILED;
		LWLockRelease(sc_shared->lock);
		PG_RE_THROW();
	}
	PG_END_TRY();

	sc_receiver_close_consumer();
	proc_exit(0);
}
