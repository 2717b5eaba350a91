#!/bin/sh
# venv-tf.sh — the Python environment with TensorFlow that hvd.tensorflow is
# built and tested against (Debian packages no TensorFlow): a venv of
# /usr/bin/python3 with the packages below, made once and then reused.
#   scripts/venv-tf.sh          print the environment's directory, making it
#                               if needed (about 1.6 GB and 30 s from PyPI)
#   scripts/venv-tf.sh --path   print the directory it would use; make nothing
# HVD_TF_VENV=DIR uses an existing environment instead (it must import
# tensorflow, numpy and pytest). Otherwise the environment is kept under
# ${HVD_VENV_CACHE:-${XDG_CACHE_HOME:-~/.cache}/hvd}, in a directory named
# after a hash of the interpreter's version and the packages, so a change of
# either makes a new one. Exit status 1 when it cannot be made (no network,
# no venv module): the reason goes to stderr.
set -eu
packages="tensorflow-cpu pytest scikit-learn"
base=/usr/bin/python3
imports="import tensorflow, numpy, pytest"

mode="make"
case "${1:-}" in
--path) mode=path ;;
"") ;;
*) echo "usage: $0 [--path]" >&2; exit 2 ;;
esac

if [ -n "${HVD_TF_VENV:-}" ]; then
        if [ $mode = make ] && ! "$HVD_TF_VENV/bin/python" -c "$imports" >/dev/null 2>&1; then
                echo "venv-tf.sh: HVD_TF_VENV=$HVD_TF_VENV: $HVD_TF_VENV/bin/python cannot $imports" >&2
                exit 1
        fi
        echo "$HVD_TF_VENV"
        exit 0
fi

cache=${HVD_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hvd}
key=$( { "$base" --version 2>&1; echo "$packages"; } | sha256sum | cut -c1-12)
dir=$cache/tf-$key
if [ $mode = path ]; then
        echo "$dir"
        exit 0
fi
# .complete is written last: a half-made environment is made again
ready() {
        [ -f "$dir/.complete" ] && "$dir/bin/python" -c "$imports" >/dev/null 2>&1
}
if ready; then
        echo "$dir"
        exit 0
fi

# one maker at a time; the others wait for it and reuse its environment
mkdir -p "$cache"
exec 9>"$cache/tf-$key.lock"
flock 9
if ! ready; then
        rm -rf "$dir"
        echo "venv-tf.sh: making $dir ($packages)" >&2
        log=$cache/tf-$key.log
        # shellcheck disable=SC2086 # the package list is meant to split
        if ! { "$base" -m venv "$dir" && "$dir/bin/python" -m pip install -q --disable-pip-version-check \
                $packages; } >"$log" 2>&1; then
                echo "venv-tf.sh: cannot make the environment ($log):" >&2
                tail -n 5 "$log" >&2
                rm -rf "$dir"
                exit 1
        fi
        touch "$dir/.complete"
fi
echo "$dir"
