/*-------------------------------------------------------------------------
 *
 * ingest_write.c
 *		Lines into the table, bad lines into dead letters.
 *
 * A message that passed its format's checks can still fail when written (a
 * value its column's type rejects, a constraint).  The writers abort on the
 * first bad row, so a range of lines is first tried whole in a
 * subtransaction, which costs nothing when all is well; on a data error the
 * range is split in halves and each half tried again, down to the single
 * bad lines.  A handful of bad messages in a batch of n costs about
 * 2 log2(n) extra subtransactions each.  Errors that are not about the data
 * (out of disk, permissions, shutdown) are rethrown: the whole batch aborts
 * and nothing is lost.
 *
 * Each range goes to the first writer of the batch's chain that can take
 * all of it (sc_writers_choose: the direct path, then COPY FROM); the
 * batch counts the rows each wrote.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "ingest_internal.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

typedef struct ScWriteWork
{
	ScIngest   *ing;
	int			lo;
	int			hi;
} ScWriteWork;

static void
sc_write_work(void *arg)
{
	ScWriteWork *w = arg;
	ScIngest   *ing = w->ing;

	for (int i = 0; i < ing->nwriters; i++)
	{
		const ScLineWriter *writer = ing->writers[i];

		if (writer->run(ing, w->lo, w->hi))
		{
			*(int64 *) ((char *) &ing->batch + writer->counter) += w->hi - w->lo;
			return;
		}
	}
	elog(ERROR, "no writer took lines %d to %d of the batch", w->lo, w->hi);
}

/*
 * The writers of this batch, in the order they are asked: the direct path
 * first when streamcube.direct_insert is on, or when the cube keeps no raw
 * rows (it forms them for the roll-ups and writes none, which only the
 * direct path can); COPY FROM for what the direct path cannot take (late
 * rows into sealed windows, partitions with triggers), or for every line
 * when direct_insert is off.
 */
void
sc_writers_choose(ScIngest *ing)
{
	ing->nwriters = 0;
	if (sc_direct_insert || !ing->cube->keep_rows)
		ing->writers[ing->nwriters++] = &sc_writer_direct;
	ing->writers[ing->nwriters++] = &sc_writer_copy;
	/* the formats may give the direct path datums (format.h) */
	ing->fc.datums = ing->writers[0] == &sc_writer_direct;
}

/* Try lines [lo, hi) in a subtransaction; on a data error return it. */
static ErrorData *
sc_write_lines_try(ScIngest *ing, int lo, int hi)
{
	ScWriteWork	work = {ing, lo, hi};

	return sc_try_subtransaction(sc_write_work, &work);
}

/*
 * Insert lines [lo, hi), isolating bad ones by bisection.  With stop_first
 * (policy "pause") the first bad line ends the work and its index is
 * returned; lines before it are inserted.  Returns -1 when no line stopped.
 */
int
sc_write_lines(ScIngest *ing, int lo, int hi, bool stop_first)
{
	ErrorData  *edata;
	int			mid;
	int			r;

	if (lo >= hi)
		return -1;
	edata = sc_write_lines_try(ing, lo, hi);
	if (edata == NULL)
		return -1;
	if (hi - lo == 1)
	{
		int			msg = ing->batch.line_msg[lo];

		const char *where = edata->context ? strstr(edata->context, ", column ") : NULL;

		/* COPY's context names our batch's line; keep only the column part. */
		ing->batch.bad_error[msg] = where
			? psprintf("%s (%s)", edata->message, where + 2)
			: pstrdup(edata->message);
		return stop_first ? lo : -1;
	}
	FreeErrorData(edata);
	mid = lo + (hi - lo) / 2;
	r = sc_write_lines(ing, lo, mid, stop_first);
	if (r >= 0)
		return r;
	return sc_write_lines(ing, mid, hi, stop_first);
}

/* ----------------------------------------------------------------
 * Dead letters
 * ----------------------------------------------------------------
 */
/*
 * An error text valid in the database encoding: it may quote the bad
 * message, so each byte that does not fit becomes "?".
 */
