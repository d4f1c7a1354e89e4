/*-------------------------------------------------------------------------
 *
 * format.c
 *		The formats' registry: the one list of formats, by ScFormat.
 *
 * See format.h for what a format is.  Adding one is a file that fills an
 * ScFormatRoutine and a case here.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "format.h"

/* The routine of a cube's format. */
const ScFormatRoutine *
sc_format_routine(ScFormat format)
{
	switch (format)
	{
		case SC_FORMAT_JSON:
			return &sc_format_json;
		case SC_FORMAT_JSONB:
			return &sc_format_jsonb;
		case SC_FORMAT_CSV:
			return &sc_format_csv;
		case SC_FORMAT_AVRO:
			return &sc_format_avro;
		case SC_FORMAT_PROTOBUF:
			return &sc_format_protobuf;
	}
	elog(ERROR, "unknown message format %d", (int) format);
	return NULL;				/* keep the compiler quiet */
}
