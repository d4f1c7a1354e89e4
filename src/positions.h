/*-------------------------------------------------------------------------
 *
 * positions.h
 *		Consume positions and restart checkpoints of a cube's Kafka
 *		partitions: the only code that reads or writes them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_POSITIONS_H
#define SC_POSITIONS_H

#include "streamcube.h"

#include "kafka.h"
#include "nodes/pg_list.h"
#include "utils/jsonb.h"

/* The partitions a replica set consumes, with their positions. */
typedef struct ScPositions
{
	int			n;
	int32	   *partitions;		/* ascending */
	int64	   *positions;		/* next offset to read */
	int64	   *epochs;			/* assignment epoch of each partition */
	TimestampTz *handed_at;		/* when a reassignment handed it over; 0 */
	int64	   *stops;			/* first offset not to read (a stop point); -1 none */
	int64		assignment_epoch;	/* the cube's, when read */
	int			known;			/* partitions the cube knows (checkpoints) */
} ScPositions;

/*
 * One partition's offset asked for by a user (streamcube_set_positions, a
 * stop point), as parsed, then resolved against what Kafka holds.
 */
typedef struct ScPositionChange
{
	int32		partition;
	char	   *requested;		/* "earliest", "latest", the offset or "timestamp T" */
	int64		at_ms;			/* by time: Kafka milliseconds; -1 otherwise */
	int64		offset;			/* resolved */
} ScPositionChange;

struct ScCube;

extern List *sc_offsets_parse(Jsonb *request, const char *what, const ScCube *cube,
							  List *assigned);
extern void sc_offsets_by_time(struct ScCube *cube, List *changes, List *kafka);
extern void sc_offsets_at_checked(const ScKafkaConnInfo *conn, const char *cluster,
								  const ScTopicList *topics, int n, const int32 *parts,
								  const int64 *ms, int64 *offsets, List *kafka);
extern bool sc_positions_earliest_again(struct ScCube *cube, int32 partition, int64 position,
										int64 low);
extern void sc_offsets_resolve(struct ScCube *cube, ScPositionChange *c, List *kafka);

extern void sc_positions_init(int32 cube_id, int32 partition, int64 offset);
extern void sc_positions_raise_checkpoint(int32 cube_id, int32 partition, int64 offset);
extern ScPositions *sc_positions_load(int32 cube_id, const char *replica_set,
									  MemoryContext cxt);
extern bool sc_positions_advance(int32 cube_id, const char *cube_name,
								 const char *replica_set, int64 epoch,
								 int32 partition, int64 from, int64 to);
extern int32 sc_positions_advance_all(int32 cube_id, const char *cube_name,
									  const char *replica_set, int n, const int64 *epochs,
									  const int32 *partitions, const int64 *from,
									  const int64 *to);
extern bool sc_positions_lock_advance(int32 cube_id, const char *cube_name,
									  const char *replica_set, int n, const int64 *epochs,
									  const int32 *partitions, const int64 *from,
									  const int64 *to, int32 *lost);
extern void sc_positions_hold(int32 cube_id, int n, const int32 *partitions);
extern int64 sc_positions_merged(int32 cube_id, int32 partition);
extern void sc_positions_hand_over(int32 cube_id, int32 partition, const char *replica_set,
								   int64 epoch, int64 offset, TimestampTz held_at);
extern int64 sc_positions_short_of(int32 cube_id, Datum parts, Datum targets);
extern void sc_positions_first_offsets(int32 cube_id, int n, const int64 *starts,
									   const int32 *partitions, const int64 *offsets);
extern void sc_positions_late(int32 cube_id, int64 window_start, int32 partition, int64 upto);
extern void sc_positions_seal(int32 cube_id, int64 window_start);

#endif							/* SC_POSITIONS_H */
