/*-------------------------------------------------------------------------
 *
 * cube.c
 *		SQL functions on cubes: create, drop, pause, resume, wait; and the
 *		loader that turns a catalog row into an ScCube.
 *
 * streamcube_create_cube() does all of its work in the caller's
 * transaction: the table, the catalog rows, the assignment of every Kafka
 * partition to replica set "default", the first two windows.  Any error
 * rolls all of it back, so a wrong argument creates nothing.  The launcher
 * is woken at COMMIT and starts a receiver.
 *
 * DDL on the cube's table runs as the caller (so ownership and privileges
 * are the caller's); catalog rows are written through sc_catalog_enter().
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "kafka.h"
#include "cube.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "parser/parser.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "pgstat.h"

PG_FUNCTION_INFO_V1(sc_create_cube);
PG_FUNCTION_INFO_V1(sc_drop_cube);
PG_FUNCTION_INFO_V1(sc_pause_cube);
PG_FUNCTION_INFO_V1(sc_resume_cube);
PG_FUNCTION_INFO_V1(sc_wait_cube);

static const char *const valid_options =
"start, grace, bad_message, fields, replica_sets, delimiter, quote, null";

/* ----------------------------------------------------------------
 * Small helpers
 * ----------------------------------------------------------------
 */
/* Run a catalog statement with arguments as the catalog owner. */
static void
sc_catalog_exec(const char *sql, int nargs, Oid *types, Datum *values)
{
	ScPrivilegeSave save;
	int			ret;

	sc_catalog_enter(&save);
	ret = SPI_execute_with_args(sql, nargs, types, values, NULL, false, 0);
	sc_catalog_leave(&save);
	if (ret < 0)
		elog(ERROR, "catalog statement failed: %s", SPI_result_code_string(ret));
}

static int64
sc_interval_usecs(Interval *iv)
{
	return iv->time + (int64) iv->day * USECS_PER_DAY;
}

/* Resolve a user-given cube name to its catalog row; errors if not a cube. */
static int32
sc_cube_lookup(const char *name, Oid *relid_out, Oid *owner_out)
{
	List	   *names = stringToQualifiedNameList(name);
	Oid			relid = RangeVarGetRelid(makeRangeVarFromNameList(names), NoLock, true);
	Datum		arg;
	Oid			argtype = OIDOID;
	ScPrivilegeSave save;
	int32		cube_id;
	bool		isnull;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("cube \"%s\" does not exist", name),
				 errhint("streamcube.consumers and streamcube.segments list the existing cubes.")));

	arg = ObjectIdGetDatum(relid);
	sc_catalog_enter(&save);
	SPI_execute_with_args("SELECT cube_id, owner FROM streamcube.cubes WHERE relid = $1",
						  1, &argtype, &arg, NULL, false, 1);
	sc_catalog_leave(&save);
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

/* ----------------------------------------------------------------
 * Options
 * ----------------------------------------------------------------
 */
/* An option with two allowed values: false for the first, true for the second. */
static bool
sc_option_choice(const char *key, const char *value, const char *first, const char *second)
{
	if (strcmp(value, first) == 0)
		return false;
	if (strcmp(value, second) == 0)
		return true;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid value \"%s\" for option \"%s\"", value, key),
			 errhint("Use \"%s\" or \"%s\".", first, second)));
	return false;				/* keep the compiler quiet */
}

static char
sc_single_char(const char *key, const char *value)
{
	if (strlen(value) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"%s\" must be a single one-byte character", key)));
	return value[0];
}

