//! The test world: one index writer and an answerer over its table, fed
//! objects and asked questions without sockets. The unit tests, the
//! encoder agreement check, the fuzz targets and the benches all build it
//! here (`testing` feature).

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};

use super::answer::{AnswerConfig, Answerer};
use crate::index::testing::synced_writer;
use crate::index::{Change, JobInfo, PodInfo, Policy, ServiceInfo, SliceInfo, Update, Writer};

/// A writer and an answerer over the same table.
pub struct World {
    pub writer: Writer,
    pub answerer: Answerer,
}

impl World {
    /// A writer under `policy` whose watches have all listed (empty), so
    /// the answerer is ready.
    pub fn new(policy: Policy, cfg: AnswerConfig) -> Self {
        Self::over(synced_writer(policy), cfg)
    }

    /// An answerer over `writer`'s table.
    pub fn over(writer: Writer, cfg: AnswerConfig) -> Self {
        let answerer = Answerer::new(writer.table().clone(), cfg);
        Self { writer, answerer }
    }

    pub fn apply(&mut self, update: Update) -> &mut Self {
        self.writer.apply(update);
        self
    }

    pub fn pod(&mut self, p: PodInfo) -> &mut Self {
        self.apply(Update::Pod(Change::Apply(p)))
    }

    pub fn svc(&mut self, s: ServiceInfo) -> &mut Self {
        self.apply(Update::Service(Change::Apply(s)))
    }

    pub fn job(&mut self, j: JobInfo) -> &mut Self {
        self.apply(Update::Job(Change::Apply(j)))
    }

    pub fn slice(&mut self, e: SliceInfo) -> &mut Self {
        self.apply(Update::Slice(Change::Apply(e)))
    }

    /// The answer to one question; `name` is absolute.
    pub fn ask(&self, name: &str, qtype: RecordType) -> Message {
        self.answerer.answer(&query(name, qtype))
    }

    /// The RCODE of the answer to one question; `name` is absolute.
    pub fn rcode(&self, name: &str, qtype: RecordType) -> ResponseCode {
        self.ask(name, qtype).metadata.response_code
    }
}

/// A recursion-desired query for `name` (absolute), as a stub resolver
/// sends it.
pub fn query(name: &str, qtype: RecordType) -> Message {
    let mut m = Message::new(4242, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(
        Name::from_ascii(name).expect("a valid name"),
        qtype,
    ));
    m
}
