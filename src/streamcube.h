/*-------------------------------------------------------------------------
 *
 * streamcube.h
 *		Declarations shared by every room of streamcube.
 *
 * streamcube turns Kafka topics into time-partitioned tables.  The code is
 * split into rooms, in layers: a room calls only rooms of its own layer or
 * below, no two rooms call each other, round about or directly, and only
 * _PG_init calls launcher.c.  test/tools/layers checks it on the object
 * files against this list, in every test run; docs/architecture.md draws
 * the layers and writes down the one order in which locks are taken.
 *
 * entry
 *	streamcube.c	_PG_init: loading checks, hooks, the launcher registration
 * low
 *	guc.c			the streamcube.* settings
 *	shmem.c			shared memory: launcher state, receiver slots, the wake-up at COMMIT
 *	catalog.c		who may do what; SQL as the catalog owner; the switch to a cube's owner;
 *					the one writer of streamcube.config_log
 *	kafka*.c		the only files that include librdkafka: kafka.c handles and metadata, kafka_consumer.c the consumer
 *	json_text.c		what both decoders write: JSON strings, hex, base64, floats, dates, failures
 *	avro_schema.c	Avro writer schemas parsed, and the plan of the columns (avro.h)
 *	avro.c			Avro binary decoding by a writer schema's plan (avro_internal.h)
 *	protobuf_build.c	building a Protobuf schema: what its two parsers share
 *	protobuf_descriptor.c	a Protobuf schema file from a FileDescriptorProto
 *	protobuf_text.c	a Protobuf schema file from .proto text
 *	protobuf_schema.c	a Protobuf schema with its imports: names resolved, defaults
 *	protobuf_plan.c	which fields of a Protobuf message type feed which columns
 *	protobuf_wire.c	Protobuf's wire format: tags, values, checks, where fields came
 *	protobuf.c		Protobuf decoding: a message into its columns' text (protobuf.h, protobuf_internal.h)
 *	registry.c		the only file that includes curl: schema registry requests
 *	node_conn.c		the only file that includes libpq: a connection to another server, a node,
 *					by its postgres_fdw foreign server and user mapping
 * middle
 *	ownership.c		every relation of a cube belongs to its owner (a utility hook)
 *	cluster.c		Kafka clusters: SQL functions, who may set a property
 *	nodes.c			nodes, the other servers: SQL functions, the one writer of streamcube.node_catalog
 *	cube.c			what a cube is: lookup by name, loading, the check of its table
 *	topics.c		a cube's topics: the topic argument, streamcube.cube_topics (its one writer),
 *					patterns, partitions named for users
 *	cube_options.c	parsing and checking the options of a cube
 *	cube_catalog.c	the one writer of a cube's row in streamcube.cubes
 *	positions.c		consume positions, checkpoints, seal marks (their one writer)
 *	stops.c			stop points of cubes (their one writer)
 *	segments.c		window arithmetic and active partitions
 *	sealed.c		what a sealed partition is: twins, guard, DDL with lock retries
 *	rewrite.c		moving rows with their tuple headers (seals, compaction)
 *	rollup_def.c	what a roll-up is: measures and dimensions parsed, definitions loaded
 *	rollups.c		roll-ups: the one writer of their catalog, views, partitions, the merge at seal (rollup.h)
 *	rollup_agg.c	a batch aggregated in C into a roll-up's partial rows, appended
 * upper
 *	format*.c		message formats (format.h): json, jsonb, csv, Kafka metadata
 *	ingest*.c		the hot path (ingest_internal.h): batch, windows, writers
 *	seal.c			sealing
 *	compact.c		compaction
 *	drops.c			dropping a large cube's table in steps
 *	reassign.c		replica sets, streamcube_reassign() and its journal
 *	reassign_topics.c	partitions and topics added to a cube or taken out, by reassign.c's steps
 *	placement.c		replica sets placed on nodes: handed over by reassign.c's steps, adopted there
 * top
 *	receiver.c		the receiver worker: its batches and main loop
 *	receiver_control.c	its control side: slot, catalog, assignment, pauses
 *	receiver_kafka.c	the consumer's life, what Kafka still holds, Kafka's health
 *	launcher.c		the launcher worker, reconciling receivers with the catalog
 *	maintenance.c	streamcube_seal_due (seal, compact, retention), the pg_cron job
 *	consumers.c		the monitoring functions behind streamcube.* views
 *	cube_sql.c		SQL functions on cubes: create, drop, pause, resume, wait, alter
 *	rollup_sql.c	SQL functions on roll-ups: create (and fill), drop
 *
 * Every object named by a user is quoted whenever it reaches SQL text.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMCUBE_H
#define STREAMCUBE_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "utils/elog.h"
#include "storage/lwlock.h"
#include "storage/spin.h"

/*
 * The version of this library, as streamcube.control's default_version
 * names the SQL objects it goes with (streamcube_library_version()).
 */
