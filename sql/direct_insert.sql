--
-- direct_insert: receivers form rows themselves (the direct path,
-- streamcube.direct_insert = on, the default) instead of going through
-- COPY.  The same messages through the COPY path (the setting off) give
-- the same rows and the same dead letters, word for word, in JSON and in
-- CSV (non-ASCII values and values that are not UTF-8 among them: the
-- direct path checks the encoding of a line only when it is not plain
-- ASCII); partitions with a row trigger take the COPY path, so the
-- trigger fires; partitions of two layouts in one batch.
--
\set VERBOSITY default

CREATE DOMAIN sc_test.positive AS int NOT NULL CHECK (VALUE > 0);

\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" direct_topic 1 >/dev/null
-- good rows, then each kind of bad value, then a duplicate key
\! printf '%s\n' '{"ts":"2026-01-01T00:00:01Z","k":"a","n":1,"q":1,"d":"1.5"}' '{"ts":"2026-01-01T00:00:02Z","k":"b","n":2,"q":2,"d":"2.5"}' '{"ts":"2026-01-01T00:00:03Z","k":"c","n":"x","q":3,"d":"1"}' '{"ts":"2026-01-01T00:00:04Z","k":"d","n":4,"q":-4,"d":"1"}' '{"ts":"2026-01-01T00:00:05Z","k":"e","n":5,"d":"1"}' '{"ts":"2026-01-01T00:00:06Z","n":6,"q":6,"d":"1"}' '{"ts":"2026-01-01T00:00:07Z","k":"g","n":7,"q":7,"d":"12345678901234567890.5"}' '{"ts":"2026-01-01T00:00:01Z","k":"a","n":8,"q":8,"d":"1"}' '{"ts":"2026-01-01T00:00:09Z","k":"i\ttab","n":9,"q":9,"d":"9"}' '{"ts":"2026-01-01T00:00:10Z","k":"é€","n":10,"q":10,"d":"1"}' '{"ts":"2026-01-01T00:00:11Z","k":null,"n":11,"q":11,"d":"1"}' '{"ts":"2026-01-01T00:00:12Z","k":"l","n":null,"q":12,"d":null}' | kcat -P -b "$SC_KAFKA" -t direct_topic -p 0
-- a value that is not UTF-8 (in a flat object: the line holds it as it is)
\! printf '{"ts":"2026-01-01T00:00:13Z","k":"m\377","n":13,"q":13,"d":"1"}\n' | kcat -P -b "$SC_KAFKA" -t direct_topic -p 0

