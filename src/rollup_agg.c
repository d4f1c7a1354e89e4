/*-------------------------------------------------------------------------
 *
 * rollup_agg.c
 *		A roll-up's share of a batch: aggregated in C, appended as partial
 *		rows.
 *
 * A batch's rows are grouped by (bucket, dimensions) in a hash table whose
 * hash and equality functions come from the type cache (the dimension
 * types' own, under their collation, as GROUP BY has them), and each group
 * is aggregated by the very aggregates a query would use: the roll-up's
 * SELECT list is parsed once (so functions, casts and the hll hash of a
 * column are resolved as SQL resolves them), and each of its Aggrefs is
 * run from its pg_aggregate row: the transition function per row, the
 * final function per group, called through fmgr in an aggregate call
 * context like the executor's (AggCheckCallContext finds it), with the
 * executor's rules for strict functions and initial values.  So count,
 * sum, min, max and avg give what PostgreSQL's aggregates give (numeric
 * through numeric's own functions, a float sum in row order), and hll and
 * tdigest what their extensions' aggregates give, without a hand-written
 * sketch and without an SQL statement.  The rows of a group are fed in
 * their order, one group at a time: a group's transition states (an hll's
 * takes 128 kB) live only while it is aggregated.
 *
 * Each group becomes one *partial* row, appended to the roll-up partition
 * of its window with the heap's own insert, in the batch's transaction: an
 * active partition has no key, and the seal or compaction of the window
 * merges its partial rows into one row per group (rollups.c).  A row late
 * into a sealed window is added to the one row of its group there (INSERT
 * ... ON CONFLICT DO UPDATE on that partition's key): late rows are few,
 * and a sealed window keeps one row per group.
 *
 * The fill of a new roll-up from a cube's rows uses the same code
 * (rollup_sql.c), with every partition appended to, sealed ones merged
 * after: both count alike.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_aggregate.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "catalog/pg_class.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "access/sysattr.h"
#include "miscadmin.h"
#include "parser/analyze.h"
#include "parser/parse_agg.h"
#include "parser/parse_coerce.h"
#include "rollup.h"
#include "tcop/tcopprot.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

/* Partial rows written by one table_multi_insert() call, at most. */
#define SC_ROLLUP_INSERT_CHUNK 1000

/* One aggregate of the roll-up's SELECT list, as the executor would run it. */
typedef struct ScAggCall
{
	int			nargs;			/* inputs of the transition function, after the state */
	ExprState **args;
	ExprState  *filter;			/* FILTER (WHERE ...), or NULL */
	FmgrInfo	transfn;
	int16		translen;
	bool		transbyval;
	bool		init_null;
	Datum		init_value;
	bool		has_final;
	FmgrInfo	finalfn;
	int			final_nargs;
	FunctionCallInfo trans_call;
	FunctionCallInfo final_call;
} ScAggCall;

/* The transition state of one aggregate of the group being aggregated. */
typedef struct ScAggState
{
	Datum		value;
	bool		isnull;
	bool		noinit;			/* no value yet: the first input becomes it */
} ScAggState;

struct ScRollupAgg
{
	ScRollup   *rollup;
	MemoryContext cxt;			/* everything below */
	MemoryContext group_cxt;	/* one group's states; reset per group */
	int			ndims;
	int		   *dim_col;		/* cube column of each dimension; -1: an expression */
	ExprState **dim_expr;		/* an expression dimension's, evaluated per row */
	int16	   *dim_len;
	bool	   *dim_byval;
	FmgrInfo   *dim_hash;
	FmgrInfo   *dim_eq;
	Oid		   *dim_coll;
	int			naggs;
	ScAggCall  *aggs;
	ScAggState *states;
	TupleDesc	scan_desc;		/* b, then every cube column */
	TupleTableSlot *scan;
	ExprContext *econtext;		/* per row: the scan slot, its memory */
	AggState   *aggstate;		/* the call context aggregates look for */
	ExprContext *aggcontext;	/* its current aggregate context: group_cxt */
	TupleDesc	out_desc;		/* the roll-up's columns */
	SPIPlanPtr	windows_plan;
};

/* ----------------------------------------------------------------
 * Set-up
 * ----------------------------------------------------------------
 */

/*
 * A relation of no rows, SC_ROLLUP_BUCKET and the cube's columns by name
 * ("(SELECT ...)"), which a roll-up's SELECT list is parsed and tried on.
 */
char *
sc_rollup_input_relation(const ScCube *cube)
{
	StringInfoData s;

	initStringInfo(&s);
	appendStringInfo(&s, "(SELECT NULL::%s AS %s",
					 cube->time_type == TIMESTAMPOID ? "pg_catalog.timestamp" : "pg_catalog.timestamptz",
					 SC_ROLLUP_BUCKET);
	for (int c = 0; c < cube->ncolumns; c++)
		appendStringInfo(&s, ", NULL::%s AS %s", sc_cube_column_type(cube, c),
						 quote_identifier(cube->columns[c].name));
	appendStringInfoString(&s, " LIMIT 0)");
	return s.data;
}

/* The query whose SELECT list the aggregator runs: over typed NULLs. */
static char *
sc_rollup_agg_query(const ScCube *cube, const ScRollup *r)
{
	StringInfoData s;

	initStringInfo(&s);
	appendStringInfo(&s, "SELECT %s FROM %s GROUP BY u.%s", sc_rollup_select_list(cube, r, "u"),
					 psprintf("%s u", sc_rollup_input_relation(cube)), SC_ROLLUP_BUCKET);
	for (int d = 0; d < r->ndims; d++)
		appendStringInfo(&s, ", %s", sc_rollup_dim_sql(cube, r, d, "u"));
	return s.data;
}

