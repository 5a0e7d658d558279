//! A watch the API server accepts and never feeds (a deaf watch), found
//! by `--watch-probe-interval`'s probe, against the real binary and
//! `podns sim` (`POST /sim/faults/deaf-watches`).

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::rr::RecordType;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::*;

/// The value of each line of `metrics` that starts with `series` and
/// has every label in `labels`, summed; `None` if there is no such line.
fn sample(metrics: &str, series: &str, labels: &[&str]) -> Option<f64> {
    let values: Vec<f64> = metrics
        .lines()
        .filter(|l| l.starts_with(series) && labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

async fn metrics(admin: SocketAddr) -> String {
    admin_get(admin, "/metrics").await.1
}

/// podns's first watch of pods after its list (a streaming list: its
/// initial events and their end bookmark come, then nothing) is deaf,
/// and bookmarks are rarer than the test, so nothing but a probe can tell
/// it from a quiet kind. A pod created after podns is ready answers within
/// a few probe intervals: a probe from the watch's resourceVersion finds
/// the change, the watch is reopened from that resourceVersion (restart
/// reason `deaf`, a resume, nothing listed again) and the history brings
/// the pod. Without the probe (today's main, or `--watch-probe-interval=0`)
/// the watch stays open and silent until its `timeoutSeconds` (290 s) and
/// the name is NXDOMAIN all along. The quiet watches are proved current by
/// their probes (`podns_index_staleness_seconds` stays within a few
/// intervals) and none of them is taken for deaf.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_deaf_watch_is_found_by_a_probe_and_resumed() {
    const PROBE: Duration = Duration::from_secs(1);
    let shutdown = CancellationToken::new();
    let (sim, _dir, kubeconfig) =
        sim_with_kubeconfig(&["--bookmark-interval=3600"], &shutdown).await;
    let client = sim.client();
    sim_post(
        &client,
        "/sim/faults/deaf-watches?resource=pods&count=1",
        json!({}),
    )
    .await;
    let podns = spawn_serve(serve_command(&kubeconfig, &["--watch-probe-interval=1s"]));
    wait_for("podns ready", Duration::from_secs(30), || async {
        admin_get(podns.admin, "/readyz").await.0 == 200
    })
    .await;

    let mut body = pod_json("ml", "deaf-0-x", json!({"app": "deaf"}));
    body["spec"]["hostname"] = json!("deaf-0");
    body["spec"]["subdomain"] = json!("deaf");
    create_pod(&client, body).await;
    set_status(&client, "ml", "deaf-0-x", &["10.244.9.9"], true).await;
    let written = std::time::Instant::now();
    // Probe interval + the probe (its timeoutSeconds) + the grace + the
    // resume's backoff is about 4 s; twice that, and a margin for a
    // loaded machine.
    wait_for("the pod answers", PROBE * 12, || async {
        addrs(&ask(podns.dns, "deaf-0.deaf.ml.svc", RecordType::A).await) == ["10.244.9.9"]
    })
    .await;
    eprintln!("answered {:?} after its IP was written", written.elapsed());

    let m = metrics(podns.admin).await;
    let restarts = |resource: &str, retry: &str| {
        sample(
            &m,
            "podns_watch_restarts_total",
            &[
                &format!(r#"resource="{resource}""#),
                r#"reason="deaf""#,
                &format!(r#"retry="{retry}""#),
            ],
        )
        .unwrap_or_else(|| panic!("no deaf restarts of {resource} counted: {m}"))
    };
    assert!(restarts("pods", "resume") >= 1.0, "{m}");
    assert_eq!(restarts("pods", "relist"), 0.0, "{m}");
    // The quiet kinds: probed, found current, never reopened.
    for r in [
        "services",
        "jobs",
        "endpointslices",
        "nodes",
        "servicecidrs",
    ] {
        assert_eq!(
            restarts(r, "resume") + restarts(r, "relist"),
            0.0,
            "{r}: {m}"
        );
    }
    let current = |resource: &str| {
        sample(
            &m,
            "podns_watch_probes_total",
            &[&format!(r#"resource="{resource}""#), r#"result="current""#],
        )
        .unwrap_or(0.0)
    };
    assert!(current("services") >= 1.0, "{m}");
    assert!(
        sample(
            &m,
            "podns_watch_probes_total",
            &[r#"resource="pods""#, r#"result="missed""#]
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{m}"
    );
    // Every watch, the quiet ones too, proved current within a few
    // intervals: the probe interval, the probe's second, a margin.
    for r in ["pods", "services"] {
        let s = sample(
            &m,
            "podns_index_staleness_seconds",
            &[&format!(r#"resource="{r}""#)],
        )
        .unwrap_or_else(|| panic!("no staleness of {r}: {m}"));
        assert!(s < 5.0, "{r} stale for {s} s: {m}");
    }
    let (code, ready) = admin_get(podns.admin, "/readyz").await;
    assert_eq!(code, 200, "{ready}");
    assert!(ready.contains("staleness "), "{ready}");
    assert!(ready.contains("pods "), "{ready}");
    let log = podns.log_text();
    assert!(
        log.contains("reason=\"deaf\"") || log.contains("reason=deaf"),
        "{log}"
    );
}
