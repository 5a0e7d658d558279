//! The Pod, Service, Job and EndpointSlice watchers: the list/watch loop of
//! [`wire`](super::wire) (kube-runtime's watcher states, for either wire)
//! over the slim types, converted and sent to the single index writer.
//!
//! One task per (resource, namespace scope). Each task owns its retry loop
//! instead of kube-runtime's `.default_backoff()`, because it must also
//! honour a 429's `retryAfterSeconds`, count restarts by reason, and
//! rebuild the watcher without streaming lists when the server refuses
//! them (kube-runtime does not fall back by itself).

use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use kube::core::Status;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff, Event, ListSemantic};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::objects::{SlimEndpointSlice, SlimJob, SlimNode, SlimPod, SlimService, SlimServiceCidr};
use super::tap::Watched;
use super::updates::Mapper;
use super::wire::{RawConfig, Wire, raw_watcher};
use crate::index::types::{Arrival, Change};
use crate::metrics::{Metrics, ResourceLabels, RestartLabels};
use crate::relay::feed::Feed;

/// How the first list is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StreamingList {
    /// Try `sendInitialEvents`, fall back to list-then-watch when refused.
    #[default]
    Auto,
    On,
    Off,
}

keywords!(StreamingList { Auto = "auto", On = "on", Off = "off" });

/// What to watch and how to list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchConfig {
    /// Namespaces to watch; empty means the whole cluster.
    pub namespaces: Vec<String>,
    /// Label selector for the pod watch (Services are not filtered).
    pub label_selector: Option<String>,
    /// List with a quorum read instead of from the watch cache.
    pub consistent_list: bool,
    pub streaming: StreamingList,
    /// Also watch batch/v1 Jobs (the rank view needs their completions).
    pub jobs: bool,
    /// Also watch the EndpointSlices no controller of Kubernetes derives
    /// from a selector ([`USER_SLICES`]): headless Services without a
    /// selector answer from them.
    pub endpoint_slices: bool,
    /// Protobuf or JSON from the API server.
    pub wire: Wire,
    /// Also watch Nodes and ServiceCIDRs: the reverse zones are learned
    /// from their ranges (off with `--reverse-cidr`).
    pub ranges: bool,
    /// Relay what is watched (`--relay-listen`): Pods, Services and Jobs
    /// also go to the relay's caches.
    pub relay: Option<std::sync::Arc<crate::relay::Relay>>,
}

impl WatchConfig {
    /// One entry per watch of each resource: the namespaces in the order
    /// given, without duplicates, or `[None]` for the whole cluster.
    pub fn scopes(&self) -> Vec<Option<String>> {
        let mut out: Vec<Option<String>> = Vec::new();
        for ns in &self.namespaces {
            if !out.iter().flatten().any(|n| n == ns) {
                out.push(Some(ns.clone()));
            }
        }
        if out.is_empty() {
            out.push(None);
        }
        out
    }
}

/// How many complete lists (`Change::Reset` or `Change::Listed`) of pods (one per watch) the writer must see
/// before pods are synced.
pub fn pod_scopes(cfg: &WatchConfig) -> usize {
    cfg.scopes().len()
}

/// How many complete lists (`Change::Reset` or `Change::Listed`) of services the writer must see before
/// services are synced (the same scopes as pods).
pub fn service_scopes(cfg: &WatchConfig) -> usize {
    cfg.scopes().len()
}

/// How many complete lists (`Change::Reset` or `Change::Listed`) of Jobs the writer must see (0 without the
/// rank view).
pub fn job_scopes(cfg: &WatchConfig) -> usize {
    if cfg.jobs { cfg.scopes().len() } else { 0 }
}

/// How many complete lists of EndpointSlices the writer must see (0 when
/// they are not watched).
pub fn slice_scopes(cfg: &WatchConfig) -> usize {
    if cfg.endpoint_slices {
        cfg.scopes().len()
    } else {
        0
    }
}

