//! What a resume sends first: the client's watches, in [`Op::SetWatches`]
//! batches that fit the server's frame limit; and how long to wait between
//! reconnect rounds.
//!
//! Invariants:
//! * A batch's estimated size (the sum of its paths' bytes plus
//!   [`SET_WATCHES_PATH_OVERHEAD_BYTES`] each) stays within the budget of
//!   [`set_watches_budget`]: half the frame limit, which leaves the message
//!   envelope (xid, zxid, list lengths) ample room. A single path over the
//!   budget goes alone in its batch (paths are at most 4 KiB, frames at least
//!   that in practice; the encoder still refuses a frame over the limit).
//! * Every path of the input is in exactly one batch, in its own list.

use std::time::Duration;

use arbor_protocol::{Op, SetWatches};

/// Bytes counted per path on top of its own: bincode's length prefix (at most
/// 9 bytes for a varint) with margin.
pub const SET_WATCHES_PATH_OVERHEAD_BYTES: usize = 16;

/// The first pause between two rounds of reconnect attempts over every server.
pub const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(50);

/// The longest pause between two reconnect rounds; the pause doubles up to it.
pub const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The estimated bytes a SetWatches batch may hold for a frame limit of
/// `frame_bytes_max`: half of it, so the envelope and any misestimate of the
/// encoding still fit.
pub(crate) fn set_watches_budget(frame_bytes_max: usize) -> usize {
    frame_bytes_max / 2
}

/// Picks one list out of a batch.
type ListOf = fn(&mut SetWatches) -> &mut Vec<String>;

/// Splits `all` into batches whose estimated size is within `budget_bytes`.
pub(crate) fn set_watches_batches(all: SetWatches, budget_bytes: usize) -> Vec<SetWatches> {
    let relative_zxid = all.relative_zxid;
    let fresh = || SetWatches {
        relative_zxid,
        ..SetWatches::default()
    };
    let mut batches = Vec::new();
    let mut batch = fresh();
    let mut batch_bytes = 0;
    let lists: [(ListOf, Vec<String>); 5] = [
        (|b| &mut b.data, all.data),
        (|b| &mut b.exist, all.exist),
        (|b| &mut b.child, all.child),
        (|b| &mut b.persistent, all.persistent),
        (|b| &mut b.persistent_recursive, all.persistent_recursive),
    ];
    for (list, paths) in lists {
        for path in paths {
            let cost = path.len() + SET_WATCHES_PATH_OVERHEAD_BYTES;
            if batch_bytes + cost > budget_bytes && !batch.is_empty() {
                batches.push(std::mem::replace(&mut batch, fresh()));
                batch_bytes = 0;
            }
            batch_bytes += cost;
            list(&mut batch).push(path);
        }
    }
    if !batch.is_empty() {
        batches.push(batch);
    }
    batches
}

/// The op for one batch (a named helper so the connection reads plainly).
pub(crate) fn set_watches_op(batch: SetWatches) -> Op {
    Op::SetWatches(batch)
}

#[cfg(test)]
mod tests {
    use arbor_protocol::frame::encode_frame;
    use arbor_protocol::ClientMessage;

    use super::*;

    // Proves batches cover every path once, in the right list, and each encodes under the limit.
    #[test]
    fn batches_cover_all_paths_within_the_limit() {
        let paths = |prefix: &str, n: usize| -> Vec<String> {
            (0..n).map(|i| format!("/{prefix}/node-{i:05}")).collect()
        };
        let all = SetWatches {
            relative_zxid: 77,
            data: paths("data", 300),
            exist: paths("exist", 200),
            child: paths("child", 100),
            persistent: paths("p", 50),
            persistent_recursive: paths("r", 50),
        };
        let frame_bytes_max = 2048;
        let batches = set_watches_batches(all.clone(), set_watches_budget(frame_bytes_max));
        assert!(batches.len() > 5, "{} batches", batches.len());
        let mut joined = SetWatches {
            relative_zxid: 77,
            ..SetWatches::default()
        };
        for batch in batches {
            assert_eq!(batch.relative_zxid, 77);
            let message = ClientMessage::Request {
                xid: u64::MAX,
                op: set_watches_op(batch.clone()),
            };
            encode_frame(&message, frame_bytes_max, &mut Vec::new()).expect("fits the frame");
            joined.data.extend(batch.data);
            joined.exist.extend(batch.exist);
            joined.child.extend(batch.child);
            joined.persistent.extend(batch.persistent);
            joined
                .persistent_recursive
                .extend(batch.persistent_recursive);
        }
        assert_eq!(joined, all);
        assert!(set_watches_batches(SetWatches::default(), 100).is_empty());
    }
}
