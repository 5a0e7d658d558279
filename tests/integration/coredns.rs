//! deploy/coredns/Corefile.namespaces in a real CoreDNS: the training
//! namespace's names and the rank view come from podns, every other
//! namespace's names from the `kubernetes` plugin's block.
//!
//! CoreDNS is not packaged here; tests/cluster/build.sh builds it to
//! ~/.cache/podns-cluster/bin/coredns, or `PODNS_COREDNS` names a binary.
//! Without one the test is skipped with a line on stderr; under `CI=true`
//! a `PODNS_COREDNS` that names no binary fails it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;

use hickory_proto::rr::RecordType;

use crate::daemons::{Daemon, find_tool, free_port};
use crate::support::*;

/// The CoreDNS binary, or why there is none.
fn coredns() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("PODNS_COREDNS").map(PathBuf::from) {
        if path.is_file() {
            return Ok(path);
        }
        let why = format!("PODNS_COREDNS={} is not a file", path.display());
        if std::env::var("CI").as_deref() == Ok("true") {
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

    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/coredns/Corefile.namespaces"
    ))
    .unwrap();
    assert!(
        shipped.contains("    kubernetes cluster.local in-addr.arpa ip6.arpa {"),
        "(a) keeps the kubernetes plugin"
    );
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let conf = dir.path().join("Corefile");
    std::fs::write(&conf, loopback_corefile(&shipped, env.dns, port)).unwrap();
    let mut daemon = Daemon::spawn(
        "coredns",
        Command::new(&bin).arg("-conf").arg(&conf),
        &dir.path().join("coredns.out"),
    );
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    daemon
        .wait_answering(addr, &fqdn(rank), RecordType::A)
        .await;

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
    if has("dig") {
        let out = Command::new("dig")
            .args([
                "@127.0.0.1",
                "-p",
                &port.to_string(),
                "+short",
                "+time=2",
                "+tries=2",
            ])
            .arg(fqdn(rank))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let direct = addrs(&ask(env.dns, rank, RecordType::A).await);
        assert_eq!(text.trim(), direct[0], "dig through CoreDNS");
    } else {
        eprintln!("dig not installed: checked with the test's own client only");
    }
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "coredns still up"
    );
}

const T: std::time::Duration = std::time::Duration::from_secs(30);
