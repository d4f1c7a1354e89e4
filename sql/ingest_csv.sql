--
-- ingest_csv: CSV messages, COPY's CSV rules, custom delimiter, quote and
-- null string; malformed records are dead letters, never row fragments.
--
\getenv kafka SC_KAFKA
\set VERBOSITY default

-- 2000 events, 9 s apart from 2026-01-01 00:00 UTC over 4 partitions: five hourly windows.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" csv_events 4 >/dev/null
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic csv_events --count 2000 --format csv --start-ts 1767225600 --step-ms 9000 2>/dev/null
SELECT streamcube_create_cube('csv_events', 'kafka', 'csv_events',
       'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 hour', 'csv');
SELECT streamcube_wait('csv_events', '120 s');
SELECT count(*) AS rows, count(DISTINCT (_partition, _offset)) AS distinct_positions FROM csv_events;
SELECT _partition, count(*), max(_offset) + 1 AS next_offset FROM csv_events GROUP BY 1 ORDER BY 1;
SELECT count(*) AS windows, sum(rows) AS rows FROM streamcube.segments
WHERE cube = 'csv_events'::regclass AND window_start < '2026-01-02';

-- Value for value what Kafka holds.
CREATE TEMP TABLE raw (partition int, "offset" bigint, ts timestamptz, country text, device text, amount numeric, qty int);
\copy raw FROM PROGRAM 'kcat -C -q -e -b "$SC_KAFKA" -t csv_events -o beginning -f ''%p,%o,%s\n''' (FORMAT csv)
SELECT count(*) AS missing FROM (SELECT * FROM raw EXCEPT SELECT _partition, _offset, ts, country, device, amount, qty FROM csv_events) d;
SELECT count(*) AS unexpected FROM (SELECT _partition, _offset, ts, country, device, amount, qty FROM csv_events EXCEPT SELECT * FROM raw) d;

-- Delimiter ';', quote '''', null 'NA'; quoted delimiters, quotes and line breaks
-- are values; broken records go to the dead letters with the good ones kept.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" csv_custom 1 >/dev/null
\! printf '%s\n' "2026-01-01 00:00:01+00;'a;b';1" "2026-01-01 00:00:02+00;'it''s';NA" "2026-01-01 00:00:03+00;NA;3" "2026-01-01 00:00:04+00;'NA';4" "2026-01-01 00:00:05+00;x" "2026-01-01 00:00:06+00;x;6;7" "2026-01-01 00:00:07+00;'open;7" "NA;x;8" "yesterday-ish;x;9" "2026-01-01 00:00:10+00;x;ten" "2026-01-01 00:00:11+00;last;11" | kcat -P -b "$SC_KAFKA" -t csv_custom -p 0
\! printf "2026-01-01 00:00:12+00;'two\nlines';12" | kcat -P -b "$SC_KAFKA" -t csv_custom -p 0 -D '|'
\! printf "2026-01-01 00:00:13+00;x;13\n2026-01-01 00:00:14+00;y;14" | kcat -P -b "$SC_KAFKA" -t csv_custom -p 0 -D '|'
SELECT streamcube_create_cube('csv_custom', 'kafka', 'csv_custom', 'ts timestamptz, label text, n int', 'ts', '1 hour', 'csv',
       '{"delimiter": ";", "quote": "''", "null": "NA"}');
SELECT streamcube_wait('csv_custom', '60 s');
SELECT _offset, ts, label, label IS NULL AS label_null, n FROM csv_custom ORDER BY _offset;
SELECT "offset", convert_from(payload, 'UTF8') AS payload, error
FROM streamcube.dead_letters WHERE cube = 'csv_custom'::regclass ORDER BY "offset";

SELECT streamcube_drop_cube('csv_custom');
