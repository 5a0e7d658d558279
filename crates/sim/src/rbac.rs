//! Authorization as kube-apiserver decides it with `--authorization-mode=RBAC`,
//! for components that ask it on behalf of their own clients:
//!
//! - `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`: a
//!   `SubjectAccessReview` (user, groups, extra, and the resource or
//!   non-resource attributes of a request), answered 201 with the review
//!   echoed and `status.allowed`, and when allowed the reason RBAC gives
//!   (`pkg/registry/authorization/subjectaccessreview`);
//! - [`authorize`], the same decision without HTTP.
//!
//! The decision reads the Roles, ClusterRoles and their bindings stored
//! like any other object (`rbac.authorization.k8s.io/v1`, created with
//! kubectl or kube-rs), as `plugin/pkg/auth/authorizer/rbac` does:
//! ClusterRoleBindings grant everywhere, RoleBindings (to a Role of their
//! namespace or to a ClusterRole) in their namespace only, and a rule
//! matches a verb, an API group, a resource (`*`, `res`, `res/sub`,
//! `*/sub`) and, when it lists any, a resource name; non-resource URLs
//! match exactly or by a trailing `*`. The group `system:masters` is
//! allowed everything, as the API server's privileged group.
//!
//! Known differences from the real server: no bootstrap policy (no
//! `system:*` roles exist until created), aggregated ClusterRoles are not
//! filled in (there is no aggregation controller), the simulator's own
//! requests are not authorized (every client is an administrator), and
//! there are no SelfSubjectAccessReviews (a client of the simulator has no
//! identity).

use axum::extract::Request;
use axum::response::Response;
use serde_json::{Map, Value, json};

use podns_kapi::{ApiError, Kind};

use crate::rest::{body_object, value_response};
use podns_kapi::filter::Filter;

use crate::store::Store;

const API_VERSION: &str = "authorization.k8s.io/v1";

/// The API server's group whose members may do anything.
pub const MASTERS: &str = "system:masters";

/// What a request is: who asks, and for what.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    pub user: String,
    pub groups: Vec<String>,
    pub verb: String,
    /// Resource requests: namespace (empty: cluster-wide), API group,
    /// resource, subresource, name.
    pub namespace: String,
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// Non-resource requests: the path (`resource` is then empty).
    pub path: Option<String>,
}

/// Allowed, with the reason RBAC gives, or not.
pub fn authorize(store: &Store, a: &Attributes) -> Option<String> {
    if a.groups.iter().any(|g| g == MASTERS) {
        return Some(String::new());
    }
    let all = Filter::default();
    for b in store.snapshot(Kind::ClusterRoleBinding, &all).1 {
        let b = b.value();
        if let Some(subject) = bound(&b, a, "")
            && rules(store, &b, "").iter().any(|r| allows(r, a))
        {
            return Some(reason(&b, "ClusterRoleBinding", "", &subject));
        }
    }
    if a.namespace.is_empty() || a.path.is_some() {
        return None;
    }
    let here = Filter {
        ns: Some(a.namespace.clone()),
        ..Default::default()
    };
    for b in store.snapshot(Kind::RoleBinding, &here).1 {
        let b = b.value();
        if let Some(subject) = bound(&b, a, &a.namespace)
            && rules(store, &b, &a.namespace).iter().any(|r| allows(r, a))
        {
            return Some(reason(&b, "RoleBinding", &a.namespace, &subject));
        }
    }
    None
}

/// `RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to
/// ServiceAccount "sa/ns"`, as the RBAC authorizer words it.
fn reason(b: &Value, kind: &str, ns: &str, subject: &Value) -> String {
    let binding = match ns {
        "" => format!("{kind} {:?}", b["metadata"]["name"].as_str().unwrap_or("")),
        ns => format!(
            "{kind} \"{}/{ns}\"",
            b["metadata"]["name"].as_str().unwrap_or("")
        ),
    };
    let role = format!(
        "{} {:?}",
        b["roleRef"]["kind"].as_str().unwrap_or(""),
        b["roleRef"]["name"].as_str().unwrap_or("")
    );
    let who = match subject["kind"].as_str().unwrap_or("") {
        "ServiceAccount" => format!(
            "ServiceAccount \"{}/{}\"",
            subject["name"].as_str().unwrap_or(""),
            subject["namespace"].as_str().unwrap_or(ns)
        ),
        k => format!("{k} {:?}", subject["name"].as_str().unwrap_or("")),
    };
    format!("RBAC: allowed by {binding} of {role} to {who}")
}

