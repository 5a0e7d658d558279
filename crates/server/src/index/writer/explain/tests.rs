//! The writer's side of `podns explain`, on a writer fed directly (no
//! sockets): each reason the model can see, and the rule of each name kind.

use tokio::sync::oneshot;

use super::*;
use crate::index::testing::{
    PodExt, SliceExt, SvcExt, cluster_ip, headless, job, pod, rank_pod, selectorless, slice,
    synced_writer,
};

fn writer(policy: Policy) -> Writer {
    synced_writer(policy)
}

fn pods(w: &mut Writer, pods: Vec<PodInfo>) {
    for p in pods {
        w.apply(Update::Pod(Change::Apply(p)));
    }
}

fn svc(w: &mut Writer, s: ServiceInfo) {
    w.apply(Update::Service(Change::Apply(s)));
}

#[test]
fn hostname_rule_and_the_pod_it_came_from() {
    let mut w = writer(Policy::default());
    pods(&mut w, vec![pod("ml", "w-0", "10.0.0.1").host("w-0", "w")]);
    let f = w.explain("w-0.w.ml.svc");
    assert_eq!(f.reason, Reason::Hostname);
    assert_eq!(f.namespace.as_deref(), Some("ml"));
    assert_eq!(f.objects.len(), 1);
    let o = &f.objects[0];
    assert_eq!(
        (o.kind, o.name.as_str(), o.role.as_str()),
        ("pod", "w-0", "answers")
    );
    assert_eq!(o.ips, vec!["10.0.0.1".parse::<IpAddr>().unwrap()]);
    assert_eq!((o.phase.as_deref(), o.ready), (Some("Running"), Some(true)));
}

#[test]
fn hostname_without_a_published_pod_says_why() {
    let mut w = writer(Policy::default());
    pods(
        &mut w,
        vec![
            pod("ml", "a", "").host("a", "w"),
            pod("ml", "b", "10.0.0.2").host("b", "w").deleting(),
            pod("ml", "c", "10.0.0.3")
                .host("c", "w")
                .phase(Phase::Failed),
        ],
    );
    assert_eq!(w.explain("nope.w.ml.svc").reason, Reason::NoPod);
    assert_eq!(w.explain("a.w.ml.svc").reason, Reason::PodNoIp);
    assert_eq!(w.explain("b.w.ml.svc").reason, Reason::PodTerminating);
    let c = w.explain("c.w.ml.svc");
    assert_eq!(c.reason, Reason::PodTerminal);
    assert!(c.detail.contains("Failed"), "{}", c.detail);
    assert_eq!(c.objects[0].published, Some(false));
    assert_eq!(
        c.objects[0].not_published_because,
        Some(Reason::PodTerminal)
    );
}

#[test]
fn publish_ready_and_hostnames_service_are_named() {
    let mut w = writer(Policy {
        publish: Publish::Ready,
        ..Policy::default()
    });
    pods(
        &mut w,
        vec![pod("ml", "a", "10.0.0.1").host("a", "w").ready(false)],
    );
    assert_eq!(w.explain("a.w.ml.svc").reason, Reason::PodNotReady);
    svc(&mut w, headless("ml", "w", "x").publish_not_ready());
    assert_eq!(w.explain("a.w.ml.svc").reason, Reason::Hostname);

    let mut w = writer(Policy {
        hostnames: Hostnames::Service,
        ..Policy::default()
    });
    pods(&mut w, vec![pod("ml", "a", "10.0.0.1").host("a", "w")]);
    assert_eq!(w.explain("a.w.ml.svc").reason, Reason::HostnameNeedsService);
}

