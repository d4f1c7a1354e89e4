/*-------------------------------------------------------------------------
 *
 * format.h
 *		Message formats: how one Kafka message becomes the values of a row.
 *
 * A format reads a message and writes one line: the row's values, one field
 * per column in the order of ScLayout's line fields, followed by the
 * message's partition and offset.  The line is in the encoding the format
 * declares, COPY's text format or COPY's CSV format, so that both writers
 * take it as it is: the COPY fallback hands it to COPY FROM, the direct
 * path asks the format to split it into fields again and runs each column's
 * input function (or the format's faster datum builder) on them.  A format
 * that says where a line's fields end may also give the direct path a
 * column's value as a Datum, with no text at all (sc_line_field_datum: the
 * numbers, bools and timestamps of Avro and Protobuf); the text is written
 * only if the line goes to COPY after all.
 *
 * A format is one file that fills an ScFormatRoutine (format_json.c for
 * json and jsonb, format_csv.c, format_registry.c for avro and protobuf,
 * which decode through avro.c and protobuf.c) and one entry in
 * sc_format_routine() (format.c).  format_line.c writes values into a line
 * with the escaping of its encoding, for every format, and splits a line
 * into fields again.  The values that come from the message's metadata
 * rather than its payload (key, timestamp, headers, the whole value) are
 * written by format_meta.c for every format, through sc_meta_append().
 * Nothing in the batch orchestration (ingest.c) knows one format from
 * another.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_FORMAT_H
#define SC_FORMAT_H

#include "cube.h"
#include "kafka.h"
#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/*
 * How the cube's columns map to the fields of a line (ingest.c, built once
 * per cube): a JSON line holds every column in table order, metadata
 * columns in their place; a CSV line is the record, which fills the payload
 * columns, followed by the metadata columns.  Every line then ends with
 * _partition and _offset.
 */
typedef struct ScLayout
{
	List	   *attnames;		/* String nodes: columns + _partition, _offset */
	AttrNumber *attnums;		/* of the cube's table, same order */
	int			nattrs;
	List	   *line_attnames;	/* the same in the order of a line's fields */
	int		   *line_pos;		/* per column: its field in a line */
	int		   *line_col;		/* per field of a line: its column */
	int			npayload;		/* columns the payload fills (not metadata) */
	Oid		   *meta_base;		/* per metadata column: its base type */
	bool	   *json_column;	/* per column: type json or jsonb */
	int			doc_index;		/* the jsonb column of the whole document; -1 */
	bool	   *format_datum;	/* per column: the format's datum() makes its value;
								 * NULL when it makes none */
	uint16	   *takes;			/* per column: the ScScalar kinds it takes as a
								 * datum (sc_scalar_takes); 0: text only */
} ScLayout;

/*
 * Where the fields of the batch's lines end, for formats that say so
 * (sc_line_field_ends()): a column's worth of offsets per such line.  The
 * batch (ingest.c) owns it; a format only asks for room for its line.
 */
typedef struct ScFieldEnds
{
	int		   *ends;
	bool	   *given;			/* per entry: the field is empty, its value
								 * given as datums[entry] (sc_line_field_datum) */
	Datum	   *datums;
	int			nends;			/* entries taken by the lines kept */
	int			maxends;
	int			asked;			/* the current line's first entry; -1: none */
} ScFieldEnds;

typedef struct ScFormatRoutine ScFormatRoutine;

/*
 * What a format sees of the batch: the cube, how its columns map to a
 * line's fields, its own state, the buffers the line writers share, and
 * where the batch keeps field ends.  ScIngest holds it; nothing else of
 * the hot path (ingest_internal.h) reaches a format.
 */
typedef struct ScFormatContext
{
	ScCube	   *cube;
	ScLayout   *layout;
	const ScFormatRoutine *format;
	void	   *state;			/* the format's own, from its setup() */
	StringInfoData meta_buf;	/* format_meta.c: a metadata value being built */
	StringInfoData hex_buf;		/* format_line.c: a bytea value's hex form */
	StringInfoData render_buf;	/* format_line.c: a line with its datums as text */
	ScFieldEnds *ends;			/* the batch's */
	bool		datums;			/* the batch's rows are formed by the direct
								 * path, which takes datums (sc_line_field_datum) */
	Datum	   *topic_datums;	/* format_meta.c: each topic's name as text,
								 * by topic number (sc_meta_topic_datum) */
	int			ntopic_datums;
} ScFormatContext;

