//! ServiceAccount tokens, issued and reviewed as kube-apiserver does, for
//! components that authenticate their clients by ServiceAccount token:
//!
//! - `POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`: a
//!   `TokenRequest` (`authentication.k8s.io/v1`), answered 201 with the
//!   request echoed and `status.token`, `status.expirationTimestamp`
//!   (`pkg/registry/core/serviceaccount/storage/token.go`);
//! - `POST /apis/authentication.k8s.io/v1/tokenreviews`: a `TokenReview`,
//!   answered 201 with the review echoed and `status` saying who the token
//!   is, or why it is not accepted (`pkg/registry/authentication/tokenreview`);
//! - [`Tokens::issue`], the same tokens for tests without HTTP.
//!
//! Known differences from the real server:
//!
//! - ServiceAccounts are not stored: every DNS-1123 name in an existing
//!   namespace is taken to exist (the real server answers 404 for one
//!   that does not), with a uid that is stable for the simulator's life.
//! - Tokens are opaque random strings, not signed JWTs: only this
//!   simulator can review them, and no claims can be read out of them.
//! - Expiry is exact: go-jose accepts a JWT up to a minute past its `exp`.
//! - `spec.boundObjectRef` may name a Pod or a Node (both stored); a
//!   Secret cannot be found, since the simulator stores none. A token is
//!   invalidated when its object is deleted, not after the real server's
//!   grace period for terminating pods.
//! - No `--service-account-max-token-expiration` cap, no
//!   `--service-account-extend-token-expiration`. Protobuf bodies are
//!   read (kubectl sends them), but answers are always JSON.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::Request;
use axum::response::Response;
use jiff::Timestamp;
use serde_json::{Map, Value, json};

use podns_kapi::{ApiError, Kind};

use crate::rest::{body_object, json_type, value_response};
use crate::store::{Store, new_uid};

/// The API server's own audience (`--api-audiences`, by default the
/// `--service-account-issuer`): a TokenRequest without audiences gets it,
/// and a TokenReview without audiences asks for it.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// `spec.expirationSeconds` when a TokenRequest gives none (v1 defaulting).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;

/// The shortest `spec.expirationSeconds` the API server accepts.
pub const MIN_EXPIRATION_SECONDS: i64 = 600;

/// The longest: 2^32 seconds.
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;

const GROUP: &str = "authentication.k8s.io";
const API_VERSION: &str = "authentication.k8s.io/v1";

/// The `user.extra` keys of ServiceAccount tokens (`pkg/serviceaccount`).
const EXTRA_CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";
const EXTRA_POD_NAME: &str = "authentication.kubernetes.io/pod-name";
const EXTRA_POD_UID: &str = "authentication.kubernetes.io/pod-uid";
const EXTRA_NODE_NAME: &str = "authentication.kubernetes.io/node-name";
const EXTRA_NODE_UID: &str = "authentication.kubernetes.io/node-uid";

/// The object a token is bound to; the token stops authenticating when
/// that object is gone (or replaced, with another uid).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Binding {
    /// A Pod, with the node it ran on when the token was issued.
    Pod {
        name: String,
        uid: String,
        node: Option<(String, Option<String>)>,
    },
    Node {
        name: String,
        uid: String,
    },
}

/// What the simulator remembers of a token it issued.
#[derive(Clone, Debug)]
struct Issued {
    namespace: String,
    service_account: String,
    uid: String,
    audiences: Vec<String>,
    expires: Timestamp,
    /// `JTI=<uuid>`, `user.extra["authentication.kubernetes.io/credential-id"]`.
    credential_id: String,
    binding: Option<Binding>,
}

/// Who a token authenticates as: a TokenReview's `status.user` and
/// `status.audiences`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// `system:serviceaccount:<namespace>:<name>`.
    pub username: String,
    /// The ServiceAccount's uid.
    pub uid: String,
    /// `system:serviceaccounts`, `system:serviceaccounts:<namespace>`,
    /// `system:authenticated`.
    pub groups: Vec<String>,
    /// The credential id, and the bound pod and node when there is one.
    pub extra: BTreeMap<String, Vec<String>>,
    /// The audiences both the token and the review name.
    pub audiences: Vec<String>,
}

