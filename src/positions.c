/*-------------------------------------------------------------------------
 *
 * positions.c
 *		Consume positions and restart checkpoints: the only code that reads
 *		or writes streamcube.consume_positions and streamcube.checkpoints.
 *
 * A consume position is the next offset to read of one Kafka partition of
 * a cube.  It lives in an UNLOGGED table and moves in the same transaction
 * as the rows read before it, so a crash empties both together.  A
 * checkpoint is the logged restart point of the partition: where a
 * receiver starts when no position survived (first start, or a crash).
 *
 * Sealing a window records here, per partition, its sealed_upto (every
 * message of the window below it is in the sealed partition) and moves the
 * checkpoint to the smallest first offset still in an active window
 * (streamcube.window_offsets, written with the rows); a late row appended
 * to a sealed window moves its sealed_upto in the batch's transaction.
 *
 * Each position carries its owner: the replica set that consumes the
 * partition and the assignment epoch at which it got it.  A receiver
 * advances a position with a compare-and-set on all three, so that a
 * receiver that lost the partition to a reassignment can never commit a
 * batch of it again.  Reassignment holds the positions it moves (waiting
 * for a batch in flight), merges them (KEEP_LARGE) and hands them over
 * here too.
 *
 * Receivers load and advance positions here; streamcube_set_positions(),
 * the operator's way out when Kafka no longer holds what a cube needs (a
 * topic deleted and created again, offsets lost to retention), sets both
 * and journals the change in streamcube.position_changes.
 *
 * Every statement runs through sc_catalog_enter(): as the catalog owner,
 * with a fixed search path.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "cube_catalog.h"
#include "catalog/pg_type.h"
#include "cube.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "kafka.h"
#include "miscadmin.h"
#include "positions.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(sc_set_positions);

/* The first checkpoint of a partition, written when its cube is created. */
void
sc_positions_init(int32 cube_id, int32 partition, int64 offset)
{
	Oid			t[3] = {INT4OID, INT4OID, INT8OID};
	Datum		v[3] = {Int32GetDatum(cube_id), Int32GetDatum(partition), Int64GetDatum(offset)};

	SPI_connect();
	sc_catalog_exec("INSERT INTO streamcube.checkpoints (cube_id, partition, \"offset\") "
					"VALUES ($1, $2, $3)", 3, t, v, NULL, false, 0);
	SPI_finish();
}

/*
 * Raise a partition's logged checkpoint to at least offset (a node adopting
 * a partition at the position its home server handed over: the merge of
 * the reassignment that follows starts it there).
 */
void
sc_positions_raise_checkpoint(int32 cube_id, int32 partition, int64 offset)
{
	Oid			t[3] = {INT4OID, INT4OID, INT8OID};
	Datum		v[3] = {Int32GetDatum(cube_id), Int32GetDatum(partition), Int64GetDatum(offset)};

	SPI_connect();
	sc_catalog_exec("INSERT INTO streamcube.checkpoints AS k (cube_id, partition, \"offset\") "
					"VALUES ($1, $2, $3) ON CONFLICT (cube_id, partition) "
					"DO UPDATE SET \"offset\" = greatest(k.\"offset\", EXCLUDED.\"offset\")",
					3, t, v, NULL, false, 0);
	SPI_finish();
}

/*
 * The partitions of one replica set and their positions, in the current
 * transaction.  A partition without a position (first start, or after a
 * crash emptied the unlogged table) gets its checkpoint.
 */
ScPositions *
sc_positions_load(int32 cube_id, const char *replica_set, MemoryContext cxt)
{
	ScPositions *pos = MemoryContextAllocZero(cxt, sizeof(ScPositions));
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		args[2] = {Int32GetDatum(cube_id), CStringGetTextDatum(replica_set)};

	SPI_connect();
	sc_catalog_exec("INSERT INTO streamcube.consume_positions "
					"(cube_id, partition, position, replica_set, epoch) "
					"SELECT k.cube_id, k.partition, k.\"offset\", a.replica_set, a.epoch "
					"FROM streamcube.checkpoints k "
					"JOIN streamcube.assignments a USING (cube_id, partition) "
					"WHERE k.cube_id = $1 AND a.replica_set = $2 "
					"ON CONFLICT DO NOTHING",
					2, types, args, NULL, false, 0);
	/*
	 * A set placed on a node stops where the node starts (placement.c):
	 * it reads up to there again only when a crash took its positions back.
	 */
	sc_catalog_exec(psprintf("SELECT p.partition, p.position, p.epoch, p.updated_at, "
							 "       CASE WHEN pl.stop IS NOT NULL AND c.stop_requested IS NOT NULL "
							 "            THEN least(pl.stop, coalesce(s.stop_offset, 0)) "
							 "            WHEN pl.stop IS NOT NULL THEN pl.stop "
							 "            WHEN c.stop_requested IS NOT NULL "
							 "            THEN coalesce(s.stop_offset, 0) ELSE -1 END "
							 "FROM streamcube.consume_positions p "
							 "JOIN streamcube.assignments a USING (cube_id, partition) "
							 "JOIN streamcube.cubes c USING (cube_id) "
							 "LEFT JOIN streamcube.stop_offsets s USING (cube_id, partition) "
							 "LEFT JOIN (%s) pl ON pl.partition = p.partition "
							 "WHERE p.cube_id = $1 AND a.replica_set = $2 "
							 "  AND p.replica_set = a.replica_set AND p.epoch = a.epoch "
							 "ORDER BY p.partition",
							 sc_catalog_has_column("placement_catalog", "positions")
							 ? "SELECT u.partition, u.stop FROM streamcube.placement_catalog x, "
							 "       unnest(x.partitions, x.positions) AS u(partition, stop) "
							 "WHERE x.cube_id = $1 AND x.replica_set = $2"
							 : "SELECT NULL::integer AS partition, NULL::bigint AS stop"),
					2, types, args, NULL, false, 0);

	pos->n = (int) SPI_processed;
	pos->partitions = MemoryContextAlloc(cxt, sizeof(int32) * Max(pos->n, 1));
	pos->positions = MemoryContextAlloc(cxt, sizeof(int64) * Max(pos->n, 1));
	pos->epochs = MemoryContextAlloc(cxt, sizeof(int64) * Max(pos->n, 1));
	pos->handed_at = MemoryContextAlloc(cxt, sizeof(TimestampTz) * Max(pos->n, 1));
	pos->stops = MemoryContextAlloc(cxt, sizeof(int64) * Max(pos->n, 1));
	for (int i = 0; i < pos->n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;

		pos->partitions[i] = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
		pos->positions[i] = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
		pos->epochs[i] = DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull));
		pos->handed_at[i] = pos->epochs[i] > 0 ?
			DatumGetTimestampTz(SPI_getbinval(tup, desc, 4, &isnull)) : 0;
		pos->stops[i] = DatumGetInt64(SPI_getbinval(tup, desc, 5, &isnull));
	}
	{
		Oid			t = INT4OID;
		bool		isnull;

		sc_catalog_exec("SELECT c.assignment_epoch, "
						"       (SELECT count(*) FROM streamcube.checkpoints k WHERE k.cube_id = $1) "
						"FROM streamcube.cubes c WHERE c.cube_id = $1",
						1, &t, args, NULL, true, 0);
		if (SPI_processed == 1)
		{
			pos->assignment_epoch = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
																SPI_tuptable->tupdesc, 1, &isnull));
			pos->known = (int) DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
														   SPI_tuptable->tupdesc, 2, &isnull));
		}
	}
	SPI_finish();
	return pos;
}

