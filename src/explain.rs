//! `podns explain NAME [TYPE]`: ask a running podns why NAME answers what it
//! does. It is one GET of the admin endpoint `/debug/explain` (on only with
//! `podns serve --admin-debug`, e.g. reached through `kubectl
//! port-forward`); the server does the explaining, with the same rules and
//! index DNS uses, and this prints what it says.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::timeout;

/// How long a connection may take, and the first answer (`/healthz`): a
/// port that is not podns's admin API is said in about this long.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the explanation may take (the server waits up to 10 s for
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
    /// Something answered, but not podns's admin API (`why`): the DNS
    /// port, another server.
    NotAdmin { url: String, why: String },
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
            ExplainError::NotAdmin { url, why } => write!(
                f,
                "podns explain: {url} is not podns's admin API ({why}); --admin takes the address podns serve has as --admin-listen (port 9153 by default), not its DNS port"
            ),
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

/// Why a GET got no HTTP answer.
enum Failure {
    /// No connection (refused, unresolvable, not within [`CONNECT_TIMEOUT`]).
    Connect(String),
    /// Connected, but no answer in time.
    Silent(Duration),
    /// What came back is not HTTP.
    NotHttp,
    /// The connection failed in the middle.
    Broken(String),
}

/// One GET of `path` at `admin` (`http://host:port`), on a connection of
/// its own: the status and the body, within `wait` of connecting.
async fn get(
    admin: &http::Uri,
    path: &str,
    accept: &str,
    wait: Duration,
) -> Result<(u16, String), Failure> {
    let authority = admin
        .authority()
        .ok_or_else(|| Failure::Connect("no host in the URL".into()))?;
    let at = format!(
        "{}:{}",
        authority.host(),
        authority.port_u16().unwrap_or(80)
    );
    let stream = match timeout(CONNECT_TIMEOUT, TcpStream::connect(&at)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return Err(Failure::Connect(e.to_string())),
        Err(_) => {
            return Err(Failure::Connect(format!(
                "no connection within {} s",
                CONNECT_TIMEOUT.as_secs()
            )));
        }
    };
    let broken = |e: hyper::Error| {
        if e.is_parse() || e.is_parse_status() {
            Failure::NotHttp
        } else {
            Failure::Broken(podns_server::config::error_line(&e))
        }
    };
    let exchange = async {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(broken)?;
        let conn = tokio::spawn(conn);
        let req = http::Request::get(path)
            .header(http::header::HOST, authority.as_str())
            .header(http::header::ACCEPT, accept)
            .body(Empty::<Bytes>::new())
            .map_err(|e| Failure::Broken(e.to_string()))?;
        let resp = sender.send_request(req).await.map_err(broken)?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.map_err(broken)?.to_bytes();
        conn.abort();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    };
    timeout(wait, exchange)
        .await
        .unwrap_or(Err(Failure::Silent(wait)))
}

/// Ask the server; the explanation as it sent it (text or JSON). First a
/// `/healthz` that must answer `ok` within [`PROBE_TIMEOUT`], so that an
/// address that is not podns's admin API (the DNS port holds an HTTP
/// request until its idle timeout) is said in seconds, then the
/// explanation.
pub async fn run(cfg: &ExplainConfig) -> Result<String, ExplainError> {
    let url = url(cfg);
    let admin: http::Uri =
        cfg.admin
            .parse()
            .map_err(|e: http::uri::InvalidUri| ExplainError::Unreachable {
                url: cfg.admin.clone(),
                error: e.to_string(),
            })?;
    let target: http::Uri =
        url.parse()
            .map_err(|e: http::uri::InvalidUri| ExplainError::Unreachable {
                url: cfg.admin.clone(),
                error: e.to_string(),
            })?;
    let path = target.path_and_query().map_or("/", |p| p.as_str());
    let failed = |f: Failure| match f {
        Failure::Connect(error) | Failure::Broken(error) => ExplainError::Unreachable {
            url: cfg.admin.clone(),
            error,
        },
        Failure::Silent(wait) => ExplainError::NotAdmin {
            url: cfg.admin.clone(),
            why: format!("connected, but no HTTP answer within {} s", wait.as_secs()),
        },
        Failure::NotHttp => ExplainError::NotAdmin {
            url: cfg.admin.clone(),
            why: "it answered something that is not HTTP".into(),
        },
    };
    match get(&admin, "/healthz", "text/plain", PROBE_TIMEOUT).await {
        Ok((200, body)) if body.trim() == "ok" => {}
        Ok((status, _)) => {
            return Err(ExplainError::NotAdmin {
                url: cfg.admin.clone(),
                why: format!("GET /healthz answered {status}, not podns's 200 ok"),
            });
        }
        Err(f) => return Err(failed(f)),
    }
    let accept = match cfg.output {
        Output::Text => "text/plain",
        Output::Json => "application/json",
    };
    let (status, body) = get(&admin, path, accept, REQUEST_TIMEOUT)
        .await
        .map_err(|f| match f {
            Failure::Silent(wait) => ExplainError::Unreachable {
                url: cfg.admin.clone(),
                error: format!("no explanation within {} s", wait.as_secs()),
            },
            f => failed(f),
        })?;
    match status {
        200 => Ok(body),
        // podns's own 404 says how to turn the endpoint on; another
        // server's is only a status.
        404 if body.contains("--admin-debug") => Err(ExplainError::Off {
            url: cfg.admin.clone(),
        }),
        404 => Err(ExplainError::NotAdmin {
            url: cfg.admin.clone(),
            why: "GET /debug/explain answered 404, and not as podns does".into(),
        }),
        status => Err(ExplainError::Status { status, body }),
    }
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
