# netfault.sh — network fault harness for the tests/test-netfault-*.sh
# scripts (sourced after common.sh). Two test hosts: network namespaces
# "a" (10.214.0.1, the root daemon of every spanning job) and "b"
# (10.214.0.2), joined by a veth pair; one hvd-coordinatord in each with
# short deadlines; daemon b reaches daemon a through tests/lib/
# tests/delay_proxy (in b) so that the control plane can be stalled. Faults are
# made only inside these namespaces: nftables rules in a table of b's own
# ruleset, tc qdiscs on b's veth end, signals to processes started here.
# Everything is removed on exit (trap), also when a check fails.
#
# nf_case NAME INJECT HEAL: a 2-rank job spanning a and b runs allreduces;
# INJECT makes the fault (a shell function); every rank must end with an
# error within the limit naming the job, the lost host and ranks and the
# cause, while a job local to each surviving daemon completes; then HEAL,
# and a new spanning job must complete with exact results. The time from
# the fault to each rank's error is printed ("detect").
# shellcheck shell=bash
: "${HVD_BUILDDIR:?}" "${HVD_SRCDIR:?}"
. "$HVD_SRCDIR/tests/lib/netpair.sh"
[ "$(id -u)" -eq 0 ] || skip "network namespaces and nftables need root"
command -v ip >/dev/null || skip "ip (iproute2) is not installed (scripts/setup.sh installs it)"
NF_WORKER=$HVD_BUILDDIR/tests/worker_netfault
NF_COLL_TIMEOUT_MS=${NF_COLL_TIMEOUT_MS:-3000}
NF_PEER_TIMEOUT_MS=${NF_PEER_TIMEOUT_MS:-2000}
# the promise is deadline + 1 s; a loaded 2-core CI machine gets 2 s more
NF_SLACK_MS=${NF_SLACK_MS:-2000}

nf_tag=$$
NF_NA=hvdf${nf_tag}a NF_NB=hvdf${nf_tag}b
nf_va=hfa${nf_tag} nf_vb=hfb${nf_tag}
NF_IPA=10.214.0.1 NF_IPB=10.214.0.2
NF_BASE=$(mktemp -d /tmp/hvd-netfault-XXXXXX)
NF_ROOT_PEER=tcp://$NF_IPB:7200 # the proxy, in b, to a's 7100
declare -A NF_DPID=()
nf_pids=()
nf_jobn=0

nf_cleanup() {
        for p in "${nf_pids[@]}" "${NF_DPID[@]}"; do kill -KILL "$p" 2>/dev/null; done
        wait 2>/dev/null
        ip netns del "$NF_NA" 2>/dev/null
        ip netns del "$NF_NB" 2>/dev/null # its nftables table and qdiscs go with it
        rm -rf "$NF_BASE"
}
trap nf_cleanup EXIT
trap 'exit 130' INT TERM

nf_now() { date +%s%3N; }

nf_setup() {
        netpair_test "$NF_NA" "$NF_NB" "$nf_va" "$nf_vb" "$NF_IPA" "$NF_IPB"
        mkdir -p "$NF_BASE/a" "$NF_BASE/b"
        printf 'collective_timeout = %dms\npeer_timeout = %dms\nstart_timeout = 10s\n' \
                "$NF_COLL_TIMEOUT_MS" "$NF_PEER_TIMEOUT_MS" >"$NF_BASE/daemon.conf"
        nf_start_daemon a
        nf_start_daemon b
        ip netns exec "$NF_NB" "$HVD_BUILDDIR/tests/delay_proxy" --max-seconds 300 "$NF_IPB:7200" "$NF_IPA:7100" 1000 >"$NF_BASE/proxy.log" 2>&1 &
        NF_PROXY=$!
        nf_pids+=("$NF_PROXY")
        for _ in $(seq 100); do grep -q listening "$NF_BASE/proxy.log" && break; sleep 0.05; done
        grep -q listening "$NF_BASE/proxy.log" || fail "the delay proxy did not start" "$(cat "$NF_BASE/proxy.log")"
}

