#!/usr/bin/env python3
"""Reads messages from stdin (one per line, as `kcat -u -f '%s\\n'` prints
them), stamps each with the time it was read, and prints the percentiles of
(read time - the event's ts) in ms: "p50 p90 p99 p99.9 max mean count".
The event's ts is the first CSV field or the JSON key "ts" (UTC, ISO 8601
with milliseconds and a trailing Z, as test/tools/sckafka writes it)."""
import calendar
import sys
import time

lat = []
for line in sys.stdin:
    now = time.time()
    if line.startswith("{"):
        i = line.index('"ts":"') + 6
        ts = line[i:i + 24]
    else:
        ts = line[:24]
    # 2026-11-29T09:10:47.963Z
    secs = calendar.timegm((int(ts[0:4]), int(ts[5:7]), int(ts[8:10]),
                            int(ts[11:13]), int(ts[14:16]), int(ts[17:19]), 0, 0, 0))
    lat.append((now - secs - int(ts[20:23]) / 1000.0) * 1000.0)
lat.sort()
n = len(lat)
if n == 0:
    print("nan nan nan nan nan nan 0")
else:
    q = lambda p: lat[min(n - 1, int(p * n))]
    print("%.1f %.1f %.1f %.1f %.1f %.1f %d" % (q(0.5), q(0.9), q(0.99), q(0.999), lat[-1],
                                             sum(lat) / n, n))
