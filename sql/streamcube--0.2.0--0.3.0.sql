-- streamcube 0.2.0 -> 0.3.0
--
-- Secrets that cannot reach the server log through a typo: the functions
-- that take Kafka properties get a second form whose properties are text,
-- parsed inside the function after its statement is hidden from the log
-- (a '{...}' literal resolves to it).
--
-- sql/streamcube--0.3.0.sql is sql/streamcube--0.2.0.sql followed by the
-- body of this file: a fresh 0.3.0 and an updated one are the same.

\echo Use "ALTER EXTENSION streamcube UPDATE TO '0.3.0'" to load this file. \quit

-- ---------------------------------------------------------------------
-- 0.3.0: properties as text
-- ---------------------------------------------------------------------
CREATE FUNCTION streamcube_add_cluster(name text, bootstrap_servers text, properties text)
    RETURNS void LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_add_cluster';
COMMENT ON FUNCTION streamcube_add_cluster(text, text, text) IS
    'Register a Kafka cluster, its properties given as JSON text: a text that does not parse is refused without repeating it or logging the statement';
REVOKE EXECUTE ON FUNCTION streamcube_add_cluster(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION streamcube_add_cluster(text, text, text) TO streamcube_admin;

CREATE FUNCTION streamcube_alter_cluster(name text, bootstrap_servers text, properties text)
    RETURNS void LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_alter_cluster';
COMMENT ON FUNCTION streamcube_alter_cluster(text, text, text) IS
    'streamcube_alter_cluster with properties as JSON text (bootstrap_servers NULL keeps them): a text that does not parse is refused without repeating it or logging the statement';
REVOKE EXECUTE ON FUNCTION streamcube_alter_cluster(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION streamcube_alter_cluster(text, text, text) TO streamcube_admin;
