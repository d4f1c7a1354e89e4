/*-------------------------------------------------------------------------
 *
 * cube_catalog.c
 *		The one writer of a cube's row in streamcube.cubes: its creation and
 *		deletion, and the state others act on (paused and why, the bad
 *		message, the message to skip, options, assignment epoch, Kafka
 *		cluster id, sealed view).
 *
 * Every function runs in its caller's transaction, connected to SPI, as
 * the catalog owner (sc_catalog_exec).  Whatever a receiver must follow
 * (paused, options, epoch) also bumps config_version and wakes the
 * launcher at commit: receivers compare config_version to know when to
 * read their cube again.  The row's lock is the cube's lock: writers take
 * it FOR NO KEY UPDATE by updating (see "Lock order" in
 * docs/architecture.md).
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "catalog/pg_type.h"
#include "cube_catalog.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/* The cube's row; returns its cube_id. */
int32
sc_cube_row_insert(Oid relid, const char *cluster, const char *topic, const char *time_column,
				   Interval *width, const char *format, Jsonb *options,
				   const char *kafka_cluster_id)
{
	Oid			types[8] = {OIDOID, TEXTOID, TEXTOID, NAMEOID, INTERVALOID, TEXTOID, JSONBOID, TEXTOID};
	Datum		values[8];
	bool		isnull;

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(cluster);
	values[2] = CStringGetTextDatum(topic);
	values[3] = DirectFunctionCall1(namein, CStringGetDatum(time_column));
	values[4] = IntervalPGetDatum(width);
	values[5] = CStringGetTextDatum(format);
	values[6] = JsonbPGetDatum(options);
	values[7] = kafka_cluster_id ? CStringGetTextDatum(kafka_cluster_id) : (Datum) 0;
	sc_catalog_exec("INSERT INTO streamcube.cubes "
					"(relid, cluster_name, topic, time_column, segment_interval, format, options, "
					" kafka_cluster_id) "
					"VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING cube_id",
					8, types, values, kafka_cluster_id ? NULL : "       n", false, 0);
	return DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Delete the cube's row (waiting for a batch or a seal in flight, which
 * hold it); returns its sealed view as it was then, or InvalidOid.
 */
Oid
sc_cube_row_delete(int32 cube_id)
{
	Oid			t[1] = {INT4OID};
	Datum		v[1] = {Int32GetDatum(cube_id)};
	Oid			view = InvalidOid;
	bool		isnull;

	/*
	 * No row limit: a ModifyTable stopped early by one never ends its
	 * statement, and the table's statement trigger (which forgets the
	 * cube's first offsets) would not fire.  cube_id is the key.
	 */
	if (sc_catalog_exec("DELETE FROM streamcube.cubes WHERE cube_id = $1 "
						"RETURNING sealed_view::oid",
						1, t, v, NULL, false, 0) != SPI_OK_DELETE_RETURNING)
		elog(ERROR, "could not delete from streamcube.cubes");
	if (SPI_processed == 1)
	{
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			view = DatumGetObjectId(d);
	}
	return view;
}

/*
 * A user pauses or resumes the cube.  Pausing keeps a recorded bad
 * message; resuming forgets it, or with skip_bad turns it into the message
 * to dead-letter once.
 */
void
sc_cube_row_set_paused(int32 cube_id, bool paused, bool skip_bad)
{
	Oid			t[3] = {INT4OID, BOOLOID, BOOLOID};
	Datum		v[3] = {Int32GetDatum(cube_id), BoolGetDatum(paused), BoolGetDatum(!paused && skip_bad)};

	sc_catalog_exec("UPDATE streamcube.cubes SET paused = $2, "
					"skip_partition = CASE WHEN $3 THEN bad_partition ELSE skip_partition END, "
					"skip_offset = CASE WHEN $3 THEN bad_offset ELSE skip_offset END, "
					"skip_error = CASE WHEN $3 THEN bad_error ELSE skip_error END, "
					"bad_partition = CASE WHEN $2 THEN bad_partition END, "
					"bad_offset = CASE WHEN $2 THEN bad_offset END, "
					"bad_error = CASE WHEN $2 THEN bad_error END, "
					"paused_reason = CASE WHEN $2 THEN paused_reason END, "
					"stop_reached_at = NULL, "
					"config_version = config_version + 1 WHERE cube_id = $1",
					3, t, v, NULL, false, 0);
	sc_launcher_wakeup_at_commit();
}

/*
 * streamcube pauses the cube itself, when going on would lose or mix up
 * messages; the reason says what happened and what to do.  It stays
 * paused, across restarts, until someone resumes it.  The caller need not
 * be connected to SPI.
 */
void
sc_cube_row_pause_for(int32 cube_id, const char *reason)
{
	Oid			t[2] = {INT4OID, TEXTOID};
	Datum		v[2] = {Int32GetDatum(cube_id), CStringGetTextDatum(sc_redact(reason))};

	SPI_connect();
	sc_catalog_exec("UPDATE streamcube.cubes SET paused = true, paused_reason = $2, "
					"config_version = config_version + 1 WHERE cube_id = $1",
					2, t, v, NULL, false, 0);
	SPI_finish();
	sc_launcher_wakeup_at_commit();
}

