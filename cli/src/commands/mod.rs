//! The commands, one module per command or per small family of commands.
//! Each takes a connected [`Client`], its parsed arguments and the
//! [`Output`](crate::output::Output) to print to.

pub mod cluster;
pub mod get;
pub mod locks;
pub mod ls;
pub mod tree;
pub mod version;
pub mod watch;
pub mod write;

use anyhow::Context;
use arbor_client::{Client, ClientOptions};
use clap::Subcommand;

use crate::error::Unreachable;
use crate::output::Output;
use crate::Global;

/// The commands that work on the tree: the same on the command line and in
/// `arbor shell`.
#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// List the children of a node.
    Ls(ls::LsArgs),
    /// Show a subtree.
    Tree(tree::TreeArgs),
    /// Print a node's data.
    Get(get::GetArgs),
    /// Print a node's stat.
    Stat(get::StatArgs),
    /// Create a node.
    Create(write::CreateArgs),
    /// Replace a node's data.
    Set(write::SetArgs),
    /// Delete a node (or, with -r, a subtree).
    Delete(write::DeleteArgs),
    /// Wait until the server is up to date with the leader for a path.
    Sync(write::SyncArgs),
    /// Print changes at a path until interrupted.
    Watch(watch::WatchArgs),
    /// Show every lock queue under a path: holder, fencing token, waiters.
    Locks(locks::LocksArgs),
}

impl NodeCommand {
    /// Runs the command on `client`, printing to `out`.
    pub async fn run(self, client: &Client, out: &Output) -> anyhow::Result<()> {
        match self {
            NodeCommand::Ls(args) => ls::run(client, args, out).await,
            NodeCommand::Tree(args) => tree::run(client, args, out).await,
            NodeCommand::Get(args) => get::run_get(client, args, out).await,
            NodeCommand::Stat(args) => get::run_stat(client, args, out).await,
            NodeCommand::Create(args) => write::run_create(client, args, out).await,
            NodeCommand::Set(args) => write::run_set(client, args, out).await,
            NodeCommand::Delete(args) => write::run_delete(client, args, out).await,
            NodeCommand::Sync(args) => write::run_sync(client, args, out).await,
            NodeCommand::Watch(args) => watch::run(client, args, out).await,
            NodeCommand::Locks(args) => locks::run(client, args, out).await,
        }
    }

    /// The path the command works on, for `arbor shell` to resolve against
    /// its working node.
    pub fn path_mut(&mut self) -> &mut String {
        match self {
            NodeCommand::Ls(args) => &mut args.path,
            NodeCommand::Tree(args) => &mut args.path,
            NodeCommand::Get(args) => &mut args.path,
            NodeCommand::Stat(args) => &mut args.path,
            NodeCommand::Create(args) => &mut args.path,
            NodeCommand::Set(args) => &mut args.path,
            NodeCommand::Delete(args) => &mut args.path,
            NodeCommand::Sync(args) => &mut args.path,
            NodeCommand::Watch(args) => &mut args.path,
            NodeCommand::Locks(args) => &mut args.path,
        }
    }
}

/// Connects to `global.server`, with `global.timeout` as both the connect
/// and the request timeout. Any failure is reported as [`Unreachable`].
pub async fn connect(global: &Global) -> anyhow::Result<Client> {
    let options = ClientOptions::default()
        .with_connect_timeout(global.timeout)
        .with_request_timeout(global.timeout);
    let server = global.server();
    Client::connect(&server, options)
        .await
        .map_err(anyhow::Error::new)
        .with_context(|| Unreachable { server })
}

/// `parent` joined with a child's `name`.
pub fn child_path(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves child paths never get a double slash under the root.
    #[test]
    fn joins_child_paths() {
        assert_eq!(child_path("/", "a"), "/a");
        assert_eq!(child_path("/a", "b"), "/a/b");
    }
}
