/*-------------------------------------------------------------------------
 *
 * node_conn.c
 *		A connection to another PostgreSQL server, a node, through what
 *		its postgres_fdw foreign server and user mapping say.
 *
 * A node is a foreign server of postgres_fdw that an administrator made
 * (CREATE SERVER ... FOREIGN DATA WRAPPER postgres_fdw) with a user mapping
 * for the role that acts on it.  The connection options are the server's
 * and the mapping's, as postgres_fdw reads them: the credentials stay in
 * pg_user_mapping, where PostgreSQL keeps them, and are never copied into
 * a streamcube table, a message or the server log.  The rules of
 * postgres_fdw hold: only the options libpq knows are passed on; a role
 * that is not a superuser must connect with the mapping's password (a
 * mapping's password_required 'false', which only a superuser can set,
 * lifts that), so that no role borrows the server's own identity (its
 * .pgpass, peer or trust authentication) to reach another server.
 *
 * Connecting and every query answer interrupts: the backend waits on its
 * latch and the socket, never inside libpq, and gives up after a timeout.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "node_conn.h"

#include "catalog/pg_user_mapping.h"
#include "commands/defrem.h"
#include "foreign/foreign.h"
#include "libpq-fe.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

/* How long a connection may take unless the server's options say. */
#define SC_NODE_CONNECT_S 10

/* Is keyword a libpq connection option (postgres_fdw passes those only)? */
static bool
sc_libpq_option(const PQconninfoOption *known, const char *keyword)
{
	for (const PQconninfoOption *o = known; o->keyword != NULL; o++)
		if (strcmp(o->keyword, keyword) == 0)
			/* debug options, and replication, are not for a node */
			return strchr(o->dispchar, 'D') == NULL && strcmp(keyword, "replication") != 0;
	return false;
}

/* Append the libpq options of a list of DefElems. */
static int
sc_node_options(List *options, const PQconninfoOption *known, const char **keywords,
				const char **values, int n)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *d = lfirst(lc);

		if (sc_libpq_option(known, d->defname))
		{
			keywords[n] = d->defname;
			values[n++] = defGetString(d);
		}
	}
	return n;
}

/* Does the user mapping lift the password rule (password_required 'false')? */
static bool
sc_node_password_optional(UserMapping *um)
{
	ListCell   *lc;

	foreach(lc, um->options)
	{
		DefElem    *d = lfirst(lc);

		if (strcmp(d->defname, "password_required") == 0)
			return !defGetBoolean(d);
	}
	return false;
}

/*
 * Is a non-empty password among the options?  An empty one is no password
 * to libpq, which then reads a password file: the server's own.
 */
static bool
sc_node_has_password(const char **keywords, const char **values, int n)
{
	for (int i = 0; i < n; i++)
		if (strcmp(keywords[i], "password") == 0 && values[i][0] != '\0')
			return true;
	return false;
}

/* The deadline of connecting: connect_timeout as libpq reads it, or ours. */
static TimestampTz
sc_node_connect_deadline(const char **keywords, const char **values, int n)
{
	int			seconds = SC_NODE_CONNECT_S;

	for (int i = 0; i < n; i++)
		if (strcmp(keywords[i], "connect_timeout") == 0)
		{
			seconds = atoi(values[i]);
			/* 0 or less: no limit but the statement's; libpq waits 2 s at least */
			seconds = seconds <= 0 ? 86400 : Max(seconds, 2);
		}
	return TimestampTzPlusMilliseconds(GetCurrentTimestamp(), (int64) seconds * 1000);
}

/*
 * Wait until the socket is ready for events (WL_SOCKET_READABLE and/or
 * WL_SOCKET_WRITEABLE) or the deadline passes (0 returned), answering
 * interrupts meanwhile; which of events happened.
 */
static int
sc_node_wait(PGconn *conn, int events, TimestampTz deadline)
{
	for (;;)
	{
		long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		int			rc;

		if (left <= 0)
			return 0;
		rc = WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH | events,
							   PQsocket(conn), left, PG_WAIT_EXTENSION);
		if (rc & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
		if (rc & events)
			return rc & events;
	}
}

void
sc_node_close(ScNodeConn *node)
{
	if (node == NULL)
		return;
	if (node->conn != NULL)
	{
		PQfinish(node->conn);
		node->conn = NULL;
	}
	if (node->fd_held)
	{
		ReleaseExternalFD();
		node->fd_held = false;
	}
}

/* Raise a node's error (the connection closed first); never returns. */
static void
sc_node_fail(ScNodeConn *node, const char *what, const char *why)
{
	char	   *message = pstrdup(why != NULL && why[0] != '\0' ? why : "no answer");
	int			len = strlen(message);

	while (len > 0 && (message[len - 1] == '\n' || message[len - 1] == ' '))
		message[--len] = '\0';
	sc_node_close(node);
	ereport(ERROR,
			(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
			 errmsg("node \"%s\" (foreign server \"%s\") %s: %s", node->name, node->server, what, message),
			 errhint("Check that the server runs and that foreign server \"%s\" and its user mapping for role \"%s\" reach it: "
					 "SELECT * FROM pg_user_mappings WHERE srvname = '%s'.",
					 node->server, GetUserNameFromId(GetUserId(), false), node->server)));
}

/*
 * Connect to node `name`, by foreign server `server`, as the current user's
 * user mapping says (the caller checked USAGE on the server).  The
 * connection is closed by sc_node_close(), also on error: callers wrap
 * their use in PG_TRY/PG_FINALLY.
 */
