/*-------------------------------------------------------------------------
 *
 * kafka.c
 *		librdkafka's configuration, handles and one-request clients: the
 *		classes and checks of properties, the events of librdkafka's
 *		callbacks, metadata, watermarks and offsets by time.
 *
 * kafka.c and kafka_consumer.c (the consumer), with kafka_internal.h
 * between them, are the only files of streamcube that include librdkafka.
 * librdkafka runs its own threads.  PostgreSQL code is not thread-safe, so
 * nothing in them lets a librdkafka thread reach PostgreSQL:
 *
 *	- every handle is created with all signals blocked (sc_kafka_new_handle),
 *	  so the threads it spawns inherit a full signal mask and PostgreSQL's
 *	  signal handlers always run on the backend's own thread;
 *	- logs and errors are queued by librdkafka (log.queue) and served by
 *	  rd_kafka_poll() on the backend's thread, into a small buffer that is
 *	  turned into ereport() calls only after librdkafka has returned;
 *	- consumed messages are handed out as plain structs, and the consumer
 *	  queue wakes the receiver through a pipe it can wait on together with
 *	  its latch (kafka_consumer.c).
 *
 * No function of either file raises an ERROR while a librdkafka call is on
 * the stack.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include <pthread.h>
#include <signal.h>

#include "kafka_internal.h"
#include "miscadmin.h"
#include "registry.h"
#include "nodes/value.h"
#include "portability/instr_time.h"

/* Every property of librdkafka 2.0.2, by class, in strcmp() order. */
typedef struct ScPropertyEntry
{
	const char *name;
	ScPropertyClass cls;
} ScPropertyEntry;

static const ScPropertyEntry property_table[] = {
#include "kafka_properties.h"
};

const char *
sc_kafka_version(void)
{
	return rd_kafka_version_str();
}

/* ----------------------------------------------------------------
 * Callbacks: these run on the backend's thread, inside rd_kafka_poll().
 * They only copy text; they never call into PostgreSQL.
 * ----------------------------------------------------------------
 */
void
sc_kafka_push_event(ScKafkaEvents *events, int level, const char *text)
{
	char		masked[4096];

	if (events->nevents >= SC_KAFKA_MAX_EVENTS)
	{
		events->dropped++;
		return;
	}
	/* Masked before it is cut: no secret is left half shown at the cut. */
	strlcpy(masked, text, sizeof(masked));
	sc_redact_buf(masked, sizeof(masked));
	events->levels[events->nevents] = level;
	strlcpy(events->text[events->nevents], masked, sizeof(events->text[0]));
	events->nevents++;
}

static void
sc_kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	ScKafkaEvents *events = rd_kafka_opaque(rk);
	char		line[SC_ERROR_LEN];

	if (events == NULL || level > SC_SYSLOG_NOTICE)
		return;
	snprintf(line, sizeof(line), "%s: %s", fac, buf);
	sc_kafka_push_event(events, level, line);
}

static void
sc_kafka_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	ScKafkaEvents *events = opaque;
	char		masked[4096];

	if (events == NULL)
		return;
	if (err == RD_KAFKA_RESP_ERR__FATAL)
	{
		rd_kafka_fatal_error(rk, masked, sizeof(masked));
		events->fatal = true;
	}
	else
		strlcpy(masked, reason, sizeof(masked));
	/* Masked before it is cut: no secret is left half shown at the cut. */
	sc_redact_buf(masked, sizeof(masked));
	strlcpy(events->last_error, masked, sizeof(events->last_error));
	if (err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART || err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC ||
		err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION)
		events->topic_unknown = true;
	if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
		events->all_down = true;
	sc_kafka_push_event(events, SC_SYSLOG_ERR, events->last_error);
}

/* Turn collected events into server log lines; resets the buffer. */
void
sc_kafka_flush_events(ScKafkaEvents *events, const char *what)
{
	for (int i = 0; i < events->nevents; i++)
		ereport(events->levels[i] <= SC_SYSLOG_WARNING ? WARNING : LOG,
				(errmsg_internal("%s: %s", what, events->text[i])));
	if (events->dropped > 0)
		ereport(LOG,
				(errmsg_internal("%s: %d more librdkafka messages suppressed",
								 what, events->dropped)));
	events->nevents = 0;
	events->dropped = 0;
}

/* ----------------------------------------------------------------
 * Configuration
 * ----------------------------------------------------------------
 */
static int
sc_property_entry_cmp(const void *key, const void *entry)
{
	return strcmp((const char *) key, ((const ScPropertyEntry *) entry)->name);
}

