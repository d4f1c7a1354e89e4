/*-------------------------------------------------------------------------
 *
 * ingest_internal.h
 *		State shared by the files of the hot path.
 *
 * The hot path is split as PostgreSQL splits COPY FROM:
 *
 *	ingest.c			the batch: parse every message (through its format),
 *						judge it (time limits, retention, its window), write
 *						the lines, record what the rows tell the catalog,
 *						dead-letter the rest
 *	format*.c			a message to a line (format.h): format.c the registry,
 *						format_line.c writing and splitting lines,
 *						format_json.c, format_csv.c, format_meta.c
 *	ingest_windows.c	the window cache: which partition a window is, its
 *						lock for this batch, windows to create, first offsets
 *	ingest_write.c		lines into the table: each range tried whole in a
 *						subtransaction, bisected down to the bad lines, which
 *						become dead letters
 *	ingest_direct.c		the direct path: rows formed and multi-inserted here
 *	ingest_copy.c		the COPY fallback: PostgreSQL's COPY FROM, fed from memory
 *
 * Each part owns its piece of ScIngest; the others only read it.  The
 * formats see none of it: only their context (ScFormatContext, format.h),
 * which ScIngest holds.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_INGEST_INTERNAL_H
#define SC_INGEST_INTERNAL_H

#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "format.h"
#include "ingest.h"
#include "nodes/pg_list.h"
#include "parser/parse_node.h"
#include "storage/itemptr.h"
#include "utils/hsearch.h"
#include "utils/relcache.h"

/* What one message of the batch became, besides a row into an active window. */
typedef enum ScFate
{
	SC_FATE_ROW = 0,			/* a row into an active window (or bad) */
	SC_FATE_LATE,				/* a row appended to a sealed window */
	SC_FATE_REREAD,				/* read again after a crash, in a sealed window already: skipped */
	SC_FATE_TOMBSTONE,			/* a NULL value skipped (option tombstones = skip) */
	SC_FATE_DEFERRED			/* its window is not there yet: waits with the rest of its run */
} ScFate;

/* The current batch (ingest.c): its messages and their lines. */
typedef struct ScBatch
{
	ScKafkaMessage *messages;
	char	  **bad_error;		/* per message: why it is no row; NULL when fine */
	uint8	   *fate;			/* per message: its ScFate */
	StringInfoData lines;		/* the lines, one after another */
	int		   *line_start;		/* per line, + 1: where it starts in lines */
	int		   *line_msg;		/* per line: its message */
	int64	   *line_window;	/* per line: its window */
	int64	   *line_ts;		/* per line: its time value */
	int		   *line_ends;		/* per line: its first entry in ends, or -1 */
	ScFieldEnds ends;			/* where fields end, a column's worth per line
								 * whose format said (sc_line_field_ends()) */
	int			nlines;
	int			nlate;			/* lines into sealed windows */
	int			maxbatch;		/* capacity of the per-message arrays */
	int			parse_mark;		/* lines.len before the message being parsed */
	int64		rows_direct;	/* lines the direct path wrote */
	int64		rows_copy;		/* lines COPY wrote */
} ScBatch;

/*
 * Which relation a window's partition is, beyond its OID: the version of
 * its pg_class row (xmin and TID), as plpgsql tells a function it compiled
 * from one replaced since.  DDL on the relation (DETACH, ATTACH, RENAME, a
 * column added through the cube) writes a new version.
 */
typedef struct ScRelVersion
{
	TransactionId xmin;
	ItemPointerData tid;
} ScRelVersion;

/*
 * (partition of the cube, Kafka partition): the Kafka partition's first
 * offset in the partition's windows is in streamcube.window_offsets (see
 * ingest_windows.c)
 */
typedef struct ScFirstKey
{
	Oid			relid;
	int32		partition;
} ScFirstKey;

typedef struct ScFirstEntry
{
	ScFirstKey	key;			/* hash key */
	ScRelVersion version;		/* of relid's pg_class row when recorded */
	int64		start;			/* the window it was recorded for */
} ScFirstEntry;

/*
 * What the receiver knows of one window, committed (its state as
 * segments.c reads it), and whether this batch holds its lock.  Kept until
 * the window's partition is found to be another relation (ingest_windows.c).
 */
typedef struct ScWindowEntry
{
	int64		start;			/* hash key */
	ScWindowState state;		/* sealed_upto arrays in ScWindowCache.cxt */
	ScRelVersion partition;		/* state.relid's pg_class row, when last checked */
	uint64		locked_batch;	/* the batch whose transaction holds its lock */
} ScWindowEntry;

