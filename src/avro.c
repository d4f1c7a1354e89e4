/*-------------------------------------------------------------------------
 *
 * avro.c
 *		Avro binary decoding, written from the Avro 1.11 specification: one
 *		datum decoded, by the plan of its writer schema (avro_schema.c),
 *		into the text of the values the columns take.
 *
 * Avro's binary encoding is not seekable: a value's length is known only
 * by reading it, so every field of every message is read.  The plan
 * (ScAvroPlanRecord) mirrors the records on the columns' paths and says,
 * per field, which columns take it and whether a column's path goes on
 * into it; every other field is skipped by sc_avro_skip, which checks
 * what it can without building anything.  Only wanted values become text.
 *
 * Bad bytes are the data's fault, never an ERROR: every read checks what
 * is left, every length is checked against the bytes left before it is
 * used, and nesting is bounded (recursive schemas nest as deep as the data
 * says).  Values that take no bytes (null, a record of nulls) let a short
 * message stand for many values: a record of k such records, n levels
 * deep, is k^n values in 0 bytes.  So every value read (records and nulls
 * included) is charged to a budget sized from the message's length
 * (SC_AVRO_BUDGET_*), the text one message makes is capped
 * (SC_AVRO_MAX_TEXT), and interrupts are served every SC_AVRO_CHECK_EVERY
 * values; a schema whose value of no bytes is by itself more values than
 * any message's budget is refused when parsed (sc_avro_minsize).  The
 * first failure returns false up the stack, each record on the way adding
 * its field's name to the error.
 *
 * The text of a value is what PostgreSQL's input functions take: numbers
 * in decimal (floats the shortest text that reads back exactly), bytes
 * and fixed as bytea's "\x" hex, dates and times as ISO text, decimals as
 * exact numeric text.  Arrays, maps and records taken whole are JSON, with
 * the same texts inside, quoted where JSON has no number for them.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "avro_internal.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

/*
 * Composite values (records, arrays, maps, unions) nested deeper than this
 * are a bad message.  Only recursive schemas nest without a bound from the
 * schema itself; a linked list of this many / 2 elements still decodes.
 */
#define SC_AVRO_MAX_DEPTH 2000

/*
 * The longest unscaled decimal read, in bytes once the sign's extension is
 * stripped: 1000 digits (SC_AVRO_MAX_PRECISION, avro_schema.c) need 416.
 */
#define SC_AVRO_MAX_DECIMAL_BYTES 512

/* The longest message decoded (see sc_avro_decode). */
#define SC_AVRO_MAX_MESSAGE (MaxAllocSize / 16)

/* Interrupts are served every this many values (a power of 2). */
#define SC_AVRO_CHECK_EVERY 4096

/*
 * The most text one message makes, all its columns together (a column
 * taking the whole record as JSON, and each column copying it, count).
 * JSON of real data is a few times the message's bytes, bytea's hex twice
 * them: 32 MB takes any message of a few MB (Kafka's default limit is
 * 1 MB), while the text stays a size PostgreSQL parses into jsonb (which
 * serves no interrupt) in about half a second, and far from the 1 GB a
 * batch's lines may hold.  Protobuf's cap is the same (SC_PB_MAX_TEXT).
 */
#define SC_AVRO_MAX_TEXT (32 * 1024 * 1024)

#define SC_USECS_PER_DAY INT64CONST(86400000000)

/* ----------------------------------------------------------------
 * Decoding
 * ----------------------------------------------------------------
 */
typedef struct ScAvroDecoder
{
	const uint8 *p;				/* the next byte */
	const uint8 *end;
	const uint8 *start;
	int			depth;			/* composite values open */
	int64		left;			/* values left before the next check */
	int64		budget;			/* values allowed after those (sc_avro_spend) */
	int64		text;			/* text of the columns done (SC_AVRO_MAX_TEXT) */
	int64		text_limit;		/* the JSON being written may grow to this */
	StringInfo *values;
	bool	   *isnull;
	ScScalar   *scalars;		/* per column: what its value was read as; NULL */
	const uint16 *takes;		/* per column: kinds it takes with no text; NULL */
	uint16		take;			/* of the column value being read: the same */
	ScScalar	scalar;			/* what the column value being read was */

	ScDecodeFailure fail;		/* the first failure (json_text.c) */
} ScAvroDecoder;

static pg_noinline bool sc_avro_fail(ScAvroDecoder *d, const char *fmt,...) pg_attribute_printf(2, 3);

static pg_noinline bool
sc_avro_fail(ScAvroDecoder *d, const char *fmt,...)
{
	va_list		args;

	va_start(args, fmt);
	sc_decode_failv(&d->fail, d->p - d->start, fmt, args);
	va_end(args);
	return false;
}

static inline bool
sc_avro_need(ScAvroDecoder *d, int64 n)
{
	if (likely(d->end - d->p >= n))
		return true;
	return sc_avro_fail(d, "truncated: " INT64_FORMAT " bytes needed, %zu left",
						n, (size_t) (d->end - d->p));
}