/*
 * The class of a property, by exact name (librdkafka also accepts
 * "topic.<name>" for topic properties: the table lists those names too).
 * One value lowers the class: ssl.ca.location = "probe" reads only the
 * system's public CA bundles.
 */
ScPropertyClass
sc_kafka_property_class(const char *name, const char *value)
{
	const ScPropertyEntry *e = bsearch(name, property_table, lengthof(property_table),
									   sizeof(ScPropertyEntry), sc_property_entry_cmp);

	if (e == NULL)
		return SC_PROP_UNKNOWN;
	if (e->cls == SC_PROP_READS_FILE && value != NULL && strcmp(name, "ssl.ca.location") == 0 &&
		strcmp(value, "probe") == 0)
		return SC_PROP_ALLOWED;
	return e->cls;
}

/*
 * What a whole configuration does beyond its properties: with SASL and the
 * GSSAPI mechanism (librdkafka's default mechanism), rd_kafka_new() runs
 * the kinit command, so the configuration runs a program.
 *
 * Decided on the values librdkafka will use, not on the text given:
 * librdkafka trims and case-folds enumerations (" sasl_plaintext" is
 * SASL), so the two properties are set on a trial configuration (only
 * they: setting some others loads code) and read back.  Any SASL mechanism
 * but the ones that run nothing counts as running a program.
 */
ScPropertyClass
sc_kafka_config_class(List *properties)
{
	static const char *const harmless[] = {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"};
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char		protocol[64] = "";
	char		mechanism[256] = "";
	size_t		size;
	char		errbuf[256];
	ListCell   *lc;
	bool		sasl;
	bool		runs = true;

	foreach(lc, properties)
	{
		ScKafkaProperty *prop = lfirst(lc);
		const char *name = sc_kafka_property_canonical(prop->name);

		if (strcmp(name, "security.protocol") == 0 || strcmp(name, "sasl.mechanisms") == 0)
			(void) rd_kafka_conf_set(conf, name, prop->value, errbuf, sizeof(errbuf));
	}
	size = sizeof(protocol);
	if (rd_kafka_conf_get(conf, "security.protocol", protocol, &size) != RD_KAFKA_CONF_OK)
		protocol[0] = '\0';
	size = sizeof(mechanism);
	if (rd_kafka_conf_get(conf, "sasl.mechanisms", mechanism, &size) != RD_KAFKA_CONF_OK)
		strlcpy(mechanism, "GSSAPI", sizeof(mechanism));
	rd_kafka_conf_destroy(conf);

	sasl = pg_strncasecmp(protocol, "sasl", 4) == 0;
	for (int i = 0; i < lengthof(harmless); i++)
		if (strcmp(mechanism, harmless[i]) == 0)
			runs = false;
	return sasl && runs ? SC_PROP_RUNS_PROGRAM : SC_PROP_ALLOWED;
}

const char *
sc_kafka_property_class_name(ScPropertyClass cls)
{
	switch (cls)
	{
		case SC_PROP_UNKNOWN:
			return "unclassified";
		case SC_PROP_ALLOWED:
			return "allowed";
		case SC_PROP_SECRET:
			return "secret";
		case SC_PROP_READS_FILE:
			return "reads server files";
		case SC_PROP_RUNS_PROGRAM:
			return "runs a program";
		case SC_PROP_LOADS_CODE:
			return "loads code";
		case SC_PROP_MANAGED:
			return "managed by streamcube";
		case SC_PROP_NOT_TEXT:
			return "not settable as text";
		case SC_PROP_PRODUCER:
			return "producer only";
	}
	return "unclassified";
}

/*
 * Properties with a second name (CONFIGURATION.md: "alias for ..."), which
 * sets the same thing: a configuration is stored and merged under one name
 * only.  ("topic.<name>" is not an alias: for a property that exists both
 * globally and per topic it sets the topic one.)
 */
static const struct
{
	const char *alias;
	const char *name;
}			property_aliases[] = {
	{"acks", "request.required.acks"},
	{"bootstrap.servers", "metadata.broker.list"},
	{"compression.type", "compression.codec"},
	{"delivery.timeout.ms", "message.timeout.ms"},
	{"linger.ms", "queue.buffering.max.ms"},
	{"max.in.flight", "max.in.flight.requests.per.connection"},
	{"max.partition.fetch.bytes", "fetch.message.max.bytes"},
	{"retries", "message.send.max.retries"},
	{"sasl.mechanism", "sasl.mechanisms"},
};

/* The name librdkafka knows a property by; name itself if it has one only. */
const char *
sc_kafka_property_canonical(const char *name)
{
	for (int i = 0; i < lengthof(property_aliases); i++)
		if (strcmp(name, property_aliases[i].alias) == 0)
			return property_aliases[i].name;
	return name;
}

/* The other names of a property (String nodes), NIL if it has none. */
List *
sc_kafka_property_other_names(const char *name)
{
	const char *canonical = sc_kafka_property_canonical(name);
	List	   *names = NIL;

	if (strcmp(canonical, name) != 0)
		names = lappend(names, makeString(pstrdup(canonical)));
	for (int i = 0; i < lengthof(property_aliases); i++)
		if (strcmp(property_aliases[i].name, canonical) == 0 &&
			strcmp(property_aliases[i].alias, name) != 0)
			names = lappend(names, makeString(pstrdup(property_aliases[i].alias)));
	return names;
}

/* A property of the schema registry (format avro), not librdkafka's. */
bool
sc_kafka_registry_property(const char *name)
{
	return strncmp(name, "schema.registry.", 16) == 0;
}

/* Secrets, and the kinit command (it may quote one), are never shown. */
bool
sc_kafka_property_masked(const char *name)
{
	return sc_kafka_property_class(name, NULL) == SC_PROP_SECRET ||
		strcmp(name, "sasl.kerberos.kinit.cmd") == 0 ||
		strcmp(name, "topic.sasl.kerberos.kinit.cmd") == 0;
}

/* Collect the names of an rd_kafka_*conf_dump() result. */
static List *
sc_dump_names(List *names, const char **dump, size_t cnt)
{
	for (size_t i = 0; i + 1 < cnt; i += 2)
		if (!list_member(names, makeString((char *) dump[i])))
			names = lappend(names, makeString(pstrdup(dump[i])));
	return names;
}

/*
 * Every property name the linked librdkafka lists for a fresh global and
 * topic configuration, and every name of our table: the test of the
 * classification (streamcube_kafka_properties()).
 */
List *
sc_kafka_property_names(void)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_topic_conf_t *tconf = rd_kafka_topic_conf_new();
	const char **dump;
	size_t		cnt;
	List	   *names = NIL;

	dump = rd_kafka_conf_dump(conf, &cnt);
	names = sc_dump_names(names, dump, cnt);
	rd_kafka_conf_dump_free(dump, cnt);
	dump = rd_kafka_topic_conf_dump(tconf, &cnt);
	names = sc_dump_names(names, dump, cnt);
	rd_kafka_conf_dump_free(dump, cnt);
	rd_kafka_topic_conf_destroy(tconf);
	rd_kafka_conf_destroy(conf);
	for (size_t i = 0; i < lengthof(property_table); i++)
		if (!list_member(names, makeString((char *) property_table[i].name)))
			names = lappend(names, makeString(pstrdup(property_table[i].name)));
	return names;
}

