/*-------------------------------------------------------------------------
 *
 * protobuf_wire.c
 *		A Protobuf message's wire format: tags, values and groups read
 *		within their bytes, what the reference parsers check in a message,
 *		and the pass that notes where each field came (sc_pb_collect).
 *
 * A message is a sequence of fields in any order; a singular field may
 * come more than once (the last scalar wins, messages merge, a oneof
 * member set clears the one set before), a repeated one packed or not, and
 * fields the type does not declare are skipped by their wire type, as are
 * declared fields of another wire type than their type's and numbers a
 * closed (proto2) enum does not name: unknown fields, as the reference
 * parsers read them.  So every message is read in two steps: one pass over
 * its tags notes, per field wanted, how often it came, where first and
 * where last (ScPbSlot), checking the wire format of every field on the
 * way; then each wanted field is read from there, in declaration order.
 * A message met more than once is read as the concatenation of its
 * occurrences (ScPbRange lists), which is what merging means.
 *
 * A failure is noted in the decoder (sc_pb_fail) and false goes back up;
 * protobuf.c says how bad bytes are met.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "mb/pg_wchar.h"
#include "protobuf_internal.h"

/* A failure at byte at of the message, noted in d (json_text.c); false. */
pg_noinline bool
sc_pb_fail(ScPbDecoder *d, const uint8 *at, const char *fmt,...)
{
	va_list		args;

	va_start(args, fmt);
	sc_decode_failv(&d->fail, at - d->start, fmt, args);
	va_end(args);
	return false;
}

/* sc_pb_varint's way for a varint of more bytes than one, or none. */
pg_noinline bool
sc_pb_varint_slow(ScPbDecoder *d, const uint8 **pp, const uint8 *end, uint64 *value)
{
	switch (sc_pb_get_varint(pp, end, value))
	{
		case SC_PB_OK:
			return true;
		case SC_PB_TRUNCATED:
			return sc_pb_fail(d, *pp, "truncated varint");
		default:
			return sc_pb_fail(d, *pp, "bad varint: more than 10 bytes");
	}
}

/*
 * A group's contents after its start tag (field num): *pp moves past its
 * end tag, *content_end to where that tag begins.  Groups inside it are
 * matched by a stack, not by recursion.
 */
bool
sc_pb_skip_group(ScPbDecoder *d, const uint8 **pp, const uint8 *end, uint32 num,
				 const uint8 **content_end)
{
	uint32		stack[SC_PB_MAX_DEPTH];
	int			depth = 0;
	const uint8 *p = *pp;

	stack[depth++] = num;
	for (;;)
	{
		const uint8 *tagp = p;
		uint32		n = 0;
		int			wt = 0;
		uint64		v;

		if (p >= end)
			return sc_pb_fail(d, p, "truncated: group of field %u has no end tag", stack[depth - 1]);
		if (!sc_pb_tag(d, &p, end, &n, &wt))
			return false;
		switch (wt)
		{
			case SC_PB_WT_VARINT:
				if (!sc_pb_varint(d, &p, end, &v))
					return false;
				break;
			case SC_PB_WT_I64:
				if (!sc_pb_need(d, p, end, 8))
					return false;
				p += 8;
				break;
			case SC_PB_WT_I32:
				if (!sc_pb_need(d, p, end, 4))
					return false;
				p += 4;
				break;
			case SC_PB_WT_LEN:
				if (!sc_pb_varint(d, &p, end, &v))
					return false;
				if (v > (uint64) (end - p))
					return sc_pb_fail(d, p, "truncated: length " UINT64_FORMAT ", %zu bytes left",
									  v, (size_t) (end - p));
				p += v;
				break;
			case SC_PB_WT_SGROUP:
				if (depth >= SC_PB_MAX_DEPTH)
					return sc_pb_fail(d, tagp, "groups nested deeper than %d levels", SC_PB_MAX_DEPTH);
				stack[depth++] = n;
				break;
			case SC_PB_WT_EGROUP:
				if (n != stack[depth - 1])
					return sc_pb_fail(d, tagp, "end tag of group %u inside group %u", n, stack[depth - 1]);
				if (--depth == 0)
				{
					*content_end = tagp;
					*pp = p;
					return true;
				}
				break;
			default:
				return sc_pb_fail(d, tagp, "invalid wire type %d (field %u)", wt, n);
		}
	}
}

/*
 * Is [s, s + len) UTF-8 as Protobuf means it: valid, NUL allowed (text
 * refuses a NUL, but that is the column's limit, not the message's).
 */
pg_noinline bool
sc_pb_utf8_nul_ok(const char *s, size_t len)
{
	while (len > 0)
	{
		const char *nul = memchr(s, '\0', len);
		size_t		n = nul ? (size_t) (nul - s) : len;

		if (!pg_verify_mbstr(PG_UTF8, s, n, true))
			return false;
		if (nul == NULL)
			break;
		s += n + 1;
		len -= n + 1;
	}
	return true;
}

static bool sc_pb_check(ScPbDecoder *d, const ScPbMessage *m, const uint8 **pp,
						const uint8 *end, uint32 group);

