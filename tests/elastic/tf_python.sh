# shellcheck shell=bash
# tests/elastic/tf_python.sh — sourced by the elastic TensorFlow tests
# before tests/elastic/lib.sh: sets PYTHON to the Python configure used
# for TensorFlow (HVD_TF_PYTHON), else scripts/venv-tf.sh's, that can
# import TF_IMPORTS (default "tensorflow, numpy"); exits 77 (skip) without
# the op library or such a Python. Needs B and S.
if [ ! -f "$B/python-binding/pkg/hvd/tensorflow/hvd_tf_ops.so" ]; then
        echo "SKIP: hvd was configured without TensorFlow, so its op library is not built (configure --with-tensorflow=PYTHON)"
        exit 77
fi
PYTHON=${HVD_TF_PYTHON:-}
if [ -z "$PYTHON" ] || ! "$PYTHON" -c "import ${TF_IMPORTS:-tensorflow, numpy}" >/dev/null 2>&1; then
        venv=$("$S/scripts/venv-tf.sh") || {
                echo "SKIP: no Python with TensorFlow: scripts/venv-tf.sh could not make one"
                exit 77
        }
        PYTHON=$venv/bin/python
fi
