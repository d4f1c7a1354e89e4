--
-- security: who may set which Kafka property; fixed search paths; what a
-- cube owner can and cannot make a more privileged reader run.
--
\getenv kafka SC_KAFKA
\set VERBOSITY default

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sc_files_admin') THEN
        CREATE ROLE sc_files_admin LOGIN IN ROLE streamcube_admin, pg_read_server_files;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sc_exec_admin') THEN
        CREATE ROLE sc_exec_admin LOGIN IN ROLE streamcube_admin, pg_execute_server_program;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sc_owner2') THEN
        CREATE ROLE sc_owner2 LOGIN IN ROLE streamcube_admin;
    END IF;
END
$$;
GRANT CREATE ON SCHEMA public TO sc_owner2;

-- 1. Every property of the linked librdkafka has a class; none is left
--    unclassified (a newer librdkafka with a new property fails here).
SELECT count(*) > 150 AS many, count(*) FILTER (WHERE class = 'unclassified') AS unclassified
FROM streamcube_kafka_properties();
SELECT class, required_role, count(*) FROM streamcube_kafka_properties() GROUP BY 1, 2 ORDER BY 1;
SELECT name, class, required_role, masked FROM streamcube_kafka_properties()
WHERE name IN ('sasl.kerberos.kinit.cmd', 'sasl.kerberos.principal', 'ssl.ca.location',
               'ssl.key.location', 'ssl.providers', 'plugin.library.paths', 'ssl.ca.pem',
               'ssl.key.pem', 'sasl.password', 'transactional.id', 'topic.offset.store.path',
               'ut_handle_ProduceResponse', 'internal.termination.signal')
ORDER BY name;

-- An admin without more privileges: file, program and code properties are
-- refused before librdkafka sees them (the kinit command would run at once).
SET ROLE sc_admin;
SELECT streamcube_add_cluster('x', '127.0.0.1:9092', '{"sasl.kerberos.kinit.cmd": "touch /tmp/sc_pwned"}');
SELECT streamcube_add_cluster('x', '127.0.0.1:9092', '{"security.protocol": "SASL_PLAINTEXT", "sasl.kerberos.principal": "$(touch /tmp/sc_pwned)"}');
SELECT streamcube_add_cluster('x', '127.0.0.1:9092', '{"security.protocol": "SASL_PLAINTEXT"}');
SELECT streamcube_add_cluster('x', '127.0.0.1:9092', '{"security.protocol": "SASL_SSL", "sasl.mechanisms": "GSSAPI"}');
-- decided on what librdkafka will use: it trims and case-folds the protocol
SELECT streamcube_add_cluster('x', '127.0.0.1:9092', '{"security.protocol": " sasl_plaintext"}');
SELECT streamcube_add_cluster('x', '127.0.0.1:9092', '{"security.protocol": "Sasl_Ssl ", "sasl.mechanism": "GSSAPI"}');
SELECT streamcube_add_cluster('x', '127.0.0.1:9092', '{"ssl.ca.location": "/etc/passwd"}');
SELECT streamcube_add_cluster('x', '127.0.0.1:9092', '{"ssl.keystore.location": "/etc/shadow"}');
SELECT streamcube_add_cluster('x', '127.0.0.1:9092', '{"ssl.providers": "legacy"}');
SELECT streamcube_add_cluster('x', '127.0.0.1:9092', '{"plugin.library.paths": "/tmp/evil.so"}');
SELECT streamcube_add_cluster('x', '127.0.0.1:9092', '{"topic.offset.store.path": "/tmp"}');
SELECT streamcube_add_cluster('x', '127.0.0.1:9092', '{"ut_handle_ProduceResponse": "1"}');
SELECT streamcube_add_cluster('x', '127.0.0.1:9092', '{"transactional.id": "t"}');
SELECT streamcube_add_cluster('x', '127.0.0.1:9092', '{"internal.termination.signal": "15"}');
\! test -e /tmp/sc_pwned && echo "a program ran" || echo "no program ran"
-- what an admin may set: SASL/PLAIN with a password, inline PEM, the system CA bundle
SELECT streamcube_add_cluster('plain_ok', '127.0.0.1:9092',
       '{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": "u", "sasl.password": "hunter2"}');
SELECT streamcube_add_cluster('pem_ok', '127.0.0.1:9092',
       '{"ssl.ca.location": "probe", "ssl.key.password": "s3cret"}');
SELECT name, properties FROM streamcube.kafka_clusters WHERE name IN ('plain_ok', 'pem_ok') ORDER BY 1;
RESET ROLE;

-- pg_read_server_files may name server files; still no program.
SET ROLE sc_files_admin;
SELECT streamcube_add_cluster('files_ok', '127.0.0.1:9092', '{"ssl.ca.location": "/etc/ssl/certs"}');
SELECT streamcube_add_cluster('x', '127.0.0.1:9092', '{"sasl.kerberos.kinit.cmd": "touch /tmp/sc_pwned"}');
RESET ROLE;
-- pg_execute_server_program may use GSSAPI; the kinit command is masked.
SET ROLE sc_exec_admin;
SELECT streamcube_add_cluster('exec_ok', '127.0.0.1:9092',
       '{"security.protocol": "SASL_PLAINTEXT", "sasl.kerberos.kinit.cmd": "true", "sasl.kerberos.min.time.before.relogin": "0"}');
