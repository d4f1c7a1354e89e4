--
-- setup: install streamcube and create the roles the later suites use.
--
-- Runs first, in database postgres of the private server started by
-- test/run-tests (streamcube.database = 'postgres').  Roles:
--   sc_admin  LOGIN, member of streamcube_admin, may CREATE in schema public
--   sc_user   LOGIN, no streamcube privilege at all
--
CREATE EXTENSION streamcube;
SELECT extname, extversion, extrelocatable, extnamespace::regnamespace AS schema
FROM pg_extension WHERE extname = 'streamcube';
-- the loaded library goes with these SQL objects
SELECT streamcube_library_version() = extversion AS library_matches
FROM pg_extension WHERE extname = 'streamcube';

-- the install script created the admin role, closed to logins
SELECT rolname, rolcanlogin, rolsuper FROM pg_roles WHERE rolname = 'streamcube_admin';

-- the launcher was started by the postmaster and runs in streamcube.database
SHOW streamcube.database;
SELECT backend_type, datname, application_name
FROM pg_stat_activity WHERE backend_type = 'streamcube launcher';

-- settings live under the prefix streamcube., which is reserved: a typo fails
SELECT name, setting, unit, context
FROM pg_settings
WHERE name IN ('streamcube.database', 'streamcube.kafka_timeout',
               'streamcube.launcher_naptime', 'streamcube.max_receivers')
ORDER BY name;
SET streamcube.no_such_setting = 1;

-- the roles of the test suites
CREATE ROLE sc_admin LOGIN;
GRANT streamcube_admin TO sc_admin;
CREATE ROLE sc_user LOGIN;
GRANT CREATE ON SCHEMA public TO sc_admin;
SELECT r.rolname,
       pg_has_role(r.rolname, 'streamcube_admin', 'MEMBER') AS streamcube_admin,
       has_schema_privilege(r.rolname, 'public', 'CREATE') AS create_in_public
FROM pg_roles r WHERE r.rolname IN ('sc_admin', 'sc_user') ORDER BY 1;

-- the clusters catalog is closed to PUBLIC; admins read it through the
-- view, which masks secrets (see clusters)
SELECT c.relname, c.relkind,
       has_table_privilege('sc_user', c.oid, 'SELECT') AS sc_user_select,
       has_table_privilege('sc_admin', c.oid, 'SELECT') AS sc_admin_select
FROM pg_class c
WHERE c.oid IN ('streamcube.clusters'::regclass, 'streamcube.kafka_clusters'::regclass)
ORDER BY c.relname;
SELECT p.oid::regprocedure AS function,
       has_function_privilege('sc_user', p.oid, 'EXECUTE') AS sc_user_execute,
       has_function_privilege('sc_admin', p.oid, 'EXECUTE') AS sc_admin_execute
FROM pg_proc p
WHERE p.proname IN ('streamcube_add_cluster', 'streamcube_drop_cluster', 'streamcube_check_cluster')
ORDER BY p.proname;

-- A helper for the later suites: wait until a query returns true, or give
-- up after a timeout and return false (the expected output then differs).
CREATE SCHEMA sc_test;
GRANT USAGE ON SCHEMA sc_test TO PUBLIC;
CREATE FUNCTION sc_test.wait_for(q text, timeout interval DEFAULT '60 s')
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    started timestamptz := clock_timestamp();
    ok boolean;
BEGIN
    LOOP
        EXECUTE q INTO ok;
        IF ok THEN RETURN true; END IF;
        IF clock_timestamp() - started > timeout THEN RETURN false; END IF;
        PERFORM pg_sleep(0.05);
    END LOOP;
END
$$;

-- Which writer took a cube's rows (streamcube.consumers.rows_direct and
-- rows_copy), once the receiver has published every row of the table: so
-- that a comparison of the two paths cannot compare one path with itself.
CREATE FUNCTION sc_test.writers(the_cube regclass) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    PERFORM sc_test.wait_for(format($q$SELECT EXISTS (SELECT 1 FROM streamcube.consumers
        WHERE cube = %s AND rows_direct + rows_copy = (SELECT count(*) FROM %s))$q$,
        the_cube::oid, the_cube));
    SELECT CASE WHEN rows_copy = 0 AND rows_direct > 0 THEN 'direct'
                WHEN rows_direct = 0 AND rows_copy > 0 THEN 'copy'
                ELSE format('direct %s, copy %s', rows_direct, rows_copy) END
      INTO result FROM streamcube.consumers c WHERE c.cube = the_cube;
    RETURN result;
END $$;
