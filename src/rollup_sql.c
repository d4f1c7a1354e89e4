/*-------------------------------------------------------------------------
 *
 * rollup_sql.c
 *		streamcube_create_rollup and streamcube_drop_rollup.
 *
 * A roll-up is created in one consistent step on a live cube: the cube's
 * row is locked FOR UPDATE, which waits for the batch in flight and keeps
 * the next out until we commit (every batch holds the row FOR KEY SHARE),
 * and the cube's window lock keeps windows from being created meanwhile.
 * Under both, the roll-up gets a partition per window of the cube (logged
 * for sealed windows), is filled from every row the cube holds (through the
 * same merge statement receivers use), and the cube's config_version
 * moves: the first batch after our commit reads the cube again and merges
 * into the roll-up.  No message is counted twice or missed at the edge.
 *
 * Everything that touches the cube's tables runs as the cube's owner,
 * whoever asks (an administrator), under SECURITY_RESTRICTED_OPERATION.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "cube_catalog.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "rollup.h"
#include "sealed.h"
#include "access/htup_details.h"
#include "catalog/pg_attribute.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/syscache.h"
#include "utils/datum.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/relcache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

PG_FUNCTION_INFO_V1(sc_create_rollup);
PG_FUNCTION_INFO_V1(sc_drop_rollup);
PG_FUNCTION_INFO_V1(sc_rollups_to_0_4);

/* Rows a creation reads from the cube per merge. */
#define SC_ROLLUP_FILL_CHUNK 50000

/* Is name a column name of r already (bucket, dimensions, measures)? */
static void
sc_rollup_check_name(List **names, const char *name, const char *what)
{
	ListCell   *lc;

	if (strlen(name) == 0 || strlen(name) >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("%s \"%s\" is not a valid column name", what, name),
				 errhint("Column names are 1 to %d bytes long.", NAMEDATALEN - 1)));
	foreach(lc, *names)
		if (strcmp(lfirst(lc), name) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_COLUMN),
					 errmsg("%s \"%s\" would be a second column of that name in the roll-up", what, name),
					 errhint("The roll-up has a column bucket, one per dimension and one per measure (two for avg: name_sum, name_count); give each measure another name.")));
	*names = lappend(*names, pstrdup(name));
}

/*
 * A dimension given as "<expression> AS <name>": true, with its parts in
 * *expr and *name (the name as SQL reads an identifier); false when it is
 * not so written.  The expression is checked later, parsed.
 */
static bool
sc_rollup_dimension_expression(const char *dim, char **expr, char **name)
{
	const char *as = NULL;
	List	   *names;

	for (const char *p = dim; (p = strchr(p, ' ')) != NULL; p++)
		if (pg_strncasecmp(p, " as ", 4) == 0)
			as = p;
	if (as == NULL || as == dim)
		return false;
	if (!SplitIdentifierString(pstrdup(as + 4), '.', &names) || list_length(names) != 1)
		return false;
	*name = linitial(names);
	*expr = pnstrdup(dim, as - dim);
	return true;
}

typedef struct ScTryMeasure
{
	const char *sql;
} ScTryMeasure;

static void
sc_try_measure_fn(void *arg)
{
	SPI_execute(((ScTryMeasure *) arg)->sql, true, 0);
}

/*
 * Each measure must apply to its column's type: tried alone, so that the
 * error names the measure.  Returns the types of the roll-up's columns (a
 * query over no rows: its result columns).
 */