/* sql parsed and analyzed as the cube's owner. */
static Query *
sc_rollup_agg_parse(const ScCube *cube, const char *sql)
{
	ScAsOwner	as;
	RawStmt    *raw;
	Query	   *query;

	sc_as_owner_enter(&as, cube->owner);
	raw = linitial_node(RawStmt, pg_parse_query(sql));
	query = parse_analyze_fixedparams(raw, sql, NULL, 0, NULL);
	sc_as_owner_leave(&as);
	return query;
}

/*
 * The columns of the cube r reads, into read[] (by cube column): its
 * dimensions, its measures' columns, and those their FILTERs name.
 */
void
sc_rollup_agg_columns(const ScCube *cube, const ScRollup *r, bool *read)
{
	StringInfoData sql;
	bool		filters = false;

	initStringInfo(&sql);
	appendStringInfoString(&sql, "SELECT 1");
	for (int d = 0; d < r->ndims; d++)
	{
		if (r->dims[d] >= 0)
			read[r->dims[d]] = true;
		else if (r->dim_exprs != NULL && r->dim_exprs[d] != NULL)
		{
			appendStringInfo(&sql, ", (%s)", r->dim_exprs[d]);
			filters = true;
		}
	}
	appendStringInfo(&sql, " FROM %s WHERE true", psprintf("%s u", sc_rollup_input_relation(cube)));
	for (int m = 0; m < r->nmeasures; m++)
	{
		if (r->measures[m].column >= 0)
			read[r->measures[m].column] = true;
		if (r->measures[m].filter != NULL)
		{
			appendStringInfo(&sql, " AND (%s)", r->measures[m].filter);
			filters = true;
		}
	}
	if (filters)
	{
		Query	   *q = sc_rollup_agg_parse(cube, sql.data);
		Bitmapset  *attnos = NULL;
		int			k = -1;

		pull_varattnos(q->jointree->quals, 1, &attnos);
		pull_varattnos((Node *) q->targetList, 1, &attnos);
		while ((k = bms_next_member(attnos, k)) >= 0)
		{
			int			c = k + FirstLowInvalidHeapAttributeNumber - 2;

			if (c >= 0 && c < cube->ncolumns)
				read[c] = true;
		}
	}
}

/* The name of the measure whose aggregate is the roll-up's agg_index-th. */
static const char *
sc_rollup_agg_measure(const ScRollup *r, int agg_index)
{
	int			k = 0;

	for (int m = 0; m < r->nmeasures; m++)
	{
		int			n = r->measures[m].kind == SC_MEASURE_AVG ? 2 : 1;

		if (agg_index >= k && agg_index < k + n)
			return r->measures[m].name;
		k += n;
	}
	return "?";
}

static void sc_rollup_agg_check_expr(const ScCube *cube, Expr *expr, const char *what,
									 const char *name);

typedef struct ScFilterParse
{
	const ScCube *cube;
	const char *sql;
	Query	   *query;
} ScFilterParse;

static void
sc_rollup_filter_parse_fn(void *arg)
{
	ScFilterParse *fp = arg;

	fp->query = sc_rollup_agg_parse(fp->cube, fp->sql);
}

/*
 * Check the FILTER of measure m of r, when creating the roll-up: a
 * condition on the cube's columns (parsed alone, so that an error names
 * the measure), and what sc_rollup_agg_check_expr() asks.
 */
void
sc_rollup_check_filter(const ScCube *cube, const ScRollup *r, const ScMeasure *m)
{
	ScFilterParse fp = {cube, NULL, NULL};
	ErrorData  *edata;
	MemoryContext cxt = CurrentMemoryContext;
	Aggref	   *count;

	fp.sql = psprintf("SELECT pg_catalog.count(*) FILTER (WHERE %s) FROM %s", m->filter,
					  psprintf("%s u", sc_rollup_input_relation(cube)));
	edata = sc_try(sc_rollup_filter_parse_fn, &fp);
	MemoryContextSwitchTo(cxt);
	if (edata != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the FILTER of measure \"%s\" is not a condition on the columns of cube %s",
						m->name, cube->qualified),
				 errdetail("%s", edata->message),
				 errhint("Write FILTER (WHERE <condition>), the condition a boolean expression of the cube's columns.")));
	count = (Aggref *) linitial_node(TargetEntry, fp.query->targetList)->expr;
	if (fp.query->hasSubLinks || !IsA(count, Aggref) || count->aggfilter == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the FILTER of measure \"%s\" is not a condition on the row", m->name),
				 errhint("A FILTER reads the row's columns: no subquery.")));
	sc_rollup_agg_check_expr(cube, count->aggfilter, "FILTER of measure", m->name);
}

/*
 * Check expression dimension d of r, when creating the roll-up: an
 * expression of the cube's columns (parsed alone, so that an error names
 * the dimension), of one row (no aggregate, no subquery), and what
 * sc_rollup_agg_check_expr() asks.
 */
