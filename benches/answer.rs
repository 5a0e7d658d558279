//! The answer path, bytes in → bytes out: `Answerer::handle_into` on
//! pre-encoded query bytes (what the UDP loop calls: the wire fast path
//! where it applies), one bench per kind of name, each next to
//! `<case>/general`, the general path alone (hickory `Message` in and out).
//!
//! World, built once: 100 Jobs × 1,000 ranks (100k pods) in namespace `ml`,
//! each pod with hostname `<job>-<i>`, subdomain `<job>`, label `app=<job>`,
//! one headless Service per Job; plus a 64-rank job `mpi` whose headless
//! Service has the named port `nccl` (for SRV and the 64-address set);
//! plus three gangs of 8, 512 and 4,096 ranks (`job-100`..`job-102`) for
//! whole sets: 8 over UDP, 512 and 4,096 over TCP (4,092 of them fit
//! 65,535 bytes with this name and the OPT record).
//! Queries carry EDNS with a 1232-byte payload and RD, as glibc/musl
//! resolvers behind node-local caches send them.
//!
//! Run: `cargo bench --bench answer` (add `-- --quick` for a fast pass,
//! or a filter such as `-- answer/nxdomain`).

mod common;

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use podns_server::dns::answer::{AnswerConfig, Answerer, Transport};
use podns_server::index::{Change, Update};

use common::*;

const JOBS: usize = 100;
const RANKS: usize = 1_000;
/// Gangs beside the world, answered as whole sets: `job-100` and on.
const GANGS: [usize; 3] = [8, 512, 4_096];

fn query_bytes(name: &str, qtype: RecordType) -> Vec<u8> {
    let mut m = Message::new(0x5a5a, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).expect("name"), qtype));
    let mut edns = Edns::new();
    edns.set_max_payload(1232);
    m.set_edns(edns);
    m.to_vec().expect("encode")
}

struct Case {
    id: &'static str,
    name: String,
    qtype: RecordType,
    transport: Transport,
    rcode: ResponseCode,
    answers: usize,
    additionals: usize,
    truncated: bool,
}

fn cases() -> Vec<Case> {
    let j = 42;
    let i = 517;
    let job = job_name(j);
    let ip = pod_ip(j * RANKS + i);
    let [a, b, c, d] = ip.octets();
    // By path: the `RecordType::*` glob below shadows `NS` in this function.
    let ns = common::NS;
    let case = |id, name: String, qtype, transport, rcode, answers, additionals, truncated| Case {
        id,
        name,
        qtype,
        transport,
        rcode,
        answers,
        additionals,
        truncated,
    };
    use RecordType::*;
    use ResponseCode::*;
    use Transport::*;
    vec![
        case(
            "hostname_a",
            format!("{job}-{i}.{job}.{ns}.svc.cluster.local."),
            A,
            Udp,
            NoError,
            1,
            0,
            false,
        ),
        case(
            "hostname_aaaa_nodata",
            format!("{job}-{i}.{job}.{ns}.svc.cluster.local."),
            AAAA,
            Udp,
            NoError,
            0,
            0,
            false,
        ),
        // ndots:5 puts the search list first: `storage.googleapis.com`
        // from a pod in `ml` is asked as this name before the real one.
        case(
            "nxdomain_search_miss",
            format!("storage.googleapis.com.{ns}.svc.cluster.local."),
            A,
            Udp,
            NXDomain,
            0,
            0,
            false,
        ),
        case(
            "headless_a_64",
            format!("{SMALL_JOB}.{ns}.svc.cluster.local."),
            A,
            Udp,
            NoError,
            SMALL_RANKS,
            0,
            false,
        ),
        // 64 SRV + 64 A glue is ~4.5 KB: the full answer over TCP, and the
        // UDP case, which sends TC=1 with the 22 SRV records that fit
        // (targets are never compressed) and no glue.
        case(
            "srv_glue_64_tcp",
            format!("_nccl._tcp.{SMALL_JOB}.{ns}.svc.cluster.local."),
            SRV,
            Tcp,
            NoError,
            SMALL_RANKS,
            SMALL_RANKS,
            false,
        ),
        case(
            "srv_glue_64_udp_truncated",
            format!("_nccl._tcp.{SMALL_JOB}.{ns}.svc.cluster.local."),
            SRV,
            Udp,
            NoError,
            22,
            0,
            true,
        ),
        // A whole gang's set (1,000 addresses, 16 KB) asked over UDP:
        // the reply is truncated to the 73 records that fit 1232 bytes.
        case(
            "headless_a_1000_udp_truncated",
            format!("{job}.{ns}.svc.cluster.local."),
            A,
            Udp,
            NoError,
            73,
            0,
            true,
        ),
        case(
            "headless_a_8",
            format!("{}.{ns}.svc.cluster.local.", job_name(JOBS)),
            A,
            Udp,
            NoError,
            GANGS[0],
            0,
            false,
        ),
        case(
            "headless_a_512_tcp",
            format!("{}.{ns}.svc.cluster.local.", job_name(JOBS + 1)),
            A,
            Tcp,
            NoError,
            GANGS[1],
            0,
            false,
        ),
        // 4,096 x 16 bytes alone is past 65,535: cut to whole records.
        case(
            "headless_a_4096_tcp",
            format!("{}.{ns}.svc.cluster.local.", job_name(JOBS + 2)),
            A,
            Tcp,
            NoError,
            4_092,
            0,
            true,
        ),
        case(
            "ptr",
            format!("{d}.{c}.{b}.{a}.in-addr.arpa."),
            PTR,
            Udp,
            NoError,
            1,
            0,
            false,
        ),
        case(
            "out_of_zone_refused",
            "storage.googleapis.com.".into(),
            A,
            Udp,
            Refused,
            0,
            0,
            false,
        ),
    ]
}

