//! A field as it came off the wire ([`Loose`]), and the JSON shapes each
//! value type accepts ([`Shape`]).
//!
//! Decoding is total. kube decodes a whole list response with serde, so one
//! pod whose `podIP` is a number would otherwise fail the list, and the
//! watcher would relist and fail again forever. Every declared field is a
//! [`Loose`] value that accepts any JSON shape: the expected shape decodes,
//! any other is drained and recorded, and the object comes out with its
//! `malformed` field set, for its conversion to reject. Everything not
//! declared (`managedFields`, container specs, volumes…) is skipped with
//! [`IgnoredAny`], which walks the JSON without allocating.

use std::fmt;
use std::marker::PhantomData;

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

    /// The value, made the default one first unless it is well formed
    /// (the serving rules' "written even when empty").
    pub fn or_default_mut(&mut self) -> &mut T
    where
        T: Default,
    {
        if !matches!(self, Loose::Ok(_)) {
            *self = Loose::Ok(T::default());
        }
        match self {
            Loose::Ok(v) => v,
            _ => unreachable!("just made Ok"),
        }
    }
}

impl<T> From<Option<T>> for Loose<T> {
    fn from(v: Option<T>) -> Self {
        v.map_or(Loose::Absent, Loose::Ok)
    }
}

impl<T> Loose<Vec<Loose<T>>> {
    /// The well-formed elements.
    pub fn items(&self) -> impl Iterator<Item = &T> {
        self.get().into_iter().flatten().filter_map(Loose::get)
    }

    /// Keeps the well-formed elements `keep` accepts; none left: absent
    /// (the serving rules' "only when there is one").
    pub fn retain_or_absent(&mut self, mut keep: impl FnMut(&mut T) -> bool) {
        if let Loose::Ok(v) = self {
            v.retain_mut(|e| match e {
                Loose::Ok(x) => keep(x),
                _ => false,
            });
            if v.is_empty() {
                *self = Loose::Absent;
            }
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
impl Problem for Time {}
impl Problem for Empty {}

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
    /// A float, a number past 64 bits, bytes or an enum.
    fn from_other() -> Option<Self> {
        None
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

/// A `metav1.Time`: RFC 3339 text in JSON, seconds in Protobuf. Kept as
/// text; its conversion parses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Time(pub String);

impl Shape<'_> for Time {
    fn from_str(s: &str) -> Option<Self> {
        Some(Time(s.to_owned()))
    }
}

/// A field that is never read, only served (written empty where the API's
/// schema requires it, such as a Job's `spec.template`): whatever its
/// shape, it decodes, so it never makes an object malformed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Empty;

impl<'de> Shape<'de> for Empty {
    fn from_bool(_: bool) -> Option<Self> {
        Some(Empty)
    }
    fn from_i64(_: i64) -> Option<Self> {
        Some(Empty)
    }
    fn from_u64(_: u64) -> Option<Self> {
        Some(Empty)
    }
    fn from_str(_: &str) -> Option<Self> {
        Some(Empty)
    }
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Option<Self>, A::Error> {
        drain_map(map).map(|()| Some(Empty))
    }
    fn from_seq<A: SeqAccess<'de>>(seq: A) -> Result<Option<Self>, A::Error> {
        drain_seq(seq).map(|()| Some(Empty))
    }
    fn from_other() -> Option<Self> {
        Some(Empty)
    }
}

/// Which keys of a string map are kept.
pub trait KeyFilter: Clone + fmt::Debug + Default + PartialEq {
    fn keep(key: &str) -> bool;
}

/// No key: the map is walked and nothing allocated (a Node's labels).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NoKeys;

impl KeyFilter for NoKeys {
    fn keep(_: &str) -> bool {
        false
    }
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

impl<F> StrMap<F> {
    pub fn new(entries: Vec<(String, String)>) -> Self {
        Self {
            entries,
            ..Self::default()
        }
    }

    /// Sorted by key, each key once (its last value): a Go map, as
    /// Kubernetes writes one.
    pub fn normalize(&mut self) {
        if self.entries.windows(2).all(|p| p[0].0 < p[1].0) {
            return;
        }
        // Stable: of one key's entries, the last in wire order stays last.
        self.entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(String, String)> = Vec::with_capacity(self.entries.len());
        for e in self.entries.drain(..) {
            match out.last_mut() {
                Some(last) if last.0 == e.0 => *last = e,
                _ => out.push(e),
            }
        }
        self.entries = out;
    }

    /// Marks the map as holding a value of the wrong shape.
    pub(super) fn set_bad(&mut self) {
        self.bad = true;
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
        Ok(shaped(T::from_other()))
    }
    fn visit_u128<E: de::Error>(self, _: u128) -> Result<Self::Value, E> {
        Ok(shaped(T::from_other()))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(shaped(T::from_other()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(shaped(T::from_str(v)))
    }
    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Self::Value, E> {
        Ok(shaped(T::from_other()))
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
        de::VariantAccess::newtype_variant::<IgnoredAny>(variant).map(|_| shaped(T::from_other()))
    }
}

/// Decodes a struct key to the known field name it equals, or `None`,
/// without allocating.
pub(super) struct FieldKey(pub(super) &'static [&'static str]);

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
