//! The real control plane a test talks to and the podns process it
//! starts; DNS over real sockets, the GET and the wait come from
//! `podns-testkit`. Blocking code: every wait polls with a deadline.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;

// What every suite shares, from the test kit (blocking forms: these
// tests are plain threads).
pub use podns_testkit::blocking::{ask, http_get, try_ask, wait_for};
pub use podns_testkit::{Spawned, addrs, fqdn, output_ok, rcode, secs, spawn_serve};

pub const BIN: &str = env!("CARGO_BIN_EXE_podns");

/// Tests that stop the API server hold this for writing; every other test
/// holds it for reading, so nothing else runs while the control plane is
/// down. A [`Cluster`] holds it for as long as the test holds the cluster.
static CONTROL_PLANE: RwLock<()> = RwLock::new(());

enum Hold {
    Shared(RwLockReadGuard<'static, ()>),
    Exclusive(RwLockWriteGuard<'static, ()>),
}

/// A cluster started by `tests/cluster/up.sh DIR`, from `PODNS_CLUSTER=DIR`.
pub struct Cluster {
    _hold: Hold,
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub kubectl: PathBuf,
    pub coredns: PathBuf,
    pub env: HashMap<String, String>,
}

/// The cluster of `PODNS_CLUSTER`. A test that calls this is
/// `#[ignore = "needs PODNS_CLUSTER"]`: opt-in, as it needs a control plane
/// built with Go (`tests/cluster/up.sh`); run with `--include-ignored`
/// without the variable, it fails with one line saying how to set it.
/// Other tests may use the control plane meanwhile.
pub fn cluster() -> Cluster {
    with_hold(|| Hold::Shared(CONTROL_PLANE.read().unwrap_or_else(|e| e.into_inner())))
}

/// [`cluster`], alone: for a test that stops the API server.
pub fn cluster_exclusive() -> Cluster {
    with_hold(|| Hold::Exclusive(CONTROL_PLANE.write().unwrap_or_else(|e| e.into_inner())))
}

fn with_hold(hold: impl FnOnce() -> Hold) -> Cluster {
    let Some(dir) = std::env::var_os("PODNS_CLUSTER") else {
        panic!(
            "needs PODNS_CLUSTER: C=$(mktemp -d); tests/cluster/up.sh $C; PODNS_CLUSTER=$C cargo test --test cluster -- --include-ignored"
        );
    };
    let dir = PathBuf::from(dir);
    let text = std::fs::read_to_string(dir.join("env"))
        .unwrap_or_else(|e| panic!("PODNS_CLUSTER={}: no env file: {e}", dir.display()));
    let env: HashMap<String, String> = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let get = |k: &str| PathBuf::from(env.get(k).unwrap_or_else(|| panic!("{k} missing from env")));
    Cluster {
        _hold: hold(),
        kubeconfig: get("KUBECONFIG"),
        kubectl: get("KUBECTL"),
        coredns: get("COREDNS"),
        dir,
        env,
    }
}

impl Cluster {
    /// The API server's Kubernetes minor version (`/version`'s `minor`,
    /// without a distribution's `+`): behaviour that changed between the
    /// releases `tests/cluster/up.sh --k8s` runs is checked by it.
    pub fn k8s_minor(&self) -> u32 {
        let v: serde_json::Value =
            serde_json::from_str(&self.kubectl(&["get", "--raw", "/version"])).unwrap();
        let minor = v["minor"].as_str().unwrap_or_default();
        minor
            .trim_end_matches('+')
            .parse()
            .unwrap_or_else(|_| panic!("/version's minor is {minor:?}"))
    }

    /// Run kubectl as the cluster admin; panics with its stderr on failure.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.kubectl_in(args, None)
    }

    /// kubectl with `stdin` piped in (`apply -f -`).
    pub fn kubectl_in(&self, args: &[&str], stdin: Option<&str>) -> String {
        match self.try_kubectl(args, stdin) {
            Ok(out) => out,
            Err(e) => panic!("kubectl {}: {e}", args.join(" ")),
        }
    }

    pub fn try_kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        self.try_kubectl_at(&self.kubeconfig, args, stdin)
    }

