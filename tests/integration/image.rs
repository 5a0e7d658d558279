//! The image `deploy/image/build.sh` writes, held to the Dockerfile's
//! layout: entrypoint, default command, user, ports, the two binary paths
//! the manifests name and the file capability of `podns-bind53`; nothing
//! else runs in it (no shell). Built twice from the same binary it is the
//! same bytes, so the same digests. (The image of the release build runs on
//! the real node: tests/cluster/; its arm64 image runs under qemu-user:
//! deploy/image/qemu-test.sh.)

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::output_ok;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// What the Dockerfile's final stage says.
#[derive(Debug, Default)]
struct Layout {
    user: String,
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    expose: Vec<String>,
    binaries: Vec<String>,
    /// (path, capability as setcap writes it)
    caps: Vec<(String, String)>,
}

fn dockerfile() -> Layout {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    // The final stage: from its FROM on, continuation lines joined.
    let last = text.rfind("\nFROM ").unwrap();
    let stage = text[last..].replace("\\\n", " ");
    let mut l = Layout::default();
    let json = |rest: &str| -> Vec<String> { serde_json::from_str(rest.trim()).unwrap() };
    for line in stage.lines().map(str::trim) {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "USER" => l.user = rest.trim().to_string(),
            "ENTRYPOINT" => l.entrypoint = json(rest),
            "CMD" => l.cmd = json(rest),
            "EXPOSE" => l.expose = rest.split_whitespace().map(str::to_string).collect(),
            "COPY" => l
                .binaries
                .push(rest.split_whitespace().last().unwrap().to_string()),
            "RUN" => {
                for part in rest.split("&&").map(str::trim) {
                    let w: Vec<&str> = part.split_whitespace().collect();
                    match w.as_slice() {
                        ["cp", _, to] => l.binaries.push(to.to_string()),
                        ["setcap", cap, path] => l.caps.push((path.to_string(), cap.to_string())),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    l
}

/// `build.sh --platform linux/amd64 --binary BINARY --out OUT`: the
/// digests it prints, (the image's, the index's).
fn build(binary: &Path, out: &Path) -> (String, String) {
    let o = output_ok(
        Command::new("bash")
            .arg(repo().join("deploy/image/build.sh"))
            .args(["--platform", "linux/amd64", "--binary"])
            .arg(binary)
            .arg("--out")
            .arg(out),
        "deploy/image/build.sh",
    );
    let text = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<(&str, &str)> = text
        .lines()
        .map(|l| l.split_once(' ').unwrap_or((l, "")))
        .collect();
    assert_eq!(
        lines.iter().map(|(what, _)| *what).collect::<Vec<_>>(),
        ["linux/amd64", "index"],
        "{text}"
    );
    for (_, digest) in &lines {
        assert!(
            digest.starts_with("sha256:") && digest.len() == 71,
            "{text}"
        );
    }
    let written = std::fs::read_to_string(out.with_extension("tar.digest")).unwrap();
    assert_eq!(written.trim(), lines[1].1, "FILE.digest holds the index's");
    (lines[0].1.to_string(), lines[1].1.to_string())
}

/// An image says the platform of what it holds: oci.py refuses an ELF
/// file of another machine.
#[test]
fn an_image_refuses_a_binary_of_another_platform() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipping: no python3 for deploy/image/oci.py");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_podns");
    let other = if cfg!(target_arch = "aarch64") {
        "linux/amd64"
    } else {
        "linux/arm64"
    };
    let o = Command::new("python3")
        .arg(repo().join("deploy/image/oci.py"))
        .args(["build", "--name", "podns:x", "--platform", other, "--out"])
        .arg(dir.path().join("x.tar"))
        .arg("--file")
        .arg(format!("{bin}:/usr/local/bin/podns:0755"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "an {other} image took this machine's binary"
    );
    assert!(
        err.contains(&format!("not for the image's {other}")),
        "{err}"
    );
    assert!(!dir.path().join("x.tar").exists());
}

#[test]
fn the_image_has_the_dockerfiles_layout_and_builds_reproducibly() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipping: no python3 for deploy/image/oci.py");
        return;
    }
    let want = dockerfile();
    assert_eq!(
        want.binaries,
        ["/usr/local/bin/podns", "/usr/local/bin/podns-bind53"],
        "{want:?}"
    );
    assert_eq!(
        want.caps,
        [(
            "/usr/local/bin/podns-bind53".to_string(),
            "cap_net_bind_service=+ep".to_string()
        )]
    );

    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.tar"), dir.path().join("b.tar"));
    let bin = Path::new(env!("CARGO_BIN_EXE_podns"));
    let (manifest, digest) = build(bin, &a);
    assert_eq!(
        build(bin, &b),
        (manifest.clone(), digest.clone()),
        "the same binary, another digest"
    );
    assert!(
        std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(),
        "the same binary, other bytes"
    );

    let o = Command::new("python3")
        .arg(repo().join("deploy/image/oci.py"))
        .arg("inspect")
        .arg(&a)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let image: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(image["digest"], digest.as_str());
    // One platform under the index, labelled for what it holds.
    assert_eq!(
        image["platforms"],
        serde_json::json!({"linux/amd64": manifest})
    );
    assert_eq!(image["config"]["architecture"], "amd64");
    assert_eq!(image["config"]["os"], "linux");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        image["names"][0],
        format!("docker.io/library/podns:{version}")
    );
    assert_eq!(
        image["docker"][0]["RepoTags"][0],
        format!("podns:{version}")
    );
    let config = &image["config"]["config"];
    assert_eq!(config["User"], want.user.as_str());
    assert_eq!(config["Entrypoint"], serde_json::json!(want.entrypoint));
    assert_eq!(config["Cmd"], serde_json::json!(want.cmd));
    let mut ports: Vec<&str> = config["ExposedPorts"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut exposed: Vec<&str> = want.expose.iter().map(String::as_str).collect();
    ports.sort();
    exposed.sort();
    assert_eq!(ports, exposed);
    assert!(
        image["config"].get("created").is_none(),
        "no build time in the config"
    );

    let files = image["files"].as_object().unwrap();
    for path in &want.binaries {
        let f = &files[path];
        assert_eq!(f["type"], "file", "{path}");
        assert_eq!(f["mode"], "0o755", "{path}");
        assert_eq!(
            (f["uid"].as_u64(), f["gid"].as_u64()),
            (Some(0), Some(0)),
            "{path}"
        );
        let cap = want
            .caps
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, c)| c.as_str());
        assert_eq!(f["capability"].as_str(), cap, "{path}");
    }
    // The user the image runs as exists in it, and nothing but the two
    // binaries is executable except the loader and libraries they need.
    let passwd_uid = want.user.split(':').next().unwrap();
    assert!(
        files.contains_key("/etc/passwd"),
        "no /etc/passwd for uid {passwd_uid}"
    );
    for (path, f) in files {
        assert!(
            !path.ends_with("/sh") && !path.ends_with("/busybox"),
            "a shell in the image: {path}"
        );
        assert!(f["mtime"] == 0, "{path}: mtime {}", f["mtime"]);
        let executable =
            f["type"] == "file" && f["mode"].as_str().is_some_and(|m| m.ends_with('5'));
        if executable {
            assert!(
                want.binaries.contains(path) || path.contains("/lib") || path.contains(".so"),
                "unexpected executable {path}"
            );
        }
    }
    // The binary names the manifests run are the image's.
    for manifest in [
        "deploy/overlays/daemonset/daemonset.yaml",
        "deploy/helm/podns/templates/daemonset.yaml",
    ] {
        let text = std::fs::read_to_string(repo().join(manifest)).unwrap();
        for path in text
            .split(['"', ' ', '['])
            .filter(|w| w.starts_with("/usr/local/bin/"))
        {
            assert!(
                files.contains_key(path),
                "{manifest} runs {path}, which the image lacks"
            );
        }
    }
}
