#!/bin/bash
# test-elastic-join.sh — hosts whose daemons offer them to the job's root
# daemon (elastic_root; hvdrun --discover-daemons) on emulated hosts: a
# daemon started while the job runs joins with its slots, up to --max-np
# (the job grows, the new rank after the old ones, all synced); kill -9 of
# that daemon shrinks the job back (its rank lost, its host dropped), and
# the training finishes with the same weights on every rank; hvdctl status
# at the root daemon lists the offer. With a discovery script too, the
# job takes the hosts of both. A discovery
# script that leaves out the job's first host, whose daemon is the root,
# is refused before any worker starts.
. "${HVD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/elastic/lib.sh"
cpid=
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
        [ -n "$cpid" ] && kill -9 "$cpid" 2>/dev/null
        rm -rf "$tmp"
}
# wait_for SECONDS COMMAND...: until COMMAND succeeds, or fail
wait_for() {
        local end=$(($(date +%s) + $1))
        shift
        until "$@"; do
                [ "$(date +%s)" -lt "$end" ] || return 1
                sleep 0.1
        done
}
progress_at() { [ "$(cat "$tmp/progress" 2>/dev/null)" = "$1" ]; }
announced() { grep -q '^hvdrun: daemons with elastic_root = .* offer their hosts to this job$' "$tmp/out"; }

: >"$tmp/progress"
: >"$tmp/empty.conf"
mkdir "$tmp/c"
# at epoch 0 batch 2 the ranks wait for the offered host c; at epoch 1
# batch 2, for it to be gone again
export ELASTIC_WAIT=0:2:a+a+c,1:2:a+a
timeout -k 5 150 "$B/tools/hvdrun" --emulate-hosts -x ELASTIC_EPOCHS -x ELASTIC_WAIT -x ELASTIC_PROGRESS \
        -x HVD_ELASTIC_SETTLE -np 2 -H a:2 --min-np 2 --max-np 3 --discover-daemons --discovery-interval 0.2 \
        "$PYTHON" "$S/tests/elastic/train.py" >"$tmp/out" 2>&1 &
hpid=$!
wait_for 60 announced || fail "hvdrun did not say where daemons offer their hosts"
ep=$(sed -n 's/^hvdrun: daemons with elastic_root = \(.*\) offer their hosts to this job$/\1/p' "$tmp/out")
wait_for 90 progress_at "0 2" || fail "the training did not reach epoch 0 batch 2"
"$B/daemon/hvd-coordinatord" -c "$tmp/empty.conf" --runtime-dir "$tmp/c" --elastic-root "$ep" --elastic-host c \
        --elastic-slots 2 >"$tmp/c.log" 2>&1 &
cpid=$!
wait_for 90 progress_at "1 2" || fail "the training did not go on to epoch 1 batch 2 with host c" "$(cat "$tmp/c.log")"
# the root daemon (host a's, hvdrun's private one) lists the offer
rootdir=$(ls -d "$TMPDIR"/hvdrun-*)
"$B/tools/hvdctl" --endpoint "$rootdir" status >"$tmp/status" || fail "hvdctl status at the root daemon failed"
grep -q "^  offered host:      c, 2 slots, daemon pid $cpid in $tmp/c, heard " "$tmp/status" ||
        fail "hvdctl status does not list host c's offer" "$(cat "$tmp/status")"
"$B/tools/hvdctl" --endpoint "$rootdir" status --json | "$PYTHON" -c '
import json, sys
o = json.load(sys.stdin)["offered_hosts"]
sys.exit(0 if [(h["host"], h["slots"], h["runtime_dir"]) for h in o] == [("c", 2, sys.argv[1])] else 1)' "$tmp/c" ||
        fail "hvdctl status --json does not list host c's offer"
{ kill -9 "$cpid" && wait "$cpid"; } 2>/dev/null
cpid=
wait "$hpid"
rc=$?
echo "# exit status $rc"
grep "^hvdrun:" "$tmp/out" | sed "s/^/# /"
[ "$rc" -eq 0 ] || fail "the job with an offered host: exit status $rc"
grep -q "hvdrun: host c offered by its daemon in $tmp/c: starting workers there" "$tmp/out" ||
        fail "host c was not started from its daemon's offer"
