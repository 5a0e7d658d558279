//! SIGTERM under load and a read-only working directory, against the real
//! binary (`podns serve` as a child process) and `podns sim`.

use std::net::{SocketAddr, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::*;

/// One query's fate: when it was sent and whether a NOERROR answer with an
/// address came back (within the client's timeout).
#[derive(Clone, Copy)]
struct Sent {
    at: Instant,
    answered: bool,
}

/// A closed-loop UDP client: sends the next query as soon as the previous one
/// is answered or times out (300 ms). Bounded by `max` queries and `until`.
fn udp_client(
    dns: SocketAddr,
    names: Vec<String>,
    stop: Arc<AtomicBool>,
    until: Instant,
    max: usize,
) -> Vec<Sent> {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(dns).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let msgs: Vec<Message> = names
        .iter()
        .map(|n| query_msg(n, RecordType::A, Some(1232)))
        .collect();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let mut id: u16 = 0;
    while out.len() < max && !stop.load(Ordering::Relaxed) && Instant::now() < until {
        id = id.wrapping_add(1);
        let mut m = msgs[out.len() % msgs.len()].clone();
        m.metadata.id = id;
        let at = Instant::now();
        sock.send(&m.to_vec().unwrap()).unwrap();
        let mut answered = false;
        while let Ok(n) = sock.recv(&mut buf) {
            let Ok(r) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            if r.metadata.id == id {
                answered =
                    r.metadata.response_code == ResponseCode::NoError && !r.answers.is_empty();
                break;
            }
        }
        out.push(Sent { at, answered });
    }
    out
}

fn write_kubeconfig(dir: &Path, sim: &podns_sim::SimHandle) -> std::path::PathBuf {
    let kc = dir.join("kubeconfig");
    std::fs::write(&kc, sim.kubeconfig_yaml()).unwrap();
    std::fs::set_permissions(&kc, std::fs::Permissions::from_mode(0o644)).unwrap();
    kc
}

async fn wait_ready(admin: SocketAddr) {
    wait_for("podns ready", Duration::from_secs(60), || async {
        admin_get(admin, "/readyz").await.0 == 200
    })
    .await;
}

/// SIGTERM while clients query as fast as they can: every UDP query sent
/// after the signal and before the grace period ends (minus a margin for the
/// last in-flight ones) is answered, and so is every TCP query on a
/// connection opened before the signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_answers_every_query_during_the_grace_period() {
    const GRACE: Duration = Duration::from_secs(4);
    const MARGIN: Duration = Duration::from_millis(500);
    let shutdown = CancellationToken::new();
    let sim = start_sim(&["--kubelet"], &shutdown).await;
    let client = sim.client();
    create_job(&client, "default", "term", 64, "indexed-job").await;
    let dir = tempfile::tempdir().unwrap();
    let kc = write_kubeconfig(dir.path(), &sim);
    let mut podns = spawn_serve(serve_command(
        &kc,
        &["--shutdown-grace=4s", "--udp-sockets=2"],
    ));
    wait_ready(podns.admin).await;
    let names: Vec<String> = (0..64)
        .map(|i| fqdn(&format!("term-{i}.term.default.svc")))
        .collect();
    for n in &names {
        wait_resolves(podns.dns, n, Duration::from_secs(30)).await;
    }

    // Load: three closed-loop clients, bounded by count and time.
    let stop = Arc::new(AtomicBool::new(false));
    let until = Instant::now() + Duration::from_secs(30);
    let clients: Vec<_> = (0..3)
        .map(|k| {
            let (dns, stop) = (podns.dns, stop.clone());
            let mut ns = names.clone();
            ns.rotate_left(k * 20);
            std::thread::spawn(move || udp_client(dns, ns, stop, until, 3_000_000))
        })
        .collect();
    // A TCP connection opened before the signal.
    let mut conn = std::net::TcpStream::connect(podns.tcp).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let tcp_ask = |conn: &mut std::net::TcpStream, name: &str| -> bool {
        use std::io::{Read, Write};
        let b = query_msg(name, RecordType::A, None).to_vec().unwrap();
        let mut framed = (b.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&b);
        if conn.write_all(&framed).is_err() {
            return false;
        }
        let mut len = [0u8; 2];
        if conn.read_exact(&mut len).is_err() {
            return false;
        }
        let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
        conn.read_exact(&mut buf).is_ok()
            && Message::from_vec(&buf).is_ok_and(|m| {
                m.metadata.response_code == ResponseCode::NoError && !m.answers.is_empty()
            })
    };
    assert!(tcp_ask(&mut conn, &names[0]), "TCP answers before SIGTERM");
    tokio::time::sleep(Duration::from_millis(1500)).await; // load running

    let term_at = Instant::now();
    assert!(
        Command::new("kill")
            .args(["-TERM", &podns.pid().to_string()])
            .status()
            .unwrap()
            .success()
    );
    // TCP on the open connection, every 20 ms through the grace period.
    let (mut tcp_sent, mut tcp_answered) = (0, 0);
    while term_at.elapsed() < GRACE - MARGIN {
        tcp_sent += 1;
        tcp_answered += usize::from(tcp_ask(&mut conn, &names[tcp_sent % names.len()]));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Exits by itself after the grace period.
    let status = wait_exit(
        &mut podns.child,
        "podns to exit after grace",
        GRACE + Duration::from_secs(15),
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let sent: Vec<Sent> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    let before = sent.iter().filter(|s| s.at < term_at).count();
    let window: Vec<&Sent> = sent
        .iter()
        .filter(|s| s.at >= term_at && s.at < term_at + GRACE - MARGIN)
        .collect();
    let answered = window.iter().filter(|s| s.answered).count();
    eprintln!(
        "SIGTERM under load: {before} UDP queries before the signal; {} sent in the {:?} after it, \
         {answered} answered; TCP {tcp_answered}/{tcp_sent}; exit {status:?}",
        window.len(),
        GRACE - MARGIN
    );
    assert!(status.success(), "{status:?}");
    assert!(
        window.len() > 1000,
        "the load must keep going through the grace period (sent {})",
        window.len()
    );
    assert_eq!(
        answered,
        window.len(),
        "UDP queries dropped during the grace period"
    );
    assert!(tcp_sent > 50, "{tcp_sent}");
    assert_eq!(
        tcp_answered, tcp_sent,
        "TCP queries dropped during the grace period"
    );
    let log = podns.log.lock().unwrap().join("\n");
    assert!(log.contains("draining"), "{log}");
    shutdown.cancel();
}

/// Files podns holds open for writing: (fd, target) for every fd that is a
/// path (not a socket, pipe or anon inode) opened O_WRONLY or O_RDWR.
fn files_open_for_writing(pid: u32) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let fd = e.unwrap().file_name().to_string_lossy().to_string();
        let Ok(target) = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")) else {
            continue;
        };
        let target = target.to_string_lossy().to_string();
        if !target.starts_with('/') || target == "/dev/null" {
            continue;
        }
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap_or_default();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
            .unwrap_or(0);
        if flags & 0o3 != 0 {
            out.push((fd, target));
        }
    }
    out
}

