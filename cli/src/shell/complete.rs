//! Tab completion for `arbor shell`: command names, flags, znode paths
//! fetched from the server, and ACL schemes.
//!
//! What a word is comes from the command's clap definition: the value of a
//! flag that takes one (`--acl` gives ACL schemes, others nothing), else the
//! positional at its place (`acl` gives ACL schemes, `path` and the rest
//! znode paths; past the last positional, nothing).
//!
//! rustyline calls the completer on the thread blocked in `readline` (a
//! `spawn_blocking` thread, never a runtime worker), so the server lookup is
//! spawned onto the runtime and waited for with a deadline of
//! [`COMPLETION_TIMEOUT`]: a slow or missing server, or a missing node, just
//! means no candidates. Path candidates keep the user's spelling (relative
//! stays relative) and children that have children of their own get a
//! trailing `/`, so the next Tab goes one level down.

use std::sync::mpsc;
use std::time::Duration;

use arbor_client::Client;
use rustyline::completion::{Completer, Pair};
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{Context, Helper};
use tokio::runtime::Handle;

use super::line::{escape, resolve, scan};

/// How long one Tab waits for the server before offering nothing.
pub const COMPLETION_TIMEOUT: Duration = Duration::from_secs(2);

/// The most candidates one Tab offers (the first ones in name order).
pub const COMPLETION_CANDIDATES_MAX: usize = 1000;

/// The starts of an ACL entry offered for an ACL word (zkCli's schemes).
const ACL_SCHEMES: [&str; 4] = ["auth::", "digest:", "ip:", "world:anyone:"];

/// The id of the positional (and of the flag) that holds an ACL.
const ACL_ARG: &str = "acl";

/// A command the shell knows, for completing its name, flags and arguments.
#[derive(Debug, Clone)]
struct CommandNames {
    /// The name and its visible aliases.
    names: Vec<String>,
    /// `--long` and `-s` forms of its flags.
    flags: Vec<String>,
    /// The forms of the flags that take a value, with the flag's id.
    value_flags: Vec<(String, String)>,
    /// The ids of its positionals, in order.
    positionals: Vec<String>,
}

/// What the word under the cursor is, for a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Path,
    Acl,
    /// A value nothing can be offered for (a version, a duration).
    Nothing,
}

/// The rustyline helper: completion only (no hints, colours or validation).
pub struct ShellHelper {
    handle: Handle,
    client: Client,
    /// The working node, against which relative paths are completed.
    cwd: String,
    commands: Vec<CommandNames>,
}

impl ShellHelper {
    /// A helper completing the subcommands of `parser` (which must be built,
    /// so that clap's own `help` is among them) and paths of `client`'s tree.
    pub fn new(handle: Handle, client: Client, parser: &clap::Command) -> ShellHelper {
        let commands = parser
            .get_subcommands()
            .map(|command| {
                let mut names = vec![command.get_name().to_owned()];
                names.extend(command.get_visible_aliases().map(str::to_owned));
                let mut flags = Vec::new();
                let mut value_flags = Vec::new();
                let mut positionals = Vec::new();
                for arg in command.get_arguments() {
                    if arg.is_positional() {
                        positionals.push(arg.get_id().to_string());
                        continue;
                    }
                    let mut forms = Vec::new();
                    if let Some(long) = arg.get_long() {
                        forms.push(format!("--{long}"));
                    }
                    if let Some(short) = arg.get_short() {
                        forms.push(format!("-{short}"));
                    }
                    if arg.get_action().takes_values() {
                        let id = arg.get_id().to_string();
                        value_flags.extend(forms.iter().map(|form| (form.clone(), id.clone())));
                    }
                    flags.extend(forms);
                }
                CommandNames {
                    names,
                    flags,
                    value_flags,
                    positionals,
                }
            })
            .collect();
        ShellHelper {
            handle,
            client,
            cwd: "/".to_owned(),
            commands,
        }
    }

    /// Points completion at the current session and working node.
    pub fn set_context(&mut self, client: Client, cwd: String) {
        self.client = client;
        self.cwd = cwd;
    }

