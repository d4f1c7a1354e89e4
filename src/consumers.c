/*-------------------------------------------------------------------------
 *
 * consumers.c
 *		The monitoring functions behind the streamcube.* views:
 *		streamcube._receivers() (the receiver slots of shared memory as
 *		rows, behind streamcube.consumers) and streamcube._segment_rows()
 *		(exact row counts, behind streamcube.segments), and streamcube.lag()
 *		(per partition, from Kafka and the catalog).
 *
 * Slots are copied under the shared lock and turned into rows afterwards,
 * so a slow client never holds up a receiver.  A slot is shown only to
 * roles that may SELECT its cube: errors quote message contents.
 *
 * Row counts are taken with a heap scan in C, never with SQL: a count(*)
 * run for a superuser reading the view would run whatever a cube owner
 * made of a window (a view through a "_RETURN" rule, functions of its
 * own).  Only a plain table that is still a partition of its cube is
 * counted, and only for a reader who may SELECT it and to whom no
 * row-level security applies.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "access/heapam.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/acl.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/datum.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "catalog/pg_inherits.h"
#include "executor/spi.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"

#include "cube.h"
#include "kafka.h"

PG_FUNCTION_INFO_V1(sc_receivers);
PG_FUNCTION_INFO_V1(sc_receiver_slots);
PG_FUNCTION_INFO_V1(sc_segment_rows);
PG_FUNCTION_INFO_V1(sc_rollup_stats);
PG_FUNCTION_INFO_V1(sc_cube_lag);
PG_FUNCTION_INFO_V1(sc_progress);

#define SC_RECEIVER_COLS 27		/* as 0.4.0 declares them; 0.3.0 declared the first 22,
									 * 0.2.0 the first 17 */

/*
 * How long the oldest message not consumed of a partition has waited, in
 * seconds at now; false when not known.  Its Kafka timestamp says it, when
 * it is not ahead of the server's clock; the server's own clock bounds it:
 * every message still to read came after the partition was last seen with
 * nothing left to read (caught_up_at).  A timestamp from the future (a
 * producer's clock ahead, CreateTime) is not believed: the bound is the
 * answer.  A producer's clock behind cannot make the age exceed the bound.
 */
static bool
sc_age_seconds(const ScPartitionStat *ps, TimestampTz now, double *age)
{
	double		bound = ps->caught_up_at != 0
		? Max((double) (now - ps->caught_up_at) / USECS_PER_SEC, 0.0) : -1;

	if (ps->oldest_ts >= 0 && sc_kafka_ms_timestamptz(ps->oldest_ts) <= now)
	{
		*age = (double) (now - sc_kafka_ms_timestamptz(ps->oldest_ts)) / USECS_PER_SEC;
		if (bound >= 0)
			*age = Min(*age, bound);
		return true;
	}
	*age = bound;
	return bound >= 0;
}

/* streamcube._receiver_slots(): receiver slots in use, and there are. */
Datum
sc_receiver_slots(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[2];
	bool		nulls[2] = {false, false};

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "streamcube._receiver_slots() must return a record");
	values[0] = Int32GetDatum(sc_slots_in_use());
	values[1] = Int32GetDatum(sc_shared->nslots);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}

/* A receiver slot as it was, with its partitions and its topics' counts. */
typedef struct ScSlotCopy
{
	ScReceiverSlot slot;
	ScPartitionStat *parts;
	int32	   *counts;
} ScSlotCopy;

/* Copy this database's slots in use at one moment; how many. */
static int
sc_copy_slots(ScSlotCopy *copies)
{
	int			n = 0;

	LWLockAcquire(sc_shared->lock, LW_SHARED);
	for (int s = 0; s < sc_shared->nslots; s++)
		if (sc_shared->slots[s].in_use && sc_shared->slots[s].dboid == MyDatabaseId)
		{
			ScReceiverSlot *slot = &sc_shared->slots[s];

			memcpy(&copies[n].slot, slot, sizeof(ScReceiverSlot));
			copies[n].parts = palloc(sizeof(ScPartitionStat) * Max(slot->npartitions, 1));
			memcpy(copies[n].parts, sc_slot_parts(slot), sizeof(ScPartitionStat) * slot->npartitions);
			copies[n].counts = palloc(sizeof(int32) * Max(slot->ntopics, 1));
			memcpy(copies[n].counts, sc_slot_topic_counts(slot), sizeof(int32) * slot->ntopics);
			n++;
		}
	LWLockRelease(sc_shared->lock);
	return n;
}

