//! The Corefiles of deploy/coredns in a real CoreDNS. (a)
//! Corefile.namespaces: the training namespace's names and the rank view
//! come from podns, every other namespace's names from the `kubernetes`
//! plugin's block. (b) Corefile.all: every name under cluster.local comes
//! from podns, Services without a selector too. Through both, the PTR of a
//! pod or Service IP is podns's.
//!
//! CoreDNS is not packaged here; tests/cluster/build.sh builds it to
//! ~/.cache/podns-cluster/bin/coredns, or `PODNS_COREDNS` names a binary.
//! Without one the test is skipped with a line on stderr; under `CI=true`
//! a `PODNS_COREDNS` that names no binary fails it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;

use hickory_proto::rr::{Name, RData, RecordType};

use crate::daemons::{Daemon, find_tool, free_port};
use crate::support::*;

/// The CoreDNS binary, or why there is none.
pub fn coredns() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("PODNS_COREDNS").map(PathBuf::from) {
        if path.is_file() {
            return Ok(path);
        }
        let why = format!("PODNS_COREDNS={} is not a file", path.display());
        if podns_testkit::in_ci() {
            panic!("{why}");
        }
        return Err(why);
    }
    let built = std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".cache/podns-cluster/bin/coredns"))
        .filter(|p| p.is_file());
    built.or_else(|| find_tool("coredns")).ok_or_else(|| {
        "no coredns (tests/cluster/build.sh builds one; or set PODNS_COREDNS)".to_string()
    })
}

/// The shipped Corefile made fit for a test on loopback: podns's address
/// for PODNS_SERVICE_IP, a free port for 53, every listener (DNS, health,
/// ready, metrics) on 127.0.0.1, the upstream resolver a dead loopback
/// port. The `kubernetes` plugin needs an API server with EndpointSlices,
/// which the simulator does not serve: a `template` stands in for it and
/// answers 192.0.2.53 (a documentation address) for any A in its zones, so
/// the test sees which block answered.
fn loopback_corefile(text: &str, podns: SocketAddr, port: u16) -> String {
    let mut out = String::new();
    let mut in_kubernetes = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if in_kubernetes {
            in_kubernetes = line != "    }";
            continue;
        }
        if trimmed.starts_with("kubernetes ") {
            in_kubernetes = true;
            out.push_str(
                "    template IN A cluster.local {\n        answer \"{{ .Name }} 30 IN A 192.0.2.53\"\n    }\n",
            );
            continue;
        }
        let line = line
            .replace("PODNS_SERVICE_IP:53", &podns.to_string())
            .replace(":53 ", &format!(":{port} "))
            .replace(
                "forward . /etc/resolv.conf",
                &format!("forward . 127.0.0.1:{}", free_port()),
            )
            .replace("prometheus :9153", "prometheus 127.0.0.1:0")
            .replace("health {", &format!("health 127.0.0.1:{} {{", free_port()));
        let line = if trimmed == "ready" {
            format!("    ready 127.0.0.1:{}", free_port())
        } else {
            line
        };
        out.push_str(&line);
        out.push('\n');
        // Each server block listens on loopback only.
        if !line.starts_with(' ') && line.ends_with('{') {
            out.push_str("    bind 127.0.0.1\n");
        }
    }
    out
}

/// A Corefile of deploy/coredns, as shipped.
fn shipped(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/coredns")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

/// CoreDNS on a free loopback port with `corefile` made fit for the test
/// ([`loopback_corefile`]), once it answers `probe`; its address, and the
/// directory its files live in (removed when dropped).
async fn run_coredns(
    bin: &std::path::Path,
    corefile: &str,
    podns: SocketAddr,
    probe: &str,
) -> (Daemon, SocketAddr, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let conf = dir.path().join("Corefile");
    std::fs::write(&conf, loopback_corefile(corefile, podns, port)).unwrap();
    let mut daemon = Daemon::spawn(
        "coredns",
        Command::new(bin).arg("-conf").arg(&conf),
        &dir.path().join("coredns.out"),
    );
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    daemon
        .wait_answering(addr, &fqdn(probe), RecordType::A)
        .await;
    (daemon, addr, dir)
}

/// `dig +short NAME` against `server`, as an operator checks it; `None`
/// (said on stderr) when dig is not installed.
fn dig_short(server: SocketAddr, name: &str) -> Option<String> {
    if !has("dig") {
        eprintln!("dig not installed: checked with the test's own client only");
        return None;
    }
    let out = Command::new("dig")
        .arg(format!("@{}", server.ip()))
        .args([
            "-p",
            &server.port().to_string(),
            "+short",
            "+time=2",
            "+tries=2",
        ])
        .arg(fqdn(name))
        .output()
        .unwrap();
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The PTR targets of `ip` asked at `server`.
async fn ptr(server: SocketAddr, ip: &str) -> Vec<String> {
    let name = Name::from(ip.parse::<std::net::IpAddr>().unwrap()).to_ascii();
    ask(server, &name, RecordType::PTR)
        .await
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::PTR(p) => Some(p.0.to_ascii()),
            _ => None,
        })
        .collect()
}

