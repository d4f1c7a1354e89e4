/*-------------------------------------------------------------------------
 *
 * placement.c
 *		A replica set of a cube placed on a node: handed over by its home
 *		server, adopted by the node, exactly once.
 *
 * streamcube_place(cube, replica_set, node), on the home server, hands
 * every partition the set consumes over to the set itself at a new epoch,
 * with streamcube_reassign's own steps (validate, pause, merge, assign: the
 * set's batch in flight commits, or loses its compare-and-set after), and
 * records in streamcube.placement_catalog the positions that merge gave,
 * the set's stop points here from then on, and the epoch, state 'moving'
 * (committed synchronously: the node must never start from a position
 * this server could forget).  From that COMMIT on, this server never
 * consumes those partitions beyond their stop points: the set's receiver
 * stops there, the launcher starts it again only when a crash took a
 * position back below its stop point, and no assignment here may take a
 * placed partition or give the set another (streamcube_reassign refuses;
 * new partitions are dealt to the sets that run here; topic changes and
 * stop points are refused).
 *
 * The home server's launcher then has the node adopt them
 * (sc_placement_step): as the role that placed the set, through its user
 * mapping, it calls streamcube_adopt(definition, set, partitions,
 * positions) on the node.  There, in one transaction, the cube is made
 * from the definition if it is missing (no replica set, new partitions
 * ignored: partitions are the home server's to deal), each partition's
 * logged checkpoint is raised to its position, and the node's own
 * streamcube_reassign gives the partitions to the set (its merge starts
 * them at exactly those positions).  When the node already consumes them
 * with that set, adopt does nothing: so a step redone after any crash or
 * a lost answer is harmless, and no two-phase commit is needed.  Only
 * after the node answered does the home server mark the row 'placed'.
 *
 * What a crash leaves, at each point:
 * - before place commits: nothing changed on either server;
 * - after it, before the node adopted: the partitions wait, beyond their
 *   stop points unconsumed by both; the launcher tries again (after a
 *   restart too: the row and its positions are logged), with a back-off,
 *   until the node answers;
 * - the node adopted, the home server did not hear it: the next try finds
 *   them adopted, a no-op, and marks the row.
 * Rows a server ingested stay in its own table.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "cube.h"
#include "node_conn.h"
#include "positions.h"
#include "reassign.h"
#include "reassign_internal.h"

#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_foreign_server.h"
#include "foreign/foreign.h"
#include "mb/pg_wchar.h"
#include "utils/acl.h"
#include "utils/syscache.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/guc.h"
#include "commands/extension.h"

PG_FUNCTION_INFO_V1(sc_place);
PG_FUNCTION_INFO_V1(sc_adopt);

/* How long the node may take to adopt (it asks Kafka, as creation does). */
#define SC_ADOPT_QUERY_MS 60000
/* The longest wait between two tries of a placement whose node failed. */
#define SC_PLACE_RETRY_MAX_S 60

static Jsonb *
sc_jsonb_of(const char *text)
{
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(text)));
}

/* The first value of the last SPI result, as text; NULL for none or NULL. */
static char *
sc_spi_text(void)
{
	if (SPI_processed == 0)
		return NULL;
	return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

/* What placement does not carry to a node yet: refused, named. */
static void
sc_place_check_cube(const ScCube *cube, const char *replica_set)
{
	Oid			t[2] = {INT4OID, TEXTOID};
	Datum		v[2] = {Int32GetDatum(cube->cube_id), CStringGetTextDatum(replica_set)};

	if (cube->topics_kind != SC_TOPICS_ONE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cube %s reads several topics: its replica sets cannot be placed on a node yet",
						cube->qualified),
				 errhint("Place replica sets of cubes of one topic.")));
	sc_catalog_exec("SELECT (SELECT count(*) FROM streamcube.rollup_catalog WHERE cube_id = $1), "
					"       (SELECT count(*) FROM streamcube.stop_offsets WHERE cube_id = $1), "
					"       (SELECT node FROM streamcube.placement_catalog "
					"        WHERE cube_id = $1 AND replica_set = $2)",
					2, t, v, NULL, true, 1);
	if (strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), "0") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cube %s has roll-ups: its replica sets cannot be placed on a node yet",
						cube->qualified),
				 errhint("A node does not get a cube's roll-ups yet; drop them first, or keep the set here.")));
	if (strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2), "0") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cube %s has stop points: its replica sets cannot be placed on a node yet",
						cube->qualified),
				 errhint("A node does not get a cube's stop points yet; streamcube.stops lists them.")));
	if (SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("replica set \"%s\" of cube %s is placed on node \"%s\" already",
						replica_set, cube->qualified,
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3)),
				 errhint("streamcube.placements says how far its placement got.")));
}

/*
 * This transaction's COMMIT waits for its WAL to be flushed (and for
 * synchronous standbys), whatever synchronous_commit the caller runs with:
 * another server acts on what it commits.
 */
static void
sc_commit_synchronously(void)
{
	if (synchronous_commit < SYNCHRONOUS_COMMIT_REMOTE_FLUSH)
		(void) set_config_option("synchronous_commit", "on", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_LOCAL, true, 0, false);
}

