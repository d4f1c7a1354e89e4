#!/usr/bin/env bash
# A real Apache Kafka broker for the streamcube test bench.
#
# The broker comes from Maven Central (org.apache.kafka:kafka_2.13) as plain
# jars in test/kafka/.jars/<version>/ and runs as one KRaft node that is both
# broker and controller, bound to 127.0.0.1 only.  See docs/kafka-versions.md.
#
#   kafka.sh fetch [--version V]
#   kafka.sh start --dir DIR --port PORT [--controller-port CPORT] [--sasl-port SPORT]
#                  [--sasl-ssl-port TPORT] [--ssl-port MPORT] [--version V]
#   kafka.sh stop --dir DIR
#   kafka.sh status --dir DIR
#   kafka.sh create-topic --bootstrap HOST:PORT [--version V] [--config K=V]... NAME PARTITIONS
#   kafka.sh tls --dir DIR
#
# Environment: KAFKA_HEAP_OPTS (default "-Xms128m -Xmx512m") and
#              KAFKA_JVM_PERFORMANCE_OPTS (default "-XX:+UseSerialGC") replace
#              those parts of the broker's java command.
#              KAFKA_START_TIMEOUT (default 90 s) bounds the wait in start.
#              KAFKA_SASL_USERS (default "alice:alice-secret bob:bob-secret")
#              are the user:password pairs the SASL listeners accept, with
#              PLAIN and (on the SASL_SSL listener) SCRAM-SHA-256 and -512.
#
# Besides PLAINTEXT on PORT, the broker listens with
#   SASL_PLAINTEXT, mechanism PLAIN, on SPORT (default PORT + 2);
#   SASL_SSL, mechanisms PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, on TPORT
#     (default PORT + 3): server certificate only, no client certificate;
#   SSL with a required client certificate (mutual TLS) on MPORT (default
#     PORT + 4);
# for tests of credentials and TLS.  The first start in DIR (or "tls --dir
# DIR" before it, for servers that start beside the broker and share its
# certificate) makes a throwaway certificate authority and the
# certificates in DIR/tls, kept for later starts (all PEM; the keys are not
# encrypted):
#   ca.pem                     the CA certificate clients trust
#   broker.pem, broker.key     the broker's (SAN IP:127.0.0.1, DNS:localhost)
#   client.pem, client.key     a client certificate for the SSL listener
#                              (CN=streamcube-client)
# The SCRAM users are stored when DIR/data is formatted (storage format
# --add-scram), so they exist from the broker's first start on.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEFAULT_VERSION=3.9.1
START_TIMEOUT=${KAFKA_START_TIMEOUT:-90}  # seconds until the broker must answer metadata
STOP_TIMEOUT=30         # seconds between SIGTERM and SIGKILL
TOPIC_TIMEOUT=60        # seconds until a new topic must have all leaders
# Short-lived tool JVMs (storage format, topic tool): C1 only, small heap.
TOOL_JVM_OPTS=(-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xss1m -Xmx256m -Djava.awt.headless=true)

die() { echo "kafka.sh: $*" >&2; exit 1; }
say() { echo "kafka.sh: $*"; }

usage() {
    sed -n '8,14p' "${BASH_SOURCE[0]}" | sed 's/^#   //' >&2
    exit 2
}

jars_dir() { echo "$SCRIPT_DIR/.jars/$1"; }
major_of() { echo "${1%%.*}"; }
now_ms() { date +%s%3N; }