static void
sc_parse_fields(ScCube *cube, Datum fields)
{
	Oid			argtype = JSONBOID;
	uint64		n;

	SPI_execute_with_args("SELECT key, jsonb_typeof(value), "
						  "  CASE jsonb_typeof(value) WHEN 'array' THEN "
						  "    ARRAY(SELECT jsonb_array_elements_text(value)) "
						  "  ELSE string_to_array(value #>> '{}', '.') END "
						  "FROM jsonb_each($1)",
						  1, &argtype, &fields, NULL, true, 0);
	MemoryContextSwitchTo(cube->mcxt);
	n = SPI_processed;
	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *column = SPI_getvalue(tup, desc, 1);
		char	   *type = SPI_getvalue(tup, desc, 2);
		bool		isnull;
		Datum		path = SPI_getbinval(tup, desc, 3, &isnull);
		int			c;

		for (c = 0; c < cube->ncolumns; c++)
			if (strcmp(cube->columns[c].name, column) == 0)
				break;
		if (c == cube->ncolumns)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("option \"fields\" names column \"%s\", which cube %s does not have",
							column, cube->qualified)));
		if (strcmp(type, "string") != 0 && strcmp(type, "array") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("path of column \"%s\" in option \"fields\" must be a string such as \"user.id\" or an array of keys",
							column)));
		if (!isnull)
		{
			Datum	   *elems;
			bool	   *enulls;
			int			nelems;

			deconstruct_array(DatumGetArrayTypeP(path), TEXTOID, -1, false, TYPALIGN_INT,
							  &elems, &enulls, &nelems);
			if (nelems == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("path of column \"%s\" in option \"fields\" is empty", column)));
			cube->columns[c].path = palloc(sizeof(char *) * nelems);
			cube->columns[c].pathlen = nelems;
			for (int e = 0; e < nelems; e++)
				cube->columns[c].path[e] = TextDatumGetCString(elems[e]);
		}
	}
}

/*
 * Option "replica_sets": the names of the replica sets the topic's
 * partitions are dealt to, round robin; each set runs one receiver for the
 * cube.  The default is one set, "default".
 */
static void
sc_parse_replica_sets(ScCube *cube, Datum value, const char *type)
{
	Oid			argtype = JSONBOID;
	uint64		n;

	if (strcmp(type, "array") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"replica_sets\" must be a JSON array of replica set names"),
				 errhint("For example {\"replica_sets\": [\"a\", \"b\"]}.")));
	SPI_execute_with_args("SELECT e #>> '{}', jsonb_typeof(e), "
						  "       count(*) OVER (PARTITION BY e) "
						  "FROM jsonb_array_elements($1) WITH ORDINALITY AS t(e, i) ORDER BY i",
						  1, &argtype, &value, NULL, true, 0);
	MemoryContextSwitchTo(cube->mcxt);
	n = SPI_processed;
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("option \"replica_sets\" must name at least one replica set")));
	cube->replica_sets = NIL;
	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		char	   *name = SPI_getvalue(tup, SPI_tuptable->tupdesc, 1);
		bool		isnull;

		if (strcmp(SPI_getvalue(tup, SPI_tuptable->tupdesc, 2), "string") != 0 || name[0] == '\0' ||
			strlen(name) >= NAMEDATALEN)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("replica set names in option \"replica_sets\" must be non-empty strings of at most %d bytes",
							NAMEDATALEN - 1)));
		if (DatumGetInt64(SPI_getbinval(tup, SPI_tuptable->tupdesc, 3, &isnull)) > 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("replica set \"%s\" appears twice in option \"replica_sets\"", name)));
		cube->replica_sets = lappend(cube->replica_sets, name);
	}
}

/*
 * Parse the options of a cube.  With validate, unknown keys and values are
 * errors that name the option; the receiver loads stored (valid) options.
 */