#[derive(Default)]
struct Inner {
    tokens: HashMap<String, Issued>,
    /// ServiceAccount uids by (namespace, name), made on first use.
    uids: HashMap<(String, String), String>,
}

/// The tokens the simulator issued, held by [`Sim`](crate::state::Sim).
pub struct Tokens {
    store: Arc<Store>,
    inner: Mutex<Inner>,
}

impl Tokens {
    /// No tokens yet. Bound tokens look their Pod or Node up in `store`.
    pub fn new(store: Arc<Store>) -> Tokens {
        Tokens {
            store,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Issues a token for ServiceAccount `namespace/service_account`, as a
    /// TokenRequest would, without HTTP and without its checks: any names,
    /// any `ttl` (zero gives a token that has already expired). No
    /// audiences means [`API_AUDIENCE`].
    pub fn issue(
        &self,
        namespace: &str,
        service_account: &str,
        audiences: &[&str],
        ttl: Duration,
    ) -> String {
        let audiences = audiences.iter().map(|a| a.to_string()).collect();
        self.issue_inner(namespace, service_account, audiences, ttl, None)
            .0
    }

    /// Issues a token; returns it and its expiry.
    fn issue_inner(
        &self,
        namespace: &str,
        service_account: &str,
        mut audiences: Vec<String>,
        ttl: Duration,
        binding: Option<Binding>,
    ) -> (String, Timestamp) {
        if audiences.is_empty() {
            audiences.push(API_AUDIENCE.to_string());
        }
        let expires = Timestamp::now().checked_add(ttl).unwrap_or(Timestamp::MAX);
        let mut g = self.lock();
        let uid = g
            .uids
            .entry((namespace.to_string(), service_account.to_string()))
            .or_insert_with(new_uid)
            .clone();
        let token = loop {
            let t = random_token();
            if !g.tokens.contains_key(&t) {
                break t;
            }
        };
        g.tokens.insert(
            token.clone(),
            Issued {
                namespace: namespace.to_string(),
                service_account: service_account.to_string(),
                uid,
                audiences,
                expires,
                credential_id: format!("JTI={}", new_uid()),
                binding,
            },
        );
        (token, expires)
    }

    /// The uid of ServiceAccount `namespace/name` (the `user.uid` of its
    /// tokens), the same for the simulator's life.
    pub fn service_account_uid(&self, namespace: &str, name: &str) -> String {
        self.lock()
            .uids
            .entry((namespace.to_string(), name.to_string()))
            .or_insert_with(new_uid)
            .clone()
    }

    /// Reviews `token` for `audiences` as a TokenReview does (none means
    /// [`API_AUDIENCE`]): who it is, or the review's `status.error`.
    pub fn authenticate(&self, token: &str, audiences: &[String]) -> Result<Identity, String> {
        let requested: Vec<String> = if audiences.is_empty() {
            vec![API_AUDIENCE.to_string()]
        } else {
            audiences.to_vec()
        };
        let Some(t) = self.lock().tokens.get(token).cloned() else {
            return Err("invalid bearer token".into());
        };
        // The order of the JWT authenticator: audiences, expiry, then the
        // bound object.
        let auds: Vec<String> = t
            .audiences
            .iter()
            .filter(|a| requested.contains(a))
            .cloned()
            .collect();
        if auds.is_empty() {
            return Err(format!(
                "token audiences {} is invalid for the target audiences {}",
                go_quote_list(&t.audiences),
                go_quote_list(&requested)
            ));
        }
        if Timestamp::now() >= t.expires {
            return Err("service account token has expired".into());
        }
        let mut extra = BTreeMap::new();
        extra.insert(EXTRA_CREDENTIAL_ID.to_string(), vec![t.credential_id]);
        let invalidated = || "service account token has been invalidated".to_string();
        match &t.binding {
            None => {}
            Some(Binding::Pod { name, uid, node }) => {
                let pod = self.store.get(Kind::Pod, &t.namespace, name);
                if !pod.is_ok_and(|p| p.uid == *uid) {
                    return Err(invalidated());
                }
                extra.insert(EXTRA_POD_NAME.to_string(), vec![name.clone()]);
                extra.insert(EXTRA_POD_UID.to_string(), vec![uid.clone()]);
                if let Some((node, node_uid)) = node {
                    extra.insert(EXTRA_NODE_NAME.to_string(), vec![node.clone()]);
                    if let Some(u) = node_uid {
                        extra.insert(EXTRA_NODE_UID.to_string(), vec![u.clone()]);
                    }
                }
            }
            Some(Binding::Node { name, uid }) => {
                let node = self.store.get(Kind::Node, "", name);
                if !node.is_ok_and(|n| n.uid == *uid) {
                    return Err(invalidated());
                }
                extra.insert(EXTRA_NODE_NAME.to_string(), vec![name.clone()]);
                extra.insert(EXTRA_NODE_UID.to_string(), vec![uid.clone()]);
            }
        }
        Ok(Identity {
            username: format!(
                "system:serviceaccount:{}:{}",
                t.namespace, t.service_account
            ),
            uid: t.uid,
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{}", t.namespace),
                "system:authenticated".into(),
            ],
            extra,
            audiences: auds,
        })
    }

    /// Forgets `token`: it no longer authenticates. Whether it was known.
    pub fn revoke(&self, token: &str) -> bool {
        self.lock().tokens.remove(token).is_some()
    }

    /// Forgets every token issued so far (ServiceAccount uids stay).
    pub fn revoke_all(&self) {
        self.lock().tokens.clear();
    }
}

/// 48 random URL-safe characters (288 bits).
fn random_token() -> String {
    const ALPHA: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    (0..48)
        .map(|_| ALPHA[rand::random_range(0..ALPHA.len())] as char)
        .collect()
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
fn go_quote_list(v: &[String]) -> String {
    let items: Vec<String> = v
        .iter()
        .map(|s| serde_json::to_string(s).unwrap_or_default())
        .collect();
    format!("[{}]", items.join(" "))
}

/// A DNS-1123 subdomain: what a ServiceAccount or namespace name must be.
fn dns1123_subdomain(n: &str) -> bool {
    n.len() <= 253
        && !n.is_empty()
        && n.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// The paths this module answers; both are only created (POST).
pub enum Route {
    /// `/apis/authentication.k8s.io/v1/tokenreviews`.
    TokenReview,
    /// `/api/v1/namespaces/{ns}/serviceaccounts/{name}/token`.
    TokenRequest { ns: String, name: String },
}

impl Route {
    /// Which of this module's paths `path` (without a trailing `/`) is.
    pub fn of(path: &str) -> Option<Route> {
        if path == "/apis/authentication.k8s.io/v1/tokenreviews" {
            return Some(Route::TokenReview);
        }
        let rest = path.strip_prefix("/api/v1/namespaces/")?;
        match rest.split('/').collect::<Vec<_>>()[..] {
            [ns, "serviceaccounts", name, "token"] => Some(Route::TokenRequest {
                ns: ns.to_string(),
                name: name.to_string(),
            }),
            _ => None,
        }
    }

    /// The resource, as the API server counts and authorizes it.
    pub fn resource(&self) -> &'static str {
        match self {
            Route::TokenReview => "tokenreviews",
            Route::TokenRequest { .. } => "serviceaccounts/token",
        }
    }
}

/// What discovery lists of this module: TokenRequests as a subresource
/// of the core group's ServiceAccounts, and the `authentication.k8s.io`
/// group's TokenReviews.
pub fn resources() -> [(&'static str, Value); 2] {
    [
        (
            "",
            json!({"name": "serviceaccounts/token", "singularName": "", "namespaced": true,
                   "group": GROUP, "version": "v1", "kind": "TokenRequest", "verbs": ["create"]}),
        ),
        (
            GROUP,
            json!({"name": "tokenreviews", "singularName": "tokenreview", "namespaced": false,
                   "kind": "TokenReview", "verbs": ["create"]}),
        ),
    ]
}

/// Answers a create (POST) on one of this module's paths: 201 with the
/// review or the token.
pub async fn serve(tokens: &Tokens, req: Request, route: Route) -> Result<Response, ApiError> {
    let out = match route {
        Route::TokenReview => {
            let body = body_object(req, "TokenReview", API_VERSION).await?;
            token_review(tokens, body)?
        }
        Route::TokenRequest { ns, name } => {
            let body = body_object(req, "TokenRequest", API_VERSION).await?;
            token_request(tokens, &ns, &name, body)?
        }
    };
    Ok(value_response(201, &out))
}

/// A type error in a body, as Go's decoder words it.
fn wrong_type(kind: &str, field: &str, v: &Value, want: &str) -> ApiError {
    ApiError::bad_request(format!(
        "{kind} in version \"v1\" cannot be handled as a {kind}: json: cannot unmarshal {} into Go struct field {field} of type {want}",
        json_type(v)
    ))
}

/// The echoed `metadata`: what the client sent, `creationTimestamp: null`
/// when it sent none, in namespace `ns` (`None`: cluster-scoped).
fn echo_metadata(kind: &str, o: &Map<String, Value>, ns: Option<&str>) -> Result<Value, ApiError> {
    let mut meta = match o.get("metadata") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(v) => {
            return Err(wrong_type(
                kind,
                &format!("{kind}.metadata"),
                v,
                "v1.ObjectMeta",
            ));
        }
    };
    let given = match meta.get("namespace") {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s.as_str(),
        Some(v) => {
            return Err(wrong_type(
                kind,
                "ObjectMeta.metadata.namespace",
                v,
                "string",
            ));
        }
    };
    match ns {
        // As `EnsureObjectNamespaceMatchesRequestNamespace`.
        Some(ns) if !given.is_empty() && given != ns => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        Some(ns) => {
            meta.insert("namespace".into(), ns.into());
        }
        None => {
            meta.remove("namespace");
        }
    }
    meta.entry("creationTimestamp").or_insert(Value::Null);
    Ok(Value::Object(meta))
}

/// `spec.audiences`: absent, null or a list of strings.
fn audiences(kind: &str, spec: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let field = format!("{kind}Spec.spec.audiences");
    match spec.get("audiences") {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                v => Err(wrong_type(kind, &field, v, "string")),
            })
            .collect(),
        Some(v) => Err(wrong_type(kind, &field, v, "[]string")),
    }
}

