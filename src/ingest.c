/*-------------------------------------------------------------------------
 *
 * ingest.c
 *		The hot path: turn a batch of Kafka messages into rows of the cube,
 *		and the messages that cannot be rows into dead letters.
 *
 * A batch runs in the receiver's transaction, which also advances the
 * cube's positions: rows and offsets commit together.  It goes in four
 * steps:
 *
 *	1. Each message is read by its cube's format (format.h) into one line
 *	   of COPY's text or CSV format, and judged: a tombstone, a time value
 *	   outside the cube's rejection periods or retention, a window that
 *	   cannot be created make it bad; a window not created yet, or locked by
 *	   a seal, defers it and the rest of its partition's run to the next
 *	   batch (the other partitions go on: the batch's messages are in
 *	   partition, offset order, and each partition's position moves past
 *	   the head of its run that was done, no further).  The time value is
 *	   parsed here without raising errors, so a message's window is known
 *	   before anything is written.  Any error a message causes while it
 *	   is parsed makes that message bad, unless it is not about the data
 *	   (out of memory, a cancel): then the batch aborts and nothing is
 *	   lost.
 *	2. The lines are written (ingest_write.c): by the direct path or the
 *	   COPY fallback, bad rows isolated by bisection.  Parsing and writing
 *	   end early, at a message, when the receiver is wanted elsewhere or
 *	   the batch has read what it may (sc_batch_max_decoded).
 *	3. What the rows tell the catalog is recorded (ingest_windows.c: first
 *	   offsets of windows, sealed_upto of late rows), and the rows are
 *	   merged into the cube's roll-ups (ingest_rollup.c).
 *	4. Bad messages before the cut become dead letters, with their key;
 *	   under policy "pause" the batch ends just before the first of them.
 *	   The messages done go first in the batch, those deferred after them
 *	   (sc_batch_set_aside), so that the receiver carries [cut, n).
 *
 * A batch creates no window: the receiver creates the windows a batch met
 * (at most streamcube.batch_max_windows at once) in a transaction of its
 * own, see sc_window_need().
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "ingest_internal.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rls.h"
#include "utils/timestamp.h"


/* ----------------------------------------------------------------
 * Set-up
 * ----------------------------------------------------------------
 */

/* Which field of a line each column is (see ScLayout). */
static void
sc_layout_build(ScLayout *layout, ScCube *cube)
{
	int			n = Max(cube->ncolumns, 1);
	int			next;

	layout->attnames = NIL;
	layout->nattrs = cube->ncolumns + 2;
	layout->attnums = palloc(sizeof(AttrNumber) * layout->nattrs);
	layout->json_column = palloc0(sizeof(bool) * n);
	layout->meta_base = palloc0(sizeof(Oid) * n);
	layout->format_datum = NULL;	/* a format that builds datums allocates it */
	layout->takes = palloc0(sizeof(uint16) * n);
	layout->line_pos = palloc(sizeof(int) * n);
	layout->line_col = palloc(sizeof(int) * n);
	layout->npayload = 0;
	layout->doc_index = -1;
	for (int c = 0; c < cube->ncolumns; c++)
	{
		ScColumn   *col = &cube->columns[c];
		Oid			base = getBaseType(col->type);

		layout->attnames = lappend(layout->attnames, makeString(pstrdup(col->name)));
		layout->attnums[c] = get_attnum(cube->relid, col->name);
		layout->takes[c] = sc_scalar_takes(col->type, col->typmod);
		layout->json_column[c] = base == JSONOID || base == JSONBOID;
		if (col->meta == SC_META_NONE)
			layout->line_pos[c] = layout->npayload++;
		else
			layout->meta_base[c] = base;
		if (col->meta == SC_META_VALUE && col->type == JSONBOID && cube->format != SC_FORMAT_CSV)
			layout->doc_index = c;
	}
	layout->attnames = lappend(layout->attnames, makeString(pstrdup("_partition")));
	layout->attnames = lappend(layout->attnames, makeString(pstrdup("_offset")));
	layout->attnums[cube->ncolumns] = get_attnum(cube->relid, "_partition");
	layout->attnums[cube->ncolumns + 1] = get_attnum(cube->relid, "_offset");

	/*
	 * A JSON line writes every column in table order (metadata columns in
	 * their place); a CSV line is the record, which fills the payload
	 * columns, followed by the metadata columns.
	 */
	next = layout->npayload;
	for (int c = 0; c < cube->ncolumns; c++)
		if (cube->format != SC_FORMAT_CSV)
			layout->line_pos[c] = c;
		else if (cube->columns[c].meta != SC_META_NONE)
			layout->line_pos[c] = next++;
	for (int c = 0; c < cube->ncolumns; c++)
		layout->line_col[layout->line_pos[c]] = c;
	layout->line_attnames = NIL;
	for (int f = 0; f < cube->ncolumns; f++)
		layout->line_attnames = lappend(layout->line_attnames,
										list_nth(layout->attnames, layout->line_col[f]));
	layout->line_attnames = lappend(layout->line_attnames, list_nth(layout->attnames, cube->ncolumns));
	layout->line_attnames = lappend(layout->line_attnames, list_nth(layout->attnames, cube->ncolumns + 1));
}

