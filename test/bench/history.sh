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
