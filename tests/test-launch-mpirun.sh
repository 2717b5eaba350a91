#!/bin/sh
# test-launch-mpirun.sh — jobs that Open MPI's mpirun starts, without
# hvdrun: libhvd reads OMPI_COMM_WORLD_*, finds no node daemon and local
# rank 0 runs a private one. train_mlp on 2 and on 4 ranks (oversubscribed)
# is one job with bit-identical final weights on every rank, and so is
# examples/python/train_mnist.py on 2 ranks (with a Python that has torch:
# HVD_TORCH_VENV's, $PYTHON, or python3; that part is left out without
# one); with a node daemon running at HVD_RUNTIME_DIR the ranks use it,
# and it logs the job placed by Open MPI; two mpirun
# jobs held alive at once on this node are two jobs of 2, each with its own
# daemon, and `hvdctl job` shows each placed by Open MPI; the job
# directories are gone afterwards and the secret file is private.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
command -v mpirun >/dev/null 2>&1 || skip "mpirun is not installed (apt-get install openmpi-bin)"
mpirun --version 2>/dev/null | grep -q "Open MPI" || skip "mpirun is not Open MPI's"
tmp=$(mktemp -d /tmp/hvd-test-launch-mpirun-XXXXXX)
pids=
node_daemon=
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
        touch "$tmp/hold1.go" "$tmp/hold2.go"
        for p in $pids $node_daemon; do kill -KILL "$p" 2>/dev/null; done
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
mkdir "$tmp/home" "$tmp/t"
# the secret goes to HOME/.hvd, job directories to TMPDIR/hvd-UID; no node daemon
HOME=$tmp/home TMPDIR=$tmp/t HVD_RUNTIME_DIR=$tmp/no-daemon OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export HOME TMPDIR HVD_RUNTIME_DIR OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
mpi() { timeout 120 mpirun --oversubscribe --mca btl self,vader -x HOME -x TMPDIR -x HVD_RUNTIME_DIR "$@"; }
jobs_dir=$tmp/t/hvd-$(id -u)

for n in 2 4; do
        mpi -np $n "$HVD_BUILDDIR/examples/train_mlp" --synthetic -q -e 2 >"$tmp/out" 2>&1 ||
                fail "mpirun -np $n train_mlp: exit status $?" "$(cat "$tmp/out")"
        line=$(grep "final weights identical on all" "$tmp/out")
        { [ "$(echo "$line" | wc -l)" -eq 1 ] && echo "$line" | grep -q "on all $n ranks (checksum 0x"; } ||
                fail "mpirun -np $n: not one job of $n ranks with identical weights" "$(cat "$tmp/out")"
        ! grep -qi "error\|warning" "$tmp/out" || fail "mpirun -np $n: errors or warnings" "$(cat "$tmp/out")"
        echo "ok: mpirun -np $n train_mlp: $line"
done
py=${HVD_TORCH_VENV:+$HVD_TORCH_VENV/bin/python}
py=${py:-${PYTHON:-python3}}
if "$py" -c 'import torch, numpy' >/dev/null 2>&1; then
        PYTHONPATH=$HVD_BUILDDIR/python-binding/pkg OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
        export PYTHONPATH OMP_NUM_THREADS PYTHONDONTWRITEBYTECODE
        mpi -x PYTHONPATH -x OMP_NUM_THREADS -x PYTHONDONTWRITEBYTECODE -np 2 "$py" \
                "$HVD_SRCDIR/examples/python/train_mnist.py" --synthetic --epochs 1 >"$tmp/out" 2>&1 ||
                fail "mpirun -np 2 train_mnist.py: exit status $?" "$(cat "$tmp/out")"
        grep -q "^final weights identical on all 2 ranks$" "$tmp/out" ||
                fail "mpirun -np 2 train_mnist.py: not one job of 2 with identical weights" "$(cat "$tmp/out")"
        echo "ok: mpirun -np 2 train_mnist.py: $(grep "^weights checksum per rank" "$tmp/out")"
else
        echo "# $py cannot import torch and numpy: train_mnist.py left out (set HVD_TORCH_VENV)"
fi
[ -z "$(ls -A "$jobs_dir")" ] || fail "job directories left behind" "$(ls -la "$jobs_dir")"
perm=$(stat -c %a "$tmp/home/.hvd/secret")
[ "$perm" = 600 ] || fail "\$HOME/.hvd/secret has mode $perm, not 600"
[ "$(stat -c %a "$jobs_dir")" = 700 ] || fail "$jobs_dir is not mode 700"
echo "ok: ~/.hvd/secret made 0600, $jobs_dir 0700 and empty after the jobs"

