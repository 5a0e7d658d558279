//! `/metrics`, `/healthz`, `/readyz` over plain HTTP.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::index::Table;

use super::Metrics;

/// What `/readyz` reports: ready once the index is synced, and not while
/// draining for shutdown.
#[derive(Debug)]
pub struct Health {
    table: Arc<Table>,
    draining: AtomicBool,
}

impl Health {
    pub fn new(table: Arc<Table>) -> Arc<Self> {
        Arc::new(Self {
            table,
            draining: AtomicBool::new(false),
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

async fn readyz(State(s): State<AppState>) -> (StatusCode, &'static str) {
    if s.health.is_ready() {
        (StatusCode::OK, "ready\n")
    } else if s.health.table.is_synced() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "index not synced\n")
    }
}

/// Serve the admin endpoints until `shutdown`.
pub async fn run(
    listener: TcpListener,
    metrics: Metrics,
    health: Arc<Health>,
    shutdown: CancellationToken,
) {
    let app = Router::new()
        .route("/metrics", get(serve_metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(AppState { metrics, health });
    if let Err(error) = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
    {
        tracing::warn!(%error, "admin server failed");
    }
}
