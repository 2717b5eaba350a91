#!/bin/bash
# test-ring-knobs.sh — the TCP ring's frame size (HVD_TCP_FRAME_BYTES) and
# the chunk size of the hierarchical allreduce across nodes
# (HVD_RING_CHUNK_BYTES), the knobs the autotuner switches: every
# collective exact (tests/worker_smoke, 10 MB tensors) with frames of
# 4 KiB (the least: many frames a ring step) and 64 KiB, chunks of 256 KiB
# and 2 MiB (many chunks a fused buffer), with the per-frame checksum on
# (both ends must cut the frames alike); on 2 hosts of 2 ranks (the
# hierarchical path, chunked) and 3 hosts of one (one ring, unchunked).
# A value out of range fails hvd_init naming it; ranks that frame
# otherwise fail the checksum (the size is in force).
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
multi=$HVD_SRCDIR/tests/lib/launch-multi.sh
worker=$HVD_BUILDDIR/tests/worker_smoke
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for bad in HVD_TCP_FRAME_BYTES=1k HVD_TCP_FRAME_BYTES=x HVD_RING_CHUNK_BYTES=100; do
        out=$(env HVD_JOB_ID=bad HVD_JOB_SECRET=00 HVD_RANK=0 HVD_SIZE=2 HVD_LOCAL_RANK=0 HVD_LOCAL_SIZE=2 \
                "$bad" timeout 20 "$worker" 1000 2>&1) && fail "$bad was accepted"
        case $out in
        *"${bad%%=*}='${bad#*=}'"*) ;;
        *) fail "$bad: the error does not name the variable and its value" "$out" ;;
        esac
done
echo "ok: a frame or chunk size out of range fails hvd_init, naming it"

for layout in a:2,b:2 a:1,b:1,c:1; do
        n=$(echo "$layout" | tr ',' '\n' | awk -F: '{s += $2} END {print s}')
        for knobs in "4096 262144" "65536 2097152"; do
                read -r frame chunk <<<"$knobs"
                HVD_TCP_FRAME_BYTES=$frame HVD_RING_CHUNK_BYTES=$chunk HVD_RING_CHECKSUM=1 \
                        "$multi" -H "$layout" -t 120 -- "$worker" 2500000 >"$tmp/out" 2>&1 ||
                        fail "worker_smoke on $layout, frames $frame, chunks $chunk failed" "$(tail -20 "$tmp/out")"
                grep -q "coll ok size $n" "$tmp/out" ||
                        fail "worker_smoke on $layout, frames $frame, chunks $chunk: no success line" "$(tail -20 "$tmp/out")"
                echo "ok: every collective exact on $layout with frames of $frame bytes and chunks of $chunk, checksummed"
        done
done

# the frame size is in force: a rank that frames otherwise than its peer
# fails the checksum (which is why every rank must set it alike)
# shellcheck disable=SC2016 # expanded by the worker's shell
HVD_RING_CHECKSUM=1 "$multi" -H a:1,b:1 -t 60 -- sh -c 'if [ "$HVD_RANK" = 0 ]; then export HVD_TCP_FRAME_BYTES=4096; fi
exec "$0" 2500000' "$worker" >"$tmp/out" 2>&1 && fail "ranks framing alike and otherwise both passed the checksum" "$(tail "$tmp/out")"
grep -q "checksum mismatch in data from rank 0" "$tmp/out" || fail "the mismatch was not the checksum's" "$(tail "$tmp/out")"
echo "ok: frames of 4 KiB on rank 0 and 256 KiB on rank 1 fail the checksum: the size is in force"