-- d numeric(5,1): too many digits is an error of the type's input
-- function with the column's typmod; k is NOT NULL; q a domain; (k, ts)
-- unique.
CREATE FUNCTION sc_test.direct_cube(name text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM streamcube_create_cube(name, 'kafka', 'direct_topic',
        'ts timestamptz, k text NOT NULL, n int, q sc_test.positive, d numeric(5,1)', 'ts', '1 day');
    EXECUTE format('CREATE UNIQUE INDEX ON %I (k, ts)', name);
END $$;

-- The direct path (the default).
SHOW streamcube.direct_insert;
SELECT sc_test.direct_cube('direct_on');
SELECT streamcube_wait('direct_on', '60 s');

-- The COPY path.
ALTER SYSTEM SET streamcube.direct_insert = off;
SELECT pg_reload_conf();
SELECT pg_sleep(0.5);
SELECT sc_test.direct_cube('direct_off');
SELECT streamcube_wait('direct_off', '60 s');
ALTER SYSTEM RESET streamcube.direct_insert;
SELECT pg_reload_conf();
SELECT sc_test.writers('direct_on') AS direct_on, sc_test.writers('direct_off') AS direct_off;

SELECT _offset, ts, k, n, q, d FROM direct_on ORDER BY _offset;
-- the same rows, the same dead letters
SELECT (SELECT array_agg(x ORDER BY x) FROM (SELECT (_offset, ts, k, n, q, d)::text x FROM direct_on) a)
     = (SELECT array_agg(x ORDER BY x) FROM (SELECT (_offset, ts, k, n, q, d)::text x FROM direct_off) b) AS same_rows;
SELECT "offset", error FROM streamcube.dead_letters WHERE cube = 'direct_on'::regclass ORDER BY "offset";
SELECT (SELECT array_agg(("offset", error)::text ORDER BY "offset") FROM streamcube.dead_letters WHERE cube = 'direct_on'::regclass)
     = (SELECT array_agg(("offset", replace(error, 'direct_off', 'direct_on'))::text ORDER BY "offset")
        FROM streamcube.dead_letters WHERE cube = 'direct_off'::regclass)
       AS same_dead_letters;   -- the cubes' names aside

-- CSV: quoted delimiters, doubled quotes, the null string against a quoted
-- empty string, a NOT NULL column, a type error, integers in every form
-- int4in reads or refuses; a cube with its own delimiter and null string
-- too.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" direct_csv 1 >/dev/null
\! printf '%s\n' '{"ts":"2026-01-01T00:00:01Z","k":"a","n":1}' '2026-01-01T00:00:02Z,"b,c",2' '2026-01-01T00:00:03Z,"say ""hi""",3' '2026-01-01T00:00:04Z,,4' '2026-01-01T00:00:05Z,"",5' '2026-01-01T00:00:06Z,f,x' '2026-01-01T00:00:07Z,g,' '2026-01-01T00:00:08Z,"h""",8' '2026-01-01T00:00:09Z,é€,9' '2026-01-01T00:00:10Z,j,' '2026-01-01T00:00:12Z,n1, 12' '2026-01-01T00:00:13Z,n2,+13' '2026-01-01T00:00:14Z,n3,-0' '2026-01-01T00:00:15Z,n4,0042' '2026-01-01T00:00:16Z,n5,-123456789' '2026-01-01T00:00:17Z,n6,2147483647' '2026-01-01T00:00:18Z,n7,2147483648' '2026-01-01T00:00:19Z,n8,-' | kcat -P -b "$SC_KAFKA" -t direct_csv -p 0
\! printf '2026-01-01T00:00:11Z,k\377,11\n' | kcat -P -b "$SC_KAFKA" -t direct_csv -p 0
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" direct_csv2 1 >/dev/null
\! printf '%s\n' '2026-01-01T00:00:01Z;a;1' '2026-01-01T00:00:02Z;NULL;2' '2026-01-01T00:00:03Z;"NULL";3' '2026-01-01T00:00:04Z;x;NULL' '2026-01-01T00:00:05Z;;5' | kcat -P -b "$SC_KAFKA" -t direct_csv2 -p 0
CREATE FUNCTION sc_test.direct_csv_cubes(suffix text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM streamcube_create_cube('direct_csv_' || suffix, 'kafka', 'direct_csv',
        'ts timestamptz, k text NOT NULL, n int', 'ts', '1 day', 'csv');
    PERFORM streamcube_create_cube('direct_csv2_' || suffix, 'kafka', 'direct_csv2',
        'ts timestamptz, k text, n int', 'ts', '1 day', 'csv', '{"delimiter": ";", "null": "NULL"}');
END $$;
SELECT sc_test.direct_csv_cubes('on');
SELECT streamcube_wait('direct_csv_on', '60 s'), streamcube_wait('direct_csv2_on', '60 s');
ALTER SYSTEM SET streamcube.direct_insert = off;
SELECT pg_reload_conf();
SELECT pg_sleep(0.5);
SELECT sc_test.direct_csv_cubes('off');
SELECT streamcube_wait('direct_csv_off', '60 s'), streamcube_wait('direct_csv2_off', '60 s');
ALTER SYSTEM RESET streamcube.direct_insert;
SELECT pg_reload_conf();
SELECT c, sc_test.writers(c::regclass)
FROM unnest('{direct_csv_on,direct_csv_off,direct_csv2_on,direct_csv2_off}'::text[]) c;
SELECT _offset, k, k IS NULL AS k_null, n FROM direct_csv_on ORDER BY _offset;
SELECT _offset, k, k IS NULL AS k_null, n FROM direct_csv2_on ORDER BY _offset;
SELECT "offset", error FROM streamcube.dead_letters WHERE cube = 'direct_csv_on'::regclass ORDER BY "offset";
SELECT c, (SELECT array_agg(x ORDER BY x) FROM (SELECT (_offset, ts, k, n)::text x FROM direct_csv_on) a)
        = (SELECT array_agg(x ORDER BY x) FROM (SELECT (_offset, ts, k, n)::text x FROM direct_csv_off) b) AS same_rows
FROM (VALUES ('csv')) v(c)
UNION ALL
SELECT c, (SELECT array_agg(x ORDER BY x) FROM (SELECT (_offset, ts, k, n)::text x FROM direct_csv2_on) a)
        = (SELECT array_agg(x ORDER BY x) FROM (SELECT (_offset, ts, k, n)::text x FROM direct_csv2_off) b)
FROM (VALUES ('csv2')) v(c);
SELECT (SELECT array_agg(("offset", error)::text ORDER BY "offset") FROM streamcube.dead_letters WHERE cube = 'direct_csv_on'::regclass)
     = (SELECT array_agg(("offset", replace(error, 'direct_csv_off', 'direct_csv_on'))::text ORDER BY "offset")
        FROM streamcube.dead_letters WHERE cube = 'direct_csv_off'::regclass)
       AS same_dead_letters;
SELECT streamcube_drop_cube(c) FROM unnest('{direct_csv_on,direct_csv_off,direct_csv2_on,direct_csv2_off}'::text[]) c;
DROP FUNCTION sc_test.direct_csv_cubes(text);

-- A partition with a row trigger takes the COPY path: the trigger fires.
CREATE TABLE sc_test.direct_seen (k text);
GRANT INSERT ON sc_test.direct_seen TO PUBLIC;
CREATE FUNCTION sc_test.direct_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO sc_test.direct_seen VALUES (NEW.k); RETURN NEW; END $$;
CREATE TRIGGER seen BEFORE INSERT ON direct_on_20260101_0000
    FOR EACH ROW EXECUTE FUNCTION sc_test.direct_seen();
\! printf '%s\n' '{"ts":"2026-01-01T01:00:00Z","k":"t1","n":10,"q":10,"d":"1"}' '{"ts":"2026-01-01T01:00:01Z","k":"t2","n":11,"q":11,"d":"1"}' | kcat -P -b "$SC_KAFKA" -t direct_topic -p 0
SELECT streamcube_wait('direct_on', '60 s');
SELECT k FROM sc_test.direct_seen ORDER BY k;
-- the two rows for the window with the trigger went through COPY
SELECT sc_test.writers('direct_on') AS direct_on;
SELECT count(*), count(DISTINCT (_partition, _offset)) FROM direct_on;

-- Batches spread over several windows and two partitions: rows of one
-- window wait in their buffer while another window's are written (900
-- rows per window and partition, so buffers fill at different times).
-- Every row once, every value intact.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" direct_many 2 >/dev/null
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic direct_many --count 12000 --start-ts 1767225600 --step-ms 2000 --format json 2>/dev/null
SELECT streamcube_create_cube('direct_many', 'kafka', 'direct_many',
       'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 hour');
SELECT streamcube_wait('direct_many', '60 s');
SELECT count(*), count(DISTINCT (_partition, _offset)), count(DISTINCT date_trunc('hour', ts)) AS windows,
       sum(qty), sum(amount), count(*) FILTER (WHERE country !~ '^[a-z]{2}$' OR device !~ '^[a-z]+$') AS garbled
FROM direct_many;
SELECT streamcube_drop_cube('direct_many');

-- Partitions laid out otherwise, in one batch: a column dropped and added
-- again (k moves to the end of the table) leaves the partitions made
-- before with the dropped column in its place, and those made after
-- without it.  A batch that writes one of each forms rows in both layouts
-- (the receiver's slots, kept from batch to batch, serve one; the other
-- gets slots of its own): every value in its column.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" direct_layout 1 >/dev/null
\! printf '%s\n' '{"ts":"2026-01-01T00:00:01Z","k":"a","n":1}' | kcat -P -b "$SC_KAFKA" -t direct_layout -p 0
SELECT streamcube_create_cube('direct_layout', 'kafka', 'direct_layout',
       'ts timestamptz, k text, n int', 'ts', '1 hour');
SELECT streamcube_wait('direct_layout', '60 s');
BEGIN;
ALTER TABLE direct_layout DROP COLUMN k;
ALTER TABLE direct_layout ADD COLUMN k text;
COMMIT;
-- the window of 01:00 is made after
\! printf '%s\n' '{"ts":"2026-01-01T01:00:01Z","k":"b","n":2}' | kcat -P -b "$SC_KAFKA" -t direct_layout -p 0
SELECT streamcube_wait('direct_layout', '60 s');
SELECT streamcube_pause('direct_layout');
\! printf '%s\n' '{"ts":"2026-01-01T00:00:02Z","k":"c","n":3}' '{"ts":"2026-01-01T01:00:02Z","k":"d","n":4}' '{"ts":"2026-01-01T00:00:03Z","k":"e","n":5}' '{"ts":"2026-01-01T01:00:03Z","k":"f","n":6}' | kcat -P -b "$SC_KAFKA" -t direct_layout -p 0
SELECT batches AS batches_before FROM streamcube.consumers WHERE cube = 'direct_layout'::regclass \gset
SELECT streamcube_resume('direct_layout');
SELECT streamcube_wait('direct_layout', '60 s');
-- the four rows in one batch, into both partitions
SELECT batches - :batches_before AS batches, sc_test.writers('direct_layout')
FROM streamcube.consumers WHERE cube = 'direct_layout'::regclass;
SELECT tableoid::regclass AS partition,
       (SELECT count(*) FROM pg_attribute a WHERE a.attrelid = d.tableoid AND a.attnum > 0 AND a.attisdropped) AS dropped,
       _offset, ts, k, n
FROM direct_layout d ORDER BY _offset;
SELECT "offset", error FROM streamcube.dead_letters WHERE cube = 'direct_layout'::regclass ORDER BY "offset";
SELECT streamcube_drop_cube('direct_layout');

SELECT streamcube_drop_cube('direct_on');
SELECT streamcube_drop_cube('direct_off');
DROP TABLE sc_test.direct_seen;
DROP FUNCTION sc_test.direct_seen();
DROP FUNCTION sc_test.direct_cube(text);
DROP DOMAIN sc_test.positive;
