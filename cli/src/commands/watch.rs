//! `watch [-r] PATH`: one line per change at PATH (or below it, with `-r`)
//! until interrupted (Ctrl-C is handled by the caller: `main` for the
//! command line, the shell for its lines).

use arbor_client::{AddWatchMode, Client, WatchEvent};
use clap::Args;
use serde_json::json;

use crate::output::{hex_id, Output};

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Every create, delete and data change at or below PATH; without it,
    /// changes of PATH itself and of its list of children.
    #[arg(short = 'r', long)]
    recursive: bool,
    /// The path to watch (it need not exist).
    pub(crate) path: String,
}

pub async fn run(client: &Client, args: WatchArgs, out: &Output) -> anyhow::Result<()> {
    let mode = if args.recursive {
        AddWatchMode::PersistentRecursive
    } else {
        AddWatchMode::Persistent
    };
    let mut events = client.watch(&args.path, mode).await?;
    loop {
        let event = events.next().await?;
        print_event(&event, out)?;
    }
}

fn print_event(event: &WatchEvent, out: &Output) -> std::io::Result<()> {
    let kind = format!("{:?}", event.event_type);
    let document = json!({"type": kind, "path": event.path, "zxid": event.zxid});
    let human = format!("{kind} {} zxid={}", event.path, hex_id(event.zxid));
    out.print(&document, &human)
}