SELECT name, properties FROM streamcube.kafka_clusters WHERE name = 'exec_ok';
SELECT streamcube_add_cluster('x', '127.0.0.1:9092', '{"ssl.ca.location": "/etc/passwd"}');
RESET ROLE;
-- only a superuser loads code
SELECT streamcube_add_cluster('x', '127.0.0.1:9092', '{"plugin.library.paths": "/nonexistent/evil.so"}');

-- The check runs again when a cluster is loaded: a cluster stored by a role
-- that has lost its privilege since (or by an older version) is refused.
REVOKE pg_read_server_files FROM sc_files_admin;
SELECT * FROM streamcube_check_cluster('files_ok');
SELECT streamcube_drop_cluster('files_ok');
SELECT streamcube_drop_cluster('exec_ok');
SELECT streamcube_drop_cluster('plain_ok');
SELECT streamcube_drop_cluster('pem_ok');

-- 2. Every function of the extension has a fixed search_path.
SELECT p.oid::regprocedure AS function_without_fixed_search_path
FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'streamcube')
  AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false);
SELECT count(*) > 10 AS functions_checked
FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e'
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'streamcube');

-- Names given by the caller still resolve with the caller's search path.
CREATE SCHEMA sc_sp;
GRANT USAGE, CREATE ON SCHEMA sc_sp TO sc_owner2;
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" sec_topic 1 >/dev/null
SET ROLE sc_owner2;
SET search_path = sc_sp, public;
CREATE DOMAIN sc_sp.qty AS int CHECK (VALUE >= 0);
SELECT streamcube_create_cube('sp_cube', 'kafka', 'sec_topic', 'ts timestamptz, q qty', 'ts', '1 day');
SELECT streamcube_pause('sp_cube');
SELECT streamcube_resume('sp_cube');
RESET search_path;
RESET ROLE;
SELECT 'sc_sp.sp_cube'::regclass, format_type(atttypid, NULL) FROM pg_attribute
WHERE attrelid = 'sc_sp.sp_cube'::regclass AND attname = 'q';

-- 3. A cube owner's traps for a superuser reading streamcube.segments: a
--    window turned into a view through a "_RETURN" rule, and functions
--    planted on the search path.  Nothing of theirs runs.
SELECT streamcube_pause('sc_sp.sp_cube');
SELECT sc_test.wait_for($$SELECT EXISTS (SELECT 1 FROM streamcube.consumers WHERE cube = 'sc_sp.sp_cube'::regclass AND state = 'paused')$$);
SET ROLE sc_owner2;
CREATE FUNCTION public.has_table_privilege(regclass, text) RETURNS boolean LANGUAGE plpgsql AS
$$ BEGIN ALTER ROLE sc_owner2 SUPERUSER; RETURN true; END $$;
CREATE FUNCTION public.sc_trap() RETURNS bigint LANGUAGE plpgsql AS
$$ BEGIN ALTER ROLE sc_owner2 SUPERUSER; RETURN 1; END $$;
SELECT relation AS w FROM streamcube.segments WHERE cube = 'sc_sp.sp_cube'::regclass ORDER BY window_start LIMIT 1 \gset
ALTER TABLE sc_sp.sp_cube DETACH PARTITION :w;
CREATE RULE "_RETURN" AS ON SELECT TO :w DO INSTEAD
    SELECT now() AS ts, 1::sc_sp.qty AS q, public.sc_trap()::int AS _partition, 0::bigint AS _offset;
RESET ROLE;
SET search_path = public, pg_catalog;
SELECT count(*) AS windows, count(rows) AS counted FROM streamcube.segments WHERE cube = 'sc_sp.sp_cube'::regclass;
SELECT * FROM streamcube.consumers WHERE false;
SELECT * FROM streamcube.health WHERE false;
SELECT * FROM streamcube.progress WHERE false;
RESET search_path;
SELECT rolsuper AS owner_became_superuser FROM pg_roles WHERE rolname = 'sc_owner2';
DROP FUNCTION public.has_table_privilege(regclass, text);

-- A detached window is created again, under a name that is free (the
-- detached one is now the owner's view).
SELECT streamcube_resume('sc_sp.sp_cube');
SELECT sc_test.wait_for($$SELECT count(*) = 2 AND count(rows) = 2 FROM streamcube.segments WHERE cube = 'sc_sp.sp_cube'::regclass$$);
SELECT relation::text ~ '^sc_sp\.sp_cube_\d{8}_0000(_2)?$' AS well_named, count(*)
FROM streamcube.segments WHERE cube = 'sc_sp.sp_cube'::regclass GROUP BY 1;
SELECT count(*) AS renamed FROM streamcube.segments
WHERE cube = 'sc_sp.sp_cube'::regclass AND relation::text LIKE '%\_2';

-- 4. streamcube._receivers() shows a plain role nothing of cubes it cannot
--    read (errors quote message contents).
SELECT sc_test.wait_for($$SELECT EXISTS (SELECT 1 FROM streamcube._receivers() WHERE cube_id =
       (SELECT cube_id FROM streamcube.cubes WHERE relid = 'sc_sp.sp_cube'::regclass))$$);
SET ROLE sc_user;
SELECT count(*) AS receivers_seen FROM streamcube._receivers();
SELECT count(*) AS consumers_seen FROM streamcube.consumers;
RESET ROLE;
SELECT streamcube_drop_cube('sc_sp.sp_cube');
-- (the view that goes with it is named after today's window)
SET client_min_messages = warning;
DROP FUNCTION public.sc_trap() CASCADE;
RESET client_min_messages;
DROP SCHEMA sc_sp CASCADE;
