/*-------------------------------------------------------------------------
 *
 * compact.h
 *		Compaction (compact.c): sealed partitions merged into coarser ones.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMCUBE_COMPACT_H
#define STREAMCUBE_COMPACT_H

#include "cube.h"

/* Old partitions one streamcube_seal_due() call merges at most, all cubes together. */
#define SC_COMPACT_DUE_SOURCES SC_COMPACT_MAX_SOURCES

typedef struct ScCompactJob ScCompactJob;
extern int	sc_compact_sources(List *jobs);
extern int	sc_compact_backlog(ScCube *cube, TimestampTz older_than);
extern List *sc_compact_prepare(ScCube *cube, TimestampTz older_than, int max_sources);
extern int	sc_compact_finish(ScCube *cube, List *jobs);
extern void sc_compact_cleanup(ScCube *cube, List *jobs);

#endif							/* STREAMCUBE_COMPACT_H */
