//! The watch stream's encoding on the real API server. From Kubernetes
//! 1.37 (WatchListCompression, beta and on by default) a streaming list
//! (`sendInitialEvents`) asked with `Accept-Encoding: gzip` comes back
//! gzip with one member per event, which broke watchers that asked for
//! gzip and decoded the first member only (kube-rs#2079). podns asks every
//! watch for `identity`: its streams are plain on every release, and its
//! streaming list syncs and follows a new pod on each.

use std::process::Command;

use crate::support::*;

/// A streaming list of `ns`'s ConfigMaps, ended by the server after 2 s:
/// the response headers (lowercase) and the body as sent.
fn stream(c: &Cluster, ns: &str, accept_encoding: &str) -> (String, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let (headers, body) = (dir.path().join("headers"), dir.path().join("body"));
    let pki = c.dir.join("pki");
    let url = format!(
        "{}/api/v1/namespaces/{ns}/configmaps?watch=1&sendInitialEvents=true\
         &resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=2",
        c.env["APISERVER_URL"]
    );
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-D"])
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
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        std::fs::read_to_string(headers).unwrap().to_lowercase(),
        std::fs::read(body).unwrap(),
    )
}

/// The gzip members of `body`, each inflated, by Python's zlib (which
/// reads one member at a time and leaves the rest as `unused_data`).
fn gzip_members(body: &[u8]) -> Vec<String> {
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
    assert!(out.status.success(), "not gzip members");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn streaming_lists_are_gzip_only_when_asked_and_podns_asks_identity() {
    let Some(c) = cluster() else { return };
    let _g = shared();
    let ns = c.namespace("watch-encoding");
    let ns = ns.name.as_str();
    let names = ["a", "b", "c"];
    for n in names {
        c.apply(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {n}, namespace: {ns}}}\n"
        ));
    }
    let compressed = c.k8s_minor() >= 37;

    // Asked for gzip: from 1.37, one gzip member per event (the three
    // ConfigMaps, the namespace's kube-root-ca.crt, the bookmark that
    // ends the initial events); before, plain.
    let (headers, body) = stream(&c, ns, "gzip");
    assert_eq!(
        headers.contains("content-encoding: gzip"),
        compressed,
        "{headers}"
    );
    let events: Vec<String> = if compressed {
        let members = gzip_members(&body);
        assert!(members.len() >= 5, "a member per event: {members:#?}");
        members
    } else {
        vec![String::from_utf8(body).unwrap()]
    };
    let text = events.concat();
    for n in names {
        assert!(text.contains(&format!(r#""name":"{n}""#)), "{text}");
    }
    assert!(text.contains("k8s.io/initial-events-end"), "{text}");

    // What podns asks: identity, plain on every release.
    let (headers, body) = stream(&c, ns, "identity");
    assert!(!headers.contains("content-encoding"), "{headers}");
    let text = String::from_utf8(body).expect("a plain stream");
    assert!(text.contains(r#""name":"a""#), "{text}");

    // podns's own streaming list against this server: it syncs, answers
    // the pods there, and follows a pod created afterwards.
    c.apply(&crate::records::workload(ns, 2));
    let live = c.pod_ips(ns, "app=train", 2);
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
