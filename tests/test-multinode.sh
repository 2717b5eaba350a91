#!/bin/bash
# test-multinode.sh — one job over three daemons on loopback (their own
# runtime directories and peer ports), 2..6 workers spread unevenly: every
# collective with exact results (tests/worker_smoke), including buffers
# larger than the shared-memory slot; every allreduce and reducescatter of
# tests/worker_collectives where hosts of one rank meet hosts of several,
# reducescatter's ring between hosts of one and of two ranks each, empty
# tensors across hosts,
# and on 2-5 hosts float results that are the same bits on every rank;
# broadcast from every root down a chain of 3 hosts, allgather, alltoall,
# by host where hosts have several ranks; ranks numbered round-robin over
# the hosts; process sets whose ranks are on several hosts;
# the training example on the digits; a host that never
# joins (start timeout naming the host and its ranks); a killed worker on a
# remote node (every rank told, quickly).
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
. "$HVD_SRCDIR/tests/lib/train_mlp.sh"
multi=$HVD_SRCDIR/tests/lib/launch-multi.sh

for layout in a:1,b:1 a:2,b:1 a:1,b:1,c:1 a:2,b:1,c:1 a:1,b:3,c:1 a:2,b:1,c:3; do
        out=$("$multi" -H "$layout" -t 60 -- "$HVD_BUILDDIR/tests/worker_smoke" 2500000 2>&1) ||
                fail "worker_smoke on $layout failed:" "$out"
        n=$(echo "$layout" | tr ',' '\n' | awk -F: '{s += $2} END {print s}')
        echo "$out" | grep -q "coll ok size $n" || fail "worker_smoke on $layout: no success line" "$out"
        echo "ok: every collective exact on $layout"
done

# every dtype, op and size of allreduce (up to 9.4 M elements, past the
# shared-memory chunk) and reducescatter, where a host of one rank meets
# hosts of several: each node's rings across nodes must cut the tensor
# alike (one host's whole-tensor ring beside another's chunks summed
# misaligned parts, silently); and float allreduces whose result depends
# on the order of the ranks, the same bits on every rank, on both sides of
# 64 KiB, 256 KiB between 2 hosts (recursive doubling below, the ring above):
# 2 hosts, 3 (one folded into its neighbour), 4 (two doublings) and 5
# (both); a group of 8 three times (from each host's board once known)
for layout in a:2,b:1 a:1,b:3,c:1 a:1,b:1,c:1,d:1 a:1,b:1,c:1,d:1,e:1; do
        n=$(echo "$layout" | tr ',' '\n' | awk -F: '{s += $2} END {print s}')
        out=$("$multi" -H "$layout" -t 120 -- "$HVD_BUILDDIR/tests/worker_collectives" allreduce reducescatter same-bits \
                grouped 2>&1) || fail "allreduce, reducescatter, same-bits and grouped on $layout failed" "$out"
        for sc in allreduce reducescatter same-bits grouped; do
                [ "$(echo "$out" | grep -c "$sc: ok")" -eq "$n" ] || fail "not every rank passed $sc on $layout" "$out"
        done
        echo "ok: allreduce, reducescatter and a group exact, the same bits everywhere, on $layout"
done

# reducescatter where it is a ring reduce-scatter on every size: between 2
# hosts of one rank (inputs to outputs) and of two (per slice of the
# shared-memory chunk, two ranks driving the network on each host); the
# edge cases (empty tensors of every collective, whose buffers may be
# NULL) across hosts
for layout in a:1,b:1 a:2,b:2; do
        n=$(echo "$layout" | tr ',' '\n' | awk -F: '{s += $2} END {print s}')
        out=$("$multi" -H "$layout" -t 120 -- "$HVD_BUILDDIR/tests/worker_collectives" reducescatter edges 2>&1) ||
                fail "reducescatter and edges on $layout failed" "$out"
        for sc in reducescatter edges; do
                [ "$(echo "$out" | grep -c "$sc: ok")" -eq "$n" ] || fail "not every rank passed $sc on $layout" "$out"
        done
        echo "ok: reducescatter exact and the edge cases on $layout"
done

# broadcast from every root (fused members of every dtype, in and out of
# place, 20 MiB ones over many frames) down the chain of hosts, where a
# middle rank forwards each frame from its own output as it arrives;
# allgather and alltoall with uneven rows. On a:2,b:2 both go by host (a
# chain or ring of one local rank a host, then shared memory on each);
# on a:2,b:1,c:1 a broadcast from local rank 0 goes by host, from local
# rank 1 over all ranks
for layout in a:1,b:1,c:1 a:2,b:1,c:1 a:2,b:2; do
        n=$(echo "$layout" | tr ',' '\n' | awk -F: '{s += $2} END {print s}')
        out=$("$multi" -H "$layout" -t 120 -- "$HVD_BUILDDIR/tests/worker_collectives" broadcast allgather alltoall \
                2>&1) || fail "broadcast, allgather and alltoall on $layout failed" "$out"
        for sc in broadcast allgather alltoall; do
                [ "$(echo "$out" | grep -c "$sc: ok")" -eq "$n" ] || fail "not every rank passed $sc on $layout" "$out"
        done
        echo "ok: broadcast from every root, allgather and alltoall exact on $layout"
