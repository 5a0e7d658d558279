//! The kinds of Kubernetes objects podns serves, and what the API names them.

use serde_json::{Value, json};

use crate::selector::Field;

/// The kinds podns serves as an API server (the simulator all of them, the
/// relay Pods, Services and Jobs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Pod,
    Service,
    Namespace,
    Job,
    EndpointSlice,
    /// Cluster-scoped; `spec.podCIDRs` tells podns the pod ranges.
    Node,
    /// networking.k8s.io/v1, cluster-scoped: the Service ranges.
    ServiceCidr,
    /// rbac.authorization.k8s.io/v1: what SubjectAccessReviews are
    /// decided by (the simulator's authorizer; the relay asks it).
    ClusterRole,
    ClusterRoleBinding,
    Role,
    RoleBinding,
}

/// How many kinds there are (the store keeps one map per kind).
pub const KINDS: usize = 11;

impl Kind {
    pub const ALL: [Kind; KINDS] = [
        Kind::Pod,
        Kind::Service,
        Kind::Namespace,
        Kind::Job,
        Kind::EndpointSlice,
        Kind::Node,
        Kind::ServiceCidr,
        Kind::ClusterRole,
        Kind::ClusterRoleBinding,
        Kind::Role,
        Kind::RoleBinding,
    ];

    pub fn idx(self) -> usize {
        self as usize
    }
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pod => "Pod",
            Kind::Service => "Service",
            Kind::Namespace => "Namespace",
            Kind::Job => "Job",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::Node => "Node",
            Kind::ServiceCidr => "ServiceCIDR",
            Kind::ClusterRole => "ClusterRole",
            Kind::ClusterRoleBinding => "ClusterRoleBinding",
            Kind::Role => "Role",
            Kind::RoleBinding => "RoleBinding",
        }
    }
    /// The API group: empty for the core group.
    pub fn group(self) -> &'static str {
        match self {
            Kind::Job => "batch",
            Kind::EndpointSlice => "discovery.k8s.io",
            Kind::ServiceCidr => "networking.k8s.io",
            Kind::ClusterRole | Kind::ClusterRoleBinding | Kind::Role | Kind::RoleBinding => {
                "rbac.authorization.k8s.io"
            }
            _ => "",
        }
    }
    /// `apiVersion` of objects, lists and events of this kind.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Job => "batch/v1",
            Kind::EndpointSlice => "discovery.k8s.io/v1",
            Kind::ServiceCidr => "networking.k8s.io/v1",
            Kind::ClusterRole | Kind::ClusterRoleBinding | Kind::Role | Kind::RoleBinding => {
                "rbac.authorization.k8s.io/v1"
            }
            _ => "v1",
        }
    }
    /// The resource as error messages name it: `pods`, `jobs.batch`.
    pub fn resource(self) -> String {
        match self.group() {
            "" => self.plural().to_string(),
            g => format!("{}.{g}", self.plural()),
        }
    }
    /// `details` of a Status about one object of this kind.
    pub fn details(self, name: &str) -> Value {
        let mut d = json!({"name": name, "kind": self.plural()});
        if !self.group().is_empty() {
            d["group"] = self.group().into();
        }
        d
    }
    /// The kind a `kind` field names (for scenario files).
    pub fn from_name(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }
    pub fn list_name(self) -> &'static str {
        match self {
            Kind::Pod => "PodList",
            Kind::Service => "ServiceList",
            Kind::Namespace => "NamespaceList",
            Kind::Job => "JobList",
            Kind::EndpointSlice => "EndpointSliceList",
            Kind::Node => "NodeList",
            Kind::ServiceCidr => "ServiceCIDRList",
            Kind::ClusterRole => "ClusterRoleList",
            Kind::ClusterRoleBinding => "ClusterRoleBindingList",
            Kind::Role => "RoleList",
            Kind::RoleBinding => "RoleBindingList",
        }
    }
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Pod => "pods",
            Kind::Service => "services",
            Kind::Namespace => "namespaces",
            Kind::Job => "jobs",
            Kind::EndpointSlice => "endpointslices",
            Kind::Node => "nodes",
            Kind::ServiceCidr => "servicecidrs",
            Kind::ClusterRole => "clusterroles",
            Kind::ClusterRoleBinding => "clusterrolebindings",
            Kind::Role => "roles",
            Kind::RoleBinding => "rolebindings",
        }
    }
    pub fn from_plural(s: &str) -> Option<Kind> {
        Some(match s {
            "pods" => Kind::Pod,
            "services" => Kind::Service,
            "namespaces" => Kind::Namespace,
            "jobs" => Kind::Job,
            "endpointslices" => Kind::EndpointSlice,
            "nodes" => Kind::Node,
            "servicecidrs" => Kind::ServiceCidr,
            "clusterroles" => Kind::ClusterRole,
            "clusterrolebindings" => Kind::ClusterRoleBinding,
            "roles" => Kind::Role,
            "rolebindings" => Kind::RoleBinding,
            _ => return None,
        })
    }
    pub fn namespaced(self) -> bool {
        !matches!(
            self,
            Kind::Namespace
                | Kind::Node
                | Kind::ServiceCidr
                | Kind::ClusterRole
                | Kind::ClusterRoleBinding
        )
    }
    pub fn fields(self) -> &'static [Field] {
        match self {
            Kind::Pod => &[Field::Name, Field::Namespace, Field::NodeName, Field::Phase],
            Kind::Service | Kind::Job | Kind::EndpointSlice | Kind::Role | Kind::RoleBinding => {
                &[Field::Name, Field::Namespace]
            }
            Kind::Namespace => &[Field::Name, Field::Phase],
            Kind::Node | Kind::ServiceCidr | Kind::ClusterRole | Kind::ClusterRoleBinding => {
                &[Field::Name]
            }
        }
    }
}
