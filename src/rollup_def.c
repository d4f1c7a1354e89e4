/*-------------------------------------------------------------------------
 *
 * rollup_def.c
 *		What a roll-up is: its measures and dimensions parsed and checked,
 *		and its definition loaded with the cube.
 *
 * A roll-up's definition is its row of streamcube.rollup_catalog (written
 * by rollups.c alone): a granularity, dimensions (a column, or a simple
 * immutable expression of columns), and measures written as SQL
 * aggregates (count, sum, min, max, avg, hll, tdigest, each with an
 * optional FILTER).  This file reads the measures' text into ScMeasure,
 * says which extension a measure needs (hll, tdigest) and where it lives,
 * and loads a cube's roll-ups into the ScRollup list every other room of
 * roll-ups works from.  It writes nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "parser/parse_func.h"
#include "parser/scansup.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_index.h"
#include "catalog/indexing.h"
#include "utils/fmgroids.h"
#include "rewrite.h"
#include "rollup.h"
#include "sealed.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

/*
 * Is the catalog 0.4.0's or later (it knows the views <roll-up>_merged)?
 * Until ALTER EXTENSION ... UPDATE, a 0.3.0 catalog's roll-ups keep their
 * key on every partition, and new ones are made so too.
 */
bool
sc_rollup_catalog_current(void)
{
	Oid			catalog = get_relname_relid("rollup_catalog", get_namespace_oid(SC_SCHEMA, false));

	return OidIsValid(catalog) && get_attnum(catalog, "merged_view") != InvalidAttrNumber;
}

/* ----------------------------------------------------------------
 * Definitions
 * ----------------------------------------------------------------
 */

static const struct
{
	const char *name;
	ScMeasureKind kind;
}			sc_measure_names[] =
{
	{"count", SC_MEASURE_COUNT},
	{"sum", SC_MEASURE_SUM},
	{"min", SC_MEASURE_MIN},
	{"max", SC_MEASURE_MAX},
	{"avg", SC_MEASURE_AVG},
	{"hll", SC_MEASURE_HLL},
	{"tdigest", SC_MEASURE_TDIGEST},
};

const char *
sc_measure_function(ScMeasureKind kind)
{
	if (kind == SC_MEASURE_COUNT_ALL)
		return "count";
	for (int i = 0; i < lengthof(sc_measure_names); i++)
		if (sc_measure_names[i].kind == kind)
			return sc_measure_names[i].name;
	return "?";
}

/* The index in cube->columns of the column called name; -1 when the cube has none. */
int
sc_rollup_column(const ScCube *cube, const char *name)
{
	for (int c = 0; c < cube->ncolumns; c++)
		if (strcmp(cube->columns[c].name, name) == 0)
			return c;
	return -1;
}

/* The SQL type of cube column c, with its typmod, as the cube's table has it. */
char *
sc_cube_column_type(const ScCube *cube, int c)
{
	HeapTuple	tup = SearchSysCacheAttName(cube->relid, cube->columns[c].name);
	Form_pg_attribute att;
	char	   *type;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "column \"%s\" of cube %s is gone", cube->columns[c].name, cube->qualified);
	att = (Form_pg_attribute) GETSTRUCT(tup);
	type = format_type_with_typemod(att->atttypid, att->atttypmod);
	ReleaseSysCache(tup);
	return type;
}

/* An identifier as SQL reads it: "quoted" exactly, else folded to lower case. */
static const char *
sc_measure_identifier(const char **p)
{
	StringInfoData id;
	const char *s = *p;

	initStringInfo(&id);
	if (*s == '"')
	{
		for (s++; *s != '\0'; s++)
		{
			if (*s == '"' && s[1] == '"')
				appendStringInfoChar(&id, *s++);
			else if (*s == '"')
				break;
			else
				appendStringInfoChar(&id, *s);
		}
		if (*s != '"')
			return NULL;
		s++;
	}
	else
	{
		while (*s != '\0' && *s != ')' && *s != '(' && *s != ',' && !isspace((unsigned char) *s))
			appendStringInfoChar(&id, *s++);
		id.data = downcase_identifier(id.data, id.len, false, false);
	}
	*p = s;
	return id.data[0] != '\0' ? id.data : NULL;
}

