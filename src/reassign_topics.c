/*-------------------------------------------------------------------------
 *
 * reassign_topics.c
 *		Partitions and topics added to a cube, and topics taken out of it,
 *		assigned by the steps of a reassignment (reassign_internal.h).
 *
 * A receiver that sees a topic grow, or its cube's pattern match a new
 * topic, deals the new partitions to the cube's replica sets
 * (sc_reassign_adopt_partitions).  streamcube_alter_cube changing a cube's
 * topics (sc_reassign_topics) takes the partitions of the topics it takes
 * out from their replica sets as streamcube_reassign() does (pause: their
 * receivers' batch in flight commits, and none of theirs after; merge:
 * their positions are kept) and deals those of the topics it adds, or puts
 * back, where they stopped or from Kafka's first offset.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "catalog/pg_type.h"
#include "cube.h"
#include "cube_catalog.h"
#include "executor/spi.h"
#include "kafka.h"
#include "miscadmin.h"
#include "reassign.h"
#include "reassign_internal.h"
#include "utils/timestamp.h"

/*
 * The replica sets of an assignment (String, by name), and *load, how
 * many partitions each holds: what new partitions are dealt to.
 */
static List *
sc_deal_sets(int32 cube_id, List *assigned, int **load)
{
	List	   *sets = NIL;
	List	   *placed = NIL;
	ListCell   *lc;

	/* A set placed on a node keeps what it had (placement.c): none for it. */
	if (sc_catalog_has_column("placement_catalog", "replica_set"))
	{
		Oid			t = INT4OID;
		Datum		v = Int32GetDatum(cube_id);

		sc_catalog_exec("SELECT replica_set FROM streamcube.placement_catalog WHERE cube_id = $1",
						1, &t, &v, NULL, true, 0);
		for (uint64 i = 0; i < SPI_processed; i++)
			placed = lappend(placed, makeString(pstrdup(SPI_getvalue(SPI_tuptable->vals[i],
																	 SPI_tuptable->tupdesc, 1))));
	}
	foreach(lc, assigned)
		if (!list_member(sets, makeString(((ScAssigned *) lfirst(lc))->replica_set)) &&
			!list_member(placed, makeString(((ScAssigned *) lfirst(lc))->replica_set)))
			sets = lappend(sets, makeString(((ScAssigned *) lfirst(lc))->replica_set));
	list_sort(sets, sc_string_node_cmp);
	*load = palloc0(sizeof(int) * Max(list_length(sets), 1));
	foreach(lc, assigned)
	{
		ListCell   *sc;

		foreach(sc, sets)
			if (strcmp(strVal(lfirst(sc)), ((ScAssigned *) lfirst(lc))->replica_set) == 0)
				(*load)[foreach_current_index(sc)]++;
	}
	return sets;
}

/*
 * The topics of a cube with replica sets placed on nodes stay as they are:
 * a node reads the partitions it was handed, of the topic it was given.
 */
static void
sc_reassign_refuse_topics_placed(ScCube *cube)
{
	if (!sc_catalog_has_column("placement_catalog", "replica_set"))
		return;
	sc_catalog_exec("SELECT replica_set FROM streamcube.placement_catalog WHERE cube_id = $1 LIMIT 1",
					1, (Oid[]) {INT4OID}, (Datum[]) {Int32GetDatum(cube->cube_id)}, NULL, true, 1);
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cube %s has a replica set placed on a node: its topics cannot change", cube->qualified),
				 errdetail("Replica set \"%s\" reads its partitions on a node (streamcube.placements).",
						   SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)),
				 errhint("Keep the cube's topics, or make a new cube.")));
}

/*
 * Partition k to the least loaded replica set (fewest partitions, then by
 * name): a move from nobody, and an entry of the new assignment.
 */
static ScMove *
sc_deal(ScReassign *r, List *sets, int *load, const ScKafkaPartitionInfo *k)
{
	ScMove	   *m = palloc0(sizeof(ScMove));
	ScAssigned *a = palloc(sizeof(ScAssigned));
	int			best = 0;

	for (int i = 1; i < list_length(sets); i++)
		if (load[i] < load[best])
			best = i;
	load[best]++;
	m->partition = k->source;
	m->to = strVal(list_nth(sets, best));
	m->low_watermark = Max(k->low_watermark, 0);
	r->moves = lappend(r->moves, m);
	a->partition = k->source;
	a->replica_set = m->to;
	r->new = lappend(r->new, a);
	return m;
}

/*
 * A receiver saw a topic grow, or its cube's pattern match new topics
 * (new_topics, String nodes; kafka describes them numbered after the
 * cube's others).  The new topics become the cube's (streamcube.topics);
 * every partition of theirs, and under option new_partitions = assign
 * every partition of the cube's other topics it never knew, goes to the
 * least loaded replica set of the cube (fewest partitions, then by name),
 * from Kafka's first offset, and is journalled; in the caller's transaction, which holds
 * nothing of the cube before (the row, lock 2, is taken here).  Returns
 * how many were assigned, or -1 when the cube's row changed since the
 * caller read the cube (or the cube is gone): the caller reads it again,
 * and tries later.  Receivers
 * of the cube may all notice together: the cube's row serialises them,
 * and the later ones find nothing to do.
 */
