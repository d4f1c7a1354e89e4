#!/usr/bin/env bash
# test/lib/pg-cassert.sh — a PostgreSQL built with assertions, for
# test/run-tests with SC_PG_CASSERT=1.
#
#   pg-cassert.sh build [DIR]    make sure DIR (default test/.pg-cassert, or
#                                $SC_PG_CASSERT_DIR) holds the build; print
#                                its bindir on the last line of stdout
#
# The build is PostgreSQL of exactly the installed Debian version (the
# postgresql-15 package that pg_config belongs to), configured with
# --enable-cassert (USE_ASSERT_CHECKING, CLOBBER_FREED_MEMORY,
# MEMORY_CONTEXT_CHECKING), --enable-debug, --enable-tap-tests and
# -DUSE_VALGRIND (memory-context annotations for a run under valgrind; no
# cost outside it), installed under DIR/<version>/inst together with the
# extensions the suites load, built from their Debian source packages at
# the installed versions: pg_cron, hll and tdigest.  streamcube itself is
# not installed there: run-tests installs it into a private copy
# (test/bench/private-build.sh), so the cache stays as built and may be
# shared by several trees (SC_PG_CASSERT_DIR).
#
# The sources come from Debian's archive through apt-get source, with a
# private apt state under DIR/apt: the deb-src twins of the machine's
# enabled "deb" entries, so neither /etc/apt nor /var/lib/apt is touched and
# root is not needed.  When the archive no longer has the installed version
# (after a point release the mirror keeps only the newest), this fails at
# once and says so: upgrade the postgresql-15 packages, or put the matching
# source packages (.dsc and their files) in DIR/<version>/src by hand, or
# set SC_PG_CASSERT_VERSION to another Debian version of postgresql-15 that
# the archive serves, on purpose (run-tests then says that the versions
# differ).
#
# A first build took 3.5 minutes on two shared cores (nice -n 10); later
# calls find DIR/<version>/inst/.complete and return at once.  Build logs:
# DIR/<version>/*.log.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

die() { echo "pg-cassert: $*" >&2; exit 1; }
step() { echo "pg-cassert: $*" >&2; }

cmd=${1:-}
[ "$cmd" = build ] || { sed -n '2,8p' "$0" >&2; exit 2; }
DIR=${2:-${SC_PG_CASSERT_DIR:-$ROOT/test/.pg-cassert}}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

