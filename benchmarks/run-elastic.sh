#!/bin/sh
# run-elastic.sh [SIZES] [REPEATS] — elastic jobs on emulated hosts of 2
# ranks each, default heartbeats, for each size (default "2 4 8 16"),
# REPEATS rounds (default 3), one line per run:
#   recovery: a rank's kill -9 to the first allreduce completed at the new
#     size (benchmarks/elastic_recovery.py)
#     bench=elastic_recovery np=N new_size=N-1 recovery_ms=X load1=L
#   grow: a host of 2 slots listed by the discovery script to the first
#     allreduce of its first new rank, split into its parts
#     (benchmarks/elastic_grow.py): hvd with its new workers started warm
#     (from hvdrun's standby interpreters: the host appears a random 0-1 s
#     after they are ready) and cold (--elastic-warm-start off), then Horovod's elastic
#     mode (horovodrun --gloo, the same script, hosts localhost then vm),
#     in the same round
#     bench=elastic_grow impl=hvd|horovod start=warm|cold np=N new_size=N+2 total_ms=T poll_ms=..
# Environment: BENCH="recovery grow" (what to run), PEERS="hvd horovod"
# (for grow), STARTS="warm cold" (hvd's), HVD_BUILDDIR (default ./build), PYTHON (default
# /usr/bin/python3, with torch), HOROVOD_DIR (default scripts/horovod.sh
# --path; Horovod is left out, saying why, where it is not installed).
set -u
sizes=${1:-2 4 8 16}
repeats=${2:-3}
BENCH=${BENCH:-recovery grow}
PEERS=${PEERS:-hvd horovod}
STARTS=${STARTS:-warm cold}
B=${HVD_BUILDDIR:-$(pwd)/build}
S=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
HVD_PATH=$B/python-binding/pkg${PYTHONPATH:+:$PYTHONPATH}
OMP_NUM_THREADS=1
PYTHONDONTWRITEBYTECODE=1
export OMP_NUM_THREADS PYTHONDONTWRITEBYTECODE
tmp=$(mktemp -d /tmp/hvd-bench-elastic-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
load1() { cut -d' ' -f1 /proc/loadavg; }

case " $PEERS " in
*" horovod "*)
        HOROVOD_DIR=${HOROVOD_DIR:-$("$S/scripts/horovod.sh" --path)}
        if [ ! -f "$HOROVOD_DIR/bin/horovodrun" ] ||
                ! PYTHONPATH=$HOROVOD_DIR "$PYTHON" -c 'import horovod.torch' 2>/dev/null; then
                echo "# PEER MISSING: Horovod 0.28.1 is not installed in $HOROVOD_DIR (run scripts/horovod.sh)"
                PEERS=hvd
        fi
        ;;
esac

# hosts N: emulated hosts h0:2,h1:2,... for N ranks
hosts() {
        hl='' h=0 left=$1
        while [ "$left" -gt 0 ]; do
                s=2
                [ "$left" -lt 2 ] && s=$left
                hl="$hl${hl:+,}h$h:$s"
                left=$((left - s))
                h=$((h + 1))
        done
        echo "$hl"
}

# discovery_script DIR HOSTS NEW: prints HOSTS, and NEW once DIR/appear
# exists (the first such run writes the time to DIR/listed)
discovery_script() {
        cat >"$1/discover.sh" <<EOF
#!/bin/sh
echo "$2" | tr ',' '\n'
if [ -e "$1/appear" ]; then
        echo "$3"
        [ -e "$1/listed" ] || { date +%s.%N >"$1/.listed"; mv "$1/.listed" "$1/listed"; }
fi
EOF
        chmod +x "$1/discover.sh"
}

recovery() {
        n=$1
        # the first generation waits for all N (HVD_ELASTIC_SETTLE), however
        # slowly they start; the one after the death waits for nobody
        PYTHONPATH=$HVD_PATH BENCH_STAMP=$tmp/stamp HVD_ELASTIC_SETTLE=120 timeout -k 5 300 "$B/tools/hvdrun" \
                --start-timeout 120 --emulate-hosts -H "$(hosts "$n")" -np "$n" --min-np 1 -x BENCH_STAMP \
                -x HVD_ELASTIC_SETTLE "$PYTHON" "$S/benchmarks/elastic_recovery.py" >"$tmp/out" 2>&1
        if grep -q 'bench=elastic_recovery' "$tmp/out"; then
                grep -o 'bench=elastic_recovery.*' "$tmp/out" | sed "s/\$/ load1=$(load1)/"
        else
                echo "bench=elastic_recovery np=$n failed:"
                tail -n 5 "$tmp/out"
        fi
}

