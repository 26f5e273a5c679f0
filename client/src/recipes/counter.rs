//! A shared counter: an integer in one node, changed by versioned
//! compare-and-set with retry (Curator's `SharedCount`,
//! `DistributedAtomicLong`), that stays exact when replies are lost.
//!
//! # The node's data
//!
//! ```text
//! data   = value *( " " tag )      ; ASCII, e.g. "1600 9f3ac1d2e4b5a607 0c1d..."
//! value  = [ "-" ] 1*DIGIT         ; an i64 in decimal
//! tag    = 16HEXDIG                ; one write's random tag, newest first
//! ```
//!
//! `arbor get` shows the value first. Every write through [`Counter`] puts
//! its own fresh tag first and keeps the tags of the writes before it, at most
//! [`COUNTER_TAGS_MAX`] in all. A node written by something else (`arbor set
//! /count 5`) is read as that value with no tags.
//!
//! # Why the tags
//!
//! Every write is a `set_data` expecting the version it read, so of all the
//! writes that read version v at most one is applied, as version v + 1. The
//! hard case is a write whose reply was lost (`ConnectionLoss`, `Timeout`):
//! it may or may not have been applied, and retrying it blindly could count
//! an `add` twice. After such a loss the counter reads the node again and
//! asks the tags. If the node is at version `now` and the lost write expected
//! v, the write that made version v + 1 is the tag `now - v - 1` places from
//! the front. If that tag is ours, our write was applied (the `add` returns
//! its value); if it is another's, ours was refused. If the version has not
//! moved, ours was not applied (yet): the next attempt expects the same
//! version, so at most one of the two can ever apply, and the pending one is
//! still checked on every later read. Only when the tag history is too short
//! to reach back to v + 1 (more than [`COUNTER_TAGS_MAX`] writes happened in
//! between, or something wrote the node without tags) is the outcome
//! unknowable, and then the call fails with [`CounterError::OutcomeUnknown`]
//! instead of guessing: guessing "not applied" could count an `add` twice,
//! guessing "applied" could lose it. The caller decides (a metric can
//! tolerate it; a ledger should reconcile).
//!
//! # Rules
//!
//! * A missing node counts as 0; the first write creates it (persistent,
//!   its parents as containers). Deleting the node while the counter is in
//!   use restarts its version, so a pending write's outcome may then be
//!   misjudged: do not delete a counter in use.
//! * Values are `i64`; an `add` that would overflow is refused.
//! * A write that loses the race to another is tried again after a short,
//!   random, growing pause (so contenders spread out), at most
//!   [`COUNTER_ATTEMPTS_MAX`] times per call; lost replies are ridden out
//!   [`RETRIES_MAX`](super::RETRIES_MAX) times.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use arbor_protocol::CreateMode;

use crate::recipes::{before_retry, ensure_path, is_transient, retrying, RETRIES_MAX};
use crate::{Client, Error, Stat};

/// The most write tags a counter node keeps: how many writes may pass
/// between a lost write and the read after it before its outcome is unknown.
pub const COUNTER_TAGS_MAX: usize = 16;

/// The most writes one call attempts before it gives up with
/// [`CounterError::Contended`].
pub const COUNTER_ATTEMPTS_MAX: usize = 1000;

/// The longest pause after a write lost the race, in milliseconds: long
/// enough to let a contender through, short against a round trip's worth
/// of other work.
const CONTENDED_PAUSE_MS_MAX: u64 = 8;

/// Hex digits in one write's tag.
const TAG_DIGITS: usize = 16;

/// Why a counter operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CounterError {
    /// A write of this call may or may not have been applied, and the node's
    /// history no longer tells: `expected_version` is the version that write
    /// expected, `version_now` the node's version when it was read again.
    #[error(
        "the outcome of a write to {path} is unknown: it expected version \
         {expected_version}, the node is at {version_now} and its history is too short"
    )]
    OutcomeUnknown {
        path: String,
        expected_version: i32,
        version_now: i32,
    },
    /// The node's data does not start with a decimal `i64`.
    #[error("{path} does not hold a counter: {data:?}")]
    Malformed { path: String, data: String },
    /// `value + delta` does not fit an `i64`.
    #[error("adding {delta} to {value} overflows")]
    Overflow { value: i64, delta: i64 },
    /// Every attempt lost to a concurrent write.
    #[error("gave up on {path} after {attempts} attempts lost to concurrent writes")]
    Contended { path: String, attempts: usize },
    /// Nothing of this call was applied.
    #[error(transparent)]
    Client(#[from] Error),
}

