#!/bin/sh
# run-pytest.sh N [PYTEST ARGS...] — runs the Python binding's pytest suite
# in every rank of an N-process job (tests/lib/launch.sh, private daemon).
# Every rank runs the same session and must pass. Needs HVD_BUILDDIR and
# HVD_SRCDIR (set by `make check`); exits 77 (skip) without torch/pytest.
# HVD_PYTEST_HOSTS=a:2,b:2: the job spans emulated hosts instead, a daemon
# each (tests/lib/launch-multi.sh; N is then the hosts' sum).
n=${1:?usage: run-pytest.sh N [pytest args]}
shift
: "${HVD_BUILDDIR:?HVD_BUILDDIR must point at the build tree}"
: "${HVD_SRCDIR:?HVD_SRCDIR must point at the source tree}"
PYTHON=${PYTHON:-/usr/bin/python3}
pkg=$HVD_BUILDDIR/python-binding/pkg

# A build with --enable-sanitizers: python3 itself is not built with ASan,
# so the runtime (and libstdc++, whose __cxa_throw ASan wraps) is preloaded
# for it and everything the job starts; the interpreter's own never-freed
# allocations are not reported.
if [ -n "${HVD_ASAN_RUNTIME:-}" ]; then
        LD_PRELOAD=$HVD_ASAN_RUNTIME${LD_PRELOAD:+:$LD_PRELOAD}
        ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}
        export LD_PRELOAD ASAN_OPTIONS
fi
if ! "$PYTHON" -c 'import torch, numpy, pytest' >/dev/null 2>&1; then
        echo "SKIP: $PYTHON cannot import torch, numpy and pytest"
        exit 77
fi
if [ ! -f "$pkg/hvd/__init__.py" ]; then
        echo "ERROR: $pkg/hvd is missing: run make first" >&2
        exit 99
fi

PYTHONPATH=$pkg${PYTHONPATH:+:$PYTHONPATH}
# Small tensors only: one thread per rank keeps N ranks from fighting over cores.
OMP_NUM_THREADS=1
PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH OMP_NUM_THREADS PYTHONDONTWRITEBYTECODE
if [ -n "${HVD_PYTEST_HOSTS:-}" ]; then
        exec "$HVD_SRCDIR/tests/lib/launch-multi.sh" -t "${HVD_PYTEST_TIMEOUT:-300}" -H "$HVD_PYTEST_HOSTS" -- \
                "$PYTHON" -m pytest -q -p no:cacheprovider -o console_output_style=classic \
                --rootdir "$HVD_SRCDIR/tests/python" "$@" "$HVD_SRCDIR/tests/python"
fi
exec "$HVD_SRCDIR/tests/lib/launch.sh" -t "${HVD_PYTEST_TIMEOUT:-300}" -n "$n" -- \
        "$PYTHON" -m pytest -q -p no:cacheprovider -o console_output_style=classic \
        --rootdir "$HVD_SRCDIR/tests/python" "$@" "$HVD_SRCDIR/tests/python"
