//! `podns serve`: wiring of watchers, index writer, DNS and admin servers.

use crate::cli::ServeArgs;

/// A configuration problem the operator must fix (exit code 64).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

pub async fn run(_args: ServeArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
