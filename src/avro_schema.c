/*-------------------------------------------------------------------------
 *
 * avro_schema.c
 *		Avro writer schemas, written from the Avro 1.11 specification: the
 *		schema's JSON, parsing it into ScAvroNodes, and planning which of
 *		its values feed which columns.
 *
 * This runs once per writer schema; the decoder (avro.c) then runs for
 * every message on what is built here, and trusts it: named types are
 * defined once, unions are as the specification allows them, a decimal
 * fits in numeric, and every node knows the fewest bytes a value of it
 * takes (sc_avro_minsize), which the decoder checks counts against.  What
 * is wrong with a schema is returned as a message, never raised, and a
 * schema whose values of no bytes would exhaust any message's budget is
 * refused here, once, rather than with each message.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include <math.h>

#include "avro_internal.h"
#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "nodes/pg_list.h"

/* A schema's JSON nested deeper than this is refused (the parser recurses). */
#define SC_AVRO_MAX_SCHEMA_DEPTH 256

/* numeric's limit; larger decimals are refused when the schema is parsed. */
#define SC_AVRO_MAX_PRECISION 1000

const char *const sc_avro_kind_names[] = {
	"null", "boolean", "int", "long", "float", "double", "bytes", "string",
	"record", "enum", "array", "map", "union", "fixed"
};

/* ----------------------------------------------------------------
 * The schema's JSON
 *
 * pg_parse_json (which also words the errors) builds a small tree of the
 * document that the schema parser walks.
 * ----------------------------------------------------------------
 */
typedef enum ScJKind
{
	SC_J_OBJECT,
	SC_J_ARRAY,
	SC_J_STRING,
	SC_J_NUMBER,
	SC_J_TRUE,
	SC_J_FALSE,
	SC_J_NULL
} ScJKind;

typedef struct ScJNode
{
	ScJKind		kind;
	char	   *str;			/* string, number: its text */
	List	   *keys;			/* object: member names */
	List	   *vals;			/* object, array: ScJNode */
	char	   *pending_key;	/* object being built: the next member's name */
} ScJNode;

typedef struct ScJBuild
{
	ScJNode    *root;
	List	   *stack;			/* open objects and arrays, innermost last */
} ScJBuild;

static void
sc_j_attach(ScJBuild *b, ScJNode *node)
{
	ScJNode    *parent;

	if (b->stack == NIL)
	{
		b->root = node;
		return;
	}
	parent = llast(b->stack);
	if (parent->kind == SC_J_OBJECT)
	{
		parent->keys = lappend(parent->keys, parent->pending_key);
		parent->pending_key = NULL;
	}
	parent->vals = lappend(parent->vals, node);
}

static void
sc_j_open(ScJBuild *b, ScJKind kind)
{
	ScJNode    *node = palloc0(sizeof(ScJNode));

	node->kind = kind;
	sc_j_attach(b, node);
	b->stack = lappend(b->stack, node);
}

static void
sc_j_object_start(void *state)
{
	sc_j_open(state, SC_J_OBJECT);
}

static void
sc_j_array_start(void *state)
{
	sc_j_open(state, SC_J_ARRAY);
}

static void
sc_j_close(void *state)
{
	ScJBuild   *b = state;

	b->stack = list_delete_last(b->stack);
}

static void
sc_j_field_start(void *state, char *fname, bool isnull)
{
	ScJBuild   *b = state;
	ScJNode    *parent = llast(b->stack);

	parent->pending_key = fname;
}

static void
sc_j_scalar(void *state, char *token, JsonTokenType tokentype)
{
	ScJNode    *node = palloc0(sizeof(ScJNode));

	switch (tokentype)
	{
		case JSON_TOKEN_STRING:
			node->kind = SC_J_STRING;
			break;
		case JSON_TOKEN_NUMBER:
			node->kind = SC_J_NUMBER;
			break;
		case JSON_TOKEN_TRUE:
			node->kind = SC_J_TRUE;
			break;
		case JSON_TOKEN_FALSE:
			node->kind = SC_J_FALSE;
			break;
		default:
			node->kind = SC_J_NULL;
			break;
	}
	node->str = token;
	sc_j_attach(state, node);
}

