#!/bin/bash
# test-netns-delay.sh — a job across two test hosts (network namespaces)
# whose data plane goes through a forwarder, as behind a NAT or firewall:
# every rank pins its listener (HVD_DATA_PORT, a range) and advertises
# another port (HVD_DATA_ADDR=HOST:PORT), where tests/delay_proxy listens
# and forwards to the listener 1 ms late each way; the daemons' link goes
# through a delay proxy too. Every collective must give exact results, the
# ring's connection must have gone through the proxy, and bad values of
# the two variables must fail hvd_init with a clear error.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
. "$HVD_SRCDIR/tests/lib/netpair.sh"
[ "$(id -u)" -eq 0 ] || skip "creating network namespaces needs root"
command -v ip >/dev/null || skip "ip (iproute2) is not installed"
proxy=$HVD_BUILDDIR/tests/delay_proxy

tag=$$
na=hvdd${tag}a nb=hvdd${tag}b va=hda${tag} vb=hdb${tag}
net=10.218.$((tag % 250)).
base=$(mktemp -d /tmp/hvd-netns-delay-XXXXXX)
pids=()
cleanup() { netpair_teardown "$na" "$nb" "$base" "${pids[@]}"; }
trap cleanup EXIT

# bad values fail at once, before any daemon is reached
for bad in "HVD_DATA_PORT=70000" "HVD_DATA_PORT=9-3" "HVD_DATA_PORT=x" "HVD_DATA_ADDR=127.0.0.1:0" \
        "HVD_DATA_ADDR=127.0.0.1:http"; do
        out=$(env HVD_JOB_ID=bad HVD_JOB_SECRET=00 HVD_RANK=0 HVD_SIZE=2 HVD_LOCAL_RANK=0 HVD_LOCAL_SIZE=1 \
                HVD_CROSS_RANK=0 HVD_CROSS_SIZE=2 HVD_HOSTS=a:1,b:1 HVD_HOSTNAME=a HVD_RUNTIME_DIR="$base/none" \
                "$bad" timeout 20 "$HVD_BUILDDIR/tests/worker_smoke" 1000 2>&1) && fail "$bad was accepted"
        case $out in
        *"${bad%%=*}='${bad#*=}'"*) ;;
        *) fail "$bad: the error does not name the variable and its value" "$out" ;;
        esac
done
echo "ok: bad HVD_DATA_PORT / HVD_DATA_ADDR values are refused with their name and value"

netpair_test "$na" "$nb" "$va" "$vb" "${net}1" "${net}2"

# a port already taken inside the pinned range: the rank takes the next one
ip netns exec "$nb" "$proxy" --max-seconds 120 "${net}2:7400" "${net}2:9" 0 >"$base/squat.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do grep -qs listening "$base/squat.log" && break; sleep 0.05; done
# a range with no free port
out=$(ip netns exec "$nb" env HVD_JOB_ID=full HVD_JOB_SECRET=00 HVD_RANK=1 HVD_SIZE=2 HVD_LOCAL_RANK=0 \
        HVD_LOCAL_SIZE=1 HVD_CROSS_RANK=1 HVD_CROSS_SIZE=2 HVD_HOSTS=a:1,b:1 HVD_HOSTNAME=b HVD_RUNTIME_DIR="$base/none" \
        HVD_DATA_PORT=7400 HVD_DATA_ADDR="${net}2:7500" timeout 20 "$HVD_BUILDDIR/tests/worker_smoke" 1000 2>&1) &&
        fail "a listener on a taken port was accepted"
case $out in
*"no free port in HVD_DATA_PORT=7400"*) ;;
*) fail "a full HVD_DATA_PORT range: the error does not say so" "$out" ;;
esac
echo "ok: a range whose ports are all taken is refused, naming it"
netpair_daemons "$HVD_BUILDDIR/daemon/hvd-coordinatord" "$base" "$na" "$nb" "${net}1"
for p in $NP_PIDS; do pids+=("$p"); done
# the daemons' link: b -> proxy in b -> a's peer port
ip netns exec "$nb" "$proxy" --max-seconds 120 "${net}2:7200" "${net}1:7100" 1000 >"$base/proxy-ctl.log" 2>&1 &
pids+=($!)
# the data plane: HOST:7500 -> HOST:7400-7401 (whichever each rank bound)
for h in a b; do
        ns=$na ip=${net}1
        [ $h = b ] && ns=$nb ip=${net}2
        port=7400
        [ $h = b ] && port=7401
        ip netns exec "$ns" "$proxy" --max-seconds 120 "$ip:7500" "$ip:$port" 1000 >"$base/proxy-$h.log" 2>&1 &
        pids+=($!)
done
for _ in $(seq 200); do
        [ -S "$base/a/worker.sock" ] && [ -S "$base/b/worker.sock" ] &&
                grep -qs listening "$base/proxy-ctl.log" "$base/proxy-a.log" "$base/proxy-b.log" "$base/squat.log" &&
                [ "$(cat "$base"/proxy-*.log "$base/squat.log" | grep -c listening)" -eq 4 ] && break
        sleep 0.05
done

job=delay-$tag secret=0123456789abcdef
wpids=()
for r in 0 1; do
        ns=$na ip=${net}1 h=a
        [ $r = 1 ] && ns=$nb ip=${net}2 h=b
        ip netns exec "$ns" env HVD_JOB_ID=$job HVD_JOB_SECRET=$secret HVD_RANK=$r HVD_SIZE=2 \
                HVD_LOCAL_RANK=0 HVD_LOCAL_SIZE=1 HVD_CROSS_RANK=$r HVD_CROSS_SIZE=2 HVD_HOSTS=a:1,b:1 \
                HVD_HOSTNAME=$h HVD_ROOT_PEER="tcp://${net}2:7200" HVD_RUNTIME_DIR="$base/$h" \
                HVD_DATA_PORT=7400-7401 HVD_DATA_ADDR="$ip:7500" HVD_START_TIMEOUT=60 \
                timeout -k 5 90 "$HVD_BUILDDIR/tests/worker_smoke" 300000 >"$base/rank$r.log" 2>&1 &
        wpids+=($!)
done
status=0
for p in "${wpids[@]}"; do wait "$p" || status=1; done
[ $status -eq 0 ] || fail "the job through the forwarders failed" \
        "$(tail -n 5 "$base"/rank*.log "$base"/a.log "$base"/b.log "$base"/proxy-*.log)"
grep -q "coll ok size 2" "$base/rank0.log" || fail "no success line" "$(cat "$base/rank0.log")"
# rank 0 connects to rank 1 (the lower rank connects): through b's proxy,
# to the port rank 1 bound (7400 was taken in b)
grep -q "connection to ${net}2:7401" "$base/proxy-b.log" ||
        fail "the ring's connection did not go through the forwarder to the pinned port" "$(cat "$base/proxy-b.log")"
grep -q "connection to ${net}1:7100" "$base/proxy-ctl.log" || fail "the daemons' link did not go through its proxy"
echo "ok: 2 ranks on 2 namespaced hosts, data plane on pinned ports behind forwarders with 1 ms each way: every collective exact"
