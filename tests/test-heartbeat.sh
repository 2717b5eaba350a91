#!/bin/bash
# test-heartbeat.sh — worker liveness, with heartbeat_interval 500ms and
# heartbeat_timeout 3s:
#  1. a rank whose main thread sleeps 5 s while the others wait for it (in
#     negotiation) is not declared lost: its background thread sends the
#     heartbeats; when it then exits 1, the others are told that;
#  2. a SIGSTOPped rank in a run of allreduces is declared lost within the
#     timeout: the other ranks fail with HVD_EABORTED naming rank, pid,
#     host and cause; after SIGCONT its late heartbeat is refused as stale
#     (the daemon logs that once) and the rank itself fails with an error
#     saying the coordinator gave up on it; an unrelated job running on the
#     same daemon completes.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
worker=$HVD_BUILDDIR/tests/worker_faults
launch=$HVD_SRCDIR/tests/lib/launch.sh
tmp=$(mktemp -d /tmp/hvd-heartbeat-XXXXXX)
groups=()
cleanup() {
        kill_groups "${groups[@]}"
        rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

printf 'heartbeat_interval = 500ms\nheartbeat_timeout = 3s\n' >"$tmp/conf"
start_daemon "$tmp" "$tmp/conf"
groups+=("$daemon")

# 1. alive but slow: no false alarm
c=$tmp/slow
mkdir "$c"
setsid "$launch" -r "$tmp/rt" -j slow -t 60 -n 3 -- "$worker" negotiate "$c" >"$c/out" 2>&1 &
job=$!
groups+=("$job")
wait_files 60 "$c/ready.0" "$c/ready.1" "$c/ready.2" || fail "slow: the job did not start" "$(cat "$c/out")"
sleep 5
[ -e "$c/err.0" ] && fail "slow: a rank sleeping 5 s with a 3 s heartbeat timeout was declared lost" \
        "$(cat "$c/err.0" "$tmp/daemon.log")"
echo exit1 >"$c/fault"
wait $job
wait_files 10 "$c/err.0" "$c/err.2" || fail "slow: the others were not told" "$(cat "$c/out")"
# the status is named when the daemon sees the process before its parent reaps it
grep -q "rank 1 (pid $(cat "$c/pid.1") on host .*) exited" "$c/err.0" ||
        fail "slow: rank 0's error does not say rank 1 exited" "$(cat "$c/err.0")"
echo "ok: a rank busy for 5 s (heartbeat timeout 3 s) was not declared lost"

# 2. stopped: declared lost, its late messages refused
c=$tmp/stop
by=$tmp/by
mkdir "$c" "$by"
touch "$by/keepon"
setsid "$launch" -r "$tmp/rt" -j bystander -t 60 -n 2 -- "$worker" ok "$by" >"$by/out" 2>&1 &
by_pid=$!
groups+=("$by_pid")
setsid "$launch" -r "$tmp/rt" -j stopped -t 60 -n 3 -- "$worker" stop "$c" >"$c/out" 2>&1 &
job=$!
groups+=("$job")
wait_files 60 "$c/running.0" "$c/running.1" "$c/running.2" || fail "stop: the job did not start" "$(cat "$c/out")"
victim=$(cat "$c/pid.1")
t0=$(now_ms)
kill -STOP "$victim"
wait_files 20 "$c/err.0" "$c/err.2" || fail "stop: the other ranks were not told" "$(cat "$c/out" "$tmp/daemon.log")"
last=$(cat "$c/err.0" "$c/err.2" | cut -d' ' -f1 | sort -n | tail -1)
detect=$((last - t0))
echo "fault=sigstop phase=collectives detect_ms=$detect (heartbeat_timeout 3 s)"
[ $detect -lt 6000 ] || fail "stop: detected after $detect ms (timeout 3 s)"
for r in 0 2; do
        read -r _ code msg <"$c/err.$r"
        [ "$code" = -1002 ] || fail "stop: rank $r: expected HVD_EABORTED: $code $msg"
        case $msg in
        *"rank 1 (pid $victim on host "*") stopped responding: no heartbeat for "*" s"*) ;;
        *) fail "stop: rank $r: the error does not name the stopped rank and the cause: $msg" ;;
        esac
done
echo "  rank 0: $(cut -d' ' -f3- "$c/err.0")"
grep -q "job stopped aborted: rank 1 (pid $victim on host .*) stopped responding" "$tmp/daemon.log" ||
        fail "stop: the daemon did not log the abort" "$(cat "$tmp/daemon.log")"
kill -CONT "$victim"
wait_files 20 "$c/err.1" || fail "stop: the resumed rank did not fail" "$(cat "$c/out")"
read -r _ code msg <"$c/err.1"
[ "$code" = -1002 ] || fail "stop: the resumed rank: expected HVD_EABORTED: $code $msg"
case $msg in
*"coordinator gave up on it"*) ;;
*) fail "stop: the resumed rank's error does not say it was given up on: $msg" ;;
esac
echo "  rank 1 (resumed): $(cut -d' ' -f3- "$c/err.1")"
wait "$job" && fail "stop: the job exited 0"
n=$(grep -c "job stopped: stale .* from rank 1 (pid $victim) refused" "$tmp/daemon.log")
[ "$n" = 1 ] || fail "stop: expected one log line for the stale messages of rank 1, got $n" "$(cat "$tmp/daemon.log")"
grep "stale" "$tmp/daemon.log" | sed 's/^/  daemon: /'
grep -q "Sanitizer" "$c/out" && fail "stop: a sanitizer report" "$(cat "$c/out")"

touch "$by/stop"
wait $by_pid || fail "the unrelated job failed" "$(cat "$by/out" "$tmp/daemon.log")"
[ "$(grep -c ': OK$' "$by/out")" = 2 ] || fail "the unrelated job did not finish" "$(cat "$by/out")"
kill -0 $daemon 2>/dev/null || fail "hvd-coordinatord died" "$(cat "$tmp/daemon.log")"
m=$("$HVD_BUILDDIR/tools/hvdctl" --runtime-dir "$tmp/rt" metrics | grep '^hvd_workers_lost_total')
[ "${m##* }" = 1 ] || fail "hvd_workers_lost_total: $m"
metrics=$("$HVD_BUILDDIR/tools/hvdctl" --runtime-dir "$tmp/rt" metrics)
m=$(grep '^hvd_stale_messages_total' <<<"$metrics")
[ "${m##* }" -ge 1 ] || fail "hvd_stale_messages_total: $m"
m=$(grep '^hvd_messages_received_total{type="heartbeat"}' <<<"$metrics")
[ "${m##* }" -ge 10 ] || fail "heartbeats received: $m"
echo "heartbeat test passed"
