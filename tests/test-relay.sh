#!/bin/bash
# test-relay.sh — control plane relays over five daemons on loopback
# (tests/lib/launch-multi.sh, every daemon with --relay-fanout 2: hosts b, c
# report through b's daemon, d, e through d's):
# - first steps of new names that each host's ranks batch differently, then
#   60 steps of 15 cached tensors, every element exact on every rank, while
#   the metrics show that the root got the relayed groups' readiness from
#   the relays (hvd_relay_messages_total{direction="root"}) and that each
#   relay sent the root fewer messages than it took from its group (the ids
#   every host posted merged into one entry);
# - a stall in a relayed group: one rank of host c stays away from a cached
#   tensor; the root's status and every waiting rank name exactly that rank;
# - a relay daemon killed under a running job: every rank of the other
#   hosts ends with an error that names the lost host, none hangs;
# - a tree of relays two levels deep (8 hosts, fanout 2: b relays for c and
#   e, c for d, f for g and h): exact steady steps, the ids of the whole
#   subtree merged at each level, status naming each daemon's part; then
#   the middle relay (c) killed: every rank ends naming host c; and a rank
#   two relays down that stays away from a tensor: the root's status and
#   the waiting ranks name exactly that rank.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || skip "$PY is needed to parse the metrics"
hvdctl=$HVD_BUILDDIR/tools/hvdctl
worker=$HVD_BUILDDIR/tests/worker_collectives
multi=$HVD_SRCDIR/tests/lib/launch-multi.sh
tmp=$(mktemp -d /tmp/hvd-test-relay-XXXXXX)
lp=
cleanup() {
        touch "$tmp/hold.go" "$tmp/kill.go"
        [ -n "$lp" ] && { sleep 0.5; kill -TERM "$lp" 2>/dev/null; wait "$lp" 2>/dev/null; }
        rm -rf "$tmp"
}
trap cleanup EXIT
export HVD_TEST_DAEMON_ARGS="--relay-fanout 2"
hosts=a:2,b:1,c:2,d:1,e:2 # ranks: a 0-1, b 2, c 3-4, d 5, e 6-7

steps=60
mkdir "$tmp/logs"
# shellcheck disable=SC2016 # expanded by the shell of each rank
HVD_TEST_DAEMON_ARGS="--relay-fanout 2" \
        HVD_TEST_LOG_DIR=$tmp/logs HVD_TEST_STEPS=$steps HVD_TEST_HOLD=$tmp/hold "$multi" -H $hosts -t 120 -- \
        sh -c 'echo "$HVD_RUNTIME_DIR" > '"$tmp"'/rt.$HVD_RANK; exec "$0" staggered steady' "$worker" >"$tmp/job.out" 2>&1 &
lp=$!
wait_files 60 "$tmp/hold.ready" || fail "the job did not reach its hold point" "$(cat "$tmp/job.out")"
"$hvdctl" -r "$(cat "$tmp/rt.0")" metrics >"$tmp/root.prom" || fail "metrics of the root daemon: exit $?"
"$hvdctl" -r "$(cat "$tmp/rt.2")" metrics >"$tmp/b.prom" || fail "metrics of host b's daemon: exit $?"
"$hvdctl" -r "$(cat "$tmp/rt.5")" metrics >"$tmp/d.prom" || fail "metrics of host d's daemon: exit $?"
"$hvdctl" -r "$(cat "$tmp/rt.3")" metrics >"$tmp/c.prom" || fail "metrics of host c's daemon: exit $?"
for r in 0 2 3; do
        "$hvdctl" -r "$(cat "$tmp/rt.$r")" status --json >"$tmp/status.$r" || fail "status of rank $r's daemon: exit $?"
