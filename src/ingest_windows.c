/*-------------------------------------------------------------------------
 *
 * ingest_windows.c
 *		The receiver's cache of its cube's windows: which partition each is,
 *		sealed or not, whether the current batch holds its lock; the windows
 *		batches met that must be created; the first offsets recorded.
 *
 * It holds what is committed only, and is forgotten whenever the cube's
 * table changes (a window sealed, detached, dropped): sealing, compaction
 * and retention never have to tell the receiver more than "look again".
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "catalog/partition.h"
#include "ingest_internal.h"
#include "positions.h"
#include "rollup.h"
#include "storage/lmgr.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

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

/* Set up the cache; once per receiver. */
void
sc_windows_init(ScIngest *ing)
{
	ScWindowCache *wc = &ing->windows;
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(int64);
	ctl.entrysize = sizeof(ScWindowEntry);
	wc->entries = hash_create("streamcube windows", 64, &ctl, HASH_ELEM | HASH_BLOBS);
	wc->cxt = AllocSetContextCreate(TopMemoryContext, "streamcube windows",
									ALLOCSET_SMALL_SIZES);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(ScFirstKey);
	ctl.entrysize = sizeof(ScFirstKey);
	wc->firsts = hash_create("streamcube first offsets", 64, &ctl, HASH_ELEM | HASH_BLOBS);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(int64);
	ctl.entrysize = sizeof(ScBadWindow);
	wc->bad = hash_create("streamcube bad windows", 16, &ctl, HASH_ELEM | HASH_BLOBS);
	wc->maxmissing = 16;
	wc->missing = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * wc->maxmissing);
	wc->maxfirsts_pending = 64;
	wc->firsts_pending = MemoryContextAlloc(TopMemoryContext,
											sizeof(ScFirstKey) * wc->maxfirsts_pending);
	wc->maxpending = 16;
	wc->pending = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * wc->maxpending);
}

/* A new transaction uses the windows: no lock of theirs is held yet. */
void
sc_windows_begin(ScIngest *ing)
{
	ing->windows.batch_no++;
}

/* The committed state of a window the batch uses already (NULL: made in it). */
ScWindowEntry *
sc_window_find(ScIngest *ing, int64 window)
{
	return hash_search(ing->windows.entries, &window, HASH_FIND, NULL);
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
	/* The roll-ups get their partitions of it in the same transaction. */
	if (w->created)
		sc_rollup_windows_create(w->ing->cube, w->window, false);
	if (!sc_segment_state(w->ing->cube, w->window, &w->state, w->ing->windows.cxt))
		elog(ERROR, "window of cube %s vanished while it was created", w->ing->cube->qualified);
	SPI_finish();
}

/* Outcomes of sc_window_need() other than an error text or NULL. */
const char sc_window_missing[] = "window not created yet";
const char sc_window_busy[] = "window is being sealed";

static bool
sc_window_pending(ScIngest *ing, int64 window)
{
	for (int i = 0; i < ing->windows.npending; i++)
		if (ing->windows.pending[i] == window)
			return true;
	return false;
}

