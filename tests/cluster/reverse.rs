//! The reverse zones learned from the real control plane: kwok's Nodes
//! (`spec.podCIDRs` 10.(128+i).0.0/16) and the default ServiceCIDR
//! kube-apiserver makes from `--service-cluster-ip-range`
//! (10.96.0.0/16, fd00:96::/108). Answers inside them, REFUSED outside
//! but for the PTR of an address podns holds (a pod on a Node without a
//! podCIDR, whose IP kwok takes from its own pool), a new Node's range
//! owned and dropped with it, and no zone owned (REFUSED but for held
//! addresses) when podns may not list Nodes and ServiceCIDRs.

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use crate::rbac::token_kubeconfig;
use crate::support::*;

#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn learned_ranges_answer_inside_and_refuse_outside() {
    let c = cluster();
    let (ns, pods) = crate::records::trained(&c, "reverse", 2);
    let ns = ns.name.as_str();
    let p = Podns::ready(&c.kubeconfig, &[]);
    let rc = |name: &str| rcode(&p.ask(name, RecordType::PTR));

    // Outside every range: a public address, a node-less private one, and
    // the names above the zones.
    for name in [
        "8.8.8.8.in-addr.arpa.",
        "1.0.0.127.in-addr.arpa.",
        "1.0.97.10.in-addr.arpa.",
        "10.in-addr.arpa.",
        "in-addr.arpa.",
    ] {
        assert_eq!(rc(name), ResponseCode::Refused, "{name}");
    }
    // Inside: a pod's PTR (its node's podCIDR), the kubernetes Service's
    // (the default ServiceCIDR), an unused address (NXDOMAIN), the apex.
    let ptr = p.ask(&reverse_v4(&pods[0].1), RecordType::PTR);
    assert_eq!(rcode(&ptr), ResponseCode::NoError, "{ptr:?}");
    assert_eq!(ptr.answers.len(), 1, "{ptr:?}");
    let kubernetes = c.kubectl(&[
        "get",
        "svc",
        "kubernetes",
        "-n",
        "default",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    let ptr = p.ask(&reverse_v4(kubernetes.trim()), RecordType::PTR);
    assert_eq!(
        answer_lines(&ptr),
        vec![format!(
            "{} PTR kubernetes.default.svc.cluster.local.",
            reverse_v4(kubernetes.trim())
        )]
    );
    assert_eq!(rc("254.255.96.10.in-addr.arpa."), ResponseCode::NXDomain);
    let node0 = c.kubectl(&[
        "get",
        "node",
        "kwok-node-0",
        "-o",
        "jsonpath={.spec.podCIDRs[0]}",
    ]);
    assert_eq!(node0.trim(), "10.128.0.0/16");
    assert_eq!(
        p.ask("128.10.in-addr.arpa.", RecordType::SOA).answers.len(),
        1
    );

    // A Node without a podCIDR (the node controller allocates none here,
    // as with the AWS VPC CNI): kwok gives its pods addresses from its
    // own pool (10.0.0.0/16), outside every Node's range. The pod's PTR
    // is answered all the same; a neighbour no one holds is REFUSED.
    let bare = "podns-reverse-bare";
    let _ = c.try_kubectl(&["delete", "node", bare], None);
    c.apply(&format!(
        r#"
apiVersion: v1
kind: Node
metadata:
  name: {bare}
  annotations: {{kwok.x-k8s.io/node: fake}}
  labels: {{type: kwok, kubernetes.io/hostname: {bare}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: outside-0, namespace: {ns}, labels: {{app: train, where: outside}}}}
spec:
  nodeName: {bare}
  hostname: outside-0
  subdomain: train
  containers: [{{name: worker, image: fake}}]
"#
    ));
    let outside = c.pod_ips(ns, "where=outside", 1);
    let ip = &outside[0].1;
    assert!(ip.starts_with("10.0."), "kwok's own pool: {ip}");
    let name = reverse_v4(ip);
    let ptr = wait_for("the outside pod's PTR", secs(20), || {
        let m = p.ask(&name, RecordType::PTR);
        (rcode(&m) == ResponseCode::NoError).then_some(m)
    });
    assert_eq!(
        answer_lines(&ptr),
        vec![format!(
            "{name} PTR outside-0.train.{ns}.svc.cluster.local."
        )]
    );
    assert!(
        ptr.metadata.authoritative && ptr.authorities.is_empty(),
        "{ptr:?}"
    );
    let octets: Vec<u8> = ip.split('.').map(|o| o.parse().unwrap()).collect();
    let neighbour = format!("10.0.{}.{}", octets[2], octets[3] ^ 1);
    assert_eq!(rc(&reverse_v4(&neighbour)), ResponseCode::Refused);
    c.kubectl(&["delete", "pod", "outside-0", "-n", ns, "--wait=false"]);
    c.kubectl(&["delete", "node", bare, "--wait=false"]);

    // A Node joins with a range of its own, then leaves.
    let node = "podns-reverse-node";
    let _ = c.try_kubectl(&["delete", "node", node], None);
    c.apply(&format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {node}}}\nspec: {{podCIDR: 10.250.7.0/24, podCIDRs: [10.250.7.0/24]}}\n"
    ));
    let name = "9.7.250.10.in-addr.arpa.";
    wait_for("the new Node's range is owned", secs(20), || {
        (rc(name) == ResponseCode::NXDomain).then_some(())
    });
    c.kubectl(&["delete", "node", node]);
    wait_for("the deleted Node's range is dropped", secs(20), || {
        (rc(name) == ResponseCode::Refused).then_some(())
    });
}

