--
-- clusters: streamcube_add_cluster, streamcube_drop_cluster and
-- streamcube_check_cluster; secret properties; who may do what; a real Kafka
-- broker (test/run-tests exports its bootstrap list as SC_KAFKA; it changes
-- from run to run, so it is never printed).
--
\getenv kafka SC_KAFKA
\set VERBOSITY default

-- Runs a statement that must fail and shows what a user sees without the
-- parts that vary from run to run: the SQLSTATE, the message up to the first
-- ': ' (what follows is librdkafka's report), the hint, whether it failed
-- within `bound`, and whether the message, detail or hint contain `secret`.
CREATE FUNCTION pg_temp.expect_error(stmt text, bound interval, secret text DEFAULT NULL)
RETURNS TABLE (err_code text, err_message text, err_hint text, within_bound boolean, shows_secret boolean)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    m text;
    d text;
    h text;
    c text;
BEGIN
    EXECUTE stmt;
    RETURN QUERY SELECT 'no error'::text, NULL::text, NULL::text, NULL::boolean, NULL::boolean;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS c = RETURNED_SQLSTATE, m = MESSAGE_TEXT,
                            d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
    RETURN QUERY SELECT c, split_part(m, ': ', 1), nullif(h, ''),
                        clock_timestamp() - t0 < bound,
                        secret IS NOT NULL AND strpos(concat_ws(' ', m, d, h), secret) > 0;
END
$$;

--
-- Adding clusters
--
SELECT streamcube_add_cluster('local', :'kafka');
SELECT streamcube_add_cluster('tuned', '127.0.0.1:9092, 127.0.0.2:9092',
    '{"socket.timeout.ms": 10000, "client.rack": "rack-1", "api.version.request": true, "max.in.flight": 3}');
-- NULL properties mean none
SELECT streamcube_add_cluster('plain', '127.0.0.1:9092', NULL);
SELECT name, bootstrap_servers, properties, created_by
FROM streamcube.kafka_clusters WHERE name <> 'local' ORDER BY name;
-- the real broker's entry, without its address
SELECT name, bootstrap_servers = :'kafka' AS bootstrap_as_given, properties, created_by
FROM streamcube.kafka_clusters WHERE name = 'local';

--
-- Every property goes through librdkafka, which has the last word
--
-- unknown property: librdkafka's own message
SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '{"no.such.property": "1"}');
SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '{"Security.Protocol": "SSL"}');
-- one property under both its names
SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '{"max.partition.fetch.bytes": 1048576, "fetch.message.max.bytes": 65536}');
-- invalid values
SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '{"socket.timeout.ms": "soon"}');
SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '{"compression.codec": "zip"}');
SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '{"security.protocol": "carrier-pigeon"}');
SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '{"enable.ssl.certificate.verification": "maybe"}');
-- properties streamcube sets itself
SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '{"bootstrap.servers": "127.0.0.1:9093"}');
SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '{"group.id": "mine"}');
SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '{"enable.auto.commit": true}');
-- properties must be a JSON object of scalars
SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '[]');
SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '"client.id=x"');
SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', 'null');
SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '{"client.id": {"a": 1}}');
SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '{"client.id": ["a"]}');
SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '{"sasl.password": null}');
-- names and bootstrap lists
SELECT streamcube_add_cluster('local', '127.0.0.1:9092');
SELECT streamcube_add_cluster('bad', '');
SELECT streamcube_add_cluster('bad', ' , ,');
SELECT streamcube_add_cluster('', '127.0.0.1:9092');
SELECT streamcube_add_cluster(NULL, '127.0.0.1:9092');
SELECT streamcube_add_cluster('bad', NULL);
-- the SQLSTATEs of those errors
SELECT stmt, e.err_code
FROM (VALUES
        ($$SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '{"no.such.property": "1"}')$$),
        ($$SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '{"socket.timeout.ms": "soon"}')$$),
        ($$SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '{"group.id": "mine"}')$$),
        ($$SELECT streamcube_add_cluster('bad', '127.0.0.1:9092', '[]')$$),
        ($$SELECT streamcube_add_cluster('local', '127.0.0.1:9092')$$),
        ($$SELECT streamcube_add_cluster('bad', ' ')$$),
        ($$SELECT streamcube_add_cluster(NULL, '127.0.0.1:9092')$$)
     ) AS s(stmt),
     LATERAL pg_temp.expect_error(stmt, '1 min') AS e;
-- none of them stored anything
SELECT name FROM streamcube.kafka_clusters ORDER BY name;

--
-- Secret properties: stored apart, shown as ********, never in a message
--
SELECT streamcube_add_cluster('secured', '127.0.0.1:1',
    '{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
      "sasl.username": "ingest", "sasl.password": "hunter2-sasl",
      "ssl.key.password": "hunter2-key"}');
