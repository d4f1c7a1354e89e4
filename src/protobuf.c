/*-------------------------------------------------------------------------
 *
 * protobuf.c
 *		Protobuf decoding, written from the Protocol Buffers language
 *		specifications (proto2, proto3) and the encoding specification:
 *		one message decoded, by the plan of its type, into the text of the
 *		values its columns take: in one pass when every field they read is
 *		singular and outside any oneof (sc_pb_one_pass), else in two (where
 *		each field comes, then the values: sc_pb_plan_decode).  The schema
 *		is parsed and the plan made in the other protobuf_*.c files
 *		(protobuf_internal.h says which file does what).
 *
 * Bad bytes are the data's fault, never an ERROR: every read checks what
 * is left, every length is checked against the bytes left before use,
 * nesting is bounded, and text is refused before it grows past what a
 * StringInfo holds.  The first failure returns false up the stack, each
 * message on the way adding its field's name to the error.
 *
 * The text of a value is what PostgreSQL's input functions take: integers
 * in decimal, floats the shortest text that reads back exactly, bytes as
 * bytea's "\x" hex, enums by name (the first declared for a number; an
 * open enum's number the schema does not know as the number), Timestamp
 * as an ISO timestamp with +00, Duration as interval text, wrappers as
 * their value.  Repeated fields, maps and messages are JSON, with the
 * proto3 JSON mapping's texts inside (bytes base64, Timestamp RFC 3339,
 * Duration "1.5s"), fields by their declared names.
 *
 * Presence: a singular scalar field absent from a message reads as its
 * default (proto2: the declared [default =], else the type's; proto3: the
 * type's: 0, false, "", the enum's first value), except where the field
 * tracks presence: messages, oneof members and proto3 "optional" fields
 * are NULL when absent, and are left out of JSON.  Repeated fields absent
 * are [] and maps {}.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "mb/pg_wchar.h"
#include "protobuf_internal.h"
#include "utils/memutils.h"

/* The longest message decoded (see sc_proto_decode). */
#define SC_PB_MAX_MESSAGE (MaxAllocSize / 16)

/*
 * The most text one message makes, all its columns together: past it the
 * message is refused.  JSON of a message holds the defaults of fields it
 * does not carry, so text is not bounded by the message's bytes alone (40
 * kB of 20,000 empty messages of a type of 150 fields made 103 MB).  32 MB
 * is Avro's cap too (SC_AVRO_MAX_TEXT in avro.c says why this size).
 */
#define SC_PB_MAX_TEXT (32 * 1024 * 1024)

/* Slots on the stack for messages of at most this many fields. */
#define SC_PB_STACK_SLOTS 32

/* Ranges on the stack for messages met at most this many times. */
#define SC_PB_STACK_RANGES 8

/* Timestamp: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z. */
#define SC_PB_TS_MIN INT64CONST(-62135596800)
#define SC_PB_TS_MAX INT64CONST(253402300799)

/* Duration: about 10000 years either way. */
#define SC_PB_DURATION_MAX INT64CONST(315576000000)

/* ----------------------------------------------------------------
 * Small texts
 * ----------------------------------------------------------------
 */

/* ".fff", ".ffffff" or ".fffffffff" of nanos (0 < nanos < 10^9), as RFC 3339 texts write it. */
static char *
sc_pb_put_nanos_json(char *o, int32 nanos)
{
	int			digits = nanos % 1000000 == 0 ? 3 : nanos % 1000 == 0 ? 6 : 9;
	int32		v = nanos / (digits == 3 ? 1000000 : digits == 6 ? 1000 : 1);

	*o++ = '.';
	for (int i = digits - 1; i >= 0; i--)
	{
		o[i] = '0' + v % 10;
		v /= 10;
	}
	return o + digits;
}

/* ".ffffff" of micros (0 < micros < 10^6), trailing zeros dropped. */
static char *
sc_pb_put_micros(char *o, int32 micros)
{
	*o++ = '.';
	for (int div = 100000; micros != 0; div /= 10)
	{
		*o++ = '0' + micros / div;
		micros %= div;
	}
	return o;
}

/* ----------------------------------------------------------------
 * The text of values
 * ----------------------------------------------------------------
 */

/*
 * Is field i there?  A member of a oneof is there only when set last:
 * sc_pb_collect cleared the others.
 */
static inline bool
sc_pb_present(const ScPbSlot *slots, int i)
{
	return slots[i].count > 0;
}

/* Called for each message and repeated item written as JSON. */
static inline bool
sc_pb_room(ScPbDecoder *d, StringInfo out, const uint8 *at)
{
	CHECK_FOR_INTERRUPTS();
	if (likely(out->len + d->text <= SC_PB_MAX_TEXT))
		return true;
	return sc_pb_fail(d, at, "the message's text passes %d MB (the most one message may make)",
					  SC_PB_MAX_TEXT / (1024 * 1024));
}

/*
 * The value of a number or bool of its type, from its wire value u; false
 * for the other types.
 */