/*
 * Move a position from `from` to `to`, in the batch's transaction.  A
 * compare-and-set on the position, its owning replica set and its
 * assignment epoch.  Returns false when the partition is no longer the
 * caller's (a reassignment moved it): the batch must then roll back.  Any
 * other mismatch (an operator set the position, the cube was dropped) is
 * an error that rolls the batch back too.
 */
bool
sc_positions_advance(int32 cube_id, const char *cube_name, const char *replica_set,
					 int64 epoch, int32 partition, int64 from, int64 to)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[6];
	int			ret;
	bool		ours;

	SPI_connect();
	values[0] = Int32GetDatum(cube_id);
	values[1] = Int32GetDatum(partition);
	values[2] = Int64GetDatum(to);
	values[3] = Int64GetDatum(from);
	values[4] = CStringGetTextDatum(replica_set);
	values[5] = Int64GetDatum(epoch);
	ret = sc_catalog_exec_kept(&plan,
							   "UPDATE streamcube.consume_positions "
							   "SET position = $3, updated_at = now() "
							   "WHERE cube_id = $1 AND partition = $2 AND position = $4 "
							   "  AND replica_set = $5 AND epoch = $6",
							   6, (Oid[]) {INT4OID, INT4OID, INT8OID, INT8OID, TEXTOID, INT8OID},
							   values, NULL, false, 0);
	if (ret == SPI_OK_UPDATE && SPI_processed == 1)
	{
		SPI_finish();
		return true;
	}

	/* Whose is it now?  A new statement sees what moved it. */
	{
		Oid			types[4] = {INT4OID, INT4OID, TEXTOID, INT8OID};
		Datum		args[4] = {values[0], values[1], values[4], values[5]};
		bool		isnull;

		sc_catalog_exec("SELECT replica_set IS NOT DISTINCT FROM $3 AND epoch = $4 "
						"FROM streamcube.consume_positions WHERE cube_id = $1 AND partition = $2",
						4, types, args, NULL, false, 0);	/* a new snapshot */
		ours = SPI_processed == 0 ||
			DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	if (ours)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("consume position of partition %d of cube %s is no longer " INT64_FORMAT,
						partition, cube_name, from),
				 errdetail("Another receiver or streamcube_set_positions() moved it, or the cube was dropped; this batch is rolled back.")));
	SPI_finish();
	return false;
}

/*
 * sc_positions_advance() for n partitions (in ascending order) in one
 * statement: a batch over a topic of 512 partitions advanced nearly every
 * one of them, one UPDATE each, which cost more than its rows.  Returns -1
 * when every position moved; otherwise the first partition that is no
 * longer the caller's, after sc_positions_advance() has looked at it
 * (raising the error for anything else).
 */
int32
sc_positions_advance_all(int32 cube_id, const char *cube_name, const char *replica_set,
						 int n, const int64 *epochs, const int32 *partitions,
						 const int64 *from, const int64 *to)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[6];
	bool	   *moved;
	int32		lost = -1;
	int			ret;

	if (n == 0)
		return -1;
	if (n == 1)
		return sc_positions_advance(cube_id, cube_name, replica_set, epochs[0], partitions[0],
									from[0], to[0]) ? -1 : partitions[0];

	/* the caller's memory, not SPI's: read after SPI_finish() */
	moved = palloc0(sizeof(bool) * n);
	SPI_connect();
	values[0] = Int32GetDatum(cube_id);
	values[1] = CStringGetTextDatum(replica_set);
	values[2] = sc_int4_array(n, partitions);
	values[3] = sc_int8_array(n, from);
	values[4] = sc_int8_array(n, to);
	values[5] = sc_int8_array(n, epochs);
	ret = sc_catalog_exec_kept(&plan,
							   "UPDATE streamcube.consume_positions c "
							   "SET position = u.position_to, updated_at = now() "
							   "FROM unnest($3, $4, $5, $6) AS u(partition, position_from, position_to, epoch) "
							   "WHERE c.cube_id = $1 AND c.partition = u.partition "
							   "  AND c.position = u.position_from AND c.replica_set = $2 "
							   "  AND c.epoch = u.epoch "
							   "RETURNING c.partition",
							   6, (Oid[]) {INT4OID, TEXTOID, INT4ARRAYOID, INT8ARRAYOID, INT8ARRAYOID,
							   INT8ARRAYOID},
							   values, NULL, false, 0);
	if (ret != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "could not advance the positions: %s", SPI_result_code_string(ret));
	if (SPI_processed == (uint64) n)
	{
		SPI_finish();
		pfree(moved);
		return -1;
	}

	/* Which did not move?  The single form says why. */
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		int32		part = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[r],
													   SPI_tuptable->tupdesc, 1, &isnull));

		for (int i = 0; i < n; i++)
			if (partitions[i] == part)
				moved[i] = true;
	}
	SPI_finish();
	for (int i = 0; i < n && lost < 0; i++)
		if (!moved[i] &&
			!sc_positions_advance(cube_id, cube_name, replica_set, epochs[i], partitions[i],
								  from[i], to[i]))
			lost = partitions[i];
	pfree(moved);
	return lost;
}

/* ----------------------------------------------------------------
 * Reassignment: hold, merge, hand over
 * ----------------------------------------------------------------
 */

