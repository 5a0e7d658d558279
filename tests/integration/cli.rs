//! The binary as an operator runs it: flags, signals, the demo, dig.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use serde_json::json;

use crate::support::*;

const BIN: &str = env!("CARGO_BIN_EXE_podns");

#[test]
fn bad_flags_exit_64_with_one_line() {
    for args in [
        vec!["serve", "--zone", "bad..zone"],
        vec!["serve", "--publish", "sometimes"],
        vec!["serve", "--dns-listen", "nowhere"],
        vec!["serve", "--reverse-cidr", "10.0.0.0/99"],
        vec!["serve", "--shutdown-grace", "soon"],
        vec!["serve", "--udp-recv-buffer", "lots"],
        vec![
            "serve",
            "--udp-send-buffer",
            "2GiB",
            "--kubeconfig",
            "/nonexistent",
        ],
        vec!["serve", "--no-such-flag"],
        vec![
            "serve",
            "--namespace",
            "Bad_NS",
            "--kubeconfig",
            "/nonexistent",
        ],
        vec![
            "serve",
            "--relay-listen",
            "127.0.0.1:0",
            "--relay-max-connections",
            "0",
        ],
        vec!["serve", "--relay-max-connections", "10"],
        vec!["sim", "--service-cidr", "fd00::/108"],
        vec!["sim", "--service-cidr", "10.96.0.0/31"],
        vec!["sim", "--service-cidr-v6", "10.96.0.0/12"],
        vec!["nosuchcommand"],
    ] {
        let out = Command::new(BIN)
            .args(&args)
            .env("RUST_LOG", "off")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: one line, got {err:?}"
        );
    }
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
}

#[test]
fn an_unreadable_kubeconfig_is_a_config_error() {
    let out = Command::new(BIN)
        .args([
            "serve",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--dns-listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("kubeconfig"));
}

/// Read stderr lines until one contains `what`; return the address after it.
fn wait_listening(lines: &mut impl Iterator<Item = String>, what: &str) -> std::net::SocketAddr {
    for line in lines {
        if let Some(rest) = line.split(what).nth(1) {
            let addr = rest.split_whitespace().next().unwrap();
            return addr.parse().unwrap();
        }
    }
    panic!("process ended before logging {what:?}");
}

/// `podns serve` on loopback port 0 against the kubeconfig `kc`, with
/// `args` and `envs` added, and its stderr (info, no colour) as lines.
fn serve_bin(
    kc: &std::path::Path,
    args: &[&str],
    envs: &[(&str, &str)],
) -> (Kill, impl Iterator<Item = String> + use<>) {
    let mut cmd = serve_command(kc, args);
    cmd.env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .envs(envs.iter().copied());
    spawn_lines(&mut cmd)
}

/// `podns serve` on loopback port 0 against the kubeconfig `kc`, with
/// `args` added and its stderr piped.
fn serve_command(kc: &std::path::Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "serve",
        "--dns-listen=127.0.0.1:0",
        "--admin-listen=127.0.0.1:0",
    ])
    .args(args)
    .arg(format!("--kubeconfig={}", kc.display()))
    .stderr(Stdio::piped());
    cmd
}

