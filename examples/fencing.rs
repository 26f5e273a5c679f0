//! Why a lock needs a lease *and* a fencing token: the "GC pause" timeline
//! of the lock documents, run for real against a server.
//!
//! ```text
//! cargo run --release -p arbor-server        # in another terminal
//! cargo run -p arbor-examples --example fencing -- \
//!     [--server 127.0.0.1:7181] [--session-timeout-ms 2000]
//! ```
//!
//! Two clients, A and B, want the lock `/fencing/demo` to write one value
//! into a store:
//!
//! 1. A takes the lock (fencing token `t`) and is paused before it writes.
//!    The pause is real: A's client runs on its own single-threaded runtime
//!    in its own thread, and that thread is blocked, so nothing of A runs,
//!    not even the background task that sends heartbeats, exactly as in a
//!    stop-the-world GC pause.
//! 2. The server hears nothing from A for its session timeout, expires the
//!    session and deletes A's lock node; B, queued behind it, gets the lock
//!    with a larger token and writes.
//! 3. A wakes up still believing it holds the lock, and writes with `t`.
//!
//! This is run twice: once with a store that checks tokens with a [`Fence`]
//! (A's write is refused, B's value stays), and once with a plain store (A's
//! write overwrites B's: a lost update). The lock alone could not prevent it:
//! A learns that its session expired only after its write was sent.

use std::fmt::Display;
use std::sync::mpsc;
use std::sync::Mutex as StdMutex;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use arbor_client::recipes::{Fence, FencingToken, Mutex, StaleToken};
use arbor_client::{Client, ClientOptions, ConnectionState};

const LOCK: &str = "/fencing/demo";

#[derive(Clone)]
struct Args {
    server: String,
    /// A's session timeout, as asked (the server clamps it to its limits).
    session_timeout: Duration,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        server: std::env::var("ARBOR_SERVER").unwrap_or_else(|_| "127.0.0.1:7181".into()),
        session_timeout: Duration::from_millis(2000),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--server" => args.server = value,
            "--session-timeout-ms" => {
                let ms = value
                    .parse()
                    .with_context(|| format!("{flag} takes a number, not {value:?}"))?;
                args.session_timeout = Duration::from_millis(ms);
            }
            other => {
                bail!("unknown flag {other} (flags: --server ADDR, --session-timeout-ms MS)")
            }
        }
    }
    Ok(args)
}

async fn connect(server: &str, options: ClientOptions) -> Result<Client> {
    Client::connect(server, options).await.with_context(|| {
        format!(
            "no arbord at {server}: start one with `cargo run --release -p arbor-server`, \
             or name it with --server / ARBOR_SERVER"
        )
    })
}

/// Prints events with the milliseconds since the start.
#[derive(Clone, Copy)]
struct Timeline {
    start: Instant,
}

impl Timeline {
    fn log(&self, what: impl Display) {
        println!("+{:04}ms {what}", self.start.elapsed().as_millis());
    }
}

/// The protected resource: one value and who wrote it, with or without a
/// fence in front.
struct Store {
    fence: Option<Fence>,
    value: StdMutex<Option<(&'static str, FencingToken)>>,
}

impl Store {
    fn new(fenced: bool) -> Self {
        Self {
            fence: fenced.then(Fence::new),
            value: StdMutex::new(None),
        }
    }

    fn write(&self, writer: &'static str, token: FencingToken) -> Result<(), StaleToken> {
        let set = || {
            *self.value.lock().unwrap_or_else(PoisonError::into_inner) = Some((writer, token));
        };
        match &self.fence {
            Some(fence) => fence.write(token, set),
            None => {
                set();
                Ok(())
            }
        }
    }

    fn value(&self) -> Option<(&'static str, FencingToken)> {
        *self.value.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes for `writer`, and says on the timeline what came of it.
    fn write_logged(&self, t: Timeline, writer: &'static str, token: FencingToken) -> bool {
        match self.write(writer, token) {
            Ok(()) => {
                t.log(format!(
                    "{writer} writes \"value from {writer}\" with token {token:#x}: accepted"
                ));
                true
            }
            Err(stale) => {
                t.log(format!(
                    "{writer} writes \"value from {writer}\" with token {token:#x}: \
                     REJECTED by the fence (it has seen {:#x})",
                    stale.highest
                ));
                false
            }
        }
    }
}

/// What one run of the timeline came to.
struct Outcome {
    a_token: FencingToken,
    b_token: FencingToken,
    a_write_accepted: bool,
    final_writer: Option<&'static str>,
}

/// Client A, on its own thread and runtime: lock, pause, write. Sends its
/// token once it holds the lock; the pause ends when `wake` says so (or is
/// dropped), or after `max_pause`.
fn run_a(
    args: Args,
    t: Timeline,
    store: Arc<Store>,
    locked: tokio::sync::oneshot::Sender<FencingToken>,
    wake: mpsc::Receiver<()>,
    max_pause: Duration,
) -> Result<bool> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let options = ClientOptions::default().with_session_timeout(args.session_timeout);
        let a = connect(&args.server, options).await?;
        let guard = Mutex::new(&a, LOCK).lock().await?;
        let token = guard.fencing_token();
        let granted = a.session_timeout().as_millis();
        let asked = args.session_timeout.as_millis();
        t.log(format!(
            "A acquired lock, token {token:#x} (session {:#x}, timeout {granted} ms{})",
            a.session_id(),
            if granted == asked {
                String::new()
            } else {
                format!(", asked {asked} ms")
            }
        ));
        let _ = locked.send(token);

