#!/bin/sh
# test-launch-errors.sh — hvd_init of train_mlp, started with the
# environment a cluster launcher would set, half-set or contradictory:
# each case fails at once with exit status 1 and the message naming the
# variables (never a job of one rank). Then what a launcher job trusts: a
# secret file others can read is refused, and a local rank whose local
# rank 0 never comes fails after HVD_START_TIMEOUT, naming the job.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
tmp=$(mktemp -d /tmp/hvd-test-launch-errors-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/home"
# none of the launchers' own variables leaks in from the caller
for v in $(env | sed -n 's/^\(OMPI_[A-Z_]*\|PMIX_[A-Z_]*\|PMI_[A-Z_]*\|MPI_LOCAL[A-Z]*\|SLURM_[A-Z_]*\|HVD_[A-Z_]*\|HOROVOD_[A-Z_]*\)=.*/\1/p'); do
        case $v in HVD_BUILDDIR | HVD_SRCDIR) ;; *) unset "$v" ;; esac
done
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR MASTER_PORT TORCHELASTIC_RUN_ID
HOME=$tmp/home TMPDIR=$tmp HVD_RUNTIME_DIR=$tmp/no-daemon
export HOME TMPDIR HVD_RUNTIME_DIR

# expect MESSAGE VAR=VALUE...: train_mlp in that environment exits 1 within
# 10 s, its error ending in MESSAGE
expect() {
        msg=$1
        shift
        env "$@" timeout 10 "$HVD_BUILDDIR/examples/train_mlp" --synthetic -q -e 1 >"$tmp/out" 2>&1
        rc=$?
        [ $rc -eq 1 ] || fail "$*: exit status $rc, expected 1" "$(cat "$tmp/out")"
        grep -qF -- "$msg" "$tmp/out" || fail "$*: not the message '$msg'" "$(cat "$tmp/out")"
        echo "ok: $1 ...: $msg"
}
ompi="OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=2"
torch1="RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2"

# shellcheck disable=SC2086 # the sets of variables split into words
{
        expect "Open MPI: OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_LOCAL_RANK is not" \
                OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2
        expect "torchrun: RANK=2 is not below WORLD_SIZE=2" RANK=2 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2
        expect "MPICH: MPI_LOCALRANKID=3 and MPI_LOCALNRANKS=2 do not fit PMI_RANK=1 of PMI_SIZE=4" \
                PMI_RANK=1 PMI_SIZE=4 MPI_LOCALRANKID=3 MPI_LOCALNRANKS=2
        expect "two launchers disagree: Open MPI says rank 0 of 2" $ompi $torch1
        expect "two launchers disagree: Open MPI says rank 0, PMIX_RANK=1" $ompi PMIX_RANK=1
        expect "PMIx: PMIX_RANK is set, but no launcher variable gives the job's size" PMIX_RANK=0
        expect "Slurm: SLURM_STEP_TASKS_PER_NODE='2(x3)' (3 nodes, 6 tasks) does not fit" SLURM_PROCID=0 \
                SLURM_NTASKS=4 SLURM_STEP_ID=0 SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_STEP_NODELIST='n[1-2]' \
                SLURM_STEP_TASKS_PER_NODE='2(x3)'
        expect "Slurm: SLURM_STEP_NODELIST='n[1-2': a '[' without its ']'" SLURM_PROCID=0 SLURM_NTASKS=4 \
                SLURM_STEP_ID=0 SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_STEP_NODELIST='n[1-2' \
                SLURM_STEP_TASKS_PER_NODE='2(x2)'
        expect "MPICH started this rank but gives no job id: set HVD_JOB_ID" \
                PMI_RANK=1 PMI_SIZE=2 MPI_LOCALRANKID=1 MPI_LOCALNRANKS=2
        printf 'sekrit\n' >"$tmp/secret"
        chmod 644 "$tmp/secret"
        expect "the job secret file $tmp/secret must be a file of this user that only it can read (chmod 600)" \
                $torch1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 HVD_JOB_SECRET_FILE="$tmp/secret"
        chmod 600 "$tmp/secret"
        expect "rank 1: local rank 0 of job torchrun-none@127.0.0.1:1 did not name the node's daemon" \
                $torch1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 HVD_JOB_SECRET_FILE="$tmp/secret" HVD_START_TIMEOUT=1
}
# a launcher that started one rank: a job of one, no daemon, no secret made
env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=1 \
        timeout 30 "$HVD_BUILDDIR/examples/train_mlp" --synthetic -q -e 1 >"$tmp/out" 2>&1 ||
        fail "mpirun -np 1's environment: exit status $?" "$(cat "$tmp/out")"
[ ! -e "$tmp/home/.hvd" ] || fail "a job of one rank made ~/.hvd"
echo "ok: a launcher's job of one rank runs alone"
