#!/bin/bash
# test-netfault-partition.sh — a network partition between two test hosts
# in the middle of a spanning job (nftables drop in host b's namespace):
# both directions, then a→b only, then b→a only. Every rank of the job must
# be told within the peer timeout + 1 s (plus slack for a loaded machine)
# which job, host and ranks were lost and why; a job local to each daemon
# completes during the partition; after healing, a new spanning job
# completes with exact results. A partition of the data plane only (the
# daemons still talk): mid-job, and before the ranks' first connection (a
# connect into a partition ends at the collective timeout, not after the
# kernel's SYN retries); each rank names the job, the peer rank and its
# address, and the timeout. See tests/lib/netfault.sh.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
. "$HVD_SRCDIR/tests/lib/netfault.sh"
nf_setup
nf_need_nft
NF_LIMIT_MS=$((NF_PEER_TIMEOUT_MS + 1000 + NF_SLACK_MS))

both() { nf_nft add rule inet hvdnf input ip saddr "$NF_IPA" drop && nf_nft add rule inet hvdnf output ip daddr "$NF_IPA" drop; }
a_to_b() { nf_nft add rule inet hvdnf input ip saddr "$NF_IPA" drop; }
b_to_a() { nf_nft add rule inet hvdnf output ip daddr "$NF_IPA" drop; }
# rank 0 (host a) must hear that host b and its rank 1 were lost, rank 1 that host a and rank 0 were
lost_b='host b.*rank.? \[?1\]?.*(silent|lost|unreachable)|(silent|lost|unreachable).*host b.*rank.? \[?1'
lost_a='host a.*rank.? \[?0\]?.*(silent|lost|unreachable)|(silent|lost|unreachable).*host a.*rank.? \[?0'
nf_case partition-both both nf_heal_nft "a b" "$lost_b" "$lost_a"
nf_case partition-a-to-b a_to_b nf_heal_nft "a b" "$lost_b" "$lost_a"
nf_case partition-b-to-a b_to_a nf_heal_nft "a b" "$lost_b" "$lost_a"

# the data plane only: the daemons' connection (a's port 7100) stays up
data_only() {
        nf_nft add rule inet hvdnf input ip saddr "$NF_IPA" tcp sport != 7100 drop &&
                nf_nft add rule inet hvdnf output ip daddr "$NF_IPA" tcp dport != 7100 drop
}
NF_LIMIT_MS=$((NF_COLL_TIMEOUT_MS + 1000 + NF_SLACK_MS))
# each rank names its own timeout, or the other rank's, relayed by the daemons
dp='(connecting to|exchanging data with|waiting for a connection from) rank'
dp_b="($dp 1 \\([0-9.:]+\\): timed out|host b: rank 1: $dp 0 \\([0-9.:]+\\): timed out)"
dp_a="($dp 0 \\([0-9.:]+\\): timed out|rank 0 \\(host a\\): $dp 1 \\([0-9.:]+\\): timed out)"
nf_case data-partition data_only nf_heal_nft "a b" "$dp_b" "$dp_a"

# before the first collective: rank 0 connects to rank 1 into the partition
dir=$NF_BASE/data-partition-connect
NF_GO=$dir/go nf_spawn "$dir" "nf-$nf_tag-connect" 5 65536 30
for _ in $(seq 300); do [ -e "$dir/joined.0" ] && [ -e "$dir/joined.1" ] && break; sleep 0.05; done
{ [ -e "$dir/joined.0" ] && [ -e "$dir/joined.1" ]; } || fail "data-partition-connect: the job did not start" "$(cat "$dir"/rank*)"
data_only || fail "cannot add the rules"
t0=$(nf_now)
touch "$dir/go"
for p in "${NF_RPIDS[@]}"; do wait "$p"; done
report=
for r in 0 1; do
        line=$(grep -m1 "^rank $r: netfault: ERROR at" "$dir/rank$r") || fail "data-partition-connect: rank $r did not fail" "$(cat "$dir/rank$r")"
        re=$dp_b
        [ $r = 1 ] && re=$dp_a
        { [[ $line =~ $re ]] && [[ $line == *"nf-$nf_tag-connect"* ]]; } ||
                fail "data-partition-connect: rank $r's error does not name the job, peer and timeout" "$line"
        at=${line#*ERROR at }
        ms=$((${at%% *} - t0))
        [ $ms -le $NF_LIMIT_MS ] || fail "data-partition-connect: rank $r took $ms ms (limit $NF_LIMIT_MS ms)"
        report+=" rank$r=${ms}ms"
        echo "  rank $r: ${line#*: netfault: }"
done
nf_heal_nft
nf_good data-partition-connect
echo "ok: data-partition-connect: detect$report (limit $NF_LIMIT_MS ms); a new spanning job completed after healing"
