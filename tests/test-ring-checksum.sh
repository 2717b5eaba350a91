#!/bin/bash
# test-ring-checksum.sh — the optional CRC-32C on the TCP ring between
# nodes (HVD_RING_CHECKSUM=1 on a worker, or ring_checksum = yes in a
# daemon's configuration): with it on, every collective stays exact; data
# corrupted in transit fails the job with an error naming the sending rank
# and the chunk, on every rank, instead of a wrong result.
#
# Corruption comes from a test hook in client/tcp.c
# (HVD_TEST_RING_CORRUPT=RANK:CHUNK: that rank flips one bit of the CHUNK-th
# frame it sends on each ring connection, after computing the frame's
# checksum). It models what the checksum is for — a fault between the
# sender's memory and the receiver's that TCP's own 16-bit checksum misses —
# at a chosen, reproducible place: flipping bytes in the kernel's TCP
# stream is not possible from a test without a proxy that terminates TCP,
# and the ring's connections go to addresses the daemons hand out, so a
# proxy could not be put between two ranks without changing the library.
# The same hook with the checksum off gives a wrong result (the worker's
# own exactness check catches it): that shows the hook corrupts, and that
# the checksum is what turns the corruption into an error.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
multi=$HVD_SRCDIR/tests/lib/launch-multi.sh
smoke=$HVD_BUILDDIR/tests/worker_smoke
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# exact results with the checksum on (every rank exits 0, rank 0 prints the
# success line after its comparisons): one rank per host (the ring runs on
# the outputs) and several (through shared memory), over 2 and 3 hosts
for layout in a:1,b:1 a:2,b:1,c:1; do
        out=$(HVD_RING_CHECKSUM=1 "$multi" -H "$layout" -t 90 -- "$smoke" 2500000 2>&1) ||
                fail "worker_smoke on $layout with the ring checksum failed" "$out"
        n=$(echo "$layout" | tr ',' '\n' | awk -F: '{s += $2} END {print s}')
        echo "$out" | grep -q "coll ok size $n" || fail "worker_smoke on $layout with the ring checksum: no success line" "$out"
        echo "ok: every collective exact on $layout with the ring checksum"
done

# corruption, checksum on through the workers' environment: every rank
# reports the mismatch, naming the sender and the chunk
expect_mismatch() { # layout corrupt sender_rank chunk [env...]
        local layout=$1 hook=$2 sender=$3 chunk=$4
        shift 4
        local out
        out=$(env "$@" HVD_TEST_RING_CORRUPT="$hook" "$multi" -H "$layout" -t 90 -- "$smoke" 2500000 2>&1) &&
                fail "a job whose ring data was corrupted ($layout, $hook) succeeded" "$out"
        echo "$out" | grep -q "coll ok" && fail "a rank completed the collectives despite the corruption" "$out"
        local n
        n=$(echo "$layout" | tr ',' '\n' | awk -F: '{s += $2} END {print s}')
        for ((r = 0; r < n; r++)); do
                echo "$out" | grep -E "^\[$r@[a-z]+\] " |
                        grep -q "checksum mismatch in data from rank $sender (chunk $chunk on that connection" ||
                        fail "rank $r did not report the checksum mismatch from rank $sender, chunk $chunk" "$out"
        done
}
expect_mismatch a:1,b:1 0:3 0 3 HVD_RING_CHECKSUM=1
echo "ok: a corrupted chunk from rank 0 is reported by both ranks"
expect_mismatch a:2,b:1,c:1 3:1 3 1 HVD_RING_CHECKSUM=1
echo "ok: a corrupted chunk from rank 3 is reported by all 4 ranks on 3 hosts"

# checksum on through one daemon's configuration only (the root's peer
# hands the job's setting to every node)
printf 'ring_checksum = yes\n' >"$tmp/ck.conf"
out=$(HVD_TEST_DAEMON_ARGS="--config $tmp/ck.conf" "$multi" -H a:1,b:1 -t 90 -- "$smoke" 2500000 2>&1) ||
        fail "worker_smoke with ring_checksum = yes failed" "$out"
echo "$out" | grep -q "coll ok size 2" || fail "ring_checksum = yes: no success line" "$out"
expect_mismatch a:1,b:1 1:2 1 2 HVD_TEST_DAEMON_ARGS="--config $tmp/ck.conf"
echo "ok: ring_checksum = yes in the daemons' configuration turns the check on"

# the same corruption with the checksum off: a wrong result, caught only by
# the worker's own comparison
out=$(HVD_TEST_RING_CORRUPT=0:3 "$multi" -H a:1,b:1 -t 90 -- "$smoke" 2500000 2>&1) &&
        fail "the corruption hook changed nothing with the checksum off" "$out"
echo "$out" | grep -q "checksum mismatch" && fail "a checksum was checked although it is off" "$out"
echo "$out" | grep -qE "^\[[01]@[ab]\] rank [01]: " || fail "no rank reported the wrong result" "$out"
echo "ok: without the checksum the same corruption gives a wrong result"
