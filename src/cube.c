/*-------------------------------------------------------------------------
 *
 * cube.c
 *		What a cube is to the rest of streamcube: looking one up by the name
 *		a caller gives (and checking that the caller may act on it), and
 *		loading its catalog row and its table into an ScCube, with the check
 *		that the table is still one the receivers can write.
 *
 * The SQL functions on cubes are in cube_sql.c; the one writer of a cube's
 * row is cube_catalog.c.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "cube_catalog.h"
#include "rollup.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "kafka.h"
#include "cube.h"
#include "rollup.h"
#include "positions.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "parser/parser.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/datetime.h"
#include "utils/lsyscache.h"
#include "utils/guc.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "pgstat.h"

/* ----------------------------------------------------------------
 * Small helpers
 * ----------------------------------------------------------------
 */
/*
 * Resolve a cube name given by the caller (with the caller's search path)
 * to its catalog row; errors if it is not a cube.  The owner of a cube is
 * the owner of its table.
 */
int32
sc_cube_lookup(const char *name, Oid *relid_out, Oid *owner_out)
{
	Oid			relid = sc_caller_relation(name);
	Datum		arg;
	Oid			argtype = OIDOID;
	ScPrivilegeSave save;
	int32		cube_id;
	bool		isnull;
	int			ret;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("cube \"%s\" does not exist", name),
				 errhint("streamcube.consumers and streamcube.segments list the existing cubes.")));

	arg = ObjectIdGetDatum(relid);
	sc_catalog_enter(&save);
	ret = SPI_execute_with_args("SELECT c.cube_id, r.relowner FROM streamcube.cubes c "
								"JOIN pg_class r ON r.oid = c.relid WHERE c.relid = $1",
								1, &argtype, &arg, NULL, false, 1);
	sc_catalog_leave(&save);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.cubes: %s", SPI_result_code_string(ret));
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("relation \"%s\" is not a streamcube cube", name),
				 errhint("Create cubes with streamcube_create_cube().")));
	cube_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	*owner_out = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	*relid_out = relid;
	return cube_id;
}

/* Only the cube's owner, a superuser or a streamcube_admin member. */
static void
sc_require_cube_owner(const char *name, Oid owner, const char *action)
{
	if (sc_is_admin(GetUserId()) || has_privs_of_role(GetUserId(), owner))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to %s cube \"%s\"", action, name),
			 errdetail("Only the cube's owner, superusers and members of role \"%s\" may %s it.",
					   SC_ADMIN_ROLE, action),
			 errhint("Ask the owner (%s) or an administrator.",
					 GetUserNameFromId(owner, false))));
}

/*
 * Read the declared columns of the cube's table; find the time column.
 *
 * Generated columns are left out: PostgreSQL computes them, no message
 * fills them.  The time column is the table's partition key, found by
 * attribute number, so that it is known whatever its name is now; a name
 * that differs from the one the catalog holds (a RENAME COLUMN) makes the
 * cube unable to ingest until it is renamed back (sc_cube_check_table).
 */
