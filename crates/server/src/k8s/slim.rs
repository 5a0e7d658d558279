//! Slim Pod and Service types: they decode only the fields DNS needs and skip
//! everything else (`managedFields`, container specs, volumes…) with
//! [`IgnoredAny`], which walks the JSON without allocating.
//!
//! Decoding is total. kube decodes a whole list response with serde, so one
//! pod whose `podIP` is a number would otherwise fail the list, and the
//! watcher would relist and fail again forever. Every field here is a
//! [`Loose`] value that accepts any JSON shape: the expected shape decodes,
//! any other is drained and recorded, and the object comes out with
//! [`SlimPod::malformed`] set, for `convert` to reject.
//!
//! The structs are built by `loose_struct!` instead of `#[derive(Deserialize)]`
//! because the derive fails on a duplicate key, and nothing here may fail.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A field as it came off the wire.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Loose<T> {
    /// Missing or `null`.
    #[default]
    Absent,
    Ok(T),
    /// Present with a shape `T` does not accept; its content was skipped.
    Bad,
}

impl<T> Loose<T> {
    /// The value, if present and well formed.
    pub fn get(&self) -> Option<&T> {
        match self {
            Loose::Ok(v) => Some(v),
            _ => None,
        }
    }

    pub fn into_option(self) -> Option<T> {
        match self {
            Loose::Ok(v) => Some(v),
            _ => None,
        }
    }
}

impl<T: Problem> Loose<T> {
    /// The first malformed field at or below this one, named by its key.
    pub fn problem_at(&self, key: &'static str) -> Option<&'static str> {
        match self {
            Loose::Bad => Some(key),
            // A bad element of an array or entry of a map is reported under
            // the field that holds it.
            Loose::Ok(v) => v.problem().map(|inner| {
                if inner == "[]" || inner == "{}" {
                    key
                } else {
                    inner
                }
            }),
            Loose::Absent => None,
        }
    }
}

/// A string field.
pub type LooseStr = Loose<String>;
/// An object field.
pub type LooseObj<T> = Loose<T>;
/// An array field; each element is itself loose.
pub type LooseVec<T> = Loose<Vec<Loose<T>>>;

/// Where a decoded value hides a malformed field.
pub trait Problem {
    /// The JSON key of the first malformed field inside, if any.
    fn problem(&self) -> Option<&'static str> {
        None
    }
}

impl Problem for String {}
impl Problem for bool {}
impl Problem for i64 {}

impl<T: Problem> Problem for Vec<Loose<T>> {
    fn problem(&self) -> Option<&'static str> {
        self.iter().find_map(|v| v.problem_at("[]"))
    }
}

/// The JSON shapes a type accepts. Every method defaults to "not this
/// shape"; the map and sequence defaults drain what they were given.
pub trait Shape<'de>: Sized {
    fn from_bool(_: bool) -> Option<Self> {
        None
    }
    fn from_i64(_: i64) -> Option<Self> {
        None
    }
    fn from_u64(v: u64) -> Option<Self> {
        i64::try_from(v).ok().and_then(Self::from_i64)
    }
    fn from_str(_: &str) -> Option<Self> {
        None
    }
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Option<Self>, A::Error> {
        drain_map(map).map(|()| None)
    }
    fn from_seq<A: SeqAccess<'de>>(seq: A) -> Result<Option<Self>, A::Error> {
        drain_seq(seq).map(|()| None)
    }
}

fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

impl Shape<'_> for String {
    fn from_str(s: &str) -> Option<Self> {
        Some(s.to_owned())
    }
}

impl Shape<'_> for bool {
    fn from_bool(b: bool) -> Option<Self> {
        Some(b)
    }
}

impl Shape<'_> for i64 {
    fn from_i64(v: i64) -> Option<Self> {
        Some(v)
    }
}

impl<'de, T: Shape<'de>> Shape<'de> for Vec<Loose<T>> {
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Option<Self>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(v) = seq.next_element::<Loose<T>>()? {
            out.push(v);
        }
        Ok(Some(out))
    }
}

/// An `int-or-string` field such as a Service's `targetPort`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntOrStr {
    Int(i64),
    Str(String),
}

impl Problem for IntOrStr {}

impl Shape<'_> for IntOrStr {
    fn from_i64(v: i64) -> Option<Self> {
        Some(IntOrStr::Int(v))
    }
    fn from_str(s: &str) -> Option<Self> {
        Some(IntOrStr::Str(s.to_owned()))
    }
}

/// Which keys of a string map are kept.
pub trait KeyFilter {
    fn keep(key: &str) -> bool;
}

/// Every key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllKeys;

impl KeyFilter for AllKeys {
    fn keep(_: &str) -> bool {
        true
    }
}

/// The annotations the index keeps: Job and JobSet bookkeeping
/// ([`INDEX_ANNOTATIONS`](crate::labels::INDEX_ANNOTATIONS)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexAnnotations;

