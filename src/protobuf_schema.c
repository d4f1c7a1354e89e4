/*-------------------------------------------------------------------------
 *
 * protobuf_schema.c
 *		A Protobuf schema with what it imports (sc_proto_parse): each file
 *		read in its form, .proto text or a FileDescriptorProto, its imports
 *		found among the references or the well-known types built in; then
 *		every type name resolved and every enum and message finished for
 *		decoding, with the text a field absent reads as.
 *
 * Which fields read as their default when absent, and which as NULL, is
 * said in protobuf.c (Presence).
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "mb/pg_wchar.h"
#include "protobuf_internal.h"
#include "utils/float.h"

/* Files one schema may import, at any depth. */
#define SC_PB_MAX_FILES 1000

/* Fields of one message type (a field's index is an int16). */
#define SC_PB_MAX_FIELDS 30000

/* ----------------------------------------------------------------
 * The well-known types, built in
 * ----------------------------------------------------------------
 */
static const struct
{
	const char *name;
	const char *text;
}			sc_pb_builtin[] =
{
	{"google/protobuf/timestamp.proto",
		"syntax = \"proto3\"; package google.protobuf;"
		"message Timestamp { int64 seconds = 1; int32 nanos = 2; }"},
	{"google/protobuf/duration.proto",
		"syntax = \"proto3\"; package google.protobuf;"
		"message Duration { int64 seconds = 1; int32 nanos = 2; }"},
	{"google/protobuf/wrappers.proto",
		"syntax = \"proto3\"; package google.protobuf;"
		"message DoubleValue { double value = 1; }"
		"message FloatValue { float value = 1; }"
		"message Int64Value { int64 value = 1; }"
		"message UInt64Value { uint64 value = 1; }"
		"message Int32Value { int32 value = 1; }"
		"message UInt32Value { uint32 value = 1; }"
		"message BoolValue { bool value = 1; }"
		"message StringValue { string value = 1; }"
		"message BytesValue { bytes value = 1; }"},
	{"google/protobuf/empty.proto",
		"syntax = \"proto3\"; package google.protobuf; message Empty {}"},
	{"google/protobuf/struct.proto",
		"syntax = \"proto3\"; package google.protobuf;"
		"message Struct { map<string, Value> fields = 1; }"
		"message Value { oneof kind { NullValue null_value = 1; double number_value = 2;"
		" string string_value = 3; bool bool_value = 4; Struct struct_value = 5;"
		" ListValue list_value = 6; } }"
		"enum NullValue { NULL_VALUE = 0; }"
		"message ListValue { repeated Value values = 1; }"},
	{"google/protobuf/any.proto",
		"syntax = \"proto3\"; package google.protobuf;"
		"message Any { string type_url = 1; bytes value = 2; }"},
	{"google/protobuf/field_mask.proto",
		"syntax = \"proto3\"; package google.protobuf;"
		"message FieldMask { repeated string paths = 1; }"},
};

/* ----------------------------------------------------------------
 * Loading files, resolving names
 * ----------------------------------------------------------------
 */

/*
 * Is text base64 rather than .proto text?  Base64 has only its alphabet
 * and line breaks; any .proto text that defines something has a space, a
 * ";", a "{" or a quote.
 */
static bool
sc_pb_looks_base64(const char *text)
{
	int			n = 0;

	for (const char *s = text; *s; s++)
	{
		if (*s == '\n' || *s == '\r')
			continue;
		if (!(isalnum((unsigned char) *s) || *s == '+' || *s == '/' || *s == '=' ||
			  *s == '-' || *s == '_'))
			return false;
		n++;
	}
	return n > 0;
}

