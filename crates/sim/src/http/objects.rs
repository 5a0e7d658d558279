//! One resource path: the verb its method and query make, the media type
//! its `Accept` prefers, and the verbs on objects (get, create, update,
//! patch, delete); lists and watches are in [`super::list`] and
//! [`super::watch`].

use std::sync::Arc;

use axum::extract::Request;
use axum::response::Response;
use http::{HeaderValue, Method, header};
use podns_kapi::filter::Filter;
use podns_kapi::path::Target;
use podns_kapi::pbenc::{self, Media};
use podns_kapi::selector::LabelSelector;
use podns_kapi::{ApiError, Kind};
use serde_json::Value;

use super::{list, truthy, wants_table, watch};
use crate::rest::{self, json_response, unsupported_media, value_response};
use crate::state::Sim;
use crate::store::{Obj, Page};
use crate::{protobuf, table};

/// The largest body a create, an update or a patch may send.
const MAX_BODY: usize = 64 << 20;

/// What a request does to a resource path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
}

impl Verb {
    /// The verb of `method` on `t` (`None`: none the path allows), as the
    /// API server's request info names it.
    fn of(method: &Method, t: &Target, watch: bool) -> Option<Verb> {
        Some(match (method, &t.name, watch) {
            (&Method::GET, _, true) => Verb::Watch,
            (&Method::GET, Some(_), false) => Verb::Get,
            (&Method::GET, None, false) => Verb::List,
            (&Method::POST, None, _) => Verb::Create,
            (&Method::PUT, Some(_), _) => Verb::Update,
            (&Method::PATCH, Some(_), _) => Verb::Patch,
            (&Method::DELETE, Some(_), _) => Verb::Delete,
            _ => return None,
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
}

/// Serves a request to resource path `t`.
pub(super) async fn serve(sim: &Arc<Sim>, req: Request, t: Target) -> Result<Response, ApiError> {
    let q = rest::query(&req)?;
    let method = req.method().clone();
    let verb = Verb::of(&method, &t, t.watch || truthy(&q, "watch"));
    sim.stats
        .count(verb.map_or("unsupported", Verb::as_str), &t.resource());
    let media = media(sim, req.headers())?;
    let Some(verb) = verb else {
        return Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        ));
    };
    let ns = t.ns.clone().unwrap_or_default();
    let name = t.name.clone().unwrap_or_default();
    match verb {
        Verb::Get => {
            let o = sim.store.get(t.kind, &ns, &name)?;
            if wants_table(req.headers()) {
                let page = Page {
                    rv: o.rv,
                    items: vec![o],
                    cont: None,
                };
                return Ok(value_response(200, &table::table(t.kind, &page)));
            }
            Ok(obj_response(200, &o, t.kind, media))
        }
        Verb::List => list::list(sim, &t, &q, req.headers(), media),
        Verb::Watch => watch::start(sim, &t, q, wants_table(req.headers()), media),
        Verb::Create => {
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
            let mut v = body_json(req).await?;
            if t.kind == Kind::Pod {
                sim.workload.admit_pod(&mut v);
            }
            let o = sim.store.create(t.kind, &ns, v)?;
            Ok(obj_response(201, &o, t.kind, media))
        }
        Verb::Update => {
            let v = body_json(req).await?;
            let o = sim.store.replace(t.kind, &ns, &name, v, t.status)?;
            Ok(obj_response(200, &o, t.kind, media))
        }
        Verb::Patch => {
            let v = patch_json(req).await?;
            let o = sim.store.patch(t.kind, &ns, &name, v, t.status)?;
            Ok(obj_response(200, &o, t.kind, media))
        }
        Verb::Delete => {
            let o = delete(sim, &t, req, &q).await?;
            Ok(obj_response(200, &o, t.kind, media))
        }
    }
}

/// The media type of the answer: what `Accept` prefers of what the
/// simulator serves; 406 for a client that accepts only Protobuf when
/// `--no-protobuf` refuses it.
fn media(sim: &Sim, headers: &http::HeaderMap) -> Result<Media, ApiError> {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    match pbenc::negotiate(accept, sim.protobuf) {
        Some(m) => Ok(m),
        None if accept.is_some_and(|a| a.contains("protobuf")) => Err(ApiError::new(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json",
        )),
        None => Ok(Media::Json),
    }
}

/// One object, in Protobuf when asked and it has a typed form.
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

/// The request's `Content-Type`, if it has a readable one.
fn content_type(req: &Request) -> Option<String> {
    let v = req.headers().get(header::CONTENT_TYPE)?;
    v.to_str().ok().map(str::to_string)
}

/// The object a create or an update sends: JSON, or the Protobuf kubectl
/// sends for its typed creates.
async fn body_json(req: Request) -> Result<Value, ApiError> {
    let ct = content_type(&req).unwrap_or_else(|| "application/json".into());
    if ct.contains("protobuf") {
        let bytes = rest::read_body(req, MAX_BODY).await?;
        return protobuf::decode(&bytes).map_err(|e| {
            ApiError::new(
                415,
                "UnsupportedMediaType",
                format!("{e}; send application/json"),
            )
        });
    }
    if ct.contains("cbor") || ct.contains("yaml") {
        return Err(unsupported_media(&ct));
    }
    let bytes = rest::read_body(req, MAX_BODY).await?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

/// A patch's body: a JSON merge patch (a strategic merge patch is taken
/// as one; the simulator's objects have no list merge keys it would use).
async fn patch_json(req: Request) -> Result<Value, ApiError> {
    let ct = content_type(&req).unwrap_or_default();
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
    body_json(req).await
}

/// A delete with its `DeleteOptions` (query or body): a pod ends as the
/// kubelet ends it, after its grace period; a Job deleted with a
/// propagation policy takes its pods with it.
async fn delete(
    sim: &Sim,
    t: &Target,
    req: Request,
    q: &super::Query,
) -> Result<Arc<Obj>, ApiError> {
    let ns = t.ns.clone().unwrap_or_default();
    let name = t.name.clone().unwrap_or_default();
    let mut grace: Option<u64> = match q.get("gracePeriodSeconds") {
        Some(g) => Some(
            g.parse()
                .map_err(|_| ApiError::bad_request("invalid gracePeriodSeconds"))?,
        ),
        None => None,
    };
    let bytes = rest::read_body(req, MAX_BODY).await?;
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
    if t.kind == Kind::Job && matches!(propagation.as_deref(), Some("Background" | "Foreground")) {
        let f = Filter {
            ns: Some(ns.clone()),
            labels: LabelSelector::parse(&format!("batch.kubernetes.io/controller-uid={}", o.uid))
                .map_err(|e| ApiError::bad_request(e.to_string()))?,
            ..Default::default()
        };
        let (_, pods) = sim.store.snapshot(Kind::Pod, &f);
        for p in pods.iter().filter(|p| !p.deleting) {
            let _ = sim.workload.delete_pod(&ns, &p.name, grace, Some(&p.uid));
        }
    }
    Ok(o)
}
