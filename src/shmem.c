/*-------------------------------------------------------------------------
 *
 * shmem.c
 *		Shared memory of streamcube: the launcher's pid and receiver slots,
 *		and the wake-up of the launcher at COMMIT.
 *
 * The area is sized from streamcube.max_receivers and
 * streamcube.max_receiver_partitions and protected by one
 * LWLock of the "streamcube" tranche.  The lock is only taken for short
 * copies: once per batch by a receiver, once per reconciliation by the
 * launcher, and once per call of the monitoring functions.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "access/xact.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include <signal.h>

ScShared   *sc_shared = NULL;

static int	progress_index = -1;	/* this backend's entry in progress[] */
static void sc_progress_end(void);

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static Size
sc_shmem_size(void)
{
	Size		size = add_size(offsetof(ScShared, slots),
								mul_size(sizeof(ScReceiverSlot), sc_max_receivers));

	size = MAXALIGN(size);
	size = add_size(size, mul_size(mul_size(sizeof(ScPartitionStat), sc_max_receiver_partitions),
								   sc_max_receivers));
	return add_size(size, mul_size(mul_size(sizeof(int32), sc_max_receiver_partitions),
								   sc_max_receivers));
}

/* Receiver slots in use, in every database. */
int
sc_slots_in_use(void)
{
	int			n = 0;

	LWLockAcquire(sc_shared->lock, LW_SHARED);
	for (int s = 0; s < sc_shared->nslots; s++)
		n += sc_shared->slots[s].in_use;
	LWLockRelease(sc_shared->lock);
	return n;
}

/* Does a slot serve this (cube, replica set) of this database? */
bool
sc_slot_exists(int32 cube_id, const char *replica_set)
{
	bool		found = false;

	LWLockAcquire(sc_shared->lock, LW_SHARED);
	for (int s = 0; s < sc_shared->nslots && !found; s++)
	{
		ScReceiverSlot *slot = &sc_shared->slots[s];

		found = slot->in_use && slot->dboid == MyDatabaseId && slot->cube_id == cube_id &&
			strcmp(slot->replica_set, replica_set) == 0;
	}
	LWLockRelease(sc_shared->lock);
	return found;
}

/*
 * Warn the caller that n more receivers (a new cube, new replica sets of a
 * cube) find fewer free slots than they need: what they want is not
 * consumed until slots are freed or streamcube.max_receivers is raised.
 */
void
sc_slots_warn_short(const char *cube, int n)
{
	int			free_slots = sc_shared->nslots - sc_slots_in_use();

	if (n <= free_slots)
		return;
	ereport(WARNING,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg_plural("cube \"%s\" needs %d receiver slot, and only %d of the %d are free",
						   "cube \"%s\" needs %d receiver slots, and only %d of the %d are free",
						   n, cube, n, Max(free_slots, 0), sc_shared->nslots),
			 errdetail("Replica sets without a slot are not consumed; streamcube.consumers shows them as waiting, and streamcube_wait() returns false for the cube."),
			 errhint("Raise streamcube.max_receivers (now %d) and restart the server, or drop cubes that are no longer needed.",
					 sc_max_receivers)));
}

/* The partition table of a slot: slot_partitions entries. */
ScPartitionStat *
sc_slot_parts(const ScReceiverSlot *slot)
{
	char	   *base = (char *) sc_shared +
		MAXALIGN(offsetof(ScShared, slots) + sizeof(ScReceiverSlot) * sc_shared->nslots);
	int			s = slot - sc_shared->slots;

	Assert(s >= 0 && s < sc_shared->nslots);
	return (ScPartitionStat *) base + (Size) s * sc_shared->slot_partitions;
}

/*
 * The partition count of each of a slot's cube's topics, by topic number
 * (slot->ntopics of them, at most slot_partitions): after every slot's
 * partition table.
 */
int32 *
sc_slot_topic_counts(const ScReceiverSlot *slot)
{
	char	   *base = (char *) sc_shared +
		MAXALIGN(offsetof(ScShared, slots) + sizeof(ScReceiverSlot) * sc_shared->nslots);
	int			s = slot - sc_shared->slots;

	Assert(s >= 0 && s < sc_shared->nslots);
	base += sizeof(ScPartitionStat) * (Size) sc_shared->slot_partitions * sc_shared->nslots;
	return (int32 *) base + (Size) s * sc_shared->slot_partitions;
}

static void
sc_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();

	RequestAddinShmemSpace(sc_shmem_size());
	RequestNamedLWLockTranche("streamcube", 1);
}

