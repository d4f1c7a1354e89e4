/*-------------------------------------------------------------------------
 *
 * streamcube.c
 *		Module entry point.
 *
 * streamcube must be loaded through shared_preload_libraries: its shared
 * memory and its launcher worker exist only if the postmaster loads it.
 * Loading it any other way (CREATE EXTENSION, LOAD) fails with a hint that
 * says what to add to postgresql.conf.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "fmgr.h"
#include "miscadmin.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("streamcube must be loaded via shared_preload_libraries"),
				 errhint("Add streamcube to shared_preload_libraries in postgresql.conf "
						 "(for example shared_preload_libraries = 'streamcube') "
						 "and restart the server.")));

	sc_guc_define();
	sc_shmem_install_hooks();
	sc_launcher_register();
	sc_launcher_xact_callback_register();
	sc_log_hook_install();
	sc_ownership_install_hook();
}
