/*
 * librdkafka 2.0.2 properties by class; strcmp() order, for bsearch().
 * "topic.X" entries exist because rd_kafka_conf_set() hands unknown global
 * names to the default topic conf, and rd_kafka_topic_conf_set() strips a
 * leading "topic.".  Names not listed here must be refused.  The
 * "schema.registry." ones are streamcube's own (the schema registry of
 * format avro, named as Confluent's clients name them): never given to
 * librdkafka.
 */
{"acks", SC_PROP_PRODUCER},                                          /* alias of request.required.acks */
{"allow.auto.create.topics", SC_PROP_ALLOWED},
{"api.version.fallback.ms", SC_PROP_ALLOWED},
{"api.version.request", SC_PROP_ALLOWED},
{"api.version.request.timeout.ms", SC_PROP_ALLOWED},
{"auto.commit.enable", SC_PROP_MANAGED},                             /* topic twin of enable.auto.commit (unused in 2.0.2) */
{"auto.commit.interval.ms", SC_PROP_ALLOWED},                        /* auto commit is off */
{"auto.offset.reset", SC_PROP_MANAGED},
{"background_event_cb", SC_PROP_NOT_TEXT},                           /* callback: dedicated rd_kafka_conf_set_*() only */
{"batch.num.messages", SC_PROP_PRODUCER},
{"batch.size", SC_PROP_PRODUCER},
{"bootstrap.servers", SC_PROP_MANAGED},                              /* alias of metadata.broker.list */
{"broker.address.family", SC_PROP_ALLOWED},
{"broker.address.ttl", SC_PROP_ALLOWED},
{"broker.version.fallback", SC_PROP_ALLOWED},
{"builtin.features", SC_PROP_ALLOWED},                               /* setting it only asserts that the build has these features */
{"check.crcs", SC_PROP_ALLOWED},
{"client.id", SC_PROP_ALLOWED},
{"client.rack", SC_PROP_ALLOWED},
{"client.software.name", SC_PROP_ALLOWED},                           /* hidden; sent to brokers in ApiVersionRequest */
{"client.software.version", SC_PROP_ALLOWED},                        /* hidden; sent to brokers in ApiVersionRequest */
{"closesocket_cb", SC_PROP_NOT_TEXT},                                /* callback: dedicated rd_kafka_conf_set_*() only */
{"compression.codec", SC_PROP_PRODUCER},
{"compression.level", SC_PROP_PRODUCER},
{"compression.type", SC_PROP_PRODUCER},                              /* alias of compression.codec (global and topic) */
{"connect_cb", SC_PROP_NOT_TEXT},                                    /* callback: dedicated rd_kafka_conf_set_*() only */
{"connections.max.idle.ms", SC_PROP_ALLOWED},
{"consume.callback.max.messages", SC_PROP_ALLOWED},                  /* only rd_kafka_consume_callback() */
{"consume_cb", SC_PROP_NOT_TEXT},                                    /* callback */
{"coordinator.query.interval.ms", SC_PROP_ALLOWED},
{"debug", SC_PROP_ALLOWED},                                          /* debug=conf logs unredacted non-_RK_SENSITIVE values to the server log */
{"default_topic_conf", SC_PROP_NOT_TEXT},                            /* pointer */
{"delivery.report.only.error", SC_PROP_PRODUCER},
{"delivery.timeout.ms", SC_PROP_PRODUCER},                           /* alias of message.timeout.ms */
{"dr_cb", SC_PROP_NOT_TEXT},                                         /* callback (producer) */
{"dr_msg_cb", SC_PROP_NOT_TEXT},                                     /* callback (producer) */
{"enable.auto.commit", SC_PROP_MANAGED},
{"enable.auto.offset.store", SC_PROP_MANAGED},
{"enable.gapless.guarantee", SC_PROP_PRODUCER},
{"enable.idempotence", SC_PROP_PRODUCER},
{"enable.partition.eof", SC_PROP_MANAGED},
{"enable.random.seed", SC_PROP_ALLOWED},                             /* srand() once per process; either value is harmless */
{"enable.sasl.oauthbearer.unsecure.jwt", SC_PROP_ALLOWED},
{"enable.sparse.connections", SC_PROP_ALLOWED},                      /* hidden */
{"enable.ssl.certificate.verification", SC_PROP_ALLOWED},            /* weakens only the admin's own connection */
{"enable_sasl_queue", SC_PROP_MANAGED},                              /* hidden; moves SASL callbacks to a queue streamcube does not serve */
{"enabled_events", SC_PROP_MANAGED},                                 /* routes events to the event API: rd_kafka_poll() would no longer serve log/error callbacks */
{"error_cb", SC_PROP_NOT_TEXT},                                      /* callback: dedicated rd_kafka_conf_set_*() only */
{"fetch.error.backoff.ms", SC_PROP_ALLOWED},
{"fetch.max.bytes", SC_PROP_ALLOWED},
{"fetch.message.max.bytes", SC_PROP_ALLOWED},
{"fetch.min.bytes", SC_PROP_ALLOWED},
{"fetch.wait.max.ms", SC_PROP_ALLOWED},
{"group.id", SC_PROP_MANAGED},
{"group.instance.id", SC_PROP_MANAGED},                              /* static membership id would be shared by every receiver of the cluster */
{"group.protocol.type", SC_PROP_ALLOWED},                            /* unused by manual assign() */
{"heartbeat.interval.ms", SC_PROP_ALLOWED},
{"interceptors", SC_PROP_LOADS_CODE},                                /* internal, not settable from text; plugins' interceptors */
{"internal.termination.signal", SC_PROP_MANAGED},                    /* rd_kafka_new() installs a process-wide sigaction for it, replacing PostgreSQL's handler */
{"isolation.level", SC_PROP_ALLOWED},                                /* also changes what query_watermark_offsets() and EOF report (LSO vs HWM) */
{"linger.ms", SC_PROP_PRODUCER},                                     /* alias of queue.buffering.max.ms */
{"log.connection.close", SC_PROP_ALLOWED},
{"log.queue", SC_PROP_MANAGED},                                      /* logs must be queued and served on the backend thread */
{"log.thread.name", SC_PROP_ALLOWED},
{"log_cb", SC_PROP_NOT_TEXT},                                        /* callback: dedicated rd_kafka_conf_set_*() only */
{"log_level", SC_PROP_ALLOWED},
{"max.in.flight", SC_PROP_ALLOWED},                                  /* alias of max.in.flight.requests.per.connection */
{"max.in.flight.requests.per.connection", SC_PROP_ALLOWED},
{"max.partition.fetch.bytes", SC_PROP_ALLOWED},                      /* alias of fetch.message.max.bytes */
{"max.poll.interval.ms", SC_PROP_ALLOWED},
{"message.copy.max.bytes", SC_PROP_ALLOWED},
{"message.max.bytes", SC_PROP_ALLOWED},
{"message.send.max.retries", SC_PROP_PRODUCER},
{"message.timeout.ms", SC_PROP_PRODUCER},
{"metadata.broker.list", SC_PROP_MANAGED},                           /* bootstrap list is streamcube_add_cluster()'s second argument */
{"metadata.max.age.ms", SC_PROP_ALLOWED},
{"metadata.request.timeout.ms", SC_PROP_ALLOWED},                    /* hidden, deprecated, unused */
{"msg_order_cmp", SC_PROP_NOT_TEXT},                                 /* callback (producer) */
{"oauthbearer_token_refresh_cb", SC_PROP_NOT_TEXT},                  /* callback: dedicated rd_kafka_conf_set_*() only */
{"offset.store.method", SC_PROP_MANAGED},                            /* global twin; positions live in PostgreSQL */
{"offset.store.path", SC_PROP_MANAGED},                              /* file offset store creates/writes files on the server */
{"offset.store.sync.interval.ms", SC_PROP_ALLOWED},                  /* inert unless the file store is used */
{"offset_commit_cb", SC_PROP_NOT_TEXT},                              /* callback */
{"opaque", SC_PROP_NOT_TEXT},                                        /* pointer; streamcube's event buffer */
{"open_cb", SC_PROP_NOT_TEXT},                                       /* callback: dedicated rd_kafka_conf_set_*() only */
{"partition.assignment.strategy", SC_PROP_ALLOWED},                  /* unused by manual assign() */
{"partitioner", SC_PROP_PRODUCER},
{"partitioner_cb", SC_PROP_NOT_TEXT},                                /* callback (producer) */
{"plugin.library.paths", SC_PROP_LOADS_CODE},                        /* dlopen()ed by rd_kafka_conf_set() itself */
{"produce.offset.report", SC_PROP_PRODUCER},
{"queue.buffering.backpressure.threshold", SC_PROP_PRODUCER},
{"queue.buffering.max.kbytes", SC_PROP_PRODUCER},
{"queue.buffering.max.messages", SC_PROP_PRODUCER},
{"queue.buffering.max.ms", SC_PROP_PRODUCER},
{"queued.max.messages.kbytes", SC_PROP_MANAGED},
{"queued.min.messages", SC_PROP_ALLOWED},                            /* streamcube defers to the cluster's value */
{"queuing.strategy", SC_PROP_PRODUCER},
{"rebalance_cb", SC_PROP_NOT_TEXT},                                  /* callback */
{"receive.message.max.bytes", SC_PROP_ALLOWED},
{"reconnect.backoff.jitter.ms", SC_PROP_ALLOWED},
{"reconnect.backoff.max.ms", SC_PROP_ALLOWED},
{"reconnect.backoff.ms", SC_PROP_ALLOWED},
{"request.required.acks", SC_PROP_PRODUCER},
{"request.timeout.ms", SC_PROP_PRODUCER},
{"resolve_cb", SC_PROP_NOT_TEXT},                                    /* callback: dedicated rd_kafka_conf_set_*() only */
{"retries", SC_PROP_PRODUCER},                                       /* alias of message.send.max.retries */
{"retry.backoff.ms", SC_PROP_PRODUCER},                              /* P in CONFIGURATION.md 2.0.2 (though rd_kafka_buf_retry uses it for all requests) */
{"sasl.kerberos.keytab", SC_PROP_RUNS_PROGRAM},                      /* substituted into the default kinit.cmd inside "..."; $(...) still runs */
{"sasl.kerberos.kinit.cmd", SC_PROP_RUNS_PROGRAM},                   /* system() from the rdkafka main thread; %{any.property} expanded raw */
{"sasl.kerberos.min.time.before.relogin", SC_PROP_ALLOWED},          /* timing only; 0 disables kinit */
{"sasl.kerberos.principal", SC_PROP_RUNS_PROGRAM},                   /* substituted unquoted into the default kinit.cmd run by system() */
{"sasl.kerberos.service.name", SC_PROP_ALLOWED},                     /* not in the default kinit.cmd */
{"sasl.mechanism", SC_PROP_ALLOWED},                                 /* alias of sasl.mechanisms */
{"sasl.mechanisms", SC_PROP_ALLOWED},
{"sasl.oauthbearer.client.id", SC_PROP_ALLOWED},                     /* refused by Debian's build (no libcurl) */
{"sasl.oauthbearer.client.secret", SC_PROP_SECRET},                  /* refused by Debian's build; NOT flagged sensitive by librdkafka */
{"sasl.oauthbearer.config", SC_PROP_SECRET},
{"sasl.oauthbearer.extensions", SC_PROP_ALLOWED},                    /* refused by Debian's build (no libcurl) */
{"sasl.oauthbearer.method", SC_PROP_ALLOWED},                        /* oidc needs libcurl: refused by Debian's build */
{"sasl.oauthbearer.scope", SC_PROP_ALLOWED},                         /* refused by Debian's build (no libcurl) */
{"sasl.oauthbearer.token.endpoint.url", SC_PROP_ALLOWED},            /* curl limited to http/https, no redirects; refused by Debian's build */
{"sasl.password", SC_PROP_SECRET},
{"sasl.username", SC_PROP_ALLOWED},
{"schema.registry.basic.auth.user.info", SC_PROP_SECRET},          /* streamcube's: the registry's user:password (format avro) */
{"schema.registry.ssl.ca.location", SC_PROP_READS_FILE},             /* streamcube's: CA file for an https registry */
{"schema.registry.url", SC_PROP_ALLOWED},                            /* streamcube's: the registry's URLs (http, https only) */
{"security.protocol", SC_PROP_ALLOWED},                              /* SASL_* + default GSSAPI: kinit runs only if keytab set (else rd_kafka_new fails) unless relogin=0 */
{"session.timeout.ms", SC_PROP_ALLOWED},
{"socket.blocking.max.ms", SC_PROP_ALLOWED},
{"socket.connection.setup.timeout.ms", SC_PROP_ALLOWED},
{"socket.keepalive.enable", SC_PROP_ALLOWED},
{"socket.max.fails", SC_PROP_ALLOWED},
{"socket.nagle.disable", SC_PROP_ALLOWED},
{"socket.receive.buffer.bytes", SC_PROP_ALLOWED},
{"socket.send.buffer.bytes", SC_PROP_ALLOWED},
{"socket.timeout.ms", SC_PROP_ALLOWED},
{"socket_cb", SC_PROP_NOT_TEXT},                                     /* callback: dedicated rd_kafka_conf_set_*() only */
{"ssl.ca.certificate.stores", SC_PROP_ALLOWED},                      /* Windows only; refused by this build */
{"ssl.ca.location", SC_PROP_READS_FILE},                             /* file or directory; the value "probe" only stats/reads fixed system CA paths */
{"ssl.ca.pem", SC_PROP_ALLOWED},                                     /* public CA certs (librdkafka flags it sensitive anyway) */
{"ssl.certificate.location", SC_PROP_READS_FILE},
{"ssl.certificate.pem", SC_PROP_ALLOWED},
{"ssl.certificate.verify_cb", SC_PROP_NOT_TEXT},                     /* callback: dedicated rd_kafka_conf_set_*() only */
{"ssl.cipher.suites", SC_PROP_ALLOWED},
{"ssl.crl.location", SC_PROP_READS_FILE},
{"ssl.curves.list", SC_PROP_ALLOWED},
{"ssl.endpoint.identification.algorithm", SC_PROP_ALLOWED},
{"ssl.engine.id", SC_PROP_LOADS_CODE},                               /* ENGINE_by_id(); used only with ssl.engine.location */
{"ssl.engine.location", SC_PROP_LOADS_CODE},                         /* dlopen()s an OpenSSL engine */
{"ssl.key.location", SC_PROP_READS_FILE},
{"ssl.key.password", SC_PROP_SECRET},
{"ssl.key.pem", SC_PROP_SECRET},
{"ssl.keystore.location", SC_PROP_READS_FILE},                       /* PKCS#12 file */
{"ssl.keystore.password", SC_PROP_SECRET},
{"ssl.providers", SC_PROP_LOADS_CODE},                               /* OSSL_PROVIDER_load() */
{"ssl.sigalgs.list", SC_PROP_ALLOWED},
{"ssl_ca", SC_PROP_NOT_TEXT},                                        /* internal: rd_kafka_conf_set_ssl_cert() only */
{"ssl_certificate", SC_PROP_NOT_TEXT},                               /* internal: rd_kafka_conf_set_ssl_cert() only */
{"ssl_engine_callback_data", SC_PROP_NOT_TEXT},                      /* pointer */
{"ssl_key", SC_PROP_NOT_TEXT},                                       /* internal: rd_kafka_conf_set_ssl_cert() only */
{"statistics.interval.ms", SC_PROP_ALLOWED},                         /* no stats_cb is set: stats are built then dropped (CPU only) */
{"stats_cb", SC_PROP_NOT_TEXT},                                      /* callback: dedicated rd_kafka_conf_set_*() only */
{"sticky.partitioning.linger.ms", SC_PROP_PRODUCER},
{"test.mock.broker.rtt", SC_PROP_MANAGED},                           /* hidden; mock cluster only */
{"test.mock.num.brokers", SC_PROP_MANAGED},                          /* hidden; replaces bootstrap.servers with an in-process mock cluster */
{"throttle_cb", SC_PROP_NOT_TEXT},                                   /* callback: dedicated rd_kafka_conf_set_*() only */
{"topic.acks", SC_PROP_PRODUCER},                                    /* "topic." prefix, same as acks */
{"topic.auto.commit.enable", SC_PROP_MANAGED},                       /* "topic." prefix, same as auto.commit.enable */
{"topic.auto.commit.interval.ms", SC_PROP_ALLOWED},                  /* "topic." prefix, same as auto.commit.interval.ms */
{"topic.auto.offset.reset", SC_PROP_MANAGED},                        /* "topic." prefix, same as auto.offset.reset */
{"topic.blacklist", SC_PROP_ALLOWED},                                /* regex list; can hide the cube's own topic (self-inflicted) */
{"topic.compression.codec", SC_PROP_PRODUCER},                       /* "topic." prefix, same as compression.codec */
{"topic.compression.level", SC_PROP_PRODUCER},                       /* "topic." prefix, same as compression.level */
{"topic.compression.type", SC_PROP_PRODUCER},                        /* "topic." prefix, same as compression.type */
{"topic.consume.callback.max.messages", SC_PROP_ALLOWED},            /* "topic." prefix, same as consume.callback.max.messages */
{"topic.delivery.timeout.ms", SC_PROP_PRODUCER},                     /* "topic." prefix, same as delivery.timeout.ms */
{"topic.enable.auto.commit", SC_PROP_MANAGED},                       /* "topic." prefix: topic alias of auto.commit.enable */
{"topic.message.timeout.ms", SC_PROP_PRODUCER},                      /* "topic." prefix, same as message.timeout.ms */
{"topic.metadata.propagation.max.ms", SC_PROP_ALLOWED},
{"topic.metadata.refresh.fast.cnt", SC_PROP_ALLOWED},
{"topic.metadata.refresh.fast.interval.ms", SC_PROP_ALLOWED},
{"topic.metadata.refresh.interval.ms", SC_PROP_ALLOWED},
{"topic.metadata.refresh.sparse", SC_PROP_ALLOWED},
{"topic.msg_order_cmp", SC_PROP_NOT_TEXT},                           /* "topic." prefix, same as msg_order_cmp */
{"topic.offset.store.method", SC_PROP_MANAGED},                      /* "topic." prefix: topic-level store method (the one rd_kafka_offset_store_init() uses) */
{"topic.offset.store.path", SC_PROP_MANAGED},                        /* "topic." prefix, same as offset.store.path */
{"topic.offset.store.sync.interval.ms", SC_PROP_ALLOWED},            /* "topic." prefix, same as offset.store.sync.interval.ms */
{"topic.opaque", SC_PROP_NOT_TEXT},                                  /* "topic." prefix: topic opaque pointer */
{"topic.partitioner", SC_PROP_PRODUCER},                             /* "topic." prefix, same as partitioner */
{"topic.partitioner_cb", SC_PROP_NOT_TEXT},                          /* "topic." prefix, same as partitioner_cb */
{"topic.produce.offset.report", SC_PROP_PRODUCER},                   /* "topic." prefix, same as produce.offset.report */
{"topic.queuing.strategy", SC_PROP_PRODUCER},                        /* "topic." prefix, same as queuing.strategy */
{"topic.request.required.acks", SC_PROP_PRODUCER},                   /* "topic." prefix, same as request.required.acks */
{"topic.request.timeout.ms", SC_PROP_PRODUCER},                      /* "topic." prefix, same as request.timeout.ms */
{"transaction.timeout.ms", SC_PROP_PRODUCER},
{"transactional.id", SC_PROP_PRODUCER},
{"ut_handle_ProduceResponse", SC_PROP_NOT_TEXT},                     /* hidden unit-test fn pointer that conf_set DOES accept from a string */
