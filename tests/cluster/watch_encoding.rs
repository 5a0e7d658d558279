//! The watch stream's encoding on the real API server. From Kubernetes
//! 1.37 (WatchListCompression, beta and on by default) a streaming list
//! (`sendInitialEvents`) asked with `Accept-Encoding: gzip` comes back
//! gzip with one member per flush (the initial events together, then each
//! later event or burst alone), which broke watchers that asked for gzip
//! and decoded the first member only (kube-rs#2079). podns asks every
//! watch for `identity`: its streams are plain on every release, and its
//! streaming list syncs and follows a new pod on each.

use std::process::Command;

use crate::support::*;

/// A streaming list of `ns`'s ConfigMaps, with ConfigMap `then` created
/// once the initial events came, read until `done` holds for the body:
/// the response headers (lowercase) and the body as sent.
fn stream(
    c: &Cluster,
    ns: &str,
    accept_encoding: &str,
    then: &str,
    done: impl Fn(&[u8]) -> bool,
) -> (String, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let (headers, body) = (dir.path().join("headers"), dir.path().join("body"));
    let pki = c.dir.join("pki");
    let url = format!(
        "{}/api/v1/namespaces/{ns}/configmaps?watch=1&sendInitialEvents=true\
         &resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=120",
        c.env["APISERVER_URL"]
    );
    let mut curl = Command::new("curl")
        .args(["-sS", "--max-time", "120", "-N", "-D"])
        .arg(&headers)
        .arg("-o")
        .arg(&body)
        .arg("--cacert")
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .args(["-H", &format!("Accept-Encoding: {accept_encoding}"), &url])
        .spawn()
        .unwrap();
    let read = || std::fs::read(&body).unwrap_or_default();
    wait_for("the initial events", secs(20), || {
        (!read().is_empty()).then_some(())
    });
    c.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {then}, namespace: {ns}}}\n"
    ));
    wait_for(&format!("{then}'s event"), secs(30), || {
        done(&read()).then_some(())
    });
    let _ = curl.kill();
    let _ = curl.wait();
    (
        std::fs::read_to_string(headers).unwrap().to_lowercase(),
        read(),
    )
}

/// The gzip members of `body`, each inflated, by Python's zlib (which
/// reads one member at a time and leaves the rest as `unused_data`).
fn gzip_members(body: &[u8]) -> Option<Vec<String>> {
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import json, sys, zlib\n\
             data, out = sys.stdin.buffer.read(), []\n\
             while data:\n\
             \x20   d = zlib.decompressobj(wbits=31)\n\
             \x20   out.append(d.decompress(data).decode())\n\
             \x20   assert d.eof, 'a truncated member'\n\
             \x20   data = d.unused_data\n\
             print(json.dumps(out))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), body).unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn streaming_lists_are_gzip_only_when_asked_and_podns_asks_identity() {
    let c = cluster();
    let ns = c.namespace("watch-encoding");
    let ns = ns.name.as_str();
    let names = ["a", "b", "c"];
    for n in names {
        c.apply(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {n}, namespace: {ns}}}\n"
        ));
    }
    let compressed = c.k8s_minor() >= 37;

    // Asked for gzip: from 1.37, one gzip member per flush (the initial
    // events, sent at once, in the first; the ConfigMap made afterwards in
    // a later member, which need not be the last: a bookmark or the
    // namespace's kube-root-ca.crt may follow it); before, plain.
    let has = |text: &str, name: &str| text.contains(&format!(r#""name":"{name}""#));
    let (headers, body) = stream(&c, ns, "gzip", "d", |b| {
        if compressed {
            gzip_members(b).is_some_and(|m| m.iter().any(|t| has(t, "d")))
        } else {
            has(&String::from_utf8_lossy(b), "d")
        }
    });
    assert_eq!(
        headers.contains("content-encoding: gzip"),
        compressed,
        "{headers}"
    );
    let events: Vec<String> = if compressed {
        let members = gzip_members(&body).unwrap();
        assert!(
            members.len() >= 2 && !has(&members[0], "d"),
            "the later event in a member of its own: {members:#?}"
        );
        members
    } else {
        vec![String::from_utf8(body).unwrap()]
    };
    let text = events.concat();
    for n in names.iter().chain(&["d"]) {
        assert!(has(&text, n), "{text}");
    }
    assert!(text.contains("k8s.io/initial-events-end"), "{text}");

    // What podns asks: identity, plain on every release.
    let (headers, body) = stream(&c, ns, "identity", "e", |b| {
        has(&String::from_utf8_lossy(b), "e")
    });
    assert!(!headers.contains("content-encoding"), "{headers}");
    let text = String::from_utf8(body).expect("a plain stream");
    assert!(has(&text, "a") && has(&text, "e"), "{text}");

    // podns's own streaming list against this server: it syncs, answers
    // the pods there, and follows a pod created afterwards.
    let live = crate::records::train(&c, ns, 2);
    let p = Podns::ready(&c.kubeconfig, &["--streaming-list=on"]);
    for (name, ip) in &live {
        p.wait_addrs(&format!("{name}.train.{ns}.svc"), &[ip.clone()], secs(10));
    }
    c.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: late, namespace: {ns}, labels: {{app: train}}}}\n\
         spec: {{hostname: late, subdomain: train, containers: [{{name: worker, image: fake}}]}}\n"
    ));
    let ip = c
        .pod_ips(ns, "app=train", 3)
        .into_iter()
        .find(|(n, _)| n == "late")
        .unwrap()
        .1;
    p.wait_addrs(&format!("late.train.{ns}.svc"), &[ip], secs(30));
    assert_eq!(
        p.metric(r#"podns_watch_restarts_total{resource="pods""#),
        0.0,
        "the watch never restarted: {}",
        p.log_text()
    );
}
