/*-------------------------------------------------------------------------
 *
 * format_meta.c
 *		Values a column takes from a message's metadata rather than its
 *		payload (option "fields": {"kafka": ...}): the key, the Kafka
 *		timestamp and its type, one header or all of them, the whole value.
 *		Every format writes them through sc_meta_append(), in its line's
 *		encoding.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "format.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* Bytes as a JSON string; a NUL becomes \u0000, which jsonb refuses. */
static void
sc_meta_json_string(StringInfo out, const char *p, size_t len)
{
	appendStringInfoChar(out, '"');
	for (size_t i = 0; i < len; i++)
	{
		unsigned char ch = (unsigned char) p[i];

		if (ch == '"' || ch == '\\')
		{
			appendStringInfoChar(out, '\\');
			appendStringInfoChar(out, ch);
		}
		else if (ch < 0x20)
			appendStringInfo(out, "\\u%04x", ch);
		else
			appendStringInfoChar(out, ch);
	}
	appendStringInfoChar(out, '"');
}

/*
 * Kafka timestamps PostgreSQL can hold as they are: from 1970 to the end of
 * year 9999, in milliseconds.  A producer may set any CreateTime; one
 * outside this range would overflow the conversion.
 */
#define SC_KAFKA_MS_MAX INT64CONST(253402300799999)

