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

/*
 * Does line l hold values given as datums (format.h), with no text?  The
 * direct path takes them; COPY needs their text.
 */
static bool
sc_copy_line_given(ScIngest *ing, int l)
{
	ScBatch    *b = &ing->batch;

	if (b->line_ends[l] < 0)
		return false;
	for (int f = 0; f < ing->cube->ncolumns; f++)
		if (b->ends.given[b->line_ends[l] + f])
			return true;
	return false;
}

/* Write lines [lo, hi) with COPY FROM: it takes any line. */
static bool
sc_copy_lines_run(ScIngest *ing, int lo, int hi)
{
	ScCube	   *cube = ing->cube;
	ScBatch    *b = &ing->batch;
	Relation	rel;
	ParseState *pstate;
	CopyFromState cstate;
	bool		render = false;

	copy_source.data = b->lines.data + b->line_start[lo];
	copy_source.len = b->line_start[hi] - b->line_start[lo];
	copy_source.pos = 0;

	/* Lines a format gave datums in are fed with their text written in. */
	for (int l = lo; ing->fc.datums && l < hi && !render; l++)
		render = sc_copy_line_given(ing, l);
	if (render)
	{
		resetStringInfo(&ing->copy_buf);
		for (int l = lo; l < hi; l++)
		{
			if (sc_copy_line_given(ing, l))
				sc_line_render(&ing->fc, b->lines.data, b->line_start[l], b->line_start[l + 1],
							   b->line_ends[l], &ing->copy_buf);
			else
				appendBinaryStringInfo(&ing->copy_buf, b->lines.data + b->line_start[l],
									   b->line_start[l + 1] - b->line_start[l]);
		}
		copy_source.data = ing->copy_buf.data;
		copy_source.len = ing->copy_buf.len;
	}

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
