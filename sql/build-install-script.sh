#!/usr/bin/env bash
# sql/build-install-script.sh — writes sql/streamcube--0.3.0.sql, the 0.3.0
# install script, as the 0.2.0 install script followed by the body of the
# 0.2.0 -> 0.3.0 update, so that a fresh 0.3.0 and an updated 0.2.0 are the
# same (test/t/001_loading.pl compares them).  Run it after changing
# sql/streamcube--0.2.0--0.3.0.sql; released scripts are never edited.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
{
    echo "-- streamcube 0.3.0: install script"
    echo "--"
    echo "-- The install script of 0.2.0 (below, unchanged) followed by the body of"
    echo "-- sql/streamcube--0.2.0--0.3.0.sql: a fresh 0.3.0 and an updated 0.2.0"
    echo "-- are the same.  Written by sql/build-install-script.sh: change the"
    echo "-- update script and run it."
    echo "--"
    tail -n +2 streamcube--0.2.0.sql
    echo
    echo "-- ====================================================================="
    echo "-- What 0.3.0 adds (sql/streamcube--0.2.0--0.3.0.sql)"
    echo "-- ====================================================================="
    sed -n '/^\\echo/,$p' streamcube--0.2.0--0.3.0.sql | tail -n +2
} > streamcube--0.3.0.sql
