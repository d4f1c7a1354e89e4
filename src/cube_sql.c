/*-------------------------------------------------------------------------
 *
 * cube_sql.c
 *		SQL functions on cubes: streamcube_create_cube, _drop_cube, _pause,
 *		_resume, _wait, _alter_cube.
 *
 * streamcube_create_cube() does all of its work in the caller's
 * transaction: the table, the catalog rows, the assignment of every Kafka
 * partition to replica set "default", the first two windows.  Any error
 * rolls all of it back, so a wrong argument creates nothing.  The launcher
 * is woken at COMMIT and starts a receiver.
 *
 * DDL on the cube's table runs as the caller (so ownership and privileges
 * are the caller's); catalog rows are written through sc_catalog_exec()
 * and cube_catalog.c.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "cube.h"
#include "cube_catalog.h"
#include "rollup.h"
#include "sealed.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "kafka.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "parser/parser.h"
#include "pgstat.h"
#include "avro.h"
#include "format.h"
#include "positions.h"
#include "reassign.h"
#include "protobuf.h"
#include "registry.h"
#include "stops.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/datetime.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(sc_create_cube);
PG_FUNCTION_INFO_V1(sc_drop_cube);
PG_FUNCTION_INFO_V1(sc_pause_cube);
PG_FUNCTION_INFO_V1(sc_resume_cube);
PG_FUNCTION_INFO_V1(sc_wait_cube);
PG_FUNCTION_INFO_V1(sc_alter_cube);

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
	int32		x = ((ScKafkaPartitionInfo *) lfirst(a))->source;
	int32		y = ((ScKafkaPartitionInfo *) lfirst(b))->source;

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
/* The format named at creation. */
static ScFormat
sc_create_format(const char *format, const char *name)
{
	if (strcmp(format, "json") == 0)
		return SC_FORMAT_JSON;
	if (strcmp(format, "csv") == 0)
		return SC_FORMAT_CSV;
	if (strcmp(format, "jsonb") == 0)
		return SC_FORMAT_JSONB;
	if (strcmp(format, "avro") == 0)
		return SC_FORMAT_AVRO;
	if (strcmp(format, "protobuf") == 0)
		return SC_FORMAT_PROTOBUF;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unknown message format \"%s\" for cube \"%s\"", format, name),
			 errhint("Use 'json', 'jsonb', 'csv', 'avro' or 'protobuf'.")));
	return SC_FORMAT_JSON;		/* keep the compiler quiet */
}

/* Arguments that need no catalog access. */
static void
sc_create_check_arguments(ScCube *cube, const char *name, const char *topic, Interval *interval)
{
	cube->width = sc_interval_usecs(interval, "segment_interval");
	if (cube->width < USECS_PER_MINUTE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("segment_interval of cube \"%s\" must be at least 1 minute", name),
				 errhint("Use an interval such as '1 hour' or '1 day'.")));
	if (topic[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("topic of cube \"%s\" must not be empty", name)));
}

/* The cube's name, as the caller means it (the caller's search path). */
static RangeVar *
sc_create_name(const char *name)
{
	RangeVar   *rv;
	int			nestlevel;

	sc_caller_path_enter(&nestlevel);
	rv = makeRangeVarFromNameList(stringToQualifiedNameList(name));
	if (rv->schemaname == NULL)
		rv->schemaname = get_namespace_name(RangeVarGetCreationNamespace(rv));
	sc_caller_path_leave(nestlevel);
	return rv;
}

/* The owner must be able to log in: its receivers connect as it. */
static void
sc_create_check_owner(const char *name)
{
	bool		isnull;

	SPI_execute_with_args("SELECT rolcanlogin FROM pg_catalog.pg_roles WHERE oid = $1",
						  1, (Oid[]) {OIDOID}, (Datum[]) {ObjectIdGetDatum(GetUserId())},
						  NULL, true, 1);
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION),
				 errmsg("role \"%s\" cannot own cube \"%s\" because it cannot log in",
						GetUserNameFromId(GetUserId(), false), name),
				 errdetail("Receivers connect to the database as the cube's owner."),
				 errhint("ALTER ROLE %s LOGIN, or create the cube as a role that can log in.",
						 GetUserNameFromId(GetUserId(), false))));
}

/* The name must be free: a cube of that name, or another relation, says so. */
static void
sc_create_check_free(RangeVar *rv, const char *name)
{
	Oid			existing = RangeVarGetRelid(rv, NoLock, true);

	if (!OidIsValid(existing))
		return;
	sc_catalog_exec("SELECT 1 FROM streamcube.cubes WHERE relid = $1",
					1, (Oid[]) {OIDOID}, (Datum[]) {ObjectIdGetDatum(existing)},
					NULL, true, 1);
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

/*
 * The table: exactly one CREATE TABLE statement, checked to be ours, then
 * run as the caller with the caller's search path (column types are the
 * caller's).  Fills in the cube's relation and columns.
 */
static void
sc_create_table(ScCube *cube, RangeVar *rv, const char *name, const char *columns,
				const char *time_column)
{
	StringInfoData sql;
	List	   *raw;
	CreateStmt *create;
	ListCell   *elt;
	bool		found = false;
	int			nestlevel;

	initStringInfo(&sql);
	/* The line break ends any "--" comment hidden in the columns. */
	appendStringInfo(&sql, "CREATE TABLE %s (%s\n, %s_partition integer NOT NULL, _offset bigint NOT NULL) "
					 "PARTITION BY RANGE (%s)",
					 quote_qualified_identifier(rv->schemaname, rv->relname), columns,
					 cube->topics_kind == SC_TOPICS_ONE ? "" : SC_TOPIC_COLUMN " text NOT NULL, ",
					 quote_identifier(time_column));
	raw = sc_parse_create(sql.data);
	if (list_length(raw) != 1 || !IsA(linitial_node(RawStmt, raw)->stmt, CreateStmt) ||
		!sc_create_stmt_is_ours((CreateStmt *) linitial_node(RawStmt, raw)->stmt))
		ereport(ERROR,
				(errcode(ERRCODE_SYNTAX_ERROR),
				 errmsg("columns of cube \"%s\" must be a list of column definitions", name),
				 errhint("For example 'ts timestamptz, country text, amount numeric'.")));

	/* Check the time column before CREATE TABLE turns it into a worse error. */
	create = (CreateStmt *) linitial_node(RawStmt, raw)->stmt;
	foreach(elt, create->tableElts)
	{
		if (IsA(lfirst(elt), ColumnDef) &&
			strcmp(((ColumnDef *) lfirst(elt))->colname, time_column) == 0)
			found = true;
		/* the caller's columns: all but ours, at the end */
		if (IsA(lfirst(elt), ColumnDef) &&
			foreach_current_index(elt) < list_length(create->tableElts) - 2 -
			(cube->topics_kind == SC_TOPICS_ONE ? 0 : 1) &&
			(strcmp(((ColumnDef *) lfirst(elt))->colname, SC_TOPIC_COLUMN) == 0 ||
			 strcmp(((ColumnDef *) lfirst(elt))->colname, "_partition") == 0 ||
			 strcmp(((ColumnDef *) lfirst(elt))->colname, "_offset") == 0))
			ereport(ERROR,
					(errcode(ERRCODE_RESERVED_NAME),
					 errmsg("column name \"%s\" of cube \"%s\" is reserved",
							((ColumnDef *) lfirst(elt))->colname, name),
					 errhint("streamcube fills _topic, _partition and _offset itself; name the column otherwise.")));
	}
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("time column \"%s\" is not among the columns of cube \"%s\"", time_column, name),
				 errhint("Name one of the declared columns, of type timestamptz.")));

	sc_caller_path_enter(&nestlevel);
	if (SPI_execute(sql.data, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not create the table of cube \"%s\"", name);
	sc_caller_path_leave(nestlevel);

	cube->relid = RangeVarGetRelid(rv, NoLock, false);
	cube->schema = get_namespace_name(get_rel_namespace(cube->relid));
	cube->relname = get_rel_name(cube->relid);
	cube->qualified = quote_qualified_identifier(cube->schema, cube->relname);
	cube->owner = GetUserId();

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
}

