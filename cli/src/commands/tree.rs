//! `tree [--depth N] PATH`: a subtree, fetched level by level.
//!
//! Only nodes that have children and lie above the depth limit are asked for
//! their children, so the walk sends no request it does not need. The walk
//! stops with an error past [`TREE_NODES_MAX`] nodes rather than grow without
//! bound.

use std::future::Future;
use std::pin::Pin;

use anyhow::bail;
use arbor_client::{Client, Error as ClientError};
use clap::Args;
use serde_json::{json, Value};

use super::child_path;
use crate::output::{Output, Paint};

/// The most nodes one `tree` prints.
pub const TREE_NODES_MAX: usize = 100_000;

#[derive(Debug, Args)]
pub struct TreeArgs {
    /// Levels below PATH to show (0: PATH alone); no limit by default.
    #[arg(long)]
    depth: Option<u32>,
    /// The root of the subtree.
    pub(crate) path: String,
}

/// One node of the walked subtree.
struct TreeNode {
    path: String,
    name: String,
    /// Whether it has children that were not fetched (depth limit).
    truncated: bool,
    /// Whether its children could not be listed: its ACL does not let this
    /// session read it. The rest of the tree is still shown.
    unreadable: bool,
    children: Vec<TreeNode>,
}

pub async fn run(client: &Client, args: TreeArgs, out: &Output) -> anyhow::Result<()> {
    let stat = client
        .exists(&args.path)
        .await?
        .ok_or_else(|| ClientError::NoNode {
            path: args.path.clone(),
        })?;
    let mut budget = TREE_NODES_MAX;
    let root = walk(
        client,
        args.path.clone(),
        args.path.clone(),
        stat.num_children,
        args.depth,
        true,
        &mut budget,
    )
    .await?;
    let mut human = format!("{}\n", out.paint(&root.path, Paint::Branch));
    render(&root, "", out, &mut human);
    out.print(&to_json(&root), &human)?;
    Ok(())
}

/// Fetches the subtree under `path` down to `depth` more levels.
fn walk<'a>(
    client: &'a Client,
    path: String,
    name: String,
    num_children: u32,
    depth: Option<u32>,
    root: bool,
    budget: &'a mut usize,
) -> Pin<Box<dyn Future<Output = anyhow::Result<TreeNode>> + 'a>> {
    Box::pin(async move {
        let mut node = TreeNode {
            path,
            name,
            truncated: false,
            unreadable: false,
            children: Vec::new(),
        };
        if num_children == 0 {
            return Ok(node);
        }
        if depth == Some(0) {
            node.truncated = true;
            return Ok(node);
        }
        let mut children = match client.get_children_with_stat(&node.path).await {
            Ok((children, _stat)) => children,
            // Deleted since its parent was listed: show it without children.
            Err(ClientError::NoNode { .. }) => return Ok(node),
            // Below the root, one closed subtree does not hide the others; the
            // root's own refusal is the command's (exit 9).
            Err(ClientError::NoAuth) if !root => {
                node.unreadable = true;
                return Ok(node);
            }
            Err(err) => return Err(err.into()),
        };
        children.sort_by(|a, b| a.name.cmp(&b.name));
        if children.len() > *budget {
            bail!("more than {TREE_NODES_MAX} nodes under the path; use --depth");
        }
        *budget -= children.len();
        for child in children {
            let path = child_path(&node.path, &child.name);
            let below = depth.map(|depth| depth - 1);
            let subtree = walk(
                client,
                path,
                child.name,
                child.stat.num_children,
                below,
                false,
                budget,
            )
            .await?;
            node.children.push(subtree);
        }
        Ok(node)
    })
}

fn to_json(node: &TreeNode) -> Value {
    let children: Vec<Value> = node.children.iter().map(to_json).collect();
    let mut document = json!({"path": node.path, "children": children});
    if node.truncated {
        document["truncated"] = Value::Bool(true);
    }
    if node.unreadable {
        document["unreadable"] = Value::Bool(true);
    }
    document
}

/// Appends `node`'s children as an indented tree, each line after `prefix`.
fn render(node: &TreeNode, prefix: &str, out: &Output, text: &mut String) {
    let count = node.children.len();
    for (index, child) in node.children.iter().enumerate() {
        let last = index + 1 == count;
        let branch = if last { "└── " } else { "├── " };
        let more = match (child.truncated, child.unreadable) {
            (true, _) => "/…",
            (_, true) => " (not authorized)",
            _ => "",
        };
        let name = if child.truncated || child.unreadable || !child.children.is_empty() {
            out.paint(&child.name, Paint::Branch)
        } else {
            child.name.clone()
        };
        text.push_str(&format!("{prefix}{branch}{name}{more}\n"));
        let deeper = format!("{prefix}{}", if last { "    " } else { "│   " });
        render(child, &deeper, out, text);
    }
}
