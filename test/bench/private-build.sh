# test/bench/private-build.sh — sourced by the benchmarks that measure a
# given build of streamcube rather than the installed one.
#
# private_build BUILD DIR: streamcube at BUILD (tree: the working tree, with
# uncommitted changes; else a git revision) built and installed into a
# private copy of the PostgreSQL installation under DIR, so that other
# `make install`s on the machine cannot change what is measured.  Prints the
# copy's bindir (postgres finds its lib and share directories relative to
# its own path); the build log is DIR/build.log.
private_build() {
    local build=$1 dir=$2 root src inst libdir sharedir bindir
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    src=$dir/src inst=$dir/inst
    rm -rf "$src" "$inst"; mkdir -p "$src"
    if [[ $build == tree ]]; then
        (cd "$root" && git ls-files -co --exclude-standard -z -- Makefile streamcube.control src sql |
            xargs -0 tar -cf - ) | tar -xf - -C "$src"
    else
        git -C "$root" archive "$build" Makefile streamcube.control src sql | tar -xf - -C "$src"
    fi
    make -s -C "$src" with_llvm=no >"$dir/build.log" 2>&1 || { cat "$dir/build.log" >&2; return 1; }
    libdir=$(pg_config --pkglibdir) sharedir=$(pg_config --sharedir) bindir=$(pg_config --bindir)
    mkdir -p "$inst$bindir" "$inst$libdir" "$inst$sharedir"
    # The server programs find lib and share from their own path: copies.
    # The clients (psql, pg_dump, ...) may stay links to the system's.
    cp -as "$bindir/." "$inst$bindir/"
    rm -f "$inst$bindir"/{postgres,pg_ctl,initdb}
    cp "$bindir"/{postgres,pg_ctl,initdb} "$inst$bindir/"
    cp -as "$libdir/." "$inst$libdir/"
    cp -as "$sharedir/." "$inst$sharedir/"
    rm -rf "$inst$libdir"/streamcube.so "$inst$libdir"/bitcode/streamcube* "$inst$sharedir"/extension/streamcube*
    make -s -C "$src" install DESTDIR="$inst" with_llvm=no >>"$dir/build.log" 2>&1 ||
        { cat "$dir/build.log" >&2; return 1; }
    chmod -R a+rX "$inst"
    echo "$inst$bindir"
}

# installed_problem OPTION: when no streamcube is installed into the
# PostgreSQL that pg_config names (a machine where `make install` has not
# run), prints why and what to do (OPTION: the script's build option) and
# succeeds; else fails, silently.  A benchmark of build "installed" asks
# before it starts anything, rather than failing at CREATE EXTENSION
# minutes later.
installed_problem() {
    local share
    share=$(pg_config --sharedir)
    [[ -f $share/extension/streamcube.control ]] && return 1
    echo "build 'installed' asked (the default), but streamcube is not installed in $share: run make install, or measure $1 tree"
}
