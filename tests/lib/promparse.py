#!/usr/bin/python3
"""promparse.py — a strict parser of the Prometheus text exposition format
(version 0.0.4), for the tests: every line must be a HELP, a TYPE or a
sample that matches the grammar; every sample must belong to a family with
a TYPE declared before it; names and label sets are unique; counters are
not negative; a histogram's buckets carry `le`, rise in `le`, are
cumulative, end with +Inf, and the +Inf bucket equals _count.

    promparse.py [--prefix hvd_] FILE|-     prints {"name{labels}": value} as JSON
                                            or exits 1 naming the first problem
"""
import json
import math
import re
import sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
VALUE = r"(?:[+-]?(?:Inf|inf|NaN|nan)|[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
LABEL_VALUE = r'"(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(r"^(%s)(\{(?:%s=%s(?:,%s=%s)*,?)?\})? (%s)(?: (-?\d+))?$" %
                    (NAME, LABEL, LABEL_VALUE, LABEL, LABEL_VALUE, VALUE))
PAIR = re.compile(r'(%s)=(%s)' % (LABEL, LABEL_VALUE))
HELP = re.compile(r"^# HELP (%s)(?: (.*))?$" % NAME)
TYPE = re.compile(r"^# TYPE (%s) (counter|gauge|histogram|summary|untyped)$" % NAME)
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


class ParseError(Exception):
    pass


def unescape(v):
    return v[1:-1].replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


def family_of(name, types):
    """The declared family a sample name belongs to."""
    if name in types:
        return name
    for sfx in ("_bucket", "_sum", "_count"):
        if name.endswith(sfx) and types.get(name[: -len(sfx)]) in ("histogram", "summary"):
            return name[: -len(sfx)]
    return None


def parse(text, prefix=""):
    if not text.endswith("\n"):
        raise ParseError("the text does not end with a newline")
    types, helps, samples, order = {}, {}, {}, []
    seen_samples = set()
    closed = set()  # families whose samples have ended
    current = None
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = "line %d: %r" % (n, line)
        if line.startswith("#"):
            m = HELP.match(line)
            if m:
                if m.group(1) in helps:
                    raise ParseError("%s: second HELP" % where)
                helps[m.group(1)] = m.group(2) or ""
                continue
            m = TYPE.match(line)
            if m:
                name = m.group(1)
                if name in types:
                    raise ParseError("%s: second TYPE" % where)
                if name in seen_samples:
                    raise ParseError("%s: TYPE after its samples" % where)
                types[name] = m.group(2)
                continue
            raise ParseError("%s: a comment that is neither HELP nor TYPE" % where)
        if not line.strip():
            raise ParseError("%s: empty line" % where)
        m = SAMPLE.match(line)
        if not m:
            raise ParseError("%s: not a sample line" % where)
        name, labels_text, value_text = m.group(1), m.group(2) or "", m.group(3)
        if prefix and not name.startswith(prefix):
            raise ParseError("%s: name without the prefix %s" % (where, prefix))
        fam = family_of(name, types)
        if fam is None:
            raise ParseError("%s: no TYPE declared for %s" % (where, name))
        if fam != current:
            if fam in closed:
                raise ParseError("%s: samples of %s are not together" % (where, fam))
            if current:
                closed.add(current)
            current = fam
        seen_samples.add(fam)
        labels = {}
        for lm in PAIR.finditer(labels_text):
            if lm.group(1) in labels:
                raise ParseError("%s: label %s twice" % (where, lm.group(1)))
            labels[lm.group(1)] = unescape(lm.group(2))
        key = name + "{" + ",".join('%s="%s"' % (k, labels[k]) for k in sorted(labels)) + "}"
        if key in samples:
            raise ParseError("%s: duplicate sample %s" % (where, key))
        value = float(value_text.replace("Inf", "inf").replace("NaN", "nan"))
        if types[fam] == "counter" and not value >= 0:
            raise ParseError("%s: negative counter" % where)
        samples[key] = value
        order.append((fam, name, labels, value, where))
    # histograms
    for fam, typ in types.items():
        if typ != "histogram":
            continue
        groups = {}
        for f, name, labels, value, where in order:
            if f != fam:
                continue
            rest = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
            g = groups.setdefault(rest, {"buckets": [], "sum": None, "count": None})
            if name == fam + "_bucket":
                if "le" not in labels:
                    raise ParseError("%s: bucket without le" % where)
                le = float(labels["le"].replace("Inf", "inf"))
                if math.isnan(le):
                    raise ParseError("%s: le is NaN" % where)
                g["buckets"].append((le, value, where))
            elif name == fam + "_sum":
                g["sum"] = value
            elif name == fam + "_count":
                g["count"] = value
            else:
                raise ParseError("%s: %s is not a histogram sample name" % (where, name))
        if not groups:
            raise ParseError("histogram %s has no samples" % fam)
        for rest, g in groups.items():
            b = g["buckets"]
            if not b:
                raise ParseError("histogram %s%s: no buckets" % (fam, rest))
            for (le0, v0, _), (le1, v1, w1) in zip(b, b[1:]):
                if not le1 > le0:
                    raise ParseError("%s: le does not rise" % w1)
                if v1 < v0:
                    raise ParseError("%s: buckets are not cumulative" % w1)
            if b[-1][0] != math.inf:
                raise ParseError("histogram %s%s: the last bucket is not +Inf" % (fam, rest))
            if g["count"] is None or g["sum"] is None:
                raise ParseError("histogram %s%s: _count or _sum missing" % (fam, rest))
            if b[-1][1] != g["count"]:
                raise ParseError("histogram %s%s: +Inf bucket %g != _count %g" % (fam, rest, b[-1][1], g["count"]))
    for name in types:
        if name not in seen_samples:
            raise ParseError("TYPE %s has no samples" % name)
    return samples


def main():
    args = sys.argv[1:]
    prefix = ""
    if args[:1] == ["--prefix"]:
        prefix, args = args[1], args[2:]
    if len(args) != 1:
        sys.exit("usage: promparse.py [--prefix P] FILE|-")
    text = sys.stdin.read() if args[0] == "-" else open(args[0], encoding="utf-8").read()
    try:
        samples = parse(text, prefix)
    except ParseError as e:
        sys.exit("promparse: " + str(e))
    json.dump(samples, sys.stdout, indent=0, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