/*
 * How deep the JSON text nests, counted without parsing: pg_parse_json
 * recurses and raises an ERROR where the stack runs out, and a schema too
 * deep should be a schema error like any other.
 */
static int
sc_j_depth(const char *json)
{
	int			depth = 0;
	int			max = 0;
	bool		in_string = false;

	for (const char *s = json; *s; s++)
	{
		if (in_string)
		{
			if (*s == '\\' && s[1] != '\0')
				s++;
			else if (*s == '"')
				in_string = false;
		}
		else if (*s == '"')
			in_string = true;
		else if (*s == '{' || *s == '[')
			max = Max(max, ++depth);
		else if (*s == '}' || *s == ']')
			depth--;
	}
	return max;
}

static ScJNode *
sc_j_get(const ScJNode *obj, const char *key)
{
	ListCell   *k,
			   *v;

	forboth(k, obj->keys, v, obj->vals)
	{
		if (strcmp(lfirst(k), key) == 0)
			return lfirst(v);
	}
	return NULL;
}

/* A JSON number that is an integer of int's range. */
static bool
sc_j_int(const ScJNode *j, int *value)
{
	char	   *end;
	long		v;

	if (j == NULL || j->kind != SC_J_NUMBER)
		return false;
	errno = 0;
	v = strtol(j->str, &end, 10);
	if (errno != 0 || *end != '\0' || v < PG_INT32_MIN || v > PG_INT32_MAX)
		return false;
	*value = (int) v;
	return true;
}

/* ----------------------------------------------------------------
 * Parsing a schema
 * ----------------------------------------------------------------
 */
typedef struct ScAvroParser
{
	List	   *named;			/* every named type defined so far */
	char	   *error;
} ScAvroParser;

static ScAvroNode *sc_avro_parse_type(ScAvroParser *ps, const ScJNode *j,
									  const char *ns, const char *where);

static ScAvroNode *
sc_avro_parse_fail(ScAvroParser *ps, const char *where, const char *what)
{
	if (ps->error == NULL)
		ps->error = psprintf("%s: %s", where, what);
	return NULL;
}

static int
sc_avro_primitive(const char *name)
{
	for (int k = SC_AVRO_NULL; k <= SC_AVRO_STRING; k++)
		if (strcmp(name, sc_avro_kind_names[k]) == 0)
			return k;
	return -1;
}

static ScAvroNode *
sc_avro_new(ScAvroKind kind)
{
	ScAvroNode *t = palloc0(sizeof(ScAvroNode));

	t->kind = kind;
	return t;
}

static ScAvroNode *
sc_avro_lookup(ScAvroParser *ps, const char *fullname)
{
	ListCell   *lc;

	foreach(lc, ps->named)
	{
		ScAvroNode *t = lfirst(lc);

		if (strcmp(t->fullname, fullname) == 0)
			return t;
	}
	return NULL;
}

/*
 * A reference to a named type: a name with a dot is a full name; a simple
 * name is first taken in the enclosing namespace, then in none (as the
 * Java implementation does, for schemas written before namespaces).
 */
static ScAvroNode *
sc_avro_reference(ScAvroParser *ps, const char *name, const char *ns, const char *where)
{
	ScAvroNode *t = NULL;

	if (strchr(name, '.') == NULL && ns != NULL && ns[0] != '\0')
		t = sc_avro_lookup(ps, psprintf("%s.%s", ns, name));
	if (t == NULL)
		t = sc_avro_lookup(ps, name);
	if (t == NULL)
		return sc_avro_parse_fail(ps, where, psprintf("unknown type \"%s\"", name));
	return t;
}

/*
 * The full name of the named type j defines, and its namespace, which
 * encloses the names inside it (the specification's rules: a dotted name
 * is full; else attribute "namespace", else the enclosing one).  The type
 * is registered before what is inside it is parsed, so that it may refer
 * to itself.
 */