/// A ClusterIP Service `name` in `ns`, once podns answers its address.
async fn cluster_ip(env: &Env, ns: &str, name: &str) -> String {
    create_service(
        &env.client,
        serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80}]}
        }),
    )
    .await;
    let svc = format!("{name}.{ns}.svc");
    wait_for("the ClusterIP in podns", T, || async {
        let a = addrs(&ask(env.dns, &svc, RecordType::A).await);
        a.first().cloned().ok_or_else(|| format!("{a:?}"))
    })
    .await
}

/// PTR through CoreDNS with the shipped Corefile is podns's answer: for a
/// pod IP and a ClusterIP, inside the ranges the Corefile forwards (the
/// simulator's are kubeadm's defaults, as the Corefiles' example ranges).
async fn ptr_is_podns(env: &Env, coredns: SocketAddr, ips: &[&str], log: &mut Daemon) {
    for ip in ips {
        let direct = ptr(env.dns, ip).await;
        assert_eq!(direct.len(), 1, "{ip} has a PTR in podns: {direct:?}");
        let via = ptr(coredns, ip).await;
        assert_eq!(
            via,
            direct,
            "PTR of {ip} through CoreDNS:\n{}",
            log.log_text()
        );
        // dig -x, as an operator checks it.
        if has("dig") {
            let out = Command::new("dig")
                .arg(format!("@{}", coredns.ip()))
                .args([
                    "-p",
                    &coredns.port().to_string(),
                    "+short",
                    "+time=2",
                    "+tries=2",
                    "-x",
                    ip,
                ])
                .output()
                .unwrap();
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                direct[0],
                "dig -x {ip}"
            );
        }
    }
}

/// The kubectl lines the Corefiles give for finding the ranges, run as
/// printed against the simulator: they name the ranges the shipped block
/// forwards. (The kubeadm ConfigMap and Calico lines need those installed.)
fn the_range_commands_work(env: &Env, corefile: &str) {
    let Some(kubectl) = find_tool("kubectl") else {
        eprintln!("no kubectl: the Corefile's kubectl lines were not run");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, env.sim.kubeconfig_yaml()).unwrap();
    let block = corefile
        .lines()
        .find(|l| l.ends_with(" {") && !l.starts_with(' ') && !l.starts_with('.'))
        .unwrap();
    for (what, range) in [
        ("get nodes", "10.244.0.0/16"),
        ("get servicecidrs", "10.96.0.0/12"),
    ] {
        let line = corefile
            .lines()
            .find_map(|l| {
                l.trim_start_matches('#')
                    .trim()
                    .strip_prefix("kubectl ")
                    .filter(|l| l.starts_with(what))
            })
            .unwrap_or_else(|| panic!("no `kubectl {what}` line"));
        let args = line.split('#').next().unwrap().trim();
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("{} {args}", kubectl.display()))
            .env("KUBECONFIG", &kc)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "kubectl {args}: {out:?}");
        assert!(text.contains(range), "kubectl {args}: {text}");
        assert!(
            block.contains(&format!("{range}:53")),
            "{block} forwards {range}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coredns_sends_the_training_namespace_to_podns_and_keeps_the_rest() {
    let bin = match coredns() {
        Ok(bin) => bin,
        Err(why) => {
            eprintln!("skipping: {why}");
            return;
        }
    };
    let env = env(&["--kubelet", "--kubelet-delay-ms=20"], &[]).await;
    create_job(&env.client, "train", "bert", 4, "indexed-job").await;
    let rank = "bert-3.bert.train.svc";
    wait_for("the job's ranks in podns", T, || async {
        addrs(&ask(env.dns, rank, RecordType::A).await).len() == 1
    })
    .await;

    let shipped = shipped("Corefile.namespaces");
    assert!(
        shipped.contains("    kubernetes cluster.local in-addr.arpa ip6.arpa {"),
        "(a) keeps the kubernetes plugin"
    );
    let (mut daemon, addr, _dir) = run_coredns(&bin, &shipped, env.dns, rank).await;

    // The training namespace's names and the rank view: podns's answers.
    for name in [rank, "bert.train.svc", "3.bert.train.rank"] {
        let direct = addrs(&ask(env.dns, name, RecordType::A).await);
        assert!(!direct.is_empty(), "{name} in podns");
        let via = addrs(&ask(addr, name, RecordType::A).await);
        assert_eq!(
            via,
            direct,
            "{name} through CoreDNS:\n{}",
            daemon.log_text()
        );
    }
    // Another namespace: the kubernetes plugin's block (its stand-in), not
    // podns, which has no such name.
    let other = "db.web.svc";
    assert_eq!(
        rcode(&ask(env.dns, other, RecordType::A).await),
        hickory_proto::op::ResponseCode::NXDomain
    );
    assert_eq!(
        addrs(&ask(addr, other, RecordType::A).await),
        ["192.0.2.53"],
        "{}",
        daemon.log_text()
    );

    // dig, as an operator checks it.
    if let Some(text) = dig_short(addr, rank) {
        let direct = addrs(&ask(env.dns, rank, RecordType::A).await);
        assert_eq!(text, direct[0], "dig through CoreDNS");
    }
    // The reverse zones of the pod and Service ranges: a rank's IP and a
    // ClusterIP answer podns's PTR (the kubernetes plugin's block kept
    // them before, and podns's PTR, which torchrun asks, was lost).
    let pod_ip = addrs(&ask(env.dns, rank, RecordType::A).await)[0].clone();
    let svc_ip = cluster_ip(&env, "web", "api").await;
    ptr_is_podns(&env, addr, &[&pod_ip, &svc_ip], &mut daemon).await;
    the_range_commands_work(&env, &shipped);
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "coredns still up"
    );
}