done
touch "$tmp/hold.go"
wait $lp || fail "the steady job failed" "$(cat "$tmp/job.out")"
lp=
out=$(cat "$tmp/job.out")
# a job that ends well leaves no error or warning in any daemon's log (the
# root, whose ranks are done first, may let the job go before the others'
# last departures reach it: that is its end, not a lost host)
errs=$(grep -H -E 'error|warning' "$tmp"/logs/daemon-*.log)
[ -z "$errs" ] || fail "the daemons logged errors for a job that ended well" "$errs"
n=$(grep -c "steady: ok" <<<"$out")
[ "$n" -eq 8 ] || fail "$n of 8 ranks passed the steady scenario" "$out"
n=$(grep -c "staggered: ok" <<<"$out")
[ "$n" -eq 8 ] || fail "$n of 8 ranks passed the staggered scenario" "$out"
grep -q "rank 0: steady: $steps steps of 15 tensors exact" <<<"$out" || fail "no summary line" "$out"
"$PY" - "$tmp" "$HVD_SRCDIR/tests/lib/promparse.py" "$steps" <<'EOF' || fail "the relays did not carry the first steps and the steady state"
import json, subprocess, sys
tmp, parser, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def load(n):
    return json.loads(subprocess.run([sys.executable, parser, f"{tmp}/{n}.prom"], check=True,
                                     capture_output=True, text=True).stdout)
root, b, d, c = load("root"), load("b"), load("d"), load("c")
get = lambda m, k: m.get(f'hvd_relay_messages_total{{direction="{k}"}}', 0)
print(f"root: relayed messages {get(root, 'root'):.0f}, node-level ids {root['hvd_node_cached_ids_total{}']:.0f}; "
      f"relay b: in {get(b, 'in'):.0f} out {get(b, 'out'):.0f}; relay d: in {get(d, 'in'):.0f} "
      f"out {get(d, 'out'):.0f}; c: in {get(c, 'in'):.0f} out {get(c, 'out'):.0f}")
ok = True
for name, r in (("b", b), ("d", d)):
    # two hosts a group, a message or more from each per step
    if not (get(r, "in") >= 2 * (steps - 1) * 3 / 4 and 0 < get(r, "out") < get(r, "in")):
        print(f"relay {name}: in/out not as expected"); ok = False
    # the steady state's 15 ids went on merged, one entry for both hosts
    # (released host by host only after 500 ms: a rare straggler)
    gids = r.get("hvd_relay_group_ids_total{}", 0)
    print(f"relay {name}: {gids:.0f} ids merged for the group")
    if gids < 15 * (steps - 1) * 3 / 4:
        print(f"relay {name}: too few ids merged for the group"); ok = False
# every node-level message reached the root through a relay
if not (get(root, "root") >= 2 * (steps - 1) * 3 / 4 and root["hvd_node_readiness_total{kind=\"node\"}"] >= 4 * (steps - 1) * 3 / 4):
    print("root: too few relayed messages"); ok = False
# c reports through b: it relays nothing itself
if get(c, "in") or get(c, "out"):
    print("host c relayed"); ok = False
sys.exit(0 if ok else 1)
EOF
"$PY" - "$tmp" <<'EOF' || fail "hvdctl status does not show the relays" "$(cat "$tmp"/status.*)"
import json, re, sys
tmp = sys.argv[1]
rel = {r: json.load(open(f"{tmp}/status.{r}"))["jobs"][0]["relay"] for r in (0, 2, 3)}
print(rel)
ok = rel[0] == "4 hosts report through 2 relay daemons (2 hosts a group)"
ok = ok and rel[2] == "relays for hosts [c]"
ok = ok and re.fullmatch(r"reports through the relay daemon of host b at tcp://127\.0\.0\.1:\d+", rel[3]) is not None
sys.exit(0 if ok else 1)
EOF
echo "ok: $steps steps exact on 5 hosts; hosts b-e reached the root through two relays, merged; status shows them"