void
sc_rollup_check_dimension(const ScCube *cube, const ScRollup *r, int d)
{
	ScFilterParse fp = {cube, NULL, NULL};
	ErrorData  *edata;
	MemoryContext cxt = CurrentMemoryContext;

	fp.sql = psprintf("SELECT (%s) FROM %s", r->dim_exprs[d], psprintf("%s u", sc_rollup_input_relation(cube)));
	edata = sc_try(sc_rollup_filter_parse_fn, &fp);
	MemoryContextSwitchTo(cxt);
	if (edata != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dimension \"%s\" is not an expression of the columns of cube %s",
						r->dim_names[d], cube->qualified),
				 errdetail("%s", edata->message),
				 errhint("Write '<expression> AS <name>', such as 'lower(country) AS country_lc'.")));
	if (fp.query->hasAggs || fp.query->hasWindowFuncs || fp.query->hasSubLinks ||
		fp.query->hasTargetSRFs)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dimension \"%s\" is not an expression of one row", r->dim_names[d]),
				 errhint("A dimension reads the row's columns: no aggregate, window function, set-returning function or subquery.")));
	sc_rollup_agg_check_expr(cube, linitial_node(TargetEntry, fp.query->targetList)->expr,
							 "dimension", r->dim_names[d]);
}

/* Has the function been created by a superuser or by owner? */
static bool
sc_rollup_trusted_function(Oid func, void *context)
{
	Oid			owner = *(Oid *) context;
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(func));
	Oid			proowner;

	if (!HeapTupleIsValid(tup))
		return false;
	proowner = ((Form_pg_proc) GETSTRUCT(tup))->proowner;
	ReleaseSysCache(tup);
	return proowner != owner && !superuser_arg(proowner);
}

static bool
sc_rollup_untrusted_walker(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (check_functions_in_node(node, sc_rollup_trusted_function, context))
		return true;
	return expression_tree_walker(node, sc_rollup_untrusted_walker, context);
}

/*
 * An expression of a roll-up (a measure's FILTER, a dimension) runs in the
 * receiver, as the cube's owner, on every row: it must read the row alone,
 * the same every time (immutable functions), and call only functions of a
 * superuser or of the cube's owner (never of the role who created the
 * roll-up: an administrator could otherwise run code as the owner).  It is
 * checked parsed, before anything plans it (a planner folds an immutable
 * function's call on constants: it would run).  what and name say which,
 * for the errors.
 */
static void
sc_rollup_agg_check_expr(const ScCube *cube, Expr *expr, const char *what, const char *name)
{
	if (contain_mutable_functions((Node *) expr))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
				 errmsg("the %s \"%s\" is not immutable", what, name),
				 errhint("A roll-up's expression reads the row's columns with immutable functions, like an index's: now() or random() are not.")));
	if (sc_rollup_untrusted_walker((Node *) expr, (void *) &cube->owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("the %s \"%s\" calls a function that neither a superuser nor the owner of cube %s created",
						what, name, cube->qualified),
				 errhint("Receivers run a roll-up's expressions as the cube's owner: they may call only functions the owner trusts.")));
}

static ExprState *
sc_rollup_agg_expr(Expr *expr)
{
	return ExecInitExpr(expression_planner(expr), NULL);
}