/* Does a set other than replica_set, not placed on a node, hold a partition here? */
static bool
sc_place_other_set_here(int32 cube_id, List *assigned, const char *replica_set)
{
	ListCell   *lc;

	sc_catalog_exec("SELECT replica_set FROM streamcube.placement_catalog WHERE cube_id = $1",
					1, (Oid[]) {INT4OID}, (Datum[]) {Int32GetDatum(cube_id)}, NULL, true, 0);
	foreach(lc, assigned)
	{
		ScAssigned *a = lfirst(lc);
		bool		placed = strcmp(a->replica_set, replica_set) == 0;

		for (uint64 i = 0; i < SPI_processed && !placed; i++)
			placed = strcmp(SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1),
							a->replica_set) == 0;
		if (!placed)
			return true;
	}
	return false;
}

/* Can the caller reach the node as the launcher will (as the caller)? */
static pg_noinline void
sc_place_check_node(const char *node)
{
	ScNodeConn *conn = palloc0(sizeof(ScNodeConn));
	char	   *schema;

	PG_TRY();
	{
		sc_node_open(node, conn, &schema);
	}
	PG_CATCH();
	{
		sc_node_close(conn);
		PG_RE_THROW();
	}
	PG_END_TRY();
	sc_node_close(conn);
}

/* ----------------------------------------------------------------
 * <cube>_all: the cube's rows on this server and on its nodes
 * ----------------------------------------------------------------
 */

/* A name for a new relation of the cube's, cut to fit; refused when taken. */
static char *
sc_placement_new_name(const ScCube *cube, Oid nsp, const char *name, const char *what)
{
	char	   *fit = pnstrdup(name, pg_mbcliplen(name, strlen(name), NAMEDATALEN - 1));

	if (sc_name_taken(fit, nsp))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_TABLE),
				 errmsg("cannot make %s of cube %s: the name \"%s\" is taken", what, cube->qualified, fit),
				 errhint("Rename or drop the relation or type \"%s\"; streamcube names it after the cube.", fit)));
	return fit;
}

/* The column list of the cube's table, for a foreign table of it. */
static char *
sc_cube_column_list(const ScCube *cube)
{
	sc_catalog_exec("SELECT string_agg(pg_catalog.format('%I %s', attname, "
					"       pg_catalog.format_type(atttypid, atttypmod)), ', ' ORDER BY attnum) "
					"FROM pg_catalog.pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped",
					1, (Oid[]) {OIDOID}, (Datum[]) {ObjectIdGetDatum(cube->relid)}, NULL, true, 1);
	return sc_spi_text();
}

/* Is relid (InvalidOid: none) an existing relation of that kind? */
static bool
sc_placement_rel_alive(Oid relid, char relkind)
{
	return OidIsValid(relid) && get_rel_relkind(relid) == relkind;
}

/* The cube owner may read node through its foreign server, or ERROR. */
static void
sc_placement_check_reader(const ScCube *cube, const char *node, ForeignServer *server)
{
	if (pg_foreign_server_aclcheck(server->serverid, cube->owner, ACL_USAGE) == ACLCHECK_OK &&
		(SearchSysCacheExists2(USERMAPPINGUSERSERVER, ObjectIdGetDatum(cube->owner),
							   ObjectIdGetDatum(server->serverid)) ||
		 SearchSysCacheExists2(USERMAPPINGUSERSERVER, ObjectIdGetDatum(InvalidOid),
							   ObjectIdGetDatum(server->serverid))))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("the owner of cube %s, role \"%s\", cannot read node \"%s\": it needs USAGE on foreign server \"%s\" and a user mapping for it",
					cube->qualified, GetUserNameFromId(cube->owner, false), node, server->servername),
			 errhint("The view %s_all reads the node as the cube's owner: GRANT USAGE ON FOREIGN SERVER and CREATE USER MAPPING FOR that role.",
					 cube->relname)));
}

/* The oid in column col of the first row of the last SPI result; InvalidOid for NULL. */
static Oid
sc_spi_oid(int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col, &isnull);

	return isnull ? InvalidOid : DatumGetObjectId(d);
}

/*
 * Make, as the cube's owner, the foreign table of the cube's table on
 * `node` (<cube>_at_<node>, postgres_fdw, async_capable) unless the
 * placements of the cube record one, and the view <cube>_all: the cube's
 * table UNION ALL the foreign tables of all its nodes.  A WHERE clause on
 * the view reaches each branch: the time column's is pushed to the nodes,
 * which prune their own windows.  Reading it uses the owner's user mapping
 * of each node's server (the view's owner's, as postgres_fdw does for
 * views).  What it made is recorded in the cube's placements (all_view,
 * foreign_table): only those are replaced or dropped later, whatever their
 * names or owners have become; a name taken by anything else is refused.
 * The caller is connected to SPI and holds the cube's row, with a snapshot
 * taken after that.
 */
