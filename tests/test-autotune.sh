#!/bin/bash
# test-autotune.sh — the root daemon's autotuner on real jobs (hvdrun
# --emulate-hosts: two hosts, each with its own daemon, the ring over
# loopback TCP). A step of 200 gradients of 256 bytes, where fusion pays
# (one ring pass instead of 200): the search settles on a threshold that
# fuses at least a quarter of the step (51,200 bytes) at once; every rank
# prints the same changes (but for one sent after the job's last barrier)
# at the same schedule numbers as the CSV says they applied at; the CSV
# has a row per sample, numbered without a gap; hvdctl job ID shows the
# state while it runs; rank 0 writes the CSV. A fixed fusion threshold
# stays in every row and on every rank. A job that ends during warm-up
# leaves its warm-up rows, run from the start it was given. A job of 3
# ranks on one host, whose workers fuse from the shared-memory board
# without the daemon (the fast path), is tuned from the steps rank 0
# measures: it settles on fusing, every rank applies each change at the
# same schedule, and the schedules stay few (the steps ran from the board).
# Bad settings fail hvd_init with their value.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || skip "$PY is needed to check the CSV"
HVDRUN=$HVD_BUILDDIR/tools/hvdrun
hvdctl=$HVD_BUILDDIR/tools/hvdctl
worker=$HVD_BUILDDIR/tests/worker_autotune
tmp=$(mktemp -d /tmp/hvd-test-autotune-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok: $*"; }
export HVD_RUNTIME_DIR="$tmp/none" # no system daemon: hvdrun starts its own
header="hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,\
tensor_fusion_threshold,score,sample,state,best,applied_seq,generation,elastic_generation,\
tcp_send_thread,small_ring_chunks,large_shm_chunks"

# bad settings fail hvd_init at once, naming the variable and its value
for bad in "HVD_AUTOTUNE=maybe" "HVD_AUTOTUNE_WARMUP_SAMPLES=0" "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE=x" \
        "HVD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=-1" "HVD_AUTOTUNE_LOG=$tmp/no/such/dir/x.csv"; do
        out=$(env HVD_JOB_ID=bad HVD_JOB_SECRET=00 HVD_RANK=0 HVD_SIZE=2 HVD_LOCAL_RANK=0 HVD_LOCAL_SIZE=2 \
                HVD_AUTOTUNE=1 "$bad" timeout 20 "$worker" 1 1 1 2>&1) && fail "$bad was accepted"
        case $out in
        *"${bad#*=}'"*) ;;
        *) fail "$bad: the error does not name the value" "$out" ;;
        esac
done
ok "bad autotune settings fail hvd_init, naming the variable and its value"

# Every rank's "tune" lines go to OUT: the same on every rank, but that a
# change sent after the worker's final barrier may reach a rank after its
# last look, so a rank's lines may stop one short of the longest list (a
# change at the same position with another schedule or value is a
# disagreement). Usage: same_changes FILE OUT NP
same_changes() {
        local r n
        : >"$2"
        for r in $(seq 0 $(($3 - 1))); do
                grep "^\[$r\] tune " "$1" | sed 's/^\[[0-9]*\] //' >"$2.$r"
                [ "$(wc -l <"$2.$r")" -gt "$(wc -l <"$2")" ] && cp "$2.$r" "$2"
        done
        for r in $(seq 0 $(($3 - 1))); do
                n=$(wc -l <"$2.$r")
                head -n "$n" "$2" | cmp -s - "$2.$r" || fail "ranks applied different changes" "$(diff "$2" "$2.$r")"
                [ "$n" -ge "$(($(wc -l <"$2") - 1))" ] || fail "rank $r missed changes before the job's end" \
                        "$(diff "$2" "$2.$r")"
        done
}

# ---- convergence, 4 ranks on 2 hosts, watched with hvdctl
"$HVDRUN" -v -H a:2,b:2 --emulate-hosts --autotune --autotune-log-file "$tmp/a.csv" --autotune-warmup-samples 2 \
        --autotune-steps-per-sample 5 --autotune-bayes-opt-max-samples 12 \
        "$worker" 700 200 64 >"$tmp/a.out" 2>"$tmp/a.err" &
