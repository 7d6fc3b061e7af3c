"""A TPC-C kit for PostgreSQL-protocol servers, written against the TPC-C specification
(revision 5.11): the nine tables of clause 1.3 with their composite primary keys and foreign
keys, loaded as clause 4.3.3 populates them; the five transactions of clause 2 issued as plain
SQL over psycopg2, statement by statement as BenchBase's PostgreSQL driver issues them
(SELECT ... FOR UPDATE of the district and the stock rows in New-Order, the customer chosen by
last name in 60 % of Payments and Order-Status, Delivery of all ten districts in one
transaction); the mix 45/43/4/4/4 without keying or think time; 1 % of New-Orders naming an
unused item and rolled back; and the consistency conditions 1-4 of clause 3.3.2 as `check`.
Nothing in it knows which server it talks to.

Usage:
  tpcc_kit.py --dsn DSN load W [--items N] [--customers N]
  tpcc_kit.py --dsn DSN run --seconds S --terminals T [--isolation LEVEL] [--seed N]
  tpcc_kit.py --dsn DSN check

Scale: clause 4.3.3 has 100 000 items and 3 000 customers (and orders) per district;
`--items` and `--customers` scale them down (the last 30 % of each district's orders are
undelivered, as in the full scale; last names come from the first min(1000, customers)
customers so that every name a terminal asks for exists).

`run` prints, per transaction type, the commits, the intentional rollbacks (New-Order's
unused item), the retries (40001 serialization failures and 40P01 deadlocks, each retried
with the same inputs until it commits) and the errors, then tpmC (New-Orders committed per
minute) and a last line `RESULT {json}` for programs. It exits 1 when any transaction failed
with another error. `check` prints each condition's verdict and exits 1 when one fails.
"""

import argparse
import datetime
import json
import multiprocessing
import random
import sys
import time
from decimal import Decimal

import psycopg2
import psycopg2.extras

DISTRICTS = 10
FULL_ITEMS = 100_000
FULL_CUSTOMERS = 3_000
RETRY_CODES = ("40001", "40P01")
TYPES = ("new_order", "payment", "order_status", "delivery", "stock_level")
MIX = (45, 43, 4, 4, 4)
SYLLABLES = ("BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING")

