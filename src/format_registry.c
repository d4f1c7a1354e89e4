/*-------------------------------------------------------------------------
 *
 * format_registry.c
 *		The formats whose messages name their writer schema: avro and
 *		protobuf in Confluent's wire format (byte 0, a 4-byte big-endian
 *		schema id, for Protobuf the message-index array, then the
 *		payload), with the schemas from the cluster's schema registry; and
 *		bare Avro records of one schema given in the cube's option
 *		"schema".
 *
 * Every message is decoded with its own writer schema (avro.c,
 * protobuf.c), and its fields go to the columns by name (or by the
 * "fields" paths into nested records and messages): a field the writer
 * did not have is NULL, a field the cube does not map is skipped.  So
 * schemas evolve under a running cube without anything to resolve: each
 * id's plan (each message type's, for Protobuf) is made once.
 *
 * Schema ids are resolved before a batch is built (sc_framed_prepare):
 * from memory, then from streamcube.schemas (written the first time the
 * registry gave a schema, with the files a Protobuf schema imports, so a
 * receiver restarted while the registry is down goes on for the ids it
 * has seen), then from the registry.  What an id is (its schema's text)
 * is kept for the receiver's life; how it feeds the columns (its plans)
 * for the cube's set-up, and made again from the text, without I/O, when
 * the table changes under a batch.  A registry that does not answer is
 * nobody's fault: the batch waits (the receiver keeps its messages, says
 * why in last_error, tries again with a back-off), and no message becomes
 * a dead letter for it.  An id the registry says does not exist, or a
 * schema that cannot feed the cube, makes its messages bad.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "avro.h"
#include "protobuf.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "format.h"
#include "registry.h"
#include "catalog/pg_type_d.h"
#include "utils/hsearch.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* What a schema id is, as the registry said: for the receiver's life. */
typedef struct ScSchemaText
{
	int32		id;				/* hash key */
	char	   *type;			/* AVRO, PROTOBUF, JSON; NULL when not found */
	char	   *text;
	char	   *not_found;		/* why it is not there */
	int			nrefs;			/* Protobuf: the files it imports */
	char	  **ref_names;
	char	  **ref_texts;
} ScSchemaText;

static HTAB *sc_schema_texts = NULL;
static char *sc_schema_texts_registry = NULL; /* the registry URLs they are of */

/* A Protobuf message type of a writer schema, by its message indexes. */
typedef struct ScProtoType
{
	int			nindexes;
	int			indexes[SC_PROTO_MAX_INDEXES];
	ScProtoPlan *plan;			/* NULL when error says why it cannot */
	bool	   *plain;			/* of the plan: sc_plain_columns() */
	char	   *error;
	struct ScProtoType *next;
} ScProtoType;

/* One writer schema, by id: how it feeds the cube, or why it cannot. */
typedef struct ScWriter
{
	int32		id;				/* hash key */
	ScAvroPlan *plan;			/* avro; NULL when error says why it cannot */
	bool	   *plain;			/* of the avro plan: sc_plain_columns() */
	ScProtoSchema *proto;		/* protobuf; NULL when error says why */
	ScProtoType *types;			/* protobuf: the message types met */
	char	   *error;
} ScWriter;

typedef struct ScRegFormat
{
	ScFormat	format;			/* SC_FORMAT_AVRO or SC_FORMAT_PROTOBUF */
	const char *cluster;		/* the cube's Kafka cluster, for messages */
	const char *type;			/* the registry's schemaType of the format */
	bool		framed;			/* Confluent wire format; else bare records */
	ScWriter own;			/* bare records: the cube's own schema */
	HTAB	   *writers;		/* framed: id -> ScWriter */
	ScWriter   *last_writer;	/* the one the last message had, or NULL */
	ScRegistryConn registry;	/* framed: the cluster's registry */
	bool		has_registry;
	MemoryContext cxt;			/* where writers live: the cube's set-up */

	/* the decoded columns: payload columns and the whole-record column */
	int			ndecoded;
	int		   *decoded_col;	/* decoded index -> cube column */
	int		   *col_decoded;	/* cube column -> decoded index, -1 */
	StringInfo *values;
	bool	   *isnull;
	ScScalar   *scalars;		/* what their values were read as (avro.h, protobuf.h) */
	uint16	   *takes;			/* the scalars they take as datums (format.h) */
} ScRegFormat;

