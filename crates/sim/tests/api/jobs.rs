//! batch/v1 Jobs: watchers, REST, selectors and status, `/sim/jobs` and
//! JobSet restarts, namespace deletion, lean pods.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use podns_sim::SimArgs;
use serde_json::{Value, json};

use super::support::*;

fn job_body(name: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "labels": {"team": "a"}},
           "spec": {"completions": 2, "parallelism": 2, "completionMode": "Indexed",
                    "template": {"spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "c", "image": "busybox"}]}}}})
}

fn label<'a>(o: &'a Value, k: &str) -> &'a str {
    o["metadata"]["labels"][k].as_str().unwrap_or_default()
}

/// A kube-rs watcher on `batch/v1` Jobs across namespaces: initial list,
/// live events from the API and from `/sim/jobs`, resume without relist.
async fn exercise_job_watcher(cfg: watcher::Config, streaming: bool) {
    let sim = start_default().await;
    let addr = sim.addr;
    sim_job(addr, "ml", "pre", 2, "indexed-job").await;
    sim_job(addr, "ml", "set", 2, "jobset").await;
    let (mut rx, task) = watch_names(Api::<Job>::all(sim.client()), cfg);
    let before = expect_seen(&mut rx, Seen::InitDone).await;
    assert!(
        before.contains(&Seen::InitApply("pre".into())),
        "{before:?}"
    );
    assert!(
        before.contains(&Seen::InitApply("set-workers-0".into())),
        "{before:?}"
    );
    let jobs: Api<Job> = Api::namespaced(sim.client(), "ml");
    let j: Job = serde_json::from_value(job_body("made")).unwrap();
    jobs.create(&PostParams::default(), &j).await.unwrap();
    expect_seen(&mut rx, Seen::Apply("made".into())).await;
    sim_job(addr, "ml", "later", 1, "jobset").await;
    expect_seen(&mut rx, Seen::Apply("later-workers-0".into())).await;

    let lists_before = stat(&get(addr, "/sim/stats").await.json(), "list", "jobs");
    post_json(addr, "/sim/faults/drop-watches", &json!({})).await;
    jobs.delete("made", &DeleteParams::default()).await.unwrap();
    let between = expect_seen(&mut rx, Seen::Delete("made".into())).await;
    assert!(!between.contains(&Seen::Init), "{between:?}");
    let s = get(addr, "/sim/stats").await.json();
    assert_eq!(
        stat(&s, "list", "jobs"),
        lists_before,
        "resume must not list"
    );
    assert!(stat(&s, "watch", "jobs") >= 2, "{s}");
    if streaming {
        assert_eq!(stat(&s, "list", "jobs"), 0, "streaming lists never list");
    }
    assert_eq!(s["objects"]["jobs"], 3);
    task.abort();
}

#[tokio::test]
async fn job_watcher_default_config() {
    exercise_job_watcher(watcher::Config::default().page_size(1), false).await;
}

#[tokio::test]
async fn job_watcher_streaming_lists() {
    exercise_job_watcher(watcher::Config::default().streaming_lists(), true).await;
}

