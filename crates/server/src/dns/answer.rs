//! The record rules: a pure function from (index, question, policy) to a
//! response. Everything DESIGN.md's "Records served" says lives here and is
//! unit-tested without sockets; `dns::server` only moves bytes.

use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};

use crate::index::names::{self, IN_ADDR_ARPA, IP6_ARPA};
use crate::index::{Lookup, Rrs, Table};
use ipnet::IpNet;

/// The largest UDP payload podns sends, whatever the client offers: the
/// DNS Flag Day 2020 value, which avoids IP fragmentation.
pub const MAX_UDP_PAYLOAD: u16 = 1232;

/// The schema version of the Kubernetes DNS specification served at
/// `dns-version.<zone>` (spec §2.2).
pub const DNS_SCHEMA_VERSION: &str = "1.1.0";

/// How deep an in-zone CNAME chain is followed.
const MAX_CNAME_CHAIN: usize = 8;

#[derive(Clone, Debug)]
pub struct AnswerConfig {
    /// Served zones, lower case, fully qualified; the first one is where PTR
    /// targets and the reverse zones' SOA point.
    pub zones: Vec<Name>,
    pub ttl: u32,
    pub negative_ttl: u32,
    /// Addresses of `ns.dns.<zone>`.
    pub ns_addrs: Vec<IpAddr>,
    /// When non-empty, PTR only inside these networks; other reverse names are REFUSED.
    pub reverse_cidrs: Vec<IpNet>,
}

impl Default for AnswerConfig {
    fn default() -> Self {
        Self {
            zones: vec![Name::from_ascii("cluster.local.").expect("valid zone")],
            ttl: 5,
            negative_ttl: 1,
            ns_addrs: vec![],
            reverse_cidrs: vec![],
        }
    }
}

/// Transport the query came over: it decides the size limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

impl Transport {
    pub fn label(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
        }
    }
}

/// An encoded reply and what the server counts about it.
#[derive(Debug)]
pub struct Reply {
    pub bytes: Vec<u8>,
    pub rcode: ResponseCode,
    pub qtype: Option<RecordType>,
    pub truncated: bool,
}

/// What the server counts about a reply written into its buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyMeta {
    pub rcode: ResponseCode,
    pub qtype: Option<RecordType>,
    pub truncated: bool,
}

/// Where a question's name falls.
enum Place {
    /// Relative key under the zone at this index of `zone_strs`.
    Forward {
        zone: usize,
        rel: String,
    },
    /// Absolute reverse name (no trailing dot).
    Reverse(String),
    Outside,
}

/// Answers questions from the index. Cheap to share behind an `Arc`.
pub struct Answerer {
    table: Arc<Table>,
    cfg: AnswerConfig,
    /// Zones as lower-case strings without the trailing dot, longest first
    /// in `by_len` so nested zones match the most specific.
    zone_strs: Vec<String>,
    by_len: Vec<usize>,
    /// `zone_strs` longest first, for the wire fast path.
    zones_longest_first: Vec<String>,
    /// Per zone: `ns.dns.<zone>.` and `hostmaster.<zone>.`, built once
    /// (negative answers, the ndots:5 search-path misses, are the common case).
    soa_names: Vec<(Name, Name)>,
}

impl Answerer {
    pub fn new(table: Arc<Table>, mut cfg: AnswerConfig) -> Self {
        cfg.zones = cfg.zones.iter().map(|z| z.to_lowercase()).collect();
        let zone_strs: Vec<String> = cfg
            .zones
            .iter()
            .map(|z| z.to_ascii().trim_end_matches('.').to_string())
            .collect();
        let mut by_len: Vec<usize> = (0..zone_strs.len()).collect();
        by_len.sort_by_key(|&i| std::cmp::Reverse(zone_strs[i].len()));
        let label = |l: &str, z: &Name| Name::from_ascii(l).and_then(|n| n.append_domain(z));
        let soa_names = cfg
            .zones
            .iter()
            .map(|z| {
                (
                    label("ns.dns", z).unwrap_or_else(|_| z.clone()),
                    label("hostmaster", z).unwrap_or_else(|_| z.clone()),
                )
            })
            .collect();
        let zones_longest_first = by_len.iter().map(|&i| zone_strs[i].clone()).collect();
        Self {
            table,
            cfg,
            zone_strs,
            by_len,
            zones_longest_first,
            soa_names,
        }
    }

    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    pub fn config(&self) -> &AnswerConfig {
        &self.cfg
    }