#define SC_LIBRARY_VERSION "0.4.0"

/*
 * The classes of text a format with schemas (avro, protobuf) writes for a
 * value, which decide what a column of a type can take from it.
 */
#define SC_VALUE_BOOL	0x01
#define SC_VALUE_NUMBER	0x02
#define SC_VALUE_STRING	0x04
#define SC_VALUE_BYTES	0x08
#define SC_VALUE_TIME	0x10
#define SC_VALUE_JSON	0x20

/*
 * No instant: of a message's time (the decoders' SC_SCALAR_INSTANT, in
 * microseconds since 1970-01-01 00:00 UTC, converted by format_registry.c).
 */
#define SC_NO_TIME PG_INT64_MIN

/*
 * What a decoder (avro.c, protobuf.c) read a column's value as, when it is
 * a number, a truth value or a time rather than text: a column of a type
 * that takes it (format.h, sc_scalar_takes) gets its Datum without the
 * text being written and read back.
 */
typedef enum ScScalarKind
{
	SC_SCALAR_NONE = 0,			/* text only */
	SC_SCALAR_INT,				/* i: a signed integer */
	SC_SCALAR_UINT,				/* i: the bits of an unsigned 64-bit integer */
	SC_SCALAR_BOOL,				/* i: 0 or 1 */
	SC_SCALAR_FLOAT4,			/* f: a float's value (its text: float4's) */
	SC_SCALAR_FLOAT8,			/* f: a double's */
	SC_SCALAR_INSTANT,			/* i: microseconds since 1970-01-01 00:00 UTC */
	SC_SCALAR_LOCAL_TS,			/* i: the same, a wall-clock time with no zone */
	SC_SCALAR_TEXT				/* s: i bytes of a string, valid UTF-8 with no NUL,
								 * in the message (while it is read); only when
								 * taken, else the string is written as text */
} ScScalarKind;

#define SC_SCALAR_BIT(kind) ((uint16) (1 << (kind)))

typedef struct ScScalar
{
	ScScalarKind kind;
	int64		i;
	double		f;
	const char *s;
} ScScalar;

/*
 * Is every byte of s ASCII and none NUL?  Then s is valid in every server
 * encoding, and pg_verify_mbstr() need not read it.  Eight bytes at a
 * time, the last eight read again for the tail: a byte with its high bit
 * set, or one whose subtraction borrows (only a zero byte starts a
 * borrow), leaves a high bit in bad.
 */
static inline bool
sc_plain_ascii(const char *s, int len)
{
	const uint64 ones = UINT64CONST(0x0101010101010101);
	const uint64 highs = UINT64CONST(0x8080808080808080);
	uint64		bad = 0;
	uint64		w;

	if (len < (int) sizeof(uint64))
	{
		for (int i = 0; i < len; i++)
			bad |= (unsigned char) s[i] == 0 ? highs : (unsigned char) s[i];
		return (bad & highs) == 0;
	}
	for (int i = 0; i + (int) sizeof(uint64) <= len; i += sizeof(uint64))
	{
		memcpy(&w, s + i, sizeof(w));
		bad |= w | ((w - ones) & ~w);
	}
	memcpy(&w, s + len - sizeof(w), sizeof(w));
	bad |= w | ((w - ones) & ~w);
	return (bad & highs) == 0;
}

/* json_text.c: the text both decoders write (avro.c, protobuf.c). */
struct StringInfoData;
extern void sc_json_string_bytes(struct StringInfoData *out, const char *s, size_t len);
extern const char *sc_json_key(const char *name);
extern void sc_text_hex(struct StringInfoData *out, const uint8 *b, size_t n, bool json);
extern void sc_text_base64(struct StringInfoData *out, const uint8 *b, size_t n);
extern void sc_text_float(struct StringInfoData *out, double v, bool single, bool json);
extern void sc_text_civil(int64 days, int64 *year, int *month, int *day);

