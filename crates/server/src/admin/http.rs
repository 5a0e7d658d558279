//! `/metrics`, `/healthz`, `/readyz` over plain HTTP, and with
//! `--admin-debug` `/debug/explain` ([`super::explain`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::index::Table;

use super::explain::{self, Explainer};
use crate::metrics::Metrics;

/// What `/readyz` reports: ready once the index is synced, and not while
/// draining for shutdown.
#[derive(Debug)]
pub struct Health {
    table: Arc<Table>,
    draining: AtomicBool,
    /// What the index waits for, when something says (a node instance
    /// that cannot read its relay says why).
    waiting: Option<tokio::sync::watch::Receiver<Option<String>>>,
}

impl Health {
    pub fn new(table: Arc<Table>) -> Arc<Self> {
        Self::waiting_on(table, None)
    }

    /// Readiness that, while the index is not synced, names what it waits
    /// for as `why` says.
    pub fn waiting_on(
        table: Arc<Table>,
        why: Option<tokio::sync::watch::Receiver<Option<String>>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            table,
            draining: AtomicBool::new(false),
            waiting: why,
        })
    }

    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.table.is_synced() && !self.draining.load(Ordering::Acquire)
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    health: Arc<Health>,
    /// `None` unless `--admin-debug`.
    explainer: Option<Explainer>,
}

async fn serve_metrics(State(s): State<AppState>) -> impl IntoResponse {
    // Readiness as `/readyz` sees it right now, so an alert and the
    // kubelet's probe never disagree.
    s.metrics.ready.set(i64::from(s.health.is_ready()));
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(s): State<AppState>) -> (StatusCode, String) {
    let (code, mut body) = if s.health.is_ready() {
        (StatusCode::OK, "ready\n".to_owned())
    } else if s.health.table.is_synced() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n".into())
    } else {
        let why = s.health.waiting.as_ref().and_then(|w| w.borrow().clone());
        let body = match why {
            Some(why) => format!("index not synced: {why}\n"),
            None => "index not synced\n".into(),
        };
        (StatusCode::SERVICE_UNAVAILABLE, body)
    };
    body.push_str(&staleness(&s.metrics));
    (code, body)
}

/// `/readyz`'s second line: how far behind the API server the index can
/// be (`podns_index_staleness_seconds`), the most and per resource. Only
/// said, never a reason to be unready: an API server that is down makes
/// every replica stale at once, and the index they hold still answers.
fn staleness(metrics: &Metrics) -> String {
    let by = metrics.staleness.by_resource(std::time::Instant::now());
    let Some(most) = by.iter().map(|(_, s)| *s).reduce(f64::max) else {
        return String::new();
    };
    let each: Vec<String> = by.iter().map(|(r, s)| format!("{r} {s:.1} s")).collect();
    format!("staleness {most:.1} s ({})\n", each.join(", "))
}

#[derive(serde::Deserialize)]
struct ExplainParams {
    name: Option<String>,
    #[serde(rename = "type")]
    qtype: Option<String>,
    format: Option<String>,
}

/// `/debug/explain?name=NAME&type=TYPE[&format=json|text]`: JSON when
/// `format=json` or `Accept: application/json`, text otherwise; 404 unless
/// `--admin-debug`.
async fn debug_explain(
    State(s): State<AppState>,
    Query(q): Query<ExplainParams>,
    headers: HeaderMap,
) -> axum::response::Response {
    let Some(explainer) = &s.explainer else {
        return (
            StatusCode::NOT_FOUND,
            "/debug/explain is off: start podns serve with --admin-debug\n",
        )
            .into_response();
    };
    let json = match q.format.as_deref() {
        Some("json") => true,
        Some("text") => false,
        Some(other) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("unknown format {other:?} (json or text)\n"),
            )
                .into_response();
        }
        None => headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("application/json")),
    };
    let parsed = explain::parse_name(q.name.as_deref().unwrap_or_default()).and_then(|name| {
        Ok((
            name,
            explain::parse_type(q.qtype.as_deref().unwrap_or("A"))?,
        ))
    });
    let (name, qtype) = match parsed {
        Ok(v) => v,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    let explanation = explainer.explain(&name, qtype).await;
    if json {
        axum::Json(explanation).into_response()
    } else {
        (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            explanation.text(),
        )
            .into_response()
    }
}

/// Serve the admin endpoints until `shutdown`; `/debug/explain` only with
/// an `explainer` (`--admin-debug`).
pub async fn run(
    listener: TcpListener,
    metrics: Metrics,
    health: Arc<Health>,
    explainer: Option<Explainer>,
    shutdown: CancellationToken,
) {
    let app = Router::new()
        .route("/metrics", get(serve_metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/debug/explain", get(debug_explain))
        .with_state(AppState {
            metrics,
            health,
            explainer,
        });
    if let Err(error) = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
    {
        tracing::warn!(%error, "admin server failed");
    }
}
