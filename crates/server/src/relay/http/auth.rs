//! Who may read the relay, as kube-rbac-proxy decides it for the API it
//! fronts: a client presents a ServiceAccount token (`Authorization:
//! Bearer`) issued for the relay's own audience ([`AUDIENCE`]); the relay
//! asks the API server who it is with a TokenReview for that audience
//! only (a token for the API server, which every pod has mounted, is
//! refused), then whether that identity may read the relay with a
//! SubjectAccessReview of [`PERMISSION`], which the chart grants to the
//! node instances' ServiceAccount alone.
//!
//! A token the API server bound to a pod names the pod's node
//! (`authentication.kubernetes.io/node-name`, KEP-4193, in every release
//! from 1.32 on); its client then reads only its node's scope
//! ([`crate::relay::store::scope`]). A token that names no node (a TokenRequest without
//! a bound pod, as `--relay-kubeconfig-out` writes for a node instance on
//! the relay's own machine) reads every namespace: only whoever may
//! request tokens for the node instances' ServiceAccount can make one.
//!
//! Decisions are cached per token: an allowed one for [`ALLOWED_FOR`] (and
//! never past the token's own expiry when it is a JWT), a refused one for
//! [`REFUSED_FOR`]. When the API server cannot be asked and no cached
//! decision stands, the request fails closed with 503; a client's
//! watches already open carry on.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};

/// The audience node instances' tokens are issued for, unless
/// `--relay-audience` says otherwise.
pub const AUDIENCE: &str = "podns-relay";

/// The permission a reader of the relay needs (a virtual resource: RBAC
/// rules may name any group and resource): `get` on `relays` in
/// `dns.podns.io`.
pub const PERMISSION: Permission = Permission {
    verb: "get",
    group: "dns.podns.io",
    resource: "relays",
};

/// A verb on a resource, as a SubjectAccessReview asks about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permission {
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
}

/// The user.extra key of bound ServiceAccount tokens naming the node of
/// the pod the token is bound to.
pub const EXTRA_NODE_NAME: &str = "authentication.kubernetes.io/node-name";

/// How long an allowed token is trusted without asking again: a token
/// revoked (its pod deleted) or a permission withdrawn is refused within
/// it. A node instance asks about once per watch it restarts (every few
/// minutes), so this costs the API server about two reviews per node per
/// restart of its watches.
pub const ALLOWED_FOR: Duration = Duration::from_secs(60);
/// How long a refused token is refused without asking again.
pub const REFUSED_FOR: Duration = Duration::from_secs(10);
/// Tokens remembered at most (then the cache starts over).
const MAX_CACHED: usize = 100_000;

/// Who a request comes from, once let in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reader {
    pub user: String,
    /// The node its token is bound to, when it names one: the request is
    /// then held to that node's scope.
    pub node: Option<String>,
}

/// Why a request is not let in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Denied {
    /// No bearer token.
    NoToken,
    /// The API server says the token is not valid for the relay's
    /// audience (expired, revoked, another audience, not a token).
    Unauthenticated(String),
    /// The token is valid but its user may not read the relay.
    Forbidden { user: String },
    /// The API server could not be asked, and no decision is cached.
    Unavailable(String),
}

impl Denied {
    /// The `reason` label of `podns_relay_requests_denied_total`, one of
    /// [`crate::metrics::RELAY_DENIED_REASONS`].
    pub fn reason(&self) -> &'static str {
        match self {
            Denied::NoToken => "no_token",
            Denied::Unauthenticated(_) => "unauthenticated",
            Denied::Forbidden { .. } => "forbidden",
            Denied::Unavailable(_) => "unavailable",
        }
    }
}

/// What the API server said of a token: let in as this reader, or not.
type Verdict = Result<Reader, Denied>;

/// Token and permission checks against the API server, cached.
pub struct Auth {
    client: kube::Client,
    audience: String,
    /// Token → what the API server said, until when it stands.
    cache: Mutex<HashMap<String, (Verdict, Instant)>>,
}