/*
 * A varint of at most maxbytes bytes (5 for an int, 10 for a long), whose
 * last byte holds no bits beyond the type's width.
 */
static pg_noinline bool
sc_avro_varint_slow(ScAvroDecoder *d, int maxbytes, uint64 *value)
{
	const uint8 *p = d->p;
	int			n = d->end - p >= maxbytes ? maxbytes : (int) (d->end - p);
	uint64		u = 0;

	for (int i = 0; i < n; i++)
	{
		uint8		b = p[i];

		u |= (uint64) (b & 0x7f) << (7 * i);
		if (b < 0x80)
		{
			if (i == maxbytes - 1 && (b >> (maxbytes == 10 ? 1 : 4)) != 0)
				return sc_avro_fail(d, "bad varint: too large for %s",
									maxbytes == 10 ? "a long" : "an int");
			d->p = p + i + 1;
			*value = u;
			return true;
		}
	}
	if (n < maxbytes)
		return sc_avro_fail(d, "truncated varint");
	return sc_avro_fail(d, "bad varint: more than %d bytes", maxbytes);
}

static inline bool
sc_avro_long(ScAvroDecoder *d, int64 *value)
{
	uint64		u;

	if (likely(d->p < d->end && *d->p < 0x80))
		u = *d->p++;
	else if (!sc_avro_varint_slow(d, 10, &u))
		return false;
	*value = (int64) (u >> 1) ^ -(int64) (u & 1);
	return true;
}

static inline bool
sc_avro_int(ScAvroDecoder *d, int32 *value)
{
	uint64		u;

	if (likely(d->p < d->end && *d->p < 0x80))
		u = *d->p++;
	else if (!sc_avro_varint_slow(d, 5, &u))
		return false;
	*value = (int32) ((uint32) u >> 1) ^ -(int32) (u & 1);
	return true;
}

/* A length (of bytes, a string): not negative, and no more than is left. */
static inline bool
sc_avro_length(ScAvroDecoder *d, int64 *n)
{
	if (!sc_avro_long(d, n))
		return false;
	if (likely(*n >= 0 && *n <= d->end - d->p))
		return true;
	if (*n < 0)
		return sc_avro_fail(d, "negative length " INT64_FORMAT, *n);
	return sc_avro_fail(d, "truncated: length " INT64_FORMAT ", %zu bytes left",
						*n, (size_t) (d->end - d->p));
}

/* The branch of a union. */
static inline bool
sc_avro_branch(ScAvroDecoder *d, const ScAvroNode *t, const ScAvroNode **branch)
{
	int64		index;

	if (!sc_avro_long(d, &index))
		return false;
	if (unlikely(index < 0 || index >= t->n))
		return sc_avro_fail(d, "union branch " INT64_FORMAT " out of range (%d branches)",
							index, t->n);
	*branch = t->types[index];
	return true;
}

static inline bool
sc_avro_enter(ScAvroDecoder *d)
{
	if (likely(++d->depth <= SC_AVRO_MAX_DEPTH && !stack_is_too_deep()))
		return true;
	return sc_avro_fail(d, "values nested deeper than %d levels", SC_AVRO_MAX_DEPTH);
}

/* The budget of a message of len bytes (SC_AVRO_BUDGET_BASE). */
static inline void
sc_avro_budget(ScAvroDecoder *d, size_t len)
{
	d->left = SC_AVRO_CHECK_EVERY;
	d->budget = SC_AVRO_BUDGET_BASE + SC_AVRO_BUDGET_PER_BYTE * (int64) len - SC_AVRO_CHECK_EVERY;
}

/* A check: every SC_AVRO_CHECK_EVERY values, and when the budget is spent. */
static pg_noinline bool
sc_avro_spend_slow(ScAvroDecoder *d)
{
	int64		total = d->budget + d->left;

	if (total < 0)
		return sc_avro_fail(d, "the message is read as more than " INT64_FORMAT " values "
							"(%d plus %d per byte of its %zu; nulls and records of nulls "
							"count, though they take no bytes): refused as too costly to read",
							(int64) SC_AVRO_BUDGET_BASE + SC_AVRO_BUDGET_PER_BYTE * (int64) (d->end - d->start),
							SC_AVRO_BUDGET_BASE, SC_AVRO_BUDGET_PER_BYTE,
							(size_t) (d->end - d->start));
	CHECK_FOR_INTERRUPTS();
	d->left = Min(total, SC_AVRO_CHECK_EVERY);
	d->budget = total - d->left;
	return true;
}

/*
 * Charge n values to the message's budget; every SC_AVRO_CHECK_EVERY
 * values serve interrupts (a cancel, a shutdown: an ERROR or a FATAL, as
 * anywhere else in a backend).  One decrement and one compare a value.
 * Every value skipped or written as JSON is charged; the records of the
 * plan and the values of its columns are read once a message (the plan
 * is made of the schema's records, never of an array's items), so they
 * are not.
 */
