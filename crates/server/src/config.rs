//! What `podns serve` and `podns zonefile` share before either starts: the
//! error an operator must fix ([`ConfigError`], exit code 64), the kube
//! client ([`kube_client`]) and the server's own addresses
//! ([`ns_addrs_or_pod_ip`]).

use std::net::IpAddr;
use std::path::Path;

use anyhow::Context;

/// A configuration problem the operator must fix (exit code 64).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// A kube client by the usual inference: `--kubeconfig`/`$KUBECONFIG`,
/// `~/.kube/config`, in-cluster; `--context` picks a context.
pub async fn kube_client(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> anyhow::Result<kube::Client> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| {
                ConfigError(format!("failed to read kubeconfig {}: {e}", path.display()))
            })?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| {
                    ConfigError(format!("failed to load kubeconfig {}: {e}", path.display()))
                })?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| ConfigError(format!("failed to load kubeconfig context: {e}")))?,
        None => kube::Config::infer()
            .await
            .map_err(|e| ConfigError(format!("failed to find a Kubernetes configuration: {e}")))?,
    };
    // Our watch loop retries with backoff, honours Retry-After, logs and
    // counts restarts. kube-client's own retry layer (up to 15 quiet
    // retries of 429/503/504) would hide an outage from it and hold a
    // watch back for tens of seconds after the API server returns
    // (RELIABILITY.md, fault matrix).
    config.default_retry = false;
    kube::Client::try_from(config).context("failed to build the Kubernetes client")
}

/// The addresses of `ns.dns.<zone>`: the flag's, else `$POD_IP`, else none.
pub fn ns_addrs_or_pod_ip(flag: &[IpAddr]) -> Vec<IpAddr> {
    if !flag.is_empty() {
        return flag.to_vec();
    }
    std::env::var("POD_IP")
        .ok()
        .and_then(|ip| ip.parse::<IpAddr>().ok())
        .into_iter()
        .collect()
}
