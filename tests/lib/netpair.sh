# netpair.sh — two emulated hosts: network namespaces joined by a veth pair.
# POSIX sh; sourced by the namespace tests and benchmarks (root needed).
# shellcheck shell=sh
#
#   netpair NA NB VA VB IPA IPB
# creates namespaces NA and NB, the veth pair VA (in NA, IPA/24) - VB (in NB,
# IPB/24), and brings both ends and both loopbacks up. Returns 0; 2 when
# this machine cannot make them at all (not root, no namespaces or veth:
# a test skips), 1 on a later failure; what failed is on stdout. Deleting
# the namespaces (ip netns del) removes the pair.
netpair() {
        np_err=$(ip netns add "$1" 2>&1) || { echo "cannot create a network namespace: $np_err"; return 2; }
        ip netns add "$2" || { echo "cannot create a second network namespace"; return 2; }
        ip link add "$3" type veth peer name "$4" || { echo "cannot create a veth pair"; return 2; }
        { ip link set "$3" netns "$1" && ip link set "$4" netns "$2"; } || { echo "cannot move the veth ends"; return 1; }
        { ip -n "$1" addr add "$5/24" dev "$3" && ip -n "$2" addr add "$6/24" dev "$4"; } ||
                { echo "cannot address the veth ends"; return 1; }
        { ip -n "$1" link set lo up && ip -n "$2" link set lo up && ip -n "$1" link set "$3" up &&
                ip -n "$2" link set "$4" up; } || { echo "cannot bring the link up"; return 1; }
}

# netpair_test NA NB VA VB IPA IPB: netpair in a test (after common.sh):
# skips when the machine cannot, fails on anything else.
netpair_test() {
        np_msg=$(netpair "$@")
        case $? in
        0) ;;
        2) skip "$np_msg" ;;
        *) fail "$np_msg" ;;
        esac
}

# netpair_daemons DAEMON DIR NA NB IPA: starts one DAEMON
# (hvd-coordinatord) in each namespace, in the background: runtime
# directories DIR/a and DIR/b, logs DIR/a.log and DIR/b.log; a's listens for
# peers on IPA:7100. Sets NP_PIDS to their two pids; the caller waits for
# their worker sockets (with whatever else it starts).
netpair_daemons() {
        mkdir -p "$2/a" "$2/b"
        ip netns exec "$3" "$1" --runtime-dir "$2/a" --peer-listen "tcp://$5:7100" --log-level warning \
                2>"$2/a.log" &
        NP_PIDS=$!
        ip netns exec "$4" "$1" --runtime-dir "$2/b" --log-level warning 2>"$2/b.log" &
        NP_PIDS="$NP_PIDS $!"
}

# netpair_delay PROXY NS DEV DELAY_US LOG: TCP connections opened in
# namespace NS over DEV go through PROXY (tests/delay_proxy, on port 7999
# there), which delays both directions by DELAY_US; its own connections
# carry the mark 0x6876. Starts the proxy in the background (NP_PID, output
# in LOG) and waits until it listens. Returns 1 with what failed on stdout
# (call it without $(...), which would keep NP_PID in a subshell).
netpair_delay() {
        ip netns exec "$2" nft -f - <<EOF || { echo "nftables redirect failed in $2"; return 1; }
table ip hvddelay {
        chain out {
                type nat hook output priority -100;
                oifname "$3" meta mark != 0x6876 meta l4proto tcp redirect to :7999
        }
}
EOF
        ip netns exec "$2" "$1" 0.0.0.0:7999 orig "$4" >"$5" 2>&1 &
        # shellcheck disable=SC2034 # the caller's
        NP_PID=$!
        for _ in $(seq 100); do grep -q listening "$5" && return 0; sleep 0.05; done
        echo "the delay proxy in $2 did not start: $(cat "$5")"
        return 1
}

# netpair_teardown NA NB DIR [PID...]: ends the PIDs (TERM, then waits for
# them), deletes both namespaces (and the veth pair with them) and removes
# DIR; for a test's or benchmark's exit trap.
netpair_teardown() {
        _nt_na=$1 _nt_nb=$2 _nt_dir=$3
        shift 3
        for _nt_p in "$@"; do kill -TERM "$_nt_p" 2>/dev/null; done
        for _nt_p in "$@"; do wait "$_nt_p" 2>/dev/null; done
        ip netns del "$_nt_na" 2>/dev/null
        ip netns del "$_nt_nb" 2>/dev/null
        rm -rf "$_nt_dir"
}
