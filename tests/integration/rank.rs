//! The rank view end to end: Jobs and JobSets created the way their
//! controllers do (`/sim/jobs`), ranks by index, the leader, and the TXT
//! gang summary through a gang restart.

use std::collections::HashMap;
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};
use serde_json::json;

use crate::support::*;

const T: Duration = Duration::from_secs(30);

async fn txt(env: &Env, name: &str) -> Option<String> {
    let m = ask(env.dns, name, RecordType::TXT).await;
    m.answers.iter().find_map(|r| match &r.data {
        RData::TXT(t) => Some(t.to_string()),
        _ => None,
    })
}

/// `world=W published=P ready=R generation=G` as numbers.
fn summary(s: &str) -> HashMap<String, u64> {
    s.trim_matches('"')
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

async fn a(env: &Env, name: &str) -> Vec<String> {
    addrs(&ask(env.dns, name, RecordType::A).await)
}

async fn wait_summary(
    env: &Env,
    name: &str,
    what: &str,
    ok: impl Fn(&HashMap<String, u64>) -> bool,
) {
    wait_for(&format!("{what} at {name}"), T, || async {
        match txt(env, name).await {
            Some(s) if ok(&summary(&s)) => Ok(()),
            last => Err(format!("{last:?}")),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexed_job_ranks_through_a_restart() {
    let env = env(
        &[
            "--kubelet",
            "--kubelet-delay-ms=200",
            "--ready-delay-ms=100",
        ],
        &[],
    )
    .await;
    create_job(&env.client, "rv", "bert", 4, "indexed-job").await;
    wait_summary(&env, "bert.rv.rank", "all ranks ready", |s| {
        s["world"] == 4 && s["ready"] == 4
    })
    .await;
    let mut before = Vec::new();
    for i in 0..4 {
        let ip = a(&env, &format!("{i}.bert.rv.rank")).await;
        assert_eq!(ip.len(), 1, "rank {i}");
        assert_eq!(
            ip,
            a(&env, &format!("bert-{i}.bert.rv.svc")).await,
            "rank {i} is the pod with hostname bert-{i}"
        );
        before.push(ip);
    }
    assert_eq!(a(&env, "leader.bert.rv.rank").await, before[0]);
    assert_eq!(
        rcode(&ask(env.dns, "4.bert.rv.rank", RecordType::A).await),
        ResponseCode::NXDomain
    );
    assert_eq!(
        rcode(&ask(env.dns, "0.nojob.rv.rank", RecordType::A).await),
        ResponseCode::NXDomain
    );

    sim_post(&env.client, "/sim/jobs/rv/bert/restart", json!({})).await;
    wait_summary(&env, "bert.rv.rank", "the gang to fall", |s| {
        s["published"] < 4
    })
    .await;
    wait_summary(&env, "bert.rv.rank", "the gang to recover", |s| {
        s["published"] == 4 && s["ready"] == 4
    })
    .await;
    for (i, old) in before.iter().enumerate() {
        let now = a(&env, &format!("{i}.bert.rv.rank")).await;
        assert_eq!(now.len(), 1);
        assert_ne!(&now, old, "rank {i} still answers its old IP");
        assert_eq!(now, a(&env, &format!("bert-{i}.bert.rv.svc")).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobset_ranks_generation_and_leader() {
    let env = env(&["--kubelet", "--kubelet-delay-ms=200"], &[]).await;
    create_job(&env.client, "rv", "llm", 8, "jobset").await;
    wait_summary(&env, "llm.rv.rank", "all ranks published", |s| {
        s["world"] == 8 && s["published"] == 8
    })
    .await;
    let s = summary(&txt(&env, "llm.rv.rank").await.unwrap());
    assert_eq!(s["generation"], 0);
    // JobSet-wide rank g = job-global-index × completions + index; one
    // replicated Job here, so g is the completion index, and the pod's
    // hostname is its child Job's name and that index.
    for g in 0..8 {
        let ip = a(&env, &format!("{g}.llm.rv.rank")).await;
        assert_eq!(ip.len(), 1);
        assert_eq!(ip, a(&env, &format!("llm-workers-0-{g}.llm.rv.svc")).await);
        // The Job's own rank is the same pod.
        assert_eq!(ip, a(&env, &format!("{g}.llm-workers-0.rv.rank")).await);
    }
    // The coordinator the pods name (`llm-workers-0-0.llm`, rank 0).
    let leader = a(&env, "leader.llm.rv.rank").await;
    assert_eq!(leader.len(), 1);
    assert_eq!(leader, a(&env, "llm-workers-0-0.llm.rv.svc").await);
    let old0 = a(&env, "0.llm.rv.rank").await;

    sim_post(&env.client, "/sim/jobs/rv/llm/restart", json!({})).await;
    wait_summary(&env, "llm.rv.rank", "the next generation, whole", |s| {
        s["generation"] == 1 && s["published"] == 8
    })
    .await;
    let new0 = a(&env, "0.llm.rv.rank").await;
    assert_eq!(new0.len(), 1);
    assert_ne!(new0, old0, "rank 0 answers its new pod");
    let (_, body) = admin_get(env.admin, "/metrics").await;
    assert!(
        body.contains("podns_rank_gang_complete_seconds_count"),
        "{body}"
    );
    assert!(
        !body.contains("podns_rank_gang_complete_seconds_count 0"),
        "gang completions observed"
    );
    // The Job watch reports its sync like the pod and service watches.
    assert!(
        body.contains("podns_watch_synced{resource=\"jobs\"} 1"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_rank_view_serves_no_rank_names() {
    let env = env(&["--kubelet"], &["--no-rank-view"]).await;
    create_job(&env.client, "rv", "off", 2, "indexed-job").await;
    wait_for("pods answer", T, || async {
        !a(&env, "off-1.off.rv.svc").await.is_empty()
    })
    .await;
    assert_eq!(
        rcode(&ask(env.dns, "1.off.rv.rank", RecordType::A).await),
        ResponseCode::NXDomain
    );
    let jobs = sim_get(&env.client, "/sim/stats").await["requests"]["watch"]["jobs"]
        .as_u64()
        .unwrap_or(0)
        + sim_get(&env.client, "/sim/stats").await["requests"]["list"]["jobs"]
            .as_u64()
            .unwrap_or(0);
    assert_eq!(jobs, 0, "no Job watch without the rank view");
    let (_, body) = admin_get(env.admin, "/metrics").await;
    assert!(!body.contains("resource=\"jobs\""), "{body}");
}
