//! The commands, one module per command or per small family of commands.
//! Each takes a connected [`Client`], its parsed arguments and the
//! [`Output`](crate::output::Output) to print to.

pub mod acl;
pub mod admin;
pub mod cluster;
pub mod delete;
pub mod get;
pub mod lock;
pub mod locks;
pub mod ls;
pub mod transfer;
pub mod tree;
pub mod version;
pub mod watch;
pub mod write;

use std::time::Duration;

use arbor_client::acl::{digest_id, DIGEST};
use arbor_client::{Client, ClientOptions, Error as ClientError};
use clap::Subcommand;

use crate::error::{self, AuthFailed, Unreachable};
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
    Delete(delete::DeleteArgs),
    /// Wait until the server is up to date with the leader for a path.
    Sync(write::SyncArgs),
    /// Print changes at a path until interrupted.
    Watch(watch::WatchArgs),
    /// Show every lock queue under a path: holder, fencing token, waiters.
    Locks(locks::LocksArgs),
    /// Print a node's ACL, one `scheme:id:perms` entry per line.
    #[command(name = "getacl")]
    GetAcl(acl::GetAclArgs),
    /// Replace a node's ACL (needs ADMIN on it).
    #[command(name = "setacl")]
    SetAcl(acl::SetAclArgs),
    /// Print the ids this session holds, one per line.
    #[command(name = "whoami")]
    WhoAmI,
}

impl NodeCommand {
    /// Runs the command on `client`, printing to `out`. A refusal that
    /// names no node (`NoAuth`, `InvalidAcl`) is told with the command's path.
    pub async fn run(mut self, client: &Client, out: &Output) -> anyhow::Result<()> {
        let path = self.path_mut().cloned();
        let result = self.dispatch(client, out).await;
        match path {
            Some(path) => result.map_err(|err| error::at_path(err, &path)),
            None => result,
        }
    }

    async fn dispatch(self, client: &Client, out: &Output) -> anyhow::Result<()> {
        match self {
            NodeCommand::Ls(args) => ls::run(client, args, out).await,
            NodeCommand::Tree(args) => tree::run(client, args, out).await,
            NodeCommand::Get(args) => get::run_get(client, args, out).await,
            NodeCommand::Stat(args) => get::run_stat(client, args, out).await,
            NodeCommand::Create(args) => write::run_create(client, args, out).await,
            NodeCommand::Set(args) => write::run_set(client, args, out).await,
            NodeCommand::Delete(args) => delete::run(client, args, out).await,
            NodeCommand::Sync(args) => write::run_sync(client, args, out).await,
            NodeCommand::Watch(args) => watch::run(client, args, out).await,
            NodeCommand::Locks(args) => locks::run(client, args, out).await,
            NodeCommand::GetAcl(args) => acl::run_get_acl(client, args, out).await,
            NodeCommand::SetAcl(args) => acl::run_set_acl(client, args, out).await,
            NodeCommand::WhoAmI => acl::run_who_am_i(client, out).await,
        }
    }

    /// The path the command works on, for `arbor shell` to resolve against
    /// its working node; `None` for commands about the session (`whoami`).
    pub fn path_mut(&mut self) -> Option<&mut String> {
        let path = match self {
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
            NodeCommand::GetAcl(args) => &mut args.path,
            NodeCommand::SetAcl(args) => &mut args.path,
            NodeCommand::WhoAmI => return None,
        };
        Some(path)
    }
}

/// The session timeout `watch`, `browse` and `shell` ask for unless told
/// (`--session-timeout`): they run for long, so their session should outlive
/// a server restart, which the client then resumes by itself. The server
/// clamps it (by default to at most 40 s).
pub const LASTING_SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// The options every connection of the CLI takes: `global.timeout` as both
/// the connect and the request timeout, `--session-timeout` if given, TLS
/// if asked for, and `global.auth()` (digest) if given; with the digest
/// user, for messages.
pub fn client_options(global: &Global) -> anyhow::Result<(ClientOptions, Option<String>)> {
    let mut options = ClientOptions::default()
        .with_connect_timeout(global.timeout)
        .with_request_timeout(global.timeout);
    if let Some(session_timeout) = global.session_timeout {
        options = options.with_session_timeout(session_timeout);
    }
    if let Some(tls) = global.tls()? {
        options = options.with_tls(tls);
    }
    let mut user = None;
    if let Some(credentials) = global.auth() {
        // Checked here with the server's own rule, so a typo is caught
        // before connecting and the message can name the user.
        let id = digest_id(credentials.as_str()).map_err(|_| AuthFailed {
            detail: "--auth (or ARBOR_AUTH) takes USER:PASSWORD".to_owned(),
        })?;
        user = id.split_once(':').map(|(user, _)| user.to_owned());
        options = options.with_auth(DIGEST, credentials.as_str());
    }
    Ok((options, user))
}

/// Connects to `global.server` with [`client_options`]. Malformed or
/// refused credentials are reported as [`AuthFailed`] (without the
/// password); any other failure as [`Unreachable`].
pub async fn connect(global: &Global) -> anyhow::Result<Client> {
    let (options, user) = client_options(global)?;
    connect_with(global, options, user).await
}

/// [`connect`] for a command that runs until stopped (`watch`, `browse`,
/// `shell`): [`LASTING_SESSION_TIMEOUT`] unless `--session-timeout` says.
pub async fn connect_lasting(global: &Global) -> anyhow::Result<Client> {
    let (mut options, user) = client_options(global)?;
    if global.session_timeout.is_none() {
        options = options.with_session_timeout(LASTING_SESSION_TIMEOUT);
    }
    connect_with(global, options, user).await
}

async fn connect_with(
    global: &Global,
    options: ClientOptions,
    user: Option<String>,
) -> anyhow::Result<Client> {
    let server = global.server();
    match Client::connect(&server, options).await {
        Ok(client) => Ok(client),
        Err(ClientError::AuthFailed) => {
            let user = user.unwrap_or_default();
            Err(
                anyhow::Error::new(ClientError::AuthFailed).context(AuthFailed {
                    detail: format!("{server} refused the credentials of digest user '{user}'"),
                }),
            )
        }
        Err(err) => Err(anyhow::Error::new(err).context(Unreachable { server })),
    }
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
