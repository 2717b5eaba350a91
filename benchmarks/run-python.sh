#!/bin/bash
# run-python.sh — hvd.torch beside Horovod 0.28.1 and torch.distributed
# (gloo, DistributedDataParallel) from Python, in the same run, alternating:
# every round runs benchmarks/torch_peers.py once under each launcher
#   hvd:      hvdrun -np NP python torch_peers.py --impl hvd     (import hvd.torch as hvd)
#   Horovod:  horovodrun --gloo -np NP -H localhost:NP python torch_peers.py --impl horovod
#                                                                (import horovod.torch as hvd)
#   torch:    NP processes with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
#             (torchrun's variables; Debian's torchrun does not run on Python 3.11)
# in an order that rotates from round to round, all with the same Python and
# torch (Debian's /usr/bin/python3 and torch 1.13: Horovod 0.28.1 builds
# against no torch newer than 2.3). Measures the allreduce sweep in place,
# out of place, out of place without a name and as a group of two, the
# ResNet-50 gradient step
# and real training steps through DistributedOptimizer or DDP; with
# WHAT=colls also broadcast, allgather, reducescatter and alltoall
# (torch_peers.py's docstring says exactly what).
# Prints the raw lines, then per size and per step the medians over the
# rounds and the speed ratios of hvd against each peer (each round's ratio
# from that round's own runs; median and range over the rounds), and the
# issue's targets as met or missed. A peer that is missing or fails is said
# loudly, in the output and at its end.
#
#   benchmarks/run-python.sh [BUILDDIR]            (after make)
# Environment:
#   NP=2 ROUNDS=3 WHAT=sweep,step,train (and colls) MIN=1024 MAX=268435456 (bytes)
#   STEPS=5 REPS=3 TRAIN_MODELS=textcls,cnn BATCH=32 DATA=<dir of resnet50.tsv>
#   MIN_TIME=0.1 (sweep: seconds of calls per repetition, every system alike;
#     0: torch_peers.py's fixed count per size)
#   PEERS="hvd horovod torch" (the launchers to run)  PYTHON=/usr/bin/python3
#   HOROVOD_DIR: Horovod's install directory (default: scripts/horovod.sh's,
#     which builds it once, about 2 minutes, and caches it)
#   RAW=FILE: run nothing; tabulate the raw lines of an earlier run's output
#   CHECK_ARGS=1: check the environment and the arguments, print what would
#     run, run nothing (tests/test-bench-python.sh)
set -u
build=${1:-$(pwd)}
build=$(cd "$build" && pwd) || exit 2
src=$(cd "$(dirname "$0")/.." && pwd)
NP=${NP:-2} ROUNDS=${ROUNDS:-3} WHAT=${WHAT:-sweep,step,train} MIN=${MIN:-1024} MAX=${MAX:-268435456}
STEPS=${STEPS:-5} REPS=${REPS:-3} TRAIN_MODELS=${TRAIN_MODELS:-textcls,cnn} BATCH=${BATCH:-32}
PEERS=${PEERS:-"hvd horovod torch"} PY=${PYTHON:-/usr/bin/python3} MIN_TIME=${MIN_TIME:-0.1}
die() { echo "run-python: $*" >&2; exit 2; }
case $MIN_TIME in '' | *[!0-9.]* | *.*.*) die "MIN_TIME=$MIN_TIME is not a number of seconds" ;; esac
for v in NP ROUNDS MIN MAX STEPS REPS BATCH; do
        case ${!v} in '' | *[!0-9]*) die "$v=${!v} is not a positive integer" ;; esac
        [ "${!v}" -gt 0 ] || die "$v=${!v} is not a positive integer"
done
[ "$MIN" -le "$MAX" ] || die "MIN=$MIN is above MAX=$MAX"
for p in $PEERS; do
        case $p in hvd | horovod | torch) ;; *) die "PEERS: unknown peer $p (hvd, horovod, torch)" ;; esac