static bool
sc_avro_define(ScAvroParser *ps, const ScJNode *j, ScAvroNode *t, const char *ns,
			   const char *where, const char **newns)
{
	ScJNode    *name = sc_j_get(j, "name");
	const char *dot;

	if (name == NULL || name->kind != SC_J_STRING || name->str[0] == '\0')
	{
		sc_avro_parse_fail(ps, where, psprintf("a %s needs a \"name\"",
											   sc_avro_kind_names[t->kind]));
		return false;
	}
	dot = strrchr(name->str, '.');
	if (dot != NULL)
	{
		t->fullname = name->str;
		*newns = pnstrdup(name->str, dot - name->str);
	}
	else
	{
		ScJNode    *nsattr = sc_j_get(j, "namespace");

		if (nsattr != NULL && nsattr->kind == SC_J_STRING)
			ns = nsattr->str;
		else if (nsattr != NULL && nsattr->kind == SC_J_NULL)
			ns = NULL;
		else if (nsattr != NULL)
		{
			sc_avro_parse_fail(ps, where, "\"namespace\" must be a string");
			return false;
		}
		t->fullname = (ns != NULL && ns[0] != '\0') ?
			psprintf("%s.%s", ns, name->str) : name->str;
		*newns = ns;
	}
	if (sc_avro_primitive(t->fullname) >= 0)
	{
		sc_avro_parse_fail(ps, where, psprintf("\"%s\" is a primitive type's name",
											   t->fullname));
		return false;
	}
	if (sc_avro_lookup(ps, t->fullname) != NULL)
	{
		sc_avro_parse_fail(ps, where, psprintf("type \"%s\" is defined twice",
											   t->fullname));
		return false;
	}
	ps->named = lappend(ps->named, t);
	return true;
}

/*
 * Attribute "logicalType" of j, for type t.  One we do not know, or one
 * on the wrong type or with invalid attributes, is ignored, as the
 * specification says: the value reads as its plain type.
 */
static bool
sc_avro_logical(ScAvroParser *ps, const ScJNode *j, ScAvroNode *t, const char *where)
{
	ScJNode    *lt = sc_j_get(j, "logicalType");
	const char *name;

	if (lt == NULL || lt->kind != SC_J_STRING)
		return true;
	name = lt->str;
	if (t->kind == SC_AVRO_INT)
	{
		if (strcmp(name, "date") == 0)
			t->logical = SC_AVRO_DATE;
		else if (strcmp(name, "time-millis") == 0)
			t->logical = SC_AVRO_TIME_MILLIS;
	}
	else if (t->kind == SC_AVRO_LONG)
	{
		if (strcmp(name, "time-micros") == 0)
			t->logical = SC_AVRO_TIME_MICROS;
		else if (strcmp(name, "timestamp-millis") == 0)
			t->logical = SC_AVRO_TS_MILLIS;
		else if (strcmp(name, "timestamp-micros") == 0)
			t->logical = SC_AVRO_TS_MICROS;
		else if (strcmp(name, "local-timestamp-millis") == 0)
			t->logical = SC_AVRO_LOCAL_TS_MILLIS;
		else if (strcmp(name, "local-timestamp-micros") == 0)
			t->logical = SC_AVRO_LOCAL_TS_MICROS;
	}
	else if ((t->kind == SC_AVRO_BYTES || t->kind == SC_AVRO_FIXED) &&
			 strcmp(name, "decimal") == 0)
	{
		int			precision;
		int			scale = 0;
		ScJNode    *sattr = sc_j_get(j, "scale");

		if (!sc_j_int(sc_j_get(j, "precision"), &precision) || precision < 1)
			return true;
		if (sattr != NULL && !sc_j_int(sattr, &scale))
			return true;
		if (scale < 0 || scale > precision)
			return true;
		/* a fixed of n bytes holds at most floor(log10(2^(8n-1) - 1)) digits */
		if (t->kind == SC_AVRO_FIXED &&
			(t->n == 0 || precision > floor((8.0 * t->n - 1) * log10(2.0))))
			return true;
		if (precision > SC_AVRO_MAX_PRECISION)
		{
			sc_avro_parse_fail(ps, where,
							   psprintf("decimal precision %d is more than %d",
										precision, SC_AVRO_MAX_PRECISION));
			return false;
		}
		t->logical = SC_AVRO_DECIMAL;
		t->scale = scale;
	}
	return true;
}

