/*-------------------------------------------------------------------------
 *
 * ingest_direct.c
 *		The direct path: rows formed here, no COPY round trip.
 *
 * Lines into active windows are not handed to COPY: each line is cut where
 * its format said its fields end (sc_line_field_ends(): values written as
 * they are), or else the format splits it into its fields again
 * (ScFormatRoutine.split, COPY's rules for its encoding); the encoding is
 * checked only for a line that is not plain ASCII.  Each field goes
 * through its column's input function (the time column takes the value
 * the format parsed already, a column the format builds itself through
 * its datum()), and the rows are written per window partition (the
 * receiver knows each row's window: no routing) with
 * table_multi_insert() and a bulk-insert state, their indexes updated and
 * their constraints checked as COPY does.  Errors read as COPY's would (an
 * error context naming the column and its value), so a bad row is isolated
 * and dead-lettered exactly as on the COPY path.  Late rows into sealed
 * windows (their guard triggers) and partitions with triggers or stored
 * generated columns take the COPY fallback.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "access/heapam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "ingest_internal.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

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
	bool		pooled;			/* its slots are the pool's (sc_direct_slots) */
	TupleDesc	slot_desc;		/* else its own: the partition's columns, not
								 * reference-counted */
	TupleTableSlot **slots;		/* the rows formed, not written yet */
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
/*
 * Are rows of descriptor a formed and stored as rows of b?  Partitions
 * made LIKE the cube's table have its columns, but not its dropped ones:
 * one made before a column was dropped is laid out otherwise.
 */
static bool
sc_direct_same_layout(TupleDesc a, TupleDesc b)
{
	if (a->natts != b->natts)
		return false;
	for (int i = 0; i < a->natts; i++)
	{
		Form_pg_attribute x = TupleDescAttr(a, i);
		Form_pg_attribute y = TupleDescAttr(b, i);

		if (x->atttypid != y->atttypid || x->atttypmod != y->atttypmod ||
			x->attlen != y->attlen || x->attbyval != y->attbyval ||
			x->attalign != y->attalign || x->attstorage != y->attstorage ||
			x->attisdropped != y->attisdropped)
			return false;
	}
	return true;
}

/* Drop the pool of slots; none of them may be in use. */
static void
sc_direct_drop_pool(ScDirect *d)
{
	for (int i = 0; i < SC_DIRECT_FLUSH && d->pool[i] != NULL; i++)
		ExecDropSingleTupleTableSlot(d->pool[i]);
	MemoryContextDelete(d->pool_cxt);
	d->pool_cxt = NULL;
	d->pool_desc = NULL;
	d->pool = NULL;
}

/*
 * A target's slots.  Their descriptor is a copy of the partition's: a slot
 * made from the relcache's own pins it in the resource owner (3 % of a
 * narrow row's CPU went to pinning and unpinning).  Partitions laid out
 * alike share the receiver's pool of SC_DIRECT_FLUSH slots, made once and
 * kept from batch to batch: a batch writes all its targets once
 * SC_DIRECT_FLUSH rows are formed in all (sc_direct_run), so between two
 * writes they take no more slots than that between them.  Slots made per
 * target and batch cost a replay of history, whose batches write several
 * partitions each, 1-1.5 % of its receiver's CPU (docs/benchmarks.md,
 * "History").  A partition laid out otherwise (made before a column was
 * dropped) gets slots of its own for the batch.
 */
