//! The relay with the real API server upstream: kubectl reads it with a
//! token the real API server issued (checked by a real TokenReview), a
//! garbage token gets 401, and a node instance on a real (kwok) node holds
//! its pods' namespace (or, of a namespace of Indexed Jobs, its gangs) and
//! forwards the rest, byte for byte; a watch resumes on another relay from
//! the API server's version, gets 410 past a relay's history, writes get
//! 405; the Job controller's status writes, which the relay does not serve,
//! are not sent.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};

use crate::records::workload;
use crate::support::*;

/// The reply bytes of `server` to exactly these query bytes.
fn raw(server: SocketAddr, query: &[u8]) -> Vec<u8> {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = vec![0u8; 65535];
    for _ in 0..6 {
        sock.send_to(query, server).unwrap();
        if let Ok(n) = sock.recv(&mut buf) {
            return buf[..n].to_vec();
        }
    }
    panic!("no answer from {server}");
}

fn query(name: &str, id: u16) -> Vec<u8> {
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.add_query(Query::query(
        Name::from_ascii(fqdn(name)).unwrap(),
        RecordType::A,
    ));
    let mut edns = Edns::new();
    edns.set_max_payload(1232);
    m.set_edns(edns);
    m.to_vec().unwrap()
}

/// Wait until node instance `n` answers `q` itself (its forward counter
/// unchanged) with a number of answers in `want`.
fn own_answer(
    what: &str,
    n: &Podns,
    q: &[u8],
    want: impl std::ops::RangeBounds<usize>,
    limit: Duration,
) {
    let forwarded = || n.metric("podns_dns_forwarded_total{result=\"answered\"}");
    wait_for(
        &format!("the node instance to answer {what} itself"),
        limit,
        || {
            let before = forwarded();
            let answers = Message::from_vec(&raw(n.dns, q)).unwrap().answers.len();
            (want.contains(&answers) && forwarded() == before).then_some(())
        },
    );
}

/// ServiceAccount `ns/name` with the relay's permission, as the chart
/// grants it to node instances (a ClusterRole and its binding).
pub fn node_account(c: &Cluster, ns: &str, name: &str) {
    let made = c.try_kubectl(&["create", "serviceaccount", name, "-n", ns], None);
    assert!(
        made.is_ok() || made.as_ref().is_err_and(|e| e.contains("already exists")),
        "the node ServiceAccount: {made:?}"
    );
    let perm = podns_server::relay::http::auth::PERMISSION;
    c.apply(&format!(
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: podns-relay-reader}}
rules: [{{apiGroups: ["{}"], resources: ["{}"], verbs: ["{}"]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: podns-relay-reader-{ns}-{name}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: podns-relay-reader}}
subjects: [{{kind: ServiceAccount, namespace: {ns}, name: {name}}}]
"#,
        perm.group, perm.resource, perm.verb
    ));
}

/// A relay over the real API server, and the kubeconfig it writes in `dir`
/// for node instances: a token of ServiceAccount `podns-node` of `ns`
/// (made here).
fn relay(c: &Cluster, ns: &str, dir: &std::path::Path) -> (Podns, std::path::PathBuf) {
    relay_with(c, ns, dir, &[])
}