/*
 * The classes of text (SC_VALUE_*) a column of a type takes: a text
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
		return SC_VALUE_JSON | SC_VALUE_NUMBER | SC_VALUE_BOOL;
	if (base == BYTEAOID)
		return SC_VALUE_BYTES | SC_VALUE_STRING;
	get_type_category_preferred(base, &category, &preferred);
	switch (category)
	{
		case TYPCATEGORY_STRING:
			return ~0;
		case TYPCATEGORY_NUMERIC:
			return SC_VALUE_NUMBER | SC_VALUE_STRING;
		case TYPCATEGORY_BOOLEAN:
			return SC_VALUE_BOOL | SC_VALUE_STRING;
		case TYPCATEGORY_DATETIME:
			return SC_VALUE_TIME | SC_VALUE_STRING;
		default:
			return SC_VALUE_STRING;
	}
}

/*
 * Why a field of a schema cannot become its column (a boolean for a bigint
 * column, a record for a timestamp), or NULL when every one can: of the
 * Avro schema avro, or of the message type at indexes of the Protobuf
 * schema proto.  A field the schema lacks is no misfit (its column is
 * NULL).
 */
char *
sc_schema_misfit(const ScCube *cube, const ScAvroSchema *avro, const ScProtoSchema *proto,
				 const int *indexes, int nindexes)
{
	for (int c = 0; c < cube->ncolumns; c++)
	{
		ScColumn   *col = &cube->columns[c];
		int			pathlen = col->meta == SC_META_VALUE ? 0 : col->pathlen;
		char	   *type_name = NULL;
		int			classes;

		if (col->meta != SC_META_NONE && col->meta != SC_META_VALUE)
			continue;
		classes = avro != NULL ? sc_avro_path_classes(avro, col->path, pathlen, &type_name)
			: sc_proto_path_classes(proto, indexes, nindexes, col->path, pathlen, &type_name);
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
 * Which decoded columns of a plan write text that needs no escaping in a
 * line: numbers, booleans and times (their classes of text, of the Avro
 * schema avro or of the message type at indexes of the Protobuf schema
 * proto) are written with digits, signs, letters, points, colons and
 * spaces only.  So they are copied into the line as they are, which is
 * about a third of what writing a row's values into its line costs.
 */
static bool *
sc_plain_columns(ScFormatContext *fc, ScRegFormat *rf, const ScAvroSchema *avro,
				 const ScProtoSchema *proto, const int *indexes, int nindexes)
{
	bool	   *plain = palloc0(sizeof(bool) * Max(rf->ndecoded, 1));

	for (int k = 0; k < rf->ndecoded; k++)
	{
		ScColumn   *col = &fc->cube->columns[rf->decoded_col[k]];
		int			pathlen = col->meta == SC_META_VALUE ? 0 : col->pathlen;
		char	   *type_name;
		int			classes;

		classes = avro != NULL ? sc_avro_path_classes(avro, col->path, pathlen, &type_name)
			: sc_proto_path_classes(proto, indexes, nindexes, col->path, pathlen, &type_name);
		plain[k] = classes > 0 &&
			(classes & ~(SC_VALUE_NUMBER | SC_VALUE_BOOL | SC_VALUE_TIME)) == 0;
	}
	return plain;
}

/*
 * The plan of a writer schema for the cube's decoded columns (names into
 * nested records, or the whole record); NULL and *error when the schema
 * cannot be read, or a field's type cannot become its column's: every
 * message of that schema is then a dead letter saying which field and
 * which column.
 */
static ScAvroPlan *
sc_avro_make_plan(ScFormatContext *fc, ScRegFormat *rf, const char *schema_text, bool **plain,
				  char **error)
{
	ScCube	   *cube = fc->cube;
	ScAvroSchema *schema = sc_avro_parse(schema_text, error);
	char	 ***paths = palloc(sizeof(char **) * Max(1, rf->ndecoded));
	int		   *pathlens = palloc(sizeof(int) * Max(1, rf->ndecoded));

	if (schema == NULL)
	{
		*error = psprintf("not a valid Avro schema: %s", *error);
		return NULL;
	}
	if ((*error = sc_schema_misfit(cube, schema, NULL, NULL, 0)) != NULL)
		return NULL;
	for (int k = 0; k < rf->ndecoded; k++)
	{
		ScColumn   *col = &cube->columns[rf->decoded_col[k]];

		paths[k] = col->path;
		pathlens[k] = col->meta == SC_META_VALUE ? 0 : col->pathlen;
	}
	*plain = sc_plain_columns(fc, rf, schema, NULL, NULL, 0);
	return sc_avro_plan(schema, rf->ndecoded, paths, pathlens, error);
}

static void *
sc_framed_setup(ScFormatContext *fc)
{
	ScCube	   *cube = fc->cube;
	ScRegFormat *rf = palloc0(sizeof(ScRegFormat));
	HASHCTL		ctl = {.keysize = sizeof(int32), .entrysize = sizeof(ScWriter),
	.hcxt = CurrentMemoryContext};

	rf->cxt = CurrentMemoryContext;
	rf->format = cube->format;
	rf->cluster = cube->cluster;
	rf->type = cube->format == SC_FORMAT_PROTOBUF ? "PROTOBUF" : "AVRO";
	rf->decoded_col = palloc(sizeof(int) * Max(cube->ncolumns, 1));
	rf->col_decoded = palloc(sizeof(int) * Max(cube->ncolumns, 1));
	for (int c = 0; c < cube->ncolumns; c++)
	{
		rf->col_decoded[c] = -1;
		if (cube->columns[c].meta == SC_META_NONE || cube->columns[c].meta == SC_META_VALUE)
		{
			rf->col_decoded[c] = rf->ndecoded;
			rf->decoded_col[rf->ndecoded++] = c;
		}
	}
	rf->values = palloc(sizeof(StringInfo) * Max(rf->ndecoded, 1));
	rf->isnull = palloc(sizeof(bool) * Max(rf->ndecoded, 1));
	rf->scalars = palloc(sizeof(ScScalar) * Max(rf->ndecoded, 1));
	rf->takes = palloc(sizeof(uint16) * Max(rf->ndecoded, 1));
	for (int k = 0; k < rf->ndecoded; k++)
	{
		rf->values[k] = makeStringInfo();
		rf->takes[k] = fc->layout->takes[rf->decoded_col[k]];
	}

	rf->framed = cube->format == SC_FORMAT_PROTOBUF || cube->avro_schema == NULL;
	if (!rf->framed)
	{
		rf->own.plan = sc_avro_make_plan(fc, rf, cube->avro_schema, &rf->own.plain,
										 &rf->own.error);
		if (rf->own.plan == NULL)
			rf->own.error = psprintf("the cube's option \"schema\": %s", rf->own.error);
		return rf;
	}
	rf->writers = hash_create("streamcube writer schemas", 16, &ctl,
							  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	rf->has_registry = sc_cluster_registry(cube->cluster, &rf->registry);

	/* Ids are of one registry: another one's are other schemas. */
	if (sc_schema_texts != NULL &&
		(!rf->has_registry || strcmp(sc_schema_texts_registry, rf->registry.urls) != 0))
	{
		hash_destroy(sc_schema_texts);
		sc_schema_texts = NULL;
		pfree(sc_schema_texts_registry);
	}
	if (sc_schema_texts == NULL && rf->has_registry)
	{
		HASHCTL		tctl = {.keysize = sizeof(int32), .entrysize = sizeof(ScSchemaText),
		.hcxt = TopMemoryContext};

		sc_schema_texts = hash_create("streamcube schema texts", 16, &tctl,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		sc_schema_texts_registry = MemoryContextStrdup(TopMemoryContext, rf->registry.urls);
	}
	return rf;
}

/* The writer schema id of a framed message; -1 when it is not framed. */
static int32
sc_framed_id(const ScKafkaMessage *m)
{
	const unsigned char *p = (const unsigned char *) m->payload;

	if (p == NULL || m->len < 5 || p[0] != 0)
		return -1;
	return (int32) (((uint32) p[1] << 24) | ((uint32) p[2] << 16) | ((uint32) p[3] << 8) | p[4]);
}

/*
 * Remember what an id is, for the receiver's life; refs is the files a
 * Protobuf schema imports, a jsonb datum [{"name": ..., "schema": ...}]
 * (or 0).  Caller is connected to SPI.
 */
static void
sc_schema_remember(int32 id, const char *type, const char *text, Datum refs,
				   const char *not_found)
{
	ScSchemaText *t = hash_search(sc_schema_texts, &id, HASH_ENTER, NULL);

	t->type = type ? MemoryContextStrdup(TopMemoryContext, type) : NULL;
	t->text = text ? MemoryContextStrdup(TopMemoryContext, text) : NULL;
	t->not_found = not_found ? MemoryContextStrdup(TopMemoryContext, not_found) : NULL;
	t->nrefs = 0;
	if (refs != (Datum) 0)
	{
		Oid			argtype = JSONBOID;

		if (SPI_execute_with_args("SELECT r->>'name', r->>'schema' FROM jsonb_array_elements($1) r",
								  1, &argtype, &refs, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not read the references of schema id %d", id);
		t->nrefs = (int) SPI_processed;
		t->ref_names = MemoryContextAlloc(TopMemoryContext, sizeof(char *) * Max(t->nrefs, 1));
		t->ref_texts = MemoryContextAlloc(TopMemoryContext, sizeof(char *) * Max(t->nrefs, 1));
		for (int i = 0; i < t->nrefs; i++)
		{
			t->ref_names[i] = MemoryContextStrdup(TopMemoryContext,
												  SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
			t->ref_texts[i] = MemoryContextStrdup(TopMemoryContext,
												  SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2));
		}
	}
}

/*
 * The files a Protobuf schema imports, as the registry names them in its
 * references [{"name", "subject", "version"}]: fetched by subject and
 * version, into a jsonb datum [{"name", "schema"}] kept with the schema.
 * Returns false, with *why, when the registry does not give one now.
 */
static bool
sc_schema_fetch_refs(ScRegFormat *rf, int32 id, const char *references, Datum *refs, char **why)
{
	Oid			argtype = TEXTOID;
	Datum		arg = CStringGetTextDatum(references ? references : "[]");
	StringInfoData buf;
	uint64		n;
	SPITupleTable *tab;

	if (SPI_execute_with_args("SELECT r->>'name', r->>'subject', coalesce((r->>'version')::int, 0) "
							  "FROM jsonb_array_elements($1::jsonb) r",
							  1, &argtype, &arg, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the references of schema id %d", id);
	n = SPI_processed;
	tab = SPI_tuptable;
	initStringInfo(&buf);
	appendStringInfoChar(&buf, '[');
	for (uint64 i = 0; i < n; i++)
	{
		char	   *name = SPI_getvalue(tab->vals[i], tab->tupdesc, 1);
		char	   *subject = SPI_getvalue(tab->vals[i], tab->tupdesc, 2);
		bool		isnull;
		int32		version = DatumGetInt32(SPI_getbinval(tab->vals[i], tab->tupdesc, 3, &isnull));
		int32		ref_id;
		char	   *type = NULL;
		char	   *text = NULL;
		char		errbuf[512];
		ScRegistryStatus st = sc_registry_version(&rf->registry, subject, version, &ref_id, &type, &text,
												  errbuf, sizeof(errbuf));

		if (st != SC_REGISTRY_OK)
		{
			*why = psprintf("schema registry of Kafka cluster \"%s\" %s (schema id %d imports \"%s\", subject \"%s\" version %d): %s",
							rf->cluster,
							st == SC_REGISTRY_UNAVAILABLE ? "does not answer" :
							st == SC_REGISTRY_NOT_FOUND ? "has no such schema" : "refuses the request",
							id, name ? name : "", subject ? subject : "", version, errbuf);
			return false;
		}
		if (i > 0)
			appendStringInfoChar(&buf, ',');
		appendStringInfoString(&buf, "{\"name\":");
		escape_json(&buf, name ? name : "");
		appendStringInfoString(&buf, ",\"schema\":");
		escape_json(&buf, text);
		appendStringInfoChar(&buf, '}');
	}
	appendStringInfoChar(&buf, ']');
	*refs = DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data));
	return true;
}

/*
 * How the writer schema of id feeds the cube: planned once per set-up,
 * from what the id is (prepare made it known; nothing is asked here).
 */
static ScWriter *
sc_writer(ScFormatContext *fc, ScRegFormat *rf, int32 id)
{
	bool		found;
	ScWriter   *w;
	ScSchemaText *t;
	MemoryContext old;
	char	   *error = NULL;

	/* A topic's messages mostly have the schema of the one before. */
	if (rf->last_writer != NULL && rf->last_writer->id == id)
		return rf->last_writer;
	w = hash_search(rf->writers, &id, HASH_ENTER, &found);
	rf->last_writer = w;		/* entries do not move */
	if (found)
		return w;
	old = MemoryContextSwitchTo(rf->cxt);
	w->plan = NULL;
	w->plain = NULL;
	w->proto = NULL;
	w->types = NULL;
	w->error = NULL;
	t = sc_schema_texts ? hash_search(sc_schema_texts, &id, HASH_FIND, NULL) : NULL;
	if (t == NULL)
		w->error = psprintf("schema id %d is not known", id);	/* not reached: prepare */
	else if (t->not_found != NULL)
		w->error = pstrdup(t->not_found);
	else if (strcmp(t->type, rf->type) != 0)
		w->error = psprintf("schema id %d is a %s schema, not %s", id, t->type, rf->type);
	else if (rf->format == SC_FORMAT_PROTOBUF)
	{
		w->proto = sc_proto_parse(t->text, t->nrefs, (const char *const *) t->ref_names,
								  (const char *const *) t->ref_texts, &error);
		if (w->proto == NULL)
			w->error = psprintf("schema id %d: not a valid Protobuf schema: %s", id, error);
	}
	else if ((w->plan = sc_avro_make_plan(fc, rf, t->text, &w->plain, &error)) == NULL)
		w->error = psprintf("schema id %d: %s", id, error);
	MemoryContextSwitchTo(old);
	return w;
}

/*
 * The plan of the Protobuf message type at the message's indexes: made
 * once per writer and type.  NULL with *error when it cannot be.
 */
static ScProtoPlan *
sc_proto_type_plan(ScFormatContext *fc, ScRegFormat *rf, ScWriter *w, int32 id, const int *indexes,
				   int nindexes, const bool **plain, char **error)
{
	ScCube	   *cube = fc->cube;
	ScProtoType *pt;
	MemoryContext old;
	char	 ***paths;
	int		   *pathlens;
	char	   *err = NULL;

	for (pt = w->types; pt != NULL; pt = pt->next)
	{
		int			k = 0;

		if (pt->nindexes != nindexes)
			continue;
		while (k < nindexes && pt->indexes[k] == indexes[k])
			k++;
		if (k == nindexes)
			break;
	}
	if (pt == NULL)
	{
		old = MemoryContextSwitchTo(rf->cxt);
		pt = palloc0(sizeof(ScProtoType));
		pt->nindexes = nindexes;
		memcpy(pt->indexes, indexes, sizeof(int) * nindexes);
		paths = palloc(sizeof(char **) * Max(1, rf->ndecoded));
		pathlens = palloc(sizeof(int) * Max(1, rf->ndecoded));
		for (int k = 0; k < rf->ndecoded; k++)
		{
			ScColumn   *col = &cube->columns[rf->decoded_col[k]];

			paths[k] = col->path;
			pathlens[k] = col->meta == SC_META_VALUE ? 0 : col->pathlen;
		}
		if ((err = sc_schema_misfit(cube, NULL, w->proto, indexes, nindexes)) == NULL)
			pt->plan = sc_proto_plan(w->proto, indexes, nindexes, rf->ndecoded, paths, pathlens, &err);
		if (pt->plan == NULL)
			pt->error = psprintf("schema id %d: %s", id, err);
		else
			pt->plain = sc_plain_columns(fc, rf, NULL, w->proto, indexes, nindexes);
		pt->next = w->types;
		w->types = pt;
		MemoryContextSwitchTo(old);
	}
	*error = pt->error;
	*plain = pt->plain;
	return pt->plan;
}

/* Is every schema id of the batch known already? */
static bool
sc_framed_ready(ScFormatContext *fc, const ScKafkaMessage *messages, int n)
{
	ScRegFormat *rf = fc->state;
	int32		last = -1;

	if (!rf->framed)
		return true;
	for (int i = 0; i < n; i++)
	{
		int32		id = sc_framed_id(&messages[i]);

		if (id < 0 || id == last)
			continue;
		if (sc_schema_texts == NULL || hash_search(sc_schema_texts, &id, HASH_FIND, NULL) == NULL)
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
sc_framed_prepare(ScFormatContext *fc, const ScKafkaMessage *messages, int n, char **why)
{
	ScRegFormat *rf = fc->state;

	if (!rf->framed)
		return true;
	for (int i = 0; i < n; i++)
	{
		int32		id = sc_framed_id(&messages[i]);
		Oid			types[2] = {TEXTOID, INT4OID};
		Datum		args[2];
		char	   *type = NULL,
				   *text = NULL,
				   *refs = NULL;
		char		errbuf[512];
		ScRegistryStatus st;

		if (id < 0 || (sc_schema_texts != NULL && hash_search(sc_schema_texts, &id, HASH_FIND, NULL) != NULL))
			continue;
		if (!rf->has_registry)
		{
			*why = psprintf("message at partition %d offset " INT64_FORMAT " carries schema id %d, but Kafka cluster \"%s\" has no schema.registry.url",
							messages[i].partition, messages[i].offset, id, fc->cube->cluster);
			return false;
		}
		args[0] = CStringGetTextDatum(rf->registry.urls);
		args[1] = Int32GetDatum(id);
		sc_catalog_exec("SELECT schema_type, schema, refs FROM streamcube.schemas "
						"WHERE registry = $1 AND schema_id = $2", 2, types, args, NULL, true, 0);
		if (SPI_processed > 0)
		{
			HeapTuple	tup = SPI_tuptable->vals[0];
			TupleDesc	desc = SPI_tuptable->tupdesc;
			bool		isnull;

			sc_schema_remember(id, SPI_getvalue(tup, desc, 1), SPI_getvalue(tup, desc, 2),
							   SPI_getbinval(tup, desc, 3, &isnull), NULL);
			continue;
		}
		st = sc_registry_schema(&rf->registry, id, &type, &text, &refs, errbuf, sizeof(errbuf));
		if (st == SC_REGISTRY_NOT_FOUND)
		{
			sc_schema_remember(id, NULL, NULL, (Datum) 0,
							   psprintf("schema id %d does not exist in the schema registry", id));
			continue;
		}
		if (st != SC_REGISTRY_OK)
		{
			*why = psprintf("schema registry of Kafka cluster \"%s\" %s (schema id %d): %s",
							fc->cube->cluster,
							st == SC_REGISTRY_UNAVAILABLE ? "does not answer" : "refuses the request",
							id, errbuf);
			return false;
		}
		{
			Oid			t[5] = {TEXTOID, INT4OID, TEXTOID, TEXTOID, JSONBOID};
			Datum		v[5] = {args[0], args[1], CStringGetTextDatum(type), CStringGetTextDatum(text), 0};

			/* A Protobuf schema's imports are part of what it is. */
			v[4] = DirectFunctionCall1(jsonb_in, CStringGetDatum("[]"));
			if (strcmp(type, "PROTOBUF") == 0 && !sc_schema_fetch_refs(rf, id, refs, &v[4], why))
				return false;
			sc_catalog_exec("INSERT INTO streamcube.schemas (registry, schema_id, schema_type, schema, refs) "
							"VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING", 5, t, v, NULL, false, 0);
			sc_schema_remember(id, type, text, v[4], NULL);
		}
	}
	return true;
}

/*
 * A message's time value from its time column, decoded index tk: a
 * timestamp's instant (a Protobuf Timestamp, an Avro timestamp-millis or
 * -micros; a local timestamp when the column is a timestamp and takes it)
 * is what its text would parse to, as timestamptz and as timestamp (which
 * ignores the text's +00): no need to parse the text, unless PostgreSQL
 * cannot hold it, which the text's parse says in its words (or these when
 * the column took it with no text).
 */
static bool
sc_registry_time(ScCube *cube, ScRegFormat *rf, int tk, const uint16 *takes, int64 *ts,
				 char **error)
{
	const ScScalar *sv = &rf->scalars[tk];
	const char *name = cube->columns[cube->time_index].name;
	Datum		value;

	if (sv->kind == SC_SCALAR_INSTANT ||
		(sv->kind == SC_SCALAR_LOCAL_TS && (rf->takes[tk] & SC_SCALAR_BIT(SC_SCALAR_LOCAL_TS))))
	{
		if (sc_scalar_datum(TIMESTAMPOID, sv, &value))
		{
			*ts = DatumGetTimestamp(value);
			return true;
		}
		if (takes != NULL && (takes[tk] & SC_SCALAR_BIT(sv->kind)))
		{
			*error = psprintf("column \"%s\": timestamp out of range", name);
			return false;
		}
	}
	if (sc_parse_time(cube, rf->values[tk]->data, ts, error))
		return true;
	*error = psprintf("column \"%s\": %s", name, *error);
	return false;
}

/*
 * Decoded value k, not NULL, of column c into the line: given as a datum
 * when the direct path takes it (takes: the batch's rows are formed there;
 * the field is left empty), else as its text.  *escaped is set when the
 * text needed an escape; false, with *error, for an instant out of range.
 */
static inline bool
sc_framed_value(ScFormatContext *fc, ScRegFormat *rf, int c, int k, const bool *plain,
				const uint16 *takes, int *ends, StringInfo out, bool *escaped, char **error)
{
	const ScScalar *sv = &rf->scalars[k];
	Datum		value;

	if (takes != NULL && (takes[k] & SC_SCALAR_BIT(sv->kind)))
	{
		if (sc_scalar_datum(fc->cube->columns[c].type, sv, &value))
		{
			sc_line_field_datum(fc, out, ends, c, value);
			return true;
		}
		/* a string not valid in the database's encoding: in the line */
		if (sv->kind == SC_SCALAR_TEXT)
			*escaped |= sc_line_text_bytes(out, sv->s, (int) sv->i);
		/* out of the column's range: its text, which its type refuses */
		else if (!sc_scalar_text(sv, out))
		{
			*error = psprintf("column \"%s\": timestamp out of range", fc->cube->columns[c].name);
			return false;
		}
	}
	/* any other value of a text column (a number's text, JSON): its text */
	else if (takes != NULL && (takes[k] & SC_SCALAR_BIT(SC_SCALAR_TEXT)) &&
			 sc_text_datum(rf->values[k]->data, rf->values[k]->len, &value))
	{
		sc_line_field_datum(fc, out, ends, c, value);
		return true;
	}
	else if (plain[k])
		appendBinaryStringInfo(out, rf->values[k]->data, rf->values[k]->len);
	else
		*escaped |= sc_line_text_bytes(out, rf->values[k]->data, rf->values[k]->len);
	if (ends != NULL)
		ends[c] = out->len;
	return true;
}

static bool
sc_framed_line(ScFormatContext *fc, const ScKafkaMessage *m, StringInfo out, int64 *ts, char **error)
{
	ScCube	   *cube = fc->cube;
	ScRegFormat *rf = fc->state;
	ScWriter   *w = &rf->own;
	const char *datum = m->payload;
	size_t		len = m->len;
	int32		id = -1;
	char	   *err = NULL;
	const bool *plain;
	int			tk = rf->col_decoded[cube->time_index];
	int		   *ends;
	const uint16 *takes;
	int			start = out->len;
	bool		escaped = false;

	if (rf->framed)
	{
		id = sc_framed_id(m);
		if (id < 0)
		{
			*error = "message is not in the Confluent wire format (a 0 byte, then a 4-byte schema id)";
			return false;
		}
		w = sc_writer(fc, rf, id);
		datum += 5;
		len -= 5;
	}
	if (w->error != NULL)
	{
		*error = w->error;
		return false;
	}
	for (int k = 0; k < rf->ndecoded; k++)
	{
		rf->values[k]->len = 0;
		rf->values[k]->data[0] = '\0';
	}

	/*
	 * Where the fields end, when every column is decoded (metadata values
	 * may be escaped): the direct path cuts the line there instead of
	 * splitting it again, and takes the numbers, bools and instants its
	 * columns take as datums (format.h), which then have no text.
	 */
	ends = rf->ndecoded == cube->ncolumns ? sc_line_field_ends(fc) : NULL;
	takes = ends != NULL && fc->datums ? rf->takes : NULL;
	if (rf->format == SC_FORMAT_PROTOBUF)
	{
		int			indexes[SC_PROTO_MAX_INDEXES];
		int			nindexes;
		size_t		consumed;
		ScProtoPlan *plan;

		if (!sc_proto_read_indexes(datum, len, indexes, SC_PROTO_MAX_INDEXES, &nindexes, &consumed))
		{
			*error = psprintf("invalid Protobuf message (schema id %d): its message-index array is malformed", id);
			return false;
		}
		if ((plan = sc_proto_type_plan(fc, rf, w, id, indexes, nindexes, &plain, error)) == NULL)
			return false;
		if (!sc_proto_decode(plan, datum + consumed, len - consumed, rf->values, rf->isnull,
							 rf->scalars, takes, &err))
		{
			*error = psprintf("invalid Protobuf message (schema id %d): %s", id, err);
			return false;
		}
	}
	else
	{
		if (!sc_avro_decode(w->plan, datum, len, rf->values, rf->isnull, rf->scalars, takes,
							&err))
		{
			*error = id >= 0 ? psprintf("invalid Avro record (schema id %d): %s", id, err)
				: psprintf("invalid Avro record: %s", err);
			return false;
		}
		plain = w->plain;
	}

	/* The time value. */
	if (cube->columns[cube->time_index].meta == SC_META_TIMESTAMP)
	{
		if (!sc_meta_time(fc, m, ts, error))
			return false;
	}
	else
	{
		if (tk < 0 || rf->isnull[tk])
		{
			*error = psprintf("time column \"%s\" is null or missing%s",
							  cube->columns[cube->time_index].name,
							  id >= 0 ? psprintf(" (schema id %d)", id) : "");
			return false;
		}

		if (!sc_registry_time(cube, rf, tk, takes, ts, error))
			return false;
	}

	for (int c = 0; c < cube->ncolumns; c++)
	{
		int			k = rf->col_decoded[c];

		if (c > 0)
			appendStringInfoCharMacro(out, '\t');
		if (k < 0)
		{
			if (!sc_meta_append(fc, out, c, m, error))
				return false;
			continue;
		}
		if (rf->isnull[k])
		{
			appendBinaryStringInfo(out, "\\N", 2);
			if (ends != NULL)
				ends[c] = ~out->len;
			continue;
		}
		if (!sc_framed_value(fc, rf, c, k, plain, takes, ends, out, &escaped, error))
			return false;
	}
	if (ends != NULL && escaped)
		sc_line_field_ends_cancel(fc, out, start);
	sc_line_position(out, '\t', m);
	return true;
}

const ScFormatRoutine sc_format_protobuf = {
	.name = "protobuf",
	.encoding = SC_LINE_TEXT,
	.setup = sc_framed_setup,
	.prepare = sc_framed_prepare,
	.ready = sc_framed_ready,
	.line = sc_framed_line,
	.split = sc_line_split_text,
	.datum = NULL,
};

const ScFormatRoutine sc_format_avro = {
	.name = "avro",
	.encoding = SC_LINE_TEXT,
	.setup = sc_framed_setup,
	.prepare = sc_framed_prepare,
	.ready = sc_framed_ready,
	.line = sc_framed_line,
	.split = sc_line_split_text,
	.datum = NULL,
};
