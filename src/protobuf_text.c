/*-------------------------------------------------------------------------
 *
 * protobuf_text.c
 *		A Protobuf schema file from .proto text (proto2 or proto3).
 *
 * A lexer (sc_pb_next) and a recursive descent over the grammar of the
 * language specifications, keeping what decoding needs: the syntax, the
 * package, the imports, messages with their fields, oneofs, maps and
 * groups, enums, and the fields' [default = ...].  Options, reserved
 * ranges, extensions and services are read and skipped; editions are
 * refused.  An error names the file and the line.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "protobuf_internal.h"

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
	va_list		args;

	if (lx->ps->error != NULL)
		return false;
	va_start(args, fmt);
	sc_pb_parse_failv(lx->ps, psprintf("%s, line %d: ", lx->where, lx->tline), fmt, args);
	va_end(args);
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

/* The .proto text into file; where names it in errors. */
bool
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