#[test]
fn shared_hostname_says_which_pod_and_why() {
    let mut w = writer(Policy::default());
    pods(
        &mut w,
        vec![
            pod("ml", "old", "10.0.0.1").host("r", "w").created(100),
            pod("ml", "new", "10.0.0.2").host("r", "w").created(200),
        ],
    );
    let f = w.explain("r.w.ml.svc");
    assert_eq!(f.reason, Reason::HostnameShared);
    assert_eq!(f.chosen_by, Some("older"));
    assert_eq!(f.objects[0].name, "old");
    assert_eq!(f.objects[1].role, "not chosen");
    pods(
        &mut w,
        vec![
            pod("ml", "new", "10.0.0.2")
                .host("r", "w")
                .created(200)
                .ready(true),
        ],
    );
    pods(
        &mut w,
        vec![
            pod("ml", "old", "10.0.0.1")
                .host("r", "w")
                .created(100)
                .ready(false),
        ],
    );
    let f = w.explain("r.w.ml.svc");
    assert_eq!(
        (f.chosen_by, f.objects[0].name.as_str()),
        (Some("ready"), "new")
    );
    assert!(
        f.detail.contains("because it is Ready and old is not"),
        "{}",
        f.detail
    );
}

#[test]
fn headless_service_members_and_dashed_names() {
    let mut w = writer(Policy::default());
    svc(&mut w, headless("ml", "w", "x"));
    let f = w.explain("w.ml.svc");
    assert_eq!(f.reason, Reason::ServiceNoPublishedPods);
    assert!(f.detail.contains("selects no pod"), "{}", f.detail);
    pods(&mut w, vec![pod("ml", "a", "").label("app", "x")]);
    let f = w.explain("w.ml.svc");
    assert_eq!(f.reason, Reason::ServiceNoPublishedPods);
    assert_eq!(f.objects[1].not_published_because, Some(Reason::PodNoIp));
    pods(&mut w, vec![pod("ml", "a", "10.0.0.1").label("app", "x")]);
    assert_eq!(w.explain("w.ml.svc").reason, Reason::HeadlessService);
    assert_eq!(
        w.explain("10-0-0-1.w.ml.svc").reason,
        Reason::HeadlessMember
    );
    assert_eq!(w.explain("10-0-0-9.w.ml.svc").reason, Reason::NoPodWithIp);
    assert_eq!(w.explain("nosvc.ml.svc").reason, Reason::NoService);
}

#[test]
fn cluster_ip_external_name_ptr_and_pod_names() {
    let mut w = writer(Policy::default());
    svc(
        &mut w,
        cluster_ip("web", "api", "10.96.0.10").port(Some("http"), 80, TargetPort::Same),
    );
    pods(
        &mut w,
        vec![
            pod("ml", "a", "10.0.0.1").host("a", "w"),
            pod("ml", "h", "10.0.0.5").host_network(),
        ],
    );
    assert_eq!(w.explain("api.web.svc").reason, Reason::ClusterIp);
    assert_eq!(
        w.explain("_http._tcp.api.web.svc").reason,
        Reason::ServicePort
    );
    assert_eq!(
        w.explain("_grpc._tcp.api.web.svc").reason,
        Reason::NoSuchName
    );
    assert_eq!(
        w.explain("10.0.96.10.in-addr.arpa").reason,
        Reason::PtrService
    );
    let f = w.explain("1.0.0.10.in-addr.arpa");
    assert_eq!(f.reason, Reason::PtrPod);
    assert!(f.detail.contains("its hostname name"), "{}", f.detail);
    assert_eq!(
        w.explain("5.0.0.10.in-addr.arpa").reason,
        Reason::PodHostNetwork
    );
    assert_eq!(
        w.explain("9.0.0.10.in-addr.arpa").reason,
        Reason::NoPodWithIp
    );
    assert_eq!(w.explain("10-0-0-1.ml.pod").reason, Reason::PodIp);
    assert_eq!(w.explain("10-0-0-1.web.pod").reason, Reason::NoPodWithIp);
    assert_eq!(w.explain("").reason, Reason::Server);
    assert_eq!(w.explain("x.y").reason, Reason::NoSuchName);
}

