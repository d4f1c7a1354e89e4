/*-------------------------------------------------------------------------
 *
 * compact.c
 *		Compaction: sealed windows merge into coarser sealed partitions
 *		(cube option "compact"), so that a cube that runs for a year keeps
 *		hundreds of partitions, not thousands.  streamcube_compact, and a
 *		step of streamcube_seal_due.
 *
 * A coarser partition (a "bucket" of a compact level: a day, a month) is
 * built once it is complete and sealed throughout: it ends at or before
 * now minus the cube's grace, and every window of it that the catalog
 * knows is sealed and attached.  Like a seal, in the caller's transaction
 * and in two phases, so that the step that blocks queries is short and
 * comes last:
 *
 *	1. copy: take a SHARE lock on every partition of the bucket (it waits
 *	   for a receiver batch appending late rows there and keeps the next
 *	   ones out: receivers lock a sealed window without waiting, and keep
 *	   its messages for a later batch); create a logged table with the
 *	   cube's columns, indexes and a CHECK constraint equal to the bucket's
 *	   bound (ATTACH needs no scan); move every partition's rows into it
 *	   with their tuple headers (rewrite.c: every snapshot sees in it the
 *	   rows it saw in the partitions); add the triggers that refuse
 *	   ordinary writes.
 *	2. swap, with lock_timeout and bounded retry as a seal's: take the
 *	   cube's window-creation lock, check that the bucket's windows are
 *	   still those copied, DETACH and DROP the old partitions, point every
 *	   window of the bucket at the new one (windows no row ever needed are
 *	   added, sealed, so a late row for them lands in the new partition and
 *	   never creates a partition inside it), RENAME and ATTACH it.
 *
 * Queries see the old partitions or the new one, never both or neither:
 * it all commits at once.  Each window keeps its own sealed_upto marks
 * (streamcube.sealed_upto), keyed by the window, not by the partition:
 * after a crash a receiver skips a re-read message of a window below that
 * window's mark whatever partition holds it now, and a late row appended
 * to a compacted window moves that window's mark, as before.
 *
 * A call builds at most max_sources old partitions into new ones (locks
 * grow with them: see docs/operations.md on max_locks_per_transaction);
 * coarser levels first, so a month whose days are all due is built from
 * whatever it holds in one step, not first as days.  What is left waits
 * for the next call.  A bucket that cannot be swapped (a long query holds
 * the cube, or a late row created a window inside it meanwhile) is
 * reported in a WARNING and left as it was; the next call tries again.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "access/xact.h"
#include "catalog/partition.h"
#include "catalog/pg_type.h"
#include "cube.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "compact.h"
#include "sealed.h"
#include "rewrite.h"
#include "rollup.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(sc_compact);

/* Old partitions one streamcube_compact() call merges at most, by default. */
#define SC_COMPACT_DEFAULT_SOURCES SC_COMPACT_DUE_SOURCES

/* One window as the catalog has it. */
typedef struct ScCatWindow
{
	int64		start;
	int64		end;
	bool		sealed;
	bool		attached;
	Oid			relid;
	bool		taken;			/* by a job of this call */
} ScCatWindow;

/* One bucket being built. */
struct ScCompactJob
{
	ScCube	   *cube;
	int			level;
	int64		start;
	int64		end;
	int			nwindows;		/* the catalog's windows in the bucket, at the copy */
	int64	   *window_starts;
	Oid		   *window_relids;
	int			nsources;		/* distinct partitions among them */
	Oid		   *sources;
	char	   *final_base;		/* the name it should get */
	char	   *new_name;		/* its name until the swap */
	Oid			new_relid;
	int64		rows;
	List	   *rollup_merges;	/* the roll-ups' partitions of the bucket (rollups.c) */
};

/* ----------------------------------------------------------------
 * Bucket arithmetic
 * ----------------------------------------------------------------
 */

