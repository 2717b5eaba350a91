#!/bin/bash
# test-metrics.sh — the daemon's Prometheus metrics: `hvdctl metrics` and
# GET /metrics on the HTTP listener (metrics_listen = 127.0.0.1:0, a free
# port) both parse with a strict exposition-format parser
# (tests/lib/promparse.py, itself checked on broken input first), and the
# counters match a real 3-rank job of known size run to its end: jobs
# started and finished, workers, hello messages, tensors negotiated = the
# negotiation histogram's count, bytes scheduled = the bytes the job's
# allreduces carried. The listener (libmicrohttpd) gets bad input of every
# kind from tests/lib/http_bad.py: wrong methods and paths, garbage,
# oversized heads, slow and incomplete requests, idle, surplus and bursts
# of connections; it answers each as it must, counts the refused requests,
# and the daemon keeps serving throughout.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || skip "$PY is needed"
hvdctl=$HVD_BUILDDIR/tools/hvdctl
worker=$HVD_BUILDDIR/tests/worker_collectives
parse0="$PY $HVD_SRCDIR/tests/lib/promparse.py"
parse="$parse0 --prefix hvd_"
tmp=$(mktemp -d /tmp/hvd-test-metrics-XXXXXX)
bg=()
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
        for p in "${bg[@]}"; do kill -KILL "$p" 2>/dev/null; done
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT

# ---- the parser refuses what it must ----
good='# HELP x_total A counter.
# TYPE x_total counter
x_total 3
# TYPE h histogram
h_bucket{le="1"} 1
h_bucket{le="+Inf"} 2
h_sum 0.5
h_count 2
'
printf '%s' "$good" | $parse0 - >/dev/null || fail "promparse refuses a good text"
bad() {
        printf '%s' "$2" | $parse0 - >/dev/null 2>&1 && fail "promparse accepts $1"
}
bad "a sample without TYPE" 'y 1
'
bad "a malformed line" '# TYPE y gauge
y{a=b} 1
'
bad "non-cumulative buckets" '# TYPE h histogram
h_bucket{le="1"} 3
h_bucket{le="+Inf"} 2
h_sum 1
h_count 2
'
bad "+Inf != _count" '# TYPE h histogram
h_bucket{le="1"} 1
h_bucket{le="+Inf"} 2
h_sum 1
h_count 3
'
bad "no +Inf bucket" '# TYPE h histogram
h_bucket{le="1"} 1
h_sum 1
h_count 1
'
bad "a duplicate sample" '# TYPE y gauge
y 1
y 2
'
bad "a negative counter" '# TYPE y counter
y -1
'
bad "a missing final newline" '# TYPE y gauge
y 1'
printf '# TYPE y gauge\ny 1\n' | $parse - >/dev/null 2>&1 && fail "promparse --prefix accepts another prefix"
echo "ok - promparse refuses broken texts"

# ---- a daemon with the HTTP listener on a free port ----
rt=$tmp/rt
printf 'metrics_listen = 127.0.0.1:0\nlog_level = warning\n' >"$tmp/c.conf"
"$HVD_BUILDDIR/daemon/hvd-coordinatord" -c "$tmp/c.conf" --runtime-dir "$rt" 2>"$tmp/daemon.log" &
dp=$!
bg+=("$dp")
for _ in $(seq 100); do [ -S "$rt/control.sock" ] && break; sleep 0.05; done
[ -S "$rt/control.sock" ] || fail "the daemon did not start" "$(cat "$tmp/daemon.log")"
addr=$("$hvdctl" -r "$rt" status --json | $PY -c 'import json,sys; print(json.load(sys.stdin)["metrics_listen"])')
[[ "$addr" =~ ^127\.0\.0\.1:[1-9][0-9]*$ ]] || fail "status: metrics_listen '$addr'"
"$hvdctl" -r "$rt" status | grep -q "metrics: *http://$addr/metrics$" || fail "status does not show the listener"

# ---- a 3-rank job of known size, run to its end ----
HVD_FAST_PATH=0 "$HVD_SRCDIR/tests/lib/launch.sh" -r "$rt" -t 60 -n 3 -- "$worker" many >"$tmp/job.out" 2>&1 ||
        fail "the job failed" "$(cat "$tmp/job.out" "$tmp/daemon.log")"
for _ in $(seq 100); do
        [ -z "$("$hvdctl" -r "$rt" jobs)" ] && break
        sleep 0.05
done
[ -z "$("$hvdctl" -r "$rt" jobs)" ] || fail "the job is still listed"

"$hvdctl" -r "$rt" metrics >"$tmp/m.txt" 2>"$tmp/err" || fail "hvdctl metrics: exit $?" "$(cat "$tmp/err")"
$parse "$tmp/m.txt" >"$tmp/m.json" 2>"$tmp/err" || fail "hvdctl metrics does not parse" "$(cat "$tmp/err")"
"$PY" - "$tmp/m.json" <<'EOF' || fail "hvdctl metrics: values" "$(cat "$tmp/m.txt")"
import json, sys
m = json.load(open(sys.argv[1]))
def v(k):
    if k not in m:
        sys.exit("missing " + k)
    return m[k]
