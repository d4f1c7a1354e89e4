--
-- control: pause and resume keep every message exactly once; drop stops
-- the receiver.
--
\getenv kafka SC_KAFKA
\set VERBOSITY default

\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" control_events 2 >/dev/null
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic control_events --count 1000 --format json --start-ts 1767225600 2>/dev/null
SELECT streamcube_create_cube('control_events', 'kafka', 'control_events',
       'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 day');
SELECT streamcube_wait('control_events', '60 s');
SELECT count(*) FROM control_events;

-- Paused: the receiver stays, holds no Kafka consumer, ingests nothing.
SELECT streamcube_pause('control_events');
SELECT sc_test.wait_for($$SELECT EXISTS (SELECT 1 FROM streamcube.consumers WHERE cube = 'control_events'::regclass AND state = 'paused')$$);
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic control_events --count 500 --format json --start-ts 1767225600 2>/dev/null
SELECT streamcube_wait('control_events', '2 s') AS caught_up;
SELECT count(*) FROM control_events;
SELECT state, positions FROM streamcube.consumers WHERE cube = 'control_events'::regclass;

-- Resumed: exactly the messages produced meanwhile are added.
SELECT streamcube_resume('control_events');
SELECT streamcube_wait('control_events', '60 s');
SELECT count(*), count(DISTINCT (_partition, _offset)) FROM control_events;
SELECT state, positions, lag FROM streamcube.consumers WHERE cube = 'control_events'::regclass;

-- Pause and resume while messages flow, several times.
\! ( "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic control_events --count 3000 --rate 3000 --format json --start-ts 1767225600 2>/dev/null & )
SELECT streamcube_pause('control_events');
SELECT pg_sleep(0.3);
SELECT streamcube_resume('control_events');
SELECT pg_sleep(0.3);
SELECT streamcube_pause('control_events');
SELECT pg_sleep(0.3);
SELECT streamcube_resume('control_events');
-- all 3000 are in Kafka before we wait for the cube to catch up
SELECT sc_test.wait_for($$SELECT sum(high_watermark) = 4500 FROM streamcube_check_cluster('kafka') WHERE topic = 'control_events'$$);
SELECT streamcube_wait('control_events', '60 s');
SELECT count(*), count(DISTINCT (_partition, _offset)) FROM control_events;
SELECT _partition, max(_offset) + 1 AS next_offset FROM control_events GROUP BY 1 ORDER BY 1;

-- Drop: the receiver goes away and so does the table.
SELECT streamcube_drop_cube('control_events');
SELECT sc_test.wait_for($$SELECT NOT EXISTS (SELECT 1 FROM streamcube._receivers() WHERE cube_id NOT IN (SELECT cube_id FROM streamcube.cubes))$$);
SELECT to_regclass('control_events');

-- Option replica_sets deals the partitions to several replica sets, one
-- receiver each; together they still ingest every message exactly once.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" split_events 4 >/dev/null
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic split_events --count 4000 --format csv --start-ts 1767225600 2>/dev/null
SELECT streamcube_create_cube('split_events', 'kafka', 'split_events',
       'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 day', 'csv',
       '{"replica_sets": ["rs_a", "rs_b"]}');
SELECT streamcube_wait('split_events', '60 s');
SELECT count(*), count(DISTINCT (_partition, _offset)) FROM split_events;
SELECT sc_test.wait_for($$SELECT bool_and(positions = '{1000,1000}') FROM streamcube.consumers WHERE cube = 'split_events'::regclass$$);
SELECT replica_set, state, partitions, positions FROM streamcube.consumers
WHERE cube = 'split_events'::regclass ORDER BY replica_set;
SELECT count(DISTINCT pid) AS receivers FROM streamcube.consumers WHERE cube = 'split_events'::regclass;
SELECT streamcube_create_cube('too_many_sets', 'kafka', 'split_events', 'ts timestamptz, v int', 'ts', '1 day', 'json',
       '{"replica_sets": ["a", "b", "c", "d", "e"]}');
SELECT streamcube_create_cube('dup_sets', 'kafka', 'split_events', 'ts timestamptz, v int', 'ts', '1 day', 'json',
       '{"replica_sets": ["a", "a"]}');
SELECT streamcube_create_cube('bad_sets', 'kafka', 'split_events', 'ts timestamptz, v int', 'ts', '1 day', 'json',
       '{"replica_sets": "a"}');
SELECT streamcube_drop_cube('split_events');
