/*-------------------------------------------------------------------------
 *
 * maintenance.c
 *		What the schedule runs: streamcube_seal_due() seals, compacts and
 *		drops (retention) the windows of every cube, and
 *		streamcube_schedule_sealing() makes the pg_cron job that calls it.
 *
 * Sealing (seal.c) and compaction (compact.c) know nothing of each other;
 * this file calls both, cube by cube, each cube's work in a subtransaction
 * of its own so one cube's failure does not stop the others.
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
#include "compact.h"
#include "rollup.h"
#include "seal.h"
#include "sealed.h"
#include "rewrite.h"
#include "executor/spi.h"
#include "funcapi.h"
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

PG_FUNCTION_INFO_V1(sc_seal_due);
PG_FUNCTION_INFO_V1(sc_schedule_sealing);
PG_FUNCTION_INFO_V1(sc_maintenance_backlog);

static void
sc_seal_drop_fn(void *arg)
{
	sc_seal_exec((const char *) arg);
}

/*
 * Drop the sealed windows of a cube that ended before now - retention;
 * journalled.  Returns how many.
 */
static int
sc_due_retention(ScCube *cube, int max_partitions)
{
	TimestampTz before;
	Oid		   *parts;
	int			n;

	if (cube->retention < 0 || max_partitions <= 0)
		return 0;
	before = sc_seal_now(cube) - cube->retention;
	parts = sc_segment_partitions_before(cube, before, max_partitions, &n);
	if (n > 0)
		sc_segment_journal_drops(cube, parts, n);
	/* The view must not hold what is dropped next. */
	if (n > 0)
	{
		sc_seal_lock_views(cube, true, NULL, 0, "drop windows past their retention");
		sc_seal_refresh_view(cube, before, NULL, 0);
	}
	for (int i = 0; i < n; i++)
	{
		Oid			part = parts[i];
		char	   *relname = get_rel_name(part);

		if (relname == NULL)
			continue;
		/* DROP TABLE fires the sql_drop trigger, which forgets the window. */
		sc_seal_with_lock_retry(cube, sc_seal_drop_fn,
								psprintf("DROP TABLE %s",
										 quote_qualified_identifier(get_namespace_name(get_rel_namespace(part)),
																	relname)),
								"drop a window past its retention");
	}
	return n;
}


/* The ids of every cube, in the caller's memory context (it outlives SPI). */
static List *
sc_all_cubes(void)
{
	ScPrivilegeSave save;
	List	   *ids = NIL;
	MemoryContext cxt = CurrentMemoryContext;

	sc_catalog_enter(&save);
	if (SPI_execute("SELECT cube_id FROM streamcube.cubes ORDER BY cube_id", false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.cubes");
	sc_catalog_leave(&save);
	/* SPI_execute left SPI's own context current: the list goes in the caller's */
	MemoryContextSwitchTo(cxt);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		ids = lappend_int(ids, DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull)));
	}
	return ids;
}

/*
 * streamcube_seal_due() RETURNS integer
 *
 * Seal what is due in every cube, then apply retention; returns how many
 * windows were sealed.  A cube that fails (its table locked too long, say)
 * is reported in a WARNING and left as it was; the others go on.
 */
/* What seal_due does for one cube. */
typedef struct ScDueCube
{
	int32		cube_id;
	ScCube	   *cube;
	List	   *jobs;
	List	   *compact_jobs;
	int		   *seal_budget;	/* windows this call may still seal */
	int		   *compact_budget; /* old partitions it may still merge */
	int		   *drop_budget;	/* partitions it may still drop */
} ScDueCube;

typedef enum ScDueStep
{
	SC_DUE_PREPARE,				/* load the cube, copy its due windows */
	SC_DUE_COMPACT_PREPARE,		/* copy its due buckets */
	SC_DUE_FINISH,				/* swap, record, retention */
	SC_DUE_CLEANUP				/* after a failed finish: drop the copies */
} ScDueStep;

