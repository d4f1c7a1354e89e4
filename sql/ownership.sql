--
-- ownership: every relation of a cube belongs to the cube's owner, whoever
-- created it and however the cube changed hands; and a change of the table
-- that the receiver cannot follow pauses the cube with a reason instead of
-- crashing the server.
--
\getenv kafka SC_KAFKA
\set VERBOSITY default

\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" own_topic 1 >/dev/null
\! printf '%s\n' '{"ts":"2026-01-01T00:00:01Z","k":"a","v":1}' '{"ts":"2026-01-01T01:00:02Z","k":"b","v":2}' | kcat -P -b "$SC_KAFKA" -t own_topic -p 0
SELECT sc_test.wait_for($$SELECT sum(high_watermark) = 2 FROM streamcube_check_cluster('kafka') WHERE topic = 'own_topic'$$);

CREATE ROLE own LOGIN;
CREATE ROLE own2 LOGIN;
CREATE SCHEMA app AUTHORIZATION own;
GRANT CREATE, USAGE ON SCHEMA app TO own2, sc_admin;
GRANT own TO sc_admin;   -- an administrator who may give tables to own

-- Every relation of a cube and who owns it.
CREATE FUNCTION sc_test.cube_owners(cube regclass) RETURNS TABLE (owner name, relations bigint)
LANGUAGE sql AS $$
    SELECT pg_get_userbyid(c.relowner), count(*)
    FROM pg_class c
    WHERE c.oid = cube
       OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = cube)
       OR c.oid = (SELECT sealed_view FROM streamcube.cubes WHERE relid = cube)
    GROUP BY 1 ORDER BY 1
$$;

-- A superuser creates a cube and gives it to a role that is not one.
SELECT streamcube_create_cube('app.c2', 'kafka', 'own_topic', 'ts timestamptz, k text, v int', 'ts');
SELECT streamcube_wait('app.c2', '60 s');
SELECT streamcube_seal('app.c2', '2026-01-01 01:00+00');   -- a sealed window and the view
SELECT * FROM sc_test.cube_owners('app.c2');
ALTER TABLE app.c2 OWNER TO own;
SELECT * FROM sc_test.cube_owners('app.c2');

-- The new owner's index runs its own function as itself, never as the
-- superuser who created the windows.
SET ROLE own;
CREATE FUNCTION app.pwn() RETURNS void LANGUAGE plpgsql VOLATILE
  AS $$ BEGIN EXECUTE 'ALTER ROLE own SUPERUSER'; END $$;
CREATE FUNCTION app.f_idx(int) RETURNS int LANGUAGE plpgsql IMMUTABLE
  AS $$ BEGIN PERFORM app.pwn(); RETURN $1; END $$;
CREATE INDEX ON app.c2 (app.f_idx(v));
RESET ROLE;
SELECT rolsuper FROM pg_roles WHERE rolname = 'own';

-- Seals go on under the new owner (they act as the owner).
SELECT streamcube_seal('app.c2');
SELECT window_start, state FROM streamcube.segments WHERE cube = 'app.c2'::regclass AND window_start < '2026-06-01' ORDER BY 1;

-- A partition or the sealed view alone cannot go to another role.
ALTER TABLE app.c2_20260101_0000 OWNER TO own2;
ALTER VIEW app.c2_sealed OWNER TO own2;
-- A table of another role cannot become a partition.
CREATE TABLE app.stranger (LIKE app.c2);
ALTER TABLE app.c2 ATTACH PARTITION app.stranger FOR VALUES FROM ('2027-01-01') TO ('2027-01-02');
CREATE TABLE app.stranger2 PARTITION OF app.c2 FOR VALUES FROM ('2027-01-02') TO ('2027-01-03');
DROP TABLE app.stranger;
CREATE FOREIGN DATA WRAPPER sc_dummy;
CREATE SERVER sc_dummy FOREIGN DATA WRAPPER sc_dummy;
CREATE FOREIGN TABLE app.stranger3 PARTITION OF app.c2 FOR VALUES FROM ('2027-01-03') TO ('2027-01-04') SERVER sc_dummy;
DROP SERVER sc_dummy;
DROP FOREIGN DATA WRAPPER sc_dummy;