/* Build what depends on the cube's definition; again whenever it changes. */
void
sc_ingest_set_cube(ScIngest *ing, ScCube *cube)
{
	MemoryContext old;

	if (ing->cube_cxt == NULL)
		ing->cube_cxt = AllocSetContextCreate(TopMemoryContext, "streamcube ingest setup",
											  ALLOCSET_SMALL_SIZES);
	else
	{
		sc_rollup_ingest_release(ing);
		MemoryContextReset(ing->cube_cxt);
	}
	old = MemoryContextSwitchTo(ing->cube_cxt);

	ing->cube = cube;
	sc_layout_build(&ing->layout, cube);
	ing->fc.cube = cube;
	ing->fc.layout = &ing->layout;
	ing->fc.format = sc_format_routine(cube->format);
	ing->fc.state = ing->fc.format->setup(&ing->fc);
	sc_copy_setup(ing);
	sc_direct_reset(ing);		/* input functions: looked up again when needed */
	sc_rollup_ingest_setup(ing);
	MemoryContextSwitchTo(old);
}

/*
 * The ingest of a receiver's cube.  wanted_elsewhere, when not NULL, says
 * whether the receiver is wanted for something a batch should not delay (a
 * pause, a stop, a changed cube): a batch asks it now and then, and ends
 * early when it says so.
 */
ScIngest *
sc_ingest_create(ScCube *cube, bool (*wanted_elsewhere) (void))
{
	ScIngest   *ing = MemoryContextAllocZero(TopMemoryContext, sizeof(ScIngest));
	MemoryContext old;

	/* A large first block survives resets: batches reuse it, no page faults. */
	ing->batch_cxt = AllocSetContextCreate(TopMemoryContext, "streamcube batch",
										   8 * 1024 * 1024, 8 * 1024 * 1024,
										   8 * 1024 * 1024);
	old = MemoryContextSwitchTo(TopMemoryContext);
	initStringInfo(&ing->batch.lines);
	initStringInfo(&ing->fc.meta_buf);
	initStringInfo(&ing->fc.hex_buf);
	initStringInfo(&ing->fc.render_buf);
	initStringInfo(&ing->copy_buf);
	ing->fc.ends = &ing->batch.ends;
	ing->wanted_elsewhere = wanted_elsewhere;
	MemoryContextSwitchTo(old);
	sc_windows_init(ing);
	sc_ingest_set_cube(ing, cube);

	if (check_enable_rls(cube->relid, InvalidOid, true) == RLS_ENABLED)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cube %s has row-level security enabled for its owner", cube->qualified),
				 errdetail("Receivers write with COPY, which row-level security does not allow."),
				 errhint("Disable FORCE ROW LEVEL SECURITY on the cube's table, or let the owner bypass it.")));
	return ing;
}

/*
 * Before a batch: what its messages need from outside the cube, made ready
 * by the format (the writer schemas of format avro).  False, with *why,
 * when the batch must wait for it.  Caller is connected to SPI, in a
 * transaction of its own.
 */
bool
sc_ingest_prepare(ScIngest *ing, const ScKafkaMessage *messages, int n, char **why)
{
	if (ing->fc.format->prepare == NULL)
		return true;
	return ing->fc.format->prepare(&ing->fc, messages, n, why);
}

