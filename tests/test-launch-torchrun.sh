#!/bin/sh
# test-launch-torchrun.sh — torchrun --standalone --nproc-per-node=2 of a
# small hvd.torch training script (tests/python/launch_torch.py), without
# hvdrun: both ranks take their place from torchrun's variables, join one
# job through a private daemon of local rank 0, and end with bit-identical
# weights. torchrun comes from HVD_TORCH_VENV (a venv with PyPI torch, as
# scripts/venv-torch.sh makes; Debian's torch 1.13 torchrun breaks on
# Python 3.11), else from beside $PYTHON (the Python suite's second run),
# else from PATH; skipped (77) without one.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
if [ -n "${HVD_TORCH_VENV:-}" ]; then
        torchrun=$HVD_TORCH_VENV/bin/torchrun
elif [ -n "${PYTHON:-}" ] && [ -x "$(dirname "$PYTHON")/torchrun" ]; then
        torchrun=$(dirname "$PYTHON")/torchrun
else
        torchrun=$(command -v torchrun) ||
                skip "no torchrun: set HVD_TORCH_VENV to a venv with PyPI torch (scripts/venv-torch.sh makes one)"
fi
[ -x "$torchrun" ] || skip "$torchrun is missing"
py=$(dirname "$torchrun")/python
"$py" -c 'import torch, numpy' >/dev/null 2>&1 || skip "$py cannot import torch and numpy"
pkg=$HVD_BUILDDIR/python-binding/pkg
[ -f "$pkg/hvd/__init__.py" ] || fail "$pkg/hvd is missing: run make first"
tmp=$(mktemp -d /tmp/hvd-test-launch-torchrun-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/home"
HOME=$tmp/home TMPDIR=$tmp HVD_RUNTIME_DIR=$tmp/no-daemon PYTHONPATH=$pkg OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
export HOME TMPDIR HVD_RUNTIME_DIR PYTHONPATH OMP_NUM_THREADS PYTHONDONTWRITEBYTECODE
timeout 180 "$torchrun" --standalone --nproc-per-node=2 "$HVD_SRCDIR/tests/python/launch_torch.py" >"$tmp/out" 2>&1 ||
        fail "torchrun: exit status $?" "$(cat "$tmp/out")"
line=$(grep "^launch_torch: " "$tmp/out")
echo "$line" | grep -q "^launch_torch: identical weights on all 2 ranks (placed by torchrun): " ||
        fail "torchrun: not one job of 2 with identical weights" "$(cat "$tmp/out")"
[ -z "$(ls -A "$tmp/hvd-$(id -u)")" ] || fail "job directories left behind" "$(ls -la "$tmp/hvd-$(id -u)")"
echo "ok: torchrun --standalone --nproc-per-node=2: $line"
