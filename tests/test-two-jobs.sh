#!/bin/bash
# test-two-jobs.sh — two jobs (of 2 and 3 ranks) on one hvd-coordinatord at
# the same time, each with its own tensors of the same names, one with a
# 4 MiB fusion threshold, the other with fusion off and a 3 ms cycle
# (Horovod's variable names): both get exact results, neither disturbs the
# other, the daemon keeps running.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
worker=$HVD_BUILDDIR/tests/worker_collectives
launch=$HVD_SRCDIR/tests/lib/launch.sh
tmp=$(mktemp -d /tmp/hvd-two-jobs-XXXXXX)
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

mkdir "$tmp/a" "$tmp/b"
HVD_FUSION_THRESHOLD=4M HVD_TEST_TMPDIR=$tmp/a setsid "$launch" -r "$tmp/rt" -j job-a -t 90 -n 2 -- \
        "$worker" allreduce broadcast allgather alltoall reducescatter barrier many >"$tmp/a.out" 2>&1 &
a=$!
groups+=("$a")
HOROVOD_FUSION_THRESHOLD=0 HOROVOD_CYCLE_TIME=3 HVD_TEST_TMPDIR=$tmp/b \
        setsid "$launch" -r "$tmp/rt" -j job-b -t 90 -n 3 -- \
        "$worker" many grouped barrier join allgather mismatch duplicate many >"$tmp/b.out" 2>&1 &
b=$!
groups+=("$b")
wait $a; sa=$?
wait $b; sb=$?
sed 's/^/[job-a] /' "$tmp/a.out"
sed 's/^/[job-b] /' "$tmp/b.out"
[ $sa -eq 0 ] || fail "job a (2 ranks) exited with $sa" "$(cat "$tmp/daemon.log")"
[ $sb -eq 0 ] || fail "job b (3 ranks) exited with $sb" "$(cat "$tmp/daemon.log")"
[ "$(grep -c 'scenario(s) passed' "$tmp/a.out")" -eq 2 ] || fail "not every rank of job a passed"
[ "$(grep -c 'scenario(s) passed' "$tmp/b.out")" -eq 3 ] || fail "not every rank of job b passed"
kill -0 $daemon 2>/dev/null || fail "hvd-coordinatord died" "$(cat "$tmp/daemon.log")"
echo "two concurrent jobs passed"
