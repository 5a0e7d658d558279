//! The real node of `tests/cluster/up.sh DIR --real-node`: containerd, a
//! kubelet and kube-proxy running podns's own image, with CoreDNS as the
//! cluster DNS (tests/cluster/real-node.sh). What the tests on it share:
//! the images by name and digest, placing a pod there, helm, pods that
//! resolve names, a podns process's pid and RSS on this host, and the
//! CoreDNS Corefile.
//!
//! The tests on the node take one lock: they share its kube-dns, the
//! link-local address and the `podns` names.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::support::*;

static NODE: Mutex<()> = Mutex::new(());

/// The label and taint of the real node: only pods that ask for it run
/// there, so the other tests' pods stay on kwok's nodes.
pub const NODE_KEY: &str = "podns.test/real-node";

/// The Helm release of the tests on the node, and its objects' name: not
/// `podns`, so its cluster-wide RBAC never meets the other tests' (which
/// apply deploy/base's ClusterRole `podns`).
pub const RELEASE: &str = "rn";
pub const FULLNAME: &str = "rn-podns";

pub struct Node<'a> {
    pub c: &'a Cluster,
    pub name: String,
    pub ip: String,
    pub dns: String,
    _lock: MutexGuard<'static, ()>,
}

/// The real node, or `None` (said once) when the cluster has none.
pub fn real_node(c: &Cluster) -> Option<Node<'_>> {
    let Some(name) = c.env.get("REAL_NODE") else {
        eprintln!("no real node in PODNS_CLUSTER: skipping (tests/cluster/up.sh DIR --real-node)");
        return None;
    };
    let lock = NODE.lock().unwrap_or_else(|e| e.into_inner());
    let n = Node {
        c,
        name: name.clone(),
        ip: c.env["REAL_NODE_IP"].clone(),
        dns: c.env["CLUSTER_DNS"].clone(),
        _lock: lock,
    };
    n.settled();
    Some(n)
}

/// The sample training pod's options (deploy/overlays/daemonset/
/// sample-training-pod.yaml): glibc and Go give up on a server after 1 s.
pub const SAMPLE_OPTIONS: &str =
    r#"[{name: ndots, value: "5"}, {name: timeout, value: "1"}, {name: attempts, value: "2"}]"#;

/// How a pod finds its nameservers.
#[derive(Clone)]
pub enum Dns {
    /// `dnsPolicy: ClusterFirst`: the kubelet writes the cluster DNS.
    ClusterFirst,
    /// `dnsPolicy: None` with these nameservers and the sample's options.
    Servers(Vec<String>),
}

impl Dns {
    /// The pod spec's DNS lines for a pod of `ns`, each indented by `indent`.
    fn yaml(&self, ns: &str, indent: &str) -> String {
        let lines = match self {
            Dns::ClusterFirst => vec!["dnsPolicy: ClusterFirst".to_string()],
            Dns::Servers(s) => vec![
                "dnsPolicy: None".into(),
                "dnsConfig:".into(),
                format!("  nameservers: [{}]", s.join(", ")),
                format!("  searches: [{ns}.svc.cluster.local, svc.cluster.local, cluster.local]"),
                format!("  options: {SAMPLE_OPTIONS}"),
            ],
        };
        lines.iter().map(|l| format!("{indent}{l}\n")).collect()
    }
}

