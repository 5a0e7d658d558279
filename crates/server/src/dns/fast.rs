//! The wire-level fast path: the queries that make up nearly all of a
//! training cluster's traffic — one A or AAAA question for a name in the
//! zone, and the search-path misses of `ndots:5` that come back NXDOMAIN
//! or NODATA — are read and answered straight from and into bytes, with no
//! `Message` built, no `Name` parsed and no allocation.
//!
//! It also answers BADVERS (an OPT version above 0) for any question it
//! can read. Everything else (other types, CNAMEs, the apex and the fixed
//! names, reverse names, unsynced index, odd headers or names) returns
//! `None` and takes the general path in [`super::answer`], which holds the
//! rules. The two must agree;
//! `answer_tests::fast_path_agrees_with_the_general_path` compares them on
//! every kind of query and EDNS record, and the `request` fuzz target runs
//! this code on every input.

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use super::answer::{MAX_UDP_PAYLOAD, ReplyMeta};
use crate::index::{Lookup, Rrs, Table};

const HEADER: usize = 12;
const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const TYPE_OPT: u16 = 41;
const TYPE_SOA: u16 = 6;
const CLASS_IN: u16 = 1;
/// SOA timers, as the general path writes them.
const SOA_TIMERS: [u32; 3] = [7200, 1800, 86400];

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
    edns: Option<Opt>,
}

/// What the fast path reads from the client's OPT record; its options and
/// other flags are ignored, as the general path ignores them.
#[derive(Clone, Copy)]
struct Opt {
    /// The client's UDP payload size, as sent (clamped where it is used).
    payload: u16,
    version: u8,
    /// The DO bit, copied into the reply (RFC 3225 §3).
    dnssec_ok: bool,
}

/// The zone data the fast path needs, precomputed from the answer config.
pub(super) struct Zones<'a> {
    /// Lower-case zone names without the trailing dot, longest first.
    pub by_len: &'a [String],
    pub ttl: u32,
    pub negative_ttl: u32,
}

/// Answer `bytes` into `out` if the fast path can; `None` leaves `out` in
/// an unspecified state and means "use the general path".
pub(super) fn answer(
    bytes: &[u8],
    udp: bool,
    table: &Table,
    zones: &Zones<'_>,
    out: &mut Vec<u8>,
) -> Option<ReplyMeta> {
    let mut key = [0u8; 255];
    let (q, key_len) = parse(bytes, &mut key)?;
    if q.edns.is_some_and(|e| e.version > 0) {
        // Before everything else, as in the general path: the client
        // does not speak our EDNS version, whatever the name. A question
        // the parser took is at most 259 bytes: the reply fits 512.
        out.clear();
        return Some(badvers(&q, bytes, out));
    }
    if !table.is_synced() {
        return None; // SERVFAIL: rare, and the general path says why
    }
    let name = std::str::from_utf8(&key[..key_len]).ok()?;
    let (rel, zone_at) = place(name, zones)?;
    let limit = if !udp {
        usize::from(u16::MAX)
    } else {
        q.edns
            .map_or(512, |e| usize::from(e.payload.clamp(512, MAX_UDP_PAYLOAD)))
    };
    out.clear();
    match table.lookup(rel) {
        Lookup::Missing => negative(
            &q,
            bytes,
            zone_at,
            ResponseCode::NXDomain,
            zones,
            table,
            out,
        ),
        Lookup::Empty => negative(&q, bytes, zone_at, ResponseCode::NoError, zones, table, out),
        Lookup::Found(rrs) => {
            if rrs.cname.is_some() {
                return None;
            }
            match q.qtype {
                TYPE_A if !rrs.a.is_empty() => addresses(&q, bytes, &rrs, limit, zones, out),
                TYPE_AAAA if !rrs.aaaa.is_empty() => addresses(&q, bytes, &rrs, limit, zones, out),
                TYPE_A | TYPE_AAAA => {
                    negative(&q, bytes, zone_at, ResponseCode::NoError, zones, table, out)
                }
                _ => None,
            }
        }
    }
    .filter(|_| out.len() <= limit)
}

