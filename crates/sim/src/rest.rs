//! What every handler of the simulator's paths shares: JSON answers,
//! errors as `Status` bodies, request bodies and query parameters read as
//! the API server reads them.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use podns_kapi::ApiError;
use serde_json::{Map, Value, json};

use crate::protobuf;

/// A body of `code` whose type is JSON.
pub fn json_response(code: u16, body: impl Into<Bytes>) -> Response {
    let mut r = Response::new(Body::from(body.into()));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `v` as a JSON body of `code`.
pub fn value_response(code: u16, v: &Value) -> Response {
    json_response(code, serde_json::to_vec(v).unwrap_or_default())
}

/// `e` as the API server answers it: a `Status` body, with `Retry-After`
/// when it says when to retry.
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

/// The apiserver's answer to a method a path does not serve (go-restful's
/// 405 as `NewGenericServerResponse` words it).
pub fn method_not_allowed() -> ApiError {
    ApiError::new(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
    )
    .with_details(json!({}))
}

/// The 415 for a body of a media type the path does not read.
pub fn unsupported_media(content_type: &str) -> ApiError {
    ApiError::new(
        415,
        "UnsupportedMediaType",
        format!(
            "the body of the request was in an unknown format - accepted media types include: application/json (got {content_type:?})"
        ),
    )
}

/// The request's body, at most `limit` bytes.
pub async fn read_body(req: Request, limit: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|e| ApiError::bad_request(format!("failed to read body: {e}")))
}

/// The request's query parameters (the last of a repeated one).
pub fn query(req: &Request) -> Result<HashMap<String, String>, ApiError> {
    match req.uri().query() {
        None => Ok(HashMap::new()),
        Some(q) => serde_urlencoded::from_str::<Vec<(String, String)>>(q)
            .map(|v| v.into_iter().collect())
            .map_err(|e| ApiError::bad_request(format!("invalid query: {e}"))),
    }
}

/// The body as a JSON object of `kind` in `api_version` (Protobuf only for
/// the kinds kubectl sends so: TokenRequest and TokenReview).
pub async fn body_object(
    req: Request,
    kind: &str,
    api_version: &str,
) -> Result<Map<String, Value>, ApiError> {
    let ct = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let protobuf = ct.contains("protobuf");
    if !protobuf && !ct.contains("json") {
        return Err(unsupported_media(&ct));
    }
    let bytes = read_body(req, 1 << 20).await?;
    let cannot = |why: String| {
        ApiError::bad_request(format!(
            "{kind} in version \"v1\" cannot be handled as a {kind}: {why}"
        ))
    };
    if protobuf && api_version == protobuf::AUTHENTICATION {
        return protobuf::decode_authentication(&bytes, kind).map_err(|why| cannot(why.into()));
    }
    if protobuf {
        return Err(unsupported_media(&ct));
    }
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| cannot(e.to_string()))?;
    let Value::Object(o) = v else {
        return Err(cannot(format!(
            "json: cannot unmarshal {} into Go value of type v1.{kind}",
            json_type(&v)
        )));
    };
    match o.get("apiVersion") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() || s == api_version => {}
        Some(other) => {
            return Err(cannot(format!(
                "unsupported apiVersion {other}, expected {api_version:?}"
            )));
        }
    }
    match o.get("kind") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() || s == kind => {}
        Some(other) => {
            return Err(cannot(format!(
                "unexpected kind {other}, expected {kind:?}"
            )));
        }
    }
    Ok(o)
}

/// How Go's decoder names a JSON value's type in its errors.
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
