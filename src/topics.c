/*-------------------------------------------------------------------------
 *
 * topics.c
 *		A cube's topics: the topic argument of streamcube_create_cube()
 *		parsed, streamcube.cube_topics read and written (its one writer),
 *		topics a pattern matches, and partitions named for users.
 *
 * A cube reads one topic ('events'), a list ('["orders.eu", "orders.us"]')
 * or the topics a pattern matches ('{"pattern": "orders\\..*"}').  Each
 * topic has a number in the cube, its place in streamcube.cube_topics,
 * never reused; the catalog keys a partition of topic n as the source
 * partition n << 20 | partition (kafka.h).  cubes.topic keeps what the
 * cube was created with.
 *
 * A cube of several topics (a list or a pattern, even of one topic) has a
 * column _topic before _partition, filled with each row's topic, so that
 * (_topic, _partition, _offset) names a message; its partitions are named
 * "topic:partition" where a user gives or reads one.  A cube of one topic
 * is what it always was: no _topic, partitions named by their numbers.
 *
 * A pattern is a PostgreSQL regular expression (ARE), matched against the
 * whole topic name: '{"pattern": "orders\\..*"}' matches orders.eu, not
 * old.orders.eu.  Topics whose names start with "__" (Kafka's own) never
 * match.  A receiver of the cube looks for new matching topics every
 * streamcube.metadata_interval and adds them (sc_topics_add), from their
 * first offset; the first topics are those that match at creation, of
 * which there must be one.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "cube.h"
#include "executor/spi.h"
#include "kafka.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"

/* Kafka's rule: 1 to 249 ASCII letters, digits, '.', '_' and '-'; not "." or "..". */
static bool
sc_topic_name_valid(const char *topic)
{
	size_t		len = strlen(topic);

	if (len == 0 || len > 249 || strcmp(topic, ".") == 0 || strcmp(topic, "..") == 0)
		return false;
	return strspn(topic, SC_KAFKA_TOPIC_CHARS) == len;
}

static void
sc_topic_check_name(const char *topic, const char *name)
{
	if (!sc_topic_name_valid(topic))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"%s\" is not a valid Kafka topic name (topic of cube \"%s\")", topic, name),
				 errhint("A topic name is 1 to 249 ASCII letters, digits, '.', '_' and '-'.")));
}

/* The topic list (by number) of names, in the current memory context. */
static void
sc_topics_set_list(ScCube *cube, List *names)
{
	ListCell   *lc;

	cube->topics.n = list_length(names);
	cube->topics.names = palloc(sizeof(char *) * Max(cube->topics.n, 1));
	cube->topics.removed = NULL;
	foreach(lc, names)
		cube->topics.names[foreach_current_index(lc)] = pstrdup(lfirst(lc));
}

/* The kind of a stored or given topic argument, by its first character. */
static ScTopicsKind
sc_topics_kind_of(const char *spec)
{
	return spec[0] == '[' ? SC_TOPICS_LIST : spec[0] == '{' ? SC_TOPICS_PATTERN : SC_TOPICS_ONE;
}