void
sc_cube_parse_options(ScCube *cube, Jsonb *options, bool validate)
{
	Oid			argtype = JSONBOID;
	Datum		arg = JsonbPGetDatum(options);
	uint64		n;
	Datum		fields = (Datum) 0;

	cube->bad_policy = SC_BAD_DEAD_LETTER;
	cube->start_latest = false;
	cube->grace = 0;
	cube->csv_delimiter = ',';
	cube->csv_quote = '"';
	cube->csv_null = "";
	cube->replica_sets = list_make1("default");

	SPI_execute_with_args("SELECT jsonb_typeof($1)", 1, &argtype, &arg, NULL, true, 1);
	if (strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), "object") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("options of a cube must be a JSON object"),
				 errhint("Valid options: %s.", valid_options)));

	SPI_execute_with_args("SELECT key, value #>> '{}', jsonb_typeof(value), value "
						  "FROM jsonb_each($1)",
						  1, &argtype, &arg, NULL, true, 0);
	MemoryContextSwitchTo(cube->mcxt);
	n = SPI_processed;
	{
		SPITupleTable *tab = SPI_tuptable;

		for (uint64 i = 0; i < n; i++)
		{
			HeapTuple	tup = tab->vals[i];
			TupleDesc	desc = tab->tupdesc;
			char	   *key = SPI_getvalue(tup, desc, 1);
			char	   *value = SPI_getvalue(tup, desc, 2);
			char	   *type = SPI_getvalue(tup, desc, 3);
			bool		isnull;

			if (strcmp(key, "replica_sets") == 0)
			{
				sc_parse_replica_sets(cube, SPI_getbinval(tup, desc, 4, &isnull), type);
				continue;
			}
			if (strcmp(key, "fields") == 0)
			{
				if (strcmp(type, "object") != 0)
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							 errmsg("option \"fields\" must be a JSON object mapping columns to key paths"),
							 errhint("For example {\"fields\": {\"user_id\": \"user.id\"}}.")));
				fields = SPI_getbinval(tup, desc, 4, &isnull);
				continue;
			}
			if (strcmp(type, "string") != 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("option \"%s\" must be a string", key)));

			if (strcmp(key, "start") == 0)
				cube->start_latest = sc_option_choice(key, value, "earliest", "latest");
			else if (strcmp(key, "grace") == 0)
			{
				Interval   *iv = DatumGetIntervalP(DirectFunctionCall3(interval_in,
																	   CStringGetDatum(value),
																	   ObjectIdGetDatum(InvalidOid),
																	   Int32GetDatum(-1)));

				if (iv->month != 0 || sc_interval_usecs(iv) < 0)
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							 errmsg("option \"grace\" must be a non-negative interval without months")));
				cube->grace = sc_interval_usecs(iv);
			}
			else if (strcmp(key, "bad_message") == 0)
				cube->bad_policy = sc_option_choice(key, value, "dead_letter", "pause")
					? SC_BAD_PAUSE : SC_BAD_DEAD_LETTER;
			else if (strcmp(key, "delimiter") == 0)
				cube->csv_delimiter = sc_single_char(key, value);
			else if (strcmp(key, "quote") == 0)
				cube->csv_quote = sc_single_char(key, value);
			else if (strcmp(key, "null") == 0)
				cube->csv_null = pstrdup(value);
			else
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("unknown cube option \"%s\"", key),
						 errhint("Valid options: %s.", valid_options)));

			if (validate && cube->format == SC_FORMAT_JSON &&
				(strcmp(key, "delimiter") == 0 || strcmp(key, "quote") == 0 ||
				 strcmp(key, "null") == 0))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("option \"%s\" applies to format csv only", key)));
		}
	}

	if (validate && cube->format == SC_FORMAT_CSV)
	{
		if (cube->csv_delimiter == cube->csv_quote)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("CSV delimiter and quote must differ")));
		if (cube->csv_delimiter == '\n' || cube->csv_delimiter == '\r' ||
			cube->csv_quote == '\n' || cube->csv_quote == '\r')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("CSV delimiter and quote cannot be newline or carriage return")));
	}
	if (fields != (Datum) 0)
	{
		if (validate && cube->format != SC_FORMAT_JSON)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("option \"fields\" applies to format json only")));
		sc_parse_fields(cube, fields);
	}
}

/*
 * Read the declared columns of the cube's table; find the time column.
 */
