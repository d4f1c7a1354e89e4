--
-- metadata: Kafka key, timestamp, timestamp type and headers as columns
-- (option "fields" with {"kafka": ...}), a time column from the Kafka
-- timestamp, and format jsonb (the whole document in a jsonb column).
--
-- sckafka produce --meta gives message i key "key-<i>" (none when
-- i % 7 = 6), timestamp ts + 1 hour (CreateTime), headers trace-id
-- "t-<i>", source "sckafka", a second trace-id "t-<i>-last" when i % 5 = 0
-- and a header "empty" without a value when i % 3 = 0.  With --start-ts,
-- ts is start + i seconds, so i = epoch(ts) - start.
--
\set VERBOSITY default

-- The messages carry CreateTime of January 2026: Kafka's time retention
-- (7 days by default) would delete them under the test, so the topics keep
-- everything.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" meta_events 2 --config retention.ms=-1 >/dev/null
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic meta_events --count 70 --format json --start-ts 1767225600 --meta 2>/dev/null
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" meta_csv 2 --config retention.ms=-1 >/dev/null
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic meta_csv --count 70 --format csv --start-ts 1767225600 --meta 2>/dev/null

SET ROLE sc_admin;
-- JSON: payload columns and every kind of metadata side by side.
SELECT streamcube_create_cube('meta_events', 'kafka', 'meta_events',
       'ts timestamptz, country text, amount numeric, k text, kafka_ts timestamptz, kafka_ms bigint, '
       'ts_type text, trace text, source bytea, empty text, hdrs jsonb, topic text',
       'ts', '1 day', 'json',
       '{"fields": {"k": {"kafka": "key"}, "kafka_ts": {"kafka": "timestamp"}, "topic": {"kafka": "topic"},
                    "kafka_ms": {"kafka": "timestamp"}, "ts_type": {"kafka": "timestamp_type"},
                    "trace": {"kafka": "header", "name": "trace-id"},
                    "source": {"kafka": "header", "name": "source"},
                    "empty": {"kafka": "header", "name": "empty"},
                    "hdrs": {"kafka": "headers"}}}');
-- CSV: the record fills the payload columns in table order; the time
-- column is the Kafka timestamp; the key into bytea; the whole record too.
SELECT streamcube_create_cube('meta_csv', 'kafka', 'meta_csv',
       'event_ts timestamptz, kafka_ts timestamptz, country text, device text, amount numeric, qty int, '
       'k bytea, line text, topic varchar(20)',
       'kafka_ts', '1 day', 'csv',
       '{"fields": {"kafka_ts": {"kafka": "timestamp"}, "k": {"kafka": "key"}, "line": {"kafka": "value"},
                    "topic": {"kafka": "topic"}}}');
-- jsonb: the document in its jsonb column, the key beside it.
SELECT streamcube_create_cube('meta_doc', 'kafka', 'meta_events',
       'ts timestamptz, k text, doc jsonb', 'ts', '1 day', 'jsonb',
       '{"fields": {"k": {"kafka": "key"}}}');
RESET ROLE;
SELECT streamcube_wait('meta_events', '60 s'), streamcube_wait('meta_csv', '60 s'),
       streamcube_wait('meta_doc', '60 s');

-- Every message once, every value as produced.
CREATE TEMP VIEW meta_expected AS
SELECT i, to_timestamp(1767225600 + i) AS ts,
       CASE WHEN i % 7 <> 6 THEN 'key-' || i END AS k,
       CASE WHEN i % 5 = 0 THEN 't-' || i || '-last' ELSE 't-' || i END AS trace,
       CASE WHEN i % 5 = 0 THEN 3 ELSE 2 END + CASE WHEN i % 3 = 0 THEN 1 ELSE 0 END AS nheaders
FROM generate_series(0, 69) AS i;
SELECT count(*) AS rows, count(DISTINCT (_partition, _offset)) AS distinct_positions,
       count(*) FILTER (WHERE e.k IS NOT DISTINCT FROM m.k) AS keys,
       count(*) FILTER (WHERE m.k IS NULL) AS no_key,
       count(*) FILTER (WHERE m.kafka_ts = e.ts + interval '1 hour') AS kafka_ts,
       count(*) FILTER (WHERE m.kafka_ms = (extract(epoch FROM e.ts) * 1000)::bigint + 3600000) AS kafka_ms,
       count(*) FILTER (WHERE m.ts_type = 'CreateTime') AS create_time,
       count(*) FILTER (WHERE m.trace = e.trace) AS trace_last_value,
       count(*) FILTER (WHERE m.source = 'sckafka'::bytea) AS source,
       count(*) FILTER (WHERE m.empty IS NULL) AS empty_is_null,
       count(*) FILTER (WHERE m.hdrs ->> 'trace-id' = e.trace AND m.hdrs ->> 'source' = 'sckafka') AS hdrs,
       count(*) FILTER (WHERE m.topic = 'meta_events') AS topic
