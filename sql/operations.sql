--
-- operations: looking at and changing cubes in place.
--   streamcube.lag(): per partition, from Kafka and the catalog, with the
--   high watermark and the last stable offset of an open transaction.
--
\set VERBOSITY default

\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" lag_events 3 >/dev/null
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic lag_events --count 300 --format json --start-ts 1767225600 2>/dev/null
SET ROLE sc_admin;
SELECT streamcube_create_cube('lag_events', 'kafka', 'lag_events',
       'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 day', 'json');
RESET ROLE;
SELECT streamcube_wait('lag_events', '60 s');

-- Caught up: position = both ends, lag 0.
SELECT partition, replica_set, position, checkpoint, high_watermark, last_stable_offset, lag,
       last_batch_at <= now() AS moved, since_last_batch >= '0' AS since
FROM streamcube.lag('lag_events');

-- Paused, 30 more messages: the lag counts them, the position stays.
SELECT streamcube_pause('lag_events');
SELECT sc_test.wait_for($$SELECT state = 'paused' FROM streamcube.consumers WHERE cube = 'lag_events'::regclass$$);
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic lag_events --count 30 --format json --start-ts 1767225900 2>/dev/null
SELECT partition, position, high_watermark, last_stable_offset, lag FROM streamcube.lag('lag_events');

-- An open transaction of 6 messages: the high watermark moves, the last
-- stable offset does not, and the lag (to what a read_committed consumer
-- may read) does not either.
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic lag_events --count 6 --format json --start-ts 1767226000 --transactional-id sc_lag_txn --end hold >/tmp/sc_lag_txn.$PPID 2>/dev/null & echo $! >/tmp/sc_lag_txn.$PPID.pid
\! for i in $(seq 300); do grep -q open /tmp/sc_lag_txn.$PPID && break; sleep 0.1; done; cat /tmp/sc_lag_txn.$PPID
SELECT partition, position, high_watermark, last_stable_offset, lag FROM streamcube.lag('lag_events');
-- Aborted: its messages and the abort marker are offsets the cube passes.
\! pid=$(cat /tmp/sc_lag_txn.$PPID.pid); kill $pid; while kill -0 $pid 2>/dev/null; do sleep 0.1; done; rm -f /tmp/sc_lag_txn.$PPID /tmp/sc_lag_txn.$PPID.pid
SELECT partition, position, high_watermark, last_stable_offset, lag FROM streamcube.lag('lag_events');

-- Resumed: the committed 30 arrive, the aborted 6 never do; lag 0 again.
SELECT streamcube_resume('lag_events');
SELECT streamcube_wait('lag_events', '60 s');
SELECT count(*), count(DISTINCT (_partition, _offset)) FROM lag_events;
SELECT partition, position, high_watermark, last_stable_offset, lag FROM streamcube.lag('lag_events');

-- Only readers of the cube see it.
SET ROLE sc_user;
SELECT * FROM streamcube.lag('lag_events');
RESET ROLE;
GRANT SELECT ON lag_events TO sc_user;
SET ROLE sc_user;
SELECT count(*) FROM streamcube.lag('lag_events');
RESET ROLE;
REVOKE SELECT ON lag_events FROM sc_user;
SELECT * FROM streamcube.lag('no_such_cube');
SELECT * FROM streamcube.lag('pg_class');
SELECT * FROM streamcube.lag(NULL);

SELECT streamcube_drop_cube('lag_events');
