//! The slim Protobuf decoder against the simulator's encoder (k8s-pb,
//! generated from Kubernetes' .proto files): whatever the JSON decoder
//! makes of an object, the Protobuf decoder makes of its Protobuf form.

use super::*;
use crate::index::ObjKey;
use crate::k8s::convert;
use podns_sim::pbenc;
use podns_sim::store::Kind;

fn pb_of(kind: Kind, json: &str) -> Vec<u8> {
    let item = pbenc::list_item(kind, json.as_bytes()).unwrap();
    pbenc::object(&item).unwrap().to_vec()
}

const POD: &str = r#"{"apiVersion":"v1","kind":"Pod",
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

#[test]
fn pod_decodes_as_from_json() {
    let json: SlimPod = serde_json::from_str(POD).unwrap();
    let pb = SlimPod::decode_pb(&pb_of(Kind::Pod, POD));
    assert_eq!(pb.malformed, None);
    assert_eq!(pb.metadata, json.metadata);
    assert_eq!(pb.meta, json.meta);
    assert_eq!(convert::pod(&pb).unwrap(), convert::pod(&json).unwrap());
}

#[test]
fn service_and_job_decode_as_from_json() {
    let svc = r#"{"metadata":{"name":"api","namespace":"ml","uid":"s1","resourceVersion":"4"},
      "spec":{"type":"ClusterIP","clusterIP":"10.96.0.1","clusterIPs":["10.96.0.1","fd00::1"],
        "selector":{"app":"x"},"publishNotReadyAddresses":true,
        "ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":"web"},{"port":53,"protocol":"UDP","targetPort":5353}]}}"#;
    let json: SlimService = serde_json::from_str(svc).unwrap();
    let pb = SlimService::decode_pb(&pb_of(Kind::Service, svc));
    assert_eq!(pb.malformed, None);
    assert_eq!(
        convert::service(&pb).unwrap(),
        convert::service(&json).unwrap()
    );
    let ext = r#"{"metadata":{"name":"out","namespace":"ml"},"spec":{"type":"ExternalName","externalName":"example.com"}}"#;
    let json: SlimService = serde_json::from_str(ext).unwrap();
    let pb = SlimService::decode_pb(&pb_of(Kind::Service, ext));
    assert_eq!(
        convert::service(&pb).unwrap(),
        convert::service(&json).unwrap()
    );

    let job = r#"{"metadata":{"name":"train","namespace":"ml","uid":"j1","labels":{"a":"b"}},
      "spec":{"completions":4,"parallelism":4,"completionMode":"Indexed"}}"#;
    let json: SlimJob = serde_json::from_str(job).unwrap();
    let pb = SlimJob::decode_pb(&pb_of(Kind::Job, job));
    assert_eq!(convert::job(&pb).unwrap(), convert::job(&json).unwrap());
}

#[test]
fn list_and_watch_frames() {
    let item = pbenc::list_item(Kind::Pod, POD.as_bytes()).unwrap();
    let mut body = pbenc::list_head(Kind::Pod, 42, Some("next"), item.len() * 3);
    for _ in 0..3 {
        body.extend_from_slice(&item);
    }
    let l = list::<SlimPod>(&body).unwrap();
    assert_eq!(l.resource_version.as_deref(), Some("42"));
    assert_eq!(l.continue_.as_deref(), Some("next"));
    assert_eq!(l.items.len(), 3);
    assert!(l.items.iter().all(|p| p.malformed.is_none()));

    let obj = pbenc::envelope("v1", "Pod", pb_of(Kind::Pod, POD));
    let mut stream = pbenc::watch_frame("MODIFIED", obj);
    stream.extend(pbenc::watch_frame(
        "BOOKMARK",
        pbenc::bookmark_object(Kind::Pod, 99, true),
    ));
    stream.extend(pbenc::watch_frame("ERROR",
        pbenc::status(&serde_json::json!({"status":"Failure","code":410,"reason":"Expired","message":"too old"})),
    ));
    // Fed a byte at a time, the framer still finds every frame.
    let mut f = Framer::default();
    let mut events = Vec::new();
    for b in &stream {
        f.push(std::slice::from_ref(b));
        while let Some(frame) = f.next_frame().unwrap() {
            events.push(watch_event::<SlimPod>(frame).unwrap());
        }
    }
    assert_eq!(events.len(), 3);
    assert!(
        matches!(&events[0], WatchEvent::Modified(p) if p.metadata.name.as_deref() == Some("train-0"))
    );
    let WatchEvent::Bookmark(b) = &events[1] else {
        panic!("{:?}", events[1])
    };
    assert_eq!(b.metadata.resource_version, "99");
    assert_eq!(
        b.metadata
            .annotations
            .get(INITIAL_EVENTS_END)
            .map(String::as_str),
        Some("true")
    );
    let WatchEvent::Error(s) = &events[2] else {
        panic!("{:?}", events[2])
    };
    assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
}

