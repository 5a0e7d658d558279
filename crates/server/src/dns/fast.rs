//! The wire fast path: the queries that make up nearly all of a
//! training cluster's traffic — one A or AAAA question for a name in the
//! zone, and the search-path misses of `ndots:5` that come back NXDOMAIN
//! or NODATA — are read straight from bytes, resolved into a plan by
//! [`super::resolve`] like every other query, and the plan written
//! straight into bytes, with no `Message` built, no `Name` parsed and no
//! allocation.
//!
//! It decides no rule: it reads the request (declining anything unusual:
//! compression or odd characters in the question, meta types, several
//! records) and writes the plans whose shape it knows (the question,
//! address records owned by the question's name, a SOA in Authority, an
//! OPT, any rcode); every other plan (CNAMEs, SRV, TXT, glue, PTR...)
//! returns `None` and takes the general path in [`super::answer`]. Its
//! bytes must equal the general encoder's: `dns::tests` (a proptest over
//! random indexes and questions) and the `encoders` fuzz target compare
//! them, and `answer::tests::fast_path_agrees_with_the_general_path` field
//! by field on every kind of query and EDNS record.

use hickory_proto::op::OpCode;
use hickory_proto::rr::{DNSClass, RecordType};

use super::reply::ReplyMeta;
use super::resolve::{self, ClientEdns, Data, Owner, Plan, Request, Rules};
use crate::index::Table;

const HEADER: usize = 12;
const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const TYPE_OPT: u16 = 41;
const TYPE_SOA: u16 = 6;
const CLASS_IN: u16 = 1;
/// hickory-proto compresses the first 120 names of a message and writes
/// the rest in full (Unbound's limit, CVE-2024-8508); the fast path
/// writes the same bytes. An owner spelled as the question is always a
/// pointer to it and does not count (the general encoder's `Rr`).
const COMPRESSED_NAME_LIMIT: usize = 120;

/// A question the fast path can take, read from the request bytes.
struct Question {
    id: [u8; 2],
    /// RD and CD, copied into the reply.
    rd: bool,
    cd: bool,
    /// End of the question section (name, type, class).
    end: usize,
    qtype: u16,
    /// The client's OPT record, when it sent one.
    edns: Option<ClientEdns>,
    /// Length of the name's text form (the key).
    key_len: usize,
    /// Text offsets from here on were sent in lower case, so a suffix
    /// starting there is byte-equal to the lower-case name it spells.
    lower_from: usize,
}

/// What the fast path did with a request. Returned in place once per
/// query: boxing the plan would allocate on every handover.
#[allow(clippy::large_enum_variant)]
pub(super) enum Fast<'a> {
    /// Answered into `out`.
    Done(ReplyMeta),
    /// Resolved, but the plan is not one this encoder writes: the general
    /// encoder takes it as it is, so a query is never resolved twice.
    Plan(Plan<'a>),
    /// Not a request this reader takes; `out` is in an unspecified state.
    Declined,
}

/// Answer `bytes` into `out` if the fast path can.
pub(super) fn answer<'a>(
    bytes: &[u8],
    udp: bool,
    table: &Table,
    rules: &'a Rules,
    out: &mut Vec<u8>,
) -> Fast<'a> {
    let mut key = [0u8; 255];
    let Some(q) = parse(bytes, &mut key) else {
        return Fast::Declined;
    };
    let Ok(name) = std::str::from_utf8(&key[..q.key_len]) else {
        return Fast::Declined;
    };
    let req = Request {
        opcode: OpCode::Query,
        edns: q.edns,
        question: Some(resolve::Question {
            name,
            qtype: RecordType::from(q.qtype),
            qclass: DNSClass::IN,
        }),
        udp,
    };
    let mut plan = rules.resolve(table, &req);
    if plan.forward {
        // A node instance's question for the relays: nothing is written.
        return Fast::Done(ReplyMeta::of(&plan, Some(RecordType::from(q.qtype))));
    }
    if !fits_shape(&plan) {
        return Fast::Plan(plan);
    }
    out.clear();
    let Some(fit) = write(&q, bytes, name, &plan, out) else {
        return Fast::Plan(plan);
    };
    if out.len() > plan.limit {
        // No glue in this shape: the answer and authority sections are
        // what does not fit.
        plan.cut(fit, None);
        out.clear();
        if write(&q, bytes, name, &plan, out).is_none() {
            return Fast::Plan(plan);
        }
    }
    Fast::Done(ReplyMeta::of(&plan, Some(RecordType::from(q.qtype))))
}

