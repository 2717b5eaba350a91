#!/bin/bash
# test-install.sh — `make install DESTDIR=…` from this build tree, then the
# installed tree is used as a user and systemd would: every file is where
# it belongs; the unit passes `systemd-analyze verify` (ExecStart pointed
# into the tree, the man pages found there) and its exposure score stays
# at most 2.0; the sysusers/tmpfiles snippets create user, group and
# /run/hvd in a scratch root; the installed configuration passes
# --check-config; a C program built with `pkg-config --cflags --libs hvd`
# runs 2 ranks through the installed hvdrun against the installed daemon
# and library; the installed Python package imports (hvd.torch) from its
# directory, which Debian's python3 searches, and runs a 2-rank job; and `make uninstall` removes it all.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
B=$HVD_BUILDDIR
PY=/usr/bin/python3
tmp=$(mktemp -d /tmp/hvd-test-install-XXXXXX)
pids=()
cleanup() {
        for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
        wait 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT
ok() { echo "ok - $*"; }
command -v pkg-config >/dev/null || skip "pkg-config is needed"
unset MAKEFLAGS MFLAGS MAKELEVEL
dirs=$(make -s -C "$B" print-install-dirs | grep "^prefix=")
[ -n "$dirs" ] || fail "cannot read the installation directories"
eval "$dirs"
dest=$tmp/dest
# one install at a time from this tree: make check runs the two install
# tests at once, and relinking the same libtool library twice races
flock "$B/.install.lock" make -s -C "$B" install DESTDIR="$dest" >"$tmp/install.log" 2>&1 || fail "make install failed" "$(cat "$tmp/install.log")"

# shellcheck disable=SC2154 # the directories come from eval "$dirs" above
for f in "$bindir/hvdrun" "$bindir/hvdctl" "$sbindir/hvd-coordinatord" "$libdir/libhvd.so.0" \
        "$includedir/hvd.h" "$libdir/pkgconfig/hvd.pc" "$systemdsystemunitdir/hvd-coordinatord.service" \
        "$sysusersdir/hvd.conf" "$tmpfilesdir/hvd.conf" "$sysconfdir/hvd/coordinatord.conf" \
        "$sysconfdir/hvd/coordinatord.conf.example" "$mandir/man1/hvdrun.1" "$mandir/man1/hvdctl.1" \
        "$mandir/man3/libhvd.3" "$mandir/man5/hvd.conf.5" "$mandir/man8/hvd-coordinatord.8"; do
        [ -e "$dest$f" ] || fail "not installed: $f" "$(cd "$dest" && find . -type f | sort)"
done
# shellcheck disable=SC2154 # python and pyexecdir come from eval "$dirs" above
if [ "$python" = yes ]; then
        for f in __init__.py torch/__init__.py common/ops.py; do
                [ -e "$dest$pyexecdir/hvd/$f" ] || fail "not installed: $pyexecdir/hvd/$f"
        done
        ls "$dest$pyexecdir"/hvd/_core*.so >/dev/null 2>&1 || fail "the extension is not installed in $pyexecdir/hvd"
fi
unit=$dest$systemdsystemunitdir/hvd-coordinatord.service
grep -qx "ExecStart=$sbindir/hvd-coordinatord --foreground --config $sysconfdir/hvd/coordinatord.conf --runtime-dir /run/hvd" "$unit" ||
        fail "ExecStart does not name the installed daemon and configuration" "$(grep ExecStart "$unit")"
# shellcheck disable=SC2016 # the unit file's own $MAINPID, kept literally
for l in Type=notify 'ExecReload=/bin/kill -HUP $MAINPID' Restart=on-failure User=hvd Group=hvd RuntimeDirectory=hvd \
        NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes PrivateDevices=yes \
        'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6' SystemCallFilter=@system-service CapabilityBoundingSet= \
        MemoryDenyWriteExecute=yes LockPersonality=yes RestrictNamespaces=yes; do
        grep -qxF -- "$l" "$unit" || fail "the unit lacks $l"
done
ok "make install DESTDIR: binaries, library, header, hvd.pc, unit, sysusers/tmpfiles, configuration, 5 man pages${python:+, Python package}"

# ---- systemd: the unit, its hardening, the snippets ----
if command -v systemd-analyze >/dev/null; then
        mkdir "$tmp/unit"
        # verify checks that ExecStart exists and that man: pages are found
        sed "s|^ExecStart=$sbindir/|ExecStart=$dest$sbindir/|" "$unit" >"$tmp/unit/hvd-coordinatord.service"
        MANPATH=$dest$mandir systemd-analyze verify "$tmp/unit/hvd-coordinatord.service" >"$tmp/verify" 2>&1
        rc=$?
        # verify exits 0 on unknown directives: any output is a failure
        { [ $rc -eq 0 ] && [ ! -s "$tmp/verify" ]; } || fail "systemd-analyze verify: exit $rc" "$(cat "$tmp/verify")"
        # a misspelled directive must be caught, or this check checks nothing
        sed 's/^ProtectHome=/ProtectHomme=/' "$tmp/unit/hvd-coordinatord.service" >"$tmp/unit/bad.service"
        MANPATH=$dest$mandir systemd-analyze verify "$tmp/unit/bad.service" >"$tmp/verify" 2>&1
        grep -q "ProtectHomme" "$tmp/verify" || fail "systemd-analyze verify did not notice a misspelled directive"
        systemd-analyze security --offline=true --threshold=20 "$tmp/unit/hvd-coordinatord.service" >"$tmp/sec" 2>&1 ||
                fail "exposure above 2.0" "$(tail -3 "$tmp/sec")"
        score=$(sed -n 's/.*Overall exposure level for hvd-coordinatord.service: \([0-9.]*\).*/\1/p' "$tmp/sec")
        [ -n "$score" ] || fail "no exposure score" "$(tail -3 "$tmp/sec")"
        ok "systemd-analyze verify is silent on the unit; exposure $score (threshold 2.0)"
else
        echo "# systemd-analyze not found: unit checks skipped"
fi
if command -v systemd-sysusers >/dev/null && command -v systemd-tmpfiles >/dev/null && [ "$(id -u)" = 0 ]; then
        mkdir -p "$tmp/root/etc"
        systemd-sysusers --root="$tmp/root" "$dest$sysusersdir/hvd.conf" >"$tmp/sysusers" 2>&1 ||
                fail "systemd-sysusers refused the snippet" "$(cat "$tmp/sysusers")"
        grep -q "^hvd:x:[0-9]*:[0-9]*:hvd coordinator:" "$tmp/root/etc/passwd" || fail "no user hvd" "$(cat "$tmp/root/etc/passwd")"
        gid=$(sed -n 's/^hvd:x:\([0-9]*\):.*/\1/p' "$tmp/root/etc/group")
        [ -n "$gid" ] || fail "no group hvd"
        systemd-tmpfiles --root="$tmp/root" --create "$dest$tmpfilesdir/hvd.conf" >"$tmp/tmpfiles" 2>&1 ||
                fail "systemd-tmpfiles refused the snippet" "$(cat "$tmp/tmpfiles")"
        [ "$(stat -c '%a %g' "$tmp/root/run/hvd")" = "750 $gid" ] || fail "/run/hvd: $(stat -c '%a %g' "$tmp/root/run/hvd")"
        ok "sysusers.d makes user and group hvd; tmpfiles.d makes /run/hvd 0750 group hvd"
fi

# ---- the installed daemon, configuration and library ----
export LD_LIBRARY_PATH=$dest$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
"$dest$sbindir/hvd-coordinatord" --check-config --config "$dest$sysconfdir/hvd/coordinatord.conf" >"$tmp/check" 2>&1 ||
        fail "the installed configuration fails --check-config" "$(cat "$tmp/check")"
cat >"$tmp/prog.c" <<'CEOF'
#include <stdio.h>
#include <hvd.h>
int main(void) {
        if (hvd_init() < 0) {
                fprintf(stderr, "hvd_init: %s\n", hvd_last_error());
                return 1;
        }
        float x[4];
        for (int i = 0; i < 4; i++)
                x[i] = (float) (hvd_rank() + 1);
        int r = hvd_allreduce("x", x, x, 4, HVD_FLOAT32, HVD_REDUCE_SUM);
        int n = hvd_size();
        float want = (float) (n * (n + 1) / 2);
        if (r < 0 || x[0] != want || x[3] != want) {
                fprintf(stderr, "allreduce: %d %s (%g, want %g)\n", r, hvd_last_error(), x[0], want);
                return 1;
        }
        printf("rank %d of %d: sum %g ok (libhvd %s)\n", hvd_rank(), n, x[0], hvd_version());
        return hvd_shutdown() < 0;
}
CEOF
export PKG_CONFIG_PATH=$dest$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$dest
flags=$(pkg-config --cflags --libs hvd) || fail "pkg-config hvd failed"
case $flags in *"-I$dest$includedir"*"-L$dest$libdir"*|*"-L$dest$libdir"*"-I$dest$includedir"*) ;;
*) fail "pkg-config does not point into the installed tree: $flags" ;; esac
# a sanitizer build's library needs its runtime linked first
# shellcheck disable=SC2086 # CC, the sanitizer flags and pkg-config's are lists of words
${CC:-cc} ${HVD_SANITIZER_FLAGS:-} -o "$tmp/prog" "$tmp/prog.c" $flags 2>"$tmp/cc" || fail "cannot build against the installed tree" "$(cat "$tmp/cc")"
ldd "$tmp/prog" | grep -q "libhvd.so.0 => $dest$libdir/libhvd.so.0" || fail "prog does not load the installed libhvd" "$(ldd "$tmp/prog")"
mkdir "$tmp/rt"
"$dest$sbindir/hvd-coordinatord" --config "$dest$sysconfdir/hvd/coordinatord.conf" --runtime-dir "$tmp/rt" \
        --log-level info 2>"$tmp/daemon.log" &
