#!/bin/bash
# test-hvdctl-multi.sh — hvdctl on a job that spans two "hosts" (two
# daemons on loopback, tests/lib/launch-multi.sh): the root daemon lists the
# other node as an inbound peer and the other daemon lists the root as an
# outbound one, both connected, with a measured heartbeat round trip; the
# root's `job ID --json` shows the remote ranks with their hosts and real
# pids; the root keeps the negotiation counters (bytes = what the job
# moved), the other daemon says it is not the root.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || skip "$PY is needed to parse the JSON"
hvdctl=$HVD_BUILDDIR/tools/hvdctl
worker=$HVD_BUILDDIR/tests/worker_collectives
tmp=$(mktemp -d /tmp/hvd-test-hvdctl-multi-XXXXXX)
lp=
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
        touch "$tmp/hold.go"
        [ -n "$lp" ] && { sleep 0.5; kill -TERM "$lp" 2>/dev/null; wait "$lp" 2>/dev/null; }
        for f in "$tmp"/pid.*; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
        rm -rf "$tmp"
}
trap cleanup EXIT

job=multiview-$$
# shellcheck disable=SC2016 # expanded by the shell of each rank
HVD_TEST_HOLD=$tmp/hold "$HVD_SRCDIR/tests/lib/launch-multi.sh" -H a:1,b:2 -j "$job" -t 60 -- \
        sh -c 'echo $$ > '"$tmp"'/pid.$HVD_RANK; echo "$HVD_RUNTIME_DIR" > '"$tmp"'/rt.$HVD_RANK; exec "$0" many' \
        "$worker" >"$tmp/job.out" 2>&1 &
lp=$!
for _ in $(seq 600); do
        [ -e "$tmp/hold.ready" ] && break
        kill -0 $lp 2>/dev/null || break
        sleep 0.05
done
[ -e "$tmp/hold.ready" ] || fail "the job did not reach its hold point" "$(cat "$tmp/job.out")"
rta=$(cat "$tmp/rt.0") rtb=$(cat "$tmp/rt.1")
pids=("$(cat "$tmp/pid.0")" "$(cat "$tmp/pid.1")" "$(cat "$tmp/pid.2")")

# the round trip is measured by the second heartbeat (one a second)
for _ in $(seq 100); do
        "$hvdctl" -r "$rta" status --json >"$tmp/a.json" || fail "status on the root: exit $?"
        "$hvdctl" -r "$rtb" status --json >"$tmp/b.json" || fail "status on host b: exit $?"
        "$PY" -c 'import json,sys; s=json.load(open(sys.argv[1])); sys.exit(not (s["peers"] and s["peers"][0]["rtt_usec"] > 0))' \
                "$tmp/a.json" && break
        sleep 0.1
done
"$hvdctl" -r "$rta" job "$job" --json >"$tmp/job.json" || fail "job on the root: exit $?"
"$PY" - "$tmp/a.json" "$tmp/b.json" "$tmp/job.json" "$job" "$(cat "$rta/peer.endpoint")" "${pids[@]}" <<'EOF' ||
import json, sys
a_path, b_path, job_path, job, root_ep, *pids = sys.argv[1:]
pids = [int(p) for p in pids]
a, b, jd = (json.load(open(p)) for p in (a_path, b_path, job_path))
def check(cond, what):
    if not cond:
        sys.exit(what)
check(len(a["peers"]) == 1, "root: peers %r" % a["peers"])
p = a["peers"][0]
check(p["direction"] == "in" and p["host"] == "b" and p["state"] == "connected" and p["jobs"] == 1,
      "root: the inbound peer %r" % p)
check(0 < p["rtt_usec"] < 5000000 and p["last_heard_usec"] < 5000000, "root: rtt / last heard %r" % p)
check(len(b["peers"]) == 1, "host b: peers %r" % b["peers"])
p = b["peers"][0]
check(p["direction"] == "out" and p["endpoint"] == root_ep and p["state"] == "connected" and p["jobs"] == 1,
      "host b: the outbound peer %r (root at %s)" % (p, root_ep))
check(0 < p["rtt_usec"] < 5000000, "host b: rtt %r" % p)
ja, jb = a["jobs"][0], b["jobs"][0]
check(ja["root"] and ja["cross_size"] == 2 and ja["ranks_here"] == 1, "root: job %r" % ja)
check(not jb["root"] and jb["cross_size"] == 2 and jb["ranks_here"] == 2, "host b: job %r" % jb)
check([r["pid"] for r in ja["ranks"]] == pids[:1] and [r["pid"] for r in jb["ranks"]] == pids[1:],
      "local ranks' pids")
tensor_bytes = 3 * sum(4 * (1 + (k * 37) % 100) for k in range(300)) + 4
check(ja["bytes_reduced"] == tensor_bytes and ja["tensors_negotiated"] == 901, "root: bytes / tensors")
check(jb["bytes_reduced"] == 0 and jb["tensors_negotiated"] == 0, "host b keeps no negotiation counters")
check(jb["data_usec"] > 0 and jb["cycles"] > 0, "host b: its ranks' data movement / cycles")
rs = jd["rank_status"]
check([r["rank"] for r in rs] == [0, 1, 2] and [r["pid"] for r in rs] == pids, "job: ranks / pids %r" % rs)
check(rs[0]["local"] and rs[0]["host"] == "a" and rs[0]["state"] == "running", "job: rank 0 %r" % rs[0])
for r in rs[1:]:
    check(not r["local"] and r["host"] == "b" and r["state"] == "remote" and r["cross_rank"] == 1,
          "job: remote rank %r" % r)
    check(r["seen"] and r["readies"] > 0 and r["tensors_pending"] == 0, "job: remote rank seen %r" % r)
EOF
        fail "status on two hosts" "$(cat "$tmp/a.json" "$tmp/b.json" "$tmp/job.json")"
echo "ok - root and node list each other as peers with a round trip; the root shows remote ranks"
"$hvdctl" -r "$rta" status | grep -qE "^  peer: +node b connected, heard .* ago, rtt [0-9.e-]+ ms, 1 job$" ||
        fail "status table on the root: peer line" "$("$hvdctl" -r "$rta" status)"
"$hvdctl" -r "$rtb" status | grep -q "^    time: negotiated by the job's root daemon, data movement " ||
        fail "status table on host b: time line" "$("$hvdctl" -r "$rtb" status)"
"$hvdctl" -r "$rta" job "$job" | grep -qE "^ +2 +remote +b +$(cat "$tmp/pid.2") +1 +remote " ||
        fail "job table on the root: remote rank 2" "$("$hvdctl" -r "$rta" job "$job")"
echo "ok - the tables say the same"
touch "$tmp/hold.go"
wait $lp || fail "the job failed" "$(cat "$tmp/job.out")"
lp=
exit 0
