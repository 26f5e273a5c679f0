//! `arbor`: browse and edit the znode tree of an Arbor server from a shell.
//!
//! This file only parses the command line and dispatches; each command lives
//! in `commands/`, rendering in `output.rs`, and the mapping of failures to
//! exit codes in `error.rs`. Every command prints one JSON document with
//! `--json` (except `watch`, which prints one per event), and every failure is
//! one line on stderr (or one JSON error document on stdout) plus a
//! documented exit code; the binary never panics on bad input.

mod browse;
mod commands;
mod data;
mod duration;
mod error;
mod outage;
mod output;
mod progress;
mod shell;
mod signals;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::output::{ColorChoice, Output};

/// Where `arbor` connects when neither `--server` nor `ARBOR_SERVER` is given.
const DEFAULT_SERVER: &str = "127.0.0.1:7181";

/// The port of a `--server` entry that names none: arbord's native port.
const DEFAULT_PORT: u16 = 7181;

/// `servers` (`host[:port][,…]`) with [`DEFAULT_PORT`] added to each entry
/// that has no port: `host`, `10.0.0.1`, `[::1]`. A bare IPv6 address has
/// colons of its own, so it is left as given (write `[addr]` or `[addr]:port`).
fn with_default_ports(servers: &str) -> String {
    servers
        .split(',')
        .map(str::trim)
        .map(|entry| {
            let bracketed = entry.starts_with('[') && entry.ends_with(']');
            if !entry.is_empty() && (bracketed || !entry.contains(':')) {
                format!("{entry}:{DEFAULT_PORT}")
            } else {
                entry.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Browse and edit the znodes of an Arbor server.
///
/// Exit codes: 0 ok, 1 error, 2 usage error, 3 server unreachable, 4 no node,
/// 5 node exists, 6 bad version, 7 node not empty, 8 invalid path, 9 not
/// authorized, 10 authentication failed, 11 invalid ACL, 12 lock not granted
/// in time, 13 lock lost (`arbor lock`; otherwise it exits with its
/// command's status).
#[derive(Debug, Parser)]
#[command(name = "arbor", version, about, long_about)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Flags every command takes.
#[derive(Debug, Args)]
struct Global {
    /// Server address(es), `host[:port][,host[:port]...]`, 7181 where no
    /// port is given [default: $ARBOR_SERVER, else 127.0.0.1:7181].
    #[arg(long, global = true)]
    server: Option<String>,
    /// Prove these digest credentials on every connection [default:
    /// $ARBOR_AUTH]. Other local users can see command lines: prefer the
    /// variable.
    #[arg(long, global = true, value_name = "USER:PASSWORD", value_parser = Credentials::parse)]
    auth: Option<Credentials>,
    /// Connect over TLS, trusting the CA certificates of this PEM file
    /// [default: $ARBOR_TLS_CA]. --server then names TLS ports.
    #[arg(long, global = true, value_name = "PEM")]
    tls_ca: Option<PathBuf>,
    /// With --tls-ca: present this client certificate (PEM) to servers
    /// that require one [default: $ARBOR_TLS_CERT].
    #[arg(long, global = true, value_name = "PEM")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM) [default: $ARBOR_TLS_KEY].
    #[arg(long, global = true, value_name = "PEM")]
    tls_key: Option<PathBuf>,
    /// Connect and request timeout, such as `5s` or `500ms`.
    #[arg(long, global = true, default_value = "5s", value_parser = duration::parse)]
    timeout: Duration,
    /// The session timeout to ask for, such as `30s` (the server clamps it
    /// to its range): how long a session outlives a lost server [default:
    /// 30s for watch, browse and shell, 10s otherwise].
    #[arg(long, global = true, value_parser = duration::parse)]
    session_timeout: Option<Duration>,
    /// Print one JSON document per command (one per line for `watch`).
    #[arg(long, global = true)]
    json: bool,
    /// Colour human output: `auto` when stdout is a terminal and `NO_COLOR`
    /// is unset.
    #[arg(long, global = true, value_enum, default_value = "auto")]
    color: ColorChoice,
}

#[derive(Debug, Subcommand)]
enum Command {
    #[command(flatten)]
    Node(commands::NodeCommand),
    /// An interactive prompt: the same commands, with history, completion of
    /// commands and znode paths, and `cd`/`pwd`. Piped input runs as a
    /// script, which stops at the first failing line with its exit code.
    Shell(shell::ShellArgs),
    /// A full-screen browser of the tree, updated live.
    Browse,
    /// Print the client version (and the server's last zxid, if reachable).
    Version,
    /// Print the digest id of USER:PASSWORD, as a `digest` ACL entry names
    /// it (no server needed).
    Digest(commands::acl::DigestArgs),
    /// An ensemble's members as each server of --server sees them.
    #[command(subcommand)]
    Cluster(commands::cluster::ClusterCommand),
    /// Run a command while holding the fair lock at PATH: `arbor lock
    /// /locks/nightly -- ./backup.sh`. The command gets ARBOR_FENCING_TOKEN
    /// (and ARBOR_LOCK_PATH, ARBOR_LOCK_NODE); arbor exits with its status,
    /// 12 if the lock was not granted within --timeout, 13 if it was lost
    /// while the command ran (the command is then killed).
    Lock(commands::lock::LockArgs),
    /// The server's own reports (ADMIN on / needed): `server stat`, `conf`,
    /// `cons`, `sessions`, `watches`. (`arbor stat PATH` is a node's stat.)
    #[command(subcommand)]
    Server(commands::admin::ServerCommand),
    /// Every session on the server (= `server sessions`).
    Sessions,
    /// Connections that serve a session (= `server cons`).
    Cons,
    /// An operator's action on a session: `session close ID` evicts it.
    #[command(subcommand)]
    Session(commands::admin::SessionCommand),
    /// Write a consistent backup of the live server to FILE (ADMIN on /
    /// needed); `arbord restore FILE --data-dir DIR` starts from it.
    Backup(commands::admin::BackupArgs),
    /// Write a subtree's nodes (data and ACLs) as JSON, to move
    /// configuration between clusters.
    Export(commands::transfer::ExportArgs),
    /// Create the nodes of an `arbor export` under its root (or --to).
    Import(commands::transfer::ImportArgs),
}

impl Global {
    /// The server to connect to: `--server`, else `$ARBOR_SERVER`, else
    /// [`DEFAULT_SERVER`].
    /// A server named without a port gets Arbor's native port.
    fn server(&self) -> String {
        let servers = self
            .server
            .clone()
            .or_else(|| std::env::var("ARBOR_SERVER").ok().filter(|s| !s.is_empty()))
            .unwrap_or_else(|| DEFAULT_SERVER.to_owned());
        with_default_ports(&servers)
    }

    /// The digest credentials to prove: `--auth`, else `$ARBOR_AUTH`, else
    /// none.
    fn auth(&self) -> Option<Credentials> {
        self.auth.clone().or_else(|| {
            std::env::var("ARBOR_AUTH")
                .ok()
                .filter(|s| !s.is_empty())
                .map(Credentials)
        })
    }
}

/// A path flag, else its environment variable (unset or empty: none).
fn path_or_env(flag: &Option<PathBuf>, variable: &str) -> Option<PathBuf> {
    flag.clone().or_else(|| {
        std::env::var_os(variable)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
    })
}

impl Global {
    /// TLS settings from `--tls-ca`/`--tls-cert`/`--tls-key` (or their
    /// variables); `None` without a CA.
    fn tls(&self) -> anyhow::Result<Option<arbor_client::TlsOptions>> {
        let ca = path_or_env(&self.tls_ca, "ARBOR_TLS_CA");
        let cert = path_or_env(&self.tls_cert, "ARBOR_TLS_CERT");
        let key = path_or_env(&self.tls_key, "ARBOR_TLS_KEY");
        let Some(ca) = ca else {
            if cert.is_some() || key.is_some() {
                anyhow::bail!("--tls-cert and --tls-key need --tls-ca (the CA that issued the server's certificate)");
            }
            return Ok(None);
        };
        let tls = arbor_client::TlsOptions::new(ca)?;
        match (cert, key) {
            (Some(cert), Some(key)) => Ok(Some(tls.with_client_certificate(cert, key)?)),
            (None, None) => Ok(Some(tls)),
            _ => anyhow::bail!("--tls-cert and --tls-key go together"),
        }
    }
}

/// `user:password` for the digest scheme, as given; never printed.
#[derive(Clone)]
struct Credentials(String);

impl Credentials {
    /// Takes any text: the form is checked when connecting, so that a bad
    /// value is reported without being echoed (clap would print it).
    fn parse(text: &str) -> Result<Credentials, std::convert::Infallible> {
        Ok(Credentials(text.to_owned()))
    }

    fn as_str(&self) -> &str {
        &self.0
    }
}

/// Never shows the password.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(<redacted>)")
    }
}

fn main() {
    let cli = Cli::parse();
    let out = Output::new(cli.global.json, cli.global.color);
    // One worker: the client's connection task keeps the session alive
    // while `arbor shell` blocks its own thread in the line editor.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => error::exit_with(&out, &anyhow::Error::new(err).context("cannot start")),
    };
    let result = runtime.block_on(run(cli, &out));
    drop(runtime);
    match result {
        Ok(()) => std::process::exit(0),
        Err(err) => error::exit_with(&out, &err),
    }
}

/// Runs one command to completion.
async fn run(cli: Cli, out: &Output) -> anyhow::Result<()> {
    let global = &cli.global;
    let command = match cli.command {
        Command::Version => return commands::version::run(global, out).await,
        Command::Digest(args) => return commands::acl::run_digest(args, out),
        Command::Cluster(command) => return commands::cluster::run(global, command, out).await,
        Command::Server(command) => return commands::admin::run_server(global, command, out).await,
        Command::Sessions => {
            let command = commands::admin::ServerCommand::Sessions;
            return commands::admin::run_server(global, command, out).await;
        }
        Command::Cons => {
            let command = commands::admin::ServerCommand::Cons;
            return commands::admin::run_server(global, command, out).await;
        }
        Command::Session(command) => {
            return commands::admin::run_session(global, command, out).await
        }
        Command::Backup(args) => return commands::admin::run_backup(global, args, out).await,
        Command::Export(args) => return commands::transfer::run_export(global, args, out).await,
        Command::Import(args) => return commands::transfer::run_import(global, args, out).await,
        Command::Shell(args) => return shell::run(global, args, out).await,
        Command::Browse => return browse::run(global).await,
        Command::Lock(args) => {
            let client = commands::connect(global).await?;
            let code = commands::lock::run(&client, args).await;
            client.close().await.ok();
            std::process::exit(code?);
        }
        Command::Node(command) => command,
    };
    // Ctrl-C is how a watch ends: not a failure.
    let ends_on_interrupt = matches!(command, commands::NodeCommand::Watch(_));
    let mut signals = signals::Terminating::listen();
    let connected = async {
        if ends_on_interrupt {
            commands::connect_lasting(global).await
        } else {
            commands::connect(global).await
        }
    };
    let client = tokio::select! {
        client = connected => client?,
        code = signals::received(&mut signals) => {
            return Err(error::AlreadyReported { exit_code: code }.into())
        }
    };
    // A watch rides out a server restart; it says so meanwhile.
    let _outage = ends_on_interrupt.then(|| outage::report_on_stderr(&client, out));
    let result = tokio::select! {
        result = command.run(&client, out) => result,
        code = signals::received(&mut signals) => match code {
            error::exit_code::INTERRUPTED if ends_on_interrupt => Ok(()),
            exit_code => Err(error::AlreadyReported { exit_code }.into()),
        },
    };
    // Closing ends the session now, on every path, so the server drops its
    // watches and ephemerals at once rather than after the session timeout;
    // a failure here does not undo the command's effect.
    client.close().await.ok();
    result
}

#[cfg(test)]
mod tests {
    use super::with_default_ports;

    #[test]
    fn servers_without_a_port_get_the_native_one() {
        assert_eq!(with_default_ports("localhost"), "localhost:7181");
        assert_eq!(with_default_ports("10.0.0.1:7000"), "10.0.0.1:7000");
        assert_eq!(
            with_default_ports("a, b:7300,[::1]"),
            "a:7181,b:7300,[::1]:7181"
        );
        assert_eq!(with_default_ports("[::1]:7400"), "[::1]:7400");
        assert_eq!(with_default_ports("::1"), "::1");
    }
}