/* '{"pattern": "..."}': its regular expression, or NULL for another object. */
static char *
sc_topics_pattern_of(Jsonb *spec)
{
	JsonbValue	key = {.type = jbvString, .val.string = {strlen("pattern"), "pattern"}};
	JsonbValue *v;

	if (!JB_ROOT_IS_OBJECT(spec) || JB_ROOT_COUNT(spec) != 1)
		return NULL;
	v = findJsonbValueFromContainer(&spec->root, JB_FOBJECT, &key);
	if (v == NULL || v->type != jbvString)
		return NULL;
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* The whole-name match of a pattern, as PostgreSQL's ~ reads it. */
static char *
sc_topics_anchored(const char *pattern)
{
	return psprintf("^(?:%s)$", pattern);
}

/* Does the cube's pattern match topic?  Never Kafka's own topics. */
bool
sc_topics_matches(const ScCube *cube, const char *topic)
{
	if (cube->topic_pattern == NULL || strncmp(topic, "__", 2) == 0)
		return false;
	return DatumGetBool(DirectFunctionCall2Coll(textregexeq, C_COLLATION_OID,
												CStringGetTextDatum(topic),
												CStringGetTextDatum(sc_topics_anchored(cube->topic_pattern))));
}

/* A pattern that compiles, and says so clearly when it does not. */
static void
sc_topics_check_pattern(const char *pattern, const char *name)
{
	MemoryContext cxt = CurrentMemoryContext;

	if (pattern[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the topic pattern of cube \"%s\" must not be empty", name),
				 errhint("For example '{\"pattern\": \"orders\\\\..*\"}'.")));
	PG_TRY();
	{
		(void) DirectFunctionCall2Coll(textregexeq, C_COLLATION_OID, CStringGetTextDatum(""),
									   CStringGetTextDatum(sc_topics_anchored(pattern)));
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_REGULAR_EXPRESSION),
				 errmsg("topic pattern \"%s\" of cube \"%s\" is not a valid regular expression: %s",
						pattern, name, edata->message),
				 errhint("The pattern is a PostgreSQL regular expression matched against whole topic names, "
						 "such as \"orders\\\\..*\".")));
	}
	PG_END_TRY();
}

/* A topic list: a JSON array of distinct, valid topic names, at least one. */
static List *
sc_topics_parse_list(Jsonb *spec, const char *name)
{
	JsonbIterator *it = JsonbIteratorInit(&spec->root);
	JsonbValue	v;
	JsonbIteratorToken tok;
	List	   *names = NIL;
	const char *hint = "For example '[\"orders.eu\", \"orders.us\"]'.";

	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *topic;

		if (tok != WJB_ELEM)
			continue;
		if (v.type != jbvString)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the topic list of cube \"%s\" must hold topic names only", name),
					 errhint("%s", hint)));
		topic = pnstrdup(v.val.string.val, v.val.string.len);
		sc_topic_check_name(topic, name);
		if (list_member(names, makeString(topic)))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("topic \"%s\" is named twice in the topic list of cube \"%s\"", topic, name),
					 errhint("Name each topic once.")));
		names = lappend(names, makeString(topic));
	}
	if (names == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the topic list of cube \"%s\" is empty", name),
				 errhint("%s", hint)));
	if (list_length(names) > SC_SOURCE_MAX_TOPICS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("cube \"%s\" names %d topics; a cube reads at most %d",
						name, list_length(names), SC_SOURCE_MAX_TOPICS),
				 errhint("Use fewer topics, or several cubes.")));
	return names;
}

/* A list or a pattern as JSON, or a clear error. */
static Jsonb *
sc_topics_json(const char *spec, const char *name)
{
	MemoryContext cxt = CurrentMemoryContext;
	Jsonb	   *volatile json = NULL;

	PG_TRY();
	{
		json = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(spec)));
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("topic of cube \"%s\" is neither a topic name nor valid JSON: %s", name, edata->message),
				 errhint("Give a topic name, a list such as '[\"orders.eu\", \"orders.us\"]' "
						 "or a pattern such as '{\"pattern\": \"orders\\\\..*\"}'.")));
	}
	PG_END_TRY();
	return json;
}

/*
 * The topic argument of streamcube_create_cube(), checked: a topic name, a
 * JSON list of them or {"pattern": regex}.  Sets the cube's topic (as
 * stored), its kind, its pattern, and for a name or a list its topics; a
 * pattern's are those sc_topics_match_kafka finds.  name: the cube's.
 */