check_generation 1 2 "a a"
grown=$(grep -o 'ELASTIC gen=[0-9]* .* size=3 ' "$tmp/out" | head -n 1 | sed 's/ELASTIC gen=\([0-9]*\) .*/\1/')
[ -n "$grown" ] || fail "no generation of 3 ranks"
check_generation "$grown" 3 "a a c"
[ "$(gen_lines "$grown" | field sync | sort -u)" = 1 ] || fail "generation $grown does not sync on every rank"
last=$(grep -o 'ELASTIC gen=[0-9]*' "$tmp/out" | sort -t= -k2 -n | tail -n 1 | cut -d= -f2)
[ "$last" -gt "$grown" ] || fail "the job did not shrink after host c's daemon was killed"
check_generation "$last" 2 "a a"
check_results 2
ok "host c offered by a daemon started mid-job (2 slots, --max-np 3): generation $grown on a a c, synced; its daemon killed: generation $last on a a, finished"

# with a discovery script too: the hosts of both. The script adds b at
# once; once b is in (epoch 0 batch 1), host d's daemon offers it
rm -rf "$tmp/c" "$TMPDIR"/hvdrun-*
mkdir "$tmp/d"
: >"$tmp/progress"
printf '0 0 a:1,b:1\n' >"$tmp/schedule"
export ELASTIC_WAIT=0:1:a+b,0:2:a+b+d
timeout -k 5 150 "$B/tools/hvdrun" --emulate-hosts -x ELASTIC_EPOCHS -x ELASTIC_WAIT -x ELASTIC_PROGRESS \
        -x HVD_ELASTIC_SETTLE -np 1 -H a:1 --min-np 1 --max-np 3 --discover-daemons --discovery-interval 0.2 \
        --host-discovery-script "$S/tests/elastic/discover.sh $tmp/progress $tmp/schedule" \
        "$PYTHON" "$S/tests/elastic/train.py" >"$tmp/out" 2>&1 &
hpid=$!
wait_for 60 announced || fail "hvdrun did not say where daemons offer their hosts"
ep=$(sed -n 's/^hvdrun: daemons with elastic_root = \(.*\) offer their hosts to this job$/\1/p' "$tmp/out")
wait_for 90 progress_at "0 2" || fail "the training did not reach epoch 0 batch 2 with host b"
"$B/daemon/hvd-coordinatord" -c "$tmp/empty.conf" --runtime-dir "$tmp/d" --elastic-root "$ep" --elastic-host d \
        >"$tmp/d.log" 2>&1 &
cpid=$!
wait "$hpid"
rc=$?
{ kill "$cpid" && wait "$cpid"; } 2>/dev/null
cpid=
echo "# exit status $rc"
[ "$rc" -eq 0 ] || fail "the job with a script and an offered host: exit status $rc"
grep -q 'hvdrun: host b discovered: starting workers there' "$tmp/out" || fail "host b was not started"
grep -q "hvdrun: host d offered by its daemon in $tmp/d: starting workers there" "$tmp/out" ||
        fail "host d was not started from its daemon's offer"
last=$(grep -o 'ELASTIC gen=[0-9]*' "$tmp/out" | sort -t= -k2 -n | tail -n 1 | cut -d= -f2)
check_generation "$last" 3 "a b d"
check_results 3
ok "a discovery script's host b and host d offered by its daemon (1 slot, --slots): generation $last on a b d, finished"

printf '0 0 b:2\n' >"$tmp/schedule"
run rootless -np 2 -H a:2 --min-np 1 --max-np 4 \
        --host-discovery-script "$S/tests/elastic/discover.sh $tmp/progress $tmp/schedule"
[ "$rc" -ne 0 ] || fail "a script without the first host was accepted"
grep -q "does not list host a, the job's first host: its daemon is the root of the elastic job" "$tmp/out" ||
        fail "no clear error for a script without the first host"
! grep -q 'ELASTIC gen=' "$tmp/out" || fail "workers started though the script left out the first host"
ok "a discovery script without the first host: a clear error, no worker started"
