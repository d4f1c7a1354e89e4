--
-- reassign: replica sets, and streamcube_reassign() as a user sees it:
-- validation errors that change nothing, the no-op, moves with exact
-- counts, the journal, partial assignments, a cube created unassigned,
-- and who may do what.  Live moves under production, timeouts, crashes
-- and concurrency are in test/t/024_reassign.pl.
--
\set VERBOSITY default

-- Replica sets: admins create and drop them.
SET ROLE sc_admin;
SELECT streamcube_create_replica_set('ra');
SELECT streamcube_create_replica_set('rb');
SELECT streamcube_create_replica_set('ra');
SELECT streamcube_create_replica_set('');
SELECT streamcube_drop_replica_set('no_such_set');
RESET ROLE;
SET ROLE sc_user;
SELECT streamcube_create_replica_set('rx');
SELECT streamcube_drop_replica_set('ra');
RESET ROLE;

\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" reassign_events 4 >/dev/null
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic reassign_events --count 2000 --format json --start-ts 1767225600 2>/dev/null
SET ROLE sc_admin;
SELECT streamcube_create_cube('reassign_events', 'kafka', 'reassign_events',
       'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 day', 'json',
       '{"replica_sets": ["ra", "rb"]}');
RESET ROLE;
SELECT streamcube_wait('reassign_events', '60 s');
SELECT count(*), count(DISTINCT (_partition, _offset)) FROM reassign_events;
SELECT sc_test.wait_for($$SELECT count(*) = 2 FROM streamcube.consumers WHERE cube = 'reassign_events'::regclass AND state = 'running'$$);
SELECT replica_set, epoch, partitions FROM streamcube.consumers
WHERE cube = 'reassign_events'::regclass ORDER BY replica_set;

-- A set in use cannot be dropped.
SET ROLE sc_admin;
SELECT streamcube_drop_replica_set('ra');
RESET ROLE;

-- Validation: each error changes nothing.
CREATE FUNCTION sc_test.assignment(cube regclass) RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(format('%s:%s', a.partition, a.replica_set), ' ' ORDER BY a.partition)
    FROM streamcube.assignments a JOIN streamcube.cubes c USING (cube_id) WHERE c.relid = cube
$$;
SELECT sc_test.assignment('reassign_events');
SELECT streamcube_reassign('reassign_events', '[0, 1]');
SELECT streamcube_reassign('reassign_events', '{"ra": [0, 1], "nope": [2, 3]}');
SELECT streamcube_reassign('reassign_events', '{"ra": [0, 1, 2], "rb": [2, 3]}');
SELECT streamcube_reassign('reassign_events', '{"ra": [0, 1], "rb": [2, 3, 4]}');
SELECT streamcube_reassign('reassign_events', '{"ra": [0, 1], "rb": [2]}');
SELECT streamcube_reassign('reassign_events', '{"ra": [0, 1], "rb": ["2", 3]}');
SELECT streamcube_reassign('reassign_events', '{"ra": [0, 1], "rb": [2, -3]}');
SELECT streamcube_reassign('reassign_events', '{"ra": 0}');
SELECT streamcube_reassign('reassign_events', '{"ra": [0, 1], "rb": [2, 3]}', '{"wait": true}');
SELECT streamcube_reassign('reassign_events', '{"ra": [0, 1], "rb": [2, 3]}', '{"timeout": "soon"}');
SELECT streamcube_reassign('reassign_events', '{"ra": [0, 1], "rb": [2, 3]}', '{"allow_partial": "yes"}');
SELECT streamcube_reassign('reassign_events', '{"ra": [0, null], "rb": [1, 2, 3]}');
SELECT streamcube_reassign('reassign_events', NULL);
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT streamcube_reassign('reassign_events', '{"ra": [0, 1], "rb": [2, 3]}');
ROLLBACK;
SELECT streamcube_reassign('no_such_cube', '{}');
SELECT sc_test.assignment('reassign_events');

