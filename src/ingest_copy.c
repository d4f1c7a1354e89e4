/*-------------------------------------------------------------------------
 *
 * ingest_copy.c
 *		The COPY fallback: lines handed to PostgreSQL's own COPY FROM, fed
 *		from memory (BeginCopyFrom with a data-source callback, then
 *		CopyFrom), which routes rows into partitions, fires the triggers of
 *		sealed windows' guards, and writes with multi-inserts and a
 *		bulk-insert state.  It takes every line the direct path does not
 *		(late rows into sealed windows, partitions with triggers or stored
 *		generated columns, streamcube.direct_insert off).
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "access/table.h"
#include "commands/copy.h"
#include "executor/executor.h"
#include "ingest_internal.h"
#include "parser/parse_relation.h"
#include "utils/rel.h"

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

/*
 * A parse state holding the cube's table as the target of an INSERT of the
 * batch's columns, once the owner's privilege to do so is checked: what
 * COPY and the direct path both start from.
 */
ParseState *
sc_insert_parsestate(ScIngest *ing, Relation rel)
{
	ParseState *pstate = make_parsestate(NULL);
	ParseNamespaceItem *nsitem;
	RangeTblEntry *rte;

	nsitem = addRangeTableEntryForRelation(pstate, rel, RowExclusiveLock, NULL, false, false);
	rte = nsitem->p_rte;
	rte->requiredPerms = ACL_INSERT;
	for (int a = 0; a < ing->layout.nattrs; a++)
		rte->insertedCols = bms_add_member(rte->insertedCols,
										   ing->layout.attnums[a] - FirstLowInvalidHeapAttributeNumber);
	ExecCheckRTPerms(pstate->p_rtable, true);
	return pstate;
}

/* Write lines [lo, hi) with COPY FROM: it takes any line. */
static bool
sc_copy_lines_run(ScIngest *ing, int lo, int hi)
{
	ScCube	   *cube = ing->cube;
	Relation	rel;
	ParseState *pstate;
	CopyFromState cstate;

	copy_source.data = ing->batch.lines.data + ing->batch.line_start[lo];
	copy_source.len = ing->batch.line_start[hi] - ing->batch.line_start[lo];
	copy_source.pos = 0;

	rel = table_open(cube->relid, RowExclusiveLock);
	pstate = sc_insert_parsestate(ing, rel);

	cstate = BeginCopyFrom(pstate, rel, NULL, NULL, false, sc_copy_read,
						   ing->layout.line_attnames, ing->copy_options);
	CopyFrom(cstate);
	EndCopyFrom(cstate);
	free_parsestate(pstate);
	table_close(rel, NoLock);
	return true;
}

const ScLineWriter sc_writer_copy = {
	.name = "copy",
	.run = sc_copy_lines_run,
	.counter = offsetof(ScBatch, rows_copy)
};

/* COPY's options for the lines of the cube's format; with its set-up. */
void
sc_copy_setup(ScIngest *ing)
{
	ing->copy_options = ing->fc.format->encoding == SC_LINE_CSV ? sc_cube_copy_options(ing->cube) : NIL;
}