static inline bool
sc_pb_scalar_of(ScScalar *s, int type, uint64 u)
{
	switch (type)
	{
		case SC_PB_INT32:
		case SC_PB_SFIXED32:
			s->kind = SC_SCALAR_INT;
			s->i = (int32) (uint32) u;
			return true;
		case SC_PB_SINT32:
			s->kind = SC_SCALAR_INT;
			s->i = (int32) ((uint32) u >> 1) ^ -(int32) (u & 1);
			return true;
		case SC_PB_INT64:
		case SC_PB_SFIXED64:
			s->kind = SC_SCALAR_INT;
			s->i = (int64) u;
			return true;
		case SC_PB_SINT64:
			s->kind = SC_SCALAR_INT;
			s->i = (int64) (u >> 1) ^ -(int64) (u & 1);
			return true;
		case SC_PB_UINT32:
		case SC_PB_FIXED32:
			s->kind = SC_SCALAR_INT;
			s->i = (uint32) u;
			return true;
		case SC_PB_UINT64:
		case SC_PB_FIXED64:
			s->kind = u > (uint64) PG_INT64_MAX ? SC_SCALAR_UINT : SC_SCALAR_INT;
			s->i = (int64) u;
			return true;
		case SC_PB_BOOL:
			s->kind = SC_SCALAR_BOOL;
			s->i = u != 0;
			return true;
		case SC_PB_FLOAT:
			{
				uint32		b = (uint32) u;
				float		x;

				memcpy(&x, &b, 4);
				s->kind = SC_SCALAR_FLOAT4;
				s->f = x;
				return true;
			}
		case SC_PB_DOUBLE:
			s->kind = SC_SCALAR_FLOAT8;
			memcpy(&s->f, &u, 8);
			return true;
		default:
			return false;
	}
}

/*
 * One value of a scalar type (not a message) from *pp: a number moves *pp
 * past it; a string or bytes is all of [*pp, end).  Text for a column, or
 * JSON.  For a column, a number or bool is also noted as a scalar
 * (d->scalar), and its text not written when its columns take it.
 */
static bool sc_pb_scalar_text(ScPbDecoder *d, const ScPbField *f, uint64 u, const uint8 *p,
							  const uint8 *end, StringInfo out, bool json);

static bool
sc_pb_scalar(ScPbDecoder *d, const ScPbField *f, const uint8 **pp,
			 const uint8 *end, StringInfo out, bool json)
{
	const uint8 *p = *pp;
	uint64		u = 0;

	switch (sc_pb_type_wt[f->type])
	{
		case SC_PB_WT_VARINT:
			if (!sc_pb_varint(d, pp, end, &u))
				return false;
			break;
		case SC_PB_WT_I64:
			if (!sc_pb_need(d, p, end, 8))
				return false;
			u = sc_pb_le64(p);
			*pp = p + 8;
			break;
		case SC_PB_WT_I32:
			if (!sc_pb_need(d, p, end, 4))
				return false;
			u = sc_pb_le32(p);
			*pp = p + 4;
			break;
		default:
			*pp = end;
			break;
	}
	return sc_pb_scalar_text(d, f, u, p, end, out, json);
}

/*
 * The same, its wire value read: u for a number, [p, end) for a string or
 * bytes.
 */
static bool
sc_pb_scalar_text(ScPbDecoder *d, const ScPbField *f, uint64 u, const uint8 *p,
				  const uint8 *end, StringInfo out, bool json)
{
	int			type = f->type;
	ScScalar	local;
	ScScalar   *s = json ? &local : &d->scalar;

	/* a number or bool: noted for a column (no text when its columns take it) */
	if (sc_pb_scalar_of(s, type, u))
	{
		if (!json && (d->take & SC_SCALAR_BIT(s->kind)))
			return true;
		switch (s->kind)
		{
			case SC_SCALAR_INT:
				sc_pb_int64(out, s->i);
				break;
			case SC_SCALAR_UINT:
				sc_pb_uint64(out, (uint64) s->i);
				break;
			case SC_SCALAR_BOOL:
				if (s->i != 0)
					appendBinaryStringInfo(out, "true", 4);
				else
					appendBinaryStringInfo(out, "false", 5);
				break;
			default:
				sc_text_float(out, s->f, s->kind == SC_SCALAR_FLOAT4, json);
				break;
		}
		return true;
	}
	switch (type)
	{
		case SC_PB_ENUM:
			{
				int32		v = (int32) (uint32) u;
				const char *name = sc_pb_enum_name(f->enumtype, v);

				/*
				 * open enums: a number the schema lacks (a closed enum's is an
				 * unknown field, never read)
				 */
				if (name == NULL)
				{
					enlargeStringInfo(out, 12);
					out->len += pg_ltoa(v, out->data + out->len);
				}
				else if (json)
					sc_json_string_bytes(out, name, strlen(name));
				else
					appendStringInfoString(out, name);
				return true;
			}
		case SC_PB_STRING:

			/*
			 * PostgreSQL's check: valid UTF-8, and no NUL, which text cannot
			 * hold.  A proto3 string's UTF-8 was checked with the message
			 * (sc_pb_check_value), which noted whether one held a NUL.
			 */
			if (f->utf8 ? unlikely(d->nul && memchr(p, '\0', end - p) != NULL) :
				unlikely(!pg_verify_mbstr(PG_UTF8, (const char *) p, end - p, true)))
				return sc_pb_fail(d, p, sc_pb_utf8_nul_ok((const char *) p, end - p) ?
								  "a string holding a NUL byte, which text cannot hold" :
								  "a string that is not valid UTF-8");
			if (!json && (d->take & SC_SCALAR_BIT(SC_SCALAR_TEXT)))
			{
				/* its columns take it as a text datum: no copy here */
				d->scalar.kind = SC_SCALAR_TEXT;
				d->scalar.s = (const char *) p;
				d->scalar.i = end - p;
				return true;
			}
			if (json)
				sc_json_string_bytes(out, (const char *) p, end - p);
			else
				appendBinaryStringInfo(out, (const char *) p, end - p);
			return true;
		case SC_PB_BYTES:
			if (json)
				sc_text_base64(out, p, end - p);
			else
				sc_text_hex(out, p, end - p, false);
			return true;
		default:
			break;
	}
	return sc_pb_fail(d, p, "a %s where a scalar was expected", sc_pb_type_names[type]);
}

