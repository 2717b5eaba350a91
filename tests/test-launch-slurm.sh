#!/bin/sh
# test-launch-slurm.sh — jobs that Slurm starts, on a one-node cluster this
# test configures and starts itself (a private munged, slurmctld and slurmd
# on free ports, 4 CPUs declared, everything under a temporary directory):
# `srun -n 4` of train_mlp is one job of 4 placed by Slurm with identical
# final weights, and `sbatch --wait -n 2` of a script whose `srun` starts
# train_mlp is one job of 2 (the batch script itself, with no step, is not
# a rank), and `sbatch -n 4` of a script calling `hvdrun -np 4` with no -H
# is one job of 4 whose ranks are 4 srun steps of the allocation. Then two
# emulated nodes: a second cluster whose slurmctld and
# two slurmd (nodes a and b) run in two network namespaces joined by a
# veth pair (nsenter --net, so they keep the machine's cgroup mounts);
# `srun -N 2 -n 4` is one job of 4 ranks on 2 nodes, each node's local
# rank 0 running a private daemon, the first node's the root at
# HVD_ROOT_PEER. Skipped (77) without slurm-wlm and munge, or when not
# root (slurmd runs as root); the two-node part is left out, and said,
# where namespaces cannot be made.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
. "$HVD_SRCDIR/tests/lib/netpair.sh"
for c in slurmctld slurmd srun sbatch sinfo munged mungekey; do
        command -v "$c" >/dev/null 2>&1 || skip "$c is not installed (apt-get install slurm-wlm munge)"
done
[ "$(id -u)" -eq 0 ] || skip "slurmd needs root"
tmp=$(mktemp -d /tmp/hvd-test-launch-slurm-XXXXXX)
daemons=
na=hvdsla$$
nb=hvdslb$$
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
        for p in $daemons; do kill "$p" 2>/dev/null; done
        [ -S "$tmp/munge.sock" ] && munged --stop -S "$tmp/munge.sock" >/dev/null 2>&1
        wait 2>/dev/null
        ip netns del "$na" 2>/dev/null
        ip netns del "$nb" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
chmod 755 "$tmp"

mungekey --create --keyfile="$tmp/munge.key" || fail "mungekey failed"
munged --force -S "$tmp/munge.sock" --key-file="$tmp/munge.key" --log-file="$tmp/munged.log" \
        --pid-file="$tmp/munged.pid" --seed-file="$tmp/munged.seed" || fail "munged did not start"
host=$(hostname -s)
mkdir "$tmp/home"

# write_conf DIR CONTROLLER NODE-LINES...: DIR/slurm.conf of a cluster whose
# state, spool, pid and log files are all in DIR
write_conf() {
        d=$1 ctl=$2
        shift 2
        mkdir -p "$d/state" "$d/spool"
        cat >"$d/slurm.conf" <<CONF
ClusterName=hvdtest
SlurmctldHost=$ctl
SlurmctldPort=$(free_port 1)
SlurmdPort=$(free_port 2)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge.sock
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool/%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.%n.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd.%n.log
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
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
        printf '%s\n' "$@" >>"$d/slurm.conf"
}

# wait_idle DIR N [NETNS]: N nodes of DIR's cluster are idle within 10 s
wait_idle() {
        for _ in $(seq 100); do
                [ "$(${3:+nsenter --net=/run/netns/$3} sinfo -h -N -o %t -t idle 2>/dev/null | grep -c idle)" -ge "$2" ] &&
                        return 0
                sleep 0.1
        done
        fail "the cluster in $1 did not come up" "$(cat "$1"/*.out "$1"/*.log 2>/dev/null)"
}

write_conf "$tmp/one" "$host" "NodeName=$host CPUs=4 State=UNKNOWN"
SLURM_CONF=$tmp/one/slurm.conf
export SLURM_CONF
slurmctld -D -f "$SLURM_CONF" >"$tmp/one/ctld.out" 2>&1 &
daemons="$daemons $!"
slurmd -D -f "$SLURM_CONF" >"$tmp/one/slurmd.out" 2>&1 &
daemons="$daemons $!"
wait_idle "$tmp/one" 1
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

# hvdrun in the allocation, no -H: the hosts are the allocation's, every rank a
# step of its own started with srun (each records its step id)
cat >"$tmp/rank.sh" <<RANK
#!/bin/sh
echo "\$HVD_RANK \${SLURM_STEP_ID:-none} \${SLURM_JOB_ID:-none}" >>"$tmp/steps"
exec "$HVD_BUILDDIR/examples/train_mlp" --synthetic -q -e 1
RANK
chmod +x "$tmp/rank.sh"
cat >"$tmp/hvdrun.sh" <<BATCH
#!/bin/sh
exec "$HVD_BUILDDIR/tools/hvdrun" -np 4 --verbose "$tmp/rank.sh"
BATCH
: >"$tmp/steps"
timeout 120 sbatch --wait -n 4 -o "$tmp/hvdrun.out" "$tmp/hvdrun.sh" >"$tmp/sbatch.out" 2>&1 ||
        fail "sbatch -n 4 of hvdrun -np 4: exit status $?" "$(cat "$tmp/sbatch.out" "$tmp/hvdrun.out")"
line=$(grep "final weights identical on all" "$tmp/hvdrun.out")
{ [ "$(echo "$line" | wc -l)" -eq 1 ] && echo "$line" | grep -q "on all 4 ranks (checksum 0x"; } ||
        fail "hvdrun -np 4 in the allocation: not one job of 4 ranks with identical weights" "$(cat "$tmp/hvdrun.out")"
{ grep -q "ranks 0-3" "$tmp/hvdrun.out" && grep -q "(srun, this host" "$tmp/hvdrun.out"; } ||
        fail "hvdrun did not say it starts the ranks with srun" "$(cat "$tmp/hvdrun.out")"
