#!/bin/bash
# test-elastic-limits.sh — elastic jobs on emulated hosts at their limits:
# rank 0 raising (the lowest survivor becomes rank 0), the root host
# losing its only worker (a clear error: the root daemon's host holds rank
# 0 of every generation), and a reset beyond --reset-limit (a clear error).
. "${HVD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/elastic/lib.sh"

ELASTIC_EXIT=1:0:4:0:exception run exception -np 3 -H a:2,b:1 --min-np 2 --max-np 3
[ "$rc" -eq 0 ] || fail "rank 0 raising: exit status $rc"
grep -q 'scheduled failure at epoch 0 batch 4' "$tmp/out" || fail "rank 0 did not raise"
check_generation 2 2 "a b"
check_results 2
ok "rank 0 raising an exception: generation 2 of 2 ranks, the lowest survivor is rank 0"

ELASTIC_EXIT=1:0:2:0:kill9 run roothost -np 3 -H a:1,b:2 --min-np 1 --max-np 3
[ "$rc" -ne 0 ] || fail "the root host's last worker lost: exit status 0"
grep -q "no worker is left on the root daemon's host: the job cannot go on" "$tmp/out" ||
        fail "no clear error when the root host has no worker left"
ok "the root host's only worker lost: every survivor fails with a clear error (the root host must keep a worker)"

ELASTIC_EXIT=1:0:2:3:kill9,2:1:1:2:kill9 run limit -np 4 -H a:2,b:2 --min-np 2 --max-np 4 --reset-limit 1
[ "$rc" -ne 0 ] || fail "a second reset beyond --reset-limit 1 let the job go on"
check_generation 2 3 "a a b"
grep -q 'reached the reset limit (1 resets): the job stops' "$tmp/out" || fail "no clear error at the reset limit"
[ -z "$(gen_lines 3)" ] || fail "a third generation formed beyond the reset limit"
ok "a second reset with --reset-limit 1: every rank fails with 'reached the reset limit'"

# hvdctl job at the root daemon: the generation, who left and why; the metrics
ELASTIC_EPOCHS=6 ELASTIC_EXIT=1:0:3:1:kill9 run hvdctl -np 3 -H a:2,b:1 --min-np 2 &
bg=$!
seen=
for _ in $(seq 600); do
        sleep 0.1
        for d in "$TMPDIR"/*/; do
                j=$("$B/tools/hvdctl" --runtime-dir "$d" jobs 2>/dev/null | awk '/\.g2 .*running/ {print $1}')
                [ -n "$j" ] || continue
                "$B/tools/hvdctl" --runtime-dir "$d" job "$j" >"$tmp/job" 2>&1 || continue
                grep -q '^  elastic: generation 2, 2 to 3 ranks, 1 reset (last [0-9.]* s), 0 waiting$' "$tmp/job" || continue
                grep -q '^  left: rank 1 on a (lost)$' "$tmp/job" || fail "hvdctl job: who left: $(cat "$tmp/job")"
                "$B/tools/hvdctl" --runtime-dir "$d" metrics 2>/dev/null | grep -q '^hvd_elastic_resets_total 1$' ||
                        fail "hvd_elastic_resets_total is not 1"
                seen=yes
                break 2
        done
done
wait "$bg"
[ -n "$seen" ] || fail "hvdctl job never showed generation 2 at the root daemon"
ok "hvdctl job: generation 2, 1 reset, rank 1 on a left (lost); hvd_elastic_resets_total 1"
