/*-------------------------------------------------------------------------
 *
 * sealed.c
 *		What a sealed partition is, for sealing (seal.c) and compaction
 *		(compact.c) alike: a logged twin table with the cube's columns,
 *		indexes and a CHECK constraint equal to its bound, the trigger that
 *		keeps it immutable, DDL on a cube's partitions as the cube's owner
 *		with short lock timeouts and retries, the lock that serialises seals
 *		and compactions of one cube, and the view <cube>_sealed over them
 *		(written as the roll-ups' views <roll-up>_sealed are, rollups.c).
 *
 * DDL on the cube's partitions runs as the cube's owner, with
 * SECURITY_RESTRICTED_OPERATION; catalog rows are written through
 * sc_catalog_exec().  Where these locks fall in the lock order:
 * docs/architecture.md, "Lock order".
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
#include "sealed.h"
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

PG_FUNCTION_INFO_V1(sc_sealed_guard);

/* DDL that needs the cube's ACCESS EXCLUSIVE lock: lock timeout, pause between tries, tries. */
#define SC_SWAP_LOCK_TIMEOUT "100ms"
#define SC_SWAP_RETRY_MS 300
#define SC_SWAP_TRIES 50

/* Set by receivers around their COPY: late rows may enter a sealed window. */
bool		sc_seal_writes_allowed = false;

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

/* A free name in a schema (sc_name_taken): base, then base_2, base_3 ... */
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
		if (!sc_name_taken(name, nsp))
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
 * DDL under the cube's lock, retried
 * ----------------------------------------------------------------
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

/* What a try of sc_lock_retry locks, for its failure's words. */
typedef enum ScLockHeld
{
	SC_HELD_TABLE,				/* the cube */
	SC_HELD_VIEWS,				/* its sealed views */
	SC_HELD_BOTH				/* both */
} ScLockHeld;

/*
 * Run fn(arg), which needs ACCESS EXCLUSIVE locks for a moment, with
 * lock_timeout = 100 ms, retried every 300 ms: it is never queued behind a
 * long query, where it would stall every query after it.  After the last
 * try it fails, saying it could not do `what` because what it locks
 * stayed locked.
 */
static void
sc_lock_retry(const ScCube *cube, void (*fn) (void *), void *arg, const char *what, ScLockHeld held)
{
	static const char *const held_words[] = {
		[SC_HELD_TABLE] = "its table",
		[SC_HELD_VIEWS] = "its sealed views",
		[SC_HELD_BOTH] = "its table or its sealed views"
	};

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
					 errmsg("could not %s of cube %s: %s stayed locked", what, cube->qualified,
							held_words[held]),
					 held == SC_HELD_TABLE
					 ? errdetail("This needs an ACCESS EXCLUSIVE lock on the cube for a moment; %d tries of %s each failed.",
								 SC_SWAP_TRIES, SC_SWAP_LOCK_TIMEOUT)
					 : errdetail("This needs an ACCESS EXCLUSIVE lock for a moment on %s (the views <cube>_sealed and <roll-up>_sealed, which it rebuilds); %d tries of %s each failed.",
								 held == SC_HELD_VIEWS ? "the cube's sealed views" : "the cube and its sealed views",
								 SC_SWAP_TRIES, SC_SWAP_LOCK_TIMEOUT),
					 held == SC_HELD_TABLE
					 ? errhint("A long query or transaction holds the cube. Nothing was changed; the next attempt tries again.")
					 : errhint("A long query or transaction holds the cube or reads one of those views. Nothing was changed; the next attempt tries again.")));
		FreeErrorData(edata);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 SC_SWAP_RETRY_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* fn(arg) under an ACCESS EXCLUSIVE lock on the cube (sc_lock_retry). */
void
sc_seal_with_lock_retry(const ScCube *cube, void (*fn) (void *), void *arg, const char *what)
{
	sc_lock_retry(cube, fn, arg, what, SC_HELD_TABLE);
}

/* The same, when fn locks the cube's sealed views too (a seal's swap). */
void
sc_seal_with_view_lock_retry(const ScCube *cube, void (*fn) (void *), void *arg, const char *what)
{
	sc_lock_retry(cube, fn, arg, what, SC_HELD_BOTH);
}

