//! `podns wait`: block until every rank of a Job or JobSet is published (or
//! Ready), asking only DNS, so a training pod's init container or launcher
//! needs no RBAC. It reads the rank view's gang summary,
//! `<job>.<ns>.rank.<zone>` TXT = `world=W published=P ready=R generation=G`.
//!
//! NXDOMAIN/NODATA (the Job is not seen yet) and SERVFAIL (podns has not
//! finished its first list) mean "keep asking": an init container that
//! starts before the Job object is watched must not fail. Polls back off to
//! about one a second; each query goes over UDP with its own timeout and is
//! repeated over TCP when the answer is truncated (TC=1). A line on stderr
//! every few seconds says how far the gang is, and one at the end how long
//! it took.
//!
//! What cannot get better by waiting fails early: every server answers
//! REFUSED, or a negative answer without the zone's SOA, under another
//! zone's or none (it does not serve `--zone`: exit 64); no server answers
//! at all in the first seconds (exit 1).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use podns_server::admin::explain::rcode_name;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::Instant;

/// First pause between polls; doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// Polls settle at about one a second: one small UDP query per waiting pod.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// How often a waiter that is still waiting says how far it is.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// No answer from any server for this long (and three query timeouts) from
/// the start: give up rather than wait out `--timeout` against a wrong
/// address.
const FIRST_ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// What `podns wait` waits for, where it asks, and for how long.
#[derive(Clone, Debug)]
pub struct WaitConfig {
    /// Job or JobSet name.
    pub job: String,
    pub namespace: String,
    /// Wait for Ready ranks instead of published ones.
    pub ready: bool,
    pub timeout: Duration,
    /// Nameservers, asked in order until one answers.
    pub servers: Vec<SocketAddr>,
    /// Cluster zone, fully qualified (`cluster.local.`).
    pub zone: Name,
    /// How long one query (UDP, then TCP if truncated) may take.
    pub query_timeout: Duration,
}

/// The rank view's TXT gang summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    pub world: u64,
    pub published: u64,
    pub ready: u64,
    pub generation: u64,
}

impl FromStr for Summary {
    type Err = String;
    /// `world=W published=P ready=R generation=G`; unknown keys are ignored,
    /// so the record may grow.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (mut world, mut published, mut ready, mut generation) = (None, None, None, None);
        for kv in s.split_whitespace() {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let slot = match k {
                "world" => &mut world,
                "published" => &mut published,
                "ready" => &mut ready,
                "generation" => &mut generation,
                _ => continue,
            };
            *slot = Some(v.parse::<u64>().map_err(|_| format!("bad {k} in {s:?}"))?);
        }
        match (world, published, ready, generation) {
            (Some(world), Some(published), Some(ready), Some(generation)) => Ok(Summary {
                world,
                published,
                ready,
                generation,
            }),
            _ => Err(format!("not a rank summary: {s:?}")),
        }
    }
}

/// What the last poll saw, kept for the progress and timeout lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Nothing yet (no poll finished).
    Nothing,
    Summary(Summary),
    /// NXDOMAIN or NODATA: the Job is not (yet) in podns' index.
    NoRecord {
        rcode: ResponseCode,
        /// Who said so.
        server: SocketAddr,
        /// The owner of the SOA in the authority section, if any: a
        /// server for the zone gives the zone's own.
        soa: Option<Name>,
    },
    /// SERVFAIL: podns has not finished its first list.
    NotSynced(SocketAddr),
    /// No usable answer from any server: what each one did.
    NoAnswer {
        /// Servers that answered with a refusal (REFUSED, NOTIMP, ...).
        refused: Vec<(SocketAddr, ResponseCode)>,
        /// Servers that did not answer (timeout, I/O error) or answered
        /// nonsense.
        failed: Vec<(SocketAddr, String)>,
    },
}

impl Seen {
    /// Did some server answer the question (whatever it said)?
    fn answered(&self) -> bool {
        match self {
            Seen::Nothing => false,
            Seen::NoAnswer { refused, .. } => !refused.is_empty(),
            _ => true,
        }
    }

