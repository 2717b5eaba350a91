#!/bin/bash
# run-knobs.sh — the data-plane knobs across nodes, measured on a training
# step: benchmarks/bench_step (every gradient of a model allreduced in
# backward order) on two emulated nodes (network namespaces joined by a
# veth pair with a tc tbf limit of RATE each way, one daemon each, PER_NODE
# ranks on each), once per VARIANT in every round, alternating, medians of
# ROUNDS (each round starting at the next variant, so that none always
# runs first); every variant's step time as a ratio to the first's.
#
#   benchmarks/run-knobs.sh [BUILDDIR]          (after `make bench`; root)
# Environment:
#   VARIANTS="base=  frame64k=HVD_TCP_FRAME_BYTES=65536  ..." : NAME=ENV,ENV...
#     (ENV: VAR=VALUE given to every rank; the first variant is the peer)
#   MODELS="resnet101 inception_v3"  RATE=1gbit  BURST=128kb  DELAY_US=  PER_NODE=2
#   ROUNDS=5  STEPS=10  WARMUP=3  FUSION=67108864  CYCLE=1 (ms)
#   DATA=<dir of the model tsv files>
# Prints one line per job (bench=step ... variant=NAME) and a table:
#   model variant ms_median(of the rounds' medians) ratio_to_first
set -u
build=${1:-$(pwd)}
build=$(cd "$build" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
VARIANTS=${VARIANTS:-"base= thread=HVD_TCP_SEND_THREAD=1 frame64k=HVD_TCP_FRAME_BYTES=65536 frame1m=HVD_TCP_FRAME_BYTES=1048576"}
MODELS=${MODELS:-"resnet101 inception_v3"} RATE=${RATE:-1gbit} BURST=${BURST:-128kb} DELAY_US=${DELAY_US:-}
PER_NODE=${PER_NODE:-2} ROUNDS=${ROUNDS:-5} STEPS=${STEPS:-10} WARMUP=${WARMUP:-3}
FUSION=${FUSION:-67108864} CYCLE=${CYCLE:-1}
if [ -z "${DATA:-}" ]; then
        for d in "$src/../shared/data" /work/shared/data; do [ -f "$d/resnet50.tsv" ] && DATA=$d && break; done
fi
[ -f "${DATA:-}/resnet101.tsv" ] || { echo "run-knobs: set DATA to the directory of resnet101.tsv etc." >&2; exit 2; }
[ -x "$build/benchmarks/bench_step" ] || { echo "run-knobs: no $build/benchmarks/bench_step (make bench)" >&2; exit 2; }
tag=$$ na=hvdk$$a nb=hvdk$$b va=hka$$ vb=hkb$$ net=10.218.$(($$ % 250)).
work=$(mktemp -d /tmp/hvd-knobs-XXXXXX)
out=$work/raw
pids=()
# shellcheck source=tests/lib/netpair.sh
. "$src/tests/lib/netpair.sh"
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() { netpair_teardown "$na" "$nb" "$work" "${pids[@]}"; }
trap cleanup EXIT
netpair "$na" "$nb" "$va" "$vb" "${net}1" "${net}2" >&2 || { echo "run-knobs: root is needed" >&2; exit 1; }
tc -n "$na" qdisc add dev "$va" root tbf rate "$RATE" burst "$BURST" latency 100ms || exit 1
tc -n "$nb" qdisc add dev "$vb" root tbf rate "$RATE" burst "$BURST" latency 100ms || exit 1
if [ -n "$DELAY_US" ]; then
        for h in a b; do
                ns=$na dev=$va
                [ $h = b ] && ns=$nb dev=$vb
                netpair_delay "$build/tests/delay_proxy" "$ns" "$dev" "$DELAY_US" "$work/proxy-$h.log" >"$work/np.msg" ||
                        { echo "run-knobs: $(cat "$work/np.msg")" >&2; exit 1; }
                pids+=("$NP_PID")
        done
fi
netpair_daemons "$build/daemon/hvd-coordinatord" "$work" "$na" "$nb" "${net}1"
for p in $NP_PIDS; do pids+=("$p"); done
for _ in $(seq 200); do
        [ -S "$work/a/worker.sock" ] && [ -S "$work/b/worker.sock" ] && break
        sleep 0.05
done

# one job of 2*PER_NODE ranks, ENV... (VAR=VALUE) on every rank; rank 0's line
job() {
        local model=$1 job=knobs-$tag-$RANDOM world=$((2 * PER_NODE)) rank=0 wp=() st=0
        shift
        for h in a b; do
                local ns=$na ip=${net}1 cross=0
                [ $h = b ] && ns=$nb ip=${net}2 cross=1
                for ((l = 0; l < PER_NODE; l++)); do
                        ip netns exec "$ns" env HVD_JOB_ID="$job" HVD_JOB_SECRET=0123456789abcdef HVD_RANK=$rank \
                                HVD_SIZE=$world HVD_LOCAL_RANK=$l HVD_LOCAL_SIZE="$PER_NODE" HVD_CROSS_RANK=$cross \
                                HVD_CROSS_SIZE=2 HVD_HOSTS="a:$PER_NODE,b:$PER_NODE" HVD_HOSTNAME=$h \
                                HVD_ROOT_PEER="tcp://${net}1:7100" HVD_RUNTIME_DIR="$work/$h" HVD_DATA_ADDR="$ip" \
                                HVD_FUSION_THRESHOLD="$FUSION" HVD_CYCLE_TIME="$CYCLE" "$@" \
                                timeout -k 5 600 "$build/benchmarks/bench_step" --model "$DATA/$model.tsv" \
                                --steps "$STEPS" --warmup "$WARMUP" >"$work/rank$rank.out" 2>&1 &
                        wp+=($!)
                        rank=$((rank + 1))
                done
        done
        for p in "${wp[@]}"; do wait "$p" || st=1; done
        if [ $st -ne 0 ]; then
                echo "run-knobs: job failed ($model $*):" >&2
                tail -n 3 "$work"/rank*.out >&2
                return 1
        fi
        grep '^bench=step' "$work/rank0.out"
}

echo "# run-knobs: rate=$RATE burst=$BURST delay_us=${DELAY_US:-none} per_node=$PER_NODE fusion=$FUSION cycle_ms=$CYCLE"
read -r -a vs <<<"$VARIANTS"
nv=${#vs[@]}
for ((round = 0; round < ROUNDS; round++)); do
        for model in $MODELS; do
                # each round starts at another variant: none always runs first
                for ((i = 0; i < nv; i++)); do
                        v=${vs[$(((i + round) % nv))]}
                        name=${v%%=*} envs=${v#*=}
                        IFS=, read -r -a ev <<<"$envs"
                        line=$(job "$model" "${ev[@]}") || continue
                        echo "$line variant=$name round=$round" | tee -a "$out"
                done
        done
done
echo "# model variant ms_median ratio_to_first (rounds: $ROUNDS, alternating)"
awk '{
        for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
        k = f["model"] SUBSEP f["variant"]
        if (!(f["model"] in seen)) { seen[f["model"]] = 1; models[++nm] = f["model"] }
        if (!(k in cnt)) { vars[f["model"], ++nv[f["model"]]] = f["variant"] }
        v[k, ++cnt[k]] = f["ms_median"]
}
function median(k, n,   a, i, j, t) {
        for (i = 1; i <= n; i++) a[i] = v[k, i]
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
END {
        for (m = 1; m <= nm; m++) {
                md = models[m]
                b = median(md SUBSEP vars[md, 1], cnt[md SUBSEP vars[md, 1]])
                for (i = 1; i <= nv[md]; i++) {
                        k = md SUBSEP vars[md, i]
                        x = median(k, cnt[k])
                        printf "%s %s %.1f %.3f\n", md, vars[md, i], x, x / b
                }
        }
}' "$out"