FROM meta_events m JOIN meta_expected e ON e.ts = m.ts;
SELECT ts, k, kafka_ts, ts_type, trace, source, empty, hdrs
FROM meta_events WHERE ts IN (to_timestamp(1767225600), to_timestamp(1767225600 + 6)) ORDER BY ts;
-- A header without a value is JSON null among the headers.
SELECT count(*) FILTER (WHERE hdrs ? 'empty' AND hdrs -> 'empty' = 'null') AS empty_headers FROM meta_events;

-- The CSV cube's windows follow the Kafka timestamp, an hour after the event.
SELECT count(*) AS rows, count(DISTINCT (_partition, _offset)) AS distinct_positions,
       count(*) FILTER (WHERE kafka_ts = event_ts + interval '1 hour') AS kafka_ts,
       count(*) FILTER (WHERE k IS NULL) AS no_key,
       count(*) FILTER (WHERE convert_from(k, 'UTF8') = 'key-' || (extract(epoch FROM event_ts)::bigint - 1767225600)) AS keys,
       count(*) FILTER (WHERE line = concat_ws(',', to_char(event_ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                                                 country, device, amount, qty)) AS lines,
       count(*) FILTER (WHERE topic = 'meta_csv') AS topic
FROM meta_csv;
SELECT event_ts, kafka_ts, k, line FROM meta_csv ORDER BY event_ts LIMIT 2;
SELECT window_start, rows FROM streamcube.segments
WHERE cube = 'meta_csv'::regclass AND window_start < '2026-06-01' ORDER BY 1;

-- The jsonb cube holds each document whole.
SELECT count(*), count(DISTINCT (_partition, _offset)), count(k),
       count(*) FILTER (WHERE doc ->> 'ts' IS NOT NULL AND (doc ->> 'ts')::timestamptz = ts) AS doc_ts
FROM meta_doc;
SELECT d.doc ->> 'country' AS country, count(*) FROM meta_doc d GROUP BY 1
EXCEPT
SELECT country, count(*) FROM meta_events GROUP BY 1;
SELECT ts, k, doc FROM meta_doc ORDER BY ts LIMIT 1;
-- The document column chosen by its type is written into "fields", so a
-- jsonb column added later does not take its place.
SELECT format, options FROM streamcube.cubes WHERE relid = 'meta_doc'::regclass;

-- The document column is built without PostgreSQL's JSON parser for flat
-- objects; it must be what jsonb_in gives, byte for byte (key order, a
-- repeated key's last value, numbers), and jsonb_in reads the rest.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" meta_docs 1 >/dev/null
\! printf '%s\n' '{"ts":"2026-01-01T00:00:00Z","bb":1,"a":2,"c":3,"aa":4}' '{"ts":"2026-01-01T00:00:01Z","k":1,"k":2,"j":0,"k":3}' '{ "ts" : "2026-01-01T00:00:02Z" , "n" : -0.10e+3 , "t":true,"f":false,"z":null }' '{"ts":"2026-01-01T00:00:03Z","nested":{"x":[1,2]},"s":"é"}' '{"ts":"2026-01-01T00:00:04Z","esc":"a\"b\\c\u00e9"}' '{"ts":"2026-01-01T00:00:05Z","big":123456789012345678901234567890.5,"e":1E-2,"":"empty key"}' '{"ts":"2026-01-01T00:00:06Z","bad":"\u0000"}' | kcat -P -b "$SC_KAFKA" -t meta_docs -p 0
SET ROLE sc_admin;
SELECT streamcube_create_cube('meta_docs', 'kafka', 'meta_docs', 'ts timestamptz, doc jsonb', 'ts', '1 day', 'jsonb');
RESET ROLE;
SELECT streamcube_wait('meta_docs', '60 s');
CREATE TEMP TABLE meta_docs_expected (i int, doc jsonb);
INSERT INTO meta_docs_expected VALUES
  (0, '{"ts":"2026-01-01T00:00:00Z","bb":1,"a":2,"c":3,"aa":4}'),
  (1, '{"ts":"2026-01-01T00:00:01Z","k":1,"k":2,"j":0,"k":3}'),
  (2, '{ "ts" : "2026-01-01T00:00:02Z" , "n" : -0.10e+3 , "t":true,"f":false,"z":null }'),
  (3, '{"ts":"2026-01-01T00:00:03Z","nested":{"x":[1,2]},"s":"é"}'),
  (4, '{"ts":"2026-01-01T00:00:04Z","esc":"a\"b\\c\u00e9"}'),
  (5, '{"ts":"2026-01-01T00:00:05Z","big":123456789012345678901234567890.5,"e":1E-2,"":"empty key"}');
-- Both stored: the same text and the same size on disk.
SELECT e.i, m.doc, m.doc::text = e.doc::text AS same_text,
       pg_column_size(m.doc) = pg_column_size(e.doc) AS same_size
FROM meta_docs m JOIN meta_docs_expected e ON e.i = extract(epoch FROM m.ts)::int - 1767225600
ORDER BY 1;
SELECT "offset", error FROM streamcube.dead_letters d JOIN streamcube.cubes c USING (cube_id)
WHERE c.relid = 'meta_docs'::regclass;
SELECT streamcube_drop_cube('meta_docs');

-- Keys and headers that look like syntax: delimiters, quotes, the null
-- string, backslashes, tabs, a line break.  The direct path and the COPY
-- path (streamcube.direct_insert off) give the same rows, and every value
-- is the one produced.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" meta_hostile_csv 1 >/dev/null
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" meta_hostile_json 1 >/dev/null
\! printf '%s\n' 'a,b|2026-01-01T00:00:01Z,1' 'say "hi"|2026-01-01T00:00:02Z,2' 'NULL|2026-01-01T00:00:03Z,3' "$(printf 'back\\slash\ttab')|2026-01-01T00:00:04Z,4" '\N|2026-01-01T00:00:05Z,5' | kcat -P -b "$SC_KAFKA" -t meta_hostile_csv -p 0 -K '|' -H "$(printf 'x=two\nlines, "quoted" \\ and\ttab')"
\! printf '%s\n' 'a,b|{"ts":"2026-01-01T00:00:01Z","n":1}' 'say "hi"|{"ts":"2026-01-01T00:00:02Z","n":2}' 'NULL|{"ts":"2026-01-01T00:00:03Z","n":3}' "$(printf 'back\\slash\ttab')|{\"ts\":\"2026-01-01T00:00:04Z\",\"n\":4}" '\N|{"ts":"2026-01-01T00:00:05Z","n":5}' | kcat -P -b "$SC_KAFKA" -t meta_hostile_json -p 0 -K '|' -H "$(printf 'x=two\nlines, "quoted" \\ and\ttab')"
CREATE FUNCTION sc_test.meta_hostile(suffix text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM streamcube_create_cube('meta_hostile_csv_' || suffix, 'kafka', 'meta_hostile_csv',
        'ts timestamptz, n int, k text, kb bytea, x text, hdrs jsonb', 'ts', '1 day', 'csv',
        '{"null": "NULL", "fields": {"k": {"kafka": "key"}, "kb": {"kafka": "key"},
          "x": {"kafka": "header", "name": "x"}, "hdrs": {"kafka": "headers"}}}');
    PERFORM streamcube_create_cube('meta_hostile_json_' || suffix, 'kafka', 'meta_hostile_json',
        'ts timestamptz, n int, k text, kb bytea, x text, hdrs jsonb', 'ts', '1 day', 'json',
        '{"fields": {"k": {"kafka": "key"}, "kb": {"kafka": "key"},
          "x": {"kafka": "header", "name": "x"}, "hdrs": {"kafka": "headers"}}}');
END $$;
SELECT sc_test.meta_hostile('on');
SELECT streamcube_wait('meta_hostile_csv_on', '60 s'), streamcube_wait('meta_hostile_json_on', '60 s');
ALTER SYSTEM SET streamcube.direct_insert = off;
SELECT pg_reload_conf();
SELECT pg_sleep(0.5);
SELECT sc_test.meta_hostile('off');
SELECT streamcube_wait('meta_hostile_csv_off', '60 s'), streamcube_wait('meta_hostile_json_off', '60 s');
ALTER SYSTEM RESET streamcube.direct_insert;
SELECT pg_reload_conf();
SELECT c, sc_test.writers(c::regclass)
FROM unnest('{meta_hostile_csv_on,meta_hostile_json_on,meta_hostile_csv_off,meta_hostile_json_off}'::text[]) c;
SELECT n, k, k IS NULL AS k_null, kb, x = E'two\nlines, "quoted" \\ and\ttab' AS x_exact,
       hdrs ->> 'x' = x AS hdrs_exact
FROM meta_hostile_csv_on ORDER BY n;
SELECT count(*) AS rows,
       count(*) FILTER (WHERE convert_from(kb, 'UTF8') = k) AS bytea_matches_text
FROM meta_hostile_csv_on;
SELECT f, (SELECT array_agg(r ORDER BY r) FROM (SELECT (n, k, kb, x, hdrs)::text r FROM meta_hostile_csv_on) a)
         = (SELECT array_agg(r ORDER BY r) FROM (SELECT (n, k, kb, x, hdrs)::text r FROM meta_hostile_csv_off) b) AS same_rows
FROM (VALUES ('csv')) v(f)
UNION ALL
SELECT f, (SELECT array_agg(r ORDER BY r) FROM (SELECT (n, k, kb, x, hdrs)::text r FROM meta_hostile_json_on) a)
         = (SELECT array_agg(r ORDER BY r) FROM (SELECT (n, k, kb, x, hdrs)::text r FROM meta_hostile_json_off) b)
FROM (VALUES ('json')) v(f);
SELECT (SELECT array_agg(r ORDER BY r) FROM (SELECT (n, k, kb, x, hdrs)::text r FROM meta_hostile_csv_on) a)
     = (SELECT array_agg(r ORDER BY r) FROM (SELECT (n, k, kb, x, hdrs)::text r FROM meta_hostile_json_on) b)
       AS csv_same_as_json;
SELECT count(*) AS dead_letters FROM streamcube.dead_letters d JOIN streamcube.cubes c USING (cube_id)
WHERE c.relid::text LIKE 'meta_hostile%';
SELECT streamcube_drop_cube(c) FROM unnest(ARRAY['meta_hostile_csv_on', 'meta_hostile_json_on',
       'meta_hostile_csv_off', 'meta_hostile_json_off']) AS c;
DROP FUNCTION sc_test.meta_hostile(text);

-- What the columns may be, checked at creation.
SET ROLE sc_admin;
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_events', 'ts timestamptz, t text', 'ts', '1 day', 'json',
       '{"fields": {"t": {"kafka": "timestamp"}}}');
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_events', 'ts timestamptz, h text', 'ts', '1 day', 'json',
       '{"fields": {"h": {"kafka": "headers"}}}');
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_events', 'ts timestamptz, t int', 'ts', '1 day', 'json',
       '{"fields": {"t": {"kafka": "timestamp_type"}}}');
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_events', 'ts timestamptz, v int', 'ts', '1 day', 'json',
       '{"fields": {"v": {"kafka": "value"}}}');
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_events', 'ts timestamptz, t bytea', 'ts', '1 day', 'json',
       '{"fields": {"t": {"kafka": "topic"}}}');
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_events', 'ts timestamptz, h text', 'ts', '1 day', 'json',
       '{"fields": {"h": {"kafka": "header"}}}');
