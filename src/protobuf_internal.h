/*-------------------------------------------------------------------------
 *
 * protobuf_internal.h
 *		What the files of Protobuf decoding share: the types of a schema, of
 *		a plan and of a decoder, the wire format's primitives, and the
 *		functions one file calls in another.
 *
 * Protobuf decoding (protobuf.h) is split by phase, as a schema is read,
 * planned and then used on every message; a file calls only files above
 * it in this list:
 *
 *	protobuf_build.c		building a schema: what both parsers share
 *	protobuf_descriptor.c	a schema file from a FileDescriptorProto
 *	protobuf_text.c			a schema file from .proto text
 *	protobuf_schema.c		files loaded with their imports (the well-known
 *							types built in), names resolved, enums and
 *							messages finished, defaults: sc_proto_parse
 *	protobuf_plan.c			which fields of a message type feed which
 *							columns: sc_proto_plan
 *	protobuf_wire.c			a message's wire format: tags, values, groups,
 *							what the reference parsers check, where each
 *							field came
 *	protobuf.c				the text of values, and a message decoded by
 *							the plan, in one pass when the plan allows
 *							and else in two: sc_proto_decode
 *
 * Each of them includes this file, and no other file does: the rest of
 * streamcube sees protobuf.h, to which a schema and a plan are opaque.
 * What the decoder does for every field (read a varint or a value, enter a
 * message) is static inline here, as it was when all of it was one file.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_PROTOBUF_INTERNAL_H
#define SC_PROTOBUF_INTERNAL_H

#include "streamcube.h"

#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "port/pg_bitutils.h"
#include "protobuf.h"
#include "utils/builtins.h"

/* Messages (and groups) nested deeper than this in data are refused. */
#define SC_PB_MAX_DEPTH 100

/* Message declarations nested deeper than this in a schema are refused. */
#define SC_PB_MAX_SCHEMA_DEPTH 64

/* The largest field number. */
#define SC_PB_MAX_FIELD_NUMBER 536870911

/* ----------------------------------------------------------------
 * A schema and a plan
 * ----------------------------------------------------------------
 */
/* Wire types. */
#define SC_PB_WT_VARINT 0
#define SC_PB_WT_I64 1
#define SC_PB_WT_LEN 2
#define SC_PB_WT_SGROUP 3
#define SC_PB_WT_EGROUP 4
#define SC_PB_WT_I32 5

/* Field types, numbered as FieldDescriptorProto.Type numbers them. */
typedef enum ScPbType
{
	SC_PB_UNRESOLVED = 0,		/* a named type not yet looked up */
	SC_PB_DOUBLE = 1,
	SC_PB_FLOAT = 2,
	SC_PB_INT64 = 3,
	SC_PB_UINT64 = 4,
	SC_PB_INT32 = 5,
	SC_PB_FIXED64 = 6,
	SC_PB_FIXED32 = 7,
	SC_PB_BOOL = 8,
	SC_PB_STRING = 9,
	SC_PB_GROUP = 10,
	SC_PB_MESSAGE = 11,
	SC_PB_BYTES = 12,
	SC_PB_UINT32 = 13,
	SC_PB_ENUM = 14,
	SC_PB_SFIXED32 = 15,
	SC_PB_SFIXED64 = 16,
	SC_PB_SINT32 = 17,
	SC_PB_SINT64 = 18
} ScPbType;

#define SC_PB_NTYPES 19

static const char *const sc_pb_type_names[SC_PB_NTYPES] = {
	"unresolved", "double", "float", "int64", "uint64", "int32", "fixed64",
	"fixed32", "bool", "string", "group", "message", "bytes", "uint32", "enum",
	"sfixed32", "sfixed64", "sint32", "sint64"
};