# nf_nft ARGS...: nft in namespace b (the table exists only there)
nf_nft() { ip netns exec "$NF_NB" nft "$@"; }

nf_need_nft() {
        command -v nft >/dev/null || skip "nft (nftables) is not installed (scripts/setup.sh installs it)"
        local err
        err=$(nf_nft add table inet hvdnf 2>&1) || skip "nftables unavailable in a namespace: $err"
        { nf_nft add chain inet hvdnf input '{ type filter hook input priority 0; policy accept; }' &&
                nf_nft add chain inet hvdnf output '{ type filter hook output priority 0; policy accept; }'; } ||
                skip "cannot add nftables chains"
}

nf_heal_nft() { nf_nft flush chain inet hvdnf input && nf_nft flush chain inet hvdnf output; }

# nf_start_daemon a|b [LOG_SUFFIX]
nf_start_daemon() {
        local h=$1 ns ip listen=()
        [ "$h" = a ] && ns=$NF_NA && listen=(--peer-listen "tcp://$NF_IPA:7100")
        [ "$h" = b ] && ns=$NF_NB
        rm -f "$NF_BASE/$h/worker.sock"
        ip netns exec "$ns" "$HVD_BUILDDIR/daemon/hvd-coordinatord" -c "$NF_BASE/daemon.conf" --runtime-dir "$NF_BASE/$h" \
                "${listen[@]}" --log-level "${HVD_TEST_LOG_LEVEL:-warning}" 2>>"$NF_BASE/$h.log" &
        NF_DPID[$h]=$!
        for _ in $(seq 200); do [ -S "$NF_BASE/$h/worker.sock" ] && break; sleep 0.05; done
        [ -S "$NF_BASE/$h/worker.sock" ] || fail "daemon $h did not start" "$(cat "$NF_BASE/$h.log")"
}

# nf_spawn DIR JOB ARGS...: the 2-rank spanning job, rank 0 on a, rank 1 on b;
# outputs DIR/rank0, DIR/rank1; pids in NF_RPIDS
nf_spawn() {
        local dir=$1 job=$2
        shift 2
        mkdir -p "$dir"
        NF_RPIDS=()
        local r ns h ip
        for r in 0 1; do
                if [ $r = 0 ]; then ns=$NF_NA h=a ip=$NF_IPA; else ns=$NF_NB h=b ip=$NF_IPB; fi
                ip netns exec "$ns" env HVD_JOB_ID="$job" HVD_JOB_SECRET=0123456789abcdef HVD_RANK=$r HVD_SIZE=2 \
                        HVD_LOCAL_RANK=0 HVD_LOCAL_SIZE=1 HVD_CROSS_RANK=$r HVD_CROSS_SIZE=2 HVD_HOSTS=a:1,b:1 \
                        HVD_HOSTNAME=$h HVD_ROOT_PEER="$NF_ROOT_PEER" HVD_RUNTIME_DIR="$NF_BASE/$h" HVD_DATA_ADDR=$ip \
                        HVD_TEST_TMPDIR="$dir" ${NF_GO:+HVD_TEST_GO="$NF_GO"} timeout -k 2 40 "$NF_WORKER" "$@" >"$dir/rank$r" 2>&1 &
                NF_RPIDS+=($!)
                nf_pids+=($!)
        done
}

# nf_local HOST DIR: a 2-rank job on one daemon only, in the background (NF_LPID)
nf_local() {
        local h=$1 dir=$2
        mkdir -p "$dir"
        nf_jobn=$((nf_jobn + 1))
        HVD_TEST_TMPDIR=$dir "$HVD_SRCDIR/tests/lib/launch.sh" -r "$NF_BASE/$h" -j "nf-local-$h-$nf_tag-$nf_jobn" -t 40 \
                -n 2 -- "$NF_WORKER" 40 4096 >"$dir/out" 2>&1 &
        NF_LPID=$!
        nf_pids+=("$NF_LPID")
}

