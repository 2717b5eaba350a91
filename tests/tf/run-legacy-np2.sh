#!/bin/sh
# run-legacy-np2.sh [PYTEST ARGS...] — the Keras tests of hvd.tensorflow
# (tests/tf/test_keras*.py) with Keras 2: tf.keras is the package tf_keras
# under TF_USE_LEGACY_KERAS=1, in a 2-process job (run-pytest.sh). Exits 77
# (skip), saying why, when the Python of the TensorFlow tests has no
# tf_keras (scripts/venv-tf.sh installs it) or run-pytest.sh skips.
: "${HVD_SRCDIR:?HVD_SRCDIR must point at the source tree}"
python=${HVD_TF_PYTHON:-}
if [ -z "$python" ] || ! "$python" -c 'import tensorflow' >/dev/null 2>&1; then
        venv=$("$HVD_SRCDIR/scripts/venv-tf.sh" --path)
        python=$venv/bin/python
fi
if ! "$python" -c 'import tf_keras' >/dev/null 2>&1; then
        echo "SKIP: $python has no tf_keras (Keras 2): pip install tf_keras, or remake scripts/venv-tf.sh's environment"
        exit 77
fi
TF_USE_LEGACY_KERAS=1
export TF_USE_LEGACY_KERAS
exec "$(dirname "$0")/run-pytest.sh" 2 -k keras "$@"
