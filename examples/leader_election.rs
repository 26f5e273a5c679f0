//! Leader election: a few candidates campaign, the leader is killed, the next
//! in line takes over, and an observer reports each change.
//!
//! ```text
//! cargo run -p arbor-examples --example leader_election -- [--server ADDR] [--candidates 4]
//! ```
//!
//! Each candidate is its own client (its own session). "Killing" the leader
//! drops its client: the session closes, its candidate node goes, and the
//! candidate watching it — only that one — wakes and leads. Each leadership
//! carries a fencing token larger than the one before.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use arbor_client::recipes::Election;
use arbor_client::{Client, ClientOptions};
use tokio::sync::mpsc;

struct Args {
    server: String,
    candidates: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        server: std::env::var("ARBOR_SERVER").unwrap_or_else(|_| "127.0.0.1:7181".into()),
        candidates: 4,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--server" => args.server = value,
            "--candidates" => args.candidates = value.parse().context("--candidates")?,
            other => bail!("unknown flag {other}"),
        }
    }
    if args.candidates < 2 {
        bail!("--candidates must be at least 2");
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let start = Instant::now();
    let stamp = || format!("+{:05}ms", start.elapsed().as_millis());
    let path = format!("/election/demo-{}", std::process::id());
    let (elected_tx, mut elected_rx) = mpsc::channel(args.candidates);
    let mut candidates = Vec::new();
    for i in 0..args.candidates {
        let client = Client::connect(&args.server, ClientOptions::default())
            .await
            .with_context(|| format!("cannot reach {} (start arbord first)", args.server))?;
        let election = Election::new(&client, &path);
        let elected = elected_tx.clone();
        let task = tokio::spawn(async move {
            let leadership = election.campaign(format!("candidate-{i}")).await?;
            let _ = elected.send((i, leadership.fencing_token())).await;
            // Lead until killed: hold the leadership forever.
            std::future::pending::<()>().await;
            drop(leadership);
            Ok::<_, arbor_client::recipes::ElectionError>(())
        });
        candidates.push(Some((client, task)));
        // Queue in order, so the takeovers are easy to follow.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let observer_client = Client::connect(&args.server, ClientOptions::default()).await?;
    let mut observer = Election::new(&observer_client, &path).observe();
    let mut tokens = Vec::new();
    for round in 0..args.candidates {
        let (leader, token) = tokio::time::timeout(Duration::from_secs(30), elected_rx.recv())
            .await
            .context("no candidate took over")?
            .context("candidates are gone")?;
        let seen = observer.next().await?;
        println!(
            "{} candidate-{leader} leads with token {token:#x}; the observer sees {}",
            stamp(),
            String::from_utf8_lossy(&seen.value)
        );
        tokens.push(token);
        if round + 1 < args.candidates {
            let (client, task) = candidates[leader].take().context("leader already killed")?;
            task.abort();
            drop(client);
            println!("{} killed candidate-{leader}", stamp());
        }
    }
    let increasing = tokens.windows(2).all(|w| w[0] < w[1]);
    println!(
        "takeovers={} tokens_increasing={increasing}",
        tokens.len() - 1
    );
    if !increasing {
        bail!("fencing tokens did not increase: {tokens:x?}");
    }
    Ok(())
}