    /// The start of the text to replace and the candidates for completing
    /// `line` at byte `pos`. Blocks up to [`COMPLETION_TIMEOUT`] on the server;
    /// must not be called on a runtime worker thread.
    pub fn complete_at(&self, line: &str, pos: usize) -> (usize, Vec<Pair>) {
        let Some(before) = line.get(..pos) else {
            return (pos, Vec::new());
        };
        let scan = scan(before);
        let mut words = scan.words;
        // The word under the cursor, or an empty one after a blank.
        let (start, word) = match words.pop() {
            Some(word) if scan.ends_in_word => (word.start, word.text),
            Some(word) => {
                words.push(word);
                (pos, String::new())
            }
            None => (pos, String::new()),
        };
        let candidates = match words.first() {
            None => self.command_candidates(&word),
            Some(first) if first.text == "help" && words.len() == 1 => {
                self.command_candidates(&word)
            }
            Some(first) if word.starts_with('-') => self.flag_candidates(&first.text, &word),
            Some(first) => {
                let before: Vec<&str> = words[1..].iter().map(|w| w.text.as_str()).collect();
                match self.slot(&first.text, &before) {
                    Slot::Path => self.path_candidates(&word),
                    Slot::Acl => acl_candidates(&word),
                    Slot::Nothing => Vec::new(),
                }
            }
        };
        (start, candidates)
    }

    /// What the word after `before` (the words after the command's name) is
    /// for `command`. An unknown command gets paths, as it always did.
    fn slot(&self, command: &str, before: &[&str]) -> Slot {
        let Some(known) = self.find(command) else {
            return Slot::Path;
        };
        let mut positional = 0;
        let mut words = before.iter();
        while let Some(word) = words.next() {
            if !word.starts_with('-') {
                positional += 1;
                continue;
            }
            // `--flag value` takes the next word (`--flag=value` holds it).
            let value_of = known.value_flags.iter().find(|(form, _)| form == word);
            if let Some((_, id)) = value_of {
                if words.next().is_none() {
                    // The word under the cursor is this flag's value.
                    return if id == ACL_ARG {
                        Slot::Acl
                    } else {
                        Slot::Nothing
                    };
                }
            }
        }
        match known.positionals.get(positional) {
            Some(id) if id == ACL_ARG => Slot::Acl,
            Some(_) => Slot::Path,
            None => Slot::Nothing,
        }
    }

    fn find(&self, command: &str) -> Option<&CommandNames> {
        self.commands
            .iter()
            .find(|known| known.names.iter().any(|name| name == command))
    }

    fn command_candidates(&self, prefix: &str) -> Vec<Pair> {
        let mut names: Vec<&String> = self
            .commands
            .iter()
            .flat_map(|command| &command.names)
            .filter(|name| name.starts_with(prefix))
            .collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .take(COMPLETION_CANDIDATES_MAX)
            .map(|name| Pair {
                display: name.clone(),
                replacement: format!("{name} "),
            })
            .collect()
    }

    fn flag_candidates(&self, command: &str, prefix: &str) -> Vec<Pair> {
        let Some(command) = self.find(command) else {
            return Vec::new();
        };
        let mut flags: Vec<&String> = command
            .flags
            .iter()
            .filter(|flag| flag.starts_with(prefix))
            .collect();
        flags.sort();
        flags
            .into_iter()
            .take(COMPLETION_CANDIDATES_MAX)
            .map(|flag| Pair {
                display: flag.clone(),
                replacement: format!("{flag} "),
            })
            .collect()
    }

    /// Asks the server for the children matching `word`, waiting at most
    /// [`COMPLETION_TIMEOUT`].
    fn path_candidates(&self, word: &str) -> Vec<Pair> {
        let (sender, receiver) = mpsc::sync_channel(1);
        let client = self.client.clone();
        let cwd = self.cwd.clone();
        let word = word.to_owned();
        // Spawned rather than `block_on`, which would panic if this were ever
        // called inside the runtime; the task ends by itself on its timeout.
        self.handle.spawn(async move {
            let lookup = path_candidates(&client, &cwd, &word);
            let candidates = tokio::time::timeout(COMPLETION_TIMEOUT, lookup)
                .await
                .unwrap_or_default();
            // The receiver may have given up waiting: nothing to do then.
            sender.send(candidates).ok();
        });
        receiver
            .recv_timeout(COMPLETION_TIMEOUT)
            .unwrap_or_default()
    }
}

