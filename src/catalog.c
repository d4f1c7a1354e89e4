/*-------------------------------------------------------------------------
 *
 * catalog.c
 *		Privilege checks and small helpers shared by the SQL functions.
 *
 * The catalog tables of schema streamcube are owned by the extension's
 * owner and closed to PUBLIC.  The SQL functions check here who is
 * calling (a superuser, a member of streamcube_admin, or for a cube its
 * owner) and then reach the catalog with sc_catalog_enter().
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "nodes/makefuncs.h"
#include "utils/builtins.h"
#include "utils/regproc.h"
#include "utils/resowner.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/memutils.h"
#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "utils/lsyscache.h"

PG_FUNCTION_INFO_V1(sc_check_install);
PG_FUNCTION_INFO_V1(sc_library_version);

/*
 * While true, errors leave the statement out of the server log: it holds
 * secrets (streamcube_add_cluster).  Reset at the end of the transaction.
 */
bool		sc_hide_statement = false;

static emit_log_hook_type prev_emit_log_hook = NULL;

/* ----------------------------------------------------------------
 * Secrets
 *
 * Every value of a secret Kafka property this process has read (a
 * cluster's password, key, OAuth configuration) is remembered, and every
 * text that comes from librdkafka (its log lines and errors, the messages
 * of a configuration it refuses) has each of them masked where it enters
 * streamcube, wherever it appears in the text: librdkafka quotes
 * configuration values in its own messages.  So do a receiver's
 * last_error, the reasons a cube is paused for and the reassignment
 * journal.  Messages a role can make quote a text of its choosing (a cube
 * name, a value PostgreSQL cannot parse) are not masked: the mask would
 * tell the role whether its guess is a secret.  A value
 * made of several parts ("principal=x scope=y") is masked part by part
 * too.  Values shorter than SC_SECRET_MIN_LEN are not looked for: masking
 * them would garble every message without hiding anything.
 * ----------------------------------------------------------------
 */
#define SC_SECRET_MIN_LEN 4
#define SC_SECRET_PART_MIN_LEN 6
#define SC_SECRET_MASK "***"

static List *sc_secrets = NIL;	/* of char *, in TopMemoryContext */

static void
sc_secret_add(const char *value, int len)
{
	ListCell   *lc;
	char	   *copy;

	foreach(lc, sc_secrets)
		if (strlen(lfirst(lc)) == (size_t) len && strncmp(lfirst(lc), value, len) == 0)
			return;
	copy = MemoryContextAlloc(TopMemoryContext, len + 1);
	memcpy(copy, value, len);
	copy[len] = '\0';
	/* Longest first: a part never masks half of a whole value. */
	for (int i = 0; i < list_length(sc_secrets); i++)
		if (strlen(list_nth(sc_secrets, i)) < (size_t) len)
		{
			sc_secrets = list_insert_nth(sc_secrets, i, copy);
			return;
		}
	sc_secrets = lappend(sc_secrets, copy);
}

void
sc_secret_remember(const char *value)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	int			len = strlen(value);

	if (len >= SC_SECRET_MIN_LEN)
		sc_secret_add(value, len);
	/* Its parts: split at white space, commas, semicolons and '='. */
	for (const char *p = value; *p;)
	{
		int			n = strcspn(p, " \t\n\r,;=");

		if (n >= SC_SECRET_PART_MIN_LEN && n < len)
			sc_secret_add(p, n);
		p += n;
		if (*p)
			p++;
	}
	MemoryContextSwitchTo(old);
}

/*
 * Mask every remembered secret in buf (of size bytes, NUL-terminated), in
 * place, allocating nothing: librdkafka's callbacks call it.
 */
void
sc_redact_buf(char *buf, size_t size)
{
	ListCell   *lc;
	size_t		masklen = strlen(SC_SECRET_MASK);

	foreach(lc, sc_secrets)
	{
		const char *secret = lfirst(lc);
		size_t		slen = strlen(secret);	/* >= masklen */
		char	   *from = buf;
		char	   *hit;

		while ((hit = strstr(from, secret)) != NULL)
		{
			size_t		tail = strlen(hit + slen);

			memcpy(hit, SC_SECRET_MASK, masklen);
			memmove(hit + masklen, hit + slen, tail + 1);
			from = hit + masklen;
		}
	}
	(void) size;
}

/* A copy of text with every remembered secret masked (text itself if none). */
char *
sc_redact(const char *text)
{
	char	   *copy;

	if (text == NULL || sc_secrets == NIL)
		return (char *) text;
	copy = pstrdup(text);
	sc_redact_buf(copy, strlen(copy) + 1);
	return copy;
}

