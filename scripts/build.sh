#!/bin/sh
# build.sh — configure and build hvd out of tree (idempotent).
#   scripts/build.sh [CONFIGURE ARGS...]        builds in ./build
#   BUILD_DIR=build-cpu scripts/build.sh --without-cuda
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
{ [ -x configure ] && [ -n "$(find configure -newer configure.ac)" ]; } || ./bootstrap >/dev/null
dir=${BUILD_DIR:-build}
mkdir -p "$dir"
cd "$dir"
if [ ! -f Makefile ] || [ $# -gt 0 ]; then
        "$top/configure" -q "$@"
fi
make -s -j"$(nproc)"
