#!/bin/bash
# test-tcp-send-thread.sh — the TCP ring's sender thread between nodes
# (client/tcp.c: an exchange of at least 1 MiB each way sends on a thread
# named hvd-tcp-send while the background thread receives and reduces).
# With HVD_TCP_SEND_THREAD on, off and unset (off), over two hosts (one
# connection carries both directions) and three (a ring: another peer
# each way): every collective exact (tests/worker_smoke, 10 MB tensors);
# the thread exists in a worker when on, never otherwise.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
multi=$HVD_SRCDIR/tests/lib/launch-multi.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run LAYOUT VALUE: worker_smoke on LAYOUT with HVD_TCP_SEND_THREAD=VALUE
# (unset for VALUE "unset"); prints whether a worker ever had the sender
# thread (yes/no)
run() {
        local layout=$1 v=$2 n seen=no pid set=(HVD_TCP_SEND_THREAD="$2")
        [ "$v" = unset ] && set=()
        n=$(echo "$layout" | tr ',' '\n' | awk -F: '{s += $2} END {print s}')
        # the tag tells this test's workers from those of tests running beside it
        env -u HVD_TCP_SEND_THREAD "${set[@]}" SEND_THREAD_TEST_TAG="$tmp" "$multi" -H "$layout" -t 90 -- "$HVD_BUILDDIR/tests/worker_smoke" 2500000 \
                >"$tmp/out" 2>&1 &
        pid=$!
        # once started, the thread lives until hvd_shutdown: look while the job runs
        while kill -0 "$pid" 2>/dev/null; do
                for w in $(pgrep -f '^[^ ]*worker_smoke 2500000'); do
                        tr '\0' '\n' <"/proc/$w/environ" 2>/dev/null | grep -qx "SEND_THREAD_TEST_TAG=$tmp" || continue
                        grep -qx hvd-tcp-send /proc/"$w"/task/*/comm 2>/dev/null && seen=yes
                done
                sleep 0.05
        done
        wait "$pid" || fail "worker_smoke on $layout with HVD_TCP_SEND_THREAD=$v failed" "$(cat "$tmp/out")"
        grep -q "coll ok size $n" "$tmp/out" ||
                fail "worker_smoke on $layout with HVD_TCP_SEND_THREAD=$v: no success line" "$(cat "$tmp/out")"
        echo "$seen"
}

for layout in a:1,b:1 a:1,b:1,c:1; do
        seen=$(run "$layout" 1) || exit 1
        [ "$seen" = yes ] || fail "$layout, HVD_TCP_SEND_THREAD=1: no worker had the hvd-tcp-send thread"
        echo "ok: every collective exact on $layout with the sender thread"
        for v in 0 unset; do
                seen=$(run "$layout" $v) || exit 1
                [ "$seen" = no ] || fail "$layout, HVD_TCP_SEND_THREAD=$v: a worker had the hvd-tcp-send thread"
                echo "ok: every collective exact on $layout on one thread (HVD_TCP_SEND_THREAD $v)"
        done
done