/// A shared `i64` counter in the node at a path.
///
/// ```
/// use arbor_client::recipes::Counter;
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = arbor_server::TemporaryServer::start().await?;
/// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
/// let done = Counter::new(&client, "/stats/jobs-done");
/// assert_eq!(done.add(1).await?, 1);
/// assert_eq!(done.add(41).await?, 42);
/// assert!(done.compare_and_set(42, 0).await?);
/// assert!(!done.compare_and_set(42, 7).await?); // it is 0 now
/// assert_eq!(done.get().await?, 0);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Counter {
    client: Client,
    path: String,
}

/// A write whose reply was lost.
struct Pending {
    tag: String,
    /// The version the write expected (-1: it was the create).
    expected_version: i32,
    value: i64,
}

/// What a pending write's tags say about it.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Applied,
    Refused,
    /// Not applied so far; a later attempt expecting the same version settles it.
    NotYet,
    Unknowable,
}

/// The value and tags parsed from a counter node.
#[derive(Debug, PartialEq, Eq)]
struct Contents {
    value: i64,
    /// Newest first.
    tags: Vec<String>,
}

impl Counter {
    /// A counter in the node at `path` (created with its parents on the
    /// first write; a missing node reads as 0).
    pub fn new(client: &Client, path: &str) -> Self {
        Self {
            client: client.clone(),
            path: path.to_owned(),
        }
    }

    /// The node's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The current value.
    pub async fn get(&self) -> Result<i64, CounterError> {
        Ok(self.read().await?.0.value)
    }

    /// Adds `delta` (negative to subtract) exactly once and returns the new
    /// value.
    pub async fn add(&self, delta: i64) -> Result<i64, CounterError> {
        let outcome = self
            .update(|value| {
                value
                    .checked_add(delta)
                    .map(Some)
                    .ok_or(CounterError::Overflow { value, delta })
            })
            .await?;
        outcome.ok_or_else(|| CounterError::Client(Error::Protocol("add always writes".into())))
    }