typedef struct ScViewLocks
{
	const ScCube *cube;
	bool		cube_view;
	const Oid  *views;
	int			nviews;
} ScViewLocks;

static Oid	sc_cube_sealed_view(const ScCube *cube);

/*
 * Lock, to the end of the transaction, the views that a seal, a compaction
 * or a retention rebuilds: the cube's <cube>_sealed (with cube_view) and
 * views[0..nviews) (its roll-ups').  A view is rebuilt under an ACCESS
 * EXCLUSIVE lock, which waits for every query reading it: taken without a
 * timeout once the seal held the cube's own lock, one long query on a view
 * held the cube, and every receiver writing into it, until it ended.  So
 * they are taken with lock_timeout, as the cube's: a seal in the same try
 * as the cube's lock (sc_seal_lock_views_now, in its swap), so that a
 * busy view lets go of the cube too; a compaction or a retention, which
 * rebuild the views before they take the cube, in a try of their own
 * (sc_seal_lock_views).
 */
void
sc_seal_lock_views_now(const ScCube *cube, bool cube_view, const Oid *views, int nviews)
{
	if (cube_view)
	{
		Oid			view = sc_cube_sealed_view(cube);

		if (sc_sealed_view_ours(view, cube->relid))
			LockRelationOid(view, AccessExclusiveLock);
	}
	for (int i = 0; i < nviews; i++)
		LockRelationOid(views[i], AccessExclusiveLock);
}

static void
sc_seal_lock_views_fn(void *arg)
{
	ScViewLocks *locks = arg;

	sc_seal_lock_views_now(locks->cube, locks->cube_view, locks->views, locks->nviews);
}

