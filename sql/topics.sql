--
-- topics: cubes of several topics, as a user sees them.  A list or a
-- pattern at creation and its errors, the _topic column, rows exact per
-- topic, streamcube.topics, lag() and the views by topic, partitions named
-- "topic:partition" in reassign and set_positions, dead letters with
-- their topic.  Crashes, reassignment under load and topics created later
-- are in test/t/055_topics.pl.
--
\set VERBOSITY default

\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" mt_eu 2 >/dev/null
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" mt_us 3 >/dev/null
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" mt_apac 1 >/dev/null
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic mt_eu --count 300 --format json --start-ts 1767225600 2>/dev/null
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic mt_us --count 200 --format json --start-ts 1767225600 2>/dev/null
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic mt_apac --count 100 --format json --start-ts 1767225600 2>/dev/null

SET ROLE sc_admin;
SELECT streamcube_create_replica_set('mt_a');
SELECT streamcube_create_replica_set('mt_b');

-- Errors: each names the cube and says what to give.
SELECT streamcube_create_cube('mt_bad', 'kafka', '[]', 'ts timestamptz', 'ts');
SELECT streamcube_create_cube('mt_bad', 'kafka', '["mt_eu", "mt_eu"]', 'ts timestamptz', 'ts');
SELECT streamcube_create_cube('mt_bad', 'kafka', '["mt_eu", 5]', 'ts timestamptz', 'ts');
SELECT streamcube_create_cube('mt_bad', 'kafka', '["mt_eu", "no/such"]', 'ts timestamptz', 'ts');
SELECT streamcube_create_cube('mt_bad', 'kafka', '["mt_eu", "mt_nowhere"]', 'ts timestamptz', 'ts');
SELECT streamcube_create_cube('mt_bad', 'kafka', '["mt_eu"', 'ts timestamptz', 'ts');
SELECT streamcube_create_cube('mt_bad', 'kafka', '{"regex": "mt_.*"}', 'ts timestamptz', 'ts');
SELECT streamcube_create_cube('mt_bad', 'kafka', '{"pattern": "mt_(eu"}', 'ts timestamptz', 'ts');
SELECT streamcube_create_cube('mt_bad', 'kafka', '{"pattern": ""}', 'ts timestamptz', 'ts');
SELECT streamcube_create_cube('mt_bad', 'kafka', '{"pattern": "mt_nothing_.*"}', 'ts timestamptz', 'ts');
SELECT streamcube_create_cube('mt_bad', 'kafka', '["mt_eu"]', 'ts timestamptz, _topic text', 'ts');
SELECT streamcube_create_cube('mt_bad', 'kafka', 'mt_eu', 'ts timestamptz, _topic text', 'ts');
SELECT streamcube_create_cube('mt_bad', 'kafka', '["mt_eu"]', 'ts timestamptz, k text', 'ts', '1 day', 'json',
       '{"fields": {"_topic": {"kafka": "key"}}}');
SELECT count(*) AS nothing_left FROM pg_class WHERE relname = 'mt_bad';

-- A list of three topics: each row says its topic; a message is
-- (_topic, _partition, _offset).
SELECT streamcube_create_cube('mt_list', 'kafka', '["mt_eu", "mt_us", "mt_apac"]',
       'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 day', 'json',
       '{"replica_sets": ["mt_a", "mt_b"]}') IS NOT NULL AS created;
RESET ROLE;
SELECT attname FROM pg_attribute WHERE attrelid = 'mt_list'::regclass AND attnum > 0 ORDER BY attnum;
SELECT length(kafka_cluster_id) > 0 AS knows_its_kafka_cluster FROM streamcube.cubes WHERE relid = 'mt_list'::regclass;
SELECT streamcube_wait('mt_list', '60 s');
SELECT _topic, count(*) AS rows, count(DISTINCT (_partition, _offset)) AS messages,
       array_agg(DISTINCT _partition ORDER BY _partition) AS partitions
FROM mt_list GROUP BY _topic ORDER BY _topic;
SELECT count(*) = count(DISTINCT (_topic, _partition, _offset)) AS unique_messages FROM mt_list;
SELECT topic, topic_no, added_by, pattern FROM streamcube.topics
WHERE cube = 'mt_list'::regclass ORDER BY topic_no;
SELECT topic, partition, replica_set, lag, lag_seconds FROM streamcube.lag('mt_list') ORDER BY topic, partition;
SELECT sc_test.wait_for($$SELECT count(*) = 2 FROM streamcube.consumers
                          WHERE cube = 'mt_list'::regclass AND state = 'running'$$);