#[tokio::test]
async fn jobs_rest_discovery_selectors_and_status() {
    let sim = start_default().await;
    let addr = sim.addr;
    // Discovery.
    let groups = get(addr, "/apis").await.json();
    let batch = named(&groups["groups"], "batch");
    assert_eq!(batch["preferredVersion"]["groupVersion"], "batch/v1");
    assert_eq!(get(addr, "/apis/batch").await.json()["kind"], "APIGroup");
    let rl = get(addr, "/apis/batch/v1").await.json();
    assert_eq!(rl["groupVersion"], "batch/v1");
    let res: Vec<&str> = rl["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(res, ["jobs", "jobs/status"]);
    // Jobs live in batch/v1 only, and core kinds not there.
    assert_eq!(get(addr, "/api/v1/jobs").await.status, 404);
    assert_eq!(get(addr, "/apis/batch/v1/pods").await.status, 404);

    for n in ["a", "b", "c"] {
        let r = post_json(addr, "/apis/batch/v1/namespaces/default/jobs", &job_body(n)).await;
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let j = r.json();
        assert_eq!(j["apiVersion"], "batch/v1");
        assert_eq!(j["kind"], "Job");
        let uid = j["metadata"]["uid"].as_str().unwrap();
        assert_eq!(
            j["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
            uid
        );
        assert_eq!(label(&j["spec"]["template"], "job-name"), n);
    }
    // A core apiVersion is refused.
    let mut wrong = job_body("d");
    wrong["apiVersion"] = "v1".into();
    let r = post_json(addr, "/apis/batch/v1/namespaces/default/jobs", &wrong).await;
    assert_eq!(r.status, 422);

    let first = get(addr, "/apis/batch/v1/jobs?limit=2").await.json();
    assert_eq!(first["kind"], "JobList");
    assert_eq!(first["apiVersion"], "batch/v1");
    assert_eq!(names(&first), ["a", "b"]);
    let cont = first["metadata"]["continue"].as_str().unwrap();
    let rest = get(
        addr,
        &format!("/apis/batch/v1/jobs?limit=2&continue={cont}"),
    )
    .await
    .json();
    assert_eq!(names(&rest), ["c"]);
    let by_name = get(
        addr,
        "/apis/batch/v1/namespaces/default/jobs?fieldSelector=metadata.name%3Db",
    )
    .await
    .json();
    assert_eq!(names(&by_name), ["b"]);
    let by_ns = get(
        addr,
        "/apis/batch/v1/jobs?fieldSelector=metadata.namespace%3Dother",
    )
    .await
    .json();
    assert!(names(&by_ns).is_empty());
    let by_label = get(addr, "/apis/batch/v1/jobs?labelSelector=job-name%3Dc")
        .await
        .json();
    assert_eq!(names(&by_label), ["c"]);
    assert_eq!(
        get(addr, "/apis/batch/v1/jobs?fieldSelector=spec.nodeName%3Dx")
            .await
            .status,
        400
    );

    // A raw watch names the kind in events and bookmarks.
    let rv = first["metadata"]["resourceVersion"].as_str().unwrap();
    let mut w = RawWatch::open(
        addr,
        &format!("/apis/batch/v1/namespaces/default/jobs?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"),
    )
    .await;
    assert_eq!(w.status, 200);

    // kube-rs: get, merge patch, the status subresource, delete.
    let jobs: Api<Job> = Api::namespaced(sim.client(), "default");
    let a = jobs.get("a").await.unwrap();
    assert_eq!(a.spec.as_ref().unwrap().completions, Some(2));
    let patched = jobs
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "b"}}, "status": {"active": 9}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.as_ref().unwrap()["team"], "b");
    assert_eq!(patched.status.as_ref().unwrap().active, None);
    let e = w.until(|e| ev(e).1 == "a").await;
    assert_eq!(e["type"], "MODIFIED");
    assert_eq!(e["object"]["apiVersion"], "batch/v1");
    assert_eq!(e["object"]["kind"], "Job");
    let mut st = patched.clone();
    st.status.get_or_insert_default().active = Some(2);
    let after = jobs
        .replace_status("a", &PostParams::default(), &st)
        .await
        .unwrap();
    assert_eq!(after.status.unwrap().active, Some(2));
    let err = jobs
        .replace("a", &PostParams::default(), &a)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409),
        "{err:?}"
    );
    jobs.delete("b", &DeleteParams::default()).await.unwrap();
    let e = w.until(|e| ev(e).1 == "b").await;
    assert_eq!(e["type"], "DELETED");
    assert!(jobs.get_opt("b").await.unwrap().is_none());
    let nf = get(addr, "/apis/batch/v1/namespaces/default/jobs/b").await;
    assert_eq!(nf.status, 404);
    let nf = nf.json();
    assert_eq!(nf["message"], "jobs.batch \"b\" not found");
    assert_eq!(nf["details"]["group"], "batch");
    let s = get(addr, "/sim/stats").await.json();
    assert_eq!(s["objects"]["jobs"], 2);
    assert!(stat(&s, "update", "jobs/status") >= 1, "{s}");
    assert!(stat(&s, "patch", "jobs") >= 1, "{s}");
}

