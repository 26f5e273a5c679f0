//! A server inside another program's process, on a temporary data directory
//! and a free port: for tests and runnable documentation examples.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::task::JoinHandle;

use crate::{Config, Server, ServerError};

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// A running server that is stopped, and its data directory removed, when
/// dropped. Needs a multi-threaded tokio runtime.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> Result<(), arbor_server::ServerError> {
/// let server = arbor_server::TemporaryServer::start().await?;
/// println!("serving on {}", server.addr());
/// # Ok(()) }
/// ```
pub struct TemporaryServer {
    addr: String,
    data_dir: PathBuf,
    task: JoinHandle<Result<(), ServerError>>,
}

impl TemporaryServer {
    /// Starts a server on 127.0.0.1 with a fresh temporary data directory,
    /// a 200 ms tick and no fsync (nothing here needs to survive a crash).
    pub async fn start() -> Result<Self, ServerError> {
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
        let server = tokio::task::spawn_blocking(move || Server::open(config))
            .await
            .map_err(|err| ServerError::Io {
                path: data_dir.clone(),
                source: std::io::Error::other(err),
            })??;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|source| ServerError::Io {
                path: data_dir.clone(),
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ServerError::Io {
                path: data_dir.clone(),
                source,
            })?
            .to_string();
        let task = tokio::spawn(server.serve(listener, std::future::pending()));
        Ok(Self {
            addr,
            data_dir,
            task,
        })
    }

    /// `host:port` to connect to.
    pub fn addr(&self) -> &str {
        &self.addr
    }
}

impl Drop for TemporaryServer {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}
