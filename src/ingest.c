/*-------------------------------------------------------------------------
 *
 * ingest.c
 *		The hot path: turn a batch of Kafka messages into rows of the cube,
 *		and the messages that cannot be rows into dead letters.
 *
 * Each message becomes one line in COPY's text (or CSV) format, which is
 * then written either directly (streamcube.direct_insert: the receiver
 * forms the rows and multi-inserts them per window, see "The direct path"
 * below) or with PostgreSQL's own COPY machinery fed from
 * memory (BeginCopyFrom with a data-source callback, then CopyFrom), which
 * routes rows into partitions and writes them with multi-inserts and a
 * bulk-insert state.  The lines:
 *
 *	- csv: the message itself, checked for one well-formed record with the
 *	  declared number of fields, then ",partition,offset";
 *	- json: the message parsed with PostgreSQL's JSON lexer, its values
 *	  (by column name, or by the "fields" key paths) written as a line of
 *	  COPY's text format.
 *
 * The time value of every message is parsed here without raising errors,
 * so its window can be created before COPY needs it.
 *
 * A message that fails these checks never reaches COPY.  A message that
 * passes them can still fail in COPY (a value its column type rejects, a
 * constraint).  COPY aborts on the first bad row, so the batch is first
 * tried whole in a subtransaction, which costs nothing when all is well;
 * on a data error the range is split in halves and each half tried again,
 * down to the single bad messages.  A handful of bad messages in a batch of
 * n costs about 2 log2(n) extra subtransactions each.  Errors that are not
 * about the data (out of disk, permissions, shutdown) are rethrown: the
 * whole batch aborts and nothing is lost.
 *
 * Any error a message can cause while it is parsed (a depth limit, a value
 * out of range, ...) makes that message bad; only errors that are not
 * about the data (out of memory, a cancel) abort the batch.  JSON nesting
 * deeper than SC_MAX_JSON_DEPTH is refused before PostgreSQL's recursive
 * parser sees it.  A time value further than the cube's rejection periods
 * from now is bad too.  A tombstone (a message with a NULL value) is a
 * dead letter, or skipped and counted under option tombstones = skip.
 *
 * Bad messages go to streamcube.dead_letters, with their key, in the
 * batch's transaction, or, under policy "pause", end the batch just before
 * the first of them.  A batch creates no window: it ends before the first
 * message of a window that does not exist yet, the receiver keeps the rest
 * for its next batch and creates such windows (at most
 * streamcube.batch_max_windows at once) in a transaction of their own.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "access/heapam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/partition.h"
#include "storage/lmgr.h"
#include "utils/syscache.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/copy.h"
#include "common/jsonapi.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "executor/spi.h"
#include "ingest.h"
#include "positions.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_relation.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/timestamp.h"

/* (window, Kafka partition): its first offset is in streamcube.window_offsets */
typedef struct ScFirstKey
{
	int64		start;
	int32		partition;
} ScFirstKey;

/*
 * What the receiver knows of one window, committed: active or sealed, its
 * partition, and for a sealed window the offsets below which every message
 * of it is in it (sealed_upto).  Forgotten whenever the cube's table
 * changes (a window sealed, detached, dropped).
 */
typedef struct ScWindowEntry
{
	int64		start;			/* hash key */
	bool		sealed;
	Oid			relid;
	uint64		locked_batch;	/* batch whose transaction holds its lock */
	int			nupto;
	int32	   *upto_partitions;
	int64	   *upto_offsets;
} ScWindowEntry;

/* A window that could not be created, and why. */
typedef struct ScBadWindow
{
	int64		start;
	char		error[256];
} ScBadWindow;

/*
 * Most windows one batch locks (and writes): a lock each, and COPY's locks
 * on their indexes, all held to the commit.  A batch whose messages spread
 * over more (a backlog across a year of windows) ends before the first
 * message of one more window; the rest waits for the next batch, in order.
 * Well under max_locks_per_transaction's default share of the lock table.
 */
#define SC_BATCH_MAX_LOCKED_WINDOWS 64

/* JSON nested deeper than this is a bad message (pg_parse_json recurses). */
#define SC_MAX_JSON_DEPTH 256

struct ScIngest
{
	ScCube	   *cube;
	MemoryContext batch_cxt;	/* reset after every batch */
	MemoryContext cube_cxt;		/* what sc_ingest_set_cube() builds */

	/* COPY setup, built once */
	List	   *attnames;		/* String nodes: columns + _partition, _offset */
	AttrNumber *attnums;
	int			nattrs;
	List	   *line_attnames;	/* the same in the order of a line's fields */
	int		   *line_pos;		/* per column: its field in a line */
	int		   *line_col;		/* per field of a line: its column */
	int			npayload;		/* columns the payload fills (not metadata) */
	int			csv_time_field; /* the time column's field of a CSV record; -1 */
	Oid		   *meta_base;		/* per column: base type of a metadata column */
	int			doc_index;		/* the jsonb column of the whole document; -1 */
	StringInfoData meta_buf;	/* a metadata value being built */
	StringInfoData hex_buf;		/* a bytea value's hex form */
	List	   *copy_options;
	bool	   *json_column;	/* column type is json or jsonb */
	int			max_pathlen;
	bool	  **match;			/* [level][column] key-path prefix matches */

	/* windows known from the catalog (committed), ScWindowEntry */
	HTAB	   *windows;
	ScWindowEntry *last_window; /* the entry sc_need_window() gave last */
	MemoryContext windows_cxt;	/* their sealed_upto arrays */
	uint64		batch_no;		/* counts transactions that use windows */
	bool		peeking;		/* sc_peek_missing_windows() is running */
	uint64		nlocked_batch;	/* the transaction nlocked counts for */
	int			nlocked;		/* windows it locked */
	int64	   *pending_windows;	/* created in the current transaction */
	int			npending;
	int			maxpending;
	int64	   *missing;		/* windows met by batches, not created yet */
	int			nmissing;
	int			maxmissing;
	HTAB	   *bad_windows;	/* ScBadWindow: windows that cannot be created */
	HTAB	   *firsts;			/* ScFirstKey recorded in window_offsets */
	ScFirstKey *firsts_pending;	/* recorded by the current transaction */
	int			nfirsts_pending;
	int			maxfirsts_pending;

	/* buffers kept from batch to batch, so the hot path allocates little */
	StringInfoData scratch;		/* a CSV time field */
	StringInfoData strval;		/* the JSON lexer's de-escaped strings */
	char	  **json_values;
	bool	   *json_present;
	const char **json_capture_start;
	int		   *json_capture_depth;
	int			maxbatch;		/* capacity of the per-message arrays */

	/* the flat-JSON fast path (see sc_json_flat_line) */
	bool		json_flat;		/* every column is a top-level, non-JSON key */
	int		   *name_len;
	const char **flat_value;	/* per column: value bytes, NULL = null/absent */
	int		   *flat_len;
	bool	   *flat_present;

	/* the current batch */
	StringInfoData lines;
	int		   *line_start;		/* nlines + 1 entries */
	int		   *line_msg;		/* message index of each line */
	int			nlines;
	ScKafkaMessage *messages;
	char	  **bad_error;		/* per message; NULL when fine */
	char	   *fate;			/* per message: 'T' tombstone or 'R' re-read, skipped */
	int64	   *line_window;	/* per line: its window */
	int64	   *line_ts;		/* per line: its time value, parsed */
	int64		last_ts;		/* the time value of the message just parsed */

	/* the direct path (JSON): input functions of the columns, by cube column */
	bool		direct_ready;
	FmgrInfo   *in_func;
	Oid		   *in_ioparam;
	MemoryContext direct_cxt;	/* values of the rows not written yet */
	bool	   *line_late;		/* per line: into a sealed window */
	int			parse_mark;		/* ing->lines.len before the message being parsed */

	SPIPlanPtr	dead_letter_plan;
};

/* The COPY data source; COPY's callback takes no user pointer. */
static struct
{
	const char *data;
	int			len;
	int			pos;
}			copy_source;

static int
sc_copy_read(void *outbuf, int minread, int maxread)
{
	int			n = Min(maxread, copy_source.len - copy_source.pos);

	memcpy(outbuf, copy_source.data + copy_source.pos, n);
	copy_source.pos += n;
	return n;
}

/* ----------------------------------------------------------------
 * Setup
 * ----------------------------------------------------------------
 */
void
sc_ingest_set_cube(ScIngest *ing, ScCube *cube)
{
	MemoryContext old;

	if (ing->cube_cxt == NULL)
		ing->cube_cxt = AllocSetContextCreate(TopMemoryContext, "streamcube ingest setup",
											  ALLOCSET_SMALL_SIZES);
	else
		MemoryContextReset(ing->cube_cxt);
	old = MemoryContextSwitchTo(ing->cube_cxt);

	ing->cube = cube;
	ing->attnames = NIL;
	ing->nattrs = cube->ncolumns + 2;
	ing->attnums = palloc(sizeof(AttrNumber) * ing->nattrs);
	ing->json_column = palloc0(sizeof(bool) * Max(cube->ncolumns, 1));
	ing->max_pathlen = 1;
	for (int c = 0; c < cube->ncolumns; c++)
	{
		ing->attnames = lappend(ing->attnames, makeString(pstrdup(cube->columns[c].name)));
		ing->attnums[c] = get_attnum(cube->relid, cube->columns[c].name);
		ing->json_column[c] = getBaseType(cube->columns[c].type) == JSONOID ||
			getBaseType(cube->columns[c].type) == JSONBOID;
		ing->max_pathlen = Max(ing->max_pathlen, cube->columns[c].pathlen);
	}
	ing->attnames = lappend(ing->attnames, makeString(pstrdup("_partition")));
	ing->attnames = lappend(ing->attnames, makeString(pstrdup("_offset")));
	ing->attnums[cube->ncolumns] = get_attnum(cube->relid, "_partition");
	ing->attnums[cube->ncolumns + 1] = get_attnum(cube->relid, "_offset");

	/*
	 * The fields of a line: a JSON cube writes every column in table order
	 * (metadata columns in their place); a CSV line is the record, which
	 * fills the payload columns, followed by the metadata columns.
	 */
	ing->line_pos = palloc(sizeof(int) * Max(cube->ncolumns, 1));
	ing->meta_base = palloc0(sizeof(Oid) * Max(cube->ncolumns, 1));
	ing->npayload = 0;
	ing->doc_index = -1;
	for (int c = 0; c < cube->ncolumns; c++)
	{
		if (cube->columns[c].meta == SC_META_NONE)
			ing->line_pos[c] = ing->npayload++;
		if (cube->columns[c].meta != SC_META_NONE)
			ing->meta_base[c] = getBaseType(cube->columns[c].type);
		if (cube->columns[c].meta == SC_META_VALUE && cube->columns[c].type == JSONBOID &&
			cube->format != SC_FORMAT_CSV)
			ing->doc_index = c;
	}
	{
		int			next = ing->npayload;

		for (int c = 0; c < cube->ncolumns; c++)
			if (cube->format != SC_FORMAT_CSV)
				ing->line_pos[c] = c;
			else if (cube->columns[c].meta != SC_META_NONE)
				ing->line_pos[c] = next++;
	}
	ing->line_col = palloc(sizeof(int) * Max(cube->ncolumns, 1));
	for (int c = 0; c < cube->ncolumns; c++)
		ing->line_col[ing->line_pos[c]] = c;
	ing->line_attnames = NIL;
	for (int f = 0; f < cube->ncolumns; f++)
		ing->line_attnames = lappend(ing->line_attnames, list_nth(ing->attnames, ing->line_col[f]));
	ing->line_attnames = lappend(ing->line_attnames, list_nth(ing->attnames, cube->ncolumns));
	ing->line_attnames = lappend(ing->line_attnames, list_nth(ing->attnames, cube->ncolumns + 1));
	ing->csv_time_field = cube->time_index >= 0 && cube->columns[cube->time_index].meta == SC_META_NONE
		? ing->line_pos[cube->time_index] : -1;

	ing->json_values = palloc0(sizeof(char *) * Max(cube->ncolumns, 1));
	ing->json_present = palloc0(sizeof(bool) * Max(cube->ncolumns, 1));
	ing->json_capture_start = palloc0(sizeof(char *) * Max(cube->ncolumns, 1));
	ing->json_capture_depth = palloc0(sizeof(int) * Max(cube->ncolumns, 1));

	ing->name_len = palloc(sizeof(int) * Max(cube->ncolumns, 1));
	ing->flat_value = palloc0(sizeof(char *) * Max(cube->ncolumns, 1));
	ing->flat_len = palloc0(sizeof(int) * Max(cube->ncolumns, 1));
	ing->flat_present = palloc0(sizeof(bool) * Max(cube->ncolumns, 1));
	ing->json_flat = true;
	for (int c = 0; c < cube->ncolumns; c++)
	{
		if (cube->columns[c].meta != SC_META_NONE)
		{
			ing->name_len[c] = -1;	/* matches no key */
			continue;
		}
		ing->name_len[c] = strlen(cube->columns[c].path[0]);
		if (cube->columns[c].pathlen != 1 || ing->json_column[c])
			ing->json_flat = false;
	}

	ing->match = palloc(sizeof(bool *) * (ing->max_pathlen + 1));
	for (int l = 0; l <= ing->max_pathlen; l++)
		ing->match[l] = palloc0(sizeof(bool) * Max(cube->ncolumns, 1));

	ing->copy_options = cube->format == SC_FORMAT_CSV ? sc_cube_copy_options(cube) : NIL;
	ing->direct_ready = false;	/* input functions: looked up again when needed */
	MemoryContextSwitchTo(old);
}

