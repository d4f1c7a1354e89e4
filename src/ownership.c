/*-------------------------------------------------------------------------
 *
 * ownership.c
 *		Every relation of a cube belongs to the cube's owner.
 *
 * A cube is its parent table (whose owner is the cube's owner), the
 * partitions attached to it (active windows, sealed windows, compacted
 * partitions), the view <cube>_sealed, and its roll-ups with their
 * partitions (receivers write those as the cube's owner too) and their
 * views <roll-up>_sealed.  PostgreSQL runs a partition's index expressions, CHECK constraints and the like as that partition's
 * owner; a partition that belonged to a more privileged role than the
 * cube's owner would run the owner's functions with that role's rights
 * (CREATE INDEX on the parent recurses into every partition).  So the
 * owners must agree at every moment:
 *
 *	- streamcube creates every relation of a cube as the cube's owner
 *	  (segments.c, seal.c, compact.c);
 *	- ALTER TABLE <cube> OWNER TO moves every relation of the cube with the
 *	  parent, in the same statement (PostgreSQL moves a table's indexes,
 *	  sequences and TOAST table, not its partitions);
 *	- REASSIGN OWNED, which moves each relation on its own, is followed by
 *	  the same move for every cube whose parent it gave away;
 *	- any other ALTER TABLE or CREATE TABLE ... PARTITION OF that would
 *	  leave a relation of a cube with another owner (a partition or the
 *	  sealed view given to another role, a table of another role attached)
 *	  fails with an error that says what to do.
 *
 * The checks run after the statement, in a ProcessUtility hook, while its
 * locks are still held; the moves run as the bootstrap superuser, since
 * the statement itself passed PostgreSQL's checks on the parent (owner of
 * it, member of the new owner's role).
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/tablecmds.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

static ProcessUtility_hook_type prev_process_utility = NULL;

/*
 * Does the catalog know roll-ups and their views: column sealed_view of
 * streamcube.rollup_catalog (0.3.0 on), merged_view (0.4.0 on)?
 */
static bool
sc_ownership_rollup_column_known(const char *column)
{
	Oid			nsp = get_namespace_oid(SC_SCHEMA, true);
	Oid			catalog;

	return OidIsValid(nsp) && OidIsValid(catalog = get_relname_relid("rollup_catalog", nsp)) &&
		get_attnum(catalog, column) != InvalidAttrNumber;
}

/* sc_ownership_cube_of's statement; the roll-ups' part from 0.3.0 on */
#define SC_CUBE_OF_HEAD \
	"SELECT c.relid::oid FROM streamcube.cubes c " \
	"WHERE c.relid::oid = ANY ($1) " \
	"   OR (c.sealed_view::oid = $2 AND EXISTS " \
	"       (SELECT 1 FROM pg_catalog.pg_class v WHERE v.oid = $2 AND v.relkind = 'v')) "
#define SC_CUBE_OF_ROLLUPS \
	"   OR EXISTS (SELECT 1 FROM streamcube.rollup_catalog r " \
	"              WHERE r.cube_id = c.cube_id " \
	"                AND (r.relid::oid = ANY ($1) " \
	"                     OR (r.sealed_view::oid = $2 AND EXISTS " \
	"                         (SELECT 1 FROM pg_catalog.pg_class v WHERE v.oid = $2 AND v.relkind = 'v')))) "
#define SC_CUBE_OF_MERGED \
	"   OR EXISTS (SELECT 1 FROM streamcube.rollup_catalog r " \
	"              WHERE r.cube_id = c.cube_id AND r.merged_view::oid = $2 AND EXISTS " \
	"                    (SELECT 1 FROM pg_catalog.pg_class v WHERE v.oid = $2 AND v.relkind = 'v')) "
#define SC_CUBE_OF_TAIL "ORDER BY c.relid::oid = $2 DESC LIMIT 1"


/*
 * The cube whose parent, partition (at any level) or sealed view relid
 * is: the parent's OID, or InvalidOid.  *is_parent tells which.
 */
