/*-------------------------------------------------------------------------
 *
 * reassign.c
 *		Replica sets, streamcube_reassign() and its journal, and its
 *		steps, which reassign_topics.c also runs (reassign_internal.h).
 *
 * A replica set is a name partitions of cubes are assigned to; each
 * (cube, replica set) with partitions is consumed by one receiver.
 * streamcube_reassign() moves partitions between replica sets while
 * ingest goes on.  It is Apache Kylin's protocol (STOP_AND_SYNC, ASSIGN_NEW,
 * START_NEW, MAKE_IMMUTABLE) made transactional: everything the call
 * decides is written in the caller's transaction, and the launcher and
 * the receivers only follow the committed catalog.
 *
 *	validate  the replica sets exist, no partition is named twice, every
 *	          partition exists in the topic, and every partition of the
 *	          topic is assigned unless allow_partial.  Nothing has moved yet.
 *	pause     for each replica set that loses partitions, lock their
 *	          consume positions (ascending, as receivers advance them).
 *	          This waits for the set's batch in flight to commit - its last
 *	          batch of those partitions - and no longer: the stop condition
 *	          is a lock on committed positions, so an idle partition never
 *	          holds the call (Kylin waits for a later message there).
 *	          Bounded by option timeout.
 *	merge     per moved partition, the largest of every record of it (the
 *	          committed position, the checkpoint): Kylin's KEEP_LARGE.
 *	assign    write the new assignment, and hand every moved position to
 *	          its new replica set at a new assignment epoch.
 *	start     (after COMMIT) the launcher wakes; receivers of sets that
 *	          gained partitions add them to their Kafka consumer at exactly
 *	          the merged offsets; sets without a receiver get one.
 *	retire    (after COMMIT) receivers of sets left with nothing stop.
 *
 * A receiver advances a position with a compare-and-set on (position,
 * replica set, epoch): a receiver that lost a partition cannot commit a
 * batch of it, whatever its timing; its transaction rolls back and it drops
 * the partition.  If the call fails or its transaction rolls back, nothing
 * was written and the old assignment keeps running; after a crash, the
 * committed assignment runs from the committed (or checkpointed)
 * positions.  No step needs manual repair.
 *
 * Each call journals its steps in streamcube.reassign_log.  A failed call
 * leaves a report in shared memory, which the launcher journals, since the
 * call's own rows roll back with it.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "cube_catalog.h"
#include <signal.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "cube.h"
#include "executor/spi.h"
#include "kafka.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "positions.h"
#include "reassign.h"
#include "reassign_internal.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(sc_create_replica_set);
PG_FUNCTION_INFO_V1(sc_drop_replica_set);
PG_FUNCTION_INFO_V1(sc_reassign);

/* Default of option timeout: how long losing receivers may hold the call. */
#define SC_REASSIGN_DEFAULT_TIMEOUT_MS 30000

/* ----------------------------------------------------------------
 * Small helpers
 * ----------------------------------------------------------------
 */

static int
sc_assigned_cmp(const ListCell *a, const ListCell *b)
{
	const ScAssigned *x = lfirst(a);
	const ScAssigned *y = lfirst(b);

	return x->partition < y->partition ? -1 : (x->partition > y->partition ? 1 : 0);
}

/* Order by replica set, then partition: for JSON output. */
static int
sc_assigned_set_cmp(const ListCell *a, const ListCell *b)
{
	const ScAssigned *x = lfirst(a);
	const ScAssigned *y = lfirst(b);
	int			c = strcmp(x->replica_set, y->replica_set);

	if (c != 0)
		return c;
	return x->partition < y->partition ? -1 : (x->partition > y->partition ? 1 : 0);
}

int
sc_string_node_cmp(const ListCell *a, const ListCell *b)
{
	return strcmp(strVal(lfirst(a)), strVal(lfirst(b)));
}

static ScAssigned *
sc_assigned_find(List *list, int32 partition)
{
	ListCell   *lc;

	foreach(lc, list)
		if (((ScAssigned *) lfirst(lc))->partition == partition)
			return lfirst(lc);
	return NULL;
}

/* A partition in JSON: 3, or "orders.eu:3" in a cube of several topics. */
static void
sc_partition_json(StringInfo buf, const ScCube *cube, int32 partition)
{
	if (cube->topics_kind == SC_TOPICS_ONE)
		appendStringInfo(buf, "%d", partition);
	else
		escape_json(buf, sc_partition_name(cube, partition));
}

/*
 * {"set": [partitions], ...} of the entries with a replica set; the sets
 * named in `names` (String nodes) appear even when they hold nothing.
 */
char *
sc_assignment_json(const ScCube *cube, List *assigned, List *names)
{
	StringInfoData buf;
	List	   *sorted = NIL;
	ListCell   *lc;
	const char *current = NULL;

	foreach(lc, assigned)
		if (((ScAssigned *) lfirst(lc))->replica_set != NULL)
			sorted = lappend(sorted, lfirst(lc));
	foreach(lc, names)
	{
		ScAssigned *a = palloc0(sizeof(ScAssigned));

		a->partition = -1;		/* a marker: the set, without a partition */
		a->replica_set = strVal(lfirst(lc));
		sorted = lappend(sorted, a);
	}
	list_sort(sorted, sc_assigned_set_cmp);

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	foreach(lc, sorted)
	{
		ScAssigned *a = lfirst(lc);
		bool		first_of_set = current == NULL || strcmp(current, a->replica_set) != 0;

		if (first_of_set)
		{
			if (current != NULL)
				appendStringInfoString(&buf, "], ");
			escape_json(&buf, a->replica_set);
			appendStringInfoString(&buf, ": [");
			current = a->replica_set;
		}
		if (a->partition >= 0)
		{
			if (!first_of_set && buf.data[buf.len - 1] != '[')
				appendStringInfoString(&buf, ", ");
			sc_partition_json(&buf, cube, a->partition);
		}
	}
	if (current != NULL)
		appendStringInfoChar(&buf, ']');
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

static Datum
sc_int_list_array(List *ints)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(list_length(ints), 1));
	ListCell   *lc;

	foreach(lc, ints)
		elems[foreach_current_index(lc)] = Int32GetDatum(lfirst_int(lc));
	return sc_int_array(elems, list_length(ints), INT4OID);
}

