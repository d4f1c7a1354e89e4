/*-------------------------------------------------------------------------
 *
 * reassign_internal.h
 *		A reassignment's state and steps, shared by reassign.c (which runs
 *		streamcube_reassign()), reassign_topics.c (which runs them for
 *		partitions and topics added to a cube or taken out) and placement.c
 *		(which hands a replica set's partitions over to a node).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_REASSIGN_INTERNAL_H
#define SC_REASSIGN_INTERNAL_H

#include "cube.h"
#include "nodes/pg_list.h"

/* One partition and the replica set it is assigned to (NULL: none). */
typedef struct ScAssigned
{
	int32		partition;
	char	   *replica_set;
} ScAssigned;

/* One partition whose replica set changes. */
typedef struct ScMove
{
	int32		partition;
	char	   *from;			/* NULL: assigned to nobody before */
	char	   *to;				/* NULL: assigned to nobody after */
	int64		offset;			/* merged: where the new owner starts */
	int64		low_watermark;	/* Kafka's, for a partition the cube never knew */
	TimestampTz held_at;		/* when its old owner could no longer commit it */
} ScMove;

/* A reassignment under way. */
typedef struct ScReassign
{
	const char *cube_name;
	int32		cube_id;
	Oid			relid;
	ScCube	   *cube;
	int64		id;				/* reassign_id, and the new assignment epoch */
	const char *origin;			/* streamcube_reassign, streamcube_place, streamcube_adopt, new_partitions or
								 * streamcube_alter_cube */
	Oid			roleid;			/* the caller */
	char	   *role;
	TimestampTz started_at;
	const char *step;			/* the step under way */
	int64		timeout_ms;
	bool		allow_partial;
	List	   *old;			/* ScAssigned, by partition */
	List	   *new;			/* ScAssigned, by partition */
	List	   *moves;			/* ScMove, by partition */
	char	   *old_json;
	char	   *new_json;
} ScReassign;

/* reassign.c */
extern int	sc_string_node_cmp(const ListCell *a, const ListCell *b);
extern char *sc_assignment_json(const ScCube *cube, List *assigned, List *names);
extern List *sc_reassign_read_assignment(int32 cube_id);
extern void sc_reassign_lock_cube(ScReassign *r);
extern void sc_reassign_pause(ScReassign *r);
extern void sc_reassign_merge(ScReassign *r);
extern void sc_reassign_assign(ScReassign *r);
extern void sc_reassign_steps(ScReassign *r);
extern void sc_reassign_init(ScReassign *r, ScCube *cube, const char *origin);

#endif							/* SC_REASSIGN_INTERNAL_H */
