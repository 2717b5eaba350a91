#!/bin/sh
# run-pytest.sh N [PYTEST ARGS...] — runs hvd.tensorflow's pytest suite
# (tests/tf) in every rank of an N-process job (tests/lib/launch.sh, private
# daemon), with a Python that imports TensorFlow: $HVD_TF_PYTHON (the one
# configure built the op library against), else the environment
# scripts/venv-tf.sh makes or reuses. Every rank must pass. Exits 77 (skip),
# saying why, when hvd was built without the op library or no such Python
# can be had. Needs HVD_BUILDDIR and HVD_SRCDIR (set by `make check`).
# HVD_PYTEST_HOSTS=a:1,b:2: the job spans emulated hosts instead, a daemon
# each (tests/lib/launch-multi.sh; N is then the hosts' sum).
n=${1:?usage: run-pytest.sh N [pytest args]}
shift
: "${HVD_BUILDDIR:?HVD_BUILDDIR must point at the build tree}"
: "${HVD_SRCDIR:?HVD_SRCDIR must point at the source tree}"
pkg=$HVD_BUILDDIR/python-binding/pkg

if [ ! -f "$pkg/hvd/tensorflow/hvd_tf_ops.so" ]; then
        echo "SKIP: hvd was configured without TensorFlow, so its op library is not built:" \
                "make an environment with scripts/venv-tf.sh and configure --with-tensorflow=ITS/bin/python"
        exit 77
fi
python=${HVD_TF_PYTHON:-}
if [ -z "$python" ] || ! "$python" -c 'import tensorflow, numpy, pytest' >/dev/null 2>&1; then
        if ! venv=$("$HVD_SRCDIR/scripts/venv-tf.sh"); then
                echo "SKIP: no Python with TensorFlow, numpy and pytest: scripts/venv-tf.sh could not make one"
                exit 77
        fi
        python=$venv/bin/python
fi

if [ -n "${HVD_ASAN_RUNTIME:-}" ]; then
        LD_PRELOAD=$HVD_ASAN_RUNTIME${LD_PRELOAD:+:$LD_PRELOAD}
        ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}
        export LD_PRELOAD ASAN_OPTIONS
fi
PYTHONPATH=$pkg${PYTHONPATH:+:$PYTHONPATH}
# N ranks share the machine's cores: few threads each; TensorFlow's log quiet
OMP_NUM_THREADS=1
TF_NUM_INTRAOP_THREADS=1
TF_NUM_INTEROP_THREADS=${TF_NUM_INTEROP_THREADS:-4}
TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH OMP_NUM_THREADS TF_NUM_INTRAOP_THREADS TF_NUM_INTEROP_THREADS TF_CPP_MIN_LOG_LEVEL \
        PYTHONDONTWRITEBYTECODE
if [ -n "${HVD_PYTEST_HOSTS:-}" ]; then
        exec "$HVD_SRCDIR/tests/lib/launch-multi.sh" -t "${HVD_PYTEST_TIMEOUT:-600}" -H "$HVD_PYTEST_HOSTS" -- \
                "$python" -m pytest -q -p no:cacheprovider -o console_output_style=classic \
                --rootdir "$HVD_SRCDIR/tests/tf" "$@" "$HVD_SRCDIR/tests/tf"
fi
exec "$HVD_SRCDIR/tests/lib/launch.sh" -t "${HVD_PYTEST_TIMEOUT:-600}" -n "$n" -- \
        "$python" -m pytest -q -p no:cacheprovider -o console_output_style=classic \
        --rootdir "$HVD_SRCDIR/tests/tf" "$@" "$HVD_SRCDIR/tests/tf"
