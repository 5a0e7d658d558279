//! podns with exactly the RBAC that deploy/ grants (a ServiceAccount token,
//! not the admin certificate), and a clear one-line error when a permission
//! is missing.

use std::path::Path;

use crate::support::*;

/// A kubeconfig that authenticates with a token of `sa` in `ns`
/// (`kubectl create token`, as a projected ServiceAccount token would).
pub(crate) fn token_kubeconfig(c: &Cluster, ns: &str, sa: &str, path: &Path) {
    let token = c.kubectl(&["create", "token", sa, "-n", ns, "--duration=1h"]);
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    token: {}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n",
            c.env["APISERVER_URL"],
            c.env["CLUSTER_CA"],
            token.trim()
        ),
    )
    .unwrap();
}

/// A ServiceAccount `podns-<what>` in `ns` bound to a ClusterRole
/// `<ns>-<what>` with only `rules` (YAML list items), and a kubeconfig
/// for it at `path`. Delete the ClusterRole and binding when done.
pub fn limited_podns(c: &Cluster, ns: &str, what: &str, rules: &str, path: &Path) {
    c.apply(&format!(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: podns-{what}, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {ns}-{what}}}
rules:{rules}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {ns}-{what}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {ns}-{what}}}
subjects: [{{kind: ServiceAccount, name: podns-{what}, namespace: {ns}}}]
"#
    ));
    token_kubeconfig(c, ns, &format!("podns-{what}"), path);
}

#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn deploy_rbac_is_enough_and_a_missing_permission_is_one_clear_line() {
    let c = cluster();
    // deploy/base as an operator applies it (namespace, ServiceAccount,
    // RBAC, metrics Service): it needs no Prometheus Operator CRDs.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base");
    c.kubectl(&["apply", "-k", root.to_str().unwrap()]);
    let (ns, pods) = crate::records::trained(&c, "rbac", 2);
    let ns = ns.name.as_str();
    let dir = tempfile::tempdir().unwrap();

    // The deploy/ ServiceAccount: every watch lists, every name answers.
    let kc = dir.path().join("podns.kubeconfig");
    token_kubeconfig(&c, "podns", "podns", &kc);
    let p = Podns::ready(&kc, &[]);
    for (name, ip) in &pods {
        p.wait_addrs(&format!("{name}.train.{ns}.svc"), &[ip.clone()], secs(10));
    }
    drop(p);

    // The same role without pods: not ready, and the log says what is
    // missing in one line.
    let kc = dir.path().join("no-pods.kubeconfig");
    limited_podns(
        &c,
        ns,
        "no-pods",
        r#"
- {apiGroups: [""], resources: [services], verbs: [get, list, watch]}
- {apiGroups: [batch], resources: [jobs], verbs: [get, list, watch]}"#,
        &kc,
    );
    let p = Podns::start(&kc, &[]);
    let line = wait_for("a line about the missing permission", secs(30), || {
        p.log
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains("forbidden") && l.contains("pods"))
            .cloned()
    });
    eprintln!("missing permission: {line}");
    assert!(
        line.contains(&"podns-no-pods".to_string()) && line.contains("list"),
        "the line names who and what: {line}"
    );
    assert_eq!(
        http_get(p.admin, "/readyz").0,
        503,
        "not ready without pods"
    );
    let _ = c.try_kubectl(
        &[
            "delete",
            "clusterrole,clusterrolebinding",
            &format!("{ns}-no-pods"),
        ],
        None,
    );
}