static TupleDesc
sc_rollup_result_types(const ScCube *cube, ScRollup *r)
{
	const char *from = sc_rollup_input_relation(cube);
	ScRollup	one = *r;
	StringInfoData sql;
	ScAsOwner	as;
	TupleDesc	types;

	/*
	 * As the cube's owner: a domain's check or a type's input function of
	 * the cube's columns is the owner's code, never to run as an admin.
	 */
	for (int d = 0; d < r->ndims; d++)
		if (r->dim_exprs[d] != NULL)
			sc_rollup_check_dimension(cube, r, d);
	sc_as_owner_enter(&as, cube->owner);
	for (int m = 0; m < r->nmeasures; m++)
	{
		ScMeasure  *ms = &r->measures[m];
		ScTryMeasure t;
		ErrorData  *edata;

		one.ndims = 0;
		one.nmeasures = 1;
		one.measures = ms;
		/* an extension that is missing is named before anything is tried */
		(void) sc_rollup_extension_schema(ms->kind, ms->name);
		if (ms->filter != NULL)
			sc_rollup_check_filter(cube, r, ms);
		t.sql = psprintf("SELECT %s FROM %s u GROUP BY u.%s", sc_rollup_select_list(cube, &one, "u"), from,
						 SC_ROLLUP_BUCKET);
		edata = sc_try(sc_try_measure_fn, &t);
		if (edata != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("measure \"%s\" cannot be %s of column \"%s\" (type %s)",
							ms->name, sc_measure_function(ms->kind),
							cube->columns[ms->column].name,
							format_type_be(cube->columns[ms->column].type)),
					 errdetail("%s", edata->message),
					 errhint("sum and avg take numbers, min and max any type with an order, tdigest a number, count and hll any type.")));
	}
	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT %s FROM %s u GROUP BY u.%s", sc_rollup_select_list(cube, r, "u"), from,
					 SC_ROLLUP_BUCKET);
	for (int d = 0; d < r->ndims; d++)
		appendStringInfo(&sql, ", %s", sc_rollup_dim_sql(cube, r, d, "u"));
	if (SPI_execute(sql.data, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not find the types of the roll-up's columns");
	types = CreateTupleDescCopy(SPI_tuptable->tupdesc);
	sc_as_owner_leave(&as);
	return types;
}

/* The roll-up's table, as the cube's owner; returns its oid. */
static Oid
sc_rollup_create_table(const ScCube *cube, const ScRollup *r, Oid nsp, const char *relname,
					   TupleDesc types)
{
	char	   *qualified = quote_qualified_identifier(get_namespace_name(nsp), relname);
	StringInfoData sql;
	int			a = 0;
	ScAsOwner	as;
	Oid			relid;

	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE TABLE %s (bucket %s NOT NULL", qualified,
					 cube->time_type == TIMESTAMPOID ? "timestamp" : "timestamptz");
	a++;
	for (int d = 0; d < r->ndims; d++, a++)
	{
		Form_pg_attribute att = TupleDescAttr(types, a);

		appendStringInfo(&sql, ", %s %s", quote_identifier(r->dim_names[d]),
						 r->dims[d] >= 0 ? sc_cube_column_type(cube, r->dims[d])
						 : format_type_with_typemod(att->atttypid, att->atttypmod));
	}
	for (int m = 0; m < r->nmeasures; m++)
	{
		const ScMeasure *ms = &r->measures[m];
		int			ncols = ms->kind == SC_MEASURE_AVG ? 2 : 1;

		for (int k = 0; k < ncols; k++, a++)
		{
			Form_pg_attribute att = TupleDescAttr(types, a);
			const char *name = ms->kind != SC_MEASURE_AVG ? ms->name
				: psprintf("%s_%s", ms->name, k == 0 ? "sum" : "count");
			bool		counts = ms->kind == SC_MEASURE_COUNT || ms->kind == SC_MEASURE_COUNT_ALL ||
				(ms->kind == SC_MEASURE_AVG && k == 1);

			appendStringInfo(&sql, ", %s %s%s", quote_identifier(name),
							 format_type_with_typemod(att->atttypid, att->atttypmod),
							 counts ? " NOT NULL" : "");
		}
	}
	if (r->coarse)
		appendStringInfo(&sql, ", %s %s NOT NULL) PARTITION BY RANGE (%s)", SC_ROLLUP_WINDOW,
						 cube->time_type == TIMESTAMPOID ? "timestamp" : "timestamptz", SC_ROLLUP_WINDOW);
	else
		appendStringInfoString(&sql, ") PARTITION BY RANGE (bucket)");

	sc_as_owner_enter(&as, cube->owner);
	if (SPI_execute(sql.data, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not create roll-up %s", qualified);
	relid = get_relname_relid(relname, nsp);

	sc_as_owner_leave(&as);

	/*
	 * Active partitions have no key: batches append partial rows.  On a
	 * 0.3.0 catalog (the library is newer than the extension, until ALTER
	 * EXTENSION ... UPDATE), the table has the key as 0.3.0 made it, so
	 * that the update finds every roll-up alike.
	 */
	if (!sc_rollup_catalog_current())
	{
		ScRollup	keyed = *r;

		keyed.relid = relid;
		sc_rollup_key_create(&keyed, relid);
	}
	sc_as_owner_enter(&as, cube->owner);
	SPI_execute(psprintf("COMMENT ON TABLE %s IS %s", qualified,
						 quote_literal_cstr(psprintf("Roll-up of cube %s, kept by streamcube", cube->qualified))),
				false, 0);
	sc_as_owner_leave(&as);
	return relid;
}

/*
 * A partition of the roll-up per partition of the cube: per window, sealed
 * where the cube's is, and one for all the windows of a sealed partition
 * that holds many (a compacted day), of its bounds.  (An active partition
 * of many windows, a bucket of history, gets one per window: its seal
 * seals them window by window, the roll-up's with them.)
 */
static void
sc_rollup_create_windows(const ScCube *cube, int32 rollup_id, Oid relid)
{
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(cube->cube_id);
	SPITupleTable *tab;
	uint64		n;

	sc_catalog_exec("SELECT s.relid::oid, count(*), bool_and(s.state = 'sealed'), "
					"       array_agg(s.window_start ORDER BY s.window_start), "
					"       array_agg(s.window_end ORDER BY s.window_start), "
					"       array_agg(s.state = 'sealed' ORDER BY s.window_start) "
					"FROM streamcube.segment_catalog s WHERE s.cube_id = $1 "
					"GROUP BY s.relid ORDER BY min(s.window_start)",
					1, &type, &value, NULL, false, 0);
	tab = SPI_tuptable;
	n = SPI_processed;
	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	tup = tab->vals[i];
		bool		isnull;
		Oid			part = DatumGetObjectId(SPI_getbinval(tup, tab->tupdesc, 1, &isnull));
		int64		windows = DatumGetInt64(SPI_getbinval(tup, tab->tupdesc, 2, &isnull));
		bool		all_sealed = DatumGetBool(SPI_getbinval(tup, tab->tupdesc, 3, &isnull));
		Datum		starts = SPI_getbinval(tup, tab->tupdesc, 4, &isnull);
		Datum		ends = SPI_getbinval(tup, tab->tupdesc, 5, &isnull);
		Datum	   *start_d,
				   *sealed_d;
		int			nstart,
					nsealed;
		int64		lo,
					hi;

		if (all_sealed && windows > 1 && sc_partition_range(part, &lo, &hi))
		{
			sc_rollup_bucket_create(cube, rollup_id, relid, lo, hi, starts, ends);
			continue;
		}
		deconstruct_array(DatumGetArrayTypeP(starts), TIMESTAMPTZOID, sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE,
						  &start_d, NULL, &nstart);
		deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, tab->tupdesc, 6, &isnull)),
						  BOOLOID, 1, true, TYPALIGN_CHAR, &sealed_d, NULL, &nsealed);
		for (int w = 0; w < nstart && w < nsealed; w++)
			sc_rollup_window_create(cube, rollup_id, relid, DatumGetTimestampTz(start_d[w]),
									DatumGetBool(sealed_d[w]));
	}
}

