--
-- hardening: options checked at creation; a changed table; windows that
-- collide, flood or sit outside the rejection periods; tombstones and keys;
-- streamcube_wait on a paused cube; streamcube_set_positions.
--
\getenv kafka SC_KAFKA
\set VERBOSITY default

\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" hard_topic 1 >/dev/null

-- Options COPY would refuse, overflowing intervals, bad field paths.
SELECT streamcube_create_cube('h1', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '1 hour', 'csv', '{"null": ","}');
SELECT streamcube_create_cube('h1', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '1 hour', 'csv', '{"null": "\n"}');
SELECT streamcube_create_cube('h1', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '1 hour', 'csv', '{"quote": ";", "delimiter": ";"}');
SELECT streamcube_create_cube('h1', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '1 hour', 'csv', '{"delimiter": "\r"}');
SELECT streamcube_create_cube('h1', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '2147483647 days');
SELECT streamcube_create_cube('h1', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '-1 hour');
SELECT streamcube_create_cube('h1', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '1 hour', 'json', '{"grace": "2147483647 days"}');
-- a bad interval names its option (not only the interval's syntax)
SELECT streamcube_create_cube('h1', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '1 hour', 'json', '{"grace": "banana"}');
SELECT streamcube_create_cube('h1', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '1 hour', 'json', '{"retention": "soon"}');
SELECT streamcube_create_cube('h1', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '1 hour', 'json', '{"compact": ["1 day", "banana"]}');
SELECT streamcube_create_cube('h1', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '1 hour', 'json', '{"early_rejection_period": "1 month"}');
SELECT streamcube_create_cube('h1', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '1 hour', 'json', '{"tombstones": "keep"}');
SELECT streamcube_create_cube('h1', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '1 hour', 'json', '{"fields": {"v": "a..b"}}');
SELECT streamcube_create_cube('h1', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '1 hour', 'json', '{"fields": {"v": ["a", 1]}}');
SELECT streamcube_create_cube('h1', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '1 hour', 'json', '{"fields": {"v": []}}');
SELECT streamcube_create_cube('h1', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '1 hour', 'json', '{"fields": {"_offset": "o"}}');
SELECT streamcube_create_cube('h1', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '1 hour', 'json', '{"windows": 3}');
SELECT count(*) AS cubes FROM streamcube.cubes;

-- A name of a future window, taken by someone who may create tables in the
-- schema, and the next one taken by a type (a table's row type would need
-- its name): the cube picks another name and ingests.
CREATE TABLE public.hard_20260101_0000 (x int);
CREATE TYPE public.hard_20260101_0000_2 AS (x int);
\! printf '%s\n' 'k1:{"ts":"2026-01-01T00:00:01Z","v":"a"}' 'k2:{"ts":"2026-01-01T00:00:02Z","v":"b"}' | kcat -P -b "$SC_KAFKA" -t hard_topic -p 0 -K:
-- a tombstone with a key, a message without a key, one far in the future,
-- one far in the past (rejected by the option below)
\! printf 'k3:\n' | kcat -P -b "$SC_KAFKA" -t hard_topic -p 0 -K: -Z
\! printf '%s\n' '{"ts":"2026-01-01T00:00:03Z","v":"nokey"}' '{"ts":"2999-01-01T00:00:00Z","v":"future"}' '{"ts":"1999-01-01T00:00:00Z","v":"old"}' | kcat -P -b "$SC_KAFKA" -t hard_topic -p 0
SELECT sc_test.wait_for($$SELECT sum(high_watermark) = 6 FROM streamcube_check_cluster('kafka') WHERE topic = 'hard_topic'$$);
SELECT streamcube_create_cube('hard', 'kafka', 'hard_topic', 'ts timestamptz, v text', 'ts', '1 hour', 'json',
       '{"late_rejection_period": "3650 days"}');
SELECT streamcube_wait('hard', '60 s');
SELECT _offset, ts, v FROM hard ORDER BY _offset;
SELECT "offset", convert_from(key, 'UTF8') AS key, payload IS NULL AS null_payload, error
FROM streamcube.dead_letters WHERE cube = 'hard'::regclass ORDER BY "offset";
SELECT relation FROM streamcube.segments WHERE cube = 'hard'::regclass AND window_start = '2026-01-01 00:00+00';
SELECT state, last_error IS NULL AS no_error FROM streamcube.consumers WHERE cube = 'hard'::regclass;

-- DROP COLUMN forgets nothing: the cube, its positions and dead letters
-- stay, and the receiver goes on with the table as it is now.
ALTER TABLE hard ADD COLUMN extra int;
ALTER TABLE hard DROP COLUMN extra;
ALTER TABLE hard DROP COLUMN v;
SELECT count(*) AS cubes, (SELECT count(*) FROM streamcube.dead_letters WHERE cube = 'hard'::regclass) AS dead_letters
FROM streamcube.cubes WHERE relid = 'hard'::regclass;
\! printf '%s\n' '{"ts":"2026-01-01T00:00:04Z","v":"after drop"}' | kcat -P -b "$SC_KAFKA" -t hard_topic -p 0
SELECT sc_test.wait_for($$SELECT sum(high_watermark) = 7 FROM streamcube_check_cluster('kafka') WHERE topic = 'hard_topic'$$);
SELECT streamcube_wait('hard', '60 s');
SELECT _offset, ts FROM hard ORDER BY _offset;
SELECT state FROM streamcube.consumers WHERE cube = 'hard'::regclass;

-- A producer alone cannot stall a cube with windows: 60 messages in 60
-- different hours, at most streamcube.batch_max_windows (8) new windows
-- per batch, nothing lost.
\! for i in $(seq 0 59); do printf '{"ts":"2025-06-01T00:00:00Z","v":"%s"}\n' $i | sed "s/2025-06-01T00/2025-06-0$((1 + i / 24))T$(printf %02d $((i % 24)))/"; done | kcat -P -b "$SC_KAFKA" -t hard_topic -p 0
SELECT sc_test.wait_for($$SELECT sum(high_watermark) = 67 FROM streamcube_check_cluster('kafka') WHERE topic = 'hard_topic'$$);
SELECT streamcube_wait('hard', '60 s');
SELECT count(*) AS rows, count(DISTINCT date_trunc('hour', ts AT TIME ZONE 'UTC')) AS hours
FROM hard WHERE ts >= '2025-06-01 00:00+00' AND ts < '2025-06-04 00:00+00';
SELECT count(*) AS windows FROM streamcube.segments
WHERE cube = 'hard'::regclass AND window_start >= '2025-06-01 00:00+00' AND window_start < '2025-06-04 00:00+00';
-- the windows were made in transactions of at most 8 (the receiver's own,
-- between its batches): one created_at per transaction
SELECT count(*) >= 8 AS eight_or_more_transactions, max(n) <= 8 AS at_most_8_in_each
FROM (SELECT created_at, count(*) AS n FROM streamcube.segment_catalog
      WHERE cube_id = (SELECT cube_id FROM streamcube.cubes WHERE relid = 'hard'::regclass)
        AND window_start >= '2025-06-01 00:00+00' AND window_start < '2025-06-04 00:00+00'
      GROUP BY created_at) s;

-- streamcube_wait() is false, at once, for a paused cube.
SELECT streamcube_pause('hard');
SELECT streamcube_wait('hard', '30 s');

-- streamcube_set_positions: paused cubes only, offsets Kafka holds,
-- journalled; the cube then reads again from there.
SELECT streamcube_resume('hard');
SELECT * FROM streamcube_set_positions('hard', '"earliest"');
SELECT streamcube_pause('hard');
SELECT * FROM streamcube_set_positions('hard', '"middle"');
SELECT * FROM streamcube_set_positions('hard', '{"7": 1}');
SELECT * FROM streamcube_set_positions('hard', '{"0": 1000}');
SELECT * FROM streamcube_set_positions('hard', '{"x": 1}');
-- two keys naming one partition: refused, nothing applied or journalled
SELECT * FROM streamcube_set_positions('hard', '{"0": 5, "00": 7}');
SELECT streamcube_resume('hard', until => '{"0": 25, "00": 30}');
SET ROLE sc_user;
SELECT * FROM streamcube_set_positions('hard', '"earliest"');
RESET ROLE;
SELECT * FROM streamcube_set_positions('hard', '{"0": 62}');
SELECT partition, requested, old_position, old_checkpoint, new_position, changed_by
FROM streamcube.position_changes WHERE cube = 'hard'::regclass;
DELETE FROM hard WHERE _offset >= 62;
SELECT streamcube_resume('hard');
SELECT streamcube_wait('hard', '60 s');
SELECT count(*) AS rows_again FROM hard WHERE _offset >= 62;
SELECT streamcube_drop_cube('hard');
DROP TABLE public.hard_20260101_0000;
DROP TYPE public.hard_20260101_0000_2;
