//! The reverse zones podns owns: the cluster's pod and Service ranges,
//! learned from Nodes and ServiceCIDRs on `podns sim` (or given with
//! `--reverse-cidr`); outside them the PTR of every address the index
//! holds (Nodes without podCIDRs, pods outside them) and REFUSED for every
//! other reverse name; and glibc's own resolver falling through to the
//! next nameserver on that REFUSED.

use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::api::{Api, DeleteParams, PostParams};

use crate::support::*;

const T: Duration = Duration::from_secs(20);

async fn rcode_of(dns: std::net::SocketAddr, name: &str, t: RecordType) -> ResponseCode {
    rcode(&ask(dns, name, t).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_reverse_names_are_refused_and_the_cluster_ranges_answered() {
    // The simulator's Node `sim-node-0` has podCIDRs 10.244.0.0/16 and its
    // ServiceCIDR `kubernetes` 10.96.0.0/12 (sixteen /16 zones).
    let env = env(&[], &[]).await;
    for name in [
        "8.8.8.8.in-addr.arpa.",
        "1.0.0.127.in-addr.arpa.",
        "10.in-addr.arpa.",
        "in-addr.arpa.",
        "1.0.112.10.in-addr.arpa.",
        "8.8.8.8.8.in-addr.arpa.",
    ] {
        let m = ask(env.dns, name, RecordType::PTR).await;
        assert_eq!(rcode(&m), ResponseCode::Refused, "{name}");
        assert!(!m.metadata.authoritative, "{name}");
    }
    // A ClusterIP in the Service range: its PTR.
    let m = ask(env.dns, "1.0.96.10.in-addr.arpa.", RecordType::PTR).await;
    assert!(
        matches!(&m.answers[..], [r] if matches!(&r.data, RData::PTR(p) if p.0.to_ascii() == "kubernetes.default.svc.cluster.local.")),
        "{m:?}"
    );
    // No pod has 10.244.9.9: an authoritative NXDOMAIN, the SOA of its zone.
    let m = ask(env.dns, "9.9.244.10.in-addr.arpa.", RecordType::PTR).await;
    assert_eq!(rcode(&m), ResponseCode::NXDomain);
    assert!(m.metadata.authoritative);
    assert_eq!(m.authorities[0].name.to_ascii(), "244.10.in-addr.arpa.");
    // The zone's apex has its SOA and NS; a Service zone's too.
    for apex in ["244.10.in-addr.arpa.", "111.10.in-addr.arpa."] {
        let m = ask(env.dns, apex, RecordType::SOA).await;
        assert!(
            matches!(&m.answers[..], [r] if matches!(r.data, RData::SOA(_))),
            "{apex}"
        );
        let m = ask(env.dns, apex, RecordType::NS).await;
        assert!(
            matches!(&m.answers[..], [r] if matches!(r.data, RData::NS(_))),
            "{apex}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_are_learned_as_nodes_and_service_cidrs_come_and_go() {
    let env = env(&[], &[]).await;
    let name = "7.1.50.10.in-addr.arpa.";
    assert_eq!(
        rcode_of(env.dns, name, RecordType::PTR).await,
        ResponseCode::Refused
    );

    let nodes: Api<Node> = Api::all(env.client.clone());
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "gpu-node-00050"},
        "spec": {"podCIDR": "10.50.1.0/24", "podCIDRs": ["10.50.1.0/24"]},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    wait_for("the new node's range is owned", T, || async {
        rcode_of(env.dns, name, RecordType::PTR).await == ResponseCode::NXDomain
    })
    .await;
    let m = ask(env.dns, "1.50.10.in-addr.arpa.", RecordType::SOA).await;
    assert_eq!(m.answers.len(), 1, "the /24's apex: {m:?}");
    // Beside it, still someone else's.
    assert_eq!(
        rcode_of(env.dns, "7.2.50.10.in-addr.arpa.", RecordType::PTR).await,
        ResponseCode::Refused
    );
    nodes
        .delete("gpu-node-00050", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the deleted node's range is dropped", T, || async {
        rcode_of(env.dns, name, RecordType::PTR).await == ResponseCode::Refused
    })
    .await;

    // A second ServiceCIDR (dual ranges are how clusters grow their
    // Service space) is learned too, IPv6 included.
    let cidrs: Api<ServiceCIDR> = Api::all(env.client.clone());
    let extra: ServiceCIDR = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "extra"},
        "spec": {"cidrs": ["10.200.0.0/16", "fd00:200::/108"]},
    }))
    .unwrap();
    cidrs.create(&PostParams::default(), &extra).await.unwrap();
    let v6 = podns_server::index::names::reverse("fd00:200::5".parse().unwrap());
    wait_for("the new ServiceCIDR's ranges are owned", T, || async {
        rcode_of(env.dns, "5.0.200.10.in-addr.arpa.", RecordType::PTR).await
            == ResponseCode::NXDomain
            && rcode_of(env.dns, &format!("{v6}."), RecordType::PTR).await == ResponseCode::NXDomain
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reverse_cidr_is_the_exact_set_and_nothing_is_learned() {
    let env = env(&[], &["--reverse-cidr=10.244.1.0/24"]).await;
    // The Node's 10.244.0.0/16 and the Service range are not learned...
    for name in ["9.9.244.10.in-addr.arpa.", "2.0.96.10.in-addr.arpa."] {
        assert_eq!(
            rcode_of(env.dns, name, RecordType::PTR).await,
            ResponseCode::Refused,
            "{name}"
        );
    }
    // ...but an address the index holds answers wherever it lies.
    let m = ask(env.dns, "1.0.96.10.in-addr.arpa.", RecordType::PTR).await;
    assert_eq!(ptrs(&m), ["kubernetes.default.svc.cluster.local."]);
    assert_eq!(
        rcode_of(env.dns, "9.1.244.10.in-addr.arpa.", RecordType::PTR).await,
        ResponseCode::NXDomain
    );
    // podns never asked for Nodes or ServiceCIDRs.
    let stats = sim_get(&env.client, "/sim/stats").await;
    for verb in ["list", "watch"] {
        for resource in ["nodes", "servicecidrs"] {
            assert!(
                stats["requests"][verb][resource].is_null(),
                "{verb} {resource}: {stats}"
            );
        }
    }
}

/// The reverse name of `ip`, absolute, with the trailing dot.
fn rev(ip: &str) -> String {
    format!(
        "{}.",
        podns_server::index::names::reverse(ip.parse().unwrap())
    )
}

/// The addresses rank `i` of the simulator's job `train-0` answers.
async fn rank_ips(dns: std::net::SocketAddr, i: usize) -> Vec<String> {
    let name = format!("train-0-{i}.train-0.default.svc");
    wait_resolves(dns, &name, T).await;
    let mut ips = addrs(&ask(dns, &name, RecordType::A).await);
    ips.extend(addrs(&ask(dns, &name, RecordType::AAAA).await));
    ips
}

/// A pod's PTR, answered with AA and nothing in Authority, by a podns
/// that owns no zone holding it.
async fn assert_held_ptr(dns: std::net::SocketAddr, ip: &str, target: &str) {
    let m = ask(dns, &rev(ip), RecordType::PTR).await;
    assert_eq!(rcode(&m), ResponseCode::NoError, "{ip}: {m:?}");
    assert!(m.metadata.authoritative, "{ip}");
    assert!(m.authorities.is_empty(), "{ip}: {m:?}");
    assert_eq!(ptrs(&m), [target], "{ip}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_without_pod_cidrs_still_answer_every_pods_ptr() {
    // The AWS VPC CNI and Azure CNI: the node controller allocates no
    // podCIDR, so only the Service range's zones are learned.
    let env = env(
        &[
            "--kubelet",
            "--jobs=1",
            "--ranks=2",
            "--node-pod-cidrs=none",
            "--pod-cidr-v6=fd00:64::/64",
        ],
        &[],
    )
    .await;
    let ips = rank_ips(env.dns, 1).await;
    assert_eq!(ips.len(), 2, "dual-stack: {ips:?}");
    for ip in &ips {
        assert_held_ptr(env.dns, ip, "train-0-1.train-0.default.svc.cluster.local.").await;
    }
    // An address no one holds, beside the pods: REFUSED (not ours to deny).
    for name in [rev("10.244.250.250"), rev("fd00:64::ffff"), rev("8.8.8.8")] {
        assert_eq!(
            rcode_of(env.dns, &name, RecordType::PTR).await,
            ResponseCode::Refused,
            "{name}"
        );
    }
    // The Service range is still owned: NXDOMAIN for an unused address.
    assert_eq!(
        rcode_of(env.dns, &rev("10.96.250.250"), RecordType::PTR).await,
        ResponseCode::NXDomain
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_outside_the_node_ranges_answer_their_ptr() {
    // Calico IPAM, Cilium's cluster-pool: the Node says 10.250.0.0/16, the
    // CNI hands out 100.64.0.0/16.
    let env = env(
        &[
            "--kubelet",
            "--jobs=1",
            "--ranks=2",
            "--pod-cidr=100.64.0.0/16",
            "--node-pod-cidrs=10.250.0.0/16",
        ],
        &[],
    )
    .await;
    let ips = rank_ips(env.dns, 0).await;
    assert!(ips[0].starts_with("100.64."), "{ips:?}");
    assert_held_ptr(
        env.dns,
        &ips[0],
        "train-0-0.train-0.default.svc.cluster.local.",
    )
    .await;
    // Inside the Node's range: podns's zone, NXDOMAIN for no one's address.
    let m = ask(env.dns, &rev("10.250.0.9"), RecordType::PTR).await;
    assert_eq!(rcode(&m), ResponseCode::NXDomain);
    assert_eq!(m.authorities[0].name.to_ascii(), "250.10.in-addr.arpa.");
    // Outside, unheld: REFUSED; the held address's other types too.
    assert_eq!(
        rcode_of(env.dns, &rev("100.64.250.250"), RecordType::PTR).await,
        ResponseCode::Refused
    );
    assert_eq!(
        rcode_of(env.dns, &rev(&ips[0]), RecordType::TXT).await,
        ResponseCode::Refused
    );
    // The pod goes: its PTR is REFUSED again.
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(env.client.clone(), "default");
    let list = pods.list(&Default::default()).await.unwrap();
    let pod = list
        .items
        .iter()
        .find(|p| p.status.as_ref().and_then(|s| s.pod_ip.as_deref()) == Some(ips[0].as_str()))
        .and_then(|p| p.metadata.name.clone())
        .unwrap();
    pods.delete(&pod, &DeleteParams::default()).await.unwrap();
    let name = rev(&ips[0]);
    wait_for("the deleted pod's PTR is refused", T, || async {
        let m = ask(env.dns, &name, RecordType::PTR).await;
        rcode(&m) == ResponseCode::Refused
            || ptrs(&m) != ["train-0-0.train-0.default.svc.cluster.local."]
    })
    .await;
}

/// Whether this process may make user, mount and network namespaces.
fn can_unshare() -> bool {
    std::process::Command::new("unshare")
        .args(["-rmn", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

/// glibc's own resolver, in a mount and network namespace of its own
/// (`unshare -rmn`): two `podns sim`s, a podns for each on port 53 of
/// 127.0.0.2 and 127.0.0.3, and a resolv.conf (bind-mounted over
/// /etc/resolv.conf) that lists the first podns first. The second owns
/// 8.8.8.0/24 (its simulator's Service range), the first does not: the
/// first answers REFUSED for `8.8.8.1.in-addr.arpa` and `getent hosts
/// 8.8.8.1` gets the second's answer. Had the first answered NXDOMAIN,
/// glibc would have stopped there: a third podns that owns every reverse
/// name shows it does.
#[test]
fn glibc_falls_through_to_the_next_nameserver_on_refused() {
    if !need_cmd("getent") || !need_cmd("ip") || !need("unshare -rmn", can_unshare()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        r#"
set -u
PODNS={podns}
D={dir}
# Every child is killed on exit, and none holds the test's stdout.
PIDS=""
trap 'kill $PIDS 2>/dev/null; wait' EXIT
ip link set lo up
printf 'hosts: dns\n' > $D/nsswitch.conf
[ -e /etc/nsswitch.conf ] && mount --bind $D/nsswitch.conf /etc/nsswitch.conf
: > $D/resolv.conf
mount --bind $D/resolv.conf /etc/resolv.conf || {{ echo "SETUP cannot bind-mount resolv.conf"; exit 1; }}
$PODNS sim --listen 127.0.0.1:16443 --kubeconfig-out $D/a.yaml >/dev/null 2>$D/sim-a.log &
PIDS="$PIDS $!"
$PODNS sim --listen 127.0.0.1:16444 --service-cidr 8.8.8.0/24 --kubeconfig-out $D/b.yaml >/dev/null 2>$D/sim-b.log &
PIDS="$PIDS $!"
i=0; while [ ! -s $D/a.yaml ] || [ ! -s $D/b.yaml ]; do i=$((i+1)); [ $i -gt 300 ] && {{ echo "SETUP no kubeconfig"; exit 1; }}; sleep 0.1; done
$PODNS serve --kubeconfig $D/a.yaml --dns-listen 127.0.0.2:53 --admin-listen 127.0.0.2:9153 >/dev/null 2>$D/podns-a.log &
PIDS="$PIDS $!"
$PODNS serve --kubeconfig $D/b.yaml --dns-listen 127.0.0.3:53 --admin-listen 127.0.0.3:9153 >/dev/null 2>$D/podns-b.log &
PIDS="$PIDS $!"
$PODNS serve --kubeconfig $D/a.yaml --dns-listen 127.0.0.4:53 --admin-listen 127.0.0.4:9153 --reverse-cidr 0.0.0.0/0 >/dev/null 2>$D/podns-all.log &
PIDS="$PIDS $!"
resolv() {{ printf '%s\n' "$@" "options timeout:1 attempts:1" > $D/resolv.conf; }}
poll() {{ i=0; while [ $i -lt 300 ]; do getent hosts "$1" >/dev/null && return 0; i=$((i+1)); sleep 0.1; done; echo "SETUP $1 never answered"; exit 1; }}
resolv "nameserver 127.0.0.3"; poll 8.8.8.1
resolv "nameserver 127.0.0.2"; poll 10.96.0.1
r=$(getent hosts 8.8.8.1); echo "ALONE $r rc=$?"
resolv "nameserver 127.0.0.2" "nameserver 127.0.0.3"
r=$(getent hosts 8.8.8.1); echo "BOTH $r rc=$?"
r=$(getent hosts 10.96.0.1); echo "INSIDE $r rc=$?"
r=$(getent hosts 10.244.9.9); echo "NXDOMAIN $r rc=$?"
resolv "nameserver 127.0.0.4"; poll 10.96.0.1
resolv "nameserver 127.0.0.4" "nameserver 127.0.0.3"
r=$(getent hosts 8.8.8.1); echo "ALL $r rc=$?"
"#,
        podns = PODNS_BIN,
        dir = dir.path().display()
    );
    let out = std::process::Command::new("timeout")
        .args(["120", "unshare", "-rmn", "sh", "-c", &script])
        .output()
        .expect("run unshare");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let logs = ["sim-a.log", "podns-a.log", "podns-b.log"]
        .map(|f| std::fs::read_to_string(dir.path().join(f)).unwrap_or_default());
    let line = |tag: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{tag} ")))
            .unwrap_or_else(|| {
                panic!(
                    "no {tag} line in {stdout:?}; stderr {}; logs {logs:?}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
            .to_string()
    };
    // The first podns alone: REFUSED, and no one else to ask.
    assert!(line("ALONE").ends_with("rc=2"), "{stdout}");
    // Both: glibc asked the next server and got its answer.
    let both = line("BOTH");
    assert!(
        both.contains("8.8.8.1")
            && both.contains("kubernetes.default.svc.cluster.local")
            && both.ends_with("rc=0"),
        "{stdout}"
    );
    // Inside its own ranges the first podns answers...
    let inside = line("INSIDE");
    assert!(
        inside.contains("kubernetes.default.svc.cluster.local") && inside.ends_with("rc=0"),
        "{stdout}"
    );
    // ...and its authoritative NXDOMAIN ends the search (glibc does not
    // ask the next server after one): why foreign names must be REFUSED.
    assert!(line("NXDOMAIN").ends_with("rc=2"), "{stdout}");
    // The trap this fixes: a podns that owns every reverse name
    // (`--reverse-cidr 0.0.0.0/0`, as podns did by default before) answers
    // NXDOMAIN for 8.8.8.1 and the lookup fails, next server or not.
    assert!(line("ALL").ends_with("rc=2"), "{stdout}");
}