/*
 * Most partitions one batch locks (and writes): a lock each, and COPY's
 * locks on their indexes, all held to the commit.  A batch whose messages
 * spread over more (a backlog across a year of windows) defers the first
 * message of a window in one more, with the rest of its partition's run,
 * to the next batch, in order.  Well under max_locks_per_transaction's default share
 * of the lock table.  Windows that share a partition (a bucket of history,
 * a compacted one) take it once.
 */
#define SC_BATCH_MAX_LOCKED_PARTITIONS 64

/*
 * A window created by the current transaction, and its partition: known,
 * active, when the transaction commits (InvalidOid: read when needed).
 */
typedef struct ScCreatedWindow
{
	int64		start;
	Oid			relid;
	ScRelVersion partition;
} ScCreatedWindow;

/* The window cache (ingest_windows.c). */
typedef struct ScWindowCache
{
	HTAB	   *entries;		/* ScWindowEntry, by start */
	ScWindowEntry *last;		/* the entry sc_window_need() gave last */
	MemoryContext cxt;			/* the entries' sealed_upto arrays */
	uint64		batch_no;		/* counts transactions that use windows */
	bool		peeking;		/* looking ahead: take no lock */
	uint64		nlocked_batch;	/* the transaction nlocked counts for */
	int			nlocked;		/* partitions it locked ... */
	Oid			locked[SC_BATCH_MAX_LOCKED_PARTITIONS]; /* ... which */
	ScCreatedWindow *pending;	/* windows created in the current transaction */
	int			npending;
	int			maxpending;
	int64	   *missing;		/* windows met by batches, not created yet */
	int64	   *missing_part;	/* ... the partition each will likely get (its start) */
	int			nmissing;
	int			nmissing_parts; /* how many partitions they will likely get */
	int			maxmissing;
	HTAB	   *bad;			/* ScBadWindow: windows that cannot be created */
	HTAB	   *firsts;			/* ScFirstEntry: recorded in window_offsets */
	ScFirstEntry *firsts_pending;	/* recorded by the current transaction */
	int			nfirsts_pending;
	int			maxfirsts_pending;
	uint64		table_events;	/* relcache invalidations of the tables routed into */
	uint64		table_events_seen;	/* as many as when they were last flushed */
	bool		reinval_due;	/* windows were created: invalidate the tables again */
	TimestampTz reinval_after;	/* not before then */
	bool		reinval_sent;	/* the current transaction does */
} ScWindowCache;

/* The direct path's set-up (ingest_direct.c): the columns' input functions. */
typedef struct ScDirect
{
	bool		ready;
	FmgrInfo   *in_func;		/* per cube column */
	Oid		   *in_ioparam;
	Oid		   *int_type;		/* per cube column: int2, int4 or int8 (whose
								 * input functions sc_direct_int() spares
								 * the common case); else InvalidOid */
	MemoryContext cxt;			/* values of the rows not written yet */

	/*
	 * Slots kept from batch to batch, for every partition whose columns
	 * are laid out as pool_desc (ingest_direct.c, sc_direct_slots()).
	 */
	MemoryContext pool_cxt;		/* NULL: no pool yet */
	bool		pool_checked;	/* its layout was checked since the cube was
								 * last read */
	TupleDesc	pool_desc;
	const TupleTableSlotOps *pool_ops;
	TupleTableSlot **pool;		/* SC_DIRECT_FLUSH, made as needed */
} ScDirect;

/*
 * The roll-ups' part of a batch (ingest_rollup.c): the values of the
 * columns a roll-up reads, per line, as the writers formed them.
 */
typedef struct ScRollupAgg ScRollupAgg;
typedef struct ScRollupIngest
{
	bool		active;			/* the cube has roll-ups */
	bool	   *capture;		/* per cube column: a roll-up reads it */
	int16	   *typlen;			/* per captured column */
	bool	   *typbyval;
	Datum	  **values;			/* per captured column: per line */
	bool	  **nulls;
	bool	   *captured;		/* per line: its values are in */
	int			nrollups;
	ScRollupAgg **aggs;			/* per roll-up of cube->rollups, made when first used */
} ScRollupIngest;

/*
 * A writer of the batch's lines into the cube, as pglogical's apply has
 * backends: the direct path (ingest_direct.c) or COPY FROM (ingest_copy.c).
 * run() writes lines [lo, hi) and returns true, or returns false having
 * written nothing when it cannot take one of them; the next writer of the
 * batch's chain (ingest_write.c, chosen once per batch) takes the range
 * then.  Each counts what it wrote in its own field of ScBatch.
 */
