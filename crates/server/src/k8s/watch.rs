//! The retry loop of every watch: one task per (resource, namespace
//! scope) lists and watches through [`wire`](super::wire) (kube-runtime's
//! watcher states, for either wire), resumes from the last
//! resourceVersion, relists after 410 Gone, and waits out its backoff; it
//! hands each event to the watch's [`Tap`], which the
//! caller chose (the index writer's, a relay's feed). It knows no reader.
//!
//! Each task owns its retry loop instead of kube-runtime's
//! `.default_backoff()`, because it must also honour a 429's
//! `retryAfterSeconds`, count restarts by reason, and rebuild the watcher
//! without streaming lists when the server refuses them (kube-runtime does
//! not fall back by itself).

use std::marker::PhantomData;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::core::Status;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff, Event, ListSemantic};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::objects::{SlimEndpointSlice, SlimJob, SlimNode, SlimPod, SlimService, SlimServiceCidr};
use super::tap::{Tap, Taps, Watched};
use super::wire::{Listed, RawConfig, Wire, raw_watcher_from};
use crate::metrics::{Metrics, RestartLabels};

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
    /// The compact stream's dictionaries received, kept for every watch
    /// started with this configuration or a clone of it (a node instance's
    /// watches of all its namespaces, and their reconnects), so a relay
    /// sends each once per node instance.
    pub dicts: Arc<super::compact::Held>,
    /// How long a watch may go without an event or a bookmark before it
    /// is reopened from its resourceVersion (`--watch-progress-timeout`);
    /// `None`: never.
    pub progress: Option<Duration>,
    /// How long a watch may deliver nothing before a probe checks that
    /// the server holds no change it missed (`--watch-probe-interval`,
    /// [`super::wire::Deaf`]); `None`: never.
    pub probe: Option<Duration>,
    /// The server bookmarks every watch at least every minute (a podns
    /// relay, for a node instance): `progress` covers a watch from its
    /// start, not only once it has moved.
    pub steady_bookmarks: bool,
    /// A relay's watch multiplexer, shared by every watch started with
    /// this configuration ([`super::mux`]): a node instance's.
    pub mux: Option<super::mux::Mux>,
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

/// Starts the watches `cfg` asks for in `tasks`, each handing its events
/// to its tap from `taps`: per namespace scope one of Pods and one of
/// Services (and of Jobs and EndpointSlices when asked), and with
/// `ranges` one of Nodes and one of ServiceCIDRs. They run until
/// `shutdown` is cancelled or a tap reads no more (the writer is gone).
pub fn spawn_watchers(
    client: kube::Client,
    cfg: &WatchConfig,
    taps: &impl Taps,
    metrics: Metrics,
    tasks: &mut JoinSet<()>,
    shutdown: CancellationToken,
) {
    let start = Start {
        client: &client,
        cfg,
        taps,
        metrics: &metrics,
        shutdown: &shutdown,
    };
    for scope in cfg.scopes() {
        let ns = scope.as_deref();
        if cfg.jobs {
            start.spawn::<SlimJob>(tasks, ns, None);
        }
        if cfg.endpoint_slices {
            start.spawn::<SlimEndpointSlice>(tasks, ns, Some(USER_SLICES.to_owned()));
        }
        start.spawn::<SlimPod>(tasks, ns, cfg.label_selector.clone());
        start.spawn::<SlimService>(tasks, ns, None);
    }
    if cfg.ranges {
        // Cluster-scoped, one watch each whatever the namespaces.
        start.spawn::<SlimNode>(tasks, None, None);
        start.spawn::<SlimServiceCidr>(tasks, None, None);
    }
}

/// What every watch [`spawn_watchers`] starts shares: the client, the
/// configuration, the taps, the metrics and the shutdown token.
struct Start<'a, T> {
    client: &'a kube::Client,
    cfg: &'a WatchConfig,
    taps: &'a T,
    metrics: &'a Metrics,
    shutdown: &'a CancellationToken,
}

