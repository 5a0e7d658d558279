//! EndpointSlices (discovery.k8s.io/v1), of Services without a selector:
//! their endpoints and ports, what the relay serves, and the index input
//! ([`SliceInfo`]).

use podns_kapi::Kind;

use super::loose::{Loose, LooseStr, LooseVec};
use super::meta::Meta;
use super::served::Relayed;
use crate::index::types::{SliceEndpoint, SliceInfo, SlicePort, Update};
use crate::k8s::convert::{
    ConvertError, dns_label, ips, is_dns1123_label, key, port_number, protocol,
};
use crate::labels::SERVICE_NAME;

fields! {
    /// `endpoints[].conditions` of an EndpointSlice.
    pub struct EndpointConditionsRaw {
        pub ready: Loose<bool> = ("ready", 1),
        pub terminating: Loose<bool> = ("terminating", 3),
    }
}

fields! {
    /// `endpoints[]` of an EndpointSlice.
    pub struct EndpointRaw {
        pub addresses: LooseVec<String> = ("addresses", 1),
        pub conditions: Loose<EndpointConditionsRaw> = ("conditions", 2),
        pub hostname: LooseStr = ("hostname", 3),
    }
}

fields! {
    /// `ports[]` of an EndpointSlice.
    pub struct EndpointPortRaw {
        pub name: LooseStr = ("name", 1),
        pub protocol: LooseStr = ("protocol", 2),
        pub port: Loose<i64> = ("port", 3),
    }
}

fields! {
    /// A discovery.k8s.io/v1 EndpointSlice (no `spec`: its fields are at
    /// the top).
    pub struct EndpointSliceRaw {
        pub metadata: Loose<Meta> = ("metadata", 1),
        pub endpoints: LooseVec<EndpointRaw> = ("endpoints", 2),
        pub ports: LooseVec<EndpointPortRaw> = ("ports", 3),
        pub address_type: LooseStr = ("addressType", 4),
    }
}

slim! {
    /// A discovery.k8s.io/v1 EndpointSlice with only what DNS reads.
    pub struct SlimEndpointSlice: EndpointSliceRaw(Kind::EndpointSlice, NamespaceResourceScope) -> SliceInfo, convert, Update::Slice, relayed {
        pub endpoints: LooseVec<EndpointRaw>,
        pub ports: LooseVec<EndpointPortRaw>,
        pub address_type: LooseStr,
    }
}

/// The index input of an EndpointSlice. An `FQDN` slice keeps no
/// endpoints (its addresses are names); an address that is not an IP in
/// an `IPv4`/`IPv6` slice rejects the object, as a pod's bad IP does.
fn convert(e: &SlimEndpointSlice) -> Result<SliceInfo, ConvertError> {
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
    for ep in e.endpoints.items().filter(|_| !fqdn) {
        let ips = ips(ep.addresses.items().map(String::as_str))?;
        let conditions = ep.conditions.get();
        let condition = |f: fn(&EndpointConditionsRaw) -> &Loose<bool>| {
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
    let ports = e
        .ports
        .items()
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

impl Relayed for SlimEndpointSlice {
    fn rules(raw: &mut EndpointSliceRaw) {
        // Required by the API's schema, written even when empty:
        // `addressType`, `endpoints`, an endpoint's `addresses`.
        raw.address_type.or_default_mut();
        let endpoints = raw.endpoints.or_default_mut();
        endpoints.retain_mut(|e| match e {
            Loose::Ok(e) => {
                e.addresses.or_default_mut();
                true
            }
            _ => false,
        });
        raw.ports.retain_or_absent(|_| true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::ObjKey;
    use crate::index::types::Proto;
    use crate::k8s::objects::Slim;
    use crate::k8s::objects::served::tests::{pb_of, round_trip};
    use serde_json::{Value, json};

    #[test]
    fn endpoint_slices_round_trip() {
        let slice = r#"{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
          "metadata":{"name":"db-1","namespace":"ml","uid":"e1","resourceVersion":"9",
            "labels":{"kubernetes.io/service-name":"db"}},
          "addressType":"IPv6",
          "endpoints":[
            {"addresses":["fd00::1"],"hostname":"db-0","conditions":{"ready":true,"serving":true,"terminating":false},
             "targetRef":{"kind":"Pod","namespace":"ml","name":"db-0"},"nodeName":"n1","zone":"z"},
            {"addresses":["fd00::2","fd00::3"],"conditions":{"ready":false,"terminating":true}},
            {"addresses":["fd00::4"]}],
          "ports":[{"name":"pg","port":5432,"protocol":"TCP","appProtocol":"postgresql"},{"port":53,"protocol":"UDP"}]}"#;
        let json: SlimEndpointSlice = round_trip(&serde_json::from_str(slice).unwrap());
        assert_eq!(json.malformed, None);
        let info = json.convert().unwrap();
        assert_eq!(info.endpoints.len(), 3);
        assert!(info.endpoints[2].ready, "unset conditions read as ready");
        assert!(info.endpoints[1].terminating);
        assert_eq!(info.ports.len(), 2);
        // A field of the wrong wire type marks the object, as in JSON.
        let mut broken = pb_of(Kind::EndpointSlice, slice);
        // addressType (field 4, length-delimited) turned into a varint.
        let at = broken
            .windows(4)
            .position(|w| w == [0x22, 4, b'I', b'P'])
            .expect("addressType is encoded");
        broken[at] = 0x20;
        let bad = SlimEndpointSlice::decode_pb(&broken);
        assert!(bad.malformed.is_some());
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
        serde_json::from_value::<SlimEndpointSlice>(v)
            .unwrap()
            .convert()
    }

    #[test]
    fn served_slices_write_what_the_schema_requires() {
        round_trip::<SlimEndpointSlice>(&json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "ext-abc", "namespace": "ml", "resourceVersion": "12",
                         "labels": {"kubernetes.io/service-name": "ext"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.1.0.5"], "hostname": "a",
                           "conditions": {"ready": true, "terminating": false}}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }));
        let bare: SlimEndpointSlice =
            serde_json::from_value(json!({"metadata": {"name": "e", "namespace": "ml"},
                "endpoints": [{"hostname": "a"}]}))
            .unwrap();
        let json = String::from_utf8(bare.served().unwrap().json()).unwrap();
        assert!(json.contains(r#""addressType":"""#), "{json}");
        assert!(
            json.contains(r#""endpoints":[{"addresses":[],"hostname":"a"}]"#),
            "{json}"
        );
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
