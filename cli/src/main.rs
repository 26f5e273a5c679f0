//! `arbor`: browse and edit the znode tree of an Arbor server from a shell.
//!
//! This file only parses the command line and dispatches; each command lives
//! in `commands/`, rendering in `output.rs`, and the mapping of failures to
//! exit codes in `error.rs`. Every command prints one JSON document with
//! `--json` (except `watch`, which prints one per event), and every failure is
//! one line on stderr (or one JSON error document on stdout) plus a
//! documented exit code; the binary never panics on bad input.

mod commands;
mod data;
mod duration;
mod error;
mod output;

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::output::Output;

/// Where `arbor` connects when neither `--server` nor `ARBOR_SERVER` is given.
const DEFAULT_SERVER: &str = "127.0.0.1:7181";

/// Browse and edit the znodes of an Arbor server.
///
/// Exit codes: 0 ok, 1 error, 2 usage error, 3 server unreachable, 4 no node,
/// 5 node exists, 6 bad version, 7 node not empty, 8 invalid path.
#[derive(Debug, Parser)]
#[command(name = "arbor", version, about, long_about)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Flags every command takes.
#[derive(Debug, Args)]
struct Global {
    /// Server address(es), `host:port[,host:port...]` [default: $ARBOR_SERVER,
    /// else 127.0.0.1:7181].
    #[arg(long, global = true)]
    server: Option<String>,
    /// Connect and request timeout, such as `5s` or `500ms`.
    #[arg(long, global = true, default_value = "5s", value_parser = duration::parse)]
    timeout: Duration,
    /// Print one JSON document per command (one per line for `watch`).
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the children of a node.
    Ls(commands::ls::LsArgs),
    /// Show a subtree.
    Tree(commands::tree::TreeArgs),
    /// Print a node's data.
    Get(commands::get::GetArgs),
    /// Print a node's stat.
    Stat(commands::get::StatArgs),
    /// Create a node.
    Create(commands::write::CreateArgs),
    /// Replace a node's data.
    Set(commands::write::SetArgs),
    /// Delete a node (or, with -r, a subtree).
    Delete(commands::write::DeleteArgs),
    /// Wait until the server is up to date with the leader for a path.
    Sync(commands::write::SyncArgs),
    /// Print changes at a path until interrupted.
    Watch(commands::watch::WatchArgs),
    /// Print the client version (and the server's last zxid, if reachable).
    Version,
}

impl Global {
    /// The server to connect to: `--server`, else `$ARBOR_SERVER`, else
    /// [`DEFAULT_SERVER`].
    fn server(&self) -> String {
        self.server
            .clone()
            .or_else(|| std::env::var("ARBOR_SERVER").ok().filter(|s| !s.is_empty()))
            .unwrap_or_else(|| DEFAULT_SERVER.to_owned())
    }
}

fn main() {
    let cli = Cli::parse();
    let out = Output::new(cli.global.json);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => error::exit_with(&out, &anyhow::Error::new(err).context("cannot start")),
    };
    let result = runtime.block_on(run(cli, &out));
    drop(runtime);
    match result {
        Ok(()) => std::process::exit(0),
        Err(err) => error::exit_with(&out, &err),
    }
}

/// Runs one command to completion.
async fn run(cli: Cli, out: &Output) -> anyhow::Result<()> {
    let global = &cli.global;
    if let Command::Version = cli.command {
        return commands::version::run(global, out).await;
    }
    let client = commands::connect(global).await?;
    match cli.command {
        Command::Ls(args) => commands::ls::run(&client, args, out).await?,
        Command::Tree(args) => commands::tree::run(&client, args, out).await?,
        Command::Get(args) => commands::get::run_get(&client, args, out).await?,
        Command::Stat(args) => commands::get::run_stat(&client, args, out).await?,
        Command::Create(args) => commands::write::run_create(&client, args, out).await?,
        Command::Set(args) => commands::write::run_set(&client, args, out).await?,
        Command::Delete(args) => commands::write::run_delete(&client, args, out).await?,
        Command::Sync(args) => commands::write::run_sync(&client, args, out).await?,
        Command::Watch(args) => commands::watch::run(&client, args, out).await?,
        Command::Version => unreachable!("handled before connecting"),
    }
    // Closing ends the session now, so its ephemerals go at once; a failure
    // here does not undo the command's effect.
    client.close().await.ok();
    Ok(())
}