daemon=$!
pids+=("$daemon")
for _ in $(seq 200); do [ -S "$tmp/rt/worker.sock" ] && break; sleep 0.05; done
[ -S "$tmp/rt/worker.sock" ] || fail "the installed daemon did not start" "$(cat "$tmp/daemon.log")"
timeout 60 "$dest$bindir/hvdrun" --no-embedded --runtime-dir "$tmp/rt" -np 2 "$tmp/prog" >"$tmp/prog.out" 2>&1 ||
        fail "the job failed" "$(cat "$tmp/prog.out" "$tmp/daemon.log")"
for r in 0 1; do
        grep -q "rank $r of 2: sum 3 ok" "$tmp/prog.out" || fail "rank $r did not finish" "$(cat "$tmp/prog.out")"
done
grep -q "job .* created: 2 ranks" "$tmp/daemon.log" || fail "the job did not go through the installed daemon" "$(cat "$tmp/daemon.log")"
"$dest$bindir/hvdctl" --runtime-dir "$tmp/rt" status >/dev/null 2>&1 || fail "the installed hvdctl cannot reach the daemon"
ok "a C program built with pkg-config runs 2 ranks with the installed hvdrun, daemon and library"

# ---- the installed Python package ----
if [ "$python" = yes ] && [ -x "$PY" ]; then
        # a sanitizer build: the interpreter needs the runtime preloaded (as in
        # tests/python/run-pytest.sh)
        asan=()
        [ -n "${HVD_ASAN_RUNTIME:-}" ] && asan=(env "LD_PRELOAD=$HVD_ASAN_RUNTIME" ASAN_OPTIONS=detect_leaks=0)
        PYTHONPATH=$dest$pyexecdir "${asan[@]}" "$PY" -c 'import hvd, hvd.torch; print(hvd.__file__); print(hvd.torch.__file__)' \
                >"$tmp/py" 2>&1 || fail "import hvd.torch from the installed package failed" "$(cat "$tmp/py")"
        grep -q "^$dest$pyexecdir/hvd/torch/__init__.py$" "$tmp/py" || fail "hvd.torch came from elsewhere" "$(cat "$tmp/py")"
        # shellcheck disable=SC2154 # prefix comes from eval "$dirs" above
        case $prefix in /usr|/usr/local)
                # where the interpreter itself looks, without PYTHONPATH
                "$PY" -c 'import sys; sys.exit(0 if sys.argv[1] in sys.path else 1)' "$pyexecdir" ||
                        fail "$pyexecdir is not on $PY's path: $("$PY" -c 'import sys; print(sys.path)')" ;;
        esac
        # a job through the numpy API (hvd.torch's import of torch alone takes seconds)
        PYTHONPATH=$dest$pyexecdir timeout 120 "$dest$bindir/hvdrun" --no-embedded --runtime-dir "$tmp/rt" -np 2 \
                "${asan[@]}" "$PY" -c '
import numpy as np, hvd
hvd.init()
t = hvd.allreduce(np.full(3, float(hvd.rank() + 1), dtype=np.float32), op=hvd.Sum)
assert t.tolist() == [3.0] * 3, t
print("python rank %d ok" % hvd.rank())
hvd.shutdown()' >"$tmp/pyjob.out" 2>&1 || fail "the Python job failed" "$(cat "$tmp/pyjob.out")"
        [ "$(grep -c "python rank [01] ok" "$tmp/pyjob.out")" = 2 ] || fail "the Python job" "$(cat "$tmp/pyjob.out")"
        ok "the installed package: hvd.torch imports from $pyexecdir; a 2-rank job runs"
fi
kill -TERM $daemon
wait $daemon || fail "the installed daemon did not stop cleanly" "$(cat "$tmp/daemon.log")"

make -s -C "$B" uninstall DESTDIR="$dest" >"$tmp/uninstall.log" 2>&1 || fail "make uninstall failed" "$(cat "$tmp/uninstall.log")"
left=$(cd "$dest" && find . -type f -o -type l)
[ -z "$left" ] || fail "make uninstall left files behind" "$left"
ok "make uninstall removes every file"
echo "install ok"
