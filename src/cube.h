/*-------------------------------------------------------------------------
 *
 * cube.h
 *		What streamcube knows about one cube, shared by the SQL functions,
 *		the segment code, the ingest path and the receiver.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_CUBE_H
#define SC_CUBE_H

#include "streamcube.h"

#include "kafka.h"

#include "access/attnum.h"
#include "datatype/timestamp.h"
#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "utils/jsonb.h"

typedef enum ScFormat
{
	SC_FORMAT_JSON,
	SC_FORMAT_CSV,
	SC_FORMAT_JSONB,			/* json, and the whole document in a jsonb column */
	SC_FORMAT_AVRO,				/* Avro: Confluent-framed with a registry, or bare records */
	SC_FORMAT_PROTOBUF			/* Protobuf, Confluent-framed with a registry */
} ScFormat;

/* Where a column's value comes from, besides the payload (option "fields"). */
typedef enum ScMeta
{
	SC_META_NONE = 0,			/* the payload: a JSON key path, a CSV field */
	SC_META_KEY,				/* the message key */
	SC_META_TIMESTAMP,			/* the Kafka timestamp */
	SC_META_TIMESTAMP_TYPE,		/* CreateTime or LogAppendTime */
	SC_META_HEADER,				/* one header, by name (its last value) */
	SC_META_HEADERS,			/* every header, as a JSON object */
	SC_META_VALUE,				/* the whole message value */
	SC_META_TOPIC				/* the message's topic */
} ScMeta;

typedef enum ScBadPolicy
{
	SC_BAD_DEAD_LETTER,
	SC_BAD_PAUSE
} ScBadPolicy;

/* A declared column of the cube, in table order. */
typedef struct ScColumn
{
	char	   *name;
	Oid			type;
	int32		typmod;
	AttrNumber	attnum;			/* in the cube's table */
	char	  **path;			/* JSON keys leading to the value */
	int			pathlen;		/* 0 for a metadata column */
	ScMeta		meta;
	char	   *header;			/* SC_META_HEADER: its name */
	bool		mapped;			/* named in option "fields" */
} ScColumn;

/*
 * One level of option "compact": sealed windows merge into partitions of
 * this size, aligned like the windows (fixed widths from the windows'
 * origin, months from the first of a month, 00:00 UTC).
 */
#define SC_MAX_COMPACT_LEVELS 4

/*
 * Most partitions one compaction call merges (streamcube_seal_due: all
 * cubes together), and so the most partitions of one level a partition of
 * the next may hold: a level that would merge more at once is refused.
 */
#define SC_COMPACT_MAX_SOURCES 96
typedef struct ScCompactLevel
{
	int32		months;			/* a number of months, or 0 */
	int64		usecs;			/* else a fixed width */
} ScCompactLevel;

/* What a cube's topic argument is (topics.c). */
typedef enum ScTopicsKind
{
	SC_TOPICS_ONE,				/* a topic name: no _topic column */
	SC_TOPICS_LIST,				/* a JSON list of topic names */
	SC_TOPICS_PATTERN			/* {"pattern": regex}: topics that match */
} ScTopicsKind;

/* The column of a cube of several topics that holds each row's topic. */
#define SC_TOPIC_COLUMN "_topic"

typedef struct ScCube
{
	MemoryContext mcxt;			/* where everything below is allocated */
	int32		cube_id;
	Oid			relid;
	Oid			owner;
	char	   *schema;
	char	   *relname;
	char	   *qualified;		/* quoted schema.table */
	char	   *cluster;
	char	   *topic;			/* as created: a name, or a list's or a pattern's JSON */
	ScTopicsKind topics_kind;
	char	   *topic_pattern;	/* SC_TOPICS_PATTERN: its regular expression */
	ScTopicList topics;			/* by topic number (streamcube.cube_topics) */
	char	   *kafka_cluster_id;	/* the Kafka cluster its positions are of; NULL unknown */

	int			ncolumns;		/* declared columns, without _partition/_offset */
	ScColumn   *columns;
	int			time_index;		/* index of the time column (the partition key)
								 * in columns[]; -1 when there is none */
	char	   *time_column;	/* its name as the catalog holds it */
	List	   *missing_columns;	/* columns "fields" maps that are gone */
	char	   *stranger;		/* a partition that is no window of the cube's */
	char	   *broken;			/* why the cube cannot ingest as its catalog
								 * row says (sc_cube_check_columns), or NULL */
	int			nmeta;			/* columns filled from message metadata */
	char	   *implicit_document;	/* format jsonb: the document column chosen
									 * by type, not named in "fields" */
	Oid			time_type;		/* TIMESTAMPTZOID or TIMESTAMPOID */
	int64		width;			/* segment interval in microseconds */

	ScFormat	format;
	char	   *options_text;	/* the stored options, to notice a change */
	ScBadPolicy bad_policy;
	bool		skip_tombstones;	/* option tombstones: skip (count) them */
	bool		start_latest;
	int64		start_at_ms;	/* option start as a time (Kafka milliseconds); -1 none */
	char	   *start_cube;		/* option start {"cube": name}: start where it stopped */
	Jsonb	   *end;			/* option end: the stop point a new cube gets */
	char	   *progress_group; /* option progress_group: Kafka group to commit to; NULL */
	char	   *home;			/* option home: the cube is a node's copy, its other
								 * partitions are that home server's; NULL */
	char	   *avro_schema;	/* format avro, option schema: bare records of it; NULL framed */
	char	   *avro_subject;	/* format avro, option subject: checked at creation; NULL */
	int64		grace;			/* microseconds */
	int64		reject_early;	/* dead-letter times this far after now; -1 off */
	int64		reject_late;	/* dead-letter times this far before now; -1 off */
	bool		late_dead_letter;	/* option late: dead_letter, not append */
	int64		retention;		/* drop sealed windows older than this; -1 off */
	int			ncompact;		/* option compact: coarser partitions, finest first */
	ScCompactLevel compact[SC_MAX_COMPACT_LEVELS];
	char		csv_delimiter;
	char		csv_quote;
	char	   *csv_null;
	List	   *replica_sets;	/* at creation: sets the partitions are dealt to */
	bool		assign_new_partitions;	/* option new_partitions: assign, not ignore */
	bool		keep_rows;		/* option raw_rows: false keeps only the roll-ups */
	List	   *rollups;		/* ScRollup (rollup.h), by rollup_id */
	char	   *rollups_key;	/* their ids and tables, to notice a change */

	/* state that changes while the cube runs */
	bool		paused;
	char	   *paused_reason;	/* set when streamcube paused it */
	bool		stop_reached;	/* paused at its stop point */
	int32		skip_partition; /* -1 if none */
	int64		skip_offset;
	char	   *skip_error;		/* why that message was bad */
	int64		config_version;
} ScCube;