/// The plans this encoder writes: the question echoed, address records
/// owned by the question's name, at most a SOA in Authority, no glue.
fn fits_shape(plan: &Plan<'_>) -> bool {
    plan.question
        && plan.additional.is_empty()
        && plan.answer.iter().all(|r| {
            r.owner == Owner::Question && matches!(r.data, Data::A(_) | Data::Aaaa(_) | Data::Ip(_))
        })
        && plan
            .authority
            .as_ref()
            .is_none_or(|r| matches!(r.owner, Owner::Name(_)) && matches!(r.data, Data::Soa(_)))
}

/// Read the header, the one question and an optional OPT record. The name
/// goes into `key` lower-cased and dotted, without the trailing dot.
/// Anything unusual is `None`.
fn parse(b: &[u8], key: &mut [u8; 255]) -> Option<Question> {
    if b.len() < HEADER {
        return None;
    }
    let flags = b[2];
    // QR = 0, opcode QUERY, and nothing in the answer or authority sections.
    if flags & 0xf8 != 0 || be16(b, 4)? != 1 || be16(b, 6)? != 0 || be16(b, 8)? != 0 {
        return None;
    }
    let arcount = be16(b, 10)?;
    if arcount > 1 {
        return None;
    }
    let mut i = HEADER;
    let mut k = 0;
    let mut lower_from = 0;
    loop {
        let len = usize::from(*b.get(i)?);
        i += 1;
        if len == 0 {
            break;
        }
        // No compression in a question we take, and only the characters
        // whose text form is the same in every presentation.
        if len > 63 || k + len + 1 > key.len() {
            return None;
        }
        if k > 0 {
            key[k] = b'.';
            k += 1;
        }
        for &c in b.get(i..i + len)? {
            if c.is_ascii_uppercase() {
                lower_from = k + 1;
            }
            let c = c.to_ascii_lowercase();
            if !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'_') {
                return None;
            }
            key[k] = c;
            k += 1;
        }
        i += len;
    }
    // The root, and names longer than 255 octets (which the general
    // parser rejects).
    if k == 0 || i - HEADER > 255 {
        return None;
    }
    let qtype = be16(b, i)?;
    // Meta types (OPT, TSIG, IXFR, AXFR, ANY, ...) take the general path.
    if qtype == TYPE_OPT || qtype >= 128 {
        return None;
    }
    if be16(b, i + 2)? != CLASS_IN {
        return None;
    }
    let end = i + 4;
    let mut edns = None;
    let mut j = end;
    if arcount == 1 {
        // The OPT pseudo-record: root owner, type 41, class = payload size,
        // TTL = extended rcode, version, flags; options are ignored as the
        // general path ignores them.
        if *b.get(j)? != 0 || be16(b, j + 1)? != TYPE_OPT {
            return None;
        }
        let payload = be16(b, j + 3)?;
        let (ext_rcode, version) = (*b.get(j + 5)?, *b.get(j + 6)?);
        if ext_rcode != 0 {
            return None; // meaningless in a query: the general path decides
        }
        let dnssec_ok = *b.get(j + 7)? & 0x80 != 0;
        let rdlen = usize::from(be16(b, j + 9)?);
        j += 11 + rdlen;
        if j > b.len() {
            return None;
        }
        edns = Some(ClientEdns {
            payload,
            version,
            dnssec_ok,
        });
    }
    if j != b.len() {
        return None; // trailing bytes: let the general parser decide
    }
    let q = Question {
        id: [b[0], b[1]],
        rd: flags & 0x01 != 0,
        cd: b[3] & 0x10 != 0,
        end,
        qtype,
        edns,
        key_len: k,
        lower_from,
    };
    Some(q)
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// The plan into `out`; `None` for a shape [`fits_shape`] let through
/// but the writer cannot reproduce byte for byte. Else how many answer
/// records end within the plan's [`Plan::room`]: when `out` ends past the
/// plan's limit, the reply must be cut ([`Plan::cut`]), and the writing
/// stopped at the first answer record past the limit.
fn write(q: &Question, req: &[u8], key: &str, plan: &Plan<'_>, out: &mut Vec<u8>) -> Option<usize> {
    let mut answers = 0usize;
    for r in &plan.answer {
        answers += match &r.data {
            Data::A(rrs) => rrs.a.len(),
            Data::Aaaa(rrs) => rrs.aaaa.len(),
            _ => 1,
        };
    }
    let keep = plan.answer_kept.unwrap_or(usize::MAX);
    let answers = answers.min(keep);
    let counts = [
        u16::try_from(answers).ok()?,
        u16::from(plan.authority.is_some()),
        u16::from(plan.opt.is_some()),
    ];
    // Never more than the limit and one record: writing stops there.
    let size = q.end + answers * 28 + plan.authority.as_ref().map_or(0, |_| 64) + 11;
    out.reserve(size.min(plan.limit + 28));
    // QR, opcode 0, AA, TC, RD; RA = 0, AD = 0, CD, the rcode's low bits.
    out.extend_from_slice(&q.id);
    out.push(
        0x80 | if plan.aa { 0x04 } else { 0 } | if plan.tc { 0x02 } else { 0 } | u8::from(q.rd),
    );
    out.push(if q.cd { 0x10 } else { 0 } | (u16::from(plan.rcode) & 0x0f) as u8);
    out.extend_from_slice(&1u16.to_be_bytes());
    for c in counts {
        out.extend_from_slice(&c.to_be_bytes());
    }
    // The question, as the client sent it.
    out.extend_from_slice(&req[HEADER..q.end]);
    let mut names = Names {
        q,
        key,
        count: 1,
        stored: [(0, ""); 8],
        n_stored: 0,
    };
    let (room, limit) = (plan.room(), plan.limit);
    let (mut written, mut fit) = (0usize, 0usize);
    for r in &plan.answer {
        let ttl = r.ttl.to_be_bytes();
        // One record; false once the plan's records are all written or
        // the reply is past its limit.
        let mut rr = |out: &mut Vec<u8>, rtype: u16, rdata: &[u8]| {
            if written == answers {
                return false;
            }
            names.question(out);
            out.extend_from_slice(&rtype.to_be_bytes());
            out.extend_from_slice(&CLASS_IN.to_be_bytes());
            out.extend_from_slice(&ttl);
            out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
            out.extend_from_slice(rdata);
            written += 1;
            fit += usize::from(out.len() <= room);
            out.len() <= limit
        };
        let more = match &r.data {
            Data::A(rrs) => rrs.a.iter().all(|ip| rr(out, TYPE_A, &ip.octets())),
            Data::Aaaa(rrs) => rrs.aaaa.iter().all(|ip| rr(out, TYPE_AAAA, &ip.octets())),
            Data::Ip(std::net::IpAddr::V4(ip)) => rr(out, TYPE_A, &ip.octets()),
            Data::Ip(std::net::IpAddr::V6(ip)) => rr(out, TYPE_AAAA, &ip.octets()),
            _ => return None,
        };
        if out.len() > limit {
            return Some(fit);
        }
        if !more {
            break;
        }
    }
    if let Some(r) = &plan.authority {
        let (Owner::Name(owner), Data::Soa(soa)) = (&r.owner, &r.data) else {
            return None;
        };
        names.write(owner, out)?;
        out.extend_from_slice(&TYPE_SOA.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&r.ttl.to_be_bytes());
        let rdlen_at = out.len();
        out.extend_from_slice(&[0, 0]);
        names.write(soa.mname, out)?;
        names.write(soa.rname, out)?;
        out.extend_from_slice(&soa.serial.to_be_bytes());
        for t in soa.timers {
            out.extend_from_slice(&t.to_be_bytes());
        }
        out.extend_from_slice(&soa.minimum.to_be_bytes());
        let rdlen = u16::try_from(out.len() - rdlen_at - 2).ok()?;
        out[rdlen_at..rdlen_at + 2].copy_from_slice(&rdlen.to_be_bytes());
    }
    // Our OPT: root owner, our payload size, TTL = extended rcode, version
    // 0, the DO bit the plan says and no other flag, no options.
    if let Some(e) = plan.opt {
        out.push(0);
        out.extend_from_slice(&TYPE_OPT.to_be_bytes());
        out.extend_from_slice(&e.payload.to_be_bytes());
        let flags = if e.dnssec_ok { 0x80 } else { 0 };
        out.extend_from_slice(&[plan.rcode.high(), 0, flags, 0, 0, 0]);
    }
    Some(fit)
}