/// [`relay`] with more flags; the ServiceAccount may exist already.
pub fn relay_with(
    c: &Cluster,
    ns: &str,
    dir: &std::path::Path,
    extra: &[&str],
) -> (Podns, std::path::PathBuf) {
    node_account(c, ns, "podns-node");
    let rk = dir.join("relay.yaml");
    let mut flags = vec![
        "--relay-listen=127.0.0.1:0".to_string(),
        format!("--relay-kubeconfig-out={}", rk.display()),
        format!("--relay-kubeconfig-account={ns}/podns-node"),
    ];
    flags.extend(extra.iter().map(|f| f.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let relay = Podns::ready(&c.kubeconfig, &flags);
    wait_for("the relay kubeconfig", secs(30), || {
        rk.exists().then_some(())
    });
    (relay, rk)
}

#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn the_relay_serves_kubectl_and_a_node_instance_from_the_real_api_server() {
    let c = cluster();
    let held = c.namespace("relay");
    let held = held.name.as_str();
    // A namespace with a Service and no pod: never in a node's scope.
    let away = c.namespace("relayx");
    let away = away.name.as_str();
    c.apply(&workload(held, 2));
    c.apply(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: api, namespace: {away}}}\nspec:\n  ports: [{{port: 80}}]\n"
    ));
    let train = c.pod_ips(held, "app=train", 2);
    let dir = tempfile::tempdir().unwrap();
    let (relay, rk) = relay(&c, held, dir.path());

    // kubectl, with the token the real API server issued (TokenRequest),
    // which the relay checked with a real TokenReview.
    let yaml = c.kubectl_at(&rk, &["get", "pods", "-n", held, "-o", "yaml"], None);
    for (name, ip) in &train {
        assert!(yaml.contains(&format!("name: {name}")), "{yaml}");
        assert!(yaml.contains(&format!("podIP: {ip}")), "{yaml}");
    }
    assert!(!yaml.contains("managedFields"), "slim objects");
    // A field of train-0, through the API server or the relay.
    let train_0 = |kc: &std::path::Path, path: &str| {
        let jsonpath = format!("jsonpath={{{path}}}");
        c.kubectl_at(
            kc,
            &["get", "pod", "train-0", "-n", held, "-o", &jsonpath],
            None,
        )
    };
    // The API server's own resourceVersions.
    let rv = |kc: &std::path::Path| train_0(kc, ".metadata.resourceVersion");
    wait_for(
        "the relay at the API server's version of train-0",
        secs(30),
        || (rv(&rk) == rv(&c.kubeconfig)).then_some(()),
    );
    // A token the API server never issued: 401.
    let bad = dir.path().join("bad.yaml");
    let text = std::fs::read_to_string(&rk).unwrap();
    let token = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .unwrap();
    std::fs::write(&bad, text.replace(token, "not-a-token")).unwrap();
    let err = c.try_kubectl_at(&bad, &["get", "pods", "-n", held], None);
    assert!(
        err.as_ref()
            .is_err_and(|e| e.contains("Unauthorized") || e.contains("provide credentials")),
        "{err:?}"
    );

    // A node instance on train-0's node.
    let node = c.pod_field(held, "train-0", "{.spec.nodeName}");
    let node = node.trim();
    let n = Podns::serve(&[
        &format!("--relay-kubeconfig={}", rk.display()),
        &format!("--node={node}"),
        &format!("--relay-dns={}", relay.dns),
    ]);
    n.wait_ready(secs(60));
    wait_for("the namespace in the node's scope", secs(60), || {
        (n.metric("podns_node_scope_namespaces") >= 1.0).then_some(())
    });
    let forwarded = || n.metric("podns_dns_forwarded_total{result=\"answered\"}");
    // Held: answered by the node instance itself, as the relay answers it.
    // The namespace is in scope before its lists are in; until then its
    // names are forwarded (counted), so wait for the node's own answer.
    let q = query(&format!("train-0.train.{held}.svc"), 0x1234);
    own_answer("train-0", &n, &q, 1..=1, secs(60));
    let before = forwarded();
    let here = raw(n.dns, &q);
    assert_eq!(forwarded(), before, "held, not forwarded");
    assert_eq!(here, raw(relay.dns, &q));
    assert!(Message::from_vec(&here).unwrap().answers.len() == 1);
    // Not held: the relay's answer, unchanged.
    let q = query(&format!("api.{away}.svc"), 0x4321);
    let here = raw(n.dns, &q);
    assert_eq!(forwarded(), before + 1.0, "forwarded");
    assert_eq!(here, raw(relay.dns, &q));
    assert!(Message::from_vec(&here).unwrap().answers.len() == 1);

    // A label no Service selects on is not served; a Service that selects
    // on it has the relay serve it, and the node instance (told to relist
    // its namespace) answers the new Service itself.
    c.kubectl(&["label", "pod", "train-0", "-n", held, "tier=gpu"]);
    let tier = || train_0(&rk, ".metadata.labels.tier");
    wait_for(
        "the relay at the API server's version of train-0",
        secs(30),
        || (rv(&rk) == rv(&c.kubeconfig)).then_some(()),
    );
    assert_eq!(tier().trim(), "", "not served while nothing selects on it");
    c.apply(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: gpus, namespace: {held}}}\nspec:\n  clusterIP: None\n  publishNotReadyAddresses: true\n  selector: {{tier: gpu}}\n"
    ));
    wait_for("tier served", secs(30), || {
        (tier().trim() == "gpu").then_some(())
    });
    let q = query(&format!("gpus.{held}.svc"), 0x2468);
    // While it relists the namespace it forwards its names (counted).
    own_answer("gpus", &n, &q, 1..=1, secs(30));
    let before = forwarded();
    assert_eq!(raw(n.dns, &q), raw(relay.dns, &q));
    assert_eq!(forwarded(), before, "held, not forwarded");
}