static char *
sc_partition_list(const ScCube *cube, List *partitions)
{
	StringInfoData buf;
	ListCell   *lc;

	initStringInfo(&buf);
	foreach(lc, partitions)
		appendStringInfo(&buf, "%s%s", foreach_current_index(lc) > 0 ? ", " : "",
						 sc_partition_name(cube, lfirst_int(lc)));
	return buf.data;
}

static double
sc_ms_between(TimestampTz from, TimestampTz to)
{
	return (double) (to - from) / 1000.0;
}

/* ----------------------------------------------------------------
 * Journal
 * ----------------------------------------------------------------
 */

/*
 * The journal names partitions as a user does, by topic and Kafka
 * partition (0.4.0 on; a catalog not yet updated keeps source partitions,
 * which are the Kafka partitions of its one topic): for a statement's
 * format, the column topics, then what goes in partitions and topics, of
 * source partitions array p of cube c (SQL expressions).
 */
typedef struct ScJournalTopics
{
	const char *column;			/* ", topics", or "" */
	const char *partitions;		/* what goes in partitions */
	const char *topics;			/* ", <what goes in topics>", or "" */
} ScJournalTopics;

static ScJournalTopics
sc_journal_topics(const char *c, const char *p)
{
	ScJournalTopics j = {"", p, ""};

	if (sc_catalog_has_column("reassign_log", "topics"))
	{
		j.column = ", topics";
		j.partitions = psprintf("CASE WHEN %s IS NOT NULL THEN ARRAY(SELECT " SC_SQL_SOURCE_PARTITION("u.s")
								" FROM pg_catalog.unnest(%s) WITH ORDINALITY AS u(s, i) ORDER BY u.i) END", p, p);
		j.topics = psprintf(", CASE WHEN %s IS NOT NULL THEN ARRAY(SELECT %s"
							" FROM pg_catalog.unnest(%s) WITH ORDINALITY AS u(s, i) ORDER BY u.i) END",
							p, psprintf(SC_SQL_SOURCE_TOPIC("%s", "u.s"), c), p);
	}
	return j;
}

/* What one row of streamcube.reassign_log says beyond the call. */
typedef struct ScJournalRow
{
	const char *step;
	const char *replica_set;
	List	   *partitions;		/* int */
	int64	   *offsets;		/* one per partition, or NULL */
	TimestampTz started_at;
	bool		assignments;	/* with old and new assignment */
	double		waited_ms;		/* < 0: none */
	double		unconsumed_ms;	/* < 0: none */
	const char *outcome;
} ScJournalRow;

/* A row of step `step` with nothing else known yet. */
static ScJournalRow
sc_journal_row(const char *step, TimestampTz started_at)
{
	ScJournalRow row = {0};

	row.step = step;
	row.started_at = started_at;
	row.waited_ms = -1;
	row.unconsumed_ms = -1;
	row.outcome = "ok";
	return row;
}

/* The moved partitions and their offsets, as journal rows list them. */
static void
sc_journal_moves(ScReassign *r, ScJournalRow *row)
{
	ListCell   *lc;

	row->offsets = palloc(sizeof(int64) * Max(list_length(r->moves), 1));
	foreach(lc, r->moves)
	{
		ScMove	   *m = lfirst(lc);

		row->offsets[foreach_current_index(lc)] = m->offset;
		row->partitions = lappend_int(row->partitions, m->partition);
	}
}

static void
sc_journal(ScReassign *r, ScJournalRow *row)
{
	Oid			types[15] = {INT8OID, INT4OID, TEXTOID, TEXTOID, TEXTOID, INT4ARRAYOID,
		INT8ARRAYOID, NAMEOID, TIMESTAMPTZOID, JSONBOID, JSONBOID, FLOAT8OID,
	FLOAT8OID, TEXTOID, OIDOID};
	Datum		v[15];
	char		n[16] = "               ";
	ScJournalTopics j;

	v[0] = Int64GetDatum(r->id);
	v[1] = Int32GetDatum(r->cube_id);
	v[2] = CStringGetTextDatum(r->origin);
	v[3] = CStringGetTextDatum(row->step);
	v[4] = row->replica_set ? CStringGetTextDatum(row->replica_set) : (Datum) 0;
	n[4] = row->replica_set ? ' ' : 'n';
	v[5] = row->partitions ? sc_int_list_array(row->partitions) : (Datum) 0;
	n[5] = row->partitions ? ' ' : 'n';
	v[6] = row->offsets ? sc_int8_array(list_length(row->partitions), row->offsets) : (Datum) 0;
	n[6] = row->offsets ? ' ' : 'n';
	v[7] = DirectFunctionCall1(namein, CStringGetDatum(r->role));
	v[8] = TimestampTzGetDatum(row->started_at);
	v[9] = row->assignments && r->old_json ?
		DirectFunctionCall1(jsonb_in, CStringGetDatum(r->old_json)) : (Datum) 0;
	n[9] = row->assignments && r->old_json ? ' ' : 'n';
	v[10] = row->assignments && r->new_json ?
		DirectFunctionCall1(jsonb_in, CStringGetDatum(r->new_json)) : (Datum) 0;
	n[10] = row->assignments && r->new_json ? ' ' : 'n';
	v[11] = Float8GetDatum(row->waited_ms);
	n[11] = row->waited_ms < 0 ? 'n' : ' ';
	v[12] = Float8GetDatum(row->unconsumed_ms);
	n[12] = row->unconsumed_ms < 0 ? 'n' : ' ';
	v[13] = CStringGetTextDatum(row->outcome);
	v[14] = ObjectIdGetDatum(r->relid);

	j = sc_journal_topics("$2", "$6");
	sc_catalog_exec(psprintf("INSERT INTO streamcube.reassign_log "
							 "(reassign_id, cube_id, cube, origin, step, replica_set, partitions, offsets, role, "
							 " started_at, finished_at, old_assignment, new_assignment, waited_ms, unconsumed_ms, "
							 " outcome%s) "
							 "VALUES ($1, $2, $15, $3, $4, $5, %s, $7, $8, $9, clock_timestamp(), $10, $11, $12, "
							 "        $13, $14%s)",
							 j.column, j.partitions, j.topics),
					15, types, v, n, false, 0);
}