void
sc_topics_parse(ScCube *cube, const char *spec, const char *name)
{
	Jsonb	   *json = NULL;
	List	   *names = NIL;

	cube->topics_kind = sc_topics_kind_of(spec);
	cube->topic_pattern = NULL;
	if (cube->topics_kind != SC_TOPICS_ONE)
		json = sc_topics_json(spec, name);
	switch (cube->topics_kind)
	{
		case SC_TOPICS_ONE:
			sc_topic_check_name(spec, name);
			names = list_make1(makeString(pstrdup(spec)));
			cube->topic = pstrdup(spec);
			break;
		case SC_TOPICS_LIST:
			names = sc_topics_parse_list(json, name);
			cube->topic = JsonbToCString(NULL, &json->root, VARSIZE(json));
			break;
		case SC_TOPICS_PATTERN:
			cube->topic_pattern = sc_topics_pattern_of(json);
			if (cube->topic_pattern == NULL)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("topic of cube \"%s\" is a JSON object, but not {\"pattern\": \"...\"}", name),
						 errhint("For example '{\"pattern\": \"orders\\\\..*\"}'.")));
			sc_topics_check_pattern(cube->topic_pattern, name);
			cube->topic = JsonbToCString(NULL, &json->root, VARSIZE(json));
			break;
	}
	{
		List	   *strings = NIL;
		ListCell   *lc;

		foreach(lc, names)
			strings = lappend(strings, strVal(lfirst(lc)));
		sc_topics_set_list(cube, strings);
	}
}

/*
 * The topics of a pattern cube that Kafka has now (kafka: the cluster's
 * ScKafkaPartitionInfo), by name, once each, that are not yet the cube's.
 */
List *
sc_topics_match_kafka(const ScCube *cube, List *kafka)
{
	List	   *found = NIL;
	ListCell   *lc;

	foreach(lc, kafka)
	{
		const char *topic = ((ScKafkaPartitionInfo *) lfirst(lc))->topic;
		bool		known = false;

		for (int t = 0; t < cube->topics.n && !known; t++)
			known = strcmp(cube->topics.names[t], topic) == 0;
		if (!known && !list_member(found, makeString((char *) topic)) && sc_topics_matches(cube, topic))
			found = lappend(found, makeString(pstrdup(topic)));
	}
	return found;
}

/*
 * The cube's topics once its row is read (cube->topic set), in its memory
 * context; inside SPI.  The caller's memory context is current after (an
 * SPI call leaves SPI's own current).
 */
void
sc_topics_load(ScCube *cube)
{
	Oid			t = INT4OID;
	Datum		v = Int32GetDatum(cube->cube_id);
	List	   *names = NIL;
	MemoryContext old = CurrentMemoryContext;

	static SPIPlanPtr plan = NULL;

	cube->topics_kind = sc_topics_kind_of(cube->topic);
	cube->topic_pattern = NULL;
	if (cube->topics_kind == SC_TOPICS_ONE)
	{
		/* topic 0, by construction (and after the update from 0.3.0) */
		sc_topics_set_list(cube, list_make1(cube->topic));
		return;
	}
	if (cube->topics_kind == SC_TOPICS_PATTERN)
		cube->topic_pattern = sc_topics_pattern_of(DatumGetJsonbP(DirectFunctionCall1(jsonb_in,
																				   CStringGetDatum(cube->topic))));
	sc_catalog_exec_kept(&plan, "SELECT topic, removed_at IS NOT NULL FROM streamcube.cube_topics "
						 "WHERE cube_id = $1 ORDER BY topic_no", 1, &t, &v, NULL, true, 0);
	MemoryContextSwitchTo(cube->mcxt);
	for (uint64 i = 0; i < SPI_processed; i++)
		names = lappend(names, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
	sc_topics_set_list(cube, names);
	cube->topics.removed = palloc0(sizeof(bool) * Max(SPI_processed, 1));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		cube->topics.removed[i] = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[i],
															 SPI_tuptable->tupdesc, 2, &isnull));
	}
	MemoryContextSwitchTo(old);
}

/*
 * Does the catalog number a cube's topics (0.4.0 on)?  Until ALTER
 * EXTENSION streamcube UPDATE a cube reads one topic, as 0.3.0 did.
 */
static bool
sc_topics_catalog_current(void)
{
	return OidIsValid(get_relname_relid("cube_topics", get_namespace_oid(SC_SCHEMA, false)));
}

