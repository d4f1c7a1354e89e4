/*-------------------------------------------------------------------------
 *
 * ingest_rollup.c
 *		The batch into the cube's roll-ups, in the batch's transaction.
 *
 * The direct path hands over the values of each row it formed
 * (sc_rollup_capture: only the columns a roll-up reads, copied out of the
 * row); lines the COPY fallback wrote are formed again for it.  Once the
 * batch's lines are written, the rows that went in (never a dead letter,
 * never a line of a range that was rolled back and bisected: only the
 * lines whose final attempt succeeded) are aggregated per bucket and
 * dimensions, in C, into partial rows appended to each roll-up
 * (rollup_agg.c).  The rows, the roll-ups and the positions commit
 * together: a message is counted once or not at all.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "catalog/pg_type.h"
#include "ingest_internal.h"
#include "rollup.h"
#include "utils/array.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

/* ----------------------------------------------------------------
 * The batch
 * ----------------------------------------------------------------
 */

/*
 * The roll-ups' part of setting up for a cube (again whenever it changes):
 * which columns to capture, and the aggregators (made when first used).
 * In the cube's set-up context; the old ones are freed first.
 */
void
sc_rollup_ingest_setup(ScIngest *ing)
{
	ScCube	   *cube = ing->cube;
	ScRollupIngest *ri = &ing->rollup;
	ListCell   *lc;

	memset(ri, 0, sizeof(*ri));
	if (cube->rollups == NIL)
		return;
	ri->capture = palloc0(sizeof(bool) * Max(cube->ncolumns, 1));
	ri->typlen = palloc0(sizeof(int16) * Max(cube->ncolumns, 1));
	ri->typbyval = palloc0(sizeof(bool) * Max(cube->ncolumns, 1));
	foreach(lc, cube->rollups)
		sc_rollup_agg_columns(cube, lfirst(lc), ri->capture);
	for (int c = 0; c < cube->ncolumns; c++)
		if (ri->capture[c])
			get_typlenbyval(cube->columns[c].type, &ri->typlen[c], &ri->typbyval[c]);
	ri->values = palloc0(sizeof(Datum *) * Max(cube->ncolumns, 1));
	ri->nulls = palloc0(sizeof(bool *) * Max(cube->ncolumns, 1));
	ri->nrollups = list_length(cube->rollups);
	ri->aggs = palloc0(sizeof(ScRollupAgg *) * ri->nrollups);
	ri->active = true;
}

/* Free the aggregators; before the cube's set-up context goes. */
void
sc_rollup_ingest_release(ScIngest *ing)
{
	ScRollupIngest *ri = &ing->rollup;

	for (int i = 0; i < ri->nrollups; i++)
		if (ri->aggs[i] != NULL)
			sc_rollup_agg_free(ri->aggs[i]);
	ri->active = false;
	ri->nrollups = 0;
}

/* Room for the values of n lines, none captured yet. */
void
sc_rollup_batch_begin(ScIngest *ing, int n)
{
	ScRollupIngest *ri = &ing->rollup;

	if (!ri->active)
		return;
	ri->captured = MemoryContextAllocZero(ing->batch_cxt, sizeof(bool) * Max(n, 1));
	for (int c = 0; c < ing->cube->ncolumns; c++)
		if (ri->capture[c])
		{
			ri->values[c] = MemoryContextAllocZero(ing->batch_cxt, sizeof(Datum) * Max(n, 1));
			ri->nulls[c] = MemoryContextAllocZero(ing->batch_cxt, sizeof(bool) * Max(n, 1));
		}
}

/*
 * Line l was formed as a row: values and isnull by the attribute numbers
 * attno (per cube column; <= 0 when the relation lacks it).  The values a
 * roll-up reads are copied out, to live as long as the batch.
 */
void
sc_rollup_capture(ScIngest *ing, int l, const Datum *values, const bool *isnull,
				  const AttrNumber *attno)
{
	ScRollupIngest *ri = &ing->rollup;
	MemoryContext old = MemoryContextSwitchTo(ing->batch_cxt);

	for (int c = 0; c < ing->cube->ncolumns; c++)
	{
		AttrNumber	at;

		if (!ri->capture[c])
			continue;
		at = attno[c];
		if (at <= 0 || isnull[at - 1])
		{
			ri->nulls[c][l] = true;
			ri->values[c][l] = (Datum) 0;
			continue;
		}
		ri->nulls[c][l] = false;
		ri->values[c][l] = datumCopy(values[at - 1], ri->typbyval[c], ri->typlen[c]);
	}
	ri->captured[l] = true;
	MemoryContextSwitchTo(old);
}

/*
 * Which lines [0, written) went in as rows (not bad), in *use; true when
 * one of them was not captured (the COPY fallback wrote it): the caller
 * forms those again (sc_direct_capture_lines) before the merge.
 */
bool
sc_rollup_lines_used(ScIngest *ing, int written, bool **use)
{
	ScBatch    *b = &ing->batch;
	bool		missing = false;

	*use = palloc(sizeof(bool) * Max(written, 1));
	for (int l = 0; l < written; l++)
	{
		(*use)[l] = b->bad_error[b->line_msg[l]] == NULL;
		missing |= (*use)[l] && !ing->rollup.captured[l];
	}
	return missing;
}

/*
 * Aggregate the rows the batch wrote (lines [0, written) where use[l])
 * into every roll-up of the cube: partial rows, appended.  Connected to
 * SPI, in the batch's transaction.
 */
void
sc_rollup_merge_batch(ScIngest *ing, int written, const bool *use)
{
	ScRollupIngest *ri = &ing->rollup;
	int			i = 0;
	ListCell   *lc;

	foreach(lc, ing->cube->rollups)
	{
		if (ri->aggs[i] == NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(ing->cube_cxt);

			ri->aggs[i] = sc_rollup_agg_make(ing->cube, lfirst(lc));
			MemoryContextSwitchTo(old);
		}
		sc_rollup_agg_run(ing->cube, ri->aggs[i], written, ing->batch.line_ts,
						  ri->values, ri->nulls, use, false);
		i++;
	}
}
