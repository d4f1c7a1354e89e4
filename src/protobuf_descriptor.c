/*-------------------------------------------------------------------------
 *
 * protobuf_descriptor.c
 *		A Protobuf schema file from a serialized FileDescriptorProto, the
 *		form Confluent's serializers register (in base64).
 *
 * What the parsers need of descriptor.proto: FileDescriptorProto (name 1,
 * package 2, dependency 3, message_type 4, enum_type 5, syntax 12,
 * edition 14), DescriptorProto (name 1, field 2, nested_type 3,
 * enum_type 4, options 7 with map_entry 7, oneof_decl 8),
 * FieldDescriptorProto (name 1, number 3, label 4, type 5, type_name 6,
 * default_value 7, oneof_index 9, proto3_optional 17), EnumDescriptorProto
 * (name 1, value 2) and EnumValueDescriptorProto (name 1, number 2).
 * Everything else is skipped by wire type.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "mb/pg_wchar.h"
#include "protobuf_internal.h"

typedef struct ScPbReader
{
	const uint8 *p;
	const uint8 *end;
	const uint8 *start;			/* of the whole descriptor, for positions */
} ScPbReader;

typedef struct ScPbDesc
{
	ScPbParse  *ps;
	ScPbFile   *file;
	const char *where;			/* the file, for errors */
} ScPbDesc;

static bool
sc_pb_desc_fail(ScPbDesc *dd, ScPbReader *r, const char *what)
{
	return sc_pb_parse_fail(dd->ps, "%s: the descriptor is malformed: %s (at byte %zu)",
							dd->where, what, (size_t) (r->p - r->start));
}

/* The next field of r: its number, wire type, and value (LEN: a reader of it). */
static bool
sc_pb_desc_next(ScPbDesc *dd, ScPbReader *r, uint32 *num, int *wt, uint64 *value,
				ScPbReader *sub)
{
	uint64		tag;

	if (sc_pb_get_varint(&r->p, r->end, &tag) != SC_PB_OK)
		return sc_pb_desc_fail(dd, r, "a bad tag");
	if (tag > PG_UINT32_MAX || (tag >> 3) == 0)
		return sc_pb_desc_fail(dd, r, "a bad tag");
	*num = (uint32) (tag >> 3);
	*wt = (int) (tag & 7);
	switch (*wt)
	{
		case SC_PB_WT_VARINT:
			if (sc_pb_get_varint(&r->p, r->end, value) != SC_PB_OK)
				return sc_pb_desc_fail(dd, r, "a bad varint");
			return true;
		case SC_PB_WT_I64:
			if (r->end - r->p < 8)
				return sc_pb_desc_fail(dd, r, "truncated");
			r->p += 8;
			return true;
		case SC_PB_WT_I32:
			if (r->end - r->p < 4)
				return sc_pb_desc_fail(dd, r, "truncated");
			r->p += 4;
			return true;
		case SC_PB_WT_LEN:
			if (sc_pb_get_varint(&r->p, r->end, value) != SC_PB_OK ||
				*value > (uint64) (r->end - r->p))
				return sc_pb_desc_fail(dd, r, "a bad length");
			sub->p = r->p;
			sub->end = r->p + *value;
			sub->start = r->start;
			r->p += *value;
			return true;
		default:
			/* descriptor.proto has no groups */
			return sc_pb_desc_fail(dd, r, psprintf("wire type %d", *wt));
	}
}

static bool
sc_pb_desc_string(ScPbDesc *dd, ScPbReader *r, int wt, ScPbReader *sub, char **out)
{
	size_t		n;

	if (wt != SC_PB_WT_LEN)
		return sc_pb_desc_fail(dd, r, "a string field of another wire type");
	n = sub->end - sub->p;
	if (!pg_verify_mbstr(PG_UTF8, (const char *) sub->p, n, true))
		return sc_pb_desc_fail(dd, r, "a name that is not valid UTF-8");
	*out = pnstrdup((const char *) sub->p, n);
	return true;
}

