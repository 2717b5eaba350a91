#!/bin/bash
# test-daemon-lost.sh MODE — the coordinator of a running 2-rank job goes
# away in the middle of a long run of allreduces. MODE "stop": SIGTERM, so
# every rank gets HVD_EABORTED ("shutting down") within seconds. MODE
# "kill": kill -9, so the daemon cannot say anything: the ranks must still
# notice, fail their pending collective with an error and exit within 10 s
# instead of hanging. Called by test-daemon-stop.sh / test-daemon-killed.sh.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
mode=${1:?usage: test-daemon-lost.sh stop|kill}
worker=$HVD_BUILDDIR/tests/worker_collectives
launch=$HVD_SRCDIR/tests/lib/launch.sh
tmp=$(mktemp -d "/tmp/hvd-daemon-$mode-XXXXXX")
groups=()
cleanup() {
        for g in "${groups[@]}"; do kill -KILL -- "-$g" 2>/dev/null; done
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

setsid "$HVD_BUILDDIR/daemon/hvd-coordinatord" --runtime-dir "$tmp/rt" --log-level warning 2>"$tmp/daemon.log" &
daemon=$!
groups+=("$daemon")
for _ in $(seq 100); do [ -S "$tmp/rt/worker.sock" ] && break; sleep 0.05; done
[ -S "$tmp/rt/worker.sock" ] || fail "hvd-coordinatord did not start" "$(cat "$tmp/daemon.log")"

mkdir "$tmp/k"
HVD_TEST_TMPDIR=$tmp/k setsid "$launch" -r "$tmp/rt" -t 60 -n 2 -- "$worker" longrun >"$tmp/out" 2>&1 &
job=$!
groups+=("$job")
for _ in $(seq 600); do
        [ -e "$tmp/k/running.0" ] && [ -e "$tmp/k/running.1" ] && break
        kill -0 $job 2>/dev/null || break
        sleep 0.05
done
[ -e "$tmp/k/running.1" ] || fail "the job did not start running" "$(cat "$tmp/out" "$tmp/daemon.log")"
t0=$(now_ms)
if [ "$mode" = stop ]; then
        kill -TERM $daemon
        limit=5000
else
        kill -KILL $daemon
        limit=10000
fi
while kill -0 $job 2>/dev/null && [ $(($(now_ms) - t0)) -lt 30000 ]; do sleep 0.05; done
elapsed=$(($(now_ms) - t0))
kill -0 $job 2>/dev/null && fail "the ranks were still running 30 s after the daemon went away" "$(cat "$tmp/out")"
wait $job
cat "$tmp/out"
echo "the ranks were done $elapsed ms after the daemon went away ($mode)"
for r in 0 1; do
        line=$(grep "^\[$r\] rank $r: longrun: " "$tmp/out" | head -1)
        case $line in
        *HUNG*) fail "rank $r hung after the daemon went away: $line" ;;
        *": longrun: HVD_E"*) ;;
        *) fail "rank $r reported no error: '$line'" "$(cat "$tmp/out")" ;;
        esac
        if [ "$mode" = stop ]; then
                case $line in
                *"HVD_EABORTED after"*"shutting down"*) ;;
                *) fail "rank $r: expected HVD_EABORTED saying the coordinator is shutting down: $line" ;;
                esac
        fi
done
[ $elapsed -lt $limit ] || fail "the ranks took $elapsed ms to give up (expected < $limit ms)"
echo "daemon $mode ok"
