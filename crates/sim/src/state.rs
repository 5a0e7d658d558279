//! The simulator's shared state: what every request handler reads.

use std::net::SocketAddr;
use std::sync::Arc;

use podns_kapi::discovery::Discovery;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::store::{Store, kind_counts};
use crate::{faults, stats, tokens, workload};

/// State shared by every request.
pub struct Sim {
    pub store: Arc<Store>,
    pub workload: Arc<workload::Workload>,
    pub stats: Arc<stats::Stats>,
    /// The ServiceAccount tokens issued, for TokenReviews and tests.
    pub tokens: tokens::Tokens,
    pub faults: faults::Faults,
    pub shutdown: CancellationToken,
    pub addr: SocketAddr,
    /// What discovery lists.
    pub discovery: Discovery,
    pub bookmark_interval: u64,
    /// Pods, Services, Jobs and Namespaces may be answered in Protobuf.
    pub protobuf: bool,
}

impl Sim {
    /// `/sim/stats`: the load counters, the objects by kind, the pod
    /// events and the current resourceVersion.
    pub fn stats_json(&self) -> Value {
        let counts = kind_counts(&self.store);
        self.stats.snapshot(
            json!(counts),
            self.store.pod_events(),
            self.store.current_rv(),
        )
    }
}
