#!/usr/bin/env python3
"""Summarise a `perf record --call-graph dwarf` profile of a streamcube receiver.

    perf-summary.py PERF_DATA [--top N]

Prints, from `perf script` output:
  - the share of samples per thread (the receiver's main thread is named
    "postgres", librdkafka's threads "rdk:...");
  - the top N functions by self time;
  - the top N functions by inclusive time (a function counts once per sample
    in which it is anywhere on the stack), leaving out the frames every
    sample of the main loop goes through (main, PostmasterMain, ...).
  - the inclusive share of a few phases of the hot path that the benchmark
    report refers to.
Unresolved frames (hex addresses) are folded into "[unknown in DSO]".
"""
import collections
import re
import subprocess
import sys

PHASES = [
    ("receiver main loop", "sc_receiver_run"),
    ("  batch processing (sc_receiver_process)", "sc_receiver_process"),
    ("    sc_ingest_batch", "sc_ingest_batch"),
    ("      message -> COPY line, CSV (sc_csv_line)", "sc_csv_line"),
    ("      message -> COPY line, JSON (sc_json_line)", "sc_json_line"),
    ("        JSON parse (pg_parse_json)", "pg_parse_json"),
    ("        time value pre-parse (sc_parse_time)", "sc_parse_time"),
    ("        per-message StringInfo (initStringInfo)", "initStringInfo"),
    ("        token copies (pstrdup)", "pstrdup"),
    ("      COPY (CopyFrom)", "CopyFrom"),
    ("        parse + type input (NextCopyFrom)", "NextCopyFrom"),
    ("          timestamptz_in", "timestamptz_in"),
    ("          numeric_in", "numeric_in"),
    ("        heap_multi_insert", "heap_multi_insert"),
    ("        partition routing (ExecFindPartition)", "ExecFindPartition"),
    ("    commit (CommitTransactionCommand)", "CommitTransactionCommand"),
    ("    position update (sc_receiver_advance)", "sc_receiver_advance"),
    ("  collect batch (sc_receiver_collect)", "sc_receiver_collect"),
    ("    sc_kafka_consumer_poll", "sc_kafka_consumer_poll"),
    ("    rd_kafka_message_destroy", "rd_kafka_message_destroy"),
    ("page faults (asm_exc_page_fault)", "asm_exc_page_fault"),
    ("malloc/free (libc)", "@malloc"),
]
BORING = {"_start", "main", "PostmasterMain", "__libc_start_main_impl",
          "__libc_start_call_main", "StartBackgroundWorker", "sc_receiver_main",
          "__GI___select", "ServerLoop", "start_thread", "clone3", "clone",
          "[unknown in postgres]", "[unknown in [unknown]]"}
MALLOC = {"malloc", "free", "_int_malloc", "_int_free", "__libc_malloc",
          "__libc_free", "realloc", "_int_realloc", "__libc_calloc", "calloc",
          "malloc_consolidate", "sysmalloc", "__libc_realloc", "systrim",
          "unlink_chunk", "_int_free_merge_chunk", "_int_free_create_chunk",
          "cfree@GLIBC_2.2.5"}

FRAME = re.compile(r"^\s+([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$")


def frame_name(sym, dso):
    sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
    sym = sym.replace(" (inlined)", "")
    if sym in ("[unknown]", "") or re.fullmatch(r"0x[0-9a-f]+", sym):
        base = dso.rsplit("/", 1)[-1].replace(" (deleted)", "")
        return "[unknown in %s]" % base
    return sym


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    top = 25
    if "--top" in sys.argv:
        top = int(sys.argv[sys.argv.index("--top") + 1])
    out = subprocess.run(["perf", "script", "-i", sys.argv[1], "-F", "comm,tid,ip,sym,dso"],
                         capture_output=True, text=True, errors="replace").stdout
    samples = []
    cur = None
    for line in out.splitlines():
        if not line.strip():
            if cur is not None:
                samples.append(cur)
                cur = None
            continue
        m = FRAME.match(line)
        if m and cur is not None:
            cur[1].append(frame_name(m.group(2), m.group(3)))
        elif not line.startswith((" ", "\t")):
            cur = (line.split()[0], [])
    if cur is not None:
        samples.append(cur)
    total = len(samples)
    if total == 0:
        print("no samples")
        return
    threads = collections.Counter(c for c, _ in samples)
    self_ = collections.Counter()
    incl = collections.Counter()
    for comm, frames in samples:
        if frames:
            self_[frames[0]] += 1
        seen = set(frames)
        if seen & MALLOC:
            seen.add("@malloc")
        for f in seen:
            incl[f] += 1
    pct = lambda n: 100.0 * n / total
    print("samples: %d" % total)
    print("threads:")
    for c, n in threads.most_common():
        print("  %6.2f%%  %s" % (pct(n), c))
    print("phases (inclusive):")
    for label, sym in PHASES:
        if incl[sym]:
            print("  %6.2f%%  %s" % (pct(incl[sym]), label))
    print("top %d by self time:" % top)
    for f, n in self_.most_common(top):
        print("  %6.2f%%  %s" % (pct(n), f))
    print("top %d by inclusive time:" % top)
    shown = 0
    for f, n in incl.most_common():
        if f in BORING or f == "@malloc":
            continue
        print("  %6.2f%%  %s" % (pct(n), f))
        shown += 1
        if shown == top:
            break


if __name__ == "__main__":
    main()
