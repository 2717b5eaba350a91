#!/bin/bash
# test-deadlines.sh — deadlines with short values (the start timeout is in
# test-start-timeout.sh, heartbeats in test-heartbeat.sh, hvdctl against a
# silent socket in test-hvdctl.sh):
#  1. collective_timeout = 2s: rank 1 is stuck inside an allreduce (its input
#     is unreadable, so it never reaches the data plane's barrier) while it
#     stays alive; ranks 0 and 2 fail with an error naming the 2.0 s timeout
#     within the deadline plus one second (two under load), not before it;
#     another job on the daemon then completes;
#  2. hvdctl --timeout 1 against a daemon that is alive but hung (SIGSTOP):
#     exit status 3 after about a second, with a message.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
worker=$HVD_BUILDDIR/tests/worker_faults
launch=$HVD_SRCDIR/tests/lib/launch.sh
hvdctl=$HVD_BUILDDIR/tools/hvdctl
tmp=$(mktemp -d /tmp/hvd-deadlines-XXXXXX)
groups=()
cleanup() {
        kill_groups "${groups[@]}"
        rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

printf 'collective_timeout = 2s\nheartbeat_timeout = 60s\n' >"$tmp/conf"
start_daemon "$tmp" "$tmp/conf"
groups+=("$daemon")

# 1. a rank that never arrives in the data plane
c=$tmp/coll
mkdir "$c"
setsid "$launch" -r "$tmp/rt" -j never-arrives -t 60 -n 3 -- "$worker" collective "$c" >"$c/out" 2>&1 &
job=$!
groups+=("$job")
wait_files 60 "$c/ready.1" || fail "rank 1 did not get stuck in the collective" "$(cat "$c/out" "$tmp/daemon.log")"
t0=$(stat -c %.3Y "$c/ready.1" | tr -d .)
wait_files 20 "$c/err.0" "$c/err.2" || fail "the waiting ranks did not give up" "$(cat "$c/out")"
for r in 0 2; do
        read -r t code msg <"$c/err.$r"
        ms=$((t - t0))
        echo "rank $r: error ${ms} ms after rank 1 got stuck (collective_timeout 2 s): $msg"
        case $code in -1007 | -1002) ;; *) fail "rank $r: expected HVD_ETIMEOUT or HVD_EABORTED: $code $msg" ;; esac
        case $msg in
        *"timed out after 2.0 s"*) ;;
        *) fail "rank $r: the error does not name the 2.0 s timeout: $msg" ;;
        esac
        [ $ms -ge 1500 ] || fail "rank $r gave up after $ms ms, before the 2 s timeout"
        [ $ms -lt 4000 ] || fail "rank $r gave up after $ms ms (timeout 2 s)"
done
kill -0 "$(cat "$c/pid.1")" 2>/dev/null || fail "rank 1 should still be alive (stuck)"
echo exit1 >"$c/fault"
wait "$job" && fail "the job exited 0"
by=$tmp/by
mkdir "$by"
"$launch" -r "$tmp/rt" -j after -t 60 -n 2 -- "$worker" ok "$by" >"$by/out" 2>&1 ||
        fail "a job after the timeout failed" "$(cat "$by/out" "$tmp/daemon.log")"
[ "$(grep -c ': OK$' "$by/out")" = 2 ] || fail "the job after the timeout did not finish" "$(cat "$by/out")"

# 2. hvdctl against a hung daemon
kill -STOP $daemon
t0=$(now_ms)
"$hvdctl" --runtime-dir "$tmp/rt" --timeout 1 status >/dev/null 2>"$tmp/err"
st=$?
t=$(($(now_ms) - t0))
kill -CONT $daemon
echo "hvdctl --timeout 1 against a stopped daemon: exit $st after $t ms: $(head -1 "$tmp/err")"
[ $st -eq 3 ] || fail "hvdctl: expected exit status 3 (timeout), got $st" "$(cat "$tmp/err")"
[ $t -ge 900 ] || fail "hvdctl gave up after $t ms, before its 1 s timeout"
[ $t -lt 3000 ] || fail "hvdctl took $t ms with --timeout 1"
grep -q "did not answer\|timeout\|timed out" "$tmp/err" || fail "hvdctl: no message about the timeout" "$(cat "$tmp/err")"
"$hvdctl" --runtime-dir "$tmp/rt" --timeout 5 status >/dev/null || fail "the daemon does not answer after SIGCONT"
echo "deadlines ok"
