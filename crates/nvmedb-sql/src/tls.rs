//! TLS for the server: a certificate chain and its private key (PEM files) become the rustls
//! acceptor pgwire hands each connection that asks for TLS (an SSLRequest is answered 'S' and
//! the handshake follows; without a certificate the server answers 'N' and clients that
//! require TLS refuse to go on).
//!
//! Owns: [`TlsFiles`] and [`acceptor`]. Invariant: a certificate or key that cannot be read or
//! does not parse stops the server from starting, with the file named; TLS is never silently
//! off when it was asked for.

use crate::server::ServeError;
use pgwire::tokio::tokio_rustls::rustls;
use pgwire::tokio::TlsAcceptor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The PEM files of a server certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (the server's certificate first).
    pub cert: PathBuf,
    /// The private key of the certificate (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, ServeError> {
    std::fs::read(path)
        .map_err(|e| ServeError::Io(format!("cannot read the TLS {what} {}", path.display()), e))
}

/// The acceptor serving `files`.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, ServeError> {
    let bad = |path: &Path, what: &str, e: &dyn std::fmt::Display| {
        ServeError::Config(format!("TLS {what} {}: {e}", path.display()))
    };
    let pem = read(&files.cert, "certificate")?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&files.cert, "certificate", &e))?;
    if certs.is_empty() {
        return Err(bad(&files.cert, "certificate", &"no CERTIFICATE section in the file"));
    }
    let pem = read(&files.key, "key")?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| bad(&files.key, "key", &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(&files.cert, "certificate", &e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| bad(&files.key, "key (does it match the certificate?)", &e))?;
    // PostgreSQL's protocol name, which libpq 17 offers (and requires with sslnegotiation=direct).
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