static bool sc_pb_message_json(ScPbDecoder *d, const ScPbMessage *m, const ScPbRange *r,
							   int nr, StringInfo out);
static bool sc_pb_message_text(ScPbDecoder *d, const ScPbMessage *m, const ScPbRange *r,
							   int nr, StringInfo out);

/* Gathering the occurrences of a singular message field, to read them merged. */
typedef struct ScPbMerged
{
	ScPbRange	local[SC_PB_STACK_RANGES];
	ScPbRange  *r;
	int			nr;
} ScPbMerged;

static bool
sc_pb_merge(ScPbDecoder *d, const ScPbRange *r, int nr, const ScPbSlot *s,
			const ScPbField *f, ScPbMerged *mg)
{
	ScPbOccurrences it;
	int			wt;

	mg->r = s->count <= SC_PB_STACK_RANGES ? mg->local : palloc(sizeof(ScPbRange) * s->count);
	mg->nr = 0;
	if (s->count == 1)
	{
		const uint8 *p = s->last;

		mg->nr = 1;
		return sc_pb_value(d, s->last_wt, f->number, &p, r[s->last_r].end,
						   &mg->r[0].p, &mg->r[0].end);
	}
	sc_pb_occurrences(&it, r, nr, s, f);
	while (mg->nr < (int) s->count)
	{
		if (!sc_pb_next_occurrence(d, &it, &wt, &mg->r[mg->nr].p, &mg->r[mg->nr].end))
			return false;
		mg->nr++;
	}
	return true;
}

static inline void
sc_pb_merged_free(ScPbMerged *mg)
{
	if (mg->r != mg->local)
		pfree(mg->r);
}

/* A map entry's key and value as JSON: "key":value. */
static bool
sc_pb_map_entry(ScPbDecoder *d, const ScPbMessage *e, const uint8 *v, const uint8 *vend,
				StringInfo out, bool *skip)
{
	ScPbSlot	slots[2];
	ScPbRange	r = {v, vend};
	const ScPbField *key = &e->fields[0];
	const ScPbField *val = &e->fields[1];

	d->dropped = false;
	if (!sc_pb_collect(d, e, &r, 1, NULL, slots, false))
		return false;

	/*
	 * An entry holding an unknown field (a number other than key and value,
	 * a key or value of another wire type, a value a closed enum does not
	 * name) is itself an unknown field of the message, as the reference
	 * parsers read it: left out.
	 */
	if (d->dropped)
	{
		*skip = true;
		return true;
	}
	if (slots[0].count > 0)
	{
		const uint8 *kv;
		const uint8 *kend;
		const uint8 *p = slots[0].last;

		if (!sc_pb_value(d, slots[0].last_wt, key->number, &p, vend, &kv, &kend))
			return false;
		if (key->type == SC_PB_STRING)
		{
			if (!sc_pb_scalar(d, key, &kv, kend, out, true))
				return sc_decode_fail_in(&d->fail, "key");
		}
		else
		{
			appendStringInfoCharMacro(out, '"');
			if (!sc_pb_scalar(d, key, &kv, kend, out, false))
				return sc_decode_fail_in(&d->fail, "key");
			appendStringInfoCharMacro(out, '"');
		}
	}
	else if (key->type == SC_PB_STRING)
		appendBinaryStringInfo(out, "\"\"", 2);
	else
		appendStringInfo(out, "\"%s\"", key->def_text);
	appendStringInfoCharMacro(out, ':');

	if (slots[1].count == 0)
	{
		if (val->message != NULL)
		{
			ScPbRange	empty = {vend, vend};

			return sc_pb_message_json(d, val->message, &empty, 1, out);
		}
		appendStringInfoString(out, val->def_json);
		return true;
	}
	if (val->message != NULL)
	{
		ScPbMerged	mg;
		bool		ok;

		if (!sc_pb_merge(d, &r, 1, &slots[1], val, &mg))
			return sc_decode_fail_in(&d->fail, "value");
		ok = sc_pb_message_json(d, val->message, mg.r, mg.nr, out);
		sc_pb_merged_free(&mg);
		return ok ? true : sc_decode_fail_in(&d->fail, "value");
	}
	else
	{
		const uint8 *vv;
		const uint8 *vvend;
		const uint8 *p = slots[1].last;

		if (!sc_pb_value(d, slots[1].last_wt, val->number, &p, vend, &vv, &vvend) ||
			!sc_pb_scalar(d, val, &vv, vvend, out, true))
			return sc_decode_fail_in(&d->fail, "value");
	}
	return true;
}

/*
 * A repeated field's occurrences as a JSON array, a map's as an object.
 * A closed enum's numbers it does not name are left out (unknown fields),
 * and map entries holding one.
 */
