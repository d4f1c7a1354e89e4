/*-------------------------------------------------------------------------
 *
 * consumers.c
 *		streamcube._receivers(): the receiver slots of shared memory as rows,
 *		behind the view streamcube.consumers.
 *
 * Slots are copied under the shared lock and turned into rows afterwards,
 * so a slow client never holds up a receiver.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(sc_receivers);

#define SC_RECEIVER_COLS 14

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
		Datum		values[SC_RECEIVER_COLS];
		bool		nulls[SC_RECEIVER_COLS];
		Datum	   *parts = palloc(sizeof(Datum) * Max(slot->npartitions, 1));
		Datum	   *positions = palloc(sizeof(Datum) * Max(slot->npartitions, 1));
		Datum	   *highs = palloc(sizeof(Datum) * Max(slot->npartitions, 1));
		int64		lag = 0;
		bool		lag_known = slot->npartitions > 0;

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

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