#[test]
fn malformed_objects_are_flagged_not_fatal() {
    let good = pb_of(Kind::Pod, POD);
    // podIP (field 6 of PodStatus) as a varint instead of a string, and a
    // truncated spec: both flag the pod, neither panics.
    let bad_status: Vec<u8> = {
        let mut b = Vec::new();
        b.extend_from_slice(&good);
        // status = 3 (length-delimited) holding podIP = 6 as varint 7.
        b.extend_from_slice(&[0x1a, 0x02, 0x30, 0x07]);
        b
    };
    assert_eq!(SlimPod::decode_pb(&bad_status).malformed, Some("podIP"));
    let truncated_spec = [0x12, 0x05, 0x82, 0x01, 0x09, b'a', b'b'];
    assert!(SlimPod::decode_pb(&truncated_spec).malformed.is_some());
    assert_eq!(SlimPod::decode_pb(&[0xff]).malformed, Some("object"));
    // A list with a bad item between good ones keeps them.
    let items: Vec<Vec<u8>> = [good.clone(), bad_status, good]
        .into_iter()
        .map(|o| {
            let mut b = vec![0x12];
            prost::encoding::encode_varint(o.len() as u64, &mut b);
            b.extend(o);
            b
        })
        .collect();
    let n = items.iter().map(Vec::len).sum();
    let mut body = pbenc::list_head(Kind::Pod, 1, None, n);
    body.extend(items.concat());
    let l = list::<SlimPod>(&body).unwrap();
    let flags: Vec<_> = l.items.iter().map(|p| p.malformed).collect();
    assert_eq!(flags, [None, Some("podIP"), None]);
    assert!(envelope(b"k8s").is_err());
    assert!(envelope(b"{\"kind\":\"Pod\"}").is_err());
}

#[test]
fn endpoint_slice_decodes_as_from_json() {
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
    let json: SlimEndpointSlice = serde_json::from_str(slice).unwrap();
    let pb = SlimEndpointSlice::decode_pb(&pb_of(Kind::EndpointSlice, slice));
    assert_eq!(pb.malformed, None);
    assert_eq!(pb.metadata, json.metadata);
    assert_eq!(pb.meta, json.meta);
    let info = convert::endpoint_slice(&pb).unwrap();
    assert_eq!(info, convert::endpoint_slice(&json).unwrap());
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

#[test]
fn node_and_service_cidr_decode_as_from_json_and_read_only_their_ranges() {
    let node = r#"{"apiVersion":"v1","kind":"Node",
      "metadata":{"name":"gpu-node-00001","uid":"n1","resourceVersion":"9",
        "labels":{"kubernetes.io/hostname":"gpu-node-00001","nvidia.com/gpu.product":"H100"},
        "annotations":{"node.alpha.kubernetes.io/ttl":"0"}},
      "spec":{"podCIDR":"10.244.1.0/24","podCIDRs":["10.244.1.0/24","fd00:10:244:1::/64"],"providerID":"kwok://n1"},
      "status":{"addresses":[{"type":"InternalIP","address":"172.16.0.3"}],
        "conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]}}"#;
    let json: SlimNode = serde_json::from_str(node).unwrap();
    let pb = SlimNode::decode_pb(&pb_of(Kind::Node, node));
    assert_eq!(pb.malformed, None);
    assert_eq!(pb, json);
    // Identity only: labels and annotations are never kept.
    assert_eq!(pb.metadata.labels, None);
    let info = convert::node(&pb).unwrap();
    assert_eq!(info.key, ObjKey::new("", "gpu-node-00001"));
    assert_eq!(
        info.cidrs,
        [
            "10.244.1.0/24".parse::<ipnet::IpNet>().unwrap(),
            "fd00:10:244:1::/64".parse().unwrap()
        ]
    );

    let cidr = r#"{"apiVersion":"networking.k8s.io/v1","kind":"ServiceCIDR",
      "metadata":{"name":"kubernetes","uid":"c1","resourceVersion":"3"},
      "spec":{"cidrs":["10.96.0.0/12"]},"status":{"conditions":[{"type":"Ready","status":"True",
        "lastTransitionTime":"2025-01-01T00:00:00Z","reason":"","message":""}]}}"#;
    let json: SlimServiceCidr = serde_json::from_str(cidr).unwrap();
    let pb = SlimServiceCidr::decode_pb(&pb_of(Kind::ServiceCidr, cidr));
    assert_eq!(pb, json);
    assert_eq!(
        convert::service_cidr(&pb).unwrap().cidrs,
        ["10.96.0.0/12".parse::<ipnet::IpNet>().unwrap()]
    );
    // A node without a range yet owns none; a bad range skips the object.
    let bare: SlimNode = serde_json::from_str(r#"{"metadata":{"name":"n"},"spec":{}}"#).unwrap();
    assert!(convert::node(&bare).unwrap().cidrs.is_empty());
    let bad: SlimNode =
        serde_json::from_str(r#"{"metadata":{"name":"n"},"spec":{"podCIDRs":["10.1.0.0/33"]}}"#)
            .unwrap();
    assert!(convert::node(&bad).is_err());
    let bad: SlimNode =
        serde_json::from_str(r#"{"metadata":{"name":"n"},"spec":{"podCIDRs":"10.1.0.0/16"}}"#)
            .unwrap();
    assert_eq!(bad.malformed, Some("podCIDRs"));
}
