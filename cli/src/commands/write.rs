//! Commands that change the tree: `create [-p] [--acl ACL]`, `set`, and
//! `sync` (`delete` has a module of its own).
//!
//! A `create` whose parent is missing says which ancestor is: the server
//! only answers `NoNode`, so the ancestors are looked up afterwards, on the
//! failure path only.

use std::io::Read;
use std::time::Duration;

use anyhow::Context;
use arbor_client::{Acl, Client, CreateMode, Error as ClientError};
use clap::Args;
use serde_json::json;

use super::acl::AclList;
use crate::duration;
use crate::error::{self, MissingParent};
use crate::output::{self, Output};

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Ephemeral: deleted when this command's session ends (at once).
    #[arg(short = 'e', long)]
    ephemeral: bool,
    /// Sequential: the server appends a unique, increasing number.
    #[arg(short = 's', long)]
    sequential: bool,
    /// Container: deleted by the server once it has had children and has none.
    #[arg(long, conflicts_with_all = ["ephemeral", "sequential", "ttl"])]
    container: bool,
    /// Deleted once it has no children and was not modified for this long.
    #[arg(long, value_parser = duration::parse, conflicts_with = "ephemeral")]
    ttl: Option<Duration>,
    /// The node's ACL, such as `auth::cdrwa,world:anyone:r` (zkCli syntax);
    /// `world:anyone:cdrwa` when left out.
    #[arg(long, value_parser = AclList::parse)]
    acl: Option<AclList>,
    /// Create missing parents first, as persistent empty nodes with the
    /// default ACL; parents that exist (or appear meanwhile) are fine.
    #[arg(short = 'p', long)]
    parents: bool,
    /// The node to create.
    pub(crate) path: String,
    /// The data, or `-` to read it from stdin; empty when left out.
    data: Option<String>,
}

#[derive(Debug, Args)]
pub struct SetArgs {
    /// Only if the node's version is this one.
    #[arg(short = 'v', long)]
    version: Option<i32>,
    /// The node to change.
    pub(crate) path: String,
    /// The new data, `-` to read it from stdin, or `''` to empty the node.
    /// Required: a forgotten argument must not wipe the node.
    data: String,
}

#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The path to sync.
    pub(crate) path: String,
}

pub async fn run_create(client: &Client, args: CreateArgs, out: &Output) -> anyhow::Result<()> {
    let mode = create_mode(&args)?;
    let data = read_data(args.data.as_deref())?;
    let acl = args.acl.map(|AclList(acl)| acl);
    let created = match create_node(client, &args.path, &data, mode, &acl).await {
        Err(ClientError::NoNode { .. }) if args.parents => {
            create_parents(client, &args.path).await?;
            create_node(client, &args.path, &data, mode, &acl).await?
        }
        Err(err @ ClientError::NoNode { .. }) => {
            return Err(with_missing_parent(client, &args.path, err).await)
        }
        created => created?,
    };
    out.print(&json!({"path": created}), &created)?;
    Ok(())
}

/// One create of `path`, with `acl` if given (else the default ACL).
async fn create_node(
    client: &Client,
    path: &str,
    data: &[u8],
    mode: CreateMode,
    acl: &Option<Vec<Acl>>,
) -> Result<String, ClientError> {
    match acl {
        Some(acl) => Ok(client
            .create_with_acl(path, data.to_vec(), mode, acl.clone())
            .await?
            .0),
        None => client.create(path, data.to_vec(), mode).await,
    }
}

/// The ancestors of `path`, root first, without `/` and `path` itself:
/// `/a/b/c` has `/a` and `/a/b`.
fn ancestors(path: &str) -> Vec<&str> {
    path.match_indices('/')
        .map(|(at, _)| &path[..at])
        .filter(|ancestor| !ancestor.is_empty())
        .collect()
}

/// Creates every ancestor of `path` that is missing, root first, as a
/// persistent empty node; one that exists already (or is made meanwhile by
/// someone else) is fine.
async fn create_parents(client: &Client, path: &str) -> anyhow::Result<()> {
    for ancestor in ancestors(path) {
        match client
            .create(ancestor, Vec::new(), CreateMode::Persistent)
            .await
        {
            Ok(_) | Err(ClientError::NodeExists { .. }) => {}
            // A refusal is about the ancestor, not the node asked for.
            Err(err) => return Err(error::at_path(err.into(), ancestor)),
        }
    }
    Ok(())
}

/// `err` (a `NoNode` from creating `path`) with the highest missing
/// ancestor named, if one is missing still; else `err` as it was (the
/// parent appeared meanwhile, or could not be checked).
async fn with_missing_parent(client: &Client, path: &str, err: ClientError) -> anyhow::Error {
    for ancestor in ancestors(path) {
        match client.exists(ancestor).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                return anyhow::Error::new(err).context(MissingParent {
                    parent: ancestor.to_owned(),
                    path: path.to_owned(),
                })
            }
            Err(_) => break,
        }
    }
    err.into()
}

fn create_mode(args: &CreateArgs) -> anyhow::Result<CreateMode> {
    let ttl_ms = match args.ttl {
        Some(ttl) => Some(u64::try_from(ttl.as_millis()).context("--ttl is too long")?),
        None => None,
    };
    let mode = match (args.ephemeral, args.sequential, args.container, ttl_ms) {
        (_, _, true, _) => CreateMode::Container,
        (true, true, _, _) => CreateMode::EphemeralSequential,
        (true, false, _, _) => CreateMode::Ephemeral,
        (false, true, _, Some(ttl_ms)) => CreateMode::PersistentSequentialWithTtl { ttl_ms },
        (false, false, _, Some(ttl_ms)) => CreateMode::PersistentWithTtl { ttl_ms },
        (false, true, _, None) => CreateMode::PersistentSequential,
        (false, false, _, None) => CreateMode::Persistent,
    };
    Ok(mode)
}

pub async fn run_set(client: &Client, args: SetArgs, out: &Output) -> anyhow::Result<()> {
    let data = read_data(Some(&args.data))?;
    let stat = client.set_data(&args.path, data, args.version).await?;
    let document = json!({"path": args.path, "stat": output::stat_json(&stat)});
    out.print(&document, &stat.version.to_string())?;
    Ok(())
}

pub async fn run_sync(client: &Client, args: SyncArgs, out: &Output) -> anyhow::Result<()> {
    client.sync(&args.path).await?;
    out.print(&json!({"path": args.path}), "")?;
    Ok(())
}

/// The bytes of a DATA argument: its text, all of stdin for `-`, or nothing.
fn read_data(argument: Option<&str>) -> anyhow::Result<Vec<u8>> {
    match argument {
        None => Ok(Vec::new()),
        Some("-") => {
            let mut data = Vec::new();
            std::io::stdin()
                .lock()
                .read_to_end(&mut data)
                .context("cannot read data from stdin")?;
            Ok(data)
        }
        Some(text) => Ok(text.as_bytes().to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::ancestors;

    // Proves the ancestors of a path are listed root first, without the root and the path itself.
    #[test]
    fn ancestors_root_first() {
        assert_eq!(ancestors("/a/b/c"), ["/a", "/a/b"]);
        assert!(ancestors("/a").is_empty());
        assert!(ancestors("/").is_empty());
        assert_eq!(ancestors("/jobs/job-"), ["/jobs"]);
    }
}
