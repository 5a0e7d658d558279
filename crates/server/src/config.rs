//! What `podns serve` and `podns zonefile` share before either starts: the
//! error an operator must fix ([`ConfigError`], exit code 64), the kube
//! client configuration ([`kube_config`], [`client_of`]), the server's own
//! addresses ([`ns_addrs_or_pod_ip`]), and errors said in one line
//! ([`error_line`]).

use std::net::IpAddr;
use std::path::Path;

use serde_saphyr::MessageFormatter;

/// A configuration problem the operator must fix (exit code 64).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// The client for `config`; a failure (a kubeconfig's certificate that
/// does not load, say) is the operator's to fix.
pub fn client_of(config: kube::Config) -> Result<kube::Client, ConfigError> {
    kube::Client::try_from(config).map_err(|e| {
        ConfigError(format!(
            "failed to build the Kubernetes client: {}",
            error_line(&e)
        ))
    })
}

/// The client configuration, found as kubectl
/// finds it: the kubeconfig given (`--kubeconfig`, `$KUBECONFIG`), else
/// `~/.kube/config` if it exists, else in-cluster when the pod's
/// `KUBERNETES_SERVICE_HOST` is set. Every failure is one line that names
/// what was looked for.
pub async fn kube_config(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> Result<kube::Config, ConfigError> {
    let default = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| Path::new(&home).join(".kube").join("config"));
    let mut config = match (kubeconfig, default) {
        (Some(path), _) => from_file(path, context).await?,
        (None, Some(path)) if path.exists() => from_file(&path, context).await?,
        (None, default) => {
            let looked = match &default {
                Some(path) => format!("{} does not exist", path.display()),
                None => "no $HOME for ~/.kube/config".to_string(),
            };
            if let Some(context) = context {
                return Err(ConfigError(format!(
                    "--context {context:?} needs a kubeconfig ({looked}): pass --kubeconfig or set KUBECONFIG"
                )));
            }
            match std::env::var(IN_CLUSTER_HOST) {
                Ok(host) if !host.is_empty() => in_cluster(&host, &looked)?,
                // In a pod the kubelet always sets it: say it was looked for.
                _ => {
                    return Err(ConfigError(format!(
                        "{NO_KUBECONFIG} ({looked}, and no {IN_CLUSTER_HOST} for in-cluster config)"
                    )));
                }
            }
        }
    };
    config.apply_debug_overrides();
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

/// The configuration in the kubeconfig at `path`.
async fn from_file(path: &Path, context: Option<&str>) -> Result<kube::Config, ConfigError> {
    use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
    let shown = path.display();
    let kc = Kubeconfig::read_from(path).map_err(|e| {
        ConfigError(match e {
            // kube's message prints the path quoted twice.
            KubeconfigError::ReadConfig(io, _) => {
                format!("failed to read kubeconfig {shown}: {io}")
            }
            KubeconfigError::Parse(e) => {
                format!("failed to parse kubeconfig {shown}: {}", yaml_error(&e))
            }
            e => format!("failed to load kubeconfig {shown}: {}", error_line(&e)),
        })
    })?;
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    kube::Config::from_custom_kubeconfig(kc, &options)
        .await
        .map_err(|e| {
            ConfigError(format!(
                "failed to load kubeconfig {shown}: {}",
                error_line(&e)
            ))
        })
}

/// A YAML error as `line L column C: what was expected`, without the
/// source snippet and caret serde-saphyr draws below it.
fn yaml_error(e: &serde_saphyr::Error) -> String {
    let message = serde_saphyr::DefaultMessageFormatter.format_message(e.without_snippet());
    let message = one_line(&message);
    match e.location() {
        Some(at) if at.line() > 0 => {
            format!("line {} column {}: {message}", at.line(), at.column())
        }
        _ => message,
    }
}

/// What a pod has that says it runs in a cluster (client-go's rule).
const IN_CLUSTER_HOST: &str = "KUBERNETES_SERVICE_HOST";
/// Where the kubelet mounts the pod's ServiceAccount token.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The in-cluster configuration of a pod (`host` is its
/// `KUBERNETES_SERVICE_HOST`). kube reads the token only at the first
/// request, so a pod without one (`automountServiceAccountToken: false`)
/// would start and then fail every watch: its absence is said here, with
/// what was looked for.
fn in_cluster(host: &str, looked: &str) -> Result<kube::Config, ConfigError> {
    let missing: Vec<&str> = ["token", "ca.crt", "namespace"]
        .into_iter()
        .filter(|f| !Path::new(SERVICE_ACCOUNT_DIR).join(f).is_file())
        .collect();
    if !missing.is_empty() {
        return Err(ConfigError(format!(
            "no kubeconfig ({looked}) and no in-cluster credentials: {IN_CLUSTER_HOST}={host} is set but {SERVICE_ACCOUNT_DIR} has no {} (a pod with automountServiceAccountToken: false?); mount the ServiceAccount token or pass --kubeconfig",
            missing.join(", ")
        )));
    }
    kube::Config::incluster().map_err(|e| {
        ConfigError(format!(
            "failed to load the in-cluster config ({IN_CLUSTER_HOST}={host}): {}",
            error_line(&e)
        ))
    })
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

/// An error and its causes on one line, each said once: kube and hyper
/// print a cause in their own message and then give it as the source too
/// (`client error (Connect): client error (Connect): …`), and a message
/// may span lines.
pub fn error_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = String::new();
    let mut next = Some(e);
    while let Some(err) = next {
        // A kube error says its own cause in words (k8s::failure): the
        // rest of its chain would only repeat it.
        let kube = err.downcast_ref::<kube::Error>();
        let text = match kube {
            Some(k) => crate::k8s::failure::Failure::of(k).words,
            None => one_line(&err.to_string()),
        };
        if !text.is_empty() && !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        next = if kube.is_some() { None } else { err.source() };
    }
    line
}

/// `text`'s lines joined with a space.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// What to do when no configuration is found (exit 64).
pub const NO_KUBECONFIG: &str =
    "no kubeconfig: pass --kubeconfig, set KUBECONFIG, run in a pod, or try `podns demo`";

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
