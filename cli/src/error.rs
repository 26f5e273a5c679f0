//! How a failure is reported: one line on stderr (`arbor: <what> (<path>)`)
//! or, with `--json`, `{"error": {"code", "message"}}` on stdout; and which
//! documented exit code it ends the process with.

use arbor_client::recipes::inspect::InspectError;
use arbor_client::recipes::LockError;
use arbor_client::Error as ClientError;
use serde_json::json;

use crate::output::Output;

/// Exit codes, as documented in `arbor --help`. Usage errors exit with 2 from
/// clap itself, or from [`Usage`] for what only a command can check.
pub mod exit_code {
    pub const GENERIC: i32 = 1;
    /// A usage error found after clap's parsing (clap's own exit with 2 too).
    pub const USAGE: i32 = 2;
    pub const UNREACHABLE: i32 = 3;
    pub const NO_NODE: i32 = 4;
    pub const NODE_EXISTS: i32 = 5;
    pub const BAD_VERSION: i32 = 6;
    pub const NOT_EMPTY: i32 = 7;
    pub const INVALID_PATH: i32 = 8;
    /// The node's ACL does not let this session do that.
    pub const NOT_AUTHORIZED: i32 = 9;
    /// The `--auth` credentials are malformed or were refused.
    pub const AUTH_FAILED: i32 = 10;
    /// The server refused an ACL (unknown scheme, malformed id, `auth` with
    /// no proved id).
    pub const INVALID_ACL: i32 = 11;
    /// `arbor lock`: the lock was not granted within `--timeout`.
    pub const LOCK_NOT_TAKEN: i32 = 12;
    /// `arbor lock`: the lock was lost while the command ran.
    pub const LOCK_LOST: i32 = 13;
    /// Ended by SIGINT (Ctrl-C): 128 + 2, as shells report it.
    pub const INTERRUPTED: i32 = 130;
    /// Ended by SIGTERM: 128 + 15.
    pub const TERMINATED: i32 = 143;
}

/// `arbor lock` gave up waiting.
#[derive(Debug)]
pub struct LockNotTaken {
    pub path: String,
    pub waited: Option<std::time::Duration>,
}

impl std::fmt::Display for LockNotTaken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.waited {
            Some(waited) => write!(f, "lock not granted within {waited:?} ({})", self.path),
            None => write!(f, "lock not granted ({})", self.path),
        }
    }
}

impl std::error::Error for LockNotTaken {}

/// `arbor lock` lost the lock while its command ran.
#[derive(Debug)]
pub struct LockLost {
    pub path: String,
    pub state: String,
}

impl std::fmt::Display for LockLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "lock lost while the command ran (connection {}); the command was killed ({})",
            self.state, self.path
        )
    }
}

impl std::error::Error for LockLost {}

/// The server could not be reached at `server` (connect failed or timed out).
#[derive(Debug)]
pub struct Unreachable {
    pub server: String,
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot reach server at {}", self.server)
    }
}

/// The `--auth` credentials were malformed, or the server refused them.
/// Never holds the password.
#[derive(Debug)]
pub struct AuthFailed {
    pub detail: String,
}

impl std::fmt::Display for AuthFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "authentication failed: {}", self.detail)
    }
}

impl std::error::Error for AuthFailed {}

/// A usage error found after parsing, such as an argument only the command
/// can check; exits with [`exit_code::USAGE`] as clap's own do.
#[derive(Debug)]
pub struct Usage {
    pub message: String,
}

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Usage {}

/// There is no session with that id (exit code 4, as for a missing node).
#[derive(Debug)]
pub struct NoSuchSession {
    pub id: String,
}

impl std::fmt::Display for NoSuchSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no session {} on the server", self.id)
    }
}

impl std::error::Error for NoSuchSession {}

/// A create failed with `NoNode` because `parent` (an ancestor of `path`)
/// does not exist.
#[derive(Debug)]
pub struct MissingParent {
    pub parent: String,
    pub path: String,
}

impl std::fmt::Display for MissingParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no node: parent {} does not exist ({})",
            self.parent, self.path
        )
    }
}

impl std::error::Error for MissingParent {}

/// A failure already reported where it happened (a line of a piped
/// script, with its line number), or one that needs no report (a command
/// ended by a signal): the process only exits with its code.
#[derive(Debug)]
pub struct AlreadyReported {
    pub exit_code: i32,
}

