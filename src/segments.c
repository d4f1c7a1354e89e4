/*-------------------------------------------------------------------------
 *
 * segments.c
 *		Window arithmetic and the active (UNLOGGED) partitions of a cube.
 *
 * A cube's windows are [origin + k * width, origin + (k+1) * width) for a
 * fixed origin (Monday 2001-01-01 00:00 UTC, as date_bin() users expect)
 * and the cube's segment interval as width.  Timestamps without time zone
 * use the same arithmetic on their face value.
 *
 * A window's partition is created as a plain UNLOGGED table and then
 * attached, which takes only SHARE UPDATE EXCLUSIVE on the parent: queries
 * on the cube go on while a window is added.  Receivers create the current
 * and the next window ahead of time, so the ingest path normally finds its
 * partitions in place; a timestamp outside them has its window created
 * between two batches, in a transaction of its own (see ingest.c,
 * sc_need_window).  Creation is serialised per cube
 * by a transaction-scoped advisory lock, and recorded in
 * streamcube.segment_catalog.
 *
 * A partition's name is the cube's name, clipped, and the window start.  A
 * name that is taken (by anyone who may create tables in the schema, or by
 * another cube whose name shares the clipped prefix) is never reused: a
 * counter is appended until the name is free.  A window whose partition a
 * user detached is forgotten and created again, with a new partition, the
 * next time a row needs it; the detached table is the user's.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "cube.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

/* 2001-01-01 00:00:00 UTC in PostgreSQL's microseconds since 2000-01-01. */
#define SC_WINDOW_ORIGIN (INT64CONST(366) * USECS_PER_DAY)

/*
 * A point in time as the cube's time column holds it: itself for
 * timestamptz, the local time of the session's TimeZone for timestamp.
 */
int64
sc_cube_time(const ScCube *cube, TimestampTz t)
{
	if (cube->time_type == TIMESTAMPOID)
		return (int64) DatumGetTimestamp(DirectFunctionCall1(timestamptz_timestamp,
															 TimestampTzGetDatum(t)));
	return (int64) t;
}

int64
sc_window_start(const ScCube *cube, int64 ts)
{
	return sc_bucket_start(ts, cube->width);
}

/* The start of the interval of width that holds ts, counted from the origin. */
int64
sc_bucket_start(int64 ts, int64 width)
{
	int64		delta = ts - SC_WINDOW_ORIGIN;
	int64		k = delta / width;

	if (delta % width < 0)
		k--;					/* floor, not truncation */
	return SC_WINDOW_ORIGIN + k * width;
}

/*
 * The bucket of compaction level `level` (option "compact") that holds ts:
 * [*start, *end).
 */
void
sc_level_bucket(const ScCube *cube, int level, int64 ts, int64 *start, int64 *end)
{
	const ScCompactLevel *l = &cube->compact[level];

	if (l->months == 0)
	{
		ScCube		as_width = *cube;

		as_width.width = l->usecs;
		*start = sc_window_start(&as_width, ts);
		*end = *start + l->usecs;
	}
	else
	{
		struct pg_tm tm;
		fsec_t		fsec;
		Timestamp	t;

		if (timestamp2tm(ts, NULL, &tm, &fsec, NULL, NULL) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
					 errmsg("window of cube %s is out of range", cube->qualified)));
		tm.tm_mday = 1;
		tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
		tm.tm_mon = ((tm.tm_mon - 1) / l->months) * l->months + 1;
		if (tm2timestamp(&tm, 0, NULL, &t) != 0)
			elog(ERROR, "could not compute a compaction bucket");
		*start = t;
		tm.tm_mon += l->months;
		if (tm.tm_mon > 12)
		{
			tm.tm_mon -= 12;
			tm.tm_year++;
		}
		if (tm2timestamp(&tm, 0, NULL, &t) != 0)
			elog(ERROR, "could not compute a compaction bucket");
		*end = t;
	}
}

/* Two digits' value; -1 if either is not a digit. */
static inline int
sc_two_digits(const char *p)
{
	unsigned int hi = (unsigned char) p[0] - (unsigned int) '0';
	unsigned int lo = (unsigned char) p[1] - (unsigned int) '0';

	return hi > 9 || lo > 9 ? -1 : (int) (hi * 10 + lo);
}

