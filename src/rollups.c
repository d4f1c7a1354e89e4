/*-------------------------------------------------------------------------
 *
 * rollups.c
 *		A roll-up's life: the one writer of streamcube.rollup_catalog and
 *		streamcube.rollup_windows, its views, and its partitions, which
 *		follow the cube's windows through seals, compaction and retention.
 *		What a roll-up is (its definition) is rollup_def.c's.
 *
 * A roll-up is a table partitioned by range of its bucket column like the
 * cube by its time column, with one partition per window of the cube:
 * UNLOGGED while the window is active, a logged twin from the seal of the
 * window on (in the same transaction as the cube's, sc_rollup_seal_copy
 * and sc_rollup_seal_swap).  Receivers merge each batch into it in the
 * batch's transaction (ingest_rollup.c), so its content follows the cube's
 * exactly: after a crash the active partitions of both are empty and the
 * same replay from the checkpoints fills them again; a sealed window's rows
 * and its roll-up rows are both logged, and a late row moves both in one
 * transaction.
 *
 * A roll-up partition is created with its cube window, in the same
 * transaction and under the same window lock, and dropped only once the
 * cube's window is gone and the roll-up's own retention is past: so a
 * receiver that writes a row into a window always finds the roll-up's
 * partition of it, and a roll-up keeps a window at least as long as the
 * cube does.
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

/* ----------------------------------------------------------------
 * The catalog rows of a roll-up
 * ----------------------------------------------------------------
 */
/* A new roll-up's catalog row; returns its id. */
int32
sc_rollup_catalog_insert(const ScCube *cube, Oid relid, Interval *granularity, const ScRollup *r,
						 Jsonb *measures, Interval *retention)
{
	bool		isnull;
	char		nulls[8] = "       ";
	Datum	   *names = palloc(sizeof(Datum) * Max(r->ndims, 1));
	Datum	   *exprs = palloc(sizeof(Datum) * Max(r->ndims, 1));
	bool	   *exprnulls = palloc(sizeof(bool) * Max(r->ndims, 1));
	bool		any_expr = false;
	int			dims[1] = {r->ndims};
	int			lbs[1] = {1};

	for (int d = 0; d < r->ndims; d++)
	{
		names[d] = CStringGetTextDatum(r->dim_names[d]);
		exprnulls[d] = r->dim_exprs[d] == NULL;
		exprs[d] = exprnulls[d] ? (Datum) 0 : CStringGetTextDatum(r->dim_exprs[d]);
		any_expr |= !exprnulls[d];
	}
	if (retention == NULL)
		nulls[5] = 'n';
	if (!any_expr)
		nulls[6] = 'n';
	if (!sc_rollup_catalog_current())
	{
		/* 0.3.0's catalog: no expression dimensions (refused before) */
		sc_catalog_exec("INSERT INTO streamcube.rollup_catalog "
						"(cube_id, relid, granularity, dimensions, measures, retention) "
						"VALUES ($1, $2, $3, $4::name[], $5, $6) RETURNING rollup_id",
						6, (Oid[]) {INT4OID, OIDOID, INTERVALOID, TEXTARRAYOID, JSONBOID, INTERVALOID},
						(Datum[]) {Int32GetDatum(cube->cube_id), ObjectIdGetDatum(relid),
							IntervalPGetDatum(granularity),
							PointerGetDatum(construct_array(names, r->ndims, TEXTOID, -1, false, TYPALIGN_INT)),
						JsonbPGetDatum(measures), IntervalPGetDatum(retention)},
						nulls, false, 1);
	}
	else
		sc_catalog_exec("INSERT INTO streamcube.rollup_catalog "
						"(cube_id, relid, granularity, dimensions, measures, retention, dimension_exprs) "
						"VALUES ($1, $2, $3, $4::name[], $5, $6, $7) RETURNING rollup_id",
						7, (Oid[]) {INT4OID, OIDOID, INTERVALOID, TEXTARRAYOID, JSONBOID, INTERVALOID, TEXTARRAYOID},
						(Datum[]) {Int32GetDatum(cube->cube_id), ObjectIdGetDatum(relid),
							IntervalPGetDatum(granularity),
							PointerGetDatum(construct_array(names, r->ndims, TEXTOID, -1, false, TYPALIGN_INT)),
							JsonbPGetDatum(measures), IntervalPGetDatum(retention),
							any_expr ? PointerGetDatum(construct_md_array(exprs, exprnulls, 1, dims, lbs, TEXTOID,
																		  -1, false, TYPALIGN_INT)) : (Datum) 0},
						nulls, false, 1);
	return DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/* A dropped roll-up's catalog row (its rollup_windows go with it). */
void
sc_rollup_catalog_delete(Oid relid)
{
	sc_catalog_exec("DELETE FROM streamcube.rollup_catalog WHERE relid = $1",
					1, (Oid[]) {OIDOID}, (Datum[]) {ObjectIdGetDatum(relid)}, NULL, false, 0);
}

/* ----------------------------------------------------------------
 * The views <roll-up>_sealed
 * ----------------------------------------------------------------
 */

/* A cube's roll-ups (or the one whose table is only): table, view, id. */
typedef struct ScRollupView
{
	int32		rollup_id;
	Oid			relid;
	Oid			view;			/* as the catalog names it; InvalidOid: none yet */
	Oid			merged;			/* the view <roll-up>_merged (0.4.0 on) */
} ScRollupView;


static List *
sc_rollup_views_read(int32 cube_id, Oid only)
{
	MemoryContext cxt = CurrentMemoryContext;
	List	   *views = NIL;

	sc_catalog_exec(sc_rollup_catalog_current()
					? "SELECT rollup_id, relid::oid, sealed_view::oid, merged_view::oid FROM streamcube.rollup_catalog "
					"WHERE cube_id = $1 AND ($2 = 0::oid OR relid::oid = $2) ORDER BY rollup_id"
					: "SELECT rollup_id, relid::oid, sealed_view::oid, NULL::oid FROM streamcube.rollup_catalog "
					"WHERE cube_id = $1 AND ($2 = 0::oid OR relid::oid = $2) ORDER BY rollup_id",
					2, (Oid[]) {INT4OID, OIDOID},
					(Datum[]) {Int32GetDatum(cube_id), ObjectIdGetDatum(only)}, NULL, false, 0);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		ScRollupView *v = MemoryContextAllocZero(cxt, sizeof(ScRollupView));
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		d;

		v->rollup_id = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
		v->relid = DatumGetObjectId(SPI_getbinval(tup, desc, 2, &isnull));
		d = SPI_getbinval(tup, desc, 3, &isnull);
		v->view = isnull ? InvalidOid : DatumGetObjectId(d);
		d = SPI_getbinval(tup, desc, 4, &isnull);
		v->merged = isnull ? InvalidOid : DatumGetObjectId(d);
		views = lappend(views, v);
	}
	return views;
}

