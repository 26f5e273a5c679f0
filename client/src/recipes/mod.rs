//! Recipes built on the client: the things people come to a coordination
//! service for.
//!
//! * [`Mutex`] — a fair lock whose waiters watch only their predecessor, and
//!   whose grants carry fencing tokens.
//! * [`Fence`] — the check a protected resource makes on those tokens.

mod fence;
mod lock;

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

pub use fence::{Fence, FencingToken, StaleToken};
pub use lock::{Guard, Mutex};

use crate::{Client, CreateMode, Error, SessionId};

/// Why a lock was not granted (or not released).
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// `try_lock`: someone holds the lock or waits for it.
    #[error("the lock is held")]
    Locked,
    /// `lock_timeout` ran out; this contender left the queue.
    #[error("timed out waiting for the lock")]
    Timeout,
    /// The lowest node is not owned by this session: never report ownership.
    #[error("lock node {node} is owned by session {owner:#x}, not by this one")]
    NotOwner { node: String, owner: SessionId },
    #[error(transparent)]
    Client(#[from] Error),
}

/// Creates `path` and its missing ancestors as containers, so that lock
/// directories disappear by themselves once unused.
pub(crate) async fn ensure_path(client: &Client, target: &str) -> Result<(), Error> {
    if client.exists(target).await?.is_some() {
        return Ok(());
    }
    let mut prefix = String::new();
    for segment in target.split('/').filter(|s| !s.is_empty()) {
        prefix.push('/');
        prefix.push_str(segment);
        match client
            .create(&prefix, Vec::new(), CreateMode::Container)
            .await
        {
            Ok(_) | Err(Error::NodeExists { .. }) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// A name prefix unique to one attempt, so a create whose reply was lost can
/// be found again (`_c_` + 32 hex digits + `-`, as Curator's protected mode).
pub(crate) fn unique_prefix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = RandomState::new();
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let high = seed.hash_one((nanos, count, std::process::id()));
    let low = seed.hash_one((count, nanos, high));
    format!("_c_{high:016x}{low:016x}-")
}

/// Deletes a node when dropped, unless it was deleted on purpose first: the
/// node of a cancelled waiter or a dropped guard must not block the queue.
pub(crate) struct NodeCleanup {
    client: Client,
    path: String,
    armed: bool,
}

impl NodeCleanup {
    pub(crate) fn new(client: &Client, path: String) -> Self {
        Self {
            client: client.clone(),
            path,
            armed: true,
        }
    }

    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Deletes the node now; a node already gone is fine.
    pub(crate) async fn delete_now(mut self) -> Result<(), Error> {
        self.armed = false;
        match self.client.delete(&self.path, None).await {
            Ok(()) | Err(Error::NoNode { .. }) => Ok(()),
            Err(err) => Err(err),
        }
    }
}

impl Drop for NodeCleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Without a runtime the session's end removes the ephemeral instead.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (client, path) = (self.client.clone(), std::mem::take(&mut self.path));
            runtime.spawn(async move {
                let _ = client.delete(&path, None).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn prefixes_are_unique_and_well_formed() {
        let a = super::unique_prefix();
        let b = super::unique_prefix();
        assert_ne!(a, b);
        assert_eq!(a.len(), 3 + 32 + 1);
        assert!(a.starts_with("_c_") && a.ends_with('-'));
        assert!(arbor_protocol::path::validate(&format!("/x/{a}lock-0000000001")).is_ok());
    }
}
