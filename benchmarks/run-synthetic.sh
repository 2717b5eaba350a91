#!/bin/bash
# run-synthetic.sh — a Horovod training script, unchanged but for its import
# line, under hvd and under Horovod 0.28.1, in the same run, alternating:
# examples/python/pytorch_synthetic_benchmark.py (Horovod's benchmark of
# the same name: a torchvision model on random data through
# DistributedOptimizer, with broadcast_parameters and
# broadcast_optimizer_state) runs as it is under
#   hvd:      hvdrun -np NP python pytorch_synthetic_benchmark.py      (import hvd.torch as hvd)
# and, as a copy whose import line reads `import horovod.torch as hvd`,
#   Horovod:  horovodrun --gloo -np NP -H localhost:NP python COPY
# with the same Python and torch (Debian's /usr/bin/python3 and torch 1.13:
# Horovod 0.28.1 builds against no torch newer than 2.3). The order rotates
# from round to round. Prints each run's "Total img/sec" line, then per
# system the median over the rounds and hvd's speed against Horovod (each
# round's ratio from that round's own runs; median and range). A peer that
# is missing or fails is said loudly, in the output and at its end.
#
#   benchmarks/run-synthetic.sh [BUILDDIR]            (after make)
# Environment:
#   NP=2 ROUNDS=3 MODEL=resnet18 BATCH=16 IMAGE=64 CLASSES=100
#   WARMUP=2 BATCHES=5 ITERS=5 (the script's --num-warmup-batches,
#     --num-batches-per-iter, --num-iters)
#   PEERS="hvd horovod"  PYTHON=/usr/bin/python3
#   HOROVOD_DIR: Horovod's install directory (default: scripts/horovod.sh's,
#     which builds it once, about 2 minutes, and caches it)
#   CHECK_ARGS=1: check the arguments, print what would run, run nothing
set -u
build=${1:-$(pwd)}
build=$(cd "$build" && pwd) || exit 2
src=$(cd "$(dirname "$0")/.." && pwd)
NP=${NP:-2} ROUNDS=${ROUNDS:-3} MODEL=${MODEL:-resnet18} BATCH=${BATCH:-16} IMAGE=${IMAGE:-64}
CLASSES=${CLASSES:-100} WARMUP=${WARMUP:-2} BATCHES=${BATCHES:-5} ITERS=${ITERS:-5}
PEERS=${PEERS:-"hvd horovod"} PY=${PYTHON:-/usr/bin/python3}
die() { echo "run-synthetic: $*" >&2; exit 2; }
for v in NP ROUNDS BATCH IMAGE CLASSES WARMUP BATCHES ITERS; do
        case ${!v} in '' | *[!0-9]*) die "$v=${!v} is not a positive integer" ;; esac
        [ "${!v}" -gt 0 ] || die "$v=${!v} is not a positive integer"
done
case $MODEL in '' | *[!a-z0-9_]*) die "MODEL=$MODEL is not a torchvision model name" ;; esac
for p in $PEERS; do
        case $p in hvd | horovod) ;; *) die "PEERS: unknown peer $p (hvd, horovod)" ;; esac
done
script=$src/examples/python/pytorch_synthetic_benchmark.py
grep -q '^import hvd.torch as hvd' "$script" || die "$script has no line 'import hvd.torch as hvd'"
args=(--model "$MODEL" --batch-size "$BATCH" --image-size "$IMAGE" --num-classes "$CLASSES"
        --num-warmup-batches "$WARMUP" --num-batches-per-iter "$BATCHES" --num-iters "$ITERS" --no-cuda)
if [ "${CHECK_ARGS:-0}" = 1 ]; then
        echo "run-synthetic: NP=$NP ROUNDS=$ROUNDS peers: $PEERS"
        echo "run-synthetic: $PY $script ${args[*]}"
        exit 0
fi

