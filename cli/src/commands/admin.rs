//! The operator's commands, over the client port (each needs ADMIN on `/`):
//! `server stat|conf|cons|sessions|watches` print the server's reports (the
//! admin port's `/commands` pages), `session close ID` evicts a stuck
//! client, and `backup FILE` writes a consistent snapshot of a live server
//! that `arbord restore` starts from.

use std::path::PathBuf;

use anyhow::Context;
use arbor_client::{Client, ServerReport};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::output::{hex_id, table, Output};
use crate::Global;

#[derive(Debug, Subcommand)]
pub enum ServerCommand {
    /// The server's figures: mode, zxid, znodes, sessions, connections,
    /// requests by op, latency, log and snapshots.
    Stat,
    /// The settings in force, under their config file names.
    Conf,
    /// Connections that serve a session: session, client address, timeout.
    Cons,
    /// Every session: timeout, client address, ephemerals and watches.
    Sessions,
    /// Watch counts by kind.
    Watches,
}

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// End a session as if it had expired: its ephemerals (and the locks
    /// they are) go, its client is told its session expired.
    Close {
        /// The session id, as the CLI and the logs print it (`0x1a2b…`).
        id: String,
    },
}

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// Where to write the backup (replaced if it exists).
    pub file: PathBuf,
}

pub async fn run_server(
    global: &Global,
    command: ServerCommand,
    out: &Output,
) -> anyhow::Result<()> {
    let report = match command {
        ServerCommand::Stat => ServerReport::Stat,
        ServerCommand::Conf => ServerReport::Conf,
        ServerCommand::Cons => ServerReport::Connections,
        ServerCommand::Sessions => ServerReport::Sessions,
        ServerCommand::Watches => ServerReport::Watches,
    };
    let client = super::connect(global).await?;
    let answered = client.server_report(report).await;
    client.close().await.ok();
    let document: Value =
        serde_json::from_str(&answered?).context("the server's report is not JSON")?;
    let human = match command {
        ServerCommand::Stat => stat_human(&document),
        ServerCommand::Conf | ServerCommand::Watches => key_values(&document, ""),
        ServerCommand::Cons => rows(
            &document["connections"],
            &["SESSION", "PEER", "TIMEOUT_MS"],
            &["session_id", "peer", "timeout_ms"],
        ),
        ServerCommand::Sessions => rows(
            &document["sessions"],
            &["SESSION", "TIMEOUT_MS", "PEER", "EPHEMERALS", "WATCHES"],
            &["session_id", "timeout_ms", "peer", "ephemerals", "watches"],
        ),
    };
    let truncated = document["truncated"] == true;
    let mut human = human;
    if truncated {
        human.push_str("(cut: the server lists at most 10 000 entries)\n");
    }
    out.print(&document, &human)?;
    Ok(())
}

pub async fn run_session(
    global: &Global,
    command: SessionCommand,
    out: &Output,
) -> anyhow::Result<()> {
    let SessionCommand::Close { id } = command;
    let session_id = parse_session_id(&id)?;
    let client = super::connect(global).await?;
    let closed = client.evict_session(session_id).await;
    client.close().await.ok();
    match closed {
        Ok(()) => {}
        Err(arbor_client::Error::NoNode { .. }) => {
            anyhow::bail!(crate::error::NoSuchSession {
                id: hex_id(session_id)
            })
        }
        Err(err) => return Err(err.into()),
    }
    let document = json!({ "closed": hex_id(session_id) });
    out.print(
        &document,
        &format!("closed session {}\n", hex_id(session_id)),
    )?;
    Ok(())
}

pub async fn run_backup(global: &Global, args: BackupArgs, out: &Output) -> anyhow::Result<()> {
    let client = super::connect(global).await?;
    let result = backup_to(&client, &args.file).await;
    client.close().await.ok();
    let info = result?;
    let document = json!({
        "file": args.file.display().to_string(),
        "zxid": info.zxid,
        "nodes": info.nodes,
        "sessions": info.sessions,
        "bytes": info.bytes,
        "crc32c": format!("{:#010x}", info.crc32c),
    });
    let human = format!(
        "backup of {} nodes and {} sessions as of zxid {} written to {} ({} bytes, crc32c {:#010x})\n\
         restore it with: arbord restore {} --data-dir NEW_DIR\n",
        info.nodes,
        info.sessions,
        hex_id(info.zxid),
        args.file.display(),
        info.bytes,
        info.crc32c,
        args.file.display(),
    );
    out.print(&document, &human)?;
    Ok(())
}