static void
sc_placement_views(const ScCube *cube, const char *node)
{
	Oid			nsp = get_rel_namespace(cube->relid);
	char	   *schema = get_namespace_name(nsp);
	Oid			view;
	Oid			ft;
	StringInfoData body;
	ForeignServer *server;
	ScAsOwner	as;

	sc_catalog_exec("SELECT (SELECT max(all_view::oid) FROM streamcube.placement_catalog WHERE cube_id = $1), "
					"       (SELECT max(foreign_table::oid) FROM streamcube.placement_catalog "
					"        WHERE cube_id = $1 AND node = $2), "
					"       (SELECT server FROM streamcube.node_catalog WHERE name = $2)",
					2, (Oid[]) {INT4OID, TEXTOID},
					(Datum[]) {Int32GetDatum(cube->cube_id), CStringGetTextDatum(node)}, NULL, false, 1);
	view = sc_spi_oid(1);
	ft = sc_spi_oid(2);
	server = GetForeignServerByName(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3), false);
	sc_placement_check_reader(cube, node, server);

	if (!sc_placement_rel_alive(ft, RELKIND_FOREIGN_TABLE))
	{
		char	   *name = sc_placement_new_name(cube, nsp, psprintf("%s_at_%s", cube->relname, node),
												 psprintf("the foreign table of node \"%s\"", node));
		char	   *columns = sc_cube_column_list(cube);

		sc_as_owner_enter(&as, cube->owner);
		SPI_execute(psprintf("CREATE FOREIGN TABLE %s (%s) SERVER %s "
							 "OPTIONS (schema_name %s, table_name %s, async_capable 'true', fetch_size '10000')",
							 quote_qualified_identifier(schema, name), columns,
							 quote_identifier(server->servername),
							 quote_literal_cstr(schema), quote_literal_cstr(cube->relname)),
					false, 0);
		sc_as_owner_leave(&as);
		ft = get_relname_relid(name, nsp);
	}
	sc_catalog_exec("UPDATE streamcube.placement_catalog SET foreign_table = $3 "
					"WHERE cube_id = $1 AND node = $2",
					3, (Oid[]) {INT4OID, TEXTOID, OIDOID},
					(Datum[]) {Int32GetDatum(cube->cube_id), CStringGetTextDatum(node), ObjectIdGetDatum(ft)},
					NULL, false, 0);

	/* the cube's table and every node's foreign table */
	initStringInfo(&body);
	appendStringInfo(&body, "SELECT * FROM %s", cube->qualified);
	sc_catalog_exec("SELECT DISTINCT foreign_table::oid FROM streamcube.placement_catalog "
					"WHERE cube_id = $1 AND foreign_table IS NOT NULL ORDER BY 1",
					1, (Oid[]) {INT4OID}, (Datum[]) {Int32GetDatum(cube->cube_id)}, NULL, false, 0);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Oid			t = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));

		if (sc_placement_rel_alive(t, RELKIND_FOREIGN_TABLE))
			appendStringInfo(&body, " UNION ALL SELECT * FROM %s", sc_relation_qualified(t));
	}
	if (sc_placement_rel_alive(view, RELKIND_VIEW))
	{
		sc_as_owner_enter(&as, sc_relation_owner(view));
		SPI_execute(psprintf("CREATE OR REPLACE VIEW %s AS %s", sc_relation_qualified(view), body.data),
					false, 0);
		sc_as_owner_leave(&as);
	}
	else
	{
		char	   *name = sc_placement_new_name(cube, nsp, psprintf("%s_all", cube->relname),
												 "the view of all its rows");

		sc_as_owner_enter(&as, cube->owner);
		SPI_execute(psprintf("CREATE VIEW %s AS %s", quote_qualified_identifier(schema, name), body.data),
					false, 0);
		sc_as_owner_leave(&as);
		view = get_relname_relid(name, nsp);
	}
	sc_catalog_exec("UPDATE streamcube.placement_catalog SET all_view = $2 WHERE cube_id = $1",
					2, (Oid[]) {INT4OID, OIDOID},
					(Datum[]) {Int32GetDatum(cube->cube_id), ObjectIdGetDatum(view)}, NULL, false, 0);
}

/*
 * Drop the view and the foreign tables the cube's placements made (before
 * the cube's table: they depend on it), each as its owner.  Takes the
 * cube's row first, so that a placement under way is committed and seen.
 * The caller is connected to SPI.
 */
void
sc_placement_drop_views(int32 cube_id, Oid relid, Oid owner)
{
	List	   *views = NIL;
	List	   *tables = NIL;
	ListCell   *lc;

	if (!sc_catalog_has_column("placement_catalog", "all_view"))
		return;
	sc_catalog_exec("SELECT 1 FROM streamcube.cubes WHERE cube_id = $1 FOR UPDATE",
					1, (Oid[]) {INT4OID}, (Datum[]) {Int32GetDatum(cube_id)}, NULL, false, 0);
	sc_catalog_exec("SELECT DISTINCT all_view::oid, foreign_table::oid FROM streamcube.placement_catalog "
					"WHERE cube_id = $1",
					1, (Oid[]) {INT4OID}, (Datum[]) {Int32GetDatum(cube_id)}, NULL, false, 0);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		v = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull && sc_placement_rel_alive(DatumGetObjectId(v), RELKIND_VIEW) &&
			!list_member_oid(views, DatumGetObjectId(v)))
			views = lappend_oid(views, DatumGetObjectId(v));
		v = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull);
		if (!isnull && sc_placement_rel_alive(DatumGetObjectId(v), RELKIND_FOREIGN_TABLE) &&
			!list_member_oid(tables, DatumGetObjectId(v)))
			tables = lappend_oid(tables, DatumGetObjectId(v));
	}
	foreach(lc, list_concat(views, tables))
	{
		ScAsOwner	as;
		Oid			rel = lfirst_oid(lc);

		sc_as_owner_enter(&as, sc_relation_owner(rel));
		SPI_execute(psprintf("DROP %s %s", get_rel_relkind(rel) == RELKIND_VIEW ? "VIEW" : "FOREIGN TABLE",
							 sc_relation_qualified(rel)), false, 0);
		sc_as_owner_leave(&as);
	}
}