check_version() {
    [[ $1 =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "bad version '$1' (want e.g. 3.9.1 or 4.0.2)"
}

# Log configuration files; the broker logs to stdout which start redirects to
# DIR/kafka.log, the tools log warnings to stderr.
write_log_config() {   # version file level target(stdout|stderr)
    local v=$1 file=$2 level=$3 target=$4
    if (( $(major_of "$v") >= 4 )); then
        local t=SYSTEM_OUT; [[ $target == stderr ]] && t=SYSTEM_ERR
        cat >"$file" <<EOF
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.target = $t
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = $level
rootLogger.appenderRef.out.ref = OUT
logger.request.name = kafka.request.logger
logger.request.level = warn
EOF
    else
        local t=System.out; [[ $target == stderr ]] && t=System.err
        cat >"$file" <<EOF
log4j.rootLogger=$level, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.Target=$t
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
EOF
    fi
}

log_config_opt() {     # version file -> the -D option naming it
    if (( $(major_of "$1") >= 4 )); then
        echo "-Dlog4j2.configurationFile=$2"
    else
        echo "-Dlog4j.configuration=file:$2"
    fi
}

# ---------------------------------------------------------------- fetch
do_fetch() {           # version
    local v=$1 dir tmp profile
    dir=$(jars_dir "$v")
    [[ -f $dir/.complete ]] && return 0
    command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
    # one fetch per version at a time; a second caller waits, then finds it done
    mkdir -p "$(dirname "$dir")"
    local lockfd
    exec {lockfd}>"$dir.lock"
    flock "$lockfd"
    if [[ -f $dir/.complete ]]; then
        exec {lockfd}>&-
        return 0
    fi
    profile=log-reload4j
    (( $(major_of "$v") >= 4 )) && profile=log-log4j2
    tmp="$dir.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    say "fetching Kafka $v from Maven into $dir"
    local t0; t0=$(now_ms)
    if ! mvn -B -Dstyle.color=never -f "$SCRIPT_DIR/pom.xml" -P "$profile" \
            -Dkafka.version="$v" -DoutputDirectory="$tmp" \
            dependency:copy-dependencies >"$tmp.log" 2>&1; then
        grep -E 'ERROR|FATAL' "$tmp.log" | head -n 20 >&2 || true
        rm -rf "$tmp" "$tmp.log"
        die "mvn could not fetch Kafka $v (is Maven Central reachable?)"
    fi
    rm -f "$tmp.log"
    ls "$tmp"/kafka_2.13-"$v".jar "$tmp"/kafka-tools-"$v".jar >/dev/null \
        || { rm -rf "$tmp"; die "Kafka $v jars missing after mvn"; }
    rm -rf "$dir"
    mv "$tmp" "$dir"
    echo "$v" >"$dir/.complete"
    exec {lockfd}>&-
    say "fetched Kafka $v: $(ls "$dir"/*.jar | wc -l) jars, $(( ($(now_ms) - t0) / 1000 )) s"
}

# ---------------------------------------------------------------- helpers
# -D option for the short-lived tool JVMs: warnings only, to stderr.  The
# file is rewritten atomically on every use so that it follows this script.
tools_log_opt() {      # version
    local jars f
    jars=$(jars_dir "$1")
    f=$jars/tools-log.properties
    write_log_config "$1" "$f.$$" WARN stderr
    mv -f "$f.$$" "$f"
    log_config_opt "$1" "$f"
}

# Is PID a broker started by us for DIR?
is_our_broker() {      # pid dir
    local pid=$1 dir=$2 cmd
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ $cmd == *kafka.Kafka*"$dir/server.properties"* ]]
}

read_pid() { [[ -f $1/kafka.pid ]] && cat "$1/kafka.pid" || true; }

port_in_use() {        # port
    [[ -n $(ss -Hltn "sport = :$1" 2>/dev/null) ]]
}

# kcat -L answers and lists broker 1.  kcat takes about a second to give up
# on a refused connection, so look for the listening socket first.
broker_answers() {     # port
    port_in_use "$1" || return 1
    local out
    out=$(kcat -L -b "127.0.0.1:$1" -m 2 2>/dev/null) || return 1
    grep -q '^  broker 1 at ' <<<"$out"
}

kill_broker() {        # pid dir
    local pid=$1 dir=$2 i
    is_our_broker "$pid" "$dir" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for (( i = 0; i < STOP_TIMEOUT * 10; i++ )); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    echo "kafka.sh: pid $pid still alive after ${STOP_TIMEOUT}s, sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    for (( i = 0; i < 50; i++ )); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    die "pid $pid survived SIGKILL"
}

abs_dir() { mkdir -p "$1" && (cd "$1" && pwd); }