SELECT replica_set, partitions, topics FROM streamcube.consumers
WHERE cube = 'mt_list'::regclass ORDER BY replica_set;
SELECT topic, partition, replica_set FROM streamcube.consumer_partitions
WHERE cube = 'mt_list'::regclass ORDER BY topic, partition;

-- Partitions are "topic:partition" where a user names one.
SET ROLE sc_admin;
SELECT streamcube_reassign('mt_list', '{"mt_a": [0, 1], "mt_b": [2]}');
SELECT streamcube_reassign('mt_list', '{"mt_a": ["mt_nowhere:0"]}');
SELECT streamcube_reassign('mt_list', '{"mt_a": ["mt_eu:7"]}');
SELECT streamcube_reassign('mt_list', '{"mt_a": ["mt_eu:0", "mt_eu:0"]}');
SELECT streamcube_reassign('mt_list', '{"mt_a": ["mt_eu:0", "mt_eu:1", "mt_us:0"]}');
SELECT r->'added' AS added, r->'removed' AS removed
FROM streamcube_reassign('mt_list',
       '{"mt_a": ["mt_eu:0", "mt_eu:1", "mt_us:0"], "mt_b": ["mt_us:1", "mt_us:2", "mt_apac:0"]}') AS r;
SELECT new_assignment FROM streamcube.reassign_log
WHERE cube = 'mt_list'::regclass AND step = 'assign' ORDER BY entry_id DESC LIMIT 1;
SELECT topics, partitions FROM streamcube.reassign_log
WHERE cube = 'mt_list'::regclass AND step = 'merge' ORDER BY entry_id DESC LIMIT 1;
RESET ROLE;
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic mt_us --count 200 --format json --start-ts 1767225600 2>/dev/null
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic mt_apac --count 50 --format json --start-ts 1767225600 2>/dev/null
SELECT streamcube_wait('mt_list', '60 s');
SELECT _topic, count(*) AS rows, count(DISTINCT (_partition, _offset)) AS messages
FROM mt_list GROUP BY _topic ORDER BY _topic;

-- Positions by "topic:partition"; a bare number is ambiguous here.
SELECT streamcube_pause('mt_list');
SELECT * FROM streamcube_set_positions('mt_list', '{"0": 5}');
SELECT * FROM streamcube_set_positions('mt_list', '{"mt_nowhere:0": 5}');
SELECT * FROM streamcube_set_positions('mt_list', '{"mt_apac:0": 1000}');
SELECT partition, old_position, new_position, skipped, topic
FROM streamcube_set_positions('mt_list', '{"mt_apac:0": "latest", "mt_eu:1": "latest"}') ORDER BY topic;
-- By time, over every partition of the three topics (Kafka asked per
-- topic): no message is that late, so each partition stays at its end.
SELECT topic, partition, new_position = old_position AS unchanged, skipped
FROM streamcube_set_positions('mt_list', '{"timestamp": "2030-01-01 00:00+00"}') ORDER BY topic, partition;
SELECT topic, partition, new_position = old_position AS unchanged
FROM streamcube_set_positions('mt_list', '{"mt_us:2": {"timestamp": "2030-01-01 00:00+00"}}');
-- A time among the messages of every partition of the three topics:
-- each moves back to its first message stamped at or after it, a
-- partition of each topic looked up in Kafka by its own topic; then
-- "latest" puts every partition back at its end (the cube stays paused
-- in between: nothing is read twice).
SELECT topic, partition, new_position < old_position AS moved_back
FROM streamcube_set_positions('mt_list', '{"timestamp": "2026-01-01 00:02:30+00"}') ORDER BY topic, partition;
SET client_min_messages = warning;
SELECT topic, partition, new_position > old_position AS moved_forward
FROM streamcube_set_positions('mt_list', '"latest"') ORDER BY topic, partition;
RESET client_min_messages;
-- The journal names each partition by its topic and its number there.
SELECT topic, partition, count(*) AS changes FROM streamcube.position_changes
WHERE cube = 'mt_list'::regclass GROUP BY topic, partition ORDER BY topic, partition;
SELECT streamcube_resume('mt_list');

-- A dead letter says its topic and the topic's partition.
\! printf '%s\n' 'not json' | kcat -P -b "$SC_KAFKA" -t mt_us -p 2
SELECT streamcube_wait('mt_list', '60 s');
SELECT topic, partition, error FROM streamcube.dead_letters WHERE cube = 'mt_list'::regclass;