static ScAvroNode *
sc_avro_parse_record(ScAvroParser *ps, const ScJNode *j, const char *ns, const char *where)
{
	ScAvroNode *t = sc_avro_new(SC_AVRO_RECORD);
	ScJNode    *fields = sc_j_get(j, "fields");
	const char *inner_ns;
	int			i = 0;
	ListCell   *lc;

	if (!sc_avro_define(ps, j, t, ns, where, &inner_ns))
		return NULL;
	where = psprintf("record \"%s\"", t->fullname);
	if (fields == NULL || fields->kind != SC_J_ARRAY)
		return sc_avro_parse_fail(ps, where, "\"fields\" must be an array");
	t->n = list_length(fields->vals);
	t->names = palloc0(sizeof(char *) * (t->n + 1));
	t->json_keys = palloc0(sizeof(char *) * (t->n + 1));
	t->types = palloc0(sizeof(ScAvroNode *) * (t->n + 1));
	foreach(lc, fields->vals)
	{
		ScJNode    *f = lfirst(lc);
		ScJNode    *name;
		ScJNode    *type;
		const char *fwhere;

		if (f->kind != SC_J_OBJECT)
			return sc_avro_parse_fail(ps, where, psprintf("field %d is not an object", i + 1));
		name = sc_j_get(f, "name");
		if (name == NULL || name->kind != SC_J_STRING || name->str[0] == '\0')
			return sc_avro_parse_fail(ps, where, psprintf("field %d has no \"name\"", i + 1));
		for (int k = 0; k < i; k++)
			if (strcmp(t->names[k], name->str) == 0)
				return sc_avro_parse_fail(ps, where,
										  psprintf("field \"%s\" is there twice", name->str));
		fwhere = psprintf("record \"%s\", field \"%s\"", t->fullname, name->str);
		type = sc_j_get(f, "type");
		if (type == NULL)
			return sc_avro_parse_fail(ps, fwhere, "no \"type\"");
		t->names[i] = name->str;
		t->json_keys[i] = sc_json_key(name->str);
		t->types[i] = sc_avro_parse_type(ps, type, inner_ns, fwhere);
		if (t->types[i] == NULL)
			return NULL;
		i++;
	}
	return t;
}

static ScAvroNode *
sc_avro_parse_enum(ScAvroParser *ps, const ScJNode *j, const char *ns, const char *where)
{
	ScAvroNode *t = sc_avro_new(SC_AVRO_ENUM);
	ScJNode    *symbols = sc_j_get(j, "symbols");
	const char *inner_ns;
	int			i = 0;
	ListCell   *lc;

	if (!sc_avro_define(ps, j, t, ns, where, &inner_ns))
		return NULL;
	where = psprintf("enum \"%s\"", t->fullname);
	if (symbols == NULL || symbols->kind != SC_J_ARRAY)
		return sc_avro_parse_fail(ps, where, "\"symbols\" must be an array");
	t->n = list_length(symbols->vals);
	t->names = palloc0(sizeof(char *) * (t->n + 1));
	foreach(lc, symbols->vals)
	{
		ScJNode    *s = lfirst(lc);

		if (s->kind != SC_J_STRING || s->str[0] == '\0')
			return sc_avro_parse_fail(ps, where, "a symbol must be a non-empty string");
		for (int k = 0; k < i; k++)
			if (strcmp(t->names[k], s->str) == 0)
				return sc_avro_parse_fail(ps, where,
										  psprintf("symbol \"%s\" is there twice", s->str));
		t->names[i++] = s->str;
	}
	return t;
}