#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn a_node_instance_holds_its_gangs_of_a_namespace_and_forwards_the_other_gangs() {
    let c = cluster();
    let ns = c.namespace("gangs");
    let ns = ns.name.as_str();
    // Two Indexed Jobs of one namespace, each with its headless Service,
    // on two nodes.
    let gang = |name: &str, node: &str| {
        format!(
            r#"
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {{job-name: {name}}}
---
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}, namespace: {ns}}}
spec:
  completions: 2
  parallelism: 2
  completionMode: Indexed
  backoffLimit: 0
  template:
    spec:
      subdomain: {name}
      restartPolicy: Never
      nodeSelector: {{kubernetes.io/hostname: {node}}}
      containers: [{{name: trainer, image: fake}}]
"#
        )
    };
    c.apply(&gang("near", "kwok-node-1"));
    c.apply(&gang("far", "kwok-node-2"));
    c.pod_ips(ns, "job-name=near", 2);
    c.pod_ips(ns, "job-name=far", 2);
    let dir = tempfile::tempdir().unwrap();
    let (relay, rk) = relay(&c, ns, dir.path());
    let n = Podns::serve(&[
        &format!("--relay-kubeconfig={}", rk.display()),
        "--node=kwok-node-1",
        &format!("--relay-dns={}", relay.dns),
    ]);
    n.wait_ready(secs(60));
    let forwarded = || n.metric("podns_dns_forwarded_total{result=\"answered\"}");
    // Gang `near` (this node's): answered by the node instance itself.
    for (i, name) in ["near-0.near", "near-1.near", "near"].iter().enumerate() {
        let q = query(&format!("{name}.{ns}.svc"), 0x1100 + i as u16);
        own_answer(name, &n, &q, 1.., secs(60));
        assert_eq!(raw(n.dns, &q), raw(relay.dns, &q), "{name}");
    }
    // Gang `far` (another node's, same namespace): the relay's answer.
    for (i, name) in ["far-0.far", "far"].iter().enumerate() {
        let q = query(&format!("{name}.{ns}.svc"), 0x2200 + i as u16);
        let before = forwarded();
        let here = raw(n.dns, &q);
        assert_eq!(forwarded(), before + 1.0, "forwarded: {name}");
        assert_eq!(here, raw(relay.dns, &q), "{name}");
        assert!(
            !Message::from_vec(&here).unwrap().answers.is_empty(),
            "{name}"
        );
    }
}

/// `kubectl get <what> -n ns --watch -o name` against `kubeconfig`, its
/// lines (one per event, the list's objects first) written to `out`.
fn watch_lines(
    c: &Cluster,
    kubeconfig: &std::path::Path,
    what: &str,
    ns: &str,
    out: &std::path::Path,
) -> std::process::Child {
    std::process::Command::new(&c.kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["get", what, "-n", ns, "--watch", "-o", "name"])
        .stdout(std::fs::File::create(out).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl runs")
}

fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn the_job_controllers_status_writes_are_not_sent_through_the_relay() {
    let c = cluster();
    let ns = c.namespace("jobstat");
    let ns = ns.name.as_str();
    let dir = tempfile::tempdir().unwrap();
    let (relay, rk) = relay(&c, ns, dir.path());
    // A Job's watchers, through the API server and through the relay,
    // from before the Job exists: a suspended Job (no pods) shows in both
    // once both are watching.
    let (upstream, relayed) = (dir.path().join("api.txt"), dir.path().join("relay.txt"));
    let mut watches = [
        watch_lines(&c, &c.kubeconfig, "jobs", ns, &upstream),
        watch_lines(&c, &rk, "jobs", ns, &relayed),
    ];
    let job = |name: &str, suspend: bool| {
        format!(
            r#"
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}, namespace: {ns}}}
spec:
  suspend: {suspend}
  completions: 2
  parallelism: 2
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: trainer, image: fake}}]
"#
        )
    };
    c.apply(&job("early", true));
    let of = |path: &std::path::Path, name: &str| {
        let line = format!("job.batch/{name}");
        lines(path).into_iter().filter(|l| *l == line).count()
    };
    wait_for("both watches to show the first Job", secs(60), || {
        (of(&upstream, "early") > 0 && of(&relayed, "early") > 0).then_some(())
    });
    c.apply(&job("late", false));
    c.pod_ips(ns, "job-name=late", 2);
    // The Job controller writes the Job's status as its pods start (active,
    // ready, start time): each a new version from the API server.
    let version = |kc: &std::path::Path| {
        c.kubectl_at(
            kc,
            &[
                "get",
                "job",
                "late",
                "-n",
                ns,
                "-o",
                "jsonpath={.metadata.resourceVersion}",
            ],
            None,
        )
    };
    wait_for(
        "the Job's status written and the relay at its version",
        secs(60),
        || {
            let n = of(&upstream, "late");
            (n >= 2 && version(&rk) == version(&c.kubeconfig)).then_some(n)
        },
    );
    let unseen = relay.metric("podns_relay_changes_unseen_total");
    for w in &mut watches {
        let _ = w.kill();
        let _ = w.wait();
    }
    let (upstream, relayed) = (of(&upstream, "late"), of(&relayed, "late"));
    println!(
        "Job events: {upstream} from the API server, {relayed} through the relay; the relay's unseen changes: {unseen}"
    );
    assert!(
        upstream >= 2,
        "the API server sent its creation and a status"
    );
    // Through the relay, the Job's one event: it was created. Its status
    // (which the relay does not serve) changed nothing a client sees.
    assert_eq!(relayed, 1, "upstream: {upstream}");
    assert!(unseen >= (upstream - 1) as f64, "unseen: {unseen}");
}