static ScPbFile *
sc_pb_load(ScPbParse *ps, const char *name, const char *text)
{
	ScPbFile   *file = palloc0(sizeof(ScPbFile));
	const char *where = name ? psprintf("imported file \"%s\"", name) : "the schema";
	ListCell   *lc;

	file->name = name;
	file->package = "";
	file->syntax = 2;
	if (list_length(ps->files) >= SC_PB_MAX_FILES)
	{
		sc_pb_parse_fail(ps, "more than %d imported files", SC_PB_MAX_FILES);
		return NULL;
	}
	if (!pg_verify_mbstr(PG_UTF8, text, strlen(text), true))
	{
		sc_pb_parse_fail(ps, "%s is not valid UTF-8", where);
		return NULL;
	}
	if (sc_pb_looks_base64(text))
	{
		size_t		len;
		uint8	   *bytes = sc_pb_base64_decode(text, &len);

		if (bytes == NULL)
		{
			sc_pb_parse_fail(ps, "%s is neither .proto text nor the base64 of a FileDescriptorProto", where);
			return NULL;
		}
		if (!sc_pb_desc_file(ps, file, bytes, len, where))
			return NULL;
	}
	else if (!sc_pb_text_file(ps, file, text, where))
		return NULL;
	ps->files = lappend(ps->files, file);

	/* what it imports, each once */
	ps->loading = lappend(ps->loading, (void *) (name ? name : ""));
	foreach(lc, file->imports)
	{
		const char *imp = lfirst(lc);
		const char *imptext = NULL;
		ListCell   *lc2;
		bool		done = false;

		foreach(lc2, ps->loading)
			if (strcmp(lfirst(lc2), imp) == 0)
			{
				sc_pb_parse_fail(ps, "%s: import \"%s\" makes a cycle", where, imp);
				return NULL;
			}
		foreach(lc2, ps->files)
		{
			ScPbFile   *f = lfirst(lc2);

			if (f->name != NULL && strcmp(f->name, imp) == 0)
				done = true;
		}
		if (done)
			continue;
		for (int i = 0; i < ps->nrefs && imptext == NULL; i++)
			if (ps->ref_names[i] != NULL && strcmp(ps->ref_names[i], imp) == 0)
				imptext = ps->ref_texts[i];
		for (int i = 0; i < lengthof(sc_pb_builtin) && imptext == NULL; i++)
			if (strcmp(sc_pb_builtin[i].name, imp) == 0)
				imptext = sc_pb_builtin[i].text;
		if (imptext == NULL)
		{
			sc_pb_parse_fail(ps, "%s imports \"%s\", which is neither among its references nor a well-known type built in",
							 where, imp);
			return NULL;
		}
		if (sc_pb_load(ps, imp, imptext) == NULL)
			return NULL;
	}
	ps->loading = list_delete_last(ps->loading);
	return file;
}

static int
sc_pb_symbol_cmp(const void *a, const void *b)
{
	return strcmp(((const ScPbSymbol *) a)->name, ((const ScPbSymbol *) b)->name);
}

static ScPbSymbol *
sc_pb_symbol(const ScProtoSchema *schema, const char *name)
{
	ScPbSymbol	key = {.name = name};

	return bsearch(&key, schema->symbols, schema->nsymbols, sizeof(ScPbSymbol), sc_pb_symbol_cmp);
}

/*
 * A type name as written in scope (a message's full name): ".a.B" is full;
 * else it is looked for in the scope, then in each scope outside it, out
 * to the root.
 */
static ScPbSymbol *
sc_pb_resolve(const ScProtoSchema *schema, const char *scope, const char *name)
{
	char	   *s;

	if (name[0] == '.')
		return sc_pb_symbol(schema, name + 1);
	s = pstrdup(scope);
	for (;;)
	{
		ScPbSymbol *sym = sc_pb_symbol(schema, s[0] ? psprintf("%s.%s", s, name) : name);
		char	   *dot;

		if (sym != NULL || s[0] == '\0')
			return sym;
		dot = strrchr(s, '.');
		if (dot)
			*dot = '\0';
		else
			s[0] = '\0';
	}
}