static Oid
sc_ownership_cube_of(Oid relid, bool *is_parent)
{
	/*
	 * Planned once per process, with and without the roll-ups' catalog:
	 * this runs after every ALTER TABLE, among them the ATTACH PARTITION of
	 * each window a receiver creates.
	 */
	static SPIPlanPtr plans[3] = {NULL, NULL, NULL};
	bool		rollups = sc_ownership_rollup_column_known("sealed_view");
	int			variant = !rollups ? 0 : sc_ownership_rollup_column_known("merged_view") ? 2 : 1;
	List	   *candidates = list_make1_oid(relid);
	Datum	   *elems;
	Oid			parent = InvalidOid;
	bool		isnull;
	int			n = 0;
	ListCell   *lc;

	*is_parent = false;
	/* The relation and every table above it, as a cube may sit anywhere. */
	if (get_rel_relispartition(relid))
		candidates = list_concat(candidates, get_partition_ancestors(relid));
	elems = palloc(sizeof(Datum) * list_length(candidates));
	foreach(lc, candidates)
		elems[n++] = ObjectIdGetDatum(lfirst_oid(lc));

	SPI_connect();
	sc_catalog_exec_kept(&plans[variant],
						 variant == 2 ? SC_CUBE_OF_HEAD SC_CUBE_OF_ROLLUPS SC_CUBE_OF_MERGED SC_CUBE_OF_TAIL
						 : variant == 1 ? SC_CUBE_OF_HEAD SC_CUBE_OF_ROLLUPS SC_CUBE_OF_TAIL
						 : SC_CUBE_OF_HEAD SC_CUBE_OF_TAIL,
						 2, (Oid[]) {OIDARRAYOID, OIDOID},
						 (Datum[]) {PointerGetDatum(construct_array(elems, n, OIDOID, sizeof(Oid), true, TYPALIGN_INT)),
							 ObjectIdGetDatum(relid)},
						 NULL, false, 1);
	if (SPI_processed > 0)
		parent = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	*is_parent = OidIsValid(parent) && parent == relid;
	return parent;
}

/*
 * The relations of a cube besides its parent: partitions, the sealed view,
 * its roll-ups, their partitions and their sealed and merged views.  Allocated in the
 * caller's memory context.
 */
static List *
sc_ownership_members(Oid parent)
{
	static SPIPlanPtr rollups_plan = NULL;	/* planned once per process */
	static SPIPlanPtr view_plan = NULL;
	static SPIPlanPtr merged_plan = NULL;
	MemoryContext cxt = CurrentMemoryContext;
	List	   *members = list_delete_first(find_all_inheritors(parent, NoLock, NULL));
	List	   *rollups = NIL;
	List	   *rollup_views = NIL;
	Oid			view = InvalidOid;
	bool		isnull;
	ListCell   *lc;

	SPI_connect();
	if (sc_ownership_rollup_column_known("sealed_view"))
	{
		MemoryContext spi;

		sc_catalog_exec_kept(&rollups_plan,
							 "SELECT r.relid::oid, r.sealed_view::oid FROM streamcube.rollup_catalog r "
							 "JOIN streamcube.cubes c USING (cube_id) WHERE c.relid::oid = $1",
							 1, (Oid[]) {OIDOID}, (Datum[]) {ObjectIdGetDatum(parent)},
							 NULL, false, 0);
		spi = MemoryContextSwitchTo(cxt);
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			Datum		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull);

			rollups = lappend_oid(rollups, DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
																		  SPI_tuptable->tupdesc, 1, &isnull)));
			if (!isnull)
				rollup_views = lappend_oid(rollup_views, DatumGetObjectId(d));
		}
		MemoryContextSwitchTo(spi);
		if (sc_ownership_rollup_column_known("merged_view"))
		{
			sc_catalog_exec_kept(&merged_plan,
								 "SELECT r.merged_view::oid FROM streamcube.rollup_catalog r "
								 "JOIN streamcube.cubes c USING (cube_id) "
								 "WHERE c.relid::oid = $1 AND r.merged_view IS NOT NULL",
								 1, (Oid[]) {OIDOID}, (Datum[]) {ObjectIdGetDatum(parent)},
								 NULL, false, 0);
			spi = MemoryContextSwitchTo(cxt);
			for (uint64 i = 0; i < SPI_processed; i++)
				rollup_views = lappend_oid(rollup_views,
										   DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
																		  SPI_tuptable->tupdesc, 1, &isnull)));
			MemoryContextSwitchTo(spi);
		}
	}
	sc_catalog_exec_kept(&view_plan,
						 "SELECT sealed_view::oid FROM streamcube.cubes WHERE relid::oid = $1",
						 1, (Oid[]) {OIDOID}, (Datum[]) {ObjectIdGetDatum(parent)},
						 NULL, false, 1);
	if (SPI_processed > 0)
	{
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			view = DatumGetObjectId(d);
	}
	SPI_finish();
	if (OidIsValid(view) && get_rel_relkind(view) == RELKIND_VIEW)
		members = lappend_oid(members, view);
	foreach(lc, rollups)
		if (get_rel_name(lfirst_oid(lc)) != NULL)
			members = list_concat(members, find_all_inheritors(lfirst_oid(lc), NoLock, NULL));
	foreach(lc, rollup_views)
		if (get_rel_relkind(lfirst_oid(lc)) == RELKIND_VIEW)
			members = lappend_oid(members, lfirst_oid(lc));
	return members;
}

