#!/bin/bash
# run-step.sh — training-step benchmark: every gradient of a model allreduced
# in backward order (benchmarks/bench_step under hvdrun, fusion threshold
# swept; 0 = fusion off) beside Open MPI doing the same step per tensor
# (MPI_Iallreduce + Waitall, blocking MPI_Allreduce) and on pre-fused buffers
# (benchmarks/mpi_step), in the same run, alternating, medians of ROUNDS.
# Prints a table with ratios and draws a gnuplot PNG (the run's date, commit
# and machine in its title).
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
#     AT_STEPS=3 steps, AT_SAMPLES=12 samples of search, then AT_SETTLED=3
#     settled samples, whose median score says how fast the settled point
#     ran in that job, and whose spread is a sample's noise), started from
#     AT_START_FUSION=0 bytes and AT_START_CYCLE=10 ms (HVD_AUTOTUNE_START_*);
#     then in every round, beside the grid, a job at the point it settled on
#     ("hvd tuned"), whose speed is compared to the grid's best
#     (docs/AUTOTUNE.md). On one node the ranks fuse on the fast path and
#     rank 0 measures the steps for the autotuner.
#   HOROVOD=1 (with NETNS=1): Horovod 0.28.1 beside (scripts/horovod.sh, or
#     HOROVOD_DIR; Debian's torch in PYTHON), under its Gloo controller on the
#     same link: benchmarks/horovod_step.py, the same step, on the same grid
#     (HOROVOD_FUSION_THRESHOLD x HOROVOD_CYCLE_TIME) in every round; with
#     AUTOTUNE=1 also, per model, a job Horovod's own autotuner tunes
#     (HOROVOD_AUTOTUNE=1 from its own first seed point, 4 MiB at 5 ms: it cannot start
#     elsewhere without fixing the knobs; AT_WARMUP, AT_SAMPLES; a Horovod sample is
#     the median of 5 runs of HSTEPS steps, default AT_STEPS/5 rounded up, so
#     both tuners spend about AT_STEPS steps a point), then its best row
#     ("horovod tuned") in every round. Missing, it is said loudly, at the
#     head and the end.
#   In every round a model's jobs run in one order, the next round in the
#   reverse order; besides the medians the table gives the per-round ratio
#   of a tuned point to the grid's best point in that same round (its median
#   over the rounds), which the load's drift from round to round cancels out of.
set -u
build=${1:-$(pwd)}
build=$(cd "$build" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
NPS=${NPS:-"2 4"} ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-10} WARMUP=${WARMUP:-3}
MODELS=${MODELS:-"resnet50 resnet101 inception_v3 vgg16"} FUSIONS=${FUSIONS:-"0 4 16 64"}
CYCLES=${CYCLES:-1} MPI=${MPI:-1} AUTOTUNE=${AUTOTUNE:-0} AT_WARMUP=${AT_WARMUP:-1} AT_STEPS=${AT_STEPS:-3} AT_SAMPLES=${AT_SAMPLES:-12}
AT_SETTLED=${AT_SETTLED:-3}
NETNS=${NETNS:-0} RATE=${RATE:-1gbit} PER_NODE=${PER_NODE:-1} DELAY_US=${DELAY_US:-} BURST=${BURST:-1mb}
PY=${PYTHON:-/usr/bin/python3} HOROVOD=${HOROVOD:-0} HSTEPS=${HSTEPS:-$(((AT_STEPS + 4) / 5))}
if [ -z "${DATA:-}" ]; then
        for d in "$src/../shared/data" /work/shared/data; do [ -f "$d/resnet50.tsv" ] && DATA=$d && break; done
fi
[ -f "${DATA:-}/resnet50.tsv" ] || { echo "run-step: set DATA to the directory of resnet50.tsv etc." >&2; exit 2; }
PNG=${PNG:-step-$([ "$NETNS" = 1 ] && echo netns || echo node).png}
# the peer: missing, it is named here and again at the end
# shellcheck source=benchmarks/peers.sh
. "$src/benchmarks/peers.sh"
peers_check "$build" mpi_step
if [ "$HOROVOD" = 1 ] && [ -z "${RAW:-}" ]; then
        why=
        if [ "$NETNS" != 1 ]; then
                why="HOROVOD=1 runs with NETNS=1 only"
        else
                [ -n "${HOROVOD_DIR:-}" ] || HOROVOD_DIR=$("$src/scripts/horovod.sh") || HOROVOD_DIR=
                if [ -z "$HOROVOD_DIR" ] || ! PYTHONPATH=$HOROVOD_DIR "$PY" -c 'import horovod.torch' 2>/dev/null; then
                        why="Horovod 0.28.1 is not available to $PY (scripts/horovod.sh says why; or set HOROVOD_DIR)"
                fi
        fi
        if [ -n "$why" ]; then
                peers_missing+=("horovod: $why")
                printf '!!!!!!!!!! PEER MISSING (its columns stay empty) horovod: %s\n' "$why"
                HOROVOD=0
        fi
