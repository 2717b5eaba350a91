#!/bin/bash
# netns-job.sh — one hvd job on 2 emulated nodes: two network namespaces
# joined by a veth pair with a tc tbf limit of RATE each way (burst BURST,
# default 1mb, latency 100ms, as run-step.sh), one hvd-coordinatord in each,
# PER_NODE ranks in each (default 1) running CMD. Prints rank 0's output (and
# the first lines of the last rank's if it says anything else). Needs root.
#
#   benchmarks/netns-job.sh BUILDDIR RATE CMD ARGS...
# e.g. benchmarks/netns-job.sh build 10gbit build/benchmarks/bench_collective --min-bytes 8 --max-bytes 33554432
# The environment reaches the ranks (HVD_RING_CHECKSUM=1 etc.).
# DELAY_US=N: N us of one-way latency on every TCP connection across the
# link (tests/delay_proxy behind an nftables redirect in each namespace,
# as run-step.sh NETNS=1 DELAY_US=N).
set -u
[ $# -ge 3 ] || { echo "usage: $0 BUILDDIR RATE CMD ARGS..." >&2; exit 2; }
build=$(cd "$1" && pwd) rate=$2
shift 2
tag=$$ na=hvdj$$a nb=hvdj$$b va=hja$$ vb=hjb$$ net=10.217.$(($$ % 250)).
work=$(mktemp -d /tmp/hvd-netns-job-XXXXXX)
pids=()
. "$(dirname "$0")/../tests/lib/netpair.sh"
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() { netpair_teardown "$na" "$nb" "$work" "${pids[@]}"; }
trap cleanup EXIT
netpair "$na" "$nb" "$va" "$vb" "${net}1" "${net}2" >&2 || { echo "netns-job: root is needed" >&2; exit 1; }
tc -n "$na" qdisc add dev "$va" root tbf rate "$rate" burst "${BURST:-1mb}" latency 100ms || exit 1
tc -n "$nb" qdisc add dev "$vb" root tbf rate "$rate" burst "${BURST:-1mb}" latency 100ms || exit 1
if [ -n "${DELAY_US:-}" ]; then
        for h in a b; do
                ns=$na dev=$va
                [ $h = b ] && ns=$nb dev=$vb
                netpair_delay "$build/tests/delay_proxy" "$ns" "$dev" "$DELAY_US" "$work/proxy-$h.log" >"$work/np.msg" ||
                        { echo "netns-job: $(cat "$work/np.msg")" >&2; exit 1; }
                pids+=("$NP_PID")
        done
fi
netpair_daemons "$build/daemon/hvd-coordinatord" "$work" "$na" "$nb" "${net}1"
for p in $NP_PIDS; do pids+=("$p"); done
for _ in $(seq 200); do
        [ -S "$work/a/worker.sock" ] && [ -S "$work/b/worker.sock" ] && break
        sleep 0.05
done
wp=()
P=${PER_NODE:-1}
for ((r = 0; r < 2 * P; r++)); do
        c=$((r / P)) ns=$na ip=${net}1 h=a
        [ $c = 1 ] && ns=$nb ip=${net}2 h=b
        ip netns exec "$ns" env HVD_JOB_ID="job$tag" HVD_JOB_SECRET=0123456789abcdef HVD_RANK=$r \
                HVD_SIZE=$((2 * P)) HVD_LOCAL_RANK=$((r % P)) HVD_LOCAL_SIZE="$P" HVD_CROSS_RANK=$c HVD_CROSS_SIZE=2 \
                HVD_HOSTS="a:$P,b:$P" HVD_HOSTNAME=$h HVD_ROOT_PEER="tcp://${net}1:7100" HVD_RUNTIME_DIR="$work/$h" \
                HVD_DATA_ADDR="$ip" timeout -k 5 900 "$@" >"$work/r$r.out" 2>&1 &
        wp+=($!)
done
st=0
for p in "${wp[@]}"; do wait "$p" || st=1; done
cat "$work/r0.out"
grep -v '^bench' "$work/r$((2 * P - 1)).out" | head -n 3 >&2
[ $st -eq 0 ] || { echo "netns-job: a rank failed" >&2; tail -n 3 "$work"/?.log >&2; }
exit $st
