/*-------------------------------------------------------------------------
 *
 * protobuf.h
 *		Protobuf decoding (proto2 and proto3): a schema file with what it
 *		imports, a plan of which values of one message type feed which
 *		columns, and one message decoded into their text.
 *
 * Each message is decoded with its own writer schema, so there is no
 * schema resolution: a reader names the values it wants by field paths,
 * and a path the writer's type lacks gives NULL.  The text of a value is
 * what PostgreSQL's input functions take (protobuf.c says which text for
 * which type); repeated fields, maps and messages taken whole are JSON,
 * with the proto3 JSON mapping's texts inside.
 *
 * The schema and the plan are built once per writer schema, in
 * CurrentMemoryContext; the plan points into the schema, which must live
 * as long as it.  Decoding allocates nothing but the growth of the
 * caller's StringInfos (and, for messages of more than 32 fields or
 * fields met more than 8 times, a little scratch it frees again; the
 * error, on failure), raises no error for bad data, and keeps no state
 * between calls.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_PROTOBUF_H
#define SC_PROTOBUF_H

#include "lib/stringinfo.h"

typedef struct ScProtoSchema ScProtoSchema; /* a parsed schema file with
											 * what it imports */
typedef struct ScProtoPlan ScProtoPlan; /* how one message type feeds the
										 * columns */

/* The most message indexes sc_proto_read_indexes takes. */
#define SC_PROTO_MAX_INDEXES 64

/*
 * Parse a schema as a registry gives it: .proto text (proto2 or proto3),
 * or base64 of a serialized google.protobuf.FileDescriptorProto (what
 * Confluent's serializers register).  Its imports are found among the
 * nrefs references (ref_names[i] the import path, ref_texts[i] its schema,
 * in either form) and the well-known types built in (google/protobuf/
 * timestamp, duration, wrappers, empty, struct, any, field_mask .proto); a
 * reference of a well-known type's path is taken over the built-in one.
 * Only the files imported (at any depth) are parsed.  NULL and *error
 * (palloc'd: what is wrong, in which file, and for text at which line)
 * otherwise.  Editions (edition = "2023") are refused.
 */
extern ScProtoSchema *sc_proto_parse(const char *text, int nrefs,
									 const char *const *ref_names,
									 const char *const *ref_texts,
									 char **error);

/*
 * Confluent's message-index array after the 5-byte header: a zigzag varint
 * count, then that many zigzag varint indexes (the first into the file's
 * message types, each next one into the nested types of the one before);
 * a count of 0 (the single byte 0) means [0].  Reads it from buf, sets
 * *consumed to its bytes; false when it is malformed, truncated or has
 * more than maxindexes indexes.
 */
extern bool sc_proto_read_indexes(const char *buf, size_t len, int *indexes,
								  int maxindexes, int *nindexes, size_t *consumed);

/*
 * The plan for the message type at indexes (as above) and ncolumns
 * columns: column c reads paths[c][0..pathlens[c]) (field names into
 * nested messages), or with pathlens[c] == 0 the whole message as JSON
 * text.  A path the type lacks gives NULL for every message.  NULL and
 * *error when the indexes name no message type, or a path goes into
 * something that is not a singular message (a scalar, a repeated field,
 * a map).
 */
extern ScProtoPlan *sc_proto_plan(const ScProtoSchema *schema, const int *indexes,
								  int nindexes, int ncolumns, char **const *paths,
								  const int *pathlens, char **error);

/*
 * The classes of text (SC_VALUE_*, streamcube.h) the field at path writes,
 * and the name of its type; -1 when the type has no such field.
 */
extern int	sc_proto_path_classes(const ScProtoSchema *schema, const int *indexes, int nindexes,
								  char **path, int pathlen, char **type_name);

/* Does the message type at indexes have a field at path? */
extern bool sc_proto_has_path(const ScProtoSchema *schema, const int *indexes,
							  int nindexes, char **path, int pathlen);

/*
 * Decode one message (the bytes after the header and the indexes): the
 * text of column c is appended to values[c] (which the caller reset), or
 * isnull[c] is set.  With scalars, scalars[c] says what the value was read
 * as when it is a number, a bool or a Timestamp (SC_SCALAR_INSTANT, in
 * microseconds since 1970-01-01 00:00 UTC, its nanos truncated as in the
 * text), the same through a wrapper, else SC_SCALAR_NONE; and with takes,
 * no text is written for a value whose kind is among takes[c]
 * (SC_SCALAR_BIT): the caller makes its datum from the scalar.  False and
 * *error (palloc'd: the field, what was wrong and the byte) when the
 * bytes are not one valid message of the type, or more than 64 MB; values
 * may then hold part of a message.
 */
extern bool sc_proto_decode(const ScProtoPlan *plan, const char *buf, size_t len,
							StringInfo *values, bool *isnull, ScScalar *scalars,
							const uint16 *takes, char **error);

#endif							/* SC_PROTOBUF_H */