static inline bool
sc_avro_spend(ScAvroDecoder *d, int64 n)
{
	d->left -= n;
	if (likely(d->left >= 0))
		return true;
	return sc_avro_spend_slow(d);
}

/* The JSON being written grew past what the message may make? */
static inline bool
sc_avro_room(ScAvroDecoder *d, StringInfo out)
{
	if (likely(out->len <= d->text_limit))
		return true;
	return sc_avro_fail(d, "the message's text passes %d MB (the most one message may make)",
						SC_AVRO_MAX_TEXT / (1024 * 1024));
}

/*
 * The count of an array's or a map's next block, 0 at the end; *size is
 * the block's size in bytes when the writer gave it (a negative count),
 * else -1.  The count must fit in the bytes left, at the fewest bytes an
 * item takes; items of no bytes must fit in the message's budget, at the
 * values each is read as (charged as they are read).
 */
static bool
sc_avro_block(ScAvroDecoder *d, const ScAvroNode *t, int64 *count, int64 *size)
{
	int64		minsize = t->items->minsize + (t->kind == SC_AVRO_MAP ? 1 : 0);

	*size = -1;
	if (!sc_avro_long(d, count))
		return false;
	if (*count < 0)
	{
		if (*count == PG_INT64_MIN)
			return sc_avro_fail(d, "bad block count " INT64_FORMAT, *count);
		*count = -*count;
		if (!sc_avro_length(d, size))
			return false;
	}
	if (minsize > 0)
	{
		if (*count > (d->end - d->p) / minsize)
			return sc_avro_fail(d, "truncated: " INT64_FORMAT " items of %s, %zu bytes left",
								*count, sc_avro_kind_names[t->items->kind],
								(size_t) (d->end - d->p));
	}
	else if (*count > (d->budget + d->left) / t->items->zerovalues)
		return sc_avro_fail(d, INT64_FORMAT " items of no bytes, " INT64_FORMAT
							" values each, in a message of %zu bytes: more values than "
							"it may be read as",
							*count, t->items->zerovalues, (size_t) (d->end - d->start));
	return true;
}

/* After a block of *size bytes from start: did its items take that? */
static inline bool
sc_avro_block_end(ScAvroDecoder *d, const uint8 *start, int64 size)
{
	if (size < 0 || d->p - start == size)
		return true;
	return sc_avro_fail(d, "a block of " INT64_FORMAT " bytes whose items take %zu",
						size, (size_t) (d->p - start));
}

/*
 * Is the string or map key [s, s + n) text?  Avro's strings are UTF-8
 * (the reference readers refuse a message with one that is not, whether or
 * not anybody reads it); a NUL is valid UTF-8 but PostgreSQL's text cannot
 * hold it, so it is refused only in what becomes text (nul_ok false).
 */
static bool
sc_avro_utf8(ScAvroDecoder *d, const char *s, int64 n, const char *what, bool nul_ok)
{
	int64		off = 0;

	if (likely(sc_plain_ascii(s, (int) n) || pg_verify_mbstr(PG_UTF8, s, n, true)))
		return true;
	while (off < n)
	{
		off += pg_encoding_verifymbstr(PG_UTF8, s + off, n - off);
		if (off < n && s[off] != '\0')
			return sc_avro_fail(d, "a %s that is not valid UTF-8 (at byte " INT64_FORMAT " of it)",
								what, off);
		if (off < n && !nul_ok)
			return sc_avro_fail(d, "a %s that holds a NUL (at byte " INT64_FORMAT " of it), "
								"which PostgreSQL's text cannot hold", what, off);
		off++;
	}
	return true;
}

/* ----------------------------------------------------------------
 * Skipping a value nobody wants
 * ----------------------------------------------------------------
 */
static bool sc_avro_skip(ScAvroDecoder *d, const ScAvroNode *t);

static bool
sc_avro_skip_blocks(ScAvroDecoder *d, const ScAvroNode *t)
{
	int64		count;
	int64		size;
	int64		item = 0;
	const uint8 *start;

	for (;;)
	{
		if (!sc_avro_block(d, t, &count, &size))
			return false;
		if (count == 0)
			return true;
		/*
		 * Items are read even when the writer told the block's size: a
		 * string in them must be UTF-8 whatever the columns read, as the
		 * reference readers check it.
		 */
		start = d->p;
		for (int64 i = 0; i < count; i++, item++)
		{
			if (t->kind == SC_AVRO_MAP)
			{
				int64		n;

				if (!sc_avro_length(d, &n) ||
					!sc_avro_utf8(d, (const char *) d->p, n, "map key", true))
					return sc_decode_fail_item(&d->fail, item);
				d->p += n;
			}
			if (!sc_avro_skip(d, t->items))
				return sc_decode_fail_item(&d->fail, item);
		}
		if (!sc_avro_block_end(d, start, size))
			return false;
	}
}

