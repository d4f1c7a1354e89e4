/*-------------------------------------------------------------------------
 *
 * ingest.h
 *		The hot path: Kafka messages in, rows and dead letters out.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SC_INGEST_H
#define SC_INGEST_H

#include "cube.h"
#include "kafka.h"

typedef struct ScIngest ScIngest;

/* What one batch did. */
typedef struct ScBatchOutcome
{
	int			cut;			/* messages [0, cut) are done; the rest wait */
	int64		rows;			/* rows inserted */
	int64		rows_direct;	/* lines the direct path wrote (a bad line's range may count) */
	int64		rows_copy;		/* lines the COPY fallback wrote */
	int			dead_letters;	/* messages sent to streamcube.dead_letters */
	int			tombstones_skipped; /* NULL values skipped (option tombstones) */
	int			replayed_skipped;	/* re-read messages already in a sealed window */
	bool		skip_used;		/* the skip_bad_message message was met */
	bool		paused;			/* a bad message under policy "pause" */
	int32		bad_partition;
	int64		bad_offset;
	char	   *bad_error;
} ScBatchOutcome;

extern ScIngest *sc_ingest_create(ScCube *cube, bool (*wanted_elsewhere) (void));
extern void sc_ingest_set_cube(ScIngest *ing, ScCube *cube);
extern void sc_ingest_batch(ScIngest *ing, ScKafkaMessage *messages, int n,
							ScBatchOutcome *outcome);
extern void sc_ingest_prepare_windows(ScIngest *ing, int64 now);
extern void sc_ingest_end_batch(ScIngest *ing, bool committed);
extern bool sc_ingest_prepare(ScIngest *ing, const ScKafkaMessage *messages, int n, char **why);
extern bool sc_ingest_ready(ScIngest *ing, const ScKafkaMessage *messages, int n);
extern void sc_ingest_forget_windows(ScIngest *ing);
extern void sc_ingest_table_changed(ScIngest *ing);
extern void sc_ingest_relcache_event(ScIngest *ing, Oid relid);
extern bool sc_ingest_invalidation_due(ScIngest *ing);
extern void sc_ingest_send_invalidation(ScIngest *ing);
extern int	sc_ingest_missing_windows(ScIngest *ing);
extern void sc_ingest_create_windows(ScIngest *ing);

#endif							/* SC_INGEST_H */