fn spec_object<'a>(
    kind: &str,
    o: &'a Map<String, Value>,
) -> Result<Option<&'a Map<String, Value>>, ApiError> {
    match o.get("spec") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(s)) => Ok(Some(s)),
        Some(v) => Err(wrong_type(
            kind,
            &format!("{kind}.spec"),
            v,
            &format!("v1.{kind}Spec"),
        )),
    }
}

/// `TokenRequest.authentication.k8s.io "" is invalid: …`, as
/// `errors.NewInvalid` builds it for one field error.
fn invalid_token_request(field: &str, value: i64, detail: &str) -> ApiError {
    let body = format!("Invalid value: {value}: {detail}");
    ApiError::new(
        422,
        "Invalid",
        format!("TokenRequest.{GROUP} \"\" is invalid: {field}: {body}"),
    )
    .with_details(json!({"group": GROUP, "kind": "TokenRequest",
                         "causes": [{"reason": "FieldValueInvalid", "message": body, "field": field}]}))
}

/// `serviceaccounts "name" not found`.
fn service_account_not_found(name: &str) -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        format!("serviceaccounts \"{name}\" not found"),
    )
    .with_details(json!({"name": name, "kind": "serviceaccounts"}))
}

/// The fields of `spec.boundObjectRef` (all optional strings).
fn bound_ref(spec: &Map<String, Value>) -> Result<Option<Map<String, Value>>, ApiError> {
    let r = match spec.get("boundObjectRef") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(r)) => r,
        Some(v) => {
            return Err(wrong_type(
                "TokenRequest",
                "TokenRequestSpec.spec.boundObjectRef",
                v,
                "v1.BoundObjectReference",
            ));
        }
    };
    let mut out = Map::new();
    for k in ["kind", "apiVersion", "name", "uid"] {
        match r.get(k) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                if !s.is_empty() {
                    out.insert(k.into(), s.clone().into());
                }
            }
            Some(v) => {
                return Err(wrong_type(
                    "TokenRequest",
                    &format!("BoundObjectReference.spec.boundObjectRef.{k}"),
                    v,
                    "string",
                ));
            }
        }
    }
    Ok(Some(out))
}

