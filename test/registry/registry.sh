#!/usr/bin/env bash
# A real schema registry for the streamcube test bench: Apicurio Registry,
# whose Confluent-compatible API (under /apis/ccompat/v7) is what
# Confluent's serializers and streamcube talk to.
#
# The registry comes from Maven Central (io.apicurio:apicurio-registry-app,
# its tar.gz distribution) through test/registry/pom.xml, unpacked in
# test/registry/.dist/<version>/, and runs as one JVM bound to 127.0.0.1.
#
#   registry.sh fetch
#   registry.sh venv
#   registry.sh start --dir DIR [--port PORT] [--ssl-port SPORT --cert PEM --key PEM]
#                     [--storage file|memory]
#   registry.sh stop --dir DIR
#   registry.sh status --dir DIR
#
# The first start in DIR needs --port; it writes what it was given to
# DIR/registry.conf, and a later "start --dir DIR" without options starts
# the same registry again (same ports, certificate and storage).  With
# --ssl-port it also listens with HTTPS there, with the certificate and
# unencrypted key PEM files given (test/run-tests passes the Kafka
# broker's, SAN IP:127.0.0.1 and DNS:localhost).
#
# Storage: "file" (the default) keeps the schemas in an H2 database in
# DIR/db, written at once (WRITE_DELAY=0), so they survive a stop, a
# start and even a SIGKILL, and ids stay what they were; "memory" is
# Apicurio's own default, an in-memory H2 database that forgets every
# schema when the registry stops.
#
# venv makes test/registry/.venv, the Python of test/tools/scregistry
# (Confluent's serializers, pinned in test/registry/requirements.txt), with
# Debian's python3, once per content of requirements.txt.
#
# The log is appended to DIR/registry.log, the PID is in DIR/registry.pid.
# Environment: REGISTRY_START_TIMEOUT (default 90 s) bounds the wait in
# start; REGISTRY_HEAP_OPTS (default -Xmx128m) replaces the heap option.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VERSION=2.6.13.Final
START_TIMEOUT=${REGISTRY_START_TIMEOUT:-90}
STOP_TIMEOUT=30         # seconds between SIGTERM and SIGKILL
API=/apis/ccompat/v7

die() { echo "registry.sh: $*" >&2; exit 1; }
say() { echo "registry.sh: $*"; }

usage() {
    sed -n '10,15p' "${BASH_SOURCE[0]}" | sed 's/^#   //' >&2
    exit 2
}

dist_dir() { echo "$SCRIPT_DIR/.dist/$VERSION"; }
runner_jar() { echo "$(dist_dir)/apicurio-registry-app-$VERSION-runner.jar"; }
now_ms() { date +%s%3N; }

# ---------------------------------------------------------------- fetch
do_fetch() {
    local dir tmp
    dir=$(dist_dir)
    [[ -f $dir/.complete ]] && return 0
    command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
    mkdir -p "$(dirname "$dir")"
    local lockfd
    exec {lockfd}>"$dir.lock"
    flock "$lockfd"
    if [[ -f $dir/.complete ]]; then
        exec {lockfd}>&-
        return 0
    fi
    tmp="$dir.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    say "fetching Apicurio Registry $VERSION from Maven into $dir"
    local t0; t0=$(now_ms)
    if ! mvn -B -Dstyle.color=never -f "$SCRIPT_DIR/pom.xml" \
            -Dregistry.version="$VERSION" -DoutputDirectory="$tmp" \
            dependency:copy-dependencies >"$tmp.log" 2>&1; then
        grep -E 'ERROR|FATAL' "$tmp.log" | head -n 20 >&2 || true
        rm -rf "$tmp" "$tmp.log"
        die "mvn could not fetch Apicurio Registry $VERSION (is Maven Central reachable?)"
    fi
    rm -f "$tmp.log"
    local tgz=$tmp/apicurio-registry-app-$VERSION-all.tar.gz
    [[ -f $tgz ]] || { rm -rf "$tmp"; die "the registry's tar.gz is missing after mvn"; }
    # the tar.gz stays in Maven's local repository: keep only what it holds
    tar -xzf "$tgz" -C "$tmp" || { rm -rf "$tmp"; die "could not unpack $tgz"; }
    rm -f "$tgz"
    [[ -f $tmp/apicurio-registry-app-$VERSION-runner.jar && -d $tmp/lib ]] \
        || { rm -rf "$tmp"; die "no runner jar and lib/ in the registry's tar.gz"; }
    rm -rf "$dir"
    mv "$tmp" "$dir"
    echo "$VERSION" >"$dir/.complete"
    exec {lockfd}>&-
    say "fetched Apicurio Registry $VERSION: $(ls "$dir"/lib | wc -l) jars, $(( ($(now_ms) - t0) / 1000 )) s"
}

