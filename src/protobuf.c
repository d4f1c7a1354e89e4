/*-------------------------------------------------------------------------
 *
 * protobuf.c
 *		Protobuf decoding, written from the Protocol Buffers language
 *		specifications (proto2, proto3) and the encoding specification:
 *		parsing a schema (.proto text or a FileDescriptorProto) with its
 *		imports, planning which values of a message type feed which
 *		columns, and decoding one message into the text of those values.
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
 * The plan (ScPbPlanMsg) mirrors the messages on the columns' paths and
 * says, per field, which columns take it and whether a path goes on into
 * it.  Fields no column wants are not read, but the top message's pass
 * checks all of it as the reference parsers do (the wire format of every
 * message inside, the UTF-8 of proto3 strings: sc_pb_check), so that a
 * message is refused or not, for the same reason, whatever the columns.
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
 * open enum's number the schema does not know as the number), Timestamp as an ISO timestamp with +00, Duration as interval
 * text, wrappers as their value.  Repeated fields, maps and messages are
 * JSON, with the proto3 JSON mapping's texts inside (bytes base64,
 * Timestamp RFC 3339, Duration "1.5s"), fields by their declared names.
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

#include <math.h>

#include "common/shortest_dec.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "protobuf.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/memutils.h"

/* Messages (and groups) nested deeper than this in data are refused. */
#define SC_PB_MAX_DEPTH 100

/* Message declarations nested deeper than this in a schema are refused. */
#define SC_PB_MAX_SCHEMA_DEPTH 64

/* Files one schema may import, at any depth. */
#define SC_PB_MAX_FILES 1000

/* Fields of one message type (a field's index is an int16). */
#define SC_PB_MAX_FIELDS 30000

/* The largest field number. */
#define SC_PB_MAX_FIELD_NUMBER 536870911

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
} ScPbPlanField;

