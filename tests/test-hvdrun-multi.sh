#!/bin/bash
# test-hvdrun-multi.sh — hvdrun with several hosts, all on this machine:
# host lists and host files, ranks given out in host order; --emulate-hosts
# (a private daemon per host) running train_mlp on the digits and every
# collective; hosts served by daemons the test starts (--node-daemon); a
# failing rank and Ctrl-C (every worker and every private directory gone);
# the ssh command lines (--dry-run, with awkward values), and the remote path
# run for real through a stand-in for ssh (--ssh) that runs the command here.
set -u
B=${HVD_BUILDDIR:?HVD_BUILDDIR must point at the build tree}
HVDRUN=$B/tools/hvdrun
. "${HVD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib/train_mlp.sh"
tmp=$(mktemp -d /tmp/hvd-test-hvdrun-multi-XXXXXX)
export TMPDIR=$tmp/tmpdir         # private daemons' directories land here
mkdir "$TMPDIR"
bg_pids=()

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
        for p in "${bg_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
        for f in "$tmp"/pid.*; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -s "$tmp/err" ] && sed 's/^/  stderr: /' "$tmp/err" | tail -n 30; exit 1; }
ok() { echo "ok - $*"; }
now_ms() { date +%s%3N; }
assert_no_workers() {
        for f in "$tmp"/pid.*; do
                [ -f "$f" ] || continue
                p=$(cat "$f")
                if kill -0 "$p" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null; then
                        fail "$1: pid $p ($f) is still running"
                fi
        done
        rm -f "$tmp"/pid.*
}
assert_tmpdir_empty() {
        [ -z "$(ls -A "$TMPDIR")" ] || fail "$1: left behind in TMPDIR: $(ls -A "$TMPDIR")"
}
# starts a daemon for a pretend host: start_daemon NAME [--peer-listen EP]
start_daemon() {
        local name=$1
        shift
        "$B/daemon/hvd-coordinatord" --runtime-dir "$tmp/rt-$name" --log-level warning "$@" \
                2>"$tmp/daemon-$name.log" &
        bg_pids+=("$!")
        eval "dpid_$name=$!"
        for _ in $(seq 200); do [ -S "$tmp/rt-$name/control.sock" ] && break; sleep 0.05; done
        [ -S "$tmp/rt-$name/control.sock" ] || fail "daemon $name did not start: $(cat "$tmp/daemon-$name.log")"
}
# runs hvdrun with SIGINT at its default (a background job of a script has it
# ignored); only as "with_sigint ... &", whose subshell it replaces, so $! is hvdrun
with_sigint() {
        exec /usr/bin/python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' "$@"
}

