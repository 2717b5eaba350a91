#!/bin/sh
# horovod.sh — Horovod 0.28.1 (PyTorch frontend, Gloo controller, CPU only)
# built from its PyPI source distribution against Debian's torch 1.13, as the
# live peer of the Python benchmarks (benchmarks/run-python.sh,
# benchmarks/run-scaling.sh). Nothing in the tests or CI needs it.
#   scripts/horovod.sh          print the directory Horovod is installed in,
#                               building it first if needed (about 2 minutes
#                               on two idle cores)
#   scripts/horovod.sh --path   print the directory it would use; build nothing
# Use it as
#   PYTHONPATH=DIR /usr/bin/python3 DIR/bin/horovodrun --gloo -np 2 \
#       -H localhost:2 /usr/bin/python3 script.py
# The directory is a `pip install --target` of the wheel (and cloudpickle,
# which Debian does not package; psutil, PyYAML and packaging come from
# Debian), kept under ${HVD_VENV_CACHE:-/var/cache/hvd} (where writable;
# otherwise ${XDG_CACHE_HOME:-~/.cache}/hvd), named after Horovod's, the
# interpreter's and torch's versions, and reused. It needs root once for
# `apt-get install libtorch-dev pybind11-dev` (the C++ headers and CMake
# files of Debian's torch) and PyPI for the source distribution.
# Horovod 0.28.1 does not build against torch > 2.3, so the PyPI torch of
# scripts/venv-torch.sh cannot be used.
# Exit status 0: the directory on stdout. 1: it cannot be built; why, and
# the end of the build's log, on stderr.
set -u
version=0.28.1
base=/usr/bin/python3
apt_packages="libtorch-dev pybind11-dev"

say() { echo "horovod.sh: $*" >&2; }
fail() {
        say "CANNOT BUILD HOROVOD $version: $*"
        exit 1
}

mode=build
case "${1:-}" in
--path) mode=path ;;
"") ;;
*) echo "usage: $0 [--path]" >&2; exit 2 ;;
esac

if [ -n "${HVD_VENV_CACHE:-}" ]; then
        cache=$HVD_VENV_CACHE
elif [ -w /var/cache/hvd ] || { [ ! -e /var/cache/hvd ] && [ -w /var/cache ]; }; then
        cache=/var/cache/hvd
else
        cache=${XDG_CACHE_HOME:-$HOME/.cache}/hvd
fi
versions=$("$base" -c 'import sys, torch
print("py%d.%d-torch%s" % (sys.version_info[0], sys.version_info[1],
      torch.__version__.split("+")[0]))' 2>/dev/null) ||
        fail "$base cannot import torch (Debian's python3-torch is needed)"
dir=$cache/horovod-$version-$versions
if [ $mode = path ]; then
        echo "$dir"
        exit 0
fi

# .complete is written last: a half-made directory is made again
ready() {
        [ -f "$dir/.complete" ] && [ -f "$dir/bin/horovodrun" ] &&
                PYTHONPATH=$dir "$base" -c 'import horovod.torch' >/dev/null 2>&1
}
if ready; then
        say "Horovod $version in $dir"
        echo "$dir"
        exit 0
fi

mkdir -p "$cache" 2>/dev/null || fail "cannot create the cache directory $cache"
# one builder at a time; the others wait, then find it complete
exec 9>"$dir.lock"
flock 9 || fail "cannot lock $dir.lock"
if ready; then
        say "Horovod $version in $dir"
        echo "$dir"
        exit 0
fi

# shellcheck disable=SC2086 # the package list is words
if ! dpkg -s $apt_packages >/dev/null 2>&1; then
        [ "$(id -u)" = 0 ] || fail "$apt_packages are not installed, and installing them needs root"
        say "installing $apt_packages"
        # shellcheck disable=SC2086
        if ! apt-get install -y -q $apt_packages >&2; then
                apt-get update -q >&2
                # shellcheck disable=SC2086
                apt-get install -y -q $apt_packages >&2 ||
                        fail "apt-get install $apt_packages failed"
        fi
fi

log=$dir.log
work=$dir.build
rm -rf "$dir" "$work"
mkdir -p "$work" || fail "cannot create $work"
say "building Horovod $version into $dir (log: $log)"
# the build's own environment: Debian's Python and torch, plus the two
# build requirements Debian's Python lacks; pip's isolation is off so the
# build sees Debian's torch
build_failed() {
        tail -n 40 "$log" >&2
        rm -rf "$work"
        fail "$1 (the full log is $log)"
}
{
        "$base" -m venv --system-site-packages "$work/venv" &&
                "$work/venv/bin/python" -m pip install -q cloudpickle cffi
} >"$log" 2>&1 || build_failed "cannot make the build environment with cloudpickle and cffi (is PyPI reachable?)"
(
        cd "$work" &&
                HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
                        HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
                        HOROVOD_WITHOUT_NVTX=1 MAKEFLAGS=${MAKEFLAGS:--j2} \
                        "$work/venv/bin/python" -m pip wheel --no-build-isolation \
                        --no-deps -w "$work/wheel" "horovod==$version"
) >>"$log" 2>&1 || build_failed "pip wheel horovod==$version failed"
set -- "$work"/wheel/horovod-*.whl
wheel=$1
[ -f "$wheel" ] || build_failed "pip wheel made no wheel"
# an existing DIR/bin makes pip skip horovodrun: install into an empty one
{
        "$work/venv/bin/python" -m pip install -q --no-deps --target "$dir" "$wheel" cloudpickle &&
                cp "$wheel" "$dir/"
} >>"$log" 2>&1 || build_failed "pip install --target $dir failed"
rm -rf "$work"
if ! PYTHONPATH=$dir "$base" -c 'import horovod.torch' >>"$log" 2>&1; then
        tail -n 20 "$log" >&2
        fail "the installed Horovod does not import (the full log is $log)"
fi
[ -f "$dir/bin/horovodrun" ] || fail "$dir/bin/horovodrun is missing"
echo "horovod==$version $versions" >"$dir/.complete"
say "Horovod $version in $dir"
echo "$dir"
