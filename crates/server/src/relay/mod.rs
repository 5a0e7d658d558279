//! The relay (`podns serve --relay-listen`): a read-only Kubernetes API of
//! slim Pods, Services, Jobs and the EndpointSlices of Services without a
//! selector, served from what this podns already
//! watches, so that node instances watch a few relays instead of every
//! node watching the API server.
//!
//! The relay is what kube-apiserver's own watch cache is, one tier out:
//! each kind's objects and a history of changes keyed by the API server's
//! own resourceVersions ([`store`]), so a client can list, watch, resume
//! on any relay replica without a relist, and gets 410 only past the
//! history; each change encoded once for every subscriber; label and
//! field selectors (`spec.nodeName`, `metadata.namespace`) evaluated here,
//! so a subscriber is sent only what it asked for ([`http`]). Objects carry
//! only what DNS reads (each kind's serving rules: `k8s::objects`). Clients authenticate with a
//! ServiceAccount token the relay checks with a TokenReview ([`http::auth`]).
//!
//! The feed ([`feed`]) is the watch loop's: each watch of a relayed kind
//! hands every event to its kind's cache as well as to the index writer.

pub mod feed;
pub mod http;
pub mod store;

#[cfg(test)]
mod compact_compare;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use podns_kapi::Kind;

pub use store::cache::{Cache, Item};
use store::labels::ServedLabels;
use store::scope::NodeScopes;

/// The kinds the relay serves. EndpointSlices only as podns watches them:
/// those of Services without a selector (`k8s::watch::USER_SLICES`).
pub const KINDS: [Kind; 4] = [Kind::Pod, Kind::Service, Kind::Job, Kind::EndpointSlice];

/// `--relay-*` flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayConfig {
    pub listen: SocketAddr,
    /// Changes are kept at least this long: a client that reconnects
    /// within it resumes without a relist.
    pub history: Duration,
    /// How often an idle watch gets a bookmark.
    pub bookmark_every: Duration,
    /// Connections served at once; more are accepted and closed at once.
    pub max_connections: usize,
    /// Write a kubeconfig for node instances on this machine here.
    pub kubeconfig_out: Option<PathBuf>,
    /// The ServiceAccount (namespace, name) whose token that kubeconfig
    /// carries.
    pub kubeconfig_account: (String, String),
    /// Certificate and key (PEM files); none: self-signed.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// The CA clients should trust, for the kubeconfig written.
    pub tls_ca: Option<PathBuf>,
    /// The audience node instances' tokens must be issued for; the relay
    /// asks TokenReview for it alone, so an API-server token is refused.
    pub audience: String,
    /// How long a node instance may still read a namespace or gang after
    /// its node's last pod there left (at least its `--scope-linger`).
    pub scope_linger: Duration,
    /// Serve the multiplexed watch (`crate::k8s::mux`): a node instance's
    /// watches in one response. Off (`--no-watch-mux`, for tests and
    /// benchmarks), the relay answers it 404 as one from before it.
    pub mux: bool,
}

impl RelayConfig {
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            history: Duration::from_secs(15 * 60),
            bookmark_every: Duration::from_secs(60),
            max_connections: 32_768,
            kubeconfig_out: None,
            kubeconfig_account: ("default".into(), "podns-node".into()),
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
            audience: http::auth::AUDIENCE.to_owned(),
            scope_linger: store::scope::LINGER,
            mux: true,
        }
    }
}

/// The relay's caches, one per kind.
pub struct Relay {
    caches: HashMap<Kind, Arc<Cache>>,
    /// The pod labels served.
    labels: Arc<ServedLabels>,
    /// Namespaces the watches cover (empty: all).
    namespaces: Vec<String>,
    /// Pods by node: what each node's instance may read.
    scopes: Arc<NodeScopes>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("namespaces", &self.namespaces)
            .finish_non_exhaustive()
    }
}

impl Relay {
    /// `unseen` counts the changes no client could see (`cache`).
    /// `linger`: how long a node may read what its pods left (`scope`).
    pub fn new(
        history: Duration,
        namespaces: Vec<String>,
        linger: Duration,
        unseen: prometheus_client::metrics::counter::Counter,
    ) -> Arc<Self> {
        let scopes = Arc::new(NodeScopes::new(linger));
        Arc::new(Self {
            caches: KINDS
                .into_iter()
                .map(|k| {
                    let by_node = (k == Kind::Pod).then(|| scopes.clone());
                    (k, Cache::with_scopes(k, history, unseen.clone(), by_node))
                })
                .collect(),
            labels: Arc::default(),
            namespaces,
            scopes,
        })
    }

    /// What each node's instance may read.
    pub fn scopes(&self) -> &NodeScopes {
        &self.scopes
    }

    pub fn cache(&self, kind: Kind) -> Option<&Arc<Cache>> {
        self.caches.get(&kind)
    }

    /// True once every kind has had its first list.
    pub fn is_synced(&self) -> bool {
        self.caches.values().all(|c| c.is_synced())
    }
}
