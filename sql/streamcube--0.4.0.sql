-- streamcube 0.4.0: install script
--
-- The install script of 0.3.0 (below, unchanged) followed by the body of
-- sql/streamcube--0.3.0--0.4.0.sql: a fresh 0.4.0 and an updated 0.3.0
-- are the same.  Written by sql/build-install-script.sh: change the
-- update script and run it.
--
--
-- The install script of 0.2.0 (below, unchanged) followed by the body of
-- sql/streamcube--0.2.0--0.3.0.sql: a fresh 0.3.0 and an updated 0.2.0
-- are the same.  Written by sql/build-install-script.sh: change the
-- update script and run it.
--
--
-- Functions live in the schema the extension is created in (public by
-- default) and are prefixed streamcube_; catalogs and views live in schema
-- streamcube.  Catalog tables are closed to PUBLIC: the C functions check
-- the caller and reach them as the bootstrap superuser.
--
-- Every function has SET search_path = pg_catalog, pg_temp, so nothing a
-- caller (or a cube owner) puts on a search path runs inside them.  The C
-- functions that resolve names given by the caller (a cube, a column type)
-- resolve them with the caller's own search path, and only those names.

\echo Use "CREATE EXTENSION streamcube" to load this file. \quit

CREATE SCHEMA streamcube;

-- Refuses to install outside streamcube.database, before anything else.
CREATE FUNCTION streamcube._check_install() RETURNS void
    LANGUAGE C STRICT SET search_path = pg_catalog, pg_temp AS 'MODULE_PATHNAME', 'sc_check_install';
SELECT streamcube._check_install();

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'streamcube_admin') THEN
        CREATE ROLE streamcube_admin NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA streamcube TO PUBLIC;

-- ---------------------------------------------------------------------
-- Kafka clusters
-- ---------------------------------------------------------------------

CREATE TABLE streamcube.clusters (
    name              text PRIMARY KEY CHECK (name <> ''),
    bootstrap_servers text NOT NULL CHECK (btrim(bootstrap_servers, E' \t\n,') <> ''),
    properties        jsonb NOT NULL DEFAULT '{}',   -- librdkafka properties, secrets excluded
    secrets           jsonb NOT NULL DEFAULT '{}',   -- secret properties, never shown
    created_at        timestamptz NOT NULL DEFAULT now(),
    created_by        name NOT NULL DEFAULT current_user
);
REVOKE ALL ON streamcube.clusters FROM PUBLIC;

CREATE VIEW streamcube.kafka_clusters AS
SELECT name,
       bootstrap_servers,
       properties || coalesce((SELECT jsonb_object_agg(key, '********') FROM jsonb_object_keys(secrets) AS key), '{}')
           AS properties,
       created_at,
       created_by
FROM streamcube.clusters;
REVOKE ALL ON streamcube.kafka_clusters FROM PUBLIC;
GRANT SELECT ON streamcube.kafka_clusters TO streamcube_admin;
COMMENT ON VIEW streamcube.kafka_clusters IS
    'Kafka clusters known to streamcube; secret properties show as ********';

CREATE FUNCTION streamcube_add_cluster(name text, bootstrap_servers text, properties jsonb DEFAULT '{}')
    RETURNS void LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_add_cluster';
COMMENT ON FUNCTION streamcube_add_cluster(text, text, jsonb) IS
    'Register a Kafka cluster; every property is classified (streamcube_kafka_properties) and checked by librdkafka before it is stored';

CREATE FUNCTION streamcube_drop_cluster(name text)
    RETURNS void LANGUAGE C STRICT SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_drop_cluster';
COMMENT ON FUNCTION streamcube_drop_cluster(text) IS
    'Forget a Kafka cluster that no cube uses';

CREATE FUNCTION streamcube_check_cluster(name text)
    RETURNS TABLE (topic text, partition integer, leader integer,
                   low_watermark bigint, high_watermark bigint)
    LANGUAGE C STRICT SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_check_cluster';
COMMENT ON FUNCTION streamcube_check_cluster(text) IS
    'Connect to a Kafka cluster and list every topic partition with its leader and watermarks';

-- Every librdkafka property of the linked library and who may set it.
CREATE FUNCTION streamcube_kafka_properties()
    RETURNS TABLE (name text, class text, required_role text, masked boolean)
    LANGUAGE C STRICT SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_kafka_properties';
COMMENT ON FUNCTION streamcube_kafka_properties() IS
    'Every librdkafka property of the linked library, its class and the role needed to set it in a cluster';