# ---------------------------------------------------------------- TLS
# A throwaway CA, a broker certificate and a client certificate in DIR/tls,
# made once per DIR (P-256 keys: quick to make, and both Java and
# librdkafka's OpenSSL take them).  Keys are PKCS#8 PEM, unencrypted, as
# Kafka's PEM key store reads them.
make_tls() {           # dir
    local tls=$1/tls cnf who cn
    [[ -n $1 ]] || die "make_tls: no directory"
    [[ -f $tls/.complete ]] && return 0
    command -v openssl >/dev/null || die "openssl not found (apt-get install openssl)"
    rm -rf "$tls"
    mkdir -p "$tls"
    cnf=$tls/openssl.cnf
    cat >"$cnf" <<'CNF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[broker]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
CNF
    for who in ca broker client; do
        openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
            -out "$tls/$who.key" 2>"$tls/openssl.log" \
            || { cat "$tls/openssl.log" >&2; die "openssl could not make the $who key"; }
    done
    openssl req -new -x509 -config "$cnf" -extensions ca -key "$tls/ca.key" \
        -subj "/CN=streamcube test CA $(date +%s)" -days 3650 -sha256 \
        -out "$tls/ca.pem" 2>"$tls/openssl.log" \
        || { cat "$tls/openssl.log" >&2; die "openssl could not make the CA certificate"; }
    for who in broker client; do
        cn=localhost
        [[ $who == client ]] && cn=streamcube-client
        openssl req -new -config "$cnf" -key "$tls/$who.key" -subj "/CN=$cn" \
            -out "$tls/$who.csr" 2>"$tls/openssl.log" \
            && openssl x509 -req -in "$tls/$who.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" \
                -set_serial "0x$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
                -extfile "$cnf" -extensions "$who" -days 3650 -sha256 \
                -out "$tls/$who.pem" 2>"$tls/openssl.log" \
            || { cat "$tls/openssl.log" >&2; die "openssl could not make the $who certificate"; }
        rm -f "$tls/$who.csr"
    done
    # the broker's key store: its key and certificate chain in one PEM file
    cat "$tls/broker.key" "$tls/broker.pem" "$tls/ca.pem" >"$tls/broker-keystore.pem"
    rm -f "$tls/openssl.log"
    chmod 600 "$tls"/*.key "$tls/broker-keystore.pem"
    touch "$tls/.complete"
}

# ---------------------------------------------------------------- start
do_start() {
    local dir="" port="" cport="" sport="" tport="" mport="" v=$DEFAULT_VERSION
    while (( $# )); do
        case $1 in
            --dir) dir=${2:?}; shift 2 ;;
            --port) port=${2:?}; shift 2 ;;
            --controller-port) cport=${2:?}; shift 2 ;;
            --sasl-port) sport=${2:?}; shift 2 ;;
            --sasl-ssl-port) tport=${2:?}; shift 2 ;;
            --ssl-port) mport=${2:?}; shift 2 ;;
            --version) v=${2:?}; shift 2 ;;
            *) usage ;;
        esac
    done
    [[ -n $dir && -n $port ]] || usage
    [[ $port =~ ^[0-9]+$ ]] || die "bad port '$port'"
    [[ -z $cport ]] && cport=$(( port + 1 ))
    [[ $cport =~ ^[0-9]+$ ]] || die "bad controller port '$cport'"
    [[ -z $sport ]] && sport=$(( port + 2 ))
    [[ $sport =~ ^[0-9]+$ ]] || die "bad SASL port '$sport'"
    [[ -z $tport ]] && tport=$(( port + 3 ))
    [[ $tport =~ ^[0-9]+$ ]] || die "bad SASL_SSL port '$tport'"
    [[ -z $mport ]] && mport=$(( port + 4 ))
    [[ $mport =~ ^[0-9]+$ ]] || die "bad SSL port '$mport'"
    check_version "$v"
    command -v kcat >/dev/null || die "kcat not found (apt-get install kcat)"
    dir=$(abs_dir "$dir")

    local old; old=$(read_pid "$dir")
    if [[ -n $old ]] && is_our_broker "$old" "$dir"; then
        die "a broker is already running for $dir (pid $old)"
    fi
    rm -f "$dir/kafka.pid"
    port_in_use "$port" && die "port $port is already in use"
    port_in_use "$cport" && die "controller port $cport is already in use"
    port_in_use "$sport" && die "SASL port $sport is already in use"
    port_in_use "$tport" && die "SASL_SSL port $tport is already in use"
    port_in_use "$mport" && die "SSL port $mport is already in use"

    do_fetch "$v"
    local jars; jars=$(jars_dir "$v")

    make_tls "$dir"
    local tls=$dir/tls

    local props=$dir/server.properties jaas_users="" pair scram=() mech
    for pair in ${KAFKA_SASL_USERS:-alice:alice-secret bob:bob-secret}; do
        [[ $pair =~ ^[A-Za-z0-9_-]+:[A-Za-z0-9_.-]+$ ]] || die "bad KAFKA_SASL_USERS entry '$pair' (want user:password)"
        jaas_users+=" user_${pair%%:*}=\"${pair#*:}\""
        for mech in SCRAM-SHA-256 SCRAM-SHA-512; do
            scram+=(--add-scram "$mech=[name=${pair%%:*},password=${pair#*:}]")
        done
    done
    cat >"$props" <<EOF
# written by test/kafka/kafka.sh for Kafka $v
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport,SASL_PLAINTEXT://127.0.0.1:$sport,SASL_SSL://127.0.0.1:$tport,SSL://127.0.0.1:$mport
advertised.listeners=PLAINTEXT://127.0.0.1:$port,SASL_PLAINTEXT://127.0.0.1:$sport,SASL_SSL://127.0.0.1:$tport,SSL://127.0.0.1:$mport
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required $jaas_users;
# TLS, both TLS listeners: PEM key store and trust store (no JKS)
ssl.keystore.type=PEM
ssl.keystore.location=$tls/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$tls/ca.pem
# SASL_SSL: PLAIN and SCRAM, no client certificate
listener.name.sasl_ssl.ssl.client.auth=none
listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required $jaas_users;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
# SSL: a client certificate signed by the CA is required (mutual TLS)
listener.name.ssl.ssl.client.auth=required
log.dirs=$dir/data
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
min.insync.replicas=1
# small machine: few threads, small cleaner buffer
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
log.cleaner.dedupe.buffer.size=16777216
# the log cleaner looks for work every second (compacted-topic tests)
log.cleaner.backoff.ms=1000
EOF
    if (( $(major_of "$v") >= 4 )); then
        cat >>"$props" <<EOF
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
EOF
    fi
    write_log_config "$v" "$dir/log.properties" INFO stdout

    local t0 formatted=0; t0=$(now_ms)
    if [[ ! -f $dir/data/meta.properties ]]; then
        formatted=1
        local cid
        # a Kafka Uuid: 16 random bytes, URL-safe base64 without padding;
        # like Kafka's Uuid.randomUuid() avoid a leading '-', which the
        # storage tool's argument parser would take for an option
        cid=-
        while [[ $cid == -* ]]; do
            cid=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
        done
        echo "$cid" >"$dir/cluster.id"
        if ! java "${TOOL_JVM_OPTS[@]}" "$(tools_log_opt "$v")" \
                -cp "$jars/*" kafka.tools.StorageTool format \
                -t "$cid" -c "$props" "${scram[@]}" >"$dir/format.log" 2>&1; then
            cat "$dir/format.log" >&2
            die "formatting $dir/data failed"
        fi
    fi
    local t1; t1=$(now_ms)
    local fmt="reused existing data"
    (( formatted )) && fmt="format $(( t1 - t0 )) ms"

    # the log is appended to, so that a restart keeps the earlier run's log
    echo "==== kafka.sh start $(date '+%F %T') Kafka $v port $port" >>"$dir/kafka.log"
    # shellcheck disable=SC2086
    nohup java ${KAFKA_HEAP_OPTS:--Xms128m -Xmx512m} \
        ${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseSerialGC} \
        -Djava.awt.headless=true \
        "$(log_config_opt "$v" "$dir/log.properties")" \
        -cp "$jars/*" kafka.Kafka "$props" \
        >>"$dir/kafka.log" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$dir/kafka.pid"

    local deadline=$(( $(date +%s) + START_TIMEOUT ))
    while ! broker_answers "$port"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 40 "$dir/kafka.log" >&2 || true
            rm -f "$dir/kafka.pid"
            die "Kafka $v exited during start (log: $dir/kafka.log)"
        fi
        if (( $(date +%s) >= deadline )); then
            tail -n 40 "$dir/kafka.log" >&2 || true
            kill_broker "$pid" "$dir" || true
            rm -f "$dir/kafka.pid"
            die "Kafka $v did not answer on 127.0.0.1:$port within ${START_TIMEOUT}s (log: $dir/kafka.log)"
        fi
        sleep 0.1
    done
    local t2; t2=$(now_ms)
    say "Kafka $v running: pid $pid, bootstrap 127.0.0.1:$port, SASL/PLAIN 127.0.0.1:$sport," \
        "SASL_SSL 127.0.0.1:$tport, SSL (client certificate) 127.0.0.1:$mport, controller 127.0.0.1:$cport" \
        "($fmt, start until metadata $(( t2 - t1 )) ms)"
}

# ---------------------------------------------------------------- stop
do_stop() {
    local dir=""
    while (( $# )); do
        case $1 in
            --dir) dir=${2:?}; shift 2 ;;
            *) usage ;;
        esac
    done
    [[ -n $dir ]] || usage
    [[ -d $dir ]] || { say "not running ($dir does not exist)"; return 0; }
    dir=$(cd "$dir" && pwd)
    local pid; pid=$(read_pid "$dir")
    if [[ -z $pid ]]; then
        say "not running (no pid file)"
        return 0
    fi
    if ! is_our_broker "$pid" "$dir"; then
        rm -f "$dir/kafka.pid"
        say "not running (pid $pid is gone or is not this broker)"
        return 0
    fi
    kill_broker "$pid" "$dir"
    rm -f "$dir/kafka.pid"
    say "stopped pid $pid"
}

# ---------------------------------------------------------------- status
do_status() {
    local dir=""
    while (( $# )); do
        case $1 in
            --dir) dir=${2:?}; shift 2 ;;
            *) usage ;;
        esac
    done
    [[ -n $dir ]] || usage
    if [[ -d $dir ]]; then
        dir=$(cd "$dir" && pwd)
        local pid; pid=$(read_pid "$dir")
        if [[ -n $pid ]] && is_our_broker "$pid" "$dir"; then
            echo "running (pid $pid)"
            return 0
        fi
    fi
    echo "not running"
    return 1
}

# ---------------------------------------------------------------- create-topic
do_create_topic() {
    local bootstrap="" v=$DEFAULT_VERSION pos=() cfg=()
    while (( $# )); do
        case $1 in
            --bootstrap) bootstrap=${2:?}; shift 2 ;;
            --version) v=${2:?}; shift 2 ;;
            --config) cfg+=(--config "${2:?}"); shift 2 ;;
            -*) usage ;;
            *) pos+=("$1"); shift ;;
        esac
    done
    [[ -n $bootstrap && ${#pos[@]} -eq 2 ]] || usage
    local name=${pos[0]} parts=${pos[1]}
    [[ $parts =~ ^[1-9][0-9]*$ ]] || die "bad partition count '$parts'"
    check_version "$v"
    command -v kcat >/dev/null || die "kcat not found (apt-get install kcat)"
    do_fetch "$v"
    local jars; jars=$(jars_dir "$v")

    java "${TOOL_JVM_OPTS[@]}" "$(tools_log_opt "$v")" \
        -cp "$jars/*" org.apache.kafka.tools.TopicCommand \
        --bootstrap-server "$bootstrap" --create --topic "$name" \
        --partitions "$parts" --replication-factor 1 "${cfg[@]}" >/dev/null \
        || die "creating topic $name failed"

    # wait until metadata shows every partition with a leader
    local deadline=$(( $(date +%s) + TOPIC_TIMEOUT )) n=0
    while :; do
        n=$(kcat -L -b "$bootstrap" -t "$name" -m 2 2>/dev/null \
            | grep -cE '^    partition [0-9]+, leader [0-9]+, ' || true)
        (( n == parts )) && break
        (( $(date +%s) >= deadline )) \
            && die "topic $name: $n of $parts partitions have a leader after ${TOPIC_TIMEOUT}s"
        sleep 0.2
    done
    say "created topic $name with $parts partitions"
}

# ---------------------------------------------------------------- main
(( $# )) || usage
cmd=$1; shift
case $cmd in
    fetch)
        v=$DEFAULT_VERSION
        while (( $# )); do
            case $1 in
                --version) v=${2:?}; shift 2 ;;
                *) usage ;;
            esac
        done
        check_version "$v"
        do_fetch "$v"
        ;;
    start) do_start "$@" ;;
    stop) do_stop "$@" ;;
    status) do_status "$@" ;;
    create-topic) do_create_topic "$@" ;;
    tls)
        [[ $# == 2 && $1 == --dir ]] || usage
        make_tls "$(abs_dir "$2")"
        ;;
    -h|--help|help) usage ;;
    *) usage ;;
esac