ScIngest *
sc_ingest_create(ScCube *cube)
{
	ScIngest   *ing = MemoryContextAllocZero(TopMemoryContext, sizeof(ScIngest));
	HASHCTL		ctl;

	/* A large first block survives resets: batches reuse it, no page faults. */
	ing->batch_cxt = AllocSetContextCreate(TopMemoryContext, "streamcube batch",
										   8 * 1024 * 1024, 8 * 1024 * 1024,
										   8 * 1024 * 1024);
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		initStringInfo(&ing->lines);
		initStringInfo(&ing->scratch);
		initStringInfo(&ing->meta_buf);
		initStringInfo(&ing->hex_buf);
		initStringInfo(&ing->strval);
		MemoryContextSwitchTo(old);
	}
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(int64);
	ctl.entrysize = sizeof(ScWindowEntry);
	ing->windows = hash_create("streamcube windows", 64, &ctl, HASH_ELEM | HASH_BLOBS);
	ing->windows_cxt = AllocSetContextCreate(TopMemoryContext, "streamcube windows",
											 ALLOCSET_SMALL_SIZES);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(ScFirstKey);
	ctl.entrysize = sizeof(ScFirstKey);
	ing->firsts = hash_create("streamcube first offsets", 64, &ctl, HASH_ELEM | HASH_BLOBS);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(int64);
	ctl.entrysize = sizeof(ScBadWindow);
	ing->bad_windows = hash_create("streamcube bad windows", 16, &ctl, HASH_ELEM | HASH_BLOBS);
	ing->maxmissing = 16;
	ing->missing = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * ing->maxmissing);
	ing->maxfirsts_pending = 64;
	ing->firsts_pending = MemoryContextAlloc(TopMemoryContext,
											 sizeof(ScFirstKey) * ing->maxfirsts_pending);
	ing->maxpending = 16;
	ing->pending_windows = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * ing->maxpending);
	sc_ingest_set_cube(ing, cube);

	if (check_enable_rls(cube->relid, InvalidOid, true) == RLS_ENABLED)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cube %s has row-level security enabled for its owner", cube->qualified),
				 errdetail("Receivers write with COPY, which row-level security does not allow."),
				 errhint("Disable FORCE ROW LEVEL SECURITY on the cube's table, or let the owner bypass it.")));
	return ing;
}

/* ----------------------------------------------------------------
 * Windows
 * ----------------------------------------------------------------
 */
/* Errors that a message's content can cause; anything else aborts the batch. */
static bool
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
static ErrorData *
sc_try_subtransaction(void (*work) (void *), void *arg)
{
	ErrorData  *edata = sc_try(work, arg);

	if (edata != NULL && !sc_is_data_error(edata))
		ReThrowError(edata);
	return edata;
}

typedef struct ScWindowWork
{
	ScIngest   *ing;
	int64		window;
	bool		created;
	ScWindowState state;
} ScWindowWork;

static void
sc_window_work(void *arg)
{
	ScWindowWork *w = arg;

	w->created = sc_segment_ensure(w->ing->cube, w->window);
	SPI_connect();
	if (!sc_segment_state(w->ing->cube, w->window, &w->state, w->ing->windows_cxt))
		elog(ERROR, "window of cube %s vanished while it was created", w->ing->cube->qualified);
	SPI_finish();
}

/* Outcomes of sc_need_window() other than an error text or NULL. */
static const char sc_window_missing[] = "window not created yet";
static const char sc_window_busy[] = "window is being sealed";

static bool
sc_window_pending(ScIngest *ing, int64 window)
{
	for (int i = 0; i < ing->npending; i++)
		if (ing->pending_windows[i] == window)
			return true;
	return false;
}

/* Windows a batch met that do not exist yet: created after it commits. */
static void
sc_window_note_missing(ScIngest *ing, int64 window)
{
	for (int i = 0; i < ing->nmissing; i++)
		if (ing->missing[i] == window)
			return;
	if (ing->nmissing == ing->maxmissing)
	{
		ing->maxmissing *= 2;
		ing->missing = repalloc(ing->missing, sizeof(int64) * ing->maxmissing);
	}
	ing->missing[ing->nmissing++] = window;
}

/* Is this relation still a partition of the cube? */
static bool
sc_window_attached(ScIngest *ing, Oid relid)
{
	return SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)) &&
		get_rel_relispartition(relid) &&
		get_partition_parent(relid, true) == ing->cube->relid;
}

/*
 * The window a message goes to, in *entry (NULL for a window created in
 * this transaction: active, and locked by us already).  Returns NULL when
 * the message may go on, sc_window_missing or sc_window_busy when it must
 * wait for the next batch, or an error text that makes the message bad.
 *
 * A batch creates no window (batch == true): DDL in the batch's
 * transaction would let a concurrent query see the batch's positions but
 * not yet the new partition with its rows (ATTACH takes only SHARE UPDATE
 * EXCLUSIVE on the cube, and its invalidation is sent after the commit
 * becomes visible).  The batch stops before the first message of an
 * unknown window; the receiver creates the windows in a transaction of
 * their own (sc_ingest_create_windows) and the message goes on in the next
 * batch.  There, each window is created in a subtransaction: a time value
 * whose window cannot be created makes its message bad, not the batch.
 *
 * A window's partition is locked ROW EXCLUSIVE once per batch, without
 * waiting: a seal holds a SHARE lock on an active window while it copies,
 * and messages for it wait until the seal is done (then they are late); a
 * compaction holds one on sealed windows while it merges them, and their
 * late rows wait until the new partition is in place.
 */
static const char *
sc_need_window(ScIngest *ing, int64 window, bool batch, ScWindowEntry **entry)
{
	ScWindowWork work = {.ing = ing, .window = window};
	ErrorData  *edata;
	ScWindowEntry *e;
	ScBadWindow *bad;
	bool		found;

	*entry = NULL;
	/* Messages come in runs of one window: most need no hash lookup. */
	if (ing->last_window != NULL && ing->last_window->start == window)
		e = ing->last_window, found = true;
	else
		e = hash_search(ing->windows, &window, HASH_FIND, &found);
	if (!found)
	{
		if (sc_window_pending(ing, window))
			return NULL;
		if (window < MIN_TIMESTAMP || window >= END_TIMESTAMP - ing->cube->width)
			return "time value is outside the range of timestamps streamcube can partition";
		bad = hash_search(ing->bad_windows, &window, HASH_FIND, &found);
		if (found)
			return pstrdup(bad->error);

		if (batch)
		{
			SPI_connect();
			found = sc_segment_state(ing->cube, window, &work.state, ing->windows_cxt);
			SPI_finish();
			/* A window whose partition was detached is made anew. */
			if (!found || !sc_window_attached(ing, work.state.relid))
			{
				sc_window_note_missing(ing, window);
				return sc_window_missing;
			}
		}
		else
		{
			edata = sc_try_subtransaction(sc_window_work, &work);
			if (edata != NULL)
			{
				bad = hash_search(ing->bad_windows, &window, HASH_ENTER, NULL);
				snprintf(bad->error, sizeof(bad->error),
						 "could not create the window of this time value: %s", edata->message);
				return pstrdup(bad->error);
			}
			if (work.created)
			{
				if (ing->npending == ing->maxpending)
				{
					ing->maxpending *= 2;
					ing->pending_windows = repalloc(ing->pending_windows, sizeof(int64) * ing->maxpending);
				}
				ing->pending_windows[ing->npending++] = window;
				return NULL;
			}
		}
		e = hash_search(ing->windows, &window, HASH_ENTER, NULL);
		e->sealed = work.state.sealed;
		e->relid = work.state.relid;
		e->locked_batch = 0;
		e->nupto = work.state.nupto;
		e->upto_partitions = work.state.upto_partitions;
		e->upto_offsets = work.state.upto_offsets;
	}
	*entry = e;
	ing->last_window = e;
	if (e->locked_batch == ing->batch_no || ing->peeking)
		return NULL;
	if (ing->nlocked_batch != ing->batch_no)
	{
		ing->nlocked_batch = ing->batch_no;
		ing->nlocked = 0;
	}
	/* Bounded locks per batch: messages spread over a year of windows wait their turn. */
	if (batch && ing->nlocked >= SC_BATCH_MAX_LOCKED_WINDOWS)
		return sc_window_busy;

	if (!ConditionalLockRelationOid(e->relid, RowExclusiveLock))
		return sc_window_busy;
	/* Taking the lock took in invalidations: is it still our partition? */
	if (!sc_window_attached(ing, e->relid))
	{
		UnlockRelationOid(e->relid, RowExclusiveLock);
		hash_search(ing->windows, &window, HASH_REMOVE, NULL);
		ing->last_window = NULL;
		*entry = NULL;
		return sc_window_busy;
	}
	e->locked_batch = ing->batch_no;
	ing->nlocked++;
	return NULL;
}

/* How many windows the batches met that do not exist yet. */
int
sc_ingest_missing_windows(ScIngest *ing)
{
	return ing->nmissing;
}

/*
 * Create the windows the last batches met, at most
 * streamcube.batch_max_windows of them, in the caller's transaction (its
 * own, not a batch's).  One that cannot be created is remembered with the
 * reason, which its messages then get as their dead letter's error.
 */
void
sc_ingest_create_windows(ScIngest *ing)
{
	int			n = Min(ing->nmissing, sc_batch_max_windows);
	ScWindowEntry *e;

	ing->batch_no++;
	for (int i = 0; i < n; i++)
		(void) sc_need_window(ing, ing->missing[i], false, &e);
	memmove(ing->missing, ing->missing + n, sizeof(int64) * (ing->nmissing - n));
	ing->nmissing -= n;
}

/* sealed_upto of a sealed window for one Kafka partition (0: none). */
static int64
sc_window_upto(const ScWindowEntry *e, int32 partition)
{
	for (int i = 0; i < e->nupto; i++)
		if (e->upto_partitions[i] == partition)
			return e->upto_offsets[i];
	return 0;
}

