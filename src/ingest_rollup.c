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
 * lines whose final attempt succeeded) are merged into each roll-up by one
 * prepared statement: their buckets and columns as arrays, aggregated per
 * bucket and dimensions by PostgreSQL's own aggregates (and those of the
 * extensions hll and tdigest), and added to the rows the roll-up has
 * (INSERT ... ON CONFLICT DO UPDATE).  The rows, the roll-ups and the
 * positions commit together: a message is counted once or not at all.
 *
 * The same statement fills a new roll-up from the rows a cube holds
 * (rollup_sql.c), so both count alike.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "ingest_internal.h"
#include "rollup.h"
#include "utils/array.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

/* One roll-up's merge statement, prepared for the cube's definition. */
struct ScRollupPlan
{
	ScRollup   *rollup;
	int			nargs;
	Oid		   *argtypes;
	int		   *argcols;		/* per argument after the first: its cube column */
	SPIPlanPtr	plan;
};

/* Prepare the merge of r (kept until sc_rollup_plan_free). */
ScRollupPlan *
sc_rollup_plan_make(const ScCube *cube, ScRollup *r)
{
	ScRollupPlan *p = palloc0(sizeof(ScRollupPlan));
	StringInfoData sql;
	SPIPlanPtr	plan;

	initStringInfo(&sql);
	p->rollup = r;
	sc_rollup_merge_sql(cube, r, &sql, &p->argtypes, &p->nargs, &p->argcols);
	plan = SPI_prepare(sql.data, p->nargs, p->argtypes);
	if (plan == NULL)
		elog(ERROR, "could not prepare the merge into roll-up %s: %s",
			 r->qualified, SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	p->plan = plan;
	return p;
}

void
sc_rollup_plan_free(ScRollupPlan *p)
{
	if (p->plan != NULL)
		SPI_freeplan(p->plan);
	p->plan = NULL;
}

/*
 * Merge rows [0, n) where use[i] (all when use is NULL) into the roll-up:
 * ts[i] their time values, values[c][i] and nulls[c][i] the value of cube
 * column c (for the columns the roll-up reads).  Connected to SPI.
 */
void
sc_rollup_plan_run(const ScCube *cube, ScRollupPlan *p, int n, const int64 *ts,
				   Datum **values, bool **nulls, const bool *use)
{
	ScRollup   *r = p->rollup;
	Datum	   *args = palloc(sizeof(Datum) * p->nargs);
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));
	bool	   *elnulls = palloc(sizeof(bool) * Max(n, 1));
	int			m = 0;
	int			dims[1];
	int			lbs[1] = {1};
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			ret;
	MemoryContext cxt = CurrentMemoryContext;

	for (int i = 0; i < n; i++)
		if (use == NULL || use[i])
			elems[m++] = Int64GetDatum(sc_bucket_start(ts[i], r->granularity));
	if (m == 0)
		return;
	dims[0] = m;
	args[0] = PointerGetDatum(construct_array(elems, m,
											  cube->time_type == TIMESTAMPOID ? TIMESTAMPOID : TIMESTAMPTZOID,
											  8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	for (int a = 1; a < p->nargs; a++)
	{
		int			c = p->argcols[a - 1];
		Oid			type = cube->columns[c].type;

		m = 0;
		for (int i = 0; i < n; i++)
			if (use == NULL || use[i])
			{
				elems[m] = values[c][i];
				elnulls[m] = nulls[c][i];
				m++;
			}
		get_typlenbyvalalign(type, &typlen, &typbyval, &typalign);
		args[a] = PointerGetDatum(construct_md_array(elems, elnulls, 1, dims, lbs,
													 type, typlen, typbyval, typalign));
	}
	ret = SPI_execute_plan(p->plan, args, NULL, false, 0);
	if (ret != SPI_OK_INSERT)
		elog(ERROR, "could not merge into roll-up %s: %s", r->qualified, SPI_result_code_string(ret));
	MemoryContextSwitchTo(cxt);	/* SPI leaves its own context current */
}

/* ----------------------------------------------------------------
 * The batch
 * ----------------------------------------------------------------
 */

/*
 * The roll-ups' part of setting up for a cube (again whenever it changes):
 * which columns to capture, and the merge statements.  In the cube's
 * set-up context; the old statements are freed first.
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
	{
		ScRollup   *r = lfirst(lc);

		for (int d = 0; d < r->ndims; d++)
			ri->capture[r->dims[d]] = true;
		for (int m = 0; m < r->nmeasures; m++)
			if (r->measures[m].column >= 0)
				ri->capture[r->measures[m].column] = true;
	}
	for (int c = 0; c < cube->ncolumns; c++)
		if (ri->capture[c])
			get_typlenbyval(cube->columns[c].type, &ri->typlen[c], &ri->typbyval[c]);
	ri->values = palloc0(sizeof(Datum *) * Max(cube->ncolumns, 1));
	ri->nulls = palloc0(sizeof(bool *) * Max(cube->ncolumns, 1));
	ri->nrollups = list_length(cube->rollups);
	ri->plans = palloc0(sizeof(ScRollupPlan *) * ri->nrollups);
	ri->active = true;
}

/* Free the merge statements; before the cube's set-up context goes. */
void
sc_rollup_ingest_release(ScIngest *ing)
{
	ScRollupIngest *ri = &ing->rollup;

	for (int i = 0; i < ri->nrollups; i++)
		if (ri->plans[i] != NULL)
			sc_rollup_plan_free(ri->plans[i]);
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
 * Merge the rows the batch wrote (lines [0, written) where use[l]) into
 * every roll-up of the cube.  Connected to SPI, in the batch's
 * transaction.
 */
void
sc_rollup_merge_batch(ScIngest *ing, int written, const bool *use)
{
	ScRollupIngest *ri = &ing->rollup;
	int			i = 0;
	ListCell   *lc;

	foreach(lc, ing->cube->rollups)
	{
		if (ri->plans[i] == NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(ing->cube_cxt);

			ri->plans[i] = sc_rollup_plan_make(ing->cube, lfirst(lc));
			MemoryContextSwitchTo(old);
		}
		sc_rollup_plan_run(ing->cube, ri->plans[i], written, ing->batch.line_ts,
						   ri->values, ri->nulls, use);
		i++;
	}
}
