//! `arbord`: parses flags, sets up logging, and runs the server until SIGINT
//! or SIGTERM.

mod args;
mod config_file;
mod logging;
mod reload;
mod settings;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use arbor_server::net::idle_spin::IdleSpin;
use arbor_server::net::open_files::OpenFilesLimit;
use arbor_server::server::Listeners;
use arbor_server::Server;
use tracing::warn;

use args::Args;
use clap::CommandFactory;
use settings::Settings;

/// mimalloc instead of the system allocator: a million znodes are several
/// million small allocations, and glibc's malloc spent about 40 % of a log
/// replay in allocation and consolidation (perf). Through our own binding:
/// see `allocator` for why not the `mimalloc` crate's.
#[global_allocator]
static ALLOCATOR: arbor_server::allocator::MiMalloc = arbor_server::allocator::MiMalloc;

/// mimalloc v3's `mi_option_purge_delay`: its index in `mi_option_e` of the
/// mimalloc sources bundled with libmimalloc-sys 0.1.49 (pinned by
/// Cargo.lock); the crate does not export the constant.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Returns freed pages to the OS at once instead of after a second: the
/// copy-on-write pages a snapshot leaves behind would otherwise stay
/// resident (measured: 484 B of RSS per znode instead of 405 after a 1 M-node
/// fill with snapshots).
fn purge_freed_memory_at_once() {
    // SAFETY: a plain setter of mimalloc's option table.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
}

/// Keeps transparent huge pages out of this process. mimalloc asks for them
/// on its arenas (`MADV_HUGEPAGE`), so where THP is `madvise` (Debian's
/// default) every 2 MiB region a thread touches became resident whole:
/// measured on 10 k znodes, 2 166 B of RSS per znode instead of 541, and on
/// 1 M, 194–198 B instead of 183. The faults that zero and compact huge pages
/// also sat in the tail: set at 64 in flight on 1 M znodes had a p999 of
/// 13–18 ms with them and 6–8 ms without, at the same or better throughput.
/// mimalloc read its own option before `main`, so this uses the process-wide
/// switch, which the kernel applies to every later fault.
fn refuse_huge_pages() -> std::io::Result<()> {
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and touches no memory
    // of ours; a kernel without it returns an error, which changes nothing.
    match unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

fn main() -> ExitCode {
    purge_freed_memory_at_once();
    let huge_pages = refuse_huge_pages();
    let argv: Vec<OsString> = std::env::args_os().collect();
    // A bad flag, --help and --version end the process here, as clap
    // prints them.
    let given = Args::command().get_matches_from(&argv);
    let settings = match Settings::read(&argv, &given) {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("arbord: {}", one_line(&err));
            return ExitCode::FAILURE;
        }
    };
    match run(settings, argv, huge_pages) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("arbord: {}", one_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// One readable line with the whole cause chain, never a backtrace. The
/// library's errors already spell out their source in their message, so a
/// cause whose text is already on the line is not repeated.
pub(crate) fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn run(
    settings: Settings,
    argv: Vec<OsString>,
    huge_pages: std::io::Result<()>,
) -> anyhow::Result<()> {
    let args = &settings.args;
    if let Some(args::Action::Restore { backup, data_dir }) = &args.action {
        return restore(backup, data_dir);
    }
    if args.verify {
        return verify(&args.data_dir);
    }
    let log_level = logging::init(args.log_level.as_deref(), args.log_format)?;
    if let Some(path) = &args.config {
        tracing::info!(path = %path.display(), "settings read from the config file (flags win over it)");
    }
    if let Err(err) = huge_pages {
        // Not fatal: the server works the same, with more RSS and a longer tail.
        warn!(error = %err, "cannot turn transparent huge pages off");
    }
    let config = args.config().context("invalid settings")?;
    config.validate().context("invalid settings")?;
    // Before the server reads it: connections stop short of this limit.
    match OpenFilesLimit::raise_to_hard() {
        Ok(files) => tracing::debug!(
            open_files_limit = files.soft,
            open_files_hard_limit = files.hard,
            "open-files limit"
        ),
        Err(err) => warn!(error = %err, "cannot raise the open-files limit to its hard limit"),
    }
    let listen = args.listen(&config)?;
    let zk_listen = args.zk_listen(&config)?;
    let admin_listen = args.admin_listen()?;
    let four_letter_words = config.four_letter_words;
    let server = Server::open(config)?;
    let limits = server.limits();

    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = args.worker_threads {
        runtime.worker_threads(usize::from(workers));
    }
    if args.idle_spin_us > 0 {
        let window = Duration::from_micros(args.idle_spin_us);
        let spin = IdleSpin::new(window).context("cannot set up the idle spin")?;
        if spin.install(&mut runtime).is_err() {
            anyhow::bail!("the idle spin is installed already");
        }
    }
    let runtime = runtime
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let tls_listen = args.tls_listen;
    let stdin_closed = args.exit_on_stdin_close.then(stdin_closed);
    runtime.block_on(async move {
        let plain = match listen {
            Some(addr) => Some(bind(addr).await?),
            None => None,
        };
        let tls = match tls_listen {
            Some(addr) => Some(bind(addr).await?),
            None => None,
        };
        let zk = bind_optional(zk_listen, "ZooKeeper clients", "--zk-listen").await?;
        let admin = bind_optional(admin_listen, "the admin port", "--admin-listen").await?;
        if zk.is_some() {
            tracing::info!(words = %four_letter_words, "four-letter words answered on the ZooKeeper port");
        }
        // Printed once the data directory is recovered and the ports are
        // bound, plain first: tests start arbord on port 0 and read these
        // lines to find it.
        let listeners = [
            (&plain, ""),
            (&tls, "for TLS "),
            (&zk, "for ZooKeeper clients "),
            (&admin, "for admin requests "),
        ];
        for (listener, what) in listeners {
            if let Some(listener) = listener {
                let addr = listener
                    .local_addr()
                    .context("cannot read the listening address")?;
                println!("arbord listening {what}on {addr}");
            }
        }
        std::io::stdout()
            .flush()
            .context("cannot write to stdout")?;
        tokio::spawn(reload::on_hangup(argv, settings, log_level, limits));
        server
            .serve_on(
                Listeners {
                    plain,
                    tls,
                    zk,
                    admin,
                },
                shutdown_signal(stdin_closed),
            )
            .await?;
        Ok(())
    })
}

/// Binds an optional port: one named on the command line must be bound; a
/// default one is given up with a warning if another server has it.
async fn bind_optional(
    choice: Option<(SocketAddr, bool)>,
    what: &str,
    flag: &str,
) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    match choice {
        Some((addr, true)) => Ok(Some(bind(addr).await?)),
        Some((addr, false)) => match bind(addr).await {
            Ok(listener) => Ok(Some(listener)),
            Err(err) => {
                warn!(addr = %addr, error = %one_line(&err), "not serving {what}: the default port is taken ({flag} names another, or off)");
                Ok(None)
            }
        },
        None => Ok(None),
    }
}

async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))
}