fi
# what ran, for the output and the plot's title: the date, commit and
# machine (with RAW, the earlier run's "# run:" line where it has one)
if [ -n "${RAW:-}" ]; then
        run=$(sed -n 's/^# run: \(.*\); load average .*/\1/p' "$RAW" | head -1)
else
        run="$(date -u '+%Y-%m-%d %H:%M UTC'); commit $(run_commit "$src"); $(run_machine)"
        echo "# run: $run; load average $(cut -d' ' -f1-3 /proc/loadavg)"
fi
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
                rm -rf "/etc/netns/$na" "/etc/netns/$nb"
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
        if [ "$HOROVOD" = 1 ]; then
                # the hosts' names resolve to their link addresses (ip netns exec
                # mounts /etc/netns/NS/hosts over /etc/hosts): Horovod binds
                # some of its Gloo contexts to its host name's address
                for ns in "$na" "$nb"; do
                        mkdir -p "/etc/netns/$ns" &&
                                printf '127.0.0.1 localhost\n%s a\n%s b\n' "${net}1" "${net}2" >"/etc/netns/$ns/hosts" || exit 1
                done
        fi
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

# one Horovod job of 2*PER_NODE ranks across the namespaces under its Gloo
# controller, as horovodrun --gloo runs one (its rendezvous server in
# namespace a, serving while its input is open), with JOB_ENV; arguments
# for benchmarks/horovod_step.py; rank 0's output on stdout
netns_horovod() {
        local world=$((2 * PER_NODE)) rdv port st=0 wp=() r
        rm -f "$work/rdv.in" && mkfifo "$work/rdv.in" || return 1
        ip netns exec "$na" env PYTHONPATH="$HOROVOD_DIR" "$PY" "$src/benchmarks/horovod_rendezvous.py" \
                "a:$PER_NODE,b:$PER_NODE" "$world" <"$work/rdv.in" >"$work/rdv.out" 2>&1 &
        rdv=$!
        exec 8>"$work/rdv.in"
        for _ in $(seq 200); do grep -q '^port=' "$work/rdv.out" && break; sleep 0.05; done
        port=$(sed -n 's/^port=//p' "$work/rdv.out")
        if [ -z "$port" ]; then
                echo "run-step: Horovod's rendezvous server did not start: $(tail -n 2 "$work/rdv.out")" >&2
                exec 8>&-
                wait "$rdv"
                return 1
        fi
        for ((r = 0; r < world; r++)); do
                local h=a ns=$na dev=hsa$tag
                [ "$r" -ge "$PER_NODE" ] && h=b ns=$nb dev=hsb$tag
                # in a UTS namespace of its own named after the host, whose name
                # resolves to its address; the server's line for the rank is words
                # shellcheck disable=SC2016,SC2046 # expanded by that sh; words
                ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$h" \
                        env PYTHONPATH="$HOROVOD_DIR" HOROVOD_GLOO_RENDEZVOUS_ADDR="${NET}1" \
                        HOROVOD_GLOO_RENDEZVOUS_PORT="$port" HOROVOD_CONTROLLER=gloo HOROVOD_CPU_OPERATIONS=gloo \
                        HOROVOD_GLOO_IFACE="$dev" OMP_NUM_THREADS=1 $(sed -n "/HOROVOD_RANK=$r /p" "$work/rdv.out") \
                        "${JOB_ENV[@]}" timeout -k 5 900 "$PY" "$src/benchmarks/horovod_step.py" "$@" \
                        >"$work/hrank$r.out" 2>&1 &
                wp+=($!)
        done
        for p in "${wp[@]}"; do wait "$p" || st=1; done
        exec 8>&-
        wait "$rdv"
        grep '^bench=' "$work/hrank0.out"
        [ $st -eq 0 ] || { echo "run-step: Horovod job failed:" >&2; tail -n 3 "$work"/hrank*.out >&2; }
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
declare -A tuned htuned
if [ "$AUTOTUNE" = 1 ] && [ -z "${RAW:-}" ]; then
        # samples: the warm-up, the search, the confirmation's 3 and up to
        # 2 switches; then AT_SETTLED settled ones
        at_steps=$(((AT_WARMUP + AT_SAMPLES + 5) * (AT_STEPS + 1) + AT_SETTLED * AT_STEPS + 4))
        for np in $NPS; do
                for model in $MODELS; do
                        echo "# load average before the autotuned $model np=$np: $(cut -d' ' -f1-3 /proc/loadavg)"
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
                        # the settled point, the samples before it, and the median
                        # score of the settled samples (the autotuned job's own
                        # steps once settled)
                        # and the switches it settled with (tcp_send_thread,
                        # small_ring_chunks, large_shm_chunks: 0 or 1 each)
                        t=$(awk -F, '$9 == "settled" { if (!n++) { p = sprintf("%d %s %d", $6 * 1048576 + 0.5, $5, $8 - 1); sw = ($14 + 0) " " ($15 + 0) " " ($16 + 0) } v[n] = $7 }
                                END { for (i = 2; i <= n; i++) for (k = i; k > 1 && v[k - 1] > v[k]; k--) { x = v[k]; v[k] = v[k - 1]; v[k - 1] = x }
                                        if (n) printf "%s %g %s", p, n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2, sw }' "$csv")
                        tuned[$model:$np]=$t
                        [ -n "$t" ] || echo "run-step: $model np=$np: the autotuner did not settle" >&2
                        # shellcheck disable=SC2086 # seven words
                        [ -n "$t" ] && printf 'bench=autotune impl=hvd model=%s np=%s threshold=%s cycle_ms=%s samples=%s settled_score=%s send_thread=%s small_chunks=%s shm_chunks=%s\n' \
                                "$model" "$np" $t >>"$out"
                        if [ "$HOROVOD" = 1 ]; then
                                # Horovod's rows: its switches, cycle_time_ms, tensor_fusion_threshold
                                # (MiB), score (bytes per microsecond); once done, it writes its
                                # best point again as the last row
                                hcsv=$work/horovod-autotune-$model.csv
                                # its switches fixed at their defaults (with one rank a host
                                # its hierarchical operations do nothing; hvd tunes no switch
                                # either): else it runs its whole search again for each
                                JOB_ENV=(HOROVOD_HIERARCHICAL_ALLREDUCE=0 HOROVOD_HIERARCHICAL_ALLGATHER=0 HOROVOD_CACHE_CAPACITY=1024
                                        HOROVOD_AUTOTUNE=1 HOROVOD_AUTOTUNE_LOG="$hcsv" HOROVOD_AUTOTUNE_WARMUP_SAMPLES="$AT_WARMUP"
                                        HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE="$HSTEPS" HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES="$AT_SAMPLES")
                                netns_horovod --model "$DATA/$model.tsv" --warmup 1 --mode autotune \
                                        --steps $(((AT_WARMUP + AT_SAMPLES + 6) * (5 * HSTEPS + 1) + 10)) >>"$out"
                                JOB_ENV=()
                                sed "s/^/# horovod autotune $model np=$np: /" "$hcsv"
                                # the best row (the first of the highest score), the rows up to it, all rows
                                ht=$(awk -F, 'NR > 1 && (!p || $NF + 0 > best) { best = $NF + 0; p = sprintf("%d %s %d", $(NF - 1) * 1048576 + 0.5, $(NF - 2), NR - 1) }
                                        END { if (p) printf "%s %d", p, NR - 1 }' "$hcsv" 2>/dev/null)
                                htuned[$model]=$ht
                                if [ -z "$ht" ]; then
                                        peers_missing+=("horovod: its autotuner logged no sample for $model")
                                else
                                        # shellcheck disable=SC2086 # four words
                                        printf 'bench=autotune impl=horovod model=%s np=%s threshold=%s cycle_ms=%s samples=%s rows=%s\n' \
                                                "$model" "$np" $ht >>"$out"
                                fi
                        fi
                done
        done
        JOB_ENV=()
fi
# one point of a round: IMPL (hvd, horovod) MODEL NP BYTES CYCLE_MS MODE
# (fusion: the grid; tuned: an autotuner's point) SEND_THREAD SMALL_CHUNKS
# SHM_CHUNKS (hvd's switches, 0 or 1: the settings in force unless 1); its line into
# $out with the round's number
point() {
        local impl=$1 model=$2 np=$3 bytes=$4 c=$5 mode=$6 tsv=$DATA/$2.tsv sw=()
        [ "${7:-0}" = 1 ] && sw+=(HVD_TCP_SEND_THREAD=1)
        [ "${8:-0}" = 1 ] && sw+=(HVD_RING_CHUNK_BYTES=2097152)
        [ "${9:-0}" = 1 ] && sw+=(HVD_SHM_CHUNK_BYTES=2097152)
        local xs=() v
        for v in "${sw[@]}"; do xs+=(-x "$v"); done
        if [ "$impl" = horovod ]; then
                JOB_ENV=(HOROVOD_FUSION_THRESHOLD="$bytes" HOROVOD_CYCLE_TIME="$c")
                netns_horovod --model "$tsv" --steps "$STEPS" --warmup "$WARMUP" --mode "$mode"
        elif [ "$NETNS" = 1 ]; then
                JOB_ENV=(HVD_CYCLE_TIME="$c" "${sw[@]}")
                netns_job "$bytes" "$build/benchmarks/bench_step" --model "$tsv" --steps "$STEPS" --warmup "$WARMUP"
        else
                "$build/tools/hvdrun" -np "$np" --no-prefix -x HVD_FUSION_THRESHOLD="$bytes" -x HVD_CYCLE_TIME="$c" \
                        "${xs[@]}" \
                        "$build/benchmarks/bench_step" --model "$tsv" --steps "$STEPS" --warmup "$WARMUP" ||
                        echo "run-step: hvd $model np=$np fusion=$bytes cycle=$c failed" >&2
        fi | sed "s/ mode=fusion / mode=$mode /; s/\$/ round=$round/" >>"$out"
        JOB_ENV=()
}

for np in $NPS; do
        for ((round = 0; round < ROUNDS; round++)); do
                echo "# load average before round $round: $(cut -d' ' -f1-3 /proc/loadavg)"
                for model in $MODELS; do
                        tsv=$DATA/$model.tsv
                        todo=()
                        for f in $FUSIONS; do
                                for c in $CYCLES; do todo+=("hvd $((f << 20)) $c fusion"); done
                        done
                        if [ -n "${tuned[$model:$np]:-}" ]; then
                                read -r tb tc _ _ tst tsc tsm <<<"${tuned[$model:$np]}"
                                todo+=("hvd $tb $tc tuned $tst $tsc ${tsm:-0}")
                        fi
                        if [ "$HOROVOD" = 1 ]; then
                                for f in $FUSIONS; do
                                        for c in $CYCLES; do todo+=("horovod $((f << 20)) $c fusion"); done
                                done
                                if [ -n "${htuned[$model]:-}" ]; then
                                        read -r tb tc _ <<<"${htuned[$model]}"
                                        todo+=("horovod $tb $tc tuned")
                                fi
                        fi
                        # every other round backwards: no point always runs first
                        # after a model's switch, or always last
                        n=${#todo[@]}
                        for ((k = 0; k < n; k++)); do
                                i=$k
                                [ $((round % 2)) = 1 ] && i=$((n - 1 - k))
                                read -r impl b c mode st sc sm <<<"${todo[$i]}"
                                point "$impl" "$model" "$np" "$b" "$c" "$mode" "${st:-0}" "${sc:-0}" "${sm:-0}"
                        done
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
[ -n "${RAW:-}" ] || echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# raw lines"
sed 's/^/#   /' "$out"
"$PY" - "$out" "$NETNS" "$RATE" "$PNG" "$DELAY_US" "$BURST" "$run" <<'PY'
import re, statistics, subprocess, sys
path, netns, rate, png = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4]
runs, tunes, cycles = {}, {}, set()
lines = [dict(re.findall(r"(\w+)=(\S+)", line)) for line in open(path)]
for m in lines:
    if m.get("bench") == "step" and m["impl"] in ("hvd", "horovod") and m["mode"] == "fusion":
        cycles.add(m.get("cycle_ms", "default"))
for m in lines:
    if m.get("bench") == "autotune":
        # lines of earlier runs name no np and no impl
        tunes[(m.get("impl", "hvd"), m["model"], int(m["np"]) if "np" in m else None)] = m
    if m.get("bench") != "step":
        continue
    impl = m["impl"]
    if impl in ("hvd", "horovod") and m["mode"] in ("autotune", "tuned"):
        key = f"{impl} {m['mode']}"
    elif impl in ("hvd", "horovod"):
        f = int(m["fusion_bytes"]) >> 20
        key = f"{impl} off" if f == 0 else f"{impl} {f}M"
        if len(cycles) > 1:
            key += f" {m.get('cycle_ms', 'default')}ms"
    elif m["mode"] == "fused":
        key = f"mpi fused {int(m['fusion_bytes']) >> 20}M"
    else:
        key = f"mpi {m['mode']}"
    r = runs.setdefault((m["model"], int(m["np"])), {})
    r.setdefault(key, []).append((m.get("round"), float(m["ms_median"])))
    r.setdefault("_bytes", [(None, float(m["bytes"]))])
delay = sys.argv[5] if len(sys.argv) > 5 else ""
where = f"2 namespaced nodes, tbf {rate} each way (burst {sys.argv[6]})" if netns else "one node"
if netns and delay:
    where += f", {delay} us one-way latency (delay_proxy)"
print(f"# ms per step (medians of the rounds' medians), {where}; speed ratios are time(peer)/time(hvd)")


def paired(r, a, b):
    """Speed of a relative to b: the median over the rounds that ran both of
    time(b) / time(a) in that round, and the ratios; None without a round."""
    ra = {k: v for k, v in r.get(a, []) if k is not None}
    rb = {k: v for k, v in r.get(b, []) if k is not None}
    q = sorted(rb[k] / ra[k] for k in ra if k in rb)
    return (statistics.median(q), q) if q else (None, q)


def verdict(r, med, name, tuned_key, best_key, t):
    sw = [n for n, k in (("send thread", "send_thread"), ("small chunks", "small_chunks"),
                         ("2 MiB shared-memory chunks", "shm_chunks")) if t.get(k) == "1"]
    sw = f" with {', '.join(sw)}" if sw else ""
    line = (f"  {name} autotuned: {int(t['threshold']) / 2**20:.2f} MiB, {t['cycle_ms']} ms{sw}"
            f" (best after {t['samples']} samples{', of ' + t['rows'] + ' rows' if 'rows' in t else ''})"
            f": {med[tuned_key]:.1f} ms, {med[best_key] / med[tuned_key]:.0%} of the grid's best ({best_key}) speed"
            f" by medians")
    p, q = paired(r, tuned_key, best_key)
    if p is not None:
        line += f", {p:.0%} by the median per-round ratio ({', '.join(format(x, '.0%') for x in q)})"
    if "settled_score" in t and "_mb" in r:
        line += f"; its own settled samples' median {r['_mb'] * 2**20 / float(t['settled_score']) * 1e3:.1f} ms"
    print(line)


plot = []
for (model, np_), r in sorted(runs.items()):
    mb = r.pop("_bytes")[0][1] / 2**20
    r["_mb"] = mb
    med = {k: statistics.median(x for _, x in v) for k, v in r.items() if k != "_mb"}
    print(f"\n{model} np={np_} ({mb:.1f} MiB of gradients)")
    for k in sorted(med, key=lambda k: (k.split()[0], med[k])):
        print(f"  {k:<18} {med[k]:10.1f} ms  {mb / 1024 / (med[k] / 1e3):7.3f} GiB/s"
              f"  [{', '.join(format(x, '.0f') for _, x in r[k])}]")
    best = {}
    for impl in ("hvd", "horovod"):
        grid = {k: v for k, v in med.items() if k.startswith(impl + " ") and k.split()[1] not in ("tuned", "autotune")}
        best[impl] = min(grid, key=grid.get) if grid else None
        t = tunes.get((impl, model, np_), tunes.get((impl, model, None)))
        if best[impl] and f"{impl} tuned" in med and t:
            verdict(r, med, impl, f"{impl} tuned", best[impl], t)
    hvd = {k: v for k, v in med.items() if k.startswith("hvd") and k not in ("hvd tuned", "hvd autotune")}
    mpi = {k: v for k, v in med.items() if k.startswith("mpi")}
    hb = best["hvd"]
    off = min((v for k, v in hvd.items() if k.startswith("hvd off")), default=None)
    on = min((v for k, v in hvd.items() if not k.startswith("hvd off")), default=None)
    if off and on:
        print(f"  fusion on (best) vs off (best): {off / on:.2f}x")
    if "hvd autotune" in med:
        print(f"  the whole autotuned hvd job's median step (search and all): {med['hvd autotune']:.1f} ms")
    hob = best["horovod"]
    for a, b in ((hb, hob), ("hvd tuned", "horovod tuned"), ("hvd tuned", hob)):
        if a in med and b in med:
            p, q = paired(r, a, b)
            print(f"  hvd vs Horovod, {a} vs {b}: {med[b] / med[a]:.2f}x by medians"
                  + (f", {p:.2f}x by the median per-round ratio" if p is not None else ""))
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
    if len(sys.argv) > 7 and sys.argv[7]:
        title += "\\n" + sys.argv[7].replace("\\", "").replace('"', "'")
    script = f"""set terminal pngcairo size 1000,500 noenhanced
set output '{png}'
set title "{title}"
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