# a stand-in for ssh: checks the options hvdrun must pass, notes the host, runs
# the command with sh as sshd would (with the login shell, here)
cat >"$tmp/fake-ssh" <<'EOF'
#!/bin/sh
[ "$1 $2 $3 $4" = "-o BatchMode=yes -o StrictHostKeyChecking=accept-new" ] || { echo "fake-ssh: bad options: $*" >&2; exit 255; }
shift 4
[ $# -eq 2 ] || { echo "fake-ssh: expected HOST COMMAND, got: $*" >&2; exit 255; }
echo "$1" >>"${FAKE_SSH_LOG:-/dev/null}"
exec sh -c "$2"
EOF
chmod +x "$tmp/fake-ssh"
FAKE=$tmp/fake-ssh

# ---- host lists, host files, --dry-run ----
printf '# the cluster\n\nhostA slots=2\n  hostB:3   # three\nhostC\n\n# end\n' >"$tmp/hostfile"
"$HVDRUN" --dry-run --hostfile "$tmp/hostfile" true >"$tmp/out" 2>"$tmp/err" || fail "hostfile: exit status $?"
[ "$(cut -d: -f1 "$tmp/out" | tr '\n' ,)" = "rank 0 on hostA,rank 1 on hostA,rank 2 on hostB,rank 3 on hostB,rank 4 on hostB,rank 5 on hostC," ] ||
        fail "hostfile: ranks not given out in host order: $(cut -c1-60 "$tmp/out")"
grep -q "HVD_HOSTS=hostA:2,hostB:3,hostC:1 " "$tmp/out" || fail "hostfile: HVD_HOSTS wrong"
grep '^rank 4 on' "$tmp/out" | grep -q "HVD_SIZE=6 HVD_RANK=4 HVD_LOCAL_RANK=2 HVD_LOCAL_SIZE=3 HVD_CROSS_RANK=1 HVD_CROSS_SIZE=3 HVD_HOSTNAME=hostB " ||
        fail "hostfile: rank 4's variables: $(grep '^rank 4 on' "$tmp/out")"
# -np below the slots: hosts left without ranks are not part of the job
"$HVDRUN" --dry-run -np 3 -H hostA:2,hostB:2,hostC:2 true >"$tmp/out" 2>"$tmp/err" || fail "-np 3: exit status $?"
{ [ "$(wc -l <"$tmp/out")" -eq 3 ] && grep -q "HVD_HOSTS=hostA:2,hostB:1 " "$tmp/out" &&
        grep '^rank 2 on hostB' "$tmp/out" | grep -q "HVD_LOCAL_SIZE=1 HVD_CROSS_RANK=1 HVD_CROSS_SIZE=2 "; } ||
        fail "-np 3 over 3 hosts: $(cut -c1-400 "$tmp/out")"
# a repeated host adds its slots
"$HVDRUN" --dry-run -H hostA:1,hostB:1,hostA:1 true >"$tmp/out" 2>"$tmp/err" || fail "repeated host: exit status $?"
[ "$(cut -d: -f1 "$tmp/out" | tr '\n' ,)" = "rank 0 on hostA,rank 1 on hostA,rank 2 on hostB," ] ||
        fail "repeated host: $(cut -c1-60 "$tmp/out")"
ok "host files (comments, blank lines, 'host slots=N', 'host:N', 'host'), -np, repeated hosts"

usage() {
        local want=$1 what=$2
        shift 2
        "$HVDRUN" "$@" >"$tmp/out" 2>"$tmp/err"
        local rc=$?
        [ $rc -eq "$want" ] || fail "usage: '$*' exited $rc, expected $want"
        grep -q -- "$what" "$tmp/err" || fail "usage: '$*': message lacks '$what': $(cat "$tmp/err")"
}
usage 2 "-np 7 is more than the 6 slots listed by --hostfile" -np 7 --hostfile "$tmp/hostfile" true
usage 2 "-np 5 is more than the 4 slots listed by -H" -np 5 -H a:2,b:2 --emulate-hosts true
usage 2 "slots 'x' is not a number" -H a:x true
usage 2 "expected 'slots=N'" --hostfile <(echo "hostA cpus=2") true
usage 2 "cannot start with '-'" -H -oProxyCommand=x:1 true
usage 2 "expected HOST=RUNTIME_DIR" -H a:1 --node-daemon a true
usage 2 "name the same daemon" -H a:1,b:1 --node-daemon a=/x --node-daemon b=/x true
usage 2 "expected an endpoint" -H a:1 --root-peer nowhere true
usage 2 "cannot open host file" --hostfile "$tmp/no-such-file" true
ok "-np above the slots and bad host lists exit 2 with a message"

# the ssh command line of a remote rank: a value with every shell character
# goes through the remote shell unchanged; the secret never is on it
awk_value="it's \"quoted\" \$HOME \`date\` \\ ; | & * ? ~ ! # (x) {y} <z>
second line"
mkdir "$tmp/work dir"
# shellcheck disable=SC2016 # expanded by the shell of each rank
(cd "$tmp/work dir" && PYTHONPATH=/py/path LD_LIBRARY_PATH=/ld/path \
        "$HVDRUN" --dry-run -H nodeA:1,nodeB:1 -x "AWK=$awk_value" -x PYTHONPATH=/override \
        /bin/sh -c 'printf "%s|" "$PWD" "$HVD_RANK" "$HVD_HOSTNAME" "$HVD_ROOT_PEER" "$HVD_JOB_SECRET" "$PYTHONPATH" "$LD_LIBRARY_PATH" "$1"; printf "%s\n" "$AWK"' \
        sh "arg 'one' \"two\"") >"$tmp/out" 2>"$tmp/err" || fail "dry run: exit status $?"
[ "$(wc -l <"$tmp/out")" -eq 2 ] || fail "dry run: expected one line per rank: $(cat "$tmp/out")"
grep -q "HVD_JOB_SECRET=" "$tmp/out" && fail "dry run: the job secret is on the ssh command line"
for r in 0 1; do
        line=$(grep "^rank $r on " "$tmp/out")
        host=$([ $r = 0 ] && echo nodeA || echo nodeB)
        words=()
        eval "words=(${line#"rank $r on $host: "})" || fail "dry run: rank $r's line is not shell words: $line"
        [ "${words[*]:0:6}" = "ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new $host" ] ||
                fail "dry run: rank $r: ssh options/host: ${words[*]:0:6}"
        [ ${#words[@]} -eq 7 ] || fail "dry run: rank $r: ${#words[@]} words, expected 7"
        # what the remote login shell would do with it, the secret on stdin
        got=$(echo "s3cr3t" | sh -c "${words[6]}") || fail "dry run: rank $r's command failed: ${words[6]}"
        want="$tmp/work dir|$r|$host|tcp://nodeA:7100|s3cr3t|/override|/ld/path|arg 'one' \"two\"|$awk_value"
        [ "$got" = "$want" ] || fail "dry run: rank $r's command gives"$'\n'"$got"$'\n'"expected"$'\n'"$want"
done
{ "$HVDRUN" --dry-run -H nodeA:1,nodeB:1 --root-peer tcp://10.1.2.3:7200 true >"$tmp/out" 2>"$tmp/err" &&
        [ "$(grep -c "HVD_ROOT_PEER=tcp://10.1.2.3:7200 " "$tmp/out")" -eq 2 ]; } || fail "--root-peer not passed on"
{ "$HVDRUN" --dry-run --ssh "ssh -p 2222  -i key" -H nodeA:1 true >"$tmp/out" 2>"$tmp/err" &&
        grep -q "^rank 0 on nodeA: ssh -p 2222 -i key -o BatchMode=yes -o StrictHostKeyChecking=accept-new nodeA " "$tmp/out"; } ||
        fail "--ssh words: $(cat "$tmp/out")"
ok "--dry-run: ssh command lines quote every value for the remote shell; --root-peer, --ssh"

# ---- the remote path, through the stand-in ----
# shellcheck disable=SC2016 # expanded by the shell of each rank
echo "from stdin" | FAKE_SSH_LOG=$tmp/ssh.log "$HVDRUN" -H r1:2,r2:1 --ssh "$FAKE" --prefix-host -x "AWK=$awk_value" \
        sh -c 'read -r line; echo "$HVD_RANK/$HVD_SIZE $HVD_LOCAL_RANK/$HVD_LOCAL_SIZE $HVD_CROSS_RANK/$HVD_CROSS_SIZE ${#HVD_JOB_SECRET} $line"; echo "$AWK" | tail -n 1' \
        >"$tmp/out" 2>"$tmp/err" || fail "remote: exit status $?"
[ "$(sort "$tmp/out")" = "[0@r1] 0/3 0/2 0/2 32 from stdin
[0@r1] second line
[1@r1] 1/3 1/2 0/2 32 
[1@r1] second line
[2@r2] 2/3 0/1 1/2 32 
[2@r2] second line" ] || fail "remote: output was: $(cat "$tmp/out")"
[ "$(sort "$tmp/ssh.log" | tr '\n' ' ')" = "r1 r1 r2 " ] || fail "remote: ssh was run for: $(cat "$tmp/ssh.log")"
# shellcheck disable=SC2016 # expanded by the shell of each rank
"$HVDRUN" -H r1:1,r2:2 --ssh "$FAKE" --grace-period 0.5 sh -c 'echo $$ >'"$tmp"'/pid.$HVD_RANK;
        if [ $HVD_RANK = 1 ]; then exit 7; fi; exec sleep 60' >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 7 ] || fail "remote failure: hvdrun returned $rc, expected 7"
grep -qx "hvdrun: rank 1 on r2 exited with status 7" "$tmp/err" || fail "remote failure: message missing"
assert_no_workers "remote failure"
ok "remote ranks over ssh: environment, secret and stdin, prefixes, exit status"

# Ctrl-C: the remote processes are found by the job id in their environment,
# even one that left the ssh session's process group
# shellcheck disable=SC2016 # expanded by the shell of each rank
with_sigint "$HVDRUN" -H r1:2,r2:1 --ssh "$FAKE" sh -c 'echo $$ >'"$tmp"'/pid.$HVD_RANK;
        setsid sleep 60 & echo $! >'"$tmp"'/pid.child$HVD_RANK; wait' >"$tmp/out" 2>"$tmp/err" &
hp=$!
bg_pids+=("$hp")
for _ in $(seq 100); do [ "$(find "$tmp" -maxdepth 1 -name 'pid.child*' | wc -l)" -eq 3 ] && break; sleep 0.05; done
[ "$(find "$tmp" -maxdepth 1 -name 'pid.child*' | wc -l)" -eq 3 ] || fail "remote SIGINT: the ranks did not start"
t0=$(now_ms)
kill -INT "$hp"
wait "$hp"
rc=$?
t=$(($(now_ms) - t0))
[ $rc -eq 130 ] || fail "remote SIGINT: hvdrun returned $rc, expected 130"
[ $t -lt 10000 ] || fail "remote SIGINT: took $t ms (the workers sleep 60 s)"
sleep 0.2
assert_no_workers "remote SIGINT"
ok "SIGINT stops the remote ranks and their children ($t ms)"

# ---- emulated hosts ----
# shellcheck disable=SC2016 # expanded by the shell of each rank
out=$("$HVDRUN" -H a:2,b:1,c:1 --emulate-hosts --prefix-host sh -c \
        'echo $HVD_LOCAL_RANK/$HVD_LOCAL_SIZE $HVD_CROSS_RANK/$HVD_CROSS_SIZE $HVD_HOSTNAME $HVD_HOSTS $HVD_DATA_ADDR $HVD_ROOT_PEER $HVD_RUNTIME_DIR' \
        2>"$tmp/err") || fail "emulated env: exit status $?"
[ "$(sort <<<"$out" | cut -d' ' -f1-6)" = "[0@a] 0/2 0/3 a a:2,b:1,c:1 127.0.0.1
[1@a] 1/2 0/3 a a:2,b:1,c:1 127.0.0.1
[2@b] 0/1 1/3 b a:2,b:1,c:1 127.0.0.1
[3@c] 0/1 2/3 c a:2,b:1,c:1 127.0.0.1" ] || fail "emulated env: $out"
[ "$(cut -d' ' -f7 <<<"$out" | sort -u | grep -cE '^tcp://127\.0\.0\.1:[0-9]+$')" -eq 1 ] ||
        fail "emulated env: ranks disagree on the root peer: $out"
[ "$(cut -d' ' -f8 <<<"$out" | sort -u | wc -l)" -eq 3 ] || fail "emulated env: not one daemon per host: $out"
assert_tmpdir_empty "emulated env"
ok "--emulate-hosts: one private daemon per host, HVD_HOSTS, cross ranks, loopback data plane"

"$HVDRUN" -np 4 -H a:2,b:1,c:1 --emulate-hosts "$B/examples/train_mlp" -e "$TRAIN_MLP_EPOCHS" >"$tmp/out" 2>"$tmp/err" ||
        fail "train_mlp on emulated hosts: exit status $?"
found=$(train_mlp_outcome "$tmp/out" 4) || fail "train_mlp on emulated hosts: $found"
assert_tmpdir_empty "train_mlp on emulated hosts"
ok "hvdrun -np 4 -H a:2,b:1,c:1 --emulate-hosts train_mlp -e $TRAIN_MLP_EPOCHS: $found"

"$HVDRUN" -np 4 -H a:2,b:1,c:1 --emulate-hosts "$B/tests/worker_smoke" 2000000 >"$tmp/out" 2>"$tmp/err" ||
        fail "worker_smoke on emulated hosts: exit status $?"
grep -q 'coll ok size 4' "$tmp/out" || fail "worker_smoke on emulated hosts: no success line"
assert_tmpdir_empty "worker_smoke on emulated hosts"
ok "every collective exact over 3 emulated hosts (worker_smoke 2000000)"

# a rank that fails before joining: its status, the others stopped after the grace period
t0=$(now_ms)
# shellcheck disable=SC2016 # expanded by the shell of each rank
"$HVDRUN" -H a:2,b:1,c:1 --emulate-hosts --grace-period 1 sh -c 'echo $$ >'"$tmp"'/pid.$HVD_RANK;
        if [ $HVD_RANK = 2 ]; then sleep 0.3; exit 3; fi; exec "$0" -q -e 100000 --synthetic' "$B/examples/train_mlp" \
        >"$tmp/out" 2>"$tmp/err"
rc=$?
t=$(($(now_ms) - t0))
[ $rc -eq 3 ] || fail "failing rank: hvdrun returned $rc, expected 3"
grep -qx 'hvdrun: rank 2 on b exited with status 3' "$tmp/err" || fail "failing rank: message missing"
[ $t -lt 6000 ] || fail "failing rank: took $t ms"
assert_no_workers "failing rank"
assert_tmpdir_empty "failing rank"
ok "a rank on emulated host b exits 3: hvdrun exits 3 in $t ms, the others stopped"

# a rank killed while training: the daemons tell the others, which end at once
t0=$(now_ms)
# shellcheck disable=SC2016 # expanded by the shell of each rank
"$HVDRUN" -H a:2,b:1,c:1 --emulate-hosts --grace-period 30 sh -c 'echo $$ >'"$tmp"'/pid.$HVD_RANK;
        if [ $HVD_RANK = 2 ]; then exec timeout -s KILL 1.5 "$0" -q -e 100000 --synthetic; fi; exec "$0" -q -e 100000 --synthetic' \
        "$B/examples/train_mlp" >"$tmp/out" 2>"$tmp/err"
rc=$?
t=$(($(now_ms) - t0))
[ $rc -ne 0 ] || fail "killed rank: hvdrun returned 0"
[ "$(grep -c 'without calling hvd_shutdown' "$tmp/out" "$tmp/err" | awk -F: '{s += $2} END {print s}')" -ge 3 ] ||
        fail "killed rank: the other ranks were not told: $(cat "$tmp/out")"
[ $t -lt 10000 ] || fail "killed rank: took $t ms (the grace period is 30 s)"
assert_no_workers "killed rank"
assert_tmpdir_empty "killed rank"
ok "a rank killed on emulated host b: every other rank told, job over in $t ms (exit $rc)"

# shellcheck disable=SC2016 # expanded by the shell of each rank
with_sigint "$HVDRUN" -H a:2,b:1,c:1 --emulate-hosts sh -c 'echo $$ >'"$tmp"'/pid.$HVD_RANK; exec "$0" -q -e 100000 --synthetic' \
        "$B/examples/train_mlp" >"$tmp/out" 2>"$tmp/err" &
hp=$!
bg_pids+=("$hp")
for _ in $(seq 100); do [ "$(find "$tmp" -maxdepth 1 -name 'pid.*' | wc -l)" -eq 4 ] && break; sleep 0.05; done
[ "$(find "$tmp" -maxdepth 1 -name 'pid.*' | wc -l)" -eq 4 ] || fail "emulated SIGINT: the workers did not start"
[ "$(find "$TMPDIR" -maxdepth 1 -name 'hvdrun-*' | wc -l)" -eq 3 ] || fail "emulated SIGINT: expected 3 private daemon directories"
sleep 0.5
t0=$(now_ms)
kill -INT "$hp"
wait "$hp"
rc=$?
t=$(($(now_ms) - t0))
[ $rc -eq 130 ] || fail "emulated SIGINT: hvdrun returned $rc, expected 130"
[ $t -lt 10000 ] || fail "emulated SIGINT: took $t ms"
assert_no_workers "emulated SIGINT"
assert_tmpdir_empty "emulated SIGINT"
ok "SIGINT stops every emulated host's workers and removes every private directory (exit 130, $t ms)"

# ---- daemons the test starts: --node-daemon ----
start_daemon a --peer-listen 'tcp://127.0.0.1:*'
start_daemon b --peer-listen 'tcp://127.0.0.1:*'
start_daemon c
"$HVDRUN" -v -H a:2,b:1,c:1 --node-daemon a="$tmp/rt-a" --node-daemon b="$tmp/rt-b" --node-daemon c="$tmp/rt-c" \
        "$B/tests/worker_smoke" 2000000 >"$tmp/out" 2>"$tmp/err" || fail "--node-daemon: exit status $?"
grep -q 'coll ok size 4' "$tmp/out" || fail "--node-daemon: no success line"
grep -q "root daemon at $(cat "$tmp/rt-a/peer.endpoint")\$" "$tmp/err" || fail "--node-daemon: root peer not a's endpoint"
assert_tmpdir_empty "--node-daemon"
# hosts in another order: c (no peer endpoint) would be the root
"$HVDRUN" -H c:1,a:1 --node-daemon a="$tmp/rt-a" --node-daemon c="$tmp/rt-c" true >"$tmp/out" 2>"$tmp/err"
rc=$?
{ [ $rc -eq 1 ] && grep -q "has no peer endpoint.*--peer-listen.*--root-peer" "$tmp/err"; } ||
        fail "root without a peer endpoint: exit $rc: $(cat "$tmp/err")"
"$HVDRUN" -H a:1,z:1 --node-daemon a="$tmp/rt-a" --node-daemon z="$tmp/rt-none" true >"$tmp/out" 2>"$tmp/err"
rc=$?
{ [ $rc -eq 1 ] && grep -q "host z (--node-daemon): no hvd-coordinatord is running at $tmp/rt-none" "$tmp/err"; } ||
        fail "--node-daemon without a daemon: exit $rc: $(cat "$tmp/err")"
ok "--node-daemon: hosts served by running daemons; a missing daemon or peer endpoint is named"

# one node daemon here, one "remote" host through the stand-in, whose daemon
# is found at --runtime-dir as on a real remote host
start_daemon r
"$HVDRUN" -H a:2,r:2 --node-daemon a="$tmp/rt-a" --runtime-dir "$tmp/rt-r" --ssh "$FAKE" --prefix-host \
        "$B/examples/train_mlp" -e 2 >"$tmp/out" 2>"$tmp/err" || fail "node daemon + remote: exit status $?"
grep -q '^\[0@a\] final weights identical on all 4 ranks' "$tmp/out" || fail "node daemon + remote: no final line"
ok "train_mlp on a node daemon and a remote host reached by ssh: $(grep -o 'final weights.*' "$tmp/out")"

for d in a b c r; do
        eval "p=\$dpid_$d"
        kill -TERM "$p"
        wait "$p"
done
exit 0
