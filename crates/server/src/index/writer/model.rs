//! The writer's compact copy of a pod. A [`PodInfo`] as the watch hands it
//! over spends most of its bytes on labels and annotations (a JobSet pod
//! has about fourteen `String` pairs, ≈ 1.4 KB), nearly all of them the
//! same across the pods of a Job. The writer keeps every label (a Service
//! created later may select on any of them), but each distinct key=value
//! pair once, shared by the pods that carry it; and what a pod shares with
//! the other pods of its gang (every pair but its index, its container
//! ports) once, as a [`Template`] they hold.

use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::Arc;

use crate::index::containers::{Interned, SmallSet};
use crate::index::types::{ContainerPort, Phase, PodInfo};

/// One label or annotation, shared by every pod that carries it.
pub(crate) type Pair = Arc<(Box<str>, Box<str>)>;

/// Label and annotation keys whose value is the pod's own (its index in a
/// gang), not its template's. Every other pair of a Job's, JobSet's,
/// StatefulSet's or LeaderWorkerSet's pods is the same across the gang, so
/// the pods keep those as one shared [`Template`]. A per-pod key missing
/// here costs only the sharing (each pod's set is then its own), never an
/// answer.
const OWN_KEYS: &[&str] = &[
    "batch.kubernetes.io/job-completion-index",
    "apps.kubernetes.io/pod-index",
    "statefulset.kubernetes.io/pod-name",
    "leaderworkerset.sigs.k8s.io/worker-index",
    "training.kubeflow.org/replica-index",
    "volcano.sh/task-index",
];

fn own_key(key: &str) -> bool {
    OWN_KEYS.contains(&key)
}

/// What a pod shares with the other pods of its template (the ranks of a
/// Job, say): its namespace and subdomain, its labels and annotations but
/// its own ([`OWN_KEYS`]), in the order the pod had them, and its container
/// ports. Pairs are interned, so two templates hold the same pairs when
/// they hold the same pointers.
#[derive(Debug)]
pub(crate) struct Template {
    ns: Arc<str>,
    subdomain: Option<Arc<str>>,
    labels: Box<[Pair]>,
    annotations: Box<[Pair]>,
    ports: Box<[ContainerPort]>,
}

impl PartialEq for Template {
    fn eq(&self, other: &Self) -> bool {
        let same = |a: &[Pair], b: &[Pair]| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y))
        };
        self.ns == other.ns
            && self.subdomain == other.subdomain
            && same(&self.labels, &other.labels)
            && same(&self.annotations, &other.annotations)
            && self.ports == other.ports
    }
}

impl Eq for Template {}

impl Hash for Template {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.ns.hash(state);
        self.subdomain.hash(state);
        self.labels.len().hash(state);
        for p in self.labels.iter().chain(&*self.annotations) {
            Arc::as_ptr(p).hash(state);
        }
        self.ports.hash(state);
    }
}

/// The headless Services (of its namespace) that select a pod, sorted:
/// one list shared by every pod with the same ones (a gang's pods), or
/// none. A Service selecting on a pod's own index gives that pod a list of
/// its own, which costs only the sharing.
#[derive(Clone, Debug, Default)]
pub(crate) struct Services(Option<Arc<SmallSet<Box<str>>>>);

impl Services {
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, Box<str>> {
        match &self.0 {
            Some(s) => s.iter(),
            None => [].iter(),
        }
    }

    pub(crate) fn contains(&self, name: &str) -> bool {
        self.0.as_ref().is_some_and(|s| s.contains(name))
    }
}

