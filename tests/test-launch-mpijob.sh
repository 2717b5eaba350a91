#!/bin/sh
# test-launch-mpijob.sh — a Kubernetes-style MPIJob on two emulated hosts:
# network namespaces joined by a veth pair, mpirun started in the first
# (the launcher pod) with a host file of both and an rsh agent that enters
# a host's namespace (as the MPI operator's launcher reaches its worker
# pods over ssh). No hvdrun, no node daemon: each host's local rank 0 runs
# a private daemon, the first host's is the root at HVD_ROOT_PEER, passed
# with -x. A held job shows in hvdctl as 4 ranks on 2 hosts placed by
# Open MPI; train_mlp ends with identical weights on all 4 ranks.
# Skipped (77) without mpirun, or where namespaces cannot be made.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
. "$HVD_SRCDIR/tests/lib/netpair.sh"
command -v mpirun >/dev/null 2>&1 || skip "mpirun is not installed (apt-get install openmpi-bin)"
mpirun --version 2>/dev/null | grep -q "Open MPI" || skip "mpirun is not Open MPI's"
tmp=$(mktemp -d /tmp/hvd-test-launch-mpijob-XXXXXX)
na=hvdmja$$
nb=hvdmjb$$
held=
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
        touch "$tmp/hold.go"
        [ -n "$held" ] && kill -KILL "$held" 2>/dev/null
        wait 2>/dev/null
        ip netns del "$na" 2>/dev/null
        ip netns del "$nb" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
netpair_test "$na" "$nb" "vmja$$" "vmjb$$" 10.77.0.1 10.77.0.2
cat >"$tmp/agent" <<'AGENT'
#!/bin/sh
# rsh agent: HOST COMMAND... runs COMMAND in the namespace named HOST
host=$1
shift
exec ip netns exec "$host" sh -c "$*"
AGENT
chmod +x "$tmp/agent"
printf '%s slots=2\n%s slots=2\n' "$na" "$nb" >"$tmp/hostfile"
mkdir "$tmp/home"
port=$(free_port 1)
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
# rtc ^hwloc: the remote orted otherwise maps its hwloc topology into a
# hole it guesses in its address space, and now and then segfaults in
# hwloc_shmem_topology_write before any rank starts; binding is not tested
mpi() {
        ip netns exec "$na" timeout 120 mpirun --mca plm_rsh_agent "$tmp/agent" --hostfile "$tmp/hostfile" \
                --mca rtc ^hwloc --oversubscribe --mca oob_tcp_if_include 10.77.0.0/24 --mca btl self,vader,tcp \
                --mca btl_tcp_if_include 10.77.0.0/24 -x HOME="$tmp/home" -x TMPDIR="$tmp" \
                -x HVD_RUNTIME_DIR="$tmp/no-daemon" -x HVD_ROOT_PORT="$port" \
                -x HVD_ROOT_PEER="tcp://10.77.0.1:$port" "$@"
}

# Open MPI's own launcher now and then loses its daemon in the second
# namespace before any rank starts ("ORTE does not know how to route a
# message to the specified daemon"): no hvd code has run, so that launch,
# and only that, is tried again (3 tries)
launch_lost() {
        grep -aEq "ORTE does not know how to route|ORTE was unable to reliably start|ORTE daemon has unexpectedly failed|lost communication with a remote daemon" "$1"
}

# mpi_tries OUT ARGS...: mpi ARGS... >OUT, again while its launch was lost
mpi_tries() {
        _out=$1
        shift
        for _try in 1 2 3; do
                mpi "$@" >"$_out" 2>&1
                _rc=$?
                launch_lost "$_out" || return "$_rc"
                echo "note: Open MPI lost its launch (try $_try): $(grep -a -m1 ORTE "$_out")" >&2
                cp "$_out" "$_out.$_try"
        done
        return "$_rc"
}

mpi_tries "$tmp/held.out" -x HVD_TEST_HOLD="$tmp/hold" -np 4 "$HVD_BUILDDIR/tests/worker_collectives" barrier &
held=$!
# the hold point, while the job (or a try of its launch) still runs
for _ in $(seq 1800); do
        [ -e "$tmp/hold.ready" ] || ! kill -0 "$held" 2>/dev/null && break
        sleep 0.1
done
[ -e "$tmp/hold.ready" ] || fail "the job did not reach its hold point" "$(cat "$tmp/held.out"*)"
root_dir=$(ls -d "$tmp/hvd-$(id -u)"/j-*-0)
"$HVD_BUILDDIR/tools/hvdctl" -r "$root_dir" jobs >"$tmp/jobs" 2>&1 || fail "hvdctl jobs: exit $?" "$(cat "$tmp/jobs")"
id=$(cut -d' ' -f1 "$tmp/jobs")
"$HVD_BUILDDIR/tools/hvdctl" -r "$root_dir" job "$id" >"$tmp/job" 2>&1 || fail "hvdctl job: exit $?" "$(cat "$tmp/job")"
{ grep -q "^job $id: running, 4 ranks on 2 hosts (2 here), .*, negotiated here$" "$tmp/job" &&
        grep -q "^  placed by: Open MPI$" "$tmp/job"; } || fail "hvdctl job $id on the first host" "$(cat "$tmp/job")"
[ "$(find "$tmp/hvd-$(id -u)" -name 'j-*' | wc -l)" -eq 2 ] || fail "not one job directory per host"
touch "$tmp/hold.go"
wait "$held" || fail "the held job failed: exit status $?" "$(cat "$tmp/held.out")"
held=
echo "ok: MPIJob on 2 hosts: $(head -n 1 "$tmp/job")"

mpi_tries "$tmp/out" -np 4 "$HVD_BUILDDIR/examples/train_mlp" --synthetic -q -e 1 ||
        fail "mpirun on 2 hosts, train_mlp: exit status $?" "$(cat "$tmp/out")"
line=$(grep -a "final weights identical on all" "$tmp/out")
{ [ "$(echo "$line" | wc -l)" -eq 1 ] && echo "$line" | grep -q "on all 4 ranks (checksum 0x"; } ||
        fail "mpirun on 2 hosts: not one job of 4 ranks with identical weights" "$(cat "$tmp/out")"
[ -z "$(ls -A "$tmp/hvd-$(id -u)")" ] || fail "job directories left behind" "$(ls -la "$tmp/hvd-$(id -u)")"
echo "ok: MPIJob on 2 hosts, train_mlp: $line"
