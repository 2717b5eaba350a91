#!/bin/sh
# venv-torch.sh [VENV] — prints the interpreter of a Python virtual
# environment with the newest torch from PyPI (and torchvision, numpy,
# pytest), for the second run of the Python suite (scripts/test.sh).
#
# VENV (or HVD_TORCH_VENV): an environment made elsewhere, used as it is
# (/usr/bin/python3 -m venv V && V/bin/pip install torch torchvision numpy
# pytest). Otherwise a cached one under HVD_VENV_CACHE (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/hvd), keyed on what it installs: the
# interpreter's version and the newest torch's version on the index, e.g.
# venv-torch-2.15.0-py3.11. Made once (3 GB of wheels, 5.5 GB installed;
# pip's cache in HVD_VENV_CACHE/pip unless PIP_CACHE_DIR says otherwise),
# then reused; environments of older torch versions are removed once the
# newer one is complete. Without the index (no network) the newest
# complete one in the cache is used.
#
# Exit status 0: the interpreter's path on stdout. 1: none could be made
# or found; why, on stderr.
set -u
base_python=${HVD_TORCH_BASE_PYTHON:-/usr/bin/python3}
others="torchvision numpy pytest"
check='import torch, torchvision, numpy, pytest'

say() { echo "venv-torch: $*" >&2; }

venv=${1:-${HVD_TORCH_VENV:-}}
if [ -n "$venv" ]; then
        if ! "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
                say "$venv/bin/python cannot import torch, torchvision, numpy and pytest"
                exit 1
        fi
        echo "$venv/bin/python"
        exit 0
fi

cache=${HVD_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hvd}
if ! mkdir -p "$cache" 2>/dev/null; then
        say "cannot create the cache directory $cache"
        exit 1
fi
pyver=$("$base_python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || {
        say "$base_python does not run"
        exit 1
}
PIP_CACHE_DIR=${PIP_CACHE_DIR:-$cache/pip}
export PIP_CACHE_DIR

# is_complete VENV: made to the end (its stamp), and it imports what it has
is_complete() {
        [ -f "$1/.hvd-complete" ] && "$1/bin/python" -c "$check" >/dev/null 2>&1
}

# newest_cached: the complete cached environment of the newest torch
newest_cached() {
        for d in "$cache"/venv-torch-*-py"$pyver"; do
                [ -d "$d" ] && is_complete "$d" && echo "$d"
        done | sort -V | tail -n 1
}

# one look-up on the index: the newest torch for this interpreter
torch_version=$("$base_python" -m pip index versions torch 2>/dev/null |
        sed -n 's/^torch (\([^)]*\)).*/\1/p' | head -n 1)
if [ -z "$torch_version" ]; then
        venv=$(newest_cached)
        if [ -z "$venv" ]; then
                say "cannot reach the package index for torch, and no environment is cached in $cache"
                exit 1
        fi
        say "cannot reach the package index; using the cached $venv"
        echo "$venv/bin/python"
        exit 0
fi

venv=$cache/venv-torch-$torch_version-py$pyver
# one maker at a time; the others wait, then find it complete
exec 9>"$venv.lock"
if ! flock 9; then
        say "cannot lock $venv.lock"
        exit 1
fi
if ! is_complete "$venv"; then
        say "creating $venv (torch $torch_version)"
        rm -rf "$venv"
        # shellcheck disable=SC2086 # the other requirements are words
        if ! "$base_python" -m venv "$venv" >&2 ||
           ! "$venv/bin/python" -m pip install -q "torch==$torch_version" $others >&2 ||
           ! "$venv/bin/python" -c "$check" >&2; then
                say "installing torch $torch_version into $venv failed"
                rm -rf "$venv"
                exit 1
        fi
        echo "torch==$torch_version $others" >"$venv/.hvd-complete"
        for d in "$cache"/venv-torch-*-py"$pyver"; do
                if [ "$d" != "$venv" ] && [ -d "$d" ]; then
                        say "removing $d (an older torch)"
                        rm -rf "$d" "$d.lock"
                fi
        done
fi
echo "$venv/bin/python"