-- Hand-over between roles that are not superusers, and back.
GRANT own2 TO own;
SET ROLE own;
ALTER TABLE app.c2 OWNER TO own2;
RESET ROLE;
SELECT * FROM sc_test.cube_owners('app.c2');
ALTER TABLE app.c2 OWNER TO postgres;
SELECT * FROM sc_test.cube_owners('app.c2');

-- An administrator's cube, handed over; REASSIGN OWNED moves it whole.
SET ROLE sc_admin;
SELECT streamcube_create_cube('app.c3', 'kafka', 'own_topic', 'ts timestamptz, k text, v int', 'ts');
SELECT streamcube_wait('app.c3', '60 s');
ALTER TABLE app.c3 OWNER TO own;
RESET ROLE;
SELECT * FROM sc_test.cube_owners('app.c3');
SELECT pid AS c3_pid FROM streamcube.consumers WHERE cube = 'app.c3'::regclass \gset
REASSIGN OWNED BY own TO own2;
SELECT * FROM sc_test.cube_owners('app.c3');
SELECT * FROM sc_test.cube_owners('app.c2');

-- The new owner can dump its cube: every partition is its own.
\! pg_dump -h 127.0.0.1 -U own2 -d postgres --table='app.c3*' >/dev/null && echo "pg_dump as the cube's owner works"

-- A receiver started as the new owner creates new windows as it.
SELECT sc_test.wait_for(format($$SELECT pid <> %s AND state = 'running' FROM streamcube.consumers
                                 WHERE cube = 'app.c3'::regclass$$, :c3_pid));
SELECT a.usename FROM streamcube.consumers c JOIN pg_stat_activity a USING (pid) WHERE c.cube = 'app.c3'::regclass;
\! printf '%s\n' '{"ts":"2026-01-02T00:00:01Z","k":"c","v":3}' | kcat -P -b "$SC_KAFKA" -t own_topic -p 0
SELECT sc_test.wait_for($$SELECT count(*) = 3 FROM app.c3$$);
SELECT * FROM sc_test.cube_owners('app.c3');

-- Renaming the time column no longer crashes a seal or the receiver: the
-- seal finds the column by its number, the receiver pauses the cube and
-- says what changed and what to do.
ALTER TABLE app.c3 RENAME COLUMN ts TO ts_renamed;
\! printf '%s\n' '{"ts":"2026-01-02T00:00:02Z","k":"d","v":4}' | kcat -P -b "$SC_KAFKA" -t own_topic -p 0
SELECT sc_test.wait_for($$SELECT state = 'paused' FROM streamcube.consumers WHERE cube = 'app.c3'::regclass$$);
SELECT state, last_error FROM streamcube.consumers WHERE cube = 'app.c3'::regclass;
SELECT streamcube_seal('app.c3', '2026-01-02 00:00+00');
SELECT streamcube_wait('app.c3', '1 s');
SELECT count(*) AS dead_letters FROM streamcube.dead_letters WHERE cube = 'app.c3'::regclass;
-- resuming without the fix pauses it again
SELECT streamcube_resume('app.c3');
SELECT sc_test.wait_for($$SELECT paused FROM streamcube.cubes WHERE relid = 'app.c3'::regclass$$);
ALTER TABLE app.c3 RENAME COLUMN ts_renamed TO ts;
SELECT streamcube_resume('app.c3');
SELECT streamcube_wait('app.c3', '60 s');
SELECT k, v FROM app.c3 ORDER BY _offset;

-- A column that option "fields" maps: dropped, the cube pauses too.
SELECT streamcube_create_cube('app.c4', 'kafka', 'own_topic', 'ts timestamptz, key text, v int', 'ts',
       '1 hour', 'json', '{"fields": {"key": "k"}}');
SELECT streamcube_wait('app.c4', '60 s');
ALTER TABLE app.c4 RENAME COLUMN key TO key2;
\! printf '%s\n' '{"ts":"2026-01-02T00:00:03Z","k":"e","v":5}' | kcat -P -b "$SC_KAFKA" -t own_topic -p 0
SELECT sc_test.wait_for($$SELECT state = 'paused' FROM streamcube.consumers WHERE cube = 'app.c4'::regclass$$);
SELECT state, last_error FROM streamcube.consumers WHERE cube = 'app.c4'::regclass;
SELECT streamcube_alter_cube('app.c4', '{"fields": {"key2": "k"}}');
SELECT streamcube_resume('app.c4');
SELECT streamcube_wait('app.c4', '60 s');
SELECT key2, v FROM app.c4 ORDER BY _offset;