impl std::fmt::Display for AlreadyReported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "failed with exit code {}", self.exit_code)
    }
}

impl std::error::Error for AlreadyReported {}

/// The node a command worked on, attached to the errors that do not name
/// one themselves (`NoAuth`, `InvalidAcl`), so their message can.
#[derive(Debug)]
pub struct AtPath {
    pub path: String,
}

impl std::fmt::Display for AtPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at {}", self.path)
    }
}

/// Attaches [`AtPath`] to `err` if it is a client error that names no
/// node (`NoAuth`, `InvalidAcl`); other errors pass unchanged, so their
/// messages stay as they were.
pub fn at_path(err: anyhow::Error, path: &str) -> anyhow::Error {
    let pathless = matches!(
        client_error_in(&err),
        Some(ClientError::NoAuth | ClientError::InvalidAcl)
    );
    if pathless && err.downcast_ref::<AtPath>().is_none() {
        err.context(AtPath {
            path: path.to_owned(),
        })
    } else {
        err
    }
}

/// A failure, classified for printing.
#[derive(Debug, PartialEq, Eq)]
pub struct Failure {
    /// Stable name for JSON (`NoNode`, `Unreachable`, `Error`, ...).
    pub code: String,
    pub message: String,
    pub exit_code: i32,
}

/// Classifies `err` by the first client error, [`AuthFailed`], [`Usage`]
/// or [`Unreachable`] in its chain.
pub fn classify(err: &anyhow::Error) -> Failure {
    if let Some(auth) = err.downcast_ref::<AuthFailed>() {
        return Failure {
            code: "AuthFailed".to_owned(),
            message: auth.to_string(),
            exit_code: exit_code::AUTH_FAILED,
        };
    }
    if let Some(usage) = err.downcast_ref::<Usage>() {
        return Failure {
            code: "Usage".to_owned(),
            message: usage.message.clone(),
            exit_code: exit_code::USAGE,
        };
    }
    if let Some(not_taken) = err.downcast_ref::<LockNotTaken>() {
        return Failure {
            code: "LockNotTaken".to_owned(),
            message: not_taken.to_string(),
            exit_code: exit_code::LOCK_NOT_TAKEN,
        };
    }
    if let Some(lost) = err.downcast_ref::<LockLost>() {
        return Failure {
            code: "LockLost".to_owned(),
            message: lost.to_string(),
            exit_code: exit_code::LOCK_LOST,
        };
    }
    if let Some(unreachable) = err.downcast_ref::<Unreachable>() {
        // Reached, and turned away: the server says why (its connection
        // limits), which is not "cannot reach".
        if let Some(ClientError::Refused { message, .. }) = client_error_in(err) {
            return Failure {
                code: "Refused".to_owned(),
                message: format!("{} refused the connection: {message}", unreachable.server),
                exit_code: exit_code::UNREACHABLE,
            };
        }
        let cause = client_error_in(err)
            .map(|e| format!(": {}", chain_text(e)))
            .unwrap_or_default();
        return Failure {
            code: "Unreachable".to_owned(),
            message: format!("cannot reach server at {}{cause}", unreachable.server),
            exit_code: exit_code::UNREACHABLE,
        };
    }
    if let Some(missing) = err.downcast_ref::<NoSuchSession>() {
        return Failure {
            code: "NoSession".to_owned(),
            message: missing.to_string(),
            exit_code: exit_code::NO_NODE,
        };
    }
    if let Some(missing) = err.downcast_ref::<MissingParent>() {
        return Failure {
            code: "NoNode".to_owned(),
            message: missing.to_string(),
            exit_code: exit_code::NO_NODE,
        };
    }
    if let Some(client_error) = client_error_in(err) {
        return classify_client(client_error, err);
    }
    if let Some(io) = err.chain().find_map(|e| e.downcast_ref::<std::io::Error>()) {
        if io.kind() == std::io::ErrorKind::BrokenPipe {
            return Failure {
                code: "BrokenPipe".to_owned(),
                message: String::new(),
                exit_code: 0,
            };
        }
    }
    Failure {
        code: "Error".to_owned(),
        message: format!("{err:#}"),
        exit_code: exit_code::GENERIC,
    }
}

