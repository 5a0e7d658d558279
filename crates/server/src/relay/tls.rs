//! The relay's TLS: a certificate and key from files (`--relay-tls-cert`,
//! `--relay-tls-key`, mounted from a Secret in a cluster), or, when none is
//! given, a self-signed certificate made at start for the listen address
//! and `localhost`, which `--relay-kubeconfig-out` then names as the CA.
//! Always TLS: kubectl and client-go send a bearer token only over TLS.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// What the relay serves TLS with, and the CA a client should trust.
pub struct Tls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// PEM of the certificate clients should trust: the given CA, or the
    /// self-signed certificate.
    pub ca_pem: String,
}

/// TLS from `cert`/`key` files (with `ca` as what clients trust, else the
/// certificate itself), or self-signed for `listen`.
pub fn load(
    files: Option<(&Path, &Path)>,
    ca: Option<&Path>,
    listen: SocketAddr,
) -> anyhow::Result<Tls> {
    let (certs, key, ca_pem) = match files {
        Some((cert, key)) => {
            let pem = std::fs::read_to_string(cert)
                .with_context(|| format!("cannot read --relay-tls-cert {}", cert.display()))?;
            let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("no certificate in {}", cert.display()))?;
            anyhow::ensure!(!certs.is_empty(), "no certificate in {}", cert.display());
            let key = PrivateKeyDer::from_pem_file(key)
                .with_context(|| format!("no private key in --relay-tls-key {}", key.display()))?;
            let ca_pem = match ca {
                Some(ca) => std::fs::read_to_string(ca)
                    .with_context(|| format!("cannot read --relay-tls-ca {}", ca.display()))?,
                None => pem,
            };
            (certs, key, ca_pem)
        }
        None => {
            let names = vec![listen.ip().to_string(), "localhost".to_owned()];
            let made = rcgen::generate_simple_self_signed(names)
                .context("cannot make a self-signed certificate")?;
            let key = PrivateKeyDer::try_from(made.signing_key.serialize_der())
                .map_err(|e| anyhow::anyhow!("self-signed key: {e}"))?;
            (vec![made.cert.der().clone()], key, made.cert.pem())
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the relay's certificate and key do not go together")?;
    Ok(Tls {
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        ca_pem,
    })
}
