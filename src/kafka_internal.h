/*-------------------------------------------------------------------------
 *
 * kafka_internal.h
 *		What kafka.c gives kafka_consumer.c: the events librdkafka's
 *		callbacks collect, and the configuration, handles and metadata a
 *		consumer is made of.
 *
 * Only kafka*.c include this file: it includes librdkafka, which the rest
 * of streamcube never sees (kafka.h is their interface).  Calls go one way,
 * from kafka_consumer.c to kafka.c; test/tools/layers checks that.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_KAFKA_INTERNAL_H
#define SC_KAFKA_INTERNAL_H

#include <librdkafka/rdkafka.h>

#include "kafka.h"

/* librdkafka reports log levels as syslog levels. */
#define SC_SYSLOG_ERR 3
#define SC_SYSLOG_WARNING 4
#define SC_SYSLOG_NOTICE 5

/* Events collected by librdkafka callbacks, reported later. */
#define SC_KAFKA_MAX_EVENTS 16

typedef struct ScKafkaEvents
{
	int			nevents;
	int			dropped;
	int			levels[SC_KAFKA_MAX_EVENTS];	/* syslog levels */
	char		text[SC_KAFKA_MAX_EVENTS][SC_ERROR_LEN];
	bool		fatal;
	bool		topic_unknown;	/* the broker said the topic is unknown */
	bool		all_down;		/* every broker's connection went down */
	char		last_error[SC_ERROR_LEN];	/* as long as a slot's last_error */
} ScKafkaEvents;

/* kafka.c: collecting the events of librdkafka's callbacks, reporting them */
extern void sc_kafka_push_event(ScKafkaEvents *events, int level, const char *text);
extern void sc_kafka_flush_events(ScKafkaEvents *events, const char *what);

/* kafka.c: configurations and handles */
extern rd_kafka_conf_t *sc_kafka_conf_build(const ScKafkaConnInfo *conn, ScKafkaEvents *events,
											char *errbuf, size_t errlen);
extern bool sc_kafka_has_property(const ScKafkaConnInfo *conn, const char *name);
extern rd_kafka_t *sc_kafka_new_handle(rd_kafka_type_t type, rd_kafka_conf_t *conf,
									   char *errbuf, size_t errlen);

/* kafka.c: metadata through a client of the caller's */
extern List *sc_kafka_describe_with(rd_kafka_t *rk, ScKafkaEvents *events,
									const ScKafkaConnInfo *conn, const char *topic,
									bool with_watermarks, int timeout_ms,
									bool *topic_missing, char **cluster_id);
extern List *sc_kafka_describe_topics_with(rd_kafka_t *rk, ScKafkaEvents *events,
										   const ScKafkaConnInfo *conn, const ScTopicList *topics,
										   bool with_watermarks, int timeout_ms,
										   bool *topic_missing, char **cluster_id);

#endif							/* SC_KAFKA_INTERNAL_H */
