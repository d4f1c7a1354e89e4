/*-------------------------------------------------------------------------
 *
 * format_line.c
 *		How every format writes values into a line (COPY's text or CSV
 *		encoding, with the escaping each needs), and how the direct path
 *		splits a text-format line into its fields again.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "format.h"

#include "catalog/pg_type.h"
#include "common/shortest_dec.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/float.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

/* ----------------------------------------------------------------
 * Writing values
 * ----------------------------------------------------------------
 */

/*
 * Bytes as a field of COPY's text format: backslash, tab and line ends
 * escaped.  Returns whether any was.
 */
bool
sc_line_text_bytes(StringInfo out, const char *value, size_t len)
{
	const char *start = value;
	const char *end = value + len;
	const char *p;

	for (p = value; p < end; p++)
	{
		const char *esc = NULL;

		switch (*p)
		{
			case '\\':
				esc = "\\\\";
				break;
			case '\t':
				esc = "\\t";
				break;
			case '\n':
				esc = "\\n";
				break;
			case '\r':
				esc = "\\r";
				break;
			default:
				continue;
		}
		appendBinaryStringInfo(out, start, p - start);
		appendStringInfoString(out, esc);
		start = p + 1;
	}
	appendBinaryStringInfo(out, start, p - start);
	return start != value;
}

/* A value in a CSV line, quoted when COPY could read it otherwise. */
static void
sc_line_csv_value(ScFormatContext *fc, StringInfo out, const char *p, size_t len)
{
	ScCube	   *cube = fc->cube;
	char		quote = cube->csv_quote;
	bool		quoted = len == strlen(cube->csv_null) && memcmp(p, cube->csv_null, len) == 0;

	for (size_t i = 0; i < len && !quoted; i++)
		quoted = p[i] == cube->csv_delimiter || p[i] == quote || p[i] == '\n' ||
			p[i] == '\r' || p[i] == '\\';
	if (!quoted)
	{
		appendBinaryStringInfo(out, p, len);
		return;
	}
	appendStringInfoChar(out, quote);
	for (size_t i = 0; i < len; i++)
	{
		if (p[i] == quote)
			appendStringInfoChar(out, quote);
		appendStringInfoChar(out, p[i]);
	}
	appendStringInfoChar(out, quote);
}

/* Values longer than this are bad messages: their line could not be built. */
#define SC_MAX_META_VALUE ((size_t) (MaxAllocSize / 4))

/*
 * One value of a line, in the cube's format; into bytea as its hex form.
 * In a CSV line every metadata value goes through sc_line_csv_value(),
 * so none can be read as the null string or split the line.
 */
bool
sc_line_value_bytes(ScFormatContext *fc, StringInfo out, const char *p, size_t len, bool bytea,
					  char **error)
{
	static const char hex[] = "0123456789abcdef";
	bool		csv = fc->format->encoding == SC_LINE_CSV;
	StringInfo	hexbuf = &fc->hex_buf;

	if (len > SC_MAX_META_VALUE)
	{
		*error = psprintf("a metadata value of %zu bytes is too large for a row", len);
		return false;
	}
	if (!bytea)
	{
		if (csv)
			sc_line_csv_value(fc, out, p, len);
		else
			sc_line_text_bytes(out, p, len);
		return true;
	}

	/* bytea's hex input; COPY's text format needs the backslash doubled. */
	resetStringInfo(hexbuf);
	appendStringInfoString(hexbuf, csv ? "\\x" : "\\\\x");
	enlargeStringInfo(hexbuf, (int) (len * 2));
	for (size_t i = 0; i < len; i++)
	{
		hexbuf->data[hexbuf->len++] = hex[(unsigned char) p[i] >> 4];
		hexbuf->data[hexbuf->len++] = hex[(unsigned char) p[i] & 0xf];
	}
	hexbuf->data[hexbuf->len] = '\0';
	if (csv)
		sc_line_csv_value(fc, out, hexbuf->data, hexbuf->len);
	else
		appendBinaryStringInfo(out, hexbuf->data, hexbuf->len);
	return true;
}

void
sc_line_null(ScFormatContext *fc, StringInfo out)
{
	if (fc->format->encoding == SC_LINE_CSV)
		appendStringInfoString(out, fc->cube->csv_null);
	else
		appendBinaryStringInfo(out, "\\N", 2);
}