static bool
sc_avro_skip(ScAvroDecoder *d, const ScAvroNode *t)
{
	if (!sc_avro_spend(d, 1))
		return false;
	switch (t->kind)
	{
		case SC_AVRO_NULL:
			return true;
		case SC_AVRO_BOOLEAN:
			if (!sc_avro_need(d, 1))
				return false;
			if (unlikely(*d->p > 1))
				return sc_avro_fail(d, "boolean byte %d is neither 0 nor 1", *d->p);
			d->p++;
			return true;
		case SC_AVRO_INT:
			{
				int32		v;

				return sc_avro_int(d, &v);
			}
		case SC_AVRO_LONG:
			{
				int64		v;

				return sc_avro_long(d, &v);
			}
		case SC_AVRO_FLOAT:
			if (!sc_avro_need(d, 4))
				return false;
			d->p += 4;
			return true;
		case SC_AVRO_DOUBLE:
			if (!sc_avro_need(d, 8))
				return false;
			d->p += 8;
			return true;
		case SC_AVRO_FIXED:
			if (!sc_avro_need(d, t->n))
				return false;
			d->p += t->n;
			return true;
		case SC_AVRO_BYTES:
		case SC_AVRO_STRING:
			{
				int64		n;

				if (!sc_avro_length(d, &n))
					return false;
				if (t->kind == SC_AVRO_STRING &&
					!sc_avro_utf8(d, (const char *) d->p, n, "string", true))
					return false;
				d->p += n;
				return true;
			}
		case SC_AVRO_ENUM:
			{
				int32		v;

				if (!sc_avro_int(d, &v))
					return false;
				if (unlikely(v < 0 || v >= t->n))
					return sc_avro_fail(d, "enum index %d out of range (%d symbols)", v, t->n);
				return true;
			}
		case SC_AVRO_ARRAY:
		case SC_AVRO_MAP:
			{
				bool		ok;

				if (!sc_avro_enter(d))
					return false;
				ok = sc_avro_skip_blocks(d, t);
				d->depth--;
				return ok;
			}
		case SC_AVRO_UNION:
			{
				const ScAvroNode *b = NULL;
				bool		ok;

				if (!sc_avro_branch(d, t, &b) || !sc_avro_enter(d))
					return false;
				ok = sc_avro_skip(d, b);
				d->depth--;
				return ok;
			}
		case SC_AVRO_RECORD:
			if (!sc_avro_enter(d))
				return false;
			for (int i = 0; i < t->n; i++)
				if (!sc_avro_skip(d, t->types[i]))
					return sc_decode_fail_in(&d->fail, t->names[i]);
			d->depth--;
			return true;
	}
	return sc_avro_fail(d, "unknown type");
}

/* ----------------------------------------------------------------
 * The text of values
 * ----------------------------------------------------------------
 */

/*
 * "YYYY-MM-DD" of a day from the epoch, years before 1 as PostgreSQL
 * writes them (year 0 is 1 BC); *bc says to end the text with " BC".
 */
static char *
sc_avro_put_date(char *o, int64 days, bool *bc)
{
	int64		year;
	int			month;
	int			day;

	sc_text_civil(days, &year, &month, &day);
	*bc = year <= 0;
	if (*bc)
		year = 1 - year;
	if (year <= 9999)
	{
		o = sc_text_put2(o, (int) (year / 100));
		o = sc_text_put2(o, (int) (year % 100));
	}
	else
		o += pg_lltoa(year, o);
	*o++ = '-';
	o = sc_text_put2(o, month);
	*o++ = '-';
	return sc_text_put2(o, day);
}

/* "HH:MM:SS[.ffffff]", trailing zeros of the fraction dropped. */
static char *
sc_avro_put_time(char *o, uint64 us)
{
	uint64		secs = us / 1000000;
	int			frac = (int) (us % 1000000);
	uint64		hours = secs / 3600;

	if (hours < 100)
		o = sc_text_put2(o, (int) hours);
	else
		o += pg_ulltoa_n(hours, o);
	*o++ = ':';
	o = sc_text_put2(o, (int) (secs / 60 % 60));
	*o++ = ':';
	o = sc_text_put2(o, (int) (secs % 60));
	if (frac != 0)
	{
		*o++ = '.';
		for (int div = 100000; frac != 0; div /= 10)
		{
			*o++ = '0' + frac / div;
			frac %= div;
		}
	}
	return o;
}

/*
 * A column's value read as a scalar of kind: true when its columns take it
 * as that, and no text is to be written.
 */
static inline bool
sc_avro_taken(ScAvroDecoder *d, ScScalarKind kind, int64 i, double f)
{
	d->scalar.kind = kind;
	d->scalar.i = i;
	d->scalar.f = f;
	return (d->take & SC_SCALAR_BIT(kind)) != 0;
}

/*
 * The text of a date, time or timestamp (of logical type lt, the value v
 * in the type's unit), quoted in JSON.
 */