impl KeyFilter for IndexAnnotations {
    fn keep(key: &str) -> bool {
        crate::labels::INDEX_ANNOTATIONS.contains(&key)
    }
}

/// A `map[string]string` (labels, annotations, selector), in wire order,
/// with only the keys `F` keeps. Keys that are dropped are never allocated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StrMap<F> {
    pub entries: Vec<(String, String)>,
    bad: bool,
    _filter: PhantomData<F>,
}

impl<F> Default for StrMap<F> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            bad: false,
            _filter: PhantomData,
        }
    }
}

impl<F> Problem for StrMap<F> {
    fn problem(&self) -> Option<&'static str> {
        self.bad.then_some("{}")
    }
}

/// Decodes a map key to `Some(key)` when `F` keeps it, without allocating
/// the ones it drops.
struct KeepKey<F>(PhantomData<F>);

impl<'de, F: KeyFilter> DeserializeSeed<'de> for KeepKey<F> {
    type Value = Option<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<F: KeyFilter> Visitor<'_> for KeepKey<F> {
    type Value = Option<String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(F::keep(v).then(|| v.to_owned()))
    }
}

impl<'de, F: KeyFilter> Shape<'de> for StrMap<F> {
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Option<Self>, A::Error> {
        let mut out = StrMap::<F>::default();
        while let Some(key) = map.next_key_seed(KeepKey::<F>(PhantomData))? {
            match key {
                Some(key) => match map.next_value::<LooseStr>()? {
                    Loose::Ok(v) => out.entries.push((key, v)),
                    Loose::Absent | Loose::Bad => out.bad = true,
                },
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Some(out))
    }
}

impl<'de, T: Shape<'de>> Deserialize<'de> for Loose<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LooseVisitor(PhantomData))
    }
}

struct LooseVisitor<T>(PhantomData<T>);

fn shaped<T>(v: Option<T>) -> Loose<T> {
    v.map_or(Loose::Bad, Loose::Ok)
}

impl<'de, T: Shape<'de>> Visitor<'de> for LooseVisitor<T> {
    type Value = Loose<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(shaped(T::from_bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(shaped(T::from_i64(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(shaped(T::from_u64(v)))
    }
    fn visit_i128<E: de::Error>(self, _: i128) -> Result<Self::Value, E> {
        Ok(Loose::Bad)
    }
    fn visit_u128<E: de::Error>(self, _: u128) -> Result<Self::Value, E> {
        Ok(Loose::Bad)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Loose::Bad)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(shaped(T::from_str(v)))
    }
    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Self::Value, E> {
        Ok(Loose::Bad)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Loose::Absent)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Loose::Absent)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        Loose::<T>::deserialize(d)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        Loose::<T>::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        T::from_seq(seq).map(shaped)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        T::from_map(map).map(shaped)
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        // Not produced by JSON; drain it all the same.
        let (IgnoredAny, variant) = data.variant::<IgnoredAny>()?;
        de::VariantAccess::newtype_variant::<IgnoredAny>(variant).map(|_| Loose::Bad)
    }
}

/// Decodes a struct key to the known field name it equals, or `None`,
/// without allocating.
struct FieldKey(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for FieldKey {
    type Value = Option<&'static str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for FieldKey {
    type Value = Option<&'static str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().copied().find(|k| *k == v))
    }
}

/// A struct of loose fields whose decoding never fails: known keys decode
/// into their field (the last one wins on a duplicate), unknown keys are
/// skipped, and the first malformed field is remembered.
macro_rules! loose_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty = $key:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
            /// JSON key of the first malformed field, if any.
            pub malformed: Option<&'static str>,
        }

        impl Problem for $name {
            fn problem(&self) -> Option<&'static str> {
                self.malformed
            }
        }

        impl<'de> Shape<'de> for $name {
            fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Option<Self>, A::Error> {
                const FIELDS: &[&str] = &[$($key),*];
                let mut out = Self::default();
                while let Some(key) = map.next_key_seed(FieldKey(FIELDS))? {
                    match key {
                        $( Some($key) => out.$field = map.next_value()?, )*
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                out.malformed = None $( .or_else(|| out.$field.problem_at($key)) )*;
                Ok(Some(out))
            }
        }
    };
}

loose_struct! {
    /// `metadata`, as far as DNS cares.
    pub struct MetaRaw {
        pub name: LooseStr = "name",
        pub namespace: LooseStr = "namespace",
        pub uid: LooseStr = "uid",
        pub resource_version: LooseStr = "resourceVersion",
        pub labels: LooseObj<StrMap<AllKeys>> = "labels",
        pub annotations: LooseObj<StrMap<IndexAnnotations>> = "annotations",
        pub creation_timestamp: LooseStr = "creationTimestamp",
        pub deletion_timestamp: LooseStr = "deletionTimestamp",
    }
}