static void
sc_direct_slots(ScIngest *ing, ScDirectTarget *t)
{
	ScDirect   *d = &ing->direct;
	TupleDesc	desc = RelationGetDescr(t->rel);
	const TupleTableSlotOps *ops = table_slot_callbacks(t->rel);
	bool		fits = d->pool_cxt != NULL && ops == d->pool_ops &&
		sc_direct_same_layout(desc, d->pool_desc);

	/* the first target since the cube was read again may find it stale */
	if (d->pool_cxt != NULL && !d->pool_checked && !fits)
		sc_direct_drop_pool(d);
	d->pool_checked = true;
	if (d->pool_cxt == NULL)
	{
		MemoryContext old;

		d->pool_cxt = AllocSetContextCreate(TopMemoryContext, "streamcube direct slots",
											ALLOCSET_DEFAULT_SIZES);
		old = MemoryContextSwitchTo(d->pool_cxt);
		d->pool_desc = CreateTupleDescCopy(desc);
		d->pool_ops = ops;
		d->pool = palloc0(sizeof(TupleTableSlot *) * SC_DIRECT_FLUSH);
		MemoryContextSwitchTo(old);
		fits = true;
	}
	t->pooled = fits;
	if (!t->pooled)
		t->slot_desc = CreateTupleDescCopy(desc);
	t->slots = palloc0(sizeof(TupleTableSlot *) * SC_DIRECT_FLUSH);	/* made as needed */
}

/* The slot of the next row of a target: the pool's next, or one of its own. */
static TupleTableSlot *
sc_direct_next_slot(ScIngest *ing, ScDirectTarget *t, int *pool_used)
{
	ScDirect   *d = &ing->direct;

	if (t->pooled)
	{
		Assert(*pool_used < SC_DIRECT_FLUSH);
		if (d->pool[*pool_used] == NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(d->pool_cxt);

			d->pool[*pool_used] = MakeSingleTupleTableSlot(d->pool_desc, d->pool_ops);
			MemoryContextSwitchTo(old);
		}
		t->slots[t->nslots] = d->pool[(*pool_used)++];
	}
	else if (t->slots[t->nslots] == NULL)
		t->slots[t->nslots] = MakeSingleTupleTableSlot(t->slot_desc, table_slot_callbacks(t->rel));
	return t->slots[t->nslots];
}

/* Drop a target's own slots (the pool's stay). */
static void
sc_direct_drop_slots(ScDirectTarget *t)
{
	if (t->pooled)
		return;
	for (int i = 0; i < SC_DIRECT_FLUSH && t->slots[i] != NULL; i++)
		ExecDropSingleTupleTableSlot(t->slots[i]);
	FreeTupleDesc(t->slot_desc);
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
	t->attno = palloc(sizeof(AttrNumber) * ing->layout.nattrs);
	for (int a = 0; a < ing->layout.nattrs; a++)
		t->attno[a] = get_attnum(relid, strVal(list_nth(ing->layout.attnames, a)));
	sc_direct_slots(ing, t);
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
		sc_direct_drop_slots(t);
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

	ing->direct.in_func = palloc0(sizeof(FmgrInfo) * Max(cube->ncolumns, 1));
	ing->direct.in_ioparam = palloc0(sizeof(Oid) * Max(cube->ncolumns, 1));
	ing->direct.int_type = palloc0(sizeof(Oid) * Max(cube->ncolumns, 1));
	for (int c = 0; c < cube->ncolumns; c++)
	{
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(parent), ing->layout.attnums[c] - 1);
		Oid			func;

		getTypeInputInfo(att->atttypid, &func, &ing->direct.in_ioparam[c]);
		fmgr_info_cxt(func, &ing->direct.in_func[c], ing->cube_cxt);
		/* the types themselves, not domains over them: those check more */
		if (att->atttypid == INT2OID || att->atttypid == INT4OID || att->atttypid == INT8OID)
			ing->direct.int_type[c] = att->atttypid;
	}
	if (ing->direct.cxt == NULL)
		ing->direct.cxt = AllocSetContextCreate(TopMemoryContext, "streamcube direct rows",
												ALLOCSET_DEFAULT_SIZES);
	ing->direct.ready = true;
	MemoryContextSwitchTo(old);
}

/*
 * The direct path's set-up must be made again (the cube was read again:
 * its columns may have changed).  The pool of slots stays unless the
 * first partition written next is laid out otherwise (its columns
 * changed): it is made again for that one (sc_direct_slots).  Called
 * between batches, when no slot of the pool is in use.
 */
