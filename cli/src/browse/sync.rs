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
//! * The selected node's data is followed with a one-shot data watch,
//!   renewed with each reload. A persistent watch of its parent does not see
//!   data changes of children, and one persistent watch per selected row
//!   would cost two round trips per cursor move. Following goes through a
//!   `tokio::sync::watch` channel that keeps only the latest selection, so
//!   scrolling quickly over a slow link loads only where the cursor stops.
//!   Its ACL is read after each data load (nothing fires when an ACL
//!   changes, so `r` or the next data change shows a new one).
//! * Connection changes are forwarded; the client sets every watch again
//!   after a reconnect, and the app reloads what it shows.
//!
//! Tree requests run one at a time, in order, so a watch removal can never
//! overtake the registration it undoes. The queue is bounded and filled with
//! `try_send`: the app never waits on the loader, and the loader may wait on
//! the app's (bounded) message queue without the two ever deadlocking.

use arbor_client::{AddWatchMode, Client, PersistentWatch, WatcherKind};
use tokio::sync::{mpsc, watch};

use super::app::{App, Message, Request, DATA_KEPT_BYTES_MAX};

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
}

impl Loader {
    /// Starts the loader's tasks on the current runtime; they end when the
    /// loader is dropped or `messages` is closed.
    pub fn start(client: Client, messages: mpsc::Sender<Message>) -> Loader {
        let (requests, receiver) = mpsc::channel(REQUESTS_MAX);
        let (selection, selected) = watch::channel(None);
        tokio::spawn(serve(client.clone(), receiver, messages.clone()));
        tokio::spawn(follow(client.clone(), selected, messages.clone()));
        tokio::spawn(forward_states(client, messages));
        Loader {
            requests,
            selection,
        }
    }

    /// Hands `requests` to the loader without waiting; those it cannot take
    /// are given back to the app.
    pub fn dispatch(&self, app: &mut App, requests: Vec<Request>) {
        for request in requests {
            if let Request::Select(path) = request {
                // Replaces any selection not yet acted on.
                self.selection.send_replace(path);
                continue;
            }
            match self.requests.try_send(request) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(request))
                | Err(mpsc::error::TrySendError::Closed(request)) => app.rejected(request),
            }
        }
    }
}

/// Runs tree requests and writes, in order.
async fn serve(
    client: Client,
    mut requests: mpsc::Receiver<Request>,
    messages: mpsc::Sender<Message>,
) {
    while let Some(request) = requests.recv().await {
        let message = match request {
            Request::Expand(path) => {
                match client.watch(&path, AddWatchMode::Persistent).await {
                    Ok(stream) => {
                        tokio::spawn(forward_events(stream, path.clone(), messages.clone()));
                    }
                    // Still list it; the app says it is not live.
                    Err(error) => {
                        let ended = Message::WatchEnded {
                            path: path.clone(),
                            error,
                        };
                        if messages.send(ended).await.is_err() {
                            return;
                        }
                    }
                }
                let result = client.get_children_with_stat(&path).await;
                Message::Children { path, result }
            }
            Request::Reload(path) => {
                let result = client.get_children_with_stat(&path).await;
                Message::Children { path, result }
            }
            Request::Unwatch(paths) => {
                for path in paths {
                    // NoWatcher (already gone, e.g. after a reconnect to a
                    // node deleted meanwhile) needs no action.
                    client
                        .remove_watches(&path, WatcherKind::Persistent)
                        .await
                        .ok();
                }
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
            // Routed to `follow` by `Loader::dispatch`.
            Request::Select(_) => continue,
        };
        if messages.send(message).await.is_err() {
            return;
        }
    }
}

/// Passes one expanded node's watch events to the app, then why it ended.
async fn forward_events(
    mut stream: PersistentWatch,
    path: String,
    messages: mpsc::Sender<Message>,
) {
    loop {
        match stream.next().await {
            Ok(event) => {
                if messages.send(Message::Event(event)).await.is_err() {
                    return;
                }
            }
            Err(error) => {
                messages
                    .send(Message::WatchEnded { path, error })
                    .await
                    .ok();
                return;
            }
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