/* Where a message is, for errors. */
static const char *
sc_pb_where(const ScPbMessage *m, const ScPbField *f)
{
	const char *file = m->file->name ? psprintf("imported file \"%s\"", m->file->name) : "the schema";

	if (f != NULL && f->line > 0)
		return psprintf("%s, line %d: message \"%s\", field \"%s\"", file, f->line, m->fullname, f->name);
	if (f != NULL)
		return psprintf("%s: message \"%s\", field \"%s\"", file, m->fullname, f->name);
	return psprintf("%s: message \"%s\"", file, m->fullname);
}

/*
 * The text of field f's default v, a number (NULL: its type's, 0), into
 * text, and for a float its JSON into json too.  Returns the name of the
 * type v is no valid value of, or NULL when it is one.
 */
static const char *
sc_pb_default_number(const ScPbField *f, const char *v, StringInfo text, StringInfo json)
{
	const char *bad = NULL;

	switch (f->type)
	{
		case SC_PB_INT32:
		case SC_PB_SINT32:
		case SC_PB_SFIXED32:
		case SC_PB_INT64:
		case SC_PB_SINT64:
		case SC_PB_SFIXED64:
			{
				bool		is32 = (f->type == SC_PB_INT32 || f->type == SC_PB_SINT32 ||
									f->type == SC_PB_SFIXED32);
				int64		x = 0;

				if (v != NULL)
				{
					char	   *end;

					errno = 0;
					x = strtoll(v, &end, 0);
					if (errno != 0 || *end != '\0' || end == v ||
						(is32 && (x < PG_INT32_MIN || x > PG_INT32_MAX)))
						bad = sc_pb_type_names[f->type];
				}
				sc_pb_int64(text, x);
				break;
			}
		case SC_PB_UINT32:
		case SC_PB_FIXED32:
		case SC_PB_UINT64:
		case SC_PB_FIXED64:
			{
				uint64		x = 0;

				if (v != NULL)
				{
					char	   *end;

					errno = 0;
					x = strtoull(v, &end, 0);
					if (errno != 0 || *end != '\0' || end == v || strchr(v, '-') != NULL ||
						((f->type == SC_PB_UINT32 || f->type == SC_PB_FIXED32) && x > PG_UINT32_MAX))
						bad = sc_pb_type_names[f->type];
				}
				sc_pb_uint64(text, x);
				break;
			}
		case SC_PB_FLOAT:
		case SC_PB_DOUBLE:
			{
				double		x = 0;

				if (v != NULL)
				{
					char	   *end;

					if (pg_strcasecmp(v, "inf") == 0 || pg_strcasecmp(v, "infinity") == 0)
						x = get_float8_infinity();
					else if (pg_strcasecmp(v, "-inf") == 0 || pg_strcasecmp(v, "-infinity") == 0)
						x = -get_float8_infinity();
					else if (pg_strcasecmp(v, "nan") == 0 || pg_strcasecmp(v, "-nan") == 0)
						x = get_float8_nan();
					else
					{
						x = strtod(v, &end);
						if (*end != '\0' || end == v)
							bad = sc_pb_type_names[f->type];
					}
				}
				sc_text_float(text, x, f->type == SC_PB_FLOAT, false);
				sc_text_float(json, x, f->type == SC_PB_FLOAT, true);
				break;
			}
		default:
			break;
	}
	return bad;
}

/*
 * The text and JSON of field f absent from a message (def_text, def_json),
 * or none when it reads as NULL.
 */