fn uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// `setpriv` as user and group `nobody` (65534), when we are root and it
/// works; else why not.
fn as_nobody() -> Result<Vec<String>, String> {
    if uid() != 0 {
        return Err("not root: the chmod 0555 directory already stops our own writes".into());
    }
    let argv: Vec<String> = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--",
    ]
    .map(String::from)
    .to_vec();
    let ok = Command::new(&argv[0])
        .args(&argv[1..])
        .args(["test", "-x", PODNS_BIN])
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(argv)
    } else {
        Err(format!("setpriv missing or nobody cannot run {PODNS_BIN}"))
    }
}

async fn serve_from(ro: &Path, kc: &Path, prefix: &[String], name: &str) {
    let mut cmd = if let Some((first, rest)) = prefix.split_first() {
        let inner = serve_command(kc, &["--udp-sockets=1"]);
        let mut c = Command::new(first);
        c.args(rest).arg(inner.get_program()).args(inner.get_args());
        c
    } else {
        serve_command(kc, &["--udp-sockets=1"])
    };
    cmd.current_dir(ro);
    let podns = spawn_serve(cmd);
    wait_ready(podns.admin).await;
    wait_resolves(podns.dns, name, Duration::from_secs(30)).await;
    assert_eq!(
        files_open_for_writing(podns.pid()),
        Vec::<(String, String)>::new(),
        "podns holds files open for writing"
    );
    let log = podns.log.lock().unwrap().join("\n");
    assert!(!log.contains(" ERROR "), "{log}");
    assert_eq!(std::fs::read_dir(ro).unwrap().count(), 0, "wrote into cwd");
}

fn zonefile_from(ro: &Path, kc: &Path, prefix: &[String], host: &str) {
    let mut cmd = match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(PODNS_BIN);
            c
        }
        None => Command::new(PODNS_BIN),
    };
    let out = cmd
        .args(["zonefile", "--ns-address=127.0.0.1"])
        .arg(format!("--kubeconfig={}", kc.display()))
        .current_dir(ro)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("SOA"), "{text}");
    assert!(text.contains(host), "{text}");
    assert_eq!(std::fs::read_dir(ro).unwrap().count(), 0, "wrote into cwd");
}