    /// Why there is no summary, for the progress and timeout lines.
    fn why(&self, asked: &str, what: &str) -> String {
        match self {
            Seen::Nothing => format!("no answer about {what} yet"),
            Seen::Summary(_) => String::new(),
            Seen::NoRecord {
                rcode: ResponseCode::NXDomain,
                server,
                ..
            } => format!(
                "{server} answered NXDOMAIN for {asked} (no Job or JobSet {what} seen there)"
            ),
            Seen::NoRecord { server, .. } => format!(
                "{server} answered NODATA for {asked} (the name exists but has no rank summary)"
            ),
            Seen::NotSynced(server) => format!(
                "{server} answered SERVFAIL for {asked} (podns has not finished its first list)"
            ),
            Seen::NoAnswer { refused, failed } => refused
                .iter()
                .map(|(server, rc)| format!("{server} answered {}", rcode_name(*rc)))
                .chain(failed.iter().map(|(server, e)| format!("{server}: {e}")))
                .collect::<Vec<_>>()
                .join("; "),
        }
    }
}

/// Why `podns wait` did not succeed.
#[derive(Debug)]
pub enum WaitError {
    /// Bad input (names, no nameserver, a server that does not serve the
    /// zone): exit 64.
    Config(String),
    /// No server answered at all in the first seconds: exit 1.
    Unreachable { after: Duration, why: String },
    /// The deadline passed: exit 1.
    TimedOut {
        after: Duration,
        what: String,
        /// The name asked, `<job>.<ns>.rank.<zone>. TXT`.
        asked: String,
        ready: bool,
        /// Boxed: a `Seen` with a name in it is large, and errors travel.
        seen: Box<Seen>,
    },
}

impl std::error::Error for WaitError {}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitError::Config(s) => write!(f, "podns wait: {s}"),
            WaitError::Unreachable { after, why } => write!(
                f,
                "podns wait: no DNS server answered in {}: {why} (pass --server with podns' or the cluster DNS's IP:PORT)",
                human(*after)
            ),
            WaitError::TimedOut {
                after,
                what,
                asked,
                ready,
                seen,
            } => {
                write!(f, "podns wait: timed out after {}: ", human(*after))?;
                let state = if *ready { "Ready" } else { "published" };
                match seen.as_ref() {
                    Seen::Summary(s) => {
                        let have = if *ready { s.ready } else { s.published };
                        let missing = s.world.saturating_sub(have);
                        write!(
                            f,
                            "{missing} of {} ranks of {what} not {state} (generation {})",
                            s.world, s.generation
                        )
                    }
                    Seen::NoRecord { .. } => {
                        write!(f, "0 ranks of {what} {state}: {}", seen.why(asked, what))
                    }
                    Seen::NotSynced(_) | Seen::NoAnswer { .. } => write!(
                        f,
                        "0 ranks of {what} known {state}: {}",
                        seen.why(asked, what)
                    ),
                    Seen::Nothing => write!(f, "{}", seen.why(asked, what)),
                }
            }
        }
    }
}

impl WaitError {
    /// The process exit code: 64 (EX_USAGE) for bad input, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            WaitError::Config(_) => 64,
            WaitError::Unreachable { .. } | WaitError::TimedOut { .. } => 1,
        }
    }
}

/// `5m`, `90s`, `1500ms`, `1h`: the way the timeout was most likely written.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) || ms == 0 {
        format!("{ms}ms")
    } else {
        let s = d.as_secs();
        if s.is_multiple_of(3600) {
            format!("{}h", s / 3600)
        } else if s.is_multiple_of(60) {
            format!("{}m", s / 60)
        } else {
            format!("{s}s")
        }
    }
}

/// A duration written as `500ms`, `30s`, `5m`, `1h` or bare seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeout(pub Duration);

impl FromStr for Timeout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("invalid duration {s:?} (examples: 500ms, 30s, 5m, 1h)");
        let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
            Some(i) => s.split_at(i),
            None => (s, "s"),
        };
        let n: u64 = num.parse().map_err(|_| bad())?;
        let ms = match unit {
            "ms" => n,
            "s" => n.checked_mul(1000).ok_or_else(bad)?,
            "m" => n.checked_mul(60_000).ok_or_else(bad)?,
            "h" => n.checked_mul(3_600_000).ok_or_else(bad)?,
            _ => return Err(bad()),
        };
        Ok(Timeout(Duration::from_millis(ms)))
    }
}