SELECT name, properties FROM streamcube.kafka_clusters WHERE name = 'secured';
SELECT count(*) AS views_showing_secrets
FROM streamcube.kafka_clusters WHERE properties::text LIKE '%hunter2%';
-- in the catalog itself they are kept out of the properties column
SELECT name, properties, ARRAY(SELECT jsonb_object_keys(secrets) ORDER BY 1) AS secret_keys
FROM streamcube.clusters WHERE name = 'secured';
-- a rejected call that carries secrets does not repeat them
SELECT * FROM pg_temp.expect_error(
    $$SELECT streamcube_add_cluster('secured', '127.0.0.1:1', '{"sasl.password": "hunter2-dup"}')$$,
    '1 min', 'hunter2');
SELECT * FROM pg_temp.expect_error(
    $$SELECT streamcube_add_cluster('bad', '127.0.0.1:1', '{"sasl.password": "hunter2-x", "socket.timeout.ms": "soon"}')$$,
    '1 min', 'hunter2');
-- a secret property that librdkafka rejects (this build has no OAuth/OIDC)
SELECT * FROM pg_temp.expect_error(
    $$SELECT streamcube_add_cluster('bad', '127.0.0.1:1', '{"sasl.oauthbearer.client.secret": "hunter2-oidc"}')$$,
    '1 min', 'hunter2');
-- neither does a failed connection (the broker at 127.0.0.1:1 does not exist)
SET streamcube.kafka_timeout = '1500ms';
SELECT * FROM pg_temp.expect_error(
    $$SELECT * FROM streamcube_check_cluster('secured')$$, '4 s', 'hunter2');
RESET streamcube.kafka_timeout;
-- Properties are also checked together, as librdkafka builds a client:
-- a private key that does not parse is refused at once, without echoing it.
SELECT * FROM pg_temp.expect_error(
    $$SELECT streamcube_add_cluster('bad_key', '127.0.0.1:1',
        '{"security.protocol": "SSL", "ssl.key.pem": "hunter2-not-a-pem-key"}')$$, '4 s', 'hunter2');
SELECT * FROM pg_temp.expect_error(
    $$SELECT streamcube_add_cluster('bad_mechanism', '127.0.0.1:1',
        '{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "BOGUS"}')$$, '4 s', 'hunter2');
SELECT count(*) AS refused_stored FROM streamcube.kafka_clusters WHERE name IN ('bad_key', 'bad_mechanism');
-- librdkafka quotes a secret inside a longer message (here the OAuth
-- configuration its token builder cannot read): the message that reaches
-- the client and the server log has it masked.
\getenv kafka_sasl SC_KAFKA_SASL
SELECT streamcube_add_cluster('oauth_bad', :'kafka_sasl',
       '{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
         "enable.sasl.oauthbearer.unsecure.jwt": "true",
         "sasl.oauthbearer.config": "princ=hunter4-principal extension_x=hunter4-extension"}');
SET streamcube.kafka_timeout = '4s';
DO $$
DECLARE d text;
BEGIN
    PERFORM * FROM streamcube_check_cluster('oauth_bad');
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL;
    RAISE NOTICE 'detail: %', d;
END
$$;
\set VERBOSITY terse
SELECT * FROM streamcube_check_cluster('oauth_bad');
\set VERBOSITY default
RESET streamcube.kafka_timeout;
\getenv pgdir SC_PGDIR
SELECT strpos(pg_read_file(:'pgdir' || '/server.log'), 'hunter4') = 0 AS secret_not_logged,
       strpos(pg_read_file(:'pgdir' || '/server.log'), 'Unrecognized sasl.oauthbearer.config beginning at: ***') > 0 AS masked_logged;
-- Only what streamcube reports is masked: a text that PostgreSQL quotes
-- back in its own error is not, or the mask would tell whether a guess is
-- the secret of a cluster this session read.
SELECT 'hunter4-extension'::integer;
SELECT streamcube_drop_cluster('oauth_bad');

--
-- Who may do what
--
-- a role without streamcube_admin: no function, no catalog, no view
SET ROLE sc_user;
SELECT streamcube_add_cluster('mine', '127.0.0.1:9092');
SELECT streamcube_drop_cluster('local');
SELECT * FROM streamcube_check_cluster('local');
SELECT * FROM streamcube.clusters;
SELECT * FROM streamcube.kafka_clusters;
RESET ROLE;
-- even if someone grants EXECUTE, the functions check the caller themselves
GRANT EXECUTE ON FUNCTION streamcube_add_cluster(text, text, jsonb),
                          streamcube_drop_cluster(text),
                          streamcube_check_cluster(text) TO sc_user;
SET ROLE sc_user;
SELECT streamcube_add_cluster('mine', '127.0.0.1:9092');
SELECT streamcube_drop_cluster('local');
SELECT * FROM streamcube_check_cluster('local');
RESET ROLE;
REVOKE EXECUTE ON FUNCTION streamcube_add_cluster(text, text, jsonb),
                           streamcube_drop_cluster(text),
                           streamcube_check_cluster(text) FROM sc_user;
