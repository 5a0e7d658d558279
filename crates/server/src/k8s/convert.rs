//! What every kind's conversion into index input checks (each kind's
//! own is in its file under [`objects`](super::objects)): why an object
//! cannot be indexed, keys, DNS labels, ports and protocols, timestamps.
//! Pure functions: everything the index may rely on is checked here.

use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::index::types::{ObjKey, Proto};
use crate::labels::SERVICE_NAME;

use super::objects::loose::Loose;
use super::objects::meta::SlimMeta;

/// Why an object cannot be indexed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConvertError {
    #[error("malformed field `{0}`")]
    Malformed(&'static str),
    #[error("missing metadata.name")]
    MissingName,
    #[error("missing metadata.namespace")]
    MissingNamespace,
    #[error("invalid ip {0:?}")]
    InvalidIp(String),
    #[error("invalid timestamp {0:?}")]
    InvalidTimestamp(String),
    #[error("externalName service without externalName")]
    EmptyExternalName,
    #[error("EndpointSlice without a valid {SERVICE_NAME} label")]
    NoServiceName,
    #[error("invalid CIDR {0:?}")]
    InvalidCidr(String),
}

/// The key of an object, if its metadata has a name and a namespace.
pub fn key(m: &ObjectMeta) -> Result<ObjKey, ConvertError> {
    let name = name(m)?;
    let namespace = m
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or(ConvertError::MissingNamespace)?;
    Ok(ObjKey::new(namespace, name))
}

/// The key of a cluster-scoped object (Nodes, ServiceCIDRs): its name,
/// with an empty namespace.
pub fn cluster_key(m: &ObjectMeta) -> Result<ObjKey, ConvertError> {
    Ok(ObjKey::new("", name(m)?))
}

fn name(m: &ObjectMeta) -> Result<&str, ConvertError> {
    m.name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or(ConvertError::MissingName)
}

/// A kind's addresses where the API keeps both a list and its first
/// element in a field of its own (`podIPs` and `podIP`, `clusterIPs` and
/// `clusterIP`): the list when it is set (it is authoritative), else the
/// single field (all that older API servers send).
pub fn listed_or_single<'a>(
    list: impl Iterator<Item = &'a str>,
    single: &'a Loose<String>,
) -> Vec<&'a str> {
    let listed: Vec<&str> = list.collect();
    if listed.is_empty() {
        single.get().map(String::as_str).into_iter().collect()
    } else {
        listed
    }
}

/// Addresses parsed, each once, in their order; one that is not an IP
/// rejects the object.
pub fn ips<'a>(raw: impl IntoIterator<Item = &'a str>) -> Result<Vec<IpAddr>, ConvertError> {
    let mut ips: Vec<IpAddr> = Vec::new();
    for s in raw {
        let ip: IpAddr = s
            .parse()
            .map_err(|_| ConvertError::InvalidIp(s.to_owned()))?;
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    Ok(ips)
}

pub fn non_empty(s: &Loose<String>) -> Option<String> {
    s.get().filter(|s| !s.is_empty()).cloned()
}

pub fn port_number(n: i64) -> Option<u16> {
    u16::try_from(n).ok().filter(|p| *p != 0)
}

/// Kubernetes defaults an unset protocol to TCP; an unknown one drops the port.
pub fn protocol(p: &Loose<String>) -> Option<Proto> {
    match p.get() {
        None => Some(Proto::Tcp),
        Some(s) => Proto::parse(s),
    }
}

/// `spec.hostname` and `spec.subdomain` become DNS labels, so they must be
/// RFC 1123 labels (as Kubernetes validates them): otherwise they are
/// treated as unset, the pod keeps its other names.
pub fn dns_label(s: &Loose<String>) -> Option<String> {
    s.get().filter(|s| is_dns1123_label(s)).cloned()
}

/// RFC 1123 label as Kubernetes' `IsDNS1123Label`: 1–63 of `[a-z0-9-]`,
/// starting and ending with an alphanumeric.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| alnum(c) || *c == b'-')
        && alnum(&b[0])
        && alnum(&b[b.len() - 1])
}

pub fn created(m: &SlimMeta) -> Result<i64, ConvertError> {
    match m.creation_timestamp.as_deref() {
        None | Some("") => Ok(0),
        Some(t) => t
            .parse::<jiff::Timestamp>()
            .map(|ts| ts.as_second())
            .map_err(|_| ConvertError::InvalidTimestamp(t.to_owned())),
    }
}
