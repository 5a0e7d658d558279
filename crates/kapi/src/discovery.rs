//! Discovery: the documents kubectl and client-go read before anything
//! else to learn which resources a server has (`/api`, `/api/v1`, `/apis`,
//! `/apis/{group}`, `/apis/{group}/v1`), and the `/openapi/v3` documents
//! kubectl reads before a create or an apply. They are made from the kinds
//! a server serves, so a server cannot list a kind it does not serve.

use std::net::SocketAddr;

use serde_json::{Map, Value, json};

use crate::Kind;

/// What a server serves, as discovery lists it.
#[derive(Clone, Debug)]
pub struct Discovery {
    /// By resource name, so the lists come out in the API server's order.
    kinds: Vec<Kind>,
    writable: bool,
    /// Resources that are no stored kind (a review, a subresource of
    /// another group), by the group they are listed in.
    extra: Vec<(&'static str, Value)>,
    address: Option<SocketAddr>,
}

impl Discovery {
    /// A server of `kinds` that takes every verb on them (and their
    /// `status` subresources, where the API server has one).
    pub fn read_write(kinds: &[Kind]) -> Self {
        Self::new(kinds, true)
    }

    /// A server of `kinds` that only reads them: get, list and watch.
    pub fn read_only(kinds: &[Kind]) -> Self {
        Self::new(kinds, false)
    }

    fn new(kinds: &[Kind], writable: bool) -> Self {
        let mut kinds = kinds.to_vec();
        kinds.sort_by_key(|k| k.plural());
        kinds.dedup();
        Self {
            kinds,
            writable,
            extra: Vec::new(),
            address: None,
        }
    }

    /// Also lists `entry`, an `APIResource` that is no stored kind, in
    /// `group` (`""`: the core group), after the kinds.
    pub fn with_resource(mut self, group: &'static str, entry: Value) -> Self {
        self.extra.push((group, entry));
        self
    }

    /// `/api` names `address` as where clients reach the server
    /// (`serverAddressByClientCIDRs`), as kube-apiserver does.
    pub fn with_address(mut self, address: SocketAddr) -> Self {
        self.address = Some(address);
        self
    }

    /// The named groups served, in order (`/apis` lists them so).
    fn groups(&self) -> Vec<&'static str> {
        let mut groups: Vec<&'static str> = self
            .kinds
            .iter()
            .map(|k| k.group())
            .chain(self.extra.iter().map(|(g, _)| *g))
            .filter(|g| !g.is_empty())
            .collect();
        groups.sort_unstable();
        groups.dedup();
        groups
    }

    /// The discovery document at `path` (without a trailing `/`), or
    /// `None` when `path` is none of them or names a group not served.
    pub fn document(&self, path: &str) -> Option<Value> {
        match path {
            "/api" => Some(self.api_versions()),
            "/api/v1" => Some(self.resource_list("")),
            "/apis" => Some(json!({
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": self.groups().into_iter().map(group_entry).collect::<Vec<_>>(),
            })),
            _ => {
                let rest = path.strip_prefix("/apis/")?;
                let (group, version) = match rest.split_once('/') {
                    Some((g, v)) => (g, Some(v)),
                    None => (rest, None),
                };
                let group = *self.groups().iter().find(|g| **g == group)?;
                match version {
                    None => {
                        let mut g = group_entry(group);
                        g["kind"] = "APIGroup".into();
                        g["apiVersion"] = "v1".into();
                        Some(g)
                    }
                    Some("v1") => Some(self.resource_list(group)),
                    Some(_) => None,
                }
            }
        }
    }

    fn api_versions(&self) -> Value {
        let mut v = json!({"kind": "APIVersions", "versions": ["v1"]});
        if let Some(a) = self.address {
            v["serverAddressByClientCIDRs"] =
                json!([{"clientCIDR": "0.0.0.0/0", "serverAddress": a.to_string()}]);
        }
        v
    }

