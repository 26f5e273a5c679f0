//! A server inside another program's process, on a temporary data directory
//! and a free port: for tests and runnable documentation examples.
//!
//! It runs on a thread of its own with its own single-threaded runtime, so it
//! works from any caller (a current-thread test runtime, or none at all), and
//! dropping it stops and joins everything it started.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use crate::clock::Clock;
use crate::{Config, Server, ServerError};

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// A running server that is stopped, its threads joined and its data
/// directory removed, when dropped.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), arbor_server::ServerError> {
/// let server = arbor_server::TemporaryServer::start().await?;
/// println!("serving on {}", server.addr());
/// server.stop()?;
/// # Ok(()) }
/// ```
pub struct TemporaryServer {
    addr: String,
    data_dir: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<(), ServerError>>>,
}

impl TemporaryServer {
    /// Starts a server on 127.0.0.1 with a fresh temporary data directory,
    /// a 200 ms tick and no fsync (nothing here needs to survive a crash).
    pub async fn start() -> Result<Self, ServerError> {
        Self::start_with_clock(Clock::system()).await
    }

    /// As [`TemporaryServer::start`], on `clock`: with [`Clock::manual`] a
    /// test decides when sessions expire and TTL nodes fall due.
    pub async fn start_with_clock(clock: Clock) -> Result<Self, ServerError> {
        let data_dir = std::env::temp_dir().join(format!(
            "arbor-embedded-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&data_dir);
        let config = Config {
            data_dir: data_dir.clone(),
            tick_ms: 200,
            fsync: crate::storage::txnlog::FsyncPolicy::Never,
            ..Config::default()
        };
        let io_error = |source| ServerError::Io {
            path: data_dir.clone(),
            source,
        };
        let (ready, addr) = oneshot::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("arbor-embedded".into())
            .spawn(move || serve_here(config, clock, ready, stopped))
            .map_err(io_error)?;
        let started = addr.await;
        let addr = match started {
            Ok(Ok(addr)) => addr,
            failed => {
                let ended = thread.join();
                let _ = std::fs::remove_dir_all(&data_dir);
                return Err(match (failed, ended) {
                    (Ok(Err(err)), _) | (_, Ok(Err(err))) => err,
                    _ => io_error(std::io::Error::other("the server thread ended at start")),
                });
            }
        };
        Ok(Self {
            addr,
            data_dir,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// `host:port` to connect to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Stops the server as a shutdown signal would (requests in flight are
    /// answered), waits for all of it to end, and says how serving ended.
    /// Blocks the calling thread until then.
    pub fn stop(mut self) -> Result<(), ServerError> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<(), ServerError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let ended = match self.thread.take() {
            Some(thread) => thread.join().unwrap_or_else(|_| {
                Err(ServerError::Io {
                    path: self.data_dir.clone(),
                    source: std::io::Error::other("the server thread panicked"),
                })
            }),
            None => Ok(()),
        };
        let _ = std::fs::remove_dir_all(&self.data_dir);
        ended
    }
}

/// The server thread: opens the directory, binds, reports the address (or
/// why it could not), then serves until told to stop.
fn serve_here(
    config: Config,
    clock: Clock,
    ready: oneshot::Sender<Result<String, ServerError>>,
    stopped: oneshot::Receiver<()>,
) -> Result<(), ServerError> {
    let data_dir = config.data_dir.clone();
    let io_error = |source| ServerError::Io {
        path: data_dir.clone(),
        source,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io_error)?;
    runtime.block_on(async move {
        let opened = async {
            let server = Server::open(config)?.with_clock(clock);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(io_error)?;
            let addr = listener.local_addr().map_err(io_error)?.to_string();
            Ok::<_, ServerError>((server, listener, addr))
        };
        let (server, listener, addr) = match opened.await {
            Ok(opened) => opened,
            Err(err) => {
                let _ = ready.send(Err(err));
                return Ok(());
            }
        };
        if ready.send(Ok(addr)).is_err() {
            return Ok(());
        }
        server
            .serve(listener, async {
                let _ = stopped.await;
            })
            .await
    })
}

impl Drop for TemporaryServer {
    fn drop(&mut self) {
        if let Err(err) = self.stop_and_join() {
            tracing::warn!(error = %err, "the temporary server ended with an error");
        }
    }
}