    /// Sets the value to `new` if it is `expected` now; whether it did.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// let epoch = arbor_client::recipes::Counter::new(&client, "/doc/epoch");
    /// let seen = epoch.get().await?;
    /// if epoch.compare_and_set(seen, seen + 1).await? {
    ///     println!("we moved the epoch to {}", seen + 1);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn compare_and_set(&self, expected: i64, new: i64) -> Result<bool, CounterError> {
        let outcome = self
            .update(|value| Ok((value == expected).then_some(new)))
            .await?;
        Ok(outcome.is_some())
    }

    /// Sets the value to `value`, whatever it was.
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = arbor_server::TemporaryServer::start().await?;
    /// # let client = arbor_client::Client::connect(server.addr(), Default::default()).await?;
    /// let quota = arbor_client::recipes::Counter::new(&client, "/doc/quota");
    /// quota.set(100).await?;
    /// assert_eq!(quota.add(-1).await?, 99);
    /// # Ok(()) }
    /// ```
    pub async fn set(&self, value: i64) -> Result<(), CounterError> {
        self.update(|_| Ok(Some(value))).await?;
        Ok(())
    }

    /// Reads, applies `change` (`None`: leave the value alone) and writes
    /// with the version read, until a write is known to be applied. Returns
    /// the value written, or `None` if `change` declined.
    async fn update<F>(&self, mut change: F) -> Result<Option<i64>, CounterError>
    where
        F: FnMut(i64) -> Result<Option<i64>, CounterError>,
    {
        let mut pending: Vec<Pending> = Vec::new();
        for attempt in 0..COUNTER_ATTEMPTS_MAX {
            if pending.len() > RETRIES_MAX {
                break;
            }
            if attempt > 0 {
                contended_pause(attempt).await;
            }
            let read = self.read().await;
            let (contents, stat) = match read {
                Ok(read) => read,
                Err(err) => return Err(self.unsettled(&pending, err)),
            };
            let version = stat.map_or(-1, |stat| stat.version);
            let mut still_pending = Vec::with_capacity(pending.len());
            for attempt in pending {
                match judge(&attempt, version, &contents.tags) {
                    Verdict::Applied => return Ok(Some(attempt.value)),
                    Verdict::Refused => {}
                    Verdict::NotYet => still_pending.push(attempt),
                    Verdict::Unknowable => {
                        return Err(CounterError::OutcomeUnknown {
                            path: self.path.clone(),
                            expected_version: attempt.expected_version,
                            version_now: version,
                        })
                    }
                }
            }
            pending = still_pending;
            let new = match change(contents.value) {
                Ok(Some(new)) => new,
                // Declined on the current value, and nothing of ours is
                // pending: the answer is that of this read.
                Ok(None) if pending.is_empty() => return Ok(None),
                // A write still pending expected this very version (it was
                // judged "not yet"), so it could still be applied.
                Ok(None) => {
                    return Err(CounterError::OutcomeUnknown {
                        path: self.path.clone(),
                        expected_version: pending[0].expected_version,
                        version_now: version,
                    })
                }
                Err(err) => return Err(err),
            };
            let tag = fresh_tag();
            let data = encode(new, &tag, &contents.tags);
            let result = match stat {
                Some(stat) => self
                    .client
                    .set_data(&self.path, data, Some(stat.version))
                    .await
                    .map(|_| ()),
                None => self.create(data).await,
            };
            match result {
                Ok(()) => return Ok(Some(new)),
                // Someone else wrote (or created, or deleted) first.
                Err(Error::BadVersion { .. } | Error::NodeExists { .. } | Error::NoNode { .. }) => {
                }
                Err(err) if is_transient(&err) => {
                    tracing::debug!(path = %self.path, version, error = %err, "counter write outcome unknown; asking the node");
                    pending.push(Pending {
                        tag,
                        expected_version: version,
                        value: new,
                    });
                    if let Err(err) = before_retry(&self.client, &err).await {
                        return Err(self.unsettled(&pending, err));
                    }
                }
                Err(err) => return Err(self.unsettled(&pending, err)),
            }
        }
        match pending.first() {
            Some(attempt) => Err(CounterError::OutcomeUnknown {
                path: self.path.clone(),
                expected_version: attempt.expected_version,
                version_now: attempt.expected_version,
            }),
            None => Err(CounterError::Contended {
                path: self.path.clone(),
                attempts: COUNTER_ATTEMPTS_MAX,
            }),
        }
    }

    /// The error to return when the call stops early: with a write still
    /// pending, the outcome is unknown whatever stopped us.
    fn unsettled(&self, pending: &[Pending], err: impl Into<CounterError>) -> CounterError {
        match pending.first() {
            Some(attempt) => CounterError::OutcomeUnknown {
                path: self.path.clone(),
                expected_version: attempt.expected_version,
                version_now: attempt.expected_version,
            },
            None => err.into(),
        }
    }

    /// The node's contents and stat; a missing node reads as 0 without a stat.
    async fn read(&self) -> Result<(Contents, Option<Stat>), CounterError> {
        let read = retrying(&self.client, || async {
            match self.client.get_data(&self.path).await {
                Ok(found) => Ok(Some(found)),
                Err(Error::NoNode { .. }) => Ok(None),
                Err(err) => Err(err),
            }
        })
        .await?;
        let Some((data, stat)) = read else {
            return Ok((
                Contents {
                    value: 0,
                    tags: Vec::new(),
                },
                None,
            ));
        };
        let contents = decode(&data).ok_or_else(|| CounterError::Malformed {
            path: self.path.clone(),
            data: String::from_utf8_lossy(&data).into_owned(),
        })?;
        Ok((contents, Some(stat)))
    }

    /// Creates the node (its parents as containers if missing).
    async fn create(&self, data: Vec<u8>) -> Result<(), Error> {
        match self
            .client
            .create(&self.path, data.clone(), CreateMode::Persistent)
            .await
        {
            Err(Error::NoNode { .. }) => {
                if let Some(parent) = arbor_protocol::path::parent(&self.path) {
                    ensure_path(&self.client, parent, &crate::Acl::open()).await?;
                }
                self.client
                    .create(&self.path, data, CreateMode::Persistent)
                    .await
                    .map(|_| ())
            }
            other => other.map(|_| ()),
        }
    }
}

/// Waits a random few milliseconds, up to a bound that grows with the
/// attempt, so contenders that keep colliding spread out.
async fn contended_pause(attempt: usize) {
    let bound =
        u64::try_from(attempt).map_or(CONTENDED_PAUSE_MS_MAX, |a| a.min(CONTENDED_PAUSE_MS_MAX));
    let random = RandomState::new().hash_one(attempt);
    let pause_ms = random % (bound + 1);
    if pause_ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(pause_ms)).await;
    }
}