/* What a bucket's partition is named after its start: "_20261201", "_202612". */
static char *
sc_compact_stamp(const ScCube *cube, int level, int64 start)
{
	const ScCompactLevel *l = &cube->compact[level];
	struct pg_tm tm;
	fsec_t		fsec;
	char		stamp[32];
	int			year;

	timestamp2tm(start, NULL, &tm, &fsec, NULL, NULL);
	year = tm.tm_year > 0 ? tm.tm_year : -(tm.tm_year - 1);
	if (l->months > 0)
		snprintf(stamp, sizeof(stamp), "_%04d%02d", year, tm.tm_mon);
	else if (l->usecs % USECS_PER_DAY == 0 && tm.tm_hour == 0 && tm.tm_min == 0)
		snprintf(stamp, sizeof(stamp), "_%04d%02d%02d", year, tm.tm_mon, tm.tm_mday);
	else
		snprintf(stamp, sizeof(stamp), "_%04d%02d%02d_%02d%02d_c", year, tm.tm_mon, tm.tm_mday,
				 tm.tm_hour, tm.tm_min);
	if (tm.tm_year <= 0)
		strlcat(stamp, "bc", sizeof(stamp));
	return pstrdup(stamp);
}

/* The name of a bucket's partition: the cube's name, clipped, and its start. */
static char *
sc_compact_name(const ScCube *cube, int level, int64 start)
{
	char	   *stamp = sc_compact_stamp(cube, level, start);
	int			room = pg_mbcliplen(cube->relname, strlen(cube->relname),
									NAMEDATALEN - 1 - (int) strlen(stamp));

	return psprintf("%.*s%s", room, cube->relname, stamp);
}

/* ----------------------------------------------------------------
 * Finding the buckets
 * ----------------------------------------------------------------
 */

/* Every window of the cube the catalog knows, by start, in the cube's context. */
static ScCatWindow *
sc_compact_windows(const ScCube *cube, int *n)
{
	ScPrivilegeSave save;
	ScCatWindow *w;

	sc_catalog_enter(&save);
	if (SPI_execute_with_args("SELECT s.window_start, s.window_end, s.state = 'sealed', "
							  "       EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i "
							  "               WHERE i.inhrelid = s.relid AND i.inhparent = $2), "
							  "       s.relid::oid "
							  "FROM streamcube.segment_catalog s WHERE s.cube_id = $1 "
							  "ORDER BY s.window_start",
							  2, (Oid[]) {INT4OID, OIDOID},
							  (Datum[]) {Int32GetDatum(cube->cube_id), ObjectIdGetDatum(cube->relid)},
							  NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.segment_catalog");
	sc_catalog_leave(&save);
	*n = (int) SPI_processed;
	/* SPI left us in its own context, which ends with the connection. */
	MemoryContextSwitchTo(cube->mcxt);
	w = palloc0(sizeof(ScCatWindow) * Max(*n, 1));
	for (int i = 0; i < *n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;

		w[i].start = DatumGetTimestampTz(SPI_getbinval(tup, desc, 1, &isnull));
		w[i].end = DatumGetTimestampTz(SPI_getbinval(tup, desc, 2, &isnull));
		w[i].sealed = DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull));
		w[i].attached = DatumGetBool(SPI_getbinval(tup, desc, 4, &isnull));
		w[i].relid = DatumGetObjectId(SPI_getbinval(tup, desc, 5, &isnull));
	}
	return w;
}

/* Where a partition's windows lie in the sorted window array. */
typedef struct ScSpan
{
	Oid			relid;			/* hash key */
	int			first;
	int			last;
} ScSpan;

