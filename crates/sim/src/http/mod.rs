//! The HTTP face of the simulator: Kubernetes REST paths under `/api`,
//! discovery, and the simulator's own controls under `/sim/`.
//!
//! Pods, Services, Jobs and Namespaces are answered in the media type the
//! client's `Accept` prefers: Protobuf (`application/vnd.kubernetes.protobuf`,
//! `;stream=watch` for watches, see [`pbenc`](podns_kapi::pbenc)) or JSON. Errors
//! are JSON `Status` bodies, which every client reads. `--no-protobuf`
//! refuses Protobuf as a server without it does.
//!
//! - this module: the entry point, faults, and which path is what:
//!   discovery (from kapi's [`Discovery`](podns_kapi::discovery::Discovery)),
//!   health, TokenRequests and reviews ([`crate::tokens`], [`crate::rbac`]),
//!   resource paths (kapi's [`Target`]);
//! - `objects`: a resource path's verbs on objects and its media type;
//! - `list`, `watch`: lists and watches.

mod list;
mod objects;
mod watch;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use http::Method;
use podns_kapi::discovery::Discovery;
use podns_kapi::filter::Filter;
use podns_kapi::path::Target;
use podns_kapi::{ApiError, Kind};
use serde_json::{Value, json};

use crate::rest::{error_response, method_not_allowed, value_response};
use crate::state::Sim;
use crate::{control, rbac, tokens};

type Query = HashMap<String, String>;

/// The version `/version` reports, and the OpenAPI documents' title.
const GIT_VERSION: &str = "v1.33.0-podns-sim";

/// What the simulator serves, as discovery lists it: every kind, every
/// verb, TokenRequests and the reviews; `addr` is where clients reach it.
pub fn discovery(addr: SocketAddr) -> Discovery {
    let mut d = Discovery::read_write(&Kind::ALL).with_address(addr);
    for (group, entry) in tokens::resources().into_iter().chain([rbac::resource()]) {
        d = d.with_resource(group, entry);
    }
    d
}

/// The single entry point: counts, applies faults, routes.
pub async fn handle(State(sim): State<Arc<Sim>>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    if let Some(rest) = path.strip_prefix("/sim/") {
        sim.stats.count("sim", rest.split('/').next().unwrap_or(""));
        let r = control::handle(&sim, req, rest).await;
        return sim.stats.sent(r);
    }
    if let Some(e) = sim.faults.check().await {
        sim.stats.count("fault", "");
        return sim.stats.sent(error_response(&e));
    }
    let r = match api(&sim, req, &path).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    };
    sim.stats.sent(r)
}

/// The API server's paths: discovery, health, the token and review
/// paths, and the resources.
async fn api(sim: &Arc<Sim>, req: Request, path: &str) -> Result<Response, ApiError> {
    let trimmed = path.trim_end_matches('/');
    if let Some(doc) = document(sim, trimmed) {
        let what = if trimmed == "/version" {
            "version"
        } else {
            "discovery"
        };
        sim.stats.count("get", what);
        return doc.map(|v| value_response(200, &v));
    }
    if matches!(trimmed, "/healthz" | "/readyz" | "/livez") {
        return Ok(Response::new(Body::from("ok")));
    }
    if let Some(route) = tokens::Route::of(trimmed) {
        create_only(sim, &req, route.resource())?;
        return tokens::serve(&sim.tokens, req, route).await;
    }
    if trimmed == rbac::PATH {
        create_only(sim, &req, "subjectaccessreviews")?;
        return rbac::serve(&sim.store, req).await;
    }
    let Some(target) = Target::parse(trimmed, &Kind::ALL) else {
        sim.stats.count("unknown", "");
        return Err(ApiError::path_not_found(path));
    };
    objects::serve(sim, req, target).await
}

/// `/version`, a discovery document, or an OpenAPI document (404 for a
/// group version it does not have); `None` for any other path.
fn document(sim: &Sim, path: &str) -> Option<Result<Value, ApiError>> {
    if path == "/version" {
        return Some(Ok(version()));
    }
    if path == "/openapi/v3" {
        return Some(Ok(sim.discovery.openapi_index()));
    }
    if let Some(gv) = path.strip_prefix("/openapi/v3/") {
        return Some(sim.discovery.openapi(gv, GIT_VERSION).ok_or_else(|| {
            ApiError::new(
                404,
                "NotFound",
                "the server could not find the requested resource",
            )
        }));
    }
    sim.discovery.document(path).map(Ok)
}

fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// A path that is only created (a token, a review): counted, and 405 for
/// any other method.
fn create_only(sim: &Sim, req: &Request, resource: &str) -> Result<(), ApiError> {
    if req.method() != Method::POST {
        sim.stats.count("unsupported", resource);
        return Err(method_not_allowed());
    }
    sim.stats.count("create", resource);
    Ok(())
}

fn truthy(q: &Query, k: &str) -> bool {
    matches!(q.get(k).map(String::as_str), Some("true" | "1"))
}

/// kubectl's `get` asks for server-side printing first.
fn wants_table(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

/// What a list or a watch of `t` selects.
fn filter(t: &Target, q: &Query) -> Result<Filter, ApiError> {
    Filter::parse(t.ns.clone(), t.kind.fields(), |k| {
        q.get(k).map(String::as_str)
    })
}

/// A list or a watch from a version the store has not reached: the API
/// server waits a few seconds for it, then gives up so.
fn too_large(want: u64, cur: u64) -> ApiError {
    ApiError::new(
        504,
        "Timeout",
        format!("Too large resource version: {want}, current: {cur}"),
    )
    .with_details(json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}))
}
