-- streamcube 0.3.0 -> 0.4.0
--
-- - Roll-ups at the speed of raw rows: receivers aggregate each batch in C
--   and append partial rows to the active partitions of a roll-up, which
--   have no key any more; a seal or compaction merges a window's partial
--   rows into one row per group, and only sealed partitions have the key.
--   The key of a 0.3.0 roll-up goes from its table (and so from its
--   active partitions) and stays on its sealed partitions; the rows stay.
-- - Every roll-up gets a view <roll-up>_merged: one row per bucket and
--   dimensions over active and sealed windows, avg's average beside its
--   parts (streamcube.rollup_catalog.merged_view, streamcube.rollups).
-- - Measures with FILTER (WHERE ...), dimensions that are expressions of
--   the cube's columns (streamcube.rollup_catalog.dimension_exprs).
\echo Use "ALTER EXTENSION streamcube UPDATE TO '0.4.0'" to load this file. \quit

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