/*
 * The catalog rows: the cube's, its replica sets, its partitions'
 * assignments (dealt round the replica sets) and first checkpoints (the
 * start positions, from the watermarks).
 */
static void
sc_create_catalog_rows(ScCube *cube, const char *name, const char *time_column, Interval *interval,
					   const char *format, Jsonb *options, List *partitions,
					   const int64 *starts, const char *kafka_cluster_id)
{
	ListCell   *lc;

	cube->cube_id = sc_cube_row_insert(cube->relid, cube->cluster, cube->topic, time_column,
									   interval, format, options, kafka_cluster_id);
	sc_topics_insert(cube, 0, "create");
	if (list_length(cube->replica_sets) > list_length(partitions))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cube \"%s\" names %d replica sets, but %s %s only %d partitions",
						name, list_length(cube->replica_sets),
						cube->topics_kind == SC_TOPICS_ONE ? psprintf("topic \"%s\"", cube->topic) : "its topics",
						cube->topics_kind == SC_TOPICS_ONE ? "has" : "have", list_length(partitions)),
				 errhint("Each replica set needs at least one partition to consume.")));

	sc_reassign_first_assignment(cube->cube_id, cube->replica_sets, partitions);
	foreach(lc, partitions)
	{
		ScKafkaPartitionInfo *p = lfirst(lc);
		int64		start = starts[foreach_current_index(lc)];

		sc_positions_init(cube->cube_id, p->source, Max(start, 0));
	}
}

/* A key path as "a.b.c", for messages. */
static char *
sc_path_text(char **path, int pathlen)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < pathlen; i++)
		appendStringInfo(&buf, "%s%s", i > 0 ? "." : "", path[i]);
	return buf.data;
}

/*
 * Formats avro and protobuf: the schema the cube reads is checked against
 * its columns at creation, so that a column no field feeds is an error now
 * rather than a column of NULLs: option "schema" (bare Avro records), or
 * the latest schema of option "subject" in the cluster's registry (for
 * Protobuf, its first message type).  Without either, the cluster must
 * have a registry, and each writer schema is met when its messages come (a
 * column its schema lacks is NULL).
 */
static void
sc_create_check_schema(ScCube *cube, const char *name)
{
	bool		protobuf = cube->format == SC_FORMAT_PROTOBUF;
	const char *want = protobuf ? "PROTOBUF" : "AVRO";
	ScProtoSchema *proto = NULL;
	int			first[1] = {0};
	ScRegistryConn registry;
	bool		has_registry = sc_cluster_registry(cube->cluster, &registry);
	const char *text = cube->avro_schema;
	const char *what = "option \"schema\"";
	char	   *error = NULL;
	ScAvroSchema *schema = NULL;

	if (text == NULL && !has_registry)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 protobuf ? errmsg("cube \"%s\" of format protobuf needs a schema registry", name)
				 : errmsg("cube \"%s\" of format avro needs a schema registry or an Avro schema", name),
				 errdetail("Kafka cluster \"%s\" has no schema.registry.url.", cube->cluster),
				 errhint("Set schema.registry.url with streamcube_alter_cluster() for Confluent-framed messages, or give the schema of bare records in option \"schema\".")));
	if (text == NULL && cube->avro_subject != NULL)
	{
		char		errbuf[512];
		char	   *type = NULL;
		int32		id;
		char	   *latest = NULL;
		ScRegistryStatus st = sc_registry_latest(&registry, cube->avro_subject, &id, &type, &latest,
												 errbuf, sizeof(errbuf));

		if (st == SC_REGISTRY_NOT_FOUND)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("subject \"%s\" does not exist in the schema registry of Kafka cluster \"%s\"",
							cube->avro_subject, cube->cluster),
					 errhint("Name the subject the topic's producers register under (Confluent's default: \"<topic>-value\").")));
		if (st != SC_REGISTRY_OK)
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("the schema registry of Kafka cluster \"%s\" %s: %s", cube->cluster,
							st == SC_REGISTRY_REFUSED ? "refuses the request" : "does not answer", errbuf)));
		if (strcmp(type, want) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the latest schema of subject \"%s\" is a %s schema, not %s",
							cube->avro_subject, type, want)));
		text = latest;
		what = psprintf("the latest schema of subject \"%s\" (id %d)", cube->avro_subject, id);
	}
	if (text == NULL)
		return;
	if (protobuf)
		proto = sc_proto_parse(text, 0, NULL, NULL, &error);
	else
		schema = sc_avro_parse(text, &error);
	if (schema == NULL && proto == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s of cube \"%s\" is not a valid %s schema: %s", what, name,
						protobuf ? "Protobuf" : "Avro", error),
				 protobuf ? errhint("A schema that imports other files than Google's well-known types is not checked at creation: create the cube without option \"subject\".") : 0));
	for (int c = 0; c < cube->ncolumns; c++)
	{
		ScColumn   *col = &cube->columns[c];

		if (col->meta != SC_META_NONE)
			continue;
		if (protobuf ? !sc_proto_has_path(proto, first, 1, col->path, col->pathlen)
			: !sc_avro_has_path(schema, col->path, col->pathlen))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("column \"%s\" of cube \"%s\" has no field in %s", col->name, name, what),
					 errdetail("It reads field \"%s\".", sc_path_text(col->path, col->pathlen)),
					 errhint("Map it to a field with option \"fields\" ({\"%s\": \"record.field\"}), or drop it.",
							 col->name)));
	}
	if ((error = sc_schema_misfit(cube, schema, proto, first, 1)) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("in %s of cube \"%s\", %s", what, name, error),
				 errhint("Give the column a type that takes the field (text takes any), or map another field to it with option \"fields\".")));
}

