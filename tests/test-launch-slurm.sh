#!/bin/sh
# test-launch-slurm.sh — jobs that Slurm starts, on a one-node cluster this
# test configures and starts itself (a private munged, slurmctld and slurmd
# on free ports, 4 CPUs declared, everything under a temporary directory):
# `srun -n 4` of train_mlp is one job of 4 placed by Slurm with identical
# final weights, and `sbatch --wait -n 2` of a script whose `srun` starts
# train_mlp is one job of 2 (the batch script itself, with no step, is not
# a rank). Skipped (77) without slurm-wlm and munge, or when not root
# (slurmd runs as root).
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
for c in slurmctld slurmd srun sbatch sinfo munged mungekey; do
        command -v "$c" >/dev/null 2>&1 || skip "$c is not installed (apt-get install slurm-wlm munge)"
done
[ "$(id -u)" -eq 0 ] || skip "slurmd needs root"
tmp=$(mktemp -d /tmp/hvd-test-launch-slurm-XXXXXX)
ctld=
slurmd=
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
        for p in $ctld $slurmd; do kill "$p" 2>/dev/null; done
        [ -S "$tmp/munge.sock" ] && munged --stop -S "$tmp/munge.sock" >/dev/null 2>&1
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
chmod 755 "$tmp"

# free_port: a TCP port nothing listens on
free_port() {
        p=$((20000 + ($$ + $1 * 7919) % 20000))
        while ss -ltnH "sport = :$p" 2>/dev/null | grep -q .; do p=$((p + 1)); done
        echo $p
}
mungekey --create --keyfile="$tmp/munge.key" || fail "mungekey failed"
munged --force -S "$tmp/munge.sock" --key-file="$tmp/munge.key" --log-file="$tmp/munged.log" \
        --pid-file="$tmp/munged.pid" --seed-file="$tmp/munged.seed" || fail "munged did not start"
host=$(hostname -s)
mkdir "$tmp/state" "$tmp/spool" "$tmp/home"
cat >"$tmp/slurm.conf" <<CONF
ClusterName=hvdtest
SlurmctldHost=$host
SlurmctldPort=$(free_port 1)
SlurmdPort=$(free_port 2)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge.sock
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
NodeName=$host CPUs=4 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
SLURM_CONF=$tmp/slurm.conf
export SLURM_CONF
slurmctld -D -f "$SLURM_CONF" >"$tmp/ctld.out" 2>&1 &
ctld=$!
slurmd -D -f "$SLURM_CONF" >"$tmp/slurmd.out" 2>&1 &
slurmd=$!
up=
for _ in $(seq 100); do
        sinfo -h -o %t 2>/dev/null | grep -q idle && up=1 && break
        sleep 0.1
done
[ -n "$up" ] || fail "the one-node cluster did not come up" "$(cat "$tmp/ctld.out" "$tmp/slurmd.out" "$tmp"/*.log)"
echo "ok: one-node Slurm cluster up: $(sinfo -h -o '%P %t %N %c CPUs')"

# the ranks' secret in HOME/.hvd, job directories in TMPDIR; no node daemon
HOME=$tmp/home TMPDIR=$tmp HVD_RUNTIME_DIR=$tmp/no-daemon
export HOME TMPDIR HVD_RUNTIME_DIR
timeout 120 srun -n 4 "$HVD_BUILDDIR/examples/train_mlp" --synthetic -q -e 2 >"$tmp/out" 2>&1 ||
        fail "srun -n 4 train_mlp: exit status $?" "$(cat "$tmp/out")"
line=$(grep "final weights identical on all" "$tmp/out")
{ [ "$(echo "$line" | wc -l)" -eq 1 ] && echo "$line" | grep -q "on all 4 ranks (checksum 0x"; } ||
        fail "srun -n 4: not one job of 4 ranks with identical weights" "$(cat "$tmp/out")"
echo "ok: srun -n 4 train_mlp: $line"

cat >"$tmp/batch.sh" <<BATCH
#!/bin/sh
"$HVD_BUILDDIR/examples/train_mlp" --synthetic -q -e 1 >"$tmp/alone.out" 2>&1 || exit 3
srun "$HVD_BUILDDIR/examples/train_mlp" --synthetic -q -e 1
BATCH
timeout 120 sbatch --wait -n 2 -o "$tmp/batch.out" "$tmp/batch.sh" >"$tmp/sbatch.out" 2>&1 ||
        fail "sbatch --wait -n 2: exit status $?" "$(cat "$tmp/sbatch.out" "$tmp/batch.out" "$tmp/alone.out")"
grep -q "final weights identical on all 1 rank (" "$tmp/alone.out" ||
        fail "the batch script itself was not a job of one" "$(cat "$tmp/alone.out")"
line=$(grep "final weights identical on all" "$tmp/batch.out")
{ [ "$(echo "$line" | wc -l)" -eq 1 ] && echo "$line" | grep -q "on all 2 ranks (checksum 0x"; } ||
        fail "sbatch: srun in the script is not one job of 2" "$(cat "$tmp/batch.out")"
echo "ok: sbatch -n 2 (srun inside): $line; the batch script alone is a job of one"
[ -z "$(ls -A "$tmp/hvd-0")" ] || fail "job directories left behind" "$(ls -la "$tmp/hvd-0")"