impl Node<'_> {
    /// Wait until the node is as up.sh left it: Ready, and the cluster DNS
    /// answering the `kubernetes` Service through kube-proxy. A test that
    /// restarted the API server (tests/cluster/faults.rs) leaves the
    /// kubelet, kube-proxy and CoreDNS reconnecting for a while.
    pub fn settled(&self) {
        let c = self.c;
        wait_for(&format!("{} Ready", self.name), secs(120), || {
            let ready = c
                .try_kubectl(
                    &[
                        "get",
                        "node",
                        &self.name,
                        "-o",
                        r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#,
                    ],
                    None,
                )
                .ok()?;
            (ready.trim() == "True").then_some(())
        });
        self.rollout_status("kube-system", "deployment/coredns", 120);
        let dns: SocketAddr = format!("{}:53", self.dns).parse().unwrap();
        wait_for(
            "the cluster DNS answering kubernetes.default",
            secs(120),
            || {
                let m = try_ask(
                    dns,
                    "kubernetes.default.svc",
                    hickory_proto::rr::RecordType::A,
                )
                .ok()?;
                (addrs(&m) == ["10.96.0.1"]).then_some(())
            },
        );
    }

    /// An image's reference (`podns`, `client`, `busybox`, `coredns`, `pause`).
    pub fn image(&self, which: &str) -> String {
        self.env(&format!("{}_IMAGE", which.to_uppercase()))
    }

    /// An image's manifest digest.
    pub fn digest(&self, which: &str) -> String {
        self.env(&format!("{}_DIGEST", which.to_uppercase()))
    }

    /// The reference pinned by digest (`REPO:TAG@sha256:…`).
    pub fn pinned(&self, which: &str) -> String {
        format!("{}@{}", self.image(which), self.digest(which))
    }

    /// `REPO` of an image (its reference less the tag).
    pub fn repository(&self, which: &str) -> String {
        let image = self.image(which);
        image.rsplit_once(':').map(|(r, _)| r.to_string()).unwrap()
    }

    fn env(&self, k: &str) -> String {
        self.c
            .env
            .get(k)
            .unwrap_or_else(|| panic!("{k} missing from the cluster's env"))
            .clone()
    }

    /// The pod spec lines that put a pod on the real node.
    pub fn placement(&self, indent: usize) -> String {
        let pad = " ".repeat(indent);
        format!(
            "{pad}nodeSelector: {{{NODE_KEY}: \"true\"}}\n{pad}tolerations: [{{key: {NODE_KEY}, operator: Exists}}]\n"
        )
    }

    /// The chart values that put every podns pod on the real node with the
    /// image built here, pinned by digest, never pulled.
    pub fn helm_placement(&self) -> Vec<String> {
        vec![
            // The repository names its registry (docker.io/library/podns).
            "--set=image.registry=".into(),
            format!("--set=image.repository={}", self.repository("podns")),
            format!("--set=image.digest={}", self.digest("podns")),
            "--set=image.pullPolicy=Never".into(),
            format!("--set-json=nodeSelector={{\"{NODE_KEY}\":\"true\"}}"),
            format!("--set-json=tolerations=[{{\"key\":\"{NODE_KEY}\",\"operator\":\"Exists\"}}]"),
        ]
    }

    pub fn helm(&self, args: &[&str]) -> Result<String, String> {
        let helm = Path::new(&self.c.env["CLUSTER_BIN"]).join("helm");
        let out = Command::new(&helm)
            .arg("--kubeconfig")
            .arg(&self.c.kubeconfig)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{}: {e} (tests/cluster/build.sh helm)", helm.display()));
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "helm {}: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// `kubectl rollout status` of `what` (`deployment/podns`), at most `secs`.
    /// `kubectl rollout restart` of `what` in `ns`, then its rollout
    /// within `secs`.
    pub fn rollout_restart(&self, ns: &str, what: &str, secs: u64) {
        self.c.kubectl(&["-n", ns, "rollout", "restart", what]);
        self.rollout_status(ns, what, secs);
    }

    pub fn rollout_status(&self, ns: &str, what: &str, secs: u64) {
        let timeout = format!("--timeout={secs}s");
        if let Err(e) = self
            .c
            .try_kubectl(&["-n", ns, "rollout", "status", what, &timeout], None)
        {
            panic!(
                "{ns}/{what} not rolled out in {secs} s: {e}\n{}",
                self.describe(ns)
            );
        }
    }

    /// Pods, events and the last lines of every podns pod's log of `ns`, for
    /// a failure message.
    pub fn describe(&self, ns: &str) -> String {
        let pods = self
            .c
            .try_kubectl(&["-n", ns, "get", "pods", "-o", "wide"], None)
            .unwrap_or_else(|e| e);
        let events = self
            .c
            .try_kubectl(
                &["-n", ns, "get", "events", "--sort-by=.lastTimestamp"],
                None,
            )
            .unwrap_or_else(|e| e);
        let logs = self
            .c
            .try_kubectl(
                &[
                    "-n",
                    ns,
                    "logs",
                    "--all-containers",
                    "--tail=20",
                    "-l",
                    "app.kubernetes.io/name=podns",
                ],
                None,
            )
            .unwrap_or_else(|e| e);
        // A pod that stays Pending names "untolerated taint(s)" but not
        // which: the node's own taints and conditions say (disk pressure,
        // a kubelet that stopped posting).
        let node = self
            .c
            .try_kubectl(
                &[
                    "get",
                    "node",
                    &self.name,
                    "-o",
                    "jsonpath={range .spec.taints[*]}taint {.key}={.value}:{.effect}{\"\\n\"}{end}{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{\"\\n\"}{end}",
                ],
                None,
            )
            .unwrap_or_else(|e| e);
        format!(
            "node {}:\n{node}\npods:\n{pods}\nevents:\n{events}\nlogs:\n{logs}",
            self.name
        )
    }

    /// `kubectl exec` in `pod`'s first container.
    pub fn exec(&self, ns: &str, pod: &str, cmd: &[&str]) -> Result<String, String> {
        let mut args = vec!["-n", ns, "exec", pod, "--"];
        args.extend_from_slice(cmd);
        self.c.try_kubectl(&args, None)
    }

    /// A pod of the client image on the real node that sleeps, with `dns`.
    pub fn client_pod(&self, ns: &str, name: &str, dns: &Dns) -> String {
        let dns = dns.yaml(ns, "  ");
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}, labels: {{app: client}}}}\nspec:\n{dns}{placement}  automountServiceAccountToken: false\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: client\n    image: {image}\n    imagePullPolicy: Never\n    command: [sleep, \"3600\"]\n    resources: {{requests: {{cpu: 10m, memory: 16Mi}}, limits: {{memory: 64Mi}}}}\n",
            placement = self.placement(2),
            image = self.image("client"),
        )
    }

    /// Apply `yaml` (pods), then wait until every pod of `selector` in `ns`
    /// is Ready.
    pub fn wait_ready(&self, ns: &str, selector: &str, secs: u64) {
        let timeout = format!("--timeout={secs}s");
        if let Err(e) = self.c.try_kubectl(
            &[
                "-n",
                ns,
                "wait",
                "--for=condition=Ready",
                "pod",
                "-l",
                selector,
                &timeout,
            ],
            None,
        ) {
            panic!(
                "pods {selector} in {ns} not Ready: {e}\n{}",
                self.describe(ns)
            );
        }
    }

    /// The host pid of `pod`'s container `container` (its first process),
    /// from containerd.
    pub fn pid(&self, ns: &str, pod: &str, container: &str) -> u32 {
        let id = self.c.pod_field(
            ns,
            pod,
            &format!("{{.status.containerStatuses[?(@.name==\"{container}\")].containerID}}"),
        );
        let id = id.trim().trim_start_matches("containerd://");
        assert!(
            !id.is_empty(),
            "{ns}/{pod} has no container {container} running"
        );
        let out = self.ctr(&["tasks", "ls"]);
        out.lines()
            .find(|l| l.starts_with(id))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no task {id} in containerd:\n{out}"))
    }

    /// `ctr -n k8s.io ARGS` against the node's containerd.
    pub fn ctr(&self, args: &[&str]) -> String {
        let out = output_ok(
            Command::new("ctr")
                .arg("-a")
                .arg(&self.c.env["CONTAINERD_SOCK"])
                .args(["-n", "k8s.io"])
                .args(args),
            &format!("ctr {}", args.join(" ")),
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pod names of `selector` in `ns` (any phase).
    pub fn pods(&self, ns: &str, selector: &str) -> Vec<String> {
        self.c
            .kubectl(&["-n", ns, "get", "pods", "-l", selector, "-o", "name"])
            .lines()
            .map(|l| l.trim_start_matches("pod/").to_string())
            .collect()
    }

    /// A pod's IP once it has one.
    pub fn pod_ip(&self, ns: &str, pod: &str) -> String {
        wait_for(&format!("{ns}/{pod} has an IP"), secs(60), || {
            let ip = self.c.try_pod_field(ns, pod, "{.status.podIP}").ok()?;
            let ip = ip.trim().to_string();
            (!ip.is_empty()).then_some(ip)
        })
    }

    /// Replace kube-dns's Corefile and wait until CoreDNS runs it.
    pub fn set_corefile(&self, corefile: &str) {
        let mut indented = String::new();
        for l in corefile.lines() {
            indented.push_str("    ");
            indented.push_str(l);
            indented.push('\n');
        }
        self.c.apply(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: coredns, namespace: kube-system}}\ndata:\n  Corefile: |\n{indented}"
        ));
        let old = self.pods("kube-system", "k8s-app=kube-dns");
        self.rollout_restart("kube-system", "deployment/coredns", 180);
        // The rollout is done when the new pods are Ready; the old ones
        // still answer with the old Corefile through their lameduck (5 s),
        // and the Service's rules may send queries there until they are
        // gone. Wait for that too.
        for pod in old {
            let _ = self.c.try_kubectl(
                &[
                    "-n",
                    "kube-system",
                    "wait",
                    "--for=delete",
                    &format!("pod/{pod}"),
                    "--timeout=60s",
                ],
                None,
            );
        }
    }

    /// The Corefile up.sh installs: the kubernetes plugin for the cluster,
    /// the stand-in upstream on loopback.
    pub fn default_corefile(&self) -> String {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cluster");
        let out = Command::new("bash")
            .arg("-c")
            .arg(". ./real-node.sh; real_node_coredns_yaml")
            .current_dir(&dir)
            .env("COREDNS_IMAGE", self.image("coredns"))
            .output()
            .unwrap();
        let yaml = String::from_utf8(out.stdout).unwrap();
        // The ConfigMap's Corefile, de-indented.
        let start = yaml.find("  Corefile: |\n").unwrap() + "  Corefile: |\n".len();
        yaml[start..]
            .lines()
            .take_while(|l| l.starts_with("    ") || l.is_empty())
            .map(|l| l.strip_prefix("    ").unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n")
            + "\n"
    }

    /// The stand-in upstream's server blocks (the default Corefile's
    /// `:5300` blocks), for a Corefile whose `forward . /etc/resolv.conf`
    /// goes there instead.
    pub fn stand_in_blocks(&self) -> String {
        let def = self.default_corefile();
        let start = def.find("# The stand-in upstream").unwrap();
        def[start..].to_string()
    }

    /// A deploy/coredns Corefile made to run here: `PODNS_SERVICE_IP`
    /// becomes `podns_ip`, the `train` zones become `ns`'s, and the
    /// upstream resolver the local stand-in.
    pub fn corefile_from(&self, file: &str, podns_ip: &str, ns: &str) -> String {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
        let text = text
            .replace("PODNS_SERVICE_IP", podns_ip)
            .replace(
                "train.svc.cluster.local",
                &format!("{ns}.svc.cluster.local"),
            )
            .replace(
                "train.pod.cluster.local",
                &format!("{ns}.pod.cluster.local"),
            )
            .replace("forward . /etc/resolv.conf", "forward . 127.0.0.1:5300");
        assert!(
            !text.contains("/etc/resolv.conf"),
            "{file} still names the host's resolver"
        );
        format!("{text}\n{}", self.stand_in_blocks())
    }

    /// The RSS of a host process, in KiB.
    pub fn rss_kib(pid: u32) -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    /// What the memory limit of a process's container counts, in KiB: its
    /// cgroup's usage (cgroup v1 `memory.usage_in_bytes`, v2
    /// `memory.current`), and of that the anonymous memory (`rss` /
    /// `anon` of memory.stat). The binary's file pages count only in the
    /// cgroup that read them first.
    pub fn cgroup_memory_kib(pid: u32) -> (u64, u64) {
        let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        let read = |p: String| std::fs::read_to_string(p).ok();
        let stat = |text: Option<String>, key: &str| -> u64 {
            text.unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{key} ")))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
                / 1024
        };
        if let Some(path) = cgroups
            .lines()
            .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()))
        {
            let dir = format!("/sys/fs/cgroup/memory{path}");
            let usage = read(format!("{dir}/memory.usage_in_bytes"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
                / 1024;
            (usage, stat(read(format!("{dir}/memory.stat")), "rss"))
        } else {
            let path = cgroups
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .unwrap_or("/");
            let dir = format!("/sys/fs/cgroup{path}");
            let usage = read(format!("{dir}/memory.current"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
                / 1024;
            (usage, stat(read(format!("{dir}/memory.stat")), "anon"))
        }
    }

    /// A line of `/proc/PID/status` (`Uid`, `CapEff` …), its value.
    pub fn proc_status(pid: u32, key: &str) -> String {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}:")))
            .unwrap_or("")
            .trim()
            .to_string()
    }
}

/// A TLS Secret for the relays, as deploy/README.md "DaemonSet" makes it
/// (openssl, a CA of its own, a certificate for `host`).
pub fn relay_tls_secret(c: &Cluster, ns: &str, name: &str, host: &str) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sh = format!(
        "set -e
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
  -subj /CN=podns-relay-ca -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN={host} \
  -keyout tls.key -out tls.csr 2>/dev/null
printf 'subjectAltName=DNS:{host},DNS:{host}.cluster.local' > ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -days 365 -out tls.crt -extfile ext 2>/dev/null"
    );
    output_ok(
        Command::new("bash").arg("-c").arg(&sh).current_dir(d),
        "openssl: the relay's CA and certificate",
    );
    let f = |n: &str| format!("--from-file={}", d.join(n).display());
    c.kubectl(&[
        "-n",
        ns,
        "create",
        "secret",
        "generic",
        name,
        &f("tls.crt"),
        &f("tls.key"),
        &f("ca.crt"),
    ]);
}

