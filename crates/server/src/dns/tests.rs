//! The two encoders of an answer plan agree byte for byte: random small
//! indexes (pods with and without hostnames, dual stack, ports; headless,
//! ClusterIP and ExternalName Services; one or two zones; synced or not)
//! and random questions about them (their names, near misses, the
//! reserved names, reverse and outside names, in any letter case; every
//! common type and some odd ones; EDNS payload sizes, versions and DO),
//! and sets too big for UDP, whose truncated replies must agree too.

use proptest::prelude::*;

use super::agreement::{Ask, PodSpec, QTYPES, Shape, SvcSpec, check};
use super::testing::World;

fn arb_pod() -> impl Strategy<Value = PodSpec> {
    (
        (0u8..2, 0u8..4),
        (
            prop::option::weighted(0.9, 0u8..8),
            prop::option::of(0u8..8),
        ),
        prop::option::weighted(0.6, (0u8..4, 0u8..4)),
        (0u8..4, prop::bool::weighted(0.8), prop::option::of(0u8..2)),
    )
        .prop_map(|((ns, name), (v4, v6), host, (app, ready, port))| PodSpec {
            ns,
            name,
            v4,
            v6,
            host,
            app,
            ready,
            port,
        })
}

fn arb_svc() -> impl Strategy<Value = SvcSpec> {
    (
        0u8..2,
        0u8..4,
        0u8..4,
        0u8..4,
        prop::option::of(any::<bool>()),
        any::<bool>(),
    )
        .prop_map(
            |(ns, name, kind, app, named_port, publish_not_ready)| SvcSpec {
                ns,
                name,
                kind,
                app,
                named_port,
                publish_not_ready,
            },
        )
}

fn arb_shape() -> impl Strategy<Value = Shape> {
    (
        prop::collection::vec(arb_pod(), 0..12),
        prop::collection::vec(arb_svc(), 0..5),
        any::<bool>(),
        0u8..8,
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.2),
        (
            prop_oneof![3 => Just(0u8), 1 => 20u8..40, 1 => 60u8..160],
            any::<bool>(),
        ),
    )
        .prop_map(
            |(pods, services, two_zones, ns_addrs, synced, publish_ready, (crowd, crowd_v6))| {
                Shape {
                    pods,
                    services,
                    two_zones,
                    ns_addrs,
                    synced,
                    publish_ready,
                    crowd,
                    crowd_v6,
                }
            },
        )
}

fn arb_edns() -> impl Strategy<Value = Option<(u16, u8, bool)>> {
    let payload = prop_oneof![
        Just(512u16),
        Just(1232),
        Just(4096),
        0u16..600,
        1100u16..1400,
        any::<u16>(),
    ];
    let version = prop_oneof![8 => Just(0u8), 1 => any::<u8>()];
    prop::option::weighted(0.7, (payload, version, any::<bool>()))
}

fn arb_ask() -> impl Strategy<Value = Ask> {
    let qtype = prop_oneof![
        8 => prop::sample::select(QTYPES.to_vec()),
        1 => any::<u16>(),
    ];
    let case = prop_oneof![4 => Just(0u64), 1 => any::<u64>()];
    (
        (
            any::<u16>(),
            prop_oneof![3 => Just(0u8), 1 => 1u8..4],
            any::<bool>(),
        ),
        (case, qtype, prop::bool::weighted(0.95)),
        (arb_edns(), any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |((name, miss, zone), (case, qtype, class_in), (edns, rd, cd))| Ask {
                name,
                miss,
                zone,
                case,
                qtype,
                class_in,
                edns,
                rd,
                cd,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Whenever the fast path answers, its reply is the general path's.
    #[test]
    fn the_fast_encoder_writes_the_general_encoders_bytes(
        shape in arb_shape(),
        asks in prop::collection::vec(arb_ask(), 1..40),
    ) {
        let World { answerer, .. } = shape.build();
        for ask in &asks {
            check(&answerer, &ask.bytes(&shape));
        }
    }
}

/// The property above compares something: over many random worlds, the
/// fast path answers a good share of the questions (positive, negative,
/// truncated and BADVERS replies among them).
#[test]
fn the_fast_encoder_answers_often_enough_to_be_compared() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut asked, mut taken) = (0, 0);
    for _ in 0..64 {
        let shape = arb_shape().new_tree(&mut runner).unwrap().current();
        let World { answerer, .. } = shape.build();
        for _ in 0..40 {
            let ask = arb_ask().new_tree(&mut runner).unwrap().current();
            asked += 2;
            taken += check(&answerer, &ask.bytes(&shape));
        }
    }
    assert!(taken * 5 > asked, "fast path answered {taken} of {asked}");
}

/// Truncated replies carry records: both encoders must cut a set at the
/// same record, for every type and payload size, and the fast path must
/// take the address sets' truncated replies.
#[test]
fn truncated_replies_agree_at_every_size() {
    use super::agreement::Ask;
    let shape = Shape {
        pods: vec![],
        services: vec![],
        two_zones: true,
        ns_addrs: 0,
        synced: true,
        publish_ready: false,
        crowd: 150,
        crowd_v6: true,
    };
    let World { answerer, .. } = shape.build();
    let names = shape.candidates();
    let mut taken = 0;
    for (i, n) in names.iter().enumerate() {
        if !n.contains("crowd") {
            continue;
        }
        for qtype in [1u16, 28, 255, 33] {
            for edns in [None, Some(0), Some(512), Some(700), Some(1232), Some(4096)] {
                for zone in [false, true] {
                    let ask = Ask {
                        name: i as u16,
                        miss: 0,
                        zone,
                        case: 0,
                        qtype,
                        class_in: true,
                        edns: edns.map(|p| (p, 0, false)),
                        rd: true,
                        cd: false,
                    };
                    taken += check(&answerer, &ask.bytes(&shape));
                }
            }
        }
    }
    // A and AAAA of the set, over UDP and TCP, in both zones, at every size.
    assert!(taken >= 2 * 2 * 2 * 6, "fast path answered {taken}");
}
