//! kube-rs against the simulator: a watcher's whole life (initial or
//! streaming list, live events, resume, relist after compaction) and typed
//! CRUD with the status subresource.

use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

use podns_sim::SimArgs;

use super::support::*;

/// The whole life of a kube-rs watcher: initial list, live events, resume
/// after dropped watches without relisting, relist after compaction.
async fn exercise_watcher(cfg: watcher::Config, streaming: bool) {
    let sim = start_default().await;
    let addr = sim.addr;
    for i in 0..7 {
        create_pod(addr, "default", &format!("pre-{i}"), json!({"app": "x"})).await;
    }
    let (mut rx, task) = run_watcher(sim.client(), cfg);
    let before = expect_seen(&mut rx, Seen::InitDone).await;
    assert_eq!(before.first(), Some(&Seen::Init));
    let mut listed: Vec<_> = before
        .iter()
        .filter_map(|s| match s {
            Seen::InitApply(n) => Some(n.clone()),
            _ => None,
        })
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        (0..7).map(|i| format!("pre-{i}")).collect::<Vec<_>>()
    );

    create_pod(addr, "default", "live-1", json!({})).await;
    expect_seen(&mut rx, Seen::Apply("live-1".into())).await;

    // Dropped watches: the watcher resumes from its resourceVersion.
    let lists_before = stat(&get(addr, "/sim/stats").await.json(), "list", "pods");
    let watches_before = stat(&get(addr, "/sim/stats").await.json(), "watch", "pods");
    assert_eq!(
        post_json(addr, "/sim/faults/drop-watches", &json!({}))
            .await
            .status,
        200
    );
    create_pod(addr, "default", "live-2", json!({})).await;
    let between = expect_seen(&mut rx, Seen::Apply("live-2".into())).await;
    assert!(
        !between.contains(&Seen::Init),
        "resume must not relist: {between:?}"
    );
    let s = get(addr, "/sim/stats").await.json();
    assert_eq!(
        stat(&s, "list", "pods"),
        lists_before,
        "resume must not list"
    );
    assert!(
        stat(&s, "watch", "pods") > watches_before,
        "a new watch was opened"
    );

    // Compaction: the resume gets 410 and the watcher relists.
    assert_eq!(
        post_json(addr, "/sim/faults/compact", &json!({}))
            .await
            .status,
        200
    );
    assert_eq!(
        post_json(addr, "/sim/faults/drop-watches", &json!({}))
            .await
            .status,
        200
    );
    let relist = expect_seen(&mut rx, Seen::InitDone).await;
    assert!(relist.contains(&Seen::Init), "{relist:?}");
    assert!(
        relist.contains(&Seen::InitApply("live-2".into())),
        "{relist:?}"
    );
    let s = get(addr, "/sim/stats").await.json();
    if streaming {
        assert_eq!(stat(&s, "list", "pods"), 0, "streaming lists never list");
    } else {
        assert!(stat(&s, "list", "pods") > lists_before, "relisted");
    }
    let del = http(
        addr,
        "DELETE",
        "/api/v1/namespaces/default/pods/live-1",
        None,
        b"",
    )
    .await;
    assert_eq!(del.status, 200);
    expect_seen(&mut rx, Seen::Delete("live-1".into())).await;
    task.abort();
}

#[tokio::test]
async fn kube_watcher_default_config() {
    exercise_watcher(watcher::Config::default().page_size(3), false).await;
}

#[tokio::test]
async fn kube_watcher_streaming_lists() {
    exercise_watcher(watcher::Config::default().streaming_lists(), true).await;
}

#[tokio::test]
async fn kube_watcher_any_semantic_without_page_size() {
    let mut cfg = watcher::Config::default().any_semantic();
    cfg.page_size = None;
    exercise_watcher(cfg, false).await;
}

#[tokio::test]
async fn kube_client_crud_and_status_subresource() {
    let sim = start_default().await;
    let client = sim.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p: Pod = serde_json::from_value(pod("a", json!({"app": "x"}))).unwrap();
    let created = pods.create(&PostParams::default(), &p).await.unwrap();
    assert_eq!(
        created.status.as_ref().unwrap().phase.as_deref(),
        Some("Pending")
    );
    let mut st = created.clone();
    st.status.as_mut().unwrap().phase = Some("Running".into());
    st.status.as_mut().unwrap().pod_ip = Some("10.244.0.9".into());
    let after = pods
        .replace_status("a", &PostParams::default(), &st)
        .await
        .unwrap();
    assert_eq!(after.status.unwrap().pod_ip.as_deref(), Some("10.244.0.9"));
    // A replace with the stale resourceVersion conflicts.
    let err = pods
        .replace("a", &PostParams::default(), &created)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"),
        "{err:?}"
    );
    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = serde_json::from_value(
        json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}),
    )
    .unwrap();
    let svc = svcs.create(&PostParams::default(), &svc).await.unwrap();
    let ip = svc.spec.unwrap().cluster_ip.unwrap();
    assert!(ip.starts_with("10.96."), "{ip}");
    let nss: Api<Namespace> = Api::all(client);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
    nss.create(&PostParams::default(), &ns).await.unwrap();
    assert!(nss.list(&ListParams::default()).await.unwrap().items.len() >= 5);
    pods.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("a").await.unwrap().is_none());
}