loose_struct! {
    /// `spec.containers[].ports[]`.
    pub struct ContainerPortRaw {
        pub name: LooseStr = "name",
        pub container_port: Loose<i64> = "containerPort",
        pub protocol: LooseStr = "protocol",
    }
}

loose_struct! {
    /// `spec.containers[]`: only the name and ports.
    pub struct ContainerRaw {
        pub name: LooseStr = "name",
        pub ports: LooseVec<ContainerPortRaw> = "ports",
    }
}

loose_struct! {
    pub struct PodSpecRaw {
        pub hostname: LooseStr = "hostname",
        pub subdomain: LooseStr = "subdomain",
        /// Not read by DNS: the relay selects on it (`spec.nodeName=`).
        pub node_name: LooseStr = "nodeName",
        pub host_network: Loose<bool> = "hostNetwork",
        pub containers: LooseVec<ContainerRaw> = "containers",
    }
}

loose_struct! {
    /// `status.podIPs[]`.
    pub struct PodIpRaw {
        pub ip: LooseStr = "ip",
    }
}

loose_struct! {
    /// `status.conditions[]`.
    pub struct ConditionRaw {
        pub type_: LooseStr = "type",
        pub status: LooseStr = "status",
    }
}

loose_struct! {
    pub struct PodStatusRaw {
        pub phase: LooseStr = "phase",
        pub pod_ip: LooseStr = "podIP",
        pub pod_ips: LooseVec<PodIpRaw> = "podIPs",
        pub conditions: LooseVec<ConditionRaw> = "conditions",
    }
}

loose_struct! {
    pub struct PodRaw {
        pub metadata: LooseObj<MetaRaw> = "metadata",
        pub spec: LooseObj<PodSpecRaw> = "spec",
        pub status: LooseObj<PodStatusRaw> = "status",
    }
}

loose_struct! {
    /// `spec.ports[]` of a Service.
    pub struct ServicePortRaw {
        pub name: LooseStr = "name",
        pub port: Loose<i64> = "port",
        pub protocol: LooseStr = "protocol",
        pub target_port: Loose<IntOrStr> = "targetPort",
    }
}

loose_struct! {
    pub struct ServiceSpecRaw {
        pub type_: LooseStr = "type",
        pub cluster_ip: LooseStr = "clusterIP",
        pub cluster_ips: LooseVec<String> = "clusterIPs",
        pub selector: LooseObj<StrMap<AllKeys>> = "selector",
        pub ports: LooseVec<ServicePortRaw> = "ports",
        pub external_name: LooseStr = "externalName",
        pub publish_not_ready_addresses: Loose<bool> = "publishNotReadyAddresses",
    }
}

loose_struct! {
    pub struct ServiceRaw {
        pub metadata: LooseObj<MetaRaw> = "metadata",
        pub spec: LooseObj<ServiceSpecRaw> = "spec",
    }
}

loose_struct! {
    /// `spec` of a batch/v1 Job, as far as the rank view cares.
    pub struct JobSpecRaw {
        pub completions: Loose<i64> = "completions",
        pub parallelism: Loose<i64> = "parallelism",
    }
}

loose_struct! {
    pub struct JobRaw {
        pub metadata: LooseObj<MetaRaw> = "metadata",
        pub spec: LooseObj<JobSpecRaw> = "spec",
    }
}

loose_struct! {
    /// `endpoints[].conditions` of an EndpointSlice.
    pub struct EndpointConditionsRaw {
        pub ready: Loose<bool> = "ready",
        pub terminating: Loose<bool> = "terminating",
    }
}

loose_struct! {
    /// `endpoints[]` of an EndpointSlice.
    pub struct EndpointRaw {
        pub addresses: LooseVec<String> = "addresses",
        pub conditions: LooseObj<EndpointConditionsRaw> = "conditions",
        pub hostname: LooseStr = "hostname",
    }
}

loose_struct! {
    /// `ports[]` of an EndpointSlice.
    pub struct EndpointPortRaw {
        pub name: LooseStr = "name",
        pub port: Loose<i64> = "port",
        pub protocol: LooseStr = "protocol",
    }
}

loose_struct! {
    /// `metadata` of a cluster-scoped object whose identity is all DNS
    /// reads (a Node's labels and annotations are skipped unread).
    pub struct MetaIdRaw {
        pub name: LooseStr = "name",
        pub uid: LooseStr = "uid",
        pub resource_version: LooseStr = "resourceVersion",
    }
}

loose_struct! {
    /// A discovery.k8s.io/v1 EndpointSlice (no `spec`: its fields are at
    /// the top).
    pub struct EndpointSliceRaw {
        pub metadata: LooseObj<MetaRaw> = "metadata",
        pub address_type: LooseStr = "addressType",
        pub endpoints: LooseVec<EndpointRaw> = "endpoints",
        pub ports: LooseVec<EndpointPortRaw> = "ports",
    }
}