/*
 * librdkafka's messages sometimes end with a line break; and they may
 * quote a secret configuration value: masked here.
 */
static void
sc_kafka_trim(char *errbuf)
{
	size_t		len;

	sc_redact_buf(errbuf, strlen(errbuf) + 1);
	len = strlen(errbuf);

	while (len > 0 && (errbuf[len - 1] == '\n' || errbuf[len - 1] == ' ' || errbuf[len - 1] == '.'))
		errbuf[--len] = '\0';
}

/* Never repeat a secret's value: mask the message if it quotes it. */
static void
sc_kafka_redact(const char *name, const char *value, char *errbuf, size_t errlen)
{
	if (sc_kafka_property_masked(name) && value[0] != '\0' && strstr(errbuf, value) != NULL)
		snprintf(errbuf, errlen, "Invalid value for configuration property \"%s\"", name);
}

/*
 * Check one property with librdkafka's own parser.  On failure errbuf holds
 * librdkafka's message, with a secret value masked.  Call it only for a
 * property whose class the caller may set: rd_kafka_conf_set() itself
 * loads plugin libraries.
 */
bool
sc_kafka_check_property(const char *name, const char *value,
						char *errbuf, size_t errlen)
{
	rd_kafka_conf_t *conf;
	rd_kafka_conf_res_t res;

	if (sc_kafka_registry_property(name))
	{
		if (strcmp(name, "schema.registry.url") == 0)
			return sc_registry_check_urls(value, errbuf, errlen);
		if (strcmp(name, "schema.registry.basic.auth.user.info") == 0 && strchr(value, ':') == NULL)
		{
			strlcpy(errbuf, "must be user:password", errlen);
			return false;
		}
		if (value[0] == '\0')
		{
			strlcpy(errbuf, "must not be empty", errlen);
			return false;
		}
		return true;
	}
	conf = rd_kafka_conf_new();
	res = rd_kafka_conf_set(conf, name, value, errbuf, errlen);
	rd_kafka_conf_destroy(conf);

	if (res == RD_KAFKA_CONF_OK)
		return true;
	sc_kafka_trim(errbuf);
	sc_kafka_redact(name, value, errbuf, errlen);
	return false;
}

