//! Statement text: splitting a query string into statements, recognising the utility
//! statements sqlparser does not know (COPY … FROM STDIN with PostgreSQL's options, VACUUM,
//! CHECKPOINT) and the transaction keywords (a fast path that skips the parser), and parsing
//! the rest with sqlparser's PostgreSQL dialect.
//!
//! Owns: [`Parsed`] and [`split`]. Invariant: splitting respects quotes, dollar quotes and
//! comments, so a `;` inside a literal never ends a statement; a parse error is 42601 and
//! quotes the parser's message with its position.

use crate::error::{code, SqlError, SqlResult};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

/// `COPY table [(columns)] FROM STDIN [options]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopySpec {
    /// Table name.
    pub table: String,
    /// Column names (empty: all visible columns).
    pub columns: Vec<String>,
    /// Field delimiter.
    pub delimiter: u8,
    /// NULL marker.
    pub null: String,
    /// PostgreSQL's binary COPY format (`BINARY`, `FORMAT binary`) instead of text.
    pub binary: bool,
}

/// One statement of a query string.
#[derive(Debug, Clone)]
pub enum Parsed {
    /// Parsed by sqlparser.
    Sql(Box<sqlparser::ast::Statement>),
    /// COPY FROM STDIN.
    Copy(CopySpec),
    /// BEGIN / START TRANSACTION (without modes the fast path understands).
    Begin,
    /// COMMIT / END.
    Commit,
    /// ROLLBACK / ABORT.
    Rollback,
    /// CHECKPOINT.
    Checkpoint,
    /// VACUUM [ANALYZE] … (accepted; nvmedb reclaims space as it goes).
    Vacuum,
    /// SAVEPOINT, RELEASE [SAVEPOINT] or ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT].
    Savepoint(SavepointOp),
    /// DEALLOCATE [PREPARE] name (`None`: ALL).
    Deallocate(Option<String>),
    /// Only whitespace and comments.
    Empty,
}

/// A savepoint statement and the savepoint it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SavepointOp {
    /// SAVEPOINT name.
    Set(String),
    /// RELEASE [SAVEPOINT] name.
    Release(String),
    /// ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name.
    RollbackTo(String),
}

/// The savepoint statement `w` (its words, as [`words`] gives them), if it is one.
fn savepoint(w: &[String]) -> Option<SavepointOp> {
    let skip = |w: &[String], i: usize, opt: &[&str]| {
        if w.get(i).is_some_and(|x| opt.contains(&x.as_str())) {
            i + 1
        } else {
            i
        }
    };
    let name = |w: &[String], i: usize| (w.len() == i + 1).then(|| name_of(&w[i]));
    match w.first()?.as_str() {
        "savepoint" => name(w, 1).map(SavepointOp::Set),
        "release" => name(w, skip(w, 1, &["savepoint"])).map(SavepointOp::Release),
        "rollback" | "abort" => {
            let i = skip(w, 1, &["work", "transaction"]);
            if w.get(i).map(String::as_str) != Some("to") {
                return None;
            }
            name(w, skip(w, i + 1, &["savepoint"])).map(SavepointOp::RollbackTo)
        }
        _ => None,
    }
}

/// Splits `sql` into statements (each without its `;`), skipping empty ones.
pub fn split(sql: &str) -> Vec<&str> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\'' | b'"' => {
                let q = b[i];
                // E'...' strings escape with backslashes.
                let escaped = q == b'\'' && i > 0 && (b[i - 1] == b'E' || b[i - 1] == b'e');
                i += 1;
                while i < b.len() {
                    if escaped && b[i] == b'\\' {
                        i += 2;
                        continue;
                    }
                    if b[i] == q {
                        if b.get(i + 1) == Some(&q) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            b'$' => {
                // $tag$ ... $tag$ (but not $1 parameters)
                let tag_end = b[i + 1..].iter().position(|&c| !(c.is_ascii_alphanumeric() || c == b'_'));
                match tag_end {
                    Some(n) if b[i + 1 + n] == b'$' && !b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                        let tag = &sql[i..i + n + 2];
                        match sql[i + n + 2..].find(tag) {
                            Some(end) => i += n + 2 + end + tag.len(),
                            None => i = b.len(),
                        }
                    }
                    _ => i += 1,
                }
            }
            b';' => {
                out.push(&sql[start..i]);
                i += 1;
                start = i;
            }
            _ => i += 1,
        }
    }
    out.push(&sql[start..]);
    out.retain(|s| !is_blank(s));
    out
}