/* The executor's view of one Aggref, from its pg_aggregate row. */
static void
sc_rollup_agg_call(ScRollupAgg *agg, Aggref *aggref, ScAggCall *call)
{
	HeapTuple	tup;
	Form_pg_aggregate form;
	Oid			input_types[FUNC_MAX_ARGS];
	int			ninputs;
	Oid			transtype;
	Expr	   *transfn_expr;
	Datum		text_init;
	ListCell   *lc;
	int			i = 0;

	if (aggref->aggkind != AGGKIND_NORMAL || aggref->aggorder != NIL ||
		aggref->aggdistinct != NIL || aggref->aggdirectargs != NIL)
		elog(ERROR, "roll-up %s: aggregate %u is not a plain aggregate",
			 agg->rollup->qualified, aggref->aggfnoid);
	tup = SearchSysCache1(AGGFNOID, ObjectIdGetDatum(aggref->aggfnoid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for aggregate %u", aggref->aggfnoid);
	form = (Form_pg_aggregate) GETSTRUCT(tup);

	ninputs = get_aggregate_argtypes(aggref, input_types);
	transtype = resolve_aggregate_transtype(aggref->aggfnoid, form->aggtranstype, input_types, ninputs);
	get_typlenbyval(transtype, &call->translen, &call->transbyval);

	build_aggregate_transfn_expr(input_types, ninputs, 0, aggref->aggvariadic, transtype,
								 aggref->inputcollid, form->aggtransfn, InvalidOid,
								 &transfn_expr, NULL);
	fmgr_info_cxt(form->aggtransfn, &call->transfn, agg->cxt);
	fmgr_info_set_expr((Node *) transfn_expr, &call->transfn);

	text_init = SysCacheGetAttr(AGGFNOID, tup, Anum_pg_aggregate_agginitval, &call->init_null);
	if (!call->init_null)
	{
		Oid			typinput,
					typioparam;

		getTypeInputInfo(transtype, &typinput, &typioparam);
		call->init_value = OidInputFunctionCall(typinput, TextDatumGetCString(text_init), typioparam, -1);
	}
	else if (call->transfn.fn_strict && !IsBinaryCoercible(input_types[0], transtype))
		elog(ERROR, "aggregate %u needs an initial value", aggref->aggfnoid);

	call->has_final = OidIsValid(form->aggfinalfn);
	if (call->has_final)
	{
		Expr	   *finalfn_expr;

		call->final_nargs = form->aggfinalextra ? ninputs + 1 : 1;
		build_aggregate_finalfn_expr(input_types, call->final_nargs, transtype, aggref->aggtype,
									 aggref->inputcollid, form->aggfinalfn, &finalfn_expr);
		fmgr_info_cxt(form->aggfinalfn, &call->finalfn, agg->cxt);
		fmgr_info_set_expr((Node *) finalfn_expr, &call->finalfn);
		call->final_call = palloc0(SizeForFunctionCallInfo(call->final_nargs));
		InitFunctionCallInfoData(*call->final_call, &call->finalfn, call->final_nargs,
								 aggref->inputcollid, (Node *) agg->aggstate, NULL);
	}
	ReleaseSysCache(tup);

	call->nargs = list_length(aggref->args);
	call->args = palloc0(sizeof(ExprState *) * Max(call->nargs, 1));
	foreach(lc, aggref->args)
		call->args[i++] = sc_rollup_agg_expr(lfirst_node(TargetEntry, lc)->expr);
	if (aggref->aggfilter != NULL)
		call->filter = sc_rollup_agg_expr(aggref->aggfilter);
	call->trans_call = palloc0(SizeForFunctionCallInfo(call->nargs + 1));
	InitFunctionCallInfoData(*call->trans_call, &call->transfn, call->nargs + 1,
							 aggref->inputcollid, (Node *) agg->aggstate, NULL);
}

/*
 * The aggregator of roll-up r, made in a memory context of its own under
 * the current one (sc_rollup_agg_free() deletes it).  The SELECT list is
 * parsed as the cube's owner.
 */
ScRollupAgg *
sc_rollup_agg_make(const ScCube *cube, ScRollup *r)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "streamcube roll-up aggregator",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	ScRollupAgg *agg = palloc0(sizeof(ScRollupAgg));
	char	   *sql = sc_rollup_agg_query(cube, r);
	Query	   *query;
	Query	   *sub;
	ListCell   *lc;
	int			k = 0;
	Relation	rel;

	agg->rollup = r;
	agg->cxt = cxt;
	agg->group_cxt = AllocSetContextCreate(cxt, "streamcube roll-up group", ALLOCSET_DEFAULT_SIZES);

	query = sc_rollup_agg_parse(cube, sql);

	/* The scan row: the subquery's columns, b and c0.. */
	sub = linitial_node(RangeTblEntry, query->rtable)->subquery;
	agg->scan_desc = CreateTemplateTupleDesc(list_length(sub->targetList));
	foreach(lc, sub->targetList)
	{
		Node	   *e = (Node *) lfirst_node(TargetEntry, lc)->expr;

		k++;
		TupleDescInitEntry(agg->scan_desc, k, NULL, exprType(e), exprTypmod(e), 0);
	}
	agg->scan = MakeSingleTupleTableSlot(agg->scan_desc, &TTSOpsVirtual);
	agg->econtext = CreateStandaloneExprContext();
	agg->econtext->ecxt_scantuple = agg->scan;

	/* What AggCheckCallContext() and AggGetTempMemoryContext() read. */
	agg->aggcontext = makeNode(ExprContext);
	agg->aggcontext->ecxt_per_tuple_memory = agg->group_cxt;
	agg->aggcontext->ecxt_per_query_memory = agg->group_cxt;
	agg->aggstate = makeNode(AggState);
	agg->aggstate->curaggcontext = agg->aggcontext;
	agg->aggstate->tmpcontext = agg->econtext;

	/* b, the dimensions (columns), then one Aggref per roll-up column. */
	agg->ndims = r->ndims;
	agg->dim_col = palloc(sizeof(int) * Max(r->ndims, 1));
	agg->dim_hash = palloc0(sizeof(FmgrInfo) * Max(r->ndims, 1));
	agg->dim_eq = palloc0(sizeof(FmgrInfo) * Max(r->ndims, 1));
	agg->dim_coll = palloc(sizeof(Oid) * Max(r->ndims, 1));
	agg->dim_expr = palloc0(sizeof(ExprState *) * Max(r->ndims, 1));
	agg->dim_len = palloc(sizeof(int16) * Max(r->ndims, 1));
	agg->dim_byval = palloc(sizeof(bool) * Max(r->ndims, 1));
	agg->aggs = palloc0(sizeof(ScAggCall) * list_length(query->targetList));
	k = 0;
	foreach(lc, query->targetList)
	{
		TargetEntry *te = lfirst_node(TargetEntry, lc);

		if (k >= 1 && k <= r->ndims)
		{
			Node	   *e = (Node *) te->expr;
			TypeCacheEntry *tc;
			int			d = k - 1;

			if (IsA(e, Var))
				agg->dim_col[d] = ((Var *) e)->varattno - 2;
			else
			{
				sc_rollup_agg_check_expr(cube, (Expr *) e, "dimension", r->dim_names[d]);
				agg->dim_col[d] = -1;
				agg->dim_expr[d] = sc_rollup_agg_expr((Expr *) e);
			}
			agg->dim_coll[d] = exprCollation(e);
			get_typlenbyval(exprType(e), &agg->dim_len[d], &agg->dim_byval[d]);
			tc = lookup_type_cache(exprType(e), TYPECACHE_HASH_PROC_FINFO | TYPECACHE_EQ_OPR_FINFO);
			if (!OidIsValid(tc->hash_proc) || !OidIsValid(tc->eq_opr))
				ereport(ERROR,
						(errcode(ERRCODE_UNDEFINED_FUNCTION),
						 errmsg("dimension \"%s\" of roll-up %s has type %s, which has no hash function",
								r->dim_names[d], r->qualified, format_type_be(exprType(e))),
						 errhint("A dimension's type needs a hash operator class, as GROUP BY by hashing does.")));
			fmgr_info_copy(&agg->dim_hash[d], &tc->hash_proc_finfo, cxt);
			fmgr_info_copy(&agg->dim_eq[d], &tc->eq_opr_finfo, cxt);
		}
		else if (k > r->ndims)
		{
			if (!IsA(te->expr, Aggref))
				elog(ERROR, "roll-up %s: column %d is not an aggregate", r->qualified, k + 1);
			if (((Aggref *) te->expr)->aggfilter != NULL)
				sc_rollup_agg_check_expr(cube, ((Aggref *) te->expr)->aggfilter, "FILTER of measure",
										 sc_rollup_agg_measure(r, agg->naggs));
			sc_rollup_agg_call(agg, (Aggref *) te->expr, &agg->aggs[agg->naggs++]);
		}
		k++;
	}
	agg->states = palloc0(sizeof(ScAggState) * Max(agg->naggs, 1));

	rel = table_open(r->relid, AccessShareLock);
	agg->out_desc = CreateTupleDescCopy(RelationGetDescr(rel));
	table_close(rel, AccessShareLock);
	if (agg->out_desc->natts != 1 + r->ndims + agg->naggs + (r->coarse ? 1 : 0))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("roll-up %s has %d columns, not the %d of its definition",
						r->qualified, agg->out_desc->natts, 1 + r->ndims + agg->naggs + (r->coarse ? 1 : 0)),
				 errhint("Columns of a roll-up are not to be added or dropped: drop the roll-up and create it again.")));
	MemoryContextSwitchTo(old);
	return agg;
}

