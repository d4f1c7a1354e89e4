-- streamcube 0.2.0 -> 0.3.0
--
-- - Secrets that cannot reach the server log through a typo: the
--   functions that take Kafka properties get a second form whose
--   properties are text, parsed inside the function after its statement
--   is hidden from the log (a '{...}' literal resolves to it).
-- - streamcube_library_version(): the version of the loaded library.
-- - streamcube.consumers shows every (cube, replica set) with partitions,
--   with a receiver or not (state waiting or standby, and why), and reads
--   no UNLOGGED catalog, so that it works on a standby; rows_direct and
--   rows_copy say which writer took the rows.
-- - Positions by time: streamcube_set_positions takes {"timestamp": T}
--   (the function is the same; its comment says so).
-- - Stop points: streamcube_resume(cube, until => ...) reads up to a stop
--   offset per partition ("latest", offsets, a time) and then pauses the
--   cube by itself; streamcube.stop_offsets keeps them, and the view
--   streamcube.stops shows how far each partition is from its stop.
-- - Formats avro and protobuf: Confluent-framed, with the schemas of the
--   cluster's schema registry (kept in streamcube.schemas); Avro also as
--   bare records of the schema in the cube's options.
-- - Roll-ups: streamcube_create_rollup / streamcube_drop_rollup, the
--   catalogs streamcube.rollup_catalog and streamcube.rollup_windows, the
--   view streamcube.rollups; the sql_drop trigger forgets a roll-up (or a
--   partition of one) dropped by hand.
--
-- sql/streamcube--0.3.0.sql is sql/streamcube--0.2.0.sql followed by the
-- body of this file: a fresh 0.3.0 and an updated one are the same.

\echo Use "ALTER EXTENSION streamcube UPDATE TO '0.3.0'" to load this file. \quit

-- ---------------------------------------------------------------------
-- 0.3.0: properties as text
-- ---------------------------------------------------------------------
CREATE FUNCTION streamcube_add_cluster(name text, bootstrap_servers text, properties text)
    RETURNS void LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_add_cluster';
COMMENT ON FUNCTION streamcube_add_cluster(text, text, text) IS
    'Register a Kafka cluster, its properties given as JSON text: a text that does not parse is refused without repeating it or logging the statement';