void
sc_cube_read_columns(ScCube *cube, const char *time_column)
{
	Oid			argtype = OIDOID;
	Datum		arg = ObjectIdGetDatum(cube->relid);
	uint64		n;

	static SPIPlanPtr plan = NULL;	/* sc_cube_load's: planned once */

	sc_catalog_exec_kept(&plan, "SELECT a.attname, a.atttypid, a.attnum, "
						 "       a.attnum = (SELECT p.partattrs[0] FROM pg_catalog.pg_partitioned_table p "
						 "                   WHERE p.partrelid = a.attrelid), "
						 "       a.atttypmod "
						 "FROM pg_catalog.pg_attribute a "
						 "WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped "
						 "  AND a.attgenerated = '' "
						 "  AND a.attname NOT IN ('_partition', '_offset') "
						 "ORDER BY a.attnum",
						 1, &argtype, &arg, NULL, false, 0);
	MemoryContextSwitchTo(cube->mcxt);
	n = SPI_processed;
	cube->ncolumns = (int) n;
	cube->columns = palloc0(sizeof(ScColumn) * Max(n, 1));
	cube->time_index = -1;
	cube->time_column = pstrdup(time_column);
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;
		bool		key;
		ScColumn   *col = &cube->columns[i];

		col->name = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		col->type = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
		col->attnum = DatumGetInt16(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3, &isnull));
		key = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 4, &isnull));
		col->typmod = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 5, &isnull));
		col->path = palloc(sizeof(char *));
		col->path[0] = col->name;
		col->pathlen = 1;
		/* Before the table is partitioned (creation), by name. */
		if ((!isnull && key) || (isnull && strcmp(col->name, time_column) == 0))
			cube->time_index = (int) i;
	}
	if (cube->time_index >= 0)
		cube->time_type = cube->columns[cube->time_index].type;
}

/*
 * Can the receiver ingest the cube as its catalog row describes it?  NULL
 * when it can, else why not, with what to do: the time column renamed, a
 * column that option "fields" maps renamed or dropped, a metadata column
 * retyped to a type that cannot hold its value, a table attached as a
 * partition that is none of the cube's windows (receivers would route rows
 * into it, seals would never seal it).  `before`, the cube as it was
 * loaded earlier (or NULL), tells a rename from a drop.
 */
char *
sc_cube_check_table(const ScCube *cube, const ScCube *before)
{
	ListCell   *lc;

	if (strcmp(cube->columns[cube->time_index].name, cube->time_column) != 0)
		return psprintf("time column \"%s\" of cube %s was renamed to \"%s\"; "
						"rename it back (ALTER TABLE %s RENAME COLUMN %s TO %s), then call streamcube_resume('%s')",
						cube->time_column, cube->qualified, cube->columns[cube->time_index].name,
						cube->qualified, quote_identifier(cube->columns[cube->time_index].name),
						quote_identifier(cube->time_column), sc_cube_name_literal(cube));
	foreach(lc, cube->missing_columns)
	{
		const char *missing = lfirst(lc);
		const char *fate = before != NULL ? "was dropped" : "was dropped or renamed";

		for (int c = 0; before != NULL && c < before->ncolumns; c++)
			if (strcmp(before->columns[c].name, missing) == 0)
				for (int d = 0; d < cube->ncolumns; d++)
					if (cube->columns[d].attnum == before->columns[c].attnum)
						fate = psprintf("was renamed to \"%s\"", cube->columns[d].name);
		return psprintf("column \"%s\" of cube %s, which option \"fields\" maps, %s; "
						"rename or add it back, or change \"fields\" with streamcube_alter_cube('%s', ...), "
						"then call streamcube_resume('%s')",
						missing, cube->qualified, fate,
						sc_cube_name_literal(cube), sc_cube_name_literal(cube));
	}
	if (cube->stranger != NULL)
		return psprintf("table %s is attached to cube %s, but is none of its windows (streamcube did not create it, "
						"or it was detached and attached again after a new window took its place); "
						"detach it (ALTER TABLE %s DETACH PARTITION %s), insert its rows into the cube if they belong there, "
						"then call streamcube_resume('%s')",
						cube->stranger, cube->qualified, cube->qualified, cube->stranger,
						sc_cube_name_literal(cube));
	for (int c = 0; c < cube->ncolumns; c++)
	{
		char	   *why = sc_cube_meta_type_problem(cube, &cube->columns[c], c);

		if (why != NULL)
			return psprintf("%s; change its type back, or change \"fields\" with streamcube_alter_cube('%s', ...), "
							"then call streamcube_resume('%s')",
							why, sc_cube_name_literal(cube), sc_cube_name_literal(cube));
	}
	foreach(lc, cube->rollups)
	{
		const char *why = sc_rollup_problem(cube, lfirst(lc));

		if (why != NULL)
			return psprintf("%s; add the column back, or drop the roll-up (streamcube_drop_rollup), "
							"then call streamcube_resume('%s')", why, sc_cube_name_literal(cube));
	}
	return NULL;
}

