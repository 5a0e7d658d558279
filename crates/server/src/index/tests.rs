//! Property tests: random sequences of watch events (add, update, delete,
//! relist, restart overlaps) applied to the [`Writer`] answer exactly as a
//! small model that recomputes every name from the current objects, and a
//! relist applied as a difference leaves the same table as a fresh build.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use proptest::prelude::*;

use super::names::dashed;
use super::testing::{PodExt, cluster_ip, headless, pod, synced_writer};
use super::types::*;
use super::{Policy, Writer};
use crate::dns::answer::{AnswerConfig, Answerer};

const NSS: [&str; 2] = ["ml", "web"];
/// Hostnames: one spelled as a gang's (`<prefix>-<n>`, kept by number), one not.
const HOSTS: [&str; 2] = ["h0", "h-1"];
/// Subdomains, and the names Services get: a Service named like a subdomain
/// is what makes hostname names and headless sets meet.
const SUBS: [&str; 2] = ["g", "h"];
const APPS: [&str; 2] = ["a", "b"];
const IPS: u8 = 4;

fn v4(n: u8) -> IpAddr {
    IpAddr::from([10, 0, 0, n])
}

fn v6(n: u8) -> IpAddr {
    format!("fd00::{n}").parse().expect("test IP")
}

// ---- generated objects ------------------------------------------------------

fn arb_pod() -> impl Strategy<Value = PodInfo> {
    (
        (
            0..NSS.len(),
            0..6usize,
            prop::option::of((0..2usize, 0..2usize)),
        ),
        (prop::option::of(0..2usize), 0..3u8, 1..=IPS),
        (0..4u8, any::<bool>(), prop::bool::weighted(0.15)),
        (0..3i64, prop::bool::weighted(0.1)),
    )
        .prop_map(
            |((ns, name, host), (app, stack, ip), (phase, ready, deleting), (created, hostnet))| {
                let mut p = pod(NSS[ns], &format!("p{name}"), "");
                if let Some((h, s)) = host {
                    p = p.host(HOSTS[h], SUBS[s]);
                }
                if let Some(app) = app {
                    p = p.label("app", APPS[app]);
                }
                // No IP yet, IPv4 only, or dual stack.
                if stack >= 1 {
                    p.ips.push(v4(ip));
                }
                if stack == 2 {
                    p.ips.push(v6(ip));
                }
                p.phase = [
                    Phase::Pending,
                    Phase::Running,
                    Phase::Running,
                    Phase::Succeeded,
                ][usize::from(phase)];
                p.ready = ready;
                p.deleting = deleting;
                p.created = 1_700_000_000 + created;
                p.host_network = hostnet;
                p
            },
        )
}

fn arb_service() -> impl Strategy<Value = ServiceInfo> {
    (
        0..NSS.len(),
        0..SUBS.len(),
        0..3u8,
        0..APPS.len(),
        1..=2u8,
        any::<bool>(),
    )
        .prop_map(|(ns, name, kind, app, ip, ports)| {
            let (ns, name) = (NSS[ns], SUBS[name]);
            let mut s = match kind {
                0 => headless(ns, name, APPS[app]),
                1 => cluster_ip(ns, name, &format!("10.96.0.{ip}")),
                _ => {
                    // A headless Service without a selector publishes nobody.
                    let mut s = headless(ns, name, APPS[app]);
                    s.selector = None;
                    s
                }
            };
            if let ServiceKind::ClusterIp(_) = s.kind {
                s.selector = Some(vec![("app".into(), APPS[app].into())]);
            }
            if ports {
                // SRV records: one per member and port, targets that
                // depend on which pod wins a shared hostname.
                s.ports = vec![
                    ServicePort {
                        name: Some("http".into()),
                        port: 80,
                        protocol: Proto::Tcp,
                        target: TargetPort::Same,
                    },
                    ServicePort {
                        name: None,
                        port: 53,
                        protocol: Proto::Udp,
                        target: TargetPort::Number(5353),
                    },
                ];
            }
            s
        })
}

#[derive(Clone, Debug)]
enum Event {
    Pod(PodInfo),
    DeletePod(usize, usize),
    Service(ServiceInfo),
    DeleteService(usize, usize),
    /// A complete list of pods, of one namespace or of all.
    RelistPods(Option<usize>, Vec<PodInfo>),
    RelistServices(Option<usize>, Vec<ServiceInfo>),
    /// A gang restart of one pod: its replacement (same hostname, new name
    /// and IP) appears not ready, the old one terminates, the new one is Ready.
    Overlap(PodInfo),
    /// A complete list read as a stream (a watch's first list): each pod
    /// applied as it arrives, then the keys of the whole list.
    StreamPods(Option<usize>, Vec<PodInfo>),
}

