/*-------------------------------------------------------------------------
 *
 * kafka.h
 *		streamcube's narrow interface to librdkafka.
 *
 * kafka*.c are the only files that include librdkafka: kafka.c the
 * configuration, handles and metadata, kafka_consumer.c the consumer.
 * Everything they hand out is either a plain C value or an opaque handle,
 * so the rest of the extension never sees a librdkafka type and never runs
 * on a librdkafka thread.  Functions that talk to the network take a
 * timeout and never block longer than it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_KAFKA_H
#define SC_KAFKA_H

#include "nodes/pg_list.h"

/*
 * A source partition: one partition of one of a cube's topics, as the
 * catalog keys it (consume_positions, checkpoints, assignments and the
 * rest) and as everything above this layer numbers it:
 * (topic_no << SC_SOURCE_PARTITION_BITS) | partition, where topic_no is the
 * topic's place in the cube's ScTopicList.  A cube's first topic is topic
 * 0, so its source partitions are its Kafka partitions and the catalog of
 * a cube of one topic is what it always was.  kafka*.c turn source
 * partitions into librdkafka's (topic, partition) pairs and back.
 */
/* The characters a Kafka topic name is made of (Kafka's rule; 1 to 249 of them). */
#define SC_KAFKA_TOPIC_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"

#define SC_SOURCE_PARTITION_BITS 20
#define SC_SOURCE_MAX_PARTITIONS (1 << SC_SOURCE_PARTITION_BITS)
#define SC_SOURCE_MAX_TOPICS (1 << (31 - SC_SOURCE_PARTITION_BITS))

static inline int32
sc_source_partition(int topic_no, int32 partition)
{
	return ((int32) topic_no << SC_SOURCE_PARTITION_BITS) | partition;
}

static inline int
sc_source_topic_no(int32 source)
{
	return source >> SC_SOURCE_PARTITION_BITS;
}

static inline int32
sc_source_kafka_partition(int32 source)
{
	return source & (SC_SOURCE_MAX_PARTITIONS - 1);
}

/*
 * The same in SQL, for the journals a user reads, which name a partition by
 * topic and Kafka partition: the topic of source partition s of cube c
 * (both SQL expressions) and its partition in that topic.
 */
#define SC_SQL_SOURCE_TOPIC(c, s) \
	"(SELECT t.topic FROM streamcube.cube_topics t WHERE t.cube_id = " c " AND t.topic_no = (" s ") >> 20)"
#define SC_SQL_SOURCE_PARTITION(s) "((" s ") & 1048575)"
StaticAssertDecl(SC_SOURCE_PARTITION_BITS == 20, "SC_SQL_SOURCE_* spell the bits out");

/*
 * The topics a cube reads, by topic number.  A topic taken out of the cube
 * keeps its number (removed[t]; removed NULL: none is): it is never
 * described, and no partition of it is assigned.
 */
typedef struct ScTopicList
{
	int			n;
	char	  **names;
	bool	   *removed;
} ScTopicList;

static inline bool
sc_topic_removed(const ScTopicList *topics, int t)
{
	return topics->removed != NULL && t >= 0 && t < topics->n && topics->removed[t];
}

/* One librdkafka property, as stored in streamcube.clusters. */
typedef struct ScKafkaProperty
{
	char	   *name;
	char	   *value;
} ScKafkaProperty;

/* How to reach one cluster. */
typedef struct ScKafkaConnInfo
{
	const char *cluster_name;	/* for messages only */
	const char *bootstrap_servers;
	List	   *properties;		/* of ScKafkaProperty * */
} ScKafkaConnInfo;

/* One partition as the cluster's metadata describes it. */
typedef struct ScKafkaPartitionInfo
{
	char	   *topic;
	int32		partition;
	int32		source;			/* its source partition: of topic 0, unless
								 * described among a cube's topics */
	int32		leader;			/* broker id, -1 when leaderless */
	int64		low_watermark;
	int64		high_watermark;
} ScKafkaPartitionInfo;

/* A consumed message; payload points into librdkafka's buffer. */
typedef struct ScKafkaMessage
{
	int32		partition;		/* a source partition */
	int64		offset;
	const char *payload;		/* NULL for a tombstone (a NULL value) */
	size_t		len;
	const char *key;			/* NULL when the message has no key */
	size_t		key_len;
	int64		timestamp;		/* milliseconds since 1970; -1 when none */
	char		timestamp_type; /* 'C' CreateTime, 'L' LogAppendTime, 0 none */
	bool		eof;			/* no message: the partition ends at offset */
	void	   *handle;			/* owned by kafka_consumer.c */
} ScKafkaMessage;

/* What a poll saw besides messages. */
typedef enum ScKafkaPollStatus
{
	SC_KAFKA_OK,
	SC_KAFKA_OUT_OF_RANGE,		/* a needed offset is no longer in Kafka */
	SC_KAFKA_TOPIC_UNKNOWN,		/* the broker does not know the topic (now) */
	SC_KAFKA_FATAL				/* the consumer cannot go on */
} ScKafkaPollStatus;

typedef struct ScKafkaPollResult
{
	ScKafkaPollStatus status;
	int32		partition;		/* source partition, for SC_KAFKA_OUT_OF_RANGE */
	char		message[512];
} ScKafkaPollResult;

