/*-------------------------------------------------------------------------
 *
 * json_text.c
 *		The text the decoders of formats with schemas (avro.c, protobuf.c)
 *		both write: JSON strings and keys, bytes as bytea's hex or as
 *		base64, floats, the civil date of a day.  One of each, for both.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "common/base64.h"
#include "common/shortest_dec.h"
#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "utils/builtins.h"

#include <math.h>

/* s, len bytes of valid UTF-8 without NUL, as a JSON string. */
void
sc_json_string_bytes(StringInfo out, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t		run = 0;

	enlargeStringInfo(out, len + 2);
	appendStringInfoCharMacro(out, '"');
	for (size_t i = 0; i < len; i++)
	{
		unsigned char c = s[i];
		char		esc[7];
		int			n = 2;

		if (likely(c >= 0x20 && c != '"' && c != '\\'))
			continue;
		appendBinaryStringInfo(out, s + run, i - run);
		run = i + 1;
		esc[0] = '\\';
		switch (c)
		{
			case '"':
			case '\\':
				esc[1] = c;
				break;
			case '\b':
				esc[1] = 'b';
				break;
			case '\f':
				esc[1] = 'f';
				break;
			case '\n':
				esc[1] = 'n';
				break;
			case '\r':
				esc[1] = 'r';
				break;
			case '\t':
				esc[1] = 't';
				break;
			default:
				memcpy(esc + 1, "u00", 3);
				esc[4] = hex[c >> 4];
				esc[5] = hex[c & 15];
				n = 6;
				break;
		}
		appendBinaryStringInfo(out, esc, n);
	}
	appendBinaryStringInfo(out, s + run, len - run);
	appendStringInfoCharMacro(out, '"');
}

/* "\"name\":" with the name (valid UTF-8) JSON-escaped, in the caller's context. */
const char *
sc_json_key(const char *name)
{
	StringInfoData buf;

	initStringInfo(&buf);
	sc_json_string_bytes(&buf, name, strlen(name));
	appendStringInfoChar(&buf, ':');
	return buf.data;
}

/* bytea's input: "\x" and lowercase hex (hex_encode); in JSON, quoted and the backslash escaped. */
void
sc_text_hex(StringInfo out, const uint8 *b, size_t n, bool json)
{
	enlargeStringInfo(out, 2 * n + 5);
	if (json)
		appendBinaryStringInfo(out, "\"\\\\x", 4);
	else
		appendBinaryStringInfo(out, "\\x", 2);
	out->len += hex_encode((const char *) b, n, out->data + out->len);
	if (json)
		out->data[out->len++] = '"';
	out->data[out->len] = '\0';
}

/* Bytes in JSON as the proto3 JSON mapping writes them: standard base64, padded, quoted. */
void
sc_text_base64(StringInfo out, const uint8 *b, size_t n)
{
	int			len = pg_b64_enc_len((int) n);

	enlargeStringInfo(out, len + 3);
	out->data[out->len++] = '"';
	if (n > 0)
		out->len += pg_b64_encode((const char *) b, (int) n, out->data + out->len, len);
	out->data[out->len++] = '"';
	out->data[out->len] = '\0';
}

/* A float's or double's shortest exact text; in JSON, NaN and infinities quoted. */
void
sc_text_float(StringInfo out, double v, bool single, bool json)
{
	bool		quote = json && (isnan(v) || isinf(v));

	enlargeStringInfo(out, DOUBLE_SHORTEST_DECIMAL_LEN + 2);
	if (quote)
		appendStringInfoCharMacro(out, '"');
	if (single)
		out->len += float_to_shortest_decimal_buf((float) v, out->data + out->len);
	else
		out->len += double_to_shortest_decimal_buf(v, out->data + out->len);
	if (quote)
		appendStringInfoCharMacro(out, '"');
}

void
sc_decode_share(StringInfo *values, bool *isnull, const int *cols, int n, int from)
{
	StringInfo	first = values[cols[0]];

	for (int k = 0; k < n; k++)
	{
		isnull[cols[k]] = false;
		if (k > 0)
			appendBinaryStringInfo(values[cols[k]], first->data + from, first->len - from);
	}
}

/*
 * The proleptic Gregorian date of a day counted from 1970-01-01: days
 * shifted to count from 0000-03-01 (so that a leap day ends its year),
 * split into 400-year eras of 146097 days, each era into years of 365
 * days with a leap day every 4 years but every 100 but every 400.  The
 * last day asked for is kept: a stream's messages mostly come from one.
 */
void
sc_text_civil(int64 days, int64 *year, int *month, int *day)
{
	static int64 last_days = PG_INT64_MIN;
	static int64 last_year;
	static int	last_month;
	static int	last_day;
	int64		z = days + 719468;
	int64		era;
	int64		doe;
	int64		yoe;
	int64		doy;
	int64		mp;

	if (days == last_days)
	{
		*year = last_year;
		*month = last_month;
		*day = last_day;
		return;
	}
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*day = (int) (doy - (153 * mp + 2) / 5 + 1);
	*month = (int) (mp < 10 ? mp + 3 : mp - 9);
	*year = yoe + era * 400 + (*month <= 2 ? 1 : 0);
	last_days = days;
	last_year = *year;
	last_month = *month;
	last_day = *day;
}

/* ----------------------------------------------------------------
 * The first failure of a decoder (ScDecodeFailure)
 * ----------------------------------------------------------------
 */
bool
sc_decode_failv(ScDecodeFailure *f, size_t at, const char *fmt, va_list args)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (;;)
	{
		va_list		copy;
		int			needed;

		va_copy(copy, args);
		needed = appendStringInfoVA(&buf, fmt, copy);
		va_end(copy);
		if (needed == 0)
			break;
		enlargeStringInfo(&buf, needed);
	}
	f->what = buf.data;
	f->at = at;
	return false;
}

/* A failure inside field (or item) name, on the way up. */
bool
sc_decode_fail_in(ScDecodeFailure *f, const char *name)
{
	f->where = lcons(unconstify(char *, name), f->where);
	return false;
}

bool
sc_decode_fail_item(ScDecodeFailure *f, int64 item)
{
	return sc_decode_fail_in(f, psprintf("[" INT64_FORMAT "]", item));
}

char *
sc_decode_error(const ScDecodeFailure *f)
{
	StringInfoData buf;
	ListCell   *lc;

	initStringInfo(&buf);
	if (f->where != NIL)
	{
		appendStringInfoString(&buf, "field \"");
		foreach(lc, f->where)
		{
			const char *name = lfirst(lc);

			if (foreach_current_index(lc) > 0 && name[0] != '[')
				appendStringInfoChar(&buf, '.');
			appendStringInfoString(&buf, name);
		}
		appendStringInfoString(&buf, "\": ");
	}
	appendStringInfo(&buf, "%s (at byte %zu)", f->what, f->at);
	return buf.data;
}
