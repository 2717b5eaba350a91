#!/bin/sh
# run-mixed.sh — hvd.torch and hvd.tensorflow in the same processes: a
# 2-rank job (tests/lib/launch.sh, private daemon) of tests/tf/mixed_torch_tf.py,
# TensorFlow's Python with torch's site-packages after its own. TensorFlow:
# $HVD_TF_PYTHON, else the environment of scripts/venv-tf.sh; torch:
# $HVD_TORCH_PYTHON, else scripts/venv-torch.sh's (HVD_TORCH_VENV names an
# existing one). Exits 77 (skip), saying why, without the op library or
# either environment, or when the two cannot be imported together.
: "${HVD_BUILDDIR:?HVD_BUILDDIR must point at the build tree}"
: "${HVD_SRCDIR:?HVD_SRCDIR must point at the source tree}"
pkg=$HVD_BUILDDIR/python-binding/pkg
skip() {
        echo "SKIP: $*"
        exit 77
}

[ -f "$pkg/hvd/tensorflow/hvd_tf_ops.so" ] ||
        skip "hvd was configured without TensorFlow, so its op library is not built"
tf_python=${HVD_TF_PYTHON:-}
if [ -z "$tf_python" ] || ! "$tf_python" -c 'import tensorflow' >/dev/null 2>&1; then
        venv=$("$HVD_SRCDIR/scripts/venv-tf.sh") || skip "no Python with TensorFlow: scripts/venv-tf.sh could not make one"
        tf_python=$venv/bin/python
fi
torch_python=${HVD_TORCH_PYTHON:-}
if [ -z "$torch_python" ] || ! "$torch_python" -c 'import torch' >/dev/null 2>&1; then
        torch_python=$("$HVD_SRCDIR/scripts/venv-torch.sh") ||
                skip "no Python with torch: scripts/venv-torch.sh could not make one"
fi
# torch's site-packages: the folder that holds the torch package
torch_site=$("$torch_python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))') ||
        skip "$torch_python cannot import torch"
probe="import sys; sys.path.append('$torch_site'); import tensorflow, torch"
TF_CPP_MIN_LOG_LEVEL=3 "$tf_python" -c "$probe" >/dev/null 2>&1 ||
        skip "$tf_python cannot import TensorFlow and torch (from $torch_site) together"

PYTHONPATH=$pkg${PYTHONPATH:+:$PYTHONPATH}
HVD_TORCH_SITE=$torch_site
OMP_NUM_THREADS=1
TF_NUM_INTRAOP_THREADS=1
TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH HVD_TORCH_SITE OMP_NUM_THREADS TF_NUM_INTRAOP_THREADS TF_CPP_MIN_LOG_LEVEL PYTHONDONTWRITEBYTECODE
exec "$HVD_SRCDIR/tests/lib/launch.sh" -t "${HVD_PYTEST_TIMEOUT:-300}" -n 2 -- \
        "$tf_python" "$HVD_SRCDIR/tests/tf/mixed_torch_tf.py"