void
sc_direct_reset(ScIngest *ing)
{
	ing->direct.ready = false;
	ing->direct.pool_checked = false;
}

/* What one run of the direct path writes with. */
typedef struct ScDirectRun
{
	Relation	parent;
	ParseState *pstate;
	EState	   *estate;
	ResultRelInfo *root;
	List	   *targets;		/* ScDirectTarget: the partitions written */
	ScDirectTarget *parent_target;	/* rows formed for the cube's table, not written */
	bool		time_fast;		/* the time column takes the parsed value */
	char	  **fields;			/* of the current line */
	StringInfoData buf;			/* the current line, split in place */
	ScDirectContext ctx;
	ErrorContextCallback errcb;
} ScDirectRun;

static void
sc_direct_end(ScDirectRun *run)
{
	ScDirectTarget *pt = run->parent_target;

	if (pt != NULL)
		sc_direct_drop_slots(pt);
	sc_direct_close(run->targets);
	FreeExecutorState(run->estate);
	free_parsestate(run->pstate);
	table_close(run->parent, NoLock);
}

/* Open the cube's table for a run. */
static void
sc_direct_open(ScIngest *ing, ScDirectRun *run)
{
	memset(run, 0, sizeof(*run));
	run->parent = table_open(ing->cube->relid, RowExclusiveLock);
	run->pstate = sc_insert_parsestate(ing, run->parent);
	run->estate = CreateExecutorState();
	ExecInitRangeTable(run->estate, run->pstate->p_rtable);
	run->estate->es_output_cid = GetCurrentCommandId(true);
	run->root = makeNode(ResultRelInfo);
	InitResultRelInfo(run->root, run->parent, 1, NULL, 0);
}

/* The rest of a run's set-up, once its targets are known. */
static void
sc_direct_ready(ScIngest *ing, ScDirectRun *run)
{
	Form_pg_attribute att;

	if (!ing->direct.ready)
		sc_direct_prepare(ing, run->parent);
	att = TupleDescAttr(RelationGetDescr(run->parent),
						ing->layout.attnums[ing->cube->time_index] - 1);
	run->time_fast = att->atttypmod < 0 &&
		(att->atttypid == TIMESTAMPTZOID || att->atttypid == TIMESTAMPOID);
	run->fields = palloc(sizeof(char *) * (ing->layout.nattrs + 1));
	initStringInfo(&run->buf);
	run->ctx.relname = RelationGetRelationName(run->parent);
}

/*
 * A run whose rows are formed as rows of the cube's table and not written
 * (a cube that keeps no raw rows, or lines whose values a roll-up needs
 * after COPY wrote them): one target, the table itself, whose constraints
 * are checked.
 */
static void
sc_direct_begin_unwritten(ScIngest *ing, ScDirectRun *run)
{
	ScDirectTarget *t = palloc0(sizeof(ScDirectTarget));

	sc_direct_open(ing, run);
	t->relid = ing->cube->relid;
	t->rel = run->parent;
	t->rri = run->root;
	t->check = RelationGetDescr(run->parent)->constr != NULL;
	t->attno = ing->layout.attnums;
	sc_direct_slots(ing, t);
	run->parent_target = t;
	sc_direct_ready(ing, run);
}

/*
 * Open the cube's table and the partitions of lines [lo, hi).  False,
 * with everything closed again, when one of them must take the COPY
 * fallback: a late line (a sealed window's guard trigger must see it), or
 * a partition the direct path cannot write.
 */