/* Is the batch ready without sc_ingest_prepare()?  Memory only. */
bool
sc_ingest_ready(ScIngest *ing, const ScKafkaMessage *messages, int n)
{
	return ing->fc.format->prepare == NULL || ing->fc.format->ready(&ing->fc, messages, n);
}

/*
 * After COMMIT, what the batch created and recorded is known; after an
 * abort, not.
 */
void
sc_ingest_end_batch(ScIngest *ing, bool committed)
{
	sc_windows_end_batch(ing, committed);
	MemoryContextReset(ing->batch_cxt);
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
 * Why a message cannot be a row, before it is written: NULL when it can,
 * sc_window_missing or sc_window_busy when it must wait for the next
 * batch.  On success its line is appended to the batch's lines, *window and
 * *ts are its window and time value, and *fate says whether it is a row
 * into an active window, late, or read again (and then to be skipped).
 */
static const char *
sc_message_line(ScIngest *ing, const ScKafkaMessage *m, int64 now, int64 *window, int64 *ts_out,
				ScFate *fate)
{
	ScCube	   *cube = ing->cube;
	ScWindowEntry *e;
	int64		ts;
	char	   *error = NULL;
	const char *why;

	if (m->payload == NULL)
		return "tombstone: the message has no value (a NULL payload)";
	ing->batch.ends.asked = -1;
	if (!ing->fc.format->line(&ing->fc, m, &ing->batch.lines, &ts, &error))
		return error;
	ing->batch.line_ends[ing->batch.nlines] = ing->batch.ends.asked;
	if (cube->reject_early >= 0 && ts > now && ts - now > cube->reject_early)
		return psprintf("time value is more than early_rejection_period (%s) after now",
						sc_usecs_text(cube->reject_early));
	if (cube->reject_late >= 0 && ts < now && now - ts > cube->reject_late)
		return psprintf("time value is more than late_rejection_period (%s) before now",
						sc_usecs_text(cube->reject_late));
	*ts_out = ts;
	*window = sc_window_start(cube, ts);
	if (cube->retention >= 0 && *window + cube->width <= now - cube->retention)
		return psprintf("time value is older than the cube's retention (%s): its window is dropped",
						sc_usecs_text(cube->retention));
	if ((why = sc_window_need(ing, *window, true, &e)) != NULL)
		return why;
	*fate = SC_FATE_ROW;
	if (e != NULL && e->state.sealed)
	{
		/* Read again after a crash: it is in the sealed window already. */
		if (m->offset < sc_window_upto(e, m->partition))
			*fate = SC_FATE_REREAD;
		else if (cube->late_dead_letter)
			return psprintf("late: window %s of the cube is sealed (option late = dead_letter)",
							sc_bound_literal(cube, *window));
		else
			*fate = SC_FATE_LATE;
	}
	return NULL;
}

/*
 * A batch deferred the runs of some partitions from the first message of a
 * window that does not exist yet.  Note the other missing windows of those
 * runs too, up to streamcube.batch_max_windows partitions, so that the
 * receiver creates them in one transaction rather than one window per
 * batch: a backlog spread over many windows (a message an hour over
 * months) would otherwise cost a batch and a window-creation transaction
 * per window.  Nothing is ingested or locked here; a message that cannot
 * be read is left for its batch to judge.
 *
 * The messages are sorted by partition and offset, and a partition's time
 * values mostly grow with its offsets: so the peek reads the first and the
 * last message of each deferred run, and reads between two messages only
 * when their windows differ (halving the interval), rather than every
 * message.  A replay of history meets a new window every day or hour of
 * it, and reading the whole rest of the batch (every message's line) cost
 * 3.4 % of a JSON receiver's instructions replaying a month.  A window
 * this misses (a message out of time order inside a run) costs nothing but
 * a later round: its batch defers it as this one did.
 */
typedef struct ScPeek
{
	ScIngest   *ing;
	ScKafkaMessage *messages;
	int64		now;
	MemoryContext cxt;
} ScPeek;

/* The window budget of a creation round is used up. */
static inline bool
sc_peek_full(const ScPeek *pk)
{
	return sc_ingest_missing_partitions(pk->ing) >= sc_batch_max_windows;
}

/*
 * Read message j as a batch would, noting its window if missing; false
 * when its window could not be told (a bad message), else its window in
 * *window.
 */
static bool
sc_peek_message(ScPeek *pk, int j, int64 *window)
{
	StringInfo	lines = &pk->ing->batch.lines;
	int			mark = lines->len;
	volatile bool known = false;

	PG_TRY();
	{
		int64		ts = 0;
		ScFate		fate;
		const char *why = sc_message_line(pk->ing, &pk->messages[j], pk->now, window, &ts, &fate);

		known = why == NULL || why == sc_window_missing || why == sc_window_busy;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(pk->cxt);
		edata = CopyErrorData();
		if (!sc_is_data_error(edata))
		{
			pk->ing->windows.peeking = false;
			PG_RE_THROW();
		}
		FlushErrorState();
		FreeErrorData(edata);
	}
	PG_END_TRY();
	lines->len = mark;
	lines->data[mark] = '\0';
	return known;
}

/*
 * Messages lo and hi of one partition's run were read (their windows w_lo
 * and w_hi, if known): read between them where the window changes.
 */
static void
sc_peek_between(ScPeek *pk, int lo, bool k_lo, int64 w_lo, int hi, bool k_hi, int64 w_hi)
{
	while (hi - lo > 1 && !sc_peek_full(pk) && !(k_lo && k_hi && w_lo == w_hi))
	{
		int			mid = lo + (hi - lo) / 2;
		int64		w_mid = 0;
		bool		k_mid = sc_peek_message(pk, mid, &w_mid);

		sc_peek_between(pk, lo, k_lo, w_lo, mid, k_mid, w_mid);
		lo = mid;
		k_lo = k_mid;
		w_lo = w_mid;
	}
}

static void
sc_peek_missing_windows(ScIngest *ing, ScKafkaMessage *messages, int n, int64 now)
{
	ScPeek		pk = {.ing = ing, .messages = messages, .now = now, .cxt = CurrentMemoryContext};
	uint8	   *fate = ing->batch.fate;

	ing->windows.peeking = true;
	for (int a = 0; a < n && !sc_peek_full(&pk);)
	{
		int			b = a + 1;	/* a deferred run is [a, b); a was read */
		int64		w_first = 0,
					w_last = 0;
		bool		k_first,
					k_last;

		if (fate[a] != SC_FATE_DEFERRED)
		{
			a++;
			continue;
		}
		while (b < n && messages[b].partition == messages[a].partition)
			b++;
		if (b - 1 > a + 1)
		{
			k_first = sc_peek_message(&pk, a + 1, &w_first);
			if (!sc_peek_full(&pk))
			{
				k_last = sc_peek_message(&pk, b - 1, &w_last);
				sc_peek_between(&pk, a + 1, k_first, w_first, b - 1, k_last, w_last);
			}
		}
		else if (b - 1 == a + 1)
			(void) sc_peek_message(&pk, a + 1, &w_first);
		a = b;
	}
	ing->windows.peeking = false;
}

/*
 * What one batch may decode.  A batch is collected up to batch_max_bytes
 * of payload, but a message's text may be many times its bytes (JSON of a
 * record, Protobuf's defaults, hex): the lines of a batch are bounded too,
 * at batch_max_bytes, and never more than 256 MB, well inside the 1 GB a
 * StringInfo holds.  Writing them is the dear part of a batch (jsonb's
 * input reads some 40-100 MB/s): 16 MB of lines, the default, are written
 * in well under a second.  A batch of real Avro or Protobuf decodes to one
 * to three times its payload: it is cut earlier, and the next batch takes
 * the rest with the new messages.  And reading messages stops after
 * SC_BATCH_DECODE_MS: messages that are cheap in bytes but dear to read
 * (each within its decoder's budget) cannot hold a batch, and the pause,
 * positions and shutdown that wait for its end, for seconds.  Past either
 * bound, or when the receiver is wanted elsewhere (ScIngest's
 * wanted_elsewhere), the batch ends before the next message (one message
 * at least is read), commits what it read, and the rest waits for the next
 * batch, as the messages past a deferred window do.  Checked before each
 * message; the clock and the receiver every SC_BATCH_CLOCK_EVERY messages.
 */
#define SC_BATCH_MAX_DECODED (256 * 1024 * 1024)
#define SC_BATCH_DECODE_MS 250
#define SC_BATCH_CLOCK_EVERY 32

static inline int64
sc_batch_max_decoded(void)
{
	return Min((int64) sc_batch_max_kbytes * 1024, (int64) SC_BATCH_MAX_DECODED);
}

/* Drop what a message wrote of its line. */
static inline void
sc_batch_drop_line(ScBatch *b, int mark)
{
	b->lines.len = mark;
	b->lines.data[mark] = '\0';
}

/*
 * Turn messages [from, n) into lines or reasons why not, until a message
 * under policy "pause" is bad, or the batch has decoded all it may (*full
 * set: see sc_batch_max_decoded); returns the index where parsing stopped
 * (n when it got through).  A message whose window is not there yet (not
 * created, or locked by a seal, or beyond the batch's lock budget) and the
 * rest of its partition's run are deferred, *deferred set: they wait for
 * the next batch, while the other partitions' messages go on.  An error
 * raised while one message is parsed makes that message bad, unless it is
 * not about the data: then it aborts the batch.
 */
static int
sc_parse_messages(ScIngest *ing, ScKafkaMessage *messages, int n, int from,
				  int64 now, bool pause, int *skip_index, bool *deferred, bool *full)
{
	ScCube	   *cube = ing->cube;
	ScBatch    *b = &ing->batch;
	MemoryContext cxt = CurrentMemoryContext;
	volatile int i = from;
	volatile bool stopped = false;
	volatile bool missing = false;
	volatile int64 max_decoded = sc_batch_max_decoded();
	volatile TimestampTz started = GetCurrentTimestamp();

	*full = false;

	/* Never return from inside PG_TRY: the handler must be popped first. */
	while (i < n && !stopped)
	{
		PG_TRY();
		{
			for (; i < n; i++)
			{
				ScKafkaMessage *m = &messages[i];
				int			mark = b->parse_mark = b->lines.len;
				const char *error;
				int64		window = 0;
				int64		ts = 0;
				ScFate		fate = SC_FATE_ROW;

				if (i > from &&
					(b->lines.len >= max_decoded ||
					 ((i - from) % SC_BATCH_CLOCK_EVERY == 0 &&
					  (TimestampDifferenceExceeds(started, GetCurrentTimestamp(), SC_BATCH_DECODE_MS) ||
					   sc_ingest_wanted_elsewhere(ing)))))
				{
					*full = true;
					stopped = true;
					break;
				}
				if (m->partition == cube->skip_partition && m->offset == cube->skip_offset)
				{
					b->bad_error[i] = psprintf("skipped by streamcube_resume(skip_bad_message => true): %s",
											   cube->skip_error ? cube->skip_error : "bad message");
					*skip_index = i;
					continue;
				}
				if (m->payload == NULL && cube->skip_tombstones)
				{
					b->fate[i] = SC_FATE_TOMBSTONE;
					continue;
				}
				error = sc_message_line(ing, m, now, &window, &ts, &fate);
				if (error == sc_window_missing || error == sc_window_busy)
				{
					int32		partition = m->partition;

					/* The rest of this partition's run waits; the others go on. */
					sc_batch_drop_line(b, mark);
					*deferred = true;
					missing = missing || error == sc_window_missing;
					for (; i < n && messages[i].partition == partition; i++)
						b->fate[i] = SC_FATE_DEFERRED;
					i--;		/* the loop steps to the next partition's run */
					continue;
				}
				if (error == NULL && fate == SC_FATE_REREAD)
				{
					sc_batch_drop_line(b, mark);
					b->fate[i] = SC_FATE_REREAD;
					continue;
				}
				if (error != NULL)
				{
					sc_batch_drop_line(b, mark);
					b->bad_error[i] = (char *) error;
					if (pause)
					{
						stopped = true;
						break;
					}
					continue;
				}
				b->fate[i] = fate;
				b->nlate += fate == SC_FATE_LATE;
				b->line_start[b->nlines] = mark;
				b->line_msg[b->nlines] = i;
				b->line_window[b->nlines] = window;
				b->line_ts[b->nlines] = ts;
				if (b->line_ends[b->nlines] >= 0)
					b->ends.nends += cube->ncolumns;
				b->nlines++;
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
			sc_batch_drop_line(b, b->parse_mark);
			b->bad_error[i] = psprintf("%s", edata->message);
			FreeErrorData(edata);
			if (pause)
				stopped = true;
			else
				i++;
		}
		PG_END_TRY();
	}
	if (missing)
		sc_peek_missing_windows(ing, messages, n, now);
	return i;
}

/* Room for a batch of n messages, and nothing in it yet. */
static void
sc_batch_begin(ScBatch *b, ScKafkaMessage *messages, int n)
{
	b->messages = messages;

	/*
	 * An empty batch (a partition's end ahead of its position) may be the
	 * receiver's first: the arrays exist then too.
	 */
	if (n > b->maxbatch || b->line_start == NULL)
	{
		int			size = Max(n, 1);

		if (b->line_start != NULL)
		{
			pfree(b->bad_error);
			pfree(b->fate);
			pfree(b->line_start);
			pfree(b->line_msg);
			pfree(b->line_window);
			pfree(b->line_ts);
			pfree(b->line_ends);
		}
		b->bad_error = MemoryContextAlloc(TopMemoryContext, sizeof(char *) * size);
		b->fate = MemoryContextAlloc(TopMemoryContext, sizeof(uint8) * size);
		b->line_window = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * size);
		b->line_ts = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * size);
		b->line_start = MemoryContextAlloc(TopMemoryContext, sizeof(int) * (size + 1));
		b->line_msg = MemoryContextAlloc(TopMemoryContext, sizeof(int) * size);
		b->line_ends = MemoryContextAlloc(TopMemoryContext, sizeof(int) * (size + 1));
		b->maxbatch = size;
	}
	memset(b->bad_error, 0, sizeof(char *) * n);
	memset(b->fate, 0, sizeof(uint8) * n);
	b->nlines = 0;
	b->ends.nends = 0;
	b->nlate = 0;
	b->rows_direct = 0;
	b->rows_copy = 0;
	resetStringInfo(&b->lines);
}