/// A nameserver address: `IP`, `IP:PORT` or `[IPv6]:PORT` (port 53 when
/// left out).
pub fn parse_server(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    s.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .map_err(|_| format!("invalid server {s:?} (examples: 10.96.0.10, 127.0.0.1:1053)"))
}

/// The `nameserver` lines of a resolv.conf (resolv.conf(5)), port 53.
/// Scoped IPv6 addresses (`fe80::1%eth0`) are skipped: a training pod's
/// cluster DNS is never link-local.
pub fn resolv_conf_servers(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|l| {
            let l = l.split(['#', ';']).next().unwrap_or("");
            let mut words = l.split_whitespace();
            (words.next() == Some("nameserver"))
                .then(|| words.next())
                .flatten()
                .and_then(|a| a.parse::<IpAddr>().ok())
                .map(|ip| SocketAddr::new(ip, 53))
        })
        .collect()
}

/// The TXT name of a gang summary: `<job>.<ns>.rank.<zone>`.
pub fn summary_name(job: &str, namespace: &str, zone: &Name) -> Result<Name, WaitError> {
    let rel = Name::from_ascii(podns_server::index::names::gang_name(job, namespace))
        .map_err(|e| WaitError::Config(format!("invalid job or namespace name: {e}")))?;
    rel.append_domain(zone)
        .map_err(|e| WaitError::Config(format!("invalid name: {e}")))
}

/// Wait. `notice` gets the lines said on the way: a gang restart (a new
/// generation) and, every [`PROGRESS_EVERY`], how far the gang is.
pub async fn run(cfg: &WaitConfig, mut notice: impl FnMut(String)) -> Result<Summary, WaitError> {
    if cfg.servers.is_empty() {
        return Err(WaitError::Config(
            "no nameserver to ask (none in /etc/resolv.conf); pass --server".into(),
        ));
    }
    let name = summary_name(&cfg.job, &cfg.namespace, &cfg.zone)?;
    let what = format!("{}/{}", cfg.namespace, cfg.job);
    let asked = format!("{name} TXT");
    let state = if cfg.ready { "Ready" } else { "published" };
    let started = Instant::now();
    let deadline = started + cfg.timeout;
    let first_answer_within = FIRST_ANSWER_WITHIN.max(cfg.query_timeout * 3);
    let mut next_progress = started + PROGRESS_EVERY;
    let mut answered = false;
    let mut seen = Seen::Nothing;
    let mut generation: Option<u64> = None;
    let mut backoff = FIRST_BACKOFF;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            let per_query = cfg.query_timeout.min(left);
            seen = poll(&cfg.servers, &name, per_query).await;
            tracing::debug!(%name, ?seen, "rank summary");
            answered |= seen.answered();
            if let Some(e) = wrong_server(&seen, &cfg.zone, &asked) {
                return Err(e);
            }
            if !answered && started.elapsed() >= first_answer_within {
                return Err(WaitError::Unreachable {
                    after: Duration::from_secs(started.elapsed().as_secs()),
                    why: seen.why(&asked, &what),
                });
            }
            if let Seen::Summary(s) = &seen {
                if let Some(g) = generation
                    && g != s.generation
                {
                    notice(format!(
                        "podns wait: {what} restarted: generation {g} → {}, waiting for its {} ranks",
                        s.generation, s.world
                    ));
                }
                generation = Some(s.generation);
                let have = if cfg.ready { s.ready } else { s.published };
                // world 0: the Job exists but says nothing about its size
                // yet; that is no gang to release.
                if s.world > 0 && have >= s.world {
                    return Ok(*s);
                }
            }
        }
        let now = Instant::now();
        let left = deadline.saturating_duration_since(now);
        if left.is_zero() {
            return Err(WaitError::TimedOut {
                after: cfg.timeout,
                what,
                asked,
                ready: cfg.ready,
                seen: Box::new(seen),
            });
        }
        if now >= next_progress {
            let so_far = match &seen {
                Seen::Summary(s) => format!(
                    "{} of {} ranks of {what} {state} (generation {})",
                    if cfg.ready { s.ready } else { s.published },
                    s.world,
                    s.generation
                ),
                other => format!(
                    "0 ranks of {what} known {state}: {}",
                    other.why(&asked, &what)
                ),
            };
            notice(format!("podns wait: {so_far}; {} left", human_left(left)));
            next_progress = now + PROGRESS_EVERY;
        }
        tokio::time::sleep(backoff.min(left)).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// The line said when the wait is over: how many ranks, how long it took.