/// The label selector of the EndpointSlice watch: every slice but those
/// the EndpointSlice controller writes for Services with a selector (podns
/// reads those Services' pods directly), and only slices that name their
/// Service. The mirroring controller's slices
/// (`endpointslicemirroring-controller.k8s.io`) stay in: it mirrors only
/// the hand-written Endpoints of Services without a selector, exactly the
/// Services that need them. `!=` also matches slices without the label,
/// as hand-written slices often are.
pub const USER_SLICES: &str = "endpointslice.kubernetes.io/managed-by!=endpointslice-controller.k8s.io,kubernetes.io/service-name";

/// Starts one pod and one service watch per scope in `tasks`. They run until
/// `shutdown` is cancelled or the writer's receiver is dropped.
pub fn spawn_watchers(
    client: kube::Client,
    cfg: &WatchConfig,
    tx: mpsc::Sender<Arrival>,
    metrics: Metrics,
    tasks: &mut JoinSet<()>,
    shutdown: CancellationToken,
) {
    for scope in cfg.scopes() {
        let parts = (&client, &scope, cfg, &tx, &metrics, &shutdown);
        let pods = Watch::<SlimPod>::new(parts, cfg.label_selector.clone());
        let services = Watch::<SlimService>::new(parts, None);
        let ns = scope.as_deref().unwrap_or("*").to_owned();
        if cfg.jobs {
            let jobs = Watch::<SlimJob>::new(parts, None);
            tasks.spawn(
                jobs.run()
                    .instrument(tracing::info_span!("watch", resource = "jobs", namespace = %ns)),
            );
        }
        if cfg.endpoint_slices {
            let slices = Watch::<SlimEndpointSlice>::new(parts, Some(USER_SLICES.to_owned()));
            tasks.spawn(slices.run().instrument(
                tracing::info_span!("watch", resource = "endpointslices", namespace = %ns),
            ));
        }
        tasks.spawn(
            pods.run()
                .instrument(tracing::info_span!("watch", resource = "pods", namespace = %ns)),
        );
        tasks.spawn(
            services
                .run()
                .instrument(tracing::info_span!("watch", resource = "services", namespace = %ns)),
        );
    }
    if cfg.ranges {
        // Cluster-scoped, one watch each whatever the namespaces.
        let parts = (&client, &None, cfg, &tx, &metrics, &shutdown);
        let nodes = Watch::<SlimNode>::new(parts, None);
        let cidrs = Watch::<SlimServiceCidr>::new(parts, None);
        tasks.spawn(
            nodes
                .run()
                .instrument(tracing::info_span!("watch", resource = "nodes")),
        );
        tasks.spawn(
            cidrs
                .run()
                .instrument(tracing::info_span!("watch", resource = "servicecidrs")),
        );
    }
}

/// How one scope lists and watches (streaming is set per attempt).
fn raw_config<K>(
    namespace: Option<&str>,
    cfg: &WatchConfig,
    label_selector: Option<String>,
) -> RawConfig
where
    K: kube::Resource<DynamicType = ()>,
{
    RawConfig {
        url_path: K::url_path(&(), namespace),
        label_selector,
        // By default list from the API server's watch cache
        // (resourceVersion=0), in one response: kube-core drops
        // resourceVersion=0 when a limit is set, which would turn every
        // relist into a quorum read from etcd.
        list_semantic: if cfg.consistent_list {
            ListSemantic::MostRecent
        } else {
            ListSemantic::Any
        },
        streaming: false,
        wire: cfg.wire,
        seen: None,
    }
}

/// How long a streaming list may run without its end bookmark before
/// `--streaming-list auto` gives up on it. An API server that predates
/// streaming lists ignores `sendInitialEvents` and never sends the bookmark.
const STREAMING_INIT_TIMEOUT: Duration = Duration::from_secs(120);

