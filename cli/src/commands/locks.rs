//! `locks [PATH]`: every lock, read-write lock and election queue under PATH.

use arbor_client::Client;
use clap::Args;

use crate::output::Output;

#[derive(Debug, Args)]
pub struct LocksArgs {
    /// Where to look (the whole subtree is searched).
    #[arg(default_value = "/")]
    pub(crate) path: String,
}

pub async fn run(_client: &Client, _args: LocksArgs, _out: &Output) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