/// An Indexed Job of `ranks` pods on the real node, each with hostname
/// `<job>-<i>` under the headless Service `<job>` (publishNotReadyAddresses,
/// as JobSet makes it), running `sleep` in the client image, with `dns` and
/// `init` (extra initContainers YAML, already indented) added.
pub fn gang(n: &Node, ns: &str, job: &str, ranks: usize, dns: &Dns, init: &str) -> String {
    let dns = dns.yaml(ns, "      ");
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: {job}, namespace: {ns}}}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {{job-name: {job}}}
  ports: [{{name: nccl, port: 29500}}]
---
apiVersion: batch/v1
kind: Job
metadata: {{name: {job}, namespace: {ns}}}
spec:
  completionMode: Indexed
  completions: {ranks}
  parallelism: {ranks}
  backoffLimit: 0
  template:
    metadata: {{labels: {{app: train}}}}
    spec:
      subdomain: {job}
      restartPolicy: Never
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 1
{dns}{placement}{init}      containers:
      - name: main
        image: {image}
        imagePullPolicy: Never
        command: [sleep, \"3600\"]
        ports: [{{name: nccl, containerPort: 29500}}]
        resources: {{requests: {{cpu: 10m, memory: 16Mi}}, limits: {{memory: 64Mi}}}}
",
        placement = n.placement(6),
        image = n.image("client"),
    )
}