/*
 * streamcube_place(cube text, replica_set text, node text) RETURNS jsonb
 *
 * The set keeps its partitions here, handed over to itself at a new epoch
 * with streamcube_reassign's pause and merge: its batch in flight commits
 * before, or loses its compare-and-set after.  Their merged positions are
 * the set's stop points here from now on (sc_positions_load) and where the
 * node starts them.
 */
Datum
sc_place(PG_FUNCTION_ARGS)
{
	char	   *cube_name = sc_text_arg(fcinfo, 0, "cube name");
	char	   *replica_set = sc_text_arg(fcinfo, 1, "replica set");
	char	   *node = sc_text_arg(fcinfo, 2, "node name");
	ScReassign	r = {0};
	Oid			owner;
	ListCell   *lc;
	StringInfoData partitions;
	StringInfoData positions;

	sc_require_admin("place replica sets on nodes");
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("streamcube_place() must run in a READ COMMITTED transaction"),
				 errdetail("It waits for the replica set's batch in flight and reads the position it committed."),
				 errhint("Call it outside a REPEATABLE READ or SERIALIZABLE transaction.")));
	SPI_connect();
	sc_reassign_init(&r, sc_cube_load(sc_cube_for_action(cube_name, "place a replica set of",
														  &r.relid, &owner), false),
					 "streamcube_place");
	r.timeout_ms = 30000;
	r.allow_partial = true;
	r.step = "validate";
	sc_place_check_node(node);

	sc_reassign_lock_cube(&r);
	/*
	 * The cube and its placements as they are now that its row is held (a
	 * concurrent alter, place or stop point committed meanwhile): every
	 * check below reads with this snapshot.
	 */
	PushActiveSnapshot(GetTransactionSnapshot());
	r.cube = sc_cube_load(r.cube_id, false);
	r.cube_name = r.cube->qualified;
	sc_place_check_cube(r.cube, replica_set);
	/* the launcher acts on the row at once: no crash may forget it after */
	sc_commit_synchronously();
	r.old = sc_reassign_read_assignment(r.cube_id);
	r.new = r.old;
	foreach(lc, r.old)
	{
		ScAssigned *a = lfirst(lc);
		ScMove	   *m;

		if (strcmp(a->replica_set, replica_set) != 0)
			continue;
		m = palloc0(sizeof(ScMove));
		m->partition = a->partition;
		m->from = a->replica_set;
		m->to = a->replica_set;
		r.moves = lappend(r.moves, m);
	}
	if (r.moves == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("replica set \"%s\" consumes no partition of cube %s", replica_set, r.cube->qualified),
				 errhint("Place a replica set that consumes partitions: streamcube.consumers shows which do.")));
	if (r.cube->assign_new_partitions && !sc_place_other_set_here(r.cube_id, r.old, replica_set))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("replica set \"%s\" is the last of cube %s that runs on this server", replica_set,
						r.cube->qualified),
				 errdetail("Partitions added to the topic are dealt to the sets that run here; the node leaves them alone."),
				 errhint("Give a partition to another replica set here first, or set the cube's option new_partitions to ignore.")));
	r.old_json = sc_assignment_json(r.cube, r.old, NIL);
	r.new_json = r.old_json;
	sc_reassign_steps(&r);

	initStringInfo(&partitions);
	initStringInfo(&positions);
	foreach(lc, r.moves)
	{
		ScMove	   *m = lfirst(lc);

		appendStringInfo(&partitions, "%s%d", partitions.len ? "," : "{", m->partition);
		appendStringInfo(&positions, "%s" INT64_FORMAT, positions.len ? "," : "{", m->offset);
	}
	appendStringInfoChar(&partitions, '}');
	appendStringInfoChar(&positions, '}');
	sc_catalog_exec("INSERT INTO streamcube.placement_catalog "
					"(cube_id, replica_set, node, placed_by, epoch, partitions, positions, state) "
					"VALUES ($1, $2, $3, $4, $5, $6::int4[], $7::int8[], 'moving')",
					7, (Oid[]) {INT4OID, TEXTOID, TEXTOID, OIDOID, INT8OID, TEXTOID, TEXTOID},
					(Datum[]) {Int32GetDatum(r.cube_id), CStringGetTextDatum(replica_set),
						CStringGetTextDatum(node), ObjectIdGetDatum(GetUserId()),
						Int64GetDatum(r.id), CStringGetTextDatum(partitions.data),
					CStringGetTextDatum(positions.data)},
					NULL, false, 0);
	sc_placement_views(r.cube, node);
	ereport(LOG,
			(errmsg("replica set \"%s\" of cube %s is placed on node \"%s\" (reassign_id " INT64_FORMAT "): partitions %s, here up to offsets %s, there from them",
					replica_set, r.cube->qualified, node, r.id, partitions.data, positions.data)));
	sc_launcher_wakeup_at_commit();

	if (SPI_execute_with_args("SELECT jsonb_build_object('reassign_id', $1, 'node', $2, 'replica_set', $3, "
							  "'partitions', to_jsonb($4::int4[]), 'positions', to_jsonb($5::int8[]))",
							  5, (Oid[]) {INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID},
							  (Datum[]) {Int64GetDatum(r.id), CStringGetTextDatum(node),
								  CStringGetTextDatum(replica_set), CStringGetTextDatum(partitions.data),
							  CStringGetTextDatum(positions.data)},
							  NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not describe the placement of replica set \"%s\"", replica_set);
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		d = SPI_datumTransfer(d, false, -1);
		PopActiveSnapshot();
		SPI_finish();
		PG_RETURN_DATUM(d);
	}
}