static void
sc_cube_read_columns(ScCube *cube, const char *time_column)
{
	Oid			argtype = OIDOID;
	Datum		arg = ObjectIdGetDatum(cube->relid);
	uint64		n;

	SPI_execute_with_args("SELECT attname, atttypid FROM pg_attribute "
						  "WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped "
						  "  AND attname NOT IN ('_partition', '_offset') "
						  "ORDER BY attnum",
						  1, &argtype, &arg, NULL, false, 0);
	MemoryContextSwitchTo(cube->mcxt);
	n = SPI_processed;
	cube->ncolumns = (int) n;
	cube->columns = palloc0(sizeof(ScColumn) * Max(n, 1));
	cube->time_index = -1;
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;
		ScColumn   *col = &cube->columns[i];

		col->name = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		col->type = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
		col->path = palloc(sizeof(char *));
		col->path[0] = col->name;
		col->pathlen = 1;
		if (strcmp(col->name, time_column) == 0)
			cube->time_index = (int) i;
	}
	if (cube->time_index >= 0)
		cube->time_type = cube->columns[cube->time_index].type;
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
	ScPrivilegeSave save;
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	char	   *time_column;
	Jsonb	   *options;
	Datum		d;

	cube->mcxt = caller;
	SPI_connect();
	sc_catalog_enter(&save);
	SPI_execute_with_args("SELECT c.relid, c.owner, n.nspname, r.relname, c.cluster_name, c.topic, "
						  "       c.time_column, c.segment_interval, c.format, c.options, c.paused, "
						  "       c.skip_partition, c.skip_offset, c.config_version, c.skip_error "
						  "FROM streamcube.cubes c "
						  "JOIN pg_class r ON r.oid = c.relid "
						  "JOIN pg_namespace n ON n.oid = r.relnamespace "
						  "WHERE c.cube_id = $1",
						  1, &argtype, &arg, NULL, true, 1);
	sc_catalog_leave(&save);
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
	time_column = SPI_getvalue(tup, desc, 7);
	cube->width = sc_interval_usecs(DatumGetIntervalP(SPI_getbinval(tup, desc, 8, &isnull)));
	cube->format = strcmp(SPI_getvalue(tup, desc, 9), "csv") == 0 ? SC_FORMAT_CSV : SC_FORMAT_JSON;
	options = DatumGetJsonbPCopy(SPI_getbinval(tup, desc, 10, &isnull));
	cube->paused = DatumGetBool(SPI_getbinval(tup, desc, 11, &isnull));
	d = SPI_getbinval(tup, desc, 12, &isnull);
	cube->skip_partition = isnull ? -1 : DatumGetInt32(d);
	d = SPI_getbinval(tup, desc, 13, &isnull);
	cube->skip_offset = isnull ? -1 : DatumGetInt64(d);
	cube->config_version = DatumGetInt64(SPI_getbinval(tup, desc, 14, &isnull));
	cube->skip_error = SPI_getvalue(tup, desc, 15);

	sc_cube_read_columns(cube, time_column);
	sc_cube_parse_options(cube, options, false);
	SPI_finish();
	return cube;
}

/*
 * Is this the statement we meant to build, with the caller's text only in
 * the column list?  Its last two elements must be our columns, and nothing
 * but our partitioning may follow the list.
 */
static bool
sc_create_stmt_is_ours(CreateStmt *stmt)
{
	int			n = list_length(stmt->tableElts);
	Node	   *last,
			   *before;

	if (n < 3 || stmt->partspec == NULL || list_length(stmt->partspec->partParams) != 1 ||
		stmt->inhRelations != NIL || stmt->partbound != NULL || stmt->options != NIL ||
		stmt->ofTypename != NULL || stmt->tablespacename != NULL || stmt->accessMethod != NULL)
		return false;
	before = list_nth(stmt->tableElts, n - 2);
	last = list_nth(stmt->tableElts, n - 1);
	return IsA(before, ColumnDef) && strcmp(((ColumnDef *) before)->colname, "_partition") == 0 &&
		IsA(last, ColumnDef) && strcmp(((ColumnDef *) last)->colname, "_offset") == 0;
}

static int
sc_partition_cmp(const ListCell *a, const ListCell *b)
{
	int32		x = ((ScKafkaPartitionInfo *) lfirst(a))->partition;
	int32		y = ((ScKafkaPartitionInfo *) lfirst(b))->partition;

	return (x > y) - (x < y);
}

/* The raw parse tree of our CREATE TABLE; NIL if it is not even SQL. */
static List *
sc_parse_create(const char *sql)
{
	MemoryContext cxt = CurrentMemoryContext;
	List	   *volatile raw = NIL;

	PG_TRY();
	{
		raw = raw_parser(sql, RAW_PARSE_DEFAULT);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
		raw = NIL;
	}
	PG_END_TRY();
	return raw;
}

/* ----------------------------------------------------------------
 * streamcube_create_cube
 * ----------------------------------------------------------------
 */
