/*-------------------------------------------------------------------------
 *
 * cube_options.c
 *		The options of a cube: parsed from the jsonb stored in
 *		streamcube.cubes, checked strictly when a cube is created.
 *
 * streamcube_create_cube() parses with validate = true: an unknown key, a
 * value of the wrong type, a CSV dialect COPY would refuse, an interval
 * whose arithmetic overflows, a field path that cannot match, each is an
 * error that names the option and creates nothing.  Receivers parse the
 * stored options with validate = false; they were valid when stored, and
 * the one thing that can change under them, the table's columns, is
 * tolerated: a field mapping for a column that was dropped is ignored.
 *
 * This file reads the options only; it touches no catalog.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "catalog/pg_type.h"
#include "commands/copy.h"
#include "common/int.h"
#include "cube.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_node.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

/* Longest key path of option "fields"; deeper paths are refused. */
#define SC_MAX_FIELD_PATH 16

/* The widest window and the longest rejection period or grace. */
#define SC_MAX_INTERVAL_DAYS 3660

/* Default of option early_rejection_period: one day ahead of now. */
#define SC_DEFAULT_EARLY_REJECTION USECS_PER_DAY

static const char *const valid_options =
"start, end, grace, late, retention, bad_message, tombstones, early_rejection_period, "
"late_rejection_period, compact, fields, replica_sets, new_partitions, progress_group, raw_rows, "
"delimiter, quote, null, schema, subject, home";

/*
 * An interval as microseconds, for window arithmetic: no months (their
 * length varies), not negative, and at most SC_MAX_INTERVAL_DAYS days, so
 * that no sum of timestamps and intervals streamcube computes can
 * overflow.
 */
int64
sc_interval_usecs(const Interval *iv, const char *what)
{
	int64		usecs;

	if (iv->month != 0 || iv->day < 0 || iv->time < 0 ||
		iv->day > SC_MAX_INTERVAL_DAYS ||
		pg_mul_s64_overflow((int64) iv->day, USECS_PER_DAY, &usecs) ||
		pg_add_s64_overflow(usecs, iv->time, &usecs) ||
		usecs > (int64) SC_MAX_INTERVAL_DAYS * USECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be an interval of days, hours, minutes or seconds between 0 and %d days",
						what, SC_MAX_INTERVAL_DAYS),
				 errhint("Use an interval such as '1 hour' or '7 days'; months and years have no fixed length.")));
	return usecs;
}

/*
 * A timestamp a user wrote, as Kafka counts time: milliseconds since 1970
 * (a time before 1970 is 0, the first moment Kafka can name).  Errors name
 * what it was for, with the hint given.
 */
int64
sc_kafka_ms_of_text(const char *text, const char *what, const char *hint)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile TimestampTz ts = 0;

	PG_TRY();
	{
		ts = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in, CStringGetDatum(text),
													 ObjectIdGetDatum(InvalidOid),
													 Int32GetDatum(-1)));
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_DATETIME_FORMAT),
				 errmsg("invalid timestamp \"%s\" for %s", text, what),
				 errhint("%s", hint)));
	}
	PG_END_TRY();
	if (TIMESTAMP_NOT_FINITE(ts))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_DATETIME_FORMAT),
				 errmsg("invalid timestamp \"%s\" for %s: it must be finite", text, what),
				 errhint("%s", hint)));
	ts = ts / 1000 + (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000;
	return Max(ts, 0);
}

/*
 * An interval a user wrote for what (an option, a level): errors name it,
 * with PostgreSQL's own message as DETAIL and the hint given.
 */
Interval *
sc_interval_of_text(const char *text, const char *what, const char *hint)
{
	MemoryContext cxt = CurrentMemoryContext;
	Interval   *volatile iv = NULL;

	PG_TRY();
	{
		iv = DatumGetIntervalP(DirectFunctionCall3(interval_in, CStringGetDatum(text),
												   ObjectIdGetDatum(InvalidOid),
												   Int32GetDatum(-1)));
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid interval \"%s\" for %s", text, what),
				 errdetail("%s", edata->message),
				 errhint("%s", hint)));
	}
	PG_END_TRY();
	return iv;
}

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
			 errmsg("invalid value \"%s\" for cube option \"%s\"", value, key),
			 errhint("Use \"%s\" or \"%s\".", first, second)));
	return false;				/* keep the compiler quiet */
}

static char
sc_single_char(const char *key, const char *value)
{
	if (strlen(value) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cube option \"%s\" must be a single one-byte character", key)));
	return value[0];
}

/* An interval option; "none" turns it off (-1). */
static int64
sc_option_interval(const char *key, const char *value, bool allow_none)
{
	char	   *what;

	if (allow_none && strcmp(value, "none") == 0)
		return -1;
	what = psprintf("cube option \"%s\"", key);
	return sc_interval_usecs(sc_interval_of_text(value, what,
												 allow_none ? "Give an interval such as '10 minutes' or '2 hours', or \"none\"."
												 : "Give an interval such as '10 minutes' or '2 hours'."),
							 what);
}