Datum
sc_receivers(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ScSlotCopy *copy;
	int			n;

	InitMaterializedSRF(fcinfo, 0);
	copy = palloc(sizeof(ScSlotCopy) * sc_shared->nslots);
	n = sc_copy_slots(copy);

	for (int i = 0; i < n; i++)
	{
		ScReceiverSlot *slot = &copy[i].slot;
		bool		missing = false;
		Datum		values[SC_RECEIVER_COLS];
		bool		nulls[SC_RECEIVER_COLS];
		Datum	   *parts = palloc(sizeof(Datum) * Max(slot->npartitions, 1));
		Datum	   *positions = palloc(sizeof(Datum) * Max(slot->npartitions, 1));
		Datum	   *highs = palloc(sizeof(Datum) * Max(slot->npartitions, 1));
		Datum	   *ages = palloc(sizeof(Datum) * Max(slot->npartitions, 1));
		bool	   *ages_null = palloc(sizeof(bool) * Max(slot->npartitions, 1));
		int64		lag = 0;
		bool		lag_known = slot->npartitions > 0;
		double		lag_seconds = 0;
		bool		seconds_known = slot->npartitions > 0;
		TimestampTz now = GetCurrentTimestamp();
		bool		disconnected = slot->state == SC_RECEIVER_RUNNING && slot->disconnected_since != 0;

		if (!OidIsValid(slot->relid) ||
			pg_class_aclcheck_ext(slot->relid, GetUserId(), ACL_SELECT, &missing) != ACLCHECK_OK ||
			missing)
			continue;

		memset(nulls, 0, sizeof(nulls));
		for (int p = 0; p < slot->npartitions; p++)
		{
			ScPartitionStat *ps = &copy[i].parts[p];

			parts[p] = Int32GetDatum(ps->partition);
			positions[p] = Int64GetDatum(ps->position);
			highs[p] = Int64GetDatum(ps->high_watermark);
			ages[p] = Float8GetDatum(0.0);
			ages_null[p] = false;
			if (ps->high_watermark < 0)
			{
				lag_known = seconds_known = false;
				ages_null[p] = true;
			}
			else if (ps->position < ps->high_watermark)
			{
				double		age;

				lag += ps->high_watermark - ps->position;
				if (!sc_age_seconds(ps, now, &age))
				{
					seconds_known = false;
					ages_null[p] = true;
				}
				else
				{
					ages[p] = Float8GetDatum(age);
					lag_seconds = Max(lag_seconds, age);
				}
			}

			/*
			 * Kafka does not answer: whatever came since its last answer
			 * waits, as far as anyone here can tell.  Lag in time is at
			 * least the time since then, and rises until it answers.
			 */
			if (disconnected && slot->contact_at != 0)
			{
				double		silent = Max((double) (now - slot->contact_at) / USECS_PER_SEC, 0.0);

				ages[p] = Float8GetDatum(ages_null[p] ? silent : Max(DatumGetFloat8(ages[p]), silent));
				ages_null[p] = false;
			}
		}
		if (disconnected && slot->contact_at != 0)
		{
			seconds_known = true;
			for (int p = 0; p < slot->npartitions; p++)
				lag_seconds = Max(lag_seconds, DatumGetFloat8(ages[p]));
		}

		values[0] = Int32GetDatum(slot->pid);
		nulls[0] = slot->pid == 0;
		values[1] = Int32GetDatum(slot->cube_id);
		values[2] = CStringGetTextDatum(slot->replica_set);
		values[3] = CStringGetTextDatum(disconnected ? "disconnected" : sc_receiver_state_name(slot->state));
		values[4] = sc_int_array(parts, slot->npartitions, INT4OID);
		values[5] = sc_int_array(positions, slot->npartitions, INT8OID);
		values[6] = sc_int_array(highs, slot->npartitions, INT8OID);
		values[7] = Int64GetDatum(lag);
		nulls[7] = !lag_known;
		values[8] = Float8GetDatum(slot->rows_per_sec);
		values[9] = Int64GetDatum((int64) slot->rows_total);
		values[10] = TimestampTzGetDatum(slot->started_at);
		nulls[10] = slot->started_at == 0;
		values[11] = TimestampTzGetDatum(slot->last_batch_at);
		nulls[11] = slot->last_batch_at == 0;
		values[12] = CStringGetTextDatum(slot->last_error);
		nulls[12] = slot->last_error[0] == '\0';
		values[13] = TimestampTzGetDatum(slot->last_error_at);
		nulls[13] = slot->last_error_at == 0;
		values[14] = Int32GetDatum(slot->topic_partitions);
		nulls[14] = slot->topic_partitions < 0;
		values[15] = Int64GetDatum((int64) slot->tombstones_skipped);
		values[16] = Int64GetDatum(slot->epoch);
		nulls[16] = slot->epoch < 0;
		/* 0.3.0 on; a 0.2.0 catalog's descriptor has 17 columns and takes the first ones */
		values[17] = Int64GetDatum((int64) slot->rows_direct);
		values[18] = Int64GetDatum((int64) slot->rows_copy);
		values[19] = Float8GetDatum(lag_seconds);
		nulls[19] = !seconds_known;
		{
			int			dims[1] = {slot->npartitions};
			int			lbs[1] = {1};

			values[20] = PointerGetDatum(construct_md_array(ages, ages_null, 1, dims, lbs, FLOAT8OID,
															8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		}
		values[21] = Int64GetDatum((int64) slot->batches);
		/* 0.4.0 on */
		values[22] = TimestampTzGetDatum(slot->disconnected_since);
		nulls[22] = !disconnected;
		values[23] = TimestampTzGetDatum(slot->contact_at);
		nulls[23] = slot->contact_at == 0;
		values[24] = CStringGetTextDatum(slot->previous_error);
		nulls[24] = slot->previous_error[0] == '\0';
		values[25] = TimestampTzGetDatum(slot->previous_error_at);
		nulls[25] = slot->previous_error_at == 0;
		/* the partition count of each topic, by topic number + 1 */
		if (slot->ntopics > 0)
		{
			Datum	   *counts = palloc(sizeof(Datum) * slot->ntopics);

			for (int t = 0; t < slot->ntopics; t++)
				counts[t] = Int32GetDatum(copy[i].counts[t]);
			values[26] = sc_int_array(counts, slot->ntopics, INT4OID);
		}
		else
			nulls[26] = true;

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * streamcube._progress(): the long work under way in this database (shmem.c,
 * "Progress"), one row per backend at it, for readers of the cube only.
 */
Datum
sc_progress(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ScProgress	copy[SC_MAX_PROGRESS];
	int			n = 0;

	InitMaterializedSRF(fcinfo, 0);
	LWLockAcquire(sc_shared->lock, LW_SHARED);
	for (int i = 0; i < SC_MAX_PROGRESS; i++)
		if (sc_shared->progress[i].pid != 0 && sc_shared->progress[i].dboid == MyDatabaseId)
			copy[n++] = sc_shared->progress[i];
	LWLockRelease(sc_shared->lock);

	for (int i = 0; i < n; i++)
	{
		ScProgress *p = &copy[i];
		Datum		values[10];
		bool		nulls[10] = {false};
		bool		missing = false;

		if (pg_class_aclcheck_ext(p->relid, GetUserId(), ACL_SELECT, &missing) != ACLCHECK_OK || missing)
			continue;
		values[0] = Int32GetDatum(p->pid);
		values[1] = ObjectIdGetDatum(p->relid);
		values[2] = CStringGetTextDatum(p->target);
		nulls[2] = p->target[0] == '\0';
		values[3] = CStringGetTextDatum(p->command);
		values[4] = CStringGetTextDatum(p->phase);
		values[5] = Int64GetDatum(p->done);
		values[6] = Int64GetDatum(p->total);
		nulls[6] = p->total < 0;
		values[7] = CStringGetTextDatum(p->unit);
		values[8] = TimestampTzGetDatum(p->started_at);
		values[9] = TimestampTzGetDatum(p->phase_at);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * streamcube._segment_rows(cube regclass, segment regclass) RETURNS bigint
 *
 * The rows of one window, visible to the reader's snapshot; NULL when the
 * reader may not SELECT the window, row-level security applies to it, or
 * it is not (any more) a plain table attached to the cube.
 */
Datum
sc_segment_rows(PG_FUNCTION_ARGS)
{
	Oid			cube = PG_GETARG_OID(0);
	Oid			segment = PG_GETARG_OID(1);
	bool		missing = false;
	Relation	rel;
	TableScanDesc scan;
	int64		rows = 0;

	if (pg_class_aclcheck_ext(segment, GetUserId(), ACL_SELECT, &missing) != ACLCHECK_OK ||
		missing)
		PG_RETURN_NULL();
	rel = try_relation_open(segment, AccessShareLock);
	if (rel == NULL)
		PG_RETURN_NULL();
	/* A standby has no rows of an UNLOGGED (active) window. */
	if (rel->rd_rel->relkind != RELKIND_RELATION || !rel->rd_rel->relispartition ||
		(RecoveryInProgress() && rel->rd_rel->relpersistence == RELPERSISTENCE_UNLOGGED) ||
		get_partition_parent(segment, true) != cube ||
		check_enable_rls(segment, InvalidOid, true) == RLS_ENABLED)
	{
		relation_close(rel, AccessShareLock);
		PG_RETURN_NULL();
	}
	scan = table_beginscan(rel, GetActiveSnapshot(), 0, NULL);
	while (heap_getnext(scan, ForwardScanDirection) != NULL)
	{
		CHECK_FOR_INTERRUPTS();
		rows++;
	}
	table_endscan(scan);
	relation_close(rel, AccessShareLock);
	PG_RETURN_INT64(rows);
}

/*
 * streamcube._rollup_stats(rollup regclass, OUT rows bigint,
 *							OUT buckets bigint) RETURNS record
 *
 * The rows of a roll-up and how many distinct buckets they hold, visible to
 * the reader's snapshot, read as _segment_rows reads a window (no user
 * code runs: a heap scan and its first column); NULLs when the reader may
 * not SELECT the roll-up or row-level security applies to it.  On a
 * standby the active (UNLOGGED) partitions count nothing.
 */
Datum
sc_rollup_stats(PG_FUNCTION_ARGS)
{
	Oid			rollup = PG_GETARG_OID(0);
	bool		missing = false;
	TupleDesc	desc;
	Datum		values[2];
	bool		nulls[2] = {true, true};
	int64		rows = 0;
	HTAB	   *buckets;
	HASHCTL		ctl;
	List	   *parts;
	ListCell   *lc;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	desc = BlessTupleDesc(desc);
	if (pg_class_aclcheck_ext(rollup, GetUserId(), ACL_SELECT, &missing) != ACLCHECK_OK || missing ||
		get_rel_relkind(rollup) != RELKIND_PARTITIONED_TABLE ||
		check_enable_rls(rollup, InvalidOid, true) == RLS_ENABLED)
		PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(int64);
	ctl.entrysize = sizeof(int64);
	ctl.hcxt = CurrentMemoryContext;
	buckets = hash_create("streamcube roll-up buckets", 1024, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	parts = find_inheritance_children(rollup, AccessShareLock);
	foreach(lc, parts)
	{
		Relation	rel = try_relation_open(lfirst_oid(lc), NoLock);
		TableScanDesc scan;
		HeapTuple	tup;

		if (rel == NULL)
			continue;
		if (rel->rd_rel->relkind != RELKIND_RELATION ||
			(RecoveryInProgress() && rel->rd_rel->relpersistence == RELPERSISTENCE_UNLOGGED) ||
			check_enable_rls(RelationGetRelid(rel), InvalidOid, true) == RLS_ENABLED)
		{
			relation_close(rel, NoLock);
			continue;
		}
		scan = table_beginscan(rel, GetActiveSnapshot(), 0, NULL);
		while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
		{
			bool		isnull;
			/* bucket is the first column of every roll-up (rollup_sql.c) */
			Datum		b = heap_getattr(tup, 1, RelationGetDescr(rel), &isnull);
			int64		key = isnull ? 0 : DatumGetInt64(b);

			CHECK_FOR_INTERRUPTS();
			rows++;
			(void) hash_search(buckets, &key, HASH_ENTER, NULL);
		}
		table_endscan(scan);
		relation_close(rel, NoLock);
	}
	values[0] = Int64GetDatum(rows);
	values[1] = Int64GetDatum(hash_get_num_entries(buckets));
	nulls[0] = nulls[1] = false;
	hash_destroy(buckets);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

/*
 * A copy of conn that reads with the given isolation level: the end of a
 * partition Kafka reports (ListOffsets) is the high watermark for
 * read_uncommitted and the last stable offset for read_committed.
 */
static ScKafkaConnInfo *
sc_conn_with_isolation(const ScKafkaConnInfo *conn, const char *level)
{
	ScKafkaConnInfo *copy = palloc(sizeof(ScKafkaConnInfo));
	ScKafkaProperty *prop = palloc(sizeof(ScKafkaProperty));

	*copy = *conn;
	prop->name = "isolation.level";
	prop->value = unconstify(char *, level);
	/* set last, so it wins over the cluster's own */
	copy->properties = lappend(list_copy(conn->properties), prop);
	return copy;
}

/* Does the cluster's consumer read uncommitted messages? */
static bool
sc_conn_reads_uncommitted(const ScKafkaConnInfo *conn)
{
	ListCell   *lc;
	bool		uncommitted = false;

	foreach(lc, conn->properties)
	{
		ScKafkaProperty *prop = lfirst(lc);

		if (strcmp(prop->name, "isolation.level") == 0)
			uncommitted = strcmp(prop->value, "read_uncommitted") == 0;
	}
	return uncommitted;
}

/* The topics' source partitions (int4[]) and their ends (int8[]), as Kafka lists them. */
static void
sc_lag_ends(const ScKafkaConnInfo *conn, const ScTopicList *topics, Datum *parts, Datum *ends)
{
	List	   *partitions = sc_kafka_describe_topics(conn, topics, true, sc_kafka_timeout_ms, NULL, NULL);
	int			n = list_length(partitions);
	Datum	   *pd = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *ed = palloc(sizeof(Datum) * Max(n, 1));
	ListCell   *lc;
	int			i = 0;

	foreach(lc, partitions)
	{
		ScKafkaPartitionInfo *p = lfirst(lc);

		pd[i] = Int32GetDatum(p->source);
		ed[i] = Int64GetDatum(p->high_watermark);
		i++;
	}
	*parts = sc_int_array(pd, n, INT4OID);
	*ends = sc_int_array(ed, n, INT8OID);
}

#define SC_LAG_COLS 12

/*
 * One row of streamcube.lag() from one row of its catalog query (tup):
 * behind is the partition's index in stamps (the Kafka timestamp at its
 * position: -1 unknown, -2 nothing there), or -1 when it is not behind.
 */
static void
sc_lag_row(HeapTuple tup, TupleDesc desc, bool uncommitted, int behind, const int64 *stamps,
		   TimestampTz now, Datum *values, bool *nulls)
{
	Datum		in[8];
	bool		innull[8];

	for (int c = 0; c < 8; c++)
		in[c] = SPI_getbinval(tup, desc, c + 1, &innull[c]);

	values[0] = in[0];		/* partition */
	nulls[0] = innull[0];
	values[1] = innull[1] ? (Datum) 0 : PointerGetDatum(DatumGetTextPCopy(in[1]));
	nulls[1] = innull[1];	/* replica set; NULL: unassigned */
	values[2] = in[2];		/* position; NULL: never consumed */
	nulls[2] = innull[2];
	values[3] = in[3];		/* checkpoint */
	nulls[3] = innull[3];
	values[4] = in[4];		/* high watermark */
	nulls[4] = innull[4] || DatumGetInt64(in[4]) < 0;
	values[5] = in[5];		/* last stable offset */
	nulls[5] = innull[5] || DatumGetInt64(in[5]) < 0;
	{
		int			end = uncommitted ? 4 : 5;

		nulls[6] = nulls[2] || nulls[end];
		values[6] = nulls[6] ? (Datum) 0 :
			Int64GetDatum(Max(DatumGetInt64(in[end]) - DatumGetInt64(in[2]), 0));
	}
	values[7] = in[6];		/* when the position last moved */
	nulls[7] = innull[6];
	values[8] = innull[7] ? (Datum) 0 :
		PointerGetDatum(DatumGetIntervalP(datumCopy(in[7], false, sizeof(Interval))));
	nulls[8] = innull[7];

	/*
	 * The oldest message not consumed and its age: none, 0 s, when
	 * caught up (or nothing could be read past the position after all).
	 */
	nulls[9] = nulls[10] = true;
	if (!nulls[6] && behind < 0)
	{
		values[10] = Float8GetDatum(0.0);
		nulls[10] = false;
	}
	else if (!nulls[6] && stamps[behind] == -2)
	{
		values[10] = Float8GetDatum(0.0);
		nulls[10] = false;
	}
	else if (!nulls[6] && stamps[behind] >= 0)
	{
		TimestampTz at = sc_kafka_ms_timestamptz(stamps[behind]);

		/* a stamp ahead of the server's clock tells no age: NULL */
		values[9] = TimestampTzGetDatum(at);
		values[10] = Float8GetDatum((double) (now - at) / USECS_PER_SEC);
		nulls[9] = false;
		nulls[10] = at > now;
	}
}

/*
 * streamcube.lag(cube text): one row per partition of the cube's topic, as
 * Kafka and the catalog see it now: replica set, committed position,
 * checkpoint, high watermark, last stable offset, lag in messages (to the
 * end the cluster's consumers read to: the last stable offset unless the
 * cluster's isolation.level is read_uncommitted) and when the position last
 * moved.  Asks Kafka (two metadata and watermark requests); for frequent
 * polling, streamcube.consumers shows the receivers' cached figures.
 * Readers of the cube only.
 */
Datum
sc_cube_lag(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *name = sc_text_arg(fcinfo, 0, "cube name");
	Oid			relid,
				owner;
	int32		cube_id;
	ScCube	   *cube;
	ScKafkaConnInfo *conn;
	Datum		parts,
				highs,
				stable_parts,
				stables;
	Datum		args[5];
	Oid			types[5] = {INT4OID, INT4ARRAYOID, INT8ARRAYOID, INT4ARRAYOID, INT8ARRAYOID};
	ScPrivilegeSave save;
	int			ret;
	bool		uncommitted;
	int			nrows;
	int			nbehind = 0;
	int		   *behind;			/* row -> index in the arrays below; -1 */
	int32	   *lparts;
	int64	   *loffsets;
	int64	   *stamps;
	TimestampTz now;

	InitMaterializedSRF(fcinfo, 0);

	SPI_connect();
	cube_id = sc_cube_lookup(name, &relid, &owner);
	if (pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, name);
	cube = sc_cube_load(cube_id, false);
	conn = sc_cluster_conninfo(cube->cluster);
	uncommitted = sc_conn_reads_uncommitted(conn);

	/*
	 * The last stable offsets first, then the high watermarks: a high
	 * watermark only grows, so one read after a last stable offset is at
	 * least as high, and lso <= hw always holds in the answer.
	 */
	sc_lag_ends(sc_conn_with_isolation(conn, "read_committed"), &cube->topics, &stable_parts, &stables);
	sc_lag_ends(sc_conn_with_isolation(conn, "read_uncommitted"), &cube->topics, &parts, &highs);

	/* Two answers, matched by partition: one may have seen a partition more. */
	args[0] = Int32GetDatum(cube_id);
	args[1] = parts;
	args[2] = highs;
	args[3] = stable_parts;
	args[4] = stables;
	/*
	 * The committed positions are UNLOGGED (they move with the rows of the
	 * active windows): a standby has neither, and shows them as NULL.
	 */
	sc_catalog_enter(&save);
	ret = SPI_execute_with_args(psprintf("SELECT t.part, a.replica_set, p.position, k.\"offset\", "
										 "       t.hw, t.lso, p.updated_at, "
										 "       date_trunc('milliseconds', clock_timestamp() - p.updated_at) "
										 "FROM unnest($2, $3) AS h(part, hw) "
										 "LEFT JOIN unnest($4, $5) AS s(part, lso) USING (part) "
										 "CROSS JOIN LATERAL (SELECT h.part, h.hw, s.lso) AS t "
										 "LEFT JOIN streamcube.assignments a "
										 "       ON a.cube_id = $1 AND a.partition = t.part "
										 "LEFT JOIN %s p "
										 "       ON p.cube_id = $1 AND p.partition = t.part "
										 "LEFT JOIN streamcube.checkpoints k "
										 "       ON k.cube_id = $1 AND k.partition = t.part "
										 "ORDER BY t.part",
										 RecoveryInProgress()
										 ? "(SELECT NULL::integer AS cube_id, NULL::integer AS partition, "
										 "NULL::bigint AS position, NULL::timestamptz AS updated_at)"
										 : "streamcube.consume_positions"),
								5, types, args, NULL, false, 0);
	sc_catalog_leave(&save);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not read the positions of cube %s: %s", cube->qualified,
			 SPI_result_code_string(ret));

	/*
	 * The partitions behind their end: the Kafka timestamp of the message
	 * at the position is the age of what waits (fetched here).
	 */
	nrows = (int) SPI_processed;
	behind = palloc0(sizeof(int) * Max(nrows, 1));
	lparts = palloc(sizeof(int32) * Max(nrows, 1));
	loffsets = palloc(sizeof(int64) * Max(nrows, 1));
	stamps = palloc(sizeof(int64) * Max(nrows, 1));
	for (int r = 0; r < nrows; r++)
	{
		bool		pnull,
					enull;
		Datum		part = SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &pnull);
		Datum		pos = SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 3, &pnull);
		Datum		end = SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc,
										uncommitted ? 5 : 6, &enull);

		behind[r] = -1;
		if (pnull || enull || DatumGetInt64(pos) >= DatumGetInt64(end))
			continue;
		lparts[nbehind] = DatumGetInt32(part);
		loffsets[nbehind] = DatumGetInt64(pos);
		behind[r] = nbehind++;
	}
	sc_kafka_timestamps_at(conn, &cube->topics, nbehind, lparts, loffsets, stamps);
	now = GetCurrentTimestamp();

	for (int r = 0; r < nrows; r++)
	{
		Datum		values[SC_LAG_COLS];
		bool		nulls[SC_LAG_COLS];

		sc_lag_row(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, uncommitted, behind[r], stamps, now,
				   values, nulls);
		/* Kafka's partition number, beside its topic */
		values[11] = CStringGetTextDatum(sc_kafka_source_topic(&cube->topics, DatumGetInt32(values[0])));
		nulls[11] = false;
		values[0] = Int32GetDatum(sc_source_kafka_partition(DatumGetInt32(values[0])));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	SPI_finish();
	return (Datum) 0;
}
