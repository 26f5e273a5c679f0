//! `export PATH [FILE]` and `import FILE [--to PATH]`: a subtree as JSON,
//! to move configuration between clusters or keep it in version control.
//!
//! ```json
//! {"format": "arbor-export", "version": 1, "root": "/app",
//!  "nodes": [{"path": "", "data": "v1", "encoding": "utf8", "acl": ["world:anyone:cdrwa"]},
//!            {"path": "config", "data": "6d61", "encoding": "hex", "acl": [...]}]}
//! ```
//!
//! Paths are relative to the root, parents before children. What is
//! carried: each node's data and ACL. What is not: ephemeral nodes (they
//! belong to a session; they are skipped and counted), stats (the target
//! gives its own zxids and versions), and the node's kind: the protocol
//! does not tell a container or a TTL node from a persistent one, so all
//! come back persistent. A digest ACL entry is exported only when the
//! session may see its hash (ADMIN on the node); otherwise the export stops
//! and says so, rather than write an ACL that would lock everyone out.

use std::path::PathBuf;

use anyhow::{bail, Context};
use arbor_client::acl::{Acl, DIGEST};
use arbor_client::{Client, CreateMode, Error as ClientError};
use clap::Args;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::data::{for_json, Encoding};
use crate::output::Output;
use crate::Global;

/// The most nodes one export holds: the whole subtree is kept in memory and
/// written as one document.
pub const EXPORT_NODES_MAX: usize = 100_000;

/// The largest file `import` reads.
pub const IMPORT_FILE_BYTES_MAX: u64 = 256 * 1024 * 1024;

const FORMAT: &str = "arbor-export";
const VERSION: u32 = 1;

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The subtree's root.
    pub path: String,
    /// Where to write the JSON (`-` or nothing: standard output).
    pub file: Option<PathBuf>,
    /// Leave ACLs out: imported nodes get the open ACL.
    #[arg(long)]
    pub no_acl: bool,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The export to read (`-`: standard input).
    pub file: PathBuf,
    /// Where the export's root goes (default: where it came from).
    #[arg(long, value_name = "PATH")]
    pub to: Option<String>,
    /// Replace the data (and ACL) of nodes that exist, instead of stopping
    /// at the first one.
    #[arg(long)]
    pub overwrite: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct Export {
    format: String,
    version: u32,
    root: String,
    nodes: Vec<ExportedNode>,
}

#[derive(Debug, Serialize, Deserialize)]
struct ExportedNode {
    /// Relative to the root; empty for the root itself.
    path: String,
    data: String,
    encoding: String,
    /// `scheme:id:perms` entries; absent with `--no-acl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    acl: Option<Vec<String>>,
}

fn join(root: &str, relative: &str) -> String {
    match (root, relative) {
        (root, "") => root.to_owned(),
        ("/", relative) => format!("/{relative}"),
        (root, relative) => format!("{root}/{relative}"),
    }
}

pub async fn run_export(global: &Global, args: ExportArgs, out: &Output) -> anyhow::Result<()> {
    let client = super::connect(global).await?;
    let exported = export(&client, &args.path, !args.no_acl).await;
    client.close().await.ok();
    let (export, skipped) = exported?;
    let text = serde_json::to_string_pretty(&export).context("the export as JSON")?;
    let summary = json!({
        "root": export.root,
        "nodes": export.nodes.len(),
        "ephemerals_skipped": skipped,
    });
    match args.file.as_deref().filter(|f| f.as_os_str() != "-") {
        Some(file) => {
            std::fs::write(file, format!("{text}\n"))
                .with_context(|| format!("cannot write {}", file.display()))?;
            let human = format!(
                "exported {} nodes under {} to {} ({skipped} ephemerals skipped)\n",
                export.nodes.len(),
                export.root,
                file.display()
            );
            out.print(&summary, &human)?;
        }
        None => println!("{text}"),
    }
    Ok(())
}

/// The subtree at `root`, parents first; and how many ephemerals were left
/// out.
async fn export(client: &Client, root: &str, with_acl: bool) -> anyhow::Result<(Export, usize)> {
    let mut nodes = Vec::new();
    let mut skipped = 0;
    let mut pending = vec![String::new()];
    while let Some(relative) = pending.pop() {
        let path = join(root, &relative);
        let (data, stat) = match client.get_data(&path).await {
            Ok(found) => found,
            // Deleted while the export ran: it is not in the subtree now.
            Err(ClientError::NoNode { .. }) if !relative.is_empty() => continue,
            Err(err) => return Err(err.into()),
        };
        if stat.ephemeral_owner != 0 {
            skipped += 1;
            continue;
        }
        if nodes.len() == EXPORT_NODES_MAX {
            bail!("{root} has more than {EXPORT_NODES_MAX} nodes; export smaller subtrees");
        }
        let acl = if with_acl {
            let (acl, _) = client.get_acl(&path).await?;
            if let Some(hidden) = acl.iter().find(|entry| hides_digest(entry)) {
                bail!(
                    "the ACL of {path} hides the hash of its digest entry {} (reading it needs ADMIN on the node): \
                     export as a user with ADMIN (--auth), or with --no-acl",
                    hidden.id.id
                );
            }
            Some(acl.iter().map(ToString::to_string).collect())
        } else {
            None
        };
        let (text, encoding) = for_json(&data);
        nodes.push(ExportedNode {
            path: relative.clone(),
            data: text,
            encoding: encoding.name().to_owned(),
            acl,
        });
        let mut children = client.get_children(&path).await?;
        // Popped from the end: reversed, so siblings go out in name order.
        children.sort();
        for child in children.into_iter().rev() {
            pending.push(if relative.is_empty() {
                child
            } else {
                format!("{relative}/{child}")
            });
        }
    }
    // Depth first left parents before children; keep that order.
    Ok((
        Export {
            format: FORMAT.to_owned(),
            version: VERSION,
            root: root.to_owned(),
            nodes,
        },
        skipped,
    ))
}