/*
 * Build a librdkafka configuration; returns NULL with errbuf set on failure.
 */
rd_kafka_conf_t *
sc_kafka_conf_build(const ScKafkaConnInfo *conn, ScKafkaEvents *events,
					char *errbuf, size_t errlen)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	ListCell   *lc;

#define SC_SET(k, v) \
	do { \
		if (rd_kafka_conf_set(conf, (k), (v), errbuf, errlen) != RD_KAFKA_CONF_OK) \
			goto fail; \
	} while (0)

	if (conn->bootstrap_servers[0] != '\0')
		SC_SET("bootstrap.servers", conn->bootstrap_servers);
	SC_SET("client.id", "streamcube");
	SC_SET("log.queue", "true");
	foreach(lc, conn->properties)
	{
		ScKafkaProperty *prop = lfirst(lc);

		if (sc_kafka_registry_property(prop->name))
			continue;			/* streamcube's own, for the schema registry */
		if (rd_kafka_conf_set(conf, prop->name, prop->value, errbuf, errlen) != RD_KAFKA_CONF_OK)
		{
			sc_kafka_trim(errbuf);
			sc_kafka_redact(prop->name, prop->value, errbuf, errlen);
			goto fail;
		}
	}
#undef SC_SET

	rd_kafka_conf_set_opaque(conf, events);
	rd_kafka_conf_set_log_cb(conf, sc_kafka_log_cb);
	rd_kafka_conf_set_error_cb(conf, sc_kafka_error_cb);
	return conf;

fail:
	rd_kafka_conf_destroy(conf);
	return NULL;
}

/*
 * Check the properties together, as rd_kafka_new() does (a SASL mechanism
 * this build lacks, a key that does not parse, ...).  No bootstrap server
 * is set, so nothing connects.
 */
bool
sc_kafka_check_config(List *properties, char *errbuf, size_t errlen)
{
	ScKafkaEvents events = {0};
	ScKafkaConnInfo conn = {.cluster_name = "", .bootstrap_servers = "", .properties = properties};
	rd_kafka_conf_t *conf = sc_kafka_conf_build(&conn, &events, errbuf, errlen);
	rd_kafka_t *rk;

	if (conf == NULL)
		return false;
	rk = sc_kafka_new_handle(RD_KAFKA_PRODUCER, conf, errbuf, errlen);
	if (rk == NULL)
	{
		ListCell   *lc;

		sc_kafka_trim(errbuf);
		foreach(lc, properties)
		{
			ScKafkaProperty *prop = lfirst(lc);

			sc_kafka_redact(prop->name, prop->value, errbuf, errlen);
		}
		return false;
	}
	rd_kafka_destroy(rk);
	return true;
}

/*
 * rd_kafka_new() with every signal blocked, so that librdkafka's threads
 * never run PostgreSQL's signal handlers.  Takes ownership of conf.
 */
rd_kafka_t *
sc_kafka_new_handle(rd_kafka_type_t type, rd_kafka_conf_t *conf,
					char *errbuf, size_t errlen)
{
	sigset_t	all,
				old;
	rd_kafka_t *rk;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rk = rd_kafka_new(type, conf, errbuf, errlen);
	pthread_sigmask(SIG_SETMASK, &old, NULL);

	if (rk == NULL)
	{
		rd_kafka_conf_destroy(conf);
		sc_kafka_trim(errbuf);	/* masks any secret it quotes */
	}
	else
		rd_kafka_set_log_queue(rk, NULL);	/* logs go to the main queue */
	return rk;
}

static int
sc_remaining_ms(instr_time deadline)
{
	instr_time	now;

	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(deadline, now);
	return Max((int) INSTR_TIME_GET_MILLISEC(deadline), 0);
}

/* Errors a broker gives while leadership settles; worth a retry. */
static bool
sc_kafka_retriable(rd_kafka_resp_err_t err)
{
	switch (err)
	{
		case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
		case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
		case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
		case RD_KAFKA_RESP_ERR_OFFSET_NOT_AVAILABLE:
		case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
		case RD_KAFKA_RESP_ERR__TRANSPORT:
			return true;
		default:
			return false;
	}
}

/* ----------------------------------------------------------------
 * Metadata: the partitions of a cluster or a topic
 * ----------------------------------------------------------------
 */

