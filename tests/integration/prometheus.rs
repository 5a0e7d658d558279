//! The dashboard (deploy/grafana/podns.json) and the alerts
//! (deploy/prometheus/) against the real tools. The PrometheusRule must
//! embed exactly rules.yaml; promtool checks the rules and runs their unit
//! tests; and a real Prometheus scrapes `podns demo` every second while it
//! gets UDP and TCP traffic (answers, NXDOMAIN, a truncated set), three
//! watch restarts and a gang restart. Every query of the dashboard must
//! then return data, every alert rule must evaluate cleanly, and
//! PodnsWatchesRestarting must go pending. A node instance, against a
//! relay against `podns sim`, keeps to its series budget, and a real
//! Prometheus scraping both answers the dashboard's relay and node
//! instance rows. `promtool check metrics` passes on a scrape of each
//! role. Tests that need promtool or prometheus skip (with a line on
//! stderr) when it is missing.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use podns_server::metrics as m;
use serde_json::Value;

use crate::daemons::{Daemon, find_tool};
use crate::support::{
    PODNS_BIN, admin_get, need, query_msg, rcode, spawn_serve, tcp, udp, wait_for,
};

/// Every metric family podns exports that the alerts and the dashboard
/// read (without the `_total`, `_bucket`, `_sum` and `_count` suffixes the
/// exposition adds).
const EXPORTED: [&str; 34] = [
    m::DNS_REQUESTS,
    m::DNS_RESPONSES,
    m::DNS_REQUEST_DURATION,
    m::DNS_TRUNCATED,
    m::DNS_TCP_REFUSED,
    m::DNS_RATE_LIMITED,
    m::UDP_RECEIVE_DROPPED,
    m::UDP_RECEIVE_BUFFER,
    m::UDP_SEND_BUFFER,
    m::INDEX_PODS,
    m::READY,
    m::INDEX_SERVICES,
    m::INDEX_NAMES,
    m::WATCH_EVENTS,
    m::WATCH_RESTARTS,
    m::WATCH_SKIPPED,
    m::WATCH_SYNCED,
    m::PROPAGATION,
    m::RANK_JOBS,
    m::GANG_COMPLETE,
    m::RELAY_REFUSED,
    m::RELAY_CONNECTIONS,
    m::RELAY_WATCHES,
    m::RELAY_LISTS,
    m::RELAY_SENT_BYTES,
    m::RELAY_DICT_BYTES,
    m::RELAY_DENIED,
    m::NODE_RELAY_REACHABLE,
    m::NODE_RELAY_FAILURES,
    m::NODE_SCOPE_NAMESPACES,
    m::DNS_FORWARDED,
    m::INDEX_STALENESS,
    m::WATCH_PROBES,
    // Prometheus's own, per target.
    "up",
];

/// The job name the ServiceMonitor gives podns's targets (the metrics
/// Service's name); rules.yaml's PodnsDown selects it.
const JOB: &str = "podns-metrics";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn yaml(rel: &str) -> Value {
    serde_saphyr::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn dashboard() -> Value {
    serde_json::from_str(&read("deploy/grafana/podns.json")).unwrap()
}

/// (alert name, rule) for every alert of rules.yaml.
fn alerts() -> Vec<(String, Value)> {
    let rules = yaml("deploy/prometheus/rules.yaml");
    let mut out = vec![];
    for group in rules["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let name = rule["alert"].as_str().expect("alerting rules only");
            out.push((name.to_string(), rule.clone()));
        }
    }
    out
}

/// The `podns_*` metric names an expression (or any text) mentions.
fn podns_names(text: &str) -> BTreeSet<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("podns_") {
        if text[..i].chars().next_back().is_some_and(ident) {
            continue;
        }
        let name: String = text[i..].chars().take_while(|&c| ident(c)).collect();
        out.insert(name);
    }
    out
}