DDL = [
    """CREATE TABLE warehouse (
        w_id int NOT NULL,
        w_name varchar(10) NOT NULL,
        w_street_1 varchar(20) NOT NULL,
        w_street_2 varchar(20) NOT NULL,
        w_city varchar(20) NOT NULL,
        w_state char(2) NOT NULL,
        w_zip char(9) NOT NULL,
        w_tax decimal(4, 4) NOT NULL,
        w_ytd decimal(12, 2) NOT NULL,
        PRIMARY KEY (w_id))""",
    """CREATE TABLE district (
        d_id int NOT NULL,
        d_w_id int NOT NULL,
        d_name varchar(10) NOT NULL,
        d_street_1 varchar(20) NOT NULL,
        d_street_2 varchar(20) NOT NULL,
        d_city varchar(20) NOT NULL,
        d_state char(2) NOT NULL,
        d_zip char(9) NOT NULL,
        d_tax decimal(4, 4) NOT NULL,
        d_ytd decimal(12, 2) NOT NULL,
        d_next_o_id int NOT NULL,
        PRIMARY KEY (d_w_id, d_id),
        FOREIGN KEY (d_w_id) REFERENCES warehouse (w_id))""",
    """CREATE TABLE customer (
        c_id int NOT NULL,
        c_d_id int NOT NULL,
        c_w_id int NOT NULL,
        c_first varchar(16) NOT NULL,
        c_middle char(2) NOT NULL,
        c_last varchar(16) NOT NULL,
        c_street_1 varchar(20) NOT NULL,
        c_street_2 varchar(20) NOT NULL,
        c_city varchar(20) NOT NULL,
        c_state char(2) NOT NULL,
        c_zip char(9) NOT NULL,
        c_phone char(16) NOT NULL,
        c_since timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
        c_credit char(2) NOT NULL,
        c_credit_lim decimal(12, 2) NOT NULL,
        c_discount decimal(4, 4) NOT NULL,
        c_balance decimal(12, 2) NOT NULL,
        c_ytd_payment decimal(12, 2) NOT NULL,
        c_payment_cnt int NOT NULL,
        c_delivery_cnt int NOT NULL,
        c_data varchar(500) NOT NULL,
        PRIMARY KEY (c_w_id, c_d_id, c_id),
        FOREIGN KEY (c_w_id, c_d_id) REFERENCES district (d_w_id, d_id))""",
    """CREATE TABLE history (
        h_c_id int NOT NULL,
        h_c_d_id int NOT NULL,
        h_c_w_id int NOT NULL,
        h_d_id int NOT NULL,
        h_w_id int NOT NULL,
        h_date timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
        h_amount decimal(6, 2) NOT NULL,
        h_data varchar(24) NOT NULL,
        FOREIGN KEY (h_c_w_id, h_c_d_id, h_c_id) REFERENCES customer (c_w_id, c_d_id, c_id),
        FOREIGN KEY (h_w_id, h_d_id) REFERENCES district (d_w_id, d_id))""",
    """CREATE TABLE orders (
        o_id int NOT NULL,
        o_d_id int NOT NULL,
        o_w_id int NOT NULL,
        o_c_id int NOT NULL,
        o_entry_d timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
        o_carrier_id int DEFAULT NULL,
        o_ol_cnt int NOT NULL,
        o_all_local int NOT NULL,
        PRIMARY KEY (o_w_id, o_d_id, o_id),
        FOREIGN KEY (o_w_id, o_d_id, o_c_id) REFERENCES customer (c_w_id, c_d_id, c_id))""",
    """CREATE TABLE new_order (
        no_o_id int NOT NULL,
        no_d_id int NOT NULL,
        no_w_id int NOT NULL,
        PRIMARY KEY (no_w_id, no_d_id, no_o_id),
        FOREIGN KEY (no_w_id, no_d_id, no_o_id) REFERENCES orders (o_w_id, o_d_id, o_id))""",
    """CREATE TABLE item (
        i_id int NOT NULL,
        i_im_id int NOT NULL,
        i_name varchar(24) NOT NULL,
        i_price decimal(5, 2) NOT NULL,
        i_data varchar(50) NOT NULL,
        PRIMARY KEY (i_id))""",
    """CREATE TABLE stock (
        s_i_id int NOT NULL,
        s_w_id int NOT NULL,
        s_quantity int NOT NULL,
        s_dist_01 char(24) NOT NULL,
        s_dist_02 char(24) NOT NULL,
        s_dist_03 char(24) NOT NULL,
        s_dist_04 char(24) NOT NULL,
        s_dist_05 char(24) NOT NULL,
        s_dist_06 char(24) NOT NULL,
        s_dist_07 char(24) NOT NULL,
        s_dist_08 char(24) NOT NULL,
        s_dist_09 char(24) NOT NULL,
        s_dist_10 char(24) NOT NULL,
        s_ytd int NOT NULL,
        s_order_cnt int NOT NULL,
        s_remote_cnt int NOT NULL,
        s_data varchar(50) NOT NULL,
        PRIMARY KEY (s_w_id, s_i_id),
        FOREIGN KEY (s_w_id) REFERENCES warehouse (w_id),
        FOREIGN KEY (s_i_id) REFERENCES item (i_id))""",
    """CREATE TABLE order_line (
        ol_o_id int NOT NULL,
        ol_d_id int NOT NULL,
        ol_w_id int NOT NULL,
        ol_number int NOT NULL,
        ol_i_id int NOT NULL,
        ol_supply_w_id int NOT NULL,
        ol_delivery_d timestamp NULL DEFAULT NULL,
        ol_quantity int NOT NULL,
        ol_amount decimal(6, 2) NOT NULL,
        ol_dist_info char(24) NOT NULL,
        PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number),
        FOREIGN KEY (ol_w_id, ol_d_id, ol_o_id) REFERENCES orders (o_w_id, o_d_id, o_id),
        FOREIGN KEY (ol_supply_w_id, ol_i_id) REFERENCES stock (s_w_id, s_i_id))""",
    # BenchBase's secondary indexes: the customer by last name (Payment, Order-Status) and a
    # customer's orders (Order-Status's newest order).
    "CREATE INDEX idx_customer_name ON customer (c_w_id, c_d_id, c_last, c_first)",
    "CREATE INDEX idx_order ON orders (o_w_id, o_d_id, o_c_id, o_id)",
]
TABLES = ("order_line", "new_order", "history", "orders", "stock", "item", "customer", "district", "warehouse")