/*
 * Kafka's ListOffsets for every partition of list, asking for times[i] (a
 * Kafka timestamp, or RD_KAFKA_OFFSET_BEGINNING / _END) for element i, or
 * for times[0] for all with one_time.  Retriable errors (a leader moving)
 * are tried again until the deadline; returns the first error left, the
 * answers are in list.
 */
static rd_kafka_resp_err_t
sc_kafka_list_offsets_n(rd_kafka_t *rk, rd_kafka_topic_partition_list_t *list,
						const int64 *times, bool one_time, instr_time deadline)
{
	rd_kafka_resp_err_t err;

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		for (int i = 0; i < list->cnt; i++)
		{
			list->elems[i].offset = one_time ? times[0] : times[i];
			list->elems[i].err = RD_KAFKA_RESP_ERR_NO_ERROR;
		}
		err = rd_kafka_offsets_for_times(rk, list, sc_remaining_ms(deadline));
		for (int i = 0; i < list->cnt && err == RD_KAFKA_RESP_ERR_NO_ERROR; i++)
			if (list->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR)
				err = list->elems[i].err;
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR || !sc_kafka_retriable(err) ||
			sc_remaining_ms(deadline) < 100)
			return err;
		pg_usleep(50 * 1000L);
	}
}

/* Does the cluster's configuration set this property? */
bool
sc_kafka_has_property(const ScKafkaConnInfo *conn, const char *name)
{
	ListCell   *lc;

	foreach(lc, conn->properties)
		if (strcmp(((ScKafkaProperty *) lfirst(lc))->name, name) == 0)
			return true;
	return false;
}

/*
 * A client for one request (metadata, offsets), on the cluster's
 * configuration; its events collect the last client error.
 */
static rd_kafka_t *
sc_kafka_client(const ScKafkaConnInfo *conn, ScKafkaEvents *events)
{
	char		errbuf[512];
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;

	conf = sc_kafka_conf_build(conn, events, errbuf, sizeof(errbuf));
	if (conf == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid configuration for Kafka cluster \"%s\": %s",
						conn->cluster_name, errbuf)));

	/*
	 * A producer's default is to let brokers create the topics it asks
	 * about; this client only reads metadata and offsets, and asks for one
	 * topic's (sc_kafka_topic_metadata).
	 */
	if (!sc_kafka_has_property(conn, "allow.auto.create.topics"))
		(void) rd_kafka_conf_set(conf, "allow.auto.create.topics", "false", errbuf, sizeof(errbuf));
	rk = sc_kafka_new_handle(RD_KAFKA_PRODUCER, conf, errbuf, sizeof(errbuf));
	if (rk == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not create a Kafka client for cluster \"%s\": %s",
						conn->cluster_name, errbuf)));
	return rk;
}

/*
 * Fill in the low and high watermarks of every partition in infos (a List
 * of ScKafkaPartitionInfo), by two ListOffsets requests per leader: every
 * partition at "beginning", then every partition at "end".  These are the
 * requests rd_kafka_query_watermark_offsets() sends, one partition at a
 * time, so the answers are the same, isolation.level included (the high
 * watermark is the last stable offset under read_committed); asking for
 * all partitions at once saves two round trips per partition, which made
 * streamcube_create_cube and a receiver's start-up wait 30-40 ms on a
 * topic of 16 partitions.  A new topic's leaders may not serve offsets
 * yet: retriable errors are retried until the deadline.  Returns false,
 * with what failed in failure, when an answer is missing.
 */
static bool
sc_kafka_watermarks(rd_kafka_t *rk, List *infos, instr_time deadline,
					char *failure, size_t failure_size)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(list_length(infos));
	rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
	const char *which = NULL;
	ListCell   *lc;

	foreach(lc, infos)
	{
		ScKafkaPartitionInfo *info = lfirst(lc);

		rd_kafka_topic_partition_list_add(list, info->topic, info->partition);
	}

	for (int pass = 0; pass < 2 && err == RD_KAFKA_RESP_ERR_NO_ERROR; pass++)
	{
		int64_t		wanted = pass == 0 ? RD_KAFKA_OFFSET_BEGINNING : RD_KAFKA_OFFSET_END;

		err = sc_kafka_list_offsets_n(rk, list, &wanted, true, deadline);
		if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			which = pass == 0 ? "low" : "high";
			break;
		}

		/* The answer is matched by (topic, partition), never by position. */
		foreach(lc, infos)
		{
			ScKafkaPartitionInfo *info = lfirst(lc);
			rd_kafka_topic_partition_t *tp =
				rd_kafka_topic_partition_list_find(list, info->topic, info->partition);

			if (tp == NULL || tp->offset < 0)
			{
				snprintf(failure, failure_size,
						 "no %s watermark for partition %d of topic \"%s\"",
						 pass == 0 ? "low" : "high", info->partition, info->topic);
				rd_kafka_topic_partition_list_destroy(list);
				return false;
			}
			if (pass == 0)
				info->low_watermark = tp->offset;
			else
				info->high_watermark = tp->offset;
		}
	}
	rd_kafka_topic_partition_list_destroy(list);

	if (which == NULL)
		return true;
	snprintf(failure, failure_size, "%s watermarks of %d partitions: %s",
			 which, list_length(infos), rd_kafka_err2str(err));
	return false;
}

