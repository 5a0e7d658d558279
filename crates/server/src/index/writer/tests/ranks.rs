//! The rank view, rule by rule, through the answer path.

use std::net::IpAddr;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

use crate::dns::answer::{AnswerConfig, Answerer};
use crate::index::testing::*;
use crate::index::{Change, ObjKey, Phase, Policy, SyncNeeds, Table, Update, Writer};
use crate::metrics::Metrics;

struct W {
    writer: Writer,
    answerer: Answerer,
}

fn world() -> W {
    let writer = synced_writer(Policy {
        rank_view: true,
        ..Default::default()
    });
    let answerer = Answerer::new(writer.table().clone(), AnswerConfig::default());
    W { writer, answerer }
}

impl W {
    fn pod(&mut self, p: crate::index::PodInfo) {
        self.writer.apply(Update::Pod(Change::Apply(p)));
    }
    fn job(&mut self, j: crate::index::JobInfo) {
        self.writer.apply(Update::Job(Change::Apply(j)));
    }
    fn ask(&self, name: &str, t: RecordType) -> Message {
        let mut m = Message::new(7, MessageType::Query, OpCode::Query);
        m.add_query(Query::query(
            Name::from_ascii(format!("{name}.cluster.local.")).unwrap(),
            t,
        ));
        self.answerer.answer(&m)
    }
    fn rcode(&self, name: &str, t: RecordType) -> ResponseCode {
        self.ask(name, t).metadata.response_code
    }
    fn a(&self, name: &str) -> Vec<IpAddr> {
        self.ask(name, RecordType::A)
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(IpAddr::V4(a.0)),
                _ => None,
            })
            .collect()
    }
    fn txt(&self, name: &str) -> String {
        let m = self.ask(name, RecordType::TXT);
        match m.answers.first().map(|r| &r.data) {
            Some(RData::TXT(t)) => t.to_string(),
            _ => panic!("no TXT at {name}: {m:?}"),
        }
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn indexed_job_ranks_leader_and_summary() {
    let mut w = world();
    w.job(job("ml", "bert", 4, None));
    assert_eq!(
        w.txt("bert.ml.rank"),
        "world=4 published=0 ready=0 generation=0"
    );
    for i in 0..3 {
        w.pod(rank_pod("ml", "bert", i, &format!("10.0.0.{}", i + 1)).ready(i == 0));
    }
    assert_eq!(w.a("2.bert.ml.rank"), [ip("10.0.0.3")]);
    assert_eq!(w.a("leader.bert.ml.rank"), [ip("10.0.0.1")]);
    assert_eq!(
        w.txt("bert.ml.rank"),
        "world=4 published=3 ready=1 generation=0"
    );
    // A rank that will appear: NXDOMAIN; one that cannot exist: NXDOMAIN.
    for name in ["3.bert.ml.rank", "99.bert.ml.rank"] {
        assert_eq!(
            w.rcode(name, RecordType::A),
            ResponseCode::NXDomain,
            "{name}"
        );
    }
    // The job name has names below it: AAAA there is NODATA.
    assert_eq!(
        w.rcode("bert.ml.rank", RecordType::A),
        ResponseCode::NoError
    );
    w.pod(rank_pod("ml", "bert", 3, "10.0.0.4"));
    assert_eq!(
        w.txt("bert.ml.rank"),
        "world=4 published=4 ready=2 generation=0"
    );
    w.writer.apply(Update::Pod(Change::Delete(ObjKey::new(
        "ml",
        "bert-0-x10001",
    ))));
    assert_eq!(
        w.txt("bert.ml.rank"),
        "world=4 published=3 ready=1 generation=0"
    );
    assert!(w.a("0.bert.ml.rank").is_empty());
    assert!(
        w.a("leader.bert.ml.rank").is_empty(),
        "no rank 0, no leader"
    );
}

#[test]
fn completion_index_from_the_annotation_and_legacy_job_label() {
    let mut w = world();
    let mut p = pod("ml", "old-0-abc", "10.0.1.1").label("job-name", "old");
    p.annotations.push((
        "batch.kubernetes.io/job-completion-index".into(),
        "0".into(),
    ));
    w.pod(p);
    assert_eq!(w.a("0.old.ml.rank"), [ip("10.0.1.1")]);
    assert_eq!(
        w.txt("old.ml.rank"),
        "world=1 published=1 ready=1 generation=0",
        "world from ranks seen"
    );
}

#[test]
fn duplicate_ranks_answer_one_pod() {
    let mut w = world();
    w.job(job("ml", "j", 1, None));
    w.pod(rank_pod("ml", "j", 0, "10.0.2.1").created(100));
    w.pod(rank_pod("ml", "j", 0, "10.0.2.2").created(200).ready(false));
    for _ in 0..5 {
        assert_eq!(w.a("0.j.ml.rank"), [ip("10.0.2.1")]);
    }
    assert_eq!(
        w.txt("j.ml.rank"),
        "world=1 published=1 ready=1 generation=0"
    );
    w.pod(rank_pod("ml", "j", 0, "10.0.2.1").created(100).deleting());
    assert_eq!(w.a("0.j.ml.rank"), [ip("10.0.2.2")]);
    assert_eq!(
        w.txt("j.ml.rank"),
        "world=1 published=1 ready=0 generation=0"
    );
}

fn jobset_pod(
    js: &str,
    rjob: &str,
    j: u32,
    p: u32,
    gi: u32,
    attempt: u32,
    ip: &str,
) -> crate::index::PodInfo {
    let job = format!("{js}-{rjob}-{j}");
    rank_pod("ml", &job, p, ip)
        .label("jobset.sigs.k8s.io/jobset-name", js)
        .label("jobset.sigs.k8s.io/replicatedjob-name", rjob)
        .label("jobset.sigs.k8s.io/job-index", &j.to_string())
        .label("jobset.sigs.k8s.io/job-global-index", &gi.to_string())
        .label("jobset.sigs.k8s.io/restart-attempt", &attempt.to_string())
}

#[test]
fn jobset_wide_ranks_generation_and_restart() {
    let mut w = world();
    // Two replicated Jobs of 2 ranks each: g = global index × 2 + index.
    w.job(job("ml", "llm-workers-0", 2, Some("llm")));
    w.job(job("ml", "llm-workers-1", 2, Some("llm")));
    for (j, p, ip) in [
        (0, 0, "10.1.0.1"),
        (0, 1, "10.1.0.2"),
        (1, 0, "10.1.0.3"),
        (1, 1, "10.1.0.4"),
    ] {
        w.pod(jobset_pod("llm", "workers", j, p, j, 0, ip));
    }
    assert_eq!(w.a("3.llm.ml.rank"), [ip("10.1.0.4")]);
    assert_eq!(w.a("2.llm.ml.rank"), [ip("10.1.0.3")]);
    assert_eq!(
        w.a("1.llm-workers-1.ml.rank"),
        [ip("10.1.0.4")],
        "per-Job view too"
    );
    assert_eq!(w.a("leader.llm.ml.rank"), [ip("10.1.0.1")]);
    assert_eq!(
        w.txt("llm.ml.rank"),
        "world=4 published=4 ready=4 generation=0"
    );
    // Gang restart: old pods go, new ones (restart-attempt 1) come with new IPs.
    for (j, p, ip) in [
        (0, 0, "10.1.0.1"),
        (0, 1, "10.1.0.2"),
        (1, 0, "10.1.0.3"),
        (1, 1, "10.1.0.4"),
    ] {
        let old = jobset_pod("llm", "workers", j, p, j, 0, ip);
        w.writer.apply(Update::Pod(Change::Delete(old.key)));
    }
    assert_eq!(
        w.txt("llm.ml.rank"),
        "world=4 published=0 ready=0 generation=0"
    );
    for (j, p, ip) in [(0, 0, "10.1.1.1"), (0, 1, "10.1.1.2"), (1, 0, "10.1.1.3")] {
        w.pod(jobset_pod("llm", "workers", j, p, j, 1, ip).ready(false));
    }
    assert_eq!(
        w.txt("llm.ml.rank"),
        "world=4 published=3 ready=0 generation=1"
    );
    assert_eq!(w.a("0.llm.ml.rank"), [ip("10.1.1.1")]);
    assert!(w.a("3.llm.ml.rank").is_empty());
}

#[test]
fn jobset_ranks_wait_for_the_job_completions() {
    let mut w = world();
    w.pod(jobset_pod("late", "w", 1, 0, 1, 0, "10.2.0.1"));
    assert!(
        w.a("2.late.ml.rank").is_empty(),
        "g unknown without the Job"
    );
    w.job(job("ml", "late-w-1", 2, Some("late")));
    assert_eq!(w.a("2.late.ml.rank"), [ip("10.2.0.1")]);
    w.writer
        .apply(Update::Job(Change::Delete(ObjKey::new("ml", "late-w-1"))));
    assert!(w.a("2.late.ml.rank").is_empty());
}

#[test]
fn coordinator_annotation_names_the_leader() {
    let mut w = world();
    w.job(job("ml", "rl-driver-0", 1, Some("rl")));
    w.job(job("ml", "rl-workers-0", 2, Some("rl")));
    let mut driver = jobset_pod("rl", "driver", 0, 0, 0, 0, "10.3.0.9").host("rl-driver-0-0", "rl");
    driver.annotations.push((
        "jobset.sigs.k8s.io/coordinator".into(),
        "rl-driver-0-0.rl".into(),
    ));
    let mut worker = jobset_pod("rl", "workers", 0, 0, 1, 0, "10.3.0.1");
    worker.annotations.push((
        "jobset.sigs.k8s.io/coordinator".into(),
        "rl-driver-0-0.rl".into(),
    ));
    w.pod(worker);
    w.pod(driver);
    assert_eq!(w.a("leader.rl.ml.rank"), [ip("10.3.0.9")]);
}

#[test]
fn the_rank_view_can_be_off() {
    let table = Table::new();
    let needs = SyncNeeds::one_list(false, false);
    let mut writer = Writer::new(table.clone(), Policy::default(), Metrics::new(), needs);
    writer.apply(Update::Pod(Change::all(vec![rank_pod(
        "ml", "x", 0, "10.9.0.1",
    )])));
    writer.apply(Update::Service(Change::all(vec![])));
    let a = Answerer::new(table, AnswerConfig::default());
    let mut m = Message::new(7, MessageType::Query, OpCode::Query);
    m.add_query(Query::query(
        Name::from_ascii("0.x.ml.rank.cluster.local.").unwrap(),
        RecordType::A,
    ));
    assert_eq!(a.answer(&m).metadata.response_code, ResponseCode::NXDomain);
    let _ = Phase::Running;
}
