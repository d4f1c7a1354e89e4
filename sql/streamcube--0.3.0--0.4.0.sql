-- streamcube 0.3.0 -> 0.4.0
--
-- - Roll-ups at the speed of raw rows: receivers aggregate each batch in C
--   and append partial rows to the active partitions of a roll-up, which
--   have no key any more; a seal or compaction merges a window's partial
--   rows into one row per group, and only sealed partitions have the key.
--   The key of a 0.3.0 roll-up goes from its table (and so from its
--   active partitions) and stays on its sealed partitions; the rows stay.
-- - Every roll-up gets a view <roll-up>_merged: one row per bucket and
--   dimensions over active and sealed windows, avg's average beside its
--   parts (streamcube.rollup_catalog.merged_view, streamcube.rollups).
-- - Measures with FILTER (WHERE ...), dimensions that are expressions of
--   the cube's columns (streamcube.rollup_catalog.dimension_exprs).
\echo Use "ALTER EXTENSION streamcube UPDATE TO '0.4.0'" to load this file. \quit

ALTER TABLE streamcube.rollup_catalog ADD COLUMN merged_view regclass;
-- A dimension may be an expression of the cube's columns ('lower(country)
-- AS country_lc'): dimensions holds its name, this its expression (NULL
-- for a column; NULL as a whole when every dimension is a column).
ALTER TABLE streamcube.rollup_catalog ADD COLUMN dimension_exprs text[];

-- A view <roll-up>_merged dropped by hand is forgotten, as <x>_sealed is.
CREATE OR REPLACE FUNCTION streamcube._on_sql_drop() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    forgotten integer;
BEGIN
    DELETE FROM streamcube.segment_catalog s
    USING pg_event_trigger_dropped_objects() d
    WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = s.relid::oid;

    DELETE FROM streamcube.rollup_windows w
    USING pg_event_trigger_dropped_objects() d
    WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = w.relid::oid;

    UPDATE streamcube.cubes c SET sealed_view = NULL
    FROM pg_event_trigger_dropped_objects() d
    WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = c.sealed_view::oid;

    UPDATE streamcube.rollup_catalog r SET sealed_view = NULL
    FROM pg_event_trigger_dropped_objects() d
    WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = r.sealed_view::oid;

    UPDATE streamcube.rollup_catalog r SET merged_view = NULL
    FROM pg_event_trigger_dropped_objects() d
    WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = r.merged_view::oid;

    WITH gone AS (
        DELETE FROM streamcube.rollup_catalog r
        USING pg_event_trigger_dropped_objects() d
        WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = r.relid::oid
        RETURNING r.cube_id)
    UPDATE streamcube.cubes c SET config_version = c.config_version + 1
    FROM gone WHERE gone.cube_id = c.cube_id;

    DELETE FROM streamcube.cubes c
    USING pg_event_trigger_dropped_objects() d
    WHERE d.classid = 'pg_class'::regclass AND d.objsubid = 0 AND d.objid = c.relid::oid;
    GET DIAGNOSTICS forgotten = ROW_COUNT;
    IF forgotten > 0 THEN
        PERFORM streamcube._wake_launcher();
    END IF;
END
$$;

CREATE OR REPLACE VIEW streamcube.rollups AS
SELECT r.relid AS rollup,
       c.relid AS cube,
       r.granularity,
       r.dimensions,
       r.measures,
       r.retention,
       (SELECT pg_catalog.count(*) FROM streamcube.rollup_windows w WHERE w.rollup_id = r.rollup_id)::integer AS windows,
       st.rows,
       st.buckets,
       (SELECT pg_catalog.sum(pg_catalog.pg_total_relation_size(i.inhrelid))::bigint
        FROM pg_catalog.pg_inherits i WHERE i.inhparent = r.relid) AS bytes,
       cs.rows AS cube_rows,
       CASE WHEN st.rows > 0 THEN round(cs.rows::numeric / st.rows, 1) END AS rows_per_rollup_row,
       r.sealed_view,
       r.created_at,
       r.merged_view,
       r.dimension_exprs
FROM streamcube.rollup_catalog r
JOIN streamcube.cubes c USING (cube_id)
CROSS JOIN LATERAL streamcube._rollup_stats(r.relid) st
CROSS JOIN LATERAL (
    SELECT pg_catalog.sum(streamcube._segment_rows(c.relid, i.inhrelid))::bigint AS rows
    FROM pg_catalog.pg_inherits i WHERE i.inhparent = c.relid) cs
WHERE pg_catalog.has_table_privilege(c.relid, 'SELECT');
COMMENT ON VIEW streamcube.rollups IS
    'Roll-ups of the cubes the caller may read: granularity, dimensions, measures, retention, windows held, rows (partial rows in active windows) and buckets (counted; NULL without SELECT on the roll-up), bytes, the cube''s rows and how many of them one roll-up row stands for, the view of its sealed partitions for standbys, the view that merges it to one row per bucket and dimensions, the expressions of its expression dimensions';

COMMENT ON FUNCTION streamcube_create_rollup(text, text, interval, text[], jsonb, jsonb) IS
    'Create a roll-up of a cube: a table of rows per bucket of granularity and dimensions (partial rows while a window is active, one per group once sealed), with one column per measure ({"name": "count(*)" | "count(c)" | "sum(c)" | "min(c)" | "max(c)" | "avg(c)" | "hll(c)" | "tdigest(c)"}, each with an optional FILTER (WHERE ...)), dimensions columns or "<expression> AS <name>", and its view <name>_merged of one row per group; filled from the rows the cube holds and kept by its receivers in the same transaction as the rows; option retention';

-- The roll-ups a 0.3.0 catalog holds: the key to their sealed partitions,
-- a view <roll-up>_merged each (src/rollup_sql.c, sc_rollups_to_0_4).
CREATE FUNCTION streamcube._rollups_to_0_4() RETURNS void
    LANGUAGE C SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'sc_rollups_to_0_4';
SELECT streamcube._rollups_to_0_4();
DROP FUNCTION streamcube._rollups_to_0_4();