/// The subject of binding `b` (in namespace `ns`, empty for a
/// ClusterRoleBinding) that the requester is, if any.
fn bound(b: &Value, a: &Attributes, ns: &str) -> Option<Value> {
    b["subjects"]
        .as_array()?
        .iter()
        .find(|s| {
            let name = s["name"].as_str().unwrap_or("");
            match s["kind"].as_str() {
                Some("User") => a.user == name,
                Some("Group") => a.groups.iter().any(|g| g == name),
                Some("ServiceAccount") => {
                    // A RoleBinding's subject without a namespace is in
                    // the binding's.
                    let sns = s["namespace"]
                        .as_str()
                        .filter(|n| !n.is_empty())
                        .unwrap_or(ns);
                    !sns.is_empty() && a.user == format!("system:serviceaccount:{sns}:{name}")
                }
                _ => false,
            }
        })
        .cloned()
}

/// The rules of the role binding `b` refers to (a Role in `ns`, or a
/// ClusterRole); none when the role does not exist.
fn rules(store: &Store, b: &Value, ns: &str) -> Vec<Value> {
    let name = b["roleRef"]["name"].as_str().unwrap_or("");
    let role = match b["roleRef"]["kind"].as_str() {
        Some("ClusterRole") => store.get(Kind::ClusterRole, "", name),
        Some("Role") if !ns.is_empty() => store.get(Kind::Role, ns, name),
        _ => return vec![],
    };
    role.ok()
        .and_then(|r| r.value()["rules"].as_array().cloned())
        .unwrap_or_default()
}

fn has(list: &Value, want: &str) -> bool {
    list.as_array()
        .into_iter()
        .flatten()
        .any(|v| v.as_str().is_some_and(|v| v == "*" || v == want))
}

/// Whether rule `r` allows the request (`rbac/v1 helpers`' RuleAllows).
fn allows(r: &Value, a: &Attributes) -> bool {
    if !has(&r["verbs"], &a.verb) {
        return false;
    }
    if let Some(path) = &a.path {
        return r["nonResourceURLs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .any(|u| {
                u == "*" || u == path || u.strip_suffix('*').is_some_and(|p| path.starts_with(p))
            });
    }
    let combined = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let resource = r["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .any(|res| {
            res == "*"
                || res == combined
                || (!a.subresource.is_empty() && res.strip_prefix("*/") == Some(&a.subresource))
        });
    let names = r["resourceNames"].as_array().map_or(0, Vec::len) == 0
        || r["resourceNames"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|n| n.as_str() == Some(&a.name));
    has(&r["apiGroups"], &a.api_group) && resource && names
}

/// The path this module serves: SubjectAccessReviews, only created (POST).
pub const PATH: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// What discovery lists of this module: the `authorization.k8s.io`
/// group's SubjectAccessReviews.
pub fn resource() -> (&'static str, Value) {
    (
        "authorization.k8s.io",
        json!({"name": "subjectaccessreviews", "singularName": "subjectaccessreview",
               "namespaced": false, "kind": "SubjectAccessReview", "verbs": ["create"]}),
    )
}

