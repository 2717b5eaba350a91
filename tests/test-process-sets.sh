#!/bin/bash
# test-process-sets.sh — process sets on 4 ranks: the even and the odd
# ranks each reduce among themselves (membership queries, removal,
# refusals); grouped allreduces inside a set followed by grouped allreduces
# of the whole job; and the same tensor name used in both sets at the same
# time (two data-parallel groups of one job).
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
tmp=$(mktemp -d /tmp/hvd-process-sets-XXXXXX)
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

HVD_TEST_TMPDIR=$tmp timeout 90 "$HVD_SRCDIR/tests/lib/launch.sh" -r "$tmp/rt" -t 60 -n 4 -- \
        "$HVD_BUILDDIR/tests/worker_collectives" process-sets process-sets-grouped process-sets-same-name \
        >"$tmp/out" 2>&1
status=$?
cat "$tmp/out"
[ $status -eq 0 ] || fail "process sets on 4 ranks: exit status $status"
echo "process sets ok"