impl<'a> IntoIterator for &'a Services {
    type Item = &'a Box<str>;
    type IntoIter = std::slice::Iter<'a, Box<str>>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// A pod's own pairs: its labels, then its annotations (a Job's rank has
/// its index as both). Equal when they hold the same interned pairs.
#[derive(Debug)]
pub(crate) struct OwnPairs {
    pairs: Box<[Pair]>,
    labels: u8,
}

impl PartialEq for OwnPairs {
    fn eq(&self, other: &Self) -> bool {
        self.labels == other.labels
            && self.pairs.len() == other.pairs.len()
            && self
                .pairs
                .iter()
                .zip(&other.pairs)
                .all(|(x, y)| Arc::ptr_eq(x, y))
    }
}

impl Eq for OwnPairs {}

impl Hash for OwnPairs {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.labels.hash(state);
        for p in &self.pairs {
            Arc::as_ptr(p).hash(state);
        }
    }
}

/// A pod's own pairs, one list shared by the pods with the same (rank 7 of
/// every Job: the pairs are interned, so the lists are equal), or none.
#[derive(Clone, Debug, Default)]
pub(crate) struct Own(Option<Arc<OwnPairs>>);

/// The distinct label and annotation pairs of the pods in the model, the
/// distinct templates the pods share, their distinct lists of own pairs
/// and their distinct lists of Services.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    pairs: Interned<(Box<str>, Box<str>)>,
    sets: Interned<Template>,
    owns: Interned<OwnPairs>,
    services: Interned<SmallSet<Box<str>>>,
}

impl Interner {
    fn pair(&mut self, (k, v): (String, String)) -> Pair {
        self.pairs.get((k.into_boxed_str(), v.into_boxed_str()))
    }

    /// Split `v` into the pod's own pairs and the rest, interned.
    fn split(&mut self, v: Vec<(String, String)>, own: &mut Vec<Pair>) -> Box<[Pair]> {
        let mut rest = Vec::with_capacity(v.len());
        for p in v {
            if own_key(&p.0) {
                own.push(self.pair(p));
            } else {
                rest.push(self.pair(p));
            }
        }
        rest.into_boxed_slice()
    }

    /// The shared template; `s`'s pairs, if it is one already, are held
    /// by it too, so dropping them leaves every count as before `split`.
    fn set(&mut self, s: Template) -> Arc<Template> {
        self.sets.get(s)
    }

    /// Give back the pairs of a pod leaving the model. (A pod may hold a
    /// pair twice, as label and as annotation: the first copy sees a count
    /// of 3, the last one 2.)
    fn release(&mut self, pairs: impl IntoIterator<Item = Pair>) {
        for p in pairs {
            self.pairs.release(&p);
        }
    }

    /// The shared list of a pod's own pairs; `own`'s pairs, if it is one
    /// already, are held by it too, so dropping them leaves every count as
    /// before `split`. None for no pairs.
    fn own(&mut self, own: OwnPairs) -> Own {
        Own((!own.pairs.is_empty()).then(|| self.owns.get(own)))
    }

    /// Give back a pod's own pairs; the last pod to hold the list gives
    /// back its pairs.
    fn release_own(&mut self, own: Own) {
        let Some(own) = own.0 else { return };
        self.owns.release(&own);
        if let Ok(OwnPairs { pairs, .. }) = Arc::try_unwrap(own) {
            self.release(Vec::from(pairs));
        }
    }

    /// The shared copy of `set`; none for an empty one.
    pub(crate) fn services(&mut self, set: SmallSet<Box<str>>) -> Services {
        Services((!set.is_empty()).then(|| self.services.get(set)))
    }

    /// Add Service `name` to a pod's list (`add`), or take it out; the
    /// list it was is given back. Returns whether the list changed.
    pub(crate) fn change_services(&mut self, s: &mut Services, name: &str, add: bool) -> bool {
        let mut set = s.0.as_deref().cloned().unwrap_or_default();
        let changed = if add {
            set.insert(name.into())
        } else {
            set.remove(name)
        };
        if changed {
            let old = std::mem::replace(s, self.services(set));
            self.release_services(old);
        }
        changed
    }