/* The kinds of Kafka metadata a column can take, by the name "fields" uses. */
static const struct
{
	const char *name;
	ScMeta		meta;
}			meta_kinds[] = {
	{"key", SC_META_KEY},
	{"timestamp", SC_META_TIMESTAMP},
	{"timestamp_type", SC_META_TIMESTAMP_TYPE},
	{"header", SC_META_HEADER},
	{"headers", SC_META_HEADERS},
	{"value", SC_META_VALUE},
	{"topic", SC_META_TOPIC},
};

static const char *
sc_meta_name(ScMeta meta)
{
	for (int i = 0; i < lengthof(meta_kinds); i++)
		if (meta_kinds[i].meta == meta)
			return meta_kinds[i].name;
	return "payload";
}

/*
 * A metadata spec of option "fields": {"kafka": "key"}, {"kafka":
 * "header", "name": "trace-id"}, ...  An object can never be a key path
 * (those are strings and arrays), so no payload field name clashes with it.
 */
static void
sc_parse_meta_spec(ScColumn *col, const char *kind, const char *name, int nkeys)
{
	col->meta = SC_META_NONE;
	for (int i = 0; kind != NULL && i < lengthof(meta_kinds); i++)
		if (strcmp(kind, meta_kinds[i].name) == 0)
			col->meta = meta_kinds[i].meta;
	if (col->meta == SC_META_NONE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("column \"%s\" in cube option \"fields\" must name a kind of Kafka metadata",
						col->name),
				 errhint("Use {\"kafka\": K} with K one of key, timestamp, timestamp_type, header, headers, value, topic; "
						 "{\"kafka\": \"header\", \"name\": \"trace-id\"} for one header.")));
	if (col->meta == SC_META_HEADER && (name == NULL || name[0] == '\0' || nkeys != 2))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("column \"%s\" in cube option \"fields\" takes a header without naming it",
						col->name),
				 errhint("Write {\"kafka\": \"header\", \"name\": \"trace-id\"}, or {\"kafka\": \"headers\"} for all of them.")));
	if (col->meta != SC_META_HEADER && nkeys != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("column \"%s\" in cube option \"fields\" has keys besides \"kafka\"", col->name),
				 errhint("Only {\"kafka\": \"header\", \"name\": ...} takes a second key.")));
	col->header = col->meta == SC_META_HEADER ? pstrdup(name) : NULL;
	col->path = NULL;
	col->pathlen = 0;
}

/*
 * Types a key or a header can fill: their input functions report bad input
 * as data errors (class 22), so a message they refuse is a dead letter.
 * (Some types' input functions raise other errors, such as tsquery's
 * syntax errors or regclass's undefined objects, which would abort every
 * batch that meets the message instead.)
 */
static bool
sc_meta_input_type(Oid base)
{
	switch (base)
	{
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
		case BYTEAOID:
		case JSONOID:
		case JSONBOID:
		case UUIDOID:
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case NUMERICOID:
		case FLOAT4OID:
		case FLOAT8OID:
		case BOOLOID:
		case DATEOID:
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
		case INETOID:
		case CIDROID:
			return true;
		default:
			return false;
	}
}

/*
 * Can a column of this type take that metadata?  A key or a header goes
 * through the column type's input function (raw bytes into bytea); the
 * others have a shape of their own.
 */
/* What is wrong with a metadata column's type, if anything. */
typedef enum ScMetaTypeFit
{
	SC_META_FITS,
	SC_META_WRONG_TYPE,			/* the type cannot hold the metadata */
	SC_META_NOT_INSTANT			/* the time column takes the Kafka timestamp,
								 * and is not timestamptz */
} ScMetaTypeFit;

/*
 * Can a column of this type take that metadata?  A key or a header goes
 * through the column type's input function (raw bytes into bytea); the
 * others have a shape of their own.  *want: the types that fit.
 */
static ScMetaTypeFit
sc_meta_type_fit(const ScCube *cube, const ScColumn *col, int c, const char **want)
{
	Oid			base = getBaseType(col->type);
	bool		text = base == TEXTOID || base == VARCHAROID;
	bool		json = base == JSONOID || base == JSONBOID;
	bool		ok = true;

	*want = NULL;
	switch (col->meta)
	{
		case SC_META_NONE:
			break;
		case SC_META_KEY:
		case SC_META_HEADER:
			ok = sc_meta_input_type(base);
			*want = "text, varchar, bytea (the raw bytes), jsonb, json, uuid, a number, boolean, date, a timestamp or inet";
			break;
		case SC_META_TIMESTAMP:
			ok = base == TIMESTAMPTZOID || base == TIMESTAMPOID || base == INT8OID;
			*want = "timestamptz, timestamp or bigint (milliseconds since 1970)";
			break;
		case SC_META_TIMESTAMP_TYPE:
		case SC_META_TOPIC:
			ok = text;
			*want = "text";
			break;
		case SC_META_HEADERS:
			ok = json;
			*want = "jsonb or json";
			break;
		case SC_META_VALUE:
			ok = cube->format == SC_FORMAT_CSV ? text || base == BYTEAOID : text || json;
			*want = cube->format == SC_FORMAT_CSV ? "text or bytea" : "jsonb, json or text";
			break;
	}
	if (!ok)
		return SC_META_WRONG_TYPE;

	/*
	 * Kafka timestamps are instants; windows of a timestamp (without time
	 * zone) cube are reckoned in the receiver's TimeZone, so they would be
	 * off by its offset from UTC.
	 */
	if (c == cube->time_index && col->meta == SC_META_TIMESTAMP && base != TIMESTAMPTZOID)
		return SC_META_NOT_INSTANT;
	return SC_META_FITS;
}