/*
 * Did the brokers refuse the connection's authentication or TLS, going by
 * librdkafka's text?  Then the hint speaks of credentials, not of reaching
 * the brokers.
 */
static bool
sc_kafka_security_failure(const char *error)
{
	static const char *const words[] = {
		"Authentication", "authentication", "SASL", "SSL", "certificate", "handshake",
	};

	for (int i = 0; i < lengthof(words); i++)
		if (strstr(error, words[i]) != NULL)
			return true;
	return false;
}

/*
 * Would a metadata request for a topic the cluster lacks create it?  Only
 * where the client allows it (allow.auto.create.topics) and the brokers
 * too; streamcube never creates topics, so such a client lists them all.
 */
static bool
sc_kafka_creates_topics(rd_kafka_t *rk)
{
	char		v[16];
	size_t		size = sizeof(v);

	return rd_kafka_conf_get(rd_kafka_conf(rk), "allow.auto.create.topics", v, &size) != RD_KAFKA_CONF_OK ||
		strcmp(v, "false") != 0;
}

/*
 * The metadata of one topic only: a cluster may have thousands of topics,
 * and listing them all made each receiver's start and every
 * streamcube_create_cube read the metadata of every partition of the
 * cluster, an answer that grows with the cluster.  A topic that is
 * not there comes back with an error of its own instead of being left out;
 * a new topic's leaders may not be elected yet: asked again until the
 * deadline.  The client must not create topics (sc_kafka_creates_topics).
 */
static rd_kafka_resp_err_t
sc_kafka_topic_metadata(rd_kafka_t *rk, const char *topic, instr_time deadline,
						const struct rd_kafka_metadata **md)
{
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
	rd_kafka_resp_err_t err;

	if (rkt == NULL)
		return rd_kafka_last_error();
	for (;;)
	{
		rd_kafka_resp_err_t terr;

		err = rd_kafka_metadata(rk, 0, rkt, md, sc_remaining_ms(deadline));
		if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
			break;
		terr = (*md)->topic_cnt == 1 ? (*md)->topics[0].err : RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
		if (terr == RD_KAFKA_RESP_ERR_NO_ERROR ||
			terr == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
			terr == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
			!sc_kafka_retriable(terr) || sc_remaining_ms(deadline) < 100)
		{
			/* Not there, or not ours to see: as when all topics are listed. */
			if (terr == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
				terr == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED)
				err = RD_KAFKA_RESP_ERR_NO_ERROR;
			else if (terr != RD_KAFKA_RESP_ERR_NO_ERROR)
			{
				rd_kafka_metadata_destroy(*md);
				*md = NULL;
				err = terr;
			}
			break;
		}
		rd_kafka_metadata_destroy(*md);
		*md = NULL;
		pg_usleep(50 * 1000L);
	}
	rd_kafka_topic_destroy(rkt);
	return err;
}

/*
 * Describe every partition visible on the cluster (topic NULL) or of one
 * topic, optionally with low and high watermarks, through the client rk
 * (whose events collect the last client error).  Raises an ERROR when the
 * cluster does not answer within timeout_ms in total, or when the topic does
 * not exist; with topic_missing given, a missing topic sets it and returns
 * NIL instead.
 */
