//! Wiring: the committer, the background tasks and the accept loop, and an
//! orderly shutdown.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::frame::encode_frame;
use arbor_protocol::{ErrorCode, ServerMessage};
use parking_lot::Mutex;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::config::{Config, ConfigError};
use crate::context::Shared;
use crate::housekeeping;
use crate::net::{self, Listener};
use crate::pipeline::apply::StateMachine;
use crate::pipeline::commit::{run_committer, MemoryLog};

/// The epoch of zxids for a server that remembers nothing (the in-memory log).
const MEMORY_EPOCH: u64 = 1;

/// How long a refused connection may take to receive its explanation.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Pause after a failed accept (for example, out of file descriptors), so the
/// loop does not spin.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// Serves `listener` until `shutdown` completes, then stops taking requests,
/// answers those in flight (within the grace period) and returns. Sessions
/// are not expired by a shutdown.
pub async fn run<L: Listener>(
    mut listener: L,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    config.validate()?;
    let state = StateMachine::new();
    let first_zxid_base = MEMORY_EPOCH << 32;
    let (proposals_tx, proposals_rx) = mpsc::channel(config.commit_queue_max);
    let shared = Arc::new(Shared::new(config, state, proposals_tx));
    let stop_committer = CancellationToken::new();
    let committer = tokio::spawn(run_committer(
        MemoryLog::default(),
        proposals_rx,
        shared.clone(),
        first_zxid_base,
        stop_committer.clone(),
    ));
    let background = TaskTracker::new();
    background.spawn(housekeeping::expire_sessions(shared.clone()));
    background.spawn(housekeeping::reap_nodes(shared.clone()));

    let connections = TaskTracker::new();
    let slots = Arc::new(Semaphore::new(shared.config.connections_max));
    let per_ip = Arc::new(PerIpLimit::new(shared.config.connections_per_ip_max));
    info!(addr = ?listener.local_addr().ok(), "serving");
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            () = shared.shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    warn!(error = %err, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            let limit = shared.config.connections_max;
            warn!(%peer, limit, "connection limit reached; refusing");
            refuse(
                stream,
                format!("the server is serving its limit of {limit} connections"),
            );
            continue;
        };
        let Some(ip_slot) = PerIpLimit::acquire(&per_ip, peer.ip()) else {
            let limit = shared.config.connections_per_ip_max;
            warn!(%peer, limit, "per-address connection limit reached; refusing");
            refuse(
                stream,
                format!(
                    "{} already has {limit} connections, the limit per address",
                    peer.ip()
                ),
            );
            continue;
        };
        let shared = shared.clone();
        connections.spawn(async move {
            net::serve(stream, peer, shared).await;
            drop((slot, ip_slot));
        });
    }

    info!("shutting down: answering requests in flight");
    shared.shutdown.cancel();
    connections.close();
    background.close();
    let grace = Duration::from_millis(shared.config.shutdown_grace_ms);
    if tokio::time::timeout(grace, connections.wait())
        .await
        .is_err()
    {
        warn!("some connections did not finish within the grace period");
    }
    background.wait().await;
    stop_committer.cancel();
    let _ = committer.await;
    info!(last_zxid = shared.last_zxid(), "stopped");
    Ok(())
}

/// Tells a refused client why, then closes: the frame goes out before the
/// handshake, which the protocol allows for `Closing`.
fn refuse<S: AsyncWrite + Send + Unpin + 'static>(mut stream: S, message: String) {
    tokio::spawn(async move {
        let mut frame = Vec::new();
        let closing = ServerMessage::Closing {
            code: ErrorCode::Unavailable,
            message,
        };
        if encode_frame(&closing, usize::MAX, &mut frame).is_ok() {
            let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, stream.write_all(&frame)).await;
        }
    });
}

/// Counts connections per client address.
struct PerIpLimit {
    max: usize,
    counts: Mutex<HashMap<IpAddr, usize>>,
}

/// Gives a connection's place back when dropped.
struct IpSlot {
    limit: Arc<PerIpLimit>,
    ip: IpAddr,
}

impl PerIpLimit {
    fn new(max: usize) -> Self {
        Self {
            max,
            counts: Mutex::new(HashMap::new()),
        }
    }

    fn acquire(limit: &Arc<PerIpLimit>, ip: IpAddr) -> Option<IpSlot> {
        let mut counts = limit.counts.lock();
        let count = counts.entry(ip).or_insert(0);
        if *count >= limit.max {
            return None;
        }
        *count += 1;
        Some(IpSlot {
            limit: limit.clone(),
            ip,
        })
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut counts = self.limit.counts.lock();
        if let Some(count) = counts.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}