/// What every watch of one scope shares: client, scope, configuration,
/// the writer's channel, metrics and the shutdown token.
type WatchParts<'a> = (
    &'a kube::Client,
    &'a Option<String>,
    &'a WatchConfig,
    &'a mpsc::Sender<Arrival>,
    &'a Metrics,
    &'a CancellationToken,
);

/// One watch and its retry loop.
struct Watch<K: Watched> {
    client: kube::Client,
    config: RawConfig,
    /// The relay's feed, when this kind is relayed.
    feed: Option<Feed>,
    streaming: StreamingList,
    mapper: Mapper<K>,
    tx: mpsc::Sender<Arrival>,
    metrics: Metrics,
    shutdown: CancellationToken,
}

impl<K: Watched> Watch<K> {
    /// One scope's watch of `K`, from what every watch of the scope shares.
    fn new(
        (client, scope, cfg, tx, metrics, shutdown): WatchParts<'_>,
        label_selector: Option<String>,
    ) -> Self {
        let mut config = raw_config::<K>(scope.as_deref(), cfg, label_selector);
        let feed = match (&cfg.relay, K::RELAYED) {
            (Some(relay), Some(kind)) => {
                let feed = relay.feed(kind, scope.clone());
                config.seen = feed.as_ref().map(Feed::seen);
                feed
            }
            _ => None,
        };
        Self {
            client: client.clone(),
            config,
            feed,
            streaming: cfg.streaming,
            mapper: Mapper::new(scope.clone(), metrics.clone()),
            tx: tx.clone(),
            metrics: metrics.clone(),
            shutdown: shutdown.clone(),
        }
    }

    fn restart(&self, reason: &'static str, retry: Retry) {
        debug_assert!(RESTART_REASONS.contains(&reason), "unlisted {reason}");
        self.metrics
            .watch_restarts
            .get_or_create(&RestartLabels {
                resource: K::RESOURCE,
                reason,
                retry: retry.label(),
            })
            .inc();
    }

