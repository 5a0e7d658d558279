//! What `podns --version` says beyond the crate version: the commit the
//! binary was built from and the features it was built with, as
//! `PODNS_VERSION` (e.g. `0.1.0 (commit 31934e9…, features: sim)`).
//!
//! The commit is `$PODNS_GIT_COMMIT` when set and not empty (an image build, whose
//! context has no `.git`, passes it as a build argument), else `git
//! rev-parse HEAD` of this checkout, with `-dirty` when files that make
//! the binary differ from it, else `unknown` (a tarball, a crate unpacked
//! inside another repository). Nothing that differs between two builds of
//! one commit (a build time, a host name) goes in, so the image build stays
//! reproducible.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The files whose changes make the binary differ: what `-dirty` looks at,
/// and when cargo must run this script again.
const SOURCES: [&str; 5] = ["src", "crates", "Cargo.toml", "Cargo.lock", "build.rs"];

fn main() {
    println!("cargo:rerun-if-env-changed=PODNS_GIT_COMMIT");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let given = std::env::var("PODNS_GIT_COMMIT").unwrap_or_default();
    let commit = match given.trim() {
        "" => from_git(&dir).unwrap_or_else(|| "unknown".into()),
        given => {
            let ok = given
                .strip_suffix("-dirty")
                .unwrap_or(given)
                .bytes()
                .all(|b| b.is_ascii_hexdigit());
            if !ok {
                panic!("PODNS_GIT_COMMIT={given:?} is not a commit hash (hex, maybe -dirty)");
            }
            given.to_string()
        }
    };
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(k, _)| k.strip_prefix("CARGO_FEATURE_").map(str::to_owned))
        .filter(|f| f != "DEFAULT")
        .map(|f| f.to_lowercase().replace('_', "-"))
        .collect();
    features.sort();
    let features = if features.is_empty() {
        "none".to_string()
    } else {
        features.join(",")
    };
    let version = std::env::var("CARGO_PKG_VERSION").expect("set by cargo");
    println!("cargo:rustc-env=PODNS_VERSION={version} (commit {commit}, features: {features})");
    println!("cargo:rustc-env=PODNS_COMMIT={commit}");
}

/// `git` in `dir`, its trimmed stdout when it succeeded.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// HEAD of the repository whose top is `dir`, `-dirty` when a tracked
/// source differs from it; None without git or a repository of our own.
fn from_git(dir: &Path) -> Option<String> {
    let top = git(dir, &["rev-parse", "--show-toplevel"])?;
    // A crate unpacked inside someone else's repository is not at its top:
    // that repository's commit is not ours.
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(Path::new(&top), dir) {
        return None;
    }
    // Run again when HEAD moves (commit, checkout, reset: the reflog grows)
    // or a source changes (for -dirty). Only paths that exist: a missing
    // one would make cargo run this every build.
    for path in ["HEAD", "logs/HEAD", "packed-refs"]
        .into_iter()
        .filter_map(|p| {
            git(
                dir,
                &["rev-parse", "--path-format=absolute", "--git-path", p],
            )
        })
        .chain(git(dir, &["symbolic-ref", "-q", "HEAD"]).and_then(|r| {
            git(
                dir,
                &["rev-parse", "--path-format=absolute", "--git-path", &r],
            )
        }))
        .map(PathBuf::from)
        .chain(SOURCES.iter().map(|s| dir.join(s)))
        .filter(|p| p.exists())
    {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let head = git(dir, &["rev-parse", "HEAD"])?;
    let mut status = vec![
        "--no-optional-locks",
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
    ];
    status.extend(SOURCES);
    let dirty = git(dir, &status).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}