/* At load: a metadata column retyped since it was checked, or NULL. */
char *
sc_cube_meta_type_problem(const ScCube *cube, const ScColumn *col, int c)
{
	const char *want;

	switch (sc_meta_type_fit(cube, col, c, &want))
	{
		case SC_META_FITS:
			break;
		case SC_META_WRONG_TYPE:
			return psprintf("column \"%s\" of cube %s has type %s now, which cannot hold the Kafka %s (it takes %s)",
							col->name, cube->qualified, format_type_be(col->type),
							sc_meta_name(col->meta), want);
		case SC_META_NOT_INSTANT:
			return psprintf("time column \"%s\" of cube %s takes the Kafka timestamp, and has type %s now",
							col->name, cube->qualified, format_type_be(col->type));
	}
	return NULL;
}

static void
sc_check_meta_type(const ScCube *cube, const ScColumn *col, int c)
{
	const char *want;

	switch (sc_meta_type_fit(cube, col, c, &want))
	{
		case SC_META_FITS:
			break;
		case SC_META_WRONG_TYPE:
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column \"%s\" of cube %s has type %s, which cannot hold the Kafka %s",
							col->name, cube->qualified, format_type_be(col->type), sc_meta_name(col->meta)),
					 errhint("Declare it as %s.", want)));
			break;
		case SC_META_NOT_INSTANT:
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("time column \"%s\" of cube %s takes the Kafka timestamp, and has type %s",
							col->name, cube->qualified, format_type_be(col->type)),
					 errhint("Declare it as timestamptz: a Kafka timestamp is an instant.")));
			break;
	}
	if (c == cube->time_index && col->meta != SC_META_NONE && col->meta != SC_META_TIMESTAMP)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("time column \"%s\" of cube %s cannot come from the Kafka %s",
						col->name, cube->qualified, sc_meta_name(col->meta)),
				 errhint("The time column comes from the payload, or from the Kafka timestamp with {\"kafka\": \"timestamp\"}.")));
}

/*
 * Option "fields": column -> key path, as "a.b.c" or ["a", "b.c"], or
 * Kafka metadata, as {"kafka": "key"} and the like.  With validate, every
 * column must exist and every path be a non-empty list of keys (dotted
 * paths: of non-empty keys); without, mappings of columns the table no
 * longer has are skipped.
 */