static bool
sc_pb_defaults(ScPbParse *ps, const ScPbMessage *m, ScPbField *f)
{
	const char *v = f->defval;
	StringInfoData text;
	StringInfoData json;
	const char *bad = NULL;

	if (f->presence || f->label == SC_PB_LABEL_REPEATED ||
		f->type == SC_PB_MESSAGE || f->type == SC_PB_GROUP)
		return true;
	initStringInfo(&text);
	initStringInfo(&json);
	switch (f->type)
	{
		case SC_PB_BOOL:
			if (v != NULL && strcmp(v, "true") != 0 && strcmp(v, "false") != 0)
				bad = "bool";
			appendStringInfoString(&text, v != NULL && strcmp(v, "true") == 0 ? "true" : "false");
			break;
		case SC_PB_STRING:
			if (v != NULL && !pg_verify_mbstr(PG_UTF8, v, f->deflen, true))
				bad = "string (valid UTF-8 without NUL)";
			if (v != NULL)
				appendBinaryStringInfo(&text, v, f->deflen);
			sc_json_string_bytes(&json, text.data, text.len);
			break;
		case SC_PB_BYTES:
			{
				const char *b = "";
				int			n = 0;

				if (v != NULL)
				{
					b = f->def_escaped ? sc_pb_unescape(v, f->deflen, &n) : v;
					if (!f->def_escaped)
						n = f->deflen;
					if (b == NULL)
						return sc_pb_parse_fail(ps, "%s: a bad escape in the default", sc_pb_where(m, f));
				}
				sc_text_hex(&text, (const uint8 *) b, n, false);
				sc_text_base64(&json, (const uint8 *) b, n);
				break;
			}
		case SC_PB_ENUM:
			{
				const ScPbEnum *e = f->enumtype;
				const char *name = e->first;

				if (v != NULL)
				{
					int			k;

					/*
					 * the value's number, by the first name declared for it (an
					 * alias prints as that name, as when the number comes in
					 * a message)
					 */
					name = NULL;
					for (k = 0; k < list_length(e->lnames); k++)
						if (strcmp(list_nth(e->lnames, k), v) == 0)
							break;
					if (k == list_length(e->lnames))
						return sc_pb_parse_fail(ps, "%s: default \"%s\" is not a value of enum \"%s\"",
												sc_pb_where(m, f), v, e->fullname);
					name = sc_pb_enum_name(e, list_nth_int(e->lnumbers, k));
				}
				if (name != NULL)
				{
					appendStringInfoString(&text, name);
					sc_json_string_bytes(&json, name, strlen(name));
				}
				else
					appendStringInfoChar(&text, '0');	/* an enum of no values */
				break;
			}
		default:
			/* the numbers (sc_pb_default_number does nothing for another) */
			bad = sc_pb_default_number(f, v, &text, &json);
			break;
	}
	if (bad != NULL)
		return sc_pb_parse_fail(ps, "%s: default \"%s\" is not a valid %s", sc_pb_where(m, f), v, bad);
	if (f->def_string && f->type != SC_PB_STRING && f->type != SC_PB_BYTES)
		return sc_pb_parse_fail(ps, "%s: a string default for a field of type %s",
								sc_pb_where(m, f), sc_pb_type_names[f->type]);
	f->def_text = text.data;
	f->def_text_len = text.len;
	f->def_json = json.len > 0 ? json.data : text.data;
	return true;
}

static int
sc_pb_int64_cmp(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return x < y ? -1 : x > y;
}

/* An enum's values by number: the first name of each. */
static void
sc_pb_finish_enum(ScPbEnum *e)
{
	int			n = list_length(e->lnames);
	int64	   *pairs = palloc(sizeof(int64) * (n + 1));
	int			k = 0;

	e->numbers = palloc(sizeof(int32) * (n + 1));
	e->names = palloc(sizeof(char *) * (n + 1));
	e->first = n > 0 ? linitial(e->lnames) : NULL;
	/* sort (number, position) pairs: the first declared of a number first */
	for (int i = 0; i < n; i++)
		pairs[i] = ((int64) list_nth_int(e->lnumbers, i) << 32) | (uint32) i;
	qsort(pairs, n, sizeof(int64), sc_pb_int64_cmp);
	for (int i = 0; i < n; i++)
	{
		int32		number = (int32) (pairs[i] >> 32);

		if (k > 0 && e->numbers[k - 1] == number)
			continue;
		e->numbers[k] = number;
		e->names[k] = list_nth(e->lnames, (int) (uint32) pairs[i]);
		k++;
	}
	e->nvalues = k;
}