/* Create the window of `now` and the next one; call inside a transaction. */
void
sc_ingest_prepare_windows(ScIngest *ing, int64 now)
{
	int64		w = sc_window_start(ing->cube, now);
	ScWindowEntry *e;
	const char *error;

	ing->batch_no++;
	if ((error = sc_need_window(ing, w, false, &e)) == sc_window_busy)
		error = NULL;
	if (error == NULL && (error = sc_need_window(ing, w + ing->cube->width, false, &e)) == sc_window_busy)
		error = NULL;
	if (error != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("could not create the current windows of cube %s: %s",
						ing->cube->qualified, error)));
}

/*
 * The cube's table changed (a window sealed, detached or dropped, say):
 * read every window's state again before using it.
 */
void
sc_ingest_forget_windows(ScIngest *ing)
{
	HASH_SEQ_STATUS seq;
	void	   *entry;

	ing->last_window = NULL;
	hash_seq_init(&seq, ing->windows);
	while ((entry = hash_seq_search(&seq)) != NULL)
		hash_search(ing->windows, entry, HASH_REMOVE, NULL);
	hash_seq_init(&seq, ing->firsts);
	while ((entry = hash_seq_search(&seq)) != NULL)
		hash_search(ing->firsts, entry, HASH_REMOVE, NULL);
	hash_seq_init(&seq, ing->bad_windows);
	while ((entry = hash_seq_search(&seq)) != NULL)
		hash_search(ing->bad_windows, entry, HASH_REMOVE, NULL);
	MemoryContextReset(ing->windows_cxt);
}

/*
 * After COMMIT, what the batch created and recorded is known; after an
 * abort, not.
 */
void
sc_ingest_end_batch(ScIngest *ing, bool committed)
{
	if (committed)
	{
		for (int i = 0; i < ing->nfirsts_pending; i++)
			hash_search(ing->firsts, &ing->firsts_pending[i], HASH_ENTER, NULL);
		/* new windows: read their state when next needed */
	}
	ing->npending = 0;
	ing->nfirsts_pending = 0;
	MemoryContextReset(ing->batch_cxt);
}

/* ----------------------------------------------------------------
 * Message to COPY line: text format escaping
 * ----------------------------------------------------------------
 */
static void
sc_append_text_bytes(StringInfo out, const char *value, size_t len)
{
	const char *start = value;
	const char *end = value + len;
	const char *p;

	for (p = value; p < end; p++)
	{
		const char *esc = NULL;

		switch (*p)
		{
			case '\\':
				esc = "\\\\";
				break;
			case '\t':
				esc = "\\t";
				break;
			case '\n':
				esc = "\\n";
				break;
			case '\r':
				esc = "\\r";
				break;
			default:
				continue;
		}
		appendBinaryStringInfo(out, start, p - start);
		appendStringInfoString(out, esc);
		start = p + 1;
	}
	appendBinaryStringInfo(out, start, p - start);
}

static inline void
sc_append_text_value(StringInfo out, const char *value)
{
	sc_append_text_bytes(out, value, strlen(value));
}

/* Append "<sep>partition<sep>offset\n", the two columns every line ends with. */
static inline void
sc_append_position(StringInfo out, char sep, const ScKafkaMessage *m)
{
	char		buf[48];
	int			len = 0;

	buf[len++] = sep;
	len += pg_ltoa(m->partition, buf + len);
	buf[len++] = sep;
	len += pg_lltoa(m->offset, buf + len);
	buf[len++] = '\n';
	appendBinaryStringInfo(out, buf, len);
}

/* ----------------------------------------------------------------
 * Message metadata as values (option "fields": {"kafka": ...})
 * ----------------------------------------------------------------
 */

/* A value in a CSV line, quoted when COPY could read it otherwise. */
static void
sc_append_csv_value(ScIngest *ing, StringInfo out, const char *p, size_t len)
{
	ScCube	   *cube = ing->cube;
	char		quote = cube->csv_quote;
	bool		quoted = len == strlen(cube->csv_null) && memcmp(p, cube->csv_null, len) == 0;

	for (size_t i = 0; i < len && !quoted; i++)
		quoted = p[i] == cube->csv_delimiter || p[i] == quote || p[i] == '\n' ||
			p[i] == '\r' || p[i] == '\\';
	if (!quoted)
	{
		appendBinaryStringInfo(out, p, len);
		return;
	}
	appendStringInfoChar(out, quote);
	for (size_t i = 0; i < len; i++)
	{
		if (p[i] == quote)
			appendStringInfoChar(out, quote);
		appendStringInfoChar(out, p[i]);
	}
	appendStringInfoChar(out, quote);
}

/* Values longer than this are bad messages: their line could not be built. */
#define SC_MAX_META_VALUE ((size_t) (MaxAllocSize / 4))

/*
 * One value of a line, in the cube's format; into bytea as its hex form.
 * In a CSV line every metadata value goes through sc_append_csv_value(),
 * so none can be read as the null string or split the line.
 */
static bool
sc_append_value_bytes(ScIngest *ing, StringInfo out, const char *p, size_t len, bool bytea,
					  char **error)
{
	static const char hex[] = "0123456789abcdef";
	bool		csv = ing->cube->format == SC_FORMAT_CSV;
	StringInfo	hexbuf = &ing->hex_buf;

	if (len > SC_MAX_META_VALUE)
	{
		*error = psprintf("a metadata value of %zu bytes is too large for a row", len);
		return false;
	}
	if (!bytea)
	{
		if (csv)
			sc_append_csv_value(ing, out, p, len);
		else
			sc_append_text_bytes(out, p, len);
		return true;
	}

	/* bytea's hex input; COPY's text format needs the backslash doubled. */
	resetStringInfo(hexbuf);
	appendStringInfoString(hexbuf, csv ? "\\x" : "\\\\x");
	enlargeStringInfo(hexbuf, (int) (len * 2));
	for (size_t i = 0; i < len; i++)
	{
		hexbuf->data[hexbuf->len++] = hex[(unsigned char) p[i] >> 4];
		hexbuf->data[hexbuf->len++] = hex[(unsigned char) p[i] & 0xf];
	}
	hexbuf->data[hexbuf->len] = '\0';
	if (csv)
		sc_append_csv_value(ing, out, hexbuf->data, hexbuf->len);
	else
		appendBinaryStringInfo(out, hexbuf->data, hexbuf->len);
	return true;
}

static inline void
sc_append_null(ScIngest *ing, StringInfo out)
{
	if (ing->cube->format == SC_FORMAT_CSV)
		appendStringInfoString(out, ing->cube->csv_null);
	else
		appendBinaryStringInfo(out, "\\N", 2);
}

/* A short value (a time, a number, a word): quoted in CSV if need be. */
static inline void
sc_append_short(ScIngest *ing, StringInfo out, const char *value)
{
	if (ing->cube->format == SC_FORMAT_CSV)
		sc_append_csv_value(ing, out, value, strlen(value));
	else
		appendStringInfoString(out, value);
}

