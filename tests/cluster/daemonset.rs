//! The DaemonSet mode on the real node, installed with `helm install
//! --set mode=daemonset`: the relays (the Deployment) come up first, then
//! the node instance, whose init container puts 169.254.20.11 on `podns0`
//! of this host. The sample training pod's dnsConfig (the node instance
//! first, the cluster DNS second) resolves its gang from the node
//! instance, whose query counter moves while the relays' does not; a name
//! outside its scope still resolves; uninstalling as deploy/README.md says
//! leaves the node clean.

use std::net::SocketAddr;
use std::time::Instant;

use crate::forward_target::*;
use crate::real_node::*;
use crate::support::*;

pub const LINK_LOCAL: &str = "169.254.20.11";

/// The sample training pod's init container (deploy/overlays/daemonset/
/// sample-training-pod.yaml): `podns wait` for the whole gang, asking DNS
/// only, with the image built here.
pub fn wait_for_gang(n: &Node, job: &str) -> String {
    format!(
        "      initContainers:
      - name: wait-for-gang
        image: {image}
        imagePullPolicy: Never
        args: [wait, {job}, --namespace=$(NAMESPACE), --timeout=5m]
        env: [{{name: NAMESPACE, valueFrom: {{fieldRef: {{fieldPath: metadata.namespace}}}}}}]
        securityContext: {{allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, runAsNonRoot: true, capabilities: {{drop: [ALL]}}}}
",
        image = n.pinned("podns"),
    )
}

/// `helm install podns` in DaemonSet mode into `ns` (with the relays'
/// Secret made as deploy/README.md says), `extra` values added; returns
/// the seconds until the relays and the node instance were Ready.
pub fn install_daemonset(n: &Node, pns: &mut PodnsNamespace, extra: &[&str]) -> f64 {
    let ns = pns.name.clone();
    relay_tls_secret(n.c, &ns, "podns-relay-tls", &format!("{FULLNAME}.{ns}.svc"));
    let mut args = vec![
        "--set=mode=daemonset".to_string(),
        format!("--set=daemonset.linkLocal.image={}", n.image("busybox")),
        format!("--set=daemonset.linkLocal.digest={}", n.digest("busybox")),
        format!("--set=daemonset.stateDir.image={}", n.image("busybox")),
        format!("--set=daemonset.stateDir.digest={}", n.digest("busybox")),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let t0 = pns.helm_install(&args, true);
    n.rollout_status(&ns, &format!("deployment/{FULLNAME}"), 180);
    n.rollout_status(&ns, &format!("daemonset/{FULLNAME}"), 180);
    since(t0)
}

/// The DaemonSet release the tests run: the relays' certificate names
/// podns.podns.svc, so release podns in namespace podns, privileged
/// (hostNetwork), installed by [`install_daemonset`]; with the seconds until
/// it was Ready.
pub fn daemonset_release<'a>(n: &'a Node<'a>) -> (PodnsNamespace<'a>, f64) {
    let mut pns = PodnsNamespace::new(n, "podns", "privileged");
    let ready = install_daemonset(n, &mut pns, &[]);
    (pns, ready)
}

