/*-------------------------------------------------------------------------
 *
 * seal.c
 *		Sealing: closed windows become logged, immutable partitions.
 *		streamcube_seal, streamcube_seal_due, streamcube_schedule_sealing,
 *		and the trigger that keeps sealed partitions immutable.
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
 *	   and changes nothing.
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
#include "rewrite.h"
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
#include "utils/rel.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(sc_seal);
PG_FUNCTION_INFO_V1(sc_seal_due);
PG_FUNCTION_INFO_V1(sc_schedule_sealing);
PG_FUNCTION_INFO_V1(sc_sealed_guard);

/* Lock class of the advisory lock that serialises seals of one cube. */
#define SC_SEAL_LOCK_CLASS 0x5EA1

/* The swap: lock timeout, pause between tries, tries. */
#define SC_SWAP_LOCK_TIMEOUT "100ms"
#define SC_SWAP_RETRY_MS 300
#define SC_SWAP_TRIES 50

/* Set by receivers around their COPY: late rows may enter a sealed window. */
bool		sc_seal_writes_allowed = false;

/* One window being sealed. */
typedef struct ScSealJob
{
	ScCube	   *cube;
	int64		start;
	Oid			active;			/* the unlogged partition */
	char	   *active_schema;	/* its schema (the cube's may have moved since) */
	char	   *active_name;	/* its unqualified name */
	char	   *twin_name;		/* the logged twin, until the swap */
	Oid			twin;
	int64		rows;
} ScSealJob;

/* ----------------------------------------------------------------
 * The guard trigger
 * ----------------------------------------------------------------
 */

/*
 * BEFORE INSERT OR UPDATE OR DELETE (row) and BEFORE TRUNCATE (statement)
 * on every sealed partition: ordinary writes are refused.  Receivers
 * append late rows (sc_seal_writes_allowed).  An owner who must correct
 * data disables the triggers on purpose: ALTER TABLE ... DISABLE TRIGGER
 * streamcube_sealed (docs/operations.md).
 */
Datum
sc_sealed_guard(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("streamcube._sealed_guard() must be called as a trigger")));
	if (!sc_seal_writes_allowed)
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("window partition %s is sealed", RelationGetRelationName(trigdata->tg_relation)),
				 errdetail("A sealed window of a cube is immutable: its rows are exactly the messages streamcube consumed."),
				 errhint("To correct data on purpose, its owner may ALTER TABLE %s DISABLE TRIGGER USER, change it, then ENABLE TRIGGER USER.",
						 quote_identifier(RelationGetRelationName(trigdata->tg_relation)))));
	if (TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
		return PointerGetDatum(NULL);
	return PointerGetDatum(trigdata->tg_trigtuple);
}

/* ----------------------------------------------------------------
 * Helpers
 * ----------------------------------------------------------------
 */
void
sc_seal_exec(const char *sql)
{
	int			ret = SPI_execute(sql, false, 0);

	if (ret < 0)
		elog(ERROR, "statement failed (%s): %s", SPI_result_code_string(ret), sql);
}

/* The cube's columns as a quoted, comma-separated list, in table order. */
char *
sc_column_list(Oid relid)
{
	StringInfoData out;
	Relation	rel = table_open(relid, AccessShareLock);
	TupleDesc	desc = RelationGetDescr(rel);

	initStringInfo(&out);
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);

		if (att->attisdropped)
			continue;
		if (out.len > 0)
			appendStringInfoString(&out, ", ");
		appendStringInfoString(&out, quote_identifier(NameStr(att->attname)));
	}
	table_close(rel, NoLock);
	return out.data;
}

/* A free name in a schema: base, then base_2, base_3 ... */
char *
sc_free_name(Oid nsp, const char *base)
{
	for (int attempt = 1;; attempt++)
	{
		char		suffix[16] = "";
		char	   *name;
		int			room;

		if (attempt > 1)
			snprintf(suffix, sizeof(suffix), "_%d", attempt);
		room = pg_mbcliplen(base, strlen(base), NAMEDATALEN - 1 - (int) strlen(suffix));
		name = psprintf("%.*s%s", room, base, suffix);
		if (!OidIsValid(get_relname_relid(name, nsp)))
			return name;
	}
}

/* The time column of a cube, quoted. */
const char *
sc_time_column(const ScCube *cube)
{
	return quote_identifier(cube->columns[cube->time_index].name);
}