# ---------------------------------------------------------------- venv
do_venv() {
    local dir=$SCRIPT_DIR/.venv req=$SCRIPT_DIR/requirements.txt py key
    # Debian's python3, not one of a user's PATH (pyenv and the like live
    # in a home directory the test user may not enter)
    py=/usr/bin/python3
    [[ -x $py ]] || py=$(command -v python3) || die "python3 not found (apt-get install python3 python3-venv)"
    key="$(sha256sum <"$req" | cut -c1-64) python $("$py" -c 'import sys; print(sys.version.split()[0])')"
    [[ -f $dir/.complete && $(cat "$dir/.complete") == "$key" ]] && return 0
    local lockfd
    exec {lockfd}>"$dir.lock"
    flock "$lockfd"
    if [[ -f $dir/.complete && $(cat "$dir/.complete") == "$key" ]]; then
        exec {lockfd}>&-
        return 0
    fi
    say "making the Python venv of scregistry in $dir"
    local t0; t0=$(now_ms)
    rm -rf "$dir"
    # made in place: a venv's scripts name its path (only bin/python is used)
    "$py" -m venv "$dir" >"$dir.log" 2>&1 \
        || { cat "$dir.log" >&2; rm -rf "$dir"; die "$py -m venv failed (apt-get install python3-venv)"; }
    if ! "$dir/bin/python" -m pip install --disable-pip-version-check --no-input \
            --only-binary=:all: -r "$req" >"$dir.log" 2>&1; then
        tail -n 20 "$dir.log" >&2
        rm -rf "$dir"
        die "pip install -r $req failed (is PyPI reachable?)"
    fi
    "$dir/bin/python" -c 'import confluent_kafka.schema_registry.avro, confluent_kafka.schema_registry.protobuf, confluent_kafka.schema_registry.json_schema' \
        >"$dir.log" 2>&1 || { cat "$dir.log" >&2; rm -rf "$dir"; die "the venv cannot import Confluent's serializers"; }
    rm -f "$dir.log"
    echo "$key" >"$dir/.complete"
    exec {lockfd}>&-
    say "made the venv: $("$dir/bin/python" -c 'import confluent_kafka as c; v = c.version(); print("confluent-kafka", v[0] if isinstance(v, tuple) else v, "with librdkafka", c.libversion()[0])'), $(( ($(now_ms) - t0) / 1000 )) s"
}

# ---------------------------------------------------------------- helpers
# Is PID a registry started by us for DIR?  Its command line carries
# -Dstreamcube.registry.dir=DIR for this check.
is_our_registry() {    # pid dir
    local pid=$1 dir=$2 cmd
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ $cmd == *"-Dstreamcube.registry.dir=$dir "*apicurio-registry-app-*-runner.jar* ]]
}

read_pid() { [[ -f $1/registry.pid ]] && cat "$1/registry.pid" || true; }

port_in_use() {        # port
    [[ -n $(ss -Hltn "sport = :$1" 2>/dev/null) ]]
}

