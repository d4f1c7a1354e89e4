--
-- ingest_json: a known JSON stream over several partitions and windows
-- lands exactly once, and the cube equals what Kafka holds.
--
\getenv kafka SC_KAFKA
\set VERBOSITY default

-- 3000 events, 3.6 s apart from 2026-01-01 00:00 UTC: three hourly windows;
-- event i goes to partition i % 3.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" json_events 3 >/dev/null
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic json_events --count 3000 --format json --start-ts 1767225600 --step-ms 3600 2>/dev/null

SELECT streamcube_create_cube('json_events', 'kafka', 'json_events',
       'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 hour');
SELECT streamcube_wait('json_events', '120 s');

SELECT count(*) AS rows, count(DISTINCT (_partition, _offset)) AS distinct_positions FROM json_events;
SELECT _partition, count(*), min(_offset), max(_offset) FROM json_events GROUP BY 1 ORDER BY 1;
SELECT window_start, window_end, state, rows
FROM streamcube.segments WHERE cube = 'json_events'::regclass AND window_start < '2026-01-02'
ORDER BY window_start;
SELECT sc_test.wait_for($$SELECT lag = 0 AND positions = '{1000,1000,1000}' FROM streamcube.consumers WHERE cube = 'json_events'::regclass$$);
SELECT state, partitions, positions, high_watermarks, lag FROM streamcube.consumers WHERE cube = 'json_events'::regclass;

-- The cube holds exactly the messages of the topic, value for value.
CREATE TEMP TABLE raw (partition int, "offset" bigint, payload text);
\copy raw FROM PROGRAM 'kcat -C -q -e -b "$SC_KAFKA" -t json_events -o beginning -f ''%p\t%o\t%s\n'''
SELECT count(*) AS raw_messages FROM raw;
CREATE TEMP VIEW expected AS
SELECT partition AS _partition, "offset" AS _offset, (j->>'ts')::timestamptz AS ts, j->>'country' AS country,
       j->>'device' AS device, (j->>'amount')::numeric AS amount, (j->>'qty')::int AS qty
FROM (SELECT partition, "offset", payload::jsonb AS j FROM raw) r;
SELECT count(*) AS missing FROM (SELECT * FROM expected EXCEPT SELECT _partition, _offset, ts, country, device, amount, qty FROM json_events) d;
SELECT count(*) AS unexpected FROM (SELECT _partition, _offset, ts, country, device, amount, qty FROM json_events EXCEPT SELECT * FROM expected) d;

-- Plain SQL over the cube.
SELECT date_trunc('hour', ts) AS hour, count(*) FROM json_events GROUP BY 1 ORDER BY 1;
SELECT (SELECT sum(amount) FROM json_events) = (SELECT sum(amount) FROM expected) AS amounts_match;

-- More messages arrive: only they are added.
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic json_events --count 300 --format json --start-ts 1767236400 --step-ms 1000 2>/dev/null
SELECT streamcube_wait('json_events', '60 s');
SELECT count(*) AS rows, count(DISTINCT (_partition, _offset)) AS distinct_positions,
       max(_offset) FILTER (WHERE _partition = 0) AS last_offset_p0 FROM json_events;

-- Nested JSON through the "fields" option: key paths as dotted text or arrays;
-- a json(b) column takes a whole object; unknown keys are ignored, missing ones give NULL.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" nested_events 1 >/dev/null
\! printf '%s\n' '{"event":{"time":"2026-01-01T00:00:01Z","user":{"id":7,"name":"ann"}},"value":1.5,"tags":["a","b"]}' '{"event":{"time":"2026-01-01T00:00:02+01:00","user":{"id":8}},"value":null,"ignored":{"x":1}}' '{"value":3,"event":{"user":{"id":"9"},"time":"2026-01-01 00:00:03"}}' | kcat -P -b "$SC_KAFKA" -t nested_events -p 0
SELECT streamcube_create_cube('nested', 'kafka', 'nested_events',
       'ts timestamptz, user_id int, user_name text, value numeric, tags jsonb, event jsonb', 'ts', '1 hour', 'json',
       '{"fields": {"ts": "event.time", "user_id": ["event", "user", "id"], "user_name": "event.user.name"}}');
SELECT streamcube_wait('nested', '60 s');
SELECT ts, user_id, user_name, value, tags, event->'user' AS event_user, _offset FROM nested ORDER BY _offset;

-- start => latest: only what is produced after creation.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" late_start 2 >/dev/null
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic late_start --count 10 --format json --start-ts 1767225600 2>/dev/null
SELECT streamcube_create_cube('late_start', 'kafka', 'late_start',
       'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 hour', 'json', '{"start": "latest"}');
SELECT array_agg("offset" ORDER BY partition) AS checkpoints FROM streamcube.checkpoints k
JOIN streamcube.cubes c USING (cube_id) WHERE c.relid = 'late_start'::regclass;
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic late_start --count 4 --format json --start-ts 1767225600 2>/dev/null
SELECT streamcube_wait('late_start', '60 s');
SELECT _partition, _offset FROM late_start ORDER BY 1, 2;

-- A transactional producer leaves a commit marker after its messages: the
-- partition ends one offset past the last message, and the cube still
-- catches up to it.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" txn_events 1 >/dev/null
\! for i in 1 2 3 4 5; do echo "{\"ts\":\"2026-01-01T00:00:0${i}Z\",\"qty\":$i}"; done | kcat -P -b "$SC_KAFKA" -t txn_events -p 0 -m 60 -X transactional.id=streamcube-regress 2>/dev/null && echo "5 messages committed in one transaction"
-- The commit marker is written after the producer returns: wait until
-- Kafka serves the committed messages (5 + the marker).
SELECT sc_test.wait_for($$SELECT high_watermark = 6 FROM streamcube_check_cluster('kafka') WHERE topic = 'txn_events'$$);
SELECT streamcube_create_cube('txn_events', 'kafka', 'txn_events', 'ts timestamptz, qty int', 'ts');
SELECT streamcube_wait('txn_events', '60 s');
SELECT count(*) AS rows, sum(qty), max(_offset) AS last_offset FROM txn_events;
SELECT positions, high_watermarks, lag FROM streamcube.consumers WHERE cube = 'txn_events'::regclass;
SELECT streamcube_drop_cube('txn_events');

SELECT streamcube_drop_cube('nested');
SELECT streamcube_drop_cube('late_start');
