//! The abuse a public DNS port gets: slowloris TCP clients, more
//! connections than the cap, long-lived connections, and questions about
//! names podns does not serve (it must never act as an open resolver).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures::future::join_all;
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

const T: Duration = Duration::from_secs(20);

async fn connect(addr: SocketAddr) -> TcpStream {
    tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
        .await
        .expect("tcp connect in time")
        .expect("tcp connect")
}

/// Did the server close `s` (EOF or reset) within `limit`?
async fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let mut b = [0u8; 1];
    match tokio::time::timeout(limit, s.read(&mut b)).await {
        Ok(Ok(0)) | Ok(Err(_)) => true,
        Ok(Ok(_)) => panic!("the server sent bytes nobody asked for"),
        Err(_) => false,
    }
}

/// The zone's SOA, a name that always exists.
async fn apex_answers_udp(dns: SocketAddr) -> bool {
    let m = udp(
        dns,
        &query_msg("cluster.local.", RecordType::SOA, Some(1232)),
    )
    .await;
    rcode(&m) == ResponseCode::NoError && !m.answers.is_empty()
}

async fn apex_answers_tcp(dns: SocketAddr) -> bool {
    let m = tcp(dns, &query_msg("cluster.local.", RecordType::SOA, None)).await;
    rcode(&m) == ResponseCode::NoError && !m.answers.is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_and_connections_past_the_cap_do_not_starve_queries() {
    const CAP: usize = 300;
    const IDLE: Duration = Duration::from_secs(3);
    let env = env(
        &[],
        &[
            "--tcp-max-connections=300",
            "--tcp-idle-timeout=3s",
            "--tcp-max-queries=1000",
        ],
    )
    .await;
    let dns = env.dns;

    // 250 connections that send nothing, and 10 that announce a 64-byte
    // query and then trickle it a byte a second (bounded: 5 bytes).
    let started = Instant::now();
    let mut idle: Vec<TcpStream> = join_all((0..250).map(|_| connect(dns))).await;
    let trickle: Vec<_> = (0..10)
        .map(|_| {
            tokio::spawn(async move {
                let mut s = connect(dns).await;
                let _ = s.write_all(&[0, 64]).await;
                for _ in 0..5 {
                    if s.write_all(&[0]).await.is_err() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                // The server must close it once the idle timeout has passed,
                // trickling or not.
                closed_within(&mut s, IDLE + Duration::from_secs(5)).await
            })
        })
        .collect();

    // Meanwhile, normal queries answer over both transports.
    for _ in 0..5 {
        assert!(apex_answers_udp(dns).await, "udp answers under slowloris");
        assert!(apex_answers_tcp(dns).await, "tcp answers under slowloris");
    }

    // 100 more: the server is now past its cap, so some of these are
    // accepted and closed at once, and the rest are held.
    let mut more: Vec<TcpStream> = join_all((0..100).map(|_| connect(dns))).await;
    let closed = join_all(
        more.iter_mut()
            .map(|s| closed_within(s, Duration::from_millis(500))),
    )
    .await;
    let refused = closed.iter().filter(|c| **c).count();
    assert!(
        refused >= 100 + 250 + 10 - CAP,
        "{refused} of 100 connections past the cap were closed"
    );
    assert!(refused < 100, "connections under the cap were served");
    let (_, metrics) = admin_get(env.admin, "/metrics").await;
    let counted: usize = metrics
        .lines()
        .find_map(|l| l.strip_prefix("podns_dns_tcp_connections_refused_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(counted >= refused, "metric {counted} < {refused} refused");
    // The slowloris load has not touched UDP.
    assert!(
        apex_answers_udp(dns).await,
        "udp answers with tcp at its cap"
    );
    assert!(
        started.elapsed() < IDLE,
        "test too slow to check the cap before the idle timeout"
    );

    // The idle timeout frees every slot: idle and trickling clients are closed.
    let closed = join_all(
        idle.iter_mut()
            .map(|s| closed_within(s, IDLE + Duration::from_secs(5))),
    )
    .await;
    assert!(
        closed.iter().all(|c| *c),
        "every idle connection was closed"
    );
    for t in trickle {
        assert!(t.await.unwrap(), "a trickling connection was closed");
    }
    drop(more);
    wait_for("tcp answers again", T, || apex_answers_tcp(dns)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_connection_is_closed_after_max_queries() {
    let env = env(&[], &["--tcp-max-queries=5"]).await;
    let mut s = connect(env.dns).await;
    let q = query_msg("cluster.local.", RecordType::SOA, None)
        .to_vec()
        .unwrap();
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    // Pipelined: six queries in one write, five answers, then EOF.
    let six: Vec<u8> = framed.repeat(6);
    s.write_all(&six).await.unwrap();
    for i in 0..5 {
        let mut len = [0u8; 2];
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut len))
            .await
            .expect("answer in time")
            .unwrap_or_else(|e| panic!("answer {i}: {e}"));
        let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
        s.read_exact(&mut buf).await.unwrap();
        let m = hickory_proto::op::Message::from_vec(&buf).unwrap();
        assert_eq!(rcode(&m), ResponseCode::NoError);
    }
    assert!(closed_within(&mut s, Duration::from_secs(5)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_outside_the_zones_are_refused_and_any_is_minimal() {
    let env = env(&[], &[]).await;
    // Never an open resolver: whatever is asked outside the zones, with
    // recursion desired or not, over either transport.
    for name in [
        "example.com.",
        ".",
        "com.",
        "local.",
        "xcluster.local.",
        "cluster.local.example.com.",
        "kubernetes.default.svc.cluster.local.evil.test.",
    ] {
        for qtype in [RecordType::A, RecordType::NS, RecordType::ANY] {
            let mut q = query_msg(name, qtype, Some(1232));
            q.metadata.recursion_desired = true;
            for m in [udp(env.dns, &q).await, tcp(env.dns, &q).await] {
                assert_eq!(rcode(&m), ResponseCode::Refused, "{name} {qtype}");
                assert!(m.answers.is_empty() && m.authorities.is_empty(), "{name}");
                assert!(!m.metadata.recursion_available, "{name}");
            }
        }
    }

    // ANY (RFC 8482): one record set, not every record of the name.
    let mut body = pod_json("ml", "trainer-0-abcde", json!({"app": "trainer"}));
    body["spec"]["hostname"] = json!("trainer-0");
    body["spec"]["subdomain"] = json!("trainer");
    create_pod(&env.client, body).await;
    create_service(&env.client, headless_json("ml", "trainer", "trainer")).await;
    set_status(
        &env.client,
        "ml",
        "trainer-0-abcde",
        &["10.244.7.7", "fd00::7"],
        true,
    )
    .await;
    wait_for("pod answers", T, || async {
        addrs(&ask(env.dns, "trainer-0.trainer.ml.svc", RecordType::AAAA).await) == ["fd00::7"]
    })
    .await;
    for name in [
        "cluster.local.",
        "trainer.ml.svc.cluster.local.",
        "trainer-0.trainer.ml.svc.cluster.local.",
    ] {
        let m = udp(env.dns, &query_msg(name, RecordType::ANY, Some(1232))).await;
        assert_eq!(rcode(&m), ResponseCode::NoError, "{name}");
        assert!(!m.answers.is_empty(), "{name} ANY answers something");
        let types: std::collections::BTreeSet<_> =
            m.answers.iter().map(|r| r.record_type()).collect();
        // Addresses may come as A and AAAA together; never SOA+NS+SRV+TXT.
        assert!(
            types.len() == 1
                || types
                    .iter()
                    .all(|t| matches!(t, RecordType::A | RecordType::AAAA)),
            "{name} ANY gave {types:?}"
        );
        assert!(
            !m.answers.iter().any(|r| matches!(r.data, RData::SRV(_))),
            "{name} ANY lists SRV"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rrl_limits_udp_responses_per_client_prefix() {
    let env = env(&[], &["--rrl=5"]).await;
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let q = query_msg("cluster.local.", RecordType::SOA, Some(1232));
    let bytes = q.to_vec().unwrap();
    for _ in 0..40 {
        sock.send_to(&bytes, env.dns).await.unwrap();
    }
    let (mut full, mut slipped) = (0, 0);
    let mut buf = vec![0u8; 4096];
    // Replies come at once; stop at the first half second without one.
    while let Ok(Ok((n, _))) =
        tokio::time::timeout(Duration::from_millis(500), sock.recv_from(&mut buf)).await
    {
        let m = hickory_proto::op::Message::from_vec(&buf[..n]).unwrap();
        if m.metadata.truncation {
            assert!(m.answers.is_empty(), "a slip carries the question only");
            slipped += 1;
        } else {
            assert!(!m.answers.is_empty());
            full += 1;
        }
    }
    // A burst of one second's worth (5), maybe a token refilled meanwhile.
    assert!((5..=7).contains(&full), "{full} full answers");
    assert!(slipped >= 10, "{slipped} slips");
    assert!(full + slipped < 40, "some responses were dropped");
    // TCP is not rate limited: a slipped client gets its answer there.
    assert!(apex_answers_tcp(env.dns).await);
    // Every withheld response is counted under its action (on the UDP
    // loop's cached counters), and only those.
    let (_, metrics) = admin_get(env.admin, "/metrics").await;
    let limited = |action: &str| -> usize {
        let series = format!("podns_dns_rate_limited_total{{action=\"{action}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series.as_str())?.parse().ok())
            .unwrap_or_else(|| panic!("{series} missing in\n{metrics}"))
    };
    assert_eq!(limited("slip"), slipped, "{metrics}");
    assert_eq!(limited("drop"), 40 - full - slipped, "{metrics}");
}