pub fn done_line(cfg: &WaitConfig, s: &Summary, took: Duration) -> String {
    let (have, state) = if cfg.ready {
        (s.ready, "Ready")
    } else {
        (s.published, "published")
    };
    format!(
        "podns wait: {have} of {} ranks of {}/{} {state} after {:.1}s (generation {})",
        s.world,
        cfg.namespace,
        cfg.job,
        took.as_secs_f64(),
        s.generation
    )
}

/// Answers that no amount of waiting changes: every server refuses the
/// name, or gives a negative answer (NXDOMAIN, NODATA) that did not come
/// from the zone. Either way it does not serve `zone`: a wrong `--server`
/// (the host's resolver, not the cluster's) or a wrong `--zone`.
///
/// "From the zone" is the zone's SOA in Authority: RFC 2308 §3 has a
/// server of the zone put it there, and §5 has a cache that answers from a
/// stored negative answer send it too, so podns, CoreDNS forwarding the
/// zone to podns, NodeLocal DNSCache and a node instance all give it. The
/// AA bit is no test: a recursive resolver's cache clears it, and
/// CoreDNS's `cache` sets it on whatever it answers from. The host's
/// resolver gives the root's SOA (the Internet has no `cluster.local`) or
/// none at all.
fn wrong_server(seen: &Seen, zone: &Name, asked: &str) -> Option<WaitError> {
    let hint = "(check --zone, default cluster.local, and --server)";
    match seen {
        Seen::NoAnswer { refused, failed } if failed.is_empty() && !refused.is_empty() => {
            let said = refused
                .iter()
                .map(|(server, rc)| format!("{server} answered {}", rcode_name(*rc)))
                .collect::<Vec<_>>()
                .join(", ");
            Some(WaitError::Config(format!(
                "{said} for {asked}: no server asked serves zone {zone} {hint}"
            )))
        }
        Seen::NoRecord {
            rcode,
            server,
            soa: Some(soa),
        } if !zone.zone_of(soa) => Some(WaitError::Config(format!(
            "{server} answered {} for {asked} under the SOA of {soa}: it does not serve zone {zone} {hint}",
            negative(*rcode)
        ))),
        Seen::NoRecord {
            rcode,
            server,
            soa: None,
        } => Some(WaitError::Config(format!(
            "{server} answered {} for {asked} with no SOA: it does not serve zone {zone} {hint}",
            negative(*rcode)
        ))),
        _ => None,
    }
}

/// A negative answer's name as `why` says it: NXDOMAIN, or NODATA for an
/// empty NOERROR.
fn negative(rcode: ResponseCode) -> &'static str {
    match rcode {
        ResponseCode::NXDomain => "NXDOMAIN",
        _ => "NODATA",
    }
}

/// Whole seconds left, written as the timeout is (`9m55s` → `595s`).
fn human_left(d: Duration) -> String {
    human(Duration::from_secs(d.as_secs().max(1)))
}

