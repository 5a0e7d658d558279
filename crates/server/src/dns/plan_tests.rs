//! The two encoders of an answer plan agree byte for byte: random small
//! indexes (pods with and without hostnames, dual stack, ports; headless,
//! ClusterIP and ExternalName Services; one or two zones; synced or not)
//! and random questions about them (their names, near misses, the
//! reserved names, reverse and outside names, in any letter case; every
//! common type and some odd ones; EDNS payload sizes, versions and DO).

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
    )
        .prop_map(
            |(pods, services, two_zones, ns_addrs, synced, publish_ready)| Shape {
                pods,
                services,
                two_zones,
                ns_addrs,
                synced,
                publish_ready,
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