/*
 * Write the lines (late ones into sealed windows too), in runs of about
 * SC_WRITE_RUN_BYTES of text, each tried whole (sc_write_lines).  Writing
 * is the dear part of a batch, and some lines are dearer than their size
 * says (jsonb of many small objects is read at some 12 MB/s): 16 MB of them
 * take more than a second.  Between runs the batch ends early when its
 * receiver is wanted elsewhere, so that a pause, a stop or a reassignment
 * waits for one run, not for the batch.  Returns the first bad line under
 * "pause", or -1; *unwritten is the first line not written, nlines when
 * every line was.
 */
#define SC_WRITE_RUN_BYTES (1024 * 1024)

static int
sc_batch_write(ScIngest *ing, bool pause, int *unwritten)
{
	ScBatch    *b = &ing->batch;
	volatile int stop_line = -1;
	volatile int lo = 0;

	sc_seal_writes_allowed = true;
	PG_TRY();
	{
		while (lo < b->nlines && stop_line < 0)
		{
			int			hi = lo + 1;

			if (lo > 0 && sc_ingest_wanted_elsewhere(ing))
				break;
			while (hi < b->nlines && b->line_start[hi + 1] - b->line_start[lo] <= SC_WRITE_RUN_BYTES)
				hi++;
			stop_line = sc_write_lines(ing, lo, hi, pause);
			lo = hi;
		}
	}
	PG_FINALLY();
	{
		sc_seal_writes_allowed = false;
	}
	PG_END_TRY();
	*unwritten = lo;
	return stop_line;
}

