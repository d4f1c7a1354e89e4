/*-------------------------------------------------------------------------
 *
 * ingest_windows.c
 *		The receiver's cache of its cube's windows: which partition each is,
 *		sealed or not, whether the current batch holds its lock; the windows
 *		batches met that must be created; the first offsets recorded.
 *
 * It holds what is committed only.  A window's state is read from the
 * catalog once (sc_segment_state, a statement planned once), or known from
 * creating the window (entered once that transaction commits:
 * sc_window_created), and kept for the receiver's life, while its
 * partition is the same relation: a replay of history, whose batches meet
 * dozens of windows and create new ones (each ATTACH a change of the
 * cube's table), reads a window again only when it changed.
 *
 * Why a kept state is never stale when it is used.  What the receiver
 * keeps of a window is: active or sealed, its partition, and for a sealed
 * window its sealed_upto per Kafka partition.
 *
 *	1. Whatever moves a window from one state or partition to another
 *	   replaces its partition, in the transaction that writes the catalog:
 *	   a seal DETACHes and DROPs the active partition and ATTACHes a logged
 *	   twin (a new OID); a compaction DETACHes and DROPs a bucket's
 *	   partitions and ATTACHes a new one; retention and a user DROP or
 *	   DETACH it; a window whose partition was detached is made anew with a
 *	   new one (segments.c).  No catalog write changes a window's state or
 *	   partition while its relation stays the same one, attached.
 *	2. Each batch locks every window it writes (ROW EXCLUSIVE, without
 *	   waiting) and then checks its partition: that the relation the entry
 *	   names is still, as the same version of its pg_class row (xmin and
 *	   TID, so that an OID used again after a drop is another relation), a
 *	   partition of the cube.  Taking the lock took in the invalidations of
 *	   every DDL committed before it, and the batch holds ROW EXCLUSIVE on
 *	   the cube from its start (lock 3 of "Lock order"), which every swap of
 *	   a seal, a compaction or retention needs ACCESS EXCLUSIVE on: none can
 *	   commit before the batch does.  So a partition found the same is the
 *	   same until the batch commits, and by 1. so is the window's state.
 *	3. A partition found changed makes the batch forget the entry and read
 *	   the window's state again, at once, with a new snapshot (each catalog
 *	   statement takes one) that sees the change: a window sealed since it
 *	   was read is sealed now, and its messages take the late-row path with
 *	   its sealed_upto.  A seal in progress holds SHARE on the active
 *	   partition: the lock is refused and the message waits for the next
 *	   batch.
 *	4. sealed_upto of a sealed window moves without a new partition only
 *	   by late rows, for the Kafka partitions whose rows they are: a
 *	   window's mark for a partition is never above that partition's
 *	   committed position (a seal sets it to the position, a late row moves
 *	   it past itself in the transaction that moves the position past it),
 *	   and a receiver reads from its positions on.  A kept mark lower than
 *	   the catalog's (a late row since, by this receiver or by the one a
 *	   reassignment took the partition from) therefore decides as the
 *	   catalog's would: every message read is at or past both, and late.
 *	   Only positions set back (streamcube_set_positions, on a paused cube)
 *	   or a crash (a new process) read messages below a mark: the receiver
 *	   forgets everything when it opens a consumer at positions read again
 *	   (sc_ingest_forget_windows).
 *
 *	5. Rows that are routed through the cube's table (the COPY fallback)
 *	   or a roll-up's (its merge) need the table's partition descriptor,
 *	   which this process caches, to hold every window the batch read.
 *	   PostgreSQL builds a descriptor from a scan of pg_inherits, then
 *	   looks up each partition's bound; the first catalog lock of a
 *	   transaction taken in between takes in invalidations.  A window
 *	   another receiver attached (ATTACH takes only SHARE UPDATE EXCLUSIVE
 *	   on the table: it commits while we hold ROW EXCLUSIVE) whose
 *	   invalidation is taken in there is missing from the descriptor the
 *	   build then caches, and nothing invalidates it again until the table
 *	   next changes: a late row for that window found "no partition of
 *	   relation".  So every relcache invalidation of those tables is
 *	   counted as it is taken in (sc_ingest_relcache_event), and before a
 *	   batch writes, after it read every window it writes, the tables'
 *	   entries are flushed if one came since the last flush
 *	   (sc_windows_fresh_routes): a descriptor built from then on scans
 *	   pg_inherits after those windows were read, and holds them.
 *	   Any backend that reads the cube can cache such a descriptor, and
 *	   would not see the window's rows until the table next changes
 *	   (PostgreSQL 15 does so; docs/architecture.md, "Partition
 *	   descriptors").  So 100 ms or more after a transaction that
 *	   created windows commits, the receiver invalidates the tables once
 *	   more (sc_ingest_send_invalidation), in its next transaction or in
 *	   one of its own: a descriptor whose build took in the first
 *	   invalidation is dropped by the second.
 *
 * The first offsets recorded are kept per (partition of the cube, Kafka
 * partition), the partition known by its OID and pg_class version
 * (sc_windows_record): a seal deletes its windows', and a window is active
 * again only with a new partition.  Windows that could not be
 * created are forgotten whenever the cube's table changes, which may mend
 * them.  Memory stays bounded: past SC_WINDOW_CACHE_MAX windows, or
 * SC_FIRSTS_CACHE_MAX first offsets, everything is forgotten and read
 * again as needed.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "access/htup_details.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "ingest_internal.h"
#include "positions.h"
#include "rollup.h"
#include "storage/lmgr.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/relcache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

/* A window that could not be created, and why. */
typedef struct ScBadWindow
{
	int64		start;
	char		error[256];
} ScBadWindow;


