#!/bin/bash
# run-collectives.sh — collective sweeps of hvd (benchmarks/bench_collective)
# beside Open MPI (benchmarks/mpi_collective: MPI_Allreduce, MPI_Bcast,
# MPI_Allgather, MPI_Reduce_scatter_block, MPI_Alltoall) and torch.distributed's gloo
# backend (benchmarks/gloo_collective.py; gloo has no reduce_scatter) in the
# same run, alternating, medians of ROUNDS: time, algbw, busbw (nccl-tests
# convention: bytes is the whole buffer — for allgather the gathered output,
# for reducescatter the input, for alltoall what each rank sends, in equal
# parts; busbw = algbw · 2(n-1)/n for allreduce, (n-1)/n for allgather,
# reducescatter and alltoall, 1 for broadcast). A table per
# collective, the spread of each system's busbw over the rounds (min,
# median, max: a slow round shows there, not only in the median), and a
# gnuplot PNG of busbw against size: one panel per collective and rank
# count, each system's median as a line over a band from its slowest to its
# fastest round, the run's date, commit and machine in the title.
#
#   benchmarks/run-collectives.sh [BUILDDIR]     (after `make bench`)
# Environment: OPS="allreduce broadcast allgather reducescatter alltoall", NPS="2 4",
# ROUNDS=3, MIN=8, MAX=268435456, NODES=1 (or 2, 4: emulated nodes, one
# daemon each on loopback; the MPI peer then uses TCP, gloo is left out),
# PNG=collectives.png (empty: no plot), OUT_OF_PLACE=1 (also time hvd's
# allreduce and broadcast with a separate output, column hvd_oop; by default
# they run in place, as the peers' MPI_IN_PLACE, MPI_Bcast and torch do),
# SHARED=1 (also time hvd's allreduce on shared tensors, hvd_shared_alloc,
# which the other local ranks read in place: column hvd_shr; the peers' own
# buffers are ordinary memory),
# MIN_TIME=0.1 (each system times each size over as many calls as fill
# this many seconds at its own warm pace, at least 5: windows long enough
# that one preemption does not decide a round),
# SET=0,2 (hvd in a process set of those ranks, Open MPI in a communicator
# of them, MPI_Comm_split, gloo left out; the tables' np is then the
# set's size),
# RAW=FILE (no runs: the report of the raw lines in an earlier output).
set -u
build=${1:-$(pwd)}
build=$(cd "$build" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
OPS=${OPS:-"allreduce broadcast allgather reducescatter alltoall"}
NPS=${NPS:-"2 4"} ROUNDS=${ROUNDS:-3} MIN=${MIN:-8} MAX=${MAX:-268435456} NODES=${NODES:-1}
OUT_OF_PLACE=${OUT_OF_PLACE:-0} SHARED=${SHARED:-0} MIN_TIME=${MIN_TIME:-0.1} SET=${SET:-}
PNG=${PNG-collectives-nodes$NODES.png}
PY=${PYTHON:-/usr/bin/python3}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# the peers (one that is missing is named here and again at the end), and
# what ran
# shellcheck source=benchmarks/peers.sh
. "$src/benchmarks/peers.sh"
commit=$(run_commit "$src")
machine=$(run_machine)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
load0=$(cut -d' ' -f1 /proc/loadavg)
# RAW=FILE: no runs, the tables and the plot of the raw lines in FILE (a
# run's output, or several concatenated; "# run:" lines say what they were)
if [ -n "${RAW:-}" ]; then
        sed -n 's/^#   //p' "$RAW" >"$out"
        NPS=
        echo "# the report of $RAW, whose runs were:"
        grep '^# run: ' "$RAW"
        started=$(sed -n 's/^# run: \([^;]*\);.*/\1/p' "$RAW" | paste -sd '+' -)
        commit=$(sed -n 's/^# run: [^;]*; commit \([^;]*\);.*/\1/p' "$RAW" | sort -u | paste -sd '+' -)
        load0=$(sed -n 's/^# run: .*load average \([^ ]*\) .*/\1/p' "$RAW" | paste -sd '+' -)
fi
[ -n "${RAW:-}" ] || {
        echo "# run: $started; commit $commit; $machine; load average $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "# NPS=\"$NPS\" ROUNDS=$ROUNDS MIN=$MIN MAX=$MAX NODES=$NODES OPS=\"$OPS\" MIN_TIME=$MIN_TIME${SET:+ SET=$SET}"
}
export HVD_BUILDDIR=$build
if [ "$NODES" -eq 1 ]; then peers_check "$build" mpi gloo; else peers_check "$build" mpi; fi
# the vCPUs' placement at each round's start and end: a cache line's round
# trip between CPUs 0 and 1 (benchmarks/core_rtt; what the host decides on a
# virtual machine, and what busbw follows at small sizes)
rtt() {
        [ -x "$build/benchmarks/core_rtt" ] || return 0
        "$build/benchmarks/core_rtt" 2>/dev/null | sed "s/^bench=core_rtt /bench=core_rtt np=$1 round=$2 at=$3 /" >>"$out"
}
for np in $NPS; do
        for ((round = 0; round < ROUNDS; round++)); do
                rtt "$np" "$round" start
                for op in $OPS; do
                        args=(--op "$op" --min-bytes "$MIN" --max-bytes "$MAX" --min-time "$MIN_TIME" ${SET:+--set "$SET"})
                        variants=("")
                        [ "$OUT_OF_PLACE" = 1 ] && { [ "$op" = allreduce ] || [ "$op" = broadcast ]; } &&
                                variants+=(--out-of-place)
                        [ "$SHARED" = 1 ] && [ "$op" = allreduce ] && variants+=(--shared)
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
                        if [ "$NODES" -eq 1 ] && [ -z "$SET" ] && "$PY" -c 'import torch.distributed' 2>/dev/null; then
                                "$PY" "$src/benchmarks/gloo_collective.py" --np "$np" "${args[@]}" >>"$out" 2>/dev/null
                        fi
                done
                rtt "$np" "$round" end
        done
done
echo "# raw lines"
sed 's/^/#   /' "$out"
[ -n "${RAW:-}" ] || echo "# done: $(date -u '+%Y-%m-%d %H:%M UTC'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" - "$out" "$NODES" "$PNG" "$started; commit $commit; $machine; load average at start $load0" <<'PY'
import re, statistics, subprocess, sys
path, nodes, png, run = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rows = {}
# per (np, round): the core-to-core round trips (ns) at its start and end
rtts, round_of = {}, {}
rnd = None
for line in open(path):
    m = dict(re.findall(r"(\w+)=(\S+)", line))
    if m.get("bench") == "core_rtt":
        # rounds numbered in the order they ran (RAW= may join several runs)
        if m.get("at") == "start" or rnd is None:
            rnd = (int(m["np"]), len(rtts))
        rtts.setdefault(rnd, []).append(float(m["rtt_ns"]))
        continue
    if "impl" not in m or "busbw_gbs" not in m:
        continue
    impl = "hvd_oop" if m.get("out_of_place") == "1" else "hvd_shr" if m.get("shared") == "1" else m["impl"]
    r = rows.setdefault((m["bench"], int(m["np"]), int(m["bytes"])), {}).setdefault(impl, {"t": [], "bw": []})
    r["t"].append(float(m["time_us"]))
    r["bw"].append(float(m["busbw_gbs"]))
order = ["allreduce", "broadcast", "allgather", "reducescatter", "alltoall"]
ops = sorted({k[0] for k in rows}, key=lambda o: order.index(o) if o in order else 9)
impls = [i for i in ("hvd", "hvd_oop", "hvd_shr", "mpi", "gloo") if any(i in v for v in rows.values())]
f = lambda x, w=8, p=3: f"{x:{w}.{p}f}" if x is not None else f"{'-':>{w}}"
# busbw(hvd)/busbw(peer) at equal bytes and ranks = time(peer)/time(hvd)
ratio = lambda th, tp: f"{tp / th:8.2f}" if th and tp else f"{'-':>8}"


def size(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def spread_table(op):
    print(f"{'np':>3} {'bytes':>10} " + " ".join(f"{i + ' min/med/max':>26} {'spread':>6}" for i in impls) + f" {'rounds':>6}")
    for (o, np_, b), im in sorted(rows.items()):
        if o != op:
            continue
        cells, n = [], 0
        for i in impls:
            v = im.get(i, {}).get("bw", [])
            n = max(n, len(v))
            if not v:
                cells.append(f"{'-':>26} {'-':>6}")
                continue
            lo, med, hi = min(v), statistics.median(v), max(v)
            cells.append(f"{lo:8.3f} {med:8.3f} {hi:8.3f} " + (f"{hi / lo:6.2f}" if lo > 0 else f"{'-':>6}"))
        print(f"{np_:>3} {b:>10} " + " ".join(cells) + f" {n:>6}")


if rtts:
    print("\n# the vCPUs' placement: core-to-core round trip (benchmarks/core_rtt, ns) at each round's start/end")
    for np_ in sorted({n for n, _ in rtts}):
        print(f"#   np={np_}: " + " ".join("/".join(f"{x:.0f}" for x in v) for (n, _), v in sorted(rtts.items()) if n == np_))
else:
    print("\n# no benchmarks/core_rtt (make bench): the vCPUs' placement was not recorded")

for op in ops:
    oop = any("hvd_oop" in v for (o, _, _), v in rows.items() if o == op)
    shr = any("hvd_shr" in v for (o, _, _), v in rows.items() if o == op)
    print(f"\n# {op}: time µs and busbw GB/s, medians; nodes={nodes}; ratios are busbw(hvd)/busbw(peer)"
          + ("; hvd_oop: hvd with a separate output" if oop else "")
          + ("; shr: hvd on shared tensors (read in place)" if shr else ""))
    print(f"{'np':>3} {'bytes':>10} {'hvd_us':>9} {'mpi_us':>9} {'gloo_us':>9} {'hvd_bw':>8} {'mpi_bw':>8} {'gloo_bw':>8} {'hvd/mpi':>8} {'hvd/gloo':>8}"
          + (f" {'oop_us':>9} {'oop/mpi':>8}" if oop else "")
          + (f" {'shr_us':>9} {'shr/mpi':>8} {'shr/gloo':>8} {'shr/hvd':>8}" if shr else ""))
    for (o, np_, b), im in sorted(rows.items()):
        if o != op:
            continue
        t = {k: statistics.median(v["t"]) for k, v in im.items()}
        bw = {k: statistics.median(v["bw"]) for k, v in im.items()}
        print(f"{np_:>3} {b:>10} {f(t.get('hvd'), 9, 1)} {f(t.get('mpi'), 9, 1)} {f(t.get('gloo'), 9, 1)} "
              f"{f(bw.get('hvd'))} {f(bw.get('mpi'))} {f(bw.get('gloo'))} {ratio(t.get('hvd'), t.get('mpi'))} "
              f"{ratio(t.get('hvd'), t.get('gloo'))}"
              + (f" {f(t.get('hvd_oop'), 9, 1)} {ratio(t.get('hvd_oop'), t.get('mpi'))}" if oop else "")
              + (f" {f(t.get('hvd_shr'), 9, 1)} {ratio(t.get('hvd_shr'), t.get('mpi'))} "
                 f"{ratio(t.get('hvd_shr'), t.get('gloo'))} {ratio(t.get('hvd_shr'), t.get('hvd'))}" if shr else ""))
    # the spread over the rounds: max/min is how much faster the fastest
    # round was than the slowest
    print(f"\n# {op}: busbw GB/s over the rounds, min / median / max, and max/min (spread)")
    spread_table(op)
if not png:
    sys.exit(0)
nps = sorted({k[1] for k in rows})
dat = png + ".dat"
panels = [(op, np_) for op in ops for np_ in nps if any(o == op and n == np_ for o, n, _ in rows)]
plots = {}
with open(dat, "w") as fh:
    idx = 0
    for op, np_ in panels:
        for impl in impls:
            pts = [(b, v[impl]["bw"]) for (o, n, b), v in sorted(rows.items()) if o == op and n == np_ and impl in v]
            if not pts:
                continue
            fh.write(f"# {op} np={np_} {impl}: bytes median min max (busbw GB/s over {max(len(x) for _, x in pts)} rounds)\n")
            for b, bw in pts:
                fh.write(f"{b} {statistics.median(bw)} {min(bw)} {max(bw)}\n")
            fh.write("\n\n")
            plots.setdefault((op, np_), []).append((impl, idx))
            idx += 1
sizes = sorted({b for (o, n, b) in rows})
# a label every 4x (every 16x across wide ranges), so that none collide
k = 2 if len(sizes) <= 13 else 4
tics = [b for b in sizes if (b.bit_length() - sizes[0].bit_length()) % k == 0]
xtics = ", ".join(f"'{size(b)}' {b}" for b in tics)
cols = min(len(panels), 2)
# date and commit on one line, the machine and its load on the next: one line is wider than a panel
parts = run.split("; ")
run_lines = "; ".join(parts[:2]) + "\\n" + "; ".join(parts[2:])
rows_n = (len(panels) + cols - 1) // cols
width, height = 720 * cols, 480 * rows_n + 40
script = [f"set terminal pngcairo size {width},{height} noenhanced font 'sans,10'", f"set output '{png}'",
          f"set multiplot layout {rows_n},{cols} title \"busbw (GB/s) against size, nodes={nodes}: line = median, band = slowest to fastest round\\n{run_lines}\" font 'sans,11'",
          "set logscale x 2", f"set xtics ({xtics})", f"set xrange [{sizes[0] / 1.25}:{sizes[-1] * 1.25}]", "set key top left",
          "set grid", "set xlabel 'bytes'", "set ylabel 'busbw GB/s'", "set yrange [0:*]",
          "set style fill transparent solid 0.18 noborder"]
color = {"hvd": "#1f77b4", "hvd_oop": "#9467bd", "hvd_shr": "#ff7f0e", "mpi": "#d62728", "gloo": "#2ca02c"}
name = {"hvd": "hvd", "hvd_oop": "hvd (separate output)", "hvd_shr": "hvd (shared tensors)", "mpi": "Open MPI",
        "gloo": "torch gloo"}
for op, np_ in panels:
    terms = []
    for impl, i in plots.get((op, np_), []):
        terms.append(f"'{dat}' index {i} using 1:3:4 with filledcurves lc rgb '{color[impl]}' notitle")
        terms.append(f"'{dat}' index {i} using 1:2 with linespoints lw 2 pt 7 ps 0.6 lc rgb '{color[impl]}' title '{name[impl]}'")
    k = max(len(x["bw"]) for (o, n, _), v in rows.items() if o == op and n == np_ for x in v.values())
    script += [f"set title '{op}, {np_} ranks, {k} rounds'", "plot " + ", ".join(terms)]
script.append("unset multiplot")
try:
    subprocess.run(["gnuplot"], input="\n".join(script).encode(), check=True)
    print(f"\n# plot: {png} (data: {dat})")
except (OSError, subprocess.CalledProcessError) as e:
    print(f"# no plot: {e}")
PY
peers_report
