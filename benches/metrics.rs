//! The cost of recording one request duration, as the serving loops do per
//! query: prometheus-client's `Histogram::observe` (one mutex for all
//! loops; what podns did before) next to a `ShardedHistogram` shard (one
//! per loop, no lock), each on one thread and on two threads at once.
//! The two-thread cases report wall time per observation per thread: both
//! threads observe `iters` times at the same moment, as two UDP loops do.
//!
//! Same buckets as `podns_dns_request_duration_seconds`; the values cycle
//! through typical answer times (a few µs) with an occasional slow one.
//!
//! Run: `cargo bench --bench metrics` (add `-- --quick` for a fast pass).
//! Two threads want two idle cores: note the load next to the figures.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use podns_server::metrics::{REQUEST_DURATION_BUCKETS, ShardedHistogram};
use prometheus_client::metrics::histogram::Histogram;

const VALUES: [f64; 8] = [
    3.1e-6, 4.4e-6, 7.9e-6, 3.6e-6, 1.2e-5, 4.1e-6, 2.7e-5, 3.3e-4,
];

fn value(i: u64) -> f64 {
    VALUES[(i % VALUES.len() as u64) as usize]
}

/// Run `work(iters)` on `threads` threads started together; the slowest
/// thread's time.
fn on_threads(threads: usize, iters: u64, work: impl Fn(u64) + Sync) -> Duration {
    let start = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    let t = Instant::now();
                    work(iters);
                    t.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .max()
            .unwrap_or_default()
    })
}

fn bench_observe(c: &mut Criterion) {
    let mut g = c.benchmark_group("observe");

    let locked = Histogram::new(REQUEST_DURATION_BUCKETS);
    g.bench_function("locked/1_thread", |b| {
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            locked.observe(black_box(value(i)));
        })
    });
    g.bench_function("locked/2_threads", |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, |n| {
                for i in 0..n {
                    locked.observe(black_box(value(i)));
                }
            })
        })
    });

    let sharded = ShardedHistogram::new(REQUEST_DURATION_BUCKETS);
    g.bench_function("sharded/1_thread", |b| {
        let mut shard = sharded.shard();
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            shard.observe(black_box(value(i)));
        })
    });
    g.bench_function("sharded/2_threads", |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, |n| {
                // A shard per thread, as per serving loop; taking it is
                // per loop, not per query, but it is inside the timing
                // here (one lock, noise next to `iters` observations).
                let mut shard = sharded.shard();
                for i in 0..n {
                    shard.observe(black_box(value(i)));
                }
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench_observe);
criterion_main!(benches);