impl Auth {
    pub fn new(client: kube::Client, audience: String) -> Self {
        Self {
            client,
            audience,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The reader a request's `Authorization` header is, if let in, and
    /// whether the API server was asked now (not a cached decision).
    pub async fn check(&self, authorization: Option<&str>) -> (Verdict, bool) {
        let Some(token) = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
        else {
            return (Err(Denied::NoToken), false);
        };
        let now = Instant::now();
        if let Some((verdict, until)) = self.lock().get(token)
            && now < *until
        {
            return (verdict.clone(), false);
        }
        let verdict = self.review(token).await;
        let mut until = now
            + match &verdict {
                Ok(_) => ALLOWED_FOR,
                Err(Denied::Unavailable(_)) => return (verdict, true),
                Err(_) => REFUSED_FOR,
            };
        if let Some(left) = jwt_lifetime(token) {
            until = until.min(now + left);
        }
        let mut cache = self.lock();
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(token.to_owned(), (verdict.clone(), until));
        (verdict, true)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Verdict, Instant)>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A TokenReview for the relay's audience, then a SubjectAccessReview
    /// of [`PERMISSION`] for the user it names.
    async fn review(&self, token: &str) -> Verdict {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: Some(vec![self.audience.clone()]),
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let done = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| Denied::Unavailable(format!("TokenReview failed: {}", one_line(&e))))?;
        let status = done.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => user,
            _ => {
                return Err(Denied::Unauthenticated(
                    status
                        .error
                        .unwrap_or_else(|| "token not authenticated".into()),
                ));
            }
        };
        // The API server names the audiences the token is valid for among
        // those asked; ours must be one (an authenticator that ignores
        // audiences names none).
        if !status
            .audiences
            .as_ref()
            .is_some_and(|a| a.contains(&self.audience))
        {
            return Err(Denied::Unauthenticated(format!(
                "token is not valid for the audience {:?}",
                self.audience
            )));
        }
        let name = user.username.clone().unwrap_or_default();
        let node = user
            .extra
            .as_ref()
            .and_then(|e| e.get(EXTRA_NODE_NAME))
            .and_then(|v| v.first())
            .filter(|n| !n.is_empty())
            .cloned();
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                uid: user.uid,
                groups: user.groups,
                extra: user
                    .extra
                    .map(|e| e.into_iter().collect::<BTreeMap<_, _>>()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(PERMISSION.verb.into()),
                    group: Some(PERMISSION.group.into()),
                    resource: Some(PERMISSION.resource.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let done = api
            .create(&PostParams::default(), &sar)
            .await
            .map_err(|e| {
                Denied::Unavailable(format!("SubjectAccessReview failed: {}", one_line(&e)))
            })?;
        let status = done.status.unwrap_or_default();
        if !status.allowed || status.denied == Some(true) {
            return Err(Denied::Forbidden { user: name });
        }
        Ok(Reader { user: name, node })
    }
}

/// A kube error in one line: an API error's message and code, not the
/// `Status {…}` it came in.
pub fn one_line(e: &kube::Error) -> String {
    crate::k8s::failure::Failure::of(e).words
}

/// How long a JWT has left by its `exp` claim, read without checking its
/// signature (the API server checked it); `None` when `token` is not a
/// JWT with an expiry.
fn jwt_lifetime(token: &str) -> Option<Duration> {
    use base64::Engine;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let exp = serde_json::from_slice::<serde_json::Value>(&bytes).ok()?["exp"].as_u64()?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(exp.saturating_sub(now)))
}

/// A token for `namespace/account` from the API server (TokenRequest) for
/// `audience`, for the kubeconfig `--relay-kubeconfig-out` writes.
pub async fn request_token(
    client: kube::Client,
    namespace: &str,
    account: &str,
    audience: &str,
    ttl: Duration,
) -> Result<String, kube::Error> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    let api: Api<ServiceAccount> = Api::namespaced(client, namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![audience.to_owned()],
            expiration_seconds: i64::try_from(ttl.as_secs()).ok(),
            ..Default::default()
        },
        ..Default::default()
    };
    let done = api
        .create_token_request(account, &PostParams::default(), &request)
        .await?;
    Ok(done.status.map(|s| s.token).unwrap_or_default())
}

/// The kubeconfig extension (on the cluster entry) naming the relays' DNS
/// address, which a node instance forwards to unless `--node-relay-dns` says.
pub const DNS_EXTENSION: &str = "dns.podns.io/relay-dns";

/// A kubeconfig naming the relay at `server` (trusting `ca_pem`, and
/// verifying its certificate for `server_name` when given) with `token`,
/// and the relay's DNS address ([`DNS_EXTENSION`]).
pub fn kubeconfig(
    server: &str,
    ca_pem: &str,
    server_name: Option<&str>,
    token: &str,
    dns: std::net::SocketAddr,
) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let name = server_name
        .map(|n| format!("    tls-server-name: {n}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: podns-relay\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n{name}    extensions:\n    - name: {DNS_EXTENSION}\n      extension: \"{dns}\"\nusers:\n- name: podns-node\n  user:\n    token: {token}\ncontexts:\n- name: podns-relay\n  context:\n    cluster: podns-relay\n    user: podns-node\ncurrent-context: podns-relay\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_is_counted_from_the_start() {
        for d in [
            Denied::NoToken,
            Denied::Unauthenticated(String::new()),
            Denied::Forbidden {
                user: String::new(),
            },
            Denied::Unavailable(String::new()),
        ] {
            assert!(crate::metrics::RELAY_DENIED_REASONS.contains(&d.reason()));
        }
    }

    #[test]
    fn a_jwt_lifetime_comes_from_its_exp_claim() {
        use base64::Engine;
        let enc = |v: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let jwt = |exp: u64| {
            format!(
                "{}.{}.sig",
                enc(serde_json::json!({"alg": "RS256"})),
                enc(serde_json::json!({"exp": exp, "aud": ["podns-relay"]}))
            )
        };
        let left = jwt_lifetime(&jwt(now + 100)).unwrap();
        assert!(left <= Duration::from_secs(100) && left >= Duration::from_secs(95));
        assert_eq!(jwt_lifetime(&jwt(now - 5)), Some(Duration::ZERO), "expired");
        assert_eq!(jwt_lifetime("opaque-random-token"), None);
        assert_eq!(jwt_lifetime("a.!!!.c"), None);
    }
}