/* A topic argument as it is stored, as JSON: a name is a JSON string. */
static char *
sc_json_text(const char *spec)
{
	StringInfoData buf;

	if (spec[0] == '[' || spec[0] == '{')
		return pstrdup(spec);
	initStringInfo(&buf);
	escape_json(&buf, spec);
	return buf.data;
}

/* Names (String) for messages: "a", "b"; none: "none". */
static char *
sc_names_text(List *names)
{
	StringInfoData buf;
	ListCell   *lc;

	if (names == NIL)
		return "none";
	initStringInfo(&buf);
	foreach(lc, names)
		appendStringInfo(&buf, "%s\"%s\"", foreach_current_index(lc) > 0 ? ", " : "", strVal(lfirst(lc)));
	return buf.data;
}

/* A cube's topics for messages: topic "a", or topics "a", "b". */
static char *
sc_topics_text(const ScCube *cube)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, cube->topics.n == 1 ? "topic " : "topics ");
	for (int t = 0; t < cube->topics.n; t++)
		appendStringInfo(&buf, "%s\"%s\"", t > 0 ? ", " : "", cube->topics.names[t]);
	return buf.data;
}

/* The same topics, by the same numbers (so the same source partitions)? */
static bool
sc_same_topics(const ScTopicList *a, const ScTopicList *b)
{
	if (a->n != b->n)
		return false;
	for (int t = 0; t < a->n; t++)
		if (strcmp(a->names[t], b->names[t]) != 0)
			return false;
	return true;
}

/*
 * Option start {"cube": name}: where each partition starts is where that
 * cube stops (a cut-over): its stop offset when it has a stop point, else
 * its position, which must then stand still (the cube paused).  A
 * partition it does not know starts at its low watermark.  Its row is
 * held FOR SHARE until COMMIT, so that its stop point cannot change
 * meanwhile (streamcube_resume takes it FOR UPDATE).
 */
static void
sc_create_starts_of_cube(ScCube *cube, List *partitions, int64 *starts,
						 const char *kafka_cluster_id)
{
	Oid			relid,
				owner;
	int32		other_id = sc_cube_lookup(cube->start_cube, &relid, &owner);
	ScCube	   *other;
	Oid			t[2] = {INT4OID, INT4OID};
	Datum		v[2];
	bool		isnull;
	bool		has_stop;
	ListCell   *lc;

	if (pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, cube->start_cube);
	v[0] = Int32GetDatum(other_id);
	sc_catalog_exec("SELECT stop_requested IS NOT NULL, paused FROM streamcube.cubes "
					"WHERE cube_id = $1 FOR SHARE", 1, t, v, NULL, false, 0);
	has_stop = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (!has_stop && !DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cube %s runs without a stop point: a cube cannot start where it stops", cube->start_cube),
				 errhint("Give it a stop point first, for example streamcube_resume('%s', until => '\"latest\"'), then create this cube.",
						 cube->start_cube)));
	other = sc_cube_load(other_id, false);
	if (!sc_same_topics(&other->topics, &cube->topics) ||
		(kafka_cluster_id != NULL && other->kafka_cluster_id != NULL
		 ? strcmp(kafka_cluster_id, other->kafka_cluster_id) != 0
		 : strcmp(other->cluster, cube->cluster) != 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cube %s reads %s of cluster \"%s\", not %s of cluster \"%s\"",
						cube->start_cube, sc_topics_text(other), other->cluster, sc_topics_text(cube), cube->cluster),
				 errhint("Option start {\"cube\": ...} names a cube of the same topic, whose offsets mean the same messages.")));
	foreach(lc, partitions)
	{
		ScKafkaPartitionInfo *p = lfirst(lc);
		int			i = foreach_current_index(lc);

		v[1] = Int32GetDatum(p->source);
		if (has_stop)
			sc_catalog_exec("SELECT s.stop_offset FROM streamcube.stop_offsets s "
							"WHERE s.cube_id = $1 AND s.partition = $2", 2, t, v, NULL, true, 0);
		else
			sc_catalog_exec("SELECT greatest(p.position, k.\"offset\") FROM streamcube.checkpoints k "
							"LEFT JOIN streamcube.consume_positions p USING (cube_id, partition) "
							"WHERE k.cube_id = $1 AND k.partition = $2", 2, t, v, NULL, true, 0);
		starts[i] = p->low_watermark;
		if (SPI_processed > 0)
		{
			Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

			if (!isnull)
				starts[i] = Max(DatumGetInt64(d), 0);
		}
	}
}

/*
 * Where each partition starts, by option start: its low or high watermark,
 * or its first message stamped at or after the start time (its end when
 * none is that late).
 */
static int64 *
sc_create_starts(ScCube *cube, ScKafkaConnInfo *conn, List *partitions,
				 const char *kafka_cluster_id)
{
	int			n = list_length(partitions);
	int64	   *starts = palloc(sizeof(int64) * Max(n, 1));
	int32	   *parts = palloc(sizeof(int32) * Max(n, 1));
	int64	   *ms = palloc(sizeof(int64) * Max(n, 1));
	ListCell   *lc;

	foreach(lc, partitions)
	{
		ScKafkaPartitionInfo *p = lfirst(lc);
		int			i = foreach_current_index(lc);

		starts[i] = cube->start_latest ? p->high_watermark : p->low_watermark;
		parts[i] = p->source;
		ms[i] = cube->start_at_ms;
	}
	if (cube->start_cube != NULL)
		sc_create_starts_of_cube(cube, partitions, starts, kafka_cluster_id);
	else if (cube->start_at_ms >= 0)
	{
		sc_offsets_at_checked(conn, cube->cluster, &cube->topics, n, parts, ms, starts, partitions);
		foreach(lc, partitions)
		{
			ScKafkaPartitionInfo *p = lfirst(lc);
			int			i = foreach_current_index(lc);

			starts[i] = starts[i] < 0 ? p->high_watermark : Max(starts[i], p->low_watermark);
		}
	}
	return starts;
}

static int
sc_topic_cmp(const ListCell *a, const ListCell *b)
{
	return strcmp(strVal(lfirst(a)), strVal(lfirst(b)));
}

