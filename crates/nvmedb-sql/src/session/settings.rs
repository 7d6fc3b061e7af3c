//! Session settings: every setting SHOW knows, its default, whether SET may change it (values
//! nvmedb cannot honour are refused, not recorded and ignored), and how a session's value is
//! looked up (its own SET, then the server's, then the default).

use super::{Engine, Outcome, Session};
use crate::error::{code, SqlError, SqlResult};
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// Whether SET may change a setting, and to what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Settable {
    /// Any value (it only changes what SHOW reports, or nvmedb reads it: `work_mem`).
    Any,
    /// Only the listed values (case-insensitive); others are 0A000: nvmedb cannot honour them.
    Only(&'static [&'static str]),
    /// Never (55P02): it describes the server.
    Fixed,
}

/// Every setting SHOW knows: name, default, and whether SET may change it. Values nvmedb
/// cannot honour are refused rather than recorded and ignored.
pub(super) const SETTINGS: &[(&str, &str, Settable)] = &[
    ("application_name", "", Settable::Any),
    ("block_size", "8192", Settable::Fixed),
    ("bytea_output", "hex", Settable::Only(&["hex"])),
    ("client_encoding", "UTF8", Settable::Only(&["utf8", "utf-8", "unicode"])),
    ("client_min_messages", "notice", Settable::Any),
    ("datestyle", "ISO, MDY", Settable::Only(&["iso, mdy", "iso", "iso,mdy", "mdy, iso"])),
    ("default_table_access_method", "heap", Settable::Only(&["heap"])),
    ("default_transaction_isolation", "read committed", Settable::Any),
    ("default_transaction_read_only", "off", Settable::Only(&["off", "false", "0"])),
    ("extra_float_digits", "1", Settable::Any),
    ("fsync", "on", Settable::Fixed),
    ("idle_in_transaction_session_timeout", "0", Settable::Only(&["0"])),
    ("in_hot_standby", "off", Settable::Fixed),
    ("integer_datetimes", "on", Settable::Fixed),
    ("intervalstyle", "postgres", Settable::Only(&["postgres"])),
    ("is_superuser", "on", Settable::Fixed),
    ("lc_messages", "C", Settable::Any),
    ("lc_monetary", "C", Settable::Any),
    ("lc_numeric", "C", Settable::Any),
    ("lc_time", "C", Settable::Any),
    ("lock_timeout", "0", Settable::Only(&["0"])),
    ("max_identifier_length", "63", Settable::Fixed),
    ("max_index_keys", "32", Settable::Fixed),
    (
        "search_path",
        "\"$user\", public",
        Settable::Only(&["\"$user\", public", "$user, public", "public", "\"$user\",public", "$user,public"]),
    ),
    ("server_encoding", "UTF8", Settable::Fixed),
    ("server_version", "15.0", Settable::Fixed),
    ("server_version_num", "150000", Settable::Fixed),
    ("standard_conforming_strings", "on", Settable::Only(&["on", "true", "1"])),
    ("statement_timeout", "0", Settable::Any),
    (
        "synchronous_commit",
        "on",
        Settable::Only(&["on", "local", "remote_write", "remote_apply", "true", "1"]),
    ),
    ("timezone", "UTC", Settable::Any),
    ("transaction_isolation", "read committed", Settable::Any),
    ("transaction_read_only", "off", Settable::Only(&["off", "false", "0"])),
    ("work_mem", "4MB", Settable::Any),
];

fn default_setting(name: &str) -> Option<&'static str> {
    SETTINGS.iter().find(|(n, _, _)| *n == name).map(|(_, v, _)| *v)
}

/// Whether SET may change setting `name` at all (what `pg_settings.context` reports).
pub fn is_settable(name: &str) -> bool {
    SETTINGS.iter().find(|(n, _, _)| *n == name).is_none_or(|(_, _, s)| *s != Settable::Fixed)
}