static pg_noinline bool
sc_avro_datetime(ScAvroDecoder *d, ScAvroLogical lt, int64 v, StringInfo out, bool json)
{
	char	   *o;
	bool		bc = false;

	enlargeStringInfo(out, 64);
	o = out->data + out->len;
	if (json)
		*o++ = '"';
	switch (lt)
	{
		case SC_AVRO_DATE:
			o = sc_avro_put_date(o, v, &bc);
			break;
		case SC_AVRO_TIME_MILLIS:
		case SC_AVRO_TIME_MICROS:
			/* out of 0..24h only for a bad writer: the column decides */
			if (v < 0)
				*o++ = '-';
			o = sc_avro_put_time(o, (v < 0 ? -(uint64) v : (uint64) v) *
								 (lt == SC_AVRO_TIME_MILLIS ? 1000 : 1));
			break;
		default:
			{
				int64		us = v;
				int64		days;

				if (lt == SC_AVRO_TS_MILLIS || lt == SC_AVRO_LOCAL_TS_MILLIS)
				{
					if (v > PG_INT64_MAX / 1000 || v < PG_INT64_MIN / 1000)
						return sc_avro_fail(d, "timestamp-millis " INT64_FORMAT " out of range", v);
					us = v * 1000;
				}
				if (!json &&
					sc_avro_taken(d, lt == SC_AVRO_TS_MILLIS || lt == SC_AVRO_TS_MICROS ?
								  SC_SCALAR_INSTANT : SC_SCALAR_LOCAL_TS, us, 0))
					return true;
				days = us / SC_USECS_PER_DAY;
				if (us % SC_USECS_PER_DAY < 0)
					days--;
				o = sc_avro_put_date(o, days, &bc);
				*o++ = ' ';
				o = sc_avro_put_time(o, (uint64) (us - days * SC_USECS_PER_DAY));
				if (lt == SC_AVRO_TS_MILLIS || lt == SC_AVRO_TS_MICROS)
				{
					memcpy(o, "+00", 3);
					o += 3;
				}
			}
			break;
	}
	if (bc)
	{
		memcpy(o, " BC", 3);
		o += 3;
	}
	if (json)
		*o++ = '"';
	*o = '\0';
	out->len = o - out->data;
	return true;
}

/*
 * A decimal's exact text: the unscaled big-endian two's complement b[0..n)
 * converted to base 10^9 limbs, then written with scale digits after the
 * point.
 */
static pg_noinline bool
sc_avro_decimal(ScAvroDecoder *d, const uint8 *b, int64 n, int scale, StringInfo out)
{
	uint8		mag[SC_AVRO_MAX_DECIMAL_BYTES];
	uint32		limbs[SC_AVRO_MAX_DECIMAL_BYTES * 8 / 29 + 2];
	int			nlimbs = 0;
	char		digits[SC_AVRO_MAX_DECIMAL_BYTES * 8 / 3 + 16];
	int			ndigits;
	bool		neg = n > 0 && (b[0] & 0x80);
	char	   *o;

	/* drop bytes that only extend the sign */
	while (n > 1 && ((b[0] == 0x00 && !(b[1] & 0x80)) ||
					 (b[0] == 0xff && (b[1] & 0x80))))
		b++, n--;
	if (n > SC_AVRO_MAX_DECIMAL_BYTES)
		return sc_avro_fail(d, "decimal of " INT64_FORMAT " bytes, more than numeric holds", n);

	/* the magnitude: a negative value's two's complement */
	if (neg)
	{
		int			carry = 1;

		for (int64 i = n - 1; i >= 0; i--)
		{
			int			v = (uint8) ~b[i] + carry;

			mag[i] = (uint8) v;
			carry = v >> 8;
		}
	}
	else if (n > 0)
		memcpy(mag, b, n);

	for (int64 i = 0; i < n; i++)
	{
		uint32		carry = mag[i];

		for (int k = 0; k < nlimbs; k++)
		{
			uint64		v = (uint64) limbs[k] * 256 + carry;

			limbs[k] = (uint32) (v % 1000000000);
			carry = (uint32) (v / 1000000000);
		}
		if (carry != 0)
			limbs[nlimbs++] = carry;
	}

	if (nlimbs == 0)
		ndigits = pg_ultoa_n(0, digits);
	else
	{
		ndigits = pg_ultoa_n(limbs[nlimbs - 1], digits);
		for (int k = nlimbs - 2; k >= 0; k--)
		{
			uint32		v = limbs[k];

			for (int j = 8; j >= 0; j--)
			{
				digits[ndigits + j] = '0' + v % 10;
				v /= 10;
			}
			ndigits += 9;
		}
	}

	enlargeStringInfo(out, ndigits + scale + 4);
	o = out->data + out->len;
	if (neg)
		*o++ = '-';
	if (scale == 0)
	{
		memcpy(o, digits, ndigits);
		o += ndigits;
	}
	else if (ndigits <= scale)
	{
		*o++ = '0';
		*o++ = '.';
		memset(o, '0', scale - ndigits);
		o += scale - ndigits;
		memcpy(o, digits, ndigits);
		o += ndigits;
	}
	else
	{
		memcpy(o, digits, ndigits - scale);
		o += ndigits - scale;
		*o++ = '.';
		memcpy(o, digits + ndigits - scale, scale);
		o += scale;
	}
	*o = '\0';
	out->len = o - out->data;
	return true;
}

