//! The Kubernetes kinds podns reads, a file each: [`pod`], [`service`],
//! [`job`], [`endpoint_slice`], and [`ranges`] (Nodes and ServiceCIDRs, of
//! which DNS reads only their ranges). A kind's file holds all of it:
//!
//! - its fields, each declared once with its JSON key and its Protobuf
//!   number (`fields!`: `pub host_network: Loose<bool> = ("hostNetwork",
//!   11)`), in the order of those numbers. From that one declaration come
//!   the JSON decoder (serde), the Protobuf decoder (a walk over the
//!   message that copies only the strings it keeps), and both encodings
//!   the relay serves. Everything undeclared is skipped unread;
//! - its slim type (`slim!`: `SlimPod`), what the watch decodes, with the
//!   identity kube-runtime needs split off ([`meta`]);
//! - the conversion into index input (`PodInfo`), where everything the
//!   index relies on is checked ([`Slim::convert`]);
//! - for the kinds the relay serves, its serving rules ([`Relayed::rules`]):
//!   what of the object a node instance, kubectl or kube-rs is served.
//!
//! Decoding is total on both wires: a field of the wrong shape marks the
//! object `malformed` (named by the field's JSON key) instead of failing
//! its list ([`loose`]).

use podns_kapi::Kind;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::convert::{self, ConvertError};
use crate::index::types::{Change, ObjKey, Update};
use loose::Loose;
use proto::{Val, fields as pb_fields};
use value::Unfit;

