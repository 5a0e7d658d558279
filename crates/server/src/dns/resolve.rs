//! The record rules, once: a pure function from (index, question, config)
//! to an answer [`Plan`] — rcode, AA and TC, the answer RRsets, the SOA in
//! Authority, the glue in Additional — as plain data, with no bytes.
//!
//! Every record rule (the Kubernetes DNS-Based Service Discovery
//! specification, <https://github.com/kubernetes/dns/blob/master/docs/specification.md>,
//! as podns applies it; ARCHITECTURE.md lists them) is decided here and
//! only here, on names read through the one grammar of
//! [`crate::index::names`] (which zone a name falls in, what kind of name
//! it is): the reserved names (`dns-version`, `ns.dns`, `dns`), the SOA
//! (names, timers, serial, TTL), NXDOMAIN vs NODATA, CNAME chasing,
//! minimal ANY, SRV weights and glue, PTR targets, the reverse zones, the
//! EDNS rules, the UDP payload clamp and how a reply too big for it is
//! cut ([`Plan::cut`]: the encoders measure, the plan decides). The encoders only write what a plan says:
//! [`super::fast`] straight into bytes for the shapes it knows (and hands
//! the rest over), [`super::answer`] through hickory-proto for every plan,
//! and [`crate::zonefile`] as zone text. So the two wire encoders cannot
//! disagree on a rule, only on bytes, and `dns::tests` (a proptest) and the
//! `encoders` fuzz target compare those bytes.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::op::{OpCode, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RecordType};
use smallvec::SmallVec;

use crate::index::names::{self, Holder, Place, QName};
use crate::index::{Lookup, Rrs, Scope, Table};

/// The largest UDP payload podns sends, whatever the client offers: the
/// DNS Flag Day 2020 value, which avoids IP fragmentation.
pub const MAX_UDP_PAYLOAD: u16 = 1232;

/// The schema version of the Kubernetes DNS specification served at
/// `dns-version.<zone>` (spec §2.2).
pub const DNS_SCHEMA_VERSION: &str = "1.1.0";

/// SOA REFRESH, RETRY and EXPIRE (RFC 1035 §3.3.13). Nobody transfers
/// from podns; these are the usual values, the same in answers and in the
/// zone text `podns zonefile` writes.
pub const SOA_TIMERS: [u32; 3] = [7200, 1800, 86400];

/// How deep an in-zone CNAME chain is followed.
const MAX_CNAME_CHAIN: usize = 8;

/// The bytes podns's OPT record takes: the root, type, class (the payload
/// size), TTL (extended rcode, version, flags), an empty rdata.
pub const OPT_LEN: usize = 11;

/// The fewest bytes a record can take: an owner of one byte (the root)
/// or a pointer of two, and type, class, TTL and rdata length.
pub const MIN_RECORD_LEN: usize = 11;

#[derive(Clone, Debug)]
pub struct AnswerConfig {
    /// Served zones, lower case, fully qualified; the first one is where PTR
    /// targets and the reverse zones' SOA point.
    pub zones: Vec<Name>,
    pub ttl: u32,
    pub negative_ttl: u32,
    /// Addresses of `ns.dns.<zone>`.
    pub ns_addrs: Vec<IpAddr>,
}

impl Default for AnswerConfig {
    fn default() -> Self {
        Self {
            zones: vec![Name::from_ascii("cluster.local.").expect("valid zone")],
            ttl: super::DEFAULT_TTL,
            negative_ttl: super::DEFAULT_NEGATIVE_TTL,
            ns_addrs: vec![],
        }
    }
}

/// What the rules read from a request; each encoder fills it from its own
/// parse.
#[derive(Clone, Copy, Debug)]
pub struct Request<'q> {
    pub opcode: OpCode,
    /// The client's OPT record, if it sent one.
    pub edns: Option<ClientEdns>,
    /// The question, when there is exactly one.
    pub question: Option<Question<'q>>,
    /// Over UDP (the payload clamp applies) or TCP.
    pub udp: bool,
}

/// What the rules read from the client's OPT record; its options and
/// other flags are ignored (RFC 6891 §6.1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientEdns {
    /// The payload size, as sent.
    pub payload: u16,
    pub version: u8,
    pub dnssec_ok: bool,
}

#[derive(Clone, Copy, Debug)]
pub struct Question<'q> {
    /// Lower case, dotted, without the trailing dot (`""` for the root).
    pub name: &'q str,
    pub qtype: RecordType,
    pub qclass: DNSClass,
}

