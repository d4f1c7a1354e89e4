/*-------------------------------------------------------------------------
 *
 * drops.c
 *		Dropping a large cube's table in steps, for the launcher.
 *
 * streamcube_drop_cube drops a table of up to SC_DROP_STEP partitions at
 * once; a larger one is listed in streamcube.pending_drops, and the
 * launcher drops it SC_DROP_STEP partitions per transaction, then the
 * table, so that no single transaction holds thousands of locks.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "cube.h"
#include "executor/spi.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"

/*
 * The next step of the oldest drop: the DDL, as the table's owner, and the
 * row of streamcube.pending_drops gone after the last step.  Sets *current
 * to the table being dropped.  Returns true when more steps are waiting.
 * The caller is connected to SPI, in a transaction.
 */
static bool
sc_drop_next(volatile Oid *current)
{
	bool		isnull;
	Oid			relid;
	Oid			owner;
	char	   *name;
	int64		left;
	Datum		relowner;
	bool		more = false;
	StringInfoData sql;

	/* A table whose last step failed waits a minute before the next. */
	if (SPI_execute("SELECT relid, owner, name, "
					"       (SELECT count(*) FROM pg_catalog.pg_inherits WHERE inhparent = relid), "
					"       (SELECT relowner FROM pg_catalog.pg_class WHERE oid = relid) "
					"FROM streamcube.pending_drops "
					"WHERE failed_at IS NULL OR failed_at < now() - interval '1 minute' "
					"ORDER BY requested_at, relid LIMIT 1",
					false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.pending_drops");
	if (SPI_processed != 1)
		return false;
	relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	name = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
	left = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull));
	relowner = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5, &isnull);

	pgstat_report_activity(STATE_RUNNING, psprintf("dropping %s in steps", name));
	(void) set_config_option("lock_timeout", "1s", PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	*current = relid;
	initStringInfo(&sql);
	if (isnull)
		;						/* gone already */
	else if (DatumGetObjectId(relowner) != owner)
		ereport(LOG,
				(errmsg("streamcube no longer drops %s: it changed owner since its cube was dropped", name)));
	else if (left > SC_DROP_STEP)
	{
		if (SPI_execute_with_args("SELECT format('DROP TABLE %s', string_agg(inhrelid::regclass::text, ', ')) "
								  "FROM (SELECT inhrelid FROM pg_catalog.pg_inherits WHERE inhparent = $1 "
								  "      ORDER BY inhrelid LIMIT $2) p",
								  2, (Oid[]) {OIDOID, INT4OID},
								  (Datum[]) {ObjectIdGetDatum(relid), Int32GetDatum(SC_DROP_STEP)},
								  NULL, true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not list the partitions of %s", name);
		appendStringInfoString(&sql, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1));
		more = true;
	}
	else
		appendStringInfo(&sql, "DROP TABLE %s",
						 sc_relation_qualified(relid));
	if (sql.len > 0)
	{
		ScAsOwner	as;

		sc_as_owner_enter(&as, owner);
		if (SPI_execute(sql.data, false, 0) != SPI_OK_UTILITY)
			elog(ERROR, "could not drop %s", name);
		sc_as_owner_leave(&as);
	}
	if (!more &&
		SPI_execute_with_args("DELETE FROM streamcube.pending_drops WHERE relid = $1",
							  1, (Oid[]) {OIDOID}, (Datum[]) {ObjectIdGetDatum(relid)},
							  NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not update streamcube.pending_drops");
	if (!more && sql.len > 0)
		ereport(LOG, (errmsg("streamcube dropped %s, in steps", name)));
	return more;
}

/* A step failed: what failed, for the operator; the table waits a minute. */
static void
sc_drop_record_failure(Oid relid, const char *message)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	SPI_connect();
	(void) SPI_execute_with_args("UPDATE streamcube.pending_drops "
								 "SET failed_at = now(), last_error = $2 WHERE relid = $1",
								 2, (Oid[]) {OIDOID, TEXTOID},
								 (Datum[]) {ObjectIdGetDatum(relid), CStringGetTextDatum(sc_redact(message))},
								 NULL, false, 0);
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
}

/*
 * One step of the oldest drop in streamcube.pending_drops, in a transaction
 * of its own, for the launcher: drop SC_DROP_STEP partitions of the table,
 * or the table once it has no more than that, as its owner, with a short
 * lock timeout (a query on the table makes the step wait for the next
 * round, not the launcher hang).  A step that fails is reported and tried
 * again later; a crash loses at most the step in flight.  Returns true
 * when more steps are waiting.
 */
bool
sc_drop_pending_step(void)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool more = false;
	volatile Oid current = InvalidOid;

	PG_TRY();
	{
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		if (OidIsValid(get_extension_oid("streamcube", true)))
		{
			SPI_connect();
			more = sc_drop_next(&current);
			SPI_finish();
		}
		PopActiveSnapshot();
		CommitTransactionCommand();
		pgstat_report_activity(STATE_IDLE, NULL);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		pgstat_report_activity(STATE_IDLE, NULL);
		more = false;
		if (OidIsValid(current))
			sc_drop_record_failure(current, edata->message);
		FreeErrorData(edata);
	}
	PG_END_TRY();
	return more;
}

/*
 * Drop a partitioned table of a cube (the cube's, a roll-up's) as its
 * owner: at once when it has at most SC_DROP_STEP partitions, else listed
 * in streamcube.pending_drops for the launcher, with a NOTICE that says so
 * (what names it: "cube \"events\"").  The caller is connected to SPI.
 */
void
sc_drop_table(Oid relid, Oid owner, const char *what)
{
	char	   *qualified;
	int64		partitions;
	bool		isnull;
	ScAsOwner	as;
	ScPrivilegeSave save;

	if (get_rel_name(relid) == NULL)
		return;					/* gone already */
	qualified = sc_relation_qualified(relid);
	if (SPI_execute_with_args("SELECT count(*) FROM pg_catalog.pg_inherits WHERE inhparent = $1",
							  1, (Oid[]) {OIDOID}, (Datum[]) {ObjectIdGetDatum(relid)},
							  NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not count the partitions of %s", qualified);
	partitions = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));

	if (partitions <= SC_DROP_STEP)
	{
		/* An administrator who does not own the table drops it as its owner. */
		sc_as_owner_enter(&as, owner);
		SPI_execute(psprintf("DROP TABLE %s", qualified), false, 0);
		sc_as_owner_leave(&as);
		return;
	}

	/* More partitions than one transaction may lock: the launcher drops them in steps. */
	sc_catalog_enter(&save);
	if (SPI_execute_with_args("INSERT INTO streamcube.pending_drops (relid, name, owner, requested_by) "
							  "VALUES ($1, $2, $3, $4)",
							  4, (Oid[]) {OIDOID, TEXTOID, OIDOID, NAMEOID},
							  (Datum[]) {ObjectIdGetDatum(relid), CStringGetTextDatum(qualified),
								  ObjectIdGetDatum(owner),
							  DirectFunctionCall1(namein, CStringGetDatum(GetUserNameFromId(GetUserId(), false)))},
							  NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not record the drop of %s", qualified);
	sc_catalog_leave(&save);
	ereport(NOTICE,
			(errmsg("%s is dropped; its table %s has " INT64_FORMAT " partitions and goes in steps",
					what, qualified, partitions),
			 errdetail("One transaction cannot lock that many partitions under max_locks_per_transaction; "
					   "the launcher drops %d of them per transaction, then the table.",
					   SC_DROP_STEP),
			 errhint("streamcube.pending_drops lists the table until it is gone.")));
}
