//! The general path: a request parsed into a hickory-proto `Message`,
//! resolved into a plan by [`super::resolve`] (which holds every record
//! rule), and the plan encoded by hickory-proto. Pure functions, tested
//! without sockets; `dns::server` only moves bytes. [`Answerer`] also runs
//! the wire fast path ([`super::fast`]) first, on the same plan.

use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::ProtoError;
use hickory_proto::op::{Edns, Message, MessageType, OpCode, ResponseCode, emit_message_parts};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder};

use super::fast::Fast;
use super::resolve::{self, ClientEdns, Data, Owner, Plan, Records, Request, Rules};
use crate::index::Table;

pub use super::reply::{Reply, ReplyMeta, Transport};
pub use super::resolve::{AnswerConfig, DNS_SCHEMA_VERSION, MAX_UDP_PAYLOAD};

/// Answers questions from the index. Cheap to share behind an `Arc`.
pub struct Answerer {
    table: Arc<Table>,
    rules: Rules,
    /// A node instance's way to the relays.
    forwarding: Option<Forwarding>,
}

/// Where a node instance sends the questions it does not hold.
pub struct Forwarding {
    pub forwarder: Arc<super::forward::Forwarder>,
    /// The runtime a blocking UDP loop hands forwarded questions to.
    pub runtime: tokio::runtime::Handle,
    /// `podns_dns_forwarded_total{result}`.
    pub answered: prometheus_client::metrics::counter::Counter,
    /// Answered from a namespace's stale data ([`Rules::resolve_stale`]).
    pub stale: prometheus_client::metrics::counter::Counter,
    pub failed: prometheus_client::metrics::counter::Counter,
}

impl Answerer {
    pub fn new(table: Arc<Table>, cfg: AnswerConfig) -> Self {
        Self {
            table,
            rules: Rules::new(cfg),
            forwarding: None,
        }
    }

    /// A node instance's answerer: what it does not hold goes to the relays.
    pub fn with_forwarding(mut self, forwarding: Forwarding) -> Self {
        self.forwarding = Some(forwarding);
        self
    }

    /// The relays' answer to a question this node instance does not hold,
    /// unchanged but for the client's ID. When none answers: the answer
    /// from what it held of a namespace being listed again, if that is
    /// NOERROR ([`Rules::resolve_stale`]), else SERVFAIL.
    ///
    /// A relay rollout is when both happen: a node instance's watch that
    /// resumes on a relay without its history lists again, and the relay
    /// it forwards to may be the one going. SERVFAIL there breaks more
    /// than the one question: glibc, given SERVFAIL for A beside NODATA
    /// for AAAA, reports "no such host" without asking its next server.
    pub async fn forwarded(&self, query: &[u8], tcp: bool) -> Option<Vec<u8>> {
        if let Some(f) = &self.forwarding {
            if let Some(reply) = f.forwarder.forward(query, tcp).await {
                f.answered.inc();
                return Some(reply);
            }
            if let Some(reply) = self.stale(query, tcp) {
                f.stale.inc();
                return Some(reply);
            }
            f.failed.inc();
        }
        servfail(query)
    }

    /// [`Rules::resolve_stale`]'s reply to `query`, if it has one.
    fn stale(&self, query: &[u8], tcp: bool) -> Option<Vec<u8>> {
        let req = Message::from_vec(query).ok()?;
        let name = lower_name(&req);
        let plan = self
            .rules
            .resolve_stale(&self.table, &request(&req, &name, !tcp))?;
        let qtype = req.queries.first().map(|q| q.query_type());
        Some(encode(&req, plan, qtype)?.bytes)
    }

    /// [`Self::forwarded`] from a blocking UDP loop: on the runtime, the
    /// reply sent on `socket` to `src` when it comes.
    pub fn forward_udp(
        self: &Arc<Self>,
        query: Vec<u8>,
        src: std::net::SocketAddr,
        socket: Arc<std::net::UdpSocket>,
    ) {
        let Some(f) = &self.forwarding else {
            if let Some(reply) = servfail(&query) {
                let _ = socket.send_to(&reply, src);
            }
            return;
        };
        let me = self.clone();
        f.runtime.spawn(async move {
            if let Some(reply) = me.forwarded(&query, false).await {
                // A UDP send does not block but for a full buffer; the
                // reply is dropped then, as any reply would be.
                let _ = socket.send_to(&reply, src);
            }
        });
    }

    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    pub fn config(&self) -> &AnswerConfig {
        self.rules.config()
    }

