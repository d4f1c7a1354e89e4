/*-------------------------------------------------------------------------
 *
 * seal.h
 *		What sealing (seal.c) and compaction (compact.c) share: DDL on a
 *		cube's partitions as its owner, with short lock timeouts.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMCUBE_SEAL_H
#define STREAMCUBE_SEAL_H

#include "cube.h"

/* seal.c */
extern void sc_seal_exec(const char *sql);
extern bool sc_seal_lock_cube(const ScCube *cube);
extern char *sc_column_list(Oid relid);
extern char *sc_free_name(Oid nsp, const char *base);
extern const char *sc_time_column(const ScCube *cube);
extern void sc_sealed_table_create(const ScCube *cube, const char *target,
								   const char *lo, const char *hi);
extern void sc_sealed_table_guard(const char *target);
extern void sc_seal_with_lock_retry(const ScCube *cube, void (*fn) (void *), void *arg,
									const char *what);
extern void sc_seal_refresh_view(ScCube *cube, TimestampTz drop_before,
								 const Oid *except, int nexcept);

/*
 * Most windows one seal call (streamcube_seal, or streamcube_seal_due for
 * all cubes together) seals: each takes locks on two tables and their
 * indexes until the commit.  A backlog is sealed over several calls, at
 * the pace compaction merges them (SC_COMPACT_MAX_SOURCES a call), so that
 * sealed partitions not yet compacted, which <cube>_sealed reads (and
 * locks), do not pile up.
 */
#define SC_SEAL_MAX_WINDOWS SC_COMPACT_MAX_SOURCES

/* compact.c */
/* Old partitions one streamcube_seal_due() call merges at most, all cubes together. */
#define SC_COMPACT_DUE_SOURCES SC_COMPACT_MAX_SOURCES

typedef struct ScCompactJob ScCompactJob;
extern int	sc_compact_sources(List *jobs);
extern List *sc_compact_prepare(ScCube *cube, TimestampTz older_than, int max_sources);
extern int	sc_compact_finish(ScCube *cube, List *jobs);
extern void sc_compact_cleanup(ScCube *cube, List *jobs);

#endif							/* STREAMCUBE_SEAL_H */
