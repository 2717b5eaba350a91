#!/bin/bash
# run-step.sh — training-step benchmark: every gradient of a model allreduced
# in backward order (benchmarks/bench_step under hvdrun, fusion threshold
# swept; 0 = fusion off) beside Open MPI doing the same step per tensor
# (MPI_Iallreduce + Waitall, blocking MPI_Allreduce) and on pre-fused buffers
# (benchmarks/mpi_step), in the same run, alternating, medians of ROUNDS.
# Prints a table with ratios and draws a gnuplot PNG.
#
#   benchmarks/run-step.sh [BUILDDIR]          (after `make bench`)
# Environment:
#   NPS="2 4"  MODELS="resnet50 resnet101 inception_v3 vgg16"  FUSIONS="0 4 16 64" (MiB)
#   ROUNDS=3  STEPS=10  WARMUP=3  DATA=<dir of the model tsv files>  PNG=step.png
#   RAW=FILE: run nothing; tabulate and plot the raw lines of an earlier run's output
#   NETNS=1: two emulated nodes as network namespaces joined by a veth pair
#     with a tc tbf limit of RATE (default 1gbit) each way (bucket BURST,
#     default 1mb: a link idle for a while then sends that much at veth
#     speed, which hides gaps on the wire, such as per-tensor latency, at
#     1 Gbit/s; 128kb, two GSO packets, is closer to a real link), one daemon per
#     namespace, PER_NODE ranks on each (default 1). Open MPI runs there too
#     (--mca btl tcp,self over the same limited link): mpirun starts its
#     daemons in the namespaces through an rsh agent that is `ip netns exec`,
#     and reaches them over a second, unlimited veth pair per namespace
#     (routed=direct: the two namespaces reach each other only over the
#     limited link).
#     DELAY_US=N (with NETNS=1): N microseconds of one-way latency on the
#     limited link, for every TCP connection that crosses it (hvd's data
#     plane, the daemons' link, Open MPI's): in each namespace an nftables
#     rule redirects the connections it opens over the link to
#     tests/delay_proxy there, which forwards both directions N us late
#     (this kernel has no netem). Unset: no proxy at all; 0: the proxy without
#     delay (what the proxy itself costs).
#     Needs root.
#   CYCLES="1" (ms): the grid's cycle times (HVD_CYCLE_TIME), beside FUSIONS.
#   MPI=0: no Open MPI runs.
#   AUTOTUNE=1: first, per model (and per NPS on one node), a job the root
#     daemon autotunes (HVD_AUTOTUNE=1, AT_WARMUP=1 warm-up samples of
#     AT_STEPS=3 steps, AT_SAMPLES=12 samples of search), started from
#     AT_START_FUSION=0 bytes and AT_START_CYCLE=10 ms (HVD_AUTOTUNE_START_*);
#     then in every round, beside the grid, a job at the point it settled on
#     ("hvd tuned"), whose speed is compared to the grid's best
#     (docs/AUTOTUNE.md). On one node the ranks fuse on the fast path and
#     rank 0 measures the steps for the autotuner.
set -u
build=${1:-$(pwd)}
build=$(cd "$build" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
NPS=${NPS:-"2 4"} ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-10} WARMUP=${WARMUP:-3}
MODELS=${MODELS:-"resnet50 resnet101 inception_v3 vgg16"} FUSIONS=${FUSIONS:-"0 4 16 64"}
CYCLES=${CYCLES:-1} MPI=${MPI:-1} AUTOTUNE=${AUTOTUNE:-0} AT_WARMUP=${AT_WARMUP:-1} AT_STEPS=${AT_STEPS:-3} AT_SAMPLES=${AT_SAMPLES:-12}
NETNS=${NETNS:-0} RATE=${RATE:-1gbit} PER_NODE=${PER_NODE:-1} DELAY_US=${DELAY_US:-} BURST=${BURST:-1mb}
PY=${PYTHON:-/usr/bin/python3}
if [ -z "${DATA:-}" ]; then
        for d in "$src/../shared/data" /work/shared/data; do [ -f "$d/resnet50.tsv" ] && DATA=$d && break; done
