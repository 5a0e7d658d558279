//! What a watch hands its events to. Each watch has one [`Tap`], made for
//! it by [`Taps`] from the kind and the namespace it watches: the index
//! writer's ([`updates`](super::updates): events become index updates) and,
//! on a relay, the relay's feed (`relay::feed`: events become the relay's
//! objects and history). The retry loop ([`watch`](super::watch)) knows
//! neither: it lists, watches, resumes and relists, and hands each event,
//! in order, to its tap. A pair of taps is a tap, and so is an optional
//! one.
//!
//! [`Watched`] is what the loop and the taps ask of a kind: its decoding
//! and conversion ([`Slim`]), its `resource` metric label, and whether the
//! cluster may refuse it.

use std::future::Future;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use kube::runtime::watcher::Event;

use super::objects::{
    Slim, SlimEndpointSlice, SlimJob, SlimNode, SlimPod, SlimService, SlimServiceCidr,
};
use super::wire::Listed;

/// A resource podns watches: a kind ([`Slim`]: its decoding, conversion,
/// index update and whether the relay serves it) and what its watch adds.
pub trait Watched:
    Slim<Info: Clone + Send + 'static>
    + kube::Resource<DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// The `resource` metric label.
    const RESOURCE: &'static str;
    /// An optional resource (the rank view's Jobs): when the API refuses it
    /// (403 without RBAC, 404 on a server without it), the taps are told
    /// ([`Tap::refused`]) so DNS still becomes ready, and the watch keeps
    /// retrying.
    const OPTIONAL: bool = false;
    /// What serving without an optional resource means, for the one log
    /// line that says it is missing.
    const WITHOUT: &'static str = "serving without them until it can (check RBAC)";
}

impl Watched for SlimPod {
    const RESOURCE: &'static str = "pods";
}

impl Watched for SlimService {
    const RESOURCE: &'static str = "services";
}

impl Watched for SlimJob {
    const RESOURCE: &'static str = "jobs";
    const OPTIONAL: bool = true;
}

impl Watched for SlimEndpointSlice {
    const RESOURCE: &'static str = "endpointslices";
    /// Without RBAC on them, everything but Services without a selector
    /// is still answered.
    const OPTIONAL: bool = true;
}

/// Without Nodes or ServiceCIDRs, their ranges are not owned: reverse
/// names there get REFUSED and resolvers ask their next server, so node
/// DNS keeps working (never an authoritative NXDOMAIN for a range podns
/// cannot place).
const WITHOUT_RANGES: &str = "their ranges' reverse names get REFUSED (resolvers fall through to the next server) until it can; grant list/watch on them (deploy/base/rbac.yaml) or pass --reverse-cidr";

impl Watched for SlimNode {
    const RESOURCE: &'static str = "nodes";
    const OPTIONAL: bool = true;
    const WITHOUT: &'static str = WITHOUT_RANGES;
}

impl Watched for SlimServiceCidr {
    const RESOURCE: &'static str = "servicecidrs";
    const OPTIONAL: bool = true;
    const WITHOUT: &'static str = WITHOUT_RANGES;
}

/// What one watch hands its events to.
pub trait Tap<K>: Send {
    /// One event of the watch, in the order the watcher yields them; `at`
    /// when it came off the wire. `Break`: nobody reads on, and the watch
    /// ends.
    fn event(
        &mut self,
        event: &Event<K>,
        at: Instant,
    ) -> impl Future<Output = ControlFlow<()>> + Send;

    /// The API server refuses an optional resource ([`Watched::OPTIONAL`]):
    /// what stands in for its list, once a watch.
    fn refused(&mut self, at: Instant) -> impl Future<Output = ControlFlow<()>> + Send {
        let _ = at;
        std::future::ready(ControlFlow::Continue(()))
    }

    /// Where the watcher publishes the resourceVersion it would resume
    /// from (a list's at its end, then each event's and bookmark's), for a
    /// tap that reads it.
    fn resume_version(&self) -> Option<Arc<AtomicU64>> {
        None
    }

    /// A list the watch starts from instead of asking for one (a node
    /// instance's saved scope, [`Listed`]); taken once, when it starts.
    fn saved(&mut self) -> Option<Listed<K>> {
        None
    }

    /// Where the watcher publishes each bookmark's resourceVersion, for a
    /// tap that saves where the watch is.
    fn bookmarks(&self) -> Option<Arc<AtomicU64>> {
        None
    }
}

/// Two taps: each event reaches the first, then the second.
impl<K: Sync, A: Tap<K>, B: Tap<K>> Tap<K> for (A, B) {
    async fn event(&mut self, event: &Event<K>, at: Instant) -> ControlFlow<()> {
        self.0.event(event, at).await?;
        self.1.event(event, at).await
    }

    async fn refused(&mut self, at: Instant) -> ControlFlow<()> {
        self.0.refused(at).await?;
        self.1.refused(at).await
    }

    fn resume_version(&self) -> Option<Arc<AtomicU64>> {
        self.0.resume_version().or_else(|| self.1.resume_version())
    }

    fn saved(&mut self) -> Option<Listed<K>> {
        self.0.saved().or_else(|| self.1.saved())
    }