/* Bytes as a JSON string; a NUL becomes \u0000, which jsonb refuses. */
static void
sc_append_json_string(StringInfo out, const char *p, size_t len)
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
static bool
sc_kafka_time(ScIngest *ing, const ScKafkaMessage *m, int64 *ts, char **error)
{
	if (m->timestamp < 0)
	{
		*error = psprintf("time column \"%s\" takes the Kafka timestamp, and the message has none",
						  ing->cube->columns[ing->cube->time_index].name);
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

/*
 * Append the value column c takes from the message's metadata: what the
 * column's input function (COPY's, or the direct path's) then reads.
 * False, with *error, when the message cannot give it (headers librdkafka
 * cannot parse, a value too large).
 */
static bool
sc_append_meta(ScIngest *ing, StringInfo out, int c, const ScKafkaMessage *m, char **error)
{
	ScColumn   *col = &ing->cube->columns[c];
	StringInfo	buf = &ing->meta_buf;
	bool		bytea = ing->meta_base[c] == BYTEAOID;

	switch (col->meta)
	{
		case SC_META_NONE:
			break;
		case SC_META_KEY:
			if (m->key == NULL)
				sc_append_null(ing, out);
			else
				return sc_append_value_bytes(ing, out, m->key, m->key_len, bytea, error);
			break;
		case SC_META_VALUE:
			return sc_append_value_bytes(ing, out, m->payload, m->len, bytea, error);
		case SC_META_TIMESTAMP:
			if (m->timestamp < 0 || m->timestamp > SC_KAFKA_MS_MAX)
				sc_append_null(ing, out);
			else if (ing->meta_base[c] == INT8OID)
			{
				char		digits[MAXINT8LEN + 1];

				pg_lltoa(m->timestamp, digits);
				sc_append_short(ing, out, digits);
			}
			else
			{
				struct pg_tm tm;
				fsec_t		fsec;
				char		text[64];

				/* ISO 8601, read the same under every DateStyle; UTC */
				if (timestamp2tm(sc_kafka_usecs(m->timestamp), NULL, &tm, &fsec, NULL, NULL) != 0)
					sc_append_null(ing, out);
				else
				{
					snprintf(text, sizeof(text), "%04d-%02d-%02d %02d:%02d:%02d.%06d%s",
							 tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min,
							 tm.tm_sec, (int) fsec,
							 ing->meta_base[c] == TIMESTAMPTZOID ? "+00" : "");
					sc_append_short(ing, out, text);
				}
			}
			break;
		case SC_META_TIMESTAMP_TYPE:
			if (m->timestamp_type == 'C')
				sc_append_short(ing, out, "CreateTime");
			else if (m->timestamp_type == 'L')
				sc_append_short(ing, out, "LogAppendTime");
			else
				sc_append_null(ing, out);
			break;
		case SC_META_HEADER:
			{
				const char *name;
				const char *value;
				const char *found = NULL;
				size_t		size;
				size_t		found_size = 0;
				int			i;
				int			got;

				/* The last value of the name, as Kafka's lastHeader() */
				for (i = 0; (got = sc_kafka_message_header(m, i, &name, &value, &size)) > 0; i++)
					if (strcmp(name, col->header) == 0)
						found = value, found_size = size;
				if (got < 0)
				{
					*error = "the message's headers cannot be read (librdkafka could not parse them)";
					return false;
				}
				if (found == NULL)
					sc_append_null(ing, out);
				else
					return sc_append_value_bytes(ing, out, found, found_size, bytea, error);
			}
			break;
		case SC_META_HEADERS:
			{
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
					sc_append_json_string(buf, name, strlen(name));
					appendStringInfoString(buf, ": ");
					if (value == NULL)
						appendStringInfoString(buf, "null");
					else
						sc_append_json_string(buf, value, size);
				}
				if (got < 0)
				{
					*error = "the message's headers cannot be read (librdkafka could not parse them)";
					return false;
				}
				appendStringInfoChar(buf, '}');
				return sc_append_value_bytes(ing, out, buf->data, buf->len, false, error);
			}
	}
	return true;
}

/* ----------------------------------------------------------------
 * JSON
 * ----------------------------------------------------------------
 */
typedef struct ScJsonState
{
	ScIngest   *ing;
	JsonLexContext *lex;
	int			depth;			/* nesting of the current position */
	bool		not_object;
	int			field_level;	/* depth of the field whose value comes next */
	/* raw capture of nested values (objects, arrays), per column */
	const char **capture_start;
	int		   *capture_depth;
	char	  **values;			/* per column, NULL = JSON null or absent */
	bool	   *present;
} ScJsonState;

/* Does the field just named at this level hold the value of column c? */
static inline bool
sc_json_targets(ScJsonState *st, int level, int c)
{
	return level >= 1 && level <= st->ing->max_pathlen &&
		st->ing->match[level][c] && st->ing->cube->columns[c].pathlen == level;
}

static void
sc_json_begin_nested(ScJsonState *st)
{
	if (st->depth > 0 && st->field_level == st->depth)
	{
		for (int c = 0; c < st->ing->cube->ncolumns; c++)
			if (sc_json_targets(st, st->depth, c))
			{
				st->capture_start[c] = st->lex->token_start;
				st->capture_depth[c] = st->depth + 1;
			}
	}
	st->field_level = -1;
}

static void
sc_json_end_nested(ScJsonState *st)
{
	for (int c = 0; c < st->ing->cube->ncolumns; c++)
		if (st->capture_start[c] != NULL && st->capture_depth[c] == st->depth)
		{
			const char *end = st->lex->prev_token_terminator;

			st->values[c] = pnstrdup(st->capture_start[c], end - st->capture_start[c]);
			st->present[c] = true;
			st->capture_start[c] = NULL;
		}
}

static void
sc_json_object_start(void *state)
{
	ScJsonState *st = state;

	sc_json_begin_nested(st);
	st->depth++;
}

static void
sc_json_object_end(void *state)
{
	ScJsonState *st = state;

	sc_json_end_nested(st);
	st->depth--;
}

static void
sc_json_array_start(void *state)
{
	ScJsonState *st = state;

	if (st->depth == 0)
		st->not_object = true;
	sc_json_begin_nested(st);
	st->depth++;
}

static void
sc_json_field_start(void *state, char *fname, bool isnull)
{
	ScJsonState *st = state;
	ScIngest   *ing = st->ing;
	int			level = st->depth;

	st->field_level = level;
	if (level > ing->max_pathlen)
		return;
	for (int c = 0; c < ing->cube->ncolumns; c++)
	{
		ScColumn   *col = &ing->cube->columns[c];

		ing->match[level][c] = (level == 1 || ing->match[level - 1][c]) &&
			col->pathlen >= level && strcmp(col->path[level - 1], fname) == 0;
	}
}

static void
sc_json_scalar(void *state, char *token, JsonTokenType tokentype)
{
	ScJsonState *st = state;

	if (st->depth == 0)
	{
		st->not_object = true;
		return;
	}
	if (st->field_level != st->depth)
		return;					/* an array element */
	st->field_level = -1;

	for (int c = 0; c < st->ing->cube->ncolumns; c++)
	{
		if (!sc_json_targets(st, st->depth, c))
			continue;
		st->present[c] = true;
		if (tokentype == JSON_TOKEN_NULL)
			st->values[c] = NULL;
		else if (tokentype == JSON_TOKEN_STRING && st->ing->json_column[c])
		{
			StringInfoData quoted;

			initStringInfo(&quoted);
			escape_json(&quoted, token);
			st->values[c] = quoted.data;
		}
		else
			st->values[c] = token;
	}
}

/*
 * The fast path for the most common message: a flat JSON object whose
 * strings have no escapes.  It reads the message in place, allocates
 * nothing, and finds keys by length and bytes.  It accepts only what
 * PostgreSQL's JSON parser accepts and gives the same values; anything it
 * does not handle (escapes, nested values, control characters, odd
 * numbers, invalid JSON) returns SC_FLAT_FALLBACK, and the message goes
 * through pg_parse_json, which also words the errors.
 */
typedef enum ScFlatResult
{
	SC_FLAT_OK,
	SC_FLAT_FALLBACK
} ScFlatResult;

/* One key and value of a flat object, pointing into the message. */
typedef enum ScFlatKind
{
	SC_FLAT_STRING,				/* value: the bytes between the quotes */
	SC_FLAT_NUMBER,
	SC_FLAT_TRUE,
	SC_FLAT_FALSE,
	SC_FLAT_NULL
} ScFlatKind;

typedef struct ScFlatPair
{
	const char *key;
	int			key_len;
	const char *value;
	int			value_len;
	ScFlatKind	kind;
} ScFlatPair;

/* Where a scan of a flat object is; see sc_flat_next(). */
typedef struct ScFlatIter
{
	const char *p;
	const char *end;
	bool		first;
} ScFlatIter;

typedef enum ScFlatStep
{
	SC_FLAT_PAIR,				/* *pair is the next key and value */
	SC_FLAT_END,				/* the object ended, and the text with it */
	SC_FLAT_NOT_FLAT			/* anything else: pg_parse_json's business */
} ScFlatStep;

static inline const char *
sc_skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/* A JSON number per RFC 8259; returns its end or NULL. */
static inline const char *
sc_scan_number(const char *p, const char *end)
{
	if (p < end && *p == '-')
		p++;
	if (p >= end)
		return NULL;
	if (*p == '0')
		p++;
	else if (*p >= '1' && *p <= '9')
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	else
		return NULL;
	if (p < end && *p == '.')
	{
		p++;
		if (p >= end || *p < '0' || *p > '9')
			return NULL;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < end && (*p == 'e' || *p == 'E'))
	{
		p++;
		if (p < end && (*p == '+' || *p == '-'))
			p++;
		if (p >= end || *p < '0' || *p > '9')
			return NULL;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	}
	return p;
}

/* A string without escapes or control characters; returns its closing quote. */
static inline const char *
sc_scan_plain_string(const char *p, const char *end)
{
	for (; p < end; p++)
	{
		unsigned char ch = (unsigned char) *p;

		if (ch == '"')
			return p;
		if (ch == '\\' || ch < 0x20)
			return NULL;
	}
	return NULL;
}

/*
 * The next key and value of a flat object: scalar values only, strings
 * without escapes or control characters.  Shared by the column scan and the
 * direct jsonb build, so both accept exactly the same texts.
 */
static inline ScFlatStep
sc_flat_next(ScFlatIter *it, ScFlatPair *pair)
{
	const char *p = it->p;
	const char *end = it->end;
	const char *key_end;
	const char *value_end;

	if (it->first)
	{
		it->first = false;
		p = sc_skip_ws(p, end);
		if (p >= end || *p != '{')
			return SC_FLAT_NOT_FLAT;
		p = sc_skip_ws(p + 1, end);
		if (p < end && *p == '}')
			return sc_skip_ws(p + 1, end) == end ? SC_FLAT_END : SC_FLAT_NOT_FLAT;
	}
	else
	{
		/* after a value: at its ',' or '}' */
		if (*p == '}')
			return sc_skip_ws(p + 1, end) == end ? SC_FLAT_END : SC_FLAT_NOT_FLAT;
		p = sc_skip_ws(p + 1, end);
	}

	/* "key" : */
	if (p >= end || *p != '"')
		return SC_FLAT_NOT_FLAT;
	pair->key = p + 1;
	if ((key_end = sc_scan_plain_string(pair->key, end)) == NULL)
		return SC_FLAT_NOT_FLAT;
	pair->key_len = key_end - pair->key;
	p = sc_skip_ws(key_end + 1, end);
	if (p >= end || *p != ':')
		return SC_FLAT_NOT_FLAT;
	p = sc_skip_ws(p + 1, end);
	if (p >= end)
		return SC_FLAT_NOT_FLAT;

	/* value */
	pair->value = p;
	if (*p == '"')
	{
		pair->value = p + 1;
		if ((value_end = sc_scan_plain_string(pair->value, end)) == NULL)
			return SC_FLAT_NOT_FLAT;
		pair->kind = SC_FLAT_STRING;
		p = value_end + 1;
	}
	else if (*p == '-' || (*p >= '0' && *p <= '9'))
	{
		if ((value_end = sc_scan_number(p, end)) == NULL)
			return SC_FLAT_NOT_FLAT;
		pair->kind = SC_FLAT_NUMBER;
		p = value_end;
	}
	else if (end - p >= 4 && memcmp(p, "true", 4) == 0)
		pair->kind = SC_FLAT_TRUE, value_end = p += 4;
	else if (end - p >= 5 && memcmp(p, "false", 5) == 0)
		pair->kind = SC_FLAT_FALSE, value_end = p += 5;
	else if (end - p >= 4 && memcmp(p, "null", 4) == 0)
		pair->kind = SC_FLAT_NULL, value_end = p += 4;
	else
		return SC_FLAT_NOT_FLAT;	/* nested, or not JSON */
	pair->value_len = value_end - pair->value;

	/* after the value: a delimiter, so "truex" or "1x" is no value */
	p = sc_skip_ws(p, end);
	if (p >= end || (*p != ',' && *p != '}'))
		return SC_FLAT_NOT_FLAT;
	it->p = p;
	return SC_FLAT_PAIR;
}

static ScFlatResult
sc_json_flat_scan(ScIngest *ing, const char *p, const char *end)
{
	ScCube	   *cube = ing->cube;
	ScFlatIter	it = {p, end, true};
	ScFlatPair	pair;
	ScFlatStep	step;

	memset(ing->flat_present, 0, sizeof(bool) * cube->ncolumns);
	memset(ing->flat_value, 0, sizeof(char *) * cube->ncolumns);
	while ((step = sc_flat_next(&it, &pair)) == SC_FLAT_PAIR)
		for (int c = 0; c < cube->ncolumns; c++)
			if (ing->name_len[c] == pair.key_len &&
				memcmp(cube->columns[c].path[0], pair.key, pair.key_len) == 0)
			{
				ing->flat_present[c] = true;
				ing->flat_value[c] = pair.kind == SC_FLAT_NULL ? NULL : pair.value;
				ing->flat_len[c] = pair.value_len;
			}
	return step == SC_FLAT_END ? SC_FLAT_OK : SC_FLAT_FALLBACK;
}

/*
 * The jsonb of a document column (format jsonb), built from a flat object
 * without PostgreSQL's JSON parser: what jsonb_in() would give, byte for
 * byte (keys sorted by length then bytes, a repeated key's last value
 * kept, numbers through numeric_in), in about a third of its time.  False
 * for anything else, which jsonb_in() then reads (and words the errors of).
 * The caller has checked the encoding of the text.
 */
static int
sc_jsonb_pair_cmp(const JsonbPair *a, const JsonbPair *b)
{
	if (a->key.val.string.len != b->key.val.string.len)
		return a->key.val.string.len > b->key.val.string.len ? 1 : -1;
	return memcmp(a->key.val.string.val, b->key.val.string.val, a->key.val.string.len);
}

static int
sc_jsonb_pair_order_cmp(const void *a, const void *b)
{
	int			r = sc_jsonb_pair_cmp(a, b);

	if (r == 0)
		r = ((const JsonbPair *) a)->order > ((const JsonbPair *) b)->order ? -1 : 1;
	return r;
}

static bool
sc_flat_jsonb(ScIngest *ing, const char *p, Datum *result)
{
	size_t		len = strlen(p);
	ScFlatIter	it = {p, p + len, true};
	ScFlatPair	flat;
	ScFlatStep	step;
	JsonbValue	object;
	JsonbPair  *pairs;
	int			n = 0;
	int			max = 16;

	if (len > JENTRY_OFFLENMASK)
		return false;
	pairs = palloc(sizeof(JsonbPair) * max);
	while ((step = sc_flat_next(&it, &flat)) == SC_FLAT_PAIR)
	{
		JsonbPair  *pair;

		if (n == max)
			pairs = repalloc(pairs, sizeof(JsonbPair) * (max *= 2));
		pair = &pairs[n];
		pair->key.type = jbvString;
		pair->key.val.string.val = (char *) flat.key;
		pair->key.val.string.len = flat.key_len;
		pair->order = n++;
		switch (flat.kind)
		{
			case SC_FLAT_STRING:
				pair->value.type = jbvString;
				pair->value.val.string.val = (char *) flat.value;
				pair->value.val.string.len = flat.value_len;
				break;
			case SC_FLAT_NUMBER:
				resetStringInfo(&ing->meta_buf);
				appendBinaryStringInfo(&ing->meta_buf, flat.value, flat.value_len);
				pair->value.type = jbvNumeric;
				pair->value.val.numeric =
					DatumGetNumeric(DirectFunctionCall3(numeric_in, CStringGetDatum(ing->meta_buf.data),
														ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1)));
				break;
			case SC_FLAT_TRUE:
			case SC_FLAT_FALSE:
				pair->value.type = jbvBool;
				pair->value.val.boolean = flat.kind == SC_FLAT_TRUE;
				break;
			case SC_FLAT_NULL:
				pair->value.type = jbvNull;
				break;
		}
	}
	if (step != SC_FLAT_END)
		return false;

	/* Sorted as jsonb keeps them; of equal keys the later first, then kept. */
	if (n > 32)
		qsort(pairs, n, sizeof(JsonbPair), sc_jsonb_pair_order_cmp);
	else for (int i = 1; i < n; i++)
	{
		JsonbPair	x = pairs[i];
		int			j = i - 1;

		while (j >= 0 && sc_jsonb_pair_cmp(&pairs[j], &x) >= 0)
		{
			pairs[j + 1] = pairs[j];
			j--;
		}
		pairs[j + 1] = x;
	}
	if (n > 1)
	{
		int			kept = 1;

		for (int i = 1; i < n; i++)
			if (sc_jsonb_pair_cmp(&pairs[i], &pairs[kept - 1]) != 0)
				pairs[kept++] = pairs[i];
		n = kept;
	}
	object.type = jbvObject;
	object.val.object.nPairs = n;
	object.val.object.pairs = pairs;
	*result = JsonbPGetDatum(JsonbValueToJsonb(&object));
	return true;
}

