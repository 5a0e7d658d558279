//! Real DNS daemons from Debian (NSD, Unbound) run on loopback with their
//! own config in a tempdir, and a DNS client that falls back to TCP like a
//! resolver does. Tests skip (with a line on stderr) when a tool is missing.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;

use crate::support::{query_msg, tcp, udp, wait_for};

/// A tool on PATH or in the sbin directories (Debian puts daemons there,
/// and a non-login shell's PATH may not have them).
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A loopback port free for both UDP and TCP right now.
pub fn free_port() -> u16 {
    for _ in 0..50 {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port");
}

/// A child process killed when dropped.
pub struct Daemon {
    pub name: &'static str,
    pub child: std::process::Child,
    pub log: PathBuf,
}

impl Daemon {
    pub fn spawn(name: &'static str, cmd: &mut std::process::Command, log: &Path) -> Daemon {
        let out = std::fs::File::create(log).unwrap();
        let child = cmd
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("failed to start {name}: {e}"));
        Daemon {
            name,
            child,
            log: log.to_path_buf(),
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Poll until the daemon answers `name`/`qtype` with NOERROR over UDP;
    /// panic with its log if it exits or does not in time.
    pub async fn wait_answering(&mut self, addr: SocketAddr, name: &str, qtype: RecordType) {
        let what = format!("{} to answer {name}", self.name);
        wait_for(&what, Duration::from_secs(20), || {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{} exited with {status}:\n{}", self.name, self.log_text());
            }
            let log = self.log_text();
            async move {
                let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
                let mut q = query_msg(name, qtype, Some(1232));
                // A forwarder answers RD=0 from its cache only.
                q.metadata.recursion_desired = true;
                sock.send_to(&q.to_vec().unwrap(), addr).await.unwrap();
                let mut buf = vec![0u8; 65535];
                if let Ok(Ok((n, _))) =
                    tokio::time::timeout(Duration::from_millis(200), sock.recv_from(&mut buf)).await
                    && let Ok(m) = Message::from_vec(&buf[..n])
                    && m.metadata.response_code == ResponseCode::NoError
                    && !m.answers.is_empty()
                {
                    return Ok(());
                }
                Err(format!("no answer yet; log:\n{log}"))
            }
        })
        .await
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Ask over UDP (EDNS 1232) and again over TCP when truncated.
pub async fn ask_full(addr: SocketAddr, name: &str, qtype: RecordType) -> Message {
    let q = query_msg(name, qtype, Some(1232));
    let m = udp(addr, &q).await;
    if m.metadata.truncation {
        return tcp(addr, &q).await;
    }
    m
}

/// The answer section as sorted presentation lines (owner, TTL, type, data).
pub fn answer_lines(m: &Message) -> Vec<String> {
    let mut v: Vec<String> = m.answers.iter().map(|r| r.to_string()).collect();
    v.sort();
    v
}

/// NSD serving zone files on 127.0.0.1:`port`, configured in `dir`.
/// `zones` are (origin without the trailing dot, file name in `dir`).
pub fn nsd(nsd: &Path, dir: &Path, port: u16, zones: &[(String, String)]) -> Daemon {
    let d = dir.display();
    let mut conf = format!(
        "server:\n  ip-address: 127.0.0.1\n  port: {port}\n  do-ip6: no\n  username: \"\"\n  chroot: \"\"\n  \
         zonesdir: \"{d}\"\n  pidfile: \"{d}/nsd.pid\"\n  database: \"\"\n  zonelistfile: \"{d}/zone.list\"\n  \
         xfrdfile: \"{d}/xfrd.state\"\n  xfrdir: \"{d}\"\n  logfile: \"{d}/nsd.log\"\n  server-count: 1\n  \
         tcp-count: 64\n  verbosity: 1\n  reuseport: no\nremote-control:\n  control-enable: no\n"
    );
    for (origin, file) in zones {
        conf.push_str(&format!(
            "zone:\n  name: \"{origin}\"\n  zonefile: \"{file}\"\n"
        ));
    }
    let path = dir.join("nsd.conf");
    std::fs::write(&path, conf).unwrap();
    Daemon::spawn(
        "nsd",
        std::process::Command::new(nsd)
            .arg("-d")
            .arg("-c")
            .arg(&path),
        &dir.join("nsd.out"),
    )
}

/// Unbound on 127.0.0.1:`port`, configured in `dir`, with a stub zone for
/// `zone` pointing at `upstream`. DNSSEC validation is off (the iterator
/// module alone) and negative caching is left at its defaults, so Unbound
/// keeps an NXDOMAIN for the SOA MINIMUM podns sends (RFC 2308).
pub fn unbound(unbound: &Path, dir: &Path, port: u16, zone: &str, upstream: SocketAddr) -> Daemon {
    let d = dir.display();
    let conf = format!(
        "server:\n  interface: 127.0.0.1\n  port: {port}\n  do-ip6: no\n  do-daemonize: no\n  \
         username: \"\"\n  chroot: \"\"\n  directory: \"{d}\"\n  pidfile: \"{d}/unbound.pid\"\n  \
         use-syslog: no\n  logfile: \"\"\n  verbosity: 1\n  num-threads: 1\n  so-reuseport: no\n  \
         access-control: 127.0.0.0/8 allow\n  do-not-query-localhost: no\n  \
         module-config: \"iterator\"\n  domain-insecure: \"{zone}\"\n  qname-minimisation: no\n  \
         local-zone: \"{zone}\" nodefault\n\
         remote-control:\n  control-enable: no\n\
         stub-zone:\n  name: \"{zone}\"\n  stub-addr: {}@{}\n",
        upstream.ip(),
        upstream.port()
    );
    let path = dir.join("unbound.conf");
    std::fs::write(&path, conf).unwrap();
    Daemon::spawn(
        "unbound",
        std::process::Command::new(unbound)
            .arg("-d")
            .arg("-c")
            .arg(&path),
        &dir.join("unbound.out"),
    )
}