Datum
sc_create_cube(PG_FUNCTION_ARGS)
{
	char	   *name = sc_text_arg(fcinfo, 0, "cube name");
	char	   *cluster = sc_text_arg(fcinfo, 1, "cluster");
	char	   *topic = sc_text_arg(fcinfo, 2, "topic");
	char	   *columns = sc_text_arg(fcinfo, 3, "columns");
	char	   *time_column = sc_text_arg(fcinfo, 4, "time_column");
	Interval   *interval;
	char	   *format;
	Jsonb	   *options;
	ScCube	   *cube = palloc0(sizeof(ScCube));
	List	   *names;
	RangeVar   *rv;
	ScKafkaConnInfo *conn;
	List	   *partitions;
	ListCell   *lc;
	StringInfoData sql;
	List	   *raw;
	bool		canlogin;
	Datum		values[10];
	Oid			types[10];
	bool		isnull;

	cube->mcxt = CurrentMemoryContext;
	if (PG_ARGISNULL(5))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						errmsg("segment_interval must not be NULL")));
	interval = PG_GETARG_INTERVAL_P(5);
	format = PG_ARGISNULL(6) ? "json" : text_to_cstring(PG_GETARG_TEXT_PP(6));
	options = PG_ARGISNULL(7) ? NULL : PG_GETARG_JSONB_P(7);

	sc_require_admin("create cubes");

	/* Arguments that need no catalog access. */
	if (strcmp(format, "json") == 0)
		cube->format = SC_FORMAT_JSON;
	else if (strcmp(format, "csv") == 0)
		cube->format = SC_FORMAT_CSV;
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown message format \"%s\" for cube \"%s\"", format, name),
				 errhint("Use 'json' or 'csv'.")));
	if (interval->month != 0 || sc_interval_usecs(interval) < USECS_PER_MINUTE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("segment_interval of cube \"%s\" must be at least 1 minute and have no months or years", name),
				 errhint("Use an interval such as '1 hour' or '1 day'.")));
	cube->width = sc_interval_usecs(interval);
	if (topic[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("topic of cube \"%s\" must not be empty", name)));

	names = stringToQualifiedNameList(name);
	rv = makeRangeVarFromNameList(names);

	SPI_connect();

	/* The owner must be able to log in: its receivers connect as it. */
	SPI_execute_with_args("SELECT rolcanlogin FROM pg_roles WHERE oid = $1",
						  1, (Oid[]) {OIDOID}, (Datum[]) {ObjectIdGetDatum(GetUserId())},
						  NULL, true, 1);
	canlogin = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (!canlogin)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION),
				 errmsg("role \"%s\" cannot own cube \"%s\" because it cannot log in",
						GetUserNameFromId(GetUserId(), false), name),
				 errdetail("Receivers connect to the database as the cube's owner."),
				 errhint("ALTER ROLE %s LOGIN, or create the cube as a role that can log in.",
						 GetUserNameFromId(GetUserId(), false))));

	/* Duplicate cube? */
	{
		Oid			existing = RangeVarGetRelid(rv, NoLock, true);

		if (OidIsValid(existing))
		{
			ScPrivilegeSave save;

			sc_catalog_enter(&save);
			SPI_execute_with_args("SELECT 1 FROM streamcube.cubes WHERE relid = $1",
								  1, (Oid[]) {OIDOID}, (Datum[]) {ObjectIdGetDatum(existing)},
								  NULL, true, 1);
			sc_catalog_leave(&save);
			if (SPI_processed > 0)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_OBJECT),
						 errmsg("cube \"%s\" already exists", name),
						 errhint("Drop it first with streamcube_drop_cube('%s'), or choose another name.", name)));
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_TABLE),
					 errmsg("relation \"%s\" already exists", name),
					 errhint("A cube creates its own table; choose a name that is not taken.")));
		}
	}

	/* The cluster and the topic, with watermarks for the start positions. */
	conn = sc_cluster_conninfo(cluster);
	partitions = sc_kafka_describe(conn, topic, true, sc_kafka_timeout_ms);
	list_sort(partitions, sc_partition_cmp);

	/* The table: exactly one CREATE TABLE statement, run as the caller. */
	initStringInfo(&sql);
	/* The line break ends any "--" comment hidden in the columns. */
	appendStringInfo(&sql, "CREATE TABLE %s (%s\n, _partition integer NOT NULL, _offset bigint NOT NULL) "
					 "PARTITION BY RANGE (%s)",
					 quote_qualified_identifier(rv->schemaname, rv->relname),
					 columns, quote_identifier(time_column));
	raw = sc_parse_create(sql.data);
	if (list_length(raw) != 1 || !IsA(linitial_node(RawStmt, raw)->stmt, CreateStmt) ||
		!sc_create_stmt_is_ours((CreateStmt *) linitial_node(RawStmt, raw)->stmt))
		ereport(ERROR,
				(errcode(ERRCODE_SYNTAX_ERROR),
				 errmsg("columns of cube \"%s\" must be a list of column definitions", name),
				 errhint("For example 'ts timestamptz, country text, amount numeric'.")));

	/* Check the time column before CREATE TABLE turns it into a worse error. */
	{
		CreateStmt *create = (CreateStmt *) linitial_node(RawStmt, raw)->stmt;
		ListCell   *elt;
		bool		found = false;

		foreach(elt, create->tableElts)
			if (IsA(lfirst(elt), ColumnDef) &&
				strcmp(((ColumnDef *) lfirst(elt))->colname, time_column) == 0)
				found = true;
		if (!found)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("time column \"%s\" is not among the columns of cube \"%s\"", time_column, name),
					 errhint("Name one of the declared columns, of type timestamptz.")));
	}
	if (SPI_execute(sql.data, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not create the table of cube \"%s\"", name);
	cube->relid = RangeVarGetRelid(rv, NoLock, false);
	cube->schema = get_namespace_name(get_rel_namespace(cube->relid));
	cube->relname = get_rel_name(cube->relid);
	cube->qualified = quote_qualified_identifier(cube->schema, cube->relname);
	cube->owner = GetUserId();
	cube->cluster = cluster;
	cube->topic = topic;

	sc_cube_read_columns(cube, time_column);
	if (cube->time_index < 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("time column \"%s\" of cube \"%s\" is not among its columns", time_column, name)));
	if (cube->time_type != TIMESTAMPTZOID && cube->time_type != TIMESTAMPOID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("time column \"%s\" of cube \"%s\" has type %s, not a timestamp type",
						time_column, name, format_type_be(cube->time_type)),
				 errhint("Declare it as timestamptz (or timestamp).")));

	if (options == NULL)
		options = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")));
	sc_cube_parse_options(cube, options, true);

	/* Catalog rows. */
	types[0] = OIDOID;
	values[0] = ObjectIdGetDatum(cube->relid);
	types[1] = TEXTOID;
	values[1] = CStringGetTextDatum(cluster);
	types[2] = TEXTOID;
	values[2] = CStringGetTextDatum(topic);
	types[3] = NAMEOID;
	values[3] = DirectFunctionCall1(namein, CStringGetDatum(time_column));
	types[4] = INTERVALOID;
	values[4] = IntervalPGetDatum(interval);
	types[5] = TEXTOID;
	values[5] = CStringGetTextDatum(format);
	types[6] = JSONBOID;
	values[6] = JsonbPGetDatum(options);
	types[7] = OIDOID;
	values[7] = ObjectIdGetDatum(cube->owner);
	{
		ScPrivilegeSave save;

		sc_catalog_enter(&save);
		SPI_execute_with_args("INSERT INTO streamcube.cubes "
							  "(relid, cluster_name, topic, time_column, segment_interval, format, options, owner) "
							  "VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING cube_id",
							  8, types, values, NULL, false, 0);
		cube->cube_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		foreach(lc, cube->replica_sets)
			SPI_execute_with_args("INSERT INTO streamcube.replica_sets (name) VALUES ($1) "
								  "ON CONFLICT DO NOTHING",
								  1, (Oid[]) {TEXTOID},
								  (Datum[]) {CStringGetTextDatum(lfirst(lc))}, NULL, false, 0);
		sc_catalog_leave(&save);
	}
	if (list_length(cube->replica_sets) > list_length(partitions))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cube \"%s\" names %d replica sets, but topic \"%s\" has only %d partitions",
						name, list_length(cube->replica_sets), topic, list_length(partitions)),
				 errhint("Each replica set needs at least one partition to consume.")));

	foreach(lc, partitions)
	{
		ScKafkaPartitionInfo *p = lfirst(lc);
		int64		start = cube->start_latest ? p->high_watermark : p->low_watermark;
		Oid			t[4] = {INT4OID, INT4OID, INT8OID, TEXTOID};
		Datum		v[4];

		v[0] = Int32GetDatum(cube->cube_id);
		v[1] = Int32GetDatum(p->partition);
		v[2] = Int64GetDatum(Max(start, 0));
		v[3] = CStringGetTextDatum(list_nth(cube->replica_sets,
											foreach_current_index(lc) % list_length(cube->replica_sets)));
		sc_catalog_exec("INSERT INTO streamcube.assignments (cube_id, partition, replica_set) "
						"VALUES ($1, $2, $4)", 4, t, v);
		sc_catalog_exec("INSERT INTO streamcube.checkpoints (cube_id, partition, \"offset\") "
						"VALUES ($1, $2, $3)", 3, t, v);
	}

	/* The current and the next window, so the first rows take no DDL lock. */
	{
		int64		now = sc_window_start(cube, (int64) GetCurrentTimestamp());

		if (cube->time_type == TIMESTAMPOID)
			now = sc_window_start(cube, (int64) DatumGetTimestamp(DirectFunctionCall1(timestamptz_timestamp,
																					 TimestampTzGetDatum(GetCurrentTimestamp()))));
		sc_segment_ensure(cube, now);
		sc_segment_ensure(cube, now + cube->width);
	}

	SPI_finish();
	sc_launcher_wakeup_at_commit();
	PG_RETURN_OID(cube->relid);
}