static ScAvroNode *
sc_avro_parse_fixed(ScAvroParser *ps, const ScJNode *j, const char *ns, const char *where)
{
	ScAvroNode *t = sc_avro_new(SC_AVRO_FIXED);
	const char *inner_ns;

	if (!sc_avro_define(ps, j, t, ns, where, &inner_ns))
		return NULL;
	where = psprintf("fixed \"%s\"", t->fullname);
	if (!sc_j_int(sc_j_get(j, "size"), &t->n) || t->n < 0)
		return sc_avro_parse_fail(ps, where, "\"size\" must be an integer, 0 or more");
	if (!sc_avro_logical(ps, j, t, where))
		return NULL;
	return t;
}

/*
 * A union: no union directly inside, no two branches of the same unnamed
 * type or the same name (the specification's rules; they also make the
 * branch a value takes unambiguous for whoever wrote it).
 */
static ScAvroNode *
sc_avro_parse_union(ScAvroParser *ps, const ScJNode *j, const char *ns, const char *where)
{
	ScAvroNode *t = sc_avro_new(SC_AVRO_UNION);
	int			i = 0;
	ListCell   *lc;

	t->n = list_length(j->vals);
	t->types = palloc0(sizeof(ScAvroNode *) * (t->n + 1));
	foreach(lc, j->vals)
	{
		ScAvroNode *b = sc_avro_parse_type(ps, lfirst(lc), ns, where);

		if (b == NULL)
			return NULL;
		if (b->kind == SC_AVRO_UNION)
			return sc_avro_parse_fail(ps, where, "a union directly inside a union");
		for (int k = 0; k < i; k++)
		{
			ScAvroNode *o = t->types[k];

			if (o->kind != b->kind)
				continue;
			if (b->fullname == NULL || strcmp(o->fullname, b->fullname) == 0)
				return sc_avro_parse_fail(ps, where,
										  psprintf("a union has two branches of type \"%s\"",
												   b->fullname ? b->fullname :
												   sc_avro_kind_names[b->kind]));
		}
		t->types[i++] = b;
	}
	return t;
}

static ScAvroNode *
sc_avro_parse_type(ScAvroParser *ps, const ScJNode *j, const char *ns, const char *where)
{
	ScJNode    *type;
	const char *tn;
	int			prim;

	switch (j->kind)
	{
		case SC_J_STRING:
			prim = sc_avro_primitive(j->str);
			if (prim >= 0)
				return sc_avro_new(prim);
			return sc_avro_reference(ps, j->str, ns, where);
		case SC_J_ARRAY:
			return sc_avro_parse_union(ps, j, ns, where);
		case SC_J_OBJECT:
			break;
		default:
			return sc_avro_parse_fail(ps, where, "a type must be a string, an object or an array");
	}

	type = sc_j_get(j, "type");
	if (type == NULL)
		return sc_avro_parse_fail(ps, where, "an object without \"type\"");
	if (type->kind != SC_J_STRING)
		return sc_avro_parse_type(ps, type, ns, where);
	tn = type->str;
	prim = sc_avro_primitive(tn);
	if (prim >= 0)
	{
		ScAvroNode *t = sc_avro_new(prim);

		return sc_avro_logical(ps, j, t, where) ? t : NULL;
	}
	if (strcmp(tn, "record") == 0 || strcmp(tn, "error") == 0)
		return sc_avro_parse_record(ps, j, ns, where);
	if (strcmp(tn, "enum") == 0)
		return sc_avro_parse_enum(ps, j, ns, where);
	if (strcmp(tn, "fixed") == 0)
		return sc_avro_parse_fixed(ps, j, ns, where);
	if (strcmp(tn, "array") == 0 || strcmp(tn, "map") == 0)
	{
		bool		array = (tn[0] == 'a');
		ScJNode    *items = sc_j_get(j, array ? "items" : "values");
		ScAvroNode *t = sc_avro_new(array ? SC_AVRO_ARRAY : SC_AVRO_MAP);

		if (items == NULL)
			return sc_avro_parse_fail(ps, where, array ? "an array without \"items\"" :
									  "a map without \"values\"");
		t->items = sc_avro_parse_type(ps, items, ns, where);
		return t->items ? t : NULL;
	}
	return sc_avro_reference(ps, tn, ns, where);
}