# the node's daemon, when one answers at HVD_RUNTIME_DIR
"$HVD_BUILDDIR/daemon/hvd-coordinatord" --runtime-dir "$tmp/rt" --log-level notice 2>"$tmp/daemon.log" &
node_daemon=$!
wait_files 10 "$tmp/rt/control.sock" || fail "hvd-coordinatord did not start" "$(cat "$tmp/daemon.log")"
HVD_RUNTIME_DIR=$tmp/rt mpi -np 2 "$HVD_BUILDDIR/examples/train_mlp" --synthetic -q -e 1 >"$tmp/out" 2>&1 ||
        fail "mpirun -np 2 with a node daemon: exit status $?" "$(cat "$tmp/out" "$tmp/daemon.log")"
grep -q "final weights identical on all 2 ranks" "$tmp/out" || fail "mpirun with a node daemon" "$(cat "$tmp/out")"
grep -q "job ompi-[0-9]* running: 2 ranks on 1 host, 2 here, placed by Open MPI" "$tmp/daemon.log" ||
        fail "the node daemon did not run the job" "$(cat "$tmp/daemon.log")"
kill "$node_daemon"
wait "$node_daemon" 2>/dev/null
node_daemon=
[ -z "$(ls -A "$jobs_dir")" ] || fail "job directories left behind" "$(ls -la "$jobs_dir")"
echo "ok: mpirun -np 2 with a node daemon: $(grep -o "job ompi-[0-9]* running: .*" "$tmp/daemon.log")"

# two jobs at once: each holds after its collectives until hold*.go exists.
# They share TMPDIR (and so hvd's job directory) but not Open MPI's own
# session directory: two mpiruns creating TMPDIR/ompi.HOST.UID at the same
# moment race on its mkdir and one of them aborts in orte_init.
for k in 1 2; do
        mkdir "$tmp/ompi$k"
        HVD_TEST_HOLD=$tmp/hold$k mpi --mca orte_tmpdir_base "$tmp/ompi$k" -x HVD_TEST_HOLD -np 2 \
                "$HVD_BUILDDIR/tests/worker_collectives" barrier \
                >"$tmp/job$k.out" 2>&1 &
        pids="$pids $!"
done
wait_files 60 "$tmp/hold1.ready" "$tmp/hold2.ready" ||
        fail "the two jobs did not reach their hold points" "$(cat "$tmp/job1.out" "$tmp/job2.out")"
n_dirs=0
ids=
for d in "$jobs_dir"/j-*; do
        n_dirs=$((n_dirs + 1))
        "$HVD_BUILDDIR/tools/hvdctl" -r "$d" jobs >"$tmp/jobs" 2>&1 || fail "hvdctl jobs in $d: exit $?" "$(cat "$tmp/jobs")"
        [ "$(wc -l <"$tmp/jobs")" -eq 1 ] || fail "the daemon in $d serves not one job" "$(cat "$tmp/jobs")"
        id=$(cut -d' ' -f1 "$tmp/jobs")
        ids="$ids $id"
        "$HVD_BUILDDIR/tools/hvdctl" -r "$d" job "$id" >"$tmp/job" 2>&1 || fail "hvdctl job $id: exit $?" "$(cat "$tmp/job")"
        { grep -q "^job $id: running, 2 ranks on 1 host (2 here)" "$tmp/job" &&
                grep -q "^  placed by: Open MPI$" "$tmp/job"; } || fail "hvdctl job $id" "$(cat "$tmp/job")"
        case $id in ompi-[0-9]*) ;; *) fail "job id '$id' is not ompi-JOBID" ;; esac
done
[ $n_dirs -eq 2 ] || fail "$n_dirs job directories for two jobs" "$(ls -la "$jobs_dir")"
{ [ "$(echo "$ids" | wc -w)" -eq 2 ] && [ "$(echo "$ids" | tr ' ' '\n' | sort -u | grep -c .)" -eq 2 ]; } ||
        fail "the two jobs have ids '$ids'"
touch "$tmp/hold1.go" "$tmp/hold2.go"
for p in $pids; do
        wait "$p" || fail "a held job failed: exit status $?" "$(cat "$tmp/job1.out" "$tmp/job2.out")"
done
pids=
echo "ok: two mpirun jobs at once:$ids, each 2 ranks on its own daemon, placed by Open MPI"
