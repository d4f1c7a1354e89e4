/*-------------------------------------------------------------------------
 *
 * reassign.h
 *		Replica sets and reassignment: what the launcher and the receivers
 *		call.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_REASSIGN_H
#define SC_REASSIGN_H

#include "cube.h"
#include "nodes/pg_list.h"
#include "utils/jsonb.h"

extern void sc_reassign_journal_failures(void);

/* placement.c */
extern bool sc_placement_step(void);
extern void sc_placement_drop_views(int32 cube_id, Oid relid, Oid owner);
extern int	sc_placement_own_partitions(int32 cube_id, int n, int32 *parts, int64 *targets,
										Datum *partarray, Datum *targetarray);
extern char *sc_placement_stops(int32 cube_id, int n, const int32 *parts, int64 *targets,
								 bool *placed);

extern Jsonb *sc_reassign_call(const char *cube_name, Jsonb *assignment, Jsonb *options,
							   const char *origin, int64 *epoch);
extern void sc_reassign_first_assignment(int32 cube_id, List *replica_sets, List *partitions);
extern int	sc_reassign_adopt_partitions(ScCube *cube, List *kafka_partitions, List *new_topics);
extern int	sc_reassign_topics(ScCube *cube, List *kafka_partitions);
extern void sc_reassign_journal_receiver(int32 cube_id, int64 epoch, const char *step,
										 const char *replica_set, List *partitions,
										 int64 *offsets, TimestampTz since,
										 double unconsumed_ms);

#endif							/* SC_REASSIGN_H */