/*
 * Bounds of what the cache keeps: a year of windows of an hour, and their
 * first offsets from a topic of 16 partitions, take a few MiB.
 */
#define SC_WINDOW_CACHE_MAX 16384
#define SC_FIRSTS_CACHE_MAX 262144

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
	ctl.entrysize = sizeof(ScFirstEntry);
	wc->firsts = hash_create("streamcube first offsets", 64, &ctl, HASH_ELEM | HASH_BLOBS);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(int64);
	ctl.entrysize = sizeof(ScBadWindow);
	wc->bad = hash_create("streamcube bad windows", 16, &ctl, HASH_ELEM | HASH_BLOBS);
	wc->maxmissing = 16;
	wc->missing = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * wc->maxmissing);
	wc->missing_part = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * wc->maxmissing);
	wc->maxfirsts_pending = 64;
	wc->firsts_pending = MemoryContextAlloc(TopMemoryContext,
											sizeof(ScFirstEntry) * wc->maxfirsts_pending);
	wc->maxpending = 16;
	wc->pending = MemoryContextAlloc(TopMemoryContext, sizeof(ScCreatedWindow) * wc->maxpending);
}

/*
 * The second invalidation of the tables after windows were created, once
 * SC_REINVAL_DELAY_MS have passed since: a backend's descriptor build took
 * in the first within microseconds, and must be over when the second
 * comes.
 */
#define SC_REINVAL_DELAY_MS 100

bool
sc_ingest_invalidation_due(ScIngest *ing)
{
	return ing->windows.reinval_due && GetCurrentTimestamp() >= ing->windows.reinval_after;
}

