//! discovery.k8s.io/v1 EndpointSlices: discovery, create with the
//! apiserver's required fields, label selectors with `!=` and `exists`,
//! Protobuf lists decoded with the generated k8s-pb types, and kubectl.

use k8s_pb::api::discovery::v1 as pdisc;
use prost::Message;
use serde_json::{Value, json};

use super::support::*;

const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices";

fn slice(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "labels": labels},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.9.0.1"], "hostname": "h", "conditions": {"ready": true}}],
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]
    })
}

#[tokio::test]
async fn endpoint_slices_are_served_and_selected() {
    let sim = start_default().await;
    let addr = sim.addr;
    let groups = get(addr, "/apis").await.json();
    assert!(
        groups["groups"].to_string().contains("discovery.k8s.io"),
        "{groups}"
    );
    let v1 = get(addr, "/apis/discovery.k8s.io/v1").await.json();
    assert_eq!(v1["resources"][0]["name"], "endpointslices");
    assert_eq!(get(addr, "/api/v1/endpointslices").await.status, 404);

    let mut bad = slice("bad", json!({}));
    bad["addressType"] = json!("IPv5");
    assert_eq!(post_json(addr, SLICES, &bad).await.status, 422);

    let svc = "kubernetes.io/service-name";
    let by = "endpointslice.kubernetes.io/managed-by";
    for (name, labels) in [
        ("manual", json!({svc: "db"})),
        (
            "mirrored",
            json!({svc: "db", by: "endpointslicemirroring-controller.k8s.io"}),
        ),
        (
            "controller",
            json!({svc: "api", by: "endpointslice-controller.k8s.io"}),
        ),
        ("orphan", json!({})),
    ] {
        assert_eq!(
            post_json(addr, SLICES, &slice(name, labels)).await.status,
            201
        );
    }
    let selector = format!("{by}!=endpointslice-controller.k8s.io,{svc}");
    let path = format!("{SLICES}?labelSelector={}", urlencode(&selector));
    let list = get(addr, &path).await.json();
    assert_eq!(list["kind"], "EndpointSliceList");
    assert_eq!(names(&list), ["manual", "mirrored"]);

    // The same list in Protobuf, decoded by the generated types.
    let raw = protobuf_get(addr, &path).await;
    let body = raw.strip_prefix(b"k8s\0").expect("the magic");
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(body).unwrap();
    assert_eq!(
        unknown.type_meta.as_ref().and_then(|t| t.kind.as_deref()),
        Some("EndpointSliceList")
    );
    let pb = pdisc::EndpointSliceList::decode(unknown.raw.unwrap_or_default().as_slice()).unwrap();
    assert_eq!(pb.items.len(), 2);
    let first = &pb.items[0];
    assert_eq!(first.address_type.as_deref(), Some("IPv4"));
    assert_eq!(first.endpoints[0].addresses, ["10.9.0.1"]);
    assert_eq!(first.endpoints[0].hostname.as_deref(), Some("h"));
    assert_eq!(
        first.endpoints[0].conditions.as_ref().and_then(|c| c.ready),
        Some(true)
    );
    assert_eq!(first.ports[0].port, Some(5432));

    // kubectl finds the resource through discovery and selects alike.
    if let Some(kubectl) = Kubectl::for_sim(&sim) {
        let out = kubectl
            .run(&["get", "endpointslices", "-l", &selector, "-o", "name"])
            .await;
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            [
                "endpointslice.discovery.k8s.io/manual",
                "endpointslice.discovery.k8s.io/mirrored"
            ]
        );
        let table = kubectl.run(&["get", "endpointslices"]).await;
        assert!(
            table.contains("ADDRESSTYPE") && table.contains("10.9.0.1"),
            "{table}"
        );
    }
}

fn urlencode(s: &str) -> String {
    s.replace('!', "%21")
        .replace('=', "%3D")
        .replace(',', "%2C")
        .replace('/', "%2F")
}

/// The body of a GET that accepts only Protobuf (HTTP/1.0: the body ends
/// with the connection).
async fn protobuf_get(addr: std::net::SocketAddr, path: &str) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET {path} HTTP/1.0\r\nhost: {addr}\r\naccept: application/vnd.kubernetes.protobuf\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let at = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&out[..at]).to_string();
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    assert!(!head.to_ascii_lowercase().contains("chunked"), "{head}");
    out.split_off(at + 4)
}
