/*-------------------------------------------------------------------------
 *
 * rewrite.h
 *		Moving rows into new storage with their tuple headers (rewrite.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_REWRITE_H
#define SC_REWRITE_H

#include "streamcube.h"

typedef struct ScRowMove ScRowMove;

extern ScRowMove *sc_rows_move_begin(Oid target);
extern int64 sc_rows_move_from(ScRowMove *move, Oid source, bool supersede);
extern void sc_rows_move_end(ScRowMove *move);

#endif							/* SC_REWRITE_H */