    /// Bytes in, bytes out: what UDP and TCP call. `None` means drop (the
    /// input is not a query we can even address a reply to).
    pub fn handle(&self, bytes: &[u8], transport: Transport) -> Option<Reply> {
        let mut out = Vec::new();
        let meta = self.handle_into(bytes, transport, &mut out)?;
        Some(Reply {
            bytes: out,
            rcode: meta.rcode,
            qtype: meta.qtype,
            truncated: meta.truncated,
        })
    }

    /// [`Self::handle`] into a buffer the caller keeps between queries:
    /// the common questions are answered by the wire fast path
    /// ([`super::fast`]) without allocating; the rest by the general path.
    pub fn handle_into(
        &self,
        bytes: &[u8],
        transport: Transport,
        out: &mut Vec<u8>,
    ) -> Option<ReplyMeta> {
        if let Some(meta) = self.handle_fast(bytes, transport, out) {
            return Some(meta);
        }
        let reply = self.handle_general(bytes, transport)?;
        *out = reply.bytes;
        Some(ReplyMeta {
            rcode: reply.rcode,
            qtype: reply.qtype,
            truncated: reply.truncated,
        })
    }

    /// The wire fast path alone; `None` when it hands the query over.
    pub(crate) fn handle_fast(
        &self,
        bytes: &[u8],
        transport: Transport,
        out: &mut Vec<u8>,
    ) -> Option<ReplyMeta> {
        let zones = super::fast::Zones {
            by_len: &self.zones_longest_first,
            ttl: self.cfg.ttl,
            negative_ttl: self.cfg.negative_ttl,
        };
        let udp = transport == Transport::Udp;
        super::fast::answer(bytes, udp, &self.table, &zones, out)
    }

    /// The general path: parse into a `Message`, apply the rules, encode.
    /// Public for the benches' before/after.
    #[doc(hidden)]
    pub fn handle_general(&self, bytes: &[u8], transport: Transport) -> Option<Reply> {
        let req = match Message::from_vec(bytes) {
            Ok(m) => m,
            Err(_) => return formerr_for_garbage(bytes),
        };
        if req.metadata.message_type != MessageType::Query {
            return None; // never answer a response: no reflection loops
        }
        let limit = match transport {
            Transport::Tcp => usize::from(u16::MAX),
            Transport::Udp => usize::from(udp_limit(&req)),
        };
        let resp = self.answer_within(&req, limit);
        let qtype = req.queries.first().map(|q| q.query_type());
        encode_within(resp, limit, qtype)
    }

    /// The record rules: a response for a parsed query.
    pub fn answer(&self, req: &Message) -> Message {
        self.answer_within(req, usize::from(u16::MAX))
    }

