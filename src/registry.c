/*-------------------------------------------------------------------------
 *
 * registry.c
 *		The only file of streamcube that includes curl: GET requests to a
 *		Confluent-compatible schema registry, and their JSON answers.
 *
 * The server makes requests to URLs an admin chose, with the server's own
 * network position, so a request does as little as it can:
 *
 *	- only http and https, no redirects at all (a 3xx is refused: following
 *	  one could lead anywhere, file:// included), no proxy from the
 *	  environment, peer and host verification always on;
 *	- a whole request, every URL of the list together, never takes longer
 *	  than its timeout, and an answer larger than SC_REGISTRY_MAX_ANSWER is
 *	  cut off by the write callback, so memory stays bounded whatever the
 *	  other end sends;
 *	- the password (user_info) is handed to curl only, and any message that
 *	  might quote it is masked.
 *
 * curl runs its resolver on a thread of its own.  Like librdkafka's (see
 * kafka.c), that thread must never run PostgreSQL's signal handlers, so
 * every call that may start it runs with all signals blocked.  The transfer
 * is driven with curl's multi interface in short slices, signals blocked
 * within a slice and delivered between slices, where CHECK_FOR_INTERRUPTS()
 * may raise an ERROR: no curl call is on the stack then, and a PG_FINALLY
 * frees every curl handle and the answer buffer before the ERROR goes on.
 * So a query cancel or a terminate waits at most one slice, not the whole
 * timeout.
 *
 * The callbacks curl calls (answer and header bytes) only write into a
 * malloc'd buffer and set flags: no palloc, no ereport on curl's stack.
 *
 * Answers are parsed with PostgreSQL's JSON parser (common/jsonapi.h),
 * which reports bad JSON as an error code.  Two things it would turn into
 * an ERROR are checked before it runs: nesting deep enough to exhaust the
 * stack, and \u escapes the database encoding cannot take.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include <ctype.h>
#include <pthread.h>
#include <signal.h>

#include <curl/curl.h>

#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "registry.h"
#include "utils/memutils.h"

/* Nesting of registry answers is 3 at most; anything deeper is refused. */
#define SC_REGISTRY_MAX_DEPTH 32
/* Response headers: a registry sends a few hundred bytes. */
#define SC_REGISTRY_MAX_HEADERS (64 * 1024)
/* Signals wait at most this long while curl runs. */
#define SC_REGISTRY_SLICE_MS 100
/* How much of a registry's own error message reaches errbuf. */
#define SC_REGISTRY_MAX_MESSAGE 200

/* What curl's callbacks fill; malloc'd memory only (see the header). */
typedef struct ScRegistryAnswer
{
	char	   *data;			/* malloc'd, NUL-terminated */
	size_t		len;
	size_t		cap;
	bool		too_large;
	bool		out_of_memory;
	size_t		header_bytes;
	bool		headers_too_large;
} ScRegistryAnswer;

/* Everything a request holds outside PostgreSQL's memory. */
typedef struct ScRegistryTransfer
{
	CURLM	   *multi;
	CURL	   *easy;
	struct curl_slist *headers;
	ScRegistryAnswer answer;
	char		curl_error[CURL_ERROR_SIZE];
} ScRegistryTransfer;

/* The fields of an answer that matter, as the JSON parser meets them. */
typedef struct ScRegistryFields
{
	JsonLexContext *lex;
	int			depth;
	JsonTokenType top;			/* OBJECT_START, ARRAY_START or a scalar */
	char	   *field;			/* the top-level field being parsed */
	char	   *value_start;	/* where that field's value starts */
	char	   *schema;
	bool		schema_bad;		/* "schema" is not a string */
	char	   *schema_type;
	bool		schema_type_bad;
	char	   *id;
	bool		id_bad;
	char	   *references;		/* raw JSON text */
	bool		references_bad; /* not an array */
	char	   *message;
	char	   *error_code;
} ScRegistryFields;

static bool sc_registry_curl_ready = false;

/* ----------------------------------------------------------------
 * Messages
 * ----------------------------------------------------------------
 */

/*
 * Mask the password, and the whole user info, wherever a message quotes
 * it.  Nothing here should quote it, but curl's and the registry's texts
 * are not ours.
 */
static void
sc_registry_mask(const ScRegistryConn *conn, char *errbuf, size_t errlen)
{
	const char *secrets[2];
	int			i;

	if (conn->user_info == NULL || errlen == 0)
		return;
	secrets[0] = conn->user_info;
	secrets[1] = strchr(conn->user_info, ':');
	if (secrets[1] != NULL)
		secrets[1]++;
	for (i = 0; i < 2; i++)
	{
		const char *s = secrets[i];
		size_t		slen;
		char	   *from = errbuf;
		char	   *hit;

		if (s == NULL || s[0] == '\0' || strspn(s, "*") == strlen(s))
			continue;
		slen = strlen(s);
		while ((hit = strstr(from, s)) != NULL)
		{
			/* at most 8 stars in place of the secret, the rest moved up */
			size_t		mask = Min(slen, 8);

			memset(hit, '*', mask);
			memmove(hit + mask, hit + slen, strlen(hit + slen) + 1);
			from = hit + mask;
		}
	}
}

