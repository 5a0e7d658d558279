//! The HTTP face of the simulator: Kubernetes REST paths under `/api`,
//! discovery, and the simulator's own controls under `/sim/`.
//!
//! Pods, Services, Jobs and Namespaces are answered in the media type the
//! client's `Accept` prefers: Protobuf (`application/vnd.kubernetes.protobuf`,
//! `;stream=watch` for watches, see [`pbenc`](podns_kapi::pbenc)) or JSON. Errors
//! are JSON `Status` bodies, which every client reads. `--no-protobuf`
//! refuses Protobuf as a server without it does.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, header};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use podns_kapi::pbenc::{self, Media};
use podns_kapi::selector::{FieldSelector, LabelSelector};
use podns_kapi::watch::{EvType, ParamError, WatchParams, event_line};
use podns_kapi::{ApiError, Kind};

use crate::state::Sim;
use crate::store::{Filter, Obj, decode_continue};
use crate::table;

type Query = HashMap<String, String>;

const MAX_BODY: usize = 64 << 20;

pub fn json_response(code: u16, body: impl Into<Bytes>) -> Response {
    let mut r = Response::new(Body::from(body.into()));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn value_response(code: u16, v: &Value) -> Response {
    json_response(code, serde_json::to_vec(v).unwrap_or_default())
}

pub fn error_response(e: &ApiError) -> Response {
    let mut r = value_response(e.code, &e.status());
    if let Some(s) = e
        .details
        .as_ref()
        .and_then(|d| d["retryAfterSeconds"].as_u64())
    {
        r.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from_str(&s.to_string()).unwrap_or(HeaderValue::from_static("1")),
        );
    }
    r
}

