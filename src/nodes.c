/*-------------------------------------------------------------------------
 *
 * nodes.c
 *		SQL functions on nodes, the other PostgreSQL servers a cube's
 *		replica sets may run on: add, drop.
 *
 * A node is a name for a foreign server of postgres_fdw (issue 47): the
 * administrator makes the server and a user mapping, as for any foreign
 * table, and streamcube_add_node(name, server) checks that it is usable
 * before it records the name, server and what the node is: reached with
 * the caller's user mapping (node_conn.c), running the same version of
 * streamcube as this server, in the database its launcher serves, not a
 * standby, and not this server itself nor a copy of it (the same system
 * identifier: a clone would consume the same partitions with the same
 * positions).  Nothing of the connection is stored but the server's name:
 * its credentials stay in PostgreSQL's user mappings.
 *
 * streamcube.node_catalog is written here only.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "node_conn.h"

#include "access/xlog.h"
#include "catalog/dependency.h"
#include "catalog/pg_foreign_data_wrapper.h"
#include "commands/extension.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "funcapi.h"

PG_FUNCTION_INFO_V1(sc_add_node);
PG_FUNCTION_INFO_V1(sc_drop_node);
PG_FUNCTION_INFO_V1(sc_check_node);

/* How long each check may wait for the node. */
#define SC_NODE_QUERY_MS 10000

/* What a node says about itself. */
typedef struct ScNodeFacts
{
	char	   *extversion;		/* NULL: no streamcube there */
	char	   *library;		/* streamcube_library_version() */
	bool		standby;
	char	   *system_identifier;
	char	   *schema;			/* streamcube's schema there */
} ScNodeFacts;

/* The foreign server a node is to use, checked as the caller may use it. */
static ForeignServer *
sc_node_server(const char *name, const char *server_name)
{
	ForeignServer *server = GetForeignServerByName(server_name, true);
	ForeignDataWrapper *fdw;
	AclResult	acl;

	if (server == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("foreign server \"%s\" of node \"%s\" does not exist", server_name, name),
				 errhint("Make it with CREATE SERVER %s FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '...', port '...', dbname '...'), "
						 "and a user mapping for it.", quote_identifier(server_name))));
	fdw = GetForeignDataWrapper(server->fdwid);
	/* postgres_fdw's own wrapper: its validator checked the options */
	if (strcmp(fdw->fdwname, "postgres_fdw") != 0 ||
		!OidIsValid(get_extension_oid("postgres_fdw", true)) ||
		getExtensionOfObject(ForeignDataWrapperRelationId, fdw->fdwid) != get_extension_oid("postgres_fdw", true))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("foreign server \"%s\" of node \"%s\" uses foreign-data wrapper \"%s\", not postgres_fdw",
						server_name, name, fdw->fdwname),
				 errhint("A node is a foreign server of postgres_fdw (CREATE EXTENSION postgres_fdw).")));
	acl = pg_foreign_server_aclcheck(server->serverid, GetUserId(), ACL_USAGE);
	if (acl != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for foreign server \"%s\" of node \"%s\"", server_name, name),
				 errhint("GRANT USAGE ON FOREIGN SERVER %s TO the role that adds the node.",
						 quote_identifier(server_name))));
	if (!SearchSysCacheExists2(USERMAPPINGUSERSERVER, ObjectIdGetDatum(GetUserId()),
							   ObjectIdGetDatum(server->serverid)) &&
		!SearchSysCacheExists2(USERMAPPINGUSERSERVER, ObjectIdGetDatum(InvalidOid),
							   ObjectIdGetDatum(server->serverid)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("role \"%s\" has no user mapping for foreign server \"%s\" of node \"%s\"",
						GetUserNameFromId(GetUserId(), false), server_name, name),
				 errhint("CREATE USER MAPPING FOR CURRENT_USER SERVER %s OPTIONS (user '...', password '...').",
						 quote_identifier(server_name))));
	return server;
}

/* One value of a one-row result; NULL for SQL NULL. */
static char *
sc_node_value(ScNodeConn *node, PGresult *r, int column)
{
	if (PQntuples(r) != 1 || column >= PQnfields(r))
	{
		PQclear(r);
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("node \"%s\" (foreign server \"%s\") answered a check with another shape than asked",
						node->name, node->server)));
	}
	return PQgetisnull(r, 0, column) ? NULL : pstrdup(PQgetvalue(r, 0, column));
}

