--
-- bad_messages: every kind of bad message lands in streamcube.dead_letters
-- with its error, in the same batch as the good rows, which are kept;
-- policy "pause" stops the cube at the bad message instead.
--
\getenv kafka SC_KAFKA
\set VERBOSITY default

-- All in one partition and one produce call, so they share a batch.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" bad_json 1 >/dev/null
\! printf '%s\n' '{"ts":"2026-01-01T00:00:00Z","name":"first","qty":1}' 'not json' '[1,2,3]' '"just a string"' '{"ts":null,"qty":1}' '{"name":"no time"}' '{"ts":"2026-01-01T00:00:00Z","qty":"abc"}' '{"ts":"not a time"}' '{"ts":"2026-01-01T00:00:00Z","qty":99999999999}' '{"ts":"2026-01-01T00:00:00Z","name":"trailing"} x' '{"ts":"2026-01-01T00:00:00Z","name":"tab\there","qty":2,"extra":[1,{"a":2}]}' '{"ts":"2026-01-01T00:00:00Z","price":-1}' '{"ts":"infinity"}' '{"ts":"0044-03-15 12:00:00+00 BC","name":"caesar"}' '{"ts":"2026-01-01T00:00:00Z","name":"last","qty":3}' | kcat -P -b "$SC_KAFKA" -t bad_json -p 0
\! printf '\n' | kcat -P -b "$SC_KAFKA" -t bad_json -p 0 -Z
SELECT streamcube_create_cube('bad_json', 'kafka', 'bad_json', 'ts timestamptz, name text, qty int, price numeric CHECK (price >= 0)', 'ts');
SELECT streamcube_wait('bad_json', '60 s');
SELECT _offset, ts, name, qty FROM bad_json ORDER BY _offset;
SELECT count(*) AS windows_before_christ FROM streamcube.segments WHERE cube = 'bad_json'::regclass AND window_start < '0001-01-01';
SELECT "offset", convert_from(payload, 'UTF8') AS payload, error
FROM streamcube.dead_letters WHERE cube = 'bad_json'::regclass ORDER BY "offset";
SELECT state, positions, last_error FROM streamcube.consumers WHERE cube = 'bad_json'::regclass;

-- The owner can read and delete its dead letters; another role sees none,
-- nor the receivers' errors, which quote message contents.
SET ROLE sc_other;
SELECT count(*) AS dead_letters FROM streamcube.dead_letters;
SELECT count(*) AS receivers FROM streamcube.consumers;
RESET ROLE;

-- Policy "pause": rows before the bad message are kept, the cube pauses
-- and says where and why.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" bad_pause 1 >/dev/null
\! printf '%s\n' '{"ts":"2026-01-01T00:00:00Z","n":1}' '{"ts":"2026-01-01T00:00:01Z","n":2}' '{"ts":"2026-01-01T00:00:02Z","n":"three"}' '{"ts":"2026-01-01T00:00:03Z","n":4}' | kcat -P -b "$SC_KAFKA" -t bad_pause -p 0
SELECT streamcube_create_cube('bad_pause', 'kafka', 'bad_pause', 'ts timestamptz, n int', 'ts', '1 hour', 'json',
       '{"bad_message": "pause"}');
SELECT sc_test.wait_for($$SELECT EXISTS (SELECT 1 FROM streamcube.consumers WHERE cube = 'bad_pause'::regclass AND state = 'paused')$$);
SELECT n, _offset FROM bad_pause ORDER BY _offset;
SELECT state, positions, last_error FROM streamcube.consumers WHERE cube = 'bad_pause'::regclass;
SELECT count(*) AS dead_letters FROM streamcube.dead_letters WHERE cube = 'bad_pause'::regclass;

-- Resuming retries the message: still bad, paused again.
SELECT streamcube_resume('bad_pause');
SELECT sc_test.wait_for($$SELECT EXISTS (SELECT 1 FROM streamcube.consumers WHERE cube = 'bad_pause'::regclass AND state = 'paused' AND last_error IS NOT NULL)$$);
SELECT count(*) AS rows FROM bad_pause;

-- After the cause is fixed (here: the column accepts text), resuming ingests it.
ALTER TABLE bad_pause ALTER COLUMN n TYPE text;
SELECT streamcube_resume('bad_pause');
SELECT streamcube_wait('bad_pause', '60 s');
SELECT n, _offset FROM bad_pause ORDER BY _offset;
SELECT state, last_error FROM streamcube.consumers WHERE cube = 'bad_pause'::regclass;
-- streamcube.health, one row per cube: running again, nothing waits
SELECT state, receivers, paused_reason, last_error IS NOT NULL AS has_error, dead_letters_last_hour
  FROM streamcube.health WHERE cube = 'bad_pause'::regclass;

-- Or skip it into the dead letters.
\! printf '%s\n' '{"ts":"2026-01-01T00:00:04Z","n":5}' 'broken' '{"ts":"2026-01-01T00:00:06Z","n":7}' | kcat -P -b "$SC_KAFKA" -t bad_pause -p 0
SELECT sc_test.wait_for($$SELECT EXISTS (SELECT 1 FROM streamcube.consumers WHERE cube = 'bad_pause'::regclass AND state = 'paused')$$);
SELECT last_error FROM streamcube.consumers WHERE cube = 'bad_pause'::regclass;
-- streamcube.health: paused, and why
SELECT state, receivers, paused_reason, last_error IS NOT NULL AS has_error, catch_up_eta
  FROM streamcube.health WHERE cube = 'bad_pause'::regclass;
SELECT streamcube_resume('bad_pause', skip_bad_message => true);
SELECT streamcube_wait('bad_pause', '60 s');
SELECT n, _offset FROM bad_pause ORDER BY _offset;
SELECT "offset", error FROM streamcube.dead_letters WHERE cube = 'bad_pause'::regclass;
SELECT state FROM streamcube.consumers WHERE cube = 'bad_pause'::regclass;

SELECT streamcube_drop_cube('bad_pause');
