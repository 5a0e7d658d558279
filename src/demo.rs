//! `podns demo`: the simulator (with kubelet simulation and a sample
//! training workload) and `serve` in one process on loopback, then dig
//! command lines that work as printed.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context;
use podns_server::index::Lookup;
use podns_server::serve::{self, Listeners, ServeConfig};
use podns_sim::{self as sim, SimArgs};
use tokio_util::sync::CancellationToken;

use crate::cli::DemoArgs;

/// The sample workload: two training jobs in `ml` and services in `web`.
/// The last field is the Job that owns the pods, whose name the Job
/// controller puts in each pod's hostname (`<job>-<index>`): a JobSet's
/// child Job is `<jobset>-<replicated job>-<job index>`.
const JOBS: [(&str, &str, usize, &str, &str); 2] = [
    (
        "ml",
        "llama-pretrain",
        512,
        "jobset",
        "llama-pretrain-workers-0",
    ),
    ("ml", "bert-finetune", 64, "indexed-job", "bert-finetune"),
];

/// A loopback server (the serve defaults otherwise), with `/debug/explain`
/// on: the demo's admin port is on loopback and its pods are made up.
pub fn loopback_serve_config(dns: SocketAddr, admin: SocketAddr) -> ServeConfig {
    ServeConfig {
        dns_listen: dns,
        admin_listen: admin,
        udp_sockets: 2,
        ns_addrs: vec![[127, 0, 0, 1].into()],
        admin_debug: true,
        ..ServeConfig::default()
    }
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    let sim_args = SimArgs {
        listen: args.api_listen,
        kubelet: true,
        kubelet_delay_ms: 20,
        ready_delay_ms: 200,
        ..SimArgs::default()
    };
    let api = tokio::net::TcpListener::bind(args.api_listen)
        .await
        .map_err(|e| {
            podns_server::config::ConfigError(format!(
                "failed to bind api {}: {e}",
                args.api_listen
            ))
        })?;
    let sim = sim::spawn(sim_args, api, shutdown.clone())
        .await
        .context("failed to start the simulator")?;
    tracing::info!("listening api http {}", sim.addr);
    if let Some(path) = &args.kubeconfig_out {
        std::fs::write(path, sim.kubeconfig_yaml())
            .with_context(|| format!("failed to write {}", path.display()))?;
    }
    let client = sim.client();
    create_workload(&client).await?;

    let serve_config = loopback_serve_config(args.dns_listen, args.admin_listen);
    let listeners = Listeners::bind(args.dns_listen, 2, args.admin_listen)
        .map_err(|e| podns_server::config::ConfigError(format!("{e:#}")))?;
    let running = serve::start(&serve_config, client, listeners, shutdown.clone());

    // Ready when the index is synced and the last rank of each job answers.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    loop {
        let all = JOBS.iter().all(|(ns, name, ranks, _, job)| {
            let key = format!("{job}-{}.{name}.{ns}.svc", ranks - 1);
            matches!(running.table.lookup(&key), Lookup::Found(_) | Lookup::Ip(_))
        });
        if running.table.is_synced() && all {
            break;
        }
        if Instant::now() > deadline {
            anyhow::bail!("the demo workload did not become resolvable within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    print_walkthrough(
        running.dns_addr,
        running.admin_addr,
        sim.addr,
        started.elapsed(),
    );
    // Said only when the demo stays up: with --exit-when-ready it ends here.
    if !args.exit_when_ready {
        println!("(Ctrl-C to stop)");
    }

    if !args.exit_when_ready {
        serve::wait_for_signal().await;
    }
    running
        .drain(Duration::ZERO, shutdown.clone(), std::future::pending())
        .await;
    shutdown.cancel();
    Ok(())
}

async fn create_workload(client: &kube::Client) -> anyhow::Result<()> {
    for (ns, name, ranks, kind, _) in JOBS {
        sim_post(
            client,
            "/sim/jobs",
            serde_json::json!({"namespace": ns, "name": name, "ranks": ranks, "kind": kind}),
        )
        .await?;
    }
    let services = [
        serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "inference", "namespace": "web"},
            "spec": {"selector": {"app": "inference"}, "ports": [
                {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                {"name": "grpc", "port": 9000, "protocol": "TCP"}]}
        }),
        serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "datasets", "namespace": "web"},
            "spec": {"type": "ExternalName", "externalName": "datasets.storage.example.com"}
        }),
    ];
    let ns =
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "web"}});
    sim_post(client, "/api/v1/namespaces", ns).await?;
    for svc in services {
        sim_post(client, "/api/v1/namespaces/web/services", svc).await?;
    }
    Ok(())
}

