//! The simulator held to the real thing: one scenario on `podns sim
//! --kubelet` and on the real control plane, `podns zonefile` against each,
//! the same zone once the IP data is aligned.
//!
//! The scenario: an Indexed Job and a JobSet's child Job (the simulator's
//! `/sim/jobs` makes them, as a user and the JobSet controller would), their
//! headless Services, a ClusterIP Service with a named port and its pod, an
//! ExternalName Service. The real side gets the simulator's own Job and
//! Service objects (less what the API server sets: uid, selector,
//! controller labels, status) and makes the pods with the real Job
//! controller, scheduler and kwok. The Job templates go over whole: their
//! PriorityClass and PersistentVolumeClaims exist on the real side as on a
//! training cluster, and up.sh's nodes are GPU nodes. Any difference in the
//! zones is a difference between the simulator's pods and the real
//! controllers'.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::support::*;

struct Sim(Child);
impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the API server sets on create, or the Job controller adds to a
/// template, taken off so the real side makes it anew. Nothing else: the
/// rest of the simulator's Job is what a real API server takes.
fn sanitize(mut o: Value) -> Value {
    let meta = o["metadata"].as_object_mut().unwrap();
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "managedFields",
        "ownerReferences",
        "selfLink",
    ] {
        meta.remove(k);
    }
    o.as_object_mut().unwrap().remove("status");
    if o["kind"] == "Job" {
        let spec = o["spec"].as_object_mut().unwrap();
        spec.remove("selector");
        spec.remove("manualSelector");
        for field in ["labels", "annotations"] {
            if let Some(m) = o["spec"]["template"]["metadata"][field].as_object_mut() {
                m.retain(|k, _| {
                    !matches!(
                        k.as_str(),
                        "controller-uid"
                            | "batch.kubernetes.io/controller-uid"
                            | "job-name"
                            | "batch.kubernetes.io/job-name"
                    )
                });
            }
        }
        if let Some(m) = o["metadata"]["labels"].as_object_mut() {
            m.retain(|k, _| {
                !matches!(
                    k.as_str(),
                    "controller-uid" | "batch.kubernetes.io/controller-uid"
                )
            });
        }
    }
    if o["kind"] == "Service" {
        let spec = o["spec"].as_object_mut().unwrap();
        if spec.get("clusterIP").and_then(Value::as_str) != Some("None") {
            spec.remove("clusterIP");
            spec.remove("clusterIPs");
        }
    }
    o
}

/// Claims bound to volumes made for them (no provisioner here): what a
/// training cluster's storage gives its jobs. The volumes, cluster-wide,
/// go when this drops; the claims go with the namespace.
struct Volumes<'a> {
    cluster: &'a Cluster,
    names: Vec<String>,
}

impl<'a> Volumes<'a> {
    fn bind(cluster: &'a Cluster, ns: &str, claims: &[&str]) -> Volumes<'a> {
        let mut names = Vec::new();
        let mut y = String::new();
        for claim in claims {
            let pv = format!("{ns}-{claim}");
            y.push_str(&format!(
                "---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {pv}}}
spec:
  capacity: {{storage: 10Ti}}
  accessModes: [ReadWriteMany]
  storageClassName: \"\"
  hostPath: {{path: /nonexistent/{pv}}}
  claimRef: {{namespace: {ns}, name: {claim}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {claim}, namespace: {ns}}}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: \"\"
  volumeName: {pv}
  resources: {{requests: {{storage: 10Ti}}}}
"
            ));
            names.push(pv);
        }
        cluster.apply(&y);
        wait_for("the claims bound", secs(60), || {
            let phases = cluster.kubectl(&[
                "get",
                "pvc",
                "-n",
                ns,
                "-o",
                "jsonpath={.items[*].status.phase}",
            ]);
            (phases.split_whitespace().filter(|p| *p == "Bound").count() == claims.len())
                .then_some(())
        });
        Volumes { cluster, names }
    }
}

impl Drop for Volumes<'_> {
    fn drop(&mut self) {
        for pv in &self.names {
            let _ = self
                .cluster
                .try_kubectl(&["delete", "pv", pv, "--wait=false"], None);
        }
    }
}

