//! `podns wait` as a training pod runs it: the built binary against an
//! in-process simulator and server, asking DNS only.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_proto::rr::{RData, RecordType};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::support::*;

const T: Duration = Duration::from_secs(60);

/// A running `podns wait` with its stderr lines collected as they come.
struct Waiter {
    child: Child,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Waiter {
    /// `podns wait ARGS --server=<the env's server>`.
    fn start(env: &Env, args: &[&str]) -> Waiter {
        let server = format!("--server={}", env.dns);
        let mut argv = args.to_vec();
        argv.push(&server);
        Waiter::spawn(&argv)
    }

    /// `podns wait ARGS`, as given.
    fn spawn(args: &[&str]) -> Waiter {
        let mut child = Command::new(PODNS_BIN)
            .arg("wait")
            .args(args)
            .env("RUST_LOG", "podns=debug")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn podns wait");
        let err = child.stderr.take().unwrap();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let keep = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                keep.lock().unwrap().push(line);
            }
        });
        Waiter { child, stderr }
    }

    fn lines(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// The lines a user sees (the debug log left out).
    fn said(&self) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.starts_with("podns wait:"))
            .collect()
    }

    /// What was said besides the progress lines (every few seconds, so
    /// their number depends on how fast the machine is).
    fn notices(&self) -> Vec<String> {
        self.said()
            .into_iter()
            .filter(|l| !is_progress(l))
            .collect()
    }

    fn exited(&mut self) -> Option<i32> {
        self.child
            .try_wait()
            .unwrap()
            .map(|s| s.code().unwrap_or(-1))
    }

    /// Poll until the process exits; panic after `limit`.
    async fn exit_code(&mut self, limit: Duration) -> i32 {
        let code = wait_for("podns wait to exit", limit, || {
            let code = self.exited();
            let lines = self.lines();
            async move { code.ok_or_else(|| format!("{lines:?}")) }
        })
        .await;
        // Let the reader thread drain the pipe (at most 5 s: a child of
        // the child may hold it open).
        let stop = Instant::now() + Duration::from_secs(5);
        while Arc::strong_count(&self.stderr) > 1 && Instant::now() < stop {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        code
    }
}

/// `podns wait: … ; 55s left`: the line said every few seconds.
fn is_progress(line: &str) -> bool {
    line.starts_with("podns wait: ") && line.ends_with(" left")
}

