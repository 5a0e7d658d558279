//! TEMPORARY stub until the k8s branch lands.
use crate::admin::Metrics;
use crate::index::Arrival;
pub struct WatchConfig {
    pub namespaces: Vec<String>,
    pub label_selector: Option<String>,
    pub consistent_list: bool,
    pub streaming: crate::cli::StreamingList,
}
pub fn scopes(cfg: &WatchConfig) -> usize {
    cfg.namespaces.len().max(1)
}
pub fn spawn_watchers(
    _client: kube::Client,
    _cfg: &WatchConfig,
    _tx: tokio::sync::mpsc::Sender<Arrival>,
    _metrics: Metrics,
    _tasks: &mut tokio::task::JoinSet<()>,
    _shutdown: tokio_util::sync::CancellationToken,
) {
}