/* The line from a successful flat scan; false for a bad message. */
static bool
sc_json_flat_line(ScIngest *ing, const ScKafkaMessage *m, StringInfo out, int64 *ts, char **error)
{
	ScCube	   *cube = ing->cube;
	int			t = cube->time_index;

	if (cube->columns[t].meta == SC_META_TIMESTAMP)
	{
		if (!sc_kafka_time(ing, m, ts, error))
			return false;
	}
	else if (ing->flat_value[t] == NULL)
	{
		*error = psprintf("time column \"%s\" is %s", cube->columns[t].name,
						  ing->flat_present[t] ? "null" : "missing");
		return false;
	}
	else
	{
		resetStringInfo(&ing->scratch);
		appendBinaryStringInfo(&ing->scratch, ing->flat_value[t], ing->flat_len[t]);
		if (!sc_parse_time(cube, ing->scratch.data, ts, error))
		{
			*error = psprintf("column \"%s\": %s", cube->columns[t].name, *error);
			return false;
		}
	}

	/* No escapes and no control characters: the bytes go to COPY as they are. */
	if (ing->npayload == cube->ncolumns)
	{
		/* No metadata columns: size the line once, then copy the values in. */
		int			need = cube->ncolumns;	/* the tabs */
		char	   *d;

		for (int c = 0; c < cube->ncolumns; c++)
			need += ing->flat_value[c] == NULL ? 2 : ing->flat_len[c];
		enlargeStringInfo(out, need);
		d = out->data + out->len;
		for (int c = 0; c < cube->ncolumns; c++)
		{
			if (c > 0)
				*d++ = '\t';
			if (ing->flat_value[c] == NULL)
			{
				memcpy(d, "\\N", 2);
				d += 2;
			}
			else
			{
				memcpy(d, ing->flat_value[c], ing->flat_len[c]);
				d += ing->flat_len[c];
			}
		}
		out->len = d - out->data;
		*d = '\0';
	}
	else
		for (int c = 0; c < cube->ncolumns; c++)
		{
			if (c > 0)
				appendStringInfoChar(out, '\t');
			if (cube->columns[c].meta != SC_META_NONE)
			{
				if (!sc_append_meta(ing, out, c, m, error))
					return false;
			}
			else if (ing->flat_value[c] == NULL)
				appendBinaryStringInfo(out, "\\N", 2);
			else
				appendBinaryStringInfo(out, ing->flat_value[c], ing->flat_len[c]);
		}
	sc_append_position(out, '\t', m);
	return true;
}

/*
 * Is the document nested deeper than SC_MAX_JSON_DEPTH?  pg_parse_json()
 * recurses once per level and would exhaust the stack; brackets inside
 * strings do not count.
 */
static bool
sc_json_too_deep(const char *p, size_t len)
{
	int			depth = 0;
	bool		in_string = false;

	for (size_t i = 0; i < len; i++)
	{
		char		ch = p[i];

		if (in_string)
		{
			if (ch == '\\')
				i++;
			else if (ch == '"')
				in_string = false;
		}
		else if (ch == '"')
			in_string = true;
		else if (ch == '{' || ch == '[')
		{
			if (++depth > SC_MAX_JSON_DEPTH)
				return true;
		}
		else if (ch == '}' || ch == ']')
			depth--;
	}
	return false;
}

/*
 * Parse one JSON message into a COPY text line.  Returns false with *error
 * set for a bad message; *ts receives the time value.
 */
static bool
sc_json_line(ScIngest *ing, const ScKafkaMessage *m, StringInfo out, int64 *ts, char **error)
{
	ScCube	   *cube = ing->cube;
	ScJsonState st;
	JsonLexContext lex;
	JsonSemAction sem;
	JsonParseErrorType res;
	const char *time_value;

	if (m->payload != NULL && ing->json_flat &&
		sc_json_flat_scan(ing, m->payload, m->payload + m->len) == SC_FLAT_OK)
		return sc_json_flat_line(ing, m, out, ts, error);

	memset(&st, 0, sizeof(st));
	st.ing = ing;
	st.field_level = -1;
	st.values = ing->json_values;
	st.present = ing->json_present;
	st.capture_start = ing->json_capture_start;
	st.capture_depth = ing->json_capture_depth;
	memset(st.values, 0, sizeof(char *) * cube->ncolumns);
	memset(st.present, 0, sizeof(bool) * cube->ncolumns);
	memset(st.capture_start, 0, sizeof(char *) * cube->ncolumns);

	/* What makeJsonLexContextCstringLen() does, without allocating. */
	memset(&lex, 0, sizeof(lex));
	lex.input = lex.token_terminator = lex.line_start = (char *) m->payload;
	lex.line_number = 1;
	lex.input_length = (int) m->len;
	lex.input_encoding = GetDatabaseEncoding();
	lex.strval = &ing->strval;
	st.lex = &lex;

	memset(&sem, 0, sizeof(sem));
	sem.semstate = &st;
	sem.object_start = sc_json_object_start;
	sem.object_end = sc_json_object_end;
	sem.array_start = sc_json_array_start;
	sem.array_end = sc_json_object_end;
	sem.object_field_start = sc_json_field_start;
	sem.scalar = sc_json_scalar;

	if (m->len == 0 || m->payload == NULL)
	{
		*error = "message is empty";
		return false;
	}
	if (sc_json_too_deep(m->payload, m->len))
	{
		*error = psprintf("JSON nested deeper than %d levels", SC_MAX_JSON_DEPTH);
		return false;
	}
	res = pg_parse_json(&lex, &sem);
	if (res != JSON_SUCCESS)
	{
		*error = psprintf("invalid JSON: %s", json_errdetail(res, &lex));
		return false;
	}
	if (st.not_object)
	{
		*error = "message is not a JSON object";
		return false;
	}

	time_value = st.values[cube->time_index];
	if (cube->columns[cube->time_index].meta == SC_META_TIMESTAMP)
	{
		if (!sc_kafka_time(ing, m, ts, error))
			return false;
	}
	else if (time_value == NULL)
	{
		*error = psprintf("time column \"%s\" is %s", cube->columns[cube->time_index].name,
						  st.present[cube->time_index] ? "null" : "missing");
		return false;
	}
	else if (!sc_parse_time(cube, time_value, ts, error))
	{
		*error = psprintf("column \"%s\": %s", cube->columns[cube->time_index].name, *error);
		return false;
	}

	for (int c = 0; c < cube->ncolumns; c++)
	{
		if (c > 0)
			appendStringInfoChar(out, '\t');
		if (cube->columns[c].meta != SC_META_NONE)
		{
			if (!sc_append_meta(ing, out, c, m, error))
				return false;
		}
		else if (st.values[c] == NULL)
			appendBinaryStringInfo(out, "\\N", 2);
		else
			sc_append_text_value(out, st.values[c]);
	}
	sc_append_position(out, '\t', m);
	return true;
}

/* ----------------------------------------------------------------
 * CSV
 * ----------------------------------------------------------------
 */

