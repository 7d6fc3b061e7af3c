#!/usr/bin/env python3
"""DuckDB's answers to the 22 TPC-H queries over a directory of `|`-separated tables.

The SQL TPC-H test writes the eight tables (`<table>.tbl`, as `COPY … WITH (DELIMITER '|')`
reads them) once, loads them into nvmedb, and asks this script for DuckDB's answers to the same
query text (crates/nvmedb-lab/src/workload/tpch_sql/qNN.sql) over the same rows. The answers are
written as JSON: {"q01": [[value, ...], ...], ...}, numbers as floats, dates as ISO text, strings
without trailing blanks (char(n) pads them, DuckDB does not).

    pip install duckdb
    scripts/tpch-duckdb-answers.py DATA_DIR OUT.json
"""

import datetime
import decimal
import json
import pathlib
import re
import sys

import duckdb

ROOT = pathlib.Path(__file__).resolve().parent.parent
SQL = ROOT / "crates/nvmedb-lab/src/workload/tpch_sql"


def columns(schema: str, table: str) -> dict:
    """Column name → DuckDB type, from the CREATE TABLE of `table`."""
    m = re.search(rf"create table {table} \((.*?)\);", schema, re.S)
    cols = {}
    for part in re.split(r",\s*(?![^()]*\))", m.group(1)):
        words = part.split()
        name, ty = words[0], " ".join(words[1:])
        ty = re.sub(r"\s*(not null|primary key)", "", ty).strip()
        ty = {"int": "INTEGER", "bigint": "BIGINT", "date": "DATE"}.get(ty, ty.upper())
        ty = re.sub(r"^CHAR\(\d+\)|^VARCHAR\(\d+\)", "VARCHAR", ty)
        cols[name] = ty
    return cols


def value(v):
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()[:10] if isinstance(v, datetime.date) and not isinstance(v, datetime.datetime) else v.isoformat(sep=" ")
    if isinstance(v, str):
        return v.rstrip()
    return v


def main() -> int:
    data, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    schema = (SQL / "schema.sql").read_text()
    con = duckdb.connect()
    for table in re.findall(r"create table (\w+)", schema):
        cols = columns(schema, table)
        spec = ", ".join(f"'{c}': '{t}'" for c, t in cols.items())
        con.execute(
            f"create table {table} as select * from read_csv('{data / (table + '.tbl')}', delim='|', "
            f"header=false, quote='', escape='', columns={{{spec}}})"
        )
    answers = {}
    for q in sorted(SQL.glob("q*.sql")):
        rows = con.execute(q.read_text()).fetchall()
        answers[q.stem] = [[value(v) for v in r] for r in rows]
    out.write_text(json.dumps(answers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
