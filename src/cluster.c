/*-------------------------------------------------------------------------
 *
 * cluster.c
 *		SQL functions on Kafka clusters: add, alter, drop, check.
 *
 * A cluster is a name, a bootstrap list and librdkafka properties.
 *
 * Who may set a property is decided by its class (kafka_properties.h), an
 * allowlist of every property of the linked librdkafka, before librdkafka
 * ever sees the value: members of streamcube_admin may set the allowed and
 * secret ones; a property that names a server file needs superuser or
 * pg_read_server_files, one that runs a program (the kinit command, and a
 * SASL GSSAPI configuration, which runs it) superuser or
 * pg_execute_server_program, one that loads code superuser; properties
 * streamcube manages, producer-only ones, pointers and anything the table
 * does not know are refused to everyone.  The same check runs again each
 * time a cluster is loaded, against the role that stored it, so a cluster
 * written by an older version, or by a role that has lost a privilege
 * since, is refused there too.
 *
 * Then every property is checked by librdkafka itself, so a typo fails at
 * streamcube_add_cluster() with librdkafka's own message instead of inside
 * a receiver hours later.  Secret properties are stored apart (column
 * secrets) and never shown: the view streamcube.kafka_clusters masks them,
 * and no message repeats their values.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "cube_catalog.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "kafka.h"
#include "miscadmin.h"
#include "registry.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/jsonb.h"

PG_FUNCTION_INFO_V1(sc_add_cluster);
PG_FUNCTION_INFO_V1(sc_drop_cluster);
PG_FUNCTION_INFO_V1(sc_alter_cluster);
PG_FUNCTION_INFO_V1(sc_check_cluster);
PG_FUNCTION_INFO_V1(sc_kafka_properties);

/* The role a class needs, for messages and streamcube_kafka_properties(). */
static const char *
sc_class_role(ScPropertyClass cls)
{
	switch (cls)
	{
		case SC_PROP_ALLOWED:
		case SC_PROP_SECRET:
			return SC_ADMIN_ROLE;
		case SC_PROP_READS_FILE:
			return "pg_read_server_files";
		case SC_PROP_RUNS_PROGRAM:
			return "pg_execute_server_program";
		case SC_PROP_LOADS_CODE:
			return "superuser";
		default:
			return NULL;		/* nobody */
	}
}

/* May role set a property of this class (admin rights aside)? */
static bool
sc_class_permitted(Oid role, ScPropertyClass cls)
{
	switch (cls)
	{
		case SC_PROP_ALLOWED:
		case SC_PROP_SECRET:
			return true;
		case SC_PROP_READS_FILE:
			return OidIsValid(role) &&
				(superuser_arg(role) || has_privs_of_role(role, ROLE_PG_READ_SERVER_FILES));
		case SC_PROP_RUNS_PROGRAM:
			return OidIsValid(role) &&
				(superuser_arg(role) || has_privs_of_role(role, ROLE_PG_EXECUTE_SERVER_PROGRAM));
		case SC_PROP_LOADS_CODE:
			return OidIsValid(role) && superuser_arg(role);
		default:
			return false;
	}
}

/*
 * Refuse a property (or, with key NULL, a whole configuration) that role
 * may not set.  stored_by names the role that stored a cluster being
 * loaded; NULL when the caller is adding it.
 */