struct ScPbPlanMsg
{
	const ScPbMessage *message;
	ScPbPlanField *fields;		/* one per field of the message */
	bool	   *note;			/* fields whose occurrences are noted: those
								 * wanted and their oneof's other members */
	int			nwanted;		/* fields wanted, in declaration order */
	int		   *wanted;
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
static inline ScPbWire
sc_pb_get_varint(const uint8 **pp, const uint8 *end, uint64 *value)
{
	const uint8 *p = *pp;
	int			n = end - p >= 10 ? 10 : (int) (end - p);
	uint64		u = 0;

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

static ScPbFile *sc_pb_load(ScPbParse *ps, const char *name, const char *text);

static bool
sc_pb_parse_fail(ScPbParse *ps, const char *fmt,...) pg_attribute_printf(2, 3);

static bool
sc_pb_parse_fail(ScPbParse *ps, const char *fmt,...)
{
	StringInfoData buf;

	if (ps->error != NULL)
		return false;
	initStringInfo(&buf);
	for (;;)
	{
		va_list		args;
		int			needed;

		va_start(args, fmt);
		needed = appendStringInfoVA(&buf, fmt, args);
		va_end(args);
		if (needed == 0)
			break;
		enlargeStringInfo(&buf, needed);
	}
	ps->error = buf.data;
	return false;
}

static const char *
sc_pb_join(const char *scope, const char *name)
{
	if (scope == NULL || scope[0] == '\0')
		return pstrdup(name);
	return psprintf("%s.%s", scope, name);
}

static ScPbMessage *
sc_pb_new_message(ScPbParse *ps, ScPbFile *file, ScPbMessage *parent,
				  const char *name, int line)
{
	ScPbMessage *m = palloc0(sizeof(ScPbMessage));

	m->name = name;
	m->fullname = sc_pb_join(parent ? parent->fullname : file->package, name);
	m->file = file;
	m->line = line;
	if (parent)
		parent->nested = lappend(parent->nested, m);
	else
		file->messages = lappend(file->messages, m);
	ps->messages = lappend(ps->messages, m);
	return m;
}

static ScPbEnum *
sc_pb_new_enum(ScPbParse *ps, ScPbFile *file, ScPbMessage *parent,
			   const char *name, int line)
{
	ScPbEnum   *e = palloc0(sizeof(ScPbEnum));

	e->file = file;
	e->fullname = sc_pb_join(parent ? parent->fullname : file->package, name);
	e->line = line;
	if (parent)
		parent->enums = lappend(parent->enums, e);
	else
		file->enums = lappend(file->enums, e);
	ps->allenums = lappend(ps->allenums, e);
	return e;
}

static ScPbType
sc_pb_scalar_type(const char *name)
{
	for (int t = 1; t < SC_PB_NTYPES; t++)
		if (t != SC_PB_GROUP && t != SC_PB_MESSAGE && t != SC_PB_ENUM &&
			strcmp(name, sc_pb_type_names[t]) == 0)
			return t;
	return SC_PB_UNRESOLVED;
}

/*
 * C-style escapes in s[0..len) (.proto string literals, a descriptor's
 * bytes default): \a \b \f \n \r \t \v \\ \' \" \?, \NNN octal, \xHH,
 * \uHHHH and \UHHHHHHHH (as UTF-8).  NULL when an escape is bad.
 */
static char *
sc_pb_unescape(const char *s, int len, int *outlen)
{
	char	   *out = palloc(len + 1);
	int			n = 0;

	for (int i = 0; i < len; i++)
	{
		char		c = s[i];

		if (c != '\\')
		{
			out[n++] = c;
			continue;
		}
		if (++i >= len)
			return NULL;
		c = s[i];
		switch (c)
		{
			case 'a':
				out[n++] = '\a';
				break;
			case 'b':
				out[n++] = '\b';
				break;
			case 'f':
				out[n++] = '\f';
				break;
			case 'n':
				out[n++] = '\n';
				break;
			case 'r':
				out[n++] = '\r';
				break;
			case 't':
				out[n++] = '\t';
				break;
			case 'v':
				out[n++] = '\v';
				break;
			case '\\':
			case '\'':
			case '"':
			case '?':
				out[n++] = c;
				break;
			case 'x':
			case 'X':
				{
					int			v = 0,
								k = 0;

					while (k < 2 && i + 1 < len && isxdigit((unsigned char) s[i + 1]))
					{
						char		h = s[++i];

						v = v * 16 + (isdigit((unsigned char) h) ? h - '0' : (h | 0x20) - 'a' + 10);
						k++;
					}
					if (k == 0)
						return NULL;
					out[n++] = (char) v;
					break;
				}
			case 'u':
			case 'U':
				{
					int			want = (c == 'u') ? 4 : 8;
					pg_wchar	v = 0;
					unsigned char utf8[8];

					for (int k = 0; k < want; k++)
					{
						char		h;

						if (i + 1 >= len || !isxdigit((unsigned char) s[i + 1]))
							return NULL;
						h = s[++i];
						v = v * 16 + (isdigit((unsigned char) h) ? h - '0' : (h | 0x20) - 'a' + 10);
					}
					if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
						return NULL;
					unicode_to_utf8(v, utf8);
					memcpy(out + n, utf8, pg_utf_mblen(utf8));
					n += pg_utf_mblen(utf8);
					break;
				}
			default:
				if (c >= '0' && c <= '7')
				{
					int			v = c - '0';

					for (int k = 0; k < 2 && i + 1 < len && s[i + 1] >= '0' && s[i + 1] <= '7'; k++)
						v = v * 8 + (s[++i] - '0');
					if (v > 255)
						return NULL;
					out[n++] = (char) v;
					break;
				}
				return NULL;
		}
	}
	out[n] = '\0';
	*outlen = n;
	return out;
}

/* ----------------------------------------------------------------
 * A FileDescriptorProto
 *
 * What the parsers need of descriptor.proto: FileDescriptorProto (name 1,
 * package 2, dependency 3, message_type 4, enum_type 5, syntax 12,
 * edition 14), DescriptorProto (name 1, field 2, nested_type 3,
 * enum_type 4, options 7 with map_entry 7, oneof_decl 8),
 * FieldDescriptorProto (name 1, number 3, label 4, type 5, type_name 6,
 * default_value 7, oneof_index 9, proto3_optional 17), EnumDescriptorProto
 * (name 1, value 2) and EnumValueDescriptorProto (name 1, number 2).
 * Everything else is skipped by wire type.
 * ----------------------------------------------------------------
 */
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

static bool
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
static uint8 *
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

/* ----------------------------------------------------------------
 * .proto text
 * ----------------------------------------------------------------
 */
typedef enum ScPbTok
{
	SC_PB_T_EOF,
	SC_PB_T_IDENT,
	SC_PB_T_NUMBER,
	SC_PB_T_STRING,
	SC_PB_T_SYMBOL
} ScPbTok;

typedef struct ScPbLex
{
	ScPbParse  *ps;
	ScPbFile   *file;
	const char *where;			/* the file, for errors */
	const char *p;
	int			line;

	/* the current token */
	ScPbTok		kind;
	char	   *text;			/* ident, number: the text; string: the
								 * bytes, unescaped */
	int			len;
	char		sym;
	int			tline;
} ScPbLex;

static bool sc_pb_lex_fail(ScPbLex *lx, const char *fmt,...) pg_attribute_printf(2, 3);

static bool
sc_pb_lex_fail(ScPbLex *lx, const char *fmt,...)
{
	StringInfoData buf;

	if (lx->ps->error != NULL)
		return false;
	initStringInfo(&buf);
	appendStringInfo(&buf, "%s, line %d: ", lx->where, lx->tline);
	for (;;)
	{
		va_list		args;
		int			needed;

		va_start(args, fmt);
		needed = appendStringInfoVA(&buf, fmt, args);
		va_end(args);
		if (needed == 0)
			break;
		enlargeStringInfo(&buf, needed);
	}
	lx->ps->error = buf.data;
	return false;
}

/* The current token, for "found ..." in errors. */
static const char *
sc_pb_tok_text(ScPbLex *lx)
{
	switch (lx->kind)
	{
		case SC_PB_T_EOF:
			return "the end of the file";
		case SC_PB_T_STRING:
			return "a string";
		case SC_PB_T_SYMBOL:
			return psprintf("\"%c\"", lx->sym);
		default:
			return psprintf("\"%s\"", lx->text);
	}
}

static bool
sc_pb_next(ScPbLex *lx)
{
	const char *p = lx->p;

	/* white space and comments */
	for (;;)
	{
		if (*p == '\n')
		{
			lx->line++;
			p++;
		}
		else if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\f' || *p == '\v')
			p++;
		else if (p[0] == '/' && p[1] == '/')
		{
			while (*p != '\0' && *p != '\n')
				p++;
		}
		else if (p[0] == '/' && p[1] == '*')
		{
			lx->tline = lx->line;
			p += 2;
			while (*p != '\0' && !(p[0] == '*' && p[1] == '/'))
			{
				if (*p == '\n')
					lx->line++;
				p++;
			}
			if (*p == '\0')
				return sc_pb_lex_fail(lx, "a comment that does not end");
			p += 2;
		}
		else
			break;
	}
	lx->tline = lx->line;
	lx->text = NULL;
	lx->len = 0;
	if (*p == '\0')
	{
		lx->kind = SC_PB_T_EOF;
		lx->p = p;
		return true;
	}
	if (isalpha((unsigned char) *p) || *p == '_')
	{
		const char *s = p;

		while (isalnum((unsigned char) *p) || *p == '_')
			p++;
		lx->kind = SC_PB_T_IDENT;
		lx->text = pnstrdup(s, p - s);
		lx->len = p - s;
	}
	else if (isdigit((unsigned char) *p) || (*p == '.' && isdigit((unsigned char) p[1])))
	{
		const char *s = p;
		bool		hex = (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'));

		while (isalnum((unsigned char) *p) || *p == '_' || *p == '.' ||
			   (!hex && (*p == '+' || *p == '-') && (p[-1] == 'e' || p[-1] == 'E')))
			p++;
		lx->kind = SC_PB_T_NUMBER;
		lx->text = pnstrdup(s, p - s);
		lx->len = p - s;
	}
	else if (*p == '"' || *p == '\'')
	{
		char		q = *p++;
		const char *s = p;

		while (*p != q)
		{
			if (*p == '\0' || *p == '\n')
				return sc_pb_lex_fail(lx, "a string that does not end on its line");
			if (*p == '\\' && p[1] != '\0' && p[1] != '\n')
				p++;
			p++;
		}
		lx->kind = SC_PB_T_STRING;
		lx->text = sc_pb_unescape(s, p - s, &lx->len);
		if (lx->text == NULL)
			return sc_pb_lex_fail(lx, "a bad escape in a string");
		p++;
	}
	else if (strchr("{}[]()<>;,=.-+:/", *p) != NULL)
	{
		lx->kind = SC_PB_T_SYMBOL;
		lx->sym = *p++;
	}
	else
		return sc_pb_lex_fail(lx, "unexpected character \"%c\"", *p);
	lx->p = p;
	return true;
}

static inline bool
sc_pb_is_sym(ScPbLex *lx, char c)
{
	return lx->kind == SC_PB_T_SYMBOL && lx->sym == c;
}

static inline bool
sc_pb_is_word(ScPbLex *lx, const char *word)
{
	return lx->kind == SC_PB_T_IDENT && strcmp(lx->text, word) == 0;
}

static bool
sc_pb_expect_sym(ScPbLex *lx, char c)
{
	if (!sc_pb_is_sym(lx, c))
		return sc_pb_lex_fail(lx, "expected \"%c\", found %s", c, sc_pb_tok_text(lx));
	return sc_pb_next(lx);
}

static bool
sc_pb_expect_ident(ScPbLex *lx, const char *what, char **out)
{
	if (lx->kind != SC_PB_T_IDENT)
		return sc_pb_lex_fail(lx, "expected %s, found %s", what, sc_pb_tok_text(lx));
	*out = lx->text;
	return sc_pb_next(lx);
}

/* ident ("." ident)*, with a leading "." when dot_ok. */
static bool
sc_pb_full_ident(ScPbLex *lx, const char *what, bool dot_ok, char **out)
{
	StringInfoData buf;
	char	   *part = NULL;

	initStringInfo(&buf);
	if (dot_ok && sc_pb_is_sym(lx, '.'))
	{
		appendStringInfoChar(&buf, '.');
		if (!sc_pb_next(lx))
			return false;
	}
	for (;;)
	{
		if (!sc_pb_expect_ident(lx, what, &part))
			return false;
		appendStringInfoString(&buf, part);
		if (!sc_pb_is_sym(lx, '.'))
			break;
		appendStringInfoChar(&buf, '.');
		if (!sc_pb_next(lx))
			return false;
	}
	*out = buf.data;
	return true;
}

/* An integer token (decimal, 0x hex or 0 octal), with an optional sign. */
static bool
sc_pb_integer(ScPbLex *lx, const char *what, int64 min, int64 max, int64 *out)
{
	bool		neg = false;
	char	   *end;
	uint64		u;

	if (sc_pb_is_sym(lx, '-'))
	{
		neg = true;
		if (!sc_pb_next(lx))
			return false;
	}
	if (lx->kind != SC_PB_T_NUMBER)
		return sc_pb_lex_fail(lx, "expected %s, found %s", what, sc_pb_tok_text(lx));
	errno = 0;
	u = strtoull(lx->text, &end, 0);
	if (errno != 0 || *end != '\0' || lx->text[0] == '-' ||
		u > (uint64) PG_INT64_MAX + (neg ? 1 : 0))
		return sc_pb_lex_fail(lx, "%s \"%s%s\" is not an integer of its range", what,
							  neg ? "-" : "", lx->text);
	*out = neg ? (int64) (0 - u) : (int64) u;
	if (*out < min || *out > max)
		return sc_pb_lex_fail(lx, "%s " INT64_FORMAT " is out of range", what, *out);
	return sc_pb_next(lx);
}

/* { ... } or [ ... ] with what is inside, balanced. */
static bool
sc_pb_skip_balanced(ScPbLex *lx)
{
	int			depth = 0;

	do
	{
		if (lx->kind == SC_PB_T_EOF)
			return sc_pb_lex_fail(lx, "a block that does not end");
		if (sc_pb_is_sym(lx, '{') || sc_pb_is_sym(lx, '[') || sc_pb_is_sym(lx, '<'))
			depth++;
		else if (sc_pb_is_sym(lx, '}') || sc_pb_is_sym(lx, ']') || sc_pb_is_sym(lx, '>'))
			depth--;
		if (!sc_pb_next(lx))
			return false;
	} while (depth > 0);
	return true;
}

/*
 * A constant: an identifier (true, an enum value, inf, nan), a number with
 * a sign, strings (adjacent ones joined), or an aggregate { ... } (skipped).
 * *text and *len say what it was, *is_string whether it is a string.
 */
static bool
sc_pb_constant(ScPbLex *lx, char **text, int *len, bool *is_string)
{
	*is_string = false;
	if (sc_pb_is_sym(lx, '{'))
	{
		*text = NULL;
		*len = 0;
		return sc_pb_skip_balanced(lx);
	}
	if (lx->kind == SC_PB_T_STRING)
	{
		StringInfoData buf;

		initStringInfo(&buf);
		while (lx->kind == SC_PB_T_STRING)
		{
			appendBinaryStringInfo(&buf, lx->text, lx->len);
			if (!sc_pb_next(lx))
				return false;
		}
		*text = buf.data;
		*len = buf.len;
		*is_string = true;
		return true;
	}
	if (sc_pb_is_sym(lx, '-') || sc_pb_is_sym(lx, '+'))
	{
		char		sign = lx->sym;

		if (!sc_pb_next(lx))
			return false;
		if (lx->kind != SC_PB_T_NUMBER && lx->kind != SC_PB_T_IDENT)
			return sc_pb_lex_fail(lx, "expected a number, found %s", sc_pb_tok_text(lx));
		*text = sign == '-' ? psprintf("-%s", lx->text) : lx->text;
		*len = strlen(*text);
		return sc_pb_next(lx);
	}
	if (lx->kind == SC_PB_T_NUMBER)
	{
		*text = lx->text;
		*len = lx->len;
		return sc_pb_next(lx);
	}
	if (lx->kind == SC_PB_T_IDENT)
	{
		if (!sc_pb_full_ident(lx, "a constant", false, text))
			return false;
		*len = strlen(*text);
		return true;
	}
	return sc_pb_lex_fail(lx, "expected a constant, found %s", sc_pb_tok_text(lx));
}

/* An option's name: (ident | "(" full ident ")") ("." (ident | "(" ... ")"))*. */
static bool
sc_pb_option_name(ScPbLex *lx, char **name)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (;;)
	{
		char	   *part = NULL;

		if (sc_pb_is_sym(lx, '('))
		{
			if (!sc_pb_next(lx) || !sc_pb_full_ident(lx, "an option name", true, &part))
				return false;
			appendStringInfo(&buf, "(%s)", part);
			if (!sc_pb_expect_sym(lx, ')'))
				return false;
		}
		else
		{
			if (!sc_pb_expect_ident(lx, "an option name", &part))
				return false;
			appendStringInfoString(&buf, part);
		}
		if (!sc_pb_is_sym(lx, '.'))
			break;
		appendStringInfoChar(&buf, '.');
		if (!sc_pb_next(lx))
			return false;
	}
	*name = buf.data;
	return true;
}

/* "option" name "=" constant ";", the word "option" current. */
static bool
sc_pb_option_statement(ScPbLex *lx)
{
	char	   *name = NULL;
	char	   *text;
	int			len;
	bool		is_string;

	return sc_pb_next(lx) && sc_pb_option_name(lx, &name) &&
		sc_pb_expect_sym(lx, '=') && sc_pb_constant(lx, &text, &len, &is_string) &&
		sc_pb_expect_sym(lx, ';');
}

/* Up to and past the next ";" (reserved, extensions). */
static bool
sc_pb_skip_statement(ScPbLex *lx)
{
	while (!sc_pb_is_sym(lx, ';'))
	{
		if (lx->kind == SC_PB_T_EOF || sc_pb_is_sym(lx, '}'))
			return sc_pb_lex_fail(lx, "expected \";\", found %s", sc_pb_tok_text(lx));
		if (!sc_pb_next(lx))
			return false;
	}
	return sc_pb_next(lx);
}

/* extend Name { ... } and service Name { ... }: skipped. */
static bool
sc_pb_skip_block_statement(ScPbLex *lx)
{
	char	   *name = NULL;

	if (!sc_pb_next(lx) || !sc_pb_full_ident(lx, "a name", true, &name))
		return false;
	if (!sc_pb_is_sym(lx, '{'))
		return sc_pb_lex_fail(lx, "expected \"{\", found %s", sc_pb_tok_text(lx));
	return sc_pb_skip_balanced(lx);
}

/* "[" name "=" constant ("," ...)* "]" after a field: the default is kept. */
static bool
sc_pb_field_options(ScPbLex *lx, ScPbField *f)
{
	if (!sc_pb_is_sym(lx, '['))
		return true;
	do
	{
		char	   *name = NULL;
		char	   *text;
		int			len;
		bool		is_string;
		int			line;

		if (!sc_pb_next(lx) || !sc_pb_option_name(lx, &name) || !sc_pb_expect_sym(lx, '='))
			return false;
		line = lx->tline;
		if (!sc_pb_constant(lx, &text, &len, &is_string))
			return false;
		if (strcmp(name, "default") == 0)
		{
			if (text == NULL)
			{
				lx->tline = line;
				return sc_pb_lex_fail(lx, "field \"%s\": a default must be a single value", f->name);
			}
			if (lx->file->syntax == 3)
			{
				lx->tline = line;
				return sc_pb_lex_fail(lx, "field \"%s\": explicit defaults are not allowed in proto3",
									  f->name);
			}
			f->defval = text;
			f->deflen = len;
			f->def_string = is_string;
		}
	} while (sc_pb_is_sym(lx, ','));
	return sc_pb_expect_sym(lx, ']');
}

static bool sc_pb_text_message(ScPbLex *lx, ScPbMessage *parent, int depth);
static bool sc_pb_text_enum(ScPbLex *lx, ScPbMessage *parent);
static bool sc_pb_message_body(ScPbLex *lx, ScPbMessage *m, int depth);

static bool
sc_pb_field_number(ScPbLex *lx, ScPbField *f)
{
	int64		n;

	if (!sc_pb_expect_sym(lx, '=') ||
		!sc_pb_integer(lx, "a field number", 1, SC_PB_MAX_FIELD_NUMBER, &n))
		return false;
	f->number = (int32) n;
	return true;
}

/*
 * A field: [label] type name "=" number [options] ";", or a group
 * (label "group" Name "=" number [options] { body }), or a map
 * (map<K, V> name "=" number [options] ";").  label is 0 when none was
 * given (proto3, a oneof).
 */
static bool
sc_pb_text_field(ScPbLex *lx, ScPbMessage *m, int label, int oneof, int depth)
{
	ScPbField  *f = palloc0(sizeof(ScPbField));
	char	   *type;
	bool		proto3 = (lx->file->syntax == 3);

	f->line = lx->tline;
	f->oneof = oneof;
	f->label = label == 0 ? SC_PB_LABEL_OPTIONAL : label;
	if (label == SC_PB_LABEL_REQUIRED && proto3)
		return sc_pb_lex_fail(lx, "required fields are not allowed in proto3");
	if (label == SC_PB_LABEL_OPTIONAL && proto3 && oneof < 0)
		f->proto3_optional = true;

	if (sc_pb_is_word(lx, "group"))
	{
		ScPbMessage *g;
		char	   *name = NULL;

		if (proto3)
			return sc_pb_lex_fail(lx, "groups are not allowed in proto3");
		if (!sc_pb_next(lx) || !sc_pb_expect_ident(lx, "a group name", &name))
			return false;
		if (!isupper((unsigned char) name[0]))
			return sc_pb_lex_fail(lx, "a group's name must start with a capital letter");
		if (depth > SC_PB_MAX_SCHEMA_DEPTH)
			return sc_pb_lex_fail(lx, "messages nested deeper than %d levels", SC_PB_MAX_SCHEMA_DEPTH);
		g = sc_pb_new_message(lx->ps, lx->file, m, name, f->line);
		f->name = pstrdup(name);
		for (char *c = (char *) f->name; *c; c++)
			*c = pg_ascii_tolower((unsigned char) *c);
		f->type = SC_PB_GROUP;
		f->message = g;
		if (!sc_pb_field_number(lx, f) || !sc_pb_field_options(lx, f) ||
			!sc_pb_expect_sym(lx, '{') || !sc_pb_message_body(lx, g, depth + 1))
			return false;
		m->lfields = lappend(m->lfields, f);
		return true;
	}

	if (!sc_pb_full_ident(lx, "a type", true, &type))
		return false;
	if (strcmp(type, "map") == 0 && sc_pb_is_sym(lx, '<'))
	{
		ScPbMessage *entry;
		ScPbField  *key = palloc0(sizeof(ScPbField));
		ScPbField  *value = palloc0(sizeof(ScPbField));
		char	   *ktype;
		char	   *vtype;
		StringInfoData ename;
		bool		upper = true;

		if (label != 0 || oneof >= 0)
			return sc_pb_lex_fail(lx, "a map field can have no label and cannot be in a oneof");
		if (!sc_pb_next(lx) || !sc_pb_full_ident(lx, "a key type", false, &ktype) ||
			!sc_pb_expect_sym(lx, ',') || !sc_pb_full_ident(lx, "a value type", true, &vtype) ||
			!sc_pb_expect_sym(lx, '>') || !sc_pb_expect_ident(lx, "a field name", (char **) &f->name))
			return false;
		key->type = sc_pb_scalar_type(ktype);
		if (key->type == SC_PB_UNRESOLVED || key->type == SC_PB_FLOAT ||
			key->type == SC_PB_DOUBLE || key->type == SC_PB_BYTES)
			return sc_pb_lex_fail(lx, "map field \"%s\": a key of type \"%s\"", f->name, ktype);

		/* the entry type protoc makes: "foo_bar" -> FooBarEntry, nested here */
		initStringInfo(&ename);
		for (const char *c = f->name; *c; c++)
		{
			if (*c == '_')
				upper = true;
			else
			{
				appendStringInfoChar(&ename, upper ? pg_ascii_toupper((unsigned char) *c) : *c);
				upper = false;
			}
		}
		appendStringInfoString(&ename, "Entry");
		entry = sc_pb_new_message(lx->ps, lx->file, m, ename.data, f->line);
		entry->map_entry = true;
		key->name = "key";
		key->number = 1;
		key->label = SC_PB_LABEL_OPTIONAL;
		key->oneof = -1;
		key->line = f->line;
		value->name = "value";
		value->number = 2;
		value->label = SC_PB_LABEL_OPTIONAL;
		value->oneof = -1;
		value->line = f->line;
		value->type = sc_pb_scalar_type(vtype);
		if (value->type == SC_PB_UNRESOLVED)
			value->type_name = vtype;
		entry->lfields = list_make2(key, value);
		f->label = SC_PB_LABEL_REPEATED;
		f->type = SC_PB_MESSAGE;
		f->message = entry;
	}
	else
	{
		f->type = sc_pb_scalar_type(type);
		if (f->type == SC_PB_UNRESOLVED)
			f->type_name = type;
		if (!sc_pb_expect_ident(lx, "a field name", (char **) &f->name))
			return false;
	}
	if (label == 0 && !proto3 && oneof < 0 && !f->message)
		return sc_pb_lex_fail(lx, "field \"%s\": expected \"required\", \"optional\" or \"repeated\" (proto2)",
							  f->name);
	if (!sc_pb_field_number(lx, f) || !sc_pb_field_options(lx, f) || !sc_pb_expect_sym(lx, ';'))
		return false;
	if (f->defval != NULL && f->label == SC_PB_LABEL_REPEATED)
		return sc_pb_lex_fail(lx, "field \"%s\": a repeated field can have no default", f->name);
	m->lfields = lappend(m->lfields, f);
	return true;
}

static bool
sc_pb_text_oneof(ScPbLex *lx, ScPbMessage *m, int depth)
{
	char	   *name = NULL;
	int			oneof = m->noneofs++;

	if (!sc_pb_next(lx) || !sc_pb_expect_ident(lx, "a oneof name", &name) ||
		!sc_pb_expect_sym(lx, '{'))
		return false;
	while (!sc_pb_is_sym(lx, '}'))
	{
		if (lx->kind == SC_PB_T_EOF)
			return sc_pb_lex_fail(lx, "expected \"}\", found %s", sc_pb_tok_text(lx));
		if (sc_pb_is_sym(lx, ';'))
		{
			if (!sc_pb_next(lx))
				return false;
		}
		else if (sc_pb_is_word(lx, "option"))
		{
			if (!sc_pb_option_statement(lx))
				return false;
		}
		else if (sc_pb_is_word(lx, "optional") || sc_pb_is_word(lx, "required") ||
				 sc_pb_is_word(lx, "repeated"))
			return sc_pb_lex_fail(lx, "fields in oneofs must not have labels");
		else if (!sc_pb_text_field(lx, m, 0, oneof, depth))
			return false;
	}
	return sc_pb_next(lx);
}

/* The statements of a message up to and past its "}". */
static bool
sc_pb_message_body(ScPbLex *lx, ScPbMessage *m, int depth)
{
	for (;;)
	{
		if (lx->kind == SC_PB_T_EOF)
			return sc_pb_lex_fail(lx, "expected \"}\" to end message \"%s\", found the end of the file",
								  m->name);
		if (sc_pb_is_sym(lx, '}'))
			return sc_pb_next(lx);
		if (sc_pb_is_sym(lx, ';'))
		{
			if (!sc_pb_next(lx))
				return false;
			continue;
		}
		if (lx->kind != SC_PB_T_IDENT && !sc_pb_is_sym(lx, '.'))
			return sc_pb_lex_fail(lx, "expected a field or a definition, found %s", sc_pb_tok_text(lx));
		if (sc_pb_is_word(lx, "message"))
		{
			if (!sc_pb_text_message(lx, m, depth + 1))
				return false;
		}
		else if (sc_pb_is_word(lx, "enum"))
		{
			if (!sc_pb_text_enum(lx, m))
				return false;
		}
		else if (sc_pb_is_word(lx, "oneof"))
		{
			if (!sc_pb_text_oneof(lx, m, depth))
				return false;
		}
		else if (sc_pb_is_word(lx, "option"))
		{
			if (!sc_pb_option_statement(lx))
				return false;
		}
		else if (sc_pb_is_word(lx, "reserved") || sc_pb_is_word(lx, "extensions"))
		{
			if (!sc_pb_skip_statement(lx))
				return false;
		}
		else if (sc_pb_is_word(lx, "extend"))
		{
			if (!sc_pb_skip_block_statement(lx))
				return false;
		}
		else
		{
			int			label = 0;

			if (sc_pb_is_word(lx, "optional"))
				label = SC_PB_LABEL_OPTIONAL;
			else if (sc_pb_is_word(lx, "required"))
				label = SC_PB_LABEL_REQUIRED;
			else if (sc_pb_is_word(lx, "repeated"))
				label = SC_PB_LABEL_REPEATED;
			if (label != 0 && !sc_pb_next(lx))
				return false;
			if (!sc_pb_text_field(lx, m, label, -1, depth))
				return false;
		}
	}
}

static bool
sc_pb_text_message(ScPbLex *lx, ScPbMessage *parent, int depth)
{
	char	   *name = NULL;
	int			line = lx->tline;

	if (depth > SC_PB_MAX_SCHEMA_DEPTH)
		return sc_pb_lex_fail(lx, "messages nested deeper than %d levels", SC_PB_MAX_SCHEMA_DEPTH);
	if (!sc_pb_next(lx) || !sc_pb_expect_ident(lx, "a message name", &name) ||
		!sc_pb_expect_sym(lx, '{'))
		return false;
	return sc_pb_message_body(lx, sc_pb_new_message(lx->ps, lx->file, parent, name, line), depth);
}

static bool
sc_pb_text_enum(ScPbLex *lx, ScPbMessage *parent)
{
	char	   *name = NULL;
	ScPbEnum   *e;
	int			line = lx->tline;

	if (!sc_pb_next(lx) || !sc_pb_expect_ident(lx, "an enum name", &name) ||
		!sc_pb_expect_sym(lx, '{'))
		return false;
	e = sc_pb_new_enum(lx->ps, lx->file, parent, name, line);
	while (!sc_pb_is_sym(lx, '}'))
	{
		char	   *vname = NULL;
		int64		number;
		ScPbField	dummy = {0};

		if (lx->kind == SC_PB_T_EOF)
			return sc_pb_lex_fail(lx, "expected \"}\" to end enum \"%s\", found the end of the file",
								  name);
		if (sc_pb_is_sym(lx, ';'))
		{
			if (!sc_pb_next(lx))
				return false;
			continue;
		}
		if (sc_pb_is_word(lx, "option"))
		{
			if (!sc_pb_option_statement(lx))
				return false;
			continue;
		}
		if (sc_pb_is_word(lx, "reserved"))
		{
			if (!sc_pb_skip_statement(lx))
				return false;
			continue;
		}
		if (!sc_pb_expect_ident(lx, "an enum value", &vname) || !sc_pb_expect_sym(lx, '=') ||
			!sc_pb_integer(lx, "an enum value's number", PG_INT32_MIN, PG_INT32_MAX, &number))
			return false;
		dummy.name = vname;
		if (!sc_pb_field_options(lx, &dummy) || !sc_pb_expect_sym(lx, ';'))
			return false;
		e->lnames = lappend(e->lnames, vname);
		e->lnumbers = lappend_int(e->lnumbers, (int) number);
	}
	return sc_pb_next(lx);
}

static bool
sc_pb_text_file(ScPbParse *ps, ScPbFile *file, const char *text, const char *where)
{
	ScPbLex		lx = {0};
	bool		had_package = false;

	lx.ps = ps;
	lx.file = file;
	lx.where = where;
	lx.p = text;
	lx.line = 1;
	if (!sc_pb_next(&lx))
		return false;
	while (lx.kind != SC_PB_T_EOF)
	{
		if (sc_pb_is_sym(&lx, ';'))
		{
			if (!sc_pb_next(&lx))
				return false;
		}
		else if (sc_pb_is_word(&lx, "syntax"))
		{
			if (!sc_pb_next(&lx) || !sc_pb_expect_sym(&lx, '='))
				return false;
			if (lx.kind != SC_PB_T_STRING)
				return sc_pb_lex_fail(&lx, "expected a string, found %s", sc_pb_tok_text(&lx));
			if (strcmp(lx.text, "proto3") == 0)
				file->syntax = 3;
			else if (strcmp(lx.text, "proto2") == 0)
				file->syntax = 2;
			else
				return sc_pb_lex_fail(&lx, "syntax \"%s\" is not supported (proto2 and proto3 are)",
									  lx.text);
			if (!sc_pb_next(&lx) || !sc_pb_expect_sym(&lx, ';'))
				return false;
		}
		else if (sc_pb_is_word(&lx, "edition"))
			return sc_pb_lex_fail(&lx, "editions are not supported (proto2 and proto3 are)");
		else if (sc_pb_is_word(&lx, "package"))
		{
			char	   *name = NULL;

			if (had_package)
				return sc_pb_lex_fail(&lx, "a second package statement");
			if (file->messages != NIL || file->enums != NIL)
				return sc_pb_lex_fail(&lx, "the package statement must come before the definitions");
			if (!sc_pb_next(&lx) || !sc_pb_full_ident(&lx, "a package name", false, &name) ||
				!sc_pb_expect_sym(&lx, ';'))
				return false;
			file->package = name;
			had_package = true;
		}
		else if (sc_pb_is_word(&lx, "import"))
		{
			if (!sc_pb_next(&lx))
				return false;
			if ((sc_pb_is_word(&lx, "public") || sc_pb_is_word(&lx, "weak")) && !sc_pb_next(&lx))
				return false;
			if (lx.kind != SC_PB_T_STRING)
				return sc_pb_lex_fail(&lx, "expected the imported file's name, found %s",
									  sc_pb_tok_text(&lx));
			file->imports = lappend(file->imports, lx.text);
			if (!sc_pb_next(&lx) || !sc_pb_expect_sym(&lx, ';'))
				return false;
		}
		else if (sc_pb_is_word(&lx, "option"))
		{
			if (!sc_pb_option_statement(&lx))
				return false;
		}
		else if (sc_pb_is_word(&lx, "message"))
		{
			if (!sc_pb_text_message(&lx, NULL, 1))
				return false;
		}
		else if (sc_pb_is_word(&lx, "enum"))
		{
			if (!sc_pb_text_enum(&lx, NULL))
				return false;
		}
		else if (sc_pb_is_word(&lx, "service") || sc_pb_is_word(&lx, "extend"))
		{
			if (!sc_pb_skip_block_statement(&lx))
				return false;
		}
		else
			return sc_pb_lex_fail(&lx, "expected a definition, found %s", sc_pb_tok_text(&lx));
	}
	return true;
}

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

static const char *
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
						bad = f->type == SC_PB_INT64 ? "int64" : sc_pb_type_names[f->type];
				}
				sc_pb_int64(&text, x);
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
				sc_pb_uint64(&text, x);
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
				sc_text_float(&text, x, f->type == SC_PB_FLOAT, false);
				sc_text_float(&json, x, f->type == SC_PB_FLOAT, true);
				break;
			}
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