loose_struct! {
    /// `spec` of a Node: only its pod ranges.
    pub struct NodeSpecRaw {
        pub pod_cidrs: LooseVec<String> = "podCIDRs",
    }
}

loose_struct! {
    /// A Node: its name and pod ranges; `status` (most of a Node's bytes
    /// and of its updates) is skipped unread.
    pub struct NodeRaw {
        pub metadata: LooseObj<MetaIdRaw> = "metadata",
        pub spec: LooseObj<NodeSpecRaw> = "spec",
    }
}

loose_struct! {
    /// `spec` of a networking.k8s.io/v1 ServiceCIDR.
    pub struct ServiceCidrSpecRaw {
        pub cidrs: LooseVec<String> = "cidrs",
    }
}

loose_struct! {
    pub struct ServiceCidrRaw {
        pub metadata: LooseObj<MetaIdRaw> = "metadata",
        pub spec: LooseObj<ServiceCidrSpecRaw> = "spec",
    }
}

/// The metadata DNS reads beyond identity.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlimMeta {
    pub labels: Vec<(String, String)>,
    /// Only the completion index and the JobSet coordinator.
    pub annotations: Vec<(String, String)>,
    pub creation_timestamp: Option<String>,
    pub deletion_timestamp: Option<String>,
}

/// Splits decoded metadata into the `ObjectMeta` kube-runtime needs (name,
/// namespace, uid and resourceVersion only) and the rest.
fn split_meta(m: Loose<MetaRaw>) -> (ObjectMeta, SlimMeta) {
    let m = m.into_option().unwrap_or_default();
    let object = ObjectMeta {
        name: m.name.into_option(),
        namespace: m.namespace.into_option(),
        uid: m.uid.into_option(),
        resource_version: m.resource_version.into_option(),
        ..ObjectMeta::default()
    };
    let slim = SlimMeta {
        labels: m
            .labels
            .into_option()
            .map(|l| l.entries)
            .unwrap_or_default(),
        annotations: m
            .annotations
            .into_option()
            .map(|a| a.entries)
            .unwrap_or_default(),
        creation_timestamp: m.creation_timestamp.into_option(),
        deletion_timestamp: m.deletion_timestamp.into_option(),
    };
    (object, slim)
}

/// A Pod with only what DNS reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlimPod {
    /// Name, namespace, uid and resourceVersion; nothing else is set.
    pub metadata: ObjectMeta,
    pub meta: SlimMeta,
    pub spec: PodSpecRaw,
    pub status: PodStatusRaw,
    /// JSON key of the first field that had the wrong shape (`"object"` when
    /// the object itself was not a JSON object).
    pub malformed: Option<&'static str>,
}

impl<'de> Deserialize<'de> for SlimPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Loose::<PodRaw>::deserialize(d)?;
        let malformed = raw.problem_at("object");
        let raw = raw.into_option().unwrap_or_default();
        let (metadata, meta) = split_meta(raw.metadata);
        Ok(SlimPod {
            metadata,
            meta,
            spec: raw.spec.into_option().unwrap_or_default(),
            status: raw.status.into_option().unwrap_or_default(),
            malformed,
        })
    }
}

/// A Service with only what DNS reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlimService {
    /// Name, namespace, uid and resourceVersion; nothing else is set.
    pub metadata: ObjectMeta,
    pub meta: SlimMeta,
    pub spec: ServiceSpecRaw,
    /// JSON key of the first field that had the wrong shape.
    pub malformed: Option<&'static str>,
}

impl<'de> Deserialize<'de> for SlimService {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Loose::<ServiceRaw>::deserialize(d)?;
        let malformed = raw.problem_at("object");
        let raw = raw.into_option().unwrap_or_default();
        let (metadata, meta) = split_meta(raw.metadata);
        Ok(SlimService {
            metadata,
            meta,
            spec: raw.spec.into_option().unwrap_or_default(),
            malformed,
        })
    }
}

/// A batch/v1 Job with only what the rank view reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlimJob {
    /// Name, namespace, uid and resourceVersion; nothing else is set.
    pub metadata: ObjectMeta,
    pub meta: SlimMeta,
    pub spec: JobSpecRaw,
    /// JSON key of the first field that had the wrong shape.
    pub malformed: Option<&'static str>,
}

impl<'de> Deserialize<'de> for SlimJob {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Loose::<JobRaw>::deserialize(d)?;
        let malformed = raw.problem_at("object");
        let raw = raw.into_option().unwrap_or_default();
        let (metadata, meta) = split_meta(raw.metadata);
        Ok(SlimJob {
            metadata,
            meta,
            spec: raw.spec.into_option().unwrap_or_default(),
            malformed,
        })
    }
}