static bool
sc_pb_repeated_json(ScPbDecoder *d, const ScPbField *f, const ScPbRange *r, int nr,
					const ScPbSlot *s, StringInfo out)
{
	bool		map = f->message != NULL && f->message->map_entry;
	ScPbOccurrences it;
	int			wt;
	const uint8 *v;
	const uint8 *vend;
	int64		item = 0;		/* on the wire, for errors */
	int64		written = 0;

	appendStringInfoCharMacro(out, map ? '{' : '[');
	sc_pb_occurrences(&it, r, nr, s, f);
	while (it.left > 0)
	{
		if (!sc_pb_next_occurrence(d, &it, &wt, &v, &vend))
			return false;
		if (wt == SC_PB_WT_LEN && f->packable)
		{
			/* packed: values one after the other */
			while (v < vend)
			{
				item++;
				if (unlikely(f->closed) && !sc_pb_enum_known(f->enumtype, v, vend))
				{
					if (!sc_pb_skip_varint(d, &v, vend))
						return sc_decode_fail_item(&d->fail, item - 1);
					continue;
				}
				if (written++ > 0)
					appendStringInfoCharMacro(out, ',');
				if (!sc_pb_room(d, out, v) ||
					!sc_pb_scalar(d, f, &v, vend, out, true))
					return sc_decode_fail_item(&d->fail, item - 1);
			}
			continue;
		}
		item++;
		if (unlikely(f->closed) && !sc_pb_enum_known(f->enumtype, v, vend))
			continue;
		if (!sc_pb_room(d, out, v))
			return false;
		if (map)
		{
			int			len = out->len;
			bool		skip = false;

			if (written > 0)
				appendStringInfoCharMacro(out, ',');
			if (!sc_pb_map_entry(d, f->message, v, vend, out, &skip))
				return sc_decode_fail_item(&d->fail, item - 1);
			if (skip)
			{
				out->len = len;
				out->data[len] = '\0';
				continue;
			}
			written++;
			continue;
		}
		if (written++ > 0)
			appendStringInfoCharMacro(out, ',');
		if (f->message != NULL)
		{
			ScPbRange	one = {v, vend};

			if (!sc_pb_message_json(d, f->message, &one, 1, out))
				return sc_decode_fail_item(&d->fail, item - 1);
		}
		else if (!sc_pb_scalar(d, f, &v, vend, out, true))
			return sc_decode_fail_item(&d->fail, item - 1);
	}
	appendStringInfoCharMacro(out, map ? '}' : ']');
	return true;
}

/*
 * The value of field f of a message, there (slot s): for a column
 * (json false) or inside JSON.
 */
static bool
sc_pb_field_value(ScPbDecoder *d, const ScPbField *f, const ScPbRange *r, int nr,
				  const ScPbSlot *s, StringInfo out, bool json)
{
	if (f->label == SC_PB_LABEL_REPEATED)
		return sc_pb_repeated_json(d, f, r, nr, s, out);
	if (f->message != NULL)
	{
		ScPbMerged	mg;
		bool		ok;

		if (!sc_pb_merge(d, r, nr, s, f, &mg))
			return false;
		ok = json ? sc_pb_message_json(d, f->message, mg.r, mg.nr, out) :
			sc_pb_message_text(d, f->message, mg.r, mg.nr, out);
		sc_pb_merged_free(&mg);
		return ok;
	}
	else
	{
		const uint8 *p = s->last;
		const uint8 *v = NULL;
		const uint8 *vend = NULL;

		/*
		 * A number is read where it is (sc_pb_collect checked its wire type
		 * and its bytes); a string or bytes needs its bounds first.
		 */
		if (s->last_wt != SC_PB_WT_LEN)
			return sc_pb_scalar(d, f, &p, r[s->last_r].end, out, json);
		return sc_pb_value(d, SC_PB_WT_LEN, f->number, &p, r[s->last_r].end, &v, &vend) &&
			sc_pb_scalar(d, f, &v, vend, out, json);
	}
}

/*
 * Timestamp's or Duration's seconds and nanos as writers write them: one
 * occurrence of the message, holding nothing but fields 1 and 2 as
 * varints behind one-byte tags, the last of each winning.  False for
 * anything else, without a failure: the general path reads it then, with
 * the same result, or says what is wrong.  Half the cost of the general
 * path, which takes two passes over the bytes.
 */
static inline bool
sc_pb_seconds_nanos_fast(const ScPbRange *r, int nr, int64 *seconds, int32 *nanos)
{
	const uint8 *p = r[0].p;
	const uint8 *end = r[0].end;

	if (nr != 1)
		return false;
	while (p < end)
	{
		uint8		tag = *p++;
		uint64		u = 0;
		uint8		b;
		int			shift = 0;

		if (tag != (1 << 3 | SC_PB_WT_VARINT) && tag != (2 << 3 | SC_PB_WT_VARINT))
			return false;

		/*
		 * The varint a byte at a time: five bytes each here, which
		 * sc_pb_get_varint's eight at once do not pay for.
		 */
		do
		{
			if (p == end || shift > 63)
				return false;
			b = *p++;
			u |= (uint64) (b & 0x7f) << shift;
			shift += 7;
		} while (b >= 0x80);
		if (tag == (1 << 3 | SC_PB_WT_VARINT))
			*seconds = (int64) u;
		else
			*nanos = (int32) (uint32) u;
	}
	return true;
}

/* Timestamp's or Duration's seconds and nanos. */
static bool
sc_pb_seconds_nanos(ScPbDecoder *d, const ScPbMessage *m, const ScPbRange *r, int nr,
					int64 *seconds, int32 *nanos)
{
	ScPbSlot	slots[2];
	uint64		u;

	*seconds = 0;
	*nanos = 0;
	if (sc_pb_seconds_nanos_fast(r, nr, seconds, nanos))
		return true;
	*seconds = 0;
	*nanos = 0;
	if (!sc_pb_collect(d, m, r, nr, NULL, slots, false))
		return false;
	for (int i = 0; i < 2; i++)
	{
		const uint8 *p = slots[i].last;

		if (slots[i].count == 0)
			continue;
		if (!sc_pb_varint(d, &p, r[slots[i].last_r].end, &u))
			return sc_decode_fail_in(&d->fail, m->fields[i].name);
		if (i == 0)
			*seconds = (int64) u;
		else
			*nanos = (int32) (uint32) u;
	}
	return true;
}