static void
sc_parse_fields(ScCube *cube, Datum fields, bool validate)
{
	Oid			argtype = JSONBOID;
	uint64		n;
	int			ret;

	ret = SPI_execute_with_args("SELECT key, jsonb_typeof(value), "
								"  CASE jsonb_typeof(value) WHEN 'array' THEN "
								"    ARRAY(SELECT jsonb_array_elements_text(value)) "
								"  WHEN 'string' THEN string_to_array(value #>> '{}', '.') END, "
								"  CASE jsonb_typeof(value) WHEN 'array' THEN "
								"    (SELECT bool_and(jsonb_typeof(e) = 'string') FROM jsonb_array_elements(value) e) "
								"  END, "
								"  CASE jsonb_typeof(value) WHEN 'object' THEN "
								"    CASE jsonb_typeof(value -> 'kafka') WHEN 'string' THEN value ->> 'kafka' END END, "
								"  CASE jsonb_typeof(value) WHEN 'object' THEN "
								"    CASE jsonb_typeof(value -> 'name') WHEN 'string' THEN value ->> 'name' END END, "
								"  CASE jsonb_typeof(value) WHEN 'object' THEN "
								"    (SELECT count(*) FROM jsonb_object_keys(value)) END "
								"FROM jsonb_each($1)",
								1, &argtype, &fields, NULL, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not read option \"fields\": %s", SPI_result_code_string(ret));
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
		bool		dotted = strcmp(type, "string") == 0;
		Datum	   *elems;
		bool	   *enulls;
		int			nelems;
		int			c;

		if (validate && cube->topics_kind != SC_TOPICS_ONE && strcmp(column, SC_TOPIC_COLUMN) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cube option \"fields\" maps column %s of cube %s, which streamcube fills with each row's topic",
							SC_TOPIC_COLUMN, cube->qualified),
					 errhint("Leave _topic out of \"fields\".")));
		for (c = 0; c < cube->ncolumns; c++)
			if (strcmp(cube->columns[c].name, column) == 0)
				break;
		if (c == cube->ncolumns)
		{
			if (!validate)
			{
				/* Renamed or dropped since: the cube cannot ingest. */
				cube->missing_columns = lappend(cube->missing_columns, pstrdup(column));
				continue;
			}
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("cube option \"fields\" names column \"%s\", which cube %s does not have",
							column, cube->qualified),
					 errhint("Map declared columns only; _partition and _offset are filled by streamcube.")));
		}
		cube->columns[c].mapped = true;
		if (strcmp(type, "object") == 0)
		{
			bool		knull;

			sc_parse_meta_spec(&cube->columns[c], SPI_getvalue(tup, desc, 5),
							   SPI_getvalue(tup, desc, 6),
							   (int) DatumGetInt64(SPI_getbinval(tup, desc, 7, &knull)));
			continue;
		}
		if (!dotted && strcmp(type, "array") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("path of column \"%s\" in cube option \"fields\" must be a string such as \"user.id\", an array of keys, or Kafka metadata such as {\"kafka\": \"key\"}",
							column)));
		if (validate && cube->format == SC_FORMAT_CSV)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("column \"%s\" in cube option \"fields\" has a key path, which applies to JSON cubes only",
							column),
					 errhint("A CSV record's fields fill the columns that do not take Kafka metadata, in table order.")));
		if (!dotted)
		{
			bool		strings_only;
			bool		snull;

			strings_only = DatumGetBool(SPI_getbinval(tup, desc, 4, &snull));
			if (!snull && !strings_only)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("path of column \"%s\" in cube option \"fields\" must be an array of strings",
								column)));
		}
		if (isnull)
			elems = NULL, enulls = NULL, nelems = 0;
		else
			deconstruct_array(DatumGetArrayTypeP(path), TEXTOID, -1, false, TYPALIGN_INT,
							  &elems, &enulls, &nelems);
		if (nelems == 0 || nelems > SC_MAX_FIELD_PATH)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("path of column \"%s\" in cube option \"fields\" must have 1 to %d keys",
							column, SC_MAX_FIELD_PATH)));
		cube->columns[c].path = palloc(sizeof(char *) * nelems);
		cube->columns[c].pathlen = nelems;
		for (int e = 0; e < nelems; e++)
		{
			cube->columns[c].path[e] = TextDatumGetCString(elems[e]);
			if (dotted && cube->columns[c].path[e][0] == '\0')
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("path of column \"%s\" in cube option \"fields\" has an empty key",
								column),
						 errhint("Write keys that contain dots, or empty keys, as an array: [\"a\", \"b.c\"].")));
		}
	}
}

/*
 * After "fields": a jsonb cube's document column (the one jsonb column not
 * mapped otherwise, unless "fields" names one with {"kafka": "value"}),
 * the type of every metadata column, and how many columns the payload
 * fills.
 */
static void
sc_finish_columns(ScCube *cube, bool validate)
{
	int			nvalue = 0;

	for (int c = 0; c < cube->ncolumns; c++)
		nvalue += cube->columns[c].meta == SC_META_VALUE;
	if (cube->format == SC_FORMAT_JSONB && nvalue == 0)
	{
		int			doc = -1;
		int			candidates = 0;

		for (int c = 0; c < cube->ncolumns; c++)
			if (!cube->columns[c].mapped && getBaseType(cube->columns[c].type) == JSONBOID)
				doc = c, candidates++;
		if (candidates != 1 && validate)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a cube of format jsonb needs one jsonb column for the document; cube %s has %d",
							cube->qualified, candidates),
					 errhint("Declare one column of type jsonb, or name it in option \"fields\" as {\"doc\": {\"kafka\": \"value\"}}.")));
		if (candidates == 1)
		{
			cube->implicit_document = validate ? cube->columns[doc].name : NULL;
			cube->columns[doc].meta = SC_META_VALUE;
			cube->columns[doc].path = NULL;
			cube->columns[doc].pathlen = 0;
			nvalue = 1;
		}
	}
	if (validate && nvalue > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cube option \"fields\" maps the Kafka value to more than one column")));
	cube->nmeta = 0;
	for (int c = 0; c < cube->ncolumns; c++)
	{
		if (validate)
			sc_check_meta_type(cube, &cube->columns[c], c);
		cube->nmeta += cube->columns[c].meta != SC_META_NONE;
	}
}

/*
 * Option "replica_sets": the names of the replica sets the topic's
 * partitions are dealt to, round robin; each set runs one receiver for the
 * cube.  The default is one set, "default".  An empty array creates the
 * cube with no assignment: nothing is consumed until streamcube_reassign()
 * assigns its partitions.
 */
