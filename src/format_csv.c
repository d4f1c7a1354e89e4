/*-------------------------------------------------------------------------
 *
 * format_csv.c
 *		Format csv: each message is one CSV record of the declared width, with
 *		the cube's delimiter, quote and null string.  The record is checked
 *		here (one record, the right number of fields, a time value) and goes
 *		into the line as it is; COPY's CSV mode, or the split below, reads it.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "format.h"

typedef struct ScCsvFormat
{
	int			time_field;		/* the time column's field of a record; -1 */
	int			null_len;		/* strlen of the cube's null string */
	const char *time_value;		/* its value in the current message ... */
	size_t		time_len;		/* ... of so many bytes */
	StringInfoData time_text;	/* a quoted value, unquoted */
	StringInfoData time_copy;	/* a value sc_parse_time_bytes() copies */
	bool		topic_datum;	/* the one metadata column is the topic, in text
								 * (sc_meta_topic_datum_only), after the record */
} ScCsvFormat;


/* Can a Kafka topic name hold c? */
static bool
sc_topic_char(char c)
{
	return c != '\0' && strchr(SC_KAFKA_TOPIC_CHARS, c) != NULL;
}

/* The metadata columns of a CSV line, after the record (if any). */
static bool
sc_csv_meta(ScFormatContext *fc, StringInfo out, const ScKafkaMessage *m, bool first, char **error)
{
	ScCube	   *cube = fc->cube;

	for (int f = fc->layout->npayload; f < cube->ncolumns; f++)
	{
		if (!first || f > 0)
			appendStringInfoChar(out, cube->csv_delimiter);
		if (!sc_meta_append(fc, out, fc->layout->line_col[f], m, error))
			return false;
	}
	return true;
}

/*
 * A record without quotes: fields end at delimiters, which memchr() finds
 * many bytes at a time.  The time field's value is noted in cf;
 * returns the number of fields, or -1 for a line break inside the record.
 * With ends, the first maxends fields' ends go there too, as offsets from
 * p (complemented for the null string), for sc_line_field_ends().
 */
static inline int
sc_csv_scan_plain(ScFormatContext *fc, ScCsvFormat *cf, const char *p, size_t len, char delim,
				  int *ends, int maxends)
{
	const char *f = p;
	const char *end = p + len;
	int			field = 0;

	if (memchr(p, '\n', len) != NULL || memchr(p, '\r', len) != NULL)
		return -1;
	for (;;)
	{
		const char *d = memchr(f, delim, end - f);
		const char *fend = d ? d : end;

		if (field == cf->time_field)
		{
			cf->time_value = f;
			cf->time_len = fend - f;
		}
		if (ends != NULL && field < maxends)
			ends[field] = fend - f == cf->null_len &&
				memcmp(f, fc->cube->csv_null, cf->null_len) == 0
				? ~(int) (fend - p) : (int) (fend - p);
		if (d == NULL)
			return field + 1;
		field++;
		f = d + 1;
	}
}

/*
 * A record with quotes, byte by byte: quoted parts may hold delimiters,
 * line breaks and doubled quotes.  As sc_csv_scan_plain, and *quoted says
 * whether the time field was quoted (then it is never the null string);
 * -2 for a quote left open.
 */
static int
sc_csv_scan_quoted(ScCsvFormat *cf, const char *p, size_t len, char delim, char quote,
				   bool *quoted)
{
	StringInfo	time_value = &cf->time_text;
	int			field = 0;
	bool		in_quote = false;

	for (size_t i = 0; i < len; i++)
	{
		char		ch = p[i];

		if (in_quote)
		{
			if (ch == quote)
			{
				if (i + 1 < len && p[i + 1] == quote)
				{
					if (field == cf->time_field)
						appendStringInfoChar(time_value, quote);
					i++;
				}
				else
					in_quote = false;
			}
			else if (field == cf->time_field)
				appendStringInfoChar(time_value, ch);
			continue;
		}
		if (ch == delim)
			field++;
		else if (ch == quote)
		{
			in_quote = true;
			if (field == cf->time_field)
				*quoted = true;
		}
		else if (ch == '\n' || ch == '\r')
			return -1;
		else if (field == cf->time_field)
			appendStringInfoChar(time_value, ch);
	}
	return in_quote ? -2 : field + 1;
}