/*
 * A value's text, written for column cols[0] from offset from of its
 * buffer on, given to the other columns that take it too (cols[1..n)):
 * values[c] appended to, isnull[c] cleared, for every one.
 */
extern void sc_decode_share(struct StringInfoData **values, bool *isnull, const int *cols,
							int n, int from);

/*
 * The first failure of a decoder (avro.c, protobuf.c): what, at which byte
 * of the message, inside which fields, outermost first; what is NULL while
 * none.  sc_decode_failv records it, sc_decode_fail_in adds the fields on
 * the way up, sc_decode_error writes it: field "a.b[2]": what (at byte N).
 */
typedef struct ScDecodeFailure
{
	const char *what;
	size_t		at;
	struct List *where;
} ScDecodeFailure;

extern bool sc_decode_failv(ScDecodeFailure *f, size_t at, const char *fmt, va_list args)
			pg_attribute_printf(3, 0);
extern bool sc_decode_fail_in(ScDecodeFailure *f, const char *name);
extern bool sc_decode_fail_item(ScDecodeFailure *f, int64 item);
extern char *sc_decode_error(const ScDecodeFailure *f);

/* Two digits of 0..99 at o; returns the end. */
static inline char *
sc_text_put2(char *o, int v)
{
	o[0] = '0' + v / 10;
	o[1] = '0' + v % 10;
	return o + 2;
}

/* Name of the schema holding catalogs and views. */
#define SC_SCHEMA "streamcube"
/* Role whose members may manage clusters and cubes. */
#define SC_ADMIN_ROLE "streamcube_admin"

/* ----------------------------------------------------------------
 * guc.c
 * ----------------------------------------------------------------
 */
extern char *sc_database;
extern int	sc_max_receivers;
extern int	sc_max_receiver_partitions;
extern int	sc_launcher_naptime_ms;
extern int	sc_kafka_timeout_ms;
extern int	sc_batch_max_rows;
extern int	sc_rollup_batch_max_rows;
extern int	sc_batch_max_ms;
extern int	sc_batch_max_kbytes;
extern int	sc_fetch_queue_kbytes;
extern int	sc_restart_max_delay_ms;
extern int	sc_batch_max_windows;
extern int	sc_metadata_interval_ms;
extern bool sc_direct_insert;
extern bool sc_history_buckets;

extern void sc_guc_define(void);

/* ----------------------------------------------------------------
 * shmem.c: receiver slots
 *
 * One slot per running (cube, replica set) receiver.  The launcher owns
 * allocation and freeing; a receiver owns its own statistics.  All fields
 * are protected by ScShared->lock.
 * ----------------------------------------------------------------
 */
typedef enum ScReceiverState
{
	SC_RECEIVER_FREE = 0,
	SC_RECEIVER_STARTING,
	SC_RECEIVER_RUNNING,
	SC_RECEIVER_PAUSED,
	SC_RECEIVER_STOPPING,
	SC_RECEIVER_STOPPED,
	SC_RECEIVER_FAILED
} ScReceiverState;

#define SC_ERROR_LEN 512

typedef struct ScPartitionStat
{
	int32		partition;
	int64		position;		/* next offset to consume (committed) */
	int64		high_watermark; /* last known Kafka high watermark, -1 */
	int64		oldest_ts;		/* Kafka timestamp (ms) of the oldest message not
								 * consumed, as far as known (the last consumed
								 * between batches); -1 */
	TimestampTz caught_up_at;	/* last seen with nothing left to read, by
								 * the server's clock, while Kafka answered; 0 */
} ScPartitionStat;