static void
sc_parse_replica_sets(ScCube *cube, Datum value, const char *type)
{
	Oid			argtype = JSONBOID;
	uint64		n;

	if (strcmp(type, "array") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cube option \"replica_sets\" must be a JSON array of replica set names"),
				 errhint("For example {\"replica_sets\": [\"a\", \"b\"]}.")));
	if (SPI_execute_with_args("SELECT e #>> '{}', jsonb_typeof(e), "
							  "       count(*) OVER (PARTITION BY e) "
							  "FROM jsonb_array_elements($1) WITH ORDINALITY AS t(e, i) ORDER BY i",
							  1, &argtype, &value, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read option \"replica_sets\"");
	MemoryContextSwitchTo(cube->mcxt);
	n = SPI_processed;
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
					 errmsg("replica set names in cube option \"replica_sets\" must be non-empty strings of at most %d bytes",
							NAMEDATALEN - 1)));
		if (DatumGetInt64(SPI_getbinval(tup, SPI_tuptable->tupdesc, 3, &isnull)) > 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("replica set \"%s\" appears twice in cube option \"replica_sets\"", name)));
		cube->replica_sets = lappend(cube->replica_sets, name);
	}
}

/* The COPY options of a CSV cube, as the ingest path passes them. */
List *
sc_cube_copy_options(const ScCube *cube)
{
	char		delim[2] = {cube->csv_delimiter, '\0'};
	char		quote[2] = {cube->csv_quote, '\0'};

	return list_make4(makeDefElem("format", (Node *) makeString("csv"), -1),
					  makeDefElem("delimiter", (Node *) makeString(pstrdup(delim)), -1),
					  makeDefElem("quote", (Node *) makeString(pstrdup(quote)), -1),
					  makeDefElem("null", (Node *) makeString(pstrdup(cube->csv_null)), -1));
}

/*
 * A CSV dialect is checked by COPY's own option rules, so that a cube can
 * never hold one that COPY refuses batch after batch.  Our splitter adds
 * one rule COPY leaves to the data: a line break cannot be the null string.
 */
static void
sc_check_csv_dialect(ScCube *cube)
{
	MemoryContext cxt = CurrentMemoryContext;
	CopyFormatOptions opts;
	ErrorData  *volatile edata = NULL;

	if (strchr(cube->csv_null, '\n') != NULL || strchr(cube->csv_null, '\r') != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cube option \"null\" cannot contain a newline or carriage return"),
				 errhint("A message is one CSV record; pick a null string such as \"\" or \"NA\".")));
	PG_TRY();
	{
		memset(&opts, 0, sizeof(opts));
		ProcessCopyOptions(NULL, &opts, true, sc_cube_copy_options(cube));
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
	}
	PG_END_TRY();
	if (edata != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("CSV options delimiter \"%c\", quote \"%c\" and null \"%s\" of cube \"%s\" are not valid together",
						cube->csv_delimiter, cube->csv_quote, cube->csv_null,
						cube->relname ? cube->relname : ""),
				 errdetail("COPY says: %s", edata->message),
				 errhint("Choose a delimiter, quote and null string that COPY accepts together.")));
}

/*
 * Parse the options of a cube.  With validate, unknown keys and values are
 * errors that name the option; the receiver loads stored (valid) options.
 */
/*
 * Option "compact": a JSON array of intervals, finest first, such as
 * ["1 day", "1 month"].  Each level must be a whole multiple of the one
 * before it (the first: of the windows), so that a coarser partition
 * always holds whole finer ones: fixed widths count from the windows'
 * origin, months from the first of a month at 00:00 UTC (which needs a
 * previous level that divides a day).  An empty array turns compaction
 * off.
 */
static void
sc_parse_compact(ScCube *cube, Datum value, const char *type)
{
	Oid			argtype = JSONBOID;
	const char *hint = "Use an array of intervals, finest first, each a whole multiple of the one before "
		"(the first of the cube's windows), such as [\"1 day\", \"1 month\"]; [] turns compaction off.";
	int32		prev_months = 0;
	int64		prev_usecs = cube->width;

	if (strcmp(type, "array") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cube option \"compact\" must be a JSON array of intervals"),
				 errhint("%s", hint)));
	if (SPI_execute_with_args("SELECT value #>> '{}', jsonb_typeof(value) FROM jsonb_array_elements($1)",
							  1, &argtype, &value, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read cube option \"compact\"");
	if (SPI_processed > SC_MAX_COMPACT_LEVELS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cube option \"compact\" has %d levels, at most %d are allowed",
						(int) SPI_processed, SC_MAX_COMPACT_LEVELS),
				 errhint("%s", hint)));
	cube->ncompact = 0;
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *text = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		char	   *etype = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
		Interval   *iv;
		ScCompactLevel *level = &cube->compact[cube->ncompact];

		if (strcmp(etype, "string") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("level %d of cube option \"compact\" is not an interval string", (int) i + 1),
					 errhint("%s", hint)));
		iv = sc_interval_of_text(text, psprintf("level %d of cube option \"compact\"", (int) i + 1), hint);
		level->months = 0;
		level->usecs = 0;
		if (iv->month != 0)
		{
			if (iv->day != 0 || iv->time != 0 || iv->month < 0 || 12 % iv->month != 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("level \"%s\" of cube option \"compact\" is not a whole number of months that divides a year", text),
						 errhint("Use 1, 2, 3, 4, 6 or 12 months, or a fixed interval such as '1 day'.")));
			level->months = iv->month;
			if (prev_months > 0 ? level->months % prev_months != 0 || level->months == prev_months
				: USECS_PER_DAY % prev_usecs != 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("level \"%s\" of cube option \"compact\" does not hold whole partitions of the level before it", text),
						 errhint("%s", hint)));
		}
		else
		{
			level->usecs = sc_interval_usecs(iv, "a level of cube option \"compact\"");
			if (prev_months > 0 || level->usecs <= prev_usecs || level->usecs % prev_usecs != 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("level \"%s\" of cube option \"compact\" does not hold whole partitions of the level before it", text),
						 errhint("%s", hint)));
		}
		/* What one partition of this level merges at most, at once. */
		{
			int64		most;

			if (level->months == 0)
				most = level->usecs / prev_usecs;
			else if (prev_months > 0)
				most = level->months / prev_months;
			else
				most = (level->months == 12 ? 366 : level->months * 31) * (USECS_PER_DAY / prev_usecs);
			if (most > SC_COMPACT_MAX_SOURCES)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("level \"%s\" of cube option \"compact\" would merge up to " INT64_FORMAT " partitions at once, more than %d",
								text, most, SC_COMPACT_MAX_SOURCES),
						 errhint("Add a level in between, such as \"1 hour\" before \"1 day\" or \"1 month\" before \"1 year\"; one compaction locks every partition it merges.")));
		}
		prev_months = level->months;
		prev_usecs = level->usecs;
		cube->ncompact++;
	}
}

