//! The slim Protobuf decoder: the Kubernetes wire format read straight into
//! the slim types [`slim`](super::slim) builds from JSON, so `convert` and
//! the index never know which wire fed them.
//!
//! The format (kubernetes.io "API concepts: Protobuf encoding";
//! apimachinery `runtime/serializer/protobuf`): a body is the 4-byte magic
//! `k8s\0` followed by a `runtime.Unknown` envelope (`typeMeta` = 1, `raw` =
//! 2, `contentEncoding` = 3, `contentType` = 4) whose `raw` is the object.
//! A list is one object whose field 2 repeats the items (`metadata` = 1 is a
//! `ListMeta`). A watch (`;stream=watch`) is a sequence of frames, each a
//! 4-byte big-endian length and an enveloped `metav1.WatchEvent` (`type` = 1,
//! `object` = 2, a `RawExtension` whose `raw` = 1 is the enveloped object).
//! Field numbers are those of `k8s.io/api` and `apimachinery`'s
//! `generated.proto` (the tests encode with the `k8s-pb` crate, generated
//! from the same files, so this decoder cannot agree with itself on a
//! mistake).
//!
//! The walker reads only the fields DNS needs and steps over every other
//! one by its length, without allocating: only the strings that are kept
//! are copied. Decoding is total like the JSON path: a field of the wrong
//! wire type, invalid UTF-8 or a truncated sub-message marks the object
//! `malformed` (named by the field's JSON key), for `convert` to reject and
//! the watcher to count. Only a broken envelope or list framing fails the
//! whole body, as invalid JSON syntax fails a JSON list.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::watch::{Bookmark, BookmarkMeta};
use kube::core::{Status, TypeMeta, WatchEvent};

use super::slim::{
    ConditionRaw, ContainerPortRaw, ContainerRaw, EndpointConditionsRaw, EndpointPortRaw,
    EndpointRaw, IndexAnnotations, IntOrStr, JobSpecRaw, KeyFilter, Loose, LooseStr, LooseVec,
    PodIpRaw, PodSpecRaw, PodStatusRaw, ServicePortRaw, ServiceSpecRaw, SlimEndpointSlice, SlimJob,
    SlimMeta, SlimNode, SlimPod, SlimService, SlimServiceCidr,
};

/// The media type of Kubernetes Protobuf.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// The prefix of every Protobuf body and watch frame.
pub const MAGIC: &[u8; 4] = b"k8s\0";
/// The annotation on the bookmark that ends a streaming list.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// A body or frame this decoder cannot read at all.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("failed to decode protobuf: {0}")]
pub struct PbError(pub &'static str);

/// One field's value, borrowed from the buffer.
#[derive(Clone, Copy, Debug)]
enum Val<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// Fixed 32/64-bit values: no field DNS reads has them.
    Fixed,
}

fn varint(b: &[u8], i: &mut usize) -> Result<u64, PbError> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *b.get(*i).ok_or(PbError("truncated varint"))?;
        *i += 1;
        if shift == 63 && byte > 1 {
            return Err(PbError("varint overflows 64 bits"));
        }
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(PbError("varint too long"))
}

/// The fields of one message, in wire order. Stops at the first framing
/// error (yielded once).
struct Fields<'a> {
    b: &'a [u8],
    i: usize,
}

fn fields(b: &[u8]) -> Fields<'_> {
    Fields { b, i: 0 }
}

impl<'a> Fields<'a> {
    fn step(&mut self) -> Result<(u32, Val<'a>), PbError> {
        let key = varint(self.b, &mut self.i)?;
        let num = u32::try_from(key >> 3).map_err(|_| PbError("field number too large"))?;
        if num == 0 {
            return Err(PbError("field number 0"));
        }
        let skip = |i: &mut usize, n: usize, len: usize| {
            let end = i.checked_add(n).filter(|e| *e <= len);
            end.map(|e| *i = e).ok_or(PbError("truncated field"))
        };
        let val = match key & 7 {
            0 => Val::Varint(varint(self.b, &mut self.i)?),
            1 => {
                skip(&mut self.i, 8, self.b.len())?;
                Val::Fixed
            }
            5 => {
                skip(&mut self.i, 4, self.b.len())?;
                Val::Fixed
            }
            2 => {
                let n = usize::try_from(varint(self.b, &mut self.i)?)
                    .map_err(|_| PbError("length too large"))?;
                let start = self.i;
                skip(&mut self.i, n, self.b.len())?;
                Val::Bytes(&self.b[start..self.i])
            }
            _ => return Err(PbError("unsupported wire type")),
        };
        Ok((num, val))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Val<'a>), PbError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.i >= self.b.len() {
            return None;
        }
        let r = self.step();
        if r.is_err() {
            self.i = self.b.len();
        }
        Some(r)
    }
}