    /// The release's kubectl against another API server (the simulator).
    pub fn kubectl_at(&self, kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> String {
        self.try_kubectl_at(kubeconfig, args, stdin)
            .unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
    }

    pub fn try_kubectl_at(
        &self,
        kubeconfig: &Path,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<String, String> {
        let mut child = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        if let Some(s) = stdin {
            child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// One JSONPath of a pod: `kubectl -n NS get pod POD -o jsonpath=PATH`.
    pub fn try_pod_field(&self, ns: &str, pod: &str, path: &str) -> Result<String, String> {
        let jsonpath = format!("jsonpath={path}");
        self.try_kubectl(&["-n", ns, "get", "pod", pod, "-o", &jsonpath], None)
    }

    /// [`Cluster::try_pod_field`]; panics with kubectl's stderr on failure.
    pub fn pod_field(&self, ns: &str, pod: &str, path: &str) -> String {
        self.try_pod_field(ns, pod, path)
            .unwrap_or_else(|e| panic!("kubectl -n {ns} get pod {pod} -o jsonpath={path}: {e}"))
    }

    /// One JSONPath over the pods of `selector`:
    /// `kubectl -n NS get pods -l SELECTOR -o jsonpath=PATH`.
    pub fn try_pods_field(&self, ns: &str, selector: &str, path: &str) -> Result<String, String> {
        let jsonpath = format!("jsonpath={path}");
        self.try_kubectl(
            &["-n", ns, "get", "pods", "-l", selector, "-o", &jsonpath],
            None,
        )
    }

    pub fn apply(&self, yaml: &str) {
        self.kubectl_in(&["apply", "-f", "-"], Some(yaml));
    }

    /// A fresh namespace for one test, deleted when the guard drops.
    pub fn namespace(&self, prefix: &str) -> Namespace<'_> {
        let name = format!("{prefix}-{}", std::process::id());
        let _ = self.try_kubectl(&["delete", "namespace", &name, "--wait=true"], None);
        self.kubectl(&["create", "namespace", &name]);
        // Pods can be created once the service-account controller has
        // made the namespace's default ServiceAccount.
        wait_for(&format!("{name}/default ServiceAccount"), secs(30), || {
            self.try_kubectl(&["get", "sa", "default", "-n", &name], None)
                .ok()
        });
        Namespace {
            cluster: self,
            name,
        }
    }

    /// `tests/cluster/ctl.sh DIR ACTION`.
    pub fn ctl(&self, action: &str) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cluster/ctl.sh");
        let out = output_ok(
            Command::new("bash").arg(script).arg(&self.dir).arg(action),
            &format!("ctl.sh {action}"),
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// `status.podIP` of each pod matching `selector`, by pod name, once
    /// all `n` have one.
    pub fn pod_ips(&self, ns: &str, selector: &str, n: usize) -> Vec<(String, String)> {
        wait_for(
            &format!("{n} pods of {selector} with IPs"),
            secs(60),
            || {
                let out = self
                    .try_pods_field(
                        ns,
                        selector,
                        r#"{range .items[*]}{.metadata.name} {.status.podIP}{"\n"}{end}"#,
                    )
                    .unwrap_or_else(|e| panic!("kubectl -n {ns} get pods -l {selector}: {e}"));
                let v: Vec<(String, String)> = out
                    .lines()
                    .filter_map(|l| l.split_once(' '))
                    .filter(|(_, ip)| !ip.is_empty())
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect();
                (v.len() == n).then_some(v)
            },
        )
    }
}

pub struct Namespace<'a> {
    cluster: &'a Cluster,
    pub name: String,
}

impl Drop for Namespace<'_> {
    fn drop(&mut self) {
        let _ = self
            .cluster
            .try_kubectl(&["delete", "namespace", &self.name, "--wait=false"], None);
    }
}

/// A `podns` process (the binary as a user runs it), killed on drop.
pub struct Podns(Spawned);

impl std::ops::Deref for Podns {
    type Target = Spawned;
    fn deref(&self) -> &Spawned {
        &self.0
    }
}

impl Podns {
    /// `podns serve` against `kubeconfig` on loopback port 0, with `extra`
    /// flags; returns once it logged its addresses (not yet ready).
    pub fn start(kubeconfig: &Path, extra: &[&str]) -> Podns {
        let kubeconfig = format!("--kubeconfig={}", kubeconfig.display());
        let mut args = vec![kubeconfig.as_str()];
        args.extend_from_slice(extra);
        Podns::serve(&args)
    }

    /// `podns serve` on loopback port 0 with exactly these flags (a node
    /// instance names its relay kubeconfig instead of `--kubeconfig`).
    pub fn serve(flags: &[&str]) -> Podns {
        let mut cmd = Command::new(BIN);
        cmd.args([
            "serve",
            "--dns-listen=127.0.0.1:0",
            "--admin-listen=127.0.0.1:0",
            "--udp-sockets=1",
        ])
        .args(flags);
        Podns(spawn_serve(cmd))
    }

    /// Start and wait for `/readyz` 200 (every watch listed).
    pub fn ready(kubeconfig: &Path, extra: &[&str]) -> Podns {
        let p = Podns::start(kubeconfig, extra);
        p.wait_ready(secs(60));
        p
    }

    pub fn wait_ready(&self, limit: Duration) {
        wait_for("podns /readyz 200", limit, || {
            (http_get(self.admin, "/readyz").0 == 200).then_some(())
        });
    }

    pub fn metrics(&self) -> String {
        http_get(self.admin, "/metrics").1
    }

    /// The sum of every sample whose line starts with `prefix` (a name,
    /// or a name and the start of its labels), or 0.
    pub fn metric(&self, prefix: &str) -> f64 {
        self.metrics()
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next())
            .filter_map(|v| v.parse::<f64>().ok())
            .sum()
    }

    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.0.child.try_wait().unwrap()
    }

