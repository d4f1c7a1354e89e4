/*-------------------------------------------------------------------------
 *
 * seal.c
 *		Sealing: closed windows become logged, immutable partitions
 *		(streamcube_seal; streamcube_seal_due in maintenance.c seals every
 *		cube through sc_seal_prepare and sc_seal_finish).  What a sealed
 *		partition is, and the DDL with lock retries, are in sealed.c.
 *
 * A seal runs in the caller's transaction (a function cannot commit), in
 * two phases, so that the one step that blocks queries on the cube is
 * short and comes last:
 *
 *	1. copy, per due window: take a SHARE lock on the window's UNLOGGED
 *	   partition (it waits for a receiver batch writing there and keeps the
 *	   next ones out: receivers lock a window without waiting, and keep a
 *	   message for a window they cannot lock for a later batch, so ingest
 *	   into other windows goes on); create a logged twin with the cube's
 *	   columns, indexes and a CHECK constraint that equals the partition
 *	   bound (so ATTACH needs no scan); move the rows into it with their
 *	   tuple headers, as CLUSTER does (rewrite.c), so that a snapshot taken
 *	   before the seal sees in the twin exactly the rows it saw in the
 *	   window; add the triggers that refuse ordinary writes.  Nothing here
 *	   blocks a query.
 *	2. swap, per window: DETACH the unlogged partition, DROP it, RENAME the
 *	   twin to its name, ATTACH it.  DETACH takes an ACCESS EXCLUSIVE lock on
 *	   the cube: it is tried with lock_timeout = 100 ms and retried every
 *	   300 ms, at most 50 times, so a seal never queues behind a long query
 *	   and stalls every query after it; after the last try the seal fails
 *	   and changes nothing.  Each try first locks the views rebuilt at the
 *	   end (<cube>_sealed, <roll-up>_sealed), so that a long query on one
 *	   of them fails the try too, instead of holding the cube, and every
 *	   receiver, behind the rebuild.
 *
 * Then the catalog, in the same transaction: the window is sealed; per
 * Kafka partition sealed_upto is the consume position (every message of
 * the window below it is in the partition: a message for the window past
 * it was kept back by its receiver while the window was locked); each
 * partition's logged checkpoint moves to the smallest first offset still
 * in an active window (streamcube.window_offsets), or to its position.
 * After a crash, receivers restart from the checkpoints and skip re-read
 * messages of sealed windows below sealed_upto.
 *
 * The copy reads with a new snapshot after the lock is held, so the caller
 * must run in READ COMMITTED.  Seals of one cube are serialised by a
 * transaction-scoped advisory lock.
 *
 * DDL on the cube's partitions runs as the cube's owner, with
 * SECURITY_RESTRICTED_OPERATION; catalog rows are written through
 * sc_catalog_enter().
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "cube_catalog.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "cube.h"
#include "positions.h"
#include "seal.h"
#include "sealed.h"
#include "rewrite.h"
#include "rollup.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "mb/pg_wchar.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

PG_FUNCTION_INFO_V1(sc_seal);

/*
 * One partition being sealed: one window, or the windows of a bucket of
 * history that share one (segments.c, sc_segment_history_bucket), sealed
 * together.
 */
typedef struct ScSealJob
{
	ScCube	   *cube;
	int64		start;
	int64		end;			/* its windows are [start, end) */
	int			nwindows;
	Oid			active;			/* the unlogged partition */
	char	   *active_schema;	/* its schema (the cube's may have moved since) */
	char	   *active_name;	/* its unqualified name */
	char	   *twin_name;		/* the logged twin, until the swap */
	Oid			twin;
	int64		rows;
	List	   *rollup_twins;	/* the roll-ups' partitions of the window (rollups.c) */
	Oid		   *views;			/* the roll-ups' views the swap rebuilds ... */
	int			nviews;			/* ... read once for its tries */
} ScSealJob;

