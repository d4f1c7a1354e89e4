/*-------------------------------------------------------------------------
 *
 * protobuf_plan.c
 *		Which fields of a Protobuf message type feed which columns
 *		(sc_proto_plan), and what the field at a path writes
 *		(sc_proto_path_classes, sc_proto_has_path).
 *
 * The plan (ScPbPlanMsg) mirrors the messages on the columns' paths and
 * says, per field, which columns take it and whether a path goes on into
 * it.  Fields no column wants are not read, but the top message's pass
 * checks all of it as the reference parsers do (the wire format of every
 * message inside, the UTF-8 of proto3 strings: sc_pb_check), so that a
 * message is refused or not, for the same reason, whatever the columns.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "protobuf_internal.h"

/* The message type at indexes: into the file's messages, then nested ones. */
static const ScPbMessage *
sc_pb_indexed(const ScProtoSchema *schema, const int *indexes, int nindexes)
{
	List	   *list = schema->main->messages;
	const ScPbMessage *m = NULL;

	if (nindexes < 1)
		return NULL;
	for (int i = 0; i < nindexes; i++)
	{
		if (indexes[i] < 0 || indexes[i] >= list_length(list))
			return NULL;
		m = list_nth(list, indexes[i]);
		list = m->nested;
	}
	return m;
}

static int
sc_pb_field_named(const ScPbMessage *m, const char *name)
{
	for (int i = 0; i < m->nfields; i++)
		if (strcmp(m->fields[i].name, name) == 0)
			return i;
	return -1;
}

/* The classes of text (SC_VALUE_*) a field writes; its type's name into name. */
static int
sc_pb_field_classes(const ScPbField *f, StringInfo name)
{
	if (f->label == SC_PB_LABEL_REPEATED)
	{
		appendStringInfo(name, "repeated %s", f->message && f->message->map_entry ? "map" : sc_pb_type_names[f->type]);
		return SC_VALUE_JSON;
	}
	if (f->message != NULL)
	{
		appendStringInfoString(name, f->message->fullname);
		switch (f->message->wkt)
		{
			case SC_PB_WKT_TIMESTAMP:
				return SC_VALUE_TIME;
			case SC_PB_WKT_DURATION:
				return SC_VALUE_STRING;
			case SC_PB_WKT_WRAPPER:
				resetStringInfo(name);
				return f->message->nfields > 0
					? sc_pb_field_classes(&f->message->fields[0], name) : SC_VALUE_JSON;
			default:
				return SC_VALUE_JSON;
		}
	}
	appendStringInfoString(name, sc_pb_type_names[f->type]);
	switch (f->type)
	{
		case SC_PB_BOOL:
			return SC_VALUE_BOOL;
		case SC_PB_STRING:
		case SC_PB_ENUM:
			return SC_VALUE_STRING;
		case SC_PB_BYTES:
			return SC_VALUE_BYTES;
		default:
			return SC_VALUE_NUMBER;
	}
}

/* A field a path may go on into: a singular message (or group). */
static inline bool
sc_pb_path_message(const ScPbField *f)
{
	return f->message != NULL && f->label != SC_PB_LABEL_REPEATED;
}

bool
sc_proto_has_path(const ScProtoSchema *schema, const int *indexes, int nindexes,
				  char **path, int pathlen)
{
	const ScPbMessage *m = sc_pb_indexed(schema, indexes, nindexes);

	for (int l = 0; l < pathlen; l++)
	{
		int			i;

		if (m == NULL || (i = sc_pb_field_named(m, path[l])) < 0)
			return false;
		m = sc_pb_path_message(&m->fields[i]) ? m->fields[i].message : NULL;
	}
	return m != NULL || pathlen > 0;
}

/*
 * The classes of text (SC_VALUE_*) the field at path of the message type at
 * indexes writes, and its type's name into *type_name; -1 when there is
 * no such field.  pathlen 0: the whole message (JSON).
 */
int
sc_proto_path_classes(const ScProtoSchema *schema, const int *indexes, int nindexes,
					  char **path, int pathlen, char **type_name)
{
	const ScPbMessage *m = sc_pb_indexed(schema, indexes, nindexes);
	const ScPbField *f = NULL;
	StringInfoData name;

	if (m == NULL)
		return -1;
	for (int l = 0; l < pathlen; l++)
	{
		int			i;

		if (m == NULL || (i = sc_pb_field_named(m, path[l])) < 0)
			return -1;
		f = &m->fields[i];
		m = sc_pb_path_message(f) ? f->message : NULL;
	}
	initStringInfo(&name);
	*type_name = name.data;
	if (f == NULL)
	{
		appendStringInfoString(&name, "message");
		*type_name = name.data;
		return SC_VALUE_JSON;
	}
	{
		int			classes = sc_pb_field_classes(f, &name);

		*type_name = name.data;
		return classes;
	}
}