fi
[ -f "${DATA:-}/resnet50.tsv" ] || { echo "run-step: set DATA to the directory of resnet50.tsv etc." >&2; exit 2; }
PNG=${PNG:-step-$([ "$NETNS" = 1 ] && echo netns || echo node).png}
# the peer: missing, it is named here and again at the end
# shellcheck source=benchmarks/peers.sh
. "$src/benchmarks/peers.sh"
peers_check "$build" mpi_step
out=$(mktemp)
work=$(mktemp -d /tmp/hvd-step-XXXXXX)
pids=()
tag=$$ na=hvds$$a nb=hvds$$b
cleanup() {
        for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
        for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
        if [ "$NETNS" = 1 ] && [ -z "${RAW:-}" ]; then
                ip netns del "$na" 2>/dev/null
                ip netns del "$nb" 2>/dev/null
                ip link del "hca$tag" 2>/dev/null
                ip link del "hcb$tag" 2>/dev/null
        fi
        rm -rf "$out" "$work"
}
trap cleanup EXIT
export HVD_BUILDDIR=$build

# two namespaces a, b on 10.214.X.1/.2, tbf RATE each way, one daemon each
netns_setup() {
        local net=10.214.$((tag % 250)). va=hsa$tag vb=hsb$tag
        . "$src/tests/lib/netpair.sh"
        netpair "$na" "$nb" "$va" "$vb" "${net}1" "${net}2" >&2 || { echo "run-step: root is needed" >&2; exit 1; }
        tc -n "$na" qdisc add dev "$va" root tbf rate "$RATE" burst "$BURST" latency 100ms || exit 1
        tc -n "$nb" qdisc add dev "$vb" root tbf rate "$RATE" burst "$BURST" latency 100ms || exit 1
        if [ -n "$DELAY_US" ]; then
                delay_setup "$na" "$va" a && delay_setup "$nb" "$vb" b || exit 1
        fi
        # the control links for mpirun (root namespace <-> a, b), no limit
        local ctl=10.215.$((tag % 250)).
        ip link add "hca$tag" type veth peer name "hca2$tag" && ip link set "hca2$tag" netns "$na" || exit 1
        ip link add "hcb$tag" type veth peer name "hcb2$tag" && ip link set "hcb2$tag" netns "$nb" || exit 1
        ip addr add "${ctl}1/30" dev "hca$tag" && ip link set "hca$tag" up || exit 1
        ip -n "$na" addr add "${ctl}2/30" dev "hca2$tag" && ip -n "$na" link set "hca2$tag" up || exit 1
        ip addr add "${ctl}5/30" dev "hcb$tag" && ip link set "hcb$tag" up || exit 1
        ip -n "$nb" addr add "${ctl}6/30" dev "hcb2$tag" && ip -n "$nb" link set "hcb2$tag" up || exit 1
        # shellcheck disable=SC2016 # a script written out, expanded when it runs
        printf '#!/bin/sh\nns=$1; shift\nexec ip netns exec "$ns" /bin/sh -c "$*"\n' >"$work/nsrsh"
        chmod +x "$work/nsrsh"
        CTL=${ctl}0/24
        netpair_daemons "$build/daemon/hvd-coordinatord" "$work" "$na" "$nb" "${net}1"
        for p in $NP_PIDS; do pids+=("$p"); done
        for _ in $(seq 200); do
                [ -S "$work/a/worker.sock" ] && [ -S "$work/b/worker.sock" ] && break
                sleep 0.05
        done
        NET=$net
}

# DELAY_US: TCP connections opened in namespace NS over DEV go through
# tests/delay_proxy (port 7999 there), which delays both directions; its
# own connections carry the mark 0x6876
delay_setup() {
        local ns=$1 dev=$2 h=$3
        [ -x "$build/tests/delay_proxy" ] || { echo "run-step: no $build/tests/delay_proxy (make bench builds it)" >&2; return 1; }
        netpair_delay "$build/tests/delay_proxy" "$ns" "$dev" "$DELAY_US" "$work/proxy-$h.log" >"$work/np.msg" ||
                { echo "run-step: $(cat "$work/np.msg")" >&2; return 1; }
        pids+=("$NP_PID")
}