done

# ranks numbered round-robin over the hosts (mpirun --map-by node, Slurm's
# cyclic distribution): a host's ranks are not one range of an allgather's
# output, which then takes the ring over all ranks; every collective exact
for layout in a:2,b:2 a:2,b:2,c:2; do
        n=$(echo "$layout" | tr ',' '\n' | awk -F: '{s += $2} END {print s}')
        out=$(HVD_TEST_RANK_ORDER=cyclic "$multi" -H "$layout" -t 120 -- "$HVD_BUILDDIR/tests/worker_collectives" \
                allreduce reducescatter broadcast allgather alltoall edges 2>&1) ||
                fail "every collective with cyclic ranks on $layout failed" "$out"
        for sc in allreduce reducescatter broadcast allgather alltoall edges; do
                [ "$(echo "$out" | grep -c "$sc: ok")" -eq "$n" ] ||
                        fail "not every rank passed $sc with cyclic ranks on $layout" "$out"
        done
        echo "ok: every collective exact with ranks round-robin over the hosts of $layout"
done

# process sets whose ranks are on several hosts (the even and the odd
# ranks: one of each host of a:2,b:2 and a:2,b:2,c:2, on a:1,b:2,c:1 two
# hosts each), their members over TCP among themselves while the job's
# own collectives go on between them
for layout in a:2,b:2 a:2,b:2,c:2 a:1,b:2,c:1; do
        n=$(echo "$layout" | tr ',' '\n' | awk -F: '{s += $2} END {print s}')
        out=$("$multi" -H "$layout" -t 120 -- "$HVD_BUILDDIR/tests/worker_collectives" process-sets \
                process-sets-grouped process-sets-same-name 2>&1) || fail "process sets across hosts of $layout failed" "$out"
        for sc in process-sets process-sets-grouped process-sets-same-name; do
                [ "$(echo "$out" | grep -c "$sc: ok")" -eq "$n" ] || fail "not every rank passed $sc on $layout" "$out"
        done
        echo "ok: process sets across the hosts of $layout"
done

log=$(mktemp)
"$multi" -H a:2,b:1,c:1 -t 60 -- "$HVD_BUILDDIR/examples/train_mlp" -e "$TRAIN_MLP_EPOCHS" -q >"$log" 2>&1 ||
        fail "train_mlp over 3 hosts failed" "$(cat "$log")"
found=$(train_mlp_outcome "$log" 4) || fail "train_mlp over 3 hosts: $found" "$(cat "$log")"
rm -f "$log"
echo "ok: training on the digits over 3 hosts: $found"

# a host that never joins
start=$(date +%s%N)
out=$(HVD_TEST_SKIP_HOSTS=c HVD_TEST_DAEMON_ARGS="--start-timeout 2s" \
        "$multi" -H a:2,b:1,c:2 -t 30 -- "$HVD_BUILDDIR/tests/worker_smoke" 2>&1) && fail "a job missing host c succeeded" "$out"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
for r in 0 1 2; do
        echo "$out" | grep -q "^\[$r@.*start timeout: 2 of 3 hosts joined within 2.0 s; missing hosts \[c\], missing ranks \[3, 4\]" ||
                fail "rank $r did not report the missing host and ranks" "$out"
done
[ "$ms" -lt 8000 ] || fail "start timeout took $ms ms"
echo "ok: missing host reported on every rank in $ms ms"

# a worker killed on a remote node
log=$(mktemp)
"$multi" -H a:2,b:1,c:2 -t 60 -- "$HVD_BUILDDIR/examples/train_mlp" -e 100000 -q --synthetic >"$log" 2>&1 &
lpid=$!
for _ in $(seq 100); do
        victim=$(pgrep -f '^[^ ]*train_mlp -e 100000' | sort -n | tail -n 1)
        [ -n "$victim" ] && [ "$(pgrep -fc '^[^ ]*train_mlp -e 100000')" -ge 5 ] && break
        sleep 0.1
done
sleep 1.5
lost=$(tr '\0' '\n' <"/proc/$victim/environ" | sed -n 's/^HVD_RANK=//p')
kill -9 "$victim"
start=$(date +%s%N)
wait $lpid
ms=$(( ($(date +%s%N) - start) / 1000000 ))
# the ranks' own lines, not the daemon logs printed after a failure
n=$(grep -cE "^\[[0-9]+@[a-z]+\] .*rank $lost \(pid $victim on host [a-z]+\) .*without calling hvd_shutdown" "$log")
[ "$n" -eq 4 ] || fail "$n of 4 surviving ranks were told that rank $lost was lost" "$(cat "$log")"
[ "$ms" -lt 5000 ] || fail "the job took $ms ms to end after the kill"
rm -f "$log"
echo "ok: killed remote worker reported on every rank in $ms ms"
