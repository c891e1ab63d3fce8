#!/usr/bin/env python3
"""Parses Prometheus text exposition (format 0.0.4) strictly and checks samples.

  check_prometheus.py SOURCE [--expect REGEX]...

SOURCE is a file or an http:// URL. Every line must be a "# HELP"/"# TYPE"
comment or a sample "name{label="value",...} value"; a TYPE line must come
before its samples and only once; label values must be properly escaped.
Each --expect is a regular expression that some sample line must match.
Exit 0 when all holds, 1 with the reason otherwise.
"""
import re
import sys
import urllib.request

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\\\|\\"|\\n)*"'
SAMPLE = re.compile(rf"^({NAME})(\{{{LABEL}(?:,{LABEL})*\}})? (-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|NaN|[-+]Inf)$")
TYPE = re.compile(rf"^# TYPE ({NAME}) (counter|gauge|histogram|summary|untyped)$")
HELP = re.compile(rf"^# HELP ({NAME}) .*$")


def main(argv):
    source, expects = argv[1], []
    i = 2
    while i < len(argv):
        if argv[i] != "--expect" or i + 1 >= len(argv):
            print(f"usage: {argv[0]} SOURCE [--expect REGEX]...")
            return 2
        expects.append(re.compile(argv[i + 1]))
        i += 2
    if source.startswith("http://"):
        with urllib.request.urlopen(source, timeout=5) as r:
            if r.status != 200:
                print(f"{source}: HTTP {r.status}")
                return 1
            ctype = r.headers.get("Content-Type", "")
            if not ctype.startswith("text/plain; version=0.0.4"):
                print(f"{source}: Content-Type {ctype!r}")
                return 1
            text = r.read().decode("utf-8")
    else:
        with open(source, encoding="utf-8") as f:
            text = f.read()
    typed, samples = set(), []
    for n, line in enumerate(text.splitlines(), 1):
        m = TYPE.match(line)
        if m:
            if m.group(1) in typed:
                print(f"line {n}: a second TYPE for {m.group(1)}")
                return 1
            typed.add(m.group(1))
            continue
        if HELP.match(line):
            continue
        m = SAMPLE.match(line)
        if not m:
            print(f"line {n}: not a sample: {line!r}")
            return 1
        if m.group(1) not in typed:
            print(f"line {n}: sample of {m.group(1)} before its TYPE")
            return 1
        samples.append(line)
    if not samples:
        print("no samples")
        return 1
    for e in expects:
        if not any(e.search(s) for s in samples):
            print(f"no sample matches {e.pattern!r}")
            return 1
    print(f"{len(samples)} samples of {len(typed)} metrics parse")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