/*
 * Write the cube's topics numbered from first on (at creation: all, from
 * 0), journalled by how they came (create, pattern).  Inside SPI.  A
 * catalog not yet updated takes a cube of one topic only, and holds its
 * topic in the cube's row alone.
 */
void
sc_topics_insert(const ScCube *cube, int first, const char *added_by)
{
	if (!sc_topics_catalog_current())
	{
		if (cube->topics_kind != SC_TOPICS_ONE)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cube %s cannot read several topics before the extension is updated", cube->qualified),
					 errhint("Run ALTER EXTENSION streamcube UPDATE first.")));
		return;
	}
	for (int t = first; t < cube->topics.n; t++)
		sc_catalog_exec("INSERT INTO streamcube.cube_topics (cube_id, topic_no, topic, added_by) "
						"VALUES ($1, $2, $3, $4)", 4,
						(Oid[]) {INT4OID, INT4OID, TEXTOID, TEXTOID},
						(Datum[]) {Int32GetDatum(cube->cube_id), Int32GetDatum(t),
						CStringGetTextDatum(cube->topics.names[t]), CStringGetTextDatum(added_by)},
						NULL, false, 0);
}

/*
 * Add topics a pattern matched to the cube (in the memory context of
 * cube): numbered after its others, written to streamcube.cube_topics.
 * The caller holds the cube's row and bumps its config_version.
 */
void
sc_topics_add(ScCube *cube, List *names)
{
	int			first = cube->topics.n;
	MemoryContext old = MemoryContextSwitchTo(cube->mcxt);
	char	  **all;
	bool	   *removed;
	ListCell   *lc;

	if (first + list_length(names) > SC_SOURCE_MAX_TOPICS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("the pattern of cube %s matches more than %d topics", cube->qualified,
						SC_SOURCE_MAX_TOPICS),
				 errhint("Use a narrower pattern, or several cubes.")));
	all = palloc(sizeof(char *) * (first + list_length(names)));
	removed = palloc0(sizeof(bool) * (first + list_length(names)));
	for (int t = 0; t < first; t++)
	{
		all[t] = cube->topics.names[t];
		removed[t] = sc_topic_removed(&cube->topics, t);
	}
	foreach(lc, names)
		all[first + foreach_current_index(lc)] = pstrdup(strVal(lfirst(lc)));
	cube->topics.names = all;
	cube->topics.removed = removed;
	cube->topics.n = first + list_length(names);
	MemoryContextSwitchTo(old);
	sc_topics_insert(cube, first, "pattern");
}

/*
 * _topic, the column a cube of several topics has: filled with each row's
 * topic (after option "fields" is parsed, which may not name it).
 */
void
sc_topics_mark_column(ScCube *cube)
{
	if (cube->topics_kind == SC_TOPICS_ONE)
		return;
	for (int c = 0; c < cube->ncolumns; c++)
		if (strcmp(cube->columns[c].name, SC_TOPIC_COLUMN) == 0 && cube->columns[c].meta == SC_META_NONE)
		{
			cube->columns[c].meta = SC_META_TOPIC;
			cube->columns[c].pathlen = 0;
			cube->nmeta++;
		}
}

/* The source partitions among sources (int) of topics the cube reads now. */
List *
sc_topics_live(const ScCube *cube, List *sources)
{
	List	   *live = NIL;
	ListCell   *lc;

	foreach(lc, sources)
	{
		int			t = sc_source_topic_no(lfirst_int(lc));

		/* a topic number the cube does not know (yet) is none it reads */
		if (t >= 0 && t < cube->topics.n && !sc_topic_removed(&cube->topics, t))
			live = lappend_int(live, lfirst_int(lc));
	}
	return live;
}

/* A partition as users name it: "3", or "orders.eu:3" in a cube of several topics. */
char *
sc_partition_name(const ScCube *cube, int32 source)
{
	int			t = sc_source_topic_no(source);

	if (cube->topics_kind == SC_TOPICS_ONE && t == 0)
		return psprintf("%d", source);
	return psprintf("%s:%d", t >= 0 && t < cube->topics.n ? cube->topics.names[t] : "?",
					sc_source_kafka_partition(source));
}

