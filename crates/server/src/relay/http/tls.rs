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
    /// The name a client on this machine must verify the certificate for,
    /// when it is not valid for the listen address (a certificate for the
    /// relay Service, `podns.podns.svc`, reached on loopback): the
    /// kubeconfig written says it as `tls-server-name`.
    pub server_name: Option<String>,
}

/// TLS from `cert`/`key` files (with `ca` as what clients trust, else the
/// certificate itself), or self-signed for `listen`.
pub fn load(
    files: Option<(&Path, &Path)>,
    ca: Option<&Path>,
    listen: SocketAddr,
) -> anyhow::Result<Tls> {
    let (certs, key, ca_pem, server_name) = match files {
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
            let name = server_name(&certs[0], listen).with_context(|| {
                format!(
                    "--relay-tls-cert {} is not a valid certificate",
                    cert.display()
                )
            })?;
            (certs, key, ca_pem, name)
        }
        None => {
            let names = vec![listen.ip().to_string(), "localhost".to_owned()];
            let made = rcgen::generate_simple_self_signed(names)
                .context("cannot make a self-signed certificate")?;
            let key = PrivateKeyDer::try_from(made.signing_key.serialize_der())
                .map_err(|e| anyhow::anyhow!("self-signed key: {e}"))?;
            (vec![made.cert.der().clone()], key, made.cert.pem(), None)
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
        server_name,
    })
}

/// `None` when `cert` is valid for the listen address's IP (a client
/// dialling it verifies that), else the first DNS name it is valid for.
fn server_name(cert: &CertificateDer<'_>, listen: SocketAddr) -> anyhow::Result<Option<String>> {
    let ee = webpki::EndEntityCert::try_from(cert).map_err(|e| anyhow::anyhow!("{e}"))?;
    let ip = rustls_pki_types::ServerName::IpAddress(listen.ip().into());
    if !listen.ip().is_unspecified() && ee.verify_is_valid_for_subject_name(&ip).is_ok() {
        return Ok(None);
    }
    let name = ee.valid_dns_names().next().map(str::to_owned);
    anyhow::ensure!(
        name.is_some() || listen.ip().is_unspecified(),
        "it is valid for no DNS name and not for {}",
        listen.ip()
    );
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(names: &[&str]) -> CertificateDer<'static> {
        let names = names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        rcgen::generate_simple_self_signed(names)
            .unwrap()
            .cert
            .der()
            .clone()
    }

    #[test]
    fn a_certificate_for_the_service_is_named_when_dialled_on_loopback() {
        let lo: SocketAddr = "127.0.0.1:6443".parse().unwrap();
        let svc = cert(&["podns.podns.svc", "podns.podns.svc.cluster.local"]);
        assert_eq!(
            server_name(&svc, lo).unwrap().as_deref(),
            Some("podns.podns.svc")
        );
        let both = cert(&["podns.podns.svc", "127.0.0.1"]);
        assert_eq!(
            server_name(&both, lo).unwrap(),
            None,
            "valid for the address"
        );
        let any: SocketAddr = "0.0.0.0:6443".parse().unwrap();
        assert_eq!(
            server_name(&both, any).unwrap().as_deref(),
            Some("podns.podns.svc")
        );
        assert!(server_name(&cert(&["10.0.0.1"]), lo).is_err());
    }
}