    /// `APIResourceList` of `group`'s v1: its kinds, their subresources,
    /// then the other resources listed there.
    fn resource_list(&self, group: &str) -> Value {
        let mut resources = Vec::new();
        for &k in self.kinds.iter().filter(|k| k.group() == group) {
            resources.push(self.resource(k));
            if self.writable && has_status(k) {
                resources.push(json!({"name": format!("{}/status", k.plural()),
                    "singularName": "", "namespaced": k.namespaced(), "kind": k.name(),
                    "verbs": ["get", "patch", "update"]}));
            }
        }
        resources.extend(
            self.extra
                .iter()
                .filter(|(g, _)| *g == group)
                .map(|(_, e)| e.clone()),
        );
        let mut list = json!({"kind": "APIResourceList"});
        if group.is_empty() {
            // kube-apiserver writes no apiVersion on the core group's list.
            list["groupVersion"] = "v1".into();
        } else {
            list["apiVersion"] = "v1".into();
            list["groupVersion"] = format!("{group}/v1").into();
        }
        list["resources"] = resources.into();
        list
    }

    /// One kind's `APIResource`.
    fn resource(&self, k: Kind) -> Value {
        let verbs: &[&str] = match (self.writable, k.group()) {
            (false, _) => &["get", "list", "watch"],
            (true, "rbac.authorization.k8s.io") => &[
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ],
            (true, _) => &[
                "create", "delete", "get", "list", "patch", "update", "watch",
            ],
        };
        let mut r = Map::new();
        r.insert("name".into(), k.plural().into());
        r.insert("singularName".into(), k.name().to_ascii_lowercase().into());
        r.insert("namespaced".into(), k.namespaced().into());
        r.insert("kind".into(), k.name().into());
        r.insert("verbs".into(), json!(verbs));
        if let Some(s) = short_names(k) {
            r.insert("shortNames".into(), json!(s));
        }
        if matches!(k, Kind::Pod | Kind::Service | Kind::Job) {
            r.insert("categories".into(), json!(["all"]));
        }
        r.insert("storageVersionHash".into(), storage_version_hash(k).into());
        Value::Object(r)
    }

    /// `/openapi/v3`: the index of the per-group-version documents.
    pub fn openapi_index(&self) -> Value {
        let mut paths = Map::new();
        for gv in self.group_versions() {
            paths.insert(
                gv.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash=podns")}),
            );
        }
        json!({"paths": paths})
    }

    /// `api/v1`, then `apis/{group}/v1` of each named group with a kind.
    fn group_versions(&self) -> Vec<String> {
        let mut out = vec![];
        if self.kinds.iter().any(|k| k.group().is_empty()) {
            out.push("api/v1".to_string());
        }
        for g in self.groups() {
            if self.kinds.iter().any(|k| k.group() == g) {
                out.push(format!("apis/{g}/v1"));
            }
        }
        out
    }

    /// `/openapi/v3/<gv>` (`gv` as the index names it): for each kind,
    /// the PATCH operation of its item path with its group-version-kind
    /// and the `fieldValidation` parameter. That is what kubectl reads
    /// before `create`/`apply` to learn that the server validates fields
    /// itself (it then sends `fieldValidation=Strict` and needs no schema
    /// of its own, so `--validate=false` is not needed). No schemas.
    pub fn openapi(&self, gv: &str, title_version: &str) -> Option<Value> {
        if !self.group_versions().iter().any(|g| g == gv) {
            return None;
        }
        let group = gv
            .strip_prefix("apis/")
            .and_then(|g| g.strip_suffix("/v1"))
            .unwrap_or("");
        let mut paths = Map::new();
        for k in self.kinds.iter().filter(|k| k.group() == group) {
            let resource = k.plural();
            let path = if k.namespaced() {
                format!("/{gv}/namespaces/{{namespace}}/{resource}/{{name}}")
            } else {
                format!("/{gv}/{resource}/{{name}}")
            };
            paths.insert(
                path,
                json!({"patch": {
                    "x-kubernetes-action": "patch",
                    "x-kubernetes-group-version-kind": {"group": group, "version": "v1", "kind": k.name()},
                    "parameters": [{"name": "fieldValidation", "in": "query",
                                    "schema": {"type": "string", "uniqueItems": true}}],
                    "responses": {"200": {"description": "OK"}},
                }}),
            );
        }
        Some(json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": title_version},
            "paths": paths,
        }))
    }
}

/// A group as `/apis` lists it: its one version, v1, preferred.
fn group_entry(group: &str) -> Value {
    let v1 = json!({"groupVersion": format!("{group}/v1"), "version": "v1"});
    json!({"name": group, "versions": [v1], "preferredVersion": v1})
}

/// The kinds kube-apiserver gives a `status` subresource in discovery.
fn has_status(k: Kind) -> bool {
    matches!(
        k,
        Kind::Pod | Kind::Service | Kind::Node | Kind::Job | Kind::ServiceCidr
    )
}