static void
sc_check_property_class(Oid role, const char *cluster, const char *key,
						ScPropertyClass cls, const char *stored_by)
{
	const char *needs = sc_class_role(cls);

	if (sc_class_permitted(role, cls))
		return;
	if (needs == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("property \"%s\" of Kafka cluster \"%s\" cannot be set: %s",
						key, cluster,
						cls == SC_PROP_MANAGED ? "streamcube sets it itself" :
						cls == SC_PROP_PRODUCER ? "it applies to producers, and streamcube only consumes" :
						cls == SC_PROP_NOT_TEXT ? "it is a pointer or callback, not a text value" :
						"streamcube does not know it"),
				 errhint("%s", cls == SC_PROP_MANAGED
						 ? "Remove it: bootstrap servers are the second argument, consumer positions and queues are set by streamcube (see docs/configuration.md)."
						 : "Remove it; streamcube_kafka_properties() lists every property and who may set it.")));
	if (stored_by == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 key ? errmsg("permission denied to set property \"%s\" of Kafka cluster \"%s\"", key, cluster)
				 : errmsg("permission denied to use SASL mechanism GSSAPI in Kafka cluster \"%s\"", cluster),
				 errdetail("%s %s; only superusers%s%s may set it.",
						   key ? "This property" : "GSSAPI (librdkafka's default SASL mechanism)",
						   cls == SC_PROP_READS_FILE ? "makes the server read a file" :
						   cls == SC_PROP_RUNS_PROGRAM ? "makes the server run a program (the Kerberos kinit command)" :
						   "loads code into the server",
						   cls == SC_PROP_LOADS_CODE ? "" : " and members of ",
						   cls == SC_PROP_LOADS_CODE ? "" : needs),
				 errhint("%s", cls == SC_PROP_READS_FILE
						 ? "Give certificates and keys inline with ssl.ca.pem, ssl.certificate.pem and ssl.key.pem, or ask a superuser."
						 : key == NULL
						 ? "For SASL without Kerberos set \"sasl.mechanisms\" to PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; GSSAPI, the default when none is set, needs a superuser."
						 : "Ask a superuser to add the cluster.")));
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("Kafka cluster \"%s\" cannot be used: its property \"%s\" needs %s",
					cluster, key ? key : "sasl.mechanisms", needs),
			 errdetail("The cluster was stored by role \"%s\", which does not hold that privilege (any more).",
					   stored_by),
			 errhint("Drop the cluster and add it again as a role that may set the property.")));
}

/* Check every property of a configuration, and the configuration whole. */
static void
sc_check_property_classes(Oid role, const char *cluster, List *properties,
						  const char *stored_by)
{
	ListCell   *lc;

	foreach(lc, properties)
	{
		ScKafkaProperty *prop = lfirst(lc);

		sc_check_property_class(role, cluster, prop->name,
								sc_kafka_property_class(prop->name, prop->value), stored_by);
	}
	sc_check_property_class(role, cluster, NULL, sc_kafka_config_class(properties), stored_by);
}

/* Every function that names a cluster says the same when it is not there. */
static void sc_cluster_missing(const char *name) pg_attribute_noreturn();

static void
sc_cluster_missing(const char *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("Kafka cluster \"%s\" does not exist", name),
			 errhint("Add it with streamcube_add_cluster(); the view streamcube.kafka_clusters lists the known clusters.")));
}

/*
 * Load how to reach a cluster, secrets included.  The result lives in the
 * caller's memory context.  Raises an error naming the cluster if it does
 * not exist.
 */
ScKafkaConnInfo *
sc_cluster_conninfo(const char *name)
{
	MemoryContext caller = CurrentMemoryContext;
	ScKafkaConnInfo *conn = palloc0(sizeof(ScKafkaConnInfo));
	ScPrivilegeSave save;
	Datum		arg = CStringGetTextDatum(name);
	Oid			argtype = TEXTOID;
	char	   *stored_by = NULL;
	int			ret;

	SPI_connect();
	sc_catalog_enter(&save);
	ret = SPI_execute_with_args("SELECT c.bootstrap_servers, p.key, p.value, c.created_by "
								"FROM streamcube.clusters c "
								"LEFT JOIN LATERAL jsonb_each_text(c.properties || c.secrets) p ON true "
								"WHERE c.name = $1",
								1, &argtype, &arg, NULL, true, 0);
	sc_catalog_leave(&save);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.clusters: %s", SPI_result_code_string(ret));
	if (SPI_processed == 0)
		sc_cluster_missing(name);

	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		MemoryContext spi = MemoryContextSwitchTo(caller);
		char	   *key = SPI_getvalue(tup, desc, 2);

		if (i == 0)
		{
			conn->cluster_name = pstrdup(name);
			conn->bootstrap_servers = SPI_getvalue(tup, desc, 1);
			stored_by = SPI_getvalue(tup, desc, 4);
		}
		if (key != NULL)
		{
			ScKafkaProperty *prop = palloc(sizeof(ScKafkaProperty));

			prop->name = key;
			prop->value = SPI_getvalue(tup, desc, 3);
			conn->properties = lappend(conn->properties, prop);
			if (sc_kafka_property_masked(key))
				sc_secret_remember(prop->value);
		}
		MemoryContextSwitchTo(spi);
	}
	SPI_finish();

	/* Stored by an older version, or by a role that lost a privilege? */
	sc_check_property_classes(get_role_oid(stored_by, true), name, conn->properties, stored_by);
	return conn;
}

