//! The compact stream between a relay and its node instances (`podns sim`
//! → relay → node instance, real sockets): a node instance's watches use
//! it and answer as one over Protobuf does; kube-rs clients of the relay
//! still get Protobuf and JSON.

use hickory_proto::rr::RecordType;
use http_body_util::BodyExt;
use podns_server::metrics::{DecodeErrorLabels, Metrics, WireLabels};

use crate::relay::{
    T, env_with_relay, node_instance, node_of_pods, pods_with_ip, relay_client, relay_with_jobs,
    wait_held,
};
use crate::support::*;

fn started(m: &Metrics, wire: &'static str) -> u64 {
    m.relay_watches_started
        .get_or_create(&WireLabels { wire })
        .get()
}

fn decode_errors(m: &Metrics) -> u64 {
    let mut n = 0;
    for resource in ["pods", "services", "jobs", "endpointslices"] {
        for error in podns_server::k8s::compact::DecodeError::LABELS {
            n += m
                .watch_decode_errors
                .get_or_create(&DecodeErrorLabels { resource, error })
                .get();
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_instances_watch_in_the_compact_stream_and_answer_as_over_protobuf() {
    // Enough pods for the relay to train a dictionary (64), then the gang
    // the node instances hold.
    let (env, _dir, kubeconfig, _relay, nodes) =
        relay_with_jobs(&[("bulk", "big", 72), ("ml", "train", 8)]).await;
    let relay_metrics = env.server.as_ref().unwrap().metrics.clone();
    let node = nodes[1].clone();

    // Two node instances of the same node: one as shipped (auto: the
    // compact stream), one asking for Protobuf.
    let compact = node_instance(&env, &kubeconfig, &node, &["--wire=auto"]).await;
    wait_held(&compact.table, &["ml"]).await;
    // Its watches: its node's pods, the namespace's pods, Services, Jobs.
    wait_for(
        "the node instance's watches in the compact stream",
        T,
        || async { started(&relay_metrics, "compact") >= 4 },
    )
    .await;
    assert_eq!(started(&relay_metrics, "protobuf"), 0);
    let protobuf = node_instance(&env, &kubeconfig, &node, &["--wire=protobuf"]).await;
    wait_held(&protobuf.table, &["ml"]).await;
    wait_for("the other's watches in Protobuf", T, || async {
        started(&relay_metrics, "protobuf") >= 4
    })
    .await;
    let compact_watches = started(&relay_metrics, "compact");
    assert_eq!(
        started(&relay_metrics, "compact"),
        compact_watches,
        "--wire protobuf asks for Protobuf only"
    );

    let names = [
        ("train-0.train.ml.svc", RecordType::A),
        ("train.ml.svc", RecordType::A),
        ("train.ml.svc", RecordType::SRV),
        ("5.train.ml.rank", RecordType::A),
        ("train.ml.rank", RecordType::TXT),
    ];
    let answers = |dns| async move {
        let mut out = Vec::new();
        for (name, t) in names {
            let msg = query_msg(&fqdn(name), t, Some(1232));
            let r = udp(dns, &msg).await;
            assert!(!r.answers.is_empty(), "{name} {t}");
            out.push(r.answers);
        }
        out
    };
    assert_eq!(
        answers(compact.dns_addr).await,
        answers(protobuf.dns_addr).await
    );

    // Changes after the lists come as compact events: a rank replaced.
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(env.client.clone(), "ml");
    let victim = pods
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("train-3"))
        })
        .unwrap();
    let rank3 = query_msg(&fqdn("3.train.ml.rank"), RecordType::A, Some(1232));
    let before = format!("{:?}", udp(compact.dns_addr, &rank3).await.answers);
    pods.delete(
        victim.metadata.name.as_deref().unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    for dns in [compact.dns_addr, protobuf.dns_addr] {
        wait_for("rank 3's answer changed on both node instances", T, || {
            let (msg, before) = (rank3.clone(), before.clone());
            async move { format!("{:?}", udp(dns, &msg).await.answers) != before }
        })
        .await;
    }
    wait_for("the same answers from both node instances", T, || async {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for (name, t) in names {
            let msg = query_msg(&fqdn(name), t, Some(1232));
            a.push(udp(compact.dns_addr, &msg).await.answers);
            b.push(udp(protobuf.dns_addr, &msg).await.answers);
        }
        a == b
    })
    .await;
    assert!(
        started(&relay_metrics, "compact") >= compact_watches,
        "still watching"
    );
    assert_eq!(decode_errors(&compact.metrics), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_clients_of_the_relay_still_get_protobuf_and_json() {
    let (env, _dir, kubeconfig) = env_with_relay(&[]).await;
    let relay_metrics = env.server.as_ref().unwrap().metrics.clone();
    create_job(&env.client, "ml", "train", 4, "indexed-job").await;
    let relay = relay_client(&kubeconfig).await;
    node_of_pods(&relay, "ml", 4).await;
    let watch = |accept: Option<&'static str>| {
        let relay = relay.clone();
        async move {
            let mut req = http::Request::builder()
                .uri("/api/v1/namespaces/ml/pods?watch=true&resourceVersion=0&timeoutSeconds=1");
            if let Some(a) = accept {
                req = req.header("accept", a);
            }
            let res = relay
                .send(req.body(Vec::new()).unwrap().map(kube::client::Body::from))
                .await
                .unwrap();
            let ct = res.headers()["content-type"].to_str().unwrap().to_owned();
            let body = res.into_body().collect().await.unwrap().to_bytes();
            (ct, body)
        }
    };
    // kube-rs's own Api (JSON), its Protobuf Accept, and a compact-first one.
    let (ct, body) = watch(None).await;
    assert_eq!(ct, "application/json");
    assert!(body.starts_with(b"{\"type\":\"ADDED\""), "{body:?}");
    let (ct, body) = watch(Some("application/vnd.kubernetes.protobuf;stream=watch")).await;
    assert_eq!(ct, "application/vnd.kubernetes.protobuf;stream=watch");
    assert_eq!(&body[6..11], b"ADDED", "a Kubernetes Protobuf frame");
    let (ct, _) = watch(Some(
        "application/vnd.podns.compact.v1, application/vnd.kubernetes.protobuf",
    ))
    .await;
    assert_eq!(ct, "application/vnd.podns.compact.v1");
    assert_eq!(started(&relay_metrics, "json"), 1);
    assert_eq!(started(&relay_metrics, "protobuf"), 1);
    assert_eq!(started(&relay_metrics, "compact"), 1);
    // A list stays Protobuf even for a client that asks for compact first.
    let req = http::Request::builder()
        .uri("/api/v1/namespaces/ml/pods")
        .header(
            "accept",
            "application/vnd.podns.compact.v1, application/vnd.kubernetes.protobuf",
        )
        .body(Vec::new())
        .unwrap();
    let res = relay.send(req.map(kube::client::Body::from)).await.unwrap();
    assert_eq!(
        res.headers()["content-type"],
        "application/vnd.kubernetes.protobuf"
    );
    // And kube-rs's typed API reads the relay as before.
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(relay, "ml");
    assert_eq!(api.list(&Default::default()).await.unwrap().items.len(), 4);
}

/// A server that lists one pod in JSON and answers every watch with a
/// compact stream whose event names a dictionary it never sent.
async fn bad_compact_server(lists: std::sync::Arc<std::sync::atomic::AtomicUsize>) -> String {
    canned_server(move |head| {
        if head.contains("watch=true") {
            // An event: ADDED, dictionary 9 (never sent), 4 bytes.
            (
                podns_server::k8s::compact::COMPACT,
                vec![5, 2, 0, 9, 4, 0xee],
            )
        } else {
            lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            ("application/json", ONE_POD_LIST.as_bytes().to_vec())
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compact_stream_it_cannot_decode_ends_the_watch_with_a_relist() {
    use futures::StreamExt;
    use kube::runtime::watcher::{Error, Event};
    use podns_server::k8s::objects::SlimPod;
    use podns_server::k8s::wire::raw_watcher;
    let lists = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let url = bad_compact_server(lists.clone()).await;
    let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
    let cfg = ml_pods_watch(None, None);
    let mut w = std::pin::pin!(raw_watcher::<SlimPod>(client, cfg));
    let mut next = async || tokio::time::timeout(T, w.next()).await.unwrap().unwrap();
    assert!(matches!(next().await, Ok(Event::Init)));
    assert!(matches!(next().await, Ok(Event::InitApply(_))));
    assert!(matches!(next().await, Ok(Event::InitDone)));
    match next().await {
        Err(Error::WatchFailed(e)) => assert_eq!(
            podns_server::k8s::compact::DecodeError::of(&e),
            Some(&podns_server::k8s::compact::DecodeError::UnknownDict(9)),
            "{e}"
        ),
        other => panic!("not a decode error: {other:?}"),
    }
    // Not a resume from the version it held: a relist, once.
    assert!(matches!(next().await, Ok(Event::Init)));
    assert_eq!(lists.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// A pod of `ns` on `node`, by name.
async fn pod_on(client: &kube::Client, ns: &str, name: &str, node: &str) {
    create_pod(
        client,
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}
        }),
    )
    .await;
}

/// A change to pod `ns/name` a watch of it sees: a label.
async fn touch(client: &kube::Client, ns: &str, name: &str, n: usize) {
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client.clone(), ns);
    let patch = serde_json::json!({"metadata": {"labels": {"touched": n.to_string()}}});
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap();
}

fn applied(m: &Metrics) -> u64 {
    m.watch_events
        .get_or_create(&podns_server::metrics::EventLabels {
            resource: "pods",
            event: "apply",
        })
        .get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_instance_is_sent_a_dictionary_once_across_its_watches() {
    let (env, _dir, kubeconfig) = env_with_relay(&[]).await;
    let relay_metrics = env.server.as_ref().unwrap().metrics.clone();
    let dict_bytes = || relay_metrics.relay_dict_bytes_sent.get();
    let named = || relay_metrics.relay_dicts_held.get();
    // Enough pods for the relay to train its pods' dictionary (on a
    // thread of its own when a watch first packs them), trained before
    // the node instance starts: a compact watch of them, and of a new pod
    // each time (an object is packed once), until one is sent it.
    create_job(&env.client, "bulk", "big", 72, "indexed-job").await;
    create_job(&env.client, "ml", "train", 4, "indexed-job").await;
    let relay = relay_client(&kubeconfig).await;
    let node = node_of_pods(&relay, "ml", 4).await;
    let probes = std::sync::atomic::AtomicUsize::new(0);
    wait_for("the relay's pods dictionary", T, || async {
        let i = probes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        pod_on(&env.client, "bulk", &format!("probe-{i}"), "probe-node").await;
        let req = http::Request::builder()
            .uri("/api/v1/namespaces/bulk/pods?watch=true&resourceVersion=0&timeoutSeconds=1")
            .header("accept", podns_server::k8s::compact::COMPACT)
            .body(Vec::new())
            .unwrap();
        if let Ok(res) = relay.send(req.map(kube::client::Body::from)).await {
            let _ = res.into_body().collect().await;
        }
        dict_bytes() > 0
    })
    .await;
    // One watch was sent it: the probe that found it trained.
    let before = dict_bytes();
    let dict = before;

    let n = node_instance(&env, &kubeconfig, &node, &[]).await;
    wait_held(&n.table, &["ml"]).await;
    // Its node's own-pods watch (a streaming list, its first watch) is
    // sent the dictionary with its node's pods; its namespace's pods
    // watch, opened once it knows its scope, names the dictionary it now
    // holds and is sent its number and content id, not its bytes.
    wait_for("the dictionary sent to the first watch", T, || async {
        dict_bytes() >= before + dict
    })
    .await;
    assert_eq!(dict_bytes(), before + dict, "sent once");
    wait_for("the dictionary named on the second watch", T, || async {
        named() >= 1
    })
    .await;
    // A change in its gang, in the dictionary: nothing more is sent.
    let seen = applied(&n.metrics);
    let gang = pods_with_ip(&relay, "ml").await;
    let rank = gang
        .iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node))
        .and_then(|p| p.metadata.name.clone())
        .unwrap();
    touch(&env.client, "ml", &rank, 1).await;
    wait_for("the change applied", T, || async {
        applied(&n.metrics) > seen
    })
    .await;
    let once = dict_bytes();
    assert_eq!(once, before + dict, "the dictionary went once");
    let named_before = named();

    // A second namespace on its node: a second pods watch of the same
    // node instance. It names the dictionary it holds, and the relay
    // sends its number and content id, not its bytes.
    pod_on(&env.client, "other", "here", &node).await;
    wait_held(&n.table, &["ml", "other"]).await;
    let seen = applied(&n.metrics);
    touch(&env.client, "other", "here", 1).await;
    wait_for(
        "the dictionary named, not sent, on the second watch",
        T,
        || async { named() > named_before && applied(&n.metrics) > seen },
    )
    .await;
    assert_eq!(dict_bytes(), once, "the dictionary went once");
    // And the events that use it decode.
    touch(&env.client, "other", "here", 2).await;
    wait_for("one more event on the second watch", T, || async {
        applied(&n.metrics) > seen + 1
    })
    .await;
    assert_eq!(decode_errors(&n.metrics), 0);
    assert_eq!(dict_bytes(), once);
}