static bool
sc_pb_desc_enum(ScPbDesc *dd, ScPbReader *r, ScPbMessage *parent)
{
	ScPbReader	scan = *r;
	ScPbReader	sub;
	uint32		num = 0;
	int			wt = 0;
	uint64		v;
	char	   *name = NULL;
	ScPbEnum   *e;

	while (scan.p < scan.end)
	{
		if (!sc_pb_desc_next(dd, &scan, &num, &wt, &v, &sub))
			return false;
		if (num == 1 && !sc_pb_desc_string(dd, &scan, wt, &sub, &name))
			return false;
	}
	if (name == NULL || name[0] == '\0')
		return sc_pb_desc_fail(dd, r, "an enum without a name");
	e = sc_pb_new_enum(dd->ps, dd->file, parent, name, 0);
	while (r->p < r->end)
	{
		if (!sc_pb_desc_next(dd, r, &num, &wt, &v, &sub))
			return false;
		if (num == 2 && wt == SC_PB_WT_LEN)
		{
			char	   *vname = NULL;
			int64		number = 0;
			ScPbReader	vsub;

			while (sub.p < sub.end)
			{
				uint32		vnum;
				int			vwt;
				uint64		vv;

				if (!sc_pb_desc_next(dd, &sub, &vnum, &vwt, &vv, &vsub))
					return false;
				if (vnum == 1 && !sc_pb_desc_string(dd, &sub, vwt, &vsub, &vname))
					return false;
				if (vnum == 2 && vwt == SC_PB_WT_VARINT)
					number = (int32) (uint32) vv;
			}
			if (vname == NULL)
				return sc_pb_desc_fail(dd, r, psprintf("a value of enum \"%s\" without a name", e->fullname));
			e->lnames = lappend(e->lnames, vname);
			e->lnumbers = lappend_int(e->lnumbers, (int) number);
		}
	}
	return true;
}

static bool
sc_pb_desc_field(ScPbDesc *dd, ScPbReader *r, ScPbMessage *m)
{
	ScPbField  *f = palloc0(sizeof(ScPbField));
	ScPbReader	sub;
	uint32		num = 0;
	int			wt = 0;
	uint64		v;
	char	   *s;
	bool		has_number = false;

	f->label = SC_PB_LABEL_OPTIONAL;
	f->oneof = -1;
	while (r->p < r->end)
	{
		if (!sc_pb_desc_next(dd, r, &num, &wt, &v, &sub))
			return false;
		switch (num)
		{
			case 1:
				if (!sc_pb_desc_string(dd, r, wt, &sub, &s))
					return false;
				f->name = s;
				break;
			case 3:
				if (wt != SC_PB_WT_VARINT)
					return sc_pb_desc_fail(dd, r, "a field number of another wire type");
				f->number = (int32) (uint32) v;
				has_number = true;
				break;
			case 4:
				if (wt != SC_PB_WT_VARINT || v < 1 || v > 3)
					return sc_pb_desc_fail(dd, r, "a bad field label");
				f->label = (int8) v;
				break;
			case 5:
				if (wt != SC_PB_WT_VARINT || v < 1 || v >= SC_PB_NTYPES)
					return sc_pb_desc_fail(dd, r, "a bad field type");
				f->type = (int8) v;
				break;
			case 6:
				if (!sc_pb_desc_string(dd, r, wt, &sub, &s))
					return false;
				f->type_name = s;
				break;
			case 7:
				if (wt != SC_PB_WT_LEN)
					return sc_pb_desc_fail(dd, r, "a default of another wire type");
				f->defval = pnstrdup((const char *) sub.p, sub.end - sub.p);
				f->deflen = sub.end - sub.p;
				f->def_escaped = true;
				break;
			case 9:
				if (wt != SC_PB_WT_VARINT || v > PG_INT32_MAX)
					return sc_pb_desc_fail(dd, r, "a bad oneof index");
				f->oneof = (int) v;
				break;
			case 17:
				if (wt != SC_PB_WT_VARINT)
					return sc_pb_desc_fail(dd, r, "a bad proto3_optional");
				f->proto3_optional = (v != 0);
				break;
			default:
				break;
		}
	}
	if (f->name == NULL || f->name[0] == '\0' || !has_number)
		return sc_pb_desc_fail(dd, r, psprintf("a field of message \"%s\" without a name or a number",
											   m->fullname));
	if (f->type == SC_PB_GROUP || f->type == SC_PB_MESSAGE || f->type == SC_PB_ENUM ||
		f->type == SC_PB_UNRESOLVED)
	{
		if (f->type_name == NULL || f->type_name[0] == '\0')
			return sc_pb_desc_fail(dd, r, psprintf("field \"%s\" of message \"%s\" has no type",
												   f->name, m->fullname));
	}
	else
		f->type_name = NULL;
	if (f->def_escaped && f->type != SC_PB_BYTES)
		f->def_escaped = false; /* only bytes defaults are escaped */
	m->lfields = lappend(m->lfields, f);
	return true;
}

