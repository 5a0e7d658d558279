//! Watch streams in JSON: the event line, the bookmark, and what a watcher
//! with a selector sees of a change (the Protobuf frames are in
//! [`crate::pbenc`]).

use crate::kind::Kind;

/// The type of a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EvType {
    Added,
    Modified,
    Deleted,
}

impl EvType {
    pub const ALL: [EvType; 3] = [EvType::Added, EvType::Modified, EvType::Deleted];

    pub fn as_str(self) -> &'static str {
        match self {
            EvType::Added => "ADDED",
            EvType::Modified => "MODIFIED",
            EvType::Deleted => "DELETED",
        }
    }

    pub fn idx(self) -> usize {
        self as usize
    }

    /// What a watcher whose selector matched the object `before` the
    /// change and matches it `now` is sent, as kube-apiserver decides: an
    /// object entering the selection is ADDED, one leaving it DELETED.
    pub fn seen(self, before: bool, now: bool) -> Option<EvType> {
        match self {
            EvType::Added => now.then_some(EvType::Added),
            EvType::Deleted => (now || before).then_some(EvType::Deleted),
            EvType::Modified => match (before, now) {
                (true, true) => Some(EvType::Modified),
                (false, true) => Some(EvType::Added),
                (true, false) => Some(EvType::Deleted),
                (false, false) => None,
            },
        }
    }
}

/// One newline-terminated watch event line; `type` comes first.
pub fn event_line(ty: &str, obj: &[u8]) -> bytes::Bytes {
    let mut b = Vec::with_capacity(obj.len() + 32);
    b.extend_from_slice(b"{\"type\":\"");
    b.extend_from_slice(ty.as_bytes());
    b.extend_from_slice(b"\",\"object\":");
    b.extend_from_slice(obj);
    b.extend_from_slice(b"}\n");
    bytes::Bytes::from(b)
}

/// A BOOKMARK line at `rv`; `initial_end` marks the end of a streaming
/// list's initial events (`k8s.io/initial-events-end`).
pub fn bookmark_line(kind: Kind, rv: u64, initial_end: bool) -> bytes::Bytes {
    let ann = if initial_end {
        ",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}"
    } else {
        ""
    };
    bytes::Bytes::from(format!(
        "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{rv}\"{ann}}}}}}}\n",
        kind.name(),
        kind.api_version()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_across_the_selector_is_an_add_or_a_delete() {
        use EvType::*;
        assert_eq!(Modified.seen(false, true), Some(Added));
        assert_eq!(Modified.seen(true, false), Some(Deleted));
        assert_eq!(Modified.seen(true, true), Some(Modified));
        assert_eq!(Modified.seen(false, false), None);
        assert_eq!(Deleted.seen(true, false), Some(Deleted));
        assert_eq!(Added.seen(false, false), None);
    }

    #[test]
    fn lines_are_what_clients_parse() {
        let v: serde_json::Value =
            serde_json::from_slice(&bookmark_line(Kind::Job, 7, true)).unwrap();
        assert_eq!(v["type"], "BOOKMARK");
        assert_eq!(v["object"]["apiVersion"], "batch/v1");
        assert_eq!(v["object"]["metadata"]["resourceVersion"], "7");
        assert_eq!(
            v["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
            "true"
        );
        let e: serde_json::Value = serde_json::from_slice(&event_line("ADDED", b"{}")).unwrap();
        assert_eq!(e["type"], "ADDED");
    }
}
