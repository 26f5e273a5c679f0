//! SIGHUP: the config file is read again and what can change while the
//! server runs is applied (the log filter, the connection limits); every
//! other key that changed is named as ignored until a restart.
//!
//! Each reload compares the file with the settings the server started
//! with, so a key that needs a restart is reported on every SIGHUP until
//! the server is restarted or the file is put back.

use std::ffi::OsString;
use std::sync::Arc;

use arbor_server::config::LiveLimits;
use tracing::{info, warn};

use crate::logging::LogLevel;
use crate::settings::Settings;

/// Keys a reload applies.
const RELOADED: [&str; 3] = ["log_level", "max_connections", "max_connections_per_ip"];

/// Reloads on every SIGHUP until the process ends.
pub async fn on_hangup(
    argv: Vec<OsString>,
    started: Settings,
    log_level: LogLevel,
    limits: Arc<LiveLimits>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(hangups) => hangups,
        Err(err) => {
            warn!(error = %err, "cannot handle SIGHUP; settings will not be reloaded");
            return;
        }
    };
    while hangups.recv().await.is_some() {
        reload(&argv, &started, &log_level, &limits);
    }
}

fn reload(argv: &[OsString], started: &Settings, log_level: &LogLevel, limits: &LiveLimits) {
    let Some(path) = &started.args.config else {
        info!("SIGHUP: arbord was started without --config; nothing to reload");
        return;
    };
    let newer = match Settings::reread(argv) {
        Ok(newer) => newer,
        Err(err) => {
            warn!(path = %path.display(), error = %crate::one_line(&err), "SIGHUP: settings not reloaded; the server keeps the ones it has");
            return;
        }
    };
    let args = &newer.args;
    if let Err(err) = log_level.set(args.log_level.as_deref()) {
        warn!(error = %crate::one_line(&err), "SIGHUP: the log filter was not changed");
    }
    match limits.set_connections(args.max_connections, args.max_connections_per_ip) {
        Ok(()) => arbor_server::server::warn_if_open_files_cap(limits),
        Err(err) => warn!(error = %err, "SIGHUP: the connection limits were not changed"),
    }
    let ignored: Vec<String> = started
        .changed(&newer)
        .into_iter()
        .filter(|key| !RELOADED.contains(&key.as_str()))
        .collect();
    info!(
        path = %path.display(),
        log_level = args.log_level.as_deref().unwrap_or("(default)"),
        max_connections = limits.connections_max(),
        max_connections_per_ip = limits.connections_per_ip_max(),
        "SIGHUP: settings reloaded"
    );
    if !ignored.is_empty() {
        warn!(keys = ?ignored, "SIGHUP: these settings changed but take a restart; they were ignored");
    }
}