static inline uint32
sc_avro_le32(const uint8 *p)
{
	return (uint32) p[0] | (uint32) p[1] << 8 | (uint32) p[2] << 16 | (uint32) p[3] << 24;
}

/*
 * The value of a type that is not composite, as text or as JSON.  For a
 * column (json false), a number, boolean or timestamp is also noted as a
 * scalar (d->scalar), and its text not written when the columns take it.
 */
static bool
sc_avro_scalar(ScAvroDecoder *d, const ScAvroNode *t, StringInfo out, bool json)
{
	switch (t->kind)
	{
		case SC_AVRO_NULL:
			appendBinaryStringInfo(out, "null", 4);
			return true;
		case SC_AVRO_BOOLEAN:
			if (!sc_avro_need(d, 1))
				return false;
			if (unlikely(*d->p > 1))
				return sc_avro_fail(d, "boolean byte %d is neither 0 nor 1", *d->p);
			if (!json && sc_avro_taken(d, SC_SCALAR_BOOL, *d->p, 0))
			{
				d->p++;
				return true;
			}
			if (*d->p++)
				appendBinaryStringInfo(out, "true", 4);
			else
				appendBinaryStringInfo(out, "false", 5);
			return true;
		case SC_AVRO_INT:
			{
				int32		v;

				if (!sc_avro_int(d, &v))
					return false;
				if (t->logical != SC_AVRO_PLAIN)
					return sc_avro_datetime(d, t->logical, v, out, json);
				if (!json && sc_avro_taken(d, SC_SCALAR_INT, v, 0))
					return true;
				enlargeStringInfo(out, 12);
				out->len += pg_ltoa(v, out->data + out->len);
				return true;
			}
		case SC_AVRO_LONG:
			{
				int64		v;

				if (!sc_avro_long(d, &v))
					return false;
				if (t->logical != SC_AVRO_PLAIN)
				{
					/* the common instant its columns take: no call */
					if (!json && t->logical == SC_AVRO_TS_MILLIS &&
						v <= PG_INT64_MAX / 1000 && v >= PG_INT64_MIN / 1000 &&
						sc_avro_taken(d, SC_SCALAR_INSTANT, v * 1000, 0))
						return true;
					return sc_avro_datetime(d, t->logical, v, out, json);
				}
				if (!json && sc_avro_taken(d, SC_SCALAR_INT, v, 0))
					return true;
				enlargeStringInfo(out, 21);
				out->len += pg_lltoa(v, out->data + out->len);
				return true;
			}
		case SC_AVRO_FLOAT:
			{
				uint32		u;
				float		f;

				if (!sc_avro_need(d, 4))
					return false;
				u = sc_avro_le32(d->p);
				memcpy(&f, &u, 4);
				d->p += 4;
				if (!json && sc_avro_taken(d, SC_SCALAR_FLOAT4, 0, f))
					return true;
				sc_text_float(out, f, true, json);
				return true;
			}
		case SC_AVRO_DOUBLE:
			{
				uint64		u;
				double		f;

				if (!sc_avro_need(d, 8))
					return false;
				u = (uint64) sc_avro_le32(d->p) | (uint64) sc_avro_le32(d->p + 4) << 32;
				memcpy(&f, &u, 8);
				d->p += 8;
				if (!json && sc_avro_taken(d, SC_SCALAR_FLOAT8, 0, f))
					return true;
				sc_text_float(out, f, false, json);
				return true;
			}
		case SC_AVRO_STRING:
			{
				int64		n;
				const char *s;

				if (!sc_avro_length(d, &n))
					return false;
				s = (const char *) d->p;
				/* valid UTF-8, and no NUL, which text cannot hold */
				if (unlikely(!sc_avro_utf8(d, s, n, "string", false)))
					return false;
				d->p += n;
				if (!json && (d->take & SC_SCALAR_BIT(SC_SCALAR_TEXT)))
				{
					/* its columns take it as a text datum: no copy here */
					d->scalar.kind = SC_SCALAR_TEXT;
					d->scalar.s = s;
					d->scalar.i = n;
					return true;
				}
				if (json)
					sc_json_string_bytes(out, s, n);
				else
					appendBinaryStringInfo(out, s, n);
				return true;
			}
		case SC_AVRO_BYTES:
		case SC_AVRO_FIXED:
			{
				int64		n = t->n;
				const uint8 *b;

				if (t->kind == SC_AVRO_BYTES ? !sc_avro_length(d, &n) : !sc_avro_need(d, n))
					return false;
				b = d->p;
				if (t->logical == SC_AVRO_DECIMAL)
				{
					if (!sc_avro_decimal(d, b, n, t->scale, out))
						return false;
				}
				else
					sc_text_hex(out, b, n, json);
				d->p += n;
				return true;
			}
		case SC_AVRO_ENUM:
			{
				int32		v;

				if (!sc_avro_int(d, &v))
					return false;
				if (unlikely(v < 0 || v >= t->n))
					return sc_avro_fail(d, "enum index %d out of range (%d symbols)", v, t->n);
				if (json)
					sc_json_string_bytes(out, t->names[v], strlen(t->names[v]));
				else
					appendStringInfoString(out, t->names[v]);
				return true;
			}
		default:
			break;
	}
	return sc_avro_fail(d, "a %s where a scalar was expected", sc_avro_kind_names[t->kind]);
}