/* The options' defaults, before the given ones are read. */
static void
sc_options_defaults(ScCube *cube)
{
	cube->bad_policy = SC_BAD_DEAD_LETTER;
	cube->skip_tombstones = false;
	cube->start_latest = false;
	cube->start_at_ms = -1;
	cube->start_cube = NULL;
	cube->end = NULL;
	cube->avro_schema = NULL;
	cube->avro_subject = NULL;
	cube->progress_group = NULL;
	cube->home = NULL;
	cube->grace = 0;
	cube->reject_early = SC_DEFAULT_EARLY_REJECTION;
	cube->reject_late = -1;
	cube->late_dead_letter = false;
	cube->retention = -1;
	cube->csv_delimiter = ',';
	cube->csv_quote = '"';
	cube->csv_null = "";
	cube->replica_sets = list_make1("default");
	cube->assign_new_partitions = true;
	cube->keep_rows = true;

	/*
	 * Windows of an hour or less merge into days, unless "compact" says
	 * otherwise; windows of less than 15 minutes into hours first, so that
	 * no partition merges more than SC_COMPACT_MAX_SOURCES at once.
	 */
	cube->ncompact = 0;
	if (cube->width <= USECS_PER_HOUR && USECS_PER_DAY % cube->width == 0)
	{
		if (USECS_PER_DAY / cube->width > SC_COMPACT_MAX_SOURCES && USECS_PER_HOUR % cube->width == 0)
			cube->compact[cube->ncompact++] = (ScCompactLevel) {.usecs = USECS_PER_HOUR};
		if (cube->ncompact > 0 || USECS_PER_DAY / cube->width <= SC_COMPACT_MAX_SOURCES)
			cube->compact[cube->ncompact++] = (ScCompactLevel) {.usecs = USECS_PER_DAY};
	}
}

/*
 * Option progress_group: the Kafka consumer group receivers commit their
 * positions to, for Kafka's own tools to see.  Who may set it is checked
 * where it is set (sc_cube_check_progress_group).
 */
static char *
sc_option_progress_group(const char *value, bool validate)
{
	if (!validate)
		return pstrdup(value);
	if (value[0] == '\0' || strlen(value) > 255)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cube option \"progress_group\" must be a Kafka group id of 1 to 255 characters"),
				 errhint("Name a group used by nothing else, such as \"streamcube-events\".")));
	for (const char *p = value; *p; p++)
		if ((unsigned char) *p < 0x20)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cube option \"progress_group\" must not contain control characters"),
					 errhint("Name a group used by nothing else, such as \"streamcube-events\".")));
	return pstrdup(value);
}

/*
 * Option start as {"cube": "name"}: the cube starts where that one's
 * positions are (a cut-over); the name is looked up at creation.
 */
static char *
sc_option_start_cube(Datum value)
{
	Oid			argtype = JSONBOID;
	char	   *name;
	MemoryContext cxt = CurrentMemoryContext;

	if (SPI_execute_with_args("SELECT CASE WHEN jsonb_typeof($1 -> 'cube') = 'string' "
							  "             AND (SELECT count(*) FROM jsonb_object_keys($1)) = 1 "
							  "            THEN $1 ->> 'cube' END",
							  1, &argtype, &value, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read cube option \"start\"");
	/*
	 * SPI_execute left SPI's own context current: back to the caller's (the
	 * cube's), for the name and the options parsed after it.
	 */
	MemoryContextSwitchTo(cxt);
	name = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (name == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cube option \"start\" as an object must be {\"cube\": \"<name of a cube>\"}"),
				 errhint("Use \"earliest\", \"latest\", a timestamp, or {\"cube\": \"old_cube\"} to start where another cube of the same topic stopped.")));
	return name;
}