/* Windows a batch met that do not exist yet: created after it commits. */
static void
sc_window_note_missing(ScIngest *ing, int64 window)
{
	for (int i = 0; i < ing->windows.nmissing; i++)
		if (ing->windows.missing[i] == window)
			return;
	if (ing->windows.nmissing == ing->windows.maxmissing)
	{
		ing->windows.maxmissing *= 2;
		ing->windows.missing = repalloc(ing->windows.missing, sizeof(int64) * ing->windows.maxmissing);
	}
	ing->windows.missing[ing->windows.nmissing++] = window;
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
 * waiting (lock 5 of "Lock order", docs/architecture.md): a seal holds a SHARE lock on an active window while it copies,
 * and messages for it wait until the seal is done (then they are late); a
 * compaction holds one on sealed windows while it merges them, and their
 * late rows wait until the new partition is in place.
 */
const char *
sc_window_need(ScIngest *ing, int64 window, bool batch, ScWindowEntry **entry)
{
	ScWindowWork work = {.ing = ing, .window = window};
	ErrorData  *edata;
	ScWindowEntry *e;
	ScBadWindow *bad;
	bool		found;

	*entry = NULL;
	/* Messages come in runs of one window: most need no hash lookup. */
	if (ing->windows.last != NULL && ing->windows.last->start == window)
		e = ing->windows.last, found = true;
	else
		e = hash_search(ing->windows.entries, &window, HASH_FIND, &found);
	if (!found)
	{
		if (sc_window_pending(ing, window))
			return NULL;
		if (window < MIN_TIMESTAMP || window >= END_TIMESTAMP - ing->cube->width)
			return "time value is outside the range of timestamps streamcube can partition";
		bad = hash_search(ing->windows.bad, &window, HASH_FIND, &found);
		if (found)
			return pstrdup(bad->error);

		if (batch)
		{
			SPI_connect();
			found = sc_segment_state(ing->cube, window, &work.state, ing->windows.cxt);
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
				bad = hash_search(ing->windows.bad, &window, HASH_ENTER, NULL);
				snprintf(bad->error, sizeof(bad->error),
						 "could not create the window of this time value: %s", edata->message);
				return pstrdup(bad->error);
			}
			if (work.created)
			{
				if (ing->windows.npending == ing->windows.maxpending)
				{
					ing->windows.maxpending *= 2;
					ing->windows.pending = repalloc(ing->windows.pending, sizeof(int64) * ing->windows.maxpending);
				}
				ing->windows.pending[ing->windows.npending++] = window;
				return NULL;
			}
		}
		e = hash_search(ing->windows.entries, &window, HASH_ENTER, NULL);
		e->state = work.state;
		e->locked_batch = 0;
	}
	*entry = e;
	ing->windows.last = e;
	if (e->locked_batch == ing->windows.batch_no || ing->windows.peeking)
		return NULL;
	if (ing->windows.nlocked_batch != ing->windows.batch_no)
	{
		ing->windows.nlocked_batch = ing->windows.batch_no;
		ing->windows.nlocked = 0;
	}
	/* Bounded locks per batch: messages spread over a year of windows wait their turn. */
	if (batch && ing->windows.nlocked >= SC_BATCH_MAX_LOCKED_WINDOWS)
		return sc_window_busy;

	if (!ConditionalLockRelationOid(e->state.relid, RowExclusiveLock))
		return sc_window_busy;
	/* Taking the lock took in invalidations: is it still our partition? */
	if (!sc_window_attached(ing, e->state.relid))
	{
		UnlockRelationOid(e->state.relid, RowExclusiveLock);
		hash_search(ing->windows.entries, &window, HASH_REMOVE, NULL);
		ing->windows.last = NULL;
		*entry = NULL;
		return sc_window_busy;
	}
	e->locked_batch = ing->windows.batch_no;
	ing->windows.nlocked++;
	return NULL;
}

/* How many windows the batches met that do not exist yet. */
int
sc_ingest_missing_windows(ScIngest *ing)
{
	return ing->windows.nmissing;
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
	int			n = Min(ing->windows.nmissing, sc_batch_max_windows);
	ScWindowEntry *e;

	sc_windows_begin(ing);
	for (int i = 0; i < n; i++)
		(void) sc_window_need(ing, ing->windows.missing[i], false, &e);
	memmove(ing->windows.missing, ing->windows.missing + n, sizeof(int64) * (ing->windows.nmissing - n));
	ing->windows.nmissing -= n;
}

/* sealed_upto of a sealed window for one Kafka partition (0: none). */
int64
sc_window_upto(const ScWindowEntry *e, int32 partition)
{
	for (int i = 0; i < e->state.nupto; i++)
		if (e->state.upto_partitions[i] == partition)
			return e->state.upto_offsets[i];
	return 0;
}

