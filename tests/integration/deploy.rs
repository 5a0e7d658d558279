//! deploy/: `kubectl kustomize` renders each mode (with the optional
//! Prometheus Operator component) and `helm template` renders the chart in
//! each mode; every result validates against the Kubernetes schemas
//! (`kubernetes-validate --strict`, offline, when installed) and the fields
//! that matter are checked by hand, the same checks for both: RBAC is
//! exactly get/list/watch on pods and services, the security context, the
//! probes, resources, the downward-API POD_IP, Prometheus (ServiceMonitor
//! and the PrometheusRule of the alerts), and podns's own flags parse with
//! the real CLI.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use serde_json::Value;

use crate::daemons::find_tool;
use crate::support::{need, output_ok};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The entry named `name` of the list `list` (a container's env or ports,
/// a pod's volumes); a panic that shows the list when there is none.
fn named<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .and_then(|l| l.iter().find(|e| e["name"] == name))
        .unwrap_or_else(|| panic!("no {name:?} in {list}"))
}

/// `kubectl kustomize DIR` as text, or None when kubectl is missing.
fn kustomize(dir: &Path) -> Option<String> {
    let kubectl = find_tool("kubectl");
    if !need("kubectl", kubectl.is_some()) {
        return None;
    }
    let kubectl = kubectl.unwrap();
    let out = output_ok(
        Command::new(kubectl).arg("kustomize").arg(dir),
        &format!("kubectl kustomize {}", dir.display()),
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

fn docs_of(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap()
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// `to` as a path relative to the directory `from` (kustomize takes no
/// absolute paths).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let (from, to) = (from.canonicalize().unwrap(), to.canonicalize().unwrap());
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut rel = PathBuf::new();
    for _ in from.components().skip(common) {
        rel.push("..");
    }
    to.components().skip(common).for_each(|c| rel.push(c));
    rel
}

/// One overlay with the optional Prometheus Operator component, as an
/// operator's own overlay adds it (deploy/README.md), or None when kubectl
/// is missing.
fn render(mode: &str) -> Option<(String, Vec<Value>)> {
    let dir = tempfile::tempdir().unwrap();
    let overlay = relative(dir.path(), &repo().join("deploy/overlays").join(mode));
    let component = relative(
        dir.path(),
        &repo().join("deploy/components/prometheus-operator"),
    );
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: podns\n\
             resources:\n  - {}\ncomponents:\n  - {}\n",
            overlay.display(),
            component.display()
        ),
    )
    .unwrap();
    let text = kustomize(dir.path())?;
    let docs = docs_of(&text);
    Some((text, docs))
}

/// The chart in one mode (`helm template`), after `helm lint`; None when
/// helm is not built (tests/cluster/build.sh helm) nor on PATH.
fn render_chart(mode: &str) -> Option<(String, Vec<Value>)> {
    let Some(helm) = helm() else {
        eprintln!(
            "skipping the Helm chart in {mode} mode: no helm (build it with tests/cluster/build.sh helm, or set PODNS_HELM)"
        );
        return None;
    };
    let chart = repo().join("deploy/helm/podns");
    let set = [
        format!("mode={mode}"),
        "prometheusOperator.enabled=true".into(),
        "namespace.create=true".into(),
    ]
    .join(",");
    output_ok(
        Command::new(&helm)
            .args(["lint", "--strict", "--set", &set])
            .arg(&chart),
        &format!("helm lint {mode}"),
    );
    let out = output_ok(
        Command::new(&helm)
            .args(["template", "podns", "--namespace", "podns", "--set", &set])
            .arg(&chart),
        &format!("helm template {mode}"),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let docs = docs_of(&text);
    Some((text, docs))
}

/// helm: `$PODNS_HELM`, tests/cluster/build.sh's, or on PATH.
fn helm() -> Option<PathBuf> {
    std::env::var_os("PODNS_HELM")
        .map(PathBuf::from)
        .or_else(|| {
            let built = std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/podns-cluster/bin/helm"))?;
            built.exists().then_some(built)
        })
        .or_else(|| find_tool("helm"))
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn one<'a>(docs: &'a [Value], k: &str) -> &'a Value {
    let v = kind(docs, k);
    assert_eq!(v.len(), 1, "exactly one {k}");
    v[0]
}

fn strs(v: &Value) -> Vec<String> {
    let mut s: Vec<String> = v
        .as_array()
        .unwrap_or_else(|| panic!("a list: {v:?}"))
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    s.sort();
    s
}

