/*-------------------------------------------------------------------------
 *
 * cube_catalog.h
 *		The one writer of a cube's row in streamcube.cubes.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_CUBE_CATALOG_H
#define SC_CUBE_CATALOG_H

#include "postgres.h"

#include "utils/jsonb.h"

extern int32 sc_cube_row_insert(Oid relid, const char *cluster, const char *topic,
								const char *time_column, Interval *width, const char *format,
								Jsonb *options, const char *kafka_cluster_id);
extern Oid	sc_cube_row_delete(int32 cube_id);
extern void sc_cube_row_set_paused(int32 cube_id, bool paused, bool skip_bad);
extern void sc_cube_row_set_stop(int32 cube_id, const char *requested);
extern bool sc_cube_row_stop_reached(int32 cube_id);
extern void sc_cube_row_pause_for(int32 cube_id, const char *reason);
extern void sc_cube_row_lock_nowait(int32 cube_id);
extern void sc_cube_row_pause_at(int32 cube_id, int32 partition, int64 offset, const char *error);
extern void sc_cube_row_skip_done(int32 cube_id);
extern void sc_cube_row_positions_set(int32 cube_id, const char *kafka_cluster_id);
extern void sc_cube_row_set_options(int32 cube_id, Datum options);
extern void sc_cube_row_set_epoch(int32 cube_id, int64 epoch);
extern void sc_cube_row_set_topic(int32 cube_id, const char *topic);
extern void sc_cube_row_touch(int32 cube_id);
extern void sc_cube_rows_touch_cluster(const char *cluster);
extern char *sc_cube_row_set_kafka_cluster_id(int32 cube_id, const char *kafka_cluster_id);
extern void sc_cube_row_set_sealed_view(int32 cube_id, const char *view);

#endif							/* SC_CUBE_CATALOG_H */
