#!/bin/bash
# test-stall.sh — the stall inspector: rank 0 waits on a tensor the other
# ranks never submit (they wait in a barrier). With a 1 s warning time the
# daemon logs the tensor and the missing ranks once and hvdctl shows them;
# with a 4 s shutdown time every rank's wait ends with that message.
# hvdctl job shows what each rank waits with; the metrics count the
# warning and the abort.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
dir=$(mktemp -d /tmp/hvd-stall-XXXXXX)
dpid=
trap 'kill $dpid 2>/dev/null; wait $dpid 2>/dev/null; rm -rf "$dir"' EXIT
"$HVD_BUILDDIR/daemon/hvd-coordinatord" --runtime-dir "$dir" --log-level warning 2>"$dir/daemon.log" &
dpid=$!
for _ in $(seq 100); do [ -S "$dir/control.sock" ] && break; sleep 0.05; done
start=$(date +%s%N)
HVD_STALL_CHECK_TIME_SECONDS=1 HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=4 \
        "$HVD_SRCDIR/tests/lib/launch.sh" -r "$dir" -n 3 -t 30 -- "$HVD_BUILDDIR/tests/worker_smoke" stall \
        >"$dir/out" 2>&1 &
lpid=$!
sleep 2.5
status=$("$HVD_BUILDDIR/tools/hvdctl" --runtime-dir "$dir" status --json)
echo "$status" | ${PYTHON:-/usr/bin/python3} -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]
s = j["stalled"]
assert "stuck.tensor" in s and "missing ranks [1, 2]" in s and "ready on ranks [0]" in s, s
' || fail "hvdctl status does not show the stalled tensor" "$status"
# the per-rank view: rank 0 waits with its tensor, the others with their barrier
jid=$(echo "$status" | ${PYTHON:-/usr/bin/python3} -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["job_id"])')
detail=$("$HVD_BUILDDIR/tools/hvdctl" --runtime-dir "$dir" job "$jid" --json)
echo "$detail" | ${PYTHON:-/usr/bin/python3} -c '
import json, sys
j = json.load(sys.stdin)
assert "stuck.tensor" in j["stalled"], j["stalled"]
assert [r["tensors_pending"] for r in j["rank_status"]] == [1, 1, 1], j["rank_status"]
assert all(r["state"] == "running" and r["seen"] for r in j["rank_status"]), j["rank_status"]
' || fail "hvdctl job does not show what each rank waits with" "$detail"
wait $lpid
ms=$(( ($(date +%s%N) - start) / 1000000 ))
# exactly one warning, naming the tensor and who is missing (the others'
# barrier may be listed beside it, in table order)
warn=$(grep "stalled for more than 1 s:" "$dir/daemon.log")
[ "$(printf '%s\n' "$warn" | grep -c .)" -eq 1 ] || fail "the daemon did not warn exactly once" "$(cat "$dir/daemon.log")"
case $warn in
*"'stuck.tensor' ready on ranks [0], missing ranks [1, 2]"*) ;;
*) fail "the warning does not name the stalled tensor and the missing ranks" "$warn" ;;
esac
for r in 0 1 2; do
        line=$(grep "^\[$r\] rank $r: .*stalled for more than 4 s:" "$dir/out")
        case $line in
        *"'stuck.tensor' ready on ranks [0], missing ranks [1, 2]"*) ;;
        *) fail "rank $r was not told why the job stopped" "$(cat "$dir/out")" ;;
        esac
done
[ "$ms" -lt 9000 ] || fail "the stalled job took $ms ms to end"
metrics=$("$HVD_BUILDDIR/tools/hvdctl" --runtime-dir "$dir" metrics)
{ grep -qx "hvd_stall_warnings_total 1" <<<"$metrics" && grep -qx "hvd_jobs_aborted_total 1" <<<"$metrics"; } ||
        fail "metrics do not count the stall warning and the abort" "$(grep -E 'stall|aborted' <<<"$metrics")"
echo "ok: stall warned once, shown by hvdctl, job aborted on every rank after $ms ms"