/* Four digits' value; -1 if any is not a digit. */
static inline int
sc_four_digits(const char *p)
{
	int			hi = sc_two_digits(p);
	int			lo = sc_two_digits(p + 2);

	return hi < 0 || lo < 0 ? -1 : hi * 100 + lo;
}

/*
 * The common case, fast: ISO 8601 "YYYY-MM-DD[T ]HH:MM:SS[.f{1,6}]" with
 * "Z" or a numeric offset ("+HH", "+HH:MM", "+HHMM"); a timestamp without
 * time zone takes no suffix.  Exactly the len bytes at p, which need no
 * terminator.  Anything else returns false and is left to PostgreSQL's
 * own parser, which gives the same value for these forms.
 */
static bool
sc_parse_iso(const ScCube *cube, const char *p, size_t len, int64 *result)
{
	const char *end = p + len;
	int			y,
				mo,
				d,
				h,
				mi,
				sec,
				tz = 0;
	int64		usec = 0;
	int			scale = 100000;

	if (len < 19 ||
		(y = sc_four_digits(p)) < 1 || p[4] != '-' || (mo = sc_two_digits(p + 5)) < 1 || mo > 12 ||
		p[7] != '-' || (d = sc_two_digits(p + 8)) < 1 || d > day_tab[isleap(y)][mo - 1] ||
		(p[10] != 'T' && p[10] != ' ') ||
		(h = sc_two_digits(p + 11)) < 0 || h > 23 || p[13] != ':' ||
		(mi = sc_two_digits(p + 14)) < 0 || mi > 59 || p[16] != ':' ||
		(sec = sc_two_digits(p + 17)) < 0 || sec > 59)
		return false;
	p += 19;
	if (p < end && *p == '.')
	{
		p++;
		if (p == end || *p < '0' || *p > '9')
			return false;
		for (; p < end && *p >= '0' && *p <= '9'; p++)
		{
			if (scale == 0)
				return false;	/* more than microseconds: let PostgreSQL round */
			usec += (*p - '0') * scale;
			scale /= 10;
		}
	}
	if (cube->time_type == TIMESTAMPTZOID)
	{
		if (p < end && *p == 'Z')
			p++;
		else if (p < end && (*p == '+' || *p == '-'))
		{
			int			sign = *p == '-' ? -1 : 1;
			int			th,
						tm = 0;

			if (end - p < 3 || (th = sc_two_digits(p + 1)) < 0 || th > 15)
				return false;
			p += 3;
			if (p < end && *p == ':')
				p++;
			if (p < end && *p >= '0' && *p <= '9')
			{
				if (end - p < 2 || (tm = sc_two_digits(p)) < 0 || tm > 59)
					return false;
				p += 2;
			}
			tz = sign * (th * 3600 + tm * 60);
		}
		else
			return false;		/* local time: depends on the TimeZone setting */
	}
	if (p != end)
		return false;

	*result = ((int64) (date2j(y, mo, d) - POSTGRES_EPOCH_JDATE) * SECS_PER_DAY +
			   h * 3600 + mi * 60 + sec - tz) * USECS_PER_SEC + usec;
	return IS_VALID_TIMESTAMP(*result);
}

/*
 * Parse a time value the way the column's input function would, but
 * without raising an error: the caller turns a failure into a bad message.
 */
bool
sc_parse_time(const ScCube *cube, const char *str, int64 *result, char **error)
{
	char		workbuf[MAXDATELEN + MAXDATEFIELDS];
	char	   *field[MAXDATEFIELDS];
	int			ftype[MAXDATEFIELDS];
	int			nf;
	int			dtype;
	struct pg_tm tt,
			   *tm = &tt;
	fsec_t		fsec;
	int			tz;
	int			dterr;
	Timestamp	ts;

	if (sc_parse_iso(cube, str, strlen(str), result))
		return true;

	dterr = ParseDateTime(str, workbuf, sizeof(workbuf), field, ftype, MAXDATEFIELDS, &nf);
	if (dterr == 0)
		dterr = DecodeDateTime(field, ftype, nf, &dtype, tm, &fsec, &tz);
	if (dterr == 0 && dtype == DTK_EPOCH)
	{
		*result = SetEpochTimestamp();
		return true;
	}
	if (dterr != 0 || dtype != DTK_DATE)
	{
		*error = psprintf("invalid input syntax for type %s: \"%s\"",
						  cube->time_type == TIMESTAMPTZOID ? "timestamp with time zone" : "timestamp without time zone",
						  str);
		if (dterr == 0)
			*error = psprintf("time value \"%s\" is not a finite timestamp", str);
		return false;
	}
	if (tm2timestamp(tm, fsec, cube->time_type == TIMESTAMPTZOID ? &tz : NULL, &ts) != 0 ||
		!IS_VALID_TIMESTAMP(ts))
	{
		*error = psprintf("timestamp out of range: \"%s\"", str);
		return false;
	}
	*result = ts;
	return true;
}