/// Start `cmd` (stderr piped), killed when dropped; its stderr as lines.
fn spawn_lines(cmd: &mut Command) -> (Kill, impl Iterator<Item = String> + use<>) {
    let mut child = Kill(cmd.spawn().unwrap());
    let stderr = child.0.stderr.take().unwrap();
    (child, BufReader::new(stderr).lines().map_while(Result::ok))
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_then_exits_zero() {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (_sim, _dir, kc) = sim_with_kubeconfig(&[], &shutdown).await;
    let (mut child, mut lines) = serve_bin(&kc, &["--shutdown-grace=2s"], &[]);
    let dns = wait_listening(&mut lines, "listening dns udp ");
    let admin = wait_listening(&mut lines, "listening admin http ");
    std::thread::spawn(move || for _ in lines {});
    wait_for("ready", Duration::from_secs(20), || async {
        admin_get(admin, "/readyz").await.0 == 200
    })
    .await;
    assert!(
        admin_get(admin, "/metrics")
            .await
            .1
            .contains("\npodns_ready 1\n"),
        "podns_ready follows /readyz"
    );
    let pid = child.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    wait_for(
        "readyz 503 while draining",
        Duration::from_secs(5),
        || async { admin_get(admin, "/readyz").await.0 == 503 },
    )
    .await;
    assert!(
        admin_get(admin, "/metrics")
            .await
            .1
            .contains("\npodns_ready 0\n"),
        "podns_ready is 0 while draining"
    );
    // Still answering during the grace period.
    assert_eq!(
        rcode(&ask(dns, "cluster.local.", RecordType::SOA).await),
        ResponseCode::NoError
    );
    let status = wait_exit(
        &mut child.0,
        "exit after the grace period",
        Duration::from_secs(15),
    )
    .await;
    assert!(status.success(), "{status:?}");
    shutdown.cancel();
}

/// `--udp-recv-buffer` and `--udp-send-buffer` reach the sockets: the
/// start-up line says what the kernel granted (all of it with
/// CAP_NET_ADMIN, else up to net.core.rmem_max, and then why), and
/// /metrics exports the same sizes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_buffer_flags_are_granted_logged_and_exported() {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (_sim, _dir, kc) = sim_with_kubeconfig(&[], &shutdown).await;
    let (recv, send) = (3usize << 20, 512usize << 10);
    let (child, mut lines) = serve_bin(
        &kc,
        &["--udp-sockets=2", "--udp-recv-buffer=3MiB"],
        &[("PODNS_UDP_SEND_BUFFER", "512KiB")],
    );
    let line = lines
        .find(|l| l.contains("udp socket buffers"))
        .expect("a line about the buffers");
    let admin = wait_listening(&mut lines, "listening admin http ");
    std::thread::spawn(move || for _ in lines {});
    let forced = line.contains("SO_RCVBUFFORCE");
    let cap = |name: &str| -> usize {
        std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let (want_recv, want_send) = if forced {
        (recv, send)
    } else {
        (recv.min(cap("rmem_max")), send.min(cap("wmem_max")))
    };
    assert!(
        line.contains(&format!(
            "receive {want_recv} bytes granted of {recv} asked, send {want_send} of {send}"
        )),
        "{line}"
    );
    assert_eq!(
        line.contains("capped by net.core.rmem_max"),
        want_recv < recv,
        "{line}"
    );
    let metrics = admin_get(admin, "/metrics").await.1;
    for want in [
        format!("\npodns_udp_receive_buffer_bytes {want_recv}\n"),
        format!("\npodns_udp_send_buffer_bytes {want_send}\n"),
        "\npodns_udp_receive_dropped_total 0\n".to_string(),
    ] {
        assert!(metrics.contains(&want), "{want:?} in {metrics}");
    }
    drop(child);
    shutdown.cancel();
}

/// A running `podns demo` on loopback port 0 (with `path` as PATH when
/// given) and what it printed up to its Ctrl-C line.
fn demo_lines(path: Option<&std::ffi::OsStr>) -> (Kill, Vec<String>) {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "demo",
        "--dns-listen=127.0.0.1:0",
        "--admin-listen=127.0.0.1:0",
        "--api-listen=127.0.0.1:0",
    ])
    .env("RUST_LOG", "warn")
    .stdout(Stdio::piped());
    if let Some(path) = path {
        cmd.env("PATH", path);
    }
    let mut child = Kill(cmd.spawn().unwrap());
    let stdout = child.0.stdout.take().unwrap();
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        let end = line.contains("Ctrl-C");
        lines.push(line);
        if end {
            break;
        }
    }
    (child, lines)
}

/// A running `podns demo` on loopback port 0 and the dig lines it printed.
fn demo_digs() -> (Kill, Vec<String>) {
    let (child, lines) = demo_lines(None);
    let digs = lines
        .into_iter()
        .filter(|l| l.starts_with("dig "))
        .collect();
    (child, digs)
}