    async fn run(mut self) {
        // Every reason at 0 before the first error, so the restart alert's
        // increase() counts the first restart too (see metrics.rs);
        // the same for the first skipped object.
        let _ = self.metrics.watch_skipped.get_or_create(&ResourceLabels {
            resource: K::RESOURCE,
        });
        for reason in RESTART_REASONS {
            for retry in [Retry::Resume, Retry::Relist] {
                let _ = self.metrics.watch_restarts.get_or_create(&RestartLabels {
                    resource: K::RESOURCE,
                    reason,
                    retry: retry.label(),
                });
            }
        }
        let mut streaming = self.streaming != StreamingList::Off;
        // Auto may fall back until the first streaming list completes.
        let mut may_fall_back = self.streaming == StreamingList::Auto;
        // Two backoffs, chosen by what the watcher does next. A relist is
        // the expensive request ("reconnecting clients flood list operations
        // during recovery"), so it keeps client-go's long backoff; a watch
        // from a known resourceVersion costs the API server little, so it
        // comes back within a second or so of the server's return instead of
        // after a backoff that grew all through an outage.
        let mut relist_backoff = DefaultBackoff::default();
        let mut resume_backoff = ResumeBackoff::default();
        let mut stood_in = false;
        loop {
            // A new watcher starts empty: its first request is a list.
            let mut resumable = false;
            tracing::debug!(streaming, "starting watcher");
            let mut stream = raw_watcher::<K>(
                self.client.clone(),
                RawConfig {
                    streaming,
                    ..self.config.clone()
                },
            )
            .boxed();
            let mut init_deadline: Option<Instant> = None;
            let refused = loop {
                let next = tokio::select! {
                    biased;
                    () = self.shutdown.cancelled() => return,
                    () = sleep_until(init_deadline) => {
                        tracing::warn!(
                            timeout = ?STREAMING_INIT_TIMEOUT,
                            "streaming list did not complete, falling back to list-then-watch"
                        );
                        break true;
                    }
                    next = stream.next() => next,
                };
                let at = std::time::Instant::now();
                match next {
                    // The watcher never ends; if it did, start a new one.
                    None => break false,
                    Some(Ok(event)) => {
                        // kube-runtime's watcher (`--wire json`) sends
                        // `Init` before it asks for the list: it proves
                        // nothing answered. Resetting on it kept the
                        // backoff at its first step all through an outage.
                        if !matches!(event, Event::Init) {
                            relist_backoff.reset();
                            resume_backoff.reset();
                        }
                        match event {
                            Event::Init => resumable = false,
                            Event::InitDone => resumable = true,
                            _ => {}
                        }
                        if may_fall_back {
                            match event {
                                Event::Init => {
                                    init_deadline = Some(Instant::now() + STREAMING_INIT_TIMEOUT);
                                }
                                Event::InitDone => {
                                    may_fall_back = false;
                                    init_deadline = None;
                                }
                                _ => {}
                            }
                        }
                        if let Some(feed) = &mut self.feed {
                            feed.on_event(&event, K::relayed);
                        }
                        if let Some(update) = self.mapper.on_event(event) {
                            let send = self.tx.send(Arrival { update, at });
                            tokio::select! {
                                biased;
                                () = self.shutdown.cancelled() => return,
                                sent = send => if sent.is_err() {
                                    tracing::debug!("index writer gone, stopping watch");
                                    return;
                                },
                            }
                        }
                    }
                    Some(Err(error)) => {
                        if may_fall_back && streaming_refused(&error) {
                            tracing::warn!(
                                %error,
                                "server refused streaming list, falling back to list-then-watch"
                            );
                            break true;
                        }
                        if K::OPTIONAL
                            && !stood_in
                            && status(&error).is_some_and(|s| s.code == 403 || s.code == 404)
                        {
                            stood_in = true;
                            tracing::error!(
                                error = %super::failure::Failure::of_watcher(&error),
                                "cannot list {}: {}",
                                K::RESOURCE,
                                K::WITHOUT
                            );
                            let update = K::update(Change::Reset {
                                namespace: self.mapper.namespace().map(str::to_owned),
                                items: Vec::new(),
                            });
                            if self.tx.send(Arrival { update, at }).await.is_err() {
                                return;
                            }
                        }
                        resumable = resumable && !relists(&error);
                        let retry = if resumable {
                            Retry::Resume
                        } else {
                            Retry::Relist
                        };
                        let reason = restart_reason(&error);
                        self.restart(reason, retry);
                        let delay = retry_after(&error)
                            .or_else(|| match retry {
                                Retry::Resume => resume_backoff.next(),
                                Retry::Relist => relist_backoff.next(),
                            })
                            .unwrap_or(Duration::from_secs(30));
                        tracing::warn!(
                            error = %super::failure::Failure::of_watcher(&error),
                            reason,
                            retry = retry.label(),
                            ?delay,
                            "watch failed, retrying"
                        );
                        tokio::select! {
                            biased;
                            () = self.shutdown.cancelled() => return,
                            () = tokio::time::sleep(delay) => {}
                        }
                    }
                }
            };
            if refused {
                self.restart("streaming_refused", Retry::Relist);
                streaming = false;
                may_fall_back = false;
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// What the watcher does after an error: [`raw_watcher`], like the
/// kube-runtime watcher whose states it keeps, holds on to its
/// resourceVersion after a failed watch (state `Resume`, kube-runtime's
/// `InitListed`) and goes back to a list only after 410 Gone, a failed or
/// incomplete first list, or an object without a resourceVersion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Retry {
    Resume,
    Relist,
}

impl Retry {
    fn label(self) -> &'static str {
        match self {
            Retry::Resume => "resume",
            Retry::Relist => "relist",
        }
    }
}

/// Whether the watcher drops its resourceVersion after `error` (so its
/// next request is a list). Errors before the first `InitDone` of a watcher
/// also lead to a list, which the retry loop tracks itself.
fn relists(error: &watcher::Error) -> bool {
    status(error).is_some_and(|s| s.code == 410)
        || matches!(
            error,
            watcher::Error::InitialListFailed(_) | watcher::Error::NoResourceVersion
        )
}

/// The backoff of a watch that resumes from a known resourceVersion:
/// 250 ms doubling to a 1 s cap, each delay plus up to 50% jitter (so many
/// replicas do not come back in step), reset by any event. The API server
/// is back within 1.5 s of its return.
#[derive(Debug, Default)]
struct ResumeBackoff {
    attempt: u32,
}

impl ResumeBackoff {
    const MIN: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(1);

    fn reset(&mut self) {
        self.attempt = 0;
    }

    fn next(&mut self) -> Option<Duration> {
        let base = Self::MIN
            .saturating_mul(1 << self.attempt.min(8))
            .min(Self::MAX);
        self.attempt = self.attempt.saturating_add(1);
        Some(base.mul_f64(1.0 + fastrand::f64() * 0.5))
    }
}

/// The API `Status` an error carries, if any.
fn status(error: &watcher::Error) -> Option<&Status> {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => match e {
            kube::Error::Api(s) => Some(s),
            _ => None,
        },
        watcher::Error::WatchError(s) => Some(s),
        watcher::Error::NoResourceVersion => None,
    }
}

/// Every `reason` label of `podns_watch_restarts`: what [`restart_reason`]
/// gives, and `streaming_refused` (a fallback to list + watch).
pub const RESTART_REASONS: [&str; 7] = [
    "expired_410",
    "throttled_429",
    "unavailable",
    "list_failed",
    "no_resource_version",
    "watch_failed",
    "streaming_refused",
];

/// The `reason` label of a watch restart.
pub fn restart_reason(error: &watcher::Error) -> &'static str {
    match status(error).map(|s| s.code) {
        Some(410) => return "expired_410",
        Some(429) => return "throttled_429",
        Some(500..=599) => return "unavailable",
        _ => {}
    }
    match error {
        watcher::Error::InitialListFailed(kube::Error::HyperError(_) | kube::Error::Service(_))
        | watcher::Error::WatchStartFailed(kube::Error::HyperError(_) | kube::Error::Service(_)) => {
            "unavailable"
        }
        watcher::Error::InitialListFailed(_) => "list_failed",
        watcher::Error::NoResourceVersion => "no_resource_version",
        _ => "watch_failed",
    }
}