/* Microseconds since 2000 of a Kafka timestamp (milliseconds since 1970). */
static inline int64
sc_kafka_usecs(int64 ms)
{
	return ms * 1000 - (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
}

/* The time value of a message whose time column is its Kafka timestamp. */
bool
sc_meta_time(ScFormatContext *fc, const ScKafkaMessage *m, int64 *ts, char **error)
{
	if (m->timestamp < 0)
	{
		*error = psprintf("time column \"%s\" takes the Kafka timestamp, and the message has none",
						  fc->cube->columns[fc->cube->time_index].name);
		return false;
	}
	if (m->timestamp > SC_KAFKA_MS_MAX)
	{
		*error = psprintf("Kafka timestamp " INT64_FORMAT " of the message is after year 9999",
						  m->timestamp);
		return false;
	}
	*ts = sc_kafka_usecs(m->timestamp);
	return true;
}

/* The last value of one header name, as Kafka's lastHeader(); NULL if none. */
static bool
sc_meta_header(ScFormatContext *fc, StringInfo out, const ScKafkaMessage *m, const char *header,
			   bool bytea, char **error)
{
	const char *name;
	const char *value;
	const char *found = NULL;
	size_t		size;
	size_t		found_size = 0;
	int			got;

	for (int i = 0; (got = sc_kafka_message_header(m, i, &name, &value, &size)) > 0; i++)
		if (strcmp(name, header) == 0)
			found = value, found_size = size;
	if (got < 0)
	{
		*error = "the message's headers cannot be read (librdkafka could not parse them)";
		return false;
	}
	if (found == NULL)
	{
		sc_line_null(fc, out);
		return true;
	}
	return sc_line_value_bytes(fc, out, found, found_size, bytea, error);
}

/* Every header, as a JSON object of strings (a header without value: null). */
static bool
sc_meta_headers(ScFormatContext *fc, StringInfo out, const ScKafkaMessage *m, char **error)
{
	StringInfo	buf = &fc->meta_buf;
	const char *name;
	const char *value;
	size_t		size;
	int			i;
	int			got;

	resetStringInfo(buf);
	appendStringInfoChar(buf, '{');
	for (i = 0; (got = sc_kafka_message_header(m, i, &name, &value, &size)) > 0; i++)
	{
		if (i > 0)
			appendStringInfoString(buf, ", ");
		sc_meta_json_string(buf, name, strlen(name));
		appendStringInfoString(buf, ": ");
		if (value == NULL)
			appendStringInfoString(buf, "null");
		else
			sc_meta_json_string(buf, value, size);
	}
	if (got < 0)
	{
		*error = "the message's headers cannot be read (librdkafka could not parse them)";
		return false;
	}
	appendStringInfoChar(buf, '}');
	return sc_line_value_bytes(fc, out, buf->data, buf->len, false, error);
}

/*
 * Append the value column c takes from the message's metadata: what the
 * column's input function (COPY's, or the direct path's) then reads.
 * False, with *error, when the message cannot give it (headers librdkafka
 * cannot parse, a value too large).
 */
bool
sc_meta_append(ScFormatContext *fc, StringInfo out, int c, const ScKafkaMessage *m, char **error)
{
	ScColumn   *col = &fc->cube->columns[c];
	bool		bytea = fc->layout->meta_base[c] == BYTEAOID;

	switch (col->meta)
	{
		case SC_META_NONE:
			break;
		case SC_META_KEY:
			if (m->key == NULL)
				sc_line_null(fc, out);
			else
				return sc_line_value_bytes(fc, out, m->key, m->key_len, bytea, error);
			break;
		case SC_META_VALUE:
			return sc_line_value_bytes(fc, out, m->payload, m->len, bytea, error);
		case SC_META_TIMESTAMP:
			if (m->timestamp < 0 || m->timestamp > SC_KAFKA_MS_MAX)
				sc_line_null(fc, out);
			else if (fc->layout->meta_base[c] == INT8OID)
			{
				char		digits[MAXINT8LEN + 1];

				pg_lltoa(m->timestamp, digits);
				sc_line_short(fc, out, digits);
			}
			else
			{
				struct pg_tm tm;
				fsec_t		fsec;
				char		text[64];

				/* ISO 8601, read the same under every DateStyle; UTC */
				if (timestamp2tm(sc_kafka_usecs(m->timestamp), NULL, &tm, &fsec, NULL, NULL) != 0)
					sc_line_null(fc, out);
				else
				{
					snprintf(text, sizeof(text), "%04d-%02d-%02d %02d:%02d:%02d.%06d%s",
							 tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min,
							 tm.tm_sec, (int) fsec,
							 fc->layout->meta_base[c] == TIMESTAMPTZOID ? "+00" : "");
					sc_line_short(fc, out, text);
				}
			}
			break;
		case SC_META_TIMESTAMP_TYPE:
			if (m->timestamp_type == 'C')
				sc_line_short(fc, out, "CreateTime");
			else if (m->timestamp_type == 'L')
				sc_line_short(fc, out, "LogAppendTime");
			else
				sc_line_null(fc, out);
			break;
		case SC_META_HEADER:
			return sc_meta_header(fc, out, m, col->header, bytea, error);
		case SC_META_HEADERS:
			return sc_meta_headers(fc, out, m, error);
		case SC_META_TOPIC:
			/* topic names are ASCII letters, digits, '.', '_' and '-' */
			sc_line_short(fc, out, sc_kafka_source_topic(&fc->cube->topics, m->partition));
			break;
	}
	return true;
}

/*
 * Are the cube's metadata columns all the message's topic, in text
 * columns (a cube of several topics, its _topic)?  Then a format that says
 * where its fields end can give that value as a datum
 * (sc_meta_topic_datum) instead of writing it into the line.
 */
bool
sc_meta_topic_datum_only(const ScCube *cube)
{
	for (int c = 0; c < cube->ncolumns; c++)
		if (cube->columns[c].meta != SC_META_NONE &&
			(cube->columns[c].meta != SC_META_TOPIC || cube->columns[c].type != TEXTOID))
			return false;
	return true;
}

/*
 * The topic of a source partition as a text datum, made once per topic
 * for the receiver's life (a topic number names one topic for the cube's
 * life, and a receiver ingests one cube).
 */
Datum
sc_meta_topic_datum(ScFormatContext *fc, int32 source)
{
	int			t = sc_source_topic_no(source);

	if (t >= fc->ntopic_datums)
	{
		int			n = Max(t + 1, fc->cube->topics.n);

		fc->topic_datums = fc->topic_datums == NULL
			? MemoryContextAllocZero(TopMemoryContext, sizeof(Datum) * n)
			: repalloc(fc->topic_datums, sizeof(Datum) * n);
		for (int i = fc->ntopic_datums; i < n; i++)
			fc->topic_datums[i] = (Datum) 0;
		fc->ntopic_datums = n;
	}
	if (fc->topic_datums[t] == (Datum) 0)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		fc->topic_datums[t] = CStringGetTextDatum(sc_kafka_source_topic(&fc->cube->topics, source));
		MemoryContextSwitchTo(old);
	}
	return fc->topic_datums[t];
}