run=$!
# Watches job PID (hvdrun -v's stderr in ERR, its daemon's directory after
# the text DIR) with hvdctl: the states seen go to $states, the first
# "hvdctl job ID" to JOBFILE. Usage: watch_job PID ERR DIR JOBFILE
watch_job() {
        states=
        local dir job s
        for _ in $(seq 600); do
                dir=$(sed -n "s/^hvdrun: $3\([^, ]*\).*/\1/p" "$2")
                job=$(sed -n 's/^hvdrun: job \(job-[0-9a-f]*\),.*/\1/p' "$2")
                if [ -n "$dir" ] && [ -n "$job" ]; then
                        s=$("$hvdctl" -r "$dir" job "$job" --json 2>/dev/null |
                                "$PY" -c 'import json,sys; a=json.load(sys.stdin).get("autotune"); print(a["state"] if a else "")' \
                                        2>/dev/null)
                        case ";$states" in *";$s;"*) ;; *) [ -n "$s" ] && states="$states$s;" ;; esac
                        [ -n "$s" ] && [ ! -s "$4" ] && "$hvdctl" -r "$dir" job "$job" >"$4" 2>&1
                fi
                kill -0 "$1" 2>/dev/null || break
                sleep 0.05
        done
}
watch_job "$run" "$tmp/a.err" "host a emulated: private hvd-coordinatord in " "$tmp/a.job"
wait "$run" || fail "the autotuned job failed: exit status $?" "$(tail -20 "$tmp/a.err")"
[ "$(grep -c '^\[[0-3]\] done 700 steps$' "$tmp/a.out")" -eq 4 ] || fail "not every rank finished" "$(cat "$tmp/a.out")"
case $states in
*"warming up"* | *searching* | *settled*) ;;
*) fail "hvdctl job ID never showed the autotuner's state" "states seen: '$states'" ;;
esac
grep -Eq '^  autotune: (warming up|searching|settled|re-tuning), [0-9]+ samples; now ' "$tmp/a.job" ||
        fail "hvdctl job ID has no autotune line" "$(cat "$tmp/a.job")"
same_changes "$tmp/a.out" "$tmp/a.tune" 4
[ -s "$tmp/a.tune" ] || fail "no change reached the ranks" "$(cat "$tmp/a.out")"
"$PY" - "$tmp/a.csv" "$tmp/a.tune" "$header" <<'EOF' || fail "the CSV or the changes are wrong" "$(cat "$tmp/a.csv")"
import sys
path, tune, header = sys.argv[1:]
lines = open(path).read().splitlines()
assert lines[0] == header, "header: %r" % lines[0]
rows = [dict(zip(header.split(","), l.split(","))) for l in lines[1:]]
assert all(len(l.split(",")) == 16 for l in lines[1:]), "a row of the wrong width"
assert [int(r["sample"]) for r in rows] == list(range(1, len(rows) + 1)), "samples not numbered 1..N"
assert len(rows) >= 2 + 12, "only %d samples" % len(rows)
assert [r["state"] for r in rows[:2]] == ["warmup", "warmup"], "no warm-up rows first"
settled = [r for r in rows if r["state"] == "settled"]
assert settled, "never settled"
mib = float(settled[-1]["tensor_fusion_threshold"])
assert mib * 1048576 >= 51200 / 4 - 1, "settled on %.4f MiB: does not fuse a quarter of the step" % mib
# what each rank applied is what the root logged, at the same schedule
changes = {}
for l in open(tune):
    f = l.split()
    changes[int(f[1])] = (int(f[3]), int(f[5]), int(f[7]), int(f[9]))
SWITCHES = ("tcp_send_thread", "small_ring_chunks", "large_shm_chunks")
for r in rows:
    g = int(r["generation"])
    if g == 0 or g not in changes:
        continue
    seq, thr, cyc, sw = changes[g]
    assert int(r["applied_seq"]) == seq, "change %d: the ranks applied it at %d, the log says %s" % (g, seq, r["applied_seq"])
    assert abs(float(r["tensor_fusion_threshold"]) - thr / 1048576) < 1e-4, "change %d: threshold" % g
    assert abs(float(r["cycle_time_ms"]) - cyc / 1000) < 1e-3, "change %d: cycle time" % g
    assert sum(int(r[c]) << k for k, c in enumerate(SWITCHES)) == sw, "change %d: the ranks have switches %d" % (g, sw)
# the switch phase: each switch, none fixed, tried once on top of the best point
searched = [r for r in rows if r["state"] == "searching"]
for c in SWITCHES:
    assert sum(r[c] == "1" for r in searched) >= 1, "switch %s was never tried" % c
assert any(sw for _, _, _, sw in changes.values()), "no rank ever switched"
print("settled on %.4f MiB, %s ms, switches %s after %d samples; %d changes" %
      (mib, settled[-1]["cycle_time_ms"], [settled[-1][c] for c in SWITCHES], len(rows), len(changes)))
