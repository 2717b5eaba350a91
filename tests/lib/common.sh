# common.sh — helpers for the shell tests (sourced by sh and bash scripts:
# POSIX sh only).
# shellcheck shell=sh
: "${HVD_BUILDDIR:?run through make check}" "${HVD_SRCDIR:?run through make check}"

# fail MESSAGE [DETAILS]: print and exit 1
fail() {
        echo "FAIL: $1" >&2
        [ $# -gt 1 ] && printf '%s\n' "$2" | tail -n 40 >&2
        exit 1
}

# skip REASON: exit 77, which automake reports as SKIP
skip() {
        echo "SKIP: $1" >&2
        exit 77
}

# now_ms: the wall clock in milliseconds
now_ms() { date +%s%3N; }

# free_port N: a TCP port for a server this test starts, distinct for each
# N: below the kernel's ephemeral range (32768 and up), so no connection
# another test makes takes it between this check and the bind, and used by
# no socket in any state now
free_port() {
        _fp=$((20000 + ($$ + $1 * 7919) % 12000))
        while ss -tanH "sport = :$_fp" 2>/dev/null | grep -q .; do _fp=$((20000 + (_fp - 19999) % 12000)); done
        echo "$_fp"
}

# wait_files SECONDS FILE...: wait until every FILE exists; 1 if they do not
# within SECONDS
wait_files() {
        _wf_n=$(($1 * 20))
        shift
        while [ "$_wf_n" -gt 0 ]; do
                _wf_ok=1
                for _wf_f in "$@"; do [ -e "$_wf_f" ] || { _wf_ok=; break; }; done
                [ -n "$_wf_ok" ] && return 0
                sleep 0.05
                _wf_n=$((_wf_n - 1))
        done
        return 1
}

# kill_groups PGID...: ends every process of these process groups (stopped
# ones too: SIGCONT before SIGKILL) and reaps this shell's children
kill_groups() {
        for _kg in "$@"; do
                kill -CONT -- "-$_kg" 2>/dev/null
                kill -KILL -- "-$_kg" 2>/dev/null
        done
        wait 2>/dev/null
}

# start_daemon DIR CONF: start hvd-coordinatord in its own process group
# with the configuration file CONF, runtime directory DIR/rt and its log in
# DIR/daemon.log; sets $daemon to its pid and fails the test unless its
# worker socket appears within 10 s
start_daemon() {
        setsid "$HVD_BUILDDIR/daemon/hvd-coordinatord" -c "$2" --runtime-dir "$1/rt" --log-level info \
                2>"$1/daemon.log" &
        # shellcheck disable=SC2034 # the caller's
        daemon=$!
        wait_files 10 "$1/rt/worker.sock" || fail "hvd-coordinatord did not start" "$(cat "$1/daemon.log")"
}

# job_stalled RT_FILE PID: the "stalled" text of the first job of the daemon
# whose runtime directory RT_FILE names (hvdctl status --json), polled for
# up to 20 s while PID runs; empty when none came
job_stalled() {
        _js=
        for _ in $(seq 200); do
                _js=$("$HVD_BUILDDIR/tools/hvdctl" -r "$(cat "$1")" status --json 2>/dev/null |
                        "${PYTHON:-/usr/bin/python3}" -c 'import json,sys; j=json.load(sys.stdin)["jobs"]; print(j[0]["stalled"] if j else "")' 2>/dev/null)
                [ -n "$_js" ] && break
                kill -0 "$2" 2>/dev/null || break
                sleep 0.1
        done
        printf '%s\n' "$_js"
}
