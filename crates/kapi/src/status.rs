//! Errors as the API server answers them: a `Status` object with a code,
//! a reason and a message (and for some, details), as
//! `k8s.io/apimachinery/pkg/api/errors` makes them.

use serde_json::{Value, json};

use crate::Kind;

/// An error answered as a `Status` object.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }
    pub fn with_details(mut self, d: Value) -> Self {
        self.details = Some(d);
        self
    }
    pub fn not_found(kind: Kind, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", kind.resource()),
        )
        .with_details(kind.details(name))
    }
    pub fn already_exists(kind: Kind, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", kind.resource()),
        )
        .with_details(kind.details(name))
    }
    pub fn conflict(kind: Kind, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again",
                kind.resource()
            ),
        )
        .with_details(kind.details(name))
    }
    pub fn invalid(kind: Kind, name: &str, msg: impl Into<String>) -> Self {
        let msg = msg.into();
        Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {msg}", kind.name()),
        )
        .with_details(json!({"name": name, "kind": kind.name(), "causes": [{"message": msg}]}))
    }
    pub fn bad_request(msg: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", msg)
    }
    pub fn expired(msg: impl Into<String>) -> Self {
        Self::new(410, "Expired", msg)
    }
    /// A path that names no resource served, as kube-apiserver answers
    /// one under `/api` or `/apis`.
    pub fn path_not_found(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({"causes": [{"reason": "UnexpectedServerResponse", "message": format!("404 page not found: {path}")}]}))
    }
    pub fn gone_rv(rv: u64) -> Self {
        Self::expired(format!("too old resource version: {rv}"))
    }

    /// The `Status` object the apiserver sends for this error.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}