/*
 * The sealed partitions of the new roll-up r, each filled by one
 * statement from the cube's partition of the same windows: one row per
 * bucket and dimensions, by the same aggregates as a batch's, and its key.
 * Returns the cube's partitions read (for the caller to leave out), in the
 * current memory context.  As the cube's owner.
 */
static List *
sc_rollup_fill_sealed(ScCube *cube, ScRollup *r, bool *read)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid		   *parts;
	Datum	   *sources;
	int			nparts;
	List	   *read_parts = NIL;
	StringInfoData cols;
	ScAsOwner	as;

	sc_catalog_exec("SELECT w.relid::oid, array_agg(DISTINCT s.relid::oid) "
					"FROM streamcube.rollup_windows w "
					"JOIN streamcube.segment_catalog s ON s.cube_id = $2 AND s.window_start = w.window_start "
					"WHERE w.rollup_id = $1 AND w.state = 'sealed' GROUP BY w.relid",
					2, (Oid[]) {INT4OID, INT4OID},
					(Datum[]) {Int32GetDatum(r->rollup_id), Int32GetDatum(cube->cube_id)},
					NULL, false, 0);
	nparts = (int) SPI_processed;
	parts = MemoryContextAlloc(cxt, sizeof(Oid) * Max(nparts, 1));
	sources = MemoryContextAlloc(cxt, sizeof(Datum) * Max(nparts, 1));
	for (int i = 0; i < nparts; i++)
	{
		bool		isnull;

		parts[i] = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		sources[i] = datumCopy(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull),
							   false, -1);
	}

	/* The bucket and the columns read, named as the SELECT list wants them. */
	initStringInfo(&cols);
	appendStringInfo(&cols, "pg_catalog.date_bin('%lld microseconds'::pg_catalog.interval, %s, '2001-01-01 00:00:00%s) AS %s",
					 (long long) r->granularity,
					 quote_identifier(cube->columns[cube->time_index].name),
					 cube->time_type == TIMESTAMPOID ? "'::pg_catalog.timestamp" : "+00'::pg_catalog.timestamptz",
					 SC_ROLLUP_BUCKET);
	if (r->coarse)
		appendStringInfo(&cols, ", pg_catalog.date_bin('%lld microseconds'::pg_catalog.interval, %s, '2001-01-01 00:00:00%s) AS %s",
						 (long long) cube->width,
						 quote_identifier(cube->columns[cube->time_index].name),
						 cube->time_type == TIMESTAMPOID ? "'::pg_catalog.timestamp" : "+00'::pg_catalog.timestamptz",
						 SC_ROLLUP_WINDOW);
	for (int c = 0; c < cube->ncolumns; c++)
		if (read[c])
			appendStringInfo(&cols, ", %s", quote_identifier(cube->columns[c].name));

	sc_progress_phase("filling sealed partitions", "partitions", nparts);
	for (int i = 0; i < nparts; i++)
	{
		StringInfoData sql;
		Datum	   *srcs;
		int			nsrcs;

		deconstruct_array(DatumGetArrayTypeP(sources[i]), OIDOID, sizeof(Oid), true, TYPALIGN_INT,
						  &srcs, NULL, &nsrcs);
		initStringInfo(&sql);
		appendStringInfo(&sql, "INSERT INTO %s SELECT %s%s FROM (", sc_relation_qualified(parts[i]),
						 sc_rollup_select_list(cube, r, "u"),
						 r->coarse ? ", pg_catalog.min(u." SC_ROLLUP_WINDOW ")" : "");
		for (int k = 0; k < nsrcs; k++)
		{
			appendStringInfo(&sql, "%sSELECT %s FROM ONLY %s", k > 0 ? " UNION ALL " : "",
							 cols.data, sc_relation_qualified(DatumGetObjectId(srcs[k])));
			read_parts = lappend_oid(read_parts, DatumGetObjectId(srcs[k]));
		}
		appendStringInfo(&sql, ") u GROUP BY u.%s", SC_ROLLUP_BUCKET);
		for (int d = 0; d < r->ndims; d++)
			appendStringInfo(&sql, ", %s", sc_rollup_dim_sql(cube, r, d, "u"));
		sc_as_owner_enter(&as, cube->owner);
		if (SPI_execute(sql.data, false, 0) != SPI_OK_INSERT)
			elog(ERROR, "could not fill a sealed partition of roll-up %s", r->qualified);
		sc_as_owner_leave(&as);
		sc_rollup_key_create(r, parts[i]);
		MemoryContextSwitchTo(cxt);
		sc_progress_done(i + 1);
	}
	return read_parts;
}

