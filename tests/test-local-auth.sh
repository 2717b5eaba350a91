#!/bin/bash
# test-local-auth.sh — who may use a daemon's ipc sockets (run as root):
# the daemon learns each worker's uid from the socket (ZAP over ipc,
# SO_PEERCRED), so a worker of another uid cannot join a job even with the
# job's secret, while the job goes on and that uid can run jobs of its own;
# without access to the socket file, a worker and hvdctl fail within
# seconds with "permission denied ... (not in group hvd?)".
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
[ "$(id -u)" -eq 0 ] || skip "needs root to run processes as another user"
command -v setpriv >/dev/null || skip "setpriv (util-linux) is missing"
nobody=$(id -u nobody 2>/dev/null) || skip "no user nobody"
as_nobody() { setpriv --reuid="$nobody" --regid="$(id -g nobody)" --clear-groups "$@"; }
b=$HVD_BUILDDIR
# every path a worker of another uid needs must be reachable for it
as_nobody test -x "$b/tests/worker_smoke" || skip "the build tree is not readable by nobody"

base=$(mktemp -d /tmp/hvd-auth-XXXXXX)
chmod 0755 "$base"
dpids=()
cleanup() {
        for p in "${dpids[@]}"; do kill -TERM "$p" 2>/dev/null; done
        for p in "${dpids[@]}"; do wait "$p" 2>/dev/null; done
        rm -rf "$base"
}
trap cleanup EXIT
start_daemon() { # NAME MODE
        local dir=$base/$1
        mkdir -p "$dir"
        chmod 0755 "$dir"
        printf 'socket_mode = %s\nstart_timeout = 20s\n' "$2" >"$dir/conf"
        "$b/daemon/hvd-coordinatord" -c "$dir/conf" --runtime-dir "$dir" --log-level info 2>"$dir/daemon.log" &
        dpids+=($!)
        for _ in $(seq 200); do [ -S "$dir/worker.sock" ] && break; sleep 0.05; done
        [ -S "$dir/worker.sock" ] || fail "daemon $1 did not start" "$(cat "$dir/daemon.log")"
}
start_daemon open 0666
start_daemon closed 0660

# rank ENV...: one worker of a 2-rank job on the open daemon
job=job-auth-$$ secret=$(printf '%08x%08x' $RANDOM$RANDOM $$)
rank_env() {
        echo "HVD_JOB_ID=$job HVD_JOB_SECRET=$secret HVD_RANK=$1 HVD_SIZE=2 HVD_LOCAL_RANK=$1 HVD_LOCAL_SIZE=2" \
                "HVD_RUNTIME_DIR=$base/open"
}
out0=$base/rank0.out
# shellcheck disable=SC2046 # rank_env prints NAME=VALUE words, split on purpose
env $(rank_env 0) timeout -k 5 60 "$b/tests/worker_smoke" >"$out0" 2>&1 &
r0=$!
for _ in $(seq 100); do grep -q "rank 0 joined" "$base/open/daemon.log" && break; sleep 0.05; done
grep -q "rank 0 joined" "$base/open/daemon.log" || fail "rank 0 did not join" "$(cat "$base/open/daemon.log" "$out0")"

# hvdctl actions on a job are its owner's or root's: nobody cannot start
# rank 0's timeline (root is not refused for permission: the job is still
# starting)
out=$(as_nobody timeout -k 5 30 "$b/tools/hvdctl" -r "$base/open" timeline "$job" start "$base/tl.json" 2>&1)
rc=$?
[ $rc -eq 4 ] || fail "hvdctl timeline by uid $nobody exited $rc, not 4" "$out"
echo "$out" | grep -q "permission denied: job $job belongs to uid 0; only its owner or root may start or stop its timeline (the request came from uid $nobody)" ||
        fail "hvdctl timeline by uid $nobody: no clear refusal" "$out"