/* The topics a new cube's pattern matches now: one at least. */
static void
sc_create_match_pattern(ScCube *cube, ScKafkaConnInfo *conn, const char *name)
{
	List	   *all = sc_kafka_describe_topics(conn, NULL, false, sc_kafka_timeout_ms, NULL, NULL);
	List	   *found = sc_topics_match_kafka(cube, all);
	ListCell   *lc;

	if (found == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("topic pattern \"%s\" of cube \"%s\" matches no topic of Kafka cluster \"%s\"",
						cube->topic_pattern, name, conn->cluster_name),
				 errhint("Create a first topic the pattern matches; the cube picks up the others as they appear. "
						 "The pattern matches whole topic names.")));
	if (list_length(found) > SC_SOURCE_MAX_TOPICS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("topic pattern \"%s\" of cube \"%s\" matches %d topics; a cube reads at most %d",
						cube->topic_pattern, name, list_length(found), SC_SOURCE_MAX_TOPICS),
				 errhint("Use a narrower pattern, or several cubes.")));
	list_sort(found, sc_topic_cmp);
	cube->topics.n = list_length(found);
	cube->topics.names = palloc(sizeof(char *) * cube->topics.n);
	foreach(lc, found)
		cube->topics.names[foreach_current_index(lc)] = strVal(lfirst(lc));
}

/*
 * The schemas of option "subject" checked against the columns: a subject
 * with "{topic}" (as Confluent's TopicNameStrategy names them:
 * "{topic}-value") is each topic's, checked for every topic of the cube.
 * Messages are decoded by the schema id they carry, whatever their topic.
 */
static void
sc_create_check_schemas(ScCube *cube, const char *name)
{
	const char *subject = cube->avro_subject;
	const char *at = subject ? strstr(subject, "{topic}") : NULL;

	if (at == NULL)
	{
		sc_create_check_schema(cube, name);
		return;
	}
	for (int t = 0; t < cube->topics.n; t++)
	{
		cube->avro_subject = psprintf("%.*s%s%s", (int) (at - subject), subject, cube->topics.names[t],
									  at + strlen("{topic}"));
		sc_create_check_schema(cube, name);
	}
	cube->avro_subject = (char *) subject;
}

/*
 * streamcube_create_cube(name, cluster, topic, columns, time_column,
 * segment_interval, format, options)
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
	RangeVar   *rv;
	List	   *partitions;
	char	   *kafka_cluster_id = NULL;
	ScKafkaConnInfo *conn;
	int64		now;

	cube->mcxt = CurrentMemoryContext;
	if (PG_ARGISNULL(5))
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						errmsg("segment_interval must not be NULL")));
	interval = PG_GETARG_INTERVAL_P(5);
	format = PG_ARGISNULL(6) ? "json" : text_to_cstring(PG_GETARG_TEXT_PP(6));
	options = PG_ARGISNULL(7) ? NULL : PG_GETARG_JSONB_P(7);
	cube->cluster = cluster;

	sc_require_admin("create cubes");
	cube->format = sc_create_format(format, name);
	sc_create_check_arguments(cube, name, topic, interval);
	sc_topics_parse(cube, topic, name);
	rv = sc_create_name(name);

	SPI_connect();
	sc_create_check_owner(name);
	sc_create_check_free(rv, name);

	/* The cluster and the topic, with watermarks for the start positions. */
	conn = sc_cluster_conninfo(cluster);
	if (cube->topics_kind == SC_TOPICS_PATTERN)
		sc_create_match_pattern(cube, conn, name);
	partitions = sc_kafka_describe_topics(conn, &cube->topics, true, sc_kafka_timeout_ms, NULL,
										  &kafka_cluster_id);
	list_sort(partitions, sc_partition_cmp);

	sc_create_table(cube, rv, name, columns, time_column);
	if (options == NULL)
		options = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")));
	sc_cube_parse_options(cube, options, true);
	sc_topics_mark_column(cube);
	sc_cube_check_progress_group(NULL, cube->progress_group);
	options = DatumGetJsonbP(sc_cube_pin_document(cube, JsonbPGetDatum(options)));
	sc_create_catalog_rows(cube, name, time_column, interval, format, options, partitions,
						   sc_create_starts(cube, conn, partitions, kafka_cluster_id),
						   kafka_cluster_id);
	if (cube->end != NULL)
		sc_stops_set(cube, cube->end);
	if (cube->format == SC_FORMAT_AVRO || cube->format == SC_FORMAT_PROTOBUF)
		sc_create_check_schemas(cube, name);

	/* The current and the next window, so the first rows take no DDL lock. */
	now = sc_window_start(cube, sc_cube_time(cube, GetCurrentTimestamp()));
	sc_segment_ensure(cube, now, NULL, NULL);
	sc_segment_ensure(cube, now + cube->width, NULL, NULL);

	/* Each replica set with partitions needs a receiver slot. */
	sc_slots_warn_short(name, Min(Max(list_length(cube->replica_sets), 1), list_length(partitions)));

	SPI_finish();
	sc_launcher_wakeup_at_commit();
	PG_RETURN_OID(cube->relid);
}

/* ----------------------------------------------------------------
 * drop, pause, resume
 * ----------------------------------------------------------------
 */
