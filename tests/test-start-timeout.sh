#!/bin/bash
# test-start-timeout.sh — a job of 3 ranks of which only 2 ever start, on a
# daemon with --start-timeout 2s: both started ranks fail hvd_init within
# about 3 s with HVD_ETIMEOUT and a message naming the missing rank 2. And a
# rank killed while the job forms: the others fail at once, naming it.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
worker=$HVD_BUILDDIR/tests/worker_collectives
tmp=$(mktemp -d /tmp/hvd-start-timeout-XXXXXX)
groups=()
cleanup() {
        for g in "${groups[@]}"; do kill -TERM -- "-$g" 2>/dev/null; done
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

setsid "$HVD_BUILDDIR/daemon/hvd-coordinatord" --runtime-dir "$tmp/rt" --log-level warning --start-timeout 2s \
        2>"$tmp/daemon.log" &
daemon=$!
groups+=("$daemon")
for _ in $(seq 100); do [ -S "$tmp/rt/worker.sock" ] && break; sleep 0.05; done
[ -S "$tmp/rt/worker.sock" ] || fail "hvd-coordinatord did not start" "$(cat "$tmp/daemon.log")"

t0=$(now_ms)
pids=()
for r in 0 1; do
        HVD_JOB_ID=incomplete HVD_JOB_SECRET=0123abcd HVD_RANK=$r HVD_SIZE=3 HVD_LOCAL_RANK=$r HVD_LOCAL_SIZE=3 \
                HVD_RUNTIME_DIR=$tmp/rt setsid timeout -k 2 20 \
                "$worker" expect-init-error HVD_ETIMEOUT 3500 "missing ranks [2]" "2 of 3" >"$tmp/out.$r" 2>&1 &
        pids+=($!)
        groups+=($!)
done
st=0
for p in "${pids[@]}"; do
        wait "$p" || st=$?
done
elapsed=$(($(now_ms) - t0))
cat "$tmp/out.0" "$tmp/out.1"
echo "both ranks gave up $elapsed ms after starting"
[ $st -eq 0 ] || fail "a started rank did not fail as expected (status $st)" "$(cat "$tmp/daemon.log")"
[ $elapsed -lt 4000 ] || fail "the start timeout took $elapsed ms (daemon: 2 s)"

# a rank killed while the others wait for the job to form: they fail at
# once with the lost rank named, not after the (here 20 s) start timeout
setsid "$HVD_BUILDDIR/daemon/hvd-coordinatord" --runtime-dir "$tmp/rt2" --log-level warning --start-timeout 20s \
        2>"$tmp/daemon2.log" &
groups+=($!)
for _ in $(seq 100); do [ -S "$tmp/rt2/worker.sock" ] && break; sleep 0.05; done
[ -S "$tmp/rt2/worker.sock" ] || fail "the second hvd-coordinatord did not start" "$(cat "$tmp/daemon2.log")"
env HVD_JOB_ID=forming HVD_JOB_SECRET=0123abcd HVD_RANK=0 HVD_SIZE=3 HVD_LOCAL_RANK=0 HVD_LOCAL_SIZE=3 \
        HVD_RUNTIME_DIR="$tmp/rt2" setsid timeout -k 2 30 \
        "$worker" expect-init-error HVD_EABORTED 6000 "rank 1" >"$tmp/forming.0" 2>&1 &
r0=$!
groups+=("$r0")
sleep 0.3
env HVD_JOB_ID=forming HVD_JOB_SECRET=0123abcd HVD_RANK=1 HVD_SIZE=3 HVD_LOCAL_RANK=1 HVD_LOCAL_SIZE=3 \
        HVD_RUNTIME_DIR="$tmp/rt2" setsid "$worker" barrier >"$tmp/forming.1" 2>&1 &
victim=$!
groups+=("$victim")
sleep 1
kill -9 $victim
wait $victim 2>/dev/null
wait $r0
st=$?
cat "$tmp/forming.0"
[ $st -eq 0 ] || fail "rank 0 did not fail with HVD_EABORTED naming rank 1 when rank 1 died during the join" \
        "$(cat "$tmp/daemon2.log")"

kill -0 $daemon 2>/dev/null || fail "hvd-coordinatord died" "$(cat "$tmp/daemon.log")"
echo "start timeout ok"