    /// The record rules, for a reply that may be at most `limit` bytes: an
    /// address or SRV set that cannot fit is not even built (a 1,000-rank
    /// gang's set costs ~100 µs to build and encode only to be dropped for
    /// TC=1).
    pub fn answer_within(&self, req: &Message, limit: usize) -> Message {
        let mut resp = Message::new(req.metadata.id, MessageType::Response, req.metadata.op_code);
        resp.metadata.recursion_desired = req.metadata.recursion_desired;
        resp.metadata.checking_disabled = req.metadata.checking_disabled;
        if let Some(edns) = &req.edns {
            // A fresh OPT of version 0: the client's options and unknown
            // flags are never echoed (RFC 6891 §6.1.2, §6.1.4), but DO is
            // copied back (RFC 3225 §3). The payload size podns sends is
            // its own limit, not the client's.
            let mut e = Edns::new();
            e.set_max_payload(MAX_UDP_PAYLOAD);
            e.set_dnssec_ok(edns.flags().dnssec_ok);
            resp.set_edns(e);
            if edns.version() > 0 {
                // RFC 6891 §6.1.3: BADVERS, with an OPT of the highest
                // version implemented (0). BADVERS is 16, so its header
                // RCODE is 0 and the 1 lives in the OPT's extended-rcode
                // byte (hickory-proto writes it there because an OPT is
                // set). The question is echoed: clients drop a reply that
                // "does not respond to the question asked".
                resp.metadata.response_code = ResponseCode::BADVERS;
                if let [q] = req.queries.as_slice() {
                    resp.add_query(q.clone());
                }
                return resp;
            }
        }
        if req.metadata.op_code != OpCode::Query {
            resp.metadata.response_code = ResponseCode::NotImp;
            return resp;
        }
        if req.queries.len() != 1 {
            resp.metadata.response_code = ResponseCode::FormErr;
            return resp;
        }
        let q = &req.queries[0];
        resp.add_query(q.clone());
        if !matches!(q.query_class(), DNSClass::IN | DNSClass::ANY) {
            resp.metadata.response_code = ResponseCode::Refused;
            return resp;
        }
        let place = self.place(q.name());
        if matches!(place, Place::Outside) {
            // Never a recursive resolver.
            resp.metadata.response_code = ResponseCode::Refused;
            return resp;
        }
        if matches!(q.query_type(), RecordType::AXFR | RecordType::IXFR) {
            resp.metadata.response_code = ResponseCode::Refused;
            return resp;
        }
        if let Place::Reverse(name) = &place
            && !self.reverse_allowed(name)
        {
            resp.metadata.response_code = ResponseCode::Refused;
            return resp;
        }
        if !self.table.is_synced() {
            // Never NXDOMAIN before the index is complete: downstream caches
            // would keep it (kubernetes/dns#186).
            resp.metadata.response_code = ResponseCode::ServFail;
            return resp;
        }
        resp.metadata.authoritative = true;
        match place {
            Place::Forward { zone, rel } => self.forward(&mut resp, q, zone, &rel, limit),
            Place::Reverse(name) => self.reverse(&mut resp, q, &name),
            Place::Outside => unreachable!("handled above"),
        }
        resp
    }

    fn place(&self, qname: &Name) -> Place {
        let lower = qname.to_lowercase().to_ascii();
        let name = lower.trim_end_matches('.');
        for &i in &self.by_len {
            let z = &self.zone_strs[i];
            if name == z {
                return Place::Forward {
                    zone: i,
                    rel: String::new(),
                };
            }
            if let Some(rel) = name
                .strip_suffix(z.as_str())
                .and_then(|r| r.strip_suffix('.'))
            {
                return Place::Forward {
                    zone: i,
                    rel: rel.to_string(),
                };
            }
        }
        if names::is_reverse(name) {
            return Place::Reverse(name.to_string());
        }
        Place::Outside
    }

    fn reverse_allowed(&self, name: &str) -> bool {
        if self.cfg.reverse_cidrs.is_empty() {
            return true;
        }
        if let Some(ip) = names::parse_reverse(name) {
            return self.cfg.reverse_cidrs.iter().any(|c| c.contains(&ip));
        }
        match names::reverse_prefix(name) {
            // A partial name is ours if it lies inside a network or
            // is an ancestor of one (its empty non-terminals).
            Some((net, len)) => self.cfg.reverse_cidrs.iter().any(|c| {
                (len >= c.prefix_len() && c.contains(&net))
                    || (len < c.prefix_len()
                        && IpNet::new(net, len).is_ok_and(|n| n.contains(&c.addr())))
            }),
            None => false,
        }
    }

    fn zone_name(&self, zone: usize) -> &Name {
        &self.cfg.zones[zone]
    }

    fn soa(&self, apex: Name, zone: usize) -> Record {
        let (mname, rname) = self.soa_names[zone].clone();
        let soa = SOA::new(
            mname,
            rname,
            self.table.generation() as u32,
            7200,
            1800,
            86400,
            self.cfg.negative_ttl,
        );
        // RFC 2308 §3: the SOA's TTL in a negative answer is min(TTL, MINIMUM).
        Record::from_rdata(apex, self.cfg.negative_ttl, RData::SOA(soa))
    }

