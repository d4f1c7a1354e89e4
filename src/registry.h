/*-------------------------------------------------------------------------
 *
 * registry.h
 *		streamcube's HTTP client for a Confluent-compatible schema registry.
 *
 * registry.c is the only file that includes curl.  It asks a schema
 * registry (Confluent's API; Apicurio Registry serves it under
 * /apis/ccompat/v7) for the schemas that Avro, Protobuf and JSON Schema
 * messages name by id, and hands back plain palloc'd strings.
 *
 * The registry's answers are statuses, not ERRORs: a message format decides
 * what a missing schema or an unreachable registry means for a batch.  Only
 * running out of memory and interrupts (query cancel, terminate) raise an
 * ERROR, and never while a curl call is on the stack.  A request never takes
 * longer than its timeout, every URL of the list together.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_REGISTRY_H
#define SC_REGISTRY_H

/* The largest answer accepted from a registry. */
#define SC_REGISTRY_MAX_ANSWER (1024 * 1024)

/* How to reach one schema registry. */
typedef struct ScRegistryConn
{
	const char *urls;			/* one or more base URLs, comma-separated
								 * (schema.registry.url), e.g.
								 * "http://127.0.0.1:58081/apis/ccompat/v7";
								 * tried in order, the next on a connection
								 * failure, a timeout, 5xx or 429; each but
								 * the last gets an equal share of the time
								 * left */
	const char *user_info;		/* "user:password" for HTTP basic auth
								 * (schema.registry.basic.auth.user.info), or
								 * NULL: a secret, never in any message */
	const char *ca_location;	/* CA file for https
								 * (schema.registry.ssl.ca.location), or NULL
								 * for the system's */
	int			timeout_ms;		/* whole request, all URLs together */
} ScRegistryConn;

typedef enum ScRegistryStatus
{
	SC_REGISTRY_OK,
	SC_REGISTRY_NOT_FOUND,		/* the registry answered that the id/subject
								 * does not exist (any 404) */
	SC_REGISTRY_UNAVAILABLE,	/* no answer, timeout, 5xx, 429, a connection
								 * refused: retry later */
	SC_REGISTRY_REFUSED			/* 401/403, a redirect, another 4xx, a TLS
								 * failure, a URL that is not http(s), an
								 * answer too large or not the JSON expected:
								 * the configuration is wrong */
} ScRegistryStatus;

/*
 * GET <url>/schemas/ids/<id>: the schema's type ("AVRO" when the registry
 * gives none, "PROTOBUF", "JSON"), its text, and its references as JSON
 * text ("[]" when none), palloc'd in the caller's memory context; NULL
 * unless SC_REGISTRY_OK.  errbuf says why otherwise (never the password).
 */
extern ScRegistryStatus sc_registry_schema(const ScRegistryConn *conn, int32 id,
										   char **type, char **schema,
										   char **references,
										   char *errbuf, size_t errlen);

/*
 * GET <url>/subjects/<subject>/versions/latest: id, type and text of the
 * subject's latest schema.
 */
extern ScRegistryStatus sc_registry_latest(const ScRegistryConn *conn,
										   const char *subject, int32 *id,
										   char **type, char **schema,
										   char *errbuf, size_t errlen);

/* The same for one version of the subject (latest when version <= 0). */
extern ScRegistryStatus sc_registry_version(const ScRegistryConn *conn, const char *subject,
											int32 version, int32 *id, char **type, char **schema,
											char *errbuf, size_t errlen);

/*
 * GET <url>/subjects: the registry answers (for streamcube_check_cluster).
 * A 404 here is SC_REGISTRY_REFUSED: the URL has no registry API.
 */
extern ScRegistryStatus sc_registry_check(const ScRegistryConn *conn,
										  char *errbuf, size_t errlen);

/*
 * A URL list an admin gives: only http:// and https:// URLs with a host, no
 * user:password@, query or fragment, no spaces.  False with why.
 */
extern bool sc_registry_check_urls(const char *urls, char *errbuf, size_t errlen);

extern const char *sc_registry_status_name(ScRegistryStatus status);
extern const char *sc_registry_curl_version(void);

#endif							/* SC_REGISTRY_H */