/* Invalidate a table's relcache entries in every backend, at our commit. */
static void
sc_windows_invalidate_again(Oid relid)
{
	/* a roll-up dropped since the cube was read has nothing to invalidate */
	if (SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		CacheInvalidateRelcacheByRelid(relid);
}

/*
 * A new transaction uses the windows: no lock of theirs is held yet.  The
 * last one ended (sc_windows_end_batch), so nothing is pending: the cache
 * may start again from nothing if it grew past its bounds.
 */
void
sc_windows_begin(ScIngest *ing)
{
	if (hash_get_num_entries(ing->windows.entries) > SC_WINDOW_CACHE_MAX ||
		hash_get_num_entries(ing->windows.firsts) > SC_FIRSTS_CACHE_MAX)
		sc_ingest_forget_windows(ing);
	ing->windows.batch_no++;
	sc_ingest_send_invalidation(ing);
}

/*
 * Windows created before: their tables' invalidation, again, when it is
 * due (point 5 at the top), sent when the current transaction commits.  A
 * transaction that uses the windows sends it; the receiver runs one of its
 * own for it when none comes.
 */
void
sc_ingest_send_invalidation(ScIngest *ing)
{
	ListCell   *lc;

	if (!sc_ingest_invalidation_due(ing) || ing->windows.reinval_sent)
		return;
	sc_windows_invalidate_again(ing->cube->relid);
	foreach(lc, ing->cube->rollups)
		sc_windows_invalidate_again(((ScRollup *) lfirst(lc))->relid);
	ing->windows.reinval_sent = true;
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
	int64		created_start;	/* the windows created, when created */
	int64		created_end;
	bool		known;
	ScWindowState state;
} ScWindowWork;

static void
sc_window_work(void *arg)
{
	ScWindowWork *w = arg;
	const ScCube *cube = w->ing->cube;

	w->created = sc_segment_ensure(cube, w->window, &w->created_start, &w->created_end);
	SPI_connect();

	/*
	 * The roll-ups get their partitions of it in the same transaction.  A
	 * bucket of history is made only for a cube without roll-ups, as the
	 * catalog says under the window lock, which streamcube_create_rollup
	 * takes too (segments.c): there are none to ask about.
	 */
	if (w->created && w->created_end - w->created_start == cube->width)
		sc_rollup_windows_create(cube, w->created_start, false);
	w->known = sc_segment_state(cube, w->window, &w->state, w->ing->windows.cxt);
	SPI_finish();
}

/* Outcomes of sc_window_need() other than an error text or NULL. */
const char sc_window_missing[] = "window not created yet";
const char sc_window_busy[] = "window is being sealed";

static bool
sc_window_pending(ScIngest *ing, int64 window)
{
	for (int i = 0; i < ing->windows.npending; i++)
		if (ing->windows.pending[i].start == window)
			return true;
	return false;
}

/* Is the window among those batches met that do not exist yet? */
static bool
sc_window_noted_missing(ScIngest *ing, int64 window)
{
	for (int i = 0; i < ing->windows.nmissing; i++)
		if (ing->windows.missing[i] == window)
			return true;
	return false;
}

/*
 * The partition a missing window will likely get, by its start: its
 * bucket of history's (segments.c), or its own.  Creation rounds are
 * bounded by partitions made, not by windows: the windows of a bucket
 * after its first are made with it.
 */
static int64
sc_window_likely_partition(ScIngest *ing, int64 window)
{
	int64		lo,
				hi;

	return sc_segment_history_span(ing->cube, window, &lo, &hi) ? lo : window;
}

/* Is missing window i the first of the missing to likely get its partition? */
static bool
sc_window_first_of_part(const ScWindowCache *wc, int i)
{
	for (int k = 0; k < i; k++)
		if (wc->missing_part[k] == wc->missing_part[i])
			return false;
	return true;
}

/* Count the partitions the missing windows will likely get. */
static void
sc_window_count_missing_parts(ScIngest *ing)
{
	ScWindowCache *wc = &ing->windows;

	wc->nmissing_parts = 0;
	for (int i = 0; i < wc->nmissing; i++)
		wc->nmissing_parts += sc_window_first_of_part(wc, i);
}

/* Will another window noted missing likely get this window's partition? */
static bool
sc_window_bucket_missing(ScIngest *ing, int64 window)
{
	const ScWindowCache *wc = &ing->windows;
	int64		lo,
				hi;

	if (wc->nmissing == 0 || !sc_segment_history_span(ing->cube, window, &lo, &hi))
		return false;
	for (int i = 0; i < wc->nmissing; i++)
		if (wc->missing_part[i] == lo)
			return true;
	return false;
}

/* Windows a batch met that do not exist yet: created after it commits. */
static void
sc_window_note_missing(ScIngest *ing, int64 window)
{
	ScWindowCache *wc = &ing->windows;

	if (sc_window_noted_missing(ing, window))
		return;
	if (wc->nmissing == wc->maxmissing)
	{
		wc->maxmissing *= 2;
		wc->missing = repalloc(wc->missing, sizeof(int64) * wc->maxmissing);
		wc->missing_part = repalloc(wc->missing_part, sizeof(int64) * wc->maxmissing);
	}
	wc->missing_part[wc->nmissing] = sc_window_likely_partition(ing, window);
	wc->missing[wc->nmissing] = window;
	wc->nmissing_parts += sc_window_first_of_part(wc, wc->nmissing);
	wc->nmissing++;
}

/*
 * Is this relation a partition of the cube, and which version of it?  A
 * version known already (*known, xmin valid) was checked to be one; the
 * relation's pg_class row alone says whether it is the same, without a
 * look at pg_inherits.
 */
static bool
sc_window_partition(ScIngest *ing, Oid relid, const ScRelVersion *known, ScRelVersion *version)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	bool		ispartition;

	if (!HeapTupleIsValid(tup))
		return false;
	ispartition = ((Form_pg_class) GETSTRUCT(tup))->relispartition;
	version->xmin = HeapTupleHeaderGetRawXmin(tup->t_data);
	version->tid = tup->t_self;
	ReleaseSysCache(tup);
	if (!ispartition)
		return false;
	if (known != NULL && TransactionIdEquals(known->xmin, version->xmin) &&
		ItemPointerEquals((ItemPointer) &known->tid, &version->tid))
		return true;
	return get_partition_parent(relid, true) == ing->cube->relid;
}