/* ----------------------------------------------------------------
 * drop, pause, resume
 * ----------------------------------------------------------------
 */

/* The cube's id, once the caller is allowed to act on it. */
static int32
sc_cube_for_action(const char *name, const char *action, Oid *relid, Oid *owner)
{
	int32		cube_id = sc_cube_lookup(name, relid, owner);

	sc_require_cube_owner(name, *owner, action);
	return cube_id;
}
Datum
sc_drop_cube(PG_FUNCTION_ARGS)
{
	char	   *name = sc_text_arg(fcinfo, 0, "cube name");
	bool		keep_data = PG_ARGISNULL(1) ? false : PG_GETARG_BOOL(1);
	Oid			relid,
				owner;
	Oid			t[1] = {INT4OID};
	Datum		v[1];

	SPI_connect();
	v[0] = Int32GetDatum(sc_cube_for_action(name, "drop", &relid, &owner));
	sc_catalog_exec("DELETE FROM streamcube.cubes WHERE cube_id = $1", 1, t, v);
	if (!keep_data)
	{
		StringInfoData sql;
		Oid			save_userid;
		int			save_sec_context;

		initStringInfo(&sql);
		appendStringInfo(&sql, "DROP TABLE %s",
						 quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
													get_rel_name(relid)));

		/* An administrator who does not own the table drops it as its owner. */
		GetUserIdAndSecContext(&save_userid, &save_sec_context);
		if (!has_privs_of_role(save_userid, owner))
			SetUserIdAndSecContext(owner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
		SPI_execute(sql.data, false, 0);
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}
	SPI_finish();
	sc_launcher_wakeup_at_commit();
	PG_RETURN_VOID();
}

