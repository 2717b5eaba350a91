#!/bin/bash
# test-curve.sh — CURVE between daemons: hvdctl keygen writes a key pair
# (secret 0600, never overwritten); two daemons on loopback that list each
# other's keys run a 2-node job with exact results; a daemon whose key the
# root does not list, a daemon without CURVE (NULL mechanism) and a daemon
# that pins a wrong server key are each refused, the root logs why, and the
# job's worker gets a clear error within the start timeout — nobody hangs.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
b=$HVD_BUILDDIR
base=$(mktemp -d /tmp/hvd-curve-XXXXXX)
dpids=()
cleanup() {
        for p in "${dpids[@]}"; do kill -TERM "$p" 2>/dev/null; done
        for p in "${dpids[@]}"; do wait "$p" 2>/dev/null; done
        rm -rf "$base"
}
trap cleanup EXIT

# ---- keygen ----
for n in a b c; do
        out=$("$b/tools/hvdctl" keygen "$base/keys-$n" 2>&1) || fail "hvdctl keygen $n failed" "$out"
        [ "$(stat -c %a "$base/keys-$n/coordinatord.secret")" = 600 ] || fail "secret key file of $n is not mode 0600"
        k=$(grep -v '^#' "$base/keys-$n/coordinatord.key")
        [ ${#k} -eq 40 ] || fail "public key of $n is not 40 Z85 characters: '$k'"
        echo "$out" | grep -qF "public key $k" || fail "keygen did not print the public key" "$out"
done
cmp -s "$base/keys-a/coordinatord.key" "$base/keys-b/coordinatord.key" && fail "two keygens wrote the same key"
out=$("$b/tools/hvdctl" keygen "$base/keys-a" 2>&1) && fail "keygen overwrote an existing key pair" "$out"
echo "$out" | grep -q "File exists" || fail "keygen into a used directory: no clear message" "$out"
grep -qF "$(grep -v '^#' "$base/keys-a/coordinatord.secret")" "$base/keys-a/coordinatord.key" &&
        fail "the secret key was changed by the refused keygen"
echo "ok: keygen writes a pair, secret 0600, never overwrites"

# ---- daemons ----
# start_daemon NAME SECRET_FILE KEYS: a daemon with its own runtime dir on a free loopback port
start_daemon() {
        local n=$1 dir=$base/$1
        mkdir -p "$dir"
        {
                echo "start_timeout = 3s"
                echo "peer_timeout = 3s"
                [ -n "$2" ] && echo "curve_secret_key_file = $2"
                [ -n "$3" ] && echo "peer_public_keys = $3"
        } >"$dir/conf"
        "$b/daemon/hvd-coordinatord" -c "$dir/conf" --runtime-dir "$dir" --peer-listen 'tcp://127.0.0.1:*' \
                --log-level info 2>"$dir/daemon.log" &
        dpids+=($!)
        for _ in $(seq 200); do [ -s "$dir/peer.endpoint" ] && break; sleep 0.05; done
        [ -s "$dir/peer.endpoint" ] || fail "daemon $n did not start" "$(cat "$dir/daemon.log")"
}
# the root (a) lists b; b and the wrong-key daemon w list a's key (w gets c's under a's name)
mkdir -p "$base/peers-a" "$base/peers-b" "$base/peers-w"
cp "$base/keys-b/coordinatord.key" "$base/peers-a/b.key"
cp "$base/keys-a/coordinatord.key" "$base/peers-b/127.0.0.1.key"
cp "$base/keys-c/coordinatord.key" "$base/peers-w/127.0.0.1.key"
start_daemon a "$base/keys-a/coordinatord.secret" "$base/peers-a"
start_daemon b "$base/keys-b/coordinatord.secret" "$base/peers-b"
start_daemon c "$base/keys-c/coordinatord.secret" "$base/peers-b"
start_daemon n "" ""
start_daemon w "$base/keys-b/coordinatord.secret" "$base/peers-w"
root_peer=$(cat "$base/a/peer.endpoint")

# job HOST2 [SIZE_ARG]: a 2-rank job, rank 0 on the root a, rank 1 on HOST2
job() {
        local h2=$1 job=job-$1-$RANDOM pids=() s status=0 secret
        secret=$(printf '%08x%08x' $RANDOM$RANDOM $$)
        for r in 0 1; do
                local h=a
                [ $r -eq 1 ] && h=$h2
                ( HVD_JOB_ID=$job HVD_JOB_SECRET=$secret HVD_RANK=$r HVD_SIZE=2 HVD_LOCAL_RANK=0 \
                  HVD_LOCAL_SIZE=1 HVD_CROSS_RANK=$r HVD_CROSS_SIZE=2 HVD_HOSTS=a,$h2 HVD_HOSTNAME=$h \
                  HVD_ROOT_PEER=$root_peer HVD_RUNTIME_DIR=$base/$h HVD_DATA_ADDR=127.0.0.1 \
                  exec timeout -k 5 60 "$b/tests/worker_smoke" 100000 2>&1 | sed -u "s/^/[$r] /";
                  exit "${PIPESTATUS[0]}" ) &
                pids+=($!)
        done
        for p in "${pids[@]}"; do
                wait "$p"; s=$?
                [ $status -eq 0 ] && [ $s -ne 0 ] && status=$s
        done
        return $status
}

out=$(job b) || fail "2-node job over CURVE failed" "$out$(cat "$base/a/daemon.log" "$base/b/daemon.log")"
echo "$out" | grep -q "coll ok size 2" || fail "2-node job over CURVE: no success line" "$out"
grep -q "authenticated as 'b'" "$base/a/daemon.log" || fail "the root did not log b's key" "$(cat "$base/a/daemon.log")"
echo "ok: 2-node job over CURVE, exact results"

# refusals: each job must fail with a clear message within the deadline
refused() {
        local h=$1 what=$2 rootlog=$3 worker=$4 start ms out
        start=$(date +%s%N)
        out=$(job "$h") && fail "$what: the job succeeded" "$out"
        ms=$(( ($(date +%s%N) - start) / 1000000 ))
        [ "$ms" -lt 20000 ] || fail "$what: the job took $ms ms to fail"
        grep -qE "$rootlog" "$base/a/daemon.log" || fail "$what: the root did not log '$rootlog'" "$(cat "$base/a/daemon.log")"
        echo "$out" | grep -qE "^\[1\] .*$worker" || fail "$what: rank 1 was not told '$worker'" "$out"
        echo "ok: $what refused in $ms ms"
}
keyc=$(grep -v '^#' "$base/keys-c/coordinatord.key")
refused c "a daemon with an unlisted key" "refused a peer daemon at 127\.0\.0\.1: its CURVE key .* is not listed" \
        "(lost contact with|start timeout:) the root daemon at"
grep -F "refused a peer daemon" "$base/a/daemon.log" | grep -qF "key $keyc is not listed" ||
        fail "the root did not name the refused key" "$(cat "$base/a/daemon.log")"
# libzmq reports the mechanism mismatch, or, when the NULL client hangs up
# first on seeing the CURVE greeting, a broken pipe during the handshake
refused n "a daemon without CURVE" \
        "a client without CURVE \(NULL or PLAIN mechanism\) was refused|a client hung up during the CURVE handshake" \
        "(lost contact with|start timeout:) the root daemon at"
refused w "a daemon pinning a wrong server key" "failed the CURVE handshake" \
        "never answered: is the CURVE key listed for it its public key"
# with CURVE on, the unlisted daemon (c) logs the same hint
grep -q "never answered" "$base/c/daemon.log" || fail "daemon c did not log the CURVE hint" "$(cat "$base/c/daemon.log")"

# a daemon must refuse to start with a secret key others can read, and with no key listed
chmod 0644 "$base/keys-c/coordinatord.secret"
mkdir -p "$base/bad"
printf 'curve_secret_key_file = %s\npeer_public_keys = %s\n' "$base/keys-c/coordinatord.secret" "$base/peers-a" >"$base/bad/conf"
out=$(timeout 10 "$b/daemon/hvd-coordinatord" -c "$base/bad/conf" --runtime-dir "$base/bad" 2>&1) &&
        fail "a daemon started with a world-readable secret key" "$out"
echo "$out" | grep -q "readable by others" || fail "no clear message for a world-readable secret key" "$out"
chmod 0600 "$base/keys-c/coordinatord.secret"
mkdir -p "$base/empty-keys"
printf 'curve_secret_key_file = %s\npeer_public_keys = %s\n' "$base/keys-c/coordinatord.secret" "$base/empty-keys" >"$base/bad/conf"
out=$(timeout 10 "$b/daemon/hvd-coordinatord" -c "$base/bad/conf" --runtime-dir "$base/bad" 2>&1) &&
        fail "a daemon started with no peer keys listed" "$out"
echo "$out" | grep -q "lists no key" || fail "no clear message for an empty key list" "$out"
echo "ok: unsafe or empty key configurations are refused at start"
