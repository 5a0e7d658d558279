//! Writer cost: what one watch event, and one relist, costs the index.
//!
//! - `index/pod_ip_change_100k`: Apply of a modified pod (its IP changes)
//!   in a synced world of 100 Jobs × 1,000 ranks, one headless Service each.
//! - `index/pod_add_delete/<ranks>`: one pod added to, then deleted from, a
//!   Job of 8 or 8,192 ranks (two events per iteration). If the time grows
//!   with the ranks, per-event cost depends on the size of the headless set.
//! - `index/member_ip_change/<no_ports|srv>/<ranks>`: one member of a
//!   headless Service of 8 or 8,192 members changes its IP; the Service
//!   without ports (JobSet's) or with one named port (SRV per member).
//! - `index/relist/initial_100k`: `Change::Reset` of 100k pods into an index
//!   that has only the Services (the initial sync).
//! - `index/relist/diff_1pct_100k`: `Change::Reset` of 100k pods into the
//!   full index with 1% of them changed (a relist after a 410).
//!
//! Run: `cargo bench --bench index` (about 2–3 minutes on 2 cores; add a
//! filter such as `-- relist` to run a part).

mod common;

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use criterion::{
    BatchSize, Bencher, BenchmarkId, Criterion, SamplingMode, criterion_group, criterion_main,
};
use podns_server::index::{Change, ObjKey, PodInfo, Update, Writer};

use common::*;

const JOBS: usize = 100;
const RANKS: usize = 1_000;

/// Applies the same pod with its IP `a` and `b` by turns (`flip` says which
/// went last, across calls): every apply is a real change.
fn ip_flips(bch: &mut Bencher, w: &mut Writer, flip: &mut bool, a: &PodInfo, b: &PodInfo) {
    bch.iter_batched(
        || {
            *flip = !*flip;
            if *flip { b.clone() } else { a.clone() }
        },
        |p| w.apply(Update::Pod(Change::Apply(black_box(p)))),
        BatchSize::SmallInput,
    )
}

fn pod_ip_change(c: &mut Criterion) {
    let mut w = synced(job_services(JOBS), job_pods(JOBS, RANKS, Labels::App));
    let (j, i) = (42, 517);
    let a = rank_pod(j, i, j * RANKS + i, Labels::App);
    let b = rank_pod_with_ip(j, i, Ipv4Addr::new(10, 250, 2, 5), Labels::App);
    let mut g = c.benchmark_group("index");
    g.sample_size(20);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(5));
    let mut flip = false;
    g.bench_function("pod_ip_change_100k", |bch| {
        ip_flips(bch, &mut w, &mut flip, &a, &b)
    });
    g.finish();
    std::mem::forget(w);
}

fn pod_add_delete(c: &mut Criterion) {
    let mut g = c.benchmark_group("index/pod_add_delete");
    g.sample_size(20);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(4));
    for ranks in [8usize, 8_192] {
        let mut w = synced(job_services(1), job_pods(1, ranks, Labels::App));
        // One more rank of the same Job: it joins the headless set.
        let extra = rank_pod_with_ip(0, ranks, Ipv4Addr::new(10, 250, 0, 1), Labels::App);
        let key: ObjKey = extra.key.clone();
        g.bench_with_input(BenchmarkId::from_parameter(ranks), &ranks, |bch, _| {
            bch.iter_batched(
                || extra.clone(),
                |p: PodInfo| {
                    w.apply(Update::Pod(Change::Apply(black_box(p))));
                    w.apply(Update::Pod(Change::Delete(key.clone())));
                },
                BatchSize::SmallInput,
            )
        });
        drop(w); // outside the timed section
    }
    g.finish();
}

/// One member's IP changes in a headless Service of 8 or 8,192 members,
/// without ports (JobSet's Services) and with one named port (an SRV
/// record per member). The target: ≤ 20 µs at 8,192 and within 2× of 8.
fn member_ip_change(c: &mut Criterion) {
    let mut g = c.benchmark_group("index/member_ip_change");
    g.sample_size(20);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(4));
    for (ports, label) in [(false, "no_ports"), (true, "srv")] {
        for ranks in [8usize, 8_192] {
            let mut svc = job_service(0);
            if ports {
                svc.ports = vec![nccl_port()];
            }
            let mut w = synced(vec![svc], job_pods(1, ranks, Labels::App));
            let i = ranks / 2;
            let a = rank_pod(0, i, i, Labels::App);
            let b = rank_pod_with_ip(0, i, Ipv4Addr::new(10, 250, 2, 5), Labels::App);
            let mut flip = false;
            g.bench_with_input(BenchmarkId::new(label, ranks), &ranks, |bch, _| {
                ip_flips(bch, &mut w, &mut flip, &a, &b)
            });
            drop(w);
        }
    }
    g.finish();
}

fn relist(c: &mut Criterion) {
    let services = job_services(JOBS);
    let pods = job_pods(JOBS, RANKS, Labels::App);
    let mut g = c.benchmark_group("index/relist");
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    g.warm_up_time(Duration::from_millis(100));
    g.measurement_time(Duration::from_secs(10));

    g.bench_function("initial_100k", |bch| {
        bch.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut w = writer_with_services(services.clone());
                let items = pods.clone();
                let t = Instant::now();
                w.apply(Update::Pod(Change::all(black_box(items))));
                total += t.elapsed();
                assert!(w.table().is_synced());
                drop(w); // outside the timed section
            }
            total
        })
    });

    // Every 100th pod has a new IP (restarted ranks spread over all Jobs).
    let changed: Vec<PodInfo> = pods
        .iter()
        .enumerate()
        .map(|(n, p)| {
            if n % 100 == 0 {
                let (j, i) = (n / RANKS, n % RANKS);
                let ip = Ipv4Addr::new(10, 251, (n >> 8) as u8, n as u8);
                rank_pod_with_ip(j, i, ip, Labels::App)
            } else {
                p.clone()
            }
        })
        .collect();
    let mut w = synced(services.clone(), pods.clone());
    let mut flip = false;
    g.bench_function("diff_1pct_100k", |bch| {
        bch.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                // Alternate: each relist differs from the index by 1%.
                flip = !flip;
                let items = if flip { changed.clone() } else { pods.clone() };
                let t = Instant::now();
                w.apply(Update::Pod(Change::all(black_box(items))));
                total += t.elapsed();
            }
            total
        })
    });
    g.finish();
    std::mem::forget(w);
}

criterion_group!(
    benches,
    pod_ip_change,
    pod_add_delete,
    member_ip_change,
    relist
);
criterion_main!(benches);
