/*-------------------------------------------------------------------------
 *
 * format_avro.c
 *		Format avro: Avro records in Confluent's wire format (byte 0, a
 *		4-byte big-endian schema id, the datum), with the writer schemas
 *		from the cluster's schema registry; or bare records of one schema
 *		given in the cube's option "schema".
 *
 * Every message is decoded with its own writer schema (avro.c), and its
 * record's fields go to the columns by name (or by the "fields" paths into
 * nested records): a field the writer did not have is NULL, a field the
 * cube does not map is skipped.  So schemas evolve under a running cube
 * without anything to resolve: each id's plan is made once.
 *
 * Schema ids are resolved before a batch is built (sc_avro_prepare): from
 * memory, then from streamcube.schemas (written the first time the
 * registry gave a schema, so a receiver restarted while the registry is
 * down goes on for the ids it has seen), then from the registry.  What an
 * id is (its schema's text) is kept for the receiver's life; how it feeds
 * the columns (its plan) for the cube's set-up, and made again from the
 * text, without I/O, when the table changes under a batch.  A
 * registry that does not answer is nobody's fault: the batch waits (the
 * receiver keeps its messages, says why in last_error, tries again with a
 * back-off), and no message becomes a dead letter for it.  An id the
 * registry says does not exist, or a schema that cannot feed the cube,
 * makes its messages bad.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "avro.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "format.h"
#include "ingest_internal.h"
#include "registry.h"
#include "catalog/pg_type_d.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

/* What a schema id is, as the registry said: for the receiver's life. */
typedef struct ScAvroText
{
	int32		id;				/* hash key */
	char	   *type;			/* AVRO, PROTOBUF, JSON; NULL when not found */
	char	   *text;
	char	   *not_found;		/* why it is not there */
} ScAvroText;

static HTAB *sc_avro_texts = NULL;
static char *sc_avro_texts_registry = NULL; /* the registry URLs they are of */

/* One writer schema, by id: how it feeds the cube, or why it cannot. */
typedef struct ScAvroWriter
{
	int32		id;				/* hash key */
	ScAvroPlan *plan;			/* NULL when error says why it cannot */
	char	   *error;
} ScAvroWriter;

typedef struct ScAvroFormat
{
	bool		framed;			/* Confluent wire format; else bare records */
	ScAvroWriter own;			/* bare records: the cube's own schema */
	HTAB	   *writers;		/* framed: id -> ScAvroWriter */
	ScRegistryConn registry;	/* framed: the cluster's registry */
	bool		has_registry;
	MemoryContext cxt;			/* where writers live: the cube's set-up */

	/* the decoded columns: payload columns and the whole-record column */
	int			ndecoded;
	int		   *decoded_col;	/* decoded index -> cube column */
	int		   *col_decoded;	/* cube column -> decoded index, -1 */
	StringInfo *values;
	bool	   *isnull;
} ScAvroFormat;

/*
 * The classes of text (SC_AVRO_CLASS_*) a column of a type takes: a text
 * column any; json and jsonb what is JSON; other types their own class,
 * and a string (its input function decides).
 */
static int
sc_avro_column_classes(Oid type)
{
	Oid			base = getBaseType(type);
	char		category;
	bool		preferred;

	if (base == JSONOID || base == JSONBOID)
		return SC_AVRO_CLASS_JSON | SC_AVRO_CLASS_NUMBER | SC_AVRO_CLASS_BOOL;
	if (base == BYTEAOID)
		return SC_AVRO_CLASS_BYTES | SC_AVRO_CLASS_STRING;
	get_type_category_preferred(base, &category, &preferred);
	switch (category)
	{
		case TYPCATEGORY_STRING:
			return ~0;
		case TYPCATEGORY_NUMERIC:
			return SC_AVRO_CLASS_NUMBER | SC_AVRO_CLASS_STRING;
		case TYPCATEGORY_BOOLEAN:
			return SC_AVRO_CLASS_BOOL | SC_AVRO_CLASS_STRING;
		case TYPCATEGORY_DATETIME:
			return SC_AVRO_CLASS_TIME | SC_AVRO_CLASS_STRING;
		default:
			return SC_AVRO_CLASS_STRING;
	}
}

/*
 * Why a field of a schema cannot become its column (a boolean for a bigint
 * column, a record for a timestamp), or NULL when every one can.  A field
 * the schema lacks is no misfit (its column is NULL).
 */