/*
 * The call failed: leave a report for the launcher, which journals it once
 * this transaction has rolled back.  No error may escape from here.
 */
static void
sc_reassign_report_failure(ScReassign *r, const char *message)
{
	ScReassignFailure *f = NULL;
	pid_t		launcher;

	if (sc_shared == NULL || r->cube_id == 0)
		return;
	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < SC_MAX_REASSIGN_FAILURES; i++)
		if (!sc_shared->failures[i].used)
		{
			f = &sc_shared->failures[i];
			break;
		}
	if (f != NULL)
	{
		memset(f, 0, sizeof(ScReassignFailure));
		f->used = true;
		f->dboid = MyDatabaseId;
		f->cube_id = r->cube_id;
		f->reassign_id = r->id;
		f->roleid = r->roleid;
		f->started_at = r->started_at;
		f->failed_at = GetCurrentTimestamp();
		strlcpy(f->step, r->step, sizeof(f->step));
		/* whole characters only: the row is dumped and restored */
		memcpy(f->error, message, pg_mbcliplen(message, strlen(message), sizeof(f->error) - 1));
		if (r->old_json && strlen(r->old_json) < SC_ASSIGNMENT_LEN)
			strlcpy(f->old_assignment, r->old_json, SC_ASSIGNMENT_LEN);
		if (r->new_json && strlen(r->new_json) < SC_ASSIGNMENT_LEN)
			strlcpy(f->new_assignment, r->new_json, SC_ASSIGNMENT_LEN);
	}
	launcher = sc_shared->launcher_pid;
	LWLockRelease(sc_shared->lock);
	if (f == NULL)
		elog(LOG, "streamcube: no room to journal the failed reassignment of cube %s at step %s",
			 r->cube_name, r->step);
	else if (launcher != 0)
		kill(launcher, SIGUSR1);	/* now: this transaction will not commit */
}

/*
 * The launcher: journal the failed calls reported since its last look, in
 * the current transaction.  Reports of cubes dropped since are forgotten.
 */
void
sc_reassign_journal_failures(void)
{
	ScReassignFailure *pending = palloc(sizeof(ScReassignFailure) * SC_MAX_REASSIGN_FAILURES);
	int			n = 0;

	LWLockAcquire(sc_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < SC_MAX_REASSIGN_FAILURES; i++)
		if (sc_shared->failures[i].used && sc_shared->failures[i].dboid == MyDatabaseId)
		{
			pending[n++] = sc_shared->failures[i];
			sc_shared->failures[i].used = false;
		}
	LWLockRelease(sc_shared->lock);
	if (n == 0)
	{
		pfree(pending);
		return;
	}

	SPI_connect();
	for (int i = 0; i < n; i++)
	{
		ScReassignFailure *f = &pending[i];
		Oid			types[9] = {INT8OID, INT4OID, OIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
		TEXTOID, TEXTOID, TEXTOID, TEXTOID};
		Datum		v[9];
		char		nulls[10] = "         ";

		v[0] = Int64GetDatum(f->reassign_id);
		v[1] = Int32GetDatum(f->cube_id);
		v[2] = ObjectIdGetDatum(f->roleid);
		v[3] = TimestampTzGetDatum(f->started_at);
		v[4] = TimestampTzGetDatum(f->failed_at);
		v[5] = CStringGetTextDatum(f->step);
		v[6] = CStringGetTextDatum(f->error);
		v[7] = CStringGetTextDatum(f->old_assignment);
		nulls[7] = f->old_assignment[0] ? ' ' : 'n';
		v[8] = CStringGetTextDatum(f->new_assignment);
		nulls[8] = f->new_assignment[0] ? ' ' : 'n';
		sc_catalog_exec("INSERT INTO streamcube.reassign_log "
						"(reassign_id, cube_id, cube, origin, step, role, started_at, finished_at, "
						" old_assignment, new_assignment, outcome, error) "
						"SELECT CASE WHEN $1 > 0 THEN $1 "
						"            ELSE pg_catalog.nextval('streamcube.reassign_ids'::pg_catalog.regclass) END, "
						"       c.cube_id, c.relid, 'streamcube_reassign', $6, "
						"       coalesce((SELECT a.rolname FROM pg_catalog.pg_authid a WHERE a.oid = $3), '?'), "
						"       $4, $5, $8::pg_catalog.jsonb, $9::pg_catalog.jsonb, 'failed', $7 "
						"FROM streamcube.cubes c WHERE c.cube_id = $2",
						9, types, v, nulls, false, 0);
	}
	SPI_finish();
	pfree(pending);
}

/* ----------------------------------------------------------------
 * Replica sets
 * ----------------------------------------------------------------
 */

static char *
sc_replica_set_arg(FunctionCallInfo fcinfo)
{
	char	   *name = sc_text_arg(fcinfo, 0, "replica set name");

	if (name[0] == '\0' || strlen(name) >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid replica set name \"%s\"", name),
				 errhint("A replica set name is a non-empty string of at most %d bytes.",
						 NAMEDATALEN - 1)));
	return name;
}

/* streamcube_create_replica_set(name text) */
Datum
sc_create_replica_set(PG_FUNCTION_ARGS)
{
	char	   *name = sc_replica_set_arg(fcinfo);
	Oid			t = TEXTOID;
	Datum		v = CStringGetTextDatum(name);

	sc_require_admin("create replica sets");
	SPI_connect();
	sc_catalog_exec("INSERT INTO streamcube.replica_sets (name) VALUES ($1) "
					"ON CONFLICT DO NOTHING", 1, &t, &v, NULL, false, 0);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("replica set \"%s\" already exists", name),
				 errhint("streamcube.replica_sets lists the replica sets.")));
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * A new cube's replica sets (made if they do not exist) and the first
 * assignment of its partitions (ScKafkaPartitionInfo), dealt round the
 * sets in their order, at epoch 0 (streamcube_create_cube).  With no
 * sets, nothing is written.
 */
