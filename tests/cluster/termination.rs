//! SIGTERM from the kubelet, on the real node: a forward-target replica
//! deleted while a client queries it directly at 100 queries a second.
//! `/readyz` turns 503 first, every query sent while it still listens is
//! answered, and the process exits (code 0) well before the pod's grace
//! period.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};

use crate::forward_target::*;
use crate::real_node::*;
use crate::support::*;

/// One UDP query, one try of 500 ms: answered or not.
fn once(sock: &UdpSocket, server: SocketAddr, id: u16) -> bool {
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.add_query(Query::query(
        Name::from_ascii("kubernetes.default.svc.cluster.local.").unwrap(),
        RecordType::A,
    ));
    if sock.send_to(&m.to_vec().unwrap(), server).is_err() {
        return false;
    }
    let mut buf = [0u8; 1500];
    let deadline = Instant::now() + Duration::from_millis(500);
    while Instant::now() < deadline {
        match sock.recv(&mut buf) {
            Ok(n) => {
                if Message::from_vec(&buf[..n]).is_ok_and(|r| r.metadata.id == id) {
                    return true;
                }
            }
            Err(_) => return false,
        }
    }
    false
}

#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn sigterm_from_the_kubelet_drains_then_exits_before_the_grace_period() {
    let c = cluster();
    let Some(n) = real_node(&c) else { return };
    let mut pns = PodnsNamespace::new(&n, "podns-term", "restricted");
    let ns = pns.name.clone();
    pns.helm_install(&[], false);
    n.rollout_status(&ns, &format!("deployment/{FULLNAME}"), 180);
    let pod = n.pods(&ns, "app.kubernetes.io/name=podns")[0].clone();
    let ip = n.pod_ip(&ns, &pod);
    let dns: SocketAddr = format!("{ip}:5353").parse().unwrap();
    let admin: SocketAddr = format!("{ip}:9153").parse().unwrap();
    let grace: u64 = c
        .pod_field(&ns, &pod, "{.spec.terminationGracePeriodSeconds}")
        .trim()
        .parse()
        .unwrap();
    let pid = n.pid(&ns, &pod, "podns");

    let t0 = Instant::now();
    let logs = LogFollower::start(&c, &ns, &pod, t0);
    let stop = Arc::new(AtomicBool::new(false));
    // Queries every 10 ms, straight at the pod: (sent at, answered).
    let queries = Arc::new(Mutex::new(Vec::<(Duration, bool)>::new()));
    let q = {
        let (stop, queries) = (stop.clone(), queries.clone());
        std::thread::spawn(move || {
            let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
            sock.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            let mut id = 1u16;
            while !stop.load(Ordering::Relaxed) {
                let at = t0.elapsed();
                let ok = once(&sock, dns, id);
                queries.lock().unwrap().push((at, ok));
                id = id.wrapping_add(1);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    // /readyz every 50 ms: (at, status; 0 = no answer).
    let ready = Arc::new(Mutex::new(Vec::<(Duration, u16)>::new()));
    let r = {
        let (stop, ready) = (stop.clone(), ready.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let at = t0.elapsed();
                let status = http_get(admin, "/readyz").0;
                ready.lock().unwrap().push((at, status));
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    wait_for("queries answered before the delete", secs(10), || {
        (queries.lock().unwrap().iter().filter(|q| q.1).count() > 20).then_some(())
    });
    let deleted = t0.elapsed();
    c.kubectl(&["-n", &ns, "delete", "pod", &pod, "--wait=false"]);
    // The process's end, seen from this host.
    wait_for("podns to exit", secs(grace + 10), || {
        (!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(())
    });
    let exited = t0.elapsed();
    std::thread::sleep(Duration::from_millis(600));
    stop.store(true, Ordering::Relaxed);
    q.join().unwrap();
    r.join().unwrap();
    let queries = queries.lock().unwrap().clone();
    let ready = ready.lock().unwrap().clone();
    let log = logs.text();

    let first_503 = ready
        .iter()
        .find(|(at, s)| *at > deleted && *s == 503)
        .map(|(at, _)| *at)
        .unwrap_or_else(|| panic!("/readyz never said 503 after the delete: {ready:?}"));
    let last_answered = queries.iter().filter(|q| q.1).map(|q| q.0).max().unwrap();
    assert!(
        first_503 < last_answered,
        "readiness turned false ({first_503:?}) before the last answer ({last_answered:?})"
    );
    // Every query sent before the last answer (so while podns listened)
    // was answered.
    let lost: Vec<_> = queries
        .iter()
        .filter(|(at, ok)| !ok && *at < last_answered)
        .collect();
    assert!(
        lost.is_empty(),
        "queries lost while podns still answered: {lost:?}"
    );
    let answered_draining = queries
        .iter()
        .filter(|(at, ok)| *ok && *at > first_503)
        .count();
    let exit_after = exited - deleted;
    assert!(
        exit_after < Duration::from_secs(grace),
        "podns took {exit_after:?} to exit, grace period {grace} s"
    );
    let said: Vec<&str> = log.iter().map(|(_, l)| l.as_str()).collect();
    assert!(
        said.iter().any(|l| l.contains("draining: /readyz is 503")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|l| l.contains("\"stopped\"") || l.ends_with("stopped")),
        "{said:?}"
    );
    // The kubelet saw a clean exit.
    report(
        &c,
        &format!(
            "termination: SIGTERM → /readyz 503 after {:.2} s, {answered_draining} queries answered while draining, last answer {:.2} s, exit {:.2} s after the delete (grace period {grace} s), none lost",
            (first_503 - deleted).as_secs_f64(),
            (last_answered - deleted).as_secs_f64(),
            exit_after.as_secs_f64()
        ),
    );
    drop(pns);
}
