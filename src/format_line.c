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

#include "utils/memutils.h"

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
	int			need = fe->nends + Max(fc->cube->ncolumns, 1);

	if (need > fe->maxends)
	{
		fe->maxends = Max(need, 2 * fe->maxends);
		fe->ends = fe->ends == NULL
			? MemoryContextAlloc(TopMemoryContext, sizeof(int) * fe->maxends)
			: repalloc(fe->ends, sizeof(int) * fe->maxends);
	}
	fe->asked = fe->nends;
	return fe->ends + fe->nends;
}

/*
 * The line being written does not say where its fields end after all (a
 * field had to be escaped): the direct path splits it.
 */
void
sc_line_field_ends_cancel(ScFormatContext *fc)
{
	fc->ends->asked = -1;
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