/* Control characters of a foreign text become spaces, and it is cut to max bytes. */
static void
sc_registry_clean_text(char *text, size_t max)
{
	size_t		len = strlen(text);

	Assert(max > 3);
	if (len > max)
	{
		/* "..." within the max, after whole characters: no byte past len */
		len = pg_mbcliplen(text, len, max - 3);
		memcpy(text + len, "...", 4);
		len += 3;
	}
	for (size_t i = 0; i < len; i++)
	{
		if ((unsigned char) text[i] < 0x20 || text[i] == 0x7f)
			text[i] = ' ';
	}
}

const char *
sc_registry_status_name(ScRegistryStatus status)
{
	switch (status)
	{
		case SC_REGISTRY_OK:
			return "ok";
		case SC_REGISTRY_NOT_FOUND:
			return "not found";
		case SC_REGISTRY_UNAVAILABLE:
			return "unavailable";
		case SC_REGISTRY_REFUSED:
			return "refused";
	}
	return "unknown";
}

const char *
sc_registry_curl_version(void)
{
	return curl_version();
}

/* ----------------------------------------------------------------
 * URLs
 * ----------------------------------------------------------------
 */

/*
 * Check one URL with curl's own parser, so that what is checked is what
 * curl will use.  url is NUL-terminated, without the comma.
 */
static bool
sc_registry_check_url(const char *url, char *errbuf, size_t errlen)
{
	CURLU	   *u;
	CURLUcode	rc;
	char	   *scheme = NULL;
	char	   *host = NULL;
	char	   *user = NULL;
	char	   *password = NULL;
	bool		ok = false;
	const char *p;

	for (p = url; *p != '\0'; p++)
	{
		if ((unsigned char) *p <= ' ' || (unsigned char) *p >= 0x7f)
		{
			snprintf(errbuf, errlen,
					 "schema registry URL \"%.200s\" has a space, a control or a non-ASCII character",
					 url);
			return false;
		}
	}
	if (pg_strncasecmp(url, "http://", 7) != 0 && pg_strncasecmp(url, "https://", 8) != 0)
	{
		snprintf(errbuf, errlen,
				 "schema registry URL \"%.200s\" is not an http:// or https:// URL", url);
		return false;
	}
	if (strchr(url, '?') != NULL || strchr(url, '#') != NULL)
	{
		snprintf(errbuf, errlen,
				 "schema registry URL \"%.200s\" has a query or a fragment: give the base URL only",
				 url);
		return false;
	}

	u = curl_url();
	if (u == NULL)
	{
		snprintf(errbuf, errlen, "out of memory in libcurl");
		return false;
	}
	rc = curl_url_set(u, CURLUPART_URL, url, 0);
	if (rc != CURLUE_OK)
		snprintf(errbuf, errlen, "schema registry URL \"%.200s\" is not valid: %s",
				 url, curl_url_strerror(rc));
	else if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK ||
			 curl_url_get(u, CURLUPART_PASSWORD, &password, 0) == CURLUE_OK)
	{
		/* not quoted: it holds a user name and maybe a password */
		snprintf(errbuf, errlen,
				 "a schema registry URL has a user name or password in it: give them in schema.registry.basic.auth.user.info");
	}
	else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
			 (pg_strcasecmp(scheme, "http") != 0 && pg_strcasecmp(scheme, "https") != 0))
		snprintf(errbuf, errlen,
				 "schema registry URL \"%.200s\" is not an http:// or https:// URL", url);
	else if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || host[0] == '\0')
		snprintf(errbuf, errlen, "schema registry URL \"%.200s\" has no host", url);
	else
		ok = true;

	curl_free(scheme);
	curl_free(host);
	curl_free(user);
	curl_free(password);
	curl_url_cleanup(u);
	return ok;
}

bool
sc_registry_check_urls(const char *urls, char *errbuf, size_t errlen)
{
	const char *start = urls;

	if (urls == NULL || urls[0] == '\0')
	{
		snprintf(errbuf, errlen, "no schema registry URL");
		return false;
	}
	for (;;)
	{
		const char *comma = strchr(start, ',');
		size_t		len = comma ? (size_t) (comma - start) : strlen(start);
		char	   *url;
		bool		ok;

		if (len == 0)
		{
			snprintf(errbuf, errlen, "schema registry URL list \"%.200s\" has an empty entry", urls);
			return false;
		}
		url = pnstrdup(start, len);
		ok = sc_registry_check_url(url, errbuf, errlen);
		pfree(url);
		if (!ok)
			return false;
		if (comma == NULL)
			return true;
		start = comma + 1;
	}
}

/* ----------------------------------------------------------------
 * curl's callbacks: malloc'd memory and flags only
 * ----------------------------------------------------------------
 */

static size_t
sc_registry_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	ScRegistryAnswer *answer = userdata;
	size_t		n = size * nmemb;

	if (n > SC_REGISTRY_MAX_ANSWER - answer->len)
	{
		answer->too_large = true;
		return n == 0 ? 1 : 0;	/* anything but n stops the transfer */
	}
	if (answer->len + n + 1 > answer->cap)
	{
		size_t		cap = Max(answer->cap * 2, 16384);
		char	   *data;

		while (cap < answer->len + n + 1)
			cap *= 2;
		cap = Min(cap, SC_REGISTRY_MAX_ANSWER + 1);
		data = realloc(answer->data, cap);
		if (data == NULL)
		{
			answer->out_of_memory = true;
			return n == 0 ? 1 : 0;
		}
		answer->data = data;
		answer->cap = cap;
	}
	memcpy(answer->data + answer->len, ptr, n);
	answer->len += n;
	answer->data[answer->len] = '\0';
	return n;
}

