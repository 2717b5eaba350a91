#!/bin/sh
# test-pip-install.sh — `pip install ./python-binding` into a fresh venv of
# /usr/bin/python3, offline (--no-build-isolation --no-index), against a
# libhvd installed with `make install DESTDIR=` and found through its hvd.pc
# (only that one: PKG_CONFIG_LIBDIR). Without hvd.pc the build stops with
# the error that says to run make install or set PKG_CONFIG_PATH. With it,
# the venv's `import hvd` is the installed package, and two ranks started by
# the installed hvdrun allreduce numpy arrays with it. With HVD_TORCH_VENV
# (a venv with PyPI torch), its pip builds the package too (into a
# directory of this test, leaving the venv as it is) and `import hvd.torch`
# works there. Skipped (77), naming what is missing, without pkg-config,
# the Python binding, python3's venv, setuptools and wheel, or numpy.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
B=$HVD_BUILDDIR
PY=/usr/bin/python3
command -v pkg-config >/dev/null || skip "pkg-config is not installed"
[ -x $PY ] || skip "needs $PY"
unset MAKEFLAGS MFLAGS MAKELEVEL
dirs=$(make -s -C "$B" print-install-dirs | grep "^prefix=")
[ -n "$dirs" ] || fail "cannot read the installation directories"
eval "$dirs"
# shellcheck disable=SC2154 # python, prefix, bindir come from eval "$dirs" above
[ "$python" = yes ] || skip "hvd is configured without the Python binding"
tmp=$(mktemp -d /tmp/hvd-test-pip-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# one install at a time from this tree: make check runs the two install
# tests at once, and relinking the same libtool library twice races
flock "$B/.install.lock" make -s -C "$B" install DESTDIR="$tmp/dest" >"$tmp/install.log" 2>&1 || fail "make install failed" "$(cat "$tmp/install.log")"
mkdir "$tmp/pc" "$tmp/nopc"
# shellcheck disable=SC2154 # libdir comes from eval "$dirs" above
sed "s|^prefix=.*|prefix=$tmp/dest$prefix|" "$tmp/dest$libdir/pkgconfig/hvd.pc" >"$tmp/pc/hvd.pc"
# a copy of the sources: pip builds in the tree it is given
cp -r "$HVD_SRCDIR/python-binding" "$tmp/src"
chmod -R u+w "$tmp/src"

# a fresh venv; Debian's venv has pip and setuptools but not wheel, which
# setuptools < 70.1 needs to build one: then the system's (python3-wheel)
$PY -m venv "$tmp/venv" >"$tmp/venv.log" 2>&1 || skip "python3 -m venv failed (apt-get install python3-venv)"
if ! "$tmp/venv/bin/python" -c 'import setuptools, wheel' 2>/dev/null; then
        rm -rf "$tmp/venv"
        $PY -m venv --system-site-packages "$tmp/venv" >"$tmp/venv.log" 2>&1 || fail "python3 -m venv failed"
        "$tmp/venv/bin/python" -c 'import setuptools, wheel' 2>/dev/null ||
                skip "setuptools and wheel are needed offline (apt-get install python3-setuptools python3-wheel)"
fi
V=$tmp/venv/bin

PKG_CONFIG_LIBDIR=$tmp/nopc PKG_CONFIG_PATH='' "$V/pip" install --no-build-isolation --no-index "$tmp/src" \
        >"$tmp/nopc.log" 2>&1 && fail "pip install without hvd.pc succeeded"
grep -q "pkg-config cannot find libhvd (hvd.pc): build and install hvd first (make install), or set PKG_CONFIG_PATH" \
        "$tmp/nopc.log" || fail "pip install without hvd.pc: not the error that says what to do" "$(cat "$tmp/nopc.log")"
echo "ok: without hvd.pc, pip install says: run make install, or set PKG_CONFIG_PATH"

PKG_CONFIG_LIBDIR=$tmp/pc PKG_CONFIG_PATH='' timeout 300 "$V/pip" install --no-build-isolation --no-index "$tmp/src" \
        >"$tmp/pip.log" 2>&1 || fail "pip install ./python-binding: exit status $?" "$(cat "$tmp/pip.log")"
site=$("$V/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for f in hvd/__init__.py hvd/common/ops.py hvd/torch/__init__.py hvd/tensorflow/__init__.py; do
        [ -f "$site/$f" ] || fail "pip did not install $f" "$(cd "$site" && find hvd | sort)"
done
ls "$site"/hvd/_core*.so >/dev/null 2>&1 || fail "pip did not install the extension" "$(cd "$site" && find hvd | sort)"
where=$(cd "$tmp" && "$V/python" -c 'import hvd; print(hvd.__file__, hvd.__version__)') ||
        fail "import hvd in the venv failed"
case $where in "$site/hvd/__init__.py "?*) ;; *) fail "import hvd found another hvd: $where" ;; esac
echo "ok: pip install ./python-binding into a fresh venv: $where"