/* Forget one window: its partition is another relation now. */
static void
sc_window_forget(ScIngest *ing, ScWindowEntry *e)
{
	int64		window = e->start;

	if (e->state.nupto > 0)
	{
		pfree(e->state.upto_partitions);
		pfree(e->state.upto_offsets);
	}
	if (ing->windows.last == e)
		ing->windows.last = NULL;
	hash_search(ing->windows.entries, &window, HASH_REMOVE, NULL);
}

/*
 * Read a window the cache does not know: its state from the catalog, or,
 * outside a batch (batch false), its partition created first when it has
 * none.  *entry is the new entry, or NULL; returns what sc_window_need()
 * returns when there is no entry, and NULL with one.
 */
static const char *
sc_window_read(ScIngest *ing, int64 window, bool batch, ScWindowEntry **entry)
{
	ScWindowWork work = {.ing = ing, .window = window};
	ScRelVersion version;
	ScWindowEntry *e;
	ScBadWindow *bad;
	ErrorData  *edata;
	bool		found;

	*entry = NULL;
	if (sc_window_pending(ing, window))
		return NULL;
	if (window < MIN_TIMESTAMP || window >= END_TIMESTAMP - ing->cube->width)
		return "time value is outside the range of timestamps streamcube can partition";
	bad = hash_search(ing->windows.bad, &window, HASH_FIND, &found);
	if (found)
		return pstrdup(bad->error);

	if (batch)
	{
		/*
		 * Known to be missing already: a batch defers the runs that meet
		 * such a window, other partitions meet it too, and the look ahead
		 * for more of them (sc_peek_missing_windows) reads in the deferred
		 * runs, most of them in windows it noted a moment ago.  Asking the catalog for each again cost a
		 * month's replay a fifth of its receiver.  The window is created,
		 * or found made by another receiver, in the next round.
		 */
		if (sc_window_noted_missing(ing, window))
			return sc_window_missing;

		/*
		 * So is a window of history whose bucket (the partition it will
		 * likely get) another window noted missing will get: the creation
		 * round makes the bucket's partition for all its windows, or this
		 * one by itself, which it then finds made if it was.  A month
		 * read asked the catalog about each of a day's 24 windows, to
		 * find each missing.
		 */
		if (sc_window_bucket_missing(ing, window))
		{
			sc_window_note_missing(ing, window);
			return sc_window_missing;
		}
		SPI_connect();
		work.known = sc_segment_state(ing->cube, window, &work.state, ing->windows.cxt);
		SPI_finish();
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
			/*
			 * Every window of a bucket made for history (segments.c), all
			 * in the partition just made: what the cache will know of them
			 * once this transaction commits, read here, where they are
			 * made, and not again from the catalog one by one.
			 */
			Oid			relid = InvalidOid;

			memset(&version, 0, sizeof(version));
			if (work.known && sc_window_partition(ing, work.state.relid, NULL, &version))
				relid = work.state.relid;
			for (int64 s = work.created_start; s < work.created_end; s += ing->cube->width)
			{
				ScCreatedWindow *c;

				if (ing->windows.npending == ing->windows.maxpending)
				{
					ing->windows.maxpending *= 2;
					ing->windows.pending = repalloc(ing->windows.pending,
													sizeof(ScCreatedWindow) * ing->windows.maxpending);
				}
				c = &ing->windows.pending[ing->windows.npending++];
				c->start = s;
				c->relid = relid;
				c->partition = version;
			}
			return NULL;
		}
		if (!work.known)
			elog(ERROR, "window of cube %s vanished while it was created", ing->cube->qualified);
	}
	/* A window whose partition was detached is made anew. */
	if (!work.known || !sc_window_partition(ing, work.state.relid, NULL, &version))
	{
		if (!batch)
			return sc_window_busy;
		sc_window_note_missing(ing, window);
		return sc_window_missing;
	}
	/* t/042 counts these: a window is read again only when it changed. */
	ereport(DEBUG1,
			(errmsg_internal("streamcube receiver of cube %s read window %s from the catalog",
							 ing->cube->qualified, sc_bound_literal(ing->cube, window))));
	e = hash_search(ing->windows.entries, &window, HASH_ENTER, NULL);
	e->state = work.state;
	e->partition = version;
	e->locked_batch = 0;
	*entry = e;
	return NULL;
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
 * becomes visible).  The batch defers the first message of an unknown
 * window, with the rest of its partition's run; the receiver creates the windows in a transaction of
 * their own (sc_ingest_create_windows) and the message goes on in the next
 * batch.  There, each window is created in a subtransaction: a time value
 * whose window cannot be created makes its message bad, not the batch.
 *
 * A window's partition is locked ROW EXCLUSIVE once per batch, without
 * waiting (lock 5 of "Lock order", docs/architecture.md): a seal holds a
 * SHARE lock on an active window while it copies, and messages for it wait
 * until the seal is done (then they are late); a compaction holds one on
 * sealed windows while it merges them, and their late rows wait until the
 * new partition is in place.  Once locked, the partition is checked to be
 * the one the entry knew (see the top of the file); if not, the window is
 * read again.
 */
