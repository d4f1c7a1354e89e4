--
-- operations: looking at and changing cubes in place.
--   streamcube.lag(): per partition, from Kafka and the catalog, with the
--   high watermark and the last stable offset of an open transaction.
--   streamcube_alter_cube(): what may change and what may not, the
--   journal, and a running receiver taking the change.
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
       last_batch_at <= now() AS moved, since_last_batch BETWEEN '0' AND '5 minutes' AS recent
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
\! for i in $(seq 300); do grep -qs open /tmp/sc_lag_txn.$PPID && break; sleep 0.1; done; cat /tmp/sc_lag_txn.$PPID
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

-- streamcube_alter_cube
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" alter_events 1 >/dev/null
\! printf '%s\n' '{"ts":"2026-01-01T00:00:00Z","n":1}' '{"ts":"2026-01-01T00:00:01Z","n":2}' | kcat -P -b "$SC_KAFKA" -t alter_events -p 0
SET ROLE sc_admin;
SELECT streamcube_create_cube('alter_events', 'kafka', 'alter_events', 'ts timestamptz, n int', 'ts', '1 day', 'json',
       '{"grace": "5 minutes", "late": "append"}');
RESET ROLE;
SELECT streamcube_wait('alter_events', '60 s');

-- Who may: the owner (and admins, superusers); not a plain role.
SET ROLE sc_user;
SELECT streamcube_alter_cube('alter_events', '{"grace": "1 minute"}');
RESET ROLE;
SET ROLE sc_admin;
SELECT streamcube_alter_cube('alter_events', '{"grace": "10 minutes", "retention": "3650 days", "bad_message": "pause"}');
-- The same again changes nothing and journals nothing.
SELECT streamcube_alter_cube('alter_events', '{"grace": "10 minutes"}');

-- What cannot change, and why.
SELECT streamcube_alter_cube('alter_events', '{"topic": "other"}');
SELECT streamcube_alter_cube('alter_events', '{"format": "csv"}');
SELECT streamcube_alter_cube('alter_events', '{"time_column": "n"}');
SELECT streamcube_alter_cube('alter_events', '{"segment_interval": "1 hour"}');
SELECT streamcube_alter_cube('alter_events', '{"start": "latest"}');
SELECT streamcube_alter_cube('alter_events', '{"replica_sets": ["x"]}');
-- Checked as at creation; nothing changes on an error.
SELECT streamcube_alter_cube('alter_events', '{"grace": "soon"}');
SELECT streamcube_alter_cube('alter_events', '{"late": "sometimes"}');
SELECT streamcube_alter_cube('alter_events', '{"colour": "blue"}');
SELECT streamcube_alter_cube('alter_events', '{"delimiter": ";"}');
SELECT streamcube_alter_cube('alter_events', '{"fields": {"nope": "x"}}');
SELECT streamcube_alter_cube('alter_events', '[]');
SELECT streamcube_alter_cube('alter_events', NULL);
SELECT streamcube_alter_cube('no_such_cube', '{}');
RESET ROLE;
SELECT options FROM streamcube.cubes WHERE relid = 'alter_events'::regclass;

-- The running receiver takes bad_message = pause: a bad message now pauses
-- the cube instead of going to the dead letters.
\! printf '%s\n' '{"ts":"2026-01-01T00:00:02Z","n":3}' '{"ts":"2026-01-01T00:00:03Z","n":"four"}' '{"ts":"2026-01-01T00:00:04Z","n":5}' | kcat -P -b "$SC_KAFKA" -t alter_events -p 0
SELECT sc_test.wait_for($$SELECT paused FROM streamcube.cubes WHERE relid = 'alter_events'::regclass$$);
SELECT n FROM alter_events ORDER BY n;
SELECT count(*) FROM streamcube.dead_letters WHERE cube = 'alter_events'::regclass;
-- null removes the option: dead_letter again; resumed, the message goes
-- to the dead letters and the rest follows, each once.
SET ROLE sc_admin;
SELECT streamcube_alter_cube('alter_events', '{"bad_message": null}');
SELECT streamcube_resume('alter_events');
SELECT streamcube_wait('alter_events', '60 s');
RESET ROLE;
SELECT n, _offset FROM alter_events ORDER BY _offset;
SELECT "offset", error FROM streamcube.dead_letters WHERE cube = 'alter_events'::regclass;

-- The journal: each change once, readable by the cube's readers only.
SELECT object_type, cube, cluster, old_value, new_value, changed_by, changed_at <= now() AS at
FROM streamcube.config_log ORDER BY log_id;
SET ROLE sc_user;
SELECT count(*) FROM streamcube.config_log;
RESET ROLE;