/*
 * A logged table for the sealed rows of [lo, hi) of a cube (a window's, or
 * a compacted bucket's): the cube's columns, defaults, constraints and
 * indexes, and the range as a CHECK constraint, so that ATTACH needs no
 * scan.  Run as the cube's owner, connected to SPI.
 */
void
sc_sealed_table_create(const ScCube *cube, const char *target, const char *lo, const char *hi)
{
	const char *ts = sc_time_column(cube);

	sc_seal_exec(psprintf("CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
						  "INCLUDING GENERATED INCLUDING STORAGE INCLUDING COMPRESSION INCLUDING INDEXES)",
						  target, cube->qualified));
	sc_seal_exec(psprintf("ALTER TABLE %s ADD CONSTRAINT streamcube_window CHECK "
						  "(%s IS NOT NULL AND %s >= '%s' AND %s < '%s')",
						  target, ts, ts, lo, ts, hi));
}

/* The triggers that refuse ordinary writes to a sealed table, once filled. */
void
sc_sealed_table_guard(const char *target)
{
	sc_seal_exec(psprintf("CREATE TRIGGER streamcube_sealed BEFORE INSERT OR UPDATE OR DELETE ON %s "
						  "FOR EACH ROW EXECUTE FUNCTION streamcube._sealed_guard()", target));
	sc_seal_exec(psprintf("CREATE TRIGGER streamcube_sealed_truncate BEFORE TRUNCATE ON %s "
						  "FOR EACH STATEMENT EXECUTE FUNCTION streamcube._sealed_guard()", target));
}

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
	const char *hi = sc_bound_literal(cube, job->start + cube->width);
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
	job->rows = sc_rows_move_from(move, job->active);
	sc_rows_move_end(move);

	sc_as_owner_enter(&save, cube->owner);
	sc_sealed_table_guard(twin);
	sc_as_owner_leave(&save);
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

	initStringInfo(&sql);
	appendStringInfo(&sql, "ALTER TABLE %s DETACH PARTITION %s", cube->qualified, active);
	sc_seal_exec(sql.data);

	/* The window is the twin now: the sql_drop trigger must not forget it. */
	{
		ScPrivilegeSave save;
		Oid			types[3] = {INT4OID, TIMESTAMPTZOID, OIDOID};
		Datum		values[3] = {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(job->start),
		ObjectIdGetDatum(job->twin)};

		sc_catalog_enter(&save);
		if (SPI_execute_with_args("UPDATE streamcube.segment_catalog SET relid = $3 "
								  "WHERE cube_id = $1 AND window_start = $2",
								  3, types, values, NULL, false, 0) != SPI_OK_UPDATE ||
			SPI_processed != 1)
			elog(ERROR, "could not point window %s of cube %s at its sealed partition",
				 sc_bound_literal(cube, job->start), cube->qualified);
		sc_catalog_leave(&save);
	}

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
					 sc_bound_literal(cube, job->start + cube->width));
	sc_seal_exec(sql.data);
}

/*
 * Swap the twin in, each try in a subtransaction with a short lock
 * timeout, so that the ACCESS EXCLUSIVE lock on the cube is never queued
 * behind a long query.
 */
/*
 * One try of fn(arg) as the cube's owner, in a subtransaction, with a short
 * lock timeout; the error when it failed.
 */
typedef struct ScLockedCall
{
	Oid			owner;
	void		(*fn) (void *);
	void	   *arg;
} ScLockedCall;

