//! `ls [-l] PATH`: a node's children, by name or with their stats.

use arbor_client::{ChildEntry, Client};
use clap::Args;
use serde_json::{json, Value};

use crate::output::{self, Output, Paint};

#[derive(Debug, Args)]
pub struct LsArgs {
    /// Also show each child's version, data length, children and mtime.
    #[arg(short = 'l', long = "long")]
    long: bool,
    /// The node whose children to list.
    pub(crate) path: String,
}

pub async fn run(client: &Client, args: LsArgs, out: &Output) -> anyhow::Result<()> {
    let (mut children, _stat) = client.get_children_with_stat(&args.path).await?;
    children.sort_by(|a, b| a.name.cmp(&b.name));
    if !args.long {
        let names: Vec<&str> = children.iter().map(|child| child.name.as_str()).collect();
        let document = json!({"path": args.path, "children": names});
        let human: String = children
            .iter()
            .map(|child| format!("{}\n", painted_name(child, out)))
            .collect();
        out.print(&document, &human)?;
        return Ok(());
    }
    let entries: Vec<Value> = children
        .iter()
        .map(|child| json!({"name": child.name, "stat": output::stat_json(&child.stat)}))
        .collect();
    let document = json!({"path": args.path, "children": entries});
    let mut rows = vec![["NAME", "VERSION", "DATA_LENGTH", "NUM_CHILDREN", "MTIME"]
        .map(|heading| out.paint(heading, Paint::Heading))
        .to_vec()];
    rows.extend(children.iter().map(|child| {
        vec![
            painted_name(child, out),
            child.stat.version.to_string(),
            child.stat.data_length.to_string(),
            child.stat.num_children.to_string(),
            output::utc_datetime(child.stat.mtime_ms),
        ]
    }));
    let human = if children.is_empty() {
        String::new()
    } else {
        output::table(&rows)
    };
    out.print(&document, &human)?;
    Ok(())
}

/// A child's name, painted as a branch if it has children, or as ephemeral.
fn painted_name(child: &ChildEntry, out: &Output) -> String {
    if child.stat.num_children > 0 {
        out.paint(&child.name, Paint::Branch)
    } else if child.stat.ephemeral_owner != 0 {
        out.paint(&child.name, Paint::Ephemeral)
    } else {
        child.name.clone()
    }
}