/// Nodes and ServiceCIDRs: cluster-scoped, in their groups, with the
/// objects kube-apiserver and a kubelet would have made at start (the
/// default ServiceCIDR from the Service range, a Node whose podCIDRs is
/// the pod range), validated on create.
#[tokio::test]
async fn nodes_and_service_cidrs_are_served_cluster_scoped() {
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::api::networking::v1::ServiceCIDR;
    let sim = start_default().await;
    let nodes: Api<Node> = Api::all(sim.client());
    let listed = nodes.list(&ListParams::default()).await.unwrap();
    let pod_cidrs: Vec<_> = listed
        .items
        .iter()
        .map(|n| n.spec.as_ref().unwrap().pod_cidrs.clone().unwrap())
        .collect();
    assert_eq!(pod_cidrs, [vec!["10.244.0.0/16".to_string()]]);
    let cidrs: Api<ServiceCIDR> = Api::all(sim.client());
    let k = cidrs.get("kubernetes").await.unwrap();
    assert_eq!(k.spec.unwrap().cidrs.unwrap(), ["10.96.0.0/12"]);

    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n2"}, "spec": {"podCIDRs": ["10.245.0.0/24"]}}))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    nodes.delete("n2", &DeleteParams::default()).await.unwrap();
    // Not a network address, or two of one family: 422 as the apiserver.
    for bad in [
        json!(["10.245.0.1/24"]),
        json!(["10.1.0.0/24", "10.2.0.0/24"]),
    ] {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "bad"}, "spec": {"podCIDRs": bad}}))
        .unwrap();
        let err = nodes
            .create(&PostParams::default(), &node)
            .await
            .unwrap_err();
        assert!(
            matches!(err, kube::Error::Api(ref s) if s.code == 422),
            "{err:?}"
        );
    }
    // Cluster-scoped: no namespaced path.
    assert_eq!(
        get(sim.addr, "/api/v1/namespaces/default/nodes")
            .await
            .status,
        404
    );
    assert_eq!(
        get(
            sim.addr,
            "/apis/networking.k8s.io/v1/servicecidrs/kubernetes"
        )
        .await
        .status,
        200
    );
    assert_eq!(get(sim.addr, "/api/v1/servicecidrs").await.status, 404);
}

/// `--node-pod-cidrs`: a Node without a podCIDR (the node controller never
/// allocated one: `--allocate-node-cidrs=false`, the AWS VPC and Azure
/// CNIs), or with a range the pods' IPs are not taken from (Calico IPAM,
/// Cilium's cluster-pool). Bad values are refused as the flag is parsed.
#[tokio::test]
async fn the_node_pod_cidrs_say_what_the_flag_asks() {
    use k8s_openapi::api::core::v1::Node;
    use podns_sim::NodePodCidrs;
    let node_of = |sim: &Sim| {
        let nodes: Api<Node> = Api::all(sim.client());
        async move { nodes.get("sim-node-0").await.unwrap() }
    };
    let sim = start(SimArgs {
        node_pod_cidrs: NodePodCidrs::None,
        ..SimArgs::default()
    })
    .await;
    let spec = node_of(&sim).await.spec.unwrap_or_default();
    assert_eq!((spec.pod_cidr, spec.pod_cidrs), (None, None));
    let given: NodePodCidrs = "10.250.0.0/16,fd00:250::/64".parse().unwrap();
    let sim = start(SimArgs {
        node_pod_cidrs: given,
        pod_cidr: "100.64.0.0/16".into(),
        ..SimArgs::default()
    })
    .await;
    let spec = node_of(&sim).await.spec.unwrap();
    assert_eq!(spec.pod_cidr.as_deref(), Some("10.250.0.0/16"));
    assert_eq!(spec.pod_cidrs.unwrap(), ["10.250.0.0/16", "fd00:250::/64"]);
    for bad in ["", "10.250.0.1/16", "10.1.0.0/16,10.2.0.0/16", "all"] {
        assert!(bad.parse::<NodePodCidrs>().is_err(), "{bad:?}");
    }
}
