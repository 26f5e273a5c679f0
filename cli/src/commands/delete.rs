//! `delete [-r] [-v VER] [-y] PATH`: one node, or with `-r` a subtree,
//! children first.
//!
//! A recursive delete lists the whole subtree before it deletes anything,
//! so it knows how many nodes go. More than [`DELETE_WITHOUT_ASKING_MAX`]
//! are deleted only if the person at the terminal says yes, or with `--yes`;
//! without a terminal to ask on (a script, a pipe) and without `--yes` it is
//! refused as a usage error, before any node is deleted. Large deletes show
//! their progress on stderr ([`Progress`]); stdout stays clean.

use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal, Read, Write};

use anyhow::bail;
use arbor_client::{Client, Error as ClientError};
use clap::Args;
use serde_json::json;

use super::child_path;
use crate::error::Usage;
use crate::output::Output;
use crate::progress::Progress;

/// The most nodes one `delete -r` removes.
pub const DELETE_NODES_MAX: usize = 100_000;

/// The most nodes `delete -r` deletes without asking (or `--yes`).
pub const DELETE_WITHOUT_ASKING_MAX: usize = 20;

/// From this many nodes on, listing and deleting show their progress.
pub const DELETE_PROGRESS_MIN: usize = 200;

/// The longest answer to the question read; the rest of the line is left.
const ANSWER_BYTES_MAX: u64 = 64;

#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// Delete the whole subtree, children first.
    #[arg(short = 'r', long)]
    recursive: bool,
    /// Only if the node's version is this one (checked on PATH itself).
    #[arg(short = 'v', long)]
    version: Option<i32>,
    /// With -r: delete more than 20 nodes without asking (needed to do so
    /// without a terminal).
    #[arg(short = 'y', long)]
    yes: bool,
    /// The node to delete.
    pub(crate) path: String,
}

pub async fn run(client: &Client, args: DeleteArgs, out: &Output) -> anyhow::Result<()> {
    if args.recursive && args.path == "/" {
        // The root itself cannot go; deleting everything under it is too
        // large a thing to do by one slip of a path.
        return Err(Usage {
            message: "refusing to delete -r / (every node on the server); delete its children \
                      one by one"
                .to_owned(),
        }
        .into());
    }
    let deleted = if args.recursive {
        delete_subtree(client, &args).await?
    } else {
        client.delete(&args.path, args.version).await?;
        1
    };
    out.print(&json!({"path": args.path, "deleted": deleted}), "")?;
    Ok(())
}

/// Deletes `args.path` and everything under it, children before parents,
/// once allowed to; returns how many nodes went. Nodes that vanish
/// meanwhile are skipped; nodes that appear meanwhile make the parent's
/// delete fail with `NotEmpty`.
async fn delete_subtree(client: &Client, args: &DeleteArgs) -> anyhow::Result<usize> {
    let root = args.path.as_str();
    if args.version.is_some() {
        // Check the version first so a mismatch deletes nothing.
        let (_data, stat) = client.get_data(root).await?;
        if Some(stat.version) != args.version {
            return Err(ClientError::BadVersion {
                path: root.to_owned(),
            }
            .into());
        }
    }
    let mut progress = Progress::new();
    let order = list_subtree(client, root, &mut progress).await?;
    if order.len() > DELETE_WITHOUT_ASKING_MAX && !args.yes {
        progress.clear();
        allowed_to_delete(order.len(), root)?;
    }
    let large = order.len() >= DELETE_PROGRESS_MIN;
    let mut deleted = 0;
    for path in order.iter().rev() {
        let expected = if path == root { args.version } else { None };
        match client.delete(path, expected).await {
            Ok(()) => deleted += 1,
            Err(ClientError::NoNode { .. }) if path != root => {}
            Err(err) => {
                progress.clear();
                return Err(err.into());
            }
        }
        if large {
            progress.update(|| format!("deleted {deleted} of {} nodes under {root}", order.len()));
        }
    }
    if large {
        progress.finish(&format!("deleted {deleted} nodes under {root}"));
    }
    Ok(deleted)
}

/// `root` and every node under it, parents before children: deleting it in
/// reverse removes children first. Only nodes that have children are
/// listed (their stats say so), so leaves cost no request. At most
/// [`DELETE_NODES_MAX`] nodes.
async fn list_subtree(
    client: &Client,
    root: &str,
    progress: &mut Progress,
) -> anyhow::Result<Vec<String>> {
    let mut order = vec![root.to_owned()];
    // Indexes in `order` of the nodes still to list.
    let mut to_list = VecDeque::from([0]);
    while let Some(index) = to_list.pop_front() {
        let path = order[index].clone();
        let children = match client.get_children_with_stat(&path).await {
            Ok((children, _stat)) => children,
            Err(ClientError::NoNode { .. }) if path != root => continue,
            Err(err) => {
                progress.clear();
                return Err(err.into());
            }
        };
        if order.len() + children.len() > DELETE_NODES_MAX {
            progress.clear();
            bail!("more than {DELETE_NODES_MAX} nodes under {root}; nothing deleted");
        }
        for child in children {
            if child.stat.num_children > 0 {
                to_list.push_back(order.len());
            }
            order.push(child_path(&path, &child.name));
        }
        if order.len() >= DELETE_PROGRESS_MIN {
            progress.update(|| format!("listing {root}: {} nodes so far", order.len()));
        }
    }
    Ok(order)
}

/// Whether the person at the terminal lets `count` nodes under `root` go;
/// without a terminal to ask on, a usage error saying to pass `--yes`.
fn allowed_to_delete(count: usize, root: &str) -> anyhow::Result<()> {
    let nothing = || -> anyhow::Error {
        Usage {
            message: format!(
                "delete -r would delete {count} nodes under {root} (more than \
                 {DELETE_WITHOUT_ASKING_MAX}) and there is no terminal to ask on; pass --yes \
                 to delete them; nothing deleted"
            ),
        }
        .into()
    };
    // The question must be seen and answered by a person.
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return Err(nothing());
    }
    let question = format!("delete {count} nodes under {root}? [y/N] ");
    // A plain blocking read: it must not hold up the runtime's worker,
    // which keeps the session alive meanwhile.
    let answer = tokio::task::block_in_place(|| ask(&question))?;
    if !answer {
        bail!("not confirmed; nothing deleted ({root})");
    }
    Ok(())
}

/// Writes `question` to stderr and reads one line of answer from stdin: yes
/// only for `y` or `yes` (any case); an empty line or end of input is no.
fn ask(question: &str) -> anyhow::Result<bool> {
    let mut stderr = std::io::stderr().lock();
    stderr.write_all(question.as_bytes())?;
    stderr.flush()?;
    let mut answer = Vec::new();
    std::io::stdin()
        .lock()
        .take(ANSWER_BYTES_MAX)
        .read_until(b'\n', &mut answer)?;
    Ok(is_yes(&answer))
}

fn is_yes(answer: &[u8]) -> bool {
    let answer = String::from_utf8_lossy(answer);
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

#[cfg(test)]
mod tests {
    use super::is_yes;

    // Proves only `y` and `yes` (any case, blanks around) agree; everything else, an empty line too, is no.
    #[test]
    fn only_yes_is_yes() {
        for yes in [&b"y\n"[..], b"Y\n", b" yes \r\n", b"YES"] {
            assert!(is_yes(yes), "{yes:?}");
        }
        for no in [
            &b"\n"[..],
            b"",
            b"n\n",
            b"no\n",
            b"yess\n",
            b"y y\n",
            b"\xff\n",
        ] {
            assert!(!is_yes(no), "{no:?}");
        }
    }
}