void
sc_rollup_agg_free(ScRollupAgg *agg)
{
	if (agg->econtext != NULL)
		FreeExprContext(agg->econtext, true);
	if (agg->windows_plan != NULL)
		SPI_freeplan(agg->windows_plan);
	MemoryContextDelete(agg->cxt);
}

/* ----------------------------------------------------------------
 * Aggregation
 * ----------------------------------------------------------------
 */

typedef struct ScGroupSlot
{
	uint32		hash;
	int			group;			/* -1: empty */
} ScGroupSlot;

/* Are lines a and b of one group's key?  dv[d], dn[d]: dimension d's values. */
static inline bool
sc_rollup_same_key(ScRollupAgg *agg, Datum **dv, bool **dn, int a, int b)
{
	for (int d = 0; d < agg->ndims; d++)
	{
		if (dn[d][a] || dn[d][b])
		{
			if (dn[d][a] != dn[d][b])
				return false;
			continue;
		}
		if (!DatumGetBool(FunctionCall2Coll(&agg->dim_eq[d], agg->dim_coll[d], dv[d][a], dv[d][b])))
			return false;
	}
	return true;
}

/* Line l into the scan slot. */
static inline void
sc_rollup_agg_row(ScRollupAgg *agg, int ncolumns, Datum **values, bool **nulls, int l)
{
	TupleTableSlot *slot = agg->scan;

	ExecClearTuple(slot);
	slot->tts_values[0] = (Datum) 0;
	slot->tts_isnull[0] = true;
	for (int c = 0; c < ncolumns; c++)
	{
		if (values[c] == NULL)
			slot->tts_isnull[c + 1] = true;
		else
		{
			slot->tts_values[c + 1] = values[c][l];
			slot->tts_isnull[c + 1] = nulls[c][l];
		}
	}
	ExecStoreVirtualTuple(slot);
}

/* The executor's advance_transition_function(), for one row. */
static inline void
sc_rollup_agg_advance(ScRollupAgg *agg, ScAggCall *call, ScAggState *st)
{
	FunctionCallInfo fcinfo = call->trans_call;
	MemoryContext old;
	Datum		value;

	if (call->filter != NULL)
	{
		bool		isnull;
		Datum		pass = ExecEvalExpr(call->filter, agg->econtext, &isnull);

		if (isnull || !DatumGetBool(pass))
			return;
	}
	for (int i = 0; i < call->nargs; i++)
		fcinfo->args[i + 1].value = ExecEvalExpr(call->args[i], agg->econtext, &fcinfo->args[i + 1].isnull);
	if (call->transfn.fn_strict)
	{
		for (int i = 1; i <= call->nargs; i++)
			if (fcinfo->args[i].isnull)
				return;
		if (st->noinit)
		{
			/* The first input is the state (binary coercible: checked at set-up). */
			st->value = datumCopy(fcinfo->args[1].value, call->transbyval, call->translen);
			st->isnull = false;
			st->noinit = false;
			return;
		}
		if (st->isnull)
			return;
	}
	fcinfo->args[0].value = st->value;
	fcinfo->args[0].isnull = st->isnull;
	fcinfo->isnull = false;
	old = MemoryContextSwitchTo(agg->econtext->ecxt_per_tuple_memory);
	value = FunctionCallInvoke(fcinfo);
	MemoryContextSwitchTo(agg->group_cxt);
	if (!call->transbyval && DatumGetPointer(value) != DatumGetPointer(st->value))
	{
		if (!fcinfo->isnull)
			value = datumCopy(value, false, call->translen);
		if (!st->isnull)
			pfree(DatumGetPointer(st->value));
	}
	MemoryContextSwitchTo(old);
	st->value = value;
	st->isnull = fcinfo->isnull;
	st->noinit = false;
}