/// The children of the node named by `word`'s directory part (resolved
/// against `cwd`) whose names start with its last component, spelled as the
/// user would continue typing them. Any failure (no such node, invalid path,
/// no connection) gives none.
pub async fn path_candidates(client: &Client, cwd: &str, word: &str) -> Vec<Pair> {
    let (typed_dir, prefix) = match word.rfind('/') {
        Some(slash) => word.split_at(slash + 1),
        None => ("", word),
    };
    let dir = resolve(cwd, typed_dir);
    let Ok((mut children, _stat)) = client.get_children_with_stat(&dir).await else {
        return Vec::new();
    };
    children.retain(|child| child.name.starts_with(prefix));
    children.sort_by(|a, b| a.name.cmp(&b.name));
    children
        .into_iter()
        .take(COMPLETION_CANDIDATES_MAX)
        .map(|child| {
            let suffix = if child.stat.num_children > 0 { "/" } else { "" };
            Pair {
                display: format!("{}{suffix}", child.name),
                replacement: escape(&format!("{typed_dir}{}{suffix}", child.name)),
            }
        })
        .collect()
}

/// The schemes an ACL word's last entry (after its last comma) may start
/// with, as the whole word to put back.
fn acl_candidates(word: &str) -> Vec<Pair> {
    let (done, entry) = match word.rfind(',') {
        Some(comma) => word.split_at(comma + 1),
        None => ("", word),
    };
    ACL_SCHEMES
        .iter()
        .filter(|scheme| scheme.starts_with(entry))
        .map(|scheme| Pair {
            display: (*scheme).to_owned(),
            replacement: escape(&format!("{done}{scheme}")),
        })
        .collect()
}

impl Completer for ShellHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        Ok(self.complete_at(line, pos))
    }
}

impl Hinter for ShellHelper {
    type Hint = String;
}

impl Highlighter for ShellHelper {}

impl Validator for ShellHelper {}

impl Helper for ShellHelper {}

#[cfg(test)]
mod tests {
    use arbor_client::{ClientOptions, CreateMode};
    use arbor_server::TemporaryServer;
    use rustyline::history::DefaultHistory;

    use super::*;

    fn displays(candidates: &[Pair]) -> Vec<&str> {
        candidates
            .iter()
            .map(|pair| pair.display.as_str())
            .collect()
    }

    fn replacements(candidates: &[Pair]) -> Vec<&str> {
        candidates
            .iter()
            .map(|pair| pair.replacement.as_str())
            .collect()
    }