fn arb_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => arb_pod().prop_map(Event::Pod),
        2 => (0..NSS.len(), 0..6usize).prop_map(|(n, p)| Event::DeletePod(n, p)),
        2 => arb_service().prop_map(Event::Service),
        1 => (0..NSS.len(), 0..SUBS.len()).prop_map(|(n, s)| Event::DeleteService(n, s)),
        1 => (prop::option::of(0..NSS.len()), prop::collection::vec(arb_pod(), 0..8))
            .prop_map(|(n, v)| Event::RelistPods(n, v)),
        1 => (prop::option::of(0..NSS.len()), prop::collection::vec(arb_service(), 0..4))
            .prop_map(|(n, v)| Event::RelistServices(n, v)),
        2 => arb_pod().prop_map(Event::Overlap),
        1 => (prop::option::of(0..NSS.len()), prop::collection::vec(arb_pod(), 0..8))
            .prop_map(|(n, v)| Event::StreamPods(n, v)),
    ]
}

/// The updates an event stands for (what the watchers would send).
fn updates(ev: &Event) -> Vec<Update> {
    match ev.clone() {
        Event::Pod(p) => vec![Update::Pod(Change::Apply(p))],
        Event::DeletePod(n, p) => vec![Update::Pod(Change::Delete(ObjKey::new(
            NSS[n],
            format!("p{p}"),
        )))],
        Event::Service(s) => vec![Update::Service(Change::Apply(s))],
        Event::DeleteService(n, s) => {
            vec![Update::Service(Change::Delete(ObjKey::new(
                NSS[n], SUBS[s],
            )))]
        }
        Event::RelistPods(ns, items) => vec![Update::Pod(Change::Reset {
            namespace: ns.map(|n| NSS[n].to_string()),
            items: in_scope(ns, items, |p| &mut p.key),
        })],
        Event::StreamPods(ns, items) => {
            let items = in_scope(ns, items, |p| &mut p.key);
            let keys = items.iter().map(|p| p.key.clone()).collect();
            let mut v: Vec<Update> = items
                .into_iter()
                .map(|p| Update::Pod(Change::Apply(p)))
                .collect();
            v.push(Update::Pod(Change::Listed {
                namespace: ns.map(|n| NSS[n].to_string()),
                keys,
            }));
            v
        }
        Event::RelistServices(ns, items) => vec![Update::Service(Change::Reset {
            namespace: ns.map(|n| NSS[n].to_string()),
            items: in_scope(ns, items, |s| &mut s.key),
        })],
        Event::Overlap(old) => {
            let mut new = old.clone();
            new.key.name = format!("{}-r", old.key.name);
            new.uid = format!("{}-r", old.uid);
            new.ips = new.ips.iter().map(|ip| bump(*ip)).collect();
            new.created = old.created + 10;
            new.phase = Phase::Pending;
            new.ready = false;
            let mut ready = new.clone();
            ready.phase = Phase::Running;
            ready.ready = true;
            let mut going = old.clone();
            going.deleting = true;
            vec![
                Update::Pod(Change::Apply(old)),
                Update::Pod(Change::Apply(new)),
                Update::Pod(Change::Apply(going.clone())),
                Update::Pod(Change::Apply(ready)),
                Update::Pod(Change::Delete(going.key)),
            ]
        }
    }
}

/// Another IP of the small pool, so replacements may collide with other pods.
fn bump(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(a) => v4(a.octets()[3] % IPS + 1),
        IpAddr::V6(a) => v6((a.segments()[7] as u8) % IPS + 1),
    }
}

/// A list as the API server sends it: objects of the watch's namespace,
/// each key once.
fn in_scope<T>(ns: Option<usize>, items: Vec<T>, key: impl Fn(&mut T) -> &mut ObjKey) -> Vec<T> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for mut item in items {
        if let Some(n) = ns {
            key(&mut item).namespace = NSS[n].to_string();
        }
        if seen.insert(key(&mut item).clone()) {
            out.push(item);
        }
    }
    out
}

// ---- the model -------------------------------------------------------------

/// The objects, and nothing else: every answer is recomputed from them.
#[derive(Default)]
struct Model {
    pods: BTreeMap<ObjKey, PodInfo>,
    services: BTreeMap<ObjKey, ServiceInfo>,
}