# ------------------------------------------------------------ what to build
command -v pg_config >/dev/null || die "pg_config not found"
command -v dpkg-query >/dev/null || die "dpkg-query not found: the cassert build uses Debian's source packages"
SYS_VERSION=$(pg_config --version)             # PostgreSQL 15.20 (Debian 15.20-0+deb12u1)
PG_NUM=$(sed -n 's/^PostgreSQL \([0-9][0-9.]*\).*/\1/p' <<<"$SYS_VERSION")
PG_MAJOR=${PG_NUM%%.*}
[ -n "$PG_NUM" ] || die "cannot read the version from pg_config --version: $SYS_VERSION"
# the Debian packages of the server pg_config belongs to
pkg_of() {    # binary package -> "source=version", or nothing
    dpkg-query -W -f='${db:Status-Abbrev} ${source:Package}=${source:Version}\n' "$1" 2>/dev/null |
        sed -n 's/^ii  *//p'
}
PG_SRC=$(pkg_of "postgresql-$PG_MAJOR")
[ -n "$PG_SRC" ] || die "package postgresql-$PG_MAJOR is not installed: the cassert build rebuilds the installed Debian version"
DEB_VERSION=${PG_SRC#*=}
[[ $DEB_VERSION == "$PG_NUM"-* ]] ||
    die "pg_config says $SYS_VERSION but the installed postgresql-$PG_MAJOR is $DEB_VERSION: not one installation"
if [ -n "${SC_PG_CASSERT_VERSION:-}" ] && [ "$SC_PG_CASSERT_VERSION" != "$DEB_VERSION" ]; then
    # asked for explicitly: another Debian version of the same major
    [[ $SC_PG_CASSERT_VERSION == "$PG_MAJOR".*-* ]] ||
        die "SC_PG_CASSERT_VERSION=$SC_PG_CASSERT_VERSION is not a Debian version of postgresql-$PG_MAJOR (such as $DEB_VERSION)"
    step "building postgresql-$PG_MAJOR $SC_PG_CASSERT_VERSION (SC_PG_CASSERT_VERSION), not the installed $DEB_VERSION"
    DEB_VERSION=$SC_PG_CASSERT_VERSION
    PG_NUM=${DEB_VERSION%%-*}
    PG_SRC=postgresql-$PG_MAJOR=$DEB_VERSION
fi
EXT_SRCS=()
for ext in cron hll tdigest; do
    s=$(pkg_of "postgresql-$PG_MAJOR-$ext")
    [ -n "$s" ] || die "postgresql-$PG_MAJOR-$ext is not installed: the suites need it, and the cassert build rebuilds its installed version"
    EXT_SRCS+=("$s")
done

CONFIGURE=(--enable-cassert --enable-debug --enable-tap-tests --with-openssl
    "--with-extra-version= (Debian $DEB_VERSION, cassert)")
CFLAGS_="-O2 -g -fno-omit-frame-pointer"
CPPFLAGS_="-DUSE_VALGRIND"
STAMP="postgresql=$DEB_VERSION ${EXT_SRCS[*]} configure: ${CONFIGURE[*]} CFLAGS=$CFLAGS_ CPPFLAGS=$CPPFLAGS_"

V=$DIR/$DEB_VERSION
INST=$V/inst
if [ -f "$INST/.complete" ] && [ "$(cat "$INST/.complete")" = "$STAMP" ]; then
    echo "$INST/bin"
    exit 0
fi

# one build at a time per cache
exec 9>"$DIR/.lock"
flock 9
if [ -f "$INST/.complete" ] && [ "$(cat "$INST/.complete")" = "$STAMP" ]; then
    echo "$INST/bin"
    exit 0
fi
start=$(date +%s)
NICE=(nice -n 10)
JOBS=$(nproc 2>/dev/null || echo 2)

# ------------------------------------------------------------ sources
# A .dsc whose files all arrived: complete (apt-get source may leave a .dsc
# alone when its tarballs failed).
have_source() {    # source=version
    local name=${1%%=*} ver=${1#*=} dsc f
    dsc=$SRCDIR/${name}_${ver#*:}.dsc
    [ -f "$dsc" ] || return 1
    for f in $(awk '/^Files:/ { on = 1; next } /^[^ ]/ { on = 0 } on { print $3 }' "$dsc"); do
        [ -f "$SRCDIR/$f" ] || return 1
    done
}
SRCDIR=$V/src
mkdir -p "$SRCDIR"
APT=$DIR/apt
APTOPT=(-o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$APT/parts"
    -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache"
    -o APT::Sandbox::User="$(id -un)" -q)
need=()
for s in "$PG_SRC" "${EXT_SRCS[@]}"; do
    have_source "$s" || need+=("$s")
done
if (( ${#need[@]} )); then
    mkdir -p "$APT/parts" "$APT/lists/partial" "$APT/cache/archives/partial"
    rm -f "$APT/parts"/*
    # deb-src twins of the enabled deb entries (deb822 .sources and one-line .list)
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk 'BEGIN { RS = ""; ORS = "\n\n" }
             /Types:[^\n]*[ \t]deb([ \t\n]|$)/ {
                 sub(/(^|\n)Types:[^\n]*/, "\nTypes: deb-src"); sub(/^\n/, ""); print }' \
            "$f" >"$APT/parts/$(basename "$f")"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' "$f" >"$APT/parts/$(basename "$f" .list)-src.list"
    done
    step "apt-get update (deb-src, private state in $APT)"
    apt-get "${APTOPT[@]}" update >"$V.apt.log" 2>&1 ||
        die "apt-get update of the deb-src entries failed (log: $V.apt.log): $(tail -n 3 "$V.apt.log")"
    for s in "${need[@]}"; do
        step "apt-get source $s"
        (cd "$SRCDIR" && apt-get "${APTOPT[@]}" source --download-only "$s") >>"$V.apt.log" 2>&1 || true
        have_source "$s" && continue
        # An extension's source missing is not fatal (its installed
        # binaries are used instead, below); PostgreSQL's is.  Say why, and
        # what else the archive has: after a point release the mirror keeps
        # only the newest, and a mirror or proxy may serve a suite's
        # binaries but not its sources.
        [ "$s" = "$PG_SRC" ] || { step "  not available: $(grep '^E: Failed to fetch http' "$V.apt.log" | tail -n 1)"; continue; }
        offered=$(apt-cache "${APTOPT[@]}" showsrc "${s%%=*}" 2>/dev/null | sed -n 's/^Version: //p' | sort -uV | tr '\n' ' ')
        die "cannot fetch the source of $s from the Debian archive: $(grep '^E:' "$V.apt.log" | head -n 1)
    The archive's indexes list: ${offered:-nothing}(not all of them may be downloadable).
    Upgrade the installed ${s%%=*} packages to a version the archive serves, or put
    ${s%%=*}_${s#*=}.dsc and its files in $SRCDIR, or build another Debian version
    of postgresql-$PG_MAJOR on purpose with SC_PG_CASSERT_VERSION=VERSION (log: $V.apt.log)"
    done
fi
# unpack afresh (the build trees are not kept between versions)
BUILD=$V/build
rm -rf "$BUILD" "$INST"
mkdir -p "$BUILD"
for s in "$PG_SRC" "${EXT_SRCS[@]}"; do
    have_source "$s" || continue
    name=${s%%=*} ver=${s#*=}
    # PostgreSQL without Debian's patches: they fix the library directory
    # at /usr/lib/postgresql/15/lib, whatever the prefix, so an install
    # would overwrite the system's server modules.
    skip=(); [ "$s" = "$PG_SRC" ] && skip=(--skip-patches)
    dpkg-source -x "${skip[@]}" "$SRCDIR/${name}_${ver#*:}.dsc" "$BUILD/$name" >>"$V.unpack.log" 2>&1 ||
        die "dpkg-source -x ${name}_${ver#*:}.dsc failed (log: $V.unpack.log)"
done

# install_staged DIR MAKE-ARGS...: make install in DIR into a staging
# directory first, and only when every file it installed lies under $INST,
# into $INST: nothing this script builds ever writes outside its prefix,
# whatever a Makefile says.
STAGE=$V/stage
install_staged() {
    local dir=$1 stray; shift
    rm -rf "$STAGE"
    make -C "$dir" "$@" install DESTDIR="$STAGE" || return 1
    stray=$(cd "$STAGE" && find . \( -type f -o -type l \) -print | sed 's|^\.||' | grep -v "^$INST/" | head -n 5)
    [ -z "$stray" ] || { echo "make install in $dir would write outside $INST: $stray" >&2; return 1; }
    mkdir -p "$INST"
    cp -a "$STAGE$INST/." "$INST/"
    rm -rf "$STAGE"
}

# ------------------------------------------------------------ PostgreSQL
step "building PostgreSQL $DEB_VERSION with assertions into $INST ($JOBS jobs, nice -n 10; log $V.build.log)"
PGB=$BUILD/postgresql-$PG_MAJOR
(
    cd "$PGB"
    "${NICE[@]}" ./configure --prefix="$INST" "${CONFIGURE[@]}" CFLAGS="$CFLAGS_" CPPFLAGS="$CPPFLAGS_"
    "${NICE[@]}" make -j"$JOBS" -s
    install_staged . -s
) >"$V.build.log" 2>&1 || die "the PostgreSQL build failed: $(tail -n 20 "$V.build.log")"

got=$("$INST/bin/pg_config" --version)
[[ $got == "PostgreSQL $PG_NUM "* ]] || die "built $got, not $PG_NUM"
[[ $("$INST/bin/pg_config" --pkglibdir) == "$INST"/* ]] ||
    die "the build's pkglibdir is $("$INST/bin/pg_config" --pkglibdir), outside $INST"
grep -q "^#define USE_ASSERT_CHECKING 1" "$("$INST/bin/pg_config" --includedir-server)/pg_config.h" ||
    die "the build has no USE_ASSERT_CHECKING"

# ------------------------------------------------------------ extensions
# Built from source against the cassert server when the archive served
# the source; else the installed package's library and SQL files are
# copied in (an extension built without assertions loads into a server
# built with them: the magic block does not compare them), and the stamp
# says so.
ext_pkgs=(cron hll tdigest)
i=0
for s in "${EXT_SRCS[@]}"; do
    name=${s%%=*} pkg=postgresql-$PG_MAJOR-${ext_pkgs[$i]}
    i=$(( i + 1 ))
    if have_source "$s"; then
        step "building $s against it"
        (
            cd "$BUILD/$name"
            "${NICE[@]}" make -j"$JOBS" PG_CONFIG="$INST/bin/pg_config" with_llvm=no
            install_staged . PG_CONFIG="$INST/bin/pg_config" with_llvm=no
        ) >"$V.$name.log" 2>&1 || die "building $s failed: $(tail -n 20 "$V.$name.log")"
        continue
    fi
    step "no source of $s: copying the installed $pkg's files (built without assertions)"
    echo "$pkg: the installed package's binaries (no source from the archive)" >>"$INST/.notes"
    sys_lib=$(pg_config --pkglibdir) sys_share=$(pg_config --sharedir)
    new_lib=$("$INST/bin/pg_config" --pkglibdir) new_share=$("$INST/bin/pg_config" --sharedir)
    while IFS= read -r f; do
        [ -f "$f" ] || continue
        case $f in
            "$sys_lib"/bitcode/*) ;;
            "$sys_lib"/*) cp "$f" "$new_lib/${f#"$sys_lib"/}" ;;
            "$sys_share"/extension/*) cp "$f" "$new_share/extension/${f#"$sys_share"/extension/}" ;;
        esac
    done < <(dpkg -L "$pkg")
done
for lib in pg_cron hll tdigest; do
    [ -f "$("$INST/bin/pg_config" --pkglibdir)/$lib.so" ] || die "$lib.so is missing after its build"
done

chmod -R a+rX "$DIR"
echo "$STAMP" >"$INST/.complete"
step "built in $(( $(date +%s) - start )) s"
echo "$INST/bin"