void
sc_node_connect(ScNodeConn *node, const char *name, ForeignServer *server)
{
	UserMapping *um = GetUserMapping(GetUserId(), server->serverid);
	bool		need_password = !superuser() && !sc_node_password_optional(um);
	int			max = list_length(server->options) + list_length(um->options) + 4;
	const char **keywords = palloc0(sizeof(char *) * max);
	const char **values = palloc0(sizeof(char *) * max);
	PQconninfoOption *known;
	int			n = 0;
	bool		timeout_given = false;
	TimestampTz deadline;
	PostgresPollingStatusType status = PGRES_POLLING_WRITING;

	node->name = name;
	node->server = server->servername;
	node->conn = NULL;
	node->fd_held = false;
	known = PQconndefaults();
	if (known == NULL)
		elog(ERROR, "out of memory");
	n = sc_node_options(server->options, known, keywords, values, n);
	n = sc_node_options(um->options, known, keywords, values, n);
	PQconninfoFree(known);
	if (need_password && !sc_node_has_password(keywords, values, n))
		ereport(ERROR,
				(errcode(ERRCODE_S_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED),
				 errmsg("the user mapping of role \"%s\" for foreign server \"%s\" has no password",
						GetUserNameFromId(GetUserId(), false), server->servername),
				 errdetail("A role that is not a superuser reaches another server with a password of its own, as postgres_fdw requires."),
				 errhint("ALTER USER MAPPING FOR CURRENT_USER SERVER %s OPTIONS (ADD password '...').",
						 quote_identifier(server->servername))));
	deadline = sc_node_connect_deadline(keywords, values, n);
	for (int i = 0; i < n; i++)
		timeout_given |= strcmp(keywords[i], "connect_timeout") == 0;
	keywords[n] = "fallback_application_name";
	values[n++] = "streamcube";
	keywords[n] = "client_encoding";
	values[n++] = GetDatabaseEncodingName();
	if (!timeout_given)
	{
		keywords[n] = "connect_timeout";
		values[n++] = CppAsString2(SC_NODE_CONNECT_S);
	}
	keywords[n] = NULL;
	values[n] = NULL;

	/* a file descriptor counted against max_files_per_process, as postgres_fdw */
	if (!AcquireExternalFD())
		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("could not connect to node \"%s\": out of file descriptors", name),
				 errhint("Raise max_files_per_process, or close other connections.")));
	node->fd_held = true;
	node->conn = PQconnectStartParams(keywords, values, false);
	if (node->conn == NULL)
		elog(ERROR, "out of memory");
	while (PQstatus(node->conn) != CONNECTION_BAD && status != PGRES_POLLING_OK &&
		   status != PGRES_POLLING_FAILED)
	{
		if (!sc_node_wait(node->conn, status == PGRES_POLLING_WRITING ? WL_SOCKET_WRITEABLE : WL_SOCKET_READABLE,
						  deadline))
			sc_node_fail(node, "did not answer", "no connection within its connect timeout");
		status = PQconnectPoll(node->conn);
	}
	if (PQstatus(node->conn) != CONNECTION_OK)
		sc_node_fail(node, "cannot be reached", PQerrorMessage(node->conn));
	if (need_password && !PQconnectionUsedPassword(node->conn))
	{
		sc_node_close(node);
		ereport(ERROR,
				(errcode(ERRCODE_S_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED),
				 errmsg("node \"%s\" (foreign server \"%s\") did not ask for the password of the user mapping",
						name, server->servername),
				 errdetail("A role that is not a superuser may reach another server only by a password of its own, as postgres_fdw requires."),
				 errhint("Make the other server ask for a password (pg_hba.conf), or have a superuser set password_required 'false' on the user mapping.")));
	}
	/* queries are sent without blocking: sc_node_query() waits on the latch */
	if (PQsetnonblocking(node->conn, 1) != 0)
		sc_node_fail(node, "failed", PQerrorMessage(node->conn));
}

/*
 * Run one query on the node, waiting with interrupts answered, within
 * timeout_ms; its result (PGRES_TUPLES_OK or PGRES_COMMAND_OK, else an
 * ERROR naming the node).  The caller PQclear()s it.
 */
PGresult *
sc_node_query(ScNodeConn *node, const char *sql, int timeout_ms)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	PGresult   *result = NULL;
	PGresult   *next;
	int			flushed;

	if (!PQsendQuery(node->conn, sql))
		sc_node_fail(node, "refused a query", PQerrorMessage(node->conn));
	/* the query goes out; an answer may come meanwhile (libpq reads it) */
	while ((flushed = PQflush(node->conn)) == 1)
	{
		int			ready = sc_node_wait(node->conn, WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE, deadline);

		if (ready == 0)
			sc_node_fail(node, "did not answer", psprintf("no answer within %d ms", timeout_ms));
		if ((ready & WL_SOCKET_READABLE) && !PQconsumeInput(node->conn))
			sc_node_fail(node, "failed", PQerrorMessage(node->conn));
	}
	if (flushed < 0)
		sc_node_fail(node, "failed", PQerrorMessage(node->conn));
	for (;;)
	{
		while (PQisBusy(node->conn))
		{
			if (!sc_node_wait(node->conn, WL_SOCKET_READABLE, deadline))
				sc_node_fail(node, "did not answer", psprintf("no answer within %d ms", timeout_ms));
			if (!PQconsumeInput(node->conn))
				sc_node_fail(node, "failed", PQerrorMessage(node->conn));
		}
		next = PQgetResult(node->conn);
		if (next == NULL)
			break;
		if (result != NULL)
			PQclear(result);
		result = next;
	}
	if (result == NULL || (PQresultStatus(result) != PGRES_TUPLES_OK &&
						   PQresultStatus(result) != PGRES_COMMAND_OK))
	{
		char	   *why = pstrdup(result != NULL ? PQresultErrorMessage(result) : PQerrorMessage(node->conn));

		if (result != NULL)
			PQclear(result);
		sc_node_fail(node, "failed a query", why);
	}
	return result;
}
