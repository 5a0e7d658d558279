//! Every record kind of docs/records.md's tables, from objects made with kubectl
//! and pod IPs set by kwok; the rank view from an Indexed Job whose pods the
//! real Job controller made.

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};

use crate::support::*;

/// A headless gang with hostnames (`train-<i>.train`), a ClusterIP
/// Service with a named port and its pods, an ExternalName Service.
/// [`workload`] applied in `ns`, once its `ranks` pods have IPs: their
/// names and IPs.
pub fn train(c: &Cluster, ns: &str, ranks: usize) -> Vec<(String, String)> {
    c.apply(&workload(ns, ranks));
    c.pod_ips(ns, "app=train", ranks)
}

/// A fresh namespace (see [`Cluster::namespace`]) with [`train`]'s workload
/// of `ranks` pods in it: the namespace's guard and the pods' names and IPs.
pub fn trained<'c>(
    c: &'c Cluster,
    prefix: &str,
    ranks: usize,
) -> (Namespace<'c>, Vec<(String, String)>) {
    let ns = c.namespace(prefix);
    let pods = train(c, &ns.name, ranks);
    (ns, pods)
}

pub fn workload(ns: &str, ranks: usize) -> String {
    let mut y = format!(
        r#"
apiVersion: v1
kind: Service
metadata: {{name: train, namespace: {ns}}}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {{app: train}}
  ports: [{{name: nccl, port: 29500, targetPort: nccl, protocol: TCP}}]
---
apiVersion: v1
kind: Service
metadata: {{name: api, namespace: {ns}}}
spec:
  selector: {{app: api}}
  ports: [{{name: http, port: 80, targetPort: 8080, protocol: TCP}}]
---
apiVersion: v1
kind: Service
metadata: {{name: ext, namespace: {ns}}}
spec: {{type: ExternalName, externalName: db.example.com}}
---
apiVersion: v1
kind: Pod
metadata: {{name: api-0, namespace: {ns}, labels: {{app: api}}}}
spec:
  containers: [{{name: api, image: fake, ports: [{{name: http, containerPort: 8080}}]}}]
"#
    );
    for i in 0..ranks {
        y.push_str(&format!(
            r#"---
apiVersion: v1
kind: Pod
metadata: {{name: train-{i}, namespace: {ns}, labels: {{app: train}}}}
spec:
  hostname: train-{i}
  subdomain: train
  containers: [{{name: worker, image: fake, ports: [{{name: nccl, containerPort: 29500}}]}}]
"#
        ));
    }
    y
}

