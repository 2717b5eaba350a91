#!/bin/bash
# run-shm-chunk.sh — does the shared-memory chunk size matter? bench_shm
# (the one-node CPU data plane alone) with each HVD_SHM_CHUNK_BYTES in
# CHUNKS, the chunk sizes alternating within each of ROUNDS rounds (the
# order rotated every round), medians over the rounds per size, each as a
# speed ratio to the 1 MiB chunk (the default but on Intel CPUs,
# client/cpu_backend.c). Allreduces in place with rank i on CPU i, as
# bench_collective under hvdrun runs them; ARGS="" for bench_shm's own
# default (out of place, unbound), which the runs before 2026-12-07 took.
#
#   benchmarks/run-shm-chunk.sh [BUILDDIR]      (after `make bench`)
# Environment: NPS="2 4", ROUNDS=5, MIN=1048576, MAX=67108864,
# CHUNKS="131072 262144 524288 1048576 2097152 4194304 8388608",
# ARGS="--in-place --pin" (bench_shm's options),
# OUT=FILE (the raw lines; default a temporary file, removed).
set -eu
build=${1:-build}
bench=$build/benchmarks/bench_shm
[ -x "$bench" ] || { echo "run-shm-chunk: $bench is missing: make bench" >&2; exit 2; }
NPS=${NPS:-2 4} ROUNDS=${ROUNDS:-5} MIN=${MIN:-1048576} MAX=${MAX:-67108864}
CHUNKS=${CHUNKS:-131072 262144 524288 1048576 2097152 4194304 8388608}
ARGS=${ARGS---in-place --pin}
read -r -a args <<<"$ARGS"
out=${OUT:-$(mktemp /tmp/hvd-shm-chunk-XXXXXX)}
[ -n "${OUT:-}" ] || trap 'rm -f "$out"' EXIT
: >"$out"
read -r -a chunks <<<"$CHUNKS"
echo "# run-shm-chunk: $(date -u +%FT%TZ), $(nproc --all) cpus, load average $(cut -d' ' -f1-3 /proc/loadavg), bench_shm ${ARGS:-(no options)}" | tee -a "$out"
for round in $(seq "$ROUNDS"); do
        for np in $NPS; do
                n=${#chunks[@]}
                for k in $(seq 0 $((n - 1))); do
                        c=${chunks[$(((k + round) % n))]}
                        HVD_SHM_CHUNK_BYTES=$c "$bench" -p "$np" -b "$MIN" -e "$MAX" ${args[@]+"${args[@]}"} |
                                sed "s/^bench=shm_allreduce /bench=shm_allreduce chunk=$c round=$round /" >>"$out"
                done
        done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out"
/usr/bin/python3 - "$out" <<'PY'
import collections, statistics, sys
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if not line.startswith("bench="):
        continue
    f = dict(kv.split("=", 1) for kv in line.split())
    t[(int(f["np"]), int(f["bytes"]), int(f["chunk"]))].append(float(f["time_us"]))
nps = sorted({k[0] for k in t})
sizes = sorted({k[1] for k in t})
chunks = sorted({k[2] for k in t})
ref = 1048576 if 1048576 in chunks else chunks[0]
print("median us per allreduce over the rounds; in brackets the speed ratio to the %d KiB chunk" % (ref // 1024))
for np in nps:
    print("np=%d" % np)
    print("  %10s" % "bytes" + "".join("%18s" % ("%d KiB" % (c // 1024)) for c in chunks))
    for b in sizes:
        base = statistics.median(t[(np, b, ref)])
        row = "".join("%18s" % ("%.0f (%.2f)" % (statistics.median(t[(np, b, c)]), base / statistics.median(t[(np, b, c)])))
                      for c in chunks)
        print("  %10d" % b + row)
    # one figure per chunk: the geometric mean of its ratios over the sizes
    gm = []
    for c in chunks:
        r = [statistics.median(t[(np, b, ref)]) / statistics.median(t[(np, b, c)]) for b in sizes]
        p = 1.0
        for v in r:
            p *= v
        gm.append(p ** (1 / len(r)))
    print("  %10s" % "geomean" + "".join("%18s" % ("%.2f" % g) for g in gm))
PY