    /// The record rules this answerer applies.
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// Bytes in, bytes out: what UDP and TCP call. `None` means drop (the
    /// input is not a query we can even address a reply to).
    pub fn handle(&self, bytes: &[u8], transport: Transport) -> Option<Reply> {
        let mut out = Vec::new();
        let meta = self.handle_into(bytes, transport, &mut out)?;
        if meta.forward {
            out.clear();
        }
        Some(meta.with(out))
    }

    /// [`Self::handle`] into a buffer the caller keeps between queries:
    /// the common questions are encoded by the wire fast path
    /// ([`super::fast`]) without allocating; the rest by the general path.
    pub fn handle_into(
        &self,
        bytes: &[u8],
        transport: Transport,
        out: &mut Vec<u8>,
    ) -> Option<ReplyMeta> {
        let reply = match self.fast(bytes, transport, out) {
            Fast::Done(meta) => return Some(meta),
            // Resolved already: only the encoding is left to do here.
            Fast::Plan(plan) => match Message::from_vec(bytes) {
                Ok(req) => {
                    let qtype = req.queries.first().map(|q| q.query_type());
                    encode(&req, plan, qtype)?
                }
                Err(_) => self.handle_general(bytes, transport)?,
            },
            Fast::Declined => self.handle_general(bytes, transport)?,
        };
        let meta = reply.meta();
        *out = reply.bytes;
        Some(meta)
    }

    /// The wire fast path alone; `None` when it hands the query over.
    #[doc(hidden)]
    pub fn handle_fast(
        &self,
        bytes: &[u8],
        transport: Transport,
        out: &mut Vec<u8>,
    ) -> Option<ReplyMeta> {
        match self.fast(bytes, transport, out) {
            Fast::Done(meta) => Some(meta),
            Fast::Plan(_) | Fast::Declined => None,
        }
    }

    /// What the wire fast path makes of `bytes`.
    fn fast(&self, bytes: &[u8], transport: Transport, out: &mut Vec<u8>) -> Fast<'_> {
        let udp = transport == Transport::Udp;
        super::fast::answer(bytes, udp, &self.table, &self.rules, out)
    }

    /// The general path: parse into a `Message`, resolve, encode with
    /// hickory-proto. Public for the benches' before/after.
    #[doc(hidden)]
    pub fn handle_general(&self, bytes: &[u8], transport: Transport) -> Option<Reply> {
        let req = match Message::from_vec(bytes) {
            Ok(m) => m,
            Err(_) => return formerr_for_garbage(bytes),
        };
        if req.metadata.message_type != MessageType::Query {
            return None; // never answer a response: no reflection loops
        }
        let name = lower_name(&req);
        let udp = transport == Transport::Udp;
        let plan = self.rules.resolve(&self.table, &request(&req, &name, udp));
        let qtype = req.queries.first().map(|q| q.query_type());
        encode(&req, plan, qtype)
    }

    /// The record rules: a response for a parsed query, as over TCP.
    pub fn answer(&self, req: &Message) -> Message {
        let name = lower_name(req);
        let plan = self.rules.resolve(&self.table, &request(req, &name, false));
        message(req, &plan)
    }
}

/// The question's name as the rules read it: lower case, no trailing dot.
fn lower_name(req: &Message) -> String {
    match req.queries.as_slice() {
        [q] => q
            .name()
            .to_lowercase()
            .to_ascii()
            .trim_end_matches('.')
            .to_string(),
        _ => String::new(),
    }
}

/// What the rules read from a parsed request.
fn request<'q>(req: &Message, name: &'q str, udp: bool) -> Request<'q> {
    Request {
        opcode: req.metadata.op_code,
        edns: req.edns.as_ref().map(client_edns),
        question: match req.queries.as_slice() {
            [q] => Some(resolve::Question {
                name,
                qtype: q.query_type(),
                qclass: q.query_class(),
            }),
            _ => None,
        },
        udp,
    }
}