/// Each pod's and Service's addresses, by a key both sides share: the
/// pod's hostname (or name when it has none), the Service's name.
fn addresses(c: &Cluster, kubeconfig: &Path, ns: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let pods: Value = serde_json::from_str(&c.kubectl_at(
        kubeconfig,
        &["get", "pods", "-n", ns, "-o", "json"],
        None,
    ))
    .unwrap();
    for p in pods["items"].as_array().unwrap() {
        let key = p["spec"]["hostname"]
            .as_str()
            .or(p["metadata"]["name"].as_str())
            .unwrap();
        for ip in p["status"]["podIPs"].as_array().into_iter().flatten() {
            out.insert(ip["ip"].as_str().unwrap().to_string(), format!("pod:{key}"));
        }
    }
    let svcs: Value = serde_json::from_str(&c.kubectl_at(
        kubeconfig,
        &["get", "svc", "-n", ns, "-o", "json"],
        None,
    ))
    .unwrap();
    for s in svcs["items"].as_array().unwrap() {
        for ip in s["spec"]["clusterIPs"].as_array().into_iter().flatten() {
            let ip = ip.as_str().unwrap();
            if ip != "None" {
                out.insert(
                    ip.to_string(),
                    format!("svc:{}", s["metadata"]["name"].as_str().unwrap()),
                );
            }
        }
    }
    out
}