/* The metadata columns of a CSV line, after the record (if any). */
static bool
sc_append_csv_meta(ScIngest *ing, StringInfo out, const ScKafkaMessage *m, bool first,
				   char **error)
{
	ScCube	   *cube = ing->cube;

	for (int f = ing->npayload; f < cube->ncolumns; f++)
	{
		if (!first || f > 0)
			appendStringInfoChar(out, cube->csv_delimiter);
		if (!sc_append_meta(ing, out, ing->line_col[f], m, error))
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
sc_csv_line(ScIngest *ing, const ScKafkaMessage *m, StringInfo out, int64 *ts, char **error)
{
	ScCube	   *cube = ing->cube;
	const char *p = m->payload;
	size_t		len = m->len;
	char		delim = cube->csv_delimiter;
	char		quote = cube->csv_quote;
	int			field = 0;
	bool		in_quote = false;
	bool		quoted = false;
	StringInfo	time_value = &ing->scratch;

	if (ing->npayload == 0 && p != NULL)
	{
		/* Every column takes metadata: the record is not read at all. */
		if (!sc_kafka_time(ing, m, ts, error) ||
			!sc_append_csv_meta(ing, out, m, true, error))
			return false;
		sc_append_position(out, delim, m);
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

	resetStringInfo(time_value);

	/*
	 * Most records quote nothing: then fields end at delimiters, which
	 * memchr() finds many bytes at a time.
	 */
	if (memchr(p, quote, len) == NULL)
	{
		const char *f = p;
		const char *end = p + len;

		if (memchr(p, '\n', len) != NULL || memchr(p, '\r', len) != NULL)
		{
			*error = "message holds more than one CSV record (line break outside quotes)";
			return false;
		}
		for (;;)
		{
			const char *d = memchr(f, delim, end - f);
			const char *fend = d ? d : end;

			if (field == ing->csv_time_field)
				appendBinaryStringInfo(time_value, f, fend - f);
			if (d == NULL)
				break;
			field++;
			f = d + 1;
		}
		goto checked;
	}

	for (size_t i = 0; i < len; i++)
	{
		char		ch = p[i];

		if (in_quote)
		{
			if (ch == quote)
			{
				if (i + 1 < len && p[i + 1] == quote)
				{
					if (field == ing->csv_time_field)
						appendStringInfoChar(time_value, quote);
					i++;
				}
				else
					in_quote = false;
			}
			else if (field == ing->csv_time_field)
				appendStringInfoChar(time_value, ch);
			continue;
		}
		if (ch == delim)
			field++;
		else if (ch == quote)
		{
			in_quote = true;
			if (field == ing->csv_time_field)
				quoted = true;
		}
		else if (ch == '\n' || ch == '\r')
		{
			*error = "message holds more than one CSV record (line break outside quotes)";
			return false;
		}
		else if (field == ing->csv_time_field)
			appendStringInfoChar(time_value, ch);
	}
	if (in_quote)
	{
		*error = "unterminated quoted field in CSV message";
		return false;
	}
checked:
	if (field + 1 != ing->npayload)
	{
		*error = psprintf("CSV message has %d fields, cube %s expects %d",
						  field + 1, cube->qualified, ing->npayload);
		return false;
	}
	if (ing->csv_time_field < 0)
	{
		if (!sc_kafka_time(ing, m, ts, error))
			return false;
	}
	else if (!quoted && strcmp(time_value->data, cube->csv_null) == 0)
	{
		*error = psprintf("time column \"%s\" is null", cube->columns[cube->time_index].name);
		return false;
	}
	else if (!sc_parse_time(cube, time_value->data, ts, error))
	{
		*error = psprintf("column \"%s\": %s", cube->columns[cube->time_index].name, *error);
		return false;
	}

	appendBinaryStringInfo(out, p, len);
	if (!sc_append_csv_meta(ing, out, m, false, error))
		return false;
	sc_append_position(out, delim, m);
	return true;
}

/* ----------------------------------------------------------------
 * COPY with bisection
 * ----------------------------------------------------------------
 */

/*
 * A parse state holding the cube's table as the target of an INSERT of the
 * batch's columns, once the owner's privilege to do so is checked: what
 * COPY and the direct path both start from.
 */
static ParseState *
sc_insert_parsestate(ScIngest *ing, Relation rel)
{
	ParseState *pstate = make_parsestate(NULL);
	ParseNamespaceItem *nsitem;
	RangeTblEntry *rte;

	nsitem = addRangeTableEntryForRelation(pstate, rel, RowExclusiveLock, NULL, false, false);
	rte = nsitem->p_rte;
	rte->requiredPerms = ACL_INSERT;
	for (int a = 0; a < ing->nattrs; a++)
		rte->insertedCols = bms_add_member(rte->insertedCols,
										   ing->attnums[a] - FirstLowInvalidHeapAttributeNumber);
	ExecCheckRTPerms(pstate->p_rtable, true);
	return pstate;
}

static void
sc_copy_lines_run(ScIngest *ing, int lo, int hi)
{
	ScCube	   *cube = ing->cube;
	Relation	rel;
	ParseState *pstate;
	CopyFromState cstate;

	copy_source.data = ing->lines.data + ing->line_start[lo];
	copy_source.len = ing->line_start[hi] - ing->line_start[lo];
	copy_source.pos = 0;

	rel = table_open(cube->relid, RowExclusiveLock);
	pstate = sc_insert_parsestate(ing, rel);

	cstate = BeginCopyFrom(pstate, rel, NULL, NULL, false, sc_copy_read,
						   ing->line_attnames, ing->copy_options);
	CopyFrom(cstate);
	EndCopyFrom(cstate);
	free_parsestate(pstate);
	table_close(rel, NoLock);
}

/* ----------------------------------------------------------------
 * The direct path: rows formed here, no COPY round trip
 *
 * Lines into active windows are not handed to COPY: each line's fields
 * (COPY's text format as the JSON parsers wrote them, or the message's CSV
 * record, split with COPY's CSV rules) are split here, converted with each column's input function, or, for the
 * time column, taken from the value the receiver parsed already; the rows
 * are written per window partition (the receiver knows each row's window:
 * no routing) with table_multi_insert() and a bulk-insert state, their
 * indexes updated and their constraints checked as COPY does.  Errors read
 * as COPY's would (an error context naming the column and its value), so a
 * bad row is isolated and dead-lettered exactly as before.  Late rows into
 * sealed windows (their guard triggers) and partitions with triggers or
 * generated columns take the COPY path.
 * ----------------------------------------------------------------
 */
#define SC_DIRECT_FLUSH 1000
#define SC_DIRECT_MAX_VALUE_SHOWN 100	/* as COPY's error context */

typedef struct ScDirectTarget
{
	Oid			relid;
	Relation	rel;
	ResultRelInfo *rri;
	BulkInsertState bistate;
	AttrNumber *attno;			/* per cube column, + _partition, _offset */
	bool		check;			/* has constraints to check */
	TupleDesc	slot_desc;		/* the partition's columns, not reference-counted */
	TupleTableSlot **slots;
	int			nslots;
} ScDirectTarget;

typedef struct ScDirectContext
{
	const char *relname;
	int			line;
	const char *attname;
	const char *value;
} ScDirectContext;

static void
sc_direct_error_context(void *arg)
{
	ScDirectContext *c = arg;

	if (c->attname != NULL && c->value != NULL)
	{
		const char *v = c->value;
		int			len = strlen(v);

		if (len > SC_DIRECT_MAX_VALUE_SHOWN)
			v = psprintf("%.*s...", pg_mbcliplen(v, len, SC_DIRECT_MAX_VALUE_SHOWN), v);
		errcontext("COPY %s, line %d, column %s: \"%s\"", c->relname, c->line, c->attname, v);
	}
	else if (c->attname != NULL)
		errcontext("COPY %s, line %d, column %s: null input", c->relname, c->line, c->attname);
	else
		errcontext("COPY %s, line %d", c->relname, c->line);
}

/* Can rows of this partition be written directly? */
static bool
sc_direct_writable(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);

	return rel->trigdesc == NULL &&
		(desc->constr == NULL || !desc->constr->has_generated_stored) &&
		rel->rd_rel->relkind == RELKIND_RELATION;
}

/* The bytes a text-format field ends or escapes at: NUL, tab, newline, backslash. */
static const bool sc_split_stop[256] = {['\0'] = true, ['\t'] = true, ['\n'] = true, ['\\'] = true};

/*
 * Split a line (COPY text format: tab-separated, \N for NULL, backslash
 * escapes) into fields, in place in buf.  Returns the number of fields.
 */
static int
sc_direct_split(char *buf, char **fields, int maxfields)
{
	int			n = 0;
	char	   *in = buf;

	for (;;)
	{
		char	   *start = in;
		char	   *out = in;
		bool		is_null = in[0] == '\\' && in[1] == 'N' &&
			(in[2] == '\t' || in[2] == '\n' || in[2] == '\0');
		char		end;

		if (is_null)
			in += 2;
		else
		{
			/*
			 * Most fields escape nothing: skip to the end without copying.
			 * A table, not strcspn(): its set-up per call cost more than
			 * the few bytes of a field (5 % of a narrow row's CPU).
			 */
			while (!sc_split_stop[(unsigned char) *in])
				in++;
			out = in;
		}
		if (!is_null)
			while (*in != '\0' && *in != '\t' && *in != '\n')
			{
				if (*in == '\\' && in[1] != '\0')
				{
					in++;
					switch (*in)
					{
						case 't':
							*out++ = '\t';
							break;
						case 'n':
							*out++ = '\n';
							break;
						case 'r':
							*out++ = '\r';
							break;
						default:
							*out++ = *in;	/* \\ and anything else: the character */
							break;
					}
					in++;
				}
				else
					*out++ = *in++;
			}
		end = *in;				/* before the terminator may overwrite it */
		if (!is_null)
			*out = '\0';
		if (n < maxfields)
			fields[n] = is_null ? NULL : start;
		n++;
		if (end != '\t')
			return n;
		in++;
	}
}

/*
 * Split a CSV line (the message, then ",partition,offset") into fields, in
 * place, the way COPY's CSV mode does with the cube's delimiter, quote (the
 * escape too) and null string: a field equal to the null string and never
 * quoted is NULL; quoted parts may hold delimiters and doubled quotes.
 * The receiver checked the record already, so it is well formed.
 */
static int
sc_direct_split_csv(ScIngest *ing, char *buf, char **fields, int maxfields)
{
	ScCube	   *cube = ing->cube;
	char		delim = cube->csv_delimiter;
	char		quote = cube->csv_quote;
	const char *null_print = cube->csv_null;
	int			null_len = strlen(null_print);
	char	   *end = buf + strlen(buf);
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

static ScDirectTarget *
sc_direct_target(ScIngest *ing, List **targets, Oid relid, ResultRelInfo *root, EState *estate)
{
	ListCell   *lc;
	ScDirectTarget *t;

	foreach(lc, *targets)
		if (((ScDirectTarget *) lfirst(lc))->relid == relid)
			return lfirst(lc);

	t = palloc0(sizeof(ScDirectTarget));
	t->relid = relid;
	t->rel = table_open(relid, RowExclusiveLock);
	t->rri = makeNode(ResultRelInfo);
	InitResultRelInfo(t->rri, t->rel, 0, root, 0);
	if (t->rel->rd_rel->relhasindex)
		ExecOpenIndices(t->rri, false);
	t->bistate = GetBulkInsertState();
	t->check = RelationGetDescr(t->rel)->constr != NULL;
	t->attno = palloc(sizeof(AttrNumber) * ing->nattrs);
	for (int a = 0; a < ing->nattrs; a++)
		t->attno[a] = get_attnum(relid, strVal(list_nth(ing->attnames, a)));
	/*
	 * The slots' descriptor is a copy of the partition's: a slot made from
	 * the relcache's own pins it in the resource owner, and a batch makes
	 * up to SC_DIRECT_FLUSH slots per partition (3 % of a narrow row's CPU
	 * went to pinning and unpinning).  The copy lives as long as the slots.
	 */
	t->slot_desc = CreateTupleDescCopy(RelationGetDescr(t->rel));
	t->slots = palloc0(sizeof(TupleTableSlot *) * SC_DIRECT_FLUSH);	/* made as needed */
	*targets = lappend(*targets, t);
	return t;
}

/* Release what the targets hold; after a flush, or when nothing was written. */
static void
sc_direct_close(List *targets)
{
	ListCell   *lc;

	foreach(lc, targets)
	{
		ScDirectTarget *t = lfirst(lc);

		ExecCloseIndices(t->rri);
		FreeBulkInsertState(t->bistate);
		table_finish_bulk_insert(t->rel, 0);
		for (int i = 0; i < SC_DIRECT_FLUSH && t->slots[i] != NULL; i++)
			ExecDropSingleTupleTableSlot(t->slots[i]);
		FreeTupleDesc(t->slot_desc);
		table_close(t->rel, NoLock);
	}
}

/* Write a target's buffered rows, and their index entries. */
static void
sc_direct_flush(ScIngest *ing, ScDirectTarget *t, EState *estate)
{
	if (t->nslots == 0)
		return;
	table_multi_insert(t->rel, t->slots, t->nslots, estate->es_output_cid, 0, t->bistate);
	if (t->rri->ri_NumIndices > 0)
		for (int i = 0; i < t->nslots; i++)
		{
			List	   *recheck = ExecInsertIndexTuples(t->rri, t->slots[i], estate,
														false, false, NULL, NIL);

			list_free(recheck);
			ResetPerTupleExprContext(estate);
		}
	for (int i = 0; i < t->nslots; i++)
		ExecClearTuple(t->slots[i]);
	t->nslots = 0;
}

/* Look the columns' input functions up, once per cube. */
static void
sc_direct_prepare(ScIngest *ing, Relation parent)
{
	ScCube	   *cube = ing->cube;
	MemoryContext old = MemoryContextSwitchTo(ing->cube_cxt);

	ing->in_func = palloc0(sizeof(FmgrInfo) * Max(cube->ncolumns, 1));
	ing->in_ioparam = palloc0(sizeof(Oid) * Max(cube->ncolumns, 1));
	for (int c = 0; c < cube->ncolumns; c++)
	{
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(parent), ing->attnums[c] - 1);
		Oid			func;

		getTypeInputInfo(att->atttypid, &func, &ing->in_ioparam[c]);
		fmgr_info_cxt(func, &ing->in_func[c], ing->cube_cxt);
	}
	if (ing->direct_cxt == NULL)
		ing->direct_cxt = AllocSetContextCreate(TopMemoryContext, "streamcube direct rows",
												ALLOCSET_DEFAULT_SIZES);
	ing->direct_ready = true;
	MemoryContextSwitchTo(old);
}

/*
 * Write lines [lo, hi) directly; false (nothing written) when one of them
 * must take the COPY path.
 */
static bool
sc_direct_lines_run(ScIngest *ing, int lo, int hi)
{
	ScCube	   *cube = ing->cube;
	Relation	parent;
	ParseState *pstate;
	EState	   *estate;
	ResultRelInfo *root;
	List	   *targets = NIL;
	ListCell   *lc;
	char	  **fields = palloc(sizeof(char *) * (ing->nattrs + 1));
	StringInfoData buf;
	ScDirectContext ctx = {0};
	ErrorContextCallback errcb;
	int			t_index = cube->time_index;
	bool		time_fast;
	ScDirectTarget *t = NULL;	/* of the current run of one window */

	/* Lines into sealed windows go through COPY, their guard triggers too. */
	for (int l = lo; l < hi; l++)
		if (ing->line_late[l])
			return false;

	parent = table_open(cube->relid, RowExclusiveLock);
	pstate = sc_insert_parsestate(ing, parent);

	/* Every target partition must allow it; find them first. */
	estate = CreateExecutorState();
	ExecInitRangeTable(estate, pstate->p_rtable);
	estate->es_output_cid = GetCurrentCommandId(true);
	root = makeNode(ResultRelInfo);
	InitResultRelInfo(root, parent, 1, NULL, 0);
	for (int l = lo; l < hi; l++)
	{
		ScWindowEntry *e;
		ScDirectTarget *t = NULL;

		/* A batch holds runs of one window: look each run up once. */
		if (l > lo && ing->line_window[l] == ing->line_window[l - 1])
			continue;
		e = hash_search(ing->windows, &ing->line_window[l], HASH_FIND, NULL);
		if (e != NULL && !e->sealed && OidIsValid(e->relid))
			t = sc_direct_target(ing, &targets, e->relid, root, estate);
		if (t == NULL || !sc_direct_writable(t->rel))
		{
			sc_direct_close(targets);
			FreeExecutorState(estate);
			free_parsestate(pstate);
			table_close(parent, NoLock);
			return false;
		}
	}
	if (!ing->direct_ready)
		sc_direct_prepare(ing, parent);
	{
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(parent), ing->attnums[t_index] - 1);

		time_fast = att->atttypmod < 0 &&
			(att->atttypid == TIMESTAMPTZOID || att->atttypid == TIMESTAMPOID);
	}

	ctx.relname = RelationGetRelationName(parent);
	errcb.callback = sc_direct_error_context;
	errcb.arg = &ctx;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;
	initStringInfo(&buf);

	for (int l = lo; l < hi; l++)
	{
		ScKafkaMessage *m = &ing->messages[ing->line_msg[l]];
		TupleTableSlot *slot;
		MemoryContext old;
		int			nf;

		if (l == lo || ing->line_window[l] != ing->line_window[l - 1])
		{
			ScWindowEntry *e = hash_search(ing->windows, &ing->line_window[l], HASH_FIND, NULL);

			t = NULL;
			foreach(lc, targets)
				if (((ScDirectTarget *) lfirst(lc))->relid == e->relid)
					t = lfirst(lc);
		}
		if (t->slots[t->nslots] == NULL)
			t->slots[t->nslots] = MakeSingleTupleTableSlot(t->slot_desc,
														   table_slot_callbacks(t->rel));
		slot = t->slots[t->nslots];
		ExecClearTuple(slot);
		for (int a = 0; a < slot->tts_tupleDescriptor->natts; a++)
		{
			slot->tts_values[a] = (Datum) 0;
			slot->tts_isnull[a] = true;
		}

		ctx.line = l - lo + 1;
		ctx.attname = NULL;
		ctx.value = NULL;
		resetStringInfo(&buf);
		appendBinaryStringInfo(&buf, ing->lines.data + ing->line_start[l],
							   ing->line_start[l + 1] - ing->line_start[l]);
		pg_verify_mbstr(GetDatabaseEncoding(), buf.data, buf.len, false);
		nf = cube->format == SC_FORMAT_CSV
			? sc_direct_split_csv(ing, buf.data, fields, ing->nattrs + 1)
			: sc_direct_split(buf.data, fields, ing->nattrs + 1);
		if (nf != ing->nattrs)
			ereport(ERROR,
					(errcode(ERRCODE_BAD_COPY_FILE_FORMAT),
					 errmsg(nf < ing->nattrs ? "missing data for column \"%s\"" : "extra data after last expected column",
							nf < ing->nattrs ? strVal(list_nth(ing->line_attnames, nf)) : "")));

		old = MemoryContextSwitchTo(ing->direct_cxt);
		for (int c = 0; c < cube->ncolumns; c++)
		{
			AttrNumber at = t->attno[c];
			char	   *field = fields[ing->line_pos[c]];

			if (at <= 0)
				continue;
			if (c == t_index && time_fast && field != NULL)
			{
				slot->tts_values[at - 1] = Int64GetDatum(ing->line_ts[l]);
				slot->tts_isnull[at - 1] = false;
				continue;
			}
			ctx.attname = cube->columns[c].name;
			ctx.value = field;
			if (c == ing->doc_index && field != NULL &&
				sc_flat_jsonb(ing, field, &slot->tts_values[at - 1]))
			{
				slot->tts_isnull[at - 1] = false;
				continue;
			}
			/* NULL too, as COPY does: a domain may refuse it */
			slot->tts_values[at - 1] =
				InputFunctionCall(&ing->in_func[c], field, ing->in_ioparam[c],
								  TupleDescAttr(slot->tts_tupleDescriptor, at - 1)->atttypmod);
			slot->tts_isnull[at - 1] = field == NULL;
		}
		ctx.attname = NULL;
		ctx.value = NULL;
		if (t->attno[cube->ncolumns] > 0)
		{
			slot->tts_values[t->attno[cube->ncolumns] - 1] = Int32GetDatum(m->partition);
			slot->tts_isnull[t->attno[cube->ncolumns] - 1] = false;
		}
		if (t->attno[cube->ncolumns + 1] > 0)
		{
			slot->tts_values[t->attno[cube->ncolumns + 1] - 1] = Int64GetDatum(m->offset);
			slot->tts_isnull[t->attno[cube->ncolumns + 1] - 1] = false;
		}
		MemoryContextSwitchTo(old);
		ExecStoreVirtualTuple(slot);
		if (t->check)
			ExecConstraints(t->rri, slot, estate);
		if (++t->nslots == SC_DIRECT_FLUSH)
		{
			/* Values of every target live in one context: write them all. */
			foreach(lc, targets)
				sc_direct_flush(ing, lfirst(lc), estate);
			MemoryContextReset(ing->direct_cxt);
		}
	}
	foreach(lc, targets)
		sc_direct_flush(ing, lfirst(lc), estate);
	MemoryContextReset(ing->direct_cxt);
	error_context_stack = errcb.previous;

	sc_direct_close(targets);
	FreeExecutorState(estate);
	free_parsestate(pstate);
	table_close(parent, NoLock);
	pfree(buf.data);
	return true;
}

typedef struct ScCopyWork
{
	ScIngest   *ing;
	int			lo;
	int			hi;
} ScCopyWork;

static void
sc_copy_work(void *arg)
{
	ScCopyWork *w = arg;

	if (sc_direct_insert && sc_direct_lines_run(w->ing, w->lo, w->hi))
		return;
	sc_copy_lines_run(w->ing, w->lo, w->hi);
}

/* Try lines [lo, hi) in a subtransaction; on a data error return it. */
static ErrorData *
sc_copy_lines_try(ScIngest *ing, int lo, int hi)
{
	ScCopyWork	work = {ing, lo, hi};

	return sc_try_subtransaction(sc_copy_work, &work);
}

/*
 * Insert lines [lo, hi), isolating bad ones by bisection.  With stop_first
 * (policy "pause") the first bad line ends the work and its index is
 * returned; lines before it are inserted.  Returns -1 when no line stopped.
 */
static int
sc_copy_lines(ScIngest *ing, int lo, int hi, bool stop_first)
{
	ErrorData  *edata;
	int			mid;
	int			r;

	if (lo >= hi)
		return -1;
	edata = sc_copy_lines_try(ing, lo, hi);
	if (edata == NULL)
		return -1;
	if (hi - lo == 1)
	{
		int			msg = ing->line_msg[lo];

		const char *where = edata->context ? strstr(edata->context, ", column ") : NULL;

		/* COPY's context names our batch's line; keep only the column part. */
		ing->bad_error[msg] = where
			? psprintf("%s (%s)", edata->message, where + 2)
			: pstrdup(edata->message);
		return stop_first ? lo : -1;
	}
	FreeErrorData(edata);
	mid = lo + (hi - lo) / 2;
	r = sc_copy_lines(ing, lo, mid, stop_first);
	if (r >= 0)
		return r;
	return sc_copy_lines(ing, mid, hi, stop_first);
}

/* ----------------------------------------------------------------
 * Dead letters
 * ----------------------------------------------------------------
 */
/*
 * An error text valid in the database encoding: it may quote the bad
 * message, so each byte that does not fit becomes "?".
 */
static const char *
sc_valid_text(const char *text)
{
	int			encoding = GetDatabaseEncoding();
	int			len = strlen(text);
	StringInfoData out;

	if (pg_verifymbstr(text, len, true))
		return text;
	initStringInfo(&out);
	while (len > 0)
	{
		int			ok = pg_encoding_verifymbstr(encoding, text, len);

		appendBinaryStringInfo(&out, text, ok);
		text += ok;
		len -= ok;
		if (len > 0)
		{
			appendStringInfoChar(&out, '?');
			text++;
			len--;
		}
	}
	return out.data;
}

/* A bytea datum of len bytes, NULL when data is. */
static Datum
sc_bytea(const char *data, size_t len, char *isnull)
{
	bytea	   *b;

	*isnull = data == NULL ? 'n' : ' ';
	if (data == NULL)
		return (Datum) 0;
	b = palloc(VARHDRSZ + len);
	SET_VARSIZE(b, VARHDRSZ + len);
	memcpy(VARDATA(b), data, len);
	return PointerGetDatum(b);
}

static void
sc_dead_letter(ScIngest *ing, const ScKafkaMessage *m, const char *error)
{
	Datum		values[7];
	char		nulls[8] = "       ";
	ScPrivilegeSave save;
	int			ret;

	if (ing->dead_letter_plan == NULL)
	{
		Oid			types[7] = {INT4OID, OIDOID, INT4OID, INT8OID, BYTEAOID, TEXTOID, BYTEAOID};

		sc_catalog_enter(&save);
		ing->dead_letter_plan =
			SPI_prepare("INSERT INTO streamcube.dead_letters "
						"(cube_id, cube, partition, \"offset\", payload, error, key) "
						"VALUES ($1, $2, $3, $4, $5, $6, $7) "
						"ON CONFLICT (cube_id, partition, \"offset\") DO UPDATE "
						"SET payload = EXCLUDED.payload, error = EXCLUDED.error, "
						"    key = EXCLUDED.key, recorded_at = now()",
						7, types);
		sc_catalog_leave(&save);
		if (ing->dead_letter_plan == NULL)
			elog(ERROR, "could not prepare the dead-letter insert: %s",
				 SPI_result_code_string(SPI_result));
		SPI_keepplan(ing->dead_letter_plan);
	}

	values[0] = Int32GetDatum(ing->cube->cube_id);
	values[1] = ObjectIdGetDatum(ing->cube->relid);
	values[2] = Int32GetDatum(m->partition);
	values[3] = Int64GetDatum(m->offset);
	values[4] = sc_bytea(m->payload, m->len, &nulls[4]);
	values[5] = CStringGetTextDatum(sc_valid_text(error));
	values[6] = sc_bytea(m->key, m->key_len, &nulls[6]);

	sc_catalog_enter(&save);
	ret = SPI_execute_plan(ing->dead_letter_plan, values, nulls, false, 0);
	sc_catalog_leave(&save);
	if (ret != SPI_OK_INSERT)
		elog(ERROR, "could not record a dead letter: %s", SPI_result_code_string(ret));
}

/* ----------------------------------------------------------------
 * The batch
 * ----------------------------------------------------------------
 */

/* An interval of microseconds as PostgreSQL writes it ("1 day 02:00:00"). */
static char *
sc_usecs_text(int64 usecs)
{
	Interval	iv = {.time = usecs % USECS_PER_DAY, .day = (int32) (usecs / USECS_PER_DAY)};

	return DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(&iv)));
}


