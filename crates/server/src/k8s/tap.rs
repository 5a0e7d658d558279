//! The kinds the watches read ([`Watched`]): each one's decoding and
//! conversion ([`Slim`]), its `resource` metric label, and whether the
//! cluster may refuse it.

use std::fmt::Debug;

use serde::de::DeserializeOwned;

use super::objects::{
    Slim, SlimEndpointSlice, SlimJob, SlimNode, SlimPod, SlimService, SlimServiceCidr,
};

/// A resource podns watches: a kind ([`Slim`]: its conversion, index
/// update and whether the relay serves it) and what its watch adds.
pub trait Watched:
    Slim<Info: Clone + Send + 'static>
    + kube::Resource<DynamicType = ()>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    /// The `resource` metric label.
    const RESOURCE: &'static str;
    /// An optional resource (the rank view's Jobs): when the API refuses it
    /// (403 without RBAC, 404 on a server without it), the index is told it
    /// is empty so DNS still becomes ready, and the watch keeps retrying.
    const OPTIONAL: bool = false;
    /// What serving without an optional resource means, for the one log
    /// line that says it is missing.
    const WITHOUT: &'static str = "serving without them until it can (check RBAC)";
}

impl Watched for SlimPod {
    const RESOURCE: &'static str = "pods";
}

impl Watched for SlimService {
    const RESOURCE: &'static str = "services";
}

impl Watched for SlimJob {
    const RESOURCE: &'static str = "jobs";
    const OPTIONAL: bool = true;
}

impl Watched for SlimEndpointSlice {
    const RESOURCE: &'static str = "endpointslices";
    /// Without RBAC on them, everything but Services without a selector
    /// is still answered.
    const OPTIONAL: bool = true;
}

/// Without Nodes or ServiceCIDRs, their ranges are not owned: reverse
/// names there get REFUSED and resolvers ask their next server, so node
/// DNS keeps working (never an authoritative NXDOMAIN for a range podns
/// cannot place).
const WITHOUT_RANGES: &str = "their ranges' reverse names get REFUSED (resolvers fall through to the next server) until it can; grant list/watch on them (deploy/base/rbac.yaml) or pass --reverse-cidr";

impl Watched for SlimNode {
    const RESOURCE: &'static str = "nodes";
    const OPTIONAL: bool = true;
    const WITHOUT: &'static str = WITHOUT_RANGES;
}

impl Watched for SlimServiceCidr {
    const RESOURCE: &'static str = "servicecidrs";
    const OPTIONAL: bool = true;
    const WITHOUT: &'static str = WITHOUT_RANGES;
}