static void
sc_emit_log(ErrorData *edata)
{
	if (sc_hide_statement)
		edata->hide_stmt = true;
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

void
sc_log_hook_install(void)
{
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = sc_emit_log;
}

/*
 * The SQL functions are not SECURITY DEFINER: GetUserId() is the caller.
 * They reach the closed catalog tables between sc_catalog_enter() and
 * sc_catalog_leave(), which act as the bootstrap superuser with a safe
 * search_path (as a SECURITY DEFINER function with SET search_path would),
 * so that nothing the caller put on its search_path runs with those
 * rights.  An error in between is safe: transaction abort restores both.
 */
void
sc_catalog_enter(ScPrivilegeSave *save)
{
	GetUserIdAndSecContext(&save->userid, &save->sec_context);
	SetUserIdAndSecContext(BOOTSTRAP_SUPERUSERID,
						   save->sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	save->nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
}

void
sc_catalog_leave(ScPrivilegeSave *save)
{
	AtEOXact_GUC(true, save->nestlevel);
	SetUserIdAndSecContext(save->userid, save->sec_context);
}

/*
 * Run one statement on streamcube's catalog between sc_catalog_enter() and
 * sc_catalog_leave(); the caller is connected to SPI.  Errors when SPI
 * fails; returns SPI's code (SPI_processed and SPI_tuptable hold the rows).
 * nulls as SPI_execute_with_args() takes them (NULL: none); count 0: all.
 */
int
sc_catalog_exec(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls,
				bool read_only, long count)
{
	ScPrivilegeSave save;
	int			ret;

	sc_catalog_enter(&save);
	ret = SPI_execute_with_args(sql, nargs, types, values, nulls, read_only, count);
	sc_catalog_leave(&save);
	if (ret < 0)
		elog(ERROR, "streamcube catalog statement failed: %s", SPI_result_code_string(ret));
	return ret;
}

/*
 * Does streamcube's table have this column?  The library may be newer
 * than the catalog until ALTER EXTENSION streamcube UPDATE runs, which may
 * come while a worker runs: asked when a statement depends on it (a
 * syscache lookup).
 */
bool
sc_catalog_has_column(const char *table, const char *column)
{
	Oid			nsp = get_namespace_oid(SC_SCHEMA, true);
	Oid			rel = OidIsValid(nsp) ? get_relname_relid(table, nsp) : InvalidOid;

	return OidIsValid(rel) && get_attnum(rel, column) != InvalidAttrNumber;
}

/*
 * The journal of configuration changes, streamcube.config_log, is written
 * here only: a Kafka cluster's (cluster, secrets already masked in both
 * values) or a cube's options (cube_id and the cube's table), by the
 * current user.  The caller is connected to SPI.
 */
void
sc_config_journal(const char *cluster, int32 cube_id, Oid cube_relid,
				  Datum old_value, Datum new_value)
{
	Datum		who = DirectFunctionCall1(namein, CStringGetDatum(GetUserNameFromId(GetUserId(), false)));

	if (cluster != NULL)
		sc_catalog_exec("INSERT INTO streamcube.config_log "
						"(object_type, cluster, old_value, new_value, changed_by) "
						"VALUES ('cluster', $1, $2, $3, $4)",
						4, (Oid[]) {TEXTOID, JSONBOID, JSONBOID, NAMEOID},
						(Datum[]) {CStringGetTextDatum(cluster), old_value, new_value, who},
						NULL, false, 0);
	else
		sc_catalog_exec("INSERT INTO streamcube.config_log "
						"(object_type, cube_id, cube, old_value, new_value, changed_by) "
						"VALUES ('cube', $1, $2::oid::regclass, $3, $4, $5)",
						5, (Oid[]) {INT4OID, OIDOID, JSONBOID, JSONBOID, NAMEOID},
						(Datum[]) {Int32GetDatum(cube_id), ObjectIdGetDatum(cube_relid),
						old_value, new_value, who},
						NULL, false, 0);
}

/*
 * sc_catalog_exec() of a statement that runs again and again (per window,
 * per batch): parsed and planned once per process, into *plan, which the
 * caller keeps in a static variable; executed from the second call on.
 * The plan is made under sc_catalog_enter()'s search_path, the one it
 * always runs under, so the plan cache never has to make it again for that.
 * It is generic from the first call: each is a lookup or a write by key
 * on a small catalog table, and the plan cache would otherwise plan it
 * anew for its first five calls (custom plans), and for every call after
 * if the generic plan's estimate came out higher, as it may for a table
 * that holds a few rows.  A receiver's first 200,000 rows (CSV,
 * test/bench/instructions) planned 59 statements for events stamped now
 * and 107 replaying a month, 36 and 68 with this (about 250,000
 * instructions each).  A plan is still made again when a table it reads
 * changes (ANALYZE, DDL).
 */
int
sc_catalog_exec_kept(SPIPlanPtr *plan, const char *sql, int nargs, Oid *types,
					 Datum *values, const char *nulls, bool read_only, long count)
{
	ScPrivilegeSave save;
	int			ret;

	sc_catalog_enter(&save);
	if (*plan == NULL)
	{
		SPIPlanPtr	p = SPI_prepare_cursor(sql, nargs, types, CURSOR_OPT_GENERIC_PLAN);

		if (p == NULL)
			elog(ERROR, "could not prepare a streamcube catalog statement: %s",
				 SPI_result_code_string(SPI_result));
		SPI_keepplan(p);
		*plan = p;
	}
	ret = SPI_execute_plan(*plan, values, nulls, read_only, count);
	sc_catalog_leave(&save);
	if (ret < 0)
		elog(ERROR, "streamcube catalog statement failed: %s", SPI_result_code_string(ret));
	return ret;
}

/*
 * Act as a cube's owner (DDL on its relations, scans that run its index
 * expressions and constraints) with SECURITY_RESTRICTED_OPERATION, as
 * PostgreSQL itself does for VACUUM or CREATE INDEX: nothing the owner
 * wrote can change the session's state or outlive the operation.
 */
void
sc_as_owner_enter(ScAsOwner *save, Oid owner)
{
	GetUserIdAndSecContext(&save->userid, &save->sec_context);
	SetUserIdAndSecContext(owner, save->sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
}

void
sc_as_owner_leave(ScAsOwner *save)
{
	SetUserIdAndSecContext(save->userid, save->sec_context);
}

/*
 * Every function of the extension is declared SET search_path = pg_catalog,
 * pg_temp.  The caller's own search path is the value that SET clause
 * saved: the prior value of the newest entry on search_path's GUC stack,
 * as long as nothing pushed another (call this outside
 * sc_catalog_enter()).  Names a caller gives (a cube, a column type) are
 * resolved with it, as the caller would expect; nothing else is.
 */
static const char *
sc_caller_search_path(void)
{
	struct config_generic **vars = get_guc_variables();
	int			n = GetNumConfigOptions();

	for (int i = 0; i < n; i++)
	{
		struct config_string *var;

		if (strcmp(vars[i]->name, "search_path") != 0)
			continue;
		var = (struct config_string *) vars[i];
		if (var->gen.stack != NULL && var->gen.stack->state == GUC_SAVE &&
			var->gen.stack->prior.val.stringval != NULL)
			return var->gen.stack->prior.val.stringval;
		return *var->variable;
	}
	return "\"$user\", public";
}

/* Resolve names with the caller's search path until sc_caller_path_leave(). */
void
sc_caller_path_enter(int *nestlevel)
{
	char	   *path = pstrdup(sc_caller_search_path());

	*nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", path,
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
}

void
sc_caller_path_leave(int nestlevel)
{
	AtEOXact_GUC(true, nestlevel);
}

/*
 * A relation named by the caller, resolved with the caller's search path;
 * InvalidOid when there is none.
 */
Oid
sc_caller_relation(const char *name)
{
	int			nestlevel;
	Oid			relid;

	sc_caller_path_enter(&nestlevel);
	relid = RangeVarGetRelid(makeRangeVarFromNameList(stringToQualifiedNameList(name)),
							 NoLock, true);
	sc_caller_path_leave(nestlevel);
	return relid;
}

/* The owner of a relation; InvalidOid when it is gone. */
Oid
sc_relation_owner(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		return InvalidOid;
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

/* A relation's name, schema-qualified and quoted for SQL text. */
char *
sc_relation_qualified(Oid relid)
{
	return quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
									  get_rel_name(relid));
}

/*
 * Is name taken in schema nsp for a new table or view: by a relation, or by
 * a type (a table's row type takes its name, so CREATE would fail on a
 * type of that name that anyone with CREATE on the schema may have made)?
 */
bool
sc_name_taken(const char *name, Oid nsp)
{
	return OidIsValid(get_relname_relid(name, nsp)) ||
		OidIsValid(GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid,
								   CStringGetDatum(name), ObjectIdGetDatum(nsp)));
}

bool
sc_is_admin(Oid roleid)
{
	Oid			admin = get_role_oid(SC_ADMIN_ROLE, true);

	if (superuser_arg(roleid))
		return true;
	return OidIsValid(admin) && has_privs_of_role(roleid, admin);
}

void
sc_require_admin(const char *action)
{
	if (!sc_is_admin(GetUserId()))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to %s", action),
				 errdetail("Only superusers and members of role \"%s\" may %s.",
						   SC_ADMIN_ROLE, action),
				 errhint("GRANT %s TO the role that needs it.", SC_ADMIN_ROLE)));
}

