#!/bin/bash
# test-netfault-loss.sh — random packet loss between two test hosts
# (nftables "numgen random mod 100 < N drop" both ways, in host b's
# namespace). Mild loss (2 %): TCP retransmits, and a spanning job of
# allreduces completes with every result exact. Heavy loss (90 %) in the
# middle of a job: every rank is told within the collective timeout + 1 s
# (plus slack for a loaded machine) which job and host/rank it lost and why,
# a local job completes meanwhile, and after healing a new spanning job
# completes. See tests/lib/netfault.sh.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
. "$HVD_SRCDIR/tests/lib/netfault.sh"
nf_setup
nf_need_nft
NF_LIMIT_MS=$((NF_COLL_TIMEOUT_MS + 1000 + NF_SLACK_MS))

loss() {
        nf_nft add rule inet hvdnf input ip saddr "$NF_IPA" numgen random mod 100 \< "$1" counter drop &&
                nf_nft add rule inet hvdnf output ip daddr "$NF_IPA" numgen random mod 100 \< "$1" counter drop
}

# mild: 30 allreduces of 1 MiB across the lossy link, all exact
loss 2 || fail "cannot add the loss rules"
dir=$NF_BASE/mild
t0=$(nf_now)
nf_spawn "$dir" "nf-$nf_tag-mild" 30 262144 60
st=0
for p in "${NF_RPIDS[@]}"; do wait "$p" || st=1; done
ms=$(($(nf_now) - t0))
{ [ $st -eq 0 ] && grep -q "netfault: ok 30 iterations" "$dir/rank0" && grep -q "netfault: ok 30 iterations" "$dir/rank1"; } ||
        fail "mild loss: the job did not complete exactly" "$(cat "$dir"/rank*; tail -n 5 "$NF_BASE"/a.log "$NF_BASE"/b.log)"
dropped=0
for c in input output; do
        n=$(nf_nft list chain inet hvdnf $c | sed -n 's/.*counter packets \([0-9]*\).*/\1/p' | head -n 1)
        dropped=$((dropped + ${n:-0}))
done
[ "$dropped" -gt 0 ] || fail "mild loss: the rules dropped nothing (the job did not cross the lossy link?)"
echo "ok: mild-loss (2 %): 30 allreduces of 1 MiB exact in $ms ms, $dropped packets dropped"
nf_heal_nft

heavy() { loss 90; }
lost_b='(lost contact with host b \(ranks \[1\]\)|rank 1 \([0-9.:]+\): timed out|host b: rank 1: .*timed out)'
lost_a='(lost contact with the root daemon at [^ ]* \(host a, ranks \[0\]\)|rank 0 \([0-9.:]+\): timed out|rank 0 \(host a\): .*timed out)'
# one packet in ten still crosses: the side that gives up first may tell
# the other why (b's rank can end with the root's "lost contact with host
# b"), so either verdict is what happened
nf_case heavy-loss heavy nf_heal_nft "a b" "$lost_b" "($lost_a|$lost_b)"