/*
 * Are [p, end) fields as writers write them: one-byte tags of varints,
 * fixed numbers and lengths, all within the bytes?  Then a flat message
 * (sc_pb_check) needs no more look.  False for anything else, without a
 * failure: sc_pb_check reads it then, and says what is wrong.
 */
static inline bool
sc_pb_flat_fast(const uint8 *p, const uint8 *end)
{
	while (p < end)
	{
		uint8		tag = *p++;
		uint64		u;

		if (tag >= 0x80 || tag < 8)
			return false;
		switch (tag & 7)
		{
			case SC_PB_WT_VARINT:
				if (sc_pb_get_varint(&p, end, &u) != SC_PB_OK)
					return false;
				break;
			case SC_PB_WT_I64:
				if (end - p < 8)
					return false;
				p += 8;
				break;
			case SC_PB_WT_I32:
				if (end - p < 4)
					return false;
				p += 4;
				break;
			case SC_PB_WT_LEN:
				if (sc_pb_get_varint(&p, end, &u) != SC_PB_OK || u > (uint64) (end - p))
					return false;
				p += u;
				break;
			default:
				return false;
		}
	}
	return true;
}

/*
 * What the reference parsers check in a LEN value [v, vend) of field f, of
 * its wire type: a proto3 string's UTF-8, a message's contents, packed
 * numbers' bytes.  The failure names f.
 */
bool
sc_pb_check_value(ScPbDecoder *d, const ScPbField *f, const uint8 *v, const uint8 *vend)
{
	if (f->utf8)
	{
		if (likely(sc_plain_ascii((const char *) v, vend - v) ||
				   pg_verify_mbstr(PG_UTF8, (const char *) v, vend - v, true)))
			return true;
		if (sc_pb_utf8_nul_ok((const char *) v, vend - v))
		{
			d->nul = true;		/* fine for the message, not for text */
			return true;
		}
		sc_pb_fail(d, v, "a string that is not valid UTF-8");
	}
	else if (f->message != NULL)
	{
		if ((f->message->flat && d->depth < SC_PB_MAX_DEPTH && sc_pb_flat_fast(v, vend)) ||
			sc_pb_check(d, f->message, &v, vend, 0))
			return true;
	}
	else if (f->packable)
	{
		if (f->wt == SC_PB_WT_VARINT)
		{
			while (v < vend)
				if (!sc_pb_skip_varint(d, &v, vend))
					return sc_decode_fail_in(&d->fail, f->name);
			return true;
		}
		if ((vend - v) % (f->wt == SC_PB_WT_I32 ? 4 : 8) == 0)
			return true;
		sc_pb_fail(d, v, "packed %s values of %zu bytes, not a multiple of %d",
				   sc_pb_type_names[f->type], (size_t) (vend - v), f->wt == SC_PB_WT_I32 ? 4 : 8);
	}
	else
		return true;
	return sc_decode_fail_in(&d->fail, f->name);
}

/*
 * One pass over a message's ranges: every field's wire format is checked,
 * and the occurrences of the fields noted (note NULL: all) go to their
 * slots.  A declared field whose wire type is not its type's, or a closed
 * enum's number the enum does not name, is an unknown field, as the
 * reference parsers read them; setting a member of a oneof clears the
 * member set before it.  With check, what the reference parsers check in
 * the whole message is checked too, in the fields no column reads as in
 * the others (sc_pb_check): decoding the top message does that, so that a
 * message is refused, or not, for the same reason whatever the cube maps.
 */
bool
sc_pb_collect(ScPbDecoder *d, const ScPbMessage *m, const ScPbRange *r, int nr,
			  const bool *note, ScPbSlot *slots, bool check)
{
	memset(slots, 0, sizeof(ScPbSlot) * m->nfields);
	for (int k = 0; k < nr; k++)
	{
		const uint8 *p = r[k].p;
		const uint8 *end = r[k].end;

		while (p < end)
		{
			uint32		num = 0;
			int			wt = 0;
			int			i;
			const uint8 *tagp = p;
			const uint8 *valp;
			const uint8 *v;
			const uint8 *vend;
			const ScPbField *f;
			ScPbSlot   *s;

			if (!sc_pb_tag(d, &p, end, &num, &wt))
				return false;
			i = sc_pb_field_index(m, num);
			if (i < 0)
			{
				if (!sc_pb_value(d, wt, num, &p, end, &v, &vend))
					return sc_decode_fail_in(&d->fail, psprintf("%u", num));
				d->dropped = true;
				continue;
			}
			f = &m->fields[i];
			valp = p;
			if (!sc_pb_value(d, wt, num, &p, end, &v, &vend))
				return sc_decode_fail_in(&d->fail, f->name);
			if (unlikely(wt != f->wt && !(wt == SC_PB_WT_LEN && f->packable)))
			{
				d->dropped = true;
				continue;		/* an unknown field */
			}
			if (check && (wt == SC_PB_WT_LEN || f->message != NULL) &&
				!sc_pb_check_value(d, f, v, vend))
				return false;
			if (unlikely(f->closed) && f->label != SC_PB_LABEL_REPEATED &&
				!sc_pb_enum_known(f->enumtype, v, vend))
			{
				d->dropped = true;
				continue;		/* an unknown field: the value before stays */
			}
			if (note != NULL && !note[i])
				continue;
			s = &slots[i];
			if (f->oneof >= 0)
			{
				ScPbSlot   *h = &slots[f->oneof_head];

				if (h->oneof_set != i + 1)
				{
					if (h->oneof_set != 0)
						slots[h->oneof_set - 1].count = 0;
					h->oneof_set = i + 1;
				}
			}
			if (s->count++ == 0)
			{
				s->first_r = k;
				s->first = tagp;
			}
			s->last_r = k;
			s->last = valp;
			s->last_wt = wt;
		}
	}
	return true;
}