int
sc_reassign_adopt_partitions(ScCube *cube, List *kafka, List *new_topics)
{
	ScReassign	r = {0};
	List	   *known = NIL;
	List	   *sets;
	int		   *load;
	int			adopted = 0;
	int			old_topics = cube->topics.n;
	ScCube		with_new;
	ListCell   *lc;

	if (!cube->assign_new_partitions && new_topics == NIL)
		return 0;
	/* the caller's cube keeps its topics until it reads the committed ones */
	with_new = *cube;
	cube = &with_new;

	sc_reassign_init(&r, cube, "new_partitions");

	SPI_connect();
	{
		Oid			t = INT4OID;
		Datum		v = Int32GetDatum(cube->cube_id);
		bool		isnull;

		sc_catalog_exec("SELECT config_version FROM streamcube.cubes WHERE cube_id = $1 "
						"FOR NO KEY UPDATE",
						1, &t, &v, NULL, false, 0);
		/* gone, or changed since the caller read it: it reads it again first */
		if (SPI_processed == 0 ||
			DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
										&isnull)) != cube->config_version)
		{
			SPI_finish();
			return -1;
		}
		sc_catalog_exec("SELECT partition FROM streamcube.checkpoints WHERE cube_id = $1",
						1, &t, &v, NULL, false, 0);
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			known = lappend_int(known, DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i],
																   SPI_tuptable->tupdesc, 1, &isnull)));
		}
	}
	r.old = sc_reassign_read_assignment(cube->cube_id);
	sets = sc_deal_sets(cube->cube_id, r.old, &load);
	if (sets == NIL)
	{
		SPI_finish();
		return 0;				/* nobody consumes the cube: nothing to join */
	}

	/* A pattern's new topics: numbered after the others, as kafka describes them. */
	if (new_topics != NIL)
		sc_topics_add(cube, new_topics);

	r.new = list_copy(r.old);
	foreach(lc, kafka)
	{
		ScKafkaPartitionInfo *k = lfirst(lc);
		ScMove	   *m;

		/* known, or a topic's new partition while new_partitions = ignore */
		if (list_member_int(known, k->source) ||
			(!cube->assign_new_partitions && sc_source_topic_no(k->source) < old_topics))
			continue;
		m = sc_deal(&r, sets, load, k);
		m->offset = Max(k->low_watermark, 0);
		m->held_at = GetCurrentTimestamp();
		adopted++;
	}
	if (adopted > 0)
	{
		bool		isnull;

		sc_catalog_exec("SELECT pg_catalog.nextval('streamcube.reassign_ids'::pg_catalog.regclass)",
						0, NULL, NULL, NULL, false, 0);
		r.id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		r.old_json = sc_assignment_json(cube, r.old, NIL);
		r.new_json = sc_assignment_json(cube, r.new, NIL);
		r.step = "assign";
		sc_reassign_assign(&r);
		ereport(LOG,
				(errmsg("cube %s: %d partitions added to its topics assigned (reassign_id " INT64_FORMAT "): %s",
						cube->qualified, adopted, r.id, r.new_json)));
	}
	else if (new_topics != NIL)
		sc_cube_row_touch(cube->cube_id);
	foreach(lc, new_topics)
		ereport(LOG,
				(errmsg("cube %s reads topic \"%s\" from now on: its pattern matches it",
						cube->qualified, strVal(lfirst(lc)))));
	SPI_finish();
	return adopted;
}


/*
 * streamcube_alter_cube changed the cube's topics (cube->topics as they
 * are now, their rows written; kafka: the partitions of the topics it
 * reads, as described now).  In the caller's transaction, which holds the
 * cube's row: the partitions of the topics taken out go to no replica set,
 * those of the topics it reads and no set holds (added, or put back) are
 * dealt to the cube's sets, then the steps of a reassignment run (pause,
 * merge, assign), journalled with origin streamcube_alter_cube.  A topic
 * put back starts where it stopped (its checkpoint, its position), a new
 * one at Kafka's first offset.  Returns the moves' count.
 */
int
sc_reassign_topics(ScCube *cube, List *kafka)
{
	ScReassign	r = {0};
	List	   *sets;
	int		   *load;
	ListCell   *lc;

	sc_reassign_init(&r, cube, "streamcube_alter_cube");
	r.timeout_ms = 30000;
	r.allow_partial = true;
	r.step = "validate";

	SPI_connect();
	sc_reassign_lock_cube(&r);
	sc_reassign_refuse_topics_placed(cube);
	r.old = sc_reassign_read_assignment(cube->cube_id);
	sets = sc_deal_sets(cube->cube_id, r.old, &load);
	foreach(lc, r.old)
	{
		ScAssigned *a = lfirst(lc);

		if (sc_topic_removed(&cube->topics, sc_source_topic_no(a->partition)))
		{
			ScMove	   *m = palloc0(sizeof(ScMove));

			m->partition = a->partition;
			m->from = a->replica_set;
			r.moves = lappend(r.moves, m);
		}
		else
			r.new = lappend(r.new, a);
	}
	foreach(lc, kafka)
	{
		ScKafkaPartitionInfo *k = lfirst(lc);
		bool		held = false;
		ListCell   *ac;

		foreach(ac, r.old)
			held |= ((ScAssigned *) lfirst(ac))->partition == k->source;
		if (!held && sets != NIL)
			sc_deal(&r, sets, load, k)->held_at = GetCurrentTimestamp();
	}
	if (r.moves != NIL)
	{
		r.old_json = sc_assignment_json(cube, r.old, NIL);
		r.new_json = sc_assignment_json(cube, r.new, NIL);
		sc_reassign_steps(&r);
		ereport(LOG,
				(errmsg("cube %s reads topics %s now (reassign_id " INT64_FORMAT "): %s, was %s",
						cube->qualified, cube->topic, r.id, r.new_json, r.old_json)));
	}
	SPI_finish();
	return list_length(r.moves);
}
