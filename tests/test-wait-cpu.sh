#!/bin/bash
# test-wait-cpu.sh — a rank's wait for a late peer on another host: what it
# costs the CPU, and that it ends when the peer comes. While an application
# thread waits for a tensor whose schedule comes from the coordinator, the
# background thread polls the socket for up to a millisecond before it
# sleeps (client/bg.c, SCHEDULE_SPIN_USEC), once a submission (or a host's
# ids sent), not at each timed wakeup: a rank kept waiting 3 s must use a
# few milliseconds of CPU, not its core (a spin at each timed wakeup took
# 14 ms); nor may a rank that submitted and computes (here: sleeps). The
# test sees a spin that goes on, not whether a single one ran: that is
# the benchmarks' to show (docs/PERFORMANCE.md). A first step's name that a
# host of two ranks held for its late rank goes on when that rank sends
# it, not POOL_HOLD_USEC (500 ms) after (daemon/pool.c). Hosts of one rank
# (every tensor through the coordinator) and of two (the host's board,
# then the coordinator); the worker checks every sum.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
multi=$HVD_SRCDIR/tests/lib/launch-multi.sh
for layout in a:1,b:1 a:2,b:1; do
        out=$("$multi" -H "$layout" -t 60 -- "$HVD_BUILDDIR/tests/worker_smoke" late 3000 2>&1) ||
                fail "worker_smoke late on $layout failed:" "$out"
        for kind in blocking0 blocking1 async; do
                line=$(echo "$out" | grep "late $kind wall_ms=") || fail "no '$kind' line on $layout" "$out"
                wall=${line#*wall_ms=} cpu=${line#*cpu_ms=}
                wall=${wall%% *}
                # a blocking wait lasts as long as the peers are late, no
                # longer (the async line's wall time is rank 0's own sleep)
                case $kind in
                blocking*)
                        awk -v w="$wall" 'BEGIN { exit !(w >= 2900 && w < 3400) }' ||
                                fail "$kind on $layout ended $wall ms after it began, the peers 3000 ms late" "$out"
                        ;;
                esac
                awk -v c="$cpu" 'BEGIN { exit !(c < 12) }' ||
                        fail "rank 0 used $cpu ms of CPU waiting $wall ms ($kind, $layout)" "$out"
                echo "ok: $layout, $kind: waited $wall ms on $cpu ms of CPU"
        done
done