# one hvd job of 2*PER_NODE ranks across the namespaces, with JOB_ENV (the
# fusion threshold "auto": autotuned); rank 0's output on stdout
JOB_ENV=()
netns_job() {
        local fusion=$1 fv; shift
        fv=HVD_FUSION_THRESHOLD=$fusion
        [ "$fusion" = auto ] && fv=HVD_AUTOTUNE=1
        local job=step-$tag-$RANDOM secret=0123456789abcdef world=$((2 * PER_NODE)) rank=0 wp=()
        for h in a b; do
                local ns=$na ip=${NET}1 cross=0
                [ $h = b ] && ns=$nb ip=${NET}2 cross=1
                for ((l = 0; l < PER_NODE; l++)); do
                        ip netns exec "$ns" env HVD_JOB_ID="$job" HVD_JOB_SECRET=$secret HVD_RANK=$rank \
                                HVD_SIZE=$world HVD_LOCAL_RANK=$l HVD_LOCAL_SIZE="$PER_NODE" HVD_CROSS_RANK=$cross \
                                HVD_CROSS_SIZE=2 HVD_HOSTS="a:$PER_NODE,b:$PER_NODE" HVD_HOSTNAME=$h \
                                HVD_ROOT_PEER="tcp://${NET}1:7100" HVD_RUNTIME_DIR="$work/$h" HVD_DATA_ADDR="$ip" \
                                "$fv" "${JOB_ENV[@]}" timeout -k 5 900 "$@" >"$work/rank$rank.out" 2>&1 &
                        wp+=($!)
                        rank=$((rank + 1))
                done
        done
        local st=0
        for p in "${wp[@]}"; do wait "$p" || st=1; done
        cat "$work/rank0.out"
        [ $st -eq 0 ] || { echo "run-step: job failed:" >&2; tail -n 3 "$work"/rank*.out "$work"/?.log >&2; }
}

# Open MPI's mpi_step on PER_NODE ranks per namespace (TSV NP)
netns_mpi() {
        local tsv=$1 np=$2 hosts
        hosts=$(for ((l = 0; l < PER_NODE; l++)); do printf '%s,' "$na"; done
                for ((l = 0; l < PER_NODE; l++)); do printf '%s,' "$nb"; done)
        local try
        for try in 1 2; do
                timeout -k 5 900 mpirun --allow-run-as-root --oversubscribe -H "${hosts%,}" \
                        --mca plm_rsh_agent "$work/nsrsh" --mca routed direct --mca oob_tcp_if_include "$CTL" \
                        --mca btl tcp,self --mca btl_tcp_if_include "${NET}0/24" \
                        -np "$np" "$build/benchmarks/mpi_step" --model "$tsv" --steps "$STEPS" --warmup "$WARMUP" \
                        --fusion-mb "$(for f in $FUSIONS; do [ "$f" = 0 ] || echo "$f"; done | paste -sd,)" \
                        >>"$out" 2>"$work/mpi.err" && return 0
                echo "run-step: mpi $(basename "$tsv") np=$np failed (try $try)" >&2
                grep -v '^ *$' "$work/mpi.err" | head -n 12 >&2
                sleep 2
        done
}

if [ -n "${RAW:-}" ]; then
        sed -n 's/^#   \(bench=\(step\|autotune\) .*\)/\1/p; /^bench=\(step\|autotune\) /p' "$RAW" >"$out"
        NPS=
elif [ "$NETNS" = 1 ]; then
        netns_setup
        NPS=$((2 * PER_NODE))
fi
# AUTOTUNE: per model and NP, an autotuned job (long enough for every
# sample, a step lost at each change, and three settled samples); the
# point it settled on (bytes, ms, samples before) in tuned[MODEL:NP]
declare -A tuned
if [ "$AUTOTUNE" = 1 ] && [ -z "${RAW:-}" ]; then
        at_steps=$(((AT_WARMUP + AT_SAMPLES) * (AT_STEPS + 1) + 3 * AT_STEPS + 4))
        for np in $NPS; do
                for model in $MODELS; do
                        csv=$work/autotune-$model-$np.csv
                        at_env=(HVD_AUTOTUNE_LOG="$csv" HVD_AUTOTUNE_WARMUP_SAMPLES="$AT_WARMUP"
                                HVD_AUTOTUNE_STEPS_PER_SAMPLE="$AT_STEPS" HVD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES="$AT_SAMPLES"
                                HVD_AUTOTUNE_START_FUSION_THRESHOLD="${AT_START_FUSION:-0}"
                                HVD_AUTOTUNE_START_CYCLE_TIME="${AT_START_CYCLE:-10}")
                        if [ "$NETNS" = 1 ]; then
                                JOB_ENV=("${at_env[@]}")
                                netns_job auto "$build/benchmarks/bench_step" --model "$DATA/$model.tsv" --warmup 1 \
                                        --steps "$at_steps" | sed 's/ mode=fusion / mode=autotune /' >>"$out"
                        else
                                xs=(-x HVD_AUTOTUNE=1)
                                for e in "${at_env[@]}"; do xs+=(-x "$e"); done
                                "$build/tools/hvdrun" -np "$np" --no-prefix "${xs[@]}" "$build/benchmarks/bench_step" \
                                        --model "$DATA/$model.tsv" --warmup 1 --steps "$at_steps" |
                                        sed 's/ mode=fusion / mode=autotune /' >>"$out" ||
                                        echo "run-step: hvd autotuned $model np=$np failed" >&2
                        fi
                        sed "s/^/# autotune $model np=$np: /" "$csv"
                        t=$(awk -F, '$9 == "settled" { printf "%d %s %d", $6 * 1048576 + 0.5, $5, $8 - 1; exit }' "$csv")
                        tuned[$model:$np]=$t
                        [ -n "$t" ] || echo "run-step: $model np=$np: the autotuner did not settle" >&2
                        # shellcheck disable=SC2086 # three words
                        [ -n "$t" ] && printf 'bench=autotune model=%s np=%s threshold=%s cycle_ms=%s samples=%s\n' \
                                "$model" "$np" $t >>"$out"
                done
        done
        JOB_ENV=()