# The Confluent API answers: GET /subjects gives a JSON array.
registry_answers() {   # port
    port_in_use "$1" || return 1
    local out
    out=$(curl -sf --max-time 2 "http://127.0.0.1:$1$API/subjects" 2>/dev/null) || return 1
    [[ $out == \[* ]]
}

kill_registry() {      # pid dir
    local pid=$1 dir=$2 i
    is_our_registry "$pid" "$dir" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for (( i = 0; i < STOP_TIMEOUT * 10; i++ )); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    echo "registry.sh: pid $pid still alive after ${STOP_TIMEOUT}s, sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    for (( i = 0; i < 50; i++ )); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    die "pid $pid survived SIGKILL"
}

abs_dir() { mkdir -p "$1" && (cd "$1" && pwd); }
abs_file() { [[ -f $1 ]] || die "no file $1"; echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }

# ---------------------------------------------------------------- start
do_start() {
    local dir="" port="" sport="" cert="" key="" storage=""
    while (( $# )); do
        case $1 in
            --dir) dir=${2:?}; shift 2 ;;
            --port) port=${2:?}; shift 2 ;;
            --ssl-port) sport=${2:?}; shift 2 ;;
            --cert) cert=${2:?}; shift 2 ;;
            --key) key=${2:?}; shift 2 ;;
            --storage) storage=${2:?}; shift 2 ;;
            *) usage ;;
        esac
    done
    [[ -n $dir ]] || usage
    dir=$(abs_dir "$dir")
    local conf=$dir/registry.conf
    if [[ -z $port$sport$cert$key$storage && -f $conf ]]; then
        # started before: the same registry again
        port=$(sed -n 's/^port=//p' "$conf")
        sport=$(sed -n 's/^ssl_port=//p' "$conf")
        cert=$(sed -n 's/^cert=//p' "$conf")
        key=$(sed -n 's/^key=//p' "$conf")
        storage=$(sed -n 's/^storage=//p' "$conf")
    fi
    [[ -n $port ]] || die "the first start in $dir needs --port"
    [[ $port =~ ^[0-9]+$ ]] || die "bad port '$port'"
    storage=${storage:-file}
    [[ $storage == file || $storage == memory ]] || die "bad storage '$storage' (file or memory)"
    local ssl_opts=()
    if [[ -n $sport ]]; then
        [[ $sport =~ ^[0-9]+$ ]] || die "bad SSL port '$sport'"
        [[ -n $cert && -n $key ]] || die "--ssl-port needs --cert and --key"
        cert=$(abs_file "$cert"); key=$(abs_file "$key")
        ssl_opts=(-Dquarkus.http.ssl-port="$sport"
                  -Dquarkus.http.ssl.certificate.files="$cert"
                  -Dquarkus.http.ssl.certificate.key-files="$key")
    elif [[ -n $cert$key ]]; then
        die "--cert and --key need --ssl-port"
    fi
    command -v curl >/dev/null || die "curl not found (apt-get install curl)"
    command -v java >/dev/null || die "java not found (apt-get install default-jdk-headless)"

    local old; old=$(read_pid "$dir")
    if [[ -n $old ]] && is_our_registry "$old" "$dir"; then
        die "a registry is already running for $dir (pid $old)"
    fi
    rm -f "$dir/registry.pid"
    port_in_use "$port" && die "port $port is already in use"
    [[ -n $sport ]] && port_in_use "$sport" && die "SSL port $sport is already in use"

    do_fetch
    printf 'port=%s\nssl_port=%s\ncert=%s\nkey=%s\nstorage=%s\n' \
        "$port" "$sport" "$cert" "$key" "$storage" >"$conf"

    # Apicurio 2.6's "in-memory" storage is H2 through its SQL storage;
    # pointing the data source at a file keeps the schemas.
    local db_opts=()
    if [[ $storage == file ]]; then
        mkdir -p "$dir/db"
        db_opts=(-Dquarkus.datasource.jdbc.url="jdbc:h2:file:$dir/db/registry;WRITE_DELAY=0")
    fi

    echo "==== registry.sh start $(date '+%F %T') Apicurio Registry $VERSION port $port${sport:+ ssl-port $sport} storage $storage" \
        >>"$dir/registry.log"
    local t0; t0=$(now_ms)
    # Options before -jar: Quarkus ignores -D arguments after the jar name
    # (they reach main() as arguments), and would listen on 0.0.0.0:8080.
    # shellcheck disable=SC2086
    nohup java ${REGISTRY_HEAP_OPTS:--Xmx128m} -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        -Djava.awt.headless=true \
        -Dstreamcube.registry.dir="$dir" \
        -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$port" \
        "${ssl_opts[@]}" "${db_opts[@]}" \
        -jar "$(runner_jar)" \
        >>"$dir/registry.log" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$dir/registry.pid"

    local deadline=$(( $(date +%s) + START_TIMEOUT ))
    while ! registry_answers "$port"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 40 "$dir/registry.log" >&2 || true
            rm -f "$dir/registry.pid"
            tail -n 20 "$dir/registry.log" | grep -q 'seems to be in use\|already in use' \
                && die "port $port${sport:+ or $sport} is already in use (log: $dir/registry.log)"
            die "Apicurio Registry exited during start (log: $dir/registry.log)"
        fi
        if (( $(date +%s) >= deadline )); then
            tail -n 40 "$dir/registry.log" >&2 || true
            kill_registry "$pid" "$dir" || true
            rm -f "$dir/registry.pid"
            die "Apicurio Registry did not answer on 127.0.0.1:$port within ${START_TIMEOUT}s (log: $dir/registry.log)"
        fi
        sleep 0.1
    done
    say "Apicurio Registry $VERSION running: pid $pid, http://127.0.0.1:$port$API" \
        "${sport:+https://127.0.0.1:$sport$API }(storage $storage, start until it answers $(( $(now_ms) - t0 )) ms)"
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
    if ! is_our_registry "$pid" "$dir"; then
        rm -f "$dir/registry.pid"
        say "not running (pid $pid is gone or is not this registry)"
        return 0
    fi
    kill_registry "$pid" "$dir"
    rm -f "$dir/registry.pid"
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
        if [[ -n $pid ]] && is_our_registry "$pid" "$dir"; then
            echo "running (pid $pid)"
            return 0
        fi
    fi
    echo "not running"
    return 1
}

# ---------------------------------------------------------------- main
(( $# )) || usage
cmd=$1; shift
case $cmd in
    fetch) (( $# == 0 )) || usage; do_fetch ;;
    venv) (( $# == 0 )) || usage; do_venv ;;
    start) do_start "$@" ;;
    stop) do_stop "$@" ;;
    status) do_status "$@" ;;
    -h|--help|help) usage ;;
    *) usage ;;
esac