/// `kubernetes-validate --strict` on the rendered text, offline (its
/// schemas ship in the package). Returns false when it is not installed.
fn schema_validate(mode: &str, text: &str) -> bool {
    let Some(tool) = find_tool("kubernetes-validate") else {
        eprintln!("kubernetes-validate not installed: {mode} checked by hand only");
        return false;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("{mode}.yaml"));
    std::fs::write(&file, text).unwrap();
    output_ok(
        Command::new(tool)
            .args(["--strict", "--quiet", "--no-warn", "-k", "1.32.0"])
            .arg(&file),
        &format!("{mode} does not validate"),
    );
    true
}

#[derive(Parser)]
struct Podns {
    #[command(subcommand)]
    command: podns::cli::Command,
}

/// Checks both modes share: RBAC, identity, metrics, and the podns
/// container's security, probes, resources and flags.
fn common(docs: &[Value], pod: &Value, admin_port: u64, binds_53: bool) {
    // RBAC: exactly get/list/watch on pods and services, on batch Jobs
    // for the rank view, on EndpointSlices for Services without a selector,
    // and on Nodes and ServiceCIDRs for the reverse zones, nothing else.
    let role = one(docs, "ClusterRole");
    let rules = role["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 5, "five rules: {rules:?}");
    assert_eq!(strs(&rules[0]["apiGroups"]), [""]);
    assert_eq!(strs(&rules[0]["resources"]), ["pods", "services"]);
    assert_eq!(strs(&rules[0]["verbs"]), ["get", "list", "watch"]);
    assert!(rules[0].get("resourceNames").is_none());
    assert_eq!(strs(&rules[1]["apiGroups"]), ["batch"]);
    assert_eq!(strs(&rules[1]["resources"]), ["jobs"]);
    assert_eq!(strs(&rules[1]["verbs"]), ["get", "list", "watch"]);
    assert!(rules[1].get("resourceNames").is_none());
    for (rule, group, resource) in [
        (&rules[2], "discovery.k8s.io", "endpointslices"),
        (&rules[3], "", "nodes"),
        (&rules[4], "networking.k8s.io", "servicecidrs"),
    ] {
        assert_eq!(strs(&rule["apiGroups"]), [group]);
        assert_eq!(strs(&rule["resources"]), [resource]);
        assert_eq!(strs(&rule["verbs"]), ["get", "list", "watch"]);
        assert!(rule.get("resourceNames").is_none());
    }
    // Learning the reverse zones: no --reverse-cidr pins them.
    assert!(
        !pod["spec"]["containers"][0]["args"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a.as_str().is_some_and(|a| a.starts_with("--reverse-cidr"))),
        "the manifests learn the reverse zones"
    );
    let binding = one(docs, "ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let sa = one(docs, "ServiceAccount");
    assert_eq!(binding["subjects"][0]["kind"], "ServiceAccount");
    assert_eq!(binding["subjects"][0]["name"], sa["metadata"]["name"]);
    assert_eq!(
        binding["subjects"][0]["namespace"],
        sa["metadata"]["namespace"]
    );
    assert_eq!(pod["spec"]["serviceAccountName"], sa["metadata"]["name"]);
    assert!(
        kind(docs, "Role").is_empty() && kind(docs, "RoleBinding").is_empty(),
        "no other grants"
    );

    // Prometheus: annotations and a ServiceMonitor on a Service that
    // selects these pods by a named port.
    let ann = &pod["metadata"]["annotations"];
    assert_eq!(ann["prometheus.io/scrape"], "true");
    assert_eq!(ann["prometheus.io/port"], admin_port.to_string());
    let sm = one(docs, "ServiceMonitor");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    // Alerts: the PrometheusRule renders with exactly the groups of the
    // plain rule file promtool tests (tests/integration/prometheus.rs).
    let rule = one(docs, "PrometheusRule");
    let plain: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("deploy/prometheus/rules.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        rule["spec"], plain,
        "rendered PrometheusRule differs from rules.yaml: run deploy/prometheus/generate.sh"
    );
    let metrics_svc = kind(docs, "Service")
        .into_iter()
        .find(|s| s["metadata"]["name"] == "podns-metrics")
        .expect("metrics Service");
    for (k, v) in metrics_svc["spec"]["selector"].as_object().unwrap() {
        assert_eq!(
            &pod["metadata"]["labels"][k], v,
            "metrics Service selects the pods"
        );
    }

    let spec = &pod["spec"];
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let containers = spec["containers"].as_array().unwrap();
    let c = containers
        .iter()
        .find(|c| c["name"] == "podns")
        .expect("podns container");
    let sc = &c["securityContext"];
    let non_root = sc["runAsNonRoot"] == true || spec["securityContext"]["runAsNonRoot"] == true;
    assert!(non_root, "runAsNonRoot");
    let uid = sc["runAsUser"]
        .as_u64()
        .or(spec["securityContext"]["runAsUser"].as_u64());
    assert!(uid.is_some_and(|u| u != 0), "a non-zero uid");
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(strs(&sc["capabilities"]["drop"]), ["ALL"]);
    let added = sc["capabilities"].get("add").map(strs).unwrap_or_default();
    if binds_53 {
        assert_eq!(added, ["NET_BIND_SERVICE"]);
    } else {
        assert!(added.is_empty(), "no capability when not binding 53");
    }
    assert!(sc.get("privileged").is_none_or(|p| *p == false));

    // Probes on the admin port.
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        let port_ok =
            get["port"].as_u64() == Some(admin_port)
                || get["port"].as_str().is_some_and(|name| {
                    c["ports"].as_array().unwrap().iter().any(|p| {
                        p["name"] == name && p["containerPort"].as_u64() == Some(admin_port)
                    })
                });
        assert!(port_ok, "{probe} on the admin port {admin_port}: {get:?}");
        // One slow or lost answer never fails a probe: it takes at least
        // two in a row, each given a second or more.
        let (threshold, timeout) = (
            c[probe]["failureThreshold"].as_u64().unwrap_or(3),
            c[probe]["timeoutSeconds"].as_u64().unwrap_or(1),
        );
        assert!(threshold >= 2, "{probe}: failureThreshold {threshold}");
        assert!(timeout >= 2, "{probe}: timeoutSeconds {timeout}");
    }
    // Liveness gives up later than readiness: a slow replica leaves the
    // Service before it is restarted.
    let window = |p: &str| {
        c[p]["periodSeconds"].as_u64().unwrap_or(10)
            * c[p]["failureThreshold"].as_u64().unwrap_or(3)
    };
    assert!(window("livenessProbe") > window("readinessProbe"));
    // Resources: requests and a memory limit.
    let r = &c["resources"];
    for (section, key) in [
        ("requests", "cpu"),
        ("requests", "memory"),
        ("limits", "memory"),
    ] {
        assert!(r[section][key].is_string(), "resources.{section}.{key}");
    }
    // POD_IP from the downward API.
    let pod_ip = named(&c["env"], "POD_IP");
    assert_eq!(pod_ip["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");

    // The flags parse with podns's own CLI ($(POD_IP) as the kubelet expands it).
    let mut argv = vec!["podns".to_string()];
    argv.extend(
        strs_in_order(&c["args"])
            .into_iter()
            .map(|a| a.replace("$(POD_IP)", "10.0.0.7")),
    );
    let parsed = Podns::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let podns::cli::Command::Serve(args) = parsed.command else {
        panic!("the container runs podns serve: {argv:?}");
    };
    let args = args.config();
    podns_server::serve::validate(&args).unwrap();
    assert_eq!(args.admin_listen.port() as u64, admin_port);
    assert_eq!(
        args.dns_listen.port() == 53,
        binds_53,
        "{}",
        args.dns_listen
    );
}

fn strs_in_order(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn forward_target_renders_and_validates() {
    let Some((text, docs)) = render("forward-target") else {
        return;
    };
    schema_validate("forward-target", &text);
    check_forward_target(&docs);
    // The Corefile of (b) forwards the zone and keeps denials ≤ 1 s.
    let corefile = std::fs::read_to_string(repo().join("deploy/coredns/Corefile.all")).unwrap();
    assert!(corefile.contains("\ncluster.local:53 "));
    assert!(corefile.contains("forward . PODNS_SERVICE_IP:53"));
    assert!(corefile.contains("denial 9984 1 0"));
}

#[test]
fn helm_chart_renders_and_validates_in_both_modes() {
    for mode in ["forward-target", "daemonset"] {
        let Some((text, docs)) = render_chart(mode) else {
            return;
        };
        schema_validate(&format!("helm-{mode}"), &text);
        if mode == "daemonset" {
            check_chart_daemonset(&docs);
        } else {
            check_forward_target(&docs);
        }
    }
}

/// `kubectl apply -k deploy/base` (and each overlay) needs no CRD: the
/// Prometheus Operator's objects come only with the component.
#[test]
fn the_base_and_overlays_need_no_prometheus_operator() {
    for dir in [
        "deploy/base",
        "deploy/overlays/forward-target",
        "deploy/overlays/daemonset",
    ] {
        let Some(text) = kustomize(&repo().join(dir)) else {
            return;
        };
        for d in docs_of(&text) {
            let api = d["apiVersion"].as_str().unwrap_or_default();
            assert!(
                !api.starts_with("monitoring.coreos.com/"),
                "{dir} renders a {} of the Prometheus Operator",
                d["kind"]
            );
        }
    }
}

/// The images of every container of every workload, init containers too.
fn container_images(docs: &[Value]) -> Vec<String> {
    docs.iter()
        .filter(|d| ["Deployment", "DaemonSet"].contains(&d["kind"].as_str().unwrap_or_default()))
        .flat_map(|d| {
            let spec = &d["spec"]["template"]["spec"];
            let list = |k: &str| spec[k].as_array().cloned().unwrap_or_default();
            list("initContainers").into_iter().chain(list("containers"))
        })
        .map(|c| c["image"].as_str().unwrap().to_string())
        .collect()
}

/// Every workload of both modes, kustomize and Helm, takes podns's image
/// from the one place that names the registry: the component
/// deploy/components/image for the overlays, `image.registry` for the
/// chart (deploy/README.md "Images"). None names a bare `podns…`, which a
/// runtime would pull from Docker Hub; the tag is this version.
#[test]
fn the_manifests_name_podns_registry_in_one_place() {
    let version = env!("CARGO_PKG_VERSION");
    let component: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("deploy/components/image/kustomization.yaml"))
            .unwrap(),
    )
    .unwrap();
    let image = &component["images"][0];
    assert_eq!(image["name"], "podns");
    assert_eq!(
        image["newTag"], version,
        "the overlays' tag is this version"
    );
    let name = image["newName"].as_str().unwrap();
    assert!(
        name.split('/').next().unwrap().contains('.'),
        "{name}: the overlays name a registry host"
    );
    // The sample training pod (not rendered) says the same.
    let sample: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("deploy/overlays/daemonset/sample-training-pod.yaml"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        sample["spec"]["initContainers"][0]["image"],
        format!("{name}:{version}")
    );
    let podns = |images: Vec<String>| -> Vec<String> {
        images
            .into_iter()
            .filter(|i| !i.starts_with("busybox"))
            .collect()
    };
    for mode in ["forward-target", "daemonset"] {
        let kustomization = repo().join("deploy/overlays").join(mode);
        let text = std::fs::read_to_string(kustomization.join("kustomization.yaml")).unwrap();
        assert!(
            !text.contains("\nimages:"),
            "{mode} names an image of its own"
        );
        let Some(text) = kustomize(&kustomization) else {
            return;
        };
        let images = podns(container_images(&docs_of(&text)));
        assert!(!images.is_empty(), "{mode}: no podns container");
        for i in images {
            assert_eq!(i, format!("{name}:{version}"), "{mode}");
        }
    }

    let Some(helm) = helm() else {
        eprintln!(
            "skipping the chart's image: no helm (tests/cluster/build.sh helm, or PODNS_HELM)"
        );
        return;
    };
    let chart = repo().join("deploy/helm/podns");
    let meta: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(chart.join("Chart.yaml")).unwrap())
            .unwrap();
    assert_eq!(meta["appVersion"], version);
    let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    for (set, want) in [
        (String::new(), format!("registry.invalid/podns:{version}")),
        (
            ",image.registry=127.0.0.1:5000/ml/".into(),
            format!("127.0.0.1:5000/ml/podns:{version}"),
        ),
        (
            format!(
                ",image.registry=,image.repository=docker.io/library/podns,image.digest={digest}"
            ),
            format!("docker.io/library/podns:{version}@{digest}"),
        ),
    ] {
        for mode in ["forward-target", "daemonset"] {
            let out = output_ok(
                Command::new(&helm)
                    .args(["template", "podns", "--set", &format!("mode={mode}{set}")])
                    .arg(&chart),
                &format!("helm template {mode}{set}"),
            );
            let images = podns(container_images(&docs_of(
                &String::from_utf8(out.stdout).unwrap(),
            )));
            assert!(!images.is_empty(), "{mode}: no podns container");
            for i in images {
                assert_eq!(i, want, "{mode}{set}");
            }
        }
    }
}

