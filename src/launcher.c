/*-------------------------------------------------------------------------
 *
 * launcher.c
 *		The launcher: one static background worker that reconciles the
 *		running receivers with the catalog.
 *
 * The catalog is the single source of truth.  The launcher reads, for each
 * cube, the replica sets that hold its partitions and whether the cube is
 * paused, and makes shared memory agree, in phases: review the slots
 * (tell receivers whose cube is paused, resumed, changed or reassigned;
 * retire those no longer wanted; restart those that died), allocate a slot
 * for each (cube, replica set) that has none, and start what must start.
 * Slot states change only through sc_slot_transition().  A reassignment
 * needs nothing else from it: after COMMIT it tells the receivers of the
 * cube, those that gained partitions take them, a replica set's first
 * partition gets a receiver started, a set left with none is retired.  It
 * also journals reassignments that failed (their own transaction rolled
 * back).  It never decides anything the catalog does not
 * say, so a crash of anything at any point is repaired by the next
 * reconciliation.
 *
 * A receiver that dies is restarted with an exponential back-off (one
 * second, doubling, at most streamcube.restart_max_delay, spread by a
 * random 75-125 % so that receivers that failed together do not restart
 * together: sc_launcher_backoff_ms); its last error
 * stays visible in streamcube.consumers meanwhile.  A receiver checks the
 * generation number of its slot when it starts, so a receiver registered
 * by an earlier incarnation of the launcher never runs beside a new one.
 *
 * The launcher sleeps on its latch.  SQL functions that change what it
 * should do wake it at COMMIT (sc_launcher_wakeup_at_commit), otherwise it
 * looks again every streamcube.launcher_naptime.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "common/pg_prng.h"

#include <signal.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "cube.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "reassign.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* How long a registered receiver may take to show up after a launcher restart. */
#define SC_ADOPT_GRACE_MS 10000

/* One (cube, replica set) pair the catalog wants to be consumed. */
typedef struct ScWanted
{
	int32		cube_id;
	char		replica_set[NAMEDATALEN];
	char		cube_name[2 * NAMEDATALEN + 2];
	Oid			relid;
	Oid			owner;			/* the owner of the cube's table */
	bool		can_login;		/* receivers connect as the owner */
	char		owner_name[NAMEDATALEN];
	bool		paused;
	int64		config_version;
	bool		matched;
} ScWanted;

/* Launcher-local state per slot: handles cannot live in shared memory. */
typedef struct ScLauncherSlot
{
	BackgroundWorkerHandle *handle;
	TimestampTz registered_at;
	bool		restart_pending;	/* death noticed, back-off computed */
	bool		retry_wanted;	/* its configuration changed while it was down */
	bool		retry_used;		/* ... and that cut the back-off of this failure */
	char		cube_name[2 * NAMEDATALEN + 2];
} ScLauncherSlot;

static ScLauncherSlot *local_slots;

/* ----------------------------------------------------------------
 * Registration and wake-ups
 * ----------------------------------------------------------------
 */