static bool sc_avro_json(ScAvroDecoder *d, const ScAvroNode *t, StringInfo out);

/* An array's or a map's blocks, as a JSON array or object. */
static bool
sc_avro_json_blocks(ScAvroDecoder *d, const ScAvroNode *t, StringInfo out)
{
	bool		map = (t->kind == SC_AVRO_MAP);
	int64		item = 0;
	int64		count;
	int64		size;

	appendStringInfoCharMacro(out, map ? '{' : '[');
	for (;;)
	{
		const uint8 *start;

		if (!sc_avro_block(d, t, &count, &size))
			return false;
		if (count == 0)
			break;
		start = d->p;
		for (int64 i = 0; i < count; i++, item++)
		{
			if (item > 0)
				appendStringInfoCharMacro(out, ',');
			if (map)
			{
				int64		n;
				const char *key;

				if (!sc_avro_length(d, &n))
					return sc_decode_fail_item(&d->fail, item);
				key = (const char *) d->p;
				if (!sc_avro_utf8(d, key, n, "map key", false))
					return sc_decode_fail_item(&d->fail, item);
				d->p += n;
				sc_json_string_bytes(out, key, n);
				appendStringInfoCharMacro(out, ':');
			}
			if (!sc_avro_json(d, t->items, out))
				return sc_decode_fail_item(&d->fail, item);
		}
		if (!sc_avro_block_end(d, start, size))
			return false;
	}
	appendStringInfoCharMacro(out, map ? '}' : ']');
	return true;
}

/* Any value as JSON. */
static bool
sc_avro_json(ScAvroDecoder *d, const ScAvroNode *t, StringInfo out)
{
	bool		ok = true;

	if (!sc_avro_spend(d, 1) || !sc_avro_room(d, out))
		return false;
	switch (t->kind)
	{
		case SC_AVRO_UNION:
			{
				const ScAvroNode *b = NULL;

				if (!sc_avro_branch(d, t, &b) || !sc_avro_enter(d))
					return false;
				ok = sc_avro_json(d, b, out);
				break;
			}
		case SC_AVRO_RECORD:
			if (!sc_avro_enter(d))
				return false;
			appendStringInfoCharMacro(out, '{');
			for (int i = 0; i < t->n; i++)
			{
				if (i > 0)
					appendStringInfoCharMacro(out, ',');
				appendStringInfoString(out, t->json_keys[i]);
				if (!sc_avro_json(d, t->types[i], out))
					return sc_decode_fail_in(&d->fail, t->names[i]);
			}
			appendStringInfoCharMacro(out, '}');
			break;
		case SC_AVRO_ARRAY:
		case SC_AVRO_MAP:
			if (!sc_avro_enter(d))
				return false;
			ok = sc_avro_json_blocks(d, t, out);
			break;
		default:
			return sc_avro_scalar(d, t, out, true);
	}
	d->depth--;
	return ok;
}

/* A value as a column's text: a null (of a union's branch) sets *isnull. */
static inline bool
sc_avro_text(ScAvroDecoder *d, const ScAvroNode *t, StringInfo out, bool *isnull)
{
	if (t->kind == SC_AVRO_UNION && !sc_avro_branch(d, t, &t))
		return false;
	*isnull = (t->kind == SC_AVRO_NULL);
	switch (t->kind)
	{
		case SC_AVRO_NULL:
			return true;
		case SC_AVRO_RECORD:
		case SC_AVRO_ARRAY:
		case SC_AVRO_MAP:
			return sc_avro_json(d, t, out);
		default:
			return sc_avro_scalar(d, t, out, false);
	}
}

/* ----------------------------------------------------------------
 * Decoding by the plan
 * ----------------------------------------------------------------
 */
static bool sc_avro_plan_decode(ScAvroDecoder *d, const ScAvroPlanRecord *pr);

/* A value of len bytes of text written for ncols columns: within the cap? */
static inline bool
sc_avro_text_done(ScAvroDecoder *d, int64 len, int ncols)
{
	d->text += len * ncols;
	if (likely(d->text <= SC_AVRO_MAX_TEXT))
		return true;
	return sc_avro_fail(d, "the message's text passes %d MB (the most one message may make)",
						SC_AVRO_MAX_TEXT / (1024 * 1024));
}

