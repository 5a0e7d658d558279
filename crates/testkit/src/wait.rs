//! One wait: poll a check until it is done, panic with what was waited for
//! (and the last thing seen) past a deadline. Never a fixed sleep.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a check is polled.
const EVERY: Duration = Duration::from_millis(10);

/// What a check says: done (with the value waited for), or not yet (maybe
/// with what it saw, for the panic message).
pub trait Check {
    type Value;
    fn done(self) -> Result<Self::Value, Option<String>>;
}

impl Check for bool {
    type Value = ();
    fn done(self) -> Result<(), Option<String>> {
        if self { Ok(()) } else { Err(None) }
    }
}

impl<T> Check for Option<T> {
    type Value = T;
    fn done(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

/// `Err(last)`: not yet, and what was seen instead.
impl<T> Check for Result<T, String> {
    type Value = T;
    fn done(self) -> Result<T, Option<String>> {
        self.map_err(Some)
    }
}

/// The deadline of one wait, shared by the async and the blocking form.
struct Deadline<'a> {
    what: &'a str,
    limit: Duration,
    end: Instant,
}

impl<'a> Deadline<'a> {
    fn new(what: &'a str, limit: Duration) -> Self {
        Deadline {
            what,
            limit,
            end: Instant::now() + limit,
        }
    }

    /// The value when `outcome` is done; `None` to poll again; a panic
    /// past the deadline.
    fn judge<C: Check>(&self, outcome: C) -> Option<C::Value> {
        let last = match outcome.done() {
            Ok(value) => return Some(value),
            Err(last) => last,
        };
        if Instant::now() > self.end {
            let (what, limit) = (self.what, self.limit);
            match last {
                Some(last) => panic!("timed out after {limit:?} waiting for {what}; last: {last}"),
                None => panic!("timed out after {limit:?} waiting for {what}"),
            }
        }
        None
    }
}

/// Poll `check` every 10 ms until it is done (`true`, `Some(v)` or
/// `Ok(v)`) and return what it gave; panic with `what` (and the last
/// `Err`) after `limit`.
pub async fn wait_for<F, Fut>(
    what: &str,
    limit: Duration,
    mut check: F,
) -> <Fut::Output as Check>::Value
where
    F: FnMut() -> Fut,
    Fut: Future,
    Fut::Output: Check,
{
    let deadline = Deadline::new(what, limit);
    loop {
        if let Some(value) = deadline.judge(check().await) {
            return value;
        }
        tokio::time::sleep(EVERY).await;
    }
}

pub mod blocking {
    use super::*;

    /// [`wait_for`](super::wait_for) on a plain thread.
    pub fn wait_for<C: Check>(
        what: &str,
        limit: Duration,
        mut check: impl FnMut() -> C,
    ) -> C::Value {
        let deadline = Deadline::new(what, limit);
        loop {
            if let Some(value) = deadline.judge(check()) {
                return value;
            }
            std::thread::sleep(EVERY);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_value_once_done() {
        let mut n = 0;
        let v = blocking::wait_for("three polls", Duration::from_secs(5), || {
            n += 1;
            (n == 3).then_some(n)
        });
        assert_eq!(v, 3);
    }

    #[test]
    #[should_panic(expected = "waiting for never; last: seen 1")]
    fn panics_past_the_deadline_with_what_it_saw() {
        blocking::wait_for("never", Duration::from_millis(30), || {
            Err::<(), _>("seen 1".to_string())
        });
    }

    #[tokio::test]
    async fn the_async_form_judges_alike() {
        let mut n = 0;
        wait_for("two polls", Duration::from_secs(5), || {
            n += 1;
            let done = n == 2;
            async move { done }
        })
        .await;
        assert_eq!(n, 2);
    }
}