/// A digest entry whose hash the server left out (`user:x`).
fn hides_digest(entry: &Acl) -> bool {
    entry.id.scheme == DIGEST && entry.id.id.ends_with(":x")
}

pub async fn run_import(global: &Global, args: ImportArgs, out: &Output) -> anyhow::Result<()> {
    let text = read_import(&args.file)?;
    let export: Export = serde_json::from_str(&text)
        .with_context(|| format!("{} is not an arbor export", args.file.display()))?;
    if export.format != FORMAT || export.version != VERSION {
        bail!(
            "{} is format {:?} version {}; this arbor reads {FORMAT:?} version {VERSION}",
            args.file.display(),
            export.format,
            export.version
        );
    }
    let root = args.to.clone().unwrap_or_else(|| export.root.clone());
    // Everything is checked before anything is written.
    let mut planned = Vec::with_capacity(export.nodes.len());
    for node in &export.nodes {
        let data = decode(&node.data, &node.encoding)
            .with_context(|| format!("the data of {:?} in the export", node.path))?;
        let acl = match &node.acl {
            Some(entries) => {
                let parsed: Result<Vec<Acl>, _> = entries.iter().map(|e| Acl::parse(e)).collect();
                Some(parsed.with_context(|| format!("the ACL of {:?} in the export", node.path))?)
            }
            None => None,
        };
        planned.push(Planned {
            path: join(&root, &node.path),
            data,
            acl,
        });
    }
    let client = super::connect(global).await?;
    let imported = import(&client, &planned, args.overwrite).await;
    client.close().await.ok();
    let (created, replaced) = imported?;
    let document = json!({ "root": root, "created": created, "replaced": replaced });
    let human = format!("imported under {root}: {created} nodes created, {replaced} replaced\n");
    out.print(&document, &human)?;
    Ok(())
}

/// A node to create, checked before anything is written.
struct Planned {
    path: String,
    data: Vec<u8>,
    acl: Option<Vec<Acl>>,
}

fn read_import(file: &std::path::Path) -> anyhow::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    if file.as_os_str() == "-" {
        std::io::stdin()
            .take(IMPORT_FILE_BYTES_MAX + 1)
            .read_to_string(&mut text)
            .context("cannot read standard input")?;
    } else {
        std::fs::File::open(file)
            .and_then(|f| f.take(IMPORT_FILE_BYTES_MAX + 1).read_to_string(&mut text))
            .with_context(|| format!("cannot read {}", file.display()))?;
    }
    if text.len() as u64 > IMPORT_FILE_BYTES_MAX {
        bail!("{} is over {IMPORT_FILE_BYTES_MAX} bytes", file.display());
    }
    Ok(text)
}

async fn import(
    client: &Client,
    planned: &[Planned],
    overwrite: bool,
) -> anyhow::Result<(usize, usize)> {
    let (mut created, mut replaced) = (0, 0);
    for Planned { path, data, acl } in planned {
        let made = match acl {
            Some(acl) => client
                .create_with_acl(path, data.clone(), CreateMode::Persistent, acl.clone())
                .await
                .map(|_| ()),
            None => client
                .create(path, data.clone(), CreateMode::Persistent)
                .await
                .map(|_| ()),
        };
        match made {
            Ok(()) => created += 1,
            Err(ClientError::NodeExists { .. }) if overwrite || path == "/" => {
                client.set_data(path, data.clone(), None).await?;
                if let Some(acl) = acl {
                    client.set_acl(path, acl.clone(), None).await?;
                }
                replaced += 1;
            }
            Err(err) => {
                return Err(anyhow::Error::new(err).context(format!(
                    "stopped at {path} after creating {created} nodes (--overwrite replaces nodes that exist)"
                )))
            }
        }
    }
    Ok((created, replaced))
}

/// Data as [`for_json`] wrote it.
fn decode(text: &str, encoding: &str) -> anyhow::Result<Vec<u8>> {
    if encoding == Encoding::Utf8.name() {
        return Ok(text.as_bytes().to_vec());
    }
    if encoding != Encoding::Hex.name() {
        bail!("unknown encoding {encoding:?} (utf8 or hex)");
    }
    if !text.len().is_multiple_of(2) {
        bail!("hex data of odd length");
    }
    (0..text.len())
        .step_by(2)
        .map(|at| {
            u8::from_str_radix(&text[at..at + 2], 16)
                .with_context(|| format!("{:?} is not hex", &text[at..at + 2]))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves data round-trips through both encodings.
    #[test]
    fn data_round_trips() {
        for data in [b"plain text".to_vec(), vec![0, 1, 0xff, b'\n'], Vec::new()] {
            let (text, encoding) = for_json(&data);
            assert_eq!(decode(&text, encoding.name()).expect("decoded"), data);
        }
        assert!(decode("0g", "hex").is_err());
        assert!(decode("abc", "base64").is_err());
    }

    // Proves paths are joined under any root, `/` included.
    #[test]
    fn paths_join_under_the_root() {
        assert_eq!(join("/", ""), "/");
        assert_eq!(join("/", "a/b"), "/a/b");
        assert_eq!(join("/app", "a"), "/app/a");
        assert_eq!(join("/app", ""), "/app");
    }
}