char *
sc_avro_misfit(const ScCube *cube, const ScAvroSchema *schema)
{
	for (int c = 0; c < cube->ncolumns; c++)
	{
		ScColumn   *col = &cube->columns[c];
		int			pathlen = col->meta == SC_META_VALUE ? 0 : col->pathlen;
		char	   *type_name = NULL;
		int			classes;

		if (col->meta != SC_META_NONE && col->meta != SC_META_VALUE)
			continue;
		classes = sc_avro_path_classes(schema, col->path, pathlen, &type_name);
		if (classes > 0 && (classes & ~sc_avro_column_classes(col->type)) != 0)
		{
			StringInfoData path;

			initStringInfo(&path);
			for (int l = 0; l < pathlen; l++)
				appendStringInfo(&path, "%s%s", l > 0 ? "." : "", col->path[l]);
			return psprintf("field \"%s\" (%s) cannot become column \"%s\" (%s)",
							pathlen > 0 ? path.data : "the whole record", type_name,
							col->name, format_type_be(col->type));
		}
	}
	return NULL;
}

/*
 * The plan of a writer schema for the cube's decoded columns (names into
 * nested records, or the whole record); NULL and *error when the schema
 * cannot be read, or a field's type cannot become its column's: every
 * message of that schema is then a dead letter saying which field and
 * which column.
 */
static ScAvroPlan *
sc_avro_make_plan(ScIngest *ing, ScAvroFormat *af, const char *schema_text, char **error)
{
	ScCube	   *cube = ing->cube;
	ScAvroSchema *schema = sc_avro_parse(schema_text, error);
	char	 ***paths = palloc(sizeof(char **) * Max(1, af->ndecoded));
	int		   *pathlens = palloc(sizeof(int) * Max(1, af->ndecoded));

	if (schema == NULL)
	{
		*error = psprintf("not a valid Avro schema: %s", *error);
		return NULL;
	}
	if ((*error = sc_avro_misfit(cube, schema)) != NULL)
		return NULL;
	for (int k = 0; k < af->ndecoded; k++)
	{
		ScColumn   *col = &cube->columns[af->decoded_col[k]];

		paths[k] = col->path;
		pathlens[k] = col->meta == SC_META_VALUE ? 0 : col->pathlen;
	}
	return sc_avro_plan(schema, af->ndecoded, paths, pathlens, error);
}