/// `podns demo` prints dig command lines that work as printed.
#[test]
fn demo_prints_dig_lines_that_work() {
    if !need_cmd("dig") {
        return;
    }
    let (_demo, digs) = demo_digs();
    assert!(digs.len() >= 5, "{digs:?}");
    for cmd in &digs {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("{cmd} +time=2 +tries=2"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{cmd}: {text}");
        let expect_nx = cmd.contains("bert-finetune-64");
        let status = if expect_nx {
            "status: NXDOMAIN"
        } else {
            "status: NOERROR"
        };
        assert!(text.contains(status), "{cmd}:\n{text}");
        if !expect_nx {
            assert!(text.contains("ANSWER SECTION"), "{cmd}:\n{text}");
        }
        assert!(text.contains(" aa"), "authoritative: {cmd}:\n{text}");
    }
}

/// dig against a running server: A, AAAA (NODATA), SRV, PTR and TCP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dig_agrees() {
    if !need_cmd("dig") {
        return;
    }
    let env = env(&[], &[]).await;
    let mut body = pod_json("ml", "r-0-x", json!({"app": "r"}));
    body["spec"]["hostname"] = json!("r-0");
    body["spec"]["subdomain"] = json!("r");
    create_pod(&env.client, body).await;
    create_service(&env.client, headless_json("ml", "r", "r")).await;
    set_status(&env.client, "ml", "r-0-x", &["10.244.9.9"], true).await;
    wait_for("pod answers", Duration::from_secs(20), || async {
        !ask(env.dns, "r-0.r.ml.svc", RecordType::A)
            .await
            .answers
            .is_empty()
    })
    .await;
    let dig = |args: &str| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "dig @{} -p {} +time=2 +tries=2 {args}",
                env.dns.ip(),
                env.dns.port()
            ))
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let a = dig("r-0.r.ml.svc.cluster.local A");
    assert!(
        a.contains("status: NOERROR") && a.contains("10.244.9.9"),
        "{a}"
    );
    let aaaa = dig("r-0.r.ml.svc.cluster.local AAAA");
    assert!(
        aaaa.contains("status: NOERROR") && aaaa.contains("ANSWER: 0") && aaaa.contains("SOA"),
        "{aaaa}"
    );
    let srv = dig("_nccl._tcp.r.ml.svc.cluster.local SRV");
    assert!(srv.contains("29500 r-0.r.ml.svc.cluster.local."), "{srv}");
    let ptr = dig("-x 10.244.9.9");
    assert!(ptr.contains("PTR\tr-0.r.ml.svc.cluster.local."), "{ptr}");
    let t = dig("+tcp r.ml.svc.cluster.local A");
    assert!(t.contains("10.244.9.9") && t.contains("(TCP)"), "{t}");
    let nx = dig("nobody.r.ml.svc.cluster.local A");
    assert!(nx.contains("status: NXDOMAIN"), "{nx}");
}

/// Logs on a pipe carry no terminal colour codes, and a failing watch logs
/// one line per retry (ours, with the reason and delay), not also
/// kube-client's ERROR for the same request.
#[test]
fn logs_on_a_pipe_are_plain_and_one_line_per_watch_retry() {
    // An API server that refuses connections: a loopback port nobody
    // listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {{server: \"http://127.0.0.1:{port}\"}}\n  name: x\ncontexts:\n- context: {{cluster: x, user: x}}\n  name: x\ncurrent-context: x\nusers:\n- name: x\n  user: {{}}\n"
        ),
    )
    .unwrap();
    let (child, mut lines) = spawn_lines(
        serve_command(&kc, &["--no-rank-view"])
            .env_remove("RUST_LOG")
            .env_remove("NO_COLOR"),
    );
    let mut seen = Vec::new();
    // Retries of the watches (pods, services and the rest).
    let retries = |seen: &[String]| {
        seen.iter()
            .filter(|l| l.contains("watch failed, retrying"))
            .count()
    };
    // The API server's address is named: the retries say only
    // `client error (Connect)`. Every watch retries at once, so the line
    // naming it may come after several retries; read until both are in
    // (bounded: the retries back off, so a few hundred lines is minutes).
    let url = format!("http://127.0.0.1:{port}/");
    let named = |seen: &[String]| {
        seen.iter()
            .any(|l| l.contains(&format!("cannot reach the Kubernetes API at {url}")))
    };
    for line in lines.by_ref().take(400) {
        seen.push(line);
        if retries(&seen) >= 4 && named(&seen) {
            break;
        }
    }
    drop(child);
    let text = seen.join("\n");
    assert!(retries(&seen) >= 4, "no retries logged:\n{text}");
    assert!(named(&seen), "{text}");
    assert!(!text.contains('\u{1b}'), "colour codes on a pipe:\n{text}");
    assert!(
        !text.contains("kube_client"),
        "kube-client logged the same failure too:\n{text}"
    );
}