# nf_good NAME: a new spanning job must complete with exact results
nf_good() {
        local name=$1 dir=$NF_BASE/good-$1
        nf_jobn=$((nf_jobn + 1))
        nf_spawn "$dir" "nf-$nf_tag-$nf_jobn" 10 65536
        local st=0
        for p in "${NF_RPIDS[@]}"; do wait "$p" || st=1; done
        { [ $st -eq 0 ] && grep -q "netfault: ok 10 iterations" "$dir/rank0" && grep -q "netfault: ok 10" "$dir/rank1"; } ||
                fail "$name: a spanning job failed" "$(tail -n 12 "$dir"/rank* "$NF_BASE"/a.log "$NF_BASE"/b.log)"
}

# nf_case NAME INJECT HEAL SURVIVORS RANK0_RE RANK1_RE [ELEMENTS]
#   SURVIVORS: the hosts whose daemons stay up during the fault ("a b", "a")
#   RANKn_RE: extended regex the error line of rank n must match (besides
#   the job id, which every line must name)
nf_case() {
        local name=$1 inject=$2 heal=$3 survivors=$4 re0=$5 re1=$6 elems=${7:-65536}
        local dir=$NF_BASE/case-$name job
        nf_jobn=$((nf_jobn + 1))
        job=nf-$nf_tag-$nf_jobn
        nf_spawn "$dir" "$job" 1000000 "$elems" 30
        local spanning=("${NF_RPIDS[@]}")
        for _ in $(seq 300); do
                [ -e "$dir/running.0" ] && [ -e "$dir/running.1" ] && break
                sleep 0.05
        done
        { [ -e "$dir/running.0" ] && [ -e "$dir/running.1" ]; } ||
                fail "$name: the spanning job did not start" "$(tail -n 5 "$dir"/rank* "$NF_BASE"/a.log "$NF_BASE"/b.log)"
        local t0
        t0=$(nf_now)
        $inject
        local h lp=()
        for h in $survivors; do
                nf_local "$h" "$dir/local-$h"
                lp+=("$NF_LPID")
        done
        local st
        for p in "${spanning[@]}"; do wait "$p"; done
        local r line at ms max=0 report=""
        for r in 0 1; do
                line=$(grep -m1 "^rank $r: netfault: " "$dir/rank$r")
                case $line in
                *"netfault: ERROR at "*) ;;
                *) fail "$name: rank $r did not end with an error" "$(cat "$dir/rank$r"; tail -n 5 "$NF_BASE"/a.log "$NF_BASE"/b.log)" ;;
                esac
                local re=$re0
                [ $r = 1 ] && re=$re1
                [[ $line == *"$job"* ]] || fail "$name: rank $r's error does not name job $job" "$line"
                [[ $line =~ $re ]] || fail "$name: rank $r's error does not say what happened (/$re/)" \
                        "$line$(printf '\n'; tail -n 8 "$NF_BASE"/a.log "$NF_BASE"/b.log)"
                at=${line#*ERROR at }
                at=${at%% *}
                ms=$((at - t0))
                [ $ms -gt $max ] && max=$ms
                report+=" rank$r=${ms}ms"
                echo "  rank $r: ${line#*: netfault: }"
        done
        for p in "${lp[@]}"; do
                wait "$p" || fail "$name: the local job failed during the fault" \
                        "$(cat "$dir"/local-*/out; tail -n 5 "$NF_BASE"/a.log "$NF_BASE"/b.log)"
        done
        for h in $survivors; do
                [ "$(grep -c "netfault: ok 40 iterations" "$dir/local-$h/out")" = 2 ] ||
                        fail "$name: the local job on $h did not complete" "$(cat "$dir/local-$h/out")"
        done
        $heal
        nf_good "$name"
        echo "ok: $name: detect$report (limit $NF_LIMIT_MS ms); local job on [${survivors}] completed during the fault; a new spanning job completed after healing"
        [ $max -le "$NF_LIMIT_MS" ] || fail "$name: a rank took $max ms to be told (limit $NF_LIMIT_MS ms)"
}
