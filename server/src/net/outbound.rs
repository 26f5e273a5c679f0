//! A connection's outbound queue, bounded in bytes as well as in messages.
//!
//! A client that sends requests and never reads its socket makes the server
//! hold every answer: counting messages alone, 25 000 reads of a 64 KiB
//! node held 1.09 GiB for one connection. Each message queued here is
//! charged its (estimated) size, against the connection and against the
//! whole server, until the writer takes it. A connection over its share
//! stops reading requests and running reads ([`OutboundSender::room`]) until
//! the client has read enough; watch events, which apply cannot hold back,
//! close a connection whose backlog passes [`EVENT_BACKLOG_BYTES_MAX`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::{MultiOpOutcome, OpResult, ServerMessage};
use tokio::sync::mpsc::{self, error::SendError, error::TrySendError};
use tokio::sync::Notify;

/// A message on its way to a connection's writer. Boxed so that a queue slot
/// is one word: tokio makes a channel's first block of 32 slots up front,
/// which as 120-byte `ServerMessage`s was 3.8 KB of every idle connection.
pub type Outbound = Box<ServerMessage>;

/// Bytes one connection may have queued before it stops taking requests.
pub const OUTBOUND_BYTES_PER_CONNECTION_MAX: usize = 4 * 1024 * 1024;

/// Bytes all connections together may have queued before every connection
/// over [`OUTBOUND_BYTES_FAIR_SHARE`] stops taking requests.
pub const OUTBOUND_BYTES_TOTAL_MAX: usize = 256 * 1024 * 1024;

/// What a connection may still queue while the server is over its total:
/// a client reading its answers is never held up by one that does not.
pub const OUTBOUND_BYTES_FAIR_SHARE: usize = 256 * 1024;

/// A backlog of events past this (the client reads nothing) closes the
/// connection; the session lives on, and its client registers its watches
/// again on a new connection.
pub const EVENT_BACKLOG_BYTES_MAX: usize = 16 * 1024 * 1024;

/// How often a connection waiting for room looks again, in case the wake-up
/// went to another waiter.
const ROOM_RECHECK: Duration = Duration::from_millis(20);

/// Bytes queued by every connection of the server.
#[derive(Debug, Default)]
pub struct OutboundTotal {
    queued: AtomicUsize,
    room: Notify,
}

impl OutboundTotal {
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }
}

#[derive(Debug)]
struct Budget {
    queued: AtomicUsize,
    room: Notify,
    total: Arc<OutboundTotal>,
}

impl Budget {
    fn charge(&self, bytes: usize) {
        self.queued.fetch_add(bytes, Ordering::AcqRel);
        self.total.queued.fetch_add(bytes, Ordering::AcqRel);
    }

    fn discharge(&self, bytes: usize) {
        let before = self.queued.fetch_sub(bytes, Ordering::AcqRel);
        if before > OUTBOUND_BYTES_PER_CONNECTION_MAX
            && before - bytes <= OUTBOUND_BYTES_PER_CONNECTION_MAX
        {
            self.room.notify_waiters();
        }
        let before = self.total.queued.fetch_sub(bytes, Ordering::AcqRel);
        if before > OUTBOUND_BYTES_TOTAL_MAX && before - bytes <= OUTBOUND_BYTES_TOTAL_MAX {
            self.total.room.notify_waiters();
        }
    }

    fn has_room(&self) -> bool {
        let mine = self.queued.load(Ordering::Acquire);
        mine <= OUTBOUND_BYTES_PER_CONNECTION_MAX
            && (mine <= OUTBOUND_BYTES_FAIR_SHARE
                || self.total.queued.load(Ordering::Acquire) <= OUTBOUND_BYTES_TOTAL_MAX)
    }
}

/// The sending side; cheap to clone.
#[derive(Debug, Clone)]
pub struct OutboundSender {
    /// Each message with the bytes it was charged, given back as it is taken.
    tx: mpsc::Sender<(Outbound, usize)>,
    budget: Arc<Budget>,
}

/// The writer's side: taking a message gives its bytes back.
#[derive(Debug)]
pub struct OutboundReceiver {
    rx: mpsc::Receiver<(Outbound, usize)>,
    budget: Arc<Budget>,
}