static void *
sc_avro_setup(ScIngest *ing)
{
	ScCube	   *cube = ing->cube;
	ScAvroFormat *af = palloc0(sizeof(ScAvroFormat));
	HASHCTL		ctl = {.keysize = sizeof(int32), .entrysize = sizeof(ScAvroWriter),
	.hcxt = CurrentMemoryContext};

	af->cxt = CurrentMemoryContext;
	af->decoded_col = palloc(sizeof(int) * Max(cube->ncolumns, 1));
	af->col_decoded = palloc(sizeof(int) * Max(cube->ncolumns, 1));
	for (int c = 0; c < cube->ncolumns; c++)
	{
		af->col_decoded[c] = -1;
		if (cube->columns[c].meta == SC_META_NONE || cube->columns[c].meta == SC_META_VALUE)
		{
			af->col_decoded[c] = af->ndecoded;
			af->decoded_col[af->ndecoded++] = c;
		}
	}
	af->values = palloc(sizeof(StringInfo) * Max(af->ndecoded, 1));
	af->isnull = palloc(sizeof(bool) * Max(af->ndecoded, 1));
	for (int k = 0; k < af->ndecoded; k++)
		af->values[k] = makeStringInfo();

	af->framed = cube->avro_schema == NULL;
	if (!af->framed)
	{
		af->own.plan = sc_avro_make_plan(ing, af, cube->avro_schema, &af->own.error);
		if (af->own.plan == NULL)
			af->own.error = psprintf("the cube's option \"schema\": %s", af->own.error);
		return af;
	}
	af->writers = hash_create("streamcube avro writers", 16, &ctl,
							  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	af->has_registry = sc_cluster_registry(cube->cluster, &af->registry);

	/* Ids are of one registry: another one's are other schemas. */
	if (sc_avro_texts != NULL &&
		(!af->has_registry || strcmp(sc_avro_texts_registry, af->registry.urls) != 0))
	{
		hash_destroy(sc_avro_texts);
		sc_avro_texts = NULL;
		pfree(sc_avro_texts_registry);
	}
	if (sc_avro_texts == NULL && af->has_registry)
	{
		HASHCTL		tctl = {.keysize = sizeof(int32), .entrysize = sizeof(ScAvroText),
		.hcxt = TopMemoryContext};

		sc_avro_texts = hash_create("streamcube avro schemas", 16, &tctl,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		sc_avro_texts_registry = MemoryContextStrdup(TopMemoryContext, af->registry.urls);
	}
	return af;
}

/* The writer schema id of a framed message; -1 when it is not framed. */
static int32
sc_avro_id(const ScKafkaMessage *m)
{
	const unsigned char *p = (const unsigned char *) m->payload;

	if (p == NULL || m->len < 5 || p[0] != 0)
		return -1;
	return (int32) (((uint32) p[1] << 24) | ((uint32) p[2] << 16) | ((uint32) p[3] << 8) | p[4]);
}

/* Remember what an id is, for the receiver's life. */
static void
sc_avro_remember(int32 id, const char *type, const char *text, const char *not_found)
{
	ScAvroText *t = hash_search(sc_avro_texts, &id, HASH_ENTER, NULL);

	t->type = type ? MemoryContextStrdup(TopMemoryContext, type) : NULL;
	t->text = text ? MemoryContextStrdup(TopMemoryContext, text) : NULL;
	t->not_found = not_found ? MemoryContextStrdup(TopMemoryContext, not_found) : NULL;
}

/*
 * How the writer schema of id feeds the cube: planned once per set-up,
 * from what the id is (prepare made it known; nothing is asked here).
 */
static const ScAvroWriter *
sc_avro_writer(ScIngest *ing, ScAvroFormat *af, int32 id)
{
	bool		found;
	ScAvroWriter *w = hash_search(af->writers, &id, HASH_ENTER, &found);
	ScAvroText *t;
	MemoryContext old;
	char	   *error = NULL;

	if (found)
		return w;
	old = MemoryContextSwitchTo(af->cxt);
	w->plan = NULL;
	w->error = NULL;
	t = sc_avro_texts ? hash_search(sc_avro_texts, &id, HASH_FIND, NULL) : NULL;
	if (t == NULL)
		w->error = psprintf("schema id %d is not known", id);	/* not reached: prepare */
	else if (t->not_found != NULL)
		w->error = pstrdup(t->not_found);
	else if (strcmp(t->type, "AVRO") != 0)
		w->error = psprintf("schema id %d is a %s schema, not Avro", id, t->type);
	else if ((w->plan = sc_avro_make_plan(ing, af, t->text, &error)) == NULL)
		w->error = psprintf("schema id %d: %s", id, error);
	MemoryContextSwitchTo(old);
	return w;
}

/* Is every schema id of the batch known already? */
static bool
sc_avro_ready(ScIngest *ing, const ScKafkaMessage *messages, int n)
{
	ScAvroFormat *af = ing->format_state;
	int32		last = -1;

	if (!af->framed)
		return true;
	for (int i = 0; i < n; i++)
	{
		int32		id = sc_avro_id(&messages[i]);

		if (id < 0 || id == last)
			continue;
		if (sc_avro_texts == NULL || hash_search(sc_avro_texts, &id, HASH_FIND, NULL) == NULL)
			return false;
		last = id;
	}
	return true;
}

/*
 * Before a batch: every schema id its messages carry is known, from
 * memory, streamcube.schemas or the registry.  False, with *why, when the
 * registry is needed and does not answer (or refuses): the batch waits.
 * Caller is connected to SPI, in a transaction of its own (what the
 * registry gives is kept in streamcube.schemas at its COMMIT).
 */
static bool
sc_avro_prepare(ScIngest *ing, const ScKafkaMessage *messages, int n, char **why)
{
	ScAvroFormat *af = ing->format_state;

	if (!af->framed)
		return true;
	for (int i = 0; i < n; i++)
	{
		int32		id = sc_avro_id(&messages[i]);
		Oid			types[2] = {TEXTOID, INT4OID};
		Datum		args[2];
		char	   *type = NULL,
				   *text = NULL,
				   *refs = NULL;
		char		errbuf[512];
		ScRegistryStatus st;

		if (id < 0 || (sc_avro_texts != NULL && hash_search(sc_avro_texts, &id, HASH_FIND, NULL) != NULL))
			continue;
		if (!af->has_registry)
		{
			*why = psprintf("message at partition %d offset " INT64_FORMAT " carries Avro schema id %d, but Kafka cluster \"%s\" has no schema.registry.url",
							messages[i].partition, messages[i].offset, id, ing->cube->cluster);
			return false;
		}
		args[0] = CStringGetTextDatum(af->registry.urls);
		args[1] = Int32GetDatum(id);
		sc_catalog_exec("SELECT schema_type, schema FROM streamcube.schemas "
						"WHERE registry = $1 AND schema_id = $2", 2, types, args, NULL, true, 0);
		if (SPI_processed > 0)
		{
			sc_avro_remember(id, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1),
							 SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2), NULL);
			continue;
		}
		st = sc_registry_schema(&af->registry, id, &type, &text, &refs, errbuf, sizeof(errbuf));
		if (st == SC_REGISTRY_NOT_FOUND)
		{
			sc_avro_remember(id, NULL, NULL,
							 psprintf("schema id %d does not exist in the schema registry", id));
			continue;
		}
		if (st != SC_REGISTRY_OK)
		{
			*why = psprintf("schema registry of Kafka cluster \"%s\" %s (schema id %d): %s",
							ing->cube->cluster,
							st == SC_REGISTRY_UNAVAILABLE ? "does not answer" : "refuses the request",
							id, errbuf);
			return false;
		}
		{
			Oid			t[4] = {TEXTOID, INT4OID, TEXTOID, TEXTOID};
			Datum		v[4] = {args[0], args[1], CStringGetTextDatum(type), CStringGetTextDatum(text)};

			sc_catalog_exec("INSERT INTO streamcube.schemas (registry, schema_id, schema_type, schema) "
							"VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING", 4, t, v, NULL, false, 0);
		}
		sc_avro_remember(id, type, text, NULL);
	}
	return true;
}

