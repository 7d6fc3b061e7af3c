"""SQLAlchemy 2 over a PostgreSQL driver against nvmedb: create_all, inserts, queries,
update, delete, reflection, drop_all. Usage: orm.py <sqlalchemy url>. Prints `ok` at the end;
any failure raises (non-zero exit) with the statement at fault."""

import sys

from sqlalchemy import Float, Integer, String, create_engine, delete, inspect, select, text, update
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

url = sys.argv[1]


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "items"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(40), index=True)
    price: Mapped[float] = mapped_column(Float, nullable=True)


engine = create_engine(url)
Base.metadata.drop_all(engine)
Base.metadata.create_all(engine)
with Session(engine) as s:
    s.add_all([Item(id=i, name=f"n{i}", price=i * 1.5) for i in range(1, 6)])
    s.commit()
    assert s.scalar(select(Item.name).where(Item.id == 3)) == "n3"
    s.execute(update(Item).where(Item.id == 2).values(name="two"))
    s.execute(delete(Item).where(Item.id == 5))
    s.commit()
    rows = s.execute(select(Item.id, Item.name).order_by(Item.id)).all()
    assert [tuple(r) for r in rows] == [(1, "n1"), (2, "two"), (3, "n3"), (4, "n4")], rows
    assert s.get(Item, 4).price == 6.0
    assert s.scalar(text("show transaction isolation level")) == "read committed"

insp = inspect(engine)
assert insp.has_table("items")
assert "items" in insp.get_table_names(), insp.get_table_names()
cols = [(c["name"], str(c["type"]), c["nullable"]) for c in insp.get_columns("items")]
assert cols == [("id", "INTEGER", False), ("name", "VARCHAR(40)", False), ("price", "DOUBLE PRECISION", True)], cols
Base.metadata.drop_all(engine)
assert not inspect(engine).has_table("items")
print("ok")