/*
 * Fill the roll-up from every row the cube holds, as the cube's owner: its
 * sealed partitions from the cube's sealed partitions, one row per group
 * (sc_rollup_fill_sealed), and its active partitions from the rest of the
 * cube, a chunk of rows at a time, aggregated as receivers aggregate a
 * batch (rollup_agg.c) into partial rows.  Nobody sees the roll-up before
 * this transaction commits.
 */
static int64
sc_rollup_fill(ScCube *cube, ScRollup *r)
{
	ScRollupAgg *agg = sc_rollup_agg_make(cube, r);
	StringInfoData sql;
	bool	   *read = palloc0(sizeof(bool) * Max(cube->ncolumns, 1));
	int		   *colpos = palloc(sizeof(int) * Max(cube->ncolumns, 1));
	Datum	  **values = palloc0(sizeof(Datum *) * Max(cube->ncolumns, 1));
	bool	  **nulls = palloc0(sizeof(bool *) * Max(cube->ncolumns, 1));
	int64	   *ts = palloc(sizeof(int64) * SC_ROLLUP_FILL_CHUNK);
	int			ncols = 1;
	int64		total = 0;
	Portal		portal;
	ScAsOwner	as;
	MemoryContext chunk_cxt = AllocSetContextCreate(CurrentMemoryContext, "streamcube roll-up fill",
													ALLOCSET_DEFAULT_SIZES);
	List	   *sealed;
	Datum	   *elems;
	int			nsealed = 0;
	ListCell   *lc;

	sc_rollup_agg_columns(cube, r, read);

	/*
	 * A partition descriptor of the cube this backend cached earlier may
	 * lack a window a receiver attached while it was built
	 * (docs/architecture.md, "Partition descriptors"); built again now,
	 * after the locks, it holds every window there is: new ones wait for
	 * the cube's row.
	 */
	RelationCacheInvalidateEntry(cube->relid);

	sc_progress_start(cube->relid, r->qualified, "fill roll-up");
	sealed = sc_rollup_fill_sealed(cube, r, read);
	elems = palloc(sizeof(Datum) * Max(list_length(sealed), 1));
	foreach(lc, sealed)
		elems[nsealed++] = ObjectIdGetDatum(lfirst_oid(lc));

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT %s", quote_identifier(cube->columns[cube->time_index].name));
	for (int c = 0; c < cube->ncolumns; c++)
		if (read[c])
		{
			appendStringInfo(&sql, ", %s", quote_identifier(cube->columns[c].name));
			colpos[c] = ++ncols;
			values[c] = palloc(sizeof(Datum) * SC_ROLLUP_FILL_CHUNK);
			nulls[c] = palloc(sizeof(bool) * SC_ROLLUP_FILL_CHUNK);
		}
	appendStringInfo(&sql, " FROM %s WHERE tableoid <> ALL ($1)", cube->qualified);

	sc_progress_phase("aggregating active windows", "rows", -1);
	sc_as_owner_enter(&as, cube->owner);
	/* read_only false: a snapshot taken now, after the locks, sees the batch we waited for */
	portal = SPI_cursor_open_with_args(NULL, sql.data, 1, (Oid[]) {OIDARRAYOID},
									   (Datum[]) {PointerGetDatum(construct_array(elems, nsealed, OIDOID,
																				  sizeof(Oid), true, TYPALIGN_INT))},
									   NULL, false, 0);
	for (;;)
	{
		MemoryContext old;
		SPITupleTable *tab;
		uint64		n;

		SPI_cursor_fetch(portal, true, SC_ROLLUP_FILL_CHUNK);
		tab = SPI_tuptable;
		n = SPI_processed;
		if (n == 0)
			break;
		MemoryContextReset(chunk_cxt);
		old = MemoryContextSwitchTo(chunk_cxt);
		for (uint64 i = 0; i < n; i++)
		{
			bool		isnull;

			ts[i] = DatumGetInt64(SPI_getbinval(tab->vals[i], tab->tupdesc, 1, &isnull));
			for (int c = 0; c < cube->ncolumns; c++)
				if (read[c])
				{
					Form_pg_attribute att = TupleDescAttr(tab->tupdesc, colpos[c] - 1);
					Datum		v = SPI_getbinval(tab->vals[i], tab->tupdesc, colpos[c], &nulls[c][i]);

					values[c][i] = nulls[c][i] ? (Datum) 0 : datumCopy(v, att->attbyval, att->attlen);
				}
		}
		SPI_freetuptable(tab);
		sc_rollup_agg_run(cube, agg, (int) n, ts, values, nulls, NULL, true);
		MemoryContextSwitchTo(old);
		total += n;
		sc_progress_done(total);
	}
	SPI_cursor_close(portal);
	sc_as_owner_leave(&as);
	sc_rollup_agg_free(agg);
	MemoryContextDelete(chunk_cxt);
	return total;
}