static bool
sc_avro_line(ScIngest *ing, const ScKafkaMessage *m, StringInfo out, int64 *ts, char **error)
{
	ScCube	   *cube = ing->cube;
	ScAvroFormat *af = ing->format_state;
	const ScAvroWriter *w = &af->own;
	const char *datum = m->payload;
	size_t		len = m->len;
	int32		id = -1;
	char	   *err = NULL;

	if (af->framed)
	{
		id = sc_avro_id(m);
		if (id < 0)
		{
			*error = "message is not in the Confluent wire format (a 0 byte, then a 4-byte schema id)";
			return false;
		}
		w = sc_avro_writer(ing, af, id);
		datum += 5;
		len -= 5;
	}
	if (w->plan == NULL)
	{
		*error = w->error;
		return false;
	}
	for (int k = 0; k < af->ndecoded; k++)
		resetStringInfo(af->values[k]);
	if (!sc_avro_decode(w->plan, datum, len, af->values, af->isnull, &err))
	{
		*error = id >= 0 ? psprintf("invalid Avro record (schema id %d): %s", id, err)
			: psprintf("invalid Avro record: %s", err);
		return false;
	}

	/* The time value. */
	if (cube->columns[cube->time_index].meta == SC_META_TIMESTAMP)
	{
		if (!sc_meta_time(ing, m, ts, error))
			return false;
	}
	else
	{
		int			k = af->col_decoded[cube->time_index];

		if (k < 0 || af->isnull[k])
		{
			*error = psprintf("time column \"%s\" is null or missing%s",
							  cube->columns[cube->time_index].name,
							  id >= 0 ? psprintf(" (schema id %d)", id) : "");
			return false;
		}
		if (!sc_parse_time(cube, af->values[k]->data, ts, error))
		{
			*error = psprintf("column \"%s\": %s", cube->columns[cube->time_index].name, *error);
			return false;
		}
	}

	for (int c = 0; c < cube->ncolumns; c++)
	{
		int			k = af->col_decoded[c];

		if (c > 0)
			appendStringInfoChar(out, '\t');
		if (k < 0)
		{
			if (!sc_meta_append(ing, out, c, m, error))
				return false;
		}
		else if (af->isnull[k])
			appendBinaryStringInfo(out, "\\N", 2);
		else
			sc_line_text_bytes(out, af->values[k]->data, af->values[k]->len);
	}
	sc_line_position(out, '\t', m);
	return true;
}

const ScFormatRoutine sc_format_avro = {
	.name = "avro",
	.encoding = SC_LINE_TEXT,
	.setup = sc_avro_setup,
	.prepare = sc_avro_prepare,
	.ready = sc_avro_ready,
	.line = sc_avro_line,
	.split = sc_line_split_text,
	.datum = NULL,
};
