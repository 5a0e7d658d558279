//! The wire fast path allocates nothing once the reply buffer the UDP loop
//! keeps is warm: an answer, NODATA, NXDOMAIN, and a set too big for UDP,
//! whose reply is cut to the whole records that fit. Counted by a global
//! allocator that counts only the allocations of a thread that armed it
//! (every other test of this binary pays one thread-local read per
//! allocation).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use hickory_proto::op::{Edns, Message};
use hickory_proto::rr::RecordType;
use podns_server::dns::answer::{AnswerConfig, Transport};
use podns_server::dns::testing::{World, query};
use podns_server::index::Policy;
use podns_server::index::testing::{PodExt, headless, pod};

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

fn note() {
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            COUNT.with(|c| c.set(c.get() + 1));
        }
    });
}

struct Counting;

// SAFETY: every call is passed to the system allocator unchanged; the
// counting touches only const-initialised thread-locals, which allocate
// nothing.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// How many allocations `f` makes on this thread.
fn allocations<R>(f: impl FnOnce() -> R) -> (usize, R) {
    COUNT.with(|c| c.set(0));
    ARMED.with(|a| a.set(true));
    let r = f();
    ARMED.with(|a| a.set(false));
    (COUNT.with(Cell::get), r)
}

#[test]
fn the_fast_path_allocates_nothing_truncated_sets_included() {
    let mut w = World::new(Policy::default(), AnswerConfig::default());
    w.svc(headless("ml", "big", "big"));
    for i in 0..300u32 {
        let ip = format!("10.2.{}.{}", i / 250, i % 250 + 1);
        w.pod(
            pod("ml", &format!("p{i}"), &ip)
                .label("app", "big")
                .host(&format!("w-{i}"), "big"),
        );
    }
    let edns = |mut m: Message| {
        let mut e = Edns::new();
        e.set_max_payload(1232);
        m.set_edns(e);
        m
    };
    let big = "big.ml.svc.cluster.local.";
    let cases = [
        (query(big, RecordType::A), true),
        (edns(query(big, RecordType::A)), true),
        (
            edns(query("w-7.big.ml.svc.cluster.local.", RecordType::A)),
            false,
        ),
        (
            edns(query("w-7.big.ml.svc.cluster.local.", RecordType::AAAA)),
            false,
        ),
        (
            edns(query("nosuch.ml.svc.cluster.local.", RecordType::A)),
            false,
        ),
    ];
    let mut out = Vec::new();
    for (q, truncated) in cases {
        let bytes = q.to_vec().unwrap();
        // Warm: the buffer grows to the largest reply once.
        for _ in 0..2 {
            w.answerer.handle_into(&bytes, Transport::Udp, &mut out);
        }
        let (n, meta) = allocations(|| w.answerer.handle_fast(&bytes, Transport::Udp, &mut out));
        let meta = meta.unwrap_or_else(|| panic!("the fast path declined {:?}", q.queries));
        assert_eq!(meta.truncated, truncated, "{:?}", q.queries);
        assert_eq!(n, 0, "{n} allocations for {:?}", q.queries);
        // The count is real: the general path allocates for the same.
        let (general, _) = allocations(|| w.answerer.handle_general(&bytes, Transport::Udp));
        assert!(general > 0);
        if truncated {
            let m = Message::from_vec(&out).unwrap();
            assert!(!m.answers.is_empty() && m.answers.len() < 300);
        }
    }
}