# stall_named NAME RANK WANT RANK...: a job on $hosts in which RANK stays
# away from a tensor; the root's status shows WANT, and each RANK... is
# told it when the job gives up
stall_named() {
        local name=$1 missing=$2 want=$3 r
        shift 3
        # shellcheck disable=SC2016 # expanded by the shell of each rank
        HVD_STALL_CHECK_TIME_SECONDS=1 HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=5 HVD_TEST_STALL_RANK=$missing \
                "$multi" -H $hosts -t 60 -- \
                sh -c 'echo "$HVD_RUNTIME_DIR" > '"$tmp/$name"'.$HVD_RANK; exec "$0" stall-one' "$worker" \
                >"$tmp/$name.out" 2>&1 &
        lp=$!
        wait_files 10 "$tmp/$name.0" || fail "the $name job did not start" "$(cat "$tmp/$name.out")"
        stalled=$(job_stalled "$tmp/$name.0" $lp)
        [ "$stalled" = "$want" ] ||
                fail "$name: the root's status shows the stall as \"$stalled\", expected \"$want\"" "$(cat "$tmp/$name.out")"
        wait $lp
        lp=
        for r in "$@"; do
                grep "^\[$r@[a-h]\] rank $r: stall-one: " "$tmp/$name.out" | grep -qF "stalled for more than 5 s: $want" ||
                        fail "$name: rank $r was not told which rank is missing" "$(cat "$tmp/$name.out")"
        done
}

# a stall in a relayed group: rank 4 (host c, reporting through b) stays away
stall_named stall 4 "'stall.t' ready on ranks [0, 1, 2, 3, 5, 6, 7], missing ranks [4]" 0 1 2 3 5 6 7
echo "ok: a stall in a relayed group names the missing rank (status and every waiting rank)"

# relay b's daemon killed while the job holds: the others end, naming host b
# shellcheck disable=SC2016 # expanded by the shell of each rank
HVD_TEST_STEPS=5 HVD_TEST_HOLD=$tmp/kill "$multi" -H $hosts -t 60 -- \
        sh -c 'echo "$HVD_RUNTIME_DIR" > '"$tmp"'/krt.$HVD_RANK; exec "$0" steady' "$worker" >"$tmp/kill.out" 2>&1 &
lp=$!
wait_files 60 "$tmp/kill.ready" || fail "the kill job did not reach its hold point" "$(cat "$tmp/kill.out")"
bdir=$(cat "$tmp/krt.2")
bpid=$(pgrep -f -- "--runtime-dir $bdir " | head -n 1)
[ -n "$bpid" ] || fail "no daemon found for host b ($bdir)"
kill -KILL "$bpid"
t0=$(now_ms)
touch "$tmp/kill.go"
wait $lp
rc=$?
lp=
ms=$(($(now_ms) - t0))
[ "$rc" -ne 0 ] || fail "the job survived the loss of a relay daemon" "$(cat "$tmp/kill.out")"
for r in 0 1 3 4 5 6 7; do
        grep "^\[$r@[a-e]\] rank $r: FAIL \[shutdown\]" "$tmp/kill.out" | grep -q "host b" ||
                fail "rank $r did not fail naming host b" "$(cat "$tmp/kill.out")"
done
[ "$ms" -lt 30000 ] || fail "the ranks took $ms ms to end" "$(cat "$tmp/kill.out")"
echo "ok: a relay daemon lost mid-job: every other rank failed naming host b, in $ms ms"

# a tree two levels deep: 7 hosts under the root, at most 2 reporting to a
# daemon: b relays for c (which relays for d) and e; f for g and h
hosts=a:2,b:1,c:2,d:1,e:2,f:1,g:2,h:1 # ranks: a 0-1, b 2, c 3-4, d 5, e 6-7, f 8, g 9-10, h 11
# shellcheck disable=SC2016 # expanded by the shell of each rank
HVD_TEST_STEPS=$steps HVD_TEST_HOLD=$tmp/tree "$multi" -H $hosts -t 120 -- \
        sh -c 'echo "$HVD_RUNTIME_DIR" > '"$tmp"'/trt.$HVD_RANK; exec "$0" steady' "$worker" >"$tmp/tree.out" 2>&1 &