/* The record's time value (or the Kafka timestamp's), into *ts. */
static bool
sc_csv_time(ScFormatContext *fc, ScCsvFormat *cf, const ScKafkaMessage *m, bool quoted,
			int64 *ts, char **error)
{
	ScCube	   *cube = fc->cube;
	const char *nul;

	if (cf->time_field < 0)
		return sc_meta_time(fc, m, ts, error);
	/* The value is a C string: a NUL byte ends it, as it always did. */
	if ((nul = memchr(cf->time_value, '\0', cf->time_len)) != NULL)
		cf->time_len = nul - cf->time_value;
	if (!quoted && cf->time_len == cf->null_len &&
		memcmp(cf->time_value, cube->csv_null, cf->null_len) == 0)
	{
		*error = psprintf("time column \"%s\" is null", cube->columns[cube->time_index].name);
		return false;
	}
	if (!sc_parse_time_bytes(cube, cf->time_value, cf->time_len, &cf->time_copy, ts, error))
	{
		*error = psprintf("column \"%s\": %s", cube->columns[cube->time_index].name, *error);
		return false;
	}
	return true;
}

/*
 * Check that a message is exactly one CSV record of the declared width,
 * and pull out its time field.  COPY then parses the record for real; the
 * check guarantees that it sees one line per message.
 */
static bool
sc_csv_line(ScFormatContext *fc, const ScKafkaMessage *m, StringInfo out, int64 *ts, char **error)
{
	ScCube	   *cube = fc->cube;
	ScCsvFormat *cf = fc->state;
	const char *p = m->payload;
	size_t		len = m->len;
	char		delim = cube->csv_delimiter;
	int			nfields;
	bool		quoted = false;
	int		   *ends = NULL;

	if (fc->layout->npayload == 0 && p != NULL)
	{
		/* Every column takes metadata: the record is not read at all. */
		if (!sc_meta_time(fc, m, ts, error) ||
			!sc_csv_meta(fc, out, m, true, error))
			return false;
		sc_line_position(out, delim, m);
		return true;
	}
	if (p == NULL || len == 0)
	{
		*error = "message is empty";
		return false;
	}
	/* One trailing line end is part of a record, not of its last field. */
	if (len > 0 && p[len - 1] == '\n')
		len--;
	if (len > 0 && p[len - 1] == '\r')
		len--;

	/*
	 * A record without quotes of a cube without metadata columns is the
	 * whole line but its position: its fields' ends are noted as it is
	 * read, and the direct path cuts the line there.
	 */
	resetStringInfo(&cf->time_text);
	if (memchr(p, cube->csv_quote, len) != NULL)
	{
		nfields = sc_csv_scan_quoted(cf, p, len, delim, cube->csv_quote, &quoted);
		cf->time_value = cf->time_text.data;
		cf->time_len = cf->time_text.len;
	}
	else
	{
		/* the topic, for the direct path, is a datum made once per topic */
		if (fc->layout->npayload == cube->ncolumns || (cf->topic_datum && fc->datums))
			ends = sc_line_field_ends(fc);
		nfields = sc_csv_scan_plain(fc, cf, p, len, delim, ends, fc->layout->npayload);
	}
	if (nfields == -1)
	{
		*error = "message holds more than one CSV record (line break outside quotes)";
		return false;
	}
	if (nfields == -2)
	{
		*error = "unterminated quoted field in CSV message";
		return false;
	}
	if (nfields != fc->layout->npayload)
	{
		*error = psprintf("CSV message has %d fields, cube %s expects %d",
						  nfields, cube->qualified, fc->layout->npayload);
		return false;
	}
	if (!sc_csv_time(fc, cf, m, quoted, ts, error))
		return false;

	if (ends != NULL)
		for (int f = 0; f < fc->layout->npayload; f++)
			ends[f] += ends[f] >= 0 ? out->len : -out->len;	/* ~(x + len) = ~x - len */
	appendBinaryStringInfo(out, p, len);
	if (ends != NULL && fc->layout->npayload < cube->ncolumns)
	{
		/* the topic's field, empty: its value is a datum (sc_line_field_datum) */
		appendStringInfoChar(out, delim);
		sc_line_field_datum(fc, out, ends, fc->layout->npayload, sc_meta_topic_datum(fc, m->partition));
	}
	else if (!sc_csv_meta(fc, out, m, false, error))
		return false;
	sc_line_position(out, delim, m);
	return true;
}