#[test]
fn rank_view_names() {
    let mut w = writer(Policy {
        rank_view: true,
        ..Policy::default()
    });
    w.apply(Update::Job(Change::Apply(job("ml", "bert", 2, None))));
    pods(
        &mut w,
        vec![
            rank_pod("ml", "bert", 0, "10.0.0.1"),
            rank_pod("ml", "bert", 1, "").phase(Phase::Pending),
        ],
    );
    assert_eq!(w.explain("0.bert.ml.rank").reason, Reason::Rank);
    assert_eq!(w.explain("leader.bert.ml.rank").reason, Reason::RankLeader);
    assert_eq!(w.explain("bert.ml.rank").reason, Reason::RankSummary);
    assert_eq!(w.explain("1.bert.ml.rank").reason, Reason::PodNoIp);
    assert_eq!(w.explain("2.bert.ml.rank").reason, Reason::NoRank);
    assert_eq!(w.explain("nojob.ml.rank").reason, Reason::NoRank);
}

#[test]
fn reason_codes_are_snake_case() {
    assert_eq!(Reason::PodTerminating.code(), "pod_terminating");
    assert_eq!(
        Reason::PodOutsideLabelSelector.code(),
        "pod_outside_label_selector"
    );
    assert!(Reason::Hostname.is_rule() && !Reason::NoPod.is_rule());
}

#[test]
fn the_writer_answers_explain_requests_while_no_event_arrives() {
    let mut w = writer(Policy::default());
    pods(&mut w, vec![pod("ml", "a", "10.0.0.1").host("a", "w")]);
    let (etx, erx) = mpsc::channel(1);
    let (tx, rx) = mpsc::channel::<Arrival>(1);
    let w = w.with_explain(erx);
    let writer = std::thread::spawn(move || w.run_blocking(rx));
    // No arrival is queued: the writer waits, and answers meanwhile.
    let (reply, answer) = oneshot::channel();
    etx.blocking_send(ExplainRequest {
        key: "a.w.ml.svc".into(),
        reply,
    })
    .unwrap();
    assert_eq!(answer.blocking_recv().unwrap().reason, Reason::Hostname);
    tx.blocking_send(Arrival {
        update: Update::Pod(Change::Delete(ObjKey::new("ml", "a"))),
        at: std::time::Instant::now(),
    })
    .unwrap();
    // Events still flow between requests: a later request sees the delete.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (reply, answer) = oneshot::channel();
        etx.blocking_send(ExplainRequest {
            key: "a.w.ml.svc".into(),
            reply,
        })
        .unwrap();
        match answer.blocking_recv().unwrap().reason {
            Reason::NoPod => break,
            Reason::Hostname => {
                assert!(std::time::Instant::now() < deadline, "delete never applied")
            }
            other => panic!("{other:?}"),
        }
    }
    // Closing the explain channel leaves the writer running on events.
    drop(etx);
    drop(tx);
    writer.join().unwrap();
}

#[test]
fn services_without_selector_are_explained_by_their_slices() {
    let mut w = writer(Policy::default());
    svc(&mut w, selectorless("ml", "db"));
    let f = w.explain("db.ml.svc");
    assert_eq!(f.reason, Reason::ServiceNoPublishedPods);
    assert!(f.detail.contains("no selector"), "{}", f.detail);
    w.apply(Update::Slice(Change::Apply(
        slice("ml", "db-1", "db")
            .endpoint("10.2.0.1", Some("primary"), true)
            .endpoint("10.2.0.2", None, true),
    )));
    let f = w.explain("db.ml.svc");
    assert_eq!(f.reason, Reason::EndpointSlice);
    assert!(f.detail.contains("2 published endpoint(s)"), "{}", f.detail);
    let f = w.explain("primary.db.ml.svc");
    assert_eq!(f.reason, Reason::EndpointSlice);
    assert!(f.detail.contains("ml/db-1"), "{}", f.detail);
    assert_eq!(
        w.explain("10-2-0-2.db.ml.svc").reason,
        Reason::EndpointSlice
    );
    assert_eq!(w.explain("nope.db.ml.svc").reason, Reason::NoPod);
    assert_eq!(
        w.explain("1.0.2.10.in-addr.arpa").reason,
        Reason::EndpointSlice
    );
}