/*
 * Partitions of the cube that a replica set placed on a node consumes
 * there: this server's share of each ends at its stop point, which is its
 * target here (placed[i] true); the node's share is the node's to wait for.
 * Returns the nodes, as text, NULL when none (streamcube_wait).  The
 * caller is connected to SPI.
 */
char *
sc_placement_stops(int32 cube_id, int n, const int32 *parts, int64 *targets, bool *placed)
{
	StringInfoData nodes;

	if (!sc_catalog_has_column("placement_catalog", "positions"))
		return NULL;
	sc_catalog_exec("SELECT x.node, u.partition, u.stop FROM streamcube.placement_catalog x, "
					"unnest(x.partitions, x.positions) AS u(partition, stop) "
					"WHERE x.cube_id = $1 ORDER BY x.node, u.partition",
					1, (Oid[]) {INT4OID}, (Datum[]) {Int32GetDatum(cube_id)}, NULL, true, 0);
	initStringInfo(&nodes);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		char	   *node = SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1);
		int32		partition = pg_strtoint32(SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2));
		int64		stop = pg_strtoint64(SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 3));

		for (int i = 0; i < n; i++)
			if (parts[i] == partition)
			{
				placed[i] = true;
				targets[i] = Min(targets[i], stop);
			}
		if (strstr(nodes.data, psprintf("\"%s\"", node)) == NULL)
			appendStringInfo(&nodes, "%s\"%s\"", nodes.len ? ", " : "", node);
	}
	return nodes.len ? nodes.data : NULL;
}

/*
 * Keep, among parts[] and targets[], the partitions a replica set of the
 * cube consumes; the arrays *partarray and *targetarray are made again.
 * Returns how many are kept (streamcube_wait on a node's copy of a cube,
 * option home).  The caller is connected to SPI.
 */
int
sc_placement_own_partitions(int32 cube_id, int n, int32 *parts, int64 *targets,
					   Datum *partarray, Datum *targetarray)
{
	int			kept = 0;
	Datum	   *partd = palloc(sizeof(Datum) * Max(n, 1));
	Datum	   *targetd = palloc(sizeof(Datum) * Max(n, 1));

	sc_catalog_exec("SELECT partition FROM streamcube.assignments WHERE cube_id = $1",
					1, (Oid[]) {INT4OID}, (Datum[]) {Int32GetDatum(cube_id)}, NULL, true, 0);
	for (int i = 0; i < n; i++)
	{
		bool		own = false;

		for (uint64 r = 0; r < SPI_processed && !own; r++)
		{
			bool		isnull;

			own = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull)) == parts[i];
		}
		if (!own)
			continue;
		parts[kept] = parts[i];
		targets[kept] = targets[i];
		partd[kept] = Int32GetDatum(parts[i]);
		targetd[kept] = Int64GetDatum(targets[i]);
		kept++;
	}
	*partarray = PointerGetDatum(construct_array(partd, kept, INT4OID, 4, true, TYPALIGN_INT));
	*targetarray = PointerGetDatum(construct_array(targetd, kept, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	return kept;
}

/* ----------------------------------------------------------------
 * On the node: streamcube_adopt
 * ----------------------------------------------------------------
 */

/* The cube of the definition here, made if it is missing. */
static void
sc_adopt_cube(const char *schema, Jsonb *definition, const char *replica_set)
{
	Oid			jt = JSONBOID;
	Datum		jv = JsonbPGetDatum(definition);
	char	   *values[9];
	bool		exists;

	sc_catalog_exec("SELECT $1->>'name', $1->>'cluster', $1->>'topic', $1->>'columns', "
					"       $1->>'time_column', $1->>'segment_interval', $1->>'format', "
					"       ($1->'options')::text, "
					"       EXISTS (SELECT FROM streamcube.cubes WHERE relid = to_regclass($1->>'name')) "
					"FROM (SELECT) x",
					1, &jt, &jv, NULL, true, 1);
	for (int i = 0; i < 9; i++)
		values[i] = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, i + 1);
	for (int i = 0; i < 8; i++)
		if (values[i] == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the cube definition given to streamcube_adopt lacks \"%s\"",
							(const char *[]) {"name", "cluster", "topic", "columns", "time_column",
							"segment_interval", "format", "options"}[i]),
					 errhint("streamcube_adopt is called by a home server's streamcube of the same version.")));
	exists = strcmp(values[8], "t") == 0;

	sc_catalog_exec("SELECT FROM streamcube.replica_sets WHERE name = $1", 1,
					(Oid[]) {TEXTOID}, (Datum[]) {CStringGetTextDatum(replica_set)}, NULL, true, 1);
	if (SPI_processed == 0 &&
		SPI_execute_with_args(psprintf("SELECT %s.streamcube_create_replica_set($1)", schema),
							  1, (Oid[]) {TEXTOID}, (Datum[]) {CStringGetTextDatum(replica_set)},
							  NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not create replica set \"%s\"", replica_set);

	if (!exists)
	{
		Oid			t[8] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};
		Datum		v[8];

		for (int i = 0; i < 8; i++)
			v[i] = CStringGetTextDatum(values[i]);
		if (SPI_execute_with_args(psprintf("SELECT %s.streamcube_create_cube($1, $2, $3, $4, $5, "
										   "$6::interval, $7, $8::jsonb)", schema),
								  8, t, v, NULL, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not create cube %s", values[0]);
		return;
	}
	sc_catalog_exec("SELECT cluster_name, topic FROM streamcube.cubes WHERE relid = to_regclass($1)",
					1, (Oid[]) {TEXTOID}, (Datum[]) {CStringGetTextDatum(values[0])}, NULL, true, 1);
	if (SPI_processed != 1 ||
		strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), values[1]) != 0 ||
		strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2), values[2]) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cube %s on this server does not read topic \"%s\" of cluster \"%s\", as on its home server",
						values[0], values[2], values[1]),
				 errhint("Drop or rename the other cube of that name on this server.")));
}

