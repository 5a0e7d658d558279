//! Do the two encoders of an answer plan agree? A small index [`Shape`]
//! and a question [`Ask`], built into an index and query bytes; [`check`]
//! asks the wire fast path and the general (hickory-proto) path and
//! asserts that whenever the fast path answers, its reply is the general
//! path's byte for byte. The proptest in `dns::tests` draws shapes and
//! questions at random; the `encoders` fuzz target decodes them from the
//! fuzzer's bytes ([`from_bytes`]). Test-only (`testing` feature).

use hickory_proto::rr::Name;

use super::answer::{AnswerConfig, Answerer, Transport};
use super::testing::World;
use crate::index::testing::{PodExt, SvcExt, cluster_ip, headless, pod, synced_writer};
use crate::index::{
    Change, Policy, Publish, ServiceKind, SyncNeeds, Table, TargetPort, Update, Writer,
};
use crate::metrics::Metrics;

/// Namespaces, object names and app labels are drawn from these.
pub const NAMESPACES: [&str; 2] = ["ml", "web"];
pub const NAMES: [&str; 4] = ["a", "b-1", "gang", "api"];
const ZONES: [&str; 2] = ["cluster.local.", "ml.example."];

/// One pod.
#[derive(Clone, Debug)]
pub struct PodSpec {
    pub ns: u8,
    pub name: u8,
    /// The last byte of its IPv4 address (10.1.0.x), if it has one.
    pub v4: Option<u8>,
    /// The last byte of its IPv6 address (fd00::x), if it has one.
    pub v6: Option<u8>,
    /// `spec.hostname` and `spec.subdomain`, as indexes of [`NAMES`].
    pub host: Option<(u8, u8)>,
    pub app: u8,
    pub ready: bool,
    /// A container port named `p` on 8000 + n.
    pub port: Option<u8>,
}

/// One Service.
#[derive(Clone, Debug)]
pub struct SvcSpec {
    pub ns: u8,
    pub name: u8,
    /// 0 headless, 1 ClusterIP, 2 ExternalName into the zone, 3 out of it.
    pub kind: u8,
    pub app: u8,
    /// A port named `p` (true) or unnamed.
    pub named_port: Option<bool>,
    pub publish_not_ready: bool,
}

/// A small index and the answer configuration.
#[derive(Clone, Debug)]
pub struct Shape {
    pub pods: Vec<PodSpec>,
    pub services: Vec<SvcSpec>,
    /// One zone or two.
    pub two_zones: bool,
    /// Addresses of `ns.dns`: bit 0 an IPv4, bit 1 an IPv6, bit 2 a second IPv4.
    pub ns_addrs: u8,
    pub synced: bool,
    pub publish_ready: bool,
    /// A headless Service `crowd` in `ml` (named port `p`) with this many
    /// pods, hostnames `c-<i>`: sets too big for UDP, so that truncated
    /// replies are compared too.
    pub crowd: u8,
    /// The crowd's pods have an IPv6 address too.
    pub crowd_v6: bool,
}

/// A question about the shape.
#[derive(Clone, Debug)]
pub struct Ask {
    /// Which of the shape's candidate names ([`candidates`]).
    pub name: u16,
    /// 0: as is; 1: a label in front; 2: the first label dropped; 3: the
    /// first label changed.
    pub miss: u8,
    /// The second zone instead of the first, when there are two.
    pub zone: bool,
    /// Upper-case the characters whose bit is set (bit i % 64).
    pub case: u64,
    pub qtype: u16,
    /// Class IN, or another.
    pub class_in: bool,
    /// The client's OPT: payload, version, DO.
    pub edns: Option<(u16, u8, bool)>,
    pub rd: bool,
    pub cd: bool,
}

/// Types a question asks for, the common ones most often.
pub const QTYPES: [u16; 14] = [1, 1, 28, 28, 255, 33, 12, 16, 5, 6, 2, 15, 252, 99];