impl<T: Taps> Start<'_, T> {
    /// The watch of `K` in `namespace` (`None`: every namespace, or a
    /// cluster-scoped kind), with its tap.
    fn spawn<K: Watched>(
        &self,
        tasks: &mut JoinSet<()>,
        namespace: Option<&str>,
        label_selector: Option<String>,
    ) {
        let mut tap = self.taps.tap::<K>(namespace);
        let mut config = raw_config::<K>(namespace, self.cfg, label_selector);
        config.seen = tap.resume_version();
        config.bookmarked = tap.bookmarks();
        config.held = Some(self.cfg.dicts.clone());
        config.currency = Some(super::wire::Currency {
            resource: K::RESOURCE,
            fresh: self.metrics.staleness.watch(K::RESOURCE),
            probes: self.metrics.watch_probes.clone(),
        });
        let saved = tap.saved();
        let watch = Watch {
            saved,
            client: self.client.clone(),
            config,
            streaming: self.cfg.streaming,
            tap,
            metrics: self.metrics.clone(),
            shutdown: self.shutdown.clone(),
            kind: PhantomData,
        };
        let span = if K::KIND.namespaced() {
            let ns = namespace.unwrap_or("*");
            tracing::info_span!("watch", resource = K::RESOURCE, namespace = %ns)
        } else {
            tracing::info_span!("watch", resource = K::RESOURCE)
        };
        tasks.spawn(watch.run().instrument(span));
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
        bookmarked: None,
        held: None,
        progress: cfg.progress,
        mux: cfg.mux.clone(),
        probe: cfg.probe,
        steady_bookmarks: cfg.steady_bookmarks,
        currency: None,
    }
}

/// How long a streaming list may run without its end bookmark before
/// `--streaming-list auto` gives up on it. An API server that predates
/// streaming lists ignores `sendInitialEvents` and never sends the bookmark.
const STREAMING_INIT_TIMEOUT: Duration = Duration::from_secs(120);

/// One watch and its retry loop.
struct Watch<K, T> {
    client: kube::Client,
    config: RawConfig,
    streaming: StreamingList,
    /// Where each event goes.
    tap: T,
    metrics: Metrics,
    shutdown: CancellationToken,
    /// The list the first watcher starts from (a node instance's saved
    /// scope), if any.
    saved: Option<Listed<K>>,
    kind: PhantomData<fn() -> K>,
}

/// How one watcher ended.
enum Ended {
    /// Shut down, or the tap reads no more: the watch is over.
    Stop,
    /// `--streaming-list auto` falls back to list-then-watch.
    StreamingRefused,
    /// The stream ended: a new watcher starts.
    Again,
}

/// What the retry loop carries from one watcher to the next.
struct Attempts {
    /// Ask for a streaming list.
    streaming: bool,
    /// Auto may fall back until the first streaming list completes.
    may_fall_back: bool,
    /// Two backoffs, chosen by what the watcher does next. A relist is
    /// the expensive request ("reconnecting clients flood list operations
    /// during recovery"), so it keeps client-go's long backoff; a watch
    /// from a known resourceVersion costs the API server little, so it
    /// comes back within a second or so of the server's return instead of
    /// after a backoff that grew all through an outage.
    relist_backoff: DefaultBackoff,
    resume_backoff: ResumeBackoff,
    /// An optional resource was refused and its tap told so (once).
    stood_in: bool,
}

/// Where one watcher is.
#[derive(Default)]
struct Progress {
    /// Its list is complete: after an error it resumes from the last
    /// resourceVersion instead of listing again.
    resumable: bool,
    /// When a streaming list that may still fall back gives up.
    init_deadline: Option<Instant>,
    /// It started from a saved list whose end has not come yet: that
    /// list says nothing about streaming.
    saved: bool,
}

impl Attempts {
    fn new(streaming: StreamingList) -> Self {
        Self {
            streaming: streaming != StreamingList::Off,
            may_fall_back: streaming == StreamingList::Auto,
            relist_backoff: DefaultBackoff::default(),
            resume_backoff: ResumeBackoff::default(),
            stood_in: false,
        }
    }