/* Per partition, the first and last index of its windows: one pass. */
static HTAB *
sc_compact_spans(ScCatWindow *w, int n)
{
	HASHCTL		ctl = {.keysize = sizeof(Oid), .entrysize = sizeof(ScSpan), .hcxt = CurrentMemoryContext};
	HTAB	   *spans = hash_create("streamcube compaction spans", Max(n, 16), &ctl,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	for (int i = 0; i < n; i++)
	{
		bool		found;
		ScSpan	   *span = hash_search(spans, &w[i].relid, HASH_ENTER, &found);

		if (!found)
			span->first = i;
		span->last = i;
	}
	return spans;
}

/*
 * The job for the bucket [start, end) of windows w[lo..hi), or NULL when
 * it is not to be built: a window not sealed or not attached, a window
 * taken by a coarser job, a partition that reaches out of the bucket, or
 * the bucket is one partition already.  O(hi - lo).
 */
static ScCompactJob *
sc_compact_consider(ScCube *cube, int level, int64 start, int64 end,
					ScCatWindow *w, HTAB *spans, int lo, int hi)
{
	ScCompactJob *job;
	bool		one = true;

	for (int i = lo; i < hi; i++)
	{
		if (!w[i].sealed || !w[i].attached || w[i].taken)
			return NULL;
		one = one && w[i].relid == w[lo].relid;
	}
	/* One partition that is the whole bucket: done already. */
	if (one && hi - lo == (int) ((end - start) / cube->width))
		return NULL;

	job = palloc0(sizeof(ScCompactJob));
	job->cube = cube;
	job->level = level;
	job->start = start;
	job->end = end;
	job->nwindows = hi - lo;
	job->window_starts = palloc(sizeof(int64) * job->nwindows);
	job->window_relids = palloc(sizeof(Oid) * job->nwindows);
	job->sources = palloc(sizeof(Oid) * job->nwindows);
	for (int i = lo; i < hi; i++)
	{
		ScSpan	   *span = hash_search(spans, &w[i].relid, HASH_FIND, NULL);

		/* A partition must lie inside the bucket: whole finer partitions only. */
		if (span->first < lo || span->last >= hi)
			return NULL;
		job->window_starts[i - lo] = w[i].start;
		job->window_relids[i - lo] = w[i].relid;
		if (span->first == i)	/* each partition once */
			job->sources[job->nsources++] = w[i].relid;
	}
	return job;
}

/*
 * The buckets to build now, coarsest level first, at most max_sources old
 * partitions in all.
 */
static List *
sc_compact_plan(ScCube *cube, TimestampTz older_than, int max_sources)
{
	int			n;
	ScCatWindow *w = sc_compact_windows(cube, &n);
	HTAB	   *spans = sc_compact_spans(w, n);
	List	   *jobs = NIL;
	int			budget = max_sources;
	/* A bucket retention drops next is not worth building. */
	int64		drop_before = cube->retention < 0 ? PG_INT64_MIN :
		sc_cube_time(cube, GetCurrentTransactionStartTimestamp()) - cube->retention;

	for (int level = cube->ncompact - 1; level >= 0 && budget > 0; level--)
	{
		int			lo = 0;

		while (lo < n && budget > 0)
		{
			int64		start,
						end;
			int			hi = lo;
			ScCompactJob *job;

			sc_level_bucket(cube, level, w[lo].start, &start, &end);
			while (hi < n && w[hi].start < end)
				hi++;
			if (end <= older_than && end > drop_before &&
				(job = sc_compact_consider(cube, level, start, end, w, spans, lo, hi)) != NULL &&
				job->nsources <= budget)
			{
				for (int i = lo; i < hi; i++)
					w[i].taken = true;
				budget -= job->nsources;
				jobs = lappend(jobs, job);
			}
			lo = hi;
		}
	}
	return jobs;
}

/*
 * How many partitions compaction would merge now, with no budget: what
 * the schedule has left to do (streamcube.cube_status).  Reads
 * the catalog only.  Caller is connected to SPI.
 */
int
sc_compact_backlog(ScCube *cube, TimestampTz older_than)
{
	if (cube->ncompact == 0)
		return 0;
	return sc_compact_sources(sc_compact_plan(cube, older_than, PG_INT32_MAX));
}

/* ----------------------------------------------------------------
 * Phase 1: copy
 * ----------------------------------------------------------------
 */
static bool
sc_compact_copy(ScCompactJob *job)
{
	ScCube	   *cube = job->cube;
	Oid			nsp = get_rel_namespace(cube->relid);
	const char *lo = sc_bound_literal(cube, job->start);
	const char *hi = sc_bound_literal(cube, job->end);
	char	   *target;
	ScAsOwner	save;
	ScRowMove  *move;

	/*
	 * Receivers keep these windows' late rows until we commit.  Without
	 * waiting: a bucket whose partition is busy (a batch appending late
	 * rows, a VACUUM, a long transaction that wrote there) waits for the
	 * next call rather than holding up this one and every cube after it.
	 * A partition dropped or detached since the catalog was read, too.
	 */
	for (int i = 0; i < job->nsources; i++)
	{
		if (!ConditionalLockRelationOid(job->sources[i], ShareLock))
		{
			for (int j = 0; j < i; j++)
				UnlockRelationOid(job->sources[j], ShareLock);
			return false;
		}
		if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(job->sources[i])) ||
			!get_rel_relispartition(job->sources[i]) ||
			get_partition_parent(job->sources[i], true) != cube->relid)
		{
			for (int j = 0; j <= i; j++)
				UnlockRelationOid(job->sources[j], ShareLock);
			return false;
		}
	}

	/* The roll-ups' partitions of the bucket, locked and copied alike. */
	{
		MemoryContext old = MemoryContextSwitchTo(cube->mcxt);
		bool		ok;

		job->rollup_merges = sc_rollup_compact_copy(cube, job->start, job->end,
													sc_compact_stamp(cube, job->level, job->start), &ok);
		MemoryContextSwitchTo(old);
		if (!ok)
		{
			for (int j = 0; j < job->nsources; j++)
				UnlockRelationOid(job->sources[j], ShareLock);
			return false;
		}
	}

	job->final_base = MemoryContextStrdup(cube->mcxt, sc_compact_name(cube, job->level, job->start));
	job->new_name = MemoryContextStrdup(cube->mcxt,
										sc_free_name(nsp, psprintf("%s_compacting", job->final_base)));
	target = quote_qualified_identifier(cube->schema, job->new_name);

	sc_as_owner_enter(&save, cube->owner);
	sc_sealed_table_create(cube, target, lo, hi);
	job->new_relid = get_relname_relid(job->new_name, nsp);
	sc_as_owner_leave(&save);

	/* In time order, partition after partition, tuple headers kept (rewrite.c). */
	move = sc_rows_move_begin(job->new_relid);
	job->rows = 0;
	for (int i = 0; i < job->nsources; i++)
		job->rows += sc_rows_move_from(move, job->sources[i], false);
	sc_rows_move_end(move);

	sc_as_owner_enter(&save, cube->owner);
	sc_sealed_table_guard(target);
	sc_as_owner_leave(&save);
	return true;
}

