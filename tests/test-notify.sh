#!/bin/bash
# test-notify.sh — hvd-coordinatord speaks systemd's notify protocol with no
# systemd around: a peer (tests/lib/notify_peer.py) binds NOTIFY_SOCKET.
# READY=1 arrives only once workers can connect (a stream connect and
# hvdctl status succeed the moment it arrives; a second daemon that cannot
# take the runtime directory sends no READY=1 at all); STATUS= says in words
# how many jobs and workers are served; WATCHDOG=1 comes at about half of
# WATCHDOG_USEC, over and over; SIGTERM with a 2-rank job running gives
# STOPPING=1, the ranks are told, the daemon exits 0 and removes its
# sockets, its lock file and the job's shared memory.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || skip "$PY plays the notify socket"
D=$HVD_BUILDDIR/daemon/hvd-coordinatord
HVDCTL=$HVD_BUILDDIR/tools/hvdctl
peer=$HVD_SRCDIR/tests/lib/notify_peer.py
tmp=$(mktemp -d /tmp/hvd-test-notify-XXXXXX)
pids=()
cleanup() {
        for p in "${pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null; done
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
ok() { echo "ok - $*"; }

# start_peer NAME: a notify peer at $tmp/NAME.sock logging to $tmp/NAME.log
start_peer() {
        "$PY" "$peer" "$tmp/$1.sock" "$tmp/$2" "$tmp/$1.log" "$HVDCTL" &
        pids+=($!)
        eval "peer_$1=$!"
        for _ in $(seq 200); do [ -e "$tmp/$1.sock.ready" ] && return; sleep 0.05; done
        fail "notify peer $1 did not start"
}
wait_for() { # FILE PATTERN [SECONDS]
        for _ in $(seq $((${3:-30} * 20))); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
        return 1
}

# ---- READY=1 only when workers can connect; STATUS in words ----
start_peer a rt
NOTIFY_SOCKET=$tmp/a.sock setsid "$D" --runtime-dir "$tmp/rt" --log-level info 2>"$tmp/daemon.log" &
daemon=$!
pids+=("$daemon")
wait_for "$tmp/a.log" "probe hvdctl" || fail "no READY=1 from the daemon" "$(cat "$tmp/a.log" "$tmp/daemon.log")"
first=$(head -1 "$tmp/a.log")
[ "${first#* }" = "READY=1" ] || fail "the first notification is not READY=1: '$first'" "$(cat "$tmp/a.log")"
grep -qx "probe connect ok" "$tmp/a.log" || fail "worker.sock refused a connect when READY=1 arrived" "$(cat "$tmp/a.log")"
grep -qx "probe hvdctl 0" "$tmp/a.log" || fail "hvdctl status failed when READY=1 arrived" "$(cat "$tmp/a.log")"
grep -q "^[0-9]* STATUS=Serving 0 jobs, 0 workers on $tmp/rt/worker.sock$" "$tmp/a.log" ||
        fail "no readable STATUS= with READY=1" "$(cat "$tmp/a.log")"
ok "READY=1 when a worker can connect and hvdctl gets an answer; STATUS=Serving 0 jobs, 0 workers"

# a second daemon on the same directory fails before it is ready: no READY=1
start_peer b rt
NOTIFY_SOCKET=$tmp/b.sock "$D" --runtime-dir "$tmp/rt" 2>"$tmp/second.log"
rc=$?
[ $rc -eq 1 ] || fail "a second daemon on a busy directory: exit status $rc, expected 1" "$(cat "$tmp/second.log")"
grep -q "already serves $tmp/rt" "$tmp/second.log" || fail "second daemon: message" "$(cat "$tmp/second.log")"
sleep 0.3
grep -q "READY=1" "$tmp/b.log" && fail "a daemon that could not bind sent READY=1" "$(cat "$tmp/b.log")"
ok "a daemon that cannot serve the directory exits 1 without READY=1"

# ---- a running job in STATUS; SIGTERM: STOPPING=1, clean exit ----
mkdir "$tmp/k"
HVD_TEST_TMPDIR=$tmp/k setsid "$HVD_SRCDIR/tests/lib/launch.sh" -r "$tmp/rt" -t 60 -n 2 -- \
        "$HVD_BUILDDIR/tests/worker_collectives" longrun >"$tmp/job.out" 2>&1 &
job=$!
pids+=("$job")
for _ in $(seq 600); do
        [ -e "$tmp/k/running.0" ] && [ -e "$tmp/k/running.1" ] && break
        kill -0 $job 2>/dev/null || break
        sleep 0.05
done
[ -e "$tmp/k/running.1" ] || fail "the job did not start" "$(cat "$tmp/job.out" "$tmp/daemon.log")"
wait_for "$tmp/a.log" "STATUS=Serving 1 job, 2 workers on " 10 || fail "STATUS= does not count the job" "$(cat "$tmp/a.log")"
ok "STATUS=Serving 1 job, 2 workers while a 2-rank job runs"

kill -TERM $daemon
for _ in $(seq 400); do kill -0 $daemon 2>/dev/null || break; sleep 0.05; done
kill -0 $daemon 2>/dev/null && fail "the daemon still runs 20 s after SIGTERM" "$(cat "$tmp/daemon.log")"
wait $daemon
rc=$?
[ $rc -eq 0 ] || fail "exit status $rc after SIGTERM, expected 0" "$(cat "$tmp/daemon.log")"
wait_for "$tmp/a.log" "peer done" 10 || fail "the peer did not finish" "$(cat "$tmp/a.log")"
grep -q "^[0-9]* STOPPING=1$" "$tmp/a.log" || fail "no STOPPING=1 after SIGTERM" "$(cat "$tmp/a.log")"
grep -q "^[0-9]* STATUS=Stopping: telling 1 job" "$tmp/a.log" || fail "no STATUS= when stopping" "$(cat "$tmp/a.log")"
for f in worker.sock control.sock coordinatord.lock; do
        [ ! -e "$tmp/rt/$f" ] || fail "$f left behind after SIGTERM"
done
# (the ranks unlink the name once all are attached; the daemon removes it
# too, for jobs that never got that far)
left=$(find /dev/shm -maxdepth 1 -name "hvd-$daemon-*" -printf '%f\n' | sort)
[ -z "$left" ] || fail "shared memory of the daemon left behind: $left"
for _ in $(seq 400); do kill -0 $job 2>/dev/null || break; sleep 0.05; done
kill -0 $job 2>/dev/null && fail "the ranks still run 20 s after the daemon stopped" "$(cat "$tmp/job.out")"
for r in 0 1; do
        grep -q "^\[$r\] rank $r: longrun: HVD_EABORTED after.*shutting down" "$tmp/job.out" ||
                fail "rank $r was not told the coordinator is shutting down" "$(cat "$tmp/job.out")"
done
ok "SIGTERM: ranks told, STOPPING=1, exit 0, sockets, lock and shared memory removed"

# ---- the watchdog: WATCHDOG_USEC=600 ms, pings at about 300 ms ----
start_peer w rtw
WATCHDOG_USEC=600000 NOTIFY_SOCKET=$tmp/w.sock "$D" --runtime-dir "$tmp/rtw" 2>"$tmp/wd.log" &
wd=$!
pids+=("$wd")
wait_for "$tmp/w.log" "READY=1" || fail "watchdog run: no READY=1" "$(cat "$tmp/wd.log")"
sleep 3
kill -TERM $wd
wait $wd
rc=$?
[ $rc -eq 0 ] || fail "watchdog run: exit status $rc" "$(cat "$tmp/wd.log")"
wait_for "$tmp/w.log" "peer done" 10 || fail "watchdog run: the peer did not finish"
n=$(grep -c "^[0-9]* WATCHDOG=1$" "$tmp/w.log")
# 3 s at one ping per 300 ms is about 10; a loaded machine may delay a few
{ [ "$n" -ge 5 ] && [ "$n" -le 14 ]; } || fail "watchdog: $n WATCHDOG=1 in 3 s, expected about 10" "$(cat "$tmp/w.log")"
# never later than the 600 ms interval systemd would enforce (some slack for load)
"$PY" - "$tmp/w.log" <<'PYEOF' || fail "watchdog pings too far apart" "$(cat "$tmp/w.log")"
import sys
t = [int(l.split()[0]) for l in open(sys.argv[1]) if l.rstrip().endswith(" WATCHDOG=1")]
gaps = [b - a for a, b in zip(t, t[1:])]
print("watchdog gaps (ms):", gaps)
sys.exit(0 if gaps and max(gaps) < 2000 else 1)
PYEOF
ok "WATCHDOG=1 every ~300 ms with WATCHDOG_USEC=600000 ($n in 3 s)"

# WATCHDOG_PID naming another process: no pings
start_peer x rtx
WATCHDOG_PID=1 WATCHDOG_USEC=200000 NOTIFY_SOCKET=$tmp/x.sock "$D" --runtime-dir "$tmp/rtx" 2>"$tmp/x.err" &
xd=$!
pids+=("$xd")
wait_for "$tmp/x.log" "READY=1" || fail "WATCHDOG_PID run: no READY=1" "$(cat "$tmp/x.err")"
sleep 1
kill -TERM $xd
wait $xd
wait_for "$tmp/x.log" "peer done" 10 || fail "WATCHDOG_PID run: the peer did not finish"
grep -q "WATCHDOG=1" "$tmp/x.log" && fail "WATCHDOG=1 sent although WATCHDOG_PID names another process"
ok "WATCHDOG_PID for another process: no pings"
echo "notify ok"
