//! Injected faults: outages (503), throttling (429), added latency,
//! dropping every open watch, and stalling them (open, but silent).

use std::sync::Mutex;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use podns_kapi::ApiError;

#[derive(Default)]
struct State {
    outage_until: Option<Instant>,
    throttle_until: Option<Instant>,
    latency: Option<(Duration, Instant)>,
}

pub struct Faults {
    state: Mutex<State>,
    /// Cancelled (and replaced) to close every open watch.
    watches: Mutex<CancellationToken>,
    /// Cancelled (and replaced) to stall every open watch.
    stalls: Mutex<CancellationToken>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            state: Mutex::new(State::default()),
            watches: Mutex::new(CancellationToken::new()),
            stalls: Mutex::new(CancellationToken::new()),
        }
    }
}

impl Faults {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The token a new watch listens on.
    pub fn watch_token(&self) -> CancellationToken {
        current(&self.watches)
    }

    pub fn drop_watches(&self) {
        renew(&self.watches);
    }

    /// The token that stalls a new watch.
    pub fn stall_token(&self) -> CancellationToken {
        current(&self.stalls)
    }

    /// Every open watch keeps its connection and sends nothing more, no
    /// event and no bookmark, until its client goes (a watch stuck behind
    /// a proxy or a server that lost it); watches opened after are served.
    pub fn stall_watches(&self) {
        renew(&self.stalls);
    }

    pub fn outage(&self, d: Duration) {
        self.state().outage_until = Some(Instant::now() + d);
        self.drop_watches();
    }

    pub fn throttle(&self, d: Duration) {
        self.state().throttle_until = Some(Instant::now() + d);
    }

    pub fn latency(&self, ms: u64, d: Duration) {
        self.state().latency = Some((Duration::from_millis(ms), Instant::now() + d));
    }

    pub fn clear(&self) {
        *self.state() = State::default();
    }

    /// Applies the active faults to one API request: waits out the added
    /// latency, then answers 503 or 429 if an outage or throttle is on.
    pub async fn check(&self) -> Option<ApiError> {
        let (latency, outage, throttle) = {
            let s = self.state();
            let now = Instant::now();
            (
                s.latency.filter(|(_, u)| *u > now).map(|(d, _)| d),
                s.outage_until.filter(|u| *u > now),
                s.throttle_until.filter(|u| *u > now),
            )
        };
        if let Some(d) = latency {
            tokio::time::sleep(d).await;
        }
        if outage.is_some() {
            return Some(ApiError::new(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ));
        }
        if let Some(u) = throttle {
            let secs = u
                .saturating_duration_since(Instant::now())
                .as_secs()
                .clamp(1, 60);
            // Like the apiserver's max-in-flight filter: header and
            // details.retryAfterSeconds both say when to come back.
            return Some(
                ApiError::new(
                    429,
                    "TooManyRequests",
                    "Too many requests, please try again later.",
                )
                .with_details(json!({"retryAfterSeconds": secs})),
            );
        }
        None
    }
}

/// The token a watch opened now holds.
fn current(token: &Mutex<CancellationToken>) -> CancellationToken {
    token.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Cancel the token every open watch holds, and give new ones a fresh one.
fn renew(token: &Mutex<CancellationToken>) {
    let mut t = token.lock().unwrap_or_else(|p| p.into_inner());
    t.cancel();
    *t = CancellationToken::new();
}
