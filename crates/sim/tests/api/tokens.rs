//! ServiceAccount tokens over HTTP: TokenRequests issue them, TokenReviews
//! say who they are, as kube-apiserver answers both (raw, kube-rs, kubectl).

use std::time::Duration;

use k8s_openapi::api::authentication::v1::{
    BoundObjectReference, TokenRequest, TokenRequestSpec, TokenReview, TokenReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use podns_sim::tokens::API_AUDIENCE;
use serde_json::{Value, json};

use super::support::*;

const REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

fn token_path(ns: &str, sa: &str) -> String {
    format!("/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token")
}

/// Requests a token for `ns/sa`; asserts 201 and returns the response.
async fn request_token(addr: std::net::SocketAddr, ns: &str, sa: &str, spec: Value) -> Value {
    let body =
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
    let r = post_json(addr, &token_path(ns, sa), &body).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

/// Reviews `token` (for `audiences` when given); asserts 201.
async fn review(addr: std::net::SocketAddr, token: &str, audiences: Option<&[&str]>) -> Value {
    let mut spec = json!({"token": token});
    if let Some(a) = audiences {
        spec["audiences"] = json!(a);
    }
    let body =
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec});
    let r = post_json(addr, REVIEWS, &body).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), Some("application/json"));
    r.json()
}

fn authenticated(review: &Value) -> bool {
    review["status"]["authenticated"].as_bool() == Some(true)
}

/// A failed review as the apiserver writes it: no `authenticated` (Go
/// leaves `false` out), an empty `user`, and the reason in `error`.
fn assert_refused(review: &Value, error_contains: &str) {
    let st = &review["status"];
    assert!(st.get("authenticated").is_none(), "{review}");
    assert_eq!(st["user"], json!({}), "{review}");
    assert!(st.get("audiences").is_none(), "{review}");
    let e = st["error"].as_str().unwrap_or_default();
    assert!(e.contains(error_contains), "error {e:?}: {review}");
}

