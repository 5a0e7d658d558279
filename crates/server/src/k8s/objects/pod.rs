//! Pods: what DNS reads of them (names, addresses, readiness, ports for
//! SRV), what the relay serves, and the index input ([`PodInfo`]).

use podns_kapi::Kind;

use super::loose::{Loose, LooseStr, LooseVec};
use super::meta::Meta;
use super::served::Relayed;
use crate::index::types::{ContainerPort, Phase, PodInfo, Update};
use crate::k8s::convert::{
    ConvertError, created, dns_label, ips, key, listed_or_single, non_empty, port_number, protocol,
};
use crate::labels::RANK_LABELS;

fields! {
    /// `spec.containers[].ports[]`.
    pub struct ContainerPortRaw {
        pub name: LooseStr = ("name", 1),
        pub container_port: Loose<i64> = ("containerPort", 3),
        pub protocol: LooseStr = ("protocol", 4),
    }
}

fields! {
    /// `spec.containers[]`: only the name and ports.
    pub struct ContainerRaw {
        pub name: LooseStr = ("name", 1),
        pub ports: LooseVec<ContainerPortRaw> = ("ports", 6),
    }
}

fields! {
    pub struct PodSpecRaw {
        pub containers: LooseVec<ContainerRaw> = ("containers", 2),
        /// Not read by DNS: the relay selects on it (`spec.nodeName=`).
        pub node_name: LooseStr = ("nodeName", 10),
        pub host_network: Loose<bool> = ("hostNetwork", 11),
        pub hostname: LooseStr = ("hostname", 16),
        pub subdomain: LooseStr = ("subdomain", 17),
    }
}

fields! {
    /// `status.conditions[]`.
    pub struct ConditionRaw {
        pub type_: LooseStr = ("type", 1),
        pub status: LooseStr = ("status", 2),
    }
}

fields! {
    /// `status.podIPs[]`.
    pub struct PodIpRaw {
        pub ip: LooseStr = ("ip", 1),
    }
}

fields! {
    pub struct PodStatusRaw {
        pub phase: LooseStr = ("phase", 1),
        pub conditions: LooseVec<ConditionRaw> = ("conditions", 2),
        pub pod_ip: LooseStr = ("podIP", 6),
        pub pod_ips: LooseVec<PodIpRaw> = ("podIPs", 12),
    }
}

fields! {
    pub struct PodRaw {
        pub metadata: Loose<Meta> = ("metadata", 1),
        pub spec: Loose<PodSpecRaw> = ("spec", 2),
        pub status: Loose<PodStatusRaw> = ("status", 3),
    }
}

slim! {
    /// A Pod with only what DNS reads.
    pub struct SlimPod: PodRaw(Kind::Pod, NamespaceResourceScope) -> PodInfo, convert, Update::Pod, relayed {
        pub spec: PodSpecRaw,
        pub status: PodStatusRaw,
    }
}

/// The index input of a pod.
fn convert(p: &SlimPod) -> Result<PodInfo, ConvertError> {
    let key = key(&p.metadata)?;
    let (spec, status) = (&p.spec, &p.status);

    let ips = ips(listed_or_single(
        status
            .pod_ips
            .items()
            .filter_map(|i| i.ip.get().map(String::as_str)),
        &status.pod_ip,
    )
    .into_iter()
    .filter(|s| !s.is_empty()))?;

    let ready = status.conditions.items().any(|c| {
        c.type_.get().is_some_and(|t| t == "Ready") && c.status.get().is_some_and(|s| s == "True")
    });

    let ports = spec
        .containers
        .items()
        .flat_map(|c| c.ports.items())
        .filter_map(|cp| {
            Some(ContainerPort {
                name: non_empty(&cp.name),
                port: port_number(*cp.container_port.get()?)?,
                protocol: protocol(&cp.protocol)?,
            })
        })
        .collect();

    Ok(PodInfo {
        key,
        uid: p.metadata.uid.clone().unwrap_or_default(),
        hostname: dns_label(&spec.hostname),
        subdomain: dns_label(&spec.subdomain),
        host_network: spec.host_network.get().copied().unwrap_or(false),
        ips,
        phase: status
            .phase
            .get()
            .map_or(Phase::Pending, |s| Phase::parse(s)),
        ready,
        deleting: p.meta.deletion_timestamp.is_some(),
        created: created(&p.meta)?,
        labels: p.meta.labels.clone(),
        annotations: p.meta.annotations.clone(),
        ports,
    })
}

