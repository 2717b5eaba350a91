#!/bin/bash
# test-elastic-grow.sh — elastic jobs on emulated hosts whose discovery
# script's host list changes with the training's progress: a host added
# (its workers wait, every rank sees HostsUpdatedInterrupt at the same
# commit, the new ranks come after the old ones and get the state), a job
# fallen below --min-np that a new host completes (no deadlock), a host
# blacklisted after a failure that gets workers again after its cool-down, and a
# script that prints garbage or fails (a clear error; the job keeps its
# hosts).
. "${HVD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/elastic/lib.sh"
disc="$S/tests/elastic/discover.sh $tmp/progress $tmp/schedule"

printf '0 0 a:2\n1 0 a:2,b:2\n' >"$tmp/schedule"
ELASTIC_WAIT=1:2:a+a+b+b run grow -np 2 -H a:2 --min-np 2 --max-np 4 --host-discovery-script "$disc"
[ "$rc" -eq 0 ] || fail "host b added: exit status $rc"
grep -q 'hvdrun: host b discovered: starting workers there' "$tmp/out" || fail "host b was not started"
check_generation 1 2 "a a"
last=$(grep -o 'ELASTIC gen=[0-9]*' "$tmp/out" | sort -t= -k2 -n | tail -n 1 | cut -d= -f2)
check_generation "$last" 4 "a a b b"
[ "$(gen_lines "$last" | field sync | sort -u)" = 1 ] || fail "generation $last does not sync on every rank"
check_results 4
ok "host b added with 2 slots: generation $last of 4 ranks, the new ones after, all synced"

printf '0 0 a:1,b:1\n1 1 a:1,c:1\n' >"$tmp/schedule"
ELASTIC_EXIT=1:1:1:1:kill9 run below -np 2 -H a:1,b:1 --min-np 2 --max-np 2 --elastic-timeout 60 \
        --host-discovery-script "$disc"
[ "$rc" -eq 0 ] || fail "below --min-np, then host c: exit status $rc"
check_generation 2 2 "a c"
check_results 2
ok "rank 1 lost below --min-np 2, host c discovered: generation 2 on a and c, finished"

# rank 0 waits for b at the batch where b's rank died, so b rejoins there
# and not at whatever batch its cool-down ends (the samples left are then
# even, and the sampler pads none)
printf '0 0 a:1,b:1\n' >"$tmp/schedule"
ELASTIC_EXIT=1:0:2:1:kill9 ELASTIC_WAIT=0:2:a+b run cooldown -np 2 -H a:1,b:1 --min-np 1 --max-np 2 \
        --blacklist-cooldown 2 --host-discovery-script "$disc"
[ "$rc" -eq 0 ] || fail "host b back after its cool-down: exit status $rc"
grep -q 'hvdrun: host b blacklisted for 2 s: a worker there failed' "$tmp/out" || fail "host b was not blacklisted"
check_generation 2 1 "a"
last=$(grep -o 'ELASTIC gen=[0-9]*' "$tmp/out" | sort -t= -k2 -n | tail -n 1 | cut -d= -f2)
check_generation "$last" 2 "a b"
check_results 2
ok "host b blacklisted for 2 s after its worker died: generation 2 on a alone, then b again (generation $last)"

# each stage holds the training until the script has run in it
printf '0 0 GARBAGE\n1 0 FAIL\n' >"$tmp/schedule"
ELASTIC_HOLD="0:1:$tmp/progress.GARBAGE,1:1:$tmp/progress.FAIL" run garbage -np 2 -H a:2 --min-np 1 --max-np 4 --host-discovery-script "$disc"
[ "$rc" -eq 0 ] || fail "a bad discovery script ended the job: exit status $rc"
grep -q "printed garbage: line 2, 'this is not a host list', is not HOST or HOST:SLOTS; keeping the job's hosts" \
        "$tmp/out" || fail "no clear error for the script's garbage"
grep -q "exited with status 3; keeping the job's hosts" "$tmp/out" || fail "no clear error for the failing script"
[ -z "$(gen_lines 2)" ] || fail "the bad script changed the job"
check_results 2
ok "a discovery script printing garbage, then failing: clear errors, the job keeps its 2 ranks"
