#!/usr/bin/env bash
# sql/build-install-script.sh — writes the install scripts of the versions
# after 0.2.0: sql/streamcube--0.3.0.sql is the 0.2.0 install script
# followed by the body of the 0.2.0 -> 0.3.0 update, and
# sql/streamcube--0.4.0.sql the 0.3.0 install script followed by the body
# of the 0.3.0 -> 0.4.0 update, so that a fresh install and an updated one
# are the same (test/t/001_loading.pl compares them).  Run it after
# changing an update script; released scripts are never edited.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

# build FROM TO: streamcube--TO.sql from streamcube--FROM.sql and the update
build() {
    local from=$1 to=$2
    {
        echo "-- streamcube $to: install script"
        echo "--"
        echo "-- The install script of $from (below, unchanged) followed by the body of"
        echo "-- sql/streamcube--$from--$to.sql: a fresh $to and an updated $from"
        echo "-- are the same.  Written by sql/build-install-script.sh: change the"
        echo "-- update script and run it."
        echo "--"
        tail -n +2 "streamcube--$from.sql"
        echo
        echo "-- ====================================================================="
        echo "-- What $to adds (sql/streamcube--$from--$to.sql)"
        echo "-- ====================================================================="
        sed -n '/^\\echo/,$p' "streamcube--$from--$to.sql" | tail -n +2
    } > "streamcube--$to.sql"
}
build 0.2.0 0.3.0
build 0.3.0 0.4.0