/// True if `s` holds only whitespace and comments.
pub fn is_blank(s: &str) -> bool {
    strip_comments(s).trim().is_empty()
}

fn strip_comments(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    loop {
        let l = rest.find("--");
        let c = rest.find("/*");
        match (l, c) {
            (Some(a), Some(b)) if a < b => {
                out.push_str(&rest[..a]);
                rest = rest[a..].find('\n').map_or("", |n| &rest[a + n..]);
            }
            (Some(a), None) => {
                out.push_str(&rest[..a]);
                rest = rest[a..].find('\n').map_or("", |n| &rest[a + n..]);
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                rest = rest[b..].find("*/").map_or("", |n| &rest[b + n + 2..]);
            }
            (None, None) => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

/// Words of a utility statement: identifiers, string literals (kept with their quotes) and
/// punctuation.
fn words(s: &str) -> SqlResult<Vec<String>> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'(' || c == b')' || c == b',' || c == b'=' {
            out.push((c as char).to_string());
            i += 1;
        } else if c == b'\'' || c == b'"' {
            let start = i;
            i += 1;
            let mut v = String::new();
            while i < b.len() {
                if b[i] == c {
                    if b.get(i + 1) == Some(&c) {
                        v.push(c as char);
                        i += 2;
                        continue;
                    }
                    break;
                }
                v.push(b[i] as char);
                i += 1;
            }
            if i >= b.len() {
                return Err(SqlError::syntax(format!("unterminated quoted string at position {start}")));
            }
            i += 1;
            // Quoted identifiers keep their case; string literals are marked with a quote.
            out.push(if c == b'"' { format!("\"{v}") } else { format!("'{v}") });
        } else {
            let start = i;
            while i < b.len() && !b[i].is_ascii_whitespace() && !b"(),='\"".contains(&b[i]) {
                i += 1;
            }
            out.push(s[start..i].to_lowercase());
        }
    }
    Ok(out)
}

fn name_of(w: &str) -> String {
    w.strip_prefix('"').map_or_else(|| w.to_string(), str::to_string)
}

/// COPY's `FORMAT v` or bare `BINARY` option: whether the format is binary.
fn copy_format(name: &str, value: Option<&str>) -> SqlResult<bool> {
    match (name, value) {
        ("format", Some("text")) => Ok(false),
        ("format", Some("binary")) | ("binary", None) => Ok(true),
        (_, v) => {
            Err(SqlError::unsupported(format!("COPY format {} (only text and binary)", v.unwrap_or(name))))
        }
    }
}

fn parse_copy(text: &str) -> SqlResult<CopySpec> {
    let w = words(text)?;
    let mut i = 1;
    let get = |i: usize| w.get(i).map(String::as_str).unwrap_or("");
    if get(i) == "(" {
        return Err(SqlError::unsupported("COPY (query) TO"));
    }
    let mut table = name_of(get(i));
    i += 1;
    if get(i) == "." {
        i += 1;
        table = name_of(get(i));
        i += 1;
    }
    if let Some((schema, t)) = table.split_once('.') {
        if schema != "public" {
            return Err(SqlError::unsupported(format!("COPY into {schema}.{t}")));
        }
        table = t.to_string();
    }
    let mut columns = Vec::new();
    if get(i) == "(" {
        i += 1;
        while get(i) != ")" {
            if get(i).is_empty() {
                return Err(SqlError::syntax("COPY column list is not closed"));
            }
            if get(i) != "," {
                columns.push(name_of(get(i)));
            }
            i += 1;
        }
        i += 1;
    }
    match (get(i), get(i + 1)) {
        ("from", "stdin") => i += 2,
        ("to", _) => return Err(SqlError::unsupported("COPY … TO")),
        ("from", f) => return Err(SqlError::unsupported(format!("COPY FROM {f} (only FROM STDIN)"))),
        (a, _) => return Err(SqlError::syntax(format!("syntax error at or near \"{a}\" in COPY"))),
    }
    let mut spec = CopySpec { table, columns, delimiter: b'\t', null: "\\N".into(), binary: false };
    if get(i) == "with" {
        i += 1;
    }
    let lit = |s: &str| -> SqlResult<String> {
        s.strip_prefix('\'')
            .map(str::to_string)
            .ok_or_else(|| SqlError::syntax(format!("expected a string literal, got {s}")))
    };
    let mut option = |name: &str, value: Option<&str>| -> SqlResult<()> {
        match (name, value) {
            ("format" | "binary", v) => copy_format(name, v).map(|binary| spec.binary = binary),
            ("freeze", None | Some("true" | "on" | "1" | "false" | "off" | "0")) => Ok(()),
            ("delimiter", Some(v)) => {
                let v = lit(v)?;
                if v.len() != 1 {
                    return Err(SqlError::new(
                        code::FEATURE_NOT_SUPPORTED,
                        "COPY delimiter must be a single one-byte character",
                    ));
                }
                spec.delimiter = v.as_bytes()[0];
                Ok(())
            }
            ("null", Some(v)) => {
                spec.null = lit(v)?;
                Ok(())
            }
            ("encoding", Some(v)) if lit(v)?.to_lowercase().replace(['-', '_'], "") == "utf8" => Ok(()),
            ("csv" | "header", _) => {
                Err(SqlError::unsupported(format!("COPY option {name} (only the text format)")))
            }
            (n, _) => Err(SqlError::unsupported(format!("COPY option {n}"))),
        }
    };
    if get(i) == "(" {
        i += 1;
        while get(i) != ")" {
            let name = get(i).to_string();
            if name.is_empty() {
                return Err(SqlError::syntax("COPY option list is not closed"));
            }
            i += 1;
            let value = if get(i) != "," && get(i) != ")" {
                i += 1;
                Some(get(i - 1).to_string())
            } else {
                None
            };
            option(&name, value.as_deref())?;
            if get(i) == "," {
                i += 1;
            }
        }
        i += 1;
    } else {
        // Legacy syntax: DELIMITER 'x', NULL 'x', CSV, BINARY.
        while !get(i).is_empty() {
            let name = get(i).to_string();
            i += 1;
            match name.as_str() {
                "delimiter" | "null" => {
                    if get(i) == "as" {
                        i += 1;
                    }
                    let v = get(i).to_string();
                    i += 1;
                    option(&name, Some(&v))?;
                }
                _ => option(&name, None)?,
            }
        }
    }
    if i < w.len() {
        return Err(SqlError::syntax(format!("syntax error at or near \"{}\" in COPY", get(i))));
    }
    Ok(spec)
}

/// Parses one statement (as [`split`] returns them).
pub fn parse_one(text: &str) -> SqlResult<Parsed> {
    let clean = strip_comments(text);
    let t = clean.trim();
    if t.is_empty() {
        return Ok(Parsed::Empty);
    }
    let first = t.split(|c: char| c.is_whitespace() || c == '(').next().unwrap_or("").to_ascii_lowercase();
    let rest_words = t.split_whitespace().skip(1).map(str::to_ascii_lowercase).collect::<Vec<_>>();
    let only = |allowed: &[&str]| rest_words.iter().all(|w| allowed.contains(&w.as_str()));
    match first.as_str() {
        "begin" if only(&["transaction", "work"]) => return Ok(Parsed::Begin),
        "commit" | "end" if only(&["transaction", "work"]) => return Ok(Parsed::Commit),
        "rollback" | "abort" if only(&["transaction", "work"]) => return Ok(Parsed::Rollback),
        "checkpoint" if rest_words.is_empty() => return Ok(Parsed::Checkpoint),
        "vacuum" => return Ok(Parsed::Vacuum),
        "copy" => return parse_copy(t).map(Parsed::Copy),
        "deallocate" => {
            let w = words(t)?;
            let i = if w.get(1).map(String::as_str) == Some("prepare") { 2 } else { 1 };
            return match &w[i.min(w.len())..] {
                [all] if all == "all" => Ok(Parsed::Deallocate(None)),
                [name] if !name.starts_with('\'') && !["(", ")", ",", "="].contains(&name.as_str()) => {
                    Ok(Parsed::Deallocate(Some(name_of(name))))
                }
                _ => Err(SqlError::syntax(format!(
                    "syntax error in `{t}`: expected DEALLOCATE [PREPARE] {{name | ALL}}"
                ))),
            };
        }
        "savepoint" | "release" | "rollback" | "abort" => {
            if let Some(op) = savepoint(&words(t)?) {
                return Ok(Parsed::Savepoint(op));
            }
        }
        _ => {}
    }
    let mut stmts = Parser::parse_sql(&PostgreSqlDialect {}, text).map_err(|e| {
        let msg = e.to_string();
        let msg = msg.strip_prefix("sql parser error: ").unwrap_or(&msg);
        SqlError::new(code::SYNTAX_ERROR, format!("syntax error: {msg}"))
    })?;
    match stmts.len() {
        1 => Ok(Parsed::Sql(Box::new(stmts.remove(0)))),
        0 => Ok(Parsed::Empty),
        _ => Err(SqlError::syntax("cannot insert multiple commands into a prepared statement")),
    }
}

/// The statement of `PREPARE name [(types)] AS statement`, as written (`None`: `text` is not
/// such a statement).
pub fn prepare_body(text: &str) -> Option<&str> {
    let t = text.trim_start();
    let b = t.as_bytes();
    if b.len() < 7 || !t[..7].eq_ignore_ascii_case("prepare") {
        return None;
    }
    let skip_ws = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut i = skip_ws(7);
    if i == 7 {
        return None;
    }
    // The name: an identifier or a quoted one.
    if b.get(i) == Some(&b'"') {
        i += 1;
        loop {
            match b.get(i) {
                None => return None,
                Some(b'"') if b.get(i + 1) == Some(&b'"') => i += 2,
                Some(b'"') => break,
                Some(_) => i += 1,
            }
        }
        i += 1;
    } else {
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80) {
            i += 1;
        }
    }
    i = skip_ws(i);
    // The parameter types, in balanced parentheses.
    if b.get(i) == Some(&b'(') {
        let mut depth = 0;
        while i < b.len() {
            match b[i] {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        i = skip_ws(i + 1);
    }
    let rest = t.get(i..)?;
    let after = rest.get(2..)?;
    (rest[..2].eq_ignore_ascii_case("as") && after.starts_with(|c: char| c.is_whitespace()))
        .then_some(after.trim())
}

/// Whether `text` holds `needle`, ASCII case ignored (no allocation).
pub fn holds_ignoring_case(text: &str, needle: &str) -> bool {
    text.len() >= needle.len()
        && text.as_bytes().windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// True if `text` starts with PREPARE, EXECUTE or DEALLOCATE (statements about named
/// statements, which the session plans itself).
pub fn names_statement(text: &str) -> bool {
    let t = text.trim_start().as_bytes();
    ["prepare", "execute", "deallocate"].iter().any(|w| {
        t.len() > w.len()
            && t[..w.len()].eq_ignore_ascii_case(w.as_bytes())
            && !t[w.len()].is_ascii_alphanumeric()
            && t[w.len()] != b'_'
    })
}

/// Parses one SQL expression (a stored DEFAULT).
pub fn parse_expr(text: &str) -> SqlResult<sqlparser::ast::Expr> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(text)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| SqlError::new(code::SYNTAX_ERROR, format!("syntax error in `{text}`: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitting_respects_quotes_and_comments() {
        assert_eq!(
            split("select 1; select ';'; -- x;\n select $$a;b$$;"),
            vec!["select 1", " select ';'", " -- x;\n select $$a;b$$"]
        );
        assert_eq!(split(" ; ;"), Vec::<&str>::new());
        assert_eq!(split("select $1; select E'\\';'"), vec!["select $1", " select E'\\';'"]);
        assert_eq!(split("/* a; /* b; */ c; */ select 1"), vec!["/* a; /* b; */ c; */ select 1"]);
    }

    #[test]
    fn copy_statements() {
        let Parsed::Copy(c) = parse_one("copy pgbench_accounts from stdin with (freeze on)").unwrap() else {
            panic!()
        };
        assert_eq!(
            c,
            CopySpec {
                table: "pgbench_accounts".into(),
                columns: vec![],
                delimiter: b'\t',
                null: "\\N".into(),
                binary: false,
            }
        );
        let Parsed::Copy(c) = parse_one("copy t (a) from stdin binary").unwrap() else { panic!() };
        assert!(c.binary);
        let Parsed::Copy(c) = parse_one("copy t from stdin (format binary)").unwrap() else { panic!() };
        assert!(c.binary);
        let Parsed::Copy(c) = parse_one("COPY \"T\" (a, b) FROM STDIN DELIMITER ',' NULL ''").unwrap() else {
            panic!()
        };
        assert_eq!((c.table.as_str(), c.columns.len(), c.delimiter, c.null.as_str()), ("T", 2, b',', ""));
        assert_eq!(parse_one("copy t to stdout").unwrap_err().code, code::FEATURE_NOT_SUPPORTED);
        assert_eq!(
            parse_one("copy t from stdin (format csv)").unwrap_err().code,
            code::FEATURE_NOT_SUPPORTED
        );
    }

    #[test]
    fn fast_paths_and_errors() {
        assert!(matches!(parse_one("BEGIN").unwrap(), Parsed::Begin));
        assert!(matches!(parse_one("end").unwrap(), Parsed::Commit));
        assert!(matches!(parse_one("vacuum analyze pgbench_branches").unwrap(), Parsed::Vacuum));
        assert!(matches!(parse_one("begin isolation level serializable").unwrap(), Parsed::Sql(_)));
        let e = parse_one("selec 1").unwrap_err();
        assert_eq!(e.code, code::SYNTAX_ERROR);
        assert!(matches!(parse_one("  -- nothing\n").unwrap(), Parsed::Empty));
        let sp = |s: &str| match parse_one(s).unwrap() {
            Parsed::Savepoint(op) => op,
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(sp("SAVEPOINT \"_pg3_1\""), SavepointOp::Set("_pg3_1".into()));
        assert_eq!(sp("release savepoint a"), SavepointOp::Release("a".into()));
        assert_eq!(sp("ROLLBACK TO SAVEPOINT a"), SavepointOp::RollbackTo("a".into()));
        assert_eq!(sp("rollback work to a"), SavepointOp::RollbackTo("a".into()));
        assert!(matches!(parse_one("DEALLOCATE ALL").unwrap(), Parsed::Deallocate(None)));
        assert!(
            matches!(parse_one("deallocate prepare \"_pg3_0\"").unwrap(), Parsed::Deallocate(Some(n)) if n == "_pg3_0")
        );
        assert!(matches!(parse_one("deallocate Q1").unwrap(), Parsed::Deallocate(Some(n)) if n == "q1"));
        assert_eq!(parse_one("deallocate").unwrap_err().code, code::SYNTAX_ERROR);
        assert_eq!(parse_one("deallocate a b").unwrap_err().code, code::SYNTAX_ERROR);
    }

    #[test]
    fn prepare_bodies() {
        assert_eq!(prepare_body("PREPARE q AS SELECT 1"), Some("SELECT 1"));
        assert_eq!(
            prepare_body(" prepare \"a b\" (int, numeric(10, 2))\n as\tinsert into t values ($1, $2)"),
            Some("insert into t values ($1, $2)")
        );
        assert_eq!(prepare_body("prepare q(int)as select $1"), Some("select $1"));
        assert_eq!(prepare_body("prepare q select 1"), None);
        assert_eq!(prepare_body("prepared q as select 1"), None);
        assert_eq!(prepare_body("select 1"), None);
    }
}