/* The options of a roll-up: {"retention": "1 year"}. */
static Interval *
sc_rollup_options(Jsonb *options, const ScCube *cube)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *key = NULL;
	Interval   *retention = NULL;

	if (options == NULL)
		return NULL;
	if (!JB_ROOT_IS_OBJECT(options))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("roll-up options must be a JSON object"),
				 errhint("For example '{\"retention\": \"1 year\"}'.")));
	it = JsonbIteratorInit(&options->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
			key = pnstrdup(v.val.string.val, v.val.string.len);
		else if (tok == WJB_VALUE)
		{
			if (strcmp(key, "retention") != 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("unknown roll-up option \"%s\"", key),
						 errhint("A roll-up takes the option retention.")));
			if (v.type == jbvNull)
				continue;
			if (v.type != jbvString)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("roll-up option retention must be an interval as a string"),
						 errhint("For example \"1 year\" or \"90 days\".")));
			retention = sc_interval_of_text(pnstrdup(v.val.string.val, v.val.string.len),
											"roll-up option \"retention\"",
											"Give an interval such as \"1 year\" or \"90 days\".");
			if (sc_interval_usecs(retention, "retention") <= 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("roll-up option retention must be positive"),
						 errhint("Leave it out to keep every window.")));
		}
	}
	return retention;
}