List *
sc_kafka_describe_with(rd_kafka_t *rk, ScKafkaEvents *events,
					   const ScKafkaConnInfo *conn, const char *topic,
					   bool with_watermarks, int timeout_ms, bool *topic_missing,
					   char **cluster_id)
{
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_resp_err_t err;
	instr_time	deadline;
	List	   *volatile result = NIL;
	char		failure[512] = "";
	volatile int failure_code = 0;
	volatile bool topic_found = false;

	INSTR_TIME_SET_CURRENT(deadline);
	INSTR_TIME_ADD(deadline, ((instr_time) {.tv_sec = timeout_ms / 1000,
		.tv_nsec = (timeout_ms % 1000) * 1000000L}));

	err = topic != NULL && !sc_kafka_creates_topics(rk)
		? sc_kafka_topic_metadata(rk, topic, deadline, &md)
		: rd_kafka_metadata(rk, 1, NULL, &md, sc_remaining_ms(deadline));
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		rd_kafka_poll(rk, 0);
		snprintf(failure, sizeof(failure), "%s", rd_kafka_err2str(err));
		failure_code = 1;
		md = NULL;
	}
	PG_TRY();
	{
		for (int t = 0; md != NULL && t < md->topic_cnt && failure_code == 0; t++)
		{
			const rd_kafka_metadata_topic_t *mt = &md->topics[t];

			if (topic != NULL && strcmp(mt->topic, topic) != 0)
				continue;
			if (mt->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
				mt->err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED)
				continue;		/* as a listing of all topics leaves it out */
			if (topic == NULL && strncmp(mt->topic, "__", 2) == 0)
				continue;		/* Kafka's internal topics */
			topic_found = true;

			for (int p = 0; p < mt->partition_cnt; p++)
			{
				ScKafkaPartitionInfo *info = palloc0(sizeof(ScKafkaPartitionInfo));

				info->topic = pstrdup(mt->topic);
				info->partition = mt->partitions[p].id;
				info->source = info->partition;
				info->leader = mt->partitions[p].leader;
				info->low_watermark = -1;
				info->high_watermark = -1;
				result = lappend(result, info);
			}
		}
		if (failure_code == 0 && topic != NULL && !topic_found)
			failure_code = 2;
		if (with_watermarks && failure_code == 0 && result != NIL &&
			!sc_kafka_watermarks(rk, result, deadline, failure, sizeof(failure)))
			failure_code = 1;

		/* The id the metadata answer carried (none from brokers before 0.10.1). */
		if (cluster_id != NULL && md != NULL)
		{
			char	   *id = rd_kafka_clusterid(rk, 0);

			*cluster_id = id ? pstrdup(id) : NULL;
			if (id)
				rd_kafka_mem_free(rk, id);
		}
	}
	PG_FINALLY();
	{
		if (md != NULL)
			rd_kafka_metadata_destroy(md);
		rd_kafka_poll(rk, 0);
	}
	PG_END_TRY();

	if (failure_code == 1)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not get metadata from Kafka cluster \"%s\": %s",
						conn->cluster_name, failure),
				 events->last_error[0] ? errdetail("Last client error: %s", events->last_error) : 0,
				 sc_kafka_security_failure(events->last_error)
				 ? errhint("The brokers refused the connection's security: check the cluster's SASL credentials (sasl.*) and certificates (ssl.*) against the detail, with streamcube_alter_cluster().")
				 : errhint("Check that bootstrap servers \"%s\" are reachable, or raise streamcube.kafka_timeout (now %d ms).",
						   conn->bootstrap_servers, timeout_ms)));
	if (failure_code == 2 && topic_missing != NULL)
	{
		*topic_missing = true;
		return NIL;
	}
	if (topic_missing != NULL)
		*topic_missing = false;
	if (failure_code == 2)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("topic \"%s\" does not exist on Kafka cluster \"%s\"",
						topic, conn->cluster_name),
				 errhint("Create the topic first; streamcube never creates topics.")));
	return result;
}

/*
 * sc_kafka_describe_with() of every topic of topics in turn (not those
 * taken out of the cube), each partition with its source partition, in
 * that order.  With topic_missing, a topic
 * that is not there sets it and the others are still described; without,
 * it is an error.  Caller holds rk; each topic has timeout_ms.  topics
 * NULL: every topic of the cluster (not Kafka's own), in one request, each
 * partition its own source partition.
 */
List *
sc_kafka_describe_topics_with(rd_kafka_t *rk, ScKafkaEvents *events,
							  const ScKafkaConnInfo *conn, const ScTopicList *topics,
							  bool with_watermarks, int timeout_ms, bool *topic_missing,
							  char **cluster_id)
{
	List	   *result = NIL;
	bool		described = false;

	if (topics == NULL)
		return sc_kafka_describe_with(rk, events, conn, NULL, with_watermarks, timeout_ms,
									  topic_missing, cluster_id);
	if (topics->n > SC_SOURCE_MAX_TOPICS)
		elog(ERROR, "streamcube reads at most %d topics in one cube, not %d", SC_SOURCE_MAX_TOPICS, topics->n);
	if (topic_missing != NULL)
		*topic_missing = false;
	if (cluster_id != NULL)
		*cluster_id = NULL;
	for (int t = 0; t < topics->n; t++)
	{
		bool		missing = false;
		List	   *partitions;
		ListCell   *lc;

		if (sc_topic_removed(topics, t))
			continue;
		/* the cluster's id from the first answer */
		partitions = sc_kafka_describe_with(rk, events, conn, topics->names[t],
											with_watermarks, timeout_ms,
											topic_missing != NULL ? &missing : NULL,
											described ? NULL : cluster_id);
		described = true;

		foreach(lc, partitions)
		{
			ScKafkaPartitionInfo *info = lfirst(lc);

			if (info->partition >= SC_SOURCE_MAX_PARTITIONS)
				ereport(ERROR,
						(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						 errmsg("topic \"%s\" of Kafka cluster \"%s\" has partition %d; streamcube reads partitions below %d",
								info->topic, conn->cluster_name, info->partition, SC_SOURCE_MAX_PARTITIONS)));
			info->source = sc_source_partition(t, info->partition);
		}
		result = list_concat(result, partitions);
		if (missing)
			*topic_missing = true;
	}
	return result;
}

