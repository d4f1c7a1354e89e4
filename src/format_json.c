/*-------------------------------------------------------------------------
 *
 * format_json.c
 *		Formats json and jsonb: a JSON object per message, its values taken
 *		by column name or by the key paths of option "fields"; jsonb keeps
 *		the whole document in a jsonb column too.
 *
 * Most messages are flat objects whose strings have no escapes: those are
 * read in place by a scanner of our own (sc_flat_next), which accepts only
 * what PostgreSQL's JSON parser accepts and gives the same values.
 * Anything else goes through pg_parse_json(), which also words the errors.
 * For format jsonb the direct path builds the document's jsonb from a flat
 * object without the parser too (sc_flat_jsonb).
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "format.h"

#include "catalog/pg_type.h"
#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "port/pg_bitutils.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"

/* JSON nested deeper than this is a bad message (pg_parse_json recurses). */
#define SC_MAX_JSON_DEPTH 256

/*
 * The flat path remembers which column the first keys of a message were:
 * the messages of a topic mostly name the same keys in the same order.
 */
#define SC_FLAT_GUESSES 32

/* What the format keeps per cube: buffers reused from message to message. */
typedef struct ScJsonFormat
{
	/* pg_parse_json's path */
	int			max_pathlen;	/* longest key path of a column */
	bool	  **match;			/* [level][column] key-path prefix matches */
	char	  **values;			/* per column, NULL = JSON null or absent */
	bool	   *present;
	const char **capture_start; /* raw capture of nested values, per column */
	int		   *capture_depth;
	StringInfoData strval;		/* the lexer's de-escaped strings */

	/* the flat path (see sc_json_flat_line) */
	bool		flat;			/* every column is a top-level, non-JSON key */
	bool		topic_datum;	/* the only metadata column is the topic, in text
								 * (sc_meta_topic_datum_only) */
	int		   *name_len;		/* per column: length of its key; -1 for metadata */
	const char **flat_value;	/* per column: value bytes, NULL = null/absent */
	int		   *flat_len;
	bool	   *flat_present;
	bool		keys_unique;	/* no two columns read the same key */
	bool	   *name_plain;		/* per column: its key has no quote, backslash
								 * or control character */
	int			guess[SC_FLAT_GUESSES];	/* with keys_unique: the column the
										 * i-th key of the last message was,
										 * if its key is plain; else -1 */
	StringInfoData time_text;	/* the time value of a flat message */
	StringInfoData number;		/* jsonb: a number's text */
} ScJsonFormat;

typedef struct ScJsonState
{
	ScFormatContext *fc;
	ScJsonFormat *jf;
	JsonLexContext *lex;
	int			depth;			/* nesting of the current position */
	bool		not_object;
	int			field_level;	/* depth of the field whose value comes next */
	/* raw capture of nested values (objects, arrays), per column */
	const char **capture_start;
	int		   *capture_depth;
	char	  **values;			/* per column, NULL = JSON null or absent */
	bool	   *present;
} ScJsonState;

/* Does the field just named at this level hold the value of column c? */
static inline bool
sc_json_targets(ScJsonState *st, int level, int c)
{
	return level >= 1 && level <= st->jf->max_pathlen &&
		st->jf->match[level][c] && st->fc->cube->columns[c].pathlen == level;
}

static void
sc_json_begin_nested(ScJsonState *st)
{
	if (st->depth > 0 && st->field_level == st->depth)
	{
		for (int c = 0; c < st->fc->cube->ncolumns; c++)
			if (sc_json_targets(st, st->depth, c))
			{
				st->capture_start[c] = st->lex->token_start;
				st->capture_depth[c] = st->depth + 1;
			}
	}
	st->field_level = -1;
}

static void
sc_json_end_nested(ScJsonState *st)
{
	for (int c = 0; c < st->fc->cube->ncolumns; c++)
		if (st->capture_start[c] != NULL && st->capture_depth[c] == st->depth)
		{
			const char *end = st->lex->prev_token_terminator;

			st->values[c] = pnstrdup(st->capture_start[c], end - st->capture_start[c]);
			st->present[c] = true;
			st->capture_start[c] = NULL;
		}
}

