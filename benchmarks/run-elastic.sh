#!/bin/sh
# run-elastic.sh [SIZES] [REPEATS] — elastic recovery time: from a rank's
# kill -9 to the first allreduce completed at the new size, for an elastic
# job of each size (default "2 4 8") on emulated hosts of 2 ranks each,
# with the default heartbeats; REPEATS runs each (default 3). Prints one
# line per run (bench=elastic_recovery np=N new_size=M recovery_ms=X).
# Needs a build tree (HVD_BUILDDIR, default ./build) and torch.
set -u
sizes=${1:-2 4 8}
repeats=${2:-3}
B=${HVD_BUILDDIR:-$(pwd)/build}
S=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
PYTHONPATH=$B/python-binding/pkg${PYTHONPATH:+:$PYTHONPATH}
OMP_NUM_THREADS=1
export PYTHONPATH OMP_NUM_THREADS
tmp=$(mktemp -d /tmp/hvd-bench-elastic-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for n in $sizes; do
        hosts=
        h=0
        left=$n
        while [ "$left" -gt 0 ]; do
                s=2
                [ "$left" -lt 2 ] && s=$left
                hosts="$hosts${hosts:+,}h$h:$s"
                left=$((left - s))
                h=$((h + 1))
        done
        i=0
        while [ "$i" -lt "$repeats" ]; do
                BENCH_STAMP=$tmp/stamp "$B/tools/hvdrun" --emulate-hosts -H "$hosts" -np "$n" --min-np 1 \
                        -x BENCH_STAMP "$PYTHON" "$S/benchmarks/elastic_recovery.py" 2>"$tmp/err" |
                        grep -o 'bench=elastic_recovery.*' || { echo "bench=elastic_recovery np=$n failed:"; tail -n 5 "$tmp/err"; }
                i=$((i + 1))
        done
done