/* ----------------------------------------------------------------
 * Planning
 * ----------------------------------------------------------------
 */

/* The message type at indexes: into the file's messages, then nested ones. */
static const ScPbMessage *
sc_pb_indexed(const ScProtoSchema *schema, const int *indexes, int nindexes)
{
	List	   *list = schema->main->messages;
	const ScPbMessage *m = NULL;

	if (nindexes < 1)
		return NULL;
	for (int i = 0; i < nindexes; i++)
	{
		if (indexes[i] < 0 || indexes[i] >= list_length(list))
			return NULL;
		m = list_nth(list, indexes[i]);
		list = m->nested;
	}
	return m;
}

static int
sc_pb_field_named(const ScPbMessage *m, const char *name)
{
	for (int i = 0; i < m->nfields; i++)
		if (strcmp(m->fields[i].name, name) == 0)
			return i;
	return -1;
}

/* The classes of text (SC_VALUE_*) a field writes; its type's name into name. */
static int
sc_pb_field_classes(const ScPbField *f, StringInfo name)
{
	if (f->label == SC_PB_LABEL_REPEATED)
	{
		appendStringInfo(name, "repeated %s", f->message && f->message->map_entry ? "map" : sc_pb_type_names[f->type]);
		return SC_VALUE_JSON;
	}
	if (f->message != NULL)
	{
		appendStringInfoString(name, f->message->fullname);
		switch (f->message->wkt)
		{
			case SC_PB_WKT_TIMESTAMP:
				return SC_VALUE_TIME;
			case SC_PB_WKT_DURATION:
				return SC_VALUE_STRING;
			case SC_PB_WKT_WRAPPER:
				resetStringInfo(name);
				return f->message->nfields > 0
					? sc_pb_field_classes(&f->message->fields[0], name) : SC_VALUE_JSON;
			default:
				return SC_VALUE_JSON;
		}
	}
	appendStringInfoString(name, sc_pb_type_names[f->type]);
	switch (f->type)
	{
		case SC_PB_BOOL:
			return SC_VALUE_BOOL;
		case SC_PB_STRING:
		case SC_PB_ENUM:
			return SC_VALUE_STRING;
		case SC_PB_BYTES:
			return SC_VALUE_BYTES;
		default:
			return SC_VALUE_NUMBER;
	}
}

