//! End to end: pods and services written through the real API of
//! `podns sim`, watched by `podns serve`, asked over real UDP and TCP.

use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};
use serde_json::json;

use crate::support::*;

const T: Duration = Duration::from_secs(20);

async fn answers(env: &Env, name: &str, want: &[&str]) -> bool {
    let m = ask(env.dns, name, RecordType::A).await;
    addrs(&m) == want.iter().map(|s| s.to_string()).collect::<Vec<_>>()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_answers_once_its_ip_is_written() {
    let env = env(&[], &[]).await;
    let mut body = pod_json("ml", "trainer-0-abcde", json!({"app": "trainer"}));
    body["spec"]["hostname"] = json!("trainer-0");
    body["spec"]["subdomain"] = json!("trainer");
    create_pod(&env.client, body).await;
    create_service(&env.client, headless_json("ml", "trainer", "trainer")).await;
    let name = "trainer-0.trainer.ml.svc";
    // No IP yet: the name does not exist.
    wait_for("headless service visible", T, || async {
        rcode(&ask(env.dns, "trainer.ml.svc", RecordType::A).await) == ResponseCode::NoError
    })
    .await;
    assert_eq!(
        rcode(&ask(env.dns, name, RecordType::A).await),
        ResponseCode::NXDomain
    );
    set_status(&env.client, "ml", "trainer-0-abcde", &["10.244.7.7"], false).await;
    wait_for("pod answers", T, || answers(&env, name, &["10.244.7.7"])).await;

    // Case-insensitive, spelling kept.
    let m = ask(env.dns, "Trainer-0.TRAINER.ml.svc", RecordType::A).await;
    assert_eq!(addrs(&m), ["10.244.7.7"]);
    assert_eq!(
        m.answers[0].name.to_ascii(),
        "Trainer-0.TRAINER.ml.svc.cluster.local."
    );
    assert!(m.metadata.authoritative);
    // AAAA: NODATA with SOA.
    let m = ask(env.dns, name, RecordType::AAAA).await;
    assert_eq!(rcode(&m), ResponseCode::NoError);
    assert!(m.answers.is_empty() && matches!(m.authorities[0].data, RData::SOA(_)));
    // Headless set, dashed name, pod name, SRV with the container port and glue, PTR.
    assert!(answers(&env, "trainer.ml.svc", &["10.244.7.7"]).await);
    assert!(answers(&env, "10-244-7-7.trainer.ml.svc", &["10.244.7.7"]).await);
    assert!(answers(&env, "10-244-7-7.ml.pod", &["10.244.7.7"]).await);
    let m = ask(env.dns, "_nccl._tcp.trainer.ml.svc", RecordType::SRV).await;
    match &m.answers[0].data {
        RData::SRV(s) => {
            assert_eq!(s.port, 29500);
            assert_eq!(
                s.target.to_ascii(),
                "trainer-0.trainer.ml.svc.cluster.local."
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        m.additionals
            .iter()
            .any(|r| matches!(&r.data, RData::A(a) if a.0.to_string() == "10.244.7.7"))
    );
    let m = ask(env.dns, "7.7.244.10.in-addr.arpa.", RecordType::PTR).await;
    assert!(
        matches!(&m.answers[0].data, RData::PTR(p) if p.0.to_ascii() == "trainer-0.trainer.ml.svc.cluster.local.")
    );
    // Same over TCP.
    let m = tcp(env.dns, &query_msg(&fqdn(name), RecordType::A, None)).await;
    assert_eq!(addrs(&m), ["10.244.7.7"]);

    // Terminating: withdrawn at once (deletionTimestamp), then gone.
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(env.client.clone(), "ml");
    api.delete(
        "trainer-0-abcde",
        &kube::api::DeleteParams {
            grace_period_seconds: Some(30),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    wait_for("terminating pod withdrawn", T, || async {
        rcode(&ask(env.dns, name, RecordType::A).await) == ResponseCode::NXDomain
    })
    .await;
    let m = ask(env.dns, "7.7.244.10.in-addr.arpa.", RecordType::PTR).await;
    assert_eq!(rcode(&m), ResponseCode::NXDomain);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_of_every_kind() {
    let env = env(&[], &[]).await;
    create_service(
        &env.client,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api", "namespace": "web"},
               "spec": {"selector": {"app": "api"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
    )
    .await;
    create_external_name(&env.client, "web", "ext", "storage.example.com").await;
    wait_for("services visible", T, || async {
        rcode(&ask(env.dns, "ext.web.svc", RecordType::CNAME).await) == ResponseCode::NoError
    })
    .await;
    let m = ask(env.dns, "api.web.svc", RecordType::A).await;
    assert_eq!(
        m.answers.len(),
        1,
        "one ClusterIP allocated by the simulator: {m:?}"
    );
    let cluster_ip = addrs(&m)[0].clone();
    let m = ask(env.dns, "_http._tcp.api.web.svc", RecordType::SRV).await;
    assert!(matches!(&m.answers[0].data, RData::SRV(s) if s.port == 80));
    let m = ask(env.dns, "ext.web.svc", RecordType::A).await;
    assert!(
        matches!(&m.answers[0].data, RData::CNAME(c) if c.0.to_ascii() == "storage.example.com.")
    );
    let octets: Vec<&str> = cluster_ip.split('.').rev().collect();
    let m = ask(
        env.dns,
        &format!("{}.in-addr.arpa.", octets.join(".")),
        RecordType::PTR,
    )
    .await;
    assert!(
        matches!(&m.answers[0].data, RData::PTR(p) if p.0.to_ascii() == "api.web.svc.cluster.local.")
    );
    // Apex, version, out of zone, transfers.
    assert!(matches!(
        ask(env.dns, "cluster.local.", RecordType::SOA)
            .await
            .answers[0]
            .data,
        RData::SOA(_)
    ));
    let m = ask(env.dns, "dns-version", RecordType::TXT).await;
    assert!(matches!(&m.answers[0].data, RData::TXT(t) if t.to_string().contains("1.1.0")));
    assert_eq!(
        rcode(&ask(env.dns, "example.com.", RecordType::A).await),
        ResponseCode::Refused
    );
    assert_eq!(
        rcode(
            &tcp(
                env.dns,
                &query_msg("cluster.local.", RecordType::AXFR, None)
            )
            .await
        ),
        ResponseCode::Refused
    );
    assert_eq!(
        rcode(&ask(env.dns, "web.svc", RecordType::A).await),
        ResponseCode::NoError,
        "empty non-terminal"
    );
    assert_eq!(
        rcode(&ask(env.dns, "nope.web.svc", RecordType::A).await),
        ResponseCode::NXDomain
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_300_pod_headless_set_is_cut_to_whole_records_over_udp_and_comes_whole_over_tcp() {
    let env = env(&["--kubelet"], &[]).await;
    create_job(&env.client, "big", "gang", 300, "indexed-job").await;
    wait_for("300 ranks published", Duration::from_secs(60), || async {
        let m = tcp(
            env.dns,
            &query_msg(&fqdn("gang.big.svc"), RecordType::A, None),
        )
        .await;
        m.answers.len() == 300
    })
    .await;
    let all = tcp(
        env.dns,
        &query_msg(&fqdn("gang.big.svc"), RecordType::A, Some(1232)),
    )
    .await;
    assert!(!all.metadata.truncation);
    assert_eq!(all.answers.len(), 300);
    // Over UDP, TC=1 and as many whole records as fit (RFC 2181 §9), the
    // first of the set: 12 bytes of header and 32 of question, 16 a
    // record, so 29 in 512 bytes (what musl before 1.2.4, which never
    // retries over TCP, gets), 73 in 1232 beside the OPT.
    let m = udp(
        env.dns,
        &query_msg(&fqdn("gang.big.svc"), RecordType::A, None),
    )
    .await;
    assert!(m.metadata.truncation, "TC=1 past 512 bytes");
    assert_eq!(m.answers.len(), (512 - 44) / 16);
    assert_eq!(m.answers[..], all.answers[..m.answers.len()]);
    let m = udp(
        env.dns,
        &query_msg(&fqdn("gang.big.svc"), RecordType::A, Some(1232)),
    )
    .await;
    assert!(m.metadata.truncation, "TC=1 past 1232 bytes");
    assert!(m.edns.is_some(), "EDNS echoed");
    assert_eq!(m.answers.len(), (1232 - 11 - 44) / 16);
    assert_eq!(m.answers[..], all.answers[..m.answers.len()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servfail_and_not_ready_until_the_api_answers() {
    // An API server address where nothing listens.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = dead.local_addr().unwrap();
    drop(dead);
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let args = serve_args(&[]);
    let listeners =
        podns_server::serve::Listeners::bind(args.dns_listen, args.udp_sockets, args.admin_listen)
            .unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = podns_server::serve::start(&args, client, listeners, shutdown.clone());
    let m = ask(running.dns_addr, "x.ml.svc", RecordType::A).await;
    assert_eq!(rcode(&m), ResponseCode::ServFail);
    assert_eq!(
        rcode(&ask(running.dns_addr, "example.com.", RecordType::A).await),
        ResponseCode::Refused
    );
    let (status, body) = admin_get(running.admin_addr, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(admin_get(running.admin_addr, "/healthz").await.0, 200);
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_readiness_after_sync() {
    let env = env(&[], &[]).await;
    let _ = ask(env.dns, "nothing.svc", RecordType::A).await;
    assert_eq!(admin_get(env.admin, "/readyz").await.0, 200);
    let (status, body) = admin_get(env.admin, "/metrics").await;
    assert_eq!(status, 200);
    for m in [
        "podns_dns_requests_total",
        "podns_dns_responses_total",
        "podns_dns_request_duration_seconds",
        "podns_index_pods",
        "podns_watch_synced",
        "podns_propagation_seconds",
    ] {
        assert!(body.contains(m), "{m} missing in\n{body}");
    }
    assert!(body.contains("rcode=\"NXDOMAIN\""), "{body}");
    // Counted per query, on the cached counters of the UDP loops.
    let nx = |body: &str| -> u64 {
        body.lines()
            .find(|l| l.starts_with("podns_dns_responses_total{rcode=\"NXDOMAIN\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    let before = nx(&body);
    for _ in 0..3 {
        let _ = ask(env.dns, "nothing.svc", RecordType::A).await;
    }
    let (_, body) = admin_get(env.admin, "/metrics").await;
    assert_eq!(nx(&body), before + 3, "{body}");
}

/// The value of one series (`name{labels}` exactly as exposed) in an
/// OpenMetrics text body.
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_duration_counts_every_query_of_every_loop() {
    const H: &str = "podns_dns_request_duration_seconds";
    let env = env(&[], &[]).await;
    let scrape = || async {
        let (status, body) = admin_get(env.admin, "/metrics").await;
        assert_eq!(status, 200);
        let count = sample(&body, &format!("{H}_count")).unwrap_or_else(|| panic!("{body}"));
        let inf = sample(&body, &format!("{H}_bucket{{le=\"+Inf\"}}"))
            .unwrap_or_else(|| panic!("{body}"));
        let sum = sample(&body, &format!("{H}_sum")).unwrap_or_else(|| panic!("{body}"));
        assert_eq!(count, inf, "_count and the +Inf bucket agree\n{body}");
        (count, sum)
    };
    let (count0, sum0) = scrape().await;
    // UDP from a fresh socket each time, so the kernel spreads them over
    // both UDP loops (--udp-sockets=2); TCP on a connection each, so each
    // query is recorded by a loop that has ended by the next scrape.
    const UDP: usize = 24;
    const TCP: usize = 6;
    for i in 0..UDP {
        let m = ask(env.dns, &format!("q{i}.nothing.svc"), RecordType::A).await;
        assert_eq!(rcode(&m), ResponseCode::NXDomain);
    }
    for i in 0..TCP {
        let q = query_msg(&fqdn(&format!("t{i}.nothing.svc")), RecordType::A, None);
        assert_eq!(rcode(&tcp(env.dns, &q).await), ResponseCode::NXDomain);
    }
    let (count1, sum1) = scrape().await;
    assert_eq!(count1, count0 + (UDP + TCP) as f64);
    assert!(sum1 > sum0, "sum {sum0} -> {sum1}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_hostnames_answer_one_pod_through_a_restart_overlap() {
    let env = env(&[], &[]).await;
    let mk = |name: &str| {
        let mut b = pod_json("ml", name, json!({"app": "w"}));
        b["spec"]["hostname"] = json!("w-0");
        b["spec"]["subdomain"] = json!("w");
        b
    };
    create_pod(&env.client, mk("w-0-old")).await;
    set_status(&env.client, "ml", "w-0-old", &["10.244.1.1"], true).await;
    wait_for("old answers", T, || {
        answers(&env, "w-0.w.ml.svc", &["10.244.1.1"])
    })
    .await;
    // The replacement appears before the old one is gone: one answer, the Ready one.
    create_pod(&env.client, mk("w-0-new")).await;
    set_status(&env.client, "ml", "w-0-new", &["10.244.1.2"], false).await;
    wait_for("new pod indexed", T, || async {
        rcode(&ask(env.dns, "10-244-1-2.ml.pod", RecordType::A).await) == ResponseCode::NoError
    })
    .await;
    for _ in 0..20 {
        assert!(
            answers(&env, "w-0.w.ml.svc", &["10.244.1.1"]).await,
            "never alternates"
        );
    }
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(env.client.clone(), "ml");
    api.delete("w-0-old", &Default::default()).await.unwrap();
    wait_for("new answers", T, || {
        answers(&env, "w-0.w.ml.svc", &["10.244.1.2"])
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_packets_to_the_socket_never_stop_the_server() {
    let env = env(&[], &[]).await;
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let seed = query_msg("x.ml.svc.cluster.local.", RecordType::A, Some(1232))
        .to_vec()
        .unwrap();
    let mut x: u64 = 0x2545F4914F6CDD1D;
    for i in 0..5000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut b = if i % 2 == 0 {
            seed.clone()
        } else {
            x.to_le_bytes().repeat((x % 8) as usize)
        };
        if !b.is_empty() {
            let at = (x as usize) % b.len();
            b[at] ^= (x >> 8) as u8;
        }
        sock.send_to(&b, env.dns).await.unwrap();
    }
    // Still answering, over both transports.
    assert_eq!(
        rcode(&ask(env.dns, "cluster.local.", RecordType::SOA).await),
        ResponseCode::NoError
    );
    assert_eq!(
        rcode(&tcp(env.dns, &query_msg("cluster.local.", RecordType::SOA, None)).await),
        ResponseCode::NoError
    );
}

/// Names of live pods keep answering, with the right address, while the
/// simulator drops watches, forgets history (410) and goes down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_faults_never_cost_a_live_name() {
    let env = env(&["--kubelet"], &[]).await;
    create_job(&env.client, "ft", "job", 8, "jobset").await;
    let names: Vec<String> = (0..8)
        .map(|i| format!("job-workers-0-{i}.job.ft.svc"))
        .collect();
    let expect = wait_all_resolve(env.dns, &names, T).await;
    let check = |phase: &'static str| {
        let names = names.clone();
        let expect = expect.clone();
        let dns = env.dns;
        async move {
            for (n, want) in names.iter().zip(&expect) {
                let m = ask(dns, n, RecordType::A).await;
                assert_eq!(rcode(&m), ResponseCode::NoError, "{phase}: {n}");
                assert_eq!(&addrs(&m), want, "{phase}: {n}");
            }
        }
    };
    sim_post(&env.client, "/sim/faults/drop-watches", json!({})).await;
    check("after drop").await;
    sim_post(&env.client, "/sim/faults/compact", json!({})).await;
    sim_post(&env.client, "/sim/faults/drop-watches", json!({})).await;
    check("after compaction").await;
    sim_post(&env.client, "/sim/faults/outage?seconds=2", json!({})).await;
    for _ in 0..10 {
        check("during outage").await;
    }
    // After the outage a new pod still gets through: the watch recovered.
    create_job(&env.client, "ft", "late", 1, "indexed-job").await;
    wait_resolves(env.dns, "late-0.late.ft.svc", Duration::from_secs(60)).await;
    check("after recovery").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_stack_pods_answer_a_and_aaaa_and_ip6_ptr() {
    // The IPv6 pod range is on the simulator's Node too: podns owns its
    // reverse zone.
    let env = env(&["--pod-cidr-v6=fd00:10:244::/64"], &[]).await;
    let mut body = pod_json("ml", "ds-0-x", json!({"app": "ds"}));
    body["spec"]["hostname"] = json!("ds-0");
    body["spec"]["subdomain"] = json!("ds");
    create_pod(&env.client, body).await;
    set_status(
        &env.client,
        "ml",
        "ds-0-x",
        &["10.244.3.3", "fd00:10:244::3"],
        true,
    )
    .await;
    wait_for("dual-stack pod answers", T, || {
        answers(&env, "ds-0.ds.ml.svc", &["10.244.3.3"])
    })
    .await;
    let m = ask(env.dns, "ds-0.ds.ml.svc", RecordType::AAAA).await;
    assert_eq!(addrs(&m), ["fd00:10:244::3"]);
    let m = ask(env.dns, "fd00-10-244--3.ml.pod", RecordType::AAAA).await;
    assert_eq!(addrs(&m), ["fd00:10:244::3"]);
    let ip6: std::net::IpAddr = "fd00:10:244::3".parse().unwrap();
    let m = ask(
        env.dns,
        &format!("{}.", podns_server::index::names::reverse(ip6)),
        RecordType::PTR,
    )
    .await;
    assert!(
        matches!(&m.answers[0].data, RData::PTR(p) if p.0.to_ascii() == "ds-0.ds.ml.svc.cluster.local.")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_ready_and_hostnames_service_policies() {
    let env = env(&[], &["--publish=ready", "--hostnames=service"]).await;
    for (name, host) in [("a-0-x", "a-0"), ("a-1-x", "a-1")] {
        let mut body = pod_json("pol", name, json!({"app": "a"}));
        body["spec"]["hostname"] = json!(host);
        body["spec"]["subdomain"] = json!("a");
        create_pod(&env.client, body).await;
    }
    set_status(&env.client, "pol", "a-0-x", &["10.244.5.1"], true).await;
    set_status(&env.client, "pol", "a-1-x", &["10.244.5.2"], false).await;
    wait_for("pods indexed", T, || {
        answers(&env, "10-244-5-1.pol.pod", &["10.244.5.1"])
    })
    .await;
    // --hostnames service: no headless Service named like the subdomain, no name.
    assert_eq!(
        rcode(&ask(env.dns, "a-0.a.pol.svc", RecordType::A).await),
        ResponseCode::NXDomain
    );
    let mut svc = headless_json("pol", "a", "a");
    svc["spec"]["publishNotReadyAddresses"] = json!(false);
    create_service(&env.client, svc).await;
    wait_for("hostname name once the Service exists", T, || {
        answers(&env, "a-0.a.pol.svc", &["10.244.5.1"])
    })
    .await;
    // --publish ready: the not-Ready pod is left out of the set and has no
    // name (the set is the Service's and both pods' latest writes, which
    // may land in any order on a loaded machine).
    wait_for("the set of the Ready pod only", T, || {
        answers(&env, "a.pol.svc", &["10.244.5.1"])
    })
    .await;
    assert_eq!(
        rcode(&ask(env.dns, "a-1.a.pol.svc", RecordType::A).await),
        ResponseCode::NXDomain
    );
    set_status(&env.client, "pol", "a-1-x", &["10.244.5.2"], true).await;
    wait_for("ready pod joins", T, || {
        answers(&env, "a.pol.svc", &["10.244.5.1", "10.244.5.2"])
    })
    .await;
}

/// A JobSet-style gang restart: every rank's pod is replaced with a new IP.
/// While it happens a rank name answers its old IP, nothing, or its new IP,
/// never another rank's; once converged, only new IPs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_restart_converges_to_new_ips_without_cross_talk() {
    let env = env(&["--kubelet", "--default-grace=1"], &[]).await;
    let ranks = 16;
    sim_post(
        &env.client,
        "/sim/jobs",
        json!({"namespace": "gr", "name": "g", "ranks": ranks, "kind": "jobset"}),
    )
    .await;
    let names: Vec<String> = (0..ranks)
        .map(|i| format!("g-workers-0-{i}.g.gr.svc"))
        .collect();
    let old = wait_all_resolve(env.dns, &names, T).await;
    sim_post(&env.client, "/sim/jobs/gr/g/restart", json!({})).await;
    let all_old: std::collections::HashSet<String> = old.iter().flatten().cloned().collect();
    wait_for(
        "the restart to converge",
        Duration::from_secs(30),
        || async {
            let mut converged = true;
            for (i, n) in names.iter().enumerate() {
                let got = addrs(&ask(env.dns, n, RecordType::A).await);
                assert!(got.len() <= 1, "one answer per rank: {n} {got:?}");
                match got.first() {
                    Some(ip) if *ip == old[i][0] => converged = false,
                    Some(ip) => assert!(
                        !all_old.contains(ip),
                        "{n} answered another rank's old IP {ip}"
                    ),
                    None => converged = false,
                }
            }
            converged
        },
    )
    .await;
    // Converged: every rank has a new IP, stable over repeated asks.
    for (i, n) in names.iter().enumerate() {
        for _ in 0..3 {
            let got = addrs(&ask(env.dns, n, RecordType::A).await);
            assert_eq!(got.len(), 1);
            assert_ne!(got, old[i], "{n} still answers the old IP");
        }
    }
}

/// API requests so far, not counting the simulator's own /sim/ endpoints.
async fn api_requests(client: &kube::Client) -> u64 {
    let stats = sim_get(client, "/sim/stats").await;
    let mut n = 0;
    for (verb, by_resource) in stats["requests"].as_object().unwrap() {
        if verb == "sim" {
            continue;
        }
        n += by_resource
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum::<u64>();
    }
    n
}

/// A throttled API server (429 + Retry-After) is waited for, not hammered,
/// and names keep answering meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_is_waited_out_as_retry_after_says() {
    let env = env(&["--kubelet"], &[]).await;
    create_job(&env.client, "th", "t", 2, "indexed-job").await;
    wait_resolves(env.dns, "t-1.t.th.svc", T).await;
    let before = api_requests(&env.client).await;
    sim_post(&env.client, "/sim/faults/throttle?seconds=6", json!({})).await;
    sim_post(&env.client, "/sim/faults/drop-watches", json!({})).await;
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(4) {
        assert_eq!(
            ask(env.dns, "t-1.t.th.svc", RecordType::A)
                .await
                .answers
                .len(),
            1,
            "answers during throttling"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let during = api_requests(&env.client).await - before;
    // Six watches (pods, services, jobs, endpointslices, and nodes and
    // servicecidrs for the reverse zones), each told to come back in 5-6 s:
    // one try each within these 4 s. Backoff alone (0.8 s, 1.6 s, …) would
    // make three each.
    assert!(
        during <= 6,
        "{during} API requests during 4 s of throttling"
    );
    create_job(&env.client, "th", "after", 1, "indexed-job").await;
    wait_resolves(env.dns, "after-0.after.th.svc", Duration::from_secs(30)).await;
}

/// A watch the server keeps open but stops feeding, no event and no
/// bookmark, is reopened from its resourceVersion after
/// `--watch-progress-timeout`: a pod created meanwhile answers within
/// seconds, not after the watch's own timeout (290 s), and nothing is
/// listed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watch_is_reopened_where_it_was() {
    // Bookmarks rarer than the test: a watch moves only by its events.
    let env = env(
        &["--kubelet", "--bookmark-interval=3600"],
        &["--watch-progress-timeout=3s"],
    )
    .await;
    create_job(&env.client, "st", "before", 1, "indexed-job").await;
    wait_resolves(env.dns, "before-0.before.st.svc", T).await;
    let restarts = |metrics: &str, retry: &str| -> u64 {
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("podns_watch_restarts_total")
                    && l.contains(r#"reason="stalled""#)
                    && l.contains(&format!(r#"retry="{retry}""#))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let before = admin_get(env.admin, "/metrics").await.1;
    assert_eq!(restarts(&before, "resume"), 0, "{before}");
    let stalled = std::time::Instant::now();
    sim_post(&env.client, "/sim/faults/stall-watches", json!({})).await;
    create_job(&env.client, "st", "after", 1, "indexed-job").await;
    wait_resolves(env.dns, "after-0.after.st.svc", Duration::from_secs(30)).await;
    eprintln!("answered {:?} after the stall", stalled.elapsed());
    let metrics = admin_get(env.admin, "/metrics").await.1;
    assert!(restarts(&metrics, "resume") > 0, "{metrics}");
    assert_eq!(restarts(&metrics, "relist"), 0, "{metrics}");
    // A watch whose kind never changed since its list was silent as long
    // (stalled too, and past the deadline) and is not reopened: silence
    // alone is how the API server treats a kind nobody changes.
    let of = |resource: &str, what: &str| -> u64 {
        metrics
            .lines()
            .filter(|l| l.contains(&format!(r#"resource="{resource}""#)) && l.contains(what))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let quiet: Vec<&str> = [
        "services",
        "jobs",
        "endpointslices",
        "nodes",
        "servicecidrs",
    ]
    .into_iter()
    .filter(|r| {
        metrics.contains(&format!(
            r#"podns_watch_events_total{{resource="{r}",event="init_done"}}"#
        )) && of(r, r#"event="apply""#) + of(r, r#"event="delete""#) == 0
    })
    .collect();
    assert!(!quiet.is_empty(), "no watch without changes: {metrics}");
    for r in quiet {
        assert_eq!(of(r, r#"reason="stalled""#), 0, "{r} reopened: {metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_and_label_scopes_limit_the_pod_watch() {
    let env = env(&[], &["--namespace=in", "--label-selector=dns=yes"]).await;
    for (ns, name, label, ip) in [
        ("in", "a", "yes", "10.244.8.1"),
        ("in", "b", "no", "10.244.8.2"),
        ("out", "c", "yes", "10.244.8.3"),
    ] {
        create_pod(&env.client, pod_json(ns, name, json!({"dns": label}))).await;
        set_status(&env.client, ns, name, &[ip], true).await;
    }
    wait_for("in-scope pod", T, || {
        answers(&env, "10-244-8-1.in.pod", &["10.244.8.1"])
    })
    .await;
    assert_eq!(
        rcode(&ask(env.dns, "10-244-8-2.in.pod", RecordType::A).await),
        ResponseCode::NXDomain
    );
    assert_eq!(
        rcode(&ask(env.dns, "10-244-8-3.out.pod", RecordType::A).await),
        ResponseCode::NXDomain
    );
}

/// EDNS as dig speaks it (RFC 6891, RFC 3225), against a running server,
/// on the fast path (A, NXDOMAIN) and the general path (ANY, REFUSED):
/// version 1 gets BADVERS with the question echoed and an OPT of version
/// 0 (dig itself checks that a reply answers the question asked);
/// `+dnssec` gets `do` back; other flags and options are not echoed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dig_sees_badvers_for_edns_1_and_its_do_bit_copied() {
    if !need_cmd("dig") {
        return;
    }
    let env = env(&[], &[]).await;
    let mut body = pod_json("ml", "e-0-x", json!({"app": "e"}));
    body["spec"]["hostname"] = json!("e-0");
    body["spec"]["subdomain"] = json!("e");
    create_pod(&env.client, body).await;
    create_service(&env.client, headless_json("ml", "e", "e")).await;
    set_status(&env.client, "ml", "e-0-x", &["10.244.6.6"], true).await;
    wait_for("pod answers", T, || {
        answers(&env, "e-0.e.ml.svc", &["10.244.6.6"])
    })
    .await;
    let dig = |args: &str| {
        let cmd = format!(
            "dig @{} -p {} +time=2 +tries=2 +norec {args}",
            env.dns.ip(),
            env.dns.port()
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{cmd}: {text}");
        (cmd, text)
    };
    // The line after ";; QUESTION SECTION:", as words.
    let question = |text: &str| -> Vec<String> {
        let mut lines = text.lines().skip_while(|l| *l != ";; QUESTION SECTION:");
        lines
            .nth(1)
            .map(|l| l.split_whitespace().map(String::from).collect())
            .unwrap_or_default()
    };
    let questions = [
        ("e-0.e.ml.svc.cluster.local", "A", "NOERROR"),
        ("nobody.e.ml.svc.cluster.local", "A", "NXDOMAIN"),
        ("e.ml.svc.cluster.local", "ANY", "NOERROR"),
        ("example.com", "A", "REFUSED"),
    ];
    for (name, qtype, status) in questions {
        for extra in ["", "+dnssec", "+tcp +dnssec"] {
            let (cmd, text) = dig(&format!("+edns=1 +noednsneg {extra} {name} {qtype}"));
            assert!(text.contains("status: BADVERS"), "{cmd}:\n{text}");
            assert!(text.contains("QUERY: 1, ANSWER: 0"), "{cmd}:\n{text}");
            assert_eq!(
                question(&text),
                [format!(";{name}."), "IN".into(), qtype.into()],
                "{cmd}:\n{text}"
            );
            let opt = if extra.contains("dnssec") {
                "; EDNS: version: 0, flags: do; udp: 1232"
            } else {
                "; EDNS: version: 0, flags:; udp: 1232"
            };
            assert!(text.contains(opt), "{cmd}:\n{text}");
        }
        // DO set is copied; DO clear stays clear.
        for (extra, flags) in [("+dnssec ", "flags: do;"), ("", "flags:;")] {
            let (cmd, text) = dig(&format!("{extra}{name} {qtype}"));
            assert!(
                text.contains(&format!("status: {status}")),
                "{cmd}:\n{text}"
            );
            assert!(
                text.contains(&format!("; EDNS: version: 0, {flags} udp: 1232")),
                "{cmd}:\n{text}"
            );
        }
        // Options (NSID, a cookie, a private code) and unknown flags: the
        // same answer, nothing of them echoed.
        let (cmd, text) = dig(&format!(
            "+nsid +cookie +ednsopt=65001:abcdef +ednsflags=0x4000 {name} {qtype}"
        ));
        assert!(
            text.contains(&format!("status: {status}")),
            "{cmd}:\n{text}"
        );
        assert!(
            text.contains("; EDNS: version: 0, flags:; udp: 1232"),
            "{cmd}:\n{text}"
        );
        let opt = text
            .split(";; OPT PSEUDOSECTION:\n")
            .nth(1)
            .and_then(|t| t.split(";; QUESTION SECTION:").next())
            .unwrap_or_default();
        assert_eq!(
            opt.trim(),
            "; EDNS: version: 0, flags:; udp: 1232",
            "nothing echoed: {cmd}:\n{text}"
        );
    }
}
