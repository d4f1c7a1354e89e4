/*-------------------------------------------------------------------------
 *
 * stops.c
 *		Stop points: the one writer of streamcube.stop_offsets.
 *
 * A cube with a stop point reads each Kafka partition up to its stop
 * offset, the first offset it does not read, and then pauses by itself
 * (streamcube_resume(cube, until => ...), or option end at creation).  The
 * receivers do the reading: a message at or past its partition's stop
 * offset is never ingested, and its arrival proves that nothing below the
 * stop is left unread, as the end of a partition does; the position then
 * moves to the stop offset exactly, across transaction markers, compacted
 * gaps and idle partitions alike.  The last receiver to get there pauses
 * the cube (sc_cube_row_stop_reached).
 *
 * The stop offsets are resolved here, once, when the stop point is set:
 * "latest" is where a consumer of the cube's cluster settings reads to now
 * (the last stable offset under read_committed, librdkafka's default, else
 * the high watermark), a time is each partition's first message stamped
 * at or after it (or the end), an offset is taken as given, even past
 * what Kafka holds now.  None is below the partition's position: a cube
 * cannot unread; "latest" and times are raised to the position, an offset
 * below it is refused.  So when the cube pauses at its stop point, every
 * position equals its stop offset, and a cube started there (option start
 * {"cube": ...}) reads every message exactly once between the two.
 *
 * The caller holds the cube's row FOR UPDATE: batches in flight have
 * committed, and the next ones wait for this transaction and then read the
 * stop point before building their batch (receiver.c).
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "catalog/pg_type.h"
#include "cube.h"
#include "cube_catalog.h"
#include "executor/spi.h"
#include "kafka.h"
#include "positions.h"
#include "stops.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/* The partitions the cube knows (it has a checkpoint of each), ascending. */
static List *
sc_stops_partitions(int32 cube_id)
{
	Oid			t = INT4OID;
	Datum		v = Int32GetDatum(cube_id);
	List	   *parts = NIL;
	bool		isnull;

	/* Not read-only: a new cube's checkpoints were written by this command. */
	sc_catalog_exec("SELECT partition FROM streamcube.checkpoints WHERE cube_id = $1 "
					"ORDER BY partition", 1, &t, &v, NULL, false, 0);
	for (uint64 i = 0; i < SPI_processed; i++)
		parts = lappend_int(parts, DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i],
															   SPI_tuptable->tupdesc, 1, &isnull)));
	return parts;
}

/* The request as the catalog keeps it: "latest", or the JSON given. */
static char *
sc_stops_requested(Jsonb *until)
{
	Oid			t = JSONBOID;
	Datum		v = JsonbPGetDatum(until);

	if (SPI_execute_with_args("SELECT CASE jsonb_typeof($1) WHEN 'string' THEN $1 #>> '{}' "
							  "       ELSE $1::text END",
							  1, &t, &v, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the stop point");
	return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

/* Is the change an offset given as a number? */
static bool
sc_stops_is_offset(const ScPositionChange *c)
{
	return c->at_ms < 0 && strcmp(c->requested, "latest") != 0;
}

/* Resolve one partition's stop offset against Kafka and its position. */
static void
sc_stops_resolve(ScCube *cube, ScPositionChange *c, List *kafka)
{
	int64		position = Max(sc_positions_merged(cube->cube_id, c->partition), 0);

	/*
	 * Kafka answers a time no message has reached yet with the partition's
	 * end now: a stop point in the future would stop at what is there now.
	 */
	if (c->at_ms >= 0 && sc_kafka_ms_timestamptz(c->at_ms) > GetCurrentTimestamp())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("stop point %s of cube %s is in the future", c->requested, cube->qualified),
				 errdetail("Which offset is the first stamped at or after it is not known before the messages are there."),
				 errhint("Give a time that has passed, an offset or \"latest\"; to stop at a future time, set the stop point once that time has passed.")));
	if (!sc_stops_is_offset(c))
	{
		sc_offsets_resolve(cube, c, kafka);
		c->offset = Max(c->offset, position);
		return;
	}
	if (c->offset < position)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("stop offset " INT64_FORMAT " of partition %s is below the position " INT64_FORMAT " of cube %s",
						c->offset, sc_partition_name(cube, c->partition), position, cube->qualified),
				 errdetail("The cube has read the messages below its position already."),
				 errhint("Give an offset at or past the position, or \"latest\"; streamcube.lag('%s') shows the positions.",
						 cube->qualified)));
}

