// pgjdbc against nvmedb: prepared statements (also past prepareThreshold, when the driver
// switches to named server-side statements), batch inserts, a transaction rolled back, and
// DatabaseMetaData's getTables, getColumns, getPrimaryKeys, getIndexInfo and getImportedKeys.
// Usage:
// java -cp postgresql.jar Jdbc.java <jdbc url>. Prints `ok` at the end; a failure throws.
import java.sql.*;
import java.util.*;

public class Jdbc {
    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    public static void main(String[] args) throws Exception {
        try (Connection c = DriverManager.getConnection(args[0])) {
            try (Statement s = c.createStatement()) {
                s.execute("DROP TABLE IF EXISTS j_lines");
                s.execute("DROP TABLE IF EXISTS j_items");
                s.execute("CREATE TABLE j_items (id int, k int, name varchar(20) NOT NULL, price numeric(8,2), PRIMARY KEY (id, k))");
                s.execute("CREATE INDEX j_items_price ON j_items (price)");
                s.execute("CREATE TABLE j_lines (n int PRIMARY KEY, item int, item_k int, CONSTRAINT j_lines_item_fk FOREIGN KEY (item, item_k) REFERENCES j_items (id, k))");
            }
            c.setAutoCommit(false);
            try (PreparedStatement p = c.prepareStatement("INSERT INTO j_items VALUES (?, ?, ?, ?)")) {
                for (int i = 1; i <= 20; i++) {
                    p.setInt(1, i);
                    p.setInt(2, i % 3);
                    p.setString(3, "n" + i);
                    p.setBigDecimal(4, new java.math.BigDecimal(i + ".25"));
                    p.addBatch();
                }
                int[] counts = p.executeBatch();
                check(counts.length == 20, "batch counts " + Arrays.toString(counts));
            }
            c.commit();
            try (PreparedStatement p = c.prepareStatement("SELECT name, price FROM j_items WHERE id = ?")) {
                for (int i = 1; i <= 8; i++) {
                    p.setInt(1, i);
                    try (ResultSet r = p.executeQuery()) {
                        check(r.next(), "row " + i);
                        check(r.getString(1).equals("n" + i), "name " + i);
                        check(r.getBigDecimal(2).compareTo(new java.math.BigDecimal(i + ".25")) == 0, "price " + i);
                    }
                }
            }
            try (Statement s = c.createStatement()) {
                s.executeUpdate("UPDATE j_items SET name = 'gone' WHERE id <= 5");
                c.rollback();
                try (ResultSet r = s.executeQuery("SELECT count(*) FROM j_items WHERE name = 'gone'")) {
                    r.next();
                    check(r.getInt(1) == 0, "the rolled-back update is visible");
                }
            }
            c.commit();
            c.setAutoCommit(true);
            DatabaseMetaData md = c.getMetaData();
            List<String> tables = new ArrayList<>();
            try (ResultSet r = md.getTables(null, "public", "j_%", new String[] {"TABLE"})) {
                while (r.next()) tables.add(r.getString("TABLE_NAME"));
            }
            check(tables.equals(List.of("j_items", "j_lines")), "getTables " + tables);
            List<String> cols = new ArrayList<>();
            try (ResultSet r = md.getColumns(null, "public", "j_items", "%")) {
                while (r.next()) cols.add(r.getString("COLUMN_NAME") + ":" + r.getString("TYPE_NAME") + ":" + r.getInt("NULLABLE"));
            }
            check(cols.equals(List.of("id:int4:0", "k:int4:0", "name:varchar:0", "price:numeric:1")), "getColumns " + cols);
            List<String> pk = new ArrayList<>();
            try (ResultSet r = md.getPrimaryKeys(null, "public", "j_items")) {
                while (r.next()) pk.add(r.getString("COLUMN_NAME") + ":" + r.getInt("KEY_SEQ") + ":" + r.getString("PK_NAME"));
            }
            check(pk.equals(List.of("id:1:j_items_pkey", "k:2:j_items_pkey")), "getPrimaryKeys " + pk);
            List<String> ix = new ArrayList<>();
            try (ResultSet r = md.getIndexInfo(null, "public", "j_items", false, false)) {
                while (r.next()) {
                    ix.add(r.getString("INDEX_NAME") + ":" + r.getString("COLUMN_NAME") + ":" + r.getInt("ORDINAL_POSITION") + ":" + r.getBoolean("NON_UNIQUE"));
                }
            }
            check(ix.equals(List.of("j_items_pkey:id:1:false", "j_items_pkey:k:2:false", "j_items_price:price:1:true")), "getIndexInfo " + ix);
            List<String> unique = new ArrayList<>();
            try (ResultSet r = md.getIndexInfo(null, "public", "j_items", true, false)) {
                while (r.next()) unique.add(r.getString("INDEX_NAME") + ":" + r.getString("COLUMN_NAME"));
            }
            check(unique.equals(List.of("j_items_pkey:id", "j_items_pkey:k")), "getIndexInfo unique " + unique);
            List<String> fk = new ArrayList<>();
            try (ResultSet r = md.getImportedKeys(null, "public", "j_lines")) {
                while (r.next()) {
                    fk.add(r.getString("PKTABLE_NAME") + "." + r.getString("PKCOLUMN_NAME") + "<-" + r.getString("FKCOLUMN_NAME") + ":" + r.getInt("KEY_SEQ") + ":" + r.getString("FK_NAME") + ":" + r.getString("PK_NAME"));
                }
            }
            check(fk.equals(List.of("j_items.id<-item:1:j_lines_item_fk:j_items_pkey", "j_items.k<-item_k:2:j_lines_item_fk:j_items_pkey")), "getImportedKeys " + fk);
            try (Statement s = c.createStatement()) {
                s.execute("DROP TABLE j_lines");
                s.execute("DROP TABLE j_items");
            }
        }
        System.out.println("ok");
    }
}