/// A lookup loop's end (the client image's `resolve loop` summary line).
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct LoopSummary {
    pub total: u64,
    pub failed: u64,
    pub slow: u64,
    pub max_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub seconds: f64,
    pub gap_ms: f64,
}

/// A client pod running `resolve loop` (50 lookups a second over `names`)
/// until it is told to stop; [`Looper::stop`] returns its summary and the
/// failed and slow lookups it printed.
pub struct Looper<'a> {
    n: &'a Node<'a>,
    pub ns: String,
    pub pod: String,
}

impl<'a> Looper<'a> {
    pub fn start(
        n: &'a Node<'a>,
        ns: &str,
        pod: &str,
        dns: &Dns,
        resolver: &str,
        names: &[&str],
    ) -> Looper<'a> {
        let _ =
            n.c.try_kubectl(&["-n", ns, "delete", "pod", pod, "--wait=true"], None);
        let mut yaml = n.client_pod(ns, pod, dns);
        let args: Vec<String> = [
            "-resolver",
            resolver,
            "loop",
            "-rate",
            "50",
            "-max",
            "15m",
            "-stop",
            "/tmp/stop",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(names.iter().map(|s| s.to_string()))
        .map(|a| format!("\"{a}\""))
        .collect();
        yaml = yaml
            .replace(
                "command: [sleep, \"3600\"]",
                &format!("command: [resolve, {}]", args.join(", ")),
            )
            .replace("labels: {app: client}", "labels: {app: looper}")
            .replace(
                "automountServiceAccountToken: false\n",
                "automountServiceAccountToken: false\n  restartPolicy: Never\n",
            );
        n.c.apply(&yaml);
        wait_for(&format!("{ns}/{pod} looping"), secs(120), || {
            let log = n.c.try_kubectl(&["-n", ns, "logs", pod], None).ok()?;
            log.contains("\"progress\"").then_some(())
        });
        Looper {
            n,
            ns: ns.to_string(),
            pod: pod.to_string(),
        }
    }