fn str_of(v: Val<'_>) -> Option<&str> {
    match v {
        Val::Bytes(b) => std::str::from_utf8(b).ok(),
        _ => None,
    }
}

fn loose_str(v: Val<'_>) -> LooseStr {
    str_of(v).map_or(Loose::Bad, |s| Loose::Ok(s.to_owned()))
}

fn loose_bool(v: Val<'_>) -> Loose<bool> {
    match v {
        Val::Varint(n) => Loose::Ok(n != 0),
        _ => Loose::Bad,
    }
}

/// `int32`/`int64`: a negative `int32` is sign-extended to ten bytes.
fn loose_int(v: Val<'_>) -> Loose<i64> {
    match v {
        Val::Varint(n) => Loose::Ok(n as i64),
        _ => Loose::Bad,
    }
}

fn sub(v: Val<'_>) -> Option<&[u8]> {
    match v {
        Val::Bytes(b) => Some(b),
        _ => None,
    }
}

/// Remembers the first malformed field of a message.
#[derive(Default)]
struct Problem(Option<&'static str>);

impl Problem {
    fn at(&mut self, key: &'static str) {
        self.0.get_or_insert(key);
    }
    /// Records `key` when `l` is `Bad`, and passes it on.
    fn check<T>(&mut self, key: &'static str, l: Loose<T>) -> Loose<T> {
        if matches!(l, Loose::Bad) {
            self.at(key);
        }
        l
    }
}

/// Appends a decoded element to a repeated field.
fn push<T>(v: &mut LooseVec<T>, item: T) {
    match v {
        Loose::Ok(items) => items.push(Loose::Ok(item)),
        _ => *v = Loose::Ok(vec![Loose::Ok(item)]),
    }
}

/// A sub-message decoder: `None` when the bytes are not a message.
fn message<T: Default>(
    v: Val<'_>,
    key: &'static str,
    p: &mut Problem,
    each: impl FnMut(&mut T, u32, Val<'_>, &mut Problem),
) -> Option<T> {
    let Some(b) = sub(v) else {
        p.at(key);
        return None;
    };
    let mut out = T::default();
    let mut each = each;
    for f in fields(b) {
        match f {
            Ok((n, v)) => each(&mut out, n, v, p),
            Err(_) => {
                p.at(key);
                break;
            }
        }
    }
    Some(out)
}

/// `metav1.Time` (`seconds` = 1, `nanos` = 2) as the RFC 3339 text JSON
/// carries; the zero time (an empty message) is absent, as JSON's `null`.
fn time(v: Val<'_>, key: &'static str, p: &mut Problem) -> Option<String> {
    let secs = message::<i64>(v, key, p, |s, n, v, p| {
        if n == 1 {
            match loose_int(v) {
                Loose::Ok(x) => *s = x,
                _ => p.at(key),
            }
        }
    })?;
    if secs == 0 {
        return None;
    }
    match jiff::Timestamp::from_second(secs) {
        Ok(t) => Some(t.to_string()),
        Err(_) => {
            p.at(key);
            None
        }
    }
}

/// A `map<string, string>` entry (`key` = 1, `value` = 2), kept only when
/// `keep` says so; dropped keys are never allocated.
fn map_entry(
    v: Val<'_>,
    key: &'static str,
    p: &mut Problem,
    keep: fn(&str) -> bool,
    out: &mut Vec<(String, String)>,
) {
    let Some(b) = sub(v) else {
        return p.at(key);
    };
    let (mut k, mut val): (&str, &str) = ("", "");
    for f in fields(b) {
        match f {
            Ok((1, v)) => match str_of(v) {
                Some(s) => k = s,
                None => return p.at(key),
            },
            Ok((2, v)) => match str_of(v) {
                Some(s) => val = s,
                None => return p.at(key),
            },
            Ok(_) => {}
            Err(_) => return p.at(key),
        }
    }
    if keep(k) {
        // A repeated key replaces the earlier one, as in a Go map.
        match out.iter_mut().find(|(ek, _)| ek == k) {
            Some(e) => e.1 = val.to_owned(),
            None => out.push((k.to_owned(), val.to_owned())),
        }
    }
}

/// `ObjectMeta`: identity for kube-runtime plus what DNS reads.
fn meta(v: Val<'_>, p: &mut Problem) -> (ObjectMeta, SlimMeta) {
    let mut om = ObjectMeta::default();
    let mut sm = SlimMeta::default();
    let Some(b) = sub(v) else {
        p.at("metadata");
        return (om, sm);
    };
    let s =
        |v: Val<'_>, key: &'static str, p: &mut Problem| p.check(key, loose_str(v)).into_option();
    for f in fields(b) {
        let (n, v) = match f {
            Ok(f) => f,
            Err(_) => {
                p.at("metadata");
                break;
            }
        };
        match n {
            1 => om.name = s(v, "name", p),
            3 => om.namespace = s(v, "namespace", p),
            5 => om.uid = s(v, "uid", p),
            6 => om.resource_version = s(v, "resourceVersion", p),
            8 => sm.creation_timestamp = time(v, "creationTimestamp", p),
            9 => sm.deletion_timestamp = time(v, "deletionTimestamp", p),
            11 => map_entry(v, "labels", p, |_| true, &mut sm.labels),
            12 => map_entry(
                v,
                "annotations",
                p,
                IndexAnnotations::keep,
                &mut sm.annotations,
            ),
            _ => {}
        }
    }
    (om, sm)
}

fn container(v: Val<'_>, p: &mut Problem) -> Option<ContainerRaw> {
    message(v, "containers", p, |c: &mut ContainerRaw, n, v, p| {
        if n == 1 {
            c.name = p.check("name", loose_str(v));
        }
        if n == 6
            && let Some(port) = message(v, "ports", p, |cp: &mut ContainerPortRaw, n, v, p| match n
            {
                1 => cp.name = p.check("name", loose_str(v)),
                3 => cp.container_port = p.check("containerPort", loose_int(v)),
                4 => cp.protocol = p.check("protocol", loose_str(v)),
                _ => {}
            })
        {
            push(&mut c.ports, port);
        }
    })
}

fn pod_spec(v: Val<'_>, p: &mut Problem) -> PodSpecRaw {
    message(v, "spec", p, |s: &mut PodSpecRaw, n, v, p| match n {
        2 => {
            if let Some(c) = container(v, p) {
                push(&mut s.containers, c);
            }
        }
        10 => s.node_name = p.check("nodeName", loose_str(v)),
        11 => s.host_network = p.check("hostNetwork", loose_bool(v)),
        16 => s.hostname = p.check("hostname", loose_str(v)),
        17 => s.subdomain = p.check("subdomain", loose_str(v)),
        _ => {}
    })
    .unwrap_or_default()
}

fn pod_status(v: Val<'_>, p: &mut Problem) -> PodStatusRaw {
    message(v, "status", p, |s: &mut PodStatusRaw, n, v, p| match n {
        1 => s.phase = p.check("phase", loose_str(v)),
        2 => {
            if let Some(c) = message(
                v,
                "conditions",
                p,
                |c: &mut ConditionRaw, n, v, p| match n {
                    1 => c.type_ = p.check("type", loose_str(v)),
                    2 => c.status = p.check("status", loose_str(v)),
                    _ => {}
                },
            ) {
                push(&mut s.conditions, c);
            }
        }
        6 => s.pod_ip = p.check("podIP", loose_str(v)),
        12 => {
            if let Some(ip) = message(v, "podIPs", p, |i: &mut PodIpRaw, n, v, p| {
                if n == 1 {
                    i.ip = p.check("ip", loose_str(v));
                }
            }) {
                push(&mut s.pod_ips, ip);
            }
        }
        _ => {}
    })
    .unwrap_or_default()
}

/// `intstr.IntOrString` (`type` = 1: 0 int, 1 string; `intVal` = 2;
/// `strVal` = 3).
fn int_or_str(v: Val<'_>, p: &mut Problem) -> Loose<IntOrStr> {
    #[derive(Default)]
    struct Ios {
        is_str: bool,
        int: i64,
        s: String,
    }
    match message(v, "targetPort", p, |o: &mut Ios, n, v, p| match n {
        1 => o.is_str = matches!(v, Val::Varint(1)),
        2 => match loose_int(v) {
            Loose::Ok(i) => o.int = i,
            _ => p.at("targetPort"),
        },
        3 => match str_of(v) {
            Some(s) => o.s = s.to_owned(),
            None => p.at("targetPort"),
        },
        _ => {}
    }) {
        Some(o) if o.is_str => Loose::Ok(IntOrStr::Str(o.s)),
        Some(o) => Loose::Ok(IntOrStr::Int(o.int)),
        None => Loose::Bad,
    }
}

fn service_spec(v: Val<'_>, p: &mut Problem) -> ServiceSpecRaw {
    message(v, "spec", p, |s: &mut ServiceSpecRaw, n, v, p| match n {
        1 => {
            if let Some(sp) = message(v, "ports", p, |sp: &mut ServicePortRaw, n, v, p| match n {
                1 => sp.name = p.check("name", loose_str(v)),
                2 => sp.protocol = p.check("protocol", loose_str(v)),
                3 => sp.port = p.check("port", loose_int(v)),
                4 => sp.target_port = int_or_str(v, p),
                _ => {}
            }) {
                push(&mut s.ports, sp);
            }
        }
        2 => {
            let mut entries = match std::mem::take(&mut s.selector) {
                Loose::Ok(m) => m,
                _ => Default::default(),
            };
            map_entry(v, "selector", p, |_| true, &mut entries.entries);
            s.selector = Loose::Ok(entries);
        }
        3 => s.cluster_ip = p.check("clusterIP", loose_str(v)),
        4 => s.type_ = p.check("type", loose_str(v)),
        10 => s.external_name = p.check("externalName", loose_str(v)),
        13 => {
            s.publish_not_ready_addresses = p.check("publishNotReadyAddresses", loose_bool(v));
        }
        18 => match str_of(v) {
            Some(ip) => push(&mut s.cluster_ips, ip.to_owned()),
            None => p.at("clusterIPs"),
        },
        _ => {}
    })
    .unwrap_or_default()
}

fn job_spec(v: Val<'_>, p: &mut Problem) -> JobSpecRaw {
    message(v, "spec", p, |s: &mut JobSpecRaw, n, v, p| match n {
        1 => s.parallelism = p.check("parallelism", loose_int(v)),
        2 => s.completions = p.check("completions", loose_int(v)),
        _ => {}
    })
    .unwrap_or_default()
}

/// `discovery.k8s.io/v1` `Endpoint` (`addresses` = 1, `conditions` = 2
/// with `ready` = 1 and `terminating` = 3, `hostname` = 3).
fn slice_endpoint(v: Val<'_>, p: &mut Problem) -> Option<EndpointRaw> {
    message(v, "endpoints", p, |e: &mut EndpointRaw, n, v, p| match n {
        1 => match str_of(v) {
            Some(a) => push(&mut e.addresses, a.to_owned()),
            None => p.at("addresses"),
        },
        2 => {
            e.conditions = message(
                v,
                "conditions",
                p,
                |c: &mut EndpointConditionsRaw, n, v, p| match n {
                    1 => c.ready = p.check("ready", loose_bool(v)),
                    3 => c.terminating = p.check("terminating", loose_bool(v)),
                    _ => {}
                },
            )
            .map_or(Loose::Bad, Loose::Ok);
        }
        3 => e.hostname = p.check("hostname", loose_str(v)),
        _ => {}
    })
}

/// `discovery.k8s.io/v1` `EndpointPort` (`name` = 1, `protocol` = 2,
/// `port` = 3).
fn slice_port(v: Val<'_>, p: &mut Problem) -> Option<EndpointPortRaw> {
    message(v, "ports", p, |sp: &mut EndpointPortRaw, n, v, p| match n {
        1 => sp.name = p.check("name", loose_str(v)),
        2 => sp.protocol = p.check("protocol", loose_str(v)),
        3 => sp.port = p.check("port", loose_int(v)),
        _ => {}
    })
}

/// A slim type that can be read from a Protobuf object (`metadata` = 1,
/// then `spec` = 2 and `status` = 3 for Pods, Services and Jobs; an
/// EndpointSlice has its fields at the top).
pub trait PbObject: Sized {
    /// Never fails: a broken object comes back with `malformed` set.
    fn decode_pb(b: &[u8]) -> Self;
}

/// Walks the top level of an object: `metadata`, then the kind's own
/// fields.
fn object(
    b: &[u8],
    mut each: impl FnMut(u32, Val<'_>, &mut Problem),
) -> ((ObjectMeta, SlimMeta), Option<&'static str>) {
    let mut p = Problem::default();
    let mut m = (ObjectMeta::default(), SlimMeta::default());
    for f in fields(b) {
        match f {
            Ok((1, v)) => m = meta(v, &mut p),
            Ok((n, v)) => each(n, v, &mut p),
            Err(_) => {
                p.at("object");
                break;
            }
        }
    }
    (m, p.0)
}

impl PbObject for SlimPod {
    fn decode_pb(b: &[u8]) -> Self {
        let (mut spec, mut status) = (PodSpecRaw::default(), PodStatusRaw::default());
        let ((metadata, meta), malformed) = object(b, |n, v, p| match n {
            2 => spec = pod_spec(v, p),
            3 => status = pod_status(v, p),
            _ => {}
        });
        SlimPod {
            metadata,
            meta,
            spec,
            status,
            malformed,
        }
    }
}

impl PbObject for SlimService {
    fn decode_pb(b: &[u8]) -> Self {
        let mut spec = ServiceSpecRaw::default();
        let ((metadata, meta), malformed) = object(b, |n, v, p| {
            if n == 2 {
                spec = service_spec(v, p);
            }
        });
        SlimService {
            metadata,
            meta,
            spec,
            malformed,
        }
    }
}

impl PbObject for SlimJob {
    fn decode_pb(b: &[u8]) -> Self {
        let mut spec = JobSpecRaw::default();
        let ((metadata, meta), malformed) = object(b, |n, v, p| {
            if n == 2 {
                spec = job_spec(v, p);
            }
        });
        SlimJob {
            metadata,
            meta,
            spec,
            malformed,
        }
    }
}

impl PbObject for SlimEndpointSlice {
    /// `endpoints` = 2, `ports` = 3, `addressType` = 4.
    fn decode_pb(b: &[u8]) -> Self {
        let mut out = SlimEndpointSlice::default();
        let ((metadata, meta), malformed) = object(b, |n, v, p| match n {
            2 => {
                if let Some(e) = slice_endpoint(v, p) {
                    push(&mut out.endpoints, e);
                }
            }
            3 => {
                if let Some(sp) = slice_port(v, p) {
                    push(&mut out.ports, sp);
                }
            }
            4 => out.address_type = p.check("addressType", loose_str(v)),
            _ => {}
        });
        SlimEndpointSlice {
            metadata,
            meta,
            malformed,
            ..out
        }
    }
}

/// The identity of a cluster-scoped object's `ObjectMeta` (`name` = 1,
/// `uid` = 5, `resourceVersion` = 6); labels, annotations and managed
/// fields are stepped over unread.
fn id_meta(v: Val<'_>, p: &mut Problem) -> ObjectMeta {
    message(v, "metadata", p, |m: &mut ObjectMeta, n, v, p| match n {
        1 => m.name = p.check("name", loose_str(v)).into_option(),
        5 => m.uid = p.check("uid", loose_str(v)).into_option(),
        6 => m.resource_version = p.check("resourceVersion", loose_str(v)).into_option(),
        _ => {}
    })
    .unwrap_or_default()
}

/// The repeated string field `num` of the message at `spec` (`key` is its
/// JSON name): a Node's `podCIDRs` (7), a ServiceCIDR's `cidrs` (1).
fn ranges_object(
    b: &[u8],
    num: u32,
    key: &'static str,
) -> (ObjectMeta, LooseVec<String>, Option<&'static str>) {
    let mut p = Problem::default();
    let mut meta = ObjectMeta::default();
    let mut cidrs: LooseVec<String> = Loose::Absent;
    for f in fields(b) {
        match f {
            Ok((1, v)) => meta = id_meta(v, &mut p),
            Ok((2, v)) => {
                message(v, "spec", &mut p, |_: &mut (), n, v, p| {
                    if n == num {
                        match str_of(v) {
                            Some(s) => push(&mut cidrs, s.to_owned()),
                            None => p.at(key),
                        }
                    }
                });
            }
            Ok(_) => {}
            Err(_) => {
                p.at("object");
                break;
            }
        }
    }
    (meta, cidrs, p.0)
}

impl PbObject for SlimNode {
    fn decode_pb(b: &[u8]) -> Self {
        let (metadata, pod_cidrs, malformed) = ranges_object(b, 7, "podCIDRs");
        SlimNode {
            metadata,
            pod_cidrs,
            malformed,
        }
    }
}

impl PbObject for SlimServiceCidr {
    fn decode_pb(b: &[u8]) -> Self {
        let (metadata, cidrs, malformed) = ranges_object(b, 1, "cidrs");
        SlimServiceCidr {
            metadata,
            cidrs,
            malformed,
        }
    }
}

/// A `runtime.Unknown` envelope, borrowed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Envelope<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub raw: &'a [u8],
}

/// Checks the magic and opens the envelope. An encoded (`contentEncoding`,
/// e.g. gzip) or non-Protobuf (`contentType`) inner object is refused.
pub fn envelope(b: &[u8]) -> Result<Envelope<'_>, PbError> {
    let body = b.strip_prefix(MAGIC).ok_or(PbError("missing k8s magic"))?;
    let mut out = Envelope::default();
    for f in fields(body) {
        match f? {
            (1, v) => {
                for f in fields(sub(v).ok_or(PbError("bad typeMeta"))?) {
                    match f? {
                        (1, v) => out.api_version = str_of(v).ok_or(PbError("bad apiVersion"))?,
                        (2, v) => out.kind = str_of(v).ok_or(PbError("bad kind"))?,
                        _ => {}
                    }
                }
            }
            (2, v) => out.raw = sub(v).ok_or(PbError("bad raw"))?,
            (3, v) => {
                let enc = str_of(v).ok_or(PbError("bad contentEncoding"))?;
                if !enc.is_empty() {
                    return Err(PbError("encoded content is not supported"));
                }
            }
            (4, v) => {
                let ct = str_of(v).ok_or(PbError("bad contentType"))?;
                if !(ct.is_empty() || ct.starts_with(PROTOBUF)) {
                    return Err(PbError("inner content type is not protobuf"));
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// A decoded list.
#[derive(Debug)]
pub struct PbList<K> {
    pub resource_version: Option<String>,
    pub continue_: Option<String>,
    pub items: Vec<K>,
}

/// A whole list body (magic, envelope, `…List`): items never fail it.
pub fn list<K: PbObject>(body: &[u8]) -> Result<PbList<K>, PbError> {
    let env = envelope(body)?;
    if env.kind == "Status" {
        return Err(PbError("a Status, not a list"));
    }
    let mut out = PbList {
        resource_version: None,
        continue_: None,
        items: Vec::new(),
    };
    for f in fields(env.raw) {
        match f? {
            (1, v) => {
                for f in fields(sub(v).ok_or(PbError("bad list metadata"))?) {
                    match f? {
                        (2, v) => {
                            out.resource_version =
                                Some(str_of(v).ok_or(PbError("bad resourceVersion"))?.to_owned());
                        }
                        (3, v) => {
                            let c = str_of(v).ok_or(PbError("bad continue"))?;
                            out.continue_ = (!c.is_empty()).then(|| c.to_owned());
                        }
                        _ => {}
                    }
                }
            }
            (2, v) => match v {
                Val::Bytes(b) => out.items.push(K::decode_pb(b)),
                _ => return Err(PbError("bad list item")),
            },
            _ => {}
        }
    }
    Ok(out)
}

/// `metav1.Status` (`status` = 2, `message` = 3, `reason` = 4, `details`
/// = 5 with `retryAfterSeconds` = 5, `code` = 6) as kube's [`Status`].
pub fn status(raw: &[u8]) -> Result<Status, PbError> {
    let (mut st, mut message, mut reason, mut code, mut retry) = ("", "", "", 0i64, None);
    for f in fields(raw) {
        match f? {
            (2, v) => st = str_of(v).unwrap_or(""),
            (3, v) => message = str_of(v).unwrap_or(""),
            (4, v) => reason = str_of(v).unwrap_or(""),
            (5, v) => {
                for f in fields(sub(v).ok_or(PbError("bad status details"))?) {
                    if let (5, Val::Varint(n)) = f? {
                        retry = Some(n as i64);
                    }
                }
            }
            (6, Val::Varint(n)) => code = n as i64,
            _ => {}
        }
    }
    let mut v =
        serde_json::json!({"status": st, "message": message, "reason": reason, "code": code});
    if let Some(r) = retry {
        v["details"] = serde_json::json!({"retryAfterSeconds": r});
    }
    serde_json::from_value(v).map_err(|_| PbError("status does not fit"))
}

/// A bookmark's object: only its resourceVersion and annotations matter
/// (the end of a streaming list is one annotation).
fn bookmark(raw: &[u8], types: TypeMeta) -> Result<Bookmark, PbError> {
    let mut rv = String::new();
    let mut annotations = BTreeMap::new();
    for f in fields(raw) {
        if let (1, v) = f? {
            for f in fields(sub(v).ok_or(PbError("bad bookmark metadata"))?) {
                match f? {
                    (6, v) => rv = str_of(v).ok_or(PbError("bad resourceVersion"))?.to_owned(),
                    (12, v) => {
                        let mut kv = Vec::new();
                        let mut p = Problem::default();
                        map_entry(v, "annotations", &mut p, |_| true, &mut kv);
                        annotations.extend(kv);
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(Bookmark {
        types,
        metadata: BookmarkMeta {
            resource_version: rv,
            annotations,
        },
    })
}

/// One watch frame (without its length prefix) as kube's [`WatchEvent`].
pub fn watch_event<K: PbObject>(frame: &[u8]) -> Result<WatchEvent<K>, PbError> {
    // kube-apiserver frames a watch with its raw serializer: the frame is
    // the `metav1.WatchEvent` itself, without the magic and the
    // `runtime.Unknown` envelope; only the object inside carries them
    // (apimachinery's protobuf RawSerializer for streams). A frame that
    // does start with the magic is opened as an envelope, for servers that
    // wrap the event too.
    let event = if frame.starts_with(MAGIC) {
        envelope(frame)?.raw
    } else {
        frame
    };
    let (mut ty, mut obj) = ("", None);
    for f in fields(event) {
        match f? {
            (1, v) => ty = str_of(v).ok_or(PbError("bad event type"))?,
            (2, v) => {
                for f in fields(sub(v).ok_or(PbError("bad event object"))?) {
                    if let (1, v) = f? {
                        obj = Some(sub(v).ok_or(PbError("bad event object"))?);
                    }
                }
            }
            _ => {}
        }
    }
    let inner = envelope(obj.ok_or(PbError("event without object"))?)?;
    Ok(match ty {
        "ADDED" => WatchEvent::Added(K::decode_pb(inner.raw)),
        "MODIFIED" => WatchEvent::Modified(K::decode_pb(inner.raw)),
        "DELETED" => WatchEvent::Deleted(K::decode_pb(inner.raw)),
        "BOOKMARK" => WatchEvent::Bookmark(bookmark(
            inner.raw,
            TypeMeta {
                api_version: inner.api_version.to_owned(),
                kind: inner.kind.to_owned(),
            },
        )?),
        "ERROR" => WatchEvent::Error(Box::new(status(inner.raw)?)),
        _ => return Err(PbError("unknown event type")),
    })
}

/// Splits a watch stream into frames: each a 4-byte big-endian length and
/// that many bytes.
#[derive(Default)]
pub struct Framer {
    buf: Vec<u8>,
    start: usize,
}

/// Frames past this are refused: no Kubernetes object comes close (etcd
/// caps a value at 1.5 MiB by default).
pub const MAX_FRAME: usize = 64 << 20;

impl Framer {
    pub fn push(&mut self, chunk: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete frame, if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<&[u8]>, PbError> {
        let rest = &self.buf[self.start..];
        let Some(len) = rest.get(..4) else {
            return Ok(None);
        };
        let n = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if n > MAX_FRAME {
            return Err(PbError("watch frame too large"));
        }
        if rest.len() < 4 + n {
            // Compact now and then so the buffer does not grow forever.
            if self.start > 0 && self.start >= self.buf.len() / 2 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            return Ok(None);
        }
        let s = self.start + 4;
        self.start = s + n;
        Ok(Some(&self.buf[s..s + n]))
    }
}

#[cfg(test)]
#[path = "pb_tests.rs"]
mod tests;
