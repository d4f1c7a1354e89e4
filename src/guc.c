/*-------------------------------------------------------------------------
 *
 * guc.c
 *		The streamcube.* configuration settings.
 *
 * Every setting lives under the "streamcube." prefix, which is reserved so
 * that a typo in postgresql.conf is reported instead of silently ignored.
 * docs/configuration.md describes each one; keep the two in step.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "utils/guc.h"

char	   *sc_database = NULL;
int			sc_max_receivers = 16;
int			sc_max_receiver_partitions = 1024;
int			sc_launcher_naptime_ms = 5000;
int			sc_kafka_timeout_ms = 5000;
int			sc_batch_max_rows = 20000;
int			sc_rollup_batch_max_rows = 100000;
int			sc_batch_max_ms = 50;
int			sc_batch_max_kbytes = 16384;
int			sc_fetch_queue_kbytes = 16384;
int			sc_restart_max_delay_ms = 60000;
int			sc_batch_max_windows = 8;
int			sc_metadata_interval_ms = 30000;
bool		sc_direct_insert = true;
bool		sc_history_buckets = true;

void
sc_guc_define(void)
{
	DefineCustomStringVariable("streamcube.database",
							   "Database in which the launcher runs and streamcube can be installed.",
							   NULL,
							   &sc_database,
							   "postgres",
							   PGC_POSTMASTER,
							   0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("streamcube.max_receivers",
							"Maximum number of receiver workers (one per cube and replica set).",
							"Each receiver is a background worker: max_worker_processes must leave room for them.",
							&sc_max_receivers,
							16, 1, 1024,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("streamcube.max_receiver_partitions",
							"Maximum number of Kafka partitions one receiver consumes.",
							"Each receiver slot keeps this many partitions' positions and watermarks in shared memory (24 bytes each). "
							"A replica set with more partitions of a cube does not start, and says so.",
							&sc_max_receiver_partitions,
							1024, 1, 1000000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("streamcube.launcher_naptime",
							"Interval between two reconciliations of the launcher when nothing wakes it.",
							NULL,
							&sc_launcher_naptime_ms,
							5000, 100, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("streamcube.kafka_timeout",
							"Upper bound for one synchronous Kafka request made from SQL (metadata, watermarks).",
							NULL,
							&sc_kafka_timeout_ms,
							5000, 100, 600 * 1000,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("streamcube.batch_max_rows",
							"Maximum number of messages a receiver commits in one transaction.",
							NULL,
							&sc_batch_max_rows,
							20000, 1, 1000000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("streamcube.rollup_batch_max_rows",
							"Maximum number of messages a receiver of a cube with roll-ups commits in one transaction.",
							"A batch appends one partial row per group it holds to a roll-up: when messages wait "
							"(catch-up), larger batches write fewer. batch_max_ms still closes a batch of a "
							"live stream. The larger of this and streamcube.batch_max_rows applies.",
							&sc_rollup_batch_max_rows,
							100000, 1, 1000000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("streamcube.batch_max_ms",
							"Longest time a receiver waits to fill a batch before committing it.",
							NULL,
							&sc_batch_max_ms,
							50, 1, 60000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("streamcube.batch_max_bytes",
							"Maximum payload volume a receiver commits in one transaction.",
							NULL,
							&sc_batch_max_kbytes,
							16384, 64, 1024 * 1024,
							PGC_SIGHUP,
							GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("streamcube.fetch_queue_size",
							"Maximum volume of messages librdkafka prefetches for one receiver.",
							"Sets queued.max.messages.kbytes of each receiver's consumer; read when a receiver starts.",
							&sc_fetch_queue_kbytes,
							16384, 1024, 2097151,
							PGC_SIGHUP,
							GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("streamcube.restart_max_delay",
							"Longest back-off before the launcher restarts a receiver that failed.",
							"The delay starts at one second and doubles after each consecutive failure.",
							&sc_restart_max_delay_ms,
							60000, 1000, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("streamcube.batch_max_windows",
							"Maximum number of new windows (partitions) one receiver batch may create.",
							"Messages that need more wait for the next batch; nothing is lost.",
							&sc_batch_max_windows,
							8, 1, 1000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("streamcube.metadata_interval",
							"How often a receiver asks Kafka how many partitions its cube's topics have, and which topics its pattern matches.",
							"Partitions added to a topic are noticed within this time, and assigned or shown as unassigned according to the cube's option new_partitions; topics created that a cube's pattern matches are read from their first offset.",
							&sc_metadata_interval_ms,
							30000, 1000, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("streamcube.direct_insert",
							 "Receivers form rows themselves instead of going through COPY.",
							 "Rows into sealed windows, and into partitions with triggers or generated columns, go through COPY either way.",
							 &sc_direct_insert,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("streamcube.history_buckets",
							 "A window of history gets the partition of its whole compaction bucket.",
							 "When a receiver creates a window whose bucket of the cube's finest compaction level has ended (all of it due for sealing) and holds no window yet, one partition is made for the bucket instead of one per window, sealed in one step and never compacted again.",
							 &sc_history_buckets,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	MarkGUCPrefixReserved("streamcube");
}