/// Finds the object a TokenRequest binds to, as the TokenREST does.
fn binding(store: &Store, ns: &str, sa: &str, r: &Map<String, Value>) -> Result<Binding, ApiError> {
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
    let (kind, api_version, name, want_uid) = (s("kind"), s("apiVersion"), s("name"), s("uid"));
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let conflict = |resource: &str, uid: &str| {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {resource} \"{name}\": the UID in the bound object reference ({want_uid}) does not match the UID in record. The object might have been deleted and then recreated"
            ),
        )
        .with_details(json!({"name": name, "kind": resource, "uid": uid}))
    };
    match (group, kind) {
        ("", "Pod") => {
            let pod = store.get(Kind::Pod, ns, name)?;
            let v = pod.value();
            let pod_sa = v["spec"]["serviceAccountName"]
                .as_str()
                .filter(|s| !s.is_empty())
                .unwrap_or("default");
            if pod_sa != sa {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token for serviceaccount {sa:?} to pod running with different serviceaccount name."
                )));
            }
            if !want_uid.is_empty() && want_uid != pod.uid {
                return Err(conflict("Pod", &pod.uid));
            }
            let node = (!pod.node_name.is_empty()).then(|| {
                let uid = store
                    .get(Kind::Node, "", &pod.node_name)
                    .ok()
                    .map(|n| n.uid.clone());
                (pod.node_name.clone(), uid)
            });
            Ok(Binding::Pod {
                name: name.to_string(),
                uid: pod.uid.clone(),
                node,
            })
        }
        ("", "Node") => {
            let node = store.get(Kind::Node, "", name)?;
            if !want_uid.is_empty() && want_uid != node.uid {
                return Err(conflict("Node", &node.uid));
            }
            Ok(Binding::Node {
                name: name.to_string(),
                uid: node.uid.clone(),
            })
        }
        // The simulator stores no Secrets.
        ("", "Secret") => {
            Err(
                ApiError::new(404, "NotFound", format!("secrets \"{name}\" not found"))
                    .with_details(json!({"name": name, "kind": "secrets"})),
            )
        }
        _ => Err(ApiError::bad_request(format!(
            "cannot bind token to object of type {group}/{version}, Kind={kind}"
        ))),
    }
}

