//! FOREIGN KEY and CHECK constraints as the catalog keeps them.
//!
//! Owns: [`ForeignKey`] and [`FkAction`] (a child table's reference to a unique key of a
//! parent table, and what a change of the parent's key does to the children), [`Check`] (a
//! boolean expression every row must not make false), and their lines in the table's
//! metadata text (see [`crate::meta::TableMeta`]). Both live in the *child's* metadata row,
//! written durably in one transaction, so a constraint is either wholly there or absent after
//! a crash. Invariant: a definition names columns by name; the catalog resolves them when it
//! opens a table and refuses metadata naming a column that does not exist.

use crate::error::{code, SqlError, SqlResult};

/// What a DELETE of a parent row, or an UPDATE of its referenced key, does to the rows that
/// reference it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FkAction {
    /// Refuse the change while a row references the key (PostgreSQL checks NO ACTION at the
    /// end of the statement; nvmedb checks it as each parent row changes, like RESTRICT).
    NoAction,
    /// Refuse the change while a row references the key.
    Restrict,
    /// Delete the referencing rows (ON DELETE), or give them the new key (ON UPDATE).
    Cascade,
    /// Set the referencing columns to NULL.
    SetNull,
}

impl FkAction {
    /// The SQL words.
    pub fn sql(self) -> &'static str {
        match self {
            FkAction::NoAction => "NO ACTION",
            FkAction::Restrict => "RESTRICT",
            FkAction::Cascade => "CASCADE",
            FkAction::SetNull => "SET NULL",
        }
    }

    /// The one-letter code of `pg_constraint.confdeltype`.
    pub fn pg_code(self) -> &'static str {
        match self {
            FkAction::NoAction => "a",
            FkAction::Restrict => "r",
            FkAction::Cascade => "c",
            FkAction::SetNull => "n",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "a" => FkAction::NoAction,
            "r" => FkAction::Restrict,
            "c" => FkAction::Cascade,
            "n" => FkAction::SetNull,
            _ => return None,
        })
    }
}

/// A FOREIGN KEY of a child table (MATCH SIMPLE: a row with a NULL in one of its columns
/// references nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignKey {
    /// Constraint name.
    pub name: String,
    /// The child's columns, in key order.
    pub columns: Vec<String>,
    /// The parent table.
    pub parent: String,
    /// The parent's columns (a primary key or unique constraint), matching `columns`.
    pub parent_columns: Vec<String>,
    /// ON DELETE.
    pub on_delete: FkAction,
    /// ON UPDATE.
    pub on_update: FkAction,
}

impl ForeignKey {
    /// PostgreSQL's text of the constraint (`pg_get_constraintdef`).
    pub fn sql(&self) -> String {
        let mut s = format!(
            "FOREIGN KEY ({}) REFERENCES {}({})",
            self.columns.join(", "),
            self.parent,
            self.parent_columns.join(", ")
        );
        if self.on_update != FkAction::NoAction {
            s.push_str(&format!(" ON UPDATE {}", self.on_update.sql()));
        }
        if self.on_delete != FkAction::NoAction {
            s.push_str(&format!(" ON DELETE {}", self.on_delete.sql()));
        }
        s
    }
}

/// A CHECK constraint: the row is refused (23514) when `expr` is false (NULL passes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Constraint name.
    pub name: String,
    /// The expression, as SQL text over the table's column names.
    pub expr: String,
}

/// The metadata line of a foreign key (fields already escaped by `esc`).
pub(crate) fn fk_line(fk: &ForeignKey, esc: &dyn Fn(&str) -> String) -> String {
    let mut f = vec![
        "fk".to_string(),
        esc(&fk.name),
        esc(&fk.parent),
        fk.on_delete.pg_code().into(),
        fk.on_update.pg_code().into(),
        fk.columns.len().to_string(),
    ];
    f.extend(fk.columns.iter().map(|c| esc(c)));
    f.extend(fk.parent_columns.iter().map(|c| esc(c)));
    f.join("\t") + "\n"
}

/// Parses the unescaped fields of an `fk` line (after the word `fk`).
pub(crate) fn parse_fk(f: &[String]) -> Option<ForeignKey> {
    let [name, parent, del, upd, n, rest @ ..] = f else { return None };
    let n: usize = n.parse().ok()?;
    if n == 0 || rest.len() != 2 * n {
        return None;
    }
    Some(ForeignKey {
        name: name.clone(),
        parent: parent.clone(),
        on_delete: FkAction::parse(del)?,
        on_update: FkAction::parse(upd)?,
        columns: rest[..n].to_vec(),
        parent_columns: rest[n..].to_vec(),
    })
}

/// The action of an `ON DELETE` / `ON UPDATE` clause (NO ACTION when absent).
pub(crate) fn action_of(a: &Option<sqlparser::ast::ReferentialAction>) -> SqlResult<FkAction> {
    use sqlparser::ast::ReferentialAction as R;
    Ok(match a {
        None | Some(R::NoAction) => FkAction::NoAction,
        Some(R::Restrict) => FkAction::Restrict,
        Some(R::Cascade) => FkAction::Cascade,
        Some(R::SetNull) => FkAction::SetNull,
        Some(R::SetDefault) => {
            return Err(SqlError::unsupported("ON DELETE/UPDATE SET DEFAULT of a foreign key"))
        }
    })
}

/// PostgreSQL's error for a child row whose key has no parent row.
pub(crate) fn missing_parent(child: &str, fk: &ForeignKey, key: &str) -> SqlError {
    SqlError::new(
        code::FOREIGN_KEY_VIOLATION,
        format!(
            "insert or update on table \"{child}\" violates foreign key constraint \"{}\": key {key} is not present in table \"{}\"",
            fk.name, fk.parent
        ),
    )
    .with_detail(format!("Key {key} is not present in table \"{}\".", fk.parent))
    .with_table(child)
}

/// PostgreSQL's error for a parent row changed or deleted while a child references it.
pub(crate) fn still_referenced(parent: &str, child: &str, fk: &ForeignKey, key: &str) -> SqlError {
    SqlError::new(
        code::FOREIGN_KEY_VIOLATION,
        format!(
            "update or delete on table \"{parent}\" violates foreign key constraint \"{}\" on table \"{child}\": key {key} is still referenced",
            fk.name
        ),
    )
    .with_detail(format!("Key {key} is still referenced from table \"{child}\"."))
    .with_table(parent)
}

/// PostgreSQL's error for a row a CHECK constraint is false for.
pub(crate) fn check_failed(table: &str, name: &str) -> SqlError {
    SqlError::new(
        code::CHECK_VIOLATION,
        format!("new row for relation \"{table}\" violates check constraint \"{name}\""),
    )
    .with_table(table)
}
