#!/bin/bash
# test-venv-tf.sh — scripts/venv-tf.sh without downloading anything: --path
# names a directory under the cache keyed on the interpreter and packages
# (the same on every call, another for another cache); HVD_TF_VENV is
# accepted when its Python imports TensorFlow and refused, with the reason,
# when it does not; a made environment in the cache (its .complete written
# last) is reused. Uses the TensorFlow Python of the build when there is one.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
venv=$HVD_SRCDIR/scripts/venv-tf.sh
# the cache's own behaviour is under test: a user's HVD_TF_VENV would bypass it
unset HVD_TF_VENV
tmp=$(mktemp -d /tmp/hvd-venv-tf-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

a=$(HVD_VENV_CACHE=$tmp/c1 "$venv" --path) || fail "--path failed"
b=$(HVD_VENV_CACHE=$tmp/c1 "$venv" --path)
c=$(HVD_VENV_CACHE=$tmp/c2 "$venv" --path)
[[ $a =~ ^$tmp/c1/tf-[0-9a-f]{12}$ ]] || fail "--path gave '$a', not $tmp/c1/tf-<key>"
[ "$a" = "$b" ] || fail "--path changed between calls: '$a', '$b'"
[ "${c##*/}" = "${a##*/}" ] || fail "the key depends on the cache directory: '$a', '$c'"
[ ! -e "$tmp/c1" ] || fail "--path made something in the cache"

out=$(HVD_TF_VENV=$tmp/none "$venv" 2>&1) && fail "a HVD_TF_VENV without Python was accepted: $out"
[[ $out == *"$tmp/none/bin/python cannot import tensorflow"* ]] || fail "unclear refusal: $out"
[ "$(HVD_TF_VENV=$tmp/none "$venv" --path)" = "$tmp/none" ] || fail "--path ignores HVD_TF_VENV"

if [ -n "${HVD_TF_PYTHON:-}" ] && "$HVD_TF_PYTHON" -c 'import tensorflow, numpy, pytest' 2>/dev/null; then
        dir=${HVD_TF_PYTHON%/bin/python*}
        [ "$(HVD_TF_VENV=$dir "$venv")" = "$dir" ] || fail "HVD_TF_VENV=$dir was not accepted"
        # that Python as a made environment of the cache: reused, nothing made
        key=$(HVD_VENV_CACHE=$tmp/c3 "$venv" --path)
        mkdir -p "$key/bin" && ln -s "$HVD_TF_PYTHON" "$key/bin/python" && ln -s "$dir/lib" "$key/lib" &&
                cp "$dir/pyvenv.cfg" "$key/" && touch "$key/.complete"
        # never let venv-tf.sh download: the copy must import on its own
        "$key/bin/python" -c 'import tensorflow, numpy, pytest' 2>/dev/null ||
                fail "the test's copy of $dir does not import tensorflow"
        out=$(HVD_VENV_CACHE=$tmp/c3 "$venv" 2>&1)
        [ "$out" = "$key" ] || fail "a made environment was not reused: $out"
fi
echo "PASS: venv-tf.sh paths, HVD_TF_VENV, reuse of a made environment"