/* A field a path may go on into: a singular message (or group). */
static inline bool
sc_pb_path_message(const ScPbField *f)
{
	return f->message != NULL && f->label != SC_PB_LABEL_REPEATED;
}

bool
sc_proto_has_path(const ScProtoSchema *schema, const int *indexes, int nindexes,
				  char **path, int pathlen)
{
	const ScPbMessage *m = sc_pb_indexed(schema, indexes, nindexes);

	for (int l = 0; l < pathlen; l++)
	{
		int			i;

		if (m == NULL || (i = sc_pb_field_named(m, path[l])) < 0)
			return false;
		m = sc_pb_path_message(&m->fields[i]) ? m->fields[i].message : NULL;
	}
	return m != NULL || pathlen > 0;
}

/*
 * The classes of text (SC_VALUE_*) the field at path of the message type at
 * indexes writes, and its type's name into *type_name; -1 when there is
 * no such field.  pathlen 0: the whole message (JSON).
 */
int
sc_proto_path_classes(const ScProtoSchema *schema, const int *indexes, int nindexes,
					  char **path, int pathlen, char **type_name)
{
	const ScPbMessage *m = sc_pb_indexed(schema, indexes, nindexes);
	const ScPbField *f = NULL;
	StringInfoData name;

	if (m == NULL)
		return -1;
	for (int l = 0; l < pathlen; l++)
	{
		int			i;

		if (m == NULL || (i = sc_pb_field_named(m, path[l])) < 0)
			return -1;
		f = &m->fields[i];
		m = sc_pb_path_message(f) ? f->message : NULL;
	}
	initStringInfo(&name);
	*type_name = name.data;
	if (f == NULL)
	{
		appendStringInfoString(&name, "message");
		*type_name = name.data;
		return SC_VALUE_JSON;
	}
	{
		int			classes = sc_pb_field_classes(f, &name);

		*type_name = name.data;
		return classes;
	}
}

