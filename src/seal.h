/*-------------------------------------------------------------------------
 *
 * seal.h
 *		Sealing (seal.c): closed windows become logged, immutable partitions.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMCUBE_SEAL_H
#define STREAMCUBE_SEAL_H

#include "cube.h"

/*
 * Most partitions one seal call (streamcube_seal, or streamcube_seal_due
 * for all cubes together) seals, a window each or a bucket of history's
 * windows: each takes locks on two tables and their indexes until the
 * commit.  A backlog is sealed over several calls, at
 * the pace compaction merges them (SC_COMPACT_MAX_SOURCES a call), so that
 * sealed partitions not yet compacted, which <cube>_sealed reads (and
 * locks), do not pile up.
 */
#define SC_SEAL_MAX_PARTITIONS SC_COMPACT_MAX_SOURCES

extern TimestampTz sc_seal_now(const ScCube *cube);
extern List *sc_seal_prepare(ScCube *cube, TimestampTz older_than, int max_partitions);
extern int	sc_seal_windows(List *jobs);
extern void sc_seal_finish(ScCube *cube, List *jobs);
extern void sc_seal_cleanup(ScCube *cube, List *jobs);

#endif							/* STREAMCUBE_SEAL_H */