/* Ask the node what it is (the connection is closed by the caller). */
static void
sc_node_ask(ScNodeConn *node, ScNodeFacts *facts)
{
	PGresult   *r;
	char	   *standby;
	char	   *schema;

	r = sc_node_query(node,
					  "SELECT e.extversion, pg_catalog.pg_is_in_recovery(), "
					  "       (SELECT system_identifier FROM pg_catalog.pg_control_system()), n.nspname "
					  "FROM (SELECT) x LEFT JOIN pg_catalog.pg_extension e ON e.extname = 'streamcube' "
					  "LEFT JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace",
					  SC_NODE_QUERY_MS);
	facts->extversion = sc_node_value(node, r, 0);
	standby = sc_node_value(node, r, 1);
	facts->standby = standby != NULL && strcmp(standby, "t") == 0;
	facts->system_identifier = sc_node_value(node, r, 2);
	schema = sc_node_value(node, r, 3);
	facts->schema = schema;
	PQclear(r);
	facts->library = NULL;
	if (facts->extversion != NULL && schema != NULL)
	{
		r = sc_node_query(node, psprintf("SELECT %s.streamcube_library_version()", quote_identifier(schema)),
						  SC_NODE_QUERY_MS);
		facts->library = sc_node_value(node, r, 0);
		PQclear(r);
	}
}

/* This server's streamcube version, as its catalog says. */
static char *
sc_local_extversion(void)
{
	char	   *version;

	SPI_connect();
	if (SPI_execute("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'streamcube'",
					true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "streamcube is not installed in this database");
	version = MemoryContextStrdup(TopTransactionContext,
								  SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1));
	SPI_finish();
	return version;
}

/* Refuse a node that is not another server running this streamcube. */
static void
sc_node_check(const char *name, const char *server, const ScNodeFacts *facts)
{
	char	   *local = sc_local_extversion();
	char		sysid[32];

	if (facts->extversion == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("node \"%s\" (foreign server \"%s\") does not have the extension streamcube", name, server),
				 errhint("On that server, in the database of its streamcube.database setting: CREATE EXTENSION streamcube (version %s, as here).",
						 local)));
	if (strcmp(facts->extversion, local) != 0 ||
		facts->library == NULL || strcmp(facts->library, SC_LIBRARY_VERSION) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("node \"%s\" (foreign server \"%s\") runs streamcube %s (library %s), and this server %s (library %s)",
						name, server, facts->extversion, facts->library ? facts->library : "unknown",
						local, SC_LIBRARY_VERSION),
				 errhint("Install the same build on both servers and run ALTER EXTENSION streamcube UPDATE on both.")));
	if (facts->standby)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("node \"%s\" (foreign server \"%s\") is a standby", name, server),
				 errhint("A node ingests: give the foreign server of a primary.")));
	snprintf(sysid, sizeof(sysid), UINT64_FORMAT, GetSystemIdentifier());
	if (facts->system_identifier != NULL && strcmp(facts->system_identifier, sysid) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("foreign server \"%s\" of node \"%s\" reaches this server, or a copy of it (system identifier %s)",
						server, name, sysid),
				 errhint("A node is another PostgreSQL server, made by its own initdb.")));
}

/*
 * Connect to the node, ask it what it is and check that (the connection
 * closed whatever happens); how long it took, in ms.
 */
static double
sc_node_visit(const char *name, ForeignServer *server, ScNodeFacts *facts)
{
	volatile ScNodeConn node = {0};
	TimestampTz start = GetCurrentTimestamp();

	PG_TRY();
	{
		sc_node_connect((ScNodeConn *) &node, name, server);
		sc_node_ask((ScNodeConn *) &node, facts);
	}
	PG_FINALLY();
	{
		sc_node_close((ScNodeConn *) &node);
	}
	PG_END_TRY();
	sc_node_check(name, server->servername, facts);
	return (double) (GetCurrentTimestamp() - start) / 1000.0;
}

/* A node's catalog row: its foreign server and system identifier (NULL). */
static char *
sc_node_row(const char *name, char **recorded)
{
	Oid			type = TEXTOID;
	Datum		value = CStringGetTextDatum(name);
	char	   *server_name;

	SPI_connect();
	sc_catalog_exec("SELECT server, system_identifier FROM streamcube.node_catalog WHERE name = $1",
					1, &type, &value, NULL, true, 1);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("node \"%s\" does not exist", name),
				 errhint("streamcube.nodes lists the nodes; streamcube_add_node adds one.")));
	server_name = MemoryContextStrdup(TopTransactionContext,
									  SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1));
	*recorded = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	if (*recorded != NULL)
		*recorded = MemoryContextStrdup(TopTransactionContext, *recorded);
	SPI_finish();
	return server_name;
}

/* Refuse a node that is no longer the server that was added. */
static void
sc_node_same(const char *name, const char *server_name, const char *recorded,
			 const ScNodeFacts *facts)
{
	if (recorded != NULL && facts->system_identifier != NULL &&
		strcmp(recorded, facts->system_identifier) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("node \"%s\" (foreign server \"%s\") is another server now: system identifier %s, and %s when it was added",
						name, server_name, facts->system_identifier, recorded),
				 errhint("If the server was replaced on purpose, drop the node and add it again.")));
}