fn client_edns(e: &Edns) -> ClientEdns {
    ClientEdns {
        payload: e.max_payload(),
        version: e.version(),
        dnssec_ok: e.flags().dnssec_ok,
    }
}

/// The UDP payload limit for this query (the rule is
/// [`resolve::payload_limit`]).
pub fn udp_limit(req: &Message) -> u16 {
    let limit = resolve::payload_limit(true, req.edns.as_ref().map(client_edns));
    u16::try_from(limit).unwrap_or(MAX_UDP_PAYLOAD)
}

/// Encode; a reply that does not fit the plan's limit is measured record
/// by record, cut as the plan says ([`Plan::cut`]) and encoded again.
fn encode(req: &Message, mut plan: Plan<'_>, qtype: Option<RecordType>) -> Option<Reply> {
    if plan.forward {
        return Some(ReplyMeta::of(&plan, qtype).with(Vec::new()));
    }
    // A reply known not to fit is cut at once; any other is written
    // whole first. A set too big to fit is not built whole even then: a
    // record takes MIN_RECORD_LEN bytes at least, so a reply with more
    // than limit / MIN_RECORD_LEN of them cannot fit.
    if !plan.overflows {
        let most = plan.limit / resolve::MIN_RECORD_LEN + 1;
        let bytes = to_wire(&message_of(req, &plan, most))?;
        // Past 65,535 bytes hickory-proto stops writing records itself:
        // it sets TC, counts what it wrote and leaves the rolled-back part
        // of the record that did not fit behind the end (hickory-dns
        // #3917). Such a reply did not fit either.
        let cut_by_hickory = bytes.get(2).is_some_and(|f| f & 0x02 != 0);
        if bytes.len() <= plan.limit && !cut_by_hickory {
            return Some(ReplyMeta::of(&plan, qtype).with(bytes));
        }
    }
    let bytes = to_wire(&cut(req, &mut plan)?)?;
    Some(ReplyMeta::of(&plan, qtype).with(bytes))
}

/// A response as hickory-proto writes it, but for the owners spelled as
/// the question ([`Rr`]).
fn to_wire<'a>(resp: &'a Message) -> Option<Vec<u8>> {
    let q = question_name(resp);
    let wrap = |recs: &'a [Record]| recs.iter().map(|r| Rr::of(r, q)).collect::<Vec<_>>();
    let (an, ns, ar) = (
        wrap(&resp.answers),
        wrap(&resp.authorities),
        wrap(&resp.additionals),
    );
    let mut buf = Vec::with_capacity(512);
    let mut enc = BinEncoder::new(&mut buf);
    emit_message_parts(
        &resp.metadata,
        &mut resp.queries.iter(),
        &mut an.iter(),
        &mut ns.iter(),
        &mut ar.iter(),
        resp.edns.as_ref(),
        None,
        &mut enc,
    )
    .ok()?;
    Some(buf)
}

fn question_name(m: &Message) -> Option<&Name> {
    match m.queries.as_slice() {
        [q] => Some(q.name()),
        _ => None,
    }
}

/// One record as hickory-proto writes it, except that an owner spelled
/// byte for byte as the question's name is always a pointer to the
/// question (offset 12), as hickory-proto writes it for the first 120
/// names of a message. hickory-proto stops compressing after 120 names
/// (Unbound's bound on the cost of searching earlier names,
/// CVE-2024-8508); this pointer needs no search, so a set of thousands
/// owned by the question costs 2 bytes an owner, not the whole name:
/// 4,092 A records fit 65,535 bytes instead of 1,416. Such owners do not
/// count toward the 120, so the names after them (a SOA, glue) are
/// compressed as before. The fast path ([`super::fast`]) writes the same
/// bytes.
struct Rr<'a> {
    rec: &'a Record,
    at_question: bool,
}

impl<'a> Rr<'a> {
    fn of(rec: &'a Record, question: Option<&Name>) -> Self {
        let at_question = question.is_some_and(|q| q.eq_case(&rec.name));
        Self { rec, at_question }
    }
}

