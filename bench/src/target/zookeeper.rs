//! Apache ZooKeeper through the `zookeeper-client` crate.
//!
//! That client pipelines requests over one connection and is cheap to clone;
//! a session closes when its last clone is dropped. It keeps no count of
//! watch events, so [`ZkSession`] carries one, fed by this tool's lock
//! recipe (`zk_lock.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, Result};
use zookeeper_client::{Acls, Client, CreateMode, CreateOptions, Error, EventType, WatchedEvent};

use super::{ConnectOptions, NodeMode, WatchOutcome};

/// Open ACL, as every benchmark node uses.
pub const PERSISTENT: CreateOptions<'static> = CreateMode::Persistent.with_acls(Acls::anyone_all());
pub const EPHEMERAL: CreateOptions<'static> = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
pub const EPHEMERAL_SEQUENTIAL: CreateOptions<'static> =
    CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
pub const CONTAINER: CreateOptions<'static> = CreateMode::Container.with_acls(Acls::anyone_all());

/// A ZooKeeper session and the count of node events its lock watchers saw.
#[derive(Clone)]
pub struct ZkSession {
    pub client: Client,
    events: Arc<AtomicU64>,
}

impl ZkSession {
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    /// Counts one watch event received by this session.
    pub fn count_event(&self, event: &WatchedEvent) {
        if event.event_type != EventType::Session {
            self.events.fetch_add(1, Ordering::Relaxed);
        }
    }
}

pub async fn connect(addr: &str, options: &ConnectOptions) -> Result<ZkSession> {
    let connecting = Client::connector()
        .with_session_timeout(options.session_timeout)
        // Fail at once when the server refuses connections, instead of
        // cycling for a whole session timeout (recovery polls with this).
        .with_fail_eagerly()
        .connect(addr);
    let client = match tokio::time::timeout(options.connect_timeout, connecting).await {
        Ok(Ok(client)) => client,
        Ok(Err(err)) => return Err(anyhow!("connecting to zookeeper at {addr}: {err}")),
        Err(_) => {
            return Err(anyhow!(
                "connecting to zookeeper at {addr}: no session within {:?}",
                options.connect_timeout
            ))
        }
    };
    Ok(ZkSession {
        client,
        events: Arc::new(AtomicU64::new(0)),
    })
}

/// How long a `srvr` four-letter word may take to answer.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Most bytes of a `srvr` answer read (it is a few hundred).
const PROBE_ANSWER_MAX: u64 = 16 * 1024;

pub async fn is_leader(addr: &str) -> Result<bool> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(b"srvr").await?;
        let mut answer = Vec::new();
        stream
            .take(PROBE_ANSWER_MAX)
            .read_to_end(&mut answer)
            .await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(PROBE_TIMEOUT, probe)
        .await
        .map_err(|_| anyhow!("{addr}: no srvr answer within {PROBE_TIMEOUT:?}"))?
        .map_err(|err| anyhow!("{addr}: srvr: {err}"))?;
    let answer = String::from_utf8_lossy(&answer);
    if !answer.contains("Mode: ") {
        return Err(anyhow!("{addr}: not serving yet: {}", answer.trim()));
    }
    Ok(answer.contains("Mode: leader"))
}

pub async fn create(zk: &ZkSession, path: &str, data: &[u8], mode: NodeMode) -> Result<String> {
    let options = match mode {
        NodeMode::Persistent => &PERSISTENT,
        NodeMode::Ephemeral => &EPHEMERAL,
    };
    zk.client.create(path, data, options).await?;
    Ok(path.to_owned())
}

pub async fn ensure(zk: &ZkSession, path: &str, data: &[u8]) -> Result<()> {
    match zk.client.create(path, data, &PERSISTENT).await {
        Ok(_) | Err(Error::NodeExists) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

pub async fn create_batch(zk: &ZkSession, paths: &[String], data: &[u8]) -> Result<()> {
    let mut writer = zk.client.new_multi_writer();
    for path in paths {
        writer.add_create(path, data, &PERSISTENT)?;
    }
    writer.commit().await?;
    Ok(())
}

pub async fn delete_batch(zk: &ZkSession, paths: &[String]) -> Result<()> {
    let mut writer = zk.client.new_multi_writer();
    for path in paths {
        writer.add_delete(path, None)?;
    }
    writer.commit().await?;
    Ok(())
}

pub async fn get_if_exists(zk: &ZkSession, path: &str) -> Result<Option<Vec<u8>>> {
    match zk.client.get_data(path).await {
        Ok((data, _)) => Ok(Some(data)),
        Err(Error::NoNode) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

pub async fn delete_if_exists(zk: &ZkSession, path: &str) -> Result<()> {
    match zk.client.delete(path, None).await {
        Ok(()) | Err(Error::NoNode) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

pub fn outcome(event: &WatchedEvent) -> WatchOutcome {
    match event.event_type {
        EventType::NodeDeleted => WatchOutcome::Deleted,
        EventType::Session => WatchOutcome::SessionEvent,
        _ => WatchOutcome::OtherNodeEvent,
    }
}