static ScPbPlanMsg *
sc_pb_plan_msg_new(const ScPbMessage *m)
{
	ScPbPlanMsg *pm = palloc0(sizeof(ScPbPlanMsg));

	pm->message = m;
	pm->fields = palloc0(sizeof(ScPbPlanField) * (m->nfields + 1));
	pm->note = palloc0(sizeof(bool) * (m->nfields + 1));
	pm->wanted = palloc0(sizeof(int) * (m->nfields + 1));
	return pm;
}

/* The fields wanted, and those to note: the wanted and their oneofs' members. */
static void
sc_pb_plan_finish(ScPbPlanMsg *pm)
{
	const ScPbMessage *m = pm->message;

	for (int i = 0; i < m->nfields; i++)
	{
		if (pm->fields[i].ncols == 0 && pm->fields[i].sub == NULL)
			continue;
		pm->wanted[pm->nwanted++] = i;
		pm->note[i] = true;
		if (m->fields[i].oneof >= 0)
			for (int k = 0; k < m->nfields; k++)
				if (m->fields[k].oneof == m->fields[i].oneof)
					pm->note[k] = true;
		if (pm->fields[i].sub != NULL)
			sc_pb_plan_finish(pm->fields[i].sub);
	}
}

static const char *
sc_pb_path_text(char **const path, int len)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < len; i++)
		appendStringInfo(&buf, "%s%s", i > 0 ? "." : "", path[i]);
	return buf.data;
}

