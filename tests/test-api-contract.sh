#!/bin/bash
# test-api-contract.sh — small promises of hvd.h, on 2 ranks: a
# broadcast's non-root input "is ignored", so a non-root rank may pass
# input = NULL; and hvd_shutdown() followed by hvd_init() in the same
# processes starts over (as in Horovod), with or without a daemon.
# Every part runs; the failures are listed at the end.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
worker=$HVD_BUILDDIR/tests/worker_collectives
launch=$HVD_SRCDIR/tests/lib/launch.sh
tmp=$(mktemp -d /tmp/hvd-api-contract-XXXXXX)
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

failed=()

HVD_TEST_TMPDIR=$tmp timeout 60 "$launch" -r "$tmp/rt" -t 30 -n 2 -- "$worker" bcast-null-input >"$tmp/out" 2>&1 ||
        failed+=("broadcast with a NULL non-root input on 2 ranks")
cat "$tmp/out"

(cd "$tmp" && env -u HVD_JOB_ID timeout 30 "$worker" reinit) >"$tmp/out" 2>&1 ||
        failed+=("hvd_init after hvd_shutdown without a daemon")
sed 's/^/[solo] /' "$tmp/out"

HVD_TEST_TMPDIR=$tmp timeout 60 "$launch" -r "$tmp/rt" -t 30 -n 2 -- "$worker" reinit >"$tmp/out" 2>&1 ||
        failed+=("hvd_init after hvd_shutdown on 2 ranks")
cat "$tmp/out"

[ ${#failed[@]} -eq 0 ] || fail "$(printf '%s; ' "${failed[@]}")"
echo "API contract ok"
