//! Arbor through `arbor-client`, plus the herd lock used only by
//! `handoff --herd` (the library `Mutex` is herd-free by design, so the herd
//! variant is written here over plain client calls).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use anyhow::{anyhow, Result};
use arbor_client::acl::digest_id;
use arbor_client::{
    multi, Acl, Client, ClientOptions, CreateMode, Error, EventType, Perms, TlsOptions,
};

use super::{ConnectOptions, NodeMode, WatchOutcome};

/// Name of the herd lock's nodes (after the sequence-less part).
const HERD_NODE_PREFIX: &str = "lock-";

/// How many times a lock create is retried when its directory vanished
/// (a container can be reaped between rounds).
const DIR_RETRIES: usize = 5;

/// The ACL every node gets with `--acl-heavy`, once set.
static HEAVY_ACL: OnceLock<Vec<Acl>> = OnceLock::new();

/// What every session proves with `--acl-heavy`.
const HEAVY_ACL_CREDENTIALS: &str = "bench:bench";

/// From now on every session proves digest credentials and every node a
/// workload creates gets three entries, the one that lets the session in
/// last: an ip range it is not in, read for everybody, its digest. What
/// ACL checks cost, against the open ACL every other run uses.
pub fn use_heavy_acls() -> Result<()> {
    let digest = digest_id(HEAVY_ACL_CREDENTIALS)?;
    let acl = vec![
        Acl::new(Perms::ALL, "ip", "10.0.0.0/8"),
        Acl::new(Perms::READ, "world", "anyone"),
        Acl::new(Perms::ALL, "digest", digest),
    ];
    HEAVY_ACL
        .set(acl)
        .map_err(|_| anyhow!("heavy ACLs are already in use"))
}

fn heavy_acl() -> Option<&'static Vec<Acl>> {
    HEAVY_ACL.get()
}

/// TLS settings every session connects with, once set (`--tls-ca`).
static TLS: OnceLock<TlsOptions> = OnceLock::new();

/// From now on every session connects over TLS, trusting the CA of `ca`
/// (a PEM file): what TLS costs, against the plain port.
pub fn use_tls(ca: &std::path::Path) -> Result<()> {
    TLS.set(TlsOptions::new(ca)?)
        .map_err(|_| anyhow!("TLS is already in use"))
}

pub async fn connect(addr: &str, options: &ConnectOptions) -> Result<Client> {
    let mut client_options = ClientOptions::default()
        .with_session_timeout(options.session_timeout)
        .with_connect_timeout(options.connect_timeout)
        .with_max_in_flight(options.max_in_flight);
    if heavy_acl().is_some() {
        client_options = client_options.with_auth("digest", HEAVY_ACL_CREDENTIALS);
    }
    if let Some(tls) = TLS.get() {
        client_options = client_options.with_tls(tls.clone());
    }
    Client::connect(addr, client_options)
        .await
        .map_err(|err| anyhow!("connecting to arbor at {addr}: {err}"))
}

/// How long asking one member for its status may take.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

pub async fn is_leader(addr: &str) -> Result<bool> {
    let options = ConnectOptions {
        connect_timeout: PROBE_TIMEOUT,
        ..ConnectOptions::default()
    };
    let probe = async {
        let client = connect(addr, &options).await?;
        let status = client.cluster_status().await;
        let _ = client.close().await;
        let status = status?;
        Ok::<_, anyhow::Error>(status.member_id != 0 && status.leader == Some(status.member_id))
    };
    tokio::time::timeout(PROBE_TIMEOUT * 2, probe)
        .await
        .map_err(|_| anyhow!("{addr}: no cluster status within {:?}", PROBE_TIMEOUT * 2))?
}

fn mode(mode: NodeMode) -> CreateMode {
    match mode {
        NodeMode::Persistent => CreateMode::Persistent,
        NodeMode::Ephemeral => CreateMode::Ephemeral,
    }
}

/// A create with the heavy ACL when it is in use.
async fn create_node(
    client: &Client,
    path: &str,
    data: &[u8],
    mode: CreateMode,
) -> Result<String, Error> {
    match heavy_acl() {
        Some(acl) => client
            .create_with_acl(path, data, mode, acl.clone())
            .await
            .map(|(created, _)| created),
        None => client.create(path, data, mode).await,
    }
}