ScProtoPlan *
sc_proto_plan(const ScProtoSchema *schema, const int *indexes, int nindexes,
			  int ncolumns, char **const *paths, const int *pathlens, char **error)
{
	ScProtoPlan *plan = palloc0(sizeof(ScProtoPlan));
	const ScPbMessage *top = sc_pb_indexed(schema, indexes, nindexes);

	if (top == NULL)
	{
		StringInfoData buf;

		initStringInfo(&buf);
		for (int i = 0; i < nindexes; i++)
			appendStringInfo(&buf, "%s%d", i > 0 ? ", " : "", indexes[i]);
		*error = psprintf("message indexes [%s] name no message type of the schema", buf.data);
		return NULL;
	}
	plan->schema = schema;
	plan->message = top;
	plan->ncolumns = ncolumns;
	plan->top = sc_pb_plan_msg_new(top);
	plan->whole = palloc0(sizeof(int) * (ncolumns + 1));

	for (int c = 0; c < ncolumns; c++)
	{
		ScPbPlanMsg *pm = plan->top;

		if (pathlens[c] == 0)
		{
			plan->whole[plan->nwhole++] = c;
			continue;
		}
		for (int level = 0; level < pathlens[c]; level++)
		{
			const ScPbMessage *m = pm->message;
			int			i = sc_pb_field_named(m, paths[c][level]);
			ScPbPlanField *pf;
			const ScPbField *f;

			if (i < 0)
				break;			/* not in this type: NULL */
			pf = &pm->fields[i];
			f = &m->fields[i];
			if (level == pathlens[c] - 1)
			{
				pf->cols = pf->cols ? repalloc(pf->cols, sizeof(int) * (pf->ncols + 1)) :
					palloc(sizeof(int));
				pf->cols[pf->ncols++] = c;
				break;
			}
			if (!sc_pb_path_message(f))
			{
				*error = psprintf("field \"%s\" is %s%s, not a message: there is no field \"%s\" in it",
								  sc_pb_path_text(paths[c], level + 1),
								  f->label == SC_PB_LABEL_REPEATED ? "repeated " : "of type ",
								  f->message && f->message->map_entry ? "map" :
								  f->message ? f->message->fullname :
								  f->enumtype ? f->enumtype->fullname : sc_pb_type_names[f->type],
								  paths[c][level + 1]);
				return NULL;
			}
			if (pf->sub == NULL)
				pf->sub = sc_pb_plan_msg_new(f->message);
			pm = pf->sub;
		}
	}
	sc_pb_plan_finish(plan->top);
	return plan;
}