/// Writes the backup next to `file` first and renames it into place once
/// it has arrived whole: a failed backup never leaves a truncated file
/// under the name asked for.
async fn backup_to(
    client: &Client,
    file: &std::path::Path,
) -> anyhow::Result<arbor_client::BackupInfo> {
    let partial = file.with_extension("partial");
    let mut out = tokio::fs::File::create(&partial)
        .await
        .with_context(|| format!("cannot create {}", partial.display()))?;
    let info = match client.backup(&mut out).await {
        Ok(info) => info,
        Err(err) => {
            drop(out);
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(err.into());
        }
    };
    out.sync_all()
        .await
        .with_context(|| format!("cannot write {}", partial.display()))?;
    drop(out);
    tokio::fs::rename(&partial, file)
        .await
        .with_context(|| format!("cannot rename {} to {}", partial.display(), file.display()))?;
    Ok(info)
}

/// A session id as the tools print it (`0x1a2b`), or in decimal.
fn parse_session_id(text: &str) -> anyhow::Result<u64> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.ok().filter(|id| *id != 0).ok_or_else(|| {
        anyhow::Error::new(crate::error::Usage {
            message: format!("{text:?} is not a session id (e.g. 0x1a2b3c)"),
        })
    })
}

/// `stat` for people: the figures that matter first, one per line.
fn stat_human(document: &Value) -> String {
    let text = |value: &Value| match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    };
    let mut rows: Vec<Vec<String>> = [
        ("mode", &document["mode"]),
        ("version", &document["version"]),
        ("uptime_seconds", &document["uptime_seconds"]),
        ("last_zxid", &document["last_zxid"]),
        ("znodes", &document["znodes"]),
        ("data_bytes", &document["data_bytes"]),
        ("ephemerals", &document["ephemerals"]),
        ("sessions", &document["sessions"]),
        ("connections", &document["connections"]),
        ("watches", &document["watches"]),
        ("outstanding_requests", &document["outstanding_requests"]),
        ("log_segments", &document["log"]["segments"]),
        ("log_bytes", &document["log"]["bytes"]),
        ("snapshots", &document["snapshots"]["files"]),
        (
            "snapshot_age_seconds",
            &document["snapshots"]["age_seconds"],
        ),
    ]
    .into_iter()
    .map(|(name, value)| vec![name.to_owned(), text(value)])
    .collect();
    if let Some(latency) = document["latency"].as_object() {
        for (class, figures) in latency {
            rows.push(vec![
                format!("latency_{class}"),
                format!(
                    "{} requests, mean {} µs",
                    text(&figures["count"]),
                    text(&figures["mean_us"])
                ),
            ]);
        }
    }
    if let Some(requests) = document["requests"].as_object() {
        for (op, results) in requests {
            let results: Vec<String> = results
                .as_object()
                .into_iter()
                .flatten()
                .map(|(result, count)| format!("{result} {count}"))
                .collect();
            rows.push(vec![format!("requests_{op}"), results.join(", ")]);
        }
    }
    if document["ensemble"].is_object() {
        let ensemble = &document["ensemble"];
        for key in [
            "member_id",
            "leader",
            "term",
            "last_log_index",
            "applied_index",
        ] {
            rows.push(vec![format!("ensemble_{key}"), text(&ensemble[key])]);
        }
    }
    table(&rows)
}

/// Every leaf of a JSON object as `key value`, nested keys joined by `.`.
fn key_values(document: &Value, prefix: &str) -> String {
    let mut rows = Vec::new();
    flatten(document, prefix, &mut rows);
    table(&rows)
}

fn flatten(value: &Value, prefix: &str, rows: &mut Vec<Vec<String>>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let name = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten(inner, &name, rows);
            }
        }
        Value::String(text) => rows.push(vec![prefix.to_owned(), text.clone()]),
        Value::Null => rows.push(vec![prefix.to_owned(), "-".to_owned()]),
        other => rows.push(vec![prefix.to_owned(), other.to_string()]),
    }
}

/// A list of objects as a table with `headings`, one column per key.
fn rows(list: &Value, headings: &[&str], keys: &[&str]) -> String {
    let mut rows = vec![headings.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>()];
    for item in list.as_array().into_iter().flatten() {
        rows.push(
            keys.iter()
                .map(|key| match &item[*key] {
                    Value::String(text) => text.clone(),
                    Value::Null => "-".to_owned(),
                    other => other.to_string(),
                })
                .collect(),
        );
    }
    table(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves ids are read in the tools' hex form and in decimal, and that
    // anything else is a usage error.
    #[test]
    fn session_ids_are_read_as_printed() {
        assert_eq!(parse_session_id("0x1a").expect("hex"), 0x1a);
        assert_eq!(parse_session_id("26").expect("decimal"), 26);
        assert!(parse_session_id("0x").is_err());
        assert!(parse_session_id("0").is_err());
        assert!(parse_session_id("zz").is_err());
    }

    // Proves nested settings print as dotted keys.
    #[test]
    fn nested_keys_are_dotted() {
        let text = key_values(&json!({"a": 1, "b": {"c": "x", "d": null}}), "");
        assert!(text.contains("b.c") && text.contains("b.d"), "{text}");
    }
}