/// Declares a message: each field with its JSON key and Protobuf number,
/// in the order of the numbers (checked when compiling), each a [`Loose`]
/// value. It implements the JSON decoder ([`loose::Shape`]: known keys
/// decode into their field, the last of a duplicate wins, unknown keys are
/// skipped, and the first malformed field is remembered in `malformed`),
/// and [`Message`] and [`value::Value`]: the Protobuf decoder and both
/// encoders.
macro_rules! fields {
    (
        $(#[$meta:meta])*
        pub struct $name:ident $(<$($g:ident: $gb:ident),+>)? {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty = ($key:literal, $num:literal), )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct $name $(<$($g),+>)? {
            $( $(#[$fmeta])* pub $field: $ty, )*
            /// The JSON key of the first malformed field, if any.
            pub malformed: Option<&'static str>,
        }

        const _: () = assert!(
            $crate::k8s::objects::ascending(&[$($num),*]),
            concat!(stringify!($name), ": declare the fields in the order of their Protobuf numbers"),
        );

        impl $(<$($g: $gb),+>)? $crate::k8s::objects::loose::Problem for $name $(<$($g),+>)? {
            fn problem(&self) -> Option<&'static str> {
                self.malformed
            }
        }

        impl<'de $(, $($g: $gb),+)?> $crate::k8s::objects::loose::Shape<'de> for $name $(<$($g),+>)? {
            fn from_map<M: serde::de::MapAccess<'de>>(mut map: M) -> Result<Option<Self>, M::Error> {
                const FIELDS: &[&str] = &[$($key),*];
                let mut out = Self::default();
                while let Some(key) = map.next_key_seed($crate::k8s::objects::loose::FieldKey(FIELDS))? {
                    match key {
                        $( Some($key) => out.$field = map.next_value()?, )*
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                $crate::k8s::objects::Message::checked(&mut out);
                Ok(Some(out))
            }
        }

        impl $(<$($g: $gb),+>)? $crate::k8s::objects::Message for $name $(<$($g),+>)? {
            fn merge_field(&mut self, num: u32, v: $crate::k8s::objects::proto::Val<'_>) {
                match num {
                    $( $num => $crate::k8s::objects::value::Value::merge_pb(&mut self.$field, v), )*
                    _ => {}
                }
            }
            fn checked(&mut self) {
                self.malformed = None $( .or_else(|| self.$field.problem_at($key)) )*;
            }
            #[allow(unused_variables)]
            fn write_fields(&self, w: &mut Vec<u8>) -> Result<(), $crate::k8s::objects::value::Unfit> {
                $(
                    if let $crate::k8s::objects::loose::Loose::Ok(v) = &self.$field {
                        $crate::k8s::objects::value::Value::write_pb(v, $num, w)?;
                    }
                )*
                Ok(())
            }
            #[allow(unused_variables)]
            fn write_json_fields(&self, w: &mut Vec<u8>, first: &mut bool) {
                $(
                    if let $crate::k8s::objects::loose::Loose::Ok(v) = &self.$field {
                        $crate::k8s::objects::value::json_key(w, $key, first);
                        $crate::k8s::objects::value::Value::write_json(v, w);
                    }
                )*
            }
        }

        impl $(<$($g: $gb),+>)? $crate::k8s::objects::value::Value for $name $(<$($g),+>)? {
            fn from_pb(v: $crate::k8s::objects::proto::Val<'_>) -> Option<Self> {
                $crate::k8s::objects::decode_message($crate::k8s::objects::proto::sub(v)?)
            }
            fn write_pb(&self, num: u32, w: &mut Vec<u8>) -> Result<(), $crate::k8s::objects::value::Unfit> {
                $crate::k8s::objects::proto::put_message(w, num, |w| {
                    $crate::k8s::objects::Message::write_fields(self, w)
                })
            }
            fn write_json(&self, w: &mut Vec<u8>) {
                w.push(b'{');
                $crate::k8s::objects::Message::write_json_fields(self, w, &mut true);
                w.push(b'}');
            }
        }
    };
}

/// In a relayed kind's [`Slim`] impl: the relay serves it.
macro_rules! relayed_by {
    (relayed) => {
        const RELAYED: Option<podns_kapi::Kind> = Some(<Self as $crate::k8s::objects::Slim>::KIND);
        fn relayed(&self) -> Option<$crate::k8s::objects::Served> {
            <Self as $crate::k8s::objects::Relayed>::served(self)
        }
    };
}

/// Declares a kind's slim type from its declared top-level message: the
/// message's fields but `metadata`, which is split into `metadata` (the
/// identity kube-runtime reads) and `meta` (the rest); a sub-message
/// field is its value (absent: the default), any other stays [`Loose`].
/// It implements the JSON and Protobuf decoders of the kind ([`Slim`],
/// with its conversion `$convert` into index input and the index update
/// `$update` that carries it) and `kube::Resource`; `relayed` when the
/// relay serves the kind (its [`Relayed`] rules are in its file).
macro_rules! slim {
    (
        $(#[$meta:meta])*
        pub struct $name:ident: $raw:ident($kind:expr, $scope:ident) -> $info:ty, $convert:path, $update:path $(, $relayed:ident)? {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct $name {
            /// Name, namespace, uid and resourceVersion; nothing else is set.
            pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            pub meta: $crate::k8s::objects::meta::SlimMeta,
            $( $(#[$fmeta])* pub $field: $ty, )*
            /// The JSON key of the first field that had the wrong shape
            /// (`"object"` when the object itself was not one).
            pub malformed: Option<&'static str>,
        }

        impl $name {
            fn from_raw(raw: $raw, malformed: Option<&'static str>) -> Self {
                let (metadata, meta) = $crate::k8s::objects::meta::split(raw.metadata);
                Self {
                    metadata,
                    meta,
                    $( $field: $crate::k8s::objects::Slot::from_slot(raw.$field), )*
                    malformed,
                }
            }

        }

        impl $crate::k8s::objects::Slim for $name {
            type Info = $info;
            type Raw = $raw;
            const KIND: podns_kapi::Kind = $kind;
            fn decode_pb(b: &[u8]) -> Self {
                let mut raw = $raw::default();
                let whole = $crate::k8s::objects::Message::merge_all(&mut raw, b);
                $crate::k8s::objects::Message::checked(&mut raw);
                let malformed = if whole { raw.malformed } else { Some("object") };
                Self::from_raw(raw, malformed)
            }
            fn convert(&self) -> Result<$info, $crate::k8s::convert::ConvertError> {
                if let Some(field) = self.malformed {
                    return Err($crate::k8s::convert::ConvertError::Malformed(field));
                }
                $convert(self)
            }
            fn key(info: &$info) -> &$crate::index::types::ObjKey {
                &info.key
            }
            fn update(change: $crate::index::types::Change<$info>) -> $crate::index::types::Update {
                $update(change)
            }
            fn to_raw(&self) -> $raw {
                $raw {
                    metadata: $crate::k8s::objects::loose::Loose::Ok(
                        $crate::k8s::objects::meta::join(&self.metadata, &self.meta),
                    ),
                    $( $field: $crate::k8s::objects::Slot::to_slot(&self.$field), )*
                    malformed: self.malformed,
                }
            }
            $( relayed_by!($relayed); )?
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                use $crate::k8s::objects::loose::Loose;
                let raw = <Loose<$raw> as serde::Deserialize>::deserialize(d)?;
                let malformed = raw.problem_at("object");
                Ok(Self::from_raw(raw.into_option().unwrap_or_default(), malformed))
            }
        }

        impl kube::Resource for $name {
            type DynamicType = ();
            type Scope = k8s_openapi::$scope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Borrowed($kind.name())
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Borrowed($kind.group())
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                let v = $kind.api_version();
                std::borrow::Cow::Borrowed(v.rsplit('/').next().unwrap_or(v))
            }
            fn api_version(_: &()) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Borrowed($kind.api_version())
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Borrowed($kind.plural())
            }
            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

pub mod loose;
pub mod proto;
pub mod value;

pub mod meta;

pub mod endpoint_slice;
pub mod job;
pub mod pod;
pub mod ranges;
pub mod served;
pub mod service;

pub use endpoint_slice::SlimEndpointSlice;
pub use job::SlimJob;
pub use pod::SlimPod;
pub use ranges::{SlimNode, SlimServiceCidr};
pub use served::{Relayed, Served};
pub use service::SlimService;

/// A Kubernetes kind as podns reads it.
pub trait Slim: Sized {
    /// What the index is fed.
    type Info;
    /// Its declared top-level message (`fields!`).
    type Raw: Message;
    /// The kind, as the API names it.
    const KIND: Kind;
    /// The object from its Protobuf message. Never fails: a broken object
    /// comes back with `malformed` set (`"object"` when its framing broke
    /// off; what was read before is kept, its name for a log line).
    fn decode_pb(b: &[u8]) -> Self;
    /// The index input. Everything the index relies on is checked here
    /// (valid DNS labels, parsed IPs, known protocols); an object that
    /// cannot be converted is logged, counted and skipped by the watch.
    fn convert(&self) -> Result<Self::Info, ConvertError>;
    /// The key of its index input.
    fn key(info: &Self::Info) -> &ObjKey;
    /// The index update that applies or deletes one.
    fn update(change: Change<Self::Info>) -> Update;
    /// The key of an object that is deleted or no longer converts: its
    /// namespace and name (a cluster-scoped kind's: its name).
    fn key_of(meta: &ObjectMeta) -> Result<ObjKey, ConvertError> {
        if Self::KIND.namespaced() {
            convert::key(meta)
        } else {
            convert::cluster_key(meta)
        }
    }
    /// The declared message again (a copy, for serving).
    fn to_raw(&self) -> Self::Raw;
    /// The kind the relay serves these as, if it does.
    const RELAYED: Option<Kind> = None;
    /// What the relay serves of this object ([`Relayed::served`]), if it
    /// serves the kind.
    fn relayed(&self) -> Option<Served> {
        None
    }
}

/// A declared message (`fields!`): its fields from Protobuf, and both of
/// its encodings.
pub trait Message: Default {
    /// One field from Protobuf; an undeclared number is skipped.
    fn merge_field(&mut self, num: u32, v: Val<'_>);
    /// After the last field: remembers the first malformed one.
    fn checked(&mut self);
    /// The fields that are there, in Protobuf.
    fn write_fields(&self, w: &mut Vec<u8>) -> Result<(), Unfit>;
    /// The fields that are there, as JSON members.
    fn write_json_fields(&self, w: &mut Vec<u8>, first: &mut bool);

    /// Every field of `b`; false when its framing broke off (the fields
    /// before are kept).
    fn merge_all(&mut self, b: &[u8]) -> bool {
        for f in pb_fields(b) {
            match f {
                Ok((n, v)) => self.merge_field(n, v),
                Err(_) => return false,
            }
        }
        true
    }
}

/// A sub-message; `None` (a `Bad` field) when its framing is broken.
pub fn decode_message<M: Message>(b: &[u8]) -> Option<M> {
    let mut m = M::default();
    let whole = m.merge_all(b);
    m.checked();
    whole.then_some(m)
}

/// How a slim type holds a field of its declared message.
pub trait Slot<R>: Sized {
    fn from_slot(r: R) -> Self;
    fn to_slot(&self) -> R;
}

/// A sub-message (`spec`, `status`): absent is its default.
impl<T: Message + Clone> Slot<Loose<T>> for T {
    fn from_slot(r: Loose<T>) -> Self {
        r.into_option().unwrap_or_default()
    }
    fn to_slot(&self) -> Loose<T> {
        Loose::Ok(self.clone())
    }
}

/// Any other field, as declared.
impl<T: Clone + value::Value> Slot<Loose<T>> for Loose<T> {
    fn from_slot(r: Loose<T>) -> Self {
        r
    }
    fn to_slot(&self) -> Loose<T> {
        self.clone()
    }
}

/// Whether Protobuf numbers are declared in order (the order they are
/// written in, as kube-apiserver and prost write them).
pub const fn ascending(nums: &[u32]) -> bool {
    let mut i = 1;
    while i < nums.len() {
        if nums[i - 1] >= nums[i] {
            return false;
        }
        i += 1;
    }
    true
}