pub async fn create(client: &Client, path: &str, data: &[u8], node: NodeMode) -> Result<String> {
    Ok(create_node(client, path, data, mode(node)).await?)
}

pub async fn ensure(client: &Client, path: &str, data: &[u8]) -> Result<()> {
    match create_node(client, path, data, CreateMode::Persistent).await {
        Ok(_) | Err(Error::NodeExists { .. }) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

pub async fn create_batch(client: &Client, paths: &[String], data: &[u8]) -> Result<()> {
    let ops = paths
        .iter()
        .map(|path| match heavy_acl() {
            Some(acl) => {
                multi::create_with_acl(path.as_str(), data, CreateMode::Persistent, acl.clone())
            }
            None => multi::create(path.as_str(), data, CreateMode::Persistent),
        })
        .collect();
    client.multi(ops).await?;
    Ok(())
}

pub async fn delete_batch(client: &Client, paths: &[String]) -> Result<()> {
    let ops = paths
        .iter()
        .map(|path| multi::delete(path.as_str(), None))
        .collect();
    client.multi(ops).await?;
    Ok(())
}

pub async fn get_if_exists(client: &Client, path: &str) -> Result<Option<Vec<u8>>> {
    match client.get_data(path).await {
        Ok((data, _)) => Ok(Some(data)),
        Err(Error::NoNode { .. }) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

pub async fn delete_if_exists(client: &Client, path: &str) -> Result<()> {
    match client.delete(path, None).await {
        Ok(()) | Err(Error::NoNode { .. }) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

pub async fn watch_fired(watch: arbor_client::OneshotWatch) -> Result<WatchOutcome> {
    match watch.await {
        Ok(event) if event.event_type == EventType::NodeDeleted => Ok(WatchOutcome::Deleted),
        Ok(_) => Ok(WatchOutcome::OtherNodeEvent),
        Err(Error::SessionExpired | Error::Closed | Error::WatchRemoved) => {
            Ok(WatchOutcome::SessionEvent)
        }
        Err(err) => Err(err.into()),
    }
}

/// The herd-effect lock (the naive recipe ZooKeeper's docs warn about):
/// create an ephemeral sequential node, then on every change of the
/// directory's children re-read them all until ours is the lowest. Every
/// release wakes every waiter. Returns the node to delete on release.
pub async fn herd_lock(
    client: &Client,
    dir: &str,
    ready: Option<&Arc<AtomicUsize>>,
) -> Result<String> {
    let node = create_in_dir(client, dir).await?;
    let name = super::node_name(&node)?;
    let mut signalled = false;
    loop {
        let (mut names, watch) = client.get_children_watch(dir).await?;
        names.retain(|child| child.starts_with(HERD_NODE_PREFIX));
        names.sort_by_key(|child| super::sequence(child));
        match names.iter().position(|child| *child == name) {
            // The watch stays set on the server and fires at the next change
            // (our own release): Arbor counts that event, as it should.
            Some(0) => return Ok(node),
            Some(_) => {}
            None => return Err(anyhow!("lock node {node} vanished: session lost")),
        }
        if !signalled {
            signalled = true;
            if let Some(ready) = ready {
                ready.fetch_add(1, Ordering::SeqCst);
            }
        }
        if watch_fired(watch).await? == WatchOutcome::SessionEvent {
            return Err(anyhow!("session ended while waiting for {dir}"));
        }
    }
}

/// Creates this waiter's node, creating the directory (as a container, as
/// the library recipes do) when it is missing.
async fn create_in_dir(client: &Client, dir: &str) -> Result<String> {
    let prefix = format!("{dir}/{HERD_NODE_PREFIX}");
    for _ in 0..DIR_RETRIES {
        match client
            .create(&prefix, Vec::new(), CreateMode::EphemeralSequential)
            .await
        {
            Ok(node) => return Ok(node),
            Err(Error::NoNode { .. }) => {
                match client.create(dir, Vec::new(), CreateMode::Container).await {
                    Ok(_) | Err(Error::NodeExists { .. }) => {}
                    Err(err) => return Err(err.into()),
                }
            }
            Err(err) => return Err(err.into()),
        }
    }
    Err(anyhow!("lock directory {dir} keeps vanishing"))
}
