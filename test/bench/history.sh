# test/bench/history.sh — sourced by the benchmarks that replay history:
# events stamped in the past rather than with the wall clock (issue 25).
#
# history_produce_args AGE[:STEP_MS] N: the sckafka produce options that
# stamp N events from AGE ago on (event i at start + i * step): a replay of
# a stream after downtime, a backfill, a new cube on an old topic.  Without
# STEP_MS the events are spread evenly up to now, so every window of the
# span gets rows, all but the last ones ended; with it, one event every
# STEP_MS (1000: sckafka's default step, as `produce --start-ts` alone
# stamps them).  AGE is "now" (no options: the wall clock, as the producer
# writes them), Nd or Nh (days, hours), or 1week, 1month (7d, 30d).  Prints
# nothing for "now"; fails on an AGE it does not know, or one too short for
# N events a millisecond apart.
history_produce_args() {
    local age=${1%%:*} step= n=$2 secs
    [[ $1 == *:* ]] && { step=${1#*:}; [[ $step =~ ^[1-9][0-9]*$ ]] || return 1; }
    case $age in
        now) [[ -z $step ]] || return 1; return 0 ;;
        1week) secs=$(( 7 * 86400 )) ;;
        1month) secs=$(( 30 * 86400 )) ;;
        [1-9]*d) [[ ${age%d} =~ ^[0-9]+$ ]] || return 1; secs=$(( ${age%d} * 86400 )) ;;
        [1-9]*h) [[ ${age%h} =~ ^[0-9]+$ ]] || return 1; secs=$(( ${age%h} * 3600 )) ;;
        *) return 1 ;;
    esac
    [[ -n $step ]] || step=$(( secs * 1000 / n ))
    (( step >= 1 )) || return 1
    echo "--start-ts $(( $(date +%s) - secs )) --step-ms $step"
}

# history_label AGE[:STEP_MS]: the age as a name may hold it (1month_1000).
history_label() { echo "${1//:/_}"; }

# median: the median of the numbers on standard input, separated by
# spaces or newlines.
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# history_fs DIR: the file system that holds DIR, as "TYPE on DEVICE", an
# ext4 said to be with or without a journal (/proc/fs/jbd2 names the
# journals of the devices mounted).
history_fs() {
    local src fstype
    read -r src fstype < <(findmnt -n -o SOURCE,FSTYPE -T "$1" 2>/dev/null) || { echo unknown; return 0; }
    if [[ $fstype == ext4 ]]; then
        if compgen -G "/proc/fs/jbd2/${src##*/}-*" >/dev/null; then
            fstype+=" with a journal"
        else
            fstype+=" without a journal"
        fi
    fi
    echo "$fstype on $src"
}

# history_fs_note DIR: a line for the figures' header when DIR is on an
# ext4 without a journal (this project's virtual machines), nothing
# otherwise.  Such an ext4 reuses no inode freed in the last minute (five
# while the inode's block is not written back), and looks at each such
# inode before it takes a free one (fs/ext4/ialloc.c, recently_deleted()).
# A partition is six files, and a benchmark that drops a cube per run
# frees hundreds of them a minute, so here a partition of history costs a
# few milliseconds more than on a journaled ext4 (test/bench/partition-files,
# docs/benchmarks.md, History).
history_fs_note() {
    local fs
    fs=$(history_fs "$1")
    [[ $fs == "ext4 without a journal"* ]] || return 0
    echo "note: $1 is on an $fs: every file created steps over the inodes freed in the last minutes (partitions cost more here; --work DIR on a journaled file system avoids it)"
}