/* The cube's qualified name, fit to stand in an SQL string literal. */
const char *
sc_cube_name_literal(const ScCube *cube)
{
	StringInfoData out;

	initStringInfo(&out);
	for (const char *p = cube->qualified; *p; p++)
	{
		if (*p == '\'')
			appendStringInfoChar(&out, '\'');
		appendStringInfoChar(&out, *p);
	}
	return out.data;
}

/*
 * A partition of the cube's table that is none of its windows, if any:
 * every partition streamcube attaches is in streamcube.segment_catalog.
 * Receivers ask whenever the table changed, which a replay of history
 * does with every window it creates: EXCEPT compares the two lists in one
 * pass (a NOT EXISTS under LIMIT 1 was planned as a nested loop, a scan of
 * the cube's catalog rows per partition: 14% of a receiver replaying 720
 * windows).
 */
static void
sc_cube_find_stranger(ScCube *cube)
{
	static SPIPlanPtr plan = NULL;	/* sc_cube_load's: planned once */

	sc_catalog_exec_kept(&plan, "SELECT x.r::regclass::text FROM "
						 "  (SELECT i.inhrelid AS r FROM pg_catalog.pg_inherits i WHERE i.inhparent = $1 "
						 "   EXCEPT "
						 "   SELECT s.relid::oid FROM streamcube.segment_catalog s WHERE s.cube_id = $2) x "
						 "ORDER BY x.r LIMIT 1",
						 2, (Oid[]) {OIDOID, INT4OID},
						 (Datum[]) {ObjectIdGetDatum(cube->relid), Int32GetDatum(cube->cube_id)},
						 NULL, true, 1);
	if (SPI_processed > 0)
		cube->stranger = MemoryContextStrdup(cube->mcxt,
											 SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1));
}

/*
 * The cube's roll-ups, and a key that changes when they do (a roll-up
 * created or dropped: a receiver then reads its cube again).
 */
static void
sc_cube_load_rollups(ScCube *cube)
{
	StringInfoData key;
	ListCell   *lc;
	MemoryContext old = MemoryContextSwitchTo(cube->mcxt);

	cube->rollups = sc_rollups_load(cube);
	initStringInfo(&key);
	foreach(lc, cube->rollups)
	{
		ScRollup   *r = lfirst(lc);

		appendStringInfo(&key, "%d:%u ", r->rollup_id, r->relid);
	}
	cube->rollups_key = key.data;
	MemoryContextSwitchTo(old);
}

/*
 * Load a cube from the catalog, in the current transaction.
 */
