/*-------------------------------------------------------------------------
 *
 * protobuf_build.c
 *		Building a Protobuf schema: what its two parsers share
 *		(protobuf_descriptor.c, protobuf_text.c).
 *
 * Both parsers make the same ScPbFile of messages and enums, each named in
 * the scope it is declared in, its field types still names: they are
 * looked up only once every file is read (protobuf_schema.c).  Both fail
 * the same way: the first error is kept in the ScPbParse, any later one
 * dropped, and false goes back up.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "mb/pg_wchar.h"
#include "protobuf_internal.h"

/*
 * The parse's first error: prefix (or nothing) and fmt's text; a later one
 * is dropped.  Returns false.  Both parsers' fail functions end here.
 */
bool
sc_pb_parse_failv(ScPbParse *ps, const char *prefix, const char *fmt, va_list args)
{
	StringInfoData buf;

	if (ps->error != NULL)
		return false;
	initStringInfo(&buf);
	if (prefix != NULL)
		appendStringInfoString(&buf, prefix);
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
	ps->error = buf.data;
	return false;
}

/* The parse's first error, from fmt (a later one is dropped); false. */
bool
sc_pb_parse_fail(ScPbParse *ps, const char *fmt,...)
{
	va_list		args;

	va_start(args, fmt);
	sc_pb_parse_failv(ps, NULL, fmt, args);
	va_end(args);
	return false;
}

static const char *
sc_pb_join(const char *scope, const char *name)
{
	if (scope == NULL || scope[0] == '\0')
		return pstrdup(name);
	return psprintf("%s.%s", scope, name);
}

/* A message declared in parent, or at the top of file when NULL. */
ScPbMessage *
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

/* An enum declared in parent, or at the top of file when NULL. */
ScPbEnum *
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

/* The scalar type of a name ("int32"), or SC_PB_UNRESOLVED. */
ScPbType
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
char *
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
