//! Rollouts and kills under load on the real node, measured as a training
//! pod sees them. Client pods look names up 50 times a second with glibc
//! (the client image's `resolve -resolver cgo loop`), each in its own way:
//!
//! - `two`: the sample training pod's dnsConfig, the node instance
//!   (169.254.20.11) first and the cluster DNS second;
//! - `only`: the node instance as the only nameserver;
//! - `coredns`: ClusterFirst, CoreDNS alone (its `kubernetes` plugin).
//!
//! Each case does the podns event, waits until podns is back, then the
//! same kind of event to CoreDNS, while all three loop: a DaemonSet
//! rollout (`kubectl rollout restart`), the relays' rollout, a node
//! instance killed with SIGKILL, one OOM-killed under a limit set too low.
//! `two` must lose nothing and see no window of lookups slower than 1 s
//! (at most one in a thousand waits the timeout once); `only` and
//! `coredns` are measured. The table goes to the report
//! (`PODNS_NODE_REPORT`, default DIR/node-report.md).

use std::time::Instant;

use crate::daemonset::*;
use crate::forward_target::*;
use crate::real_node::*;
use crate::support::*;

struct Case {
    name: &'static str,
    coredns: &'static str,
    tuned: bool,
    rows: Vec<(String, LoopSummary, Vec<String>)>,
}

/// net.ipv4.icmp_ratemask of this host (the real node's), put back on drop.
struct IcmpRatemask {
    default: u32,
}

const RATEMASK: &str = "/proc/sys/net/ipv4/icmp_ratemask";

impl IcmpRatemask {
    fn read() -> IcmpRatemask {
        let default = std::fs::read_to_string(RATEMASK)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        IcmpRatemask { default }
    }

    /// The mask less ICMP_DEST_UNREACH (type 3).
    fn without_unreachable(&self) -> u32 {
        self.default & !(1 << 3)
    }

    fn set(&self, mask: u32) {
        std::fs::write(RATEMASK, mask.to_string()).unwrap();
    }
}

impl Drop for IcmpRatemask {
    fn drop(&mut self) {
        self.set(self.default);
    }
}

