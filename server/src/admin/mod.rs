//! The admin port (`--admin-listen`, 127.0.0.1:7182 by default): what an
//! operator's tools read over HTTP.
//!
//! * `GET /metrics`: Prometheus text ([`metrics`]).
//! * `GET /health`: 200 while the process is up and its data directory
//!   takes a write and an fsync; 503 with the reason otherwise. For a
//!   liveness probe or a Docker healthcheck.
//! * `GET /ready`: 200 when the server should be sent clients: healthy,
//!   not shutting down and, in an ensemble, knowing a leader that holds a
//!   quorum with its own log applied; 503 with the reason otherwise. For a
//!   load balancer or a readiness probe.
//! * `GET /commands/<name>`: JSON pages ([`commands`]): `stat`, `conf`,
//!   `cons`, `sessions`, `watches`; `/commands` lists them.
//!
//! Everything is read-only. Each connection gets one answer within
//! [`http::REQUEST_TIMEOUT`], and at most [`ADMIN_CONNECTIONS_MAX`] are
//! served at once: a scraper stuck on the port cannot hold the server's
//! memory or threads.

pub mod backup;
pub mod commands;
pub mod figures;
pub mod http;
pub mod metrics;
pub mod native;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;
use tracing::{debug, info};

use crate::context::Shared;
use crate::storage::recovery::DataLayout;
use http::{Request, Response};

/// Admin connections served at once; more wait in the listen backlog.
pub const ADMIN_CONNECTIONS_MAX: usize = 16;

/// The file `/health` writes, fsyncs and removes in the data directory.
pub const HEALTH_PROBE_FILE: &str = "health-probe";

/// Serves the admin port until the server shuts down.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let slots = Arc::new(Semaphore::new(ADMIN_CONNECTIONS_MAX));
    let tasks = TaskTracker::new();
    loop {
        let slot = tokio::select! {
            () = shared.shutdown.cancelled() => break,
            slot = slots.clone().acquire_owned() => slot,
        };
        let Ok(slot) = slot else { break };
        let accepted = tokio::select! {
            () = shared.shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                debug!(error = %err, "admin accept failed");
                continue;
            }
        };
        let shared = shared.clone();
        tasks.spawn(async move {
            let answered =
                tokio::time::timeout(http::REQUEST_TIMEOUT, answer(stream, peer, shared)).await;
            if answered.is_err() {
                debug!(%peer, "admin request timed out");
            }
            drop(slot);
        });
    }
    tasks.close();
    // Pages in progress finish (each is bounded by its timeout).
    tasks.wait().await;
}

async fn answer(mut stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let request = match http::read_head(&mut stream).await {
        Ok(Some(request)) => request,
        Ok(None) | Err(_) => return,
    };
    let (response, head_only) = match request {
        Ok(request) => {
            let head_only = request.head_only;
            let path = request.path.clone();
            let response = match tokio::task::spawn_blocking(move || route(&request, &shared)).await
            {
                Ok(response) => response,
                Err(_) => Response::text(500, "the page failed\n"),
            };
            debug!(%peer, path, status = response.status, "admin request");
            (response, head_only)
        }
        Err(bad) => {
            info!(%peer, problem = ?bad, "bad request on the admin port");
            (bad.response(), false)
        }
    };
    let _ = http::write(&mut stream, &response, head_only).await;
}

/// The answer to `request`. Blocking: pages read the data directory.
fn route(request: &Request, shared: &Shared) -> Response {
    match request.path.as_str() {
        "/metrics" => Response {
            status: 200,
            content_type: http::PROMETHEUS,
            body: metrics::render(shared),
        },
        "/health" => match health(shared) {
            Ok(()) => Response::text(200, "ok\n"),
            Err(reason) => Response::text(503, format!("{reason}\n")),
        },
        "/ready" => match ready(shared) {
            Ok(()) => Response::text(200, "ready\n"),
            Err(reason) => Response::text(503, format!("{reason}\n")),
        },
        "/" | "/commands" | "/commands/" => Response::json(200, commands::index()),
        path => match path.strip_prefix("/commands/") {
            Some(name) => match commands::page(name, shared) {
                Some(body) => Response::json(200, body),
                None => Response::text(
                    404,
                    format!(
                        "no command {name:?}; there are {}\n",
                        commands::NAMES.join(", ")
                    ),
                ),
            },
            None => Response::text(
                404,
                "not found; try /metrics, /health, /ready or /commands\n",
            ),
        },
    }
}

/// Whether the process can still make writes durable: the log has not
/// failed, and the data directory takes a write and an fsync now.
pub fn health(shared: &Shared) -> Result<(), String> {
    if shared.stats.has_log_failed() {
        return Err("the write-ahead log failed; the server is stopping".into());
    }
    let layout = DataLayout::new(&shared.config.data_dir);
    let probe = layout.data_dir.join(HEALTH_PROBE_FILE);
    let written = std::fs::File::create(&probe).and_then(|mut file| {
        file.write_all(b"ok")?;
        file.sync_all()
    });
    let _ = std::fs::remove_file(&probe);
    written.map_err(|err| {
        format!(
            "storage is not writable: {}: {err}",
            layout.data_dir.display()
        )
    })
}

/// Whether clients should be sent here now.
pub fn ready(shared: &Shared) -> Result<(), String> {
    if shared.shutdown.is_cancelled() {
        return Err("shutting down".into());
    }
    health(shared)?;
    match shared.ensemble() {
        Some(ensemble) => ensemble.readiness(),
        None => Ok(()),
    }
}