    fn negative(&self, resp: &mut Message, rcode: ResponseCode, apex: Name, zone: usize) {
        resp.metadata.response_code = rcode;
        resp.add_authority(self.soa(apex, zone));
    }

    fn ns_name(&self, zone: usize) -> Name {
        self.soa_names[zone].0.clone()
    }

    fn ns_addr_records(&self, owner: &Name, qtype: RecordType) -> Vec<Record> {
        self.cfg
            .ns_addrs
            .iter()
            .filter_map(|ip| match (ip, qtype) {
                (IpAddr::V4(v4), RecordType::A | RecordType::ANY) => Some(Record::from_rdata(
                    owner.clone(),
                    self.cfg.ttl,
                    RData::A(A(*v4)),
                )),
                (IpAddr::V6(v6), RecordType::AAAA | RecordType::ANY) => Some(Record::from_rdata(
                    owner.clone(),
                    self.cfg.ttl,
                    RData::AAAA(AAAA(*v6)),
                )),
                _ => None,
            })
            .collect()
    }

    fn forward(&self, resp: &mut Message, q: &Query, zone: usize, rel: &str, limit: usize) {
        let owner = q.name().clone();
        let qtype = q.query_type();
        let apex = self.zone_name(zone).clone();
        let ttl = self.cfg.ttl;
        match rel {
            "" => {
                match qtype {
                    RecordType::SOA | RecordType::ANY => {
                        let mut soa = self.soa(owner, zone);
                        soa.ttl = ttl;
                        resp.add_answer(soa);
                    }
                    RecordType::NS => {
                        resp.add_answer(Record::from_rdata(
                            owner,
                            ttl,
                            RData::NS(NS(self.ns_name(zone))),
                        ));
                        let glue_owner = self.ns_name(zone);
                        resp.add_additionals(self.ns_addr_records(&glue_owner, RecordType::ANY));
                    }
                    _ => self.negative(resp, ResponseCode::NoError, apex, zone),
                }
                return;
            }
            "dns-version" => {
                if matches!(qtype, RecordType::TXT | RecordType::ANY) {
                    let txt = TXT::new(vec![DNS_SCHEMA_VERSION.to_string()]);
                    resp.add_answer(Record::from_rdata(owner, ttl, RData::TXT(txt)));
                } else {
                    self.negative(resp, ResponseCode::NoError, apex, zone);
                }
                return;
            }
            "ns.dns" => {
                let recs = self.ns_addr_records(&owner, qtype);
                if recs.is_empty() {
                    self.negative(resp, ResponseCode::NoError, apex, zone);
                } else {
                    resp.add_answers(recs);
                }
                return;
            }
            "dns" => {
                self.negative(resp, ResponseCode::NoError, apex, zone);
                return;
            }
            _ => {}
        }
        match self.table.lookup(rel) {
            Lookup::Missing => self.negative(resp, ResponseCode::NXDomain, apex, zone),
            Lookup::Empty => self.negative(resp, ResponseCode::NoError, apex, zone),
            Lookup::Found(rrs) => {
                if let Some(target) = &rrs.cname
                    && qtype != RecordType::CNAME
                {
                    self.chase_cname(resp, owner, target, qtype);
                    return;
                }
                if min_size(q, &rrs, qtype) > limit {
                    resp.metadata.truncation = true;
                    return;
                }
                let recs = self.records(&owner, &rrs, qtype, zone);
                if recs.is_empty() {
                    self.negative(resp, ResponseCode::NoError, apex, zone);
                    return;
                }
                if qtype == RecordType::SRV {
                    self.srv_glue(resp, &rrs, zone);
                }
                resp.add_answers(recs);
            }
        }
    }