REVOKE EXECUTE ON FUNCTION streamcube_add_cluster(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION streamcube_add_cluster(text, text, text) TO streamcube_admin;

CREATE FUNCTION streamcube_alter_cluster(name text, bootstrap_servers text, properties text)
    RETURNS void LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_alter_cluster';
COMMENT ON FUNCTION streamcube_alter_cluster(text, text, text) IS
    'streamcube_alter_cluster with properties as JSON text (bootstrap_servers NULL keeps them): a text that does not parse is refused without repeating it or logging the statement';
REVOKE EXECUTE ON FUNCTION streamcube_alter_cluster(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION streamcube_alter_cluster(text, text, text) TO streamcube_admin;

-- ---------------------------------------------------------------------
-- 0.3.0: every cube shows in streamcube.consumers, with or without a
-- receiver; a replica set that no receiver slot serves says why
-- ---------------------------------------------------------------------
CREATE FUNCTION streamcube._receiver_slots(OUT in_use integer, OUT total integer)
    RETURNS record LANGUAGE C STRICT SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_receiver_slots';

-- rows_direct and rows_copy: which of the two writers took the rows;
-- batches: how many transactions took them;
-- lag_seconds: how old the oldest message not consumed yet is
DROP VIEW streamcube.consumers;
DROP FUNCTION streamcube._receivers();
CREATE FUNCTION streamcube._receivers(
        OUT pid integer, OUT cube_id integer, OUT replica_set text, OUT state text,
        OUT partitions integer[], OUT positions bigint[], OUT high_watermarks bigint[],
        OUT lag bigint, OUT rows_per_second double precision, OUT rows_total bigint,
        OUT started_at timestamptz, OUT last_batch_at timestamptz,
        OUT last_error text, OUT last_error_at timestamptz,
        OUT topic_partitions integer, OUT tombstones_skipped bigint,
        OUT epoch bigint, OUT rows_direct bigint, OUT rows_copy bigint,
        OUT lag_seconds double precision, OUT partition_lag_seconds double precision[],
        OUT batches bigint)
    RETURNS SETOF record LANGUAGE C STRICT SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_receivers';

CREATE VIEW streamcube.consumers AS
SELECT r.pid,
       c.relid::regclass AS cube,
       r.replica_set,
       r.epoch,                -- the assignment epoch the receiver runs at
       r.state,
       r.partitions,
       r.positions,
       r.high_watermarks,
       r.lag,
       -- how old (Kafka timestamp) the oldest message not consumed yet is,
       -- in seconds; 0 when caught up; NULL when not known (paused)
       round(r.lag_seconds::numeric, 3) AS lag_seconds,
       round(r.rows_per_second::numeric, 1) AS rows_per_second,
       r.rows_total,
       r.started_at,
       r.last_batch_at,
       CASE WHEN c.paused AND c.paused_reason IS NOT NULL THEN c.paused_reason
            WHEN c.paused AND c.bad_error IS NOT NULL
            THEN format('paused by bad message at partition %s offset %s: %s',
                        c.bad_partition, c.bad_offset, c.bad_error)
            ELSE r.last_error END AS last_error,
       r.last_error_at,
       -- partitions of the topic that no replica set of the cube consumes
       ARRAY(SELECT p FROM generate_series(0, r.topic_partitions - 1) AS p
             WHERE NOT EXISTS (SELECT 1 FROM streamcube.assignments a
                               WHERE a.cube_id = c.cube_id AND a.partition = p)
             ORDER BY p) AS unassigned_partitions,
       r.tombstones_skipped,
       -- the logged restart point of each partition: where a crash restarts it
       ARRAY(SELECT k."offset" FROM unnest(r.partitions) WITH ORDINALITY AS u(p, i)
             JOIN streamcube.checkpoints k ON k.cube_id = c.cube_id AND k.partition = u.p
             ORDER BY u.i) AS checkpoints,
       -- rows written since the receiver started: formed and inserted by the
       -- receiver itself, or through COPY (late rows into sealed windows,
       -- windows with triggers, streamcube.direct_insert = off)
       r.rows_direct,
       r.rows_copy,
       -- transactions that moved positions since the receiver started:
       -- rows_total / batches is how many rows a batch takes
       r.batches
FROM streamcube._receivers() r
JOIN streamcube.cubes c USING (cube_id)
WHERE pg_catalog.has_table_privilege(c.relid, 'SELECT')
UNION ALL
-- (cube, replica set) pairs with partitions and no receiver slot: the
-- launcher has not started them yet, every slot is taken, or this is a
-- standby (state standby)
SELECT NULL::integer,
       c.relid::regclass,
       w.replica_set,
       NULL::bigint,
       CASE WHEN pg_catalog.pg_is_in_recovery() THEN 'standby' ELSE 'waiting' END,
       w.partitions,
       NULL::bigint[],         -- (no UNLOGGED catalog here: the view works on a standby)
       NULL::bigint[],
       NULL::bigint,
       NULL::numeric,
       NULL::numeric,
       NULL::bigint,
       NULL::timestamptz,
       NULL::timestamptz,
       CASE WHEN pg_catalog.pg_is_in_recovery()
            THEN 'not consumed on a standby: receivers run on the primary; the sealed windows arrive through replication'
            WHEN s.in_use >= s.total
            THEN format('no receiver slot is free: all %s receiver slots (streamcube.max_receivers) are in use; '
                        'raise streamcube.max_receivers and restart the server, or drop cubes no longer needed', s.total)
            ELSE 'waiting for the launcher to start its receiver' END,
       NULL::timestamptz,
       NULL::integer[],
       NULL::bigint,
       ARRAY(SELECT k."offset" FROM unnest(w.partitions) WITH ORDINALITY AS u(part, i)
             JOIN streamcube.checkpoints k ON k.cube_id = c.cube_id AND k.partition = u.part
             ORDER BY u.i),
       NULL::bigint,
       NULL::bigint,
       NULL::bigint
FROM (SELECT a.cube_id, a.replica_set, array_agg(a.partition ORDER BY a.partition) AS partitions
      FROM streamcube.assignments a GROUP BY 1, 2) w
JOIN streamcube.cubes c USING (cube_id)
CROSS JOIN streamcube._receiver_slots() s
WHERE pg_catalog.has_table_privilege(c.relid, 'SELECT')
  AND NOT EXISTS (SELECT 1 FROM streamcube._receivers() r
                  WHERE r.cube_id = w.cube_id AND r.replica_set = w.replica_set);
COMMENT ON VIEW streamcube.consumers IS
    'One row per receiver of a cube and replica set (state waiting: none runs yet, and why): state, partitions, positions, Kafka end offsets, lag, throughput, last error, unassigned partitions';
GRANT SELECT ON streamcube.consumers TO PUBLIC;

-- ---------------------------------------------------------------------
-- 0.3.0: the version of the library the server loaded
-- ---------------------------------------------------------------------
CREATE FUNCTION streamcube_library_version() RETURNS text
    LANGUAGE C STRICT SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_library_version';
COMMENT ON FUNCTION streamcube_library_version() IS
    'The version of the streamcube library the server loaded: after a new build and a restart it differs from pg_extension.extversion until ALTER EXTENSION streamcube UPDATE';

-- ---------------------------------------------------------------------
-- 0.3.0: every relation of a cube belongs to its owner.  0.2.0 left the
-- windows a superuser created with the superuser when the table was given
-- to another role: they are given to the table's owner now (from 0.3.0
-- on, ALTER TABLE ... OWNER TO moves them, and a partition of another role
-- is refused).
-- ---------------------------------------------------------------------
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT m.oid::regclass AS member, m.relkind, p.relowner
        FROM streamcube.cubes c
        JOIN pg_catalog.pg_class p ON p.oid = c.relid
        CROSS JOIN LATERAL pg_catalog.pg_partition_tree(c.relid) t
        JOIN pg_catalog.pg_class m ON m.oid = t.relid
        WHERE t.relid <> c.relid AND m.relowner <> p.relowner
        UNION ALL
        SELECT v.oid::regclass, v.relkind, p.relowner
        FROM streamcube.cubes c
        JOIN pg_catalog.pg_class p ON p.oid = c.relid
        JOIN pg_catalog.pg_class v ON v.oid = c.sealed_view AND v.relkind = 'v'
        WHERE v.relowner <> p.relowner
    LOOP
        EXECUTE pg_catalog.format('ALTER %s %s OWNER TO %I',
                                  CASE WHEN r.relkind = 'v' THEN 'VIEW' ELSE 'TABLE' END,
                                  r.member, pg_catalog.pg_get_userbyid(r.relowner));
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------
-- 0.3.0: positions by time (streamcube_set_positions and option start)
-- ---------------------------------------------------------------------
COMMENT ON FUNCTION streamcube_set_positions(text, jsonb) IS
    'Set the consume positions of a paused cube: ''"earliest"'', ''"latest"'', {"timestamp": T} (each partition''s first message stamped at or after T), or {"partition": offset | "earliest" | "latest" | {"timestamp": T}}; journalled in streamcube.position_changes';

-- ---------------------------------------------------------------------
-- 0.3.0: stop points (streamcube_resume(until => ...), option end)
-- ---------------------------------------------------------------------
ALTER TABLE streamcube.cubes
    ADD COLUMN stop_requested  text,          -- what the stop point was asked as (NULL: none)
    ADD COLUMN stop_reached_at timestamptz;   -- when the cube paused at it (NULL: not yet)

-- The first offset a cube with a stop point does not read, per Kafka
-- partition.  A partition of such a cube without a row (added to the
-- topic later) stops at 0: it held nothing when the stop was set.
CREATE TABLE streamcube.stop_offsets (
    cube_id     integer NOT NULL REFERENCES streamcube.cubes ON DELETE CASCADE,
    partition   integer NOT NULL CHECK (partition >= 0),
    stop_offset bigint NOT NULL CHECK (stop_offset >= 0),
    requested   text NOT NULL,                -- 'latest', 'timestamp T' or the offset given
    PRIMARY KEY (cube_id, partition)
);
REVOKE ALL ON streamcube.stop_offsets FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('streamcube.stop_offsets', '');

DROP FUNCTION streamcube_resume(text, boolean);
CREATE FUNCTION streamcube_resume(cube text, skip_bad_message boolean DEFAULT false,
                                  until jsonb DEFAULT NULL)
    RETURNS void LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_resume_cube';
COMMENT ON FUNCTION streamcube_resume(text, boolean, jsonb) IS
    'Resume a cube; with skip_bad_message the message that paused it goes to streamcube.dead_letters; with until (''"latest"'', {"timestamp": T} or {"partition": offset | "latest" | {"timestamp": T}}) it reads up to that stop point and pauses by itself; without until, any stop point is forgotten';

-- How far each partition of a cube with a stop point is from it.  Readers
-- of the cube only, as streamcube.consumers; no UNLOGGED catalog is read
-- (the position is the logged checkpoint on a standby).
CREATE VIEW streamcube.stops AS
SELECT c.relid AS cube,
       s.partition,
       s.requested,
       s.stop_offset,
       c.stop_reached_at,
       c.stop_requested
FROM streamcube.cubes c
JOIN streamcube.stop_offsets s USING (cube_id)
WHERE c.stop_requested IS NOT NULL
  AND pg_catalog.has_table_privilege(c.relid, 'SELECT');
GRANT SELECT ON streamcube.stops TO PUBLIC;
COMMENT ON VIEW streamcube.stops IS
    'Stop points of cubes resumed with until (or created with option end): per partition, the first offset the cube does not read, and when the cube paused there';
COMMENT ON FUNCTION streamcube_wait(text, interval) IS
    'Wait until the cube has consumed every message that was in Kafka when called, or for a cube with a stop point until every partition reached it; false on timeout, or at once when the cube is paused (not at its stop point) or partitions are unassigned';

-- ---------------------------------------------------------------------
-- 0.3.0: lag in time (streamcube.consumers.lag_seconds above, and here)
-- ---------------------------------------------------------------------
DROP FUNCTION streamcube.lag(text);
CREATE FUNCTION streamcube.lag(cube text)
    RETURNS TABLE (partition integer, replica_set text, "position" bigint,
                   checkpoint bigint, high_watermark bigint,
                   last_stable_offset bigint, lag bigint,
                   last_batch_at timestamptz, since_last_batch interval,
                   oldest_unconsumed_at timestamptz, lag_seconds double precision)
    LANGUAGE C STRICT SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_cube_lag';
COMMENT ON FUNCTION streamcube.lag(text) IS
    'Per Kafka partition of a cube: replica set, committed position, checkpoint, high watermark, last stable offset, lag in messages, when the position last moved, the Kafka timestamp of the oldest message not consumed and its age in seconds (0 when caught up); asks Kafka';
GRANT EXECUTE ON FUNCTION streamcube.lag(text) TO PUBLIC;

-- One row per partition a receiver consumes, for monitoring systems that
-- want a row per series (postgres_exporter: monitoring/postgres_exporter.yaml).
CREATE VIEW streamcube.consumer_partitions AS
SELECT c.relid::regclass AS cube,
       r.replica_set,
       r.state,
       u.partition,
       u.position,
       nullif(u.high_watermark, -1) AS high_watermark,
       CASE WHEN u.high_watermark >= 0 THEN greatest(u.high_watermark - u.position, 0) END AS lag,
       round(u.lag_seconds::numeric, 3) AS lag_seconds,
       r.last_batch_at
FROM streamcube._receivers() r
JOIN streamcube.cubes c USING (cube_id)
CROSS JOIN LATERAL unnest(r.partitions, r.positions, r.high_watermarks, r.partition_lag_seconds)
     AS u(partition, position, high_watermark, lag_seconds)
WHERE pg_catalog.has_table_privilege(c.relid, 'SELECT');
GRANT SELECT ON streamcube.consumer_partitions TO PUBLIC;
COMMENT ON VIEW streamcube.consumer_partitions IS
    'One row per Kafka partition a running receiver consumes: position, end, lag in messages and in seconds (Kafka timestamps)';

-- Per cube: paused or not and why, its stop point, and what the schedule
-- (streamcube_seal_due) has left to do.
CREATE FUNCTION streamcube._maintenance_backlog(
        OUT cube regclass, OUT windows_to_seal integer,
        OUT partitions_to_compact integer, OUT partitions_to_drop integer)
    RETURNS SETOF record LANGUAGE C STRICT SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_maintenance_backlog';
CREATE VIEW streamcube.cube_status AS
SELECT c.relid::regclass AS cube,
       c.paused,
       CASE WHEN c.paused THEN coalesce(c.paused_reason,
            'paused by a bad message at partition ' || c.bad_partition || ' offset ' || c.bad_offset,
            'paused by streamcube_pause()') END AS paused_reason,
       c.stop_requested,
       c.stop_reached_at,
       b.windows_to_seal,
       b.partitions_to_compact,
       b.partitions_to_drop
FROM streamcube.cubes c
JOIN streamcube._maintenance_backlog() b ON b.cube = c.relid
WHERE pg_catalog.has_table_privilege(c.relid, 'SELECT');
GRANT SELECT ON streamcube.cube_status TO PUBLIC;
COMMENT ON VIEW streamcube.cube_status IS
    'Per cube the caller may read: paused and why, its stop point, and what streamcube_seal_due() would do now, unbounded: windows to seal, sealed partitions to merge, partitions past retention';

-- ---------------------------------------------------------------------
-- 0.3.0: formats avro and protobuf, and the schemas the registry gave
-- ---------------------------------------------------------------------
ALTER TABLE streamcube.cubes DROP CONSTRAINT cubes_format_check,
    ADD CONSTRAINT cubes_format_check CHECK (format IN ('json', 'jsonb', 'csv', 'avro', 'protobuf'));

-- Writer schemas by id, as a schema registry gave them: the first time a
-- receiver meets an id it asks the registry, and keeps the answer here, so
-- that it goes on for the ids it has seen while the registry is down.  An
-- id means one schema forever in one registry (its URLs, as set).
CREATE TABLE streamcube.schemas (
    registry    text NOT NULL,               -- the cluster's schema.registry.url
    schema_id   integer NOT NULL,
    schema_type text NOT NULL,               -- AVRO, PROTOBUF or JSON
    schema      text NOT NULL,
    refs        jsonb NOT NULL DEFAULT '[]', -- Protobuf: the files it imports, [{"name", "schema"}]
    fetched_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (registry, schema_id)
);
REVOKE ALL ON streamcube.schemas FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('streamcube.schemas', '');
COMMENT ON TABLE streamcube.schemas IS
    'Writer schemas by registry and id, as the schema registry gave them to the receivers (formats avro and protobuf)';

-- ---------------------------------------------------------------------
-- 0.3.0: roll-ups (streamcube_create_rollup): pre-aggregated tables that
-- receivers keep in the batch's transaction, partitioned like the cube
-- ---------------------------------------------------------------------
CREATE TABLE streamcube.rollup_catalog (
    rollup_id   serial PRIMARY KEY,
    cube_id     integer NOT NULL REFERENCES streamcube.cubes ON DELETE CASCADE,
    relid       regclass NOT NULL UNIQUE,     -- the roll-up's table
    granularity interval NOT NULL,            -- width of a bucket; divides the cube's window
    dimensions  name[] NOT NULL,              -- cube columns, also columns of the roll-up
    measures    jsonb NOT NULL,               -- {"name": "aggregate(column)", ...} as given
    retention   interval,                     -- drop its windows older than this (NULL: keep)
    sealed_view regclass,                     -- the view <roll-up>_sealed (sealed partitions only)
    created_at  timestamptz NOT NULL DEFAULT now(),
    created_by  name NOT NULL DEFAULT current_user
);
REVOKE ALL ON streamcube.rollup_catalog FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('streamcube.rollup_catalog', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.rollup_catalog_rollup_id_seq', '');

-- One row per window of the cube the roll-up has a partition for: UNLOGGED
-- while the cube's window is active, logged (a twin swapped in by the
-- same seal) once it is sealed.  A window's row outlives the cube's window
-- when the roll-up keeps longer than the cube.
CREATE TABLE streamcube.rollup_windows (
    rollup_id    integer NOT NULL REFERENCES streamcube.rollup_catalog ON DELETE CASCADE,
    window_start timestamptz NOT NULL,
    window_end   timestamptz NOT NULL CHECK (window_end > window_start),
    state        text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'sealed')),
    relid        regclass NOT NULL,
    PRIMARY KEY (rollup_id, window_start)
);
REVOKE ALL ON streamcube.rollup_windows FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('streamcube.rollup_windows', '');

