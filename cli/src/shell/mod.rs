//! `arbor shell`: an interactive prompt running the same commands as the
//! command line, with history, Tab completion of commands and znode paths,
//! and a working node (`cd`, `pwd`) against which relative paths resolve.
//!
//! Design:
//! * Each line is split shell-style ([`line::split`]) and parsed by clap
//!   against [`ShellLine`], which flattens [`NodeCommand`] and adds the
//!   built-ins. `--help` prints clap's text; a usage error is a failed line
//!   (exit code 2). Nothing in the shell exits the process itself.
//! * The read-only commands (`ls`, `tree`, `get`, `stat`, `sync`, `watch`,
//!   `locks`, `getacl`) default their path to `.` (the working node), by
//!   editing the clap parser at start-up; the writing commands (`setacl`
//!   too) still require a path, so a bare `delete` can never remove the
//!   working node by accident. `whoami` has no path.
//! * The path of every command is resolved against the working node and
//!   normalised (`.`, `..`, repeated and trailing `/`).
//! * `readline` blocks, so it runs on a `spawn_blocking` thread (the editor
//!   moves there and back) and the runtime's single worker stays free for
//!   the client's connection task. Without a terminal on stdin there is no
//!   editor: lines are read plainly (bounded by [`LINE_BYTES_MAX`]), with no
//!   prompt and no history file, so scripts can be piped in.
//! * Several lines at once at a terminal all run, in order: keys the editor
//!   read past a line's Enter stay in its buffer for the next `readline`
//!   (rustyline's `buffer-redux` feature; without it they were dropped with
//!   the reader), and a bracketed paste, which comes back as one entry with
//!   newlines in it, runs line by line.
//! * One session for the whole shell, asking for a long timeout
//!   ([`LASTING_SESSION_TIMEOUT`](commands::LASTING_SESSION_TIMEOUT)) so it
//!   outlives a server restart. The client resumes a lost connection by
//!   itself, and the shell says so on stderr meanwhile, with the time the
//!   session has left; if the session has expired, the next line that needs
//!   the server says so and connects a new session (retrying on each later
//!   line if that fails).
//! * Ctrl-C while a command runs (a `watch`, a long `tree`) stops that
//!   command and the shell goes on with the next line, piped or not; Ctrl-C
//!   at the prompt clears the line; Ctrl-D (end of input) leaves with
//!   status 0. A failed line is reported as `arbor` reports it (one line on
//!   stderr, or the JSON error document). At a terminal the shell goes on; a
//!   piped script stops there with the line's exit code, its message naming
//!   the line (`arbor: line 7: no node (/app/x)`), unless `--keep-going`,
//!   which runs every line and exits with the first failure's code.
//! * History is kept in memory (at most [`HISTORY_ENTRIES_MAX`] lines) and,
//!   for interactive sessions only, loaded from and saved to `$ARBOR_HISTORY`
//!   or `$HOME/.arbor_history`, best effort.

mod complete;
mod line;

use std::ffi::OsString;
use std::future::Future;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context as _;
use arbor_client::{Client, Error as ClientError};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use rustyline::error::ReadlineError;
use rustyline::history::DefaultHistory;
use rustyline::{CompletionType, Config, Editor};
use serde_json::json;

use crate::commands::{self, NodeCommand};
use crate::error::{classify, AlreadyReported, Usage};
use crate::outage::{self, Reporter};
use crate::output::Output;
use crate::Global;

use self::complete::ShellHelper;
use self::line::{read_piped_line, resolve, split, PipedLine, LINE_BYTES_MAX};

/// The most lines kept in the history, in memory and in its file.
pub const HISTORY_ENTRIES_MAX: usize = 1000;

/// The history file's name under `$HOME` when `$ARBOR_HISTORY` is not set.
const HISTORY_FILE_NAME: &str = ".arbor_history";

