#!/bin/bash
# run-collectives.sh — collective sweeps of hvd (benchmarks/bench_collective)
# beside Open MPI (benchmarks/mpi_collective: MPI_Allreduce, MPI_Bcast,
# MPI_Allgather, MPI_Reduce_scatter_block) and torch.distributed's gloo
# backend (benchmarks/gloo_collective.py; gloo has no reduce_scatter) in the
# same run, alternating, medians of ROUNDS: time, algbw, busbw (nccl-tests
# convention: bytes is the whole buffer — for allgather the gathered output,
# for reducescatter the input; busbw = algbw · 2(n-1)/n for allreduce,
# (n-1)/n for allgather and reducescatter, 1 for broadcast). A table per
# collective and a gnuplot PNG of busbw against size.
#
#   benchmarks/run-collectives.sh [BUILDDIR]     (after `make bench`)
# Environment: OPS="allreduce broadcast allgather reducescatter", NPS="2 4",
# ROUNDS=3, MIN=8, MAX=268435456, NODES=1 (or 2, 4: emulated nodes, one
# daemon each on loopback; the MPI peer then uses TCP, gloo is left out),
# PNG=collectives.png (empty: no plot), OUT_OF_PLACE=1 (also time hvd's
# allreduce and broadcast with a separate output, column hvd_oop; by default
# they run in place, as the peers' MPI_IN_PLACE, MPI_Bcast and torch do).
set -u
build=${1:-$(pwd)}
build=$(cd "$build" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
OPS=${OPS:-"allreduce broadcast allgather reducescatter"}
NPS=${NPS:-"2 4"} ROUNDS=${ROUNDS:-3} MIN=${MIN:-8} MAX=${MAX:-268435456} NODES=${NODES:-1}
OUT_OF_PLACE=${OUT_OF_PLACE:-0}
PNG=${PNG-collectives-nodes$NODES.png}
PY=${PYTHON:-/usr/bin/python3}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
export HVD_BUILDDIR=$build
# the peers: one that is missing is named here and again at the end
# shellcheck source=benchmarks/peers.sh
. "$src/benchmarks/peers.sh"
if [ "$NODES" -eq 1 ]; then peers_check "$build" mpi gloo; else peers_check "$build" mpi; fi
for np in $NPS; do
        for ((round = 0; round < ROUNDS; round++)); do
                for op in $OPS; do
                        args=(--op "$op" --min-bytes "$MIN" --max-bytes "$MAX")
                        variants=("")
                        [ "$OUT_OF_PLACE" = 1 ] && { [ "$op" = allreduce ] || [ "$op" = broadcast ]; } &&
                                variants+=(--out-of-place)
                        for v in "${variants[@]}"; do
                                if [ "$NODES" -gt 1 ]; then
                                        hosts=$(for ((i = 0; i < NODES; i++)); do printf 'n%d:%d,' $i $((np / NODES)); done)
                                        "$src/tests/lib/launch-multi.sh" -H "${hosts%,}" -t 900 -- \
                                                "$build/benchmarks/bench_collective" "${args[@]}" ${v:+"$v"} |
                                                sed 's/^\[[^]]*\] //' >>"$out"
                                        mca="--mca btl tcp,self"
                                else
                                        "$build/tools/hvdrun" -np "$np" --no-prefix "$build/benchmarks/bench_collective" \
                                                "${args[@]}" ${v:+"$v"} >>"$out"
                                        mca=""
                                fi
                        done
                        if [ -x "$build/benchmarks/mpi_collective" ]; then
                                # shellcheck disable=SC2086 # mca is a list of mpirun options
                                mpirun --allow-run-as-root --oversubscribe $mca -np "$np" \
                                        "$build/benchmarks/mpi_collective" "${args[@]}" >>"$out" 2>/dev/null
                        fi
                        if [ "$NODES" -eq 1 ] && "$PY" -c 'import torch.distributed' 2>/dev/null; then
                                "$PY" "$src/benchmarks/gloo_collective.py" --np "$np" "${args[@]}" >>"$out" 2>/dev/null
                        fi
                done
        done
done
echo "# raw lines"
sed 's/^/#   /' "$out"
"$PY" - "$out" "$NODES" "$PNG" <<'PY'
import re, statistics, subprocess, sys, os
path, nodes, png = sys.argv[1], sys.argv[2], sys.argv[3]
rows = {}
for line in open(path):
    m = dict(re.findall(r"(\w+)=(\S+)", line))
    if "impl" not in m or "busbw_gbs" not in m:
        continue
    impl = "hvd_oop" if m.get("out_of_place") == "1" else m["impl"]
    r = rows.setdefault((m["bench"], int(m["np"]), int(m["bytes"])), {}).setdefault(impl, {"t": [], "bw": []})
    r["t"].append(float(m["time_us"]))
    r["bw"].append(float(m["busbw_gbs"]))
order = ["allreduce", "broadcast", "allgather", "reducescatter"]
ops = sorted({k[0] for k in rows}, key=lambda o: order.index(o) if o in order else 9)
f = lambda x, w=8, p=3: f"{x:{w}.{p}f}" if x is not None else f"{'-':>{w}}"
# busbw(hvd)/busbw(peer) at equal bytes and ranks = time(peer)/time(hvd)
ratio = lambda th, tp: f"{tp / th:8.2f}" if th and tp else f"{'-':>8}"
for op in ops:
    oop = any("hvd_oop" in v for (o, _, _), v in rows.items() if o == op)
    print(f"\n# {op}: time µs and busbw GB/s, medians; nodes={nodes}; ratios are busbw(hvd)/busbw(peer)"
          + ("; hvd_oop: hvd with a separate output" if oop else ""))
    print(f"{'np':>3} {'bytes':>10} {'hvd_us':>9} {'mpi_us':>9} {'gloo_us':>9} {'hvd_bw':>8} {'mpi_bw':>8} {'gloo_bw':>8} {'hvd/mpi':>8} {'hvd/gloo':>8}"
          + (f" {'oop_us':>9} {'oop/mpi':>8}" if oop else ""))
    for (o, np_, b), impls in sorted(rows.items()):
        if o != op:
            continue
        t = {k: statistics.median(v["t"]) for k, v in impls.items()}
        bw = {k: statistics.median(v["bw"]) for k, v in impls.items()}
        print(f"{np_:>3} {b:>10} {f(t.get('hvd'), 9, 1)} {f(t.get('mpi'), 9, 1)} {f(t.get('gloo'), 9, 1)} "
              f"{f(bw.get('hvd'))} {f(bw.get('mpi'))} {f(bw.get('gloo'))} {ratio(t.get('hvd'), t.get('mpi'))} "
              f"{ratio(t.get('hvd'), t.get('gloo'))}"
              + (f" {f(t.get('hvd_oop'), 9, 1)} {ratio(t.get('hvd_oop'), t.get('mpi'))}" if oop else ""))
if not png:
    sys.exit(0)
nps = sorted({k[1] for k in rows})
dat = png + ".dat"
plots = []
with open(dat, "w") as fh:
    idx = 0
    for op in ops:
        for np_ in nps:
            for impl in ("hvd", "mpi", "gloo"):
                pts = [(b, statistics.median(v[impl]["bw"])) for (o, n, b), v in sorted(rows.items())
                       if o == op and n == np_ and impl in v]
                if not pts:
                    continue
                fh.write(f"# {op} np={np_} {impl}\n")
                for b, bw in pts:
                    fh.write(f"{b} {bw}\n")
                fh.write("\n\n")
                plots.append((op, np_, impl, idx))
                idx += 1
cols = 2
rows_n = (len(ops) + cols - 1) // cols
script = [f"set terminal pngcairo size 1200,{420 * rows_n} noenhanced", f"set output '{png}'",
          f"set multiplot layout {rows_n},{cols} title 'busbw (GB/s) against bytes; nodes={nodes}'",
          "set logscale x 2", "set format x '%.0b %BB'", "set key top left", "set grid",
          "set xlabel 'bytes'", "set ylabel 'busbw GB/s'"]
color = {"hvd": "#1f77b4", "mpi": "#d62728", "gloo": "#2ca02c"}
for op in ops:
    terms = [f"'{dat}' index {i} using 1:2 with linespoints lw 2 dt {nps.index(np_) + 1} pt {nps.index(np_) + 6} lc rgb '{color[impl]}' title '{impl} np={np_}'"
             for o, np_, impl, i in plots if o == op]
    script += [f"set title '{op}'", "plot " + ", ".join(terms)]
script.append("unset multiplot")
try:
    subprocess.run(["gnuplot"], input="\n".join(script).encode(), check=True)
    print(f"\n# plot: {png} (data: {dat})")
except (OSError, subprocess.CalledProcessError) as e:
    print(f"# no plot: {e}")
PY
peers_report