fn classify_client(client_error: &ClientError, whole: &anyhow::Error) -> Failure {
    let exit_code = match client_error {
        ClientError::NoNode { .. } => exit_code::NO_NODE,
        ClientError::NodeExists { .. } => exit_code::NODE_EXISTS,
        ClientError::BadVersion { .. } => exit_code::BAD_VERSION,
        ClientError::NotEmpty { .. } => exit_code::NOT_EMPTY,
        ClientError::InvalidPath { .. } => exit_code::INVALID_PATH,
        // Lost after connecting, or no answer in time: unreachable too, so
        // a script can tell "try again" from "wrong".
        ClientError::Connect { .. } | ClientError::ConnectionLoss | ClientError::Timeout => {
            exit_code::UNREACHABLE
        }
        ClientError::NoAuth => exit_code::NOT_AUTHORIZED,
        ClientError::AuthFailed => exit_code::AUTH_FAILED,
        ClientError::InvalidAcl => exit_code::INVALID_ACL,
        _ => exit_code::GENERIC,
    };
    let code = match client_error.code() {
        Some(code) => format!("{code:?}"),
        None => client_only_code(client_error).to_owned(),
    };
    let message = match (client_error.code(), node_path(client_error)) {
        (Some(code), Some(path)) => {
            let reason = match client_error {
                ClientError::InvalidPath {
                    reason: Some(reason),
                    ..
                } => format!(": {reason}"),
                _ => String::new(),
            };
            format!("{code}{reason} ({path})")
        }
        _ => match (client_error, whole.downcast_ref::<AtPath>()) {
            (ClientError::NoAuth, Some(at)) => format!("not authorized ({})", at.path),
            (ClientError::NoAuth, None) => "not authorized".to_owned(),
            (ClientError::InvalidAcl, at) => {
                let path = at.map(|at| format!(" ({})", at.path)).unwrap_or_default();
                format!("invalid ACL{path}: {INVALID_ACL_HINT}")
            }
            (ClientError::AuthFailed, _) => {
                "authentication failed: the server refused the credentials".to_owned()
            }
            _ => format!("{whole:#}"),
        },
    };
    Failure {
        code,
        message,
        exit_code,
    }
}

/// What the server refuses in an ACL, for the `InvalidAcl` message.
const INVALID_ACL_HINT: &str =
    "an unknown scheme, a malformed id, or `auth:` in a session without --auth";

/// The client error that caused `err`, if any. The recipes' errors wrap
/// theirs `transparent`ly, which hides it from the chain (their `source` is
/// its source), so they are looked into by name.
fn client_error_in(err: &anyhow::Error) -> Option<&ClientError> {
    err.downcast_ref::<ClientError>().or_else(|| {
        err.chain().find_map(|e| {
            e.downcast_ref::<ClientError>()
                .or(match e.downcast_ref::<LockError>() {
                    Some(LockError::Client(inner)) => Some(inner),
                    _ => None,
                })
                .or(match e.downcast_ref::<InspectError>() {
                    Some(InspectError::Client(inner)) => Some(inner),
                    _ => None,
                })
        })
    })
}

/// The path a node error is about, if it has a non-empty one.
fn node_path(err: &ClientError) -> Option<&str> {
    let path = match err {
        ClientError::NoNode { path }
        | ClientError::NodeExists { path }
        | ClientError::BadVersion { path }
        | ClientError::NotEmpty { path }
        | ClientError::NoChildrenForEphemerals { path }
        | ClientError::InvalidPath { path, .. }
        | ClientError::NoWatcher { path } => path,
        _ => return None,
    };
    (!path.is_empty()).then_some(path.as_str())
}

fn client_only_code(err: &ClientError) -> &'static str {
    match err {
        ClientError::ConnectionLoss => "ConnectionLoss",
        ClientError::Timeout => "Timeout",
        ClientError::Connect { .. } => "Unreachable",
        ClientError::Closed => "Closed",
        ClientError::WatchLagged => "WatchLagged",
        ClientError::WatchRemoved => "WatchRemoved",
        ClientError::Protocol(_) => "Protocol",
        _ => "Error",
    }
}

