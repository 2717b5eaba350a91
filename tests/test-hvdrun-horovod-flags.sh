#!/bin/sh
# test-hvdrun-horovod-flags.sh — horovodrun's flags in hvdrun, checked by
# their effect on real runs against a private daemon: --fusion-threshold-mb,
# --cycle-time-ms, --start-timeout and --timeline-filename reach every rank
# (the timeline file is written and is JSON with events), -p/--ssh-port and
# -i/--ssh-identity-file reach the ssh command (a stand-in that records its
# arguments), --gloo, --disable-cache and --cache-capacity are accepted and
# change nothing, the --autotune flags set their variables (bad values
# refused), and the flags hvdrun does not take (--mpi, --nics, --min-np
# ...) are refused with exit status 2, naming the flag and why. Also --launcher: mpirun is refused, srun outside an allocation too.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
[ -x /usr/bin/python3 ] || skip "needs /usr/bin/python3"
HVDRUN=$HVD_BUILDDIR/tools/hvdrun
tmp=$(mktemp -d /tmp/hvd-test-horovod-flags-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# no Slurm allocation around this test, whatever runs it
unset SLURM_JOB_ID SLURM_JOB_NODELIST SLURM_NODELIST SLURM_TASKS_PER_NODE SLURM_JOB_CPUS_PER_NODE SLURM_CPUS_PER_TASK \
        SLURM_STEP_ID
export HVD_RUNTIME_DIR="$tmp/no-daemon"

# every rank notes what it was given, then trains
cat >"$tmp/rank.sh" <<EOF
#!/bin/sh
echo "\$HVD_RANK \$HVD_FUSION_THRESHOLD \$HVD_CYCLE_TIME \$HVD_START_TIMEOUT \${HVD_TIMELINE:-none}" >>"$tmp/env"
exec "$HVD_BUILDDIR/examples/train_mlp" --synthetic -q -e 1
EOF
chmod +x "$tmp/rank.sh"
timeout 60 "$HVDRUN" -np 2 --fusion-threshold-mb 8 --cycle-time-ms 2.5 --start-timeout 20 \
        --timeline-filename "$tmp/timeline.json" --gloo --disable-cache --cache-capacity 0 "$tmp/rank.sh" \
        >"$tmp/out" 2>&1 || fail "hvdrun with horovodrun's flags: exit status $?" "$(cat "$tmp/out")"
grep -q "final weights identical on all 2 ranks" "$tmp/out" || fail "not one job of 2" "$(cat "$tmp/out")"
[ "$(sort "$tmp/env")" = "$(printf '0 8388608 2.5 20 %s\n1 8388608 2.5 20 %s' "$tmp/timeline.json" "$tmp/timeline.json")" ] ||
        fail "the ranks did not get the flags' settings" "$(cat "$tmp/env")"
/usr/bin/python3 -c 'import json, sys; ev = json.load(open(sys.argv[1])); sys.exit(0 if len(ev) > 10 else 1)' \
        "$tmp/timeline.json" || fail "--timeline-filename: no timeline written" "$(head -c 600 "$tmp/timeline.json")"
echo "ok: --fusion-threshold-mb --cycle-time-ms --start-timeout --timeline-filename reach the ranks; no-ops accepted"

# -p and -i go to ssh, before its fixed options
cat >"$tmp/fake-ssh" <<EOF
#!/bin/sh
echo "\$*" >"$tmp/ssh-args"
EOF
chmod +x "$tmp/fake-ssh"
timeout 30 "$HVDRUN" -np 1 -H farhost:1 --ssh "$tmp/fake-ssh" -p 2222 --ssh-identity-file "$tmp/key" true \
        >"$tmp/out" 2>&1 || fail "hvdrun -p 2222 -i KEY: exit status $?" "$(cat "$tmp/out")"
case $(cat "$tmp/ssh-args") in
"-p 2222 -i $tmp/key -o BatchMode=yes -o StrictHostKeyChecking=accept-new farhost "*) ;;
*) fail "-p/-i did not reach ssh" "$(cat "$tmp/ssh-args")" ;;
esac
"$HVDRUN" -np 1 -p 70000 true >"$tmp/out" 2>&1
{ [ $? -eq 2 ] && grep -q "ssh-port '70000'" "$tmp/out"; } || fail "-p 70000 accepted" "$(cat "$tmp/out")"
echo "ok: -p and -i reach the ssh command"

# refused flags: exit 2, the flag named, and why
for flag in --mpi --nics=eth0 --network-interface --num-nccl-streams --min-np --hierarchical-allreduce --config-file; do
        "$HVDRUN" -np 2 "$flag" true >"$tmp/out" 2>&1
        rc=$?
        name=${flag%%=*}
        { [ $rc -eq 2 ] && grep -q "horovodrun's option '$name' is not supported: ." "$tmp/out"; } ||
                fail "$flag: exit status $rc, expected 2 and a reason" "$(cat "$tmp/out")"
