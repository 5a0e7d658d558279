//! What the relay serves of the kinds it relays: each kind's serving rules
//! ([`Relayed::serve`]) applied to its declared message, which is then
//! written straight to Protobuf for node instances and kubectl, and to
//! JSON for JSON clients ([`Served`]). Exactly the fields podns decodes,
//! written as the API server writes them, so a node instance decodes from
//! the relay what it would have decoded from the API server, and typed
//! clients read ordinary objects. No managedFields, no container images,
//! no volumes: a training pod of a few kilobytes is served in a few
//! hundred bytes.

use podns_kapi::Kind;

use super::loose::Problem;
use super::meta::Meta;
use super::proto::{fields, sub};
use super::value::{Unfit, Value, json_key, json_str};
use super::{Message, Slim, SlimEndpointSlice, SlimJob, SlimPod, SlimService, decode_message};

/// A kind the relay serves.
pub trait Relayed: Slim<Raw: Problem + Clone + Into<Served>> {
    /// The kind's serving rules, applied to an object podns decodes whole
    /// ([`Relayed::served`]): what the API's schema requires written even
    /// when absent, as the zero value a typed client reads for it; what
    /// nothing reads left out. (Encoding it may still find it [`Unfit`].)
    fn rules(raw: &mut Self::Raw);

    /// The node it runs on (a Pod's `spec.nodeName`; empty for the other
    /// kinds): the relay indexes its watchers by it.
    fn node_name(_: &Self::Raw) -> &str {
        ""
    }

    /// The label keys it selects pods by (a Service's selector).
    fn selects_on(_: &Self::Raw) -> Vec<&str> {
        Vec::new()
    }

    /// What the relay serves of this object: `None` for one podns itself
    /// skips as malformed.
    fn served(&self) -> Option<Served> {
        serve::<Self>(self.to_raw())
    }
}

/// `raw` as `K` serves it ([`Relayed::rules`]), with metadata.
fn serve<K: Relayed>(mut raw: K::Raw) -> Option<Served> {
    if raw.problem().is_some() {
        return None;
    }
    K::rules(&mut raw);
    let mut served: Served = raw.into();
    served.meta_mut();
    Some(served)
}

/// The field of a `…List` that repeats its items: a relayed object is kept
/// as the bytes it adds to its kind's list.
const ITEMS: u32 = 2;

macro_rules! relayed {
    ($($variant:ident($slim:ty)),* $(,)?) => {
        /// A relayed object as served ([`Relayed::serve`]), with all its
        /// labels: the relay chooses which it serves when it encodes it.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Served {
            $( $variant(<$slim as Slim>::Raw), )*
        }

        $(
            impl From<<$slim as Slim>::Raw> for Served {
                fn from(raw: <$slim as Slim>::Raw) -> Self {
                    Served::$variant(raw)
                }
            }
        )*

        /// The kinds the relay serves.
        pub const RELAYED: &[Kind] = &[$(<$slim as Slim>::KIND),*];

        impl Served {
            /// An object the relay keeps (its Protobuf message), decoded as
            /// podns decodes the API server's and served again.
            pub fn decode(kind: Kind, raw: &[u8]) -> Option<Self> {
                $(
                    if kind == <$slim as Slim>::KIND {
                        return serve::<$slim>(decode_message(raw)?);
                    }
                )*
                None
            }

            pub fn kind(&self) -> Kind {
                match self {
                    $( Served::$variant(_) => <$slim as Slim>::KIND, )*
                }
            }

            /// Its metadata (the serving rules make sure there is one).
            pub fn meta(&self) -> Option<&Meta> {
                match self {
                    $( Served::$variant(r) => r.metadata.get(), )*
                }
            }

            pub fn meta_mut(&mut self) -> &mut Meta {
                match self {
                    $( Served::$variant(r) => r.metadata.or_default_mut(), )*
                }
            }

            /// The node it runs on ([`Relayed::node_name`]).
            pub fn node_name(&self) -> &str {
                match self {
                    $( Served::$variant(r) => <$slim as Relayed>::node_name(r), )*
                }
            }

            /// The label keys it selects pods by ([`Relayed::selects_on`]).
            pub fn selects_on(&self) -> Vec<&str> {
                match self {
                    $( Served::$variant(r) => <$slim as Relayed>::selects_on(r), )*
                }
            }

            /// The object as one item of its kind's Protobuf list (the item
            /// field's key and length, then the object's message).
            pub fn pb_item(&self) -> Result<Vec<u8>, Unfit> {
                let mut w = Vec::with_capacity(512);
                match self {
                    $( Served::$variant(r) => r.write_pb(ITEMS, &mut w)?, )*
                }
                Ok(w)
            }

            /// The object as JSON, as a JSON client is served it.
            pub fn json(&self) -> Vec<u8> {
                let kind = self.kind();
                let mut w = Vec::with_capacity(1024);
                w.extend_from_slice(b"{");
                let mut first = true;
                json_key(&mut w, "apiVersion", &mut first);
                json_str(&mut w, kind.api_version());
                json_key(&mut w, "kind", &mut first);
                json_str(&mut w, kind.name());
                match self {
                    $( Served::$variant(r) => r.write_json_fields(&mut w, &mut first), )*
                }
                w.extend_from_slice(b"}");
                w
            }
        }
    };
}