/* A short value (a time, a number, a word): quoted in CSV if need be. */
void
sc_line_short(ScFormatContext *fc, StringInfo out, const char *value)
{
	if (fc->format->encoding == SC_LINE_CSV)
		sc_line_csv_value(fc, out, value, strlen(value));
	else
		appendStringInfoString(out, value);
}

/*
 * Where the fields of the line being written end (see format.h): the
 * entries of line nlines, the next one kept.  A look ahead for missing
 * windows (sc_peek_message) writes lines after the last one kept, which
 * is why there is room for one line more than the batch has messages.
 */
int *
sc_line_field_ends(ScFormatContext *fc)
{
	ScFieldEnds *fe = fc->ends;
	int			ncols = Max(fc->cube->ncolumns, 1);
	int			need = fe->nends + ncols;

	if (need > fe->maxends)
	{
		fe->maxends = Max(need, 2 * fe->maxends);
		if (fe->ends == NULL)
		{
			fe->ends = MemoryContextAlloc(TopMemoryContext, sizeof(int) * fe->maxends);
			fe->given = MemoryContextAlloc(TopMemoryContext, sizeof(bool) * fe->maxends);
			fe->datums = MemoryContextAlloc(TopMemoryContext, sizeof(Datum) * fe->maxends);
		}
		else
		{
			fe->ends = repalloc(fe->ends, sizeof(int) * fe->maxends);
			fe->given = repalloc(fe->given, sizeof(bool) * fe->maxends);
			fe->datums = repalloc(fe->datums, sizeof(Datum) * fe->maxends);
		}
	}
	fe->asked = fe->nends;
	memset(fe->given + fe->asked, 0, sizeof(bool) * ncols);
	return fe->ends + fe->nends;
}

/*
 * The line being written from offset start of out does not say where its
 * fields end after all (a field had to be escaped): the direct path splits
 * it.  The values it gave as datums are written as text in their fields.
 */
void
sc_line_field_ends_cancel(ScFormatContext *fc, StringInfo out, int start)
{
	ScFieldEnds *fe = fc->ends;

	for (int f = 0; f < fc->cube->ncolumns; f++)
		if (fe->given[fe->asked + f])
		{
			resetStringInfo(&fc->render_buf);
			sc_line_render(fc, out->data, start, out->len, fe->asked, &fc->render_buf);
			out->len = start;
			appendBinaryStringInfo(out, fc->render_buf.data, fc->render_buf.len);
			break;
		}
	fe->asked = -1;
}

/* ----------------------------------------------------------------
 * Values as datums
 * ----------------------------------------------------------------
 */

uint16
sc_scalar_takes(Oid type, int32 typmod)
{
	const uint16 ints = SC_SCALAR_BIT(SC_SCALAR_INT) | SC_SCALAR_BIT(SC_SCALAR_UINT);

	/* 8-byte values must be passed by value: a datum lives as long as its line */
	if (!FLOAT8PASSBYVAL)
		return 0;
	switch (type)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
			return ints;
		case BOOLOID:
			return SC_SCALAR_BIT(SC_SCALAR_BOOL);
		case TEXTOID:
			return SC_SCALAR_BIT(SC_SCALAR_TEXT);

			/*
			 * a float's text read as float8 is the nearest double to its
			 * decimal, not the float's value: float4 only
			 */
		case FLOAT4OID:
			return SC_SCALAR_BIT(SC_SCALAR_FLOAT4);
		case FLOAT8OID:
			return SC_SCALAR_BIT(SC_SCALAR_FLOAT8);

			/*
			 * numeric without a typmod: what numeric_in reads of the
			 * number's text (sc_numeric_of_float); a typmod rounds, text
			 */
		case NUMERICOID:
			return typmod < 0 ? ints | SC_SCALAR_BIT(SC_SCALAR_FLOAT4) |
				SC_SCALAR_BIT(SC_SCALAR_FLOAT8) : 0;

			/*
			 * an instant's text has "+00", which timestamp (without time
			 * zone) ignores; a local time's has no zone, which timestamptz
			 * would read in the session's
			 */
		case TIMESTAMPTZOID:
			return typmod < 0 ? SC_SCALAR_BIT(SC_SCALAR_INSTANT) : 0;
		case TIMESTAMPOID:
			return typmod < 0 ? SC_SCALAR_BIT(SC_SCALAR_INSTANT) |
				SC_SCALAR_BIT(SC_SCALAR_LOCAL_TS) : 0;
		default:
			return 0;
	}
}