/// A discovery.k8s.io/v1 EndpointSlice with only what DNS reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlimEndpointSlice {
    /// Name, namespace, uid and resourceVersion; nothing else is set.
    pub metadata: ObjectMeta,
    pub meta: SlimMeta,
    pub address_type: LooseStr,
    pub endpoints: LooseVec<EndpointRaw>,
    pub ports: LooseVec<EndpointPortRaw>,
    /// JSON key of the first field that had the wrong shape.
    pub malformed: Option<&'static str>,
}

impl<'de> Deserialize<'de> for SlimEndpointSlice {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Loose::<EndpointSliceRaw>::deserialize(d)?;
        let malformed = raw.problem_at("object");
        let raw = raw.into_option().unwrap_or_default();
        let (metadata, meta) = split_meta(raw.metadata);
        Ok(SlimEndpointSlice {
            metadata,
            meta,
            address_type: raw.address_type,
            endpoints: raw.endpoints,
            ports: raw.ports,
            malformed,
        })
    }
}

/// Identity of a cluster-scoped object, as kube-runtime needs it.
fn id_meta(m: Loose<MetaIdRaw>) -> ObjectMeta {
    let m = m.into_option().unwrap_or_default();
    ObjectMeta {
        name: m.name.into_option(),
        uid: m.uid.into_option(),
        resource_version: m.resource_version.into_option(),
        ..ObjectMeta::default()
    }
}

/// A cluster-scoped object of which DNS reads only its name and one list
/// of ranges in its `spec`: the type, its raw form and the ranges' field.
macro_rules! slim_ranges {
    ($(#[$meta:meta])* $name:ident, $raw:ident, $field:ident) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct $name {
            /// Name, uid and resourceVersion; nothing else is set.
            pub metadata: ObjectMeta,
            pub $field: LooseVec<String>,
            /// JSON key of the first field that had the wrong shape.
            pub malformed: Option<&'static str>,
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = Loose::<$raw>::deserialize(d)?;
                let malformed = raw.problem_at("object");
                let raw = raw.into_option().unwrap_or_default();
                Ok($name {
                    metadata: id_meta(raw.metadata),
                    $field: raw.spec.into_option().unwrap_or_default().$field,
                    malformed,
                })
            }
        }
    };
}

slim_ranges!(
    /// A Node with only its name and `spec.podCIDRs`.
    SlimNode,
    NodeRaw,
    pod_cidrs
);
slim_ranges!(
    /// A networking.k8s.io/v1 ServiceCIDR with only its name and `spec.cidrs`.
    SlimServiceCidr,
    ServiceCidrRaw,
    cidrs
);

macro_rules! core_v1_resource {
    ($ty:ty, $kind:literal, $plural:literal) => {
        core_v1_resource!($ty, $kind, $plural, "", "v1", "v1");
    };
    ($ty:ty, $kind:literal, $plural:literal, $group:literal, $version:literal, $api_version:literal) => {
        core_v1_resource!(
            $ty,
            $kind,
            $plural,
            $group,
            $version,
            $api_version,
            NamespaceResourceScope
        );
    };
    ($ty:ty, $kind:literal, $plural:literal, $group:literal, $version:literal, $api_version:literal, $scope:ident) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = k8s_openapi::$scope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($group)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($version)
            }
            fn api_version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($api_version)
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