ScCube *
sc_cube_load(int32 cube_id, bool missing_ok)
{
	ScCube	   *cube = palloc0(sizeof(ScCube));
	MemoryContext caller = CurrentMemoryContext;
	Oid			argtype = INT4OID;
	Datum		arg = Int32GetDatum(cube_id);
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	char	   *time_column;
	Jsonb	   *options;
	Datum		d;

	/*
	 * Its statements are planned once per process: a receiver replaying
	 * history reads its cube again after each round of windows it attaches
	 * (their invalidations are the table's), and planning them was most of
	 * the cost (about 1.9 million instructions a load).
	 */
	static SPIPlanPtr plan = NULL;

	cube->mcxt = caller;
	SPI_connect();
	sc_catalog_exec_kept(&plan, "SELECT c.relid, r.relowner, n.nspname, r.relname, c.cluster_name, c.topic, "
						 "       c.time_column, c.segment_interval, c.format, c.options, c.paused, "
						 "       c.skip_partition, c.skip_offset, c.config_version, c.skip_error, "
						 "       c.paused_reason, c.kafka_cluster_id, "
						 "       c.stop_reached_at IS NOT NULL "
						 "FROM streamcube.cubes c "
						 "JOIN pg_class r ON r.oid = c.relid "
						 "JOIN pg_namespace n ON n.oid = r.relnamespace "
						 "WHERE c.cube_id = $1",
						 1, &argtype, &arg, NULL, true, 1);
	if (SPI_processed == 0)
	{
		SPI_finish();
		if (missing_ok)
			return NULL;
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("cube %d does not exist, or its table was dropped", cube_id)));
	}

	MemoryContextSwitchTo(caller);
	tup = SPI_copytuple(SPI_tuptable->vals[0]);
	desc = CreateTupleDescCopy(SPI_tuptable->tupdesc);

	cube->cube_id = cube_id;
	cube->relid = DatumGetObjectId(SPI_getbinval(tup, desc, 1, &isnull));
	cube->owner = DatumGetObjectId(SPI_getbinval(tup, desc, 2, &isnull));
	cube->schema = SPI_getvalue(tup, desc, 3);
	cube->relname = SPI_getvalue(tup, desc, 4);
	cube->qualified = quote_qualified_identifier(cube->schema, cube->relname);
	cube->cluster = SPI_getvalue(tup, desc, 5);
	cube->topic = SPI_getvalue(tup, desc, 6);
	sc_topics_load(cube);		/* leaves caller current */
	time_column = SPI_getvalue(tup, desc, 7);
	cube->width = sc_interval_usecs(DatumGetIntervalP(SPI_getbinval(tup, desc, 8, &isnull)),
									"segment_interval");
	{
		char	   *format = SPI_getvalue(tup, desc, 9);

		cube->format = strcmp(format, "csv") == 0 ? SC_FORMAT_CSV :
			strcmp(format, "jsonb") == 0 ? SC_FORMAT_JSONB :
			strcmp(format, "avro") == 0 ? SC_FORMAT_AVRO :
			strcmp(format, "protobuf") == 0 ? SC_FORMAT_PROTOBUF : SC_FORMAT_JSON;
	}
	options = DatumGetJsonbPCopy(SPI_getbinval(tup, desc, 10, &isnull));
	cube->options_text = SPI_getvalue(tup, desc, 10);
	cube->paused = DatumGetBool(SPI_getbinval(tup, desc, 11, &isnull));
	d = SPI_getbinval(tup, desc, 12, &isnull);
	cube->skip_partition = isnull ? -1 : DatumGetInt32(d);
	d = SPI_getbinval(tup, desc, 13, &isnull);
	cube->skip_offset = isnull ? -1 : DatumGetInt64(d);
	cube->config_version = DatumGetInt64(SPI_getbinval(tup, desc, 14, &isnull));
	cube->skip_error = SPI_getvalue(tup, desc, 15);
	cube->paused_reason = SPI_getvalue(tup, desc, 16);
	cube->kafka_cluster_id = SPI_getvalue(tup, desc, 17);
	cube->stop_reached = DatumGetBool(SPI_getbinval(tup, desc, 18, &isnull));

	sc_cube_read_columns(cube, time_column);
	if (cube->time_index < 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table %s of cube %d is not partitioned by a column", cube->qualified, cube_id),
				 errhint("Restore the table as streamcube_create_cube() made it, or drop the cube.")));
	sc_cube_parse_options(cube, options, false);
	sc_topics_mark_column(cube);
	sc_cube_find_stranger(cube);
	sc_cube_load_rollups(cube);
	SPI_finish();
	cube->broken = sc_cube_check_table(cube, NULL);
	return cube;
}

/* The cube's id, once the caller is allowed to act on it. */
int32
sc_cube_for_action(const char *name, const char *action, Oid *relid, Oid *owner)
{
	int32		cube_id = sc_cube_lookup(name, relid, owner);

	sc_require_cube_owner(name, *owner, action);
	return cube_id;
}