/// The zone's records with every known address (in data, dashed in a
/// label, reversed in an `in-addr.arpa` owner) replaced by its key;
/// records of other namespaces and of the `default` namespace's
/// `kubernetes` Service are left out (the two clusters differ there).
fn normalize(zone: &str, ns: &str, ips: &BTreeMap<String, String>) -> BTreeSet<String> {
    let dashed: BTreeMap<String, &String> = ips.iter().map(|(ip, k)| (dashed(ip), k)).collect();
    let name = |n: &str| -> String {
        if let Some(rev) = n.strip_suffix(".in-addr.arpa.") {
            let mut p: Vec<&str> = rev.split('.').collect();
            p.reverse();
            let ip = p.join(".");
            if let Some(k) = ips.get(&ip) {
                return format!("<{k}>.in-addr.arpa.");
            }
            return n.to_string();
        }
        n.split('.')
            .map(|l| match dashed.get(l) {
                Some(k) => format!("<{k}>"),
                None => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join(".")
    };
    let mut origin = String::new();
    let mut out = BTreeSet::new();
    for l in zone.lines() {
        if let Some(o) = l.strip_prefix("$ORIGIN ") {
            origin = o.trim().to_string();
            continue;
        }
        if l.starts_with(';') || l.starts_with('$') || l.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = l.split('\t').collect();
        let owner = match f[0] {
            "@" => origin.clone(),
            o if o.ends_with('.') => o.to_string(),
            o => format!("{o}.{origin}"),
        };
        let data: Vec<String> = f[4..]
            .join("\t")
            .split(' ')
            .map(|t| match ips.get(t) {
                Some(k) => format!("<{k}>"),
                None if t.ends_with('.') => name(t),
                None => t.to_string(),
            })
            .collect();
        let line = format!("{} {} {}", name(&owner), f[3], data.join(" "));
        // Only the scenario's namespace (its names, and PTRs into it).
        if line.contains(&format!(".{ns}.")) {
            out.insert(line);
        }
    }
    out
}

// What this found, fixed in the simulator: its JobSet pods had hostname
// `<jobset>-<i>`, where the real Job controller names every Indexed Job
// pod `<job>-<i>` after the Job that owns it (`gpt-workers-0-3`, the
// JobSet's child Job); the subdomain, the JobSet's name, already agreed.
#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn simulator_and_real_control_plane_serve_the_same_zone() {
    let c = cluster();
    let ns = c.namespace("sim-vs-real");
    let ns = ns.name.as_str();
    let dir = tempfile::tempdir().unwrap();
    let sim_kc = dir.path().join("sim.kubeconfig");
    // From 1.35 the API server copies a node's zone and region labels onto
    // the pods bound to it (PodTopologyLabels admission); the simulator
    // does so unless told the cluster is older.
    let topology_labels = c.k8s_minor() >= 35;
    let _sim = Sim(Command::new(BIN)
        .args(["sim", "--kubelet", "--listen=127.0.0.1:0"])
        .arg(format!("--pod-topology-labels={topology_labels}"))
        .arg(format!("--kubeconfig-out={}", sim_kc.display()))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap());
    wait_for("the simulator's kubeconfig", secs(20), || {
        sim_kc.exists().then_some(())
    });
    wait_for("the simulator answers", secs(20), || {
        Command::new(&c.kubectl)
            .arg("--kubeconfig")
            .arg(&sim_kc)
            .args(["get", "--raw", "/version"])
            .output()
            .ok()
            .filter(|o| o.status.success())
    });

    // The simulator makes the jobs (and their headless Services) …
    for (name, kind) in [("llama", "indexed-job"), ("gpt", "jobset")] {
        let body = format!(r#"{{"namespace":"{ns}","name":"{name}","ranks":4,"kind":"{kind}"}}"#);
        c.kubectl_at(
            &sim_kc,
            &["create", "--raw", "/sim/jobs", "-f", "-"],
            Some(&body),
        );
    }
    // … and both get the same plain objects.
    // The simulator's training pods ask for this PriorityClass (their
    // `priority: 1000` is its value, as the Priority admission plugin sets
    // it) and mount these claims, as training clusters' do; the real API
    // server admits the pods only once the class exists, and the scheduler
    // places them only once their claims are bound.
    c.apply(
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: training-high}\nvalue: 1000\n",
    );
    let _volumes = Volumes::bind(
        &c,
        ns,
        &["training-data", "llama-checkpoints", "gpt-checkpoints"],
    );
    let plain = crate::records::workload(ns, 0);
    c.kubectl_at(&sim_kc, &["apply", "-f", "-"], Some(&plain));
    c.apply(&plain);
    let objects: Value = serde_json::from_str(&c.kubectl_at(
        &sim_kc,
        &["get", "jobs,services", "-n", ns, "-o", "json"],
        None,
    ))
    .unwrap();
    let mut copied = Vec::new();
    for o in objects["items"].as_array().unwrap() {
        let name = o["metadata"]["name"].as_str().unwrap();
        if o["kind"] == "Service" && ["train", "api", "ext"].contains(&name) {
            continue; // applied to both already
        }
        copied.push(format!("{}/{name}", o["kind"].as_str().unwrap()));
        c.kubectl_in(
            &["create", "-f", "-"],
            Some(&serde_json::to_string(&sanitize(o.clone())).unwrap()),
        );
    }
    assert!(copied.len() >= 4, "jobs and services copied: {copied:?}");

    // 8 job pods plus api-0 on each side, with IPs.
    c.pod_ips(ns, "batch.kubernetes.io/job-name", 8);
    c.pod_ips(ns, "app=api", 1);
    wait_for("the simulator's pods", secs(30), || {
        let out = c.kubectl_at(
            &sim_kc,
            &[
                "get",
                "pods",
                "-n",
                ns,
                "-o",
                r#"jsonpath={range .items[*]}{.status.podIP}{"\n"}{end}"#,
            ],
            None,
        );
        (out.lines().filter(|l| !l.is_empty()).count() == 9).then_some(())
    });

    let real = normalize(
        &zonefile(&c.kubeconfig, "auto"),
        ns,
        &addresses(&c, &c.kubeconfig, ns),
    );
    let sim = normalize(&zonefile(&sim_kc, "auto"), ns, &addresses(&c, &sim_kc, ns));
    let only_real: Vec<&String> = real.difference(&sim).collect();
    let only_sim: Vec<&String> = sim.difference(&real).collect();
    assert!(
        only_real.is_empty() && only_sim.is_empty(),
        "zones differ\nonly on the real control plane:\n  {}\nonly in the simulator:\n  {}",
        only_real
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n  "),
        only_sim
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n  ")
    );
    assert!(
        real.iter()
            .any(|l| l.starts_with(&format!("3.gpt.{ns}.rank"))),
        "the JobSet's ranks are in the zone: {real:#?}"
    );

    // Beyond the zone, the objects the controllers made agree field for
    // field: the Services, the Jobs and the Jobs' pods.
    let real = shapes(&c, &c.kubeconfig, ns);
    let sim = shapes(&c, &sim_kc, ns);
    assert_eq!(
        real.keys().collect::<Vec<_>>(),
        sim.keys().collect::<Vec<_>>(),
        "the same objects"
    );
    let mut differ = Vec::new();
    for (key, r) in &real {
        let s = &sim[key];
        for path in r.keys().chain(s.keys()).collect::<BTreeSet<_>>() {
            if r.get(path) != s.get(path) {
                differ.push(format!(
                    "{key} {path}: real {:?}, simulator {:?}",
                    r.get(path),
                    s.get(path)
                ));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "objects differ:\n  {}",
        differ.join("\n  ")
    );
    // Including the node's zone on every pod from 1.35 (up.sh's nodes are
    // in zone-a), and on none before.
    let zone = ".metadata.labels.topology.kubernetes.io/zone";
    let pods: Vec<_> = real.iter().filter(|(k, _)| k.starts_with("Pod/")).collect();
    assert_eq!(pods.len(), 8);
    for (key, fields) in pods {
        let want = topology_labels.then(|| Value::from("zone-a"));
        assert_eq!(fields.get(zone), want.as_ref(), "{key}'s zone label");
    }
    // A pod created on a named node has that node's zone in the create's
    // answer (the same plugin, on the pod's create: no binding follows).
    c.kubectl_at(
        &sim_kc,
        &[
            "label",
            "node",
            "sim-node-0",
            "topology.kubernetes.io/zone=zone-a",
        ],
        None,
    );
    let pinned = |node: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: pinned, namespace: {ns}, \
             labels: {{topology.kubernetes.io/zone: mine}}}}\n\
             spec: {{nodeName: {node}, containers: [{{name: c, image: fake}}]}}\n"
        )
    };
    let create = ["create", "-f", "-", "-o", "json"];
    for (side, created) in [
        ("real", c.kubectl_in(&create, Some(&pinned("kwok-node-0")))),
        (
            "simulator",
            c.kubectl_at(&sim_kc, &create, Some(&pinned("sim-node-0"))),
        ),
    ] {
        let v: Value = serde_json::from_str(&created).unwrap();
        let want = if topology_labels { "zone-a" } else { "mine" };
        assert_eq!(
            v["metadata"]["labels"]["topology.kubernetes.io/zone"], want,
            "{side}: {created}"
        );
    }
}