/* A Timestamp: ISO text with +00 for a column, RFC 3339 in JSON. */
static bool
sc_pb_timestamp(ScPbDecoder *d, const ScPbMessage *m, const ScPbRange *r, int nr,
				StringInfo out, bool json)
{
	int64		seconds;
	int32		nanos;
	int64		days;
	int64		secs;
	int64		year;
	int			month;
	int			day;
	char	   *o;

	if (!sc_pb_seconds_nanos(d, m, r, nr, &seconds, &nanos))
		return false;
	if (seconds < SC_PB_TS_MIN || seconds > SC_PB_TS_MAX || nanos < 0 || nanos > 999999999)
		return sc_pb_fail(d, r[0].p, "Timestamp of " INT64_FORMAT " seconds and %d nanos is out of range",
						  seconds, nanos);
	if (!json)
	{
		/* the instant its text says */
		d->scalar.kind = SC_SCALAR_INSTANT;
		d->scalar.i = seconds * USECS_PER_SEC + nanos / 1000;
		if (d->take & SC_SCALAR_BIT(SC_SCALAR_INSTANT))
			return true;
	}
	days = seconds / 86400;
	secs = seconds % 86400;
	if (secs < 0)
	{
		secs += 86400;
		days--;
	}
	sc_text_civil(days, &year, &month, &day);
	enlargeStringInfo(out, 40);
	o = out->data + out->len;
	if (json)
		*o++ = '"';
	o = sc_text_put2(o, (int) (year / 100));
	o = sc_text_put2(o, (int) (year % 100));
	*o++ = '-';
	o = sc_text_put2(o, month);
	*o++ = '-';
	o = sc_text_put2(o, day);
	*o++ = json ? 'T' : ' ';
	o = sc_text_put2(o, (int) (secs / 3600));
	*o++ = ':';
	o = sc_text_put2(o, (int) (secs / 60 % 60));
	*o++ = ':';
	o = sc_text_put2(o, (int) (secs % 60));
	if (json)
	{
		if (nanos != 0)
			o = sc_pb_put_nanos_json(o, nanos);
		memcpy(o, "Z\"", 2);
		o += 2;
	}
	else
	{
		if (nanos / 1000 != 0)
			o = sc_pb_put_micros(o, nanos / 1000);
		memcpy(o, "+00", 3);
		o += 3;
	}
	*o = '\0';
	out->len = o - out->data;
	return true;
}

/* A Duration: "-1.5 seconds" (interval's input) for a column, "-1.5s" in JSON. */
static bool
sc_pb_duration(ScPbDecoder *d, const ScPbMessage *m, const ScPbRange *r, int nr,
			   StringInfo out, bool json)
{
	int64		seconds;
	int32		nanos;
	char	   *o;
	uint64		abs_secs;
	int32		abs_nanos;

	if (!sc_pb_seconds_nanos(d, m, r, nr, &seconds, &nanos))
		return false;
	if (seconds < -SC_PB_DURATION_MAX || seconds > SC_PB_DURATION_MAX ||
		nanos < -999999999 || nanos > 999999999 ||
		(seconds > 0 && nanos < 0) || (seconds < 0 && nanos > 0))
		return sc_pb_fail(d, r[0].p, "Duration of " INT64_FORMAT " seconds and %d nanos is out of range",
						  seconds, nanos);
	abs_secs = seconds < 0 ? -(uint64) seconds : (uint64) seconds;
	abs_nanos = nanos < 0 ? -nanos : nanos;
	enlargeStringInfo(out, 48);
	o = out->data + out->len;
	if (json)
		*o++ = '"';
	if (seconds < 0 || nanos < 0)
		*o++ = '-';
	o += pg_ulltoa_n(abs_secs, o);
	if (json)
	{
		if (abs_nanos != 0)
			o = sc_pb_put_nanos_json(o, abs_nanos);
		memcpy(o, "s\"", 2);
		o += 2;
	}
	else
	{
		if (abs_nanos / 1000 != 0)
			o = sc_pb_put_micros(o, abs_nanos / 1000);
		memcpy(o, " seconds", 8);
		o += 8;
	}
	*o = '\0';
	out->len = o - out->data;
	return true;
}

/*
 * A wrapper's value (its field 1), or Struct's map, ListValue's list as
 * JSON: the single field of m, its default when absent.
 */
static bool
sc_pb_single_field(ScPbDecoder *d, const ScPbMessage *m, const ScPbRange *r, int nr,
				   StringInfo out, bool json)
{
	ScPbSlot	slots[1];
	const ScPbField *f = &m->fields[0];

	if (!sc_pb_collect(d, m, r, nr, NULL, slots, false))
		return false;
	if (slots[0].count == 0)
	{
		if (f->label == SC_PB_LABEL_REPEATED)
			appendStringInfoString(out, f->message && f->message->map_entry ? "{}" : "[]");
		else
			appendBinaryStringInfo(out, json ? f->def_json : f->def_text,
								   json ? strlen(f->def_json) : f->def_text_len);
		return true;
	}
	if (!sc_pb_field_value(d, f, r, nr, &slots[0], out, json))
		return sc_decode_fail_in(&d->fail, f->name);
	return true;
}