void
sc_reassign_first_assignment(int32 cube_id, List *replica_sets, List *partitions)
{
	ListCell   *lc;

	foreach(lc, replica_sets)
		sc_catalog_exec("INSERT INTO streamcube.replica_sets (name) VALUES ($1) "
						"ON CONFLICT DO NOTHING",
						1, (Oid[]) {TEXTOID},
						(Datum[]) {CStringGetTextDatum(lfirst(lc))}, NULL, false, 0);
	if (replica_sets == NIL)
		return;
	foreach(lc, partitions)
	{
		ScKafkaPartitionInfo *p = lfirst(lc);
		const char *set = list_nth(replica_sets,
								   foreach_current_index(lc) % list_length(replica_sets));

		sc_catalog_exec("INSERT INTO streamcube.assignments (cube_id, partition, replica_set) "
						"VALUES ($1, $2, $3)",
						3, (Oid[]) {INT4OID, INT4OID, TEXTOID},
						(Datum[]) {Int32GetDatum(cube_id), Int32GetDatum(p->source),
						CStringGetTextDatum(set)}, NULL, false, 0);
	}
}

/* streamcube_drop_replica_set(name text): an error while it is assigned. */
Datum
sc_drop_replica_set(PG_FUNCTION_ARGS)
{
	char	   *name = sc_replica_set_arg(fcinfo);
	Oid			t = TEXTOID;
	Datum		v = CStringGetTextDatum(name);

	sc_require_admin("drop replica sets");
	SPI_connect();
	/* Lock it first: a reassignment to it now waits, then fails. */
	sc_catalog_exec("SELECT 1 FROM streamcube.replica_sets WHERE name = $1 FOR UPDATE",
					1, &t, &v, NULL, false, 0);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("replica set \"%s\" does not exist", name),
				 errhint("streamcube.replica_sets lists the replica sets.")));
	sc_catalog_exec("SELECT string_agg(DISTINCT c.relid::regclass::text, ', ') "
					"FROM streamcube.assignments a JOIN streamcube.cubes c USING (cube_id) "
					"WHERE a.replica_set = $1", 1, &t, &v, NULL, true, 0);
	{
		char	   *cubes = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);

		if (cubes != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("replica set \"%s\" still consumes partitions of cube %s", name, cubes),
					 errhint("Move them to other replica sets with streamcube_reassign() first.")));
	}
	sc_catalog_exec("DELETE FROM streamcube.replica_sets WHERE name = $1", 1, &t, &v, NULL, false, 0);
	SPI_finish();
	PG_RETURN_VOID();
}

/* ----------------------------------------------------------------
 * validate
 * ----------------------------------------------------------------
 */
static void
sc_reassign_parse_options(ScReassign *r, Jsonb *options)
{
	Oid			t = JSONBOID;
	Datum		v = JsonbPGetDatum(options);

	r->timeout_ms = SC_REASSIGN_DEFAULT_TIMEOUT_MS;
	r->allow_partial = false;
	if (SPI_execute_with_args("SELECT jsonb_typeof($1)", 1, &t, &v, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the reassignment options");
	if (strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), "object") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("options of streamcube_reassign() must be a JSON object"),
				 errhint("For example '{\"timeout\": \"10 s\", \"allow_partial\": true}'.")));
	if (SPI_execute_with_args("SELECT key, jsonb_typeof(value), value #>> '{}' FROM jsonb_each($1)",
							  1, &t, &v, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the reassignment options");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *key = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		char	   *type = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
		char	   *value = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3);

		if (strcmp(key, "allow_partial") == 0)
		{
			if (strcmp(type, "boolean") != 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("reassignment option \"allow_partial\" must be true or false"),
						 errhint("For example '{\"allow_partial\": true}'.")));
			r->allow_partial = strcmp(value, "true") == 0;
		}
		else if (strcmp(key, "timeout") == 0)
		{
			Interval   *iv;
			int64		usecs;

			if (strcmp(type, "string") != 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("reassignment option \"timeout\" must be an interval string"),
						 errhint("For example {\"timeout\": \"10 s\"}.")));
			iv = sc_interval_of_text(value, "reassignment option \"timeout\"",
									 "For example {\"timeout\": \"10 s\"}.");
			usecs = sc_interval_usecs(iv, "reassignment option \"timeout\"");
			if (usecs < 1000)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("reassignment option \"timeout\" must be at least 1 ms"),
						 errhint("For example {\"timeout\": \"10 s\"}.")));
			r->timeout_ms = usecs / 1000;
		}
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unknown reassignment option \"%s\"", key),
					 errhint("Valid options: timeout, allow_partial.")));
	}
}