/* How a line is written, and so read by COPY and split by the direct path. */
typedef enum ScLineEncoding
{
	SC_LINE_TEXT,				/* COPY text: tabs, \N, backslash escapes */
	SC_LINE_CSV					/* COPY csv, with the cube's delimiter, quote and null */
} ScLineEncoding;

struct ScFormatRoutine
{
	const char *name;
	ScLineEncoding encoding;

	/*
	 * Build what the format keeps for the cube of fc (fc->layout is
	 * built), in the current memory context, which lives as long as the
	 * cube's set-up.  Returns it; the format finds it in fc->state.
	 */
	void	   *(*setup) (ScFormatContext *fc);

	/*
	 * Optional: before a batch is built, make ready what its messages need
	 * from outside (format avro: their writer schemas, from the registry).
	 * False, with *why, when that cannot be had now and the batch must
	 * wait: not the messages' fault.  Runs in a transaction of its own,
	 * connected to SPI.
	 */
	bool		(*prepare) (ScFormatContext *fc, const ScKafkaMessage *messages, int n, char **why);

	/*
	 * With prepare: has everything the messages need been made ready
	 * already?  Runs on every batch, outside any transaction: memory only.
	 */
	bool		(*ready) (ScFormatContext *fc, const ScKafkaMessage *messages, int n);

	/*
	 * Append message m to out as one line, ending with "\n".  *ts receives
	 * its time value.  False, with *error, when the message cannot be a
	 * row; out may then hold part of a line, which the caller drops.  May
	 * raise errors about the data (the caller makes the message bad then).
	 */
	bool		(*line) (ScFormatContext *fc, const ScKafkaMessage *m, StringInfo out,
						 int64 *ts, char **error);

	/*
	 * Split a line written by line(), len bytes and a NUL, into its fields,
	 * in place, as COPY reads it: NULL for a null field.  Returns the number
	 * of fields found (fields beyond maxfields are counted, not stored).
	 */
	int			(*split) (ScFormatContext *fc, char *line, int len, char **fields, int maxfields);

	/*
	 * Optional: column c's datum made from its field faster than its input
	 * function would, with the same result; false to use the input
	 * function.
	 */
	bool		(*datum) (ScFormatContext *fc, int c, const char *field, Datum *value);
};

extern const ScFormatRoutine sc_format_json;
extern const ScFormatRoutine sc_format_jsonb;
extern const ScFormatRoutine sc_format_csv;
extern const ScFormatRoutine sc_format_avro;
extern const ScFormatRoutine sc_format_protobuf;

struct ScAvroSchema;
struct ScProtoSchema;
extern char *sc_schema_misfit(const ScCube *cube, const struct ScAvroSchema *avro,
							  const struct ScProtoSchema *proto, const int *indexes, int nindexes);

extern const ScFormatRoutine *sc_format_routine(ScFormat format);

/* Writing values into a line (format.c), in the routine's encoding. */
extern bool sc_line_text_bytes(StringInfo out, const char *value, size_t len);
extern bool sc_line_value_bytes(ScFormatContext *fc, StringInfo out, const char *p, size_t len,
								bool bytea, char **error);
extern void sc_line_null(ScFormatContext *fc, StringInfo out);
extern void sc_line_short(ScFormatContext *fc, StringInfo out, const char *value);
extern int	sc_line_split_text(ScFormatContext *fc, char *line, int len, char **fields, int maxfields);

/*
 * Append "<sep>partition<sep>offset\n", the two columns every line ends
 * with (the Kafka partition, not the source partition).  Inline: once per
 * message on the hot path.
 */
static inline void
sc_line_position(StringInfo out, char sep, const ScKafkaMessage *m)
{
	char		buf[48];
	int			len = 0;

	buf[len++] = sep;
	len += pg_ltoa(sc_source_kafka_partition(m->partition), buf + len);
	buf[len++] = sep;
	len += pg_lltoa(m->offset, buf + len);
	buf[len++] = '\n';
	appendBinaryStringInfo(out, buf, len);
}

/*
 * A format whose line() writes every field of a line as it is (no escape,
 * no quote, no metadata value: the values and the separators only) may
 * say where the fields end, so that the direct path cuts the line there
 * instead of splitting it again.  Returns room for one offset per column,
 * in the order of the line's fields: the offset in out of the separator
 * after the field (for the last, of the separator before _partition), or
 * its bitwise complement for a NULL field.  Once called, line() must fill
 * every entry before it returns true (format_line.c), or take the offer
 * back with sc_line_field_ends_cancel() when a field turned out to need an
 * escape after all.
 */