/// `podns ARGS` with no kubeconfig anywhere: (exit code, stderr).
fn run_bare(args: &[&str], home: &std::path::Path) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "off")
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Each usage error keeps, on its one line, what tells the user the fix.
#[test]
fn usage_errors_say_what_to_do() {
    let home = tempfile::tempdir().unwrap();
    for (args, says) in [
        (
            &["wait", "llama-pretrain", "--server", "127.0.0.1:1053"][..],
            "error: the following required arguments were not provided: --namespace <NAMESPACE>",
        ),
        (&["serve", "--publish", "readyy"], "[possible values: "),
        (
            &["serve", "--publish", "readyy"],
            "tip: a similar value exists: 'ready'",
        ),
        (
            &["serve", "--dns-listn", "127.0.0.1:53"],
            "unexpected argument '--dns-listn' found; tip: a similar argument exists: '--dns-listen'",
        ),
        (
            &["serv"],
            "unrecognized subcommand 'serv'; tip: a similar subcommand exists: 'serve'",
        ),
        (
            &[
                "serve",
                "--dns-listen=127.0.0.1:0",
                "--admin-listen=127.0.0.1:0",
            ],
            "error: no kubeconfig: pass --kubeconfig, set KUBECONFIG, run in a pod, or try `podns demo`",
        ),
        (
            &["zonefile"],
            "error: no kubeconfig: pass --kubeconfig, set KUBECONFIG, run in a pod, or try `podns demo`",
        ),
        (
            &[
                "serve",
                "--kubeconfig=/nonexistent/kc",
                "--dns-listen=127.0.0.1:0",
                "--admin-listen=127.0.0.1:0",
            ],
            "error: failed to read kubeconfig /nonexistent/kc: No such file",
        ),
    ] {
        let (code, err) = run_bare(args, home.path());
        assert_eq!(code, Some(64), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?} does not say {says:?}: {err}");
        assert!(!err.contains("'\""), "{args:?}: a path quoted twice: {err}");
    }
}

/// An address that cannot be bound is the operator's to fix: exit 64 with
/// one line in every command that binds one.
#[test]
fn a_bind_failure_exits_64_in_every_command() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = taken.local_addr().unwrap().to_string();
    let home = tempfile::tempdir().unwrap();
    let kc = home.path().join("kubeconfig");
    std::fs::write(
        &kc,
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {server: \"http://127.0.0.1:1\"}\n  name: x\ncontexts:\n- context: {cluster: x, user: x}\n  name: x\ncurrent-context: x\nusers:\n- name: x\n  user: {}\n",
    )
    .unwrap();
    let kc = format!("--kubeconfig={}", kc.display());
    for args in [
        vec!["sim", "--listen", &at],
        vec![
            "demo",
            "--api-listen",
            &at,
            "--dns-listen=127.0.0.1:0",
            "--admin-listen=127.0.0.1:0",
        ],
        vec![
            "serve",
            "--admin-listen",
            &at,
            "--dns-listen=127.0.0.1:0",
            &kc,
        ],
    ] {
        let (code, err) = run_bare(&args, home.path());
        assert_eq!(code, Some(64), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(&at), "{args:?} names the address: {err}");
    }
    drop(taken);
}

/// `podns demo --exit-when-ready` ends by itself: it must not tell the
/// user to press Ctrl-C.
#[test]
fn demo_exit_when_ready_says_no_ctrl_c() {
    let out = Command::new(BIN)
        .args([
            "demo",
            "--exit-when-ready",
            "--dns-listen=127.0.0.1:0",
            "--admin-listen=127.0.0.1:0",
            "--api-listen=127.0.0.1:0",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("podns demo is ready"), "{text}");
    assert!(!text.contains("Ctrl-C"), "{text}");
}

/// The `+tcp` examples (the demo's and the README's) ask for a set that
/// does not fit in a 1232-byte UDP answer, so `+tcp` is what makes them
/// whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tcp_examples_need_tcp() {
    let (_demo, digs) = demo_digs();
    let tcp_lines: Vec<String> = digs.into_iter().filter(|l| l.contains(" +tcp")).collect();
    assert!(!tcp_lines.is_empty(), "the demo prints a +tcp example");
    // `dig @IP -p PORT NAME …`
    let name_of = |line: &str| line.split_whitespace().nth(4).unwrap().to_string();
    for line in &tcp_lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        let dns: std::net::SocketAddr = format!("{}:{}", &words[1][1..], words[3]).parse().unwrap();
        let m = ask(dns, &format!("{}.", name_of(line)), RecordType::A).await;
        assert!(
            m.metadata.truncation,
            "{line}: fits in UDP, +tcp shows nothing"
        );
    }
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let readme_tcp: Vec<&str> = readme
        .lines()
        .filter(|l| l.starts_with("dig ") && l.contains(" +tcp"))
        .collect();
    assert!(!readme_tcp.is_empty());
    for line in readme_tcp {
        assert!(
            tcp_lines.iter().any(|d| name_of(d) == name_of(line)),
            "README: {line} asks a name the demo's +tcp example does not: {tcp_lines:?}"
        );
    }
}