typedef struct ScReceiverSlot
{
	bool		in_use;
	uint32		generation;		/* bumped on every (re)registration */
	Oid			dboid;
	Oid			owner;			/* the owner of the cube's table */
	Oid			relid;			/* the cube's table: who may read the slot */
	int32		cube_id;
	char		replica_set[NAMEDATALEN];
	pid_t		pid;			/* 0 while not running */
	ScReceiverState state;

	/* launcher -> receiver */
	bool		pause_wanted;
	bool		stop_wanted;
	uint32		config_version; /* bumped when the cube's catalog changed */

	/* launcher bookkeeping for restart back-off */
	int			failures;
	TimestampTz next_start;

	/* receiver -> view */
	TimestampTz started_at;
	TimestampTz last_batch_at;
	uint64		rows_total;
	double		rows_per_sec;
	int			npartitions;	/* of sc_slot_parts(slot) */
	int			topic_partitions;	/* partitions the topic has; -1 unknown */
	int			ntopics;		/* of sc_slot_topic_counts(slot); 0 unknown */
	uint64		tombstones_skipped;
	uint64		rows_direct;	/* rows the direct path wrote */
	uint64		rows_copy;		/* rows written through COPY */
	uint64		batches;		/* transactions that moved positions */
	int64		epoch;			/* assignment epoch applied; -1 before the first */
	char		last_error[SC_ERROR_LEN];
	TimestampTz last_error_at;
	TimestampTz contact_at;		/* Kafka last answered the receiver; 0 */
	TimestampTz disconnected_since; /* Kafka stopped answering; 0 while it does */
	char		previous_error[SC_ERROR_LEN];	/* a last_error the receiver got over */
	TimestampTz previous_error_at;
} ScReceiverSlot;

/*
 * A streamcube_reassign() call that failed.  Its transaction rolls back,
 * journal included; the call leaves this report and the launcher writes
 * it to streamcube.reassign_log in a transaction of its own.
 */
#define SC_MAX_REASSIGN_FAILURES 16
#define SC_ASSIGNMENT_LEN 2048

typedef struct ScReassignFailure
{
	bool		used;
	Oid			dboid;
	int32		cube_id;
	int64		reassign_id;
	Oid			roleid;
	TimestampTz started_at;
	TimestampTz failed_at;
	char		step[16];
	char		error[SC_ERROR_LEN];
	char		old_assignment[SC_ASSIGNMENT_LEN];	/* JSON, or "" when too long */
	char		new_assignment[SC_ASSIGNMENT_LEN];
} ScReassignFailure;

/*
 * Progress of long work a backend does for a cube (a roll-up filled from
 * the rows a cube holds, a seal, a compaction), as PostgreSQL's
 * pg_stat_progress_* views show theirs: one entry per backend at a time,
 * cleared when its transaction ends (shmem.c, streamcube.progress).
 */
#define SC_MAX_PROGRESS 32

typedef struct ScProgress
{
	pid_t		pid;			/* 0: free */
	Oid			dboid;
	Oid			relid;			/* the cube's table: who may read the entry */
	char		target[2 * NAMEDATALEN + 8];	/* the roll-up filled (its name: it
												 * is new, no other snapshot sees its
												 * OID), or "" */
	char		command[24];	/* "fill roll-up", "seal", "compact" */
	char		phase[64];
	char		unit[16];		/* what done and total count */
	int64		done;
	int64		total;			/* -1: not known */
	TimestampTz started_at;
	TimestampTz phase_at;
} ScProgress;

/*
 * The partitions of slot s are streamcube.max_receiver_partitions entries
 * after the slots (sc_slot_parts), so that no fixed number cuts what a
 * receiver of a topic with thousands of partitions reports.
 */
typedef struct ScShared
{
	LWLock	   *lock;
	pid_t		launcher_pid;
	int			nslots;
	int			slot_partitions;	/* streamcube.max_receiver_partitions */
	ScReassignFailure failures[SC_MAX_REASSIGN_FAILURES];
	ScProgress	progress[SC_MAX_PROGRESS];
	ScReceiverSlot slots[FLEXIBLE_ARRAY_MEMBER];
} ScShared;

extern ScShared *sc_shared;

extern void sc_shmem_install_hooks(void);
extern ScPartitionStat *sc_slot_parts(const ScReceiverSlot *slot);
extern int32 *sc_slot_topic_counts(const ScReceiverSlot *slot);
extern int	sc_slots_in_use(void);
extern bool sc_slot_exists(int32 cube_id, const char *replica_set);
extern void sc_slots_warn_short(const char *cube, int n);
extern const char *sc_receiver_state_name(ScReceiverState state);
extern void sc_slot_set_error(ScReceiverSlot *slot, const char *message);
extern void sc_slot_retire_error(ScReceiverSlot *slot);
extern void sc_slot_transition(ScReceiverSlot *slot, ScReceiverState state);
extern void sc_progress_start(Oid relid, const char *target, const char *command);
extern void sc_progress_phase(const char *phase, const char *unit, int64 total);
extern void sc_progress_done(int64 done);
extern void sc_launcher_wakeup_at_commit(void);
extern void sc_launcher_xact_callback_register(void);