static bool
sc_direct_begin(ScIngest *ing, ScDirectRun *run, int lo, int hi)
{
	ScBatch    *b = &ing->batch;

	for (int l = lo; l < hi && b->nlate > 0; l++)
		if (b->fate[b->line_msg[l]] == SC_FATE_LATE)
			return false;

	sc_direct_open(ing, run);

	/* Every target partition must allow it; find them first. */
	for (int l = lo; l < hi; l++)
	{
		ScWindowEntry *e;
		ScDirectTarget *t = NULL;

		/* A batch holds runs of one window: look each run up once. */
		if (l > lo && b->line_window[l] == b->line_window[l - 1])
			continue;
		e = sc_window_find(ing, b->line_window[l]);
		if (e != NULL && !e->state.sealed && OidIsValid(e->state.relid))
			t = sc_direct_target(ing, &run->targets, e->state.relid, run->root, run->estate);
		if (t == NULL || !sc_direct_writable(t->rel))
		{
			sc_direct_end(run);
			return false;
		}
	}
	sc_direct_ready(ing, run);
	return true;
}

/* The partition of line l, among the run's targets. */
static ScDirectTarget *
sc_direct_target_of(ScIngest *ing, ScDirectRun *run, int l)
{
	ScWindowEntry *e;
	ListCell   *lc;

	if (run->parent_target != NULL)
		return run->parent_target;
	e = sc_window_find(ing, ing->batch.line_window[l]);
	foreach(lc, run->targets)
		if (((ScDirectTarget *) lfirst(lc))->relid == e->state.relid)
			return lfirst(lc);
	elog(ERROR, "no direct target for a window of cube %s", ing->cube->qualified);
	return NULL;				/* keep the compiler quiet */
}

/*
 * An integer column's value, as its input function would make it, for the
 * common case: an optional minus and digits, too few to overflow the type.
 * False for anything else (white space, a plus, a value near the type's
 * limits, no digits), which the input function then reads, and rejects
 * with its own words when it must.
 */
static inline bool
sc_direct_int(const char *s, Oid type, Datum *value)
{
	int			maxdigits = type == INT8OID ? 18 : type == INT4OID ? 9 : 4;
	bool		neg = *s == '-';
	int64		v = 0;
	int			n = 0;

	if (neg)
		s++;
	for (; *s >= '0' && *s <= '9'; s++)
	{
		if (++n > maxdigits)
			return false;
		v = v * 10 + (*s - '0');
	}
	if (n == 0 || *s != '\0')
		return false;
	if (neg)
		v = -v;
	*value = type == INT8OID ? Int64GetDatum(v) :
		type == INT4OID ? Int32GetDatum((int32) v) : Int16GetDatum((int16) v);
	return true;
}

/*
 * Form line l's row in slot, whose columns are t's: cut the line where
 * the format said its fields end, or split it as the format wrote it;
 * convert each field.  Errors name the column and value.
 */
