//! `podns demo`: simulator and server in one process on loopback.

use crate::cli::DemoArgs;

pub async fn run(_args: DemoArgs) -> anyhow::Result<()> {
    anyhow::bail!("not built yet")
}