static size_t
sc_registry_header(char *ptr, size_t size, size_t nitems, void *userdata)
{
	ScRegistryAnswer *answer = userdata;
	size_t		n = size * nitems;

	answer->header_bytes += n;
	if (answer->header_bytes > SC_REGISTRY_MAX_HEADERS)
	{
		answer->headers_too_large = true;
		return n == 0 ? 1 : 0;
	}
	return n;
}

/* ----------------------------------------------------------------
 * Transfers
 * ----------------------------------------------------------------
 */

/* Free whatever a transfer holds; safe on a half-made one. */
static void
sc_registry_transfer_free(ScRegistryTransfer *t)
{
	if (t->multi != NULL && t->easy != NULL)
		curl_multi_remove_handle(t->multi, t->easy);	/* harmless if not added */
	if (t->easy != NULL)
		curl_easy_cleanup(t->easy);
	if (t->multi != NULL)
		curl_multi_cleanup(t->multi);
	if (t->headers != NULL)
		curl_slist_free_all(t->headers);
	free(t->answer.data);
	t->easy = NULL;
	t->multi = NULL;
	t->headers = NULL;
	t->answer.data = NULL;
}

/*
 * The options every request has.  False with errbuf set when curl refuses
 * one: that curl cannot make the request as safely as intended.
 */
