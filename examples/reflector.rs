//! Baseline for the cold-start and memory benchmark: a kube-rs reflector of
//! full `k8s_openapi` `Pod` objects, written the way most controllers do it
//! (default `watcher::Config`, i.e. list + watch, whole objects cached).
//!
//! Usage: `target/release/examples/reflector KUBECONFIG`
//! Prints `synced pods=N elapsed_ms=T rss_kib=R` once the store is ready,
//! where T counts from process start, then keeps the watch running until
//! killed (so RSS can also be read from outside). Built by
//! `cargo build --release --example reflector` (see `benches/harness/run-all.sh`).

use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let start = Instant::now();
    let path = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: reflector KUBECONFIG"))?;
    let kc = Kubeconfig::read_from(&path)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    let client = Client::try_from(config)?;
    let pods: Api<Pod> = Api::all(client);
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(pods, watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    let run = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            if let Err(e) = ev {
                eprintln!("watch error: {e}");
            }
        }
    });
    reader.wait_until_ready().await?;
    println!(
        "synced pods={} elapsed_ms={} rss_kib={}",
        reader.state().len(),
        start.elapsed().as_millis(),
        rss_kib()
    );
    run.await?;
    Ok(())
}