fn status(r: &Resp) -> (u16, String) {
    let v = r.json();
    assert_eq!(v["kind"], "Status", "{v}");
    assert_eq!(v["code"].as_u64(), Some(r.status as u64), "{v}");
    (
        r.status,
        v["reason"].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test]
async fn token_request_then_review_authenticates_the_service_account() {
    let sim = start_default().await;
    let addr = sim.addr;
    let before = jiff::Timestamp::now();
    let tr = request_token(
        addr,
        "default",
        "relay",
        json!({"audiences": ["podns-relay"], "expirationSeconds": 1200}),
    )
    .await;
    assert_eq!(tr["kind"], "TokenRequest");
    assert_eq!(tr["apiVersion"], "authentication.k8s.io/v1");
    assert_eq!(
        tr["metadata"],
        json!({"namespace": "default", "creationTimestamp": null})
    );
    assert_eq!(
        tr["spec"],
        json!({"audiences": ["podns-relay"], "expirationSeconds": 1200, "boundObjectRef": null})
    );
    let token = tr["status"]["token"].as_str().unwrap().to_string();
    assert!(token.len() >= 40, "{token}");
    let exp: jiff::Timestamp = tr["status"]["expirationTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let secs = exp.as_second() - before.as_second();
    assert!((1199..=1230).contains(&secs), "expires in {secs}s");

    let rv = review(addr, &token, Some(&["other", "podns-relay"])).await;
    assert_eq!(rv["kind"], "TokenReview");
    assert_eq!(rv["apiVersion"], "authentication.k8s.io/v1");
    assert_eq!(rv["metadata"], json!({"creationTimestamp": null}));
    assert_eq!(
        rv["spec"],
        json!({"token": token, "audiences": ["other", "podns-relay"]})
    );
    assert!(authenticated(&rv), "{rv}");
    assert!(rv["status"].get("error").is_none(), "{rv}");
    assert_eq!(rv["status"]["audiences"], json!(["podns-relay"]));
    let user = &rv["status"]["user"];
    assert_eq!(user["username"], "system:serviceaccount:default:relay");
    assert_eq!(
        user["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ])
    );
    let jti = user["extra"]["authentication.kubernetes.io/credential-id"][0]
        .as_str()
        .unwrap();
    assert!(jti.starts_with("JTI="), "{jti}");
    let uid = user["uid"].as_str().unwrap();
    assert_eq!(
        uid,
        sim.sim().tokens.service_account_uid("default", "relay")
    );

    // A second token of the same ServiceAccount: same uid, another
    // credential; another ServiceAccount: another uid and name.
    let again = request_token(
        addr,
        "default",
        "relay",
        json!({"audiences": ["podns-relay"]}),
    )
    .await;
    let token2 = again["status"]["token"].as_str().unwrap();
    assert_ne!(token2, token);
    assert_eq!(again["spec"]["expirationSeconds"], 3600);
    let rv2 = review(addr, token2, Some(&["podns-relay"])).await;
    assert_eq!(rv2["status"]["user"]["uid"], uid);
    assert_ne!(
        rv2["status"]["user"]["extra"]["authentication.kubernetes.io/credential-id"][0],
        jti
    );
    workload_ns(addr, "team-a").await;
    let other = request_token(
        addr,
        "team-a",
        "relay",
        json!({"audiences": ["podns-relay"]}),
    )
    .await;
    let rv3 = review(
        addr,
        other["status"]["token"].as_str().unwrap(),
        Some(&["podns-relay"]),
    )
    .await;
    assert_eq!(
        rv3["status"]["user"]["username"],
        "system:serviceaccount:team-a:relay"
    );
    assert_eq!(
        rv3["status"]["user"]["groups"][1],
        "system:serviceaccounts:team-a"
    );
    assert_ne!(rv3["status"]["user"]["uid"], uid);

    let s = get(addr, "/sim/stats").await.json();
    assert_eq!(stat(&s, "create", "serviceaccounts/token"), 3);
    assert_eq!(stat(&s, "create", "tokenreviews"), 3);
}

async fn workload_ns(addr: std::net::SocketAddr, ns: &str) {
    let r = post_json(
        addr,
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

#[tokio::test]
async fn audiences_default_to_the_api_server_and_must_intersect() {
    let sim = start_default().await;
    let addr = sim.addr;
    // No audiences: the API server's own, echoed in the spec.
    let tr = request_token(addr, "default", "plain", json!({})).await;
    assert_eq!(tr["spec"]["audiences"], json!([API_AUDIENCE]));
    let plain = tr["status"]["token"].as_str().unwrap();
    let rv = review(addr, plain, None).await;
    assert!(authenticated(&rv), "{rv}");
    assert_eq!(rv["status"]["audiences"], json!([API_AUDIENCE]));
    assert!(rv["spec"].get("audiences").is_none(), "{rv}");
    assert!(authenticated(
        &review(addr, plain, Some(&[API_AUDIENCE])).await
    ));
    assert_refused(
        &review(addr, plain, Some(&["podns-relay"])).await,
        &format!(
            "token audiences [\"{API_AUDIENCE}\"] is invalid for the target audiences [\"podns-relay\"]"
        ),
    );

    // A token for the relay is no token for the API server.
    let tr = request_token(
        addr,
        "default",
        "client",
        json!({"audiences": ["podns-relay"]}),
    )
    .await;
    let relay = tr["status"]["token"].as_str().unwrap();
    assert_refused(
        &review(addr, relay, None).await,
        "is invalid for the target audiences",
    );
    assert_refused(
        &review(addr, relay, Some(&["something-else"])).await,
        "is invalid for the target audiences",
    );
    assert!(authenticated(
        &review(addr, relay, Some(&["podns-relay"])).await
    ));
}

#[tokio::test]
async fn unknown_expired_and_revoked_tokens_are_refused() {
    let sim = start_default().await;
    let addr = sim.addr;
    let tokens = &sim.sim().tokens;
    assert_refused(
        &review(addr, "not-a-token-this-sim-issued", None).await,
        "invalid bearer token",
    );

    // Already expired when issued.
    let dead = tokens.issue("default", "relay", &["podns-relay"], Duration::ZERO);
    assert_refused(
        &review(addr, &dead, Some(&["podns-relay"])).await,
        "service account token has expired",
    );

    // Accepted until it expires, then refused.
    let brief = tokens.issue("default", "relay", &["podns-relay"], Duration::from_secs(3));
    let rv = review(addr, &brief, Some(&["podns-relay"])).await;
    assert!(authenticated(&rv), "{rv}");
    wait_for("the token to expire", DEADLINE, || async {
        let rv = review(addr, &brief, Some(&["podns-relay"])).await;
        (!authenticated(&rv)).then_some(rv)
    })
    .await;
    assert_refused(
        &review(addr, &brief, Some(&["podns-relay"])).await,
        "service account token has expired",
    );

    // Issued through the Rust API, reviewed over HTTP; then revoked.
    let live = tokens.issue("kube-system", "agent", &[], Duration::from_secs(600));
    let rv = review(addr, &live, None).await;
    assert_eq!(
        rv["status"]["user"]["username"],
        "system:serviceaccount:kube-system:agent"
    );
    assert!(tokens.revoke(&live));
    assert_refused(&review(addr, &live, None).await, "invalid bearer token");
}

#[tokio::test]
async fn other_methods_get_405() {
    let sim = start_default().await;
    let addr = sim.addr;
    let token = token_path("default", "relay");
    for (method, path) in [
        ("GET", REVIEWS),
        ("DELETE", REVIEWS),
        ("PUT", REVIEWS),
        ("GET", token.as_str()),
        ("PATCH", token.as_str()),
        ("DELETE", token.as_str()),
    ] {
        let r = http(addr, method, path, Some("application/json"), b"{}").await;
        assert_eq!(
            status(&r),
            (405, "MethodNotAllowed".into()),
            "{method} {path}"
        );
        assert_eq!(
            r.json()["message"],
            "the server does not allow this method on the requested resource"
        );
    }
    // TokenReviews are cluster-scoped; ServiceAccounts themselves are not served.
    for path in [
        "/apis/authentication.k8s.io/v1/namespaces/default/tokenreviews",
        "/api/v1/namespaces/default/serviceaccounts/relay",
        "/api/v1/namespaces/default/serviceaccounts/relay/token/x",
    ] {
        let r = post_json(addr, path, &json!({})).await;
        assert_eq!(status(&r), (404, "NotFound".into()), "{path}");
    }
}

#[tokio::test]
async fn bad_requests_get_status_errors() {
    let sim = start_default().await;
    let addr = sim.addr;
    let path = token_path("default", "relay");
    let raw = |path: String, body: &'static [u8]| async move {
        http(addr, "POST", &path, Some("application/json"), body).await
    };
    // Not JSON, not an object, wrong types: 400.
    for (p, body) in [
        (path.clone(), &b"{not json"[..]),
        (path.clone(), &b"[1,2]"[..]),
        (
            path.clone(),
            &br#"{"spec": {"expirationSeconds": "1h"}}"#[..],
        ),
        (path.clone(), &br#"{"spec": {"audiences": "a"}}"#[..]),
        (path.clone(), &br#"{"spec": {"audiences": [1]}}"#[..]),
        (path.clone(), &br#"{"kind": "Pod", "spec": {}}"#[..]),
        (
            path.clone(),
            &br#"{"metadata": {"namespace": "kube-system"}}"#[..],
        ),
        (REVIEWS.to_string(), &b"{not json"[..]),
        (REVIEWS.to_string(), &br#"{"spec": {}}"#[..]),
        (REVIEWS.to_string(), &br#"{"spec": {"token": ""}}"#[..]),
        (REVIEWS.to_string(), &br#"{"spec": {"token": 7}}"#[..]),
        (REVIEWS.to_string(), &br#"{"spec": "x"}"#[..]),
    ] {
        let r = raw(p.clone(), body).await;
        assert_eq!(
            status(&r),
            (400, "BadRequest".into()),
            "{p} {}",
            String::from_utf8_lossy(body)
        );
    }
    let r = raw(REVIEWS.to_string(), br#"{"spec": {}}"#).await;
    assert_eq!(
        r.json()["message"],
        "token is required for TokenReview in authentication"
    );

    // Too short or too long a lifetime: 422 with the field.
    for (secs, detail) in [
        (599i64, "may not specify a duration less than 10 minutes"),
        (0, "may not specify a duration less than 10 minutes"),
        (-5, "may not specify a duration less than 10 minutes"),
        (
            (1 << 32) + 1,
            "may not specify a duration larger than 2^32 seconds",
        ),
    ] {
        let r = post_json(addr, &path, &json!({"spec": {"expirationSeconds": secs}})).await;
        assert_eq!(status(&r), (422, "Invalid".into()), "{secs}");
        let v = r.json();
        assert_eq!(
            v["message"],
            format!(
                "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: {secs}: {detail}"
            )
        );
        assert_eq!(v["details"]["kind"], "TokenRequest");
        assert_eq!(v["details"]["group"], "authentication.k8s.io");
        assert_eq!(v["details"]["causes"][0]["field"], "spec.expirationSeconds");
        assert_eq!(v["details"]["causes"][0]["reason"], "FieldValueInvalid");
    }
    // The shortest allowed.
    request_token(addr, "default", "relay", json!({"expirationSeconds": 600})).await;

    // Names no ServiceAccount can have, and a namespace that does not
    // exist: the ServiceAccount is not found.
    for (ns, sa) in [
        ("default", "Relay"),
        ("default", "relay_1"),
        ("default", "-relay"),
        ("no-such-ns", "relay"),
        ("Default", "relay"),
    ] {
        let r = post_json(addr, &token_path(ns, sa), &json!({"spec": {}})).await;
        assert_eq!(status(&r), (404, "NotFound".into()), "{ns}/{sa}");
        assert_eq!(
            r.json()["message"],
            format!("serviceaccounts \"{sa}\" not found")
        );
    }

    // Media types other than JSON: 415.
    let r = http(addr, "POST", REVIEWS, Some("application/yaml"), b"spec: {}").await;
    assert_eq!(status(&r), (415, "UnsupportedMediaType".into()));

    // Nothing was issued by the failures; the server still answers.
    let rv = review(addr, "x", None).await;
    assert_refused(&rv, "invalid bearer token");
}

#[tokio::test]
async fn pod_bound_tokens_end_with_their_pod() {
    let sim = start_default().await;
    let addr = sim.addr;
    let pod = create_pod(addr, "default", "client-0", json!({})).await;
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let bound = |uid: &str| json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "client-0", "uid": uid}});

    // A pod without serviceAccountName runs as "default".
    let tr = request_token(addr, "default", "default", bound(&uid)).await;
    assert_eq!(
        tr["spec"]["boundObjectRef"],
        json!({"kind": "Pod", "apiVersion": "v1", "name": "client-0", "uid": uid})
    );
    let token = tr["status"]["token"].as_str().unwrap().to_string();
    let rv = review(addr, &token, None).await;
    assert!(authenticated(&rv), "{rv}");
    let extra = &rv["status"]["user"]["extra"];
    assert_eq!(
        extra["authentication.kubernetes.io/pod-name"],
        json!(["client-0"])
    );
    assert_eq!(extra["authentication.kubernetes.io/pod-uid"], json!([uid]));

    // Another ServiceAccount, another uid, a missing pod, another kind.
    let r = post_json(
        addr,
        &token_path("default", "relay"),
        &json!({"spec": bound(&uid)}),
    )
    .await;
    assert_eq!(status(&r), (400, "BadRequest".into()));
    let r = post_json(
        addr,
        &token_path("default", "default"),
        &json!({"spec": bound("1234")}),
    )
    .await;
    assert_eq!(status(&r), (409, "Conflict".into()));
    let missing =
        json!({"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "gone"}}});
    let r = post_json(addr, &token_path("default", "default"), &missing).await;
    assert_eq!(status(&r), (404, "NotFound".into()));
    let deploy = json!({"spec": {"boundObjectRef": {"kind": "Deployment", "apiVersion": "apps/v1", "name": "d"}}});
    let r = post_json(addr, &token_path("default", "default"), &deploy).await;
    assert_eq!(status(&r), (400, "BadRequest".into()));
    assert_eq!(
        r.json()["message"],
        "cannot bind token to object of type apps/v1, Kind=Deployment"
    );

    // Node-bound tokens name the node.
    let node = json!({"spec": {"boundObjectRef": {"kind": "Node", "apiVersion": "v1", "name": "sim-node-0"}}});
    let r = post_json(addr, &token_path("kube-system", "agent"), &node).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let rv = review(addr, r.json()["status"]["token"].as_str().unwrap(), None).await;
    assert_eq!(
        rv["status"]["user"]["extra"]["authentication.kubernetes.io/node-name"],
        json!(["sim-node-0"])
    );

    // Deleting the pod invalidates its token.
    let r = http(
        addr,
        "DELETE",
        "/api/v1/namespaces/default/pods/client-0",
        None,
        b"",
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let rv = wait_for("the pod's token to be invalidated", DEADLINE, || async {
        let rv = review(addr, &token, None).await;
        (!authenticated(&rv)).then_some(rv)
    })
    .await;
    assert_refused(&rv, "service account token has been invalidated");
}

#[tokio::test]
async fn discovery_lists_tokenreviews_and_the_token_subresource() {
    let sim = start_default().await;
    let addr = sim.addr;
    let groups = get(addr, "/apis").await.json();
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert!(names.contains(&"authentication.k8s.io"), "{names:?}");
    let g = get(addr, "/apis/authentication.k8s.io").await.json();
    assert_eq!(g["kind"], "APIGroup");
    assert_eq!(
        g["preferredVersion"]["groupVersion"],
        "authentication.k8s.io/v1"
    );
    let v1 = get(addr, "/apis/authentication.k8s.io/v1").await.json();
    assert_eq!(v1["groupVersion"], "authentication.k8s.io/v1");
    let reviews = named(&v1["resources"], "tokenreviews");
    assert_eq!(reviews["kind"], "TokenReview");
    assert_eq!(reviews["namespaced"], false);
    assert_eq!(reviews["verbs"], json!(["create"]));
    let core = get(addr, "/api/v1").await.json();
    let sub = named(&core["resources"], "serviceaccounts/token");
    assert_eq!(
        (&sub["group"], &sub["version"], &sub["kind"], &sub["verbs"]),
        (
            &json!("authentication.k8s.io"),
            &json!("v1"),
            &json!("TokenRequest"),
            &json!(["create"])
        )
    );
}

#[tokio::test]
async fn kube_rs_typed_clients_request_and_review_tokens() {
    let sim = start_default().await;
    let client = sim.client();
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let req = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec!["podns-relay".into()],
            expiration_seconds: Some(900),
            bound_object_ref: None::<BoundObjectReference>,
        },
        ..Default::default()
    };
    let tr = sas
        .create_token_request("relay", &PostParams::default(), &req)
        .await
        .unwrap();
    assert_eq!(tr.spec.expiration_seconds, Some(900));
    assert_eq!(tr.metadata.namespace.as_deref(), Some("default"));
    let st = tr.status.expect("a status");
    assert!(st.token.len() >= 40);
    let left = st.expiration_timestamp.0.as_second() - jiff::Timestamp::now().as_second();
    assert!((800..=900).contains(&left), "{left}");

    let reviews: Api<TokenReview> = Api::all(client.clone());
    let ask = |token: String, auds: Vec<String>| TokenReview {
        spec: TokenReviewSpec {
            token: Some(token),
            audiences: Some(auds),
        },
        ..Default::default()
    };
    let rv = reviews
        .create(
            &PostParams::default(),
            &ask(st.token.clone(), vec!["podns-relay".into()]),
        )
        .await
        .unwrap();
    let status = rv.status.expect("a status");
    assert_eq!(status.authenticated, Some(true));
    assert_eq!(status.audiences, Some(vec!["podns-relay".to_string()]));
    let user = status.user.expect("a user");
    assert_eq!(
        user.username.as_deref(),
        Some("system:serviceaccount:default:relay")
    );
    assert_eq!(
        user.uid,
        Some(sim.sim().tokens.service_account_uid("default", "relay"))
    );
    assert!(
        user.groups
            .unwrap_or_default()
            .contains(&"system:serviceaccounts:default".to_string())
    );

    let rv = reviews
        .create(
            &PostParams::default(),
            &ask(st.token, vec!["someone-else".into()]),
        )
        .await
        .unwrap();
    let status = rv.status.expect("a status");
    assert_ne!(status.authenticated, Some(true));
    assert!(status.error.unwrap_or_default().contains("audiences"));

    // A refusal is a kube error with the Status' code and reason.
    let bad = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(60),
            ..Default::default()
        },
        ..Default::default()
    };
    match sas
        .create_token_request("relay", &PostParams::default(), &bad)
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
        }
        other => panic!("expected 422, got {other:?}"),
    }
}

#[tokio::test]
async fn kubectl_create_token() {
    let sim = start_default().await;
    let Some(kubectl) = Kubectl::for_sim(&sim) else {
        return;
    };
    let out = kubectl
        .run(&[
            "create",
            "token",
            "relay",
            "-n",
            "default",
            "--audience",
            "podns-relay",
            "--duration",
            "20m",
        ])
        .await;
    let token = out.trim();
    let id = sim
        .sim()
        .tokens
        .authenticate(token, &["podns-relay".into()])
        .unwrap();
    assert_eq!(id.username, "system:serviceaccount:default:relay");
    // Too short: the server's 422, as kubectl prints it.
    let out = kubectl
        .output(&["create", "token", "relay", "--duration", "1m"])
        .await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"),
        "{err}"
    );
    // A TokenReview from a file (kubectl sends it as Protobuf too). The
    // simulator's OpenAPI has no schemas, and TokenReviews no PATCH that
    // would tell kubectl the server validates fields: so no client-side
    // validation.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("review.json");
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                        "spec": {"token": token, "audiences": ["podns-relay"]}});
    std::fs::write(&file, review.to_string()).unwrap();
    let out = kubectl
        .run(&[
            "create",
            "--validate=false",
            "-f",
            file.to_str().unwrap(),
            "-o",
            "json",
        ])
        .await;
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"]["authenticated"], true, "{v}");
    assert_eq!(
        v["status"]["user"]["username"],
        "system:serviceaccount:default:relay"
    );
}
