//! The catalog rows of a table's constraints: `pg_constraint` (its primary key and foreign
//! keys, with `conkey` / `confkey` as arrays of attribute numbers), `table_constraints`,
//! `key_column_usage`, and the definitions `pg_get_constraintdef` returns.
//!
//! Invariants: a primary key's constraint shares its index's oid (`conindid` is that index);
//! a foreign key's oid is [`fk_constraint_oid`], its `confrelid` the parent's oid and its
//! `conindid` the parent's index on the referenced columns; a definition is kept under the
//! negated constraint oid (an index's under its own), so the two never collide.

use super::{
    attnum, b, column_list, ints, n, pk_constraint_oid, rel_oid, t, IndexView, Rows, NULL, PUBLIC_OID,
};
use crate::catalog::TableInfo;
use crate::constraint::ForeignKey;
use crate::session::Engine;

/// The oid of foreign key `k` of table `id` (counted down from the top of the table's oids).
pub fn fk_constraint_oid(id: u32, k: usize) -> i64 {
    rel_oid(id) + super::OIDS_PER_TABLE - 1 - k as i64
}

/// A `pg_constraint` row.
#[allow(clippy::too_many_arguments)]
fn row(
    oid: i64,
    name: &str,
    kind: &str,
    rel: i64,
    index: i64,
    parent: i64,
    actions: [&str; 2],
    keys: [&[i64]; 2],
) -> Vec<nvmedb::Value> {
    vec![
        n(oid),
        t(name),
        n(PUBLIC_OID),
        t(kind),
        b(false),
        b(false),
        b(true),
        n(rel),
        n(0),
        n(index),
        n(0),
        n(parent),
        t(actions[0]),
        t(actions[1]),
        t(if kind == "f" { "s" } else { " " }),
        b(true),
        n(0),
        b(true),
        ints(keys[0]),
        if keys[1].is_empty() { NULL } else { ints(keys[1]) },
        NULL,
    ]
}

/// The rows of `info`'s constraints (`indexes`: its indexes as the views show them; `of`:
/// the engine whose catalog holds the parents of its foreign keys; `db`: the database name).
pub(super) fn rows(r: &mut Rows, info: &TableInfo, indexes: &[IndexView], of: &Engine, db: &str) {
    let oid = rel_oid(info.table.id());
    let usage = |r: &mut Rows, con: &str, kind: &str, cols: &[String]| {
        r.push(
            "table_constraints",
            vec![
                t(db),
                t("public"),
                t(con),
                t(db),
                t("public"),
                t(&info.name),
                t(kind),
                t("NO"),
                t("NO"),
                t("YES"),
                NULL,
            ],
        );
        for (k, c) in cols.iter().enumerate() {
            r.push(
                "key_column_usage",
                vec![
                    t(db),
                    t("public"),
                    t(con),
                    t(db),
                    t("public"),
                    t(&info.name),
                    t(c),
                    n(k as i64 + 1),
                    NULL,
                ],
            );
        }
    };
    if let Some(ix) = indexes.iter().find(|ix| ix.primary) {
        let con = pk_constraint_oid(info.table.id());
        debug_assert_eq!(con, ix.oid, "a primary key's constraint shares its index's oid");
        let keys: Vec<i64> = ix.columns.iter().map(|&c| attnum(info, c)).collect();
        r.push("pg_constraint", row(con, &ix.name, "p", oid, ix.oid, 0, [" ", " "], [&keys, &[]]));
        let names: Vec<String> = ix.columns.iter().map(|&c| info.columns[c].name.clone()).collect();
        usage(r, &ix.name, "PRIMARY KEY", &names);
        r.push(
            "nvmedb_catalog_defs",
            vec![n(-con), t(&format!("PRIMARY KEY ({})", column_list(info, &ix.columns)))],
        );
    }
    for (k, fk) in info.meta.fks.iter().enumerate() {
        let con = fk_constraint_oid(info.table.id(), k);
        let keys: Vec<i64> = info
            .fk_columns
            .get(k)
            .map(|cols| cols.iter().map(|&c| attnum(info, c)).collect())
            .unwrap_or_default();
        let (parent, pkeys, pindex) = parent_of(of, fk);
        let actions = [fk.on_update.pg_code(), fk.on_delete.pg_code()];
        r.push("pg_constraint", row(con, &fk.name, "f", oid, pindex, parent, actions, [&keys, &pkeys]));
        usage(r, &fk.name, "FOREIGN KEY", &fk.columns);
        r.push("nvmedb_catalog_defs", vec![n(-con), t(&fk.sql())]);
    }
}

/// The parent of foreign key `fk`: its oid, the attribute numbers of the referenced columns,
/// and the oid of its index on them (0 for what the catalog no longer has).
fn parent_of(of: &Engine, fk: &ForeignKey) -> (i64, Vec<i64>, i64) {
    let Ok(p) = of.catalog.get(&fk.parent) else { return (0, vec![], 0) };
    let cols: Vec<usize> =
        fk.parent_columns.iter().filter_map(|c| p.visible().find(|&i| p.columns[i].name == *c)).collect();
    let index =
        super::indexes_of(&p).into_iter().find(|ix| ix.unique && ix.columns == cols).map_or(0, |ix| ix.oid);
    (rel_oid(p.table.id()), cols.iter().map(|&c| attnum(&p, c)).collect(), index)
}