    /// The lines the loop printed so far.
    pub fn log(&self) -> String {
        self.n
            .c
            .try_kubectl(&["-n", &self.ns, "logs", &self.pod], None)
            .unwrap_or_default()
    }

    /// Stop the loop (it finishes the lookups under way) and read its
    /// summary and events.
    pub fn stop(self) -> (LoopSummary, Vec<String>) {
        self.n
            .exec(&self.ns, &self.pod, &["touch", "/tmp/stop"])
            .unwrap_or_else(|e| panic!("{}/{}: {e}", self.ns, self.pod));
        let log = wait_for(
            &format!("{}/{} summary", self.ns, self.pod),
            secs(90),
            || {
                let log = self.log();
                log.contains("\"summary\"").then_some(log)
            },
        );
        let summary: LoopSummary = log
            .lines()
            .find(|l| l.contains("\"summary\""))
            .map(|l| serde_json::from_str(l).unwrap())
            .unwrap();
        let events = log
            .lines()
            .filter(|l| l.contains("\"failed\"") || l.contains("\"slow\""))
            .filter(|l| !l.contains("\"progress\"") && !l.contains("\"summary\""))
            .map(str::to_string)
            .collect();
        let _ = self.n.c.try_kubectl(
            &["-n", &self.ns, "delete", "pod", &self.pod, "--wait=false"],
            None,
        );
        (summary, events)
    }
}

