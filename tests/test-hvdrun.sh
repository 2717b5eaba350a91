#!/bin/bash
# test-hvdrun.sh — hvdrun end to end with real processes: the workers'
# environment and prefixed output, exit status and the grace period, SIGINT
# cleanup (no worker survives, the private daemon's directory is gone),
# --no-embedded without a daemon, a running daemon, the ranks' CPU shares,
# usage errors, and the
# main job (train_mlp on the digits, 4 ranks). Several hosts: test-hvdrun-multi.sh.
set -u
B=${HVD_BUILDDIR:?HVD_BUILDDIR must point at the build tree}
S=${HVD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
HVDRUN=$B/tools/hvdrun
. "$S/tests/lib/train_mlp.sh"
tmp=$(mktemp -d /tmp/hvd-test-hvdrun-XXXXXX)
export TMPDIR=$tmp/tmpdir         # private daemons' directories land here
mkdir "$TMPDIR"
NODAEMON=$tmp/no-daemon           # a runtime directory nobody serves
bg_pids=()

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
        for p in "${bg_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
        for f in "$tmp"/pid.*; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -s "$tmp/err" ] && sed 's/^/  stderr: /' "$tmp/err"; exit 1; }
ok() { echo "ok - $*"; }
now_ms() { date +%s%3N; }
# every pid recorded in $tmp/pid.* must be gone
assert_no_workers() {
        for f in "$tmp"/pid.*; do
                [ -f "$f" ] || continue
                p=$(cat "$f")
                if kill -0 "$p" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null; then
                        fail "$1: worker pid $p ($f) is still running"
                fi
        done
        rm -f "$tmp"/pid.*
}
assert_tmpdir_empty() {
        [ -z "$(ls -A "$TMPDIR")" ] || fail "$1: left behind in TMPDIR: $(ls -A "$TMPDIR")"
}

# ---- environment and output ----
# shellcheck disable=SC2016 # expanded by the shell of each rank
out=$("$HVDRUN" -np 3 --runtime-dir "$NODAEMON" sh -c 'echo $HVD_RANK $HVD_SIZE $HOROVOD_LOCAL_RANK' 2>"$tmp/err")
rc=$?
[ $rc -eq 0 ] || fail "env: exit status $rc"
[ "$(sort <<<"$out")" = $'[0] 0 3 0\n[1] 1 3 1\n[2] 2 3 2' ] || fail "env: unexpected output: $out"
[ ! -s "$tmp/err" ] || fail "env: unexpected stderr"
assert_tmpdir_empty "env"
ok "3 ranks print rank, size and local rank with prefixes"

# shellcheck disable=SC2016 # expanded by the shell of each rank
out=$("$HVDRUN" -np 2 --embedded -x FOO=bar -x HOME --fusion-threshold-mb 2 --cycle-time-ms 0.5 \
        --start-timeout 7 sh -c 'echo $FOO $HOME $HVD_FUSION_THRESHOLD $HVD_CYCLE_TIME $HVD_START_TIMEOUT \
        $HVD_LOCAL_SIZE $HVD_CROSS_RANK $HVD_CROSS_SIZE $HOROVOD_RANK $HOROVOD_SIZE $HOROVOD_LOCAL_SIZE \
        $HOROVOD_CROSS_RANK $HOROVOD_CROSS_SIZE $HVD_HOSTNAME; echo $HVD_JOB_ID $HVD_JOB_SECRET $HVD_COORDINATOR' \
        2>"$tmp/err")
rc=$?
[ $rc -eq 0 ] || fail "knobs: exit status $rc"
host=$(hostname)
[ "$(grep '^\[0\] bar' <<<"$out")" = "[0] bar $HOME 2097152 0.5 7 2 0 1 0 2 2 0 1 $host" ] ||
        fail "knobs: rank 0 saw: $out"
[ "$(grep '^\[1\] bar' <<<"$out")" = "[1] bar $HOME 2097152 0.5 7 2 0 1 1 2 2 0 1 $host" ] ||
        fail "knobs: rank 1 saw: $out"
