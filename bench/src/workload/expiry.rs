//! `expiry`: how precisely a silent session is expired.
//!
//! Each round a victim session connects through the in-process [`Proxy`] and
//! creates an ephemeral node; a watcher session (direct) sets an exists watch
//! on it. Then the proxy blackholes the victim — nothing forwarded either way,
//! sockets left open, so the server hears nothing more, not even a FIN. The
//! round ends when the watcher sees the node deleted.
//!
//! `observed` = deletion seen − the last instant the proxy wrote victim bytes
//! to the server (the server's last sign of life), which is what a session
//! timeout is measured from. `from_blackhole_ms` is timed from the blackhole
//! itself, for reference.

use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use super::{fresh_root, Env, Rng};
use crate::proxy::Proxy;
use crate::stats::{micros, round3, Report, Summary};
use crate::target::{ConnectOptions, NodeMode, Session, WatchOutcome};

/// Pause between the ephemeral's creation and the blackhole: at least this,
/// plus a random share of half the session timeout, so that the last
/// heartbeat falls at a random phase of the server's expiry tick (rounds run
/// back to back would otherwise all start right after a tick and all see the
/// same, worst-case rounding).
const BEFORE_BLACKHOLE: Duration = Duration::from_millis(100);
/// Waiting for the deletion fails after 3 × the timeout plus this.
const EXPIRY_GRACE: Duration = Duration::from_secs(10);

#[derive(clap::Args, Clone, Debug)]
pub struct ExpiryArgs {
    /// Session timeout the victim asks for, in milliseconds.
    #[arg(long, default_value_t = 4000)]
    pub session_timeout_ms: u64,
    /// Victim sessions expired, one after the other.
    #[arg(long, default_value_t = 3)]
    pub rounds: u64,
}

pub async fn run(env: &Env, args: &ExpiryArgs) -> Result<Report> {
    if args.rounds == 0 || args.session_timeout_ms == 0 {
        return Err(anyhow!(
            "--rounds and --session-timeout-ms must be positive"
        ));
    }
    let timeout = Duration::from_millis(args.session_timeout_ms);
    let watcher = env.connect(&ConnectOptions::default()).await?;
    let root = fresh_root("expiry");
    watcher.ensure(&root, &[]).await?;
    let mut observed = Vec::new();
    let mut from_blackhole = Vec::new();
    let mut negotiated = Duration::ZERO;
    let mut rng = Rng::new(u64::from(std::process::id()));
    let started = Instant::now();
    for round in 0..args.rounds {
        let proxy = Proxy::start(&env.server).await?;
        let options = ConnectOptions {
            session_timeout: timeout,
            ..ConnectOptions::default()
        };
        let victim = Session::connect(env.kind, &proxy.addr(), &options).await?;
        negotiated = victim.negotiated_timeout();
        let path = format!("{root}/victim-{round}");
        victim.create(&path, &[], NodeMode::Ephemeral).await?;
        let watch = watcher
            .exists_watch(&path)
            .await?
            .ok_or_else(|| anyhow!("{path} vanished before the blackhole"))?;
        let jitter = negotiated.mul_f64((rng.next() % 1000) as f64 / 2000.0);
        tokio::time::sleep(BEFORE_BLACKHOLE + jitter).await;
        eprintln!(
            "arbor-bench: expiry: round {}/{}: blackholing a session with a {} ms timeout",
            round + 1,
            args.rounds,
            negotiated.as_millis()
        );
        let blackholed = proxy.blackhole();
        let limit = negotiated * 3 + EXPIRY_GRACE;
        let outcome = tokio::time::timeout(limit, watch.fired())
            .await
            .map_err(|_| anyhow!("{path} still there {limit:?} after the blackhole"))??;
        let seen = Instant::now();
        if outcome != WatchOutcome::Deleted {
            return Err(anyhow!(
                "watch on {path} fired with {outcome:?}, not a deletion"
            ));
        }
        let last_heard = proxy.last_to_server().unwrap_or(blackholed);
        observed.push(seen.saturating_duration_since(last_heard));
        from_blackhole.push(seen.saturating_duration_since(blackholed));
        // The victim's session is gone; its client only learns on reconnect.
        drop(victim);
        drop(proxy);
    }
    let elapsed = started.elapsed();
    if !env.keep {
        watcher.delete_if_exists(&root).await?;
    }
    watcher.close().await?;

    let millis = |durations: &[Duration]| -> Vec<f64> {
        durations
            .iter()
            .map(|d| (d.as_secs_f64() * 10_000.0).round() / 10.0)
            .collect()
    };
    let mut samples: Vec<u32> = observed.iter().map(|d| micros(*d)).collect();
    let latency = Summary::of(&mut samples);
    let mut report = Report::new("expiry", env.kind.name(), &env.server);
    report
        .field("session_timeout_ms", args.session_timeout_ms)
        .field("negotiated_timeout_ms", negotiated.as_millis() as u64)
        .field("rounds", args.rounds)
        .throughput(args.rounds, elapsed, &latency)
        .field("observed_ms", millis(&observed))
        .field("observed_p50_ms", round3(f64::from(latency.p50) / 1000.0))
        .field("observed_max_ms", round3(f64::from(latency.max) / 1000.0))
        .field(
            "overshoot_p50_ms",
            round3(f64::from(latency.p50) / 1000.0 - negotiated.as_secs_f64() * 1000.0),
        )
        .field("from_blackhole_ms", millis(&from_blackhole));
    Ok(report)
}