/// The chart's schema rejects what the API server would (a memory limit
/// of `abc`, a malformed digest) before anything is rendered, and accepts
/// the quantities Kubernetes writes.
#[test]
fn the_charts_schema_rejects_bad_quantities_and_digests() {
    let Some(helm) = helm() else {
        eprintln!(
            "skipping the chart's schema: no helm (tests/cluster/build.sh helm, or PODNS_HELM)"
        );
        return;
    };
    let lint = |set: &str| {
        Command::new(&helm)
            .args(["lint", "--strict", "--set", set])
            .arg(repo().join("deploy/helm/podns"))
            .output()
            .unwrap()
    };
    for bad in [
        "resources.limits.memory=abc",
        "resources.requests.cpu=1x",
        "daemonset.resources.limits.memory=-1Gi",
        "image.digest=sha256:abc",
        "daemonset.linkLocal.digest=latest",
        "daemonset.stateDir.digest=latest",
    ] {
        let out = lint(bad);
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad} passed: {text}");
        let key = bad.split('=').next().unwrap().replace('.', "/");
        assert!(text.contains(&key), "{bad}: the error names {key}: {text}");
    }
    for good in [
        "resources.limits.memory=384Mi",
        "resources.requests.cpu=100m",
        "resources.requests.cpu=0.5",
        "daemonset.resources.limits.memory=1G",
        "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    ] {
        let out = lint(good);
        assert!(
            out.status.success(),
            "{good}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// The chart's schema accepts exactly the words podns accepts.
#[test]
fn the_charts_schema_knows_podns_words() {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("deploy/helm/podns/values.schema.json")).unwrap(),
    )
    .unwrap();
    let words = |key: &str| strs(&schema["properties"][key]["enum"]);
    let sorted = |w: &[&str]| {
        let mut v: Vec<String> = w.iter().map(|s| s.to_string()).collect();
        v.sort();
        v
    };
    use podns_server::index::{Duplicates, Hostnames, Publish};
    assert_eq!(words("publish"), sorted(Publish::NAMES));
    assert_eq!(words("hostnames"), sorted(Hostnames::NAMES));
    assert_eq!(words("duplicateHostnames"), sorted(Duplicates::NAMES));
    // The chart's copy of the alerts is the one promtool tests.
    assert_eq!(
        std::fs::read_to_string(repo().join("deploy/helm/podns/files/rules.yaml")).unwrap(),
        std::fs::read_to_string(repo().join("deploy/prometheus/rules.yaml")).unwrap(),
        "run deploy/prometheus/generate.sh"
    );
}