/*
 * The schema registry of a cluster (format avro), from its properties
 * schema.registry.*; false when it has no schema.registry.url.  What it
 * points into lives in the caller's memory context.
 */
bool
sc_cluster_registry(const char *name, ScRegistryConn *registry)
{
	ScKafkaConnInfo *conn = sc_cluster_conninfo(name);
	ListCell   *lc;

	memset(registry, 0, sizeof(*registry));
	registry->timeout_ms = sc_kafka_timeout_ms;
	foreach(lc, conn->properties)
	{
		ScKafkaProperty *prop = lfirst(lc);

		if (strcmp(prop->name, "schema.registry.url") == 0)
			registry->urls = prop->value;
		else if (strcmp(prop->name, "schema.registry.basic.auth.user.info") == 0)
			registry->user_info = prop->value;
		else if (strcmp(prop->name, "schema.registry.ssl.ca.location") == 0)
			registry->ca_location = prop->value;
	}
	return registry->urls != NULL;
}

/*
 * Check every property of a jsonb object with librdkafka; returns the keys
 * of the secret ones as a text[] datum.
 */
static Datum
sc_check_properties(const char *cluster, Datum properties)
{
	Oid			argtype = JSONBOID;
	Datum	   *secrets;
	int			nsecrets = 0;
	List	   *all;
	char		errbuf[512];
	int			ret;

	/* An object: sc_canonical_properties() has checked it. */
	ret = SPI_execute_with_args("SELECT key, value #>> '{}', jsonb_typeof(value) "
								"FROM jsonb_each($1) ORDER BY key",
								1, &argtype, &properties, NULL, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not inspect properties: %s", SPI_result_code_string(ret));

	secrets = palloc(sizeof(Datum) * (SPI_processed + 1));
	all = NIL;
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *key = SPI_getvalue(tup, desc, 1);
		char	   *value = SPI_getvalue(tup, desc, 2);
		char	   *type = SPI_getvalue(tup, desc, 3);

		if (strcmp(type, "string") != 0 && strcmp(type, "number") != 0 &&
			strcmp(type, "boolean") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("property \"%s\" of Kafka cluster \"%s\" must be a string, number or boolean, not %s",
							key, cluster, type)));
		/* Who may set it, before librdkafka sees it. */
		sc_check_property_class(GetUserId(), cluster, key,
								sc_kafka_property_class(key, value), NULL);
		if (sc_kafka_property_masked(key))
			sc_secret_remember(value);
		if (!sc_kafka_check_property(key, value, errbuf, sizeof(errbuf)))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid property \"%s\" for Kafka cluster \"%s\": %s", key, cluster, errbuf),
					 errhint("See librdkafka's CONFIGURATION.md (librdkafka %s) for valid properties and values.",
							 sc_kafka_version())));
		if (sc_kafka_property_masked(key))
			secrets[nsecrets++] = CStringGetTextDatum(key);
		{
			ScKafkaProperty *prop = palloc(sizeof(ScKafkaProperty));

			prop->name = key;
			prop->value = value;
			all = lappend(all, prop);
		}
	}

	/* A configuration as a whole can run a program (SASL GSSAPI). */
	sc_check_property_class(GetUserId(), cluster, NULL, sc_kafka_config_class(all), NULL);

	/* Properties that are fine alone can still clash together. */
	if (!sc_kafka_check_config(all, errbuf, sizeof(errbuf)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid properties for Kafka cluster \"%s\": %s", cluster, errbuf),
				 errhint("See librdkafka's CONFIGURATION.md (librdkafka %s) for valid properties and values.",
						 sc_kafka_version())));
	return PointerGetDatum(construct_array(secrets, nsecrets, TEXTOID, -1, false, TYPALIGN_INT));
}