class Rand:
    """Clause 2.1.6's and 4.3.2's random functions; C constants chosen once per run."""

    def __init__(self, seed):
        self.r = random.Random(seed)
        self.c_last = self.r.randint(0, 255)
        self.c_id = self.r.randint(0, 1023)
        self.ol_i_id = self.r.randint(0, 8191)

    def uniform(self, lo, hi):
        return self.r.randint(lo, hi)

    def nurand(self, a, x, y):
        c = {255: self.c_last, 1023: self.c_id, 8191: self.ol_i_id}[a]
        return (((self.r.randint(0, a) | self.r.randint(x, y)) + c) % (y - x + 1)) + x

    def astring(self, lo, hi):
        n = self.r.randint(lo, hi)
        return "".join(self.r.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(n))

    def nstring(self, lo, hi):
        return "".join(self.r.choice("0123456789") for _ in range(self.r.randint(lo, hi)))

    def zip(self):
        return self.nstring(4, 4) + "11111"

    def data(self, lo, hi):
        """i_data / s_data: 10 % of them contain ORIGINAL (clause 4.3.3.1)."""
        s = self.astring(lo, hi)
        if self.r.randint(1, 10) == 1:
            at = self.r.randint(0, len(s) - 8)
            s = s[:at] + "ORIGINAL" + s[at + 8 :]
        return s

    def money(self, lo, hi):
        return Decimal(self.r.randint(int(lo * 100), int(hi * 100))) / 100

    def tax(self):
        return Decimal(self.r.randint(0, 2000)) / 10000


