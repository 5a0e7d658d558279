//! Resolvers no one here wrote, asking podns the way a pod does: glibc
//! (`getent`), Go's pure resolver (`GODEBUG=netdns=go`), musl 1.2.3 (a C
//! program built with `musl-gcc -static`: no EDNS, no retry over TCP) and
//! c-ares through pycares 4 and 5 (whose APIs differ: the script speaks
//! both, under each Python that has one), each through a resolv.conf a
//! kubelet writes for a pod in namespace `default`:
//!
//! ```text
//! nameserver 127.0.0.2     podns
//! nameserver 127.0.0.3     CoreDNS forwarding the cluster's zones to podns
//! search default.svc.cluster.local svc.cluster.local cluster.local
//! options ndots:5
//! ```
//!
//! as the DaemonSet's sample dnsConfig has it (podns first, the cluster's
//! DNS second). Everything runs in a mount and network namespace of its
//! own (`unshare`): /etc/resolv.conf and /etc/nsswitch.conf are bind-mounted
//! there, and the loopback is private, so both servers take port 53 (glibc
//! and musl ask no other port) without meeting a parallel test. CoreDNS's
//! root zone is a `template` answering NXDOMAIN: it stands in for the
//! Internet, so nothing leaves the machine.
//!
//! The names: a short name through the search path and an FQDN with a
//! trailing dot (a headless set); a dual-stack hostname; a rank name; PTR
//! of both of its addresses; SRV (Go, musl's `res_query`, c-ares; `getent`
//! cannot ask for SRV); a 300-member set, larger than UDP; a missing
//! name, which must fail fast through the whole search path. The truth is
//! podns's own answer over TCP (dig).
//!
//! musl never retries over TCP: it gets the whole records that fit 512
//! bytes of the 300-member set (RFC 2181 §9), where an empty TC=1 reply
//! gave it none; the others retry over TCP and get all 300.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::coredns::coredns;
use crate::support::*;

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/integration/resolvers");

/// The default timeout of every resolver here is 5 s or more; a lookup
/// that took this long waited for one.
const TIMED_OUT_MS: u64 = 2500;

/// How `unshare` makes the namespaces: as root a mount and a network
/// namespace; otherwise inside a user namespace, where the kernel allows
/// one. `None`: neither can be made here.
fn unshare_args() -> Option<Vec<&'static str>> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    let args = if root { vec!["-mn"] } else { vec!["-rmn"] };
    let ok = Command::new("unshare")
        .args(&args)
        .arg("true")
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(args)
}

/// Every Python 3 here with a pycares the client script speaks, one per
/// pycares release, each with what its `--version` says ("pycares 5.2.1
/// API 5"): the first `python3` on PATH, Debian's /usr/bin/python3 (whose
/// python3-pycares may not be the first on PATH's), and
/// `PODNS_PYCARES_PYTHON` (a colon-separated list: .ci/run names a venv
/// with pycares 5 there, so CI runs both APIs).
fn pythons_with_pycares() -> Vec<(String, String)> {
    let extra = std::env::var("PODNS_PYCARES_PYTHON").unwrap_or_default();
    let mut found: Vec<(String, String)> = Vec::new();
    for py in ["python3", "/usr/bin/python3"]
        .into_iter()
        .chain(extra.split(':').filter(|p| !p.is_empty()))
    {
        let Ok(out) = Command::new(py)
            .args(["-B", &format!("{SRC}/resolve.py"), "--version"])
            .output()
        else {
            continue;
        };
        let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || !version.starts_with("pycares ") {
            continue;
        }
        if found.iter().all(|(_, v)| *v != version) {
            found.push((py.to_string(), version));
        }
    }
    found
}

/// The client's name in the results: `cares4`, `cares5`, by the pycares
/// API it spoke (and its release when two share one).
fn cares_client(version: &str, all: &[(String, String)]) -> String {
    let api = version.rsplit(' ').next().unwrap_or("?");
    let same_api = all
        .iter()
        .filter(|(_, v)| v.ends_with(&format!(" API {api}")))
        .count();
    if same_api > 1 {
        let release = version.split(' ').nth(1).unwrap_or("?");
        format!("cares{api}-{release}")
    } else {
        format!("cares{api}")
    }
}

/// Build the musl client; `None` without musl-gcc.
fn build_musl(dir: &Path) -> Option<PathBuf> {
    if !has("musl-gcc") {
        return None;
    }
    let out = dir.join("musl-resolve");
    let st = Command::new("musl-gcc")
        .args(["-static", "-O2", "-o"])
        .arg(&out)
        .arg(format!("{SRC}/resolve.c"))
        .status()
        .expect("run musl-gcc");
    assert!(st.success(), "musl-gcc failed");
    Some(out)
}