/* The assignment argument: {"set": [partition, ...], ...}. */
static List *
sc_reassign_parse_assignment(ScReassign *r, Jsonb *assignment, List **names)
{
	Oid			t = JSONBOID;
	Datum		v = JsonbPGetDatum(assignment);
	List	   *result = NIL;
	const char *example = "For example '{\"rs_a\": [0, 1, 2, 3], \"rs_b\": [4, 5, 6, 7]}'.";

	*names = NIL;
	if (SPI_execute_with_args("SELECT jsonb_typeof($1)", 1, &t, &v, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the assignment");
	if (strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), "object") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("assignment for cube %s must be a JSON object mapping replica sets to partitions",
						r->cube->qualified),
				 errhint("%s", example)));

	/* Each set, whether it exists, and its elements. */
	if (sc_catalog_exec("SELECT s.key, jsonb_typeof(s.value), "
						"       EXISTS (SELECT 1 FROM streamcube.replica_sets rs WHERE rs.name = s.key), "
						"       e.value #>> '{}', jsonb_typeof(e.value) "
						"FROM jsonb_each($1) s "
						"LEFT JOIN LATERAL jsonb_array_elements(CASE jsonb_typeof(s.value) "
						"   WHEN 'array' THEN s.value ELSE '[]' END) e ON true "
						"ORDER BY s.key",
						1, &t, &v, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the assignment");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *set = SPI_getvalue(tup, desc, 1);
		char	   *type = SPI_getvalue(tup, desc, 2);
		bool		isnull;
		bool		exists = DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull));
		char	   *elem = SPI_getvalue(tup, desc, 4);
		char	   *etype = SPI_getvalue(tup, desc, 5);
		const char *error = NULL;
		ScAssigned *a;
		ScAssigned *dup;

		if (strcmp(type, "array") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("partitions of replica set \"%s\" must be a JSON array of partition numbers", set),
					 errhint("%s", example)));
		if (!exists)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("replica set \"%s\" does not exist", set),
					 errhint("Create it with streamcube_create_replica_set(%s).", quote_literal_cstr(set))));
		if (!list_member(*names, makeString(set)))
			*names = lappend(*names, makeString(set));
		if (etype == NULL)
			continue;			/* an empty array: the set gets nothing */
		a = palloc(sizeof(ScAssigned));
		a->partition = -1;
		/* a number, or a string "topic:partition" */
		if (elem != NULL && (strcmp(etype, "number") == 0 ||
							 (strcmp(etype, "string") == 0 && strchr(elem, ':') != NULL)))
			a->partition = sc_partition_parse(r->cube, elem, &error);
		if (a->partition < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid partition %s for replica set \"%s\" of cube %s%s%s", elem ? elem : "null", set,
							r->cube->qualified, error ? ": " : "", error ? error : ""),
					 errhint("Partitions are non-negative integers, such as 0; in a cube of several topics \"topic:partition\", such as \"orders.eu:0\".")));
		a->replica_set = set;
		dup = sc_assigned_find(result, a->partition);
		if (dup != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("partition %s is assigned twice: to replica set \"%s\" and to \"%s\"",
							sc_partition_name(r->cube, a->partition), dup->replica_set, set),
					 errhint("Each partition goes to one replica set.")));
		result = lappend(result, a);
	}
	list_sort(result, sc_assigned_cmp);

	/* No replica set of the assignment may be dropped under the call. */
	{
		ListCell   *lc;

		foreach(lc, *names)
		{
			Oid			nt = TEXTOID;
			Datum		nv = CStringGetTextDatum(strVal(lfirst(lc)));

			sc_catalog_exec("SELECT 1 FROM streamcube.replica_sets WHERE name = $1 FOR KEY SHARE",
							1, &nt, &nv, NULL, false, 0);
			if (SPI_processed == 0)
				ereport(ERROR,
						(errcode(ERRCODE_UNDEFINED_OBJECT),
						 errmsg("replica set \"%s\" was dropped", strVal(lfirst(lc))),
						 errhint("Create it again, or assign its partitions elsewhere.")));
		}
	}
	return result;
}

/* The cube's assignment as the catalog says now. */
List *
sc_reassign_read_assignment(int32 cube_id)
{
	Oid			t = INT4OID;
	Datum		v = Int32GetDatum(cube_id);
	List	   *result = NIL;

	sc_catalog_exec("SELECT partition, replica_set FROM streamcube.assignments "
					"WHERE cube_id = $1 ORDER BY partition", 1, &t, &v, NULL, false, 0);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		ScAssigned *a = palloc(sizeof(ScAssigned));
		bool		isnull;

		a->partition = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		a->replica_set = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
		result = lappend(result, a);
	}
	return result;
}

/*
 * Lock the cube's catalog row against other reassignments, pauses, drops
 * and position changes (receivers' batches take a weaker lock and go on),
 * and take a new reassignment id.
 */
void
sc_reassign_lock_cube(ScReassign *r)
{
	Oid			t = INT4OID;
	Datum		v = Int32GetDatum(r->cube_id);
	bool		isnull;

	sc_catalog_exec("SELECT 1 FROM streamcube.cubes WHERE cube_id = $1 FOR NO KEY UPDATE",
					1, &t, &v, NULL, false, 0);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("cube %s was dropped", r->cube_name),
				 errhint("Nothing is left to reassign.")));
	sc_catalog_exec("SELECT pg_catalog.nextval('streamcube.reassign_ids'::pg_catalog.regclass)",
					0, NULL, NULL, NULL, false, 0);
	r->id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/* Kafka's partitions of the cube's topic, within the call's timeout. */
typedef struct ScDescribeArgs
{
	ScReassign *r;
	List	   *partitions;
	bool		missing;
} ScDescribeArgs;

static void
sc_reassign_describe_cb(void *arg)
{
	ScDescribeArgs *d = arg;

	d->partitions = sc_kafka_describe_topics(sc_cluster_conninfo(d->r->cube->cluster),
											 &d->r->cube->topics, true,
											 (int) Min(d->r->timeout_ms, sc_kafka_timeout_ms),
											 &d->missing, NULL);
}

static List *
sc_reassign_describe(ScReassign *r)
{
	ScDescribeArgs d = {r, NIL, false};
	ErrorData  *edata = sc_try(sc_reassign_describe_cb, &d);

	if (edata != NULL)
		ereport(ERROR,
				(errcode(edata->sqlerrcode),
				 errmsg("reassignment of cube %s failed at step validate: %s", r->cube->qualified,
						edata->message),
				 errdetail("streamcube needs the topic's partitions from Kafka; nothing changed, the current assignment keeps running."),
				 errhint("Check the cluster with streamcube_check_cluster('%s') and call again.",
						 r->cube->cluster)));
	if (d.missing)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("reassignment of cube %s failed at step validate: topic \"%s\" does not exist on Kafka cluster \"%s\"",
						r->cube->qualified, r->cube->topic, r->cube->cluster),
				 errhint("Nothing changed.")));
	return d.partitions;
}