/* ----------------------------------------------------------------
 * Decoding
 * ----------------------------------------------------------------
 */
typedef struct ScPbDecoder
{
	const uint8 *start;			/* the message, for byte positions */
	int			depth;			/* messages open */
	StringInfo *values;
	bool	   *isnull;
	int64	   *times;			/* see sc_proto_decode; NULL when not wanted */
	int64		time;			/* the instant of the last Timestamp written as
								 * a column's text */
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

static pg_noinline bool sc_pb_fail(ScPbDecoder *d, const uint8 *at, const char *fmt,...) pg_attribute_printf(3, 4);

static pg_noinline bool
sc_pb_fail(ScPbDecoder *d, const uint8 *at, const char *fmt,...)
{
	va_list		args;

	va_start(args, fmt);
	sc_decode_failv(&d->fail, at - d->start, fmt, args);
	va_end(args);
	return false;
}

static pg_noinline bool
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

static inline bool
sc_pb_need(ScPbDecoder *d, const uint8 *p, const uint8 *end, size_t n)
{
	if (likely((size_t) (end - p) >= n))
		return true;
	return sc_pb_fail(d, p, "truncated: %zu bytes needed, %zu left", n, (size_t) (end - p));
}

/*
 * A group's contents after its start tag (field num): *pp moves past its
 * end tag, *content_end to where that tag begins.  Groups inside it are
 * matched by a stack, not by recursion.
 */
static bool
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

static inline bool
sc_pb_enter(ScPbDecoder *d, const uint8 *at)
{
	CHECK_FOR_INTERRUPTS();		/* a load and a branch: every message */
	if (likely(++d->depth <= SC_PB_MAX_DEPTH && !stack_is_too_deep()))
		return true;
	return sc_pb_fail(d, at, "messages nested deeper than %d levels", SC_PB_MAX_DEPTH);
}

/*
 * Is [s, s + len) UTF-8 as Protobuf means it: valid, NUL allowed (text
 * refuses a NUL, but that is the column's limit, not the message's).
 */
static pg_noinline bool
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
static inline bool
sc_pb_check_value(ScPbDecoder *d, const ScPbField *f, const uint8 *v, const uint8 *vend)
{
	if (f->utf8)
	{
		if (likely(pg_verify_mbstr(PG_UTF8, (const char *) v, vend - v, true)))
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
static bool
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
 * Is field i there?  A member of a oneof is there only when set last:
 * sc_pb_collect cleared the others.
 */
static inline bool
sc_pb_present(const ScPbMessage *m, const ScPbSlot *slots, int i)
{
	return slots[i].count > 0;
}

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

/*
 * The next occurrence's wire type and value (of a wire type of the field's:
 * others are unknown fields, which sc_pb_collect did not count); false at
 * the end or on a failure (d->fail.what).
 */
static bool
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

/* ----------------------------------------------------------------
 * The text of values
 * ----------------------------------------------------------------
 */

/*
 * One value of a scalar type (not a message) from *pp: a number moves *pp
 * past it; a string or bytes is all of [*pp, end).  Text for a column, or
 * JSON.
 */
static bool
sc_pb_scalar(ScPbDecoder *d, const ScPbField *f, const uint8 **pp,
			 const uint8 *end, StringInfo out, bool json)
{
	const uint8 *p = *pp;
	int			type = f->type;
	uint64		u = 0;

	switch (sc_pb_type_wt[type])
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
	switch (type)
	{
		case SC_PB_INT32:
		case SC_PB_SFIXED32:
			enlargeStringInfo(out, 12);
			out->len += pg_ltoa((int32) (uint32) u, out->data + out->len);
			return true;
		case SC_PB_SINT32:
			{
				uint32		z = (uint32) u;

				enlargeStringInfo(out, 12);
				out->len += pg_ltoa((int32) (z >> 1) ^ -(int32) (z & 1), out->data + out->len);
				return true;
			}
		case SC_PB_INT64:
		case SC_PB_SFIXED64:
			sc_pb_int64(out, (int64) u);
			return true;
		case SC_PB_SINT64:
			sc_pb_int64(out, (int64) (u >> 1) ^ -(int64) (u & 1));
			return true;
		case SC_PB_UINT32:
		case SC_PB_FIXED32:
			sc_pb_uint64(out, (uint32) u);
			return true;
		case SC_PB_UINT64:
		case SC_PB_FIXED64:
			sc_pb_uint64(out, u);
			return true;
		case SC_PB_BOOL:
			if (u != 0)
				appendBinaryStringInfo(out, "true", 4);
			else
				appendBinaryStringInfo(out, "false", 5);
			return true;
		case SC_PB_FLOAT:
			{
				uint32		b = (uint32) u;
				float		x;

				memcpy(&x, &b, 4);
				sc_text_float(out, x, true, json);
				return true;
			}
		case SC_PB_DOUBLE:
			{
				double		x;

				memcpy(&x, &u, 8);
				sc_text_float(out, x, false, json);
				return true;
			}
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
		if (s->last_wt == SC_PB_WT_LEN)
			return sc_pb_value(d, SC_PB_WT_LEN, f->number, &p, r[s->last_r].end,
							   &mg->r[0].p, &mg->r[0].end);
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
		uint64		u;

		if ((tag != (1 << 3 | SC_PB_WT_VARINT) && tag != (2 << 3 | SC_PB_WT_VARINT)) ||
			sc_pb_get_varint(&p, end, &u) != SC_PB_OK)
			return false;
		if (tag >> 3 == 1)
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
		d->time = seconds * USECS_PER_SEC + nanos / 1000;	/* as its text says */
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

			if (!sc_pb_present(m, slots, i))
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

		if (!sc_pb_present(m, slots, i))
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

		if (!sc_pb_present(m, slots, i))
		{
			const char *def;
			int			deflen;

			/* a message absent: the columns inside it stay NULL */
			if (f->label == SC_PB_LABEL_REPEATED)
			{
				def = f->message && f->message->map_entry ? "{}" : "[]";
				deflen = 2;
			}
			else if ((def = f->def_text) == NULL)
				continue;
			else
				deflen = f->def_text_len;
			for (int c = 0; c < pf->ncols; c++)
			{
				appendBinaryStringInfo(d->values[pf->cols[c]], def, deflen);
				d->isnull[pf->cols[c]] = false;
			}
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
		if (!sc_pb_field_value(d, f, r, nr, &slots[i], out, false))
		{
			ok = sc_decode_fail_in(&d->fail, f->name);
			goto done;
		}
		d->isnull[pf->cols[0]] = false;
		d->text += (int64) (out->len - outlen) * pf->ncols;
		for (int c = 1; c < pf->ncols; c++)
		{
			d->isnull[pf->cols[c]] = false;
			appendBinaryStringInfo(d->values[pf->cols[c]], out->data + outlen, out->len - outlen);
		}
		if (d->times != NULL && f->label != SC_PB_LABEL_REPEATED && f->message != NULL &&
			f->message->wkt == SC_PB_WKT_TIMESTAMP)
			for (int c = 0; c < pf->ncols; c++)
				d->times[pf->cols[c]] = d->time;
	}
done:
	if (slots != local)
		pfree(slots);
	if (ok)
		d->depth--;
	return ok;
}

bool
sc_proto_read_indexes(const char *buf, size_t len, int *indexes, int maxindexes,
					  int *nindexes, size_t *consumed)
{
	const uint8 *p = (const uint8 *) buf;
	const uint8 *end = p + len;
	uint64		u;
	int64		count;

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
				StringInfo *values, bool *isnull, int64 *times, char **error)
{
	ScPbDecoder d;
	ScPbRange	r;

	d.start = (const uint8 *) buf;
	d.depth = 0;
	d.values = values;
	d.isnull = isnull;
	d.times = times;
	d.time = 0;
	d.text = 0;
	d.dropped = false;
	d.nul = false;
	d.fail.what = NULL;
	d.fail.where = NIL;
	r.p = d.start;
	r.end = d.start + len;
	for (int c = 0; c < plan->ncolumns; c++)
		isnull[c] = true;
	if (times != NULL)
		for (int c = 0; c < plan->ncolumns; c++)
			times[c] = SC_PROTO_NO_TIME;

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
	if (!sc_pb_plan_decode(&d, plan->top, &r, 1))
		goto fail;

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
		for (int k = 0; k < plan->nwhole; k++)
		{
			isnull[plan->whole[k]] = false;
			if (k > 0)
				appendBinaryStringInfo(values[plan->whole[k]], out->data + outlen,
									   out->len - outlen);
		}
	}
	return true;

fail:
	*error = sc_decode_error(&d.fail);
	return false;
}
