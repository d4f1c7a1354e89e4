--
-- compaction: sealed windows merge into coarser partitions (option
-- compact); late rows into a compacted range; retention of compacted
-- partitions; who may compact.
--
\getenv kafka SC_KAFKA
\set VERBOSITY default

-- The levels are checked at creation (and by streamcube_alter_cube).
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" comp_events 2 >/dev/null
SELECT streamcube_create_cube('comp_bad', 'kafka', 'comp_events', 'ts timestamptz, v int', 'ts', '1 hour', 'json', '{"compact": "1 day"}');
SELECT streamcube_create_cube('comp_bad', 'kafka', 'comp_events', 'ts timestamptz, v int', 'ts', '1 hour', 'json', '{"compact": [1]}');
SELECT streamcube_create_cube('comp_bad', 'kafka', 'comp_events', 'ts timestamptz, v int', 'ts', '1 hour', 'json', '{"compact": ["1 hour"]}');
SELECT streamcube_create_cube('comp_bad', 'kafka', 'comp_events', 'ts timestamptz, v int', 'ts', '1 hour', 'json', '{"compact": ["90 minutes"]}');
SELECT streamcube_create_cube('comp_bad', 'kafka', 'comp_events', 'ts timestamptz, v int', 'ts', '1 hour', 'json', '{"compact": ["1 day", "36 hours"]}');
SELECT streamcube_create_cube('comp_bad', 'kafka', 'comp_events', 'ts timestamptz, v int', 'ts', '1 hour', 'json', '{"compact": ["5 months"]}');
SELECT streamcube_create_cube('comp_bad', 'kafka', 'comp_events', 'ts timestamptz, v int', 'ts', '1 hour', 'json', '{"compact": ["1 day", "1 month", "7 days"]}');
SELECT streamcube_create_cube('comp_bad', 'kafka', 'comp_events', 'ts timestamptz, v int', 'ts', '7 hours', 'json', '{"compact": ["1 month"]}');
SELECT streamcube_create_cube('comp_bad', 'kafka', 'comp_events', 'ts timestamptz, v int', 'ts', '1 hour', 'json', '{"compact": ["1 day", "1 week", "4 weeks", "8 weeks", "16 weeks"]}');
-- one compaction locks every partition it merges: at most 96 at once
SELECT streamcube_create_cube('comp_bad', 'kafka', 'comp_events', 'ts timestamptz, v int', 'ts', '1 hour', 'json', '{"compact": ["1 month"]}');
SELECT streamcube_create_cube('comp_bad', 'kafka', 'comp_events', 'ts timestamptz, v int', 'ts', '5 minutes', 'json', '{"compact": ["1 day"]}');
SELECT streamcube_create_cube('comp_bad', 'kafka', 'comp_events', 'ts timestamptz, v int', 'ts', '1 hour', 'json', '{"compact": ["-1 day"]}');
SELECT count(*) AS cubes FROM streamcube.cubes WHERE relid::text = 'comp_bad';

-- 1,800 events 2 minutes apart from 2026-01-01 00:00 UTC over 2
-- partitions: 60 hourly windows of 30, over three days (the third half
-- full).  Windows of an hour compact into days by default.
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic comp_events --count 1800 --format json --start-ts 1767225600 --step-ms 120000 2>/dev/null
SELECT streamcube_create_cube('comp_events', 'kafka', 'comp_events',
       'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 hour');
SELECT streamcube_wait('comp_events', '60 s');
SELECT count(*), count(DISTINCT (_partition, _offset)), sum(qty) AS qty, sum(amount) AS amount FROM comp_events;

-- Nothing is sealed yet: nothing to compact.
SELECT streamcube_compact('comp_events');
SELECT streamcube_seal('comp_events');

-- Not by others; a bound of at least one partition.
SET ROLE sc_user;
SELECT streamcube_compact('comp_events');
RESET ROLE;
SELECT streamcube_compact('comp_events', 0);

-- At most 30 old partitions: the first day (24); the next would pass 30.
SELECT streamcube_compact('comp_events', 30);
SELECT window_start AT TIME ZONE 'UTC' AS window_start, window_end AT TIME ZONE 'UTC' AS window_end,
       state, windows, rows
FROM streamcube.segments WHERE cube = 'comp_events'::regclass AND window_start < '2026-01-02'
ORDER BY 1 LIMIT 3;
-- Then the rest: day two, and day three (its 12 empty hours join it too).
SELECT streamcube_compact('comp_events');
SELECT streamcube_compact('comp_events');
SELECT window_start AT TIME ZONE 'UTC' AS window_start, window_end AT TIME ZONE 'UTC' AS window_end,
       state, windows, rows, relation, p.relpersistence, sealed_upto