/* Validate the new assignment against Kafka; compute the moves. */
static void
sc_reassign_diff(ScReassign *r, List *kafka)
{
	List	   *missing = NIL;
	ListCell   *lc;

	foreach(lc, r->new)
	{
		ScAssigned *a = lfirst(lc);
		bool		found = false;
		int			of_topic = 0;
		ListCell   *kc;

		foreach(kc, kafka)
		{
			int32		source = ((ScKafkaPartitionInfo *) lfirst(kc))->source;

			found |= source == a->partition;
			of_topic += sc_source_topic_no(source) == sc_source_topic_no(a->partition);
		}
		if (!found)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("topic \"%s\" of cube %s has no partition %d",
							sc_kafka_source_topic(&r->cube->topics, a->partition),
							r->cube->qualified, sc_source_kafka_partition(a->partition)),
					 errdetail("The topic has %d partitions, 0 to %d.", of_topic, of_topic - 1),
					 errhint("Assign only partitions the topic has.")));
	}
	foreach(lc, kafka)
	{
		ScKafkaPartitionInfo *k = lfirst(lc);

		if (sc_assigned_find(r->new, k->source) == NULL)
			missing = lappend_int(missing, k->source);
	}
	list_sort(missing, list_int_cmp);
	if (missing != NIL && !r->allow_partial)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the assignment for cube %s leaves %s %s%s unassigned",
						r->cube->qualified, list_length(missing) == 1 ? "partition" : "partitions",
						sc_partition_list(r->cube, missing),
						r->cube->topics_kind == SC_TOPICS_ONE ? psprintf(" of topic \"%s\"", r->cube->topic) : ""),
				 errdetail("Nothing would consume them."),
				 errhint("Assign them to a replica set, or pass '{\"allow_partial\": true}' as options.")));

	/* Partitions whose replica set changes: in either assignment. */
	foreach(lc, kafka)
	{
		ScKafkaPartitionInfo *k = lfirst(lc);
		ScAssigned *o = sc_assigned_find(r->old, k->source);
		ScAssigned *n = sc_assigned_find(r->new, k->source);
		char	   *from = o ? o->replica_set : NULL;
		char	   *to = n ? n->replica_set : NULL;
		ScMove	   *m;

		if ((from == NULL && to == NULL) || (from && to && strcmp(from, to) == 0))
			continue;
		m = palloc0(sizeof(ScMove));
		m->partition = k->source;
		m->from = from;
		m->to = to;
		m->low_watermark = Max(k->low_watermark, 0);
		r->moves = lappend(r->moves, m);
	}
	/* An assigned partition the topic no longer has stays where it is. */
}

/*
 * A replica set placed on a node keeps its partitions here, stopped where
 * the node starts them (placement.c): no assignment may take one from it
 * or give it another.
 */
static void
sc_reassign_refuse_placed(ScReassign *r)
{
	ListCell   *lc;

	if (!sc_catalog_has_column("placement_catalog", "partitions"))
		return;					/* a catalog from before placement */
	foreach(lc, r->moves)
	{
		ScMove	   *m = lfirst(lc);
		Oid			t[4] = {INT4OID, TEXTOID, TEXTOID, INT4OID};
		Datum		v[4] = {Int32GetDatum(r->cube_id),
			CStringGetTextDatum(m->from ? m->from : ""), CStringGetTextDatum(m->to ? m->to : ""),
		Int32GetDatum(m->partition)};

		sc_catalog_exec("SELECT replica_set, node FROM streamcube.placement_catalog "
						"WHERE cube_id = $1 AND (replica_set IN ($2, $3) OR $4 = ANY (partitions)) LIMIT 1",
						4, t, v, NULL, true, 1);
		if (SPI_processed == 0)
			continue;
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("replica set \"%s\" of cube %s runs on node \"%s\": partition %d cannot move %s it",
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), r->cube->qualified,
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2),
						sc_source_kafka_partition(m->partition),
						m->from && strcmp(m->from, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)) == 0 ? "away from" : "to"),
				 errdetail("A replica set placed on a node keeps the partitions it had when it was placed."),
				 errhint("Name the set with its partitions in the assignment; streamcube.placements lists them.")));
	}
}

/* ----------------------------------------------------------------
 * pause, merge, assign
 * ----------------------------------------------------------------
 */
typedef struct ScHoldArgs
{
	int32		cube_id;
	int			n;
	int32	   *partitions;
} ScHoldArgs;

static void
sc_reassign_hold_cb(void *arg)
{
	ScHoldArgs *h = arg;

	sc_positions_hold(h->cube_id, h->n, h->partitions);
}

/*
 * STOP_AND_SYNC, first half: hold the positions of every partition a
 * replica set loses, one set after the other, within the timeout.
 */
void
sc_reassign_pause(ScReassign *r)
{
	List	   *sets = NIL;
	ListCell   *lc;
	instr_time	start;

	INSTR_TIME_SET_CURRENT(start);
	foreach(lc, r->moves)
	{
		ScMove	   *m = lfirst(lc);

		if (m->from != NULL && !list_member(sets, makeString(m->from)))
			sets = lappend(sets, makeString(m->from));
	}

	foreach(lc, sets)
	{
		const char *set = strVal(lfirst(lc));
		ScHoldArgs	h = {r->cube_id, 0, palloc(sizeof(int32) * list_length(r->moves))};
		List	   *parts = NIL;
		ListCell   *mc;
		instr_time	now;
		int64		remaining;
		char		timeout[32];
		int			nestlevel;
		TimestampTz began = GetCurrentTimestamp();
		TimestampTz held_at;
		ErrorData  *edata;
		ScJournalRow row;

		foreach(mc, r->moves)
		{
			ScMove	   *m = lfirst(mc);

			if (m->from != NULL && strcmp(m->from, set) == 0)
			{
				h.partitions[h.n++] = m->partition;
				parts = lappend_int(parts, m->partition);
			}
		}

		INSTR_TIME_SET_CURRENT(now);
		INSTR_TIME_SUBTRACT(now, start);
		remaining = Max(r->timeout_ms - (int64) INSTR_TIME_GET_MILLISEC(now), 1);
		snprintf(timeout, sizeof(timeout), INT64_FORMAT, remaining);
		nestlevel = NewGUCNestLevel();
		(void) set_config_option("lock_timeout", timeout, PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		edata = sc_try(sc_reassign_hold_cb, &h);
		AtEOXact_GUC(true, nestlevel);
		if (edata != NULL && edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("reassignment of cube %s timed out at step pause: replica set \"%s\" did not finish its batch of partitions %s within " INT64_FORMAT " ms",
							r->cube->qualified, set, sc_partition_list(r->cube, parts), r->timeout_ms),
					 errdetail("Nothing changed: the current assignment keeps running."),
					 errhint("streamcube.consumers and pg_stat_activity show what holds the receiver; call again, or with a longer {\"timeout\": ...}.")));
		if (edata != NULL)
			ReThrowError(edata);
		held_at = GetCurrentTimestamp();

		foreach(mc, r->moves)
		{
			ScMove	   *m = lfirst(mc);

			if (m->from != NULL && strcmp(m->from, set) == 0)
				m->held_at = held_at;
		}
		row = sc_journal_row("pause", began);
		row.replica_set = set;
		row.partitions = parts;
		row.waited_ms = sc_ms_between(began, held_at);
		sc_journal(r, &row);
	}
}