/*
 * The views <roll-up>_sealed of the cube's roll-ups that stand, for
 * sc_seal_lock_views; *n of them.  The caller is connected to SPI.
 */
Oid *
sc_rollup_sealed_views(int32 cube_id, int *n)
{
	List	   *views = sc_rollup_views_read(cube_id, InvalidOid);
	Oid		   *oids = palloc(sizeof(Oid) * Max(list_length(views), 1));
	ListCell   *lc;

	*n = 0;
	foreach(lc, views)
	{
		ScRollupView *v = lfirst(lc);

		if (sc_sealed_view_ours(v->view, v->relid))
			oids[(*n)++] = v->view;
	}
	return oids;
}

/*
 * Take the locks of the views a change of the cube's sealed partitions
 * rebuilds, <cube>_sealed (with cube_view) and its roll-ups' <roll-up>_sealed,
 * in tries of their own (sc_seal_lock_views; what: for its error).  The
 * caller is connected to SPI.
 */
void
sc_rollup_lock_sealed_views(const ScCube *cube, bool cube_view, const char *what)
{
	int			nviews;
	Oid		   *views = sc_rollup_sealed_views(cube->cube_id, &nviews);

	sc_seal_lock_views(cube, cube_view, views, nviews, what);
}

/*
 * Rebuild the view <roll-up>_sealed of each of the cube's roll-ups (or of
 * the one whose table is only), made at the roll-up's creation: its
 * sealed partitions, UNION ALL, the roll-up's counterpart of <cube>_sealed
 * (sealed.c), for physical standbys, where the roll-up's UNLOGGED
 * partitions cannot be read.  With empty, it reads no partition: a
 * compaction does that before it drops the partitions the view reads, and
 * rebuilds it after, in the same transaction.  Made as the roll-up's
 * owner (the cube's), keeping its grants.  The caller is connected to SPI.
 */
void
sc_rollup_refresh_views(int32 cube_id, Oid only, bool empty)
{
	ListCell   *lc;

	foreach(lc, sc_rollup_views_read(cube_id, only))
	{
		ScRollupView *v = lfirst(lc);
		Oid		   *parts = NULL;
		int			n = 0;
		char	   *qualified;

		if (get_rel_name(v->relid) == NULL)
			continue;			/* dropped in this transaction */
		if (!empty)
		{
			/* A compacted partition holds many windows: each partition once. */
			sc_catalog_exec("SELECT w.relid::oid FROM streamcube.rollup_windows w "
							"WHERE w.rollup_id = $1 AND w.state = 'sealed' "
							"  AND EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i "
							"              WHERE i.inhrelid = w.relid AND i.inhparent = $2) "
							"GROUP BY w.relid ORDER BY min(w.window_start)",
							2, (Oid[]) {INT4OID, OIDOID},
							(Datum[]) {Int32GetDatum(v->rollup_id), ObjectIdGetDatum(v->relid)},
							NULL, false, 0);
			n = (int) SPI_processed;
			parts = palloc(sizeof(Oid) * Max(n, 1));
			for (int i = 0; i < n; i++)
			{
				bool		isnull;

				parts[i] = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
			}
		}
		qualified = sc_sealed_view_write(v->view, v->relid, sc_relation_owner(v->relid),
										 sc_sealed_view_body(v->relid, parts, n),
										 psprintf("The sealed windows of roll-up %s (logged partitions only): "
												  "what a physical standby can read. Maintained by streamcube.",
												  sc_relation_qualified(v->relid)));
		sc_catalog_exec("UPDATE streamcube.rollup_catalog SET sealed_view = $2::regclass "
						"WHERE rollup_id = $1 AND sealed_view IS DISTINCT FROM $2::regclass",
						2, (Oid[]) {INT4OID, TEXTOID},
						(Datum[]) {Int32GetDatum(v->rollup_id), CStringGetTextDatum(qualified)},
						NULL, false, 0);
	}
}

/*
 * Drop the views <roll-up>_sealed and <roll-up>_merged of the cube's
 * roll-ups (or of the one whose table is only), before the roll-ups go:
 * they depend on the roll-up and its sealed partitions.  The caller holds the cube's row FOR
 * UPDATE (sc_cube_rollup_tables: no seal makes a view meanwhile) and is
 * connected to SPI.
 */
void
sc_rollup_drop_views(int32 cube_id, Oid only)
{
	ListCell   *lc;

	foreach(lc, sc_rollup_views_read(cube_id, only))
	{
		ScRollupView *v = lfirst(lc);
		ScAsOwner	as;

		sc_as_owner_enter(&as, sc_relation_owner(v->relid));
		if (sc_sealed_view_ours(v->view, v->relid))
			sc_seal_exec(psprintf("DROP VIEW %s", sc_relation_qualified(v->view)));
		if (sc_sealed_view_ours(v->merged, v->relid))
			sc_seal_exec(psprintf("DROP VIEW %s", sc_relation_qualified(v->merged)));
		sc_as_owner_leave(&as);
	}
}

/* ----------------------------------------------------------------
 * The merge: rows of one batch into a roll-up
 * ----------------------------------------------------------------
 */

/* The function that hashes a value of type for an hll (extension hll). */
static const char *
sc_hll_hash(Oid type)
{
	switch (getBaseType(type))
	{
		case BOOLOID:
			return "hll_hash_boolean";
		case INT2OID:
			return "hll_hash_smallint";
		case INT4OID:
			return "hll_hash_integer";
		case INT8OID:
			return "hll_hash_bigint";
		case BYTEAOID:
			return "hll_hash_bytea";
		case TEXTOID:
		case VARCHAROID:
		case BPCHAROID:
		case NAMEOID:
			return "hll_hash_text";
		default:
			return "hll_hash_any";
	}
}

/* The type a value of a column is cast to for the hash function above. */
static const char *
sc_hll_hash_cast(Oid type)
{
	switch (getBaseType(type))
	{
		case VARCHAROID:
		case BPCHAROID:
		case NAMEOID:
			return "::text";
		default:
			return "";
	}
}

/*
 * The SELECT list that aggregates rows into r's columns (bucket,
 * dimensions, measures in table order), over a relation whose columns are
 * SC_ROLLUP_BUCKET (the bucket) and the cube's columns by their names,
 * called from_alias.
 */
