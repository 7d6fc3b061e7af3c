"""SQLAlchemy 2's reflection against nvmedb: has_table, get_table_names, get_columns,
get_pk_constraint, get_indexes, get_foreign_keys and get_unique_constraints of tables with a
composite primary key, a unique index, a multi-column index and a composite foreign key
(the catalog queries use unnest, generate_subscripts, array_agg … ORDER BY, = ANY and the
int2vector columns of pg_index); then Table(..., autoload_with=engine) and an ORM insert and
select through the reflected tables. Usage: reflect.py <sqlalchemy url>. Prints `ok` at the
end; any failure raises (non-zero exit) naming what differed."""

import sys

from sqlalchemy import MetaData, Table, create_engine, inspect, insert, select, text
from sqlalchemy.orm import Session, registry

url = sys.argv[1]
engine = create_engine(url)
with engine.begin() as c:
    c.execute(text("DROP TABLE IF EXISTS lines"))
    c.execute(text("DROP TABLE IF EXISTS orders"))
    c.execute(
        text(
            "CREATE TABLE orders (w int, id int, code varchar(10) NOT NULL, note text, "
            "PRIMARY KEY (w, id))"
        )
    )
    c.execute(text("CREATE UNIQUE INDEX orders_code ON orders (code)"))
    c.execute(
        text(
            "CREATE TABLE lines (w int, o int, n int, qty int DEFAULT 1, "
            "PRIMARY KEY (w, o, n), "
            "CONSTRAINT lines_order_fk FOREIGN KEY (w, o) REFERENCES orders (w, id) ON DELETE CASCADE)"
        )
    )
    c.execute(text("CREATE INDEX lines_qty_n ON lines (qty, n)"))

insp = inspect(engine)
assert insp.has_table("lines") and not insp.has_table("nothing")
assert sorted(insp.get_table_names()) == ["lines", "orders"], insp.get_table_names()

cols = [(c["name"], str(c["type"]), c["nullable"], c["default"]) for c in insp.get_columns("lines")]
assert cols == [
    ("w", "INTEGER", False, None),
    ("o", "INTEGER", False, None),
    ("n", "INTEGER", False, None),
    ("qty", "INTEGER", True, "1"),
], cols

pk = insp.get_pk_constraint("orders")
assert pk["name"] == "orders_pkey" and pk["constrained_columns"] == ["w", "id"], pk
pk = insp.get_pk_constraint("lines")
assert pk["constrained_columns"] == ["w", "o", "n"], pk

idx = sorted((i["name"], i["column_names"], i["unique"]) for i in insp.get_indexes("orders"))
assert idx == [("orders_code", ["code"], True)], idx
idx = [(i["name"], i["column_names"], i["unique"]) for i in insp.get_indexes("lines")]
assert idx == [("lines_qty_n", ["qty", "n"], False)], idx

fks = insp.get_foreign_keys("lines")
assert len(fks) == 1, fks
fk = fks[0]
assert fk["name"] == "lines_order_fk", fk
assert fk["constrained_columns"] == ["w", "o"] and fk["referred_columns"] == ["w", "id"], fk
assert fk["referred_table"] == "orders" and fk["options"].get("ondelete") == "CASCADE", fk
assert insp.get_foreign_keys("orders") == []

# nvmedb keeps no UNIQUE constraint apart from its unique index: none is reported.
assert insp.get_unique_constraints("orders") == [], insp.get_unique_constraints("orders")

# Tables reflected whole, then used by the ORM.
meta = MetaData()
orders = Table("orders", meta, autoload_with=engine)
lines = Table("lines", meta, autoload_with=engine)
assert [c.name for c in orders.primary_key.columns] == ["w", "id"]
assert {i.name for i in orders.indexes} == {"orders_code"}
fk = next(iter(lines.foreign_key_constraints))
assert [e.target_fullname for e in fk.elements] == ["orders.w", "orders.id"], fk.elements


class Order:
    pass


class Line:
    pass


reg = registry()
reg.map_imperatively(Order, orders)
reg.map_imperatively(Line, lines)
with Session(engine) as s:
    o = Order()
    o.w, o.id, o.code, o.note = 1, 10, "A-10", "first"
    s.add(o)
    s.flush()
    for n in (1, 2, 3):
        line = Line()
        line.w, line.o, line.n, line.qty = 1, 10, n, n * 5
        s.add(line)
    s.commit()
    s.execute(insert(lines).values(w=1, o=10, n=4))
    s.commit()
    got = s.execute(select(lines.c.n, lines.c.qty).where(lines.c.o == 10).order_by(lines.c.n)).all()
    assert [tuple(r) for r in got] == [(1, 5), (2, 10), (3, 15), (4, 1)], got
    assert s.get(Order, (1, 10)).code == "A-10"
    s.delete(s.get(Order, (1, 10)))
    s.commit()
    assert s.scalar(select(lines.c.n).limit(1)) is None, "ON DELETE CASCADE left lines"

meta.drop_all(engine)
assert not inspect(engine).has_table("orders")
print("ok")
