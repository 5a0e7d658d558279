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
    let config = kube_config(kubeconfig, context).await?;
    kube::Client::try_from(config).context("failed to build the Kubernetes client")
}

/// The client configuration [`kube_client`] builds on: the kubeconfig
/// found by the usual inference, its failures said in one line.
pub async fn kube_config(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> Result<kube::Config, ConfigError> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| {
                ConfigError(match e {
                    // kube's message prints the path quoted twice.
                    kube::config::KubeconfigError::ReadConfig(io, _) => {
                        format!("failed to read kubeconfig {}: {io}", path.display())
                    }
                    e => format!("failed to load kubeconfig {}: {e}", path.display()),
                })
            })?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| {
                    ConfigError(format!("failed to load kubeconfig {}: {e}", path.display()))
                })?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| kubeconfig_problem(&e))?,
        None => kube::Config::infer().await.map_err(|e| {
            // Neither in-cluster nor a kubeconfig: kube keeps the
            // kubeconfig's failure as the source, the likelier mistake.
            match std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<kube::config::KubeconfigError>())
            {
                Some(k) => kubeconfig_problem(k),
                None => ConfigError(format!("{NO_KUBECONFIG} ({e})")),
            }
        })?,
    };
    // Said once, so a watch that cannot connect can be read against it.
    tracing::info!("kubernetes api {}", config.cluster_url);
    // Our watch loop retries with backoff, honours Retry-After, logs and
    // counts restarts. kube-client's own retry layer (up to 15 quiet
    // retries of 429/503/504) would hide an outage from it and hold a
    // watch back for tens of seconds after the API server returns
    // (RELIABILITY.md, fault matrix).
    config.default_retry = false;
    Ok(config)
}

/// Ask the API server its version once, so that an address that does not
/// answer is named in the log: the watch loop's retries say only
/// `client error (Connect)`.
/// `what` names the server: "the Kubernetes API", or for a node instance
/// "the relay".
pub async fn probe_api(client: kube::Client, url: http::Uri, what: &'static str) {
    let wait = std::time::Duration::from_secs(10);
    match tokio::time::timeout(wait, client.apiserver_version()).await {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => {
            let error = crate::k8s::failure::Failure::of(&error);
            tracing::error!(%error, "cannot reach {what} at {url}; retrying")
        }
        Err(_) => tracing::error!("no answer from {what} at {url} in 10s; retrying"),
    }
}

/// What to do when no configuration is found (exit 64).
pub const NO_KUBECONFIG: &str =
    "no kubeconfig: pass --kubeconfig, set KUBECONFIG, run in a pod, or try `podns demo`";

/// A kubeconfig failure in one line an operator can act on: the path once
/// (kube's own message prints it quoted twice) and, when there is none,
/// the ways to give one.
fn kubeconfig_problem(e: &kube::config::KubeconfigError) -> ConfigError {
    use kube::config::KubeconfigError as K;
    ConfigError(match e {
        K::FindPath => NO_KUBECONFIG.to_string(),
        K::ReadConfig(io, path) if io.kind() == std::io::ErrorKind::NotFound => {
            format!("{NO_KUBECONFIG} ({} does not exist)", path.display())
        }
        K::ReadConfig(io, path) => format!("failed to read kubeconfig {}: {io}", path.display()),
        other => format!("failed to load kubeconfig: {other}"),
    })
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