/// Read the header, the one question and an optional OPT record. The name
/// goes into `key` lower-cased and dotted, without the trailing dot.
/// Anything unusual is `None`.
fn parse(b: &[u8], key: &mut [u8; 255]) -> Option<(Question, usize)> {
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
        edns = Some(Opt {
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
    };
    Some((q, k))
}

/// The key of `name` relative to its zone, and the offset of the zone's
/// first label in the question (for compression pointers). `None` for the
/// apex, the fixed names and names outside the zones.
fn place<'n>(name: &'n str, zones: &Zones<'_>) -> Option<(&'n str, usize)> {
    for z in zones.by_len {
        let Some(rel) = name
            .strip_suffix(z.as_str())
            .and_then(|r| r.strip_suffix('.'))
        else {
            continue;
        };
        if rel.is_empty() || matches!(rel, "dns-version" | "ns.dns" | "dns") {
            return None;
        }
        // Each dot of the text form is a length byte in the wire form, so
        // a label at text offset p starts at HEADER + p.
        return Some((rel, HEADER + rel.len() + 1));
    }
    None
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Header and question (copied as the client sent it), then the counts.
fn begin(
    q: &Question,
    req: &[u8],
    rcode: ResponseCode,
    tc: bool,
    counts: [u16; 3],
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(&q.id);
    // QR, opcode 0, AA, TC, RD; RA = 0, AD = 0, CD, rcode.
    out.push(0x80 | 0x04 | if tc { 0x02 } else { 0 } | u8::from(q.rd));
    out.push(if q.cd { 0x10 } else { 0 } | (u16::from(rcode) & 0x0f) as u8);
    out.extend_from_slice(&1u16.to_be_bytes());
    let ar = counts[2] + u16::from(q.edns.is_some());
    for c in [counts[0], counts[1], ar] {
        out.extend_from_slice(&c.to_be_bytes());
    }
    out.extend_from_slice(&req[HEADER..q.end]);
}

/// Our OPT record when the client sent one: root owner, payload 1232,
/// TTL = extended rcode, version 0, the client's DO bit (RFC 3225 §3) and
/// no other flag, no options (RFC 6891 §6.1.2: never echoed).
fn opt(q: &Question, ext_rcode: u8, out: &mut Vec<u8>) {
    if let Some(e) = q.edns {
        out.push(0);
        out.extend_from_slice(&TYPE_OPT.to_be_bytes());
        out.extend_from_slice(&MAX_UDP_PAYLOAD.to_be_bytes());
        let flags = if e.dnssec_ok { 0x80 } else { 0 };
        out.extend_from_slice(&[ext_rcode, 0, flags, 0, 0, 0]);
    }
}

/// RFC 6891 §6.1.3: an OPT version podns does not implement gets BADVERS
/// (16: header RCODE 0, extended-rcode 1 in our OPT of version 0) with the
/// question echoed and no AA (nothing was looked up).
fn badvers(q: &Question, req: &[u8], out: &mut Vec<u8>) -> ReplyMeta {
    let rcode = ResponseCode::BADVERS;
    begin(q, req, rcode, false, [0, 0, 0], out);
    out[2] &= !0x04; // AA off: no zone data was consulted
    opt(q, rcode.high(), out);
    ReplyMeta {
        rcode,
        qtype: Some(RecordType::from(q.qtype)),
        truncated: false,
    }
}

fn addresses(
    q: &Question,
    req: &[u8],
    rrs: &Rrs,
    limit: usize,
    zones: &Zones<'_>,
    out: &mut Vec<u8>,
) -> Option<ReplyMeta> {
    let (n, rdlen) = if q.qtype == TYPE_A {
        (rrs.a.len(), 4)
    } else {
        (rrs.aaaa.len(), 16)
    };
    let opt_len = if q.edns.is_some() { 11 } else { 0 };
    let size = q.end + n * (12 + rdlen) + opt_len;
    let qtype = Some(RecordType::from(q.qtype));
    if size > limit {
        // RFC 2181 §9: TC=1 and the question only; the client retries
        // over TCP.
        begin(q, req, ResponseCode::NoError, true, [0, 0, 0], out);
        opt(q, 0, out);
        return Some(ReplyMeta {
            rcode: ResponseCode::NoError,
            qtype,
            truncated: true,
        });
    }
    let count = u16::try_from(n).ok()?;
    out.reserve(size);
    begin(q, req, ResponseCode::NoError, false, [count, 0, 0], out);
    let mut rr = |rdata: &[u8]| {
        // The owner is the question's name: a pointer to offset 12.
        out.extend_from_slice(&[0xc0, 0x0c]);
        out.extend_from_slice(&q.qtype.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&zones.ttl.to_be_bytes());
        out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        out.extend_from_slice(rdata);
    };
    if q.qtype == TYPE_A {
        rrs.a.iter().for_each(|ip| rr(&ip.octets()));
    } else {
        rrs.aaaa.iter().for_each(|ip| rr(&ip.octets()));
    }
    opt(q, 0, out);
    Some(ReplyMeta {
        rcode: ResponseCode::NoError,
        qtype,
        truncated: false,
    })
}

/// NXDOMAIN or NODATA with the zone's SOA in Authority (RFC 2308), its
/// owner and names compressed against the zone's labels in the question.
fn negative(
    q: &Question,
    req: &[u8],
    zone_at: usize,
    rcode: ResponseCode,
    zones: &Zones<'_>,
    table: &Table,
    out: &mut Vec<u8>,
) -> Option<ReplyMeta> {
    let zone_ptr = 0xc000 | u16::try_from(zone_at).ok()?;
    begin(q, req, rcode, false, [0, 1, 0], out);
    out.extend_from_slice(&zone_ptr.to_be_bytes());
    out.extend_from_slice(&TYPE_SOA.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    out.extend_from_slice(&zones.negative_ttl.to_be_bytes());
    let rdlen_at = out.len();
    out.extend_from_slice(&[0, 0]);
    // MNAME ns.dns.<zone>, RNAME hostmaster.<zone>
    out.extend_from_slice(b"\x02ns\x03dns");
    out.extend_from_slice(&zone_ptr.to_be_bytes());
    out.extend_from_slice(b"\x0ahostmaster");
    out.extend_from_slice(&zone_ptr.to_be_bytes());
    out.extend_from_slice(&(table.generation() as u32).to_be_bytes());
    for t in SOA_TIMERS {
        out.extend_from_slice(&t.to_be_bytes());
    }
    out.extend_from_slice(&zones.negative_ttl.to_be_bytes());
    let rdlen = (out.len() - rdlen_at - 2) as u16;
    out[rdlen_at..rdlen_at + 2].copy_from_slice(&rdlen.to_be_bytes());
    opt(q, 0, out);
    Some(ReplyMeta {
        rcode,
        qtype: Some(RecordType::from(q.qtype)),
        truncated: false,
    })
}