static void
sc_json_object_start(void *state)
{
	ScJsonState *st = state;

	sc_json_begin_nested(st);
	st->depth++;
}

static void
sc_json_object_end(void *state)
{
	ScJsonState *st = state;

	sc_json_end_nested(st);
	st->depth--;
}

static void
sc_json_array_start(void *state)
{
	ScJsonState *st = state;

	if (st->depth == 0)
		st->not_object = true;
	sc_json_begin_nested(st);
	st->depth++;
}

static void
sc_json_field_start(void *state, char *fname, bool isnull)
{
	ScJsonState *st = state;
	ScJsonFormat *jf = st->jf;
	ScCube	   *cube = st->fc->cube;
	int			level = st->depth;

	st->field_level = level;
	if (level > jf->max_pathlen)
		return;
	for (int c = 0; c < cube->ncolumns; c++)
	{
		ScColumn   *col = &cube->columns[c];

		jf->match[level][c] = (level == 1 || jf->match[level - 1][c]) &&
			col->pathlen >= level && strcmp(col->path[level - 1], fname) == 0;
	}
}

static void
sc_json_scalar(void *state, char *token, JsonTokenType tokentype)
{
	ScJsonState *st = state;

	if (st->depth == 0)
	{
		st->not_object = true;
		return;
	}
	if (st->field_level != st->depth)
		return;					/* an array element */
	st->field_level = -1;

	for (int c = 0; c < st->fc->cube->ncolumns; c++)
	{
		if (!sc_json_targets(st, st->depth, c))
			continue;
		st->present[c] = true;
		if (tokentype == JSON_TOKEN_NULL)
			st->values[c] = NULL;
		else if (tokentype == JSON_TOKEN_STRING && st->fc->layout->json_column[c])
		{
			StringInfoData quoted;

			initStringInfo(&quoted);
			escape_json(&quoted, token);
			st->values[c] = quoted.data;
		}
		else
			st->values[c] = token;
	}
}

/*
 * The fast path for the most common message: a flat JSON object whose
 * strings have no escapes.  It reads the message in place, allocates
 * nothing, and finds keys by length and bytes.  It accepts only what
 * PostgreSQL's JSON parser accepts and gives the same values; anything it
 * does not handle (escapes, nested values, control characters, odd
 * numbers, invalid JSON) returns SC_FLAT_FALLBACK, and the message goes
 * through pg_parse_json, which also words the errors.
 */
typedef enum ScFlatResult
{
	SC_FLAT_OK,
	SC_FLAT_FALLBACK
} ScFlatResult;

/* One key and value of a flat object, pointing into the message. */
typedef enum ScFlatKind
{
	SC_FLAT_STRING,				/* value: the bytes between the quotes */
	SC_FLAT_NUMBER,
	SC_FLAT_TRUE,
	SC_FLAT_FALSE,
	SC_FLAT_NULL
} ScFlatKind;

typedef struct ScFlatPair
{
	const char *key;
	int			key_len;
	bool		expected;		/* the key is the one sc_flat_next() was told */
	const char *value;
	int			value_len;
	ScFlatKind	kind;
} ScFlatPair;

/* Where a scan of a flat object is; see sc_flat_next(). */
typedef struct ScFlatIter
{
	const char *p;
	const char *end;
	bool		first;
} ScFlatIter;

typedef enum ScFlatStep
{
	SC_FLAT_PAIR,				/* *pair is the next key and value */
	SC_FLAT_END,				/* the object ended, and the text with it */
	SC_FLAT_NOT_FLAT			/* anything else: pg_parse_json's business */
} ScFlatStep;

