#!/bin/bash
# test-hvdctl.sh — hvdctl against nothing, a stale socket, a silent socket,
# a forbidden socket and a live hvd-coordinatord serving a running 2-rank
# job (started with tests/lib/launch.sh, so hvdrun is not needed): exit
# statuses, messages, and `status --json` checked field by field with python.
set -u
B=${HVD_BUILDDIR:?HVD_BUILDDIR must point at the build tree}
S=${HVD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
HVDCTL=$B/tools/hvdctl
PY=/usr/bin/python3
tmp=$(mktemp -d /tmp/hvd-test-hvdctl-XXXXXX)
chmod 755 "$tmp"
bg_pids=()

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
        for f in "$tmp"/pid.*; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
        for p in "${bg_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -s "$tmp/err" ] && sed 's/^/  stderr: /' "$tmp/err"; exit 1; }
ok() { echo "ok - $*"; }
[ -x "$PY" ] || { echo "SKIP: $PY is needed to parse the JSON"; exit 77; }

# ---- no daemon ----
mkdir "$tmp/empty"
"$HVDCTL" --runtime-dir "$tmp/empty" status >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] || fail "no daemon: exit status $rc, expected 1"
[ "$(cat "$tmp/err")" = "hvdctl: no hvd-coordinatord is running at $tmp/empty (no control socket); start it with 'systemctl start hvd-coordinatord' or run jobs with hvdrun" ] ||
        fail "no daemon: message"
[ ! -s "$tmp/out" ] || fail "no daemon: printed to stdout"
HVD_RUNTIME_DIR=$tmp/empty "$HVDCTL" jobs 2>"$tmp/err"
{ [ $? -eq 1 ] && grep -q "running at $tmp/empty " "$tmp/err"; } || fail "no daemon: HVD_RUNTIME_DIR not used"
"$HVDCTL" --endpoint "ipc://$tmp/empty/control.sock" version >"$tmp/out" 2>"$tmp/err"
{ [ $? -eq 1 ] && grep -q "running at $tmp/empty " "$tmp/err"; } || fail "no daemon: --endpoint"
ok "no daemon: exit 1 with the message"

# ---- a stale socket (nobody listens) and a silent one (accepts, never answers) ----
mkdir "$tmp/stale" "$tmp/silent"
"$PY" -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$tmp/stale/control.sock"
"$HVDCTL" -r "$tmp/stale" status 2>"$tmp/err"
rc=$?
{ [ $rc -eq 1 ] && grep -q "no hvd-coordinatord is running at $tmp/stale (stale control socket" "$tmp/err"; } ||
        fail "stale socket: exit status $rc"
"$PY" -c '
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8)
open(sys.argv[1] + ".ready", "w").close()
conns = []
while True:
    c, _ = s.accept(); conns.append(c)' "$tmp/silent/control.sock" &
bg_pids+=($!)
for _ in $(seq 100); do [ -e "$tmp/silent/control.sock.ready" ] && break; sleep 0.05; done
t0=$(date +%s%3N)
"$HVDCTL" -r "$tmp/silent" --timeout 0.5 status 2>"$tmp/err"
rc=$?
t=$(($(date +%s%3N) - t0))
[ $rc -eq 3 ] || fail "silent socket: exit status $rc, expected 3"
grep -q "did not answer within 0.5 s" "$tmp/err" || fail "silent socket: message"
[ $t -lt 3000 ] || fail "silent socket: took $t ms with --timeout 0.5"
ok "stale socket: exit 1; silent daemon: exit 3 after the timeout ($t ms)"

# ---- usage ----
for args in "" "bogus" "--bogus status" "status extra" "--timeout 0 status" "-r $tmp -e ipc://x status" "version --json"; do
        # shellcheck disable=SC2086 # each case is a command line, split into its words
        "$HVDCTL" $args >/dev/null 2>"$tmp/err"
        rc=$?
        { [ $rc -eq 2 ] && [ -s "$tmp/err" ]; } || fail "usage: 'hvdctl $args' exited $rc, expected 2 with a message"
done
"$HVDCTL" --help | grep -q "status" || fail "--help"
"$HVDCTL" --version | grep -q "^hvdctl (hvd) " || fail "--version"
for opt in $("$HVDCTL" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u); do
        grep -qF -- "${opt//-/\\-}" "$S/man/hvdctl.1" || fail "man page lacks $opt"
done
ok "usage errors exit 2; --help matches the man page"

# ---- a live daemon with a running job ----
rt=$tmp/rt
"$B/daemon/hvd-coordinatord" --runtime-dir "$rt" --log-level warning 2>"$tmp/daemon.log" &
dp=$!
bg_pids+=("$dp")
for _ in $(seq 100); do [ -S "$rt/control.sock" ] && break; sleep 0.05; done
[ -S "$rt/control.sock" ] || fail "the daemon did not start: $(cat "$tmp/daemon.log")"

"$HVDCTL" -r "$rt" version >"$tmp/out" 2>"$tmp/err" || fail "version: exit status $?"
[ "$(sed -n 2p "$tmp/out")" = "hvd-coordinatord $(sed 's/^hvdctl //;q' "$tmp/out") (pid $dp) at $rt" ] ||
        fail "version: $(cat "$tmp/out")"

