#!/usr/bin/env python3
"""Fills in the expected results of sqllogictest files from PostgreSQL.

The SQL logic tests of nvmedb-sql (crates/nvmedb-sql/tests/slt/*.slt) state what PostgreSQL
answers, not what nvmedb happens to answer: this script runs each file's statements, in
order, in a fresh database of a running PostgreSQL server (psql on PATH or in
/usr/lib/postgresql/15/bin), rewrites every `query` record's expected rows with
PostgreSQL's, and checks that every `statement error (SQLSTATE)` fails there with that
SQLSTATE and every `statement ok` succeeds. Values are printed as the test harness prints
them (NULL as `NULL`, an empty string as `(empty)`, columns separated by one space).

    scripts/slt-from-postgres.py --host /tmp/pg --port 5432 crates/nvmedb-sql/tests/slt/*.slt

Records tagged `# nvmedb-only` on the line before them are left as written (statements
PostgreSQL answers differently by design, e.g. an error nvmedb gives for what it refuses).
"""

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys

PSQL = shutil.which("psql") or "/usr/lib/postgresql/15/bin/psql"
SEP = "\x1f"


def run(args, sql, db):
    """Runs one statement; (rows, sqlstate) — rows is None on error."""
    cmd = [PSQL, "-X", "-q", "-A", "-t", "-F", SEP, "-P", "null=\x1eNULL", "-v", "VERBOSITY=verbose",
           "-h", args.host, "-p", str(args.port), "-U", args.user, "-d", db, "-c", sql]
    p = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"ERROR:\s+([0-9A-Z]{5}):", p.stderr)
    if m:
        return None, m.group(1)
    if p.returncode != 0:
        raise SystemExit(f"psql failed on {sql!r}: {p.stderr}")
    rows = []
    for line in p.stdout.split("\n")[:-1] if p.stdout else []:
        fields = []
        for f in line.split(SEP):
            if f == "\x1eNULL":
                fields.append("NULL")
            elif f == "":
                fields.append("(empty)")
            else:
                fields.append(f)
        rows.append(fields)
    return rows, None


def records(text):
    """Splits an slt file into records (blocks separated by blank lines)."""
    out, cur = [], []
    for line in text.split("\n"):
        if line.strip() == "":
            if cur:
                out.append(cur)
                cur = []
        else:
            cur.append(line)
    if cur:
        out.append(cur)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default=os.environ.get("PGHOST", "/tmp"))
    ap.add_argument("--port", default=os.environ.get("PGPORT", "5432"))
    ap.add_argument("--user", default=os.environ.get("PGUSER", "postgres"))
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    bad = 0
    for path in args.files:
        path = pathlib.Path(path)
        db = "slt_" + re.sub(r"\W", "_", path.stem)
        subprocess.run([PSQL, "-X", "-q", "-h", args.host, "-p", str(args.port), "-U", args.user, "-d", "postgres",
                        "-c", f"DROP DATABASE IF EXISTS {db}", "-c", f"CREATE DATABASE {db}"], check=True)
        out = []
        for rec in records(path.read_text()):
            comments = [l for l in rec if l.startswith("#")]
            body = [l for l in rec if not l.startswith("#")]
            only_ours = any("nvmedb-only" in c for c in comments)
            if not body:
                out.append("\n".join(rec))
                continue
            head = body[0].split()
            if head[0] == "statement":
                sql = "\n".join(body[1:])
                if not only_ours:
                    rows, state = run(args, sql, db)
                    want = re.search(r"\(([0-9A-Z]{5})\)", body[0])
                    if head[1] == "ok" and state:
                        print(f"{path}: PostgreSQL fails with {state}: {sql}", file=sys.stderr)
                        bad += 1
                    if head[1] == "error" and (state is None or (want and want.group(1) != state)):
                        print(f"{path}: PostgreSQL gives {state or 'no error'} for {sql}", file=sys.stderr)
                        bad += 1
                out.append("\n".join(rec))
            elif head[0] == "query":
                if "----" in body:
                    sql_lines = body[1:body.index("----")]
                else:
                    sql_lines = body[1:]
                sql = "\n".join(sql_lines)
                if only_ours:
                    out.append("\n".join(rec))
                    continue
                rows, state = run(args, sql, db)
                if state:
                    print(f"{path}: PostgreSQL fails with {state}: {sql}", file=sys.stderr)
                    bad += 1
                    rows = []
                if len(head) > 2 and head[2] == "rowsort":
                    rows = sorted(rows)
                lines = [" ".join(r) for r in rows]
                out.append("\n".join(comments + [body[0]] + sql_lines + ["----"] + lines))
            else:
                out.append("\n".join(rec))
        path.write_text("\n\n".join(out) + "\n")
        subprocess.run([PSQL, "-X", "-q", "-h", args.host, "-p", str(args.port), "-U", args.user, "-d", "postgres",
                        "-c", f"DROP DATABASE IF EXISTS {db}"], check=True)
        print(f"{path}: done")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
