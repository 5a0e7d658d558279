//! A node instance's watches multiplexed on one connection to its relay
//! (`k8s::mux`): one connection for all of them, a namespace entering the
//! scope without a relist of the others, and a relay without it read one
//! request per watch, as before.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::relay::{T, env_with_relay, node_of_pods, relay_client, start_podns};
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

/// Watches the node instance started by listing (`init`), every kind.
fn inits(m: &podns_server::metrics::Metrics) -> u64 {
    ["pods", "services", "jobs", "endpointslices"]
        .into_iter()
        .map(|resource| {
            m.watch_events
                .get_or_create(&podns_server::metrics::EventLabels {
                    resource,
                    event: "init",
                })
                .get()
        })
        .sum()
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
    let (env, _dir, kubeconfig) = env_with_relay(&[]).await;
    let relay_metrics = env.server.as_ref().unwrap().metrics.clone();
    // The simulator fills a node with 8 pods: these three jobs share one.
    create_job(&env.client, "ml", "train", 3, "indexed-job").await;
    create_job(&env.client, "eval", "score", 3, "indexed-job").await;
    let admin = relay_client(&kubeconfig).await;
    let node = node_of_pods(&admin, "ml", 3).await;
    assert_eq!(node_of_pods(&admin, "eval", 3).await, node, "one node");
    let (front, conns) = counting_proxy(env.relay.unwrap()).await;
    let kc = through(&kubeconfig, env.relay.unwrap(), front);
    let flags = [
        format!("--relay-kubeconfig={}", kc.display()),
        format!("--node={node}"),
        format!("--relay-dns={}", env.dns),
    ];
    let n = start_podns(&flags, relay_client(&kc).await, env.shutdown.clone());
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
    let (lists, started) = (relay_metrics.relay_lists.get(), inits(&n.metrics));
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
        inits(&n.metrics) - started,
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
    let (front, conns) = counting_proxy(env.relay.unwrap()).await;
    let kc = through(&kubeconfig, env.relay.unwrap(), front);
    let flags = [
        format!("--relay-kubeconfig={}", kc.display()),
        format!("--node={node}"),
        format!("--relay-dns={}", env.dns),
    ];
    let n = start_podns(&flags, relay_client(&kc).await, env.shutdown.clone());
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