/* ----------------------------------------------------------------
 * Phase 1: copy
 * ----------------------------------------------------------------
 */
static void
sc_seal_copy(ScSealJob *job)
{
	ScCube	   *cube = job->cube;
	Oid			nsp = get_rel_namespace(job->active);
	const char *lo = sc_bound_literal(cube, job->start);
	const char *hi = sc_bound_literal(cube, job->end);
	char	   *twin;
	ScAsOwner	save;
	ScRowMove  *move;

	/* Writers finish; receivers keep this window's messages until we commit. */
	LockRelationOid(job->active, ShareLock);
	if (get_rel_relkind(job->active) != RELKIND_RELATION)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("window %s of cube %s is not a plain table", lo, cube->qualified)));

	job->twin_name = MemoryContextStrdup(cube->mcxt,
										 sc_free_name(nsp, psprintf("%s_sealing", job->active_name)));
	twin = quote_qualified_identifier(job->active_schema, job->twin_name);

	sc_as_owner_enter(&save, cube->owner);
	sc_sealed_table_create(cube, twin, lo, hi);
	job->twin = get_relname_relid(job->twin_name, nsp);
	sc_as_owner_leave(&save);

	/* Every row the lock let in, with its tuple header (rewrite.c). */
	move = sc_rows_move_begin(job->twin);
	job->rows = sc_rows_move_from(move, job->active, false);
	sc_rows_move_end(move);

	sc_as_owner_enter(&save, cube->owner);
	sc_sealed_table_guard(twin);
	sc_as_owner_leave(&save);

	/* The roll-ups' partitions of its windows: locked by the same lock. */
	for (int64 w = job->start; w < job->end; w += cube->width)
	{
		MemoryContext old = MemoryContextSwitchTo(cube->mcxt);

		job->rollup_twins = list_concat(job->rollup_twins, sc_rollup_seal_copy(cube, w));
		MemoryContextSwitchTo(old);
	}
}

/* ----------------------------------------------------------------
 * Phase 2: swap
 * ----------------------------------------------------------------
 */
static void
sc_seal_swap_statements(ScSealJob *job)
{
	ScCube	   *cube = job->cube;
	StringInfoData sql;
	char	   *active = quote_qualified_identifier(job->active_schema, job->active_name);

	/* the views rebuilt at the end, in the try that takes the cube */
	sc_seal_lock_views_now(cube, true, job->views, job->nviews);

	initStringInfo(&sql);
	appendStringInfo(&sql, "ALTER TABLE %s DETACH PARTITION %s", cube->qualified, active);
	sc_seal_exec(sql.data);

	/* Its windows are the twin now: the sql_drop trigger must not forget them. */
	sc_segment_set_partition(cube, job->start, job->end, job->twin);

	resetStringInfo(&sql);
	appendStringInfo(&sql, "DROP TABLE %s", active);
	sc_seal_exec(sql.data);
	resetStringInfo(&sql);
	appendStringInfo(&sql, "ALTER TABLE %s RENAME TO %s",
					 quote_qualified_identifier(job->active_schema, job->twin_name),
					 quote_identifier(job->active_name));
	sc_seal_exec(sql.data);
	resetStringInfo(&sql);
	appendStringInfo(&sql, "ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')",
					 cube->qualified, active,
					 sc_bound_literal(cube, job->start),
					 sc_bound_literal(cube, job->end));
	sc_seal_exec(sql.data);

	sc_rollup_seal_swap(job->rollup_twins);
}


/*
 * Swap the twin in, each try in a subtransaction with a short lock
 * timeout, so that the ACCESS EXCLUSIVE lock on the cube is never queued
 * behind a long query.
 */
static void
sc_seal_swap_fn(void *arg)
{
	sc_seal_swap_statements((ScSealJob *) arg);
}