/* The executor's finalize_aggregate(), in the group's context. */
static inline Datum
sc_rollup_agg_final(ScRollupAgg *agg, ScAggCall *call, ScAggState *st, bool *isnull)
{
	FunctionCallInfo fcinfo = call->final_call;
	Datum		result;

	if (!call->has_final)
	{
		*isnull = st->isnull;
		return st->value;
	}
	if (call->finalfn.fn_strict && st->isnull)
	{
		*isnull = true;
		return (Datum) 0;
	}
	fcinfo->args[0].value = st->value;
	fcinfo->args[0].isnull = st->isnull;
	for (int i = 1; i < call->final_nargs; i++)
	{
		fcinfo->args[i].value = (Datum) 0;
		fcinfo->args[i].isnull = true;
	}
	fcinfo->isnull = false;
	result = FunctionCallInvoke(fcinfo);
	*isnull = fcinfo->isnull;
	return result;
}

/* ----------------------------------------------------------------
 * Writing
 * ----------------------------------------------------------------
 */

/* The partitions of r for windows[0..n): *relids and *sealed, in that order. */
static void
sc_rollup_agg_partitions(ScRollupAgg *agg, const ScCube *cube, const int64 *windows, int n,
						 Oid *relids, bool *sealed)
{
	Datum	   *elems = palloc(sizeof(Datum) * n);
	SPITupleTable *tab;

	for (int i = 0; i < n; i++)
	{
		elems[i] = TimestampTzGetDatum(windows[i]);
		relids[i] = InvalidOid;
	}
	if (sc_catalog_exec_kept(&agg->windows_plan,
							 "SELECT w.window_start, w.relid::oid, w.state = 'sealed' "
							 "FROM streamcube.rollup_windows w "
							 "WHERE w.rollup_id = $1 AND w.window_start = ANY ($2)",
							 2, (Oid[]) {INT4OID, TIMESTAMPTZARRAYOID},
							 (Datum[]) {Int32GetDatum(agg->rollup->rollup_id),
								 PointerGetDatum(construct_array(elems, n, TIMESTAMPTZOID, 8,
																 FLOAT8PASSBYVAL, TYPALIGN_DOUBLE))},
							 NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.rollup_windows");
	tab = SPI_tuptable;
	for (uint64 k = 0; k < SPI_processed; k++)
	{
		bool		isnull;
		int64		w = DatumGetTimestampTz(SPI_getbinval(tab->vals[k], tab->tupdesc, 1, &isnull));

		for (int i = 0; i < n; i++)
			if (windows[i] == w)
			{
				relids[i] = DatumGetObjectId(SPI_getbinval(tab->vals[k], tab->tupdesc, 2, &isnull));
				sealed[i] = DatumGetBool(SPI_getbinval(tab->vals[k], tab->tupdesc, 3, &isnull));
			}
	}
	for (int i = 0; i < n; i++)
		if (!OidIsValid(relids[i]))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("roll-up %s has no partition for window %s of cube %s",
							agg->rollup->qualified, sc_bound_literal(cube, windows[i]), cube->qualified),
					 errhint("A roll-up's partition of a window is made with the cube's; was it dropped by hand?")));
}

/* rows[0..n) through the statement sql (its parameters: the roll-up's columns). */
static void
sc_rollup_agg_by_sql(ScRollupAgg *agg, const char *sql, HeapTuple *rows, int n)
{
	int			natts = agg->out_desc->natts;
	Oid		   *types = palloc(sizeof(Oid) * natts);
	Datum	   *values = palloc(sizeof(Datum) * natts);
	bool	   *isnull = palloc(sizeof(bool) * natts);
	char	   *nulls = palloc(natts + 1);
	SPIPlanPtr	plan;

	for (int a = 0; a < natts; a++)
		types[a] = TupleDescAttr(agg->out_desc, a)->atttypid;
	plan = SPI_prepare(sql, natts, types);
	if (plan == NULL)
		elog(ERROR, "could not prepare \"%s\": %s", sql, SPI_result_code_string(SPI_result));
	for (int i = 0; i < n; i++)
	{
		int			ret;

		heap_deform_tuple(rows[i], agg->out_desc, values, isnull);
		for (int a = 0; a < natts; a++)
			nulls[a] = isnull[a] ? 'n' : ' ';
		ret = SPI_execute_plan(plan, values, nulls, false, 0);
		if (ret != SPI_OK_INSERT)
			elog(ERROR, "could not write into roll-up %s: %s", agg->rollup->qualified,
				 SPI_result_code_string(ret));
	}
	SPI_freeplan(plan);
}

/* Has rel a unique index (its key)? */
static bool
sc_relation_has_unique_index(Relation rel)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	bool		unique = false;

	foreach(lc, indexes)
		unique |= sc_index_is_unique(lfirst_oid(lc));
	list_free(indexes);
	return unique;
}

/*
 * Append rows[0..n) to partition relid with the heap's insert (an active
 * partition has no index; one someone added is kept by SQL instead).
 */