char *
sc_rollup_select_list(const ScCube *cube, const ScRollup *r, const char *from_alias)
{
	StringInfoData s;

	initStringInfo(&s);
	appendStringInfo(&s, "%s.%s", from_alias, SC_ROLLUP_BUCKET);
	for (int d = 0; d < r->ndims; d++)
		appendStringInfo(&s, ", %s", sc_rollup_dim_sql(cube, r, d, from_alias));
	for (int i = 0; i < r->nmeasures; i++)
	{
		const ScMeasure *m = &r->measures[i];
		char	   *col = m->column < 0 ? NULL :
			psprintf("%s.%s", from_alias, quote_identifier(cube->columns[m->column].name));
		char	   *schema = sc_rollup_extension_schema(m->kind, m->name);
		const char *f = m->filter != NULL ? psprintf(" FILTER (WHERE %s)", m->filter) : "";

		switch (m->kind)
		{
			case SC_MEASURE_COUNT_ALL:
				appendStringInfo(&s, ", pg_catalog.count(*)%s", f);
				break;
			case SC_MEASURE_COUNT:
				appendStringInfo(&s, ", pg_catalog.count(%s)%s", col, f);
				break;
			case SC_MEASURE_SUM:
				appendStringInfo(&s, ", pg_catalog.sum(%s)%s", col, f);
				break;
			case SC_MEASURE_MIN:
				appendStringInfo(&s, ", pg_catalog.min(%s)%s", col, f);
				break;
			case SC_MEASURE_MAX:
				appendStringInfo(&s, ", pg_catalog.max(%s)%s", col, f);
				break;
			case SC_MEASURE_AVG:
				appendStringInfo(&s, ", pg_catalog.sum(%s)%s, pg_catalog.count(%s)%s", col, f, col, f);
				break;
			case SC_MEASURE_HLL:
				appendStringInfo(&s, ", %s.hll_add_agg(%s.%s(%s%s))%s", schema, schema,
								 sc_hll_hash(cube->columns[m->column].type), col,
								 sc_hll_hash_cast(cube->columns[m->column].type), f);
				break;
			case SC_MEASURE_TDIGEST:
				appendStringInfo(&s, ", %s.tdigest((%s)::pg_catalog.float8, %d)%s", schema, col,
								 SC_TDIGEST_COMPRESSION, f);
				break;
		}
	}
	return s.data;
}

/* How an existing roll-up row r and a new one e of column col combine. */
static void
sc_rollup_combine(StringInfo s, const ScMeasure *m, const char *col, bool first)
{
	const char *q = quote_identifier(col);
	char	   *schema = sc_rollup_extension_schema(m->kind, m->name);

	appendStringInfo(s, "%s%s = ", first ? "" : ", ", q);
	switch (m->kind)
	{
		case SC_MEASURE_COUNT_ALL:
		case SC_MEASURE_COUNT:
			appendStringInfo(s, "r.%s + excluded.%s", q, q);
			break;
		case SC_MEASURE_SUM:
		case SC_MEASURE_AVG:
			/* NULL is the sum of no values: it adds nothing */
			appendStringInfo(s, "coalesce(r.%s + excluded.%s, r.%s, excluded.%s)", q, q, q, q);
			break;
		case SC_MEASURE_MIN:
			appendStringInfo(s, "LEAST(r.%s, excluded.%s)", q, q);
			break;
		case SC_MEASURE_MAX:
			appendStringInfo(s, "GREATEST(r.%s, excluded.%s)", q, q);
			break;
		case SC_MEASURE_HLL:
			appendStringInfo(s, "coalesce(%s.hll_union(r.%s, excluded.%s), r.%s, excluded.%s)",
							 schema, q, q, q, q);
			break;
		case SC_MEASURE_TDIGEST:
			/* tdigest_union takes NULL as the empty digest */
			appendStringInfo(s, "%s.tdigest_union(r.%s, excluded.%s)", schema, q, q);
			break;
	}
}

/*
 * The names of r's measure columns, in table order: one per measure, two
 * for avg (<name>_sum, <name>_count).
 */
static List *
sc_rollup_measure_columns(const ScRollup *r, List **measures)
{
	List	   *names = NIL;

	*measures = NIL;
	for (int i = 0; i < r->nmeasures; i++)
	{
		ScMeasure  *m = &r->measures[i];

		if (m->kind == SC_MEASURE_AVG)
		{
			names = lappend(names, psprintf("%s_sum", m->name));
			names = lappend(names, psprintf("%s_count", m->name));
			*measures = lappend(*measures, m);
			*measures = lappend(*measures, m);
		}
		else
		{
			names = lappend(names, m->name);
			*measures = lappend(*measures, m);
		}
	}
	return names;
}

/*
 * The statement that writes one row of r into target (a partition of it):
 * its columns, as desc has them, are $1.. in order.  With upsert, a row
 * whose bucket and dimensions target holds already is added to it (target
 * has the key: a sealed partition).
 */
