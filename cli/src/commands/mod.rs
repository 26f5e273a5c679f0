//! The commands, one module per command or per small family of commands.
//! Each takes a connected [`Client`], its parsed arguments and the
//! [`Output`](crate::output::Output) to print to.

pub mod get;
pub mod ls;
pub mod tree;
pub mod version;
pub mod watch;
pub mod write;

use anyhow::Context;
use arbor_client::{Client, ClientOptions};

use crate::error::Unreachable;
use crate::Global;

/// Connects to `global.server`, with `global.timeout` as both the connect
/// and the request timeout. Any failure is reported as [`Unreachable`].
pub async fn connect(global: &Global) -> anyhow::Result<Client> {
    let options = ClientOptions::default()
        .with_connect_timeout(global.timeout)
        .with_request_timeout(global.timeout);
    let server = global.server();
    Client::connect(&server, options)
        .await
        .map_err(anyhow::Error::new)
        .with_context(|| Unreachable { server })
}

/// `parent` joined with a child's `name`.
pub fn child_path(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves child paths never get a double slash under the root.
    #[test]
    fn joins_child_paths() {
        assert_eq!(child_path("/", "a"), "/a");
        assert_eq!(child_path("/a", "b"), "/a/b");
    }
}