/*
 * The numeric that numeric_in reads of a float's or double's shortest
 * text, made without numeric_in: the text's digits as an integer m and the
 * places after its point (its exponent counted) k, then m / 10^k, which
 * has k for its display scale as numeric_in gives it (0 when k < 0), and
 * the same digits.  The shortest text of a double has at most 17 digits:
 * m fits in an int64.  False for NaN and the infinities, whose text
 * numeric_in reads to numeric's own.
 */
static bool
sc_numeric_of_float(const ScScalar *s, Datum *value)
{
	char		buf[DOUBLE_SHORTEST_DECIMAL_LEN + 1];
	const char *c = buf;
	bool		neg = false;
	bool		point = false;
	int64		m = 0;
	int			k = 0;
	int			e = 0;

	if (isnan(s->f) || isinf(s->f))
		return false;
	if (s->kind == SC_SCALAR_FLOAT4)
		float_to_shortest_decimal_buf((float) s->f, buf);
	else
		double_to_shortest_decimal_buf(s->f, buf);
	if (*c == '-')
	{
		neg = true;
		c++;
	}
	for (; *c != '\0' && *c != 'e'; c++)
	{
		if (*c == '.')
			point = true;
		else
		{
			m = m * 10 + (*c - '0');
			k += point;
		}
	}
	if (*c == 'e')
		e = (int) strtol(c + 1, NULL, 10);
	*value = NumericGetDatum(int64_div_fast_to_numeric(neg ? -m : m, k - e));
	return true;
}

/*
 * A numeric column's datum: an integer's through int64_to_numeric, a
 * float's or double's as its shortest text would read; false for a uint64
 * beyond bigint (its text then).
 */
bool
sc_scalar_numeric(const ScScalar *s, Datum *value)
{
	if (s->kind == SC_SCALAR_INT)
	{
		*value = NumericGetDatum(int64_to_numeric(s->i));
		return true;
	}
	return s->kind != SC_SCALAR_UINT && sc_numeric_of_float(s, value);
}

bool
sc_scalar_text(const ScScalar *s, StringInfo out)
{
	enlargeStringInfo(out, 24);
	switch (s->kind)
	{
		case SC_SCALAR_INT:
			out->len += pg_lltoa(s->i, out->data + out->len);
			return true;
		case SC_SCALAR_UINT:
			out->len += pg_ulltoa_n((uint64) s->i, out->data + out->len);
			out->data[out->len] = '\0';
			return true;
		case SC_SCALAR_BOOL:
			appendStringInfoString(out, s->i ? "true" : "false");
			return true;
		case SC_SCALAR_FLOAT4:
		case SC_SCALAR_FLOAT8:
			sc_text_float(out, s->f, s->kind == SC_SCALAR_FLOAT4, false);
			return true;
		default:
			return false;
	}
}

/*
 * A column of type text takes the text a decoder wrote as a datum, in the
 * batch's memory (the current context), when it is valid in the database's
 * encoding, as the direct path checks a line: the text is not escaped into
 * the line, split from it and copied again by textin.  False otherwise:
 * the text goes into the line, and is refused there in the usual words.
 */
bool
sc_text_datum(const char *data, int len, Datum *value)
{
	if (!sc_plain_ascii(data, len) &&
		!pg_verify_mbstr(GetDatabaseEncoding(), data, len, true))
		return false;
	*value = PointerGetDatum(cstring_to_text_with_len(data, len));
	return true;
}

/*
 * A datum of type (one sc_scalar_takes takes) as text its input function
 * reads as the same value, whatever the session's settings: shortest
 * exact floats, ISO timestamps (in UTC, with "+00" for timestamptz), text
 * escaped for the line.
 */
