# shellcheck shell=bash
# shellcheck disable=SC2034 # peer_why and HOROVOD_DIR: read by the scripts that source this file
# peers.sh — sourced by the benchmark scripts (bash): finds the peers hvd
# is measured against and says loudly, at the head of the output and again
# at its end, which are missing and how to get them, so that a table
# without a peer's column is never taken for a whole one.
#
#   peers_check BUILDDIR PEER...   PEER: mpi (benchmarks/mpi_collective),
#                                  mpi_step (benchmarks/mpi_step), gloo
#                                  (torch.distributed in $PY)
#   peers_report                   the same warnings again (call it last;
#                                  it returns the exit status it was called with)
#   peer_ok PEER                   exit status 0 when PEER was found
# PY is the Python of the gloo peer (default /usr/bin/python3).
#
# The Python benchmarks, which say what is missing in their own words:
#   peer_hvd BUILDDIR              peer_why: why hvd's Python package and
#                                  launcher are not there in BUILDDIR, or ""
#   peer_horovod                   peer_why: why Horovod 0.28.1 cannot run
#                                  under $PY, or ""; sets HOROVOD_DIR where
#                                  unset (scripts/horovod.sh's directory,
#                                  built once); with CHECK_ARGS=1 only names
#                                  the directory, building and checking nothing
#
# And what ran, for a run's "# run:" line and its plot's title:
#   run_commit SRC                 SRC's short commit, "+changes" where its
#                                  tree differs from it
#   run_machine                    the CPUs, their model and the kernel

run_commit() {
        local c
        c=$(git -C "$1" rev-parse --short HEAD 2>/dev/null || echo unknown)
        git -C "$1" diff --quiet HEAD 2>/dev/null || c="$c+changes"
        echo "$c"
}

run_machine() {
        echo "$(nproc --all) CPUs $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(uname -r)"
}

peers_missing=() peers_found=()
peer_why=

# peer_mpi BUILDDIR PROGRAM: why the Open MPI peer PROGRAM cannot run, or nothing
peer_mpi() {
        local build=$1 prog=$2
        if ! command -v mpirun >/dev/null 2>&1 || ! command -v mpicc >/dev/null 2>&1; then
                echo "Open MPI is not installed: scripts/setup.sh installs it (Debian: apt-get install openmpi-bin libopenmpi-dev), then scripts/build.sh and make -C $build bench"
        elif ! grep -q '^MPICC = .' "$build/Makefile" 2>/dev/null; then
                echo "$build was configured before Open MPI was installed: scripts/build.sh configures it again (or run $build/config.status --recheck), then make -C $build bench"
        elif [ ! -x "$build/benchmarks/$prog" ]; then
                echo "$build/benchmarks/$prog is not built: make -C $build bench"
        fi
}

peer_hvd() {
        local build=$1 f
        peer_why=
        for f in tools/hvdrun daemon/hvd-coordinatord python-binding/pkg/hvd/__init__.py; do
                if [ ! -e "$build/$f" ]; then
                        peer_why="hvd is not built in $build (no $f: make -C $build first)"
                        return
                fi
        done
}

peer_horovod() {
        local src err
        src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
        peer_why=
        if [ "${CHECK_ARGS:-0}" = 1 ]; then
                HOROVOD_DIR=${HOROVOD_DIR:-$("$src/scripts/horovod.sh" --path)}
                return
        fi
        [ -n "${HOROVOD_DIR:-}" ] || HOROVOD_DIR=$("$src/scripts/horovod.sh") || HOROVOD_DIR=
        if [ -z "$HOROVOD_DIR" ]; then
                peer_why="Horovod 0.28.1 is not available: scripts/horovod.sh could not build it (its reason is above)"
        elif [ ! -f "$HOROVOD_DIR/bin/horovodrun" ]; then
                peer_why="Horovod 0.28.1 is not available: $HOROVOD_DIR has no bin/horovodrun (scripts/horovod.sh builds it there)"
        elif ! err=$(PYTHONPATH=$HOROVOD_DIR "${PY:-/usr/bin/python3}" -c 'import horovod.torch' 2>&1); then
                peer_why="Horovod 0.28.1 is not available: horovod.torch does not import from $HOROVOD_DIR: $(printf '%s\n' "$err" | tail -n 1)"
        fi
}

peers_check() {
        local build=$1 p why
        shift
        for p in "$@"; do
                case $p in
                mpi) why=$(peer_mpi "$build" mpi_collective) ;;
                mpi_step) why=$(peer_mpi "$build" mpi_step) ;;
                gloo)
                        why=
                        "${PY:-/usr/bin/python3}" -c 'import torch.distributed' 2>/dev/null ||
                                why="${PY:-/usr/bin/python3} cannot import torch.distributed: scripts/setup.sh installs Debian's torch (apt-get install python3-torch), or set PYTHON to a Python with torch"
                        ;;
                *) why="unknown peer '$p'" ;;
                esac
                if [ -n "$why" ]; then
                        peers_missing+=("$p: $why")
                else
                        peers_found+=("$p")
                fi
        done
        echo "# peers found: ${peers_found[*]:-none}"
        peers_report
}

peer_ok() {
        local p
        for p in "${peers_found[@]}"; do
                [ "$p" = "$1" ] && return 0
        done
        return 1
}

peers_report() {
        # shellcheck disable=SC2320 # the caller's last status, returned for its exit
        local rc=$?
        local m
        for m in "${peers_missing[@]}"; do
                printf '!!!!!!!!!! PEER MISSING (its columns stay empty) %s\n' "$m"
        done
        return $rc
}
