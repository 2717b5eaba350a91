#!/bin/bash
# test-daemon-resources.sh — the daemon gives back what workers take:
# after 1,000 worker connect/join/leave/exit cycles (tests/worker_cycle,
# one one-rank job each, four streams at once) its open file descriptors are back to the count
# before, its resident memory grew by less than a generous bound (without
# ASan), every job is gone, no job's shared memory is left behind, and it
# stops cleanly (with ASan: no leak at exit).
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
b=$HVD_BUILDDIR
rt=$(mktemp -d /tmp/hvd-res-XXXXXX)
"$b/daemon/hvd-coordinatord" --runtime-dir "$rt" --log-level warning 2>"$rt/daemon.log" &
dpid=$!
trap 'kill -TERM $dpid 2>/dev/null; wait $dpid 2>/dev/null; rm -rf "$rt"' EXIT
for _ in $(seq 200); do [ -S "$rt/worker.sock" ] && break; sleep 0.05; done
[ -S "$rt/worker.sock" ] || fail "the daemon did not start" "$(cat "$rt/daemon.log")"
HVD_JOB_SECRET=$(printf '%08x%08x' $RANDOM$RANDOM $$)
export HVD_RUNTIME_DIR=$rt HVD_JOB_SECRET
prefix=res-$$

fds() { find "/proc/$dpid/fd" -mindepth 1 -maxdepth 1 | wc -l; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$dpid/status"; }
# waits until the daemon lists no job (finished jobs go at its next housekeeping)
settle() {
        for _ in $(seq 100); do
                out=$("$b/tools/hvdctl" -r "$rt" jobs 2>&1)
                [ -z "$out" ] && return 0
                sleep 0.1
        done
        fail "jobs are still listed after the cycles" "$out"
}

# warm up: the first jobs size the daemon's tables and allocator arenas
out=$("$b/tests/worker_cycle" 50 "$prefix-warm" 2>&1) || fail "warm-up cycles failed" "$out$(cat "$rt/daemon.log")"
settle
fd0=$(fds) rss0=$(rss_kb)
# four streams of 250 at once: connections overlap, as with real jobs
pids=()
for k in 1 2 3 4; do
        "$b/tests/worker_cycle" 250 "$prefix-$k" >"$rt/cycle-$k.out" 2>&1 &
        pids+=($!)
done
for k in 1 2 3 4; do
        wait "${pids[$((k - 1))]}" || fail "cycle stream $k failed" "$(cat "$rt/cycle-$k.out" "$rt/daemon.log")"
done
settle
fd1=$(fds) rss1=$(rss_kb)
echo "fds: $fd0 -> $fd1; VmRSS: $rss0 kB -> $rss1 kB"
[ "$fd1" -le "$fd0" ] || fail "the daemon holds $((fd1 - fd0)) more file descriptors after 1000 cycles" "$(ls -l /proc/$dpid/fd)"
if [ -n "${HVD_ASAN_RUNTIME:-}" ]; then
        # ASan keeps freed memory in quarantine, so RSS says nothing there;
        # LeakSanitizer checks the heap when the daemon exits (below)
        echo "RSS bound not checked under AddressSanitizer"
else
        [ $((rss1 - rss0)) -lt 16384 ] || fail "the daemon's resident memory grew by $((rss1 - rss0)) kB over 1000 cycles"
fi
left=$(find /dev/shm -maxdepth 1 -name "hvd-$dpid-*" 2>/dev/null | wc -l)
[ "$left" -eq 0 ] || fail "$left shared-memory segments of the cycled jobs are left in /dev/shm"
kill -0 $dpid || fail "the daemon died"
# a clean stop (and, under --enable-sanitizers, no leak report at exit)
kill -TERM $dpid
wait $dpid
rc=$?
[ $rc -eq 0 ] || fail "the daemon exited with $rc after SIGTERM" "$(tail -n 40 "$rt/daemon.log")"
echo "ok: 1000 worker cycles, descriptors and memory back to baseline"
