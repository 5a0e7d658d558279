//! The CI soak (issue 7): 60 seconds (PODNS_SOAK_SECS) of UDP queries at a
//! modest paced rate against the real binary while the simulator restarts a
//! job every second, sampling podns's RSS and open fds from /proc. The long
//! version is `benches/harness/soak.sh`.

use std::collections::HashMap;
use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::*;

const QPS: u64 = 2000;

#[derive(Default, Debug)]
struct Tally {
    sent: u64,
    ok: u64,
    wrong: u64,
    bad_rcode: u64,
    timeouts: u64,
}

/// Paced UDP queries over `names` (fqdn -> the one IP it must answer).
fn load(
    dns: std::net::SocketAddr,
    names: Vec<(String, String)>,
    stop: Arc<AtomicBool>,
    until: Instant,
) -> (Tally, Vec<String>) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.connect(dns).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut t = Tally::default();
    let mut bad = Vec::new();
    let mut buf = [0u8; 4096];
    let period = Duration::from_nanos(1_000_000_000 / QPS);
    let start = Instant::now();
    let mut id: u16 = 0;
    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
        let (name, want) = &names[(t.sent as usize) % names.len()];
        id = id.wrapping_add(1);
        let mut m = query_msg(name, RecordType::A, Some(1232));
        m.metadata.id = id;
        sock.send(&m.to_vec().unwrap()).unwrap();
        t.sent += 1;
        let mut got = None;
        while let Ok(n) = sock.recv(&mut buf) {
            if let Ok(r) = Message::from_vec(&buf[..n])
                && r.metadata.id == id
            {
                got = Some(r);
                break;
            }
        }
        match got {
            None => t.timeouts += 1,
            Some(r) if r.metadata.response_code != ResponseCode::NoError => {
                t.bad_rcode += 1;
                if bad.len() < 5 {
                    bad.push(format!("{name}: {:?}", r.metadata.response_code));
                }
            }
            Some(r) if addrs(&r) != [want.clone()] => {
                t.wrong += 1;
                if bad.len() < 5 {
                    bad.push(format!("{name}: {:?}, want {want}", addrs(&r)));
                }
            }
            Some(_) => t.ok += 1,
        }
        let next = start + period * t.sent as u32;
        if let Some(d) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }
    (t, bad)
}

fn median(v: &[u64]) -> u64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v[v.len() / 2]
}

/// Least-squares slope of y over x.
fn slope(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let sxx: f64 = x.iter().map(|a| (a - mx) * (a - mx)).sum();
    if sxx == 0.0 { 0.0 } else { sxy / sxx }
}