/// Answers a create (POST) of a SubjectAccessReview: 201 with the review
/// and its decision.
pub async fn serve(store: &Store, req: Request) -> Result<Response, ApiError> {
    let body = body_object(req, "SubjectAccessReview", API_VERSION).await?;
    Ok(value_response(201, &review(store, body)?))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// A SubjectAccessReview: validated as the API server does, decided, and
/// echoed with its status.
fn review(store: &Store, body: Map<String, Value>) -> Result<Value, ApiError> {
    const KIND: &str = "SubjectAccessReview";
    let spec = body.get("spec").cloned().unwrap_or(Value::Null);
    let resource = spec.get("resourceAttributes").filter(|v| !v.is_null());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    let invalid = |detail: &str| {
        ApiError::new(
            422,
            "Invalid",
            format!("{KIND}.authorization.k8s.io \"\" is invalid: {detail}"),
        )
    };
    match (resource, non_resource) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "spec.nonResourceAttributes: Invalid value: \"null\": cannot be specified in combination with resourceAttributes",
            ));
        }
        (None, None) => {
            return Err(invalid(
                "spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ));
        }
        _ => {}
    }
    let user = spec["user"].as_str().unwrap_or("").to_owned();
    let groups = strings(&spec["groups"]);
    if user.is_empty() && groups.is_empty() {
        return Err(invalid(
            "spec.user: Invalid value: \"\": at least one of user or group must be specified",
        ));
    }
    let s = |v: Option<&Value>, k: &str| v.and_then(|v| v[k].as_str()).unwrap_or("").to_owned();
    let attrs = Attributes {
        user,
        groups,
        verb: s(resource.or(non_resource), "verb"),
        namespace: s(resource, "namespace"),
        api_group: s(resource, "group"),
        resource: s(resource, "resource"),
        subresource: s(resource, "subresource"),
        name: s(resource, "name"),
        path: non_resource.map(|v| v["path"].as_str().unwrap_or("").to_owned()),
    };
    // Go's encoding leaves out `allowed: false` and an empty reason.
    let status = match authorize(store, &attrs) {
        Some(r) if r.is_empty() => json!({"allowed": true}),
        Some(r) => json!({"allowed": true, "reason": r}),
        None => json!({}),
    };
    let mut metadata = match body.get("metadata") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    metadata.entry("creationTimestamp").or_insert(Value::Null);
    Ok(json!({
        "kind": KIND,
        "apiVersion": API_VERSION,
        "metadata": metadata,
        "spec": spec,
        "status": status,
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn store_with(objects: &[(Kind, &str, Value)]) -> Arc<Store> {
        let store = Store::new(10_000);
        for ns in ["podns", "web"] {
            store
                .create(Kind::Namespace, "", json!({"metadata": {"name": ns}}))
                .unwrap();
        }
        for (kind, ns, v) in objects {
            store.create(*kind, ns, v.clone()).unwrap();
        }
        store
    }

    fn sa(ns: &str, name: &str) -> Attributes {
        Attributes {
            user: format!("system:serviceaccount:{ns}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ],
            verb: "get".into(),
            api_group: "dns.podns.io".into(),
            resource: "relays".into(),
            name: "nodes".into(),
            ..Default::default()
        }
    }

    fn relay_role() -> Vec<(Kind, &'static str, Value)> {
        vec![
            (
                Kind::ClusterRole,
                "",
                json!({"metadata": {"name": "podns-node"}, "rules": [
                    {"apiGroups": ["dns.podns.io"], "resources": ["relays"],
                     "resourceNames": ["nodes"], "verbs": ["get"]}]}),
            ),
            (
                Kind::ClusterRoleBinding,
                "",
                json!({"metadata": {"name": "podns-node"},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "podns-node"},
                       "subjects": [{"kind": "ServiceAccount", "name": "podns-node", "namespace": "podns"}]}),
            ),
        ]
    }

    #[test]
    fn a_cluster_role_binding_grants_its_subjects_only() {
        let store = store_with(&relay_role());
        assert_eq!(
            authorize(&store, &sa("podns", "podns-node")).as_deref(),
            Some(
                "RBAC: allowed by ClusterRoleBinding \"podns-node\" of ClusterRole \"podns-node\" to ServiceAccount \"podns-node/podns\""
            )
        );
        assert_eq!(
            authorize(&store, &sa("web", "podns-node")),
            None,
            "another namespace's account"
        );
        assert_eq!(authorize(&store, &sa("podns", "default")), None);
        let mut other_name = sa("podns", "podns-node");
        other_name.name = "cluster".into();
        assert_eq!(authorize(&store, &other_name), None, "resourceNames");
        let mut other_verb = sa("podns", "podns-node");
        other_verb.verb = "list".into();
        assert_eq!(authorize(&store, &other_verb), None);
        let mut master = sa("web", "x");
        master.groups.push(MASTERS.into());
        assert_eq!(authorize(&store, &master).as_deref(), Some(""));
    }

    #[test]
    fn a_role_binding_grants_in_its_namespace_only() {
        let store = store_with(&[
            (
                Kind::Role,
                "web",
                json!({"metadata": {"name": "reader"}, "rules": [
                    {"apiGroups": [""], "resources": ["pods", "*/status"], "verbs": ["get", "list"]}]}),
            ),
            (
                Kind::RoleBinding,
                "web",
                json!({"metadata": {"name": "reader"},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
                       "subjects": [{"kind": "ServiceAccount", "name": "app"},
                                    {"kind": "Group", "name": "devs"}]}),
            ),
        ]);
        let pods = |ns: &str, user: &str, groups: &[&str]| Attributes {
            user: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            verb: "list".into(),
            namespace: ns.into(),
            resource: "pods".into(),
            ..Default::default()
        };
        assert!(authorize(&store, &pods("web", "system:serviceaccount:web:app", &[])).is_some());
        assert!(authorize(&store, &pods("web", "alice", &["devs"])).is_some());
        assert!(authorize(&store, &pods("podns", "alice", &["devs"])).is_none());
        assert!(
            authorize(&store, &pods("", "alice", &["devs"])).is_none(),
            "cluster-wide"
        );
        let mut status = pods("web", "alice", &["devs"]);
        status.resource = "services".into();
        status.subresource = "status".into();
        assert!(authorize(&store, &status).is_some(), "*/status");
        status.subresource = String::new();
        assert!(authorize(&store, &status).is_none());
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix() {
        let store = store_with(&[
            (
                Kind::ClusterRole,
                "",
                json!({"metadata": {"name": "health"}, "rules": [
                    {"nonResourceURLs": ["/healthz", "/debug/*"], "verbs": ["get"]}]}),
            ),
            (
                Kind::ClusterRoleBinding,
                "",
                json!({"metadata": {"name": "health"},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "health"},
                       "subjects": [{"kind": "User", "name": "bob"}]}),
            ),
        ]);
        let get = |path: &str| Attributes {
            user: "bob".into(),
            verb: "get".into(),
            path: Some(path.into()),
            ..Default::default()
        };
        assert!(authorize(&store, &get("/healthz")).is_some());
        assert!(authorize(&store, &get("/debug/pprof")).is_some());
        assert!(authorize(&store, &get("/healthz/x")).is_none());
    }

    #[test]
    fn a_review_is_validated_decided_and_echoed() {
        let store = store_with(&relay_role());
        let body = |spec: Value| {
            json!({"apiVersion": API_VERSION, "kind": "SubjectAccessReview", "spec": spec})
                .as_object()
                .unwrap()
                .clone()
        };
        let out = review(
            &store,
            body(json!({"user": "system:serviceaccount:podns:podns-node",
                        "resourceAttributes": {"verb": "get", "group": "dns.podns.io",
                                               "resource": "relays", "name": "nodes"}})),
        )
        .unwrap();
        assert_eq!(out["status"]["allowed"], true);
        assert!(
            out["status"]["reason"]
                .as_str()
                .unwrap()
                .starts_with("RBAC: allowed by")
        );
        let out = review(
            &store,
            body(json!({"user": "someone", "resourceAttributes": {"verb": "get"}})),
        )
        .unwrap();
        assert_eq!(out["status"], json!({}), "Go leaves out allowed: false");
        let e = review(&store, body(json!({"user": "x"}))).unwrap_err();
        assert_eq!(e.code, 422);
        let e = review(&store, body(json!({"resourceAttributes": {"verb": "get"}}))).unwrap_err();
        assert!(
            e.message.contains("at least one of user or group"),
            "{}",
            e.message
        );
    }

    #[test]
    fn bindings_are_validated_and_their_role_ref_is_immutable() {
        let store = store_with(&relay_role());
        let bad = store.create(
            Kind::ClusterRoleBinding,
            "",
            json!({"metadata": {"name": "x"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
                   "subjects": []}),
        );
        assert_eq!(bad.unwrap_err().code, 422);
        let no_ns = store.create(
            Kind::ClusterRoleBinding,
            "",
            json!({"metadata": {"name": "x"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"},
                   "subjects": [{"kind": "ServiceAccount", "name": "a"}]}),
        );
        assert_eq!(no_ns.unwrap_err().code, 422);
        let moved = store.patch(
            Kind::ClusterRoleBinding,
            "",
            "podns-node",
            json!({"roleRef": {"name": "cluster-admin"}}),
            false,
        );
        let e = moved.unwrap_err();
        assert!(e.message.contains("cannot change roleRef"), "{}", e.message);
    }
}
