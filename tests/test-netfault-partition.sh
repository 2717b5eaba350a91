#!/bin/bash
# test-netfault-partition.sh — a network partition between two test hosts
# in the middle of a spanning job (nftables drop in host b's namespace):
# both directions, then a→b only, then b→a only. Every rank of the job must
# be told within the peer timeout + 1 s (plus slack for a loaded machine)
# which job, host and ranks were lost and why; a job local to each daemon
# completes during the partition; after healing, a new spanning job
# completes with exact results. See tests/lib/netfault.sh.
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