/// `kubectl get --raw PATH` through `kubeconfig`: the body, or stderr.
fn raw_get(c: &Cluster, kubeconfig: &std::path::Path, path: &str) -> Result<String, String> {
    c.try_kubectl_at(kubeconfig, &["get", "--raw", path], None)
}

#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn a_watch_resumes_on_another_relay_by_the_api_servers_version_and_gets_410_past_the_history() {
    let c = cluster();
    let ns = c.namespace("resume");
    let ns = ns.name.as_str();
    let pod = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  containers: [{{name: c, image: fake}}]\n"
        )
    };
    c.apply(&pod("first"));
    let (dir_a, dir_b, dir_c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let (_a, rk_a) = relay_with(&c, ns, dir_a.path(), &[]);
    let (_b, rk_b) = relay_with(&c, ns, dir_b.path(), &[]);
    let (_short, rk_short) = relay_with(&c, ns, dir_c.path(), &["--relay-history=0s"]);
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    // A change both relays have seen: relay a's version is then inside
    // relay b's history, which begins at b's first list (a version from
    // before it is 410 on b: b cannot know what happened before it).
    c.apply(&pod("marker"));
    for rk in [&rk_a, &rk_b] {
        wait_for("the relays to have the marker pod", secs(30), || {
            raw_get(&c, rk, &pods)
                .ok()?
                .contains("\"marker\"")
                .then_some(())
        });
    }
    // A list from relay a: the API server's version.
    let list: serde_json::Value =
        serde_json::from_str(&raw_get(&c, &rk_a, &pods).unwrap()).unwrap();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["metadata"]["name"] == "first"),
        "{list}"
    );
    c.apply(&pod("late"));
    c.kubectl(&["delete", "pod", "first", "-n", ns, "--wait=false"]);
    // Resumed on relay b from relay a's version: what happened since, no
    // 410, no relist. Go's HTTP client reads the chunked watch to its end.
    let watch = format!("{pods}?watch=1&resourceVersion={rv}&timeoutSeconds=3");
    let events = wait_for(
        "relay b to send the pod created after the list",
        secs(30),
        || {
            let out = raw_get(&c, &rk_b, &watch).unwrap();
            out.contains("\"late\"").then_some(out)
        },
    );
    assert!(events.contains("\"type\":\"ADDED\""), "{events}");
    // A 410 is a Status with `"code":410`; a bare "410" would also match
    // a resourceVersion such as 2410.
    assert!(
        !events.contains("Expired") && !events.contains("\"code\":410"),
        "{events}"
    );
    // Past the history (kept 0 s here): 410 Gone, as from the API server.
    wait_for("relay short past the pod created", secs(30), || {
        let out = raw_get(&c, &rk_short, &watch).ok()?;
        (out.contains("\"code\":410") && out.contains("Expired")).then_some(())
    });
    // Writes: 405.
    let err = c
        .try_kubectl_at(&rk_a, &["delete", "pod", "late", "-n", ns], None)
        .unwrap_err();
    assert!(
        err.contains("MethodNotAllowed") || err.contains("not allowed"),
        "{err}"
    );
}