impl Model {
    fn apply(&mut self, u: &Update) {
        match u.clone() {
            Update::Pod(Change::Apply(p)) => {
                self.pods.insert(p.key.clone(), p);
            }
            Update::Pod(Change::Delete(k)) => {
                self.pods.remove(&k);
            }
            Update::Pod(Change::Reset { namespace, items }) => {
                self.pods
                    .retain(|k, _| namespace.as_ref().is_some_and(|n| *n != k.namespace));
                self.pods
                    .extend(items.into_iter().map(|p| (p.key.clone(), p)));
            }
            Update::Pod(Change::Listed { namespace, keys }) => {
                self.pods.retain(|k, _| {
                    namespace.as_ref().is_some_and(|n| *n != k.namespace) || keys.contains(k)
                });
            }
            Update::Service(Change::Listed { namespace, keys }) => {
                self.services.retain(|k, _| {
                    namespace.as_ref().is_some_and(|n| *n != k.namespace) || keys.contains(k)
                });
            }
            Update::Service(Change::Apply(s)) => {
                self.services.insert(s.key.clone(), s);
            }
            Update::Service(Change::Delete(k)) => {
                self.services.remove(&k);
            }
            Update::Service(Change::Reset { namespace, items }) => {
                self.services
                    .retain(|k, _| namespace.as_ref().is_some_and(|n| *n != k.namespace));
                self.services
                    .extend(items.into_iter().map(|s| (s.key.clone(), s)));
            }
            Update::Job(_)
            | Update::Slice(_)
            | Update::NodeRanges(_)
            | Update::ServiceRanges(_)
            | Update::Unscope(_)
            | Update::Relisting { .. }
            | Update::Partial { .. } => {}
        }
    }

    /// `--publish ip`: an IP, not terminal, not terminating.
    fn published(p: &PodInfo) -> bool {
        !p.ips.is_empty() && !p.phase.is_terminal() && !p.deleting
    }

    /// Every forward name with addresses, relative to the zone.
    fn names(&self) -> BTreeMap<String, BTreeSet<IpAddr>> {
        let mut out: BTreeMap<String, BTreeSet<IpAddr>> = BTreeMap::new();
        let live: Vec<&PodInfo> = self.pods.values().filter(|p| Self::published(p)).collect();
        // Hostname names: one pod per name, Ready, then Running, then
        // oldest, then name.
        let mut by_host: BTreeMap<String, Vec<&PodInfo>> = BTreeMap::new();
        for p in &live {
            if let (Some(h), Some(s)) = (&p.hostname, &p.subdomain) {
                let name = format!("{h}.{s}.{}.svc", p.key.namespace);
                by_host.entry(name).or_default().push(p);
            }
        }
        for (name, pods) in by_host {
            let best = pods
                .into_iter()
                .min_by_key(|p| {
                    (
                        !p.ready,
                        p.phase != Phase::Running,
                        p.created,
                        p.key.name.clone(),
                    )
                })
                .expect("non-empty");
            out.insert(name, best.ips.iter().copied().collect());
        }
        for s in self.services.values() {
            let (ns, name) = (&s.key.namespace, &s.key.name);
            match &s.kind {
                ServiceKind::ClusterIp(ips) => {
                    out.insert(format!("{name}.{ns}.svc"), ips.iter().copied().collect());
                }
                ServiceKind::Headless => {
                    let sel = s.selector.clone().unwrap_or_default();
                    for p in &live {
                        let member = p.key.namespace == *ns
                            && !sel.is_empty()
                            && sel.iter().all(|l| p.labels.contains(l));
                        if !member {
                            continue;
                        }
                        for ip in &p.ips {
                            out.entry(format!("{name}.{ns}.svc"))
                                .or_default()
                                .insert(*ip);
                            out.entry(format!("{}.{name}.{ns}.svc", dashed(*ip)))
                                .or_default()
                                .insert(*ip);
                        }
                    }
                }
                ServiceKind::ExternalName(_) => {}
            }
        }
        for p in live.iter().filter(|p| !p.host_network) {
            for ip in &p.ips {
                out.entry(format!("{}.{}.pod", dashed(*ip), p.key.namespace))
                    .or_default()
                    .insert(*ip);
            }
        }
        out
    }
}