fn bench_answer(c: &mut Criterion) {
    let t0 = std::time::Instant::now();
    let mut services = job_services(JOBS);
    let mut pods = job_pods(JOBS, RANKS, Labels::App);
    let (svc, small) = small_job();
    services.push(svc);
    pods.extend(small);
    let mut n = JOBS * RANKS;
    for (k, size) in GANGS.into_iter().enumerate() {
        services.push(job_service(JOBS + k));
        pods.extend((0..size).map(|i| rank_pod(JOBS + k, i, n + i, Labels::App)));
        n += size;
    }
    let mut writer = writer_with_services(services);
    writer.apply(Update::Pod(Change::all(pods)));
    assert!(writer.table().is_synced());
    eprintln!(
        "world: {} pods, {} services, {} names, built in {:.1?}",
        writer.pod_count(),
        writer.service_count(),
        writer.table().len(),
        t0.elapsed()
    );
    let answerer = Answerer::new(writer.table().clone(), AnswerConfig::default());

    let mut g = c.benchmark_group("answer");
    g.throughput(Throughput::Elements(1));
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(3));
    for case in cases() {
        let q = query_bytes(&case.name, case.qtype);
        // Check the answer is the one the bench claims to measure.
        let reply = answerer.handle(&q, case.transport).expect("a reply");
        let m = Message::from_vec(&reply.bytes).expect("decodes");
        assert_eq!(m.metadata.response_code, case.rcode, "{}: {m:?}", case.id);
        assert_eq!(m.answers.len(), case.answers, "{}: {m:?}", case.id);
        assert_eq!(reply.truncated, case.truncated, "{}", case.id);
        if !case.truncated {
            // Glue only: hickory keeps the OPT record apart, in `edns`.
            assert_eq!(m.additionals.len(), case.additionals, "{}: {m:?}", case.id);
        }
        eprintln!(
            "{:>26}: {} bytes in, {} bytes out",
            case.id,
            q.len(),
            reply.bytes.len()
        );
        // What the UDP loop calls: the wire fast path where it applies,
        // into a buffer kept between queries; and the general path alone
        // (hickory Message in and out), for the before/after.
        let mut out = Vec::with_capacity(512);
        g.bench_function(case.id, |b| {
            b.iter(|| answerer.handle_into(black_box(&q), case.transport, &mut out))
        });
        g.bench_function(format!("{}/general", case.id), |b| {
            b.iter(|| answerer.handle_general(black_box(&q), case.transport))
        });
    }
    g.finish();
    drop(answerer);
    // Dropping 100k pods' worth of index is not part of any measurement.
    std::mem::forget(writer);
}

criterion_group!(benches, bench_answer);
criterion_main!(benches);