/// A TokenRequest for ServiceAccount `ns/name`: the response body.
fn token_request(
    tokens: &Tokens,
    ns: &str,
    name: &str,
    body: Map<String, Value>,
) -> Result<Value, ApiError> {
    const KIND: &str = "TokenRequest";
    let metadata = echo_metadata(KIND, &body, Some(ns))?;
    let empty = Map::new();
    let spec = spec_object(KIND, &body)?.unwrap_or(&empty);
    let mut auds = audiences(KIND, spec)?;
    let seconds = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
        Some(v) => v.as_i64().ok_or_else(|| {
            wrong_type(KIND, "TokenRequestSpec.spec.expirationSeconds", v, "int64")
        })?,
    };
    let bound = bound_ref(spec)?;
    // Validation comes before the ServiceAccount is looked up.
    if seconds < MIN_EXPIRATION_SECONDS {
        return Err(invalid_token_request(
            "spec.expirationSeconds",
            seconds,
            "may not specify a duration less than 10 minutes",
        ));
    }
    if seconds > MAX_EXPIRATION_SECONDS {
        return Err(invalid_token_request(
            "spec.expirationSeconds",
            seconds,
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    // Every well-formed name in an existing namespace is a ServiceAccount.
    if !dns1123_subdomain(name)
        || !dns1123_subdomain(ns)
        || tokens.store.get(Kind::Namespace, "", ns).is_err()
    {
        return Err(service_account_not_found(name));
    }
    let binding = bound
        .as_ref()
        .map(|r| binding(&tokens.store, ns, name, r))
        .transpose()?;
    if auds.is_empty() {
        auds.push(API_AUDIENCE.to_string());
    }
    let ttl = Duration::from_secs(seconds.unsigned_abs());
    let (token, expires) = tokens.issue_inner(ns, name, auds.clone(), ttl, binding);
    // A JWT's `exp` is whole seconds.
    let expires = Timestamp::from_second(expires.as_second()).unwrap_or(expires);
    Ok(json!({
        "kind": KIND,
        "apiVersion": API_VERSION,
        "metadata": metadata,
        "spec": {
            "audiences": auds,
            "expirationSeconds": seconds,
            "boundObjectRef": bound,
        },
        "status": {
            "token": token,
            "expirationTimestamp": expires.to_string(),
        },
    }))
}

/// A TokenReview: the response body.
fn token_review(tokens: &Tokens, body: Map<String, Value>) -> Result<Value, ApiError> {
    const KIND: &str = "TokenReview";
    let metadata = echo_metadata(KIND, &body, None)?;
    let empty = Map::new();
    let spec = spec_object(KIND, &body)?.unwrap_or(&empty);
    let token = match spec.get("token") {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s.as_str(),
        Some(v) => return Err(wrong_type(KIND, "TokenReviewSpec.spec.token", v, "string")),
    };
    let auds = audiences(KIND, spec)?;
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let mut echoed = Map::new();
    echoed.insert("token".into(), token.into());
    if !auds.is_empty() {
        echoed.insert("audiences".into(), json!(auds));
    }
    // Go's encoding leaves out `authenticated: false`, empty audiences and
    // an empty error, but always writes `user`.
    let status = match tokens.authenticate(token, &auds) {
        Ok(id) => {
            let mut user = json!({"username": id.username, "uid": id.uid, "groups": id.groups});
            if !id.extra.is_empty() {
                user["extra"] = json!(id.extra);
            }
            json!({"authenticated": true, "user": user, "audiences": id.audiences})
        }
        Err(e) => json!({"user": {}, "error": e}),
    };
    Ok(json!({
        "kind": KIND,
        "apiVersion": API_VERSION,
        "metadata": metadata,
        "spec": echoed,
        "status": status,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Tokens {
        Tokens::new(Store::new(16))
    }

    #[test]
    fn names_are_dns1123_subdomains() {
        for ok in ["a", "relay", "a.b-c", "x1", &"a".repeat(253)] {
            assert!(dns1123_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            "A",
            "a_b",
            "-a",
            "a-",
            "a..b",
            ".a",
            "a.",
            &"a".repeat(254),
        ] {
            assert!(!dns1123_subdomain(bad), "{bad}");
        }
    }

    #[test]
    fn authenticates_what_it_issued() {
        let t = tokens();
        let tok = t.issue("ns1", "relay", &[], Duration::from_secs(600));
        assert!(tok.len() >= 40);
        assert!(
            tok.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        let id = t.authenticate(&tok, &[]).unwrap();
        assert_eq!(id.username, "system:serviceaccount:ns1:relay");
        assert_eq!(id.uid, t.service_account_uid("ns1", "relay"));
        assert_ne!(id.uid, t.service_account_uid("ns2", "relay"));
        assert_eq!(id.audiences, vec![API_AUDIENCE.to_string()]);
        assert!(id.extra[EXTRA_CREDENTIAL_ID][0].starts_with("JTI="));
        assert_eq!(
            t.authenticate("nope", &[]),
            Err("invalid bearer token".into())
        );
    }

    #[test]
    fn audiences_must_intersect() {
        let t = tokens();
        let tok = t.issue("ns", "sa", &["a", "b"], Duration::from_secs(600));
        let id = t.authenticate(&tok, &["c".into(), "b".into()]).unwrap();
        assert_eq!(id.audiences, vec!["b".to_string()]);
        assert_eq!(
            t.authenticate(&tok, &["c".into()]),
            Err("token audiences [\"a\" \"b\"] is invalid for the target audiences [\"c\"]".into())
        );
        // No audiences in the review: the API server's own.
        assert!(t.authenticate(&tok, &[]).is_err());
    }

    #[test]
    fn expired_revoked_and_huge_ttls() {
        let t = tokens();
        let tok = t.issue("ns", "sa", &[], Duration::ZERO);
        assert_eq!(
            t.authenticate(&tok, &[]),
            Err("service account token has expired".into())
        );
        let tok = t.issue("ns", "sa", &[], Duration::MAX);
        assert!(t.authenticate(&tok, &[]).is_ok());
        assert!(t.revoke(&tok));
        assert!(!t.revoke(&tok));
        assert!(t.authenticate(&tok, &[]).is_err());
        let tok = t.issue("ns", "sa", &[], Duration::from_secs(600));
        t.revoke_all();
        assert!(t.authenticate(&tok, &[]).is_err());
    }
}