impl BinEncodable for Rr<'_> {
    fn emit(&self, enc: &mut BinEncoder<'_>) -> Result<(), ProtoError> {
        if !self.at_question {
            return self.rec.emit(enc);
        }
        // Record::emit with the owner written as the pointer.
        enc.emit_u16(0xc000 | HEADER_LEN)?;
        self.rec.record_type().emit(enc)?;
        self.rec.dns_class.emit(enc)?;
        enc.emit_u32(self.rec.ttl)?;
        let place = enc.place::<u16>()?;
        self.rec.data.emit(enc)?;
        let len = u16::try_from(enc.len_since_place(&place))
            .map_err(|_| ProtoError::from("record data longer than 65,535 bytes"))?;
        place.replace(enc, len)
    }
}

/// Where the question's name starts: right after the header.
const HEADER_LEN: u16 = 12;

/// SERVFAIL for a query no relay answered: the question echoed, no AA.
fn servfail(query: &[u8]) -> Option<Vec<u8>> {
    let req = Message::from_vec(query).ok()?;
    let plan = Plan::new(ResponseCode::ServFail, None, usize::MAX);
    message(&req, &plan).to_vec().ok()
}

/// A reply too big for its limit, cut ([`Plan::cut`]): its sections are
/// written as hickory-proto writes the whole message (the same names in
/// the same order, so the same compression), record by record, until one
/// ends past [`Plan::room`]; the plan is cut to what fits, and the
/// message of the cut plan made from the records already built.
fn cut(req: &Message, plan: &mut Plan<'_>) -> Option<Message> {
    let room = plan.room();
    let mut buf = Vec::with_capacity(plan.limit.min(4096) + 512);
    let mut enc = BinEncoder::new(&mut buf);
    // The header: its 12 bytes, whatever they say.
    enc.emit_vec(&[0; 12]).ok()?;
    let q = match req.queries.as_slice() {
        [q] if plan.question => {
            q.emit(&mut enc).ok()?;
            Some(q.name())
        }
        _ => None,
    };
    // A record fits when it ends within the room; one hickory-proto
    // refuses to write (past 65,535 bytes) does not.
    let used = std::cell::Cell::new(enc.offset());
    let mut fits = |rec: &Record| {
        let ok = Rr::of(rec, q).emit(&mut enc).is_ok();
        used.set(enc.offset());
        ok && enc.offset() <= room
    };
    let mut answers = Vec::new();
    let mut left = plan.answer_kept.unwrap_or(usize::MAX);
    let mut whole = true;
    'answer: for r in &plan.answer {
        // No more records than could fit the room left (each takes
        // MIN_RECORD_LEN bytes at least), and one: a set of thousands
        // makes only about those that fit.
        let most = room.saturating_sub(used.get()) / resolve::MIN_RECORD_LEN + 1;
        for rec in records(r, q, most) {
            if left == 0 || !fits(&rec) {
                whole = left == 0;
                break 'answer;
            }
            answers.push(rec);
            left -= 1;
        }
    }
    if whole && let Some(r) = &plan.authority {
        whole = records(r, q, usize::MAX).iter().all(&mut fits);
    }
    let mut glue = Vec::new();
    let mut rrsets = 0;
    if whole {
        for r in &plan.additional {
            let set = records(r, q, usize::MAX);
            if !set.iter().all(&mut fits) {
                break;
            }
            glue.extend(set);
            rrsets += 1;
        }
    }
    plan.cut(answers.len(), whole.then_some(rrsets));
    let mut resp = message_of(req, plan, 0);
    resp.answers = answers;
    resp.additionals = glue;
    Some(resp)
}

/// The plan as a response to `req` (its id, opcode, RD, CD and question).
pub(crate) fn message(req: &Message, plan: &Plan<'_>) -> Message {
    message_of(req, plan, usize::MAX)
}