/*
 * streamcube_adopt(definition jsonb, replica_set text, partitions int[],
 * positions bigint[]) RETURNS text, on a node
 */
Datum
sc_adopt(PG_FUNCTION_ARGS)
{
	char	   *replica_set = sc_text_arg(fcinfo, 1, "replica set");
	const char *schema = quote_identifier(get_namespace_name(get_func_namespace(fcinfo->flinfo->fn_oid)));
	Jsonb	   *definition;
	char	   *name;
	int32	   *parts;
	int64	   *offsets;
	int			n;
	int			theirs = 0;
	bool	   *mine;
	MemoryContext cxt = CurrentMemoryContext;
	int32		cube_id;
	Oid			relid;
	Oid			owner;
	int64		epoch;
	char	   *assignment;

	sc_require_admin("adopt partitions from a home server");
	if (PG_ARGISNULL(0) || PG_ARGISNULL(2) || PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("the arguments of streamcube_adopt must not be NULL")));
	definition = PG_GETARG_JSONB_P(0);
	n = ArrayGetNItems(ARR_NDIM(PG_GETARG_ARRAYTYPE_P(2)), ARR_DIMS(PG_GETARG_ARRAYTYPE_P(2)));
	if (n == 0 || n != ArrayGetNItems(ARR_NDIM(PG_GETARG_ARRAYTYPE_P(3)), ARR_DIMS(PG_GETARG_ARRAYTYPE_P(3))) ||
		array_contains_nulls(PG_GETARG_ARRAYTYPE_P(2)) || array_contains_nulls(PG_GETARG_ARRAYTYPE_P(3)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("streamcube_adopt needs one position per partition, and at least one partition")));
	parts = (int32 *) ARR_DATA_PTR(PG_GETARG_ARRAYTYPE_P(2));
	offsets = (int64 *) ARR_DATA_PTR(PG_GETARG_ARRAYTYPE_P(3));
	/* the home server marks the placement done on our answer: durable first */
	sc_commit_synchronously();

	SPI_connect();
	sc_adopt_cube(schema, definition, replica_set);
	/* what follows reads with the statement's snapshot: let it see them */
	CommandCounterIncrement();
	PushActiveSnapshot(GetTransactionSnapshot());
	sc_catalog_exec("SELECT $1->>'name'", 1, (Oid[]) {JSONBOID}, (Datum[]) {JsonbPGetDatum(definition)},
					NULL, true, 1);
	name = MemoryContextStrdup(cxt, sc_spi_text());
	cube_id = sc_cube_for_action(name, "adopt partitions of", &relid, &owner);

	/*
	 * Each partition: this set's already, another's (refused), or nobody's.
	 * One this set holds must be held from this hand-over: adopting raised
	 * its checkpoint to the position, which only moves on from there; one
	 * below it was adopted from an earlier hand-over (the cube made again
	 * on the home server), and this one would overlap it.
	 */
	sc_catalog_exec("SELECT a.partition, a.replica_set, coalesce(k.\"offset\" < u.position, false) "
					"FROM streamcube.assignments a "
					"JOIN unnest($2, $3) AS u(partition, position) ON u.partition = a.partition "
					"LEFT JOIN streamcube.checkpoints k ON k.cube_id = a.cube_id AND k.partition = a.partition "
					"WHERE a.cube_id = $1 ORDER BY a.partition",
					3, (Oid[]) {INT4OID, INT4ARRAYOID, INT8ARRAYOID},
					(Datum[]) {Int32GetDatum(cube_id), PG_GETARG_DATUM(2), PG_GETARG_DATUM(3)},
					NULL, true, 0);
	mine = palloc0(sizeof(bool) * n);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *set = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
		int32		partition = atoi(SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));

		if (strcmp(set, replica_set) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("partition %s of cube %s is consumed by replica set \"%s\" on this server",
							SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1), name, set),
					 errhint("The home server hands a partition to one node at a time; streamcube.placements there says which.")));
		if (strcmp(SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3), "t") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("replica set \"%s\" consumes partition %d of cube %s from an earlier hand-over, behind this one",
							replica_set, partition, name),
					 errhint("The cube was made again on its home server: drop cube %s on this server before placing the set again.",
							 name)));
		theirs++;
		for (int j = 0; j < n; j++)
			mine[j] |= parts[j] == partition;
	}
	if (theirs == n)
	{
		PopActiveSnapshot();
		SPI_finish();
		PG_RETURN_TEXT_P(cstring_to_text(psprintf("replica set \"%s\" consumes those partitions of cube %s already",
												  replica_set, name)));
	}

	/* Start them where the home server stopped: the merge takes the largest. */
	for (int i = 0; i < n; i++)
		if (!mine[i])
			sc_positions_raise_checkpoint(cube_id, parts[i], offsets[i]);
	sc_catalog_exec("SELECT jsonb_object_agg(replica_set, parts)::text FROM "
					"(SELECT replica_set, jsonb_agg(partition ORDER BY partition) AS parts FROM "
					" (SELECT partition, replica_set FROM streamcube.assignments WHERE cube_id = $1 "
					"  UNION SELECT unnest($2), $3) a GROUP BY replica_set) s",
					3, (Oid[]) {INT4OID, INT4ARRAYOID, TEXTOID},
					(Datum[]) {Int32GetDatum(cube_id), PG_GETARG_DATUM(2), CStringGetTextDatum(replica_set)},
					NULL, true, 1);
	assignment = sc_spi_text();
	(void) sc_reassign_call(name, sc_jsonb_of(assignment), sc_jsonb_of("{\"allow_partial\": true}"),
							"streamcube_adopt", &epoch);
	PopActiveSnapshot();
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(psprintf("replica set \"%s\" consumes %d partitions of cube %s from now on (reassign_id " INT64_FORMAT ")",
											  replica_set, n, name, epoch)));
}

