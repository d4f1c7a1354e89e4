/*-------------------------------------------------------------------------
 *
 * stops.h
 *		Stop points of cubes (streamcube.stop_offsets): see stops.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_STOPS_H
#define SC_STOPS_H

#include "cube.h"

extern void sc_stops_set(ScCube *cube, Jsonb *until);
extern void sc_stops_clear(int32 cube_id);
extern Datum sc_stops_targets(int32 cube_id, Datum parts);

#endif							/* SC_STOPS_H */