EOF
grep -Eq 'switches (none|[a-z+-]+)' "$tmp/a.job" || fail "hvdctl job ID shows no switches" "$(cat "$tmp/a.job")"
ok "4 ranks on 2 hosts: the search settles on fusing the step, then tries each data-plane switch; every rank applies each change (switches too) at the schedule the CSV says; hvdctl job ID shows it (states seen: $states)"

# ---- a fixed fusion threshold is never touched, nor a switch set by its
# variable (HVD_TCP_SEND_THREAD); the cycle time and the chunk switch are tuned
HVD_TCP_SEND_THREAD=0 "$HVDRUN" -H a:1,b:1 --emulate-hosts --fusion-threshold-mb 1 --autotune \
        --autotune-log-file "$tmp/f.csv" \
        --autotune-warmup-samples 1 --autotune-steps-per-sample 3 --autotune-bayes-opt-max-samples 6 \
        "$worker" 300 200 64 >"$tmp/f.out" 2>"$tmp/f.err" || fail "the fixed job failed: exit status $?" "$(cat "$tmp/f.err")"
same_changes "$tmp/f.out" "$tmp/f.tune" 2
[ -s "$tmp/f.tune" ] || fail "no cycle time was tried" "$(cat "$tmp/f.csv")"
if grep -qv "threshold 1048576 " "$tmp/f.tune"; then fail "a rank's fusion threshold moved" "$(cat "$tmp/f.tune")"; fi
if grep -Eq "switches [0-9]*[13579]$" "$tmp/f.tune"; then fail "a rank's send thread (fixed) was switched" "$(cat "$tmp/f.tune")"; fi
"$PY" - "$tmp/f.csv" <<'EOF' || fail "a fixed value moved in the CSV" "$(cat "$tmp/f.csv")"
import sys
rows = [l.split(",") for l in open(sys.argv[1]).read().splitlines()[1:]]
assert len(rows) >= 7 and all(r[5] == "1.0000" for r in rows)
assert len({r[4] for r in rows}) > 1, "the cycle time was not tuned"
assert all(r[13] == "0" for r in rows), "the fixed send thread was switched"
assert any(r[14] == "1" for r in rows), "the chunk switch, not fixed, was not tried"
EOF
ok "a fusion threshold set with --fusion-threshold-mb and a send thread set with HVD_TCP_SEND_THREAD stay in every row and on every rank; the cycle time and the chunk switch are tuned"

# ---- a job that ends during warm-up leaves its rows: 22 steps, 10 a
# sample; it starts (HVD_AUTOTUNE_START_*) from fusion off and 10 ms, in
# force from the first schedule on every rank, and not fixed
HVD_AUTOTUNE=1 HVD_AUTOTUNE_LOG="$tmp/w.csv" HVD_AUTOTUNE_STEPS_PER_SAMPLE=10 HVD_AUTOTUNE_START_FUSION_THRESHOLD=0 \
        HVD_AUTOTUNE_START_CYCLE_TIME=10 "$HVDRUN" -H a:1,b:1 --emulate-hosts "$worker" 22 50 64 >"$tmp/w.out" \
        2>"$tmp/w.err" || fail "the short job failed: exit status $?" "$(cat "$tmp/w.err")"
[ "$(head -1 "$tmp/w.csv")" = "$header" ] || fail "the short job's CSV has no header" "$(cat "$tmp/w.csv")"
[ "$(tail -n +2 "$tmp/w.csv" | cut -d, -f5,6,8-12 | tr '\n' ' ')" = \
        "10.000,0.0000,1,warmup,0,1,1 10.000,0.0000,2,warmup,0,1,1 " ] ||
        fail "a job of 22 steps should leave 2 warm-up rows at its start" "$(cat "$tmp/w.csv")"
same_changes "$tmp/w.out" "$tmp/w.tune" 2
[ "$(cat "$tmp/w.tune")" = "tune 1 seq 1 threshold 0 cycle 10000 switches 0" ] ||
        fail "the start did not apply at the first schedule on every rank" "$(cat "$tmp/w.out")"
ok "a job that ends during warm-up leaves a row per sample it took; the start applies from the first schedule"