static void
sc_datum_text(Oid type, Datum value, StringInfo out)
{
	enlargeStringInfo(out, MAXDATELEN + 1);
	switch (type)
	{
		case INT2OID:
			out->len += pg_ltoa(DatumGetInt16(value), out->data + out->len);
			break;
		case INT4OID:
			out->len += pg_ltoa(DatumGetInt32(value), out->data + out->len);
			break;
		case INT8OID:
			out->len += pg_lltoa(DatumGetInt64(value), out->data + out->len);
			break;
		case BOOLOID:
			appendStringInfoChar(out, DatumGetBool(value) ? 't' : 'f');
			break;
		case TEXTOID:
			sc_line_text_bytes(out, VARDATA_ANY(DatumGetPointer(value)),
							   VARSIZE_ANY_EXHDR(DatumGetPointer(value)));
			break;
		case NUMERICOID:
			appendStringInfoString(out, DatumGetCString(DirectFunctionCall1(numeric_out, value)));
			break;
		case FLOAT4OID:
			sc_text_float(out, DatumGetFloat4(value), true, false);
			break;
		case FLOAT8OID:
			sc_text_float(out, DatumGetFloat8(value), false, false);
			break;
		case TIMESTAMPTZOID:
		case TIMESTAMPOID:
			{
				struct pg_tm tm;
				fsec_t		fsec;

				/* a valid timestamp (sc_scalar_datum): it converts */
				if (timestamp2tm(DatumGetTimestamp(value), NULL, &tm, &fsec, NULL, NULL) != 0)
					elog(ERROR, "timestamp out of range");
				EncodeDateTime(&tm, fsec, type == TIMESTAMPTZOID, 0, NULL, USE_ISO_DATES,
							   out->data + out->len);
				out->len += strlen(out->data + out->len);
				break;
			}
		default:
			elog(ERROR, "no text for a datum of type %u", type);
	}
}

/*
 * Append line [start, end) of base, whose field ends are entries entry..
 * of the batch's (sc_line_field_ends), to dst, with the text of each value
 * given as a datum in its field.
 */
void
sc_line_render(ScFormatContext *fc, const char *base, int start, int end, int entry,
			   StringInfo dst)
{
	ScFieldEnds *fe = fc->ends;
	int			pos = start;

	for (int f = 0; f < fc->cube->ncolumns; f++)
	{
		int			e = fe->ends[entry + f] >= 0 ? fe->ends[entry + f] : ~fe->ends[entry + f];

		appendBinaryStringInfo(dst, base + pos, e - pos);
		if (fe->given[entry + f])
			sc_datum_text(fc->cube->columns[fc->layout->line_col[f]].type, fe->datums[entry + f], dst);
		if (e < end)
			appendStringInfoChar(dst, base[e]);	/* the separator */
		pos = e + 1;
	}
	if (pos < end)
		appendBinaryStringInfo(dst, base + pos, end - pos);
}

/* ----------------------------------------------------------------
 * Reading values: the text format's split (the direct path)
 * ----------------------------------------------------------------
 */

/* The bytes a text-format field ends or escapes at: NUL, tab, newline, backslash. */
static const bool sc_split_stop[256] = {['\0'] = true, ['\t'] = true, ['\n'] = true, ['\\'] = true};

/*
 * Split a line (COPY text format: tab-separated, \N for NULL, backslash
 * escapes) into fields, in place in buf.  Returns the number of fields.
 */
int
sc_line_split_text(ScFormatContext *fc, char *buf, int len, char **fields, int maxfields)
{
	int			n = 0;
	char	   *in = buf;

	for (;;)
	{
		char	   *start = in;
		char	   *out = in;
		bool		is_null = in[0] == '\\' && in[1] == 'N' &&
			(in[2] == '\t' || in[2] == '\n' || in[2] == '\0');
		char		end;

		if (is_null)
			in += 2;
		else
		{
			/*
			 * Most fields escape nothing: skip to the end without copying.
			 * A table, not strcspn(): its set-up per call cost more than
			 * the few bytes of a field (5 % of a narrow row's CPU).
			 */
			while (!sc_split_stop[(unsigned char) *in])
				in++;
			out = in;
		}
		if (!is_null)
			while (*in != '\0' && *in != '\t' && *in != '\n')
			{
				if (*in == '\\' && in[1] != '\0')
				{
					in++;
					switch (*in)
					{
						case 't':
							*out++ = '\t';
							break;
						case 'n':
							*out++ = '\n';
							break;
						case 'r':
							*out++ = '\r';
							break;
						default:
							*out++ = *in;	/* \\ and anything else: the character */
							break;
					}
					in++;
				}
				else
					*out++ = *in++;
			}
		end = *in;				/* before the terminator may overwrite it */
		if (!is_null)
			*out = '\0';
		if (n < maxfields)
			fields[n] = is_null ? NULL : start;
		n++;
		if (end != '\t')
			return n;
		in++;
	}
}