impl Relayed for SlimPod {
    fn rules(raw: &mut PodRaw) {
        let meta = raw.metadata.or_default_mut();
        // Nothing reads a pod's uid, and it is 40 of the few hundred bytes
        // of every event.
        meta.uid = Loose::Absent;
        // The Job controller writes the completion index as a label and as
        // an annotation: served once.
        if let Loose::Ok(annotations) = &mut meta.annotations {
            let labels = meta.labels.get().map_or(&[][..], |l| &l.entries[..]);
            annotations
                .entries
                .retain(|a| !(RANK_LABELS.contains(&a.0.as_str()) && labels.contains(a)));
            if annotations.entries.is_empty() {
                meta.annotations = Loose::Absent;
            }
        }

        let spec = raw.spec.or_default_mut();
        // Containers only for their named ports (SRV of a pod's ports).
        // What the API's schema requires is written even when absent, as
        // the zero value a typed client reads for it: `containers`, a
        // container's `name`, a port's `containerPort`.
        let containers = spec.containers.or_default_mut();
        containers.retain(|c| matches!(c, Loose::Ok(_)));
        for c in containers.iter_mut().filter_map(|c| match c {
            Loose::Ok(c) => Some(c),
            _ => None,
        }) {
            c.name.or_default_mut();
            c.ports.retain_or_absent(|p| {
                p.container_port.or_default_mut();
                // TCP is what an unset protocol means.
                if p.protocol.get().is_some_and(|p| p == "TCP") {
                    p.protocol = Loose::Absent;
                }
                true
            });
        }

        let status = raw.status.or_default_mut();
        // Of the conditions, DNS reads Ready only (its `status` required).
        status.conditions.retain_or_absent(|c| {
            c.status.or_default_mut();
            c.type_.get().is_some_and(|t| t == "Ready")
        });
        status.pod_ips.retain_or_absent(|i| i.ip.get().is_some());
        // `podIPs` only when it says more than `podIP` (dual-stack): the
        // API keeps `podIP == podIPs[0]`.
        if let Loose::Ok(ips) = &status.pod_ips
            && let [Loose::Ok(only)] = &ips[..]
            && only.ip == status.pod_ip
        {
            status.pod_ips = Loose::Absent;
        }
    }

