/*-------------------------------------------------------------------------
 *
 * ownership.c
 *		Every relation of a cube belongs to the cube's owner.
 *
 * A cube is its parent table (whose owner is the cube's owner), the
 * partitions attached to it (active windows, sealed windows, compacted
 * partitions) and the view <cube>_sealed.  PostgreSQL runs a partition's
 * index expressions, CHECK constraints and the like as that partition's
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
 * The cube whose parent, partition or sealed view relid is: the parent's
 * OID, or InvalidOid.  *is_parent tells which.
 */
static Oid
sc_ownership_cube_of(Oid relid, bool *is_parent)
{
	ScPrivilegeSave save;
	Oid			parent = InvalidOid;
	Oid			candidate = relid;
	bool		isnull;
	int			ret;

	*is_parent = false;
	/* A partition of a partition of ... : its topmost parent. */
	while (get_rel_relispartition(candidate))
		candidate = get_partition_parent(candidate, true);

	SPI_connect();
	sc_catalog_enter(&save);
	ret = SPI_execute_with_args("SELECT relid::oid FROM streamcube.cubes "
								"WHERE relid::oid = $1 OR sealed_view::oid = $2",
								2, (Oid[]) {OIDOID, OIDOID},
								(Datum[]) {ObjectIdGetDatum(candidate), ObjectIdGetDatum(relid)},
								NULL, false, 1);
	sc_catalog_leave(&save);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.cubes: %s", SPI_result_code_string(ret));
	if (SPI_processed > 0)
		parent = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	*is_parent = OidIsValid(parent) && parent == relid;
	return parent;
}

/*
 * The relations of a cube besides its parent: partitions, the sealed view.
 * Allocated in the caller's memory context.
 */
static List *
sc_ownership_members(Oid parent)
{
	List	   *members = list_delete_first(find_all_inheritors(parent, NoLock, NULL));
	Oid			view = InvalidOid;
	ScPrivilegeSave save;
	bool		isnull;

	SPI_connect();
	sc_catalog_enter(&save);
	if (SPI_execute_with_args("SELECT sealed_view::oid FROM streamcube.cubes WHERE relid::oid = $1",
							  1, (Oid[]) {OIDOID}, (Datum[]) {ObjectIdGetDatum(parent)},
							  NULL, false, 1) == SPI_OK_SELECT && SPI_processed > 0)
	{
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			view = DatumGetObjectId(d);
	}
	sc_catalog_leave(&save);
	SPI_finish();
	if (OidIsValid(view) && OidIsValid(sc_relation_owner(view)))
		members = lappend_oid(members, view);
	return members;
}

/*
 * Give every relation of the cube whose parent is `parent` to the parent's
 * owner.  Runs as the bootstrap superuser: the caller decided it may.
 */
static void
sc_ownership_follow_parent(Oid parent)
{
	Oid			owner = sc_relation_owner(parent);
	List	   *members = sc_ownership_members(parent);
	ListCell   *lc;
	ScPrivilegeSave save;

	foreach(lc, members)
	{
		Oid			member = lfirst_oid(lc);

		if (sc_relation_owner(member) == owner)
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

		if (other == owner)
			continue;
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("%s \"%s\" of cube \"%s\" would belong to role \"%s\", not to the cube's owner \"%s\"",
						get_rel_relkind(member) == RELKIND_VIEW ? "view" : "partition",
						get_rel_name(member), get_rel_name(parent),
						GetUserNameFromId(other, false), GetUserNameFromId(owner, false)),
				 errdetail("Every relation of a cube belongs to the cube's owner: PostgreSQL runs a partition's index expressions and constraints as the partition's owner."),
				 errhint("Change the owner of the whole cube with ALTER TABLE %s OWNER TO ..., or give the table to \"%s\" before attaching it.",
						 quote_qualified_identifier(get_namespace_name(get_rel_namespace(parent)),
													get_rel_name(parent)),
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

	if (!IsTransactionState() || creating_extension ||
		!OidIsValid(get_extension_oid("streamcube", true)) ||
		!OidIsValid(nsp = get_namespace_oid(SC_SCHEMA, true)) ||
		!OidIsValid(cubes = get_relname_relid("cubes", nsp)))
		return false;
	return get_attnum(cubes, "sealed_view") != InvalidAttrNumber;
}

/* The relation an ALTER TABLE or CREATE TABLE ... PARTITION OF is about. */
static Oid
sc_ownership_target(Node *stmt, bool *changes_owner)
{
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
	if (IsA(stmt, CreateStmt) && ((CreateStmt *) stmt)->partbound != NULL &&
		list_length(((CreateStmt *) stmt)->inhRelations) == 1)
		return RangeVarGetRelid(linitial_node(RangeVar, ((CreateStmt *) stmt)->inhRelations),
								NoLock, true);
	return InvalidOid;
}

/* After REASSIGN OWNED: every cube's relations follow its parent. */
static void
sc_ownership_follow_all(void)
{
	MemoryContext cxt = CurrentMemoryContext;
	ScPrivilegeSave save;
	List	   *parents = NIL;
	ListCell   *lc;
	bool		isnull;

	SPI_connect();
	sc_catalog_enter(&save);
	if (SPI_execute("SELECT relid::oid FROM streamcube.cubes", true, 0) == SPI_OK_SELECT)
	{
		MemoryContext spi = MemoryContextSwitchTo(cxt);

		for (uint64 i = 0; i < SPI_processed; i++)
			parents = lappend_oid(parents,
								  DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
																 SPI_tuptable->tupdesc, 1, &isnull)));
		MemoryContextSwitchTo(spi);
	}
	sc_catalog_leave(&save);
	SPI_finish();
	foreach(lc, parents)
		sc_ownership_follow_parent(lfirst_oid(lc));
}

static void
sc_process_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
				   ProcessUtilityContext context, ParamListInfo params,
				   QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;
	bool		watched = IsA(stmt, AlterTableStmt) || IsA(stmt, CreateStmt) ||
		IsA(stmt, ReassignOwnedStmt);
	Oid			target = InvalidOid;
	bool		changes_owner = false;

	if (watched && sc_ownership_active())
		target = sc_ownership_target(stmt, &changes_owner);
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
		sc_ownership_follow_all();
	else if (OidIsValid(target) && OidIsValid(sc_relation_owner(target)))
	{
		bool		is_parent;
		Oid			parent = sc_ownership_cube_of(target, &is_parent);

		if (!OidIsValid(parent))
			return;
		if (is_parent && changes_owner)
			sc_ownership_follow_parent(parent);
		else
			sc_ownership_check(parent);
	}
}

void
sc_ownership_install_hook(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = sc_process_utility;
}