/*
 * Properties as given, under the names librdkafka knows them by: "a key set
 * twice" cannot hide behind an alias (sasl.mechanism, sasl.mechanisms), and
 * streamcube_alter_cluster() replaces a stored property whichever name
 * either call used.  *aliases receives a text[] of the other names of the
 * keys given, for the caller to remove from a stored configuration.  The
 * caller is connected to SPI.
 */
static Datum
sc_text_array(List *strings)
{
	Datum	   *elems = palloc(sizeof(Datum) * (list_length(strings) + 1));
	int			n = 0;
	ListCell   *lc;

	foreach(lc, strings)
		elems[n++] = CStringGetTextDatum(strVal(lfirst(lc)));
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}

static Datum
sc_canonical_properties(const char *cluster, Datum properties, Datum *aliases)
{
	Oid			argtypes[3] = {JSONBOID, TEXTARRAYOID, TEXTARRAYOID};
	Datum		args[3];
	List	   *from = NIL;
	List	   *to = NIL;
	List	   *others = NIL;
	List	   *all;
	int			ret;

	ret = SPI_execute_with_args("SELECT jsonb_typeof($1)", 1, argtypes, &properties, NULL, true, 1);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not inspect properties: %s", SPI_result_code_string(ret));
	if (strcmp(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1), "object") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("properties of Kafka cluster \"%s\" must be a JSON object", cluster),
				 errhint("Pass librdkafka properties as '{\"security.protocol\": \"SASL_SSL\"}'; "
						 "streamcube_alter_cluster() removes a key set to null.")));

	ret = SPI_execute_with_args("SELECT key FROM jsonb_object_keys($1) AS key ORDER BY key",
								1, argtypes, &properties, NULL, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not inspect properties: %s", SPI_result_code_string(ret));
	all = NIL;
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *key = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		ListCell   *lc;
		ScPropertyClass cls = sc_kafka_property_class(key, NULL);
		/* Names refused anyway keep theirs, for the error that names them. */
		const char *canonical = cls == SC_PROP_ALLOWED || cls == SC_PROP_SECRET ?
			sc_kafka_property_canonical(key) : key;

		foreach(lc, all)
			if (strcmp(sc_kafka_property_canonical(lfirst(lc)), canonical) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("properties \"%s\" and \"%s\" of Kafka cluster \"%s\" are the same librdkafka property",
								(char *) lfirst(lc), key, cluster),
						 errhint("Give only \"%s\".", canonical)));
		all = lappend(all, key);
		if (canonical != key)
		{
			from = lappend(from, makeString(key));
			to = lappend(to, makeString(pstrdup(canonical)));
		}
	}

	/* Every other name of every key given: what a merge replaces. */
	{
		ListCell   *lc;

		foreach(lc, all)
			others = list_concat(others, sc_kafka_property_other_names(lfirst(lc)));
	}
	*aliases = sc_text_array(others);
	if (from == NIL)
		return properties;

	args[0] = properties;
	args[1] = sc_text_array(from);
	args[2] = sc_text_array(to);
	ret = SPI_execute_with_args("SELECT ($1 - $2) || jsonb_object_agg(c, $1 -> a) "
								"FROM unnest($2, $3) AS u(a, c)",
								3, argtypes, args, NULL, true, 1);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not rename properties: %s", SPI_result_code_string(ret));
	{
		bool		isnull;

		return datumCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull),
						 false, -1);
	}
}