static void
sc_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	sc_shared = ShmemInitStruct("streamcube", sc_shmem_size(), &found);
	if (!found)
	{
		memset(sc_shared, 0, sc_shmem_size());
		sc_shared->lock = &(GetNamedLWLockTranche("streamcube"))->lock;
		sc_shared->nslots = sc_max_receivers;
		sc_shared->slot_partitions = sc_max_receiver_partitions;
	}
	LWLockRelease(AddinShmemInitLock);
}

/* ----------------------------------------------------------------
 * Waking the launcher at COMMIT
 *
 * Code that changes what the launcher reconciles towards (the catalog)
 * asks for a wake-up; the launcher's pid is in shared memory, and the
 * signal goes after the commit, so that the launcher reads what was
 * committed.  Here, with the shared memory, so that no room depends on the
 * launcher's (pglogical keeps its wake-up in its worker registry too).
 * ----------------------------------------------------------------
 */
static bool wakeup_at_commit = false;

PG_FUNCTION_INFO_V1(sc_wake_launcher);

/* streamcube._wake_launcher(): for SQL code that changed the catalog. */
Datum
sc_wake_launcher(PG_FUNCTION_ARGS)
{
	sc_launcher_wakeup_at_commit();
	PG_RETURN_VOID();
}

/* Ask for the launcher to be woken once the current transaction commits. */
void
sc_launcher_wakeup_at_commit(void)
{
	wakeup_at_commit = true;
}

static void
sc_launcher_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (wakeup_at_commit && sc_shared != NULL)
			{
				pid_t		pid;

				LWLockAcquire(sc_shared->lock, LW_SHARED);
				pid = sc_shared->launcher_pid;
				LWLockRelease(sc_shared->lock);
				if (pid != 0)
					kill(pid, SIGUSR1); /* procsignal handler sets its latch */
			}
			wakeup_at_commit = false;
			sc_hide_statement = false;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			wakeup_at_commit = false;
			sc_hide_statement = false;
			break;
		default:
			break;
	}
	if ((event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT) && progress_index >= 0)
		sc_progress_end();
}

/* ----------------------------------------------------------------
 * Progress of long work (streamcube.progress)
 *
 * A backend that fills a roll-up, seals or compacts takes an entry for the
 * cube, says its phase and how far it is, and gives the entry back when
 * its transaction ends, committed or not (the callback above).  No entry
 * free (SC_MAX_PROGRESS backends at it at once): the work goes on
 * unreported.  The lock is taken once per update, a few times a second at
 * most (callers report per partition or per chunk of rows).
 * ----------------------------------------------------------------
 */
static void
sc_progress_end(void)
{
	if (progress_index < 0 || sc_shared == NULL)
		return;
	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	if (sc_shared->progress[progress_index].pid == MyProcPid)
		sc_shared->progress[progress_index].pid = 0;
	LWLockRelease(sc_shared->lock);
	progress_index = -1;
}

/* Exit without a transaction's end (FATAL): the entry is given back all the same. */
static void
sc_progress_exit(int code, Datum arg)
{
	sc_progress_end();
}

void
sc_progress_start(Oid relid, const char *target, const char *command)
{
	static bool exit_registered = false;
	ScProgress *p = NULL;

	if (sc_shared == NULL)
		return;
	if (!exit_registered)
	{
		before_shmem_exit(sc_progress_exit, (Datum) 0);
		exit_registered = true;
	}
	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	if (progress_index < 0)
		for (int i = 0; i < SC_MAX_PROGRESS && progress_index < 0; i++)
			if (sc_shared->progress[i].pid == 0)
				progress_index = i;
	if (progress_index >= 0)
	{
		p = &sc_shared->progress[progress_index];
		memset(p, 0, sizeof(ScProgress));
		p->pid = MyProcPid;
		p->dboid = MyDatabaseId;
		p->relid = relid;
		strlcpy(p->target, target ? target : "", sizeof(p->target));
		strlcpy(p->command, command, sizeof(p->command));
		p->total = -1;
		p->started_at = p->phase_at = GetCurrentTimestamp();
	}
	LWLockRelease(sc_shared->lock);
}

