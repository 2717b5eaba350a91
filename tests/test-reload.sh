#!/bin/bash
# test-reload.sh — SIGHUP makes hvd-coordinatord read its --config file
# again: the live keys take effect at once (fusion_threshold seen in
# `hvdctl status --json`, log_level seen in what the daemon logs for the
# next job), a command-line flag keeps precedence over the file, a changed
# key that needs a restart (socket_mode) gets a warning naming it and keeps
# its value, and a file with an error changes nothing and the error names
# the file and line. Jobs run before and after each reload; the systemd
# peer sees RELOADING=1 then READY=1.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || skip "$PY is needed to read the JSON"
D=$HVD_BUILDDIR/daemon/hvd-coordinatord
HVDCTL=$HVD_BUILDDIR/tools/hvdctl
launch=$HVD_SRCDIR/tests/lib/launch.sh
tmp=$(mktemp -d /tmp/hvd-test-reload-XXXXXX)
pids=()
cleanup() {
        for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
ok() { echo "ok - $*"; }
wait_for() { # FILE PATTERN [SECONDS]
        for _ in $(seq $((${3:-30} * 20))); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
        return 1
}
# status_field NAME: a top-level field of hvdctl status --json
status_field() {
        "$HVDCTL" -r "$tmp/rt" status --json >"$tmp/status.json" || fail "hvdctl status failed"
        "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$tmp/status.json" "$1"
}
run_job() { # a 2-rank job against the daemon
        "$launch" -r "$tmp/rt" -t 60 -n 2 -- "$HVD_BUILDDIR/tests/worker_smoke" >"$tmp/job.out" 2>&1 ||
                fail "a job failed against the reloaded daemon" "$(cat "$tmp/job.out")"
}
reloads=0
hup() { # send SIGHUP and wait until the daemon has handled it
        reloads=$((reloads + 1))
        kill -HUP $daemon
        for _ in $(seq 600); do
                [ "$(grep -c "SIGHUP: reloading" "$tmp/daemon.log")" -ge $reloads ] &&
                        [ "$(grep -c "reload: [0-9]* setting\|reload failed" "$tmp/daemon.log")" -ge $reloads ] && return
                sleep 0.05
        done
        fail "SIGHUP number $reloads was not handled" "$(cat "$tmp/daemon.log")"
}

conf=$tmp/coordinatord.conf
cat >"$conf" <<CONF
# test configuration
runtime_dir = $tmp/rt
log_level = notice
fusion_threshold = 32M
cycle_time = 4ms
socket_mode = 0660
CONF
"$D" --check-config --config "$conf" >/dev/null || fail "--check-config refused a good file"
"$PY" "$HVD_SRCDIR/tests/lib/notify_peer.py" "$tmp/notify.sock" "$tmp/rt" "$tmp/notify.log" &
pids+=($!)
for _ in $(seq 200); do [ -e "$tmp/notify.sock.ready" ] && break; sleep 0.05; done
NOTIFY_SOCKET=$tmp/notify.sock "$D" --config "$conf" --cycle-time 3ms 2>"$tmp/daemon.log" &
daemon=$!
pids+=("$daemon")
wait_for "$tmp/notify.log" "READY=1" || fail "the daemon did not get ready" "$(cat "$tmp/daemon.log")"
[ "$(status_field fusion_threshold)" = 33554432 ] || fail "fusion_threshold from the file not in force"
[ "$(status_field cycle_time_usec)" = 3000 ] || fail "--cycle-time does not override the file"
run_job
grep -q "job .* created" "$tmp/daemon.log" && fail "info lines logged at log_level notice"
ok "started with the file and a flag: fusion_threshold 32M, cycle_time 3ms (flag), no info lines"

# ---- live keys change, a restart-only key gets a warning ----
sed -i -e 's/^log_level = .*/log_level = info/' -e 's/^fusion_threshold = .*/fusion_threshold = 8M/' \
        -e 's/^cycle_time = .*/cycle_time = 5ms/' -e 's/^socket_mode = .*/socket_mode = 0600/' "$conf"
hup
grep -q "reload: log_level = info (was notice)" "$tmp/daemon.log" || fail "no log_level change logged" "$(cat "$tmp/daemon.log")"
grep -q "reload: fusion_threshold = 8M (was 32M)" "$tmp/daemon.log" || fail "no fusion_threshold change logged" "$(cat "$tmp/daemon.log")"
grep -q "warning: reload: socket_mode changed (0660 -> 0600) but cannot change while running" "$tmp/daemon.log" ||
        fail "no warning naming socket_mode" "$(cat "$tmp/daemon.log")"
grep -q "reload: cycle_time" "$tmp/daemon.log" && fail "the file's cycle_time beat the --cycle-time flag on reload"
[ "$(status_field fusion_threshold)" = 8388608 ] || fail "fusion_threshold not reloaded: $(status_field fusion_threshold)"
[ "$(status_field cycle_time_usec)" = 3000 ] || fail "the --cycle-time flag lost precedence on reload"
[ "$(stat -c %a "$tmp/rt/worker.sock")" = 660 ] || fail "socket_mode changed live: $(stat -c %a "$tmp/rt/worker.sock")"
run_job
grep -q "job .* created: 2 ranks" "$tmp/daemon.log" || fail "log_level info not in force for the next job" "$(cat "$tmp/daemon.log")"
wait_for "$tmp/notify.log" "RELOADING=1" 5 || fail "no RELOADING=1" "$(cat "$tmp/notify.log")"
[ "$(grep -c "^[0-9]* READY=1" "$tmp/notify.log")" -ge 2 ] || fail "no READY=1 after the reload" "$(cat "$tmp/notify.log")"
ok "SIGHUP: log_level and fusion_threshold live, flag kept, socket_mode warned about and kept"

# ---- a broken file changes nothing ----
sed -i -e 's/^log_level = .*/log_level = debug/' -e 's/^fusion_threshold = .*/fusion_threshold = lots/' "$conf"
line=$(grep -n "^fusion_threshold" "$conf" | cut -d: -f1)
"$D" --check-config --config "$conf" >/dev/null 2>"$tmp/check.err" && fail "--check-config accepted a bad value"
grep -q "$conf:$line: invalid value 'lots' for 'fusion_threshold'" "$tmp/check.err" || fail "--check-config message" "$(cat "$tmp/check.err")"
hup
grep -q "error: reload failed, the settings in force are unchanged: $conf:$line: invalid value 'lots' for 'fusion_threshold'" \
        "$tmp/daemon.log" || fail "no error naming the line" "$(cat "$tmp/daemon.log")"
grep -q "log_level = debug" "$tmp/daemon.log" && fail "a key of the broken file was applied"
[ "$(status_field fusion_threshold)" = 8388608 ] || fail "a broken file changed fusion_threshold"
echo "nonsense line" >>"$conf"
hup
grep -q "reload failed.*$conf:$line: invalid value" "$tmp/daemon.log" || fail "second broken reload"
run_job
ok "a broken file: error with file and line, nothing applied, jobs still run"

# a good file again, then SIGTERM stops cleanly
sed -i -e 's/^fusion_threshold = .*/fusion_threshold = 1M/' -e '/^nonsense/d' "$conf"
hup
[ "$(status_field fusion_threshold)" = 1048576 ] || fail "a fixed file was not applied"
kill -TERM $daemon
wait $daemon
rc=$?
[ $rc -eq 0 ] || fail "exit status $rc after SIGTERM" "$(cat "$tmp/daemon.log")"
ok "a fixed file applies; SIGTERM exits 0"
echo "reload ok"