# four ranks, each in a step of one job: four step ids, one job id
{ [ "$(cut -d' ' -f1 "$tmp/steps" | sort | tr '\n' ' ')" = "0 1 2 3 " ] &&
        [ "$(cut -d' ' -f2 "$tmp/steps" | grep -v none | sort -u | wc -l)" -eq 4 ] &&
        [ "$(cut -d' ' -f3 "$tmp/steps" | sort -u | wc -l)" -eq 1 ]; } ||
        fail "hvdrun's ranks are not four srun steps of the allocation" "$(cat "$tmp/steps" "$tmp/hvdrun.out")"
echo "ok: sbatch -n 4 of hvdrun -np 4 (no -H): 4 srun steps, $line"
[ -z "$(ls -A "$tmp/hvd-0")" ] || fail "job directories left behind" "$(ls -la "$tmp/hvd-0")"

# a rank that fails: hvdrun's exit status is its, and the other rank's step
# is stopped (srun passes SIGTERM on); and hvdrun started by srun itself,
# whose ranks' steps overlap its own
cat >"$tmp/fail.sh" <<RANK
#!/bin/sh
[ "\$HVD_RANK" = 1 ] && exit 3
echo \$\$ >"$tmp/sleeper.pid"
exec sleep 60
RANK
chmod +x "$tmp/fail.sh"
cat >"$tmp/hvdrun-fail.sh" <<BATCH
#!/bin/sh
"$HVD_BUILDDIR/tools/hvdrun" -np 2 --grace-period 1 "$tmp/fail.sh"
echo \$? >"$tmp/fail.rc"
srun -n 1 "$HVD_BUILDDIR/tools/hvdrun" -np 2 "$tmp/rank.sh" >"$tmp/nested.out" 2>&1
BATCH
: >"$tmp/steps"
start=$(now_ms)
timeout 120 sbatch --wait -n 2 -o "$tmp/hvdrun-fail.out" "$tmp/hvdrun-fail.sh" >"$tmp/sbatch.out" 2>&1 ||
        fail "sbatch of the failing hvdrun: exit status $?" "$(cat "$tmp/sbatch.out" "$tmp/hvdrun-fail.out" "$tmp/nested.out")"
[ "$(cat "$tmp/fail.rc")" = 3 ] || fail "hvdrun's exit status is not the failed rank's 3" "$(cat "$tmp/hvdrun-fail.out")"
{ [ -s "$tmp/sleeper.pid" ] && ! kill -0 "$(cat "$tmp/sleeper.pid")" 2>/dev/null; } ||
        fail "rank 0's step outlived the job" "$(cat "$tmp/hvdrun-fail.out")"
grep -q "final weights identical on all 2 ranks" "$tmp/nested.out" ||
        fail "srun -n 1 hvdrun -np 2: not one job of 2" "$(cat "$tmp/nested.out")"
echo "ok: a failed rank ends hvdrun with its status 3 and stops the other step; srun of hvdrun works" \
        "($(($(now_ms) - start)) ms)"

# two nodes, a and b, in two namespaces; the controller with node a
np_msg=$(netpair "$na" "$nb" "vsla$$" "vslb$$" 10.79.0.1 10.79.0.2)
case $? in
0) ;;
2)
        echo "# two-node cluster left out: $np_msg"
        exit 0
        ;;
*) fail "$np_msg" ;;
esac
write_conf "$tmp/two" "$host(10.79.0.1)" "NodeName=a NodeAddr=10.79.0.1 CPUs=2 State=UNKNOWN" \
        "NodeName=b NodeAddr=10.79.0.2 CPUs=2 State=UNKNOWN"
SLURM_CONF=$tmp/two/slurm.conf
nsenter --net=/run/netns/"$na" slurmctld -D -f "$SLURM_CONF" >"$tmp/two/ctld.out" 2>&1 &
daemons="$daemons $!"
for n in a b; do
        ns=$na
        [ $n = b ] && ns=$nb
        nsenter --net=/run/netns/"$ns" slurmd -D -N $n -f "$SLURM_CONF" >"$tmp/two/slurmd.$n.out" 2>&1 &
        daemons="$daemons $!"
done
wait_idle "$tmp/two" 2 "$na"
port=$(free_port 3)
HVD_ROOT_PORT=$port HVD_ROOT_PEER=tcp://10.79.0.1:$port timeout 120 nsenter --net=/run/netns/"$na" \
        srun -N 2 -n 4 "$HVD_BUILDDIR/examples/train_mlp" --synthetic -q -e 1 >"$tmp/out" 2>&1 ||
        fail "srun -N 2 -n 4 train_mlp: exit status $?" "$(cat "$tmp/out")"
line=$(grep "final weights identical on all" "$tmp/out")
{ [ "$(echo "$line" | wc -l)" -eq 1 ] && echo "$line" | grep -q "on all 4 ranks (checksum 0x"; } ||
        fail "srun -N 2 -n 4: not one job of 4 ranks with identical weights" "$(cat "$tmp/out")"
[ -z "$(ls -A "$tmp/hvd-0")" ] || fail "job directories left behind" "$(ls -la "$tmp/hvd-0")"
echo "ok: srun -N 2 -n 4 on two nodes in namespaces: $line"
