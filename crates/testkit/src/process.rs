//! `podns serve` as a child process, as a user runs it: killed on drop,
//! its listeners read from its log.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A `podns serve` child process, killed on drop, with the addresses it
/// logged and its stderr lines so far.
pub struct Spawned {
    pub child: Child,
    pub dns: SocketAddr,
    pub tcp: SocketAddr,
    pub admin: SocketAddr,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Spawned {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its stderr so far, a line a line.
    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run `cmd` to its end and return its output, asserting that it exited
/// 0; the panic names it as `what` and carries its stdout and stderr.
pub fn output_ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The address after `what` in a log line (`listening dns udp 127.0.0.1:1234 …`).
pub fn addr_after(line: &str, what: &str) -> Option<SocketAddr> {
    line.split(what)
        .nth(1)?
        .split_whitespace()
        .next()?
        .trim_end_matches(',')
        .parse()
        .ok()
}

/// Run `cmd` (a `podns serve` command line, maybe behind `setpriv`) with
/// stderr piped (info, no colour); wait (up to 60 s) until it logs its
/// three listeners.
pub fn spawn_serve(mut cmd: Command) -> Spawned {
    let mut child = cmd
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn podns");
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let keep = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            keep.lock().unwrap().push(line);
        }
    });
    let (mut dns, mut tcp, mut admin) = (None, None, None);
    let deadline = Instant::now() + Duration::from_secs(60);
    while dns.is_none() || tcp.is_none() || admin.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = rx.recv_timeout(left) else {
            let _ = child.kill();
            panic!(
                "podns did not log its listeners:\n{}",
                log.lock().unwrap().join("\n")
            );
        };
        dns = dns.or(addr_after(&line, "listening dns udp "));
        tcp = tcp.or(addr_after(&line, "listening dns tcp "));
        admin = admin.or(addr_after(&line, "listening admin http "));
    }
    Spawned {
        child,
        dns: dns.unwrap(),
        tcp: tcp.unwrap(),
        admin: admin.unwrap(),
        log,
    }
}