    /// Give back a pod's list of Services.
    fn release_services(&mut self, s: Services) {
        if let Some(s) = &s.0 {
            self.services.release(s);
        }
    }

    /// Give back a pod's template; the last pod to hold it gives back its
    /// pairs.
    fn release_set(&mut self, set: Arc<Template>) {
        self.sets.release(&set);
        if let Ok(Template {
            labels,
            annotations,
            ..
        }) = Arc::try_unwrap(set)
        {
            self.release(Vec::from(labels).into_iter().chain(Vec::from(annotations)));
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.pairs.len()
    }

    #[cfg(test)]
    pub(crate) fn sets(&self) -> usize {
        self.sets.len()
    }
}

/// [`Pod`]'s flags.
const READY: u8 = 1;
const DELETING: u8 = 2;
const HOST_NETWORK: u8 = 4;
const HOST_IN_NAME: u8 = 8;

/// A creation time in the 4 bytes a [`Pod`] keeps it in.
fn seconds(created: i64) -> u32 {
    u32::try_from(created.max(0)).unwrap_or(u32::MAX)
}

/// What the writer keeps of a pod: [`PodInfo`] without the uid (no name
/// depends on it), with boxed slices instead of vectors, and what it shares
/// with its gang (namespace, subdomain, pairs, ports) in a [`Template`].
/// The writer's indexes hash its name, hostname and addresses where they
/// are (see `by_name.rs`). 64 bytes, and so is the slab's slot (its
/// vacant-or-occupied tag fits in the phase's spare values); a test says so.
#[derive(Clone, Debug)]
pub(crate) struct Pod {
    /// Its name, then its hostname unless that begins the name (a Job's
    /// rank `w-3-x7k2p` has hostname `w-3`): [`Self::name`],
    /// [`Self::hostname`]. One allocation, often none for the hostname.
    text: Box<str>,
    /// The hostname's length (0: none; a hostname is a DNS label, ≤ 63).
    host_len: u8,
    /// [`READY`], [`DELETING`], [`HOST_NETWORK`], and [`HOST_IN_NAME`]:
    /// whether the hostname is the name's beginning or the text's end.
    flags: u8,
    pub ips: Box<[IpAddr]>,
    /// `metadata.creationTimestamp` in seconds since the epoch, within
    /// 1970–2106 (an API server stamps it at creation; 0 if unset): the
    /// duplicate rule compares it, and 4 bytes made the pod 64, not 72.
    pub created: u32,
    pub phase: Phase,
    /// Its labels and annotations but its own, and its container ports.
    shared: Arc<Template>,
    /// Its own pairs ([`OWN_KEYS`]), shared with every pod that has the
    /// same (rank 7 of each Job), or none.
    own: Own,
    /// The headless Services (of its namespace) that select the pod.
    pub services: Services,
}

impl Pod {
    /// The pod of `p`, with its namespace and subdomain as the writer
    /// shares them (equal templates must hold equal strings; sharing makes
    /// them one allocation).
    pub(crate) fn new(
        p: PodInfo,
        ns: Arc<str>,
        subdomain: Option<Arc<str>>,
        interner: &mut Interner,
    ) -> Self {
        let mut own = Vec::new();
        let labels = interner.split(p.labels, &mut own);
        // At most one pair per own key: the count fits.
        let own_labels = u8::try_from(own.len()).unwrap_or(u8::MAX);
        let annotations = interner.split(p.annotations, &mut own);
        let own = interner.own(OwnPairs {
            pairs: own.into_boxed_slice(),
            labels: own_labels,
        });
        let shared = interner.set(Template {
            ns,
            subdomain,
            labels,
            annotations,
            ports: p.ports.into_boxed_slice(),
        });
        // Conversion keeps DNS labels only (≤ 63 bytes); a longer one than
        // the length field holds would name nothing either: dropped.
        let hostname = p.hostname.filter(|h| u8::try_from(h.len()).is_ok());
        let host_len = hostname.as_ref().map_or(0, |h| h.len() as u8);
        let host_in_name = hostname
            .as_ref()
            .is_some_and(|h| p.key.name.starts_with(&**h));
        let mut text = p.key.name;
        if let Some(h) = hostname.filter(|_| !host_in_name) {
            text.push_str(&h);
        }
        let flag = |on: bool, f: u8| if on { f } else { 0 };
        Self {
            text: text.into_boxed_str(),
            host_len,
            flags: flag(p.ready, READY)
                | flag(p.deleting, DELETING)
                | flag(p.host_network, HOST_NETWORK)
                | flag(host_in_name, HOST_IN_NAME),
            ips: p.ips.into_boxed_slice(),
            created: seconds(p.created),
            phase: p.phase,
            shared,
            own,
            services: Services::default(),
        }
    }

