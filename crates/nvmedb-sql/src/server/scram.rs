//! SCRAM-SHA-256 authentication: the password file, salted once at start, as pgwire's
//! password source.
//!
//! Owns: [`ScramSource`]. Invariant: a password file without a password stops the server at
//! start; an unknown user fails authentication with 28P01.

use super::ServeError;
use crate::error::code;
use async_trait::async_trait;
use pgwire::api::auth::sasl::scram::gen_salted_password;
use pgwire::api::auth::{AuthSource, LoginInfo, Password};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use std::collections::HashMap;
use std::path::PathBuf;

/// Passwords for SCRAM, salted once at start.
#[derive(Debug)]
pub(super) struct ScramSource {
    salt: Vec<u8>,
    pub(super) iterations: usize,
    /// user → salted password; `None` key (empty user) = any user.
    salted: HashMap<String, Vec<u8>>,
}

impl ScramSource {
    pub(super) fn load(path: &PathBuf) -> Result<Self, ServeError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ServeError::Config(format!("cannot read password file {}: {e}", path.display())))?;
        let salt: Vec<u8> =
            (0..16).map(|i| (crate::types::now_micros() >> (i % 8 * 8)) as u8 ^ (i as u8 * 37)).collect();
        let iterations = 4096;
        let mut salted = HashMap::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (user, pw) = match line.split_once(':') {
                Some((u, p)) => (u.to_string(), p),
                None => (String::new(), line),
            };
            salted.insert(user, gen_salted_password(pw, &salt, iterations));
        }
        if salted.is_empty() {
            return Err(ServeError::Config(format!("password file {} holds no password", path.display())));
        }
        Ok(Self { salt, iterations, salted })
    }
}

#[async_trait]
impl AuthSource for ScramSource {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let user = login.user().unwrap_or("");
        let salted = self.salted.get(user).or_else(|| self.salted.get("")).ok_or_else(|| {
            PgWireError::UserError(Box::new(ErrorInfo::new(
                "FATAL".into(),
                code::INVALID_PASSWORD.into(),
                format!("password authentication failed for user \"{user}\""),
            )))
        })?;
        Ok(Password::new(Some(self.salt.clone()), salted.clone()))
    }
}
