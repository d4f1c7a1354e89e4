/*-------------------------------------------------------------------------
 *
 * rollup.h
 *		Roll-ups: pre-aggregated tables of a cube (rollups.c defines and
 *		keeps their catalog and partitions, ingest_rollup.c merges batches
 *		into them, rollup_sql.c has the SQL functions).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_ROLLUP_H
#define SC_ROLLUP_H

#include "cube.h"
#include "lib/stringinfo.h"
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
} ScMeasure;

/* One roll-up of a cube, as its catalog row says. */
typedef struct ScRollup
{
	int32		rollup_id;
	Oid			relid;
	char	   *qualified;		/* quoted schema.table */
	int64		granularity;	/* bucket width, microseconds; divides the cube's */
	int			ndims;
	int		   *dims;			/* indexes in cube->columns */
	int			nmeasures;
	ScMeasure  *measures;
	int64		retention;		/* microseconds; -1 keeps */
} ScRollup;

/*
 * Room left free in the pages of an active roll-up partition.  Every batch
 * rewrites the roll-up rows of the groups it touches; a new version that
 * fits on its page is a HOT update, which adds no key entry, and the page
 * is pruned of the versions older batches left.  Sealed partitions are
 * packed full (written once, then read).
 */
#define SC_ROLLUP_ACTIVE_FILLFACTOR 50

/* The digests' compression: centroids a t-digest keeps (extension tdigest). */
#define SC_TDIGEST_COMPRESSION 100

/* ingest_rollup.c: a roll-up's merge statement, prepared */
typedef struct ScRollupPlan ScRollupPlan;
extern ScRollupPlan *sc_rollup_plan_make(const ScCube *cube, ScRollup *r);
extern void sc_rollup_plan_free(ScRollupPlan *p);
extern void sc_rollup_plan_run(const ScCube *cube, ScRollupPlan *p, int n, const int64 *ts,
							   Datum **values, bool **nulls, const bool *use);

/* rollups.c */
extern List *sc_rollups_load(ScCube *cube);
extern List *sc_cube_rollup_tables(int32 cube_id);
extern void sc_rollup_refresh_views(int32 cube_id, Oid only, bool empty);
extern void sc_rollup_drop_views(int32 cube_id, Oid only);
extern void sc_rollup_parse_measure(const ScCube *cube, const char *name, const char *text,
									ScMeasure *out, bool missing_ok);
extern int	sc_rollup_column(const ScCube *cube, const char *name);
extern const char *sc_rollup_problem(const ScCube *cube, const ScRollup *r);
extern const char *sc_measure_function(ScMeasureKind kind);
extern char *sc_rollup_extension_schema(ScMeasureKind kind, const char *measure);
extern void sc_rollup_merge_sql(const ScCube *cube, const ScRollup *r, StringInfo sql,
								Oid **argtypes, int *nargs, int **argcols);
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
