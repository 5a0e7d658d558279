//! Both wires against the real API server: `podns zonefile --wire json`,
//! `protobuf` and `auto` print the same zone, from objects the simulator
//! never makes (managedFields from server-side apply, ownerReferences,
//! init containers, an ephemeral container added through its subresource).

use crate::support::*;

#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn json_protobuf_and_auto_print_the_same_zone() {
    let c = cluster();
    let ns = c.namespace("wires");
    let ns = ns.name.as_str();
    // Server-side apply: managedFields on every object.
    c.kubectl_in(
        &[
            "apply",
            "--server-side",
            "--field-manager=podns-test",
            "-f",
            "-",
        ],
        Some(&crate::records::workload(ns, 3)),
    );
    // Init containers, and an owner (a ConfigMap: any object will do).
    c.apply(&format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {{name: owner, namespace: {ns}}}
"#
    ));
    let uid = c.kubectl(&[
        "get",
        "configmap",
        "owner",
        "-n",
        ns,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    c.apply(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: odd
  namespace: {ns}
  labels: {{app: train, extra.example.com/team: "ml"}}
  annotations: {{note: "a long annotation value that the slim decoder skips"}}
  ownerReferences: [{{apiVersion: v1, kind: ConfigMap, name: owner, uid: "{uid}"}}]
spec:
  hostname: odd
  subdomain: train
  initContainers: [{{name: init, image: fake, command: [sh, -c, "true"]}}]
  containers:
  - name: worker
    image: fake
    env: [{{name: A, value: b}}]
    ports: [{{name: nccl, containerPort: 29500}}, {{name: metrics, containerPort: 9090}}]
    resources: {{limits: {{cpu: "1"}}}}
  tolerations: [{{key: example.com/gpu, operator: Exists}}]
"#
    ));
    c.pod_ips(ns, "app=train", 4);
    // An ephemeral container: only through the pod's subresource.
    c.kubectl(&[
        "patch",
        "pod",
        "odd",
        "-n",
        ns,
        "--subresource=ephemeralcontainers",
        "--type=strategic",
        "-p",
        r#"{"spec":{"ephemeralContainers":[{"name":"debug","image":"fake","targetContainerName":"worker"}]}}"#,
    ]);
    let got = c.pod_field(
        ns,
        "odd",
        "{.spec.ephemeralContainers[0].name} {.metadata.managedFields[0].manager}",
    );
    assert!(got.starts_with("debug "), "{got}");

    let json = zonefile(&c.kubeconfig, "json");
    let pb = zonefile(&c.kubeconfig, "protobuf");
    let auto = zonefile(&c.kubeconfig, "auto");
    assert!(
        json.contains(&format!("odd.train.{ns}.svc")) || json.contains("odd.train"),
        "the odd pod is in the zone:\n{json}"
    );
    // Other tests' namespaces come and go while the three lists run (the
    // real node's tests use fixed names, and roll kube-system's CoreDNS):
    // compare this test's names, the `default` namespace's and the zones'
    // own records (SOA, NS, the server's name and version).
    let ours = format!(".{ns}.");
    let mine = |zone: &str| {
        zone.lines()
            .filter(|l| {
                let namespaced = l.contains(".svc") || l.contains(".pod");
                !namespaced || l.contains(&ours) || l.contains(".default.svc")
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(mine(&json), mine(&pb), "json and protobuf zones differ");
    assert_eq!(mine(&json), mine(&auto), "json and auto zones differ");
}

/// `serve` on each wire answers the same for the same names.
#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn serve_on_each_wire_answers_alike() {
    let c = cluster();
    let (ns, pods) = crate::records::trained(&c, "serve-wires", 3);
    let ns = ns.name.as_str();
    let all: Vec<String> = pods.iter().map(|(_, ip)| ip.clone()).collect();
    for wire in ["json", "protobuf"] {
        let p = Podns::ready(&c.kubeconfig, &[&format!("--wire={wire}")]);
        p.wait_addrs(&format!("train.{ns}.svc"), &all, secs(10));
        for (name, ip) in &pods {
            p.wait_addrs(&format!("{name}.train.{ns}.svc"), &[ip.clone()], secs(10));
        }
        assert_eq!(
            p.metric("podns_watch_skipped_objects_total"),
            0.0,
            "{wire}: no object of the real API server was skipped"
        );
    }
}