async fn sim_post(
    client: &kube::Client,
    path: &str,
    body: serde_json::Value,
) -> anyhow::Result<()> {
    let req = http::Request::post(path)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body)?)?;
    client
        .request_text(req)
        .await
        .with_context(|| format!("POST {path} failed"))?;
    Ok(())
}

fn print_walkthrough(dns: SocketAddr, admin: SocketAddr, api: SocketAddr, took: Duration) {
    let at = format!("@{} -p {}", dns.ip(), dns.port());
    println!(
        "podns demo is ready ({} ms): 576 training ranks in namespace ml, services in web.",
        took.as_millis()
    );
    println!();
    println!("# one rank of a JobSet (hostname + subdomain):");
    println!("dig {at} llama-pretrain-workers-0-0.llama-pretrain.ml.svc.cluster.local A +norec");
    println!("# the whole gang as a headless set (512 ranks: too many for UDP, so over TCP):");
    println!("dig {at} llama-pretrain.ml.svc.cluster.local A +tcp +norec");
    println!("# a rank that does not exist: NXDOMAIN with a 1 s negative TTL:");
    println!("dig {at} bert-finetune-64.bert-finetune.ml.svc.cluster.local A +norec");
    println!("# a ClusterIP service's named port:");
    println!("dig {at} _http._tcp.inference.web.svc.cluster.local SRV +norec");
    println!("# an ExternalName service:");
    println!("dig {at} datasets.web.svc.cluster.local CNAME +norec");
    println!("# reverse lookup of a rank's IP (torchrun does this):");
    println!(
        "dig {at} -x $(dig {at} +short llama-pretrain-workers-0-1.llama-pretrain.ml.svc.cluster.local) +norec"
    );
    println!("# rank view: rank 7 of the JobSet, its leader, and the gang's readiness in one TXT:");
    println!("dig {at} 7.llama-pretrain.ml.rank.cluster.local A +norec");
    println!("dig {at} leader.bert-finetune.ml.rank.cluster.local A +norec");
    println!("dig {at} llama-pretrain.ml.rank.cluster.local TXT +norec");
    println!();
    println!();
    println!("# why a name answers what it does (the demo serves /debug/explain):");
    println!(
        "{} explain bert-finetune-64.bert-finetune.ml.svc.cluster.local --admin http://{admin}",
        this_program()
    );
    println!("metrics: curl -s http://{admin}/metrics | grep podns_");
    println!("kubectl: kubectl --server http://{api} get pods -n ml | head");
}

/// This program as a shell runs it again: its name when PATH finds this
/// very file by it (`cargo install`ed), else its path (`cargo run` runs
/// target/…/podns, which PATH does not know), quoted where a POSIX shell
/// needs it.
fn this_program() -> String {
    let Ok(exe) = std::env::current_exe() else {
        return "podns".into();
    };
    let same = |p: &std::path::Path| p.canonicalize().ok() == exe.canonicalize().ok();
    if let Some(name) = exe.file_name().and_then(|n| n.to_str())
        && let Some(path) = std::env::var_os("PATH")
        && std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
            .is_some_and(|p| same(&p))
    {
        return name.to_string();
    }
    shell_word(&exe.to_string_lossy())
}

/// `s` as one POSIX shell word.
fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words() {
        assert_eq!(
            shell_word("/home/a/podns/target/release/podns"),
            "/home/a/podns/target/release/podns"
        );
        assert_eq!(shell_word("/My Projects/podns"), "'/My Projects/podns'");
        assert_eq!(shell_word("/it's/podns"), "'/it'\\''s/podns'");
    }
}
