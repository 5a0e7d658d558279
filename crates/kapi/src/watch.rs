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

/// A watch request's parameters, validated as kube-apiserver validates
/// them (streaming lists: KEP-3157).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchParams {
    pub bookmarks: bool,
    /// `sendInitialEvents`, when given.
    pub send_initial: Option<bool>,
    /// The resourceVersion to start after (`None`: unset or "0").
    pub start: Option<u64>,
    pub timeout: Option<std::time::Duration>,
}

/// Why a watch request's parameters are refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamError {
    /// 422 Invalid, with the API server's message.
    Invalid(&'static str),
    /// 400 BadRequest.
    BadRequest(String),
}

impl WatchParams {
    /// From the query parameter `get` returns.
    pub fn parse<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<Self, ParamError> {
        let truthy = |v: &str| v == "true" || v == "1";
        let bookmarks = get("allowWatchBookmarks").is_some_and(truthy);
        let send_initial = get("sendInitialEvents").map(truthy);
        let rvm = get("resourceVersionMatch").filter(|v| !v.is_empty());
        if send_initial.is_some() {
            if rvm != Some("NotOlderThan") {
                return Err(ParamError::Invalid(
                    "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if !bookmarks {
                return Err(ParamError::Invalid(
                    "allowWatchBookmarks: Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true",
                ));
            }
        } else if rvm.is_some() {
            return Err(ParamError::Invalid(
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        let timeout = match get("timeoutSeconds") {
            Some(v) => {
                Some(std::time::Duration::from_secs(v.parse().map_err(|_| {
                    ParamError::BadRequest("invalid timeoutSeconds".into())
                })?))
            }
            None => None,
        };
        let start =
            match get("resourceVersion") {
                None | Some("" | "0") => None,
                Some(v) => Some(v.parse().map_err(|_| {
                    ParamError::BadRequest(format!("invalid resource version {v:?}"))
                })?),
            };
        Ok(Self {
            bookmarks,
            send_initial,
            start,
            timeout,
        })
    }

    /// Whether the watch starts with synthetic ADDED events: for an unset
    /// or "0" resourceVersion unless `sendInitialEvents` says otherwise, and
    /// for any with `sendInitialEvents=true`.
    pub fn initial(&self) -> bool {
        self.send_initial.unwrap_or(self.start.is_none())
    }

    /// Whether the initial events end with the `k8s.io/initial-events-end`
    /// bookmark.
    pub fn initial_end(&self) -> bool {
        self.send_initial == Some(true)
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
    fn watch_params_are_validated_as_the_api_server_does() {
        let q = |pairs: &'static [(&'static str, &'static str)]| {
            WatchParams::parse(move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| *v))
        };
        let p = q(&[("resourceVersion", "7"), ("allowWatchBookmarks", "true")]).unwrap();
        assert_eq!((p.start, p.bookmarks, p.initial()), (Some(7), true, false));
        assert!(q(&[("resourceVersion", "0")]).unwrap().initial());
        assert!(matches!(
            q(&[("sendInitialEvents", "true")]),
            Err(ParamError::Invalid(_))
        ));
        let p = q(&[
            ("sendInitialEvents", "true"),
            ("resourceVersionMatch", "NotOlderThan"),
            ("allowWatchBookmarks", "true"),
        ])
        .unwrap();
        assert!(p.initial() && p.initial_end());
        assert!(matches!(
            q(&[("resourceVersionMatch", "Exact")]),
            Err(ParamError::Invalid(_))
        ));
        assert!(matches!(
            q(&[("timeoutSeconds", "x")]),
            Err(ParamError::BadRequest(_))
        ));
        assert!(matches!(
            q(&[("resourceVersion", "abc")]),
            Err(ParamError::BadRequest(_))
        ));
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