static void
sc_set_paused(FunctionCallInfo fcinfo, bool paused, bool skip_bad)
{
	char	   *name = sc_text_arg(fcinfo, 0, "cube name");
	Oid			relid,
				owner;
	Oid			t[3] = {INT4OID, BOOLOID, BOOLOID};
	Datum		v[3];

	SPI_connect();
	v[0] = Int32GetDatum(sc_cube_for_action(name, paused ? "pause" : "resume", &relid, &owner));
	v[1] = BoolGetDatum(paused);
	v[2] = BoolGetDatum(!paused && skip_bad);

	/*
	 * Pausing keeps a recorded bad message; resuming forgets it, or with
	 * skip_bad_message turns it into the message to dead-letter once.
	 */
	sc_catalog_exec("UPDATE streamcube.cubes SET paused = $2, "
					"skip_partition = CASE WHEN $3 THEN bad_partition ELSE skip_partition END, "
					"skip_offset = CASE WHEN $3 THEN bad_offset ELSE skip_offset END, "
					"skip_error = CASE WHEN $3 THEN bad_error ELSE skip_error END, "
					"bad_partition = CASE WHEN $2 THEN bad_partition END, "
					"bad_offset = CASE WHEN $2 THEN bad_offset END, "
					"bad_error = CASE WHEN $2 THEN bad_error END, "
					"config_version = config_version + 1 WHERE cube_id = $1",
					3, t, v);
	SPI_finish();
	sc_launcher_wakeup_at_commit();
}

Datum
sc_pause_cube(PG_FUNCTION_ARGS)
{
	sc_set_paused(fcinfo, true, false);
	PG_RETURN_VOID();
}

Datum
sc_resume_cube(PG_FUNCTION_ARGS)
{
	sc_set_paused(fcinfo, false, PG_ARGISNULL(1) ? false : PG_GETARG_BOOL(1));
	PG_RETURN_VOID();
}

/* ----------------------------------------------------------------
 * streamcube_wait(cube, timeout): has every message in Kafka now been
 * consumed?
 * ----------------------------------------------------------------
 */

/*
 * Receivers publish their positions to shared memory just after COMMIT.
 * Once the catalog says done, wait for that too, so that
 * streamcube.consumers agrees when streamcube_wait() returns.
 */
