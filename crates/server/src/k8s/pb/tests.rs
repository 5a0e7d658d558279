//! The framing around objects (lists, watch frames, bookmarks, errors)
//! against the simulator's encoder (k8s-pb, generated from Kubernetes'
//! .proto files), and objects that break off inside a list.

use super::*;
use crate::k8s::objects::SlimPod;
use crate::k8s::objects::pod::tests::POD;
use crate::k8s::objects::served::tests::pb_of;
use podns_kapi::{Kind, pbenc};

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