/* ----------------------------------------------------------------
 * On the home server: the launcher has nodes adopt what was placed
 * ----------------------------------------------------------------
 */

/* A placement to drive, in the step's transaction. */
typedef struct ScPlacementTodo
{
	int32		cube_id;
	char	   *cube;
	char	   *replica_set;
	char	   *node;
	Oid			placed_by;
	char	   *definition;
	char	   *partitions;
	char	   *positions;
} ScPlacementTodo;

/*
 * The placement waiting longest whose back-off is over (a node that failed
 * is tried again after 2^attempts seconds, at most a minute); false: none.
 * The definition is the cube as the node makes it: the same table, format
 * and options, no replica set of its own, new partitions left to home.
 */
static bool
sc_placement_next(ScPlacementTodo *todo)
{
	TupleDesc	desc;
	HeapTuple	tup;
	bool		isnull;

	sc_catalog_exec("SELECT p.cube_id, c.relid::regclass::text, p.replica_set, p.node, p.placed_by, "
					"       jsonb_build_object('name', pg_catalog.format('%I.%I', n.nspname, r.relname), "
					"         'cluster', c.cluster_name, 'topic', c.topic, "
					"         'columns', (SELECT string_agg(pg_catalog.format('%I %s', a.attname, "
					"                       pg_catalog.format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attnum) "
					"                     FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.relid "
					"                     AND a.attnum > 0 AND NOT a.attisdropped "
					"                     AND a.attname NOT IN ('_partition', '_offset')), "
					"         'time_column', c.time_column, 'segment_interval', c.segment_interval::text, "
					"         'format', c.format, "
					"         'options', (c.options - 'replica_sets' - 'start' - 'end') "
					"                    || '{\"replica_sets\": [], \"new_partitions\": \"ignore\"}' "
					"                    || jsonb_build_object('home', (SELECT system_identifier::text "
					"                                                   FROM pg_catalog.pg_control_system())))::text, "
					"       p.partitions::text, p.positions::text "
					"FROM streamcube.placement_catalog p "
					"JOIN streamcube.cubes c USING (cube_id) "
					"JOIN pg_catalog.pg_class r ON r.oid = c.relid "
					"JOIN pg_catalog.pg_namespace n ON n.oid = r.relnamespace "
					"WHERE p.state = 'moving' AND (p.tried_at IS NULL OR p.tried_at + "
					"      least(power(2, least(p.attempts, 6)), " CppAsString2(SC_PLACE_RETRY_MAX_S) ") * interval '1 s' <= now()) "
					"ORDER BY p.tried_at NULLS FIRST, p.placed_at LIMIT 1",
					0, NULL, NULL, NULL, true, 1);
	if (SPI_processed == 0)
		return false;
	desc = SPI_tuptable->tupdesc;
	tup = SPI_tuptable->vals[0];
	todo->cube_id = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
	todo->cube = MemoryContextStrdup(TopTransactionContext, SPI_getvalue(tup, desc, 2));
	todo->replica_set = MemoryContextStrdup(TopTransactionContext, SPI_getvalue(tup, desc, 3));
	todo->node = MemoryContextStrdup(TopTransactionContext, SPI_getvalue(tup, desc, 4));
	todo->placed_by = DatumGetObjectId(SPI_getbinval(tup, desc, 5, &isnull));
	todo->definition = MemoryContextStrdup(TopTransactionContext, SPI_getvalue(tup, desc, 6));
	todo->partitions = MemoryContextStrdup(TopTransactionContext, SPI_getvalue(tup, desc, 7));
	todo->positions = MemoryContextStrdup(TopTransactionContext, SPI_getvalue(tup, desc, 8));
	return true;
}