const char *
sc_window_need(ScIngest *ing, int64 window, bool batch, ScWindowEntry **entry)
{
	ScWindowCache *wc = &ing->windows;
	ScWindowEntry *e;
	ScRelVersion version;
	const char *why;
	bool		found;
	bool		held;

	*entry = NULL;
	/* Messages come in runs of one window: most need no hash lookup. */
	if (wc->last != NULL && wc->last->start == window)
		e = wc->last, found = true;
	else
		e = hash_search(wc->entries, &window, HASH_FIND, &found);
	for (bool reread = false;; reread = true)
	{
		if (!found && (why = sc_window_read(ing, window, batch, &e)) != NULL)
			return why;
		if (e == NULL)
			return NULL;		/* created in this transaction */
		*entry = e;
		wc->last = e;
		if (e->locked_batch == wc->batch_no || wc->peeking)
			return NULL;
		if (wc->nlocked_batch != wc->batch_no)
		{
			wc->nlocked_batch = wc->batch_no;
			wc->nlocked = 0;
		}
		/* Bounded locks per batch: messages spread over a year of windows wait their turn. */
		held = false;
		for (int i = 0; i < wc->nlocked && !held; i++)
			held = wc->locked[i] == e->state.relid;
		if (!held && wc->nlocked == SC_BATCH_MAX_LOCKED_PARTITIONS)
		{
			if (batch)
				return sc_window_busy;
			held = true;		/* a creation round: locks more, counts no more */
		}

		if (!ConditionalLockRelationOid(e->state.relid, RowExclusiveLock))
			return sc_window_busy;
		/* Taking the lock took in invalidations: is it still that partition? */
		if (sc_window_partition(ing, e->state.relid, &e->partition, &version))
		{
			e->partition = version;
			e->locked_batch = wc->batch_no;
			if (!held)
				wc->locked[wc->nlocked++] = e->state.relid;
			return NULL;
		}
		/* Sealed, compacted, dropped or detached since it was read. */
		UnlockRelationOid(e->state.relid, RowExclusiveLock);
		sc_window_forget(ing, e);
		*entry = NULL;
		if (reread)
			return sc_window_busy;
		found = false;
	}
}

