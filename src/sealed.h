/*-------------------------------------------------------------------------
 *
 * sealed.h
 *		What a sealed partition is (sealed.c), for sealing and compaction:
 *		twin tables, their guard, DDL as the cube's owner with short lock
 *		timeouts and retries, the seal lock, the view <cube>_sealed.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAMCUBE_SEALED_H
#define STREAMCUBE_SEALED_H

#include "cube.h"

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
extern void sc_seal_with_view_lock_retry(const ScCube *cube, void (*fn) (void *), void *arg,
										 const char *what);
extern void sc_seal_lock_views(const ScCube *cube, bool cube_view, const Oid *views,
							   int nviews, const char *what);
extern void sc_seal_lock_views_now(const ScCube *cube, bool cube_view, const Oid *views,
								   int nviews);
extern bool sc_sealed_view_ours(Oid view, Oid parent);
extern char *sc_sealed_view_body(Oid parent, const Oid *parts, int n);
extern char *sc_sealed_view_write(Oid view, Oid parent, Oid owner, const char *body,
								  const char *comment);
extern void sc_seal_refresh_view(ScCube *cube, TimestampTz drop_before,
								 const Oid *except, int nexcept);

#endif							/* STREAMCUBE_SEALED_H */
