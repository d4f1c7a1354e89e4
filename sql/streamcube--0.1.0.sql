-- streamcube 0.1.0: install script
--
-- Functions live in the schema the extension is created in (public by
-- default) and are prefixed streamcube_; catalogs and views live in schema
-- streamcube.  Catalog tables are closed to PUBLIC: the C functions check
-- the caller and reach them as the bootstrap superuser.

\echo Use "CREATE EXTENSION streamcube" to load this file. \quit

CREATE SCHEMA streamcube;

-- Refuses to install outside streamcube.database, before anything else.
CREATE FUNCTION streamcube._check_install() RETURNS void
    LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sc_check_install';
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
    RETURNS void LANGUAGE C AS 'MODULE_PATHNAME', 'sc_add_cluster';
COMMENT ON FUNCTION streamcube_add_cluster(text, text, jsonb) IS
    'Register a Kafka cluster; every property is checked by librdkafka before it is stored';

CREATE FUNCTION streamcube_drop_cluster(name text)
    RETURNS void LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sc_drop_cluster';
COMMENT ON FUNCTION streamcube_drop_cluster(text) IS
    'Forget a Kafka cluster that no cube uses';

CREATE FUNCTION streamcube_check_cluster(name text)
    RETURNS TABLE (topic text, partition integer, leader integer,
                   low_watermark bigint, high_watermark bigint)
    LANGUAGE C STRICT AS 'MODULE_PATHNAME', 'sc_check_cluster';
COMMENT ON FUNCTION streamcube_check_cluster(text) IS
    'Connect to a Kafka cluster and list every topic partition with its leader and watermarks';

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
    relid            oid NOT NULL UNIQUE,            -- the cube's parent table
    cluster_name     text NOT NULL REFERENCES streamcube.clusters (name),
    topic            text NOT NULL,
    time_column      name NOT NULL,
    segment_interval interval NOT NULL,
    format           text NOT NULL CHECK (format IN ('json', 'csv')),
    options          jsonb NOT NULL DEFAULT '{}',
    owner            oid NOT NULL,
    paused           boolean NOT NULL DEFAULT false,
    config_version   bigint NOT NULL DEFAULT 1,      -- bumped on every change receivers must see
    bad_partition    integer,                        -- set when a bad message paused the cube
    bad_offset       bigint,
    bad_error        text,
    skip_partition   integer,                        -- dead-letter this message once, then go on
    skip_offset      bigint,
    created_at       timestamptz NOT NULL DEFAULT now()
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
-- segments, so crash recovery empties both together.
CREATE UNLOGGED TABLE streamcube.consume_positions (
    cube_id    integer NOT NULL REFERENCES streamcube.cubes ON DELETE CASCADE,
    partition  integer NOT NULL,
    position   bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cube_id, partition)
);
REVOKE ALL ON streamcube.consume_positions FROM PUBLIC;