CREATE FUNCTION streamcube_create_rollup(cube text, name text, granularity interval,
                                         dimensions text[], measures jsonb,
                                         options jsonb DEFAULT '{}')
    RETURNS regclass LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_create_rollup';
COMMENT ON FUNCTION streamcube_create_rollup(text, text, interval, text[], jsonb, jsonb) IS
    'Create a roll-up of a cube: a table of one row per bucket of granularity and dimensions, with one column per measure ({"name": "count(*)" | "count(c)" | "sum(c)" | "min(c)" | "max(c)" | "avg(c)" | "hll(c)" | "tdigest(c)"}), filled from the rows the cube holds and kept by its receivers in the same transaction as the rows; option retention';

CREATE FUNCTION streamcube_drop_rollup(name text)
    RETURNS void LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_drop_rollup';
COMMENT ON FUNCTION streamcube_drop_rollup(text) IS
    'Drop a roll-up and its table; the cube is left as it is';

-- The roll-ups of the cubes the caller may read: definition, rows and
-- buckets counted (as streamcube.segments counts a window's rows), size,
-- and how many of the cube's rows one roll-up row stands for.
CREATE FUNCTION streamcube._rollup_stats(rollup regclass, OUT rows bigint, OUT buckets bigint)
    RETURNS record LANGUAGE C STRICT STABLE SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_rollup_stats';
CREATE VIEW streamcube.rollups AS
SELECT r.relid AS rollup,
       c.relid AS cube,
       r.granularity,
       r.dimensions,
       r.measures,
       r.retention,
       (SELECT pg_catalog.count(*) FROM streamcube.rollup_windows w WHERE w.rollup_id = r.rollup_id)::integer AS windows,
       st.rows,
       st.buckets,
       (SELECT pg_catalog.sum(pg_catalog.pg_total_relation_size(i.inhrelid))::bigint
        FROM pg_catalog.pg_inherits i WHERE i.inhparent = r.relid) AS bytes,
       cs.rows AS cube_rows,
       CASE WHEN st.rows > 0 THEN round(cs.rows::numeric / st.rows, 1) END AS rows_per_rollup_row,
       r.sealed_view,
       r.created_at
FROM streamcube.rollup_catalog r
JOIN streamcube.cubes c USING (cube_id)
CROSS JOIN LATERAL streamcube._rollup_stats(r.relid) st
CROSS JOIN LATERAL (
    SELECT pg_catalog.sum(streamcube._segment_rows(c.relid, i.inhrelid))::bigint AS rows
    FROM pg_catalog.pg_inherits i WHERE i.inhparent = c.relid) cs
WHERE pg_catalog.has_table_privilege(c.relid, 'SELECT');
GRANT SELECT ON streamcube.rollups TO PUBLIC;
COMMENT ON VIEW streamcube.rollups IS
    'Roll-ups of the cubes the caller may read: granularity, dimensions, measures, retention, windows held, rows and buckets (counted; NULL without SELECT on the roll-up), bytes, the cube''s rows and how many of them one roll-up row stands for, the view of its sealed partitions for standbys';

-- DROP TABLE of a roll-up forgets it (receivers stop keeping it); DROP
-- TABLE of one of its partitions forgets that window.  A view <x>_sealed
-- dropped (by hand, or with a partition it read) is forgotten: the next
-- seal makes it anew, and no OID left behind can come to name another
-- relation.
CREATE OR REPLACE FUNCTION streamcube._on_sql_drop() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    forgotten integer;
BEGIN
    DELETE FROM streamcube.segment_catalog s
    USING pg_event_trigger_dropped_objects() d
    WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = s.relid::oid;

    DELETE FROM streamcube.rollup_windows w
    USING pg_event_trigger_dropped_objects() d
    WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = w.relid::oid;

    UPDATE streamcube.cubes c SET sealed_view = NULL
    FROM pg_event_trigger_dropped_objects() d
    WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = c.sealed_view::oid;

    UPDATE streamcube.rollup_catalog r SET sealed_view = NULL
    FROM pg_event_trigger_dropped_objects() d
    WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = r.sealed_view::oid;

    WITH gone AS (
        DELETE FROM streamcube.rollup_catalog r
        USING pg_event_trigger_dropped_objects() d
        WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = r.relid::oid
        RETURNING r.cube_id)
    UPDATE streamcube.cubes c SET config_version = c.config_version + 1
    FROM gone WHERE gone.cube_id = c.cube_id;

    DELETE FROM streamcube.cubes c
    USING pg_event_trigger_dropped_objects() d
    WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = c.relid::oid;
    GET DIAGNOSTICS forgotten = ROW_COUNT;
    IF forgotten > 0 THEN
        PERFORM streamcube._wake_launcher();
    END IF;
END
$$;

-- ---------------------------------------------------------------------
-- streamcube.segments: an active partition may hold several windows (a
-- bucket of history, streamcube.history_buckets); it is "active" (or
-- "sealing"), not "compacted", until sealed.
-- ---------------------------------------------------------------------
CREATE OR REPLACE VIEW streamcube.segments AS
SELECT c.relid::regclass AS cube,
       min(s.window_start) AS window_start,
       max(s.window_end) AS window_end,
       -- several windows in one partition: compacted once sealed; a bucket
       -- of history's windows is one while active too (segments.c)
       CASE WHEN count(*) > 1 AND min(s.state) = 'sealed' THEN 'compacted'
            -- a seal holds a SHARE lock on the window's partition while it copies
            WHEN min(s.state) = 'active' AND EXISTS (
                 SELECT 1 FROM pg_catalog.pg_locks l
                 WHERE l.relation = s.relid AND l.mode = 'ShareLock' AND l.granted)
            THEN 'sealing' ELSE min(s.state) END AS state,
       streamcube._segment_rows(c.relid, s.relid) AS rows,
       pg_catalog.pg_total_relation_size(s.relid) AS bytes,
       s.relid::regclass AS relation,
       max(s.sealed_at) AS sealed_at,
       -- per Kafka partition: every message of the partition's windows below
       -- this offset is in it (the smallest of its windows' marks; 0 when a
       -- window has none, as a window no row ever needed)
       (SELECT pg_catalog.jsonb_object_agg(u.partition, u."offset" ORDER BY u.partition)
        FROM (SELECT u.partition,
                     CASE WHEN pg_catalog.count(*) < (SELECT pg_catalog.count(*) FROM streamcube.segment_catalog w2
                                                      WHERE w2.cube_id = c.cube_id AND w2.relid = s.relid)
                          THEN 0 ELSE pg_catalog.min(u."offset") END AS "offset"
              FROM streamcube.sealed_upto u
              JOIN streamcube.segment_catalog w USING (cube_id, window_start)
              WHERE w.cube_id = c.cube_id AND w.relid = s.relid
              GROUP BY u.partition) u) AS sealed_upto,
       count(*)::integer AS windows
FROM streamcube.segment_catalog s
JOIN streamcube.cubes c USING (cube_id)
WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE oid = s.relid)
GROUP BY c.cube_id, c.relid, s.relid;

-- ---------------------------------------------------------------------
-- streamcube.window_offsets loses its foreign key to streamcube.cubes: a
-- replay of history records a first offset per window and Kafka partition,
-- and the key's check (a query per row) cost more than the insert.  Its
-- writers hold the cube's row already (a receiver's batch locks it FOR KEY
-- SHARE; seals and drops lock it too), so the row cannot go meanwhile; a
-- statement trigger on streamcube.cubes does what ON DELETE CASCADE did.
-- ---------------------------------------------------------------------
ALTER TABLE streamcube.window_offsets DROP CONSTRAINT window_offsets_cube_id_fkey;

CREATE FUNCTION streamcube._cubes_forget_offsets() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM streamcube.window_offsets w USING gone g WHERE w.cube_id = g.cube_id;
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION streamcube._cubes_forget_offsets() FROM PUBLIC;
CREATE TRIGGER cubes_forget_offsets AFTER DELETE ON streamcube.cubes
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION streamcube._cubes_forget_offsets();
