--
-- sealing: closed windows become logged, immutable partitions; late rows;
-- retention; the pg_cron schedule.
--
\getenv kafka SC_KAFKA
\set VERBOSITY default

-- 1,200 events 9 s apart from 2026-01-01 00:00 UTC over 2 partitions:
-- three hourly windows of 400.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" seal_events 2 >/dev/null
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic seal_events --count 1200 --format json --start-ts 1767225600 --step-ms 9000 2>/dev/null
SELECT streamcube_create_cube('seal_events', 'kafka', 'seal_events',
       'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 hour');
SELECT streamcube_wait('seal_events', '60 s');
SELECT count(*), sum(qty) AS qty FROM seal_events;

-- Not in the future; not by others.
SELECT streamcube_seal('seal_events', now() + interval '1 hour');
SET ROLE sc_user;
SELECT streamcube_seal('seal_events');
SELECT streamcube_seal_due();
RESET ROLE;

-- Seal what ended before 2026-01-01 02:00: two windows.
SELECT streamcube_seal('seal_events', '2026-01-01 02:00+00');
SELECT window_start AT TIME ZONE 'UTC' AS window_start, state, rows, sealed_at IS NOT NULL AS sealed_at,
       sealed_upto, p.relpersistence
FROM streamcube.segments s JOIN pg_class p ON p.oid = s.relation
WHERE cube = 'seal_events'::regclass AND window_start < '2026-01-02' ORDER BY 1;
-- the same rows, once each, active and sealed together
SELECT count(*), count(DISTINCT (_partition, _offset)), sum(qty) AS qty FROM seal_events;
-- each partition's checkpoint moved to the first offset still active
SELECT partitions, positions, checkpoints FROM streamcube.consumers WHERE cube = 'seal_events'::regclass;
SELECT cube, window_start AT TIME ZONE 'UTC' AS window_start, action, rows, done_by
FROM streamcube.segment_log WHERE cube = 'seal_events'::regclass ORDER BY log_id;

-- Sealed partitions refuse ordinary writes, through the cube or directly.
INSERT INTO seal_events VALUES ('2026-01-01 00:30+00', 'xx', 'x', 1, 1, 9, 9);
SELECT relation AS sealed FROM streamcube.segments
WHERE cube = 'seal_events'::regclass AND window_start = '2026-01-01 00:00+00' \gset
UPDATE :sealed SET qty = 0;
DELETE FROM seal_events WHERE ts < '2026-01-01 01:00+00';
TRUNCATE :sealed;
TRUNCATE seal_events;
SELECT count(*) FROM seal_events;

-- Late rows (option late = append, the default) join their sealed window,
-- and move its sealed_upto in the same transaction.
\! printf '%s\n' '{"ts":"2026-01-01T00:59:59Z","country":"late","device":"d","amount":1,"qty":1}' | kcat -P -b "$SC_KAFKA" -t seal_events -p 0
SELECT sc_test.wait_for($$SELECT sum(high_watermark) = 1201 FROM streamcube_check_cluster('kafka') WHERE topic = 'seal_events'$$);
SELECT streamcube_wait('seal_events', '60 s');
SELECT count(*) AS late_rows FROM :sealed WHERE country = 'late';
SELECT sealed_upto FROM streamcube.segments
WHERE cube = 'seal_events'::regclass AND window_start = '2026-01-01 00:00+00';

-- Sealing again seals nothing more; the rest seals later.
SELECT streamcube_seal('seal_events', '2026-01-01 02:00+00');
SELECT streamcube_seal('seal_events', '2026-01-01 03:00+00');
SELECT count(*) FILTER (WHERE state = 'sealed') AS sealed, count(*) FILTER (WHERE state = 'active') AS active
FROM streamcube.segments WHERE cube = 'seal_events'::regclass AND window_start < '2026-01-02';
SELECT count(*), count(DISTINCT (_partition, _offset)) FROM seal_events;

-- The view <cube>_sealed holds the sealed windows only: what a physical
-- standby can read, now()-relative predicates included.
SELECT sealed_view FROM streamcube.cubes WHERE relid = 'seal_events'::regclass;
SELECT count(*) AS sealed_rows, min(ts) AT TIME ZONE 'UTC' AS first, max(ts) AT TIME ZONE 'UTC' AS last
FROM seal_events_sealed WHERE ts > now() - interval '10 years';
SELECT (SELECT count(*) FROM seal_events_sealed) =
       (SELECT sum(rows) FROM streamcube.segments WHERE cube = 'seal_events'::regclass AND state = 'sealed') AS same_rows;