/*
 * Lock the positions of partitions[] until the end of the transaction, in
 * ascending order (receivers advance theirs in that order too).  Waits for
 * a batch of them in flight to commit; after that their owner cannot
 * commit them any more before the caller's transaction ends.  Bounded by
 * the caller's lock_timeout.  Caller is connected to SPI.
 */
void
sc_positions_hold(int32 cube_id, int n, const int32 *partitions)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));
	Oid			types[2] = {INT4OID, INT4ARRAYOID};
	Datum		args[2];

	for (int i = 0; i < n; i++)
		elems[i] = Int32GetDatum(partitions[i]);
	args[0] = Int32GetDatum(cube_id);
	args[1] = PointerGetDatum(construct_array(elems, n, INT4OID, 4, true, TYPALIGN_INT));

	/*
	 * A position not created yet (a receiver that has not started, or not
	 * since a crash) would be no row to lock: its owner could create it and
	 * commit a batch after this, unseen.  Create it now, for its current
	 * owner; an owner creating it meanwhile waits for this transaction.
	 */
	sc_catalog_exec("INSERT INTO streamcube.consume_positions "
					"(cube_id, partition, position, replica_set, epoch) "
					"SELECT k.cube_id, k.partition, k.\"offset\", a.replica_set, a.epoch "
					"FROM streamcube.checkpoints k "
					"JOIN streamcube.assignments a USING (cube_id, partition) "
					"WHERE k.cube_id = $1 AND k.partition = ANY ($2) "
					"ON CONFLICT DO NOTHING",
					2, types, args, NULL, false, 0);
	sc_catalog_exec("SELECT partition FROM streamcube.consume_positions "
					"WHERE cube_id = $1 AND partition = ANY ($2) "
					"ORDER BY partition FOR UPDATE",
					2, types, args, NULL, false, 0);
	pfree(elems);
}

typedef struct ScTryLock
{
	int32		cube_id;
	Datum		partitions;		/* int4[] */
} ScTryLock;

/* Prepared once per receiver: a batch runs it every time. */
static void
sc_positions_try_lock_fn(void *arg)
{
	static SPIPlanPtr plan = NULL;
	ScTryLock  *t = arg;
	Datum		args[2] = {Int32GetDatum(t->cube_id), t->partitions};

	SPI_connect();
	(void) sc_catalog_exec_kept(&plan,
								"SELECT 1 FROM streamcube.consume_positions "
								"WHERE cube_id = $1 AND partition = ANY ($2) "
								"ORDER BY partition FOR NO KEY UPDATE NOWAIT",
								2, (Oid[]) {INT4OID, INT4ARRAYOID}, args, NULL, false, 0);
	SPI_finish();
}

typedef struct ScLockAdvance
{
	ScTryLock	lock;
	int32		cube_id;
	const char *cube_name;
	const char *replica_set;
	int			n;
	const int64 *epochs;
	const int32 *partitions;
	const int64 *from;
	const int64 *to;
	int32		lost;
} ScLockAdvance;

static void
sc_positions_lock_advance_fn(void *arg)
{
	ScLockAdvance *a = arg;

	sc_positions_try_lock_fn(&a->lock);
	a->lost = sc_positions_advance_all(a->cube_id, a->cube_name, a->replica_set, a->n,
									   a->epochs, a->partitions, a->from, a->to);
}

/*
 * A receiver's batch locks the positions it is about to advance, all at
 * once and without waiting, and advances them (sc_positions_advance_all).
 * Returns false, having done nothing, when one of them is held (a
 * streamcube_reassign() or streamcube_set_positions() in progress), and
 * then none is locked: the receiver tells Kafka's progress meanwhile and
 * tries again, instead of waiting blind, and its lag keeps counting.
 * Taking all or none keeps a reassignment that waits for one of them from
 * waiting for the receiver in turn (lock 4 of "Lock order",
 * docs/architecture.md).  Otherwise true, with *lost the partition found
 * no longer the caller's (the batch must roll back), or -1.
 *
 * The lock and the update are made in the same subtransaction: a row
 * locked by a subtransaction and then updated by its parent gets a
 * MultiXactId for the two, at every batch, and every later look at the
 * row's versions has to read that MultiXactId's members
 * (GetMultiXactIdMembers was 11 % of a receiver on a live stream); locked
 * and updated by one transaction id, the row needs none.
 */
bool
sc_positions_lock_advance(int32 cube_id, const char *cube_name, const char *replica_set,
						  int n, const int64 *epochs, const int32 *partitions,
						  const int64 *from, const int64 *to, int32 *lost)
{
	ScLockAdvance a = {.cube_id = cube_id, .cube_name = cube_name,
	.replica_set = replica_set, .n = n, .epochs = epochs, .partitions = partitions,
	.from = from, .to = to, .lost = -1};

	*lost = -1;
	if (n == 0)
		return true;
	a.lock.cube_id = cube_id;
	a.lock.partitions = sc_int4_array(n, partitions);
	if (!sc_try_nowait(sc_positions_lock_advance_fn, &a))
		return false;
	*lost = a.lost;
	return true;
}

/*
 * Where a partition's new owner starts: the largest of every record of it
 * (Kylin's KEEP_LARGE): the committed consume position and the logged
 * checkpoint.  -1 when the cube has never known the partition.  Caller is
 * connected to SPI and holds the partition (sc_positions_hold).
 */
int64
sc_positions_merged(int32 cube_id, int32 partition)
{
	Oid			types[2] = {INT4OID, INT4OID};
	Datum		args[2] = {Int32GetDatum(cube_id), Int32GetDatum(partition)};
	bool		isnull;
	Datum		d;

	sc_catalog_exec("SELECT greatest(p.position, k.\"offset\") "
					"FROM streamcube.checkpoints k "
					"LEFT JOIN streamcube.consume_positions p USING (cube_id, partition) "
					"WHERE k.cube_id = $1 AND k.partition = $2",
					2, types, args, NULL, false, 0);
	if (SPI_processed == 0)
		return -1;
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? -1 : DatumGetInt64(d);
}

/*
 * Give a partition to replica_set (NULL: to nobody) at a new epoch, from
 * `offset`.  A partition the cube never knew gets its first checkpoint
 * there.  held_at (when the previous owner lost it) is kept in updated_at
 * until the new owner commits, so that it can tell how long the partition
 * went unconsumed.  Caller is connected to SPI.
 */
