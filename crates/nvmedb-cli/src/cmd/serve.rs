//! `nvmedb serve`: the PostgreSQL wire-protocol server over a database directory (a thin
//! layer over `nvmedb_sql::serve`).
//!
//! Owns: [`ServeArgs`] and their translation into a [`ServerConfig`]. Invariant: a bad flag is
//! an error naming the flag; the server itself lives in `nvmedb-sql`.

use super::args::parse_size;
use super::CliError;
use clap::Args;
use nvmedb::BufferSize;
use nvmedb_sql::{Auth, ServerConfig};
use std::path::PathBuf;

/// Flags of `nvmedb serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Database directory (created if missing).
    #[arg(long)]
    pub data: PathBuf,
    /// Address to listen on (loopback by default; e.g. 0.0.0.0:5432 accepts other hosts).
    #[arg(long, default_value = "127.0.0.1:5432")]
    pub listen: String,
    /// Authentication: `trust` (anyone who reaches the port) or `scram` (SCRAM-SHA-256 against
    /// --password-file).
    #[arg(long, default_value = "trust")]
    pub auth: String,
    /// Password file for --auth scram: lines `user:password`, or one line with a password for
    /// every user.
    #[arg(long)]
    pub password_file: Option<PathBuf>,
    /// Connections served at once; more are refused (SQLSTATE 53300).
    #[arg(long, default_value_t = 100)]
    pub max_connections: usize,
    /// Table buffer: a size (64MiB, 1G) or a share of the data present at start (5%).
    #[arg(long, default_value = "64MiB")]
    pub buffer: String,
    /// Index buffer: a size or a share of the index data present at start.
    #[arg(long, default_value = "64MiB")]
    pub index_buffer: String,
    /// Seconds a statement waits for a row lock before it fails with SQLSTATE 55P03 (default:
    /// 60, as PostgreSQL clients expect waits to last; deadlocks are detected at once).
    #[arg(long)]
    pub lock_timeout: Option<f64>,
    /// Early lock release: `on` (the default) releases a committing transaction's row locks
    /// once its commit record is logged, before the log flush (readers that saw the commit wait
    /// for that flush before they are answered); `off` holds them until the flush. See
    /// `LockOptions::early_release`.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub early_lock_release: String,
    /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9187).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Copy every finished log segment into this directory (with its checksum), and the last
    /// one at shutdown, for `nvmedb restore --archive`.
    #[arg(long, value_name = "DIR")]
    pub archive: Option<PathBuf>,
    /// TLS server certificate chain (PEM): clients may then connect with TLS
    /// (`sslmode=require`); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

fn buffer_size(s: &str, flag: &'static str) -> Result<BufferSize, CliError> {
    match s.trim().strip_suffix('%') {
        Some(p) => p
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|p| p.is_finite() && *p > 0.0)
            .map(BufferSize::PercentOfData)
            .ok_or_else(|| CliError::flag(flag, format!("`{s}` is not a positive percentage"))),
        None => parse_size(flag, s).map(BufferSize::Bytes),
    }
}

/// The server configuration the flags describe.
pub fn config(a: &ServeArgs) -> Result<ServerConfig, CliError> {
    let mut c = ServerConfig::new(&a.data);
    c.listen = a.listen.clone();
    c.max_connections = a.max_connections;
    c.auth = match (a.auth.as_str(), &a.password_file) {
        ("trust", None) => Auth::Trust,
        ("trust", Some(_)) => return Err(CliError::flag("--password-file", "needs --auth scram")),
        ("scram", Some(f)) => Auth::Scram { password_file: f.clone() },
        ("scram", None) => return Err(CliError::flag("--auth", "scram needs --password-file")),
        (other, _) => return Err(CliError::flag("--auth", format!("`{other}`: expected trust or scram"))),
    };
    c.options.table_buffer = buffer_size(&a.buffer, "--buffer")?;
    c.options.index_buffer = buffer_size(&a.index_buffer, "--index-buffer")?;
    if let Some(s) = a.lock_timeout {
        c.options.lock_options.lock_timeout =
            std::time::Duration::try_from_secs_f64(s).ok().filter(|d| !d.is_zero()).ok_or_else(|| {
                CliError::flag("--lock-timeout", format!("`{s}` is not a positive number of seconds"))
            })?;
    }
    c.options.lock_options.early_release = a.early_lock_release == "on";
    c.metrics = a.metrics.clone();
    c.archive = a.archive.clone();
    if let (Some(cert), Some(key)) = (&a.tls_cert, &a.tls_key) {
        c.tls = Some(nvmedb_sql::tls::TlsFiles { cert: cert.clone(), key: key.clone() });
    }
    Ok(c)
}

/// Runs the server until SIGTERM or Ctrl-C.
pub fn run(a: &ServeArgs) -> Result<(), CliError> {
    let c = config(a)?;
    nvmedb_sql::serve(c).map_err(|e| CliError::Server { data: a.data.clone(), source: Box::new(e) })
}