/// `err` and its sources joined with `: `.
fn chain_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Reports `err` as `out` asks and ends the process with its exit code.
pub fn exit_with(out: &Output, err: &anyhow::Error) -> ! {
    if let Some(reported) = err.downcast_ref::<AlreadyReported>() {
        std::process::exit(reported.exit_code);
    }
    let failure = classify(err);
    if failure.exit_code == 0 {
        // stdout was closed by the reader (`arbor ls / | head`): not an error.
        std::process::exit(0);
    }
    if out.is_json() {
        let document = json!({"error": {"code": failure.code, "message": failure.message}});
        // Nothing more can be done if stdout is gone; the exit code still tells.
        out.print_json_line(&document).ok();
    } else {
        eprintln!("{}", out.error_line(&failure.message));
    }
    std::process::exit(failure.exit_code)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves node errors map to their documented exit codes and `what (path)` messages.
    #[test]
    fn node_errors_classified() {
        let err = anyhow::Error::new(ClientError::NoNode {
            path: "/a".to_owned(),
        });
        let failure = classify(&err);
        assert_eq!(failure.code, "NoNode");
        assert_eq!(failure.message, "no node (/a)");
        assert_eq!(failure.exit_code, exit_code::NO_NODE);
        let err = anyhow::Error::new(ClientError::BadVersion {
            path: "/b".to_owned(),
        })
        .context("set");
        assert_eq!(classify(&err).exit_code, exit_code::BAD_VERSION);
    }

    // Proves ACL refusals name the command's path and map to 9, 10 and 11, and other errors keep their messages.
    #[test]
    fn acl_errors_classified() {
        let refused = at_path(anyhow::Error::new(ClientError::NoAuth), "/a");
        let failure = classify(&refused);
        assert_eq!(failure.code, "NoAuth");
        assert_eq!(failure.message, "not authorized (/a)");
        assert_eq!(failure.exit_code, exit_code::NOT_AUTHORIZED);
        assert_eq!(
            classify(&anyhow::Error::new(ClientError::NoAuth)).message,
            "not authorized"
        );

        let invalid = at_path(anyhow::Error::new(ClientError::InvalidAcl), "/b");
        let failure = classify(&invalid);
        assert_eq!(failure.code, "InvalidAcl");
        assert!(
            failure.message.starts_with("invalid ACL (/b): "),
            "{}",
            failure.message
        );
        assert_eq!(failure.exit_code, exit_code::INVALID_ACL);

        let auth = anyhow::Error::new(ClientError::AuthFailed).context(AuthFailed {
            detail: "refused".to_owned(),
        });
        let failure = classify(&auth);
        assert_eq!(failure.code, "AuthFailed");
        assert_eq!(failure.message, "authentication failed: refused");
        assert_eq!(failure.exit_code, exit_code::AUTH_FAILED);

        let usage = anyhow::Error::new(Usage {
            message: "bad".to_owned(),
        });
        assert_eq!(classify(&usage).exit_code, exit_code::USAGE);

        // A path is only added where the error has none of its own.
        let no_node = at_path(
            anyhow::Error::new(ClientError::NoNode {
                path: "/c".to_owned(),
            }),
            "/other",
        );
        assert_eq!(classify(&no_node).message, "no node (/c)");
    }

    // Proves client errors wrapped by the recipes' errors are classified as the client error itself.
    #[test]
    fn recipe_errors_show_their_client_error() {
        let no_node = || ClientError::NoNode {
            path: "/missing".to_owned(),
        };
        let inspect = anyhow::Error::new(InspectError::Client(no_node()));
        let failure = classify(&inspect);
        assert_eq!(failure.exit_code, exit_code::NO_NODE);
        assert_eq!(failure.message, "no node (/missing)");
        let lock = anyhow::Error::new(LockError::Client(ClientError::NoAuth)).context("/l");
        assert_eq!(classify(&lock).exit_code, exit_code::NOT_AUTHORIZED);
        let lost = anyhow::Error::new(LockError::Client(ClientError::ConnectionLoss));
        assert_eq!(classify(&lost).exit_code, exit_code::UNREACHABLE);
    }

    // Proves an unreachable server exits with 3 and names the address tried.
    #[test]
    fn unreachable_names_the_server() {
        let err = anyhow::Error::new(ClientError::Timeout).context(Unreachable {
            server: "10.0.0.1:7181".to_owned(),
        });
        let failure = classify(&err);
        assert_eq!(failure.exit_code, exit_code::UNREACHABLE);
        assert!(
            failure.message.contains("10.0.0.1:7181"),
            "{}",
            failure.message
        );
    }
}