static void
sc_seal_locked_fn(void *arg)
{
	ScLockedCall *call = arg;
	int			nestlevel = NewGUCNestLevel();
	ScAsOwner	save;

	(void) set_config_option("lock_timeout", SC_SWAP_LOCK_TIMEOUT, PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	sc_as_owner_enter(&save, call->owner);
	SPI_connect();
	call->fn(call->arg);
	SPI_finish();
	sc_as_owner_leave(&save);
	AtEOXact_GUC(true, nestlevel);
}

static ErrorData *
sc_seal_try_locked(Oid owner_role, void (*fn) (void *), void *arg)
{
	ScLockedCall call = {owner_role, fn, arg};

	return sc_try(sc_seal_locked_fn, &call);
}

/*
 * Run fn(arg), which needs an ACCESS EXCLUSIVE lock on the cube for a
 * moment, with lock_timeout = 100 ms, retried every 300 ms: it is never
 * queued behind a long query, where it would stall every query after it.
 * After the last try it fails; what saying so names is `what`.
 */
void
sc_seal_with_lock_retry(const ScCube *cube, void (*fn) (void *), void *arg, const char *what)
{
	for (int attempt = 1;; attempt++)
	{
		ErrorData  *edata = sc_seal_try_locked(cube->owner, fn, arg);

		if (edata == NULL)
			return;
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		if (attempt >= SC_SWAP_TRIES)
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("could not %s of cube %s: its table stayed locked", what, cube->qualified),
					 errdetail("This needs an ACCESS EXCLUSIVE lock on the cube for a moment; %d tries of %s each failed.",
							   SC_SWAP_TRIES, SC_SWAP_LOCK_TIMEOUT),
					 errhint("A long query or transaction holds the cube. Nothing was changed; the next attempt tries again.")));
		FreeErrorData(edata);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 SC_SWAP_RETRY_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

static void
sc_seal_swap_fn(void *arg)
{
	sc_seal_swap_statements((ScSealJob *) arg);
}

/* Swap the twin in (see sc_seal_with_lock_retry). */
static void
sc_seal_swap(ScSealJob *job)
{
	sc_seal_with_lock_retry(job->cube, sc_seal_swap_fn, job,
							psprintf("seal window %s", sc_bound_literal(job->cube, job->start)));
}

/* ----------------------------------------------------------------
 * Phase 3: the catalog
 * ----------------------------------------------------------------
 */
static void
sc_seal_record(ScSealJob *job)
{
	ScCube	   *cube = job->cube;
	ScPrivilegeSave save;
	Oid			types[5] = {INT4OID, TIMESTAMPTZOID, TEXTOID, INT8OID, NAMEOID};
	Datum		values[5];

	values[0] = Int32GetDatum(cube->cube_id);
	values[1] = TimestampTzGetDatum(job->start);
	values[2] = (Datum) 0;
	values[3] = Int64GetDatum(job->rows);
	values[4] = DirectFunctionCall1(namein, CStringGetDatum(GetUserNameFromId(GetUserId(), false)));

	sc_catalog_enter(&save);
	if (SPI_execute_with_args("UPDATE streamcube.segment_catalog "
							  "SET state = 'sealed', sealed_at = now() "
							  "WHERE cube_id = $1 AND window_start = $2",
							  2, types, values, NULL, false, 0) != SPI_OK_UPDATE ||
		SPI_processed != 1)
		elog(ERROR, "could not mark window sealed");
	sc_catalog_leave(&save);

	sc_positions_seal(cube->cube_id, job->start);

	sc_catalog_enter(&save);
	if (SPI_execute_with_args("INSERT INTO streamcube.segment_log "
							  "(cube_id, cube, window_start, window_end, action, rows, done_by) "
							  "SELECT $1, c.relid, $2, s.window_end, 'sealed', $4, $5 "
							  "FROM streamcube.cubes c JOIN streamcube.segment_catalog s USING (cube_id) "
							  "WHERE c.cube_id = $1 AND s.window_start = $2",
							  5, types, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not journal the seal");
	sc_catalog_leave(&save);
}

/* ----------------------------------------------------------------
 * The sealed view
 * ----------------------------------------------------------------
 */

/* CREATE [OR REPLACE] VIEW, in a subtransaction; false when it failed. */
static void
sc_seal_exec_fn(void *arg)
{
	SPI_connect();
	sc_seal_exec((const char *) arg);
	SPI_finish();
}

static bool
sc_seal_try_view(const char *sql)
{
	ErrorData  *edata = sc_try(sc_seal_exec_fn, (void *) sql);

	if (edata == NULL)
		return true;
	FreeErrorData(edata);
	return false;
}

/*
 * branches[lo..hi) joined by UNION ALL as a balanced tree of parenthesised
 * pairs: the parser recurses once per level of set operations, and a flat
 * chain of thousands of sealed partitions exceeded max_stack_depth (the
 * planner flattens the tree into one Append all the same).
 */
static void
sc_union_all(StringInfo out, char **branches, int lo, int hi)
{
	int			mid;

	if (hi - lo == 1)
	{
		appendStringInfoString(out, branches[lo]);
		return;
	}
	mid = lo + (hi - lo) / 2;
	appendStringInfoChar(out, '(');
	sc_union_all(out, branches, lo, mid);
	appendStringInfoString(out, ")\nUNION ALL (");
	sc_union_all(out, branches, mid, hi);
	appendStringInfoChar(out, ')');
}

/*
 * The view <cube>_sealed: the cube's sealed windows only, UNION ALL.  On a
 * physical standby any query that touches an UNLOGGED partition fails, so
 * standby readers query the sealed data through it, with ordinary SQL and
 * now()-relative predicates.  Rebuilt (as the cube's owner, keeping its
 * grants) whenever the set of sealed windows changes; windows ending at or
 * before drop_before are left out (retention drops them next).
 */
void
sc_seal_refresh_view(ScCube *cube, TimestampTz drop_before, const Oid *except, int nexcept)
{
	ScPrivilegeSave save;
	Oid			types[3] = {INT4OID, TIMESTAMPTZOID, OIDARRAYOID};
	Datum		values[3] = {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(drop_before), (Datum) 0};
	char	   *columns = sc_column_list(cube->relid);
	StringInfoData body;
	StringInfoData sql;
	Oid			view = InvalidOid;
	char	   *qualified;
	bool		isnull;
	ScAsOwner	as;

	{
		Datum	   *d = palloc(sizeof(Datum) * Max(nexcept, 1));

		for (int i = 0; i < nexcept; i++)
			d[i] = ObjectIdGetDatum(except[i]);
		values[2] = PointerGetDatum(construct_array(d, nexcept, OIDOID, sizeof(Oid), true, TYPALIGN_INT));
	}
	sc_catalog_enter(&save);
	/* A compacted partition holds many windows: each partition once. */
	if (SPI_execute_with_args("SELECT s.relid::oid FROM streamcube.segment_catalog s "
							  "WHERE s.cube_id = $1 AND s.state = 'sealed' AND s.relid::oid <> ALL ($3) "
							  "  AND EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = s.relid) "
							  "GROUP BY s.relid HAVING max(s.window_end) > $2 "
							  "ORDER BY min(s.window_start)",
							  3, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.segment_catalog");
	sc_catalog_leave(&save);

	initStringInfo(&body);
	{
		int			n = (int) SPI_processed;
		char	  **branches = palloc(sizeof(char *) * Max(n, 1));

		for (int i = 0; i < n; i++)
		{
			Oid			part = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));

			branches[i] = psprintf("SELECT %s FROM ONLY %s", columns,
								   quote_qualified_identifier(get_namespace_name(get_rel_namespace(part)),
															  get_rel_name(part)));
		}
		if (n == 0)
			appendStringInfo(&body, "SELECT %s FROM ONLY %s WHERE false", columns, cube->qualified);
		else
			sc_union_all(&body, branches, 0, n);
	}

	sc_catalog_enter(&save);
	if (SPI_execute_with_args("SELECT sealed_view::oid FROM streamcube.cubes WHERE cube_id = $1",
							  1, types, values, NULL, false, 1) == SPI_OK_SELECT &&
		SPI_processed == 1)
	{
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull && get_rel_relkind(DatumGetObjectId(d)) == RELKIND_VIEW)
			view = DatumGetObjectId(d);
	}
	sc_catalog_leave(&save);

	sc_as_owner_enter(&as, cube->owner);
	initStringInfo(&sql);
	if (OidIsValid(view))
	{
		qualified = quote_qualified_identifier(get_namespace_name(get_rel_namespace(view)),
											   get_rel_name(view));
		appendStringInfo(&sql, "CREATE OR REPLACE VIEW %s AS %s", qualified, body.data);
		if (!sc_seal_try_view(sql.data))
		{
			/* The columns changed in a way a view cannot follow: again. */
			sc_seal_exec(psprintf("DROP VIEW %s", qualified));
			resetStringInfo(&sql);
			appendStringInfo(&sql, "CREATE VIEW %s AS %s", qualified, body.data);
			sc_seal_exec(sql.data);
		}
	}
	else
	{
		qualified = quote_qualified_identifier(cube->schema,
											   sc_free_name(get_rel_namespace(cube->relid),
															psprintf("%s_sealed", cube->relname)));
		appendStringInfo(&sql, "CREATE VIEW %s AS %s", qualified, body.data);
		sc_seal_exec(sql.data);
	}
	resetStringInfo(&sql);
	appendStringInfo(&sql, "COMMENT ON VIEW %s IS %s", qualified,
					 quote_literal_cstr(psprintf("The sealed windows of cube %s (logged partitions only): "
												 "what a physical standby can read. Maintained by streamcube.",
												 cube->qualified)));
	sc_seal_exec(sql.data);
	sc_as_owner_leave(&as);

	sc_cube_row_set_sealed_view(cube->cube_id, qualified);
}

/* ----------------------------------------------------------------
 * Sealing a cube
 * ----------------------------------------------------------------
 */

/* The active windows of a cube that end at or before older_than. */
static List *
sc_seal_due_windows(ScCube *cube, TimestampTz older_than, int max_windows)
{
	ScPrivilegeSave save;
	Oid			types[3] = {INT4OID, TIMESTAMPTZOID, INT4OID};
	Datum		values[3] = {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(older_than),
	Int32GetDatum(max_windows)};
	List	   *jobs = NIL;
	MemoryContext old;

	sc_catalog_enter(&save);
	if (SPI_execute_with_args("SELECT s.window_start, s.relid::oid, r.relname, n.nspname "
							  "FROM streamcube.segment_catalog s "
							  "JOIN pg_class r ON r.oid = s.relid "
							  "JOIN pg_namespace n ON n.oid = r.relnamespace "
							  "WHERE s.cube_id = $1 AND s.state = 'active' AND s.window_end <= $2 "
							  "  AND EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = s.relid) "
							  "ORDER BY s.window_start LIMIT $3 FOR UPDATE OF s",
							  3, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.segment_catalog");
	sc_catalog_leave(&save);
	/* The jobs live as long as the cube: a seal_due keeps them across SPI calls. */
	old = MemoryContextSwitchTo(cube->mcxt);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		ScSealJob  *job = palloc0(sizeof(ScSealJob));
		bool		isnull;

		job->cube = cube;
		job->start = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		job->active = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
		job->active_name = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3);
		job->active_schema = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 4);
		jobs = lappend(jobs, job);
	}
	MemoryContextSwitchTo(old);
	return jobs;
}

/*
 * The locks a seal or a compaction of a cube holds to its end: the cube's
 * seal lock (one seal or compaction of a cube at a time: a second waits,
 * then finds less to do), then the cube's row, as receivers hold it, so
 * that streamcube_drop_cube waits for us instead of deadlocking with us on
 * the window rows.  False when the cube was dropped meanwhile.  The caller
 * is connected to SPI.
 */
bool
sc_seal_lock_cube(const ScCube *cube)
{
	ScPrivilegeSave save;
	bool		exists;

	if (SPI_execute_with_args("SELECT pg_advisory_xact_lock($1, $2)", 2,
							  (Oid[]) {INT4OID, INT4OID},
							  (Datum[]) {Int32GetDatum(SC_SEAL_LOCK_CLASS), Int32GetDatum(cube->cube_id)},
							  NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not take the seal lock");
	sc_catalog_enter(&save);
	if (SPI_execute_with_args("SELECT 1 FROM streamcube.cubes WHERE cube_id = $1 FOR KEY SHARE",
							  1, (Oid[]) {INT4OID}, (Datum[]) {Int32GetDatum(cube->cube_id)},
							  NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not lock the cube");
	exists = SPI_processed > 0;
	sc_catalog_leave(&save);
	return exists;
}

/*
 * Phase 1 for a cube: take its seal lock, find its due windows and copy
 * them.  Returns the jobs for sc_seal_finish().
 */
static List *
sc_seal_prepare(ScCube *cube, TimestampTz older_than, int max_windows)
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

	if (max_windows <= 0)
		return NIL;
	jobs = sc_seal_due_windows(cube, older_than, max_windows);
	foreach(lc, jobs)
		sc_seal_copy(lfirst(lc));
	return jobs;
}

/* Phases 2 and 3 for a cube: swap, record, rebuild its sealed view. */
static void
sc_seal_finish(ScCube *cube, List *jobs)
{
	ListCell   *lc;

	foreach(lc, jobs)
		sc_seal_swap(lfirst(lc));
	foreach(lc, jobs)
		sc_seal_record(lfirst(lc));
	if (jobs != NIL)
		sc_seal_refresh_view(cube, DT_NOBEGIN, NULL, 0);
}

/* Seal the due windows of one cube; returns how many. */
static int
sc_seal_cube(ScCube *cube, TimestampTz older_than)
{
	List	   *jobs = sc_seal_prepare(cube, older_than, SC_SEAL_MAX_WINDOWS);

	sc_seal_finish(cube, jobs);
	return list_length(jobs);
}

/* now() as the cube's time column sees it. */
static TimestampTz
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
sc_seal_retention(ScCube *cube, int max_partitions)
{
	ScPrivilegeSave save;
	Oid			types[4] = {INT4OID, TIMESTAMPTZOID, NAMEOID, OIDARRAYOID};
	Datum		values[4];
	uint64		n;
	SPITupleTable *tab;
	Oid		   *parts;

	if (cube->retention < 0 || max_partitions <= 0)
		return 0;
	values[0] = Int32GetDatum(cube->cube_id);
	values[1] = TimestampTzGetDatum(sc_seal_now(cube) - cube->retention);
	values[2] = DirectFunctionCall1(namein, CStringGetDatum(GetUserNameFromId(GetUserId(), false)));

	sc_catalog_enter(&save);
	/*
	 * A partition goes when all of it is past: a compacted one holds many
	 * windows.  The oldest first, a bounded number per call (locks).
	 */
	if (SPI_execute_with_args(psprintf("SELECT s.relid::oid FROM streamcube.segment_catalog s "
									   "WHERE s.cube_id = $1 "
									   "GROUP BY s.relid "
									   "HAVING bool_and(s.state = 'sealed') AND max(s.window_end) <= $2 "
									   "ORDER BY min(s.window_start) LIMIT %d", max_partitions),
							  2, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.segment_catalog");
	n = SPI_processed;
	tab = SPI_tuptable;
	parts = palloc(sizeof(Oid) * Max(n, 1));
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;

		parts[i] = DatumGetObjectId(SPI_getbinval(tab->vals[i], tab->tupdesc, 1, &isnull));
	}
	{
		Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));

		for (uint64 i = 0; i < n; i++)
			d[i] = ObjectIdGetDatum(parts[i]);
		values[3] = PointerGetDatum(construct_array(d, (int) n, OIDOID, sizeof(Oid), true, TYPALIGN_INT));
	}
	if (n > 0 &&
		SPI_execute_with_args("INSERT INTO streamcube.segment_log "
							  "(cube_id, cube, window_start, window_end, action, done_by) "
							  "SELECT s.cube_id, c.relid, min(s.window_start), max(s.window_end), 'dropped', $3 "
							  "FROM streamcube.segment_catalog s JOIN streamcube.cubes c USING (cube_id) "
							  "WHERE s.cube_id = $1 AND s.relid::oid = ANY ($4) "
							  "GROUP BY s.cube_id, c.relid, s.relid",
							  4, types, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not journal retention");
	sc_catalog_leave(&save);
	/* The view must not hold what is dropped next. */
	if (n > 0)
		sc_seal_refresh_view(cube, DatumGetTimestampTz(values[1]), NULL, 0);
	for (uint64 i = 0; i < n; i++)
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
	return (int) n;
}

/* The ids of every cube. */
static List *
sc_all_cubes(void)
{
	ScPrivilegeSave save;
	List	   *ids = NIL;

	sc_catalog_enter(&save);
	if (SPI_execute("SELECT cube_id FROM streamcube.cubes ORDER BY cube_id", false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.cubes");
	sc_catalog_leave(&save);
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
			*due->drop_budget -= sc_seal_retention(due->cube, *due->drop_budget);
			break;
		case SC_DUE_CLEANUP:
			{
				ListCell   *lc;
				ScAsOwner	as;

				sc_as_owner_enter(&as, due->cube->owner);
				foreach(lc, due->jobs)
				{
					ScSealJob  *job = lfirst(lc);

					sc_seal_exec(psprintf("DROP TABLE IF EXISTS %s",
										  quote_qualified_identifier(job->active_schema, job->twin_name)));
				}
				sc_as_owner_leave(&as);
				sc_compact_cleanup(due->cube, due->compact_jobs);
				break;
			}
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
	int			seal_budget = SC_SEAL_MAX_WINDOWS;
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
			sealed += list_length(due->jobs);
		else if (due->jobs != NIL || due->compact_jobs != NIL)
			(void) sc_seal_due_try(due, SC_DUE_CLEANUP);
	}
	PG_RETURN_INT32(sealed);
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