/// What the node's version and tags say about a write whose reply was lost.
fn judge(attempt: &Pending, version_now: i32, tags: &[String]) -> Verdict {
    let moved = i64::from(version_now) - i64::from(attempt.expected_version);
    if moved <= 0 {
        return Verdict::NotYet;
    }
    // Tags are newest first: the write that made version expected + 1 is
    // `moved - 1` places from the front.
    let Ok(index) = usize::try_from(moved - 1) else {
        return Verdict::Unknowable;
    };
    match tags.get(index) {
        Some(tag) if *tag == attempt.tag => Verdict::Applied,
        Some(_) => Verdict::Refused,
        None => Verdict::Unknowable,
    }
}

/// `value`, then `tag`, then the newest earlier tags (at most
/// [`COUNTER_TAGS_MAX`] tags in all).
fn encode(value: i64, tag: &str, earlier: &[String]) -> Vec<u8> {
    let mut text = value.to_string();
    for tag in std::iter::once(tag).chain(
        earlier
            .iter()
            .map(String::as_str)
            .take(COUNTER_TAGS_MAX - 1),
    ) {
        text.push(' ');
        text.push_str(tag);
    }
    text.into_bytes()
}

/// The value and tags of a counter node; `None` if it holds no value. Words
/// after the value that are not tags end the tag history there.
fn decode(data: &[u8]) -> Option<Contents> {
    let text = std::str::from_utf8(data).ok()?;
    let mut words = text.split_ascii_whitespace();
    let value = words.next()?.parse::<i64>().ok()?;
    let tags = words
        .take_while(|word| word.len() == TAG_DIGITS && word.bytes().all(|b| b.is_ascii_hexdigit()))
        .take(COUNTER_TAGS_MAX)
        .map(str::to_owned)
        .collect();
    Some(Contents { value, tags })
}

/// A random tag for one write: 64 bits, so two writes never share one.
fn fresh_tag() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let tag = RandomState::new().hash_one((nanos, count, std::process::id()));
    format!("{tag:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(tag: &str, expected_version: i32) -> Pending {
        Pending {
            tag: tag.to_owned(),
            expected_version,
            value: 7,
        }
    }

    #[test]
    fn data_round_trips_and_keeps_a_bounded_history() {
        // The value comes first (readable by `arbor get`), then tags newest first.
        let old: Vec<String> = (0..COUNTER_TAGS_MAX).map(|i| format!("{i:016x}")).collect();
        let data = encode(-12, "ffffffffffffffff", &old);
        let contents = decode(&data).expect("decodes");
        assert_eq!(contents.value, -12);
        assert_eq!(contents.tags.len(), COUNTER_TAGS_MAX);
        assert_eq!(contents.tags[0], "ffffffffffffffff");
        assert_eq!(contents.tags[1], old[0]);
        assert!(std::str::from_utf8(&data)
            .expect("text")
            .starts_with("-12 "));
    }

    #[test]
    fn foreign_data_reads_as_a_value_without_history() {
        // `arbor set /count 5` leaves a counter with no tags; junk is refused.
        assert_eq!(
            decode(b"5\n"),
            Some(Contents {
                value: 5,
                tags: Vec::new()
            })
        );
        assert_eq!(decode(b"five"), None);
        assert_eq!(decode(b""), None);
        assert_eq!(
            decode(b"3 not-a-tag 0123456789abcdef").map(|c| c.tags.len()),
            Some(0)
        );
    }

    #[test]
    fn a_lost_write_is_judged_by_the_tag_at_its_version() {
        let tags: Vec<String> = ["c", "b", "a"].iter().map(|t| t.repeat(16)).collect();
        // Expected 4: version 5 was written by tag "a...", three versions ago.
        assert_eq!(
            judge(&pending(&"a".repeat(16), 4), 7, &tags),
            Verdict::Applied
        );
        assert_eq!(
            judge(&pending(&"z".repeat(16), 4), 7, &tags),
            Verdict::Refused
        );
        assert_eq!(
            judge(&pending(&"c".repeat(16), 6), 7, &tags),
            Verdict::Applied
        );
        // Not moved: not applied so far.
        assert_eq!(
            judge(&pending(&"c".repeat(16), 7), 7, &tags),
            Verdict::NotYet
        );
        // Four versions back, with three tags: nobody can tell.
        assert_eq!(
            judge(&pending(&"a".repeat(16), 3), 7, &tags),
            Verdict::Unknowable
        );
        // The create (expected -1) made version 0.
        assert_eq!(
            judge(&pending(&"c".repeat(16), -1), 0, &tags),
            Verdict::Applied
        );
    }

    #[test]
    fn tags_differ() {
        assert_ne!(fresh_tag(), fresh_tag());
        assert_eq!(fresh_tag().len(), TAG_DIGITS);
    }
}