static void
sc_seal_due_step(ScDueCube *due, ScDueStep step)
{
	switch (step)
	{
		case SC_DUE_PREPARE:
			due->cube = sc_cube_load(due->cube_id, true);
			if (due->cube != NULL)
			{
				due->jobs = sc_seal_prepare(due->cube, sc_seal_now(due->cube) - due->cube->grace,
											*due->seal_budget);
				*due->seal_budget -= list_length(due->jobs);
			}
			break;
		case SC_DUE_COMPACT_PREPARE:
			/* A step of its own: a compaction that fails leaves the seals be. */
			if (due->cube != NULL)
			{
				due->compact_jobs = sc_compact_prepare(due->cube, sc_seal_now(due->cube) - due->cube->grace,
													   *due->compact_budget);
				*due->compact_budget -= sc_compact_sources(due->compact_jobs);
			}
			break;
		case SC_DUE_FINISH:
			if (due->cube == NULL)
				break;
			/*
			 * Compaction first: its swap takes the cube's window-creation
			 * lock and then the table, in the order receivers take them; a
			 * seal swap before it would hold the table already.
			 */
			(void) sc_compact_finish(due->cube, due->compact_jobs);
			sc_seal_finish(due->cube, due->jobs);
			*due->drop_budget -= sc_due_retention(due->cube, *due->drop_budget);
			*due->drop_budget -= sc_rollup_retention(due->cube, *due->drop_budget);
			break;
		case SC_DUE_CLEANUP:
			sc_seal_cleanup(due->cube, due->jobs);
			sc_compact_cleanup(due->cube, due->compact_jobs);
			break;
	}
}

/*
 * One step for one cube, in a subtransaction; false (with a WARNING) when
 * it failed.  What the step allocates outlives the subtransaction.
 */
typedef struct ScDueCall
{
	ScDueCube  *due;
	ScDueStep	step;
	MemoryContext cxt;			/* where what the step allocates lives */
} ScDueCall;

static void
sc_seal_due_fn(void *arg)
{
	ScDueCall  *call = arg;

	SPI_connect();
	MemoryContextSwitchTo(call->cxt);
	sc_seal_due_step(call->due, call->step);
	SPI_finish();
}

static bool
sc_seal_due_try(ScDueCube *due, ScDueStep step)
{
	ScDueCall	call = {due, step, CurrentMemoryContext};
	ErrorData  *edata = sc_try(sc_seal_due_fn, &call);

	if (edata == NULL)
		return true;
	if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED || edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN)
		ReThrowError(edata);
	ereport(WARNING,
			(errcode(edata->sqlerrcode),
			 errmsg("could not %s cube %s: %s", step == SC_DUE_COMPACT_PREPARE ? "compact" : "seal",
					due->cube ? due->cube->qualified : psprintf("%d", due->cube_id), edata->message),
			 edata->hint ? errhint("%s", edata->hint) : 0));
	FreeErrorData(edata);
	return false;
}

/*
 * streamcube_seal_due() RETURNS integer
 *
 * Seal what is due in every cube, then apply retention; returns how many
 * windows were sealed.  It all runs in the caller's transaction, so first
 * every cube's due windows are copied (which blocks no query), and only
 * then swapped in, cube after cube: the ACCESS EXCLUSIVE locks of the swaps
 * are held from the first swap to the end, which is short.  A cube that
 * fails (its table locked too long, say) is reported in a WARNING and left
 * as it was; the others go on.
 */
Datum
sc_seal_due(PG_FUNCTION_ARGS)
{
	List	   *ids;
	List	   *dues = NIL;
	ListCell   *lc;
	int			sealed = 0;
	int			seal_budget = SC_SEAL_MAX_PARTITIONS;
	int			compact_budget = SC_COMPACT_DUE_SOURCES;
	int			drop_budget = SC_DROP_STEP;

	sc_require_admin("seal the windows of every cube");
	{
		MemoryContext cxt = CurrentMemoryContext;

		SPI_connect();
		MemoryContextSwitchTo(cxt);	/* the list outlives SPI */
		ids = sc_all_cubes();
		SPI_finish();
	}

	foreach(lc, ids)
	{
		ScDueCube  *due = palloc0(sizeof(ScDueCube));

		due->cube_id = lfirst_int(lc);
		due->seal_budget = &seal_budget;
		due->compact_budget = &compact_budget;
		due->drop_budget = &drop_budget;
		if (sc_seal_due_try(due, SC_DUE_PREPARE))
		{
			if (!sc_seal_due_try(due, SC_DUE_COMPACT_PREPARE))
				due->compact_jobs = NIL;
			dues = lappend(dues, due);
		}
	}
	foreach(lc, dues)
	{
		ScDueCube  *due = lfirst(lc);

		if (sc_seal_due_try(due, SC_DUE_FINISH))
			sealed += sc_seal_windows(due->jobs);
		else if (due->jobs != NIL || due->compact_jobs != NIL)
			(void) sc_seal_due_try(due, SC_DUE_CLEANUP);
	}
	PG_RETURN_INT32(sealed);
}

