//! `locks [PATH]`: every lock, read-write lock and election queue under
//! PATH: who holds it (session and fencing token) and who waits, in order,
//! and for how long.
//!
//! The queues are found by their participant names
//! ([`inspect`](arbor_client::recipes::inspect)), so this shows the client's
//! recipes and Curator's alike. Ages are the local clock minus the node's
//! creation time on the server: close enough on one machine or with NTP.
//! Tokens are shown in hex for people, as `arbor stat` shows the czxid they
//! are; JSON has them as numbers, as `Guard::fencing_token` returns them.

use arbor_client::recipes::inspect::{self, Participant, Queue, Role};
use arbor_client::Client;
use clap::Args;
use serde_json::{json, Value};

use crate::duration;
use crate::output::{self, Output, Paint};

#[derive(Debug, Args)]
pub struct LocksArgs {
    /// Where to look (the whole subtree is searched).
    #[arg(default_value = "/")]
    pub(crate) path: String,
}

pub async fn run(client: &Client, args: LocksArgs, out: &Output) -> anyhow::Result<()> {
    let queues = inspect::find_queues(client, &args.path).await?;
    let now_ms = now_ms();
    let document = json!({
        "path": args.path,
        "queues": queues.iter().map(|q| queue_json(q, now_ms)).collect::<Vec<_>>(),
    });
    let human = if queues.is_empty() {
        format!("no lock queues under {}", args.path)
    } else {
        queues
            .iter()
            .map(|queue| queue_human(queue, now_ms, out))
            .collect::<Vec<_>>()
            .join("\n")
    };
    out.print(&document, &human)?;
    Ok(())
}

/// What kind of recipe a queue belongs to, by its participants' roles.
fn kind(queue: &Queue) -> &'static str {
    let only = |roles: &[Role]| queue.participants.iter().all(|p| roles.contains(&p.role));
    if only(&[Role::Lock]) {
        "lock"
    } else if only(&[Role::Read, Role::Write]) {
        "rwlock"
    } else if only(&[Role::Candidate]) {
        "election"
    } else {
        "mixed"
    }
}

fn queue_json(queue: &Queue, now_ms: u64) -> Value {
    let entry = |p: &Participant| {
        json!({
            "node": p.name,
            "role": p.role.name(),
            "session_id": output::hex_id(p.session_id),
            "fencing_token": p.fencing_token,
            "ctime": p.created_ms,
            "age_ms": now_ms.saturating_sub(p.created_ms),
        })
    };
    json!({
        "path": queue.path,
        "kind": kind(queue),
        "holders": queue.holders().map(entry).collect::<Vec<_>>(),
        "waiters": queue.waiters().map(entry).collect::<Vec<_>>(),
    })
}

/// A heading line and one aligned row per participant, holders first.
fn queue_human(queue: &Queue, now_ms: u64, out: &Output) -> String {
    let holders = queue.holders().count();
    let waiters = queue.participants.len() - holders;
    let mut text = format!(
        "{}  {}, {} held, {} waiting\n",
        out.paint(&queue.path, Paint::Branch),
        kind(queue),
        holders,
        waiters
    );
    let mut rows = vec![["", "STATE", "ROLE", "SESSION", "TOKEN", "AGE", "NODE"]
        .map(|h| out.paint(h, Paint::Heading))
        .to_vec()];
    let mut waiting = 0;
    for participant in &queue.participants {
        let (position, state) = if participant.holds {
            (String::new(), out.paint("holds", Paint::Holder))
        } else {
            waiting += 1;
            (waiting.to_string(), out.paint("waits", Paint::Waiter))
        };
        rows.push(vec![
            position,
            state,
            participant.role.name().to_owned(),
            output::hex_id(participant.session_id),
            output::hex_id(participant.fencing_token),
            duration::human(now_ms.saturating_sub(participant.created_ms)),
            participant.name.clone(),
        ]);
    }
    for line in output::table(&rows).lines() {
        text.push_str("  ");
        text.push_str(line);
        text.push('\n');
    }
    text
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