/*
 * sc_parse_time() of the len bytes at p, which need no terminator: the
 * common form is read in place, anything else copied into buf first (a
 * NUL among the bytes ends the copy's string, as it ends a C string).
 */
bool
sc_parse_time_bytes(const ScCube *cube, const char *p, size_t len, StringInfo buf,
					int64 *result, char **error)
{
	if (sc_parse_iso(cube, p, len, result))
		return true;
	resetStringInfo(buf);
	appendBinaryStringInfo(buf, p, (int) len);
	return sc_parse_time(cube, buf->data, result, error);
}

/*
 * The bounds [*lo, *hi) of partition part of a cube, as its pg_class row
 * records them (what ATTACH PARTITION was given).  False when it is not a
 * partition by range of one column with finite bounds.
 */
bool
sc_partition_range(Oid part, int64 *lo, int64 *hi)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(part));
	PartitionBoundSpec *spec;
	PartitionRangeDatum *l,
			   *u;
	Datum		d;
	bool		isnull;

	if (!HeapTupleIsValid(tup))
		return false;
	d = SysCacheGetAttr(RELOID, tup, Anum_pg_class_relpartbound, &isnull);
	spec = isnull ? NULL : (PartitionBoundSpec *) stringToNode(TextDatumGetCString(d));
	ReleaseSysCache(tup);
	if (spec == NULL || !IsA(spec, PartitionBoundSpec) || spec->strategy != PARTITION_STRATEGY_RANGE ||
		list_length(spec->lowerdatums) != 1 || list_length(spec->upperdatums) != 1)
		return false;
	l = linitial_node(PartitionRangeDatum, spec->lowerdatums);
	u = linitial_node(PartitionRangeDatum, spec->upperdatums);
	if (l->kind != PARTITION_RANGE_DATUM_VALUE || u->kind != PARTITION_RANGE_DATUM_VALUE ||
		!IsA(l->value, Const) || !IsA(u->value, Const) ||
		castNode(Const, l->value)->constisnull || castNode(Const, u->value)->constisnull)
		return false;
	/* timestamp and timestamptz alike: microseconds, as the cube counts */
	*lo = DatumGetInt64(castNode(Const, l->value)->constvalue);
	*hi = DatumGetInt64(castNode(Const, u->value)->constvalue);
	return true;
}

/* An ISO 8601 literal of a window bound, independent of DateStyle. */
char *
sc_bound_literal(const ScCube *cube, int64 ts)
{
	struct pg_tm tm;
	fsec_t		fsec;

	if (timestamp2tm(ts, NULL, &tm, &fsec, NULL, NULL) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("window bound of cube %s is out of range", cube->qualified)));
	/* PostgreSQL counts 1 BC as year 0 internally. */
	return psprintf("%04d-%02d-%02d %02d:%02d:%02d%s%s",
					tm.tm_year > 0 ? tm.tm_year : -(tm.tm_year - 1),
					tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
					cube->time_type == TIMESTAMPTZOID ? "+00" : "",
					tm.tm_year > 0 ? "" : " BC");
}

/*
 * A free name for the partition of a window of table base (in schema
 * nsp): base, clipped, and the window start, then "_2", "_3", ... while the
 * name is taken.  A cube's windows and a roll-up's are named alike.
 */
char *
sc_window_partition_name(Oid nsp, const char *base, int64 start)
{
	struct pg_tm tm;
	fsec_t		fsec;
	char		stamp[32];

	timestamp2tm(start, NULL, &tm, &fsec, NULL, NULL);
	snprintf(stamp, sizeof(stamp), "_%04d%02d%02d_%02d%02d%s",
			 tm.tm_year > 0 ? tm.tm_year : -(tm.tm_year - 1),
			 tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_year > 0 ? "" : "bc");
	for (int attempt = 1;; attempt++)
	{
		char		suffix[48];
		int			room;
		char	   *name;

		if (attempt == 1)
			strlcpy(suffix, stamp, sizeof(suffix));
		else
			snprintf(suffix, sizeof(suffix), "%s_%d", stamp, attempt);
		room = pg_mbcliplen(base, strlen(base), NAMEDATALEN - 1 - (int) strlen(suffix));
		name = psprintf("%.*s%s", room, base, suffix);
		if (!sc_name_taken(name, nsp))
			return name;
		pfree(name);
	}
}