void
sc_launcher_register(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	strlcpy(worker.bgw_library_name, "streamcube", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "sc_launcher_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "streamcube launcher", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "streamcube launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/* ----------------------------------------------------------------
 * Reconciliation
 * ----------------------------------------------------------------
 */

/* Read what the catalog wants; returns the number of entries. */
static int
sc_launcher_read_catalog(ScWanted **wanted_out)
{
	ScWanted   *wanted = NULL;
	int			n = 0;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "reading streamcube catalog");

	if (OidIsValid(get_extension_oid("streamcube", true)))
	{
		int			ret;

		SPI_connect();
		/*
		 * A replica set placed on a node runs here only to read again up to
		 * where the node starts, after a crash took its positions back.
		 */
		ret = SPI_execute(psprintf("SELECT c.cube_id, a.replica_set, c.relid::regclass::text, "
						  "       r.relowner, c.paused AND c.stop_reached_at IS NULL, c.config_version, c.relid, "
						  "       o.rolcanlogin, o.rolname "
						  "FROM streamcube.cubes c "
						  "JOIN pg_catalog.pg_class r ON r.oid = c.relid "
						  "JOIN pg_catalog.pg_authid o ON o.oid = r.relowner "
						  "JOIN (SELECT DISTINCT cube_id, replica_set FROM streamcube.assignments) a "
						  "  USING (cube_id) "
						  "%s "
						  "ORDER BY c.cube_id, a.replica_set",
						  sc_catalog_has_column("placement_catalog", "positions") ?
						  "WHERE NOT EXISTS (SELECT FROM streamcube.placement_catalog x "
						  "  WHERE x.cube_id = c.cube_id AND x.replica_set = a.replica_set "
						  "  AND NOT EXISTS (SELECT FROM unnest(x.partitions, x.positions) AS u(partition, stop) "
						  "    LEFT JOIN streamcube.consume_positions p "
						  "      ON p.cube_id = x.cube_id AND p.partition = u.partition "
						  "    LEFT JOIN streamcube.checkpoints k "
						  "      ON k.cube_id = x.cube_id AND k.partition = u.partition "
						  "    WHERE greatest(p.position, k.\"offset\") < u.stop))" : ""),
						  true, 0);
		if (ret != SPI_OK_SELECT)
			elog(ERROR, "could not read the streamcube catalog: %s",
				 SPI_result_code_string(ret));

		n = (int) SPI_processed;
		wanted = MemoryContextAllocZero(TopMemoryContext, sizeof(ScWanted) * Max(n, 1));
		for (int i = 0; i < n; i++)
		{
			HeapTuple	tup = SPI_tuptable->vals[i];
			TupleDesc	desc = SPI_tuptable->tupdesc;
			bool		isnull;

			wanted[i].cube_id = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
			strlcpy(wanted[i].replica_set, SPI_getvalue(tup, desc, 2), NAMEDATALEN);
			strlcpy(wanted[i].cube_name, SPI_getvalue(tup, desc, 3), sizeof(wanted[i].cube_name));
			wanted[i].owner = DatumGetObjectId(SPI_getbinval(tup, desc, 4, &isnull));
			wanted[i].paused = DatumGetBool(SPI_getbinval(tup, desc, 5, &isnull));
			wanted[i].config_version = DatumGetInt64(SPI_getbinval(tup, desc, 6, &isnull));
			wanted[i].relid = DatumGetObjectId(SPI_getbinval(tup, desc, 7, &isnull));
			wanted[i].can_login = DatumGetBool(SPI_getbinval(tup, desc, 8, &isnull));
			strlcpy(wanted[i].owner_name, SPI_getvalue(tup, desc, 9), NAMEDATALEN);
		}
		SPI_finish();

		/* Reassignments that failed since the last look, for the journal. */
		sc_reassign_journal_failures();
	}

	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);

	*wanted_out = wanted;
	return n;
}

static bool
sc_register_receiver(int slotno, uint32 generation, const char *cube_name,
					 const char *replica_set)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "streamcube", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "sc_receiver_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "streamcube receiver for %s (%s)",
			 cube_name, replica_set);
	strlcpy(worker.bgw_type, "streamcube receiver", BGW_MAXLEN);
	worker.bgw_main_arg = Int32GetDatum(slotno);
	memcpy(worker.bgw_extra, &generation, sizeof(generation));
	worker.bgw_notify_pid = MyProcPid;

	return RegisterDynamicBackgroundWorker(&worker, &local_slots[slotno].handle);
}

/* Is the receiver of this slot alive?  Caller holds the lock. */
static bool
sc_slot_alive(int slotno, TimestampTz now)
{
	ScReceiverSlot *slot = &sc_shared->slots[slotno];
	ScLauncherSlot *local = &local_slots[slotno];
	pid_t		pid;

	if (local->handle != NULL)
		return GetBackgroundWorkerPid(local->handle, &pid) != BGWH_STOPPED;

	/* Registered by an earlier launcher: trust the slot, give it time. */
	if (slot->pid != 0)
		return true;
	if (local->registered_at == 0)
		local->registered_at = now;	/* first seen by this launcher */
	return slot->state == SC_RECEIVER_STARTING &&
		!TimestampDifferenceExceeds(local->registered_at, now, SC_ADOPT_GRACE_MS);
}

static void
sc_signal_slot(ScReceiverSlot *slot)
{
	if (slot->pid != 0)
		kill(slot->pid, SIGUSR1);
}

/*
 * A receiver connects as the owner of the cube's table; an owner that
 * cannot log in would make it fail with a FATAL error at every start.  The
 * slot says so instead, and nothing starts until the owner can log in (or
 * the table gets another owner).  Caller holds the lock.
 */
static void
sc_launcher_owner_cannot_login(ScReceiverSlot *slot, ScWanted *w)
{
	char		message[SC_ERROR_LEN];

	snprintf(message, sizeof(message),
			 "cube %s cannot be consumed: its owner, role \"%s\", cannot log in; "
			 "ALTER ROLE %s LOGIN, or ALTER TABLE %s OWNER TO a role that can",
			 w->cube_name, w->owner_name, quote_identifier(w->owner_name), w->cube_name);
	if (slot->state != SC_RECEIVER_FAILED || strcmp(slot->last_error, message) != 0)
		sc_slot_set_error(slot, message);
	sc_slot_transition(slot, SC_RECEIVER_FAILED);
	slot->pid = 0;
}