/// Ask each server in turn until one gives an authoritative-looking answer.
async fn poll(servers: &[SocketAddr], name: &Name, limit: Duration) -> Seen {
    let mut refused = Vec::new();
    let mut failed = Vec::new();
    for &server in servers {
        match query(server, name, limit).await {
            Ok(m) => match m.metadata.response_code {
                rcode @ (ResponseCode::NoError | ResponseCode::NXDomain) => {
                    let text = m.answers.iter().find_map(|r| match &r.data {
                        RData::TXT(t) => Some(
                            t.txt_data
                                .iter()
                                .map(|s| String::from_utf8_lossy(s))
                                .collect::<String>(),
                        ),
                        _ => None,
                    });
                    match text.map(|t| t.parse::<Summary>()) {
                        Some(Ok(s)) => return Seen::Summary(s),
                        Some(Err(e)) => failed.push((server, e)),
                        None => {
                            let soa = m
                                .authorities
                                .iter()
                                .find(|r| r.record_type() == RecordType::SOA)
                                .map(|r| r.name.clone());
                            return Seen::NoRecord { rcode, server, soa };
                        }
                    }
                }
                ResponseCode::ServFail => return Seen::NotSynced(server),
                // REFUSED and the rest: this server does not serve the zone;
                // the next one may.
                rc => refused.push((server, rc)),
            },
            Err(e) => failed.push((server, format!("no answer: {e}"))),
        }
    }
    Seen::NoAnswer { refused, failed }
}

fn next_id() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    // Not a security boundary (podns is asked for public summaries), but
    // vary the id so a late answer to an old poll is not taken for this one.
    static N: AtomicU16 = AtomicU16::new(0);
    let seed = std::process::id() as u16;
    seed.wrapping_add(N.fetch_add(1, Ordering::Relaxed).wrapping_mul(40503))
}

/// One query: UDP, then TCP when the answer is truncated.
async fn query(server: SocketAddr, name: &Name, limit: Duration) -> Result<Message, String> {
    let deadline = Instant::now() + limit;
    let mut msg = Message::new(next_id(), MessageType::Query, OpCode::Query);
    // RD=1: the resolv.conf server may be a forwarder (CoreDNS, NodeLocal
    // DNSCache) that passes the zone on to podns.
    msg.metadata.recursion_desired = true;
    msg.add_query(Query::query(name.clone(), RecordType::TXT));
    let mut edns = Edns::new();
    edns.set_max_payload(1232);
    msg.set_edns(edns);
    let bytes = msg.to_vec().map_err(|e| e.to_string())?;
    let id = msg.metadata.id;

    let answer = tokio::time::timeout_at(deadline, udp(server, &bytes, id, name))
        .await
        .map_err(|_| format!("timed out after {}", human(limit)))??;
    if !answer.metadata.truncation {
        return Ok(answer);
    }
    tokio::time::timeout_at(deadline, tcp(server, &bytes, id, name))
        .await
        .map_err(|_| format!("timed out over TCP after {}", human(limit)))?
}

fn matches(m: &Message, id: u16, name: &Name) -> bool {
    m.metadata.id == id
        && m.metadata.message_type == MessageType::Response
        && m.queries
            .first()
            // Name equality ignores case (0x20 randomisation may echo any case).
            .is_some_and(|q| q.name() == name)
}

async fn udp(server: SocketAddr, bytes: &[u8], id: u16, name: &Name) -> Result<Message, String> {
    let local: SocketAddr = match server {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let sock = UdpSocket::bind(local).await.map_err(|e| e.to_string())?;
    sock.connect(server).await.map_err(|e| e.to_string())?;
    sock.send(bytes).await.map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 65535];
    loop {
        let n = sock.recv(&mut buf).await.map_err(|e| e.to_string())?;
        // Anything that is not the answer to this question is ignored,
        // not trusted: wait for the real one until the deadline.
        if let Ok(m) = Message::from_vec(&buf[..n])
            && matches(&m, id, name)
        {
            return Ok(m);
        }
    }
}