    /// The `Ready` condition is `True`.
    pub(crate) fn ready(&self) -> bool {
        self.flags & READY != 0
    }

    /// `metadata.deletionTimestamp` is set.
    pub(crate) fn deleting(&self) -> bool {
        self.flags & DELETING != 0
    }

    pub(crate) fn host_network(&self) -> bool {
        self.flags & HOST_NETWORK != 0
    }

    fn host_in_name(&self) -> bool {
        self.flags & HOST_IN_NAME != 0
    }

    /// Give the pod's pairs back to the interner (the pod is leaving).
    pub(crate) fn release(self, interner: &mut Interner) {
        interner.release_services(self.services);
        interner.release_own(self.own);
        interner.release_set(self.shared);
    }

    pub(crate) fn name(&self) -> &str {
        if self.host_in_name() {
            &self.text
        } else {
            &self.text[..self.text.len() - usize::from(self.host_len)]
        }
    }

    pub(crate) fn hostname(&self) -> Option<&str> {
        let n = usize::from(self.host_len);
        match (n, self.host_in_name()) {
            (0, _) => None,
            (_, true) => Some(&self.text[..n]),
            (_, false) => Some(&self.text[self.text.len() - n..]),
        }
    }

    fn own_labels(&self) -> &[Pair] {
        match &self.own.0 {
            Some(o) => &o.pairs[..usize::from(o.labels)],
            None => &[],
        }
    }

    fn own_annotations(&self) -> &[Pair] {
        match &self.own.0 {
            Some(o) => &o.pairs[usize::from(o.labels)..],
            None => &[],
        }
    }

    pub(crate) fn ns(&self) -> &Arc<str> {
        &self.shared.ns
    }

    pub(crate) fn subdomain(&self) -> &Option<Arc<str>> {
        &self.shared.subdomain
    }

    /// Its containers' ports.
    pub(crate) fn ports(&self) -> &[ContainerPort] {
        &self.shared.ports
    }

    /// Its labels, its own first.
    pub(crate) fn labels(&self) -> impl Iterator<Item = &Pair> {
        self.own_labels().iter().chain(&*self.shared.labels)
    }

    /// Does `p` say the same as this pod, for everything the index reads?
    pub(crate) fn same_as(&self, p: &PodInfo) -> bool {
        // As `new` splits them: own and shared pairs each in their order.
        let pairs = |own: &[Pair], shared: &[Pair], theirs: &[(String, String)]| {
            let (mut o, mut s) = (own.iter(), shared.iter());
            let all = theirs.iter().all(|(k, v)| {
                let mine = if own_key(k) { o.next() } else { s.next() };
                mine.is_some_and(|m| *m.0 == **k && *m.1 == **v)
            });
            all && o.next().is_none() && s.next().is_none()
        };
        **self.ns() == *p.key.namespace
            && self.name() == p.key.name
            && self.hostname() == p.hostname.as_deref()
            && self.subdomain().as_deref() == p.subdomain.as_deref()
            && *self.ips == *p.ips
            && self.created == seconds(p.created)
            && self.phase == p.phase
            && self.ready() == p.ready
            && self.deleting() == p.deleting
            && self.host_network() == p.host_network
            && pairs(self.own_labels(), &self.shared.labels, &p.labels)
            && pairs(
                self.own_annotations(),
                &self.shared.annotations,
                &p.annotations,
            )
            && *self.shared.ports == *p.ports
    }

