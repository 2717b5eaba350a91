#!/bin/bash
# test-mismatch-retry.sh — after an allreduce fails on every rank with
# HVD_EMISMATCH, the same tensor name submitted again with agreeing
# parameters must complete normally (the job goes on; it is not aborted).
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
tmp=$(mktemp -d /tmp/hvd-mismatch-retry-XXXXXX)
groups=()
cleanup() {
        for g in "${groups[@]}"; do kill -TERM -- "-$g" 2>/dev/null; done
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

setsid "$HVD_BUILDDIR/daemon/hvd-coordinatord" --runtime-dir "$tmp/rt" --log-level warning 2>"$tmp/daemon.log" &
groups+=($!)
for _ in $(seq 100); do [ -S "$tmp/rt/worker.sock" ] && break; sleep 0.05; done
[ -S "$tmp/rt/worker.sock" ] || fail "hvd-coordinatord did not start" "$(cat "$tmp/daemon.log")"

HVD_TEST_TMPDIR=$tmp timeout 90 "$HVD_SRCDIR/tests/lib/launch.sh" -r "$tmp/rt" -t 60 -n 2 -- \
        "$HVD_BUILDDIR/tests/worker_collectives" mismatch-retry mismatch >"$tmp/out" 2>&1
status=$?
cat "$tmp/out"
[ $status -eq 0 ] || fail "worker_collectives mismatch-retry exited with $status"
echo "mismatch retry ok"