/*
 * The rest of a measure after FILTER: "(WHERE <condition>)", the condition
 * into out->filter as written (checked when the roll-up's SELECT list is
 * parsed).  Returns the end of the measure, or NULL when it is not so.
 */
static const char *
sc_measure_filter(const char *p, ScMeasure *out)
{
	const char *end;

	while (isspace((unsigned char) *p))
		p++;
	if (*p++ != '(')
		return NULL;
	while (isspace((unsigned char) *p))
		p++;
	if (pg_strncasecmp(p, "where", 5) != 0 || !isspace((unsigned char) p[5]))
		return NULL;
	p += 5;
	end = strrchr(p, ')');
	if (end == NULL)
		return NULL;
	out->filter = pnstrdup(p, end - p);
	for (p = end + 1; isspace((unsigned char) *p); p++)
		;
	/* nothing but blanks in the condition is no condition */
	for (end = out->filter; isspace((unsigned char) *end); end++)
		;
	return *end != '\0' ? p : NULL;
}

/*
 * A measure as given ("sum(amount)", "count(*)", "hll(user_id)", any of
 * them followed by "FILTER (WHERE <condition>)") into out.
 * Errors name the measure and say what is wrong; with missing_ok, a column
 * the cube does not have (any more) gives column -1 instead.
 */
void
sc_rollup_parse_measure(const ScCube *cube, const char *name, const char *text, ScMeasure *out,
						bool missing_ok)
{
	const char *p = text;
	const char *fn_start;
	char	   *fn;
	const char *column = NULL;
	bool		star = false;
	bool		known = false;

	memset(out, 0, sizeof(*out));
	out->name = pstrdup(name);
	out->column = -1;
	while (isspace((unsigned char) *p))
		p++;
	fn_start = p;
	while (isalpha((unsigned char) *p) || *p == '_')
		p++;
	fn = downcase_identifier(fn_start, p - fn_start, false, false);
	while (isspace((unsigned char) *p))
		p++;
	if (*p == '(')
	{
		p++;
		while (isspace((unsigned char) *p))
			p++;
		if (*p == '*')
			star = true, p++;
		else
			column = sc_measure_identifier(&p);
		while (isspace((unsigned char) *p))
			p++;
		if (*p == ')')
		{
			p++;
			while (isspace((unsigned char) *p))
				p++;
			if (pg_strncasecmp(p, "filter", 6) == 0 && (isspace((unsigned char) p[6]) || p[6] == '('))
				p = sc_measure_filter(p + 6, out);
			known = p != NULL && *p == '\0' && (star || column != NULL);
		}
	}
	if (known)
	{
		known = false;
		for (int i = 0; i < lengthof(sc_measure_names); i++)
			if (strcmp(fn, sc_measure_names[i].name) == 0)
				out->kind = sc_measure_names[i].kind, known = true;
	}
	if (!known)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("measure \"%s\" is not an aggregate a roll-up keeps: \"%s\"", name, text),
				 errhint("Give one of count(*), count(c), sum(c), min(c), max(c), avg(c), hll(c) or tdigest(c), c a column of cube %s, optionally followed by FILTER (WHERE <condition>).",
						 cube->qualified)));
	if (star)
	{
		if (out->kind != SC_MEASURE_COUNT)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("measure \"%s\": only count takes *: \"%s\"", name, text),
					 errhint("Name a column of cube %s.", cube->qualified)));
		out->kind = SC_MEASURE_COUNT_ALL;
		return;
	}
	out->column = sc_rollup_column(cube, column);
	if (out->column < 0 && !missing_ok)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("measure \"%s\" names column \"%s\", which cube %s does not have",
						name, column, cube->qualified),
				 errhint("A measure aggregates a column of the cube's table.")));
}

/* The schema of extension ext_oid (PostgreSQL 15 does not export its own lookup). */
static Oid
sc_extension_schema(Oid ext_oid)
{
	Relation	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	Oid			nsp = InvalidOid;

	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(ext_oid));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
		nsp = ((Form_pg_extension) GETSTRUCT(tup))->extnamespace;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return nsp;
}

/*
 * The schema of the extension a measure needs (hll, tdigest), quoted;
 * NULL for the built-in aggregates.  An error names the package when the
 * extension is missing.
 */