static void
sc_rollup_agg_append(ScRollupAgg *agg, Oid relid, HeapTuple *rows, int n)
{
	Relation	rel = table_open(relid, RowExclusiveLock);
	BulkInsertState bistate;
	TupleTableSlot **slots;
	int			nslots;
	CommandId	cid;

	if (rel->rd_rel->relhasindex || RelationGetDescr(rel)->natts != agg->out_desc->natts)
	{
		/*
		 * Indexes to keep: by SQL.  A unique one is the key a 0.3.0 roll-up
		 * had on every partition, until ALTER EXTENSION ... UPDATE drops it
		 * from the active ones: the rows are added to it, as 0.3.0 did.
		 */
		bool		keyed = sc_relation_has_unique_index(rel);

		table_close(rel, NoLock);
		sc_rollup_agg_by_sql(agg, sc_rollup_insert_sql(agg->rollup, agg->out_desc,
													   sc_relation_qualified(relid), keyed),
							 rows, n);
		return;
	}
	bistate = GetBulkInsertState();
	cid = GetCurrentCommandId(true);
	nslots = Min(n, SC_ROLLUP_INSERT_CHUNK);
	slots = palloc(sizeof(TupleTableSlot *) * nslots);
	for (int i = 0; i < nslots; i++)
		slots[i] = MakeSingleTupleTableSlot(RelationGetDescr(rel), &TTSOpsHeapTuple);
	for (int done = 0; done < n; done += nslots)
	{
		int			k = Min(nslots, n - done);

		for (int i = 0; i < k; i++)
			ExecStoreHeapTuple(rows[done + i], slots[i], false);
		table_multi_insert(rel, slots, k, cid, 0, bistate);
		for (int i = 0; i < k; i++)
			ExecClearTuple(slots[i]);
	}
	for (int i = 0; i < nslots; i++)
		ExecDropSingleTupleTableSlot(slots[i]);
	FreeBulkInsertState(bistate);
	table_finish_bulk_insert(rel, 0);
	table_close(rel, NoLock);
}

static int
sc_int64_cmp(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return x < y ? -1 : x > y;
}

/* Write the groups' rows, each into its window's partition of the roll-up. */
static void
sc_rollup_agg_write(ScRollupAgg *agg, const ScCube *cube, HeapTuple *rows, const int64 *window,
					int ngroups, bool fill)
{
	int64	   *windows = palloc(sizeof(int64) * ngroups);
	Oid		   *relids;
	bool	   *sealed;
	HeapTuple  *part_rows = palloc(sizeof(HeapTuple) * ngroups);
	int			nwindows = 0;

	memcpy(windows, window, sizeof(int64) * ngroups);
	qsort(windows, ngroups, sizeof(int64), sc_int64_cmp);
	for (int g = 0; g < ngroups; g++)
		if (nwindows == 0 || windows[nwindows - 1] != windows[g])
			windows[nwindows++] = windows[g];
	relids = palloc(sizeof(Oid) * nwindows);
	sealed = palloc(sizeof(bool) * nwindows);
	sc_rollup_agg_partitions(agg, cube, windows, nwindows, relids, sealed);

	for (int w = 0; w < nwindows; w++)
	{
		int			n = 0;

		/* windows of one partition (a compacted day) are written once */
		if (w > 0 && relids[w] == relids[w - 1])
			continue;
		for (int g = 0; g < ngroups; g++)
		{
			int			k;

			for (k = w; k < nwindows && relids[k] == relids[w]; k++)
				if (windows[k] == window[g])
					break;
			if (k < nwindows && relids[k] == relids[w])
				part_rows[n++] = rows[g];
		}
		if (sealed[w] && !fill)
			sc_rollup_agg_by_sql(agg, sc_rollup_insert_sql(agg->rollup, agg->out_desc,
														   sc_relation_qualified(relids[w]), true),
								 part_rows, n);
		else
			sc_rollup_agg_append(agg, relids[w], part_rows, n);
	}
}

/*
 * The values of each dimension of the lines a batch hands the roll-up
 * (those use[] says, or all): a column's as the batch captured them, an
 * expression's evaluated per line, into *dv and *dn.
 */
static void
sc_rollup_agg_dims(const ScCube *cube, ScRollupAgg *agg, int n, Datum **values, bool **nulls,
				   const bool *use, Datum ***dv_out, bool ***dn_out)
{
	Datum	  **dv = palloc(sizeof(Datum *) * Max(agg->ndims, 1));
	bool	  **dn = palloc(sizeof(bool *) * Max(agg->ndims, 1));

	for (int d = 0; d < agg->ndims; d++)
	{
		if (agg->dim_col[d] >= 0)
		{
			dv[d] = values[agg->dim_col[d]];
			dn[d] = nulls[agg->dim_col[d]];
			continue;
		}
		dv[d] = palloc(sizeof(Datum) * Max(n, 1));
		dn[d] = palloc(sizeof(bool) * Max(n, 1));
	}
	for (int d = 0; d < agg->ndims; d++)
	{
		if (agg->dim_col[d] >= 0)
			continue;
		for (int l = 0; l < n; l++)
		{
			Datum		v;

			if (use != NULL && !use[l])
				continue;
			sc_rollup_agg_row(agg, cube->ncolumns, values, nulls, l);
			v = ExecEvalExpr(agg->dim_expr[d], agg->econtext, &dn[d][l]);
			dv[d][l] = dn[d][l] ? (Datum) 0 : datumCopy(v, agg->dim_byval[d], agg->dim_len[d]);
			ResetExprContext(agg->econtext);
		}
	}
	*dv_out = dv;
	*dn_out = dn;
}

/*
 * Aggregate lines [0, n) where use[l] (all when use is NULL) into partial
 * rows of the roll-up, and write them: ts[l] the lines' time values,
 * values[c][l] and nulls[c][l] the value of cube column c (NULL arrays for
 * the columns no roll-up reads).  With fill, sealed partitions are
 * appended to as well (the caller merges them after).  Connected to SPI;
 * the rows are built in the current memory context.
 */