# grow IMPL N [START]: one growth from N ranks, hvd's new workers started
# START (warm, cold)
grow() {
        impl=$1 n=$2 start=${3:-cold}
        d=$tmp/grow
        rm -rf "$d"
        mkdir "$d"
        if [ "$impl" = hvd ]; then
                hl=$(hosts "$n")
                discovery_script "$d" "$hl" "h$(((n + 1) / 2)):2"
                ready=
                [ "$start" = warm ] && ready=$d/ready
                warm=on
                [ "$start" = warm ] || warm=off
                # DIR/ready a random 0-1 s after hvdrun says 2 standby
                # interpreters are ready: hvdrun notices that at its discovery
                # runs, and a host that appeared right after one would always
                # wait a whole interval; a real host appears at any moment
                watcher=
                if [ -n "$ready" ]; then
                        while [ ! -e "$d/ready" ]; do
                                k=$(grep -c 'standby interpreter pid [0-9]* ready' "$d/out" 2>/dev/null)
                                if [ "${k:-0}" -ge 2 ]; then
                                        sleep "$(awk 'BEGIN { srand(); printf "%.3f", rand() }')"
                                        : >"$d/ready"
                                fi
                                sleep 0.1
                        done &
                        watcher=$!
                fi
                PYTHONPATH=$HVD_PATH BENCH_DIR=$d BENCH_NP=$n BENCH_IMPL=hvd BENCH_START=$start BENCH_READY=$ready \
                        timeout -k 5 300 "$B/tools/hvdrun" -v --elastic-warm-start "$warm" \
                        --start-timeout 120 --emulate-hosts -H "$hl" -np "$n" --min-np "$n" --max-np $((n + 2)) \
                        --host-discovery-script "$d/discover.sh" -x BENCH_DIR -x BENCH_NP -x BENCH_IMPL -x BENCH_START \
                        -x BENCH_READY "$PYTHON" "$S/benchmarks/elastic_grow.py" >"$d/out" 2>&1
                [ -z "$watcher" ] || { kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null; }
                # a worker that found no standby ready started cold: say so
                [ "$start" = cold ] || grep -q 'warm start (pid' "$d/out" ||
                        echo "# impl=hvd start=warm np=$n: no worker started warm"
        else
                discovery_script "$d" "localhost:$n" "vm:2"
                PYTHONPATH=$HOROVOD_DIR BENCH_DIR=$d BENCH_NP=$n BENCH_IMPL=horovod timeout -k 5 300 "$PYTHON" \
                        "$HOROVOD_DIR/bin/horovodrun" --gloo --network-interface lo -np "$n" --min-np "$n" --max-np $((n + 2)) \
                        --host-discovery-script "$d/discover.sh" "$PYTHON" "$S/benchmarks/elastic_grow.py" \
                        >"$d/out" 2>&1
        fi
        grep -o 'bench=elastic_grow.*' "$d/out" ||
                { echo "bench=elastic_grow impl=$impl start=$start np=$n failed:"; tail -n 5 "$d/out"; }
}

echo "# run-elastic.sh \"$sizes\" $repeats, $(date -u +%Y-%m-%dT%H:%MZ), $(getconf _NPROCESSORS_ONLN) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for n in $sizes; do
        i=0
        while [ "$i" -lt "$repeats" ]; do
                for what in $BENCH; do
                        case $what in
                        recovery) recovery "$n" ;;
                        grow)
                                for p in $PEERS; do
                                        if [ "$p" = hvd ]; then
                                                for st in $STARTS; do grow hvd "$n" "$st"; done
                                        else
                                                grow "$p" "$n"
                                        fi
                                done
                                ;;
                        *) echo "run-elastic.sh: BENCH: unknown benchmark '$what' (recovery, grow)" >&2; exit 2 ;;
                        esac
                done
                i=$((i + 1))
        done
done
echo "# done, load average $(cut -d' ' -f1-3 /proc/loadavg)"