/*
 * streamcube._maintenance_backlog(): per cube the caller may read, what
 * streamcube_seal_due() would do now if nothing bounded it: windows to
 * seal, old partitions to merge, partitions retention drops.  Reads the
 * catalog only; behind the view streamcube.cube_status, for
 * monitoring (a backlog that grows means the schedule does not run, or
 * fails: its WARNINGs say why).
 */
Datum
sc_maintenance_backlog(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext cxt = CurrentMemoryContext;
	List	   *ids;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	MemoryContextSwitchTo(cxt);
	ids = sc_all_cubes();
	foreach(lc, ids)
	{
		ScCube	   *cube = sc_cube_load(lfirst_int(lc), true);
		TimestampTz older;
		Datum		values[4];
		bool		nulls[4] = {false, false, false, false};
		Oid			types[2] = {INT4OID, TIMESTAMPTZOID};
		Datum		args[2];
		bool		isnull;

		if (cube == NULL || pg_class_aclcheck(cube->relid, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
			continue;
		older = sc_seal_now(cube) - cube->grace;
		args[0] = Int32GetDatum(cube->cube_id);
		args[1] = TimestampTzGetDatum(older);
		sc_catalog_exec("SELECT count(*) FROM streamcube.segment_catalog s "
						"WHERE s.cube_id = $1 AND s.state = 'active' AND s.window_end <= $2",
						2, types, args, NULL, true, 0);
		values[1] = Int32GetDatum((int32) DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
																	   SPI_tuptable->tupdesc, 1, &isnull)));
		values[2] = Int32GetDatum(sc_compact_backlog(cube, older));
		values[3] = Int32GetDatum(0);
		if (cube->retention >= 0)
		{
			args[1] = TimestampTzGetDatum(sc_seal_now(cube) - cube->retention);
			sc_catalog_exec("SELECT count(*) FROM (SELECT 1 FROM streamcube.segment_catalog s "
							"WHERE s.cube_id = $1 GROUP BY s.relid "
							"HAVING bool_and(s.state = 'sealed') AND max(s.window_end) <= $2) d",
							2, types, args, NULL, true, 0);
			values[3] = Int32GetDatum((int32) DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
																		   SPI_tuptable->tupdesc, 1, &isnull)));
		}
		values[0] = ObjectIdGetDatum(cube->relid);
		MemoryContextSwitchTo(cxt);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	SPI_finish();
	return (Datum) 0;
}

/*
 * streamcube_schedule_sealing(schedule text DEFAULT '* * * * *')
 *	RETURNS bigint
 *
 * Registers streamcube_seal_due() with pg_cron under the job name
 * "streamcube-seal-due"; pg_cron updates a job of the same name and user
 * instead of adding one.  The job runs as the caller.
 */
Datum
sc_schedule_sealing(PG_FUNCTION_ARGS)
{
	char	   *schedule = PG_ARGISNULL(0) ? "* * * * *" : text_to_cstring(PG_GETARG_TEXT_PP(0));
	int64		jobid;
	bool		isnull;
	char	   *command;

	sc_require_admin("schedule sealing");
	if (!OidIsValid(get_extension_oid("pg_cron", true)))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("pg_cron is not installed in database \"%s\"",
						get_database_name(MyDatabaseId)),
				 errdetail("streamcube_schedule_sealing() registers streamcube_seal_due() as a pg_cron job."),
				 errhint("Install postgresql-15-cron, set shared_preload_libraries = 'streamcube,pg_cron' and cron.database_name = '%s' in postgresql.conf, restart, then CREATE EXTENSION pg_cron. Or run SELECT streamcube_seal_due() from any scheduler.",
						 get_database_name(MyDatabaseId))));
	SPI_connect();
	if (SPI_execute("SELECT format('SELECT %I.streamcube_seal_due()', extnamespace::regnamespace::text) "
					"FROM pg_catalog.pg_extension WHERE extname = 'streamcube'", true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not find the schema of extension streamcube");
	command = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (SPI_execute_with_args("SELECT cron.schedule('streamcube-seal-due', $1, $2)",
							  2, (Oid[]) {TEXTOID, TEXTOID},
							  (Datum[]) {CStringGetTextDatum(schedule), CStringGetTextDatum(command)},
							  NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not schedule the pg_cron job");
	jobid = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	PG_RETURN_INT64(jobid);
}

