/*-------------------------------------------------------------------------
 *
 * node_conn.h
 *		A connection to a node, another PostgreSQL server (node_conn.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_NODE_CONN_H
#define SC_NODE_CONN_H

#include "foreign/foreign.h"
#include "libpq-fe.h"

typedef struct ScNodeConn
{
	const char *name;			/* the node's name, for messages */
	const char *server;			/* its foreign server's */
	PGconn	   *conn;			/* NULL once closed */
	bool		fd_held;		/* AcquireExternalFD() counted its socket */
} ScNodeConn;

extern void sc_node_connect(ScNodeConn *node, const char *name, ForeignServer *server);
extern PGresult *sc_node_query(ScNodeConn *node, const char *sql, int timeout_ms);
extern void sc_node_close(ScNodeConn *node);

/* nodes.c */
extern void sc_node_open(const char *name, ScNodeConn *node, char **schema);

#endif							/* SC_NODE_CONN_H */