/*
 * Why a message cannot be a row, before COPY sees it: NULL when it can,
 * sc_window_missing or sc_window_busy when it must wait for the next batch.  On
 * success its COPY line is appended to ing->lines.
 */
static const char *
sc_message_line(ScIngest *ing, const ScKafkaMessage *m, int64 now, int64 *window, char *kind)
{
	ScCube	   *cube = ing->cube;
	ScWindowEntry *e;
	int64		ts;
	char	   *error = NULL;
	const char *why;
	bool		ok;

	if (m->payload == NULL)
		return "tombstone: the message has no value (a NULL payload)";
	ok = cube->format == SC_FORMAT_CSV
		? sc_csv_line(ing, m, &ing->lines, &ts, &error)
		: sc_json_line(ing, m, &ing->lines, &ts, &error);
	if (!ok)
		return error;
	if (cube->reject_early >= 0 && ts > now && ts - now > cube->reject_early)
		return psprintf("time value is more than early_rejection_period (%s) after now",
						sc_usecs_text(cube->reject_early));
	if (cube->reject_late >= 0 && ts < now && now - ts > cube->reject_late)
		return psprintf("time value is more than late_rejection_period (%s) before now",
						sc_usecs_text(cube->reject_late));
	ing->last_ts = ts;
	*window = sc_window_start(cube, ts);
	if (cube->retention >= 0 && *window + cube->width <= now - cube->retention)
		return psprintf("time value is older than the cube's retention (%s): its window is dropped",
						sc_usecs_text(cube->retention));
	if ((why = sc_need_window(ing, *window, true, &e)) != NULL)
		return why;
	*kind = 'a';
	if (e != NULL && e->sealed)
	{
		/* Read again after a crash: it is in the sealed window already. */
		if (m->offset < sc_window_upto(e, m->partition))
			*kind = 'R';
		else if (cube->late_dead_letter)
			return psprintf("late: window %s of the cube is sealed (option late = dead_letter)",
							sc_bound_literal(cube, *window));
		else
			*kind = 'l';
	}
	return NULL;
}

