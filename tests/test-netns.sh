#!/bin/bash
# test-netns.sh — real test hosts: two network namespaces joined by a veth
# pair, one hvd-coordinatord in each, a bandwidth limit (tc tbf) on the link
# and 20 ms of added latency on the daemons' connection (tests/lib/
# tests/delay_proxy; this kernel has no netem). A 4-rank job (2 per host) must
# give exact results for every collective across the real network stack;
# then, with TCP inside each namespace dropped, every collective again
# (they go by host: a host's ranks share through shared memory only).
# Reported as skipped, with the reason, where namespaces cannot be made.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
. "$HVD_SRCDIR/tests/lib/netpair.sh"
[ "$(id -u)" -eq 0 ] || skip "creating network namespaces needs root"
command -v ip >/dev/null || skip "ip (iproute2) is not installed"
command -v tc >/dev/null || skip "tc (iproute2) is not installed"

tag=$$
na=hvdt${tag}a nb=hvdt${tag}b va=hva${tag} vb=hvb${tag}
net=10.213.$((tag % 250)).
base=$(mktemp -d /tmp/hvd-netns-XXXXXX)
pids=()
cleanup() { netpair_teardown "$na" "$nb" "$base" "${pids[@]}"; }
trap cleanup EXIT

netpair_test "$na" "$nb" "$va" "$vb" "${net}1" "${net}2"
# 400 Mbit/s each way
tc -n "$na" qdisc add dev "$va" root tbf rate 400mbit burst 256kb latency 100ms || skip "tc tbf is unavailable"
tc -n "$nb" qdisc add dev "$vb" root tbf rate 400mbit burst 256kb latency 100ms || skip "tc tbf is unavailable"

netpair_daemons "$HVD_BUILDDIR/daemon/hvd-coordinatord" "$base" "$na" "$nb" "${net}1"
for p in $NP_PIDS; do pids+=("$p"); done
ip netns exec "$nb" "$HVD_BUILDDIR/tests/delay_proxy" --max-seconds 120 "${net}2:7200" "${net}1:7100" 20000 >"$base/proxy.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
        [ -S "$base/a/worker.sock" ] && [ -S "$base/b/worker.sock" ] && grep -q listening "$base/proxy.log" && break
        sleep 0.05
done

secret=0123456789abcdef
# run_job JOB LOG_PREFIX CMD ARGS...: ranks 0,1 in namespace a, 2,3 in b;
# 0 when every rank succeeded
run_job() {
        local job=$1 log=$2 rank=0 h ns ip cross l p st=0 wpids=()
        shift 2
        for h in a b; do
                ns=$na ip=${net}1 cross=0
                [ $h = b ] && ns=$nb ip=${net}2 cross=1
                for l in 0 1; do
                        ip netns exec "$ns" env HVD_JOB_ID="$job" HVD_JOB_SECRET=$secret HVD_RANK=$rank HVD_SIZE=4 \
                                HVD_LOCAL_RANK=$l HVD_LOCAL_SIZE=2 HVD_CROSS_RANK=$cross HVD_CROSS_SIZE=2 \
                                HVD_HOSTS=a:2,b:2 HVD_HOSTNAME=$h HVD_ROOT_PEER="tcp://${net}2:7200" \
                                HVD_RUNTIME_DIR="$base/$h" HVD_DATA_ADDR=$ip \
                                timeout -k 5 90 "$@" >"$base/$log$rank.log" 2>&1 &
                        wpids+=($!)
                        rank=$((rank + 1))
                done
        done
        for p in "${wpids[@]}"; do wait "$p" || st=1; done
        return $st
}

run_job "netns-$tag" rank "$HVD_BUILDDIR/tests/worker_smoke" 3000000 ||
        fail "the job across namespaces failed" "$(tail -n 5 "$base"/rank*.log "$base"/a.log "$base"/b.log)"
grep -q "coll ok size 4" "$base/rank0.log" || fail "no success line" "$(cat "$base/rank0.log")"
echo "ok: 4 ranks on 2 namespaced hosts (tbf 400 Mbit/s, 20 ms control-plane latency): every collective exact"

# Broadcast, allgather and alltoall go by host: between the ranks of one
# host nothing goes over TCP (nor for allreduce and reducescatter, whose
# rings join the ranks of one local rank on each host). With every TCP
# connection opened inside a namespace to itself dropped (it would go over
# its loopback), every collective must still be exact; a path over all
# ranks would connect rank 0 to rank 1 and time out.
for ns in "$na" "$nb"; do
        ip netns exec "$ns" nft -f - <<NFT || fail "nftables rule in $ns failed"
table inet hvdnolo {
        chain in {
                type filter hook input priority 0;
                iif lo tcp flags syn drop
        }
}
NFT
done
run_job "netns-lo-$tag" lo "$HVD_BUILDDIR/tests/worker_collectives" broadcast allgather alltoall allreduce \
        reducescatter || fail "collectives with no TCP inside a host failed" "$(tail -n 5 "$base"/lo*.log)"
for sc in broadcast allgather alltoall allreduce reducescatter; do
        [ "$(cat "$base"/lo*.log | grep -c "$sc: ok")" -eq 4 ] || fail "not every rank passed $sc" "$(cat "$base"/lo*.log)"
done
echo "ok: every collective exact on 2 hosts of 2 ranks with no TCP between a host's own ranks"