static void
sc_direct_form_row(ScIngest *ing, ScDirectRun *run, ScDirectTarget *t, int l,
				   TupleTableSlot *slot)
{
	ScCube	   *cube = ing->cube;
	ScLayout   *layout = &ing->layout;
	ScBatch    *b = &ing->batch;
	ScKafkaMessage *m = &b->messages[b->line_msg[l]];
	char	  **fields = run->fields;
	const bool *format_datum = layout->format_datum;
	const bool *given = NULL;	/* per field: its value is a datum */
	const Datum *datums = NULL;
	int			t_index = cube->time_index;
	int			nf;

	ExecClearTuple(slot);
	for (int a = 0; a < slot->tts_tupleDescriptor->natts; a++)
	{
		slot->tts_values[a] = (Datum) 0;
		slot->tts_isnull[a] = true;
	}

	run->ctx.attname = NULL;
	run->ctx.value = NULL;
	resetStringInfo(&run->buf);
	appendBinaryStringInfo(&run->buf, b->lines.data + b->line_start[l],
						   b->line_start[l + 1] - b->line_start[l]);
	if (!sc_plain_ascii(run->buf.data, run->buf.len))
		pg_verify_mbstr(GetDatabaseEncoding(), run->buf.data, run->buf.len, false);
	if (b->line_ends[l] >= 0)
	{
		/* The format said where the fields end: cut the line there. */
		const int  *ends = b->ends.ends + b->line_ends[l];
		int			start = 0;

		given = b->ends.given + b->line_ends[l];
		datums = b->ends.datums + b->line_ends[l];

		for (int f = 0; f < cube->ncolumns; f++)
		{
			int			end = (ends[f] >= 0 ? ends[f] : ~ends[f]) - b->line_start[l];

			run->buf.data[end] = '\0';
			fields[f] = ends[f] >= 0 ? run->buf.data + start : NULL;
			start = end + 1;
		}
	}
	else
	{
		nf = ing->fc.format->split(&ing->fc, run->buf.data, run->buf.len, fields, layout->nattrs + 1);
		if (nf != layout->nattrs)
			ereport(ERROR,
					(errcode(ERRCODE_BAD_COPY_FILE_FORMAT),
					 errmsg(nf < layout->nattrs ? "missing data for column \"%s\"" : "extra data after last expected column",
							nf < layout->nattrs ? strVal(list_nth(layout->line_attnames, nf)) : "")));
	}

	for (int c = 0; c < cube->ncolumns; c++)
	{
		AttrNumber	at = t->attno[c];
		char	   *field = fields[layout->line_pos[c]];

		if (at <= 0)
			continue;
		if (given != NULL && given[layout->line_pos[c]])
		{
			slot->tts_values[at - 1] = datums[layout->line_pos[c]];
			slot->tts_isnull[at - 1] = false;
			continue;
		}
		if (c == t_index && run->time_fast && field != NULL)
		{
			slot->tts_values[at - 1] = Int64GetDatum(b->line_ts[l]);
			slot->tts_isnull[at - 1] = false;
			continue;
		}
		run->ctx.attname = cube->columns[c].name;
		run->ctx.value = field;
		if (format_datum != NULL && format_datum[c] && field != NULL &&
			ing->fc.format->datum(&ing->fc, c, field, &slot->tts_values[at - 1]))
		{
			slot->tts_isnull[at - 1] = false;
			continue;
		}
		if (ing->direct.int_type[c] != InvalidOid && field != NULL &&
			sc_direct_int(field, ing->direct.int_type[c], &slot->tts_values[at - 1]))
		{
			slot->tts_isnull[at - 1] = false;
			continue;
		}
		/* NULL too, as COPY does: a domain may refuse it */
		slot->tts_values[at - 1] =
			InputFunctionCall(&ing->direct.in_func[c], field, ing->direct.in_ioparam[c],
							  TupleDescAttr(slot->tts_tupleDescriptor, at - 1)->atttypmod);
		slot->tts_isnull[at - 1] = field == NULL;
	}
	run->ctx.attname = NULL;
	run->ctx.value = NULL;
	if (t->attno[cube->ncolumns] > 0)
	{
		slot->tts_values[t->attno[cube->ncolumns] - 1] = Int32GetDatum(sc_source_kafka_partition(m->partition));
		slot->tts_isnull[t->attno[cube->ncolumns] - 1] = false;
	}
	if (t->attno[cube->ncolumns + 1] > 0)
	{
		slot->tts_values[t->attno[cube->ncolumns + 1] - 1] = Int64GetDatum(m->offset);
		slot->tts_isnull[t->attno[cube->ncolumns + 1] - 1] = false;
	}
	ExecStoreVirtualTuple(slot);
	if (ing->rollup.active)
		sc_rollup_capture(ing, l, slot->tts_values, slot->tts_isnull, t->attno);
}

/* Forget the rows of a target that is not written. */
static void
sc_direct_clear(ScDirectTarget *t)
{
	for (int i = 0; i < t->nslots; i++)
		ExecClearTuple(t->slots[i]);
	t->nslots = 0;
}

/*
 * Form lines [lo, hi) (those where only[l], when only is given) and write
 * them, or with a parent target, check them only.
 */