void
sc_seal_lock_views(const ScCube *cube, bool cube_view, const Oid *views, int nviews,
				   const char *what)
{
	ScViewLocks locks = {cube, cube_view, views, nviews};

	sc_lock_retry(cube, sc_seal_lock_views_fn, &locks, what, SC_HELD_VIEWS);
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
 * What a view <x>_sealed reads: the columns of parent from each of
 * parts[0..n) (ONLY), joined by UNION ALL; no rows when n is 0.
 */
char *
sc_sealed_view_body(Oid parent, const Oid *parts, int n)
{
	char	   *columns = sc_column_list(parent);
	StringInfoData body;

	initStringInfo(&body);
	if (n == 0)
		appendStringInfo(&body, "SELECT %s FROM ONLY %s WHERE false", columns, sc_relation_qualified(parent));
	else
	{
		char	  **branches = palloc(sizeof(char *) * n);

		for (int i = 0; i < n; i++)
			branches[i] = psprintf("SELECT %s FROM ONLY %s", columns, sc_relation_qualified(parts[i]));
		sc_union_all(&body, branches, 0, n);
	}
	return body.data;
}

/*
 * Is view the view <parent>_sealed streamcube made: a view that belongs to
 * parent's owner?  (The catalog forgets a view that is dropped,
 * _on_sql_drop; this guards against an OID that names another role's
 * relation all the same, never to be replaced or dropped.  Not its schema:
 * ALTER TABLE ... SET SCHEMA moves the table, not the view.)
 */
bool
sc_sealed_view_ours(Oid view, Oid parent)
{
	return OidIsValid(view) && get_rel_relkind(view) == RELKIND_VIEW &&
		sc_relation_owner(view) == sc_relation_owner(parent);
}

/*
 * Make the view <parent>_sealed read body, as owner (the owner of parent),
 * keeping its grants: view is the one the catalog names, or InvalidOid
 * (or not ours: dropped by hand) for a new one, named after parent in its
 * schema.  Returns its qualified name, for the catalog.
 */
char *
sc_sealed_view_write(Oid view, Oid parent, Oid owner, const char *body, const char *comment)
{
	StringInfoData sql;
	char	   *qualified;
	ScAsOwner	as;

	sc_as_owner_enter(&as, owner);
	initStringInfo(&sql);
	if (sc_sealed_view_ours(view, parent))
	{
		qualified = sc_relation_qualified(view);
		appendStringInfo(&sql, "CREATE OR REPLACE VIEW %s AS %s", qualified, body);
		if (!sc_seal_try_view(sql.data))
		{
			/* The columns changed in a way a view cannot follow: again. */
			sc_seal_exec(psprintf("DROP VIEW %s", qualified));
			resetStringInfo(&sql);
			appendStringInfo(&sql, "CREATE VIEW %s AS %s", qualified, body);
			sc_seal_exec(sql.data);
		}
	}
	else
	{
		Oid			nsp = get_rel_namespace(parent);

		qualified = quote_qualified_identifier(get_namespace_name(nsp),
											   sc_free_name(nsp, psprintf("%s_sealed", get_rel_name(parent))));
		appendStringInfo(&sql, "CREATE VIEW %s AS %s", qualified, body);
		sc_seal_exec(sql.data);
	}
	sc_seal_exec(psprintf("COMMENT ON VIEW %s IS %s", qualified, quote_literal_cstr(comment)));
	sc_as_owner_leave(&as);
	return qualified;
}

/* The view <cube>_sealed the catalog names; InvalidOid for none (yet). */
static Oid
sc_cube_sealed_view(const ScCube *cube)
{
	ScPrivilegeSave save;
	Oid			view = InvalidOid;
	bool		isnull;

	sc_catalog_enter(&save);
	if (SPI_execute_with_args("SELECT sealed_view::oid FROM streamcube.cubes WHERE cube_id = $1",
							  1, (Oid[]) {INT4OID}, (Datum[]) {Int32GetDatum(cube->cube_id)},
							  NULL, false, 1) == SPI_OK_SELECT &&
		SPI_processed == 1)
	{
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			view = DatumGetObjectId(d);
	}
	sc_catalog_leave(&save);
	return view;
}

/*
 * The view <cube>_sealed: the cube's sealed windows only, UNION ALL.  On a
 * physical standby any query that touches an UNLOGGED partition fails, so
 * standby readers query the sealed data through it, with ordinary SQL and
 * now()-relative predicates.  Rebuilt (as the cube's owner, keeping its
 * grants) whenever the set of sealed windows changes; windows ending at or
 * before drop_before are left out (retention drops them next).  The views
 * of the cube's roll-ups are their seal's and compaction's to rebuild
 * (sc_rollup_refresh_views).
 */
void
sc_seal_refresh_view(ScCube *cube, TimestampTz drop_before, const Oid *except, int nexcept)
{
	ScPrivilegeSave save;
	Oid			types[3] = {INT4OID, TIMESTAMPTZOID, OIDARRAYOID};
	Datum		values[3] = {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(drop_before), (Datum) 0};
	Oid			view;
	Oid		   *parts;
	int			n;
	bool		isnull;
	char	   *body;

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
	n = (int) SPI_processed;
	parts = palloc(sizeof(Oid) * Max(n, 1));
	for (int i = 0; i < n; i++)
		parts[i] = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
	body = sc_sealed_view_body(cube->relid, parts, n);
	view = sc_cube_sealed_view(cube);

	sc_cube_row_set_sealed_view(cube->cube_id,
								sc_sealed_view_write(view, cube->relid, cube->owner, body,
													 psprintf("The sealed windows of cube %s (logged partitions only): "
															  "what a physical standby can read. Maintained by streamcube.",
															  cube->qualified)));
}


/*
 * The locks a seal or a compaction of a cube holds to its end: the cube's
 * seal lock (one seal or compaction of a cube at a time: a second waits,
 * then finds less to do), then the cube's row, as receivers hold it, so
 * that streamcube_drop_cube waits for us instead of deadlocking with us on
 * the window rows (locks 1 and 2 of "Lock order", docs/architecture.md).
 * False when the cube was dropped meanwhile.  The caller is connected to
 * SPI.
 */
bool
sc_seal_lock_cube(const ScCube *cube)
{
	ScPrivilegeSave save;
	bool		exists;

	if (SPI_execute_with_args("SELECT pg_advisory_xact_lock($1, $2)", 2,
							  (Oid[]) {INT4OID, INT4OID},
							  (Datum[]) {Int32GetDatum(SC_LOCK_CLASS_SEAL), Int32GetDatum(cube->cube_id)},
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

