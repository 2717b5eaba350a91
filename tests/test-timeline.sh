#!/bin/bash
# test-timeline.sh — rank 0's timeline (docs/TIMELINE.md), checked by
# tests/lib/timeline_check.py with Python's strict json parser:
#  1. HVD_TIMELINE + HVD_TIMELINE_MARK_CYCLES on a known 3-rank job: every
#     tensor's negotiation has one mark per rank, then its operation with
#     the fusion copies and the collective, in order; cycle markers; fusion.
#  2. HOROVOD_TIMELINE (Horovod's name) works too, without cycle markers;
#     a program that exits without hvd_shutdown leaves complete JSON too.
#  3. hvdctl timeline JOB start/stop during a running job: the file is
#     complete JSON at once after stop, and holds only what ran in the window.
#  4. hvd_start_timeline/hvd_stop_timeline from C around some rounds only.
#  5. A job killed with SIGKILL leaves a file that json rejects, which
#     hvdctl timeline-repair makes valid; also one cut mid-event.
#  6. Errors: unknown job, bad usage, a file rank 0 cannot create.
#  7. Two emulated hosts (hvdrun --emulate-hosts): marks for the remote
#     ranks too, and the ring across nodes inside the allreduce.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
worker=$HVD_BUILDDIR/tests/worker_timeline
launch=$HVD_SRCDIR/tests/lib/launch.sh
hvdctl=$HVD_BUILDDIR/tools/hvdctl
check="/usr/bin/python3 $HVD_SRCDIR/tests/lib/timeline_check.py"
[ -x /usr/bin/python3 ] || skip "needs /usr/bin/python3"
tmp=$(mktemp -d /tmp/hvd-timeline-XXXXXX)
groups=()
cleanup() {
        for g in "${groups[@]}"; do kill -KILL -- "-$g" 2>/dev/null; done
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

setsid "$HVD_BUILDDIR/daemon/hvd-coordinatord" --runtime-dir "$tmp/rt" --log-level warning 2>"$tmp/daemon.log" &
groups+=($!)
for _ in $(seq 100); do [ -S "$tmp/rt/worker.sock" ] && break; sleep 0.05; done
[ -S "$tmp/rt/worker.sock" ] || fail "hvd-coordinatord did not start" "$(cat "$tmp/daemon.log")"
ctl() { "$hvdctl" -r "$tmp/rt" -t 20 "$@"; }

# wait_file PATH [SECONDS]
wait_file() {
        for _ in $(seq $((${2:-60} * 10))); do [ -e "$1" ] && return 0; sleep 0.1; done
        return 1
}

# 1. the environment, with cycle markers
HVD_TIMELINE=$tmp/env.json HVD_TIMELINE_MARK_CYCLES=1 "$launch" -r "$tmp/rt" -n 3 -t 60 -- "$worker" run 5 \
        >"$tmp/out1" 2>&1 || fail "job with HVD_TIMELINE failed" "$(cat "$tmp/out1")"
$check "$tmp/env.json" --ranks 3 --cycles --fused --expect tl.a:5 --expect tl.b:5 --expect tl.c:5 \
        --expect tl.bcast:5 >"$tmp/check1" 2>&1 || fail "HVD_TIMELINE file" "$(cat "$tmp/check1")"
tail -c 3 "$tmp/env.json" | grep -q ']' || fail "the file of a job that ended does not end with ]"

# 2. Horovod's variable; no cycle markers without HOROVOD_TIMELINE_MARK_CYCLES
HOROVOD_TIMELINE=$tmp/horovod.json "$launch" -r "$tmp/rt" -n 2 -t 60 -- "$worker" run 2 >"$tmp/out2" 2>&1 ||
        fail "job with HOROVOD_TIMELINE failed" "$(cat "$tmp/out2")"
$check "$tmp/horovod.json" --ranks 2 --expect tl.a:2 --expect tl.bcast:2 >"$tmp/check2" 2>&1 ||
        fail "HOROVOD_TIMELINE file" "$(cat "$tmp/check2")"

# 2b. a program that exits without hvd_shutdown still leaves complete JSON
HVD_TIMELINE=$tmp/exit.json "$launch" -r "$tmp/rt" -n 2 -t 60 -- "$worker" exit 2 >"$tmp/out2b" 2>&1 ||
        fail "job exiting without hvd_shutdown failed" "$(cat "$tmp/out2b")"
$check "$tmp/exit.json" --ranks 2 --expect tl.a:2 >"$tmp/check2b" 2>&1 ||
        fail "the file of a job that exited without hvd_shutdown" "$(cat "$tmp/check2b")"

# 3. hvdctl timeline start/stop while the job runs; rank 0 runs in $tmp/w3,
# so the relative file name lands there
mkdir -p "$tmp/w3"
(cd "$tmp/w3" && exec setsid "$launch" -r "$tmp/rt" -j tljob -n 3 -t 90 -- "$worker" window "$tmp/w3") \
        >"$tmp/out3" 2>&1 &
groups+=($!)
job3=$!
wait_file "$tmp/w3/pre.running" || fail "the window job did not start" "$(cat "$tmp/out3")"
ctl timeline tljob start ctl2.json --mark-cycles >"$tmp/start3" 2>&1 ||
        fail "hvdctl timeline start failed" "$(cat "$tmp/start3")"
grep -q "records the timeline into $tmp/w3/ctl2.json" "$tmp/start3" ||
        fail "hvdctl timeline start does not name the file" "$(cat "$tmp/start3")"
[ -f "$tmp/w3/ctl2.json" ] || fail "rank 0 did not create ctl2.json in its working directory"
ctl timeline tljob start ctl.json >"$tmp/start3b" 2>&1 ||
        fail "a second start (switching files) failed" "$(cat "$tmp/start3b")"
/usr/bin/python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$tmp/w3/ctl2.json" ||
        fail "the file a second start closed is not valid JSON"
# from outside the job, an existing file is never replaced
echo keep >"$tmp/w3/keep.json"
ctl timeline tljob start keep.json >"$tmp/start3c" 2>&1
{ [ $? -eq 1 ] && grep -q "File exists" "$tmp/start3c"; } || fail "hvdctl timeline start into an existing file" \
        "$(cat "$tmp/start3c")"
[ "$(cat "$tmp/w3/keep.json")" = keep ] || fail "hvdctl timeline start replaced an existing file"
touch "$tmp/w3/go"
wait_file "$tmp/w3/win.running" || fail "the window rounds did not start" "$(cat "$tmp/out3")"
ctl timeline tljob stop >"$tmp/stop3" 2>&1 || fail "hvdctl timeline stop failed" "$(cat "$tmp/stop3")"
grep -q "timeline stopped" "$tmp/stop3" || fail "hvdctl timeline stop said" "$(cat "$tmp/stop3")"
# complete JSON at once, while the job still runs
cp "$tmp/w3/ctl.json" "$tmp/ctl-at-stop.json"
touch "$tmp/w3/stop"
wait "$job3" || fail "the window job failed" "$(cat "$tmp/out3")"
cmp -s "$tmp/w3/ctl.json" "$tmp/ctl-at-stop.json" || fail "the timeline changed after hvdctl timeline stop"
$check "$tmp/w3/ctl.json" --ranks 3 --expect win.a:3 --expect win.bcast:3 --absent post. \
        >"$tmp/check3" 2>&1 || fail "hvdctl timeline file" "$(cat "$tmp/check3")"
pre_rounds=$(sed -n 's/^\[0\] pre rounds: //p' "$tmp/out3")
[ -n "$pre_rounds" ] || fail "the window job did not report its rounds" "$(cat "$tmp/out3")"
# the 3 rounds before pre.running ran before the start: not recorded
$check "$tmp/w3/ctl.json" --ranks 3 --max-negotiations "pre.a:$((pre_rounds - 3))" >"$tmp/check3b" 2>&1 ||
        fail "rounds from before the start are in the file (of $pre_rounds)" "$(cat "$tmp/check3b")"

# 4. the C API around the "api" rounds only
"$launch" -r "$tmp/rt" -n 2 -t 60 -- "$worker" api "$tmp/api.json" >"$tmp/out4" 2>&1 ||
        fail "hvd_start_timeline job failed" "$(cat "$tmp/out4")"
$check "$tmp/api.json" --ranks 2 --cycles --expect api.a:3 --expect api.bcast:3 --absent before. --absent after. \
        >"$tmp/check4" 2>&1 || fail "hvd_start_timeline file" "$(cat "$tmp/check4")"

# 5. killed: the file lacks "]"; the repair command closes it
mkdir -p "$tmp/w5"
HVD_TIMELINE=$tmp/killed.json setsid "$launch" -r "$tmp/rt" -n 3 -t 90 -- "$worker" hang "$tmp/w5" \
        >"$tmp/out5" 2>&1 &
groups+=($!)
job5=$!
wait_file "$tmp/w5/hanging" || fail "the job to kill did not get going" "$(cat "$tmp/out5")"
for r in 0 1 2; do wait_file "$tmp/w5/pid.$r" 10 || fail "rank $r wrote no pid"; done
sleep 0.5
kill -KILL "$(cat "$tmp/w5/pid.0")" "$(cat "$tmp/w5/pid.1")" "$(cat "$tmp/w5/pid.2")"
wait "$job5"
/usr/bin/python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$tmp/killed.json" 2>/dev/null &&
        fail "the killed job's file is complete JSON, expected it to lack its ]"
cp "$tmp/killed.json" "$tmp/cut.json"
"$hvdctl" timeline-repair "$tmp/killed.json" >"$tmp/repair5" 2>&1 || fail "timeline-repair failed" "$(cat "$tmp/repair5")"
$check "$tmp/killed.json" --ranks 3 --expect tl.a:3 --expect tl.bcast:3 >"$tmp/check5" 2>&1 ||
        fail "repaired file" "$(cat "$tmp/check5")"
{ "$hvdctl" timeline-repair "$tmp/killed.json" >"$tmp/repair5b" 2>&1 && grep -q "complete already" "$tmp/repair5b"; } ||
        fail "repairing a complete file" "$(cat "$tmp/repair5b")"
# a write cut short (disk full): half an event at the end goes
size=$(stat -c %s "$tmp/cut.json")
truncate -s $((size - 7)) "$tmp/cut.json"
"$hvdctl" timeline-repair "$tmp/cut.json" >"$tmp/repair5c" 2>&1 || fail "repairing a cut file" "$(cat "$tmp/repair5c")"
/usr/bin/python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$tmp/cut.json" ||
        fail "a cut file is not valid JSON after repair" "$(tail -c 300 "$tmp/cut.json")"
echo '{"not": "a timeline"}' >"$tmp/other.json"
"$hvdctl" timeline-repair "$tmp/other.json" >/dev/null 2>&1 && fail "timeline-repair accepted a file that is no timeline"
grep -q '"not"' "$tmp/other.json" || fail "timeline-repair changed a file that is no timeline"

# 6. errors
ctl timeline nosuchjob stop >"$tmp/err6" 2>&1
{ [ $? -eq 1 ] && grep -q "no job 'nosuchjob'" "$tmp/err6"; } || fail "unknown job" "$(cat "$tmp/err6")"
# --endpoint takes a runtime directory or an endpoint, as for the other commands
for ep in "$tmp/rt" "ipc://$tmp/rt/control.sock"; do
        "$hvdctl" --endpoint "$ep" timeline nosuchjob stop >"$tmp/err6e" 2>&1
        { [ $? -eq 1 ] && grep -q "no job 'nosuchjob'" "$tmp/err6e"; } || fail "--endpoint $ep" "$(cat "$tmp/err6e")"
done
"$hvdctl" -r "$tmp/rt" timeline tljob >"$tmp/err6b" 2>&1
[ $? -eq 2 ] || fail "hvdctl timeline without start/stop is a usage error" "$(cat "$tmp/err6b")"
"$hvdctl" -r "$tmp/rt" timeline tljob stop --mark-cycles >/dev/null 2>&1
[ $? -eq 2 ] || fail "--mark-cycles with stop is a usage error"
HVD_START_TIMEOUT=3 HVD_TIMELINE=$tmp/no/such/dir/x.json "$launch" -r "$tmp/rt" -n 2 -t 60 -- "$worker" run 1 >"$tmp/out6" 2>&1 &&
        fail "a job whose rank 0 cannot create its HVD_TIMELINE file ran"
grep -q "HVD_TIMELINE: timeline: cannot create" "$tmp/out6" || fail "no clear error for an uncreatable file" \
        "$(cat "$tmp/out6")"

# 7. several nodes
HVD_TIMELINE=$tmp/multi.json timeout -k 5 90 "$HVD_BUILDDIR/tools/hvdrun" -np 3 -H a:2,b:1 --emulate-hosts \
        "$worker" run 3 >"$tmp/out7" 2>&1 || fail "the two-host job failed" "$(cat "$tmp/out7")"
$check "$tmp/multi.json" --ranks 3 --expect tl.a:3 --expect tl.bcast:3 --activity TCP_RING_ALLREDUCE \
        >"$tmp/check7" 2>&1 || fail "the two-host timeline" "$(cat "$tmp/check7")"
echo "PASS: timeline"