out=$(mktemp)
work=$(mktemp -d /tmp/hvd-synthetic-XXXXXX)
trap 'rm -rf "$out" "$work"' EXIT
loud() { printf '\n!!!!!!!!!! run-synthetic: %s !!!!!!!!!!\n\n' "$*" | tee -a "$out" >&2; }
# shellcheck source=benchmarks/peers.sh
. "$src/benchmarks/peers.sh"
"$PY" -c 'import torch, torchvision, numpy' 2>"$work/py.err" ||
        die "$PY cannot import torch, torchvision and numpy: $(tail -n 1 "$work/py.err")"

peers=
for p in $PEERS; do
        case $p in
        hvd)
                peer_hvd "$build"
                [ -z "$peer_why" ] || { loud "PEER MISSING: $peer_why"; continue; }
                ;;
        horovod)
                peer_horovod
                [ -z "$peer_why" ] || { loud "PEER MISSING: $peer_why"; continue; }
                # the same script, its import line Horovod's
                sed 's/^import hvd\.torch as hvd.*/import horovod.torch as hvd/' "$script" >"$work/horovod_synthetic.py"
                ;;
        esac
        peers="$peers $p"
done
[ -n "$peers" ] || { loud "no peer to run"; exit 1; }

export OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
# run_peer PEER ROUND: one job of NP ranks; its img/sec lines into $out
run_peer() {
        local p=$1 round=$2 st=0
        case $p in
        hvd)
                PYTHONPATH=$build/python-binding/pkg timeout -k 5 1800 "$build/tools/hvdrun" -np "$NP" --no-prefix \
                        "$PY" "$script" "${args[@]}" >"$work/job.out" 2>&1 || st=$?
                ;;
        horovod)
                PYTHONPATH=$HOROVOD_DIR timeout -k 5 1800 "$PY" "$HOROVOD_DIR/bin/horovodrun" --gloo -np "$NP" \
                        -H "localhost:$NP" "$PY" "$work/horovod_synthetic.py" "${args[@]}" >"$work/job.out" 2>&1 || st=$?
                ;;
        esac
        # horovodrun prefixes each line with [rank]<stdout>:
        sed -n "s/^.*\(Total img\/sec on [0-9]* CPU(s): \)\([0-9.]*\).*/round=$round impl=$p total_img_s=\2/p" \
                "$work/job.out" | tee -a "$out"
        if [ "$st" != 0 ] || ! grep -q "^round=$round impl=$p " "$out"; then
                loud "PEER FAILED: $p, round $round (exit status $st): $(tail -n 3 "$work/job.out" | tr '\n' ' ')"
        fi
}

echo "# run-synthetic: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null)," \
        "$(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg), NP=$NP, $PY, ${args[*]}" | tee -a "$out"
read -ra order <<<"$peers"
for ((round = 0; round < ROUNDS; round++)); do
        n=${#order[@]}
        for ((i = 0; i < n; i++)); do
                run_peer "${order[(i + round) % n]}" "$round"
        done
done
"$PY" - "$out" <<'PY'
import re, statistics, sys
runs, loud = {}, []
for line in open(sys.argv[1]):
    if line.startswith("!!!"):
        loud.append(line.strip())
    m = dict(re.findall(r"(\w+)=(\S+)", line))
    if "total_img_s" in m:
        runs.setdefault(m["impl"], {})[m["round"]] = float(m["total_img_s"])
print("\n# total img/sec over all ranks, median [range] over the rounds")
for impl in ("hvd", "horovod"):
    if impl in runs:
        v = list(runs[impl].values())
        print(f"  {impl:<8} {statistics.median(v):9.1f}  [{min(v):.1f}-{max(v):.1f}]")
o, p = runs.get("hvd", {}), runs.get("horovod", {})
rs = [o[r] / p[r] for r in o if r in p and p[r] > 0]
if rs:
    print(f"  hvd vs Horovod (img/sec, each round's own runs): {statistics.median(rs):.2f} "
          f"[{min(rs):.2f}-{max(rs):.2f}]")
for l in loud:
    print(l)
PY
