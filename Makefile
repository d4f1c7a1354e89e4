# streamcube — PGXS build
#
#   make && make install          build and install into the pg_config found
#   test/run-tests                the whole test suite (see README.md)
#
# PG_CONFIG may point at another installation: make PG_CONFIG=/path/pg_config

MODULE_big = streamcube
EXTENSION  = streamcube
DATA       = $(wildcard sql/streamcube--*.sql)
PGFILEDESC = "streamcube - Kafka topics as real-time OLAP tables"

OBJS = \
	src/streamcube.o \
	src/guc.o \
	src/shmem.o \
	src/kafka.o \
	src/kafka_consumer.o \
	src/json_text.o \
	src/avro_schema.o \
	src/avro.o \
	src/protobuf_build.o \
	src/protobuf_descriptor.o \
	src/protobuf_text.o \
	src/protobuf_schema.o \
	src/protobuf_plan.o \
	src/protobuf_wire.o \
	src/protobuf.o \
	src/registry.o \
	src/catalog.o \
	src/ownership.o \
	src/cluster.o \
	src/launcher.o \
	src/cube.o \
	src/topics.o \
	src/cube_sql.o \
	src/cube_options.o \
	src/cube_catalog.o \
	src/positions.o \
	src/stops.o \
	src/segments.o \
	src/rewrite.o \
	src/sealed.o \
	src/rollup_def.o \
	src/rollups.o \
	src/rollup_agg.o \
	src/seal.o \
	src/compact.o \
	src/maintenance.o \
	src/drops.o \
	src/format.o \
	src/format_line.o \
	src/format_meta.o \
	src/format_json.o \
	src/format_csv.o \
	src/format_registry.o \
	src/ingest_windows.o \
	src/ingest_copy.o \
	src/ingest_direct.o \
	src/ingest_write.o \
	src/ingest.o \
	src/ingest_rollup.o \
	src/receiver.o src/receiver_control.o src/receiver_kafka.o \
	src/reassign.o \
	src/reassign_topics.o \
	src/consumers.o \
	src/rollup_sql.o \
	src/node_conn.o \
	src/nodes.o \
	src/placement.o

# -Wextra, less the two warnings that PostgreSQL's own headers and
# PG_FUNCTION_ARGS trigger.
PG_CPPFLAGS = -I$(srcdir)/src -Wall -Wextra -Werror -Wno-unused-parameter -Wno-sign-compare
SHLIB_LINK  = -lrdkafka -lcurl -lpthread -lpq

# pg_regress suites run against the private server started by test/run-tests
# (see test/lib/pg.sh); the connection comes from PGHOST / PGPORT.
REGRESS      = setup clusters cubes ingest_json ingest_csv bad_messages control security hardening ownership sealing compaction reassign direct_insert operations metadata topics
REGRESS_OPTS = --use-existing --dbname=postgres

# Isolation specs (test/isolation/specs), run by test/run-tests after the
# pg_regress suites with PostgreSQL's isolation tester.
ISOLATION    = seal_snapshot compact_snapshot bucket_seal_snapshot seal_writes

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# libpq's header (node_conn.c) after the server's headers, so that none of
# the client's copies (pg_config.h, ...) is taken for the server's.
override CPPFLAGS += -I$(shell $(PG_CONFIG) --includedir)

# PGXS tracks no header dependencies; every object depends on our headers.
$(OBJS): $(wildcard src/*.h)