char *
sc_rollup_insert_sql(const ScRollup *r, TupleDesc desc, const char *target, bool upsert)
{
	StringInfoData sql;
	List	   *names;
	List	   *measures;
	ListCell   *ln,
			   *lm;
	bool		first = true;

	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s AS r VALUES (", target);
	for (int a = 0; a < desc->natts; a++)
		appendStringInfo(&sql, "%s$%d", a > 0 ? ", " : "", a + 1);
	appendStringInfoChar(&sql, ')');
	if (!upsert)
		return sql.data;
	appendStringInfoString(&sql, " ON CONFLICT (bucket");
	for (int d = 0; d < r->ndims; d++)
		appendStringInfo(&sql, ", %s", quote_identifier(NameStr(TupleDescAttr(desc, d + 1)->attname)));
	appendStringInfoString(&sql, ") DO UPDATE SET ");
	names = sc_rollup_measure_columns(r, &measures);
	forboth(ln, names, lm, measures)
	{
		sc_rollup_combine(&sql, lfirst(lm), lfirst(ln), first);
		first = false;
	}
	if (first)					/* no measure: the row is there, nothing to add */
		appendStringInfoString(&sql, "bucket = excluded.bucket");
	return sql.data;
}

/*
 * The SELECT list that merges rows of r (partial rows, or rows of any
 * grouping of them) into one per bucket and dimensions, over r's columns
 * by name, each measure column cast back to its type; with avg, the
 * average itself (<name>) too, before its <name>_sum.  Group by the
 * bucket and the dimensions.
 */
static char *
sc_rollup_merged_list(const ScRollup *r, Oid relid, bool avg)
{
	StringInfoData s;
	List	   *names;
	List	   *measures;
	ListCell   *ln,
			   *lm;
	int			a = 2 + r->ndims;	/* the first measure column */

	initStringInfo(&s);
	appendStringInfoString(&s, "bucket");
	for (int d = 0; d < r->ndims; d++)
		appendStringInfo(&s, ", %s", quote_identifier(get_attname(relid, d + 2, false)));
	names = sc_rollup_measure_columns(r, &measures);
	forboth(ln, names, lm, measures)
	{
		const ScMeasure *m = lfirst(lm);
		const char *q = quote_identifier(lfirst(ln));
		Oid			type;
		int32		typmod;
		Oid			coll;
		char	   *typname;
		char	   *schema;

		get_atttypetypmodcoll(relid, a, &type, &typmod, &coll);
		typname = format_type_with_typemod(type, typmod);
		switch (m->kind)
		{
			case SC_MEASURE_COUNT_ALL:
			case SC_MEASURE_COUNT:
			case SC_MEASURE_SUM:
				appendStringInfo(&s, ", (pg_catalog.sum(%s))::%s AS %s", q, typname, q);
				break;
			case SC_MEASURE_AVG:
				if (avg && strcmp(lfirst(ln), psprintf("%s_sum", m->name)) == 0)
				{
					const char *cq = quote_identifier(psprintf("%s_count", m->name));
					bool		flt = type == FLOAT4OID || type == FLOAT8OID;

					appendStringInfo(&s, ", (pg_catalog.sum(%s))::%s / NULLIF(pg_catalog.sum(%s), 0) AS %s",
									 q, flt ? "pg_catalog.float8" : "pg_catalog.numeric", cq,
									 quote_identifier(m->name));
				}
				appendStringInfo(&s, ", (pg_catalog.sum(%s))::%s AS %s", q, typname, q);
				break;
			case SC_MEASURE_MIN:
				appendStringInfo(&s, ", pg_catalog.min(%s) AS %s", q, q);
				break;
			case SC_MEASURE_MAX:
				appendStringInfo(&s, ", pg_catalog.max(%s) AS %s", q, q);
				break;
			case SC_MEASURE_HLL:
				schema = sc_rollup_extension_schema(m->kind, m->name);
				appendStringInfo(&s, ", %s.hll_union_agg(%s) AS %s", schema, q, q);
				break;
			case SC_MEASURE_TDIGEST:
				schema = sc_rollup_extension_schema(m->kind, m->name);
				appendStringInfo(&s, ", %s.tdigest(%s) AS %s", schema, q, q);
				break;
		}
		a++;
	}
	return s.data;
}

static char *
sc_rollup_group_by(const ScRollup *r, Oid relid)
{
	StringInfoData s;

	initStringInfo(&s);
	appendStringInfoString(&s, " GROUP BY bucket");
	for (int d = 0; d < r->ndims; d++)
		appendStringInfo(&s, ", %s", quote_identifier(get_attname(relid, d + 2, false)));
	return s.data;
}

/*
 * Whether a dimension of this type and collation can be keyed bytewise:
 * text, varchar and char under a deterministic collation (whose equality
 * is byte equality, char's trailing blanks aside, which its own
 * comparison ignores under any collation).
 */
static bool
sc_rollup_bytewise_key(Oid type, Oid coll)
{
	Oid			base = getBaseType(type);

	if (base != TEXTOID && base != VARCHAROID && base != BPCHAROID)
		return false;
	return OidIsValid(coll) && get_collation_isdeterministic(coll);
}

/* Is indexoid a unique index? */
bool
sc_index_is_unique(Oid indexoid)
{
	HeapTuple	tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(indexoid));
	bool		unique = false;

	if (HeapTupleIsValid(tup))
	{
		unique = ((Form_pg_index) GETSTRUCT(tup))->indisunique;
		ReleaseSysCache(tup);
	}
	return unique;
}

/*
 * The key of part, a sealed partition of r that holds one row per bucket
 * and dimensions (or, on a 0.3.0 catalog, r's table), as its owner.
 */
void
sc_rollup_key_create(const ScRollup *r, Oid part)
{
	char	   *q = sc_relation_qualified(part);
	StringInfoData sql;
	ScAsOwner	as;
	Relation	rel = table_open(part, AccessShareLock);
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;

	table_close(rel, AccessShareLock);
	foreach(lc, indexes)
		if (sc_index_is_unique(lfirst_oid(lc)))
			return;				/* a 0.3.0 roll-up's, which every partition has */
	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE UNIQUE INDEX ON %s (bucket", q);
	for (int d = 0; d < r->ndims; d++)
	{
		Oid			type;
		int32		typmod;
		Oid			coll;

		get_atttypetypmodcoll(part, d + 2, &type, &typmod, &coll);
		appendStringInfo(&sql, ", %s%s", quote_identifier(get_attname(part, d + 2, false)),
						 sc_rollup_bytewise_key(type, coll) ? " COLLATE \"C\"" : "");
	}
	appendStringInfoString(&sql, ") NULLS NOT DISTINCT");
	sc_as_owner_enter(&as, sc_relation_owner(part));
	sc_seal_exec(sql.data);
	sc_as_owner_leave(&as);
}

/*
 * The view <roll-up>_merged: one row per bucket and dimensions over the
 * whole roll-up, active and sealed partitions alike (the partial rows of
 * open windows merged as a seal merges them), avg's average beside its
 * parts.  Made as the owner of the roll-up; its name goes into the
 * catalog.  The caller is connected to SPI.
 */
void
sc_rollup_merged_view_create(const ScRollup *r)
{
	Oid			nsp = get_rel_namespace(r->relid);
	char	   *qualified = quote_qualified_identifier(get_namespace_name(nsp),
													   sc_free_name(nsp, psprintf("%s_merged", get_rel_name(r->relid))));
	ScAsOwner	as;

	sc_as_owner_enter(&as, sc_relation_owner(r->relid));
	sc_seal_exec(psprintf("CREATE VIEW %s AS SELECT %s FROM %s%s", qualified,
						  sc_rollup_merged_list(r, r->relid, true), r->qualified,
						  sc_rollup_group_by(r, r->relid)));
	sc_seal_exec(psprintf("COMMENT ON VIEW %s IS %s", qualified,
						  quote_literal_cstr(psprintf("Roll-up %s merged: one row per bucket and dimensions, "
													  "over active and sealed windows. Maintained by streamcube.",
													  r->qualified))));
	sc_as_owner_leave(&as);
	sc_catalog_exec("UPDATE streamcube.rollup_catalog SET merged_view = $2::regclass WHERE rollup_id = $1",
					2, (Oid[]) {INT4OID, TEXTOID},
					(Datum[]) {Int32GetDatum(r->rollup_id), CStringGetTextDatum(qualified)},
					NULL, false, 0);
}

/* ----------------------------------------------------------------
 * Partitions
 * ----------------------------------------------------------------
 */

/*
 * A partition of roll-up rollup_relid for [lo, hi), made as the roll-up's
 * owner: UNLOGGED with room for its batches' updates while its windows
 * are active, logged once they are sealed.  Returns its qualified name.
 */
static char *
sc_rollup_partition_make(const ScCube *cube, Oid rollup_relid, int64 lo, int64 hi, bool sealed)
{
	Oid			nsp = get_rel_namespace(rollup_relid);
	char	   *qualified = quote_qualified_identifier(get_namespace_name(nsp),
													   sc_window_partition_name(nsp, get_rel_name(rollup_relid), lo));
	char	   *parent = quote_qualified_identifier(get_namespace_name(nsp), get_rel_name(rollup_relid));
	ScAsOwner	as;

	sc_as_owner_enter(&as, sc_relation_owner(rollup_relid));
	sc_seal_exec(psprintf("CREATE %s TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMPRESSION)",
						  sealed ? "" : "UNLOGGED", qualified, parent));
	sc_seal_exec(psprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')",
						  parent, qualified, sc_bound_literal(cube, lo), sc_bound_literal(cube, hi)));
	sc_as_owner_leave(&as);
	return qualified;
}

