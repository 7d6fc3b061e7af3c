"""psycopg 3 against nvmedb: server-side prepared statements (`prepare=True`, and the
automatic ones after `prepare_threshold` runs), `executemany`, the `DEALLOCATE ALL` psycopg
sends after a ROLLBACK, eviction from its statement cache (`prepared_max`), and SQL-level
PREPARE / EXECUTE / DEALLOCATE. Usage: psycopg3.py <conninfo>. Prints `ok` at the end; any
failure raises (non-zero exit) naming what differed."""

import sys

import psycopg

conninfo = sys.argv[1]

with psycopg.connect(conninfo, autocommit=True) as conn:
    conn.execute("DROP TABLE IF EXISTS p3_items")
    conn.execute("CREATE TABLE p3_items (id int PRIMARY KEY, name text NOT NULL, qty int)")

with psycopg.connect(conninfo) as conn:
    conn.prepare_threshold = 2
    conn.prepared_max = 3
    with conn.cursor() as cur:
        # executemany: one statement prepared once, run per row (psycopg 3 pipelines it).
        cur.executemany(
            "INSERT INTO p3_items (id, name, qty) VALUES (%s, %s, %s)",
            [(i, f"item{i}", i * 10) for i in range(1, 51)],
        )
        conn.commit()
        # Explicitly prepared on the server.
        for i in (3, 7, 3):
            cur.execute("SELECT name, qty FROM p3_items WHERE id = %s", (i,), prepare=True)
            assert cur.fetchone() == (f"item{i}", i * 10), i
        # Prepared automatically after prepare_threshold runs.
        for i in range(1, 6):
            cur.execute("SELECT count(*) FROM p3_items WHERE qty >= %s", (i * 100,))
            assert cur.fetchone()[0] == 50 - i * 10 + 1, i
        assert conn._prepared._names, "psycopg prepared nothing on the server"
        # A ROLLBACK makes psycopg send DEALLOCATE ALL before its next statement.
        cur.execute("UPDATE p3_items SET qty = 0 WHERE id = 1", prepare=True)
        conn.rollback()
        cur.execute("SELECT qty FROM p3_items WHERE id = %s", (1,), prepare=True)
        assert cur.fetchone() == (10,), "the rolled-back update is visible"
        # More distinct prepared statements than prepared_max: psycopg deallocates the oldest.
        for col in ("id", "name", "qty", "id + qty", "qty * 2"):
            cur.execute(f"SELECT {col} FROM p3_items WHERE id = %s", (5,), prepare=True)
            cur.fetchone()
        cur.execute("SELECT qty * 2 FROM p3_items WHERE id = %s", (6,), prepare=True)
        assert cur.fetchone() == (120,)
        # executemany of an UPDATE, then its effect.
        cur.executemany("UPDATE p3_items SET qty = qty + %s WHERE id = %s", [(1, i) for i in range(1, 11)])
        conn.commit()
        cur.execute("SELECT sum(qty) FROM p3_items WHERE id <= 10")
        assert cur.fetchone()[0] == sum(i * 10 + 1 for i in range(1, 11))
        # SQL-level PREPARE / EXECUTE / DEALLOCATE through the driver.
        cur.execute("PREPARE by_name (text) AS SELECT id FROM p3_items WHERE name = $1")
        cur.execute("EXECUTE by_name ('item42')")
        assert cur.fetchone() == (42,)
        cur.execute("DEALLOCATE by_name")
        try:
            cur.execute("EXECUTE by_name ('item42')")
            raise AssertionError("EXECUTE after DEALLOCATE succeeded")
        except psycopg.errors.InvalidSqlStatementName:
            conn.rollback()
        # Errors keep their SQLSTATE through a prepared statement.
        try:
            cur.execute("INSERT INTO p3_items VALUES (%s, %s, %s)", (1, "dup", 0), prepare=True)
            raise AssertionError("duplicate key accepted")
        except psycopg.errors.UniqueViolation:
            conn.rollback()
        cur.execute("SELECT count(*) FROM p3_items", prepare=True)
        assert cur.fetchone() == (50,)

with psycopg.connect(conninfo, autocommit=True) as conn:
    conn.execute("DROP TABLE p3_items")

print("ok")