#[tokio::test]
async fn sim_jobs_create_the_owning_job() {
    let sim = start_default().await;
    let addr = sim.addr;
    for (kind, name, job) in [
        ("indexed-job", "ij", "ij"),
        ("jobset", "js", "js-workers-0"),
    ] {
        let r = sim_job(addr, "ml", name, 3, kind).await;
        assert_eq!(r["job"], job);
        let j = get(addr, &format!("/apis/batch/v1/namespaces/ml/jobs/{job}"))
            .await
            .json();
        assert_eq!(j["apiVersion"], "batch/v1");
        assert_eq!(j["spec"]["completions"], 3);
        assert_eq!(j["spec"]["parallelism"], 3);
        assert_eq!(j["spec"]["completionMode"], "Indexed");
        let uid = j["metadata"]["uid"].as_str().unwrap();
        for k in ["batch.kubernetes.io/job-name", "job-name"] {
            assert_eq!(label(&j, k), job);
        }
        for k in ["batch.kubernetes.io/controller-uid", "controller-uid"] {
            assert_eq!(label(&j, k), uid);
        }
        assert_eq!(
            j["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
            uid
        );
        let pods = get(
            addr,
            &format!(
                "/api/v1/namespaces/ml/pods?labelSelector=batch.kubernetes.io%2Fjob-name%3D{job}"
            ),
        )
        .await
        .json();
        let pods = pods["items"].as_array().unwrap();
        assert_eq!(pods.len(), 3);
        let mut hosts = Vec::new();
        for p in pods {
            let owner = &p["metadata"]["ownerReferences"][0];
            assert_eq!(owner["kind"], "Job");
            assert_eq!(owner["name"], job);
            assert_eq!(owner["uid"], uid);
            assert_eq!(label(p, "job-name"), job);
            assert_eq!(label(p, "controller-uid"), uid);
            assert_eq!(label(p, "batch.kubernetes.io/controller-uid"), uid);
            let idx = label(p, "batch.kubernetes.io/job-completion-index");
            assert_eq!(
                p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"],
                idx
            );
            // The Job controller's hostname: the owning Job's name and the
            // index; the subdomain is the workload's (its Service's) name.
            assert_eq!(p["spec"]["hostname"], format!("{job}-{idx}"));
            assert_eq!(p["spec"]["subdomain"], name);
            assert!(
                p["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("{job}-{idx}-"))
            );
            hosts.push(p["spec"]["hostname"].as_str().unwrap().to_string());
            if kind == "jobset" {
                for (k, v) in [
                    ("jobset.sigs.k8s.io/jobset-name", name),
                    ("jobset.sigs.k8s.io/replicatedjob-name", "workers"),
                    ("jobset.sigs.k8s.io/job-index", "0"),
                    ("jobset.sigs.k8s.io/job-global-index", "0"),
                    ("jobset.sigs.k8s.io/restart-attempt", "0"),
                ] {
                    assert_eq!(label(p, k), v, "pod label {k}");
                    assert_eq!(label(&j, k), v, "job label {k}");
                }
                assert_eq!(j["metadata"]["ownerReferences"][0]["kind"], "JobSet");
                assert_eq!(j["metadata"]["ownerReferences"][0]["name"], name);
            }
        }
        hosts.sort();
        assert_eq!(
            hosts,
            (0..3).map(|i| format!("{job}-{i}")).collect::<Vec<_>>()
        );
        let svc = get(addr, &format!("/api/v1/namespaces/ml/services/{name}"))
            .await
            .json();
        assert_eq!(svc["spec"]["clusterIP"], "None");
    }
    // Start-up jobs get their Jobs too.
    let sim = start_mixed_jobs().await;
    let l = get(sim.addr, "/apis/batch/v1/namespaces/default/jobs")
        .await
        .json();
    assert_eq!(names(&l), ["train-0", "train-1-workers-0"]);
    assert_eq!(
        get(sim.addr, "/sim/stats").await.json()["objects"]["jobs"],
        2
    );
}

#[tokio::test]
async fn jobset_restart_recreates_the_child_job() {
    let sim = start(SimArgs {
        kubelet: true,
        ..SimArgs::default()
    })
    .await;
    let addr = sim.addr;
    sim_job(addr, "ml", "gang", 2, "jobset").await;
    sim_job(addr, "ml", "solo", 2, "indexed-job").await;
    let running = |p: &Value| p["status"]["podIP"].as_str().is_some_and(|s| !s.is_empty());
    let sel = "/api/v1/namespaces/ml/pods?labelSelector=jobset.sigs.k8s.io%2Fjobset-name%3Dgang";
    let old_pods = wait_for("gang pods running", DEADLINE, || async {
        let l = get(addr, sel).await.json();
        let items = l["items"].as_array().unwrap().clone();
        (items.len() == 2 && items.iter().all(running)).then_some(items)
    })
    .await;
    let old_job = get(addr, "/apis/batch/v1/namespaces/ml/jobs/gang-workers-0")
        .await
        .json();
    let list = get(addr, "/apis/batch/v1/namespaces/ml/jobs").await.json();
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap();
    let mut w = RawWatch::open(
        addr,
        &format!("/apis/batch/v1/namespaces/ml/jobs?watch=1&resourceVersion={rv}"),
    )
    .await;
    let r = post_json(addr, "/sim/jobs/ml/gang/restart", &json!({})).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // The Job controller may write the old Job's status first (its pods
    // becoming Ready): skip MODIFIED events, not the order of the others.
    let not_status = |e: &Value| e["type"] != "MODIFIED";
    let del = w.until(not_status).await;
    assert_eq!(ev(&del), ("DELETED".into(), "gang-workers-0".into()));
    assert_eq!(del["object"]["metadata"]["uid"], old_job["metadata"]["uid"]);
    let add = w.until(not_status).await;
    assert_eq!(ev(&add), ("ADDED".into(), "gang-workers-0".into()));
    let new_job = &add["object"];
    let uid = new_job["metadata"]["uid"].as_str().unwrap();
    assert_ne!(uid, old_job["metadata"]["uid"].as_str().unwrap());
    assert_eq!(label(new_job, "jobset.sigs.k8s.io/restart-attempt"), "1");
    assert_eq!(new_job["spec"]["completions"], 2);
    let old_ips: Vec<&str> = old_pods
        .iter()
        .map(|p| p["status"]["podIP"].as_str().unwrap())
        .collect();
    let new_pods = wait_for("restarted gang pods running", DEADLINE, || async {
        let l = get(addr, sel).await.json();
        let items = l["items"].as_array().unwrap().clone();
        (items.len() == 2
            && items.iter().all(running)
            && items
                .iter()
                .all(|p| label(p, "jobset.sigs.k8s.io/restart-attempt") == "1"))
        .then_some(items)
    })
    .await;
    for p in &new_pods {
        assert_eq!(p["metadata"]["ownerReferences"][0]["uid"], uid);
        assert_eq!(label(p, "controller-uid"), uid);
        assert_eq!(label(p, "job-name"), "gang-workers-0");
        assert!(!old_ips.contains(&p["status"]["podIP"].as_str().unwrap()));
        let idx = label(p, "batch.kubernetes.io/job-completion-index");
        assert_eq!(p["spec"]["hostname"], format!("gang-workers-0-{idx}"));
    }
    // An indexed-job restart replaces pods only: the Job stays, and so
    // does its spec (the Job controller writes its status as the pods go).
    let solo = get(addr, "/apis/batch/v1/namespaces/ml/jobs/solo")
        .await
        .json();
    let r = post_json(addr, "/sim/jobs/ml/solo/restart", &json!({})).await;
    assert_eq!(r.status, 200);
    let again = get(addr, "/apis/batch/v1/namespaces/ml/jobs/solo")
        .await
        .json();
    assert_eq!(again["metadata"]["uid"], solo["metadata"]["uid"]);
    assert_eq!(again["metadata"]["generation"], 1);
    assert_eq!(again["spec"], solo["spec"]);
    let l = get(
        addr,
        "/api/v1/namespaces/ml/pods?labelSelector=job-name%3Dsolo",
    )
    .await
    .json();
    for p in l["items"].as_array().unwrap() {
        assert_eq!(
            p["metadata"]["ownerReferences"][0]["uid"],
            solo["metadata"]["uid"]
        );
    }
}

#[tokio::test]
async fn namespace_delete_removes_jobs() {
    let sim = start_default().await;
    let addr = sim.addr;
    sim_job(addr, "gone", "x", 1, "jobset").await;
    let mut w = RawWatch::open(addr, "/apis/batch/v1/jobs?watch=1&resourceVersion=0").await;
    w.until(|e| ev(e) == ("ADDED".into(), "x-workers-0".into()))
        .await;
    assert_eq!(
        http(addr, "DELETE", "/api/v1/namespaces/gone", None, b"")
            .await
            .status,
        200
    );
    let e = w
        .until(|e| ev(e) == ("DELETED".into(), "x-workers-0".into()))
        .await;
    assert_eq!(e["object"]["kind"], "Job");
    assert_eq!(
        get(addr, "/apis/batch/v1/namespaces/gone/jobs/x-workers-0")
            .await
            .status,
        404
    );
    assert_eq!(get(addr, "/sim/stats").await.json()["objects"]["jobs"], 0);
}

/// `--lean-pods`: the start-up pods are small but keep what a DNS server
/// reads, and a kube-rs client still decodes them as Pods.
#[tokio::test]
async fn lean_pods_are_small_and_complete_for_dns() {
    let sim = start(SimArgs {
        kubelet: true,
        lean_pods: true,
        jobs: 1,
        ranks: 3,
        ..SimArgs::default()
    })
    .await;
    let r = get(sim.addr, "/api/v1/namespaces/default/pods").await;
    assert_eq!(r.status, 200);
    let list = r.json();
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    // ~7.6 KB a pod without the flag.
    assert!(
        r.body.len() < 3 * 3000,
        "lean list is {} bytes",
        r.body.len()
    );
    for p in items {
        assert!(p.get("managedFields").is_none() && p["metadata"].get("managedFields").is_none());
        assert!(p["spec"].get("volumes").is_none());
        assert_eq!(p["spec"]["subdomain"], "train-0");
        assert!(
            p["spec"]["hostname"]
                .as_str()
                .unwrap()
                .starts_with("train-0-")
        );
        assert!(p["status"]["podIP"].as_str().is_some_and(|s| !s.is_empty()));
    }
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    let got = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(got.items.len(), 3);
    assert!(
        got.items
            .iter()
            .all(|p| p.spec.as_ref().unwrap().hostname.is_some())
    );
}
