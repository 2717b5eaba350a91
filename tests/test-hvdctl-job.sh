#!/bin/bash
# test-hvdctl-job.sh — hvdctl against a live 3-rank job held at a known
# point (tests/worker_collectives "many", then HVD_TEST_HOLD): `status
# --json` checked field by field (daemon, configuration in force, the job's
# size, ranks, pids equal to the real worker pids, counters equal to what
# the job negotiated and moved), `job ID` (text and JSON, a row per rank),
# an unknown job (exit 5), `--endpoint` against a second daemon (as a
# runtime directory and as an ipc:// endpoint), `--watch` (two refreshes,
# then SIGINT ends it with 0), and `log-level`: the change shows in status
# and in what the daemon logs, and a user who is neither root nor the
# daemon's gets exit 4.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || skip "$PY is needed to parse the JSON"
hvdctl=$HVD_BUILDDIR/tools/hvdctl
worker=$HVD_BUILDDIR/tests/worker_collectives
tmp=$(mktemp -d /tmp/hvd-test-hvdctl-job-XXXXXX)
chmod 755 "$tmp"
bg=()
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
        touch "$tmp/hold.go" 2>/dev/null
        for p in "${bg[@]}"; do kill -KILL "$p" 2>/dev/null; done
        for f in "$tmp"/pid.*; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT

start_daemon() { # DIR LOG [ARGS...]
        local dir=$1 log=$2
        shift 2
        "$HVD_BUILDDIR/daemon/hvd-coordinatord" --runtime-dir "$dir" "$@" 2>"$log" &
        bg+=($!)
        for _ in $(seq 100); do [ -S "$dir/control.sock" ] && break; sleep 0.05; done
        [ -S "$dir/control.sock" ] || fail "a daemon did not start" "$(cat "$log")"
}

# Daemon A serves the job; its sockets are open to everyone so that another
# user can reach it (and be refused the log-level change).
printf 'log_level = warning\nsocket_mode = 0666\nmax_jobs = 7\n' >"$tmp/a.conf"
start_daemon "$tmp/a" "$tmp/a.log" -c "$tmp/a.conf"
dpa=${bg[-1]}
chmod 755 "$tmp/a"
start_daemon "$tmp/b" "$tmp/b.log" --log-level notice
dpb=${bg[-1]}

job=jobview-$$
# shellcheck disable=SC2016 # expanded by the shell of each rank
HVD_HOSTNAME=hostq HVD_TEST_HOLD=$tmp/hold "$HVD_SRCDIR/tests/lib/launch.sh" -r "$tmp/a" -j "$job" -t 60 -n 3 -- \
        sh -c 'echo $$ > '"$tmp"'/pid.$HVD_RANK; exec "$0" many' "$worker" >"$tmp/job.out" 2>&1 &
lp=$!
bg+=("$lp")
for _ in $(seq 600); do
        [ -e "$tmp/hold.ready" ] && break
        kill -0 $lp 2>/dev/null || break
        sleep 0.05
done
[ -e "$tmp/hold.ready" ] || fail "the job did not reach its hold point" "$(cat "$tmp/job.out" "$tmp/a.log")"
pids=("$(cat "$tmp/pid.0")" "$(cat "$tmp/pid.1")" "$(cat "$tmp/pid.2")")

# ---- status --json, field by field ----
"$hvdctl" -r "$tmp/a" status --json >"$tmp/status.json" 2>"$tmp/err" || fail "status --json: exit $?" "$(cat "$tmp/err")"
"$hvdctl" -r "$tmp/a" job "$job" --json >"$tmp/job.json" 2>"$tmp/err" || fail "job --json: exit $?" "$(cat "$tmp/err")"
"$PY" - "$tmp/status.json" "$tmp/job.json" "$job" "$tmp/a" "$dpa" "$(hostname)" "${pids[@]}" <<'EOF' ||
import json, sys
st_path, job_path, job, rt, dpid, host, *pids = sys.argv[1:]
pids = [int(p) for p in pids]
s = json.load(open(st_path))
def check(cond, what):
    if not cond:
        sys.exit("status --json: " + what)