/*
 * The properties argument, as jsonb.  Each function taking properties has
 * a second form whose properties are text: a literal such as '{...}' then
 * resolves to it, and the text is parsed here, after the statement is
 * hidden from the server log, so that a typo cannot put a password there
 * (with jsonb, the literal is parsed before the function runs, and the
 * failing statement is logged whole).  The error of a text that does not
 * parse repeats none of it.
 */
static Datum
sc_properties_arg(FunctionCallInfo fcinfo, int n, const char *cluster)
{
	MemoryContext cxt = CurrentMemoryContext;
	char	   *given;
	volatile Datum result = (Datum) 0;
	volatile bool failed = false;

	if (get_fn_expr_argtype(fcinfo->flinfo, n) != TEXTOID)
		return PG_GETARG_DATUM(n);
	given = text_to_cstring(PG_GETARG_TEXT_PP(n));
	PG_TRY();
	{
		result = DirectFunctionCall1(jsonb_in, CStringGetDatum(given));
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
		failed = true;
	}
	PG_END_TRY();
	if (failed)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("properties of Kafka cluster \"%s\" are not valid JSON", cluster),
				 errdetail("The text is not repeated here: it may hold secrets."),
				 errhint("Write them as a JSON object, for example '{\"sasl.username\": \"u\", \"sasl.password\": \"p\"}'.")));
	return result;
}

/*
 * streamcube_add_cluster(name text, bootstrap_servers text, properties jsonb or text)
 */
Datum
sc_add_cluster(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *bootstrap;
	Datum		properties;
	Datum		args[5];
	Oid			argtypes[5] = {TEXTOID, TEXTOID, JSONBOID, TEXTARRAYOID, NAMEOID};
	ScPrivilegeSave save;
	int			ret;

	/* The statement holds the properties: keep it out of the server log. */
	sc_hide_statement = true;
	name = sc_text_arg(fcinfo, 0, "cluster name");
	bootstrap = sc_text_arg(fcinfo, 1, "bootstrap_servers");
	sc_require_admin("add Kafka clusters");

	if (name[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("Kafka cluster name must not be empty")));
	if (strspn(bootstrap, " \t\n,") == strlen(bootstrap))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("bootstrap_servers of Kafka cluster \"%s\" must not be empty", name),
				 errhint("Give a comma-separated list of host:port, for example '127.0.0.1:9092'.")));
	properties = PG_ARGISNULL(2) ? DirectFunctionCall1(jsonb_in, CStringGetDatum("{}"))
		: sc_properties_arg(fcinfo, 2, name);

	SPI_connect();
	args[0] = CStringGetTextDatum(name);
	args[1] = CStringGetTextDatum(bootstrap);
	args[2] = properties;
	args[4] = DirectFunctionCall1(namein, CStringGetDatum(GetUserNameFromId(GetUserId(), false)));
	{
		Datum		unused;

		args[2] = properties = sc_canonical_properties(name, properties, &unused);
	}
	args[3] = sc_check_properties(name, properties);

	sc_catalog_enter(&save);
	ret = SPI_execute_with_args("SELECT 1 FROM streamcube.clusters WHERE name = $1 FOR UPDATE",
								1, argtypes, args, NULL, false, 1);
	if (ret == SPI_OK_SELECT && SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("Kafka cluster \"%s\" already exists", name),
				 errhint("Choose another name, or drop it first with streamcube_drop_cluster('%s').", name)));

	ret = SPI_execute_with_args("INSERT INTO streamcube.clusters "
								"(name, bootstrap_servers, properties, secrets, created_by) "
								"SELECT $1, $2, $3 - $4, "
								"coalesce((SELECT jsonb_object_agg(key, value) FROM jsonb_each($3) "
								"          WHERE key = ANY ($4)), '{}'), $5",
								5, argtypes, args, NULL, false, 0);
	sc_catalog_leave(&save);
	if (ret != SPI_OK_INSERT)
		elog(ERROR, "could not insert into streamcube.clusters: %s", SPI_result_code_string(ret));
	SPI_finish();
	sc_hide_statement = false;
	PG_RETURN_VOID();
}

/*
 * streamcube_drop_cluster(name text)
 */