        t.log("A pauses before writing (a stop-the-world GC pause): its runtime is frozen, no heartbeats");
        let paused = Instant::now();
        // Blocking the only thread of A's runtime stops all of A at once.
        let _ = wake.recv_timeout(max_pause);
        t.log(format!(
            "A wakes after {} ms, believes it still holds the lock",
            paused.elapsed().as_millis()
        ));
        let accepted = store.write_logged(t, "A", token);

        // Only now does A's client run again and find out what happened.
        let state = settled_state(&a, a.session_timeout()).await;
        t.log(format!(
            "A's client catches up: connection {state:?} (too late, the write was already made)"
        ));
        drop(guard);
        Ok(accepted)
    })
}

/// The client's state once it ends (expired or closed), or after `limit`.
async fn settled_state(client: &Client, limit: Duration) -> ConnectionState {
    let mut changes = client.state_changes();
    let deadline = tokio::time::sleep(limit);
    tokio::pin!(deadline);
    loop {
        let state = client.state();
        if state.is_terminal() {
            return state;
        }
        tokio::select! {
            next = changes.next() => if next.is_none() { return client.state(); },
            () = &mut deadline => return client.state(),
        }
    }
}

/// One run of the timeline, against a store with or without a fence.
async fn timeline(args: &Args, fenced: bool) -> Result<Outcome> {
    let t = Timeline {
        start: Instant::now(),
    };
    let store = Arc::new(Store::new(fenced));
    // Long enough for any session timeout the server grants (at most 20
    // ticks) to run out and be noticed.
    let max_wait = args.session_timeout * 3 + Duration::from_secs(10);

    let (locked_tx, locked_rx) = tokio::sync::oneshot::channel();
    let (wake_tx, wake_rx) = mpsc::channel();
    let a = {
        let (args, store) = (args.clone(), store.clone());
        std::thread::spawn(move || run_a(args, t, store, locked_tx, wake_rx, max_wait * 2))
    };
    let join_a = || async move {
        tokio::task::spawn_blocking(move || a.join())
            .await?
            .map_err(|_| anyhow!("client A panicked"))?
    };
    let Ok(a_token) = locked_rx.await else {
        // A ended without the lock: say why.
        join_a().await?;
        bail!("client A ended without taking the lock");
    };

    let b = connect(&args.server, ClientOptions::default()).await?;
    t.log("B asks for the lock and queues behind A");
    let guard = match Mutex::new(&b, LOCK).lock_timeout(max_wait).await {
        Ok(guard) => guard,
        Err(err) => {
            drop(wake_tx);
            join_a().await?;
            return Err(err).context("B never got the lock");
        }
    };
    let b_token = guard.fencing_token();
    t.log(format!(
        "B acquired lock, token {b_token:#x}: A's session expired, its lock node went with it"
    ));
    store.write_logged(t, "B", b_token);
    // End A's pause.
    let _ = wake_tx.send(());
    let a_write_accepted = join_a().await?;

    guard.release().await?;
    b.close().await?;
    let final_writer = store.value().map(|(writer, _)| writer);
    t.log(format!(
        "store holds: {}",
        match store.value() {
            Some((writer, token)) => format!("\"value from {writer}\" (token {token:#x})"),
            None => "nothing".into(),
        }
    ));
    Ok(Outcome {
        a_token,
        b_token,
        a_write_accepted,
        final_writer,
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;

    println!("== with a fenced store ==");
    let fenced = timeline(&args, true).await?;
    println!();
    println!("== with a plain store ==");
    let plain = timeline(&args, false).await?;
    println!();

    for outcome in [&fenced, &plain] {
        if outcome.b_token <= outcome.a_token {
            bail!(
                "B's token {:#x} is not newer than A's {:#x}",
                outcome.b_token,
                outcome.a_token
            );
        }
    }
    let mut as_expected = true;
    let with_fence = match (fenced.a_write_accepted, fenced.final_writer) {
        (false, Some("B")) => "stale write rejected, final value from B".to_owned(),
        (accepted, writer) => {
            as_expected = false;
            describe(accepted, writer)
        }
    };
    let without_fence = match (plain.a_write_accepted, plain.final_writer) {
        (true, Some("A")) => "lost update, final value from A".to_owned(),
        (accepted, writer) => {
            as_expected = false;
            describe(accepted, writer)
        }
    };
    println!("with fence: {with_fence}");
    println!("without fence: {without_fence}");
    if !as_expected {
        bail!("the timeline did not go as the documents describe");
    }
    Ok(())
}

/// An unexpected outcome, stated plainly.
fn describe(a_accepted: bool, writer: Option<&str>) -> String {
    format!(
        "UNEXPECTED: A's stale write {}, final value from {}",
        if a_accepted { "accepted" } else { "rejected" },
        writer.unwrap_or("nobody")
    )
}
