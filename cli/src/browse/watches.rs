//! The persistent watches the loader holds, and why each is held.
//!
//! Two things need one:
//!
//! * an expanded node, so its listing follows its children;
//! * a collapsed node on screen, so its marker (`·` or `▸`) and child count
//!   follow its children. Its count comes from its parent's listing, and a
//!   grandchild's creation fires no watch of the parent; only a watch of the
//!   node itself sees it. These are bounded by the rows on screen
//!   ([`ROWS_WATCHED_MAX`](super::app::ROWS_WATCHED_MAX)), not by what is
//!   loaded, so scrolling trades watches instead of adding them.
//!
//! Both are the same server-side watch (persistent, non-recursive, one per
//! session and path), and `remove_watches` removes it whoever asked for it.
//! So one owner decides: a path is watched while it is expanded or shown as a
//! collapsed row, and its watch goes only when it is neither. All of this runs
//! in the loader's one request task, so a removal never overtakes the
//! registration it undoes.

use std::collections::HashSet;

use arbor_client::{AddWatchMode, Client, PersistentWatch, WatcherKind};
use futures_util::future::join_all;
use tokio::sync::mpsc;

use super::app::Message;

/// The loader's persistent watches.
pub struct Watches {
    client: Client,
    messages: mpsc::Sender<Message>,
    /// Nodes the app expanded.
    expanded: HashSet<String>,
    /// Collapsed nodes on screen (the app's latest list).
    rows: HashSet<String>,
    /// Paths whose watch is set on the server.
    held: HashSet<String>,
}

impl Watches {
    pub fn new(client: Client, messages: mpsc::Sender<Message>) -> Watches {
        Watches {
            client,
            messages,
            expanded: HashSet::new(),
            rows: HashSet::new(),
            held: HashSet::new(),
        }
    }

    /// `path` was expanded: watches it before its listing is read (unless
    /// its row already holds the watch), so no change slips between the two.
    /// False if the app is gone.
    pub async fn expand(&mut self, path: &str) -> bool {
        self.expanded.insert(path.to_owned());
        if self.held.contains(path) {
            return true;
        }
        match self.client.watch(path, AddWatchMode::Persistent).await {
            Ok(stream) => {
                self.held.insert(path.to_owned());
                tokio::spawn(forward_events(
                    stream,
                    path.to_owned(),
                    self.messages.clone(),
                ));
                true
            }
            // Still listed; the app says it is not live.
            Err(error) => {
                let ended = Message::WatchEnded {
                    path: path.to_owned(),
                    error,
                };
                self.messages.send(ended).await.is_ok()
            }
        }
    }

    /// These nodes were collapsed: gives back the watches no row needs.
    pub async fn collapse(&mut self, paths: Vec<String>) {
        for path in paths {
            self.expanded.remove(&path);
            if !self.rows.contains(&path) && self.held.remove(&path) {
                unwatch(&self.client, &path).await;
            }
        }
    }

    /// The collapsed rows now on screen: watches those not yet watched and
    /// reads their stat again (the one shown came from their parent's
    /// listing, maybe long before the watch), and gives back the watches of
    /// rows gone that are not expanded. A watch that cannot be set is left
    /// out, and tried again with the next list. False if the app is gone.
    pub async fn set_rows(&mut self, rows: Vec<String>) -> bool {
        self.rows = rows.into_iter().collect();
        let gone: Vec<String> = self
            .held
            .iter()
            .filter(|path| !self.rows.contains(*path) && !self.expanded.contains(*path))
            .cloned()
            .collect();
        for path in &gone {
            self.held.remove(path);
        }
        let new: Vec<String> = self
            .rows
            .iter()
            .filter(|path| !self.held.contains(*path))
            .cloned()
            .collect();
        // Concurrently: a screenful at once costs a round trip or two, not
        // one per row, over a slow link.
        join_all(gone.iter().map(|path| unwatch(&self.client, path))).await;
        let added = join_all(
            new.into_iter()
                .map(|path| watch_row(&self.client, &self.messages, path)),
        )
        .await;
        let mut alive = true;
        for (path, outcome) in added {
            match outcome {
                RowWatch::Set => {
                    self.held.insert(path);
                }
                RowWatch::Failed => {}
                RowWatch::AppGone => alive = false,
            }
        }
        alive
    }
}

/// How watching one row went.
enum RowWatch {
    Set,
    Failed,
    AppGone,
}

/// Watches a collapsed row's node, then reads its stat for the app.
async fn watch_row(
    client: &Client,
    messages: &mpsc::Sender<Message>,
    path: String,
) -> (String, RowWatch) {
    let stream = match client.watch(&path, AddWatchMode::Persistent).await {
        Ok(stream) => stream,
        // A row is only a marker: no status for it.
        Err(_) => return (path, RowWatch::Failed),
    };
    tokio::spawn(forward_events(stream, path.clone(), messages.clone()));
    let stat = Message::Stat {
        path: path.clone(),
        result: client.exists(&path).await,
    };
    if messages.send(stat).await.is_err() {
        return (path, RowWatch::AppGone);
    }
    (path, RowWatch::Set)
}

/// Removes the persistent watch of `path`. NoWatcher (already gone, e.g.
/// after a reconnect to a node deleted meanwhile) needs no action.
async fn unwatch(client: &Client, path: &str) {
    client
        .remove_watches(path, WatcherKind::Persistent)
        .await
        .ok();
}

/// Passes one watched node's events to the app, then why the watch ended.
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