relayed!(
    Pod(SlimPod),
    Service(SlimService),
    Job(SlimJob),
    EndpointSlice(SlimEndpointSlice),
);

/// An object's message in the parts that make it but for its
/// resourceVersion: what comes before its metadata, the metadata before
/// and after the resourceVersion field, and what follows the metadata
/// (the length prefixes, which count the version's bytes too, are left
/// out). Two versions of an object that serve alike have the same parts.
pub fn apart_from_version(raw: &[u8]) -> Option<[&[u8]; 4]> {
    const METADATA: u32 = 1;
    const RESOURCE_VERSION: u32 = 6;
    let mut top = fields(raw);
    loop {
        let before = top.at();
        let (n, v) = top.next()?.ok()?;
        if n != METADATA {
            continue;
        }
        let (meta, after) = (sub(v)?, top.at());
        let mut inner = fields(meta);
        loop {
            let at = inner.at();
            match inner.next() {
                None => return Some([&raw[..before], meta, &[], &raw[after..]]),
                Some(Ok((RESOURCE_VERSION, _))) => {
                    let rest = inner.at();
                    return Some([&raw[..before], &meta[..at], &meta[rest..], &raw[after..]]);
                }
                Some(Ok(_)) => {}
                Some(Err(_)) => return None,
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::fmt::Debug;

    use podns_kapi::pbenc;
    use serde::de::DeserializeOwned;

    use super::*;

    /// The object message of `json` as the simulator encodes it: through
    /// `k8s-openapi`, `k8s-pb` and prost, none of it ours.
    pub(crate) fn pb_of(kind: Kind, json: &str) -> Vec<u8> {
        let item = pbenc::list_item(kind, json.as_bytes()).unwrap();
        pbenc::object(&item).unwrap().to_vec()
    }

    /// One object (as the API server writes it in JSON) both ways:
    /// - decoding its JSON gives what decoding its Protobuf gives;
    /// - what the relay serves of it in Protobuf is, byte for byte, what
    ///   the simulator's encoder makes of the JSON it serves: typed clients
    ///   read that JSON, and the Protobuf is what prost writes;
    /// - both decode back to what was served (and the Protobuf, served
    ///   again, is the same bytes).
    ///
    /// Returns the object as decoded from JSON.
    pub(crate) fn round_trip<K>(json: &serde_json::Value) -> K
    where
        K: Relayed + DeserializeOwned + PartialEq + Debug,
    {
        let text = serde_json::to_string(json).unwrap();
        let from_json: K = serde_json::from_str(&text).unwrap();
        let from_pb = K::decode_pb(&pb_of(K::KIND, &text));
        assert_eq!(
            from_pb,
            from_json,
            "{:?}: JSON and Protobuf decode alike",
            K::KIND
        );

        let served = from_json.served().expect("served");
        let item = served.pb_item().expect("encodes");
        let json = served.json();
        let theirs = pbenc::list_item(K::KIND, &json).unwrap();
        assert_eq!(
            item,
            theirs,
            "{:?}: the served Protobuf is the simulator's of {}",
            K::KIND,
            String::from_utf8_lossy(&json)
        );

        let raw = pbenc::object(&item).unwrap();
        let again = Served::decode(K::KIND, raw).expect("decodes");
        assert_eq!(
            again,
            served,
            "{:?}: the served Protobuf decodes back",
            K::KIND
        );
        assert_eq!(again.pb_item().unwrap(), item);
        let from_served_json: K = serde_json::from_slice(&json).unwrap();
        assert_eq!(
            from_served_json.served(),
            Some(served),
            "{:?}: the served JSON decodes back",
            K::KIND
        );
        from_json
    }

    #[test]
    fn two_versions_apart_from_their_resource_version() {
        let pod = |rv: &str, ip: &str| {
            let p: SlimPod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "a", "namespace": "ml", "resourceVersion": rv,
                             "labels": {"app": "x"}},
                "spec": {"containers": [{"name": "c"}]},
                "status": {"podIP": ip},
            }))
            .unwrap();
            p.served().unwrap().pb_item().unwrap()
        };
        let parts = |item: &[u8]| {
            apart_from_version(pbenc::object(item).unwrap())
                .unwrap()
                .map(<[u8]>::to_vec)
        };
        let (a, b, c) = (
            pod("9", "10.0.0.1"),
            pod("123456", "10.0.0.1"),
            pod("9", "10.0.0.2"),
        );
        assert_ne!(a, b);
        assert_eq!(parts(&a), parts(&b), "the same object at another version");
        assert_ne!(parts(&a), parts(&c), "another object");
        assert!(
            parts(&a)[1].ends_with(b"ml"),
            "before the version: name, namespace"
        );
    }
}