REVOKE EXECUTE ON FUNCTION streamcube_add_cluster(text, text, jsonb) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamcube_drop_cluster(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamcube_check_cluster(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION streamcube_add_cluster(text, text, jsonb) TO streamcube_admin;
GRANT EXECUTE ON FUNCTION streamcube_drop_cluster(text) TO streamcube_admin;
GRANT EXECUTE ON FUNCTION streamcube_check_cluster(text) TO streamcube_admin;

-- ---------------------------------------------------------------------
-- Cubes, replica sets and assignments
-- ---------------------------------------------------------------------

CREATE TABLE streamcube.cubes (
    cube_id          serial PRIMARY KEY,
    relid            regclass NOT NULL UNIQUE,       -- the cube's parent table
    cluster_name     text NOT NULL REFERENCES streamcube.clusters (name),
    topic            text NOT NULL,
    time_column      name NOT NULL,
    segment_interval interval NOT NULL,
    format           text NOT NULL CHECK (format IN ('json', 'jsonb', 'csv')),
    options          jsonb NOT NULL DEFAULT '{}',
    -- the owner is the owner of the table (pg_class.relowner): DROP ROLE
    -- then fails as for any table, and ALTER TABLE OWNER TO moves the cube
    paused           boolean NOT NULL DEFAULT false,
    paused_reason    text,                           -- why streamcube paused it (NULL: a user did)
    sealed_view      regclass,                       -- <cube>_sealed: the sealed windows only (standbys)
    config_version   bigint NOT NULL DEFAULT 1,      -- bumped on every change receivers must see
    bad_partition    integer,                        -- set when a bad message paused the cube
    bad_offset       bigint,
    bad_error        text,
    skip_partition   integer,                        -- dead-letter this message once, then go on
    skip_offset      bigint,
    skip_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    assignment_epoch bigint NOT NULL DEFAULT 0,      -- the reassignment that last changed its assignment
    kafka_cluster_id text                            -- the Kafka cluster id its positions belong to (NULL: not known yet)
);
REVOKE ALL ON streamcube.cubes FROM PUBLIC;

CREATE TABLE streamcube.replica_sets (
    name       text PRIMARY KEY CHECK (name <> ''),
    created_at timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON streamcube.replica_sets FROM PUBLIC;

-- Which replica set consumes which Kafka partition of a cube.
CREATE TABLE streamcube.assignments (
    cube_id     integer NOT NULL REFERENCES streamcube.cubes ON DELETE CASCADE,
    partition   integer NOT NULL CHECK (partition >= 0),
    replica_set text NOT NULL REFERENCES streamcube.replica_sets (name),
    epoch       bigint NOT NULL DEFAULT 0,    -- the reassignment that gave it this replica set
    PRIMARY KEY (cube_id, partition)
);
REVOKE ALL ON streamcube.assignments FROM PUBLIC;

-- Logged restart points: where a receiver starts when no consume position
-- survives (first start, or after a crash emptied the unlogged data).
CREATE TABLE streamcube.checkpoints (
    cube_id   integer NOT NULL REFERENCES streamcube.cubes ON DELETE CASCADE,
    partition integer NOT NULL CHECK (partition >= 0),
    "offset"  bigint NOT NULL CHECK ("offset" >= 0),
    PRIMARY KEY (cube_id, partition)
);
REVOKE ALL ON streamcube.checkpoints FROM PUBLIC;

-- Consume positions: the next offset to read, committed in the same
-- transaction as the rows read before it.  UNLOGGED like the active
-- segments, so crash recovery empties both together.  A position may
-- only be advanced by its owning replica set at its assignment epoch (a
-- compare-and-set on all three): a receiver that lost the partition to a
-- reassignment can never commit a batch of it again.
CREATE UNLOGGED TABLE streamcube.consume_positions (
    cube_id     integer NOT NULL REFERENCES streamcube.cubes ON DELETE CASCADE,
    partition   integer NOT NULL,
    position    bigint NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    replica_set text,                          -- NULL: assigned to no replica set
    epoch       bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (cube_id, partition)
);
REVOKE ALL ON streamcube.consume_positions FROM PUBLIC;

-- One row per time window of a cube.  An ACTIVE window is an UNLOGGED
-- partition of the cube's table.
CREATE TABLE streamcube.segment_catalog (
    cube_id      integer NOT NULL REFERENCES streamcube.cubes ON DELETE CASCADE,
    window_start timestamptz NOT NULL,
    window_end   timestamptz NOT NULL CHECK (window_end > window_start),
    state        text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'sealing', 'sealed')),
    relid        regclass NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    sealed_at    timestamptz,
    PRIMARY KEY (cube_id, window_start)
);
REVOKE ALL ON streamcube.segment_catalog FROM PUBLIC;

-- Messages that could not be ingested, written in the same transaction as
-- the batch they came in.  Readable by whoever may read the cube.
CREATE TABLE streamcube.dead_letters (
    cube_id     integer NOT NULL REFERENCES streamcube.cubes ON DELETE CASCADE,
    cube        regclass NOT NULL,
    partition   integer NOT NULL,
    "offset"    bigint NOT NULL,
    key         bytea,                               -- the message key, NULL when it had none
    payload     bytea,                               -- NULL for a tombstone (a message with a NULL value)
    error       text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (cube_id, partition, "offset")
);
REVOKE ALL ON streamcube.dead_letters FROM PUBLIC;
GRANT SELECT, DELETE ON streamcube.dead_letters TO PUBLIC;
ALTER TABLE streamcube.dead_letters ENABLE ROW LEVEL SECURITY;
CREATE POLICY cube_readers ON streamcube.dead_letters FOR SELECT
    USING (pg_catalog.has_table_privilege(cube, 'SELECT'));
CREATE POLICY cube_owners ON streamcube.dead_letters FOR DELETE
    USING (pg_catalog.has_table_privilege(cube, 'DELETE'));
COMMENT ON TABLE streamcube.dead_letters IS
    'Messages that could not be ingested: payload as received, and why';

-- Operator changes of consume positions, journalled: who, when, from what
-- to what.  Readable by whoever may read the cube.
CREATE TABLE streamcube.position_changes (
    change_id      bigserial PRIMARY KEY,
    cube_id        integer NOT NULL REFERENCES streamcube.cubes ON DELETE CASCADE,
    cube           regclass NOT NULL,
    partition      integer NOT NULL,
    requested      text NOT NULL,                 -- 'earliest', 'latest' or an offset
    old_position   bigint,
    old_checkpoint bigint,
    new_position   bigint NOT NULL,
    changed_by     name NOT NULL,
    changed_at     timestamptz NOT NULL DEFAULT now(),
    reason         text                            -- why the cube was paused, if it was
);
REVOKE ALL ON streamcube.position_changes FROM PUBLIC;
GRANT SELECT ON streamcube.position_changes TO PUBLIC;
ALTER TABLE streamcube.position_changes ENABLE ROW LEVEL SECURITY;
CREATE POLICY cube_readers ON streamcube.position_changes FOR SELECT
    USING (pg_catalog.has_table_privilege(cube, 'SELECT'));
COMMENT ON TABLE streamcube.position_changes IS
    'Journal of streamcube_set_positions(): who moved which consume position, when, from where to where';

-- Changes of clusters and cubes in place (streamcube_alter_cluster,
-- streamcube_alter_cube): who, when, the value before and after.  Secret
-- properties show as ********.  A cube's rows are readable by its readers,
-- a cluster's by admins (who may read streamcube.kafka_clusters).
CREATE TABLE streamcube.config_log (
    log_id      bigserial PRIMARY KEY,
    object_type text NOT NULL CHECK (object_type IN ('cluster', 'cube')),
    cluster     text,                             -- object_type cluster
    cube_id     integer REFERENCES streamcube.cubes ON DELETE CASCADE,
    cube        regclass,                         -- object_type cube
    old_value   jsonb NOT NULL,
    new_value   jsonb NOT NULL,
    changed_by  name NOT NULL,
    changed_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((object_type = 'cluster') = (cluster IS NOT NULL)),
    CHECK ((object_type = 'cube') = (cube_id IS NOT NULL AND cube IS NOT NULL))
);
REVOKE ALL ON streamcube.config_log FROM PUBLIC;
GRANT SELECT ON streamcube.config_log TO PUBLIC;
ALTER TABLE streamcube.config_log ENABLE ROW LEVEL SECURITY;
CREATE POLICY readers ON streamcube.config_log FOR SELECT
    USING (CASE WHEN object_type = 'cube' THEN pg_catalog.has_table_privilege(cube, 'SELECT')
                ELSE pg_catalog.pg_has_role('streamcube_admin', 'USAGE') END);
COMMENT ON TABLE streamcube.config_log IS
    'Journal of streamcube_alter_cluster() and streamcube_alter_cube(): who changed what, when, old and new value (secrets masked)';

CREATE FUNCTION streamcube_alter_cluster(name text, bootstrap_servers text DEFAULT NULL, properties jsonb DEFAULT NULL)
    RETURNS void LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_alter_cluster';
COMMENT ON FUNCTION streamcube_alter_cluster(text, text, jsonb) IS
    'Replace the bootstrap servers and merge properties of a Kafka cluster (a key set to null removes it), checked as at creation; receivers reconnect at their committed positions; journalled in streamcube.config_log';
REVOKE EXECUTE ON FUNCTION streamcube_alter_cluster(text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION streamcube_alter_cluster(text, text, jsonb) TO streamcube_admin;

-- ---------------------------------------------------------------------
-- Cube functions
-- ---------------------------------------------------------------------

CREATE FUNCTION streamcube_create_cube(
        name text, cluster text, topic text, columns text, time_column text,
        segment_interval interval DEFAULT '1 hour',
        format text DEFAULT 'json',
        options jsonb DEFAULT '{}')
    RETURNS regclass LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_create_cube';
COMMENT ON FUNCTION streamcube_create_cube(text, text, text, text, text, interval, text, jsonb) IS
    'Materialise a Kafka topic as a time-partitioned table, consumed exactly once';

CREATE FUNCTION streamcube_drop_cube(name text, keep_data boolean DEFAULT false)
    RETURNS void LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_drop_cube';
COMMENT ON FUNCTION streamcube_drop_cube(text, boolean) IS
    'Stop consuming a cube, forget it, and drop its table unless keep_data';

CREATE FUNCTION streamcube_pause(cube text)
    RETURNS void LANGUAGE C STRICT SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_pause_cube';
COMMENT ON FUNCTION streamcube_pause(text) IS
    'Stop consuming a cube after its current batch; positions are kept';

CREATE FUNCTION streamcube_resume(cube text, skip_bad_message boolean DEFAULT false)
    RETURNS void LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_resume_cube';
COMMENT ON FUNCTION streamcube_resume(text, boolean) IS
    'Resume a paused cube; with skip_bad_message the message that paused it goes to streamcube.dead_letters';

CREATE FUNCTION streamcube_wait(cube text, timeout interval DEFAULT '30 s')
    RETURNS boolean LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_wait_cube';
COMMENT ON FUNCTION streamcube_wait(text, interval) IS
    'Wait until the cube has consumed every message that was in Kafka when called; false on timeout, or at once when the cube is paused or partitions are unassigned';

CREATE FUNCTION streamcube_alter_cube(cube text, options jsonb)
    RETURNS jsonb LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_alter_cube';
COMMENT ON FUNCTION streamcube_alter_cube(text, jsonb) IS
    'Change the options of a running cube that can change safely (a key set to null removes it); journalled in streamcube.config_log';

CREATE FUNCTION streamcube_set_positions(cube text, positions jsonb)
    RETURNS TABLE (partition integer, old_position bigint, new_position bigint)
    LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_set_positions';
COMMENT ON FUNCTION streamcube_set_positions(text, jsonb) IS
    'Set the consume positions of a paused cube: ''"earliest"'', ''"latest"'', or {"partition": offset | "earliest" | "latest"}; journalled in streamcube.position_changes';

REVOKE EXECUTE ON FUNCTION streamcube_create_cube(text, text, text, text, text, interval, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION streamcube_create_cube(text, text, text, text, text, interval, text, jsonb) TO streamcube_admin;
-- drop, pause, resume, wait and set_positions stay executable by PUBLIC:
-- the C code admits the cube's owner, superusers and streamcube_admin
-- (wait: whoever may SELECT the cube), so that owners who are not admins
-- can manage their cubes.

-- ---------------------------------------------------------------------
-- Sealing
-- ---------------------------------------------------------------------

-- Per sealed window and Kafka partition: every message of the window with
-- an offset below this one is in the sealed partition.  A re-read message
-- below it (after a crash) is skipped; a late row appended to the window
-- moves it, in the same transaction.
CREATE TABLE streamcube.sealed_upto (
    cube_id      integer NOT NULL,
    window_start timestamptz NOT NULL,
    partition    integer NOT NULL,
    "offset"     bigint NOT NULL,
    PRIMARY KEY (cube_id, window_start, partition),
    FOREIGN KEY (cube_id, window_start) REFERENCES streamcube.segment_catalog ON DELETE CASCADE
);
REVOKE ALL ON streamcube.sealed_upto FROM PUBLIC;

-- The first offset of each Kafka partition in each active window, written
-- with the rows: a seal moves a partition's checkpoint to the smallest
-- first offset still in an active window.  UNLOGGED like the rows.
CREATE UNLOGGED TABLE streamcube.window_offsets (
    cube_id      integer NOT NULL REFERENCES streamcube.cubes ON DELETE CASCADE,
    window_start timestamptz NOT NULL,
    partition    integer NOT NULL,
    first_offset bigint NOT NULL,
    PRIMARY KEY (cube_id, window_start, partition)
);
REVOKE ALL ON streamcube.window_offsets FROM PUBLIC;

-- Seals, compactions and retention drops, journalled.  Readable by the
-- cube's readers.
CREATE TABLE streamcube.segment_log (
    log_id       bigserial PRIMARY KEY,
    cube_id      integer NOT NULL REFERENCES streamcube.cubes ON DELETE CASCADE,
    cube         regclass NOT NULL,
    window_start timestamptz NOT NULL,
    window_end   timestamptz NOT NULL,
    action       text NOT NULL CHECK (action IN ('sealed', 'compacted', 'dropped')),
    rows         bigint,
    done_by      name NOT NULL,
    done_at      timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON streamcube.segment_log FROM PUBLIC;
GRANT SELECT ON streamcube.segment_log TO PUBLIC;
ALTER TABLE streamcube.segment_log ENABLE ROW LEVEL SECURITY;
CREATE POLICY cube_readers ON streamcube.segment_log FOR SELECT
    USING (pg_catalog.has_table_privilege(cube, 'SELECT'));
COMMENT ON TABLE streamcube.segment_log IS
    'Journal of seals, compactions and retention drops of windows';

-- Tables of dropped cubes with more partitions than one transaction may
-- lock (streamcube_drop_cube): the launcher drops their partitions in steps,
-- each a transaction of its own, then the table, and forgets the row.  A
-- crash loses at most the step in flight.
CREATE TABLE streamcube.pending_drops (
    relid        oid PRIMARY KEY,
    name         text NOT NULL,
    owner        oid NOT NULL,
    requested_by name NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    failed_at    timestamptz,   -- the last step that failed; the next waits a minute
    last_error   text
);
REVOKE ALL ON streamcube.pending_drops FROM PUBLIC;
GRANT SELECT ON streamcube.pending_drops TO streamcube_admin;
COMMENT ON TABLE streamcube.pending_drops IS
    'Tables of dropped cubes that the launcher drops in steps (too many partitions for one transaction)';

CREATE FUNCTION streamcube_seal(cube text, older_than timestamptz DEFAULT NULL)
    RETURNS integer LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_seal';
COMMENT ON FUNCTION streamcube_seal(text, timestamptz) IS
    'Seal every active window of a cube that ends at or before older_than (default: now minus the cube''s grace) into a logged, immutable partition';

CREATE FUNCTION streamcube_seal_due()
    RETURNS integer LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_seal_due';
COMMENT ON FUNCTION streamcube_seal_due() IS
    'Seal the due windows of every cube, merge complete sealed windows into coarser partitions (option compact) and drop partitions past their cube''s retention; what pg_cron runs';

CREATE FUNCTION streamcube_compact(cube text, max_partitions integer DEFAULT 96)
    RETURNS integer LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_compact';
COMMENT ON FUNCTION streamcube_compact(text, integer) IS
    'Merge the complete, sealed windows of a cube into coarser partitions now (option compact), at most max_partitions old partitions per call; returns how many partitions it built';

CREATE FUNCTION streamcube_schedule_sealing(schedule text DEFAULT '* * * * *')
    RETURNS bigint LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_schedule_sealing';
COMMENT ON FUNCTION streamcube_schedule_sealing(text) IS
    'Register (or update) the pg_cron job that runs streamcube_seal_due(); returns its job id';

REVOKE EXECUTE ON FUNCTION streamcube_seal_due() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION streamcube_seal_due() TO streamcube_admin;
REVOKE EXECUTE ON FUNCTION streamcube_schedule_sealing(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION streamcube_schedule_sealing(text) TO streamcube_admin;
-- streamcube_seal and streamcube_compact stay executable by PUBLIC: the C
-- code admits the cube's owner, superusers and streamcube_admin.

-- The trigger that makes a sealed partition immutable to ordinary writes.
CREATE FUNCTION streamcube._sealed_guard() RETURNS trigger
    LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_sealed_guard';

-- ---------------------------------------------------------------------
-- Monitoring
-- ---------------------------------------------------------------------

-- ---------------------------------------------------------------------
-- Replica sets and reassignment
-- ---------------------------------------------------------------------

-- One id per streamcube_reassign() call (and per adoption of partitions
-- added to a topic): the assignment epoch it gives what it moves.
CREATE SEQUENCE streamcube.reassign_ids;
REVOKE ALL ON streamcube.reassign_ids FROM PUBLIC;

-- Journal of reassignments: one row per call and step.  Steps pause,
-- merge and assign are written by the call (or, when it fails, one row
-- with the failing step, written by the launcher since the call's own
-- transaction rolls back); start and retire by the receivers that take
-- and release the partitions after COMMIT.
CREATE TABLE streamcube.reassign_log (
    entry_id       bigserial PRIMARY KEY,
    reassign_id    bigint NOT NULL,
    cube_id        integer NOT NULL REFERENCES streamcube.cubes ON DELETE CASCADE,
    cube           regclass NOT NULL,
    origin         text NOT NULL CHECK (origin IN ('streamcube_reassign', 'new_partitions')),
    step           text NOT NULL CHECK (step IN ('validate', 'pause', 'merge', 'assign', 'start', 'retire')),
    replica_set    text,                   -- pause, start, retire: the receiver's replica set
    partitions     integer[],
    offsets        bigint[],               -- per partition: merged (merge, assign), start, or final (retire)
    role           name NOT NULL,
    started_at     timestamptz NOT NULL,
    finished_at    timestamptz NOT NULL,
    old_assignment jsonb,
    new_assignment jsonb,
    waited_ms      double precision,       -- pause: how long the set's batch in flight held the call
    unconsumed_ms  double precision,       -- start: from the pause to the new owner's fetch
    outcome        text NOT NULL CHECK (outcome IN ('ok', 'noop', 'failed')),
    error          text
);
CREATE INDEX ON streamcube.reassign_log (cube_id, reassign_id);
REVOKE ALL ON streamcube.reassign_log FROM PUBLIC;
GRANT SELECT ON streamcube.reassign_log TO PUBLIC;
ALTER TABLE streamcube.reassign_log ENABLE ROW LEVEL SECURITY;
CREATE POLICY cube_readers ON streamcube.reassign_log FOR SELECT
    USING (pg_catalog.has_table_privilege(cube, 'SELECT'));
COMMENT ON TABLE streamcube.reassign_log IS
    'Journal of reassignments: one row per call and step (validate, pause, merge, assign, start, retire) with who, when, old and new assignment, offsets, waits and outcome';

CREATE FUNCTION streamcube_create_replica_set(name text)
    RETURNS void LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_create_replica_set';
COMMENT ON FUNCTION streamcube_create_replica_set(text) IS
    'Create a replica set: a name that partitions of cubes can be assigned to, consumed by one receiver per cube';

CREATE FUNCTION streamcube_drop_replica_set(name text)
    RETURNS void LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_drop_replica_set';
COMMENT ON FUNCTION streamcube_drop_replica_set(text) IS
    'Drop a replica set that no cube has partitions assigned to';

CREATE FUNCTION streamcube_reassign(cube text, assignment jsonb, options jsonb DEFAULT '{}')
    RETURNS jsonb LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_reassign';
COMMENT ON FUNCTION streamcube_reassign(text, jsonb, jsonb) IS
    'Move Kafka partitions of a cube between replica sets while ingest goes on: {"rs_a": [0,1], "rs_b": [2,3]}; options timeout, allow_partial; journalled in streamcube.reassign_log';

REVOKE EXECUTE ON FUNCTION streamcube_create_replica_set(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamcube_drop_replica_set(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION streamcube_create_replica_set(text) TO streamcube_admin;
GRANT EXECUTE ON FUNCTION streamcube_drop_replica_set(text) TO streamcube_admin;
-- streamcube_reassign stays executable by PUBLIC: the C code admits the
-- cube's owner, superusers and streamcube_admin.

-- Rows only for the cubes the caller may SELECT: errors quote message
-- contents.
CREATE FUNCTION streamcube._receivers(
        OUT pid integer, OUT cube_id integer, OUT replica_set text, OUT state text,
        OUT partitions integer[], OUT positions bigint[], OUT high_watermarks bigint[],
        OUT lag bigint, OUT rows_per_second double precision, OUT rows_total bigint,
        OUT started_at timestamptz, OUT last_batch_at timestamptz,
        OUT last_error text, OUT last_error_at timestamptz,
        OUT topic_partitions integer, OUT tombstones_skipped bigint,
        OUT epoch bigint)
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
             ORDER BY u.i) AS checkpoints
FROM streamcube._receivers() r
JOIN streamcube.cubes c USING (cube_id)
WHERE pg_catalog.has_table_privilege(c.relid, 'SELECT');
GRANT SELECT ON streamcube.consumers TO PUBLIC;
COMMENT ON VIEW streamcube.consumers IS
    'One row per receiver: state, partitions, positions, Kafka end offsets, lag, throughput, last error, unassigned partitions';

-- Per partition of the cube's topic, from Kafka and the catalog now.
CREATE FUNCTION streamcube.lag(cube text)
    RETURNS TABLE (partition integer, replica_set text, "position" bigint,
                   checkpoint bigint, high_watermark bigint,
                   last_stable_offset bigint, lag bigint,
                   last_batch_at timestamptz, since_last_batch interval)
    LANGUAGE C STRICT SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_cube_lag';
COMMENT ON FUNCTION streamcube.lag(text) IS
    'Per Kafka partition of a cube: replica set, committed position, checkpoint, high watermark, last stable offset, lag in messages, when the position last moved; asks Kafka';
-- The C code shows a cube only to those who may SELECT it.
GRANT EXECUTE ON FUNCTION streamcube.lag(text) TO PUBLIC;

-- Exact row count of a window, counted in C by a plain heap scan: only a
-- plain table that is still a partition of its cube is counted, so no
-- rule, view or function a cube owner controls runs for the reader.  NULL
-- when the reader may not SELECT it or row-level security applies.
CREATE FUNCTION streamcube._segment_rows(cube regclass, segment regclass) RETURNS bigint
    LANGUAGE C STRICT STABLE SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_segment_rows';

-- One row per partition of a cube: a window, or after compaction the
-- coarser partition that holds many.
CREATE VIEW streamcube.segments AS
SELECT c.relid::regclass AS cube,
       min(s.window_start) AS window_start,
       max(s.window_end) AS window_end,
       CASE WHEN count(*) > 1 THEN 'compacted'
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
GRANT SELECT ON streamcube.segments TO PUBLIC;
COMMENT ON VIEW streamcube.segments IS
    'One row per partition of each cube: its range, state (active, sealing, sealed or compacted), exact row count, size, when it was sealed, its sealed_upto offsets and how many windows it holds';

-- ---------------------------------------------------------------------
-- DROP TABLE of a cube (or of one of its windows) forgets it in the
-- catalog, as streamcube_drop_cube() would; the launcher then stops its
-- receivers.  ALTER TABLE ... DROP COLUMN fires sql_drop too, with
-- objsubid set to the column: that forgets nothing.
-- ---------------------------------------------------------------------
CREATE FUNCTION streamcube._wake_launcher() RETURNS void
    LANGUAGE C STRICT SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_wake_launcher';
REVOKE EXECUTE ON FUNCTION streamcube._wake_launcher() FROM PUBLIC;

CREATE FUNCTION streamcube._on_sql_drop() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    forgotten integer;
BEGIN
    DELETE FROM streamcube.segment_catalog s
    USING pg_event_trigger_dropped_objects() d
    WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = s.relid::oid;

    DELETE FROM streamcube.cubes c
    USING pg_event_trigger_dropped_objects() d
    WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = c.relid::oid;
    GET DIAGNOSTICS forgotten = ROW_COUNT;
    IF forgotten > 0 THEN
        PERFORM streamcube._wake_launcher();
    END IF;
END
$$;
REVOKE EXECUTE ON FUNCTION streamcube._on_sql_drop() FROM PUBLIC;
CREATE EVENT TRIGGER streamcube_sql_drop ON sql_drop
    EXECUTE FUNCTION streamcube._on_sql_drop();

-- ---------------------------------------------------------------------
-- pg_dump: catalogs are extension configuration, dumped with their rows.
-- Tables are referenced as regclass, so a restore maps them by name (the
-- owner of a cube is the owner of its table).  Rows, consume positions and dead letters come from
-- one pg_dump snapshot; restored in one transaction, a cube resumes
-- exactly once (docs/operations.md).
-- ---------------------------------------------------------------------
SELECT pg_catalog.pg_extension_config_dump('streamcube.clusters', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.cubes', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.cubes_cube_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.replica_sets', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.assignments', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.checkpoints', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.consume_positions', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.segment_catalog', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.dead_letters', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.position_changes', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.position_changes_change_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.sealed_upto', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.window_offsets', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.segment_log', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.segment_log_log_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.reassign_log', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.reassign_log_entry_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.reassign_ids', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.config_log', '');
SELECT pg_catalog.pg_extension_config_dump('streamcube.config_log_log_id_seq', '');

-- =====================================================================
-- What 0.3.0 adds (sql/streamcube--0.2.0--0.3.0.sql)
-- =====================================================================

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

-- =====================================================================
-- What 0.4.0 adds (sql/streamcube--0.3.0--0.4.0.sql)
-- =====================================================================

ALTER TABLE streamcube.rollup_catalog ADD COLUMN merged_view regclass;
-- A dimension may be an expression of the cube's columns ('lower(country)
-- AS country_lc'): dimensions holds its name, this its expression (NULL
-- for a column; NULL as a whole when every dimension is a column).
ALTER TABLE streamcube.rollup_catalog ADD COLUMN dimension_exprs text[];

-- A view <roll-up>_merged dropped by hand is forgotten, as <x>_sealed is.
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

    UPDATE streamcube.rollup_catalog r SET merged_view = NULL
    FROM pg_event_trigger_dropped_objects() d
    WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = r.merged_view::oid;

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

CREATE OR REPLACE VIEW streamcube.rollups AS
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
       r.created_at,
       r.merged_view,
       r.dimension_exprs
FROM streamcube.rollup_catalog r
JOIN streamcube.cubes c USING (cube_id)
CROSS JOIN LATERAL streamcube._rollup_stats(r.relid) st
CROSS JOIN LATERAL (
    SELECT pg_catalog.sum(streamcube._segment_rows(c.relid, i.inhrelid))::bigint AS rows
    FROM pg_catalog.pg_inherits i WHERE i.inhparent = c.relid) cs
WHERE pg_catalog.has_table_privilege(c.relid, 'SELECT');
COMMENT ON VIEW streamcube.rollups IS
    'Roll-ups of the cubes the caller may read: granularity, dimensions, measures, retention, windows held, rows (partial rows in active windows) and buckets (counted; NULL without SELECT on the roll-up), bytes, the cube''s rows and how many of them one roll-up row stands for, the view of its sealed partitions for standbys, the view that merges it to one row per bucket and dimensions, the expressions of its expression dimensions';

COMMENT ON FUNCTION streamcube_create_rollup(text, text, interval, text[], jsonb, jsonb) IS
    'Create a roll-up of a cube: a table of rows per bucket of granularity and dimensions (partial rows while a window is active, one per group once sealed), with one column per measure ({"name": "count(*)" | "count(c)" | "sum(c)" | "min(c)" | "max(c)" | "avg(c)" | "hll(c)" | "tdigest(c)"}, each with an optional FILTER (WHERE ...)), dimensions columns or "<expression> AS <name>", and its view <name>_merged of one row per group; filled from the rows the cube holds and kept by its receivers in the same transaction as the rows; option retention';

-- The roll-ups a 0.3.0 catalog holds: the key to their sealed partitions,
-- a view <roll-up>_merged each (src/rollup_sql.c, sc_rollups_to_0_4).
CREATE FUNCTION streamcube._rollups_to_0_4() RETURNS void
    LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_rollups_to_0_4';
SELECT streamcube._rollups_to_0_4();
DROP FUNCTION streamcube._rollups_to_0_4();

-- ---------------------------------------------------------------------
-- 0.4.0: several topics in one cube.  A cube reads a topic, a list of
-- topics or the topics a pattern matches; streamcube.cube_topics numbers
-- them (src/kafka.h, "source partition"): the catalog keys a partition of
-- topic n as n * 2^20 + partition, so a cube's first topic is topic 0 and
-- the catalog of a cube of one topic is what it was.  A number is never
-- reused for another topic.  cubes.topic keeps what the cube was created
-- with: a topic name, or the JSON of a list or a pattern.
-- ---------------------------------------------------------------------
CREATE TABLE streamcube.cube_topics (
    cube_id  integer NOT NULL REFERENCES streamcube.cubes ON DELETE CASCADE,
    topic_no integer NOT NULL CHECK (topic_no >= 0 AND topic_no < 2048),
    topic    text NOT NULL,
    added_at timestamptz NOT NULL DEFAULT now(),
    added_by text NOT NULL CHECK (added_by IN ('create', 'pattern', 'alter')),
    removed_at timestamptz,   -- taken out by streamcube_alter_cube (NULL: read)
    PRIMARY KEY (cube_id, topic_no),
    UNIQUE (cube_id, topic)
);
REVOKE ALL ON streamcube.cube_topics FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('streamcube.cube_topics', '');
INSERT INTO streamcube.cube_topics (cube_id, topic_no, topic, added_at, added_by)
SELECT cube_id, 0, topic, created_at, 'create' FROM streamcube.cubes;

CREATE VIEW streamcube.topics AS
SELECT c.relid::regclass AS cube,
       t.topic,
       t.topic_no,              -- the topic's number in the cube (partition keys of the catalog)
       t.added_at,
       t.added_by,              -- create: named when the cube was made; pattern: matched later;
                                -- alter: named by streamcube_alter_cube
       CASE WHEN c.topic LIKE '{%' THEN (c.topic::jsonb) ->> 'pattern' END AS pattern,
       t.removed_at             -- taken out of the cube (its partitions assigned to no set); NULL: read
FROM streamcube.cube_topics t
JOIN streamcube.cubes c USING (cube_id)
WHERE pg_catalog.has_table_privilege(c.relid, 'SELECT');
GRANT SELECT ON streamcube.topics TO PUBLIC;
COMMENT ON VIEW streamcube.topics IS
    'The Kafka topics of each cube the caller may read: when and how each was added (with the cube, matched by its pattern later, or by streamcube_alter_cube), and when it was taken out';

-- A bad message's partition of a cube of several topics is "topic:partition".
CREATE OR REPLACE VIEW streamcube.cube_status AS
SELECT c.relid::regclass AS cube,
       c.paused,
       CASE WHEN c.paused THEN coalesce(c.paused_reason,
            'paused by a bad message at partition ' || bad.name || ' offset ' || c.bad_offset,
            'paused by streamcube_pause()') END AS paused_reason,
       c.stop_requested,
       c.stop_reached_at,
       b.windows_to_seal,
       b.partitions_to_compact,
       b.partitions_to_drop
FROM streamcube.cubes c
JOIN streamcube._maintenance_backlog() b ON b.cube = c.relid
CROSS JOIN LATERAL (
    SELECT CASE WHEN c.bad_partition < 1048576 AND c.topic NOT LIKE '[%' AND c.topic NOT LIKE '{%'
                THEN c.bad_partition::text
                ELSE (SELECT t.topic FROM streamcube.cube_topics t
                      WHERE t.cube_id = c.cube_id AND t.topic_no = c.bad_partition >> 20)
                     || ':' || (c.bad_partition & 1048575) END AS name) bad
WHERE pg_catalog.has_table_privilege(c.relid, 'SELECT');

-- A stop point says each partition's topic.
CREATE OR REPLACE VIEW streamcube.stops AS
SELECT c.relid AS cube,
       s.partition & 1048575 AS partition,
       s.requested,
       s.stop_offset,
       c.stop_reached_at,
       c.stop_requested,
       t.topic
FROM streamcube.cubes c
JOIN streamcube.stop_offsets s USING (cube_id)
LEFT JOIN streamcube.cube_topics t ON t.cube_id = c.cube_id AND t.topic_no = s.partition >> 20
WHERE c.stop_requested IS NOT NULL
  AND pg_catalog.has_table_privilege(c.relid, 'SELECT');

-- streamcube_alter_cube changes the topics of a cube of several topics,
-- journalled as a reassignment of their partitions.
ALTER TABLE streamcube.reassign_log DROP CONSTRAINT reassign_log_origin_check,
    ADD CONSTRAINT reassign_log_origin_check
        CHECK (origin IN ('streamcube_reassign', 'new_partitions', 'streamcube_alter_cube',
                          'streamcube_place', 'streamcube_adopt'));

-- A dead letter says its topic; partition is the topic's partition.
ALTER TABLE streamcube.dead_letters ADD COLUMN topic text;
UPDATE streamcube.dead_letters d SET topic = c.topic FROM streamcube.cubes c WHERE c.cube_id = d.cube_id;
ALTER TABLE streamcube.dead_letters ALTER COLUMN topic SET NOT NULL,
    DROP CONSTRAINT dead_letters_cube_id_partition_offset_key,
    ADD CONSTRAINT dead_letters_cube_id_topic_partition_offset_key UNIQUE (cube_id, topic, partition, "offset");

-- The journals name a partition as a user does: its topic, and its
-- partition in that topic (the rows from before are of the cube's one topic).
ALTER TABLE streamcube.position_changes ADD COLUMN topic text;
UPDATE streamcube.position_changes j SET topic = c.topic FROM streamcube.cubes c WHERE c.cube_id = j.cube_id;
ALTER TABLE streamcube.position_changes ALTER COLUMN topic SET NOT NULL;
ALTER TABLE streamcube.reassign_log ADD COLUMN topics text[];   -- the topic of each of partitions
UPDATE streamcube.reassign_log l SET topics = pg_catalog.array_fill(c.topic, ARRAY[pg_catalog.cardinality(l.partitions)])
FROM streamcube.cubes c WHERE c.cube_id = l.cube_id AND l.partitions IS NOT NULL;

-- streamcube.segments' sealed_upto names the partitions of a cube of
-- several topics "topic:partition".
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
       (SELECT pg_catalog.jsonb_object_agg(
                   CASE WHEN u.partition < 1048576 AND c.topic NOT LIKE '[%' AND c.topic NOT LIKE '{%'
                        THEN u.partition::text
                        ELSE (SELECT t.topic FROM streamcube.cube_topics t
                              WHERE t.cube_id = c.cube_id AND t.topic_no = u.partition >> 20)
                             || ':' || (u.partition & 1048575) END,
                   u."offset")
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
-- 0.4.0: streamcube.consumers tells the truth in an outage.  State
-- disconnected while Kafka does not answer (lag_seconds then counts at
-- least from its last answer), pausing between streamcube_pause() and
-- the receiver's pause; paused_reason says why a cube is paused (a stop
-- point is no error); an error the receiver got over moves from
-- last_error to previous_error.
-- ---------------------------------------------------------------------
DROP VIEW streamcube.consumers;
DROP VIEW streamcube.consumer_partitions;
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
        OUT batches bigint, OUT disconnected_since timestamptz,
        OUT last_contact_at timestamptz, OUT previous_error text,
        OUT previous_error_at timestamptz, OUT topic_partition_counts integer[])
    RETURNS SETOF record LANGUAGE C STRICT SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_receivers';

-- Replica sets placed on nodes (issue 47; placement.c writes it): the
-- partitions a set of this server handed over to a node and the positions
-- it stopped at, where the node starts; state moving until the node adopted
-- them, then placed.
CREATE TABLE streamcube.placement_catalog (
    cube_id     integer NOT NULL REFERENCES streamcube.cubes ON DELETE CASCADE,
    replica_set text NOT NULL REFERENCES streamcube.replica_sets (name),
    node        text NOT NULL,         -- a node of streamcube.node_catalog (its foreign key: below)
    placed_by   regrole NOT NULL,      -- the role whose user mapping reaches the node (by name in a dump)
    epoch       bigint NOT NULL,       -- the reassignment that handed the partitions over
    partitions  integer[] NOT NULL,
    positions   bigint[] NOT NULL,     -- per partition, where the node starts
    state       text NOT NULL CHECK (state IN ('moving', 'placed')),
    attempts    integer NOT NULL DEFAULT 0,
    last_error  text,
    tried_at    timestamptz,
    placed_at   timestamptz NOT NULL DEFAULT now(),
    adopted_at  timestamptz,
    all_view    regclass,              -- the view <cube>_all placement made (the same in each row of the cube)
    foreign_table regclass,            -- the foreign table of the node's rows it made (<cube>_at_<node>)
    PRIMARY KEY (cube_id, replica_set)
);
REVOKE ALL ON streamcube.placement_catalog FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('streamcube.placement_catalog', '');

CREATE VIEW streamcube.consumers AS
SELECT r.pid,
       c.relid::regclass AS cube,
       r.replica_set,
       r.epoch,                -- the assignment epoch the receiver runs at
       -- pausing: paused in the catalog, the receiver not yet (a second);
       -- disconnected: Kafka does not answer it
       CASE WHEN c.paused AND r.state IN ('running', 'disconnected') THEN 'pausing'
            ELSE r.state END AS state,
       ARRAY(SELECT u.p & 1048575 FROM unnest(r.partitions) WITH ORDINALITY AS u(p, i)
             ORDER BY u.i) AS partitions,
       r.positions,
       r.high_watermarks,
       r.lag,
       -- how long the oldest message not consumed has waited, in seconds
       -- (its Kafka timestamp, bounded by the server's clock: see
       -- docs/operations.md); 0 when caught up; NULL when not known
       round(r.lag_seconds::numeric, 3) AS lag_seconds,
       round(r.rows_per_second::numeric, 1) AS rows_per_second,
       r.rows_total,
       r.started_at,
       r.last_batch_at,
       CASE WHEN c.paused AND c.bad_error IS NOT NULL
            THEN format('paused by bad message at partition %s offset %s: %s',
                        bad.name, c.bad_offset, c.bad_error)
            WHEN c.paused AND c.paused_reason IS NOT NULL AND c.stop_reached_at IS NULL
            THEN c.paused_reason
            ELSE r.last_error END AS last_error,
       r.last_error_at,
       -- partitions of the cube's topics that no replica set of the cube
       -- consumes (their topics: unassigned_topics)
       un.partitions AS unassigned_partitions,
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
       r.batches,
       -- why the cube is paused: a stop point, a bad message, Kafka lost
       -- what it needs, or a user; NULL while it is not (as streamcube.cube_status)
       CASE WHEN c.paused
            THEN coalesce(c.paused_reason,
                          'paused by a bad message at partition ' || bad.name || ' offset ' || c.bad_offset,
                          'paused by streamcube_pause()') END AS paused_reason,
       r.disconnected_since,   -- Kafka stopped answering; NULL while it answers
       r.last_contact_at,      -- Kafka's last answer (a fetch, a probe)
       r.previous_error,       -- an error the receiver got over, and when
       r.previous_error_at,
       -- the topic of each of partitions
       ARRAY(SELECT t.topic FROM unnest(r.partitions) WITH ORDINALITY AS u(p, i)
             LEFT JOIN streamcube.cube_topics t ON t.cube_id = c.cube_id AND t.topic_no = u.p >> 20
             ORDER BY u.i) AS topics,
       un.topics AS unassigned_topics
FROM streamcube._receivers() r
JOIN streamcube.cubes c USING (cube_id)
-- the partitions of each topic the cube reads, as many as the receiver
-- last saw in Kafka, that are assigned to no replica set (NULL while a
-- topic's count is not known)
CROSS JOIN LATERAL (
    SELECT CASE WHEN r.topic_partition_counts IS NOT NULL AND -1 <> ALL (r.topic_partition_counts)
                THEN coalesce(array_agg(p.p ORDER BY t.topic_no, p.p), '{}') END AS partitions,
           CASE WHEN r.topic_partition_counts IS NOT NULL AND -1 <> ALL (r.topic_partition_counts)
                THEN coalesce(array_agg(t.topic ORDER BY t.topic_no, p.p), '{}') END AS topics
    FROM unnest(r.topic_partition_counts) WITH ORDINALITY AS n(partitions, topic_no1)
    JOIN streamcube.cube_topics t ON t.cube_id = c.cube_id AND t.topic_no = n.topic_no1 - 1
                                 AND t.removed_at IS NULL
    CROSS JOIN generate_series(0, n.partitions - 1) AS p(p)
    WHERE NOT EXISTS (SELECT 1 FROM streamcube.assignments a
                      WHERE a.cube_id = c.cube_id AND a.partition = (t.topic_no << 20) | p.p)) un
CROSS JOIN LATERAL (
    SELECT CASE WHEN c.bad_partition < 1048576 AND c.topic NOT LIKE '[%' AND c.topic NOT LIKE '{%'
                THEN c.bad_partition::text
                ELSE (SELECT t.topic FROM streamcube.cube_topics t
                      WHERE t.cube_id = c.cube_id AND t.topic_no = c.bad_partition >> 20)
                     || ':' || (c.bad_partition & 1048575) END AS name) bad
WHERE pg_catalog.has_table_privilege(c.relid, 'SELECT')
UNION ALL
-- (cube, replica set) pairs with partitions and no receiver slot: the
-- launcher has not started them yet, every slot is taken, or this is a
-- standby (state standby)
SELECT NULL::integer,
       c.relid::regclass,
       w.replica_set,
       NULL::bigint,
       CASE WHEN pg_catalog.pg_is_in_recovery() THEN 'standby'
            WHEN pl.state = 'placed' THEN 'placed'
            ELSE 'waiting' END,
       ARRAY(SELECT u.p & 1048575 FROM unnest(w.partitions) WITH ORDINALITY AS u(p, i) ORDER BY u.i),
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
            WHEN pl.state = 'placed'
            THEN 'runs on a node (streamcube.placements names it): a receiver runs here only to read its partitions again up to where the node started them, after a crash'
            WHEN pl.state = 'moving'
            THEN format('being placed on a node (streamcube.placements says how far): the node has not adopted its partitions yet%s',
                        CASE WHEN pl.attempts > 0 THEN format(', %s tries failed', pl.attempts) ELSE '' END)
            ELSE 'waiting for the launcher to start its receiver' END,
       NULL::timestamptz,
       NULL::integer[],
       NULL::bigint,
       ARRAY(SELECT k."offset" FROM unnest(w.partitions) WITH ORDINALITY AS u(part, i)
             JOIN streamcube.checkpoints k ON k.cube_id = c.cube_id AND k.partition = u.part
             ORDER BY u.i),
       NULL::bigint,
       NULL::bigint,
       NULL::bigint,
       CASE WHEN c.paused
            THEN coalesce(c.paused_reason,
                          'paused by a bad message at partition ' || bad.name || ' offset ' || c.bad_offset,
                          'paused by streamcube_pause()') END,
       NULL::timestamptz,
       NULL::timestamptz,
       NULL::text,
       NULL::timestamptz,
       ARRAY(SELECT t.topic FROM unnest(w.partitions) WITH ORDINALITY AS u(p, i)
             LEFT JOIN streamcube.cube_topics t ON t.cube_id = c.cube_id AND t.topic_no = u.p >> 20
             ORDER BY u.i),
       NULL::text[]
FROM (SELECT a.cube_id, a.replica_set, array_agg(a.partition ORDER BY a.partition) AS partitions
      FROM streamcube.assignments a GROUP BY 1, 2) w
JOIN streamcube.cubes c USING (cube_id)
CROSS JOIN LATERAL (
    SELECT CASE WHEN c.bad_partition < 1048576 AND c.topic NOT LIKE '[%' AND c.topic NOT LIKE '{%'
                THEN c.bad_partition::text
                ELSE (SELECT t.topic FROM streamcube.cube_topics t
                      WHERE t.cube_id = c.cube_id AND t.topic_no = c.bad_partition >> 20)
                     || ':' || (c.bad_partition & 1048575) END AS name) bad
CROSS JOIN streamcube._receiver_slots() s
-- a set placed on a node: no receiver runs for it here, but after a crash
-- to read its partitions again up to where the node started them (the view
-- reads no UNLOGGED catalog: it works on a standby)
LEFT JOIN LATERAL (
    SELECT x.state, x.attempts FROM streamcube.placement_catalog x
    WHERE x.cube_id = w.cube_id AND x.replica_set = w.replica_set) pl ON true
WHERE pg_catalog.has_table_privilege(c.relid, 'SELECT')
  AND NOT EXISTS (SELECT 1 FROM streamcube._receivers() r
                  WHERE r.cube_id = w.cube_id AND r.replica_set = w.replica_set);
COMMENT ON VIEW streamcube.consumers IS
    'One row per receiver of a cube and replica set (state waiting: none runs yet, and why): state (running, disconnected, pausing, paused, ...), partitions and their topics, positions, Kafka end offsets, lag in messages and seconds, throughput, last error and the one before, why the cube is paused, unassigned partitions';
GRANT SELECT ON streamcube.consumers TO PUBLIC;

CREATE VIEW streamcube.consumer_partitions AS
SELECT c.relid::regclass AS cube,
       r.replica_set,
       r.state,
       u.source & 1048575 AS partition,
       u.position,
       nullif(u.high_watermark, -1) AS high_watermark,
       CASE WHEN u.high_watermark >= 0 THEN greatest(u.high_watermark - u.position, 0) END AS lag,
       round(u.lag_seconds::numeric, 3) AS lag_seconds,
       r.last_batch_at,
       t.topic
FROM streamcube._receivers() r
JOIN streamcube.cubes c USING (cube_id)
CROSS JOIN LATERAL unnest(r.partitions, r.positions, r.high_watermarks, r.partition_lag_seconds)
     AS u(source, position, high_watermark, lag_seconds)
LEFT JOIN streamcube.cube_topics t ON t.cube_id = c.cube_id AND t.topic_no = u.source >> 20
WHERE pg_catalog.has_table_privilege(c.relid, 'SELECT');
GRANT SELECT ON streamcube.consumer_partitions TO PUBLIC;
COMMENT ON VIEW streamcube.consumer_partitions IS
    'One row per Kafka partition a running receiver consumes, with its topic: position, end, lag in messages and in seconds (Kafka timestamps, bounded by the server''s clock)';

-- ---------------------------------------------------------------------
-- 0.4.0: streamcube_set_positions says what a move forward skips (column
-- skipped, and a NOTICE); a lookup by time the cluster cannot answer is
-- an error, not a move to the end
-- ---------------------------------------------------------------------
DROP FUNCTION streamcube_set_positions(text, jsonb);
CREATE FUNCTION streamcube_set_positions(cube text, positions jsonb)
    RETURNS TABLE (partition integer, old_position bigint, new_position bigint, skipped bigint,
                   topic text)
    LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_set_positions';
COMMENT ON FUNCTION streamcube_set_positions(text, jsonb) IS
    'Set the consume positions of a paused cube: ''"earliest"'', ''"latest"'', {"timestamp": T} (each partition''s first message stamped at or after T), or {"partition": offset | "earliest" | "latest" | {"timestamp": T}} (a partition of a cube of several topics: "topic:partition"); journalled in streamcube.position_changes; skipped: the offsets a move forward leaves unread (a NOTICE says it)';

-- streamcube.lag() says each partition's topic.
DROP FUNCTION streamcube.lag(text);
CREATE FUNCTION streamcube.lag(cube text)
    RETURNS TABLE (partition integer, replica_set text, "position" bigint,
                   checkpoint bigint, high_watermark bigint,
                   last_stable_offset bigint, lag bigint,
                   last_batch_at timestamptz, since_last_batch interval,
                   oldest_unconsumed_at timestamptz, lag_seconds double precision,
                   topic text)
    LANGUAGE C STRICT SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_cube_lag';
COMMENT ON FUNCTION streamcube.lag(text) IS
    'Per Kafka partition of a cube''s topics: replica set (NULL: unassigned), committed position, checkpoint, high watermark, last stable offset, lag in messages, when the position last moved, the oldest message not consumed and its wait in seconds, the topic; asks Kafka';
GRANT EXECUTE ON FUNCTION streamcube.lag(text) TO PUBLIC;

-- ---------------------------------------------------------------------
-- 0.4.0: one place that says how a cube is doing
-- ---------------------------------------------------------------------
CREATE VIEW streamcube.health AS
WITH r AS (
    SELECT n.*,
           -- a running receiver with messages waiting and no batch for a
           -- minute does not move: stalled
           CASE WHEN n.state = 'running' AND n.lag > 0
                 AND coalesce(n.last_batch_at, n.started_at) < pg_catalog.now() - interval '60 s'
                THEN 'stalled' ELSE n.state END AS health
    FROM streamcube.consumers n)
SELECT s.cube,
       -- the worst of its receivers' states, in this order
       CASE WHEN pg_catalog.count(r.cube) = 0 THEN 'no partitions'
            ELSE (ARRAY['failed', 'disconnected', 'stalled', 'pausing', 'paused', 'waiting',
                        'standby', 'starting', 'stopping', 'stopped', 'running', 'placed'])[
                  pg_catalog.min(coalesce(pg_catalog.array_position(
                      ARRAY['failed', 'disconnected', 'stalled', 'pausing', 'paused', 'waiting',
                            'standby', 'starting', 'stopping', 'stopped', 'running', 'placed'], r.health), 1))]
       END AS state,
       pg_catalog.count(r.cube)::integer AS receivers,
       CASE WHEN pg_catalog.bool_and(r.lag IS NOT NULL) THEN pg_catalog.sum(r.lag)::bigint END AS lag,
       pg_catalog.max(r.lag_seconds) AS lag_seconds,
       pg_catalog.round(coalesce(pg_catalog.sum(r.rows_per_second), 0), 1) AS rows_per_second,
       -- at the current rate; 0 when caught up, NULL while nothing moves
       CASE WHEN pg_catalog.bool_and(r.lag IS NOT NULL) AND pg_catalog.sum(r.lag) = 0 THEN interval '0'
            WHEN pg_catalog.bool_and(r.lag IS NOT NULL) AND pg_catalog.sum(r.rows_per_second) > 0
                 AND NOT s.paused
            THEN pg_catalog.make_interval(secs => pg_catalog.round(
                     pg_catalog.sum(r.lag) / pg_catalog.sum(r.rows_per_second))::double precision)
       END AS catch_up_eta,
       -- since when it is disconnected, stalled or failed; NULL while healthy
       least(pg_catalog.min(r.disconnected_since),
             pg_catalog.min(coalesce(r.last_batch_at, r.started_at)) FILTER (WHERE r.health = 'stalled'),
             pg_catalog.min(r.last_error_at) FILTER (WHERE r.health = 'failed')) AS unhealthy_since,
       (SELECT pg_catalog.count(*) FROM streamcube.dead_letters d
        WHERE d.cube = s.cube AND d.recorded_at > pg_catalog.now() - interval '1 hour') AS dead_letters_last_hour,
       s.windows_to_seal,
       s.partitions_to_compact,
       s.paused_reason,
       (pg_catalog.array_agg(r.last_error ORDER BY r.last_error_at DESC NULLS LAST)
            FILTER (WHERE r.last_error IS NOT NULL AND r.health <> 'placed'))[1] AS last_error
FROM streamcube.cube_status s
LEFT JOIN r ON r.cube = s.cube
GROUP BY s.cube, s.paused, s.windows_to_seal, s.partitions_to_compact, s.paused_reason;
COMMENT ON VIEW streamcube.health IS
    'One row per cube the caller may read: the worst state of its receivers (failed, disconnected, stalled, pausing, paused, waiting, ... running), lag in messages and seconds, rows per second, time to catch up at that rate, since when it is unhealthy, dead letters of the last hour, windows due to seal, why it is paused, its latest error';
GRANT SELECT ON streamcube.health TO PUBLIC;

-- ---------------------------------------------------------------------
-- 0.4.0: progress of long work, as pg_stat_progress_* show theirs
-- ---------------------------------------------------------------------
CREATE FUNCTION streamcube._progress(
        OUT pid integer, OUT cube regclass, OUT target text, OUT command text,
        OUT phase text, OUT done bigint, OUT total bigint, OUT unit text,
        OUT started_at timestamptz, OUT phase_started_at timestamptz)
    RETURNS SETOF record LANGUAGE C STRICT SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_progress';
CREATE VIEW streamcube.progress AS
SELECT p.pid,
       p.cube,
       p.target,                -- the roll-up being filled (its name); NULL for a seal or a compaction
       p.command,               -- fill roll-up, seal, compact
       p.phase,
       p.done,
       p.total,                 -- NULL while not known (the rows of active windows)
       p.unit,                  -- what done and total count: partitions, rows
       CASE WHEN p.total > 0 THEN pg_catalog.round(100.0 * p.done / p.total, 1) END AS percent,
       p.started_at,
       p.phase_started_at
FROM streamcube._progress() p;
COMMENT ON VIEW streamcube.progress IS
    'Long work under way on the cubes the caller may read, one row per backend at it: a roll-up filled from the rows a cube holds, a seal, a compaction; its phase, done out of total, since when';
GRANT SELECT ON streamcube.progress TO PUBLIC;


-- ---------------------------------------------------------------------
-- Nodes (issue 47): other PostgreSQL servers running streamcube, each a
-- foreign server of postgres_fdw with the user mappings PostgreSQL keeps.
-- Only the server's name is stored here, never a credential.
-- ---------------------------------------------------------------------
CREATE TABLE streamcube.node_catalog (
    name              text PRIMARY KEY CHECK (name <> ''),
    server            text NOT NULL,        -- the foreign server (pg_foreign_server.srvname)
    version           text NOT NULL,        -- the node's streamcube when it was added
    system_identifier text,                 -- the node's (pg_control_system())
    added_by          name NOT NULL,
    added_at          timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON streamcube.node_catalog FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('streamcube.node_catalog', '');

CREATE VIEW streamcube.nodes AS
SELECT n.name,
       n.server,
       s.oid IS NOT NULL AS server_exists,   -- false once the foreign server was dropped
       n.version,
       n.system_identifier,
       n.added_by,
       n.added_at
FROM streamcube.node_catalog n
LEFT JOIN pg_catalog.pg_foreign_server s ON s.srvname = n.server;
REVOKE ALL ON streamcube.nodes FROM PUBLIC;
GRANT SELECT ON streamcube.nodes TO streamcube_admin;
COMMENT ON VIEW streamcube.nodes IS
    'Nodes: other PostgreSQL servers running streamcube, each named by a foreign server of postgres_fdw; its streamcube version and system identifier when it was added';

CREATE FUNCTION streamcube_add_node(name text, server text)
    RETURNS void LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_add_node';
COMMENT ON FUNCTION streamcube_add_node(text, text) IS
    'Name another PostgreSQL server a node: server is a foreign server of postgres_fdw, reached with the caller''s user mapping; the node must run the same streamcube, be a primary and not this server';
CREATE FUNCTION streamcube_drop_node(name text)
    RETURNS void LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_drop_node';
COMMENT ON FUNCTION streamcube_drop_node(text) IS
    'Forget a node (its foreign server and user mappings stay)';
CREATE FUNCTION streamcube_check_node(name text)
    RETURNS TABLE (node text, server text, version text, system_identifier text, answered_ms double precision)
    LANGUAGE C STRICT SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_check_node';
COMMENT ON FUNCTION streamcube_check_node(text) IS
    'Connect to a node again and check it as streamcube_add_node did, and that it is still the server that was added';
REVOKE EXECUTE ON FUNCTION streamcube_check_node(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION streamcube_check_node(text) TO streamcube_admin;
REVOKE EXECUTE ON FUNCTION streamcube_add_node(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION streamcube_drop_node(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION streamcube_add_node(text, text) TO streamcube_admin;
GRANT EXECUTE ON FUNCTION streamcube_drop_node(text) TO streamcube_admin;

-- ---------------------------------------------------------------------
-- Placement (issue 47): a replica set of a cube runs on a node.  The home
-- server hands the set's partitions over at the positions its reassignment
-- merged (epoch), then its launcher has the node adopt them there; the
-- row says how far that got.  Written by placement.c only.
-- ---------------------------------------------------------------------
-- (streamcube.placement_catalog is made before streamcube.consumers, which
-- reads it; its node is a node of streamcube.node_catalog.)
ALTER TABLE streamcube.placement_catalog
    ADD FOREIGN KEY (node) REFERENCES streamcube.node_catalog (name);

CREATE VIEW streamcube.placements AS
SELECT c.relid::regclass AS cube,
       p.replica_set,
       p.node,
       p.state,
       p.partitions,
       p.positions,
       p.epoch,
       pg_catalog.pg_get_userbyid(p.placed_by) AS placed_by,
       p.attempts,
       p.last_error,
       p.tried_at,
       p.placed_at,
       p.adopted_at
FROM streamcube.placement_catalog p
JOIN streamcube.cubes c USING (cube_id);
REVOKE ALL ON streamcube.placements FROM PUBLIC;
GRANT SELECT ON streamcube.placements TO streamcube_admin;
COMMENT ON VIEW streamcube.placements IS
    'Replica sets placed on nodes: the partitions handed over and where the node starts them; state moving until the node adopted them (attempts, last_error), then placed';

CREATE FUNCTION streamcube_place(cube text, replica_set text, node text)
    RETURNS jsonb LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_place';
COMMENT ON FUNCTION streamcube_place(text, text, text) IS
    'Run a replica set of a cube on a node: its partitions are handed over here as by streamcube_reassign, then the node makes the cube and adopts them at exactly those positions (streamcube.placements)';
REVOKE EXECUTE ON FUNCTION streamcube_place(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION streamcube_place(text, text, text) TO streamcube_admin;

CREATE FUNCTION streamcube_adopt(definition jsonb, replica_set text, partitions integer[], positions bigint[])
    RETURNS text LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_adopt';
COMMENT ON FUNCTION streamcube_adopt(jsonb, text, integer[], bigint[]) IS
    'On a node, called by its home server: make the cube of definition if it is missing and have replica_set consume partitions from positions; a no-op when it already does';
REVOKE EXECUTE ON FUNCTION streamcube_adopt(jsonb, text, integer[], bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION streamcube_adopt(jsonb, text, integer[], bigint[]) TO streamcube_admin;

-- ---------------------------------------------------------------------
-- 0.4.0: every view is a security barrier.  Each shows rows of cubes the
-- caller may read (has_table_privilege) or of clusters an admin may see;
-- a caller's own cheap function in a WHERE clause must not be run on the
-- other rows before that filter.
-- ---------------------------------------------------------------------
DO $$
DECLARE
    v regclass;
BEGIN
    FOR v IN SELECT c.oid::regclass FROM pg_catalog.pg_class c
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'streamcube' AND c.relkind = 'v' ORDER BY c.relname LOOP
        EXECUTE pg_catalog.format('ALTER VIEW %s SET (security_barrier = true)', v);
    END LOOP;
END
$$;