/// Checks `SET name = value` (`None`: back to the default): a setting nvmedb does not know is
/// 42704 (names with a dot are custom settings, always accepted), one that describes the
/// server 55P02, a value nvmedb cannot honour 0A000, a malformed `work_mem` 22023.
fn check_set(name: &str, value: Option<&str>) -> SqlResult<()> {
    let Some((_, _, settable)) = SETTINGS.iter().find(|(n, _, _)| *n == name) else {
        if name.contains('.') {
            return Ok(());
        }
        return Err(SqlError::new(
            code::UNDEFINED_OBJECT,
            format!("unrecognized configuration parameter \"{name}\""),
        ));
    };
    let Some(v) = value else { return Ok(()) };
    let v = v.trim().trim_matches('\'');
    match settable {
        Settable::Fixed => Err(SqlError::new(
            code::CANT_CHANGE_RUNTIME_PARAM,
            format!("parameter \"{name}\" cannot be changed"),
        )),
        Settable::Only(allowed) if !allowed.iter().any(|a| a.eq_ignore_ascii_case(v)) => {
            let why = match name {
                "lock_timeout" | "idle_in_transaction_session_timeout" => {
                    "nvmedb does not enforce this timeout yet; only 0 (off) is accepted"
                }
                "synchronous_commit" => "every commit in nvmedb is durable before it is acknowledged",
                "default_transaction_read_only" | "transaction_read_only" => {
                    "read-only transactions are not supported"
                }
                "search_path" => "nvmedb has one schema, public",
                _ => "nvmedb supports only the values listed in pg_settings",
            };
            Err(SqlError::new(
                code::FEATURE_NOT_SUPPORTED,
                format!("invalid value for parameter \"{name}\": \"{v}\" ({why})"),
            ))
        }
        _ if name == "statement_timeout" && parse_timeout(v).is_none() => Err(SqlError::new(
            code::INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"statement_timeout\": \"{v}\""),
        )),
        _ if name == "work_mem" && parse_memory(v).is_none() => Err(SqlError::new(
            code::INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"work_mem\": \"{v}\""),
        )),
        _ => Ok(()),
    }
}

/// A setting's value for a session: its own SET, then the server's, then the default.
pub(super) fn lookup_setting(
    settings: &HashMap<String, String>,
    engine: &Engine,
    name: &str,
) -> Option<String> {
    let name = name.to_ascii_lowercase();
    if let Some(v) = settings.get(&name) {
        return Some(v.clone());
    }
    if name == "nvmedb.durable_lsn" {
        // The log's durable end: a standby that applied it holds every commit acknowledged
        // before (read-your-writes on a standby: `SET nvmedb.min_lsn` there).
        return engine.db.engine_log().map(|l| l.record_log().durable_lsn().to_string());
    }
    if let Some((_, v)) = engine.server_settings.iter().find(|(k, _)| *k == name) {
        return Some(v.clone());
    }
    default_setting(&name).map(str::to_string)
}

/// A memory setting's bytes (`4MB`, `64kB`, `1GB`; a bare number is kB, as in PostgreSQL).
pub(super) fn parse_memory(v: &str) -> Option<usize> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let n: usize = v[..split].parse().ok()?;
    let mult = match v[split..].trim().to_ascii_lowercase().as_str() {
        "" | "kb" => 1 << 10,
        "b" => 1,
        "mb" => 1 << 20,
        "gb" => 1 << 30,
        _ => return None,
    };
    Some(n.saturating_mul(mult).max(64 << 10))
}

/// A timeout setting's duration (`250`, `250ms`, `5s`, `1min`, `1h`, `1d`; a bare number is
/// milliseconds, as in PostgreSQL; 0 is off: `Some(None)`).
fn parse_timeout(v: &str) -> Option<Option<Duration>> {
    let v = v.trim().trim_matches('\'');
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let n: u64 = v[..split].parse().ok()?;
    let ms = match v[split..].trim().to_ascii_lowercase().as_str() {
        "" | "ms" => 1,
        "s" => 1000,
        "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    Some((n > 0).then(|| Duration::from_millis(n.saturating_mul(ms))))
}

impl Session {
    /// `SET name = value` (`None`: back to the default), checked by [`check_set`].
    pub(super) fn set(&mut self, name: &str, value: Option<&str>) -> SqlResult<Outcome> {
        check_set(name, value)?;
        match value {
            Some(v) => self.settings.insert(name.to_string(), v.to_string()),
            None => self.settings.remove(name),
        };
        if name == "statement_timeout" {
            self.statement_timeout = value.and_then(parse_timeout).flatten();
        }
        Ok(Outcome::Done("SET".into()))
    }

    /// The session with `flag` as its cancel flag: a CancelRequest naming the session sets it
    /// and the running statement stops with 57014 at its next check (see
    /// [`crate::exec::Interrupt`]).
    pub fn with_cancel(mut self, flag: Arc<AtomicBool>) -> Self {
        self.cancel = flag;
        self
    }
}