FROM streamcube.segments s JOIN pg_class p ON p.oid = s.relation
WHERE cube = 'comp_events'::regclass AND window_start < '2026-06-01' ORDER BY 1;
-- the same rows, once each; the sealed view reads the new partitions
SELECT count(*), count(DISTINCT (_partition, _offset)), sum(qty) AS qty, sum(amount) AS amount FROM comp_events;
SELECT count(*) AS in_sealed_view FROM comp_events_sealed;
-- every window keeps its own sealed_upto: 72 windows, 60 of them with rows
SELECT count(*) AS windows, count(*) FILTER (WHERE u.window_start IS NOT NULL) AS with_marks
FROM streamcube.segment_catalog s
LEFT JOIN (SELECT DISTINCT cube_id, window_start FROM streamcube.sealed_upto) u USING (cube_id, window_start)
WHERE s.cube_id = (SELECT cube_id FROM streamcube.cubes WHERE relid = 'comp_events'::regclass)
  AND s.window_start < '2026-06-01';
SELECT window_start AT TIME ZONE 'UTC' AS window_start, window_end AT TIME ZONE 'UTC' AS window_end, action, rows
FROM streamcube.segment_log WHERE cube = 'comp_events'::regclass AND action = 'compacted' ORDER BY log_id;

-- A compacted partition refuses ordinary writes, like a sealed one.
INSERT INTO comp_events VALUES ('2026-01-01 00:30+00', 'xx', 'x', 1, 1, 9, 9);
DELETE FROM comp_events_20260101;

-- Late rows: one for a window with rows, one for a window no row had
-- needed (filled in by the compaction): both land in their day, and move
-- their window's sealed_upto, nothing else.
\! printf '%s\n' '{"ts":"2026-01-02T05:30:00Z","country":"late","device":"d","amount":1,"qty":1}' | kcat -P -b "$SC_KAFKA" -t comp_events -p 0
\! printf '%s\n' '{"ts":"2026-01-03T20:15:00Z","country":"late","device":"d","amount":2,"qty":2}' | kcat -P -b "$SC_KAFKA" -t comp_events -p 1
SELECT sc_test.wait_for($$SELECT sum(high_watermark) = 1802 FROM streamcube_check_cluster('kafka') WHERE topic = 'comp_events'$$);
SELECT streamcube_wait('comp_events', '60 s');
SELECT tableoid::regclass AS partition, ts AT TIME ZONE 'UTC' AS ts, _partition, _offset
FROM comp_events WHERE country = 'late' ORDER BY ts;
SELECT window_start AT TIME ZONE 'UTC' AS window_start, partition, "offset"
FROM streamcube.sealed_upto
WHERE window_start IN ('2026-01-02 05:00+00', '2026-01-03 20:00+00') ORDER BY 1, 2;
SELECT count(*) AS windows_created_after FROM streamcube.segment_catalog
WHERE cube_id = (SELECT cube_id FROM streamcube.cubes WHERE relid = 'comp_events'::regclass)
  AND window_start < '2026-06-01' AND state = 'active';
SELECT count(*), count(DISTINCT (_partition, _offset)), sum(qty) AS qty FROM comp_events;

-- A coarser level: the three days merge into their month.
SELECT streamcube_alter_cube('comp_events', '{"compact": ["1 day", "1 month"]}') -> 'compact' AS compact;
SELECT streamcube_compact('comp_events');
SELECT streamcube_compact('comp_events');
SELECT window_start AT TIME ZONE 'UTC' AS window_start, window_end AT TIME ZONE 'UTC' AS window_end,
       state, windows, rows, relation
FROM streamcube.segments WHERE cube = 'comp_events'::regclass AND window_start < '2026-06-01';
SELECT count(*), count(DISTINCT (_partition, _offset)), sum(qty) AS qty FROM comp_events;
-- partitions a month apart: a query for one day reads one partition
EXPLAIN (COSTS OFF) SELECT count(*) FROM comp_events WHERE ts >= '2026-01-02' AND ts < '2026-01-03';

-- Retention drops a compacted partition once all of it is past.
SELECT streamcube_alter_cube('comp_events', '{"retention": "30 days"}') -> 'retention' AS retention;
SELECT streamcube_seal_due() AS sealed \gset
-- (the count covers every cube: the queries below show what it did here)
SELECT count(*) AS partitions_left FROM streamcube.segments
WHERE cube = 'comp_events'::regclass AND window_start < '2026-06-01';
SELECT count(*) AS windows_left FROM streamcube.segment_catalog
WHERE cube_id = (SELECT cube_id FROM streamcube.cubes WHERE relid = 'comp_events'::regclass)
  AND window_start < '2026-06-01';
SELECT window_start AT TIME ZONE 'UTC' AS window_start, window_end AT TIME ZONE 'UTC' AS window_end, action
FROM streamcube.segment_log WHERE cube = 'comp_events'::regclass AND action = 'dropped';

-- Without levels there is nothing to compact.
SELECT streamcube_alter_cube('comp_events', '{"compact": []}') -> 'compact' AS compact;
SELECT streamcube_compact('comp_events');
SELECT streamcube_drop_cube('comp_events');