-- A generated column: PostgreSQL computes it, new windows and seals keep it.
ALTER TABLE app.c4 ADD COLUMN v2 int GENERATED ALWAYS AS (v * 2) STORED;
\! printf '%s\n' '{"ts":"2026-02-01T00:00:00Z","k":"f","v":6}' | kcat -P -b "$SC_KAFKA" -t own_topic -p 0
SELECT streamcube_wait('app.c4', '60 s');
SELECT streamcube_seal('app.c4', '2026-03-01 00:00+00');
SELECT key2, v, v2 FROM app.c4 ORDER BY _offset;
SELECT state, last_error FROM streamcube.consumers WHERE cube = 'app.c4'::regclass;

-- A trigger of the owner that fails for every row: the cube pauses with
-- the error as its reason, instead of failing and restarting for ever.
CREATE FUNCTION app.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'the owner''s trigger refuses'; END $$;
CREATE TRIGGER refuse BEFORE INSERT ON app.c4 FOR EACH ROW EXECUTE FUNCTION app.refuse();
\! printf '%s\n' '{"ts":"2026-02-01T00:00:02Z","k":"h","v":8}' | kcat -P -b "$SC_KAFKA" -t own_topic -p 0
SELECT sc_test.wait_for($$SELECT state = 'paused' FROM streamcube.consumers WHERE cube = 'app.c4'::regclass$$);
SELECT state, last_error FROM streamcube.consumers WHERE cube = 'app.c4'::regclass;
DROP TRIGGER refuse ON app.c4;
SELECT streamcube_resume('app.c4');
SELECT streamcube_wait('app.c4', '60 s');
SELECT count(*) AS dead_letters FROM streamcube.dead_letters WHERE cube = 'app.c4'::regclass;

-- A table attached in a window's place: the cube pauses and says so.
BEGIN;
ALTER TABLE app.c4 DETACH PARTITION app.c4_20260201_0000;
CREATE TABLE app.c4_sub (LIKE app.c4 INCLUDING GENERATED) PARTITION BY RANGE (ts);
ALTER TABLE app.c4 ATTACH PARTITION app.c4_sub FOR VALUES FROM ('2026-02-01 00:00+00') TO ('2026-02-01 01:00+00');
COMMIT;
\! printf '%s\n' '{"ts":"2026-02-01T00:00:01Z","k":"g","v":7}' | kcat -P -b "$SC_KAFKA" -t own_topic -p 0
SELECT sc_test.wait_for($$SELECT state = 'paused' FROM streamcube.consumers WHERE cube = 'app.c4'::regclass$$);
SELECT state, last_error FROM streamcube.consumers WHERE cube = 'app.c4'::regclass;
-- the window back as it was: the late row joins its sealed window
BEGIN;
ALTER TABLE app.c4 DETACH PARTITION app.c4_sub;
ALTER TABLE app.c4 ATTACH PARTITION app.c4_20260201_0000 FOR VALUES FROM ('2026-02-01 00:00+00') TO ('2026-02-01 01:00+00');
COMMIT;
SELECT streamcube_resume('app.c4');
SELECT streamcube_wait('app.c4', '60 s');
SELECT key2, v, v2, tableoid::regclass FROM app.c4 ORDER BY _offset;
SELECT state, last_error FROM streamcube.consumers WHERE cube = 'app.c4'::regclass;

-- A cube named with a quote: the sealed view's comment is a quoted literal.
SELECT streamcube_create_cube('app."q''x"', 'kafka', 'own_topic', 'ts timestamptz, k text, v int', 'ts');
SELECT streamcube_wait('app."q''x"', '60 s');
SELECT streamcube_seal('app."q''x"', '2026-01-02 00:00+00');
SELECT obj_description('app."q''x_sealed"'::regclass, 'pg_class');

SELECT streamcube_drop_cube(c) FROM unnest(ARRAY['app.c2', 'app.c3', 'app.c4', 'app."q''x"']) c;
DROP SCHEMA app CASCADE;
DROP FUNCTION sc_test.cube_owners(regclass);
REVOKE own FROM sc_admin;
DROP ROLE own, own2;