async fn tcp(server: SocketAddr, bytes: &[u8], id: u16, name: &Name) -> Result<Message, String> {
    let mut s = TcpStream::connect(server)
        .await
        .map_err(|e| e.to_string())?;
    let len = u16::try_from(bytes.len()).map_err(|_| "query too long".to_string())?;
    let mut framed = Vec::with_capacity(bytes.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(bytes);
    s.write_all(&framed).await.map_err(|e| e.to_string())?;
    let mut len = [0u8; 2];
    s.read_exact(&mut len).await.map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
    let m = Message::from_vec(&buf).map_err(|e| e.to_string())?;
    if matches(&m, id, name) {
        Ok(m)
    } else {
        Err("TCP answer does not match the question".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wait for `j` in `ns` of cluster.local, asking only `addr`.
    fn config(addr: SocketAddr, timeout: Duration) -> WaitConfig {
        WaitConfig {
            job: "j".into(),
            namespace: "ns".into(),
            ready: false,
            timeout,
            servers: vec![addr],
            zone: Name::from_ascii("cluster.local.").unwrap(),
            query_timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn summary_parses_and_ignores_new_keys() {
        let s: Summary = "world=4 published=3 ready=1 generation=2 extra=x"
            .parse()
            .unwrap();
        assert_eq!(
            s,
            Summary {
                world: 4,
                published: 3,
                ready: 1,
                generation: 2
            }
        );
        assert!("world=4".parse::<Summary>().is_err());
    }

    #[test]
    fn timeouts_parse_and_print_as_written() {
        for (s, d) in [
            ("5m", 300_000),
            ("90s", 90_000),
            ("1500ms", 1500),
            ("1h", 3_600_000),
            ("7", 7000),
        ] {
            let t: Timeout = s.parse().unwrap();
            assert_eq!(t.0, Duration::from_millis(d), "{s}");
        }
        assert_eq!(human(Duration::from_secs(300)), "5m");
        assert_eq!(human(Duration::from_secs(90)), "90s");
        assert_eq!(human(Duration::from_millis(1500)), "1500ms");
        assert!("5x".parse::<Timeout>().is_err());
        assert!("".parse::<Timeout>().is_err());
    }

    #[test]
    fn resolv_conf_nameservers() {
        let text = "# generated\nsearch ml.svc.cluster.local svc.cluster.local\n\
                    nameserver 169.254.20.11\nnameserver 10.96.0.10 # kube-dns\n\
                    nameserver fd00::a\nnameserver fe80::1%eth0\noptions ndots:5\n";
        let v = resolv_conf_servers(text);
        assert_eq!(
            v,
            vec![
                "169.254.20.11:53".parse().unwrap(),
                "10.96.0.10:53".parse().unwrap(),
                "[fd00::a]:53".parse().unwrap(),
            ]
        );
    }

    /// A fake server: UDP answers TC=1 with no records, TCP carries the
    /// summary. The waiter must retry over TCP and succeed.
    #[tokio::test]
    async fn truncated_udp_answers_are_asked_again_over_tcp() {
        use hickory_proto::rr::Record;
        use hickory_proto::rr::rdata::TXT;
        let tcp_l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp_l.local_addr().unwrap();
        let udp_s = UdpSocket::bind(addr).await.unwrap();
        let answer = |q: &Message, tc: bool| {
            let mut r = Message::new(q.metadata.id, MessageType::Response, OpCode::Query);
            r.metadata.truncation = tc;
            r.add_query(q.queries[0].clone());
            if !tc {
                r.add_answer(Record::from_rdata(
                    q.queries[0].name().clone(),
                    5,
                    RData::TXT(TXT::new(vec![
                        "world=2 published=2 ready=0 generation=0".into(),
                    ])),
                ));
            }
            r.to_vec().unwrap()
        };
        tokio::spawn(async move {
            let mut buf = vec![0u8; 2048];
            loop {
                let (n, peer) = udp_s.recv_from(&mut buf).await.unwrap();
                let q = Message::from_vec(&buf[..n]).unwrap();
                udp_s.send_to(&answer(&q, true), peer).await.unwrap();
            }
        });
        tokio::spawn(async move {
            loop {
                let (mut s, _) = tcp_l.accept().await.unwrap();
                let mut len = [0u8; 2];
                s.read_exact(&mut len).await.unwrap();
                let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
                s.read_exact(&mut buf).await.unwrap();
                let out = answer(&Message::from_vec(&buf).unwrap(), false);
                s.write_all(&(out.len() as u16).to_be_bytes())
                    .await
                    .unwrap();
                s.write_all(&out).await.unwrap();
            }
        });
        let cfg = config(addr, Duration::from_secs(20));
        let s = run(&cfg, |l| panic!("unexpected notice {l}"))
            .await
            .unwrap();
        assert_eq!(s.published, 2);
    }

    /// A server that answers every question with `rcode`, no records and,
    /// in Authority, the SOA of `soa` if any; AA=0, as a recursive
    /// resolver answers from its cache.
    async fn negative_server(rcode: ResponseCode, soa: Option<&str>) -> SocketAddr {
        use hickory_proto::rr::Record;
        use hickory_proto::rr::rdata::SOA;
        let soa = soa.map(|s| Name::from_ascii(s).unwrap());
        let udp_s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = udp_s.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 2048];
            loop {
                let (n, peer) = udp_s.recv_from(&mut buf).await.unwrap();
                let q = Message::from_vec(&buf[..n]).unwrap();
                let mut r = Message::new(q.metadata.id, MessageType::Response, OpCode::Query);
                r.metadata.response_code = rcode;
                r.add_query(q.queries[0].clone());
                if let Some(owner) = &soa {
                    let rdata = SOA::new(owner.clone(), owner.clone(), 1, 1800, 900, 604800, 60);
                    r.add_authority(Record::from_rdata(owner.clone(), 60, RData::SOA(rdata)));
                }
                udp_s.send_to(&r.to_vec().unwrap(), peer).await.unwrap();
            }
        });
        addr
    }

    /// The host's resolver, asked for a cluster name, answers NXDOMAIN
    /// under the root's SOA, or with no SOA at all: it does not serve the
    /// zone, and waiting will not change that.
    #[tokio::test]
    async fn negative_answers_from_outside_the_zone_fail_at_once() {
        let hint = "it does not serve zone cluster.local. (check --zone, default cluster.local, and --server)";
        for (rcode, soa, said) in [
            (
                ResponseCode::NXDomain,
                Some("."),
                "NXDOMAIN for j.ns.rank.cluster.local. TXT under the SOA of .",
            ),
            (
                ResponseCode::NXDomain,
                None,
                "NXDOMAIN for j.ns.rank.cluster.local. TXT with no SOA",
            ),
            (
                ResponseCode::NoError,
                None,
                "NODATA for j.ns.rank.cluster.local. TXT with no SOA",
            ),
            (
                ResponseCode::NXDomain,
                Some("example.org."),
                "NXDOMAIN for j.ns.rank.cluster.local. TXT under the SOA of example.org.",
            ),
        ] {
            let addr = negative_server(rcode, soa).await;
            let cfg = config(addr, Duration::from_secs(600));
            let e = run(&cfg, |l| panic!("unexpected notice {l}"))
                .await
                .unwrap_err();
            assert_eq!(e.exit_code(), 64, "{e}");
            assert_eq!(
                e.to_string(),
                format!("podns wait: {addr} answered {said}: {hint}")
            );
        }
    }

    /// NXDOMAIN under the zone's SOA (or a name below it) is the zone
    /// saying "not yet": keep asking until the timeout, even without AA
    /// (a resolver's cache in between clears it).
    #[tokio::test]
    async fn negative_answers_from_the_zone_keep_waiting() {
        for soa in ["cluster.local.", "CLUSTER.local.", "rank.cluster.local."] {
            let addr = negative_server(ResponseCode::NXDomain, Some(soa)).await;
            let cfg = config(addr, Duration::from_millis(600));
            let e = run(&cfg, |l| panic!("unexpected notice {l}"))
                .await
                .unwrap_err();
            assert_eq!(e.exit_code(), 1, "{soa}: {e}");
            assert!(
                matches!(&e, WaitError::TimedOut { seen, .. } if matches!(**seen, Seen::NoRecord { .. })),
                "{soa}: {e}"
            );
        }
    }

    #[test]
    fn timeout_line_names_the_count() {
        let e = WaitError::TimedOut {
            after: Duration::from_secs(300),
            what: "ml/bert-finetune".into(),
            asked: "bert-finetune.ml.rank.cluster.local. TXT".into(),
            ready: false,
            seen: Box::new(Seen::Summary(Summary {
                world: 64,
                published: 61,
                ready: 0,
                generation: 2,
            })),
        };
        assert_eq!(
            e.to_string(),
            "podns wait: timed out after 5m: 3 of 64 ranks of ml/bert-finetune not published (generation 2)"
        );
    }
}