/* How many windows the batches met that do not exist yet. */
int
sc_ingest_missing_windows(ScIngest *ing)
{
	return ing->windows.nmissing;
}

/* How many partitions those will likely get (buckets of history count once). */
int
sc_ingest_missing_partitions(ScIngest *ing)
{
	return ing->windows.nmissing_parts;
}

/*
 * Create the windows the last batches met, in the caller's transaction
 * (its own, not a batch's): as many as take at most
 * streamcube.batch_max_windows partitions (a bucket of history is one for
 * all its windows).  One that cannot be created is remembered with the
 * reason, which its messages then get as their dead letter's error.
 */
void
sc_ingest_create_windows(ScIngest *ing)
{
	ScWindowCache *wc = &ing->windows;
	int			n = 0;
	int			parts = 0;
	ScWindowEntry *e;

	sc_windows_begin(ing);
	for (; n < wc->nmissing; n++)
	{
		bool		first = sc_window_first_of_part(wc, n);

		if (first && parts == sc_batch_max_windows)
			break;
		parts += first;
		(void) sc_window_need(ing, wc->missing[n], false, &e);
	}
	memmove(wc->missing, wc->missing + n, sizeof(int64) * (wc->nmissing - n));
	memmove(wc->missing_part, wc->missing_part + n, sizeof(int64) * (wc->nmissing - n));
	wc->nmissing -= n;
	sc_window_count_missing_parts(ing);
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
 * Forget every window: the receiver reads its positions again, which may
 * have been set back below what it knows of sealed windows (see the top of
 * the file), or the cache grew past its bounds.
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
	sc_ingest_table_changed(ing);
	MemoryContextReset(ing->windows.cxt);
}

/*
 * The cube's table changed (a window created, sealed, detached or dropped,
 * a column added): windows that could not be created may be now.  The
 * windows known stay: each is checked when a batch first locks it.
 */
void
sc_ingest_table_changed(ScIngest *ing)
{
	HASH_SEQ_STATUS seq;
	void	   *entry;

	hash_seq_init(&seq, ing->windows.bad);
	while ((entry = hash_seq_search(&seq)) != NULL)
		hash_search(ing->windows.bad, entry, HASH_REMOVE, NULL);
}

/*
 * A relcache invalidation was taken in, of relid (InvalidOid: of every
 * relation).  Called from the receiver's relcache callback, in the middle
 * of whatever took it in: it only counts those of the tables a batch
 * routes rows into, the cube's and its roll-ups' (point 5 at the top).
 */
void
sc_ingest_relcache_event(ScIngest *ing, Oid relid)
{
	bool		ours = !OidIsValid(relid) || relid == ing->cube->relid;
	ListCell   *lc;

	foreach(lc, ing->cube->rollups)
		ours = ours || ((ScRollup *) lfirst(lc))->relid == relid;
	if (ours)
		ing->windows.table_events++;
}