done
"$HVDRUN" -np 2 --no-such-flag true >"$tmp/out" 2>&1
{ [ $? -eq 2 ] && grep -q "unknown option '--no-such-flag'" "$tmp/out"; } || fail "--no-such-flag" "$(cat "$tmp/out")"
echo "ok: horovodrun's unsupported flags are refused with a reason"

# the autotune flags: each sets its variable in every rank (a private daemon
# without --embedded: none answers at HVD_RUNTIME_DIR), bad counts refused
HVD_RUNTIME_DIR="$tmp/rt" timeout 60 "$HVDRUN" -np 1 --embedded --autotune --autotune-log-file at.csv \
        --autotune-warmup-samples 2 --autotune-steps-per-sample 7 --autotune-bayes-opt-max-samples 9 \
        --autotune-gaussian-process-noise 0.5 sh -c 'env | grep ^HVD_AUTOTUNE | sort' >"$tmp/out" 2>&1 ||
        fail "--autotune flags: exit status $?" "$(cat "$tmp/out")"
want="[0] HVD_AUTOTUNE=1
[0] HVD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES=9
[0] HVD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=0.5
[0] HVD_AUTOTUNE_LOG=at.csv
[0] HVD_AUTOTUNE_STEPS_PER_SAMPLE=7
[0] HVD_AUTOTUNE_WARMUP_SAMPLES=2"
[ "$(cat "$tmp/out")" = "$want" ] || fail "--autotune flags: not every variable reached the rank" "$(cat "$tmp/out")"
for bad in "--autotune-warmup-samples 0" "--autotune-steps-per-sample x" "--autotune-bayes-opt-max-samples 1.5" \
        "--autotune-gaussian-process-noise -1"; do
        # shellcheck disable=SC2086 # the flag and its value, two words
        "$HVDRUN" -np 1 $bad true >"$tmp/out" 2>&1
        { [ $? -eq 2 ] && grep -q "^hvdrun: ${bad%% *} '${bad#* }': expected" "$tmp/out"; } ||
                fail "$bad: not refused with its value" "$(cat "$tmp/out")"
done
echo "ok: --autotune and its settings reach every rank as HVD_AUTOTUNE*; bad values are refused"

"$HVDRUN" -np 2 --launcher mpirun true >"$tmp/out" 2>&1
{ [ $? -eq 2 ] && grep -q "run 'mpirun -np N PROGRAM' itself" "$tmp/out"; } || fail "--launcher mpirun" "$(cat "$tmp/out")"
"$HVDRUN" -np 2 --launcher srun true >"$tmp/out" 2>&1
{ [ $? -eq 2 ] && grep -q "not inside a Slurm allocation" "$tmp/out"; } || fail "--launcher srun" "$(cat "$tmp/out")"
"$HVDRUN" -np 2 --launcher rsh true >"$tmp/out" 2>&1
{ [ $? -eq 2 ] && grep -q "expected ssh or srun" "$tmp/out"; } || fail "--launcher rsh" "$(cat "$tmp/out")"
# an allocation (its variables only): its hosts, and srun in every rank's command
SLURM_JOB_ID=7 SLURM_JOB_NODELIST='n[01-02]' SLURM_TASKS_PER_NODE='2(x2)' "$HVDRUN" -np 3 --dry-run true \
        >"$tmp/out" 2>&1 || fail "--dry-run in an allocation: exit status $?" "$(cat "$tmp/out")"
{ [ "$(cut -d: -f1 "$tmp/out" | tr '\n' ,)" = "rank 0 on n01,rank 1 on n01,rank 2 on n02," ] &&
        grep -q "srun --nodes=1 --ntasks=1 --nodelist=n02 --exact --input=none true$" "$tmp/out"; } ||
        fail "--dry-run in an allocation: not its hosts, or not srun" "$(cat "$tmp/out")"
SLURM_JOB_ID=7 SLURM_JOB_NODELIST='n[01-02]' SLURM_TASKS_PER_NODE='2(x2)' "$HVDRUN" -np 5 true >"$tmp/out" 2>&1
{ [ $? -eq 2 ] && grep -q "more than the 4 slots listed by the Slurm allocation" "$tmp/out"; } ||
        fail "-np 5 in an allocation of 4" "$(cat "$tmp/out")"
SLURM_JOB_ID=7 SLURM_JOB_NODELIST='n[01-02]' SLURM_TASKS_PER_NODE='2(x2)' "$HVDRUN" -np 2 --launcher ssh --dry-run true \
        >"$tmp/out" 2>&1 || fail "--launcher ssh in an allocation: exit status $?" "$(cat "$tmp/out")"
grep -q srun "$tmp/out" && fail "--launcher ssh in an allocation still uses srun" "$(cat "$tmp/out")"
echo "ok: --launcher mpirun and srun outside an allocation refused; an allocation's hosts go to srun"
