#!/bin/bash
# test-kill-worker.sh — kill -9 one rank of a 3-rank job in the middle of a
# long run of allreduces: within a few seconds every other rank gets
# HVD_EABORTED with a message naming the lost rank, and exits cleanly (no
# hang); the daemon keeps running and a second job on it completes. Done
# twice: with handles waited on, and with handles released at once
# (detached operations under an abort; run it in a sanitizer build too).
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
worker=$HVD_BUILDDIR/tests/worker_collectives
launch=$HVD_SRCDIR/tests/lib/launch.sh
tmp=$(mktemp -d /tmp/hvd-kill-worker-XXXXXX)
groups=()
cleanup() {
        for g in "${groups[@]}"; do kill -TERM -- "-$g" 2>/dev/null; done
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

for scen in longrun longrun-detached; do
        rm -rf "$tmp/k"
        mkdir "$tmp/k"
        HVD_TEST_TMPDIR=$tmp/k setsid "$launch" -r "$tmp/rt" -j "killed-$scen" -t 60 -n 3 -- "$worker" $scen \
                >"$tmp/out" 2>&1 &
        job=$!
        groups+=("$job")
        for _ in $(seq 600); do
                [ -e "$tmp/k/running.0" ] && [ -e "$tmp/k/running.1" ] && [ -e "$tmp/k/running.2" ] && break
                kill -0 $job 2>/dev/null || break
                sleep 0.05
        done
        [ -e "$tmp/k/running.1" ] || fail "$scen: the job did not start running" "$(cat "$tmp/out" "$tmp/daemon.log")"
        victim=$(cat "$tmp/k/pid.1")
        t0=$(now_ms)
        kill -9 "$victim"
        wait $job
        t1=$(now_ms)
        cat "$tmp/out"
        elapsed=$((t1 - t0))
        echo "$scen: the other ranks were done $elapsed ms after the kill"
        [ $elapsed -lt 5000 ] || fail "$scen: the surviving ranks took $elapsed ms to give up (expected < 5 s)"
        grep -q "Sanitizer" "$tmp/out" && fail "$scen: a sanitizer report"
        for r in 0 2; do
                line=$(grep "^\[$r\] rank $r: longrun: HVD_" "$tmp/out" | head -1)
                [ -n "$line" ] || fail "$scen: rank $r reported no error" "$(cat "$tmp/out")"
                case $line in
                *"longrun: HVD_EABORTED after"*) ;;
                *) fail "$scen: rank $r: expected HVD_EABORTED: $line" ;;
                esac
                case $line in
                *"rank 1"*) ;;
                *) fail "$scen: rank $r: the abort message does not name the lost rank 1: $line" ;;
                esac
                grep -q "^\[$r\] rank $r: longrun: next call: HVD_EABORTED" "$tmp/out" ||
                        fail "$scen: rank $r: a call after the abort did not fail with HVD_EABORTED" \
                                "$(grep "^\[$r\]" "$tmp/out")"
                grep -q "^\[$r\] rank $r: longrun: HUNG" "$tmp/out" && fail "$scen: rank $r hung"
        done
done
kill -0 $daemon 2>/dev/null || fail "hvd-coordinatord died with the job" "$(cat "$tmp/daemon.log")"

# the daemon still serves new jobs
mkdir "$tmp/second"
HVD_TEST_TMPDIR=$tmp/second timeout 60 "$launch" -r "$tmp/rt" -j second-job -n 2 -- "$worker" barrier many \
        >"$tmp/out2" 2>&1
status=$?
cat "$tmp/out2"
[ $status -eq 0 ] || fail "a second job after the kill exited with $status" "$(cat "$tmp/daemon.log")"
echo "kill test passed"
