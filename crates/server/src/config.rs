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

/// The client configuration, found as kubectl finds it: the kubeconfig
/// given (`--kubeconfig`, or a node instance's relay kubeconfig), else
/// the files `$KUBECONFIG` lists ([`env_kubeconfigs`]), else
/// `~/.kube/config` if it exists, else in-cluster when the pod's
/// `KUBERNETES_SERVICE_HOST` is set. Every failure is one line that names
/// what was looked for.
///
/// `$KUBECONFIG` is read here, not as the flag's default: a node instance
/// names its relay kubeconfig and must never read the operator's
/// `$KUBECONFIG` (clap would take the variable for `--kubeconfig` and
/// refuse the pair), and kubectl reads an empty value as unset.
pub async fn kube_config(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> Result<kube::Config, ConfigError> {
    let default = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| Path::new(&home).join(".kube").join("config"));
    let listed = match kubeconfig {
        Some(_) => Vec::new(),
        None => env_kubeconfigs(std::env::var_os("KUBECONFIG").as_deref())?,
    };
    let mut config = match (kubeconfig, default) {
        (Some(path), _) => from_files(&[path.to_path_buf()], context).await?,
        (None, _) if !listed.is_empty() => from_files(&listed, context).await?,
        (None, Some(path)) if path.exists() => from_files(&[path], context).await?,
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

/// The files a `$KUBECONFIG` value lists, as kubectl reads them: a list
/// separated by `:` (`;` on Windows), empty entries ignored (so an empty
/// value is unset), files that do not exist skipped. A value that lists
/// files none of which exists is an error, as kubectl's "no configuration
/// has been provided" is, naming them.
pub fn env_kubeconfigs(
    value: Option<&std::ffi::OsStr>,
) -> Result<Vec<std::path::PathBuf>, ConfigError> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let named: Vec<_> = std::env::split_paths(value)
        .filter(|p| !p.as_os_str().is_empty())
        .collect();
    let found: Vec<_> = named.iter().filter(|p| p.exists()).cloned().collect();
    if found.is_empty() && !named.is_empty() {
        let shown: Vec<_> = named.iter().map(|p| p.display().to_string()).collect();
        return Err(ConfigError(format!(
            "KUBECONFIG names no file that exists ({}): fix it, unset it, or pass --kubeconfig",
            shown.join(", ")
        )));
    }
    Ok(found)
}

/// The configuration in the kubeconfigs at `paths`, merged as kubectl
/// merges `$KUBECONFIG`'s files (the first to set a value wins).
async fn from_files(
    paths: &[std::path::PathBuf],
    context: Option<&str>,
) -> Result<kube::Config, ConfigError> {
    use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
    let mut merged: Option<Kubeconfig> = None;
    for path in paths {
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
        merged = Some(match merged {
            None => kc,
            Some(m) => m.merge(kc).map_err(|e| {
                ConfigError(format!(
                    "failed to merge kubeconfig {shown} into the files before it in KUBECONFIG: {}",
                    error_line(&e)
                ))
            })?,
        });
    }
    let shown = paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    let kc = merged.ok_or_else(|| ConfigError(NO_KUBECONFIG.to_string()))?;
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

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::env_kubeconfigs;

    #[test]
    fn kubeconfig_variable_is_read_as_kubectl_reads_it() {
        let dir = std::env::temp_dir().join(format!("podns-kubeconfigs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::write(&b, "apiVersion: v1\nkind: Config\n").unwrap();
        // Unset and empty are the same: nothing listed.
        assert!(env_kubeconfigs(None).unwrap().is_empty());
        assert!(env_kubeconfigs(Some(&OsString::new())).unwrap().is_empty());
        assert!(
            env_kubeconfigs(Some(&OsString::from(":")))
                .unwrap()
                .is_empty()
        );
        // A list: the files that exist, in order; a missing one skipped.
        let list = std::env::join_paths([&a, &b]).unwrap();
        assert_eq!(env_kubeconfigs(Some(&list)).unwrap(), vec![b.clone()]);
        // None of them exists: one line naming them.
        let missing = std::env::join_paths([&a, &dir.join("c")]).unwrap();
        let err = env_kubeconfigs(Some(&missing)).unwrap_err().0;
        assert!(
            err.starts_with("KUBECONFIG names no file that exists (")
                && err.contains(&*a.to_string_lossy()),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