static ScPbPlanMsg *
sc_pb_plan_msg_new(const ScPbMessage *m)
{
	ScPbPlanMsg *pm = palloc0(sizeof(ScPbPlanMsg));

	pm->message = m;
	pm->fields = palloc0(sizeof(ScPbPlanField) * (m->nfields + 1));
	pm->note = palloc0(sizeof(bool) * (m->nfields + 1));
	pm->wanted = palloc0(sizeof(int) * (m->nfields + 1));
	pm->wanted_at = palloc(sizeof(int) * (m->nfields + 1));
	return pm;
}

/*
 * The fields wanted, and those to note: the wanted and their oneofs'
 * members.  A message is read in one pass when every field wanted is
 * singular, in no oneof, not a group, and has no path going on into it (a
 * column takes its whole value): a field then never needs to know about
 * another.
 */
static void
sc_pb_plan_finish(ScPbPlanMsg *pm)
{
	const ScPbMessage *m = pm->message;

	pm->one_pass = true;
	for (int i = 0; i < m->nfields; i++)
	{
		const ScPbField *f = &m->fields[i];

		pm->wanted_at[i] = -1;
		if (pm->fields[i].ncols == 0 && pm->fields[i].sub == NULL)
			continue;
		if (f->label == SC_PB_LABEL_REPEATED || f->oneof >= 0 || f->wt == SC_PB_WT_SGROUP ||
			pm->fields[i].sub != NULL || pm->nwanted >= 63)
			pm->one_pass = false;
		pm->fields[i].scalar = f->label != SC_PB_LABEL_REPEATED &&
			(f->message == NULL || f->message->wkt == SC_PB_WKT_TIMESTAMP ||
			 f->message->wkt == SC_PB_WKT_WRAPPER);
		pm->wanted_at[i] = pm->nwanted;
		pm->wanted[pm->nwanted++] = i;
		pm->note[i] = true;
		if (m->fields[i].oneof >= 0)
			for (int k = 0; k < m->nfields; k++)
				if (m->fields[k].oneof == m->fields[i].oneof)
					pm->note[k] = true;
		if (pm->fields[i].sub != NULL)
			sc_pb_plan_finish(pm->fields[i].sub);
	}
}

static const char *
sc_pb_path_text(char **const path, int len)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < len; i++)
		appendStringInfo(&buf, "%s%s", i > 0 ? "." : "", path[i]);
	return buf.data;
}

ScProtoPlan *
sc_proto_plan(const ScProtoSchema *schema, const int *indexes, int nindexes,
			  int ncolumns, char **const *paths, const int *pathlens, char **error)
{
	ScProtoPlan *plan = palloc0(sizeof(ScProtoPlan));
	const ScPbMessage *top = sc_pb_indexed(schema, indexes, nindexes);

	if (top == NULL)
	{
		StringInfoData buf;

		initStringInfo(&buf);
		for (int i = 0; i < nindexes; i++)
			appendStringInfo(&buf, "%s%d", i > 0 ? ", " : "", indexes[i]);
		*error = psprintf("message indexes [%s] name no message type of the schema", buf.data);
		return NULL;
	}
	plan->schema = schema;
	plan->message = top;
	plan->ncolumns = ncolumns;
	plan->top = sc_pb_plan_msg_new(top);
	plan->whole = palloc0(sizeof(int) * (ncolumns + 1));

	for (int c = 0; c < ncolumns; c++)
	{
		ScPbPlanMsg *pm = plan->top;

		if (pathlens[c] == 0)
		{
			plan->whole[plan->nwhole++] = c;
			continue;
		}
		for (int level = 0; level < pathlens[c]; level++)
		{
			const ScPbMessage *m = pm->message;
			int			i = sc_pb_field_named(m, paths[c][level]);
			ScPbPlanField *pf;
			const ScPbField *f;

			if (i < 0)
				break;			/* not in this type: NULL */
			pf = &pm->fields[i];
			f = &m->fields[i];
			if (level == pathlens[c] - 1)
			{
				pf->cols = pf->cols ? repalloc(pf->cols, sizeof(int) * (pf->ncols + 1)) :
					palloc(sizeof(int));
				pf->cols[pf->ncols++] = c;
				break;
			}
			if (!sc_pb_path_message(f))
			{
				*error = psprintf("field \"%s\" is %s%s, not a message: there is no field \"%s\" in it",
								  sc_pb_path_text(paths[c], level + 1),
								  f->label == SC_PB_LABEL_REPEATED ? "repeated " : "of type ",
								  f->message && f->message->map_entry ? "map" :
								  f->message ? f->message->fullname :
								  f->enumtype ? f->enumtype->fullname : sc_pb_type_names[f->type],
								  paths[c][level + 1]);
				return NULL;
			}
			if (pf->sub == NULL)
				pf->sub = sc_pb_plan_msg_new(f->message);
			pm = pf->sub;
		}
	}
	sc_pb_plan_finish(plan->top);
	return plan;
}
