#!/bin/sh
# build.sh — configure and build hvd out of tree in ./build (idempotent).
# Extra arguments go to configure, e.g. scripts/build.sh --without-cuda.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
[ -x configure ] && [ configure -nt configure.ac ] || ./bootstrap >/dev/null
mkdir -p build
cd build
if [ ! -f Makefile ] || [ $# -gt 0 ]; then
        ../configure -q "$@"
fi
make -s -j"$(nproc)"