typedef struct ScKafkaConsumer ScKafkaConsumer;

/*
 * Every librdkafka property is in one class (kafka_properties.h), which
 * decides who may set it in a cluster.  A name outside the table is
 * refused: a newer librdkafka cannot open a hole unnoticed.
 */
typedef enum ScPropertyClass
{
	SC_PROP_UNKNOWN = 0,		/* not in the table: refused */
	SC_PROP_ALLOWED,			/* streamcube_admin */
	SC_PROP_SECRET,				/* streamcube_admin; stored apart and masked */
	SC_PROP_READS_FILE,			/* superuser or pg_read_server_files */
	SC_PROP_RUNS_PROGRAM,		/* superuser or pg_execute_server_program */
	SC_PROP_LOADS_CODE,			/* superuser */
	SC_PROP_MANAGED,			/* set by streamcube: refused */
	SC_PROP_NOT_TEXT,			/* a pointer or callback: refused */
	SC_PROP_PRODUCER			/* producer only; streamcube only consumes: refused */
} ScPropertyClass;

extern const char *sc_kafka_version(void);
extern ScPropertyClass sc_kafka_property_class(const char *name, const char *value);
extern ScPropertyClass sc_kafka_config_class(List *properties);
extern const char *sc_kafka_property_class_name(ScPropertyClass cls);
extern bool sc_kafka_property_masked(const char *name);
extern bool sc_kafka_registry_property(const char *name);
extern const char *sc_kafka_property_canonical(const char *name);
extern List *sc_kafka_property_other_names(const char *name);
extern List *sc_kafka_property_names(void);
extern bool sc_kafka_check_property(const char *name, const char *value,
									char *errbuf, size_t errlen);
extern bool sc_kafka_check_config(List *properties, char *errbuf, size_t errlen);

extern void sc_kafka_consumer_commit_async(ScKafkaConsumer *c, int n,
										   const int32 *sources, const int64 *positions);
extern const char *sc_kafka_source_topic(const ScTopicList *topics, int32 source);
extern void sc_kafka_offsets_at(const ScKafkaConnInfo *conn, const ScTopicList *topics, int n,
								const int32 *sources, const int64 *ms, int64 *offsets,
								int timeout_ms);
extern TimestampTz sc_kafka_ms_timestamptz(int64 ms);
extern void sc_kafka_timestamps_at(const ScKafkaConnInfo *conn, const ScTopicList *topics, int n,
								   const int32 *sources, const int64 *offsets, int64 *ms);

extern List *sc_kafka_describe_topics(const ScKafkaConnInfo *conn, const ScTopicList *topics,
									  bool with_watermarks, int timeout_ms,
									  bool *topic_missing, char **cluster_id);
extern ScKafkaConsumer *sc_kafka_consumer_create(const ScKafkaConnInfo *conn,
												 const char *group_id,
												 int queue_kbytes, int batch_max_ms);
extern int	sc_kafka_consumer_batch_hold_ms(ScKafkaConsumer *consumer, int batch_max_ms);
extern void sc_kafka_consumer_fetch_settings(ScKafkaConsumer *consumer, int *wait_ms,
											 int *min_bytes, bool *derived);
extern List *sc_kafka_consumer_describe(ScKafkaConsumer *consumer,
										const ScKafkaConnInfo *conn, const ScTopicList *topics,
										int timeout_ms, bool *topic_missing,
										char **cluster_id);
extern void sc_kafka_consumer_assign(ScKafkaConsumer *consumer, const ScTopicList *topics,
									 int n, const int32 *sources,
									 const int64 *offsets);
extern bool sc_kafka_consumer_change(ScKafkaConsumer *consumer, const ScTopicList *topics,
									 bool gained, int n,
									 const int32 *sources, const int64 *offsets,
									 char *errbuf, size_t errlen);
extern int	sc_kafka_consumer_wait_fd(ScKafkaConsumer *consumer);
extern int	sc_kafka_consumer_poll(ScKafkaConsumer *consumer, ScKafkaMessage *messages,
								   int max_messages, ScKafkaPollResult *result);
extern void sc_kafka_messages_release(ScKafkaMessage *messages, int n);
extern int	sc_kafka_message_header(const ScKafkaMessage *message, int index,
									const char **name, const char **value, size_t *size);
extern void sc_kafka_consumer_set_paused(ScKafkaConsumer *consumer, bool paused);
extern int64 sc_kafka_consumer_high_watermark(ScKafkaConsumer *consumer, int32 source);
extern int64 sc_kafka_consumer_query_high_watermark(ScKafkaConsumer *consumer, int32 source,
													 int timeout_ms);
extern bool sc_kafka_consumer_take_all_down(ScKafkaConsumer *consumer);
extern int	sc_kafka_consumer_topic_partitions(ScKafkaConsumer *consumer, int timeout_ms,
											   int *each, int neach);
extern void sc_kafka_consumer_report(ScKafkaConsumer *consumer);
extern void sc_kafka_consumer_destroy(ScKafkaConsumer *consumer);

#endif							/* SC_KAFKA_H */