void
sc_positions_hand_over(int32 cube_id, int32 partition, const char *replica_set,
					   int64 epoch, int64 offset, TimestampTz held_at)
{
	Oid			types[6] = {INT4OID, INT4OID, INT8OID, TEXTOID, INT8OID, TIMESTAMPTZOID};
	Datum		args[6] = {Int32GetDatum(cube_id), Int32GetDatum(partition), Int64GetDatum(offset),
		replica_set ? CStringGetTextDatum(replica_set) : (Datum) 0,
	Int64GetDatum(epoch), TimestampTzGetDatum(held_at)};
	char		nulls[7] = "      ";

	if (replica_set == NULL)
		nulls[3] = 'n';
	{
		ScPrivilegeSave save;

		sc_catalog_enter(&save);
		SPI_execute_with_args("INSERT INTO streamcube.checkpoints (cube_id, partition, \"offset\") "
							  "VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
							  3, types, args, NULL, false, 0);
		if (SPI_execute_with_args("INSERT INTO streamcube.consume_positions AS p "
								  "(cube_id, partition, position, replica_set, epoch, updated_at) "
								  "VALUES ($1, $2, $3, $4, $5, $6) "
								  "ON CONFLICT (cube_id, partition) DO UPDATE "
								  "SET position = EXCLUDED.position, replica_set = EXCLUDED.replica_set, "
								  "    epoch = EXCLUDED.epoch, updated_at = EXCLUDED.updated_at",
								  6, types, args, nulls, false, 0) != SPI_OK_INSERT)
			elog(ERROR, "could not hand over partition %d of cube %d", partition, cube_id);
		sc_catalog_leave(&save);
	}
}

/*
 * How many of the partitions parts[] (an int4[] datum) are short of their
 * targets[] (an int8[] datum)?  A partition without a position counts from
 * its checkpoint; one the cube does not know never reaches its target.
 * Caller is connected to SPI.
 */