/*
 * A partition a user named (sc_partition_name's form) as the source
 * partition, or -1 when text names none of the cube's: a number in a cube
 * of one topic, "topic:number" in any cube.  *error says what is wrong.
 */
int32
sc_partition_parse(const ScCube *cube, const char *text, const char **error)
{
	const char *colon = strrchr(text, ':');
	const char *number = colon ? colon + 1 : text;
	int			topic_no = 0;

	*error = NULL;
	if (number[0] == '\0' || strspn(number, "0123456789") != strlen(number) || strlen(number) > 7 ||
		atoi(number) >= SC_SOURCE_MAX_PARTITIONS)
	{
		*error = "a partition is a non-negative integer";
		return -1;
	}
	if (colon == NULL)
	{
		if (cube->topics_kind != SC_TOPICS_ONE)
		{
			*error = "a cube of several topics names a partition as \"topic:partition\"";
			return -1;
		}
		return atoi(number);
	}
	for (topic_no = 0; topic_no < cube->topics.n; topic_no++)
		if (strlen(cube->topics.names[topic_no]) == (size_t) (colon - text) &&
			strncmp(cube->topics.names[topic_no], text, colon - text) == 0)
		{
			if (sc_topic_removed(&cube->topics, topic_no))
			{
				*error = "the topic was taken out of the cube (streamcube.topics shows when)";
				return -1;
			}
			return sc_source_partition(topic_no, atoi(number));
		}
	*error = "the cube reads no such topic (streamcube.topics lists them)";
	return -1;
}

/*
 * One topic of the cube, by name, as a change leaves it (wanted or not):
 * taken out, put back, or new (numbered after the others), written to
 * streamcube.cube_topics.  names and removed: the cube's topics by number
 * as they become (String, Integer).
 */
static void
sc_topics_set_state(ScCube *cube, const char *topic, bool wanted, List **names, List **removed,
					List **taken_out, List **put_in)
{
	ListCell   *lc;
	ListCell   *rc;

	forboth(lc, *names, rc, *removed)
	{
		int			t = foreach_current_index(lc);
		bool		was_in;

		if (strcmp(strVal(lfirst(lc)), topic) != 0)
			continue;
		was_in = !intVal(lfirst(rc));
		if (was_in == wanted)
			return;
		sc_catalog_exec(wanted
						? "UPDATE streamcube.cube_topics SET removed_at = NULL WHERE cube_id = $1 AND topic_no = $2"
						: "UPDATE streamcube.cube_topics SET removed_at = now() WHERE cube_id = $1 AND topic_no = $2",
						2, (Oid[]) {INT4OID, INT4OID},
						(Datum[]) {Int32GetDatum(cube->cube_id), Int32GetDatum(t)}, NULL, false, 0);
		intVal(lfirst(rc)) = !wanted;
		if (wanted)
			*put_in = lappend(*put_in, makeString(pstrdup(topic)));
		else
			*taken_out = lappend(*taken_out, makeString(pstrdup(topic)));
		return;
	}
	if (!wanted)
		return;
	if (list_length(*names) >= SC_SOURCE_MAX_TOPICS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("cube %s would read more than %d topics", cube->qualified, SC_SOURCE_MAX_TOPICS),
				 errhint("Use fewer topics, or several cubes.")));
	sc_catalog_exec("INSERT INTO streamcube.cube_topics (cube_id, topic_no, topic, added_by) "
					"VALUES ($1, $2, $3, 'alter')", 3,
					(Oid[]) {INT4OID, INT4OID, TEXTOID},
					(Datum[]) {Int32GetDatum(cube->cube_id), Int32GetDatum(list_length(*names)),
					CStringGetTextDatum(topic)}, NULL, false, 0);
	*names = lappend(*names, makeString(pstrdup(topic)));
	*removed = lappend(*removed, makeInteger(0));
	*put_in = lappend(*put_in, makeString(pstrdup(topic)));
}