static inline const char *
sc_skip_ws(const char *p, const char *end)
{
	/* every white-space byte is at most ' ': most bytes are ruled out at once */
	while (p < end && (unsigned char) *p <= ' ' &&
		   (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/* A JSON number per RFC 8259; returns its end or NULL. */
static inline const char *
sc_scan_number(const char *p, const char *end)
{
	if (p < end && *p == '-')
		p++;
	if (p >= end)
		return NULL;
	if (*p == '0')
		p++;
	else if (*p >= '1' && *p <= '9')
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	else
		return NULL;
	if (p < end && *p == '.')
	{
		p++;
		if (p >= end || *p < '0' || *p > '9')
			return NULL;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < end && (*p == 'e' || *p == 'E'))
	{
		p++;
		if (p < end && (*p == '+' || *p == '-'))
			p++;
		if (p >= end || *p < '0' || *p > '9')
			return NULL;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	}
	return p;
}

/*
 * Which bytes of eight (read little-endian) may stop a plain string: a
 * quote, a backslash or a control character.  Each such byte has its high
 * bit set in the result; a borrow can set it in bytes above one that stops
 * the string too, never below, so the lowest bit set marks the first byte
 * that stops it, and a word with none set holds none.
 */
#define SC_BYTES(b) (UINT64CONST(0x0101010101010101) * (b))
static inline uint64
sc_string_stops(uint64 w)
{
	uint64		quote = w ^ SC_BYTES('"');
	uint64		backslash = w ^ SC_BYTES('\\');

	return (((quote - SC_BYTES(0x01)) & ~quote) |
			((backslash - SC_BYTES(0x01)) & ~backslash) |
			((w - SC_BYTES(0x20)) & ~w)) & SC_BYTES(0x80);
}

/*
 * A string without escapes or control characters; returns its closing
 * quote.  Eight bytes at a time, the last few one by one.
 */
static inline const char *
sc_scan_plain_string(const char *p, const char *end)
{
#ifndef WORDS_BIGENDIAN
	while (end - p >= (ptrdiff_t) sizeof(uint64))
	{
		uint64		w;
		uint64		stops;

		memcpy(&w, p, sizeof(w));
		stops = sc_string_stops(w);
		if (stops != 0)
		{
			p += pg_rightmost_one_pos64(stops) / BITS_PER_BYTE;
			return *p == '"' ? p : NULL;
		}
		p += sizeof(w);
	}
#endif
	for (; p < end; p++)
	{
		unsigned char ch = (unsigned char) *p;

		if (ch == '"')
			return p;
		if (ch == '\\' || ch < 0x20)
			return NULL;
	}
	return NULL;
}

/*
 * The next key and value of a flat object: scalar values only, strings
 * without escapes or control characters.  Shared by the column scan and the
 * direct jsonb build, so both accept exactly the same texts.  expect, when
 * given, is the key the caller thinks comes next (expect_len bytes, none a
 * quote, a backslash or a control character): if the key's bytes are
 * those, followed by its closing quote, it is taken without a scan and
 * pair->expected is set.
 */
static inline ScFlatStep
sc_flat_next(ScFlatIter *it, ScFlatPair *pair, const char *expect, int expect_len)
{
	const char *p = it->p;
	const char *end = it->end;
	const char *key_end;
	const char *value_end;

	if (it->first)
	{
		it->first = false;
		p = sc_skip_ws(p, end);
		if (p >= end || *p != '{')
			return SC_FLAT_NOT_FLAT;
		p = sc_skip_ws(p + 1, end);
		if (p < end && *p == '}')
			return sc_skip_ws(p + 1, end) == end ? SC_FLAT_END : SC_FLAT_NOT_FLAT;
	}
	else
	{
		/* after a value: at its ',' or '}' */
		if (*p == '}')
			return sc_skip_ws(p + 1, end) == end ? SC_FLAT_END : SC_FLAT_NOT_FLAT;
		p = sc_skip_ws(p + 1, end);
	}

	/* "key" : */
	if (p >= end || *p != '"')
		return SC_FLAT_NOT_FLAT;
	pair->key = p + 1;
	pair->expected = false;
	if (expect != NULL && end - pair->key > expect_len && pair->key[expect_len] == '"')
	{
		pair->expected = true;
		for (int i = 0; i < expect_len && pair->expected; i++)
			pair->expected = pair->key[i] == expect[i];
	}
	if (pair->expected)
		key_end = pair->key + expect_len;
	else if ((key_end = sc_scan_plain_string(pair->key, end)) == NULL)
		return SC_FLAT_NOT_FLAT;
	pair->key_len = key_end - pair->key;
	p = sc_skip_ws(key_end + 1, end);
	if (p >= end || *p != ':')
		return SC_FLAT_NOT_FLAT;
	p = sc_skip_ws(p + 1, end);
	if (p >= end)
		return SC_FLAT_NOT_FLAT;

	/* value */
	pair->value = p;
	if (*p == '"')
	{
		pair->value = p + 1;
		if ((value_end = sc_scan_plain_string(pair->value, end)) == NULL)
			return SC_FLAT_NOT_FLAT;
		pair->kind = SC_FLAT_STRING;
		p = value_end + 1;
	}
	else if (*p == '-' || (*p >= '0' && *p <= '9'))
	{
		if ((value_end = sc_scan_number(p, end)) == NULL)
			return SC_FLAT_NOT_FLAT;
		pair->kind = SC_FLAT_NUMBER;
		p = value_end;
	}
	else if (end - p >= 4 && memcmp(p, "true", 4) == 0)
		pair->kind = SC_FLAT_TRUE, value_end = p += 4;
	else if (end - p >= 5 && memcmp(p, "false", 5) == 0)
		pair->kind = SC_FLAT_FALSE, value_end = p += 5;
	else if (end - p >= 4 && memcmp(p, "null", 4) == 0)
		pair->kind = SC_FLAT_NULL, value_end = p += 4;
	else
		return SC_FLAT_NOT_FLAT;	/* nested, or not JSON */
	pair->value_len = value_end - pair->value;

	/* after the value: a delimiter, so "truex" or "1x" is no value */
	p = sc_skip_ws(p, end);
	if (p >= end || (*p != ',' && *p != '}'))
		return SC_FLAT_NOT_FLAT;
	it->p = p;
	return SC_FLAT_PAIR;
}

/* Is the key of pair the key of column c?  Keys are short: no call for them. */
static inline bool
sc_flat_key_is(ScJsonFormat *jf, const ScCube *cube, int c, const ScFlatPair *pair)
{
	const char *name = cube->columns[c].path[0];

	if (jf->name_len[c] != pair->key_len)
		return false;
	if (pair->key_len > 16)
		return memcmp(name, pair->key, pair->key_len) == 0;
	for (int i = 0; i < pair->key_len; i++)
		if (name[i] != pair->key[i])
			return false;
	return true;
}

static inline void
sc_flat_take(ScJsonFormat *jf, int c, const ScFlatPair *pair)
{
	jf->flat_present[c] = true;
	jf->flat_value[c] = pair->kind == SC_FLAT_NULL ? NULL : pair->value;
	jf->flat_len[c] = pair->value_len;
}

static ScFlatResult
sc_json_flat_scan(ScFormatContext *fc, ScJsonFormat *jf, const char *p, const char *end)
{
	ScCube	   *cube = fc->cube;
	ScFlatIter	it = {p, end, true};
	ScFlatPair	pair;
	ScFlatStep	step;
	int			i = 0;
	int			guess = jf->guess[0];

	memset(jf->flat_present, 0, sizeof(bool) * cube->ncolumns);
	memset(jf->flat_value, 0, sizeof(char *) * cube->ncolumns);

	/*
	 * The column the i-th key was last time is expected: when the key is
	 * its name, no other column can be this key, and the key's text needs
	 * no scan.
	 */
	while ((step = sc_flat_next(&it, &pair,
								guess >= 0 ? cube->columns[guess].path[0] : NULL,
								guess >= 0 ? jf->name_len[guess] : 0)) == SC_FLAT_PAIR)
	{
		if (pair.expected)
			sc_flat_take(jf, guess, &pair);
		else
		{
			guess = -1;
			for (int c = 0; c < cube->ncolumns; c++)
				if (sc_flat_key_is(jf, cube, c, &pair))
				{
					sc_flat_take(jf, c, &pair);
					guess = c;
				}
			if (i < SC_FLAT_GUESSES && jf->keys_unique)
				jf->guess[i] = guess >= 0 && jf->name_plain[guess] ? guess : -1;
		}
		i++;
		guess = i < SC_FLAT_GUESSES ? jf->guess[i] : -1;
	}
	return step == SC_FLAT_END ? SC_FLAT_OK : SC_FLAT_FALLBACK;
}

/*
 * The jsonb of a document column (format jsonb), built from a flat object
 * without PostgreSQL's JSON parser: what jsonb_in() would give, byte for
 * byte (keys sorted by length then bytes, a repeated key's last value
 * kept, numbers through numeric_in), in about a third of its time.  False
 * for anything else, which jsonb_in() then reads (and words the errors of).
 * The caller has checked the encoding of the text.
 */
static int
sc_jsonb_pair_cmp(const JsonbPair *a, const JsonbPair *b)
{
	if (a->key.val.string.len != b->key.val.string.len)
		return a->key.val.string.len > b->key.val.string.len ? 1 : -1;
	return memcmp(a->key.val.string.val, b->key.val.string.val, a->key.val.string.len);
}

static int
sc_jsonb_pair_order_cmp(const void *a, const void *b)
{
	int			r = sc_jsonb_pair_cmp(a, b);

	if (r == 0)
		r = ((const JsonbPair *) a)->order > ((const JsonbPair *) b)->order ? -1 : 1;
	return r;
}

static bool
sc_flat_jsonb(ScJsonFormat *jf, const char *p, Datum *result)
{
	size_t		len = strlen(p);
	ScFlatIter	it = {p, p + len, true};
	ScFlatPair	flat;
	ScFlatStep	step;
	JsonbValue	object;
	JsonbPair  *pairs;
	int			n = 0;
	int			max = 16;

	if (len > JENTRY_OFFLENMASK)
		return false;
	pairs = palloc(sizeof(JsonbPair) * max);
	while ((step = sc_flat_next(&it, &flat, NULL, 0)) == SC_FLAT_PAIR)
	{
		JsonbPair  *pair;

		if (n == max)
			pairs = repalloc(pairs, sizeof(JsonbPair) * (max *= 2));
		pair = &pairs[n];
		pair->key.type = jbvString;
		pair->key.val.string.val = (char *) flat.key;
		pair->key.val.string.len = flat.key_len;
		pair->order = n++;
		switch (flat.kind)
		{
			case SC_FLAT_STRING:
				pair->value.type = jbvString;
				pair->value.val.string.val = (char *) flat.value;
				pair->value.val.string.len = flat.value_len;
				break;
			case SC_FLAT_NUMBER:
				resetStringInfo(&jf->number);
				appendBinaryStringInfo(&jf->number, flat.value, flat.value_len);
				pair->value.type = jbvNumeric;
				pair->value.val.numeric =
					DatumGetNumeric(DirectFunctionCall3(numeric_in, CStringGetDatum(jf->number.data),
														ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1)));
				break;
			case SC_FLAT_TRUE:
			case SC_FLAT_FALSE:
				pair->value.type = jbvBool;
				pair->value.val.boolean = flat.kind == SC_FLAT_TRUE;
				break;
			case SC_FLAT_NULL:
				pair->value.type = jbvNull;
				break;
		}
	}
	if (step != SC_FLAT_END)
		return false;

	/* Sorted as jsonb keeps them; of equal keys the later first, then kept. */
	if (n > 32)
		qsort(pairs, n, sizeof(JsonbPair), sc_jsonb_pair_order_cmp);
	else for (int i = 1; i < n; i++)
	{
		JsonbPair	x = pairs[i];
		int			j = i - 1;

		while (j >= 0 && sc_jsonb_pair_cmp(&pairs[j], &x) >= 0)
		{
			pairs[j + 1] = pairs[j];
			j--;
		}
		pairs[j + 1] = x;
	}
	if (n > 1)
	{
		int			kept = 1;

		for (int i = 1; i < n; i++)
			if (sc_jsonb_pair_cmp(&pairs[i], &pairs[kept - 1]) != 0)
				pairs[kept++] = pairs[i];
		n = kept;
	}
	object.type = jbvObject;
	object.val.object.nPairs = n;
	object.val.object.pairs = pairs;
	*result = JsonbPGetDatum(JsonbValueToJsonb(&object));
	return true;
}

/* The line from a successful flat scan; false for a bad message. */
static bool
sc_json_flat_line(ScFormatContext *fc, ScJsonFormat *jf, const ScKafkaMessage *m, StringInfo out,
				  int64 *ts, char **error)
{
	ScCube	   *cube = fc->cube;
	int			t = cube->time_index;

	if (cube->columns[t].meta == SC_META_TIMESTAMP)
	{
		if (!sc_meta_time(fc, m, ts, error))
			return false;
	}
	else if (jf->flat_value[t] == NULL)
	{
		*error = psprintf("time column \"%s\" is %s", cube->columns[t].name,
						  jf->flat_present[t] ? "null" : "missing");
		return false;
	}
	else
	{
		if (!sc_parse_time_bytes(cube, jf->flat_value[t], jf->flat_len[t], &jf->time_text,
								 ts, error))
		{
			*error = psprintf("column \"%s\": %s", cube->columns[t].name, *error);
			return false;
		}
	}

	/* No escapes and no control characters: the bytes go to COPY as they are. */
	if (fc->layout->npayload == cube->ncolumns || (jf->topic_datum && fc->datums))
	{
		/*
		 * No metadata columns, or only the topic for the direct path (a
		 * datum made once per topic): size the line once, then copy the
		 * values in, noting where each ends (the direct path cuts the line
		 * there).
		 */
		int			need = cube->ncolumns;	/* the tabs */
		int		   *ends = sc_line_field_ends(fc);
		char	   *d;

		for (int c = 0; c < cube->ncolumns; c++)
			need += jf->flat_value[c] == NULL ? 2 : jf->flat_len[c];
		enlargeStringInfo(out, need);
		d = out->data + out->len;
		for (int c = 0; c < cube->ncolumns; c++)
		{
			if (c > 0)
				*d++ = '\t';
			if (cube->columns[c].meta != SC_META_NONE)
			{
				/* the topic (sc_line_field_datum, with the line not written yet) */
				fc->ends->given[fc->ends->asked + c] = true;
				fc->ends->datums[fc->ends->asked + c] = sc_meta_topic_datum(fc, m->partition);
				ends[c] = (int) (d - out->data);
			}
			else if (jf->flat_value[c] == NULL)
			{
				memcpy(d, "\\N", 2);
				d += 2;
				ends[c] = ~(int) (d - out->data);
			}
			else
			{
				memcpy(d, jf->flat_value[c], jf->flat_len[c]);
				d += jf->flat_len[c];
				ends[c] = (int) (d - out->data);
			}
		}
		out->len = d - out->data;
		*d = '\0';
	}
	else
		for (int c = 0; c < cube->ncolumns; c++)
		{
			if (c > 0)
				appendStringInfoChar(out, '\t');
			if (cube->columns[c].meta != SC_META_NONE)
			{
				if (!sc_meta_append(fc, out, c, m, error))
					return false;
			}
			else if (jf->flat_value[c] == NULL)
				appendBinaryStringInfo(out, "\\N", 2);
			else
				appendBinaryStringInfo(out, jf->flat_value[c], jf->flat_len[c]);
		}
	sc_line_position(out, '\t', m);
	return true;
}

/*
 * Is the document nested deeper than SC_MAX_JSON_DEPTH?  pg_parse_json()
 * recurses once per level and would exhaust the stack; brackets inside
 * strings do not count.
 */
static bool
sc_json_too_deep(const char *p, size_t len)
{
	int			depth = 0;
	bool		in_string = false;

	for (size_t i = 0; i < len; i++)
	{
		char		ch = p[i];

		if (in_string)
		{
			if (ch == '\\')
				i++;
			else if (ch == '"')
				in_string = false;
		}
		else if (ch == '"')
			in_string = true;
		else if (ch == '{' || ch == '[')
		{
			if (++depth > SC_MAX_JSON_DEPTH)
				return true;
		}
		else if (ch == '}' || ch == ']')
			depth--;
	}
	return false;
}

/*
 * Parse one JSON message into a COPY text line.  Returns false with *error
 * set for a bad message; *ts receives the time value.
 */
static bool
sc_json_line(ScFormatContext *fc, const ScKafkaMessage *m, StringInfo out, int64 *ts, char **error)
{
	ScCube	   *cube = fc->cube;
	ScJsonFormat *jf = fc->state;
	ScJsonState st;
	JsonLexContext lex;
	JsonSemAction sem;
	JsonParseErrorType res;
	const char *time_value;
	ScKafkaMessage unframed;

	/*
	 * JSON Schema serializers frame a message as Confluent's wire format
	 * does: a 0 byte and a 4-byte schema id before the document.  No JSON
	 * document starts with a 0 byte, so the frame is skipped unread.
	 */
	if (m->payload != NULL && m->len > 5 && m->payload[0] == '\0')
	{
		unframed = *m;
		unframed.payload += 5;
		unframed.len -= 5;
		m = &unframed;
	}

	if (m->payload != NULL && jf->flat &&
		sc_json_flat_scan(fc, jf, m->payload, m->payload + m->len) == SC_FLAT_OK)
		return sc_json_flat_line(fc, jf, m, out, ts, error);

	memset(&st, 0, sizeof(st));
	st.fc = fc;
	st.jf = jf;
	st.field_level = -1;
	st.values = jf->values;
	st.present = jf->present;
	st.capture_start = jf->capture_start;
	st.capture_depth = jf->capture_depth;
	memset(st.values, 0, sizeof(char *) * cube->ncolumns);
	memset(st.present, 0, sizeof(bool) * cube->ncolumns);
	memset(st.capture_start, 0, sizeof(char *) * cube->ncolumns);

	/* What makeJsonLexContextCstringLen() does, without allocating. */
	memset(&lex, 0, sizeof(lex));
	lex.input = lex.token_terminator = lex.line_start = (char *) m->payload;
	lex.line_number = 1;
	lex.input_length = (int) m->len;
	lex.input_encoding = GetDatabaseEncoding();
	lex.strval = &jf->strval;
	st.lex = &lex;

	memset(&sem, 0, sizeof(sem));
	sem.semstate = &st;
	sem.object_start = sc_json_object_start;
	sem.object_end = sc_json_object_end;
	sem.array_start = sc_json_array_start;
	sem.array_end = sc_json_object_end;
	sem.object_field_start = sc_json_field_start;
	sem.scalar = sc_json_scalar;

	if (m->len == 0 || m->payload == NULL)
	{
		*error = "message is empty";
		return false;
	}
	if (sc_json_too_deep(m->payload, m->len))
	{
		*error = psprintf("JSON nested deeper than %d levels", SC_MAX_JSON_DEPTH);
		return false;
	}
	res = pg_parse_json(&lex, &sem);
	if (res != JSON_SUCCESS)
	{
		*error = psprintf("invalid JSON: %s", json_errdetail(res, &lex));
		return false;
	}
	if (st.not_object)
	{
		*error = "message is not a JSON object";
		return false;
	}

	time_value = st.values[cube->time_index];
	if (cube->columns[cube->time_index].meta == SC_META_TIMESTAMP)
	{
		if (!sc_meta_time(fc, m, ts, error))
			return false;
	}
	else if (time_value == NULL)
	{
		*error = psprintf("time column \"%s\" is %s", cube->columns[cube->time_index].name,
						  st.present[cube->time_index] ? "null" : "missing");
		return false;
	}
	else if (!sc_parse_time(cube, time_value, ts, error))
	{
		*error = psprintf("column \"%s\": %s", cube->columns[cube->time_index].name, *error);
		return false;
	}

	for (int c = 0; c < cube->ncolumns; c++)
	{
		if (c > 0)
			appendStringInfoChar(out, '\t');
		if (cube->columns[c].meta != SC_META_NONE)
		{
			if (!sc_meta_append(fc, out, c, m, error))
				return false;
		}
		else if (st.values[c] == NULL)
			appendBinaryStringInfo(out, "\\N", 2);
		else
			sc_line_text_bytes(out, st.values[c], strlen(st.values[c]));
	}
	sc_line_position(out, '\t', m);
	return true;
}

/* ----------------------------------------------------------------
 * The routines
 * ----------------------------------------------------------------
 */
static void *
sc_json_setup(ScFormatContext *fc)
{
	ScCube	   *cube = fc->cube;
	int			n = Max(cube->ncolumns, 1);
	ScJsonFormat *jf = palloc0(sizeof(ScJsonFormat));

	jf->max_pathlen = 1;
	for (int c = 0; c < cube->ncolumns; c++)
		jf->max_pathlen = Max(jf->max_pathlen, cube->columns[c].pathlen);
	jf->match = palloc(sizeof(bool *) * (jf->max_pathlen + 1));
	for (int l = 0; l <= jf->max_pathlen; l++)
		jf->match[l] = palloc0(sizeof(bool) * n);
	jf->values = palloc0(sizeof(char *) * n);
	jf->present = palloc0(sizeof(bool) * n);
	jf->capture_start = palloc0(sizeof(char *) * n);
	jf->capture_depth = palloc0(sizeof(int) * n);
	initStringInfo(&jf->strval);

	jf->name_len = palloc(sizeof(int) * n);
	jf->flat_value = palloc0(sizeof(char *) * n);
	jf->flat_len = palloc0(sizeof(int) * n);
	jf->flat_present = palloc0(sizeof(bool) * n);
	jf->flat = true;
	jf->topic_datum = sc_meta_topic_datum_only(cube);
	for (int c = 0; c < cube->ncolumns; c++)
	{
		if (cube->columns[c].meta != SC_META_NONE)
		{
			jf->name_len[c] = -1;	/* matches no key */
			continue;
		}
		jf->name_len[c] = strlen(cube->columns[c].path[0]);
		if (cube->columns[c].pathlen != 1 || fc->layout->json_column[c])
			jf->flat = false;
	}
	jf->keys_unique = true;
	jf->name_plain = palloc0(sizeof(bool) * n);
	for (int c = 0; c < cube->ncolumns; c++)
	{
		jf->name_plain[c] = jf->name_len[c] >= 0;
		for (int k = 0; k < jf->name_len[c]; k++)
		{
			unsigned char ch = (unsigned char) cube->columns[c].path[0][k];

			if (ch == '"' || ch == '\\' || ch < 0x20)
				jf->name_plain[c] = false;
		}
	}
	for (int c = 0; c < cube->ncolumns; c++)
		for (int d = 0; d < c; d++)
			if (jf->name_len[c] >= 0 && jf->name_len[c] == jf->name_len[d] &&
				strcmp(cube->columns[c].path[0], cube->columns[d].path[0]) == 0)
				jf->keys_unique = false;
	for (int i = 0; i < SC_FLAT_GUESSES; i++)
		jf->guess[i] = -1;
	initStringInfo(&jf->time_text);
	initStringInfo(&jf->number);
	return jf;
}

static void *
sc_jsonb_setup(ScFormatContext *fc)
{
	/* the document column's jsonb is built by sc_jsonb_datum() */
	if (fc->layout->doc_index >= 0)
	{
		fc->layout->format_datum = palloc0(sizeof(bool) * fc->cube->ncolumns);
		fc->layout->format_datum[fc->layout->doc_index] = true;
	}
	return sc_json_setup(fc);
}

static bool
sc_jsonb_datum(ScFormatContext *fc, int c, const char *field, Datum *value)
{
	return sc_flat_jsonb(fc->state, field, value);
}

const ScFormatRoutine sc_format_json = {
	.name = "json",
	.encoding = SC_LINE_TEXT,
	.setup = sc_json_setup,
	.line = sc_json_line,
	.split = sc_line_split_text,
	.datum = NULL,
};

const ScFormatRoutine sc_format_jsonb = {
	.name = "jsonb",
	.encoding = SC_LINE_TEXT,
	.setup = sc_jsonb_setup,
	.line = sc_json_line,
	.split = sc_line_split_text,
	.datum = sc_jsonb_datum,
};