/* Have the node adopt the placement's partitions, as the role that placed them. */
static char *
sc_placement_adopt(ScPlacementTodo *todo, ScNodeConn *conn)
{
	ScAsOwner	as;
	char	   *schema;
	PGresult   *r;
	char	   *answer;

	if (!sc_is_admin(todo->placed_by))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("role %s, which placed replica set \"%s\" of cube %s, is no longer an administrator",
						GetUserNameFromId(todo->placed_by, true) ?
						quote_identifier(GetUserNameFromId(todo->placed_by, true)) :
						psprintf("with OID %u (dropped)", todo->placed_by),
						todo->replica_set, todo->cube),
				 errhint("Drop the cube, or grant streamcube_admin to that role again.")));
	sc_as_owner_enter(&as, todo->placed_by);
	sc_node_open(todo->node, conn, &schema);
	/* the node's COMMIT durable before it answers: we mark the row on it */
	PQclear(sc_node_query(conn, "SET synchronous_commit = on", SC_ADOPT_QUERY_MS));
	r = sc_node_query(conn,
					  psprintf("SELECT %s.streamcube_adopt(%s::jsonb, %s, %s::int4[], %s::int8[])",
							   schema, quote_literal_cstr(todo->definition),
							   quote_literal_cstr(todo->replica_set),
							   quote_literal_cstr(todo->partitions),
							   quote_literal_cstr(todo->positions)),
					  SC_ADOPT_QUERY_MS);
	answer = PQntuples(r) == 1 ? pstrdup(PQgetvalue(r, 0, 0)) : pstrdup("");
	PQclear(r);
	sc_node_close(conn);
	sc_as_owner_leave(&as);
	return answer;
}

/* The node did not adopt: count it, say why, try again later. */
static void
sc_placement_failed(int32 cube_id, const char *replica_set, const char *why)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	SPI_connect();
	sc_catalog_exec("UPDATE streamcube.placement_catalog "
					"SET attempts = attempts + 1, last_error = $3, tried_at = now() "
					"WHERE cube_id = $1 AND replica_set = $2 AND state = 'moving'",
					3, (Oid[]) {INT4OID, TEXTOID, TEXTOID},
					(Datum[]) {Int32GetDatum(cube_id), CStringGetTextDatum(replica_set),
					CStringGetTextDatum(why)},
					NULL, false, 0);
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
}

/*
 * One step of the launcher: a placement whose node has not adopted its
 * partitions yet is driven there.  A failure (the node down, a role
 * without a user mapping, an error there) is logged, kept in the row and
 * tried again after a back-off; it never stops the launcher.  Returns true
 * when a placement was tried (more may wait).
 */
bool
sc_placement_step(void)
{
	MemoryContext cxt = CurrentMemoryContext;
	ScPlacementTodo todo = {0};
	volatile ScNodeConn conn = {0};
	volatile bool found = false;
	volatile int32 cube_id = 0;
	char		replica_set[NAMEDATALEN * 2] = "";

	PG_TRY();
	{
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		if (OidIsValid(get_extension_oid("streamcube", true)) &&
			sc_catalog_has_column("placement_catalog", "state"))
		{
			SPI_connect();
			found = sc_placement_next(&todo);
			if (found)
			{
				char	   *answer;

				cube_id = todo.cube_id;
				strlcpy(replica_set, todo.replica_set, sizeof(replica_set));
				pgstat_report_activity(STATE_RUNNING, "streamcube: a node adopts a placed replica set");
				answer = sc_placement_adopt(&todo, (ScNodeConn *) &conn);
				sc_catalog_exec("UPDATE streamcube.placement_catalog "
								"SET state = 'placed', attempts = attempts + 1, last_error = NULL, "
								"    tried_at = now(), adopted_at = now() "
								"WHERE cube_id = $1 AND replica_set = $2 AND state = 'moving'",
								2, (Oid[]) {INT4OID, TEXTOID},
								(Datum[]) {Int32GetDatum(cube_id), CStringGetTextDatum(replica_set)},
								NULL, false, 0);
				ereport(LOG,
						(errmsg("node \"%s\" adopted replica set \"%s\" of cube %s: %s",
								todo.node, replica_set, todo.cube, answer)));
			}
			SPI_finish();
		}
		PopActiveSnapshot();
		CommitTransactionCommand();
		pgstat_report_activity(STATE_IDLE, NULL);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		EmitErrorReport();
		FlushErrorState();
		sc_node_close((ScNodeConn *) &conn);
		AbortCurrentTransaction();
		pgstat_report_activity(STATE_IDLE, NULL);
		if (found)
			sc_placement_failed(cube_id, replica_set, edata->message);
		FreeErrorData(edata);
	}
	PG_END_TRY();
	return found;
}