void
sc_rollup_agg_run(const ScCube *cube, ScRollupAgg *agg, int n, const int64 *ts,
				  Datum **values, bool **nulls, const bool *use, bool fill)
{
	ScRollup   *r = agg->rollup;
	MemoryContext out_cxt = CurrentMemoryContext;
	int		   *group_of = palloc(sizeof(int) * Max(n, 1));
	int		   *first = palloc(sizeof(int) * Max(n, 1));
	int64	   *bucket = palloc(sizeof(int64) * Max(n, 1));
	int		   *start;
	int		   *order;
	int			ngroups = 0;
	int			size = 16;
	ScGroupSlot *table;
	HeapTuple  *rows;
	int64	   *window;
	int			natts = agg->out_desc->natts;
	Datum	   *ov = palloc(sizeof(Datum) * natts);
	bool	   *on = palloc(sizeof(bool) * natts);
	Datum	  **dv;
	bool	  **dn;

	while (size < 2 * n)
		size *= 2;
	table = palloc(sizeof(ScGroupSlot) * size);
	for (int i = 0; i < size; i++)
		table[i].group = -1;

	/* 0. The dimensions' values. */
	sc_rollup_agg_dims(cube, agg, n, values, nulls, use, &dv, &dn);

	/* 1. Each line's group: hash of the bucket and dimensions, then equality. */
	for (int l = 0; l < n; l++)
	{
		int64		b;
		uint32		h;
		int			i;

		group_of[l] = -1;
		if (use != NULL && !use[l])
			continue;
		/* a coarse roll-up's rows of one bucket stay apart by window */
		b = r->coarse ? sc_window_start(cube, ts[l]) : sc_bucket_start(ts[l], r->granularity);
		h = hash_combine(murmurhash32((uint32) b), murmurhash32((uint32) ((uint64) b >> 32)));
		for (int d = 0; d < agg->ndims; d++)
			h = hash_combine(h, dn[d][l] ? 0x9e3779b9 :
							 DatumGetUInt32(FunctionCall1Coll(&agg->dim_hash[d], agg->dim_coll[d],
															  dv[d][l])));
		for (i = h & (size - 1); table[i].group >= 0; i = (i + 1) & (size - 1))
		{
			int			g = table[i].group;

			if (table[i].hash == h && bucket[g] == b &&
				sc_rollup_same_key(agg, dv, dn, first[g], l))
				break;
		}
		if (table[i].group < 0)
		{
			table[i].hash = h;
			table[i].group = ngroups;
			first[ngroups] = l;
			bucket[ngroups] = b;
			ngroups++;
		}
		group_of[l] = table[i].group;
	}
	if (ngroups == 0)
		return;

	/* 2. The lines of each group, in their order (a counting sort). */
	start = palloc0(sizeof(int) * (ngroups + 1));
	order = palloc(sizeof(int) * Max(n, 1));
	for (int l = 0; l < n; l++)
		if (group_of[l] >= 0)
			start[group_of[l] + 1]++;
	for (int g = 0; g < ngroups; g++)
		start[g + 1] += start[g];
	{
		int		   *next = palloc(sizeof(int) * ngroups);

		memcpy(next, start, sizeof(int) * ngroups);
		for (int l = 0; l < n; l++)
			if (group_of[l] >= 0)
				order[next[group_of[l]]++] = l;
	}

	/* 3. Each group aggregated, one at a time, into a row. */
	rows = palloc(sizeof(HeapTuple) * ngroups);
	window = palloc(sizeof(int64) * ngroups);
	for (int g = 0; g < ngroups; g++)
	{
		int			f = first[g];

		MemoryContextSwitchTo(agg->group_cxt);
		for (int a = 0; a < agg->naggs; a++)
		{
			ScAggCall  *call = &agg->aggs[a];
			ScAggState *st = &agg->states[a];

			st->noinit = call->init_null;
			st->isnull = call->init_null;
			st->value = call->init_null ? (Datum) 0 :
				datumCopy(call->init_value, call->transbyval, call->translen);
		}
		for (int k = start[g]; k < start[g + 1]; k++)
		{
			sc_rollup_agg_row(agg, cube->ncolumns, values, nulls, order[k]);
			for (int a = 0; a < agg->naggs; a++)
				sc_rollup_agg_advance(agg, &agg->aggs[a], &agg->states[a]);
			ResetExprContext(agg->econtext);
			CHECK_FOR_INTERRUPTS();
		}
		ov[0] = Int64GetDatum(sc_bucket_start(bucket[g], r->granularity));
		on[0] = false;
		if (r->coarse)
		{
			ov[natts - 1] = Int64GetDatum(bucket[g]);	/* the window */
			on[natts - 1] = false;
		}
		for (int d = 0; d < agg->ndims; d++)
		{
			ov[1 + d] = dv[d][f];
			on[1 + d] = dn[d][f];
		}
		for (int a = 0; a < agg->naggs; a++)
			ov[1 + agg->ndims + a] = sc_rollup_agg_final(agg, &agg->aggs[a], &agg->states[a],
														 &on[1 + agg->ndims + a]);
		MemoryContextSwitchTo(out_cxt);
		rows[g] = heap_form_tuple(agg->out_desc, ov, on);
		window[g] = sc_window_start(cube, bucket[g]);
		ReScanExprContext(agg->aggcontext);
	}

	/* 4. Into the roll-up's partitions. */
	sc_rollup_agg_write(agg, cube, rows, window, ngroups, fill);
}