/*
 * The fewest bytes a value of t takes, for the check that an array's count
 * fits in the bytes left.  A type met again while its own size is being
 * computed counts 0: a lower bound, which is all the check needs.
 *
 * A type that may take no bytes (null, fixed of size 0, a record of such
 * types) gets the number of values such a value is read as, zerovalues:
 * an array's count of them is checked against the budget at once.  The
 * first record whose zerovalues exceeds the base budget is *expands: no
 * message could be read with it (sc_avro_parse refuses the schema).
 */
static int
sc_avro_minsize(ScAvroNode *t, const ScAvroNode **expands)
{
	int64		size = 0;

	if (t->minstate == 2)
		return t->minsize;
	if (t->minstate == 1)
		return 0;
	t->minstate = 1;
	t->zerovalues = 1;
	switch (t->kind)
	{
		case SC_AVRO_NULL:
			size = 0;
			break;
		case SC_AVRO_FLOAT:
			size = 4;
			break;
		case SC_AVRO_DOUBLE:
			size = 8;
			break;
		case SC_AVRO_FIXED:
			size = t->n;
			break;
		case SC_AVRO_UNION:
			size = PG_INT32_MAX;
			for (int i = 0; i < t->n; i++)
				size = Min(size, sc_avro_minsize(t->types[i], expands));
			size = (t->n == 0) ? 1 : size + 1;
			break;
		case SC_AVRO_RECORD:
			for (int i = 0; i < t->n; i++)
			{
				const ScAvroNode *f = t->types[i];

				size = Min(size + sc_avro_minsize(t->types[i], expands), PG_INT32_MAX / 2);
				/* a type still being computed (recursion) counts 1: a lower bound */
				t->zerovalues = Min(t->zerovalues + (f->minstate == 2 ? f->zerovalues : 1),
									PG_INT64_MAX / 2);
			}
			if (size == 0 && t->zerovalues > SC_AVRO_BUDGET_BASE && *expands == NULL)
				*expands = t;
			break;
		case SC_AVRO_ARRAY:
		case SC_AVRO_MAP:
			sc_avro_minsize(t->items, expands);
			size = 1;
			break;
		default:
			size = 1;			/* a varint, a boolean, a length */
			break;
	}
	t->minsize = (int) size;
	t->minstate = 2;
	return t->minsize;
}

ScAvroSchema *
sc_avro_parse(const char *json, char **error)
{
	ScJBuild	build = {0};
	JsonSemAction sem = {0};
	JsonLexContext *lex;
	JsonParseErrorType rc;
	ScAvroParser ps = {0};
	ScAvroSchema *schema;
	const ScAvroNode *expands = NULL;
	size_t		len = strlen(json);

	if (!pg_verify_mbstr(PG_UTF8, json, len, true))
	{
		*error = pstrdup("the schema is not valid UTF-8");
		return NULL;
	}
	if (sc_j_depth(json) > SC_AVRO_MAX_SCHEMA_DEPTH)
	{
		*error = psprintf("the schema nests deeper than %d levels", SC_AVRO_MAX_SCHEMA_DEPTH);
		return NULL;
	}
	sem.semstate = &build;
	sem.object_start = sc_j_object_start;
	sem.object_end = sc_j_close;
	sem.array_start = sc_j_array_start;
	sem.array_end = sc_j_close;
	sem.object_field_start = sc_j_field_start;
	sem.scalar = sc_j_scalar;
	lex = makeJsonLexContextCstringLen(pstrdup(json), len, PG_UTF8, true);
	rc = pg_parse_json(lex, &sem);
	if (rc != JSON_SUCCESS)
	{
		*error = psprintf("the schema is not valid JSON: %s", json_errdetail(rc, lex));
		return NULL;
	}

	schema = palloc0(sizeof(ScAvroSchema));
	schema->top = sc_avro_parse_type(&ps, build.root, NULL, "the schema");
	if (schema->top == NULL)
	{
		*error = ps.error;
		return NULL;
	}
	if (schema->top->kind != SC_AVRO_RECORD)
	{
		*error = psprintf("the schema is of type %s, not a record",
						  sc_avro_kind_names[schema->top->kind]);
		return NULL;
	}

	/*
	 * A record that takes no bytes yet is read as more values than a
	 * message's base budget: no message could be read with it, so the
	 * schema is refused here, once, rather than each message after its
	 * budget is spent.  No real schema holds a record of tens of thousands
	 * of nulls; a schema built to expand (records of records of nulls) does.
	 */
	sc_avro_minsize(schema->top, &expands);
	if (expands != NULL)
	{
		*error = psprintf("record \"%s\" takes no bytes yet stands for " INT64_FORMAT
						  " values (records of nulls): more than %d, the values a message may "
						  "have beyond %d per byte of it; such a schema is refused "
						  "(see \"Decoders' limits\" in docs/operations.md)",
						  expands->fullname, expands->zerovalues, SC_AVRO_BUDGET_BASE,
						  SC_AVRO_BUDGET_PER_BYTE);
		return NULL;
	}
	return schema;
}