fi
for np in $NPS; do
        for ((round = 0; round < ROUNDS; round++)); do
                for model in $MODELS; do
                        tsv=$DATA/$model.tsv
                        for f in $FUSIONS; do
                                bytes=$((f << 20))
                                for c in $CYCLES; do
                                        if [ "$NETNS" = 1 ]; then
                                                JOB_ENV=(HVD_CYCLE_TIME="$c")
                                                netns_job "$bytes" "$build/benchmarks/bench_step" --model "$tsv" \
                                                        --steps "$STEPS" --warmup "$WARMUP" >>"$out"
                                        else
                                                "$build/tools/hvdrun" -np "$np" --no-prefix -x HVD_FUSION_THRESHOLD=$bytes \
                                                        -x HVD_CYCLE_TIME="$c" "$build/benchmarks/bench_step" --model "$tsv" \
                                                        --steps "$STEPS" --warmup "$WARMUP" >>"$out" ||
                                                        echo "run-step: hvd $model np=$np fusion=$f cycle=$c failed" >&2
                                        fi
                                done
                        done
                        if [ -n "${tuned[$model:$np]:-}" ]; then
                                read -r tb tc _ <<<"${tuned[$model:$np]}"
                                if [ "$NETNS" = 1 ]; then
                                        JOB_ENV=(HVD_CYCLE_TIME="$tc")
                                        netns_job "$tb" "$build/benchmarks/bench_step" --model "$tsv" --steps "$STEPS" \
                                                --warmup "$WARMUP" | sed 's/ mode=fusion / mode=tuned /' >>"$out"
                                        JOB_ENV=()
                                else
                                        "$build/tools/hvdrun" -np "$np" --no-prefix -x HVD_FUSION_THRESHOLD="$tb" \
                                                -x HVD_CYCLE_TIME="$tc" "$build/benchmarks/bench_step" --model "$tsv" \
                                                --steps "$STEPS" --warmup "$WARMUP" | sed 's/ mode=fusion / mode=tuned /' >>"$out" ||
                                                echo "run-step: hvd tuned $model np=$np failed" >&2
                                fi
                        fi
                        if [ "$NETNS" != 1 ] && [ "$MPI" = 1 ] && [ -x "$build/benchmarks/mpi_step" ]; then
                                mpirun --allow-run-as-root --oversubscribe -np "$np" "$build/benchmarks/mpi_step" \
                                        --model "$tsv" --steps "$STEPS" --warmup "$WARMUP" \
                                        --fusion-mb "$(for f in $FUSIONS; do [ "$f" = 0 ] || echo "$f"; done | paste -sd,)" \
                                        >>"$out" 2>/dev/null || echo "run-step: mpi $model np=$np failed" >&2
                        fi
                done
                # in the namespaces, Open MPI after every hvd job of the round:
                # the first hvd job after an mpirun there lost its daemons'
                # peer link (10 s of silence) in every run so far (with the
                # data plane before the pipelined ring too)
                if [ "$NETNS" = 1 ] && [ "$MPI" = 1 ] && [ -x "$build/benchmarks/mpi_step" ]; then
                        for model in $MODELS; do
                                netns_mpi "$DATA/$model.tsv" "$np"
                        done
                fi
        done
done
echo "# raw lines"
sed 's/^/#   /' "$out"
"$PY" - "$out" "$NETNS" "$RATE" "$PNG" "$DELAY_US" "$BURST" <<'PY'
import re, statistics, subprocess, sys
path, netns, rate, png = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4]
runs, tunes, cycles = {}, {}, set()
lines = [dict(re.findall(r"(\w+)=(\S+)", line)) for line in open(path)]
for m in lines:
    if m.get("bench") == "step" and m["impl"] == "hvd" and m["mode"] == "fusion":
        cycles.add(m.get("cycle_ms", "default"))
