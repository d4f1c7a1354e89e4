#!/usr/bin/env python3
"""Reads messages from stdin (one per line, as `kcat -u -f '%s\\n'` prints
them), stamps each with the time it was read, and prints the percentiles of
(read time - the event's ts) in ms over the measured part of the stream:
"p50 p90 p99 p99.9 max mean count", then, after " | ", the p99 of each
second of the whole stream (by the events' ts, from the first one on) and,
after another " | ", the p99 of the lead-in.  The lead-in is the first
LEAD seconds of the stream (argument 1, default 0), left out of the
measured part as test/bench/ingest leaves it out of the receiver's figures,
so the two can be compared second by second.
The event's ts is the first CSV field or the JSON key "ts" (UTC, ISO 8601
with milliseconds and a trailing Z, as test/tools/sckafka writes it).
With a second argument "avro", stdin holds bare Avro records instead, each
after its length as `kcat -f '%R%s'` prints them (4 bytes, big-endian), and
the ts is the record's first field, a timestamp-millis long (a zig-zag
varint)."""
import calendar
import struct
import sys
import time


def avro_records(stream):
    """Yields (time read, event time in s) of each length-prefixed record."""
    while True:
        head = stream.read(4)
        if len(head) < 4:
            return
        (n,) = struct.unpack(">i", head)
        record = stream.read(n) if n > 0 else b""
        now = time.time()
        u = shift = 0
        for b in record:
            u |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        yield now, ((u >> 1) ^ -(u & 1)) / 1000.0


def p(values, q):
    return values[min(len(values) - 1, int(q * len(values)))]


lead = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
rows = []   # (event time in s, latency in ms)
avro = len(sys.argv) > 2 and sys.argv[2] == "avro"
for now, secs in avro_records(sys.stdin.buffer) if avro else ():
    rows.append((secs, (now - secs) * 1000.0))
for line in () if avro else sys.stdin:
    now = time.time()
    if line.startswith("{"):
        i = line.index('"ts":"') + 6
        ts = line[i:i + 24]
    else:
        ts = line[:24]
    # 2026-11-29T09:10:47.963Z
    secs = calendar.timegm((int(ts[0:4]), int(ts[5:7]), int(ts[8:10]),
                            int(ts[11:13]), int(ts[14:16]), int(ts[17:19]), 0, 0, 0))
    secs += int(ts[20:23]) / 1000.0
    rows.append((secs, (now - secs) * 1000.0))
first = min(t for t, _ in rows) if rows else 0.0
lat = sorted(ms for t, ms in rows if t >= first + lead)
if not lat:
    print("nan nan nan nan nan nan 0 | | nan")
    sys.exit(0)
n = len(lat)
per_sec = {}
for t, ms in rows:
    per_sec.setdefault(int(t - first), []).append(ms)
seconds = " ".join("%.0f" % p(sorted(per_sec[s]), 0.99) for s in sorted(per_sec))
lead_in = sorted(ms for t, ms in rows if t < first + lead)
print("%.1f %.1f %.1f %.1f %.1f %.1f %d | %s | %s" % (
    p(lat, 0.5), p(lat, 0.9), p(lat, 0.99), p(lat, 0.999), lat[-1], sum(lat) / n, n,
    seconds, "%.1f" % p(lead_in, 0.99) if lead_in else "nan"))
