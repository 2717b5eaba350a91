#!/bin/bash
# test-man.sh — the manual pages say what the code does: every long option
# of `hvd-coordinatord --help` is in hvd-coordinatord(8), of `hvdctl --help`
# in hvdctl(1); every key of the
# configuration table (common/conf.c) is documented in hvd.conf(5), marked
# live or restart as the table says, listed the same way under SIGHUP in
# hvd-coordinatord(8), and present in the installed example
# systemd/coordinatord.conf (which --check-config accepts, also with every
# example value uncommented); every function of include/hvd.h is in
# libhvd(3); and every page renders without a groff warning.
set -u
. "$HVD_SRCDIR/tests/lib/common.sh"
S=$HVD_SRCDIR
D=$HVD_BUILDDIR/daemon/hvd-coordinatord
PY=/usr/bin/python3
[ -x "$PY" ] || skip "$PY reads the key table"
tmp=$(mktemp -d /tmp/hvd-test-man-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok - $*"; }

"$D" --help >"$tmp/help" || fail "hvd-coordinatord --help failed"
n=0
# shellcheck disable=SC2013 # grep -o prints one option, a single word, a line
for opt in $(grep -o -- '--[a-z][a-z-]*' "$tmp/help" | sort -u); do
        grep -qF -- "${opt//-/\\-}" "$S/man/hvd-coordinatord.8" || fail "hvd-coordinatord.8 lacks $opt"
        n=$((n + 1))
done
[ $n -ge 10 ] || fail "only $n long options found in --help" "$(cat "$tmp/help")"
ok "$n long options of hvd-coordinatord --help are in hvd-coordinatord.8"
"$HVD_BUILDDIR/tools/hvdctl" --help >"$tmp/help" || fail "hvdctl --help failed"
n=0
# shellcheck disable=SC2013 # grep -o prints one option, a single word, a line
for opt in $(grep -o -- '--[a-z][a-z-]*' "$tmp/help" | sort -u); do
        grep -qF -- "${opt//-/\\-}" "$S/man/hvdctl.1" || fail "hvdctl.1 lacks $opt"
        n=$((n + 1))
done
[ $n -ge 5 ] || fail "only $n long options found in hvdctl --help" "$(cat "$tmp/help")"
ok "$n long options of hvdctl --help are in hvdctl.1 (hvdrun's: tests/test-hvdrun.sh)"

"$PY" - "$S" <<'PYEOF' || fail "configuration keys and their documentation differ"
import re, sys
src = sys.argv[1]
conf = open(src + "/common/conf.c").read()
table = conf[conf.index("static const key_def_t keys[]"):]
table = table[:table.index("};")]
keys = re.findall(r'\{ "(\w+)", T_\w+,.*?,\s+(true|false) \},', table, re.S)
assert len(keys) >= 14, keys
bad = []
man = open(src + "/man/hvd.conf.5").read()
# the paragraphs of the KEYS section: ".TP\n.BI key ..." up to the next .TP/.SH
section = man[man.index(".SH KEYS"):man.index(".SH", man.index(".SH KEYS") + 4)]
paras = {}
for p in section.split(".TP\n")[1:]:
    m = re.match(r'\.BI (\w+) " = "', p)
    if m:
        paras[m.group(1)] = p
for key, live in keys:
    want = "live" if live == "true" else "restart"
    p = paras.get(key)
    if p is None:
        bad.append("hvd.conf.5 does not document %s" % key)
        continue
    marks = set(re.findall(r'^\.BR (live|restart)\b', p, re.M))
    if marks != {want}:
        bad.append("hvd.conf.5 marks %s %s, the table says %s" % (key, sorted(marks), want))
for key in paras:
    if key not in dict(keys):
        bad.append("hvd.conf.5 documents %s, which is not a key" % key)
# hvd-coordinatord.8 lists the live keys, then the others, under SIGHUP
page = open(src + "/man/hvd-coordinatord.8").read()
sighup = page[page.index(".B SIGHUP"):page.index(".SH SYSTEMD")]
split = sighup.index("gets a warning")
listed_live = set(re.findall(r'\w+', sighup[:sighup.index("each change is logged")]))
listed_fixed = set(re.findall(r'\w+', sighup[sighup.index("whose value changed"):split]))
live_keys = {k for k, l in keys if l == "true"}
fixed_keys = {k for k, l in keys if l == "false"}
if listed_live & set(dict(keys)) != live_keys:
    bad.append("hvd-coordinatord.8 SIGHUP live keys %s, table %s" % (sorted(listed_live & set(dict(keys))), sorted(live_keys)))
if listed_fixed & set(dict(keys)) != fixed_keys:
    bad.append("hvd-coordinatord.8 SIGHUP restart keys %s, table %s" % (sorted(listed_fixed & set(dict(keys))), sorted(fixed_keys)))
example = open(src + "/systemd/coordinatord.conf").read()
for key, _ in keys:
    if not re.search(r'^#?%s = ' % key, example, re.M):
        bad.append("systemd/coordinatord.conf lacks %s" % key)
for b in bad:
    print(b)
print("%d keys checked" % len(keys))
sys.exit(1 if bad else 0)
PYEOF
ok "every key of common/conf.c is in hvd.conf.5 (live/restart as in the table), hvd-coordinatord.8 and the example"

"$D" --check-config --config "$S/systemd/coordinatord.conf" >/dev/null 2>"$tmp/err" ||
        fail "--check-config refuses the example" "$(cat "$tmp/err")"
sed 's/^#\([a-z_]* = \)/\1/' "$S/systemd/coordinatord.conf" | grep -v '^socket_group = ' >"$tmp/all.conf"
"$D" --check-config --config "$tmp/all.conf" >/dev/null 2>"$tmp/err" ||
        fail "--check-config refuses the example's values" "$(cat "$tmp/err")"
ok "the example configuration and its values pass --check-config"

fns=$(grep -oE '\bhvd_[a-z_]+\(' "$S/include/hvd.h" | tr -d '(' | sort -u)
[ "$(echo "$fns" | wc -l)" -ge 30 ] || fail "too few functions found in hvd.h: $fns"
for f in $fns; do
        grep -q "\b$f\b" "$S/man/libhvd.3" || fail "libhvd.3 lacks $f"
done
errs=$(sed -n 's/.*X(\(HVD_E[A-Z]*\),.*/\1/p' "$S/include/hvd.h")
[ "$(echo "$errs" | wc -w)" -ge 5 ] || fail "too few error codes found in hvd.h: $errs"
for e in $errs; do
        grep -q "^\.B $e$" "$S/man/libhvd.3" || fail "libhvd.3 does not describe $e"
done
ok "libhvd.3 covers the $(echo "$fns" | wc -l) functions and the error codes of hvd.h"

if command -v groff >/dev/null; then
        for p in "$S"/man/*.[0-9]; do
                LC_ALL=C.UTF-8 groff -man -ww -z "$p" 2>"$tmp/groff" || fail "groff failed on $p" "$(cat "$tmp/groff")"
                [ ! -s "$tmp/groff" ] || fail "groff warns about $p" "$(cat "$tmp/groff")"
        done
        ok "every page renders without warnings"
fi
echo "man ok"
