//! `arbor browse` (being written).

use crate::Global;

pub async fn run(_global: &Global) -> anyhow::Result<()> {
    anyhow::bail!("arbor browse is not available yet")
}