/* The wire type of each field type (a packed repeated field: LEN too). */
static const int8 sc_pb_type_wt[SC_PB_NTYPES] = {
	-1, SC_PB_WT_I64, SC_PB_WT_I32, SC_PB_WT_VARINT, SC_PB_WT_VARINT,
	SC_PB_WT_VARINT, SC_PB_WT_I64, SC_PB_WT_I32, SC_PB_WT_VARINT, SC_PB_WT_LEN,
	SC_PB_WT_SGROUP, SC_PB_WT_LEN, SC_PB_WT_LEN, SC_PB_WT_VARINT,
	SC_PB_WT_VARINT, SC_PB_WT_I32, SC_PB_WT_I64, SC_PB_WT_VARINT,
	SC_PB_WT_VARINT
};

#define SC_PB_LABEL_OPTIONAL 1
#define SC_PB_LABEL_REQUIRED 2
#define SC_PB_LABEL_REPEATED 3

/* Well-known types with texts of their own. */
typedef enum ScPbWkt
{
	SC_PB_WKT_NONE,
	SC_PB_WKT_TIMESTAMP,
	SC_PB_WKT_DURATION,
	SC_PB_WKT_WRAPPER,			/* DoubleValue ... BytesValue: field 1 "value" */
	SC_PB_WKT_EMPTY,
	SC_PB_WKT_STRUCT,			/* JSON object of its map "fields" */
	SC_PB_WKT_VALUE,			/* the JSON value its oneof holds */
	SC_PB_WKT_LISTVALUE			/* JSON array of its "values" */
} ScPbWkt;

typedef struct ScPbEnum
{
	const char *fullname;
	const struct ScPbFile *file;
	int			line;
	List	   *lnames;			/* while parsing: names, numbers */
	List	   *lnumbers;
	int			nvalues;		/* distinct numbers, sorted, each with the
								 * first name declared for it */
	int32	   *numbers;
	const char **names;
	const char *first;			/* the first value's name: the default */
} ScPbEnum;

typedef struct ScPbMessage ScPbMessage;

typedef struct ScPbField
{
	const char *name;
	const char *json_key;		/* "\"name\":" */
	int32		number;
	int8		label;
	int8		type;			/* ScPbType */
	int8		wt;				/* the wire type expected */
	bool		packable;		/* repeated scalar of a numeric type: LEN too */
	bool		presence;		/* absent reads as NULL (and is left out of
								 * JSON): a message, a oneof member, a proto3
								 * optional field */
	int			oneof;			/* the real oneof it belongs to, or -1 */
	int			oneof_head;		/* the index of its oneof's first member */
	bool		proto3_optional;
	bool		closed;			/* an enum of a proto2 file: a number it
								 * does not name is an unknown field */
	bool		utf8;			/* a string of a proto3 file: its UTF-8 is
								 * checked, wherever it is */
	int			line;			/* in .proto text; 0 for a descriptor */
	const char *type_name;		/* a named type as written */
	const ScPbMessage *message; /* message, group */
	const ScPbEnum *enumtype;

	/* the declared default, as written */
	const char *defval;
	int			deflen;
	bool		def_escaped;	/* C-escaped (a descriptor's bytes default) */
	bool		def_string;		/* a string literal (.proto text) */

	/* the text of the field absent: NULL when it reads as NULL */
	const char *def_text;
	int			def_text_len;
	const char *def_json;
} ScPbField;

typedef struct ScPbFile ScPbFile;

struct ScPbMessage
{
	const char *name;
	const char *fullname;
	ScPbFile   *file;
	int			line;
	List	   *lfields;		/* while parsing: ScPbField */
	int			nfields;
	ScPbField  *fields;			/* in declaration order */
	List	   *nested;			/* ScPbMessage, in declaration order (map
								 * entries and groups where declared) */
	List	   *enums;
	int			noneofs;
	bool		map_entry;
	bool		flat;			/* nothing in it to check but the wire format:
								 * no proto3 string, message, group or packed
								 * field (sc_pb_check) */
	ScPbWkt		wkt;

	/* field number -> index + 1: directly below ndirect, else by bsearch */
	int32		ndirect;
	int16	   *direct;
	int32	   *sorted_numbers;
	int16	   *sorted_index;
};

struct ScPbFile
{
	const char *name;			/* its import path, or NULL for the schema */
	const char *package;		/* "" when none */
	int			syntax;			/* 2 or 3 */
	List	   *imports;		/* paths */
	List	   *messages;		/* top-level ScPbMessage */
	List	   *enums;
};

