//! kubectl, unchanged, against the simulator: Protobuf for its typed
//! clients, JSON for the rest, watches, Jobs and Service IP families.

use podns_sim::SimArgs;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::timeout;

use super::support::*;

/// A simulator with kubelets and one running 2-rank job, and kubectl for
/// it (`None`: kubectl is missing and the test skips).
async fn one_running_job() -> Option<(Sim, Kubectl)> {
    let sim = start(SimArgs {
        kubelet: true,
        jobs: 1,
        ranks: 2,
        ..SimArgs::default()
    })
    .await;
    let kubectl = Kubectl::for_sim(&sim)?;
    Some((sim, kubectl))
}

/// kubectl's typed clients (describe, create namespace, create service)
/// ask for `application/vnd.kubernetes.protobuf,application/json`; `get`,
/// `delete`, `label` and `rollout` ask for JSON. client-go decodes our
/// Protobuf with Kubernetes' own generated code, so what describe prints is
/// an outside check of the simulator's encoder.
#[tokio::test]
async fn kubectl_describe_reads_protobuf() {
    let Some((sim, kubectl)) = one_running_job().await else {
        return;
    };
    let protobuf_served = async || {
        get(sim.addr, "/sim/stats").await.json()["responses_by_content_type"]
            ["application/vnd.kubernetes.protobuf"]
            .as_u64()
            .unwrap_or(0)
    };
    // Runs kubectl and checks that it was answered in Protobuf.
    let run = async |args: &[&str]| {
        let before = protobuf_served().await;
        let stdout = kubectl.run(args).await;
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

    // The Job controller writes `ready` within a second of its pods
    // becoming Ready; describe prints it only once it is there.
    wait_for(
        "the Job's status counting 2 ready pods",
        DEADLINE,
        || async {
            let j = get(sim.addr, "/apis/batch/v1/namespaces/default/jobs/train-0")
                .await
                .json();
            (j["status"]["active"] == 2 && j["status"]["ready"] == 2).then_some(())
        },
    )
    .await;
    let out = run(&["describe", "job", "train-0"]).await;
    has(
        &out,
        &[
            "Parallelism:        2",
            "Completion Mode:    Indexed",
            "Pods Statuses:      2 Active (2 Ready) / 0 Succeeded / 0 Failed",
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
    kubectl
        .run(&[
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
    let Some((sim, kubectl)) = one_running_job().await else {
        return;
    };
    let run = async |args: &[&str]| kubectl.run(args).await;
    let v: Value = serde_json::from_str(&run(&["get", "pods", "-A", "-o", "json"]).await).unwrap();
    assert_eq!(v["items"].as_array().unwrap().len(), 2);
    let table = run(&["get", "pods", "-A"]).await;
    assert!(
        table.contains("NAMESPACE") && table.contains("train-0-0-"),
        "{table}"
    );
    // A watch sees a later create.
    let mut watch = kubectl
        .command(&["get", "pods", "-w", "-o", "json"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    wait_for("kubectl watch open", DEADLINE, || async {
        (get(sim.addr, "/sim/stats").await.json()["open_watches"].as_i64() >= Some(1)).then_some(())
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let pod_file = dir.path().join("pod.json");
    std::fs::write(
        &pod_file,
        pod("from-kubectl", json!({"app": "x"})).to_string(),
    )
    .unwrap();
    // kubectl validates nothing itself: /openapi/v3 says the server takes
    // `fieldValidation`, so no `--validate=false`.
    let out = run(&["apply", "-f", pod_file.to_str().unwrap()]).await;
    assert!(out.contains("pod/from-kubectl created"), "{out}");
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
    // Applied again with a label more: a patch.
    std::fs::write(
        &pod_file,
        pod("from-kubectl", json!({"app": "x", "tier": "y"})).to_string(),
    )
    .unwrap();
    let out = run(&["apply", "-f", pod_file.to_str().unwrap()]).await;
    assert!(out.contains("pod/from-kubectl configured"), "{out}");
    let l = run(&["get", "pods", "-l", "tier=y", "-o", "name"]).await;
    assert_eq!(l.trim(), "pod/from-kubectl");
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

#[tokio::test]
async fn kubectl_gets_jobs() {
    let sim = start_mixed_jobs().await;
    let Some(kubectl) = Kubectl::for_sim(&sim) else {
        return;
    };
    let run = async |args: &[&str]| kubectl.run(args).await;
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

#[tokio::test]
async fn kubectl_sees_service_ip_families() {
    let dual = start(dual_stack()).await;
    let single = start_default().await;
    let (Some(on_dual), Some(on_single)) = (Kubectl::for_sim(&dual), Kubectl::for_sim(&single))
    else {
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
    let ok = |o: std::process::Output| {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let svc_json = async |kubectl: &Kubectl, name: &str| -> Value {
        serde_json::from_str(&kubectl.run(&["get", "svc", name, "-o", "json"]).await).unwrap()
    };

    ok(on_dual
        .output(&["create", "service", "clusterip", "web", "--tcp=80:8080"])
        .await);
    let web = svc_json(&on_dual, "web").await;
    assert_eq!(web["spec"]["ipFamilyPolicy"], "SingleStack");
    assert_eq!(web["spec"]["ipFamilies"], json!(["IPv4"]));
    assert_eq!(web["spec"]["clusterIPs"], json!([web["spec"]["clusterIP"]]));
    ok(on_dual
        .output(&["create", "-f", req.to_str().unwrap()])
        .await);
    let r = svc_json(&on_dual, "req").await;
    assert_eq!(r["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
    assert_eq!(r["spec"]["clusterIPs"].as_array().unwrap().len(), 2);
    assert_eq!(r["spec"]["clusterIPs"][0], r["spec"]["clusterIP"]);
    ok(on_dual
        .output(&[
            "patch",
            "svc",
            "web",
            "-p",
            r#"{"spec":{"ipFamilyPolicy":"PreferDualStack"}}"#,
        ])
        .await);
    let web = svc_json(&on_dual, "web").await;
    assert_eq!(web["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
    assert_eq!(web["spec"]["clusterIPs"].as_array().unwrap().len(), 2);

    // kubectl prints the single-stack refusal from the Status causes.
    let out = on_single
        .output(&["create", "-f", req.to_str().unwrap()])
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
