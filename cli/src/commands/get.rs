//! `get PATH` (a node's data, shown safely or `--raw`) and `stat PATH`.

use std::io::Write;

use arbor_client::Client;
use clap::Args;
use serde_json::json;

use crate::data;
use crate::output::{self, Output};

#[derive(Debug, Args)]
pub struct GetArgs {
    /// Write the data to stdout byte for byte, with no newline or escaping.
    /// Takes precedence over `--json`.
    #[arg(long)]
    raw: bool,
    /// The node to read.
    pub(crate) path: String,
}

#[derive(Debug, Args)]
pub struct StatArgs {
    /// The node to describe.
    pub(crate) path: String,
}

pub async fn run_get(client: &Client, args: GetArgs, out: &Output) -> anyhow::Result<()> {
    let (bytes, stat) = client.get_data(&args.path).await?;
    if args.raw {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(&bytes)?;
        stdout.flush()?;
        return Ok(());
    }
    let (text, encoding) = data::for_json(&bytes);
    let document = json!({
        "path": args.path,
        "data": text,
        "encoding": encoding.name(),
        "stat": output::stat_json(&stat),
    });
    out.print(&document, &data::human(&bytes))?;
    Ok(())
}

pub async fn run_stat(client: &Client, args: StatArgs, out: &Output) -> anyhow::Result<()> {
    let stat = client
        .exists(&args.path)
        .await?
        .ok_or_else(|| arbor_client::Error::NoNode {
            path: args.path.clone(),
        })?;
    let document = json!({"path": args.path, "stat": output::stat_json(&stat)});
    out.print(&document, &output::stat_human(&stat, out))?;
    Ok(())
}
