//! Before podns serves on the real node: `up.sh --real-node` names a
//! missing part and starts nothing; the image runs `podns --version` as
//! its own non-root user; a pod without its ServiceAccount token, or
//! without the in-cluster variables, gets one line naming what podns looked
//! for and exit code 64.

use std::path::Path;
use std::process::Command;

use crate::real_node::*;
use crate::support::*;

/// `up.sh DIR --real-node` on a PATH without containerd: exit 2, one line
/// that names it and how to install it, nothing started (no env file, no
/// process, no interface of the node). Needs no cluster.
#[test]
fn up_names_a_missing_part_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    for d in std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(Into::into))
    {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            if name == "containerd" || bin.join(&name).exists() {
                continue;
            }
            let _ = std::os::unix::fs::symlink(e.path(), bin.join(&name));
        }
    }
    let cluster = dir.path().join("cluster");
    let before = Command::new("ip")
        .args(["-o", "link"])
        .output()
        .unwrap()
        .stdout;
    let out = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cluster/up.sh"))
        .arg(&cluster)
        .arg("--real-node")
        .env("PATH", &bin)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        assert!(
            err.contains("containerd (apt-get install containerd)"),
            "{err}"
        );
    } else {
        assert!(err.contains("root"), "{err}");
    }
    assert!(
        !cluster.join("env").exists(),
        "an env file: something started"
    );
    let after = Command::new("ip")
        .args(["-o", "link"])
        .output()
        .unwrap()
        .stdout;
    assert_eq!(before, after, "interfaces changed");
}

/// A pod of podns's image with `--version` only: it runs as the image's
/// user, which the kubelet checks is not root (runAsNonRoot, no runAsUser).
#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn the_image_runs_podns_version_as_its_non_root_user() {
    let c = cluster();
    let Some(n) = real_node(&c) else { return };
    let ns = c.namespace("image");
    let ns = ns.name.as_str();
    c.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: version, namespace: {ns}}}\nspec:\n{}  restartPolicy: Never\n  automountServiceAccountToken: false\n  securityContext: {{runAsNonRoot: true}}\n  containers:\n  - name: podns\n    image: {}\n    imagePullPolicy: Never\n    args: [--version]\n",
        n.placement(2),
        n.pinned("podns")
    ));
    let phase = wait_for("the version pod to finish", secs(120), || {
        let p = c.try_pod_field(ns, "version", "{.status.phase}").ok()?;
        (p == "Succeeded" || p == "Failed").then_some(p)
    });
    let log = c.kubectl(&["-n", ns, "logs", "version"]);
    assert_eq!(phase, "Succeeded", "{log}");
    assert!(
        log.starts_with(&format!("podns {}", env!("CARGO_PKG_VERSION"))),
        "{log}"
    );
    let user = c.pod_field(
        ns,
        "version",
        "{.status.containerStatuses[0].user.linux.uid}",
    );
    // The kubelet reports the uid it ran as where the runtime says it
    // (CRI 1.28+); containerd 1.6 does not, so it may be empty.
    assert!(
        user.trim().is_empty() || user.trim() == "65532",
        "uid {user}"
    );
    report(
        &c,
        &format!(
            "image: `podns --version` in a pod (runAsNonRoot, the image's user 65532): {}",
            log.trim()
        ),
    );
}

/// podns serve in a pod that lacks what in-cluster config needs: the
/// ServiceAccount token (automountServiceAccountToken: false), or the
/// KUBERNETES_SERVICE_HOST the kubelet sets. Exit 64, one line that says
/// what it looked for.
#[test]
#[ignore = "needs PODNS_CLUSTER"]
fn a_pod_without_in_cluster_credentials_exits_64_with_one_line() {
    let c = cluster();
    let Some(n) = real_node(&c) else { return };
    let ns = c.namespace("nocreds");
    let ns = ns.name.as_str();
    for (pod, automount, env, want) in [
        (
            "no-token",
            "false",
            "",
            "/var/run/secrets/kubernetes.io/serviceaccount",
        ),
        (
            "no-host",
            "true",
            "    env: [{name: KUBERNETES_SERVICE_HOST, value: \"\"}]\n",
            "KUBERNETES_SERVICE_HOST",
        ),
    ] {
        c.apply(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {pod}, namespace: {ns}}}\nspec:\n{}  restartPolicy: Never\n  automountServiceAccountToken: {automount}\n  containers:\n  - name: podns\n    image: {}\n    imagePullPolicy: Never\n    args: [serve, --dns-listen=0.0.0.0:5353, --admin-listen=0.0.0.0:9153]\n{env}",
            n.placement(2),
            n.pinned("podns")
        ));
        let code = wait_for(&format!("{pod} to exit"), secs(120), || {
            let code = c
                .try_pod_field(
                    ns,
                    pod,
                    "{.status.containerStatuses[0].state.terminated.exitCode}",
                )
                .ok()?;
            code.trim().parse::<i32>().ok()
        });
        let log = c.kubectl(&["-n", ns, "logs", pod]);
        assert_eq!(code, 64, "{pod}: {log}");
        let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{pod}: one line: {log}");
        assert!(
            lines[0].contains(want),
            "{pod}: the line names {want}: {log}"
        );
        assert!(
            !log.contains("listening"),
            "{pod}: bound before it knew: {log}"
        );
        report(&c, &format!("in a pod, {pod}: exit {code}: {}", lines[0]));
    }
}
