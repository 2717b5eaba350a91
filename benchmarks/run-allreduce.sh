#!/bin/bash
# run-allreduce.sh — allreduce bus bandwidth of hvd beside Open MPI and
# torch.distributed gloo in the same run, alternating, medians of ROUNDS,
# as a table of ratios (nccl-tests convention: busbw = algbw * 2(n-1)/n) and
# the time per operation (what matters for small buffers).
#
#   benchmarks/run-allreduce.sh [BUILDDIR]      (after `make bench`)
# Environment: NPS="2 4", ROUNDS=3, MIN=65536, MAX=67108864, NODES=1 (or 2, 4:
# emulated nodes, one daemon each on loopback; the MPI peer then uses TCP).
set -u
build=${1:-$(pwd)}
src=$(cd "$(dirname "$0")/.." && pwd)
NPS=${NPS:-"2 4"} ROUNDS=${ROUNDS:-3} MIN=${MIN:-65536} MAX=${MAX:-67108864} NODES=${NODES:-1}
PY=${PYTHON:-/usr/bin/python3}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
export HVD_BUILDDIR=$build
for np in $NPS; do
        for ((round = 0; round < ROUNDS; round++)); do
                if [ "$NODES" -gt 1 ]; then
                        hosts=$(for ((i = 0; i < NODES; i++)); do printf 'n%d:%d,' $i $((np / NODES)); done)
                        "$src/tests/lib/launch-multi.sh" -H "${hosts%,}" -t 600 -- "$build/benchmarks/bench_collective" \
                                --min-bytes "$MIN" --max-bytes "$MAX" | sed 's/^\[[^]]*\] //' >>"$out"
                        mca="--mca btl tcp,self"
                else
                        "$build/tools/hvdrun" -np "$np" --no-prefix "$build/benchmarks/bench_collective" \
                                --min-bytes "$MIN" --max-bytes "$MAX" >>"$out"
                        mca=""
                fi
                if [ -x "$build/benchmarks/mpi_collective" ]; then
                        # shellcheck disable=SC2086
                        mpirun --allow-run-as-root --oversubscribe $mca -np "$np" "$build/benchmarks/mpi_collective" \
                                --min-bytes "$MIN" --max-bytes "$MAX" >>"$out" 2>/dev/null
                fi
                if [ "$NODES" -eq 1 ] && "$PY" -c 'import torch.distributed' 2>/dev/null; then
                        "$PY" "$src/benchmarks/gloo_collective.py" --np "$np" --min-bytes "$MIN" --max-bytes "$MAX" \
                                >>"$out" 2>/dev/null
                fi
        done
done
"$PY" - "$out" "$NODES" <<'PY'
import re, statistics, sys
rows, times = {}, {}
for line in open(sys.argv[1]):
    m = dict(re.findall(r"(\w+)=(\S+)", line))
    if m.get("bench") != "allreduce":
        continue
    key = (int(m["np"]), int(m["bytes"]))
    rows.setdefault(key, {}).setdefault(m["impl"], []).append(float(m["busbw_gbs"]))
    times.setdefault(key, {}).setdefault(m["impl"], []).append(float(m["time_us"]))
print(f"# allreduce busbw GB/s and time per operation in us, medians; nodes={sys.argv[2]}")
print(f"{'np':>3} {'bytes':>10} {'hvd':>8} {'mpi':>8} {'gloo':>8} {'hvd/mpi':>8} {'hvd/gloo':>9}"
      f" {'hvd_us':>9} {'mpi_us':>9} {'gloo_us':>9}")
for (np_, b), impls in sorted(rows.items()):
    med = {k: statistics.median(v) for k, v in impls.items()}
    tmed = {k: statistics.median(v) for k, v in times[(np_, b)].items()}
    h, mp, g = med.get("hvd"), med.get("mpi"), med.get("gloo")
    f = lambda x: f"{x:8.3f}" if x is not None else f"{'-':>8}"
    r = lambda a, c: f"{a / c:8.2f}" if a and c else f"{'-':>8}"
    t = lambda x: f"{x:9.1f}" if x is not None else f"{'-':>9}"
    print(f"{np_:>3} {b:>10} {f(h)} {f(mp)} {f(g)} {r(h, mp)} {r(h, g):>9}"
          f" {t(tmed.get('hvd'))} {t(tmed.get('mpi'))} {t(tmed.get('gloo'))}")
PY