fn exported(name: &str) -> bool {
    let base = ["_total", "_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name);
    EXPORTED.contains(&name) || EXPORTED.contains(&base)
}

/// The dashboard's row of node instances: its panels read metrics only
/// node instances export, which the demo (a forward target) has not.
const NODE_ROW: &str = "Node instances (aggregate)";
/// The row of relays: the demo exports their metrics, at 0.
const RELAY_ROW: &str = "Relays";

/// Every query of the dashboard: (panel title, refId, expr).
fn dashboard_queries(d: &Value) -> Vec<(String, String, String)> {
    dashboard_queries_by_row(d)
        .into_iter()
        .map(|(_, title, id, expr)| (title, id, expr))
        .collect()
}

/// Every query of the dashboard with the title of the row it is under:
/// (row, panel title, refId, expr).
fn dashboard_queries_by_row(d: &Value) -> Vec<(String, String, String, String)> {
    let mut out = vec![];
    let mut row = String::new();
    for p in d["panels"].as_array().unwrap() {
        if p["type"] == "row" {
            row = p["title"].as_str().unwrap().to_string();
            continue;
        }
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((
                row.clone(),
                p["title"].as_str().unwrap().to_string(),
                t["refId"].as_str().unwrap().to_string(),
                t["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    out
}

/// A dashboard expression as Grafana sends it: its variables replaced.
fn substitute(expr: &str, job: &str, instance: &str) -> String {
    let q = expr
        .replace("$__rate_interval", "1m")
        .replace("$__range", "5m")
        .replace("$job", job)
        .replace("$instance", instance);
    assert!(
        !q.contains('$'),
        "a variable the test does not know: {expr}"
    );
    q
}

#[test]
fn prometheus_rule_embeds_rules_yaml() {
    let crd = yaml("deploy/prometheus/prometheusrule.yaml");
    assert_eq!(crd["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(crd["kind"], "PrometheusRule");
    assert_eq!(
        crd["spec"],
        yaml("deploy/prometheus/rules.yaml"),
        "prometheusrule.yaml's spec differs from rules.yaml: run deploy/prometheus/generate.sh"
    );
    // The optional Prometheus Operator component renders it (deploy.rs
    // checks the rendered copy too).
    let kustomization = yaml("deploy/components/prometheus-operator/kustomization.yaml");
    assert!(
        kustomization["resources"]
            .as_array()
            .unwrap()
            .contains(&Value::from("../../prometheus"))
    );
}

#[test]
fn every_alert_has_severity_runbook_and_promtool_tests() {
    let alerts = alerts();
    assert!(alerts.len() >= 5, "{alerts:?}");
    for (name, rule) in &alerts {
        let severity = rule["labels"]["severity"].as_str().unwrap_or_default();
        assert!(
            ["critical", "warning"].contains(&severity),
            "{name}: severity {severity:?}"
        );
        for a in ["summary", "description"] {
            let text = rule["annotations"][a].as_str().unwrap_or_default();
            assert!(text.len() > 20, "{name}: annotation {a} {text:?}");
        }
        let expr = rule["expr"].as_str().unwrap();
        for metric in podns_names(expr) {
            assert!(exported(&metric), "{name}: podns exports no {metric}");
        }
    }
    // tests.yaml: each alert fires in some case and is silent in another.
    let tests = yaml("deploy/prometheus/tests.yaml");
    let (mut fires, mut silent) = (BTreeSet::new(), BTreeSet::new());
    for t in tests["tests"].as_array().unwrap() {
        for case in t["alert_rule_test"].as_array().into_iter().flatten() {
            let name = case["alertname"].as_str().unwrap().to_string();
            let expected = case["exp_alerts"].as_array().map_or(0, Vec::len);
            if expected > 0 {
                fires.insert(name);
            } else {
                silent.insert(name);
            }
        }
    }
    for (name, _) in &alerts {
        assert!(fires.contains(name), "no promtool test where {name} fires");
        assert!(
            silent.contains(name),
            "no promtool test where {name} is silent"
        );
    }
}

#[test]
fn dashboard_is_templated_and_uses_exported_metrics() {
    let d = dashboard();
    let vars = d["templating"]["list"].as_array().unwrap();
    let var = |n: &str| {
        vars.iter()
            .find(|v| v["name"] == n)
            .unwrap_or_else(|| panic!("variable {n}"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    for n in ["job", "instance"] {
        assert_eq!(var(n)["type"], "query");
        assert_eq!(var(n)["datasource"]["uid"], "${datasource}");
        assert_eq!(var(n)["includeAll"], true, "{n}: an All option");
    }
    let queries = dashboard_queries(&d);
    assert!(queries.len() >= 15, "{queries:?}");
    for p in d["panels"].as_array().unwrap() {
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        for t in p["targets"].as_array().unwrap() {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        }
    }
    for (title, id, expr) in &queries {
        // Every selector narrows to the chosen job and instances, so no
        // instance is hard-coded and none is left out.
        let selectors: Vec<&str> = expr.split('{').skip(1).collect();
        assert!(!selectors.is_empty(), "{title}/{id}: no selector: {expr}");
        for s in selectors {
            let s = s.split('}').next().unwrap();
            assert!(
                s.contains(r#"job=~"$job""#) && s.contains(r#"instance=~"$instance""#),
                "{title}/{id}: selector {{{s}}} lacks $job/$instance: {expr}"
            );
        }
        for metric in podns_names(expr) {
            assert!(exported(&metric), "{title}/{id}: podns exports no {metric}");
            assert!(
                expr.contains(&format!("{metric}{{")),
                "{title}/{id}: {metric} without a selector"
            );
        }
    }
    // The on-call questions the dashboard exists for, by the metric that
    // answers each.
    let all: String = queries.iter().map(|q| q.2.as_str()).collect();
    for needle in [
        "sum by (rcode) (rate(podns_dns_responses_total",
        "sum by (proto) (rate(podns_dns_requests_total",
        "histogram_quantile(0.99, sum by (le) (rate(podns_dns_request_duration_seconds_bucket",
        r#"rcode="SERVFAIL""#,
        "podns_dns_truncated_total",
        "histogram_quantile(0.99, sum by (le) (rate(podns_propagation_seconds_bucket",
        "podns_watch_restarts_total",
        r#"event="init""#,
        "podns_index_pods",
        "podns_index_names",
        "podns_rank_gang_complete_seconds_bucket",
        "podns_ready",
        "podns_dns_tcp_connections_refused_total",
        "podns_udp_receive_dropped_total",
        "podns_udp_receive_buffer_bytes",
        // Relays: connections (a node instance each), bytes, lists served,
        // denials.
        "podns_relay_connections",
        "podns_relay_watch_sent_bytes_total",
        "podns_relay_lists_total",
        "sum by (reason) (rate(podns_relay_requests_denied_total",
        // Node instances in aggregate: reading their relays, answered from
        // what they hold and forwarded (answered, stale, failed).
        "count(podns_node_relay_reachable",
        "sum by (result) (rate(podns_dns_forwarded_total",
        "podns_node_scope_namespaces",
        "podns_index_staleness_seconds",
    ] {
        assert!(all.contains(needle), "no panel queries {needle}");
    }
    let rows: BTreeSet<String> = dashboard_queries_by_row(&d)
        .into_iter()
        .map(|q| q.0)
        .collect();
    for row in [RELAY_ROW, NODE_ROW] {
        assert!(rows.contains(row), "no row {row:?} in {rows:?}");
    }
}

#[test]
fn promtool_checks_and_unit_tests_the_rules() {
    let Some(promtool) = find_tool("promtool") else {
        need("promtool (Debian package prometheus)", false);
        return;
    };
    let dir = repo().join("deploy/prometheus");
    let run = |args: &[&str], file: &Path| {
        let out = Command::new(&promtool)
            .args(args)
            .arg(file)
            .current_dir(&dir)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "promtool {args:?} {}:\n{text}",
            file.display()
        );
        text
    };
    let checked = run(&["check", "rules"], &dir.join("rules.yaml"));
    assert!(
        checked.contains(&format!("SUCCESS: {} rules found", alerts().len())),
        "{checked}"
    );
    // What the Prometheus Operator loads: the PrometheusRule's spec.
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("prometheusrule-spec.json");
    let crd = yaml("deploy/prometheus/prometheusrule.yaml");
    std::fs::write(&spec, serde_json::to_string(&crd["spec"]).unwrap()).unwrap();
    run(&["check", "rules"], &spec);
    let tested = run(&["test", "rules"], &dir.join("tests.yaml"));
    assert!(tested.contains("SUCCESS"), "{tested}");
}

// ---- a real Prometheus scraping `podns demo` ---------------------------------

/// One HTTP/1.0 request (no keep-alive, no chunking): (status, body), or
/// status 0 when the connection fails.
async fn http(addr: SocketAddr, method: &str, target: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return (0, String::new());
    };
    let req = format!("{method} {target} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return (0, String::new());
    }
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    if !matches!(read, Ok(Ok(_))) {
        return (0, String::new());
    }
    let out = String::from_utf8_lossy(&out);
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
}

/// Percent-encoding for a query-string value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instant query: the result's series, or Prometheus's error.
async fn query(prom: SocketAddr, q: &str) -> Result<Vec<Value>, String> {
    let (status, body) = http(prom, "GET", &format!("/api/v1/query?query={}", encode(q))).await;
    let v: Value = serde_json::from_str(&body).map_err(|_| format!("HTTP {status}: {body}"))?;
    if v["status"] != "success" {
        return Err(format!("HTTP {status}: {body}"));
    }
    Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// `data.<field>` of a Prometheus API listing (rules, alerts), or empty.
async fn api_list(prom: SocketAddr, path: &str, field: &str) -> Vec<Value> {
    let (_, body) = http(prom, "GET", path).await;
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    v["data"][field].as_array().cloned().unwrap_or_default()
}

fn value(series: &Value) -> f64 {
    series["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// The value of the series whose `label` is `want`, or NaN.
fn value_where(result: &[Value], label: &str, want: &str) -> f64 {
    result
        .iter()
        .find(|s| s["metric"][label] == want)
        .map_or(f64::NAN, value)
}

/// Sum of the /metrics samples of `name` whose labels contain every `labels`.
fn sample_sum(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
        })
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A query the dashboard sends, what its answer must show, and the last
/// answer that did not.
struct Probe {
    query: String,
    ok: Check,
    last: String,
}

type Check = Box<dyn Fn(&[Value]) -> bool>;

/// The probes whose query does not show what it must yet, each with its
/// last answer: Prometheus asked once for each.
async fn unmet(prom: SocketAddr, probes: Vec<Probe>) -> Vec<Probe> {
    let mut waiting = vec![];
    for mut p in probes {
        match query(prom, &p.query).await {
            Ok(result) if (p.ok)(&result) => continue,
            Ok(result) => p.last = serde_json::to_string(&result).unwrap(),
            Err(e) => p.last = e,
        }
        waiting.push(p);
    }
    waiting
}

/// Each probe's query and last answer, a pair of lines each.
fn shown(probes: &[Probe]) -> String {
    probes
        .iter()
        .map(|p| format!("{}\n    last: {}", p.query, p.last))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What a dashboard query must show about the traffic and the faults the
/// test caused, beyond "data, and every value a number".
fn expectation(title: &str, ref_id: &str, result: &[Value]) -> bool {
    let positive = |v: f64| v > 0.0;
    match (title, ref_id) {
        ("Queries/s by rcode", "A") => {
            positive(value_where(result, "rcode", "NOERROR"))
                && positive(value_where(result, "rcode", "NXDOMAIN"))
        }
        ("Queries/s by transport", "A") => {
            positive(value_where(result, "proto", "udp"))
                && positive(value_where(result, "proto", "tcp"))
        }
        // Truncated share of UDP answers.
        ("SERVFAIL and truncation (share)", "B") => result.iter().map(value).any(positive),
        ("Watch restarts", "A") => result.iter().any(|s| {
            s["metric"]["resource"] == "pods"
                && s["metric"]["reason"] == "expired_410"
                && value(s) > 0.0
        }),
        ("Lists started (initial and relists)", "A") => {
            positive(value_where(result, "resource", "pods"))
        }
        ("Pods in the index", "A") => result.iter().all(|s| value(s) == 576.0),
        ("Gangs completed (dashboard range)", "A") => result.iter().map(value).any(positive),
        _ => true,
    }
}

/// A Prometheus (Debian's) on 127.0.0.1, port 0, scraping each of
/// `targets` (job, address) every second and evaluating rules.yaml every
/// second.
async fn start_prometheus(
    bin: &Path,
    dir: &Path,
    targets: &[(&str, SocketAddr)],
) -> (Daemon, SocketAddr) {
    let rules = repo().join("deploy/prometheus/rules.yaml");
    let mut config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - {rules}\n\
         scrape_configs:\n",
        rules = rules.display()
    );
    for (job, target) in targets {
        config.push_str(&format!(
            "  - job_name: {job}\n    static_configs:\n      - targets: [\"{target}\"]\n"
        ));
    }
    let path = dir.join("prometheus.yml");
    std::fs::write(&path, config).unwrap();
    let mut prom = Daemon::spawn(
        "prometheus",
        Command::new(bin)
            .arg(format!("--config.file={}", path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg("--web.listen-address=127.0.0.1:0"),
        &dir.join("prometheus.log"),
    );
    // It logs the bound address: `msg="Listening on" address=127.0.0.1:N`.
    let addr = wait_for(
        "prometheus to log its address",
        Duration::from_secs(30),
        || {
            let log = prom.log_text();
            let addr = log
                .lines()
                .filter(|l| l.contains(r#"msg="Listening on""#))
                .find_map(|l| {
                    l.split("address=")
                        .nth(1)?
                        .split_whitespace()
                        .next()?
                        .parse()
                        .ok()
                });
            if addr.is_none()
                && let Ok(Some(status)) = prom.child.try_wait()
            {
                panic!("prometheus exited with {status}:\n{log}");
            }
            async move { addr.ok_or(log) }
        },
    )
    .await;
    (prom, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_queries_and_alerts_work_on_a_real_prometheus_scraping_the_demo() {
    let Some(prometheus_bin) = find_tool("prometheus") else {
        need("prometheus (Debian package prometheus)", false);
        return;
    };
    // Declared first, dropped last: both children die before it goes.
    let dir = tempfile::tempdir().unwrap();

    let mut demo_cmd = Command::new(PODNS_BIN);
    demo_cmd.args([
        "demo",
        "--dns-listen=127.0.0.1:0",
        "--admin-listen=127.0.0.1:0",
        "--api-listen=127.0.0.1:0",
    ]);
    let demo = spawn_serve(demo_cmd);
    let api: SocketAddr = demo
        .log
        .lock()
        .unwrap()
        .iter()
        .find_map(|l| {
            l.split("listening api http ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .expect("the demo logs its API address");
    let (dns, admin) = (demo.dns, demo.admin);
    // Ready as the demo itself waits for it: the last rank of each job
    // resolves.
    for last in [
        "bert-finetune-63.bert-finetune.ml.svc.cluster.local.",
        "llama-pretrain-workers-0-511.llama-pretrain.ml.svc.cluster.local.",
    ] {
        wait_for(last, Duration::from_secs(60), || async {
            let m = udp(dns, &query_msg(last, RecordType::A, Some(1232))).await;
            rcode(&m) == ResponseCode::NoError && !m.answers.is_empty()
        })
        .await;
    }

    let (prom, prom_addr) = start_prometheus(&prometheus_bin, dir.path(), &[(JOB, admin)]).await;
    wait_for("prometheus ready", Duration::from_secs(30), || async {
        http(prom_addr, "GET", "/-/ready").await.0 == 200
    })
    .await;

    // The traffic the DNS panels show: an answer, an NXDOMAIN, a 64-rank
    // set that does not fit 512 bytes of UDP, and the same over TCP.
    let rank = "bert-finetune-0.bert-finetune.ml.svc.cluster.local.";
    let missing = "bert-finetune-64.bert-finetune.ml.svc.cluster.local.";
    let gang = "bert-finetune.ml.svc.cluster.local.";
    assert_eq!(
        rcode(&udp(dns, &query_msg(rank, RecordType::A, Some(1232))).await),
        ResponseCode::NoError
    );
    assert_eq!(
        rcode(&udp(dns, &query_msg(missing, RecordType::A, Some(1232))).await),
        ResponseCode::NXDomain
    );
    let truncated = udp(dns, &query_msg(gang, RecordType::A, None)).await;
    assert!(truncated.metadata.truncation, "{truncated:?}");
    let full = tcp(dns, &query_msg(gang, RecordType::A, None)).await;
    assert_eq!(full.answers.len(), 64);
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = tokio::spawn({
        let stop = stop.clone();
        async move {
            while !stop.load(Ordering::Relaxed) {
                udp(dns, &query_msg(rank, RecordType::A, Some(1232))).await;
                udp(dns, &query_msg(missing, RecordType::A, Some(1232))).await;
                udp(dns, &query_msg(gang, RecordType::A, None)).await;
                tcp(dns, &query_msg(gang, RecordType::A, None)).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });

    // Prometheus holds the restart counters at 0 before the faults, so
    // increase() sees them grow.
    wait_for("a first scrape", Duration::from_secs(30), || async {
        let q = format!(r#"podns_watch_restarts_total{{job="{JOB}",resource="pods"}}"#);
        query(prom_addr, &q).await.is_ok_and(|r| !r.is_empty())
    })
    .await;

    // Three watch restarts: the simulator forgets its history, then drops
    // every watch, which resumes from a resourceVersion now too old (410)
    // and relists. Each waits for the relist before the next.
    let metrics = || async { admin_get(admin, "/metrics").await.1 };
    for round in 1..=3 {
        let listed = |m: &str| {
            sample_sum(
                m,
                "podns_watch_events_total",
                &[r#"resource="pods""#, r#"event="init_done""#],
            )
        };
        let before = listed(&metrics().await);
        for fault in ["compact", "drop-watches"] {
            let (status, body) = http(api, "POST", &format!("/sim/faults/{fault}")).await;
            assert_eq!(status, 200, "{fault}: {body}");
        }
        wait_for(
            &format!("watch restart {round} and its relist"),
            Duration::from_secs(30),
            || async {
                let m = metrics().await;
                let expired = sample_sum(
                    &m,
                    "podns_watch_restarts_total",
                    &[r#"resource="pods""#, r#"reason="expired_410""#],
                );
                expired >= f64::from(round) && listed(&m) > before
            },
        )
        .await;
    }
    // A gang restart (JobSet Recreate): a new generation of 512 ranks,
    // propagation samples and one more gang completion.
    let completed = |m: &str| sample_sum(m, "podns_rank_gang_complete_seconds_count", &[]);
    let before = completed(&metrics().await);
    let (status, body) = http(api, "POST", "/sim/jobs/ml/llama-pretrain/restart").await;
    assert_eq!(status, 200, "{body}");
    wait_for(
        "the gang to complete again",
        Duration::from_secs(60),
        || async { completed(&metrics().await) > before },
    )
    .await;

    // Every dashboard query, as Grafana would send it with job and
    // instance chosen, until each returns what it should.
    let instance = admin.to_string();
    let d = dashboard();
    // The node instances' row has its own test (a node instance against a
    // relay): the demo runs none.
    let mut probes: Vec<Probe> = dashboard_queries_by_row(&d)
        .into_iter()
        .filter(|(row, ..)| row != NODE_ROW)
        .map(|(_, title, id, expr)| Probe {
            query: substitute(&expr, JOB, &instance),
            ok: Box::new(move |r| {
                !r.is_empty()
                    && r.iter().all(|s| value(s).is_finite())
                    && expectation(&title, &id, r)
            }),
            last: String::new(),
        })
        .collect();
    // The variables' own queries, label_values(<selector>, <label>): the
    // selector finds this job and this instance under that label.
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] != "query" {
            continue;
        }
        let def = v["query"].as_str().unwrap();
        let (selector, label) = def
            .strip_prefix("label_values(")
            .and_then(|s| s.strip_suffix(')'))
            .and_then(|s| s.rsplit_once(','))
            .unwrap_or_else(|| panic!("variable {}: {def}", v["name"]));
        let label = label.trim().to_string();
        let want = if label == "job" {
            JOB.to_string()
        } else {
            instance.clone()
        };
        probes.push(Probe {
            query: format!(
                "count by ({label}) ({})",
                substitute(selector, JOB, &instance)
            ),
            ok: Box::new(move |r| r.iter().any(|s| s["metric"][&label] == want.as_str())),
            last: String::new(),
        });
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        probes = unmet(prom_addr, probes).await;
        if probes.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "dashboard queries without the expected data:\n{}",
            shown(&probes)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // The alert rules: loaded, evaluated without error against the real
    // series, and the three restarts put PodnsWatchesRestarting (more than
    // 2 in 10 minutes) in pending for the pods watch.
    let names: BTreeSet<String> = alerts().into_iter().map(|(n, _)| n).collect();
    wait_for(
        "every alert rule evaluated",
        Duration::from_secs(60),
        || async {
            let rules = api_list(prom_addr, "/api/v1/rules", "groups").await;
            let rules: Vec<Value> = rules
                .iter()
                .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
                .collect();
            for r in &rules {
                assert_ne!(r["health"], "err", "rule failed: {r}");
            }
            let loaded: BTreeSet<String> = rules
                .iter()
                .filter_map(|r| r["name"].as_str().map(str::to_string))
                .collect();
            assert!(
                loaded.is_empty() || loaded == names,
                "{loaded:?} != {names:?}"
            );
            !loaded.is_empty() && rules.iter().all(|r| r["health"] == "ok")
        },
    )
    .await;
    wait_for(
        "PodnsWatchesRestarting pending for the pods watch",
        Duration::from_secs(60),
        || async {
            api_list(prom_addr, "/api/v1/alerts", "alerts")
                .await
                .iter()
                .any(|a| {
                    a["labels"]["alertname"] == "PodnsWatchesRestarting"
                        && a["labels"]["resource"] == "pods"
                        && a["labels"]["instance"] == instance.as_str()
                        && (a["state"] == "pending" || a["state"] == "firing")
                })
        },
    )
    .await;
    // Nothing else is wrong with the demo (a debug build's relists may
    // well be slower than the propagation budget, so that one may pend).
    for a in api_list(prom_addr, "/api/v1/alerts", "alerts").await {
        let name = a["labels"]["alertname"].as_str().unwrap_or_default();
        assert!(
            ["PodnsWatchesRestarting", "PodnsPropagationSlow"].contains(&name),
            "unexpected alert: {a}"
        );
    }

    // The forward target's exposition, as promtool lints it.
    if let Some(promtool) = find_tool("promtool") {
        check_metrics(&promtool, "forward target", &metrics().await);
    }

    stop.store(true, Ordering::Relaxed);
    traffic.await.expect("the traffic task answers every query");
    drop(prom);
    drop(demo);
}

// ---- each role's exposition --------------------------------------------------

/// The series a node instance may export: docs/metrics.md "Series budget".
const NODE_SERIES_BUDGET: usize = 60;

/// The samples of an exposition (every line but comments): one a series.
fn samples(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// The metric families an exposition declares, with their types.
fn families(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_string(), kind.to_string()))
        .collect()
}

/// `promtool check metrics` on an exposition of `role`. promtool reads the
/// Prometheus text format only (prometheus/prometheus#8932 asks for
/// OpenMetrics); podns serves OpenMetrics, which names a counter's family
/// without `_total` (`# TYPE podns_dns_truncated counter`) and its sample
/// with it (`podns_dns_truncated_total 0`). Read as text, each counter's
/// samples are a family without help and type, and promtool says "no help
/// text" for each, and nothing else: this checks that. With each
/// counter's HELP and TYPE named as the text format names them (the one
/// difference between the two formats that podns's exposition has),
/// promtool must say nothing at all.
fn check_metrics(promtool: &Path, role: &str, text: &str) {
    use std::io::Write;
    let run = |input: &str| -> (bool, String) {
        let mut child = Command::new(promtool)
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), said)
    };
    let counters: BTreeSet<String> = families(text)
        .into_iter()
        .filter(|(_, kind)| kind == "counter")
        .map(|(name, _)| name)
        .collect();
    let with_samples: BTreeSet<String> = samples(text)
        .iter()
        .filter_map(|l| l.split(['{', ' ']).next())
        .filter_map(|n| n.strip_suffix("_total"))
        .filter(|n| counters.contains(*n))
        .map(|n| format!("{n}_total no help text"))
        .collect();
    assert!(!with_samples.is_empty(), "{role}: no counter in\n{text}");
    let (ok, said) = run(text);
    let complaints: BTreeSet<String> = said.lines().map(str::to_string).collect();
    assert!(
        !ok && complaints == with_samples,
        "{role}: promtool check metrics on OpenMetrics should complain of the counters' help only:\n{said}"
    );
    let text_format: String = text
        .lines()
        .map(|l| {
            for kind in ["# HELP ", "# TYPE "] {
                if let Some(rest) = l.strip_prefix(kind)
                    && let Some((name, tail)) = rest.split_once(' ')
                    && counters.contains(name)
                {
                    return format!("{kind}{name}_total {tail}\n");
                }
            }
            format!("{l}\n")
        })
        .collect();
    let (ok, said) = run(&text_format);
    assert!(
        ok && said.trim().is_empty(),
        "{role}: promtool check metrics:\n{said}"
    );
}

/// What a query of the dashboard's relay and node instance rows must show
/// with one relay and one node instance that reads it, answers what it
/// holds and forwards the rest.
fn node_expectation(title: &str, ref_id: &str, result: &[Value]) -> bool {
    let all = |want: f64| !result.is_empty() && result.iter().all(|s| value(s) == want);
    match (title, ref_id) {
        ("Relay connections and watches", _) => result.iter().map(value).any(|v| v >= 1.0),
        ("Node instances reading their relays", "A") => all(1.0),
        ("Node instances reading their relays", "B") => all(0.0),
        ("Node instances: answered from what they hold, forwarded", "A") => {
            result.iter().map(value).any(|v| v > 0.0)
        }
        ("Node instances: answered from what they hold, forwarded", "B") => {
            value_where(result, "result", "answered") > 0.0
        }
        ("Node instances' scope", "A") => all(1.0),
        // Bookmarks every minute at most: never near two.
        ("Node instances' staleness", _) => {
            result.iter().map(value).all(|v| (0.0..120.0).contains(&v))
        }
        _ => true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_instance_keeps_its_series_budget_and_each_role_passes_promtool() {
    use crate::relay::{env_with_relay, node_instance, node_of_pods, relay_client, wait_held};
    use crate::support::{create_job, create_service, fqdn, headless_json};
    let (env, _dir, kubeconfig) = env_with_relay(&[]).await;
    // The simulator fills nodes 8 pods at a time: `ml`'s on the first,
    // `other`'s on the next.
    create_job(&env.client, "ml", "train", 8, "indexed-job").await;
    create_job(&env.client, "other", "far", 8, "indexed-job").await;
    let relay = relay_client(&kubeconfig).await;
    node_of_pods(&relay, "other", 8).await;
    let node = node_of_pods(&relay, "ml", 8).await;
    let n = node_instance(&env, &kubeconfig, &node, &[]).await;
    wait_held(&n.table, &["ml"]).await;
    let (dns, admin) = (n.dns_addr, n.admin_addr);
    wait_for(
        "the node instance ready",
        Duration::from_secs(30),
        || async { admin_get(admin, "/readyz").await.0 == 200 },
    )
    .await;

    // What a node instance meets: a name it holds, one it does not have,
    // and one it forwards.
    let held = fqdn("train-0.train.ml.svc");
    let missing = fqdn("train-99.train.ml.svc");
    let far = fqdn("far-0.far.other.svc");
    let ask = move || {
        let (held, missing, far) = (held.clone(), missing.clone(), far.clone());
        async move {
            let here = udp(dns, &query_msg(&held, RecordType::A, Some(1232))).await;
            let none = udp(dns, &query_msg(&missing, RecordType::A, Some(1232))).await;
            let there = udp(dns, &query_msg(&far, RecordType::A, Some(1232))).await;
            (
                rcode(&here),
                rcode(&none),
                rcode(&there),
                there.answers.len(),
            )
        }
    };
    assert_eq!(
        ask().await,
        (
            ResponseCode::NoError,
            ResponseCode::NXDomain,
            ResponseCode::NoError,
            1
        )
    );
    let forwarded = |m: &str| sample_sum(m, "podns_dns_forwarded_total", &[r#"result="answered""#]);

    // Its series: within the budget, and those its alerts and the
    // dashboard read.
    let node_text = admin_get(admin, "/metrics").await.1;
    assert!(forwarded(&node_text) >= 1.0, "{node_text}");
    let node_series = samples(&node_text);
    eprintln!(
        "a node instance exports {} series:\n{}",
        node_series.len(),
        node_series.join("\n")
    );
    assert!(
        node_series.len() <= NODE_SERIES_BUDGET,
        "{} series, over the budget of {NODE_SERIES_BUDGET}:\n{node_text}",
        node_series.len()
    );
    let relay_text = admin_get(env.admin, "/metrics").await.1;
    let (node_families, relay_families) = (families(&node_text), families(&relay_text));
    // Every series a node instance's alerts read with increase() or
    // rate(), or compare, exists from the start (at 0 unless it moved).
    let mut wanted: Vec<(&str, String)> = vec![
        ("podns_node_relay_reachable", String::new()),
        ("podns_dns_responses_total", r#"rcode="SERVFAIL""#.into()),
        ("podns_watch_synced", r#"resource="pods""#.into()),
        ("podns_watch_synced", r#"resource="services""#.into()),
        ("podns_node_scope_namespaces", String::new()),
        ("podns_ready", String::new()),
    ];
    for r in m::NODE_RELAY_FAILURE_REASONS {
        wanted.push((
            "podns_node_relay_failures_total",
            format!(r#"reason="{r}""#),
        ));
    }
    for r in ["answered", "stale", "failed"] {
        wanted.push(("podns_dns_forwarded_total", format!(r#"result="{r}""#)));
    }
    for (name, labels) in &wanted {
        assert!(
            node_series.iter().any(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with(['{', ' ']))
                    && l.contains(labels.as_str())
            }),
            "a node instance lacks {name}{{{labels}}}:\n{node_text}"
        );
    }
    // Every metric of the alerts and of the dashboard is a family of one
    // role or the other; the node instances' row reads node instances'
    // families only, the relays' row relays' only; neither role exports
    // the other's own.
    let base = |name: &str| {
        ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name)
            .to_string()
    };
    let rules: Vec<String> = alerts()
        .iter()
        .map(|(_, r)| r["expr"].as_str().unwrap().to_string())
        .collect();
    let rules = rules.join("\n");
    let rows = dashboard_queries_by_row(&dashboard());
    for name in podns_names(&rules).iter().chain(
        rows.iter()
            .flat_map(|(_, _, _, expr)| podns_names(expr))
            .collect::<BTreeSet<_>>()
            .iter(),
    ) {
        let name = base(name);
        assert!(
            node_families.contains_key(&name) || relay_families.contains_key(&name),
            "neither role exports {name}"
        );
    }
    for (row, title, _, expr) in &rows {
        let (families, role) = match row.as_str() {
            NODE_ROW => (&node_families, "a node instance"),
            RELAY_ROW => (&relay_families, "a relay"),
            _ => continue,
        };
        for name in podns_names(expr) {
            let name = base(&name);
            assert!(
                families.contains_key(&name),
                "{title}: {role} exports no {name}"
            );
        }
    }
    for name in node_families.keys() {
        assert!(
            !name.starts_with("podns_relay_") && name != m::GANG_COMPLETE,
            "a node instance exports {name}"
        );
    }
    for name in relay_families.keys() {
        assert!(
            !name.starts_with("podns_node_") && name != m::DNS_FORWARDED,
            "a relay exports {name}"
        );
    }

    // promtool's lint of each role (the forward target's, a relay's
    // registry without its relay, in the demo's test).
    let Some(promtool) = find_tool("promtool") else {
        need("promtool (Debian package prometheus)", false);
        return;
    };
    check_metrics(&promtool, "node instance", &node_text);
    check_metrics(&promtool, "relay", &relay_text);

    // The dashboard's relay and node instance rows, on a real Prometheus
    // scraping both, while the node instance answers, forwards and sees
    // Services come.
    let Some(prometheus_bin) = find_tool("prometheus") else {
        need("prometheus (Debian package prometheus)", false);
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (prom, prom_addr) = start_prometheus(
        &prometheus_bin,
        dir.path(),
        &[(JOB, env.admin), ("podns-node", admin)],
    )
    .await;
    wait_for("prometheus ready", Duration::from_secs(30), || async {
        http(prom_addr, "GET", "/-/ready").await.0 == 200
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = tokio::spawn({
        let stop = stop.clone();
        async move {
            while !stop.load(Ordering::Relaxed) {
                ask().await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    let mut probes: Vec<Probe> = rows
        .into_iter()
        .filter(|(row, ..)| row == NODE_ROW || row == RELAY_ROW)
        .map(|(_, title, id, expr)| Probe {
            query: substitute(&expr, ".+", ".+"),
            ok: Box::new(move |r| {
                !r.is_empty()
                    && r.iter().all(|s| value(s).is_finite())
                    && node_expectation(&title, &id, r)
            }),
            last: String::new(),
        })
        .collect();
    assert!(
        probes.len() >= 10,
        "{} queries in the two rows",
        probes.len()
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    for round in 0.. {
        // A Service now and then: changes for the node instance to apply
        // (its propagation panel needs some in the window).
        if round % 4 == 0 {
            create_service(
                &env.client,
                headless_json("ml", &format!("s{round}"), "none"),
            )
            .await;
        }
        probes = unmet(prom_addr, probes).await;
        if probes.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "relay and node instance queries without the expected data:\n{}",
            shown(&probes)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // One node instance, ready and reading its relay: no alert of it, and
    // no relay alert.
    let node_instance = admin.to_string();
    for a in api_list(prom_addr, "/api/v1/alerts", "alerts").await {
        let name = a["labels"]["alertname"].as_str().unwrap_or_default();
        assert!(
            a["labels"]["instance"] != node_instance.as_str() && !name.contains("Relay"),
            "unexpected alert: {a}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    traffic.await.expect("the traffic task answers every query");
    drop(prom);
}