/* Is m laid out as the well-known type of its name says? */
static ScPbWkt
sc_pb_wkt(const ScPbMessage *m)
{
	static const char *const wrappers[] = {
		"DoubleValue", "FloatValue", "Int64Value", "UInt64Value", "Int32Value",
		"UInt32Value", "BoolValue", "StringValue", "BytesValue"
	};
	static const ScPbType wrapper_types[] = {
		SC_PB_DOUBLE, SC_PB_FLOAT, SC_PB_INT64, SC_PB_UINT64, SC_PB_INT32,
		SC_PB_UINT32, SC_PB_BOOL, SC_PB_STRING, SC_PB_BYTES
	};
	const ScPbField *f = m->fields;
	const char *name;

	if (strncmp(m->fullname, "google.protobuf.", 16) != 0)
		return SC_PB_WKT_NONE;
	name = m->fullname + 16;
	if (strcmp(name, "Timestamp") == 0 || strcmp(name, "Duration") == 0)
	{
		if (m->nfields == 2 && f[0].number == 1 && f[0].type == SC_PB_INT64 &&
			f[0].label != SC_PB_LABEL_REPEATED && f[1].number == 2 &&
			f[1].type == SC_PB_INT32 && f[1].label != SC_PB_LABEL_REPEATED)
			return name[0] == 'T' ? SC_PB_WKT_TIMESTAMP : SC_PB_WKT_DURATION;
		return SC_PB_WKT_NONE;
	}
	for (int i = 0; i < lengthof(wrappers); i++)
		if (strcmp(name, wrappers[i]) == 0)
			return m->nfields == 1 && f[0].number == 1 && f[0].type == wrapper_types[i] &&
				f[0].label != SC_PB_LABEL_REPEATED ? SC_PB_WKT_WRAPPER : SC_PB_WKT_NONE;
	if (strcmp(name, "Empty") == 0)
		return m->nfields == 0 ? SC_PB_WKT_EMPTY : SC_PB_WKT_NONE;
	if (strcmp(name, "Struct") == 0)
		return m->nfields == 1 && f[0].label == SC_PB_LABEL_REPEATED && f[0].message != NULL &&
			f[0].message->map_entry ? SC_PB_WKT_STRUCT : SC_PB_WKT_NONE;
	if (strcmp(name, "ListValue") == 0)
		return m->nfields == 1 && f[0].label == SC_PB_LABEL_REPEATED &&
			f[0].type == SC_PB_MESSAGE ? SC_PB_WKT_LISTVALUE : SC_PB_WKT_NONE;
	if (strcmp(name, "Value") == 0)
	{
		for (int i = 0; i < m->nfields; i++)
			if (f[i].oneof != 0 || f[i].label == SC_PB_LABEL_REPEATED)
				return SC_PB_WKT_NONE;
		return m->nfields > 0 ? SC_PB_WKT_VALUE : SC_PB_WKT_NONE;
	}
	return SC_PB_WKT_NONE;
}