/*
 * Is the window's partition in place?  A window whose partition is no
 * longer attached to the cube (a user detached it) is forgotten here, so
 * that it is created again.
 */
static bool
sc_segment_known(const ScCube *cube, int64 start)
{
	static SPIPlanPtr plan = NULL;	/* twice per window created: planned once */
	Oid			types[3] = {INT4OID, TIMESTAMPTZOID, OIDOID};
	Datum		values[3] = {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(start),
	ObjectIdGetDatum(cube->relid)};
	ScPrivilegeSave save;
	bool		attached;
	bool		isnull;
	char	   *relation;

	if (sc_catalog_exec_kept(&plan,
							 "SELECT EXISTS (SELECT 1 FROM pg_inherits i "
							 "               WHERE i.inhrelid = s.relid AND i.inhparent = $3), "
							 "       s.relid::regclass::text "
							 "FROM streamcube.segment_catalog s "
							 "WHERE s.cube_id = $1 AND s.window_start = $2",
							 3, types, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.segment_catalog");
	if (SPI_processed == 0)
		return false;
	attached = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (attached)
		return true;

	relation = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	ereport(WARNING,
			(errcode(ERRCODE_WARNING),
			 errmsg("window %s of cube %s was detached from it (table %s); a new partition takes its rows",
					sc_bound_literal(cube, start), cube->qualified, relation),
			 errdetail("The detached table and its rows are no longer part of the cube.")));
	sc_catalog_enter(&save);
	if (SPI_execute_with_args("DELETE FROM streamcube.segment_catalog "
							  "WHERE cube_id = $1 AND window_start = $2",
							  2, types, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not update streamcube.segment_catalog");
	sc_catalog_leave(&save);
	return false;
}

/*
 * The cube's window-creation lock, to the end of the transaction: taken
 * before creating a window, and by a compaction before it points a
 * bucket's windows at its new partition (lock 6 of "Lock order",
 * docs/architecture.md).  The caller is connected to SPI.
 */
void
sc_segment_lock_windows(const ScCube *cube)
{
	if (SPI_execute_with_args("SELECT pg_advisory_xact_lock($1, $2)", 2,
							  (Oid[]) {INT4OID, INT4OID},
							  (Datum[]) {Int32GetDatum(SC_LOCK_CLASS_WINDOWS), Int32GetDatum(cube->cube_id)},
							  NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not take the window lock of cube %s", cube->qualified);
}

/*
 * The partition a window of history gets: the bucket of the cube's finest
 * compaction level that holds the window, when that bucket has ended
 * already (it ends at or before now minus the cube's grace: every window
 * of it is due for sealing, and once sealed it would be compacted into
 * one partition of the bucket anyway).  One partition for, say, a day of
 * windows of an hour costs one CREATE and ATTACH instead of 24, and a seal
 * instead of 24 seals and a compaction; the windows stay windows in the
 * catalog, all active, all naming it.
 *
 * This is the arithmetic: false when the cube has no compaction levels,
 * setting streamcube.history_buckets is off, or the bucket is not over.
 * sc_segment_history_bucket() decides for good, under the window lock.
 */
bool
sc_segment_history_span(const ScCube *cube, int64 start, int64 *bucket_start, int64 *bucket_end)
{
	int64		due_before;

	if (!sc_history_buckets || cube->ncompact == 0)
		return false;
	sc_level_bucket(cube, 0, start, bucket_start, bucket_end);
	due_before = sc_cube_time(cube, GetCurrentTransactionStartTimestamp()) - cube->grace;
	return *bucket_end <= due_before && *bucket_end - *bucket_start > cube->width;
}

/*
 * The bucket of history of a window that has none yet (above), unless one
 * of its windows exists (made before, or by a late row: the bucket goes on
 * window by window) or the cube has roll-ups (their partitions, one per
 * window, are merged when a compaction merges the cube's, which a bucket
 * made whole never needs).  The caller holds the window lock and is
 * connected to SPI.
 */
static bool
sc_segment_history_bucket(const ScCube *cube, int64 start, int64 *bucket_start, int64 *bucket_end)
{
	static SPIPlanPtr plan = NULL;
	bool		isnull;

	if (!sc_segment_history_span(cube, start, bucket_start, bucket_end))
		return false;
	if (sc_catalog_exec_kept(&plan,
							 "SELECT EXISTS (SELECT 1 FROM streamcube.segment_catalog "
							 "               WHERE cube_id = $1 AND window_start >= $2 AND window_start < $3) "
							 "    OR EXISTS (SELECT 1 FROM streamcube.rollup_catalog WHERE cube_id = $1)",
							 3, (Oid[]) {INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID},
							 (Datum[]) {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(*bucket_start),
								 TimestampTzGetDatum(*bucket_end)},
							 NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.segment_catalog");
	return !DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Make sure the window starting at `start` has its partition; true when
 * this call created it, for the windows [*created_start, *created_end):
 * the window alone, or every window of its bucket when it is history
 * (sc_segment_history_bucket).  Runs inside the caller's transaction; DDL
 * runs as the current user (the cube owner).
 */
bool
sc_segment_ensure(const ScCube *cube, int64 start, int64 *created_start, int64 *created_end)
{
	static SPIPlanPtr insert_plan = NULL;	/* per partition created: planned once */
	char	   *relname;
	char	   *qualified;
	StringInfoData sql;
	ScAsOwner	as;
	Oid			relid;
	int64		lo = start,
				hi = start + cube->width;
	Interval	width = {.time = cube->width};

	SPI_connect();
	if (sc_segment_known(cube, start))
	{
		SPI_finish();
		return false;
	}

	/* Serialise with other receivers of this cube, then look again. */
	sc_segment_lock_windows(cube);
	if (sc_segment_known(cube, start))
	{
		SPI_finish();
		return false;
	}
	if (!sc_segment_history_bucket(cube, start, &lo, &hi))
		lo = start, hi = start + cube->width;

	relname = sc_window_partition_name(get_rel_namespace(cube->relid), cube->relname, lo);
	qualified = quote_qualified_identifier(cube->schema, relname);

	/*
	 * As the cube's owner, whoever asks (ownership.c): the owner as it is
	 * now, under the lock on the table that every caller holds.
	 */
	sc_as_owner_enter(&as, sc_relation_owner(cube->relid));
	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "CREATE UNLOGGED TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
					 "INCLUDING GENERATED INCLUDING STORAGE INCLUDING COMPRESSION)",
					 qualified, cube->qualified);
	if (SPI_execute(sql.data, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not create partition %s", qualified);

	resetStringInfo(&sql);
	appendStringInfo(&sql, "ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')",
					 cube->qualified, qualified,
					 sc_bound_literal(cube, lo), sc_bound_literal(cube, hi));
	if (SPI_execute(sql.data, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not attach partition %s", qualified);
	sc_as_owner_leave(&as);

	relid = get_relname_relid(relname, get_rel_namespace(cube->relid));
	if (!OidIsValid(relid))
		elog(ERROR, "partition %s vanished after it was created", qualified);
	sc_catalog_exec_kept(&insert_plan,
						 "INSERT INTO streamcube.segment_catalog (cube_id, window_start, window_end, relid) "
						 "SELECT $1, w, w + $4, $3 "
						 "FROM pg_catalog.generate_series($2, $5 - $4, $4) AS w",
						 5, (Oid[]) {INT4OID, TIMESTAMPTZOID, OIDOID, INTERVALOID, TIMESTAMPTZOID},
						 (Datum[]) {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(lo),
							 ObjectIdGetDatum(relid), IntervalPGetDatum(&width),
						 TimestampTzGetDatum(hi)},
						 NULL, false, 0);
	SPI_finish();
	if (created_start != NULL)
		*created_start = lo;
	if (created_end != NULL)
		*created_end = hi;
	return true;
}

/*
 * The state of a window as the catalog has it: active or sealed, its
 * partition, and for a sealed window its sealed_upto offsets (allocated in
 * cxt).  False when the catalog does not know the window.  Call inside a
 * transaction, connected to SPI.  A receiver asks once per window it meets
 * and again after the window's partition changed (ingest_windows.c), which
 * in a replay of history is often: the statement is planned once.
 */
bool
sc_segment_state(const ScCube *cube, int64 start, ScWindowState *state, MemoryContext cxt)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[2] = {INT4OID, TIMESTAMPTZOID};
	Datum		values[2] = {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(start)};
	bool		isnull;

	memset(state, 0, sizeof(*state));
	if (sc_catalog_exec_kept(&plan,
							 "SELECT s.state = 'sealed', s.relid::oid, "
							 "       array_agg(u.partition ORDER BY u.partition) FILTER (WHERE u.partition IS NOT NULL), "
							 "       array_agg(u.\"offset\" ORDER BY u.partition) FILTER (WHERE u.partition IS NOT NULL) "
							 "FROM streamcube.segment_catalog s "
							 "LEFT JOIN streamcube.sealed_upto u USING (cube_id, window_start) "
							 "WHERE s.cube_id = $1 AND s.window_start = $2 "
							 "GROUP BY s.state, s.relid",
							 2, types, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read streamcube.segment_catalog");
	if (SPI_processed == 0)
		return false;
	state->sealed = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	state->relid = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	{
		Datum		parts = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull);
		Datum		offs;
		Datum	   *pe,
				   *oe;
		int			np,
					no;

		if (isnull)
			return true;
		offs = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull);
		deconstruct_array(DatumGetArrayTypeP(parts), INT4OID, 4, true, TYPALIGN_INT, &pe, NULL, &np);
		deconstruct_array(DatumGetArrayTypeP(offs), INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &oe, NULL, &no);
		state->nupto = np;
		state->upto_partitions = MemoryContextAlloc(cxt, sizeof(int32) * Max(np, 1));
		state->upto_offsets = MemoryContextAlloc(cxt, sizeof(int64) * Max(np, 1));
		for (int i = 0; i < np; i++)
		{
			state->upto_partitions[i] = DatumGetInt32(pe[i]);
			state->upto_offsets[i] = DatumGetInt64(oe[i]);
		}
	}
	return true;
}

/*
 * The windows' rows of streamcube.segment_catalog are written here only:
 * created and forgotten above, and the three moves of sealing and
 * compaction below.  The caller is connected to SPI.
 */

/* A seal's swap: the windows [start, end) are their logged twin now. */
void
sc_segment_set_partition(const ScCube *cube, int64 start, int64 end, Oid relid)
{
	Oid			types[4] = {INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, OIDOID};
	Datum		values[4] = {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(start),
		TimestampTzGetDatum(end), ObjectIdGetDatum(relid)};

	if (sc_catalog_exec("UPDATE streamcube.segment_catalog SET relid = $4 "
						"WHERE cube_id = $1 AND window_start >= $2 AND window_start < $3",
						4, types, values, NULL, false, 0) != SPI_OK_UPDATE ||
		SPI_processed != (uint64) ((end - start) / cube->width))
		elog(ERROR, "could not point window %s of cube %s at its sealed partition",
			 sc_bound_literal(cube, start), cube->qualified);
}

/*
 * The journal of a cube's windows, streamcube.segment_log, is written here
 * only: a seal or a compaction of [start, end) with the rows it moved, by
 * the current user.
 */
void
sc_segment_journal(const ScCube *cube, TimestampTz start, TimestampTz end,
				   const char *action, int64 rows)
{
	if (sc_catalog_exec("INSERT INTO streamcube.segment_log "
						"(cube_id, cube, window_start, window_end, action, rows, done_by) "
						"SELECT $1, c.relid, $2, $3, $4, $5, $6 "
						"FROM streamcube.cubes c WHERE c.cube_id = $1",
						6, (Oid[]) {INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, INT8OID, NAMEOID},
						(Datum[]) {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(start),
							TimestampTzGetDatum(end), CStringGetTextDatum(action), Int64GetDatum(rows),
						DirectFunctionCall1(namein, CStringGetDatum(GetUserNameFromId(GetUserId(), false)))},
						NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not journal windows %s to %s of cube %s as %s",
			 sc_bound_literal(cube, start), sc_bound_literal(cube, end), cube->qualified, action);
}

/*
 * The partitions of a cube that lie wholly before "before" and are sealed,
 * the oldest first, at most max of them (each drop takes locks); *n is how
 * many.  A compacted partition holds many windows: it goes when all of
 * them are past.
 */
Oid *
sc_segment_partitions_before(const ScCube *cube, TimestampTz before, int max, int *n)
{
	Oid		   *parts;

	sc_catalog_exec(psprintf("SELECT s.relid::oid FROM streamcube.segment_catalog s "
							 "WHERE s.cube_id = $1 "
							 "GROUP BY s.relid "
							 "HAVING bool_and(s.state = 'sealed') AND max(s.window_end) <= $2 "
							 "ORDER BY min(s.window_start) LIMIT %d", max),
					2, (Oid[]) {INT4OID, TIMESTAMPTZOID},
					(Datum[]) {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(before)},
					NULL, false, 0);
	*n = (int) SPI_processed;
	parts = palloc(sizeof(Oid) * Max(*n, 1));
	for (int i = 0; i < *n; i++)
	{
		bool		isnull;

		parts[i] = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
	}
	return parts;
}

/*
 * Retention's journal, before it drops the partitions parts[0..n): one
 * "dropped" entry per partition, over the windows it holds.
 */
void
sc_segment_journal_drops(const ScCube *cube, const Oid *parts, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		d[i] = ObjectIdGetDatum(parts[i]);
	if (sc_catalog_exec("INSERT INTO streamcube.segment_log "
						"(cube_id, cube, window_start, window_end, action, done_by) "
						"SELECT s.cube_id, c.relid, min(s.window_start), max(s.window_end), 'dropped', $2 "
						"FROM streamcube.segment_catalog s JOIN streamcube.cubes c USING (cube_id) "
						"WHERE s.cube_id = $1 AND s.relid::oid = ANY ($3) "
						"GROUP BY s.cube_id, c.relid, s.relid",
						3, (Oid[]) {INT4OID, NAMEOID, OIDARRAYOID},
						(Datum[]) {Int32GetDatum(cube->cube_id),
							DirectFunctionCall1(namein, CStringGetDatum(GetUserNameFromId(GetUserId(), false))),
						PointerGetDatum(construct_array(d, n, OIDOID, sizeof(Oid), true, TYPALIGN_INT))},
						NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not journal retention of cube %s", cube->qualified);
}

/* A seal's record: the window is sealed. */
void
sc_segment_mark_sealed(const ScCube *cube, int64 start)
{
	Oid			types[2] = {INT4OID, TIMESTAMPTZOID};
	Datum		values[2] = {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(start)};

	if (sc_catalog_exec("UPDATE streamcube.segment_catalog "
						"SET state = 'sealed', sealed_at = now() "
						"WHERE cube_id = $1 AND window_start = $2",
						2, types, values, NULL, false, 0) != SPI_OK_UPDATE ||
		SPI_processed != 1)
		elog(ERROR, "could not mark window %s of cube %s sealed",
			 sc_bound_literal(cube, start), cube->qualified);
}

/*
 * A compaction's swap: every window of [start, end) is the compacted
 * partition now, those no row needed yet too (sealed, so that a late row
 * finds its window instead of creating one inside the bucket).
 */
void
sc_segment_set_compacted(const ScCube *cube, int64 start, int64 end, Oid relid)
{
	Interval	width = {.time = cube->width};

	if (sc_catalog_exec("UPDATE streamcube.segment_catalog SET relid = $4 "
						"WHERE cube_id = $1 AND window_start >= $2 AND window_start < $3",
						4, (Oid[]) {INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, OIDOID},
						(Datum[]) {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(start),
							TimestampTzGetDatum(end), ObjectIdGetDatum(relid)},
						NULL, false, 0) != SPI_OK_UPDATE ||
		sc_catalog_exec("INSERT INTO streamcube.segment_catalog "
						"(cube_id, window_start, window_end, state, relid, sealed_at) "
						"SELECT $1, w, w + $5, 'sealed', $4, now() "
						"FROM pg_catalog.generate_series($2, $3 - $5, $5) AS w "
						"ON CONFLICT (cube_id, window_start) DO NOTHING",
						5, (Oid[]) {INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, OIDOID, INTERVALOID},
						(Datum[]) {Int32GetDatum(cube->cube_id), TimestampTzGetDatum(start),
							TimestampTzGetDatum(end), ObjectIdGetDatum(relid),
						IntervalPGetDatum(&width)},
						NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not point the windows of cube %s at their compacted partition",
			 cube->qualified);
}