#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn without_node_and_service_cidr_rbac_no_reverse_zone_is_owned() {
    let c = cluster();
    let (ns, pods) = crate::records::trained(&c, "revrbac", 1);
    let ns = ns.name.as_str();
    c.apply(&format!(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: podns-no-nodes, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {ns}-no-nodes}}
rules:
- {{apiGroups: [""], resources: [pods, services], verbs: [get, list, watch]}}
- {{apiGroups: [batch], resources: [jobs], verbs: [get, list, watch]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {ns}-no-nodes}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {ns}-no-nodes}}
subjects: [{{kind: ServiceAccount, name: podns-no-nodes, namespace: {ns}}}]
"#
    ));
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("no-nodes.kubeconfig");
    token_kubeconfig(&c, ns, "podns-no-nodes", &kc);
    // Ready all the same: forward names answer.
    let p = Podns::ready(&kc, &[]);
    p.wait_addrs(
        &format!("{}.train.{ns}.svc", pods[0].0),
        &[pods[0].1.clone()],
        secs(10),
    );
    // One clear line each, naming the fallback.
    for resource in ["nodes", "servicecidrs"] {
        let line = wait_for(&format!("the line about {resource}"), secs(30), || {
            p.log
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(&format!("cannot list {resource}")))
                .cloned()
        });
        assert!(line.contains("REFUSED"), "{line}");
    }
    // Nothing learned: no zone is owned, so no reverse name is ever an
    // authoritative NXDOMAIN (the next nameserver answers it). A pod's
    // address is held, and its PTR answered all the same.
    assert_eq!(
        answer_lines(&p.ask(&reverse_v4(&pods[0].1), RecordType::PTR)),
        vec![format!(
            "{} PTR {}.train.{ns}.svc.cluster.local.",
            reverse_v4(&pods[0].1),
            pods[0].0
        )]
    );
    for name in [
        "8.8.8.8.in-addr.arpa.".to_string(),
        "254.255.96.10.in-addr.arpa.".to_string(),
    ] {
        assert_eq!(
            rcode(&p.ask(&name, RecordType::PTR)),
            ResponseCode::Refused,
            "{name}"
        );
    }
    let _ = c.try_kubectl(
        &[
            "delete",
            "clusterrole,clusterrolebinding",
            &format!("{ns}-no-nodes"),
        ],
        None,
    );
}