/*
 * What the reference parsers check in a message no column reads whole:
 * its wire format, nesting, the UTF-8 of proto3 strings, in every message
 * inside it.  From *pp to end, or (group > 0) to the end tag of that group,
 * *pp moved past it.  Nothing is noted.
 */
static bool
sc_pb_check(ScPbDecoder *d, const ScPbMessage *m, const uint8 **pp, const uint8 *end,
			uint32 group)
{
	const uint8 *p = *pp;

	if (m->flat)
	{
		/* its fields' values need no look: no lookups, no recursion */
		if (unlikely(d->depth >= SC_PB_MAX_DEPTH))
			return sc_pb_fail(d, p, "messages nested deeper than %d levels", SC_PB_MAX_DEPTH);
		while (p < end)
		{
			uint32		num = 0;
			int			wt = 0;
			const uint8 *tagp = p;
			const uint8 *v;
			const uint8 *vend;

			if (!sc_pb_tag(d, &p, end, &num, &wt))
				return false;
			if (wt == SC_PB_WT_EGROUP && group > 0)
			{
				if (num != group)
					return sc_pb_fail(d, tagp, "end tag of group %u inside group %u", num, group);
				*pp = p;
				return true;
			}
			if (!sc_pb_value(d, wt, num, &p, end, &v, &vend))
			{
				int			i = sc_pb_field_index(m, num);

				return sc_decode_fail_in(&d->fail, i >= 0 ? m->fields[i].name : psprintf("%u", num));
			}
		}
		if (group > 0)
			return sc_pb_fail(d, p, "truncated: group of field %u has no end tag", group);
		*pp = p;
		return true;
	}
	if (!sc_pb_enter(d, p))
		return false;
	for (;;)
	{
		uint32		num = 0;
		int			wt = 0;
		int			i;
		const uint8 *tagp = p;
		const uint8 *v;
		const uint8 *vend;
		const ScPbField *f;

		if (p >= end)
		{
			if (group > 0)
				return sc_pb_fail(d, p, "truncated: group of field %u has no end tag", group);
			break;
		}
		if (!sc_pb_tag(d, &p, end, &num, &wt))
			return false;
		if (wt == SC_PB_WT_EGROUP && group > 0)
		{
			if (num != group)
				return sc_pb_fail(d, tagp, "end tag of group %u inside group %u", num, group);
			break;
		}
		i = sc_pb_field_index(m, num);
		f = i >= 0 ? &m->fields[i] : NULL;
		if (f != NULL && wt == SC_PB_WT_SGROUP && f->wt == SC_PB_WT_SGROUP)
		{
			/* a group of the type: checked as it is read, in one pass */
			if (!sc_pb_check(d, f->message, &p, end, num))
				return sc_decode_fail_in(&d->fail, f->name);
			continue;
		}
		if (!sc_pb_value(d, wt, num, &p, end, &v, &vend))
			return sc_decode_fail_in(&d->fail, f ? f->name : psprintf("%u", num));
		if (f != NULL && wt == SC_PB_WT_LEN && (f->wt == SC_PB_WT_LEN || f->packable) &&
			!sc_pb_check_value(d, f, v, vend))
			return false;
	}
	*pp = p;
	d->depth--;
	return true;
}

/*
 * The next occurrence's wire type and value (of a wire type of the field's:
 * others are unknown fields, which sc_pb_collect did not count); false at
 * the end or on a failure (d->fail.what).
 */
bool
sc_pb_next_occurrence(ScPbDecoder *d, ScPbOccurrences *it, int *wt,
					  const uint8 **v, const uint8 **vend)
{
	if (it->left == 0)
		return false;
	while (it->k < it->nr)
	{
		const uint8 *end = it->r[it->k].end;

		while (it->p < end)
		{
			uint32		num = 0;

			if (!sc_pb_tag(d, &it->p, end, &num, wt) ||
				!sc_pb_value(d, *wt, num, &it->p, end, v, vend))
				return false;
			if (num == (uint32) it->f->number &&
				(*wt == it->f->wt || (*wt == SC_PB_WT_LEN && it->f->packable)))
			{
				it->left--;
				return true;
			}
		}
		if (++it->k < it->nr)
			it->p = it->r[it->k].p;
	}
	return sc_pb_fail(d, it->p, "an occurrence of field %d went missing", it->f->number);
}
