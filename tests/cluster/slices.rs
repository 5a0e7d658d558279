//! Services without a selector on the real control plane: a hand-written
//! EndpointSlice applied with kubectl, Endpoints the real
//! endpointslicemirroring controller turns into a slice, and the
//! EndpointSlice controller's own slices, which podns's label selector
//! leaves out (checked against the real API server's selector evaluation).

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use crate::support::*;

/// The label selector podns watches EndpointSlices with.
const USER_SLICES: &str = podns_server::k8s::watch::USER_SLICES;

#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn services_without_selector_answer_from_hand_written_and_mirrored_slices() {
    let c = cluster();
    let ns = c.namespace("slices");
    let ns = ns.name.as_str();
    c.apply(&format!(
        r#"
apiVersion: v1
kind: Service
metadata: {{name: db, namespace: {ns}}}
spec:
  clusterIP: None
  ports: [{{name: pg, port: 5432, protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-manual
  namespace: {ns}
  labels: {{kubernetes.io/service-name: db}}
addressType: IPv4
ports: [{{name: pg, port: 5432, protocol: TCP}}]
endpoints:
- addresses: ["192.0.2.10"]
  hostname: primary
  conditions: {{ready: true}}
- addresses: ["192.0.2.11"]
  conditions: {{ready: false}}
---
apiVersion: v1
kind: Service
metadata: {{name: legacy, namespace: {ns}}}
spec:
  clusterIP: None
  ports: [{{name: http, port: 80, protocol: TCP}}]
---
apiVersion: v1
kind: Endpoints
metadata: {{name: legacy, namespace: {ns}}}
subsets:
- addresses: [{{ip: 192.0.2.20, hostname: old-0}}]
  ports: [{{name: http, port: 80, protocol: TCP}}]
---
apiVersion: v1
kind: Service
metadata: {{name: api, namespace: {ns}}}
spec:
  clusterIP: None
  selector: {{app: api}}
  ports: [{{name: http, port: 80, protocol: TCP}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: api-0, namespace: {ns}, labels: {{app: api}}}}
spec:
  containers: [{{name: api, image: fake}}]
"#
    ));
    // The real controllers did their part: the mirroring controller made
    // a slice for `legacy`, the EndpointSlice controller one for `api`.
    let managers = |svc: &str| {
        c.kubectl(&[
            "get",
            "endpointslices",
            "-n",
            ns,
            "-l",
            &format!("kubernetes.io/service-name={svc}"),
            "-o",
            "jsonpath={.items[*].metadata.labels.endpointslice\\.kubernetes\\.io/managed-by}",
        ])
    };
    wait_for("the mirrored and the controller's slices", secs(60), || {
        (managers("legacy").contains("endpointslicemirroring-controller.k8s.io")
            && managers("api").contains("endpointslice-controller.k8s.io"))
        .then_some(())
    });
    // The API server's own evaluation of podns's selector: every slice
    // but the EndpointSlice controller's.
    let listed = c.kubectl(&[
        "get",
        "endpointslices",
        "-n",
        ns,
        "-l",
        USER_SLICES,
        "-o",
        "jsonpath={.items[*].metadata.labels.kubernetes\\.io/service-name}",
    ]);
    let mut services: Vec<&str> = listed.split_whitespace().collect();
    services.sort();
    assert_eq!(services, ["db", "legacy"], "{listed}");

    let p = Podns::ready(&c.kubeconfig, &["--publish=ready"]);
    p.wait_addrs(&format!("db.{ns}.svc"), &["192.0.2.10".into()], secs(10));
    p.wait_addrs(
        &format!("primary.db.{ns}.svc"),
        &["192.0.2.10".into()],
        secs(10),
    );
    p.wait_addrs(
        &format!("legacy.{ns}.svc"),
        &["192.0.2.20".into()],
        secs(10),
    );
    p.wait_addrs(
        &format!("old-0.legacy.{ns}.svc"),
        &["192.0.2.20".into()],
        secs(10),
    );
    let nx = p.ask(&format!("192-0-2-11.db.{ns}.svc"), RecordType::A);
    assert_eq!(rcode(&nx), ResponseCode::NXDomain, "not ready: {nx:?}");
    let srv = p.ask(&format!("_pg._tcp.db.{ns}.svc"), RecordType::SRV);
    assert_eq!(
        srv_lines(&srv),
        [format!("5432 primary.db.{ns}.svc.cluster.local.")],
        "{srv:?}"
    );
    // 192.0.2.10 is outside the cluster's pod and Service ranges that podns
    // learned, but the address is an endpoint podns holds: its PTR answers,
    // authoritative, with no zone claimed around it. A neighbour no one
    // holds is REFUSED (the resolver asks its next server), never an
    // NXDOMAIN for a zone that is not podns's.
    let ptr = p.ask(&reverse_v4("192.0.2.10"), RecordType::PTR);
    assert_eq!(
        answer_lines(&ptr),
        [format!(
            "{} PTR primary.db.{ns}.svc.cluster.local.",
            reverse_v4("192.0.2.10")
        )],
        "{ptr:?}"
    );
    assert!(
        ptr.metadata.authoritative && ptr.authorities.is_empty(),
        "{ptr:?}"
    );
    let stranger = p.ask(&reverse_v4("192.0.2.99"), RecordType::PTR);
    assert_eq!(rcode(&stranger), ResponseCode::Refused, "{stranger:?}");
    // An operator who owns that range says so: the held endpoint still
    // answers and the stranger is NXDOMAIN, from the owned zone.
    let owner = Podns::ready(
        &c.kubeconfig,
        &["--publish=ready", "--reverse-cidr=192.0.2.0/24"],
    );
    let ptr = owner.ask(&reverse_v4("192.0.2.10"), RecordType::PTR);
    assert_eq!(
        answer_lines(&ptr),
        [format!(
            "{} PTR primary.db.{ns}.svc.cluster.local.",
            reverse_v4("192.0.2.10")
        )]
    );
    let stranger = owner.ask(&reverse_v4("192.0.2.99"), RecordType::PTR);
    assert_eq!(rcode(&stranger), ResponseCode::NXDomain, "{stranger:?}");
    drop(owner);

    // kubectl edits the slice: the not-ready endpoint becomes ready.
    c.kubectl(&[
        "patch",
        "endpointslice",
        "db-manual",
        "-n",
        ns,
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/endpoints/1/conditions/ready","value":true}]"#,
    ]);
    p.wait_addrs(
        &format!("db.{ns}.svc"),
        &["192.0.2.10".into(), "192.0.2.11".into()],
        secs(10),
    );
    // Deleted: the Service answers no address again.
    c.kubectl(&["delete", "endpointslice", "db-manual", "-n", ns]);
    wait_for("the slice's addresses gone", secs(10), || {
        let m = p.ask(&format!("db.{ns}.svc"), RecordType::A);
        (rcode(&m) == ResponseCode::NoError && m.answers.is_empty()).then_some(())
    });
    assert_eq!(
        p.metric("podns_watch_synced{resource=\"endpointslices\"}"),
        1.0
    );
}

/// Without RBAC on endpointslices podns still becomes ready and answers
/// everything else, with one error line that names the resource.
#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn without_endpointslice_rbac_everything_else_is_served() {
    let c = cluster();
    let (ns, pods) = crate::records::trained(&c, "noslices", 1);
    let ns = ns.name.as_str();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("no-slices.kubeconfig");
    crate::rbac::limited_podns(
        &c,
        ns,
        "no-slices",
        r#"
- {apiGroups: [""], resources: [pods, services], verbs: [get, list, watch]}
- {apiGroups: [batch], resources: [jobs], verbs: [get, list, watch]}"#,
        &kc,
    );
    let p = Podns::ready(&kc, &[]);
    p.wait_addrs(
        &format!("{}.train.{ns}.svc", pods[0].0),
        &[pods[0].1.clone()],
        secs(10),
    );
    let lines: Vec<String> = p
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("ERROR") && l.contains("endpointslices"))
        .cloned()
        .collect();
    assert_eq!(lines.len(), 1, "one error line: {lines:?}");
    assert!(lines[0].contains("check RBAC"), "{}", lines[0]);
    let _ = c.try_kubectl(
        &[
            "delete",
            "clusterrole,clusterrolebinding",
            &format!("{ns}-no-slices"),
        ],
        None,
    );
}