/// A 429's `details.retryAfterSeconds`: the server says exactly when to
/// come back, which beats any backoff guess.
pub fn retry_after(error: &watcher::Error) -> Option<Duration> {
    let s = status(error).filter(|s| s.code == 429)?;
    let secs = s.details.as_ref()?.retry_after_seconds;
    (secs > 0).then(|| Duration::from_secs(u64::from(secs)))
}

/// Whether the server refused `sendInitialEvents`: a 4xx when opening the
/// watch or as its first event. 410 (expired) and 429 (throttled) are the
/// usual watch errors, and 401/403 are about credentials, not streaming:
/// none of them says the server cannot stream.
pub fn streaming_refused(error: &watcher::Error) -> bool {
    let s = match error {
        watcher::Error::WatchStartFailed(kube::Error::Api(s)) => s,
        watcher::Error::WatchError(s) => s,
        _ => return false,
    };
    (400..500).contains(&s.code) && !matches!(s.code, 401 | 403 | 410 | 429)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::types::{ObjKey, Update};
    use crate::k8s::updates::tests::skipped;
    use serde_json::json;

    fn api_err(code: u16, retry: Option<u32>) -> kube::Error {
        let mut v = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "m", "reason": "r", "code": code});
        if let Some(r) = retry {
            v["details"] = json!({"retryAfterSeconds": r});
        }
        kube::Error::Api(Box::new(serde_json::from_value::<Status>(v).unwrap()))
    }

    fn watch_err(code: u16) -> watcher::Error {
        watcher::Error::WatchError(Box::new(
            serde_json::from_value::<Status>(json!({"code": code, "message": "m"})).unwrap(),
        ))
    }

    #[test]
    fn fallback_decision() {
        use watcher::Error::*;
        assert!(streaming_refused(&WatchStartFailed(api_err(400, None))));
        assert!(streaming_refused(&WatchStartFailed(api_err(422, None))));
        assert!(streaming_refused(&watch_err(400)));
        for code in [401, 403, 410, 429, 500, 503] {
            assert!(
                !streaming_refused(&WatchStartFailed(api_err(code, None))),
                "{code}"
            );
        }
        assert!(!streaming_refused(&InitialListFailed(api_err(400, None))));
        assert!(!streaming_refused(&WatchFailed(api_err(400, None))));
        assert!(!streaming_refused(&NoResourceVersion));
    }

    #[test]
    fn retry_after_only_from_429_details() {
        use watcher::Error::*;
        assert_eq!(
            retry_after(&InitialListFailed(api_err(429, Some(7)))),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(&WatchStartFailed(api_err(429, Some(2)))),
            Some(Duration::from_secs(2))
        );
        assert_eq!(retry_after(&InitialListFailed(api_err(429, None))), None);
        assert_eq!(retry_after(&InitialListFailed(api_err(429, Some(0)))), None);
        assert_eq!(retry_after(&InitialListFailed(api_err(503, Some(5)))), None);
        assert_eq!(retry_after(&NoResourceVersion), None);
    }

    #[test]
    fn restart_reasons() {
        use watcher::Error::*;
        assert_eq!(restart_reason(&watch_err(410)), "expired_410");
        assert_eq!(
            restart_reason(&InitialListFailed(api_err(410, None))),
            "expired_410"
        );
        assert_eq!(
            restart_reason(&InitialListFailed(api_err(429, Some(1)))),
            "throttled_429"
        );
        assert_eq!(
            restart_reason(&WatchStartFailed(api_err(503, None))),
            "unavailable"
        );
        assert_eq!(
            restart_reason(&InitialListFailed(api_err(403, None))),
            "list_failed"
        );
        assert_eq!(
            restart_reason(&WatchStartFailed(api_err(403, None))),
            "watch_failed"
        );
        assert_eq!(restart_reason(&NoResourceVersion), "no_resource_version");
        let io = kube::Error::ReadEvents(std::io::Error::other("reset"));
        assert_eq!(restart_reason(&WatchFailed(io)), "watch_failed");
    }

    #[test]
    fn relist_only_after_410_or_a_failed_list() {
        use watcher::Error::*;
        assert!(relists(&watch_err(410)));
        assert!(relists(&WatchStartFailed(api_err(410, None))));
        assert!(relists(&InitialListFailed(api_err(503, None))));
        assert!(relists(&NoResourceVersion));
        assert!(!relists(&WatchStartFailed(api_err(503, None))));
        assert!(!relists(&WatchStartFailed(api_err(429, Some(1)))));
        assert!(!relists(&watch_err(500)));
        let io = kube::Error::ReadEvents(std::io::Error::other("reset"));
        assert!(!relists(&WatchFailed(io)));
    }

    #[test]
    fn resume_backoff_stays_short_and_resets() {
        let mut b = ResumeBackoff::default();
        let first = b.next().unwrap();
        assert!(first >= ResumeBackoff::MIN && first <= ResumeBackoff::MIN.mul_f64(1.5));
        for _ in 0..50 {
            let d = b.next().unwrap();
            assert!(d <= ResumeBackoff::MAX.mul_f64(1.5), "{d:?}");
        }
        assert!(b.next().unwrap() >= ResumeBackoff::MAX);
        b.reset();
        assert!(b.next().unwrap() <= ResumeBackoff::MIN.mul_f64(1.5));
    }

    #[test]
    fn scopes_and_list_config() {
        let cfg = WatchConfig {
            namespaces: vec!["a".into(), "b".into(), "a".into()],
            label_selector: Some("app=x".into()),
            ..WatchConfig::default()
        };
        assert_eq!(cfg.scopes(), vec![Some("a".into()), Some("b".into())]);
        assert_eq!(pod_scopes(&cfg), 2);
        assert_eq!(service_scopes(&WatchConfig::default()), 1);
        assert_eq!(WatchConfig::default().scopes(), vec![None]);

        let c = raw_config::<SlimPod>(Some("a"), &cfg, cfg.label_selector.clone());
        assert_eq!(c.url_path, "/api/v1/namespaces/a/pods");
        assert_eq!(c.list_semantic, ListSemantic::Any);
        assert_eq!(c.label_selector.as_deref(), Some("app=x"));
        let c = raw_config::<SlimJob>(
            None,
            &WatchConfig {
                consistent_list: true,
                ..cfg
            },
            None,
        );
        assert_eq!(c.url_path, "/apis/batch/v1/jobs");
        assert_eq!(c.list_semantic, ListSemantic::MostRecent);
        assert_eq!(c.label_selector, None);
    }

    #[test]
    fn endpoint_slices_are_watched_by_label_selector_when_asked() {
        let cfg = WatchConfig {
            namespaces: vec!["a".into(), "b".into()],
            endpoint_slices: true,
            ..WatchConfig::default()
        };
        assert_eq!(slice_scopes(&cfg), 2);
        assert_eq!(slice_scopes(&WatchConfig::default()), 0);
        let c = raw_config::<SlimEndpointSlice>(Some("a"), &cfg, Some(USER_SLICES.into()));
        assert_eq!(
            c.url_path,
            "/apis/discovery.k8s.io/v1/namespaces/a/endpointslices"
        );
        let selector = c.label_selector.unwrap();
        assert!(
            selector.contains("managed-by!=endpointslice-controller.k8s.io"),
            "{selector}"
        );
        assert!(!selector.contains("mirroring"), "{selector}");
    }

    /// A tiny API server: refuses streaming lists with 422 like a server
    /// without the WatchList feature, serves lists and one watch event.
    mod against_fake_server {
        use super::*;
        use axum::extract::{RawQuery, State};
        use axum::http::StatusCode;
        use axum::response::IntoResponse;
        use std::sync::{Arc, Mutex};

        #[derive(Clone, Default)]
        struct Fake {
            queries: Arc<Mutex<Vec<String>>>,
        }

        async fn pods(State(f): State<Fake>, RawQuery(q): RawQuery) -> axum::response::Response {
            let q = q.unwrap_or_default();
            let first_watch = {
                let mut qs = f.queries.lock().unwrap();
                qs.push(q.clone());
                q.contains("watch=true")
                    && qs.iter().filter(|q| q.contains("watch=true")).count() == 2
            };
            if q.contains("sendInitialEvents=true") {
                let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "Invalid", "code": 422,
                    "message": "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"});
                return (StatusCode::UNPROCESSABLE_ENTITY, body.to_string()).into_response();
            }
            if q.contains("watch=true") {
                if first_watch {
                    let ev = json!({"type": "ADDED", "object": {"kind": "Pod", "apiVersion": "v1",
                        "metadata": {"name": "late", "namespace": "ml", "uid": "u-late", "resourceVersion": "11"},
                        "status": {"podIP": "10.0.0.9"}}});
                    let chunks =
                        futures::stream::iter([Ok::<_, std::io::Error>(format!("{ev}\n"))])
                            .chain(futures::stream::pending());
                    return axum::body::Body::from_stream(chunks).into_response();
                }
                return axum::body::Body::from_stream(futures::stream::pending::<
                    Result<String, std::io::Error>,
                >())
                .into_response();
            }
            let list = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"},
            "items": [
                {"metadata": {"name": "a", "namespace": "ml", "uid": "u-a", "resourceVersion": "9",
                    "managedFields": [{"manager": "x"}]},
                 "status": {"podIP": "10.0.0.1"}},
                {"metadata": {"name": "bad", "namespace": "ml", "uid": "u-bad", "resourceVersion": "9"},
                 "status": {"podIP": ["10.0.0.2"]}}
            ]});
            list.to_string().into_response()
        }

        async fn services(RawQuery(q): RawQuery) -> axum::response::Response {
            let q = q.unwrap_or_default();
            if q.contains("sendInitialEvents=true") {
                return (StatusCode::BAD_REQUEST, "no streaming here").into_response();
            }
            if q.contains("watch=true") {
                return axum::body::Body::from_stream(futures::stream::pending::<
                    Result<String, std::io::Error>,
                >())
                .into_response();
            }
            json!({"kind": "ServiceList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"}, "items": []})
                .to_string()
                .into_response()
        }

        #[tokio::test]
        async fn auto_falls_back_to_list_then_watch() {
            let fake = Fake::default();
            let app = axum::Router::new()
                .route("/api/v1/pods", axum::routing::get(pods))
                .route("/api/v1/services", axum::routing::get(services))
                .with_state(fake.clone());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let server = tokio::spawn(async move { axum::serve(listener, app).await });

            let url: http::Uri = format!("http://{addr}").parse().unwrap();
            let client = kube::Client::try_from(kube::Config::new(url)).unwrap();
            let (tx, mut rx) = mpsc::channel(16);
            let metrics = Metrics::new();
            let shutdown = CancellationToken::new();
            let mut tasks = JoinSet::new();
            spawn_watchers(
                client,
                &WatchConfig::default(),
                tx,
                metrics.clone(),
                &mut tasks,
                shutdown.clone(),
            );

            let deadline = std::time::Duration::from_secs(10);
            let (mut pod_reset, mut svc_reset, mut late) = (None, false, false);
            while pod_reset.is_none() || !svc_reset || !late {
                let a = match tokio::time::timeout(deadline, rx.recv()).await {
                    Ok(a) => a.unwrap(),
                    Err(_) => panic!(
                        "timed out: {:?} {pod_reset:?} {svc_reset} {late}",
                        fake.queries.lock().unwrap()
                    ),
                };
                match a.update {
                    Update::Pod(Change::Listed { namespace, keys }) => {
                        assert_eq!(namespace, None);
                        pod_reset = Some(keys);
                    }
                    Update::Service(Change::Listed { keys, .. }) => {
                        assert!(keys.is_empty());
                        svc_reset = true;
                    }
                    // The first list's objects come early too.
                    Update::Pod(Change::Apply(p)) if pod_reset.is_none() => {
                        assert_eq!(p.key, ObjKey::new("ml", "a"));
                    }
                    Update::Pod(Change::Apply(p)) => {
                        assert_eq!(p.key, ObjKey::new("ml", "late"));
                        late = true;
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            let keys = pod_reset.unwrap();
            assert_eq!(keys, [ObjKey::new("ml", "a")]);
            assert_eq!(skipped(&metrics), 1);
            let refused = metrics
                .watch_restarts
                .get_or_create(&RestartLabels {
                    resource: "pods",
                    reason: "streaming_refused",
                    retry: "relist",
                })
                .get();
            assert_eq!(refused, 1);

            // The fallback list came from the watch cache, unpaged.
            let queries = fake.queries.lock().unwrap().clone();
            let list = queries.iter().find(|q| !q.contains("watch=true")).unwrap();
            assert!(list.contains("resourceVersion=0"), "{list}");
            assert!(!list.contains("limit="), "{list}");

            shutdown.cancel();
            while let Some(r) = tokio::time::timeout(deadline, tasks.join_next())
                .await
                .unwrap()
            {
                r.unwrap();
            }
            server.abort();
        }
    }
}