/// `podns completion SHELL` prints a script its shell parses (`bash -n`;
/// zsh and fish when installed), for the commands and flags of this build.
#[test]
fn completion_scripts_parse_in_their_shells() {
    for (shell, check) in [("bash", "bash"), ("zsh", "zsh"), ("fish", "fish")] {
        let out = Command::new(BIN)
            .args(["completion", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8(out.stdout).unwrap();
        for word in ["serve", "dns-listen", "explain", "completion"] {
            assert!(script.contains(word), "{shell}: no {word:?} in\n{script}");
        }
        // .ci/run installs the three; elsewhere a missing one is skipped.
        if !need_cmd(check) {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(format!("podns.{shell}"));
        std::fs::write(&file, &script).unwrap();
        let parsed = Command::new(check).arg("-n").arg(&file).output().unwrap();
        assert!(
            parsed.status.success() && parsed.stderr.is_empty(),
            "{check} -n: {}",
            String::from_utf8_lossy(&parsed.stderr)
        );
    }
    let (code, err) = run_bare(&["completion", "tcsh"], tempfile::tempdir().unwrap().path());
    assert_eq!(code, Some(64), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// `podns man --out-dir DIR` writes podns.1 and a page per command, and
/// each renders through `man -l` with no groff warning; `podns man
/// serve` is the page of `podns serve`, flags and all.
#[test]
fn man_pages_render() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["man", "--out-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let written: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    for page in ["podns.1", "podns-serve.1", "podns-wait.1", "podns-man.1"] {
        assert!(
            written.iter().any(|w| w.ends_with(&format!("/{page}"))),
            "{page} not in {written:?}"
        );
    }
    let render = |file: &std::path::Path| -> Option<(String, String)> {
        let out = if need_cmd("man") {
            Command::new("man")
                .args(["--warnings=w", "-l"])
                .arg(file)
                .env("MANWIDTH", "100")
                .env("MANPAGER", "cat")
                .output()
        } else {
            return None;
        }
        .unwrap();
        assert!(out.status.success(), "{}: {out:?}", file.display());
        Some((
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    };
    for file in &written {
        let roff = std::fs::read_to_string(file).unwrap();
        assert!(roff.contains("\n.TH "), "{file}: not a man page:\n{roff}");
        match render(std::path::Path::new(file)) {
            Some((text, warnings)) => {
                assert!(warnings.is_empty(), "{file}: {warnings}");
                assert!(
                    text.contains("NAME") && text.contains("SYNOPSIS"),
                    "{file}:\n{text}"
                );
            }
            None => eprintln!("man not installed: {file} checked as roff text only"),
        }
    }
    let serve = Command::new(BIN).args(["man", "serve"]).output().unwrap();
    assert!(serve.status.success());
    let file = dir.path().join("stdout.1");
    std::fs::write(&file, &serve.stdout).unwrap();
    if let Some((text, _)) = render(&file) {
        assert!(text.contains("podns-serve"), "{text}");
        assert!(text.contains("--dns-listen"), "{text}");
        assert!(text.contains("PODNS_ZONE"), "the env of each flag: {text}");
    }
    let (code, err) = run_bare(&["man", "serv"], dir.path());
    assert_eq!(code, Some(64), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("name it as a path (./serv)"), "{err}");
    // `podns man DIR`, as clap_mangen's users write it: every page there.
    let pages = dir.path().join("pages");
    let out = Command::new(BIN).arg("man").arg(&pages).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    for page in ["podns.1", "podns-serve.1"] {
        assert!(
            pages.join(page).is_file(),
            "{page} not in {}",
            pages.display()
        );
    }
}

/// `podns --version` names the crate version, the commit it was built from
/// (this checkout's HEAD when built from one) and its features.
#[test]
fn version_names_the_commit_and_features() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8(out.stdout).unwrap();
    assert_eq!(line.lines().count(), 1, "{line}");
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        line.starts_with(&format!("podns {version} (commit ")),
        "{line}"
    );
    assert!(line.trim_end().ends_with(", features: sim)"), "{line}");
    let head = Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success() && std::env::var_os("PODNS_GIT_COMMIT").is_none());
    match head {
        Some(head) => {
            let head = String::from_utf8(head.stdout).unwrap();
            assert!(
                line.contains(&format!("commit {}", head.trim())),
                "{line} is not HEAD {head}"
            );
        }
        None => eprintln!("no git checkout: the commit is not compared with HEAD"),
    }
}

/// What deploys podns names this crate's version: the chart's version and
/// appVersion (the default image tag), the overlays' image tag, the
/// Dockerfile's example tag. A release bumps them together.
#[test]
fn the_chart_and_overlays_name_this_version() {
    let version = env!("CARGO_PKG_VERSION");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
    let chart: serde_json::Value =
        serde_saphyr::from_str(&read("deploy/helm/podns/Chart.yaml")).unwrap();
    assert_eq!(chart["version"], version, "Chart.yaml version");
    assert_eq!(chart["appVersion"], version, "Chart.yaml appVersion");
    // The overlays take the image from one component: its tag names the
    // release, and every overlay includes it.
    let component = "deploy/components/image/kustomization.yaml";
    let k: serde_json::Value = serde_saphyr::from_str(&read(component)).unwrap();
    let images = k["images"].as_array().cloned().unwrap_or_default();
    let podns: Vec<_> = images.iter().filter(|i| i["name"] == "podns").collect();
    assert_eq!(podns.len(), 1, "{component}: one podns image: {images:?}");
    // A digest pins the image whatever the tag says; the tag still names
    // the release.
    assert_eq!(podns[0]["newTag"], version, "{component}: {}", podns[0]);
    let mut overlays = 0;
    for entry in std::fs::read_dir(root.join("deploy/overlays")).unwrap() {
        let path = entry.unwrap().path().join("kustomization.yaml");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let k: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        let components = k["components"].as_array().cloned().unwrap_or_default();
        assert!(
            components
                .iter()
                .any(|c| c.as_str().is_some_and(|c| c.ends_with("components/image"))),
            "{} takes its image from {component}: {components:?}",
            path.display()
        );
        overlays += 1;
    }
    assert!(overlays >= 2, "both overlays read");
    assert!(
        read("Dockerfile").contains(&format!("-t podns:{version} ")),
        "the Dockerfile's build line tags podns:{version}"
    );
}

/// The `podns explain …` line of `podns demo`, with `path` as PATH.
fn demo_explain_line(path: &std::ffi::OsStr) -> (Kill, String) {
    let (child, lines) = demo_lines(Some(path));
    let explain = lines
        .into_iter()
        .rev()
        .find(|l| l.contains(" explain ") && !l.starts_with('#'));
    (child, explain.expect("the demo prints an explain line"))
}

/// The demo's `podns explain …` line works as printed: run from a build
/// (as `cargo run` does) it names that binary's path; installed on PATH,
/// its name. Either way a shell with the same PATH runs it.
#[test]
fn demo_prints_an_explain_line_that_works() {
    let bin_dir = std::path::Path::new(BIN).parent().unwrap();
    let plain = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<std::path::PathBuf> = vec![bin_dir.to_path_buf()];
    dirs.extend(std::env::split_paths(&plain).filter(|d| d != bin_dir));
    let installed = std::env::join_paths(dirs).unwrap();
    // PATH without the build's directory: not installed.
    let not_installed = std::env::join_paths(
        std::env::split_paths(&plain)
            .filter(|d| d.canonicalize().ok() != bin_dir.canonicalize().ok()),
    )
    .unwrap();
    for (path, program) in [(&not_installed, BIN), (&installed, "podns")] {
        let (_demo, line) = demo_explain_line(path);
        assert!(
            line.starts_with(&format!("{program} explain ")),
            "expected {program:?}: {line}"
        );
        let out = Command::new("sh")
            .arg("-c")
            .arg(&line)
            .env("PATH", path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{line}: {out:?}");
        assert!(text.contains("NXDOMAIN"), "{line}:\n{text}");
    }
}

/// `podns ARGS` with `envs` and no kubeconfig anywhere, logging as it does
/// by default (info: a `listening` line would show): (exit code, stderr,
/// how long it took).
fn run_logged(
    args: &[&str],
    envs: &[(&str, &str)],
    home: &std::path::Path,
) -> (Option<i32>, String, Duration) {
    let started = std::time::Instant::now();
    let out = Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

/// A command, its environment, its exit code, what its line says and what
/// it must not say.
type Case<'a> = (
    Vec<String>,
    &'a [(&'a str, &'a str)],
    i32,
    Vec<String>,
    Vec<&'a str>,
);

/// The errors a new user met, each in one line, with README's exit code (64: the
/// operator must fix the configuration; 1: a failure at run time), saying
/// what the fix needs and nothing twice; `serve` finds a bad configuration
/// before it binds anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_error_is_one_line() {
    let home = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = home.path().join(name);
        std::fs::write(&path, text).unwrap();
        format!("--kubeconfig={}", path.display())
    };
    let garbage = file(
        "garbage",
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {server: \"http://x\"\n  name: x\n",
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let closed = file(
        "closed",
        &format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {{server: \"http://127.0.0.1:{port}\"}}\n  name: x\ncontexts:\n- context: {{cluster: x, user: x}}\n  name: x\ncurrent-context: x\nusers:\n- name: x\n  user: {{}}\n"
        ),
    );
    let env = env(&[], &[]).await;
    let dns_port = format!("--admin={}", env.dns);
    let loopback = ["--dns-listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0"];
    let serve = |more: &[&str]| -> Vec<String> {
        ["serve"]
            .iter()
            .chain(&loopback)
            .chain(more)
            .map(|s| s.to_string())
            .collect()
    };
    let in_pod = [
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
        ("KUBERNETES_SERVICE_PORT", "443"),
    ];
    let token = std::path::Path::new(podns_server::config::SERVICE_ACCOUNT_DIR).join("token");
    // (args, env, exit code, says, must not say)
    let mut cases: Vec<Case> = vec![
        (
            serve(&[]),
            &[],
            64,
            vec![format!(
                "error: no kubeconfig: pass --kubeconfig, set KUBECONFIG, run in a pod, or try `podns demo` ({} does not exist, and no KUBERNETES_SERVICE_HOST for in-cluster config)",
                home.path().join(".kube/config").display()
            )],
            vec!["listening"],
        ),
        (
            serve(&[&garbage]),
            &[],
            64,
            vec![
                format!(
                    "error: failed to parse kubeconfig {}: line 5 column 3: ",
                    &garbage["--kubeconfig=".len()..]
                ),
                "did not find expected ',' or '}'".into(),
            ],
            vec!["listening", "-->", "^"],
        ),
        (
            vec!["serve".into(), "--zone".into(), "bad zone!".into()],
            &[],
            64,
            vec!["invalid zone \"bad zone!\": character 4 is ' ', not allowed".into()],
            vec![],
        ),
        (
            vec!["zonefile".into(), closed.clone()],
            &[],
            1,
            vec![
                format!(
                    "error: the Kubernetes API at http://127.0.0.1:{port}/: failed to list pods: "
                ),
                "failed to list pods: connection refused".into(),
            ],
            vec![],
        ),
        (
            vec!["explain".into(), "x.ml.svc.cluster.local".into(), dns_port],
            &[],
            1,
            vec!["is not podns's admin API (connected, but no HTTP answer within 2 s)".into()],
            vec![],
        ),
    ];
    // An address that takes no connection (a listener whose accept queue
    // is full drops the SYN, as a firewall would): connect gives up in 2 s.
    let full = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    full.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    full.listen(0).unwrap();
    let full_at = full.local_addr().unwrap().as_socket().unwrap();
    let _queued = std::net::TcpStream::connect(full_at).unwrap();
    let probe = std::net::TcpStream::connect_timeout(&full_at, Duration::from_millis(300));
    if !probe
        .as_ref()
        .is_err_and(|e| e.kind() == std::io::ErrorKind::TimedOut)
    {
        eprintln!(
            "a connection past a full accept queue did not hang here ({probe:?}): explain's connect timeout is not run"
        );
    } else {
        cases.push((
            vec![
                "explain".into(),
                "x.ml.svc.cluster.local".into(),
                format!("--admin={full_at}"),
            ],
            &[],
            1,
            vec![format!(
                "podns explain: cannot reach http://{full_at}: no connection within 2 s"
            )],
            vec![],
        ));
    }
    if token.exists() {
        eprintln!(
            "{} exists here: the in-cluster case without a token is not run",
            token.display()
        );
    } else {
        cases.push((
            serve(&[]),
            &in_pod,
            64,
            vec![format!(
                "KUBERNETES_SERVICE_HOST=10.96.0.1 is set but {} has no token",
                podns_server::config::SERVICE_ACCOUNT_DIR
            )],
            vec!["run in a pod", "listening"],
        ));
    }
    for (args, envs, code, says, never) in cases {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let (got, err, took) = run_logged(&argv, envs, home.path());
        assert_eq!(got, Some(code), "{args:?}: {err}");
        // Log lines (`2026-…Z  INFO …`) aside: zonefile says which API
        // server it asks before it fails. serve logs nothing before its
        // configuration is whole.
        let is_log = |l: &&str| l.starts_with("20") && l.contains("Z ");
        let logs: Vec<&str> = err.lines().filter(is_log).collect();
        if args[0] == "serve" {
            assert!(logs.is_empty(), "{args:?}: {err}");
        }
        assert!(!logs.iter().any(|l| l.contains("ERROR")), "{args:?}: {err}");
        let err = err.lines().filter(|l| !is_log(l)).collect::<Vec<_>>();
        assert_eq!(err.len(), 1, "{args:?}: one line, got {err:?}");
        let err = err[0];
        assert!(!err.ends_with(char::is_whitespace), "{args:?}: {err:?}");
        for s in &says {
            assert!(
                err.contains(s.as_str()),
                "{args:?} does not say {s:?}: {err}"
            );
        }
        for s in never {
            assert!(!err.contains(s), "{args:?} says {s:?}: {err}");
        }
        // Each cause once (kube and hyper repeat them).
        let parts: Vec<&str> = err.split(": ").collect();
        for (i, p) in parts.iter().enumerate() {
            assert!(
                !parts[i + 1..].contains(p),
                "{args:?}: {p:?} twice in {err}"
            );
        }
        assert!(took < Duration::from_secs(8), "{args:?} took {took:?}");
    }
}

/// `KUBECONFIG` as operators export it never stands for a flag they did
/// not pass: a node instance (`--relay-kubeconfig`) starts and serves
/// whatever `$KUBECONFIG` says, since it never reads the variable; an
/// empty one is unset; a list is read as kubectl reads it (a missing file
/// skipped, the rest merged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_variable_never_stands_for_a_flag() {
    let (env, dir, relay_kc) = crate::relay::env_with_relay(&[]).await;
    let sim_kc = dir.path().join("sim.yaml");
    std::fs::write(&sim_kc, env.sim.kubeconfig_yaml()).unwrap();
    let ready = |admin| async move {
        wait_for("ready", Duration::from_secs(30), || async {
            admin_get(admin, "/readyz").await.0 == 200
        })
        .await;
    };
    // A node instance, whatever KUBECONFIG holds: a file that does not
    // exist, the API server's own kubeconfig, nothing.
    let missing = "/nonexistent/kubeconfig".to_string();
    for value in [missing.clone(), sim_kc.display().to_string(), String::new()] {
        let mut cmd = Command::new(BIN);
        cmd.args([
            "serve",
            "--dns-listen=127.0.0.1:0",
            "--admin-listen=127.0.0.1:0",
            "--node=node-a",
        ])
        .arg(format!("--relay-kubeconfig={}", relay_kc.display()))
        .arg(format!("--relay-dns={}", env.dns))
        .env("KUBECONFIG", &value);
        let node = podns_testkit::process::spawn_serve(cmd);
        ready(node.admin).await;
        let log = node.log_text();
        assert!(
            log.contains("kubernetes api https://127.0.0.1"),
            "KUBECONFIG={value:?}: the node instance reads its relay, not the API server: {log}"
        );
    }
    // Plain serve: a list whose first file is missing reads the second.
    let list = std::env::join_paths([std::path::Path::new(&missing), &sim_kc]).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args([
        "serve",
        "--dns-listen=127.0.0.1:0",
        "--admin-listen=127.0.0.1:0",
    ])
    .env("KUBECONFIG", &list)
    .env("RUST_LOG", "info")
    .env("NO_COLOR", "1")
    .stderr(Stdio::piped());
    let (_child, mut lines) = spawn_lines(&mut cmd);
    let admin = wait_listening(&mut lines, "listening admin http ");
    std::thread::spawn(move || for _ in lines {});
    ready(admin).await;
    // An empty KUBECONFIG is unset: the usual "no kubeconfig", not clap's
    // "a value is required for '--kubeconfig'".
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args([
            "serve",
            "--dns-listen=127.0.0.1:0",
            "--admin-listen=127.0.0.1:0",
        ])
        .env("RUST_LOG", "off")
        .env("HOME", home.path())
        .env("KUBECONFIG", "")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(
        err.starts_with("error: no kubeconfig: pass --kubeconfig"),
        "{err}"
    );
    // A list of files none of which exists: one line naming them.
    let out = Command::new(BIN)
        .args(["zonefile"])
        .env("RUST_LOG", "off")
        .env("HOME", home.path())
        .env("KUBECONFIG", format!("{missing}:/nonexistent/other"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "error: KUBECONFIG names no file that exists ({missing}, /nonexistent/other): fix it, unset it, or pass --kubeconfig"
        )
    );
}