typedef struct ScPbSymbol
{
	const char *name;			/* full name, no leading dot */
	ScPbMessage *message;
	ScPbEnum   *enumtype;
} ScPbSymbol;

struct ScProtoSchema
{
	ScPbFile   *main;
	List	   *files;
	int			nsymbols;
	ScPbSymbol *symbols;		/* sorted by name */
};

typedef struct ScPbPlanMsg ScPbPlanMsg;

/* What to do with one field of a message on a column's path. */
typedef struct ScPbPlanField
{
	int			ncols;			/* columns taking the field's value */
	int		   *cols;
	ScPbPlanMsg *sub;			/* paths going on into it: its message's plan */
	bool		scalar;			/* a single number, bool, Timestamp or
								 * wrapper: what its columns may take as a
								 * value (ScScalar) */
} ScPbPlanField;

struct ScPbPlanMsg
{
	const ScPbMessage *message;
	ScPbPlanField *fields;		/* one per field of the message */
	bool	   *note;			/* fields whose occurrences are noted: those
								 * wanted and their oneof's other members */
	int			nwanted;		/* fields wanted, in declaration order */
	int		   *wanted;
	int		   *wanted_at;		/* per field: its place in wanted, or -1 */
	bool		one_pass;		/* read in one pass (protobuf.c, sc_pb_one_pass) */
};

struct ScProtoPlan
{
	const ScProtoSchema *schema;
	const ScPbMessage *message;
	int			ncolumns;
	ScPbPlanMsg *top;
	int			nwhole;			/* columns taking the whole message */
	int		   *whole;
};

/*
 * The name of number v of enum e (the first declared for it), or NULL:
 * for defaults (protobuf_schema.c) as for values (protobuf_wire.c,
 * protobuf.c).
 */