/// The short names kubectl accepts for a kind (`kubectl get po`).
fn short_names(k: Kind) -> Option<&'static [&'static str]> {
    match k {
        Kind::Pod => Some(&["po"]),
        Kind::Service => Some(&["svc"]),
        Kind::Namespace => Some(&["ns"]),
        Kind::Node => Some(&["no"]),
        _ => None,
    }
}

/// The hash of a kind's storage version, as kube-apiserver 1.33 lists it.
fn storage_version_hash(k: Kind) -> &'static str {
    match k {
        Kind::Pod => "xPOwRZ+Yhw8=",
        Kind::Service => "0/CO1lhkEBI=",
        Kind::Namespace => "Q3oi5N2YM8M=",
        Kind::Job => "mudhfqk/qZY=",
        Kind::EndpointSlice => "Nx3SIv6I0mE=",
        Kind::Node => "XwShjMxG9Fs=",
        Kind::ServiceCidr => "3cDF5hqTkLY=",
        Kind::ClusterRole => "bYE5ZWDrJ44=",
        Kind::ClusterRoleBinding => "48tpQ8gZHFc=",
        Kind::Role => "7FuwZcIIItM=",
        Kind::RoleBinding => "eGsCzGH6b1g=",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &Value) -> Vec<&str> {
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn a_server_lists_the_kinds_it_serves_and_no_other() {
        let d = Discovery::read_only(&[Kind::Service, Kind::Pod, Kind::Job]);
        assert_eq!(names(&d.document("/api/v1").unwrap()), ["pods", "services"]);
        let groups = d.document("/apis").unwrap();
        assert_eq!(groups["groups"].as_array().unwrap().len(), 1);
        assert_eq!(groups["groups"][0]["name"], "batch");
        let jobs = d.document("/apis/batch/v1").unwrap();
        assert_eq!(jobs["groupVersion"], "batch/v1");
        assert_eq!(
            jobs["resources"][0]["verbs"],
            json!(["get", "list", "watch"])
        );
        assert_eq!(d.document("/apis/batch").unwrap()["kind"], "APIGroup");
        assert!(d.document("/apis/discovery.k8s.io/v1").is_none());
        assert!(d.document("/apis/batch/v2").is_none());
        assert!(
            d.document("/api")
                .unwrap()
                .get("serverAddressByClientCIDRs")
                .is_none()
        );
    }

    #[test]
    fn a_writable_server_lists_status_subresources_and_its_other_resources() {
        let d = Discovery::read_write(&Kind::ALL)
            .with_resource("authentication.k8s.io", json!({"name": "tokenreviews"}))
            .with_address("127.0.0.1:6443".parse().unwrap());
        let core = d.document("/api/v1").unwrap();
        assert!(core.get("apiVersion").is_none(), "the core list has none");
        assert_eq!(
            names(&core),
            [
                "namespaces",
                "nodes",
                "nodes/status",
                "pods",
                "pods/status",
                "services",
                "services/status"
            ]
        );
        assert_eq!(core["resources"][3]["shortNames"], json!(["po"]));
        let groups: Vec<Value> = d.document("/apis").unwrap()["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].clone())
            .collect();
        assert_eq!(
            groups,
            [
                "authentication.k8s.io",
                "batch",
                "discovery.k8s.io",
                "networking.k8s.io",
                "rbac.authorization.k8s.io"
            ]
        );
        assert_eq!(
            names(&d.document("/apis/authentication.k8s.io/v1").unwrap()),
            ["tokenreviews"]
        );
        assert_eq!(
            d.document("/api").unwrap()["serverAddressByClientCIDRs"][0]["serverAddress"],
            "127.0.0.1:6443"
        );
        let index = d.openapi_index();
        assert!(index["paths"].get("api/v1").is_some());
        assert!(
            index["paths"]
                .get("apis/authentication.k8s.io/v1")
                .is_none()
        );
        let pods = d.openapi("api/v1", "v1.33.0").unwrap();
        assert!(
            pods["paths"]
                .get("/api/v1/namespaces/{namespace}/pods/{name}")
                .is_some()
        );
        assert!(pods["paths"].get("/api/v1/nodes/{name}").is_some());
        assert!(d.openapi("apis/nope/v1", "v1.33.0").is_none());
    }
}