/*
 * Format avro's options: "schema", the Avro schema of bare records (a
 * JSON object, or its text), and "subject", the registry subject whose
 * latest schema the cube is checked against at creation.
 */
static void
sc_option_avro(ScCube *cube, const char *key, HeapTuple tup, TupleDesc desc, const char *type,
			   bool validate)
{
	if (validate && cube->format != SC_FORMAT_AVRO &&
		(cube->format != SC_FORMAT_PROTOBUF || strcmp(key, "schema") == 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cube option \"%s\" applies to format %s only", key,
						strcmp(key, "schema") == 0 ? "avro" : "avro or protobuf")));
	if (strcmp(key, "subject") == 0)
	{
		if (strcmp(type, "string") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cube option \"subject\" must be a string"),
					 errhint("Name the registry subject of the topic's values, such as \"events-value\".")));
		cube->avro_subject = SPI_getvalue(tup, desc, 2);
		return;
	}
	if (strcmp(type, "object") != 0 && strcmp(type, "string") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cube option \"schema\" must be an Avro schema: a JSON object, or its text"),
				 errhint("For example {\"schema\": {\"type\": \"record\", \"name\": \"e\", \"fields\": [...]}}.")));
	cube->avro_schema = strcmp(type, "string") == 0 ? SPI_getvalue(tup, desc, 2) : SPI_getvalue(tup, desc, 4);
}

/* One option whose value is a string; an unknown key is an error. */
static void
sc_option_string(ScCube *cube, const char *key, const char *value, const char *type, bool validate)
{
	if (strcmp(key, "start") != 0 && strcmp(key, "grace") != 0 &&
		strcmp(key, "late") != 0 && strcmp(key, "retention") != 0 &&
		strcmp(key, "bad_message") != 0 && strcmp(key, "tombstones") != 0 &&
		strcmp(key, "early_rejection_period") != 0 &&
		strcmp(key, "late_rejection_period") != 0 &&
		strcmp(key, "new_partitions") != 0 && strcmp(key, "progress_group") != 0 &&
		strcmp(key, "raw_rows") != 0 && strcmp(key, "home") != 0 &&
		strcmp(key, "delimiter") != 0 && strcmp(key, "quote") != 0 &&
		strcmp(key, "null") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown cube option \"%s\"", key),
				 errhint("Valid options: %s.", valid_options)));
	if (strcmp(type, "string") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cube option \"%s\" must be a string", key)));

	if (strcmp(key, "start") == 0)
	{
		if (strcmp(value, "earliest") == 0 || strcmp(value, "latest") == 0)
			cube->start_latest = sc_option_choice(key, value, "earliest", "latest");
		else
			cube->start_at_ms = sc_kafka_ms_of_text(value, "cube option \"start\"",
													"Use \"earliest\", \"latest\" or a timestamp such as \"2026-11-01 10:00+00\": each partition starts at its first message stamped at or after it.");
	}
	else if (strcmp(key, "grace") == 0)
		cube->grace = sc_option_interval(key, value, false);
	else if (strcmp(key, "late") == 0)
		cube->late_dead_letter = sc_option_choice(key, value, "append", "dead_letter");
	else if (strcmp(key, "retention") == 0)
		cube->retention = sc_option_interval(key, value, true);
	else if (strcmp(key, "early_rejection_period") == 0)
		cube->reject_early = sc_option_interval(key, value, true);
	else if (strcmp(key, "late_rejection_period") == 0)
		cube->reject_late = sc_option_interval(key, value, true);
	else if (strcmp(key, "bad_message") == 0)
		cube->bad_policy = sc_option_choice(key, value, "dead_letter", "pause")
			? SC_BAD_PAUSE : SC_BAD_DEAD_LETTER;
	else if (strcmp(key, "tombstones") == 0)
		cube->skip_tombstones = sc_option_choice(key, value, "dead_letter", "skip");
	else if (strcmp(key, "new_partitions") == 0)
		cube->assign_new_partitions = !sc_option_choice(key, value, "assign", "ignore");
	else if (strcmp(key, "progress_group") == 0)
		cube->progress_group = sc_option_progress_group(value, validate);
	else if (strcmp(key, "raw_rows") == 0)
		cube->keep_rows = !sc_option_choice(key, value, "keep", "none");
	else if (strcmp(key, "home") == 0)
	{
		if (validate && value[0] == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cube option \"home\" must name the home server"),
					 errhint("streamcube_adopt sets it on the cube it makes on a node: the home server's system identifier.")));
		cube->home = pstrdup(value);
	}
	else
	{
		if (validate && cube->format != SC_FORMAT_CSV)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cube option \"%s\" applies to format csv only", key)));
		if (strcmp(key, "delimiter") == 0)
			cube->csv_delimiter = sc_single_char(key, value);
		else if (strcmp(key, "quote") == 0)
			cube->csv_quote = sc_single_char(key, value);
		else
			cube->csv_null = pstrdup(value);
	}
}