static bool
sc_pb_desc_message(ScPbDesc *dd, ScPbReader *r, ScPbMessage *parent, int depth)
{
	ScPbReader	scan = *r;
	ScPbReader	sub;
	uint32		num = 0;
	int			wt = 0;
	uint64		v;
	char	   *name = NULL;
	ScPbMessage *m;

	if (depth > SC_PB_MAX_SCHEMA_DEPTH)
		return sc_pb_desc_fail(dd, r, psprintf("messages nested deeper than %d levels",
											   SC_PB_MAX_SCHEMA_DEPTH));
	/* the name first: nested types are named in it */
	while (scan.p < scan.end)
	{
		if (!sc_pb_desc_next(dd, &scan, &num, &wt, &v, &sub))
			return false;
		if (num == 1 && !sc_pb_desc_string(dd, &scan, wt, &sub, &name))
			return false;
	}
	if (name == NULL || name[0] == '\0')
		return sc_pb_desc_fail(dd, r, "a message without a name");
	m = sc_pb_new_message(dd->ps, dd->file, parent, name, 0);
	while (r->p < r->end)
	{
		if (!sc_pb_desc_next(dd, r, &num, &wt, &v, &sub))
			return false;
		if (wt != SC_PB_WT_LEN)
			continue;
		switch (num)
		{
			case 2:
				if (!sc_pb_desc_field(dd, &sub, m))
					return false;
				break;
			case 3:
				if (!sc_pb_desc_message(dd, &sub, m, depth + 1))
					return false;
				break;
			case 4:
				if (!sc_pb_desc_enum(dd, &sub, m))
					return false;
				break;
			case 7:
				while (sub.p < sub.end)
				{
					ScPbReader	osub;
					uint32		onum;
					int			owt;
					uint64		ov;

					if (!sc_pb_desc_next(dd, &sub, &onum, &owt, &ov, &osub))
						return false;
					if (onum == 7 && owt == SC_PB_WT_VARINT)
						m->map_entry = (ov != 0);
				}
				break;
			case 8:
				m->noneofs++;
				break;
			default:
				break;
		}
	}
	return true;
}

/* The FileDescriptorProto bytes[0..len) into file; where names it in errors. */
bool
sc_pb_desc_file(ScPbParse *ps, ScPbFile *file, const uint8 *bytes, size_t len,
				const char *where)
{
	ScPbDesc	dd = {ps, file, where};
	ScPbReader	r = {bytes, bytes + len, bytes};
	ScPbReader	scan = r;
	ScPbReader	sub;
	uint32		num = 0;
	int			wt = 0;
	uint64		v;
	char	   *s;

	/* package and syntax first: the names of the types depend on them */
	while (scan.p < scan.end)
	{
		if (!sc_pb_desc_next(&dd, &scan, &num, &wt, &v, &sub))
			return false;
		if (num == 2 && !sc_pb_desc_string(&dd, &scan, wt, &sub, &s))
			return false;
		if (num == 2)
			file->package = s;
		if (num == 12)
		{
			if (!sc_pb_desc_string(&dd, &scan, wt, &sub, &s))
				return false;
			if (strcmp(s, "proto3") == 0)
				file->syntax = 3;
			else if (strcmp(s, "proto2") == 0 || s[0] == '\0')
				file->syntax = 2;
			else
				return sc_pb_parse_fail(ps, "%s: syntax \"%s\" is not supported (proto2 and proto3 are)",
										where, s);
		}
		if (num == 14)
			return sc_pb_parse_fail(ps, "%s: editions are not supported (proto2 and proto3 are)",
									where);
	}
	while (r.p < r.end)
	{
		if (!sc_pb_desc_next(&dd, &r, &num, &wt, &v, &sub))
			return false;
		if (wt != SC_PB_WT_LEN)
			continue;
		switch (num)
		{
			case 3:
				if (!sc_pb_desc_string(&dd, &r, wt, &sub, &s))
					return false;
				file->imports = lappend(file->imports, s);
				break;
			case 4:
				if (!sc_pb_desc_message(&dd, &sub, NULL, 1))
					return false;
				break;
			case 5:
				if (!sc_pb_desc_enum(&dd, &sub, NULL))
					return false;
				break;
			default:
				break;
		}
	}
	return true;
}

/*
 * Base64 (standard alphabet, padding optional, line breaks allowed) of s:
 * the bytes, or NULL when s is anything else.
 */
uint8 *
sc_pb_base64_decode(const char *s, size_t *len)
{
	size_t		n = strlen(s);
	uint8	   *out = palloc(n / 4 * 3 + 3);
	size_t		o = 0;
	uint32		acc = 0;
	int			bits = 0;
	int			chars = 0;
	int			pad = 0;

	for (size_t i = 0; i < n; i++)
	{
		char		c = s[i];
		int			v;

		if (c == '\n' || c == '\r')
			continue;
		if (c == '=')
		{
			pad++;
			continue;
		}
		if (pad > 0)
			return NULL;		/* data after padding */
		if (c >= 'A' && c <= 'Z')
			v = c - 'A';
		else if (c >= 'a' && c <= 'z')
			v = c - 'a' + 26;
		else if (c >= '0' && c <= '9')
			v = c - '0' + 52;
		else if (c == '+' || c == '-')
			v = 62;
		else if (c == '/' || c == '_')
			v = 63;
		else
			return NULL;
		acc = (acc << 6) | v;
		bits += 6;
		chars++;
		if (bits >= 8)
		{
			bits -= 8;
			out[o++] = (uint8) (acc >> bits);
		}
	}
	if (chars % 4 == 1 || pad > 2 || (pad > 0 && (chars + pad) % 4 != 0))
		return NULL;
	*len = o;
	return out;
}