SELECT streamcube_drop_cube('alter_events');
SELECT count(*) FROM streamcube.config_log;

-- streamcube_alter_cluster: merge properties (null removes), replace the
-- bootstrap list, checked as at creation for the caller; journalled with
-- secrets masked.  The rotation of a password under load is in
-- test/t/025_alter_cluster.pl.
SET ROLE sc_admin;
SELECT streamcube_add_cluster('opcl', '127.0.0.1:1',
       '{"sasl.username": "u", "sasl.password": "hunter2-old", "client.id": "one"}');
SELECT streamcube_alter_cluster('opcl', properties => '{"sasl.password": "hunter2-new", "client.id": null, "socket.timeout.ms": 20000}');
SELECT name, bootstrap_servers, properties FROM streamcube.kafka_clusters WHERE name = 'opcl';
SELECT streamcube_alter_cluster('opcl', '127.0.0.2:1');
-- The same again changes nothing and journals nothing.
SELECT streamcube_alter_cluster('opcl', '127.0.0.2:1', '{"sasl.username": "u"}');
-- A property is stored under the name librdkafka knows it by, so a change
-- under its other name replaces it rather than standing beside it.
SELECT streamcube_alter_cluster('opcl', properties => '{"sasl.mechanism": "PLAIN", "max.partition.fetch.bytes": 65536}');
SELECT streamcube_alter_cluster('opcl', properties => '{"sasl.mechanisms": "SCRAM-SHA-256"}');
SELECT properties FROM streamcube.kafka_clusters WHERE name = 'opcl';
SELECT streamcube_alter_cluster('opcl', properties => '{"fetch.message.max.bytes": null, "sasl.mechanism": null}');
SELECT properties FROM streamcube.kafka_clusters WHERE name = 'opcl';
-- Errors change nothing.
SELECT streamcube_alter_cluster('opcl', properties => '{"sasl.mechanism": "PLAIN", "sasl.mechanisms": "PLAIN"}');
SELECT streamcube_alter_cluster('opcl');
SELECT streamcube_alter_cluster('opcl', ' , ');
SELECT streamcube_alter_cluster('opcl', properties => '[]');
SELECT streamcube_alter_cluster('opcl', properties => '{"no.such.property": "1"}');
SELECT streamcube_alter_cluster('opcl', properties => '{"socket.timeout.ms": "soon"}');
SELECT streamcube_alter_cluster('opcl', properties => '{"group.id": "mine"}');
SELECT streamcube_alter_cluster('opcl', properties => '{"ssl.ca.location": "/etc/passwd"}');
SELECT streamcube_alter_cluster('no_such_cluster', properties => '{"client.id": "x"}');
SELECT name, bootstrap_servers, properties FROM streamcube.kafka_clusters WHERE name = 'opcl';
RESET ROLE;
-- A superuser gives it a property that reads a server file: from then on
-- only a role that may set that property may change the cluster at all
-- (an admin could otherwise send its connection elsewhere).
SELECT streamcube_alter_cluster('opcl', properties => '{"ssl.ca.location": "/etc/ssl/certs/ca-certificates.crt"}');
-- An admin must give the secrets another role stored again (or they could
-- be sent to a broker of its choosing), and may then still not keep the
-- superuser's file property.
SET ROLE sc_admin;
SELECT streamcube_alter_cluster('opcl', '127.0.0.3:1');
SELECT streamcube_alter_cluster('opcl', '127.0.0.3:1', '{"sasl.password": "hunter2-again"}');
RESET ROLE;
SET ROLE sc_user;
SELECT streamcube_alter_cluster('opcl', '127.0.0.4:1');
RESET ROLE;

-- The journal: masked, admins only.
SELECT cluster, old_value, new_value, changed_by FROM streamcube.config_log
WHERE object_type = 'cluster' ORDER BY log_id;
SELECT count(*) AS secrets_shown FROM streamcube.config_log
WHERE old_value::text LIKE '%hunter2%' OR new_value::text LIKE '%hunter2%';
SET ROLE sc_user;
SELECT count(*) FROM streamcube.config_log WHERE object_type = 'cluster';
RESET ROLE;
SET ROLE sc_admin;
SELECT count(*) FROM streamcube.config_log WHERE object_type = 'cluster';
RESET ROLE;
SELECT streamcube_drop_cluster('opcl');
SELECT count(*) AS kept_after_drop FROM streamcube.config_log WHERE cluster = 'opcl';
