#!/bin/bash
# test-elastic-ssh.sh — an elastic job growing onto hosts of other
# machines over ssh. Each host is a network namespace: a (hvdrun's, with
# the host name a), b and c, joined by a bridge in a, each of b and c with
# a real hvd-coordinatord of its own (c's with a machine id of its own, so
# that its offer comes from another machine). A stand-in for ssh checks
# hvdrun's options and runs the command in the host's namespace, in a
# session of its own (a remote process is no child of the local ssh), with
# the host's runtime directory where --runtime-dir says. Cases: host b
# listed by the discovery script mid-job (the same weights on every rank),
# then dropped by it (its remote worker stopped by the clean-up over ssh),
# and refused with the reason when the job has no --root-peer;
# b's daemon killed (the job goes on at the smaller size), a host whose ssh
# fails (a clear line, blacklisted, the job keeps its hosts), and host c
# offered by its daemon (--ssh-offered-hosts) joining over ssh. Skipped
# without root, ip netns or torch.
. "${HVD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/elastic/lib.sh"
skip() {
        echo "SKIP: $1"
        exit 77
}
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
for c in ip unshare setsid mount; do command -v "$c" >/dev/null || skip "$c is not installed"; done

tag=$$
na=hvde${tag}a nb=hvde${tag}b nc=hvde${tag}c
net=10.219.$((tag % 250)).
root_ep=tcp://${net}1:7310
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
        for ns in "$na" "$nb" "$nc"; do
                for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
        done
        wait 2>/dev/null
        for ns in "$na" "$nb" "$nc"; do ip netns del "$ns" 2>/dev/null; done
        [ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$na" 2>/dev/null || skip "cannot create a network namespace"
{ ip netns add "$nb" && ip netns add "$nc"; } || fail "cannot create the namespaces"
{ ip -n "$na" link set lo up && ip -n "$na" link add br0 type bridge &&
        ip -n "$na" addr add "${net}1/24" dev br0 && ip -n "$na" link set br0 up; } ||
        skip "cannot make a bridge in a network namespace"
i=2
for h in b c; do
        ns=$nb
        [ $h = c ] && ns=$nc
        { ip -n "$na" link add "v$h" type veth peer name eth0 netns "$ns" && ip -n "$na" link set "v$h" master br0 &&
                ip -n "$na" link set "v$h" up && ip -n "$ns" addr add "$net$i/24" dev eth0 &&
                ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up; } || fail "cannot link host $h"
        i=$((i + 1))
done
printf 'b %s\nc %s\n' "$nb" "$nc" >"$tmp/hosts"
: >"$tmp/empty.conf"
mkdir "$tmp/rt" "$tmp/rt-b" "$tmp/rt-c"
# the stand-ins need a mount and a host name of their own in a namespace
ip netns exec "$nb" mount --bind "$tmp/rt-b" "$tmp/rt" 2>/dev/null || skip "cannot bind-mount in a network namespace"
ip netns exec "$na" unshare --uts hostname a 2>/dev/null || skip "cannot set a host name in a UTS namespace"

# the stand-in for ssh: the options hvdrun must pass, HOST COMMAND; a host
# not in $tmp/hosts cannot be reached (status 255, as ssh); a remote
# program killed by a signal gives 255 too
cat >"$tmp/fake-ssh" <<'EOF'
#!/bin/sh
d=${FAKE_SSH_DIR:?}
[ "$1 $2 $3 $4" = "-o BatchMode=yes -o StrictHostKeyChecking=accept-new" ] || { echo "fake-ssh: bad options: $*" >&2; exit 255; }
shift 4
[ $# -eq 2 ] || { echo "fake-ssh: expected HOST COMMAND, got: $*" >&2; exit 255; }
echo "$1" >>"$d/ssh.log"
ns=$(sed -n "s/^$1 //p" "$d/hosts")
[ -n "$ns" ] || { echo "ssh: connect to host $1 port 22: No route to host" >&2; exit 255; }
setsid ip netns exec "$ns" sh -c 'mount --bind "$1" "$2" && exec sh -c "$3"' sh "$d/rt-$1" "$d/rt" "$2"
st=$?
[ $st -gt 128 ] && exit 255
exit $st
EOF
chmod +x "$tmp/fake-ssh"
export FAKE_SSH_DIR=$tmp

# start_daemon HOST [OPTIONS...]: HOST's daemon in its namespace, with a
# machine id of its own; its pid in dpid
start_daemon() {
        local h=$1 ns=$nb
        shift
        [ "$h" = c ] && ns=$nc
        printf '%032x\n' "$((tag * 1000 + $(printf '%d' "'$h")))" >"$tmp/machine-id-$h"
        # shellcheck disable=SC2016 # expanded by the shell in the namespace
        ip netns exec "$ns" sh -c 'mount --bind "$1" /etc/machine-id && shift && exec "$@"' sh "$tmp/machine-id-$h" \
                "$B/daemon/hvd-coordinatord" -c "$tmp/empty.conf" --runtime-dir "$tmp/rt-$h" --log-level warning "$@" \
                2>"$tmp/daemon-$h.log" &
        dpid=$!
        for _ in $(seq 200); do [ -S "$tmp/rt-$h/worker.sock" ] && return 0; sleep 0.05; done
        fail "host $h's daemon did not start: $(cat "$tmp/daemon-$h.log")"
}
wait_for() {
        local end=$(($(date +%s) + $1))
        shift
        until "$@"; do
                [ "$(date +%s)" -lt "$end" ] || return 1
                sleep 0.1
        done
}
progress_at() { [ "$(cat "$tmp/progress" 2>/dev/null)" = "$1" ]; }
# the job's processes left in host b's namespace (its daemon aside)
left_in_b() {
        for p in $(ip netns pids "$nb"); do
                [ "$p" = "$1" ] && continue
                tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -q '^HVD_JOB_ID=' && echo "$p"
        done
}

# ssh_run NAME [HVDRUN OPTIONS...]: the training under hvdrun in host a's
# namespace (host name a), in the background (pid in hpid)
ssh_run() {
        name=$1
        shift
        : >"$tmp/progress"
        : >"$tmp/ssh.log"
        ip netns exec "$na" unshare --uts sh -c 'hostname a && exec "$@"' sh \
                timeout -k 5 150 "$B/tools/hvdrun" --ssh "$tmp/fake-ssh" --root-peer "$root_ep" --runtime-dir "$tmp/rt" \
                --discovery-interval 0.2 -x ELASTIC_EPOCHS -x ELASTIC_WAIT -x ELASTIC_PROGRESS -x HVD_ELASTIC_SETTLE \
                -np 2 -H a:2 "$@" "$PYTHON" "$S/tests/elastic/train.py" >"$tmp/out" 2>&1 &
        hpid=$!
}
finish() {
        wait "$hpid"
        rc=$?
        cp "$tmp/out" "$tmp/$name.out"
        [ "$rc" -eq 0 ] || fail "$name: exit status $rc"
}
last_gen() { grep -o 'ELASTIC gen=[0-9]*' "$tmp/out" | sort -t= -k2 -n | tail -n 1 | cut -d= -f2; }

# ---- without --root-peer, a host of another machine is refused, with the reason ----
: >"$tmp/progress"
: >"$tmp/ssh.log"
printf '0 0 a:2,b:1\n' >"$tmp/schedule"
ip netns exec "$na" unshare --uts sh -c 'hostname a && exec "$@"' sh \
        timeout -k 5 60 "$B/tools/hvdrun" --ssh "$tmp/fake-ssh" --runtime-dir "$tmp/rt" --discovery-interval 0.2 \
        -np 2 -H a:2 --max-np 3 --host-discovery-script "$S/tests/elastic/discover.sh $tmp/progress $tmp/schedule" \
        sh -c 'sleep 2' >"$tmp/out" 2>&1 || fail "a job refusing host b: exit status $?"
grep -q "^hvdrun: discovered host b is not added: it is another machine, and the daemons there cannot reach this job's root daemon (no --root-peer): give --root-peer tcp://ADDRESS:PORT" "$tmp/out" ||
        fail "no clear line for host b without --root-peer"
[ ! -s "$tmp/ssh.log" ] || fail "ssh ran without --root-peer: $(cat "$tmp/ssh.log")"
ok "without --root-peer, host b of another machine is refused with the reason (no ssh)"

# ---- a host of another machine listed by the script mid-job, then dropped ----
start_daemon b
bpid=$dpid
printf '0 0 a:2\n0 2 a:2,b:1\n1 2 a:2\n' >"$tmp/schedule"
ELASTIC_WAIT=0:2:a+a+b,1:2:a+a ssh_run grow --min-np 2 --max-np 3 \
        --host-discovery-script "$S/tests/elastic/discover.sh $tmp/progress $tmp/schedule"
finish
grep -q '^hvdrun: host b discovered: starting workers there over ssh$' "$tmp/out" || fail "host b was not started over ssh"
gen_b=$(grep -o 'ELASTIC gen=[0-9]* .*host=b' "$tmp/out" | head -n 1 | cut -d' ' -f2 | cut -d= -f2)
[ -n "$gen_b" ] || fail "no generation had a rank on host b"
check_generation "$gen_b" 3 "a a b"
grep -o "ELASTIC gen=$gen_b .*" "$tmp/out" | grep -q 'sync=1' || fail "generation $gen_b did not sync the state"
grep -q 'hvdrun: host b is no longer discovered: stopping worker 2' "$tmp/out" || fail "host b's worker was not stopped"
check_generation "$(last_gen)" 2 "a a"
check_results 2
[ "$(grep -c '^b$' "$tmp/ssh.log")" -ge 2 ] || fail "no clean-up over ssh on b: ssh ran for $(tr '\n' ' ' <"$tmp/ssh.log")"
wait_for 10 test -z "$(left_in_b "$bpid")" || fail "the remote worker on b still runs: $(left_in_b "$bpid")"
kill -0 "$bpid" || fail "host b's daemon is gone"
ok "host b of another machine joined over ssh (generation $gen_b on a a b, synced), dropped by the script: its remote worker stopped over ssh"

# ---- b's daemon killed, a host that ssh cannot reach, c offered by its daemon ----
printf '0 0 a:2,b:1,dead:1\n' >"$tmp/schedule"
ELASTIC_WAIT=0:1:a+a+b,0:4:a+a,1:1:a+a+c ssh_run lost --min-np 2 --max-np 4 --blacklist-cooldown 100 \
        --host-discovery-script "$S/tests/elastic/discover.sh $tmp/progress $tmp/schedule" --ssh-offered-hosts
wait_for 90 progress_at "0 4" || fail "the training did not reach epoch 0 batch 4 on a a b" "$(cat "$tmp/out" "$tmp/daemon-b.log")"
kill -9 "$bpid"
wait "$bpid" 2>/dev/null
wait_for 90 progress_at "1 1" || fail "the training did not go on without host b" "$(cat "$tmp/out")"
start_daemon c --elastic-root "$root_ep" --elastic-host c --elastic-slots 1
finish
grep -q '^hvdrun: the ssh session of worker [0-9]* on dead failed (status 255: ssh could not reach the host' "$tmp/out" ||
        fail "no clear line for the host ssh cannot reach"
grep -q '^hvdrun: host dead blacklisted for 100 s' "$tmp/out" || fail "host dead was not blacklisted"
grep -q '^hvdrun: host b blacklisted for 100 s' "$tmp/out" || fail "host b was not blacklisted once its daemon died"
grep -q "^hvdrun: host c offered by its daemon in $tmp/rt-c on another machine, over ssh: starting workers there$" "$tmp/out" ||
        fail "offered host c was not started over ssh"
grep -q 'ELASTIC gen=[0-9]* .*host=b' "$tmp/out" || fail "no generation had a rank on host b"
check_generation "$(last_gen)" 3 "a a c"
check_results 3 padded
ok "host b's daemon killed (the job went on on a a), host dead unreachable (blacklisted), offered host c joined over ssh (a a c)"