/// A queue of at most `messages` messages, charged against `total`.
pub fn channel(messages: usize, total: Arc<OutboundTotal>) -> (OutboundSender, OutboundReceiver) {
    let (tx, rx) = mpsc::channel(messages);
    let budget = Arc::new(Budget {
        queued: AtomicUsize::new(0),
        room: Notify::new(),
        total,
    });
    (
        OutboundSender {
            tx,
            budget: budget.clone(),
        },
        OutboundReceiver { rx, budget },
    )
}

impl OutboundSender {
    /// Queues `message`, waiting for a free slot.
    pub async fn send(&self, message: Outbound) -> Result<(), SendError<Outbound>> {
        let bytes = approx_bytes(&message);
        self.budget.charge(bytes);
        self.tx
            .send((message, bytes))
            .await
            .map_err(|SendError((message, _))| {
                self.budget.discharge(bytes);
                SendError(message)
            })
    }

    /// Queues `message` if a slot is free.
    pub fn try_send(&self, message: Outbound) -> Result<(), TrySendError<Outbound>> {
        let bytes = approx_bytes(&message);
        self.budget.charge(bytes);
        self.tx.try_send((message, bytes)).map_err(|err| {
            self.budget.discharge(bytes);
            match err {
                TrySendError::Full((message, _)) => TrySendError::Full(message),
                TrySendError::Closed((message, _)) => TrySendError::Closed(message),
            }
        })
    }

    /// Waits for a free slot and holds it: what [`Reserved::send`] puts in
    /// it is queued at once, with no wait. A read that sets a watch fills its
    /// slot while it still holds the state's read lock, so its answer is
    /// queued before any event of that watch. `None` if the writer is gone.
    pub async fn reserve(&self) -> Option<Reserved<'_>> {
        let permit = self.tx.reserve().await.ok()?;
        Some(Reserved {
            permit,
            budget: &self.budget,
        })
    }

    /// Queues a watch event unless the connection's backlog is past
    /// [`EVENT_BACKLOG_BYTES_MAX`] (then `Full`, as for a full queue).
    pub fn try_send_event(&self, message: Outbound) -> Result<(), TrySendError<Outbound>> {
        if self.queued() > EVENT_BACKLOG_BYTES_MAX {
            return Err(TrySendError::Full(message));
        }
        self.try_send(message)
    }

    /// Bytes queued and not yet taken by the writer.
    pub fn queued(&self) -> usize {
        self.budget.queued.load(Ordering::Acquire)
    }

    /// Waits until this connection may queue more: under its own limit, and
    /// under its fair share or the server under its total.
    pub async fn room(&self) {
        while !self.budget.has_room() {
            let mine = self.budget.room.notified();
            let all = self.budget.total.room.notified();
            tokio::select! {
                () = mine => {}
                () = all => {}
                () = tokio::time::sleep(ROOM_RECHECK) => {}
            }
        }
    }
}

/// A slot held in a connection's queue ([`OutboundSender::reserve`]).
pub struct Reserved<'a> {
    permit: mpsc::Permit<'a, (Outbound, usize)>,
    budget: &'a Budget,
}

impl Reserved<'_> {
    /// Queues `message` in the slot.
    pub fn send(self, message: Outbound) {
        let bytes = approx_bytes(&message);
        self.budget.charge(bytes);
        self.permit.send((message, bytes));
    }
}

impl OutboundReceiver {
    pub async fn recv(&mut self) -> Option<Outbound> {
        let (message, bytes) = self.rx.recv().await?;
        self.budget.discharge(bytes);
        Some(message)
    }

    pub fn try_recv(&mut self) -> Option<Outbound> {
        let (message, bytes) = self.rx.try_recv().ok()?;
        self.budget.discharge(bytes);
        Some(message)
    }

    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }
}

/// Bytes a message takes encoded, about: what it carries that can be large
/// (data, names, paths, stats) plus a fixed overhead. Computed once, as the
/// message is queued; the queue keeps the figure to give back.
pub fn approx_bytes(message: &ServerMessage) -> usize {
    const FIXED: usize = 64;
    FIXED
        + match message {
            ServerMessage::Reply { result: Ok(r), .. } => result_bytes(r),
            ServerMessage::Reply { result: Err(_), .. } => 0,
            ServerMessage::Event(event) => event.path.len(),
            ServerMessage::Closing { message, .. } => message.len(),
            ServerMessage::Connected(_) => 0,
        }
}