check(s["pid"] == int(dpid) and s["runtime_dir"] == rt, "daemon pid / runtime dir")
check(s["uptime_usec"] > 0 and s["version"] and s["host"], "version / uptime / host")
check(s["log_level"] == "warning" and s["metrics_listen"] == "", "log level / metrics")
c = s["config"]
for k, v in (("runtime_dir", rt), ("log_level", "warning"), ("socket_mode", "0666"), ("max_jobs", "7"),
             ("fusion_threshold", "64M"), ("cycle_time", "1ms"), ("start_timeout", "30s"),
             ("peer_listen", ""), ("peer_timeout", "10s"), ("metrics_listen", "")):
    check(c.get(k) == v, "config %s = %r, expected %r" % (k, c.get(k), v))
check(s["fusion_threshold"] == 64 << 20 and s["cycle_time_usec"] == 1000, "job defaults")
check(s["peers"] == [], "peers %r" % s["peers"])
check(len(s["jobs"]) == 1, "jobs")
j = s["jobs"][0]
check(j["job_id"] == job and j["size"] == 3 and j["state"] == "running", "job id / size / state")
check([r["rank"] for r in j["ranks"]] == [0, 1, 2], "ranks")
check([r["pid"] for r in j["ranks"]] == pids, "pids %r != the workers' %r" % ([r["pid"] for r in j["ranks"]], pids))
check([r["local_rank"] for r in j["ranks"]] == [0, 1, 2], "local ranks")
check(all(r["host"] == "hostq" for r in j["ranks"]), "hosts")
check(j["root"] is True and j["cross_size"] == 1 and j["ranks_here"] == 3, "root / hosts / ranks here")
# "many": 3 rounds of 300 float32 allreduces of 1 + (37k mod 100) elements, then a barrier
# (a barrier is negotiated as one scalar: 4 bytes)
tensor_bytes = 3 * sum(4 * (1 + (k * 37) % 100) for k in range(300)) + 4
check(j["bytes_reduced"] == tensor_bytes, "bytes %d, the job moved %d" % (j["bytes_reduced"], tensor_bytes))
check(j["tensors_negotiated"] == 901, "tensors negotiated %d, expected 900 + the barrier" % j["tensors_negotiated"])
check(0 < j["fused_ops"] <= j["tensors_negotiated"], "fused ops")
check(j["mean_fused_bytes"] == j["bytes_reduced"] // j["fused_ops"], "mean fused size")
check(j["cache_hits"] >= 2 * 300 * 3, "cache hits %d" % j["cache_hits"])
check(0 < j["cache_hit_rate"] < 1, "cache hit rate %r" % j["cache_hit_rate"])
check(j["cycles"] > 0 and j["schedules"] > 0, "cycles / schedules")
check(j["negotiation_usec"] > 0 and j["data_usec"] > 0, "negotiation %d / data %d usec" % (j["negotiation_usec"], j["data_usec"]))
check(j["data_usec"] < j["age_usec"], "data movement longer than the job's life")
check(j["throughput_bytes_per_sec"] > 0, "throughput")
check(j["stalled"] == "" and j["abort_reason"] == "" and j["joined_ranks"] == 0, "stalled / abort / joined")
check("rank_status" not in j, "status lists rank detail")

d = json.load(open(job_path))
for k in ("job_id", "size", "state", "ranks", "bytes_reduced", "tensors_negotiated", "fused_ops", "cache_hits",
          "schedules"):
    check(d[k] == j[k], "job --json %s %r != status %r" % (k, d[k], j[k]))
rs = d["rank_status"]
check([r["rank"] for r in rs] == [0, 1, 2], "rank_status ranks")
check([r["pid"] for r in rs] == pids, "rank_status pids")
for r in rs:
    check(r["local"] and r["host"] == "hostq" and r["state"] == "running", "rank %d: where/state" % r["rank"])
    check(r["seen"] and r["readies"] > 0 and r["tensors_pending"] == 0, "rank %d: seen/readies/pending" % r["rank"])
    check(d["schedules"] - 1 <= r["done_seq"] <= d["schedules"], "rank %d: done_seq %d of %d schedules" %
          (r["rank"], r["done_seq"], d["schedules"]))
    check(r["busy_usec"] > 0, "rank %d: busy" % r["rank"])
check(sum(r["readies"] for r in rs) == d["cycles"], "readies add up to cycles")
check(d["data_usec"] == sum(r["busy_usec"] for r in rs) // 3, "data_usec is the ranks' mean")
EOF
        fail "status --json / job --json" "$(cat "$tmp/status.json" "$tmp/job.json")"
echo "ok - status --json and job --json: daemon, configuration, 3 ranks with pids ${pids[*]}, counters"

# ---- job ID as text; an unknown job ----
"$hvdctl" -r "$tmp/a" job "$job" >"$tmp/out" 2>"$tmp/err" || fail "job: exit $?" "$(cat "$tmp/err")"
grep -q "^job $job: running, 3 ranks on 1 host (3 here), age .*, negotiated here$" "$tmp/out" ||
        fail "job: header" "$(cat "$tmp/out")"
for r in 0 1 2; do
        grep -qE "^ +$r +local +hostq +$(cat "$tmp/pid.$r") +$r +running +[0-9.]+[smhd]* ago +0 +[1-9]" "$tmp/out" ||
                fail "job: row of rank $r" "$(cat "$tmp/out")"
done
"$hvdctl" -r "$tmp/a" job nosuchjob >"$tmp/out" 2>"$tmp/err"
rc=$?
{ [ $rc -eq 5 ] && grep -q "has no job 'nosuchjob'" "$tmp/err" && [ ! -s "$tmp/out" ]; } || fail "unknown job: exit $rc" "$(cat "$tmp/err")"
"$hvdctl" -r "$tmp/a" job >/dev/null 2>&1
[ $? -eq 2 ] || fail "job without an id: expected exit 2"
"$hvdctl" -r "$tmp/a" status | grep -q "^    time: negotiation [0-9.e-]* ms per tensor" || fail "status: time line"
echo "ok - job ID lists every rank; an unknown job exits 5"

# ---- --endpoint: another daemon ----
"$hvdctl" --endpoint "$tmp/b" status --json >"$tmp/b.json" || fail "--endpoint DIR: exit $?"
"$PY" -c 'import json,sys; s=json.load(open(sys.argv[1])); assert s["pid"] == int(sys.argv[2]) and s["jobs"] == [] and s["log_level"] == "notice", s' \
        "$tmp/b.json" "$dpb" || fail "--endpoint DIR reached the wrong daemon"
[ -z "$("$hvdctl" --endpoint "ipc://$tmp/b/control.sock" jobs)" ] || fail "--endpoint ipc://: daemon B has no job"
"$hvdctl" --endpoint "ipc://$tmp/a/control.sock" jobs | grep -q "^$job 3 running " || fail "--endpoint ipc:// to A"
"$hvdctl" --endpoint "$tmp/b" job "$job" 2>/dev/null
[ $? -eq 5 ] || fail "daemon B knows job $job"
"$hvdctl" --endpoint "$tmp/nothing" status 2>"$tmp/err"
{ [ $? -eq 1 ] && grep -q "no hvd-coordinatord is running at $tmp/nothing" "$tmp/err"; } || fail "--endpoint to nothing"
"$hvdctl" --endpoint "udp://x" status 2>/dev/null
[ $? -eq 2 ] || fail "--endpoint udp:// is not a usage error"
echo "ok - --endpoint reaches the daemon it names"

# ---- --watch: two refreshes, then SIGINT ends it with 0 ----
"$hvdctl" -r "$tmp/a" --watch 0.2 status >"$tmp/watch.out" 2>"$tmp/err" &
wp=$!
for _ in $(seq 200); do
        [ "$(grep -c '^Every 0.2s: hvdctl at ' "$tmp/watch.out")" -ge 2 ] && break
        sleep 0.05
done
kill -INT $wp
wait $wp
rc=$?
[ $rc -eq 0 ] || fail "--watch: exit $rc after SIGINT" "$(cat "$tmp/err")"
n=$(grep -c "^$job " "$tmp/watch.out")
[ "$n" -ge 2 ] || fail "--watch: $n refreshes listed the job" "$(cat "$tmp/watch.out")"
grep -q $'\033' "$tmp/watch.out" && fail "--watch cleared a screen that is not a terminal"
# the JSON documents in FILE, one after the other: at least MIN, each of JOB
json_docs() {
        "$PY" -c '
import json, sys
text, docs, dec, i = open(sys.argv[1]).read(), [], json.JSONDecoder(), 0
try:
    while text[i:].strip():
        while text[i].isspace(): i += 1
        d, i = dec.raw_decode(text, i); docs.append(d)
except ValueError:
    pass  # a document still being written
assert len(docs) >= int(sys.argv[3]) and all(d["job_id"] == sys.argv[2] for d in docs), len(docs)
' "$@"
}
"$hvdctl" -r "$tmp/a" job "$job" --json -w 0.2 >"$tmp/watch.json" 2>&1 &
wp=$!
for _ in $(seq 100); do
        json_docs "$tmp/watch.json" "$job" 2 2>/dev/null && break
        sleep 0.1
done
kill -INT $wp
wait $wp || fail "--watch job --json: exit $?"
# whole documents only, every one of the job
"$PY" -c 'import json, sys; t = open(sys.argv[1]).read(); json.loads("[" + t.replace("}\n{", "},{") + "]")' \
        "$tmp/watch.json" || fail "--watch --json: a document cut or broken" "$(head -c 600 "$tmp/watch.json")"
json_docs "$tmp/watch.json" "$job" 2 || fail "--watch --json: not a series of job documents" "$(head -c 600 "$tmp/watch.json")"
"$hvdctl" -r "$tmp/a" --watch 0.2 version >/dev/null 2>&1
[ $? -eq 2 ] || fail "--watch version is not a usage error"
echo "ok - --watch refreshes ($n times) and SIGINT ends it with 0"

# ---- log level at run time ----
[ "$("$hvdctl" -r "$tmp/a" log-level)" = warning ] || fail "log-level: not warning"
grep -q "rank 0 joined" "$tmp/a.log" && fail "info messages logged at level warning"
"$hvdctl" -r "$tmp/a" log-level loud >/dev/null 2>&1
[ $? -eq 2 ] || fail "log-level loud: expected a usage error"
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
        setpriv --reuid=65534 --regid=65534 --clear-groups "$hvdctl" -r "$tmp/a" log-level debug >/dev/null 2>"$tmp/err"
        rc=$?
        { [ $rc -eq 4 ] && grep -q "only root and the daemon's user" "$tmp/err"; } || fail "another user: exit $rc" "$(cat "$tmp/err")"
        [ "$(setpriv --reuid=65534 --regid=65534 --clear-groups "$hvdctl" -r "$tmp/a" log-level)" = warning ] ||
                fail "another user cannot read the level"
        grep -q "log level change to 'debug' refused" "$tmp/a.log" || fail "the refusal is not logged"
        echo "ok - another user may read the log level but not change it (exit 4)"
else
        echo "ok - another user's log-level change # SKIP needs root and setpriv"
fi
[ "$("$hvdctl" -r "$tmp/a" log-level info)" = info ] || fail "log-level info"
"$hvdctl" -r "$tmp/a" status --json | "$PY" -c 'import json,sys; s=json.load(sys.stdin); assert s["log_level"] == "info" and s["config"]["log_level"] == "info", s["log_level"]' ||
        fail "status does not show the new level"
"$hvdctl" -r "$tmp/a" status | grep -q "log level: *info$" || fail "status table: log level"
grep -q "log level changed from warning to info by uid $(id -u)" "$tmp/a.log" || fail "the change is not logged" "$(cat "$tmp/a.log")"

# the job ends: at info level the daemon now says so
touch "$tmp/hold.go"
wait $lp || fail "the job failed" "$(cat "$tmp/job.out")"
for _ in $(seq 100); do grep -q "job $job removed" "$tmp/a.log" && break; sleep 0.05; done
grep -q "job $job removed" "$tmp/a.log" || fail "info messages are not logged after log-level info" "$(cat "$tmp/a.log")"
[ "$("$hvdctl" -r "$tmp/a" log-level err)" = err ] || fail "log-level err"
echo "ok - log-level info shows in status and in the daemon's log"
kill -TERM "$dpa" "$dpb"
wait "$dpa" "$dpb"
exit 0