/*
 * A batch stopped before the first message of a window that does not
 * exist yet.  Note the other missing windows of the messages kept back
 * too, up to streamcube.batch_max_windows, so that the receiver creates
 * them in one transaction rather than one window per batch: a backlog
 * spread over many windows (a message an hour over months) would otherwise
 * cost a batch and a window-creation transaction per window.  Nothing is
 * ingested or locked here; a message that cannot be read is left for its
 * batch to judge.
 */
static void
sc_peek_missing_windows(ScIngest *ing, ScKafkaMessage *messages, int from, int n, int64 now)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			mark = ing->lines.len;

	ing->peeking = true;
	for (volatile int j = from; j < n && ing->nmissing < sc_batch_max_windows; j++)
	{
		PG_TRY();
		{
			int64		window = 0;
			char		kind = 0;

			(void) sc_message_line(ing, &messages[j], now, &window, &kind);
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(cxt);
			edata = CopyErrorData();
			if (!sc_is_data_error(edata))
			{
				ing->peeking = false;
				PG_RE_THROW();
			}
			FlushErrorState();
			FreeErrorData(edata);
		}
		PG_END_TRY();
		ing->lines.len = mark;
		ing->lines.data[mark] = '\0';
	}
	ing->peeking = false;
}

/*
 * Turn messages [from, n) into COPY lines or reasons why not, until a
 * message under policy "pause" is bad or the window budget is used up;
 * returns the index where parsing stopped (n when it got through).  An
 * error raised while one message is parsed makes that message bad, unless
 * it is not about the data: then it aborts the batch.
 */
static int
sc_parse_messages(ScIngest *ing, ScKafkaMessage *messages, int n, int from,
				  int64 now, bool pause, int *skip_index, bool *deferred)
{
	ScCube	   *cube = ing->cube;
	MemoryContext cxt = CurrentMemoryContext;
	volatile int i = from;
	volatile bool stopped = false;
	volatile bool missing = false;

	/* Never return from inside PG_TRY: the handler must be popped first. */
	while (i < n && !stopped)
	{
		PG_TRY();
		{
			for (; i < n; i++)
			{
				ScKafkaMessage *m = &messages[i];
				int			mark = ing->parse_mark = ing->lines.len;
				const char *error;
				int64		window = 0;
				char		kind = 0;

				if (m->partition == cube->skip_partition && m->offset == cube->skip_offset)
				{
					ing->bad_error[i] = psprintf("skipped by streamcube_resume(skip_bad_message => true): %s",
												 cube->skip_error ? cube->skip_error : "bad message");
					*skip_index = i;
					continue;
				}
				if (m->payload == NULL && cube->skip_tombstones)
				{
					ing->fate[i] = 'T';
					continue;
				}
				error = sc_message_line(ing, m, now, &window, &kind);
				if (error == sc_window_missing || error == sc_window_busy)
				{
					ing->lines.len = mark;
					ing->lines.data[mark] = '\0';
					*deferred = true;
					stopped = true;
					missing = error == sc_window_missing;
					break;
				}
				if (error != NULL || kind == 'R')
				{
					ing->lines.len = mark;
					ing->lines.data[mark] = '\0';
					if (kind == 'R')
					{
						ing->fate[i] = 'R';
						continue;
					}
					ing->bad_error[i] = (char *) error;
					if (pause)
					{
						stopped = true;
						break;
					}
					continue;
				}
				ing->line_start[ing->nlines] = mark;
				ing->line_msg[ing->nlines] = i;
				ing->line_window[ing->nlines] = window;
				ing->line_ts[ing->nlines] = ing->last_ts;
				ing->line_late[ing->nlines] = kind == 'l';
				ing->nlines++;
			}
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(cxt);
			edata = CopyErrorData();
			if (!sc_is_data_error(edata))
				PG_RE_THROW();
			FlushErrorState();
			/* drop the message's partial line */
			ing->lines.len = ing->parse_mark;
			ing->lines.data[ing->lines.len] = '\0';
			ing->bad_error[i] = psprintf("%s", edata->message);
			FreeErrorData(edata);
			if (pause)
				stopped = true;
			else
				i++;
		}
		PG_END_TRY();
	}
	if (missing)
		sc_peek_missing_windows(ing, messages, i + 1, n, now);
	return i;
}

/*
 * What the rows of a batch tell the catalog, in the batch's transaction:
 * a late row appended to a sealed window moves that window's sealed_upto
 * past it (so it is never appended twice); the first row of a Kafka
 * partition in an active window records its offset in window_offsets
 * (where a seal finds the partition's next checkpoint).
 */
static void
sc_record_windows(ScIngest *ing, int nlines_done)
{
	ScFirstKey	prev = {0, -1}; /* the last key known to be recorded */

	for (int l = 0; l < nlines_done; l++)
	{
		const ScKafkaMessage *m = &ing->messages[ing->line_msg[l]];
		ScFirstKey	key = {ing->line_window[l], m->partition};
		bool		seen;

		if (ing->bad_error[ing->line_msg[l]] != NULL)
			continue;
		if (ing->line_late[l])
		{
			/* lines are in offset order per partition: the last one wins */
			bool		last = true;

			for (int k = l + 1; k < nlines_done && last; k++)
				if (ing->line_late[k] && ing->line_window[k] == key.start &&
					ing->messages[ing->line_msg[k]].partition == key.partition &&
					ing->bad_error[ing->line_msg[k]] == NULL)
					last = false;
			if (last)
				sc_positions_late(ing->cube->cube_id, key.start, key.partition, m->offset + 1);
			continue;
		}
		/* lines come in runs of one window and partition */
		if (key.start == prev.start && key.partition == prev.partition)
			continue;
		prev = key;
		hash_search(ing->firsts, &key, HASH_FIND, &seen);
		for (int k = 0; k < ing->nfirsts_pending && !seen; k++)
			seen = ing->firsts_pending[k].start == key.start &&
				ing->firsts_pending[k].partition == key.partition;
		if (seen)
			continue;
		sc_positions_first_offset(ing->cube->cube_id, key.start, key.partition, m->offset);
		if (ing->nfirsts_pending == ing->maxfirsts_pending)
		{
			ing->maxfirsts_pending *= 2;
			ing->firsts_pending = repalloc(ing->firsts_pending,
										   sizeof(ScFirstKey) * ing->maxfirsts_pending);
		}
		ing->firsts_pending[ing->nfirsts_pending++] = key;
	}
}

/*
 * Ingest messages [0, n) inside the caller's transaction (with an active
 * snapshot).  The caller advances positions for messages [0, outcome->cut);
 * the messages after the cut were not looked at for good.
 */
void
sc_ingest_batch(ScIngest *ing, ScKafkaMessage *messages, int n, ScBatchOutcome *outcome)
{
	ScCube	   *cube = ing->cube;
	MemoryContext old = MemoryContextSwitchTo(ing->batch_cxt);
	bool		pause = cube->bad_policy == SC_BAD_PAUSE;
	bool		deferred = false;
	int			skip_index = -1;
	int			stop;
	int			first_bad;
	volatile int stop_line = -1;

	memset(outcome, 0, sizeof(*outcome));
	ing->messages = messages;
	if (n > ing->maxbatch)
	{
		if (ing->maxbatch > 0)
		{
			pfree(ing->bad_error);
			pfree(ing->fate);
			pfree(ing->line_start);
			pfree(ing->line_msg);
			pfree(ing->line_window);
			pfree(ing->line_ts);
			pfree(ing->line_late);
		}
		ing->bad_error = MemoryContextAlloc(TopMemoryContext, sizeof(char *) * n);
		ing->fate = MemoryContextAlloc(TopMemoryContext, sizeof(char) * n);
		ing->line_window = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * n);
		ing->line_ts = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * n);
		ing->line_late = MemoryContextAlloc(TopMemoryContext, sizeof(bool) * n);
		ing->line_start = MemoryContextAlloc(TopMemoryContext, sizeof(int) * (n + 1));
		ing->line_msg = MemoryContextAlloc(TopMemoryContext, sizeof(int) * n);
		ing->maxbatch = n;
	}
	memset(ing->bad_error, 0, sizeof(char *) * n);
	memset(ing->fate, 0, sizeof(char) * n);
	ing->batch_no++;
	ing->nlines = 0;
	resetStringInfo(&ing->lines);

	SPI_connect();

	/* Parse every message into a line, or into a reason why not. */
	stop = sc_parse_messages(ing, messages, n, 0, sc_cube_time(cube, GetCurrentTimestamp()), pause,
							 &skip_index, &deferred);
	ing->line_start[ing->nlines] = ing->lines.len;
	first_bad = (stop < n && !deferred) ? stop : n;

	/* Write the lines (late ones into sealed windows); isolate what COPY rejects. */
	sc_seal_writes_allowed = true;
	PG_TRY();
	{
		stop_line = sc_copy_lines(ing, 0, ing->nlines, pause);
	}
	PG_FINALLY();
	{
		sc_seal_writes_allowed = false;
	}
	PG_END_TRY();
	if (stop_line >= 0)
		first_bad = Min(first_bad, ing->line_msg[stop_line]);
	outcome->cut = Min(first_bad, stop);
	/* The skip is done only if the skipped message is inside the cut. */
	outcome->skip_used = skip_index >= 0 && skip_index < outcome->cut;
	for (int l = 0; l < (stop_line >= 0 ? stop_line : ing->nlines); l++)
		if (ing->bad_error[ing->line_msg[l]] == NULL)
			outcome->rows++;

	sc_record_windows(ing, stop_line >= 0 ? stop_line : ing->nlines);

	/* Dead letters for what is bad before the cut; what was skipped. */
	for (int i = 0; i < outcome->cut; i++)
	{
		if (ing->bad_error[i] != NULL)
		{
			sc_dead_letter(ing, &messages[i], ing->bad_error[i]);
			outcome->dead_letters++;
		}
		else if (ing->fate[i] == 'T')
			outcome->tombstones_skipped++;
		else if (ing->fate[i] == 'R')
			outcome->replayed_skipped++;
	}
	if (pause && first_bad < n && first_bad == outcome->cut)
	{
		outcome->paused = true;
		outcome->bad_partition = messages[first_bad].partition;
		outcome->bad_offset = messages[first_bad].offset;
		/* Outlives the transaction: the receiver reports it after COMMIT. */
		outcome->bad_error = MemoryContextStrdup(TopMemoryContext, ing->bad_error[first_bad]);
	}

	SPI_finish();
	MemoryContextSwitchTo(old);
}