# ---- one host, the fast path: 3 ranks fuse from the board without the
# daemon; rank 0 measures the steps, changes go out in schedules of their own
"$HVDRUN" -v -np 3 --autotune --autotune-log-file "$tmp/o.csv" --autotune-warmup-samples 2 \
        --autotune-steps-per-sample 5 --autotune-bayes-opt-max-samples 10 \
        "$worker" 1500 200 64 >"$tmp/o.out" 2>"$tmp/o.err" &
run=$!
watch_job "$run" "$tmp/o.err" "using a private hvd-coordinatord [^ ]* in " "$tmp/o.job"
wait "$run" || fail "the one-host job failed: exit status $?" "$(tail -20 "$tmp/o.err")"
[ "$(grep -c '^\[[0-2]\] done 1500 steps$' "$tmp/o.out")" -eq 3 ] || fail "not every rank finished" "$(cat "$tmp/o.out")"
grep -q "autotune: one host with the fast path: rank 0 measures the steps" "$tmp/o.err" ||
        fail "the daemon did not tune from rank 0's steps" "$(cat "$tmp/o.err")"
case $states in
*"warming up"* | *searching* | *settled*) ;;
*) fail "hvdctl job ID never showed the one-host job's autotuner state" "states seen: '$states'" ;;
esac
grep -Eq '^  autotune: (warming up|searching|settled|re-tuning), [0-9]+ samples; now ' "$tmp/o.job" ||
        fail "hvdctl job ID has no autotune line for the one-host job" "$(cat "$tmp/o.job")"
same_changes "$tmp/o.out" "$tmp/o.tune" 3
[ -s "$tmp/o.tune" ] || fail "no change reached the one-host job's ranks" "$(cat "$tmp/o.out")"
"$PY" - "$tmp/o.csv" "$tmp/o.tune" "$header" <<'EOF' || fail "the one-host CSV or changes are wrong" "$(cat "$tmp/o.csv")"
import sys
path, tune, header = sys.argv[1:]
lines = open(path).read().splitlines()
assert lines[0] == header, "header: %r" % lines[0]
rows = [dict(zip(header.split(","), l.split(","))) for l in lines[1:]]
assert [int(r["sample"]) for r in rows] == list(range(1, len(rows) + 1)), "samples not numbered 1..N"
assert len(rows) >= 2 + 10, "only %d samples" % len(rows)
assert [r["state"] for r in rows[:2]] == ["warmup", "warmup"], "no warm-up rows first"
assert any(r["state"] == "searching" for r in rows), "no search"
settled = [r for r in rows if r["state"] == "settled"]
assert settled, "never settled"
# fusion pays here (one shared-memory allreduce of many tensors instead of
# one each): the winner fuses at least 8 of them
mib = float(settled[-1]["tensor_fusion_threshold"])
assert mib * 1048576 >= 8 * 256, "settled on %.4f MiB: fuses fewer than 8 tensors" % mib
changes = {}
for l in open(tune):
    f = l.split()
    changes[int(f[1])] = (int(f[3]), int(f[5]), int(f[7]))
    assert int(f[9]) & 3 == 0, "one host: a switch across nodes changed, there is nothing across nodes: %s" % l
assert all(r["tcp_send_thread"] + r["small_ring_chunks"] == "00" for r in rows), "one host: a switch across nodes was tried"
# the shared-memory chunk switch acts inside the host: tried, and applied by every rank
assert any(r["large_shm_chunks"] == "1" for r in rows if r["state"] == "searching"), "the shm chunk switch was never tried"
assert any(int(l.split()[9]) & 4 for l in open(tune)), "no rank applied the shm chunk switch"
for r in rows:
    g = int(r["generation"])
    if g == 0:
        continue
    assert g in changes, "change %d is in the CSV, no rank applied it" % g
    seq, thr, cyc = changes[g]
    assert int(r["applied_seq"]) == seq, "change %d: the ranks applied it at %d, the log says %s" % (g, seq, r["applied_seq"])
    assert abs(float(r["tensor_fusion_threshold"]) - thr / 1048576) < 1e-4, "change %d: threshold" % g
# the steady state ran from the board: schedules for the cold path, one
# per change and a few for tensors a descheduled rank left waiting on the
# board (withdrawn after 200 ms), not one a step
last = max(s for s, _, _ in changes.values())
assert last < 1500 / 4, "schedule %d for 1500 steps: the steps went through the daemon" % last
print("settled on %.4f MiB after %d samples; %d changes, the last at schedule %d" % (mib, len(rows), len(changes), last))
EOF
ok "3 ranks on one host with the fast path: tuned from rank 0's steps, settles on fusing, every rank applies each change at the schedule the CSV says (states seen: $states)"
