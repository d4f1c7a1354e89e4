#!/usr/bin/env bash
# test/lib/pg.sh — a private PostgreSQL 15 server for tests, benchmarks and
# the quickstart.
#
#   pg.sh start DIR PORT [SETTING=VALUE ...]   initdb in DIR, start on 127.0.0.1:PORT
#   pg.sh stop DIR                              fast shutdown, by the postmaster's PID
#   pg.sh crash DIR                             immediate shutdown (crash simulation)
#   pg.sh restart DIR                           stop and start again, same settings
#
# The server runs as the postgres user when called as root (PostgreSQL
# refuses root), listens on 127.0.0.1 only, keeps its socket in DIR, and
# preloads streamcube and pg_cron.  Extra settings go to postgresql.conf.
set -euo pipefail

PG_BINDIR=${PG_BINDIR:-$(pg_config --bindir)}

as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

cmd=${1:-}; shift || true
case "$cmd" in
start)
    dir=$1 port=$2; shift 2
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        as_pg "$PG_BINDIR/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 \
            --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 ||
            { cat "$dir/initdb.log"; exit 1; }
        {
            echo "listen_addresses = '127.0.0.1'"
            echo "port = $port"
            echo "unix_socket_directories = '$dir'"
            echo "shared_preload_libraries = 'streamcube,pg_cron'"
            echo "streamcube.database = 'postgres'"
            echo "cron.database_name = 'postgres'"
            echo "max_worker_processes = 32"
            echo "fsync = off"
            echo "log_line_prefix = '%m [%p] %b '"
            for kv in "$@"; do echo "$kv"; done
        } >>"$dir/data/postgresql.conf"
    fi
    as_pg "$PG_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null ||
        { tail -n 50 "$dir/server.log"; exit 1; }
    ;;
stop|crash)
    dir=$1
    [ -f "$dir/data/postmaster.pid" ] || exit 0
    mode=fast; [ "$cmd" = crash ] && mode=immediate
    if ! as_pg "$PG_BINDIR/pg_ctl" -D "$dir/data" -m "$mode" -w -t 60 stop >/dev/null 2>&1; then
        pid=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null || true)
        [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
    fi
    ;;
restart)
    dir=$1
    as_pg "$PG_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" -m fast -w -t 60 restart >/dev/null ||
        { tail -n 50 "$dir/server.log"; exit 1; }
    ;;
*)
    sed -n '2,14p' "$0"; exit 2 ;;
esac
