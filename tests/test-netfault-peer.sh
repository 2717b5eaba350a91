#!/bin/bash
# test-netfault-peer.sh — a peer daemon lost in the middle of a job that
# spans two test hosts (network namespaces): kill -9 of the other host's
# daemon, kill -9 of the job's root daemon, and the root daemon killed and
# restarted at once (a new epoch: the job it forgot is aborted on the other
# host instead of being carried on). The ranks whose own daemon died are
# told "coordinator lost"; the others which host and ranks were lost and
# why, within the peer timeout + 1 s (plus slack for a loaded machine). A
# job local to each surviving daemon completes meanwhile; after a restart,
# a new spanning job completes, also after the daemons were idle for longer
# than the peer timeout. See tests/lib/netfault.sh.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
. "$HVD_SRCDIR/tests/lib/netfault.sh"
nf_setup
NF_LIMIT_MS=$((NF_PEER_TIMEOUT_MS + 1000 + NF_SLACK_MS))

kill_b() { kill -KILL "${NF_DPID[b]}"; wait "${NF_DPID[b]}" 2>/dev/null; }
kill_a() { kill -KILL "${NF_DPID[a]}"; wait "${NF_DPID[a]}" 2>/dev/null; }
restart_b() { nf_start_daemon b; }
restart_a() { nf_start_daemon a; }
restart_ms=
kill_restart_a() {
        local t
        t=$(nf_now)
        kill_a
        nf_start_daemon a
        restart_ms=$(($(nf_now) - t))
}
nothing() { :; }
lost_b='lost contact with host b \(ranks \[1\]\): (the connection to its daemon closed|its daemon was silent)'
lost_a='host a,? \(?ranks \[0\]\)?.*(restarted|silent|no longer knows)'
orphan='coordinator lost: hvd-coordinatord \(pid [0-9]+\) exited'
nf_case kill-b kill_b restart_b "a" "$lost_b" "$orphan"
nf_case kill-root-a kill_a restart_a "b" "$orphan" "$lost_a"
nf_case restart-root-a kill_restart_a nothing "a b" "$orphan" "$lost_a"
# restarted well within the peer timeout, so the other host must have told
# the restart apart from silence: by the new epoch of the root's heartbeat
# answer, or by the root's answer that it does not know the job (whichever
# came first)
if [ "$restart_ms" -lt $((NF_PEER_TIMEOUT_MS / 2)) ]; then
        how=$(grep -oE "restarted \(epoch [0-9a-f]*, was [0-9a-f]*\)|no longer knows the job \(restarted" \
                "$NF_BASE/case-restart-root-a/rank1") ||
                fail "restart-root-a: rank 1 was not told that the root daemon restarted" \
                        "$(cat "$NF_BASE/case-restart-root-a/rank1")"
        echo "ok: the restarted root daemon (back in $restart_ms ms) was recognised: $how"
else
        echo "note: the root daemon took $restart_ms ms to restart; the epoch check was not asserted"
fi

# a daemon idle for longer than the peer timeout (no job, so no heartbeat)
# is not taken for lost when the next spanning job comes
sleep $(((NF_PEER_TIMEOUT_MS + 500) / 1000)).5
nf_good idle-peer
echo "ok: idle-peer: a spanning job after the daemons were idle longer than the peer timeout"
