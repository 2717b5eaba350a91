# shellcheck shell=bash
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

peers_missing=() peers_found=()

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