/* Any message as JSON, fields by their declared names in declaration order. */
static bool
sc_pb_message_json(ScPbDecoder *d, const ScPbMessage *m, const ScPbRange *r, int nr,
				   StringInfo out)
{
	ScPbSlot	local[SC_PB_STACK_SLOTS];
	ScPbSlot   *slots;
	bool		ok = true;
	bool		any = false;

	if (!sc_pb_enter(d, r[0].p) || !sc_pb_room(d, out, r[0].p))
		return false;
	switch (m->wkt)
	{
		case SC_PB_WKT_TIMESTAMP:
			ok = sc_pb_timestamp(d, m, r, nr, out, true);
			d->depth--;
			return ok;
		case SC_PB_WKT_DURATION:
			ok = sc_pb_duration(d, m, r, nr, out, true);
			d->depth--;
			return ok;
		case SC_PB_WKT_WRAPPER:
		case SC_PB_WKT_STRUCT:
		case SC_PB_WKT_LISTVALUE:
			ok = sc_pb_single_field(d, m, r, nr, out, true);
			d->depth--;
			return ok;
		default:
			break;
	}
	slots = m->nfields <= SC_PB_STACK_SLOTS ? local : palloc(sizeof(ScPbSlot) * m->nfields);
	if (!sc_pb_collect(d, m, r, nr, NULL, slots, false))
	{
		ok = false;
		goto done;
	}
	if (m->wkt == SC_PB_WKT_VALUE)
	{
		/* the member of its oneof that came last, as a JSON value; null when none */
		for (int i = 0; i < m->nfields; i++)
		{
			const ScPbField *f = &m->fields[i];

			if (!sc_pb_present(slots, i))
				continue;
			any = true;
			if (f->type == SC_PB_ENUM)
				appendBinaryStringInfo(out, "null", 4);
			else if (!sc_pb_field_value(d, f, r, nr, &slots[i], out, true))
				ok = sc_decode_fail_in(&d->fail, f->name);
			break;
		}
		if (!any && ok)
			appendBinaryStringInfo(out, "null", 4);
		goto done;
	}
	appendStringInfoCharMacro(out, '{');
	for (int i = 0; i < m->nfields; i++)
	{
		const ScPbField *f = &m->fields[i];

		if (!sc_pb_present(slots, i))
		{
			const char *def;

			if (f->label == SC_PB_LABEL_REPEATED)
				def = f->message && f->message->map_entry ? "{}" : "[]";
			else if ((def = f->def_json) == NULL)
				continue;
			if (any)
				appendStringInfoCharMacro(out, ',');
			appendStringInfoString(out, f->json_key);
			appendStringInfoString(out, def);
			any = true;
			continue;
		}
		if (any)
			appendStringInfoCharMacro(out, ',');
		appendStringInfoString(out, f->json_key);
		any = true;
		if (!sc_pb_field_value(d, f, r, nr, &slots[i], out, true))
		{
			ok = sc_decode_fail_in(&d->fail, f->name);
			goto done;
		}
	}
	appendStringInfoCharMacro(out, '}');
done:
	if (slots != local)
		pfree(slots);
	if (ok)
		d->depth--;
	return ok;
}

/* A message as a column's text: the well-known types' own, else JSON. */
static bool
sc_pb_message_text(ScPbDecoder *d, const ScPbMessage *m, const ScPbRange *r, int nr,
				   StringInfo out)
{
	switch (m->wkt)
	{
		case SC_PB_WKT_TIMESTAMP:
			return sc_pb_timestamp(d, m, r, nr, out, false);
		case SC_PB_WKT_DURATION:
			return sc_pb_duration(d, m, r, nr, out, false);
		case SC_PB_WKT_WRAPPER:
			return sc_pb_single_field(d, m, r, nr, out, false);
		default:
			return sc_pb_message_json(d, m, r, nr, out);
	}
}

/* ----------------------------------------------------------------
 * Decoding by the plan
 * ----------------------------------------------------------------
 */

/* A field absent: its default's text in its columns (a message's: none, NULL). */
static void
sc_pb_column_default(ScPbDecoder *d, const ScPbField *f, const ScPbPlanField *pf)
{
	const char *def;
	int			deflen;

	if (f->label == SC_PB_LABEL_REPEATED)
	{
		def = f->message && f->message->map_entry ? "{}" : "[]";
		deflen = 2;
	}
	else if ((def = f->def_text) == NULL)
		return;
	else
		deflen = f->def_text_len;
	for (int c = 0; c < pf->ncols; c++)
	{
		appendBinaryStringInfo(d->values[pf->cols[c]], def, deflen);
		d->isnull[pf->cols[c]] = false;
	}
}

/*
 * Before a field's value is read for its columns: a scalar (pf->scalar)
 * has no text when every column of the field takes it so.  What is written
 * as JSON (inside which a map's key is read as a scalar too) is not.
 */
static inline void
sc_pb_column_begin(ScPbDecoder *d, const ScPbPlanField *pf)
{
	d->scalar.kind = SC_SCALAR_NONE;
	d->take = 0;
	if (d->takes != NULL && pf->scalar)
	{
		d->take = d->takes[pf->cols[0]];
		for (int c = 1; c < pf->ncols; c++)
			d->take &= d->takes[pf->cols[c]];
	}
}

/* After it was read into out (from outlen on): its other columns, its scalar. */
static inline void
sc_pb_column_end(ScPbDecoder *d, const ScPbPlanField *pf, StringInfo out, int outlen)
{
	d->text += (int64) (out->len - outlen) * pf->ncols;
	if (pf->ncols == 1)
		d->isnull[pf->cols[0]] = false;
	else
		sc_decode_share(d->values, d->isnull, pf->cols, pf->ncols, outlen);
	if (d->scalars != NULL && pf->scalar)
		for (int c = 0; c < pf->ncols; c++)
			d->scalars[pf->cols[c]] = d->scalar;
}