/* ----------------------------------------------------------------
 * Planning
 * ----------------------------------------------------------------
 */
static ScAvroPlanRecord *
sc_avro_plan_record_new(const ScAvroNode *record)
{
	ScAvroPlanRecord *pr = palloc0(sizeof(ScAvroPlanRecord));

	pr->record = record;
	pr->fields = palloc0(sizeof(ScAvroPlanField) * (record->n + 1));
	for (int i = 0; i < record->n; i++)
		pr->fields[i].type = record->types[i];
	return pr;
}

/* The record a path goes on into: t itself, or the one of a union with null. */
static const ScAvroNode *
sc_avro_path_record(const ScAvroNode *t)
{
	const ScAvroNode *record = NULL;

	if (t->kind == SC_AVRO_RECORD)
		return t;
	if (t->kind != SC_AVRO_UNION)
		return NULL;
	for (int i = 0; i < t->n; i++)
	{
		if (t->types[i]->kind == SC_AVRO_NULL)
			continue;
		if (t->types[i]->kind != SC_AVRO_RECORD || record != NULL)
			return NULL;
		record = t->types[i];
	}
	return record;
}

/* The classes of text a type writes (SC_VALUE_*), its name into name. */
static int
sc_avro_type_classes(const ScAvroNode *t, StringInfo name)
{
	int			classes = 0;

	switch (t->logical)
	{
		case SC_AVRO_DATE:
			appendStringInfoString(name, "date");
			return SC_VALUE_TIME;
		case SC_AVRO_TIME_MILLIS:
		case SC_AVRO_TIME_MICROS:
			appendStringInfoString(name, "time");
			return SC_VALUE_TIME;
		case SC_AVRO_TS_MILLIS:
		case SC_AVRO_TS_MICROS:
		case SC_AVRO_LOCAL_TS_MILLIS:
		case SC_AVRO_LOCAL_TS_MICROS:
			appendStringInfoString(name, "timestamp");
			return SC_VALUE_TIME;
		case SC_AVRO_DECIMAL:
			appendStringInfoString(name, "decimal");
			return SC_VALUE_NUMBER;
		case SC_AVRO_PLAIN:
			break;
	}
	switch (t->kind)
	{
		case SC_AVRO_NULL:
			appendStringInfoString(name, "null");
			return 0;
		case SC_AVRO_BOOLEAN:
			classes = SC_VALUE_BOOL;
			break;
		case SC_AVRO_INT:
		case SC_AVRO_LONG:
		case SC_AVRO_FLOAT:
		case SC_AVRO_DOUBLE:
			classes = SC_VALUE_NUMBER;
			break;
		case SC_AVRO_STRING:
		case SC_AVRO_ENUM:
			classes = SC_VALUE_STRING;
			break;
		case SC_AVRO_BYTES:
		case SC_AVRO_FIXED:
			classes = SC_VALUE_BYTES;
			break;
		case SC_AVRO_RECORD:
		case SC_AVRO_ARRAY:
		case SC_AVRO_MAP:
			classes = SC_VALUE_JSON;
			break;
		case SC_AVRO_UNION:
			for (int i = 0; i < t->n; i++)
			{
				if (i > 0)
					appendStringInfoString(name, " or ");
				classes |= sc_avro_type_classes(t->types[i], name);
			}
			return classes;
	}
	appendStringInfoString(name, sc_avro_kind_names[t->kind]);
	return classes;
}