/// The forward-target mode, however rendered.
fn check_forward_target(docs: &[Value]) {
    let dep = one(docs, "Deployment");
    assert!(dep["spec"]["replicas"].as_u64().unwrap() >= 2);
    let pod = &dep["spec"]["template"];
    common(docs, pod, 9153, false);
    let spec = &pod["spec"];
    assert!(
        spec["affinity"]["podAntiAffinity"].is_object(),
        "pod anti-affinity"
    );
    assert!(
        !spec["topologySpreadConstraints"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert!(spec.get("hostNetwork").is_none_or(|h| *h == false));
    // PDB and the DNS Service select these pods.
    let labels = &pod["metadata"]["labels"];
    let pdb = one(docs, "PodDisruptionBudget");
    for (k, v) in pdb["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&labels[k], v);
    }
    let svc = kind(docs, "Service")
        .into_iter()
        .find(|s| s["metadata"]["name"] == "podns")
        .expect("DNS Service");
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    for (k, v) in svc["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&labels[k], v);
    }
    let c = &spec["containers"][0];
    let mut protos = vec![];
    for p in svc["spec"]["ports"].as_array().unwrap() {
        assert_eq!(p["port"].as_u64(), Some(53));
        let target = p["targetPort"].as_str().unwrap();
        let cp = named(&c["ports"], target);
        assert_eq!(cp["protocol"], p["protocol"]);
        assert_eq!(cp["containerPort"].as_u64(), Some(5353));
        protos.push(p["protocol"].as_str().unwrap().to_string());
    }
    protos.sort();
    assert_eq!(protos, ["TCP", "UDP"]);
    let ns = one(docs, "Namespace");
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
}

#[test]
fn daemonset_renders_and_validates() {
    let Some((text, docs)) = render("daemonset") else {
        return;
    };
    let sample = std::fs::read_to_string(repo().join(Path::new(
        "deploy/overlays/daemonset/sample-training-pod.yaml",
    )))
    .unwrap();
    if schema_validate("daemonset", &text) {
        schema_validate("sample-training-pod", &sample);
    }
    check_daemonset(&docs);
    sample_pod_waits(&sample);
}

/// The node-local DaemonSet, however rendered.
fn check_node_local(docs: &[Value]) -> Vec<String> {
    let ds = one(docs, "DaemonSet");
    let pod = &ds["spec"]["template"];
    let spec = &pod["spec"];
    assert_eq!(spec["priorityClassName"], "system-node-critical");
    assert_eq!(spec["hostNetwork"], true);
    assert_eq!(spec["dnsPolicy"], "ClusterFirstWithHostNet");
    let args = strs_in_order(&spec["containers"][0]["args"]);
    assert!(args.contains(&"--dns-listen=169.254.20.11:53".to_string()));
    let ns = one(docs, "Namespace");
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "privileged",
        "hostNetwork is outside baseline"
    );
    args
}

/// The chart's DaemonSet mode: the overlay's two tiers under the same names
/// (release `podns` in namespace `podns`), so the overlay's checks; then
/// the relays as the forward-target mode's Deployment, and the wiring
/// between the tiers that the chart templates from its values.
fn check_chart_daemonset(docs: &[Value]) {
    check_daemonset(docs);
    // The relay tier alone (the node tier's objects and the TokenReview
    // grant set aside) has the forward-target mode's RBAC, identity,
    // metrics and container, with its relay flags parsing and validating.
    let relays: Vec<Value> = docs.iter().filter(|d| !node_tier(d)).cloned().collect();
    let dep = one(&relays, "Deployment");
    common(&relays, &dep["spec"]["template"], 9153, false);
    check_chart_relay_wiring(docs);
}

/// The objects the chart's daemonset mode adds to the forward-target ones.
fn node_tier(d: &Value) -> bool {
    let name = d["metadata"]["name"].as_str().unwrap_or_default();
    match d["kind"].as_str().unwrap_or_default() {
        "DaemonSet" | "ConfigMap" => true,
        "ClusterRole" | "ClusterRoleBinding" => name == "podns-relay" || name == "podns-node",
        "ServiceAccount" => name == "podns-node",
        _ => false,
    }
}

/// The container's volume mounted at `path`: the volume's definition.
fn volume_at<'a>(pod: &'a Value, path: &str) -> &'a Value {
    let c = &pod["spec"]["containers"][0];
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap_or_else(|| panic!("volumeMounts: {c:?}"))
        .iter()
        .find(|m| m["mountPath"] == path)
        .unwrap_or_else(|| panic!("a volume at {path}"));
    assert_eq!(mount["readOnly"], true, "{path} read-only");
    named(&pod["spec"]["volumes"], mount["name"].as_str().unwrap())
}