/* ----------------------------------------------------------------
 * sealed.c
 * ----------------------------------------------------------------
 */
extern bool sc_seal_writes_allowed;

/*
 * Classes of streamcube's advisory locks, pg_advisory_xact_lock(class,
 * cube_id), and the one order every lock is taken in: docs/architecture.md,
 * "Lock order".
 */
#define SC_LOCK_CLASS_WINDOWS 0x5C0BE	/* DDL creating a cube's windows (segments.c) */
#define SC_LOCK_CLASS_SEAL 0x5EA1	/* seals, compactions and retention of a cube (sealed.c) */

/* ----------------------------------------------------------------
 * launcher.c
 * ----------------------------------------------------------------
 */
extern void sc_launcher_register(void);
extern PGDLLEXPORT void sc_launcher_main(Datum main_arg);

/* ----------------------------------------------------------------
 * catalog.c
 * ----------------------------------------------------------------
 */
typedef struct ScPrivilegeSave
{
	Oid			userid;
	int			sec_context;
	int			nestlevel;
} ScPrivilegeSave;

/* The user and security context to restore after acting as a cube's owner. */
typedef struct ScAsOwner
{
	Oid			userid;
	int			sec_context;
} ScAsOwner;

extern void sc_catalog_enter(ScPrivilegeSave *save);
extern void sc_as_owner_enter(ScAsOwner *save, Oid owner);
extern void sc_as_owner_leave(ScAsOwner *save);
extern void sc_catalog_leave(ScPrivilegeSave *save);
extern void sc_config_journal(const char *cluster, int32 cube_id, Oid cube_relid,
							  Datum old_value, Datum new_value);
extern bool sc_catalog_has_column(const char *table, const char *column);
extern int	sc_catalog_exec(const char *sql, int nargs, Oid *types, Datum *values,
							const char *nulls, bool read_only, long count);
struct _SPI_plan;				/* executor/spi.h's SPIPlanPtr points to one */
extern int	sc_catalog_exec_kept(struct _SPI_plan **plan, const char *sql, int nargs, Oid *types,
								 Datum *values, const char *nulls, bool read_only, long count);
extern Datum sc_int_array(const Datum *values, int n, Oid type);
extern Datum sc_int4_array(int n, const int32 *values);
extern Datum sc_int8_array(int n, const int64 *values);
extern void sc_caller_path_enter(int *nestlevel);
extern void sc_caller_path_leave(int nestlevel);
extern Oid	sc_caller_relation(const char *name);
extern bool sc_is_admin(Oid roleid);
extern Oid	sc_relation_owner(Oid relid);
extern bool sc_name_taken(const char *name, Oid nsp);
extern char *sc_relation_qualified(Oid relid);
extern void sc_require_admin(const char *action);
extern void sc_check_database(void);
extern char *sc_text_arg(FunctionCallInfo fcinfo, int n, const char *what);
extern ErrorData *sc_try(void (*fn) (void *), void *arg);
extern bool sc_try_nowait(void (*fn) (void *), void *arg);
extern bool sc_hide_statement;
extern void sc_log_hook_install(void);
extern void sc_secret_remember(const char *value);
extern void sc_redact_buf(char *buf, size_t size);
extern char *sc_redact(const char *text);

/* ----------------------------------------------------------------
 * ownership.c
 * ----------------------------------------------------------------
 */
extern void sc_ownership_install_hook(void);

/* ----------------------------------------------------------------
 * cluster.c
 * ----------------------------------------------------------------
 */
struct ScKafkaConnInfo;
extern struct ScKafkaConnInfo *sc_cluster_conninfo(const char *name);
struct ScRegistryConn;
extern bool sc_cluster_registry(const char *name, struct ScRegistryConn *registry);

#endif							/* STREAMCUBE_H */