    /// The duplicate rule's order: of pods that claim one name, Ready
    /// before not Ready, then Running, then the older creation, then name
    /// (then namespace: pods of several namespaces share an IP's PTR, and
    /// the order never depends on the order of ids).
    pub(crate) fn duplicate_order(&self, other: &Pod) -> std::cmp::Ordering {
        self.duplicate_step(other).0
    }

    /// [`Self::duplicate_order`] and the step of the rule that decided it
    /// (what `podns explain` reports for a shared hostname).
    pub(crate) fn duplicate_step(&self, other: &Pod) -> (std::cmp::Ordering, DuplicateStep) {
        use std::cmp::Ordering::Equal;
        let running = |p: &Pod| p.phase == Phase::Running;
        // Each step is compared only when the ones before tie, as
        // `then_with` would: this orders every duplicate set the writer sorts.
        match other.ready().cmp(&self.ready()) {
            Equal => {}
            o => return (o, DuplicateStep::Ready),
        }
        match running(other).cmp(&running(self)) {
            Equal => {}
            o => return (o, DuplicateStep::Running),
        }
        match self.created.cmp(&other.created) {
            Equal => {}
            o => return (o, DuplicateStep::Older),
        }
        match self.name().cmp(other.name()) {
            Equal => {}
            o => return (o, DuplicateStep::Name),
        }
        (self.ns().cmp(other.ns()), DuplicateStep::Namespace)
    }

    /// The value of label `key`, if the pod has it.
    pub(crate) fn label(&self, key: &str) -> Option<&str> {
        find(self.own_labels(), &self.shared.labels, key)
    }

    pub(crate) fn annotation(&self, key: &str) -> Option<&str> {
        find(self.own_annotations(), &self.shared.annotations, key)
    }

    pub(crate) fn has_label(&self, key: &str, value: &str) -> bool {
        let pairs = if own_key(key) {
            self.own_labels()
        } else {
            &self.shared.labels
        };
        pairs.iter().any(|p| *p.0 == *key && *p.1 == *value)
    }
}

/// A step of the duplicate rule ([`Pod::duplicate_order`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DuplicateStep {
    Ready,
    Running,
    Older,
    Name,
    Namespace,
}

impl DuplicateStep {
    /// The code `podns explain` prints (`chosen_by`).
    pub(crate) fn code(self) -> &'static str {
        match self {
            DuplicateStep::Ready => "ready",
            DuplicateStep::Running => "running",
            DuplicateStep::Older => "older",
            DuplicateStep::Name => "name",
            DuplicateStep::Namespace => "namespace",
        }
    }
}