/* Every column reads the top-level key of its name until "fields" says otherwise. */
static void
sc_columns_reset(ScCube *cube)
{
	for (int c = 0; c < cube->ncolumns; c++)
	{
		ScColumn   *col = &cube->columns[c];

		col->meta = SC_META_NONE;
		col->header = NULL;
		col->mapped = false;
		if (col->pathlen == 0)
		{
			col->path = palloc(sizeof(char *));
			col->path[0] = col->name;
			col->pathlen = 1;
		}
	}
	cube->implicit_document = NULL;
}

/*
 * Read a cube's options into cube, with their defaults first: strictly
 * (validate) when the cube is created or altered, leniently when a
 * receiver loads a cube whose table changed since (see the file's header).
 */
void
sc_cube_parse_options(ScCube *cube, Jsonb *options, bool validate)
{
	Oid			argtype = JSONBOID;
	Datum		arg = JsonbPGetDatum(options);
	uint64		n;
	Datum		fields = (Datum) 0;
	SPITupleTable *tab;

	sc_options_defaults(cube);

	if (SPI_execute_with_args("SELECT jsonb_typeof($1)", 1, &argtype, &arg, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read cube options");
	if (strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), "object") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("options of a cube must be a JSON object"),
				 errhint("Valid options: %s.", valid_options)));

	if (SPI_execute_with_args("SELECT key, value #>> '{}', jsonb_typeof(value), value "
							  "FROM jsonb_each($1)",
							  1, &argtype, &arg, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read cube options");
	MemoryContextSwitchTo(cube->mcxt);
	n = SPI_processed;
	tab = SPI_tuptable;
	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	tup = tab->vals[i];
		TupleDesc	desc = tab->tupdesc;
		char	   *key = SPI_getvalue(tup, desc, 1);
		char	   *type = SPI_getvalue(tup, desc, 3);
		bool		isnull;

		if (strcmp(key, "replica_sets") == 0)
			sc_parse_replica_sets(cube, SPI_getbinval(tup, desc, 4, &isnull), type);
		else if (strcmp(key, "end") == 0)
			cube->end = DatumGetJsonbPCopy(SPI_getbinval(tup, desc, 4, &isnull));
		else if (strcmp(key, "schema") == 0 || strcmp(key, "subject") == 0)
			sc_option_avro(cube, key, tup, desc, type, validate);
		else if (strcmp(key, "start") == 0 && strcmp(type, "object") == 0)
			cube->start_cube = sc_option_start_cube(SPI_getbinval(tup, desc, 4, &isnull));
		else if (strcmp(key, "compact") == 0)
		{
			sc_parse_compact(cube, SPI_getbinval(tup, desc, 4, &isnull), type);
			MemoryContextSwitchTo(cube->mcxt);
		}
		else if (strcmp(key, "fields") == 0)
		{
			if (strcmp(type, "object") != 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("cube option \"fields\" must be a JSON object mapping columns to key paths or Kafka metadata"),
						 errhint("For example {\"fields\": {\"user_id\": \"user.id\", \"k\": {\"kafka\": \"key\"}}}.")));
			fields = SPI_getbinval(tup, desc, 4, &isnull);
		}
		else
			sc_option_string(cube, key, SPI_getvalue(tup, desc, 2), type, validate);
	}

	if (validate && cube->format == SC_FORMAT_CSV)
		sc_check_csv_dialect(cube);
	sc_columns_reset(cube);
	if (fields != (Datum) 0)
		sc_parse_fields(cube, fields, validate);
	sc_finish_columns(cube, validate);
}

/*
 * The options to store for a cube whose jsonb document column was chosen
 * by its type: with that choice written into "fields", so that a jsonb
 * column added to the table later does not take the document's place (or
 * leave the document unstored).  The caller is connected to SPI.
 */
Datum
sc_cube_pin_document(const ScCube *cube, Datum options)
{
	Oid			types[2] = {JSONBOID, TEXTOID};
	Datum		args[2];
	bool		isnull;

	if (cube->implicit_document == NULL)
		return options;
	args[0] = options;
	args[1] = CStringGetTextDatum(cube->implicit_document);
	if (SPI_execute_with_args("SELECT $1 || jsonb_build_object('fields', "
							  "coalesce($1 -> 'fields', '{}') || jsonb_build_object($2, '{\"kafka\": \"value\"}'::jsonb))",
							  2, types, args, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not write the document column into the options");
	return datumCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull), false, -1);
}

/*
 * A cube's progress_group writes into the Kafka cluster with the cluster's
 * credentials, where it could move the offsets of another application's
 * group: only admins set or change it (removing it is anyone's who may
 * alter the cube).  old is the value before, NULL at creation.
 */
void
sc_cube_check_progress_group(const char *old, const char *new)
{
	if (new == NULL || (old != NULL && strcmp(old, new) == 0))
		return;
	if (!sc_is_admin(GetUserId()))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to set cube option \"progress_group\""),
				 errdetail("Receivers commit to that Kafka consumer group with the cluster's credentials, and would move the offsets of any application using it."),
				 errhint("Ask a superuser or a member of streamcube_admin to set it.")));
}