/*
 * A field some column wants: read it into the plan of the record inside
 * when paths go on into it, and as text for the columns taking it (read
 * again then: rare, and simpler than building both at once).
 */
static bool
sc_avro_plan_field(ScAvroDecoder *d, const ScAvroPlanField *f)
{
	const uint8 *start = d->p;
	StringInfo	out;
	int			outlen;
	bool		isnull;

	if (f->sub != NULL)
	{
		const ScAvroNode *t = f->type;

		if (t->kind == SC_AVRO_UNION && !sc_avro_branch(d, t, &t))
			return false;
		if (!(t->kind == SC_AVRO_RECORD ? sc_avro_plan_decode(d, f->sub) : sc_avro_skip(d, t)))
			return false;
		if (f->ncols == 0)
			return true;
		d->p = start;
	}

	out = d->values[f->cols[0]];
	outlen = out->len;
	d->text_limit = outlen + (SC_AVRO_MAX_TEXT - d->text);
	d->scalar.kind = SC_SCALAR_NONE;
	d->take = 0;
	if (d->takes != NULL)
	{
		/* no text when every column of the field takes the scalar */
		d->take = d->takes[f->cols[0]];
		for (int k = 1; k < f->ncols; k++)
			d->take &= d->takes[f->cols[k]];
	}
	if (!sc_avro_text(d, f->type, out, &isnull) ||
		!sc_avro_text_done(d, out->len - outlen, f->ncols))
		return false;
	for (int k = 0; k < f->ncols; k++)
	{
		d->isnull[f->cols[k]] = isnull;
		if (d->scalars != NULL)
			d->scalars[f->cols[k]] = d->scalar;
		if (k > 0 && !isnull)
			appendBinaryStringInfo(d->values[f->cols[k]], out->data + outlen, out->len - outlen);
	}
	return true;
}

static bool
sc_avro_plan_decode(ScAvroDecoder *d, const ScAvroPlanRecord *pr)
{
	const ScAvroNode *record = pr->record;

	if (!sc_avro_enter(d))
		return false;
	for (int i = 0; i < record->n; i++)
	{
		const ScAvroPlanField *f = &pr->fields[i];

		if (!(f->ncols == 0 && f->sub == NULL ? sc_avro_skip(d, f->type) :
			  sc_avro_plan_field(d, f)))
			return sc_decode_fail_in(&d->fail, record->names[i]);
	}
	d->depth--;
	return true;
}

bool
sc_avro_decode(const ScAvroPlan *plan, const char *buf, size_t len,
			   StringInfo *values, bool *isnull, ScScalar *scalars, const uint16 *takes,
			   char **error)
{
	ScAvroDecoder d;

	d.p = d.start = (const uint8 *) buf;
	d.end = d.p + len;
	d.depth = 0;
	sc_avro_budget(&d, len);
	d.text = 0;
	d.text_limit = SC_AVRO_MAX_TEXT;
	d.values = values;
	d.isnull = isnull;
	d.scalars = scalars;
	d.takes = scalars != NULL ? takes : NULL;
	d.take = 0;
	d.fail.what = NULL;
	d.fail.where = NIL;
	for (int c = 0; c < plan->ncolumns; c++)
		isnull[c] = true;
	if (scalars != NULL)
		for (int c = 0; c < plan->ncolumns; c++)
			scalars[c].kind = SC_SCALAR_NONE;

	/*
	 * A value's text may be several times its bytes (hex, JSON escapes), and
	 * a StringInfo holds at most MaxAllocSize: a message this large is
	 * refused rather than left to raise an ERROR half way.
	 */
	if (len > SC_AVRO_MAX_MESSAGE)
	{
		sc_avro_fail(&d, "a message of %zu bytes, more than the %zu decoded",
					 len, (size_t) SC_AVRO_MAX_MESSAGE);
		goto fail;
	}
	if (!sc_avro_plan_decode(&d, plan->top))
		goto fail;
	if (d.p != d.end)
	{
		sc_avro_fail(&d, "%zu bytes after the record", (size_t) (d.end - d.p));
		goto fail;
	}

	/* columns taking the whole record: read it again, as JSON */
	if (plan->nwhole > 0)
	{
		StringInfo	out = values[plan->whole[0]];
		int			outlen = out->len;

		/* read twice, a budget for each reading */
		d.p = d.start;
		sc_avro_budget(&d, len);
		d.text_limit = outlen + (SC_AVRO_MAX_TEXT - d.text);
		if (!sc_avro_json(&d, plan->schema->top, out) ||
			!sc_avro_text_done(&d, out->len - outlen, plan->nwhole))
			goto fail;
		sc_decode_share(values, isnull, plan->whole, plan->nwhole, outlen);
	}
	return true;

fail:
	*error = sc_decode_error(&d.fail);
	return false;
}