    // Proves the completer offers commands, flags, and znode paths fetched from a real server.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn completes_against_a_real_server() {
        let server = TemporaryServer::start().await.expect("server starts");
        let client = Client::connect(server.addr(), ClientOptions::default())
            .await
            .expect("client connects");
        for path in [
            "/app",
            "/app/alpha",
            "/app/alps",
            "/app/alps/x",
            "/app/beta",
            "/app/my node",
            "/apple",
        ] {
            client
                .create(path, Vec::new(), CreateMode::Persistent)
                .await
                .expect("node created");
        }
        let parser = super::super::shell_parser();
        let mut helper = ShellHelper::new(Handle::current(), client.clone(), &parser);
        // The completer blocks, as it does inside rustyline's `readline`.
        tokio::task::spawn_blocking(move || {
            let (start, got) = helper.complete_at("ls /app/al", 10);
            assert_eq!(start, 3);
            assert_eq!(displays(&got), ["alpha", "alps/"]);
            assert_eq!(replacements(&got), ["/app/alpha", "/app/alps/"]);

            let (start, got) = helper.complete_at("ls /ap", 6);
            assert_eq!(start, 3);
            assert_eq!(replacements(&got), ["/app/", "/apple"]);

            // The cursor in the middle of the line completes the word before it.
            let (start, got) = helper.complete_at("stat /ap extra", 8);
            assert_eq!(start, 5);
            assert_eq!(got.len(), 2);

            // Relative to the working node, and keeping the relative spelling.
            helper.set_context(client.clone(), "/app".to_owned());
            let (start, got) = helper.complete_at("get be", 6);
            assert_eq!(start, 4);
            assert_eq!(replacements(&got), ["beta"]);
            let (_, got) = helper.complete_at("get ../app", 10);
            assert_eq!(replacements(&got), ["../app/", "../apple"]);
            let (_, got) = helper.complete_at("get ", 4);
            assert_eq!(displays(&got), ["alpha", "alps/", "beta", "my node"]);
            // Names with blanks come back escaped, and an open quote is replaced too.
            let (start, got) = helper.complete_at("get \"my", 7);
            assert_eq!(start, 4);
            assert_eq!(replacements(&got), [r"my\ node"]);

            // Commands, built-ins, and flags of the command being typed.
            let (start, got) = helper.complete_at("cr", 2);
            assert_eq!(start, 0);
            assert_eq!(displays(&got), ["create"]);
            assert_eq!(replacements(&got), ["create "]);
            let (_, got) = helper.complete_at("c", 1);
            assert_eq!(displays(&got), ["cd", "create"]);
            let (_, got) = helper.complete_at("help de", 7);
            assert_eq!(displays(&got), ["delete"]);
            let (_, got) = helper.complete_at("delete --r", 10);
            assert_eq!(displays(&got), ["--recursive"]);

            // The ACL commands: names, flags, and what each argument is.
            let (_, got) = helper.complete_at("get", 3);
            assert_eq!(displays(&got), ["get", "getacl"]);
            let (_, got) = helper.complete_at("wh", 2);
            assert_eq!(replacements(&got), ["whoami "]);
            let (_, got) = helper.complete_at("create --a", 10);
            assert_eq!(displays(&got), ["--acl"]);
            let (_, got) = helper.complete_at("getacl /app/al", 14);
            assert_eq!(displays(&got), ["alpha", "alps/"]);
            let (_, got) = helper.complete_at("setacl /app/al", 14);
            assert_eq!(displays(&got), ["alpha", "alps/"]);
            let (_, got) = helper.complete_at("setacl /app ", 12);
            assert_eq!(
                displays(&got),
                ["auth::", "digest:", "ip:", "world:anyone:"]
            );
            let (start, got) = helper.complete_at("setacl -v 1 /app wo", 19);
            assert_eq!((start, replacements(&got)), (17, vec!["world:anyone:"]));
            let (_, got) = helper.complete_at("create --acl auth::cdrwa,d /app/x", 26);
            assert_eq!(replacements(&got), ["auth::cdrwa,digest:"]);
            // No candidates for a version, or where a command takes nothing.
            let (_, got) = helper.complete_at("setacl -v ", 10);
            assert!(got.is_empty());
            let (_, got) = helper.complete_at("whoami ", 7);
            assert!(got.is_empty());

            // A missing node, or an invalid path, offers nothing.
            let (_, got) = helper.complete_at("ls /nope/x", 10);
            assert!(got.is_empty());
            let (_, got) = helper.complete_at("ls /app/alpha/", 14);
            assert!(got.is_empty());
            // A position outside the line (or inside a character) offers nothing.
            let (_, got) = helper.complete_at("ls", 99);
            assert!(got.is_empty());

            // And the same through rustyline's trait.
            let history = DefaultHistory::new();
            let context = Context::new(&history);
            let (start, got) = helper
                .complete("ls /app/al", 10, &context)
                .expect("completion never fails");
            assert_eq!((start, displays(&got)), (3, vec!["alpha", "alps/"]));
        })
        .await
        .expect("the completer does not panic");
    }

    // Proves a server that has gone away yields no candidates (within the timeout), not an error.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unreachable_server_offers_nothing() {
        let server = TemporaryServer::start().await.expect("server starts");
        let client = Client::connect(server.addr(), ClientOptions::default())
            .await
            .expect("client connects");
        let parser = super::super::shell_parser();
        let helper = ShellHelper::new(Handle::current(), client.clone(), &parser);
        client.close().await.expect("client closes");
        let got = tokio::task::spawn_blocking(move || helper.complete_at("ls /", 4).1)
            .await
            .expect("the completer does not panic");
        assert!(got.is_empty());
        drop(server);
    }
}