"$V/python" -c 'import numpy' 2>/dev/null || skip "numpy is needed for the 2-rank run (apt-get install python3-numpy)"
cat >"$tmp/allreduce.py" <<'EOF'
import numpy as np
import hvd

hvd.init()
total = hvd.allreduce(np.full(4, hvd.rank() + 1, dtype=np.float32), op=hvd.Sum)
expect = hvd.size() * (hvd.size() + 1) / 2
assert (total == expect).all(), total
print(f"rank {hvd.rank()} of {hvd.size()}: allreduce ok {total.tolist()} from {hvd.__file__}")
hvd.shutdown()
EOF
# shellcheck disable=SC2154 # bindir comes from eval "$dirs" above
(cd "$tmp" && HVD_RUNTIME_DIR=$tmp/no-daemon TMPDIR=$tmp timeout 120 "$tmp/dest$bindir/hvdrun" -np 2 \
        "$V/python" allreduce.py) >"$tmp/run.out" 2>&1 || fail "2-rank run with the pip package: exit status $?" \
        "$(cat "$tmp/run.out")"
[ "$(grep -c "of 2: allreduce ok \[3.0, 3.0, 3.0, 3.0\] from $site/hvd/" "$tmp/run.out")" -eq 2 ] ||
        fail "2-rank run: not both ranks summed with the pip package" "$(cat "$tmp/run.out")"
echo "ok: 2 ranks (installed hvdrun) allreduce with the pip-installed hvd"

if [ -n "${HVD_TORCH_VENV:-}" ] && [ -x "$HVD_TORCH_VENV/bin/python" ]; then
        T=$HVD_TORCH_VENV/bin
        "$T/python" -c 'import torch, setuptools, wheel' 2>/dev/null ||
                skip "HVD_TORCH_VENV=$HVD_TORCH_VENV lacks torch, setuptools or wheel"
        PKG_CONFIG_LIBDIR=$tmp/pc PKG_CONFIG_PATH='' timeout 300 "$T/pip" install --no-build-isolation --no-index \
                --no-deps --target "$tmp/tpkg" "$tmp/src" >"$tmp/tpip.log" 2>&1 ||
                fail "the torch venv's pip install ./python-binding: exit status $?" "$(cat "$tmp/tpip.log")"
        out=$(cd "$tmp" && PYTHONPATH=$tmp/tpkg "$T/python" -c \
                'import hvd.torch as hvd, torch; hvd.init(); print(hvd.size(), hvd.allreduce(torch.ones(2)).tolist(), hvd.__file__)') ||
                fail "import hvd.torch from the torch venv's pip build failed"
        case $out in "1 [1.0, 1.0] $tmp/tpkg/hvd/torch/"*) ;; *) fail "hvd.torch from pip: $out" ;; esac
        echo "ok: the torch venv's pip builds hvd; import hvd.torch and a job of one: $out"
else
        echo "# HVD_TORCH_VENV not set: hvd.torch from pip not tried"
fi