Datum
sc_drop_cube(PG_FUNCTION_ARGS)
{
	char	   *name = sc_text_arg(fcinfo, 0, "cube name");
	bool		keep_data = PG_ARGISNULL(1) ? false : PG_GETARG_BOOL(1);
	Oid			relid,
				owner,
				view;
	int32		cube_id;
	List	   *rollups;
	ListCell   *lc;

	SPI_connect();
	cube_id = sc_cube_for_action(name, "drop", &relid, &owner);
	rollups = sc_cube_rollup_tables(cube_id);
	/* The roll-ups' views, as the cube's row locked FOR UPDATE leaves them. */
	if (!keep_data)
	{
		sc_rollup_drop_views(cube_id, InvalidOid);
		/* <cube>_all and its nodes' foreign tables (placements go with the row) */
		sc_placement_drop_views(cube_id, relid, owner);
	}
	/* Waits for a batch or a seal in flight; the view as it is then. */
	view = sc_cube_row_delete(cube_id);
	if (!keep_data)
	{
		/* The sealed view goes first: it depends on the sealed windows. */
		if (sc_sealed_view_ours(view, relid))
		{
			ScAsOwner	as;

			sc_as_owner_enter(&as, owner);
			SPI_execute(psprintf("DROP VIEW %s",
								 sc_relation_qualified(view)), false, 0);
			sc_as_owner_leave(&as);
		}
		/* Its roll-ups (their catalog rows went with the cube's), then the cube. */
		foreach(lc, rollups)
			sc_drop_table(lfirst_oid(lc), owner, psprintf("roll-up of cube \"%s\"", name));
		sc_drop_table(relid, owner, psprintf("cube \"%s\"", name));
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
	int32		cube_id;

	SPI_connect();
	cube_id = sc_cube_for_action(name, paused ? "pause" : "resume", &relid, &owner);
	sc_cube_row_set_paused(cube_id, paused, skip_bad);
	SPI_finish();
}

Datum
sc_pause_cube(PG_FUNCTION_ARGS)
{
	sc_set_paused(fcinfo, true, false);
	PG_RETURN_VOID();
}

/*
 * streamcube_resume(cube, skip_bad_message, until): resume the cube, with
 * until up to that stop point (stops.c), which a running cube takes too;
 * without, any stop point is forgotten.  The cube's row is locked FOR
 * UPDATE first: a batch in flight commits before the stop offsets are
 * resolved against the positions, and the next batch reads them.
 */
Datum
sc_resume_cube(PG_FUNCTION_ARGS)
{
	char	   *name = sc_text_arg(fcinfo, 0, "cube name");
	bool		skip_bad = PG_ARGISNULL(1) ? false : PG_GETARG_BOOL(1);
	Oid			relid,
				owner;
	int32		cube_id;

	SPI_connect();
	cube_id = sc_cube_for_action(name, "resume", &relid, &owner);
	if (PG_ARGISNULL(2))
		sc_stops_clear(cube_id);
	else
	{
		Oid			t = INT4OID;
		Datum		v = Int32GetDatum(cube_id);

		sc_catalog_exec("SELECT 1 FROM streamcube.cubes WHERE cube_id = $1 FOR UPDATE",
						1, &t, &v, NULL, false, 0);
		sc_stops_set(sc_cube_load(cube_id, false), PG_GETARG_JSONB_P(2));
	}
	sc_cube_row_set_paused(cube_id, false, skip_bad);
	SPI_finish();
	PG_RETURN_VOID();
}

/* ----------------------------------------------------------------
 * streamcube_wait(cube, timeout): has every message in Kafka now been
 * consumed?
 * ----------------------------------------------------------------
 */

/*
 * Is every partition held by a running receiver whose published position
 * reached its target?  Receivers publish their positions to shared memory
 * just after COMMIT, so streamcube.consumers agrees when this is true.
 */
static bool
sc_wait_receivers_done(int32 cube_id, int n, const int32 *parts, const int64 *targets,
					   const bool *placed)
{
	bool		done = true;

	LWLockAcquire(sc_shared->lock, LW_SHARED);
	for (int i = 0; i < n && done; i++)
	{
		bool		held = placed[i];	/* its receiver stopped at its stop point */

		for (int s = 0; s < sc_shared->nslots && !held; s++)
		{
			ScReceiverSlot *slot = &sc_shared->slots[s];

			ScPartitionStat *stats = sc_slot_parts(slot);

			if (!slot->in_use || slot->dboid != MyDatabaseId || slot->cube_id != cube_id ||
				slot->state != SC_RECEIVER_RUNNING)
				continue;
			for (int p = 0; p < slot->npartitions; p++)
				if (stats[p].partition == parts[i] && stats[p].position >= targets[i])
					held = true;
		}
		done = held;
	}
	LWLockRelease(sc_shared->lock);
	return done;
}

/*
 * The partitions among parts[] that no replica set consumes, as text; NULL
 * when all are assigned.
 */
static char *
sc_wait_unassigned(const ScCube *cube, Datum partarray)
{
	ScPrivilegeSave save;
	Datum		args[2] = {Int32GetDatum(cube->cube_id), partarray};
	Oid			types[2] = {INT4OID, INT4ARRAYOID};
	StringInfoData names;

	sc_catalog_enter(&save);
	if (SPI_execute_with_args("SELECT t.part FROM unnest($2) AS t(part) "
							  "WHERE NOT EXISTS (SELECT 1 FROM streamcube.assignments a "
							  "                  WHERE a.cube_id = $1 AND a.partition = t.part) "
							  "ORDER BY t.part",
							  2, types, args, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.assignments");
	sc_catalog_leave(&save);
	if (SPI_processed == 0)
		return NULL;
	initStringInfo(&names);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		appendStringInfo(&names, "%s%s", i > 0 ? ", " : "",
						 sc_partition_name(cube, DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i],
																			 SPI_tuptable->tupdesc, 1, &isnull))));
	}
	return names.data;
}

/* Why the cube is paused, or NULL when it runs (or paused at its stop point). */
static char *
sc_wait_paused(const ScCube *cube)
{
	ScPrivilegeSave save;
	Datum		arg = Int32GetDatum(cube->cube_id);
	Oid			type = INT4OID;
	char	   *why = NULL;
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;

	sc_catalog_enter(&save);
	if (SPI_execute_with_args("SELECT paused AND stop_reached_at IS NULL, paused_reason, bad_partition, bad_offset "
							  "FROM streamcube.cubes WHERE cube_id = $1",
							  1, &type, &arg, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.cubes");
	sc_catalog_leave(&save);
	if (SPI_processed == 0)
		return "the cube was dropped";
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	if (!DatumGetBool(SPI_getbinval(tup, desc, 1, &isnull)))
		return NULL;
	why = SPI_getvalue(tup, desc, 2);
	if (why == NULL && SPI_getvalue(tup, desc, 3) != NULL)
		why = psprintf("paused by a bad message at partition %s offset %s",
					   sc_partition_name(cube, DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull))),
					   SPI_getvalue(tup, desc, 4));
	return why ? why : "paused by streamcube_pause()";
}

/*
 * A replica set of the cube that no receiver serves because every slot is
 * taken?  Then say so, in a WARNING: waiting cannot help.
 */
static bool
sc_wait_unserved_warn(int32 cube_id, const char *name)
{
	ScPrivilegeSave save;
	Datum		arg = Int32GetDatum(cube_id);
	Oid			type = INT4OID;

	if (sc_slots_in_use() < sc_shared->nslots)
		return false;			/* the launcher will start it */
	sc_catalog_enter(&save);
	/* a set placed on a node has no receiver here, rightly */
	if (SPI_execute_with_args(sc_catalog_has_column("placement_catalog", "replica_set") ?
							  "SELECT DISTINCT replica_set FROM streamcube.assignments a "
							  "WHERE cube_id = $1 AND NOT EXISTS (SELECT FROM streamcube.placement_catalog x "
							  "  WHERE x.cube_id = a.cube_id AND x.replica_set = a.replica_set) ORDER BY 1" :
							  "SELECT DISTINCT replica_set FROM streamcube.assignments "
							  "WHERE cube_id = $1 ORDER BY 1",
							  1, &type, &arg, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.assignments");
	sc_catalog_leave(&save);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *set = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);

		if (sc_slot_exists(cube_id, set))
			continue;
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("replica set \"%s\" of cube \"%s\" has no receiver: all %d receiver slots are in use",
						set, name, sc_shared->nslots),
				 errhint("streamcube_wait() returns false until it has one; raise streamcube.max_receivers and restart the server, or drop cubes that are no longer needed.")));
		return true;
	}
	return false;
}

