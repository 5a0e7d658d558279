//! The simulated workload (kubelet, jobs, restarts, churn, scenario
//! files) and injected faults with their stats.

use std::time::Duration;

use podns_sim::{SimArgs, spawn};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::support::*;

#[tokio::test]
async fn kubelet_jobs_restart_and_churn() {
    let sim = start(SimArgs {
        kubelet: true,
        pod_cidr_v6: Some("fd00:10:244::/64".into()),
        ready_delay_ms: 20,
        jobs: 1,
        ranks: 3,
        ..SimArgs::default()
    })
    .await;
    let addr = sim.addr;
    let r = post_json(
        addr,
        "/sim/jobs",
        &json!({"namespace": "ml", "name": "llm", "ranks": 4, "kind": "jobset"}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let svc = get(addr, "/api/v1/namespaces/ml/services/llm").await.json();
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(svc["spec"]["publishNotReadyAddresses"], true);
    let ready = |p: &Value| {
        p["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
    };
    let pods = wait_for("4 ready pods", DEADLINE, || async {
        let l = get(addr, "/api/v1/namespaces/ml/pods").await.json();
        let items = l["items"].as_array().unwrap().clone();
        (items.len() == 4 && items.iter().all(ready)).then_some(items)
    })
    .await;
    let mut old_ips = Vec::new();
    for p in &pods {
        let ip: std::net::Ipv4Addr = p["status"]["podIP"].as_str().unwrap().parse().unwrap();
        assert_eq!(ip.octets()[..2], [10, 244], "{ip}");
        let ips = p["status"]["podIPs"].as_array().unwrap();
        assert_eq!(ips.len(), 2);
        assert!(ips[1]["ip"].as_str().unwrap().starts_with("fd00:10:244::"));
        assert_eq!(ips[0]["ip"], p["status"]["podIP"]);
        assert_eq!(p["status"]["phase"], "Running");
        assert!(!p["spec"]["nodeName"].as_str().unwrap().is_empty());
        let idx = p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
            .as_str()
            .unwrap();
        // The Job controller names the host after the JobSet's child Job.
        assert_eq!(p["spec"]["hostname"], format!("llm-workers-0-{idx}"));
        assert_eq!(p["spec"]["subdomain"], "llm");
        assert_eq!(
            p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"],
            "llm"
        );
        assert_eq!(
            p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"],
            idx
        );
        let size = serde_json::to_vec(p).unwrap().len();
        assert!((5000..=9000).contains(&size), "running pod is {size} bytes");
        old_ips.push(p["status"]["podIP"].as_str().unwrap().to_string());
    }
    // The Job controller's status counts the pods as they start and turn
    // ready (written within a second of a change; `ready` is not there
    // before the first write).
    let job = "/apis/batch/v1/namespaces/ml/jobs/llm-workers-0";
    wait_for(
        "the Job's status counting 4 ready pods",
        DEADLINE,
        || async {
            let j = get(addr, job).await.json();
            (j["status"]["active"] == 4 && j["status"]["ready"] == 4).then_some(())
        },
    )
    .await;
    // The start-up job.
    let l = get(
        addr,
        "/api/v1/namespaces/default/pods?labelSelector=job-name%3Dtrain-0",
    )
    .await
    .json();
    assert_eq!(l["items"].as_array().unwrap().len(), 3);

    // Gang restart: same hostnames, new names and IPs.
    let r = post_json(addr, "/sim/jobs/ml/llm/restart", &json!({})).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let new = wait_for("restarted pods ready", DEADLINE, || async {
        let l = get(addr, "/api/v1/namespaces/ml/pods").await.json();
        let items = l["items"].as_array().unwrap().clone();
        (items.len() == 4 && items.iter().all(ready)).then_some(items)
    })
    .await;
    wait_for(
        "the Job's status counting the restarted pods",
        DEADLINE,
        || async {
            let j = get(addr, job).await.json();
            let s = &j["status"];
            (s["active"] == 4 && s["ready"] == 4 && s["terminating"] == 0).then_some(())
        },
    )
    .await;
    let mut hosts: Vec<String> = new
        .iter()
        .map(|p| p["spec"]["hostname"].as_str().unwrap().to_string())
        .collect();
    hosts.sort();
    assert_eq!(
        hosts,
        [
            "llm-workers-0-0",
            "llm-workers-0-1",
            "llm-workers-0-2",
            "llm-workers-0-3"
        ]
    );
    for p in &new {
        assert!(!old_ips.contains(&p["status"]["podIP"].as_str().unwrap().to_string()));
        assert!(
            !pods
                .iter()
                .any(|o| o["metadata"]["name"] == p["metadata"]["name"])
        );
        assert_eq!(
            p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"],
            "1"
        );
    }
    assert_eq!(
        post_json(addr, "/sim/jobs/ml/nope/restart", &json!({}))
            .await
            .status,
        404
    );

    // Churn: bounded replacement; the pod count stays the same.
    let before = get(addr, "/sim/stats").await.json()["pod_mutations"]
        .as_u64()
        .unwrap();
    let r = post_json(addr, "/sim/churn", &json!({"rate": 50, "seconds": 0.2})).await;
    assert_eq!(r.status, 200);
    wait_for("churn mutations", DEADLINE, || async {
        let s = get(addr, "/sim/stats").await.json();
        (s["pod_mutations"].as_u64().unwrap() >= before + 10 * 2).then_some(())
    })
    .await;
    wait_for("pods replaced and ready", DEADLINE, || async {
        let l = get(addr, "/api/v1/pods").await.json();
        let items = l["items"].as_array().unwrap().clone();
        (items.len() == 7 && items.iter().all(ready)).then_some(())
    })
    .await;
    assert_eq!(
        post_json(addr, "/sim/churn", &json!({"rate": -1, "seconds": 1}))
            .await
            .status,
        400
    );
    assert_eq!(
        post_json(addr, "/sim/jobs", &json!({"name": "x", "kind": "bogus"}))
            .await
            .status,
        400
    );
}

#[tokio::test]
async fn scenario_file_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.yaml");
    std::fs::write(
        &path,
        "- apiVersion: v1\n  kind: Service\n  metadata: {name: web, namespace: shop}\n  spec: {clusterIP: None, selector: {app: web}}\n\
         - apiVersion: v1\n  kind: Pod\n  metadata: {name: web-0, namespace: shop, labels: {app: web}}\n  spec: {hostname: web-0, subdomain: web, containers: [{name: c, image: i}]}\n",
    )
    .unwrap();
    let sim = start(SimArgs {
        scenario: Some(path),
        ..SimArgs::default()
    })
    .await;
    assert_eq!(
        get(sim.addr, "/api/v1/namespaces/shop/pods/web-0")
            .await
            .status,
        200
    );
    assert_eq!(
        get(sim.addr, "/api/v1/namespaces/shop/services/web")
            .await
            .json()["spec"]["clusterIP"],
        "None"
    );
    let bad = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bad.path(), "{{{").unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let args = SimArgs {
        scenario: Some(bad.path().to_path_buf()),
        ..SimArgs::default()
    };
    assert!(
        spawn(args, listener, CancellationToken::new())
            .await
            .is_err()
    );
}

// ---------------------------------------------------------------- faults

#[tokio::test]
async fn faults_and_stats() {
    let sim = start_default().await;
    let addr = sim.addr;
    // Drop watches: an open watch ends.
    let mut w = RawWatch::open(addr, "/api/v1/pods?watch=1&resourceVersion=0").await;
    wait_for("watch counted", DEADLINE, || async {
        (get(addr, "/sim/stats").await.json()["open_watches"] == 1).then_some(())
    })
    .await;
    post_json(addr, "/sim/faults/drop-watches", &json!({})).await;
    assert!(w.next().await.is_none());
    wait_for("watch closed", DEADLINE, || async {
        (get(addr, "/sim/stats").await.json()["open_watches"] == 0).then_some(())
    })
    .await;

    assert_eq!(
        post_json(addr, "/sim/faults/throttle?seconds=30", &json!({}))
            .await
            .status,
        200
    );
    let r = get(addr, "/api/v1/pods").await;
    assert_eq!(r.status, 429);
    assert!(r.header("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
    let s = r.json();
    assert_eq!(s["reason"], "TooManyRequests");
    assert!(s["details"]["retryAfterSeconds"].as_u64().unwrap() >= 1);
    post_json(addr, "/sim/faults/clear", &json!({})).await;

    assert_eq!(
        post_json(addr, "/sim/faults/outage?seconds=30", &json!({}))
            .await
            .status,
        200
    );
    let r = get(addr, "/api/v1/pods").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["reason"], "ServiceUnavailable");
    // /sim/ stays reachable during an outage.
    assert_eq!(get(addr, "/sim/stats").await.status, 200);
    post_json(addr, "/sim/faults/clear", &json!({})).await;

    post_json(addr, "/sim/faults/latency?ms=50&seconds=30", &json!({})).await;
    let t = Instant::now();
    assert_eq!(get(addr, "/api/v1/pods").await.status, 200);
    assert!(t.elapsed() >= Duration::from_millis(50));
    post_json(addr, "/sim/faults/clear", &json!({})).await;
    assert_eq!(
        post_json(addr, "/sim/faults/outage", &json!({}))
            .await
            .status,
        400
    );

    // Stats: by verb and resource; bytes of a watch event are counted.
    post_json(addr, "/sim/stats/reset", &json!({})).await;
    let mut w = RawWatch::open(addr, "/api/v1/pods?watch=1").await;
    let p = create_pod(addr, "default", "p", json!({})).await;
    w.until(|e| ev(e).1 == "p").await;
    let s = wait_for("event counted", DEADLINE, || async {
        let s = get(addr, "/sim/stats").await.json();
        (s["watch_events_sent"] == 1).then_some(s)
    })
    .await;
    assert_eq!(s["requests"]["watch"]["pods"], 1);
    assert_eq!(s["requests"]["create"]["pods"], 1);
    let line = serde_json::to_vec(&json!({"type": "ADDED", "object": p}))
        .unwrap()
        .len() as u64
        + 1;
    assert_eq!(s["watch_bytes_sent"], line);
    assert!(s["bytes_sent"].as_u64().unwrap() >= line);
    assert_eq!(s["objects"]["pods"], 1);
}