/*
 * Give every relation of the cube whose parent is `parent`, that belonged
 * to the parent's previous owner `from`, to the parent's owner now.  Runs
 * as the bootstrap superuser: PostgreSQL let the caller give the parent
 * away.  A relation of a third role is not given: the check after the
 * move refuses the statement.
 */
static void
sc_ownership_follow_parent(Oid parent, Oid from)
{
	Oid			owner = sc_relation_owner(parent);
	List	   *members;
	ListCell   *lc;
	ScPrivilegeSave save;

	if (!OidIsValid(owner))
		return;					/* the parent is gone */
	members = sc_ownership_members(parent);
	foreach(lc, members)
	{
		Oid			member = lfirst_oid(lc);
		Oid			current = sc_relation_owner(member);

		if (current == owner || current != from || !OidIsValid(current))
			continue;
		sc_catalog_enter(&save);
		ATExecChangeOwner(member, owner, false, AccessExclusiveLock);
		sc_catalog_leave(&save);
	}
	CommandCounterIncrement();
}

/*
 * A relation of the cube that does not belong to the cube's owner is
 * refused: the statement that made it so fails.
 */
static void
sc_ownership_check(Oid parent)
{
	Oid			owner = sc_relation_owner(parent);
	ListCell   *lc;

	foreach(lc, sc_ownership_members(parent))
	{
		Oid			member = lfirst_oid(lc);
		Oid			other = sc_relation_owner(member);

		if (other == owner || !OidIsValid(other) || !OidIsValid(owner))
			continue;			/* the same, or dropped meanwhile */
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("%s \"%s\" of cube \"%s\" would belong to role \"%s\", not to the cube's owner \"%s\"",
						get_rel_relkind(member) == RELKIND_VIEW ? "view" : "partition",
						get_rel_name(member), get_rel_name(parent),
						GetUserNameFromId(other, false), GetUserNameFromId(owner, false)),
				 errdetail("Every relation of a cube belongs to the cube's owner: PostgreSQL runs a partition's index expressions and constraints as the partition's owner."),
				 errhint("Change the owner of the whole cube with ALTER TABLE %s OWNER TO ..., or give the table to \"%s\" before attaching it.",
						 sc_relation_qualified(parent),
						 GetUserNameFromId(owner, false))));
	}
}

/*
 * Is streamcube installed in this database, with a catalog that knows the
 * sealed views?  (Not while an install or update script runs, and not
 * between a new library and ALTER EXTENSION UPDATE from 0.1.0.)
 */
static bool
sc_ownership_active(void)
{
	Oid			nsp;
	Oid			cubes;
	Oid			ext;

	if (!IsTransactionState() || !OidIsValid(ext = get_extension_oid("streamcube", true)) ||
		(creating_extension && CurrentExtensionObject == ext) ||
		!OidIsValid(nsp = get_namespace_oid(SC_SCHEMA, true)) ||
		!OidIsValid(cubes = get_relname_relid("cubes", nsp)))
		return false;
	return get_attnum(cubes, "sealed_view") != InvalidAttrNumber;
}