#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn every_record_kind_from_kubectl_objects() {
    let c = cluster();
    let ns = c.namespace("records");
    let ns = ns.name.as_str();
    let train = train(&c, ns, 2);
    let api_pod = c.pod_ips(ns, "app=api", 1);
    let cluster_ip = c
        .kubectl(&[
            "get",
            "svc",
            "api",
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.clusterIP}",
        ])
        .trim()
        .to_string();
    let p = Podns::ready(&c.kubeconfig, &[]);
    let ip_of = |pod: &str| train.iter().find(|(n, _)| n == pod).unwrap().1.clone();
    let ip0 = ip_of("train-0");

    // Hostname names, the headless set, a pod's dashed name under it.
    p.wait_addrs(&format!("train-0.train.{ns}.svc"), &[ip0.clone()], secs(10));
    p.wait_addrs(
        &format!("train-1.train.{ns}.svc"),
        &[ip_of("train-1")],
        secs(10),
    );
    let all: Vec<String> = train.iter().map(|(_, ip)| ip.clone()).collect();
    p.wait_addrs(&format!("train.{ns}.svc"), &all, secs(10));
    p.wait_addrs(
        &format!("{}.train.{ns}.svc", dashed(&ip0)),
        &[ip0.clone()],
        secs(10),
    );
    // ClusterIP, ExternalName, pod.Z.
    p.wait_addrs(&format!("api.{ns}.svc"), &[cluster_ip.clone()], secs(10));
    let ext = p.ask(&format!("ext.{ns}.svc"), RecordType::CNAME);
    assert_eq!(
        answer_lines(&ext),
        vec![format!("ext.{ns}.svc.cluster.local. CNAME db.example.com.")]
    );
    p.wait_addrs(
        &format!("{}.{ns}.pod", dashed(&api_pod[0].1)),
        &[api_pod[0].1.clone()],
        secs(10),
    );
    // SRV: the headless named port (the pod's container port by name) and
    // the ClusterIP Service's port.
    let srv = p.ask(&format!("_nccl._tcp.train.{ns}.svc"), RecordType::SRV);
    assert_eq!(
        srv_lines(&srv),
        vec![
            format!("29500 train-0.train.{ns}.svc.cluster.local."),
            format!("29500 train-1.train.{ns}.svc.cluster.local."),
        ],
        "{srv:?}"
    );
    assert!(
        !addrs(&srv).is_empty() || srv.additionals.len() >= 2,
        "SRV glue in Additional: {srv:?}"
    );
    let srv = p.ask(&format!("_http._tcp.api.{ns}.svc"), RecordType::SRV);
    assert!(
        srv.answers.iter().any(|r| matches!(&r.data,
            RData::SRV(s) if s.port == 80 && s.target.to_ascii() == format!("api.{ns}.svc.cluster.local."))),
        "{srv:?}"
    );
    // PTR of a pod (its hostname name) and of the ClusterIP.
    let ptr = p.ask(&reverse_v4(&ip0), RecordType::PTR);
    assert_eq!(
        answer_lines(&ptr),
        vec![format!(
            "{} PTR train-0.train.{ns}.svc.cluster.local.",
            reverse_v4(&ip0)
        )]
    );
    let ptr = p.ask(&reverse_v4(&cluster_ip), RecordType::PTR);
    assert_eq!(
        answer_lines(&ptr),
        vec![format!(
            "{} PTR api.{ns}.svc.cluster.local.",
            reverse_v4(&cluster_ip)
        )]
    );
    // The zone's own records, NODATA and NXDOMAIN with the SOA.
    assert_eq!(
        p.ask("cluster.local.", RecordType::SOA).answers.len(),
        1,
        "SOA"
    );
    assert_eq!(
        rcode(&p.ask("dns-version", RecordType::TXT)),
        ResponseCode::NoError
    );
    let nodata = p.ask(&format!("train-0.train.{ns}.svc"), RecordType::AAAA);
    assert_eq!(rcode(&nodata), ResponseCode::NoError);
    assert!(nodata.answers.is_empty() && !nodata.authorities.is_empty());
    let nx = p.ask(&format!("train-9.train.{ns}.svc"), RecordType::A);
    assert_eq!(rcode(&nx), ResponseCode::NXDomain);

    // A pod deleted by kubectl leaves the set.
    c.kubectl(&["delete", "pod", "train-1", "-n", ns, "--wait=false"]);
    p.wait_addrs(&format!("train.{ns}.svc"), &[ip0.clone()], secs(30));
}

/// An Indexed Job: the Job controller makes `<job>-<i>` pods with the
/// completion-index annotation and label; podns's rank view answers
/// `<i>.<job>.<ns>.rank` and the gang's TXT.
#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn rank_view_from_a_real_indexed_job() {
    let c = cluster();
    let ns = c.namespace("rank");
    let ns = ns.name.as_str();
    c.apply(&format!(
        r#"
apiVersion: v1
kind: Service
metadata: {{name: llama, namespace: {ns}}}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {{job-name: llama}}
---
apiVersion: batch/v1
kind: Job
metadata: {{name: llama, namespace: {ns}}}
spec:
  completions: 4
  parallelism: 4
  completionMode: Indexed
  backoffLimit: 0
  template:
    spec:
      subdomain: llama
      restartPolicy: Never
      containers: [{{name: trainer, image: fake}}]
"#
    ));
    let pods = c.pod_ips(ns, "job-name=llama", 4);
    let p = Podns::ready(&c.kubeconfig, &[]);
    for i in 0..4 {
        let ip = pods
            .iter()
            .find(|(n, _)| n.starts_with(&format!("llama-{i}-")))
            .unwrap_or_else(|| panic!("no pod of index {i} in {pods:?}"))
            .1
            .clone();
        p.wait_addrs(&format!("{i}.llama.{ns}.rank"), &[ip.clone()], secs(10));
        // The Job controller sets hostname `<job>-<index>` and the Job's
        // subdomain: the same pod by its hostname name.
        p.wait_addrs(&format!("llama-{i}.llama.{ns}.svc"), &[ip], secs(10));
    }
    let leader = p.ask(&format!("leader.llama.{ns}.rank"), RecordType::A);
    assert_eq!(
        addrs(&leader),
        addrs(&p.ask(&format!("0.llama.{ns}.rank"), RecordType::A))
    );
    let txt = p.ask(&format!("llama.{ns}.rank"), RecordType::TXT);
    let text = answer_lines(&txt).join(" ");
    assert!(
        text.contains("world=4") && text.contains("published=4"),
        "{text}"
    );
    // Rank 07 is not rank 7, and rank 4 does not exist yet: NXDOMAIN.
    assert_eq!(
        rcode(&p.ask(&format!("04.llama.{ns}.rank"), RecordType::A)),
        ResponseCode::NXDomain
    );
    assert_eq!(
        rcode(&p.ask(&format!("4.llama.{ns}.rank"), RecordType::A)),
        ResponseCode::NXDomain
    );
}