/*
 * The dimensions of a new roll-up into r: columns of the cube (not its
 * time column), or named expressions of them; each name once among
 * colnames, the roll-up's columns so far.
 */
static void
sc_rollup_parse_dimensions(const ScCube *cube, const char *cube_name, ArrayType *dims_arr,
						   ScRollup *r, List **colnames)
{
	Datum	   *dims;
	bool	   *dimnulls;
	int			ndims;

	deconstruct_array(dims_arr, TEXTOID, -1, false, TYPALIGN_INT, &dims, &dimnulls, &ndims);
	r->ndims = ndims;
	r->dims = palloc(sizeof(int) * Max(ndims, 1));
	r->dim_names = palloc(sizeof(char *) * Max(ndims, 1));
	r->dim_exprs = palloc0(sizeof(char *) * Max(ndims, 1));
	for (int d = 0; d < ndims; d++)
	{
		char	   *dim = dimnulls[d] ? NULL : TextDatumGetCString(dims[d]);

		if (dim != NULL && (r->dims[d] = sc_rollup_column(cube, dim)) < 0 &&
			sc_rollup_dimension_expression(dim, &r->dim_exprs[d], &r->dim_names[d]))
		{
			if (!sc_rollup_catalog_current())
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("dimension \"%s\" is an expression, which the extension streamcube %s does not know",
								dim, "0.3.0"),
						 errhint("Run ALTER EXTENSION streamcube UPDATE.")));
			r->dims[d] = -1;
			sc_rollup_check_name(colnames, r->dim_names[d], "dimension");
			continue;
		}
		if (dim == NULL || r->dims[d] < 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("dimension \"%s\" is not a column of cube \"%s\"", dim ? dim : "NULL", cube_name),
					 errhint("Dimensions are columns of the cube's table, named exactly, or expressions of them with a name: 'lower(country) AS country_lc'.")));
		if (r->dims[d] == cube->time_index)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("dimension \"%s\" is the time column of cube \"%s\"", dim, cube_name),
					 errhint("The time column is the roll-up's bucket: choose its granularity instead.")));
		r->dim_names[d] = dim;
		sc_rollup_check_name(colnames, dim, "dimension");
	}
}

/*
 * The measures of a new roll-up into r: a JSON object of names and
 * aggregates as text; an avg takes two columns, <name>_sum and <name>_count.
 */
static void
sc_rollup_parse_measures(const ScCube *cube, Jsonb *measures, ScRollup *r, List **colnames)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *key = NULL;

	if (!JB_ROOT_IS_OBJECT(measures) || JB_ROOT_IS_SCALAR(measures))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("measures must be a JSON object of names and aggregates"),
				 errhint("For example '{\"n\": \"count(*)\", \"amount\": \"sum(amount)\"}'.")));
	r->measures = palloc0(sizeof(ScMeasure) * Max(JB_ROOT_COUNT(measures), 1));
	it = JsonbIteratorInit(&measures->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
			key = pnstrdup(v.val.string.val, v.val.string.len);
		else if (tok == WJB_VALUE)
		{
			ScMeasure  *m = &r->measures[r->nmeasures++];

			if (v.type != jbvString)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("measure \"%s\" must be an aggregate as a string", key),
						 errhint("For example \"sum(amount)\".")));
			sc_rollup_parse_measure(cube, key, pnstrdup(v.val.string.val, v.val.string.len), m, false);
			if (m->kind == SC_MEASURE_AVG)
			{
				sc_rollup_check_name(colnames, psprintf("%s_sum", key), "measure");
				sc_rollup_check_name(colnames, psprintf("%s_count", key), "measure");
			}
			else
				sc_rollup_check_name(colnames, key, "measure");
		}
	}
}

/*
 * streamcube_create_rollup(cube text, name text, granularity interval,
 *							dimensions text[], measures jsonb,
 *							options jsonb DEFAULT '{}') RETURNS regclass
 */