/* Swap the twin in (see sc_seal_with_lock_retry; it locks the views too). */
static void
sc_seal_swap(ScSealJob *job)
{
	job->views = sc_rollup_sealed_views(job->cube->cube_id, &job->nviews);
	sc_seal_with_view_lock_retry(job->cube, sc_seal_swap_fn, job,
							job->nwindows == 1
							? psprintf("seal window %s", sc_bound_literal(job->cube, job->start))
							: psprintf("seal windows %s to %s", sc_bound_literal(job->cube, job->start),
									   sc_bound_literal(job->cube, job->end)));
}

/* ----------------------------------------------------------------
 * Phase 3: the catalog
 * ----------------------------------------------------------------
 */
static void
sc_seal_record(ScSealJob *job)
{
	ScCube	   *cube = job->cube;

	for (int64 w = job->start; w < job->end; w += cube->width)
	{
		sc_segment_mark_sealed(cube, w);
		sc_positions_seal(cube->cube_id, w);
	}
	sc_segment_journal(cube, job->start, job->end, "sealed", job->rows);
}


/* ----------------------------------------------------------------
 * Sealing a cube
 * ----------------------------------------------------------------
 */

/*
 * The active partitions of a cube whose windows all end at or before
 * older_than, at most max_partitions of them, oldest first: a job each,
 * with the windows it holds (one, or a bucket of history's).  Their
 * catalog rows are locked.
 */
static List *
sc_seal_due_windows(ScCube *cube, TimestampTz older_than, int max_partitions)
{
	ScPrivilegeSave save;
	Oid			types[3] = {INT4OID, TIMESTAMPTZOID, INT4OID};
	Datum		values[3] = {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(older_than),
	Int32GetDatum(max_partitions)};
	List	   *jobs = NIL;
	ScSealJob  *job = NULL;
	MemoryContext old;

	sc_catalog_enter(&save);
	if (SPI_execute_with_args("WITH due AS ("
							  "  SELECT s.relid FROM streamcube.segment_catalog s "
							  "  WHERE s.cube_id = $1 "
							  "    AND EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = s.relid) "
							  "  GROUP BY s.relid "
							  "  HAVING bool_and(s.state = 'active') AND max(s.window_end) <= $2 "
							  "  ORDER BY min(s.window_start) LIMIT $3) "
							  "SELECT s.window_start, s.relid::oid, r.relname, n.nspname "
							  "FROM streamcube.segment_catalog s "
							  "JOIN due d ON d.relid = s.relid "
							  "JOIN pg_class r ON r.oid = s.relid "
							  "JOIN pg_namespace n ON n.oid = r.relnamespace "
							  "WHERE s.cube_id = $1 AND s.state = 'active' AND s.window_end <= $2 "
							  "ORDER BY s.window_start FOR UPDATE OF s",
							  3, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.segment_catalog");
	sc_catalog_leave(&save);
	/* The jobs live as long as the cube: a seal_due keeps them across SPI calls. */
	old = MemoryContextSwitchTo(cube->mcxt);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		int64		start = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		Oid			relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));

		/* the windows of one partition are consecutive: ranges never overlap */
		if (job != NULL && job->active == relid && job->end == start)
		{
			job->end += cube->width;
			job->nwindows++;
			continue;
		}
		job = palloc0(sizeof(ScSealJob));
		job->cube = cube;
		job->start = start;
		job->end = start + cube->width;
		job->nwindows = 1;
		job->active = relid;
		job->active_name = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3);
		job->active_schema = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 4);
		jobs = lappend(jobs, job);
	}
	MemoryContextSwitchTo(old);
	return jobs;
}


/*
 * Phase 1 for a cube: take its seal lock, find its due windows and copy
 * them.  Returns the jobs for sc_seal_finish().
 */