/// Build the Go client (standard library only, offline); `None` without Go.
fn build_go(dir: &Path) -> Option<PathBuf> {
    if !has("go") {
        return None;
    }
    let out = dir.join("go-resolve");
    output_ok(
        Command::new("go")
            .args(["build", "-o"])
            .arg(&out)
            .arg(".")
            .current_dir(SRC)
            .env("CGO_ENABLED", "0")
            .env("GOTOOLCHAIN", "local")
            .env("GOFLAGS", "-mod=mod"),
        "go build",
    );
    Some(out)
}

/// The web Service and its four dual-stack pods with hostnames, beside the
/// simulator's Job `train-0` of 300 ranks.
const SCENARIO: &str = r#"
- apiVersion: v1
  kind: Service
  metadata: {name: web, namespace: default}
  spec:
    clusterIP: None
    selector: {app: web}
    ports: [{name: http, port: 80, protocol: TCP}]
- {apiVersion: v1, kind: Pod, metadata: {name: web-0, namespace: default, labels: {app: web}}, spec: {hostname: web-0, subdomain: web, containers: [{name: c, image: x}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: web-1, namespace: default, labels: {app: web}}, spec: {hostname: web-1, subdomain: web, containers: [{name: c, image: x}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: web-2, namespace: default, labels: {app: web}}, spec: {hostname: web-2, subdomain: web, containers: [{name: c, image: x}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: web-3, namespace: default, labels: {app: web}}, spec: {hostname: web-3, subdomain: web, containers: [{name: c, image: x}]}}
"#;

/// The second nameserver: the cluster's zones forwarded to podns, as
/// deploy/coredns does, and for every other name the NXDOMAIN the
/// Internet would give (a template, so nothing leaves the machine).
const COREFILE: &str = r#"cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    bind 127.0.0.3
    forward . 127.0.0.2:53
}
.:53 {
    bind 127.0.0.3
    template ANY ANY {
        rcode NXDOMAIN
        authority ". 60 IN SOA a.root-servers.net. nstld.verisign-grs.com. 1 1800 900 604800 86400"
    }
}
"#;

/// The cases: (id, op, name). `@V4`/`@V6` are web-0's addresses.
const CASES: [(&str, &str, &str); 11] = [
    ("short", "addrs", "web"),
    ("fqdn", "addrs", "web.default.svc.cluster.local."),
    ("dual", "addrs", "web-0.web"),
    ("dual_fqdn", "addrs", "web-0.web.default.svc.cluster.local."),
    ("rank", "addrs", "0.train-0.default.rank"),
    ("ptr4", "ptr", "@V4"),
    ("ptr6", "ptr", "@V6"),
    ("srv", "srv", "_http._tcp.web.default.svc.cluster.local."),
    ("big4", "addrs4", "train-0.default.svc.cluster.local."),
    ("big", "addrs", "train-0"),
    ("missing", "addrs", "nosuch"),
];

/// The script run inside the namespaces.
fn script(dir: &Path, coredns: &Path, clients: &[(String, String)]) -> String {
    let mut s = format!(
        r#"
set -u
D={dir}
PODNS={podns}
PIDS=""
trap 'kill $PIDS 2>/dev/null; wait' EXIT
ip link set lo up
# The pod's own addresses (documentation ones, on lo: they lead nowhere):
# glibc's AI_ADDRCONFIG answers no IPv4 or IPv6 on a host with loopback
# addresses only, as getent ahostsv4 asks.
ip addr add 192.0.2.10/32 dev lo && ip -6 addr add 2001:db8::10/128 dev lo nodad || {{ echo "SETUP no pod address"; exit 1; }}
printf 'hosts: dns\n' > $D/nsswitch.conf
[ -e /etc/nsswitch.conf ] && mount --bind $D/nsswitch.conf /etc/nsswitch.conf
: > $D/resolv.conf
mount --bind $D/resolv.conf /etc/resolv.conf || {{ echo "SETUP cannot bind-mount resolv.conf"; exit 1; }}
$PODNS sim --listen 127.0.0.1:16443 --kubelet --pod-cidr-v6 fd00:10::/64 --jobs 1 --ranks 300 \
  --scenario $D/scenario.yaml --kubeconfig-out $D/kc.yaml >/dev/null 2>$D/sim.log &
PIDS="$PIDS $!"
i=0; while [ ! -s $D/kc.yaml ]; do i=$((i+1)); [ $i -gt 300 ] && {{ echo "SETUP no kubeconfig"; exit 1; }}; sleep 0.1; done
$PODNS serve --kubeconfig $D/kc.yaml --dns-listen 127.0.0.2:53 --admin-listen 127.0.0.2:9153 >/dev/null 2>$D/podns.log &
PIDS="$PIDS $!"
{coredns} -conf $D/Corefile >$D/coredns.log 2>&1 &
PIDS="$PIDS $!"
# podns's own answer over TCP: the truth every client is held to.
ask() {{ dig +tcp +short +time=2 +tries=1 @127.0.0.2 "$@" 2>/dev/null | sed 's/\.$//' | sort -u | tr '\n' ' '; }}
poll() {{ i=0; while [ $i -lt 300 ]; do [ -n "$(dig +short +time=1 +tries=1 @$1 $2 2>/dev/null)" ] && return 0; i=$((i+1)); sleep 0.1; done; echo "SETUP $2 never answered at $1"; exit 1; }}
poll 127.0.0.2 train-0-299.train-0.default.svc.cluster.local
poll 127.0.0.2 web-3.web.default.svc.cluster.local
poll 127.0.0.3 web-3.web.default.svc.cluster.local
V4=$(ask web-0.web.default.svc.cluster.local A | tr -d ' ')
V6=$(ask web-0.web.default.svc.cluster.local AAAA | tr -d ' ')
echo "TRUTH short $(ask web.default.svc.cluster.local A)$(ask web.default.svc.cluster.local AAAA)"
echo "TRUTH fqdn $(ask web.default.svc.cluster.local A)$(ask web.default.svc.cluster.local AAAA)"
echo "TRUTH dual $V4 $V6"
echo "TRUTH dual_fqdn $V4 $V6"
echo "TRUTH rank $(ask 0.train-0.default.rank.cluster.local A)$(ask 0.train-0.default.rank.cluster.local AAAA)"
echo "TRUTH ptr4 $(ask -x $V4)"
echo "TRUTH ptr6 $(ask -x $V6)"
echo "TRUTH srv $(dig +tcp +short @127.0.0.2 _http._tcp.web.default.svc.cluster.local SRV | awk '{{print $3":"$4}}' | sed 's/\.$//' | sort -u | tr '\n' ' ')"
echo "TRUTH big4 $(ask train-0.default.svc.cluster.local A)"
echo "TRUTH big $(ask train-0.default.svc.cluster.local A)$(ask train-0.default.svc.cluster.local AAAA)"
echo "TRUTH missing "
printf '%s\n' "nameserver 127.0.0.2" "nameserver 127.0.0.3" \
  "search default.svc.cluster.local svc.cluster.local cluster.local" "options ndots:5" > $D/resolv.conf
# glibc: getent, timed here.
glibc() {{
  t0=$(date +%s%N)
  case $1 in
    addrs) out=$(getent ahosts "$2" | awk '{{print $1}}' | sort -u | tr '\n' ' ');;
    addrs4) out=$(getent ahostsv4 "$2" | awk '{{print $1}}' | sort -u | tr '\n' ' ');;
    ptr) out=$(getent hosts "$2" | awk '{{print $2}}' | sort -u | tr '\n' ' ');;
    srv) echo "skip getent cannot ask for SRV"; return;;
  esac
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if [ -n "$out" ]; then echo "ok $ms $out"; else echo "fail $ms no answer"; fi
}}
"#,
        dir = dir.display(),
        podns = PODNS_BIN,
        coredns = coredns.display(),
    );
    for (client, cmd) in clients {
        for (case, op, name) in CASES {
            let name = name.replace("@V4", "$V4").replace("@V6", "$V6");
            s.push_str(&format!(
                "echo \"R {client} {case} $({cmd} {op} {name})\"\n"
            ));
        }
    }
    s
}