static bool
sc_wait_published(int32 cube_id, int n, Datum *parts, Datum *targets)
{
	bool		done = true;

	LWLockAcquire(sc_shared->lock, LW_SHARED);
	for (int s = 0; s < sc_shared->nslots && done; s++)
	{
		ScReceiverSlot *slot = &sc_shared->slots[s];

		if (!slot->in_use || slot->dboid != MyDatabaseId || slot->cube_id != cube_id)
			continue;
		for (int p = 0; p < slot->npartitions && done; p++)
			for (int i = 0; i < n; i++)
				if (DatumGetInt32(parts[i]) == slot->parts[p].partition &&
					slot->parts[p].position < DatumGetInt64(targets[i]))
					done = false;
	}
	LWLockRelease(sc_shared->lock);
	return done;
}
Datum
sc_wait_cube(PG_FUNCTION_ARGS)
{
	char	   *name = sc_text_arg(fcinfo, 0, "cube name");
	Interval   *timeout = PG_ARGISNULL(1) ? NULL : PG_GETARG_INTERVAL_P(1);
	TimestampTz deadline;
	Oid			relid,
				owner;
	int32		cube_id;
	ScCube	   *cube;
	List	   *partitions;
	ListCell   *lc;
	int			n = 0;
	Datum	   *parts;
	Datum	   *targets;
	Datum		args[3];
	Oid			types[3] = {INT4OID, INT4ARRAYOID, INT8ARRAYOID};
	bool		done = false;

	SPI_connect();
	cube_id = sc_cube_lookup(name, &relid, &owner);
	if (pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, name);
	cube = sc_cube_load(cube_id, false);
	partitions = sc_kafka_describe(sc_cluster_conninfo(cube->cluster), cube->topic, true,
								   sc_kafka_timeout_ms);

	parts = palloc(sizeof(Datum) * Max(list_length(partitions), 1));
	targets = palloc(sizeof(Datum) * Max(list_length(partitions), 1));
	foreach(lc, partitions)
	{
		ScKafkaPartitionInfo *p = lfirst(lc);

		parts[n] = Int32GetDatum(p->partition);
		targets[n] = Int64GetDatum(p->high_watermark);
		n++;
	}
	args[0] = Int32GetDatum(cube_id);
	args[1] = PointerGetDatum(construct_array(parts, n, INT4OID, 4, true, TYPALIGN_INT));
	args[2] = PointerGetDatum(construct_array(targets, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));

	{
		ScPrivilegeSave save;
		bool		isnull;
		Datum		unknown;

		sc_catalog_enter(&save);
		SPI_execute_with_args("SELECT string_agg(t.part::text, ', ' ORDER BY t.part) "
							  "FROM unnest($2) AS t(part) "
							  "WHERE NOT EXISTS (SELECT 1 FROM streamcube.checkpoints k "
							  "                  WHERE k.cube_id = $1 AND k.partition = t.part)",
							  2, types, args, NULL, false, 1);
		sc_catalog_leave(&save);
		unknown = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		if (!isnull)
			ereport(WARNING,
					(errcode(ERRCODE_WARNING),
					 errmsg("partitions %s of topic \"%s\" are not consumed by cube \"%s\"",
							TextDatumGetCString(unknown), cube->topic, name),
					 errdetail("They were added to the topic after the cube was created."),
					 errhint("streamcube_wait() cannot return true for this cube; recreate the cube to consume them.")));
	}

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   timeout ? sc_interval_usecs(timeout) / 1000 : 30000);
	for (;;)
	{
		ScPrivilegeSave save;
		bool		isnull;

		/*
		 * A partition counts once its position reached the target; one the
		 * cube does not know (added to the topic later) never does.
		 */
		sc_catalog_enter(&save);
		SPI_execute_with_args("SELECT count(*) FILTER (WHERE t.target > coalesce(p.position, "
							  "         (SELECT \"offset\" FROM streamcube.checkpoints k "
							  "          WHERE k.cube_id = $1 AND k.partition = t.part), -1)) "
							  "FROM unnest($2, $3) AS t(part, target) "
							  "LEFT JOIN streamcube.consume_positions p "
							  "  ON p.cube_id = $1 AND p.partition = t.part",
							  3, types, args, NULL, false, 1);
		sc_catalog_leave(&save);
		done = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) == 0 &&
			sc_wait_published(cube_id, n, parts, targets);
		if (done || GetCurrentTimestamp() >= deadline)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 50,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	SPI_finish();
	PG_RETURN_BOOL(done);
}
