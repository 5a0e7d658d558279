//! The writer's unit tests: the rank view rule by rule (`ranks`), the
//! release of freed memory, the shared name strings, a node instance's scope.

mod ranks;

mod release {
    use std::sync::Mutex;
    use std::thread::ThreadId;
    use std::time::{Duration, Instant};

    use tokio::sync::mpsc;

    use super::super::*;
    use crate::index::testing::pod;
    use crate::index::{Arrival, Lookup};

    /// The writer threads that called the hook, one entry per call (other
    /// tests' writers may call it too: each test counts its own thread's).
    static CALLS: Mutex<Vec<ThreadId>> = Mutex::new(Vec::new());

    fn record() {
        CALLS.lock().unwrap().push(std::thread::current().id());
    }

    fn send(tx: &mpsc::Sender<Arrival>, update: Update) {
        let at = Instant::now();
        tx.blocking_send(Arrival { update, at }).unwrap();
    }

    fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Freed memory is handed back once the writer is idle after a list
    /// (the first sync, a relist), never after a single event.
    #[test]
    fn memory_is_handed_back_after_each_list_not_after_each_event() {
        set_release_memory(record);
        let needs = SyncNeeds::one_list(false, false);
        let policy = Policy {
            rank_view: false,
            ..Policy::default()
        };
        let w = Writer::new(Table::new(), policy, Metrics::new(), needs);
        let table = w.table().clone();
        let (tx, rx) = mpsc::channel(16);
        let writer = std::thread::spawn(move || w.run_blocking(rx));
        let id = writer.thread().id();
        let calls = move || CALLS.lock().unwrap().iter().filter(|&&t| t == id).count();
        let a = pod("ml", "a", "10.0.0.1");
        let b = pod("ml", "b", "10.0.0.2");
        let (ka, kb) = (a.key.clone(), b.key.clone());
        send(&tx, Update::Pod(Change::Apply(a)));
        send(
            &tx,
            Update::Service(Change::Listed {
                namespace: None,
                keys: vec![],
            }),
        );
        send(
            &tx,
            Update::Pod(Change::Listed {
                namespace: None,
                keys: vec![ka.clone()],
            }),
        );
        until("the first sync's release", || calls() == 1);
        assert!(table.is_synced());
        // One event: applied, and nothing handed back for it.
        send(&tx, Update::Pod(Change::Apply(b)));
        until("pod b", || {
            matches!(
                table.lookup("10-0-0-2.ml.pod"),
                Lookup::Ip(_) | Lookup::Found(_)
            )
        });
        // A relist (after a 410, say): handed back again.
        send(
            &tx,
            Update::Pod(Change::Listed {
                namespace: None,
                keys: vec![ka, kb],
            }),
        );
        until("the relist's release", || calls() >= 2);
        drop(tx);
        writer.join().unwrap();
        assert_eq!(calls(), 2, "one release per list, none for the event");
    }
}

mod strs {
    use super::super::*;
    use crate::index::Lookup;
    use crate::index::testing::{PodExt, headless, pod, synced_writer};

    /// The namespace and Service names of the table's address entries
    /// leave the writer's shared copies with the last name spelled from
    /// them, a Service named as its namespace too (one string, held twice
    /// by its member names).
    #[test]
    fn shared_names_go_with_their_last_address_name() {
        let mut w = synced_writer(Policy::default());
        w.apply(Update::Service(Change::Apply(headless("ml", "ml", "x"))));
        w.apply(Update::Pod(Change::Apply(
            pod("ml", "a", "10.0.0.1").label("app", "x"),
        )));
        assert_eq!(
            w.table().lookup("10-0-0-1.ml.ml.svc"),
            Lookup::Ip("10.0.0.1".parse().unwrap())
        );
        assert_eq!(w.strs.len(), 1, "ml, once");
        w.apply(Update::Pod(Change::Delete(ObjKey::new("ml", "a"))));
        assert_eq!(w.table().lookup("10-0-0-1.ml.ml.svc"), Lookup::Missing);
        assert_eq!(w.strs.len(), 0);
    }
}

mod scope {
    use super::super::*;

    #[test]
    fn a_relisting_namespace_is_out_of_a_node_instances_scope_until_listed() {
        let table = Table::new();
        table.scope().set_node();
        let needs = SyncNeeds::one_list(true, false);
        let mut w = Writer::new(table.clone(), Policy::default(), Metrics::new(), needs);
        let ns = || Some("ml".to_string());
        let all = |w: &mut Writer| {
            w.apply(Update::Pod(Change::Reset {
                namespace: ns(),
                items: vec![],
            }));
            w.apply(Update::Service(Change::Reset {
                namespace: ns(),
                items: vec![],
            }));
            w.apply(Update::Job(Change::Reset {
                namespace: ns(),
                items: vec![],
            }));
        };
        all(&mut w);
        assert!(table.scope().contains("ml"));
        w.apply(Update::Relisting {
            resource: "pods",
            namespace: "ml".into(),
        });
        assert!(
            !table.scope().contains("ml") && table.scope().is_stale("ml"),
            "forwarded while its pods relist, what it held kept for when no relay answers"
        );
        w.apply(Update::Service(Change::Reset {
            namespace: ns(),
            items: vec![],
        }));
        assert!(!table.scope().contains("ml"), "the pods are still listing");
        w.apply(Update::Pod(Change::Reset {
            namespace: ns(),
            items: vec![],
        }));
        assert!(table.scope().contains("ml") && !table.scope().is_stale("ml"));
        w.apply(Update::Relisting {
            resource: "jobs",
            namespace: "ml".into(),
        });
        w.apply(Update::Unscope("ml".into()));
        assert!(!table.scope().is_stale("ml"), "out of scope: nothing kept");
        all(&mut w);
        assert!(
            table.scope().contains("ml"),
            "scoped anew, nothing left relisting"
        );
    }

    fn node_writer(slices: bool) -> (Arc<Table>, Writer) {
        let table = Table::new();
        table.scope().set_node();
        table.scope().set_slices_held(slices);
        let w = Writer::new(
            table.clone(),
            Policy::default(),
            Metrics::new(),
            SyncNeeds::default(),
        );
        (table, w)
    }

    fn list_all(w: &mut Writer, slices: bool) {
        let ns = || Some("ml".to_string());
        let svc = crate::index::testing::selectorless("ml", "db");
        w.apply(Update::Pod(Change::Reset {
            namespace: ns(),
            items: vec![],
        }));
        w.apply(Update::Service(Change::Reset {
            namespace: ns(),
            items: vec![svc],
        }));
        w.apply(Update::Job(Change::Reset {
            namespace: ns(),
            items: vec![],
        }));
        if slices {
            w.apply(Update::Slice(Change::Reset {
                namespace: ns(),
                items: vec![],
            }));
        }
    }

    #[test]
    fn services_without_a_selector_are_held_when_the_relay_serves_slices() {
        // A relay that serves EndpointSlices: the node holds them, and the
        // namespace only once its slices are listed too.
        let (table, mut w) = node_writer(true);
        list_all(&mut w, false);
        assert!(!table.scope().contains("ml"), "slices not listed yet");
        list_all(&mut w, true);
        assert!(table.scope().contains("ml"));
        assert!(!table.scope().is_unheld("ml", "db"));
        // One from before: their names are forwarded.
        let (table, mut w) = node_writer(false);
        list_all(&mut w, false);
        assert!(table.scope().contains("ml"));
        assert!(table.scope().is_unheld("ml", "db"));
    }
}
