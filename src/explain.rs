//! `podns explain NAME [TYPE]`: ask a running podns why NAME answers what it
//! does. It is one GET of the admin endpoint `/debug/explain` (on only with
//! `podns serve --admin-debug`, e.g. reached through `kubectl
//! port-forward`); the server does the explaining, with the same rules and
//! index DNS uses, and this prints what it says.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// How long the whole request may take (the server waits up to 10 s for
/// its index writer, which serves explain requests between batches).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Text for a person, or the server's JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// What to explain, and where to ask.
#[derive(Clone, Debug)]
pub struct ExplainConfig {
    pub name: String,
    pub qtype: String,
    /// The admin base URL (`http://127.0.0.1:9153`).
    pub admin: String,
    pub output: Output,
}

/// Why `podns explain` printed no explanation (exit 1).
#[derive(Debug)]
pub enum ExplainError {
    /// The endpoint answers 404: the server runs without `--admin-debug`.
    Off { url: String },
    /// The server said no (a bad name or type, the writer busy).
    Status { status: u16, body: String },
    /// Nothing answered at the admin address, or not in time.
    Unreachable { url: String, error: String },
}

impl fmt::Display for ExplainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExplainError::Off { url } => write!(
                f,
                "podns explain: {url} has no /debug/explain: start podns serve with --admin-debug"
            ),
            ExplainError::Status { status, body } => write!(
                f,
                "podns explain: the server answered {status}: {}",
                body.lines().next().unwrap_or_default()
            ),
            ExplainError::Unreachable { url, error } => {
                write!(f, "podns explain: cannot reach {url}: {error}")
            }
        }
    }
}

impl std::error::Error for ExplainError {}

/// Check `--admin`: an `http://host:port` base URL, or `host:port` alone
/// (as `podns wait --server` takes `IP:PORT`), which means `http://`.
pub fn parse_admin(s: &str) -> Result<String, String> {
    let with_scheme;
    let s = if s.contains("://") {
        s
    } else {
        with_scheme = format!("http://{s}");
        &with_scheme
    };
    let uri: http::Uri = s
        .parse()
        .map_err(|_| format!("invalid admin URL {s:?} (example: http://127.0.0.1:9153)"))?;
    match (uri.scheme_str(), uri.authority()) {
        (Some("http"), Some(_)) => Ok(s.trim_end_matches('/').to_string()),
        (Some(other), _) if other != "http" => Err(format!(
            "admin URL {s:?}: only http:// is served by podns (use kubectl port-forward)"
        )),
        _ => Err(format!(
            "invalid admin URL {s:?} (example: http://127.0.0.1:9153)"
        )),
    }
}

/// The URL of the explanation.
pub fn url(cfg: &ExplainConfig) -> String {
    let format = match cfg.output {
        Output::Text => "text",
        Output::Json => "json",
    };
    let query = serde_urlencoded::to_string([
        ("name", cfg.name.as_str()),
        ("type", cfg.qtype.as_str()),
        ("format", format),
    ])
    .unwrap_or_default();
    format!("{}/debug/explain?{query}", cfg.admin)
}

/// Ask the server; the explanation as it sent it (text or JSON).
pub async fn run(cfg: &ExplainConfig) -> Result<String, ExplainError> {
    let url = url(cfg);
    let unreachable = |error: String| ExplainError::Unreachable {
        url: cfg.admin.clone(),
        error,
    };
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let accept = match cfg.output {
        Output::Text => "text/plain",
        Output::Json => "application/json",
    };
    let req = http::Request::get(url.as_str())
        .header(http::header::ACCEPT, accept)
        .body(Empty::new())
        .map_err(|e| unreachable(e.to_string()))?;
    let fetch = async {
        let resp = client
            .request(req)
            .await
            .map_err(|e| unreachable(error_chain(&e)))?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| unreachable(e.to_string()))?
            .to_bytes();
        Ok::<_, ExplainError>((status, String::from_utf8_lossy(&body).into_owned()))
    };
    let (status, body) = tokio::time::timeout(REQUEST_TIMEOUT, fetch)
        .await
        .map_err(|_| unreachable(format!("no answer within {} s", REQUEST_TIMEOUT.as_secs())))??;
    match status.as_u16() {
        200 => Ok(body),
        404 => Err(ExplainError::Off {
            url: cfg.admin.clone(),
        }),
        status => Err(ExplainError::Status { status, body }),
    }
}

/// An error and its causes on one line (`connection refused` hides under
/// hyper-util's "client error (Connect)").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_urls() {
        assert_eq!(
            parse_admin("http://127.0.0.1:9153/").unwrap(),
            "http://127.0.0.1:9153"
        );
        assert!(
            parse_admin("https://x:1")
                .unwrap_err()
                .contains("only http://")
        );
        // `IP:PORT` as `podns wait --server` takes it.
        assert_eq!(
            parse_admin("127.0.0.1:9153").unwrap(),
            "http://127.0.0.1:9153"
        );
        assert_eq!(parse_admin("[::1]:9153").unwrap(), "http://[::1]:9153");
        assert!(parse_admin("not a url").is_err());
    }

    #[test]
    fn the_query_is_encoded() {
        let cfg = ExplainConfig {
            name: "web-0.web.ml.svc.cluster.local".into(),
            qtype: "AAAA".into(),
            admin: "http://h:1".into(),
            output: Output::Json,
        };
        assert_eq!(
            url(&cfg),
            "http://h:1/debug/explain?name=web-0.web.ml.svc.cluster.local&type=AAAA&format=json"
        );
    }
}
