//! Tests of `podns sim` over real HTTP on loopback: kube-rs watchers,
//! kubectl, and the raw protocol (lists, watches, Status errors).

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use podns_sim::{SimArgs, SimHandle, spawn};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(10);

struct Sim {
    h: SimHandle,
    token: CancellationToken,
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

impl std::ops::Deref for Sim {
    type Target = SimHandle;
    fn deref(&self) -> &SimHandle {
        &self.h
    }
}

async fn start(args: SimArgs) -> Sim {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let token = CancellationToken::new();
    let h = spawn(args, listener, token.clone()).await.unwrap();
    Sim { h, token }
}

async fn start_default() -> Sim {
    start(SimArgs::default()).await
}

/// Polls `f` until it returns `Some`, or panics at the deadline.
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(t) = f().await {
            return t;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A response of the raw client.
#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    fn header(&self, k: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(h, _)| h.eq_ignore_ascii_case(k))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one HTTP/1.1 request and reads the whole (possibly chunked)
/// response. Every call has a deadline: a hung connection fails the test.
async fn http(addr: SocketAddr, method: &str, path: &str, ct: Option<&str>, body: &[u8]) -> Resp {
    timeout(DEADLINE, async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\naccept: application/json\r\ncontent-length: {}\r\n",
            body.len()
        );
        if let Some(ct) = ct {
            req.push_str(&format!("content-type: {ct}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        s.write_all(body).await.unwrap();
        let mut r = BufReader::new(s);
        let (status, headers) = read_head(&mut r).await;
        let chunked = headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
        let mut body = Vec::new();
        if chunked {
            while let Some(c) = read_chunk(&mut r).await {
                body.extend_from_slice(&c);
            }
        } else {
            r.read_to_end(&mut body).await.unwrap();
        }
        Resp { status, headers, body }
    })
    .await
    .unwrap_or_else(|_| panic!("{method} {path} hung"))
}

async fn get(addr: SocketAddr, path: &str) -> Resp {
    http(addr, "GET", path, None, b"").await
}

async fn post_json(addr: SocketAddr, path: &str, v: &Value) -> Resp {
    http(
        addr,
        "POST",
        path,
        Some("application/json"),
        v.to_string().as_bytes(),
    )
    .await
}

async fn read_head(r: &mut BufReader<TcpStream>) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).await.unwrap();
    let status: u16 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l).await.unwrap();
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    (status, headers)
}

async fn read_chunk(r: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut l = String::new();
    if r.read_line(&mut l).await.ok()? == 0 {
        return None;
    }
    let n = usize::from_str_radix(l.trim(), 16).ok()?;
    let mut buf = vec![0; n + 2];
    r.read_exact(&mut buf).await.ok()?;
    buf.truncate(n);
    (n > 0).then_some(buf)
}

/// A raw watch: yields one JSON event per line as it arrives.
struct RawWatch {
    r: BufReader<TcpStream>,
    pending: Vec<u8>,
    pub status: u16,
}

impl RawWatch {
    async fn open(addr: SocketAddr, path: &str) -> RawWatch {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req =
            format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\naccept: application/json\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut r = BufReader::new(s);
        let (status, _) = timeout(DEADLINE, read_head(&mut r))
            .await
            .expect("watch head");
        RawWatch {
            r,
            pending: Vec::new(),
            status,
        }
    }

    /// The next event, or `None` when the stream ended.
    async fn next(&mut self) -> Option<Value> {
        timeout(DEADLINE, async {
            loop {
                if let Some(i) = self.pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = self.pending.drain(..=i).collect();
                    return Some(serde_json::from_slice(&line).unwrap());
                }
                let c = read_chunk(&mut self.r).await?;
                self.pending.extend_from_slice(&c);
            }
        })
        .await
        .expect("watch event within the deadline")
    }

    /// Skips to the first event satisfying `f`.
    async fn until(&mut self, f: impl Fn(&Value) -> bool) -> Value {
        loop {
            let e = self.next().await.expect("stream ended early");
            if f(&e) {
                return e;
            }
        }
    }
}

fn pod(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "labels": labels},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]},
           "unknownTopLevel": {"kept": 1}})
}

async fn create_pod(addr: SocketAddr, ns: &str, name: &str, labels: Value) -> Value {
    let r = post_json(
        addr,
        &format!("/api/v1/namespaces/{ns}/pods"),
        &pod(name, labels),
    )
    .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

fn names(list: &Value) -> Vec<String> {
    let mut v: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

fn ev(e: &Value) -> (String, String) {
    (
        e["type"].as_str().unwrap_or_default().to_string(),
        e["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

// ---------------------------------------------------------------- kube-rs

#[derive(Debug, PartialEq)]
enum Seen {
    Init,
    InitApply(String),
    InitDone,
    Apply(String),
    Delete(String),
}

fn run_watcher(
    client: kube::Client,
    cfg: watcher::Config,
) -> (mpsc::UnboundedReceiver<Seen>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let api: Api<Pod> = Api::namespaced(client, "default");
    let task = tokio::spawn(async move {
        let mut s = watcher(api, cfg).boxed();
        while let Some(e) = s.next().await {
            let seen = match e {
                Ok(watcher::Event::Init) => Seen::Init,
                Ok(watcher::Event::InitApply(p)) => Seen::InitApply(p.metadata.name.unwrap()),
                Ok(watcher::Event::InitDone) => Seen::InitDone,
                Ok(watcher::Event::Apply(p)) => Seen::Apply(p.metadata.name.unwrap()),
                Ok(watcher::Event::Delete(p)) => Seen::Delete(p.metadata.name.unwrap()),
                // Errors (a closed watch, a 410) are retried by the watcher.
                Err(_) => continue,
            };
            if tx.send(seen).is_err() {
                return;
            }
        }
    });
    (rx, task)
}

/// Reads events until `want`, returning the ones before it.
async fn expect_seen(rx: &mut mpsc::UnboundedReceiver<Seen>, want: Seen) -> Vec<Seen> {
    let mut before = Vec::new();
    timeout(DEADLINE, async {
        loop {
            let s = rx.recv().await.expect("watcher ended");
            if s == want {
                return;
            }
            before.push(s);
        }
    })
    .await
    .unwrap_or_else(|_| panic!("did not see {want:?}; saw {before:?}"));
    before
}

fn stat(v: &Value, verb: &str, res: &str) -> u64 {
    v["requests"][verb][res].as_u64().unwrap_or(0)
}

/// The whole life of a kube-rs watcher: initial list, live events, resume
/// after dropped watches without relisting, relist after compaction.
async fn exercise_watcher(cfg: watcher::Config, streaming: bool) {
    let sim = start_default().await;
    let addr = sim.addr;
    for i in 0..7 {
        create_pod(addr, "default", &format!("pre-{i}"), json!({"app": "x"})).await;
    }
    let (mut rx, task) = run_watcher(sim.client(), cfg);
    let before = expect_seen(&mut rx, Seen::InitDone).await;
    assert_eq!(before.first(), Some(&Seen::Init));
    let mut listed: Vec<_> = before
        .iter()
        .filter_map(|s| match s {
            Seen::InitApply(n) => Some(n.clone()),
            _ => None,
        })
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        (0..7).map(|i| format!("pre-{i}")).collect::<Vec<_>>()
    );

    create_pod(addr, "default", "live-1", json!({})).await;
    expect_seen(&mut rx, Seen::Apply("live-1".into())).await;

    // Dropped watches: the watcher resumes from its resourceVersion.
    let lists_before = stat(&get(addr, "/sim/stats").await.json(), "list", "pods");
    let watches_before = stat(&get(addr, "/sim/stats").await.json(), "watch", "pods");
    assert_eq!(
        post_json(addr, "/sim/faults/drop-watches", &json!({}))
            .await
            .status,
        200
    );
    create_pod(addr, "default", "live-2", json!({})).await;
    let between = expect_seen(&mut rx, Seen::Apply("live-2".into())).await;
    assert!(
        !between.contains(&Seen::Init),
        "resume must not relist: {between:?}"
    );
    let s = get(addr, "/sim/stats").await.json();
    assert_eq!(
        stat(&s, "list", "pods"),
        lists_before,
        "resume must not list"
    );
    assert!(
        stat(&s, "watch", "pods") > watches_before,
        "a new watch was opened"
    );

    // Compaction: the resume gets 410 and the watcher relists.
    assert_eq!(
        post_json(addr, "/sim/faults/compact", &json!({}))
            .await
            .status,
        200
    );
    assert_eq!(
        post_json(addr, "/sim/faults/drop-watches", &json!({}))
            .await
            .status,
        200
    );
    let relist = expect_seen(&mut rx, Seen::InitDone).await;
    assert!(relist.contains(&Seen::Init), "{relist:?}");
    assert!(
        relist.contains(&Seen::InitApply("live-2".into())),
        "{relist:?}"
    );
    let s = get(addr, "/sim/stats").await.json();
    if streaming {
        assert_eq!(stat(&s, "list", "pods"), 0, "streaming lists never list");
    } else {
        assert!(stat(&s, "list", "pods") > lists_before, "relisted");
    }
    let del = http(
        addr,
        "DELETE",
        "/api/v1/namespaces/default/pods/live-1",
        None,
        b"",
    )
    .await;
    assert_eq!(del.status, 200);
    expect_seen(&mut rx, Seen::Delete("live-1".into())).await;
    task.abort();
}

#[tokio::test]
async fn kube_watcher_default_config() {
    exercise_watcher(watcher::Config::default().page_size(3), false).await;
}

#[tokio::test]
async fn kube_watcher_streaming_lists() {
    exercise_watcher(watcher::Config::default().streaming_lists(), true).await;
}

#[tokio::test]
async fn kube_watcher_any_semantic_without_page_size() {
    let mut cfg = watcher::Config::default().any_semantic();
    cfg.page_size = None;
    exercise_watcher(cfg, false).await;
}

#[tokio::test]
async fn kube_client_crud_and_status_subresource() {
    let sim = start_default().await;
    let client = sim.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p: Pod = serde_json::from_value(pod("a", json!({"app": "x"}))).unwrap();
    let created = pods.create(&PostParams::default(), &p).await.unwrap();
    assert_eq!(
        created.status.as_ref().unwrap().phase.as_deref(),
        Some("Pending")
    );
    let mut st = created.clone();
    st.status.as_mut().unwrap().phase = Some("Running".into());
    st.status.as_mut().unwrap().pod_ip = Some("10.244.0.9".into());
    let after = pods
        .replace_status("a", &PostParams::default(), &st)
        .await
        .unwrap();
    assert_eq!(after.status.unwrap().pod_ip.as_deref(), Some("10.244.0.9"));
    // A replace with the stale resourceVersion conflicts.
    let err = pods
        .replace("a", &PostParams::default(), &created)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"),
        "{err:?}"
    );
    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = serde_json::from_value(
        json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}),
    )
    .unwrap();
    let svc = svcs.create(&PostParams::default(), &svc).await.unwrap();
    let ip = svc.spec.unwrap().cluster_ip.unwrap();
    assert!(ip.starts_with("10.96."), "{ip}");
    let nss: Api<Namespace> = Api::all(client);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
    nss.create(&PostParams::default(), &ns).await.unwrap();
    assert!(nss.list(&ListParams::default()).await.unwrap().items.len() >= 5);
    pods.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("a").await.unwrap().is_none());
}