/// The single entry point: counts, applies faults, routes.
pub async fn handle(State(sim): State<Arc<Sim>>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    if let Some(rest) = path.strip_prefix("/sim/") {
        sim.stats.count("sim", rest.split('/').next().unwrap_or(""));
        let r = super::control::handle(&sim, req, rest).await;
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

fn parse_query(q: Option<&str>) -> Result<Query, ApiError> {
    match q {
        None => Ok(Query::new()),
        Some(q) => serde_urlencoded::from_str::<Vec<(String, String)>>(q)
            .map(|v| v.into_iter().collect())
            .map_err(|e| ApiError::bad_request(format!("invalid query: {e}"))),
    }
}

fn truthy(q: &Query, k: &str) -> bool {
    matches!(q.get(k).map(String::as_str), Some("true" | "1"))
}

/// What a Kubernetes path names.
struct Target {
    kind: Kind,
    ns: Option<String>,
    name: Option<String>,
    status: bool,
}

fn not_found_path(path: &str) -> ApiError {
    ApiError::new(404, "NotFound", "the server could not find the requested resource")
        .with_details(json!({"causes": [{"reason": "UnexpectedServerResponse", "message": format!("404 page not found: {path}")}]}))
}

/// Parses the segments after `/api/v1/` (`group` "") or
/// `/apis/{group}/v1/`; only kinds of that group are found there.
fn parse_target(group: &str, segs: &[&str], path: &str) -> Result<Target, ApiError> {
    let nf = || not_found_path(path);
    let kind = |s: &str| Kind::from_plural(s).ok_or_else(nf);
    let t = match segs {
        [p] => Target {
            kind: kind(p)?,
            ns: None,
            name: None,
            status: false,
        },
        ["namespaces", name] => Target {
            kind: Kind::Namespace,
            ns: None,
            name: Some(name.to_string()),
            status: false,
        },
        ["namespaces", name, "status"] => Target {
            kind: Kind::Namespace,
            ns: None,
            name: Some(name.to_string()),
            status: true,
        },
        // A cluster-scoped object by name (`nodes/n1`).
        [p, name] if *p != "namespaces" => Target {
            kind: kind(p)?,
            ns: None,
            name: Some(name.to_string()),
            status: false,
        },
        [p, name, "status"] if *p != "namespaces" => Target {
            kind: kind(p)?,
            ns: None,
            name: Some(name.to_string()),
            status: true,
        },
        ["namespaces", ns, p] if *p != "namespaces" => Target {
            kind: kind(p)?,
            ns: Some(ns.to_string()),
            name: None,
            status: false,
        },
        ["namespaces", ns, p, name] if *p != "namespaces" => Target {
            kind: kind(p)?,
            ns: Some(ns.to_string()),
            name: Some(name.to_string()),
            status: false,
        },
        ["namespaces", ns, p, name, "status"] if *p != "namespaces" => Target {
            kind: kind(p)?,
            ns: Some(ns.to_string()),
            name: Some(name.to_string()),
            status: true,
        },
        _ => return Err(nf()),
    };
    if t.kind.group() != group {
        return Err(nf());
    }
    if t.kind.namespaced() && t.name.is_some() && t.ns.is_none() {
        return Err(nf());
    }
    if !t.kind.namespaced() && t.kind != Kind::Namespace && t.ns.is_some() {
        return Err(nf());
    }
    Ok(t)
}

async fn api(sim: &Arc<Sim>, req: Request, path: &str) -> Result<Response, ApiError> {
    let trimmed = path.trim_end_matches('/');
    match trimmed {
        "/version" => {
            sim.stats.count("get", "version");
            return Ok(value_response(200, &super::discovery::version()));
        }
        "/api" => {
            sim.stats.count("get", "discovery");
            return Ok(value_response(
                200,
                &super::discovery::api_versions(sim.addr),
            ));
        }
        "/api/v1" => {
            sim.stats.count("get", "discovery");
            return Ok(value_response(200, &super::discovery::api_v1()));
        }
        "/apis" => {
            sim.stats.count("get", "discovery");
            return Ok(value_response(200, &super::discovery::api_groups()));
        }
        "/apis/batch" => {
            sim.stats.count("get", "discovery");
            return Ok(value_response(200, &super::discovery::batch_group()));
        }
        "/apis/batch/v1" => {
            sim.stats.count("get", "discovery");
            return Ok(value_response(200, &super::discovery::batch_v1()));
        }
        "/apis/discovery.k8s.io" => {
            sim.stats.count("get", "discovery");
            return Ok(value_response(200, &super::discovery::discovery_group()));
        }
        "/apis/discovery.k8s.io/v1" => {
            sim.stats.count("get", "discovery");
            return Ok(value_response(200, &super::discovery::discovery_v1()));
        }
        "/openapi/v3" => {
            sim.stats.count("get", "discovery");
            return Ok(value_response(200, &super::discovery::openapi_v3_index()));
        }
        p if p.starts_with("/openapi/v3/") => {
            sim.stats.count("get", "discovery");
            return match super::discovery::openapi_v3(&p["/openapi/v3/".len()..]) {
                Some(doc) => Ok(value_response(200, &doc)),
                None => Err(ApiError::new(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                )),
            };
        }
        "/apis/networking.k8s.io" => {
            sim.stats.count("get", "discovery");
            return Ok(value_response(200, &super::discovery::networking_group()));
        }
        "/apis/networking.k8s.io/v1" => {
            sim.stats.count("get", "discovery");
            return Ok(value_response(200, &super::discovery::networking_v1()));
        }
        "/apis/rbac.authorization.k8s.io" => {
            sim.stats.count("get", "discovery");
            return Ok(value_response(200, &super::discovery::rbac_group()));
        }
        "/apis/rbac.authorization.k8s.io/v1" => {
            sim.stats.count("get", "discovery");
            return Ok(value_response(200, &super::discovery::rbac_v1()));
        }
        "/healthz" | "/readyz" | "/livez" => {
            return Ok(Response::new(Body::from("ok")));
        }
        _ => {}
    }
    if let Some(route) = super::tokens::route(trimmed) {
        return super::tokens::serve(sim, req, route).await;
    }
    if let Some(route) = super::rbac::route(trimmed) {
        return super::rbac::serve(sim, req, route).await;
    }
    let (group, rest) = if let Some(rest) = trimmed.strip_prefix("/api/v1/") {
        ("", rest)
    } else if let Some(rest) = trimmed.strip_prefix("/apis/batch/v1/") {
        ("batch", rest)
    } else if let Some(rest) = trimmed.strip_prefix("/apis/discovery.k8s.io/v1/") {
        ("discovery.k8s.io", rest)
    } else if let Some(rest) = trimmed.strip_prefix("/apis/networking.k8s.io/v1/") {
        ("networking.k8s.io", rest)
    } else if let Some(rest) = trimmed.strip_prefix("/apis/rbac.authorization.k8s.io/v1/") {
        ("rbac.authorization.k8s.io", rest)
    } else {
        sim.stats.count("unknown", "");
        return Err(not_found_path(path));
    };
    let mut q = parse_query(req.uri().query())?;
    let mut segs: Vec<&str> = rest.split('/').collect();
    if segs.first() == Some(&"watch") {
        segs.remove(0);
        q.insert("watch".into(), "true".into());
    }
    let t = parse_target(group, &segs, path)?;
    let method = req.method().clone();
    let resource = if t.status {
        format!("{}/status", t.kind.plural())
    } else {
        t.kind.plural().to_string()
    };
    let watch = truthy(&q, "watch");
    let verb = match (&method, &t.name, watch) {
        (&Method::GET, _, true) => "watch",
        (&Method::GET, Some(_), false) => "get",
        (&Method::GET, None, false) => "list",
        (&Method::POST, None, _) => "create",
        (&Method::PUT, Some(_), _) => "update",
        (&Method::PATCH, Some(_), _) => "patch",
        (&Method::DELETE, Some(_), _) => "delete",
        _ => "unsupported",
    };
    sim.stats.count(verb, &resource);
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let media = match pbenc::negotiate(accept.as_deref(), sim.protobuf) {
        Some(m) => m,
        None if accept.as_deref().is_some_and(|a| a.contains("protobuf")) => {
            return Err(ApiError::new(
                406,
                "NotAcceptable",
                "only the following media types are accepted: application/json",
            ));
        }
        None => Media::Json,
    };
    let ns = t.ns.clone().unwrap_or_default();
    let name = t.name.clone().unwrap_or_default();
    match verb {
        "get" => {
            let o = sim.store.get(t.kind, &ns, &name)?;
            if wants_table(req.headers()) {
                let page = super::store::Page {
                    rv: o.rv,
                    items: vec![o],
                    cont: None,
                };
                return Ok(value_response(200, &table::table(t.kind, &page)));
            }
            Ok(obj_response(200, &o, t.kind, media))
        }
        "list" => list(sim, &t, &q, req.headers(), media),
        "watch" => {
            let mut q = q;
            if let Some(n) = &t.name {
                q.insert("fieldSelector".into(), format!("metadata.name={n}"));
            }
            watch_start(sim, &t, &q, wants_table(req.headers()), media)
        }
        "create" => {
            if t.status {
                return Err(ApiError::new(
                    405,
                    "MethodNotAllowed",
                    "create is not supported on status",
                ));
            }
            if t.kind.namespaced() && t.ns.is_none() {
                return Err(ApiError::new(
                    405,
                    "MethodNotAllowed",
                    "create needs a namespaced path",
                ));
            }
            let v = body_json(req).await?;
            let o = sim.store.create(t.kind, &ns, v)?;
            Ok(obj_response(201, &o, t.kind, media))
        }
        "update" => {
            let v = body_json(req).await?;
            let o = sim.store.replace(t.kind, &ns, &name, v, t.status)?;
            Ok(obj_response(200, &o, t.kind, media))
        }
        "patch" => {
            let ct = req
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            if !(ct.starts_with("application/merge-patch+json")
                || ct.starts_with("application/strategic-merge-patch+json"))
            {
                return Err(ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    format!(
                        "the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json (got {ct:?})"
                    ),
                ));
            }
            let v = body_json(req).await?;
            let o = sim.store.patch(t.kind, &ns, &name, v, t.status)?;
            Ok(obj_response(200, &o, t.kind, media))
        }
        "delete" => {
            let mut grace: Option<u64> = match q.get("gracePeriodSeconds") {
                Some(g) => Some(
                    g.parse()
                        .map_err(|_| ApiError::bad_request("invalid gracePeriodSeconds"))?,
                ),
                None => None,
            };
            let bytes = axum::body::to_bytes(req.into_body(), MAX_BODY)
                .await
                .map_err(|e| ApiError::bad_request(format!("failed to read body: {e}")))?;
            let mut uid = None;
            let mut propagation = q.get("propagationPolicy").cloned();
            if !bytes.iter().all(u8::is_ascii_whitespace) {
                let opts: Value = serde_json::from_slice(&bytes)
                    .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?;
                if let Some(g) = opts["gracePeriodSeconds"].as_u64() {
                    grace = Some(g);
                }
                uid = opts["preconditions"]["uid"].as_str().map(str::to_string);
                if let Some(p) = opts["propagationPolicy"].as_str() {
                    propagation = Some(p.to_string());
                }
            }
            let grace = grace.unwrap_or(sim.workload.default_grace);
            let o = if t.kind == Kind::Pod {
                sim.workload.delete_pod(&ns, &name, grace, uid.as_deref())?
            } else {
                sim.store.delete(t.kind, &ns, &name, 0, uid.as_deref())?.0
            };
            // batch/v1 Jobs orphan their pods unless asked otherwise (as
            // kubectl does, Background); the garbage collector then deletes
            // the pods the Job controlled.
            if t.kind == Kind::Job
                && matches!(propagation.as_deref(), Some("Background" | "Foreground"))
            {
                let f = Filter {
                    ns: Some(ns.clone()),
                    labels: LabelSelector::parse(&format!(
                        "batch.kubernetes.io/controller-uid={}",
                        o.uid
                    ))
                    .map_err(|e| ApiError::bad_request(e.to_string()))?,
                    ..Default::default()
                };
                let (_, pods) = sim.store.snapshot(Kind::Pod, &f);
                for p in pods.iter().filter(|p| !p.deleting) {
                    let _ = sim.workload.delete_pod(&ns, &p.name, grace, Some(&p.uid));
                }
            }
            Ok(obj_response(200, &o, t.kind, media))
        }
        _ => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )),
    }
}