/* A message's fields as an array, their types looked up, their lookups by number. */
static bool
sc_pb_finish_message(ScPbParse *ps, const ScProtoSchema *schema, ScPbMessage *m)
{
	int			n = list_length(m->lfields);
	int32		maxnum = 0;
	int			i = 0;
	ListCell   *lc;

	if (n > SC_PB_MAX_FIELDS)
		return sc_pb_parse_fail(ps, "%s has more than %d fields", sc_pb_where(m, NULL), SC_PB_MAX_FIELDS);
	m->nfields = n;
	m->fields = palloc0(sizeof(ScPbField) * (n + 1));
	foreach(lc, m->lfields)
	{
		ScPbField  *f = &m->fields[i++];

		*f = *(ScPbField *) lfirst(lc);
		if (f->number < 1 || f->number > SC_PB_MAX_FIELD_NUMBER)
			return sc_pb_parse_fail(ps, "%s: field number %d is out of range", sc_pb_where(m, f), f->number);
		for (int k = 0; k < i - 1; k++)
		{
			if (m->fields[k].number == f->number)
				return sc_pb_parse_fail(ps, "%s: field number %d is used twice", sc_pb_where(m, f), f->number);
			if (strcmp(m->fields[k].name, f->name) == 0)
				return sc_pb_parse_fail(ps, "%s: the name is used twice", sc_pb_where(m, f));
		}
		if (f->type_name != NULL && f->message == NULL)
		{
			ScPbSymbol *sym = sc_pb_resolve(schema, m->fullname, f->type_name);

			if (sym == NULL)
				return sc_pb_parse_fail(ps, "%s: unknown type \"%s\"", sc_pb_where(m, f), f->type_name);
			if (sym->enumtype != NULL)
			{
				if (f->type != SC_PB_UNRESOLVED && f->type != SC_PB_ENUM)
					return sc_pb_parse_fail(ps, "%s: \"%s\" is an enum, not a %s", sc_pb_where(m, f),
											f->type_name, sc_pb_type_names[f->type]);
				f->type = SC_PB_ENUM;
				f->enumtype = sym->enumtype;
			}
			else
			{
				if (f->type != SC_PB_UNRESOLVED && f->type != SC_PB_MESSAGE && f->type != SC_PB_GROUP)
					return sc_pb_parse_fail(ps, "%s: \"%s\" is a message, not a %s", sc_pb_where(m, f),
											f->type_name, sc_pb_type_names[f->type]);
				if (f->type == SC_PB_UNRESOLVED)
					f->type = SC_PB_MESSAGE;
				f->message = sym->message;
			}
		}
		if (f->type == SC_PB_UNRESOLVED)
			return sc_pb_parse_fail(ps, "%s: no type", sc_pb_where(m, f));
		if (f->oneof >= m->noneofs && !f->proto3_optional)
			return sc_pb_parse_fail(ps, "%s: oneof index %d out of range", sc_pb_where(m, f), f->oneof);
		if (f->proto3_optional)
			f->oneof = -1;		/* its synthetic oneof has only it */
		if (f->message != NULL && f->message->map_entry && f->label != SC_PB_LABEL_REPEATED)
			return sc_pb_parse_fail(ps, "%s: a map entry type for a field that is not repeated",
									sc_pb_where(m, f));
		f->json_key = sc_json_key(f->name);
		f->wt = sc_pb_type_wt[f->type];
		f->packable = f->label == SC_PB_LABEL_REPEATED && f->wt != SC_PB_WT_LEN &&
			f->wt != SC_PB_WT_SGROUP;
		f->presence = f->label != SC_PB_LABEL_REPEATED &&
			(f->type == SC_PB_MESSAGE || f->type == SC_PB_GROUP || f->oneof >= 0 ||
			 f->proto3_optional);
		/* closed enums and checked strings: by the file declaring each */
		f->closed = f->type == SC_PB_ENUM && f->enumtype->file != NULL &&
			f->enumtype->file->syntax == 2;
		f->utf8 = f->type == SC_PB_STRING && m->file->syntax == 3;
		maxnum = Max(maxnum, f->number);
	}
	m->flat = true;
	for (i = 0; i < n; i++)
		if (m->fields[i].utf8 || m->fields[i].message != NULL || m->fields[i].packable)
			m->flat = false;
	/* each oneof's first member, whose slot says which member is set */
	if (m->noneofs > 0)
	{
		int		   *head = palloc(sizeof(int) * m->noneofs);

		for (i = 0; i < m->noneofs; i++)
			head[i] = -1;
		for (i = 0; i < n; i++)
			if (m->fields[i].oneof >= 0)
			{
				if (head[m->fields[i].oneof] < 0)
					head[m->fields[i].oneof] = i;
				m->fields[i].oneof_head = head[m->fields[i].oneof];
			}
		pfree(head);
	}
	/* field numbers: a table when they are dense enough, else sorted */
	if (maxnum < 4 * n + 64)
	{
		m->ndirect = maxnum + 1;
		m->direct = palloc0(sizeof(int16) * (maxnum + 1));
		for (i = 0; i < n; i++)
			m->direct[m->fields[i].number] = (int16) (i + 1);
	}
	else
	{
		int64	   *pairs = palloc(sizeof(int64) * n);

		for (i = 0; i < n; i++)
			pairs[i] = (int64) m->fields[i].number << 16 | i;
		qsort(pairs, n, sizeof(int64), sc_pb_int64_cmp);
		m->sorted_numbers = palloc(sizeof(int32) * n);
		m->sorted_index = palloc(sizeof(int16) * n);
		for (i = 0; i < n; i++)
		{
			m->sorted_numbers[i] = (int32) (pairs[i] >> 16);
			m->sorted_index[i] = (int16) (pairs[i] & 0xffff);
		}
		pfree(pairs);
	}
	return true;
}

