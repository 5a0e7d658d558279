//! A real forwarder in front of podns: Unbound (standing in for CoreDNS
//! `forward`, which is not packaged here) with a stub zone for the cluster
//! zone. Through it: a rank's A, a 300-pod headless set that only fits over
//! TCP, and an NXDOMAIN that turns into an answer within 2 s of the pod
//! getting its IP, because Unbound honours podns's SOA MINIMUM of 1 s.

use std::time::{Duration, Instant};

use futures::StreamExt;
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

use crate::daemons::{find_tool, free_port, unbound};
use crate::support::*;

/// A recursive query (RD=1), as a stub resolver in a pod sends it.
fn rd(name: &str, qtype: RecordType, edns: Option<u16>) -> hickory_proto::op::Message {
    let mut m = query_msg(&fqdn(name), qtype, edns);
    m.metadata.recursion_desired = true;
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbound_in_front_gets_ranks_the_whole_gang_over_tcp_and_forgets_nxdomain_fast() {
    let Some(unbound_bin) = find_tool("unbound") else {
        need("unbound", false);
        return;
    };
    // No --kubelet: this test writes every IP itself, so a pod can stay
    // without one until the test says so.
    let env = env(&["--jobs=1", "--ranks=300"], &[]).await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let list = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 300);
    let mut names: Vec<String> = list
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    names.sort();
    futures::stream::iter(names.iter().enumerate())
        .for_each_concurrent(16, |(i, name)| {
            let client = env.client.clone();
            async move {
                let ip = format!("10.244.{}.{}", 1 + i / 200, 1 + i % 200);
                set_status(&client, "default", name, &[&ip], true).await;
            }
        })
        .await;
    wait_for("300 ranks published", Duration::from_secs(20), || async {
        tcp(env.dns, &rd("train-0.default.svc", RecordType::A, None))
            .await
            .answers
            .len()
            == 300
    })
    .await;

    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let mut daemon = unbound(&unbound_bin, dir.path(), port, ZONE, env.dns);
    daemon
        .wait_answering(addr, &fqdn("train-0-0.train-0.default.svc"), RecordType::A)
        .await;

    // A rank's A, as podns has it, recursion available from the forwarder.
    let direct = ask(env.dns, "train-0-7.train-0.default.svc", RecordType::A).await;
    let via = udp(
        addr,
        &rd("train-0-7.train-0.default.svc", RecordType::A, Some(1232)),
    )
    .await;
    assert_eq!(rcode(&via), ResponseCode::NoError);
    assert_eq!(addrs(&via), addrs(&direct));
    assert_eq!(addrs(&via).len(), 1);
    assert!(via.metadata.recursion_available);

    // The gang: too big for UDP, so Unbound must fetch it over TCP from
    // podns and hand it whole to a TCP client.
    let m = udp(addr, &rd("train-0.default.svc", RecordType::A, Some(1232))).await;
    assert!(m.metadata.truncation, "300 A records do not fit 1232 bytes");
    let m = tcp(addr, &rd("train-0.default.svc", RecordType::A, None)).await;
    assert_eq!(rcode(&m), ResponseCode::NoError);
    assert_eq!(m.answers.len(), 300, "the whole set through Unbound");
    assert_eq!(
        addrs(&m),
        addrs(&tcp(env.dns, &rd("train-0.default.svc", RecordType::A, None)).await)
    );

    // A peer that does not exist yet: NXDOMAIN with podns's SOA (MINIMUM 1).
    let mut body = pod_json("default", "late-x1y2z", json!({"app": "late"}));
    body["spec"]["hostname"] = json!("late");
    body["spec"]["subdomain"] = json!("train-0");
    create_pod(&env.client, body).await;
    let late = "late.train-0.default.svc";
    let m = udp(addr, &rd(late, RecordType::A, Some(1232))).await;
    assert_eq!(rcode(&m), ResponseCode::NXDomain);
    let soa = m
        .authorities
        .iter()
        .find_map(|r| match &r.data {
            RData::SOA(s) => Some((r.ttl, s.minimum)),
            _ => None,
        })
        .expect("SOA in the authority section");
    assert!(soa.0 <= 1 && soa.1 == 1, "negative TTL ≤ 1 s: {soa:?}");

    // The kubelet writes the IP; Unbound must answer within 2 s.
    set_status(&env.client, "default", "late-x1y2z", &["10.244.9.9"], false).await;
    let written = Instant::now();
    wait_for(
        "late answers through unbound",
        Duration::from_secs(2),
        || async {
            addrs(&udp(addr, &rd(late, RecordType::A, Some(1232))).await) == ["10.244.9.9"]
        },
    )
    .await;
    let took = written.elapsed();
    eprintln!("NXDOMAIN → answer through unbound in {took:?}");
    assert!(took <= Duration::from_secs(2), "took {took:?}");
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "unbound still up"
    );
}