/*
 * The launcher runs in one database only (streamcube.database); installing
 * the extension anywhere else would give cubes that nobody consumes.
 */
void
sc_check_database(void)
{
	const char *current = get_database_name(MyDatabaseId);

	if (sc_database == NULL || strcmp(current, sc_database) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("streamcube can only be installed in database \"%s\"",
						sc_database ? sc_database : ""),
				 errdetail("The current database is \"%s\"; streamcube's launcher runs in the database named by streamcube.database.",
						   current),
				 errhint("Connect to database \"%s\", or set streamcube.database = '%s' in postgresql.conf and restart the server.",
						 sc_database ? sc_database : "", current)));
}

/* A text argument that must not be NULL, as a C string. */
char *
sc_text_arg(FunctionCallInfo fcinfo, int n, const char *what)
{
	if (PG_ARGISNULL(n))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be NULL", what)));
	return text_to_cstring(PG_GETARG_TEXT_PP(n));
}

/*
 * Run fn(arg) in a subtransaction.  Returns NULL when it succeeded, or the
 * error, copied into the caller's memory context, when it failed (the
 * subtransaction is rolled back).  The caller decides what to rethrow.
 */
ErrorData *
sc_try(void (*fn) (void *), void *arg)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	ErrorData  *volatile edata = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		fn(arg);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_END_TRY();
	return edata;
}