/*
 * Lock the cube's row for writing it, without waiting: for a receiver's
 * batch, which holds the cube's table (lock 3 of "Lock order") and so may
 * not wait for the row (lock 2).  When another transaction holds it (a
 * seal that wrote the sealed view, held through its compactions, whose
 * swap needs the table; a reassignment; streamcube_alter_cube), the error
 * is lock_not_available: the caller runs this under sc_try_nowait().
 */
void
sc_cube_row_lock_nowait(int32 cube_id)
{
	Oid			t[1] = {INT4OID};
	Datum		v[1] = {Int32GetDatum(cube_id)};

	sc_catalog_exec("SELECT 1 FROM streamcube.cubes WHERE cube_id = $1 FOR NO KEY UPDATE NOWAIT",
					1, t, v, NULL, false, 0);
}

/*
 * A bad message under policy "pause" paused the cube, in the batch's
 * transaction (which locked the row first: sc_cube_row_lock_nowait):
 * which, and why.  The receiver stops by itself.
 */
void
sc_cube_row_pause_at(int32 cube_id, int32 partition, int64 offset, const char *error)
{
	Oid			t[4] = {INT4OID, INT4OID, INT8OID, TEXTOID};
	Datum		v[4] = {Int32GetDatum(cube_id), Int32GetDatum(partition), Int64GetDatum(offset),
	CStringGetTextDatum(error ? error : "")};

	sc_catalog_exec("UPDATE streamcube.cubes SET paused = true, "
					"bad_partition = $2, bad_offset = $3, bad_error = $4, "
					"config_version = config_version + 1 WHERE cube_id = $1",
					4, t, v, NULL, false, 0);
}

/* The message to skip (streamcube_resume(skip_bad_message => true)) was dead-lettered. */
void
sc_cube_row_skip_done(int32 cube_id)
{
	Oid			t[1] = {INT4OID};
	Datum		v[1] = {Int32GetDatum(cube_id)};

	sc_catalog_exec("UPDATE streamcube.cubes SET skip_partition = NULL, skip_offset = NULL, "
					"skip_error = NULL WHERE cube_id = $1",
					1, t, v, NULL, false, 0);
}

/*
 * The operator set the positions of the paused cube, acting on its
 * reason: the reason goes, the cube stays paused.  The positions are now
 * offsets of the Kafka cluster that answered (its id, when known).
 */
void
sc_cube_row_positions_set(int32 cube_id, const char *kafka_cluster_id)
{
	Oid			t[2] = {INT4OID, TEXTOID};
	Datum		v[2] = {Int32GetDatum(cube_id),
	CStringGetTextDatum(kafka_cluster_id ? kafka_cluster_id : "")};

	sc_catalog_exec("UPDATE streamcube.cubes SET paused_reason = NULL, stop_reached_at = NULL, "
					"config_version = config_version + 1, "
					"kafka_cluster_id = coalesce(nullif($2, ''), kafka_cluster_id) WHERE cube_id = $1",
					2, t, v, NULL, false, 0);
	sc_launcher_wakeup_at_commit();
}

/*
 * The cube's stop point: requested as what the user asked ("latest", ...),
 * NULL for none.  Its offsets are in streamcube.stop_offsets (stops.c).
 * Not reached yet, whatever it was before.
 */
void
sc_cube_row_set_stop(int32 cube_id, const char *requested)
{
	Oid			t[2] = {INT4OID, TEXTOID};
	Datum		v[2] = {Int32GetDatum(cube_id), requested ? CStringGetTextDatum(requested) : (Datum) 0};

	sc_catalog_exec("UPDATE streamcube.cubes SET stop_requested = $2, stop_reached_at = NULL, "
					"config_version = config_version + 1 WHERE cube_id = $1",
					2, t, v, requested ? NULL : " n", false, 0);
	sc_launcher_wakeup_at_commit();
}

/*
 * Every partition the cube consumes reached its stop point: pause the
 * cube, saying so.  Receivers call it when their own partitions are
 * there; the row's lock (FOR UPDATE: it waits for the batches of the
 * other receivers in flight, which hold it FOR KEY SHARE) makes those
 * calls one after the other, and the check runs after taking it, so the
 * last receiver to get there sees every other one's committed positions.
 * A partition without a consume position (a crash emptied them) counts
 * from its checkpoint.  Returns whether this call paused the cube.
 */
