/*-------------------------------------------------------------------------
 *
 * avro_internal.h
 *		The schema nodes and the plan shared by the two files of Avro.
 *
 * Avro is split where its work is done at different times:
 *
 *	avro_schema.c	once per writer schema: the schema's JSON parsed into
 *					ScAvroNodes, and the plan of which of its values feed
 *					which columns
 *	avro.c			once per message: the datum decoded by the plan
 *
 * The decoder only reads what avro_schema.c built (and the names of the
 * kinds, sc_avro_kind_names); avro_schema.c calls nothing in the decoder.
 * Only these two files include this header.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_AVRO_INTERNAL_H
#define SC_AVRO_INTERNAL_H

#include "avro.h"

/*
 * The values one message may be read as: SC_AVRO_BUDGET_BASE, plus
 * SC_AVRO_BUDGET_PER_BYTE per byte of the message.  Every value counts:
 * each scalar, record, union, array and map, and each null.  Real data
 * spends a few values per byte (a value of a union or an array takes at
 * least a byte; a record adds one value per record, and nulls of a union
 * take the byte of their branch): 32 per byte leaves records nested 30
 * deep around one-byte fields, and the base a record of 65536 plain nulls
 * in a message of any size.  At a few nanoseconds a value, a message
 * spends at most about a millisecond plus a fraction of a microsecond a
 * byte before it is refused: the 40-byte message of a record of 20 records
 * of ... of nulls, 8 levels (20^8 values), is a dead letter in well under
 * a millisecond.  avro_schema.c refuses a schema no message could be read
 * with (sc_avro_minsize); avro.c charges each message (sc_avro_spend).
 */
#define SC_AVRO_BUDGET_BASE 65536
#define SC_AVRO_BUDGET_PER_BYTE 32

typedef enum ScAvroKind
{
	SC_AVRO_NULL,
	SC_AVRO_BOOLEAN,
	SC_AVRO_INT,
	SC_AVRO_LONG,
	SC_AVRO_FLOAT,
	SC_AVRO_DOUBLE,
	SC_AVRO_BYTES,
	SC_AVRO_STRING,
	SC_AVRO_RECORD,
	SC_AVRO_ENUM,
	SC_AVRO_ARRAY,
	SC_AVRO_MAP,
	SC_AVRO_UNION,
	SC_AVRO_FIXED
} ScAvroKind;

/* The kinds' names, as a schema writes them (avro_schema.c). */
extern const char *const sc_avro_kind_names[];

/*
 * The logical types we write text of our own for.  uuid is a string's own
 * text; an unknown or invalid logical type is dropped when the schema is
 * parsed, as the specification says, and its type reads as the plain one.
 */
typedef enum ScAvroLogical
{
	SC_AVRO_PLAIN,
	SC_AVRO_DATE,				/* int: days since 1970-01-01 */
	SC_AVRO_TIME_MILLIS,		/* int: ms after midnight */
	SC_AVRO_TIME_MICROS,		/* long: us after midnight */
	SC_AVRO_TS_MILLIS,			/* long: ms since the epoch, UTC */
	SC_AVRO_TS_MICROS,
	SC_AVRO_LOCAL_TS_MILLIS,	/* long: the same, a local time */
	SC_AVRO_LOCAL_TS_MICROS,
	SC_AVRO_DECIMAL				/* bytes or fixed: unscaled two's complement */
} ScAvroLogical;

typedef struct ScAvroNode ScAvroNode;

/* One type of a schema; named types are one node, however often named. */
struct ScAvroNode
{
	ScAvroKind	kind;
	ScAvroLogical logical;
	int			scale;			/* decimal */
	int			minsize;		/* fewest bytes a value takes (a lower bound) */
	int			minstate;		/* 0 not known, 1 being computed, 2 known */
	int64		zerovalues;		/* minsize 0: the values a value of 0 bytes
								 * is read as (the most, for a record) */
	const char *fullname;		/* record, enum, fixed */
	int			n;				/* fields, symbols, branches; fixed: size */
	const char **names;			/* record: field names; enum: symbols */
	const char **json_keys;		/* record: "\"name\":", JSON-escaped */
	ScAvroNode **types;			/* record: field types; union: branches */
	ScAvroNode *items;			/* array: items; map: values */
};

struct ScAvroSchema
{
	ScAvroNode *top;			/* a record */
};

typedef struct ScAvroPlanRecord ScAvroPlanRecord;

/* What to do with one field of a record on a column's path. */
typedef struct ScAvroPlanField
{
	const ScAvroNode *type;
	int			ncols;			/* columns taking the field's value */
	int		   *cols;
	ScAvroPlanRecord *sub;		/* paths going on into it: the record's plan
								 * (type is that record, or a union of null
								 * and it) */
} ScAvroPlanField;

struct ScAvroPlanRecord
{
	const ScAvroNode *record;
	ScAvroPlanField *fields;	/* one per field of the record */
};

struct ScAvroPlan
{
	const ScAvroSchema *schema;
	int			ncolumns;
	ScAvroPlanRecord *top;
	int			nwhole;			/* columns taking the whole record */
	int		   *whole;
};

#endif							/* SC_AVRO_INTERNAL_H */