/* Create the window of `now` and the next one; call inside a transaction. */
void
sc_ingest_prepare_windows(ScIngest *ing, int64 now)
{
	int64		w = sc_window_start(ing->cube, now);
	ScWindowEntry *e;
	const char *error;

	sc_windows_begin(ing);
	if ((error = sc_window_need(ing, w, false, &e)) == sc_window_busy)
		error = NULL;
	if (error == NULL && (error = sc_window_need(ing, w + ing->cube->width, false, &e)) == sc_window_busy)
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

	ing->windows.last = NULL;
	hash_seq_init(&seq, ing->windows.entries);
	while ((entry = hash_seq_search(&seq)) != NULL)
		hash_search(ing->windows.entries, entry, HASH_REMOVE, NULL);
	hash_seq_init(&seq, ing->windows.firsts);
	while ((entry = hash_seq_search(&seq)) != NULL)
		hash_search(ing->windows.firsts, entry, HASH_REMOVE, NULL);
	hash_seq_init(&seq, ing->windows.bad);
	while ((entry = hash_seq_search(&seq)) != NULL)
		hash_search(ing->windows.bad, entry, HASH_REMOVE, NULL);
	MemoryContextReset(ing->windows.cxt);
}

/*
 * After COMMIT, what the batch created and recorded is known; after an
 * abort, not.
 */
void
sc_windows_end_batch(ScIngest *ing, bool committed)
{
	ScWindowCache *wc = &ing->windows;

	if (committed)
	{
		for (int i = 0; i < wc->nfirsts_pending; i++)
			hash_search(wc->firsts, &wc->firsts_pending[i], HASH_ENTER, NULL);
		/* new windows: read their state when next needed */
	}
	wc->npending = 0;
	wc->nfirsts_pending = 0;
}

/*
 * What the rows of a batch tell the catalog, in the batch's transaction:
 * a late row appended to a sealed window moves that window's sealed_upto
 * past it (so it is never appended twice); the first row of a Kafka
 * partition in an active window records its offset in window_offsets
 * (where a seal finds the partition's next checkpoint).
 */
void
sc_windows_record(ScIngest *ing, int nlines_done)
{
	ScFirstKey	prev = {0, -1}; /* the last key known to be recorded */

	for (int l = 0; l < nlines_done; l++)
	{
		const ScKafkaMessage *m = &ing->batch.messages[ing->batch.line_msg[l]];
		ScFirstKey	key = {ing->batch.line_window[l], m->partition};
		bool		seen;

		if (ing->batch.bad_error[ing->batch.line_msg[l]] != NULL)
			continue;
		if (ing->batch.fate[ing->batch.line_msg[l]] == SC_FATE_LATE)
		{
			/* lines are in offset order per partition: the last one wins */
			bool		last = true;

			for (int k = l + 1; k < nlines_done && last; k++)
				if ((ing->batch.fate[ing->batch.line_msg[k]] == SC_FATE_LATE) && ing->batch.line_window[k] == key.start &&
					ing->batch.messages[ing->batch.line_msg[k]].partition == key.partition &&
					ing->batch.bad_error[ing->batch.line_msg[k]] == NULL)
					last = false;
			if (last)
				sc_positions_late(ing->cube->cube_id, key.start, key.partition, m->offset + 1);
			continue;
		}
		/* lines come in runs of one window and partition */
		if (key.start == prev.start && key.partition == prev.partition)
			continue;
		prev = key;
		hash_search(ing->windows.firsts, &key, HASH_FIND, &seen);
		for (int k = 0; k < ing->windows.nfirsts_pending && !seen; k++)
			seen = ing->windows.firsts_pending[k].start == key.start &&
				ing->windows.firsts_pending[k].partition == key.partition;
		if (seen)
			continue;
		sc_positions_first_offset(ing->cube->cube_id, key.start, key.partition, m->offset);
		if (ing->windows.nfirsts_pending == ing->windows.maxfirsts_pending)
		{
			ing->windows.maxfirsts_pending *= 2;
			ing->windows.firsts_pending = repalloc(ing->windows.firsts_pending,
										   sizeof(ScFirstKey) * ing->windows.maxfirsts_pending);
		}
		ing->windows.firsts_pending[ing->windows.nfirsts_pending++] = key;
	}
}