/// `--verify`: prints the report; an error is what a start would refuse with.
fn verify(data_dir: &std::path::Path) -> anyhow::Result<()> {
    let report = arbor_server::storage::recovery::verify(data_dir)?;
    println!("{report}");
    println!("ok: arbord would start from {}", data_dir.display());
    Ok(())
}

/// `arbord restore`: says what the new directory holds.
fn restore(backup: &std::path::Path, data_dir: &std::path::Path) -> anyhow::Result<()> {
    let restored = arbor_server::storage::restore::restore(backup, data_dir)?;
    println!(
        "restored {} nodes and {} sessions as of zxid {} into {}",
        restored.nodes,
        restored.sessions,
        arbor_protocol::Hex(restored.zxid),
        data_dir.display()
    );
    println!("start it with: arbord --data-dir {}", data_dir.display());
    Ok(())
}

/// Completes when standard input is closed (a reader thread, since tokio's
/// stdin would keep the runtime from stopping).
fn stdin_closed() -> tokio::sync::oneshot::Receiver<()> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut sink = [0u8; 256];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        let _ = tx.send(());
    });
    rx
}

/// Completes on SIGINT, SIGTERM, or (if asked) the end of standard input.
async fn shutdown_signal(stdin_closed: Option<tokio::sync::oneshot::Receiver<()>>) {
    let stdin_closed = async move {
        match stdin_closed {
            Some(rx) => {
                let _ = rx.await;
                tracing::info!("standard input closed");
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = signals() => tracing::info!("signal received"),
        () = stdin_closed => {}
    }
}

async fn signals() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