-- Option late = dead_letter: a row for a sealed window is a dead letter.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" seal_late 1 >/dev/null
\! printf '%s\n' '{"ts":"2026-01-01T00:00:01Z","qty":1}' '{"ts":"2026-01-01T00:00:02Z","qty":2}' | kcat -P -b "$SC_KAFKA" -t seal_late -p 0
SELECT streamcube_create_cube('seal_late', 'kafka', 'seal_late', 'ts timestamptz, qty int', 'ts', '1 hour', 'json',
       '{"late": "dead_letter"}');
SELECT streamcube_wait('seal_late', '60 s');
SELECT streamcube_seal('seal_late');
\! printf '%s\n' '{"ts":"2026-01-01T00:00:03Z","qty":3}' | kcat -P -b "$SC_KAFKA" -t seal_late -p 0
SELECT sc_test.wait_for($$SELECT sum(high_watermark) = 3 FROM streamcube_check_cluster('kafka') WHERE topic = 'seal_late'$$);
SELECT streamcube_wait('seal_late', '60 s');
SELECT _offset, qty FROM seal_late ORDER BY 1;
SELECT "offset", error FROM streamcube.dead_letters WHERE cube = 'seal_late'::regclass;

-- streamcube_seal_due(): every cube, then retention.  Retention is set in
-- the catalog here, as if seal_late had kept its sealed windows for a
-- day all along (options cannot be changed by a function yet): its window
-- of 2026-01-01 goes.  A message older than the retention is a dead
-- letter (its window would only be dropped again).
UPDATE streamcube.cubes SET options = options || '{"retention": "1 day"}'
WHERE relid = 'seal_late'::regclass;
-- (its count includes every other cube's windows: what it did to this one
-- is what the queries below show)
SELECT streamcube_seal_due() AS sealed \gset
SELECT count(*) AS windows_of_2026_01_01 FROM streamcube.segments
WHERE cube = 'seal_late'::regclass AND window_start < '2026-01-02';
SELECT action, window_start AT TIME ZONE 'UTC' AS window_start FROM streamcube.segment_log
WHERE cube = 'seal_late'::regclass ORDER BY log_id;
SELECT count(*) AS rows_left FROM seal_late;
SELECT streamcube_pause('seal_late');
SELECT streamcube_resume('seal_late');
\! printf '%s\n' '{"ts":"2026-01-01T00:00:04Z","qty":4}' | kcat -P -b "$SC_KAFKA" -t seal_late -p 0
SELECT sc_test.wait_for($$SELECT sum(high_watermark) = 4 FROM streamcube_check_cluster('kafka') WHERE topic = 'seal_late'$$);
SELECT streamcube_wait('seal_late', '60 s');
SELECT "offset", error FROM streamcube.dead_letters WHERE cube = 'seal_late'::regclass ORDER BY 1;
SELECT count(*) AS windows_of_2026_01_01 FROM streamcube.segments
WHERE cube = 'seal_late'::regclass AND window_start < '2026-01-02';

-- The pg_cron schedule: without pg_cron a clear error, then one job.
SELECT streamcube_schedule_sealing();
CREATE EXTENSION pg_cron;
SELECT streamcube_schedule_sealing() AS job \gset
SELECT streamcube_schedule_sealing('*/5 * * * *') = :job AS same_job;
SELECT schedule, command, jobname FROM cron.job WHERE jobid = :job;
SELECT cron.unschedule(:job);
DROP EXTENSION pg_cron;

-- Dropping a cube forgets the first offsets of its active windows (a
-- statement trigger on streamcube.cubes: the table has no foreign key).
SELECT cube_id AS seal_events_id FROM streamcube.cubes WHERE relid = 'seal_events'::regclass \gset
\! printf '{"ts":"%s","country":"now","device":"d","amount":1,"qty":1}\n' "$(date -u +%FT%TZ)" | kcat -P -b "$SC_KAFKA" -t seal_events -p 1
SELECT streamcube_wait('seal_events', '60 s');
SELECT count(*) > 0 AS first_offsets_before_drop FROM streamcube.window_offsets WHERE cube_id = :seal_events_id;
SELECT streamcube_drop_cube('seal_late');
SELECT streamcube_drop_cube('seal_events');
SELECT count(*) AS leftover_relations FROM pg_class WHERE relname LIKE 'seal\_%';
SELECT count(*) AS first_offsets_after_drop FROM streamcube.window_offsets WHERE cube_id = :seal_events_id;