int64
sc_positions_short_of(int32 cube_id, Datum parts, Datum targets)
{
	Datum		args[3] = {Int32GetDatum(cube_id), parts, targets};
	Oid			types[3] = {INT4OID, INT4ARRAYOID, INT8ARRAYOID};
	bool		isnull;

	sc_catalog_exec("SELECT count(*) FILTER (WHERE t.target > coalesce(p.position, "
					"         (SELECT \"offset\" FROM streamcube.checkpoints k "
					"          WHERE k.cube_id = $1 AND k.partition = t.part), -1)) "
					"FROM unnest($2, $3) AS t(part, target) "
					"LEFT JOIN streamcube.consume_positions p "
					"  ON p.cube_id = $1 AND p.partition = t.part",
					3, types, args, NULL, false, 0);	/* a new snapshot each time */
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/* ----------------------------------------------------------------
 * Sealed windows
 * ----------------------------------------------------------------
 */

/*
 * The first offsets of Kafka partitions in active windows, in the
 * transaction that inserts their rows: n of them, window starts[i] and
 * partitions[i] first at offsets[i], in one statement (a replay of history
 * records one per partition of the cube and Kafka partition it meets, a
 * few per batch: ingest_windows.c).  Caller is connected to SPI.
 */
void
sc_positions_first_offsets(int32 cube_id, int n, const int64 *starts,
						   const int32 *partitions, const int64 *offsets)
{
	static SPIPlanPtr plan = NULL;	/* every batch that opens a window: planned once */
	Oid			types[4] = {INT4OID, TIMESTAMPTZARRAYOID, INT4ARRAYOID, INT8ARRAYOID};
	Datum		values[4];
	Datum	   *elems;

	if (n == 0)
		return;
	elems = palloc(sizeof(Datum) * n);
	for (int i = 0; i < n; i++)
		elems[i] = TimestampTzGetDatum(starts[i]);
	values[0] = Int32GetDatum(cube_id);
	values[1] = sc_int_array(elems, n, TIMESTAMPTZOID);
	values[2] = sc_int4_array(n, partitions);
	values[3] = sc_int8_array(n, offsets);
	sc_catalog_exec_kept(&plan,
						 "INSERT INTO streamcube.window_offsets "
						 "(cube_id, window_start, partition, first_offset) "
						 "SELECT $1, unnest($2), unnest($3), unnest($4) "
						 "ON CONFLICT DO NOTHING", 4, types, values, NULL, false, 0);
	pfree(elems);
}

/*
 * A late row of a sealed window was appended, in this transaction: the
 * window holds every message of it below `upto` now.  Caller is connected
 * to SPI.
 */
void
sc_positions_late(int32 cube_id, int64 window_start, int32 partition, int64 upto)
{
	static SPIPlanPtr plan = NULL;	/* per window and partition of every batch */
	Oid			types[4] = {INT4OID, TIMESTAMPTZOID, INT4OID, INT8OID};
	Datum		values[4] = {Int32GetDatum(cube_id), TimestampTzGetDatum(window_start),
	Int32GetDatum(partition), Int64GetDatum(upto)};

	sc_catalog_exec_kept(&plan,
						 "INSERT INTO streamcube.sealed_upto AS u "
						 "(cube_id, window_start, partition, \"offset\") VALUES ($1, $2, $3, $4) "
						 "ON CONFLICT (cube_id, window_start, partition) "
						 "DO UPDATE SET \"offset\" = greatest(u.\"offset\", EXCLUDED.\"offset\")",
						 4, types, values, NULL, false, 0);
}

/*
 * A window is sealed, in this transaction: per partition its sealed_upto is
 * the consume position (a message of the window past it was kept back by
 * its receiver while the window was locked); its first offsets are
 * forgotten; each checkpoint moves forward to the smallest first offset
 * still in an active window, or to the position.  Caller is connected to
 * SPI.
 */
void
sc_positions_seal(int32 cube_id, int64 window_start)
{
	Oid			types[2] = {INT4OID, TIMESTAMPTZOID};
	Datum		values[2] = {Int32GetDatum(cube_id), TimestampTzGetDatum(window_start)};

	sc_catalog_exec("INSERT INTO streamcube.sealed_upto (cube_id, window_start, partition, \"offset\") "
					"SELECT k.cube_id, $2, k.partition, coalesce(p.position, k.\"offset\") "
					"FROM streamcube.checkpoints k "
					"LEFT JOIN streamcube.consume_positions p USING (cube_id, partition) "
					"WHERE k.cube_id = $1",
					2, types, values, NULL, false, 0);
	sc_catalog_exec("DELETE FROM streamcube.window_offsets "
					"WHERE cube_id = $1 AND window_start = $2",
					2, types, values, NULL, false, 0);
	sc_catalog_exec("UPDATE streamcube.checkpoints k SET \"offset\" = n.ckpt "
					"FROM (SELECT k2.partition, coalesce("
					"        (SELECT min(w.first_offset) FROM streamcube.window_offsets w "
					"         JOIN streamcube.segment_catalog s USING (cube_id, window_start) "
					"         WHERE w.cube_id = $1 AND w.partition = k2.partition AND s.state = 'active'), "
					"        p.position, k2.\"offset\") AS ckpt "
					"      FROM streamcube.checkpoints k2 "
					"      LEFT JOIN streamcube.consume_positions p USING (cube_id, partition) "
					"      WHERE k2.cube_id = $1) n "
					"WHERE k.cube_id = $1 AND k.partition = n.partition AND n.ckpt > k.\"offset\"",
					1, types, values, NULL, false, 0);
}

/* ----------------------------------------------------------------
 * streamcube_set_positions(cube, positions)
 * ----------------------------------------------------------------
 */

#define SC_POSITIONS_HINT "Use '\"earliest\"', '\"latest\"', '{\"timestamp\": \"2026-11-01 10:00+00\"}' or an object by partition such as '{\"0\": 1234, \"1\": \"latest\", \"2\": {\"timestamp\": \"2026-11-01 10:00+00\"}}'."

#define SC_STOP_HINT "Use '\"latest\"', '{\"timestamp\": \"2026-11-01 10:00+00\"}' or an object by partition such as '{\"0\": 1234, \"1\": \"latest\", \"2\": {\"timestamp\": \"2026-11-01 10:00+00\"}}'."

static ScPositionChange *
sc_position_change(int32 partition, char *requested, const char *time_text, const char *what)
{
	ScPositionChange *c = palloc0(sizeof(ScPositionChange));

	c->partition = partition;
	c->requested = requested;
	c->at_ms = -1;
	if (time_text != NULL)
	{
		bool		stop = strcmp(what, "positions") != 0;

		c->at_ms = sc_kafka_ms_of_text(time_text, stop ? "a stop point by time" : "a position by time",
									   stop ? SC_STOP_HINT : SC_POSITIONS_HINT);
		c->requested = psprintf("timestamp %s", time_text);
	}
	return c;
}

/*
 * Parse a request for offsets (the positions of streamcube_set_positions,
 * a stop point): "earliest" / "latest" for every partition of the cube,
 * {"timestamp": T} for every partition, or an object by partition
 * {"<partition>": <offset> | "earliest" | "latest" | {"timestamp": T}}.
 * what names the request in errors ("positions", "stop point"); a stop
 * point cannot be "earliest".  Caller is connected to SPI.
 */
List *
sc_offsets_parse(Jsonb *request, const char *what, const ScCube *cube, List *assigned)
{
	const char *cube_name = cube->qualified;
	bool		stop = strcmp(what, "positions") != 0;
	Oid			argtype = JSONBOID;
	Datum		arg = JsonbPGetDatum(request);
	List	   *changes = NIL;
	char	   *type;
	char	   *all = NULL;
	char	   *all_time = NULL;
	ListCell   *lc;

	if (SPI_execute_with_args("SELECT jsonb_typeof($1), $1 #>> '{}', "
							  "       CASE WHEN jsonb_typeof($1) = 'object' AND $1 ? 'timestamp' "
							  "            THEN $1 ->> 'timestamp' END, "
							  "       CASE WHEN jsonb_typeof($1) = 'object' "
							  "            THEN (SELECT count(*) FROM jsonb_object_keys($1)) END",
							  1, &argtype, &arg, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the positions argument");
	type = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (strcmp(type, "string") == 0)
	{
		all = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
		if ((stop || strcmp(all, "earliest") != 0) && strcmp(all, "latest") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid %s \"%s\" for cube %s", what, all, cube_name),
					 errhint(stop ? SC_STOP_HINT : SC_POSITIONS_HINT)));
	}
	else if (strcmp(type, "object") == 0 &&
			 (all_time = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3)) != NULL)
	{
		if (strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4), "1") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s for cube %s by time must have \"timestamp\" as %s only key", what, cube_name,
							stop ? "its" : "their"),
					 errhint(stop ? SC_STOP_HINT : SC_POSITIONS_HINT)));
	}
	else if (strcmp(type, "object") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg(stop ? "%s for cube %s must be \"latest\" or a JSON object"
						: "%s for cube %s must be \"earliest\", \"latest\" or a JSON object", what, cube_name),
				 errhint(stop ? SC_STOP_HINT : SC_POSITIONS_HINT)));
	if (all != NULL || all_time != NULL)
	{
		foreach(lc, assigned)
			changes = lappend(changes, sc_position_change(lfirst_int(lc), all, all_time, what));
		return changes;
	}

	if (SPI_execute_with_args("SELECT key, jsonb_typeof(value), value #>> '{}', "
							  "       CASE WHEN jsonb_typeof(value) = 'object' AND value ? 'timestamp' "
							  "             AND (SELECT count(*) FROM jsonb_object_keys(value)) = 1 "
							  "            THEN value ->> 'timestamp' END "
							  "FROM jsonb_each($1) ORDER BY key",
							  1, &argtype, &arg, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the positions argument");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *key = SPI_getvalue(tup, desc, 1);
		char	   *vtype = SPI_getvalue(tup, desc, 2);
		char	   *value = SPI_getvalue(tup, desc, 3);
		char	   *time_text = SPI_getvalue(tup, desc, 4);
		int32		partition;
		ScPositionChange *c;

		const char *error;

		partition = sc_partition_parse(cube, key, &error);
		if (partition < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("\"%s\" is not a partition of cube %s: %s", key, cube_name, error),
					 errhint("Keys of the %s object are partitions, such as \"0\" (\"orders.eu:0\" in a cube of several topics); \"timestamp\" alone applies to every partition by time.", what)));
		foreach(lc, changes)
		{
			if (((ScPositionChange *) lfirst(lc))->partition == partition)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("two keys of the %s object for cube %s name partition %s", what, cube_name,
								sc_partition_name(cube, partition)),
						 errhint("Give each partition once, without leading zeros such as \"%s\"; nothing was changed.",
								 sc_partition_name(cube, partition))));
		}
		if (!list_member_int(assigned, partition))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cube %s does not consume partition %s", cube_name, sc_partition_name(cube, partition)),
					 errhint("streamcube.consumers lists the partitions of each receiver.")));
		if (time_text != NULL)
			c = sc_position_change(partition, NULL, time_text, what);
		else if (strcmp(vtype, "string") == 0 &&
				 ((!stop && strcmp(value, "earliest") == 0) || strcmp(value, "latest") == 0))
			c = sc_position_change(partition, value, NULL, what);
		else if (strcmp(vtype, "number") == 0 && strspn(value, "0123456789") == strlen(value) &&
				 strlen(value) <= 18)
		{
			c = sc_position_change(partition, value, NULL, what);
			c->offset = pg_strtoint64(value);
		}
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid %s %s for partition %s of cube %s",
							stop ? "stop offset" : "position", value, sc_partition_name(cube, partition), cube_name),
					 errhint(stop ? "Give an offset (a non-negative integer), \"latest\" or {\"timestamp\": \"2026-11-01 10:00+00\"}."
							 : "Give an offset (a non-negative integer), \"earliest\", \"latest\" or {\"timestamp\": \"2026-11-01 10:00+00\"}.")));
		changes = lappend(changes, c);
	}
	return changes;
}