/// [`message`] with at most `most` records in the answer and additional
/// sections (and no more answer records than the plan keeps).
fn message_of(req: &Message, plan: &Plan<'_>, mut most: usize) -> Message {
    let mut resp = Message::new(req.metadata.id, MessageType::Response, req.metadata.op_code);
    resp.metadata.recursion_desired = req.metadata.recursion_desired;
    resp.metadata.checking_disabled = req.metadata.checking_disabled;
    if let Some(o) = plan.opt {
        let mut e = Edns::new();
        e.set_max_payload(o.payload);
        e.set_dnssec_ok(o.dnssec_ok);
        resp.set_edns(e);
    }
    // BADVERS (16): hickory-proto writes the high bits into the OPT's
    // extended-rcode byte because an OPT is set.
    resp.metadata.response_code = plan.rcode;
    resp.metadata.authoritative = plan.aa;
    resp.metadata.truncation = plan.tc;
    let q = match req.queries.as_slice() {
        [q] if plan.question => {
            resp.add_query(q.clone());
            Some(q.name())
        }
        _ => None,
    };
    let mut left = plan.answer_kept.unwrap_or(usize::MAX).min(most);
    for r in &plan.answer {
        let recs = records(r, q, left);
        left -= recs.len();
        most -= recs.len();
        resp.add_answers(recs);
    }
    if let Some(r) = &plan.authority {
        resp.add_authorities(records(r, q, usize::MAX));
    }
    for r in &plan.additional {
        let recs = records(r, q, most);
        most -= recs.len();
        resp.add_additionals(recs);
    }
    resp
}

fn name(s: &str) -> Option<Name> {
    Name::from_ascii(format!("{s}.")).ok()
}

/// One entry of a plan as hickory records, the first `most` of them; a
/// name hickory cannot write leaves its record out.
fn records(r: &Records<'_>, qname: Option<&Name>, most: usize) -> Vec<Record> {
    if most == 0 {
        return vec![];
    }
    let owner = match &r.owner {
        Owner::Question => qname.cloned(),
        Owner::Name(s) => name(s),
    };
    let Some(owner) = owner else {
        return vec![];
    };
    let rec = |rdata: RData| Record::from_rdata(owner.clone(), r.ttl, rdata);
    match &r.data {
        Data::A(rrs) => rrs
            .a
            .iter()
            .take(most)
            .map(|ip| rec(RData::A(A(*ip))))
            .collect(),
        Data::Aaaa(rrs) => rrs
            .aaaa
            .iter()
            .take(most)
            .map(|ip| rec(RData::AAAA(AAAA(*ip))))
            .collect(),
        Data::Ip(IpAddr::V4(ip)) => vec![rec(RData::A(A(*ip)))],
        Data::Ip(IpAddr::V6(ip)) => vec![rec(RData::AAAA(AAAA(*ip)))],
        Data::Cname(t) => name(t)
            .map(|t| rec(RData::CNAME(CNAME(t))))
            .into_iter()
            .collect(),
        Data::Ptr(t) => name(t)
            .map(|t| rec(RData::PTR(PTR(t))))
            .into_iter()
            .collect(),
        Data::Ns(t) => name(t).map(|t| rec(RData::NS(NS(t)))).into_iter().collect(),
        Data::Srv { rrs, weight, zone } => rrs
            .srv
            .iter()
            .filter_map(|s| {
                let target = name(&format!("{}.{zone}", s.target))?;
                Some(rec(RData::SRV(SRV::new(0, *weight, s.port, target))))
            })
            .take(most)
            .collect(),
        Data::Txt(t) => vec![rec(RData::TXT(TXT::new(vec![t.to_string()])))],
        Data::Soa(s) => {
            let (Some(mname), Some(rname)) = (name(s.mname), name(s.rname)) else {
                return vec![];
            };
            let [refresh, retry, expire] = s.timers.map(|t| t as i32);
            let soa = SOA::new(mname, rname, s.serial, refresh, retry, expire, s.minimum);
            vec![rec(RData::SOA(soa))]
        }
    }
}

/// The `--rrl` slip of an encoded reply: its header, question and OPT,
/// TC=1 and no record ([`Plan::truncate`] keeping none).
pub fn slip(reply: &[u8]) -> Option<Vec<u8>> {
    let m = Message::from_vec(reply).ok()?;
    let opt = m.edns.as_ref().map(|e| resolve::ReplyEdns {
        payload: e.max_payload(),
        dnssec_ok: e.flags().dnssec_ok,
    });
    let mut plan = Plan::header_only(m.metadata.response_code, m.metadata.authoritative, opt);
    plan.question = !m.queries.is_empty();
    plan.truncate(0);
    message(&m, &plan).to_vec().ok()
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
        forward: false,
    })
}

#[cfg(test)]
mod tests;