/* Is the cube paused?  Then say why, in a WARNING: waiting cannot help. */
static bool
sc_wait_paused_warn(const ScCube *cube, const char *name)
{
	char	   *paused = sc_wait_paused(cube);

	if (paused == NULL)
		return false;
	ereport(WARNING,
			(errcode(ERRCODE_WARNING),
			 errmsg("cube \"%s\" is paused: %s", name, paused),
			 errhint("streamcube_wait() returns false while a cube is paused; resume it with streamcube_resume('%s').",
					 name)));
	return true;
}

/*
 * True once every message that Kafka held for the topic at the call is
 * consumed: committed, and shown by a running receiver; for a cube with a
 * stop point, once every partition reached it.  "Held" is the end
 * a read_committed consumer reads to, the last stable offset, as the lag
 * of streamcube.consumers.  False at the timeout, and at once (with a
 * WARNING saying why) when the cube is paused or a partition of the topic
 * is assigned to no replica set: waiting could not help.
 */
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
	int32	   *parts;
	int64	   *targets;
	Datum	   *partd;
	Datum	   *targetd;
	Datum		partarray,
				targetarray,
				stops;
	char	   *unassigned;
	char	   *nodes;
	bool	   *placed;
	bool		done = false;

	SPI_connect();
	cube_id = sc_cube_lookup(name, &relid, &owner);
	if (pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, name);
	cube = sc_cube_load(cube_id, false);
	if (RecoveryInProgress())
	{
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("cube \"%s\" is not consumed on a standby", name),
				 errdetail("Receivers run on the primary; a standby holds the cube's sealed windows only, as replication brings them."),
				 errhint("Call streamcube_wait() on the primary; on the standby, query the view %s_sealed.",
						 cube->relname)));
		SPI_finish();
		PG_RETURN_BOOL(false);
	}
	if (sc_wait_paused_warn(cube, name) || sc_wait_unserved_warn(cube_id, name))
	{
		SPI_finish();
		PG_RETURN_BOOL(false);
	}
	partitions = sc_kafka_describe_topics(sc_cluster_conninfo(cube->cluster), &cube->topics, true,
										  sc_kafka_timeout_ms, NULL, NULL);

	parts = palloc(sizeof(int32) * Max(list_length(partitions), 1));
	targets = palloc(sizeof(int64) * Max(list_length(partitions), 1));
	partd = palloc(sizeof(Datum) * Max(list_length(partitions), 1));
	targetd = palloc(sizeof(Datum) * Max(list_length(partitions), 1));
	placed = palloc0(sizeof(bool) * Max(list_length(partitions), 1));
	foreach(lc, partitions)
	{
		ScKafkaPartitionInfo *p = lfirst(lc);

		parts[n] = p->source;
		targets[n] = p->high_watermark;
		n++;
	}
	nodes = sc_placement_stops(cube_id, n, parts, targets, placed);
	if (nodes != NULL)
		ereport(NOTICE,
				(errmsg("streamcube_wait() waits for the share of cube \"%s\" that this server consumes", name),
				 errdetail("Replica sets placed on node%s %s consume the rest there (streamcube.placements).",
						   strchr(nodes, ',') ? "s" : "", nodes),
				 errhint("Call streamcube_wait() on each node too.")));
	for (int i = 0; i < n; i++)
	{
		partd[i] = Int32GetDatum(parts[i]);
		targetd[i] = Int64GetDatum(targets[i]);
	}
	partarray = PointerGetDatum(construct_array(partd, n, INT4OID, 4, true, TYPALIGN_INT));
	targetarray = PointerGetDatum(construct_array(targetd, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));

	/* a node's copy: the partitions no set consumes here are its home server's */
	unassigned = cube->home != NULL ? NULL : sc_wait_unassigned(cube, partarray);
	if (cube->home != NULL)
		n = sc_placement_own_partitions(cube_id, n, parts, targets, &partarray, &targetarray);
	if (unassigned != NULL)
	{
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("partitions %s%s are not consumed by cube \"%s\"", unassigned,
						cube->topics_kind == SC_TOPICS_ONE ? psprintf(" of topic \"%s\"", cube->topic) : "",
						name),
				 errdetail("No replica set is assigned them (the cube's option new_partitions is \"ignore\", or a reassignment left them out); streamcube.consumers lists them as unassigned_partitions."),
				 errhint("streamcube_wait() returns false for this cube until they are assigned; assign them with streamcube_reassign().")));
		SPI_finish();
		PG_RETURN_BOOL(false);
	}

	/*
	 * A cube with a stop point is done when every partition is at its
	 * stop offset: its receivers then idle, and it pauses by itself.
	 */
	stops = sc_stops_targets(cube_id, partarray);

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   timeout ? sc_interval_usecs(timeout, "timeout") / 1000 : 30000);
	for (;;)
	{
		if (sc_wait_paused_warn(cube, name))
			break;
		if (stops != (Datum) 0)
			done = sc_positions_short_of(cube_id, partarray, stops) == 0;
		else
			done = sc_positions_short_of(cube_id, partarray, targetarray) == 0 &&
				sc_wait_receivers_done(cube_id, n, parts, targets, placed);
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

/*
 * What a cube option that cannot change in place says when asked to.  The
 * arguments of streamcube_create_cube() are listed too: a user trying them
 * here learns why, instead of "unknown option".
 */
static const struct
{
	const char *name;
	const char *why;
	const char *hint;
}			sc_fixed_options[] = {
	{"topic", "its positions are offsets of its topic; another topic's offsets mean other messages",
	"To read other topics beside it, give a list with its topic first: '{\"topic\": [\"<its topic>\", \"<another>\"]}'; or create a new cube for the other topic."},
	{"format", "the format decides how every message of the topic becomes a row; messages consumed and messages to come would be read differently",
	"Create a new cube over the same topic with the other format; streamcube_set_positions() can start it where this one is."},
	{"time_column", "the table is partitioned by the time column and every window was cut by it",
	"Create a new cube with the other time column."},
	{"segment_interval", "every window of the table (active and sealed) was cut at this size, and sealing and retention count in windows",
	"Create a new cube with the other window size."},
	{"start", "it only decides where a new cube starts reading",
	"Move the positions of a paused cube with streamcube_set_positions()."},
	{"end", "it only gives a new cube its stop point",
	"Give a cube a stop point with streamcube_resume(cube, until => '\"latest\"')."},
	{"replica_sets", "it only deals the partitions at creation; the assignment lives in streamcube.assignments",
	"Move partitions between replica sets with streamcube_reassign()."},
	{"home", "it says the cube is a node's copy, whose other partitions its home server consumes",
	"Make a new cube; streamcube_adopt sets it on the cubes it makes on a node."},
};

/*
 * Can the cube's topics change as given: a cube of several topics takes a
 * new list or pattern; a cube of one topic a list (it becomes a cube of a
 * list, below), not another name.
 */
static bool
sc_alter_topics_allowed(int32 cube_id, Jsonb *given, bool *converts)
{
	char	   *topic;

	*converts = false;
	sc_catalog_exec("SELECT c.topic, jsonb_typeof($2 -> 'topic') FROM streamcube.cubes c WHERE c.cube_id = $1",
					2, (Oid[]) {INT4OID, JSONBOID}, (Datum[]) {Int32GetDatum(cube_id), JsonbPGetDatum(given)},
					NULL, true, 1);
	if (SPI_processed == 0)
		return false;
	topic = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (topic != NULL && (topic[0] == '[' || topic[0] == '{'))
		return true;
	topic = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	*converts = topic != NULL && strcmp(topic, "array") == 0;
	return *converts;
}

/*
 * A cube of one topic becomes a cube of a topic list, its topic the list's
 * first (topic 0, as it always was: nothing of its catalog changes).  In
 * memory first (sc_alter_topics_prepare), for the list's change to work
 * on; its table last (sc_alter_topics_convert), once everything else was
 * checked and Kafka asked: the table gains the column _topic, filled with
 * that topic for every row it holds without rewriting one (PostgreSQL
 * keeps the value as the column's missing value), and the view
 * <cube>_sealed shows it.  The caller took the cube's seal lock before its
 * row, as a seal does, so that no seal holds the table meanwhile.
 */
static void
sc_alter_topics_prepare(ScCube *cube, const char *name)
{
	if (!sc_catalog_has_column("cube_topics", "topic"))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cube \"%s\" cannot read several topics before streamcube's catalog is updated", name),
				 errhint("ALTER EXTENSION streamcube UPDATE, then call streamcube_alter_cube() again.")));
	if (get_attnum(cube->relid, SC_TOPIC_COLUMN) != InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_COLUMN),
				 errmsg("cube \"%s\" has a column " SC_TOPIC_COLUMN " of its own", name),
				 errdetail("A cube of several topics fills " SC_TOPIC_COLUMN " with each row's topic."),
				 errhint("Rename the column first: ALTER TABLE %s RENAME COLUMN " SC_TOPIC_COLUMN " TO ...",
						 cube->qualified)));
	cube->topics_kind = SC_TOPICS_LIST;
	cube->topic = MemoryContextStrdup(cube->mcxt, psprintf("[%s]", sc_json_text(cube->topic)));
}