def check(cond, what):
    if not cond:
        sys.exit(what)
# "many": 3 rounds of 300 float32 allreduces of 1 + (37k mod 100) elements
tensor_bytes = 3 * sum(4 * (1 + (k * 37) % 100) for k in range(300))
check(v("hvd_jobs_started_total{}") == 1, "jobs started %r" % v("hvd_jobs_started_total{}"))
check(v("hvd_jobs_finished_total{}") == 1, "jobs finished")
check(v("hvd_jobs_aborted_total{}") == 0, "jobs aborted")
check(v("hvd_workers_connected_total{}") == 3, "workers connected")
check(v('hvd_messages_received_total{type="hello"}') == 3, "hello messages")
check(v('hvd_messages_received_total{type="goodbye"}') == 3, "goodbye messages")
check(v('hvd_messages_received_total{type="ready"}') == v("hvd_cycles_total{}") > 0, "ready = cycles")
check(v('hvd_messages_received_total{type="metrics_request"}') == 1, "metrics requests")
check(v("hvd_tensors_negotiated_total{}") == 900, "tensors %r" % v("hvd_tensors_negotiated_total{}"))
# the job runs with the fast path off (HVD_FAST_PATH=0): every tensor is scheduled
check(v("hvd_fast_path_tensors_total{}") == 0, "fast path tensors %r" % v("hvd_fast_path_tensors_total{}"))
check(v("hvd_negotiation_latency_seconds_count{}") ==
      v("hvd_tensors_negotiated_total{}") - v("hvd_fast_path_tensors_total{}"),
      "one latency sample per scheduled tensor")
check(v("hvd_bytes_scheduled_total{}") == tensor_bytes,
      "bytes scheduled %r, the job's allreduces carried %d" % (v("hvd_bytes_scheduled_total{}"), tensor_bytes))
check(v("hvd_cache_hits_total{}") >= 2 * 300 * 3, "cache hits %r" % v("hvd_cache_hits_total{}"))
check(0 < v("hvd_fused_operations_total{}") <= v("hvd_tensors_negotiated_total{}"), "fused ops")
check(v('hvd_jobs{state="running"}') == 0 and v("hvd_workers{}") == 0, "gauges after the job")
check(v("hvd_log_level{}") == 4, "log level gauge")
check(v("hvd_cycle_duration_seconds_count{}") > 0, "cycle histogram")
check(v("hvd_control_request_duration_seconds_count{}") >= 1, "control histogram")
EOF
echo "ok - hvdctl metrics parses; counters match the 3-rank job ($(grep -c '^hvd_' "$tmp/m.txt") samples)"

# ---- HTTP ----
"$PY" - "$addr" "$HVD_SRCDIR/tests/lib" <<'EOF' || fail "GET /metrics" "$(cat "$tmp/daemon.log")"
import sys, urllib.request
addr, lib = sys.argv[1], sys.argv[2]
sys.path.insert(0, lib)
import promparse
with urllib.request.urlopen("http://%s/metrics" % addr, timeout=10) as r:
    assert r.status == 200, r.status
    assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8", r.headers["Content-Type"]
    m = promparse.parse(r.read().decode(), "hvd_")
assert m["hvd_jobs_started_total{}"] == 1 and m["hvd_workers_connected_total{}"] == 3, m
print("ok - GET /metrics parses; its counters are the job's")
EOF
"$hvdctl" -r "$rt" metrics >"$tmp/m1.txt" || fail "hvdctl metrics before the HTTP abuse"
$parse "$tmp/m1.txt" >"$tmp/m1.json" || fail "metrics before the abuse do not parse"
# bad input of every kind (tests/lib/http_bad.py): the listener answers
# what it must, and scrapes work after each
"$PY" "$HVD_SRCDIR/tests/lib/http_bad.py" "$addr" || fail "HTTP listener" "$(tail -n 30 "$tmp/daemon.log")"
"$hvdctl" -r "$rt" metrics >"$tmp/m2.txt" || fail "hvdctl metrics after the HTTP abuse"
$parse "$tmp/m2.txt" >"$tmp/m2.json" || fail "metrics after the abuse do not parse"
"$PY" - "$tmp/m1.json" "$tmp/m2.json" <<'EOF' || fail "rejected HTTP requests are not counted"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
k = 'hvd_messages_rejected_total{socket="http"}'
# at least: two heads too large (431), two malformed header lines (400)
assert b[k] - a[k] >= 4, (a[k], b[k])
assert b["hvd_control_requests_total{}"] - a["hvd_control_requests_total{}"] >= 20
EOF
kill -0 "$dp" 2>/dev/null || fail "the daemon died" "$(cat "$tmp/daemon.log")"
echo "ok - the daemon counted the bad requests and still serves"
kill -TERM "$dp"
wait "$dp"
rc=$?
[ $rc -eq 0 ] || fail "the daemon exited with $rc" "$(cat "$tmp/daemon.log")"
exit 0
