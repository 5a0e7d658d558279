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
//! The structs are built by [`loose_struct!`] instead of `#[derive(Deserialize)]`
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

/// The annotations the index uses: Job and JobSet bookkeeping
/// (e.g. `batch.kubernetes.io/job-completion-index`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexAnnotations;

impl KeyFilter for IndexAnnotations {
    fn keep(key: &str) -> bool {
        key.starts_with("batch.kubernetes.io/") || key.starts_with("jobset.sigs.k8s.io/")
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
    /// `spec.containers[]`: only the ports.
    pub struct ContainerRaw {
        pub ports: LooseVec<ContainerPortRaw> = "ports",
    }
}

loose_struct! {
    pub struct PodSpecRaw {
        pub hostname: LooseStr = "hostname",
        pub subdomain: LooseStr = "subdomain",
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

/// The metadata DNS reads beyond identity.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlimMeta {
    pub labels: Vec<(String, String)>,
    /// Only `batch.kubernetes.io/*` and `jobset.sigs.k8s.io/*`.
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

macro_rules! core_v1_resource {
    ($ty:ty, $kind:literal, $plural:literal) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed("")
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed("v1")
            }
            fn api_version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed("v1")
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
