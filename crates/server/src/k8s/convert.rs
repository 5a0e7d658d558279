//! Slim objects → index input. Pure functions: everything the index may
//! rely on (valid labels, parsed IPs, known protocols) is checked here.

use std::net::IpAddr;

use crate::index::types::{
    ContainerPort, JobInfo, ObjKey, Phase, PodInfo, Proto, RangesInfo, ServiceInfo, ServiceKind,
    ServicePort, SliceEndpoint, SliceInfo, SlicePort, TargetPort,
};

use crate::labels::SERVICE_NAME;

use super::slim::{
    IntOrStr, Loose, LooseVec, SlimEndpointSlice, SlimJob, SlimMeta, SlimNode, SlimPod,
    SlimService, SlimServiceCidr,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Why an object cannot be indexed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConvertError {
    #[error("malformed field `{0}`")]
    Malformed(&'static str),
    #[error("missing metadata.name")]
    MissingName,
    #[error("missing metadata.namespace")]
    MissingNamespace,
    #[error("invalid ip {0:?}")]
    InvalidIp(String),
    #[error("invalid timestamp {0:?}")]
    InvalidTimestamp(String),
    #[error("externalName service without externalName")]
    EmptyExternalName,
    #[error("EndpointSlice without a valid {SERVICE_NAME} label")]
    NoServiceName,
    #[error("invalid CIDR {0:?}")]
    InvalidCidr(String),
}

/// The index input of a pod.
pub fn pod(p: &SlimPod) -> Result<PodInfo, ConvertError> {
    if let Some(field) = p.malformed {
        return Err(ConvertError::Malformed(field));
    }
    let key = key(&p.metadata)?;
    let (spec, status) = (&p.spec, &p.status);

    // status.podIPs is authoritative when set; podIP is its first element
    // (and all that older API servers send).
    let mut ips: Vec<IpAddr> = Vec::new();
    let listed: Vec<&str> = loose_items(&status.pod_ips)
        .filter_map(|i| i.ip.get().map(String::as_str))
        .collect();
    let raw = if listed.is_empty() {
        status
            .pod_ip
            .get()
            .map(String::as_str)
            .into_iter()
            .collect()
    } else {
        listed
    };
    for s in raw.into_iter().filter(|s| !s.is_empty()) {
        let ip: IpAddr = s
            .parse()
            .map_err(|_| ConvertError::InvalidIp(s.to_owned()))?;
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }

    let ready = loose_items(&status.conditions).any(|c| {
        c.type_.get().is_some_and(|t| t == "Ready") && c.status.get().is_some_and(|s| s == "True")
    });

    let ports = loose_items(&spec.containers)
        .flat_map(|c| loose_items(&c.ports))
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

/// The index input of a Job (rank view).
pub fn job(j: &SlimJob) -> Result<JobInfo, ConvertError> {
    if let Some(field) = j.malformed {
        return Err(ConvertError::Malformed(field));
    }
    let key = key(&j.metadata)?;
    let count = |v: &Loose<i64>| v.get().and_then(|n| u32::try_from(*n).ok());
    Ok(JobInfo {
        key,
        uid: j.metadata.uid.clone().unwrap_or_default(),
        completions: count(&j.spec.completions),
        parallelism: count(&j.spec.parallelism),
        labels: j.meta.labels.clone(),
    })
}

/// The index input of a service.
pub fn service(s: &SlimService) -> Result<ServiceInfo, ConvertError> {
    if let Some(field) = s.malformed {
        return Err(ConvertError::Malformed(field));
    }
    let key = key(&s.metadata)?;
    let spec = &s.spec;

    let kind = if spec.type_.get().is_some_and(|t| t == "ExternalName") {
        let target = spec
            .external_name
            .get()
            .map(|n| n.trim_end_matches('.'))
            .unwrap_or_default();
        if target.is_empty() {
            return Err(ConvertError::EmptyExternalName);
        }
        ServiceKind::ExternalName(target.to_owned())
    } else {
        // clusterIPs[0] == clusterIP; "None" in either means headless.
        let listed: Vec<&str> = loose_items(&spec.cluster_ips).map(String::as_str).collect();
        let raw = if listed.is_empty() {
            spec.cluster_ip
                .get()
                .map(String::as_str)
                .into_iter()
                .collect()
        } else {
            listed
        };
        if raw.first().is_some_and(|ip| *ip == "None") {
            ServiceKind::Headless
        } else {
            let mut ips: Vec<IpAddr> = Vec::new();
            for r in raw.into_iter().filter(|r| !r.is_empty()) {
                let ip: IpAddr = r
                    .parse()
                    .map_err(|_| ConvertError::InvalidIp(r.to_owned()))?;
                if !ips.contains(&ip) {
                    ips.push(ip);
                }
            }
            ServiceKind::ClusterIp(ips)
        }
    };

    let selector = spec
        .selector
        .get()
        .filter(|m| !m.entries.is_empty())
        .map(|m| m.entries.clone());

    let ports = loose_items(&spec.ports)
        .filter_map(|sp| {
            let port = port_number(*sp.port.get()?)?;
            let target = match sp.target_port.get() {
                None => TargetPort::Same,
                Some(IntOrStr::Int(n)) => {
                    port_number(*n).map_or(TargetPort::Same, TargetPort::Number)
                }
                Some(IntOrStr::Str(s)) if s.is_empty() => TargetPort::Same,
                Some(IntOrStr::Str(s)) => match s.parse::<i64>() {
                    Ok(n) => port_number(n).map_or(TargetPort::Same, TargetPort::Number),
                    Err(_) => TargetPort::Name(s.clone()),
                },
            };
            Some(ServicePort {
                name: non_empty(&sp.name),
                port,
                protocol: protocol(&sp.protocol)?,
                target,
            })
        })
        .collect();

    Ok(ServiceInfo {
        key,
        uid: s.metadata.uid.clone().unwrap_or_default(),
        kind,
        selector,
        publish_not_ready: spec
            .publish_not_ready_addresses
            .get()
            .copied()
            .unwrap_or(false),
        ports,
    })
}

/// The index input of an EndpointSlice. An `FQDN` slice keeps no
/// endpoints (its addresses are names); an address that is not an IP in
/// an `IPv4`/`IPv6` slice rejects the object, as a pod's bad IP does.
pub fn endpoint_slice(e: &SlimEndpointSlice) -> Result<SliceInfo, ConvertError> {
    if let Some(field) = e.malformed {
        return Err(ConvertError::Malformed(field));
    }
    let key = key(&e.metadata)?;
    let service = e
        .meta
        .labels
        .iter()
        .rev()
        .find(|(k, _)| k == SERVICE_NAME)
        .map(|(_, v)| v)
        .filter(|v| is_dns1123_label(v))
        .ok_or(ConvertError::NoServiceName)?
        .clone();
    let fqdn = e.address_type.get().is_some_and(|t| t == "FQDN");
    let mut endpoints = Vec::new();
    for ep in loose_items(&e.endpoints).filter(|_| !fqdn) {
        let mut ips: Vec<IpAddr> = Vec::new();
        for a in loose_items(&ep.addresses) {
            let ip: IpAddr = a
                .parse()
                .map_err(|_| ConvertError::InvalidIp(a.to_owned()))?;
            if !ips.contains(&ip) {
                ips.push(ip);
            }
        }
        let conditions = ep.conditions.get();
        let condition = |f: fn(&super::slim::EndpointConditionsRaw) -> &Loose<bool>| {
            conditions.and_then(|c| f(c).get().copied())
        };
        endpoints.push(SliceEndpoint {
            ips,
            hostname: dns_label(&ep.hostname),
            // "A nil value should be interpreted as ready" (the API).
            ready: condition(|c| &c.ready).unwrap_or(true),
            terminating: condition(|c| &c.terminating).unwrap_or(false),
        });
    }
    let ports = loose_items(&e.ports)
        .filter_map(|p| {
            Some(SlicePort {
                name: dns_label(&p.name),
                port: port_number(*p.port.get()?)?,
                protocol: protocol(&p.protocol)?,
            })
        })
        .collect();
    Ok(SliceInfo {
        key,
        service,
        ports,
        endpoints,
    })
}

/// The key of an object, if its metadata has a name and a namespace.
pub fn key(m: &ObjectMeta) -> Result<ObjKey, ConvertError> {
    let name = m
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or(ConvertError::MissingName)?;
    let namespace = m
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or(ConvertError::MissingNamespace)?;
    Ok(ObjKey::new(namespace, name))
}

/// The key of a cluster-scoped object (Nodes, ServiceCIDRs): its name,
/// with an empty namespace.
pub fn cluster_key(m: &ObjectMeta) -> Result<ObjKey, ConvertError> {
    let name = m
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or(ConvertError::MissingName)?;
    Ok(ObjKey::new("", name))
}

/// The index input of a Node: its `spec.podCIDRs` (none yet is fine:
/// a node that has no range assigned owns no reverse zone).
pub fn node(n: &SlimNode) -> Result<RangesInfo, ConvertError> {
    if let Some(field) = n.malformed {
        return Err(ConvertError::Malformed(field));
    }
    ranges(&n.metadata, &n.pod_cidrs, "podCIDRs")
}

/// The index input of a ServiceCIDR: its `spec.cidrs`.
pub fn service_cidr(s: &SlimServiceCidr) -> Result<RangesInfo, ConvertError> {
    if let Some(field) = s.malformed {
        return Err(ConvertError::Malformed(field));
    }
    ranges(&s.metadata, &s.cidrs, "cidrs")
}

/// Every element must be a CIDR (`10.244.1.0/24`; host bits are
/// dropped): an object with one that is not is skipped whole, so a typo
/// can never make podns claim or drop a range it was not given.
fn ranges(
    m: &ObjectMeta,
    items: &LooseVec<String>,
    field: &'static str,
) -> Result<RangesInfo, ConvertError> {
    let key = cluster_key(m)?;
    let mut cidrs = Vec::new();
    for item in items.get().into_iter().flatten() {
        let s = item.get().ok_or(ConvertError::Malformed(field))?;
        let net: ipnet::IpNet = s
            .parse()
            .map_err(|_| ConvertError::InvalidCidr(s.clone()))?;
        cidrs.push(net.trunc());
    }
    Ok(RangesInfo { key, cidrs })
}

/// The well-formed elements of an array field.
fn loose_items<T>(v: &Loose<Vec<Loose<T>>>) -> impl Iterator<Item = &T> {
    v.get().into_iter().flatten().filter_map(Loose::get)
}

fn non_empty(s: &Loose<String>) -> Option<String> {
    s.get().filter(|s| !s.is_empty()).cloned()
}

fn port_number(n: i64) -> Option<u16> {
    u16::try_from(n).ok().filter(|p| *p != 0)
}

/// Kubernetes defaults an unset protocol to TCP; an unknown one drops the port.
fn protocol(p: &Loose<String>) -> Option<Proto> {
    match p.get() {
        None => Some(Proto::Tcp),
        Some(s) => Proto::parse(s),
    }
}

/// `spec.hostname` and `spec.subdomain` become DNS labels, so they must be
/// RFC 1123 labels (as Kubernetes validates them): otherwise they are
/// treated as unset, the pod keeps its other names.
fn dns_label(s: &Loose<String>) -> Option<String> {
    s.get().filter(|s| is_dns1123_label(s)).cloned()
}

/// RFC 1123 label as Kubernetes' `IsDNS1123Label`: 1–63 of `[a-z0-9-]`,
/// starting and ending with an alphanumeric.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| alnum(c) || *c == b'-')
        && alnum(&b[0])
        && alnum(&b[b.len() - 1])
}

fn created(m: &SlimMeta) -> Result<i64, ConvertError> {
    match m.creation_timestamp.as_deref() {
        None | Some("") => Ok(0),
        Some(t) => t
            .parse::<jiff::Timestamp>()
            .map(|ts| ts.as_second())
            .map_err(|_| ConvertError::InvalidTimestamp(t.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

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
        pod(&serde_json::from_value::<SlimPod>(v).unwrap())
    }

    fn svc_of(v: Value) -> Result<ServiceInfo, ConvertError> {
        service(&serde_json::from_value::<SlimService>(v).unwrap())
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

    fn base_svc() -> Value {
        json!({
            "metadata": {"name": "api", "namespace": "ml", "uid": "s-1", "resourceVersion": "3"},
            "spec": {
                "type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00::a"],
                "selector": {"app": "train"},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080}]
            }
        })
    }

    #[test]
    fn service_cluster_ip() {
        let s = svc_of(base_svc()).unwrap();
        assert_eq!(s.key, ObjKey::new("ml", "api"));
        assert_eq!(s.uid, "s-1");
        assert_eq!(
            s.kind,
            ServiceKind::ClusterIp(vec![
                "10.96.0.10".parse().unwrap(),
                "fd00::a".parse().unwrap()
            ])
        );
        assert_eq!(s.selector, Some(vec![("app".into(), "train".into())]));
        assert!(!s.publish_not_ready);
        assert_eq!(
            s.ports,
            vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                protocol: Proto::Tcp,
                target: TargetPort::Number(8080)
            }]
        );

        let mut v = base_svc();
        v["spec"].as_object_mut().unwrap().remove("clusterIPs");
        assert_eq!(
            svc_of(v).unwrap().kind,
            ServiceKind::ClusterIp(vec!["10.96.0.10".parse().unwrap()])
        );
        let mut v = base_svc();
        v["spec"].as_object_mut().unwrap().remove("clusterIPs");
        v["spec"].as_object_mut().unwrap().remove("clusterIP");
        assert_eq!(svc_of(v).unwrap().kind, ServiceKind::ClusterIp(vec![]));
        let mut v = base_svc();
        v["spec"]["clusterIPs"] = json!(["10.96.0.x"]);
        assert_eq!(
            svc_of(v).unwrap_err(),
            ConvertError::InvalidIp("10.96.0.x".into())
        );
    }

    #[test]
    fn service_headless_and_publish_not_ready() {
        let mut v = base_svc();
        v["spec"]["clusterIP"] = json!("None");
        v["spec"]["clusterIPs"] = json!(["None"]);
        v["spec"]["publishNotReadyAddresses"] = json!(true);
        let s = svc_of(v).unwrap();
        assert_eq!(s.kind, ServiceKind::Headless);
        assert!(s.publish_not_ready);
        let mut v = base_svc();
        v["spec"]["clusterIP"] = json!("None");
        v["spec"].as_object_mut().unwrap().remove("clusterIPs");
        assert_eq!(svc_of(v).unwrap().kind, ServiceKind::Headless);
    }

    #[test]
    fn service_external_name() {
        let v = json!({"metadata": {"name": "db", "namespace": "ml"},
            "spec": {"type": "ExternalName", "externalName": "db.example.com."}});
        assert_eq!(
            svc_of(v).unwrap().kind,
            ServiceKind::ExternalName("db.example.com".into())
        );
        let v = json!({"metadata": {"name": "db", "namespace": "ml"},
            "spec": {"type": "ExternalName", "externalName": ""}});
        assert_eq!(svc_of(v).unwrap_err(), ConvertError::EmptyExternalName);
        let v = json!({"metadata": {"name": "db", "namespace": "ml"}, "spec": {"type": "ExternalName"}});
        assert_eq!(svc_of(v).unwrap_err(), ConvertError::EmptyExternalName);
    }

    #[test]
    fn service_selector_none_when_absent_or_empty() {
        let mut v = base_svc();
        v["spec"]["selector"] = json!({});
        assert_eq!(svc_of(v).unwrap().selector, None);
        let mut v = base_svc();
        v["spec"].as_object_mut().unwrap().remove("selector");
        assert_eq!(svc_of(v).unwrap().selector, None);
    }

    #[test]
    fn service_target_ports() {
        let mut v = base_svc();
        v["spec"]["ports"] = json!([
            {"port": 1, "targetPort": 8080},
            {"port": 2, "targetPort": "8081"},
            {"port": 3, "targetPort": "metrics"},
            {"port": 4},
            {"port": 5, "targetPort": ""},
            {"port": 0, "targetPort": 9},
            {"port": 6, "protocol": "UDP", "name": "dns"},
        ]);
        let ports = svc_of(v).unwrap().ports;
        let targets: Vec<_> = ports.iter().map(|p| p.target.clone()).collect();
        assert_eq!(
            targets,
            vec![
                TargetPort::Number(8080),
                TargetPort::Number(8081),
                TargetPort::Name("metrics".into()),
                TargetPort::Same,
                TargetPort::Same,
                TargetPort::Same,
            ]
        );
        assert_eq!(ports[5].protocol, Proto::Udp);
        assert_eq!(ports[5].name.as_deref(), Some("dns"));
    }

    #[test]
    fn malformed_service_is_rejected() {
        let mut v = base_svc();
        v["spec"]["selector"] = json!({"app": 3});
        assert_eq!(svc_of(v).unwrap_err(), ConvertError::Malformed("selector"));
        let mut v = base_svc();
        v["spec"]["ports"][0]["targetPort"] = json!(true);
        assert_eq!(
            svc_of(v).unwrap_err(),
            ConvertError::Malformed("targetPort")
        );
    }

    fn base_slice() -> Value {
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {
                "name": "db-abc12", "namespace": "ml", "uid": "e-1",
                "labels": {
                    "kubernetes.io/service-name": "db",
                    "endpointslice.kubernetes.io/managed-by": "operator.example.com"
                }
            },
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.2.0.1", "10.2.0.1"], "hostname": "db-0",
                 "conditions": {"ready": true, "serving": true, "terminating": false},
                 "nodeName": "n1", "zone": "a", "targetRef": {"kind": "Pod", "name": "x"}},
                {"addresses": ["10.2.0.2"]},
                {"addresses": ["10.2.0.3"], "hostname": "Not_A_Label",
                 "conditions": {"ready": false, "terminating": true}}
            ],
            "ports": [
                {"name": "pg", "port": 5432, "protocol": "TCP", "appProtocol": "postgresql"},
                {"name": "metrics", "port": 9187},
                {"name": "Bad_Name", "port": 53, "protocol": "UDP"},
                {"name": "zero", "port": 0},
                {"name": "nopo"},
                {"name": "weird", "port": 1, "protocol": "QUIC"}
            ]
        })
    }

    fn slice_of(v: Value) -> Result<SliceInfo, ConvertError> {
        endpoint_slice(&serde_json::from_value::<SlimEndpointSlice>(v).unwrap())
    }

    #[test]
    fn endpoint_slice_all_fields() {
        let e = slice_of(base_slice()).unwrap();
        assert_eq!(e.key, ObjKey::new("ml", "db-abc12"));
        assert_eq!(e.service, "db");
        let ep = |ip: &str, host: Option<&str>, ready, terminating| SliceEndpoint {
            ips: vec![ip.parse().unwrap()],
            hostname: host.map(Into::into),
            ready,
            terminating,
        };
        assert_eq!(
            e.endpoints,
            vec![
                ep("10.2.0.1", Some("db-0"), true, false),
                // No conditions: ready, as the API says to read nil.
                ep("10.2.0.2", None, true, false),
                // An invalid hostname is unset, the endpoint stays.
                ep("10.2.0.3", None, false, true),
            ]
        );
        let port = |name: Option<&str>, port, protocol| SlicePort {
            name: name.map(Into::into),
            port,
            protocol,
        };
        // A port without a number, of number 0 or of an unknown protocol
        // is dropped; an invalid name leaves the port unnamed.
        assert_eq!(
            e.ports,
            vec![
                port(Some("pg"), 5432, Proto::Tcp),
                port(Some("metrics"), 9187, Proto::Tcp),
                port(None, 53, Proto::Udp),
            ]
        );
    }

    #[test]
    fn endpoint_slice_rejections_and_fqdn() {
        let mut v = base_slice();
        v["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("kubernetes.io/service-name");
        assert_eq!(slice_of(v).unwrap_err(), ConvertError::NoServiceName);
        let mut v = base_slice();
        v["metadata"]["labels"]["kubernetes.io/service-name"] = json!("Not.A.Label");
        assert_eq!(slice_of(v).unwrap_err(), ConvertError::NoServiceName);
        let mut v = base_slice();
        v["endpoints"][1]["addresses"] = json!(["db.example.com"]);
        assert_eq!(
            slice_of(v).unwrap_err(),
            ConvertError::InvalidIp("db.example.com".into())
        );
        let mut v = base_slice();
        v["endpoints"][0]["conditions"]["ready"] = json!("yes");
        assert_eq!(slice_of(v).unwrap_err(), ConvertError::Malformed("ready"));
        let mut v = base_slice();
        v["endpoints"] = json!({"addresses": []});
        assert_eq!(
            slice_of(v).unwrap_err(),
            ConvertError::Malformed("endpoints")
        );
        // An FQDN slice's addresses are names: kept as a slice without
        // endpoints, not rejected.
        let mut v = base_slice();
        v["addressType"] = json!("FQDN");
        v["endpoints"][1]["addresses"] = json!(["db.example.com"]);
        let e = slice_of(v).unwrap();
        assert!(e.endpoints.is_empty());
        assert_eq!(e.ports.len(), 3);
        let mut v = base_slice();
        v["metadata"]["namespace"] = json!(null);
        assert_eq!(slice_of(v).unwrap_err(), ConvertError::MissingNamespace);
    }
}