/*
 * Before a batch writes, once it has read every window it writes: flush
 * the cached entries of the tables it may route rows into if an
 * invalidation of theirs came since the last flush, so that their
 * partition descriptors are built again from now on (point 5 at the top).
 * Their entries are read again when next opened; the direct path, which
 * routes nothing, only opens them.
 */
void
sc_windows_fresh_routes(ScIngest *ing)
{
	ListCell   *lc;

	if (ing->windows.table_events == ing->windows.table_events_seen)
		return;
	ing->windows.table_events_seen = ing->windows.table_events;
	RelationCacheInvalidateEntry(ing->cube->relid);
	foreach(lc, ing->cube->rollups)
		RelationCacheInvalidateEntry(((ScRollup *) lfirst(lc))->relid);
}

/*
 * A window created by the transaction that committed: active, in the
 * partition it was made with.  Its state is what a read of the catalog
 * would give now, and is kept as one would be (see the top of the file):
 * the first batch that writes into it locks the partition and checks that
 * it is still the version made here.
 */
static void
sc_window_created(ScIngest *ing, const ScCreatedWindow *c)
{
	ScWindowEntry *e;
	bool		found;

	if (!OidIsValid(c->relid))
		return;					/* read when needed */
	e = hash_search(ing->windows.entries, &c->start, HASH_FIND, &found);
	if (found)
		sc_window_forget(ing, e);	/* a former partition's */
	e = hash_search(ing->windows.entries, &c->start, HASH_ENTER, NULL);
	memset(&e->state, 0, sizeof(e->state));
	e->state.relid = c->relid;
	e->partition = c->partition;
	e->locked_batch = 0;
	/* t/042 counts these with the windows read from the catalog */
	if (message_level_is_interesting(DEBUG1))
	{
		char	   *bound = sc_bound_literal(ing->cube, c->start);	/* out of a transaction */

		ereport(DEBUG1,
				(errmsg_internal("streamcube receiver of cube %s created window %s",
								 ing->cube->qualified, bound)));
		pfree(bound);
	}
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
		if (wc->reinval_sent)
			wc->reinval_due = false;
		if (wc->npending > 0)
		{
			wc->reinval_due = true;
			wc->reinval_after = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
															SC_REINVAL_DELAY_MS);
		}
		for (int i = 0; i < wc->npending; i++)
			sc_window_created(ing, &wc->pending[i]);
		for (int i = 0; i < wc->nfirsts_pending; i++)
		{
			ScFirstEntry *f;

			if (!OidIsValid(wc->firsts_pending[i].key.relid))
				continue;
			f = hash_search(wc->firsts, &wc->firsts_pending[i].key, HASH_ENTER, NULL);
			f->version = wc->firsts_pending[i].version;
			f->start = wc->firsts_pending[i].start;
		}
	}
	wc->npending = 0;
	wc->nfirsts_pending = 0;
	wc->reinval_sent = false;
}

/*
 * What the rows of a batch tell the catalog, in the batch's transaction:
 * a late row appended to a sealed window moves that window's sealed_upto
 * past it (so it is never appended twice); the first row of a Kafka
 * partition in an active partition of the cube records its offset in
 * window_offsets, for the window it is in (where a seal finds the
 * partition's next checkpoint: the smallest first offset in an active
 * window).
 *
 * Once per partition of the cube, not per window: the windows of a
 * bucket of history share their partition, and with it every change of
 * state (a seal swaps the whole partition and marks all its windows
 * sealed in one transaction; a drop, retention or a detach takes them
 * all), so while they are active the smallest first offset of a Kafka
 * partition in any of them is the one in the window it was read into
 * first.  A replay of a month of hourly windows records 16 first offsets
 * a day for 16 Kafka partitions instead of 384.  The cache knows a
 * partition by its OID and the version of its pg_class row, as the
 * windows' cache does: an OID used again after a drop is another
 * relation, and is recorded again.
 */