/* A new phase of the work: what it counts, and how many there are (-1: not known). */
void
sc_progress_phase(const char *phase, const char *unit, int64 total)
{
	ScProgress *p;

	if (progress_index < 0)
		return;
	p = &sc_shared->progress[progress_index];
	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	strlcpy(p->phase, phase, sizeof(p->phase));
	strlcpy(p->unit, unit, sizeof(p->unit));
	p->done = 0;
	p->total = total;
	p->phase_at = GetCurrentTimestamp();
	LWLockRelease(sc_shared->lock);
}

void
sc_progress_done(int64 done)
{
	if (progress_index < 0)
		return;
	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	sc_shared->progress[progress_index].done = done;
	LWLockRelease(sc_shared->lock);
}

void
sc_launcher_xact_callback_register(void)
{
	RegisterXactCallback(sc_launcher_xact_callback, NULL);
}

void
sc_shmem_install_hooks(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = sc_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = sc_shmem_startup;
}

const char *
sc_receiver_state_name(ScReceiverState state)
{
	switch (state)
	{
		case SC_RECEIVER_FREE:
			return "free";
		case SC_RECEIVER_STARTING:
			return "starting";
		case SC_RECEIVER_RUNNING:
			return "running";
		case SC_RECEIVER_PAUSED:
			return "paused";
		case SC_RECEIVER_STOPPING:
			return "stopping";
		case SC_RECEIVER_STOPPED:
			return "stopped";
		case SC_RECEIVER_FAILED:
			return "failed";
	}
	return "unknown";
}

/*
 * Move a slot to another state: the one place slot states change, so that
 * the launcher and the receivers can be reasoned about together.  The
 * caller holds sc_shared->lock exclusively.
 *
 *	  free --> starting --> running <--> paused
 *	              |            |            |
 *	              +------------+--> stopping --> stopped --> free
 *	  any --> failed --> starting (restart) | free
 *
 * Only the launcher frees a slot and starts (or restarts) a receiver.
 */
static bool
sc_slot_move_legal(ScReceiverState from, ScReceiverState to)
{
	if (from == to || to == SC_RECEIVER_FAILED || to == SC_RECEIVER_FREE)
		return true;
	switch (from)
	{
		case SC_RECEIVER_FREE:
			return to == SC_RECEIVER_STARTING;
		case SC_RECEIVER_STARTING:
			return to != SC_RECEIVER_FREE;
		case SC_RECEIVER_RUNNING:
		case SC_RECEIVER_PAUSED:
			return to == SC_RECEIVER_RUNNING || to == SC_RECEIVER_PAUSED ||
				to == SC_RECEIVER_STOPPING || to == SC_RECEIVER_STOPPED;
		case SC_RECEIVER_STOPPING:
			return to == SC_RECEIVER_STOPPED;
		case SC_RECEIVER_STOPPED:
		case SC_RECEIVER_FAILED:
			return to == SC_RECEIVER_STARTING;
	}
	return false;
}

void
sc_slot_transition(ScReceiverSlot *slot, ScReceiverState state)
{
	Assert(sc_slot_move_legal(slot->state, state));
	if (!sc_slot_move_legal(slot->state, state))
		elog(LOG, "streamcube: receiver slot of cube %d (%s) moved from %s to %s",
			 slot->cube_id, slot->replica_set,
			 sc_receiver_state_name(slot->state), sc_receiver_state_name(state));
	slot->state = state;
}

/*
 * Record an error message in a slot.  The caller holds sc_shared->lock
 * exclusively.
 */
void
sc_slot_set_error(ScReceiverSlot *slot, const char *message)
{
	char		masked[SC_ERROR_LEN * 2];
	int			len;

	/* No secret in it; cut at a character boundary: the view shows it as text. */
	strlcpy(masked, message ? message : "", sizeof(masked));
	sc_redact_buf(masked, sizeof(masked));
	len = pg_mbcliplen(masked, strlen(masked), SC_ERROR_LEN - 1);
	memcpy(slot->last_error, masked, len);
	slot->last_error[len] = '\0';
	slot->last_error_at = message ? GetCurrentTimestamp() : 0;
}

/*
 * The receiver got over its last error (sc_receiver_watch_health): it
 * moves to previous_error, so that last_error says what is wrong now and
 * an operator still sees what was.  The caller holds sc_shared->lock
 * exclusively.
 */
void
sc_slot_retire_error(ScReceiverSlot *slot)
{
	if (slot->last_error[0] == '\0')
		return;
	memcpy(slot->previous_error, slot->last_error, sizeof(slot->previous_error));
	slot->previous_error_at = slot->last_error_at;
	slot->last_error[0] = '\0';
	slot->last_error_at = 0;
}