/// What ties the chart's tiers together: one Secret, the relay port, the
/// kubeconfig's paths and the TokenReview grant's subject.
fn check_chart_relay_wiring(docs: &[Value]) {
    let dep = one(docs, "Deployment");
    let relay_pod = &dep["spec"]["template"];
    let relay_c = &relay_pod["spec"]["containers"][0];
    let relay_args = strs_in_order(&relay_c["args"]);
    let flag = |name: &str| {
        relay_args
            .iter()
            .find_map(|a| a.strip_prefix(&format!("--{name}=")))
            .unwrap_or_else(|| panic!("--{name}: {relay_args:?}"))
            .to_string()
    };

    // The relays serve the Secret's certificate, mounted from it.
    let (cert, key) = (flag("relay-tls-cert"), flag("relay-tls-key"));
    let dir = Path::new(&cert).parent().unwrap();
    assert_eq!(Path::new(&key).parent().unwrap(), dir);
    let tls = volume_at(relay_pod, dir.to_str().unwrap());
    let secret = tls["secret"]["secretName"].as_str().unwrap();
    assert_eq!(secret, "podns-relay-tls");
    assert_eq!(Path::new(&cert).file_name().unwrap(), "tls.crt");
    assert_eq!(Path::new(&key).file_name().unwrap(), "tls.key");

    // The relay port: the flag, the container port, the Service's port.
    let listen: std::net::SocketAddr = flag("relay-listen").parse().unwrap();
    let cport = named(&relay_c["ports"], "relay");
    assert_eq!(cport["containerPort"].as_u64(), Some(listen.port().into()));
    let svc = kind(docs, "Service")
        .into_iter()
        .find(|s| s["metadata"]["name"] == "podns")
        .expect("the podns Service");
    let sport = named(&svc["spec"]["ports"], "relay");
    assert_eq!(sport["port"].as_u64(), Some(6443));
    assert_eq!(sport["targetPort"], "relay");
    // The Service still answers DNS on 53 (node instances forward there).
    for proto in ["UDP", "TCP"] {
        assert!(
            svc["spec"]["ports"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["port"].as_u64() == Some(53) && p["protocol"] == proto),
            "DNS on 53/{proto}"
        );
    }
    // PDB selects the relays.
    let pdb = one(docs, "PodDisruptionBudget");
    for (k, v) in pdb["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&relay_pod["metadata"]["labels"][k], v);
    }

    // The TokenReview grant goes to the relays' ServiceAccount.
    let grant = kind(docs, "ClusterRoleBinding")
        .into_iter()
        .find(|b| b["roleRef"]["name"] == "podns-relay")
        .expect("the podns-relay binding");
    assert_eq!(grant["roleRef"]["kind"], "ClusterRole");
    let subjects = grant["subjects"].as_array().unwrap();
    assert_eq!(subjects.len(), 1, "{subjects:?}");
    assert_eq!(subjects[0]["kind"], "ServiceAccount");
    assert_eq!(subjects[0]["name"], relay_pod["spec"]["serviceAccountName"]);
    assert_eq!(subjects[0]["namespace"], "podns");
    let role = kind(docs, "ClusterRole")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "podns-relay")
        .expect("the podns-relay ClusterRole");
    let rules = role["rules"].as_array().unwrap();
    assert_eq!(
        rules.len(),
        2,
        "TokenReviews and SubjectAccessReviews: {rules:?}"
    );
    assert_eq!(strs(&rules[0]["apiGroups"]), ["authentication.k8s.io"]);
    assert_eq!(strs(&rules[0]["resources"]), ["tokenreviews"]);
    assert_eq!(strs(&rules[0]["verbs"]), ["create"]);
    assert_eq!(strs(&rules[1]["apiGroups"]), ["authorization.k8s.io"]);
    assert_eq!(strs(&rules[1]["resources"]), ["subjectaccessreviews"]);
    assert_eq!(strs(&rules[1]["verbs"]), ["create"]);
    let node_sa = kind(docs, "ServiceAccount")
        .into_iter()
        .find(|s| s["metadata"]["name"] == "podns-node")
        .expect("the podns-node ServiceAccount");
    assert_eq!(node_sa["metadata"]["namespace"], "podns");

    // Node instances: their own node's name, a token for the relays'
    // audience only (no API-server token), and /etc/podns/relay holding
    // the ConfigMap's kubeconfig beside the Secret's ca.crt, the paths the
    // kubeconfig names.
    let ds = one(docs, "DaemonSet");
    let node_pod = &ds["spec"]["template"];
    assert_eq!(
        node_pod["spec"]["automountServiceAccountToken"], false,
        "node instances need no API-server token"
    );
    let audience = relay_args
        .iter()
        .find_map(|a| a.strip_prefix("--relay-audience="))
        .unwrap_or(podns_server::relay::http::auth::AUDIENCE);
    let token = volume_at(node_pod, "/var/run/secrets/podns/relay");
    let projected = &token["projected"]["sources"][0]["serviceAccountToken"];
    assert_eq!(projected["audience"], audience, "{token:?}");
    assert_eq!(projected["path"], "token");
    assert!(
        projected["expirationSeconds"]
            .as_u64()
            .is_some_and(|s| s >= 600)
    );
    let node_c = &node_pod["spec"]["containers"][0];
    let node_name = named(&node_c["env"], "NODE_NAME");
    assert_eq!(
        node_name["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );
    let relay_vol = volume_at(node_pod, "/etc/podns/relay");
    let sources = relay_vol["projected"]["sources"].as_array().unwrap();
    let cm = one(docs, "ConfigMap");
    assert!(
        sources
            .iter()
            .any(|s| s["configMap"]["name"] == cm["metadata"]["name"]
                && s["configMap"].get("items").is_none()),
        "the kubeconfig ConfigMap, whole: {sources:?}"
    );
    let ca = sources
        .iter()
        .find(|s| s["secret"]["name"] == secret)
        .unwrap_or_else(|| panic!("the Secret {secret}: {sources:?}"));
    assert_eq!(ca["secret"]["items"][0]["key"], "ca.crt");
    assert_eq!(ca["secret"]["items"][0]["path"], "ca.crt");
    assert_eq!(cm["metadata"]["namespace"], "podns");
    let kc: Value = serde_saphyr::from_str(cm["data"]["kubeconfig"].as_str().unwrap()).unwrap();
    let cluster = &kc["clusters"][0]["cluster"];
    assert_eq!(cluster["server"], "https://podns.podns.svc:6443");
    assert_eq!(cluster["certificate-authority"], "/etc/podns/relay/ca.crt");
    assert_eq!(
        kc["users"][0]["user"]["tokenFile"],
        "/var/run/secrets/podns/relay/token"
    );
    assert_eq!(kc["current-context"], kc["contexts"][0]["name"]);
    assert_eq!(
        kc["contexts"][0]["context"]["cluster"],
        kc["clusters"][0]["name"]
    );
    assert_eq!(kc["contexts"][0]["context"]["user"], kc["users"][0]["name"]);
}

/// The kustomize DaemonSet mode: relays (the forward-target replicas with
/// --relay-listen) and node instances that read them, parsed by podns's own
/// CLI, with no RBAC on the API server for the node instances.
fn check_daemonset(docs: &[Value]) {
    let args = check_node_local(docs);
    let mut argv = vec!["podns".to_string()];
    argv.extend(args.iter().map(|a| {
        a.replace("$(NODE_NAME)", "node-1")
            .replace("$(POD_IP)", "10.0.0.1")
    }));
    let parsed = Podns::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let podns::cli::Command::Serve(serve) = parsed.command else {
        panic!("the DaemonSet runs podns serve: {argv:?}");
    };
    let cfg = serve.config();
    let node = cfg.node.expect("a node instance");
    assert_eq!(node.node, "node-1");
    assert_eq!(
        cfg.kubeconfig.as_deref(),
        Some(std::path::Path::new("/etc/podns/relay/kubeconfig"))
    );
    let ds = one(docs, "DaemonSet");
    let sa = ds["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .unwrap();
    assert_eq!(sa, "podns-node");
    // Node instances hold one permission, the relay's own: `get` on
    // relays.dns.podns.io, which the relays check for every client.
    let perm = podns_server::relay::http::auth::PERMISSION;
    let roles = kind(docs, "ClusterRole");
    for b in kind(docs, "ClusterRoleBinding")
        .into_iter()
        .chain(kind(docs, "RoleBinding"))
    {
        if !b["subjects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == sa)
        {
            continue;
        }
        assert_eq!(b["kind"], "ClusterRoleBinding", "{b:?}");
        let role = roles
            .iter()
            .find(|r| r["metadata"]["name"] == b["roleRef"]["name"])
            .expect("the node instances' ClusterRole");
        let rules = role["rules"].as_array().unwrap();
        assert_eq!(rules.len(), 1, "only the relay's permission: {rules:?}");
        assert_eq!(strs(&rules[0]["apiGroups"]), [perm.group]);
        assert_eq!(strs(&rules[0]["resources"]), [perm.resource]);
        assert_eq!(strs(&rules[0]["verbs"]), [perm.verb]);
    }
    // The relays: the forward-target Deployment serving --relay-listen
    // over TLS from the Secret, and allowed TokenReviews.
    let dep = one(docs, "Deployment");
    let relay_args = strs_in_order(&dep["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(relay_args.contains(&"--relay-listen=0.0.0.0:6443".to_string()));
    assert!(
        relay_args
            .iter()
            .any(|a| a.starts_with("--relay-tls-cert="))
    );
    assert!(roles.iter().any(|r| {
        r["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|rule| rule["resources"][0] == "tokenreviews" && rule["verbs"][0] == "create")
    }));
    let kc = one(docs, "ConfigMap")["data"]["kubeconfig"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(kc.contains("server: https://podns.podns.svc:6443"), "{kc}");
    assert!(kc.contains("tokenFile: /var/run/secrets/podns/relay/token"));
    let ds_spec = &ds["spec"]["template"]["spec"];
    assert_eq!(ds_spec["automountServiceAccountToken"], false);
    let token = volume_at(&ds["spec"]["template"], "/var/run/secrets/podns/relay");
    assert_eq!(
        token["projected"]["sources"][0]["serviceAccountToken"]["audience"],
        podns_server::relay::http::auth::AUDIENCE
    );
}

/// The sample training pod sends its lookups to the node-local address.
fn sample_pod_waits(sample: &str) {
    let pod: Value = serde_saphyr::from_str(sample).unwrap();
    assert_eq!(pod["spec"]["dnsPolicy"], "None");
    assert_eq!(pod["spec"]["dnsConfig"]["nameservers"][0], "169.254.20.11");
    // Its init container waits for the gang with `podns wait`, asking DNS
    // only: no token, so no RBAC.
    assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
    let init = &pod["spec"]["initContainers"][0];
    let mut argv = vec!["podns".to_string()];
    argv.extend(
        strs_in_order(&init["args"])
            .into_iter()
            .map(|a| a.replace("$(NAMESPACE)", "ml")),
    );
    let parsed = Podns::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let podns::cli::Command::Wait(args) = parsed.command else {
        panic!("the init container runs podns wait: {argv:?}");
    };
    let resolv = "nameserver 169.254.20.11\nnameserver 10.96.0.10\n";
    let cfg = args.config(|| resolv.to_string());
    assert_eq!(cfg.namespace, "ml");
    assert_eq!(cfg.servers[0], "169.254.20.11:53".parse().unwrap());
    assert!(cfg.timeout > std::time::Duration::ZERO);
}