impl Shape {
    /// The index and the answerer over it.
    pub fn build(&self) -> World {
        let policy = Policy {
            publish: if self.publish_ready {
                Publish::Ready
            } else {
                Publish::Ip
            },
            ..Policy::default()
        };
        let mut w = if self.synced {
            synced_writer(policy)
        } else {
            let needs = SyncNeeds::one_list(false, false);
            Writer::new(Table::new(), policy, Metrics::new(), needs)
        };
        for s in &self.services {
            let (ns, name, app) = (ns(s.ns), pick(s.name), pick(s.app));
            let mut info = match s.kind % 4 {
                0 => headless(ns, name, app),
                1 => {
                    let mut c = cluster_ip(ns, name, &format!("10.96.0.{}", s.name % 4 + 1));
                    c.selector = Some(vec![("app".into(), app.into())]);
                    c
                }
                k => {
                    let target = if k == 2 {
                        format!("{app}.{}.svc.cluster.local", ns)
                    } else {
                        "example.com".to_string()
                    };
                    let mut c = cluster_ip(ns, name, "10.96.1.1");
                    c.kind = ServiceKind::ExternalName(target);
                    c.selector = None;
                    c
                }
            };
            if let Some(named) = s.named_port {
                let port_name = named.then_some("p");
                let target = if named {
                    TargetPort::Name("p".into())
                } else {
                    TargetPort::Same
                };
                info = info.port(port_name, 80, target);
            }
            if s.publish_not_ready {
                info = info.publish_not_ready();
            }
            w.apply(Update::Service(Change::Apply(info)));
        }
        for p in &self.pods {
            let v4 = p.v4.map(|x| format!("10.1.0.{x}"));
            let mut info = pod(ns(p.ns), pick(p.name), v4.as_deref().unwrap_or(""))
                .label("app", pick(p.app))
                .ready(p.ready);
            if let Some(x) = p.v6 {
                info = info.ip(&format!("fd00::{x:x}"));
            }
            if let Some((h, sub)) = p.host {
                info = info.host(pick(h), pick(sub));
            }
            if let Some(n) = p.port {
                info = info.port("p", 8000 + u16::from(n));
            }
            w.apply(Update::Pod(Change::Apply(info)));
        }
        if self.crowd > 0 {
            let svc = headless("ml", "crowd", "crowd").port(Some("p"), 80, TargetPort::Same);
            w.apply(Update::Service(Change::Apply(svc)));
        }
        for i in 0..self.crowd {
            let mut info = pod("ml", &format!("crowd-{i}"), &format!("10.3.0.{i}"))
                .label("app", "crowd")
                .host(&format!("c-{i}"), "crowd");
            if self.crowd_v6 {
                info = info.ip(&format!("fd00::3:{i:x}"));
            }
            w.apply(Update::Pod(Change::Apply(info)));
        }
        let mut zones = vec![Name::from_ascii(ZONES[0]).expect("valid zone")];
        if self.two_zones {
            zones.push(Name::from_ascii(ZONES[1]).expect("valid zone"));
        }
        let mut ns_addrs = vec![];
        if self.ns_addrs & 1 != 0 {
            ns_addrs.push("10.0.0.53".parse().expect("valid IP"));
        }
        if self.ns_addrs & 2 != 0 {
            ns_addrs.push("fd00::53".parse().expect("valid IP"));
        }
        if self.ns_addrs & 4 != 0 {
            ns_addrs.push("10.0.0.54".parse().expect("valid IP"));
        }
        let cfg = AnswerConfig {
            zones,
            ns_addrs,
            ..AnswerConfig::default()
        };
        World::over(w, cfg)
    }