/*
 * Lock the paused cube's row against batches and other changes until
 * COMMIT (lock 2 of "Lock order", docs/architecture.md), and read why it
 * was paused and which partitions it has.
 */
static List *
sc_set_positions_lock(int32 cube_id, const char *name, char **reason)
{
	Oid			t = INT4OID;
	Datum		v = Int32GetDatum(cube_id);
	List	   *assigned = NIL;
	bool		isnull;

	sc_catalog_exec("SELECT paused, paused_reason FROM streamcube.cubes "
					"WHERE cube_id = $1 FOR UPDATE", 1, &t, &v, NULL, false, 0);
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cube \"%s\" must be paused to set its positions", name),
				 errhint("Call streamcube_pause('%s') first, then streamcube_resume('%s') after.", name, name)));
	*reason = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	sc_catalog_exec("SELECT partition FROM streamcube.checkpoints WHERE cube_id = $1 "
					"ORDER BY partition", 1, &t, &v, NULL, true, 0);
	for (uint64 i = 0; i < SPI_processed; i++)
		assigned = lappend_int(assigned,
							   DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull)));
	return assigned;
}

/*
 * Positions read from another Kafka cluster become this one's only when
 * every partition gets one here: the others would go on at offsets that
 * mean something else in this cluster.
 */
static void
sc_set_positions_check_cluster(ScCube *cube, List *changes, List *assigned,
							   const char *kafka_cluster_id)
{
	ListCell   *ac;
	ListCell   *lc;

	if (kafka_cluster_id == NULL || cube->kafka_cluster_id == NULL ||
		strcmp(kafka_cluster_id, cube->kafka_cluster_id) == 0)
		return;
	foreach(ac, assigned)
	{
		bool		given = false;

		foreach(lc, changes)
			given |= ((ScPositionChange *) lfirst(lc))->partition == lfirst_int(ac);
		if (!given)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("cube %s has positions of another Kafka cluster (id %s); cluster \"%s\" now reaches id %s",
							cube->qualified, cube->kafka_cluster_id, cube->cluster, kafka_cluster_id),
					 errdetail("Partition %d would keep a position of the other cluster.", lfirst_int(ac)),
					 errhint("Set the position of every partition in the same call, for example '\"earliest\"' or '{\"0\": 1234, \"1\": 567, ...}'.")));
	}
}

/*
 * Kafka answers a lookup by time with -1 (the partition's end) when no
 * message is stamped that late.  A cluster that cannot look up by time
 * answers so for any time (librdkafka's mock cluster, the quickstart's,
 * does): taken at its word, a replay would move to the end of every
 * partition and skip what it was asked to read, without a word.  So an
 * answer "the end" for a partition that holds messages is checked against
 * the timestamp of its last message: when that message is stamped at or
 * after the time asked, the cluster did not look, and that is an error
 * naming the cluster.  A broker answers with the first offset whose
 * timestamp is at or after the time (by its time index), so it never
 * answers "the end" while its last message is that late.  Costs a read of
 * one message per partition answered "the end", and nothing otherwise.
 */
void
sc_offsets_at_checked(const ScKafkaConnInfo *conn, const char *cluster, const ScTopicList *topics,
					  int n, const int32 *parts, const int64 *ms, int64 *offsets, List *kafka)
{
	int32	   *cparts = palloc(sizeof(int32) * Max(n, 1));
	int64	   *coffsets = palloc(sizeof(int64) * Max(n, 1));
	int64	   *cms = palloc(sizeof(int64) * Max(n, 1));
	int		   *which = palloc(sizeof(int) * Max(n, 1));
	int			m = 0;

	sc_kafka_offsets_at(conn, topics, n, parts, ms, offsets, sc_kafka_timeout_ms);
	for (int i = 0; i < n; i++)
	{
		ListCell   *kc;

		if (offsets[i] >= 0)
			continue;
		foreach(kc, kafka)
		{
			ScKafkaPartitionInfo *k = lfirst(kc);

			if (k->source == parts[i] && k->high_watermark > Max(k->low_watermark, 0))
			{
				cparts[m] = parts[i];
				coffsets[m] = k->high_watermark - 1;
				which[m++] = i;
			}
		}
	}
	sc_kafka_timestamps_at(conn, topics, m, cparts, coffsets, cms);
	for (int j = 0; j < m; j++)
		if (cms[j] >= 0 && cms[j] >= ms[which[j]])
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("Kafka cluster \"%s\" does not look up offsets by time", cluster),
					 errdetail("Asked for the first message of partition %d of topic \"%s\" stamped at or after %s, it answered the end of the partition, though its last message (offset " INT64_FORMAT ") is stamped %s.",
							   sc_source_kafka_partition(cparts[j]), sc_kafka_source_topic(topics, cparts[j]),
							   timestamptz_to_str(sc_kafka_ms_timestamptz(ms[which[j]])), coffsets[j],
							   timestamptz_to_str(sc_kafka_ms_timestamptz(cms[j]))),
					 errhint("Nothing was changed. Give offsets, \"earliest\" or \"latest\" instead; librdkafka's mock cluster (the quickstart's) answers every lookup by time with the end.")));
}

