// pgx v5 against nvmedb: a query, a prepared statement, a transaction rolled back and one
// committed, and CopyFrom (COPY … FROM STDIN in the binary format). Usage: go run . <url>.
// Prints `ok` at the end; a failure exits non-zero naming what differed.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
)

func check(ok bool, format string, args ...any) {
	if !ok {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		os.Exit(1)
	}
}

func must(err error, what string) {
	check(err == nil, "%s: %v", what, err)
}

func main() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Args[1])
	must(err, "connect")
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP TABLE IF EXISTS gx_items")
	must(err, "drop")
	_, err = conn.Exec(ctx, "CREATE TABLE gx_items (id bigint PRIMARY KEY, name text NOT NULL, qty integer, price double precision)")
	must(err, "create")
	n, err := conn.CopyFrom(ctx, pgx.Identifier{"gx_items"}, []string{"id", "name", "qty", "price"},
		pgx.CopyFromSlice(100, func(i int) ([]any, error) {
			var qty any = int32(i * 2)
			if i%10 == 0 {
				qty = nil
			}
			return []any{int64(i + 1), fmt.Sprintf("n%d", i+1), qty, float64(i) / 4}, nil
		}))
	must(err, "CopyFrom")
	check(n == 100, "CopyFrom copied %d rows", n)
	var count, sum int64
	must(conn.QueryRow(ctx, "SELECT count(*), sum(qty) FROM gx_items").Scan(&count, &sum), "query")
	check(count == 100, "count %d", count)
	want := int64(0)
	for i := 0; i < 100; i++ {
		if i%10 != 0 {
			want += int64(i * 2)
		}
	}
	check(sum == want, "sum %d, want %d", sum, want)
	_, err = conn.Prepare(ctx, "by_id", "SELECT name, price FROM gx_items WHERE id = $1")
	must(err, "prepare")
	for _, id := range []int64{1, 50, 100} {
		var name string
		var price float64
		must(conn.QueryRow(ctx, "by_id", id).Scan(&name, &price), "prepared query")
		check(name == fmt.Sprintf("n%d", id) && price == float64(id-1)/4, "row %d: %s %v", id, name, price)
	}
	tx, err := conn.Begin(ctx)
	must(err, "begin")
	_, err = tx.Exec(ctx, "UPDATE gx_items SET name = 'gone' WHERE id <= $1", 10)
	must(err, "update")
	must(tx.Rollback(ctx), "rollback")
	must(conn.QueryRow(ctx, "SELECT count(*) FROM gx_items WHERE name = 'gone'").Scan(&count), "after rollback")
	check(count == 0, "the rolled-back update is visible: %d rows", count)
	tx, err = conn.Begin(ctx)
	must(err, "begin")
	_, err = tx.Exec(ctx, "DELETE FROM gx_items WHERE id > $1", 90)
	must(err, "delete")
	must(tx.Commit(ctx), "commit")
	rows, err := conn.Query(ctx, "SELECT id FROM gx_items WHERE id > $1 ORDER BY id", 85)
	must(err, "query rows")
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	must(err, "collect")
	check(fmt.Sprint(ids) == "[86 87 88 89 90]", "ids %v", ids)
	_, err = conn.Exec(ctx, "DROP TABLE gx_items")
	must(err, "drop")
	fmt.Println("ok")
}
