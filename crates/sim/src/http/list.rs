//! Lists: selectors, pagination (`limit`, `continue`), a version to serve
//! at, in JSON, Protobuf or Table rows; streamed in chunks.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderValue, header};
use podns_kapi::path::Target;
use podns_kapi::pbenc::{self, Media};
use podns_kapi::{ApiError, Kind};

use super::{Query, filter, too_large, wants_table};
use crate::rest::value_response;
use crate::state::Sim;
use crate::store::{Key, Page, decode_continue};
use crate::table;

/// A list of `t` (`q` its query): a page at the version the query asks
/// for, in the client's media type, or as Table rows.
pub(super) fn list(
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
    let (at, start) = position(sim, t.kind, q)?;
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
    Ok(json_list(sim, t.kind, page))
}

/// Where a list starts: the version it is served at (`None`: the
/// latest) and the key after which a continued list goes on, validated
/// as the API server validates `resourceVersion`, `resourceVersionMatch`
/// and `continue`.
fn position(sim: &Sim, kind: Kind, q: &Query) -> Result<(Option<u64>, Option<Key>), ApiError> {
    let rv = q.get("resourceVersion").filter(|s| !s.is_empty());
    let rvm = q.get("resourceVersionMatch").filter(|s| !s.is_empty());
    let invalid = |m: &str| ApiError::invalid(kind, "", m.to_string());
    let position = if let Some(c) = q.get("continue").filter(|s| !s.is_empty()) {
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
    Ok(position)
}

/// A page as a JSON list, streamed in chunks, so a 100k-pod list never
/// exists as one buffer and the first bytes leave at once.
fn json_list(sim: &Sim, kind: Kind, page: Page) -> Response {
    let mut head = format!(
        "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{}\"",
        kind.list_name(),
        kind.api_version(),
        page.rv
    );
    if let Some(c) = &page.cont {
        head.push_str(&format!(",\"continue\":\"{c}\""));
    }
    head.push_str("},\"items\":[");
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
    r.extensions_mut().insert(crate::stats::Counted);
    r
}

/// A Protobuf list: the enveloped list head, then the items in chunks (a
/// 100k-pod list never exists as one buffer).
fn pb_list(sim: &Sim, kind: Kind, rv: u64, cont: Option<&str>, items: Vec<Bytes>) -> Response {
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
    r.extensions_mut().insert(crate::stats::Counted);
    r
}

fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version {s:?}")))
}