/*
 * Phase 1 for a cube: its seal lock (compaction and seals of one cube take
 * turns), the buckets due, their copies.  The caller is connected to SPI
 * and runs in READ COMMITTED.
 */
List *
sc_compact_prepare(ScCube *cube, TimestampTz older_than, int max_sources)
{
	List	   *jobs;
	List	   *copied = NIL;
	ListCell   *lc;
	MemoryContext old;

	if (cube->ncompact == 0 || max_sources <= 0)
		return NIL;
	if (!sc_seal_lock_cube(cube))
		return NIL;				/* dropped meanwhile */

	/* The jobs live as long as the cube: seal_due keeps them across SPI calls. */
	old = CurrentMemoryContext;
	jobs = sc_compact_plan(cube, older_than, max_sources);
	MemoryContextSwitchTo(old);
	if (jobs != NIL)
	{
		sc_progress_start(cube->relid, NULL, "compact");
		sc_progress_phase("building compacted partitions", "partitions", list_length(jobs));
	}
	foreach(lc, jobs)
	{
		ScCompactJob *job = lfirst(lc);

		if (sc_compact_copy(job))
		{
			old = MemoryContextSwitchTo(cube->mcxt);
			copied = lappend(copied, job);
			MemoryContextSwitchTo(old);
		}
		sc_progress_done(foreach_current_index(lc) + 1);
	}
	return copied;
}

/* ----------------------------------------------------------------
 * Phase 2: swap
 * ----------------------------------------------------------------
 */
