/*-------------------------------------------------------------------------
 *
 * avro.h
 *		Avro binary decoding (Avro 1.11): a writer schema, a plan of which of
 *		its values feed which columns, and one datum decoded into their text.
 *
 * Each message is decoded with its own writer schema, so there is no
 * schema resolution: a reader names the values it wants by field paths,
 * and a path the writer's schema lacks gives NULL.  The text of a value is
 * what PostgreSQL's input functions take (avro.c says which text for which
 * type); arrays, maps and records taken whole are JSON.
 *
 * The schema and the plan are built once per writer schema (avro_schema.c),
 * in CurrentMemoryContext; the plan points into the schema, which must live
 * as long as it.  Decoding (avro.c) allocates nothing but the growth of the
 * caller's StringInfos (and the error, on failure), raises no error for
 * bad data, and keeps no state between calls.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_AVRO_H
#define SC_AVRO_H

#include "lib/stringinfo.h"

typedef struct ScAvroSchema ScAvroSchema;	/* a parsed writer schema */
typedef struct ScAvroPlan ScAvroPlan;	/* how one writer schema feeds the
										 * columns */

/*
 * Parse a schema (JSON text, as a registry returns it or a user gives it).
 * NULL and *error (palloc'd, says what is wrong and where) when it is not a
 * valid Avro schema.  The top level must be a record.
 */
extern ScAvroSchema *sc_avro_parse(const char *json, char **error);

/*
 * The plan for ncolumns columns: column c reads the value at
 * paths[c][0..pathlens[c]) (field names into nested records; a union of
 * null and a record is followed through), or with pathlens[c] == 0 the
 * whole top-level record as JSON text.  A path the schema does not have
 * gives NULL for every message.  NULL and *error when a path runs into
 * something that is not a record.
 */
extern ScAvroPlan *sc_avro_plan(const ScAvroSchema *schema, int ncolumns,
								char **const *paths, const int *pathlens,
								char **error);

/* The classes of text a value may be written as: SC_VALUE_* (streamcube.h). */
extern int	sc_avro_path_classes(const ScAvroSchema *schema, char **path, int pathlen,
								 char **type_name);

/* Does the schema have a field at path (names into nested records)? */
extern bool sc_avro_has_path(const ScAvroSchema *schema, char **path, int pathlen);

/*
 * Decode one datum (the bytes after the Confluent header): the text of
 * column c is appended to values[c] (which the caller reset), or isnull[c]
 * is set.  With scalars, scalars[c] says what the value was read as when
 * it is a number, a boolean or a timestamp (timestamp-millis and -micros
 * as SC_SCALAR_INSTANT, their local forms as SC_SCALAR_LOCAL_TS, in
 * microseconds since 1970-01-01 00:00: what the text says), else
 * SC_SCALAR_NONE; and with takes, no text is written for a value whose
 * kind is among takes[c] (SC_SCALAR_BIT): the caller makes its datum from
 * the scalar.  False and *error (palloc'd: the field, what was wrong and
 * the byte) when the bytes are not one valid datum of the schema, more
 * than 64 MB, read as more values than the message's budget or making
 * more than 32 MB of text (SC_AVRO_BUDGET_* in avro_internal.h,
 * SC_AVRO_MAX_TEXT in avro.c); values may then hold part of a message.
 * Interrupts are served while it reads.
 */
extern bool sc_avro_decode(const ScAvroPlan *plan, const char *buf, size_t len,
						   StringInfo *values, bool *isnull, ScScalar *scalars,
						   const uint16 *takes, char **error);

#endif							/* SC_AVRO_H */