/*
 * The relation an ALTER TABLE, CREATE TABLE ... PARTITION OF or CREATE
 * FOREIGN TABLE ... PARTITION OF is about.
 */
static Oid
sc_ownership_target(Node *stmt, bool *changes_owner)
{
	CreateStmt *create = NULL;

	*changes_owner = false;
	if (IsA(stmt, AlterTableStmt))
	{
		AlterTableStmt *alter = (AlterTableStmt *) stmt;
		ListCell   *lc;

		foreach(lc, alter->cmds)
		{
			AlterTableCmd *cmd = lfirst_node(AlterTableCmd, lc);

			if (cmd->subtype == AT_ChangeOwner)
				*changes_owner = true;
		}
		return RangeVarGetRelid(alter->relation, NoLock, true);
	}
	if (IsA(stmt, CreateStmt))
		create = (CreateStmt *) stmt;
	else if (IsA(stmt, CreateForeignTableStmt))
		create = &((CreateForeignTableStmt *) stmt)->base;
	if (create != NULL && create->partbound != NULL && list_length(create->inhRelations) == 1)
		return RangeVarGetRelid(linitial_node(RangeVar, create->inhRelations), NoLock, true);
	return InvalidOid;
}

/* Every cube's parent and its owner now (for REASSIGN OWNED). */
static List *
sc_ownership_parents(void)
{
	MemoryContext cxt = CurrentMemoryContext;
	ScPrivilegeSave save;
	List	   *pairs = NIL;	/* parent, owner, parent, owner, ... */
	bool		isnull;

	SPI_connect();
	sc_catalog_enter(&save);
	if (SPI_execute("SELECT c.relid::oid, r.relowner FROM streamcube.cubes c "
					"JOIN pg_catalog.pg_class r ON r.oid = c.relid", true, 0) == SPI_OK_SELECT)
	{
		MemoryContext spi = MemoryContextSwitchTo(cxt);

		for (uint64 i = 0; i < SPI_processed; i++)
		{
			pairs = lappend_oid(pairs, DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
																	  SPI_tuptable->tupdesc, 1, &isnull)));
			pairs = lappend_oid(pairs, DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
																	  SPI_tuptable->tupdesc, 2, &isnull)));
		}
		MemoryContextSwitchTo(spi);
	}
	sc_catalog_leave(&save);
	SPI_finish();
	return pairs;
}

static void
sc_process_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
				   ProcessUtilityContext context, ParamListInfo params,
				   QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;
	bool		watched = IsA(stmt, AlterTableStmt) || IsA(stmt, CreateStmt) ||
		IsA(stmt, CreateForeignTableStmt) || IsA(stmt, ReassignOwnedStmt);
	Oid			target = InvalidOid;
	Oid			owner_before = InvalidOid;
	List	   *parents_before = NIL;
	bool		changes_owner = false;

	if (watched && sc_ownership_active())
	{
		if (IsA(stmt, ReassignOwnedStmt))
			parents_before = sc_ownership_parents();
		else
		{
			target = sc_ownership_target(stmt, &changes_owner);
			if (OidIsValid(target))
				owner_before = sc_relation_owner(target);
		}
	}
	else
		watched = false;

	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context, params,
							 queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
								queryEnv, dest, qc);

	if (!watched)
		return;
	if (IsA(stmt, ReassignOwnedStmt))
	{
		/* Each cube whose parent REASSIGN OWNED gave away follows it. */
		for (int i = 0; i + 1 < list_length(parents_before); i += 2)
		{
			Oid			parent = list_nth_oid(parents_before, i);
			Oid			before = list_nth_oid(parents_before, i + 1);
			Oid			now = sc_relation_owner(parent);

			if (OidIsValid(now) && now != before)
			{
				sc_ownership_follow_parent(parent, before);
				sc_ownership_check(parent);
			}
		}
	}
	else if (OidIsValid(target) && OidIsValid(sc_relation_owner(target)))
	{
		bool		is_parent;
		Oid			parent = sc_ownership_cube_of(target, &is_parent);

		if (!OidIsValid(parent))
			return;
		if (is_parent && changes_owner)
			sc_ownership_follow_parent(parent, owner_before);
		sc_ownership_check(parent);
	}
}

void
sc_ownership_install_hook(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = sc_process_utility;
}
