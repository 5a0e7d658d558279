//! Truncated UDP answers against CoreDNS's: podns's zone, rendered from its
//! live index as `podns zonefile` writes it, served by CoreDNS's `file`
//! plugin (built from source, see `coredns.rs`), and the same questions
//! asked of both over UDP at the sizes clients use. A set too big for the
//! client's size comes back with TC=1 and as many whole records as fit
//! (RFC 2181 §9), and both servers must keep the same number of them:
//! CoreDNS cuts with miekg/dns `Msg.Truncate`, podns with `Plan::cut`.
//!
//! One difference is by design: when an SRV answer fits but its glue does
//! not, podns leaves the glue out with TC clear (RFC 2181 §9: not for
//! additional data), where CoreDNS sets TC.

use std::net::SocketAddr;
use std::process::Command;

use hickory_proto::op::Message;
use hickory_proto::rr::{Name, RData, RecordType};

use crate::coredns::coredns;
use crate::daemons::{Daemon, free_port};
use crate::support::*;

const T: std::time::Duration = std::time::Duration::from_secs(60);

fn srvs(m: &Message) -> usize {
    m.answers
        .iter()
        .filter(|r| matches!(r.data, RData::SRV(_)))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_answers_keep_as_many_records_as_coredns_does() {
    let bin = match coredns() {
        Ok(bin) => bin,
        Err(why) => {
            eprintln!("skipping: {why}");
            return;
        }
    };
    let env = env(
        &["--kubelet", "--pod-cidr-v6=fd00:10::/64"],
        &["--ns-address=127.0.0.1"],
    )
    .await;
    create_job(&env.client, "big", "gang", 300, "indexed-job").await;
    create_job(&env.client, "big", "small", 20, "indexed-job").await;
    wait_for("both sets published, dual-stack", T, || async {
        let n = |name: &str, t| {
            let q = query_msg(&fqdn(name), t, None);
            async move { tcp(env.dns, &q).await.answers.len() }
        };
        n("gang.big.svc", RecordType::AAAA).await == 300
            && n("small.big.svc", RecordType::AAAA).await == 20
    })
    .await;

    // The zone as `podns zonefile` writes it, from the same index.
    let table = env.server.as_ref().unwrap().table.clone();
    let cfg = podns_server::zonefile::RenderConfig {
        ttl: podns_server::dns::DEFAULT_TTL,
        negative_ttl: podns_server::dns::DEFAULT_NEGATIVE_TTL,
        ns_addrs: vec!["127.0.0.1".parse().unwrap()],
        reverse: false,
        serial: Some(1),
    };
    let zones = [Name::from_ascii("cluster.local.").unwrap()];
    let rendered = podns_server::zonefile::render_zones(&table.snapshot(), &zones, &cfg);
    let dir = tempfile::tempdir().unwrap();
    let zone = dir.path().join("cluster.local.zone");
    std::fs::write(&zone, &rendered[0].text).unwrap();
    let port = free_port();
    let conf = dir.path().join("Corefile");
    std::fs::write(
        &conf,
        format!(
            "cluster.local.:{port} {{\n    bind 127.0.0.1\n    file {}\n}}\n",
            zone.display()
        ),
    )
    .unwrap();
    let mut daemon = Daemon::spawn(
        "coredns",
        Command::new(&bin).arg("-conf").arg(&conf),
        &dir.path().join("coredns.out"),
    );
    let core: SocketAddr = ([127, 0, 0, 1], port).into();
    daemon
        .wait_answering(core, &fqdn("gang-0.gang.big.svc"), RecordType::A)
        .await;

    // Without EDNS (512 bytes, as musl asks), at EDNS sizes up to
    // podns's 1232 (CoreDNS takes larger ones at their word).
    let sizes = [None, Some(512), Some(800), Some(1232)];
    let mut seen = vec![];
    let mut glue_only = 0;
    for (name, qtype) in [
        ("gang.big.svc", RecordType::A),
        ("gang.big.svc", RecordType::AAAA),
        ("small.big.svc", RecordType::AAAA),
        ("_nccl._tcp.gang.big.svc", RecordType::SRV),
        ("_nccl._tcp.small.big.svc", RecordType::SRV),
    ] {
        for size in sizes {
            let q = query_msg(&fqdn(name), qtype, size);
            let ours = udp(env.dns, &q).await;
            let theirs = udp(core, &q).await;
            let line = format!(
                "{name} {qtype} {size:?}: podns {} records{}, CoreDNS {}{}",
                ours.answers.len(),
                if ours.metadata.truncation { " TC" } else { "" },
                theirs.answers.len(),
                if theirs.metadata.truncation {
                    " TC"
                } else {
                    ""
                },
            );
            eprintln!("{line}");
            assert_eq!(
                ours.answers.len(),
                theirs.answers.len(),
                "{line}\n{}",
                daemon.log_text()
            );
            if qtype == RecordType::SRV && !ours.metadata.truncation {
                // Every SRV record fits: podns leaves out glue whole, TC
                // clear; CoreDNS may have set TC for the glue it left out.
                assert_eq!(srvs(&ours), srvs(&theirs), "{line}");
                if theirs.metadata.truncation {
                    assert!(ours.additionals.len() < 20, "{line}");
                    glue_only += 1;
                }
            } else {
                assert_eq!(
                    ours.metadata.truncation, theirs.metadata.truncation,
                    "{line}"
                );
            }
            seen.push((name, qtype, size, ours.answers.len()));
        }
    }
    // What a 512-byte client (musl) gets of the 300-member set: 29
    // addresses, where an empty TC=1 gave it none.
    assert!(seen.contains(&("gang.big.svc", RecordType::A, None, 29)));
    // The 20 SRV records of `small` fit 1232 bytes, their glue does not.
    assert_eq!(glue_only, 1, "{seen:?}");
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "coredns still up"
    );
}
