/*-------------------------------------------------------------------------
 *
 * rollup.h
 *		Roll-ups: pre-aggregated tables of a cube (rollups.c defines and
 *		keeps their catalog and partitions and merges a window's partial
 *		rows when it is sealed, rollup_agg.c aggregates a batch into
 *		partial rows, ingest_rollup.c hands it the batch, rollup_sql.c has
 *		the SQL functions).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_ROLLUP_H
#define SC_ROLLUP_H

#include "cube.h"
#include "lib/stringinfo.h"
#include "access/tupdesc.h"
#include "nodes/pg_list.h"

typedef enum ScMeasureKind
{
	SC_MEASURE_COUNT_ALL,		/* count(*) */
	SC_MEASURE_COUNT,			/* count(c): rows where c is not NULL */
	SC_MEASURE_SUM,
	SC_MEASURE_MIN,
	SC_MEASURE_MAX,
	SC_MEASURE_AVG,				/* kept as <name>_sum and <name>_count */
	SC_MEASURE_HLL,				/* an hll of c's hashes (extension hll) */
	SC_MEASURE_TDIGEST			/* a t-digest of c (extension tdigest) */
} ScMeasureKind;

typedef struct ScMeasure
{
	char	   *name;			/* as given: the column (avg: its prefix) */
	ScMeasureKind kind;
	int			column;			/* index in cube->columns; -1 for count(*) */
	char	   *filter;			/* FILTER (WHERE <filter>) as given, or NULL */
} ScMeasure;

/*
 * The relation a roll-up's SELECT list reads (sc_rollup_select_list): the
 * bucket under this name, then the cube's columns under their own names,
 * which a measure's FILTER names.
 */
#define SC_ROLLUP_BUCKET "\"sc bucket\""

/*
 * The last column of a roll-up whose buckets span several windows (a
 * roll-up by hour of a cube of minute windows): the window a row's events
 * came from, the roll-up's partition key.  Each window's partial rows stay
 * in the window's partition, which is UNLOGGED while the window is active
 * and logged from its seal on, as for any roll-up, so a crash loses and
 * replays exactly what it does for the cube; a seal merges a window's
 * rows to one per group (and window), a compaction merges a bucket of
 * windows to one per group.  Not a column of other roll-ups.
 */
#define SC_ROLLUP_WINDOW "\"sc window\""

/* One roll-up of a cube, as its catalog row says. */
typedef struct ScRollup
{
	int32		rollup_id;
	Oid			relid;
	char	   *qualified;		/* quoted schema.table */
	int64		granularity;	/* bucket width, microseconds: divides the cube's
								 * window, or is a whole number of windows */
	bool		coarse;			/* a bucket spans windows (SC_ROLLUP_WINDOW) */
	int			ndims;
	int		   *dims;			/* indexes in cube->columns; -1: an expression */
	char	  **dim_names;		/* the roll-up's column of each */
	char	  **dim_exprs;		/* an expression's text over the cube's columns, or NULL */
	int			nmeasures;
	ScMeasure  *measures;
	int64		retention;		/* microseconds; -1 keeps */
} ScRollup;

/* The digests' compression: centroids a t-digest keeps (extension tdigest). */
#define SC_TDIGEST_COMPRESSION 100

/* rollup_agg.c: a roll-up's share of a batch, aggregated and appended */
typedef struct ScRollupAgg ScRollupAgg;
extern ScRollupAgg *sc_rollup_agg_make(const ScCube *cube, ScRollup *r);
extern void sc_rollup_agg_columns(const ScCube *cube, const ScRollup *r, bool *read);
extern char *sc_rollup_input_relation(const ScCube *cube);
extern void sc_rollup_check_filter(const ScCube *cube, const ScRollup *r, const ScMeasure *m);
extern void sc_rollup_check_dimension(const ScCube *cube, const ScRollup *r, int d);
extern void sc_rollup_agg_free(ScRollupAgg *agg);
extern void sc_rollup_agg_run(const ScCube *cube, ScRollupAgg *agg, int n, const int64 *ts,
							  Datum **values, bool **nulls, const bool *use, bool fill);

/* rollup_def.c */
extern bool sc_rollup_catalog_current(void);
extern List *sc_rollups_load(ScCube *cube);
extern List *sc_cube_rollup_tables(int32 cube_id);
extern void sc_rollup_parse_measure(const ScCube *cube, const char *name, const char *text,
									ScMeasure *out, bool missing_ok);
extern int	sc_rollup_column(const ScCube *cube, const char *name);
extern const char *sc_rollup_problem(const ScCube *cube, const ScRollup *r);
extern const char *sc_measure_function(ScMeasureKind kind);
extern char *sc_rollup_extension_schema(ScMeasureKind kind, const char *measure);
extern char *sc_cube_column_type(const ScCube *cube, int c);
extern char *sc_rollup_dim_sql(const ScCube *cube, const ScRollup *r, int d, const char *alias);

/* rollups.c */
extern int32 sc_rollup_catalog_insert(const ScCube *cube, Oid relid, Interval *granularity,
									  const ScRollup *r, Jsonb *measures, Interval *retention);
extern void sc_rollup_catalog_delete(Oid relid);
extern Oid *sc_rollup_sealed_views(int32 cube_id, int *n);
extern void sc_rollup_lock_sealed_views(const ScCube *cube, bool cube_view, const char *what);
extern void sc_rollup_refresh_views(int32 cube_id, Oid only, bool empty);
extern void sc_rollup_drop_views(int32 cube_id, Oid only);
extern char *sc_rollup_insert_sql(const ScRollup *r, TupleDesc desc, const char *target, bool upsert);
extern void sc_rollup_key_create(const ScRollup *r, Oid part);
extern bool sc_index_is_unique(Oid indexoid);
extern void sc_rollup_merged_view_create(const ScRollup *r);
extern char *sc_rollup_select_list(const ScCube *cube, const ScRollup *r, const char *from_alias);
extern void sc_rollup_windows_create(const ScCube *cube, int64 start, bool sealed);
extern void sc_rollup_window_create(const ScCube *cube, int32 rollup_id, Oid rollup_relid,
									int64 start, bool sealed);
extern void sc_rollup_bucket_create(const ScCube *cube, int32 rollup_id, Oid rollup_relid,
									int64 lo, int64 hi, Datum starts, Datum ends);
extern List *sc_rollup_seal_copy(const ScCube *cube, int64 start);
extern void sc_rollup_seal_swap(List *twins);
extern void sc_rollup_seal_cleanup(List *twins);
extern int	sc_rollup_retention(ScCube *cube, int max_partitions);
extern List *sc_rollup_compact_copy(const ScCube *cube, int64 start, int64 end, const char *suffix,
									bool *ok);
extern void sc_rollup_compact_swap(const ScCube *cube, List *merges, int64 start, int64 end);
extern void sc_rollup_compact_cleanup(List *merges);

#endif							/* SC_ROLLUP_H */