fn find<'a>(own: &'a [Pair], shared: &'a [Pair], key: &str) -> Option<&'a str> {
    let pairs = if own_key(key) { own } else { shared };
    pairs.iter().find(|p| *p.0 == *key).map(|p| &*p.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::testing::{PodExt, pod};

    const INDEX: &str = "batch.kubernetes.io/job-completion-index";

    fn nccl(port: u16) -> ContainerPort {
        ContainerPort {
            name: Some("nccl".into()),
            port,
            protocol: crate::index::types::Proto::Tcp,
        }
    }

    fn new(p: PodInfo, i: &mut Interner) -> Pod {
        let ns = p.key.namespace.as_str().into();
        Pod::new(p, ns, None, i)
    }

    #[test]
    fn pairs_are_shared_and_released_with_the_last_pod() {
        let mut i = Interner::default();
        let mut a = pod("ml", "a", "10.0.0.1").label("app", "x").label("k", "v");
        a.annotations = vec![("k".into(), "v".into())];
        let b = pod("ml", "b", "10.0.0.2").label("app", "x");
        let (pa, pb) = (new(a.clone(), &mut i), new(b, &mut i));
        assert_eq!((i.len(), i.sets()), (2, 2));
        assert!(Arc::ptr_eq(&pa.shared.labels[0], &pb.shared.labels[0]));
        assert!(pa.same_as(&a));
        assert_eq!(pa.label("k"), Some("v"));
        assert_eq!(pa.annotation("k"), Some("v"));
        assert!(pa.has_label("app", "x") && !pa.has_label("app", "y"));
        pa.release(&mut i);
        assert_eq!((i.len(), i.sets()), (1, 1), "app=x is still held by b");
        pb.release(&mut i);
        assert_eq!((i.len(), i.sets()), (0, 0));
    }

    /// The slab's slot is the pod; what it holds, and where its hostname
    /// is kept, said here.
    #[test]
    fn a_pod_is_sixty_four_bytes_with_its_hostname_in_its_name() {
        assert_eq!(std::mem::size_of::<Pod>(), 64);
        let mut i = Interner::default();
        let mut rank = pod("ml", "w-3-x7k2p", "10.0.0.1");
        rank.hostname = Some("w-3".into());
        let mut other = pod("ml", "web-0", "10.0.0.2");
        other.hostname = Some("db".into());
        let bare = pod("ml", "solo", "10.0.0.3");
        let (r, o, b) = (
            new(rank.clone(), &mut i),
            new(other.clone(), &mut i),
            new(bare.clone(), &mut i),
        );
        assert_eq!((r.name(), r.hostname()), ("w-3-x7k2p", Some("w-3")));
        assert_eq!(&*r.text, "w-3-x7k2p", "a prefix costs no bytes");
        assert_eq!((o.name(), o.hostname()), ("web-0", Some("db")));
        assert_eq!((b.name(), b.hostname()), ("solo", None));
        assert!(r.same_as(&rank) && o.same_as(&other) && b.same_as(&bare));
        rank.hostname = Some("w-3-x7k2p".into());
        let whole = new(rank.clone(), &mut i);
        assert_eq!(whole.hostname(), Some("w-3-x7k2p"));
        assert!(whole.same_as(&rank) && !r.same_as(&rank));
        for p in [r, o, b, whole] {
            p.release(&mut i);
        }
    }

    /// The ranks of one index in every Job hold one list of own pairs,
    /// which goes (with its pairs) with the last of them.
    #[test]
    fn ranks_of_one_index_share_their_own_pairs() {
        let mut i = Interner::default();
        let rank = |job: &str| {
            let mut p = pod("ml", &format!("{job}-7"), "10.0.0.1")
                .label("job-name", job)
                .label(INDEX, "7");
            p.annotations = vec![(INDEX.into(), "7".into())];
            p
        };
        let (a, b) = (new(rank("a"), &mut i), new(rank("b"), &mut i));
        let list = |p: &Pod| p.own.0.clone().unwrap();
        assert!(Arc::ptr_eq(&list(&a), &list(&b)));
        assert_eq!(
            (a.label(INDEX), a.annotation(INDEX)),
            (Some("7"), Some("7"))
        );
        assert_eq!(i.owns.len(), 1);
        a.release(&mut i);
        assert_eq!(i.owns.len(), 1, "b holds it");
        assert_eq!(i.len(), 2, "the index pair and b's job-name");
        b.release(&mut i);
        assert_eq!((i.owns.len(), i.len()), (0, 0));
        let none = new(pod("ml", "plain", "10.0.0.2"), &mut i);
        assert!(none.own.0.is_none(), "no own pairs, no list");
        none.release(&mut i);
    }

    /// Pods selected by the same Services hold one list of them, which
    /// changes by copy and goes with the last pod holding it.
    #[test]
    fn pods_share_their_list_of_services() {
        let mut i = Interner::default();
        let mut a = new(pod("ml", "a", "10.0.0.1"), &mut i);
        let mut b = new(pod("ml", "b", "10.0.0.2"), &mut i);
        assert!(i.change_services(&mut a.services, "web", true));
        assert!(!i.change_services(&mut a.services, "web", true), "once");
        assert!(i.change_services(&mut b.services, "web", true));
        let list = |p: &Pod| p.services.0.clone().unwrap();
        assert!(Arc::ptr_eq(&list(&a), &list(&b)));
        assert_eq!(i.services.len(), 1);
        assert!(i.change_services(&mut b.services, "db", true));
        assert_eq!(
            b.services.iter().map(|s| &**s).collect::<Vec<_>>(),
            ["db", "web"]
        );
        assert!(a.services.contains("web") && !a.services.contains("db"));
        assert_eq!(i.services.len(), 2, "[web] and [db, web]");
        assert!(i.change_services(&mut a.services, "web", false));
        assert!(a.services.0.is_none() && !a.services.contains("web"));
        assert_eq!(i.services.len(), 1, "[web] went with its last pod");
        a.release(&mut i);
        b.release(&mut i);
        assert_eq!(i.services.len(), 0);
    }

    /// The ranks of a gang differ only in their index: they hold one
    /// template, and each its own index pair (as label and annotation).
    #[test]
    fn ranks_of_a_gang_share_one_template_and_keep_their_index() {
        let mut i = Interner::default();
        let rank = |n: &str| {
            let mut p = pod("ml", &format!("w-{n}"), "10.0.0.1")
                .label("job-name", "w")
                .label(INDEX, n)
                .label("app", "w");
            p.annotations = vec![(INDEX.into(), n.into()), ("team".into(), "a".into())];
            p.ports = vec![nccl(29500)];
            p
        };
        let (r0, r1) = (rank("0"), rank("1"));
        let (p0, p1) = (new(r0.clone(), &mut i), new(r1.clone(), &mut i));
        assert_eq!(i.sets(), 1, "one template for the gang");
        assert!(Arc::ptr_eq(&p0.shared, &p1.shared));
        assert_eq!((p0.label(INDEX), p1.label(INDEX)), (Some("0"), Some("1")));
        assert_eq!(
            (p0.annotation(INDEX), p1.annotation(INDEX)),
            (Some("0"), Some("1"))
        );
        assert_eq!(p1.label("app"), Some("w"));
        assert_eq!(p1.annotation("team"), Some("a"));
        assert_eq!(p1.annotation("app"), None);
        assert!(p1.has_label(INDEX, "1") && !p1.has_label(INDEX, "0"));
        let labels: Vec<&str> = p1.labels().map(|p| &*p.0).collect();
        assert_eq!(labels, [INDEX, "job-name", "app"]);
        assert!(p0.same_as(&r0) && p1.same_as(&r1) && !p0.same_as(&r1));
        assert_eq!(p1.ports(), [nccl(29500)]);
        let mut other_port = r1.clone();
        other_port.ports = vec![nccl(29501)];
        assert!(!p1.same_as(&other_port));
        let p2 = new(other_port, &mut i);
        assert_eq!(i.sets(), 2, "another port, another template");
        p2.release(&mut i);
        let mut moved = r1.clone();
        moved.labels.swap(0, 2);
        assert!(!p1.same_as(&moved), "the order of the shared pairs counts");
        moved.labels.swap(0, 2);
        moved.labels.pop();
        assert!(!p1.same_as(&moved), "a pair fewer");
        p0.release(&mut i);
        assert_eq!(i.sets(), 1);
        assert_eq!(i.len(), 4, "1's index pair, job-name, app, team");
        p1.release(&mut i);
        assert_eq!((i.len(), i.sets()), (0, 0));
    }
}