    /// An event came: the server answers again, and a list starts or ends.
    fn on_event<K>(&mut self, event: &Event<K>, at: &mut Progress) {
        // kube-runtime's watcher (`--wire json`) sends `Init` before it
        // asks for the list: it proves nothing answered. Resetting on it
        // kept the backoff at its first step all through an outage.
        if !matches!(event, Event::Init) {
            self.relist_backoff.reset();
            self.resume_backoff.reset();
        }
        match event {
            Event::Init => at.resumable = false,
            Event::InitDone => at.resumable = true,
            _ => {}
        }
        if at.saved {
            at.saved = !matches!(event, Event::InitDone);
        } else if self.may_fall_back {
            match event {
                Event::Init => {
                    at.init_deadline = Some(Instant::now() + STREAMING_INIT_TIMEOUT);
                }
                Event::InitDone => {
                    self.may_fall_back = false;
                    at.init_deadline = None;
                }
                _ => {}
            }
        }
    }
}

impl<K: Watched, T: Tap<K>> Watch<K, T> {
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

    /// Every reason at 0 before the first error, so the restart alert's
    /// increase() counts the first restart too; the same for the first
    /// skipped object (as the role does: `Metrics::watch_from_zero`).
    fn count_from_zero(&self) {
        self.metrics.watch_from_zero(
            K::RESOURCE,
            &RESTART_REASONS,
            &[Retry::Resume.label(), Retry::Relist.label()],
        );
        if self.config.probe.is_some() {
            for result in crate::metrics::PROBE_RESULTS {
                let _ = self
                    .metrics
                    .watch_probes
                    .get_or_create(&crate::metrics::ProbeLabels {
                        resource: K::RESOURCE,
                        result,
                    });
            }
        }
    }

    async fn run(mut self) {
        self.count_from_zero();
        let mut attempts = Attempts::new(self.streaming);
        loop {
            match self.watcher(&mut attempts).await {
                Ended::Stop => return,
                Ended::StreamingRefused => {
                    self.restart("streaming_refused", Retry::Relist);
                    attempts.streaming = false;
                    attempts.may_fall_back = false;
                }
                Ended::Again => {}
            }
        }
    }

    /// One watcher, from its first request (a list) until it ends: each
    /// event to the tap, each error retried after its wait.
    async fn watcher(&mut self, attempts: &mut Attempts) -> Ended {
        // A new watcher starts empty (its first request is a list), or
        // the first from a saved list (its first request a watch).
        let saved = self.saved.take();
        let mut at = Progress {
            saved: saved.is_some(),
            ..Progress::default()
        };
        tracing::debug!(
            streaming = attempts.streaming,
            saved = at.saved,
            "starting watcher"
        );
        let mut stream = raw_watcher_from::<K>(
            self.client.clone(),
            RawConfig {
                streaming: attempts.streaming,
                ..self.config.clone()
            },
            saved,
        )
        .boxed();
        loop {
            let next = tokio::select! {
                biased;
                () = self.shutdown.cancelled() => return Ended::Stop,
                () = sleep_until(at.init_deadline) => {
                    tracing::warn!(
                        timeout = ?STREAMING_INIT_TIMEOUT,
                        "streaming list did not complete, falling back to list-then-watch"
                    );
                    return Ended::StreamingRefused;
                }
                next = stream.next() => next,
            };
            let arrived = std::time::Instant::now();
            let flow = match next {
                // The watcher never ends; if it did, start a new one.
                None => return Ended::Again,
                Some(Ok(event)) => {
                    attempts.on_event(&event, &mut at);
                    self.tap.event(&event, arrived).await
                }
                Some(Err(error)) => {
                    if attempts.may_fall_back && streaming_refused(&error) {
                        tracing::warn!(
                            %error,
                            "server refused streaming list, falling back to list-then-watch"
                        );
                        return Ended::StreamingRefused;
                    }
                    at.resumable = at.resumable && !relists(&error);
                    self.retry(&error, attempts, at.resumable, arrived).await
                }
            };
            if flow.is_break() {
                return Ended::Stop;
            }
        }
    }