ids=$(grep -v ' bar ' <<<"$out" | cut -d' ' -f2- | sort -u)
[ "$(wc -l <<<"$ids")" -eq 1 ] || fail "knobs: ranks disagree on job id/secret/endpoint: $ids"
[[ $ids =~ ^job-[0-9a-f]{16}\ [0-9a-f]{32}\ ipc://$TMPDIR/hvdrun-[A-Za-z0-9]{6}/worker\.sock$ ]] ||
        fail "knobs: job id, secret or endpoint malformed: $ids"
ok "-x, knob options and HVD_*/HOROVOD_* variables reach every rank"

# shellcheck disable=SC2016 # expanded by the shell of each rank
out=$("$HVDRUN" -np 2 --embedded sh -c 'printf "a\nb"; echo "err $HVD_RANK" >&2' 2>"$tmp/err")
[ "$(sort <<<"$out")" = $'[0] a\n[0] b\n[1] a\n[1] b' ] || fail "partial lines: stdout was: $out"
[ "$(sort "$tmp/err")" = $'[0] err 0\n[1] err 1' ] || fail "partial lines: stderr was: $(cat "$tmp/err")"
ok "stderr goes to stderr, a last line without newline is passed on"

out=$("$HVDRUN" -np 2 --embedded --no-prefix /usr/bin/python3 -c '
import os
def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
line = " ".join(["plain", os.environ["HVD_RANK"], "fds"] + [str(fd) for fd in range(4096) if is_open(fd)])
os.write(1, (line + "\n").encode())  # one write: unprefixed ranks share the pipe' 2>"$tmp/err")
[ "$(sort <<<"$out")" = $'plain 0 fds 0 1 2\nplain 1 fds 0 1 2' ] || fail "no-prefix/fds: output was: $out"
ok "--no-prefix passes output through; workers inherit only fds 0 1 2"

# 4 ranks race to write 20000 lines each: every line must arrive whole and once
# shellcheck disable=SC2016 # expanded by the shell of each rank
"$HVDRUN" -np 4 --embedded sh -c 'seq 1 20000 | sed "s/^/rank$HVD_RANK-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx-/"' \
        >"$tmp/lines" 2>"$tmp/err" || fail "interleave: exit status $?"
[ "$(wc -l <"$tmp/lines")" -eq 80000 ] || fail "interleave: $(wc -l <"$tmp/lines") lines, expected 80000"
bad=$(grep -cvE '^\[([0-3])\] rank\1-x{40}-[0-9]+$' "$tmp/lines")
[ "$bad" -eq 0 ] || fail "interleave: $bad mixed lines, e.g. $(grep -vE '^\[([0-3])\] rank\1-x{40}-[0-9]+$' "$tmp/lines" | head -2)"
ok "80000 lines from 4 ranks arrive whole"

# ---- exit status and the grace period ----
t0=$(now_ms)
# shellcheck disable=SC2016 # expanded by the shell of each rank
"$HVDRUN" -np 3 --grace-period 2 --runtime-dir "$NODAEMON" sh -c 'echo $$ > '"$tmp"'/pid.$HVD_RANK;
        if [ $HVD_RANK = 2 ]; then sleep 0.2; echo bye; exit 3; fi; exec sleep 60' >"$tmp/out" 2>"$tmp/err"
rc=$?
t=$(($(now_ms) - t0))
[ $rc -eq 3 ] || fail "exit status: hvdrun returned $rc, expected 3"
grep -qx 'hvdrun: rank 2 exited with status 3' "$tmp/err" || fail "exit status: message missing"
grep -qx '\[2\] bye' "$tmp/out" || fail "exit status: rank 2's last output lost"
{ [ $t -ge 2000 ] && [ $t -lt 6000 ]; } || fail "exit status: took $t ms with a 2 s grace period (expected 2-6 s)"
assert_no_workers "exit status"
assert_tmpdir_empty "exit status"
ok "rank 2 exits 3: hvdrun exits 3 in $t ms, the others stopped after the grace period"

t0=$(now_ms)
# shellcheck disable=SC2016 # expanded by the shell of each rank
"$HVDRUN" -np 2 --grace-period 0 --embedded sh -c 'echo $$ > '"$tmp"'/pid.$HVD_RANK;
        if [ $HVD_RANK = 1 ]; then sleep 0.3; kill -9 $$; fi; trap "" TERM; exec sleep 60' >"$tmp/out" 2>"$tmp/err"
rc=$?
t=$(($(now_ms) - t0))
[ $rc -eq 137 ] || fail "signal: hvdrun returned $rc, expected 137"
grep -q '^hvdrun: rank 1 killed by signal 9' "$tmp/err" || fail "signal: message missing"
{ [ $t -ge 1900 ] && [ $t -lt 5000 ]; } || fail "signal: a worker ignoring SIGTERM took $t ms to go (expected ~2 s)"
assert_no_workers "signal"
ok "a rank killed by SIGKILL gives 137; a worker ignoring SIGTERM is killed 2 s later"

# a worker's background child holds the output pipe open: hvdrun must not hang
t0=$(now_ms)
"$HVDRUN" -np 1 --embedded sh -c 'sleep 60 & echo $! > '"$tmp"'/pid.child; echo hi' >"$tmp/out" 2>"$tmp/err" ||
        fail "leftover child: exit status $?"
t=$(($(now_ms) - t0))
[ $t -lt 4000 ] || fail "leftover child: took $t ms"
grep -qx '\[0\] hi' "$tmp/out" || fail "leftover child: output lost"
assert_no_workers "leftover child"
ok "a worker's leftover child is killed with the job ($t ms)"

# ---- SIGINT ----
# A background command of a script starts with SIGINT ignored, and hvdrun
# (like any program) leaves an ignored SIGINT ignored: reset it on the way.
# shellcheck disable=SC2016 # expanded by the shell of each rank
/usr/bin/python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
        "$HVDRUN" -np 3 --runtime-dir "$NODAEMON" sh -c 'echo $$ > '"$tmp"'/pid.$HVD_RANK; exec sleep 60' \
        >"$tmp/out" 2>"$tmp/err" &
hp=$!
bg_pids+=("$hp")
for _ in $(seq 100); do [ "$(find "$tmp" -maxdepth 1 -name 'pid.*' | wc -l)" -eq 3 ] && break; sleep 0.05; done
[ "$(find "$tmp" -maxdepth 1 -name 'pid.*' | wc -l)" -eq 3 ] || fail "SIGINT: the workers did not start"
ls -d "$TMPDIR"/hvdrun-* >/dev/null 2>&1 || fail "SIGINT: no private daemon directory while running"
t0=$(now_ms)
kill -INT "$hp"
wait "$hp"
rc=$?
t=$(($(now_ms) - t0))
[ $rc -eq 130 ] || fail "SIGINT: hvdrun returned $rc, expected 130"
[ $t -lt 3000 ] || fail "SIGINT: took $t ms"
grep -q 'SIGINT received' "$tmp/err" || fail "SIGINT: no message"
assert_no_workers "SIGINT"
assert_tmpdir_empty "SIGINT"
ok "SIGINT stops every worker and removes the private daemon's directory (exit 130)"

# ---- daemons ----
"$HVDRUN" -np 2 --no-embedded --runtime-dir "$NODAEMON" true >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] || fail "--no-embedded: exit status $rc, expected 1"
grep -q "no hvd-coordinatord is running at $NODAEMON" "$tmp/err" || fail "--no-embedded: unclear message"
grep -q -- "--no-embedded" "$tmp/err" || fail "--no-embedded: message does not name the option"
ok "--no-embedded without a daemon fails clearly"

rt=$tmp/rt
"$B/daemon/hvd-coordinatord" --runtime-dir "$rt" --log-level warning 2>"$tmp/daemon.log" &
dp=$!
bg_pids+=("$dp")
for _ in $(seq 100); do [ -S "$rt/control.sock" ] && break; sleep 0.05; done
"$HVDRUN" -v -np 2 --no-embedded --runtime-dir "$rt" "$B/examples/train_mlp" -q -e 1 --synthetic >"$tmp/out" 2>"$tmp/err" ||
        fail "running daemon: exit status $?"
grep -q "^hvdrun: using hvd-coordinatord .* at $rt\$" "$tmp/err" || fail "running daemon: --verbose does not say which"
grep -q '^\[0\] final weights identical on all 2 ranks' "$tmp/out" || fail "running daemon: job failed"
assert_tmpdir_empty "running daemon"
# shellcheck disable=SC2016 # expanded by the shell of each rank
out=$(HVD_RUNTIME_DIR=$rt "$HVDRUN" -np 1 sh -c 'echo $HVD_COORDINATOR' 2>"$tmp/err")
[ "$out" = "[0] ipc://$rt/worker.sock" ] || fail "HVD_RUNTIME_DIR: the job did not use $rt: $out"
kill -TERM "$dp"
wait "$dp"
ok "the node's daemon is found and used (--runtime-dir, HVD_RUNTIME_DIR)"

# ---- CPU placement ----
# ranks forked here get disjoint, equal shares of hvdrun's CPUs when there
# are enough; --cpu-bind none, or more ranks than CPUs, leaves them all
# shellcheck disable=SC2016 # expanded by the shell of each rank
cpus='sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status'
ncpu=$(nproc)
all=$(sh -c "$cpus")
out=$("$HVDRUN" -np 2 --embedded --no-prefix sh -c "$cpus" 2>"$tmp/err") || fail "cpu-bind: exit status $?"
# a CPU list (0-3,6) as one CPU a line
cpu_lines() {
        local r
        for r in ${1//,/ }; do seq "${r%-*}" "${r#*-}"; done
}
if [ "$ncpu" -ge 2 ]; then
        a=$(sed -n 1p <<<"$out") b=$(sed -n 2p <<<"$out")
        { [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$all" ]; } || fail "cpu-bind: 2 ranks on $ncpu CPUs ($all) got '$a' and '$b'"
        [ -z "$(comm -12 <(cpu_lines "$a" | sort) <(cpu_lines "$b" | sort))" ] || fail "cpu-bind: shares '$a' and '$b' overlap"
        [ -z "$(comm -23 <(cpu_lines "$a,$b" | sort) <(cpu_lines "$all" | sort))" ] ||
                fail "cpu-bind: shares '$a' and '$b' are not within hvdrun's CPUs $all"
        ok "2 ranks on $ncpu CPUs run on disjoint shares ($a | $b)"
fi
out=$("$HVDRUN" -np 2 --embedded --no-prefix --cpu-bind none sh -c "$cpus" 2>"$tmp/err") || fail "cpu-bind none: exit status $?"
[ "$out" = "$all"$'\n'"$all" ] || fail "cpu-bind none: ranks got '$out', expected '$all' twice"
n=$((ncpu + 1))
out=$("$HVDRUN" -np "$n" --embedded --no-prefix sh -c "$cpus" 2>"$tmp/err") || fail "cpu-bind $n ranks: exit status $?"
[ "$(sort -u <<<"$out")" = "$all" ] || fail "cpu-bind: $n ranks on $ncpu CPUs got '$out', expected '$all' each"
ok "--cpu-bind none, and more ranks than CPUs, leave every rank all CPUs"

# ---- usage errors ----
usage() {
        local want=$1 what=$2
        shift 2
        "$HVDRUN" "$@" >"$tmp/out" 2>"$tmp/err"
        local rc=$?
        [ $rc -eq "$want" ] || fail "usage: '$*' exited $rc, expected $want"
        [ -s "$tmp/err" ] || fail "usage: '$*' printed no message"
        grep -q -- "$what" "$tmp/err" || fail "usage: '$*': message lacks '$what': $(cat "$tmp/err")"
}
usage 2 "no PROGRAM" -np 2
usage 2 "missing -np" true
usage 2 "invalid number of workers" -np 0 true
usage 2 "invalid number of workers" -np x true
usage 2 "requires an argument" -np
usage 2 "unknown option '--bogus'" --bogus -np 2 true
usage 2 "grace-period" -np 2 --grace-period -1 true
usage 2 "cycle-time-ms" -np 2 --cycle-time-ms abc true
usage 2 "more than the 2 slots" -np 3 -H localhost:2 true
printf '# hosts\nlocalhost slots=1\nremote.invalid slots=2\n' >"$tmp/hostfile"
usage 2 "more than the 3 slots" -np 4 --hostfile "$tmp/hostfile" true
# the host list parser's messages (all of them: tests/check_hostlist.c) reach the user
usage 2 "hvdrun: host 'b' in -H: slots 'x' is not a number in 1..4096" -H a:1,b:x true
grep -q "^Try 'hvdrun --help'.$" "$tmp/err" || fail "-H error: no hint at --help"
printf 'localhost slots=1\n-x\n' >"$tmp/hostfile2"
usage 2 "hvdrun: host '-x' in $tmp/hostfile2: a host name cannot start with '-'" --hostfile "$tmp/hostfile2" true
usage 2 "hvdrun: cannot open host file $tmp/none: No such file or directory" --hostfile "$tmp/none" true
usage 2 "hvdrun: cannot read host file $tmp: Is a directory" --hostfile "$tmp" true
usage 2 "needs the hosts" -np 2 --emulate-hosts true
usage 2 "is not listed by -H" -np 1 -H localhost:1 --node-daemon elsewhere=/tmp true
usage 2 "contradict" -np 1 --no-prefix --prefix-host true
usage 2 "expected 'share' or 'none'" -np 1 --cpu-bind core true
usage 127 "command not found" -np 1 --embedded hvd-no-such-program
usage 126 "cannot run" -np 1 --embedded /dev/null
# shellcheck disable=SC2016 # expanded by the shell of each rank
out=$("$HVDRUN" -H "localhost:2,$(hostname):1" --embedded sh -c 'echo $HVD_SIZE' 2>"$tmp/err") ||
        fail "-H local hosts: exit status $?"
# ranks print concurrently: compare the lines in rank order
[ "$(echo "$out" | sort | tr '\n' ' ')" = "[0] 3 [1] 3 [2] 3 " ] || fail "-H local hosts: -np from the slots: $out"
"$HVDRUN" --version | grep -q "^hvdrun (hvd) " || fail "--version"
"$HVDRUN" --help >"$tmp/help" || fail "--help exit status"
# every long option of --help is in the man page, and -np is documented
# shellcheck disable=SC2013 # grep -o prints one option, a single word, a line
for opt in $(grep -oE -- '--[a-z][a-z-]+' "$tmp/help" | sort -u); do
        grep -qF -- "${opt//-/\\-}" "$S/man/hvdrun.1" || fail "man page lacks $opt"
done
grep -q -- '-np' "$tmp/help" || fail "--help lacks -np"
ok "usage errors exit 2 with a message; --help matches the man page"

# ---- the main job ----
# the digits: held-out accuracy above the threshold, the same weights on every rank
"$HVDRUN" -np 4 --runtime-dir "$NODAEMON" "$B/examples/train_mlp" -e "$TRAIN_MLP_EPOCHS" >"$tmp/out" 2>"$tmp/err" ||
        fail "train_mlp: exit status $?"
found=$(train_mlp_outcome "$tmp/out" 4) || fail "train_mlp on 4 ranks: $found"
assert_tmpdir_empty "train_mlp"
ok "hvdrun -np 4 train_mlp -e $TRAIN_MLP_EPOCHS: $found"
exit 0
