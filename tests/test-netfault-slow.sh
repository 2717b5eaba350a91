#!/bin/bash
# test-netfault-slow.sh — a slow network between two test hosts. The
# control plane stalls (tests/delay_proxy stops forwarding): a
# stall shorter than the peer timeout is ridden out with exact results; a
# longer one aborts the spanning job on every rank within the peer timeout +
# 1 s (plus slack for a loaded machine), naming job, host, ranks and cause.
# A bandwidth limit (tc tbf, 2 Mbit/s) under a collective far larger than
# fits in the collective timeout: a clean timeout error on every rank, not a
# hang. Local jobs complete during each fault; a spanning job after healing.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
. "$HVD_SRCDIR/tests/lib/netfault.sh"
command -v tc >/dev/null || skip "tc (iproute2) is not installed (scripts/setup.sh installs it)"
nf_setup

# a short stall (0.5 s, a quarter of the peer timeout): nothing is lost
dir=$NF_BASE/short-stall
nf_spawn "$dir" "nf-$nf_tag-short" 40 65536 60
for _ in $(seq 300); do [ -e "$dir/running.0" ] && [ -e "$dir/running.1" ] && break; sleep 0.05; done
kill -USR1 "$NF_PROXY"
sleep 0.5
kill -USR2 "$NF_PROXY"
st=0
for p in "${NF_RPIDS[@]}"; do wait "$p" || st=1; done
{ [ $st -eq 0 ] && grep -q "netfault: ok 40 iterations" "$dir/rank0" && grep -q "netfault: ok 40 iterations" "$dir/rank1"; } ||
        fail "a 0.5 s control-plane stall broke the job" "$(cat "$dir"/rank*; tail -n 5 "$NF_BASE"/a.log "$NF_BASE"/b.log)"
echo "ok: short-stall: a 0.5 s control-plane stall was ridden out, results exact"

NF_LIMIT_MS=$((NF_PEER_TIMEOUT_MS + 1000 + NF_SLACK_MS))
stall() { kill -USR1 "$NF_PROXY"; }
resume() { kill -USR2 "$NF_PROXY"; }
lost_b='lost contact with host b \(ranks \[1\]\): its daemon was silent'
lost_a='lost contact with the root daemon at [^ ]* \(host a, ranks \[0\]\): silent'
nf_case stall stall resume "a b" "$lost_b" "$lost_a"

# 16 MiB allreduces: fast on the bare link, 64 s each at 2 Mbit/s
NF_LIMIT_MS=$((NF_COLL_TIMEOUT_MS + 1000 + NF_SLACK_MS))
shape() {
        tc -n "$NF_NB" qdisc add dev "$nf_vb" root tbf rate 2mbit burst 16kb latency 500ms &&
                tc -n "$NF_NA" qdisc add dev "$nf_va" root tbf rate 2mbit burst 16kb latency 500ms
}
unshape() { tc -n "$NF_NB" qdisc del dev "$nf_vb" root && tc -n "$NF_NA" qdisc del dev "$nf_va" root; }
slow_b='(rank 1 \([0-9.:]+\): timed out|host b: rank 1: .*timed out after|lost contact with host b \(ranks \[1\]\))'
slow_a='(rank 0 \([0-9.:]+\): timed out|rank 0 \(host a\): .*timed out after|lost contact with the root daemon at [^ ]* \(host a, ranks \[0\]\))'
nf_case bandwidth shape unshape "a b" "$slow_b" "$slow_a" 4194304