/* sc_kafka_describe_topics_with() through a client of its own. */
List *
sc_kafka_describe_topics(const ScKafkaConnInfo *conn, const ScTopicList *topics,
						 bool with_watermarks, int timeout_ms, bool *topic_missing,
						 char **cluster_id)
{
	ScKafkaEvents events = {0};
	rd_kafka_t *rk = sc_kafka_client(conn, &events);
	List	   *volatile result = NIL;

	PG_TRY();
	{
		result = sc_kafka_describe_topics_with(rk, &events, conn, topics, with_watermarks,
											   timeout_ms, topic_missing, cluster_id);
	}
	PG_FINALLY();
	{
		rd_kafka_destroy(rk);
	}
	PG_END_TRY();
	return result;
}

/* ----------------------------------------------------------------
 * Offsets by time
 * ----------------------------------------------------------------
 */

/* The name of the topic of a source partition of topics. */
const char *
sc_kafka_source_topic(const ScTopicList *topics, int32 source)
{
	int			t = sc_source_topic_no(source);

	if (t < 0 || t >= topics->n)
		elog(ERROR, "source partition %d is of none of %d topics", source, topics->n);
	return topics->names[t];
}

/*
 * The first offset of each partition whose Kafka timestamp is at or after
 * ms[i] (milliseconds since 1970), into offsets[i]; -1 where no message is
 * that late (the caller takes the partition's end).  Kafka answers by the
 * timestamps it stores: the producer's (CreateTime) or its own
 * (LogAppendTime).  Raises an ERROR when the cluster does not answer within
 * timeout_ms.
 */
void
sc_kafka_offsets_at(const ScKafkaConnInfo *conn, const ScTopicList *topics, int n,
					const int32 *sources, const int64 *ms, int64 *offsets, int timeout_ms)
{
	ScKafkaEvents events = {0};
	rd_kafka_t *rk;
	rd_kafka_topic_partition_list_t *volatile list = NULL;
	volatile rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
	instr_time	deadline;

	if (n == 0)
		return;
	rk = sc_kafka_client(conn, &events);
	INSTR_TIME_SET_CURRENT(deadline);
	INSTR_TIME_ADD(deadline, ((instr_time) {.tv_sec = timeout_ms / 1000,
		.tv_nsec = (timeout_ms % 1000) * 1000000L}));

	PG_TRY();
	{
		list = rd_kafka_topic_partition_list_new(n);
		for (int i = 0; i < n; i++)
			rd_kafka_topic_partition_list_add(list, sc_kafka_source_topic(topics, sources[i]),
											  sc_source_kafka_partition(sources[i]));
		err = sc_kafka_list_offsets_n(rk, list, ms, false, deadline);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
			for (int i = 0; i < n; i++)
			{
				rd_kafka_topic_partition_t *tp =
					rd_kafka_topic_partition_list_find(list, sc_kafka_source_topic(topics, sources[i]),
													   sc_source_kafka_partition(sources[i]));

				offsets[i] = tp != NULL && tp->offset >= 0 ? tp->offset : -1;
			}
	}
	PG_FINALLY();
	{
		if (list != NULL)
			rd_kafka_topic_partition_list_destroy(list);
		rd_kafka_destroy(rk);
	}
	PG_END_TRY();
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not find offsets by time in topic \"%s\"%s of Kafka cluster \"%s\": %s",
						topics->names[0], topics->n > 1 ? " and others" : "",
						conn->cluster_name, rd_kafka_err2str(err)),
				 events.last_error[0] ? errdetail("Last client error: %s", events.last_error) : 0,
				 errhint("Check that the brokers are reachable, or raise streamcube.kafka_timeout (now %d ms).",
						 timeout_ms)));
}

/* A Kafka timestamp (milliseconds since 1970) as a timestamptz. */
TimestampTz
sc_kafka_ms_timestamptz(int64 ms)
{
	return (ms - (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000) * 1000;
}