/*
 * Give the cube the stop point until (see sc_offsets_parse for its
 * forms), replacing any other.  Caller is connected to SPI and holds the
 * cube's row FOR UPDATE; for a new cube, after its checkpoints.
 */
void
sc_stops_set(ScCube *cube, Jsonb *until)
{
	List	   *changes;
	List	   *kafka;
	Oid			t[4] = {INT4OID, INT4OID, INT8OID, TEXTOID};
	Datum		v[4];
	ListCell   *lc;

	/* A node's receivers do not know this server's stop points. */
	if (sc_catalog_has_column("placement_catalog", "cube_id"))
	{
		v[0] = Int32GetDatum(cube->cube_id);
		/* a fresh snapshot: the caller holds the cube's row, a placement committed before */
		sc_catalog_exec("SELECT 1 FROM streamcube.placement_catalog WHERE cube_id = $1 LIMIT 1",
						1, t, v, NULL, false, 1);
		if (SPI_processed > 0)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cube %s has a replica set placed on a node: it takes no stop point", cube->qualified),
					 errhint("Pause the cube here and on the node instead (streamcube.placements names it).")));
	}
	changes = sc_offsets_parse(until, "stop point", cube,
							   sc_topics_live(cube, sc_stops_partitions(cube->cube_id)));
	kafka = sc_kafka_describe_topics(sc_cluster_conninfo(cube->cluster), &cube->topics, true,
									 sc_kafka_timeout_ms, NULL, NULL);

	sc_offsets_by_time(cube, changes, kafka);
	v[0] = Int32GetDatum(cube->cube_id);
	sc_catalog_exec("DELETE FROM streamcube.stop_offsets WHERE cube_id = $1",
					1, t, v, NULL, false, 0);
	foreach(lc, changes)
	{
		ScPositionChange *c = lfirst(lc);

		sc_stops_resolve(cube, c, kafka);
		v[1] = Int32GetDatum(c->partition);
		v[2] = Int64GetDatum(c->offset);
		v[3] = CStringGetTextDatum(c->requested);
		sc_catalog_exec("INSERT INTO streamcube.stop_offsets (cube_id, partition, stop_offset, requested) "
						"VALUES ($1, $2, $3, $4)", 4, t, v, NULL, false, 0);
	}
	sc_cube_row_set_stop(cube->cube_id, sc_stops_requested(until));
}

/* Forget the cube's stop point, if it has one.  Caller is connected to SPI. */
void
sc_stops_clear(int32 cube_id)
{
	Oid			t = INT4OID;
	Datum		v = Int32GetDatum(cube_id);

	sc_catalog_exec("DELETE FROM streamcube.stop_offsets WHERE cube_id = $1", 1, &t, &v, NULL, false, 0);
	sc_catalog_exec("SELECT 1 FROM streamcube.cubes WHERE cube_id = $1 AND stop_requested IS NOT NULL",
					1, &t, &v, NULL, true, 0);
	if (SPI_processed > 0)
		sc_cube_row_set_stop(cube_id, NULL);
}

/*
 * The stop offsets of the cube's partitions parts[] (an int4[] datum), as
 * an int8[] datum; (Datum) 0 when the cube has no stop point.  Caller is
 * connected to SPI.
 */
Datum
sc_stops_targets(int32 cube_id, Datum parts)
{
	Oid			t[2] = {INT4OID, INT4ARRAYOID};
	Datum		v[2] = {Int32GetDatum(cube_id), parts};
	bool		isnull;
	Datum		d;

	sc_catalog_exec("SELECT (SELECT array_agg(coalesce(s.stop_offset, 0) ORDER BY t.ord) "
					"        FROM unnest($2) WITH ORDINALITY AS t(part, ord) "
					"        LEFT JOIN streamcube.stop_offsets s "
					"          ON s.cube_id = $1 AND s.partition = t.part) "
					"FROM streamcube.cubes c WHERE c.cube_id = $1 AND c.stop_requested IS NOT NULL",
					2, t, v, NULL, true, 0);
	if (SPI_processed == 0)
		return (Datum) 0;
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? (Datum) 0 : SPI_datumTransfer(d, false, -1);
}