/// The node instance's pod on the real node.
pub fn node_instance(n: &Node, ns: &str) -> String {
    let pods = n.c.kubectl(&[
        "-n",
        ns,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/component=node-local",
        "--field-selector",
        &format!("spec.nodeName={}", n.name),
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    let pods: Vec<&str> = pods.split_whitespace().collect();
    assert_eq!(pods.len(), 1, "one node instance on {}: {pods:?}", n.name);
    pods[0].to_string()
}

/// The relays' admin addresses (pod IP, 9153).
pub fn relay_admins(n: &Node, ns: &str) -> Vec<SocketAddr> {
    n.pods(ns, "app.kubernetes.io/component=forward-target")
        .iter()
        .map(|p| format!("{}:9153", n.pod_ip(ns, p)).parse().unwrap())
        .collect()
}

/// The node instance's admin address (the node IP, 9154: hostNetwork).
pub fn node_admin(n: &Node) -> SocketAddr {
    format!("{}:9154", n.ip).parse().unwrap()
}

/// The questions a node instance forwarded to the relays (answered or
/// failed: each is counted before its answer goes back).
pub fn forwarded_total(admin: SocketAddr) -> f64 {
    metric_at(admin, "podns_dns_forwarded_total")
}

pub fn requests(admins: &[SocketAddr]) -> f64 {
    admins
        .iter()
        .map(|a| metric_at(*a, "podns_dns_requests_total"))
        .sum()
}

/// `ip -o addr show podns0` on this host ("" when there is none).
pub fn podns0() -> String {
    let out = std::process::Command::new("ip")
        .args(["-o", "addr", "show", "dev", "podns0"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Sockets bound to the link-local address on this host (`ss`).
pub fn bound_to_link_local() -> String {
    let out = std::process::Command::new("ss")
        .args(["-Hlnup"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&format!("{LINK_LOCAL}:53")))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn daemonset_node_instance_answers_the_gang_and_uninstalls_clean() {
    let c = cluster();
    let Some(n) = real_node(&c) else { return };
    let (mut pns, ready) = daemonset_release(&n);
    let ns = pns.name.clone();
    report(
        &c,
        &format!(
            "daemonset (helm install --set mode=daemonset): relays and node instance Ready {ready:.1} s after helm install"
        ),
    );

    // The init container put the address on podns0, here.
    let addr = podns0();
    assert!(
        addr.contains(&format!("inet {LINK_LOCAL}/32")),
        "podns0: {addr}"
    );
    // The node instance: uid 65532 with exactly NET_BIND_SERVICE (the file
    // capability of podns-bind53), bound to 169.254.20.11:53.
    let pod = node_instance(&n, &ns);
    let pid = n.pid(&ns, &pod, "podns");
    assert_eq!(
        Node::proc_status(pid, "Uid").split_whitespace().next(),
        Some("65532")
    );
    assert_eq!(
        Node::proc_status(pid, "CapEff"),
        "0000000000000400",
        "CapEff of {pod}"
    );
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert!(exe.ends_with("podns-bind53"), "{}", exe.display());
    assert!(
        bound_to_link_local().contains(&format!("pid={pid},")),
        "{}",
        bound_to_link_local()
    );

    // The sample training pod's dnsConfig, and its init container that
    // waits for the gang through DNS.
    let train = c.namespace("train");
    let tns = train.name.as_str();
    let sample = Dns::Servers(vec![LINK_LOCAL.into(), n.dns.clone()]);
    c.apply(&gang(
        &n,
        tns,
        "trainer",
        3,
        &sample,
        &wait_for_gang(&n, "trainer"),
    ));
    c.apply(&n.client_pod(tns, "client", &sample));
    let ips = rank_ips(&c, tns, "trainer", 3);
    n.wait_ready(tns, "app=train", 180);
    n.wait_ready(tns, "app=client", 120);
    let waited = c.kubectl(&["-n", tns, "logs", "job/trainer", "-c", "wait-for-gang"]);
    // `podns wait` says one line when the gang is there.
    assert_eq!(waited.trim().lines().count(), 1, "wait-for-gang: {waited}");
    report(
        &c,
        &format!("daemonset: the sample's init container: {}", waited.trim()),
    );

    let node = [node_admin(&n)];
    let relays = relay_admins(&n, &ns);
    // The node instance holds the namespace once it has seen a pod of it on
    // the node and listed the namespace from a relay; until then it
    // forwards the names (right answers, from the relays). The gang's pods
    // are Ready, so that is done or moments away: one name answered by
    // the node instance itself, nothing forwarded, within a deadline.
    let t = Instant::now();
    wait_for(
        "the node instance to answer the gang without forwarding",
        secs(60),
        || {
            let before = forwarded_total(node[0]);
            let (ok, _, got) = lookup(&n, tns, "client", "cgo", "trainer-0.trainer");
            (ok && got == ips[0] && forwarded_total(node[0]) == before).then_some(())
        },
    );
    eprintln!(
        "the node instance held the gang {:.1} s after it was Ready",
        t.elapsed().as_secs_f64()
    );
    // It saves its scope on the kubelet's hostPath, which the state-dir
    // init container gave to the podns user (the kubelet makes it root's).
    wait_for("the node instance to save its scope", secs(30), || {
        let written = r#"podns_node_state_writes_total{result="written"}"#;
        (metric_at(node[0], written) > 0.0).then_some(())
    });
    let failed = r#"podns_node_state_writes_total{result="failed"}"#;
    assert_eq!(
        metric_at(node[0], failed),
        0.0,
        "a write of the saved scope failed"
    );
    // In scope: the node instance answers, the relays are not asked.
    let (node_before, relays_before) = (requests(&node), requests(&relays));
    let hops = [
        Hop::new("the node instance", LINK_LOCAL, 53),
        Hop::new("the cluster DNS", &n.dns, 53),
    ];
    check_forward_names(&n, tns, "client", &ips, &hops);
    let (node_after, relays_after) = (requests(&node), requests(&relays));
    check_getent(&n, tns, "client", &ips);
    assert!(
        node_after > node_before,
        "the node instance was not asked: {node_before} -> {node_after} queries (its admin {}: {})",
        node[0],
        http_get(node[0], "/readyz").1.trim()
    );
    let forwarded: Vec<String> = http_get(node[0], "/metrics")
        .1
        .lines()
        .filter(|l| {
            l.starts_with("podns_dns_forwarded") || l.starts_with("podns_dns_requests_total")
        })
        .map(str::to_string)
        .collect();
    let relay_lines: Vec<String> = relays
        .iter()
        .flat_map(|a| {
            http_get(*a, "/metrics")
                .1
                .lines()
                .filter(|l| l.starts_with("podns_dns_re"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        relays_after - relays_before == 0.0,
        "the relays were asked for in-scope names: {relays_before} -> {relays_after}\nnode instance: {forwarded:#?}\nrelays: {relay_lines:#?}"
    );
    report(
        &c,
        &format!(
            "daemonset: the gang's names through the sample dnsConfig: node instance {} queries, relays {}",
            node_after - node_before,
            relays_after - relays_before
        ),
    );
    // PTR and a missing rank (the node instance forwards reverse names to
    // the relays).
    check_ptr_and_missing(&n, tns, "client", &ips);
    // Outside its scope: another namespace's Service (forwarded to the
    // relays' DNS) and a name outside the cluster (REFUSED, so glibc asks
    // the cluster DNS, whose upstream is the local stand-in).
    let before = requests(&relays);
    for resolver in ["cgo", "go"] {
        let (ok, _, got) = lookup(
            &n,
            tns,
            "client",
            resolver,
            "kubernetes.default.svc.cluster.local",
        );
        assert!(
            ok && got == "10.96.0.1",
            "{resolver}: kubernetes.default: {got}"
        );
        let (ok, ms, got) = lookup(&n, tns, "client", resolver, "www.example.test");
        assert!(
            ok && got == "192.0.2.80",
            "{resolver}: www.example.test: {got} ({ms} ms)"
        );
    }
    assert!(
        requests(&relays) > before,
        "the relays answered nothing forwarded"
    );
    for l in rss_lines(&n, &ns, "app.kubernetes.io/name=podns", "daemonset") {
        report(&c, &l);
    }

    // Uninstall as deploy/README.md "Uninstall" says: the pods
    // that ask 169.254.20.11 first, then the release, then podns0 from a
    // privileged debug pod on the node.
    drop(train);
    n.helm(&["uninstall", RELEASE, "-n", &ns, "--wait"])
        .unwrap();
    pns.uninstall.clear();
    wait_for("the node instance's process gone", secs(60), || {
        (!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(())
    });
    assert_eq!(
        bound_to_link_local(),
        "",
        "a socket on {LINK_LOCAL}:53 after uninstall"
    );
    assert!(
        podns0().contains(LINK_LOCAL),
        "the address stays until step 3"
    );
    let debug = c.kubectl(&[
        "-n",
        "default",
        "debug",
        &format!("node/{}", n.name),
        &format!("--image={}", n.pinned("busybox")),
        "--profile=sysadmin",
        "--",
        "chroot",
        "/host",
        "ip",
        "link",
        "del",
        "podns0",
    ]);
    let debug_pod = debug
        .split_whitespace()
        .find(|w| w.starts_with("node-debugger-"))
        .unwrap_or_else(|| panic!("kubectl debug: {debug}"))
        .trim_end_matches('.')
        .to_string();
    wait_for("the debug pod to finish", secs(120), || {
        let phase = c
            .try_pod_field("default", &debug_pod, "{.status.phase}")
            .ok()?;
        (phase == "Succeeded").then_some(())
    });
    c.kubectl(&["-n", "default", "delete", "pod", &debug_pod, "--wait=false"]);
    assert_eq!(podns0(), "", "podns0 after uninstall");
    assert!(
        c.kubectl(&[
            "get",
            "pods",
            "-A",
            "-l",
            "app.kubernetes.io/name=podns",
            "-o",
            "name"
        ])
        .trim()
        .is_empty(),
        "podns pods after uninstall"
    );
    drop(pns);
}
