#!/bin/bash
# test-bad-input.sh — what users get wrong, and the errors they must see:
# no daemon (HVD_ENODAEMON within a second), a wrong job secret while the job
# joins and while it runs (HVD_EDENIED naming the secret; the job itself
# goes on), calls before hvd_init and after hvd_shutdown (HVD_ENOTINIT),
# a handle pending at shutdown (HVD_ESHUTDOWN), parameters that differ
# across ranks (HVD_EMISMATCH on every rank) and duplicate names in flight.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
worker=$HVD_BUILDDIR/tests/worker_collectives
launch=$HVD_SRCDIR/tests/lib/launch.sh
tmp=$(mktemp -d /tmp/hvd-bad-input-XXXXXX)
groups=()
cleanup() {
        for g in "${groups[@]}"; do kill -TERM -- "-$g" 2>/dev/null; done
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
rank_env() { # JOB SECRET RANK SIZE: the environment hvdrun would give
        echo "HVD_JOB_ID=$1 HVD_JOB_SECRET=$2 HVD_RANK=$3 HVD_SIZE=$4 HVD_LOCAL_RANK=$3 HVD_LOCAL_SIZE=$4" \
                "HVD_RUNTIME_DIR=$tmp/rt"
}

# 1. an environment that contradicts itself, and no daemon at all
HVD_JOB_ID=x HVD_RANK=3 HVD_SIZE=2 HVD_RUNTIME_DIR=$tmp/empty timeout 10 \
        "$worker" expect-init-error -22 1000 HVD_RANK >"$tmp/out" 2>&1
status=$?
cat "$tmp/out"
[ $status -eq 0 ] || fail "hvd_init with HVD_RANK=3 HVD_SIZE=2 was not refused with -EINVAL"
mkdir "$tmp/empty"
HVD_JOB_ID=nodaemon HVD_RANK=0 HVD_SIZE=1 HVD_RUNTIME_DIR=$tmp/empty timeout 10 \
        "$worker" expect-init-error HVD_ENODAEMON 1000 "$tmp/empty/worker.sock" >"$tmp/out" 2>&1
status=$?
cat "$tmp/out"
[ $status -eq 0 ] || fail "hvd_init without a daemon: not HVD_ENODAEMON within 1 s"

setsid "$HVD_BUILDDIR/daemon/hvd-coordinatord" --runtime-dir "$tmp/rt" --log-level warning 2>"$tmp/daemon.log" &
daemon=$!
groups+=("$daemon")
for _ in $(seq 100); do [ -S "$tmp/rt/worker.sock" ] && break; sleep 0.05; done
[ -S "$tmp/rt/worker.sock" ] || fail "hvd-coordinatord did not start" "$(cat "$tmp/daemon.log")"

# 2. a wrong secret while the job is joining: rank 0 waits for rank 1; an
#    impostor rank 1 is refused; then the real rank 1 comes and the job runs
# shellcheck disable=SC2046 # rank_env prints NAME=VALUE words, split on purpose
env $(rank_env joining 00112233 0 2) HVD_TEST_TMPDIR="$tmp" setsid timeout -k 2 60 "$worker" barrier many \
        >"$tmp/joining.0" 2>&1 &
r0=$!
groups+=("$r0")
sleep 0.3
# shellcheck disable=SC2046 # rank_env prints NAME=VALUE words, split on purpose
env $(rank_env joining 99887766 1 2) timeout 10 "$worker" expect-init-error HVD_EDENIED 2000 secret \
        >"$tmp/impostor" 2>&1
status=$?
cat "$tmp/impostor"
[ $status -eq 0 ] || fail "an impostor with the wrong secret was not refused with HVD_EDENIED"
#    a second rank 0, and a rank 1 that believes in another world size
# shellcheck disable=SC2046 # rank_env prints NAME=VALUE words, split on purpose
env $(rank_env joining 00112233 0 2) timeout 10 "$worker" expect-init-error HVD_EDUPLICATE 2000 "rank 0" \
        >"$tmp/impostor" 2>&1
status=$?
cat "$tmp/impostor"
[ $status -eq 0 ] || fail "a second rank 0 was not refused with HVD_EDUPLICATE"
# shellcheck disable=SC2046 # rank_env prints NAME=VALUE words, split on purpose
env $(rank_env joining 00112233 1 3) timeout 10 "$worker" expect-init-error HVD_EMISMATCH 2000 "world size" \
        >"$tmp/impostor" 2>&1
status=$?
cat "$tmp/impostor"
[ $status -eq 0 ] || fail "a rank with another world size was not refused with HVD_EMISMATCH"
# shellcheck disable=SC2046 # rank_env prints NAME=VALUE words, split on purpose
env $(rank_env joining 00112233 1 2) HVD_TEST_TMPDIR="$tmp" timeout 60 "$worker" barrier many >"$tmp/joining.1" 2>&1
s1=$?
wait $r0
s0=$?
cat "$tmp/joining.0" "$tmp/joining.1"
{ [ $s0 -eq 0 ] && [ $s1 -eq 0 ]; } || fail "the job whose join an impostor tried to disturb failed ($s0, $s1)" \
        "$(cat "$tmp/daemon.log")"

# 3. a wrong secret while the job runs
HVD_TEST_HOLD=$tmp/hold HVD_TEST_TMPDIR=$tmp setsid "$launch" -r "$tmp/rt" -j running -s 00112233 -t 60 -n 2 -- \
        "$worker" barrier >"$tmp/running" 2>&1 &
job=$!
groups+=("$job")
for _ in $(seq 600); do
        [ -e "$tmp/hold.ready" ] && break
        kill -0 $job 2>/dev/null || break
        sleep 0.05
done
[ -e "$tmp/hold.ready" ] || fail "the job did not reach its hold point" "$(cat "$tmp/running")"
# shellcheck disable=SC2046 # rank_env prints NAME=VALUE words, split on purpose
env $(rank_env running 0badbad0 1 2) timeout 10 "$worker" expect-init-error HVD_EDENIED 2000 secret \
        >"$tmp/impostor" 2>&1
status=$?
cat "$tmp/impostor"
touch "$tmp/hold.go"
[ $status -eq 0 ] || fail "an impostor of a running job was not refused with HVD_EDENIED"
wait $job
status=$?
cat "$tmp/running"
[ $status -eq 0 ] || fail "the running job failed after an impostor tried to join" "$(cat "$tmp/daemon.log")"

# 4. before hvd_init / after hvd_shutdown, and a handle pending at shutdown
for n in 1 2; do
        timeout 60 "$launch" -r "$tmp/rt" -t 30 -n $n -- "$worker" notinit >"$tmp/notinit" 2>&1
        status=$?
        cat "$tmp/notinit"
        [ $status -eq 0 ] || fail "notinit on $n rank(s) exited with $status"
done
(cd "$tmp" && env -u HVD_JOB_ID timeout 30 "$worker" notinit) >"$tmp/notinit" 2>&1
status=$?
sed 's/^/[solo] /' "$tmp/notinit"
[ $status -eq 0 ] || fail "notinit without a daemon exited with $status"

# 5. mismatched parameters and duplicate names inside a running job of 3
HVD_TEST_TMPDIR=$tmp timeout 60 "$launch" -r "$tmp/rt" -t 50 -n 3 -- "$worker" mismatch duplicate barrier \
        >"$tmp/mm" 2>&1
status=$?
cat "$tmp/mm"
[ $status -eq 0 ] || fail "mismatch/duplicate on 3 ranks exited with $status" "$(cat "$tmp/daemon.log")"

# 6. a rank that shuts down while the others still submit collectives
HVD_TEST_TMPDIR=$tmp timeout 60 "$launch" -r "$tmp/rt" -t 50 -n 3 -- "$worker" early-shutdown >"$tmp/early" 2>&1
status=$?
cat "$tmp/early"
[ $status -eq 0 ] || fail "early-shutdown on 3 ranks exited with $status" "$(cat "$tmp/daemon.log")"

kill -0 $daemon 2>/dev/null || fail "hvd-coordinatord died" "$(cat "$tmp/daemon.log")"
echo "bad input handled"