static inline const char *
sc_pb_enum_name(const ScPbEnum *e, int32 v)
{
	int			lo = 0,
				hi = e->nvalues - 1;

	while (lo <= hi)
	{
		int			mid = (lo + hi) / 2;

		if (e->numbers[mid] == v)
			return e->names[mid];
		if (e->numbers[mid] < v)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}

/* ----------------------------------------------------------------
 * Wire format primitives, shared by the schema and the data decoders
 * ----------------------------------------------------------------
 */
typedef enum ScPbWire
{
	SC_PB_OK,
	SC_PB_TRUNCATED,
	SC_PB_TOO_LONG
} ScPbWire;

/*
 * A varint of at most 10 bytes (bits past 64 are dropped, as parsers do).
 * The bytes it may take are counted once, not checked against the end one
 * by one: most varints of a message lie 10 bytes or more before its end.
 */
static pg_attribute_always_inline ScPbWire
sc_pb_get_varint(const uint8 **pp, const uint8 *end, uint64 *value)
{
	const uint8 *p = *pp;
	int			n = end - p >= 10 ? 10 : (int) (end - p);
	uint64		u = 0;

#ifndef WORDS_BIGENDIAN

	/*
	 * Eight bytes at once (or the fewer left): the first byte under 0x80
	 * ends the varint, and the 7-bit groups before it are packed together
	 * in three steps.  Only a varint of 9 or 10 bytes goes on to the loop.
	 */
	{
		uint64		x = 0;
		uint64		stops;

		if (likely(n >= 8))
			memcpy(&x, p, 8);
		else
		{
			/* fewer bytes left: the last field's, mostly */
			switch (n)
			{
				case 7:
					x |= (uint64) p[6] << 48;
					/* FALLTHROUGH */
				case 6:
					x |= (uint64) p[5] << 40;
					/* FALLTHROUGH */
				case 5:
					x |= (uint64) p[4] << 32;
					/* FALLTHROUGH */
				case 4:
					x |= (uint64) p[3] << 24;
					/* FALLTHROUGH */
				case 3:
					x |= (uint64) p[2] << 16;
					/* FALLTHROUGH */
				case 2:
					x |= (uint64) p[1] << 8;
					/* FALLTHROUGH */
				case 1:
					x |= p[0];
					break;
				default:
					break;
			}
		}
		stops = ~x & UINT64CONST(0x8080808080808080);
		if (n < 8)
			stops &= (UINT64CONST(1) << (8 * n)) - 1;
		if (likely(stops != 0))
		{
			int			bits = pg_rightmost_one_pos64(stops) + 1;	/* 8 a byte */

			if (bits < 64)
				x &= (UINT64CONST(1) << bits) - 1;
			x = ((x & UINT64CONST(0x7f007f007f007f00)) >> 1) | (x & UINT64CONST(0x007f007f007f007f));
			x = ((x & UINT64CONST(0x3fff00003fff0000)) >> 2) | (x & UINT64CONST(0x00003fff00003fff));
			x = ((x & UINT64CONST(0x0fffffff00000000)) >> 4) | (x & UINT64CONST(0x000000000fffffff));
			*pp = p + bits / 8;
			*value = x;
			return SC_PB_OK;
		}
	}
#endif
	for (int i = 0; i < n; i++)
	{
		uint8		b = p[i];

		u |= (uint64) (b & 0x7f) << (7 * i);
		if (b < 0x80)
		{
			*pp = p + i + 1;
			*value = u;
			return SC_PB_OK;
		}
	}
	return n < 10 ? SC_PB_TRUNCATED : SC_PB_TOO_LONG;
}

static inline uint32
sc_pb_le32(const uint8 *p)
{
	return (uint32) p[0] | (uint32) p[1] << 8 | (uint32) p[2] << 16 | (uint32) p[3] << 24;
}

static inline uint64
sc_pb_le64(const uint8 *p)
{
	return (uint64) sc_pb_le32(p) | (uint64) sc_pb_le32(p + 4) << 32;
}

/* ----------------------------------------------------------------
 * Small texts
 * ----------------------------------------------------------------
 */

static inline void
sc_pb_int64(StringInfo out, int64 v)
{
	enlargeStringInfo(out, 21);
	out->len += pg_lltoa(v, out->data + out->len);
}

static inline void
sc_pb_uint64(StringInfo out, uint64 v)
{
	enlargeStringInfo(out, 21);
	out->len += pg_ulltoa_n(v, out->data + out->len);
	out->data[out->len] = '\0';
}

/* ----------------------------------------------------------------
 * Building a schema: what both parsers share
 * ----------------------------------------------------------------
 */
typedef struct ScPbParse
{
	int			nrefs;
	const char *const *ref_names;
	const char *const *ref_texts;
	List	   *files;			/* ScPbFile loaded */
	List	   *loading;		/* paths being loaded, for cycles */
	List	   *messages;		/* every message of every file */
	List	   *allenums;
	char	   *error;
} ScPbParse;

/* protobuf_build.c */
extern bool sc_pb_parse_fail(ScPbParse *ps, const char *fmt,...) pg_attribute_printf(2, 3);
extern bool sc_pb_parse_failv(ScPbParse *ps, const char *prefix, const char *fmt, va_list args)
			pg_attribute_printf(3, 0);
extern ScPbMessage *sc_pb_new_message(ScPbParse *ps, ScPbFile *file, ScPbMessage *parent,
									  const char *name, int line);
extern ScPbEnum *sc_pb_new_enum(ScPbParse *ps, ScPbFile *file, ScPbMessage *parent,
								const char *name, int line);
extern ScPbType sc_pb_scalar_type(const char *name);
extern char *sc_pb_unescape(const char *s, int len, int *outlen);

/* protobuf_descriptor.c */
extern bool sc_pb_desc_file(ScPbParse *ps, ScPbFile *file, const uint8 *bytes, size_t len,
							const char *where);
extern uint8 *sc_pb_base64_decode(const char *s, size_t *len);

/* protobuf_text.c */
extern bool sc_pb_text_file(ScPbParse *ps, ScPbFile *file, const char *text,
							const char *where);

/* ----------------------------------------------------------------
 * Decoding: what protobuf_wire.c and protobuf.c share
 * ----------------------------------------------------------------
 */
typedef struct ScPbDecoder
{
	const uint8 *start;			/* the message, for byte positions */
	int			depth;			/* messages open */
	StringInfo *values;
	bool	   *isnull;
	ScScalar   *scalars;		/* see sc_proto_decode; NULL when not wanted */
	const uint16 *takes;		/* the same */
	uint16		take;			/* of the column value being read: the kinds
								 * its columns take with no text */
	ScScalar	scalar;			/* what the column value being read was */
	int64		text;			/* text of the columns done (SC_PB_MAX_TEXT) */

	bool		dropped;		/* an unknown field was met (an undeclared
								 * number, a wire type not the field's, a
								 * closed enum's unknown number) */
	bool		nul;			/* a proto3 string of the message holds a NUL */

	ScDecodeFailure fail;		/* the first failure (json_text.c) */
} ScPbDecoder;

/* The bytes of a message, or of one of its occurrences. */
typedef struct ScPbRange
{
	const uint8 *p;
	const uint8 *end;
} ScPbRange;

/* Where a field of a message came, over its ranges. */
typedef struct ScPbSlot
{
	uint32		count;			/* occurrences */
	int			first_r;		/* the first's range and tag */
	const uint8 *first;
	int			last_r;			/* the last's range, wire type, and where
								 * its value begins (after the tag) */
	const uint8 *last;
	int			last_wt;
	int			oneof_set;		/* in the slot of a oneof's first member:
								 * the index + 1 of the member set last */
} ScPbSlot;

/* Iterating over the occurrences of one field, from its first. */
typedef struct ScPbOccurrences
{
	const ScPbRange *r;
	int			nr;
	int			k;
	const uint8 *p;
	const ScPbField *f;
	uint32		left;
} ScPbOccurrences;

/* protobuf_wire.c */
extern pg_noinline bool sc_pb_fail(ScPbDecoder *d, const uint8 *at, const char *fmt,...) pg_attribute_printf(3, 4);
extern pg_noinline bool sc_pb_varint_slow(ScPbDecoder *d, const uint8 **pp, const uint8 *end,
										  uint64 *value);
extern bool sc_pb_skip_group(ScPbDecoder *d, const uint8 **pp, const uint8 *end, uint32 num,
							 const uint8 **content_end);
extern pg_noinline bool sc_pb_utf8_nul_ok(const char *s, size_t len);
extern bool sc_pb_collect(ScPbDecoder *d, const ScPbMessage *m, const ScPbRange *r, int nr,
						  const bool *note, ScPbSlot *slots, bool check);
extern bool sc_pb_next_occurrence(ScPbDecoder *d, ScPbOccurrences *it, int *wt,
								  const uint8 **v, const uint8 **vend);
extern bool sc_pb_check_value(ScPbDecoder *d, const ScPbField *f, const uint8 *v,
							  const uint8 *vend);

static inline bool
sc_pb_varint(ScPbDecoder *d, const uint8 **pp, const uint8 *end, uint64 *value)
{
	if (likely(*pp < end && **pp < 0x80))
	{
		*value = *(*pp)++;
		return true;
	}
	return sc_pb_varint_slow(d, pp, end, value);
}

/* A field's tag: its number (never 0) and wire type. */
static inline bool
sc_pb_tag(ScPbDecoder *d, const uint8 **pp, const uint8 *end, uint32 *num, int *wt)
{
	const uint8 *at = *pp;
	uint64		tag;

	if (!sc_pb_varint(d, pp, end, &tag))
		return false;
	if (unlikely(tag > PG_UINT32_MAX || (tag >> 3) == 0))
		return sc_pb_fail(d, at, "bad tag " UINT64_FORMAT " (field number %u)", tag,
						  (unsigned) (tag >> 3));
	*num = (uint32) (tag >> 3);
	*wt = (int) (tag & 7);
	return true;
}

/* The index in m of its field of number num, or -1. */
static inline int
sc_pb_field_index(const ScPbMessage *m, uint32 num)
{
	int			lo,
				hi;

	if (likely(m->direct != NULL))
		return num < (uint32) m->ndirect ? m->direct[num] - 1 : -1;
	lo = 0;
	hi = m->nfields - 1;
	while (lo <= hi)
	{
		int			mid = (lo + hi) / 2;

		if (m->sorted_numbers[mid] == (int32) num)
			return m->sorted_index[mid];
		if (m->sorted_numbers[mid] < (int32) num)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

/* Past a varint whose value is not wanted: its bytes found, not added up. */
static inline bool
sc_pb_skip_varint(ScPbDecoder *d, const uint8 **pp, const uint8 *end)
{
	const uint8 *p = *pp;
	const uint8 *stop = end - p >= 10 ? p + 10 : end;
	uint64		u;

	while (p < stop)
		if (*p++ < 0x80)
		{
			*pp = p;
			return true;
		}
	return sc_pb_varint_slow(d, pp, end, &u);	/* says what is wrong */
}

static inline bool
sc_pb_need(ScPbDecoder *d, const uint8 *p, const uint8 *end, size_t n)
{
	if (likely((size_t) (end - p) >= n))
		return true;
	return sc_pb_fail(d, p, "truncated: %zu bytes needed, %zu left", n, (size_t) (end - p));
}

/*
 * The value of a field after its tag (field num, wire type wt) at *pp:
 * [*v, *vend) its bytes (LEN: inside the length; a group: inside its
 * tags), *pp past it.
 */
static inline bool
sc_pb_value(ScPbDecoder *d, int wt, uint32 num, const uint8 **pp, const uint8 *end,
			const uint8 **v, const uint8 **vend)
{
	const uint8 *p = *pp;
	uint64		u;

	switch (wt)
	{
		case SC_PB_WT_VARINT:
			*v = p;
			if (!sc_pb_skip_varint(d, &p, end))
				return false;
			break;
		case SC_PB_WT_I64:
			if (!sc_pb_need(d, p, end, 8))
				return false;
			*v = p;
			p += 8;
			break;
		case SC_PB_WT_I32:
			if (!sc_pb_need(d, p, end, 4))
				return false;
			*v = p;
			p += 4;
			break;
		case SC_PB_WT_LEN:
			if (!sc_pb_varint(d, &p, end, &u))
				return false;
			if (unlikely(u > (uint64) (end - p)))
				return sc_pb_fail(d, p, "truncated: length " UINT64_FORMAT ", %zu bytes left",
								  u, (size_t) (end - p));
			*v = p;
			p += u;
			break;
		case SC_PB_WT_SGROUP:
			*v = p;
			if (!sc_pb_skip_group(d, &p, end, num, vend))
				return false;
			*pp = p;
			return true;
		case SC_PB_WT_EGROUP:
			return sc_pb_fail(d, p, "an end-group tag (field %u) without its start", num);
		default:
			return sc_pb_fail(d, p, "invalid wire type %d (field %u)", wt, num);
	}
	*vend = p;
	*pp = p;
	return true;
}

static inline bool
sc_pb_enter(ScPbDecoder *d, const uint8 *at)
{
	CHECK_FOR_INTERRUPTS();		/* a load and a branch: every message */
	if (likely(++d->depth <= SC_PB_MAX_DEPTH && !stack_is_too_deep()))
		return true;
	return sc_pb_fail(d, at, "messages nested deeper than %d levels", SC_PB_MAX_DEPTH);
}

/*
 * Is the value at v (a varint) a number closed enum e names?  A number it
 * does not name is an unknown field, as the reference parsers read it.
 */
static inline bool
sc_pb_enum_known(const ScPbEnum *e, const uint8 *v, const uint8 *end)
{
	uint64		u;

	return sc_pb_get_varint(&v, end, &u) == SC_PB_OK &&
		sc_pb_enum_name(e, (int32) (uint32) u) != NULL;
}

/* it at the first occurrence of field f, which slot s noted. */
static inline void
sc_pb_occurrences(ScPbOccurrences *it, const ScPbRange *r, int nr, const ScPbSlot *s,
				  const ScPbField *f)
{
	it->r = r;
	it->nr = nr;
	it->k = s->first_r;
	it->p = s->first;
	it->f = f;
	it->left = s->count;
}

#endif							/* SC_PROTOBUF_INTERNAL_H */
