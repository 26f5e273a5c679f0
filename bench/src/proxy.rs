//! A TCP proxy that can silently drop everything: how `expiry` stops a
//! session's heartbeats the same way for both targets, without touching the
//! client library.
//!
//! Until [`Proxy::blackhole`] it forwards bytes both ways. After it, bytes are
//! still read (so neither peer sees back-pressure) but thrown away, and
//! sockets are kept open: no FIN or RST reaches the server, which therefore
//! only learns of the loss by the session timeout — a partitioned client. New
//! connections (the client reconnecting) are accepted and treated the same.
//!
//! The proxy records when it last wrote client bytes to the server: the
//! server's last sign of life from the session, from which expiry is timed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// Read buffer of one direction of one proxied connection.
const PUMP_BUFFER_BYTES: usize = 16 * 1024;

/// Sentinel of [`State::last_to_server_ns`]: nothing forwarded yet.
const NEVER: u64 = u64::MAX;

struct State {
    blackholed: AtomicBool,
    /// Nanoseconds after `epoch` of the last write to the server.
    last_to_server_ns: AtomicU64,
    epoch: Instant,
}

/// A running proxy; dropping it closes every socket.
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Listens on an ephemeral 127.0.0.1 port, forwarding to `upstream`.
    pub async fn start(upstream: &str) -> Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the expiry proxy")?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            blackholed: AtomicBool::new(false),
            last_to_server_ns: AtomicU64::new(NEVER),
            epoch: Instant::now(),
        });
        let task = tokio::spawn(accept_loop(listener, upstream.to_owned(), state.clone()));
        Ok(Proxy { addr, state, task })
    }

    /// `host:port` for the client to connect to.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Stops forwarding in both directions from now on; returns the instant.
    pub fn blackhole(&self) -> Instant {
        self.state.blackholed.store(true, Ordering::SeqCst);
        Instant::now()
    }

    /// When client bytes were last written to the server, if ever.
    pub fn last_to_server(&self) -> Option<Instant> {
        match self.state.last_to_server_ns.load(Ordering::SeqCst) {
            NEVER => None,
            ns => Some(self.state.epoch + Duration::from_nanos(ns)),
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every pump.
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, upstream: String, state: Arc<State>) {
    let mut connections = JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        let (upstream, state) = (upstream.clone(), state.clone());
        connections.spawn(async move {
            if let Err(err) = proxy_connection(client, &upstream, state).await {
                eprintln!("arbor-bench: proxy connection ended: {err:#}");
            }
        });
        // Reap finished connections so the set does not grow without bound.
        while connections.try_join_next().is_some() {}
    }
}

async fn proxy_connection(client: TcpStream, upstream: &str, state: Arc<State>) -> Result<()> {
    client.set_nodelay(true)?;
    if state.blackholed.load(Ordering::SeqCst) {
        // A reconnect during the partition: hold it open, say nothing.
        return discard(client).await;
    }
    let server = TcpStream::connect(upstream)
        .await
        .with_context(|| format!("proxy connecting to {upstream}"))?;
    server.set_nodelay(true)?;
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let to_server = pump(client_read, server_write, state.clone(), true);
    let to_client = pump(server_read, client_write, state, false);
    // Either direction closing ends the connection (only before the
    // blackhole: after it nothing is forwarded, so nothing is closed).
    tokio::select! {
        result = to_server => result,
        result = to_client => result,
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    state: Arc<State>,
    to_server: bool,
) -> Result<()> {
    let mut buffer = vec![0u8; PUMP_BUFFER_BYTES];
    loop {
        let read = from.read(&mut buffer).await?;
        if state.blackholed.load(Ordering::SeqCst) {
            if read == 0 {
                // The peer closed; keep our side open so nothing is signalled.
                std::future::pending::<()>().await;
            }
            continue;
        }
        if read == 0 {
            return Ok(());
        }
        to.write_all(&buffer[..read]).await?;
        if to_server {
            let ns = u64::try_from(state.epoch.elapsed().as_nanos()).unwrap_or(NEVER - 1);
            state.last_to_server_ns.store(ns, Ordering::SeqCst);
        }
    }
}

/// Reads and drops everything, never closing.
async fn discard(mut socket: TcpStream) -> Result<()> {
    let mut buffer = vec![0u8; PUMP_BUFFER_BYTES];
    loop {
        if socket.read(&mut buffer).await? == 0 {
            std::future::pending::<()>().await;
        }
    }
}