char *
sc_rollup_extension_schema(ScMeasureKind kind, const char *measure)
{
	const char *ext;
	Oid			oid;
	Oid			nsp;

	if (kind == SC_MEASURE_HLL)
		ext = "hll";
	else if (kind == SC_MEASURE_TDIGEST)
		ext = "tdigest";
	else
		return NULL;
	oid = get_extension_oid(ext, true);
	if (!OidIsValid(oid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("measure \"%s\" needs the extension %s, which is not installed in this database",
						measure, ext),
				 errhint("Install the package postgresql-15-%s (Debian) and run CREATE EXTENSION %s.",
						 ext, ext)));
	nsp = sc_extension_schema(oid);
	if (kind == SC_MEASURE_TDIGEST)
	{
		/* batches combine digests with tdigest_union, new in tdigest 1.2 */
		Oid			digest = GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid,
											 CStringGetDatum("tdigest"), ObjectIdGetDatum(nsp));
		Oid			args[3] = {digest, digest, BOOLOID};

		if (!OidIsValid(digest) ||
			!OidIsValid(LookupFuncName(list_make2(makeString(get_namespace_name(nsp)),
												  makeString("tdigest_union")),
									   3, args, true)))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_FUNCTION),
					 errmsg("measure \"%s\" needs version 1.2 or later of the extension tdigest",
							measure),
					 errhint("Run ALTER EXTENSION tdigest UPDATE.")));
	}
	return (char *) quote_identifier(get_namespace_name(nsp));
}

/*
 * Dimension d of r in a SELECT list over the relation alias: its column,
 * or its expression (whose column names find alias's columns).
 */
char *
sc_rollup_dim_sql(const ScCube *cube, const ScRollup *r, int d, const char *alias)
{
	if (r->dim_exprs != NULL && r->dim_exprs[d] != NULL)
		return psprintf("(%s)", r->dim_exprs[d]);
	return psprintf("%s.%s", alias, quote_identifier(cube->columns[r->dims[d]].name));
}

/* What in the cube keeps r from being kept up to date; NULL when nothing. */
const char *
sc_rollup_problem(const ScCube *cube, const ScRollup *r)
{
	for (int d = 0; d < r->ndims; d++)
		if (r->dims[d] < 0 && (r->dim_exprs == NULL || r->dim_exprs[d] == NULL))
			return psprintf("a dimension of roll-up %s is no longer a column of the cube", r->qualified);
	for (int m = 0; m < r->nmeasures; m++)
		if (r->measures[m].kind != SC_MEASURE_COUNT_ALL && r->measures[m].column < 0)
			return psprintf("measure \"%s\" of roll-up %s aggregates a column the cube no longer has",
							r->measures[m].name, r->qualified);
	return NULL;
}

/*
 * The roll-ups of a cube, allocated in the current memory context (the
 * cube's).  The caller is connected to SPI.  A dimension or a measure
 * whose column is gone is kept with column -1: sc_rollup_problem() tells.
 */