/*
 * Split a CSV line (the message, then ",partition,offset") into fields, in
 * place, the way COPY's CSV mode does with the cube's delimiter, quote (the
 * escape too) and null string: a field equal to the null string and never
 * quoted is NULL; quoted parts may hold delimiters and doubled quotes.
 * sc_csv_line() checked the record already, so it is well formed.
 */
static int
sc_csv_split(ScFormatContext *fc, char *buf, int len, char **fields, int maxfields)
{
	ScCube	   *cube = fc->cube;
	ScCsvFormat *cf = fc->state;
	char		delim = cube->csv_delimiter;
	char		quote = cube->csv_quote;
	const char *null_print = cube->csv_null;
	int			null_len = cf->null_len;
	char	   *end = buf + len;
	char	   *in = buf;
	char	   *out = buf;
	int			n = 0;

	if (end > buf && end[-1] == '\n')
		end--;

	/* Nothing quoted: each field is the text between two delimiters. */
	if (memchr(buf, quote, end - buf) == NULL)
	{
		for (;;)
		{
			char	   *d = memchr(in, delim, end - in);
			char	   *fend = d ? d : end;

			if (n < maxfields)
				fields[n] = fend - in == null_len &&
					memcmp(in, null_print, null_len) == 0 ? NULL : in;
			*fend = '\0';
			n++;
			if (d == NULL)
				return n;
			in = d + 1;
		}
	}

	for (;;)
	{
		char	   *value = out;
		bool		found_delim = false;
		bool		saw_quote = false;

		for (;;)
		{
			/* an unquoted part */
			for (;;)
			{
				char		c;

				if (in >= end)
					goto endfield;
				c = *in++;
				if (c == delim)
				{
					found_delim = true;
					goto endfield;
				}
				if (c == quote)
				{
					saw_quote = true;
					break;
				}
				*out++ = c;
			}
			/* a quoted part: a doubled quote is one quote (escape = quote) */
			for (;;)
			{
				char		c;

				if (in >= end)
					goto endfield;	/* unterminated: checked before, cannot be */
				c = *in++;
				if (c == quote)
				{
					if (in < end && *in == quote)
					{
						*out++ = quote;
						in++;
						continue;
					}
					break;
				}
				*out++ = c;
			}
		}
endfield:
		/* unquoted, the output is the input: compare it with the null string */
		if (n < maxfields)
			fields[n] = !saw_quote && out - value == null_len &&
				memcmp(value, null_print, null_len) == 0 ? NULL : value;
		*out++ = '\0';
		n++;
		if (!found_delim)
			return n;
	}
}

static void *
sc_csv_setup(ScFormatContext *fc)
{
	ScCube	   *cube = fc->cube;
	ScCsvFormat *cf = palloc0(sizeof(ScCsvFormat));

	cf->time_field = cube->time_index >= 0 && cube->columns[cube->time_index].meta == SC_META_NONE
		? fc->layout->line_pos[cube->time_index] : -1;
	cf->null_len = strlen(cube->csv_null);
	/*
	 * A topic name (letters, digits, '.', '_', '-') is the same text in a
	 * COPY csv line (a late row's) unless the dialect uses one of its
	 * characters as delimiter or quote, or a null string made of them.
	 */
	cf->topic_datum = fc->layout->npayload == cube->ncolumns - 1 && sc_meta_topic_datum_only(cube) &&
		!sc_topic_char(cube->csv_delimiter) && !sc_topic_char(cube->csv_quote) &&
		(cf->null_len == 0 || strspn(cube->csv_null, SC_KAFKA_TOPIC_CHARS) < (size_t) cf->null_len);
	initStringInfo(&cf->time_text);
	initStringInfo(&cf->time_copy);
	return cf;
}

const ScFormatRoutine sc_format_csv = {
	.name = "csv",
	.encoding = SC_LINE_CSV,
	.setup = sc_csv_setup,
	.line = sc_csv_line,
	.split = sc_csv_split,
	.datum = NULL,
};