    /// RFC 1034 §4.3.2: answer with the CNAME, then, when the target lies
    /// in a served zone, with the target's records; outside, the CNAME
    /// alone (podns never recurses).
    fn chase_cname(&self, resp: &mut Message, owner: Name, target: &str, qtype: RecordType) {
        let ttl = self.cfg.ttl;
        let mut owner = owner;
        let mut target = target.to_string();
        for _ in 0..MAX_CNAME_CHAIN {
            let Ok(tname) = Name::from_ascii(format!("{target}.")) else {
                return;
            };
            resp.add_answer(Record::from_rdata(
                owner,
                ttl,
                RData::CNAME(CNAME(tname.clone())),
            ));
            let Place::Forward { zone: tz, rel } = self.place(&tname) else {
                return;
            };
            let apex = self.zone_name(tz).clone();
            match self.table.lookup(&rel) {
                Lookup::Found(rrs) => {
                    if let Some(next) = &rrs.cname {
                        owner = tname;
                        target = next.to_string();
                        continue;
                    }
                    let recs = self.records(&tname, &rrs, qtype, tz);
                    if recs.is_empty() {
                        resp.add_authority(self.soa(apex, tz));
                    }
                    resp.add_answers(recs);
                }
                Lookup::Empty => {
                    resp.add_authority(self.soa(apex, tz));
                }
                // RFC 6604: the rcode describes the last name in the chain.
                Lookup::Missing => self.negative(resp, ResponseCode::NXDomain, apex, tz),
            }
            return;
        }
    }

    /// The records of one name for one type. ANY gets a minimal answer
    /// (RFC 8482): the addresses, else the first other type the name has.
    fn records(&self, owner: &Name, rrs: &Rrs, qtype: RecordType, zone: usize) -> Vec<Record> {
        let ttl = self.cfg.ttl;
        let mut out = Vec::new();
        let want = |t: RecordType| qtype == t || qtype == RecordType::ANY;
        if want(RecordType::A) {
            out.extend(
                rrs.a
                    .iter()
                    .map(|ip| Record::from_rdata(owner.clone(), ttl, RData::A(A(*ip)))),
            );
        }
        if want(RecordType::AAAA) {
            out.extend(
                rrs.aaaa
                    .iter()
                    .map(|ip| Record::from_rdata(owner.clone(), ttl, RData::AAAA(AAAA(*ip)))),
            );
        }
        if qtype == RecordType::ANY && !out.is_empty() {
            return out;
        }
        if want(RecordType::CNAME)
            && let Some(t) = &rrs.cname
            && let Ok(tname) = Name::from_ascii(format!("{t}."))
        {
            out.push(Record::from_rdata(
                owner.clone(),
                ttl,
                RData::CNAME(CNAME(tname)),
            ));
        }
        if want(RecordType::PTR)
            && let Some(t) = &rrs.ptr
            && let Some(tname) = self.key_name(t, 0)
        {
            out.push(Record::from_rdata(
                owner.clone(),
                ttl,
                RData::PTR(PTR(tname)),
            ));
        }
        if qtype == RecordType::ANY && !out.is_empty() {
            return out;
        }
        if want(RecordType::SRV) {
            // Weight shares the load evenly (RFC 2782), as CoreDNS does.
            let weight = srv_weight(rrs.srv.len());
            for s in &rrs.srv {
                if let Some(target) = self.key_name(&s.target, zone) {
                    let srv = SRV::new(0, weight, s.port, target);
                    out.push(Record::from_rdata(owner.clone(), ttl, RData::SRV(srv)));
                }
            }
        }
        if qtype == RecordType::ANY && !out.is_empty() {
            return out;
        }
        if want(RecordType::TXT)
            && let Some(t) = &rrs.txt
        {
            out.push(Record::from_rdata(
                owner.clone(),
                ttl,
                RData::TXT(TXT::new(vec![t.to_string()])),
            ));
        }
        out
    }

    /// A/AAAA of every SRV target in Additional, so a client needs no
    /// second round trip.
    fn srv_glue(&self, resp: &mut Message, rrs: &Rrs, zone: usize) {
        let mut seen: Vec<&str> = Vec::new();
        for s in &rrs.srv {
            if seen.contains(&&*s.target) {
                continue;
            }
            seen.push(&s.target);
            if let (Lookup::Found(t), Some(tname)) =
                (self.table.lookup(&s.target), self.key_name(&s.target, zone))
            {
                for qt in [RecordType::A, RecordType::AAAA] {
                    resp.add_additionals(self.records(&tname, &t, qt, zone));
                }
            }
        }
    }