-- A cube made with a list takes a new list: a topic taken out keeps its
-- rows and positions and is read no more; put back, it goes on where it
-- stopped.
SELECT streamcube_alter_cube('mt_list', '{"topic": {"pattern": "mt_.*"}}');
SELECT streamcube_alter_cube('mt_list', '{"topic": []}');
SELECT streamcube_alter_cube('mt_list', '{"topic": ["mt_eu", "mt_us", "mt_nowhere"]}');
SELECT streamcube_alter_cube('mt_list', '{"topic": null}');
-- Which topics a cube reads is an admin's call: its owner may not change them.
GRANT CREATE ON SCHEMA public TO sc_user;
ALTER TABLE mt_list OWNER TO sc_user;
SET ROLE sc_user;
SELECT streamcube_alter_cube('mt_list', '{"topic": ["mt_eu", "mt_us", "mt_other"]}');
RESET ROLE;
ALTER TABLE mt_list OWNER TO sc_admin;
REVOKE CREATE ON SCHEMA public FROM sc_user;
SELECT streamcube_alter_cube('mt_list', '{"topic": ["mt_eu", "mt_us"]}') - 'bad_message' AS options;
SELECT topic, topic_no, removed_at IS NOT NULL AS taken_out FROM streamcube.topics
WHERE cube = 'mt_list'::regclass ORDER BY topic_no;
SELECT topic FROM streamcube.cubes WHERE relid = 'mt_list'::regclass;
SELECT DISTINCT topic FROM streamcube.lag('mt_list') ORDER BY 1;
SELECT sc_test.wait_for($$SELECT count(*) = 5 FROM streamcube.consumer_partitions WHERE cube = 'mt_list'::regclass$$);
SELECT streamcube_reassign('mt_list', '{"mt_a": ["mt_apac:0"]}', '{"allow_partial": true}');
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic mt_apac --count 50 --format json --start-ts 1767225600 2>/dev/null
SELECT streamcube_wait('mt_list', '60 s');
SELECT count(*) AS apac_rows FROM mt_list WHERE _topic = 'mt_apac';
SELECT streamcube_alter_cube('mt_list', '{"topic": ["mt_eu", "mt_us", "mt_apac"]}') IS NOT NULL AS altered;
SELECT topic, topic_no, removed_at IS NOT NULL AS taken_out FROM streamcube.topics
WHERE cube = 'mt_list'::regclass ORDER BY topic_no;
SELECT streamcube_wait('mt_list', '60 s');
SELECT count(*) AS apac_rows, count(DISTINCT _offset) AS apac_offsets, max(_offset) + 1 AS apac_end
FROM mt_list WHERE _topic = 'mt_apac';
SELECT origin, step, old_assignment, new_assignment FROM streamcube.reassign_log
WHERE cube = 'mt_list'::regclass AND origin = 'streamcube_alter_cube' AND step = 'assign' ORDER BY entry_id;
SELECT old_value, new_value FROM streamcube.config_log
WHERE cube = 'mt_list'::regclass AND new_value ? 'topic' ORDER BY log_id;

-- CSV from two topics: each row's topic, also for a late row that goes
-- into a sealed window (through COPY) and a quoted record.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" mt_csv_a 1 >/dev/null
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" mt_csv_b 1 >/dev/null
\! printf '%s\n' '2026-01-01 00:00:00+00,a1,1' '2026-01-01 00:10:00+00,a2,2' | kcat -P -b "$SC_KAFKA" -t mt_csv_a -p 0
\! printf '%s\n' '2026-01-01 00:20:00+00,b1,3' '2026-01-01 00:30:00+00,"b,2",4' | kcat -P -b "$SC_KAFKA" -t mt_csv_b -p 0
SELECT streamcube_create_cube('mt_csv', 'kafka', '["mt_csv_a", "mt_csv_b"]', 'ts timestamptz, name text, n int',
       'ts', '1 hour', 'csv') IS NOT NULL AS created;
SELECT streamcube_wait('mt_csv', '60 s');
SELECT _topic, name, n, _partition, _offset FROM mt_csv ORDER BY n;
SELECT streamcube_seal_due() > 0 AS sealed;
\! printf '%s\n' '2026-01-01 00:40:00+00,b3,5' | kcat -P -b "$SC_KAFKA" -t mt_csv_b -p 0
SELECT streamcube_wait('mt_csv', '60 s');
SELECT _topic, name, n, _offset FROM mt_csv WHERE n = 5;
SELECT state FROM streamcube.segments WHERE cube = 'mt_csv'::regclass ORDER BY window_start;
SELECT streamcube_drop_cube('mt_csv');