/*
 * Put the messages the batch is done with first: those before the cut
 * whose run was not deferred, in their order; then the deferred runs and
 * everything from the cut on, in theirs, for the next batch.  Each
 * partition's done messages are the head of its run, so its position
 * moves past them and no further.  Returns the new cut.
 */
static int
sc_batch_set_aside(ScBatch *b, int n, int cut)
{
	ScKafkaMessage *messages = palloc(sizeof(ScKafkaMessage) * n);
	char	  **bad_error = palloc(sizeof(char *) * n);
	uint8	   *fate = palloc(sizeof(uint8) * n);
	int		   *moved = palloc(sizeof(int) * n);	/* old index -> new */
	int			done = 0;
	int			k = 0;

	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < n; i++)
		{
			bool		is_done = i < cut && b->fate[i] != SC_FATE_DEFERRED;

			if (is_done != (pass == 0))
				continue;
			messages[k] = b->messages[i];
			bad_error[k] = b->bad_error[i];
			fate[k] = b->fate[i];
			moved[i] = k++;
			done += is_done;
		}
	memcpy(b->messages, messages, sizeof(ScKafkaMessage) * n);
	memcpy(b->bad_error, bad_error, sizeof(char *) * n);
	memcpy(b->fate, fate, sizeof(uint8) * n);
	for (int l = 0; l < b->nlines; l++)
		b->line_msg[l] = moved[b->line_msg[l]];
	pfree(messages);
	pfree(bad_error);
	pfree(fate);
	pfree(moved);
	return done;
}