done
IFS=, read -ra whats <<<"$WHAT"
for w in "${whats[@]}"; do
        case $w in sweep | colls | step | train) ;; *) die "WHAT: unknown benchmark $w (sweep, colls, step, train)" ;; esac
done
if [ -z "${DATA:-}" ]; then
        for d in "$src/../shared/data" /work/shared/data; do [ -f "$d/resnet50.tsv" ] && DATA=$d && break; done
fi
tsv=${DATA:-}/resnet50.tsv

out=$(mktemp)
work=$(mktemp -d /tmp/hvd-python-XXXXXX)
trap 'rm -rf "$out" "$work"' EXIT
loud() { printf '\n!!!!!!!!!! run-python: %s !!!!!!!!!!\n\n' "$*" | tee -a "$out" >&2; }
# shellcheck source=benchmarks/peers.sh
. "$src/benchmarks/peers.sh"

if [ -n "${RAW:-}" ]; then
        [ -f "$RAW" ] || die "RAW=$RAW: no such file"
        sed -n 's/^#   //p' "$RAW" >"$out"
        PEERS=
else
        [ -f "$tsv" ] || die "set DATA to the directory of resnet50.tsv"
        "$PY" -c 'import torch' 2>/dev/null || die "$PY cannot import torch"
        peers=
        for p in $PEERS; do
                peer_why=
                case $p in
                hvd) peer_hvd "$build" ;;
                horovod) peer_horovod ;;
                esac
                if [ -n "$peer_why" ]; then
                        loud "PEER MISSING: $peer_why"
                        continue
                fi
                peers="$peers $p"
        done
        PEERS=$peers
fi
args=(--what "$WHAT" --min-bytes "$MIN" --max-bytes "$MAX" --reps "$REPS" --steps "$STEPS" --min-time "$MIN_TIME"
        --model-tsv "$tsv" --train-model "$TRAIN_MODELS" --batch "$BATCH")
script=$src/benchmarks/torch_peers.py
export OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
if [ "${CHECK_ARGS:-0}" = 1 ]; then
        echo "run-python: NP=$NP ROUNDS=$ROUNDS peers:${PEERS:- none}"
        echo "run-python: $PY $script --impl IMPL ${args[*]}"
        echo "run-python: horovod: ${HOROVOD_DIR:-none}"
        exit 0
fi

# run_peer PEER ROUND: one job of NP ranks; rank 0's lines into $out
run_peer() {
        local p=$1 round=$2 st=0
        case $p in
        hvd)
                PYTHONPATH=$build/python-binding/pkg timeout -k 5 1800 "$build/tools/hvdrun" --embedded -np "$NP" \
                        --no-prefix "$PY" "$script" --impl hvd "${args[@]}" >"$work/job.out" 2>&1 || st=$?
                ;;
        horovod)
                PYTHONPATH=$HOROVOD_DIR timeout -k 5 1800 "$PY" "$HOROVOD_DIR/bin/horovodrun" --gloo -np "$NP" \
                        -H "localhost:$NP" "$PY" "$script" --impl horovod "${args[@]}" >"$work/job.out" 2>&1 || st=$?
                ;;
        torch)
                local port=$((20000 + (RANDOM % 20000))) r pids=()
                for ((r = 0; r < NP; r++)); do
                        RANK=$r WORLD_SIZE=$NP MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout -k 5 1800 \
                                "$PY" "$script" --impl torch "${args[@]}" >"$work/torch$r.out" 2>&1 &
                        pids+=($!)
                done
                for r in "${pids[@]}"; do wait "$r" || st=1; done
                cat "$work"/torch*.out >"$work/job.out"
                ;;
        esac
        # horovodrun prefixes each line with [rank]<stdout>:
        sed -n "s/^.*\(bench=\)/\1/p; s/^.*\(# [a-z]* (\)/\1/p" "$work/job.out" | sed "s/^bench=/round=$round bench=/" |
                tee -a "$out"
        if [ "$st" != 0 ]; then
                loud "PEER FAILED: $p, round $round (exit status $st): $(grep -v '^\[.\]<stdout>:bench=\|^bench=' \
                        "$work/job.out" | tail -n 3 | tr '\n' ' ')"
        fi
}

