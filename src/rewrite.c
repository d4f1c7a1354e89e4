/*-------------------------------------------------------------------------
 *
 * rewrite.c
 *		Moving a window's rows into new storage with their tuple headers, so
 *		that every snapshot sees exactly the rows it saw before.
 *
 * A seal copies an active window into a logged table, and a compaction
 * copies sealed windows into one table; the old partitions are then
 * dropped and the new one attached in their place.  Copied with INSERT ...
 * SELECT, every row would get the copying transaction's xmin: a REPEATABLE
 * READ or SERIALIZABLE transaction whose snapshot was taken before the
 * seal, and that reads the cube after it, would find the new partition
 * through the catalog and none of its rows, a whole window read as empty.
 *
 * So rows move the way CLUSTER and VACUUM FULL move them (rewriteheap.c):
 * every tuple version of the source is read with SnapshotAny, those dead
 * to every snapshot are left behind, and the others are written to the new
 * heap with their xmin, xmax, command ids and infomask as they were, each
 * converted by column name to the target's layout (the target has no
 * dropped columns; a window made before an ALTER TABLE may).  Rows older
 * than every running snapshot are frozen on the way, as CLUSTER freezes
 * them: they were visible to every snapshot already.  The target's
 * relfrozenxid is set to that horizon, and its indexes are built once, at
 * the end.
 *
 * The horizon is the source's, as CLUSTER takes the old heap's.  Never the
 * target's: PostgreSQL gives a table made in the running transaction the
 * horizon of a backend-local table (this transaction's own xid, since no
 * other backend can see it yet), and with it every row committed before the
 * seal, even after another transaction's snapshot, would be frozen and seen
 * by that snapshot; and versions an older snapshot still sees would be
 * dropped as dead.
 *
 * A roll-up's seal moves its window's partial rows *superseded*: each row
 * every snapshot sees is written deleted by the moving transaction, beside
 * the merged rows the caller inserted into the target first.  A snapshot
 * older than the seal sees the partial rows, a newer one the merged rows;
 * the partial rows lie after the merged ones, so that VACUUM, once no
 * snapshot sees them, truncates the target back to the merged rows.
 *
 * The caller holds a lock on each source that keeps writers out (SHARE);
 * readers go on.  The target is a table the caller created in the same
 * transaction, empty or holding only rows the caller inserted: the moved
 * rows are written after them.  No user code runs here; the index build at the end
 * runs index expressions as the target's owner, restricted, as REINDEX does.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "rewrite.h"
#include "access/attmap.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/multixact.h"
#include "access/rewriteheap.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/indexing.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "commands/vacuum.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

struct ScRowMove
{
	Relation	target;
	bool		moved;			/* a source was moved: the horizons are set */
	TransactionId freeze_xid;	/* the oldest of the sources' freeze limits */
	MultiXactId cutoff_multi;	/* and of their multixact cutoffs */
	Datum	   *values;			/* the target's layout */
	bool	   *nulls;
};

/*
 * Start moving rows into target, a heap table made in this transaction
 * (empty, or with rows this transaction inserted: the moved rows go after
 * its last page).
 */
ScRowMove *
sc_rows_move_begin(Oid target)
{
	ScRowMove  *m = palloc0(sizeof(ScRowMove));
	TupleDesc	desc;

	m->target = table_open(target, AccessExclusiveLock);
	if (m->target->rd_rel->relam != HEAP_TABLE_AM_OID ||
		m->target->rd_createSubid == InvalidSubTransactionId)
		elog(ERROR, "relation \"%s\" is not a heap table made in this transaction",
			 RelationGetRelationName(m->target));
	/* the rewrite writes past the last page: the inserted rows' pages on disk first */
	FlushRelationBuffers(m->target);

	desc = RelationGetDescr(m->target);
	m->values = palloc(sizeof(Datum) * desc->natts);
	m->nulls = palloc(sizeof(bool) * desc->natts);
	return m;
}

/*
 * A copy of tuple deleted by the current transaction (as a DELETE would
 * have marked it, its command id the current one): what a superseded row
 * is written as.
 */
static HeapTuple
sc_tuple_superseded(HeapTuple tuple)
{
	HeapTuple	copy = heap_copytuple(tuple);
	HeapTupleHeader h = copy->t_data;

	h->t_infomask &= ~(HEAP_XMAX_COMMITTED | HEAP_XMAX_INVALID | HEAP_XMAX_IS_MULTI |
					   HEAP_XMAX_LOCK_ONLY | HEAP_XMAX_KEYSHR_LOCK | HEAP_XMAX_EXCL_LOCK |
					   HEAP_COMBOCID);
	h->t_infomask2 |= HEAP_KEYS_UPDATED;
	HeapTupleHeaderSetXmax(h, GetCurrentTransactionId());
	HeapTupleHeaderSetCmax(h, GetCurrentCommandId(true), false);
	h->t_ctid = copy->t_self;
	return copy;
}

/*
 * Move every row of source that some snapshot may still see into the
 * target, headers kept; with supersede, the rows every snapshot sees are
 * written deleted by this transaction (see the top of the file).  Returns
 * how many rows every snapshot saw (the rows of the window now).  The
 * caller keeps writers out of source.
 */
