//! Constructors for the ops of a [`Client::multi`](crate::Client::multi)
//! transaction, with the same argument conventions as the single calls
//! (`None` for "any version").
//!
//! ```
//! use arbor_client::{multi, CreateMode, MultiOp};
//!
//! let ops = vec![
//!     multi::check("/config", Some(3)),
//!     multi::create("/config/next", b"v4".to_vec(), CreateMode::Persistent),
//!     multi::delete("/config/prev", None),
//! ];
//! assert_eq!(ops[2], MultiOp::Delete { path: "/config/prev".into(), version: -1 });
//! ```

use arbor_protocol::{Acl, CreateMode, MultiOp, ANY_VERSION};

/// Fails the transaction unless `path` exists with `version` (`None`: any).
pub fn check(path: impl Into<String>, version: Option<i32>) -> MultiOp {
    MultiOp::Check {
        path: path.into(),
        version: version.unwrap_or(ANY_VERSION),
    }
}

/// Creates a node (as [`Client::create`](crate::Client::create)).
pub fn create(path: impl Into<String>, data: impl Into<Vec<u8>>, mode: CreateMode) -> MultiOp {
    MultiOp::Create {
        path: path.into(),
        data: data.into(),
        mode,
    }
}

/// Creates a node with `acl` (as
/// [`Client::create_with_acl`](crate::Client::create_with_acl)).
pub fn create_with_acl(
    path: impl Into<String>,
    data: impl Into<Vec<u8>>,
    mode: CreateMode,
    acl: Vec<Acl>,
) -> MultiOp {
    let (path, data) = (path.into(), data.into());
    // The open ACL is what a plain create gives, in fewer bytes.
    if Acl::is_open(&acl) {
        return MultiOp::Create { path, data, mode };
    }
    MultiOp::CreateWithAcl {
        path,
        data,
        mode,
        acl,
    }
}

/// Deletes a node if its version is `version` (`None`: any).
pub fn delete(path: impl Into<String>, version: Option<i32>) -> MultiOp {
    MultiOp::Delete {
        path: path.into(),
        version: version.unwrap_or(ANY_VERSION),
    }
}

/// Replaces a node's data if its version is `version` (`None`: any).
pub fn set_data(
    path: impl Into<String>,
    data: impl Into<Vec<u8>>,
    version: Option<i32>,
) -> MultiOp {
    MultiOp::SetData {
        path: path.into(),
        data: data.into(),
        version: version.unwrap_or(ANY_VERSION),
    }
}
