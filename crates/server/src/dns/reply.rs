//! What a reply is to the server once an encoder has written it: the
//! transport it goes back over, its bytes, and what the server counts
//! about it. Both encoders ([`super::fast`] and [`super::answer`]) make
//! their replies here, from the plan they encoded, so the counts cannot
//! differ between the two paths.

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use super::resolve::Plan;

/// Transport the query came over: it decides the size limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

impl Transport {
    pub fn label(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
        }
    }
}

/// What the server counts about a reply written into its buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyMeta {
    pub rcode: ResponseCode,
    pub qtype: Option<RecordType>,
    pub truncated: bool,
    /// Not answered here: the buffer was not written; a node instance
    /// forwards the question (`Answerer::forward_udp`).
    pub forward: bool,
}

impl ReplyMeta {
    /// The reply to a question of type `qtype` encoded from `plan` (a
    /// plan to forward is encoded as nothing).
    #[inline]
    pub(super) fn of(plan: &Plan<'_>, qtype: Option<RecordType>) -> Self {
        Self {
            rcode: plan.rcode,
            qtype,
            truncated: plan.tc && !plan.forward,
            forward: plan.forward,
        }
    }

    /// With its bytes (empty when forwarded).
    #[inline]
    pub(super) fn with(self, bytes: Vec<u8>) -> Reply {
        Reply {
            bytes,
            rcode: self.rcode,
            qtype: self.qtype,
            truncated: self.truncated,
            forward: self.forward,
        }
    }
}

/// An encoded reply and what the server counts about it.
#[derive(Debug)]
pub struct Reply {
    pub bytes: Vec<u8>,
    pub rcode: ResponseCode,
    pub qtype: Option<RecordType>,
    pub truncated: bool,
    /// Not answered here: a node instance forwards it
    /// (`Answerer::forwarded`); `bytes` is empty.
    pub forward: bool,
}

impl Reply {
    /// What the server counts about it.
    #[inline]
    pub fn meta(&self) -> ReplyMeta {
        ReplyMeta {
            rcode: self.rcode,
            qtype: self.qtype,
            truncated: self.truncated,
            forward: self.forward,
        }
    }
}