Datum
sc_create_rollup(PG_FUNCTION_ARGS)
{
	char	   *cube_name = sc_text_arg(fcinfo, 0, "cube name");
	char	   *name = sc_text_arg(fcinfo, 1, "roll-up name");
	Interval   *granularity;
	ArrayType  *dims_arr;
	Jsonb	   *measures;
	Jsonb	   *options = PG_ARGISNULL(5) ? NULL : PG_GETARG_JSONB_P(5);
	Interval   *retention;
	Oid			cube_relid,
				owner,
				nsp,
				relid;
	int32		cube_id,
				rollup_id;
	ScCube	   *cube;
	ScRollup	r = {0};
	List	   *qname;
	List	   *colnames = list_make1("bucket");
	char	   *relname;
	TupleDesc	types;
	ListCell   *lc;
	ScRollup   *loaded = NULL;
	Interval	window;

	if (PG_ARGISNULL(2) || PG_ARGISNULL(3) || PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("granularity, dimensions and measures of a roll-up must not be NULL"),
				 errhint("Give an empty array for no dimensions.")));
	granularity = PG_GETARG_INTERVAL_P(2);
	dims_arr = PG_GETARG_ARRAYTYPE_P(3);
	measures = PG_GETARG_JSONB_P(4);
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("creating a roll-up needs the READ COMMITTED isolation level"),
				 errdetail("The roll-up is filled with every row committed before the cube's lock."),
				 errhint("Call it outside an explicit REPEATABLE READ or SERIALIZABLE transaction.")));

	SPI_connect();
	cube_id = sc_cube_for_action(cube_name, "create a roll-up of", &cube_relid, &owner);

	/* The batch in flight commits first; the next waits for our commit. */
	sc_catalog_exec("SELECT 1 FROM streamcube.cubes WHERE cube_id = $1 FOR UPDATE",
					1, (Oid[]) {INT4OID}, (Datum[]) {Int32GetDatum(cube_id)}, NULL, false, 1);
	cube = sc_cube_load(cube_id, false);
	sc_segment_lock_windows(cube);

	/* granularity: divides the window, so that a bucket lies in one window */
	r.granularity = sc_interval_usecs(granularity, "granularity");
	window.time = cube->width % USECS_PER_DAY;
	window.day = (int32) (cube->width / USECS_PER_DAY);
	window.month = 0;
	if (r.granularity <= 0 || cube->width <= 0 ||
		(cube->width % r.granularity != 0 && r.granularity % cube->width != 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("granularity %s neither divides the window of cube \"%s\" (%s) nor is a whole number of them",
						DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(granularity))),
						cube_name,
						DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(&window)))),
				 errdetail("A bucket of a roll-up lies in one window of the cube, or is made of whole windows."),
				 errhint("Give a granularity that the window is a whole multiple of (1 minute for windows of an hour), or a whole multiple of the window (1 day).")));
	r.coarse = r.granularity > cube->width;

	sc_rollup_parse_dimensions(cube, cube_name, dims_arr, &r, &colnames);
	sc_rollup_parse_measures(cube, measures, &r, &colnames);
	retention = sc_rollup_options(options, cube);

	/* the name: in the cube's schema unless qualified */
	qname = stringToQualifiedNameList(name);
	if (list_length(qname) == 1)
	{
		nsp = get_rel_namespace(cube->relid);
		relname = strVal(linitial(qname));
	}
	else if (list_length(qname) == 2)
	{
		nsp = get_namespace_oid(strVal(linitial(qname)), false);
		relname = strVal(lsecond(qname));
	}
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("roll-up name \"%s\" is not a table name", name),
				 errhint("Give a name, or schema.name.")));
	if (sc_name_taken(relname, nsp))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_TABLE),
				 errmsg("relation or type \"%s\" already exists", name),
				 errhint("Choose another name for the roll-up, or drop that one with streamcube_drop_rollup().")));

	types = sc_rollup_result_types(cube, &r);
	relid = sc_rollup_create_table(cube, &r, nsp, relname, types);
	rollup_id = sc_rollup_catalog_insert(cube, relid, granularity, &r, measures, retention);
	sc_rollup_create_windows(cube, rollup_id, relid);

	/* the definition as receivers will read it, and the rows the cube has */
	foreach(lc, sc_rollups_load(cube))
		if (((ScRollup *) lfirst(lc))->rollup_id == rollup_id)
			loaded = lfirst(lc);
	if (loaded == NULL)
		elog(ERROR, "roll-up %s vanished while it was created", name);
	(void) sc_rollup_fill(cube, loaded);
	/* its views (for standbys, merged), at once: readers may be granted them now */
	sc_rollup_refresh_views(cube->cube_id, relid, false);
	if (sc_rollup_catalog_current())
		sc_rollup_merged_view_create(loaded);

	/* Receivers read the cube again before their next batch. */
	sc_cube_row_touch(cube_id);
	SPI_finish();
	PG_RETURN_OID(relid);
}