/// kubectl's `get` asks for server-side printing first.
fn wants_table(headers: &http::HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

fn obj_response(code: u16, o: &Obj, kind: Kind, media: Media) -> Response {
    if media == Media::Protobuf
        && let Some(b) = o.pb_object(kind)
    {
        let mut r = json_response(code, b);
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(pbenc::PROTOBUF),
        );
        return r;
    }
    json_response(code, o.bytes.clone())
}

async fn body_json(req: Request) -> Result<Value, ApiError> {
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    if ct.contains("protobuf") {
        let bytes = axum::body::to_bytes(req.into_body(), MAX_BODY)
            .await
            .map_err(|e| ApiError::bad_request(format!("failed to read body: {e}")))?;
        return super::protobuf::decode(&bytes).map_err(|e| {
            ApiError::new(
                415,
                "UnsupportedMediaType",
                format!("{e}; send application/json"),
            )
        });
    }
    if ct.contains("cbor") || ct.contains("yaml") {
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json (got {ct:?})"
            ),
        ));
    }
    let bytes = axum::body::to_bytes(req.into_body(), MAX_BODY)
        .await
        .map_err(|e| ApiError::bad_request(format!("failed to read body: {e}")))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

fn filter(t: &Target, q: &Query) -> Result<Filter, ApiError> {
    let labels = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let fields = FieldSelector::parse(
        q.get("fieldSelector").map(String::as_str).unwrap_or(""),
        t.kind.fields(),
    )
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(Filter {
        ns: t.ns.clone(),
        labels,
        fields,
    })
}

fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version {s:?}")))
}

fn too_large(want: u64, cur: u64) -> ApiError {
    ApiError::new(
        504,
        "Timeout",
        format!("Too large resource version: {want}, current: {cur}"),
    )
    .with_details(json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}))
}

fn list(
    sim: &Arc<Sim>,
    t: &Target,
    q: &Query,
    headers: &http::HeaderMap,
    media: Media,
) -> Result<Response, ApiError> {
    let f = filter(t, q)?;
    let limit = match q.get("limit") {
        Some(l) => Some(
            l.parse::<usize>()
                .map_err(|_| ApiError::bad_request("invalid limit"))?,
        ),
        None => None,
    };
    let rv = q.get("resourceVersion").filter(|s| !s.is_empty());
    let rvm = q.get("resourceVersionMatch").filter(|s| !s.is_empty());
    let invalid = |m: &str| ApiError::invalid(t.kind, "", m.to_string());
    let (at, start) = if let Some(c) = q.get("continue").filter(|s| !s.is_empty()) {
        if rv.is_some() && rv.map(String::as_str) != Some("0") {
            return Err(invalid(
                "resourceVersion: Forbidden: specifying resource version is not allowed when using continue",
            ));
        }
        let (crv, key) =
            decode_continue(c).ok_or_else(|| ApiError::bad_request("continue key is not valid"))?;
        (Some(crv), Some(key))
    } else {
        match (rv.map(String::as_str), rvm.map(String::as_str)) {
            (None, Some(_)) => {
                return Err(invalid(
                    "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            (None, None) | (Some("0"), None | Some("NotOlderThan")) => (None, None),
            (Some(v), None | Some("NotOlderThan")) => {
                let want = parse_rv(v)?;
                let cur = sim.store.current_rv();
                if want > cur {
                    return Err(too_large(want, cur));
                }
                (None, None)
            }
            (Some(v), Some("Exact")) => {
                let want = parse_rv(v)?;
                if want == 0 {
                    return Err(invalid(
                        "resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                    ));
                }
                (Some(want), None)
            }
            (Some(_), Some(m)) => {
                return Err(invalid(&format!(
                    "resourceVersionMatch: Unsupported value: {m:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""
                )));
            }
        }
    };
    let continuing = start.is_some();
    let page = sim.store.list(t.kind, &f, at, start, limit).map_err(|e| {
        if continuing && e.code == 410 {
            ApiError::expired(
                "The provided continue parameter is too old to display a consistent list result. \
                 You can start a new list without the continue parameter.",
            )
        } else {
            e
        }
    })?;
    if wants_table(headers) {
        return Ok(value_response(200, &table::table(t.kind, &page)));
    }
    if media == Media::Protobuf
        && let Some(items) = page
            .items
            .iter()
            .map(|o| o.pb_item(t.kind).cloned())
            .collect::<Option<Vec<Bytes>>>()
    {
        return Ok(pb_list(sim, t.kind, page.rv, page.cont.as_deref(), items));
    }
    let mut head = format!(
        "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{}\"",
        t.kind.list_name(),
        t.kind.api_version(),
        page.rv
    );
    if let Some(c) = &page.cont {
        head.push_str(&format!(",\"continue\":\"{c}\""));
    }
    head.push_str("},\"items\":[");
    // Stream the body in chunks, so a 100k-pod list never exists as one
    // buffer and the first bytes leave at once.
    // One pass over the page; `unfold` owns the items, never copies them.
    let stream = futures::stream::unfold(
        (page.items, 0usize, Some(head)),
        |(items, i, head)| async move {
            if let Some(h) = head {
                return Some((Ok::<_, Infallible>(Bytes::from(h)), (items, 0, None)));
            }
            if i > items.len() {
                return None;
            }
            if i == items.len() {
                return Some((Ok(Bytes::from_static(b"]}")), (items, i + 1, None)));
            }
            let end = (i + 256).min(items.len());
            let size: usize = items[i..end].iter().map(|o| o.bytes.len() + 1).sum();
            let mut buf = Vec::with_capacity(size);
            for (j, o) in items[i..end].iter().enumerate() {
                if i + j > 0 {
                    buf.push(b',');
                }
                buf.extend_from_slice(&o.bytes);
            }
            Some((Ok(Bytes::from(buf)), (items, end, None)))
        },
    );
    let counted = sim.stats.clone();
    let stream = futures::StreamExt::map(stream, move |c: Result<Bytes, Infallible>| {
        if let Ok(b) = &c {
            counted
                .bytes_sent
                .fetch_add(b.len() as u64, Ordering::Relaxed);
        }
        c
    });
    let mut r = Response::new(Body::from_stream(stream));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // Already counted chunk by chunk.
    r.extensions_mut().insert(super::stats::Counted);
    Ok(r)
}

/// A Protobuf list: the enveloped list head, then the items in chunks (a
/// 100k-pod list never exists as one buffer).
fn pb_list(sim: &Arc<Sim>, kind: Kind, rv: u64, cont: Option<&str>, items: Vec<Bytes>) -> Response {
    let total = items.iter().map(Bytes::len).sum();
    let head = Bytes::from(pbenc::list_head(kind, rv, cont, total));
    let chunks = items
        .chunks(256)
        .map(|c| Bytes::from(c.concat()))
        .collect::<Vec<_>>();
    let counted = sim.stats.clone();
    let stream = futures::StreamExt::map(
        futures::stream::iter(std::iter::once(head).chain(chunks)),
        move |b| {
            counted
                .bytes_sent
                .fetch_add(b.len() as u64, Ordering::Relaxed);
            Ok::<_, Infallible>(b)
        },
    );
    let mut r = Response::new(Body::from_stream(stream));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(pbenc::PROTOBUF),
    );
    r.extensions_mut().insert(super::stats::Counted);
    r
}

fn watch_start(
    sim: &Arc<Sim>,
    t: &Target,
    q: &Query,
    table: bool,
    media: Media,
) -> Result<Response, ApiError> {
    // A Table watch is JSON whatever else the client accepts.
    let media = if table { Media::Json } else { media };
    let f = filter(t, q)?;
    let params = WatchParams::parse(|k| q.get(k).map(String::as_str)).map_err(|e| match e {
        // As the apiserver validates streaming lists (KEP-3157).
        ParamError::Invalid(m) => ApiError::invalid(t.kind, "", m.to_string()),
        ParamError::BadRequest(m) => ApiError::bad_request(m),
    })?;
    let start_rv = params.start;
    if let Some(want) = start_rv {
        let cur = sim.store.current_rv();
        if want > cur {
            // The apiserver waits a few seconds for a future version, then
            // gives up the same way.
            return Err(too_large(want, cur));
        }
    }
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    let w = WatchTask {
        table,
        media,
        sim: sim.clone(),
        kind: t.kind,
        filter: f,
        bookmarks: params.bookmarks,
        initial: params.initial(),
        initial_end_bookmark: params.initial_end(),
        start_rv,
        deadline: params.timeout.map(|d| Instant::now() + d),
        tx,
    };
    sim.stats.open_watches.fetch_add(1, Ordering::Relaxed);
    tokio::spawn(w.run());
    let mut r = Response::new(Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    ));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(match media {
            Media::Json => "application/json",
            Media::Protobuf => pbenc::PROTOBUF_WATCH,
        }),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    r.extensions_mut().insert(super::stats::Counted);
    Ok(r)
}

struct WatchTask {
    sim: Arc<Sim>,
    kind: Kind,
    filter: Filter,
    bookmarks: bool,
    initial: bool,
    initial_end_bookmark: bool,
    /// kubectl's `get -w` asks for Table rows; each event carries one.
    table: bool,
    /// JSON lines or Protobuf frames.
    media: Media,
    start_rv: Option<u64>,
    deadline: Option<Instant>,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
}

impl WatchTask {
    async fn send(&self, b: Bytes) -> bool {
        if b.is_empty() {
            return true;
        }
        let n = b.len() as u64;
        if self.tx.send(Ok(b)).await.is_err() {
            return false;
        }
        let s = &self.sim.stats;
        s.watch_events_sent.fetch_add(1, Ordering::Relaxed);
        s.watch_bytes_sent.fetch_add(n, Ordering::Relaxed);
        s.bytes_sent.fetch_add(n, Ordering::Relaxed);
        true
    }

    async fn run(self) {
        let _ = self.run_inner().await;
        self.sim.stats.open_watches.fetch_sub(1, Ordering::Relaxed);
    }

    /// A line for one object, built for this watcher (initial events and
    /// Table watches; shared events use `Event::line`).
    fn object_line(&self, ty: EvType, o: &Arc<Obj>) -> Bytes {
        if self.media == Media::Protobuf
            && let Some(obj) = o.pb_object(self.kind)
        {
            return Bytes::from(pbenc::watch_frame(ty.as_str(), obj));
        }
        if self.media == Media::Protobuf {
            // No typed form (already warned): nothing a Protobuf client could read.
            return Bytes::new();
        }
        if self.table {
            let page = super::store::Page {
                rv: o.rv,
                items: vec![o.clone()],
                cont: None,
            };
            let t = serde_json::to_vec(&table::table(self.kind, &page)).unwrap_or_default();
            event_line(ty.as_str(), &t)
        } else {
            event_line(ty.as_str(), &o.bytes)
        }
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        match self.media {
            Media::Json => podns_kapi::watch::bookmark_line(self.kind, rv, initial_end),
            Media::Protobuf => Bytes::from(pbenc::watch_frame(
                "BOOKMARK",
                pbenc::bookmark_object(self.kind, rv, initial_end),
            )),
        }
    }

    /// Decides what a watcher with this filter sees of one event.
    fn visible(&self, ev: &super::store::Event) -> Option<EvType> {
        if ev.kind != self.kind {
            return None;
        }
        let now = self.filter.matches(&ev.obj);
        let before = ev.prev.as_ref().is_some_and(|p| self.filter.matches(p));
        ev.ty.seen(before, now)
    }

    async fn run_inner(&self) -> Option<()> {
        let store = &self.sim.store;
        let cancel = self.sim.faults.watch_token();
        let shutdown = self.sim.shutdown.clone();
        let mut changes = store.subscribe();
        let mut cursor = match self.start_rv {
            Some(rv) if !self.initial => rv,
            _ => {
                let (rv, objs) = store.snapshot(self.kind, &self.filter);
                for o in objs {
                    if !self.send(self.object_line(EvType::Added, &o)).await {
                        return None;
                    }
                }
                if self.initial_end_bookmark && !self.send(self.bookmark(rv, true)).await {
                    return None;
                }
                rv
            }
        };
        let interval = Duration::from_secs(self.sim.bookmark_interval.max(1));
        let mut next_bookmark = Instant::now() + interval;
        loop {
            changes.borrow_and_update();
            match store.events_after(cursor, 1024) {
                Err(_) => {
                    let e = ApiError::expired(format!(
                        "too old resource version: {cursor} ({})",
                        store.oldest_resumable() + 1
                    ));
                    let line = match self.media {
                        Media::Json => event_line(
                            "ERROR",
                            &serde_json::to_vec(&e.status()).unwrap_or_default(),
                        ),
                        Media::Protobuf => {
                            Bytes::from(pbenc::watch_frame("ERROR", pbenc::status(&e.status())))
                        }
                    };
                    self.send(line).await;
                    return None;
                }
                Ok((evs, upto)) => {
                    let full = evs.len() == 1024;
                    for ev in evs {
                        if let Some(ty) = self.visible(&ev)
                            && !self
                                .send(if self.table || self.media == Media::Protobuf {
                                    self.object_line(ty, &ev.obj)
                                } else {
                                    ev.line(ty)
                                })
                                .await
                        {
                            return None;
                        }
                    }
                    cursor = upto;
                    if full {
                        continue;
                    }
                }
            }
            let deadline = self.deadline;
            tokio::select! {
                r = changes.changed() => { r.ok()?; }
                _ = tokio::time::sleep_until(next_bookmark), if self.bookmarks => {
                    if !self.send(self.bookmark(cursor, false)).await {
                        return None;
                    }
                    next_bookmark = Instant::now() + interval;
                }
                _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)).await }, if deadline.is_some() => return None,
                _ = cancel.cancelled() => return None,
                _ = shutdown.cancelled() => return None,
                _ = self.tx.closed() => return None,
            }
        }
    }
}