void
sc_windows_record(ScIngest *ing, int nlines_done)
{
	int64		prev_start = 0; /* the last run's window and Kafka partition */
	int32		prev_partition = -1;
	int			first_new = ing->windows.nfirsts_pending;
	int64	   *offsets = NULL; /* of the first offsets new here, by pending index */
	int			maxoffsets = 0;

	for (int l = 0; l < nlines_done; l++)
	{
		const ScKafkaMessage *m = &ing->batch.messages[ing->batch.line_msg[l]];
		int64		start = ing->batch.line_window[l];
		ScWindowEntry *e;
		ScFirstEntry *f;
		ScFirstKey	key;
		bool		seen;

		if (ing->batch.bad_error[ing->batch.line_msg[l]] != NULL)
			continue;
		if (ing->batch.fate[ing->batch.line_msg[l]] == SC_FATE_LATE)
		{
			/* lines are in offset order per partition: the last one wins */
			bool		last = true;

			for (int k = l + 1; k < nlines_done && last; k++)
				if ((ing->batch.fate[ing->batch.line_msg[k]] == SC_FATE_LATE) && ing->batch.line_window[k] == start &&
					ing->batch.messages[ing->batch.line_msg[k]].partition == m->partition &&
					ing->batch.bad_error[ing->batch.line_msg[k]] == NULL)
					last = false;
			if (last)
				sc_positions_late(ing->cube->cube_id, start, m->partition, m->offset + 1);
			continue;
		}
		/* lines come in runs of one window and partition */
		if (start == prev_start && m->partition == prev_partition)
			continue;
		prev_start = start;
		prev_partition = m->partition;
		/* recorded for the window's partition as it is now, not a former one */
		e = sc_window_find(ing, start);
		key.relid = e != NULL ? e->state.relid : InvalidOid;
		key.partition = m->partition;
		seen = false;
		if (OidIsValid(key.relid))
		{
			f = hash_search(ing->windows.firsts, &key, HASH_FIND, &seen);
			seen = seen && TransactionIdEquals(f->version.xmin, e->partition.xmin) &&
				ItemPointerEquals(&f->version.tid, &e->partition.tid);
			/* or recorded by this transaction already */
			for (int k = 0; k < ing->windows.nfirsts_pending && !seen; k++)
				seen = ing->windows.firsts_pending[k].key.relid == key.relid &&
					ing->windows.firsts_pending[k].key.partition == key.partition;
		}
		if (seen)
			continue;
		if (ing->windows.nfirsts_pending == ing->windows.maxfirsts_pending)
		{
			ing->windows.maxfirsts_pending *= 2;
			ing->windows.firsts_pending = repalloc(ing->windows.firsts_pending,
												   sizeof(ScFirstEntry) * ing->windows.maxfirsts_pending);
		}
		if (ing->windows.nfirsts_pending - first_new == maxoffsets)
		{
			maxoffsets = Max(maxoffsets * 2, 16);
			offsets = offsets == NULL ? palloc(sizeof(int64) * maxoffsets)
				: repalloc(offsets, sizeof(int64) * maxoffsets);
		}
		offsets[ing->windows.nfirsts_pending - first_new] = m->offset;
		f = &ing->windows.firsts_pending[ing->windows.nfirsts_pending++];
		f->key = key;
		f->version = e != NULL ? e->partition : (ScRelVersion) {0};
		f->start = start;
	}

	/* The new first offsets, all in one statement. */
	if (ing->windows.nfirsts_pending > first_new)
	{
		int			n = ing->windows.nfirsts_pending - first_new;
		int64	   *starts = palloc(sizeof(int64) * n);
		int32	   *partitions = palloc(sizeof(int32) * n);

		for (int i = 0; i < n; i++)
		{
			starts[i] = ing->windows.firsts_pending[first_new + i].start;
			partitions[i] = ing->windows.firsts_pending[first_new + i].key.partition;
		}
		sc_positions_first_offsets(ing->cube->cube_id, n, starts, partitions, offsets);
		pfree(starts);
		pfree(partitions);
		pfree(offsets);
	}
}