/// The restart count of `pod`'s first container.
fn restarts(n: &Node, ns: &str, pod: &str) -> u64 {
    n.c.try_pod_field(ns, pod, "{.status.containerStatuses[0].restartCount}")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// SIGKILL `pod`'s container `container` (a plain kill(2) of its host pid)
/// and wait until the kubelet has restarted it; `what` names it in the wait.
fn kill_and_wait_restart(n: &Node, ns: &str, pod: &str, container: &str, what: &str) {
    let before = restarts(n, ns, pod);
    let pid = n.pid(ns, pod, container);
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    wait_for(&format!("{what} restarted"), secs(120), || {
        (restarts(n, ns, pod) > before).then_some(())
    });
}

/// Every pod of `selector` in `ns` Ready and none terminating.
fn settled(n: &Node, ns: &str, selector: &str, want: usize) {
    wait_for(
        &format!("{want} pods of {selector} in {ns} Ready"),
        secs(180),
        || {
            let out = n
                .c
                .try_pods_field(
                    ns,
                    selector,
                    r#"{range .items[*]}{.metadata.deletionTimestamp}|{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}"#,
                )
                .ok()?;
            let lines: Vec<&str> = out.lines().collect();
            (lines.len() == want && lines.iter().all(|l| *l == "|True")).then_some(())
        },
    );
}

/// The podns node instance's limits back to the chart's, and CoreDNS's.
fn restore(n: &Node, ns: &str) {
    let _ = n.helm(&["rollback", RELEASE, "1", "-n", ns, "--wait"]);
    let _ = n.c.try_kubectl(
        &[
            "-n",
            "kube-system",
            "set",
            "resources",
            "deployment/coredns",
            "--limits=memory=170Mi",
            "--requests=memory=70Mi",
        ],
        None,
    );
}

#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn rollouts_and_kills_under_load() {
    let c = cluster();
    let Some(n) = real_node(&c) else { return };
    let (pns, _) = daemonset_release(&n);
    let ns = pns.name.clone();
    // The training namespace, answered by podns; CoreDNS, the second
    // nameserver of the sample's dnsConfig, forwards it and the rank view
    // to the relays' Service as deploy/coredns/Corefile.namespaces says, so
    // it answers the same names while a node instance is away.
    let train = c.namespace("train");
    let tns = train.name.clone();
    c.apply(&gang(&n, &tns, "trainer", 3, &Dns::ClusterFirst, ""));
    // Another namespace's gang, which CoreDNS answers alone (its
    // `kubernetes` plugin): the same lookups, through CoreDNS only.
    let plain = c.namespace("plain");
    let pns_plain = plain.name.clone();
    c.apply(&gang(&n, &pns_plain, "trainer", 3, &Dns::ClusterFirst, ""));
    rank_ips(&c, &tns, "trainer", 3);
    rank_ips(&c, &pns_plain, "trainer", 3);
    n.wait_ready(&tns, "app=train", 180);
    n.wait_ready(&pns_plain, "app=train", 180);
    let relays_ip = c.kubectl(&[
        "-n",
        &ns,
        "get",
        "svc",
        FULLNAME,
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    let _restore = CorefileGuard(&n);
    n.set_corefile(&n.corefile_from("deploy/coredns/Corefile.namespaces", relays_ip.trim(), &tns));
    let podns_names = [
        format!("trainer-0.trainer.{tns}.svc.cluster.local"),
        format!("1.trainer.{tns}.rank.cluster.local"),
        format!("trainer.{tns}.svc.cluster.local."),
        // Outside the node instance's scope: forwarded to the relays.
        "kubernetes.default.svc.cluster.local".to_string(),
    ];
    let coredns_names = [
        format!("trainer-0.trainer.{pns_plain}.svc.cluster.local"),
        format!("trainer-1.trainer.{pns_plain}.svc.cluster.local"),
        format!("trainer.{pns_plain}.svc.cluster.local."),
        "kubernetes.default.svc.cluster.local".to_string(),
    ];
    let p: Vec<&str> = podns_names.iter().map(String::as_str).collect();
    let k: Vec<&str> = coredns_names.iter().map(String::as_str).collect();
    let two = Dns::Servers(vec![LINK_LOCAL.into(), n.dns.clone()]);
    let only = Dns::Servers(vec![LINK_LOCAL.into()]);
    // The same client, options and all, with CoreDNS as its nameserver.
    let coredns_only = Dns::Servers(vec![n.dns.clone()]);

    // The kernel rate-limits ICMP port unreachable to about one a second
    // per client after a burst of 6 (net.ipv4.icmp_ratelimit, for the
    // types of net.ipv4.icmp_ratemask): while nothing listens on
    // 169.254.20.11:53, glibc hears "refused" for the first few queries and
    // waits its 1 s timeout for the rest before the next nameserver. The
    // first case runs on the node as the kernel has it; the others with
    // port unreachable out of the rate-limited types (deploy/README.md
    // "Upgrade and roll back"), put back at the end.
    let icmp = IcmpRatemask::read();
    let mut cases = vec![];
    for (name, coredns, tuned) in [
        (
            "DaemonSet rollout restart, kernel's ICMP rate limit",
            "CoreDNS rollout restart",
            false,
        ),
        ("DaemonSet rollout restart", "CoreDNS rollout restart", true),
        (
            "relays (Deployment) rollout restart",
            "CoreDNS rollout restart",
            true,
        ),
        ("node instance SIGKILL", "one CoreDNS pod SIGKILL", true),
        (
            "node instance OOM-killed (limit 3Mi)",
            "CoreDNS OOM-killed (limit 4Mi)",
            true,
        ),
    ] {
        icmp.set(if tuned {
            icmp.without_unreachable()
        } else {
            icmp.default
        });
        let loops = [
            Looper::start(&n, &tns, "loop-two", &two, "cgo", &p),
            Looper::start(&n, &tns, "loop-only", &only, "cgo", &p),
            Looper::start(&n, &tns, "loop-coredns", &coredns_only, "cgo", &k),
        ];
        let t0 = Instant::now();
        let mut podns_log = String::new();
        // What the node instance forwarded while the relays rolled: a
        // namespace being listed again on a new relay is answered from what
        // the node instance held (`stale`), not SERVFAIL (`failed`).
        let forwarded = |result: &str| {
            http_get(node_admin(&n), "/metrics")
                .1
                .lines()
                .filter(|l| {
                    l.starts_with("podns_dns_forwarded_total")
                        && l.contains(&format!("result=\"{result}\""))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>()
        };
        let before = [forwarded("stale"), forwarded("failed")];
        match name {
            n_ if n_.starts_with("DaemonSet") => {
                n.rollout_restart(&ns, &format!("daemonset/{FULLNAME}"), 180);
            }
            n_ if n_.starts_with("relays") => {
                n.rollout_restart(&ns, &format!("deployment/{FULLNAME}"), 180);
                podns_log = format!(
                    "the node instance forwarded while the relays rolled: {} answered stale, {} SERVFAIL",
                    forwarded("stale") - before[0],
                    forwarded("failed") - before[1]
                );
            }
            n_ if n_.contains("SIGKILL") => {
                let pod = node_instance(&n, &ns);
                kill_and_wait_restart(&n, &ns, &pod, "podns", "the node instance");
                settled(&n, &ns, "app.kubernetes.io/component=node-local", 1);
                podns_log = c.kubectl(&[
                    "-n",
                    &ns,
                    "logs",
                    &pod,
                    "-c",
                    "podns",
                    "--previous",
                    "--tail=1",
                ]);
            }
            _ => {
                // A limit the node instance cannot start under: the
                // DaemonSet rolls it out and the new pod is OOM-killed.
                // 3Mi: a node instance's memory cgroup holds about 3.5 MiB
                // once it serves (4Mi was too low before huge pages were
                // off from its first allocation, and no longer is). A
                // limit that low may stop runc's own init in the cgroup
                // first, which the kubelet reports as StartError: either
                // way the node instance cannot run.
                n.helm(&[
                    "upgrade",
                    RELEASE,
                    &format!("{}/deploy/helm/podns", env!("CARGO_MANIFEST_DIR")),
                    "-n",
                    &ns,
                    "--reuse-values",
                    "--set=daemonset.resources.limits.memory=3Mi",
                    "--set=daemonset.resources.requests.memory=3Mi",
                ])
                .unwrap();
                let pod = wait_for("a node instance OOM-killed", secs(180), || {
                    let out = c
                        .try_kubectl(
                            &["-n", &ns, "get", "pods", "-l", "app.kubernetes.io/component=node-local", "-o",
                              r#"jsonpath={range .items[*]}{.metadata.name} {.status.containerStatuses[0].lastState.terminated.reason}{.status.containerStatuses[0].state.terminated.reason}{"\n"}{end}"#],
                            None,
                        )
                        .ok()?;
                    out.lines()
                        .find(|l| l.contains("OOMKilled") || l.contains("StartError"))
                        .map(|l| l.split(' ').next().unwrap().to_string())
                });
                // Ten seconds of the node without its instance, as a node
                // whose limit is wrong would be until someone notices.
                std::thread::sleep(std::time::Duration::from_secs(10));
                podns_log = format!(
                    "{}: {}",
                    pod,
                    c.try_kubectl(&["-n", &ns, "describe", "pod", &pod], None)
                        .unwrap_or_default()
                        .lines()
                        .filter(|l| l.contains("OOMKilled")
                            || l.contains("OOM")
                            || l.contains("Reason")
                            || l.contains("Restart Count")
                            || l.contains("BackOff"))
                        .collect::<Vec<_>>()
                        .join(" / ")
                );
                n.helm(&["rollback", RELEASE, "1", "-n", &ns, "--wait"])
                    .unwrap();
                n.rollout_status(&ns, &format!("daemonset/{FULLNAME}"), 180);
            }
        }
        let podns_s = since(t0);
        settled(&n, &ns, "app.kubernetes.io/component=node-local", 1);
        // The same kind of event to CoreDNS.
        let t1 = Instant::now();
        let dns_pods = n.pods("kube-system", "k8s-app=kube-dns");
        if coredns.contains("rollout") {
            n.rollout_restart("kube-system", "deployment/coredns", 180);
        } else if coredns.contains("SIGKILL") {
            kill_and_wait_restart(&n, "kube-system", &dns_pods[0], "coredns", "CoreDNS");
        } else {
            c.kubectl(&[
                "-n",
                "kube-system",
                "set",
                "resources",
                "deployment/coredns",
                "--limits=memory=4Mi",
                "--requests=memory=4Mi",
            ]);
            wait_for("a CoreDNS pod OOM-killed", secs(180), || {
                let out = c
                    .try_pods_field("kube-system", "k8s-app=kube-dns", "{..reason}")
                    .ok()?;
                out.contains("OOMKilled").then_some(())
            });
            std::thread::sleep(std::time::Duration::from_secs(10));
            restore(&n, &ns);
            n.rollout_status("kube-system", "deployment/coredns", 180);
        }
        settled(&n, "kube-system", "k8s-app=kube-dns", 2);
        let coredns_s = since(t1);
        let mut rows = vec![];
        for (l, what) in
            loops
                .into_iter()
                .zip(["podns, two nameservers", "podns only", "CoreDNS alone"])
        {
            let (s, events) = l.stop();
            rows.push((what.to_string(), s, events));
        }
        eprintln!(
            "{name}: podns event {podns_s:.1} s, CoreDNS event {coredns_s:.1} s; {podns_log}"
        );
        cases.push(Case {
            name,
            coredns,
            tuned,
            rows,
        });
        if !podns_log.is_empty() {
            report(
                &c,
                &format!(
                    "{name}: what the pod and podns said: {}",
                    podns_log.replace('\n', " / ")
                ),
            );
        }
    }
    restore(&n, &ns);

    let mut table = String::from(
        "| case | client | lookups | failed | slower than 1 s | slowest | gap (first to last failed or slow) |\n|---|---|---:|---:|---:|---:|---:|\n",
    );
    for case in &cases {
        for (what, s, _) in &case.rows {
            let label = if what.starts_with("CoreDNS") {
                case.coredns
            } else {
                case.name
            };
            table.push_str(&format!(
                "| {label} | {what} | {} | {} | {} | {:.0} ms | {:.1} s |\n",
                s.total,
                s.failed,
                s.slow,
                s.max_ms,
                s.gap_ms / 1000.0
            ));
        }
    }
    report(&c, &table);
    for case in &cases {
        for (what, s, events) in &case.rows {
            if !events.is_empty() {
                // Which names failed or were slow, and how.
                let mut by: std::collections::BTreeMap<String, usize> = Default::default();
                for e in events {
                    let v: serde_json::Value = serde_json::from_str(e).unwrap();
                    let key = format!(
                        "{} {} {}",
                        v["event"].as_str().unwrap_or(""),
                        v["name"].as_str().unwrap_or(""),
                        v["error"].as_str().unwrap_or("")
                    );
                    *by.entry(key).or_default() += 1;
                }
                report(&c, &format!("{} / {what}: {by:?}", case.name));
            }
            if what.contains("two nameservers") {
                // Never a failure: the second nameserver answers the same
                // names.
                assert_eq!(s.failed, 0, "{}: {what}: {events:?}", case.name);
                // Once port unreachable gets through, the node instance's
                // own rollout and kill cost no window of slow lookups: at
                // most one lookup in a thousand (at least one allowed) waits
                // the resolver's 1 s timeout once, none twice. A window
                // (the old instance gone quiet before its socket closed, a
                // new one bound before it reads) makes dozens. One single
                // timeout in 1,750 lookups was seen on a machine loaded by
                // three compilers beside the cluster. The relays' rollout
                // and the OOM loop are measured, not held (see the report).
                if case.tuned
                    && (case.name.starts_with("DaemonSet") || case.name.contains("SIGKILL"))
                {
                    let allowed = (s.total / 1000).max(1);
                    assert!(
                        s.slow <= allowed && s.max_ms < 2000.0,
                        "{}: {what}: {} slower than 1 s (at most {allowed}), slowest {} ms: {events:?}",
                        case.name,
                        s.slow,
                        s.max_ms
                    );
                }
            }
            assert!(
                s.total > 100,
                "{}: {what} looked up only {} names",
                case.name,
                s.total
            );
        }
    }
    drop(train);
    drop(plain);
    drop(pns);
}
