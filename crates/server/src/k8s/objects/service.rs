//! Services: what DNS reads of them (the kind, cluster IPs or external
//! name, the selector, ports for SRV), what the relay serves, and the index
//! input ([`ServiceInfo`]).

use podns_kapi::Kind;

use super::loose::{AllKeys, IntOrStr, Loose, LooseStr, LooseVec, StrMap};
use super::meta::Meta;
use super::served::Relayed;
use crate::index::types::{ServiceInfo, ServiceKind, ServicePort, TargetPort, Update};
use crate::k8s::convert::{
    ConvertError, ips, key, listed_or_single, non_empty, port_number, protocol,
};

fields! {
    /// `spec.ports[]` of a Service.
    pub struct ServicePortRaw {
        pub name: LooseStr = ("name", 1),
        pub protocol: LooseStr = ("protocol", 2),
        pub port: Loose<i64> = ("port", 3),
        pub target_port: Loose<IntOrStr> = ("targetPort", 4),
    }
}

fields! {
    pub struct ServiceSpecRaw {
        pub ports: LooseVec<ServicePortRaw> = ("ports", 1),
        pub selector: Loose<StrMap<AllKeys>> = ("selector", 2),
        pub cluster_ip: LooseStr = ("clusterIP", 3),
        pub type_: LooseStr = ("type", 4),
        pub external_name: LooseStr = ("externalName", 10),
        pub publish_not_ready_addresses: Loose<bool> = ("publishNotReadyAddresses", 13),
        pub cluster_ips: LooseVec<String> = ("clusterIPs", 18),
    }
}

fields! {
    pub struct ServiceRaw {
        pub metadata: Loose<Meta> = ("metadata", 1),
        pub spec: Loose<ServiceSpecRaw> = ("spec", 2),
    }
}

slim! {
    /// A Service with only what DNS reads.
    pub struct SlimService: ServiceRaw(Kind::Service, NamespaceResourceScope) -> ServiceInfo, convert, Update::Service, relayed {
        pub spec: ServiceSpecRaw,
    }
}

/// The index input of a service.
fn convert(s: &SlimService) -> Result<ServiceInfo, ConvertError> {
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
        let raw = listed_or_single(
            spec.cluster_ips.items().map(String::as_str),
            &spec.cluster_ip,
        );
        if raw.first().is_some_and(|ip| *ip == "None") {
            ServiceKind::Headless
        } else {
            let ips = ips(raw.into_iter().filter(|r| !r.is_empty()))?;
            ServiceKind::ClusterIp(ips)
        }
    };

    let selector = spec
        .selector
        .get()
        .filter(|m| !m.entries.is_empty())
        .map(|m| m.entries.clone());

    let ports = spec
        .ports
        .items()
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

impl Relayed for SlimService {
    fn rules(raw: &mut ServiceRaw) {
        let spec = raw.spec.or_default_mut();
        spec.cluster_ips.retain_or_absent(|_| true);
        // A port's `port` is required by the API's schema: written even
        // when absent, as the zero a typed client reads.
        spec.ports.retain_or_absent(|p| {
            p.port.or_default_mut();
            true
        });
        if spec.selector.get().is_some_and(|m| m.entries.is_empty()) {
            spec.selector = Loose::Absent;
        }
    }

    fn selects_on(raw: &ServiceRaw) -> Vec<&str> {
        raw.spec
            .get()
            .and_then(|s| s.selector.get())
            .map(|m| m.entries.iter().map(|(k, _)| k.as_str()).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::ObjKey;
    use crate::index::types::Proto;
    use crate::k8s::objects::Slim;
    use crate::k8s::objects::served::tests::round_trip;
    use serde_json::{Value, json};

    #[test]
    fn service_decodes_only_dns_fields() {
        let s: SlimService = serde_json::from_str(
            r#"{"kind":"Service","apiVersion":"v1",
                "metadata":{"name":"api","namespace":"ml","uid":"s1","resourceVersion":"4",
                  "managedFields":[{"manager":"kubectl","fieldsV1":{"f:spec":{}}}]},
                "spec":{"type":"ClusterIP","clusterIP":"10.96.0.1","clusterIPs":["10.96.0.1"],
                  "selector":{"app":"x"},"sessionAffinity":"None","ipFamilies":["IPv4"],
                  "ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":"web","nodePort":30080}],
                  "publishNotReadyAddresses":true},
                "status":{"loadBalancer":{}}}"#,
        )
        .unwrap();
        assert_eq!(s.malformed, None);
        assert_eq!(
            s.spec.selector.get().unwrap().entries,
            vec![("app".into(), "x".into())]
        );
        let port = s.spec.ports.get().unwrap()[0].get().unwrap();
        assert_eq!(port.target_port, Loose::Ok(IntOrStr::Str("web".into())));
        assert_eq!(s.spec.publish_not_ready_addresses, Loose::Ok(true));
        assert_eq!(
            <SlimService as kube::Resource>::url_path(&(), Some("ml")),
            "/api/v1/namespaces/ml/services"
        );
    }

    /// JSON and Protobuf (the simulator's encoder) decode alike; the relay
    /// serves what an independent encoder makes of the served JSON, and
    /// what it serves decodes back to it.
    #[test]
    fn services_round_trip() {
        for svc in [
            json!({"metadata":{"name":"api","namespace":"ml","uid":"s1","resourceVersion":"4"},
              "spec":{"type":"ClusterIP","clusterIP":"10.96.0.1","clusterIPs":["10.96.0.1","fd00::1"],
                "selector":{"app":"x"},"publishNotReadyAddresses":true,
                "ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":"web"},{"port":53,"protocol":"UDP","targetPort":5353}]}}),
            json!({"metadata":{"name":"out","namespace":"ml"},"spec":{"type":"ExternalName","externalName":"example.com"}}),
            json!({
                "metadata": {"name": "llm", "namespace": "ml", "uid": "u-1", "resourceVersion": "9",
                             "labels": {"app": "llm"}, "creationTimestamp": "2026-12-04T09:00:00Z"},
                "spec": {"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"],
                         "selector": {"job-name": "llm"}, "publishNotReadyAddresses": true,
                         "ports": [{"name": "nccl", "port": 29500, "protocol": "TCP", "targetPort": 29500},
                                   {"name": "http", "port": 80, "protocol": "TCP", "targetPort": "web"}]},
            }),
        ] {
            let s: SlimService = round_trip(&svc);
            assert!(s.convert().is_ok());
        }
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

    fn svc_of(v: Value) -> Result<ServiceInfo, ConvertError> {
        serde_json::from_value::<SlimService>(v).unwrap().convert()
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
}