static bool
sc_registry_transfer_setup(ScRegistryTransfer *t, const ScRegistryConn *conn,
						   char *errbuf, size_t errlen)
{
	CURLcode	rc = CURLE_OK;

#define SC_SETOPT(opt, val) \
	do { \
		if (rc == CURLE_OK) \
			rc = curl_easy_setopt(t->easy, (opt), (val)); \
	} while (0)

	SC_SETOPT(CURLOPT_NOSIGNAL, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500		/* 7.85.0 */
	SC_SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
	SC_SETOPT(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
	SC_SETOPT(CURLOPT_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
	SC_SETOPT(CURLOPT_REDIR_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	SC_SETOPT(CURLOPT_FOLLOWLOCATION, 0L);
	SC_SETOPT(CURLOPT_MAXREDIRS, 0L);
	/* "" disables the proxy even when http_proxy & co. are in the environment */
	SC_SETOPT(CURLOPT_PROXY, "");
	SC_SETOPT(CURLOPT_NETRC, (long) CURL_NETRC_IGNORED);
	SC_SETOPT(CURLOPT_SSL_VERIFYPEER, 1L);
	SC_SETOPT(CURLOPT_SSL_VERIFYHOST, 2L);
	if (conn->ca_location != NULL && conn->ca_location[0] != '\0')
		SC_SETOPT(CURLOPT_CAINFO, conn->ca_location);
	if (conn->user_info != NULL && conn->user_info[0] != '\0')
	{
		SC_SETOPT(CURLOPT_HTTPAUTH, (long) CURLAUTH_BASIC);
		SC_SETOPT(CURLOPT_USERPWD, conn->user_info);
	}
	SC_SETOPT(CURLOPT_HTTPGET, 1L);
	SC_SETOPT(CURLOPT_USERAGENT, "streamcube/" SC_LIBRARY_VERSION);
	SC_SETOPT(CURLOPT_HTTPHEADER, t->headers);
	SC_SETOPT(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t) SC_REGISTRY_MAX_ANSWER);
	SC_SETOPT(CURLOPT_WRITEFUNCTION, sc_registry_write);
	SC_SETOPT(CURLOPT_WRITEDATA, &t->answer);
	SC_SETOPT(CURLOPT_HEADERFUNCTION, sc_registry_header);
	SC_SETOPT(CURLOPT_HEADERDATA, &t->answer);
	SC_SETOPT(CURLOPT_ERRORBUFFER, t->curl_error);
#undef SC_SETOPT

	if (rc != CURLE_OK)
	{
		snprintf(errbuf, errlen, "libcurl refused an option of the request: %s",
				 curl_easy_strerror(rc));
		return false;
	}
	return true;
}

/* A curl failure of one URL: which status, in errbuf why. */
static ScRegistryStatus
sc_registry_curl_status(ScRegistryTransfer *t, CURLcode rc, const char *url,
						long timeout_ms, char *errbuf, size_t errlen)
{
	const char *why = t->curl_error[0] != '\0' ? t->curl_error : curl_easy_strerror(rc);

	if (t->answer.too_large || rc == CURLE_FILESIZE_EXCEEDED)
	{
		snprintf(errbuf, errlen, "schema registry %s: the answer is larger than %d bytes",
				 url, SC_REGISTRY_MAX_ANSWER);
		return SC_REGISTRY_REFUSED;
	}
	if (t->answer.headers_too_large)
	{
		snprintf(errbuf, errlen, "schema registry %s: the answer's headers are larger than %d bytes",
				 url, SC_REGISTRY_MAX_HEADERS);
		return SC_REGISTRY_REFUSED;
	}
	if (t->answer.out_of_memory)
	{
		snprintf(errbuf, errlen, "schema registry %s: out of memory reading the answer", url);
		return SC_REGISTRY_UNAVAILABLE;
	}

	switch (rc)
	{
		case CURLE_UNSUPPORTED_PROTOCOL:
		case CURLE_URL_MALFORMAT:
		case CURLE_TOO_MANY_REDIRECTS:
		case CURLE_LOGIN_DENIED:
		case CURLE_REMOTE_ACCESS_DENIED:
		case CURLE_SSL_CONNECT_ERROR:
		case CURLE_SSL_ENGINE_NOTFOUND:
		case CURLE_SSL_ENGINE_SETFAILED:
		case CURLE_SSL_CERTPROBLEM:
		case CURLE_SSL_CIPHER:
		case CURLE_PEER_FAILED_VERIFICATION:
		case CURLE_SSL_ENGINE_INITFAILED:
		case CURLE_SSL_CACERT_BADFILE:
		case CURLE_SSL_SHUTDOWN_FAILED:
		case CURLE_SSL_CRL_BADFILE:
		case CURLE_SSL_ISSUER_ERROR:
		case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
		case CURLE_SSL_INVALIDCERTSTATUS:
		case CURLE_SSL_CLIENTCERT:
		case CURLE_USE_SSL_FAILED:
			snprintf(errbuf, errlen, "schema registry %s: %s", url, why);
			return SC_REGISTRY_REFUSED;
		case CURLE_OPERATION_TIMEDOUT:
			snprintf(errbuf, errlen, "schema registry %s: no answer within %ld ms (%s)",
					 url, timeout_ms, why);
			return SC_REGISTRY_UNAVAILABLE;
		default:
			snprintf(errbuf, errlen, "schema registry %s: %s", url, why);
			return SC_REGISTRY_UNAVAILABLE;
	}
}

static void sc_registry_parse(char *json, int len, ScRegistryFields *f, char *errbuf,
							  size_t errlen, const char *url, bool *parsed);

/*
 * The error a registry gives in its answer ({"error_code": 40403,
 * "message": "..."}), for errbuf; "" when the answer has none.
 */

static char *
sc_registry_answer_message(ScRegistryTransfer *t)
{
	ScRegistryFields f;
	char		ignore[64];
	bool		parsed;
	char	   *json;
	char	   *msg;

	if (t->answer.data == NULL || t->answer.len == 0)
		return "";
	json = pnstrdup(t->answer.data, t->answer.len);
	sc_registry_parse(json, t->answer.len, &f, ignore, sizeof(ignore), "", &parsed);
	if (!parsed || f.message == NULL)
		return "";
	if (f.error_code != NULL)
		msg = psprintf(": %s (error code %s)", f.message, f.error_code);
	else
		msg = psprintf(": %s", f.message);
	sc_registry_clean_text(msg, SC_REGISTRY_MAX_MESSAGE);
	return msg;
}

/* An HTTP answer of one URL: which status, in errbuf why. */
static ScRegistryStatus
sc_registry_http_status(ScRegistryTransfer *t, long code, const char *url,
						char *errbuf, size_t errlen)
{
	if (code >= 200 && code < 300)
		return SC_REGISTRY_OK;
	if (code >= 300 && code < 400)
	{
		snprintf(errbuf, errlen,
				 "schema registry %s: HTTP %ld, a redirect, which is not followed: give the URL it redirects to",
				 url, code);
		return SC_REGISTRY_REFUSED;
	}
	if (code == 401 || code == 403)
	{
		snprintf(errbuf, errlen,
				 "schema registry %s: HTTP %ld, access denied (check schema.registry.basic.auth.user.info)%s",
				 url, code, sc_registry_answer_message(t));
		return SC_REGISTRY_REFUSED;
	}
	if (code == 404)
	{
		snprintf(errbuf, errlen, "schema registry %s: HTTP 404, not found%s",
				 url, sc_registry_answer_message(t));
		return SC_REGISTRY_NOT_FOUND;
	}
	if (code == 429 || code >= 500)
	{
		snprintf(errbuf, errlen, "schema registry %s: HTTP %ld%s",
				 url, code, sc_registry_answer_message(t));
		return SC_REGISTRY_UNAVAILABLE;
	}
	snprintf(errbuf, errlen, "schema registry %s: HTTP %ld, the request was refused%s",
			 url, code, sc_registry_answer_message(t));
	return SC_REGISTRY_REFUSED;
}

/*
 * One GET of one URL, within timeout_ms, driven in slices (see the header
 * of this file).  May raise an ERROR between slices, from
 * CHECK_FOR_INTERRUPTS(); the caller's PG_FINALLY frees the transfer.
 */
static ScRegistryStatus
sc_registry_get_one(ScRegistryTransfer *t, const char *url, long timeout_ms,
					char *errbuf, size_t errlen)
{
	CURLMcode	mc;
	CURLcode	rc = CURLE_OK;
	CURLMsg    *msg;
	int			left;
	long		code = 0;
	bool		done = false;
	instr_time	start,
				now;

	t->answer.len = 0;
	t->answer.too_large = false;
	t->answer.out_of_memory = false;
	t->answer.header_bytes = 0;
	t->answer.headers_too_large = false;
	t->curl_error[0] = '\0';

	if (curl_easy_setopt(t->easy, CURLOPT_URL, url) != CURLE_OK ||
		curl_easy_setopt(t->easy, CURLOPT_TIMEOUT_MS, timeout_ms) != CURLE_OK ||
		curl_easy_setopt(t->easy, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms) != CURLE_OK)
	{
		snprintf(errbuf, errlen, "schema registry %s: libcurl refused the URL", url);
		return SC_REGISTRY_REFUSED;
	}
	mc = curl_multi_add_handle(t->multi, t->easy);
	if (mc != CURLM_OK)
	{
		snprintf(errbuf, errlen, "schema registry %s: %s", url, curl_multi_strerror(mc));
		return SC_REGISTRY_UNAVAILABLE;
	}

	INSTR_TIME_SET_CURRENT(start);
	while (!done)
	{
		sigset_t	all,
					old;
		int			running = 0;

		/* curl may start its resolver thread in here: see the header */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		mc = curl_multi_perform(t->multi, &running);
		if (mc == CURLM_OK && running > 0)
			mc = curl_multi_poll(t->multi, NULL, 0, SC_REGISTRY_SLICE_MS, NULL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);

		/* no curl call on the stack: an ERROR here is freed by the caller */
		CHECK_FOR_INTERRUPTS();

		if (mc != CURLM_OK)
		{
			curl_multi_remove_handle(t->multi, t->easy);
			snprintf(errbuf, errlen, "schema registry %s: %s", url, curl_multi_strerror(mc));
			return SC_REGISTRY_UNAVAILABLE;
		}
		while ((msg = curl_multi_info_read(t->multi, &left)) != NULL)
		{
			if (msg->msg == CURLMSG_DONE && msg->easy_handle == t->easy)
			{
				rc = msg->data.result;
				done = true;
			}
		}
		if (!done && running == 0)
		{
			/* curl has nothing to do, yet did not say it is done */
			rc = CURLE_GOT_NOTHING;
			done = true;
		}

		/* curl's own timeout should fire first; this one is a backstop */
		INSTR_TIME_SET_CURRENT(now);
		INSTR_TIME_SUBTRACT(now, start);
		if (!done && INSTR_TIME_GET_MILLISEC(now) > timeout_ms + 1000)
		{
			rc = CURLE_OPERATION_TIMEDOUT;
			done = true;
		}
	}
	curl_multi_remove_handle(t->multi, t->easy);

	if (rc != CURLE_OK)
		return sc_registry_curl_status(t, rc, url, timeout_ms, errbuf, errlen);
	curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
	return sc_registry_http_status(t, code, url, errbuf, errlen);
}

/*
 * GET path from each base URL in turn, until one answers with anything but
 * a connection failure, a timeout, a 5xx or a 429, all within
 * conn->timeout_ms.  On SC_REGISTRY_OK *answer is the answer, palloc'd and
 * NUL-terminated, and *answer_len its length.
 */
static ScRegistryStatus
sc_registry_get(const ScRegistryConn *conn, const char *path,
				char **answer, int *answer_len, char *errbuf, size_t errlen)
{
	ScRegistryTransfer *t;
	volatile ScRegistryStatus status = SC_REGISTRY_UNAVAILABLE;
	char	   *urls;
	char	   *base;
	char	   *next;
	volatile int tried = 0;
	instr_time	start,
				now;

	*answer = NULL;
	*answer_len = 0;
	errbuf[0] = '\0';

	if (!sc_registry_check_urls(conn->urls, errbuf, errlen))
		return SC_REGISTRY_REFUSED;
	if (!sc_registry_curl_ready)
	{
		/* once per process; not thread-safe, but ours is the only thread */
		CURLcode	rc = curl_global_init(CURL_GLOBAL_DEFAULT);

		if (rc != CURLE_OK)
		{
			snprintf(errbuf, errlen, "could not initialize libcurl: %s", curl_easy_strerror(rc));
			return SC_REGISTRY_UNAVAILABLE;
		}
		sc_registry_curl_ready = true;
	}

	/* made before PG_TRY, so that PG_FINALLY sees what it holds */
	t = palloc0(sizeof(ScRegistryTransfer));
	urls = pstrdup(conn->urls);
	INSTR_TIME_SET_CURRENT(start);

	PG_TRY();
	{
		t->multi = curl_multi_init();
		t->easy = curl_easy_init();
		t->headers = curl_slist_append(NULL, "Accept: application/vnd.schemaregistry.v1+json, application/json");
		if (t->multi == NULL || t->easy == NULL || t->headers == NULL)
		{
			snprintf(errbuf, errlen, "out of memory in libcurl");
			status = SC_REGISTRY_UNAVAILABLE;
		}
		else if (!sc_registry_transfer_setup(t, conn, errbuf, errlen))
			status = SC_REGISTRY_REFUSED;
		else
		{
			for (base = urls; base != NULL; base = next)
			{
				char	   *url;
				size_t		blen;
				long		left;

				next = strchr(base, ',');
				if (next != NULL)
					*next++ = '\0';

				INSTR_TIME_SET_CURRENT(now);
				INSTR_TIME_SUBTRACT(now, start);
				left = conn->timeout_ms - (long) INSTR_TIME_GET_MILLISEC(now);
				if (left <= 0)
				{
					if (tried == 0)
						snprintf(errbuf, errlen, "schema registry: timeout of %d ms", conn->timeout_ms);
					status = SC_REGISTRY_UNAVAILABLE;
					break;
				}

				/*
				 * Each URL but the last gets an equal share of the time left,
				 * so that one that takes connections and never answers
				 * leaves time for the next.
				 */
				if (next != NULL)
				{
					int			urls_left = 2;
					const char *c;

					for (c = next; (c = strchr(c, ',')) != NULL; c++)
						urls_left++;
					left = Max(left / urls_left, 1);
				}

				blen = strlen(base);
				while (blen > 0 && base[blen - 1] == '/')
					blen--;
				url = psprintf("%.*s%s", (int) blen, base, path);
				status = sc_registry_get_one(t, url, left, errbuf, errlen);
				tried++;
				pfree(url);
				if (status != SC_REGISTRY_UNAVAILABLE)
					break;
			}
			if (status == SC_REGISTRY_OK)
			{
				errbuf[0] = '\0';	/* an earlier URL's failure is no news */
				*answer = palloc(t->answer.len + 1);
				if (t->answer.len > 0)
					memcpy(*answer, t->answer.data, t->answer.len);
				(*answer)[t->answer.len] = '\0';
				*answer_len = (int) t->answer.len;
			}
			else if (status == SC_REGISTRY_UNAVAILABLE && tried > 1)
			{
				char	   *last = pstrdup(errbuf);

				snprintf(errbuf, errlen, "none of %d schema registry URLs answered; the last: %s",
						 tried, last);
				pfree(last);
			}
		}
	}
	PG_FINALLY();
	{
		sc_registry_transfer_free(t);
	}
	PG_END_TRY();

	pfree(t);
	pfree(urls);
	return status;
}

/* ----------------------------------------------------------------
 * JSON answers
 * ----------------------------------------------------------------
 */

static void
sc_registry_object_start(void *state)
{
	ScRegistryFields *f = state;

	if (f->depth++ == 0)
		f->top = JSON_TOKEN_OBJECT_START;
}

static void
sc_registry_array_start(void *state)
{
	ScRegistryFields *f = state;

	if (f->depth++ == 0)
		f->top = JSON_TOKEN_ARRAY_START;
}

static void
sc_registry_struct_end(void *state)
{
	ScRegistryFields *f = state;

	f->depth--;
}

static void
sc_registry_field_start(void *state, char *fname, bool isnull)
{
	ScRegistryFields *f = state;

	if (f->depth != 1 || f->top != JSON_TOKEN_OBJECT_START)
		return;
	f->field = fname;
	/* the lexer is at the value's first token */
	f->value_start = f->lex->token_start;
}

static void
sc_registry_field_end(void *state, char *fname, bool isnull)
{
	ScRegistryFields *f = state;

	if (f->depth != 1 || f->top != JSON_TOKEN_OBJECT_START)
		return;
	if (strcmp(fname, "references") == 0)
	{
		/* the lexer is one token past the value: its raw text */
		if (isnull)
			f->references = NULL;
		else if (f->value_start == NULL || *f->value_start != '[')
			f->references_bad = true;
		else
			f->references = pnstrdup(f->value_start,
									 f->lex->prev_token_terminator - f->value_start);
	}
	f->field = NULL;
	f->value_start = NULL;
}

static void
sc_registry_scalar(void *state, char *token, JsonTokenType tokentype)
{
	ScRegistryFields *f = state;
	bool		is_string = tokentype == JSON_TOKEN_STRING;
	bool		is_null = tokentype == JSON_TOKEN_NULL;

	if (f->depth == 0)
		f->top = tokentype;
	if (f->depth != 1 || f->field == NULL)
		return;

	if (strcmp(f->field, "schema") == 0)
	{
		f->schema = is_string ? token : NULL;
		f->schema_bad = !is_string;
	}
	else if (strcmp(f->field, "schemaType") == 0)
	{
		f->schema_type = is_string ? token : NULL;
		f->schema_type_bad = !is_string && !is_null;
	}
	else if (strcmp(f->field, "id") == 0)
	{
		f->id = tokentype == JSON_TOKEN_NUMBER ? token : NULL;
		f->id_bad = tokentype != JSON_TOKEN_NUMBER;
	}
	else if (strcmp(f->field, "message") == 0)
		f->message = is_string ? token : NULL;
	else if (strcmp(f->field, "error_code") == 0)
		f->error_code = tokentype == JSON_TOKEN_NUMBER ? token : NULL;
	else if (strcmp(f->field, "references") == 0 && !is_null)
		f->references_bad = true;
}

/*
 * What PostgreSQL's JSON parser would turn into an ERROR rather than an
 * error code, refused here first: nesting that would exhaust the stack
 * (check_stack_depth() in the parser), a NUL byte or bad UTF-8 (answers are
 * UTF-8), and, in a database whose encoding is not UTF8, any character
 * that is not ASCII (the parser converts \u escapes to the database
 * encoding and raises an ERROR when it cannot; raw bytes it passes
 * unconverted).
 */
static bool
sc_registry_prescan(const char *json, int len, char *errbuf, size_t errlen, const char *url)
{
	bool		utf8_db = GetDatabaseEncoding() == PG_UTF8;
	bool		in_string = false;
	int			depth = 0;
	int			i;

	if (!pg_verify_mbstr(PG_UTF8, json, len, true))
	{
		snprintf(errbuf, errlen, "schema registry %s: the answer is not valid UTF-8", url);
		return false;
	}
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) json[i];

		if (c >= 0x80 && !utf8_db)
			goto not_ascii;
		if (in_string)
		{
			if (c == '"')
				in_string = false;
			else if (c == '\\' && i + 1 < len)
			{
				i++;
				if (json[i] == 'u' && i + 4 < len && !utf8_db)
				{
					char		hex[5];

					memcpy(hex, json + i + 1, 4);
					hex[4] = '\0';
					if (strtol(hex, NULL, 16) > 0x7f)
						goto not_ascii;
				}
			}
		}
		else if (c == '"')
			in_string = true;
		else if (c == '{' || c == '[')
		{
			if (++depth > SC_REGISTRY_MAX_DEPTH)
			{
				snprintf(errbuf, errlen,
						 "schema registry %s: the answer nests deeper than %d levels",
						 url, SC_REGISTRY_MAX_DEPTH);
				return false;
			}
		}
		else if (c == '}' || c == ']')
			depth--;
	}
	return true;

not_ascii:
	snprintf(errbuf, errlen,
			 "schema registry %s: the answer has a character that is not ASCII, which only a database in encoding UTF8 takes (this one is %s)",
			 url, GetDatabaseEncodingName());
	return false;
}

/*
 * Parse an answer into f.  *parsed false, with errbuf saying why, when it
 * is not JSON.  json must stay until f is used (the lexer points into it).
 */
static void
sc_registry_parse(char *json, int len, ScRegistryFields *f, char *errbuf,
				  size_t errlen, const char *url, bool *parsed)
{
	JsonSemAction sem;
	JsonParseErrorType rc;

	memset(f, 0, sizeof(*f));
	f->top = JSON_TOKEN_INVALID;
	*parsed = false;
	if (!sc_registry_prescan(json, len, errbuf, errlen, url))
		return;

	memset(&sem, 0, sizeof(sem));
	sem.semstate = f;
	sem.object_start = sc_registry_object_start;
	sem.object_end = sc_registry_struct_end;
	sem.array_start = sc_registry_array_start;
	sem.array_end = sc_registry_struct_end;
	sem.object_field_start = sc_registry_field_start;
	sem.object_field_end = sc_registry_field_end;
	sem.scalar = sc_registry_scalar;

	f->lex = makeJsonLexContextCstringLen(json, len, PG_UTF8, true);
	rc = pg_parse_json(f->lex, &sem);
	if (rc != JSON_SUCCESS)
	{
		char	   *detail = json_errdetail(rc, f->lex);

		sc_registry_clean_text(detail, SC_REGISTRY_MAX_MESSAGE);
		snprintf(errbuf, errlen, "schema registry %s: the answer is not JSON: %s", url, detail);
		return;
	}
	*parsed = true;
}

/* An id as the registry gives it, or false. */
static bool
sc_registry_parse_id(const char *text, int32 *id)
{
	char	   *end;
	long		v;

	if (text == NULL || !isdigit((unsigned char) text[0]))
		return false;
	errno = 0;
	v = strtol(text, &end, 10);
	if (errno != 0 || *end != '\0' || v > PG_INT32_MAX)
		return false;
	*id = (int32) v;
	return true;
}

/* ----------------------------------------------------------------
 * The requests
 * ----------------------------------------------------------------
 */

/*
 * Work happens in a memory context of its own, a child of the caller's, and
 * only the results are copied out; on an ERROR it goes with the caller's.
 */
static MemoryContext
sc_registry_work_context(void)
{
	return AllocSetContextCreate(CurrentMemoryContext, "streamcube registry",
								 ALLOCSET_DEFAULT_SIZES);
}

ScRegistryStatus
sc_registry_schema(const ScRegistryConn *conn, int32 id, char **type, char **schema,
				   char **references, char *errbuf, size_t errlen)
{
	MemoryContext callercxt = CurrentMemoryContext;
	MemoryContext workcxt;
	ScRegistryStatus status;
	ScRegistryFields f;
	char	   *answer;
	int			answer_len;
	char		path[64];
	char	   *url;
	bool		parsed;

	*type = NULL;
	*schema = NULL;
	*references = NULL;
	if (id < 0)
	{
		snprintf(errbuf, errlen, "schema id %d does not exist: ids are not negative", id);
		return SC_REGISTRY_NOT_FOUND;
	}
	snprintf(path, sizeof(path), "/schemas/ids/%d", id);

	workcxt = sc_registry_work_context();
	MemoryContextSwitchTo(workcxt);
	status = sc_registry_get(conn, path, &answer, &answer_len, errbuf, errlen);
	if (status == SC_REGISTRY_OK)
	{
		url = psprintf("%s (schema id %d)", conn->urls, id);
		sc_registry_parse(answer, answer_len, &f, errbuf, errlen, url, &parsed);
		if (!parsed)
			status = SC_REGISTRY_REFUSED;
		else if (f.top != JSON_TOKEN_OBJECT_START || f.schema == NULL || f.schema_bad ||
				 f.schema_type_bad || f.references_bad)
		{
			snprintf(errbuf, errlen,
					 "schema registry %s: the answer is not a schema (an object with a string \"schema\", a string \"schemaType\" and an array \"references\")",
					 url);
			status = SC_REGISTRY_REFUSED;
		}
		else
		{
			MemoryContextSwitchTo(callercxt);
			*type = pstrdup(f.schema_type ? f.schema_type : "AVRO");
			*schema = pstrdup(f.schema);
			*references = pstrdup(f.references ? f.references : "[]");
		}
	}
	MemoryContextSwitchTo(callercxt);
	MemoryContextDelete(workcxt);
	sc_registry_mask(conn, errbuf, errlen);
	return status;
}

ScRegistryStatus
sc_registry_latest(const ScRegistryConn *conn, const char *subject, int32 *id,
				   char **type, char **schema, char *errbuf, size_t errlen)
{
	return sc_registry_version(conn, subject, 0, id, type, schema, errbuf, errlen);
}

/*
 * GET <url>/subjects/<subject>/versions/<version> (latest when version is
 * 0 or less): what a Protobuf schema's references name.
 */
ScRegistryStatus
sc_registry_version(const ScRegistryConn *conn, const char *subject, int32 version, int32 *id,
					char **type, char **schema, char *errbuf, size_t errlen)
{
	MemoryContext callercxt = CurrentMemoryContext;
	MemoryContext workcxt;
	ScRegistryStatus status;
	ScRegistryFields f;
	char	   *answer;
	int			answer_len;
	char	   *escaped;
	char	   *path;
	char	   *url;
	bool		parsed;
	int32		parsed_id = -1;

	*id = -1;
	*type = NULL;
	*schema = NULL;
	if (subject == NULL || subject[0] == '\0')
	{
		snprintf(errbuf, errlen, "no subject is named \"\"");
		return SC_REGISTRY_NOT_FOUND;
	}

	workcxt = sc_registry_work_context();
	MemoryContextSwitchTo(workcxt);

	/* every byte but letters, digits and -._~ percent-encoded; "/" too */
	escaped = curl_easy_escape(NULL, subject, 0);
	if (escaped == NULL)
	{
		MemoryContextSwitchTo(callercxt);
		MemoryContextDelete(workcxt);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory in libcurl")));
	}
	path = version > 0 ? psprintf("/subjects/%s/versions/%d", escaped, version)
		: psprintf("/subjects/%s/versions/latest", escaped);
	curl_free(escaped);

	status = sc_registry_get(conn, path, &answer, &answer_len, errbuf, errlen);
	if (status == SC_REGISTRY_OK)
	{
		url = psprintf("%s (subject \"%s\")", conn->urls, subject);
		sc_registry_parse(answer, answer_len, &f, errbuf, errlen, url, &parsed);
		if (!parsed)
			status = SC_REGISTRY_REFUSED;
		else if (f.top != JSON_TOKEN_OBJECT_START || f.schema == NULL || f.schema_bad ||
				 f.schema_type_bad || !sc_registry_parse_id(f.id, &parsed_id))
		{
			snprintf(errbuf, errlen,
					 "schema registry %s: the answer is not a subject's version (an object with a number \"id\", a string \"schema\" and a string \"schemaType\")",
					 url);
			status = SC_REGISTRY_REFUSED;
		}
		else
		{
			MemoryContextSwitchTo(callercxt);
			*id = parsed_id;
			*type = pstrdup(f.schema_type ? f.schema_type : "AVRO");
			*schema = pstrdup(f.schema);
		}
	}
	MemoryContextSwitchTo(callercxt);
	MemoryContextDelete(workcxt);
	sc_registry_mask(conn, errbuf, errlen);
	return status;
}

ScRegistryStatus
sc_registry_check(const ScRegistryConn *conn, char *errbuf, size_t errlen)
{
	MemoryContext callercxt = CurrentMemoryContext;
	MemoryContext workcxt;
	ScRegistryStatus status;
	ScRegistryFields f;
	char	   *answer;
	int			answer_len;
	bool		parsed;

	workcxt = sc_registry_work_context();
	MemoryContextSwitchTo(workcxt);
	status = sc_registry_get(conn, "/subjects", &answer, &answer_len, errbuf, errlen);
	if (status == SC_REGISTRY_NOT_FOUND)
	{
		/* no list of subjects: not the registry API, or not its path */
		char	   *last = pstrdup(errbuf);

		snprintf(errbuf, errlen, "%s: is this the registry's API, e.g. http://host:port/apis/ccompat/v7?",
				 last);
		status = SC_REGISTRY_REFUSED;
	}
	else if (status == SC_REGISTRY_OK)
	{
		sc_registry_parse(answer, answer_len, &f, errbuf, errlen, conn->urls, &parsed);
		if (!parsed)
			status = SC_REGISTRY_REFUSED;
		else if (f.top != JSON_TOKEN_ARRAY_START)
		{
			snprintf(errbuf, errlen,
					 "schema registry %s: the answer to /subjects is not a list of subjects",
					 conn->urls);
			status = SC_REGISTRY_REFUSED;
		}
	}
	MemoryContextSwitchTo(callercxt);
	MemoryContextDelete(workcxt);
	sc_registry_mask(conn, errbuf, errlen);
	return status;
}
