#!/bin/bash
# run-tf.sh — hvd.tensorflow beside its peers in the same run, alternating
# round by round: hvd.torch (the same libhvd through torch, in the torch
# venv) and tf.distribute.MultiWorkerMirroredStrategy (2 local workers,
# RING over gRPC). Per round: tf_collective.py under hvdrun with
# TensorFlow, then with torch, then tf_mwms.py. Measures the allreduce
# sweep (float32 sum, tf.function and eager against hvd.torch), the
# ResNet-50 gradient step (all 161 tensors in flight together; both also
# with TensorFlow's BFC allocator on the CPU, impl=...+bfc), the per-op
# cost of the op library at 4 KiB (and libhvd's own blocking latency from
# benchmarks/bench_collective when `make bench` built it), TensorFlow's
# own cost of the same calls of an op that does nothing (tf.identity, in
# a tf.function and eagerly: the floor of hvd's op), and MWMS at
# 4 KiB, 1 MiB, 64 MiB and on the step. Prints the raw lines, then tables
# of medians over the rounds and ratios; a peer that is missing or failed
# is said so loudly.
#
#   benchmarks/run-tf.sh [BUILDDIR]
# Environment: NP=2 ROUNDS=3 MIN=4096 MAX=268435456 STEPS=5 MWMS_SIZES=4096,1048576,67108864
#   TF_PYTHON (default: scripts/venv-tf.sh's), TORCH_PYTHON (default: scripts/venv-torch.sh's)
#   DATA=<dir of resnet50.tsv>  MWMS=0 skips the MWMS peer, TORCH=0 the torch one
set -u
build=${1:-$(pwd)}
build=$(cd "$build" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
NP=${NP:-2} ROUNDS=${ROUNDS:-3} MIN=${MIN:-4096} MAX=${MAX:-268435456} STEPS=${STEPS:-5}
MWMS_SIZES=${MWMS_SIZES:-4096,1048576,67108864} MWMS=${MWMS:-1} TORCH=${TORCH:-1}
if [ -z "${DATA:-}" ]; then
        for d in "$src/../shared/data" /work/shared/data; do [ -f "$d/resnet50.tsv" ] && DATA=$d && break; done
fi
[ -f "${DATA:-}/resnet50.tsv" ] || { echo "run-tf: set DATA to the directory of resnet50.tsv" >&2; exit 2; }
tsv=$DATA/resnet50.tsv
[ -f "$build/python-binding/pkg/hvd/tensorflow/hvd_tf_ops.so" ] ||
        { echo "run-tf: $build has no op library (configure --with-tensorflow=PYTHON)" >&2; exit 2; }
TF_PYTHON=${TF_PYTHON:-$("$src/scripts/venv-tf.sh")/bin/python}
loud() { printf '\n!!!!!!!!!! run-tf: %s !!!!!!!!!!\n\n' "$*" | tee -a "$out" >&2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
if [ "$TORCH" = 1 ] && [ -z "${TORCH_PYTHON:-}" ]; then
        TORCH_PYTHON=$("$src/scripts/venv-torch.sh") || TORCH_PYTHON=
fi
if [ "$TORCH" != 1 ] || [ -z "${TORCH_PYTHON:-}" ] || ! "$TORCH_PYTHON" -c 'import torch' 2>/dev/null; then
        loud "PEER MISSING: no Python with torch (TORCH_PYTHON); hvd.torch is not measured"
        TORCH=0
fi
export PYTHONPATH=$build/python-binding/pkg TF_CPP_MIN_LOG_LEVEL=3 OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
echo "# run-tf: $(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$src" rev-parse --short HEAD 2>/dev/null), load $(cut -d' ' -f1-3 /proc/loadavg)" |
        tee -a "$out"
hvdrun() { timeout -k 5 900 "$build/tools/hvdrun" --embedded -np "$NP" --no-prefix "$@"; }
noise='absl::InitializeLog|cuda_platform|cudart_stub|cuInit|computation_placer|oneDNN'
for ((round = 0; round < ROUNDS; round++)); do
        echo "# round $round, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out"
        hvdrun "$TF_PYTHON" "$src/benchmarks/tf_collective.py" --frontend tf --min-bytes "$MIN" --max-bytes "$MAX" \
                --model-tsv "$tsv" --steps "$STEPS" 2>&1 | grep -Ev "$noise" | tee -a "$out" ||
                loud "hvd.tensorflow job failed (round $round)"
        # the same with TensorFlow's BFC allocator on the CPU, which keeps
        # freed buffers: outputs then need no fresh pages every step
        TF_CPU_ALLOCATOR_USE_BFC=true hvdrun "$TF_PYTHON" "$src/benchmarks/tf_collective.py" --frontend tf \
                --min-bytes "$MIN" --max-bytes "$MAX" --model-tsv "$tsv" --steps "$STEPS" --op-calls 0 --tag bfc 2>&1 |
                grep -Ev "$noise" | tee -a "$out" || loud "hvd.tensorflow job (BFC) failed (round $round)"
        if [ "$TORCH" = 1 ]; then
                hvdrun "$TORCH_PYTHON" "$src/benchmarks/tf_collective.py" --frontend torch --min-bytes "$MIN" \
                        --max-bytes "$MAX" --model-tsv "$tsv" --steps "$STEPS" 2>&1 | tee -a "$out" ||
                        loud "PEER FAILED: the hvd.torch job (round $round)"
        fi
        if [ "$MWMS" = 1 ]; then
                (cd "$src/benchmarks" && timeout -k 5 900 "$TF_PYTHON" tf_mwms.py --np "$NP" --model-tsv "$tsv" \
                        --steps "$STEPS" --sizes "$MWMS_SIZES") 2>&1 | grep -Ev "$noise" | tee -a "$out"
                [ "${PIPESTATUS[0]}" = 0 ] || loud "PEER FAILED: MultiWorkerMirroredStrategy (round $round)"
        fi
        if [ -x "$build/benchmarks/bench_collective" ]; then
                hvdrun "$build/benchmarks/bench_collective" --min-bytes 4096 --max-bytes 4096 --iters 2000 2>&1 |
                        grep '^bench=' | tee -a "$out"
        fi
done
[ "$MWMS" = 1 ] || loud "PEER MISSING: MultiWorkerMirroredStrategy skipped (MWMS=0)"
[ -x "$build/benchmarks/bench_collective" ] ||
        echo "# no $build/benchmarks/bench_collective (make bench): libhvd's own 4 KiB latency not measured" | tee -a "$out"
"$TF_PYTHON" - "$out" <<'PY'
import re, statistics, sys
rows = {}
loud = []
for line in open(sys.argv[1]):
    if line.startswith("!!!"):
        loud.append(line.strip())
    m = dict(re.findall(r"(\w+)=(\S+)", line))
    b = m.get("bench")
    if b == "allreduce":
        impl = m.get("impl", "hvd.c")
        rows.setdefault(("allreduce", impl, int(m["bytes"])), []).append(float(m["time_us"]))
    elif b == "step":
        rows.setdefault(("step", m["impl"], m["model"]), []).append(float(m["ms"]))
    elif b == "floor":
        rows.setdefault(("floor", m["impl"], int(m["bytes"])), []).append(float(m["time_us"]))
    elif b == "op_cost":
        for k in ("tf_loop_us", "numpy_us", "tf_minus_numpy_us"):
            rows.setdefault(("op_cost", k, 4096), []).append(float(m[k]))
med = {k: statistics.median(v) for k, v in rows.items()}
rng = {k: (min(v), max(v)) for k, v in rows.items()}
def get(*k):
    return med.get(k)
def ratio(peer, ours):  # speed of ours over peer: time(peer) / time(ours)
    return f"{peer / ours:.2f}" if peer and ours else "-"
print("\n# medians over the rounds; ratios are speed ratios, time(peer)/time(hvd.tensorflow): above 1 = TF faster")
sizes = sorted({k[2] for k in med if k[0] == "allreduce" and k[1].startswith("hvd.tf")})
print("\n## allreduce, float32 sum, out of place: time us (busbw GB/s)")
print(f"{'bytes':>10} {'tf.function':>20} {'tf.eager':>20} {'tf.eager+bfc':>20} {'torch':>20} {'fn/torch':>8}"
      f" {'eager/torch':>11} {'bfc/torch':>9} {'mwms':>20} {'tf/mwms':>7} {'fn floor':>9} {'eager floor':>11}")
def floor_cell(impl, n):  # TensorFlow's own call of an op that does nothing, us
    t = get("floor", impl, n)
    return f"{t:.1f}" if t else "-"
for n in sizes:
    def cell(impl):
        t = get("allreduce", impl, n)
        return f"{t:10.1f} ({n / t / 1e3:6.3f})" if t else f"{'-':>20}"
    fn, eg, bf, to, mw = (get("allreduce", i, n) for i in ("hvd.tf.function", "hvd.tf.eager", "hvd.tf.eager+bfc",
                                                           "hvd.torch", "mwms"))
    best = min((x for x in (fn, eg) if x), default=None)
    print(f"{n:>10} {cell('hvd.tf.function')} {cell('hvd.tf.eager')} {cell('hvd.tf.eager+bfc')} {cell('hvd.torch')}"
          f" {ratio(to, fn):>8} {ratio(to, eg):>11} {ratio(to, bf):>9} {cell('mwms')}"
          f" {ratio(mw, best) if mw else '-':>7} {floor_cell('tf.function', n):>9} {floor_cell('tf.eager', n):>11}")
print("\n## ResNet-50 gradient step (161 tensors, 97.5 MiB): ms, median [range over rounds]")
steps = {k[1]: v for k, v in med.items() if k[0] == "step"}
for impl in sorted(steps):
    lo, hi = rng[("step", impl, "resnet50")]
    print(f"  {impl:<20} {steps[impl]:9.2f}  [{lo:.2f}-{hi:.2f}]")
tfbest = min((v for k, v in steps.items() if k.startswith("hvd.tf") and "+" not in k), default=None)
for ours, peer in (("hvd.tf.ops", "hvd.torch.async"), ("hvd.tf.ops", "hvd.torch.async_oop"),
                   ("hvd.tf.ops", "hvd.torch.async_kept"),
                   ("hvd.tf.grouped", "hvd.torch.grouped"), ("hvd.tf.ops.made", "hvd.torch.async.made"),
                   ("hvd.tf.grouped.made", "hvd.torch.grouped.made"), ("hvd.tf.ops+bfc", "hvd.torch.async"),
                   ("hvd.tf.grouped+bfc", "hvd.torch.grouped")):
    if ours in steps and peer in steps:
        print(f"  {ours} vs {peer}: {ratio(steps[peer], steps[ours])}")
for peer in ("mwms.packed", "mwms.pack25M", "mwms.per_tensor"):
    if peer in steps and tfbest:
        print(f"  hvd.tf best (default allocator) vs {peer}: {ratio(steps[peer], tfbest)}")
if get("op_cost", "tf_loop_us", 4096):
    print("\n## per-op cost at 4 KiB (2 ranks)")
    print(f"  allreduces chained in one tf.function: {get('op_cost', 'tf_loop_us', 4096):.1f} us; "
          f"numpy path: {get('op_cost', 'numpy_us', 4096):.1f} us; median difference "
          f"{get('op_cost', 'tf_minus_numpy_us', 4096):.1f} us")
    eg, to, c = get("allreduce", "hvd.tf.eager", 4096), get("allreduce", "hvd.torch", 4096), get("allreduce", "hvd", 4096)
    if eg and to:
        print(f"  eager hvd.tensorflow {eg:.1f} us - hvd.torch {to:.1f} us = {eg - to:.1f} us")
    fe, ff, fn = get("floor", "tf.eager", 4096), get("floor", "tf.function", 4096), get("allreduce", "hvd.tf.function", 4096)
    if fe and eg:
        print(f"  TensorFlow's own eager op (tf.identity): {fe:.1f} us; eager hvd.tensorflow - that = {eg - fe:.1f} us")
    if ff and fn:
        print(f"  TensorFlow's own tf.function of one op: {ff:.1f} us; hvd's tf.function of one allreduce: {fn:.1f} us")
    if c:
        print(f"  libhvd's own blocking allreduce (bench_collective): {c:.1f} us; tf loop - libhvd = "
              f"{get('op_cost', 'tf_loop_us', 4096) - c:.1f} us")
for l in loud:
    print(l)
PY