List *
sc_seal_prepare(ScCube *cube, TimestampTz older_than, int max_partitions)
{
	List	   *jobs;
	ListCell   *lc;

	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("sealing needs the READ COMMITTED isolation level"),
				 errdetail("The copy of a window must see every row committed before its lock."),
				 errhint("Call it outside an explicit REPEATABLE READ or SERIALIZABLE transaction.")));

	if (!sc_seal_lock_cube(cube))
		return NIL;				/* dropped meanwhile */

	if (max_partitions <= 0)
		return NIL;
	jobs = sc_seal_due_windows(cube, older_than, max_partitions);
	if (jobs != NIL)
	{
		sc_progress_start(cube->relid, NULL, "seal");
		sc_progress_phase("copying windows into logged partitions", "partitions", list_length(jobs));
	}
	foreach(lc, jobs)
	{
		sc_seal_copy(lfirst(lc));
		sc_progress_done(foreach_current_index(lc) + 1);
	}
	return jobs;
}

/* How many windows the jobs seal. */
int
sc_seal_windows(List *jobs)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, jobs)
		n += ((ScSealJob *) lfirst(lc))->nwindows;
	return n;
}

/* Phases 2 and 3 for a cube: swap, record, rebuild its sealed views (its roll-ups' too). */
void
sc_seal_finish(ScCube *cube, List *jobs)
{
	ListCell   *lc;

	foreach(lc, jobs)
		sc_seal_swap(lfirst(lc));
	foreach(lc, jobs)
		sc_seal_record(lfirst(lc));
	if (jobs != NIL)
	{
		sc_seal_refresh_view(cube, DT_NOBEGIN, NULL, 0);
		sc_rollup_refresh_views(cube->cube_id, InvalidOid, false);
	}
}

/* Seal the due windows of one cube; returns how many. */
static int
sc_seal_cube(ScCube *cube, TimestampTz older_than)
{
	List	   *jobs = sc_seal_prepare(cube, older_than, SC_SEAL_MAX_PARTITIONS);

	sc_seal_finish(cube, jobs);
	return sc_seal_windows(jobs);
}

/* now() as the cube's time column sees it. */
TimestampTz
sc_seal_now(const ScCube *cube)
{
	return (TimestampTz) sc_cube_time(cube, GetCurrentTransactionStartTimestamp());
}

/*
 * streamcube_seal(cube text, older_than timestamptz DEFAULT NULL)
 *	RETURNS integer
 */
Datum
sc_seal(PG_FUNCTION_ARGS)
{
	char	   *name = sc_text_arg(fcinfo, 0, "cube name");
	Oid			relid,
				owner;
	int32		cube_id;
	ScCube	   *cube;
	TimestampTz now;
	TimestampTz older_than;
	int			sealed;

	SPI_connect();
	cube_id = sc_cube_for_action(name, "seal", &relid, &owner);
	cube = sc_cube_load(cube_id, false);
	now = sc_seal_now(cube);
	if (PG_ARGISNULL(1))
		older_than = now - cube->grace;
	else
	{
		older_than = (TimestampTz) sc_cube_time(cube, PG_GETARG_TIMESTAMPTZ(1));
		if (older_than > now)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cannot seal windows of cube \"%s\" that end after now", name),
					 errdetail("A window still open can receive rows; older_than is in the future."),
					 errhint("Call streamcube_seal('%s') to seal what is due (now minus the cube's grace), or give a time in the past.",
							 name)));
	}
	sealed = sc_seal_cube(cube, older_than);
	SPI_finish();
	PG_RETURN_INT32(sealed);
}


/* After a failed finish (phases 2 and 3): drop the twins phase 1 made. */
void
sc_seal_cleanup(ScCube *cube, List *jobs)
{
	ListCell   *lc;
	ScAsOwner	as;

	sc_as_owner_enter(&as, cube->owner);
	foreach(lc, jobs)
	{
		ScSealJob  *job = lfirst(lc);

		sc_seal_exec(psprintf("DROP TABLE IF EXISTS %s",
							  quote_qualified_identifier(job->active_schema, job->twin_name)));
		sc_rollup_seal_cleanup(job->rollup_twins);
	}
	sc_as_owner_leave(&as);
}
