#!/usr/bin/env python3
"""Prints the largest Rust source files and functions of the workspace, and fails when one is
over its bound: a newcomer should be able to hold a file, and a function, in their head.

    scripts/sizes.py [--top N] [--max-file-lines L] [--max-fn-lines F] [--allow FILE]

`--allow` names files and functions that were over the bounds when the bounds were set, each
with the size it may not grow past (lines `<path> <lines>` and `<path> fn <name> <lines>`):
they are to be split, and nothing new joins them. Counts lines of `crates/*/src/**/*.rs` (tests under `tests/` and `#[cfg(test)]` files named
`tests.rs` are not held to the bounds). A function's length runs from its `fn` line to its
closing brace, found by brace depth outside strings, chars and comments."""

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"[^\"]*\"\s+)?fn\s+(\w+)")


def strip(line, state):
    """The line's code with strings, chars and comments blanked; `state` carries an open block
    comment or string across lines."""
    out = []
    i = 0
    while i < len(line):
        c = line[i]
        if state["block"]:
            if line.startswith("*/", i):
                state["block"] -= 1
                i += 2
            elif line.startswith("/*", i):
                state["block"] += 1
                i += 2
            else:
                i += 1
            continue
        if state["str"]:
            if c == "\\":
                i += 2
            elif c == '"':
                state["str"] = False
                i += 1
            else:
                i += 1
            continue
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = 1
            i += 2
            continue
        m = re.match(r'r(#*)"', line[i:])
        if m and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
            end = '"' + m.group(1)
            j = line.find(end, i + len(m.group(0)))
            i = len(line) if j < 0 else j + len(end)
            continue
        if c == '"':
            state["str"] = True
            i += 1
            continue
        m = re.match(r"'(\\.|[^\\'])'", line[i:]) or re.match(r"'\\u\{[0-9a-fA-F]+\}'", line[i:])
        if m:
            i += len(m.group(0))
            continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(path):
    lines = path.read_text().splitlines()
    state = {"block": 0, "str": False}
    open_fns = []  # (name, start line, depth at which its body opened)
    depth = 0
    found = []
    pending = None
    for n, raw in enumerate(lines, 1):
        code = strip(raw, state)
        m = FN.match(code)
        if m:
            pending = (m.group(7), n)
        for ch in code:
            if ch == "{":
                depth += 1
                if pending:
                    open_fns.append((pending[0], pending[1], depth))
                    pending = None
            elif ch == "}":
                if open_fns and open_fns[-1][2] == depth:
                    name, start, _ = open_fns.pop()
                    found.append((n - start + 1, name, start))
                depth -= 1
            elif ch == ";" and pending:
                pending = None  # a declaration without a body
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--max-file-lines", type=int, default=0, help="fail above this (0: report only)")
    ap.add_argument("--max-fn-lines", type=int, default=0, help="fail above this (0: report only)")
    ap.add_argument("--allow", type=pathlib.Path, help="known oversized files and functions")
    a = ap.parse_args()
    files, fns = [], []
    for p in sorted(ROOT.glob("crates/*/src/**/*.rs")):
        rel = p.relative_to(ROOT)
        held = p.name != "tests.rs"
        files.append((len(p.read_text().splitlines()), str(rel), held))
        fns.extend((ln, f"{rel}:{start} {name}", held, f"{rel} fn {name}") for ln, name, start in functions(p))
    files.sort(reverse=True)
    fns.sort(reverse=True)
    print(f"largest files (lines), of {len(files)}:")
    for ln, name, _ in files[: a.top]:
        print(f"  {ln:6}  {name}")
    print(f"largest functions (lines), of {len(fns)}:")
    for ln, name, _, _ in fns[: a.top]:
        print(f"  {ln:6}  {name}")
    allow = {}
    if a.allow:
        for line in a.allow.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                key, n = line.rsplit(None, 1)
                allow[key] = int(n)
    bad = []

    def over(key, ln, bound):
        limit = max(bound, allow.get(key, 0))
        return ln > limit and f"{key}: {ln} lines (bound {limit})"

    if a.max_file_lines:
        bad += [over(name, ln, a.max_file_lines) for ln, name, held in files if held]
    if a.max_fn_lines:
        bad += [over(key, ln, a.max_fn_lines) for ln, _, held, key in fns if held]
    bad = [b for b in bad if b]
    for b in bad:
        print(f"over the bound: {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
