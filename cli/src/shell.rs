//! `arbor shell` (being written).

use crate::output::Output;
use crate::Global;

pub async fn run(_global: &Global, _out: &Output) -> anyhow::Result<()> {
    anyhow::bail!("arbor shell is not available yet")
}