static void
sc_compact_swap_fn(void *arg)
{
	ScCompactJob *job = arg;
	ScCube	   *cube = job->cube;
	ScPrivilegeSave save;
	StringInfoData sql;
	char	   *qualified;
	char	   *final_name;
	bool		same;

	/* No window is created in the bucket while it changes hands. */
	sc_segment_lock_windows(cube);

	/* The bucket's windows must be those that were copied, all sealed. */
	{
		ArrayType  *starts;
		ArrayType  *relids;
		Datum	   *relid_datums = palloc(sizeof(Datum) * job->nwindows);
		Datum	   *start_datums = palloc(sizeof(Datum) * job->nwindows);
		bool		isnull;

		for (int i = 0; i < job->nwindows; i++)
		{
			start_datums[i] = TimestampTzGetDatum(job->window_starts[i]);
			relid_datums[i] = ObjectIdGetDatum(job->window_relids[i]);
		}
		starts = construct_array(start_datums, job->nwindows, TIMESTAMPTZOID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
		relids = construct_array(relid_datums, job->nwindows, OIDOID, sizeof(Oid), true, TYPALIGN_INT);
		sc_catalog_enter(&save);
		if (SPI_execute_with_args("SELECT coalesce(array_agg(s.window_start ORDER BY s.window_start) = $4 "
								  "  AND array_agg(s.relid::oid ORDER BY s.window_start) = $5 "
								  "  AND bool_and(s.state = 'sealed'), false) "
								  "FROM streamcube.segment_catalog s "
								  "WHERE s.cube_id = $1 AND s.window_start >= $2 AND s.window_start < $3",
								  5, (Oid[]) {INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZARRAYOID, OIDARRAYOID},
								  (Datum[]) {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(job->start),
									  TimestampTzGetDatum(job->end), PointerGetDatum(starts), PointerGetDatum(relids)},
								  NULL, false, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not read streamcube.segment_catalog");
		sc_catalog_leave(&save);
		same = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		if (!same)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the windows from %s to %s of cube %s changed while they were compacted",
							sc_bound_literal(cube, job->start), sc_bound_literal(cube, job->end), cube->qualified),
					 errdetail("A late row needed a new window there, or a window was dropped."),
					 errhint("Nothing was changed; the next streamcube_seal_due() seals that window and compacts them.")));
	}

	initStringInfo(&sql);
	for (int i = 0; i < job->nsources; i++)
	{
		resetStringInfo(&sql);
		appendStringInfo(&sql, "ALTER TABLE %s DETACH PARTITION %s", cube->qualified,
						 sc_relation_qualified(job->sources[i]));
		sc_seal_exec(sql.data);
	}

	/*
	 * Every window of the bucket is the new partition now, those no row
	 * needed yet too: the sql_drop trigger must not forget them, and a late
	 * row must find its window sealed, not create one inside the bucket.
	 */
	sc_segment_set_compacted(cube, job->start, job->end, job->new_relid);
	sc_rollup_compact_swap(cube, job->rollup_merges, job->start, job->end);

	/* The sealed view no longer reads them (sc_compact_finish). */
	for (int i = 0; i < job->nsources; i++)
	{
		resetStringInfo(&sql);
		appendStringInfo(&sql, "DROP TABLE %s",
						 sc_relation_qualified(job->sources[i]));
		sc_seal_exec(sql.data);
	}
	final_name = sc_free_name(get_rel_namespace(cube->relid), job->final_base);
	qualified = quote_qualified_identifier(cube->schema, final_name);
	resetStringInfo(&sql);
	appendStringInfo(&sql, "ALTER TABLE %s RENAME TO %s",
					 quote_qualified_identifier(cube->schema, job->new_name), quote_identifier(final_name));
	sc_seal_exec(sql.data);
	resetStringInfo(&sql);
	appendStringInfo(&sql, "ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')",
					 cube->qualified, qualified,
					 sc_bound_literal(cube, job->start), sc_bound_literal(cube, job->end));
	sc_seal_exec(sql.data);
}

static void
sc_compact_swap_try_fn(void *arg)
{
	ScCompactJob *job = arg;

	sc_seal_with_lock_retry(job->cube, sc_compact_swap_fn, job,
							psprintf("compact the windows from %s to %s",
									 sc_bound_literal(job->cube, job->start),
									 sc_bound_literal(job->cube, job->end)));
	SPI_connect();
	sc_segment_journal(job->cube, job->start, job->end, "compacted", job->rows);
	SPI_finish();
}

/* Drop the new table of a bucket that was not swapped in. */
static void
sc_compact_drop_new(ScCube *cube, ScCompactJob *job)
{
	ScAsOwner	as;

	sc_as_owner_enter(&as, cube->owner);
	sc_seal_exec(psprintf("DROP TABLE IF EXISTS %s",
						  quote_qualified_identifier(cube->schema, job->new_name)));
	sc_as_owner_leave(&as);
	sc_rollup_compact_cleanup(job->rollup_merges);
}

/*
 * Phase 2 for a cube: swap every bucket in, each on its own; one that
 * fails is reported in a WARNING, its new table dropped, the others go on.
 * Returns how many were built.  The caller is connected to SPI.
 */
