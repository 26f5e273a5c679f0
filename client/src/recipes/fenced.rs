//! Server-fenced writes: a transaction on Arbor's own data that commits only
//! while the grant that guards it still stands.
//!
//! A [`Fence`](super::Fence) protects a resource that checks tokens. Data in
//! Arbor itself needs no token: the grant is a node (a lock node, a lease, a
//! queue claim), and a [`Fenced`] transaction starts with a `Check` on that
//! node, so the server refuses the whole write once the node is gone — the
//! holder's session expired, or an operator removed it. Every grant node's
//! name is unique to its grant (an attempt prefix, and a sequence number or
//! the claimed item's name), so the node existing means this grant, not a
//! later one of the same lock or item. This is etcd's `Txn(If(mutex.IsOwner()))`, for Arbor.
//!
//! The transaction may go through any client, not only the one holding the
//! grant ([`Fenced::via`]): a service that holds its lock on one session and
//! writes through another still cannot write after the lock is lost.

use arbor_protocol::{CreateMode, ErrorCode, MultiOp, OpResult, ANY_VERSION};

use crate::{multi, Acl, Client, Error};

/// A transaction fenced by a grant node; built by a grant's `fenced()`.
///
/// ```
/// use arbor_client::{recipes::Mutex, CreateMode};
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// # client.create("/jobs", Vec::new(), CreateMode::Persistent).await?;
/// let guard = Mutex::new(&client, "/locks/jobs").lock().await?;
/// guard
///     .fenced()
///     .create("/jobs/42", b"done".to_vec(), CreateMode::Persistent)
///     .commit()
///     .await?; // refused with `FencedError::GrantLost` once the lock is lost
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a fenced transaction does nothing until committed"]
pub struct Fenced {
    client: Client,
    grant: String,
    ops: Vec<MultiOp>,
}

/// Why a fenced transaction did not commit. Nothing of it was applied.
#[derive(Debug, thiserror::Error)]
pub enum FencedError {
    /// The grant node is gone: the grant was lost (its session expired, or
    /// it was removed), so the write was refused.
    #[error("the grant {grant} is lost: the write was refused")]
    GrantLost { grant: String },
    /// One of the caller's ops failed (`index` counts the caller's ops from
    /// 0, not the fence's check).
    #[error("op {index} of the fenced transaction failed: {code:?}")]
    OpFailed { index: usize, code: ErrorCode },
    /// The request failed; after [`Error::ConnectionLoss`] or
    /// [`Error::Timeout`] the outcome is unknown, as for any multi.
    #[error(transparent)]
    Client(#[from] Error),
}

impl Fenced {
    /// A transaction through `client` fenced by the node `grant`.
    pub(crate) fn new(client: &Client, grant: &str) -> Self {
        Self {
            client: client.clone(),
            grant: grant.to_owned(),
            ops: Vec::new(),
        }
    }

    /// Sends the transaction through `client` instead of the grant's own.
    pub fn via(mut self, client: &Client) -> Self {
        self.client = client.clone();
        self
    }

    /// The grant node the transaction checks.
    pub fn grant(&self) -> &str {
        &self.grant
    }

    /// Adds any op (see [`crate::multi`]).
    pub fn op(mut self, op: MultiOp) -> Self {
        self.ops.push(op);
        self
    }

    /// Adds a create.
    pub fn create(
        self,
        path: impl Into<String>,
        data: impl Into<Vec<u8>>,
        mode: CreateMode,
    ) -> Self {
        self.op(multi::create(path, data, mode))
    }

    /// Adds a create with `acl`.
    pub fn create_with_acl(
        self,
        path: impl Into<String>,
        data: impl Into<Vec<u8>>,
        mode: CreateMode,
        acl: Vec<Acl>,
    ) -> Self {
        self.op(multi::create_with_acl(path, data, mode, acl))
    }

    /// Adds a set of `path`'s data if its version is `version` (`None`: any).
    pub fn set_data(
        self,
        path: impl Into<String>,
        data: impl Into<Vec<u8>>,
        version: Option<i32>,
    ) -> Self {
        self.op(multi::set_data(path, data, version))
    }

    /// Adds a delete of `path` if its version is `version` (`None`: any).
    pub fn delete(self, path: impl Into<String>, version: Option<i32>) -> Self {
        self.op(multi::delete(path, version))
    }

    /// Adds a check that `path` exists at `version` (`None`: any).
    pub fn check(self, path: impl Into<String>, version: Option<i32>) -> Self {
        self.op(multi::check(path, version))
    }

    /// The ops as sent: the fence's check first.
    pub fn ops(&self) -> Vec<MultiOp> {
        let mut ops = Vec::with_capacity(self.ops.len() + 1);
        ops.push(MultiOp::Check {
            path: self.grant.clone(),
            version: ANY_VERSION,
        });
        ops.extend(self.ops.iter().cloned());
        ops
    }

    /// Commits all the ops, or none: the results of the caller's ops, in
    /// order, if the grant still stood when the server applied them.
    pub async fn commit(self) -> Result<Vec<OpResult>, FencedError> {
        let ops = self.ops();
        match self.client.multi(ops).await {
            Ok(mut results) => {
                // The check's own result.
                results.remove(0);
                Ok(results)
            }
            Err(Error::MultiFailed {
                index: 0,
                code: ErrorCode::NoNode,
                ..
            }) => Err(FencedError::GrantLost { grant: self.grant }),
            Err(Error::MultiFailed { index, code, .. }) => Err(FencedError::OpFailed {
                index: index.saturating_sub(1),
                code,
            }),
            Err(err) => Err(FencedError::Client(err)),
        }
    }
}