/*
 * The offsets of the changes by time: each partition's first message
 * stamped at or after the time (-1, the partition's end, when none is
 * that late), in one request to Kafka, checked (sc_offsets_at_checked)
 * against kafka, the topic's partitions as described.
 */
void
sc_offsets_by_time(ScCube *cube, List *changes, List *kafka)
{
	int			n = 0;
	int32	   *parts = palloc(sizeof(int32) * Max(list_length(changes), 1));
	int64	   *ms = palloc(sizeof(int64) * Max(list_length(changes), 1));
	int64	   *offsets = palloc(sizeof(int64) * Max(list_length(changes), 1));
	ListCell   *lc;

	foreach(lc, changes)
	{
		ScPositionChange *c = lfirst(lc);

		if (c->at_ms < 0)
			continue;
		parts[n] = c->partition;
		ms[n++] = c->at_ms;
	}
	sc_offsets_at_checked(sc_cluster_conninfo(cube->cluster), cube->cluster, &cube->topics,
						  n, parts, ms, offsets, kafka);
	n = 0;
	foreach(lc, changes)
	{
		ScPositionChange *c = lfirst(lc);

		if (c->at_ms >= 0)
			c->offset = offsets[n++];
	}
}

/* The offset a change means in what Kafka holds now; errors when outside it. */
void
sc_offsets_resolve(ScCube *cube, ScPositionChange *c, List *kafka)
{
	ScKafkaPartitionInfo *k = NULL;
	ListCell   *kc;

	foreach(kc, kafka)
		if (((ScKafkaPartitionInfo *) lfirst(kc))->source == c->partition)
			k = lfirst(kc);
	if (k == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("topic \"%s\" has no partition %d",
						sc_kafka_source_topic(&cube->topics, c->partition),
						sc_source_kafka_partition(c->partition)),
				 errhint("Check the topic with streamcube_check_cluster('%s').", cube->cluster)));
	if (c->at_ms >= 0)
		c->offset = c->offset < 0 ? k->high_watermark : Max(c->offset, k->low_watermark);
	else if (strcmp(c->requested, "earliest") == 0)
		c->offset = k->low_watermark;
	else if (strcmp(c->requested, "latest") == 0)
		c->offset = k->high_watermark;
	else if (c->offset < k->low_watermark || c->offset > k->high_watermark)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("offset " INT64_FORMAT " is outside partition %d of topic \"%s\", which holds offsets " INT64_FORMAT " to " INT64_FORMAT,
						c->offset, k->partition, k->topic, k->low_watermark, k->high_watermark - 1),
				 errhint("Give an offset from " INT64_FORMAT " (\"earliest\") to " INT64_FORMAT " (\"latest\").",
						 k->low_watermark, k->high_watermark)));
}

/*
 * Journal, checkpoint and position of one partition, in one statement; the
 * old position (isnull when there was none) is left in SPI_tuptable.
 */
static void
sc_set_position(ScCube *cube, const ScPositionChange *c, const char *who, const char *reason)
{
	Oid			t[7] = {INT4OID, INT4OID, INT8OID, TEXTOID, NAMEOID, TEXTOID, OIDOID};
	Datum		v[7];
	char		n[8] = "       ";	/* ' ' not null, 'n' null */
	bool		with_topic = sc_catalog_has_column("position_changes", "topic");	/* 0.4.0 on */

	v[0] = Int32GetDatum(cube->cube_id);
	v[1] = Int32GetDatum(c->partition);
	v[2] = Int64GetDatum(Max(c->offset, 0));
	v[3] = CStringGetTextDatum(c->requested);
	v[4] = DirectFunctionCall1(namein, CStringGetDatum(who));
	v[5] = reason ? CStringGetTextDatum(reason) : (Datum) 0;
	n[5] = reason ? ' ' : 'n';
	v[6] = ObjectIdGetDatum(cube->relid);

	if (sc_catalog_exec(psprintf("WITH old AS (SELECT k.\"offset\" AS checkpoint, p.position "
						"             FROM streamcube.checkpoints k "
						"             LEFT JOIN streamcube.consume_positions p USING (cube_id, partition) "
						"             WHERE k.cube_id = $1 AND k.partition = $2), "
						"j AS (INSERT INTO streamcube.position_changes "
						"      (cube_id, cube, partition, requested, old_position, old_checkpoint, "
						"       new_position, changed_by, reason%s) "
						"      SELECT $1, $7, %s, $4, old.position, old.checkpoint, $3, $5, $6%s FROM old "
						"      RETURNING old_position), "
						"k AS (UPDATE streamcube.checkpoints SET \"offset\" = $3 "
						"      WHERE cube_id = $1 AND partition = $2), "
						"p AS (INSERT INTO streamcube.consume_positions "
						"      (cube_id, partition, position, replica_set, epoch) "
						"      SELECT $1, $2, $3, a.replica_set, coalesce(a.epoch, 0) "
						"      FROM (SELECT) x LEFT JOIN streamcube.assignments a "
						"        ON a.cube_id = $1 AND a.partition = $2 "
						"      ON CONFLICT (cube_id, partition) "
						"      DO UPDATE SET position = $3, updated_at = now()) "
						"SELECT old_position FROM j",
						with_topic ? ", topic" : "",
						with_topic ? SC_SQL_SOURCE_PARTITION("$2") : "$2",
						with_topic ? ", " SC_SQL_SOURCE_TOPIC("$1", "$2") : ""),
						7, t, v, n, false, 0) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not set the position of partition %d of cube %s",
			 c->partition, cube->qualified);
}

/*
 * "earliest" means what Kafka holds when the cube reads it, not what it
 * held when streamcube_set_positions was called: a topic whose retention
 * keeps deleting (the very case that asks for "earliest") may have
 * deleted more before the cube resumes.  A receiver that finds partition's
 * position below what Kafka holds (low) calls this: when the partition's
 * last journalled change asked for "earliest", put it at position, and
 * nothing was read since (the position is still there, not taken back
 * from a checkpoint by a crash), the position moves to low, journalled
 * again with the offsets retention took meanwhile, and true is returned.
 * Otherwise nothing changes, and the caller pauses the cube as before.
 * Caller is connected to SPI, in a transaction.
 */