/* Dead letters for what is bad before the cut; count what was skipped. */
static void
sc_batch_dead_letters(ScIngest *ing, ScBatchOutcome *outcome)
{
	ScBatch    *b = &ing->batch;

	for (int i = 0; i < outcome->cut; i++)
	{
		if (b->bad_error[i] != NULL)
		{
			sc_dead_letter(ing, &b->messages[i], b->bad_error[i]);
			outcome->dead_letters++;
		}
		else if (b->fate[i] == SC_FATE_TOMBSTONE)
			outcome->tombstones_skipped++;
		else if (b->fate[i] == SC_FATE_REREAD)
			outcome->replayed_skipped++;
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
	ScBatch    *b = &ing->batch;
	MemoryContext old = MemoryContextSwitchTo(ing->batch_cxt);
	bool		pause = cube->bad_policy == SC_BAD_PAUSE;
	bool		deferred = false;
	bool		full;
	int			skip_index = -1;
	int			stop;
	int			first_bad;
	int			stop_line;
	int			unwritten;
	int			written;

	memset(outcome, 0, sizeof(*outcome));
	sc_batch_begin(b, messages, n);
	sc_writers_choose(ing);
	sc_windows_begin(ing);

	SPI_connect();

	/* 1. Parse every message into a line, or into a reason why not. */
	stop = sc_parse_messages(ing, messages, n, 0, sc_cube_time(cube, GetCurrentTimestamp()), pause,
							 &skip_index, &deferred, &full);
	b->line_start[b->nlines] = b->lines.len;
	first_bad = full ? n : stop;	/* a bad message under "pause", or n */

	/* 2. Write the lines; isolate what the table rejects. */
	sc_windows_fresh_routes(ing);
	sc_rollup_batch_begin(ing, b->nlines);
	stop_line = sc_batch_write(ing, pause, &unwritten);
	if (stop_line >= 0)
		first_bad = Min(first_bad, b->line_msg[stop_line]);
	else if (unwritten < b->nlines)
		stop = b->line_msg[unwritten];	/* ended early: the rest waits */
	outcome->cut = Min(first_bad, stop);
	/* The skip is done only if the skipped message is inside the cut. */
	outcome->skip_used = skip_index >= 0 && skip_index < outcome->cut &&
		b->fate[skip_index] != SC_FATE_DEFERRED;
	written = stop_line >= 0 ? stop_line : unwritten;
	for (int l = 0; l < written; l++)
		if (b->bad_error[b->line_msg[l]] == NULL)
			outcome->rows++;
	outcome->rows_direct = b->rows_direct;
	outcome->rows_copy = b->rows_copy;

	/* 3. What the rows tell the catalog and the roll-ups. */
	sc_windows_record(ing, written);
	if (ing->rollup.active && written > 0)
	{
		bool	   *use;

		/* Lines the COPY fallback wrote are formed again for their values. */
		if (sc_rollup_lines_used(ing, written, &use))
			sc_direct_capture_lines(ing, written, use);
		sc_rollup_merge_batch(ing, written, use);
	}

	/* 4. The bad message that pauses the cube; dead letters. */
	if (pause && first_bad < n && first_bad == outcome->cut)
	{
		outcome->paused = true;
		outcome->bad_partition = messages[first_bad].partition;
		outcome->bad_offset = messages[first_bad].offset;
		/* Outlives the transaction: the receiver reports it after COMMIT. */
		outcome->bad_error = MemoryContextStrdup(TopMemoryContext, b->bad_error[first_bad]);
	}
	if (deferred)
		outcome->cut = sc_batch_set_aside(b, n, outcome->cut);
	sc_batch_dead_letters(ing, outcome);

	SPI_finish();
	MemoryContextSwitchTo(old);
}