# A job id and host name that need escaping in JSON.
job='tst-"q"\é-'$$
host='h"o\st-ü'
# shellcheck disable=SC2016 # expanded by the shell of each rank
HVD_HOSTNAME=$host "$S/tests/lib/launch.sh" -r "$rt" -j "$job" -t 60 -n 2 -- \
        sh -c 'echo $$ > '"$tmp"'/pid.$HVD_RANK; exec "$0" -q -e 100000 --synthetic' "$B/examples/train_mlp" \
        >"$tmp/job.out" 2>&1 &
lp=$!
bg_pids+=("$lp")
state=
for _ in $(seq 200); do
        state=$("$HVDCTL" -r "$rt" jobs 2>/dev/null | cut -d' ' -f3)
        [ "$state" = running ] && break
        sleep 0.05
done
[ "$state" = running ] || fail "the job did not start running: $(cat "$tmp/job.out")"
pids=("$(cat "$tmp/pid.0")" "$(cat "$tmp/pid.1")")

"$HVDCTL" -r "$rt" status --json >"$tmp/status.json" 2>"$tmp/err" || fail "status --json: exit status $?"
"$PY" - "$tmp/status.json" "$job" "$host" "$rt" "$dp" "${pids[@]}" <<'EOF' || fail "status --json: $(cat "$tmp/status.json")"
import json, sys
path, job, host, rt, dpid, pid0, pid1 = sys.argv[1:]
s = json.load(open(path, encoding="utf-8"))
def check(cond, what):
    if not cond:
        sys.exit("status --json: " + what)
check(s["runtime_dir"] == rt and s["pid"] == int(dpid), "daemon fields")
for k in ("version", "uptime_usec", "epoch", "fusion_threshold", "cycle_time_usec", "host"):
    check(k in s, "missing " + k)
check(len(s["jobs"]) == 1, "expected one job, got %d" % len(s["jobs"]))
j = s["jobs"][0]
check(j["job_id"] == job, "job id %r != %r" % (j["job_id"], job))
check(j["size"] == 2 and j["state"] == "running", "size/state %r/%r" % (j["size"], j["state"]))
check(len(j["ranks"]) == 2, "ranks")
check([r["rank"] for r in j["ranks"]] == [0, 1], "rank numbers")
check([r["pid"] for r in j["ranks"]] == [int(pid0), int(pid1)], "pids %r" % j["ranks"])
check(all(r["host"] == host for r in j["ranks"]), "host %r != %r" % (j["ranks"][0]["host"], host))
for k in ("cycles", "tensors_negotiated", "fused_ops", "bytes_reduced", "age_usec", "schedules",
          "cache_hits", "tensors_in_fused_ops", "joined_ranks", "abort_reason"):
    check(k in j, "missing " + k)
EOF
ok "status --json: the job with size 2, state running, ranks with pids ${pids[*]}; strings escaped"

"$HVDCTL" -r "$rt" jobs --json >"$tmp/jobs.json" || fail "jobs --json: exit status $?"
"$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); assert len(j)==1 and j[0]["size"]==2, j' \
        "$tmp/jobs.json" || fail "jobs --json"
"$HVDCTL" -r "$rt" jobs >"$tmp/out" || fail "jobs: exit status $?"
[ "$(wc -l <"$tmp/out")" -eq 1 ] || fail "jobs: expected one line: $(cat "$tmp/out")"
[[ "$(cat "$tmp/out")" =~ ^"$job 2 running "[0-9.]+[smhd].*" 2/2"$ ]] || fail "jobs: $(cat "$tmp/out")"
"$HVDCTL" -r "$rt" status >"$tmp/out" || fail "status: exit status $?"
grep -q "^hvd-coordinatord .*, pid $dp on " "$tmp/out" || fail "status: header: $(cat "$tmp/out")"
grep -q "runtime dir: *$rt\$" "$tmp/out" || fail "status: runtime dir"
[[ "$(grep -F -- "$job" "$tmp/out" | head -1)" =~ ^"$job"\ +2\ +running\  ]] || fail "status: job row: $(cat "$tmp/out")"
grep -q "ranks: 0 pid $(cat "$tmp/pid.0") on .*, 1 pid $(cat "$tmp/pid.1")" "$tmp/out" ||
        fail "status: ranks: $(cat "$tmp/out")"
ok "jobs and status list the job"

# ---- permission denied (needs root to become another user) ----
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
        chmod 755 "$rt"
        setpriv --reuid=65534 --regid=65534 --clear-groups "$HVDCTL" -r "$rt" status >/dev/null 2>"$tmp/err"
        rc=$?
        { [ $rc -eq 4 ] && grep -q "permission denied on $rt/control.sock" "$tmp/err" && grep -q "group hvd" "$tmp/err"; } ||
                fail "permission denied: exit status $rc"
        ok "permission denied: exit 4, names group hvd"
else
        echo "ok - permission denied # SKIP needs root and setpriv"
fi

# ---- the job ends: the daemon forgets it ----
kill -TERM "${pids[@]}"
wait "$lp"
for _ in $(seq 100); do
        [ -z "$("$HVDCTL" -r "$rt" jobs)" ] && break
        sleep 0.05
done
[ -z "$("$HVDCTL" -r "$rt" jobs)" ] || fail "the ended job is still listed"
"$HVDCTL" -r "$rt" status | grep -q "jobs: *0$" || fail "status after the job"
kill -TERM "$dp"
wait "$dp"
[ ! -e "$rt/control.sock" ] || fail "the daemon left its socket"
"$HVDCTL" -r "$rt" status 2>/dev/null
[ $? -eq 1 ] || fail "stopped daemon: expected exit 1"
ok "after the job and the daemon are gone: no jobs, then exit 1"
exit 0
