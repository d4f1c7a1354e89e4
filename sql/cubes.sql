--
-- cubes: creating, checking and dropping cubes; who may do what
--
\getenv kafka SC_KAFKA
\getenv sckafka SC_SCKAFKA
\set VERBOSITY default

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sc_cube_owner') THEN
        CREATE ROLE sc_cube_owner LOGIN IN ROLE streamcube_admin;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sc_other') THEN
        CREATE ROLE sc_other LOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sc_other_admin') THEN
        CREATE ROLE sc_other_admin LOGIN IN ROLE streamcube_admin;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sc_nologin_admin') THEN
        CREATE ROLE sc_nologin_admin NOLOGIN IN ROLE streamcube_admin;
    END IF;
END
$$;
GRANT CREATE ON SCHEMA public TO sc_cube_owner, sc_nologin_admin;

SELECT streamcube_add_cluster('kafka', :'kafka');
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" cube_topic 2 >/dev/null

-- Every wrong argument is a clear error and creates nothing.
SELECT streamcube_create_cube('c1', 'nosuch', 'cube_topic', 'ts timestamptz, v int', 'ts');
SELECT streamcube_create_cube('c1', 'kafka', 'no_such_topic', 'ts timestamptz, v int', 'ts');
-- a name Kafka cannot have is refused before Kafka is asked
SELECT streamcube_create_cube('c1', 'kafka', 'cube topic', 'ts timestamptz, v int', 'ts');
SELECT streamcube_create_cube('c1', 'kafka', '..', 'ts timestamptz, v int', 'ts');
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'time');
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts text, v int', 'ts');
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'ts', '1 hour', 'xml');
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'ts', '1 month');
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'ts', '10 seconds');
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'ts', '1 hour', 'json', '{"colour": "red"}');
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'ts', '1 hour', 'json', '{"start": "middle"}');
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'ts', '1 hour', 'json', '{"bad_message": "ignore"}');
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'ts', '1 hour', 'json', '{"delimiter": ";"}');
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'ts', '1 hour', 'csv', '{"fields": {"v": "a.b"}}');
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'ts', '1 hour', 'json', '{"fields": {"w": "a.b"}}');
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'ts', '1 hour', 'csv', '{"delimiter": ";;"}');
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'ts', '1 hour', 'json', '[1]');
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz); DROP TABLE pg_temp.x; --', 'ts');
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz) PARTITION BY RANGE (ts) --', 'ts');
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz) WITH (fillfactor = 50', 'ts');
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz, v nosuchtype', 'ts');
SELECT count(*) AS cubes, to_regclass('c1') AS c1 FROM streamcube.cubes;

-- A role that cannot log in cannot own a cube: its receivers connect as it.
SET ROLE sc_nologin_admin;
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'ts');
RESET ROLE;

-- A member of streamcube_admin creates a cube and owns it.
SET ROLE sc_cube_owner;
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'ts', '1 day');
RESET ROLE;
SELECT c.relid::regclass, c.topic, c.time_column, c.segment_interval, c.format, r.rolname AS owner,
       (SELECT count(*) FROM streamcube.assignments a WHERE a.cube_id = c.cube_id AND replica_set = 'default') AS partitions
FROM streamcube.cubes c JOIN pg_class t ON t.oid = c.relid JOIN pg_roles r ON r.oid = t.relowner;
SELECT relkind, relpersistence, pg_get_userbyid(relowner) AS owner FROM pg_class WHERE oid = 'c1'::regclass;
SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'c1' ORDER BY ordinal_position;
SELECT pg_get_partkeydef('c1'::regclass);
-- the current and the next window exist, UNLOGGED, before any message
SELECT count(*) AS windows, bool_and(p.relpersistence = 'u') AS unlogged, bool_and(s.state = 'active') AS active
FROM streamcube.segments s JOIN pg_class p ON p.oid = s.relation
WHERE s.cube = 'c1'::regclass;
-- a receiver runs within seconds of COMMIT, as the owner
SELECT sc_test.wait_for($$SELECT EXISTS (SELECT 1 FROM streamcube.consumers WHERE cube = 'c1'::regclass AND state = 'running')$$);
SELECT c.replica_set, c.state, c.partitions, c.positions, a.usename, a.backend_type
FROM streamcube.consumers c JOIN pg_stat_activity a USING (pid) WHERE c.cube = 'c1'::regclass;