/* topics.c */
extern void sc_topics_parse(ScCube *cube, const char *spec, const char *name);
extern void sc_topics_load(ScCube *cube);
extern void sc_topics_insert(const ScCube *cube, int first, const char *added_by);
extern bool sc_topics_matches(const ScCube *cube, const char *topic);
extern List *sc_topics_match_kafka(const ScCube *cube, List *kafka);
extern void sc_topics_add(ScCube *cube, List *names);
extern void sc_topics_mark_column(ScCube *cube);
extern void sc_topics_change(ScCube *cube, const char *spec, const char *name, List *kafka,
							 List **taken_out, List **put_in);
extern List *sc_topics_live(const ScCube *cube, List *sources);
extern char *sc_partition_name(const ScCube *cube, int32 source);
extern int32 sc_partition_parse(const ScCube *cube, const char *text, const char **error);

/* cube.c */
extern void sc_cube_read_columns(ScCube *cube, const char *time_column);
extern int64 sc_kafka_ms_of_text(const char *text, const char *what, const char *hint);
extern void sc_cube_check_progress_group(const char *old, const char *new);
extern ScCube *sc_cube_load(int32 cube_id, bool missing_ok);
extern int32 sc_cube_lookup(const char *name, Oid *relid_out, Oid *owner_out);
extern int32 sc_cube_for_action(const char *name, const char *action, Oid *relid, Oid *owner);
extern char *sc_cube_check_table(const ScCube *cube, const ScCube *before);
extern const char *sc_cube_name_literal(const ScCube *cube);
extern bool sc_drop_pending_step(void);
extern void sc_drop_table(Oid relid, Oid owner, const char *what);

/*
 * Most partitions one transaction drops: a cube with more is dropped by
 * the launcher in steps of this many (streamcube.pending_drops).  Each takes
 * a lock on the table, its indexes and its TOAST table.
 */
#define SC_DROP_STEP 256

/* cube_options.c */
extern int64 sc_interval_usecs(const Interval *iv, const char *what);
extern Interval *sc_interval_of_text(const char *text, const char *what, const char *hint);
extern void sc_cube_parse_options(ScCube *cube, Jsonb *options, bool validate);
extern List *sc_cube_copy_options(const ScCube *cube);
extern Datum sc_cube_pin_document(const ScCube *cube, Datum options);
extern char *sc_cube_meta_type_problem(const ScCube *cube, const ScColumn *col, int c);

/* segments.c */
extern int64 sc_cube_time(const ScCube *cube, TimestampTz t);
extern int64 sc_window_start(const ScCube *cube, int64 ts);
extern int64 sc_bucket_start(int64 ts, int64 width);
extern bool sc_parse_time(const ScCube *cube, const char *str, int64 *result,
						  char **error);
extern bool sc_parse_time_bytes(const ScCube *cube, const char *p, size_t len,
								StringInfo buf, int64 *result, char **error);
extern bool sc_segment_ensure(const ScCube *cube, int64 window_start,
							  int64 *created_start, int64 *created_end);
extern void sc_level_bucket(const ScCube *cube, int level, int64 ts, int64 *start, int64 *end);
extern bool sc_segment_history_span(const ScCube *cube, int64 start, int64 *bucket_start,
									int64 *bucket_end);
extern void sc_segment_lock_windows(const ScCube *cube);
extern void sc_segment_set_partition(const ScCube *cube, int64 start, int64 end, Oid relid);
extern void sc_segment_mark_sealed(const ScCube *cube, int64 start);
extern void sc_segment_journal(const ScCube *cube, TimestampTz start, TimestampTz end,
							   const char *action, int64 rows);
extern Oid *sc_segment_partitions_before(const ScCube *cube, TimestampTz before, int max, int *n);
extern void sc_segment_journal_drops(const ScCube *cube, const Oid *parts, int n);
extern void sc_segment_set_compacted(const ScCube *cube, int64 start, int64 end, Oid relid);
extern char *sc_bound_literal(const ScCube *cube, int64 ts);
extern bool sc_partition_range(Oid part, int64 *lo, int64 *hi);
extern char *sc_window_partition_name(Oid nsp, const char *base, int64 start);

/* What a receiver needs to know of one window. */
typedef struct ScWindowState
{
	bool		sealed;
	Oid			relid;			/* the window's partition */
	int			nupto;			/* sealed: per Kafka partition ... */
	int32	   *upto_partitions;
	int64	   *upto_offsets;	/* ... every message below is in the window */
} ScWindowState;

extern bool sc_segment_state(const ScCube *cube, int64 window_start, ScWindowState *state,
							 MemoryContext cxt);

#endif							/* SC_CUBE_H */