/// `podns serve` and `podns zonefile` (to stdout) need no write access: run
/// from a chmod 0555 working directory, they work, write nothing there, and
/// serve holds no file open for writing. As root (where chmod stops nothing)
/// the same again as `nobody`, for whom the directory really is read-only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_and_zonefile_need_no_write_access() {
    let shutdown = CancellationToken::new();
    let sim = start_sim(&["--kubelet"], &shutdown).await;
    let client = sim.client();
    create_job(&client, "default", "ro", 4, "indexed-job").await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let kc = write_kubeconfig(dir.path(), &sim);
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let name = "ro-0.ro.default.svc";
    // The fd scan sees a file opened for writing (here, in this process).
    let probe = std::fs::File::create(dir.path().join("w")).unwrap();
    assert!(
        files_open_for_writing(std::process::id())
            .iter()
            .any(|(_, t)| t.ends_with("/w"))
    );
    drop(probe);

    serve_from(&ro, &kc, &[], name).await;
    zonefile_from(&ro, &kc, &[], "ro-0.ro.default.svc");

    match as_nobody() {
        Ok(prefix) => {
            // The directory must really refuse this user's writes.
            let touch = Command::new(&prefix[0])
                .args(&prefix[1..])
                .args(["sh", "-c", "touch probe"])
                .current_dir(&ro)
                .output()
                .unwrap();
            assert!(!touch.status.success(), "nobody can write to the 0555 dir");
            serve_from(&ro, &kc, &prefix, name).await;
            zonefile_from(&ro, &kc, &prefix, "ro-0.ro.default.svc");
            eprintln!("read-only: checked as uid {} and as nobody", uid());
        }
        Err(why) => eprintln!("read-only: not run as nobody: {why}"),
    }
    // Let the temp dir be removed.
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
    shutdown.cancel();
}

/// A Job created during a 10 s API outage answers within 3 s of the
/// outage's end: the watches resume from their resourceVersion on a short
/// backoff instead of one that grew all through the outage.
async fn job_created_during_outage_answers_soon_after(serve_flags: &[&str]) {
    const OUTAGE: Duration = Duration::from_secs(10);
    const WITHIN: Duration = Duration::from_secs(3);
    let env = env_like_binary(&["--kubelet"], serve_flags).await;
    // The simulator times the outage from when it gets this request, so
    // `end` is at or before the real end: measuring from it is strict.
    let start = Instant::now();
    sim_post(
        &env.client,
        &format!("/sim/faults/outage?seconds={}", OUTAGE.as_secs()),
        json!({}),
    )
    .await;
    let end = start + OUTAGE;
    // /sim/ is the simulator's own path, not subject to the outage.
    create_job(&env.client, "default", "outage", 4, "indexed-job").await;
    let name = "outage-3.outage.default.svc";
    wait_resolves(
        env.dns,
        name,
        (end + WITHIN).saturating_duration_since(Instant::now()),
    )
    .await;
    eprintln!(
        "outage {serve_flags:?}: {name} answered {:?} after the outage ended",
        Instant::now().saturating_duration_since(end)
    );
    // The watches came back by resuming, not by relisting.
    let metrics = admin_get(env.admin, "/metrics").await.1;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("podns_watch_restarts_total")
                && l.contains(r#"retry="resume""#)
                && !l.ends_with(" 0")),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_recovery_is_quick_with_wire_json() {
    job_created_during_outage_answers_soon_after(&["--wire", "json"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_recovery_is_quick_with_default_wire() {
    job_created_during_outage_answers_soon_after(&[]).await;
}

/// A field of /proc/PID/FILE (`Key:   value`), its value trimmed, if the
/// kernel shows it.
fn proc_field(pid: &str, file: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// `THP_enabled` from /proc/PID/status (Linux ≥ 5.0).
fn thp_enabled(pid: &str) -> Option<String> {
    proc_field(pid, "status", "THP_enabled")
}

/// `AnonHugePages` (kB) from /proc/PID/smaps_rollup (Linux ≥ 4.14).
fn anon_huge_pages_kb(pid: &str) -> Option<u64> {
    proc_field(pid, "smaps_rollup", "AnonHugePages")?
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// The binary turns transparent huge pages off for itself (mimalloc asks
/// for them, and a 2 MiB page holding one live block is resident whole:
/// benches/results/notes/2026-12-03-index-history.md), before its first
/// allocation: when `main` turned them off, the runtime's allocations
/// before it had already taken 4 MiB of huge pages. `MIMALLOC_ALLOW_THP`
/// keeps them. The flag is inherited, so the second half runs only where
/// this test's own process has them on; a kernel that does not show the
/// flag skips both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_turns_huge_pages_off_unless_told_not_to() {
    let Some(ours) = thp_enabled("self") else {
        return;
    };
    let shutdown = CancellationToken::new();
    let (_sim, _dir, kc) = sim_with_kubeconfig(&[], &shutdown).await;

    let mut cmd = serve_command(&kc, &["--udp-sockets=1"]);
    cmd.env_remove("MIMALLOC_ALLOW_THP");
    // Its listeners are logged, so `main` has run.
    let podns = spawn_serve(cmd);
    let pid = podns.pid().to_string();
    assert_eq!(thp_enabled(&pid).as_deref(), Some("0"));
    // Not one huge page, not even from the allocations made before `main`.
    if let Some(huge) = anon_huge_pages_kb(&pid) {
        assert_eq!(huge, 0, "huge pages in a server that turned them off");
    }
    drop(podns);

    if ours == "1" {
        let mut cmd = serve_command(&kc, &["--udp-sockets=1"]);
        cmd.env("MIMALLOC_ALLOW_THP", "1");
        let podns = spawn_serve(cmd);
        assert_eq!(thp_enabled(&podns.pid().to_string()).as_deref(), Some("1"));
    }
    shutdown.cancel();
}