-- duplicates
SELECT streamcube_create_cube('c1', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'ts');
CREATE TABLE plain_table (x int);
SELECT streamcube_create_cube('plain_table', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'ts');
SELECT streamcube_pause('plain_table');
SELECT streamcube_pause('no_such_cube');

-- schema-qualified, quoted names
CREATE SCHEMA "Cube Schema";
SELECT streamcube_create_cube('"Cube Schema"."Odd Name"', 'kafka', 'cube_topic', '"Time" timestamptz, "v a l" int', 'Time');
SELECT window_end - window_start AS width, relation::text LIKE '"Cube Schema"."Odd Name_%' AS named
FROM streamcube.segments WHERE cube = '"Cube Schema"."Odd Name"'::regclass LIMIT 1;

-- Who may do what: not PUBLIC, not another role.
SET ROLE sc_other;
SELECT streamcube_create_cube('c2', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'ts');
SELECT streamcube_pause('c1');
SELECT streamcube_resume('c1');
SELECT streamcube_drop_cube('c1');
SELECT count(*) FROM streamcube.cubes;
RESET ROLE;

-- Catalog work runs with elevated rights but a fixed search_path: a
-- function planted earlier on the caller's search_path never runs with them.
CREATE SCHEMA evil AUTHORIZATION sc_cube_owner;
SET ROLE sc_cube_owner;
CREATE FUNCTION evil.jsonb_each_text(jsonb, OUT key text, OUT value text) RETURNS SETOF record
    LANGUAGE plpgsql AS $$ BEGIN ALTER ROLE sc_cube_owner SUPERUSER; END $$;
SET search_path = evil, pg_catalog, public;
SELECT count(*) > 0 AS partitions_seen FROM streamcube_check_cluster('kafka');
RESET search_path;
RESET ROLE;
SELECT rolsuper FROM pg_roles WHERE rolname = 'sc_cube_owner';
DROP SCHEMA evil CASCADE;

-- A cluster in use cannot be dropped.
SELECT streamcube_drop_cluster('kafka');

-- Dropping: the receiver stops, the catalog forgets, the table goes unless kept.
SELECT streamcube_drop_cube('"Cube Schema"."Odd Name"', keep_data => true);
SELECT to_regclass('"Cube Schema"."Odd Name"') IS NOT NULL AS table_kept,
       (SELECT count(*) FROM streamcube.cubes c WHERE c.relid = '"Cube Schema"."Odd Name"'::regclass) AS catalog_rows;
-- An administrator may drop a cube it does not own, table included.
SET ROLE sc_other_admin;
SELECT streamcube_drop_cube('c1');
RESET ROLE;
SELECT to_regclass('c1') AS c1, (SELECT count(*) FROM streamcube.cubes) AS cubes,
       (SELECT count(*) FROM streamcube.assignments) AS assignments,
       (SELECT count(*) FROM streamcube.segment_catalog) AS segments;
SELECT sc_test.wait_for($$SELECT NOT EXISTS (SELECT 1 FROM streamcube._receivers() WHERE cube_id NOT IN (SELECT cube_id FROM streamcube.cubes))$$);
-- DROP TABLE on a cube is a drop of the cube.
SELECT streamcube_create_cube('dropped_by_sql', 'kafka', 'cube_topic', 'ts timestamptz, v int', 'ts');
SELECT sc_test.wait_for($$SELECT EXISTS (SELECT 1 FROM streamcube.consumers WHERE cube = 'dropped_by_sql'::regclass AND state = 'running')$$);
DROP TABLE dropped_by_sql;
SELECT (SELECT count(*) FROM streamcube.cubes) AS cubes, (SELECT count(*) FROM streamcube.segment_catalog) AS segments;
SELECT sc_test.wait_for($$SELECT NOT EXISTS (SELECT 1 FROM streamcube._receivers() WHERE cube_id NOT IN (SELECT cube_id FROM streamcube.cubes))$$);
DROP SCHEMA "Cube Schema" CASCADE;
DROP TABLE plain_table;