typedef struct ScLineWriter
{
	const char *name;
	bool		(*run) (ScIngest *ing, int lo, int hi);
	size_t		counter;		/* offsetof(ScBatch, the int64 it counts in) */
} ScLineWriter;

extern const ScLineWriter sc_writer_direct;
extern const ScLineWriter sc_writer_copy;

struct ScIngest
{
	ScCube	   *cube;
	MemoryContext batch_cxt;	/* reset after every batch */
	MemoryContext cube_cxt;		/* what sc_ingest_set_cube() builds */

	ScLayout	layout;
	ScFormatContext fc;			/* what the format sees: cube, layout, its state */

	ScWindowCache windows;
	ScBatch		batch;
	ScDirect	direct;
	ScRollupIngest rollup;
	const ScLineWriter *writers[2];	/* the batch's chain (ingest_write.c) */
	int			nwriters;
	List	   *copy_options;	/* ingest_copy.c: COPY's options of the encoding */
	StringInfoData copy_buf;	/* ingest_copy.c: lines with their datums as text */
	SPIPlanPtr	dead_letter_plan;	/* ingest_write.c */
	bool		dead_letter_topic;	/* it writes dead_letters.topic (0.4.0 on) */
	bool		(*wanted_elsewhere) (void); /* see sc_ingest_create() */
};

/* Should the batch end early?  Its receiver is wanted for something else. */
static inline bool
sc_ingest_wanted_elsewhere(ScIngest *ing)
{
	return ing->wanted_elsewhere != NULL && ing->wanted_elsewhere();
}

/*
 * Errors that a message's content can cause; anything else aborts the
 * batch.
 */
static inline bool
sc_is_data_error(ErrorData *edata)
{
	int			class = ERRCODE_TO_CATEGORY(edata->sqlerrcode);

	if (edata->sqlerrcode == ERRCODE_CHECK_VIOLATION && edata->message &&
		strncmp(edata->message, "no partition of relation", 24) == 0)
		return false;			/* a missing window is our problem, not the message's */
	return class == ERRCODE_DATA_EXCEPTION ||
		class == ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION ||
		class == ERRCODE_PROGRAM_LIMIT_EXCEEDED;
}

/*
 * Run work(arg) in a subtransaction.  Returns NULL when it succeeded, the
 * error when it failed because of the data; any other error is rethrown
 * and aborts the whole batch, so that nothing is lost.
 */
static inline ErrorData *
sc_try_subtransaction(void (*work) (void *), void *arg)
{
	ErrorData  *edata = sc_try(work, arg);

	if (edata != NULL && !sc_is_data_error(edata))
		ReThrowError(edata);
	return edata;
}

/* ingest_windows.c */
extern const char sc_window_missing[];
extern const char sc_window_busy[];
extern void sc_windows_init(ScIngest *ing);
extern void sc_windows_fresh_routes(ScIngest *ing);
extern void sc_windows_begin(ScIngest *ing);
extern const char *sc_window_need(ScIngest *ing, int64 window, bool batch, ScWindowEntry **entry);
extern ScWindowEntry *sc_window_find(ScIngest *ing, int64 window);
extern int64 sc_window_upto(const ScWindowEntry *e, int32 partition);
extern void sc_windows_record(ScIngest *ing, int nlines_done);
extern int	sc_ingest_missing_partitions(ScIngest *ing);
extern void sc_windows_end_batch(ScIngest *ing, bool committed);

/* ingest_write.c */
extern void sc_writers_choose(ScIngest *ing);
extern int	sc_write_lines(ScIngest *ing, int lo, int hi, bool stop_first);
extern void sc_dead_letter(ScIngest *ing, const ScKafkaMessage *m, const char *error);

/* ingest_copy.c */
extern ParseState *sc_insert_parsestate(ScIngest *ing, Relation rel);
extern void sc_copy_setup(ScIngest *ing);

/* ingest_direct.c */
extern void sc_direct_reset(ScIngest *ing);
extern void sc_direct_capture_lines(ScIngest *ing, int n, const bool *use);

/* ingest_rollup.c */
extern void sc_rollup_ingest_setup(ScIngest *ing);
extern void sc_rollup_ingest_release(ScIngest *ing);
extern void sc_rollup_batch_begin(ScIngest *ing, int n);
extern void sc_rollup_capture(ScIngest *ing, int l, const Datum *values, const bool *isnull,
							  const AttrNumber *attno);
extern bool sc_rollup_lines_used(ScIngest *ing, int written, bool **use);
extern void sc_rollup_merge_batch(ScIngest *ing, int written, const bool *use);

#endif							/* SC_INGEST_INTERNAL_H */