/* STOP_AND_SYNC, second half: where each moved partition starts again. */
void
sc_reassign_merge(ScReassign *r)
{
	ScJournalRow row = sc_journal_row("merge", GetCurrentTimestamp());
	ListCell   *lc;

	foreach(lc, r->moves)
	{
		ScMove	   *m = lfirst(lc);
		int64		merged = sc_positions_merged(r->cube_id, m->partition);

		/* A partition the cube never knew starts at Kafka's first offset. */
		m->offset = merged >= 0 ? merged : m->low_watermark;
		if (m->held_at == 0)
			m->held_at = GetCurrentTimestamp();
	}
	sc_journal_moves(r, &row);
	sc_journal(r, &row);
}

/* Replica sets that gained a receiver need free slots: warn when short. */
static void
sc_reassign_warn_slots(ScReassign *r)
{
	List	   *gained = NIL;
	ListCell   *lc;

	foreach(lc, r->moves)
	{
		ScMove	   *m = lfirst(lc);

		if (m->to != NULL && !sc_slot_exists(r->cube_id, m->to) &&
			!list_member(gained, makeString(m->to)))
			gained = lappend(gained, makeString(m->to));
	}
	if (gained != NIL)
		sc_slots_warn_short(r->cube->qualified, list_length(gained));
}

/* ASSIGN_NEW: the new assignment and the handed-over positions. */
void
sc_reassign_assign(ScReassign *r)
{
	ScJournalRow row = sc_journal_row("assign", GetCurrentTimestamp());
	ListCell   *lc;

	foreach(lc, r->moves)
	{
		ScMove	   *m = lfirst(lc);
		Oid			t[4] = {INT4OID, INT4OID, TEXTOID, INT8OID};
		Datum		v[4] = {Int32GetDatum(r->cube_id), Int32GetDatum(m->partition),
			m->to ? CStringGetTextDatum(m->to) : (Datum) 0, Int64GetDatum(r->id)};

		if (m->to != NULL)
			sc_catalog_exec("INSERT INTO streamcube.assignments (cube_id, partition, replica_set, epoch) "
							"VALUES ($1, $2, $3, $4) ON CONFLICT (cube_id, partition) "
							"DO UPDATE SET replica_set = EXCLUDED.replica_set, epoch = EXCLUDED.epoch",
							4, t, v, NULL, false, 0);
		else
			sc_catalog_exec("DELETE FROM streamcube.assignments WHERE cube_id = $1 AND partition = $2",
							2, t, v, NULL, false, 0);
		sc_positions_hand_over(r->cube_id, m->partition, m->to, r->id, m->offset, m->held_at);
	}
	sc_cube_row_set_epoch(r->cube_id, r->id);
	sc_journal_moves(r, &row);
	row.assignments = true;
	sc_journal(r, &row);
	sc_reassign_warn_slots(r);
	sc_launcher_wakeup_at_commit();
}

/* The moves' three steps, in order: pause, merge, assign. */
void
sc_reassign_steps(ScReassign *r)
{
	r->step = "pause";
	sc_reassign_pause(r);
	r->step = "merge";
	sc_reassign_merge(r);
	r->step = "assign";
	sc_reassign_assign(r);
}

/* A reassignment of cube by the current user, journalled as origin's. */
void
sc_reassign_init(ScReassign *r, ScCube *cube, const char *origin)
{
	r->cube_id = cube->cube_id;
	r->relid = cube->relid;
	r->cube = cube;
	r->cube_name = cube->qualified;
	r->origin = origin;
	r->roleid = GetUserId();
	r->role = GetUserNameFromId(r->roleid, false);
	r->started_at = GetCurrentTimestamp();
}

/* ----------------------------------------------------------------
 * streamcube_reassign(cube text, assignment jsonb, options jsonb)
 * ----------------------------------------------------------------
 */

/* The summary the call returns. */
static Jsonb *
sc_reassign_summary(ScReassign *r)
{
	StringInfoData buf;
	List	   *removed = NIL,
			   *added = NIL,
			   *unchanged = NIL;
	ListCell   *lc;
	TimestampTz now = GetCurrentTimestamp();

	foreach(lc, r->moves)
	{
		ScMove	   *m = lfirst(lc);

		if (m->from)
		{
			ScAssigned *a = palloc(sizeof(ScAssigned));

			a->partition = m->partition;
			a->replica_set = m->from;
			removed = lappend(removed, a);
		}
		if (m->to)
		{
			ScAssigned *a = palloc(sizeof(ScAssigned));

			a->partition = m->partition;
			a->replica_set = m->to;
			added = lappend(added, a);
		}
	}
	foreach(lc, r->old)
	{
		ScAssigned *o = lfirst(lc);
		ScAssigned *n = sc_assigned_find(r->new, o->partition);

		if (n != NULL && strcmp(n->replica_set, o->replica_set) == 0)
			unchanged = lappend(unchanged, o);
	}

	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"reassign_id\": " INT64_FORMAT ", \"noop\": %s, ",
					 r->id, r->moves == NIL ? "true" : "false");
	appendStringInfo(&buf, "\"removed\": %s, \"added\": %s, \"unchanged\": %s, \"moved\": [",
					 sc_assignment_json(r->cube, removed, NIL), sc_assignment_json(r->cube, added, NIL),
					 sc_assignment_json(r->cube, unchanged, NIL));
	foreach(lc, r->moves)
	{
		ScMove	   *m = lfirst(lc);

		if (foreach_current_index(lc) > 0)
			appendStringInfoString(&buf, ", ");
		appendStringInfoString(&buf, "{\"partition\": ");
		sc_partition_json(&buf, r->cube, m->partition);
		appendStringInfoString(&buf, ", \"from\": ");
		if (m->from)
			escape_json(&buf, m->from);
		else
			appendStringInfoString(&buf, "null");
		appendStringInfoString(&buf, ", \"to\": ");
		if (m->to)
			escape_json(&buf, m->to);
		else
			appendStringInfoString(&buf, "null");
		appendStringInfo(&buf, ", \"offset\": " INT64_FORMAT ", \"unconsumed_ms\": %.1f}",
						 m->offset, sc_ms_between(m->held_at, now));
	}
	appendStringInfoString(&buf, "]}");
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}