/// One lookup's result line: ok (sorted items) or fail, and how long.
#[derive(Debug)]
struct Got {
    ok: bool,
    ms: u64,
    items: Vec<String>,
    line: String,
}

/// podns's answers by case, and each client's result by (client, case).
type Results = (
    BTreeMap<String, Vec<String>>,
    BTreeMap<(String, String), Got>,
);

fn parse(out: &str) -> Results {
    let mut truth = BTreeMap::new();
    let mut got = BTreeMap::new();
    for l in out.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["TRUTH", case, items @ ..] => {
                let mut v: Vec<String> = items.iter().map(|s| s.to_string()).collect();
                v.sort();
                truth.insert(case.to_string(), v);
            }
            ["R", client, case, status, rest @ ..] => {
                let ms = rest.first().and_then(|m| m.parse().ok()).unwrap_or(0);
                let mut items: Vec<String> = rest.iter().skip(1).map(|s| s.to_string()).collect();
                items.sort();
                got.insert(
                    (client.to_string(), case.to_string()),
                    Got {
                        ok: *status == "ok",
                        ms,
                        items,
                        line: l.to_string(),
                    },
                );
            }
            _ => {}
        }
    }
    (truth, got)
}

/// How many A (16 bytes) and AAAA (28 bytes) records of a set fit a
/// 512-byte reply to a question for `name` (absolute, no trailing dot),
/// with no OPT: musl's share.
fn fit_512(name: &str, per: usize) -> usize {
    (512 - 12 - (name.len() + 2) - 4) / per
}