/// Every forward name the generated objects could ever produce.
fn universe() -> Vec<String> {
    let mut v = Vec::new();
    for ns in NSS {
        for sub in SUBS {
            v.push(format!("{sub}.{ns}.svc"));
            for host in HOSTS {
                v.push(format!("{host}.{sub}.{ns}.svc"));
            }
        }
        for n in 1..=IPS {
            for ip in [v4(n), v6(n)] {
                v.push(format!("{}.{ns}.pod", dashed(ip)));
                for sub in SUBS {
                    v.push(format!("{}.{sub}.{ns}.svc", dashed(ip)));
                }
            }
        }
    }
    v
}

fn ask(a: &Answerer, name: &str, qtype: RecordType) -> Message {
    let mut m = Message::new(7, MessageType::Query, OpCode::Query);
    m.add_query(Query::query(
        Name::from_ascii(format!("{name}.cluster.local.")).expect("valid name"),
        qtype,
    ));
    a.answer(&m)
}

/// Compare every name of the universe, A and AAAA, with the model.
fn check(w: &Writer, model: &Model) -> Result<(), TestCaseError> {
    let a = Answerer::new(w.table().clone(), AnswerConfig::default());
    let want = model.names();
    for name in universe() {
        let all = want.get(&name).cloned().unwrap_or_default();
        for qtype in [RecordType::A, RecordType::AAAA] {
            let expected: BTreeSet<IpAddr> = all
                .iter()
                .filter(|ip| ip.is_ipv4() == (qtype == RecordType::A))
                .copied()
                .collect();
            let m = ask(&a, &name, qtype);
            let got: BTreeSet<IpAddr> = m
                .answers
                .iter()
                .filter_map(|r| match &r.data {
                    RData::A(x) => Some(IpAddr::V4(x.0)),
                    RData::AAAA(x) => Some(IpAddr::V6(x.0)),
                    _ => None,
                })
                .collect();
            prop_assert_eq!(&got, &expected, "{} {}", name, qtype);
            let rc = m.metadata.response_code;
            if expected.is_empty() {
                prop_assert!(
                    matches!(rc, ResponseCode::NoError | ResponseCode::NXDomain),
                    "{} {}: {:?}",
                    name,
                    qtype,
                    rc
                );
            } else {
                prop_assert_eq!(rc, ResponseCode::NoError, "{} {}", name, qtype);
            }
        }
    }
    Ok(())
}

/// A writer built from nothing but complete lists of these objects.
fn fresh(model: &Model) -> Writer {
    let mut w = synced_writer(Policy::default());
    let pods = model.pods.values().cloned().collect();
    relist(&mut w, pods, model.services.values().cloned().collect());
    w
}

/// Apply complete lists of all pods and all Services.
fn relist(w: &mut Writer, pods: Vec<PodInfo>, services: Vec<ServiceInfo>) {
    w.apply(Update::Pod(Change::all(pods)));
    w.apply(Update::Service(Change::all(services)));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn writer_answers_as_the_model_does(
        events in prop::collection::vec((arb_event(), any::<bool>()), 1..40),
    ) {
        let mut w = synced_writer(Policy::default());
        let mut model = Model::default();
        for (ev, flush_now) in &events {
            for u in updates(ev) {
                model.apply(&u);
                // Staged updates are batched as the watch loop batches them.
                w.stage(u);
            }
            if *flush_now {
                w.flush();
                check(&w, &model)?;
            }
        }
        w.flush();
        check(&w, &model)?;
        // The incremental table is the one a fresh build makes.
        prop_assert_eq!(w.table().snapshot(), fresh(&model).table().snapshot());
    }

    #[test]
    fn a_relist_applied_as_a_difference_equals_a_fresh_build(
        before in prop::collection::vec(arb_event(), 0..30),
        pods in prop::collection::vec(arb_pod(), 0..12),
        services in prop::collection::vec(arb_service(), 0..4),
    ) {
        let mut w = synced_writer(Policy::default());
        for ev in &before {
            for u in updates(ev) {
                w.apply(u);
            }
        }
        let pods = in_scope(None, pods, |p| &mut p.key);
        let services = in_scope(None, services, |s| &mut s.key);
        w.apply(Update::Pod(Change::all(pods.clone())));
        w.apply(Update::Service(Change::all(services.clone())));
        let mut model = Model::default();
        model.pods.extend(pods.into_iter().map(|p| (p.key.clone(), p)));
        model.services.extend(services.into_iter().map(|s| (s.key.clone(), s)));
        let fresh = fresh(&model);
        prop_assert_eq!(w.table().snapshot(), fresh.table().snapshot());
        check(&w, &model)?;
    }
}