/* streamcube_drop_rollup(name text) */
Datum
sc_drop_rollup(PG_FUNCTION_ARGS)
{
	char	   *name = sc_text_arg(fcinfo, 0, "roll-up name");
	Oid			relid = sc_caller_relation(name);
	Oid			cube_relid,
				owner;
	int32		cube_id;
	bool		isnull;
	char	   *cube_name;

	SPI_connect();
	if (OidIsValid(relid))
		sc_catalog_exec("SELECT cube_id, (SELECT c.relid::oid FROM streamcube.cubes c WHERE c.cube_id = r.cube_id) "
						"FROM streamcube.rollup_catalog r WHERE relid = $1",
						1, (Oid[]) {OIDOID}, (Datum[]) {ObjectIdGetDatum(relid)}, NULL, false, 1);
	if (!OidIsValid(relid) || SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("roll-up \"%s\" does not exist", name),
				 errhint("streamcube.rollups lists the roll-ups.")));
	cube_relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	cube_name = sc_relation_qualified(cube_relid);
	cube_id = sc_cube_for_action(cube_name, "drop a roll-up of", &cube_relid, &owner);

	/* The batch in flight commits first; the next reads the cube again. */
	(void) sc_cube_rollup_tables(cube_id);
	/* its view first: it depends on the roll-up's sealed partitions */
	sc_rollup_drop_views(cube_id, relid);
	sc_rollup_catalog_delete(relid);
	sc_cube_row_touch(cube_id);
	sc_drop_table(relid, sc_relation_owner(relid), psprintf("roll-up \"%s\"", name));
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * streamcube._rollups_to_0_4(): run once by ALTER EXTENSION ... UPDATE TO
 * '0.4.0' (and dropped by it).  Roll-ups of 0.3.0 had a key on their
 * table, which every partition took; 0.4.0 appends partial rows to
 * active partitions, which have none.  Their rows stay as they are (one
 * per group: partial rows of one batch each, as far as the new code is
 * concerned); the key moves to the sealed partitions alone, and every
 * roll-up gets its view <roll-up>_merged.
 */
Datum
sc_rollups_to_0_4(PG_FUNCTION_ARGS)
{
	MemoryContext cxt = CurrentMemoryContext;
	int32	   *ids;
	int32	   *cubes;
	uint64		n;

	SPI_connect();
	sc_catalog_exec("SELECT rollup_id, cube_id FROM streamcube.rollup_catalog ORDER BY rollup_id",
					0, NULL, NULL, NULL, false, 0);
	n = SPI_processed;
	ids = MemoryContextAlloc(cxt, sizeof(int32) * Max(n, 1));
	cubes = MemoryContextAlloc(cxt, sizeof(int32) * Max(n, 1));
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;

		ids[i] = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		cubes[i] = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
	}
	for (uint64 i = 0; i < n; i++)
	{
		ScCube	   *cube = sc_cube_load(cubes[i], true);
		ScRollup   *r = NULL;
		ListCell   *lc;
		Relation	rel;
		List	   *indexes;
		Oid		   *parts;
		uint64		nparts;
		ScAsOwner	as;

		if (cube == NULL)
			continue;
		foreach(lc, cube->rollups)
			if (((ScRollup *) lfirst(lc))->rollup_id == ids[i])
				r = lfirst(lc);
		if (r == NULL)
			continue;

		/* the table's key, and with it its partitions' */
		rel = table_open(r->relid, AccessExclusiveLock);
		indexes = RelationGetIndexList(rel);
		table_close(rel, NoLock);
		sc_as_owner_enter(&as, sc_relation_owner(r->relid));
		foreach(lc, indexes)
			if (sc_index_is_unique(lfirst_oid(lc)))
				sc_seal_exec(psprintf("DROP INDEX %s", sc_relation_qualified(lfirst_oid(lc))));
		sc_as_owner_leave(&as);

		/* the sealed partitions' own */
		sc_catalog_exec("SELECT DISTINCT relid::oid FROM streamcube.rollup_windows "
						"WHERE rollup_id = $1 AND state = 'sealed'",
						1, (Oid[]) {INT4OID}, (Datum[]) {Int32GetDatum(r->rollup_id)}, NULL, false, 0);
		nparts = SPI_processed;
		parts = MemoryContextAlloc(cxt, sizeof(Oid) * Max(nparts, 1));
		for (uint64 k = 0; k < nparts; k++)
		{
			bool		isnull;

			parts[k] = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 1, &isnull));
		}
		for (uint64 k = 0; k < nparts; k++)
			sc_rollup_key_create(r, parts[k]);
		sc_rollup_merged_view_create(r);
	}
	SPI_finish();
	PG_RETURN_VOID();
}
