//! The raw API protocol: discovery, pagination, selectors, watches,
//! resourceVersion semantics, streaming lists and bookmarks, graceful
//! deletion, Status errors and namespace cascades.

use podns_sim::{SimArgs, spawn};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;

use super::support::*;

#[tokio::test]
async fn discovery_documents() {
    let sim = start_default().await;
    let v = get(sim.addr, "/api/v1").await.json();
    let names: Vec<&str> = v["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    for want in [
        "pods",
        "pods/status",
        "services",
        "services/status",
        "namespaces",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    assert_eq!(get(sim.addr, "/api").await.json()["versions"][0], "v1");
    assert_eq!(get(sim.addr, "/apis").await.json()["kind"], "APIGroupList");
    assert_eq!(get(sim.addr, "/version").await.json()["major"], "1");
}

#[tokio::test]
async fn pagination_limit_continue_and_expiry() {
    let sim = start_default().await;
    let addr = sim.addr;
    for i in 0..5 {
        create_pod(addr, "default", &format!("p{i}"), json!({})).await;
    }
    let first = get(addr, "/api/v1/namespaces/default/pods?limit=2")
        .await
        .json();
    assert_eq!(names(&first), ["p0", "p1"]);
    let rv = first["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    // A change after the first page does not show in later pages.
    create_pod(addr, "default", "p10", json!({})).await;
    let second = get(
        addr,
        &format!("/api/v1/namespaces/default/pods?limit=2&continue={token}"),
    )
    .await
    .json();
    assert_eq!(names(&second), ["p2", "p3"]);
    assert_eq!(second["metadata"]["resourceVersion"], rv.as_str());
    let t2 = second["metadata"]["continue"].as_str().unwrap().to_string();
    let third = get(
        addr,
        &format!("/api/v1/namespaces/default/pods?limit=2&continue={t2}"),
    )
    .await
    .json();
    assert_eq!(names(&third), ["p4"]);
    assert!(third["metadata"]["continue"].is_null());
    // Cluster-wide list sees everything at once.
    assert_eq!(
        get(addr, "/api/v1/pods").await.json()["items"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
    // After compaction the old token is Expired.
    post_json(addr, "/sim/faults/compact", &json!({})).await;
    let r = get(
        addr,
        &format!("/api/v1/namespaces/default/pods?limit=2&continue={t2}"),
    )
    .await;
    assert_eq!(r.status, 410);
    assert_eq!(r.json()["reason"], "Expired");
    let r = get(addr, "/api/v1/pods?limit=2&continue=garbage").await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn label_and_field_selectors() {
    let sim = start_default().await;
    let addr = sim.addr;
    create_pod(addr, "default", "a", json!({"app": "x", "tier": "web"})).await;
    create_pod(addr, "default", "b", json!({"app": "y", "tier": "db"})).await;
    create_pod(addr, "default", "c", json!({"app": "z"})).await;
    let q = |sel: &str| {
        let sel = sel
            .replace(' ', "%20")
            .replace('!', "%21")
            .replace('(', "%28")
            .replace(')', "%29")
            .replace(',', "%2C")
            .replace('=', "%3D");
        format!("/api/v1/namespaces/default/pods?labelSelector={sel}")
    };
    let cases: [(&str, &[&str]); 9] = [
        ("app=x", &["a"]),
        ("app==y", &["b"]),
        ("app!=x", &["b", "c"]),
        ("app in (x,y)", &["a", "b"]),
        ("app notin (x,y)", &["c"]),
        ("tier", &["a", "b"]),
        ("!tier", &["c"]),
        ("app in (x,y,z),tier!=db", &["a", "c"]),
        ("", &["a", "b", "c"]),
    ];
    for (sel, want) in cases {
        let got = names(&get(addr, &q(sel)).await.json());
        assert_eq!(got, want, "labelSelector {sel:?}");
    }
    // Field selectors: set b's status, then select on it.
    merge_patch(
        addr,
        "/api/v1/namespaces/default/pods/b/status",
        br#"{"status":{"phase":"Running"}}"#,
    )
    .await;
    let f = |s: &str| {
        format!(
            "/api/v1/pods?fieldSelector={}",
            s.replace('=', "%3D")
                .replace('!', "%21")
                .replace(',', "%2C")
        )
    };
    assert_eq!(
        names(&get(addr, &f("status.phase=Running")).await.json()),
        ["b"]
    );
    assert_eq!(
        names(&get(addr, &f("status.phase!=Running")).await.json()),
        ["a", "c"]
    );
    assert_eq!(
        names(&get(addr, &f("metadata.name==c")).await.json()),
        ["c"]
    );
    assert_eq!(
        names(
            &get(addr, &f("metadata.namespace=default,spec.nodeName="))
                .await
                .json()
        ),
        ["a", "b", "c"]
    );
    assert_eq!(
        names(&get(addr, &f("metadata.namespace=other")).await.json()),
        Vec::<String>::new()
    );
    // Bad selectors are Status errors, not panics.
    for bad in [q("app in (x"), f("spec.foo=1"), f("nonsense")] {
        let r = get(addr, &bad).await;
        assert_eq!(r.status, 400, "{bad}");
        assert_eq!(r.json()["kind"], "Status");
    }
}

#[tokio::test]
async fn watch_selector_transitions() {
    let sim = start_default().await;
    let addr = sim.addr;
    create_pod(addr, "default", "a", json!({"app": "x"})).await;
    let mut w = RawWatch::open(
        addr,
        "/api/v1/namespaces/default/pods?watch=true&labelSelector=app%3Dx",
    )
    .await;
    assert_eq!(w.status, 200);
    assert_eq!(ev(&w.next().await.unwrap()), ("ADDED".into(), "a".into()));
    let patch = |name: &'static str, app: &'static str| {
        let body = json!({"metadata": {"labels": {"app": app}}}).to_string();
        async move {
            let r = http(
                addr,
                "PATCH",
                &format!("/api/v1/namespaces/default/pods/{name}"),
                Some("application/strategic-merge-patch+json"),
                body.as_bytes(),
            )
            .await;
            assert_eq!(r.status, 200);
        }
    };
    patch("a", "y").await;
    assert_eq!(ev(&w.next().await.unwrap()), ("DELETED".into(), "a".into()));
    create_pod(addr, "default", "b", json!({"app": "y"})).await;
    patch("b", "x").await;
    assert_eq!(ev(&w.next().await.unwrap()), ("ADDED".into(), "b".into()));
    patch("a", "x").await;
    assert_eq!(ev(&w.next().await.unwrap()), ("ADDED".into(), "a".into()));
    merge_patch(
        addr,
        "/api/v1/namespaces/default/pods/a",
        br#"{"metadata":{"annotations":{"k":"v"}}}"#,
    )
    .await;
    let e = w.next().await.unwrap();
    assert_eq!(ev(&e), ("MODIFIED".into(), "a".into()));
    assert_eq!(e["object"]["metadata"]["annotations"]["k"], "v");
    assert_eq!(
        e["object"]["unknownTopLevel"]["kept"], 1,
        "unknown fields round-trip"
    );
}

#[tokio::test]
async fn resource_version_semantics() {
    let sim = start_default().await;
    let addr = sim.addr;
    let a = create_pod(addr, "default", "a", json!({})).await;
    let rv_a: u64 = a["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let b = create_pod(addr, "default", "b", json!({})).await;
    let rv_b: u64 = b["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv_b > rv_a, "one global counter");
    // A service write moves the same counter.
    let s = post_json(
        addr,
        "/api/v1/namespaces/default/services",
        &json!({"metadata": {"name": "s"}}),
    )
    .await
    .json();
    let rv_s: u64 = s["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(rv_s, rv_b + 1);
    let list = get(addr, "/api/v1/namespaces/default/pods").await.json();
    assert_eq!(list["metadata"]["resourceVersion"], rv_s.to_string());
    // Exact: the state at that version.
    let exact = get(
        addr,
        &format!(
            "/api/v1/namespaces/default/pods?resourceVersion={rv_a}&resourceVersionMatch=Exact"
        ),
    )
    .await
    .json();
    assert_eq!(names(&exact), ["a"]);
    assert_eq!(exact["metadata"]["resourceVersion"], rv_a.to_string());
    let nlt = get(addr, &format!("/api/v1/namespaces/default/pods?resourceVersion={rv_a}&resourceVersionMatch=NotOlderThan")).await.json();
    assert_eq!(names(&nlt), ["a", "b"]);
    let r = get(
        addr,
        "/api/v1/namespaces/default/pods?resourceVersionMatch=Exact",
    )
    .await;
    assert_eq!(r.status, 422);
    // Watch from a specific version resumes exactly after it.
    let mut w = RawWatch::open(
        addr,
        &format!("/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv_a}"),
    )
    .await;
    let e = w.next().await.unwrap();
    assert_eq!(ev(&e), ("ADDED".into(), "b".into()));
    assert_eq!(e["object"]["metadata"]["resourceVersion"], rv_b.to_string());
    // Watch with rv "0": synthetic ADDED for current objects.
    let mut w0 = RawWatch::open(
        addr,
        "/api/v1/namespaces/default/pods?watch=1&resourceVersion=0",
    )
    .await;
    let mut got = vec![
        ev(&w0.next().await.unwrap()).1,
        ev(&w0.next().await.unwrap()).1,
    ];
    got.sort();
    assert_eq!(got, ["a", "b"]);
    // Compacted history: 200, then an ERROR event with a 410 Status.
    post_json(addr, "/sim/faults/compact", &json!({})).await;
    let mut old = RawWatch::open(
        addr,
        &format!("/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv_a}"),
    )
    .await;
    assert_eq!(old.status, 200);
    let e = old.next().await.unwrap();
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["code"], 410);
    assert_eq!(e["object"]["reason"], "Expired");
    assert!(old.next().await.is_none(), "stream closes after the ERROR");
    let r = get(
        addr,
        &format!(
            "/api/v1/namespaces/default/pods?resourceVersion={rv_a}&resourceVersionMatch=Exact"
        ),
    )
    .await;
    assert_eq!(r.status, 410);
    // A version from the future is refused, for lists and watches alike.
    let future = rv_s + 100;
    for path in [
        format!("/api/v1/pods?resourceVersion={future}"),
        format!("/api/v1/pods?watch=1&resourceVersion={future}"),
    ] {
        let r = get(addr, &path).await;
        assert_eq!(r.status, 504, "{path}");
        assert_eq!(
            r.json()["details"]["causes"][0]["reason"],
            "ResourceVersionTooLarge"
        );
    }
}

#[tokio::test]
async fn shutdown_token_ends_the_server_with_open_watches() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let token = CancellationToken::new();
    let h = spawn(SimArgs::default(), listener, token.clone())
        .await
        .unwrap();
    let mut w = RawWatch::open(h.addr, "/api/v1/pods?watch=1").await;
    assert_eq!(w.status, 200);
    token.cancel();
    assert!(w.next().await.is_none(), "the watch ends at shutdown");
    timeout(DEADLINE, h.wait())
        .await
        .expect("server ends")
        .unwrap();
}

#[tokio::test]
async fn streaming_list_and_bookmarks() {
    let sim = start(SimArgs {
        bookmark_interval: 1,
        ..SimArgs::default()
    })
    .await;
    let addr = sim.addr;
    create_pod(addr, "default", "a", json!({})).await;
    create_pod(addr, "default", "b", json!({})).await;
    for bad in [
        "/api/v1/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true",
        "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
    ] {
        let r = get(addr, bad).await;
        assert_eq!(r.status, 422, "{bad}");
        assert_eq!(r.json()["reason"], "Invalid");
    }
    let mut w = RawWatch::open(
        addr,
        "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=0&timeoutSeconds=2",
    )
    .await;
    let mut added = vec![ev(&w.next().await.unwrap()), ev(&w.next().await.unwrap())];
    added.sort();
    assert_eq!(
        added,
        [
            ("ADDED".to_string(), "a".to_string()),
            ("ADDED".into(), "b".into())
        ]
    );
    let bm = w.next().await.unwrap();
    assert_eq!(bm["type"], "BOOKMARK");
    assert_eq!(bm["object"]["kind"], "Pod");
    assert_eq!(
        bm["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let rv = bm["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(rv, sim.sim().store.current_rv().to_string());
    // Periodic bookmarks follow (every second here).
    let next = w.until(|e| e["type"] == "BOOKMARK").await;
    assert!(next["object"]["metadata"]["annotations"].is_null());
    assert_eq!(next["object"]["apiVersion"], "v1");
    // timeoutSeconds closes the stream.
    let end = Instant::now() + DEADLINE;
    while w.next().await.is_some() {
        assert!(Instant::now() < end);
    }
}

#[tokio::test]
async fn grace_period_deletion() {
    let sim = start_default().await;
    let addr = sim.addr;
    create_pod(addr, "default", "sched", json!({})).await;
    create_pod(addr, "default", "unsched", json!({})).await;
    merge_patch(
        addr,
        "/api/v1/namespaces/default/pods/sched",
        br#"{"spec":{"nodeName":"n1"}}"#,
    )
    .await;
    let mut w = RawWatch::open(
        addr,
        "/api/v1/namespaces/default/pods?watch=1&resourceVersion=0",
    )
    .await;
    w.next().await;
    w.next().await;
    let r = http(
        addr,
        "DELETE",
        "/api/v1/namespaces/default/pods/sched",
        Some("application/json"),
        br#"{"gracePeriodSeconds":1}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(!r.json()["metadata"]["deletionTimestamp"].is_null());
    let e = w.next().await.unwrap();
    assert_eq!(ev(&e), ("MODIFIED".into(), "sched".into()));
    assert_eq!(e["object"]["metadata"]["deletionGracePeriodSeconds"], 1);
    assert_eq!(
        get(addr, "/api/v1/namespaces/default/pods/sched")
            .await
            .status,
        200
    );
    // Never scheduled: goes at once despite the grace period.
    let r = http(
        addr,
        "DELETE",
        "/api/v1/namespaces/default/pods/unsched?gracePeriodSeconds=30",
        None,
        b"",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        ev(&w.next().await.unwrap()),
        ("DELETED".into(), "unsched".into())
    );
    // The scheduled pod disappears when its grace period ends.
    assert_eq!(
        ev(&w.next().await.unwrap()),
        ("DELETED".into(), "sched".into())
    );
    assert_eq!(
        get(addr, "/api/v1/namespaces/default/pods/sched")
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn status_errors() {
    let sim = start_default().await;
    let addr = sim.addr;
    let check = |r: Resp, code: u16, reason: &str| {
        assert_eq!(r.status, code, "{}", String::from_utf8_lossy(&r.body));
        let s = r.json();
        assert_eq!(s["kind"], "Status");
        assert_eq!(s["status"], "Failure");
        assert_eq!(s["code"], code);
        assert_eq!(s["reason"], reason);
    };
    check(
        get(addr, "/api/v1/namespaces/default/pods/nope").await,
        404,
        "NotFound",
    );
    check(get(addr, "/api/v1/namespaces/nope").await, 404, "NotFound");
    check(get(addr, "/api/v1/frobs").await, 404, "NotFound");
    check(get(addr, "/no/such/path").await, 404, "NotFound");
    check(
        post_json(addr, "/api/v1/namespaces/nope/pods", &pod("a", json!({}))).await,
        404,
        "NotFound",
    );
    create_pod(addr, "default", "a", json!({})).await;
    check(
        post_json(
            addr,
            "/api/v1/namespaces/default/pods",
            &pod("a", json!({})),
        )
        .await,
        409,
        "AlreadyExists",
    );
    let mut stale = pod("a", json!({}));
    stale["metadata"]["resourceVersion"] = "1".into();
    check(
        http(
            addr,
            "PUT",
            "/api/v1/namespaces/default/pods/a",
            Some("application/json"),
            stale.to_string().as_bytes(),
        )
        .await,
        409,
        "Conflict",
    );
    let mut svc = pod("s", json!({}));
    svc["kind"] = "Service".into();
    check(
        post_json(addr, "/api/v1/namespaces/default/pods", &svc).await,
        422,
        "Invalid",
    );
    check(
        post_json(addr, "/api/v1/namespaces/default/pods", &json!([1])).await,
        422,
        "Invalid",
    );
    check(
        post_json(
            addr,
            "/api/v1/namespaces/default/pods",
            &json!({"metadata": {}}),
        )
        .await,
        422,
        "Invalid",
    );
    // Bodies it cannot read, and a patch type it does not take.
    for (method, path, ct, body, code, reason) in [
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/json",
            &b"{not json"[..],
            400,
            "BadRequest",
        ),
        (
            "PATCH",
            "/api/v1/namespaces/default/pods/a",
            "application/merge-patch+json",
            b"[",
            400,
            "BadRequest",
        ),
        (
            "PATCH",
            "/api/v1/namespaces/default/pods/a",
            "application/apply-patch+yaml",
            b"{}",
            415,
            "UnsupportedMediaType",
        ),
    ] {
        check(http(addr, method, path, Some(ct), body).await, code, reason);
    }
    check(get(addr, "/api/v1/pods?limit=abc").await, 400, "BadRequest");
    check(
        http(addr, "DELETE", "/api/v1/namespaces/default/pods", None, b"").await,
        405,
        "MethodNotAllowed",
    );
    // A generateName create gets a 5-character suffix.
    let g = post_json(
        addr,
        "/api/v1/namespaces/default/pods",
        &json!({"metadata": {"generateName": "w-"}}),
    )
    .await
    .json();
    let n = g["metadata"]["name"].as_str().unwrap();
    assert!(n.starts_with("w-") && n.len() == 7, "{n}");
}

#[tokio::test]
async fn namespace_delete_cascades_with_events() {
    let sim = start_default().await;
    let addr = sim.addr;
    assert_eq!(
        post_json(
            addr,
            "/api/v1/namespaces",
            &json!({"metadata": {"name": "t"}})
        )
        .await
        .status,
        201
    );
    create_pod(addr, "t", "p", json!({})).await;
    post_json(
        addr,
        "/api/v1/namespaces/t/services",
        &json!({"metadata": {"name": "s"}, "spec": {"clusterIP": "None"}}),
    )
    .await;
    let mut w = RawWatch::open(addr, "/api/v1/pods?watch=1&resourceVersion=0").await;
    w.until(|e| ev(e) == ("ADDED".into(), "p".into())).await;
    assert_eq!(
        http(addr, "DELETE", "/api/v1/namespaces/t", None, b"")
            .await
            .status,
        200
    );
    w.until(|e| ev(e) == ("DELETED".into(), "p".into())).await;
    assert_eq!(
        get(addr, "/api/v1/namespaces/t/services/s").await.status,
        404
    );
    assert_eq!(get(addr, "/api/v1/namespaces/t").await.status, 404);
}