/// The Services, Jobs and Job pods of `ns` as path → value, keyed by kind
/// and name (a pod by its hostname), less what differs by nature: ids,
/// times, addresses, the node, the token volume's random suffix, and the
/// pods' status (kwok, not a kubelet, writes it on the real side). Pods
/// made by a client (`api-0`) are left out: the simulator does not run
/// the pod admission plugins (service-account token, default tolerations,
/// priority) on them, and DNS reads none of that.
fn shapes(c: &Cluster, kubeconfig: &Path, ns: &str) -> BTreeMap<String, BTreeMap<String, Value>> {
    fn flat(v: &Value, path: String, out: &mut BTreeMap<String, Value>) {
        match v {
            Value::Object(m) => m
                .iter()
                .for_each(|(k, x)| flat(x, format!("{path}.{k}"), out)),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .for_each(|(i, x)| flat(x, format!("{path}[{i}]"), out)),
            // Absent, as the API server writes an empty field.
            Value::Null => {}
            Value::String(s) if s.starts_with("kube-api-access-") => {
                out.insert(path, "kube-api-access-*".into());
            }
            v => {
                out.insert(path, v.clone());
            }
        }
    }
    let items: Value = serde_json::from_str(&c.kubectl_at(
        kubeconfig,
        &["get", "services,jobs,pods", "-n", ns, "-o", "json"],
        None,
    ))
    .unwrap();
    let mut out = BTreeMap::new();
    for o in items["items"].as_array().unwrap() {
        let kind = o["kind"].as_str().unwrap();
        if kind == "Pod" && o["metadata"]["ownerReferences"].is_null() {
            continue;
        }
        let name = o["spec"]["hostname"]
            .as_str()
            .or(o["metadata"]["name"].as_str())
            .unwrap();
        let mut fields = BTreeMap::new();
        for part in ["labels", "annotations"] {
            flat(
                &o["metadata"][part],
                format!(".metadata.{part}"),
                &mut fields,
            );
        }
        flat(&o["spec"], ".spec".into(), &mut fields);
        fields.retain(|path, _| {
            !(path.ends_with("controller-uid")
                || path == ".spec.nodeName"
                || (kind == "Service" && path.starts_with(".spec.clusterIP")))
        });
        out.insert(format!("{kind}/{name}"), fields);
    }
    out
}
