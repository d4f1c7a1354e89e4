/*-------------------------------------------------------------------------
 *
 * json_text.c
 *		JSON text the decoders of formats with schemas (avro.c,
 *		protobuf.c) write for composite values: one string escape for both.
 *
 *-------------------------------------------------------------------------
 */
#include "streamcube.h"

#include "lib/stringinfo.h"

/* s, len bytes of valid UTF-8 without NUL, as a JSON string. */
void
sc_json_string_bytes(StringInfo out, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t		run = 0;

	enlargeStringInfo(out, len + 2);
	appendStringInfoCharMacro(out, '"');
	for (size_t i = 0; i < len; i++)
	{
		unsigned char c = s[i];
		char		esc[7];
		int			n = 2;

		if (likely(c >= 0x20 && c != '"' && c != '\\'))
			continue;
		appendBinaryStringInfo(out, s + run, i - run);
		run = i + 1;
		esc[0] = '\\';
		switch (c)
		{
			case '"':
			case '\\':
				esc[1] = c;
				break;
			case '\b':
				esc[1] = 'b';
				break;
			case '\f':
				esc[1] = 'f';
				break;
			case '\n':
				esc[1] = 'n';
				break;
			case '\r':
				esc[1] = 'r';
				break;
			case '\t':
				esc[1] = 't';
				break;
			default:
				memcpy(esc + 1, "u00", 3);
				esc[4] = hex[c >> 4];
				esc[5] = hex[c & 15];
				n = 6;
				break;
		}
		appendBinaryStringInfo(out, esc, n);
	}
	appendBinaryStringInfo(out, s + run, len - run);
	appendStringInfoCharMacro(out, '"');
}