/// Commands whose path may be left out in the shell, meaning the working
/// node. Only commands that change nothing: a bare `delete` stays an error.
const CWD_DEFAULT_COMMANDS: [&str; 8] = [
    "ls", "tree", "get", "stat", "sync", "watch", "locks", "getacl",
];

/// `arbor shell`'s own flags.
#[derive(Debug, Args)]
pub struct ShellArgs {
    /// In a piped script, run every line even after one fails (and still
    /// exit with the first failure's code); without it the script stops at
    /// the first failing line. A terminal always goes on.
    #[arg(long)]
    keep_going: bool,
}

/// One line of the shell.
#[derive(Debug, Parser)]
#[command(
    name = "arbor",
    no_binary_name = true,
    subcommand_required = true,
    disable_version_flag = true,
    override_usage = "<COMMAND> [ARGS]",
    help_template = "{all-args}"
)]
struct ShellLine {
    #[command(subcommand)]
    command: ShellCommand,
}

#[derive(Debug, Subcommand)]
enum ShellCommand {
    #[command(flatten)]
    Node(NodeCommand),
    /// Change the working node (to `/` without a path); it must exist.
    Cd {
        /// The new working node, absolute or relative.
        path: Option<String>,
    },
    /// Print the working node.
    Pwd,
    /// Leave the shell (as does Ctrl-D).
    #[command(visible_alias = "quit")]
    Exit,
}

/// What the loop does after a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    /// The line failed and was reported: a script stops here unless
    /// `--keep-going`; a terminal goes on.
    Failed,
    Exit,
}

/// The shell's state between lines.
struct Shell<'a> {
    global: &'a Global,
    out: &'a Output,
    parser: clap::Command,
    client: Client,
    /// The working node: absolute and normalised.
    cwd: String,
    /// The number of the script line being run (from 1), for messages;
    /// `None` at a terminal.
    line_number: Option<u64>,
    /// The exit code of the first line that failed.
    first_failure: Option<i32>,
    /// Says on stderr when the server is gone and the session is being
    /// resumed; follows `client` (a new one after an expiry).
    _outage: Reporter,
}

/// Runs the shell until its input ends or `exit`. A script with a failed
/// line ends with [`AlreadyReported`] and that line's exit code.
pub async fn run(global: &Global, args: ShellArgs, out: &Output) -> anyhow::Result<()> {
    let client = commands::connect_lasting(global).await?;
    let mut shell = Shell::new(global, out, client);
    let outcome = if std::io::stdin().is_terminal() {
        shell.run_interactive().await
    } else {
        shell.run_piped(args.keep_going).await
    };
    shell.client.close().await.ok();
    outcome?;
    match shell.first_failure {
        Some(exit_code) if shell.line_number.is_some() => Err(AlreadyReported { exit_code }.into()),
        _ => Ok(()),
    }
}