    /// Names worth asking about in this shape, relative to a zone (`@`
    /// marks an absolute name: reverse or outside every zone).
    pub fn candidates(&self) -> Vec<String> {
        let mut out: Vec<String> = [
            "",
            "dns-version",
            "ns.dns",
            "dns",
            "x.ns.dns",
            "x.dns",
            "hostmaster",
            "svc",
            "pod",
            "ml.svc",
            "web.svc",
            "ml.pod",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        out.extend(
            [
                "@in-addr.arpa",
                "@ip6.arpa",
                "@0.1.10.in-addr.arpa",
                "@example.com",
                "@local",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        if self.crowd > 0 {
            out.extend(
                ["crowd.ml.svc", "_p._tcp.crowd.ml.svc", "c-0.crowd.ml.svc"].map(String::from),
            );
        }
        for s in &self.services {
            let (ns, name) = (ns(s.ns), pick(s.name));
            out.push(format!("{name}.{ns}.svc"));
            out.push(format!("_p._tcp.{name}.{ns}.svc"));
        }
        for p in &self.pods {
            let ns = ns(p.ns);
            if let Some((h, sub)) = p.host {
                out.push(format!("{}.{}.{ns}.svc", pick(h), pick(sub)));
            }
            if let Some(x) = p.v4 {
                out.push(format!("10-1-0-{x}.{ns}.pod"));
                out.push(format!("10-1-0-{x}.{}.{ns}.svc", pick(p.app)));
                out.push(format!("@{x}.0.1.10.in-addr.arpa"));
            }
            if let Some(x) = p.v6 {
                out.push(format!("fd00--{x:x}.{ns}.pod"));
                let mut nibbles = String::new();
                let ip: std::net::Ipv6Addr = format!("fd00::{x:x}").parse().expect("valid IP");
                for b in ip.octets().iter().rev() {
                    nibbles.push_str(&format!("{:x}.{:x}.", b & 0xf, b >> 4));
                }
                out.push(format!("@{nibbles}ip6.arpa"));
            }
        }
        out
    }
}

fn ns(i: u8) -> &'static str {
    NAMESPACES[usize::from(i) % NAMESPACES.len()]
}

fn pick(i: u8) -> &'static str {
    NAMES[usize::from(i) % NAMES.len()]
}

impl Ask {
    /// The question's name, absolute, without the trailing dot.
    pub fn name(&self, shape: &Shape) -> String {
        let names = shape.candidates();
        let base = &names[usize::from(self.name) % names.len()];
        let (rel, abs) = match base.strip_prefix('@') {
            Some(abs) => ("", Some(abs)),
            None => (base.as_str(), None),
        };
        let rel = match (self.miss % 4, rel) {
            (0, r) | (_, r @ "") => r.to_string(),
            (1, r) => format!("x.{r}"),
            (2, r) => r.split_once('.').map_or("", |(_, rest)| rest).to_string(),
            (_, r) => format!("{r}-"),
        };
        let name = match abs {
            Some(abs) => abs.to_string(),
            None => {
                let zone = if self.zone && shape.two_zones {
                    ZONES[1]
                } else {
                    ZONES[0]
                };
                let zone = zone.trim_end_matches('.');
                if rel.is_empty() {
                    zone.to_string()
                } else {
                    format!("{rel}.{zone}")
                }
            }
        };
        name.chars()
            .enumerate()
            .map(|(i, c)| {
                if self.case >> (i % 64) & 1 == 1 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect()
    }

    /// The query as a client sends it.
    pub fn bytes(&self, shape: &Shape) -> Vec<u8> {
        let mut b = vec![0x12, 0x34];
        b.push(u8::from(self.rd));
        b.push(if self.cd { 0x10 } else { 0 });
        b.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, u8::from(self.edns.is_some())]);
        for label in self.name(shape).split('.').filter(|l| !l.is_empty()) {
            b.push(label.len() as u8);
            b.extend_from_slice(label.as_bytes());
        }
        b.push(0);
        b.extend_from_slice(&self.qtype.to_be_bytes());
        b.extend_from_slice(&(if self.class_in { 1u16 } else { 3 }).to_be_bytes());
        if let Some((payload, version, dnssec_ok)) = self.edns {
            b.extend_from_slice(&[0, 0, 41]);
            b.extend_from_slice(&payload.to_be_bytes());
            b.extend_from_slice(&[0, version, if dnssec_ok { 0x80 } else { 0 }, 0, 0, 0]);
        }
        b
    }
}

/// Ask over UDP and TCP; whenever the fast path answers, its reply must
/// be the general path's, byte for byte, and so must what the server
/// sends (`handle_into`, which also hands plans from the fast reader to
/// the general encoder). Returns how often the fast path answered.
pub fn check(answerer: &Answerer, query: &[u8]) -> usize {
    let mut taken = 0;
    for transport in [Transport::Udp, Transport::Tcp] {
        let general = answerer.handle_general(query, transport);
        let mut into = Vec::new();
        let sent = answerer
            .handle_into(query, transport, &mut into)
            .map(|meta| (into, meta.rcode, meta.qtype, meta.truncated));
        let expected = general
            .as_ref()
            .map(|g| (g.bytes.clone(), g.rcode, g.qtype, g.truncated));
        assert_eq!(sent, expected, "{query:02x?} over {transport:?}");
        let mut out = Vec::new();
        let Some(meta) = answerer.handle_fast(query, transport, &mut out) else {
            continue;
        };
        taken += 1;
        let general =
            general.unwrap_or_else(|| panic!("fast answered, general did not: {query:02x?}"));
        assert_eq!(
            out, general.bytes,
            "fast and general replies differ for {query:02x?} over {transport:?}"
        );
        assert_eq!(
            (meta.rcode, meta.qtype, meta.truncated),
            (general.rcode, general.qtype, general.truncated),
            "{query:02x?} over {transport:?}"
        );
    }
    taken
}

/// A shape and questions decoded from arbitrary bytes, for the fuzzer:
/// each field takes the next byte (0 once the bytes run out).
pub fn from_bytes(data: &[u8]) -> (Shape, Vec<Ask>) {
    let mut it = data.iter().copied();
    let mut next = move || it.next().unwrap_or(0);
    let flags = next();
    let n_pods = next() % 12;
    let n_svcs_byte = next();
    let n_svcs = n_svcs_byte % 5;
    let pods = (0..n_pods)
        .map(|_| {
            let bits = next();
            PodSpec {
                ns: bits & 1,
                name: next(),
                v4: (bits & 2 == 0).then(|| next() % 8),
                v6: (bits & 4 != 0).then(|| next() % 8),
                host: (bits & 8 != 0).then(|| (next(), next())),
                app: next(),
                ready: bits & 16 == 0,
                port: (bits & 32 != 0).then(|| next() % 2),
            }
        })
        .collect();
    let services = (0..n_svcs)
        .map(|_| {
            let bits = next();
            SvcSpec {
                ns: bits & 1,
                name: next(),
                kind: bits >> 1,
                app: next(),
                named_port: (bits & 8 != 0).then_some(bits & 16 != 0),
                publish_not_ready: bits & 32 != 0,
            }
        })
        .collect();
    let shape = Shape {
        pods,
        services,
        two_zones: flags & 1 != 0,
        ns_addrs: (flags >> 1) & 7,
        synced: flags & 16 == 0,
        publish_ready: flags & 32 != 0,
        crowd: [0, 30, 80, 150][usize::from(flags >> 6)],
        crowd_v6: n_svcs_byte & 0x80 != 0,
    };
    let mut asks = Vec::new();
    for _ in 0..8 {
        let bits = next();
        let qsel = next();
        let qtype = if usize::from(qsel) < QTYPES.len() * 16 {
            QTYPES[usize::from(qsel) % QTYPES.len()]
        } else {
            u16::from(next())
        };
        let edns = (bits & 1 != 0).then(|| {
            let payload = u16::from_be_bytes([next(), next()]);
            let version = if bits & 2 != 0 { next() } else { 0 };
            (payload, version, bits & 4 != 0)
        });
        let case = u64::from(next()) * if bits & 8 != 0 { 0x0101_0101 } else { 0 };
        asks.push(Ask {
            name: u16::from(next()),
            miss: next(),
            zone: bits & 16 != 0,
            case,
            qtype,
            class_in: bits & 32 == 0 || next() != 0,
            edns,
            rd: bits & 64 != 0,
            cd: bits & 128 != 0,
        });
    }
    (shape, asks)
}