/// The answer, as data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan<'a> {
    /// The full rcode; BADVERS (16) lives partly in the OPT (RFC 6891).
    pub rcode: ResponseCode,
    pub aa: bool,
    pub tc: bool,
    /// Whether the reply echoes the question (all but NOTIMP and FORMERR).
    pub question: bool,
    /// The reply's OPT record, present when the client sent one.
    pub opt: Option<ReplyEdns>,
    pub answer: SmallVec<[Records<'a>; 1]>,
    /// A truncated reply carries only the first this many records of
    /// `answer` (records as written, not RRsets): see [`Self::cut`].
    pub answer_kept: Option<usize>,
    /// The answer cannot fit the limit (a lower bound on its size says
    /// so): it will be cut, so it carries no glue, and an encoder may cut
    /// it without writing it whole first.
    pub overflows: bool,
    /// The zone's SOA, in NXDOMAIN and NODATA answers (RFC 2308 §3).
    pub authority: Option<Records<'a>>,
    pub additional: Vec<Records<'a>>,
    /// The most the reply may take (UDP: the clamped payload size).
    pub limit: usize,
    /// A node instance does not hold this name's data: the question goes
    /// to the relays and their answer back unchanged; nothing else here
    /// is used.
    pub forward: bool,
}

/// podns's OPT: version 0, its own payload size, the client's DO bit
/// (RFC 3225 §3), no other flag and no option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyEdns {
    pub payload: u16,
    pub dnssec_ok: bool,
}