    fn node_name(raw: &PodRaw) -> &str {
        raw.spec
            .get()
            .and_then(|s| s.node_name.get())
            .map_or("", String::as_str)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::index::ObjKey;
    use crate::index::types::Proto;
    use crate::k8s::objects::Slim;
    use crate::k8s::objects::served::tests::round_trip;
    use kube::core::ObjectList;
    use kube::core::WatchEvent;
    use serde_json::{Value, json};

    fn good(name: &str) -> String {
        format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ml","uid":"u-{name}","resourceVersion":"5"}},
               "spec":{{"containers":[{{"name":"c","ports":[{{"containerPort":80}}]}}]}},
               "status":{{"phase":"Running","podIP":"10.0.0.1"}}}}"#
        )
    }

    fn list(items: &[String]) -> String {
        format!(
            r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"99"}},"items":[{}]}}"#,
            items.join(",")
        )
    }

    /// Each bad pod sits between two good ones in one list; the list decodes,
    /// the neighbours are intact, and the bad one is flagged.
    #[test]
    fn malformed_items_do_not_fail_the_list() {
        let bad = [
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"status":{"podIP":10}}"#,
                "podIP",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"spec":{"containers":"nope"}}"#,
                "containers",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml","labels":["a","b"]}}"#,
                "labels",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml","labels":{"a":{"x":[1,2]}}}}"#,
                "labels",
            ),
            (r#"{"metadata":{"name":7,"namespace":"ml"}}"#, "name"),
            (r#"{"metadata":"x"}"#, "metadata"),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"spec":{"hostNetwork":"yes"}}"#,
                "hostNetwork",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"spec":{"containers":[{"ports":[{"containerPort":"80"}]}]}}"#,
                "containerPort",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"spec":{"containers":[{"ports":[{"containerPort":8.5}]}]}}"#,
                "containerPort",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"spec":{"containers":[{"ports":[7]}]}}"#,
                "ports",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"spec":{"containers":[{"ports":[{"containerPort":123456789012345678901234567890}]}]}}"#,
                "containerPort",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"status":{"podIPs":{"ip":"10.0.0.1"}}}"#,
                "podIPs",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"status":{"conditions":[{"type":"Ready","status":true}]}}"#,
                "status",
            ),
            (
                r#"{"metadata":{"name":"b","namespace":"ml"},"status":[]}"#,
                "status",
            ),
            (r#""just a string""#, "object"),
            (r#"42"#, "object"),
            (r#"[{"metadata":{}}]"#, "object"),
        ];
        for (item, field) in bad {
            let json = list(&[good("a"), item.to_string(), good("c")]);
            let l: ObjectList<SlimPod> = serde_json::from_str(&json)
                .unwrap_or_else(|e| panic!("list with {item} failed: {e}"));
            assert_eq!(l.metadata.resource_version.as_deref(), Some("99"));
            assert_eq!(l.items.len(), 3, "{item}");
            assert_eq!(l.items[1].malformed, Some(field), "{item}");
            for ok in [&l.items[0], &l.items[2]] {
                assert_eq!(ok.malformed, None);
                assert_eq!(ok.status.pod_ip.get().map(String::as_str), Some("10.0.0.1"));
                assert_eq!(ok.metadata.resource_version.as_deref(), Some("5"));
            }
            assert_eq!(l.items[0].metadata.name.as_deref(), Some("a"));
            assert_eq!(l.items[2].metadata.name.as_deref(), Some("c"));
        }
    }

    #[test]
    fn null_is_absent_and_duplicate_keys_do_not_fail() {
        let p: SlimPod = serde_json::from_str(
            r#"{"metadata":{"name":"a","name":"b","namespace":"ml","labels":null,"annotations":null},
                "spec":null,"status":{"podIP":null,"podIPs":null}}"#,
        )
        .unwrap();
        assert_eq!(p.malformed, None);
        assert_eq!(p.metadata.name.as_deref(), Some("b"));
        assert!(p.meta.labels.is_empty());
    }

    #[test]
    fn watch_event_with_malformed_object_decodes() {
        let line = r#"{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ml","resourceVersion":"12"},"status":{"podIP":{"v":4}}}}"#;
        let ev: WatchEvent<SlimPod> = serde_json::from_str(line).unwrap();
        let WatchEvent::Modified(p) = ev else {
            panic!("wrong event: {ev:?}")
        };
        assert_eq!(p.malformed, Some("podIP"));
        assert_eq!(
            kube::ResourceExt::resource_version(&p).as_deref(),
            Some("12")
        );
        // The object before the type, as some proxies reorder keys.
        let line = r#"{"object":{"metadata":{"name":"a","namespace":"ml","resourceVersion":"13"}},"type":"ADDED"}"#;
        let ev: WatchEvent<SlimPod> = serde_json::from_str(line).unwrap();
        assert!(matches!(ev, WatchEvent::Added(p) if p.malformed.is_none()));
    }

    fn base_pod() -> Value {
        json!({
            "metadata": {
                "name": "train-0", "namespace": "ml", "uid": "u-1",
                "resourceVersion": "7",
                "creationTimestamp": "2024-05-01T10:00:00Z",
                "labels": {"app": "train"},
                "annotations": {
                    "batch.kubernetes.io/job-completion-index": "0",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}"
                }
            },
            "spec": {
                "hostname": "train-0", "subdomain": "workers",
                "containers": [{"name": "c", "ports": [
                    {"name": "nccl", "containerPort": 29500},
                    {"containerPort": 5353, "protocol": "UDP"}
                ]}]
            },
            "status": {
                "phase": "Running", "podIP": "10.0.0.5",
                "podIPs": [{"ip": "10.0.0.5"}, {"ip": "fd00::5"}],
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        })
    }

    fn pod_of(v: Value) -> Result<PodInfo, ConvertError> {
        serde_json::from_value::<SlimPod>(v).unwrap().convert()
    }

    #[test]
    fn pod_all_fields() {
        let p = pod_of(base_pod()).unwrap();
        assert_eq!(p.key, ObjKey::new("ml", "train-0"));
        assert_eq!(p.uid, "u-1");
        assert_eq!(p.hostname.as_deref(), Some("train-0"));
        assert_eq!(p.subdomain.as_deref(), Some("workers"));
        assert!(!p.host_network);
        assert_eq!(
            p.ips,
            vec![
                "10.0.0.5".parse::<IpAddr>().unwrap(),
                "fd00::5".parse().unwrap()
            ]
        );
        assert_eq!(p.phase, Phase::Running);
        assert!(p.ready);
        assert!(!p.deleting);
        assert_eq!(p.created, 1_714_557_600);
        assert_eq!(p.labels, vec![("app".into(), "train".into())]);
        assert_eq!(
            p.annotations,
            vec![(
                "batch.kubernetes.io/job-completion-index".into(),
                "0".into()
            )]
        );
        assert_eq!(
            p.ports,
            vec![
                ContainerPort {
                    name: Some("nccl".into()),
                    port: 29500,
                    protocol: Proto::Tcp
                },
                ContainerPort {
                    name: None,
                    port: 5353,
                    protocol: Proto::Udp
                },
            ]
        );
    }

    #[test]
    fn name_and_namespace_required() {
        let mut v = base_pod();
        v["metadata"].as_object_mut().unwrap().remove("name");
        assert_eq!(pod_of(v).unwrap_err(), ConvertError::MissingName);
        let mut v = base_pod();
        v["metadata"]["namespace"] = json!("");
        assert_eq!(pod_of(v).unwrap_err(), ConvertError::MissingNamespace);
    }

    #[test]
    fn invalid_hostname_and_subdomain_are_unset() {
        for bad in ["Train-0", "-a", "a-", "a_b", "a.b", "", &"x".repeat(64)] {
            let mut v = base_pod();
            v["spec"]["hostname"] = json!(bad);
            v["spec"]["subdomain"] = json!(bad);
            let p = pod_of(v).unwrap();
            assert_eq!(p.hostname, None, "{bad:?}");
            assert_eq!(p.subdomain, None, "{bad:?}");
        }
        let mut v = base_pod();
        v["spec"]["hostname"] = json!("0abc-9");
        assert_eq!(pod_of(v).unwrap().hostname.as_deref(), Some("0abc-9"));
    }

    #[test]
    fn ips_prefer_pod_ips_then_pod_ip_dedupe_and_reject_invalid() {
        let mut v = base_pod();
        v["status"]["podIPs"] = json!([{"ip": "10.0.0.6"}, {"ip": "10.0.0.6"}, {"ip": "fd00::6"}]);
        assert_eq!(
            pod_of(v).unwrap().ips,
            vec![
                "10.0.0.6".parse::<IpAddr>().unwrap(),
                "fd00::6".parse().unwrap()
            ]
        );
        let mut v = base_pod();
        v["status"].as_object_mut().unwrap().remove("podIPs");
        assert_eq!(
            pod_of(v).unwrap().ips,
            vec!["10.0.0.5".parse::<IpAddr>().unwrap()]
        );
        let mut v = base_pod();
        v["status"]["podIPs"] = json!([]);
        v["status"]["podIP"] = json!("");
        assert!(pod_of(v).unwrap().ips.is_empty());
        let mut v = base_pod();
        v["status"]["podIPs"] = json!([{"ip": "10.0.0.300"}]);
        assert_eq!(
            pod_of(v).unwrap_err(),
            ConvertError::InvalidIp("10.0.0.300".into())
        );
    }

    #[test]
    fn ready_only_when_ready_condition_true() {
        let mut v = base_pod();
        v["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}, {"type": "ContainersReady", "status": "True"}]);
        assert!(!pod_of(v).unwrap().ready);
        let mut v = base_pod();
        v["status"].as_object_mut().unwrap().remove("conditions");
        assert!(!pod_of(v).unwrap().ready);
    }

    #[test]
    fn phase_deleting_created_host_network() {
        let mut v = base_pod();
        v["status"]["phase"] = json!("Succeeded");
        v["metadata"]["deletionTimestamp"] = json!("2024-05-01T11:00:00Z");
        v["spec"]["hostNetwork"] = json!(true);
        v["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("creationTimestamp");
        let p = pod_of(v).unwrap();
        assert_eq!(p.phase, Phase::Succeeded);
        assert!(p.deleting);
        assert!(p.host_network);
        assert_eq!(p.created, 0);

        let mut v = base_pod();
        v["status"].as_object_mut().unwrap().remove("phase");
        assert_eq!(pod_of(v).unwrap().phase, Phase::Pending);

        let mut v = base_pod();
        v["metadata"]["creationTimestamp"] = json!("yesterday");
        assert!(matches!(
            pod_of(v).unwrap_err(),
            ConvertError::InvalidTimestamp(_)
        ));
    }

    #[test]
    fn container_ports_default_tcp_and_skip_invalid() {
        let mut v = base_pod();
        v["spec"]["containers"] = json!([
            {"ports": [{"containerPort": 0}, {"containerPort": 70000}, {"containerPort": -1},
                       {"containerPort": 80, "protocol": "HTTP"}, {"name": "", "containerPort": 81}]},
            {"name": "sidecar"},
            {"ports": [{"name": "s", "containerPort": 82, "protocol": "SCTP"}]}
        ]);
        assert_eq!(
            pod_of(v).unwrap().ports,
            vec![
                ContainerPort {
                    name: None,
                    port: 81,
                    protocol: Proto::Tcp
                },
                ContainerPort {
                    name: Some("s".into()),
                    port: 82,
                    protocol: Proto::Sctp
                },
            ]
        );
    }

    #[test]
    fn malformed_pod_is_rejected() {
        let mut v = base_pod();
        v["status"]["podIP"] = json!(10);
        assert_eq!(pod_of(v).unwrap_err(), ConvertError::Malformed("podIP"));
        assert_eq!(
            pod_of(json!("a string")).unwrap_err(),
            ConvertError::Malformed("object")
        );
    }

    /// A training pod as the API server writes it (with what podns skips).
    pub(crate) const POD: &str = r#"{"apiVersion":"v1","kind":"Pod",
      "metadata":{"name":"train-0","namespace":"ml","uid":"u-1","resourceVersion":"7",
        "creationTimestamp":"2024-05-01T10:00:00Z",
        "labels":{"app":"train","job-name":"train"},
        "annotations":{"batch.kubernetes.io/job-completion-index":"0","other":"x"},
        "managedFields":[{"manager":"kubelet","operation":"Update","fieldsType":"FieldsV1","fieldsV1":{"f:status":{}}}]},
      "spec":{"hostname":"train-0","subdomain":"workers","containers":[{"name":"c","image":"busybox",
        "env":[{"name":"A","value":"b"}],
        "ports":[{"name":"nccl","containerPort":29500},{"containerPort":5353,"protocol":"UDP"}]}]},
      "status":{"phase":"Running","podIP":"10.0.0.5","podIPs":[{"ip":"10.0.0.5"},{"ip":"fd00::5"}],
        "conditions":[{"type":"Ready","status":"True"}]}}"#;

    /// JSON and Protobuf (the simulator's encoder) decode alike; the relay
    /// serves what an independent encoder makes of the served JSON, and
    /// what it serves decodes back to it.
    #[test]
    fn pod_round_trips() {
        let json: SlimPod = round_trip(&serde_json::from_str(POD).unwrap());
        assert_eq!(json.malformed, None);
        assert_eq!(json.convert().unwrap().ports.len(), 2);
        // As the simulator writes a training pod; then dual-stack, on the
        // host network, terminating.
        let mut pod = podns_sim::workload::sample_job_pod(false);
        pod["metadata"]["resourceVersion"] = json!("8");
        pod["metadata"]["creationTimestamp"] = json!("2026-12-04T09:00:00Z");
        round_trip::<SlimPod>(&pod);
        let mut dual = pod;
        dual["status"]["podIPs"] = json!([{"ip": "10.0.4.17"}, {"ip": "fd00::17"}]);
        dual["spec"]["hostNetwork"] = json!(false);
        dual["metadata"]["deletionTimestamp"] = json!("2026-12-04T10:00:00Z");
        round_trip::<SlimPod>(&dual);
    }

    #[test]
    fn served_pods_keep_what_dns_reads_only() {
        let mut p: SlimPod = serde_json::from_str(POD).unwrap();
        p.meta
            .labels
            .push((crate::labels::COMPLETION_INDEX.into(), "0".into()));
        let Some(crate::k8s::objects::Served::Pod(s)) = p.served() else {
            panic!("a pod is served as a pod")
        };
        let meta = s.metadata.get().unwrap();
        assert_eq!(meta.uid, Loose::Absent, "no uid");
        assert_eq!(
            meta.annotations,
            Loose::Absent,
            "the completion index once, as a label"
        );
        let spec = s.spec.get().unwrap();
        let ports: Vec<_> = spec
            .containers
            .items()
            .flat_map(|c| c.ports.items())
            .map(|p| p.protocol.clone())
            .collect();
        assert_eq!(
            ports,
            [Loose::Absent, Loose::Ok("UDP".into())],
            "TCP unsaid"
        );
        let status = s.status.get().unwrap();
        assert_eq!(status.pod_ips.items().count(), 2, "dual-stack: both");
        // One address: podIP says it all. Conditions: Ready only, and its
        // status is required.
        p.status.pod_ips = Loose::Ok(vec![Loose::Ok(PodIpRaw {
            ip: Loose::Ok("10.0.0.5".into()),
            malformed: None,
        })]);
        p.status.conditions = Loose::Ok(vec![
            Loose::Ok(ConditionRaw {
                type_: Loose::Ok("Initialized".into()),
                ..ConditionRaw::default()
            }),
            Loose::Ok(ConditionRaw {
                type_: Loose::Ok("Ready".into()),
                status: Loose::Ok("False".into()),
                malformed: None,
            }),
        ]);
        let Some(crate::k8s::objects::Served::Pod(s)) = p.served() else {
            panic!("served")
        };
        let status = s.status.get().unwrap();
        assert_eq!(status.pod_ips, Loose::Absent);
        assert_eq!(status.conditions.items().count(), 1);
        p.status.conditions = Loose::Ok(vec![Loose::Ok(ConditionRaw {
            type_: Loose::Ok("Ready".into()),
            ..ConditionRaw::default()
        })]);
        let Some(crate::k8s::objects::Served::Pod(s)) = p.served() else {
            panic!("served")
        };
        let ready = s.status.get().unwrap().conditions.items().next().cloned();
        assert_eq!(
            ready.unwrap().status,
            Loose::Ok(String::new()),
            "a required field as its zero value"
        );
        // Neither a malformed pod.
        p.malformed = Some("podIP");
        assert_eq!(p.served(), None);
    }

    #[test]
    fn realistic_gpu_training_pod() {
        assert!(GPU_POD.len() > 5_000, "fixture is {} bytes", GPU_POD.len());
        let p: SlimPod = serde_json::from_str(GPU_POD).unwrap();
        assert_eq!(p.malformed, None);
        assert_eq!(
            p.metadata.name.as_deref(),
            Some("llm-pretrain-worker-3-x7k2p")
        );
        assert_eq!(p.metadata.namespace.as_deref(), Some("research"));
        assert_eq!(p.metadata.resource_version.as_deref(), Some("48213377"));
        // Only identity reaches ObjectMeta.
        assert!(p.metadata.managed_fields.is_none());
        assert!(p.metadata.owner_references.is_none());
        assert!(p.metadata.labels.is_none());
        assert_eq!(p.meta.labels.len(), 4);
        // Only the annotations the rank view reads are kept.
        assert_eq!(
            p.meta.annotations,
            vec![(
                "batch.kubernetes.io/job-completion-index".into(),
                "3".into()
            )]
        );
        let ports: Vec<_> = p
            .spec
            .containers
            .get()
            .unwrap()
            .iter()
            .flat_map(|c| c.get().unwrap().ports.get().into_iter().flatten())
            .map(|p| p.get().unwrap().container_port.get().copied().unwrap())
            .collect();
        assert_eq!(ports, vec![29500, 8080]);
        let info = p.convert().unwrap();
        assert_eq!(info.hostname.as_deref(), Some("llm-pretrain-worker-3"));
        assert_eq!(info.subdomain.as_deref(), Some("llm-pretrain"));
        assert!(info.ready);
        assert_eq!(info.ips.len(), 2);
        assert_eq!(info.ports.len(), 2);
    }

    const GPU_POD: &str = r#"{
  "apiVersion": "v1",
  "kind": "Pod",
  "metadata": {
    "annotations": {
      "batch.kubernetes.io/job-completion-index": "3",
      "jobset.sigs.k8s.io/jobset-name": "llm-pretrain",
      "kubectl.kubernetes.io/default-container": "trainer",
      "prometheus.io/scrape": "true"
    },
    "creationTimestamp": "2025-03-14T09:26:53Z",
    "finalizers": ["batch.kubernetes.io/job-tracking"],
    "generateName": "llm-pretrain-worker-3-",
    "labels": {
      "batch.kubernetes.io/controller-uid": "5b1c7d2e-9f0a-4c1b-8d3e-2a4f6b8c0d1e",
      "batch.kubernetes.io/job-completion-index": "3",
      "jobset.sigs.k8s.io/jobset-name": "llm-pretrain",
      "training.example.com/role": "worker"
    },
    "managedFields": [
      {
        "apiVersion": "v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {
          "f:metadata": {"f:annotations": {".": {}, "f:batch.kubernetes.io/job-completion-index": {}},
            "f:finalizers": {".": {}, "v:\"batch.kubernetes.io/job-tracking\"": {}},
            "f:generateName": {}, "f:labels": {".": {}, "f:jobset.sigs.k8s.io/jobset-name": {}},
            "f:ownerReferences": {".": {}, "k:{\"uid\":\"5b1c7d2e-9f0a-4c1b-8d3e-2a4f6b8c0d1e\"}": {}}},
          "f:spec": {"f:containers": {"k:{\"name\":\"trainer\"}": {".": {}, "f:env": {".": {},
            "k:{\"name\":\"MASTER_ADDR\"}": {".": {}, "f:name": {}, "f:value": {}}}, "f:image": {}}},
            "f:hostname": {}, "f:subdomain": {}, "f:tolerations": {}}
        },
        "manager": "kube-controller-manager",
        "operation": "Update",
        "time": "2025-03-14T09:26:53Z"
      },
      {
        "apiVersion": "v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}}},
          "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {}}},
        "manager": "kubelet",
        "operation": "Update",
        "subresource": "status",
        "time": "2025-03-14T09:28:10Z"
      }
    ],
    "name": "llm-pretrain-worker-3-x7k2p",
    "namespace": "research",
    "ownerReferences": [
      {
        "apiVersion": "batch/v1",
        "blockOwnerDeletion": true,
        "controller": true,
        "kind": "Job",
        "name": "llm-pretrain-worker",
        "uid": "5b1c7d2e-9f0a-4c1b-8d3e-2a4f6b8c0d1e"
      }
    ],
    "resourceVersion": "48213377",
    "uid": "c0ffee00-1234-4abc-9def-0123456789ab"
  },
  "spec": {
    "affinity": {
      "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
          "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}]}]
        }
      },
      "podAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
          "labelSelector": {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": "llm-pretrain"}},
          "topologyKey": "topology.kubernetes.io/zone"}}]
      }
    },
    "containers": [
      {
        "name": "trainer",
        "image": "registry.example.com/ml/pretrain:2025.03.1",
        "imagePullPolicy": "IfNotPresent",
        "command": ["torchrun"],
        "args": ["--nnodes=64", "--nproc-per-node=8", "--rdzv-backend=c10d",
                 "--rdzv-endpoint=llm-pretrain-worker-0.llm-pretrain:29500", "train.py", "--config=/etc/train/config.yaml"],
        "env": [
          {"name": "MASTER_ADDR", "value": "llm-pretrain-worker-0.llm-pretrain"},
          {"name": "MASTER_PORT", "value": "29500"},
          {"name": "NCCL_DEBUG", "value": "WARN"},
          {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"},
          {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"apiVersion": "v1",
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
          {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
          {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}}
        ],
        "ports": [
          {"containerPort": 29500, "name": "c10d", "protocol": "TCP"},
          {"containerPort": 8080, "name": "metrics"}
        ],
        "resources": {
          "limits": {"cpu": "96", "memory": "1600Gi", "nvidia.com/gpu": "8", "rdma/ib": "8"},
          "requests": {"cpu": "90", "memory": "1500Gi", "nvidia.com/gpu": "8", "rdma/ib": "8"}
        },
        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [
          {"mountPath": "/dev/shm", "name": "dshm"},
          {"mountPath": "/etc/train", "name": "config", "readOnly": true},
          {"mountPath": "/checkpoints", "name": "checkpoints"},
          {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access-9xk2d", "readOnly": true}
        ]
      },
      {
        "name": "log-shipper",
        "image": "registry.example.com/infra/fluent-bit:3.1",
        "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}},
        "volumeMounts": [{"mountPath": "/var/log/train", "name": "logs"}]
      }
    ],
    "dnsPolicy": "ClusterFirst",
    "enableServiceLinks": false,
    "hostname": "llm-pretrain-worker-3",
    "nodeName": "gpu-node-a17",
    "preemptionPolicy": "PreemptLowerPriority",
    "priority": 1000000,
    "priorityClassName": "training-high",
    "restartPolicy": "Never",
    "schedulerName": "default-scheduler",
    "securityContext": {"fsGroup": 1000, "runAsUser": 1000},
    "serviceAccountName": "trainer",
    "subdomain": "llm-pretrain",
    "terminationGracePeriodSeconds": 30,
    "tolerations": [
      {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"},
      {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
      {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300}
    ],
    "volumes": [
      {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Gi"}},
      {"name": "config", "configMap": {"name": "llm-pretrain-config", "defaultMode": 420}},
      {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "llm-pretrain-ckpt"}},
      {"name": "logs", "emptyDir": {}},
      {"name": "kube-api-access-9xk2d", "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
        {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}]}}]}}
    ]
  },
  "status": {
    "conditions": [
      {"lastProbeTime": null, "lastTransitionTime": "2025-03-14T09:27:30Z", "status": "True", "type": "PodReadyToStartContainers"},
      {"lastProbeTime": null, "lastTransitionTime": "2025-03-14T09:26:53Z", "status": "True", "type": "Initialized"},
      {"lastProbeTime": null, "lastTransitionTime": "2025-03-14T09:28:10Z", "status": "True", "type": "Ready"},
      {"lastProbeTime": null, "lastTransitionTime": "2025-03-14T09:28:10Z", "status": "True", "type": "ContainersReady"},
      {"lastProbeTime": null, "lastTransitionTime": "2025-03-14T09:26:53Z", "status": "True", "type": "PodScheduled"}
    ],
    "containerStatuses": [
      {
        "containerID": "containerd://8f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff",
        "image": "registry.example.com/ml/pretrain:2025.03.1",
        "imageID": "registry.example.com/ml/pretrain@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "lastState": {},
        "name": "trainer",
        "ready": true,
        "restartCount": 0,
        "started": true,
        "state": {"running": {"startedAt": "2025-03-14T09:28:02Z"}}
      },
      {
        "containerID": "containerd://11223344556677889900aabbccddeeff00112233445566778899aabbccddeeff",
        "image": "registry.example.com/infra/fluent-bit:3.1",
        "imageID": "registry.example.com/infra/fluent-bit@sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
        "lastState": {},
        "name": "log-shipper",
        "ready": true,
        "restartCount": 0,
        "started": true,
        "state": {"running": {"startedAt": "2025-03-14T09:27:29Z"}}
      }
    ],
    "hostIP": "10.20.17.4",
    "hostIPs": [{"ip": "10.20.17.4"}],
    "phase": "Running",
    "podIP": "10.244.17.38",
    "podIPs": [{"ip": "10.244.17.38"}, {"ip": "fd00:10:244:11::26"}],
    "qosClass": "Burstable",
    "startTime": "2025-03-14T09:26:53Z"
  }
}"#;
}
