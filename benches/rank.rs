//! Rank-view lookups cost the same whatever the gang size: the TXT summary
//! and a rank's A record, answered through the same path UDP uses, for a
//! JobSet of 8 and of 8,192 ranks.
//!
//! Run: `cargo bench --bench rank` (about a minute).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};

use podns_server::dns::answer::{AnswerConfig, Answerer, Transport};
use podns_server::dns::testing::World;
use podns_server::index::testing::{PodExt, job, rank_pod};
use podns_server::index::{Change, Policy, Update};

fn world(ranks: u32) -> Answerer {
    let mut w = World::new(
        Policy {
            rank_view: true,
            ..Default::default()
        },
        AnswerConfig::default(),
    );
    let pods = (0..ranks)
        .map(|i| {
            rank_pod(
                "ml",
                "gang-workers-0",
                i,
                &format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255),
            )
            .label("jobset.sigs.k8s.io/jobset-name", "gang")
            .label("jobset.sigs.k8s.io/job-global-index", "0")
        })
        .collect();
    w.job(job("ml", "gang-workers-0", ranks, Some("gang")));
    w.apply(Update::Pod(Change::all(pods)));
    w.answerer
}

fn query(name: &str, t: RecordType) -> Vec<u8> {
    let mut m = Message::new(1, MessageType::Query, OpCode::Query);
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), t));
    m.to_vec().unwrap()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("rank_view");
    for ranks in [8u32, 8192] {
        let a = world(ranks);
        let txt = query("gang.ml.rank.cluster.local.", RecordType::TXT);
        let rank = query(
            &format!("{}.gang.ml.rank.cluster.local.", ranks - 1),
            RecordType::A,
        );
        assert!(
            a.handle(&rank, Transport::Udp)
                .is_some_and(|r| !r.bytes.is_empty())
        );
        g.bench_with_input(BenchmarkId::new("txt_summary", ranks), &txt, |b, q| {
            b.iter(|| a.handle(black_box(q), Transport::Udp))
        });
        g.bench_with_input(BenchmarkId::new("rank_a", ranks), &rank, |b, q| {
            b.iter(|| a.handle(black_box(q), Transport::Udp))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