/// [`approx_bytes`] of a result.
fn result_bytes(result: &OpResult) -> usize {
    const STAT: usize = 80;
    match result {
        OpResult::Data { data, .. } => data.len() + STAT,
        OpResult::Children { names, .. } => names.encoded_len() + STAT,
        OpResult::ChildrenWithStat { children, .. } => children
            .iter()
            .map(|child| child.name.len() + STAT)
            .sum::<usize>(),
        OpResult::Created { path, .. } => path.len() + STAT,
        OpResult::Acl { acl, .. } => acl
            .iter()
            .map(|entry| entry.id.scheme.len() + entry.id.id.len() + 16)
            .sum::<usize>(),
        OpResult::WhoAmI(ids) => ids.iter().map(|id| id.scheme.len() + id.id.len() + 8).sum(),
        OpResult::Ephemerals(paths) => paths.iter().map(|path| path.len() + 8).sum(),
        OpResult::Multi(outcomes) => outcomes
            .iter()
            .map(|outcome| match outcome {
                MultiOpOutcome::Applied(OpResult::Created { path, .. }) => path.len() + STAT,
                _ => STAT,
            })
            .sum(),
        // Nested one level only: a multi-read holds plain reads.
        OpResult::MultiRead(results) => results
            .iter()
            .map(|result| result.as_ref().map_or(8, result_bytes))
            .sum(),
        _ => STAT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbor_protocol::{ErrorCode, Stat};

    fn data_reply(bytes: usize) -> Outbound {
        Box::new(ServerMessage::Reply {
            xid: 1,
            zxid: 1,
            result: Ok(OpResult::Data {
                data: vec![0; bytes],
                stat: Stat::default(),
            }),
        })
    }

    #[tokio::test]
    async fn queued_bytes_are_charged_until_the_writer_takes_them() {
        let total = Arc::new(OutboundTotal::default());
        let (tx, mut rx) = channel(1024, total.clone());
        let big = OUTBOUND_BYTES_PER_CONNECTION_MAX / 8;
        for _ in 0..9 {
            tx.send(data_reply(big)).await.expect("queued");
        }
        assert!(tx.queued() > OUTBOUND_BYTES_PER_CONNECTION_MAX);
        assert_eq!(total.queued(), tx.queued());
        // Over its limit: no room until the writer takes enough.
        let waiting = tokio::time::timeout(Duration::from_millis(50), tx.room()).await;
        assert!(waiting.is_err(), "no room while over the limit");
        let room = tokio::spawn({
            let tx = tx.clone();
            async move { tx.room().await }
        });
        rx.recv().await.expect("a message");
        rx.try_recv().expect("a message");
        tokio::time::timeout(Duration::from_secs(1), room)
            .await
            .expect("room once the writer took some")
            .expect("the task ran");
        while rx.try_recv().is_some() {}
        assert_eq!((tx.queued(), total.queued()), (0, 0));
    }

    #[tokio::test]
    async fn events_close_a_connection_past_its_backlog_and_the_total_is_shared() {
        let total = Arc::new(OutboundTotal::default());
        let (tx, _rx) = channel(1 << 16, total.clone());
        let (other, _other_rx) = channel(16, total.clone());
        let event = || {
            Box::new(ServerMessage::Event(arbor_protocol::WatchEvent {
                event_type: arbor_protocol::EventType::NodeCreated,
                path: "/e".into(),
                zxid: 1,
            }))
        };
        assert!(tx.try_send_event(event()).is_ok());
        while tx.queued() <= EVENT_BACKLOG_BYTES_MAX {
            tx.try_send(data_reply(1 << 20)).expect("queued");
        }
        assert!(matches!(
            tx.try_send_event(event()),
            Err(TrySendError::Full(_))
        ));
        // A small connection keeps its fair share while another is over
        // the server's total only when the total is really exceeded.
        assert!(other.budget.has_room());
        let refused = Box::new(ServerMessage::Reply {
            xid: 2,
            zxid: 1,
            result: Err(ErrorCode::NoNode),
        });
        other.try_send(refused).expect("queued");
        assert_eq!(total.queued(), tx.queued() + other.queued());
    }
}