for m in lines:
    if m.get("bench") == "autotune":
        # lines of earlier runs name no np
        tunes[(m["model"], int(m["np"]) if "np" in m else None)] = m
    if m.get("bench") != "step":
        continue
    if m["impl"] == "hvd" and m["mode"] in ("autotune", "tuned"):
        key = "hvd " + m["mode"]
    elif m["impl"] == "hvd":
        f = int(m["fusion_bytes"]) >> 20
        key = "hvd off" if f == 0 else f"hvd {f}M"
        if len(cycles) > 1:
            key += f" {m.get('cycle_ms', 'default')}ms"
    elif m["mode"] == "fused":
        key = f"mpi fused {int(m['fusion_bytes']) >> 20}M"
    else:
        key = f"mpi {m['mode']}"
    runs.setdefault((m["model"], int(m["np"])), {}).setdefault(key, []).append(float(m["ms_median"]))
    runs[(m["model"], int(m["np"]))].setdefault("_bytes", [float(m["bytes"])])
delay = sys.argv[5] if len(sys.argv) > 5 else ""
where = f"2 namespaced nodes, tbf {rate} each way (burst {sys.argv[6]})" if netns else "one node"
if netns and delay:
    where += f", {delay} us one-way latency (delay_proxy)"
print(f"# ms per step (medians of the rounds' medians), {where}; speed ratios are time(peer)/time(hvd)")
plot = []
for (model, np_), r in sorted(runs.items()):
    mb = r.pop("_bytes")[0] / 2**20
    med = {k: statistics.median(v) for k, v in r.items()}
    tuned = {k: med.pop(k) for k in ("hvd tuned", "hvd autotune") if k in med}
    hvd = {k: v for k, v in med.items() if k.startswith("hvd")}
    mpi = {k: v for k, v in med.items() if k.startswith("mpi")}
    print(f"\n{model} np={np_} ({mb:.1f} MiB of gradients)")
    for k in sorted(med, key=lambda k: (k[:3], med[k])):
        print(f"  {k:<18} {med[k]:10.1f} ms  {mb / 1024 / (med[k] / 1e3):7.3f} GiB/s")
    hb = min(hvd, key=hvd.get) if hvd else None
    off = min((v for k, v in hvd.items() if k.startswith("hvd off")), default=None)
    on = min((v for k, v in hvd.items() if not k.startswith("hvd off")), default=None)
    if off and on:
        print(f"  fusion on (best) vs off (best): {off / on:.2f}x")
    t = tunes.get((model, np_), tunes.get((model, None)))
    if hb and "hvd tuned" in tuned and t:
        print(f"  autotuned: {int(t['threshold']) / 2**20:.2f} MiB, {t['cycle_ms']} ms, settled after {t['samples']}"
              f" samples: {tuned['hvd tuned']:.1f} ms, {hvd[hb] / tuned['hvd tuned']:.0%} of the grid's best ({hb})"
              f" speed" + (f"; the whole autotuned run's median {tuned['hvd autotune']:.1f} ms" if "hvd autotune" in tuned else ""))
    if hb and mpi:
        mbk = min(mpi, key=mpi.get)
        print(f"  hvd best ({hb}) vs mpi best ({mbk}): {mpi[mbk] / hvd[hb]:.2f}x"
              f" ({'hvd faster' if mpi[mbk] >= hvd[hb] else 'hvd slower by ' + format(hvd[hb] / mpi[mbk] - 1, '.0%')})")
    plot.append((f"{model}/np{np_}", off, on, min(mpi.values()) if mpi else None))
try:
    dat = png + ".dat"
    with open(dat, "w") as f:
        for name, off, on, mpi in plot:
            f.write(f"{name} {off or '-'} {on or '-'} {mpi or '-'}\n")
    title = f"training step, {where}: ms per step (lower is better)"
    script = f"""set terminal pngcairo size 1000,500 noenhanced
set output '{png}'
set title '{title}'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set datafile missing '-'
set ylabel 'ms / step'
set xtics rotate by -30
set yrange [0:*]
set key outside top center horizontal
plot '{dat}' using 2:xtic(1) title 'hvd fusion off', '' using 3 title 'hvd fusion on (best threshold)'""" + \
        ", '' using 4 title 'Open MPI (best mode)'" + "\n"
    subprocess.run(["gnuplot"], input=script.encode(), check=True)
    print(f"\n# plot: {png}")
except (OSError, subprocess.CalledProcessError) as e:
    print(f"# no plot: {e}")
PY
peers_report