int
sc_compact_finish(ScCube *cube, List *jobs)
{
	ListCell   *lc;
	int			built = 0;
	Oid		   *sources;
	int			nsources = 0;

	if (jobs == NIL)
		return 0;

	/*
	 * The sealed view reads the old partitions, which the swaps drop: it is
	 * rebuilt without them first, once for all buckets (rebuilding a view
	 * over thousands of partitions per bucket cost seconds), and with what
	 * stands at the end.  Nobody sees it in between: one transaction.  The
	 * roll-ups' views read none in between (their partitions of the
	 * buckets go too).
	 */
	sc_rollup_lock_sealed_views(cube, true, "compact windows");
	sources = palloc(sizeof(Oid) * sc_compact_sources(jobs));
	foreach(lc, jobs)
	{
		ScCompactJob *job = lfirst(lc);

		for (int i = 0; i < job->nsources; i++)
			sources[nsources++] = job->sources[i];
	}
	sc_seal_refresh_view(cube, DT_NOBEGIN, sources, nsources);
	sc_rollup_refresh_views(cube->cube_id, InvalidOid, true);

	foreach(lc, jobs)
	{
		ScCompactJob *job = lfirst(lc);
		ErrorData  *edata = sc_try(sc_compact_swap_try_fn, job);

		if (edata == NULL)
		{
			built++;
			continue;
		}
		if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED || edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN)
			ReThrowError(edata);
		ereport(WARNING,
				(errcode(edata->sqlerrcode),
				 errmsg("could not compact cube %s: %s", cube->qualified, edata->message),
				 edata->hint ? errhint("%s", edata->hint) : 0));
		FreeErrorData(edata);
		sc_compact_drop_new(cube, job);
	}
	sc_seal_refresh_view(cube, DT_NOBEGIN, NULL, 0);
	sc_rollup_refresh_views(cube->cube_id, InvalidOid, false);
	return built;
}

/* How many old partitions the jobs merge. */
int
sc_compact_sources(List *jobs)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, jobs)
		n += ((ScCompactJob *) lfirst(lc))->nsources;
	return n;
}

/* After a failed phase 2 of seal_due: drop what phase 1 built. */
void
sc_compact_cleanup(ScCube *cube, List *jobs)
{
	ListCell   *lc;

	foreach(lc, jobs)
		sc_compact_drop_new(cube, lfirst(lc));
}

/*
 * streamcube_compact(cube text, max_partitions integer DEFAULT 96)
 *	RETURNS integer
 *
 * Build the coarser partitions of one cube that are due now (complete and
 * sealed throughout), merging at most max_partitions old partitions;
 * returns how many new partitions were built.  Call it again while it
 * returns more than 0 to catch up.
 */
Datum
sc_compact(PG_FUNCTION_ARGS)
{
	char	   *name = sc_text_arg(fcinfo, 0, "cube name");
	int			max_sources = PG_ARGISNULL(1) ? SC_COMPACT_DEFAULT_SOURCES : PG_GETARG_INT32(1);
	Oid			relid,
				owner;
	int32		cube_id;
	ScCube	   *cube;
	List	   *jobs;
	int			built;

	if (max_sources < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_partitions must be at least 1, not %d", max_sources),
				 errhint("It bounds how many partitions one call merges (and locks).")));
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("compaction needs the READ COMMITTED isolation level"),
				 errdetail("The copy of a partition must see every row committed before its lock."),
				 errhint("Call it outside an explicit REPEATABLE READ or SERIALIZABLE transaction.")));

	SPI_connect();
	cube_id = sc_cube_for_action(name, "compact", &relid, &owner);
	cube = sc_cube_load(cube_id, false);
	if (cube->ncompact == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cube \"%s\" has no compaction levels", name),
				 errdetail("Its option \"compact\" is an empty list, or its windows are longer than an hour and it has none."),
				 errhint("Set levels first, for example SELECT streamcube_alter_cube('%s', '{\"compact\": [\"1 day\"]}').",
						 name)));
	jobs = sc_compact_prepare(cube,
							  (TimestampTz) sc_cube_time(cube, GetCurrentTransactionStartTimestamp()) - cube->grace,
							  max_sources);
	built = sc_compact_finish(cube, jobs);
	SPI_finish();
	PG_RETURN_INT32(built);
}
