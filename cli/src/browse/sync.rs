//! The loader: runs the app's requests against the server and reports back.
//!
//! Watch strategy (cost scales with what is on screen, never with the tree):
//!
//! * Every expanded node holds one persistent (non-recursive) watch. On this
//!   server it fires for the node's own creation, deletion and data change,
//!   and for changes of its list of children, so it is exactly what tells
//!   the app to reload a visible listing. The watch is set before the
//!   listing is read, so no change can slip between the two; collapsing a
//!   node removes its watch (and those of its open descendants).
//! * Every collapsed node on screen holds the same kind of watch, so its
//!   marker and child count follow its children: at most a screenful
//!   (bounded by `ROWS_WATCHED_MAX`), traded as the list scrolls, through a
//!   `tokio::sync::watch` channel that keeps only the latest screen. See
//!   `watches` for why one owner keeps both kinds.
//! * The selected node's data is followed with a one-shot data watch,
//!   renewed with each reload. A persistent watch of its parent does not see
//!   data changes of children, and one persistent watch per selected row
//!   would cost two round trips per cursor move. Following goes through a
//!   `tokio::sync::watch` channel that keeps only the latest selection, so
//!   scrolling quickly over a slow link loads only where the cursor stops.
//!   Its ACL is read after each data load (nothing fires when an ACL
//!   changes, so `r` or the next data change shows a new one). Its stat also
//!   follows its children: the node is on screen, so watched as above, and
//!   the app reloads it when that watch reports its children changed.
//! * Connection changes are forwarded; the client sets every watch again
//!   after a reconnect, and the app reloads what it shows.
//!
//! Tree requests run one at a time, in order, so a watch removal can never
//! overtake the registration it undoes. The queue is bounded and filled with
//! `try_send`: the app never waits on the loader, and the loader may wait on
//! the app's (bounded) message queue without the two ever deadlocking.

use arbor_client::{Client, WatcherKind};
use tokio::sync::{mpsc, watch};

use super::app::{App, Message, Request, DATA_KEPT_BYTES_MAX};
use super::watches::Watches;

/// Most tree requests waiting for the loader; more are refused (the app
/// tells the user) rather than queued without bound.
pub const REQUESTS_MAX: usize = 256;

/// Capacity of the loader → app message queue: watch streams and loads wait
/// (back-pressure) when the app is this far behind.
pub const MESSAGES_MAX: usize = 256;

/// The loader's handle: where the app's requests go.
#[derive(Debug)]
pub struct Loader {
    requests: mpsc::Sender<Request>,
    selection: watch::Sender<Option<String>>,
    rows: watch::Sender<Vec<String>>,
}

impl Loader {
    /// Starts the loader's tasks on the current runtime; they end when the
    /// loader is dropped or `messages` is closed.
    pub fn start(client: Client, messages: mpsc::Sender<Message>) -> Loader {
        let (requests, receiver) = mpsc::channel(REQUESTS_MAX);
        let (selection, selected) = watch::channel(None);
        let (rows, shown) = watch::channel(Vec::new());
        tokio::spawn(serve(client.clone(), receiver, shown, messages.clone()));
        tokio::spawn(follow(client.clone(), selected, messages.clone()));
        tokio::spawn(forward_states(client, messages));
        Loader {
            requests,
            selection,
            rows,
        }
    }

    /// Hands `requests` to the loader without waiting; those it cannot take
    /// are given back to the app.
    pub fn dispatch(&self, app: &mut App, requests: Vec<Request>) {
        for request in requests {
            // Each replaces any value not yet acted on.
            match request {
                Request::Select(path) => {
                    self.selection.send_replace(path);
                    continue;
                }
                Request::WatchRows(rows) => {
                    self.rows.send_replace(rows);
                    continue;
                }
                _ => {}
            }
            match self.requests.try_send(request) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(request))
                | Err(mpsc::error::TrySendError::Closed(request)) => app.rejected(request),
            }
        }
    }
}

/// Runs tree requests and writes, in order, and keeps the watches of the
/// rows on screen.
async fn serve(
    client: Client,
    mut requests: mpsc::Receiver<Request>,
    mut rows: watch::Receiver<Vec<String>>,
    messages: mpsc::Sender<Message>,
) {
    let mut watches = Watches::new(client.clone(), messages.clone());
    loop {
        let request = tokio::select! {
            request = requests.recv() => match request {
                Some(request) => request,
                None => return,
            },
            changed = rows.changed() => {
                if changed.is_err() {
                    return;
                }
                let shown = rows.borrow_and_update().clone();
                if !watches.set_rows(shown).await {
                    return;
                }
                continue;
            }
        };
        let message = match request {
            Request::Expand(path) => {
                if !watches.expand(&path).await {
                    return;
                }
                let result = client.get_children_with_stat(&path).await;
                Message::Children { path, result }
            }
            Request::Reload(path) => {
                let result = client.get_children_with_stat(&path).await;
                Message::Children { path, result }
            }
            Request::Stat(path) => {
                let result = client.exists(&path).await;
                Message::Stat { path, result }
            }
            Request::Unwatch(paths) => {
                watches.collapse(paths).await;
                continue;
            }
            Request::SetData {
                path,
                data,
                version,
            } => {
                let result = client.set_data(&path, data, Some(version)).await;
                Message::Saved { path, result }
            }
            Request::Delete { path, version } => {
                let result = client.delete(&path, Some(version)).await;
                Message::Deleted { path, result }
            }
            // Routed to `follow` and to the rows above by `Loader::dispatch`.
            Request::Select(_) | Request::WatchRows(_) => continue,
        };
        if messages.send(message).await.is_err() {
            return;
        }
    }
}

/// Loads the selected node's data, and again whenever it changes, until the
/// selection moves.
async fn follow(
    client: Client,
    mut selected: watch::Receiver<Option<String>>,
    messages: mpsc::Sender<Message>,
) {
    loop {
        let path = selected.borrow_and_update().clone();
        let Some(path) = path else {
            if selected.changed().await.is_err() {
                return;
            }
            continue;
        };
        match client.get_data_watch(&path).await {
            Ok((mut data, stat, mut fired)) => {
                data.truncate(DATA_KEPT_BYTES_MAX);
                let message = Message::Data {
                    path: path.clone(),
                    result: Ok((data, stat)),
                };
                if messages.send(message).await.is_err() {
                    return;
                }
                // ACL changes fire no watch: the ACL is read again with each
                // data reload, and on `r`.
                let message = Message::Acl {
                    path: path.clone(),
                    result: client.get_acl(&path).await.map(|(acl, _stat)| acl),
                };
                if messages.send(message).await.is_err() {
                    return;
                }
                tokio::select! {
                    changed = selected.changed() => {
                        drop(fired);
                        // Free the server's slot for a watch nobody awaits.
                        client.remove_watches(&path, WatcherKind::Data).await.ok();
                        if changed.is_err() {
                            return;
                        }
                    }
                    event = &mut fired => {
                        // The client is over: wait for the app to end.
                        if matches!(event, Err(ref error) if error.is_session_ended())
                            && selected.changed().await.is_err()
                        {
                            return;
                        }
                    }
                }
            }
            Err(error) => {
                let message = Message::Data {
                    path,
                    result: Err(error),
                };
                if messages.send(message).await.is_err() || selected.changed().await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Passes connection state changes to the app.
async fn forward_states(client: Client, messages: mpsc::Sender<Message>) {
    let mut states = client.state_changes();
    drop(client);
    while let Some(state) = states.next().await {
        if messages.send(Message::Connection(state)).await.is_err() {
            return;
        }
    }
}