lp=$!
wait_files 60 "$tmp/tree.ready" || fail "the tree job did not reach its hold point" "$(cat "$tmp/tree.out")"
for r in 0 2 3 5; do
        "$hvdctl" -r "$(cat "$tmp/trt.$r")" metrics >"$tmp/t$r.prom" || fail "metrics of rank $r's daemon: exit $?"
        "$hvdctl" -r "$(cat "$tmp/trt.$r")" status --json >"$tmp/tstatus.$r" || fail "status of rank $r's daemon: exit $?"
done
n=$(grep -c "steady: ok" "$tmp/tree.out")
[ "$n" -eq 12 ] || fail "$n of 12 ranks passed the steady scenario on the tree" "$(cat "$tmp/tree.out")"
"$PY" - "$tmp" "$HVD_SRCDIR/tests/lib/promparse.py" "$steps" <<'EOF' || fail "the tree of relays did not carry the steady state" "$(cat "$tmp"/tstatus.*)"
import json, re, subprocess, sys
tmp, parser, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def load(n):
    return json.loads(subprocess.run([sys.executable, parser, f"{tmp}/t{n}.prom"], check=True,
                                     capture_output=True, text=True).stdout)
root, b, c, d = load(0), load(2), load(3), load(5)
rel = {r: json.load(open(f"{tmp}/tstatus.{r}"))["jobs"][0]["relay"] for r in (0, 2, 3, 5)}
print(rel)
ok = rel[0] == "7 hosts report through 3 relay daemons in 2 levels (2 under the root, at most 2 hosts a relay)"
ok = ok and rel[2] == "relays for hosts [c, e] (3 hosts in all)"
ok = ok and re.fullmatch(r"relays for hosts \[d\]; reports through the relay daemon of host b at tcp://127\.0\.0\.1:\d+", rel[3]) is not None
ok = ok and re.fullmatch(r"reports through the relay daemon of host c at tcp://127\.0\.0\.1:\d+", rel[5]) is not None
get = lambda m, k: m.get(f'hvd_relay_messages_total{{direction="{k}"}}', 0)
gids = lambda m: m.get("hvd_relay_group_ids_total{}", 0)
print(f"relay c: in {get(c, 'in'):.0f} out {get(c, 'out'):.0f}, {gids(c):.0f} ids merged; relay b: in {get(b, 'in'):.0f} "
      f"out {get(b, 'out'):.0f}, {gids(b):.0f} ids merged; root: relayed messages {get(root, 'root'):.0f}")
# c merges c and d; b merges b, c's merged entries (for c and d) and e
for name, r in (("c", c), ("b", b)):
    if gids(r) < 15 * (steps - 1) * 3 / 4 or not 0 < get(r, "out") < get(r, "in"):
        print(f"relay {name}: too few ids merged, or no fewer messages out than in"); ok = False
if get(d, "in") or get(d, "out"):
    print("host d relayed"); ok = False
if get(root, "root") < 2 * (steps - 1) * 3 / 4:
    print("root: too few relayed messages"); ok = False
sys.exit(0 if ok else 1)
EOF
cdir=$(cat "$tmp/trt.3")
cpid=$(pgrep -f -- "--runtime-dir $cdir " | head -n 1)
[ -n "$cpid" ] || fail "no daemon found for host c ($cdir)"
kill -KILL "$cpid"
touch "$tmp/tree.go"
wait $lp
rc=$?
lp=
[ "$rc" -ne 0 ] || fail "the job survived the loss of a relay daemon in the middle of the tree" "$(cat "$tmp/tree.out")"
for r in 0 1 2 5 6 7 8 9 10 11; do
        grep "^\[$r@[a-h]\] rank $r: FAIL \[shutdown\]" "$tmp/tree.out" | grep -q "host c" ||
                fail "rank $r did not fail naming host c" "$(cat "$tmp/tree.out")"
done
echo "ok: a tree of relays two levels deep: $steps steps exact, ids merged at both levels; its middle relay lost: every rank named host c"

# a stall two levels down: rank 5 (host d, below c, below b) stays away
stall_named tree-stall 5 "'stall.t' ready on ranks [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11], missing ranks [5]" 0 2 3 4 6 11
echo "ok: a stall two relays down names the missing rank"