async fn summary(env: &Env, name: &str) -> Option<String> {
    let m = ask(env.dns, name, RecordType::TXT).await;
    m.answers.iter().find_map(|r| match &r.data {
        RData::TXT(t) => Some(t.to_string().trim_matches('"').to_string()),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_exits_0_once_published_and_once_ready() {
    let env = env(
        &[
            "--kubelet",
            "--kubelet-delay-ms=300",
            "--ready-delay-ms=1500",
        ],
        &[],
    )
    .await;
    // Started before the Job exists: NXDOMAIN means keep waiting.
    let mut published = Waiter::start(&env, &["bert", "--namespace=wt", "--timeout=60s"]);
    let mut ready = Waiter::start(
        &env,
        &["bert", "--namespace=wt", "--ready", "--timeout=60s"],
    );
    wait_for("podns wait to ask once", T, || async {
        published.lines().iter().any(|l| l.contains("NXDomain"))
    })
    .await;
    create_job(&env.client, "wt", "bert", 4, "indexed-job").await;

    assert_eq!(published.exit_code(T).await, 0, "{:?}", published.lines());
    let s = summary(&env, "bert.wt.rank").await.unwrap();
    assert!(s.starts_with("world=4 published=4 "), "{s}");
    // One line at the end: the ranks and how long it took.
    let done = published.notices();
    assert_eq!(done.len(), 1, "{done:?}");
    assert!(
        done[0].starts_with("podns wait: 4 of 4 ranks of wt/bert published after ")
            && done[0].ends_with("s (generation 0)"),
        "{done:?}"
    );

    assert_eq!(ready.exit_code(T).await, 0, "{:?}", ready.lines());
    let s = summary(&env, "bert.wt.rank").await.unwrap();
    assert!(s.starts_with("world=4 published=4 ready=4 "), "{s}");
    // --ready waited past the moment every rank was published: it saw
    // a summary with all published and not all Ready.
    assert!(
        ready
            .lines()
            .iter()
            .any(|l| l.contains("published: 4") && !l.contains("ready: 4")),
        "{:?}",
        ready.lines()
    );
    assert!(
        ready
            .notices()
            .last()
            .is_some_and(|l| l.starts_with("podns wait: 4 of 4 ranks of wt/bert Ready after ")),
        "{:?}",
        ready.said()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_times_out_naming_the_missing_ranks() {
    let env = env(&["--kubelet"], &[]).await;
    let created = sim_post(
        &env.client,
        "/sim/jobs",
        json!({"namespace": "wt", "name": "part", "ranks": 4, "kind": "indexed-job"}),
    )
    .await;
    let created: serde_json::Value = serde_json::from_str(&created).unwrap();
    // Once the simulated kubelet is done with every pod (all Ready, so it
    // will not write their phase again), one rank's pod fails: terminal
    // pods are never published.
    wait_for("4 of 4 ready", T, || async {
        summary(&env, "part.wt.rank")
            .await
            .is_some_and(|s| s.starts_with("world=4 published=4 ready=4 "))
    })
    .await;
    let pod = created["pods"][3].as_str().unwrap().to_string();
    let api: Api<Pod> = Api::namespaced(env.client.clone(), "wt");
    api.patch_status(
        &pod,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Failed"}})),
    )
    .await
    .unwrap();
    wait_for("3 of 4 published", T, || async {
        summary(&env, "part.wt.rank")
            .await
            .is_some_and(|s| s.starts_with("world=4 published=3 "))
    })
    .await;

    let mut w = Waiter::start(&env, &["part", "--namespace=wt", "--timeout=2s"]);
    assert_eq!(w.exit_code(T).await, 1);
    assert_eq!(
        w.said(),
        vec![
            "podns wait: timed out after 2s: 1 of 4 ranks of wt/part not published (generation 0)"
                .to_string()
        ]
    );

    let mut w = Waiter::start(&env, &["nope", "--namespace=wt", "--timeout=1500ms"]);
    assert_eq!(w.exit_code(T).await, 1);
    let said = w.said();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].starts_with("podns wait: timed out after 1500ms: 0 ranks of wt/nope published"),
        "{said:?}"
    );
    // What was asked, and where.
    assert!(
        said[0].contains(&format!(
            "{} answered NXDOMAIN for nope.wt.rank.cluster.local. TXT",
            env.dns
        )),
        "{said:?}"
    );
}

/// Every few seconds a waiting init container says how far the gang is,
/// so its log is not silent for the whole timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_says_how_far_the_gang_is_every_few_seconds() {
    // No simulated kubelet: the pods never get an IP, so none is published.
    let env = env(&[], &[]).await;
    create_job(&env.client, "wt", "slow", 4, "indexed-job").await;
    let w = Waiter::start(&env, &["slow", "--namespace=wt", "--timeout=60s"]);
    wait_for("two progress lines", T, || async {
        w.said().iter().filter(|l| is_progress(l)).count() >= 2
    })
    .await;
    let said = w.said();
    let progress: Vec<&String> = said.iter().filter(|l| is_progress(l)).collect();
    assert!(
        progress[0].starts_with("podns wait: 0 of 4 ranks of wt/slow published (generation 0); "),
        "{said:?}"
    );
    // Before the Job: what was asked, where, and what came back.
    let early = Waiter::start(&env, &["later", "--namespace=wt", "--timeout=60s"]);
    wait_for("a progress line before the Job exists", T, || async {
        early.said().iter().any(|l| is_progress(l))
    })
    .await;
    let line = early.said().into_iter().find(|l| is_progress(l)).unwrap();
    assert!(
        line.starts_with(&format!(
            "podns wait: 0 ranks of wt/later known published: {} answered NXDOMAIN for later.wt.rank.cluster.local. TXT",
            env.dns
        )),
        "{line}"
    );
}

/// A server that refuses the zone (a wrong --zone here) cannot become
/// right by waiting: exit 64 at once, naming the zone and the flags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_fails_at_once_when_the_server_refuses_the_zone() {
    let env = env(&[], &[]).await;
    let started = Instant::now();
    let mut w = Waiter::start(&env, &["bert", "-n", "ml", "--zone=example.org"]);
    assert_eq!(w.exit_code(T).await, 64, "{:?}", w.lines());
    // The default --timeout is 10 minutes; this is one poll.
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(
        w.said(),
        vec![format!(
            "podns wait: {} answered REFUSED for bert.ml.rank.example.org. TXT: no server asked serves zone example.org. (check --zone, default cluster.local, and --server)",
            env.dns
        )]
    );
}

/// A resolver that does not serve the cluster zone, as the host's is
/// outside a cluster: every question gets NXDOMAIN with no records and, in
/// Authority, the SOA of `soa` if any (the root's, as the Internet's
/// resolvers give, or none). On `sock`, already bound.
fn outside_resolver(sock: std::net::UdpSocket, soa: Option<&'static str>) {
    use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
    use hickory_proto::rr::rdata::SOA;
    use hickory_proto::rr::{Name, Record};
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 2048];
        loop {
            let Ok((n, peer)) = sock.recv_from(&mut buf) else {
                return;
            };
            let Ok(q) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let mut r = Message::new(q.metadata.id, MessageType::Response, OpCode::Query);
            r.metadata.response_code = ResponseCode::NXDomain;
            r.metadata.recursion_available = true;
            r.add_queries(q.queries.iter().cloned());
            if let Some(owner) = soa {
                let owner = Name::from_ascii(owner).unwrap();
                let mname = Name::from_ascii("a.root-servers.net.").unwrap();
                let rname = Name::from_ascii("nstld.verisign-grs.com.").unwrap();
                let rdata = SOA::new(mname, rname, 1, 1800, 900, 604800, 86400);
                r.add_authority(Record::from_rdata(owner, 86400, RData::SOA(rdata)));
            }
            let _ = sock.send_to(&r.to_vec().unwrap(), peer);
        }
    });
}