-- Only the owner, superusers and streamcube_admin members may reassign.
SET ROLE sc_user;
SELECT streamcube_reassign('reassign_events', '{"ra": [0, 1, 2, 3]}');
RESET ROLE;

-- The assignment as it is: a no-op, journalled as such.
SELECT r->'noop' AS noop, r->'removed' AS removed, r->'added' AS added, r->'unchanged' AS unchanged
FROM streamcube_reassign('reassign_events', '{"ra": [0, 2], "rb": [1, 3]}') AS r;
SELECT step, outcome, old_assignment, new_assignment FROM streamcube.reassign_log
WHERE cube = 'reassign_events'::regclass AND outcome <> 'failed' ORDER BY entry_id;

-- Move partition 2 from ra to rb while the topic grows.
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic reassign_events --count 1000 --format json --start-ts 1767225600 2>/dev/null
SET ROLE sc_admin;
SELECT r->'noop' AS noop, r->'removed' AS removed, r->'added' AS added, r->'unchanged' AS unchanged,
       jsonb_path_query_array(r, '$.moved[*] ? (@.partition == 2) .from') AS moved_from,
       (r #>> '{moved,0,offset}')::bigint >= 0 AS has_offset
FROM streamcube_reassign('reassign_events', '{"ra": [0], "rb": [1, 2, 3]}') AS r;
RESET ROLE;
SELECT sc_test.assignment('reassign_events');
SELECT streamcube_wait('reassign_events', '60 s');
SELECT count(*), count(DISTINCT (_partition, _offset)) FROM reassign_events;
SELECT sc_test.wait_for($$SELECT string_agg(array_to_string(partitions, ','), ' ' ORDER BY replica_set) = '0 1,2,3'
    FROM streamcube.consumers WHERE cube = 'reassign_events'::regclass$$);
SELECT replica_set, epoch = (SELECT assignment_epoch FROM streamcube.cubes WHERE relid = 'reassign_events'::regclass) AS current_epoch,
       partitions FROM streamcube.consumers WHERE cube = 'reassign_events'::regclass ORDER BY replica_set;
-- the steps of that call; "start" comes from rb's receiver after COMMIT
SELECT sc_test.wait_for($$SELECT EXISTS (SELECT 1 FROM streamcube.reassign_log WHERE cube = 'reassign_events'::regclass AND step = 'start')$$);
SELECT step, replica_set, partitions, outcome, role, offsets IS NOT NULL AS offsets,
       waited_ms IS NOT NULL AS waited, unconsumed_ms IS NOT NULL AS unconsumed
FROM streamcube.reassign_log l
WHERE cube = 'reassign_events'::regclass AND outcome = 'ok' ORDER BY entry_id;

-- A third set takes everything: ra and rb retire.
SET ROLE sc_admin;
SELECT streamcube_create_replica_set('rc');
SELECT r->'removed' AS removed, r->'added' AS added, r->'unchanged' AS unchanged
FROM streamcube_reassign('reassign_events', '{"rc": [0, 1, 2, 3], "ra": [], "rb": []}') AS r;
RESET ROLE;
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic reassign_events --count 1000 --format json --start-ts 1767225600 2>/dev/null
SELECT streamcube_wait('reassign_events', '60 s');
SELECT count(*), count(DISTINCT (_partition, _offset)) FROM reassign_events;
SELECT sc_test.wait_for($$SELECT string_agg(replica_set, ',') = 'rc' FROM streamcube.consumers WHERE cube = 'reassign_events'::regclass$$);
SELECT replica_set, partitions FROM streamcube.consumers WHERE cube = 'reassign_events'::regclass;
SELECT sc_test.wait_for($$SELECT count(*) = 2 FROM streamcube.reassign_log WHERE cube = 'reassign_events'::regclass AND step = 'retire'$$);
SELECT replica_set, partitions FROM streamcube.reassign_log
WHERE cube = 'reassign_events'::regclass AND step = 'retire' ORDER BY replica_set;
SET ROLE sc_admin;
SELECT streamcube_drop_replica_set('ra');
RESET ROLE;

-- allow_partial: partitions 2 and 3 left to nobody, shown as unassigned.
SELECT r->'removed' AS removed
FROM streamcube_reassign('reassign_events', '{"rc": [0, 1]}', '{"allow_partial": true}') AS r;
SELECT sc_test.wait_for($$SELECT partitions = '{0,1}' AND unassigned_partitions = '{2,3}' FROM streamcube.consumers WHERE cube = 'reassign_events'::regclass$$);
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic reassign_events --count 400 --format json --start-ts 1767225600 2>/dev/null
SELECT streamcube_wait('reassign_events', '1 s') AS caught_up;
SELECT r->'added' AS added
FROM streamcube_reassign('reassign_events', '{"rc": [0, 1], "rb": [2, 3]}') AS r;
SELECT streamcube_wait('reassign_events', '60 s');
SELECT count(*), count(DISTINCT (_partition, _offset)) FROM reassign_events;

-- A failed call is journalled by the launcher (the call's own rows roll back).
-- The launcher is a superuser: a function a cube owner planted on the
-- default search path must not run there (it would record who ran it).
CREATE TABLE public.sc_planted (who name);
GRANT INSERT ON public.sc_planted TO PUBLIC;
SET ROLE sc_admin;
CREATE FUNCTION public.nextval(text) RETURNS bigint LANGUAGE sql
    AS $$ INSERT INTO public.sc_planted VALUES (current_user) RETURNING 1::bigint $$;
SELECT streamcube_reassign('reassign_events', '{"rc": [0, 1]}', '"not an object"');
RESET ROLE;
SELECT streamcube_reassign('reassign_events', '{"rc": [0, 1, 2, 3, 9]}');
SELECT sc_test.wait_for($$SELECT EXISTS (SELECT 1 FROM streamcube.reassign_log WHERE cube = 'reassign_events'::regclass AND outcome = 'failed' AND error LIKE '%no partition 9')$$);
SELECT step, outcome, error, new_assignment FROM streamcube.reassign_log
WHERE cube = 'reassign_events'::regclass AND outcome = 'failed' ORDER BY started_at;

SELECT count(*) AS planted_function_runs FROM public.sc_planted;
DROP FUNCTION public.nextval(text);
DROP TABLE public.sc_planted;

-- Readers of the journal see only the cubes they may read.
SET ROLE sc_user;
SELECT count(*) FROM streamcube.reassign_log;
RESET ROLE;

-- A cube created with no assignment consumes nothing until assigned.
\! "$SC_SCKAFKA" create-topic --bootstrap "$SC_KAFKA" reassign_later 2 >/dev/null
\! "$SC_SCKAFKA" produce --bootstrap "$SC_KAFKA" --topic reassign_later --count 300 --format json --start-ts 1767225600 2>/dev/null
SELECT streamcube_create_cube('reassign_later', 'kafka', 'reassign_later',
       'ts timestamptz, country text, device text, amount numeric, qty int', 'ts', '1 day', 'json',
       '{"replica_sets": [], "new_partitions": "ignore"}');
SELECT pg_sleep(1);
SELECT count(*) FROM streamcube.consumers WHERE cube = 'reassign_later'::regclass;
SELECT count(*) FROM reassign_later;
SELECT r->'added' AS added FROM streamcube_reassign('reassign_later', '{"rb": [0, 1]}') AS r;
SELECT streamcube_wait('reassign_later', '60 s');
SELECT count(*), count(DISTINCT (_partition, _offset)) FROM reassign_later;
SELECT streamcube_create_cube('reassign_bad', 'kafka', 'reassign_later',
       'ts timestamptz', 'ts', '1 day', 'json', '{"new_partitions": "sometimes"}');

SELECT streamcube_drop_cube('reassign_later');
SELECT streamcube_drop_cube('reassign_events');
SELECT count(*) FROM streamcube.reassign_log;