-- Policy "pause" names the bad message's partition by its topic.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" mt_bad_a 1 >/dev/null
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" mt_bad_b 2 >/dev/null
\! printf '%s\n' '{"ts":"2026-01-01T00:00:00Z","n":1}' '{"ts":"2026-01-01T00:00:02Z","n":"three"}' | kcat -P -b "$SC_KAFKA" -t mt_bad_b -p 1
SELECT streamcube_create_cube('mt_pause', 'kafka', '["mt_bad_a", "mt_bad_b"]', 'ts timestamptz, n int', 'ts', '1 hour', 'json',
       '{"bad_message": "pause"}') IS NOT NULL AS created;
SELECT sc_test.wait_for($$SELECT EXISTS (SELECT 1 FROM streamcube.consumers WHERE cube = 'mt_pause'::regclass AND state = 'paused')$$);
SELECT _topic, _partition, _offset, n FROM mt_pause;
SELECT last_error, paused_reason FROM streamcube.consumers WHERE cube = 'mt_pause'::regclass;
SELECT paused_reason FROM streamcube.cube_status WHERE cube = 'mt_pause'::regclass;
SELECT streamcube_wait('mt_pause', '1 s');
SELECT streamcube_drop_cube('mt_pause');

-- A pattern: the topics it matches at creation, whole names only.
SET ROLE sc_admin;
SELECT streamcube_create_cube('mt_pat', 'kafka', '{"pattern": "mt_(eu|us)"}',
       'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 day', 'json',
       '{"replica_sets": ["mt_a"]}') IS NOT NULL AS created;
RESET ROLE;
SELECT streamcube_wait('mt_pat', '60 s');
SELECT topic, topic_no, added_by, pattern FROM streamcube.topics
WHERE cube = 'mt_pat'::regclass ORDER BY topic_no;
SELECT _topic, count(*) AS rows FROM mt_pat GROUP BY _topic ORDER BY _topic;
-- A pattern cube takes a new pattern: what no longer matches is taken out.
SELECT streamcube_alter_cube('mt_pat', '{"topic": ["mt_eu"]}');
SELECT streamcube_alter_cube('mt_pat', '{"topic": {"pattern": "mt_nothing"}}');
SELECT streamcube_alter_cube('mt_pat', '{"topic": {"pattern": "mt_eu"}}') IS NOT NULL AS altered;
SELECT topic, topic_no, removed_at IS NOT NULL AS taken_out, pattern FROM streamcube.topics
WHERE cube = 'mt_pat'::regclass ORDER BY topic_no;
SELECT sc_test.wait_for($$SELECT count(*) = 2 FROM streamcube.consumer_partitions WHERE cube = 'mt_pat'::regclass$$);
SELECT topic, partition FROM streamcube.consumer_partitions WHERE cube = 'mt_pat'::regclass ORDER BY 1, 2;

-- Others see no topics of cubes they cannot read, not even through a
-- function of their own that the planner would rather run first.
SET ROLE sc_other;
SELECT count(*) AS topics FROM streamcube.topics;
CREATE FUNCTION pg_temp.leak(text) RETURNS boolean LANGUAGE plpgsql COST 0.0000001 AS
$$ BEGIN RAISE NOTICE 'saw %', $1; RETURN true; END $$;
SELECT count(*) AS topics FROM streamcube.topics WHERE pg_temp.leak(topic);
SELECT count(*) AS partitions FROM streamcube.consumer_partitions WHERE pg_temp.leak(topic);
RESET ROLE;
SELECT count(*) AS views_not_barriers FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'streamcube' AND c.relkind = 'v'
  AND NOT coalesce('security_barrier=true' = ANY (c.reloptions), false);

SELECT streamcube_drop_cube('mt_pat');
SELECT streamcube_drop_cube('mt_list');
SELECT count(*) AS topics_left FROM streamcube.cube_topics t
WHERE NOT EXISTS (SELECT 1 FROM streamcube.cubes c WHERE c.cube_id = t.cube_id);
SET ROLE sc_admin;
SELECT streamcube_drop_replica_set('mt_a');
SELECT streamcube_drop_replica_set('mt_b');
RESET ROLE;