/// The records of one owner, type and TTL (one RRset, or one record of
/// the server's own addresses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Records<'a> {
    pub owner: Owner<'a>,
    pub ttl: u32,
    pub data: Data<'a>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner<'a> {
    /// The question's name, spelled as the client spelled it.
    Question,
    /// An absolute name without the trailing dot: lower case, but for
    /// the targets of a CNAME chain, which keep the index's spelling.
    Name(Cow<'a, str>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Data<'a> {
    /// Every address of `rrs.a`, in order.
    A(Arc<Rrs>),
    /// Every address of `rrs.aaaa`, in order.
    Aaaa(Arc<Rrs>),
    /// One address: the server's own, or a name's only record (the
    /// table keeps such a name's address inline, without a record set).
    Ip(IpAddr),
    /// Absolute target, without the trailing dot.
    Cname(Cow<'a, str>),
    /// Absolute target, without the trailing dot.
    Ptr(String),
    /// Absolute name server, without the trailing dot.
    Ns(&'a str),
    /// Every record of `rrs.srv`: priority 0, this weight, the port, and
    /// the target key under `zone`.
    Srv {
        rrs: Arc<Rrs>,
        weight: u16,
        zone: &'a str,
    },
    Txt(Cow<'a, str>),
    Soa(Soa<'a>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Soa<'a> {
    /// Absolute names without the trailing dot.
    pub mname: &'a str,
    pub rname: &'a str,
    pub serial: u32,
    /// REFRESH, RETRY, EXPIRE.
    pub timers: [u32; 3],
    /// The negative TTL (RFC 2308 §4).
    pub minimum: u32,
}

impl<'a> Plan<'a> {
    pub(crate) fn new(rcode: ResponseCode, opt: Option<ReplyEdns>, limit: usize) -> Self {
        Self {
            rcode,
            aa: false,
            tc: false,
            question: true,
            opt,
            answer: SmallVec::new(),
            answer_kept: None,
            overflows: false,
            authority: None,
            additional: Vec::new(),
            limit,
            forward: false,
        }
    }

    /// A reply with this header and no records, the question echoed: what
    /// `--rrl` turns into its slip with [`Self::truncate`] (keeping none).
    pub fn header_only(rcode: ResponseCode, aa: bool, opt: Option<ReplyEdns>) -> Plan<'static> {
        let mut plan = Plan::new(rcode, opt, usize::from(u16::MAX));
        plan.aa = aa;
        plan
    }

    /// TC=1 with the header, the question, the OPT and the first `kept`
    /// records of the answer section; no authority and no additional
    /// data. The rcode and AA stay. With 0, also the `--rrl` slip.
    pub fn truncate(&mut self, kept: usize) {
        self.tc = true;
        self.answer_kept = Some(kept);
        self.authority = None;
        self.additional.clear();
    }

    /// Where the records of a reply must end: its limit, less the room of
    /// its OPT, which a truncated reply keeps (RFC 6891 §7).
    pub fn room(&self) -> usize {
        let opt = if self.opt.is_some() { OPT_LEN } else { 0 };
        self.limit.saturating_sub(opt)
    }

    /// Cut a reply that does not fit its limit, as its encoder measured
    /// it: `answers` is how many of its answer records end within
    /// [`Self::room`]; `additional` how many of its additional RRsets (the
    /// entries of `additional`, in order) do after them, or `None` when
    /// the answer and authority sections themselves do not.
    ///
    /// RFC 2181 §9. When only additional data is too much (SRV or NS
    /// glue), the RRsets that do not fit are left out whole and TC stays
    /// clear: "the TC bit should not be set merely because some extra
    /// information could have been included"; a client that needs a
    /// target's address asks for it. Otherwise TC=1 and the answer
    /// section keeps as many whole records as fit, with no authority and
    /// no glue ("the partial RRSet that would not completely fit may be
    /// left in the response"): a client that retries over TCP (glibc, Go,
    /// c-ares) gets everything there, and one that cannot (musl before
    /// 1.2.4) still gets part of a set where an empty reply gave it
    /// nothing. An AAAA set is cut the same way (28 bytes a record: 16 fit
    /// 512 bytes beside a 30-byte question); an ANY answer gives the A set
    /// first, so its AAAA records are the first left out. CoreDNS
    /// (miekg/dns `Msg.Truncate`) keeps the same answer records (the
    /// `integration::truncation` test counts them); it sets TC when glue
    /// is left out too.
    pub fn cut(&mut self, answers: usize, additional: Option<usize>) {
        match additional {
            Some(n) => self.additional.truncate(n),
            None => self.truncate(answers),
        }
    }

    fn negative(&mut self, rcode: ResponseCode, soa: Records<'a>) {
        self.rcode = rcode;
        self.authority = Some(soa);
    }
}

/// Whether a node instance answers a question itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Held {
    /// It holds all the data the answer depends on.
    Yes,
    /// Only if the answer has records: a pod's own name in a namespace
    /// held in part, which another gang's pod may own when it is not here.
    IfFound,
    /// It forwards the question.
    No,
}

/// Whether a node instance holds the data `place`'s answer depends on:
/// names of no namespace always, a namespace's names once it is in scope
/// (but those of a headless Service without a selector, or, in a
/// namespace held in part, one that does not keep to the held gangs; and
/// there a pod's own name only when it is found), reverse names and names
/// no rule makes never (any pod may be behind them). `stale`: a namespace
/// out of scope only while it is listed again counts as held.
fn held(scope: &Scope, place: &Place<'_>, stale: bool) -> Held {
    match place {
        Place::Forward { rel, .. } => {
            let q = QName::parse(rel);
            match q.holder() {
                Holder::Zone => Held::Yes,
                Holder::Namespace(ns) => {
                    if !(scope.contains(ns) || stale && scope.is_stale(ns)) {
                        return Held::No;
                    }
                    // A headless Service without a selector answers from
                    // EndpointSlices, which a node instance does not hold
                    // when its relay serves none.
                    let svc = match q {
                        QName::Service { svc, .. } | QName::Port { svc, .. } => Some(svc),
                        QName::Host { sub, .. } => Some(sub),
                        _ => None,
                    };
                    match q {
                        _ if svc.is_some_and(|svc| scope.is_unheld(ns, svc)) => Held::No,
                        // Every Service and Job of the namespace is here.
                        QName::Service { .. } | QName::Port { .. } => Held::Yes,
                        _ if !scope.is_partial(ns) => Held::Yes,
                        QName::Host { .. }
                        | QName::Pod { .. }
                        | QName::Gang { .. }
                        | QName::Namespace(..) => Held::IfFound,
                        _ => Held::No,
                    }
                }
                Holder::Anyone => Held::No,
            }
        }
        Place::Reverse(_) => Held::No,
        Place::Outside => Held::Yes,
    }
}

/// The payload limit of a reply: TCP takes 65,535 bytes; UDP 512 without
/// EDNS (RFC 1035 §4.2.1), else what the client offers, counted as at
/// least 512 (RFC 6891 §6.2.5) and at most [`MAX_UDP_PAYLOAD`].
pub fn payload_limit(udp: bool, edns: Option<ClientEdns>) -> usize {
    if !udp {
        return usize::from(u16::MAX);
    }
    usize::from(edns.map_or(512, |e| e.payload.clamp(512, MAX_UDP_PAYLOAD)))
}

/// Even SRV weights summing to about 100, at least 1 each (RFC 2782), as
/// CoreDNS does.
pub fn srv_weight(n: usize) -> u16 {
    100usize.checked_div(n).map_or(0, |w| w.max(1) as u16)
}

/// The names of one served zone, spelled once.
#[derive(Clone, Debug)]
struct ZoneNames {
    /// Lower case, no trailing dot.
    apex: String,
    /// `ns.dns.<zone>`: SOA MNAME, the NS target and its glue's owner.
    ns: String,
    /// `hostmaster.<zone>`: SOA RNAME.
    hostmaster: String,
}

/// The rules with their configuration, precomputed once.
#[derive(Debug)]
pub struct Rules {
    cfg: AnswerConfig,
    zones: Vec<ZoneNames>,
    /// Indexes of `zones`, longest first, so nested zones match the most
    /// specific.
    by_len: Vec<usize>,
}

impl Rules {
    pub fn new(mut cfg: AnswerConfig) -> Self {
        cfg.zones = cfg.zones.iter().map(|z| z.to_lowercase()).collect();
        let zones: Vec<ZoneNames> = cfg
            .zones
            .iter()
            .map(|z| {
                let apex = z.to_ascii().trim_end_matches('.').to_string();
                ZoneNames {
                    ns: format!("ns.dns.{apex}"),
                    hostmaster: format!("hostmaster.{apex}"),
                    apex,
                }
            })
            .collect();
        let mut by_len: Vec<usize> = (0..zones.len()).collect();
        by_len.sort_by_key(|&i| std::cmp::Reverse(zones[i].apex.len()));
        Self { cfg, zones, by_len }
    }

    pub fn config(&self) -> &AnswerConfig {
        &self.cfg
    }

    /// The served zones' apexes, lower case, without the trailing dot.
    pub fn apexes(&self) -> impl Iterator<Item = &str> {
        self.zones.iter().map(|z| z.apex.as_str())
    }

    /// The answer plan for one request.
    pub fn resolve<'a>(&'a self, table: &Table, req: &Request<'_>) -> Plan<'a> {
        self.plan(table, req, false)
    }

    /// A node instance's answer from what it held of a namespace that is
    /// being listed again ([`Scope::is_stale`]), for a question the relays
    /// left unanswered: only a NOERROR one (records or NODATA); `None`
    /// when it would be forwarded still or deny the name (a name new
    /// since may exist: SERVFAIL, which nobody caches, stays the answer).
    pub fn resolve_stale<'a>(&'a self, table: &Table, req: &Request<'_>) -> Option<Plan<'a>> {
        let plan = self.plan(table, req, true);
        (!plan.forward && plan.rcode == ResponseCode::NoError).then_some(plan)
    }

    fn plan<'a>(&'a self, table: &Table, req: &Request<'_>, stale: bool) -> Plan<'a> {
        let limit = payload_limit(req.udp, req.edns);
        // A fresh OPT of version 0: the client's options and unknown flags
        // are never echoed (RFC 6891 §6.1.2, §6.1.4), but DO is copied
        // back (RFC 3225 §3). The payload size podns sends is its own
        // limit, not the client's.
        let opt = req.edns.map(|e| ReplyEdns {
            payload: MAX_UDP_PAYLOAD,
            dnssec_ok: e.dnssec_ok,
        });
        let mut plan = Plan::new(ResponseCode::NoError, opt, limit);
        if req.edns.is_some_and(|e| e.version > 0) {
            // RFC 6891 §6.1.3: BADVERS, with an OPT of the highest version
            // implemented (0), before anything else and whatever the name.
            // The question is echoed: clients drop a reply that "does not
            // respond to the question asked". No AA: no zone data was
            // consulted.
            plan.rcode = ResponseCode::BADVERS;
            plan.question = req.question.is_some();
            return plan;
        }
        if req.opcode != OpCode::Query {
            plan.rcode = ResponseCode::NotImp;
            plan.question = false;
            return plan;
        }
        let Some(q) = req.question else {
            plan.rcode = ResponseCode::FormErr;
            plan.question = false;
            return plan;
        };
        if !matches!(q.qclass, DNSClass::IN | DNSClass::ANY) {
            plan.rcode = ResponseCode::Refused;
            return plan;
        }
        let place = self.place(q.name);
        if matches!(place, Place::Outside) {
            // Never a recursive resolver.
            plan.rcode = ResponseCode::Refused;
            return plan;
        }
        if matches!(q.qtype, RecordType::AXFR | RecordType::IXFR) {
            plan.rcode = ResponseCode::Refused;
            return plan;
        }
        let scope = table.scope();
        let held = if scope.is_node() {
            held(scope, &place, stale)
        } else {
            Held::Yes
        };
        if held == Held::No {
            plan.forward = true;
            return plan;
        }
        // A reverse name inside a zone the table owns (the cluster's
        // ranges) is ours: answers, NXDOMAIN, NODATA. Outside them podns
        // answers only the PTR of an address its index holds (many CNIs
        // give pods addresses outside every Node's podCIDRs) and REFUSES
        // the rest, so a resolver asks its next server instead of caching
        // an authoritative NXDOMAIN for a zone podns does not have. Before
        // the first lists nothing is owned or held yet, and REFUSED is the
        // answer that nobody caches.
        let reverse_apex = match place {
            Place::Reverse(name) => match table.reverse_zones().zone_of(name) {
                Some(z) => Some(z.apex.len()),
                None => {
                    if !(table.is_synced() && self.foreign_ptr(&mut plan, table, &q, name)) {
                        plan.rcode = ResponseCode::Refused;
                    }
                    return plan;
                }
            },
            _ => None,
        };
        if !table.is_synced() {
            // Never NXDOMAIN before the index is complete: downstream
            // caches would keep it (kubernetes/dns#186).
            plan.rcode = ResponseCode::ServFail;
            return plan;
        }
        plan.aa = true;
        match place {
            Place::Forward { zone, rel } => self.forward(&mut plan, table, &q, zone, rel),
            Place::Reverse(name) => {
                let apex = &name[name.len() - reverse_apex.unwrap_or(name.len())..];
                self.reverse(&mut plan, table, &q, name, apex)
            }
            Place::Outside => unreachable!("handled above"),
        }
        if held == Held::IfFound && (plan.rcode != ResponseCode::NoError || plan.answer.is_empty())
        {
            let mut forward = Plan::new(ResponseCode::NoError, opt, limit);
            forward.forward = true;
            return forward;
        }
        plan
    }

    /// Where a question's name (lower case, no trailing dot) falls: in
    /// the most specific served zone, in a reverse tree, or outside.
    /// Where `name` sits: in a served zone, a reverse tree, or outside.
    pub fn place<'n>(&self, name: &'n str) -> Place<'n> {
        let zones = self
            .by_len
            .iter()
            .map(|&i| (i, self.zones[i].apex.as_str()));
        names::place(name, zones)
    }

    /// The SOA of `zone` (its names; the reverse zones use the first
    /// zone's) with this owner and TTL. The serial is the index generation.
    fn soa_of<'a>(&'a self, owner: Owner<'a>, zone: usize, ttl: u32, serial: u32) -> Records<'a> {
        let z = &self.zones[zone];
        Records {
            owner,
            ttl,
            data: Data::Soa(Soa {
                mname: &z.ns,
                rname: &z.hostmaster,
                serial,
                timers: SOA_TIMERS,
                minimum: self.cfg.negative_ttl,
            }),
        }
    }

    /// The SOA in Authority of a negative answer. RFC 2308 §3: its TTL is
    /// min(TTL, MINIMUM), both the negative TTL here.
    fn negative_soa<'a>(
        &'a self,
        table: &Table,
        apex: impl Into<Cow<'a, str>>,
        zone: usize,
    ) -> Records<'a> {
        let serial = table.generation() as u32;
        let owner = Owner::Name(apex.into());
        self.soa_of(owner, zone, self.cfg.negative_ttl, serial)
    }

    fn nodata<'a>(
        &'a self,
        plan: &mut Plan<'a>,
        table: &Table,
        apex: impl Into<Cow<'a, str>>,
        zone: usize,
    ) {
        plan.negative(ResponseCode::NoError, self.negative_soa(table, apex, zone));
    }

    /// The server's own addresses of this type (ANY: all), owned by `owner`.
    fn ns_addrs<'a>(&'a self, owner: &Owner<'a>, qtype: RecordType) -> Vec<Records<'a>> {
        self.cfg
            .ns_addrs
            .iter()
            .filter(|ip| match ip {
                IpAddr::V4(_) => matches!(qtype, RecordType::A | RecordType::ANY),
                IpAddr::V6(_) => matches!(qtype, RecordType::AAAA | RecordType::ANY),
            })
            .map(|ip| Records {
                owner: owner.clone(),
                ttl: self.cfg.ttl,
                data: Data::Ip(*ip),
            })
            .collect()
    }

    fn forward<'a>(
        &'a self,
        plan: &mut Plan<'a>,
        table: &Table,
        q: &Question<'_>,
        zone: usize,
        rel: &str,
    ) {
        let qtype = q.qtype;
        let z = &self.zones[zone];
        let apex = z.apex.as_str();
        let ttl = self.cfg.ttl;
        let name = QName::parse(rel);
        match name {
            QName::Apex => {
                match qtype {
                    RecordType::SOA | RecordType::ANY => {
                        let serial = table.generation() as u32;
                        let soa = self.soa_of(Owner::Question, zone, ttl, serial);
                        plan.answer.push(soa);
                    }
                    RecordType::NS => {
                        plan.answer.push(Records {
                            owner: Owner::Question,
                            ttl,
                            data: Data::Ns(&z.ns),
                        });
                        let glue = Owner::Name(Cow::Borrowed(z.ns.as_str()));
                        plan.additional
                            .extend(self.ns_addrs(&glue, RecordType::ANY));
                    }
                    _ => self.nodata(plan, table, apex, zone),
                }
                return;
            }
            QName::Reserved("dns-version") => {
                if matches!(qtype, RecordType::TXT | RecordType::ANY) {
                    plan.answer.push(Records {
                        owner: Owner::Question,
                        ttl,
                        data: Data::Txt(Cow::Borrowed(DNS_SCHEMA_VERSION)),
                    });
                } else {
                    self.nodata(plan, table, apex, zone);
                }
                return;
            }
            QName::Reserved("ns.dns") => {
                let recs = self.ns_addrs(&Owner::Question, qtype);
                if recs.is_empty() {
                    self.nodata(plan, table, apex, zone);
                } else {
                    plan.answer.extend(recs);
                }
                return;
            }
            QName::Reserved(_) => {
                self.nodata(plan, table, apex, zone);
                return;
            }
            _ => {}
        }
        match table.find(rel, &name) {
            Lookup::Missing => {
                plan.negative(ResponseCode::NXDomain, self.negative_soa(table, apex, zone))
            }
            Lookup::Empty => self.nodata(plan, table, apex, zone),
            Lookup::Found(rrs) => {
                if let Some(target) = &rrs.cname
                    && qtype != RecordType::CNAME
                {
                    let target = target.to_string();
                    self.chase_cname(plan, table, target, qtype);
                    return;
                }
                let before = plan.answer.len();
                self.records(&mut plan.answer, Owner::Question, &rrs, qtype, zone);
                if plan.answer.len() == before {
                    self.nodata(plan, table, apex, zone);
                    return;
                }
                // A set that cannot fit will be cut to the records that
                // do, with no glue (Plan::cut): its glue is not looked up
                // (64 targets' addresses, for nothing).
                plan.overflows = min_size(q.name, &rrs, qtype) > plan.limit;
                if qtype == RecordType::SRV && !plan.overflows {
                    self.srv_glue(plan, table, &rrs, zone);
                }
            }
            Lookup::Ip(ip) => {
                if !self.ip_records(&mut plan.answer, Owner::Question, ip, qtype) {
                    self.nodata(plan, table, apex, zone);
                }
            }
        }
    }

    /// RFC 1034 §4.3.2: answer with the CNAME, then, when the target lies
    /// in a served zone, with the target's records; outside, the CNAME
    /// alone (podns never recurses).
    fn chase_cname<'a>(
        &'a self,
        plan: &mut Plan<'a>,
        table: &Table,
        target: String,
        qtype: RecordType,
    ) {
        let ttl = self.cfg.ttl;
        let mut owner = Owner::Question;
        let mut target = target;
        for _ in 0..MAX_CNAME_CHAIN {
            if !valid_name(&target) {
                return;
            }
            plan.answer.push(Records {
                owner,
                ttl,
                data: Data::Cname(Cow::Owned(target.clone())),
            });
            let lower = target.to_ascii_lowercase();
            let Place::Forward { zone: tz, rel } = self.place(&lower) else {
                return;
            };
            let apex = self.zones[tz].apex.as_str();
            match table.lookup(rel) {
                Lookup::Found(rrs) => {
                    if let Some(next) = &rrs.cname {
                        owner = Owner::Name(Cow::Owned(target));
                        target = next.to_string();
                        continue;
                    }
                    let before = plan.answer.len();
                    let tname = Owner::Name(Cow::Owned(target));
                    self.records(&mut plan.answer, tname, &rrs, qtype, tz);
                    if plan.answer.len() == before {
                        plan.authority = Some(self.negative_soa(table, apex, tz));
                    }
                }
                Lookup::Ip(ip) => {
                    let tname = Owner::Name(Cow::Owned(target));
                    if !self.ip_records(&mut plan.answer, tname, ip, qtype) {
                        plan.authority = Some(self.negative_soa(table, apex, tz));
                    }
                }
                Lookup::Empty => {
                    plan.authority = Some(self.negative_soa(table, apex, tz));
                }
                // RFC 6604: the rcode describes the last name in the chain.
                Lookup::Missing => {
                    plan.negative(ResponseCode::NXDomain, self.negative_soa(table, apex, tz))
                }
            }
            return;
        }
    }

    /// The records of one name for one type, appended to `out`. ANY gets a
    /// minimal answer (RFC 8482): the addresses, else the first other type
    /// the name has.
    fn records<'a>(
        &'a self,
        out: &mut SmallVec<[Records<'a>; 1]>,
        owner: Owner<'a>,
        rrs: &Arc<Rrs>,
        qtype: RecordType,
        zone: usize,
    ) {
        let ttl = self.cfg.ttl;
        let before = out.len();
        let any = qtype == RecordType::ANY;
        let want = |t: RecordType| qtype == t || any;
        let push = |out: &mut SmallVec<[Records<'a>; 1]>, data: Data<'a>| {
            out.push(Records {
                owner: owner.clone(),
                ttl,
                data,
            })
        };
        if want(RecordType::A) && !rrs.a.is_empty() {
            push(out, Data::A(Arc::clone(rrs)));
        }
        if want(RecordType::AAAA) && !rrs.aaaa.is_empty() {
            push(out, Data::Aaaa(Arc::clone(rrs)));
        }
        if any && out.len() > before {
            return;
        }
        if want(RecordType::CNAME)
            && let Some(t) = &rrs.cname
            && valid_name(t)
        {
            push(out, Data::Cname(Cow::Owned(t.to_string())));
        }
        if want(RecordType::PTR)
            && let Some(t) = &rrs.ptr
            && let Some(target) = self.key_name(t, 0)
        {
            push(out, Data::Ptr(target));
        }
        if any && out.len() > before {
            return;
        }
        if want(RecordType::SRV)
            && rrs
                .srv
                .iter()
                .any(|s| self.key_name(&s.target, zone).is_some())
        {
            push(
                out,
                Data::Srv {
                    rrs: Arc::clone(rrs),
                    weight: srv_weight(rrs.srv.len()),
                    zone: &self.zones[zone].apex,
                },
            );
        }
        if any && out.len() > before {
            return;
        }
        if want(RecordType::TXT)
            && let Some(t) = &rrs.txt
        {
            push(out, Data::Txt(Cow::Owned(t.to_string())));
        }
    }

    /// The record of a name whose only record is `ip`, if `qtype` asks
    /// for it (ANY gets it too, as [`Self::records`] gives addresses
    /// first). True when one was appended.
    fn ip_records<'a>(
        &self,
        out: &mut SmallVec<[Records<'a>; 1]>,
        owner: Owner<'a>,
        ip: IpAddr,
        qtype: RecordType,
    ) -> bool {
        let t = if ip.is_ipv4() {
            RecordType::A
        } else {
            RecordType::AAAA
        };
        let want = qtype == t || qtype == RecordType::ANY;
        if want {
            out.push(Records {
                owner,
                ttl: self.cfg.ttl,
                data: Data::Ip(ip),
            });
        }
        want
    }

    /// A/AAAA of every SRV target in Additional, so a client needs no
    /// second round trip.
    fn srv_glue<'a>(&'a self, plan: &mut Plan<'a>, table: &Table, rrs: &Rrs, zone: usize) {
        let mut seen: Vec<&str> = Vec::new();
        for s in &rrs.srv {
            if seen.contains(&&*s.target) {
                continue;
            }
            seen.push(&s.target);
            let Some(tname) = self.key_name(&s.target, zone) else {
                continue;
            };
            match table.lookup(&s.target) {
                Lookup::Found(t) => {
                    for qt in [RecordType::A, RecordType::AAAA] {
                        let mut glue = SmallVec::new();
                        let owner = Owner::Name(Cow::Owned(tname.clone()));
                        self.records(&mut glue, owner, &t, qt, zone);
                        plan.additional.extend(glue);
                    }
                }
                Lookup::Ip(ip) => {
                    let mut glue = SmallVec::new();
                    let owner = Owner::Name(Cow::Owned(tname));
                    self.ip_records(&mut glue, owner, ip, RecordType::ANY);
                    plan.additional.extend(glue);
                }
                Lookup::Missing | Lookup::Empty => {}
            }
        }
    }

    /// A forward key as an absolute name in the given zone, if it is one.
    fn key_name(&self, key: &str, zone: usize) -> Option<String> {
        let name = format!("{key}.{}", self.zones[zone].apex);
        valid_name(&name).then_some(name)
    }

    /// A name in an owned reverse zone whose apex is `apex` (a suffix of
    /// `name`): SOA and NS at the apex, PTR below it, the zone's SOA in
    /// negative answers.
    fn reverse<'a>(
        &'a self,
        plan: &mut Plan<'a>,
        table: &Table,
        q: &Question<'_>,
        name: &str,
        apex: &str,
    ) {
        let qtype = q.qtype;
        let ttl = self.cfg.ttl;
        // The zone's SOA owner: the apex (one short string, copied only
        // for a negative answer).
        let owner = || Cow::<'a, str>::Owned(apex.to_owned());
        if name == apex {
            match qtype {
                RecordType::SOA | RecordType::ANY => {
                    let serial = table.generation() as u32;
                    plan.answer
                        .push(self.soa_of(Owner::Question, 0, ttl, serial));
                }
                RecordType::NS => plan.answer.push(Records {
                    owner: Owner::Question,
                    ttl,
                    data: Data::Ns(&self.zones[0].ns),
                }),
                _ => self.nodata(plan, table, owner(), 0),
            }
            return;
        }
        match table.lookup(name) {
            Lookup::Missing => {
                plan.negative(ResponseCode::NXDomain, self.negative_soa(table, owner(), 0))
            }
            Lookup::Empty => self.nodata(plan, table, owner(), 0),
            Lookup::Found(rrs) => {
                let before = plan.answer.len();
                self.records(&mut plan.answer, Owner::Question, &rrs, qtype, 0);
                if plan.answer.len() == before {
                    self.nodata(plan, table, owner(), 0);
                }
            }
            Lookup::Ip(ip) => {
                if !self.ip_records(&mut plan.answer, Owner::Question, ip, qtype) {
                    self.nodata(plan, table, owner(), 0);
                }
            }
        }
    }

    /// A reverse name in no owned zone: when it spells an address the
    /// index holds (a pod's, a ClusterIP, a user-managed endpoint's) and
    /// the question asks for its PTR (or ANY, whose minimal answer is the
    /// PTR), the answer; true when one was made. podns is where that
    /// record comes from, not a cache of someone else's, so the answer
    /// is authoritative (AA=1, RFC 1035 §4.1.1: an authority for the name
    /// asked), as every other answer of podns is, and it carries nothing
    /// in Authority: no SOA, which
    /// belongs to negative answers (RFC 2308 §3) and would name an apex
    /// podns does not hold, and no NS, which a recursive resolver would
    /// cache as a delegation of the enclosing zone to podns (RFC 2181
    /// §5.4.1 ranks authority data of an authoritative answer above
    /// glue). Other types and names there stay REFUSED: podns claims that
    /// one RRset, not a zone, so it has no SOA to make a negative answer
    /// cacheable with.
    fn foreign_ptr<'a>(
        &'a self,
        plan: &mut Plan<'a>,
        table: &Table,
        q: &Question<'_>,
        name: &str,
    ) -> bool {
        if !matches!(q.qtype, RecordType::PTR | RecordType::ANY) {
            return false;
        }
        let Lookup::Found(rrs) = table.lookup(name) else {
            return false;
        };
        if rrs.ptr.is_none() {
            return false;
        }
        self.records(&mut plan.answer, Owner::Question, &rrs, RecordType::PTR, 0);
        plan.aa = !plan.answer.is_empty();
        plan.aa
    }

    /// Everything `podns zonefile` writes for one name with data: the
    /// records the name answers, type by type, as a query for that type
    /// would get them. A CNAME owner gets the CNAME alone: a query for any
    /// other type chases it (RFC 1034 §3.6.2 forbids other data beside it
    /// anyway). `zone` is the zone the key is placed in (reverse keys:
    /// the first).
    pub fn owned_records<'a>(
        &'a self,
        owner: Owner<'a>,
        rrs: &Arc<Rrs>,
        zone: usize,
    ) -> SmallVec<[Records<'a>; 1]> {
        let mut out = SmallVec::new();
        if rrs.cname.is_some() {
            self.records(&mut out, owner, rrs, RecordType::CNAME, zone);
            return out;
        }
        for t in [
            RecordType::A,
            RecordType::AAAA,
            RecordType::SRV,
            RecordType::TXT,
            RecordType::PTR,
        ] {
            self.records(&mut out, owner.clone(), rrs, t, zone);
        }
        out
    }

    /// The records at and under a zone's apex that podns answers itself:
    /// SOA and NS at the apex, the server's addresses at `ns.dns` and the
    /// schema version at `dns-version`, as answers to those questions give
    /// them (owners absolute). For `podns zonefile`, with its own serial.
    pub fn apex_records(&self, zone: usize, serial: u32) -> Vec<Records<'_>> {
        let z = &self.zones[zone];
        let ttl = self.cfg.ttl;
        let at = |n: &str| Owner::Name(Cow::Owned(n.to_string()));
        let mut out = vec![
            self.soa_of(at(&z.apex), zone, ttl, serial),
            Records {
                owner: at(&z.apex),
                ttl,
                data: Data::Ns(&z.ns),
            },
        ];
        out.extend(self.ns_addrs(&at(&z.ns), RecordType::ANY));
        out.push(Records {
            owner: Owner::Name(Cow::Owned(format!("dns-version.{}", z.apex))),
            ttl,
            data: Data::Txt(Cow::Borrowed(DNS_SCHEMA_VERSION)),
        });
        out
    }

    /// The SOA and NS of a reverse zone (`in-addr.arpa`): the first zone's
    /// server, as reverse answers give them.
    pub fn reverse_apex_records(&self, apex: &'static str, serial: u32) -> Vec<Records<'_>> {
        let ttl = self.cfg.ttl;
        let at = Owner::Name(Cow::Borrowed(apex));
        vec![
            self.soa_of(at.clone(), 0, ttl, serial),
            Records {
                owner: at,
                ttl,
                data: Data::Ns(&self.zones[0].ns),
            },
        ]
    }

    /// Whether a forward key (relative to a zone) is answered by podns
    /// itself, whatever the index holds.
    pub fn is_reserved(rel: &str) -> bool {
        matches!(QName::parse(rel), QName::Apex | QName::Reserved(_))
    }
}

/// Whether `name` (absolute, without the trailing dot) is a domain name
/// hickory-proto can write; a target that is not one is left out.
fn valid_name(name: &str) -> bool {
    Name::from_ascii(format!("{name}.")).is_ok()
}

/// A lower bound on the reply size for an answer of this type: header,
/// question, and each record with its owner compressed to a pointer.
fn min_size(qname: &str, rrs: &Rrs, qtype: RecordType) -> usize {
    // The question's name on the wire: a length byte per label and the root.
    let name = if qname.is_empty() { 1 } else { qname.len() + 2 };
    let fixed = 12 + name + 4;
    // pointer (2) + type, class, TTL, rdlength (10) + rdata
    let per = |n: usize, rdata: usize| n * (12 + rdata);
    fixed
        + match qtype {
            RecordType::A => per(rrs.a.len(), 4),
            RecordType::AAAA => per(rrs.aaaa.len(), 16),
            // priority, weight, port (6) + a target of at least a pointer (2)
            RecordType::SRV => per(rrs.srv.len(), 8),
            _ => 0,
        }
}
