//! Injected faults: outages (503), throttling (429), added latency,
//! dropping every open watch, stalling them (open, but silent), and deaf
//! watches (accepted, then never fed).

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
    /// The next watches to open deaf: of this resource (plural; `None`:
    /// any), this many.
    deaf: Option<(Option<String>, u32)>,
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

    /// The next `count` watches of `resource` (its plural, as in a path;
    /// `None`: of any resource) are deaf: each is accepted, sends its
    /// initial events and their end bookmark if it asked for them (a
    /// streaming list), and then nothing, no event and no bookmark, while
    /// the store moves on, until its client goes or its `timeoutSeconds`
    /// ends it. Lists and every other watch are served as always. The twin
    /// of an API server whose watch cache registered a watcher and never
    /// feeds it.
    pub fn deaf_watches(&self, resource: Option<String>, count: u32) {
        self.state().deaf = (count > 0).then_some((resource, count));
    }

    /// Whether a watch of `resource` opened now is deaf (and, if it is,
    /// one fewer to come).
    pub fn take_deaf(&self, resource: &str) -> bool {
        let mut s = self.state();
        let Some((want, left)) = &mut s.deaf else {
            return false;
        };
        if want.as_deref().is_some_and(|w| w != resource) {
            return false;
        }
        *left -= 1;
        if *left == 0 {
            s.deaf = None;
        }
        true
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
