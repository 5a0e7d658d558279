//! `podns zonefile` against a simulated 1,000-pod cluster: the export equals
//! the live index, loads in kzonecheck and nsd-checkzone, and NSD serving it
//! answers every name exactly as podns does.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{Name, RecordType};
use serde_json::json;

use crate::daemons::{answer_lines, ask_full, find_tool, free_port, nsd};
use crate::support::*;

const ZONE_FILES: [&str; 3] = ["cluster.local.zone", "in-addr.arpa.zone", "ip6.arpa.zone"];

/// Run the binary as a user would: `podns zonefile --out-dir DIR`.
async fn export(kubeconfig: &Path, dir: &Path) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_podns"))
        .args([
            "zonefile",
            "--reverse",
            "--serial=1",
            "--ns-address=127.0.0.1",
        ])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--out-dir")
        .arg(dir)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .expect("podns zonefile runs");
    assert!(
        out.status.success(),
        "podns zonefile failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (owner, type) of every RRset in a zone text written by podns.
fn rrsets(text: &str) -> BTreeSet<(String, String)> {
    let mut origin = String::new();
    let mut out = BTreeSet::new();
    for l in text.lines() {
        if let Some(o) = l.strip_prefix("$ORIGIN ") {
            origin = o.to_string();
            continue;
        }
        if l.starts_with(';') || l.starts_with('$') || l.is_empty() {
            continue;
        }
        let f: Vec<&str> = l.split('\t').collect();
        let owner = match f[0] {
            "@" => origin.clone(),
            o => format!("{o}.{origin}"),
        };
        out.insert((owner, f[3].to_string()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1000_pod_export_loads_in_nsd_and_knot_and_answers_like_podns() {
    let env = env(
        &[
            "--kubelet",
            "--jobs=2",
            "--ranks=500",
            "--pod-cidr-v6=fd00:10::/64",
        ],
        // `zonefile --reverse` exports the whole reverse trees, which is
        // what podns answers when it owns every reverse name.
        &["--ns-address=127.0.0.1", "--reverse-cidr=0.0.0.0/0,::/0"],
    )
    .await;
    create_service(
        &env.client,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api", "namespace": "web"},
               "spec": {"selector": {"app": "api"}, "ports": [
                   {"name": "http", "port": 80, "targetPort": 8080},
                   {"name": "dns", "port": 53, "protocol": "UDP"}]}}),
    )
    .await;
    create_external_name(&env.client, "web", "ext", "storage.example.com").await;
    create_external_name(&env.client, "web", "alias", "api.web.svc.cluster.local").await;

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, env.sim.kubeconfig_yaml()).unwrap();
    let out = dir.path().join("zones");

    // The export must equal the live index rendered the same way; the
    // simulated kubelets may still be writing, so export until both agree.
    let table = env.server.as_ref().unwrap().table.clone();
    let cfg = podns_server::zonefile::RenderConfig {
        ttl: podns_server::dns::DEFAULT_TTL,
        negative_ttl: podns_server::dns::DEFAULT_NEGATIVE_TTL,
        ns_addrs: vec!["127.0.0.1".parse().unwrap()],
        reverse: true,
        serial: Some(1),
    };
    let zones = [Name::from_ascii("cluster.local.").unwrap()];
    wait_for(
        "the export to match the live index",
        Duration::from_secs(20),
        || async {
            export(&kubeconfig, &out).await;
            let live = podns_server::zonefile::render_zones(&table.snapshot(), &zones, &cfg);
            live.iter().all(|z| {
                std::fs::read_to_string(out.join(z.file_name()))
                    .ok()
                    .as_deref()
                    == Some(&z.text)
            })
        },
    )
    .await;
    let forward = std::fs::read_to_string(out.join(ZONE_FILES[0])).unwrap();
    assert!(
        forward.matches("\tA\t10.").count() >= 3000,
        "1,000 pods × (hostname, pod, per-Service names)"
    );
    assert!(forward.contains("ext.web.svc\t5\tIN\tCNAME\tstorage.example.com.\n"));

    let mut checked_by = vec![];
    if let Some(kzonecheck) = find_tool("kzonecheck") {
        for file in ZONE_FILES {
            let origin = file.trim_end_matches("zone");
            output_ok(
                std::process::Command::new(&kzonecheck)
                    .args(["-o", origin])
                    .arg(out.join(file)),
                &format!("kzonecheck {file}"),
            );
        }
        checked_by.push("kzonecheck");
    }
    let Some(nsd_checkzone) = find_tool("nsd-checkzone") else {
        eprintln!("zones checked by {checked_by:?} only");
        need("nsd-checkzone (the NSD comparison)", false);
        return;
    };
    for file in ZONE_FILES {
        let origin = file.trim_end_matches(".zone");
        output_ok(
            std::process::Command::new(&nsd_checkzone)
                .arg(origin)
                .arg(out.join(file)),
            &format!("nsd-checkzone {file}"),
        );
    }
    let nsd_bin = find_tool("nsd").expect("nsd beside nsd-checkzone");

    let port = free_port();
    let nsd_addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let zone_list: Vec<(String, String)> = ZONE_FILES
        .iter()
        .map(|f| (f.trim_end_matches(".zone").to_string(), f.to_string()))
        .collect();
    let mut daemon = nsd(&nsd_bin, &out, port, &zone_list);
    daemon
        .wait_answering(nsd_addr, "cluster.local.", RecordType::SOA)
        .await;

    // Every RRset of every zone, plus the CNAME owners asked for A (both
    // chase in-zone targets) and a few negatives.
    let mut questions: Vec<(String, RecordType, bool)> = Vec::new();
    for file in ZONE_FILES {
        let text = std::fs::read_to_string(out.join(file)).unwrap();
        for (owner, rtype) in rrsets(&text) {
            if rtype == "SOA" {
                continue; // serial: podns's index generation vs the export's 1
            }
            let t: RecordType = rtype.parse().unwrap();
            if t == RecordType::CNAME {
                questions.push((owner.clone(), RecordType::A, true));
            }
            questions.push((owner, t, true));
        }
    }
    let n_rrsets = questions.len();
    questions.push((fqdn("nope.default.svc"), RecordType::A, false));
    questions.push((fqdn("train-0.default.svc"), RecordType::TXT, false));
    questions.push((fqdn("default.svc"), RecordType::A, false));
    questions.push(("9.9.9.9.in-addr.arpa.".into(), RecordType::PTR, false));
    assert!(n_rrsets > 5000, "only {n_rrsets} RRsets");

    let (podns_addr, differ) = (env.dns, std::sync::Mutex::new(Vec::new()));
    futures::stream::iter(questions)
        .for_each_concurrent(32, |(name, qtype, has_data)| {
            let differ = &differ;
            async move {
                let a = ask_full(podns_addr, &name, qtype).await;
                let b = ask_full(nsd_addr, &name, qtype).await;
                let (ra, rb) = (a.metadata.response_code, b.metadata.response_code);
                let (la, lb) = (answer_lines(&a), answer_lines(&b));
                let data_ok = has_data == (ra == ResponseCode::NoError && !la.is_empty());
                if ra != rb || la != lb || !a.metadata.authoritative || !data_ok {
                    differ.lock().unwrap().push(format!(
                        "{name} {qtype}: podns {ra} {la:?} / nsd {rb} {lb:?}"
                    ));
                }
            }
        })
        .await;
    let differ = differ.into_inner().unwrap();
    assert!(
        differ.is_empty(),
        "{} of {n_rrsets} differ, e.g.:\n{}",
        differ.len(),
        differ[..differ.len().min(10)].join("\n")
    );
    // Both servers really ran: NSD logged its zones.
    assert!(
        std::fs::read_to_string(out.join("nsd.log"))
            .unwrap_or_default()
            .contains("zone cluster.local read with success"),
        "{}",
        daemon.log_text()
    );
}

/// `podns zonefile --kubeconfig K ARGS…` as a user runs it.
async fn zonefile(kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_podns"))
        .arg("zonefile")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("POD_IP")
        .output()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdout_has_one_marked_section_per_zone_and_bad_flags_exit_64() {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (_sim, _dir, kubeconfig) =
        sim_with_kubeconfig(&["--kubelet", "--jobs=1", "--ranks=4"], &shutdown).await;
    let both = ["--reverse", "--zone=cluster.local,example.org"];
    let a = zonefile(&kubeconfig, &both).await;
    let b = zonefile(&kubeconfig, &both).await;
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    // No --ns-address: the zone lacks glue, and one line says so.
    let warned = String::from_utf8_lossy(&a.stderr);
    assert_eq!(
        warned
            .lines()
            .filter(|l| l.contains("no --ns-address") && l.contains("kzonecheck"))
            .count(),
        1,
        "{warned}"
    );
    let glued = zonefile(&kubeconfig, &["--ns-address=127.0.0.1"]).await;
    assert!(glued.status.success());
    assert!(glued.stderr.is_empty(), "{glued:?}");
    assert_eq!(a.stdout, b.stdout, "same state, same bytes");
    let text = String::from_utf8(a.stdout).unwrap();
    let sections: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix(podns_server::zonefile::SECTION_MARKER))
        .collect();
    assert_eq!(
        sections,
        [
            "cluster.local.",
            "example.org.",
            "in-addr.arpa.",
            "ip6.arpa."
        ]
    );
    assert!(text.contains("train-0-3.train-0.default.svc\t5\tIN\tA\t"));

    let only = zonefile(&kubeconfig, &["--reverse", "--reverse-only"]).await;
    let only = String::from_utf8(only.stdout).unwrap();
    assert!(only.starts_with("; podns zone in-addr.arpa.\n"));
    assert!(!only.contains("$ORIGIN cluster.local."));

    for bad in [
        &["--ttl=soon"][..],
        &["--reverse-only"],
        &["--zone=10.in-addr.arpa"],
    ] {
        let o = zonefile(&kubeconfig, bad).await;
        assert_eq!(o.status.code(), Some(64), "{bad:?}: {o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(o.stdout.is_empty());
    }
    shutdown.cancel();
}