/// The value of a Prometheus sample (the sum of those whose line starts
/// with `prefix`) at `admin` over HTTP.
pub fn metric_at(admin: SocketAddr, prefix: &str) -> f64 {
    http_get(admin, "/metrics")
        .1
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next())
        .filter_map(|v| v.parse::<f64>().ok())
        .sum()
}

/// Seconds since `t`, for the report lines.
pub fn since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// `kubectl logs -f` of a pod into memory, until the pod's container ends.
pub struct LogFollower {
    child: std::process::Child,
    pub lines: std::sync::Arc<Mutex<Vec<(Duration, String)>>>,
}

impl LogFollower {
    pub fn start(c: &Cluster, ns: &str, pod: &str, t0: Instant) -> LogFollower {
        let mut child = Command::new(&c.kubectl)
            .arg("--kubeconfig")
            .arg(&c.kubeconfig)
            .args(["-n", ns, "logs", "-f", pod])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let lines = std::sync::Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push((t0.elapsed(), l));
            }
        });
        LogFollower { child, lines }
    }

    pub fn text(&self) -> Vec<(Duration, String)> {
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for LogFollower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the report of the real-node runs goes: `PODNS_NODE_REPORT` or
/// `DIR/node-report.md` of the cluster.
pub fn report(c: &Cluster, text: &str) {
    let path: PathBuf = std::env::var_os("PODNS_NODE_REPORT")
        .map(PathBuf::from)
        .unwrap_or_else(|| c.dir.join("node-report.md"));
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    writeln!(f, "{text}").unwrap();
    eprintln!("{text}");
}

/// The env of the cluster as a map (for the images' names in the report).
pub fn images(c: &Cluster) -> HashMap<String, String> {
    c.env
        .iter()
        .filter(|(k, _)| k.ends_with("_IMAGE") || k.ends_with("_DIGEST"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}