/*
 * One reconciliation: what the catalog wants, the slots that exist, and the
 * receivers to start once the lock is released.
 */
typedef struct ScReconcile
{
	ScWanted   *wanted;
	int			nwanted;
	TimestampTz now;
	long		sleep_ms;		/* how long the launcher may sleep after */
	int		   *to_start;		/* slots whose receiver must be registered */
	int			nstart;
	int			unplaced;		/* wanted pairs that found no free slot */
	StringInfoData unplaced_names;	/* the first few of them */
} ScReconcile;

/* The wanted (cube, replica set) a slot serves, or NULL. */
static ScWanted *
sc_launcher_match(ScReconcile *rc, ScReceiverSlot *slot)
{
	for (int i = 0; i < rc->nwanted; i++)
	{
		ScWanted   *w = &rc->wanted[i];

		if (!w->matched && w->cube_id == slot->cube_id && w->owner == slot->owner &&
			strcmp(w->replica_set, slot->replica_set) == 0)
		{
			w->matched = true;
			return w;
		}
	}
	return NULL;
}

/*
 * A slot nobody wants any more (its cube dropped, its replica set left
 * with no partition of the cube, its owner changed): ask the receiver to
 * stop, and free the slot once it is gone.  Caller holds the lock.
 */
static void
sc_launcher_retire(ScReconcile *rc, int s, bool alive)
{
	ScReceiverSlot *slot = &sc_shared->slots[s];

	if (alive)
	{
		if (!slot->stop_wanted)
		{
			slot->stop_wanted = true;
			sc_signal_slot(slot);
		}
		rc->sleep_ms = Min(rc->sleep_ms, 200);
		return;
	}
	sc_slot_transition(slot, SC_RECEIVER_FREE);
	slot->in_use = false;
	local_slots[s].handle = NULL;
}

/*
 * A wanted slot whose receiver is gone: restart it after an exponential
 * back-off.  Caller holds the lock.
 */
/*
 * The back-off before the restart after a receiver's n-th failure in a
 * row: one second, doubling, at most streamcube.restart_max_delay, each
 * drawn from 75 % to 125 % of that (and never above the maximum), so that
 * receivers that failed together (a broker gone for all of them, a
 * registry down) do not come back at the same moment, and drift apart
 * with every failure after.
 */
static int64
sc_launcher_backoff_ms(int failures)
{
	int64		base = Min((int64) 1000 << Min(failures - 1, 20), (int64) sc_restart_max_delay_ms);

	return Min((int64) (base * (0.75 + 0.5 * pg_prng_double(&pg_global_prng_state))),
			   (int64) sc_restart_max_delay_ms);
}

static void
sc_launcher_restart(ScReconcile *rc, int s, ScWanted *w)
{
	ScReceiverSlot *slot = &sc_shared->slots[s];

	if (!w->can_login)
	{
		sc_launcher_owner_cannot_login(slot, w);
		return;
	}
	if (!local_slots[s].restart_pending && slot->state == SC_RECEIVER_STOPPED)
	{
		/* It stopped as asked, and is wanted again: no failure, no delay. */
		slot->next_start = rc->now;
		local_slots[s].restart_pending = true;
	}
	else if (!local_slots[s].restart_pending)
	{
		slot->failures++;
		local_slots[s].retry_used = false;
		if (slot->state != SC_RECEIVER_FAILED && slot->last_error[0] == '\0')
			sc_slot_set_error(slot, "receiver exited unexpectedly");
		sc_slot_transition(slot, SC_RECEIVER_FAILED);
		slot->pid = 0;
		slot->next_start = TimestampTzPlusMilliseconds(rc->now, sc_launcher_backoff_ms(slot->failures));
		local_slots[s].restart_pending = true;
	}

	/*
	 * A failed receiver waiting out its back-off may fail for what has just
	 * changed (a cluster's password, a cube's options): try the new
	 * configuration at once, but once per failure and not sooner than a
	 * second after the last start, so that changing a cube in a loop does
	 * not turn the back-off into a restart loop.
	 */
	if (local_slots[s].retry_wanted)
	{
		local_slots[s].retry_wanted = false;
		if (!local_slots[s].retry_used && slot->state == SC_RECEIVER_FAILED)
		{
			slot->next_start = Min(slot->next_start,
								   Max(rc->now, TimestampTzPlusMilliseconds(local_slots[s].registered_at, 1000)));
			local_slots[s].retry_used = true;
		}
	}
	if (rc->now >= slot->next_start)
		rc->to_start[rc->nstart++] = s;
	else
	{
		long		secs;
		int			usecs;

		TimestampDifference(rc->now, slot->next_start, &secs, &usecs);
		rc->sleep_ms = Min(rc->sleep_ms, secs * 1000 + usecs / 1000 + 1);
	}
}