if [ -n "$PEERS" ]; then
        echo "# run-python: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null)," \
                "$(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg), NP=$NP, $PY" | tee -a "$out"
        read -ra order <<<"$PEERS"
        for ((round = 0; round < ROUNDS; round++)); do
                echo "# round $round, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out"
                n=${#order[@]}
                for ((i = 0; i < n; i++)); do
                        run_peer "${order[(i + round) % n]}" "$round"
                done
        done
        echo "# raw lines"
        sed 's/^/#   /' "$out"
fi
"$PY" - "$out" <<'PY'
import re, statistics, sys
rows, loud, head, nps = {}, [], [], set()
for line in open(sys.argv[1]):
    if line.startswith("!!!"):
        loud.append(line.strip())
    if line.startswith("# run-python"):
        head.append(line.strip())
    m = dict(re.findall(r"(\w+)=(\S+)", line))
    b, r = m.get("bench"), m.get("round", "0")
    if "np" in m:
        nps.add(int(m["np"]))
    if b == "allreduce":
        rows.setdefault(("allreduce", m["mode"], int(m["bytes"])), {}).setdefault(m["impl"], {})[r] = float(m["time_us"])
    elif b == "coll":
        rows.setdefault(("coll", m["op"], int(m["bytes"])), {}).setdefault(m["impl"], {})[r] = float(m["time_us"])
    elif b == "step":
        rows.setdefault(("step", m["model"]), {}).setdefault(m["impl"], {})[r] = float(m["ms"])
    elif b == "train":
        key = ("train", m["model"])
        rows.setdefault(key, {}).setdefault(m["impl"], {})[r] = float(m["ms"])
        rows.setdefault(key + ("compute",), {}).setdefault(m["impl"], {})[r] = float(m["compute_ms"])
if not rows:
    print("run-python: no results")
    for l in loud:
        print(l)
    sys.exit(1)


def med(d):
    return statistics.median(d.values()) if d else None


def ratio(cell, ours, peer):
    """Speed of ours over peer: time(peer) / time(ours), per round where
    both ran; the median and the range over those rounds."""
    o, p = cell.get(ours, {}), cell.get(peer, {})
    rs = [p[r] / o[r] for r in o if r in p and o[r] > 0]
    if not rs:
        return None, "-"
    m = statistics.median(rs)
    return m, f"{m:.2f} [{min(rs):.2f}-{max(rs):.2f}]" if len(rs) > 1 else f"{m:.2f}"


np_ = max(nps) if nps else 2
busbw = 2 * (np_ - 1) / np_
HEADER = f"{'bytes':>10} {'hvd':>20} {'horovod':>20} {'gloo':>20} {'vs horovod':>18} {'vs gloo':>18}"


def size_row(c, n, factor):
    """A sweep table's row of size n: each system's median time us (busbw
    GB/s) and hvd's ratios; returns (the row, the ratio vs Horovod)."""
    def cell(impl):
        t = med(c.get(impl, {}))
        return f"{t:10.1f} ({n * factor / t / 1e3:6.3f})" if t else f"{'-':>20}"
    vh, sh = ratio(c, "hvd", "horovod")
    _, sg = ratio(c, "hvd", "gloo")
    return f"{n:>10} {cell('hvd')} {cell('horovod')} {cell('gloo')} {sh:>18} {sg:>18}", vh


targets = []
print()
for h in head:
    print(h)
print("# medians over the rounds; ratios: time(peer)/time(hvd) of each round's own runs, median [range]:"
      " above 1 = hvd faster")
titles = {"inplace": "in place", "outofplace": "out of place",
          "unnamed": "out of place without a name (gloo: its out-of-place runs)",
          "grouped": "two halves in place as one group (gloo: two asynchronous all_reduce)",
          "shared": "in place, hvd's tensor shared (hvd.shared_like; the peers' in place)"}
for mode in ("inplace", "outofplace", "unnamed", "grouped", "shared"):
    sizes = sorted(k[2] for k in rows if k[0] == "allreduce" and k[1] == mode)
    if not sizes:
        continue
    print(f"\n## allreduce, float32 sum, {titles[mode]}: time us (busbw GB/s), {np_} ranks")
    print(HEADER)
    for n in sizes:
        c = rows[("allreduce", mode, n)]
        if mode == "shared":  # the peers have no shared tensors: their in-place runs
            c = dict(rows.get(("allreduce", "inplace", n), {}), hvd=c.get("hvd", {}))
        if mode == "unnamed" and "gloo" in rows.get(("allreduce", "outofplace", n), {}):  # gloo has no names
            c = dict(c, gloo=rows[("allreduce", "outofplace", n)]["gloo"])
        line, vh = size_row(c, n, busbw)
        print(line)
        if vh is not None:
            targets.append((f"allreduce {mode} {n} B vs Horovod", vh, 5.0))
factors = {"broadcast": 1.0, "allgather": (np_ - 1) / np_, "reducescatter": (np_ - 1) / np_,
           "alltoall": (np_ - 1) / np_}
for op in ("broadcast", "allgather", "reducescatter", "alltoall"):
    sizes = sorted(k[2] for k in rows if k[0] == "coll" and k[1] == op)
    if not sizes:
        continue
    print(f"\n## {op}, float32{' sum' if op == 'reducescatter' else ''}, blocking: time us (busbw GB/s), {np_} ranks")
    print(HEADER)
    for n in sizes:
        print(size_row(rows[("coll", op, n)], n, factors[op])[0])
for k in sorted(k for k in rows if k[0] == "step"):
    c = rows[k]
    print(f"\n## {k[1]} gradient step (every tensor averaged, in backward order, all in flight): ms, median [range]")
    for impl in ("hvd", "hvd_shared", "horovod", "gloo", "ddp"):
        if impl in c:
            v = c[impl].values()
            print(f"  {impl:<10} {med(c[impl]):9.2f}  [{min(v):.2f}-{max(v):.2f}]")
    for peer, what in (("horovod", "Horovod (async, as DistributedOptimizer)"), ("gloo", "torch gloo, async per tensor"),
                       ("ddp", "DDP's 25 MiB buckets over gloo")):
        v, s = ratio(c, "hvd", peer)
        if v is not None:
            print(f"  hvd vs {what}: {s}")
            if peer == "horovod":
                targets.append((f"{k[1]} step vs Horovod", v, 5.0))
    if "hvd_shared" in c:
        for peer in ("horovod", "hvd"):
            v, s_ = ratio(c, "hvd_shared", peer)
            if v is not None:
                print(f"  hvd with shared gradients vs {'Horovod' if peer == 'horovod' else 'hvd'}: {s_}")
for k in sorted(k for k in rows if k[0] == "train" and len(k) == 2):
    c, comp = rows[k], rows[k + ("compute",)]
    print(f"\n## training step, {k[1]} (synthetic data; compute = the same step without communication): ms, median [range]")
    for impl in ("hvd", "horovod", "ddp"):
        if impl in c:
            v = c[impl].values()
            cm = med(comp[impl])
            print(f"  {impl:<8} {med(c[impl]):9.2f}  [{min(v):.2f}-{max(v):.2f}]  compute {cm:8.2f}"
                  f"  communication's share of the step {max(0.0, 1 - cm / med(c[impl])):4.0%}")
    for peer in ("horovod", "ddp"):
        v, s = ratio(c, "hvd", peer)
        if v is not None:
            print(f"  hvd vs {peer}: {s}")
            if peer == "ddp" and k[1] == "textcls":
                targets.append(("textcls training step vs DDP (communication-bound)", v, 1.3))
if targets:
    print("\n## targets (issue 23): median ratio of the rounds")
    for what, v, goal in targets:
        print(f"  {'met   ' if v >= goal else 'MISSED'} {what}: {v:.2f}x (target {goal}x)")
for l in loud:
    print(l)
PY