    fn bookmarks(&self) -> Option<Arc<AtomicU64>> {
        self.0.bookmarks().or_else(|| self.1.bookmarks())
    }
}

/// A tap or none.
impl<K: Sync, T: Tap<K>> Tap<K> for Option<T> {
    async fn event(&mut self, event: &Event<K>, at: Instant) -> ControlFlow<()> {
        match self {
            Some(tap) => tap.event(event, at).await,
            None => ControlFlow::Continue(()),
        }
    }

    async fn refused(&mut self, at: Instant) -> ControlFlow<()> {
        match self {
            Some(tap) => tap.refused(at).await,
            None => ControlFlow::Continue(()),
        }
    }

    fn resume_version(&self) -> Option<Arc<AtomicU64>> {
        self.as_ref().and_then(Tap::resume_version)
    }

    fn saved(&mut self) -> Option<Listed<K>> {
        self.as_mut().and_then(Tap::saved)
    }

    fn bookmarks(&self) -> Option<Arc<AtomicU64>> {
        self.as_ref().and_then(Tap::bookmarks)
    }
}

/// Makes the tap of each watch.
pub trait Taps {
    /// A watch's tap, which its task owns.
    type Tap<K: Watched>: Tap<K> + 'static;

    /// The tap of the watch of `K` in `namespace` (`None`: every
    /// namespace, or a cluster-scoped kind).
    fn tap<K: Watched>(&self, namespace: Option<&str>) -> Self::Tap<K>;
}

/// Both: each watch's tap is the pair of theirs.
impl<A: Taps, B: Taps> Taps for (A, B) {
    type Tap<K: Watched> = (A::Tap<K>, B::Tap<K>);

    fn tap<K: Watched>(&self, namespace: Option<&str>) -> Self::Tap<K> {
        (self.0.tap(namespace), self.1.tap(namespace))
    }
}

/// Taps or none (a relay's, on a server that relays nothing).
impl<T: Taps> Taps for Option<T> {
    type Tap<K: Watched> = Option<T::Tap<K>>;

    fn tap<K: Watched>(&self, namespace: Option<&str>) -> Self::Tap<K> {
        self.as_ref().map(|t| t.tap(namespace))
    }
}

impl<T: Taps> Taps for &T {
    type Tap<K: Watched> = T::Tap<K>;

    fn tap<K: Watched>(&self, namespace: Option<&str>) -> Self::Tap<K> {
        (**self).tap(namespace)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A tap that notes each event it sees, by its name, and reads no more
    /// after `stop_after` of them.
    struct Note {
        name: &'static str,
        seen: Arc<Mutex<Vec<String>>>,
        stop_after: Option<usize>,
        events: usize,
        version: Option<Arc<AtomicU64>>,
    }

    impl Note {
        fn new(name: &'static str, seen: &Arc<Mutex<Vec<String>>>) -> Self {
            Self {
                name,
                seen: seen.clone(),
                stop_after: None,
                events: 0,
                version: None,
            }
        }
    }

    impl Tap<u32> for Note {
        async fn event(&mut self, event: &Event<u32>, _at: Instant) -> ControlFlow<()> {
            let what = match event {
                Event::Apply(n) => n.to_string(),
                _ => "other".to_owned(),
            };
            self.seen
                .lock()
                .unwrap()
                .push(format!("{}:{what}", self.name));
            self.events += 1;
            if self.stop_after == Some(self.events) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        }

        async fn refused(&mut self, _at: Instant) -> ControlFlow<()> {
            self.seen
                .lock()
                .unwrap()
                .push(format!("{}:refused", self.name));
            ControlFlow::Continue(())
        }

        fn resume_version(&self) -> Option<Arc<AtomicU64>> {
            self.version.clone()
        }
    }

    #[tokio::test]
    async fn a_pair_hands_each_event_to_the_first_then_the_second_until_one_reads_no_more() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let now = Instant::now();
        let mut first = Note::new("a", &seen);
        first.stop_after = Some(2);
        let mut pair = (first, Some(Note::new("b", &seen)));
        assert!(pair.event(&Event::Apply(1), now).await.is_continue());
        assert!(pair.refused(now).await.is_continue());
        assert!(pair.event(&Event::Apply(2), now).await.is_break());
        assert_eq!(
            *seen.lock().unwrap(),
            ["a:1", "b:1", "a:refused", "b:refused", "a:2"],
            "the second never sees what the first stopped at"
        );

        // No tap reads on forever and sees nothing.
        let mut none: Option<Note> = None;
        assert!(none.event(&Event::Apply(3), now).await.is_continue());
        assert!(none.refused(now).await.is_continue());
        assert!(none.resume_version().is_none());
        assert_eq!(seen.lock().unwrap().len(), 5);
    }

    #[test]
    fn a_pair_publishes_the_resource_version_where_one_of_them_reads_it() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let version = Arc::new(AtomicU64::new(0));
        let mut reads = Note::new("b", &seen);
        reads.version = Some(version.clone());
        let pair = (Note::new("a", &seen), reads);
        let published = pair.resume_version().expect("the second's");
        assert!(Arc::ptr_eq(&published, &version));
        let neither = (Note::new("a", &seen), Note::new("b", &seen));
        assert!(neither.resume_version().is_none());
    }
}
