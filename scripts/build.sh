#!/bin/sh
# build.sh — configure and build hvd out of tree (idempotent).
#   scripts/build.sh [CONFIGURE ARGS...]        builds in ./build
#   BUILD_DIR=build-cpu scripts/build.sh --without-cuda
# With arguments it configures again; without, it configures only a new
# build directory, or one configured when the machine had other optional
# parts than now (the Open MPI benchmark peer, CUDA/NCCL, Python headers,
# TensorFlow, Check; recorded in BUILD_DIR/.hvd-env): then with the
# arguments it was configured with before (config.status --recheck).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
{ [ -x configure ] && [ -n "$(find configure -newer configure.ac)" ]; } || ./bootstrap >/dev/null
dir=${BUILD_DIR:-build}
mkdir -p "$dir"
cd "$dir"

# found: what configure would find of the optional parts, one line each.
# The Pythons: the one the build directory was configured with, the
# TensorFlow one it found or was given, and scripts/venv-tf.sh's.
found() {
        py=$(sed -n 's/^PYTHON = //p' Makefile 2>/dev/null)
        py=${py:-${PYTHON:-/usr/bin/python3}}
        echo "mpicc: $(command -v mpicc || echo none)"
        cuda=none
        [ -x /usr/local/cuda/bin/nvcc ] && cuda=nvcc
        [ -f /usr/local/cuda/include/nccl.h ] && cuda="$cuda+nccl"
        echo "cuda: $cuda"
        echo "check: $(pkg-config --modversion check 2>/dev/null || echo none)"
        # shellcheck disable=SC2016 # Python code, not shell
        has='import importlib.util as u, os, sys, sysconfig
inc = os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
print("headers" if inc else "no-headers", "tensorflow" if u.find_spec("tensorflow") else "no-tensorflow")'
        tf=$(sed -n 's/^TF_PYTHON = //p' Makefile 2>/dev/null)
        for p in "$py" ${tf:+"$tf"} "$("$top/scripts/venv-tf.sh" --path 2>/dev/null)/bin/python"; do
                if [ -x "$p" ]; then
                        echo "python $p: $("$p" -c "$has" 2>/dev/null || echo broken)"
                else
                        echo "python $p: none"
                fi
        done
}

if [ ! -f Makefile ] || [ $# -gt 0 ]; then
        "$top/configure" -q "$@"
        found >.hvd-env
elif ! found | cmp -s - .hvd-env 2>/dev/null; then
        if [ -f .hvd-env ]; then
                echo "build.sh: $dir was configured when this machine had other optional parts:"
                found | diff .hvd-env - | sed -n 's/^</  then:/p; s/^>/  now: /p'
        else
                echo "build.sh: $dir has no record of what configure found (.hvd-env)"
        fi
        echo "build.sh: configuring $dir again with its earlier arguments: $(./config.status --config)"
        ./config.status --recheck >/dev/null
        ./config.status -q
        found >.hvd-env
fi
make -s -j"$(nproc)"