/// Outside a cluster the host's resolver answers NXDOMAIN for any
/// `cluster.local` name, under the root's SOA or none: exit 64 at once
/// (docs/ranks.md), not a 10-minute wait. podns's own NXDOMAIN, under the
/// zone's SOA, keeps the waiter waiting (the Job may come): exit 1 at the
/// timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_fails_at_once_on_nxdomain_from_outside_the_zone() {
    let hint =
        "it does not serve zone cluster.local. (check --zone, default cluster.local, and --server)";
    for (soa, why) in [(Some("."), "under the SOA of ."), (None, "with no SOA")] {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = sock.local_addr().unwrap();
        outside_resolver(sock, soa);
        let server = format!("--server={addr}");
        let started = Instant::now();
        // The default --timeout, 10 minutes.
        let mut w = Waiter::spawn(&["bert", "-n", "ml", &server]);
        assert_eq!(w.exit_code(T).await, 64, "{:?}", w.lines());
        // One poll (the query timeout is 2 s), not the timeout.
        assert!(started.elapsed() < Duration::from_secs(30));
        assert_eq!(
            w.said(),
            vec![format!(
                "podns wait: {addr} answered NXDOMAIN for bert.ml.rank.cluster.local. TXT {why}: {hint}"
            )]
        );
    }

    // podns itself: NXDOMAIN with the zone's SOA, so wait on.
    let env = env(&[], &[]).await;
    let m = ask(env.dns, "bert.ml.rank", RecordType::TXT).await;
    assert_eq!(rcode(&m), hickory_proto::op::ResponseCode::NXDomain);
    assert!(
        m.authorities
            .iter()
            .any(|r| r.record_type() == RecordType::SOA && r.name.to_ascii() == "cluster.local."),
        "{m:?}"
    );
    let mut w = Waiter::start(&env, &["bert", "-n", "ml", "--timeout=2s"]);
    assert_eq!(w.exit_code(T).await, 1, "{:?}", w.lines());
    let said = w.said();
    assert!(
        said.len() == 1
            && said[0]
                .starts_with("podns wait: timed out after 2s: 0 ranks of ml/bert published: ")
            && said[0].contains("answered NXDOMAIN for bert.ml.rank.cluster.local. TXT (no Job"),
        "{said:?}"
    );
}