/* Existing slots: keep and tell (pause, config version), retire, restart. */
static void
sc_launcher_review_slots(ScReconcile *rc)
{
	for (int s = 0; s < sc_shared->nslots; s++)
	{
		ScReceiverSlot *slot = &sc_shared->slots[s];
		ScWanted   *w;
		bool		alive;

		if (!slot->in_use || slot->dboid != MyDatabaseId)
			continue;
		w = sc_launcher_match(rc, slot);
		alive = sc_slot_alive(s, rc->now);
		if (w == NULL)
		{
			sc_launcher_retire(rc, s, alive);
			continue;
		}

		/* Wanted again (a reassignment gave the set partitions back): stay. */
		if (slot->stop_wanted && alive)
		{
			slot->stop_wanted = false;
			sc_signal_slot(slot);
		}

		/* A reassignment, a pause, an operator's change: the receiver reads the catalog again. */
		if (slot->pause_wanted != w->paused || slot->config_version != (uint32) w->config_version)
		{
			slot->pause_wanted = w->paused;
			slot->config_version = (uint32) w->config_version;
			sc_signal_slot(slot);
			if (!alive)
				local_slots[s].retry_wanted = true;
		}
		strlcpy(local_slots[s].cube_name, w->cube_name, sizeof(local_slots[s].cube_name));
		if (!alive)
			sc_launcher_restart(rc, s, w);
	}
}

/* Wanted pairs without a slot (a new cube, a replica set that gained its first partition). */
static void
sc_launcher_allocate(ScReconcile *rc)
{
	for (int i = 0; i < rc->nwanted; i++)
	{
		ScWanted   *w = &rc->wanted[i];
		ScReceiverSlot *slot = NULL;
		int			s;
		uint32		generation;

		if (w->matched)
			continue;
		for (s = 0; s < sc_shared->nslots; s++)
			if (!sc_shared->slots[s].in_use)
			{
				slot = &sc_shared->slots[s];
				break;
			}
		if (slot == NULL)
		{
			/* reported once the lock is released */
			if (rc->unplaced++ < 5)
				appendStringInfo(&rc->unplaced_names, "%s%s (%s)",
								 rc->unplaced > 1 ? ", " : "", w->cube_name, w->replica_set);
			continue;
		}
		generation = slot->generation;
		memset(slot, 0, sizeof(ScReceiverSlot));
		slot->generation = generation;
		slot->in_use = true;
		slot->dboid = MyDatabaseId;
		slot->owner = w->owner;
		slot->relid = w->relid;
		slot->cube_id = w->cube_id;
		slot->epoch = -1;
		strlcpy(slot->replica_set, w->replica_set, NAMEDATALEN);
		slot->pause_wanted = w->paused;
		slot->config_version = (uint32) w->config_version;
		sc_slot_transition(slot, SC_RECEIVER_STARTING);
		slot->next_start = rc->now;
		local_slots[s].handle = NULL;
		strlcpy(local_slots[s].cube_name, w->cube_name, sizeof(local_slots[s].cube_name));
		if (!w->can_login)
			sc_launcher_owner_cannot_login(slot, w);
		else
			rc->to_start[rc->nstart++] = s;
	}
}

/* Register the receivers of rc->to_start; the lock is not held. */
static void
sc_launcher_start(ScReconcile *rc)
{
	for (int i = 0; i < rc->nstart; i++)
	{
		int			s = rc->to_start[i];
		ScReceiverSlot *slot = &sc_shared->slots[s];
		uint32		generation;
		char		replica_set[NAMEDATALEN];

		LWLockAcquire(sc_shared->lock, LW_SHARED);
		generation = slot->generation;
		strlcpy(replica_set, slot->replica_set, NAMEDATALEN);
		LWLockRelease(sc_shared->lock);

		if (sc_register_receiver(s, generation, local_slots[s].cube_name, replica_set))
		{
			ereport(DEBUG1,
					(errmsg_internal("streamcube launcher started a receiver for %s (%s), slot %d",
									 local_slots[s].cube_name, replica_set, s)));
			continue;
		}
		LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
		sc_slot_transition(slot, SC_RECEIVER_FAILED);
		slot->failures++;
		slot->next_start = TimestampTzPlusMilliseconds(rc->now, 5000);
		local_slots[s].restart_pending = true;
		sc_slot_set_error(slot, "could not register a background worker: raise max_worker_processes");
		LWLockRelease(sc_shared->lock);
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start a receiver for cube %s: no free background worker slot",
						local_slots[s].cube_name),
				 errhint("Raise max_worker_processes (now %d) and restart the server.",
						 max_worker_processes)));
		rc->sleep_ms = Min(rc->sleep_ms, 5000);
	}
}

