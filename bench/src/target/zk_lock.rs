//! A fair mutex for ZooKeeper, written over `zookeeper-client` with the
//! algorithm of Apache Curator's `InterProcessMutex` (`LockInternals` and
//! `StandardLockInternalsDriver`), so that Arbor's library lock is compared
//! with what a Java shop would actually run on ZooKeeper:
//!
//! 1. create an EPHEMERAL_SEQUENTIAL node `<dir>/_c_<unique>-lock-`
//!    (Curator's "protected" name; the parent is created as a container if
//!    missing, as `creatingParentContainersIfNeeded` does);
//! 2. list the children, sort them by sequence number; the lowest holds the
//!    lock;
//! 3. otherwise set a watch on the node just before ours and wait for it to
//!    fire (Curator uses `getData` with a watcher; this uses the exists
//!    watch, as Arbor's recipe does — same round trips, same single event);
//!    then go back to 2;
//! 4. release = delete our node.
//!
//! Curator does not re-check the owner of the lowest node; neither does this
//! (Arbor's recipe does, which costs it one more round trip per grant).
//!
//! `herd` replaces step 3 by a watch on the directory's children, re-checking
//! on every change: the herd-effect recipe, for `handoff --herd`.
//!
//! Watch events are counted on the [`ZkSession`], to report notifications
//! per release like Arbor's `Client::watch_events_received`.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, Result};
use zookeeper_client::{Error, OneshotWatcher};

use super::zookeeper::{ZkSession, CONTAINER, EPHEMERAL_SEQUENTIAL};
use super::{sequence, WatchOutcome};

/// The part of a lock node's name after the protected prefix (Curator's).
const LOCK_NAME: &str = "lock-";

/// How many times a create is retried when the lock directory vanished (a
/// container is reaped once empty).
const DIR_RETRIES: usize = 5;

/// A held lock; [`ZkGuard::release`] deletes its node.
pub struct ZkGuard {
    session: ZkSession,
    node: String,
}

impl ZkGuard {
    pub async fn release(self) -> Result<()> {
        self.session.client.delete(&self.node, None).await?;
        Ok(())
    }
}

pub async fn acquire(
    session: &ZkSession,
    dir: &str,
    herd: bool,
    ready: Option<&Arc<AtomicUsize>>,
) -> Result<ZkGuard> {
    let node = create_node(session, dir).await?;
    let name = super::node_name(&node)?;
    let mut signalled = false;
    let mut signal = || {
        if !signalled {
            signalled = true;
            if let Some(ready) = ready {
                ready.fetch_add(1, Ordering::SeqCst);
            }
        }
    };
    loop {
        let (mut children, herd_watch) = if herd {
            let (children, watcher) = session.client.list_and_watch_children(dir).await?;
            (children, Some(watcher))
        } else {
            (session.client.list_children(dir).await?, None)
        };
        children.retain(|child| child.contains(LOCK_NAME));
        children.sort_by_key(|child| sequence(child));
        let index = children
            .iter()
            .position(|child| *child == name)
            .ok_or_else(|| anyhow!("lock node {node} vanished: session lost"))?;
        if index == 0 {
            if let Some(watcher) = herd_watch {
                // The children watch stays set on the server and fires at the
                // next change (our own release); count it like Arbor does.
                let counter = session.clone();
                tokio::spawn(async move { counter.count_event(&watcher.changed().await) });
            }
            return Ok(ZkGuard {
                session: session.clone(),
                node,
            });
        }
        let watcher = match herd_watch {
            Some(watcher) => watcher,
            None => {
                let predecessor = format!("{dir}/{}", children[index - 1]);
                match session.client.check_and_watch_stat(&predecessor).await? {
                    (Some(_), watcher) => watcher,
                    // Gone already: look again (the watch, set on a name never
                    // reused, cannot fire).
                    (None, _) => continue,
                }
            }
        };
        signal();
        wait(session, watcher).await?;
    }
}

async fn wait(session: &ZkSession, watcher: OneshotWatcher) -> Result<()> {
    let event = watcher.changed().await;
    session.count_event(&event);
    if super::zookeeper::outcome(&event) == WatchOutcome::SessionEvent {
        return Err(anyhow!(
            "session event while waiting for the lock: {event:?}"
        ));
    }
    Ok(())
}

/// Creates our ephemeral sequential node, creating the directory (and its
/// parents) as containers when missing.
async fn create_node(session: &ZkSession, dir: &str) -> Result<String> {
    let prefix = format!("{dir}/{}{LOCK_NAME}", protected_prefix());
    for _ in 0..DIR_RETRIES {
        match session
            .client
            .create(&prefix, &[], &EPHEMERAL_SEQUENTIAL)
            .await
        {
            Ok((_, sequence)) => return Ok(format!("{prefix}{sequence}")),
            Err(Error::NoNode) => session.client.mkdir(dir, &CONTAINER).await?,
            Err(err) => return Err(err.into()),
        }
    }
    Err(anyhow!("lock directory {dir} keeps vanishing"))
}

/// `_c_` + 32 hex digits + `-`, unique per attempt (Curator's protection
/// prefix, which lets a client find its node after a lost create reply).
pub fn protected_prefix() -> String {
    static ATTEMPTS: AtomicU64 = AtomicU64::new(0);
    let attempt = ATTEMPTS.fetch_add(1, Ordering::Relaxed);
    let state = RandomState::new();
    let high = state.hash_one((std::process::id(), attempt));
    let low = state.hash_one((attempt, high));
    format!("_c_{high:016x}{low:016x}-")
}