extern int *sc_line_field_ends(ScFormatContext *fc);
extern void sc_line_field_ends_cancel(ScFormatContext *fc, StringInfo out, int start);

/*
 * Values that need no text (format_line.c).  A format of the text
 * encoding that has a column's value as a number, a bool or an instant
 * (an ScScalar), when the batch's rows are formed by the direct path
 * (fc->datums) and it said where the line's fields end, may give the
 * value as a Datum instead of its text: the field is left empty, and the
 * direct path takes the datum.  The COPY fallback, and a line whose ends
 * are taken back, get the datum's text written in its place
 * (sc_line_render), which its type's input function reads as the same
 * value.
 *
 * sc_scalar_takes: the kinds of scalar a column of the type (with the
 * typmod) takes as a datum: the built-in integer, float, bool, numeric,
 * text and timestamp types themselves, without a typmod (not domains,
 * which check more).  sc_scalar_datum: the datum, as the scalar's text would read;
 * false when out of the type's range (the text then says why: an integer
 * too large for the column; sc_scalar_text writes it).
 */
extern uint16 sc_scalar_takes(Oid type, int32 typmod);
extern bool sc_scalar_numeric(const ScScalar *s, Datum *value);
extern bool sc_scalar_text(const ScScalar *s, StringInfo out);
extern bool sc_text_datum(const char *data, int len, Datum *value);

/*
 * Inline: a call per value of a row, where the type is mostly known at
 * the call (a time column's) or one of a few; a called function's entry
 * and exit cost as much as the conversion.
 */
static inline bool
sc_scalar_datum(Oid type, const ScScalar *s, Datum *value)
{
	switch (type)
	{
		case INT2OID:
			if (s->kind == SC_SCALAR_UINT || s->i < PG_INT16_MIN || s->i > PG_INT16_MAX)
				return false;
			*value = Int16GetDatum((int16) s->i);
			return true;
		case INT4OID:
			if (s->kind == SC_SCALAR_UINT || s->i < PG_INT32_MIN || s->i > PG_INT32_MAX)
				return false;
			*value = Int32GetDatum((int32) s->i);
			return true;
		case INT8OID:
			if (s->kind == SC_SCALAR_UINT)
				return false;
			*value = Int64GetDatum(s->i);
			return true;
		case BOOLOID:
			*value = BoolGetDatum(s->i != 0);
			return true;
		case TEXTOID:
			return s->kind == SC_SCALAR_TEXT && sc_text_datum(s->s, (int) s->i, value);
		case FLOAT4OID:
			*value = Float4GetDatum((float4) s->f);
			return true;
		case FLOAT8OID:
			*value = Float8GetDatum(s->f);
			return true;
		case NUMERICOID:
			return sc_scalar_numeric(s, value);
		case TIMESTAMPTZOID:
		case TIMESTAMPOID:
			{
				/* microseconds since 1970 to since 2000 */
				const int64 shift = (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
				Timestamp	ts;

				if (s->i < PG_INT64_MIN + shift)
					return false;
				ts = s->i - shift;
				if (!IS_VALID_TIMESTAMP(ts))
					return false;
				*value = TimestampGetDatum(ts);
				return true;
			}
		default:
			return false;
	}
}
extern void sc_line_render(ScFormatContext *fc, const char *base, int start, int end,
						   int entry, StringInfo dst);

/*
 * With field ends asked (sc_line_field_ends, whose entries are ends): the
 * field f of the line is value, and nothing is written for it.
 */
static inline void
sc_line_field_datum(ScFormatContext *fc, StringInfo out, int *ends, int f, Datum value)
{
	ScFieldEnds *fe = fc->ends;

	fe->given[fe->asked + f] = true;
	fe->datums[fe->asked + f] = value;
	ends[f] = out->len;
}

/* Values from the message's metadata (format_meta.c). */
extern bool sc_meta_append(ScFormatContext *fc, StringInfo out, int c, const ScKafkaMessage *m,
						   char **error);
extern bool sc_meta_time(ScFormatContext *fc, const ScKafkaMessage *m, int64 *ts, char **error);
extern bool sc_meta_topic_datum_only(const ScCube *cube);
extern Datum sc_meta_topic_datum(ScFormatContext *fc, int32 source);

#endif							/* SC_FORMAT_H */