List *
sc_rollups_load(ScCube *cube)
{
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(cube->cube_id);
	List	   *rollups = NIL;
	SPITupleTable *tab;
	uint64		n;
	MemoryContext cxt = CurrentMemoryContext;

	static SPIPlanPtr plans[2] = {NULL, NULL};

	bool		current = sc_rollup_catalog_current();

	/* with every sc_cube_load: planned once (for each catalog's shape) */
	sc_catalog_exec_kept(&plans[current],
						 current
						 ? "SELECT r.rollup_id, r.relid::oid, n.nspname, c.relname, r.granularity, "
						 "       r.dimensions::text[], r.measures, r.retention, r.dimension_exprs "
						 "FROM streamcube.rollup_catalog r "
						 "JOIN pg_class c ON c.oid = r.relid "
						 "JOIN pg_namespace n ON n.oid = c.relnamespace "
						 "WHERE r.cube_id = $1 ORDER BY r.rollup_id"
						 : "SELECT r.rollup_id, r.relid::oid, n.nspname, c.relname, r.granularity, "
						 "       r.dimensions::text[], r.measures, r.retention, NULL::text[] "
						 "FROM streamcube.rollup_catalog r "
						 "JOIN pg_class c ON c.oid = r.relid "
						 "JOIN pg_namespace n ON n.oid = c.relnamespace "
						 "WHERE r.cube_id = $1 ORDER BY r.rollup_id",
						 1, &type, &value, NULL, false, 0);
	/* SPI leaves its own context current: the roll-ups live in the caller's */
	MemoryContextSwitchTo(cxt);
	tab = SPI_tuptable;
	n = SPI_processed;
	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	tup = tab->vals[i];
		TupleDesc	desc = tab->tupdesc;
		ScRollup   *r = palloc0(sizeof(ScRollup));
		bool		isnull;
		Datum	   *dims;
		int			ndims;
		Jsonb	   *measures;
		JsonbIterator *it;
		JsonbValue	v;
		JsonbIteratorToken tok;
		char	   *key = NULL;
		Datum		d;

		r->rollup_id = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
		r->relid = DatumGetObjectId(SPI_getbinval(tup, desc, 2, &isnull));
		r->qualified = quote_qualified_identifier(SPI_getvalue(tup, desc, 3),
												  SPI_getvalue(tup, desc, 4));
		r->granularity = sc_interval_usecs(DatumGetIntervalP(SPI_getbinval(tup, desc, 5, &isnull)),
										   "granularity");
		r->coarse = r->granularity > cube->width;
		deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tup, desc, 6, &isnull)),
						  TEXTOID, -1, false, TYPALIGN_INT, &dims, NULL, &ndims);
		r->ndims = ndims;
		r->dims = palloc(sizeof(int) * Max(ndims, 1));
		r->dim_names = palloc(sizeof(char *) * Max(ndims, 1));
		r->dim_exprs = palloc0(sizeof(char *) * Max(ndims, 1));
		d = SPI_getbinval(tup, desc, 9, &isnull);
		if (!isnull)
		{
			Datum	   *exprs;
			bool	   *exprnulls;
			int			nexprs;

			deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT,
							  &exprs, &exprnulls, &nexprs);
			for (int k = 0; k < nexprs && k < ndims; k++)
				if (!exprnulls[k])
					r->dim_exprs[k] = TextDatumGetCString(exprs[k]);
		}
		for (int k = 0; k < ndims; k++)
		{
			r->dim_names[k] = TextDatumGetCString(dims[k]);
			r->dims[k] = r->dim_exprs[k] != NULL ? -1 : sc_rollup_column(cube, r->dim_names[k]);
		}

		measures = DatumGetJsonbPCopy(SPI_getbinval(tup, desc, 7, &isnull));
		r->measures = palloc0(sizeof(ScMeasure) * Max(JB_ROOT_COUNT(measures), 1));
		it = JsonbIteratorInit(&measures->root);
		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		{
			if (tok == WJB_KEY)
				key = pnstrdup(v.val.string.val, v.val.string.len);
			else if (tok == WJB_VALUE && key != NULL && v.type == jbvString)
			{
				/* A column gone since: sc_rollup_problem() tells. */
				sc_rollup_parse_measure(cube, key, pnstrdup(v.val.string.val, v.val.string.len),
										&r->measures[r->nmeasures++], true);
			}
		}
		d = SPI_getbinval(tup, desc, 8, &isnull);
		r->retention = isnull ? -1 : sc_interval_usecs(DatumGetIntervalP(d), "retention");
		rollups = lappend(rollups, r);
	}
	return rollups;
}

/*
 * The tables of a cube's roll-ups, once the cube's row is locked FOR
 * UPDATE (no roll-up is created meanwhile; a batch in flight commits
 * first).  The caller is connected to SPI.
 */
List *
sc_cube_rollup_tables(int32 cube_id)
{
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(cube_id);
	List	   *tables = NIL;

	sc_catalog_exec("SELECT 1 FROM streamcube.cubes WHERE cube_id = $1 FOR UPDATE",
					1, &type, &value, NULL, false, 1);
	sc_catalog_exec("SELECT relid::oid FROM streamcube.rollup_catalog WHERE cube_id = $1 "
					"ORDER BY rollup_id", 1, &type, &value, NULL, false, 0);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		tables = lappend_oid(tables, DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
																	SPI_tuptable->tupdesc, 1, &isnull)));
	}
	return tables;
}
