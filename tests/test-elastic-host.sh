#!/bin/bash
# test-elastic-host.sh — elastic jobs on emulated hosts: every rank of a
# host killed (the next generation on the other host alone), a rank killed
# as it enters a generation while the others sync the state (one more
# reset, the job finishes), and the discovery script removing a host while
# adding another.
. "${HVD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/elastic/lib.sh"

ELASTIC_EXIT=1:1:2:2:kill9,1:1:2:3:kill9 run host -np 4 -H a:2,b:2 --min-np 2 --max-np 4
[ "$rc" -eq 0 ] || fail "host b failing: exit status $rc"
check_generation 2 2 "a a"
check_results 2
ok "every rank of host b killed: generation 2 on host a alone"

ELASTIC_EXIT=1:1:3:1:kill9 ELASTIC_SYNC_EXIT=2:2 run sync -np 4 -H a:2,b:2 --min-np 2 --max-np 4
[ "$rc" -eq 0 ] || fail "a rank lost during the state sync: exit status $rc"
grep -q 'job .*\.g2 aborted: .*rank 2 (pid [0-9]* on host b) was killed by SIGKILL' "$tmp/out" ||
        fail "generation 2 did not end with rank 2's death"
[ -z "$(gen_lines 2)" ] || fail "generation 2 got past its sync"
check_generation 3 2 "a b"
check_results 2
ok "rank 2 of generation 2 killed while the others sync the state: generation 3 of 2 ranks, finished"

# the discovery script drops host b and lists host c at the same time
printf '0 0 a:2,b:2\n0 4 a:2,c:2\n' >"$tmp/schedule"
ELASTIC_WAIT=0:4:a+a+c+c run replace -np 4 -H a:2,b:2 --min-np 2 --max-np 4 \
        --host-discovery-script "$S/tests/elastic/discover.sh $tmp/progress $tmp/schedule"
[ "$rc" -eq 0 ] || fail "host b replaced by host c: exit status $rc"
grep -q 'hvdrun: host b is no longer discovered: stopping worker 2' "$tmp/out" || fail "host b's workers were not stopped"
grep -q 'hvdrun: host c discovered: starting workers there' "$tmp/out" || fail "host c was not started"
last=$(grep -o 'ELASTIC gen=[0-9]*' "$tmp/out" | sort -t= -k2 -n | tail -n 1 | cut -d= -f2)
check_generation "$last" 4 "a a c c"
check_results 4
ok "host b removed and host c added by the discovery script: generation $last of 4 ranks on a and c"