Datum
sc_drop_cluster(PG_FUNCTION_ARGS)
{
	char	   *name = sc_text_arg(fcinfo, 0, "cluster name");
	Datum		arg = CStringGetTextDatum(name);
	Oid			argtype = TEXTOID;
	ScPrivilegeSave save;
	int			ret;

	sc_require_admin("drop Kafka clusters");

	SPI_connect();
	sc_catalog_enter(&save);
	ret = SPI_execute_with_args("SELECT string_agg(relid::regclass::text, ', ' ORDER BY cube_id) "
								"FROM streamcube.cubes WHERE cluster_name = $1",
								1, &argtype, &arg, NULL, false, 0);
	if (ret == SPI_OK_SELECT && SPI_processed > 0 &&
		SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("Kafka cluster \"%s\" is used by cubes %s", name,
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)),
				 errhint("Drop those cubes first with streamcube_drop_cube().")));

	ret = SPI_execute_with_args("DELETE FROM streamcube.clusters WHERE name = $1",
								1, &argtype, &arg, NULL, false, 0);
	sc_catalog_leave(&save);
	if (ret != SPI_OK_DELETE)
		elog(ERROR, "could not delete from streamcube.clusters: %s", SPI_result_code_string(ret));
	if (SPI_processed == 0)
		sc_cluster_missing(name);
	SPI_finish();
	PG_RETURN_VOID();
}

/* The cluster's schema registry, if it has one, answers (or an ERROR says why). */
static void
sc_check_registry(const char *name)
{
	ScRegistryConn registry;
	char		errbuf[512];
	ScRegistryStatus st;

	if (!sc_cluster_registry(name, &registry))
		return;
	st = sc_registry_check(&registry, errbuf, sizeof(errbuf));
	if (st != SC_REGISTRY_OK)
		ereport(ERROR,
				(errcode(st == SC_REGISTRY_REFUSED ? ERRCODE_CONNECTION_EXCEPTION : ERRCODE_CONNECTION_FAILURE),
				 errmsg("the schema registry of Kafka cluster \"%s\" %s: %s", name,
						st == SC_REGISTRY_REFUSED ? "refuses the request" : "does not answer", errbuf),
				 errhint("Check schema.registry.url (and schema.registry.basic.auth.user.info, schema.registry.ssl.ca.location) with streamcube_alter_cluster().")));
}

/*
 * streamcube_check_cluster(name text) RETURNS TABLE (topic, partition,
 * leader, low_watermark, high_watermark)
 */
