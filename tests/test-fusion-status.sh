#!/bin/bash
# test-fusion-status.sh — Tensor Fusion happens, and the threshold knob
# reaches the daemon: 3 rounds of 300 small allreduces on 3 ranks, then,
# while the job is still alive, the daemon's status (hvdctl status --json,
# JobStatus counters) must show fewer fused operations than negotiated
# tensors, tensors that shared an operation, and cache hits from the
# repeated rounds. With HOROVOD_FUSION_THRESHOLD=0 (Horovod's name for the
# knob) every tensor runs alone.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
worker=$HVD_BUILDDIR/tests/worker_collectives
launch=$HVD_SRCDIR/tests/lib/launch.sh
hvdctl=$HVD_BUILDDIR/tools/hvdctl
[ -x "$hvdctl" ] || skip "tools/hvdctl is not built"
tmp=$(mktemp -d /tmp/hvd-fusion-status-XXXXXX)
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

# run_and_check JOB MODE [ENV...]: runs "many" on 3 ranks, holds the job,
# reads its counters and checks them for MODE (fused or unfused)
run_and_check() {
        local job=$1 mode=$2
        shift 2
        rm -f "$tmp/hold.ready" "$tmp/hold.go"
        env "$@" HVD_TEST_HOLD="$tmp/hold" HVD_TEST_TMPDIR="$tmp" setsid "$launch" -r "$tmp/rt" -j "$job" -t 60 -n 3 -- \
                "$worker" many >"$tmp/out" 2>&1 &
        local pid=$!
        groups+=("$pid")
        for _ in $(seq 600); do
                [ -e "$tmp/hold.ready" ] && break
                kill -0 $pid 2>/dev/null || break
                sleep 0.05
        done
        [ -e "$tmp/hold.ready" ] || fail "$job: the job did not reach its hold point" \
                "$(cat "$tmp/out" "$tmp/daemon.log")"
        "$hvdctl" --runtime-dir "$tmp/rt" status --json >"$tmp/status.json" 2>"$tmp/hvdctl.err"
        local st=$?
        touch "$tmp/hold.go"
        [ $st -eq 0 ] || fail "hvdctl status --json exited with $st" "$(cat "$tmp/hvdctl.err")"
        /usr/bin/python3 - "$tmp/status.json" "$job" "$mode" <<'PY' || fail "$job: counters" "$(cat "$tmp/status.json")"
import json, sys
doc = json.load(open(sys.argv[1]))
job, mode = sys.argv[2], sys.argv[3]
def jobs(x):
    if isinstance(x, dict):
        if "job_id" in x and "fused_ops" in x:
            yield x
        for v in x.values():
            yield from jobs(v)
    elif isinstance(x, list):
        for v in x:
            yield from jobs(v)
mine = [j for j in jobs(doc) if j["job_id"] == job]
if len(mine) != 1:
    sys.exit("job %s appears %d times in the status" % (job, len(mine)))
j = mine[0]
neg, fused, shared = j["tensors_negotiated"], j["fused_ops"], j["tensors_in_fused_ops"]
print("%s: tensors_negotiated=%d fused_ops=%d tensors_in_fused_ops=%d cache_hits=%d schedules=%d state=%s"
      % (job, neg, fused, shared, j.get("cache_hits", -1), j.get("schedules", -1), j.get("state")))
errors = []
if neg < 900:
    errors.append("tensors_negotiated %d < the 900 allreduces submitted" % neg)
if mode == "fused":
    if not fused < neg:
        errors.append("fused_ops %d is not below tensors_negotiated %d: nothing was fused" % (fused, neg))
    if not 0 < shared <= neg:
        errors.append("tensors_in_fused_ops %d out of (0, %d]" % (shared, neg))
    if fused * 10 > neg:
        errors.append("only %.1f tensors per op on average (%d ops for %d tensors)" % (neg / max(fused, 1), fused, neg))
else:
    if fused != neg or shared != 0:
        errors.append("fusion is off, yet %d ops for %d tensors, %d tensors shared an op" % (fused, neg, shared))
if j.get("cache_hits", 1) <= 0:
    errors.append("no cache hits although 600 tensors were resubmitted unchanged")
if j.get("state") != "running":
    errors.append("state %r, expected running" % j.get("state"))
if errors:
    sys.exit("; ".join(errors))
PY
        wait $pid
        local status=$?
        cat "$tmp/out"
        [ $status -eq 0 ] || fail "$job exited with $status" "$(cat "$tmp/daemon.log")"
}

run_and_check fused-$$ fused
run_and_check unfused-$$ unfused HOROVOD_FUSION_THRESHOLD=0
echo "fusion status ok"