/// Names written so far, for compression as hickory-proto does it: a
/// suffix (whole labels) that is byte-equal to one written earlier becomes
/// a pointer to it, the first 120 names only (the question's name again
/// is always a pointer, and not counted).
struct Names<'r> {
    q: &'r Question,
    /// The question's name, lower case, dotted.
    key: &'r str,
    /// Names written with a search for earlier ones, the question's
    /// included (not its repetitions as owners).
    count: usize,
    /// Names written in full after the question: offset and text.
    stored: [(u16, &'r str); 8],
    n_stored: usize,
}

impl<'r> Names<'r> {
    /// The question's name again, as an owner: a pointer to it, however
    /// many came before (no search, so no bound on its cost).
    fn question(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[0xc0, 0x0c]);
    }

    /// Where a name (lower case, dotted) was written before.
    fn find(&self, suffix: &str) -> Option<u16> {
        // A suffix of the question's name sent in lower case.
        if let Some(p) = self.key.len().checked_sub(suffix.len())
            && self.key.ends_with(suffix)
            && (p == 0 || self.key.as_bytes()[p - 1] == b'.')
            && p >= self.q.lower_from
        {
            return u16::try_from(HEADER + p).ok();
        }
        self.stored[..self.n_stored]
            .iter()
            .find(|(_, s)| *s == suffix)
            .map(|&(at, _)| at)
    }

    /// Write `name` (absolute, no trailing dot): its labels until a
    /// suffix written before, then a pointer to it. `None` for a name
    /// that is not lower case and plain or would need more than the
    /// stored room, or a message past the compression limit.
    fn write(&mut self, name: &'r str, out: &mut Vec<u8>) -> Option<()> {
        if self.count >= COMPRESSED_NAME_LIMIT
            || name.is_empty()
            || name.len() > 253
            || !name.bytes().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'_' | b'.')
            })
        {
            return None;
        }
        self.count += 1;
        let mut rest = name;
        loop {
            if let Some(at) = self.find(rest) {
                out.extend_from_slice(&(0xc000 | at).to_be_bytes());
                return Some(());
            }
            if self.n_stored == self.stored.len() {
                return None;
            }
            let at = u16::try_from(out.len()).ok().filter(|&a| a < 0x4000)?;
            self.stored[self.n_stored] = (at, rest);
            self.n_stored += 1;
            let (label, next) = rest.split_once('.').unwrap_or((rest, ""));
            if label.is_empty() || label.len() > 63 {
                return None;
            }
            out.push(label.len() as u8);
            out.extend_from_slice(label.as_bytes());
            if next.is_empty() {
                out.push(0);
                return Some(());
            }
            rest = next;
        }
    }
}
