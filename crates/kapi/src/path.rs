//! The resource paths of the API: `/api/v1/…` for the core group,
//! `/apis/{group}/v1/…` for the others, parsed into what they name.

use crate::Kind;

/// What a resource path names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub kind: Kind,
    /// The namespace of a namespaced path.
    pub ns: Option<String>,
    /// The object, for a path that names one.
    pub name: Option<String>,
    /// The object's `status` subresource.
    pub status: bool,
    /// The deprecated `/watch/` form (`/api/v1/watch/pods`): a watch.
    pub watch: bool,
}

impl Target {
    /// Parses `path` (without its query) as a server of the kinds `served`
    /// does: `[watch/][namespaces/{ns}/]{resource}[/{name}[/status]]`
    /// after `/api/v1/` or `/apis/{group}/v1/`, only kinds of that group,
    /// a namespaced kind's object only in its namespace, a cluster-scoped
    /// kind never in one. `None` when the path names nothing served.
    pub fn parse(path: &str, served: &[Kind]) -> Option<Target> {
        let path = path.trim_end_matches('/');
        let (group, rest) = if let Some(rest) = path.strip_prefix("/api/v1/") {
            ("", rest)
        } else {
            let (group, rest) = path.strip_prefix("/apis/")?.split_once('/')?;
            (group, rest.strip_prefix("v1/")?)
        };
        let mut segs: Vec<&str> = rest.split('/').collect();
        let watch = segs.first() == Some(&"watch");
        if watch {
            segs.remove(0);
        }
        let kind = |p: &str| Kind::from_plural(p).filter(|k| served.contains(k));
        let owned = |s: &&str| Some(s.to_string());
        let (kind, ns, name, status) = match segs.as_slice() {
            [p] => (kind(p)?, None, None, false),
            ["namespaces", name] => (Kind::Namespace, None, owned(name), false),
            ["namespaces", name, "status"] => (Kind::Namespace, None, owned(name), true),
            // A cluster-scoped object by name (`nodes/n1`).
            [p, name] if *p != "namespaces" => (kind(p)?, None, owned(name), false),
            [p, name, "status"] if *p != "namespaces" => (kind(p)?, None, owned(name), true),
            ["namespaces", ns, p] if *p != "namespaces" => (kind(p)?, owned(ns), None, false),
            ["namespaces", ns, p, name] if *p != "namespaces" => {
                (kind(p)?, owned(ns), owned(name), false)
            }
            ["namespaces", ns, p, name, "status"] if *p != "namespaces" => {
                (kind(p)?, owned(ns), owned(name), true)
            }
            _ => return None,
        };
        let found = served.contains(&kind)
            && kind.group() == group
            && !(kind.namespaced() && name.is_some() && ns.is_none())
            && (kind.namespaced() || kind == Kind::Namespace || ns.is_none());
        found.then_some(Target {
            kind,
            ns,
            name,
            status,
            watch,
        })
    }

    /// The resource as the API server names it in audit logs and RBAC:
    /// `pods`, or `pods/status` for the subresource.
    pub fn resource(&self) -> String {
        if self.status {
            format!("{}/status", self.kind.plural())
        } else {
            self.kind.plural().to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(path: &str) -> Option<Target> {
        Target::parse(path, &Kind::ALL)
    }

    fn target(kind: Kind, ns: Option<&str>, name: Option<&str>) -> Option<Target> {
        Some(Target {
            kind,
            ns: ns.map(str::to_owned),
            name: name.map(str::to_owned),
            status: false,
            watch: false,
        })
    }

    #[test]
    fn paths_name_kinds_namespaces_objects_and_subresources() {
        assert_eq!(parse("/api/v1/pods"), target(Kind::Pod, None, None));
        let status = parse("/api/v1/namespaces/ml/pods/p/status").unwrap();
        assert_eq!(
            (status.ns.as_deref(), status.name.as_deref()),
            (Some("ml"), Some("p"))
        );
        assert!(status.status && !status.watch);
        assert_eq!(status.resource(), "pods/status");
        let watch = parse("/api/v1/watch/namespaces/ml/pods").unwrap();
        assert_eq!((watch.kind, watch.ns.as_deref()), (Kind::Pod, Some("ml")));
        assert!(watch.watch && !watch.status);
        assert_eq!(
            parse("/api/v1/namespaces/ml"),
            target(Kind::Namespace, None, Some("ml"))
        );
        assert_eq!(
            parse("/api/v1/nodes/n1/"),
            target(Kind::Node, None, Some("n1"))
        );
        assert_eq!(
            parse("/apis/batch/v1/namespaces/ml/jobs/j"),
            target(Kind::Job, Some("ml"), Some("j"))
        );
        assert_eq!(
            parse("/apis/rbac.authorization.k8s.io/v1/clusterroles/admin"),
            target(Kind::ClusterRole, None, Some("admin"))
        );
    }

    #[test]
    fn paths_outside_a_kinds_group_or_scope_name_nothing() {
        for p in [
            "/api/v1/jobs",
            "/apis/batch/v1/pods",
            "/apis/batch/v2/jobs",
            "/api/v1/pods/p",
            "/api/v1/namespaces/ml/nodes",
            "/api/v1/namespaces/ml/namespaces",
            "/api/v1/namespaces/ml/pods/p/log",
            "/api/v1/widgets",
            "/api/v1",
            "/apis",
            "/version",
        ] {
            assert_eq!(parse(p), None, "{p}");
        }
        let relay = [Kind::Pod, Kind::Service, Kind::Job, Kind::EndpointSlice];
        assert!(Target::parse("/api/v1/nodes", &relay).is_none());
        assert!(Target::parse("/api/v1/namespaces/ml", &relay).is_none());
        assert!(Target::parse("/api/v1/namespaces/ml/services", &relay).is_some());
    }
}
