#!/usr/bin/env python3
# test/bench/proto-events.py: the benchmark's events as Confluent-framed
# Protobuf messages, for test/bench/ingest --formats ...,protobuf.
#
#   proto-events.py schema --shape wide|narrow
#       prints the .proto text of the events
#   proto-events.py copy --bootstrap B --from CSV_TOPIC --to TOPIC --count N
#                        --shape wide|narrow --schema-id ID
#       reads N messages of the CSV topic (sckafka produce --format csv)
#       and produces each as one framed Protobuf message to the same
#       partition of TOPIC: byte 0, the schema id (4 bytes, big-endian),
#       the message-index array [0] (one 0 byte), the message.  The same
#       events as the CSV and JSON topics, so that COPY FROM the CSV rows
#       is their baseline.
#
# The messages are encoded here, field by field (the wire format is
# small), so that no .proto compiler is needed.  Needs confluent_kafka:
# run it with the Python of test/registry/.venv (registry.sh venv).

import argparse
import calendar
import struct
import sys
import time

WIDE = '''syntax = "proto3";
package bench;
import "google/protobuf/timestamp.proto";
message Event {
  google.protobuf.Timestamp ts = 1;
  string country = 2;
  string device = 3;
  double amount = 4;
  int32 qty = 5;
}
'''

NARROW = '''syntax = "proto3";
package bench;
import "google/protobuf/timestamp.proto";
message Event {
  google.protobuf.Timestamp ts = 1;
  string k = 2;
  int64 v = 3;
}
'''


def varint(n):
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7f) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def length_delimited(field, payload):
    return key(field, 2) + varint(len(payload)) + payload


def timestamp(text):
    # "2026-11-29T08:00:00.123Z"
    secs = calendar.timegm(time.strptime(text[:19], '%Y-%m-%dT%H:%M:%S'))
    millis = int(text[20:23]) if len(text) > 20 and text[19] == '.' else 0
    body = key(1, 0) + varint(secs)
    if millis:
        body += key(2, 0) + varint(millis * 1000000)
    return body


def encode(line, shape):
    f = line.split(',')
    out = length_delimited(1, timestamp(f[0]))
    if shape == 'narrow':
        out += length_delimited(2, f[1].encode())
        out += key(3, 0) + varint(int(f[2]))
    else:
        out += length_delimited(2, f[1].encode())
        out += length_delimited(3, f[2].encode())
        out += key(4, 1) + struct.pack('<d', float(f[3]))
        out += key(5, 0) + varint(int(f[4]))
    return out


def copy(args):
    from confluent_kafka import Consumer, Producer, TopicPartition
    frame = bytes([0]) + struct.pack('>I', args.schema_id) + bytes([0])
    c = Consumer({'bootstrap.servers': args.bootstrap, 'group.id': 'bench-proto',
                  'enable.auto.commit': False, 'queued.min.messages': 1000000})
    md = c.list_topics(args.source, timeout=30)
    c.assign([TopicPartition(args.source, p, 0) for p in md.topics[args.source].partitions])
    p = Producer({'bootstrap.servers': args.bootstrap, 'linger.ms': 5,
                  'compression.type': 'lz4', 'queue.buffering.max.messages': 1000000})
    done = 0
    t0 = time.time()
    while done < args.count:
        batch = c.consume(10000, 10)
        if not batch:
            break
        for m in batch:
            if m.error():
                continue
            value = frame + encode(m.value().decode(), args.shape)
            while True:
                try:
                    p.produce(args.target, value, partition=m.partition())
                    break
                except BufferError:
                    p.poll(0.1)
            done += 1
        p.poll(0)
    left = p.flush(60)
    c.close()
    if done != args.count or left:
        sys.exit('proto-events: copied %d of %d messages, %d undelivered' % (done, args.count, left))
    print('produced %d messages in %.1f s' % (done, time.time() - t0))


def main():
    ap = argparse.ArgumentParser(description="the benchmark's events as framed Protobuf")
    sub = ap.add_subparsers(dest='cmd', required=True)
    s = sub.add_parser('schema')
    s.add_argument('--shape', choices=['wide', 'narrow'], default='wide')
    c = sub.add_parser('copy')
    c.add_argument('--bootstrap', required=True)
    c.add_argument('--from', dest='source', required=True)
    c.add_argument('--to', dest='target', required=True)
    c.add_argument('--count', type=int, required=True)
    c.add_argument('--shape', choices=['wide', 'narrow'], default='wide')
    c.add_argument('--schema-id', type=int, default=1)
    args = ap.parse_args()
    if args.cmd == 'schema':
        sys.stdout.write(NARROW if args.shape == 'narrow' else WIDE)
    else:
        copy(args)


main()
