#!/bin/bash
# valgrind-daemon.sh — hvd-coordinatord under valgrind memcheck through a
# representative day: collectives of every kind on two and three ranks, a
# job whose rank is killed (-9) mid-run, hvdctl status/jobs/job/metrics/
# log-level, a timeline, and bad input (broken greetings, silent and
# oversized messages, a flood) on the worker and peer sockets and on the
# /metrics HTTP listener (tests/lib/http_bad.py --fast); then SIGTERM.
# Fails on any memcheck error, any definitely or indirectly lost block, or
# a job that did not end as it should. Run by `make check` (skipped without
# valgrind and in sanitizer builds) and on its own:
#   HVD_BUILDDIR=build HVD_SRCDIR=. tests/valgrind-daemon.sh
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
b=$HVD_BUILDDIR
command -v valgrind >/dev/null 2>&1 || skip "valgrind is not installed"
[ -n "${HVD_ASAN_RUNTIME:-}" ] && skip "a sanitizer build: valgrind cannot run it"
worker=$b/tests/worker_collectives
launch=$HVD_SRCDIR/tests/lib/launch.sh
bw=$b/tests/bad_wire
tmp=$(mktemp -d /tmp/hvd-valgrind-XXXXXX)
rt=$tmp/rt
groups=()
vg=
cleanup() {
        for g in "${groups[@]}"; do kill -TERM -- "-$g" 2>/dev/null; done
        [ -n "$vg" ] && kill -TERM "$vg" 2>/dev/null
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
t0=$(date +%s)
printf 'metrics_listen = 127.0.0.1:0\n' >"$tmp/conf"

valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
        --error-exitcode=99 --track-fds=yes --log-file="$tmp/valgrind.log" \
        "$b/daemon/hvd-coordinatord" -c "$tmp/conf" --runtime-dir "$rt" --peer-listen 'tcp://127.0.0.1:*' \
        --log-level warning 2>"$tmp/daemon.log" &
vg=$!
for _ in $(seq 600); do [ -s "$rt/peer.endpoint" ] && [ -S "$rt/control.sock" ] && break; sleep 0.05; done
[ -S "$rt/control.sock" ] || fail "the daemon did not start under valgrind" "$(cat "$tmp/daemon.log" "$tmp/valgrind.log")"
peer=$(sed 's|^tcp://||' "$rt/peer.endpoint")
hvdctl() { "$b/tools/hvdctl" -r "$rt" --timeout 20 "$@"; }
alive() { kill -0 "$vg" 2>/dev/null || fail "the daemon died under valgrind: $1" "$(cat "$tmp/valgrind.log")"; }

# 1. collectives of every kind; a job of three ranks at the same time
mkdir "$tmp/tl"
HVD_TEST_TMPDIR=$tmp/tl "$launch" -r "$rt" -j vg-two -t 240 -n 2 -- "$worker" allreduce grouped broadcast \
        allgather alltoall reducescatter barrier join many >"$tmp/two.out" 2>&1 &
two=$!
"$launch" -r "$rt" -j vg-three -t 240 -n 3 -- "$worker" allreduce process-sets mismatch >"$tmp/three.out" 2>&1 ||
        fail "the three-rank job failed under a valgrind daemon" "$(cat "$tmp/three.out" "$tmp/daemon.log")"
wait $two || fail "the two-rank job failed under a valgrind daemon" "$(cat "$tmp/two.out" "$tmp/daemon.log")"
alive "after the collectives"

# 2. a rank killed -9 in the middle of a long run: the others are told
mkdir "$tmp/k"
HVD_TEST_TMPDIR=$tmp/k setsid "$launch" -r "$rt" -j vg-killed -t 120 -n 3 -- "$worker" longrun \
        >"$tmp/killed.out" 2>&1 &
job=$!
groups+=("$job")
for _ in $(seq 1200); do
        [ -e "$tmp/k/running.0" ] && [ -e "$tmp/k/running.1" ] && [ -e "$tmp/k/running.2" ] && break
        kill -0 $job 2>/dev/null || break
        sleep 0.05
done
[ -e "$tmp/k/running.1" ] || fail "the long run did not start" "$(cat "$tmp/killed.out" "$tmp/daemon.log")"
hvdctl status >"$tmp/status.out" 2>&1 || fail "hvdctl status failed" "$(cat "$tmp/status.out")"
hvdctl job vg-killed >"$tmp/job.out" 2>&1 || fail "hvdctl job failed" "$(cat "$tmp/job.out")"
kill -9 "$(cat "$tmp/k/pid.1")"
wait $job
grep -q 'longrun: HVD_EABORTED' "$tmp/killed.out" || fail "the survivors were not told of the lost rank" \
        "$(cat "$tmp/killed.out")"
alive "after the killed rank"

# 3. hvdctl
hvdctl jobs >/dev/null || fail "hvdctl jobs failed"
hvdctl metrics | grep -q '^hvd_' || fail "hvdctl metrics failed"
hvdctl log-level >/dev/null || fail "hvdctl log-level failed"
hvdctl version >/dev/null || fail "hvdctl version failed"

# 4. bad input on the worker and the peer sockets
for addr in "$rt/worker.sock" "$peer"; do
        for kind in garbage bad-mechanism; do
                "$bw" greeting "$addr" "$kind" 30000 >/dev/null || fail "$kind on $addr was not closed"
        done
done
"$bw" greeting "$rt/worker.sock" half 30000 >/dev/null || fail "half a greeting was not closed"
"$bw" oversize "ipc://$rt/worker.sock" 100000000 >/dev/null || fail "could not send an oversized message"
"$bw" flood "ipc://$rt/worker.sock" 20 30 >/dev/null || fail "the flood failed"
"$bw" flood "ipc://$rt/control.sock" 5 30 >/dev/null || fail "the flood of the control socket failed"
"$bw" flood "tcp://$peer" 5 30 >/dev/null || fail "the flood of the peer socket failed"
if [ -x /usr/bin/python3 ]; then
        addr=$(hvdctl status --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["metrics_listen"])')
        /usr/bin/python3 "$HVD_SRCDIR/tests/lib/http_bad.py" "$addr" --fast >"$tmp/http.out" 2>&1 ||
                fail "bad HTTP input" "$(cat "$tmp/http.out" "$tmp/daemon.log")"
fi
alive "after bad input"
"$launch" -r "$rt" -j vg-after -t 240 -n 2 -- "$worker" allreduce >"$tmp/after.out" 2>&1 ||
        fail "a job after the bad input failed" "$(cat "$tmp/after.out" "$tmp/daemon.log")"

# 5. stop; memcheck's verdict
kill -TERM "$vg"
wait "$vg"
status=$?
vg=
t1=$(date +%s)
# (valgrind 3.19 has no pidfd_open: the daemon watches its workers' pids instead)
grep -vE 'unhandled amd64-linux syscall: 434|handler\.$|README_MISSING_SYSCALL|consider this a bug|valgrind.org/support' \
        "$tmp/valgrind.log"
echo "valgrind-daemon: $((t1 - t0)) s, daemon exit status $status"
[ $status -eq 0 ] || fail "memcheck found errors or leaks (exit status $status)" "$(cat "$tmp/valgrind.log")"
grep -qE 'definitely lost: [1-9]|indirectly lost: [1-9]|Invalid (read|write|free)|uninitialised' "$tmp/valgrind.log" &&
        fail "memcheck reports" "$(cat "$tmp/valgrind.log")"
echo "PASS: no memcheck error and no leak in the daemon"