ScProtoSchema *
sc_proto_parse(const char *text, int nrefs, const char *const *ref_names,
			   const char *const *ref_texts, char **error)
{
	ScPbParse	ps = {0};
	ScProtoSchema *schema = palloc0(sizeof(ScProtoSchema));
	int			n = 0;
	ListCell   *lc;

	ps.nrefs = nrefs;
	ps.ref_names = ref_names;
	ps.ref_texts = ref_texts;
	schema->main = sc_pb_load(&ps, NULL, text);
	if (schema->main == NULL)
		goto fail;
	schema->files = ps.files;

	/* every type of every file, by full name */
	schema->symbols = palloc(sizeof(ScPbSymbol) *
							 (list_length(ps.messages) + list_length(ps.allenums) + 1));
	foreach(lc, ps.messages)
	{
		ScPbMessage *m = lfirst(lc);

		schema->symbols[n++] = (ScPbSymbol) {m->fullname, m, NULL};
	}
	foreach(lc, ps.allenums)
	{
		ScPbEnum   *e = lfirst(lc);

		if (list_length(e->lnames) == 0 && e->line > 0)
		{
			sc_pb_parse_fail(&ps, "enum \"%s\" has no values", e->fullname);
			goto fail;
		}
		sc_pb_finish_enum(e);
		schema->symbols[n++] = (ScPbSymbol) {e->fullname, NULL, e};
	}
	schema->nsymbols = n;
	qsort(schema->symbols, n, sizeof(ScPbSymbol), sc_pb_symbol_cmp);
	for (int i = 1; i < n; i++)
		if (strcmp(schema->symbols[i - 1].name, schema->symbols[i].name) == 0)
		{
			sc_pb_parse_fail(&ps, "type \"%s\" is defined twice", schema->symbols[i].name);
			goto fail;
		}

	foreach(lc, ps.messages)
		if (!sc_pb_finish_message(&ps, schema, lfirst(lc)))
			goto fail;
	foreach(lc, ps.messages)
	{
		ScPbMessage *m = lfirst(lc);

		m->wkt = sc_pb_wkt(m);
		for (int i = 0; i < m->nfields; i++)
		{
			ScPbField  *f = &m->fields[i];

			if (f->message != NULL && f->message->map_entry)
			{
				const ScPbMessage *e = f->message;

				if (e->nfields != 2 || e->fields[0].number != 1 || e->fields[1].number != 2)
				{
					sc_pb_parse_fail(&ps, "%s: map entry \"%s\" is not a key 1 and a value 2",
									 sc_pb_where(m, f), e->fullname);
					goto fail;
				}
			}
			if (!sc_pb_defaults(&ps, m, f))
				goto fail;
		}
	}
	return schema;

fail:
	*error = ps.error ? ps.error : pstrdup("the schema cannot be read");
	return NULL;
}
