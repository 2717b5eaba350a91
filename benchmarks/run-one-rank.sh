#!/bin/bash
# run-one-rank.sh — a job of one rank from Python: the time of a blocking
# allreduce (benchmarks/torch_one_rank.py) for hvd.torch under `hvdrun -np
# 1` and with no launcher (no daemon), Horovod 0.28.1 on one process and
# torch.distributed's gloo with a world of one, in the same run, the
# systems' order rotating from round to round; medians over the rounds, and
# each peer's time over hvd's (hvdrun) in the same run.
#
#   benchmarks/run-one-rank.sh [BUILDDIR]          (after make)
# Environment:
#   ROUNDS=3 MIN=1024 MAX=1048576 MIN_TIME=0.1 PYTHON=/usr/bin/python3
#   PEERS="hvd horovod gloo"  HOROVOD_DIR (default: scripts/horovod.sh's)
set -u
build=${1:-$(pwd)}
build=$(cd "$build" && pwd) || exit 2
src=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-3} MIN=${MIN:-1024} MAX=${MAX:-1048576} MIN_TIME=${MIN_TIME:-0.1}
PEERS=${PEERS:-"hvd horovod gloo"} PY=${PYTHON:-/usr/bin/python3}
die() { echo "run-one-rank: $*" >&2; exit 2; }
loud() { printf '\n!!!!!!!!!! run-one-rank: %s !!!!!!!!!!\n\n' "$*" >&2; }
# shellcheck source=benchmarks/peers.sh
. "$src/benchmarks/peers.sh"
case $ROUNDS in '' | *[!0-9]* | 0) die "ROUNDS=$ROUNDS is not a positive integer" ;; esac
for v in MIN MAX; do
        case ${!v} in '' | *[!0-9]*) die "$v=${!v} is not a number of bytes" ;; esac
done
[ "$MIN" -le "$MAX" ] || die "MIN=$MIN is above MAX=$MAX"
[[ $MIN_TIME =~ ^[0-9]*\.?[0-9]+$ ]] || die "MIN_TIME=$MIN_TIME is not a number of seconds"
for p in $PEERS; do
        case $p in hvd | horovod | gloo) ;; *) die "unknown peer $p (hvd, horovod, gloo)" ;; esac
done
"$PY" -c 'import torch' 2>/dev/null || die "$PY cannot import torch"

systems=
for p in $PEERS; do
        case $p in
        hvd)
                peer_hvd "$build"
                [ -z "$peer_why" ] || { loud "PEER MISSING: $peer_why"; continue; }
                systems="$systems hvd:hvdrun hvd:none" ;;
        horovod)
                peer_horovod
                [ -z "$peer_why" ] || { loud "PEER MISSING: $peer_why"; continue; }
                systems="$systems horovod:none" ;;
        gloo) systems="$systems gloo:none" ;;
        esac
done
[ -n "$systems" ] || die "no system to run"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
script=$src/benchmarks/torch_one_rank.py
args=(--min-bytes "$MIN" --max-bytes "$MAX" --rounds 1 --min-time "$MIN_TIME")
export OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
echo "# run-one-rank.sh $(date -u '+%Y-%m-%d %H:%M UTC') commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "# $(getconf _NPROCESSORS_ONLN) CPUs $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# ROUNDS=$ROUNDS MIN=$MIN MAX=$MAX MIN_TIME=$MIN_TIME PYTHON=$PY systems:$systems"
read -r -a all <<<"$systems"
n=${#all[@]}
for ((round = 0; round < ROUNDS; round++)); do
        k=$((round % n))
        for s in "${all[@]:k}" "${all[@]:0:k}"; do
                impl=${s%%:*} launcher=${s#*:}
                case $impl in
                hvd)
                        if [ "$launcher" = hvdrun ]; then
                                PYTHONPATH=$build/python-binding/pkg timeout -k 5 600 \
                                        "$build/tools/hvdrun" -np 1 --no-prefix "$PY" "$script" --impl hvd \
                                        --launcher "$launcher" "${args[@]}"
                        else
                                (cd /tmp && env -u HVD_JOB_ID -u HVD_RUNTIME_DIR \
                                        PYTHONPATH="$build/python-binding/pkg" timeout -k 5 600 "$PY" "$script" \
                                        --impl hvd --launcher none "${args[@]}")
                        fi ;;
                horovod)
                        PYTHONPATH=$HOROVOD_DIR timeout -k 5 600 "$PY" "$script" --impl horovod --launcher none \
                                "${args[@]}" 2>/dev/null ;;
                gloo) timeout -k 5 600 "$PY" "$script" --impl gloo --launcher none "${args[@]}" ;;
                esac | sed "s/^/#   round=$round /" |
                        tee -a "$out" | grep -v '^#' >&2
        done
done
cat "$out"
"$PY" - "$out" <<'PY'
import collections, re, statistics, sys
rows = collections.defaultdict(lambda: {"ip": [], "oop": []})
for line in open(sys.argv[1]):
    m = re.search(r"impl=(\S+) launcher=(\S+) bytes=(\d+) in_place_us=([\d.]+) out_of_place_us=(\S+)", line)
    if not m:
        continue
    key = ("%s(%s)" % (m.group(1), m.group(2)), int(m.group(3)))
    rows[key]["ip"].append(float(m.group(4)))
    if m.group(5) != "-":
        rows[key]["oop"].append(float(m.group(5)))
systems = list(dict.fromkeys(k[0] for k in rows))
sizes = sorted({k[1] for k in rows})
ref = "hvd(hvdrun)"
print("# medians over the rounds, us per call; in brackets a system's time over %s's (in place)" % ref)
print("%-22s %10s %12s %12s %10s" % ("system", "bytes", "in_place_us", "out_place_us", "vs_hvd"))
for s in systems:
    for b in sizes:
        r = rows.get((s, b))
        if not r or not r["ip"]:
            continue
        ip = statistics.median(r["ip"])
        oop = "%.2f" % statistics.median(r["oop"]) if r["oop"] else "-"
        base = rows.get((ref, b))
        ratio = "%.1fx" % (ip / statistics.median(base["ip"])) if base and base["ip"] else "-"
        print("%-22s %10d %12.2f %12s %10s" % (s, b, ip, oop, ratio))
PY