const T: std::time::Duration = std::time::Duration::from_secs(30);

/// deploy/coredns/Corefile.all, (b), in a real CoreDNS: every name under
/// cluster.local comes from podns, a Service without a selector too
/// (answered from its hand-written EndpointSlice), and no name reaches the
/// `kubernetes` plugin's block (its stand-in would answer 192.0.2.53).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coredns_forwarding_all_of_cluster_local_answers_services_without_selector() {
    let bin = match coredns() {
        Ok(bin) => bin,
        Err(why) => {
            eprintln!("skipping: {why}");
            return;
        }
    };
    let env = env(&[], &["--publish=ready"]).await;
    create_service(
        &env.client,
        serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "db", "namespace": "web"},
            "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}
        }),
    )
    .await;
    let slices: kube::Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        kube::Api::namespaced(env.client.clone(), "web");
    let slice = serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "db-1", "namespace": "web",
                     "labels": {"kubernetes.io/service-name": "db"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.9.0.1"], "hostname": "primary"},
                      {"addresses": ["10.9.0.2"], "conditions": {"ready": false}}],
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]
    });
    slices
        .create(&Default::default(), &serde_json::from_value(slice).unwrap())
        .await
        .unwrap();
    let set = "db.web.svc";
    wait_for("the slice in podns", T, || async {
        addrs(&ask(env.dns, set, RecordType::A).await) == ["10.9.0.1"]
    })
    .await;

    let shipped = shipped("Corefile.all");
    assert!(
        shipped.contains("\ncluster.local:53 "),
        "(b) forwards the zone"
    );
    let (mut daemon, addr, _dir) = run_coredns(&bin, &shipped, env.dns, set).await;

    for name in [set, "primary.db.web.svc", "10-9-0-1.db.web.svc"] {
        let via = addrs(&ask(addr, name, RecordType::A).await);
        assert_eq!(via, ["10.9.0.1"], "{name}:\n{}", daemon.log_text());
    }
    let srv = ask(addr, "_pg._tcp.db.web.svc", RecordType::SRV).await;
    assert!(
        srv.answers.iter().any(|r| matches!(&r.data,
            hickory_proto::rr::RData::SRV(s)
                if s.port == 5432 && s.target.to_ascii() == "primary.db.web.svc.cluster.local.")),
        "{srv:?}"
    );
    // Names podns does not have: its NXDOMAIN, not the plugin's stand-in.
    for name in ["10-9-0-2.db.web.svc", "nothing.web.svc"] {
        let m = ask(addr, name, RecordType::A).await;
        assert_eq!(
            rcode(&m),
            hickory_proto::op::ResponseCode::NXDomain,
            "{name}: {m:?}"
        );
    }
    if let Some(text) = dig_short(addr, "primary.db.web.svc") {
        assert_eq!(text, "10.9.0.1", "dig through CoreDNS");
    }
    let svc_ip = cluster_ip(&env, "web", "api").await;
    ptr_is_podns(&env, addr, &[&svc_ip], &mut daemon).await;
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "coredns still up"
    );
}