/*
 * Open a connection to a node of the catalog as the current user, checked
 * as streamcube_check_node checks it; *schema gets streamcube's schema
 * there, quoted.  The caller closes node (sc_node_close), also on error.
 */
void
sc_node_open(const char *name, ScNodeConn *node, char **schema)
{
	char	   *recorded;
	char	   *server_name = sc_node_row(name, &recorded);
	ForeignServer *server = sc_node_server(name, server_name);
	ScNodeFacts facts;

	sc_node_connect(node, name, server);
	sc_node_ask(node, &facts);
	sc_node_check(name, server_name, &facts);
	sc_node_same(name, server_name, recorded, &facts);
	*schema = pstrdup(quote_identifier(facts.schema));
}

/*
 * streamcube_add_node(name text, server text) RETURNS void
 */
Datum
sc_add_node(PG_FUNCTION_ARGS)
{
	char	   *name = sc_text_arg(fcinfo, 0, "node name");
	char	   *server_name = sc_text_arg(fcinfo, 1, "foreign server");
	ForeignServer *server;
	ScNodeFacts facts;
	Oid			types[5] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, NAMEOID};
	Datum		values[5];

	sc_require_admin("add nodes");
	if (name[0] == '\0' || strlen(name) >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("node name \"%s\" must be 1 to %d bytes", name, NAMEDATALEN - 1)));
	server = sc_node_server(name, server_name);
	sc_node_visit(name, server, &facts);

	values[0] = CStringGetTextDatum(name);
	values[1] = CStringGetTextDatum(server_name);
	values[2] = CStringGetTextDatum(facts.extversion);
	values[3] = CStringGetTextDatum(facts.system_identifier ? facts.system_identifier : "");
	values[4] = DirectFunctionCall1(namein, CStringGetDatum(GetUserNameFromId(GetUserId(), false)));
	SPI_connect();
	if (sc_catalog_exec("INSERT INTO streamcube.node_catalog (name, server, version, system_identifier, added_by) "
						"VALUES ($1, $2, $3, NULLIF($4, ''), $5) "
						"ON CONFLICT (name) DO NOTHING",
						5, types, values, NULL, false, 0) != SPI_OK_INSERT || SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("node \"%s\" already exists", name),
				 errhint("Choose another name, or drop it first with streamcube_drop_node('%s').", name)));
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * streamcube_drop_node(name text) RETURNS void
 */
Datum
sc_drop_node(PG_FUNCTION_ARGS)
{
	char	   *name = sc_text_arg(fcinfo, 0, "node name");
	Oid			type = TEXTOID;
	Datum		value = CStringGetTextDatum(name);

	sc_require_admin("drop nodes");
	SPI_connect();
	sc_catalog_exec("SELECT p.replica_set, c.relid::regclass::text FROM streamcube.placement_catalog p "
					"JOIN streamcube.cubes c USING (cube_id) WHERE p.node = $1 LIMIT 1",
					1, &type, &value, NULL, true, 1);
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("node \"%s\" runs replica set \"%s\" of cube %s", name,
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1),
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2)),
				 errhint("streamcube.placements lists what runs on the node; drop those cubes first.")));
	sc_catalog_exec("DELETE FROM streamcube.node_catalog WHERE name = $1", 1, &type, &value, NULL, false, 0);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("node \"%s\" does not exist", name),
				 errhint("streamcube.nodes lists the nodes.")));
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * streamcube_check_node(name text) RETURNS TABLE (node, server, version,
 * system_identifier, answered_ms): the checks of streamcube_add_node made
 * again, and that the node is still the server that was added (the same
 * system identifier); an ERROR says what is wrong.
 */
Datum
sc_check_node(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *name = sc_text_arg(fcinfo, 0, "node name");
	char	   *server_name;
	char	   *recorded;
	ScNodeFacts facts;
	double		ms;
	Datum		values[5];
	bool		nulls[5] = {false, false, false, false, false};

	sc_require_admin("check nodes");
	InitMaterializedSRF(fcinfo, 0);
	server_name = sc_node_row(name, &recorded);
	ms = sc_node_visit(name, sc_node_server(name, server_name), &facts);
	sc_node_same(name, server_name, recorded, &facts);

	values[0] = CStringGetTextDatum(name);
	values[1] = CStringGetTextDatum(server_name);
	values[2] = CStringGetTextDatum(facts.extversion);
	values[3] = CStringGetTextDatum(facts.system_identifier ? facts.system_identifier : "");
	nulls[3] = facts.system_identifier == NULL;
	values[4] = Float8GetDatum(ms);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}