typedef struct ScAddTopicColumn
{
	const ScCube *cube;
	const char *topic;			/* its one topic until now */
} ScAddTopicColumn;

/* Under lock_timeout, as the owner (sc_seal_with_view_lock_retry). */
static void
sc_add_topic_column_fn(void *arg)
{
	ScAddTopicColumn *add = arg;

	/* the view first, then the table, as a seal's swap takes them */
	sc_seal_lock_views_now(add->cube, true, NULL, 0);
	sc_seal_exec(psprintf("ALTER TABLE %s ADD COLUMN " SC_TOPIC_COLUMN " text NOT NULL DEFAULT %s",
						  add->cube->qualified, quote_literal_cstr(add->topic)));
	sc_seal_exec(psprintf("ALTER TABLE %s ALTER COLUMN " SC_TOPIC_COLUMN " DROP DEFAULT",
						  add->cube->qualified));
}

static void
sc_alter_topics_convert(ScCube *cube, const char *topic)
{
	ScAddTopicColumn add = {cube, topic};

	sc_seal_with_view_lock_retry(cube, sc_add_topic_column_fn, &add, "add the column " SC_TOPIC_COLUMN);
	CommandCounterIncrement();
	/* <cube>_sealed, once there is one, lists its columns: _topic too */
	sc_catalog_exec("SELECT 1 FROM streamcube.cubes WHERE cube_id = $1 AND sealed_view IS NOT NULL",
					1, (Oid[]) {INT4OID}, (Datum[]) {Int32GetDatum(cube->cube_id)}, NULL, true, 1);
	if (SPI_processed > 0)
		sc_seal_refresh_view(cube, DT_NOBEGIN, NULL, 0);
	ereport(NOTICE,
			(errmsg("cube %s reads a list of topics now, its topic first; its table has the column " SC_TOPIC_COLUMN,
					cube->qualified)));
}

/*
 * Option "topic" of streamcube_alter_cube: a cube of several topics takes
 * its new list, or its new pattern (topics.c); a cube of one topic a list,
 * and becomes a cube of a list (above).  Topics taken out keep
 * their positions and rows; their partitions leave their replica sets as
 * in a reassignment, and those of topics added or put back join the
 * cube's sets (reassign_topics.c); journalled in streamcube.config_log and
 * streamcube.reassign_log.  The caller holds the cube's row.
 */
static void
sc_alter_topics(int32 cube_id, Jsonb *given, const char *name)
{
	char	   *spec;
	char	   *old_spec;
	char	   *one_topic;
	List	   *all = NIL;
	List	   *taken_out;
	List	   *put_in;
	List	   *kafka;
	ScKafkaConnInfo *conn;
	ScCube	   *cube;

	/* which topics of a cluster a cube reads is an admin's call, as at creation */
	sc_require_admin("change the topics of cubes");
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the topics of cube \"%s\" can change in a READ COMMITTED transaction only", name),
				 errdetail("A receiver may have added a topic its pattern matches since the transaction's snapshot."),
				 errhint("Call streamcube_alter_cube() outside a REPEATABLE READ or SERIALIZABLE transaction.")));

	/*
	 * The cube's topics as they are now that its row is held: a receiver
	 * that added one (its pattern) committed before the row was ours.
	 */
	PushActiveSnapshot(GetTransactionSnapshot());
	cube = sc_cube_load(cube_id, false);
	old_spec = pstrdup(cube->topic);
	conn = sc_cluster_conninfo(cube->cluster);
	one_topic = cube->topics_kind == SC_TOPICS_ONE ? pstrdup(cube->topic) : NULL;
	if (one_topic != NULL)
		sc_alter_topics_prepare(cube, name);
	sc_catalog_exec("SELECT CASE jsonb_typeof($1 -> 'topic') WHEN 'string' THEN $1 ->> 'topic' "
					"ELSE ($1 -> 'topic')::text END", 1, (Oid[]) {JSONBOID},
					(Datum[]) {JsonbPGetDatum(given)}, NULL, true, 1);
	spec = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (spec == NULL || strcmp(spec, "null") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("topic of cube \"%s\" cannot be removed", name),
				 errhint("Give the cube's new topic list, or its new pattern.")));
	if (cube->topics_kind == SC_TOPICS_PATTERN)
		all = sc_kafka_describe_topics(conn, NULL, false, sc_kafka_timeout_ms, NULL, NULL);
	sc_topics_change(cube, spec, name, all, &taken_out, &put_in);
	if (strcmp(old_spec, cube->topic) == 0 && taken_out == NIL && put_in == NIL)
	{
		PopActiveSnapshot();
		return;
	}
	sc_cube_row_set_topic(cube->cube_id, cube->topic);

	/* Every topic it reads must be there: added ones are read from their start. */
	kafka = sc_kafka_describe_topics(conn, &cube->topics, true, sc_kafka_timeout_ms, NULL, NULL);
	(void) sc_reassign_topics(cube, kafka);
	if (one_topic != NULL)
		sc_alter_topics_convert(cube, one_topic);
	{
		Jsonb	   *was = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(
			psprintf("{\"topic\": %s}", sc_json_text(old_spec)))));
		Jsonb	   *is = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(
			psprintf("{\"topic\": %s}", sc_json_text(cube->topic)))));

		sc_config_journal(NULL, cube->cube_id, cube->relid, JsonbPGetDatum(was), JsonbPGetDatum(is));
	}
	ereport(NOTICE,
			(errmsg("cube %s: topics taken out: %d; added or put back: %d", cube->qualified,
					list_length(taken_out), list_length(put_in)),
			 errdetail("Taken out: %s. Added or put back: %s.", sc_names_text(taken_out), sc_names_text(put_in)),
			 errhint("streamcube.topics shows the cube's topics, streamcube.reassign_log their partitions' moves.")));
	PopActiveSnapshot();
}