def last_name(num):
    return SYLLABLES[num // 100] + SYLLABLES[(num // 10) % 10] + SYLLABLES[num % 10]


class Scale:
    """The kit's scale, read back from the loaded tables so `run` and `check` need no flags."""

    def __init__(self, warehouses, items, customers):
        self.warehouses, self.items, self.customers = warehouses, items, customers
        self.names = min(1000, customers)

    @staticmethod
    def read(cur):
        cur.execute("SELECT count(*) FROM warehouse")
        w = cur.fetchone()[0]
        cur.execute("SELECT max(i_id) FROM item")
        i = cur.fetchone()[0]
        cur.execute("SELECT max(c_id) FROM customer WHERE c_w_id = 1 AND c_d_id = 1")
        c = cur.fetchone()[0]
        if not w or not i or not c:
            sys.exit("tpcc: the tables are empty: run `load` first")
        return Scale(w, i, c)

    def customer_id(self, rnd):
        return rnd.nurand(1023, 1, FULL_CUSTOMERS) % self.customers + 1

    def customer_last(self, rnd):
        return last_name(rnd.nurand(255, 0, 999) % self.names)

    def item_id(self, rnd):
        return rnd.nurand(8191, 1, FULL_ITEMS) % self.items + 1


def connect(dsn):
    conn = psycopg2.connect(dsn)
    conn.autocommit = False
    return conn


def insert_rows(cur, table, rows):
    psycopg2.extras.execute_values(cur, f"INSERT INTO {table} VALUES %s", rows, page_size=500)


def load(args):
    conn = connect(args.dsn)
    cur = conn.cursor()
    for t in TABLES:
        cur.execute(f"DROP TABLE IF EXISTS {t}")
    for ddl in DDL:
        cur.execute(ddl)
    conn.commit()
    rnd = Rand(args.seed)
    w_count, items, customers = args.warehouses, args.items, args.customers
    now = datetime.datetime.now().replace(microsecond=0)
    started = time.time()
    insert_rows(
        cur,
        "item",
        [(i, rnd.uniform(1, 10000), rnd.astring(14, 24), rnd.money(1, 100), rnd.data(26, 50)) for i in range(1, items + 1)],
    )
    conn.commit()
    undelivered_from = customers - customers * 3 // 10 + 1  # clause 4.3.3.1: the last 900 of 3000
    names = min(1000, customers)
    for w in range(1, w_count + 1):
        insert_rows(
            cur,
            "warehouse",
            [(w, rnd.astring(6, 10), rnd.astring(10, 20), rnd.astring(10, 20), rnd.astring(10, 20), rnd.astring(2, 2), rnd.zip(), rnd.tax(), Decimal("300000.00"))],
        )
        stock = []
        for i in range(1, items + 1):
            dists = [rnd.astring(24, 24) for _ in range(DISTRICTS)]
            stock.append((i, w, rnd.uniform(10, 100), *dists, 0, 0, 0, rnd.data(26, 50)))
        insert_rows(cur, "stock", stock)
        conn.commit()
        for d in range(1, DISTRICTS + 1):
            insert_rows(
                cur,
                "district",
                [(d, w, rnd.astring(6, 10), rnd.astring(10, 20), rnd.astring(10, 20), rnd.astring(10, 20), rnd.astring(2, 2), rnd.zip(), rnd.tax(), Decimal("30000.00"), customers + 1)],
            )
            cust, hist = [], []
            for c in range(1, customers + 1):
                last = last_name(c - 1 if c <= names else rnd.nurand(255, 0, 999) % names)
                credit = "BC" if rnd.uniform(1, 10) == 1 else "GC"
                cust.append(
                    (c, d, w, rnd.astring(8, 16), "OE", last, rnd.astring(10, 20), rnd.astring(10, 20), rnd.astring(10, 20), rnd.astring(2, 2), rnd.zip(), rnd.nstring(16, 16), now, credit, Decimal("50000.00"), Decimal(rnd.uniform(0, 5000)) / 10000, Decimal("-10.00"), Decimal("10.00"), 1, 0, rnd.astring(300, 500))
                )
                hist.append((c, d, w, d, w, now, Decimal("10.00"), rnd.astring(12, 24)))
            insert_rows(cur, "customer", cust)
            insert_rows(cur, "history", hist)
            # Orders: one per customer, customers in a random permutation (clause 4.3.3.1).
            perm = list(range(1, customers + 1))
            rnd.r.shuffle(perm)
            orders, lines, new = [], [], []
            for o in range(1, customers + 1):
                delivered = o < undelivered_from
                ol_cnt = rnd.uniform(5, 15)
                orders.append((o, d, w, perm[o - 1], now, rnd.uniform(1, 10) if delivered else None, ol_cnt, 1))
                for n in range(1, ol_cnt + 1):
                    amount = Decimal("0.00") if delivered else rnd.money(0.01, 9999.99)
                    lines.append((o, d, w, n, rnd.uniform(1, items), w, now if delivered else None, 5, amount, rnd.astring(24, 24)))
                if not delivered:
                    new.append((o, d, w))
            insert_rows(cur, "orders", orders)
            insert_rows(cur, "new_order", new)
            insert_rows(cur, "order_line", lines)
            conn.commit()
    print(f"loaded {w_count} warehouse(s), {items} items, {customers} customers per district in {time.time() - started:.1f} s")


class Abort(Exception):
    """New-Order's unused item: the transaction is rolled back on purpose (clause 2.4.2.3)."""


def new_order(cur, scale, rnd, w):
    d = rnd.uniform(1, DISTRICTS)
    c = scale.customer_id(rnd)
    ol_cnt = rnd.uniform(5, 15)
    rollback = rnd.uniform(1, 100) == 1
    lines = []
    for n in range(ol_cnt):
        i = scale.item_id(rnd)
        if rollback and n == ol_cnt - 1:
            i = scale.items + 1  # unused
        supply = w
        if scale.warehouses > 1 and rnd.uniform(1, 100) == 1:
            supply = other_warehouse(rnd, w, scale.warehouses)
        lines.append((i, supply, rnd.uniform(1, 10)))
    # Lines in item order, as BenchBase sorts them (fewer deadlocks on the stock rows).
    lines.sort()
    all_local = int(all(s == w for _, s, _ in lines))
    entry = datetime.datetime.now()

    def body():
        cur.execute("SELECT c_discount, c_last, c_credit FROM customer WHERE c_w_id = %s AND c_d_id = %s AND c_id = %s", (w, d, c))
        cur.fetchone()
        cur.execute("SELECT w_tax FROM warehouse WHERE w_id = %s", (w,))
        cur.fetchone()
        cur.execute("SELECT d_next_o_id, d_tax FROM district WHERE d_w_id = %s AND d_id = %s FOR UPDATE", (w, d))
        o_id = cur.fetchone()[0]
        cur.execute("UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = %s AND d_id = %s", (w, d))
        cur.execute(
            "INSERT INTO orders (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_ol_cnt, o_all_local) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (o_id, d, w, c, entry, ol_cnt, all_local),
        )
        cur.execute("INSERT INTO new_order (no_o_id, no_d_id, no_w_id) VALUES (%s, %s, %s)", (o_id, d, w))
        for n, (i, supply, qty) in enumerate(lines, 1):
            cur.execute("SELECT i_price, i_name, i_data FROM item WHERE i_id = %s", (i,))
            item = cur.fetchone()
            if item is None:
                raise Abort()
            cur.execute(
                f"SELECT s_quantity, s_data, s_dist_{d:02} FROM stock WHERE s_i_id = %s AND s_w_id = %s FOR UPDATE",
                (i, supply),
            )
            s_quantity, _, dist_info = cur.fetchone()
            s_quantity = s_quantity - qty if s_quantity - qty >= 10 else s_quantity - qty + 91
            cur.execute(
                "UPDATE stock SET s_quantity = %s, s_ytd = s_ytd + %s, s_order_cnt = s_order_cnt + 1, "
                "s_remote_cnt = s_remote_cnt + %s WHERE s_i_id = %s AND s_w_id = %s",
                (s_quantity, qty, int(supply != w), i, supply),
            )
            cur.execute(
                "INSERT INTO order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, ol_supply_w_id, "
                "ol_quantity, ol_amount, ol_dist_info) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (o_id, d, w, n, i, supply, qty, item[0] * qty, dist_info),
            )

    return body


def other_warehouse(rnd, w, count):
    o = rnd.uniform(1, count - 1)
    return o + 1 if o >= w else o


def select_customer(cur, scale, rnd, w, d, columns):
    """The customer by last name (60 %: the middle one of those sorted by first name, clause
    2.5.2.2) or by id; returns its row."""
    if rnd.uniform(1, 100) <= 60:
        last = scale.customer_last(rnd)

        def by_name():
            cur.execute(
                f"SELECT {columns} FROM customer WHERE c_w_id = %s AND c_d_id = %s AND c_last = %s ORDER BY c_first",
                (w, d, last),
            )
            rows = cur.fetchall()
            if not rows:
                raise RuntimeError(f"no customer named {last} in warehouse {w} district {d}")
            return rows[(len(rows) + 1) // 2 - 1]

        return by_name
    c = scale.customer_id(rnd)

    def by_id():
        cur.execute(f"SELECT {columns} FROM customer WHERE c_w_id = %s AND c_d_id = %s AND c_id = %s", (w, d, c))
        return cur.fetchone()

    return by_id


CUSTOMER_COLUMNS = (
    "c_id, c_first, c_middle, c_last, c_street_1, c_street_2, c_city, c_state, c_zip, c_phone, "
    "c_credit, c_credit_lim, c_discount, c_balance, c_ytd_payment, c_payment_cnt, c_since"
)


def payment(cur, scale, rnd, w):
    d = rnd.uniform(1, DISTRICTS)
    c_w, c_d = w, d
    if scale.warehouses > 1 and rnd.uniform(1, 100) > 85:
        c_w, c_d = other_warehouse(rnd, w, scale.warehouses), rnd.uniform(1, DISTRICTS)
    amount = rnd.money(1, 5000)
    find = select_customer(cur, scale, rnd, c_w, c_d, CUSTOMER_COLUMNS)
    when = datetime.datetime.now()

    def body():
        cur.execute("UPDATE warehouse SET w_ytd = w_ytd + %s WHERE w_id = %s", (amount, w))
        cur.execute("SELECT w_street_1, w_street_2, w_city, w_state, w_zip, w_name FROM warehouse WHERE w_id = %s", (w,))
        w_name = cur.fetchone()[5]
        cur.execute("UPDATE district SET d_ytd = d_ytd + %s WHERE d_w_id = %s AND d_id = %s", (amount, w, d))
        cur.execute("SELECT d_street_1, d_street_2, d_city, d_state, d_zip, d_name FROM district WHERE d_w_id = %s AND d_id = %s", (w, d))
        d_name = cur.fetchone()[5]
        row = find()
        c_id, credit = row[0], row[10]
        if credit == "BC":
            cur.execute("SELECT c_data FROM customer WHERE c_w_id = %s AND c_d_id = %s AND c_id = %s", (c_w, c_d, c_id))
            data = f"{c_id} {c_d} {c_w} {d} {w} {amount} | {cur.fetchone()[0]}"[:500]
            cur.execute(
                "UPDATE customer SET c_balance = c_balance - %s, c_ytd_payment = c_ytd_payment + %s, "
                "c_payment_cnt = c_payment_cnt + 1, c_data = %s WHERE c_w_id = %s AND c_d_id = %s AND c_id = %s",
                (amount, amount, data, c_w, c_d, c_id),
            )
        else:
            cur.execute(
                "UPDATE customer SET c_balance = c_balance - %s, c_ytd_payment = c_ytd_payment + %s, "
                "c_payment_cnt = c_payment_cnt + 1 WHERE c_w_id = %s AND c_d_id = %s AND c_id = %s",
                (amount, amount, c_w, c_d, c_id),
            )
        cur.execute(
            "INSERT INTO history (h_c_d_id, h_c_w_id, h_c_id, h_d_id, h_w_id, h_date, h_amount, h_data) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (c_d, c_w, c_id, d, w, when, amount, f"{w_name}    {d_name}"[:24]),
        )

    return body


def order_status(cur, scale, rnd, w):
    d = rnd.uniform(1, DISTRICTS)
    find = select_customer(cur, scale, rnd, w, d, "c_id, c_first, c_middle, c_last, c_balance")

    def body():
        c_id = find()[0]
        cur.execute(
            "SELECT o_id, o_carrier_id, o_entry_d FROM orders WHERE o_w_id = %s AND o_d_id = %s AND o_c_id = %s "
            "ORDER BY o_id DESC LIMIT 1",
            (w, d, c_id),
        )
        order = cur.fetchone()
        if order is not None:
            cur.execute(
                "SELECT ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d FROM order_line "
                "WHERE ol_o_id = %s AND ol_d_id = %s AND ol_w_id = %s",
                (order[0], d, w),
            )
            cur.fetchall()

    return body


def delivery(cur, scale, rnd, w):
    carrier = rnd.uniform(1, 10)
    when = datetime.datetime.now()

    def body():
        for d in range(1, DISTRICTS + 1):
            cur.execute(
                "SELECT no_o_id FROM new_order WHERE no_d_id = %s AND no_w_id = %s ORDER BY no_o_id ASC LIMIT 1",
                (d, w),
            )
            row = cur.fetchone()
            if row is None:
                continue  # clause 2.7.4.2: no undelivered order in this district
            o_id = row[0]
            cur.execute("DELETE FROM new_order WHERE no_o_id = %s AND no_d_id = %s AND no_w_id = %s", (o_id, d, w))
            if cur.rowcount != 1:
                continue  # another Delivery took it first (BenchBase skips the district too)
            cur.execute("SELECT o_c_id FROM orders WHERE o_id = %s AND o_d_id = %s AND o_w_id = %s", (o_id, d, w))
            c_id = cur.fetchone()[0]
            cur.execute("UPDATE orders SET o_carrier_id = %s WHERE o_id = %s AND o_d_id = %s AND o_w_id = %s", (carrier, o_id, d, w))
            cur.execute(
                "UPDATE order_line SET ol_delivery_d = %s WHERE ol_o_id = %s AND ol_d_id = %s AND ol_w_id = %s",
                (when, o_id, d, w),
            )
            cur.execute(
                "SELECT SUM(ol_amount) AS ol_total FROM order_line WHERE ol_o_id = %s AND ol_d_id = %s AND ol_w_id = %s",
                (o_id, d, w),
            )
            total = cur.fetchone()[0]
            cur.execute(
                "UPDATE customer SET c_balance = c_balance + %s, c_delivery_cnt = c_delivery_cnt + 1 "
                "WHERE c_w_id = %s AND c_d_id = %s AND c_id = %s",
                (total, w, d, c_id),
            )

    return body


def stock_level(cur, scale, rnd, w, d):
    threshold = rnd.uniform(10, 20)

    def body():
        cur.execute("SELECT d_next_o_id FROM district WHERE d_w_id = %s AND d_id = %s", (w, d))
        next_o = cur.fetchone()[0]
        cur.execute(
            "SELECT COUNT(DISTINCT (s_i_id)) AS stock_count FROM order_line, stock "
            "WHERE ol_w_id = %s AND ol_d_id = %s AND ol_o_id < %s AND ol_o_id >= %s "
            "AND s_w_id = %s AND s_i_id = ol_i_id AND s_quantity < %s",
            (w, d, next_o, next_o - 20, w, threshold),
        )
        cur.fetchone()

    return body


def terminal(args, number, deadline, results):
    """One terminal: its home warehouse and Stock-Level district, transactions back to back
    until `deadline`; puts its counters on `results`."""
    counts = {t: {"commits": 0, "rollbacks": 0, "retries": 0, "errors": 0, "latency_s": 0.0} for t in TYPES}
    messages = []
    try:
        conn = connect(args.dsn)
        if args.isolation:
            conn.set_session(isolation_level=args.isolation.upper())
        cur = conn.cursor()
        scale = Scale.read(cur)
        conn.rollback()
        rnd = Rand(args.seed * 1000 + number)
        w = number % scale.warehouses + 1
        sl_d = (number // scale.warehouses) % DISTRICTS + 1
        while time.time() < deadline:
            kind = rnd.r.choices(TYPES, weights=MIX)[0]
            if kind == "new_order":
                body = new_order(cur, scale, rnd, w)
            elif kind == "payment":
                body = payment(cur, scale, rnd, w)
            elif kind == "order_status":
                body = order_status(cur, scale, rnd, w)
            elif kind == "delivery":
                body = delivery(cur, scale, rnd, w)
            else:
                body = stock_level(cur, scale, rnd, w, sl_d)
            c = counts[kind]
            started = time.time()
            while True:
                try:
                    body()
                    conn.commit()
                    c["commits"] += 1
                    break
                except Abort:
                    conn.rollback()
                    c["rollbacks"] += 1
                    break
                except psycopg2.Error as e:
                    conn.rollback()
                    if e.pgcode in RETRY_CODES:
                        c["retries"] += 1
                        continue
                    c["errors"] += 1
                    if len(messages) < 5:
                        messages.append(f"{kind}: {e.pgcode} {str(e).strip()}")
                    break
                except Exception as e:  # noqa: BLE001 - a wrong answer is an error of the run
                    conn.rollback()
                    c["errors"] += 1
                    if len(messages) < 5:
                        messages.append(f"{kind}: {e!r}")
                    break
            c["latency_s"] += time.time() - started
        conn.close()
    except Exception as e:  # noqa: BLE001 - reported, the run fails
        messages.append(f"terminal {number}: {e!r}")
        counts["new_order"]["errors"] += 1
    results.put((counts, messages))


def run(args):
    start = time.time() + 0.5
    deadline = start + args.seconds
    results = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=terminal, args=(args, t, deadline, results)) for t in range(args.terminals)]
    for p in procs:
        p.start()
    gathered = [results.get() for _ in procs]
    for p in procs:
        p.join()
    elapsed = max(time.time() - start, 1e-9)
    total = {t: {"commits": 0, "rollbacks": 0, "retries": 0, "errors": 0, "latency_s": 0.0} for t in TYPES}
    messages = []
    for counts, msgs in gathered:
        messages += msgs
        for t in TYPES:
            for k in total[t]:
                total[t][k] += counts[t][k]
    print(f"{'transaction':<13} {'commits':>8} {'rollbacks':>9} {'retries':>8} {'errors':>7} {'mean ms':>8}")
    for t in TYPES:
        c = total[t]
        done = c["commits"] + c["rollbacks"] + c["errors"]
        mean = 1000 * c["latency_s"] / done if done else 0.0
        print(f"{t:<13} {c['commits']:>8} {c['rollbacks']:>9} {c['retries']:>8} {c['errors']:>7} {mean:>8.2f}")
    commits = sum(total[t]["commits"] for t in TYPES)
    errors = sum(total[t]["errors"] for t in TYPES)
    retries = sum(total[t]["retries"] for t in TYPES)
    tpmc = total["new_order"]["commits"] * 60 / elapsed
    print(f"{args.terminals} terminals, {elapsed:.1f} s: tpmC {tpmc:.0f}, {commits / elapsed:.1f} transactions/s, {retries} retries, {errors} errors")
    for m in messages:
        print("error:", m)
    summary = {
        "seconds": elapsed,
        "terminals": args.terminals,
        "tpmc": tpmc,
        "tps": commits / elapsed,
        "retries": retries,
        "errors": errors,
        "types": total,
    }
    print("RESULT " + json.dumps(summary))
    sys.exit(1 if errors else 0)


def check(args):
    """Consistency conditions 1-4 of clause 3.3.2, per warehouse and district."""
    conn = connect(args.dsn)
    cur = conn.cursor()

    def grouped(sql):
        cur.execute(sql)
        return {tuple(r[:-1]) if len(r) > 2 else r[0]: r[-1] for r in cur.fetchall()}

    failures = []
    w_ytd = grouped("SELECT w_id, w_ytd FROM warehouse")
    d_ytd = grouped("SELECT d_w_id, sum(d_ytd) FROM district GROUP BY d_w_id")
    for w, ytd in sorted(w_ytd.items()):
        if d_ytd.get(w) != ytd:
            failures.append(f"condition 1: warehouse {w}: w_ytd {ytd} != sum(d_ytd) {d_ytd.get(w)}")
    cur.execute("SELECT d_w_id, d_id, d_next_o_id FROM district")
    next_o = {(w, d): n for w, d, n in cur.fetchall()}
    max_o = grouped("SELECT o_w_id, o_d_id, max(o_id) FROM orders GROUP BY o_w_id, o_d_id")
    cur.execute("SELECT no_w_id, no_d_id, max(no_o_id), min(no_o_id), count(*) FROM new_order GROUP BY no_w_id, no_d_id")
    new = {(w, d): (mx, mn, n) for w, d, mx, mn, n in cur.fetchall()}
    ol_cnt = grouped("SELECT o_w_id, o_d_id, sum(o_ol_cnt) FROM orders GROUP BY o_w_id, o_d_id")
    lines = grouped("SELECT ol_w_id, ol_d_id, count(*) FROM order_line GROUP BY ol_w_id, ol_d_id")
    for key in sorted(next_o):
        n = next_o[key]
        if max_o.get(key) != n - 1 or (key in new and new[key][0] != n - 1):
            failures.append(
                f"condition 2: district {key}: d_next_o_id - 1 = {n - 1}, max(o_id) = {max_o.get(key)}, "
                f"max(no_o_id) = {new.get(key, (None,))[0]}"
            )
        if key in new:
            mx, mn, count = new[key]
            if mx - mn + 1 != count:
                failures.append(f"condition 3: district {key}: max(no_o_id) - min(no_o_id) + 1 = {mx - mn + 1}, rows = {count}")
        if ol_cnt.get(key) != lines.get(key):
            failures.append(f"condition 4: district {key}: sum(o_ol_cnt) = {ol_cnt.get(key)}, order_line rows = {lines.get(key)}")
    conn.rollback()
    for c in range(1, 5):
        bad = [f for f in failures if f.startswith(f"condition {c}:")]
        print(f"condition {c}: {'FAILED' if bad else 'ok'}")
        for f in bad[:10]:
            print("  " + f)
    if failures:
        sys.exit(1)
    print("consistent")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dsn", required=True, help="libpq connection string, e.g. 'host=127.0.0.1 port=5432 dbname=tpcc'")
    p.add_argument("--seed", type=int, default=1)
    sub = p.add_subparsers(dest="command", required=True)
    pl = sub.add_parser("load", help="create the tables and load W warehouses")
    pl.add_argument("warehouses", type=int)
    pl.add_argument("--items", type=int, default=FULL_ITEMS)
    pl.add_argument("--customers", type=int, default=FULL_CUSTOMERS, help="customers (and orders) per district")
    pr = sub.add_parser("run", help="run the mix")
    pr.add_argument("--seconds", type=float, required=True)
    pr.add_argument("--terminals", type=int, required=True)
    pr.add_argument("--isolation", help="e.g. 'serializable'; the server's default when absent")
    sub.add_parser("check", help="consistency conditions 1-4")
    args = p.parse_args()
    if args.command == "load":
        if args.items < 1 or args.customers < 10 or args.warehouses < 1:
            sys.exit("tpcc: need at least 1 warehouse, 1 item and 10 customers per district")
        load(args)
    elif args.command == "run":
        run(args)
    else:
        check(args)


if __name__ == "__main__":
    main()