/*
 * The partition of roll-up rollup_relid for the cube's window at start:
 * UNLOGGED, or logged for a window the cube has sealed.  The caller holds
 * the cube's window lock and is connected to SPI.
 */
void
sc_rollup_window_create(const ScCube *cube, int32 rollup_id, Oid rollup_relid, int64 start,
						bool sealed)
{
	char	   *qualified = sc_rollup_partition_make(cube, rollup_relid, start, start + cube->width, sealed);
	ScPrivilegeSave save;

	sc_catalog_enter(&save);
	if (SPI_execute_with_args("INSERT INTO streamcube.rollup_windows "
							  "(rollup_id, window_start, window_end, state, relid) "
							  "VALUES ($1, $2, $3, $4, $5::regclass)",
							  5, (Oid[]) {INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, TEXTOID},
							  (Datum[]) {Int32GetDatum(rollup_id), TimestampTzGetDatum(start),
								  TimestampTzGetDatum(start + cube->width),
								  CStringGetTextDatum(sealed ? "sealed" : "active"),
							  CStringGetTextDatum(qualified)},
							  NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not record a window of roll-up %s", get_rel_name(rollup_relid));
	sc_catalog_leave(&save);
}

/*
 * The partition of roll-up rollup_relid for a sealed partition of the cube
 * that holds many windows (a compacted bucket, a bucket of history): one
 * logged partition of the same bounds [lo, hi), which every window the
 * cube has there names (starts and ends: timestamptz[]), as compaction
 * leaves a roll-up's (sc_rollup_compact_swap).  A roll-up created on a
 * cube of a year of compacted days has a partition a day, not one per
 * window.  The caller holds the cube's window lock and is connected to
 * SPI.
 */
void
sc_rollup_bucket_create(const ScCube *cube, int32 rollup_id, Oid rollup_relid, int64 lo, int64 hi,
						Datum starts, Datum ends)
{
	char	   *qualified = sc_rollup_partition_make(cube, rollup_relid, lo, hi, true);

	sc_catalog_exec("INSERT INTO streamcube.rollup_windows "
					"(rollup_id, window_start, window_end, state, relid) "
					"SELECT $1, w.s, w.e, 'sealed', $4::regclass FROM unnest($2, $3) AS w(s, e)",
					4, (Oid[]) {INT4OID, TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID, TEXTOID},
					(Datum[]) {Int32GetDatum(rollup_id), starts, ends, CStringGetTextDatum(qualified)},
					NULL, false, 0);
}

/*
 * The cube created its window at start: every roll-up of the cube gets its
 * partition of it, in the same transaction.  A roll-up that holds the
 * window already (the cube's window was dropped by hand and is made anew,
 * while the roll-up keeps the old one) refuses: the rows of the new window
 * would be counted into a partition that a crash does not empty.  That is
 * an error about the message's time value, which becomes a dead letter.
 * The caller holds the cube's window lock and is connected to SPI.
 */
void
sc_rollup_windows_create(const ScCube *cube, int64 start, bool sealed)
{
	static SPIPlanPtr plan = NULL;	/* per window created: planned once */
	Oid			types[2] = {INT4OID, TIMESTAMPTZOID};
	Datum		values[2] = {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(start)};
	SPITupleTable *tab;
	uint64		n;

	if (sc_catalog_exec_kept(&plan,
							 "SELECT r.rollup_id, r.relid::oid, r.relid::text, "
							 "       EXISTS (SELECT 1 FROM streamcube.rollup_windows w "
							 "               WHERE w.rollup_id = r.rollup_id AND w.window_start = $2) "
							 "FROM streamcube.rollup_catalog r WHERE r.cube_id = $1 "
							 "ORDER BY r.rollup_id",
							 2, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.rollup_catalog");
	tab = SPI_tuptable;
	n = SPI_processed;
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;
		int32		id = DatumGetInt32(SPI_getbinval(tab->vals[i], tab->tupdesc, 1, &isnull));
		Oid			relid = DatumGetObjectId(SPI_getbinval(tab->vals[i], tab->tupdesc, 2, &isnull));

		if (DatumGetBool(SPI_getbinval(tab->vals[i], tab->tupdesc, 4, &isnull)))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("window %s of cube %s was dropped, but roll-up %s still holds it",
							sc_bound_literal(cube, start), cube->qualified,
							SPI_getvalue(tab->vals[i], tab->tupdesc, 3)),
					 errhint("Drop the roll-up's partition of that window to let the cube take the window's rows again.")));
		sc_rollup_window_create(cube, id, relid, start, sealed);
	}
}

/* ----------------------------------------------------------------
 * Sealing
 * ----------------------------------------------------------------
 */

/*
 * A logged table schema.name for the roll-up parent's rows of [lo, hi), as
 * owner: its columns, a CHECK constraint equal to the bound (so that
 * ATTACH needs no scan), the rows of sources moved in with their tuple
 * headers (rewrite.c), so that any snapshot sees the same rows before and
 * after, and the key of a sealed partition.  Seals and compactions of
 * roll-ups build their new partitions so.
 *
 * A seal merges (merge): the sources are an active partition's partial
 * rows.  Their merge, one row per bucket and dimensions, is inserted
 * first, then the partial rows are moved superseded, deleted by this
 * transaction: a snapshot older than the seal still sees them and not the
 * merged rows, so it reads the same sums before and after, at any
 * isolation level; VACUUM takes them once no snapshot can, and truncates
 * the table back to the merged rows, which lie before them.  A compaction
 * does not: its sources are sealed partitions of one row per group each,
 * and a group lies in one window.  Returns the table's oid.
 */
static Oid
sc_rollup_logged_copy(const ScRollup *r, Oid owner, const char *parent, const char *schema,
					  const char *name, const char *lo, const char *hi, const Oid *sources,
					  int nsources, bool merge)
{
	char	   *target = quote_qualified_identifier(schema, name);
	ScAsOwner	as;
	ScRowMove  *move;
	Oid			relid;

	sc_as_owner_enter(&as, owner);
	sc_seal_exec(psprintf("CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING STORAGE "
						  "INCLUDING COMPRESSION INCLUDING INDEXES)", target, parent));
	sc_seal_exec(psprintf("ALTER TABLE %s ADD CONSTRAINT streamcube_window CHECK "
						  "(%s IS NOT NULL AND %s >= '%s' AND %s < '%s')",
						  target, r->coarse ? SC_ROLLUP_WINDOW : "bucket",
						  r->coarse ? SC_ROLLUP_WINDOW : "bucket", lo,
						  r->coarse ? SC_ROLLUP_WINDOW : "bucket", hi));
	relid = get_relname_relid(name, get_namespace_oid(schema, false));
	if (merge)
	{
		StringInfoData sql;

		/* The merged rows first, from the partial rows where they are. */
		initStringInfo(&sql);
		appendStringInfo(&sql, "INSERT INTO %s SELECT %s%s FROM (", target,
						 sc_rollup_merged_list(r, relid, false),
						 r->coarse ? ", pg_catalog.min(" SC_ROLLUP_WINDOW ")" : "");
		for (int i = 0; i < nsources; i++)
			appendStringInfo(&sql, "%sSELECT * FROM ONLY %s", i > 0 ? " UNION ALL " : "",
							 sc_relation_qualified(sources[i]));
		appendStringInfo(&sql, ") p%s", sc_rollup_group_by(r, relid));
		sc_seal_exec(sql.data);
	}
	sc_as_owner_leave(&as);

	/* Then the rows moved, superseded by them when merged (rewrite.c). */
	move = sc_rows_move_begin(relid);
	for (int i = 0; i < nsources; i++)
		(void) sc_rows_move_from(move, sources[i], merge);
	sc_rows_move_end(move);
	sc_rollup_key_create(r, relid);
	return relid;
}

/* The roll-up of cube whose id is rollup_id, as the cube was loaded. */
static const ScRollup *
sc_rollup_of(const ScCube *cube, int32 rollup_id)
{
	ListCell   *lc;

	foreach(lc, cube->rollups)
		if (((ScRollup *) lfirst(lc))->rollup_id == rollup_id)
			return lfirst(lc);
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("roll-up %d of cube %s changed while its windows were being sealed",
					rollup_id, cube->qualified),
			 errhint("Try again.")));
	return NULL;
}