static void
sc_direct_run(ScIngest *ing, ScDirectRun *run, int lo, int hi, const bool *only)
{
	ScDirectTarget *t = run->parent_target;	/* else of the current run of one window */
	ListCell   *lc;
	int			nformed = 0;	/* rows formed since the last flush, all targets */
	int			pool_used = 0;	/* slots of the pool they took */

	run->errcb.callback = sc_direct_error_context;
	run->errcb.arg = &run->ctx;
	run->errcb.previous = error_context_stack;
	error_context_stack = &run->errcb;

	for (int l = lo; l < hi; l++)
	{
		MemoryContext old;
		TupleTableSlot *slot;

		if (only != NULL && !only[l])
			continue;
		/* a row's values may be dear to form (jsonb of MBs): a cancel or a stop waits for one only */
		CHECK_FOR_INTERRUPTS();
		if (run->parent_target == NULL &&
			(l == lo || ing->batch.line_window[l] != ing->batch.line_window[l - 1]))
			t = sc_direct_target_of(ing, run, l);
		run->ctx.line = l - lo + 1;
		slot = sc_direct_next_slot(ing, t, &pool_used);
		old = MemoryContextSwitchTo(ing->direct.cxt);
		sc_direct_form_row(ing, run, t, l, slot);
		MemoryContextSwitchTo(old);
		if (t->check)
			ExecConstraints(t->rri, slot, run->estate);
		t->nslots++;
		/*
		 * The values of every target live in one context: all are written
		 * once SC_DIRECT_FLUSH rows are formed, however many partitions
		 * they go to.  A batch of history meets several partitions, and
		 * holding up to SC_DIRECT_FLUSH rows of each before the first
		 * flush kept several times the memory a batch of one window does,
		 * for more CPU a row (docs/benchmarks.md, "History").
		 */
		if (++nformed == SC_DIRECT_FLUSH)
		{
			nformed = pool_used = 0;
			if (run->parent_target != NULL)
				sc_direct_clear(run->parent_target);
			foreach(lc, run->targets)
				sc_direct_flush(ing, lfirst(lc), run->estate);
			MemoryContextReset(ing->direct.cxt);
		}
	}
	if (run->parent_target != NULL)
		sc_direct_clear(run->parent_target);
	foreach(lc, run->targets)
		sc_direct_flush(ing, lfirst(lc), run->estate);
	MemoryContextReset(ing->direct.cxt);
	error_context_stack = run->errcb.previous;

	sc_direct_end(run);
	pfree(run->buf.data);
	pfree(run->fields);
}

/*
 * Write lines [lo, hi) directly; false (nothing written) when one of them
 * must take the COPY fallback.  A cube that keeps no raw rows forms and
 * checks every line (late ones too), and writes none: its roll-ups take
 * the values.
 */
static bool
sc_direct_lines_run(ScIngest *ing, int lo, int hi)
{
	ScDirectRun run;

	if (!ing->cube->keep_rows)
		sc_direct_begin_unwritten(ing, &run);
	else if (!sc_direct_begin(ing, &run, lo, hi))
		return false;
	sc_direct_run(ing, &run, lo, hi, NULL);
	return true;
}

const ScLineWriter sc_writer_direct = {
	.name = "direct",
	.run = sc_direct_lines_run,
	.counter = offsetof(ScBatch, rows_direct)
};

/*
 * The values of lines [0, n) where use[l] that no run captured (the COPY
 * fallback wrote them): formed again from their lines, for the roll-ups.
 * They went in once already, so they form without error.
 */
void
sc_direct_capture_lines(ScIngest *ing, int n, const bool *use)
{
	ScDirectRun run;
	bool	   *only = palloc(sizeof(bool) * Max(n, 1));

	for (int l = 0; l < n; l++)
		only[l] = use[l] && !ing->rollup.captured[l];
	sc_direct_begin_unwritten(ing, &run);
	sc_direct_run(ing, &run, 0, n, only);
	pfree(only);
}
