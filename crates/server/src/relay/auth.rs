//! Who may read the relay: a client presents a ServiceAccount token
//! (`Authorization: Bearer`), and the relay asks the API server whether it
//! is valid with a TokenReview, as kube-apiserver's webhook authenticators
//! do. Answers are cached: an accepted token for [`ACCEPTED_FOR`], a refused
//! one for [`REFUSED_FOR`]; while the API server cannot answer, a token
//! accepted before stays accepted, so an API outage does not lock node
//! instances out of the relays that are there to outlive it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};

/// How long an accepted token is trusted without asking again.
pub const ACCEPTED_FOR: Duration = Duration::from_secs(10 * 60);
/// How long a refused token is refused without asking again.
pub const REFUSED_FOR: Duration = Duration::from_secs(10);
/// Tokens remembered at most (then the cache starts over).
const MAX_CACHED: usize = 100_000;

/// Why a request is not let in.
#[derive(Debug, PartialEq, Eq)]
pub enum Denied {
    /// No bearer token.
    NoToken,
    /// The API server says the token is not valid.
    Invalid(String),
    /// The API server could not be asked, and the token is not known.
    Unavailable(String),
}

/// Accepted as this user, or refused for this reason.
type Verdict = Result<String, String>;

/// Token checks against the API server, cached.
pub struct Auth {
    client: kube::Client,
    /// Token → what the API server said, until when it stands.
    cache: Mutex<HashMap<String, (Verdict, Instant)>>,
}

impl Auth {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The user a request's `Authorization` header authenticates as.
    pub async fn check(&self, authorization: Option<&str>) -> Result<String, Denied> {
        let token = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(Denied::NoToken)?;
        let known = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(token)
            .cloned();
        if let Some((verdict, until)) = &known
            && Instant::now() < *until
        {
            return verdict.clone().map_err(Denied::Invalid);
        }
        let verdict = match self.review(token).await {
            Ok(verdict) => verdict,
            Err(error) => {
                // The API server cannot say: what it said before stands.
                return match known {
                    Some((Ok(user), _)) => Ok(user),
                    _ => Err(Denied::Unavailable(error)),
                };
            }
        };
        let ttl = if verdict.is_ok() {
            ACCEPTED_FOR
        } else {
            REFUSED_FOR
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(token.to_owned(), (verdict.clone(), Instant::now() + ttl));
        verdict.map_err(Denied::Invalid)
    }

    /// One TokenReview: Ok(the user or why not), Err when it failed.
    async fn review(&self, token: &str) -> Result<Result<String, String>, String> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: None,
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let done = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("TokenReview failed: {e}"))?;
        let status = done.status.unwrap_or_default();
        Ok(match (status.authenticated, status.user) {
            (Some(true), Some(user)) => Ok(user.username.unwrap_or_default()),
            _ => Err(status
                .error
                .unwrap_or_else(|| "token not authenticated".into())),
        })
    }
}

/// A token for `namespace/account` from the API server (TokenRequest), for
/// the kubeconfig `--relay-kubeconfig-out` writes.
pub async fn request_token(
    client: kube::Client,
    namespace: &str,
    account: &str,
    ttl: Duration,
) -> Result<String, kube::Error> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    let api: Api<ServiceAccount> = Api::namespaced(client, namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
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
/// address, which a node instance forwards to unless `--relay-dns` says.
pub const DNS_EXTENSION: &str = "dns.podns.io/relay-dns";

/// A kubeconfig naming the relay at `server` (trusting `ca_pem`) with
/// `token`, and the relay's DNS address ([`DNS_EXTENSION`]).
pub fn kubeconfig(server: &str, ca_pem: &str, token: &str, dns: std::net::SocketAddr) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: podns-relay\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n    extensions:\n    - name: {DNS_EXTENSION}\n      extension: \"{dns}\"\nusers:\n- name: podns-node\n  user:\n    token: {token}\ncontexts:\n- name: podns-relay\n  context:\n    cluster: podns-relay\n    user: podns-node\ncurrent-context: podns-relay\n"
    )
}