-- a member of streamcube_admin manages clusters and reads the view, with
-- secrets masked, but not the catalog table that holds them
SET ROLE sc_admin;
SELECT streamcube_add_cluster('admins', '127.0.0.1:9092', '{"sasl.password": "hunter2-admin"}');
SELECT name, bootstrap_servers, properties
FROM streamcube.kafka_clusters WHERE name IN ('admins', 'secured') ORDER BY name;
-- created_by is the role that called streamcube_add_cluster
SELECT name, created_by FROM streamcube.kafka_clusters WHERE name = 'admins';
SELECT secrets FROM streamcube.clusters;
SELECT streamcube_drop_cluster('admins');
SELECT streamcube_drop_cluster('plain');
RESET ROLE;
SELECT name FROM streamcube.kafka_clusters ORDER BY name;

--
-- streamcube_check_cluster against the real broker
--
-- a topic of 3 partitions with 5, 7 and 11 messages, and an empty one
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" sc_clusters_check 3 >/dev/null
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" sc_clusters_empty 1 >/dev/null
\! seq 1 5 | kcat -P -b "$SC_KAFKA" -t sc_clusters_check -p 0
\! seq 1 7 | kcat -P -b "$SC_KAFKA" -t sc_clusters_check -p 1
\! seq 1 11 | kcat -P -b "$SC_KAFKA" -t sc_clusters_check -p 2
SELECT * FROM streamcube_check_cluster('local')
WHERE topic IN ('sc_clusters_check', 'sc_clusters_empty')
ORDER BY topic, partition;
-- watermarks are read live: 3 more messages on partition 0
\! printf 'a\nb\nc\n' | kcat -P -b "$SC_KAFKA" -t sc_clusters_check -p 0
SELECT partition, low_watermark, high_watermark
FROM streamcube_check_cluster('local') WHERE topic = 'sc_clusters_check'
ORDER BY partition;
-- Kafka's internal topics are not listed
SELECT count(*) AS internal_topics
FROM streamcube_check_cluster('local') WHERE topic LIKE '\_\_%';
-- an administrator may check a cluster too
SET ROLE sc_admin;
SELECT count(*) AS partitions, sum(high_watermark) AS messages
FROM streamcube_check_cluster('local') WHERE topic = 'sc_clusters_check';
RESET ROLE;
-- an unknown cluster
SELECT * FROM streamcube_check_cluster('nowhere');

--
-- An unreachable cluster fails within streamcube.kafka_timeout, never hangs
--
SELECT streamcube_add_cluster('dead', '127.0.0.1:1');
SET streamcube.kafka_timeout = '1500ms';
SELECT * FROM pg_temp.expect_error($$SELECT * FROM streamcube_check_cluster('dead')$$, '4 s');
-- below the setting's minimum (100 ms), refused: a shorter bound would fail
-- every request before Kafka could answer
SET streamcube.kafka_timeout = '10ms';
RESET streamcube.kafka_timeout;

--
-- Dropping clusters
--
SELECT streamcube_drop_cluster('nowhere');
SELECT streamcube_drop_cluster(NULL);
SELECT streamcube_drop_cluster('dead');
SELECT streamcube_drop_cluster('dead');
SELECT streamcube_drop_cluster('tuned');
SELECT streamcube_drop_cluster('secured');
SELECT streamcube_drop_cluster('local');
SELECT count(*) AS clusters_left FROM streamcube.clusters;

-- A typo in the properties (here a missing quote after the password) is
-- refused without repeating them or logging the statement: a '{...}'
-- literal is the properties' text form, parsed inside the function.
SELECT streamcube_add_cluster('typo', '127.0.0.1:1', '{"sasl.username": "u", "sasl.password": "hunter5-typo}');
SELECT streamcube_alter_cluster('typo', NULL, '{"sasl.password": hunter5-alter}');
-- jsonb given as such still works
SELECT streamcube_add_cluster('as_jsonb', '127.0.0.1:1', '{"client.id": "x"}'::jsonb);
SELECT streamcube_alter_cluster('as_jsonb', properties => '{"client.id": "y"}');
SELECT streamcube_alter_cluster('as_jsonb', NULL, '{"client.rack": "r1"}');
SELECT properties FROM streamcube.kafka_clusters WHERE name = 'as_jsonb';
SELECT streamcube_drop_cluster('as_jsonb');
DELETE FROM streamcube.config_log WHERE cluster = 'as_jsonb';   -- the journal of later suites

-- A failing streamcube_add_cluster() leaves its statement, and the secret
-- in it, out of the server log.
\getenv pgdir SC_PGDIR
SELECT streamcube_add_cluster('', '127.0.0.1:1', '{"sasl.password": "hunter3-never-logged"}');
SELECT strpos(pg_read_file(:'pgdir' || '/server.log'), 'hunter3-never-logged') = 0 AS secret_not_logged,
       strpos(pg_read_file(:'pgdir' || '/server.log'), 'hunter5') = 0 AS typo_not_logged,
       strpos(pg_read_file(:'pgdir' || '/server.log'), 'Kafka cluster name must not be empty') > 0 AS error_logged;