#[test]
fn resolvers_glibc_go_musl_and_c_ares_resolve_through_a_pod_resolv_conf() {
    let Some(unshare) = unshare_args() else {
        need(
            "a private mount and network namespace (unshare; root)",
            false,
        );
        return;
    };
    for tool in ["getent", "ip", "dig"] {
        if !need_cmd(tool) {
            return;
        }
    }
    let coredns = match coredns() {
        Ok(bin) => bin,
        Err(why) => {
            need(&format!("CoreDNS, the second nameserver ({why})"), false);
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut clients: Vec<(String, String)> = vec![("glibc".into(), "glibc".into())];
    match build_musl(d) {
        Some(bin) => clients.push(("musl".into(), bin.display().to_string())),
        None => {
            if !need("musl-gcc (Debian musl-tools)", false) {
                eprintln!("musl not tried");
            }
        }
    }
    match build_go(d) {
        Some(bin) => clients.push((
            "go".into(),
            format!("env GODEBUG=netdns=go {}", bin.display()),
        )),
        None => {
            if !need("go (Go's pure resolver)", false) {
                eprintln!("Go's resolver not tried");
            }
        }
    }
    let pythons = pythons_with_pycares();
    for (py, version) in &pythons {
        eprintln!("c-ares: {py} has {version}");
        let name = cares_client(version, &pythons);
        clients.push((name, format!("{py} -B {SRC}/resolve.py")));
    }
    // Both APIs the script speaks, in CI (.ci/run installs both); here,
    // whatever is installed, said.
    for api in ["4", "5"] {
        let have = pythons
            .iter()
            .any(|(_, v)| v.ends_with(&format!(" API {api}")));
        if !need(
            &format!(
                "pycares {api} (Debian python3-pycares is 4; pip's is 5, named by PODNS_PYCARES_PYTHON)"
            ),
            have,
        ) {
            eprintln!("c-ares through pycares {api} not tried");
        }
    }
    std::fs::write(d.join("scenario.yaml"), SCENARIO).unwrap();
    std::fs::write(d.join("Corefile"), COREFILE).unwrap();
    let text = script(d, &coredns, &clients);
    let out = Command::new("timeout")
        .arg("300")
        .arg("unshare")
        .args(&unshare)
        .args(["sh", "-c", &text])
        .output()
        .expect("run unshare");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let logs = ["sim.log", "podns.log", "coredns.log"]
        .map(|f| std::fs::read_to_string(d.join(f)).unwrap_or_default());
    let context = || {
        format!(
            "{stdout}\nstderr: {}\nlogs: {logs:?}",
            String::from_utf8_lossy(&out.stderr)
        )
    };
    assert!(
        !stdout.contains("SETUP"),
        "the namespace did not come up: {}",
        context()
    );
    let (truth, got) = parse(&stdout);
    let big = "train-0.default.svc.cluster.local";
    assert_eq!(truth["big4"].len(), 300, "{}", context());
    assert_eq!(truth["big"].len(), 600, "{}", context());
    assert_eq!(truth["short"].len(), 8, "{}", context());
    assert_eq!(truth["srv"].len(), 4, "{}", context());
    for (client, _) in &clients {
        for (case, _, _) in CASES {
            let key = (client.to_string(), case.to_string());
            let Some(g) = got.get(&key) else {
                panic!("no result for {client} {case}: {}", context());
            };
            eprintln!("{}", g.line);
            if client == "glibc" && case == "srv" {
                assert!(g.line.contains("skip"), "{}", g.line);
                continue;
            }
            assert!(
                g.ms < TIMED_OUT_MS,
                "{client} {case} took {} ms (a timeout): {}",
                g.ms,
                g.line
            );
            if case == "missing" {
                assert!(!g.ok, "{client}: a missing name resolved: {}", g.line);
                continue;
            }
            assert!(g.ok, "{client} {case}: {}\n{}", g.line, context());
            let want = &truth[case];
            match (client.as_str(), case) {
                // musl: no EDNS and no TCP, so the records that fit 512
                // bytes, A (and AAAA) asked apart.
                ("musl", "big4") => {
                    assert_eq!(g.items.len(), fit_512(big, 16), "{}", g.line);
                    assert!(g.items.iter().all(|i| want.contains(i)), "{}", g.line);
                }
                ("musl", "big") => {
                    assert_eq!(
                        g.items.len(),
                        fit_512(big, 16) + fit_512(big, 28),
                        "{}",
                        g.line
                    );
                    assert!(g.items.iter().all(|i| want.contains(i)), "{}", g.line);
                }
                _ => assert_eq!(&g.items, want, "{client} {case}: {}", g.line),
            }
        }
    }
}
