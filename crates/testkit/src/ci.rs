//! The rule for a test that needs a tool the machine may lack: in CI
//! (`CI=true` or `CI=1`) a missing tool fails the test; elsewhere the test
//! skips, saying why.

/// Whether this run is CI's (`CI=true` or `CI=1`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Whether a test that needs `tool` can run: `found`, or else panic in CI
/// and print why the test skips elsewhere.
pub fn need(tool: &str, found: bool) -> bool {
    if found {
        return true;
    }
    if in_ci() {
        panic!("{tool} is required in CI (CI=true) but was not found");
    }
    eprintln!("skipping: {tool} not found (set CI=true to make this a failure)");
    false
}

/// Whether a command (dig, kubectl) is on PATH.
pub fn has(cmd: &str) -> bool {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

/// [`need`] for a command on PATH.
pub fn need_cmd(cmd: &str) -> bool {
    need(cmd, has(cmd))
}