static bool
sc_pb_plan_decode(ScPbDecoder *d, const ScPbPlanMsg *pm, const ScPbRange *r, int nr)
{
	const ScPbMessage *m = pm->message;
	ScPbSlot	local[SC_PB_STACK_SLOTS];
	ScPbSlot   *slots;
	bool		ok = true;

	if (!sc_pb_enter(d, r[0].p))
		return false;
	slots = m->nfields <= SC_PB_STACK_SLOTS ? local : palloc(sizeof(ScPbSlot) * m->nfields);
	if (!sc_pb_collect(d, m, r, nr, pm->note, slots, d->depth == 1))
	{
		ok = false;
		goto done;
	}
	for (int k = 0; k < pm->nwanted; k++)
	{
		int			i = pm->wanted[k];
		const ScPbField *f = &m->fields[i];
		const ScPbPlanField *pf = &pm->fields[i];
		StringInfo	out;
		int			outlen;

		if (!sc_pb_present(slots, i))
		{
			sc_pb_column_default(d, f, pf);
			continue;
		}
		if (pf->sub != NULL)
		{
			ScPbMerged	mg;

			if (!sc_pb_merge(d, r, nr, &slots[i], f, &mg))
				ok = false;
			else
			{
				ok = sc_pb_plan_decode(d, pf->sub, mg.r, mg.nr);
				sc_pb_merged_free(&mg);
			}
			if (!ok)
			{
				sc_decode_fail_in(&d->fail, f->name);
				goto done;
			}
		}
		if (pf->ncols == 0)
			continue;
		out = d->values[pf->cols[0]];
		outlen = out->len;
		sc_pb_column_begin(d, pf);
		if (!sc_pb_field_value(d, f, r, nr, &slots[i], out, false))
		{
			ok = sc_decode_fail_in(&d->fail, f->name);
			goto done;
		}
		sc_pb_column_end(d, pf, out, outlen);
	}
done:
	if (slots != local)
		pfree(slots);
	if (ok)
		d->depth--;
	return ok;
}

/*
 * The top message [p, end) in one pass, when its plan allows it
 * (pm->one_pass: the fields its columns read are singular, in no oneof,
 * and no path goes on into them, as in most schemas): each value goes to
 * its columns where it comes.  sc_pb_plan_decode notes where every field
 * comes in a first pass and reads the values in a second; this checks
 * what that first pass checks (sc_pb_collect), in the same order, and
 * writes what the second writes.  What it does not do is left to
 * sc_pb_plan_decode, which starts again from the first byte: a field met
 * a second time (the last wins, a message's occurrences merge) and any
 * failure, which it then reports in its words.  False in those cases,
 * with the columns to be reset.
 */
static bool
sc_pb_one_pass(ScPbDecoder *d, const ScPbPlanMsg *pm, const uint8 *p, const uint8 *end)
{
	const ScPbMessage *m = pm->message;
	uint64		seen = 0;

	if (!sc_pb_enter(d, p))
		return false;
	while (p < end)
	{
		uint32		num = 0;
		int			wt = 0;
		uint64		u = 0;
		const uint8 *v;
		const uint8 *vend;
		const ScPbField *f;
		const ScPbPlanField *pf;
		StringInfo	out;
		int			i;
		int			k;
		int			outlen;
		bool		ok;

		/* the tag: one byte for fields 1 to 15 */
		if (likely(*p >= 8 && *p < 0x80))
		{
			num = *p >> 3;
			wt = *p++ & 7;
		}
		else if (!sc_pb_tag(d, &p, end, &num, &wt))
			return false;
		v = p;
		if (wt == SC_PB_WT_VARINT)
		{
			/* inline, the longer ones too; the general path says what is wrong */
			if (likely(p < end && *p < 0x80))
				u = *p++;
			else if (sc_pb_get_varint(&p, end, &u) != SC_PB_OK)
				return false;
			vend = p;
		}
		else if (wt == SC_PB_WT_LEN && likely(p < end && *p < 0x80 && *p < end - p))
		{
			/* a length of one byte, inline too */
			v = p + 1;
			vend = v + *p;
			p = vend;
		}
		else if (!sc_pb_value(d, wt, num, &p, end, &v, &vend))
			return false;
		if ((i = sc_pb_field_index(m, num)) < 0)
			continue;			/* an unknown field */
		f = &m->fields[i];
		if (unlikely(wt != f->wt && !(wt == SC_PB_WT_LEN && f->packable)))
			continue;			/* the same: a wire type not the field's */

		/*
		 * A Timestamp or Duration a column reads has all its bytes checked
		 * as it is read (it holds no strings): no walk before.
		 */
		k = pm->wanted_at[i];
		if ((wt == SC_PB_WT_LEN || f->message != NULL) &&
			!(k >= 0 && f->message != NULL && (f->message->wkt == SC_PB_WKT_TIMESTAMP ||
											   f->message->wkt == SC_PB_WKT_DURATION)) &&
			!(f->utf8 && sc_plain_ascii((const char *) v, vend - v)) &&
			!sc_pb_check_value(d, f, v, vend))
			return false;
		if (k < 0 || (unlikely(f->closed) && !sc_pb_enum_known(f->enumtype, v, vend)))
			continue;
		if (seen & (UINT64CONST(1) << k))
			return false;
		seen |= UINT64CONST(1) << k;

		pf = &pm->fields[i];
		out = d->values[pf->cols[0]];
		outlen = out->len;
		sc_pb_column_begin(d, pf);
		if (f->message != NULL)
		{
			ScPbRange	r = {v, vend};
			int64		seconds = 0;
			int32		nanos = 0;

			/*
			 * A Timestamp its columns take as an instant, as writers write
			 * it: read here; anything else by sc_pb_timestamp, which says
			 * what is wrong.
			 */
			if (f->message->wkt == SC_PB_WKT_TIMESTAMP &&
				(d->take & SC_SCALAR_BIT(SC_SCALAR_INSTANT)) &&
				sc_pb_seconds_nanos_fast(&r, 1, &seconds, &nanos) &&
				seconds >= SC_PB_TS_MIN && seconds <= SC_PB_TS_MAX &&
				nanos >= 0 && nanos <= 999999999)
			{
				d->scalar.kind = SC_SCALAR_INSTANT;
				d->scalar.i = seconds * USECS_PER_SEC + nanos / 1000;
				ok = true;
			}
			else
				ok = f->message->wkt == SC_PB_WKT_TIMESTAMP ?
					sc_pb_timestamp(d, f->message, &r, 1, out, false) :
					sc_pb_message_text(d, f->message, &r, 1, out);
		}
		else if (wt == SC_PB_WT_VARINT)
			ok = sc_pb_scalar_text(d, f, u, v, vend, out, false);
		else if (f->type == SC_PB_STRING && f->utf8)
		{
			/* its UTF-8 checked above: text takes it unless it holds a NUL */
			ok = !(d->nul && memchr(v, '\0', vend - v) != NULL);
			if (ok && (d->take & SC_SCALAR_BIT(SC_SCALAR_TEXT)))
			{
				/* its columns take it as a text datum: no copy here */
				d->scalar.kind = SC_SCALAR_TEXT;
				d->scalar.s = (const char *) v;
				d->scalar.i = vend - v;
			}
			else if (ok)
				appendBinaryStringInfo(out, (const char *) v, vend - v);
		}
		else
			ok = sc_pb_scalar(d, f, &v, vend, out, false);
		if (!ok)
			return false;
		sc_pb_column_end(d, pf, out, outlen);
	}
	if (seen != (UINT64CONST(1) << pm->nwanted) - 1)
		for (int k = 0; k < pm->nwanted; k++)
			if (!(seen & (UINT64CONST(1) << k)))
				sc_pb_column_default(d, &m->fields[pm->wanted[k]], &pm->fields[pm->wanted[k]]);
	d->depth--;
	return true;
}

