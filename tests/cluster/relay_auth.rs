//! Who may read the relay, decided by the real API server: TokenReviews
//! for the relay's audience, SubjectAccessReviews against real RBAC, and
//! the node a token bound to a pod names (KEP-4193's
//! `authentication.kubernetes.io/node-name`, which kube-apiserver puts in
//! a bound token's extra information).

use crate::relay::{node_account, relay_with};
use crate::support::*;

/// A pod on `node` (kwok's) running as ServiceAccount `account`.
fn pod_on(c: &Cluster, ns: &str, name: &str, node: &str, account: &str, app: &str) {
    c.apply(&format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}, labels: {{app: {app}}}}}
spec:
  nodeName: {node}
  serviceAccountName: {account}
  tolerations: [{{operator: Exists}}]
  containers: [{{name: main, image: fake}}]
"#
    ));
}

/// kubectl against the relay with `token`: its output, or its error.
fn with_token(
    c: &Cluster,
    kubeconfig: &std::path::Path,
    token: &str,
    args: &[&str],
) -> Result<String, String> {
    let mut all = vec!["--token", token];
    all.extend_from_slice(args);
    c.try_kubectl_at(kubeconfig, &all, None)
}

#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn the_relay_lets_in_its_audience_its_permission_and_a_nodes_own_scope() {
    let c = cluster();
    let ns = c.namespace("rauth");
    let ns = ns.name.as_str();
    let other = c.namespace("rautho");
    let other = other.name.as_str();
    let dir = tempfile::tempdir().unwrap();
    node_account(&c, ns, "podns-node");
    c.try_kubectl(&["create", "serviceaccount", "intruder", "-n", ns], None)
        .unwrap();
    // A rank on node 0, the node instance's own pod beside it; a pod of
    // another namespace on node 1.
    pod_on(&c, ns, "rank-0", "kwok-node-0", "default", "train");
    pod_on(&c, ns, "podns-node-0", "kwok-node-0", "podns-node", "podns");
    pod_on(&c, other, "far-0", "kwok-node-1", "default", "far");
    c.pod_ips(ns, "app in (train,podns)", 2);
    c.pod_ips(other, "app=far", 1);
    let (_relay, rk) = relay_with(&c, ns, dir.path(), &[]);
    let token = |account: &str, extra: &[&str]| {
        let mut args = vec!["create", "token", account, "-n", ns];
        args.extend_from_slice(extra);
        c.kubectl(&args).trim().to_string()
    };
    let bound = token(
        "podns-node",
        &[
            "--audience=podns-relay",
            "--bound-object-kind=Pod",
            "--bound-object-name=podns-node-0",
        ],
    );
    // The node instance's token lists its node's pods and its namespace.
    let get = |t: &str, args: &[&str]| with_token(&c, &rk, t, args);
    let mine = get(
        &bound,
        &[
            "get",
            "pods",
            "-A",
            "--field-selector=spec.nodeName=kwok-node-0",
            "-o",
            "name",
        ],
    )
    .unwrap();
    assert!(
        mine.contains("pod/rank-0") && mine.contains("pod/podns-node-0"),
        "{mine}"
    );
    get(&bound, &["get", "services", "-n", ns]).unwrap();
    get(&bound, &["get", "pods", "-n", ns]).unwrap();
    // Not node 1's pods, not every pod, not a namespace of no pod of its
    // node: the API server's bound token names node 0.
    for args in [
        &[
            "get",
            "pods",
            "-A",
            "--field-selector=spec.nodeName=kwok-node-1",
        ][..],
        &["get", "pods", "-A"][..],
        &["get", "pods", "-n", other][..],
        &["get", "services", "-n", other][..],
    ] {
        let e = get(&bound, args).unwrap_err();
        assert!(e.contains("Forbidden"), "{args:?}: {e}");
    }
    // The same account's token for the API server: refused.
    let api = token("podns-node", &[]);
    let e = get(&api, &["get", "pods", "-n", ns]).unwrap_err();
    assert!(e.contains("Unauthorized"), "{e}");
    // Another account's token for the relay's audience: 403.
    let intruder = token("intruder", &["--audience=podns-relay"]);
    let e = get(&intruder, &["get", "pods", "-n", ns]).unwrap_err();
    assert!(e.contains("Forbidden"), "{e}");
    assert!(
        e.contains(&format!("system:serviceaccount:{ns}:intruder")),
        "{e}"
    );
}