Datum
sc_check_cluster(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *name = sc_text_arg(fcinfo, 0, "cluster name");
	ScKafkaConnInfo *conn;
	List	   *partitions;
	ListCell   *lc;

	sc_require_admin("connect to Kafka clusters");
	InitMaterializedSRF(fcinfo, 0);

	conn = sc_cluster_conninfo(name);
	partitions = sc_kafka_describe_topics(conn, NULL, true, sc_kafka_timeout_ms, NULL, NULL);
	sc_check_registry(name);

	foreach(lc, partitions)
	{
		ScKafkaPartitionInfo *p = lfirst(lc);
		Datum		values[5];
		bool		nulls[5] = {false, false, false, false, false};

		values[0] = CStringGetTextDatum(p->topic);
		values[1] = Int32GetDatum(p->partition);
		values[2] = Int32GetDatum(p->leader);
		nulls[2] = p->leader < 0;
		values[3] = Int64GetDatum(p->low_watermark);
		values[4] = Int64GetDatum(p->high_watermark);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * streamcube_kafka_properties() RETURNS TABLE (name, class, required_role,
 * masked): every property the linked librdkafka lists, and every name of
 * streamcube's table.  A property of the library that the table misses
 * shows as "unclassified" (and is refused); the test suite fails on it.
 */
Datum
sc_kafka_properties(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	foreach(lc, sc_kafka_property_names())
	{
		char	   *name = strVal(lfirst(lc));
		ScPropertyClass cls = sc_kafka_property_class(name, NULL);
		const char *role = sc_class_role(cls);
		Datum		values[4];
		bool		nulls[4] = {false, false, role == NULL, false};

		values[0] = CStringGetTextDatum(name);
		values[1] = CStringGetTextDatum(sc_kafka_property_class_name(cls));
		values[2] = role ? CStringGetTextDatum(role) : (Datum) 0;
		values[3] = BoolGetDatum(sc_kafka_property_masked(name));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * Lock the cluster's cubes' rows, then the cluster's row: concurrent
 * changes queue up.  Cube rows first and in cube order, as everything else
 * that locks cubes (pause, alter, reassign, a receiver's batch) takes them;
 * the cluster's row is locked without its key, so a cube created meanwhile
 * (its foreign key shares the key) does not wait.  Returns the row: the
 * bootstrap list, the properties merged with the given ones ($3, less the
 * ones set to null, less the secrets named in $6), all stored properties,
 * who stored them, and the secrets the caller does not give again.
 */
static void
sc_alter_cluster_lock(const char *name, Oid *argtypes, Datum *args)
{
	if (sc_catalog_exec("SELECT 1 FROM streamcube.cubes WHERE cluster_name = $1 "
						"ORDER BY cube_id FOR NO KEY UPDATE",
						1, argtypes, args, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not lock the cubes of Kafka cluster \"%s\"", name);
	if (sc_catalog_exec("SELECT bootstrap_servers, "
						"       (((properties || secrets) - $6) || $3) - "
						"         ARRAY(SELECT key FROM jsonb_each($3) WHERE jsonb_typeof(value) = 'null'), "
						"       (properties || secrets), created_by, "
						"       (SELECT string_agg(key, ', ' ORDER BY key) FROM jsonb_object_keys(secrets) AS key "
						"        WHERE NOT $3 ? key AND key <> ALL ($6)) "
						"FROM streamcube.clusters WHERE name = $1 FOR NO KEY UPDATE",
						6, argtypes, args, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.clusters");
	if (SPI_processed == 0)
		sc_cluster_missing(name);
}

/*
 * Secrets stored by another role stay only if the caller gives them again:
 * otherwise an admin could send them to a broker of its own (a new
 * bootstrap list, security.protocol without TLS).
 */
static void
sc_alter_cluster_check_secrets(const char *name, const char *stored_by, const char *kept)
{
	Oid			owner = get_role_oid(stored_by, true);

	if (kept != NULL && !superuser() &&
		!(OidIsValid(owner) && has_privs_of_role(GetUserId(), owner)))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to alter Kafka cluster \"%s\" without giving its secret properties again", name),
				 errdetail("Role \"%s\" stored secret properties (%s); a change could send them elsewhere.",
						   stored_by, kept),
				 errhint("Give %s in the same call, or ask a superuser or role \"%s\".", kept, stored_by)));
}

/*
 * Store the new configuration ($2 bootstrap, $3 properties, $4 the secret
 * ones among them, $5 who), journal it with secrets masked, and tell every
 * cube of the cluster to reconnect.
 */
static void
sc_alter_cluster_store(const char *name, Oid *argtypes, Datum *args)
{
	bool		isnull;
	Datum		old_value,
				new_value;

	if (sc_catalog_exec("WITH old AS ("
						"  SELECT jsonb_build_object('bootstrap_servers', bootstrap_servers, 'properties', "
						"         properties || coalesce((SELECT jsonb_object_agg(key, '********') "
						"                                 FROM jsonb_object_keys(secrets) AS key), '{}')) AS v "
						"  FROM streamcube.clusters WHERE name = $1), "
						"upd AS ("
						"  UPDATE streamcube.clusters SET bootstrap_servers = $2, properties = $3 - $4, "
						"         secrets = coalesce((SELECT jsonb_object_agg(key, value) FROM jsonb_each($3) "
						"                             WHERE key = ANY ($4)), '{}'), "
						"         created_by = $5 "
						"  WHERE name = $1 RETURNING 1) "
						"SELECT old.v, "
						"       jsonb_build_object('bootstrap_servers', $2, 'properties', "
						"         ($3 - $4) || coalesce((SELECT jsonb_object_agg(key, '********') "
						"                                FROM unnest($4) AS key), '{}')) "
						"FROM old, (SELECT count(*) FROM upd) u",
						5, argtypes, args, NULL, false, 0) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not alter Kafka cluster \"%s\"", name);
	old_value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	new_value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	sc_config_journal(name, 0, InvalidOid, old_value, new_value);
	sc_cube_rows_touch_cluster(name);
}

/*
 * streamcube_alter_cluster(name text, bootstrap_servers text DEFAULT NULL,
 *							properties jsonb DEFAULT NULL)
 *
 * Replaces the bootstrap list (when given) and merges properties into the
 * cluster's (a key set to JSON null removes it).  The configuration as it
 * will be is checked as streamcube_add_cluster() checks a new one, against
 * the caller, who becomes the role the cluster is stored by: an admin
 * cannot point a cluster holding a superuser's file or program properties
 * at another broker.  Journalled in streamcube.config_log, secrets masked.
 * Cubes of the cluster see a new configuration version; their receivers
 * open a new consumer with it at their committed positions.
 */
Datum
sc_alter_cluster(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *bootstrap = NULL;
	Datum		given = (Datum) 0;
	Oid			argtypes[6] = {TEXTOID, TEXTOID, JSONBOID, TEXTARRAYOID, NAMEOID, TEXTARRAYOID};
	Datum		args[6];
	bool		isnull;
	Datum		merged;
	char	   *old_bootstrap;
	bool		changed;
	MemoryContext caller = CurrentMemoryContext;

	/* The statement holds the properties: keep it out of the server log. */
	sc_hide_statement = true;
	name = sc_text_arg(fcinfo, 0, "cluster name");
	sc_require_admin("alter Kafka clusters");
	if (!PG_ARGISNULL(1))
	{
		bootstrap = text_to_cstring(PG_GETARG_TEXT_PP(1));
		if (strspn(bootstrap, " \t\n,") == strlen(bootstrap))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("bootstrap_servers of Kafka cluster \"%s\" must not be empty", name),
					 errhint("Give a comma-separated list of host:port, or NULL to keep the current one.")));
	}
	if (!PG_ARGISNULL(2))
		given = sc_properties_arg(fcinfo, 2, name);
	if (bootstrap == NULL && given == (Datum) 0)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("streamcube_alter_cluster() needs bootstrap_servers or properties"),
				 errhint("For example streamcube_alter_cluster('%s', properties => '{\"sasl.password\": \"...\"}').", name)));

	SPI_connect();
	args[0] = CStringGetTextDatum(name);
	args[2] = sc_canonical_properties(name,
									  given != (Datum) 0 ? given : DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")),
									  &args[5]);
	sc_alter_cluster_lock(name, argtypes, args);
	MemoryContextSwitchTo(caller);
	sc_alter_cluster_check_secrets(name, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4),
								   SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5));
	old_bootstrap = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	merged = datumCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull),
					   false, -1);
	{
		Datum		pair[2] = {SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull), merged};
		Oid			ptypes[2] = {JSONBOID, JSONBOID};

		if (SPI_execute_with_args("SELECT $1 IS DISTINCT FROM $2", 2, ptypes, pair, NULL, true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not compare properties");
		changed = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	if (bootstrap == NULL)
		bootstrap = old_bootstrap;
	changed = changed || strcmp(bootstrap, old_bootstrap) != 0;

	/* The whole configuration, checked for the caller as at creation. */
	args[1] = CStringGetTextDatum(bootstrap);
	args[2] = merged;
	args[3] = sc_check_properties(name, merged);
	args[4] = DirectFunctionCall1(namein, CStringGetDatum(GetUserNameFromId(GetUserId(), false)));
	if (changed)
		sc_alter_cluster_store(name, argtypes, args);
	SPI_finish();
	sc_hide_statement = false;
	PG_RETURN_VOID();
}