-- a key or header type whose input function raises more than data errors
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_events', 'ts timestamptz, h regclass', 'ts', '1 day', 'json',
       '{"fields": {"h": {"kafka": "key"}}}');
-- a Kafka timestamp is an instant: a timestamp (without time zone) time column would be off
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_events', 'ts timestamp, t text', 'ts', '1 day', 'json',
       '{"fields": {"ts": {"kafka": "timestamp"}}}');
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_events', 'ts timestamptz, h text', 'ts', '1 day', 'json',
       '{"fields": {"h": {"kafka": "partition"}}}');
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_events', 'ts timestamptz, h text', 'ts', '1 day', 'json',
       '{"fields": {"h": {"kafka": "key", "name": "x"}}}');
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_events', 'ts timestamptz, h text', 'ts', '1 day', 'json',
       '{"fields": {"h": {"name": "x"}}}');
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_events', 'ts timestamptz, h text', 'ts', '1 day', 'json',
       '{"fields": {"ts": {"kafka": "key"}}}');
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_events', 'ts timestamptz, a jsonb, b jsonb', 'ts', '1 day', 'json',
       '{"fields": {"a": {"kafka": "value"}, "b": {"kafka": "value"}}}');
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_csv', 'ts timestamptz, c text', 'ts', '1 day', 'csv',
       '{"fields": {"c": "country"}}');
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_csv', 'ts timestamptz, v jsonb', 'ts', '1 day', 'csv',
       '{"fields": {"v": {"kafka": "value"}}}');
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_events', 'ts timestamptz, c text', 'ts', '1 day', 'jsonb');
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_events', 'ts timestamptz, a jsonb, b jsonb', 'ts', '1 day', 'jsonb');
SELECT streamcube_create_cube('meta_bad', 'kafka', 'meta_events', 'ts timestamptz', 'ts', '1 day', 'xml');
RESET ROLE;
SELECT count(*) FROM pg_class WHERE relname = 'meta_bad';

SELECT streamcube_drop_cube('meta_events');
SELECT streamcube_drop_cube('meta_csv');
SELECT streamcube_drop_cube('meta_doc');