    /// After an error: an optional resource the server refuses is stood
    /// in for once (the tap is told), the restart is counted, and the next
    /// attempt waits for the server's `retryAfterSeconds`, else for the
    /// backoff of what comes next (a resume or a relist).
    async fn retry(
        &mut self,
        error: &watcher::Error,
        attempts: &mut Attempts,
        resumable: bool,
        arrived: std::time::Instant,
    ) -> ControlFlow<()> {
        if K::OPTIONAL
            && !attempts.stood_in
            && status(error).is_some_and(|s| s.code == 403 || s.code == 404)
        {
            attempts.stood_in = true;
            // It stands for "none" until the server lets it list: no
            // staleness to count meanwhile.
            if let Some(c) = &self.config.currency {
                c.fresh.ignore();
            }
            tracing::error!(
                error = %super::failure::Failure::of_watcher(error),
                "cannot list {}: {}",
                K::RESOURCE,
                K::WITHOUT
            );
            self.tap.refused(arrived).await?;
        }
        let retry = if resumable {
            Retry::Resume
        } else {
            Retry::Relist
        };
        let reason = restart_reason(error);
        self.restart(reason, retry);
        if let Some(e) = undecodable(error) {
            self.metrics
                .watch_decode_errors
                .get_or_create(&crate::metrics::DecodeErrorLabels {
                    resource: K::RESOURCE,
                    error: e.label(),
                })
                .inc();
        }
        let delay = retry_after(error)
            .or_else(|| match retry {
                Retry::Resume => attempts.resume_backoff.next(),
                Retry::Relist => attempts.relist_backoff.next(),
            })
            .unwrap_or(Duration::from_secs(30));
        if reason == "stalled" {
            // A watch that went quiet is reopened where it was: routine
            // when its kind simply stopped changing.
            tracing::info!(
                reason,
                retry = retry.label(),
                ?delay,
                "watch silent, reopening"
            );
        } else {
            tracing::warn!(
                error = %super::failure::Failure::of_watcher(error),
                reason,
                retry = retry.label(),
                ?delay,
                "watch failed, retrying"
            );
        }
        tokio::select! {
            biased;
            () = self.shutdown.cancelled() => ControlFlow::Break(()),
            () = tokio::time::sleep(delay) => ControlFlow::Continue(()),
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
        || undecodable(error).is_some()
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
pub const RESTART_REASONS: [&str; 9] = [
    "expired_410",
    "throttled_429",
    "unavailable",
    "list_failed",
    "no_resource_version",
    "watch_failed",
    "streaming_refused",
    "stalled",
    "deaf",
];

/// A relay's compact stream that could not be decoded (`wire` relists).
fn undecodable(error: &watcher::Error) -> Option<&super::compact::DecodeError> {
    match error {
        watcher::Error::WatchFailed(e) => super::compact::DecodeError::of(e),
        _ => None,
    }
}

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
        watcher::Error::WatchFailed(e) if super::wire::is_stalled(e) => "stalled",
        watcher::Error::WatchFailed(e) if super::wire::is_deaf(e) => "deaf",
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
    use crate::index::types::{Change, ObjKey, Update};
    use crate::k8s::updates::ToWriter;
    use crate::k8s::updates::tests::skipped;
    use serde_json::json;
    use tokio::sync::mpsc;

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
        let deaf = kube::Error::ReadEvents(std::io::Error::other(super::super::wire::Deaf {
            silent: Duration::from_secs(10),
            from: "1".into(),
            missed: "2".into(),
        }));
        let deaf = WatchFailed(deaf);
        assert_eq!(restart_reason(&deaf), "deaf");
        assert!(!relists(&deaf));
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
        // A relay's compact stream the watch could not decode: what it
        // held may have missed a change.
        let bad = super::super::compact::DecodeError::Truncated(3);
        let io = kube::Error::ReadEvents(std::io::Error::other(bad));
        assert!(relists(&WatchFailed(io)));
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
            let taps = ToWriter::new(tx, metrics.clone(), shutdown.clone());
            spawn_watchers(
                client,
                &WatchConfig::default(),
                &taps,
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