/// No leak trend: samples are split in thirds (the first is warm-up); the
/// last third's median RSS may exceed the middle third's by at most
/// max(4 MiB, 5 %), and its largest fd count the middle third's by at most
/// 2. Every answer for a name of the untouched job is NOERROR with the pod's
/// IP; UDP timeouts on loopback at most 1 in 1,000.
// A minute long: opt-in (`cargo test --test integration -- --ignored soak`),
// which `.ci/run` runs by name after the README's test command.
#[ignore = "60 s soak; .ci/run runs it by name"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_60s_no_leak_trend_and_correct_answers() {
    let secs: u64 = std::env::var("PODNS_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let shutdown = CancellationToken::new();
    let (sim, _dir, kc) = sim_with_kubeconfig(&["--kubelet"], &shutdown).await;
    let client = sim.client();
    create_job(&client, "default", "steady", 200, "indexed-job").await;
    create_job(&client, "default", "churn", 100, "indexed-job").await;
    let mut cmd = serve_command(&kc, &["--udp-sockets=1"]);
    // mimalloc returns freed pages at least 1 s after the free, when it is
    // next busy: at this size (≈ 60 MiB) that moved RSS by 5-9 MiB between
    // samples, with or without a leak, and failed the check below now and
    // then. Purging at once makes RSS follow what is live, which is what a
    // leak changes.
    cmd.env("MIMALLOC_PURGE_DELAY", "0");
    let podns = spawn_serve(cmd);
    wait_for("podns ready", Duration::from_secs(60), || async {
        admin_get(podns.admin, "/readyz").await.0 == 200
    })
    .await;

    // The untouched job's names and the IPs the API says they have.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let want = wait_for("the steady pods' IPs", Duration::from_secs(30), || async {
        let lp = ListParams::default().labels("job-name=steady");
        let mut want: HashMap<String, String> = HashMap::new();
        for p in pods.list(&lp).await.unwrap().items {
            let spec = p.spec.unwrap_or_default();
            let ip = p.status.and_then(|s| s.pod_ip);
            if let (Some(h), Some(ip)) = (spec.hostname, ip) {
                want.insert(fqdn(&format!("{h}.steady.default.svc")), ip);
            }
        }
        if want.len() >= 200 {
            Ok(want)
        } else {
            Err(format!("{} of 200 with IPs", want.len()))
        }
    })
    .await;
    let names: Vec<(String, String)> = want.into_iter().collect();
    for (n, _) in &names {
        wait_resolves(podns.dns, n, Duration::from_secs(30)).await;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let until = Instant::now() + Duration::from_secs(secs + 30);
    let loader = {
        let (dns, stop, names) = (podns.dns, stop.clone(), names.clone());
        std::thread::spawn(move || load(dns, names, stop, until))
    };
    let start = Instant::now();
    let (mut ts, mut rss, mut fds) = (Vec::new(), Vec::new(), Vec::new());
    let mut restarts = 0;
    while start.elapsed() < Duration::from_secs(secs) {
        // Churn: every pod of `churn` deleted and recreated with a new IP.
        sim_post(&client, "/sim/jobs/default/churn/restart", json!({})).await;
        restarts += 1;
        let (r, f) = rss_kb_and_fds(podns.pid()).expect("podns is running");
        ts.push(start.elapsed().as_secs_f64());
        rss.push(r);
        fds.push(f as u64);
        let next = start + Duration::from_secs(ts.len() as u64);
        tokio::time::sleep(next.saturating_duration_since(Instant::now())).await;
    }
    stop.store(true, Ordering::Relaxed);
    let (tally, bad) = loader.join().unwrap();

    let n = rss.len();
    assert!(n >= 9, "{n} samples");
    let (mid, last) = (&rss[n / 3..2 * n / 3], &rss[2 * n / 3..]);
    let (mid_fd, last_fd) = (&fds[n / 3..2 * n / 3], &fds[2 * n / 3..]);
    let rss_f: Vec<f64> = rss.iter().map(|&r| r as f64 / 1024.0).collect();
    let fds_f: Vec<f64> = fds.iter().map(|&f| f as f64).collect();
    eprintln!(
        "soak {secs}s: {restarts} restarts of 100 pods; {tally:?}; RSS MiB median thirds {:.1} {:.1} {:.1}, \
         slope {:.3} MiB/min; fds {:?}..{:?}, slope {:.3}/min",
        median(&rss[..n / 3]) as f64 / 1024.0,
        median(mid) as f64 / 1024.0,
        median(last) as f64 / 1024.0,
        slope(&ts, &rss_f) * 60.0,
        fds.first(),
        fds.last(),
        slope(&ts, &fds_f) * 60.0,
    );
    assert!(tally.sent > QPS * secs / 4, "load too low: {tally:?}");
    assert_eq!(tally.wrong, 0, "wrong answers: {bad:?}");
    assert_eq!(tally.bad_rcode, 0, "not NOERROR: {bad:?}");
    assert!(tally.timeouts * 1000 <= tally.sent, "{tally:?}");
    let allowed = (median(mid) / 20).max(4096);
    assert!(
        median(last) <= median(mid) + allowed,
        "RSS grows: middle third median {} kB, last {} kB (allowed +{allowed} kB)",
        median(mid),
        median(last)
    );
    let (mf, lf) = (
        *mid_fd.iter().max().unwrap(),
        *last_fd.iter().max().unwrap(),
    );
    assert!(lf <= mf + 2, "fds grow: {mf} -> {lf}");
    shutdown.cancel();
}