bool
sc_proto_read_indexes(const char *buf, size_t len, int *indexes, int maxindexes,
					  int *nindexes, size_t *consumed)
{
	const uint8 *p = (const uint8 *) buf;
	const uint8 *end = p + len;
	uint64		u;
	int64		count;

	/* [0], the file's first type, is one 0 byte: as most writers write */
	if (len > 0 && p[0] == 0 && maxindexes >= 1)
	{
		indexes[0] = 0;
		*nindexes = 1;
		*consumed = 1;
		return true;
	}
	if (sc_pb_get_varint(&p, end, &u) != SC_PB_OK)
		return false;
	count = (int64) (u >> 1) ^ -(int64) (u & 1);
	if (count == 0)
	{
		if (maxindexes < 1)
			return false;
		indexes[0] = 0;
		*nindexes = 1;
		*consumed = p - (const uint8 *) buf;
		return true;
	}
	if (count < 0 || count > maxindexes)
		return false;
	for (int i = 0; i < count; i++)
	{
		int64		v;

		if (sc_pb_get_varint(&p, end, &u) != SC_PB_OK)
			return false;
		v = (int64) (u >> 1) ^ -(int64) (u & 1);
		if (v < 0 || v > PG_INT32_MAX)
			return false;
		indexes[i] = (int) v;
	}
	*nindexes = (int) count;
	*consumed = p - (const uint8 *) buf;
	return true;
}

bool
sc_proto_decode(const ScProtoPlan *plan, const char *buf, size_t len,
				StringInfo *values, bool *isnull, ScScalar *scalars, const uint16 *takes,
				char **error)
{
	ScPbDecoder d;
	ScPbRange	r;

	d.start = (const uint8 *) buf;
	d.depth = 0;
	d.values = values;
	d.isnull = isnull;
	d.scalars = scalars;
	d.takes = scalars != NULL ? takes : NULL;
	d.take = 0;
	d.scalar.kind = SC_SCALAR_NONE;
	d.text = 0;
	d.dropped = false;
	d.nul = false;
	d.fail.what = NULL;
	d.fail.where = NIL;
	r.p = d.start;
	r.end = d.start + len;
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
	if (len > SC_PB_MAX_MESSAGE)
	{
		sc_pb_fail(&d, d.start, "a message of %zu bytes, more than the %zu decoded",
				   len, (size_t) SC_PB_MAX_MESSAGE);
		goto fail;
	}
	if (plan->top->one_pass)
	{
		if (sc_pb_one_pass(&d, plan->top, r.p, r.end))
			goto whole;
		/* not for one pass: the columns as they came, and the general path */
		d.depth = 0;
		d.text = 0;
		d.nul = false;
		d.fail.what = NULL;
		d.fail.where = NIL;
		for (int c = 0; c < plan->ncolumns; c++)
		{
			values[c]->len = 0;
			values[c]->data[0] = '\0';
			isnull[c] = true;
			if (scalars != NULL)
				scalars[c].kind = SC_SCALAR_NONE;
		}
	}
	if (!sc_pb_plan_decode(&d, plan->top, &r, 1))
		goto fail;

whole:

	/* columns taking the whole message: read it again, as JSON */
	if (plan->nwhole > 0)
	{
		StringInfo	out = values[plan->whole[0]];
		int			outlen = out->len;

		if (!sc_pb_message_json(&d, plan->message, &r, 1, out))
			goto fail;
		/* the copies count too */
		d.text += (int64) (out->len - outlen) * (plan->nwhole - 1);
		if (!sc_pb_room(&d, out, d.start))
			goto fail;
		sc_decode_share(values, isnull, plan->whole, plan->nwhole, outlen);
	}
	return true;

fail:
	*error = sc_decode_error(&d.fail);
	return false;
}