    /// A forward key as a name in the given zone.
    fn key_name(&self, key: &str, zone: usize) -> Option<Name> {
        Name::from_ascii(key)
            .ok()?
            .append_domain(self.zone_name(zone))
            .ok()
    }

    fn reverse(&self, resp: &mut Message, q: &Query, name: &str) {
        let apex_str = if name.ends_with(IP6_ARPA) {
            IP6_ARPA
        } else {
            IN_ADDR_ARPA
        };
        let apex = Name::from_ascii(format!("{apex_str}.")).expect("valid");
        let owner = q.name().clone();
        let qtype = q.query_type();
        if name == apex_str {
            match qtype {
                RecordType::SOA | RecordType::ANY => {
                    let mut soa = self.soa(owner, 0);
                    soa.ttl = self.cfg.ttl;
                    resp.add_answer(soa);
                }
                RecordType::NS => {
                    resp.add_answer(Record::from_rdata(
                        owner,
                        self.cfg.ttl,
                        RData::NS(NS(self.ns_name(0))),
                    ));
                }
                _ => self.negative(resp, ResponseCode::NoError, apex, 0),
            }
            return;
        }
        match self.table.lookup(name) {
            Lookup::Missing => self.negative(resp, ResponseCode::NXDomain, apex, 0),
            Lookup::Empty => self.negative(resp, ResponseCode::NoError, apex, 0),
            Lookup::Found(rrs) => {
                let recs = self.records(&owner, &rrs, qtype, 0);
                if recs.is_empty() {
                    self.negative(resp, ResponseCode::NoError, apex, 0);
                } else {
                    resp.add_answers(recs);
                }
            }
        }
    }
}

/// A lower bound on the reply size for an answer of this type: header,
/// question, and each record with its owner compressed to a pointer.
fn min_size(q: &Query, rrs: &Rrs, qtype: RecordType) -> usize {
    let fixed = 12 + q.name().len() + 4;
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

/// Even SRV weights summing to about 100, at least 1 each.
fn srv_weight(n: usize) -> u16 {
    100usize.checked_div(n).map_or(0, |w| w.max(1) as u16)
}

/// The UDP payload limit for this query: 512 without EDNS (RFC 1035
/// §4.2.1), else what the client offers, between 512 and 1232.
pub fn udp_limit(req: &Message) -> u16 {
    match &req.edns {
        Some(e) => e.max_payload().clamp(512, MAX_UDP_PAYLOAD),
        None => 512,
    }
}

/// Encode; if the reply does not fit, send TC=1 with the question only
/// (RFC 2181 §9: the client retries over TCP and gets all of it).
pub fn encode_within(mut resp: Message, limit: usize, qtype: Option<RecordType>) -> Option<Reply> {
    let rcode = resp.metadata.response_code;
    let bytes = resp.to_vec().ok()?;
    if bytes.len() <= limit {
        // Truncated already when the answer could not fit (`min_size`).
        let truncated = resp.metadata.truncation;
        return Some(Reply {
            bytes,
            rcode,
            qtype,
            truncated,
        });
    }
    resp.metadata.truncation = true;
    resp.answers.clear();
    resp.authorities.clear();
    resp.additionals.clear();
    let bytes = resp.to_vec().ok()?;
    Some(Reply {
        bytes,
        rcode,
        qtype,
        truncated: true,
    })
}

/// A query that does not parse gets FORMERR when its header can be read
/// and it claims to be a query; anything else is dropped.
fn formerr_for_garbage(bytes: &[u8]) -> Option<Reply> {
    if bytes.len() < 12 || bytes[2] & 0x80 != 0 {
        return None;
    }
    let id = u16::from_be_bytes([bytes[0], bytes[1]]);
    let opcode = OpCode::from_u8((bytes[2] >> 3) & 0x0f);
    let resp = Message::error_msg(id, opcode, ResponseCode::FormErr);
    let bytes = resp.to_vec().ok()?;
    Some(Reply {
        bytes,
        rcode: ResponseCode::FormErr,
        qtype: None,
        truncated: false,
    })
}

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;