// ------------------------------------------------------------ protocol

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
    let r = http(
        addr,
        "PATCH",
        "/api/v1/namespaces/default/pods/b/status",
        Some("application/merge-patch+json"),
        br#"{"status":{"phase":"Running"}}"#,
    )
    .await;
    assert_eq!(r.status, 200);
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
    let r = http(
        addr,
        "PATCH",
        "/api/v1/namespaces/default/pods/a",
        Some("application/merge-patch+json"),
        br#"{"metadata":{"annotations":{"k":"v"}}}"#,
    )
    .await;
    assert_eq!(r.status, 200);
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
    let r = http(
        addr,
        "PATCH",
        "/api/v1/namespaces/default/pods/sched",
        Some("application/merge-patch+json"),
        br#"{"spec":{"nodeName":"n1"}}"#,
    )
    .await;
    assert_eq!(r.status, 200);
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
    check(
        http(
            addr,
            "POST",
            "/api/v1/namespaces/default/pods",
            Some("application/json"),
            b"{not json",
        )
        .await,
        400,
        "BadRequest",
    );
    check(
        http(
            addr,
            "PATCH",
            "/api/v1/namespaces/default/pods/a",
            Some("application/merge-patch+json"),
            b"[",
        )
        .await,
        400,
        "BadRequest",
    );
    check(
        http(
            addr,
            "PATCH",
            "/api/v1/namespaces/default/pods/a",
            Some("application/apply-patch+yaml"),
            b"{}",
        )
        .await,
        415,
        "UnsupportedMediaType",
    );
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

// ------------------------------------------------------------- workload

