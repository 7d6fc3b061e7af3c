//! ALTER TABLE … RENAME TO, made crash-safe out of steps the engine has (it names tables in
//! its catalog and has no rename): copy the table under the new name, then drop the old one.
//!
//! Owns: the order of the steps and their completion when a crash interrupted them. The steps:
//! (1) the new name's metadata row is written with the old table's metadata and the mark
//! `renamed_from` = the old name; (2) the rows are copied into a table of the new name by one
//! bulk load (the engine names it only once all rows are in: [`nvmedb::Database::load_table`]);
//! then [`finish`]: (3) the sequences the old table owns and the foreign keys that reference
//! it move to the new name, (4) the old table is dropped, (5) the old name's metadata row is
//! deleted and (6) the mark removed. Invariant: once the new table exists (after step 2) the
//! rename is done, whatever else a crash left, and each step of [`finish`] can run again;
//! opening ([`finish_at_open`]) finishes a rename whose mark it finds with its new table
//! present. Before step 2 the mark names a table that does not exist and is ignored (the old
//! table is whole).

use crate::error::{SqlError, SqlResult};
use crate::meta::MetaStore;
use crate::sequence::Sequences;
use nvmedb::Database;

/// Steps 3 to 6 of renaming table `old` to `new` (see the module documentation); every step
/// is durable when it returns and may run again.
pub fn finish(db: &Database, meta: &MetaStore, seqs: &Sequences, old: &str, new: &str) -> SqlResult<()> {
    for s in seqs.owned_by(old) {
        seqs.set_owner(&s, new)?;
    }
    for name in meta.names() {
        if name == old {
            continue;
        }
        let mut m = meta.get(&name);
        let mut changed = false;
        for fk in &mut m.fks {
            if fk.parent == old {
                fk.parent = new.to_string();
                changed = true;
            }
        }
        if changed {
            meta.set(&name, m)?;
        }
    }
    if db.table_names().iter().any(|n| n == old) {
        db.drop_table(old).map_err(|e| SqlError::from_engine(e, Some(old)))?;
    }
    meta.set(old, crate::meta::TableMeta::default())?;
    let mut m = meta.get(new);
    m.renamed_from = None;
    meta.set(new, m)
}

/// At open, before the tables are read: finishes every rename whose new table exists (its
/// copy is whole). Returns the old names of the renames it could not finish (a read-only
/// standby cannot write): the catalog hides those tables, whose rows live on under the new
/// name.
pub fn finish_at_open(db: &Database, meta: &MetaStore, seqs: &Sequences) -> Vec<String> {
    let tables = db.table_names();
    let mut hidden = Vec::new();
    for new in meta.names() {
        let Some(old) = meta.get(&new).renamed_from else { continue };
        if !tables.contains(&new) {
            continue;
        }
        if let Err(e) = finish(db, meta, seqs, &old, &new) {
            eprintln!("nvmedb: finishing the rename of table \"{old}\" to \"{new}\": {e}");
            hidden.push(old);
        }
    }
    hidden
}