core_v1_resource!(SlimPod, "Pod", "pods");
core_v1_resource!(SlimService, "Service", "services");
core_v1_resource!(SlimJob, "Job", "jobs", "batch", "v1", "batch/v1");
core_v1_resource!(
    SlimEndpointSlice,
    "EndpointSlice",
    "endpointslices",
    "discovery.k8s.io",
    "v1",
    "discovery.k8s.io/v1"
);
core_v1_resource!(
    SlimNode,
    "Node",
    "nodes",
    "",
    "v1",
    "v1",
    ClusterResourceScope
);
core_v1_resource!(
    SlimServiceCidr,
    "ServiceCIDR",
    "servicecidrs",
    "networking.k8s.io",
    "v1",
    "networking.k8s.io/v1",
    ClusterResourceScope
);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::ObjectList;
    use kube::core::WatchEvent;

    fn good(name: &str) -> String {
        format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ml","uid":"u-{name}","resourceVersion":"5"}},
               "spec":{{"containers":[{{"name":"c","ports":[{{"containerPort":80}}]}}]}},
               "status":{{"phase":"Running","podIP":"10.0.0.1"}}}}"#
        )
    }

    fn list(items: &[String]) -> String {
        format!(
            r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"99"}},"items":[{}]}}"#,
            items.join(",")
        )
    }

    /// Each bad pod sits between two good ones in one list; the list decodes,
    /// the neighbours are intact, and the bad one is flagged.
    #[test]
    fn malformed_items_do_not_fail_the_list() {
        let bad = [
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"status":{"podIP":10}}"#,
                "podIP",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"spec":{"containers":"nope"}}"#,
                "containers",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml","labels":["a","b"]}}"#,
                "labels",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml","labels":{"a":{"x":[1,2]}}}}"#,
                "labels",
            ),
            (r#"{"metadata":{"name":7,"namespace":"ml"}}"#, "name"),
            (r#"{"metadata":"x"}"#, "metadata"),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"spec":{"hostNetwork":"yes"}}"#,
                "hostNetwork",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"spec":{"containers":[{"ports":[{"containerPort":"80"}]}]}}"#,
                "containerPort",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"spec":{"containers":[{"ports":[{"containerPort":8.5}]}]}}"#,
                "containerPort",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"spec":{"containers":[{"ports":[7]}]}}"#,
                "ports",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"spec":{"containers":[{"ports":[{"containerPort":123456789012345678901234567890}]}]}}"#,
                "containerPort",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"status":{"podIPs":{"ip":"10.0.0.1"}}}"#,
                "podIPs",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"status":{"conditions":[{"type":"Ready","status":true}]}}"#,
                "status",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"status":[]}"#,
                "status",
            ),
            (r#""just a string""#, "object"),
            (r#"42"#, "object"),
            (r#"[{"metadata":{}}]"#, "object"),
        ];
        for (item, field) in bad {
            let json = list(&[good("a"), item.to_string(), good("c")]);
            let l: ObjectList<SlimPod> = serde_json::from_str(&json)
                .unwrap_or_else(|e| panic!("list with {item} failed: {e}"));
            assert_eq!(l.metadata.resource_version.as_deref(), Some("99"));
            assert_eq!(l.items.len(), 3, "{item}");
            assert_eq!(l.items[1].malformed, Some(field), "{item}");
            for ok in [&l.items[0], &l.items[2]] {
                assert_eq!(ok.malformed, None);
                assert_eq!(ok.status.pod_ip.get().map(String::as_str), Some("10.0.0.1"));
                assert_eq!(ok.metadata.resource_version.as_deref(), Some("5"));
            }
            assert_eq!(l.items[0].metadata.name.as_deref(), Some("a"));
            assert_eq!(l.items[2].metadata.name.as_deref(), Some("c"));
        }
    }

    #[test]
    fn null_is_absent_and_duplicate_keys_do_not_fail() {
        let p: SlimPod = serde_json::from_str(
            r#"{"metadata":{"name":"a","name":"b","namespace":"ml","labels":null,"annotations":null},
                "spec":null,"status":{"podIP":null,"podIPs":null}}"#,
        )
        .unwrap();
        assert_eq!(p.malformed, None);
        assert_eq!(p.metadata.name.as_deref(), Some("b"));
        assert!(p.meta.labels.is_empty());
    }

    #[test]
    fn watch_event_with_malformed_object_decodes() {
        let line = r#"{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ml","resourceVersion":"12"},"status":{"podIP":{"v":4}}}}"#;
        let ev: WatchEvent<SlimPod> = serde_json::from_str(line).unwrap();
        let WatchEvent::Modified(p) = ev else {
            panic!("wrong event: {ev:?}")
        };
        assert_eq!(p.malformed, Some("podIP"));
        assert_eq!(
            kube::ResourceExt::resource_version(&p).as_deref(),
            Some("12")
        );
        // The object before the type, as some proxies reorder keys.
        let line = r#"{"object":{"metadata":{"name":"a","namespace":"ml","resourceVersion":"13"}},"type":"ADDED"}"#;
        let ev: WatchEvent<SlimPod> = serde_json::from_str(line).unwrap();
        assert!(matches!(ev, WatchEvent::Added(p) if p.malformed.is_none()));
    }

    #[test]
    fn service_decodes_only_dns_fields() {
        let s: SlimService = serde_json::from_str(
            r#"{"kind":"Service","apiVersion":"v1",
                "metadata":{"name":"api","namespace":"ml","uid":"s1","resourceVersion":"4",
                  "managedFields":[{"manager":"kubectl","fieldsV1":{"f:spec":{}}}]},
                "spec":{"type":"ClusterIP","clusterIP":"10.96.0.1","clusterIPs":["10.96.0.1"],
                  "selector":{"app":"x"},"sessionAffinity":"None","ipFamilies":["IPv4"],
                  "ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":"web","nodePort":30080}],
                  "publishNotReadyAddresses":true},
                "status":{"loadBalancer":{}}}"#,
        )
        .unwrap();
        assert_eq!(s.malformed, None);
        assert_eq!(
            s.spec.selector.get().unwrap().entries,
            vec![("app".into(), "x".into())]
        );
        let port = s.spec.ports.get().unwrap()[0].get().unwrap();
        assert_eq!(port.target_port, Loose::Ok(IntOrStr::Str("web".into())));
        assert_eq!(s.spec.publish_not_ready_addresses, Loose::Ok(true));
        assert_eq!(
            <SlimService as kube::Resource>::url_path(&(), Some("ml")),
            "/api/v1/namespaces/ml/services"
        );
    }

    #[test]
    fn realistic_gpu_training_pod() {
        assert!(GPU_POD.len() > 5_000, "fixture is {} bytes", GPU_POD.len());
        let p: SlimPod = serde_json::from_str(GPU_POD).unwrap();
        assert_eq!(p.malformed, None);
        assert_eq!(
            p.metadata.name.as_deref(),
            Some("llm-pretrain-worker-3-x7k2p")
        );
        assert_eq!(p.metadata.namespace.as_deref(), Some("research"));
        assert_eq!(p.metadata.resource_version.as_deref(), Some("48213377"));
        // Only identity reaches ObjectMeta.
        assert!(p.metadata.managed_fields.is_none());
        assert!(p.metadata.owner_references.is_none());
        assert!(p.metadata.labels.is_none());
        assert_eq!(p.meta.labels.len(), 4);
        // Only the annotations the rank view reads are kept.
        assert_eq!(
            p.meta.annotations,
            vec![(
                "batch.kubernetes.io/job-completion-index".into(),
                "3".into()
            )]
        );
        let ports: Vec<_> = p
            .spec
            .containers
            .get()
            .unwrap()
            .iter()
            .flat_map(|c| c.get().unwrap().ports.get().into_iter().flatten())
            .map(|p| p.get().unwrap().container_port.get().copied().unwrap())
            .collect();
        assert_eq!(ports, vec![29500, 8080]);
        let info = crate::k8s::convert::pod(&p).unwrap();
        assert_eq!(info.hostname.as_deref(), Some("llm-pretrain-worker-3"));
        assert_eq!(info.subdomain.as_deref(), Some("llm-pretrain"));
        assert!(info.ready);
        assert_eq!(info.ips.len(), 2);
        assert_eq!(info.ports.len(), 2);
    }

    const GPU_POD: &str = r#"{
  "apiVersion": "v1",
  "kind": "Pod",
  "metadata": {
    "annotations": {
      "batch.kubernetes.io/job-completion-index": "3",
      "jobset.sigs.k8s.io/jobset-name": "llm-pretrain",
      "kubectl.kubernetes.io/default-container": "trainer",
      "prometheus.io/scrape": "true"
    },
    "creationTimestamp": "2025-03-14T09:26:53Z",
    "finalizers": ["batch.kubernetes.io/job-tracking"],
    "generateName": "llm-pretrain-worker-3-",
    "labels": {
      "batch.kubernetes.io/controller-uid": "5b1c7d2e-9f0a-4c1b-8d3e-2a4f6b8c0d1e",
      "batch.kubernetes.io/job-completion-index": "3",
      "jobset.sigs.k8s.io/jobset-name": "llm-pretrain",
      "training.example.com/role": "worker"
    },
    "managedFields": [
      {
        "apiVersion": "v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {
          "f:metadata": {"f:annotations": {".": {}, "f:batch.kubernetes.io/job-completion-index": {}},
            "f:finalizers": {".": {}, "v:\"batch.kubernetes.io/job-tracking\"": {}},
            "f:generateName": {}, "f:labels": {".": {}, "f:jobset.sigs.k8s.io/jobset-name": {}},
            "f:ownerReferences": {".": {}, "k:{\"uid\":\"5b1c7d2e-9f0a-4c1b-8d3e-2a4f6b8c0d1e\"}": {}}},
          "f:spec": {"f:containers": {"k:{\"name\":\"trainer\"}": {".": {}, "f:env": {".": {},
            "k:{\"name\":\"MASTER_ADDR\"}": {".": {}, "f:name": {}, "f:value": {}}}, "f:image": {}}},
            "f:hostname": {}, "f:subdomain": {}, "f:tolerations": {}}
        },
        "manager": "kube-controller-manager",
        "operation": "Update",
        "time": "2025-03-14T09:26:53Z"
      },
      {
        "apiVersion": "v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}}},
          "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {}}},
        "manager": "kubelet",
        "operation": "Update",
        "subresource": "status",
        "time": "2025-03-14T09:28:10Z"
      }
    ],
    "name": "llm-pretrain-worker-3-x7k2p",
    "namespace": "research",
    "ownerReferences": [
      {
        "apiVersion": "batch/v1",
        "blockOwnerDeletion": true,
        "controller": true,
        "kind": "Job",
        "name": "llm-pretrain-worker",
        "uid": "5b1c7d2e-9f0a-4c1b-8d3e-2a4f6b8c0d1e"
      }
    ],
    "resourceVersion": "48213377",
    "uid": "c0ffee00-1234-4abc-9def-0123456789ab"
  },
  "spec": {
    "affinity": {
      "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
          "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}]}]
        }
      },
      "podAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
          "labelSelector": {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": "llm-pretrain"}},
          "topologyKey": "topology.kubernetes.io/zone"}}]
      }
    },
    "containers": [
      {
        "name": "trainer",
        "image": "registry.example.com/ml/pretrain:2025.03.1",
        "imagePullPolicy": "IfNotPresent",
        "command": ["torchrun"],
        "args": ["--nnodes=64", "--nproc-per-node=8", "--rdzv-backend=c10d",
                 "--rdzv-endpoint=llm-pretrain-worker-0.llm-pretrain:29500", "train.py", "--config=/etc/train/config.yaml"],
        "env": [
          {"name": "MASTER_ADDR", "value": "llm-pretrain-worker-0.llm-pretrain"},
          {"name": "MASTER_PORT", "value": "29500"},
          {"name": "NCCL_DEBUG", "value": "WARN"},
          {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"},
          {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"apiVersion": "v1",
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
          {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
          {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}}
        ],
        "ports": [
          {"containerPort": 29500, "name": "c10d", "protocol": "TCP"},
          {"containerPort": 8080, "name": "metrics"}
        ],
        "resources": {
          "limits": {"cpu": "96", "memory": "1600Gi", "nvidia.com/gpu": "8", "rdma/ib": "8"},
          "requests": {"cpu": "90", "memory": "1500Gi", "nvidia.com/gpu": "8", "rdma/ib": "8"}
        },
        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [
          {"mountPath": "/dev/shm", "name": "dshm"},
          {"mountPath": "/etc/train", "name": "config", "readOnly": true},
          {"mountPath": "/checkpoints", "name": "checkpoints"},
          {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access-9xk2d", "readOnly": true}
        ]
      },
      {
        "name": "log-shipper",
        "image": "registry.example.com/infra/fluent-bit:3.1",
        "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}},
        "volumeMounts": [{"mountPath": "/var/log/train", "name": "logs"}]
      }
    ],
    "dnsPolicy": "ClusterFirst",
    "enableServiceLinks": false,
    "hostname": "llm-pretrain-worker-3",
    "nodeName": "gpu-node-a17",
    "preemptionPolicy": "PreemptLowerPriority",
    "priority": 1000000,
    "priorityClassName": "training-high",
    "restartPolicy": "Never",
    "schedulerName": "default-scheduler",
    "securityContext": {"fsGroup": 1000, "runAsUser": 1000},
    "serviceAccountName": "trainer",
    "subdomain": "llm-pretrain",
    "terminationGracePeriodSeconds": 30,
    "tolerations": [
      {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"},
      {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
      {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300}
    ],
    "volumes": [
      {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Gi"}},
      {"name": "config", "configMap": {"name": "llm-pretrain-config", "defaultMode": 420}},
      {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "llm-pretrain-ckpt"}},
      {"name": "logs", "emptyDir": {}},
      {"name": "kube-api-access-9xk2d", "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
        {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}]}}]}}
    ]
  },
  "status": {
    "conditions": [
      {"lastProbeTime": null, "lastTransitionTime": "2025-03-14T09:27:30Z", "status": "True", "type": "PodReadyToStartContainers"},
      {"lastProbeTime": null, "lastTransitionTime": "2025-03-14T09:26:53Z", "status": "True", "type": "Initialized"},
      {"lastProbeTime": null, "lastTransitionTime": "2025-03-14T09:28:10Z", "status": "True", "type": "Ready"},
      {"lastProbeTime": null, "lastTransitionTime": "2025-03-14T09:28:10Z", "status": "True", "type": "ContainersReady"},
      {"lastProbeTime": null, "lastTransitionTime": "2025-03-14T09:26:53Z", "status": "True", "type": "PodScheduled"}
    ],
    "containerStatuses": [
      {
        "containerID": "containerd://8f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff",
        "image": "registry.example.com/ml/pretrain:2025.03.1",
        "imageID": "registry.example.com/ml/pretrain@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "lastState": {},
        "name": "trainer",
        "ready": true,
        "restartCount": 0,
        "started": true,
        "state": {"running": {"startedAt": "2025-03-14T09:28:02Z"}}
      },
      {
        "containerID": "containerd://11223344556677889900aabbccddeeff00112233445566778899aabbccddeeff",
        "image": "registry.example.com/infra/fluent-bit:3.1",
        "imageID": "registry.example.com/infra/fluent-bit@sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
        "lastState": {},
        "name": "log-shipper",
        "ready": true,
        "restartCount": 0,
        "started": true,
        "state": {"running": {"startedAt": "2025-03-14T09:27:29Z"}}
      }
    ],
    "hostIP": "10.20.17.4",
    "hostIPs": [{"ip": "10.20.17.4"}],
    "phase": "Running",
    "podIP": "10.244.17.38",
    "podIPs": [{"ip": "10.244.17.38"}, {"ip": "fd00:10:244:11::26"}],
    "qosClass": "Burstable",
    "startTime": "2025-03-14T09:26:53Z"
  }
}"#;
}