/// The case the properties first found: in one batch, a delete of a pod the
/// writer never saw used to drop the batch's other staged changes.
#[test]
fn a_delete_of_an_unknown_pod_keeps_the_rest_of_its_batch() {
    let mut w = synced_writer(Policy::default());
    w.stage(Update::Service(Change::Apply(headless("ml", "g", "a"))));
    w.stage(Update::Pod(Change::Apply(
        pod("ml", "p0", "10.0.0.1").label("app", "a"),
    )));
    w.stage(Update::Pod(Change::Delete(ObjKey::new("ml", "never-seen"))));
    w.flush();
    let a = Answerer::new(w.table().clone(), AnswerConfig::default());
    let m = ask(&a, "g.ml.svc", RecordType::A);
    assert_eq!(m.answers.len(), 1, "{m:?}");
}

// ---- explain against DNS ----------------------------------------------------

/// The names explain is asked about: every name the objects below can
/// make, the nodes above them, and names of the same shapes that no rule
/// makes.
fn explain_universe() -> Vec<String> {
    let mut v = universe();
    v.extend(
        [
            "",
            "dns",
            "ns.dns",
            "dns-version",
            "svc",
            "pod",
            "rank",
            "x",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    for ns in NSS {
        for tree in ["svc", "pod", "rank"] {
            v.push(format!("{ns}.{tree}"));
        }
        for sub in SUBS {
            v.push(format!("_http._tcp.{sub}.{ns}.svc"));
            v.push(format!("_tcp.{sub}.{ns}.svc"));
            v.push(format!("_dns._udp.{sub}.{ns}.svc"));
        }
        for i in 0..3 {
            v.push(format!("{i}.j.{ns}.rank"));
        }
        v.push(format!("leader.j.{ns}.rank"));
        v.push(format!("j.{ns}.rank"));
    }
    for n in 1..=IPS {
        v.push(crate::index::names::reverse(v4(n)));
        v.push(crate::index::names::reverse(v6(n)));
    }
    v.extend(
        [
            "0.0.10.in-addr.arpa",
            "0.96.10.in-addr.arpa",
            "1.0.96.10.in-addr.arpa",
            "2.0.96.10.in-addr.arpa",
            "in-addr.arpa",
            "ip6.arpa",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    v
}

/// A name as a client may spell it: as served, or bent (upper case, a
/// leading zero, an IPv6 zero run written out, junk after a label, a
/// label more or fewer).
fn bend(name: &str, how: u8, at: usize) -> String {
    let labels: Vec<&str> = name.split('.').filter(|l| !l.is_empty()).collect();
    let i = if labels.is_empty() {
        0
    } else {
        at % labels.len()
    };
    let mut out: Vec<String> = labels.iter().map(|s| s.to_string()).collect();
    match how {
        1 => return name.to_ascii_uppercase(),
        2 if !out.is_empty() => {
            // A leading zero before the first digit of the label.
            if let Some(p) = out[i].find(|c: char| c.is_ascii_digit()) {
                out[i].insert(p, '0');
            }
        }
        3 => {
            // `fd00--1` as `fd00-0-0-0-0-0-0-1`.
            for l in &mut out {
                if let Some((a, b)) = l.split_once("--") {
                    let zeros = 8usize.saturating_sub(a.split('-').count() + b.split('-').count());
                    *l = format!("{a}-{}{b}", "0-".repeat(zeros));
                }
            }
        }
        4 if !out.is_empty() => out[i].push('x'),
        5 => out.insert(0, "x".into()),
        6 if !out.is_empty() => {
            out.remove(0);
        }
        _ => {}
    }
    out.join(".")
}

/// A world for explain: the random objects, a Job `j` in `ml` with two
/// ranks, an ExternalName Service, and the rank view on.
fn explain_world(
    pods: Vec<PodInfo>,
    services: Vec<ServiceInfo>,
    ranks: Vec<(u32, bool, u8)>,
) -> Writer {
    use super::testing::{job, rank_pod};
    let policy = Policy {
        rank_view: true,
        ..Policy::default()
    };
    let mut w = synced_writer(policy);
    let mut pods = in_scope(None, pods, |p| &mut p.key);
    for (k, (i, ready, ip)) in ranks.into_iter().enumerate() {
        let mut p = rank_pod("ml", "j", i, &format!("10.0.0.{}", ip % IPS + 1));
        p.key.name = format!("j-{i}-r{k}");
        p.ready = ready;
        pods.push(p);
    }
    let mut services = in_scope(None, services, |s| &mut s.key);
    let mut ext = cluster_ip("web", "ext", "10.96.0.9");
    ext.kind = ServiceKind::ExternalName("example.org".into());
    ext.selector = None;
    services.push(ext);
    relist(&mut w, pods, services);
    w.apply(Update::Job(Change::all(vec![job("ml", "j", 2, None)])));
    w
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// What explain finds never contradicts what DNS serves: a name with
    /// records is explained by a rule, an NXDOMAIN by no rule and no
    /// names below, a NODATA (ANY) by no rule. Names are drawn as served
    /// and bent (upper case, leading zeros, IPv6 zero runs, trailing
    /// junk), so a name explain reads more leniently than DNS shows up.
    #[test]
    fn explain_agrees_with_dns(
        pods in prop::collection::vec(arb_pod(), 0..10),
        services in prop::collection::vec(arb_service(), 0..4),
        ranks in prop::collection::vec((0..3u32, any::<bool>(), 0..IPS), 0..3),
        asks in prop::collection::vec((any::<prop::sample::Index>(), 0..8u8, 0..4usize), 24),
    ) {
        use crate::index::names::Place;
        use super::writer::explain::Reason;
        let w = explain_world(pods, services, ranks);
        let cfg = AnswerConfig {
            ns_addrs: vec!["127.0.0.1".parse().expect("ip")],
            ..AnswerConfig::default()
        };
        let a = Answerer::new(w.table().clone(), cfg);
        let names = explain_universe();
        for (pick, how, at) in asks {
            let asked = bend(pick.get(&names).as_str(), how, at);
            let fq = if crate::index::names::is_reverse(&asked.to_ascii_lowercase()) {
                format!("{asked}.")
            } else if asked.is_empty() {
                "cluster.local.".to_string()
            } else {
                format!("{asked}.cluster.local.")
            };
            let Ok(name) = Name::from_ascii(&fq) else { continue };
            let mut m = Message::new(7, MessageType::Query, OpCode::Query);
            m.add_query(Query::query(name.clone(), RecordType::ANY));
            let reply = a.answer(&m);
            // The key as the admin side makes it: the rules' placement.
            let lower = name.to_lowercase().to_ascii();
            let lower = lower.trim_end_matches('.');
            let key = match a.rules().place(lower) {
                Place::Forward { rel, .. } => rel.to_string(),
                Place::Reverse(r) => r.to_string(),
                Place::Outside => continue,
            };
            let f = w.explain(&key);
            let rc = reply.metadata.response_code;
            let rule = f.reason.is_rule();
            let why = format!("{fq} ({key:?}): {rc:?} {} answers; explain {:?}: {}",
                reply.answers.len(), f.reason, f.detail);
            if !reply.answers.is_empty() {
                prop_assert!(rule, "records without a rule: {}", why);
            } else if rc == ResponseCode::NXDomain {
                prop_assert!(!rule && f.reason != Reason::EmptyNonTerminal,
                    "NXDOMAIN explained as existing: {}", why);
            } else {
                prop_assert_eq!(rc, ResponseCode::NoError, "{}", why);
                prop_assert!(!rule, "NODATA for ANY explained by a rule: {}", why);
            }
        }
    }
}

/// The case of issue 25: a dashed name not in the canonical spelling
/// (`fd00-0-0-0-0-0-0-1` for `fd00--1`) names nothing in DNS, and explain
/// says so instead of finding the pod.
#[test]
fn a_dashed_name_not_canonical_is_explained_as_dns_answers_it() {
    use super::writer::explain::Reason;
    let mut w = synced_writer(Policy::default());
    w.apply(Update::Pod(Change::Apply(pod("ml", "p0", "fd00::1"))));
    let a = Answerer::new(w.table().clone(), AnswerConfig::default());
    let canonical = ask(&a, "fd00--1.ml.pod", RecordType::AAAA);
    assert_eq!(canonical.answers.len(), 1, "{canonical:?}");
    assert_eq!(w.explain("fd00--1.ml.pod").reason, Reason::PodIp);
    for bent in ["fd00-0-0-0-0-0-0-1.ml.pod", "0fd00--1.ml.pod"] {
        let m = ask(&a, bent, RecordType::AAAA);
        assert_eq!(m.metadata.response_code, ResponseCode::NXDomain, "{bent}");
        let f = w.explain(bent);
        assert_eq!(f.reason, Reason::NoSuchName, "{bent}: {}", f.detail);
    }
    assert!(
        w.explain("fd00-0-0-0-0-0-0-1.ml.pod")
            .detail
            .contains("not canonically"),
    );
}