#[tokio::test]
async fn kubelet_jobs_restart_and_churn() {
    let sim = start(SimArgs {
        kubelet: true,
        pod_cidr_v6: Some("fd00:10:244::/64".into()),
        ready_delay_ms: 20,
        jobs: 1,
        ranks: 3,
        ..SimArgs::default()
    })
    .await;
    let addr = sim.addr;
    let r = post_json(
        addr,
        "/sim/jobs",
        &json!({"namespace": "ml", "name": "llm", "ranks": 4, "kind": "jobset"}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let svc = get(addr, "/api/v1/namespaces/ml/services/llm").await.json();
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(svc["spec"]["publishNotReadyAddresses"], true);
    let ready = |p: &Value| {
        p["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
    };
    let pods = eventually("4 ready pods", || async {
        let l = get(addr, "/api/v1/namespaces/ml/pods").await.json();
        let items = l["items"].as_array().unwrap().clone();
        (items.len() == 4 && items.iter().all(ready)).then_some(items)
    })
    .await;
    let mut old_ips = Vec::new();
    for p in &pods {
        let ip: std::net::Ipv4Addr = p["status"]["podIP"].as_str().unwrap().parse().unwrap();
        assert_eq!(ip.octets()[..2], [10, 244], "{ip}");
        let ips = p["status"]["podIPs"].as_array().unwrap();
        assert_eq!(ips.len(), 2);
        assert!(ips[1]["ip"].as_str().unwrap().starts_with("fd00:10:244::"));
        assert_eq!(ips[0]["ip"], p["status"]["podIP"]);
        assert_eq!(p["status"]["phase"], "Running");
        assert!(!p["spec"]["nodeName"].as_str().unwrap().is_empty());
        let idx = p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
            .as_str()
            .unwrap();
        assert_eq!(p["spec"]["hostname"], format!("llm-{idx}"));
        assert_eq!(p["spec"]["subdomain"], "llm");
        assert_eq!(
            p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"],
            "llm"
        );
        assert_eq!(
            p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"],
            idx
        );
        let size = serde_json::to_vec(p).unwrap().len();
        assert!((5000..=8192).contains(&size), "running pod is {size} bytes");
        old_ips.push(p["status"]["podIP"].as_str().unwrap().to_string());
    }
    // The start-up job.
    let l = get(
        addr,
        "/api/v1/namespaces/default/pods?labelSelector=job-name%3Dtrain-0",
    )
    .await
    .json();
    assert_eq!(l["items"].as_array().unwrap().len(), 3);

    // Gang restart: same hostnames, new names and IPs.
    let r = post_json(addr, "/sim/jobs/ml/llm/restart", &json!({})).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let new = eventually("restarted pods ready", || async {
        let l = get(addr, "/api/v1/namespaces/ml/pods").await.json();
        let items = l["items"].as_array().unwrap().clone();
        (items.len() == 4 && items.iter().all(ready)).then_some(items)
    })
    .await;
    let mut hosts: Vec<String> = new
        .iter()
        .map(|p| p["spec"]["hostname"].as_str().unwrap().to_string())
        .collect();
    hosts.sort();
    assert_eq!(hosts, ["llm-0", "llm-1", "llm-2", "llm-3"]);
    for p in &new {
        assert!(!old_ips.contains(&p["status"]["podIP"].as_str().unwrap().to_string()));
        assert!(
            !pods
                .iter()
                .any(|o| o["metadata"]["name"] == p["metadata"]["name"])
        );
        assert_eq!(
            p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"],
            "1"
        );
    }
    assert_eq!(
        post_json(addr, "/sim/jobs/ml/nope/restart", &json!({}))
            .await
            .status,
        404
    );

    // Churn: bounded replacement; the pod count stays the same.
    let before = get(addr, "/sim/stats").await.json()["pod_mutations"]
        .as_u64()
        .unwrap();
    let r = post_json(addr, "/sim/churn", &json!({"rate": 50, "seconds": 0.2})).await;
    assert_eq!(r.status, 200);
    eventually("churn mutations", || async {
        let s = get(addr, "/sim/stats").await.json();
        (s["pod_mutations"].as_u64().unwrap() >= before + 10 * 2).then_some(())
    })
    .await;
    eventually("pods replaced and ready", || async {
        let l = get(addr, "/api/v1/pods").await.json();
        let items = l["items"].as_array().unwrap().clone();
        (items.len() == 7 && items.iter().all(ready)).then_some(())
    })
    .await;
    assert_eq!(
        post_json(addr, "/sim/churn", &json!({"rate": -1, "seconds": 1}))
            .await
            .status,
        400
    );
    assert_eq!(
        post_json(addr, "/sim/jobs", &json!({"name": "x", "kind": "bogus"}))
            .await
            .status,
        400
    );
}

#[tokio::test]
async fn scenario_file_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.yaml");
    std::fs::write(
        &path,
        "- apiVersion: v1\n  kind: Service\n  metadata: {name: web, namespace: shop}\n  spec: {clusterIP: None, selector: {app: web}}\n\
         - apiVersion: v1\n  kind: Pod\n  metadata: {name: web-0, namespace: shop, labels: {app: web}}\n  spec: {hostname: web-0, subdomain: web, containers: [{name: c, image: i}]}\n",
    )
    .unwrap();
    let sim = start(SimArgs {
        scenario: Some(path),
        ..SimArgs::default()
    })
    .await;
    assert_eq!(
        get(sim.addr, "/api/v1/namespaces/shop/pods/web-0")
            .await
            .status,
        200
    );
    assert_eq!(
        get(sim.addr, "/api/v1/namespaces/shop/services/web")
            .await
            .json()["spec"]["clusterIP"],
        "None"
    );
    let bad = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bad.path(), "{{{").unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let args = SimArgs {
        scenario: Some(bad.path().to_path_buf()),
        ..SimArgs::default()
    };
    assert!(
        spawn(args, listener, CancellationToken::new())
            .await
            .is_err()
    );
}

// ---------------------------------------------------------------- faults

#[tokio::test]
async fn faults_and_stats() {
    let sim = start_default().await;
    let addr = sim.addr;
    // Drop watches: an open watch ends.
    let mut w = RawWatch::open(addr, "/api/v1/pods?watch=1&resourceVersion=0").await;
    eventually("watch counted", || async {
        (get(addr, "/sim/stats").await.json()["open_watches"] == 1).then_some(())
    })
    .await;
    post_json(addr, "/sim/faults/drop-watches", &json!({})).await;
    assert!(w.next().await.is_none());
    eventually("watch closed", || async {
        (get(addr, "/sim/stats").await.json()["open_watches"] == 0).then_some(())
    })
    .await;

    assert_eq!(
        post_json(addr, "/sim/faults/throttle?seconds=30", &json!({}))
            .await
            .status,
        200
    );
    let r = get(addr, "/api/v1/pods").await;
    assert_eq!(r.status, 429);
    assert!(r.header("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
    let s = r.json();
    assert_eq!(s["reason"], "TooManyRequests");
    assert!(s["details"]["retryAfterSeconds"].as_u64().unwrap() >= 1);
    post_json(addr, "/sim/faults/clear", &json!({})).await;

    assert_eq!(
        post_json(addr, "/sim/faults/outage?seconds=30", &json!({}))
            .await
            .status,
        200
    );
    let r = get(addr, "/api/v1/pods").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["reason"], "ServiceUnavailable");
    // /sim/ stays reachable during an outage.
    assert_eq!(get(addr, "/sim/stats").await.status, 200);
    post_json(addr, "/sim/faults/clear", &json!({})).await;

    post_json(addr, "/sim/faults/latency?ms=50&seconds=30", &json!({})).await;
    let t = Instant::now();
    assert_eq!(get(addr, "/api/v1/pods").await.status, 200);
    assert!(t.elapsed() >= Duration::from_millis(50));
    post_json(addr, "/sim/faults/clear", &json!({})).await;
    assert_eq!(
        post_json(addr, "/sim/faults/outage", &json!({}))
            .await
            .status,
        400
    );

    // Stats: by verb and resource; bytes of a watch event are counted.
    post_json(addr, "/sim/stats/reset", &json!({})).await;
    let mut w = RawWatch::open(addr, "/api/v1/pods?watch=1").await;
    let p = create_pod(addr, "default", "p", json!({})).await;
    w.until(|e| ev(e).1 == "p").await;
    let s = eventually("event counted", || async {
        let s = get(addr, "/sim/stats").await.json();
        (s["watch_events_sent"] == 1).then_some(s)
    })
    .await;
    assert_eq!(s["requests"]["watch"]["pods"], 1);
    assert_eq!(s["requests"]["create"]["pods"], 1);
    let line = serde_json::to_vec(&json!({"type": "ADDED", "object": p}))
        .unwrap()
        .len() as u64
        + 1;
    assert_eq!(s["watch_bytes_sent"], line);
    assert!(s["bytes_sent"].as_u64().unwrap() >= line);
    assert_eq!(s["objects"]["pods"], 1);
}

// ---------------------------------------------------------------- kubectl

fn kubectl_binary() -> Option<String> {
    for c in ["/usr/bin/kubectl", "kubectl"] {
        if std::process::Command::new(c)
            .arg("version")
            .arg("--client")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Some(c.to_string());
        }
    }
    None
}

/// kubectl's typed clients (describe, create namespace, create service)
/// ask for `application/vnd.kubernetes.protobuf,application/json`; `get`,
/// `delete`, `label` and `rollout` ask for JSON. client-go decodes our
/// Protobuf with Kubernetes' own generated code, so what describe prints is
/// an outside check of the simulator's encoder.
#[tokio::test]
async fn kubectl_describe_reads_protobuf() {
    let Some(bin) = kubectl_binary() else {
        eprintln!("kubectl not found: skipping kubectl_describe_reads_protobuf");
        return;
    };
    let sim = start(SimArgs {
        kubelet: true,
        jobs: 1,
        ranks: 2,
        ..SimArgs::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("k.yaml");
    std::fs::write(&kc, sim.kubeconfig_yaml()).unwrap();
    let protobuf_served = async || {
        get(sim.addr, "/sim/stats").await.json()["responses_by_content_type"]
            ["application/vnd.kubernetes.protobuf"]
            .as_u64()
            .unwrap_or(0)
    };
    let kubectl = async |args: &[&str]| {
        let out = tokio::process::Command::new(&bin)
            .arg("--kubeconfig")
            .arg(&kc)
            .args(["--request-timeout", "10s"])
            .args(args)
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    // Runs kubectl and checks that it was answered in Protobuf.
    let run = async |args: &[&str]| {
        let before = protobuf_served().await;
        let stdout = kubectl(args).await;
        let after = protobuf_served().await;
        assert!(after > before, "kubectl {args:?} got no Protobuf: {stdout}");
        stdout
    };
    // describe pads its columns to the widest label: compare with runs of
    // blanks collapsed.
    let squeeze = |s: &str| {
        s.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let has = |out: &str, lines: &[&str]| {
        for l in lines {
            assert!(
                squeeze(out).contains(&squeeze(l)),
                "missing {l:?} in:\n{out}"
            );
        }
    };

    let pods = get(sim.addr, "/api/v1/namespaces/default/pods")
        .await
        .json();
    let train = &pods["items"][0];
    let name = train["metadata"]["name"].as_str().unwrap();
    let ip = train["status"]["podIP"].as_str().unwrap();
    let node = train["spec"]["nodeName"].as_str().unwrap();
    let host_ip = train["status"]["hostIP"].as_str().unwrap();
    let out = run(&["describe", "pod", name]).await;
    has(
        &out,
        &[
            name,
            &format!("IP:                   {ip}"),
            &format!("Node:                 {node}/{host_ip}"),
            "job-name=train-0",
            "Status:               Running",
            "Controlled By:  Job/train-0",
            "Containers:\n  trainer:",
            "Ready:          True",
            "PodScheduled                True",
        ],
    );

    let out = run(&["describe", "service", "kubernetes"]).await;
    has(
        &out,
        &[
            "IP:                10.96.0.1",
            "IPs:               10.96.0.1",
            "Port:              https  443/TCP",
            "TargetPort:        6443/TCP",
            "provider=kubernetes",
        ],
    );
    let out = run(&["describe", "service", "train-0"]).await;
    has(
        &out,
        &[
            "Selector:          job-name=train-0",
            "IP:                None",
            "Port:              nccl  29500/TCP",
        ],
    );

    let out = run(&["describe", "namespace", "default"]).await;
    has(
        &out,
        &[
            "kubernetes.io/metadata.name=default",
            "Status:       Active",
        ],
    );

    let out = run(&["describe", "job", "train-0"]).await;
    has(
        &out,
        &[
            "Parallelism:        2",
            "Completion Mode:    Indexed",
            "Pods Statuses:      2 Active / 0 Succeeded / 0 Failed",
        ],
    );

    // Creates answer in Protobuf too; kubectl re-encodes the object as JSON.
    let ns: Value =
        serde_json::from_str(&run(&["create", "namespace", "pb-made", "-o", "json"]).await)
            .unwrap();
    assert_eq!(ns["metadata"]["name"], "pb-made");
    assert_eq!(ns["status"]["phase"], "Active");
    let svc: Value = serde_json::from_str(
        &run(&[
            "create",
            "service",
            "clusterip",
            "pb-svc",
            "--tcp=80:8080",
            "-o",
            "json",
        ])
        .await,
    )
    .unwrap();
    let cip = svc["spec"]["clusterIP"].as_str().unwrap().to_owned();
    assert!(cip.parse::<std::net::Ipv4Addr>().is_ok(), "{svc}");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080);
    let out = run(&["describe", "service", "pb-svc"]).await;
    has(
        &out,
        &[
            &format!("IP:                {cip}"),
            "Port:              80-8080  80/TCP",
            "TargetPort:        8080/TCP",
            "Selector:          app=pb-svc",
        ],
    );

    // Probes: the action is an embedded `ProbeHandler` in Protobuf.
    let mut probed = pod("probed", json!({"app": "probed"}));
    probed["spec"]["containers"][0]["livenessProbe"] = json!({
        "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
        "initialDelaySeconds": 5, "timeoutSeconds": 2, "periodSeconds": 10,
        "successThreshold": 1, "failureThreshold": 3,
    });
    probed["spec"]["containers"][0]["readinessProbe"] = json!({
        "tcpSocket": {"port": "grpc"}, "periodSeconds": 7,
    });
    probed["spec"]["containers"][0]["startupProbe"] = json!({
        "exec": {"command": ["cat", "/ready"]}, "failureThreshold": 30,
    });
    let r = post_json(sim.addr, "/api/v1/namespaces/default/pods", &probed).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let out = run(&["describe", "pod", "probed"]).await;
    has(
        &out,
        &[
            "Liveness: http-get http://:8080/healthz delay=5s timeout=2s period=10s #success=1 #failure=3",
            "Readiness: tcp-socket :grpc delay=0s timeout=0s period=7s",
            "Startup: exec [cat /ready] delay=0s timeout=0s period=0s #success=0 #failure=30",
        ],
    );

    // A load balancer's status (written as JSON, read back as Protobuf).
    run(&[
        "create",
        "service",
        "loadbalancer",
        "pb-lb",
        "--tcp=80:8080",
    ])
    .await;
    kubectl(&[
        "patch",
        "service",
        "pb-lb",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"loadBalancer":{"ingress":[{"ip":"203.0.113.7","ipMode":"VIP"}]}}}"#,
    ])
    .await;
    let out = run(&["describe", "service", "pb-lb"]).await;
    has(
        &out,
        &[
            "Type:                     LoadBalancer",
            "LoadBalancer Ingress:     203.0.113.7 (VIP)",
        ],
    );
}

#[tokio::test]
async fn kubectl_works_unchanged() {
    let Some(bin) = kubectl_binary() else {
        eprintln!("kubectl not found: skipping kubectl_works_unchanged");
        return;
    };
    let sim = start(SimArgs {
        kubelet: true,
        jobs: 1,
        ranks: 2,
        ..SimArgs::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("k.yaml");
    std::fs::write(&kc, sim.kubeconfig_yaml()).unwrap();
    // kubectl runs as a child process; the simulator keeps serving on this
    // runtime while we await it.
    let run = async |args: &[&str]| {
        let out = tokio::process::Command::new(&bin)
            .arg("--kubeconfig")
            .arg(&kc)
            .args(["--request-timeout", "10s"])
            .args(args)
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let v: Value = serde_json::from_str(&run(&["get", "pods", "-A", "-o", "json"]).await).unwrap();
    assert_eq!(v["items"].as_array().unwrap().len(), 2);
    let table = run(&["get", "pods", "-A"]).await;
    assert!(
        table.contains("NAMESPACE") && table.contains("train-0-0-"),
        "{table}"
    );
    // A watch sees a later create.
    let mut watch = tokio::process::Command::new(&bin)
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["get", "pods", "-w", "-o", "json"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    eventually("kubectl watch open", || async {
        (get(sim.addr, "/sim/stats").await.json()["open_watches"].as_i64() >= Some(1)).then_some(())
    })
    .await;
    let pod_file = dir.path().join("pod.json");
    std::fs::write(
        &pod_file,
        pod("from-kubectl", json!({"app": "x"})).to_string(),
    )
    .unwrap();
    run(&[
        "create",
        "-f",
        pod_file.to_str().unwrap(),
        "--validate=false",
    ])
    .await;
    let mut lines = BufReader::new(stdout).lines();
    timeout(DEADLINE, async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if l.contains("\"name\": \"from-kubectl\"") {
                return;
            }
        }
        panic!("kubectl watch ended");
    })
    .await
    .expect("kubectl -w saw the create");
    watch.kill().await.unwrap();
    let y = run(&["get", "pod", "from-kubectl", "-o", "yaml"]).await;
    assert!(
        y.contains("name: from-kubectl") && y.contains("resourceVersion:"),
        "{y}"
    );
    let l = run(&["get", "pods", "-l", "app=x"]).await;
    assert!(l.contains("from-kubectl") && !l.contains("train-0"), "{l}");
    run(&["delete", "pod", "from-kubectl"]).await;
    assert_eq!(
        get(sim.addr, "/api/v1/namespaces/default/pods/from-kubectl")
            .await
            .status,
        404
    );
    run(&["create", "namespace", "made-by-kubectl"]).await;
    assert_eq!(
        get(sim.addr, "/api/v1/namespaces/made-by-kubectl")
            .await
            .status,
        200
    );
    let svcs = run(&["get", "svc", "-A"]).await;
    assert!(
        svcs.contains("kubernetes") && svcs.contains("train-0") && svcs.contains("None"),
        "{svcs}"
    );
}

// ------------------------------------------------------------ batch/v1 Jobs

async fn sim_job(addr: SocketAddr, ns: &str, name: &str, ranks: usize, kind: &str) -> Value {
    let r = post_json(
        addr,
        "/sim/jobs",
        &json!({"namespace": ns, "name": name, "ranks": ranks, "kind": kind}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

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
    let (tx, mut rx) = mpsc::unbounded_channel();
    let api: Api<Job> = Api::all(sim.client());
    let task = tokio::spawn(async move {
        let mut s = watcher(api, cfg).boxed();
        while let Some(e) = s.next().await {
            let seen = match e {
                Ok(watcher::Event::Init) => Seen::Init,
                Ok(watcher::Event::InitApply(j)) => Seen::InitApply(j.metadata.name.unwrap()),
                Ok(watcher::Event::InitDone) => Seen::InitDone,
                Ok(watcher::Event::Apply(j)) => Seen::Apply(j.metadata.name.unwrap()),
                Ok(watcher::Event::Delete(j)) => Seen::Delete(j.metadata.name.unwrap()),
                Err(_) => continue,
            };
            if tx.send(seen).is_err() {
                return;
            }
        }
    });
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
    let batch = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "batch")
        .expect("batch group");
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
            assert_eq!(p["spec"]["hostname"], format!("{name}-{idx}"));
            assert_eq!(p["spec"]["subdomain"], name);
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
            (0..3).map(|i| format!("{name}-{i}")).collect::<Vec<_>>()
        );
        let svc = get(addr, &format!("/api/v1/namespaces/ml/services/{name}"))
            .await
            .json();
        assert_eq!(svc["spec"]["clusterIP"], "None");
    }
    // Start-up jobs get their Jobs too.
    let sim = start(SimArgs {
        jobs: 2,
        ranks: 2,
        job_kind: "mixed".into(),
        ..SimArgs::default()
    })
    .await;
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
    let old_pods = eventually("gang pods running", || async {
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
    let del = w.next().await.unwrap();
    assert_eq!(ev(&del), ("DELETED".into(), "gang-workers-0".into()));
    assert_eq!(del["object"]["metadata"]["uid"], old_job["metadata"]["uid"]);
    let add = w.next().await.unwrap();
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
    let new_pods = eventually("restarted gang pods running", || async {
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
        assert_eq!(p["spec"]["hostname"], format!("gang-{idx}"));
    }
    // An indexed-job restart replaces pods only: the Job stays.
    let solo = get(addr, "/apis/batch/v1/namespaces/ml/jobs/solo")
        .await
        .json();
    let r = post_json(addr, "/sim/jobs/ml/solo/restart", &json!({})).await;
    assert_eq!(r.status, 200);
    let again = get(addr, "/apis/batch/v1/namespaces/ml/jobs/solo")
        .await
        .json();
    assert_eq!(again["metadata"]["uid"], solo["metadata"]["uid"]);
    assert_eq!(
        again["metadata"]["resourceVersion"],
        solo["metadata"]["resourceVersion"]
    );
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

#[tokio::test]
async fn kubectl_gets_jobs() {
    let Some(bin) = kubectl_binary() else {
        eprintln!("kubectl not found: skipping kubectl_gets_jobs");
        return;
    };
    let sim = start(SimArgs {
        jobs: 2,
        ranks: 2,
        job_kind: "mixed".into(),
        ..SimArgs::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("k.yaml");
    std::fs::write(&kc, sim.kubeconfig_yaml()).unwrap();
    let run = async |args: &[&str]| {
        let out = tokio::process::Command::new(&bin)
            .arg("--kubeconfig")
            .arg(&kc)
            .args(["--request-timeout", "10s"])
            .args(args)
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let t = run(&["get", "jobs", "-A"]).await;
    assert!(
        t.contains("NAMESPACE")
            && t.contains("COMPLETIONS")
            && t.contains("train-0")
            && t.contains("train-1-workers-0")
            && t.contains("0/2"),
        "{t}"
    );
    let v: Value = serde_json::from_str(&run(&["get", "jobs", "-A", "-o", "json"]).await).unwrap();
    assert_eq!(v["items"].as_array().unwrap().len(), 2);
    assert_eq!(v["items"][0]["apiVersion"], "batch/v1");
    // kubectl deletes in the background: the Job's pods go with it.
    run(&["delete", "job", "train-0"]).await;
    assert_eq!(
        get(sim.addr, "/apis/batch/v1/namespaces/default/jobs/train-0")
            .await
            .status,
        404
    );
    let pods = get(
        sim.addr,
        "/api/v1/namespaces/default/pods?labelSelector=job-name%3Dtrain-0",
    )
    .await
    .json();
    assert!(names(&pods).is_empty(), "{pods}");
    let pods = get(
        sim.addr,
        "/api/v1/namespaces/default/pods?labelSelector=job-name%3Dtrain-1-workers-0",
    )
    .await
    .json();
    assert_eq!(names(&pods).len(), 2);
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

// ------------------------------------------------- Service IPs and families

/// A dual-stack simulator: IPv4 primary, IPv6 secondary.
fn dual_stack() -> SimArgs {
    SimArgs {
        service_cidr_v6: Some("fd00:10:96::/112".parse().unwrap()),
        ..SimArgs::default()
    }
}

fn svc_body(name: &str, spec: Value) -> Service {
    let mut spec = spec;
    if spec.get("ports").is_none() {
        spec["ports"] = json!([{"port": 80}]);
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

async fn mk_svc(api: &Api<Service>, name: &str, spec: Value) -> Result<Service, kube::Error> {
    api.create(&PostParams::default(), &svc_body(name, spec))
        .await
}

async fn patch_svc(api: &Api<Service>, name: &str, spec: Value) -> Result<Service, kube::Error> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec})),
    )
    .await
}

/// `(clusterIP, clusterIPs, ipFamilies, ipFamilyPolicy)`, empty when unset.
fn ip_fields(s: &Service) -> (String, Vec<String>, Vec<String>, String) {
    let spec = s.spec.as_ref().unwrap();
    (
        spec.cluster_ip.clone().unwrap_or_default(),
        spec.cluster_ips.clone().unwrap_or_default(),
        spec.ip_families.clone().unwrap_or_default(),
        spec.ip_family_policy.clone().unwrap_or_default(),
    )
}

fn in_net(ip: &str, net: &str) -> bool {
    let net: ipnet::IpNet = net.parse().unwrap();
    net.contains(&ip.parse::<std::net::IpAddr>().unwrap())
}

/// A dual-stack Service's fields: two IPs, one per family, primary first.
fn assert_dual(s: &Service, families: [&str; 2], policy: &str) {
    let (ip, ips, fams, pol) = ip_fields(s);
    assert_eq!(ips.len(), 2, "{ips:?}");
    assert_eq!(ip, ips[0], "clusterIP is clusterIPs[0]");
    assert_eq!(fams, families);
    assert_eq!(pol, policy);
    for (ip, fam) in ips.iter().zip(fams) {
        let net = if fam == "IPv4" {
            "10.96.0.0/12"
        } else {
            "fd00:10:96::/112"
        };
        assert!(in_net(ip, net), "{ip} not in {net}");
    }
}

/// The 422 `Invalid` of a rejected write: its message, and its causes as
/// `(field, reason, message)`.
fn invalid(r: Result<Service, kube::Error>) -> (String, Vec<(String, String, String)>) {
    match r {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{s:?}");
            let d = s.details.expect("an Invalid Status has details");
            assert_eq!(d.kind, "Service");
            let causes = d
                .causes
                .iter()
                .map(|c| (c.field.clone(), c.reason.clone(), c.message.clone()))
                .collect();
            (s.message, causes)
        }
        other => panic!("expected a 422 Invalid, got {other:?}"),
    }
}

fn cause(field: &str, message: &str) -> (String, String, String) {
    (field.into(), "FieldValueInvalid".into(), message.into())
}

#[tokio::test]
async fn single_stack_services_default_and_reject_dual_stack() {
    let sim = start_default().await;
    let api: Api<Service> = Api::namespaced(sim.client(), "default");
    let k = api.get("kubernetes").await.unwrap();
    assert_eq!(
        ip_fields(&k),
        (
            "10.96.0.1".into(),
            vec!["10.96.0.1".into()],
            vec!["IPv4".into()],
            "SingleStack".into()
        )
    );
    // Nothing asked: SingleStack, the cluster's family, one IP.
    let (ip, ips, fams, pol) = ip_fields(&mk_svc(&api, "plain", json!({})).await.unwrap());
    assert!(in_net(&ip, "10.96.0.0/12"), "{ip}");
    assert_eq!(
        (ips, fams, pol.as_str()),
        (vec![ip], vec!["IPv4".to_string()], "SingleStack")
    );
    // PreferDualStack keeps its policy and falls back to one family.
    let (ip, ips, fams, pol) = ip_fields(
        &mk_svc(&api, "prefer", json!({"ipFamilyPolicy": "PreferDualStack"}))
            .await
            .unwrap(),
    );
    assert_eq!(
        (ips, fams, pol.as_str()),
        (vec![ip], vec!["IPv4".to_string()], "PreferDualStack")
    );

    let (msg, causes) = invalid(
        mk_svc(
            &api,
            "require",
            json!({"ipFamilyPolicy": "RequireDualStack"}),
        )
        .await,
    );
    assert_eq!(
        msg,
        "Service \"require\" is invalid: spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": \
         this cluster is not configured for dual-stack services"
    );
    assert_eq!(
        causes,
        [cause(
            "spec.ipFamilyPolicy",
            "Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services"
        )]
    );
    let (_, causes) = invalid(
        mk_svc(
            &api,
            "two",
            json!({"ipFamilyPolicy": "PreferDualStack", "ipFamilies": ["IPv4", "IPv6"]}),
        )
        .await,
    );
    assert_eq!(
        causes,
        [cause(
            "spec.ipFamilies[1]",
            "Invalid value: \"IPv6\": not configured on this cluster"
        )]
    );
    // Two families with the default policy: the policy is what is wrong.
    let (_, causes) = invalid(mk_svc(&api, "two", json!({"ipFamilies": ["IPv4", "IPv6"]})).await);
    assert_eq!(
        causes,
        [cause(
            "spec.ipFamilyPolicy",
            "Invalid value: \"SingleStack\": must be 'RequireDualStack' or 'PreferDualStack' \
             when multiple IP families are specified"
        )]
    );
    let (_, causes) = invalid(mk_svc(&api, "six", json!({"ipFamilies": ["IPv6"]})).await);
    assert_eq!(
        causes,
        [cause(
            "spec.ipFamilies[0]",
            "Invalid value: \"IPv6\": not configured on this cluster"
        )]
    );
    let (_, causes) = invalid(mk_svc(&api, "six", json!({"clusterIP": "fd00:10:96::5"})).await);
    assert_eq!(
        causes,
        [cause(
            "spec.clusterIPs[0]",
            "Invalid value: []string{\"fd00:10:96::5\"}: IPv6 is not configured on this cluster"
        )]
    );
    // Nothing was allocated or stored by the rejected creates.
    for name in ["require", "two", "six"] {
        assert!(api.get_opt(name).await.unwrap().is_none(), "{name}");
    }

    // Headless: clusterIPs ["None"], families still defaulted.
    let h = mk_svc(
        &api,
        "headless",
        json!({"clusterIP": "None", "selector": {"app": "x"}}),
    )
    .await
    .unwrap();
    assert_eq!(
        ip_fields(&h),
        (
            "None".into(),
            vec!["None".into()],
            vec!["IPv4".into()],
            "SingleStack".into()
        )
    );
    // Headless and selectorless describes the user's own endpoints: both
    // families, even on a single-stack cluster.
    let h = mk_svc(&api, "manual", json!({"clusterIP": "None"}))
        .await
        .unwrap();
    assert_eq!(
        ip_fields(&h),
        (
            "None".into(),
            vec!["None".into()],
            vec!["IPv4".into(), "IPv6".into()],
            "RequireDualStack".into()
        )
    );
    // ExternalName gets none of these, and may not set them.
    let x = mk_svc(
        &api,
        "ext",
        json!({"type": "ExternalName", "externalName": "db.example.com", "ports": []}),
    )
    .await
    .unwrap();
    assert_eq!(ip_fields(&x), Default::default());
    let (msg, causes) = invalid(
        mk_svc(
            &api,
            "ext2",
            json!({"type": "ExternalName", "externalName": "db.example.com", "ipFamilyPolicy": "SingleStack"}),
        )
        .await,
    );
    assert_eq!(
        causes,
        [(
            "spec.ipFamilyPolicy".to_string(),
            "FieldValueForbidden".to_string(),
            "Forbidden: may not be set for ExternalName services".to_string()
        )]
    );
    assert!(
        msg.ends_with("spec.ipFamilyPolicy: Forbidden: may not be set for ExternalName services"),
        "{msg}"
    );
}

#[tokio::test]
async fn chosen_cluster_ips_are_honoured_when_free_and_in_range() {
    let sim = start(SimArgs {
        service_cidr: "10.100.0.0/16".parse().unwrap(),
        ..SimArgs::default()
    })
    .await;
    let api: Api<Service> = Api::namespaced(sim.client(), "default");
    // The `kubernetes` Service follows the configured range.
    assert_eq!(
        ip_fields(&api.get("kubernetes").await.unwrap()).0,
        "10.100.0.1"
    );
    let d = mk_svc(&api, "dns", json!({"clusterIP": "10.100.0.10"}))
        .await
        .unwrap();
    assert_eq!(ip_fields(&d).1, ["10.100.0.10"]);
    // Dynamic addresses never land on hand-picked low ones.
    for i in 0..5 {
        let ip = ip_fields(&mk_svc(&api, &format!("d{i}"), json!({})).await.unwrap()).0;
        assert!(
            in_net(&ip, "10.100.0.0/16") && !in_net(&ip, "10.100.0.0/24"),
            "{ip}"
        );
    }
    let (msg, causes) = invalid(mk_svc(&api, "again", json!({"clusterIP": "10.100.0.10"})).await);
    assert_eq!(
        causes,
        [cause(
            "spec.clusterIPs",
            "Invalid value: []string{\"10.100.0.10\"}: failed to allocate IP 10.100.0.10: \
             provided IP is already allocated"
        )]
    );
    assert!(
        msg.starts_with("Service \"again\" is invalid: spec.clusterIPs: "),
        "{msg}"
    );
    let (_, causes) = invalid(mk_svc(&api, "out", json!({"clusterIP": "10.96.0.10"})).await);
    assert_eq!(
        causes,
        [cause(
            "spec.clusterIPs",
            "Invalid value: []string{\"10.96.0.10\"}: failed to allocate IP 10.96.0.10: \
             the provided IP (10.96.0.10) is not in the valid range. The range of valid IPs is 10.100.0.0/16"
        )]
    );
    let (_, causes) = invalid(mk_svc(&api, "bad", json!({"clusterIP": "10.100.0.300"})).await);
    assert_eq!(
        causes,
        [cause(
            "spec.clusterIPs[0]",
            "Invalid value: \"10.100.0.300\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
        )]
    );
    // Delete gives the address back.
    api.delete("dns", &DeleteParams::default()).await.unwrap();
    let d = mk_svc(&api, "dns2", json!({"clusterIP": "10.100.0.10"}))
        .await
        .unwrap();
    assert_eq!(ip_fields(&d).0, "10.100.0.10");
    // So does deleting the namespace that holds it.
    let nss: Api<Namespace> = Api::all(sim.client());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
    )
    .await
    .unwrap();
    let team: Api<Service> = Api::namespaced(sim.client(), "team");
    mk_svc(&team, "pinned", json!({"clusterIP": "10.100.0.20"}))
        .await
        .unwrap();
    invalid(mk_svc(&api, "pinned", json!({"clusterIP": "10.100.0.20"})).await);
    nss.delete("team", &DeleteParams::default()).await.unwrap();
    mk_svc(&api, "pinned", json!({"clusterIP": "10.100.0.20"}))
        .await
        .unwrap();
}

#[tokio::test]
async fn dual_stack_services_get_one_ip_per_family() {
    let sim = start(dual_stack()).await;
    let api: Api<Service> = Api::namespaced(sim.client(), "default");
    // The `kubernetes` Service stays single-stack on the primary family.
    assert_eq!(ip_fields(&api.get("kubernetes").await.unwrap()).2, ["IPv4"]);
    let r = mk_svc(
        &api,
        "require",
        json!({"ipFamilyPolicy": "RequireDualStack"}),
    )
    .await
    .unwrap();
    assert_dual(&r, ["IPv4", "IPv6"], "RequireDualStack");
    let p = mk_svc(&api, "prefer", json!({"ipFamilyPolicy": "PreferDualStack"}))
        .await
        .unwrap();
    assert_dual(&p, ["IPv4", "IPv6"], "PreferDualStack");
    assert_ne!(
        ip_fields(&r).1,
        ip_fields(&p).1,
        "no address is handed out twice"
    );
    // The family order asked for decides the primary.
    let six = mk_svc(
        &api,
        "six-first",
        json!({"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv6", "IPv4"]}),
    )
    .await
    .unwrap();
    assert_dual(&six, ["IPv6", "IPv4"], "RequireDualStack");
    // Default: SingleStack on the primary family.
    let (ip, ips, fams, pol) = ip_fields(&mk_svc(&api, "plain", json!({})).await.unwrap());
    assert!(in_net(&ip, "10.96.0.0/12"));
    assert_eq!(
        (ips.len(), fams, pol.as_str()),
        (1, vec!["IPv4".to_string()], "SingleStack")
    );
    let (ip, _, fams, _) = ip_fields(
        &mk_svc(&api, "v6", json!({"ipFamilies": ["IPv6"]}))
            .await
            .unwrap(),
    );
    assert!(in_net(&ip, "fd00:10:96::/112"), "{ip}");
    assert_eq!(fams, ["IPv6"]);
    // Families are inferred from the IPs given; both IPs are honoured.
    let pinned = mk_svc(
        &api,
        "pinned",
        json!({"ipFamilyPolicy": "RequireDualStack", "clusterIP": "fd00:10:96::53",
               "clusterIPs": ["fd00:10:96::53", "10.96.0.53"]}),
    )
    .await
    .unwrap();
    assert_eq!(
        ip_fields(&pinned),
        (
            "fd00:10:96::53".into(),
            vec!["fd00:10:96::53".into(), "10.96.0.53".into()],
            vec!["IPv6".into(), "IPv4".into()],
            "RequireDualStack".into()
        )
    );
    // A given primary, the secondary allocated.
    let half = mk_svc(
        &api,
        "half",
        json!({"ipFamilyPolicy": "PreferDualStack", "clusterIP": "10.96.0.54"}),
    )
    .await
    .unwrap();
    assert_dual(&half, ["IPv4", "IPv6"], "PreferDualStack");
    assert_eq!(ip_fields(&half).0, "10.96.0.54");

    let (_, causes) = invalid(
        mk_svc(
            &api,
            "twice",
            json!({"ipFamilyPolicy": "RequireDualStack", "clusterIP": "10.96.0.60",
                   "clusterIPs": ["10.96.0.60", "10.96.0.61"]}),
        )
        .await,
    );
    assert_eq!(
        causes,
        [cause(
            "spec.clusterIPs",
            "Invalid value: []string{\"10.96.0.60\", \"10.96.0.61\"}: \
             may specify no more than one IP for each IP family"
        )]
    );
    let (_, causes) = invalid(mk_svc(&api, "plural", json!({"clusterIPs": ["10.96.0.62"]})).await);
    assert_eq!(
        causes,
        [cause(
            "spec.clusterIPs",
            "Invalid value: []string{\"10.96.0.62\"}: must be empty when `clusterIP` is not specified"
        )]
    );
    let (_, causes) = invalid(
        mk_svc(
            &api,
            "mismatch",
            json!({"ipFamilies": ["IPv6"], "clusterIP": "10.96.0.63"}),
        )
        .await,
    );
    assert_eq!(
        causes,
        [cause(
            "spec.clusterIPs[0]",
            "Invalid value: \"10.96.0.63\": expected an IPv6 value as indicated by `ipFamilies[0]`"
        )]
    );
    // A secondary outside its range fails the whole create: the primary
    // it had allocated is free again.
    let (_, causes) = invalid(
        mk_svc(
            &api,
            "outside",
            json!({"ipFamilyPolicy": "RequireDualStack", "clusterIP": "10.96.0.64",
                   "clusterIPs": ["10.96.0.64", "fd00:99::1"]}),
        )
        .await,
    );
    assert_eq!(causes.len(), 1);
    assert!(
        causes[0]
            .2
            .ends_with("The range of valid IPs is fd00:10:96::/112"),
        "{causes:?}"
    );
    mk_svc(&api, "reuse", json!({"clusterIP": "10.96.0.64"}))
        .await
        .unwrap();

    // Headless keeps "None"; its families follow the policy.
    let h = mk_svc(
        &api,
        "headless",
        json!({"clusterIP": "None", "selector": {"app": "x"}, "ipFamilyPolicy": "RequireDualStack"}),
    )
    .await
    .unwrap();
    assert_eq!(
        ip_fields(&h),
        (
            "None".into(),
            vec!["None".into()],
            vec!["IPv4".into(), "IPv6".into()],
            "RequireDualStack".into()
        )
    );
    // Deleting a dual-stack Service frees both of its addresses.
    api.delete("pinned", &DeleteParams::default())
        .await
        .unwrap();
    mk_svc(
        &api,
        "pinned-again",
        json!({"ipFamilyPolicy": "RequireDualStack", "clusterIP": "10.96.0.53",
               "clusterIPs": ["10.96.0.53", "fd00:10:96::53"]}),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn service_ip_fields_change_only_as_the_apiserver_allows() {
    let sim = start(dual_stack()).await;
    let api: Api<Service> = Api::namespaced(sim.client(), "default");
    let s = mk_svc(&api, "web", json!({})).await.unwrap();
    let (v4, ..) = ip_fields(&s);
    // SingleStack → PreferDualStack adds a secondary IP, keeps the primary.
    let up = patch_svc(&api, "web", json!({"ipFamilyPolicy": "PreferDualStack"}))
        .await
        .unwrap();
    assert_dual(&up, ["IPv4", "IPv6"], "PreferDualStack");
    assert_eq!(ip_fields(&up).0, v4);
    let v6 = ip_fields(&up).1[1].clone();
    // Writing the object back unchanged changes nothing, not even its
    // resourceVersion; a manifest without the allocated fields keeps them.
    let same = api
        .replace("web", &PostParams::default(), &up)
        .await
        .unwrap();
    assert_eq!(same.metadata.resource_version, up.metadata.resource_version);
    let mut manifest = svc_body(
        "web",
        json!({"ipFamilyPolicy": "PreferDualStack", "selector": {"app": "web"}}),
    );
    manifest.metadata.resource_version = up.metadata.resource_version.clone();
    let applied = api
        .replace("web", &PostParams::default(), &manifest)
        .await
        .unwrap();
    assert_eq!(ip_fields(&applied).1, ip_fields(&up).1);
    // The primary never changes.
    let (_, causes) = invalid(patch_svc(&api, "web", json!({"clusterIP": "10.96.0.99"})).await);
    assert_eq!(
        causes[0],
        cause(
            "spec.clusterIPs[0]",
            "Invalid value: []string{\"10.96.0.99\"}: may not change once set"
        )
    );
    let (_, causes) =
        invalid(patch_svc(&api, "web", json!({"ipFamilies": ["IPv6", "IPv4"]})).await);
    assert_eq!(
        causes[0],
        cause(
            "spec.ipFamilies[0]",
            "Invalid value: []core.IPFamily{\"IPv6\", \"IPv4\"}: may not change once set"
        )
    );
    // Dropping the secondary needs SingleStack.
    let (_, causes) = invalid(patch_svc(&api, "web", json!({"clusterIPs": [v4.clone()]})).await);
    assert_eq!(
        causes,
        [cause(
            "spec.ipFamilyPolicy",
            "Invalid value: \"PreferDualStack\": must be set to 'SingleStack' when releasing the secondary clusterIP"
        )]
    );
    let down = patch_svc(&api, "web", json!({"ipFamilyPolicy": "SingleStack"}))
        .await
        .unwrap();
    assert_eq!(
        ip_fields(&down),
        (
            v4.clone(),
            vec![v4.clone()],
            vec!["IPv4".into()],
            "SingleStack".into()
        )
    );
    // ... and gives the secondary back.
    mk_svc(
        &api,
        "takes-v6",
        json!({"ipFamilies": ["IPv6"], "clusterIP": v6.clone()}),
    )
    .await
    .unwrap();
    // SingleStack → RequireDualStack upgrades too.
    let req = patch_svc(&api, "web", json!({"ipFamilyPolicy": "RequireDualStack"}))
        .await
        .unwrap();
    assert_dual(&req, ["IPv4", "IPv6"], "RequireDualStack");
    assert_ne!(ip_fields(&req).1[1], v6, "the released IP went to takes-v6");
    // The status subresource leaves the spec alone.
    let st = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {}}})),
        )
        .await
        .unwrap();
    assert_eq!(ip_fields(&st), ip_fields(&req));
    // Type changes: to ExternalName drops and releases everything, back to
    // ClusterIP allocates afresh.
    let x = patch_svc(
        &api,
        "web",
        json!({"type": "ExternalName", "externalName": "web.example.com"}),
    )
    .await
    .unwrap();
    assert_eq!(ip_fields(&x), Default::default());
    mk_svc(&api, "takes-v4", json!({"clusterIP": v4.clone()}))
        .await
        .unwrap();
    let back = patch_svc(
        &api,
        "web",
        json!({"type": "ClusterIP", "externalName": null}),
    )
    .await
    .unwrap();
    let (ip, ips, fams, pol) = ip_fields(&back);
    assert_ne!(ip, v4);
    assert_eq!(
        (ips.len(), fams, pol.as_str()),
        (1, vec!["IPv4".to_string()], "SingleStack")
    );
    // Headless stays headless.
    mk_svc(
        &api,
        "h",
        json!({"clusterIP": "None", "selector": {"app": "h"}}),
    )
    .await
    .unwrap();
    let (_, causes) = invalid(patch_svc(&api, "h", json!({"clusterIP": "10.96.0.77"})).await);
    assert_eq!(causes[0].0, "spec.clusterIPs[0]");
}

#[tokio::test]
async fn single_stack_updates_reject_dual_stack() {
    let sim = start_default().await;
    let api: Api<Service> = Api::namespaced(sim.client(), "default");
    let s = mk_svc(&api, "web", json!({})).await.unwrap();
    let (_, causes) =
        invalid(patch_svc(&api, "web", json!({"ipFamilyPolicy": "RequireDualStack"})).await);
    assert_eq!(
        causes,
        [cause(
            "spec.ipFamilyPolicy",
            "Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services"
        )]
    );
    // PreferDualStack is accepted and stays single-stack here.
    let p = patch_svc(&api, "web", json!({"ipFamilyPolicy": "PreferDualStack"}))
        .await
        .unwrap();
    assert_eq!(ip_fields(&p).1, ip_fields(&s).1);
    assert_eq!(ip_fields(&p).2, ["IPv4"]);
    // The failed write changed nothing.
    assert_eq!(ip_fields(&api.get("web").await.unwrap()), ip_fields(&p));
}

#[tokio::test]
async fn kubectl_sees_service_ip_families() {
    let Some(bin) = kubectl_binary() else {
        eprintln!("kubectl not found: skipping kubectl_sees_service_ip_families");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let req = dir.path().join("req.json");
    std::fs::write(
        &req,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "req"},
               "spec": {"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}})
        .to_string(),
    )
    .unwrap();
    let kubectl = async |sim: &Sim, args: &[&str]| {
        let kc = dir.path().join(format!("k-{}.yaml", sim.addr.port()));
        std::fs::write(&kc, sim.kubeconfig_yaml()).unwrap();
        tokio::process::Command::new(&bin)
            .arg("--kubeconfig")
            .arg(&kc)
            .args(["--request-timeout", "10s"])
            .args(args)
            .output()
            .await
            .unwrap()
    };
    let ok = |o: std::process::Output| {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let svc_json = async |sim: &Sim, name: &str| -> Value {
        serde_json::from_str(&ok(kubectl(sim, &["get", "svc", name, "-o", "json"]).await)).unwrap()
    };

    let dual = start(dual_stack()).await;
    ok(kubectl(
        &dual,
        &["create", "service", "clusterip", "web", "--tcp=80:8080"],
    )
    .await);
    let web = svc_json(&dual, "web").await;
    assert_eq!(web["spec"]["ipFamilyPolicy"], "SingleStack");
    assert_eq!(web["spec"]["ipFamilies"], json!(["IPv4"]));
    assert_eq!(web["spec"]["clusterIPs"], json!([web["spec"]["clusterIP"]]));
    ok(kubectl(
        &dual,
        &["create", "-f", req.to_str().unwrap(), "--validate=false"],
    )
    .await);
    let r = svc_json(&dual, "req").await;
    assert_eq!(r["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
    assert_eq!(r["spec"]["clusterIPs"].as_array().unwrap().len(), 2);
    assert_eq!(r["spec"]["clusterIPs"][0], r["spec"]["clusterIP"]);
    ok(kubectl(
        &dual,
        &[
            "patch",
            "svc",
            "web",
            "-p",
            r#"{"spec":{"ipFamilyPolicy":"PreferDualStack"}}"#,
        ],
    )
    .await);
    let web = svc_json(&dual, "web").await;
    assert_eq!(web["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
    assert_eq!(web["spec"]["clusterIPs"].as_array().unwrap().len(), 2);

    // kubectl prints the single-stack refusal from the Status causes.
    let single = start_default().await;
    let out = kubectl(
        &single,
        &["create", "-f", req.to_str().unwrap(), "--validate=false"],
    )
    .await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "The Service \"req\" is invalid: spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": \
             this cluster is not configured for dual-stack services"
        ),
        "{err}"
    );
}