/*
 * The classes of text the field at path writes (SC_VALUE_*, a union's
 * branches together), and its type's name into *type_name; -1 when the
 * schema has no field there.
 */
int
sc_avro_path_classes(const ScAvroSchema *schema, char **path, int pathlen, char **type_name)
{
	const ScAvroNode *record = schema->top;
	const ScAvroNode *field = record;
	StringInfoData name;

	for (int l = 0; l < pathlen; l++)
	{
		field = NULL;
		if (record == NULL)
			return -1;
		for (int i = 0; i < record->n && field == NULL; i++)
			if (strcmp(record->names[i], path[l]) == 0)
				field = record->types[i];
		if (field == NULL)
			return -1;
		record = sc_avro_path_record(field);
	}
	initStringInfo(&name);
	{
		int			classes = sc_avro_type_classes(field, &name);

		*type_name = name.data;
		return classes;
	}
}

/*
 * Does the schema have a field at path, names into nested records (through
 * unions of null and a record)?  For checks at a cube's creation.
 */
bool
sc_avro_has_path(const ScAvroSchema *schema, char **path, int pathlen)
{
	const ScAvroNode *record = schema->top;

	for (int l = 0; l < pathlen; l++)
	{
		const ScAvroNode *field = NULL;

		if (record == NULL)
			return false;
		for (int i = 0; i < record->n && field == NULL; i++)
			if (strcmp(record->names[i], path[l]) == 0)
				field = record->types[i];
		if (field == NULL)
			return false;
		record = l + 1 < pathlen ? sc_avro_path_record(field) : NULL;
	}
	return true;
}

static const char *
sc_avro_path_text(char **const path, int len)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < len; i++)
		appendStringInfo(&buf, "%s%s", i > 0 ? "." : "", path[i]);
	return buf.data;
}

ScAvroPlan *
sc_avro_plan(const ScAvroSchema *schema, int ncolumns, char **const *paths,
			 const int *pathlens, char **error)
{
	ScAvroPlan *plan = palloc0(sizeof(ScAvroPlan));

	plan->schema = schema;
	plan->ncolumns = ncolumns;
	plan->top = sc_avro_plan_record_new(schema->top);
	plan->whole = palloc0(sizeof(int) * (ncolumns + 1));

	for (int c = 0; c < ncolumns; c++)
	{
		ScAvroPlanRecord *pr = plan->top;

		if (pathlens[c] == 0)
		{
			plan->whole[plan->nwhole++] = c;
			continue;
		}
		for (int level = 0; level < pathlens[c]; level++)
		{
			const ScAvroNode *record = pr->record;
			ScAvroPlanField *f = NULL;
			const ScAvroNode *inner;

			for (int i = 0; i < record->n; i++)
				if (strcmp(record->names[i], paths[c][level]) == 0)
					f = &pr->fields[i];
			if (f == NULL)
				break;			/* not in this schema: NULL */
			if (level == pathlens[c] - 1)
			{
				f->cols = f->cols ? repalloc(f->cols, sizeof(int) * (f->ncols + 1)) :
					palloc(sizeof(int));
				f->cols[f->ncols++] = c;
				break;
			}
			inner = sc_avro_path_record(f->type);
			if (inner == NULL)
			{
				*error = psprintf("field \"%s\" is of type %s, not a record: there is no field \"%s\" in it",
								  sc_avro_path_text(paths[c], level + 1),
								  sc_avro_kind_names[f->type->kind],
								  paths[c][level + 1]);
				return NULL;
			}
			if (f->sub == NULL)
				f->sub = sc_avro_plan_record_new(inner);
			pr = f->sub;
		}
	}
	return plan;
}