/*
 * sc_try() of work that takes its locks without waiting (NOWAIT): false,
 * with nothing of it done, when one of them was held; any other error is
 * thrown again.
 */
bool
sc_try_nowait(void (*fn) (void *), void *arg)
{
	ErrorData  *edata = sc_try(fn, arg);

	if (edata == NULL)
		return true;
	if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
		ReThrowError(edata);
	FreeErrorData(edata);
	return false;
}

/*
 * streamcube_library_version(): the version of the library the server
 * loaded.  After a new build is installed and the server restarted, it
 * differs from pg_extension.extversion until ALTER EXTENSION streamcube
 * UPDATE.
 */
Datum
sc_library_version(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(SC_LIBRARY_VERSION));
}

/*
 * Kafka's text is UTF-8: JSON's by its RFC, Avro's and Protobuf's strings
 * by their specifications, and what producers send in practice.  A
 * database in UTF8 takes it as it is; one in SQL_ASCII stores its bytes
 * unchecked, as PostgreSQL does for any text there.  In any other encoding
 * the bytes of a character beyond ASCII would be read as other characters
 * of that encoding (é as Ã© in LATIN1) and stored without an error, so
 * streamcube refuses to be installed there.
 */
static void
sc_check_encoding(void)
{
	int			encoding = GetDatabaseEncoding();

	if (encoding != PG_UTF8 && encoding != PG_SQL_ASCII)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("streamcube cannot be installed in database \"%s\" of encoding %s",
						get_database_name(MyDatabaseId), GetDatabaseEncodingName()),
				 errdetail("Kafka messages carry text in UTF-8, which a database in %s would store as other characters.",
						   GetDatabaseEncodingName()),
				 errhint("Install streamcube in a database created with ENCODING 'UTF8' (CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0) and name it in streamcube.database.")));
}

/* Called by the install script before it creates anything else. */
Datum
sc_check_install(PG_FUNCTION_ARGS)
{
	sc_check_database();
	sc_check_encoding();
	PG_RETURN_VOID();
}

/* An int4[] (type INT4OID), int8[] (INT8OID) or timestamptz[] (TIMESTAMPTZOID) of n Datums. */
Datum
sc_int_array(const Datum *values, int n, Oid type)
{
	if (type == INT4OID)
		return PointerGetDatum(construct_array(unconstify(Datum *, values), n, INT4OID, 4, true, TYPALIGN_INT));
	Assert(type == INT8OID || type == TIMESTAMPTZOID);
	return PointerGetDatum(construct_array(unconstify(Datum *, values), n, type, 8,
										   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/* An int4[] of n values, for a catalog statement's argument. */
Datum
sc_int4_array(int n, const int32 *values)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		elems[i] = Int32GetDatum(values[i]);
	return sc_int_array(elems, n, INT4OID);
}

/* An int8[] of n values, for a catalog statement's argument. */
Datum
sc_int8_array(int n, const int64 *values)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		elems[i] = Int64GetDatum(values[i]);
	return sc_int_array(elems, n, INT8OID);
}
