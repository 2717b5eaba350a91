#!/bin/sh
# test-launch-torchrun.sh — torchrun --standalone --nproc-per-node=2 of a
# small hvd.torch training script (tests/python/launch_torch.py), without
# hvdrun: both ranks take their place from torchrun's variables, join one
# job through a private daemon of local rank 0, and end with bit-identical
# weights. Then two emulated nodes: two torchrun agents with a c10d
# rendezvous on loopback, each node with its own HVD_HOSTNAME and one
# TMPDIR for both (as on nodes that share it), where each node's local
# rank 0 still runs a private daemon of its own; the first node's is the
# root at MASTER_ADDR:HVD_ROOT_PORT, and the job is one of 2 ranks on 2
# nodes. torchrun comes from HVD_TORCH_VENV (a venv with PyPI torch, as
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
# the interpreter torchrun runs on: its #! line's
py=$(sed -n '1s/^#! *\([^ ]*\).*/\1/p' "$torchrun")
[ -n "$py" ] || py=$(dirname "$torchrun")/python
"$py" -c 'import torch, numpy' >/dev/null 2>&1 || skip "$py cannot import torch and numpy"
version=$("$py" -c 'import torch; print(torch.__version__)')
case $version in
0.* | 1.*) skip "$torchrun is torch $version's, whose torchrun breaks on Python 3.11: set HVD_TORCH_VENV" ;;
esac
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
echo "$line" | grep -q "^launch_torch: identical weights on all 2 ranks on 1 nodes (placed by torchrun): " ||
        fail "torchrun: not one job of 2 with identical weights" "$(cat "$tmp/out")"
[ -z "$(ls -A "$tmp/hvd-$(id -u)")" ] || fail "job directories left behind" "$(ls -la "$tmp/hvd-$(id -u)")"
echo "ok: torchrun --standalone --nproc-per-node=2: $line"

rdzv=$(free_port 1)
HVD_ROOT_PORT=$(free_port 2)
export HVD_ROOT_PORT
for k in 0 1; do
        HVD_HOSTNAME=node$k timeout 180 "$torchrun" --nnodes=2 --nproc-per-node=1 \
                --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:"$rdzv" --rdzv-id=hvd-test-$$ \
                "$HVD_SRCDIR/tests/python/launch_torch.py" >"$tmp/node$k.out" 2>&1 &
        eval "agent$k=\$!"
done
# shellcheck disable=SC2154 # set by the eval above
{ wait "$agent0" && wait "$agent1"; } ||
        fail "torchrun on two emulated nodes: exit status $?" "$(cat "$tmp/node0.out" "$tmp/node1.out")"
line=$(cat "$tmp/node0.out" "$tmp/node1.out" | grep "^launch_torch: ")
echo "$line" | grep -q "^launch_torch: identical weights on all 2 ranks on 2 nodes (placed by torchrun): " ||
        fail "torchrun on two nodes: not one job of 2 ranks on 2 nodes" "$(cat "$tmp/node0.out" "$tmp/node1.out")"
[ -z "$(ls -A "$tmp/hvd-$(id -u)")" ] || fail "job directories left behind" "$(ls -la "$tmp/hvd-$(id -u)")"
echo "ok: torchrun --nnodes=2 on two emulated nodes, one TMPDIR (root at port $HVD_ROOT_PORT): $line"