/*
 * Make shared memory agree with the catalog: read, review the slots,
 * allocate, mark what starts, then start it.  Returns how long the
 * launcher may sleep before something is due.
 */
static int	last_unplaced = 0;	/* receivers without a slot, last time */
static TimestampTz last_unplaced_at = 0;	/* when they were last reported */

static long
sc_launcher_reconcile(void)
{
	ScReconcile rc = {0};

	rc.nwanted = sc_launcher_read_catalog(&rc.wanted);
	rc.now = GetCurrentTimestamp();
	rc.sleep_ms = sc_launcher_naptime_ms;
	rc.to_start = palloc(sizeof(int) * sc_shared->nslots);
	initStringInfo(&rc.unplaced_names);

	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	sc_launcher_review_slots(&rc);
	sc_launcher_allocate(&rc);

	/* Bump generations and mark STARTING while still holding the lock. */
	for (int i = 0; i < rc.nstart; i++)
	{
		ScReceiverSlot *slot = &sc_shared->slots[rc.to_start[i]];

		slot->generation++;
		sc_slot_transition(slot, SC_RECEIVER_STARTING);
		slot->pid = 0;
		slot->stop_wanted = false;
		local_slots[rc.to_start[i]].registered_at = rc.now;
		local_slots[rc.to_start[i]].restart_pending = false;
	}
	LWLockRelease(sc_shared->lock);

	/* Named, once a minute or when their number changes. */
	if (rc.unplaced > 0 &&
		(rc.unplaced != last_unplaced || TimestampDifferenceExceeds(last_unplaced_at, rc.now, 60000)))
	{
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg_plural("%d receiver cannot start: all %d receiver slots are in use",
							   "%d receivers cannot start: all %d receiver slots are in use",
							   rc.unplaced, rc.unplaced, sc_max_receivers),
				 errdetail("Not consumed: %s%s.", rc.unplaced_names.data,
						   rc.unplaced > 5 ? psprintf(" and %d more", rc.unplaced - 5) : ""),
				 errhint("Raise streamcube.max_receivers and restart the server; streamcube.consumers shows them as waiting.")));
		last_unplaced_at = rc.now;
	}
	last_unplaced = rc.unplaced;
	sc_launcher_start(&rc);

	if (rc.wanted)
		pfree(rc.wanted);
	pfree(rc.to_start);
	return rc.sleep_ms;
}

/* ----------------------------------------------------------------
 * Main loop
 * ----------------------------------------------------------------
 */
static void
sc_launcher_detach(int code, Datum arg)
{
	if (sc_shared == NULL)
		return;
	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	if (sc_shared->launcher_pid == MyProcPid)
		sc_shared->launcher_pid = 0;
	LWLockRelease(sc_shared->lock);
}

void
sc_launcher_main(Datum main_arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	BackgroundWorkerInitializeConnection(sc_database, NULL, 0);
	pgstat_report_appname("streamcube launcher");
	/* The launcher is a superuser: nothing on a user's path may run in it. */
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_SESSION);

	local_slots = MemoryContextAllocZero(TopMemoryContext,
										 sizeof(ScLauncherSlot) * sc_shared->nslots);

	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	sc_shared->launcher_pid = MyProcPid;
	LWLockRelease(sc_shared->lock);
	before_shmem_exit(sc_launcher_detach, (Datum) 0);

	ereport(LOG,
			(errmsg("streamcube launcher started in database \"%s\"", sc_database)));

	for (;;)
	{
		long		sleep_ms;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		sleep_ms = sc_launcher_reconcile();
		/* Large cubes being dropped: a step per round, at once while more wait. */
		if (sc_drop_pending_step())
			sleep_ms = 0;
		/* Replica sets placed on nodes that have not adopted them yet. */
		if (sc_placement_step())
			sleep_ms = 0;

		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