/* A roll-up's partition of a window being sealed, and its logged twin. */
typedef struct ScRollupTwin
{
	int32		rollup_id;
	int64		start;
	char	   *parent;			/* the roll-up, quoted */
	char	   *lo;
	char	   *hi;
	char	   *schema;
	char	   *name;			/* the active partition's name */
	char	   *twin_name;
	Oid			twin;
	Oid			owner;
} ScRollupTwin;

/*
 * Phase 1 of a seal, for the roll-ups: the cube's window at start is
 * locked SHARE by the seal, so no receiver writes its roll-up partitions
 * any more; copy each into a logged twin, rows with their tuple headers
 * (rewrite.c), as the cube's window is.  Returns the twins, in the
 * current memory context, for sc_rollup_seal_swap().  The caller is
 * connected to SPI.
 */
List *
sc_rollup_seal_copy(const ScCube *cube, int64 start)
{
	Oid			types[2] = {INT4OID, TIMESTAMPTZOID};
	Datum		values[2] = {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(start)};
	ScPrivilegeSave save;
	List	   *twins = NIL;
	SPITupleTable *tab;
	uint64		n;
	MemoryContext cxt = CurrentMemoryContext;

	sc_catalog_enter(&save);
	if (SPI_execute_with_args("SELECT w.rollup_id, w.relid::oid, r.relid::oid "
							  "FROM streamcube.rollup_windows w "
							  "JOIN streamcube.rollup_catalog r USING (rollup_id) "
							  "WHERE r.cube_id = $1 AND w.window_start = $2 AND w.state = 'active' "
							  "ORDER BY w.rollup_id FOR UPDATE OF w",
							  2, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.rollup_windows");
	sc_catalog_leave(&save);
	tab = SPI_tuptable;
	n = SPI_processed;
	for (uint64 i = 0; i < n; i++)
	{
		ScRollupTwin *t = MemoryContextAllocZero(cxt, sizeof(ScRollupTwin));
		bool		isnull;
		Oid			active = DatumGetObjectId(SPI_getbinval(tab->vals[i], tab->tupdesc, 2, &isnull));
		Oid			rollup = DatumGetObjectId(SPI_getbinval(tab->vals[i], tab->tupdesc, 3, &isnull));
		Oid			nsp = get_rel_namespace(active);

		/* what the twin keeps lives in the caller's context (SPI leaves its own current) */
		MemoryContextSwitchTo(cxt);
		t->rollup_id = DatumGetInt32(SPI_getbinval(tab->vals[i], tab->tupdesc, 1, &isnull));
		t->start = start;
		t->parent = sc_relation_qualified(rollup);
		t->lo = sc_bound_literal(cube, start);
		t->hi = sc_bound_literal(cube, start + cube->width);
		t->schema = get_namespace_name(nsp);
		t->name = get_rel_name(active);
		t->owner = sc_relation_owner(rollup);
		LockRelationOid(active, ShareLock);
		t->twin_name = sc_free_name(nsp, psprintf("%s_sealing", t->name));
		t->twin = sc_rollup_logged_copy(sc_rollup_of(cube, t->rollup_id), t->owner, t->parent,
										t->schema, t->twin_name, t->lo, t->hi, &active, 1, true);
		MemoryContextSwitchTo(cxt);
		twins = lappend(twins, t);
	}
	MemoryContextSwitchTo(cxt);
	return twins;
}

/*
 * Phase 2, inside the seal's swap (under its lock timeout, retried with
 * it): each roll-up partition's twin takes its place, and the catalog
 * points at it before the old one is dropped (the sql_drop trigger would
 * forget the window).
 */
void
sc_rollup_seal_swap(List *twins)
{
	ListCell   *lc;

	foreach(lc, twins)
	{
		ScRollupTwin *t = lfirst(lc);
		char	   *active = quote_qualified_identifier(t->schema, t->name);
		ScAsOwner	as;

		sc_as_owner_enter(&as, t->owner);
		sc_seal_exec(psprintf("ALTER TABLE %s DETACH PARTITION %s", t->parent, active));
		sc_as_owner_leave(&as);
		sc_catalog_exec("UPDATE streamcube.rollup_windows SET state = 'sealed', relid = $3 "
						"WHERE rollup_id = $1 AND window_start = $2",
						3, (Oid[]) {INT4OID, TIMESTAMPTZOID, OIDOID},
						(Datum[]) {Int32GetDatum(t->rollup_id), TimestampTzGetDatum(t->start),
						ObjectIdGetDatum(t->twin)}, NULL, false, 0);
		sc_as_owner_enter(&as, t->owner);
		sc_seal_exec(psprintf("DROP TABLE %s", active));
		sc_seal_exec(psprintf("ALTER TABLE %s RENAME TO %s",
							  quote_qualified_identifier(t->schema, t->twin_name),
							  quote_identifier(t->name)));
		sc_seal_exec(psprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')",
							  t->parent, active, t->lo, t->hi));
		sc_as_owner_leave(&as);
	}
}

/* After a failed seal: drop the twins phase 1 made. */
void
sc_rollup_seal_cleanup(List *twins)
{
	ListCell   *lc;

	foreach(lc, twins)
	{
		ScRollupTwin *t = lfirst(lc);
		ScAsOwner	as;

		sc_as_owner_enter(&as, t->owner);
		sc_seal_exec(psprintf("DROP TABLE IF EXISTS %s",
							  quote_qualified_identifier(t->schema, t->twin_name)));
		sc_as_owner_leave(&as);
	}
}

/* ----------------------------------------------------------------
 * Retention
 * ----------------------------------------------------------------
 */

static void
sc_rollup_drop_fn(void *arg)
{
	sc_seal_exec((const char *) arg);
}

/*
 * Drop the partitions of the cube's roll-ups whose windows are past the
 * roll-up's retention and no longer in the cube (the cube's retention, or
 * a drop by hand, took them): the oldest first, at most max_partitions.
 * Returns how many.  The caller holds the cube's seal lock and is
 * connected to SPI.
 */
int
sc_rollup_retention(ScCube *cube, int max_partitions)
{
	Oid			types[3] = {INT4OID, TIMESTAMPTZOID, INT4OID};
	Datum		values[3];
	ScPrivilegeSave save;
	SPITupleTable *tab;
	uint64		n;
	int64		now = sc_cube_time(cube, GetCurrentTransactionStartTimestamp());

	if (max_partitions <= 0)
		return 0;
	values[0] = Int32GetDatum(cube->cube_id);
	values[1] = TimestampTzGetDatum(now);
	values[2] = Int32GetDatum(max_partitions);
	sc_catalog_enter(&save);
	/* A partition goes when all of it is past: a compacted one holds many windows. */
	if (SPI_execute_with_args("SELECT w.relid::oid "
							  "FROM streamcube.rollup_catalog c "
							  "JOIN streamcube.rollup_windows w USING (rollup_id) "
							  "WHERE c.cube_id = $1 AND c.retention IS NOT NULL "
							  "GROUP BY w.relid, c.retention "
							  "HAVING max(w.window_end) <= $2 - c.retention "
							  "   AND NOT bool_or(EXISTS (SELECT 1 FROM streamcube.segment_catalog s "
							  "                           WHERE s.cube_id = $1 AND s.window_start = w.window_start)) "
							  "ORDER BY min(w.window_start) LIMIT $3",
							  3, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.rollup_windows");
	sc_catalog_leave(&save);
	tab = SPI_tuptable;
	n = SPI_processed;
	/* The views must not read what is dropped: rebuilt without, then with what stands. */
	if (n > 0)
	{
		sc_rollup_lock_sealed_views(cube, false, "drop roll-up windows past their retention");
		sc_rollup_refresh_views(cube->cube_id, InvalidOid, true);
	}
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;
		Oid			part = DatumGetObjectId(SPI_getbinval(tab->vals[i], tab->tupdesc, 1, &isnull));
		char	   *relname = get_rel_name(part);

		if (relname == NULL)
			continue;
		/* As the owner, under the lock retry; sql_drop forgets the window. */
		sc_seal_with_lock_retry(cube, sc_rollup_drop_fn,
								psprintf("DROP TABLE %s",
										 quote_qualified_identifier(get_namespace_name(get_rel_namespace(part)),
																	relname)),
								"drop a roll-up window past its retention");
	}
	if (n > 0)
		sc_rollup_refresh_views(cube->cube_id, InvalidOid, false);
	return (int) n;
}

/* ----------------------------------------------------------------
 * Compaction
 * ----------------------------------------------------------------
 */

/* A roll-up's partitions of a bucket being compacted, and the new one. */
typedef struct ScRollupMerge
{
	int32		rollup_id;
	char	   *parent;			/* the roll-up, quoted */
	char	   *schema;
	Oid			owner;
	int			nsources;
	Oid		   *sources;
	char	   *final_base;		/* the name it should get */
	char	   *new_name;		/* its name until the swap */
	Oid			new_relid;
} ScRollupMerge;

static void
sc_rollup_unlock(List *merges, int upto_rollup, int upto_source)
{
	ListCell   *lc;
	int			i = 0;

	foreach(lc, merges)
	{
		ScRollupMerge *m = lfirst(lc);
		int			n = i < upto_rollup ? m->nsources : (i == upto_rollup ? upto_source : 0);

		for (int s = 0; s < n; s++)
			UnlockRelationOid(m->sources[s], ShareLock);
		i++;
	}
}

/*
 * Phase 1 of a compaction of the cube's windows in [start, end), for its
 * roll-ups: lock each roll-up's partitions of the bucket SHARE, without
 * waiting (receivers write them only under the cube window's lock, which
 * the compaction holds already; a reader's lock does not conflict), and
 * copy their rows, tuple headers kept, into a new logged table per
 * roll-up.  Buckets of a roll-up lie in one window each, and a sealed
 * partition holds one row per group, so the rows are moved, not merged.  Returns the merges (in the current memory context),
 * or sets *ok false and takes nothing when a partition is busy.  The
 * caller is connected to SPI.
 */
List *
sc_rollup_compact_copy(const ScCube *cube, int64 start, int64 end, const char *suffix, bool *ok)
{
	MemoryContext cxt = CurrentMemoryContext;
	ScPrivilegeSave save;
	SPITupleTable *tab;
	uint64		n;
	List	   *merges = NIL;
	ListCell   *lc;
	int			i = 0;

	*ok = true;
	sc_catalog_enter(&save);
	if (SPI_execute_with_args("SELECT r.rollup_id, r.relid::oid, "
							  "       array_remove(array_agg(DISTINCT w.relid::oid), NULL) "
							  "FROM streamcube.rollup_catalog r "
							  "LEFT JOIN streamcube.rollup_windows w ON w.rollup_id = r.rollup_id "
							  "     AND w.window_start >= $2 AND w.window_start < $3 "
							  "WHERE r.cube_id = $1 GROUP BY r.rollup_id, r.relid ORDER BY r.rollup_id",
							  3, (Oid[]) {INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID},
							  (Datum[]) {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(start),
							  TimestampTzGetDatum(end)},
							  NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.rollup_windows");
	sc_catalog_leave(&save);
	MemoryContextSwitchTo(cxt);
	tab = SPI_tuptable;
	n = SPI_processed;
	for (uint64 k = 0; k < n; k++)
	{
		ScRollupMerge *m = palloc0(sizeof(ScRollupMerge));
		bool		isnull;
		Oid			rollup = DatumGetObjectId(SPI_getbinval(tab->vals[k], tab->tupdesc, 2, &isnull));
		Datum	   *srcs;
		int			nsrcs;

		m->rollup_id = DatumGetInt32(SPI_getbinval(tab->vals[k], tab->tupdesc, 1, &isnull));
		m->schema = get_namespace_name(get_rel_namespace(rollup));
		m->parent = quote_qualified_identifier(m->schema, get_rel_name(rollup));
		m->owner = sc_relation_owner(rollup);
		deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(tab->vals[k], tab->tupdesc, 3, &isnull)),
						  OIDOID, sizeof(Oid), true, TYPALIGN_INT, &srcs, NULL, &nsrcs);
		m->nsources = nsrcs;
		m->sources = palloc(sizeof(Oid) * Max(nsrcs, 1));
		for (int s = 0; s < nsrcs; s++)
			m->sources[s] = DatumGetObjectId(srcs[s]);
		m->final_base = psprintf("%s%s", get_rel_name(rollup), suffix);
		merges = lappend(merges, m);
	}

	/* Locks first, for every roll-up: a busy one leaves the bucket for later. */
	foreach(lc, merges)
	{
		ScRollupMerge *m = lfirst(lc);

		for (int s = 0; s < m->nsources; s++)
			if (!ConditionalLockRelationOid(m->sources[s], ShareLock))
			{
				sc_rollup_unlock(merges, i, s);
				*ok = false;
				return NIL;
			}
		i++;
	}

	foreach(lc, merges)
	{
		ScRollupMerge *m = lfirst(lc);
		Oid			nsp = get_namespace_oid(m->schema, false);
		const ScRollup *r = sc_rollup_of(cube, m->rollup_id);

		MemoryContextSwitchTo(cxt);
		m->new_name = sc_free_name(nsp, psprintf("%s_compacting", m->final_base));
		/* a coarse roll-up's groups span the windows: merged again */
		m->new_relid = sc_rollup_logged_copy(r, m->owner, m->parent, m->schema, m->new_name,
											 sc_bound_literal(cube, start), sc_bound_literal(cube, end),
											 m->sources, m->nsources, r->coarse);
	}
	MemoryContextSwitchTo(cxt);
	return merges;
}

/*
 * Phase 2, inside the compaction's swap (which holds the cube's window
 * lock and has pointed every window of the bucket at the cube's new
 * partition): each roll-up's new partition takes the place of its old
 * ones and covers every window of the bucket, those that never had a
 * partition too (a late row there must find its roll-up's partition).
 */
void
sc_rollup_compact_swap(const ScCube *cube, List *merges, int64 start, int64 end)
{
	ListCell   *lc;

	foreach(lc, merges)
	{
		ScRollupMerge *m = lfirst(lc);
		Oid			nsp = get_namespace_oid(m->schema, false);
		char	   *final_name;
		char	   *qualified;
		ScAsOwner	as;

		sc_as_owner_enter(&as, m->owner);
		for (int s = 0; s < m->nsources; s++)
			sc_seal_exec(psprintf("ALTER TABLE %s DETACH PARTITION %s", m->parent,
								  quote_qualified_identifier(m->schema, get_rel_name(m->sources[s]))));
		sc_as_owner_leave(&as);

		/* The windows point at the new partition before the old go (sql_drop). */
		sc_catalog_exec("DELETE FROM streamcube.rollup_windows "
						"WHERE rollup_id = $1 AND window_start >= $2 AND window_start < $3",
						3, (Oid[]) {INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID},
						(Datum[]) {Int32GetDatum(m->rollup_id), TimestampTzGetDatum(start),
						TimestampTzGetDatum(end)}, NULL, false, 0);
		sc_catalog_exec("INSERT INTO streamcube.rollup_windows "
						"(rollup_id, window_start, window_end, state, relid) "
						"SELECT $1, s.window_start, s.window_end, 'sealed', $5 "
						"FROM streamcube.segment_catalog s "
						"WHERE s.cube_id = $4 AND s.window_start >= $2 AND s.window_start < $3",
						5, (Oid[]) {INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID, OIDOID},
						(Datum[]) {Int32GetDatum(m->rollup_id), TimestampTzGetDatum(start),
							TimestampTzGetDatum(end), Int32GetDatum(cube->cube_id),
						ObjectIdGetDatum(m->new_relid)}, NULL, false, 0);

		sc_as_owner_enter(&as, m->owner);
		for (int s = 0; s < m->nsources; s++)
			sc_seal_exec(psprintf("DROP TABLE %s",
								  quote_qualified_identifier(m->schema, get_rel_name(m->sources[s]))));
		final_name = sc_free_name(nsp, m->final_base);
		qualified = quote_qualified_identifier(m->schema, final_name);
		sc_seal_exec(psprintf("ALTER TABLE %s RENAME TO %s",
							  quote_qualified_identifier(m->schema, m->new_name),
							  quote_identifier(final_name)));
		sc_seal_exec(psprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')",
							  m->parent, qualified, sc_bound_literal(cube, start),
							  sc_bound_literal(cube, end)));
		sc_as_owner_leave(&as);
	}
}

/* After a compaction that was not swapped in: drop the new tables. */
void
sc_rollup_compact_cleanup(List *merges)
{
	ListCell   *lc;

	foreach(lc, merges)
	{
		ScRollupMerge *m = lfirst(lc);
		ScAsOwner	as;

		if (m->new_name == NULL)
			continue;
		sc_as_owner_enter(&as, m->owner);
		sc_seal_exec(psprintf("DROP TABLE IF EXISTS %s",
							  quote_qualified_identifier(m->schema, m->new_name)));
		sc_as_owner_leave(&as);
	}
}