static Jsonb *
sc_reassign_run(ScReassign *r, Jsonb *assignment, Jsonb *options)
{
	List	   *names;
	List	   *kafka;

	r->step = "validate";
	sc_reassign_parse_options(r, options);
	sc_reassign_lock_cube(r);
	/* the cube's topics as they are now that its row is held (a pattern's new one) */
	PushActiveSnapshot(GetTransactionSnapshot());
	r->cube = sc_cube_load(r->cube_id, false);
	PopActiveSnapshot();
	r->new = sc_reassign_parse_assignment(r, assignment, &names);
	r->new_json = sc_assignment_json(r->cube, r->new, names);
	r->old = sc_reassign_read_assignment(r->cube_id);
	r->old_json = sc_assignment_json(r->cube, r->old, NIL);
	kafka = sc_reassign_describe(r);
	sc_reassign_diff(r, kafka);
	sc_reassign_refuse_placed(r);

	if (r->moves == NIL)
	{
		ScJournalRow row = sc_journal_row("assign", r->started_at);

		row.assignments = true;
		row.outcome = "noop";
		sc_journal(r, &row);
		return sc_reassign_summary(r);
	}

	sc_reassign_steps(r);
	ereport(LOG,
			(errmsg("cube %s reassigned (reassign_id " INT64_FORMAT "): %s, was %s",
					r->cube->qualified, r->id, r->new_json, r->old_json)));
	return sc_reassign_summary(r);
}

Datum
sc_reassign(PG_FUNCTION_ARGS)
{
	char	   *cube_name = sc_text_arg(fcinfo, 0, "cube name");
	Jsonb	   *options;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("assignment must not be NULL"),
				 errhint("For example '{\"rs_a\": [0, 1], \"rs_b\": [2, 3]}'.")));
	options = PG_ARGISNULL(2) ?
		DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}"))) : PG_GETARG_JSONB_P(2);
	PG_RETURN_JSONB_P(sc_reassign_call(cube_name, PG_GETARG_JSONB_P(1), options,
									   "streamcube_reassign", NULL));
}

/*
 * streamcube_reassign's work, for it and for callers in C that move
 * partitions the same way (origin names them in the journal): as the
 * current user, who must own the cube, in the caller's transaction.
 * *epoch (when not NULL) gets the reassign_id: the new assignment epoch.
 */
Jsonb *
sc_reassign_call(const char *cube_name, Jsonb *assignment, Jsonb *options,
				 const char *origin, int64 *epoch)
{
	ScReassign	r = {0};
	Jsonb	   *result = NULL;
	Oid			owner;
	MemoryContext cxt = CurrentMemoryContext;

	r.cube_name = cube_name;
	r.origin = origin;
	r.roleid = GetUserId();
	r.role = GetUserNameFromId(r.roleid, false);
	r.started_at = GetCurrentTimestamp();
	r.step = "validate";

	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("streamcube_reassign() must run in a READ COMMITTED transaction"),
				 errdetail("It waits for receivers' batches and merges the positions they committed meanwhile."),
				 errhint("Call it outside a REPEATABLE READ or SERIALIZABLE transaction.")));

	SPI_connect();
	r.cube_id = sc_cube_for_action(r.cube_name, "reassign", &r.relid, &owner);
	PG_TRY();
	{
		result = sc_reassign_run(&r, assignment, options);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		sc_reassign_report_failure(&r, sc_redact(edata->message));
		PG_RE_THROW();
	}
	PG_END_TRY();
	/* built in SPI's memory, which SPI_finish frees: into the caller's */
	result = DatumGetJsonbP(SPI_datumTransfer(JsonbPGetDatum(result), false, -1));
	SPI_finish();
	if (epoch != NULL)
		*epoch = r.id;
	return result;
}

/* ----------------------------------------------------------------
 * Receivers: start and retire
 * ----------------------------------------------------------------
 */

/*
 * A receiver took partitions handed over by reassignment `epoch` (START_NEW)
 * or released its last ones (MAKE_IMMUTABLE, step retire); journal it
 * once, in the caller's transaction.  unconsumed_ms < 0: not known.
 */
void
sc_reassign_journal_receiver(int32 cube_id, int64 epoch, const char *step,
							 const char *replica_set, List *partitions, int64 *offsets,
							 TimestampTz since, double unconsumed_ms)
{
	Oid			types[9] = {INT8OID, INT4OID, TEXTOID, TEXTOID, INT4ARRAYOID, INT8ARRAYOID,
	NAMEOID, TIMESTAMPTZOID, FLOAT8OID};
	Datum		v[9];
	char		n[10] = "         ";
	ScJournalTopics j = sc_journal_topics("$2", "$5");

	v[0] = Int64GetDatum(epoch);
	v[1] = Int32GetDatum(cube_id);
	v[2] = CStringGetTextDatum(step);
	v[3] = CStringGetTextDatum(replica_set);
	v[4] = sc_int_list_array(partitions);
	v[5] = sc_int8_array(list_length(partitions), offsets);
	v[6] = DirectFunctionCall1(namein, CStringGetDatum(GetUserNameFromId(GetUserId(), false)));
	v[7] = TimestampTzGetDatum(since);
	v[8] = Float8GetDatum(unconsumed_ms);
	n[8] = unconsumed_ms < 0 ? 'n' : ' ';

	SPI_connect();
	sc_catalog_exec(psprintf("INSERT INTO streamcube.reassign_log "
							 "(reassign_id, cube_id, cube, origin, step, replica_set, partitions, offsets, role, "
							 " started_at, finished_at, unconsumed_ms, outcome%s) "
							 "SELECT $1, c.cube_id, c.relid, "
							 "       coalesce((SELECT l.origin FROM streamcube.reassign_log l "
							 "                 WHERE l.cube_id = $2 AND l.reassign_id = $1 LIMIT 1), "
							 "                'streamcube_reassign'), "
							 "       $3, $4, %s, $6, $7, $8, clock_timestamp(), $9, 'ok'%s "
							 "FROM streamcube.cubes c WHERE c.cube_id = $2 "
							 "AND NOT EXISTS (SELECT 1 FROM streamcube.reassign_log l WHERE l.cube_id = $2 "
							 "                AND l.reassign_id = $1 AND l.step = $3 AND l.replica_set = $4)",
							 j.column, j.partitions, j.topics),
					9, types, v, n, false, 0);
	SPI_finish();
}
