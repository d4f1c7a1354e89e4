/*-------------------------------------------------------------------------
 *
 * consumers.c
 *		The monitoring functions behind the streamcube.* views:
 *		streamcube._receivers() (the receiver slots of shared memory as
 *		rows, behind streamcube.consumers) and streamcube._segment_rows()
 *		(exact row counts, behind streamcube.segments).
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
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/acl.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(sc_receivers);
PG_FUNCTION_INFO_V1(sc_segment_rows);

#define SC_RECEIVER_COLS 17

static Datum
sc_int_array(const Datum *values, int n, Oid type)
{
	if (type == INT4OID)
		return PointerGetDatum(construct_array(unconstify(Datum *, values), n, INT4OID, 4, true, TYPALIGN_INT));
	return PointerGetDatum(construct_array(unconstify(Datum *, values), n, INT8OID, 8,
										   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

Datum
sc_receivers(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ScReceiverSlot *copy;
	int			n = 0;

	InitMaterializedSRF(fcinfo, 0);

	copy = palloc(sizeof(ScReceiverSlot) * sc_shared->nslots);
	LWLockAcquire(sc_shared->lock, LW_SHARED);
	for (int s = 0; s < sc_shared->nslots; s++)
		if (sc_shared->slots[s].in_use && sc_shared->slots[s].dboid == MyDatabaseId)
			memcpy(&copy[n++], &sc_shared->slots[s], sizeof(ScReceiverSlot));
	LWLockRelease(sc_shared->lock);

	for (int i = 0; i < n; i++)
	{
		ScReceiverSlot *slot = &copy[i];
		bool		missing = false;
		Datum		values[SC_RECEIVER_COLS];
		bool		nulls[SC_RECEIVER_COLS];
		Datum	   *parts = palloc(sizeof(Datum) * Max(slot->npartitions, 1));
		Datum	   *positions = palloc(sizeof(Datum) * Max(slot->npartitions, 1));
		Datum	   *highs = palloc(sizeof(Datum) * Max(slot->npartitions, 1));
		int64		lag = 0;
		bool		lag_known = slot->npartitions > 0;

		if (!OidIsValid(slot->relid) ||
			pg_class_aclcheck_ext(slot->relid, GetUserId(), ACL_SELECT, &missing) != ACLCHECK_OK ||
			missing)
			continue;

		memset(nulls, 0, sizeof(nulls));
		for (int p = 0; p < slot->npartitions; p++)
		{
			ScPartitionStat *ps = &slot->parts[p];

			parts[p] = Int32GetDatum(ps->partition);
			positions[p] = Int64GetDatum(ps->position);
			highs[p] = Int64GetDatum(ps->high_watermark);
			if (ps->high_watermark < 0)
				lag_known = false;
			else
				lag += Max(ps->high_watermark - ps->position, 0);
		}

		values[0] = Int32GetDatum(slot->pid);
		nulls[0] = slot->pid == 0;
		values[1] = Int32GetDatum(slot->cube_id);
		values[2] = CStringGetTextDatum(slot->replica_set);
		values[3] = CStringGetTextDatum(sc_receiver_state_name(slot->state));
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
	if (rel->rd_rel->relkind != RELKIND_RELATION || !rel->rd_rel->relispartition ||
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
