#!/bin/bash
# test-table-capacity.sh — a job that names every step anew (as Horovod's
# unnamed "allreduce.noname.N" operations do) uses far more distinct tensor
# names than the daemon's tensor table holds (max_tensors_per_job = 16
# here, 65536 by default): completed tensors must make room, the job must
# run on. Also: many distinct names stay exact.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
tmp=$(mktemp -d /tmp/hvd-table-capacity-XXXXXX)
groups=()
cleanup() {
        for g in "${groups[@]}"; do kill -TERM -- "-$g" 2>/dev/null; done
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
printf '# a tiny negotiation table\nmax_tensors_per_job = 16\n' >"$tmp/coordinatord.conf"

setsid "$HVD_BUILDDIR/daemon/hvd-coordinatord" --runtime-dir "$tmp/rt" --log-level warning \
        -c "$tmp/coordinatord.conf" 2>"$tmp/daemon.log" &
groups+=($!)
for _ in $(seq 100); do [ -S "$tmp/rt/worker.sock" ] && break; sleep 0.05; done
[ -S "$tmp/rt/worker.sock" ] || fail "hvd-coordinatord did not start" "$(cat "$tmp/daemon.log")"

HVD_TEST_UNIQUE_STEPS=200 HVD_TEST_TMPDIR=$tmp timeout 90 "$HVD_SRCDIR/tests/lib/launch.sh" -r "$tmp/rt" -t 60 -n 2 -- \
        "$HVD_BUILDDIR/tests/worker_collectives" unique-names >"$tmp/out" 2>&1
status=$?
cat "$tmp/out"
[ $status -eq 0 ] || fail "200 uniquely named allreduces with a 16-tensor table: exit status $status"
echo "table capacity ok"