/*
 * streamcube_alter_cube(cube text, options jsonb) RETURNS jsonb
 *
 * Changes the options that can change while the cube runs, in the
 * caller's transaction: each key of options sets that option, a key set
 * to JSON null removes it (its default applies again).  The merged options
 * are checked as at creation; the change is journalled in
 * streamcube.config_log and the receivers take it before their next batch.
 * Returns the cube's options after the change.
 */
Datum
sc_alter_cube(PG_FUNCTION_ARGS)
{
	char	   *name = sc_text_arg(fcinfo, 0, "cube name");
	Jsonb	   *given;
	Oid			relid,
				owner;
	int32		cube_id;
	ScCube	   *cube;
	Oid			types[2] = {INT4OID, JSONBOID};
	Datum		values[2];
	Datum		old_options,
				new_options;
	bool		isnull;
	bool		changed;
	bool		topic_given = false;
	bool		several;
	bool		converts;
	ScPrivilegeSave save;
	MemoryContext caller = CurrentMemoryContext;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("options of streamcube_alter_cube() must not be NULL"),
				 errhint("Pass a JSON object of the options to change, such as '{\"grace\": \"10 minutes\"}'.")));
	given = PG_GETARG_JSONB_P(1);

	SPI_connect();
	cube_id = sc_cube_for_action(name, "alter", &relid, &owner);
	values[0] = Int32GetDatum(cube_id);
	values[1] = JsonbPGetDatum(given);

	if (SPI_execute_with_args("SELECT jsonb_typeof($2)", 2, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the options");
	if (strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), "object") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("options of streamcube_alter_cube() must be a JSON object"),
				 errhint("Pass the options to change, such as '{\"grace\": \"10 minutes\"}'; a key set to null removes that option.")));

	/* Options that cannot change in place, with the reason. */
	several = sc_alter_topics_allowed(cube_id, given, &converts);
	if (SPI_execute_with_args("SELECT key FROM jsonb_object_keys($2) AS key ORDER BY key",
							  2, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the options");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *key = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);

		/* the topics of a cube of several topics change (below) */
		if (strcmp(key, "topic") == 0 && several)
		{
			topic_given = true;
			continue;
		}
		for (int f = 0; f < lengthof(sc_fixed_options); f++)
			if (strcmp(key, sc_fixed_options[f].name) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("\"%s\" of cube \"%s\" cannot be changed: %s",
								key, name, sc_fixed_options[f].why),
						 errhint("%s", sc_fixed_options[f].hint)));
	}

	/*
	 * The cube's row first, as every other writer of it (a reassignment, a
	 * pause) takes it: the options merged under the lock.
	 */
	/*
	 * A cube of one topic that takes a list gains a column (ALTER TABLE):
	 * its seal lock first, as a seal takes it before the row, so that no
	 * seal holds the table while we wait for it holding the row.
	 */
	if (converts &&
		SPI_execute_with_args("SELECT pg_catalog.pg_advisory_xact_lock($1, $2)", 2,
							  (Oid[]) {INT4OID, INT4OID},
							  (Datum[]) {Int32GetDatum(SC_LOCK_CLASS_SEAL), Int32GetDatum(cube_id)},
							  NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not take the seal lock");
	sc_catalog_enter(&save);
	if (SPI_execute_with_args("SELECT options, (options || ($2 - 'topic')) - "
							  "  ARRAY(SELECT key FROM jsonb_each($2) WHERE jsonb_typeof(value) = 'null') "
							  "FROM streamcube.cubes WHERE cube_id = $1 FOR NO KEY UPDATE",
							  2, types, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.cubes");
	sc_catalog_leave(&save);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("cube \"%s\" was dropped meanwhile", name)));
	MemoryContextSwitchTo(caller);
	old_options = datumCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull),
							false, -1);
	new_options = datumCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull),
							false, -1);

	/* Checked as at creation, against the table as it is now. */
	cube = sc_cube_load(cube_id, false);
	{
		char	   *old_group = cube->progress_group;

		sc_cube_parse_options(cube, DatumGetJsonbP(new_options), true);
		sc_cube_check_progress_group(old_group, cube->progress_group);
	}
	new_options = sc_cube_pin_document(cube, new_options);
	if (topic_given)
		sc_alter_topics(cube_id, given, name);

	values[1] = new_options;
	{
		Datum		pair[2] = {old_options, new_options};
		Oid			ptypes[2] = {JSONBOID, JSONBOID};

		if (SPI_execute_with_args("SELECT $1 IS DISTINCT FROM $2", 2, ptypes, pair, NULL, true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not compare the options");
		changed = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	if (changed)
	{
		sc_cube_row_set_options(cube_id, new_options);
		sc_config_journal(NULL, cube_id, relid, old_options, new_options);
	}
	/*
	 * new_options may live in SPI's memory (each SPI call leaves SPI's
	 * context current), which SPI_finish frees: into the caller's first,
	 * and read as a Jsonb only there: a value taken from a tuple has a
	 * short header, and DatumGetJsonbP copies it into the current context.
	 */
	new_options = SPI_datumTransfer(new_options, false, -1);
	SPI_finish();
	PG_RETURN_JSONB_P(DatumGetJsonbP(new_options));
}