static const char *
sc_valid_text(const char *text)
{
	int			encoding = GetDatabaseEncoding();
	int			len = strlen(text);
	StringInfoData out;

	if (pg_verifymbstr(text, len, true))
		return text;
	initStringInfo(&out);
	while (len > 0)
	{
		int			ok = pg_encoding_verifymbstr(encoding, text, len);

		appendBinaryStringInfo(&out, text, ok);
		text += ok;
		len -= ok;
		if (len > 0)
		{
			appendStringInfoChar(&out, '?');
			text++;
			len--;
		}
	}
	return out.data;
}

/* A bytea datum of len bytes, NULL when data is. */
static Datum
sc_bytea(const char *data, size_t len, char *isnull)
{
	bytea	   *b;

	*isnull = data == NULL ? 'n' : ' ';
	if (data == NULL)
		return (Datum) 0;
	b = palloc(VARHDRSZ + len);
	SET_VARSIZE(b, VARHDRSZ + len);
	memcpy(VARDATA(b), data, len);
	return PointerGetDatum(b);
}

/* Record message m as a dead letter, in the batch's transaction. */
void
sc_dead_letter(ScIngest *ing, const ScKafkaMessage *m, const char *error)
{
	Datum		values[8];
	char		nulls[9] = "        ";
	ScPrivilegeSave save;
	int			ret;
	bool		with_topic = sc_catalog_has_column("dead_letters", "topic");	/* 0.4.0 on */

	if (ing->dead_letter_plan != NULL && ing->dead_letter_topic != with_topic)
	{
		SPI_freeplan(ing->dead_letter_plan);
		ing->dead_letter_plan = NULL;
	}
	if (ing->dead_letter_plan == NULL)
	{
		Oid			types[8] = {INT4OID, OIDOID, INT4OID, INT8OID, BYTEAOID, TEXTOID, BYTEAOID, TEXTOID};

		sc_catalog_enter(&save);
		ing->dead_letter_plan = with_topic
			? SPI_prepare("INSERT INTO streamcube.dead_letters "
						  "(cube_id, cube, partition, \"offset\", payload, error, key, topic) "
						  "VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
						  "ON CONFLICT (cube_id, topic, partition, \"offset\") DO UPDATE "
						  "SET payload = EXCLUDED.payload, error = EXCLUDED.error, "
						  "    key = EXCLUDED.key, recorded_at = now()",
						  8, types)
			: SPI_prepare("INSERT INTO streamcube.dead_letters "
						  "(cube_id, cube, partition, \"offset\", payload, error, key) "
						  "VALUES ($1, $2, $3, $4, $5, $6, $7) "
						  "ON CONFLICT (cube_id, partition, \"offset\") DO UPDATE "
						  "SET payload = EXCLUDED.payload, error = EXCLUDED.error, "
						  "    key = EXCLUDED.key, recorded_at = now()",
						  7, types);
		sc_catalog_leave(&save);
		if (ing->dead_letter_plan == NULL)
			elog(ERROR, "could not prepare the dead-letter insert: %s",
				 SPI_result_code_string(SPI_result));
		SPI_keepplan(ing->dead_letter_plan);
		ing->dead_letter_topic = with_topic;
	}

	values[0] = Int32GetDatum(ing->cube->cube_id);
	values[1] = ObjectIdGetDatum(ing->cube->relid);
	values[2] = Int32GetDatum(sc_source_kafka_partition(m->partition));
	values[3] = Int64GetDatum(m->offset);
	values[4] = sc_bytea(m->payload, m->len, &nulls[4]);
	values[5] = CStringGetTextDatum(sc_valid_text(error));
	values[6] = sc_bytea(m->key, m->key_len, &nulls[6]);
	values[7] = CStringGetTextDatum(sc_kafka_source_topic(&ing->cube->topics, m->partition));

	sc_catalog_enter(&save);
	ret = SPI_execute_plan(ing->dead_letter_plan, values, nulls, false, 0);
	sc_catalog_leave(&save);
	if (ret != SPI_OK_INSERT)
		elog(ERROR, "could not record a dead letter: %s", SPI_result_code_string(ret));
}