int64
sc_rows_move_from(ScRowMove *m, Oid source_oid, bool supersede)
{
	Relation	source = table_open(source_oid, AccessShareLock);
	TupleDesc	sdesc = RelationGetDescr(source);
	TupleDesc	tdesc = RelationGetDescr(m->target);
	AttrMap    *map;
	Datum	   *svalues = palloc(sizeof(Datum) * Max(sdesc->natts, 1));
	bool	   *snulls = palloc(sizeof(bool) * Max(sdesc->natts, 1));
	RewriteState rw;
	TableScanDesc scan;
	HeapTuple	tuple;
	int64		live = 0;
	TransactionId oldest_xmin;
	TransactionId freeze_xid;
	MultiXactId oldest_mxact;
	MultiXactId cutoff_multi;

	if (source->rd_rel->relkind != RELKIND_RELATION || source->rd_rel->relam != HEAP_TABLE_AM_OID)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("partition \"%s\" is not a plain heap table", RelationGetRelationName(source)),
				 errhint("Detach it from the cube; streamcube seals and compacts the windows it made.")));

	/* Target column i + 1 is source column attnums[i] (0: none, NULL). */
	map = build_attrmap_by_name(sdesc, tdesc);

	/*
	 * The horizons of CLUSTER for this source, with no minimum freeze age.
	 * A source made in this transaction (none is today) would get the
	 * local horizon too: take the one of every database's snapshots then.
	 */
	vacuum_set_xid_limits(RELATION_IS_LOCAL(source) ? NULL : source, 0, 0, 0, 0,
						  &oldest_xmin, &oldest_mxact, &freeze_xid, &cutoff_multi);
	if (!m->moved || TransactionIdPrecedes(freeze_xid, m->freeze_xid))
		m->freeze_xid = freeze_xid;
	if (!m->moved || MultiXactIdPrecedes(cutoff_multi, m->cutoff_multi))
		m->cutoff_multi = cutoff_multi;
	m->moved = true;

	rw = begin_heap_rewrite(source, m->target, oldest_xmin, freeze_xid, cutoff_multi);
	scan = table_beginscan(source, SnapshotAny, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Buffer		buf = ((HeapScanDesc) scan)->rs_cbuf;
		HTSV_Result state;
		HeapTuple	copy;

		CHECK_FOR_INTERRUPTS();

		LockBuffer(buf, BUFFER_LOCK_SHARE);
		state = HeapTupleSatisfiesVacuum(tuple, oldest_xmin, buf);
		LockBuffer(buf, BUFFER_LOCK_UNLOCK);

		if (state == HEAPTUPLE_DEAD)
		{
			/* Gone for every snapshot: left behind (its chain resolved). */
			(void) rewrite_heap_dead_tuple(rw, tuple);
			continue;
		}

		/*
		 * LIVE and RECENTLY_DEAD rows keep what each snapshot sees of them.
		 * A row whose inserting or deleting transaction is still in
		 * progress (writers are locked out, so only a transaction that
		 * wrote and has not ended yet, such as a prepared one) keeps its
		 * xid and is resolved later, as in the source.
		 */
		if (state == HEAPTUPLE_LIVE)
			live++;

		heap_deform_tuple(tuple, sdesc, svalues, snulls);
		for (int i = 0; i < tdesc->natts; i++)
		{
			AttrNumber	from = map->attnums[i];

			m->nulls[i] = from == 0 || snulls[from - 1];
			m->values[i] = m->nulls[i] ? (Datum) 0 : svalues[from - 1];
		}
		copy = heap_form_tuple(tdesc, m->values, m->nulls);
		if (supersede && state == HEAPTUPLE_LIVE)
		{
			HeapTuple	gone = sc_tuple_superseded(tuple);

			rewrite_heap_tuple(rw, gone, copy); /* takes the headers of gone */
			heap_freetuple(gone);
		}
		else
			rewrite_heap_tuple(rw, tuple, copy);	/* takes the headers of tuple */
		heap_freetuple(copy);
	}
	table_endscan(scan);
	end_heap_rewrite(rw);
	free_attrmap(map);
	table_close(source, NoLock);
	return live;
}

/*
 * Finish: the target's xid horizons (no unfrozen xmin below them), then its
 * indexes, built from the rows moved.
 */
void
sc_rows_move_end(ScRowMove *m)
{
	Oid			target = RelationGetRelid(m->target);
	Relation	pg_class = table_open(RelationRelationId, RowExclusiveLock);
	HeapTuple	tup = SearchSysCacheCopy1(RELOID, ObjectIdGetDatum(target));
	Form_pg_class form;
	ReindexParams params = {0};

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", target);
	form = (Form_pg_class) GETSTRUCT(tup);
	if (m->moved &&
		(TransactionIdPrecedes(m->freeze_xid, form->relfrozenxid) ||
		 MultiXactIdPrecedes(m->cutoff_multi, form->relminmxid)))
	{
		form->relfrozenxid = m->freeze_xid;
		form->relminmxid = m->cutoff_multi;
		CatalogTupleUpdate(pg_class, &tup->t_self, tup);
	}
	heap_freetuple(tup);
	table_close(pg_class, RowExclusiveLock);
	CommandCounterIncrement();

	table_close(m->target, NoLock);
	(void) reindex_relation(target, 0, &params);
	CommandCounterIncrement();
}
