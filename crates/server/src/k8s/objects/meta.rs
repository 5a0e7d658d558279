//! `metadata`, which every kind shares: declared once ([`MetaRaw`]), and
//! split into the identity kube-runtime needs (`ObjectMeta`) and what DNS
//! reads besides ([`SlimMeta`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::loose::{AllKeys, IndexAnnotations, KeyFilter, Loose, LooseStr, NoKeys, StrMap, Time};

fields! {
    /// `metadata`, as far as DNS cares: `L` and `A` choose which labels and
    /// annotations are kept (the others are walked, never allocated).
    pub struct MetaRaw<L: KeyFilter, A: KeyFilter> {
        pub name: LooseStr = ("name", 1),
        pub namespace: LooseStr = ("namespace", 3),
        pub uid: LooseStr = ("uid", 5),
        pub resource_version: LooseStr = ("resourceVersion", 6),
        pub creation_timestamp: Loose<Time> = ("creationTimestamp", 8),
        pub deletion_timestamp: Loose<Time> = ("deletionTimestamp", 9),
        pub labels: Loose<StrMap<L>> = ("labels", 11),
        pub annotations: Loose<StrMap<A>> = ("annotations", 12),
    }
}

/// The metadata of a namespaced kind: every label (a Service created later
/// may select on any), the annotations the rank view reads.
pub type Meta = MetaRaw<AllKeys, IndexAnnotations>;

/// The metadata of a cluster-scoped kind whose identity is all DNS reads
/// (a Node's labels and annotations are skipped unread).
pub type MetaId = MetaRaw<NoKeys, NoKeys>;

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
pub fn split<L, A>(m: Loose<MetaRaw<L, A>>) -> (ObjectMeta, SlimMeta)
where
    MetaRaw<L, A>: Default,
{
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
        creation_timestamp: m.creation_timestamp.into_option().map(|t| t.0),
        deletion_timestamp: m.deletion_timestamp.into_option().map(|t| t.0),
    };
    (object, slim)
}

fn map<F>(entries: &[(String, String)]) -> Loose<StrMap<F>> {
    if entries.is_empty() {
        Loose::Absent
    } else {
        Loose::Ok(StrMap::new(entries.to_vec()))
    }
}

/// The declared metadata again, from its two halves (an empty map is
/// absent, as the API server leaves it out).
pub fn join<L, A>(object: &ObjectMeta, slim: &SlimMeta) -> MetaRaw<L, A>
where
    MetaRaw<L, A>: Default,
{
    MetaRaw {
        name: object.name.clone().into(),
        namespace: object.namespace.clone().into(),
        uid: object.uid.clone().into(),
        resource_version: object.resource_version.clone().into(),
        creation_timestamp: slim.creation_timestamp.clone().map(Time).into(),
        deletion_timestamp: slim.deletion_timestamp.clone().map(Time).into(),
        labels: map(&slim.labels),
        annotations: map(&slim.annotations),
        ..MetaRaw::default()
    }
}