bool
sc_positions_earliest_again(ScCube *cube, int32 partition, int64 position, int64 low)
{
	Oid			t[3] = {INT4OID, INT4OID, INT8OID};
	Datum		v[3] = {Int32GetDatum(cube->cube_id), Int32GetDatum(partition), Int64GetDatum(position)};
	ScPositionChange c;

	/* the journal names a partition by topic and number (0.4.0 on) */
	const char *key = sc_catalog_has_column("position_changes", "topic")
		? "cube_id = $1 AND topic = " SC_SQL_SOURCE_TOPIC("$1", "$2")
		" AND partition = " SC_SQL_SOURCE_PARTITION("$2")
		: "cube_id = $1 AND partition = $2";

	sc_catalog_exec(psprintf("SELECT 1 FROM streamcube.position_changes j "
							 "JOIN streamcube.consume_positions p ON p.cube_id = $1 AND p.partition = $2 "
							 "WHERE j.change_id = (SELECT max(change_id) FROM streamcube.position_changes "
							 "                     WHERE %s) "
							 "  AND j.requested = 'earliest' AND j.new_position = $3 AND p.position = $3",
							 key),
					3, t, v, NULL, true, 1);
	if (SPI_processed == 0)
		return false;
	c.partition = partition;
	c.requested = "earliest";
	c.at_ms = -1;
	c.offset = low;
	sc_set_position(cube, &c, GetUserNameFromId(GetUserId(), false),
					psprintf("\"earliest\" when the cube read it: retention deleted offsets " INT64_FORMAT
							 " to " INT64_FORMAT " after streamcube_set_positions", position, low - 1));
	return true;
}

/*
 * streamcube_set_positions(cube text, positions jsonb)
 *	RETURNS TABLE (partition, old_position, new_position, skipped)
 *
 * The cube must be paused, so that no receiver holds a position in memory
 * while it changes; receivers read positions again when they resume.  An
 * offset outside what Kafka holds now is refused.  Each partition's
 * consume position and checkpoint both move to the new offset: after a
 * crash, that partition restarts there, not before.  Every change is
 * journalled in streamcube.position_changes, with the reason the cube was
 * paused for; that reason is then cleared (the operator acted), and the
 * cube stays paused until streamcube_resume().
 */
Datum
sc_set_positions(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *name = sc_text_arg(fcinfo, 0, "cube name");
	Jsonb	   *request;
	Oid			relid,
				owner;
	int32		cube_id;
	ScCube	   *cube;
	List	   *assigned;
	List	   *changes;
	List	   *kafka;
	char	   *kafka_cluster_id = NULL;
	ListCell   *lc;
	char	   *reason;
	char	   *who = GetUserNameFromId(GetUserId(), false);
	StringInfoData skips;
	int64		skipped = 0;
	bool		moved_back = false;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("positions must not be NULL")));
	request = PG_GETARG_JSONB_P(1);
	InitMaterializedSRF(fcinfo, 0);

	SPI_connect();
	cube_id = sc_cube_for_action(name, "set positions of", &relid, &owner);
	assigned = sc_set_positions_lock(cube_id, name, &reason);
	cube = sc_cube_load(cube_id, false);
	assigned = sc_topics_live(cube, assigned);	/* not a topic taken out */
	changes = sc_offsets_parse(request, "positions", cube, assigned);
	kafka = sc_kafka_describe_topics(sc_cluster_conninfo(cube->cluster), &cube->topics, true,
									 sc_kafka_timeout_ms, NULL, &kafka_cluster_id);
	sc_set_positions_check_cluster(cube, changes, assigned, kafka_cluster_id);
	sc_offsets_by_time(cube, changes, kafka);

	initStringInfo(&skips);
	foreach(lc, changes)
	{
		ScPositionChange *c = lfirst(lc);
		Datum		values[5];
		bool		nulls[5] = {false, false, false, false, false};

		sc_offsets_resolve(cube, c, kafka);
		sc_set_position(cube, c, who, reason);
		values[0] = Int32GetDatum(sc_source_kafka_partition(c->partition));
		/* 0.4.0 on: the partition's topic */
		values[4] = CStringGetTextDatum(sc_kafka_source_topic(&cube->topics, c->partition));
		values[1] = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &nulls[1]);
		values[2] = Int64GetDatum(c->offset);
		/* 0.4.0 on: how many offsets forward the position moved, unread */
		values[3] = Int64GetDatum(nulls[1] ? 0 : Max(c->offset - DatumGetInt64(values[1]), 0));
		nulls[3] = nulls[1];
		moved_back |= !nulls[1] && c->offset < DatumGetInt64(values[1]);
		if (!nulls[1] && DatumGetInt64(values[3]) > 0)
		{
			appendStringInfo(&skips, "%spartition %s: " INT64_FORMAT " (offsets " INT64_FORMAT " to " INT64_FORMAT ")",
							 skips.len > 0 ? ", " : "", sc_partition_name(cube, c->partition), DatumGetInt64(values[3]),
							 DatumGetInt64(values[1]), c->offset - 1);
			skipped += DatumGetInt64(values[3]);
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}

	/*
	 * A move back reads messages again.  Rows of active windows can be
	 * deleted by offset first (docs/operations.md, "Replay the last hour");
	 * a roll-up's partial rows cannot: they count the messages again.
	 */
	if (moved_back && cube->rollups != NIL)
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("cube %s has roll-ups: the messages it reads again are counted again in their active windows",
						cube->qualified),
				 errdetail("A roll-up row aggregates messages; it cannot be deleted by offset as the cube's rows can."),
				 errhint("Once the cube has read them, drop and create the roll-ups again (streamcube_create_rollup fills one from the cube's rows), or replay into a cube of its own.")));

	/* A move forward leaves messages unread: say so, before anyone resumes. */
	if (skipped > 0)
		ereport(NOTICE,
				(errmsg("cube %s moves forward past " INT64_FORMAT " offsets it has not read", cube->qualified, skipped),
				 errdetail("Skipped per partition: %s.", skips.data),
				 errhint("Nothing is read from them once the cube resumes. To read them, set the positions back (old_position) before streamcube_resume('%s').",
						 cube->qualified)));

	/*
	 * The operator acted on the reason; the cube stays paused.  Its
	 * positions are now offsets of the Kafka cluster that answered here.
	 */
	sc_cube_row_positions_set(cube_id, kafka_cluster_id);
	SPI_finish();
	return (Datum) 0;
}