bool
sc_cube_row_stop_reached(int32 cube_id)
{
	Oid			t[1] = {INT4OID};
	Datum		v[1] = {Int32GetDatum(cube_id)};

	sc_catalog_exec("SELECT 1 FROM streamcube.cubes WHERE cube_id = $1 FOR UPDATE",
					1, t, v, NULL, false, 0);
	sc_catalog_exec("UPDATE streamcube.cubes c SET paused = true, stop_reached_at = now(), "
					"paused_reason = 'reached its stop point (' || c.stop_requested || ')', "
					"config_version = config_version + 1 "
					"WHERE c.cube_id = $1 AND c.stop_requested IS NOT NULL "
					"  AND c.stop_reached_at IS NULL AND NOT c.paused "
					"  AND NOT EXISTS (SELECT 1 FROM streamcube.assignments a "
					"                  LEFT JOIN streamcube.consume_positions p USING (cube_id, partition) "
					"                  LEFT JOIN streamcube.checkpoints k USING (cube_id, partition) "
					"                  LEFT JOIN streamcube.stop_offsets s USING (cube_id, partition) "
					"                  WHERE a.cube_id = $1 "
					"                    AND greatest(p.position, k.\"offset\", 0) < coalesce(s.stop_offset, 0))",
					1, t, v, NULL, false, 0);
	if (SPI_processed == 0)
		return false;
	sc_launcher_wakeup_at_commit();
	return true;
}

/* New options (streamcube_alter_cube). */
void
sc_cube_row_set_options(int32 cube_id, Datum options)
{
	Oid			t[2] = {INT4OID, JSONBOID};
	Datum		v[2] = {Int32GetDatum(cube_id), options};

	sc_catalog_exec("UPDATE streamcube.cubes SET options = $2, "
					"config_version = config_version + 1 WHERE cube_id = $1",
					2, t, v, NULL, false, 0);
	sc_launcher_wakeup_at_commit();
}

/* A reassignment changed the assignments: their new epoch. */
void
sc_cube_row_set_epoch(int32 cube_id, int64 epoch)
{
	Oid			t[2] = {INT4OID, INT8OID};
	Datum		v[2] = {Int32GetDatum(cube_id), Int64GetDatum(epoch)};

	sc_catalog_exec("UPDATE streamcube.cubes SET assignment_epoch = $2, "
					"config_version = config_version + 1 WHERE cube_id = $1",
					2, t, v, NULL, false, 0);
	sc_launcher_wakeup_at_commit();
}

/*
 * The id of the Kafka cluster the cube's offsets belong to, recorded the
 * first time a receiver learns it; returns the one recorded (an earlier
 * one wins), or NULL when the cube is gone.
 */
char *
sc_cube_row_set_kafka_cluster_id(int32 cube_id, const char *kafka_cluster_id)
{
	Oid			t[2] = {INT4OID, TEXTOID};
	Datum		v[2] = {Int32GetDatum(cube_id), CStringGetTextDatum(kafka_cluster_id)};

	sc_catalog_exec("UPDATE streamcube.cubes SET kafka_cluster_id = coalesce(kafka_cluster_id, $2) "
					"WHERE cube_id = $1 RETURNING kafka_cluster_id",
					2, t, v, NULL, false, 0);
	if (SPI_processed == 0)
		return NULL;
	return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

/* The view <cube>_sealed, made by the cube's first seal. */
void
sc_cube_row_set_sealed_view(int32 cube_id, const char *view)
{
	Oid			t[2] = {INT4OID, TEXTOID};
	Datum		v[2] = {Int32GetDatum(cube_id), CStringGetTextDatum(view)};

	if (sc_catalog_exec("UPDATE streamcube.cubes SET sealed_view = $2::regclass WHERE cube_id = $1",
						2, t, v, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not record the sealed view");
}

/* The cube's topic argument, after streamcube_alter_cube changed its topics. */
void
sc_cube_row_set_topic(int32 cube_id, const char *topic)
{
	sc_catalog_exec("UPDATE streamcube.cubes SET topic = $2, config_version = config_version + 1 "
					"WHERE cube_id = $1", 2, (Oid[]) {INT4OID, TEXTOID},
					(Datum[]) {Int32GetDatum(cube_id), CStringGetTextDatum(topic)}, NULL, false, 0);
	sc_launcher_wakeup_at_commit();
}

/*
 * Something receivers must read again changed beside the row (a roll-up
 * created or dropped): bump config_version.
 */
void
sc_cube_row_touch(int32 cube_id)
{
	Oid			t[1] = {INT4OID};
	Datum		v[1] = {Int32GetDatum(cube_id)};

	sc_catalog_exec("UPDATE streamcube.cubes SET config_version = config_version + 1 WHERE cube_id = $1",
					1, t, v, NULL, false, 0);
	sc_launcher_wakeup_at_commit();
}

/*
 * A Kafka cluster's configuration changed (streamcube_alter_cluster): every
 * cube of it gets a new config_version, so its receivers open a new
 * consumer with the new configuration.
 */
void
sc_cube_rows_touch_cluster(const char *cluster)
{
	sc_catalog_exec("UPDATE streamcube.cubes SET config_version = config_version + 1 WHERE cluster_name = $1",
					1, (Oid[]) {TEXTOID}, (Datum[]) {CStringGetTextDatum(cluster)}, NULL, false, 0);
	sc_launcher_wakeup_at_commit();
}
