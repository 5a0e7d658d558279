//! End to end on a dual-stack cluster: `podns sim --service-cidr-v6`
//! allocates one cluster IP per family as the apiserver does, and
//! `podns serve` answers a dual-stack ClusterIP Service with both.

use std::net::IpAddr;
use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::support::*;

const T: Duration = Duration::from_secs(20);
const V4_RANGE: &str = "10.96.0.0/12";
const V6_RANGE: &str = "fd00:10:96::/112";

fn cluster_ips(s: &Service) -> Vec<String> {
    let spec = s.spec.as_ref().unwrap();
    let ips = spec.cluster_ips.clone().unwrap_or_default();
    assert_eq!(
        spec.cluster_ip.as_ref(),
        ips.first(),
        "clusterIP is clusterIPs[0]"
    );
    ips
}

fn in_range(ip: &str, range: &str) -> bool {
    let net: ipnet::IpNet = range.parse().unwrap();
    net.contains(&ip.parse::<IpAddr>().unwrap())
}

async fn ptr_of(env: &Env, ip: &str) -> Message {
    let ip: IpAddr = ip.parse().unwrap();
    ask(
        env.dns,
        &format!("{}.", podns_server::index::names::reverse(ip)),
        RecordType::PTR,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_dual_stack_cluster_ip_answers_a_aaaa_and_both_ptrs() {
    let env = env(&[&format!("--service-cidr-v6={V6_RANGE}")], &[]).await;
    let svc = create_service(
        &env.client,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api", "namespace": "ml"},
               "spec": {"ipFamilyPolicy": "RequireDualStack", "selector": {"app": "api"},
                        "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
    )
    .await;
    let ips = cluster_ips(&svc);
    assert_eq!(ips.len(), 2, "{ips:?}");
    let (v4, v6) = (ips[0].clone(), ips[1].clone());
    assert!(in_range(&v4, V4_RANGE), "{v4}");
    assert!(in_range(&v6, V6_RANGE), "{v6}");

    wait_for("api answers A", T, || async {
        addrs(&ask(env.dns, "api.ml.svc", RecordType::A).await) == [v4.as_str()]
    })
    .await;
    let m = ask(env.dns, "api.ml.svc", RecordType::AAAA).await;
    assert_eq!(rcode(&m), ResponseCode::NoError);
    assert_eq!(addrs(&m), [v6.as_str()]);
    for ip in [&v4, &v6] {
        let m = ptr_of(&env, ip).await;
        assert_eq!(ptrs(&m), ["api.ml.svc.cluster.local."], "PTR of {ip}");
    }
    // The `kubernetes` Service stays single-stack: AAAA is NODATA.
    let m = ask(env.dns, "kubernetes.default.svc", RecordType::AAAA).await;
    assert_eq!(rcode(&m), ResponseCode::NoError);
    assert!(m.answers.is_empty(), "{m:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_and_downgrade_follow_through_to_dns() {
    let env = env(&[&format!("--service-cidr-v6={V6_RANGE}")], &[]).await;
    let svc = create_service(
        &env.client,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "ml"},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    )
    .await;
    let v4 = cluster_ips(&svc)[0].clone();
    wait_for("web answers A", T, || async {
        addrs(&ask(env.dns, "web.ml.svc", RecordType::A).await) == [v4.as_str()]
    })
    .await;
    assert!(
        ask(env.dns, "web.ml.svc", RecordType::AAAA)
            .await
            .answers
            .is_empty()
    );
    let api: Api<Service> = Api::namespaced(env.client.clone(), "ml");
    let patch = |policy: &str| Patch::Merge(json!({"spec": {"ipFamilyPolicy": policy}}));
    // SingleStack → PreferDualStack: the apiserver adds an IPv6 address.
    let up = api
        .patch("web", &PatchParams::default(), &patch("PreferDualStack"))
        .await
        .unwrap();
    let ips = cluster_ips(&up);
    assert_eq!(ips[0], v4, "the primary never changes");
    let v6 = ips[1].clone();
    assert!(in_range(&v6, V6_RANGE), "{v6}");
    wait_for("web answers AAAA", T, || async {
        addrs(&ask(env.dns, "web.ml.svc", RecordType::AAAA).await) == [v6.as_str()]
    })
    .await;
    assert_eq!(
        ptrs(&ptr_of(&env, &v6).await),
        ["web.ml.svc.cluster.local."]
    );
    // Back to SingleStack: the secondary is released and leaves DNS.
    let down = api
        .patch("web", &PatchParams::default(), &patch("SingleStack"))
        .await
        .unwrap();
    assert_eq!(cluster_ips(&down), [v4.as_str()]);
    wait_for("web AAAA gone", T, || async {
        ask(env.dns, "web.ml.svc", RecordType::AAAA)
            .await
            .answers
            .is_empty()
    })
    .await;
    assert_eq!(
        addrs(&ask(env.dns, "web.ml.svc", RecordType::A).await),
        [v4.as_str()]
    );
    assert!(ptrs(&ptr_of(&env, &v6).await).is_empty());
}