/// Runs `work` until it ends or Ctrl-C, which ends it early with `None`.
///
/// Listening for Ctrl-C replaces its default action (ending the process)
/// for good, which is what a shell wants: it stops the command, not the
/// shell. At the prompt the editor's raw mode turns Ctrl-C into a key.
async fn interruptible<T, E>(work: impl Future<Output = Result<T, E>>) -> Result<Option<T>, E> {
    let interrupted = async {
        if tokio::signal::ctrl_c().await.is_err() {
            // No signal handling here: then only the work can end.
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        result = work => result.map(Some),
        () = interrupted => Ok(None),
    }
}

/// The parser for shell lines: [`ShellLine`] with the path of
/// [`CWD_DEFAULT_COMMANDS`] made optional (default `.`), and built, so that
/// clap's `help` subcommand is there for the completer.
fn shell_parser() -> clap::Command {
    let mut parser = ShellLine::command();
    for name in CWD_DEFAULT_COMMANDS {
        // Checked first: clap panics on editing an argument it lacks.
        let has_path = parser
            .find_subcommand(name)
            .is_some_and(|command| command.get_arguments().any(|arg| arg.get_id() == "path"));
        if has_path {
            parser = parser.mut_subcommand(name, |command| {
                command.mut_arg("path", |arg| arg.required(false).default_value("."))
            });
        }
    }
    parser.build();
    parser
}

/// Where the history is kept: `$ARBOR_HISTORY`, else `$HOME/.arbor_history`.
fn history_path() -> Option<PathBuf> {
    history_path_from(std::env::var_os("ARBOR_HISTORY"), std::env::var_os("HOME"))
}

fn history_path_from(explicit: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    if let Some(path) = explicit.filter(|path| !path.is_empty()) {
        return Some(PathBuf::from(path));
    }
    home.filter(|home| !home.is_empty())
        .map(|home| PathBuf::from(home).join(HISTORY_FILE_NAME))
}

impl<'a> Shell<'a> {
    fn new(global: &'a Global, out: &'a Output, client: Client) -> Shell<'a> {
        Shell {
            global,
            out,
            parser: shell_parser(),
            _outage: outage::report_on_stderr(&client, out),
            client,
            cwd: "/".to_owned(),
            line_number: None,
            first_failure: None,
        }
    }

    /// Reads lines with the line editor until Ctrl-D, `exit` or a read error.
    async fn run_interactive(&mut self) -> anyhow::Result<()> {
        let config = Config::builder()
            .max_history_size(HISTORY_ENTRIES_MAX)
            .context("cannot configure the line editor")?
            .history_ignore_dups(true)
            .context("cannot configure the line editor")?
            .history_ignore_space(true)
            .auto_add_history(false)
            .completion_type(CompletionType::List)
            .build();
        let mut editor: Editor<ShellHelper, DefaultHistory> =
            Editor::with_config(config).context("cannot start the line editor")?;
        let handle = tokio::runtime::Handle::current();
        let helper = ShellHelper::new(handle, self.client.clone(), &self.parser);
        editor.set_helper(Some(helper));
        let history = history_path();
        if let Some(path) = &history {
            // No file yet on the first run, or an unreadable one: start empty.
            editor.load_history(path).ok();
        }
        let server = self.global.server();
        let mut outcome = Ok(());
        loop {
            if let Some(helper) = editor.helper_mut() {
                helper.set_context(self.client.clone(), self.cwd.clone());
            }
            let prompt = format!("arbor {server} {}> ", self.cwd);
            let (returned, read) = tokio::task::spawn_blocking(move || {
                let read = editor.readline(&prompt);
                (editor, read)
            })
            .await
            .context("the line editor failed")?;
            editor = returned;
            let line = match read {
                Ok(line) => line,
                Err(ReadlineError::Interrupted) => continue,
                Err(ReadlineError::Eof) => break,
                Err(err) => {
                    // A terminal that fails once would likely fail again:
                    // stop rather than spin.
                    outcome = Err(anyhow::Error::new(err).context("cannot read input"));
                    break;
                }
            };
            // A bracketed paste comes back as one entry with its newlines
            // in it: each of its lines runs on its own, as if typed.
            let mut flow = Flow::Continue;
            for line in line.lines() {
                if !line.trim().is_empty() {
                    // Refused duplicates and blank-led lines are not errors.
                    editor.add_history_entry(line).ok();
                }
                flow = self.run_line(line).await;
                if flow == Flow::Exit {
                    break;
                }
            }
            if flow == Flow::Exit {
                break;
            }
        }
        if let Some(path) = &history {
            // Losing the history is not worth failing the session for.
            editor.save_history(path).ok();
        }
        outcome
    }

    /// Runs the lines of a piped script until its end, `exit`, or (without
    /// `keep_going`) the first failing line: no prompt, no history, and
    /// lines read with a bound (the editor's own reader for pipes has none).
    async fn run_piped(&mut self, keep_going: bool) -> anyhow::Result<()> {
        let mut line_number = 0;
        loop {
            let read =
                tokio::task::spawn_blocking(|| read_piped_line(&mut std::io::stdin().lock()))
                    .await
                    .context("reading input failed")?
                    .context("cannot read input")?;
            line_number += 1;
            self.line_number = Some(line_number);
            let flow = match read {
                PipedLine::Eof => return Ok(()),
                PipedLine::Line(line) => self.run_line(&line).await,
                PipedLine::TooLong => {
                    self.report(&anyhow::anyhow!("longer than {LINE_BYTES_MAX} bytes"))
                }
                PipedLine::NotUtf8 => self.report(&anyhow::anyhow!("not UTF-8")),
            };
            match flow {
                Flow::Exit => return Ok(()),
                Flow::Failed if !keep_going => return Ok(()),
                Flow::Continue | Flow::Failed => {}
            }
        }
    }

    /// Runs one line; a failure is reported, and [`Flow::Failed`] tells the
    /// loop.
    async fn run_line(&mut self, line: &str) -> Flow {
        if line.len() > LINE_BYTES_MAX {
            return self.report(&anyhow::anyhow!(
                "line too long ({} bytes; the limit is {LINE_BYTES_MAX})",
                line.len()
            ));
        }
        // `#` starts a comment line, handy in piped scripts.
        if line.trim_start().starts_with('#') {
            return Flow::Continue;
        }
        let words = match split(line) {
            Ok(words) => words,
            Err(err) => {
                let usage = Usage {
                    message: err.to_string(),
                };
                return self.report(&usage.into());
            }
        };
        if words.is_empty() {
            return Flow::Continue;
        }
        let parsed = self
            .parser
            .try_get_matches_from_mut(&words)
            .and_then(|matches| ShellLine::from_arg_matches(&matches));
        let command = match parsed {
            Ok(parsed) => parsed.command,
            Err(err) => return self.usage(&err),
        };
        let result = match command {
            ShellCommand::Exit => return Flow::Exit,
            ShellCommand::Pwd => self
                .out
                .print(&json!({ "path": self.cwd }), &self.cwd)
                .map_err(anyhow::Error::new),
            ShellCommand::Cd { path } => self.cd(path.as_deref().unwrap_or("/")).await,
            ShellCommand::Node(command) => self.run_node_command(command).await,
        };
        match result {
            Ok(()) => Flow::Continue,
            Err(err) => self.report(&err),
        }
    }

    /// Notes a failed line's exit code (the first one is the script's).
    fn failed(&mut self, exit_code: i32) -> Flow {
        self.first_failure.get_or_insert(exit_code);
        Flow::Failed
    }

    /// `message` with the script line it is about, if any.
    fn on_line(&self, message: &str) -> String {
        match self.line_number {
            Some(number) => format!("line {number}: {message}"),
            None => message.to_owned(),
        }
    }

    async fn cd(&mut self, path: &str) -> anyhow::Result<()> {
        self.ensure_session().await?;
        let target = resolve(&self.cwd, path);
        let exists = interruptible(self.client.exists(&target))
            .await
            .map_err(|err| crate::error::at_path(err.into(), &target))?;
        let Some(found) = exists else {
            // Interrupted: stay where we are.
            return Ok(());
        };
        if found.is_none() {
            return Err(ClientError::NoNode { path: target }.into());
        }
        // With --json every command answers with one document.
        if self.out.is_json() {
            self.out.print_json_line(&json!({ "path": target }))?;
        }
        self.cwd = target;
        Ok(())
    }

    /// Runs `command` with its path resolved, until it ends or Ctrl-C.
    async fn run_node_command(&mut self, mut command: NodeCommand) -> anyhow::Result<()> {
        self.ensure_session().await?;
        if let Some(path) = command.path_mut() {
            *path = resolve(&self.cwd, path);
        }
        interruptible(command.run(&self.client, self.out)).await?;
        Ok(())
    }

    /// Replaces an expired (or closed) session with a new one.
    async fn ensure_session(&mut self) -> anyhow::Result<()> {
        if !self.client.state().is_terminal() {
            return Ok(());
        }
        self.warn("session expired (its ephemeral nodes are gone); connecting a new one");
        self.client = commands::connect_lasting(self.global).await?;
        self._outage = outage::report_on_stderr(&self.client, self.out);
        Ok(())
    }

    /// Prints clap's message: help to stdout; usage errors (failures, exit
    /// code 2) to stderr, naming the script line, or as a JSON error
    /// document with --json.
    fn usage(&mut self, err: &clap::Error) -> Flow {
        use clap::error::ErrorKind;
        let is_help = matches!(
            err.kind(),
            ErrorKind::DisplayHelp
                | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                | ErrorKind::DisplayVersion
        );
        if is_help {
            // A closed stdout is noticed by the next command.
            err.print().ok();
            return Flow::Continue;
        }
        let exit_code = crate::error::exit_code::USAGE;
        if self.out.is_json() {
            let message = err.render().to_string();
            let document = self.error_document("Usage", message.trim_end());
            return self.printed(self.out.print_json_line(&document), exit_code);
        }
        if self.line_number.is_some() {
            // clap's text (with its tips and usage), after the line's number.
            let message = err.render().to_string();
            let message = message.strip_prefix("error: ").unwrap_or(&message);
            self.warn(&self.on_line(message.trim_end()));
        } else {
            err.print().ok();
        }
        self.failed(exit_code)
    }

    /// Reports a failed line as `arbor` does (one line on stderr, or the
    /// JSON error document), with its script line, without exiting.
    fn report(&mut self, err: &anyhow::Error) -> Flow {
        let failure = classify(err);
        if failure.exit_code == 0 {
            // stdout was closed by its reader: nobody is listening any more.
            return Flow::Exit;
        }
        if self.out.is_json() {
            let document = self.error_document(&failure.code, &failure.message);
            return self.printed(self.out.print_json_line(&document), failure.exit_code);
        }
        self.warn(&self.on_line(&failure.message));
        self.failed(failure.exit_code)
    }

    /// `{"error": {"code", "message"}}`, with `"line"` in a script.
    fn error_document(&self, code: &str, message: &str) -> serde_json::Value {
        let mut error = json!({"code": code, "message": message});
        if let Some(number) = self.line_number {
            error["line"] = json!(number);
        }
        json!({ "error": error })
    }

    /// After printing a failure's JSON document: ends the shell if stdout
    /// is gone, else notes the failure.
    fn printed(&mut self, result: std::io::Result<()>, exit_code: i32) -> Flow {
        match result {
            Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Flow::Exit,
            _ => self.failed(exit_code),
        }
    }

    /// One `arbor: ...` line on stderr, as `arbor` reports failures (not
    /// with `eprintln!`, which panics if stderr is closed).
    fn warn(&self, message: &str) {
        writeln!(std::io::stderr(), "{}", self.out.error_line(message)).ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> Result<ShellCommand, clap::Error> {
        let mut parser = shell_parser();
        let matches = parser.try_get_matches_from_mut(words)?;
        Ok(ShellLine::from_arg_matches(&matches)?.command)
    }

    // Proves read-only commands default their path to the working node, and writes still need one.
    #[test]
    fn read_only_commands_default_to_the_working_node() {
        for name in CWD_DEFAULT_COMMANDS {
            match parse(&[name]) {
                Ok(ShellCommand::Node(mut command)) => {
                    assert_eq!(command.path_mut().map(|path| path.as_str()), Some("."))
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        match parse(&["ls", "-l", "x"]) {
            Ok(ShellCommand::Node(mut command)) => {
                assert_eq!(command.path_mut().map(|path| path.as_str()), Some("x"))
            }
            other => panic!("{other:?}"),
        }
        match parse(&["whoami"]) {
            Ok(ShellCommand::Node(mut command)) => assert_eq!(command.path_mut(), None),
            other => panic!("{other:?}"),
        }
        for name in ["create", "set", "delete", "setacl"] {
            let err = parse(&[name]).expect_err("a write needs its path");
            assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        }
    }

    // Proves the built-ins parse, `quit` is `exit`, and unknown commands and help are clap errors, not exits.
    #[test]
    fn built_ins_and_usage_errors() {
        assert!(matches!(
            parse(&["cd"]),
            Ok(ShellCommand::Cd { path: None })
        ));
        assert!(matches!(
            parse(&["cd", ".."]),
            Ok(ShellCommand::Cd { path: Some(path) }) if path == ".."
        ));
        assert!(matches!(parse(&["pwd"]), Ok(ShellCommand::Pwd)));
        assert!(matches!(parse(&["exit"]), Ok(ShellCommand::Exit)));
        assert!(matches!(parse(&["quit"]), Ok(ShellCommand::Exit)));
        let err = parse(&["bogus"]).expect_err("unknown command");
        assert_eq!(err.kind(), clap::error::ErrorKind::InvalidSubcommand);
        let err = parse(&["help"]).expect_err("help is shown by clap");
        assert_eq!(err.kind(), clap::error::ErrorKind::DisplayHelp);
        let help = err.render().to_string();
        assert!(help.contains("cd") && help.contains("create"), "{help}");
        let err = parse(&["ls", "--help"]).expect_err("help is shown by clap");
        assert_eq!(err.kind(), clap::error::ErrorKind::DisplayHelp);
    }

    // Proves lines change the working node only to nodes that exist, and a line after the session ended runs on a new session.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cd_and_reconnect_after_the_session_ends() {
        let server = arbor_server::TemporaryServer::start()
            .await
            .expect("server starts");
        let cli = crate::Cli::try_parse_from(["arbor", "--server", server.addr(), "shell"])
            .expect("arguments parse");
        let global = cli.global;
        let out = Output::new(global.json, global.color);
        let client = commands::connect(&global).await.expect("client connects");
        client
            .create("/a", Vec::new(), arbor_client::CreateMode::Persistent)
            .await
            .expect("node created");
        let mut shell = Shell::new(&global, &out, client.clone());
        assert_eq!(shell.run_line("cd a").await, Flow::Continue);
        assert_eq!(shell.cwd, "/a");
        assert_eq!(shell.run_line("cd /nope").await, Flow::Failed);
        assert_eq!(shell.first_failure, Some(crate::error::exit_code::NO_NODE));
        assert_eq!(shell.cwd, "/a");
        assert_eq!(shell.run_line("cd ../a/./").await, Flow::Continue);
        assert_eq!(shell.cwd, "/a");
        assert_eq!(shell.run_line("cd").await, Flow::Continue);
        assert_eq!(shell.cwd, "/");

        client.close().await.expect("session closes");
        assert!(shell.client.state().is_terminal());
        assert_eq!(shell.run_line("cd /a").await, Flow::Continue);
        assert!(shell.client.state().is_connected());
        assert_eq!(shell.cwd, "/a");
        assert_eq!(shell.run_line("exit").await, Flow::Exit);
        assert_eq!(shell.run_line("quit").await, Flow::Exit);
    }

    // Proves the history file is $ARBOR_HISTORY, else ~/.arbor_history, else none.
    #[test]
    fn history_file_location() {
        let some = |s: &str| Some(OsString::from(s));
        assert_eq!(
            history_path_from(some("/tmp/h"), some("/home/u")),
            Some(PathBuf::from("/tmp/h"))
        );
        assert_eq!(
            history_path_from(some(""), some("/home/u")),
            Some(PathBuf::from("/home/u/.arbor_history"))
        );
        assert_eq!(history_path_from(None, None), None);
    }
}