/// The case as a user meets it: no `--server`, so the nameservers of
/// /etc/resolv.conf, here the outside resolver on 127.0.0.53 port 53
/// (bind-mounted over /etc/resolv.conf in a mount namespace of the
/// waiter's own: needs root, or a user namespace, and `unshare`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_without_server_fails_at_once_on_the_hosts_resolver() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    let ns_ok = root
        && Command::new("unshare")
            .args(["-m", "true"])
            .status()
            .is_ok_and(|s| s.success());
    if !need(
        "root and unshare -m (a resolv.conf of the test's own)",
        ns_ok,
    ) {
        return;
    }
    // 127.0.0.53 is systemd-resolved's stub address: take a free one
    // nearby rather than fight it for port 53.
    let Some(sock) = (54..=80u8).find_map(|last| {
        std::net::UdpSocket::bind(std::net::SocketAddr::from(([127, 0, 0, last], 53))).ok()
    }) else {
        need("a free port 53 on 127.0.0.54-80", false);
        return;
    };
    let addr = sock.local_addr().unwrap();
    outside_resolver(sock, None);
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("resolv.conf");
    std::fs::write(
        &conf,
        format!(
            "# the host's resolver\nnameserver {}\noptions edns0\n",
            addr.ip()
        ),
    )
    .unwrap();
    let script = format!(
        "mount --bind {} /etc/resolv.conf && exec {PODNS_BIN} wait bert -n ml",
        conf.display()
    );
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("timeout")
            .args(["120", "unshare", "-m", "sh", "-c", &script])
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(
        err.trim_end(),
        format!(
            "podns wait: {addr} answered NXDOMAIN for bert.ml.rank.cluster.local. TXT with no SOA: it does not serve zone cluster.local. (check --zone, default cluster.local, and --server)"
        )
    );
}

/// No DNS server at the address: a fast failure, not a 10-minute wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_fails_early_when_no_server_answers() {
    // A loopback port nobody listens on (bound, then closed).
    let dead = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let server = format!("--server={dead}");
    let mut w = Waiter::spawn(&[
        "bert",
        "-n",
        "ml",
        &server,
        "--query-timeout=500ms",
        "--timeout=10m",
    ]);
    assert_eq!(w.exit_code(T).await, 1, "{:?}", w.lines());
    let said = w.notices();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].starts_with("podns wait: no DNS server answered in ")
            && said[0].contains(&format!("{dead}: no answer"))
            && said[0].ends_with("(pass --server with podns' or the cluster DNS's IP:PORT)"),
        "{said:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_follows_a_gang_restart_to_the_new_generation() {
    // Pods get their IPs only after 3 s: the restart lands while waiting.
    let env = env(&["--kubelet", "--kubelet-delay-ms=3000"], &[]).await;
    create_job(&env.client, "wt", "llm", 4, "jobset").await;
    let mut w = Waiter::start(&env, &["llm", "--namespace=wt", "--timeout=60s"]);
    wait_for("podns wait to see generation 0", T, || async {
        w.lines()
            .iter()
            .any(|l| l.contains("generation: 0") && !l.contains("published: 4"))
    })
    .await;
    sim_post(&env.client, "/sim/jobs/wt/llm/restart", json!({})).await;

    assert_eq!(w.exit_code(T).await, 0, "{:?}", w.lines());
    let notices = w.notices();
    assert_eq!(
        notices[0],
        "podns wait: wt/llm restarted: generation 0 → 1, waiting for its 4 ranks",
    );
    assert_eq!(notices.len(), 2, "{notices:?}");
    assert!(
        notices[1].starts_with("podns wait: 4 of 4 ranks of wt/llm published after ")
            && notices[1].ends_with("(generation 1)"),
        "{notices:?}"
    );
    let s = summary(&env, "llm.wt.rank").await.unwrap();
    assert!(
        s.starts_with("world=4 published=4 ") && s.ends_with("generation=1"),
        "{s}"
    );
}

#[test]
fn wait_bad_flags_exit_64_with_one_line() {
    for args in [
        vec!["wait", "j"],
        vec!["wait", "j", "-n", "ml", "--timeout=5x"],
        vec!["wait", "j", "-n", "ml", "--server=not-an-ip"],
        vec!["wait", "bad..name", "-n", "ml", "--server=127.0.0.1:1"],
    ] {
        let out = Command::new(PODNS_BIN).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
}
