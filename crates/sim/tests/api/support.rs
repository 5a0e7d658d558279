//! What the simulator's API tests share: a simulator on loopback, a raw
//! HTTP client and watch reader, kube-rs watcher helpers, and kubectl.

use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use podns_sim::{SimArgs, SimHandle, spawn};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;

pub const DEADLINE: Duration = Duration::from_secs(10);

// The one wait (with [`DEADLINE`] as its limit here) and the CI rule, from
// the test kit.
pub use podns_testkit::{need, wait_for};

pub struct Sim {
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

pub async fn start(args: SimArgs) -> Sim {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let token = CancellationToken::new();
    let h = spawn(args, listener, token.clone()).await.unwrap();
    Sim { h, token }
}

/// The entry named `name` of the JSON list `list` (discovery's groups or
/// resources); a panic that shows the list when there is none.
pub fn named<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .and_then(|l| l.iter().find(|e| e["name"] == name))
        .unwrap_or_else(|| panic!("no {name:?} in {list}"))
}

pub async fn start_default() -> Sim {
    start(SimArgs::default()).await
}

/// A simulator with two start-up jobs of 2 ranks: `--job-kind mixed` makes
/// the first an Indexed Job (`train-0`) and the second a JobSet.
pub async fn start_mixed_jobs() -> Sim {
    start(SimArgs {
        jobs: 2,
        ranks: 2,
        job_kind: "mixed".into(),
        ..SimArgs::default()
    })
    .await
}

/// A response of the raw client.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn header(&self, k: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(h, _)| h.eq_ignore_ascii_case(k))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one HTTP/1.1 request and reads the whole (possibly chunked)
/// response. Every call has a deadline: a hung connection fails the test.
pub async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    ct: Option<&str>,
    body: &[u8],
) -> Resp {
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

pub async fn get(addr: SocketAddr, path: &str) -> Resp {
    http(addr, "GET", path, None, b"").await
}

pub async fn post_json(addr: SocketAddr, path: &str, v: &Value) -> Resp {
    http(
        addr,
        "POST",
        path,
        Some("application/json"),
        v.to_string().as_bytes(),
    )
    .await
}

/// A JSON merge patch that must succeed (200).
pub async fn merge_patch(addr: SocketAddr, path: &str, body: &[u8]) -> Resp {
    let r = http(
        addr,
        "PATCH",
        path,
        Some("application/merge-patch+json"),
        body,
    )
    .await;
    assert_eq!(
        r.status,
        200,
        "PATCH {path}: {}",
        String::from_utf8_lossy(&r.body)
    );
    r
}

pub async fn read_head(r: &mut BufReader<TcpStream>) -> (u16, Vec<(String, String)>) {
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

pub async fn read_chunk(r: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
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
pub struct RawWatch {
    r: BufReader<TcpStream>,
    pending: Vec<u8>,
    pub status: u16,
}

impl RawWatch {
    pub async fn open(addr: SocketAddr, path: &str) -> RawWatch {
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
    pub async fn next(&mut self) -> Option<Value> {
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
    pub async fn until(&mut self, f: impl Fn(&Value) -> bool) -> Value {
        loop {
            let e = self.next().await.expect("stream ended early");
            if f(&e) {
                return e;
            }
        }
    }
}

pub fn pod(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "labels": labels},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]},
           "unknownTopLevel": {"kept": 1}})
}

pub async fn create_pod(addr: SocketAddr, ns: &str, name: &str, labels: Value) -> Value {
    let r = post_json(
        addr,
        &format!("/api/v1/namespaces/{ns}/pods"),
        &pod(name, labels),
    )
    .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

pub fn names(list: &Value) -> Vec<String> {
    let mut v: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

pub fn ev(e: &Value) -> (String, String) {
    (
        e["type"].as_str().unwrap_or_default().to_string(),
        e["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

#[derive(Debug, PartialEq)]
pub enum Seen {
    Init,
    InitApply(String),
    InitDone,
    Apply(String),
    Delete(String),
}

/// A kube-rs watcher on the Pods of `default`; see [`watch_names`].
pub fn run_watcher(
    client: kube::Client,
    cfg: watcher::Config,
) -> (mpsc::UnboundedReceiver<Seen>, tokio::task::JoinHandle<()>) {
    watch_names(Api::<Pod>::namespaced(client, "default"), cfg)
}

/// A kube-rs watcher on `api` under `cfg`, its events by object name on
/// the channel until the task is aborted.
pub fn watch_names<K>(
    api: Api<K>,
    cfg: watcher::Config,
) -> (mpsc::UnboundedReceiver<Seen>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    let name = |o: K| o.meta().name.clone().unwrap();
    let task = tokio::spawn(async move {
        let mut s = watcher(api, cfg).boxed();
        while let Some(e) = s.next().await {
            let seen = match e {
                Ok(watcher::Event::Init) => Seen::Init,
                Ok(watcher::Event::InitApply(o)) => Seen::InitApply(name(o)),
                Ok(watcher::Event::InitDone) => Seen::InitDone,
                Ok(watcher::Event::Apply(o)) => Seen::Apply(name(o)),
                Ok(watcher::Event::Delete(o)) => Seen::Delete(name(o)),
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
pub async fn expect_seen(rx: &mut mpsc::UnboundedReceiver<Seen>, want: Seen) -> Vec<Seen> {
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

pub fn stat(v: &Value, verb: &str, res: &str) -> u64 {
    v["requests"][verb][res].as_u64().unwrap_or(0)
}

pub async fn sim_job(addr: SocketAddr, ns: &str, name: &str, ranks: usize, kind: &str) -> Value {
    let r = post_json(
        addr,
        "/sim/jobs",
        &json!({"namespace": ns, "name": name, "ranks": ranks, "kind": kind}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

/// A dual-stack simulator: IPv4 primary, IPv6 secondary.
pub fn dual_stack() -> SimArgs {
    SimArgs {
        service_cidr_v6: Some("fd00:10:96::/112".parse().unwrap()),
        ..SimArgs::default()
    }
}

/// kubectl against one simulator, with a kubeconfig of its own.
pub struct Kubectl {
    bin: String,
    kubeconfig: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Kubectl {
    /// kubectl for `sim` (the one first on PATH, where `.ci/run` puts the
    /// pinned release's build), or `None` when kubectl is not installed:
    /// the test then skips, saying so, except under `CI=true`, where it
    /// fails.
    pub fn for_sim(sim: &Sim) -> Option<Kubectl> {
        let bin = ["kubectl", "/usr/bin/kubectl"].into_iter().find(|c| {
            std::process::Command::new(c)
                .args(["version", "--client"])
                .output()
                .is_ok_and(|o| o.status.success())
        });
        if !need("kubectl", bin.is_some()) {
            return None;
        }
        let bin = bin.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig.yaml");
        std::fs::write(&kubeconfig, sim.kubeconfig_yaml()).unwrap();
        Some(Kubectl {
            bin: bin.to_string(),
            kubeconfig,
            _dir: dir,
        })
    }

    /// A kubectl command with our kubeconfig (for a watch, which outlives
    /// any request timeout).
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        cmd
    }

    /// Runs kubectl to the end (10 s per request).
    pub async fn output(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = self.command(&["--request-timeout", "10s"]);
        cmd.args(args).output().await.unwrap()
    }

    /// Runs kubectl, asserts that it succeeded and returns its stdout. The
    /// simulator keeps serving on this runtime while we await it.
    pub async fn run(&self, args: &[&str]) -> String {
        let out = self.output(args).await;
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}