out=$(timeout -k 5 30 "$b/tools/hvdctl" -r "$base/open" timeline "$job" stop 2>&1)
{ [ $? -eq 1 ] && ! echo "$out" | grep -q "permission denied"; } || fail "hvdctl timeline by root: unexpected answer" "$out"
[ ! -e "$base/tl.json" ] || fail "a refused timeline request created its file"
echo "ok: hvdctl timeline on a job of uid 0 is refused for uid $nobody (exit 4)"

# rank 1 as nobody, with the right secret: refused, quickly and clearly
start=$(date +%s%N)
# shellcheck disable=SC2046 # rank_env prints NAME=VALUE words, split on purpose
out=$(as_nobody env $(rank_env 1) timeout -k 5 30 "$b/tests/worker_smoke" 2>&1) &&
        fail "a worker of uid $nobody joined a job of uid 0" "$out"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$out" | grep -q "job $job belongs to uid 0: a process of uid $nobody cannot join it" ||
        fail "the foreign worker was not told why" "$out"
[ "$ms" -lt 10000 ] || fail "the refusal took $ms ms"
grep -q "of uid $nobody refused: the job belongs to uid 0" "$base/open/daemon.log" ||
        fail "the daemon did not log the refusal" "$(cat "$base/open/daemon.log")"
echo "ok: a worker of uid $nobody with the job's secret is refused in $ms ms"

# the job is not disturbed: its own rank 1 joins and it completes
# shellcheck disable=SC2046 # rank_env prints NAME=VALUE words, split on purpose
out=$(env $(rank_env 1) timeout -k 5 60 "$b/tests/worker_smoke" 2>&1) || fail "rank 1 of uid 0 failed" "$out"
wait $r0 || fail "rank 0 failed" "$(cat "$out0")"
grep -q "coll ok size 2" "$out0" || fail "rank 0: no success line" "$(cat "$out0")"
echo "ok: the job completes with its owner's ranks"

# nobody runs a job of its own on the same daemon
out=$(as_nobody env HVD_JOB_ID=job-nobody-$$ HVD_JOB_SECRET="$secret" HVD_RANK=0 HVD_SIZE=1 HVD_LOCAL_RANK=0 \
        HVD_LOCAL_SIZE=1 HVD_RUNTIME_DIR="$base/open" timeout -k 5 60 "$b/tests/worker_smoke" 2>&1) ||
        fail "uid $nobody cannot run its own job" "$out"
echo "$out" | grep -q "coll ok size 1" || fail "uid $nobody's own job: no success line" "$out"
echo "ok: uid $nobody runs its own job"

# no access to the socket file (mode 0660, root's group): clear message in seconds
start=$(date +%s%N)
out=$(as_nobody env HVD_JOB_ID=job-closed-$$ HVD_JOB_SECRET="$secret" HVD_RANK=0 HVD_SIZE=1 HVD_LOCAL_RANK=0 \
        HVD_LOCAL_SIZE=1 HVD_RUNTIME_DIR="$base/closed" timeout -k 5 30 "$b/tests/worker_smoke" 2>&1) &&
        fail "a worker without access to the socket ran" "$out"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$out" | grep -q "permission denied on $base/closed/worker.sock (not in group hvd?)" ||
        fail "no 'permission denied ... (not in group hvd?)' for the worker" "$out"
[ "$ms" -lt 10000 ] || fail "the worker took $ms ms to fail"
out=$(as_nobody timeout -k 5 30 "$b/tools/hvdctl" -r "$base/closed" status 2>&1)
rc=$?
[ $rc -eq 4 ] || fail "hvdctl without access exited $rc, not 4" "$out"
echo "$out" | grep -q "permission denied on $base/closed/control.sock" || fail "hvdctl: no permission message" "$out"
echo "ok: no access to the sockets: the worker and hvdctl say 'permission denied' in $ms ms"

# status stays readable for another uid where the socket lets it in
out=$(as_nobody timeout -k 5 30 "$b/tools/hvdctl" -r "$base/open" status 2>&1) || fail "hvdctl status as uid $nobody failed" "$out"
echo "ok: hvdctl status works for uid $nobody"