    pub fn ask(&self, name: &str, qtype: RecordType) -> Message {
        ask(self.dns, name, qtype)
    }

    /// Wait until `name` answers exactly `want` (sorted addresses).
    pub fn wait_addrs(&self, name: &str, want: &[String], limit: Duration) {
        let mut want = want.to_vec();
        want.sort();
        let qtype = if want.first().is_some_and(|a| a.contains(':')) {
            RecordType::AAAA
        } else {
            RecordType::A
        };
        wait_for(&format!("{name} to answer {want:?}"), limit, || {
            let last = addrs(&self.ask(name, qtype));
            if last == want {
                Ok(())
            } else {
                Err(format!("{last:?}"))
            }
        });
    }
}

/// `podns zonefile --reverse` (serial 1, glue 127.0.0.1) against
/// `kubeconfig` on `wire`, as a user runs it.
pub fn zonefile(kubeconfig: &Path, wire: &str) -> String {
    let out = output_ok(
        Command::new(BIN)
            .args([
                "zonefile",
                "--reverse",
                "--serial=1",
                "--ns-address=127.0.0.1",
            ])
            .arg(format!("--wire={wire}"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .env("RUST_LOG", "warn"),
        &format!("zonefile --wire={wire}"),
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The answer section's records as `owner type rdata` lines, sorted.
pub fn answer_lines(m: &Message) -> Vec<String> {
    let mut v: Vec<String> = m
        .answers
        .iter()
        .map(|r| format!("{} {} {}", r.name, r.record_type(), r.data))
        .collect();
    v.sort();
    v
}

/// The SRV answers as `<port> <target>`, sorted.
pub fn srv_lines(m: &Message) -> Vec<String> {
    let mut v: Vec<String> = m
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            hickory_proto::rr::RData::SRV(s) => Some(format!("{} {}", s.port, s.target)),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

/// `a.b.c.d` → `a-b-c-d` (the dashed form of an IPv4 address).
pub fn dashed(ip: &str) -> String {
    ip.replace(['.', ':'], "-")
}

/// The reverse name of an IPv4 address.
pub fn reverse_v4(ip: &str) -> String {
    let mut p: Vec<&str> = ip.split('.').collect();
    p.reverse();
    format!("{}.in-addr.arpa.", p.join("."))
}
