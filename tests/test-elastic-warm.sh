#!/bin/bash
# test-elastic-warm.sh — warm starts of an elastic job's workers
# (tools/hvdrun_warm.c, python-binding/hvd/_warm.py): host b is listed
# once hvdrun's standby interpreters are ready, its two workers start
# from them and are real ranks (generation of a a b b, synced, the same
# weights on every rank); one of them killed with kill -9 is recovered
# from as a cold one is (a generation of 3 ranks finishes); no standby
# outlives hvdrun; an interpreter that cannot start a standby makes
# hvdrun say so and start the workers cold; bad --elastic-warm-start
# values are usage errors; hvdrun's stdin still reaches rank 0.
. "${HVD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/elastic/lib.sh"

# gate.sh PATTERN COUNT: lists a:2, and b:2 too once hvdrun's output has
# COUNT lines matching PATTERN and the training has reached epoch 1 (its
# first generation, of a's two ranks, runs)
cat >"$tmp/gate.sh" <<EOF
#!/bin/sh
echo a:2
epoch=0
[ -s "$tmp/progress" ] && read -r epoch _ <"$tmp/progress"
[ "\${epoch:-0}" -ge 1 ] 2>/dev/null && [ "\$(grep -c "\$1" "$tmp/out")" -ge "\$2" ] && echo b:2
exit 0
EOF
chmod +x "$tmp/gate.sh"

# the last generation's number
last_gen() { grep -o 'ELASTIC gen=[0-9]*' "$tmp/out" | sort -t= -k2 -n | tail -n 1 | cut -d= -f2; }

ELASTIC_WAIT=1:2:a+a+b+b ELASTIC_EXIT=2:1:5:2:kill9 run warm -v -np 2 -H a:2 --min-np 2 --max-np 4 \
        --host-discovery-script "$tmp/gate.sh 'standby interpreter pid [0-9]* ready' 2"
[ "$rc" -eq 0 ] || fail "warm growth: exit status $rc"
for w in 2 3; do
        grep -q "hvdrun: worker $w on b: warm start (pid [0-9]*" "$tmp/out" || fail "worker $w on b did not start warm"
done
check_generation 2 4 "a a b b"
[ "$(gen_lines 2 | field sync | sort -u)" = 1 ] || fail "generation 2 does not sync on every rank"
# the warm workers are the standbys: their pids are those of the ranks on b
warm_pids=$(sed -n 's/.*worker [23] on b: warm start (pid \([0-9]*\).*/\1/p' "$tmp/out")
for pid in $warm_pids; do
        gen_lines 2 | grep -q "host=b pid=$pid " || fail "warm worker pid $pid is no rank of generation 2"
done
killed=$(sed -n 's/.*hvdrun: worker \([23]\) on b killed by signal 9.*/\1/p' "$tmp/out")
[ -n "$killed" ] || fail "no warm-started worker was killed"
last=$(last_gen)
[ "$last" -ge 3 ] || fail "no generation after the kill"
check_generation "$last" 3 "a a b"
check_results 3
standby_pids=$(sed -n 's/.*standby interpreter pid \([0-9]*\) started.*/\1/p' "$tmp/out")
[ -n "$standby_pids" ] || fail "no standby interpreter was started"
for pid in $standby_pids; do
        ! kill -0 "$pid" 2>/dev/null || fail "standby interpreter $pid outlived hvdrun"
done
ok "host b's workers started warm (generation 2 of a a b b, synced); worker $killed killed with kill -9: generation $last of 3 ranks finished, the same weights; no standby left"

# an interpreter that refuses `-m hvd._warm` (as one without hvd's package would)
mkdir "$tmp/bin"
cat >"$tmp/bin/python3" <<EOF
#!/bin/sh
if [ "\$1" = -m ]; then
        echo "python3: no warm start here" >&2
        exit 3
fi
exec $PYTHON "\$@"
EOF
chmod +x "$tmp/bin/python3"
PYTHON=$tmp/bin/python3 ELASTIC_WAIT=1:2:a+a+b+b run cold -np 2 -H a:2 --min-np 2 --max-np 4 \
        --host-discovery-script "$tmp/gate.sh 'new workers start cold' 1"
[ "$rc" -eq 0 ] || fail "fallback to cold starts: exit status $rc"
grep -q "hvdrun: warm start: the standby interpreter (pid [0-9]*, $tmp/bin/python3 -m hvd._warm) exited with status 3 before it was ready; new workers start cold" \
        "$tmp/out" || fail "no line saying the standby failed"
grep -q 'python3: no warm start here' "$tmp/out" || fail "the standby's error was not passed on"
! grep -q 'warm start (pid' "$tmp/out" || fail "a worker started warm from a failed standby"
last=$(last_gen)
check_generation "$last" 4 "a a b b"
check_results 4
ok "a standby that cannot start: a clear line, host b's workers started cold, generation $last of 4 ranks finished"

# stdin reaches rank 0 of a job with warm starts (setting up the standbys'
# slots once closed descriptor 0, hvdrun's stdin, and a pipe made later
# could take its number: a worker over ssh then read no job secret)
printf 'import sys\nprint("rank 0 read:", sys.stdin.read().strip() if sys.stdin else "no stdin")\n' >"$tmp/stdin.py"
printf '#!/bin/sh\necho localhost:1\n' >"$tmp/here.sh"
chmod +x "$tmp/here.sh"
echo "a line from stdin" | timeout -k 5 60 "$B/tools/hvdrun" -np 1 --min-np 1 --max-np 2 \
        --host-discovery-script "$tmp/here.sh" "$PYTHON" "$tmp/stdin.py" >"$tmp/out" 2>&1 ||
        fail "stdin to rank 0: exit status $?"
grep -qx '\[0\] rank 0 read: a line from stdin' "$tmp/out" || fail "rank 0 of a warm-start job did not get hvdrun's stdin"
ok "hvdrun's stdin reaches rank 0 of an elastic job with warm starts"

"$B/tools/hvdrun" --elastic-warm-start sometimes -np 1 true >"$tmp/out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "--elastic-warm-start sometimes: exit status $rc, expected 2"
grep -q "elastic-warm-start 'sometimes': expected auto, on or off" "$tmp/out" || fail "no clear error for a bad value"
"$B/tools/hvdrun" --elastic-warm-start on --emulate-hosts -H a:1 -np 1 --min-np 1 "$PYTHON" -c 1 >"$tmp/out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "--elastic-warm-start on without discovery: exit status $rc, expected 2"
grep -q 'warm starts are for elastic jobs that discover hosts' "$tmp/out" || fail "no clear error for on without discovery"
ok "bad --elastic-warm-start values: clear usage errors"
