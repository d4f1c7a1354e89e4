/*-------------------------------------------------------------------------
 *
 * receiver_internal.h
 *		The state of a receiver worker, shared by its two rooms.
 *
 * A receiver is one process with one state (MyReceiver).  receiver.c is
 * its batch side: collect messages, commit a batch, the main loop.
 * receiver_control.c is its control side: the shared-memory slot, the
 * catalog (the cube, its assignment and positions, reloads, pauses), the
 * Kafka consumer's life (open, change, close, the checks of what Kafka
 * holds) and the watch on Kafka's health.  The batch side calls the
 * control side, never the other way round (test/tools/layers).
 *
 * Only receiver.c and receiver_control.c include this file.
 *
 *-------------------------------------------------------------------------
 */
#ifndef RECEIVER_INTERNAL_H
#define RECEIVER_INTERNAL_H

#include "streamcube.h"

#include "cube.h"
#include "ingest.h"
#include "storage/latch.h"

/*
 * Everything a receiver process knows: its slot, its cube and Kafka
 * consumer, its partitions with their positions, epochs, ends and stop
 * points, the batch it carries, and its figures for streamcube.consumers.
 */
typedef struct ScReceiver
{
	int			slotno;
	ScReceiverSlot *slot;
	int32		cube_id;
	char		replica_set[NAMEDATALEN];

	ScCube	   *cube;
	ScIngest   *ing;
	ScKafkaConnInfo *conn;
	ScKafkaConsumer *consumer;
	WaitEventSet *wait_set;		/* latch, postmaster, consumer's wake-up pipe */
	WaitEventSet *latch_set;	/* latch and postmaster only */
	bool		fetch_idle;		/* consumer opened with librdkafka's fetch defaults */
	bool		fetch_derived;	/* the open consumer's fetch settings are derived */
	TimestampTz last_message_at;	/* last batch collected, or the consumer opened */
	TimestampTz pace_since;		/* start of the count of batches below */
	int			pace_batches;	/* batches collected since pace_since */

	int			nparts;
	int32	   *parts;
	int		  **part_slot;		/* [topic number][Kafka partition] -> index in
								 * parts, -1 */
	int32	   *part_slot_len;	/* entries of part_slot[t]: max(partition) + 1 */
	int			part_slot_topics;	/* entries of part_slot: max(topic) + 1 */
	int64	   *positions;		/* committed: next offset to read */
	int64	   *epochs;			/* assignment epoch of each partition */
	int64	   *high;			/* last known high watermarks */
	int64	   *eof;			/* end of partition seen at this offset, -1 */
	int64	   *stops;			/* first offset not to read (a stop point), -1 */
	int64	   *next_ts;		/* Kafka timestamp of the first message held, -1 */
	int64	   *last_ts;		/* Kafka timestamp of the last message committed, -1 */
	TimestampTz *caught_up_at;	/* last seen with nothing left to read; 0 */
	bool		stop_told;		/* told the catalog that its partitions are there */
	long		prepare_backoff_ms; /* waiting for what a batch needs (a registry); 0 */
	long		row_backoff_ms; /* a batch waiting to write the cube's row; 0 */
	int64		assignment_epoch;	/* the cube's, when the assignment was read */
	TimestampTz assignment_changed_at;	/* last change of the consumer's partitions */
	int			known_partitions;	/* partitions the cube knows (checkpoints) */

	ScKafkaMessage *messages;
	int			maxmessages;
	int			carried;		/* messages kept from the last batch, at the front */
	char		group[320];		/* the consumer's group.id */
	int64		current_window;
	bool		table_changed;	/* relcache invalidation of the cube's table */
	MemoryContext cube_cxt;		/* holds cube; replaced when the table changes */
	MemoryContext conn_cxt;		/* holds conn; replaced when the cluster changes */
	TimestampTz metadata_at;	/* last look at the topic's partition count */
	TimestampTz contact_at;		/* Kafka last answered: a fetch, a probe; 0 */
	TimestampTz disconnected_since; /* Kafka stopped answering; 0 while it does */
	TimestampTz paused_probe_at;	/* a paused receiver's last look at Kafka's ends */
	TimestampTz topic_checked_at;	/* last look after "unknown topic" */
	bool		topic_gone;		/* the consumer's topic was deleted */
	int			topic_partitions;	/* of all the cube's topics; -1 unknown */
	int		   *topic_counts;	/* of each topic, by number; -1 unknown */
	int			ntopic_counts;	/* of topic_counts; 0: none known */
	uint64		tombstones_skipped;
	uint64		rows_direct;
	uint64		rows_copy;
	uint64		batches;

	/* throughput */
	uint64		rows_total;
	uint64		rate_rows;
	TimestampTz rate_since;
	double		rows_per_sec;
	TimestampTz last_batch_at;
} ScReceiver;

/* The receiver of this process (receiver_control.c). */
extern ScReceiver *MyReceiver;

/*
 * The index in MyReceiver->parts of a source partition; -1 if none.  Every
 * message asks, several times: a table per topic indexed by Kafka
 * partition (a negative source has a topic number past any).
 */
static inline int
sc_receiver_part_index(int32 source)
{
	uint32		t = (uint32) source >> SC_SOURCE_PARTITION_BITS;
	int32		p = sc_source_kafka_partition(source);

	if (t < (uint32) MyReceiver->part_slot_topics && p < MyReceiver->part_slot_len[t])
		return MyReceiver->part_slot[t][p];
	return -1;
}

/* receiver_control.c: the shared-memory slot */
extern void sc_receiver_set_state(ScReceiverState state);
extern bool sc_receiver_wanted_elsewhere(void);
extern void sc_receiver_detach(int code, Datum arg);
extern void sc_receiver_publish(void);
extern void sc_receiver_publish_stats(void);
extern int	sc_receiver_count_partitions(int timeout_ms);
extern void sc_receiver_warn(const char *message);

/* receiver_control.c: the catalog */
extern void sc_receiver_begin(const char *activity);
extern void sc_receiver_commit(void);
extern void sc_receiver_relcache_cb(Datum arg, Oid relid);
extern bool sc_receiver_load(void);
extern void sc_receiver_reload(uint32 config_version);
extern void sc_receiver_apply_assignment(bool final);
extern bool sc_receiver_begin_work(const char *activity);
extern bool sc_receiver_pause_after(ErrorData *edata);
extern bool sc_receiver_past_stop(int p, const ScKafkaMessage *m);
extern bool sc_receiver_at_stop(void);
extern void sc_receiver_tell_stop(void);

/* receiver_control.c: the Kafka consumer and Kafka's health */
extern bool sc_receiver_open_consumer(void);
extern void sc_receiver_close_consumer(void);
extern bool sc_receiver_check_kafka(ScKafkaConsumer *via);
extern void sc_receiver_follow_group(void);
extern void sc_receiver_reached_kafka(TimestampTz now);
extern void sc_receiver_watch_health(void);
extern void sc_receiver_paused_probe(void);

#endif							/* RECEIVER_INTERNAL_H */
