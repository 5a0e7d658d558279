//! A node instance's watches multiplexed on one connection to its relay
//! (`k8s::mux`): one connection for all of them, a namespace entering the
//! scope without a relist of the others, and a relay without it read one
//! request per watch, as before.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::relay::{
    T, env_with_relay, inits, node_of_pods, relay_client, relay_with_jobs, start_podns,
};
use crate::support::*;

/// Connections through a proxy: accepted in all, and open now.
#[derive(Default)]
struct Conns {
    accepted: AtomicU64,
    open: AtomicI64,
}

/// A TCP proxy on loopback to `to` that counts its connections.
async fn counting_proxy(to: SocketAddr) -> (SocketAddr, Arc<Conns>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let conns = Arc::new(Conns::default());
    let c = conns.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = l.accept().await {
            c.accepted.fetch_add(1, Ordering::SeqCst);
            c.open.fetch_add(1, Ordering::SeqCst);
            let c = c.clone();
            tokio::spawn(async move {
                if let Ok(mut out) = tokio::net::TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                }
                c.open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (addr, conns)
}

/// The relay's kubeconfig, naming the proxy in front of it.
fn through(kubeconfig: &Path, relay: SocketAddr, front: SocketAddr) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let path = kubeconfig.with_file_name("through-proxy.yaml");
    std::fs::write(&path, text.replace(&relay.to_string(), &front.to_string())).unwrap();
    path
}

/// A node instance of `node` reading the relay through a proxy that
/// counts its connections.
async fn node_through_proxy(
    env: &Env,
    kubeconfig: &Path,
    node: &str,
) -> (podns_server::serve::Running, Arc<Conns>) {
    let (front, conns) = counting_proxy(env.relay.unwrap()).await;
    let kc = through(kubeconfig, env.relay.unwrap(), front);
    let flags = [
        format!("--relay-kubeconfig={}", kc.display()),
        format!("--node={node}"),
        format!("--relay-dns={}", env.dns),
    ];
    let n = start_podns(&flags, relay_client(&kc).await, env.shutdown.clone());
    (n, conns)
}

/// Wait until `table` holds every one of `namespaces`.
async fn wait_holds(table: &Arc<podns_server::index::Table>, namespaces: &[&str]) {
    wait_for(&format!("{namespaces:?} held"), T, || async {
        let held = table.scope().namespaces();
        namespaces.iter().all(|n| held.iter().any(|h| h == n))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_instance_holds_one_connection_to_the_relay_for_all_its_watches() {
    // The simulator fills a node with 8 pods: these two jobs share one.
    let (env, _dir, kubeconfig, _relay, nodes) =
        relay_with_jobs(&[("ml", "train", 3), ("eval", "score", 3)]).await;
    let relay_metrics = env.server.as_ref().unwrap().metrics.clone();
    let node = nodes[0].clone();
    assert_eq!(nodes[1], node, "one node");
    let (n, conns) = node_through_proxy(&env, &kubeconfig, &node).await;
    wait_holds(&n.table, &["eval", "ml"]).await;
    // Its own pods' watch and each namespace's (pods, Services, Jobs,
    // EndpointSlices): all on one connection.
    let watches = wait_for("every watch on one connection", T, || async {
        let (open, watches) = (
            conns.open.load(Ordering::SeqCst),
            relay_metrics.relay_watches.get(),
        );
        if open == 1 && watches >= 7 {
            Ok(watches)
        } else {
            Err(format!("{open} connections, {watches} watches"))
        }
    })
    .await;
    let per_namespace = (watches - 1) / 2;
    wait_resolves(n.dns_addr, "train-0.train.ml.svc", T).await;

    // A namespace enters the scope: its watches join, the others resume
    // on the new connection from where they were (no list, no relist).
    let (lists, started) = (
        relay_metrics.relay_lists.get(),
        inits(&n.metrics, &["pods", "services", "jobs", "endpointslices"]),
    );
    create_job(&env.client, "third", "more", 2, "indexed-job").await;
    // (Asked of the simulator: the relay counts this test's lists too.)
    assert_eq!(
        node_of_pods(&env.client, "third", 2).await,
        node,
        "one node"
    );
    wait_holds(&n.table, &["eval", "ml", "third"]).await;
    wait_for(
        "the new namespace's watches on the one connection",
        T,
        || async {
            let (open, now) = (
                conns.open.load(Ordering::SeqCst),
                relay_metrics.relay_watches.get(),
            );
            if open == 1 && now == watches + per_namespace {
                Ok(())
            } else {
                Err(format!("{open} connections, {now} watches"))
            }
        },
    )
    .await;
    // Answered by the node instance itself, not forwarded.
    let forwarded = || {
        n.metrics
            .forwarded
            .get_or_create(&podns_server::metrics::ResultLabels { result: "answered" })
            .get()
    };
    let before = forwarded();
    wait_resolves(n.dns_addr, "more-1.more.third.svc", T).await;
    wait_resolves(n.dns_addr, "score-2.score.eval.svc", T).await;
    assert_eq!(forwarded(), before, "answered on the node");
    assert_eq!(
        inits(&n.metrics, &["pods", "services", "jobs", "endpointslices"]) - started,
        per_namespace as u64,
        "only the new namespace's watches started anew"
    );
    assert_eq!(
        relay_metrics.relay_lists.get(),
        lists,
        "no list: the new watches' initial events came in the stream"
    );
    assert_eq!(conns.open.load(Ordering::SeqCst), 1);
    assert_eq!(
        n.metrics
            .watch_decode_errors
            .get_or_create(&podns_server::metrics::DecodeErrorLabels {
                resource: "mux",
                error: "truncated",
            })
            .get(),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_a_relay_without_it_each_watch_is_its_own_request() {
    // A relay from before the multiplexed watch answers it 404.
    let (env, _dir, kubeconfig) = env_with_relay(&["--no-watch-mux"]).await;
    let relay_metrics = env.server.as_ref().unwrap().metrics.clone();
    create_job(&env.client, "ml", "train", 3, "indexed-job").await;
    let admin = relay_client(&kubeconfig).await;
    let node = node_of_pods(&admin, "ml", 3).await;
    let (n, conns) = node_through_proxy(&env, &kubeconfig, &node).await;
    wait_holds(&n.table, &["ml"]).await;
    wait_resolves(n.dns_addr, "train-2.train.ml.svc", T).await;
    // A connection per watch, as before.
    wait_for("a connection per watch", T, || async {
        let (open, watches) = (
            conns.open.load(Ordering::SeqCst),
            relay_metrics.relay_watches.get(),
        );
        if watches >= 4 && open >= watches {
            Ok(())
        } else {
            Err(format!("{open} connections, {watches} watches"))
        }
    })
    .await;
    create_job(&env.client, "ml", "late", 1, "indexed-job").await;
    wait_resolves(n.dns_addr, "late-0.late.ml.svc", T).await;
}

/// A relay that lists one pod in JSON and answers the multiplexed watch
/// with `outer` (then closes).
async fn bad_mux_server(outer: Vec<u8>) -> String {
    canned_server(move |head| {
        if head.contains(mux::MUX_PATH) {
            (mux::MUX, outer.clone())
        } else {
            ("application/json", ONE_POD_LIST.as_bytes().to_vec())
        }
    })
    .await
}

use podns_server::k8s::mux;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multiplexed_stream_it_cannot_read_is_counted_and_the_watch_resumes() {
    use futures::StreamExt;
    use kube::runtime::watcher::{Error, Event};
    use podns_server::k8s::objects::SlimPod;
    use podns_server::k8s::wire::raw_watcher;
    let mut cut = mux::data_head(0, 10).to_vec();
    cut.extend_from_slice(b"abc");
    let mut huge = Vec::new();
    for b in [0xff, 0xff, 0xff, 0x7f] {
        huge.push(b);
    }
    let mut stranger = mux::data_head(7, 1).to_vec();
    stranger.push(0);
    for (outer, label) in [
        (cut, "truncated"),
        (huge, "too_large"),
        (stranger, "unknown_index"),
        (vec![2, 9, 0], "unknown_frame"),
    ] {
        let url = bad_mux_server(outer).await;
        let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        let metrics = podns_server::metrics::Metrics::new();
        let held = std::sync::Arc::new(podns_server::k8s::compact::Held::default());
        let cfg = ml_pods_watch(
            Some(held.clone()),
            Some(mux::Mux::new(client.clone(), held, metrics.clone())),
        );
        let mut w = std::pin::pin!(raw_watcher::<SlimPod>(client, cfg));
        let mut next = async || tokio::time::timeout(T, w.next()).await.unwrap().unwrap();
        assert!(matches!(next().await, Ok(Event::Init)));
        assert!(matches!(next().await, Ok(Event::InitApply(_))));
        assert!(matches!(next().await, Ok(Event::InitDone)));
        match next().await {
            Err(Error::WatchFailed(e)) => {
                let kube::Error::ReadEvents(io) = &e else {
                    panic!("{label}: {e}")
                };
                let m = io.get_ref().and_then(|i| i.downcast_ref::<mux::MuxError>());
                assert_eq!(m.map(mux::MuxError::label), Some(label), "{e}");
            }
            other => panic!("{label}: not the multiplexed stream's error: {other:?}"),
        }
        let counted = metrics
            .watch_decode_errors
            .get_or_create(&podns_server::metrics::DecodeErrorLabels {
                resource: "mux",
                error: label,
            })
            .get();
        assert_eq!(counted, 1, "{label}");
        // It resumes from the version it held (no list): the next
        // attempt fails the same way.
        assert!(
            matches!(next().await, Err(Error::WatchFailed(_))),
            "{label}"
        );
    }
}
