//! Logging: text or JSON lines on standard error, with a filter that
//! SIGHUP can change while the server runs.

use std::io::IsTerminal;

use anyhow::Context;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, reload, EnvFilter, Registry};

use crate::args::LogFormat;

/// Arbor's own events at info; openraft logs every vote and state dump at
/// info, which would bury them (its warnings and errors still show).
pub const DEFAULT_LOG_FILTER: &str = "info,openraft=warn";

/// Changes the filter of the running subscriber.
pub struct LogLevel {
    handle: reload::Handle<EnvFilter, Registry>,
}

impl LogLevel {
    /// Filters by `level` from now on (as [`filter`] reads it).
    pub fn set(&self, level: Option<&str>) -> anyhow::Result<()> {
        let filter = filter(level)?;
        self.handle
            .reload(filter)
            .context("cannot change the log filter")
    }
}

/// The filter `--log-level` names; without one, `RUST_LOG`, or
/// [`DEFAULT_LOG_FILTER`].
pub fn filter(level: Option<&str>) -> anyhow::Result<EnvFilter> {
    match level {
        Some(text) => EnvFilter::try_new(text)
            .with_context(|| format!("--log-level {text:?} is not a filter")),
        None => Ok(EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER))),
    }
}

/// Checks a `--log-level` value (the flag's parser).
pub fn parse_level(text: &str) -> Result<String, String> {
    EnvFilter::try_new(text)
        .map(|_| text.to_owned())
        .map_err(|err| {
            format!("not a level or filter ({err}); e.g. info, debug, info,arbor_server::net=debug")
        })
}

/// Installs the subscriber for the whole process.
pub fn init(level: Option<&str>, format: LogFormat) -> anyhow::Result<LogLevel> {
    let (filter, handle) = reload::Layer::new(filter(level)?);
    let registry = tracing_subscriber::registry().with(filter);
    let installed = match format {
        LogFormat::Text => registry
            .with(
                fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::stderr().is_terminal()),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    installed.context("cannot install the logger")?;
    Ok(LogLevel { handle })
}