/*
 * streamcube_alter_cube(cube, '{"topic": ...}') of a cube of several
 * topics: a new list for a cube made with a list, a new pattern for one
 * made with a pattern (kafka: the cluster's topics now, which it may
 * match).  A topic no longer named (or matched) is taken out: it keeps its
 * number and its positions, and its partitions are assigned to no replica
 * set (the caller reassigns them); one named again is put back, where it
 * stopped; a new one is numbered after the others.  Writes
 * streamcube.cube_topics and the cube's topics in memory (its context);
 * the caller holds the cube's row, and writes its topic.  taken_out and
 * put_in: the topics' names (String).
 */
void
sc_topics_change(ScCube *cube, const char *spec, const char *name, List *kafka,
				 List **taken_out, List **put_in)
{
	ScCube		given = {0};
	List	   *names = NIL;
	List	   *removed = NIL;
	int			active = 0;
	ListCell   *lc;
	MemoryContext old;

	given.mcxt = CurrentMemoryContext;
	sc_topics_parse(&given, spec, name);
	if (given.topics_kind != cube->topics_kind)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cube %s was made with a topic %s, and takes a new one only",
						cube->qualified, cube->topics_kind == SC_TOPICS_LIST ? "list" : "pattern"),
				 errhint(cube->topics_kind == SC_TOPICS_LIST
						 ? "Give the whole new list, such as '[\"orders.eu\", \"orders.us\"]'."
						 : "Give the new pattern, such as '{\"pattern\": \"orders\\\\..*\"}'.")));
	*taken_out = *put_in = NIL;
	for (int t = 0; t < cube->topics.n; t++)
	{
		names = lappend(names, makeString(cube->topics.names[t]));
		removed = lappend(removed, makeInteger(sc_topic_removed(&cube->topics, t)));
	}

	/* The cube's topics, then the new ones, in the order given (a list) or by name. */
	for (int t = 0; t < cube->topics.n; t++)
	{
		bool		wanted = false;

		for (int g = 0; g < given.topics.n && !wanted; g++)
			wanted = strcmp(given.topics.names[g], cube->topics.names[t]) == 0;
		if (given.topics_kind == SC_TOPICS_PATTERN)
			wanted = sc_topics_matches(&given, cube->topics.names[t]);
		sc_topics_set_state(cube, cube->topics.names[t], wanted, &names, &removed, taken_out, put_in);
	}
	if (given.topics_kind == SC_TOPICS_PATTERN)
	{
		List	   *found = sc_topics_match_kafka(&given, kafka);

		foreach(lc, found)
			sc_topics_set_state(cube, strVal(lfirst(lc)), true, &names, &removed, taken_out, put_in);
	}
	else
		for (int g = 0; g < given.topics.n; g++)
			sc_topics_set_state(cube, given.topics.names[g], true, &names, &removed, taken_out, put_in);

	foreach(lc, removed)
		active += !intVal(lfirst(lc));
	if (active == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cube %s would read no topic: pattern \"%s\" matches none of Kafka cluster \"%s\"",
						cube->qualified, given.topic_pattern ? given.topic_pattern : "", cube->cluster),
				 errhint("Give a pattern that matches a topic; or drop the cube.")));

	/* The cube as it is now, in its own context. */
	old = MemoryContextSwitchTo(cube->mcxt);
	cube->topic = pstrdup(given.topic);
	cube->topic_pattern = given.topic_pattern ? pstrdup(given.topic_pattern) : NULL;
	cube->topics.n = list_length(names);
	cube->topics.names = palloc(sizeof(char *) * cube->topics.n);
	cube->topics.removed = palloc(sizeof(bool) * cube->topics.n);
	foreach(lc, names)
	{
		cube->topics.names[foreach_current_index(lc)] = pstrdup(strVal(lfirst(lc)));
		cube->topics.removed[foreach_current_index(lc)] = intVal(list_nth(removed, foreach_current_index(lc)));
	}
	MemoryContextSwitchTo(old);
}
