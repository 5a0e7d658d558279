//! Nodes and ServiceCIDRs (cluster-scoped), of which DNS reads one list
//! of ranges each: a Node's `spec.podCIDRs`, a ServiceCIDR's `spec.cidrs`.
//! Their metadata is their identity (a Node's labels and annotations are
//! walked unread, as is its `status`, most of a Node's bytes and of its
//! updates). The index input is a [`RangesInfo`]; neither kind is relayed.

use podns_kapi::Kind;

use super::loose::{Loose, LooseVec};
use super::meta::MetaId;
use crate::index::types::{RangesInfo, Update};
use crate::k8s::convert::{ConvertError, cluster_key};

fields! {
    /// `spec` of a Node: only its pod ranges.
    pub struct NodeSpecRaw {
        pub pod_cidrs: LooseVec<String> = ("podCIDRs", 7),
    }
}

fields! {
    pub struct NodeRaw {
        pub metadata: Loose<MetaId> = ("metadata", 1),
        pub spec: Loose<NodeSpecRaw> = ("spec", 2),
    }
}

slim! {
    /// A Node with only its name and `spec.podCIDRs`.
    pub struct SlimNode: NodeRaw(Kind::Node, ClusterResourceScope) -> RangesInfo, node, Update::NodeRanges {
        pub spec: NodeSpecRaw,
    }
}

fields! {
    /// `spec` of a networking.k8s.io/v1 ServiceCIDR.
    pub struct ServiceCidrSpecRaw {
        pub cidrs: LooseVec<String> = ("cidrs", 1),
    }
}

fields! {
    pub struct ServiceCidrRaw {
        pub metadata: Loose<MetaId> = ("metadata", 1),
        pub spec: Loose<ServiceCidrSpecRaw> = ("spec", 2),
    }
}

slim! {
    /// A networking.k8s.io/v1 ServiceCIDR with only its name and `spec.cidrs`.
    pub struct SlimServiceCidr: ServiceCidrRaw(Kind::ServiceCidr, ClusterResourceScope) -> RangesInfo, service_cidr, Update::ServiceRanges {
        pub spec: ServiceCidrSpecRaw,
    }
}

/// The index input of a Node: its `spec.podCIDRs` (none yet is fine:
/// a node that has no range assigned owns no reverse zone).
fn node(n: &SlimNode) -> Result<RangesInfo, ConvertError> {
    ranges(&n.metadata, &n.spec.pod_cidrs, "podCIDRs")
}

/// The index input of a ServiceCIDR: its `spec.cidrs`.
fn service_cidr(s: &SlimServiceCidr) -> Result<RangesInfo, ConvertError> {
    ranges(&s.metadata, &s.spec.cidrs, "cidrs")
}

/// Every element must be a CIDR (`10.244.1.0/24`; host bits are
/// dropped): an object with one that is not is skipped whole, so a typo
/// can never make podns claim or drop a range it was not given.
fn ranges(
    m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    items: &LooseVec<String>,
    field: &'static str,
) -> Result<RangesInfo, ConvertError> {
    let key = cluster_key(m)?;
    let mut cidrs = Vec::new();
    for item in items.get().into_iter().flatten() {
        let s = item.get().ok_or(ConvertError::Malformed(field))?;
        let net: ipnet::IpNet = s
            .parse()
            .map_err(|_| ConvertError::InvalidCidr(s.clone()))?;
        cidrs.push(net.trunc());
    }
    Ok(RangesInfo { key, cidrs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::ObjKey;
    use crate::k8s::objects::Slim;
    use crate::k8s::objects::served::tests::pb_of;

    #[test]
    fn node_and_service_cidr_decode_as_from_json_and_read_only_their_ranges() {
        let node = r#"{"apiVersion":"v1","kind":"Node",
          "metadata":{"name":"gpu-node-00001","uid":"n1","resourceVersion":"9",
            "labels":{"kubernetes.io/hostname":"gpu-node-00001","nvidia.com/gpu.product":"H100"},
            "annotations":{"node.alpha.kubernetes.io/ttl":"0"}},
          "spec":{"podCIDR":"10.244.1.0/24","podCIDRs":["10.244.1.0/24","fd00:10:244:1::/64"],"providerID":"kwok://n1"},
          "status":{"addresses":[{"type":"InternalIP","address":"172.16.0.3"}],
            "conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]}}"#;
        let json: SlimNode = serde_json::from_str(node).unwrap();
        let pb = SlimNode::decode_pb(&pb_of(Kind::Node, node));
        assert_eq!(pb.malformed, None);
        assert_eq!(pb, json);
        // Identity only: labels and annotations are never kept.
        assert_eq!(pb.metadata.labels, None);
        let info = pb.convert().unwrap();
        assert_eq!(info.key, ObjKey::new("", "gpu-node-00001"));
        assert_eq!(
            info.cidrs,
            [
                "10.244.1.0/24".parse::<ipnet::IpNet>().unwrap(),
                "fd00:10:244:1::/64".parse().unwrap()
            ]
        );

        let cidr = r#"{"apiVersion":"networking.k8s.io/v1","kind":"ServiceCIDR",
          "metadata":{"name":"kubernetes","uid":"c1","resourceVersion":"3"},
          "spec":{"cidrs":["10.96.0.0/12"]},"status":{"conditions":[{"type":"Ready","status":"True",
            "lastTransitionTime":"2025-01-01T00:00:00Z","reason":"","message":""}]}}"#;
        let json: SlimServiceCidr = serde_json::from_str(cidr).unwrap();
        let pb = SlimServiceCidr::decode_pb(&pb_of(Kind::ServiceCidr, cidr));
        assert_eq!(pb, json);
        assert_eq!(
            pb.convert().unwrap().cidrs,
            ["10.96.0.0/12".parse::<ipnet::IpNet>().unwrap()]
        );
        // A node without a range yet owns none; a bad range skips the object.
        let bare: SlimNode =
            serde_json::from_str(r#"{"metadata":{"name":"n"},"spec":{}}"#).unwrap();
        assert!(bare.convert().unwrap().cidrs.is_empty());
        let bad: SlimNode = serde_json::from_str(
            r#"{"metadata":{"name":"n"},"spec":{"podCIDRs":["10.1.0.0/33"]}}"#,
        )
        .unwrap();
        assert!(bad.convert().is_err());
        let bad: SlimNode =
            serde_json::from_str(r#"{"metadata":{"name":"n"},"spec":{"podCIDRs":"10.1.0.0/16"}}"#)
                .unwrap();
        assert_eq!(bad.malformed, Some("podCIDRs"));
    }
}
