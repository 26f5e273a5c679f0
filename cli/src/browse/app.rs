//! The browser's state machine, free of the terminal and of the network.
//!
//! Two inputs drive it: keys ([`App::handle_key`]) and messages from the
//! loader ([`App::apply`]: listings, data, watch events, results of writes,
//! connection changes). Both return the [`Request`]s the loader should run;
//! the app never waits for the server, so the screen stays responsive over a
//! slow link, and tests can drive it with made-up messages or a real loader.
//!
//! Reloads coalesce: while a node's children are being loaded, further
//! change events for it only mark it stale, and one more reload follows when
//! the load in flight lands. A burst of changes therefore costs two loads, not
//! one per change. Stat reads of collapsed rows coalesce the same way.
//!
//! The collapsed rows on screen are watched too (see the loader), so a node
//! that gains or loses children elsewhere changes its marker without being
//! expanded; the app tells the loader which rows those are whenever the
//! screen's rows change.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use arbor_client::{Acl, ChildEntry, ConnectionState, Error, EventType, Stat, WatchEvent};
use crossterm::event::{KeyCode, KeyEvent};

use super::input::{Edit, LineInput};
use super::keys::{self, Action};
use super::tree::{self, Row, RowKind, Tree, ROOT};
use crate::data::{self, Encoding};
use crate::outage::Outage;

/// Most bytes of a node's data held for the node panel (and for editing);
/// bigger data is shown cut, and cannot be edited here.
pub const DATA_KEPT_BYTES_MAX: usize = 64 * 1024;

/// Most nodes expanded at once: each holds a persistent watch on the server.
pub const EXPANDED_MAX: usize = 1000;

/// Most collapsed rows watched at once (each a persistent watch), however
/// tall the terminal: rows below these on a taller screen show the count of
/// their parent's last listing.
pub const ROWS_WATCHED_MAX: usize = 256;

/// Rows moved by PgUp/PgDn before the first draw told the real page size.
const DEFAULT_PAGE_ROWS: usize = 20;

/// Work for the loader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The node was expanded: watch it (persistent) and load its children.
    Expand(String),
    /// Load the node's children again (it changed, or `r`).
    Reload(String),
    /// Read a collapsed node's stat again (its children changed).
    Stat(String),
    /// These nodes are no longer expanded: remove their watches (unless
    /// they are collapsed rows on screen).
    Unwatch(Vec<String>),
    /// The collapsed rows on screen, to watch (at most
    /// [`ROWS_WATCHED_MAX`]); replaces the previous list.
    WatchRows(Vec<String>),
    /// Show and follow this node's data (`None`: no node selected). Sent
    /// again for the same node to reload it.
    Select(Option<String>),
    SetData {
        path: String,
        data: Vec<u8>,
        version: i32,
    },
    Delete {
        path: String,
        version: i32,
    },
}

/// What the loader reports back.
#[derive(Debug)]
pub enum Message {
    Children {
        path: String,
        result: Result<(Vec<ChildEntry>, Stat), Error>,
    },
    /// The selected node's data (cut at [`DATA_KEPT_BYTES_MAX`]) and stat.
    Data {
        path: String,
        result: Result<(Vec<u8>, Stat), Error>,
    },
    /// The selected node's ACL, loaded after its data.
    Acl {
        path: String,
        result: Result<Vec<Acl>, Error>,
    },
    /// A collapsed node's stat (`None`: it is gone).
    Stat {
        path: String,
        result: Result<Option<Stat>, Error>,
    },
    /// A persistent watch of an expanded node or a row on screen fired.
    Event(WatchEvent),
    /// A persistent watch could not be set, or its stream ended.
    WatchEnded {
        path: String,
        error: Error,
    },
    Saved {
        path: String,
        result: Result<Stat, Error>,
    },
    Deleted {
        path: String,
        result: Result<(), Error>,
    },
    Connection(ConnectionState),
}

/// The node panel.
#[derive(Debug, Clone)]
pub enum Detail {
    /// Nothing selected (a "more" or "loading" row).
    None,
    Loading(String),
    Loaded {
        path: String,
        /// At most [`DATA_KEPT_BYTES_MAX`] bytes.
        data: Vec<u8>,
        stat: Stat,
        acl: AclDetail,
    },
    Failed {
        path: String,
        message: String,
    },
}

/// The selected node's ACL, in the node panel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AclDetail {
    Loading,
    Loaded(Vec<Acl>),
    /// The server said NoAuth: this session may not see it.
    NotReadable,
    Failed(String),
}

/// Which dialog, if any, has the keys.
#[derive(Debug, Clone)]
pub enum Mode {
    Browse,
    Help,
    Search(LineInput),
    ConfirmDelete {
        path: String,
        version: i32,
    },
    Edit {
        path: String,
        version: i32,
        input: LineInput,
    },
    /// A save was refused because the node changed while it was edited:
    /// the user's text is kept until they choose what to do with it.
    Conflict {
        path: String,
        mine: String,
        /// The version the save expected.
        refused: i32,
    },
}

/// The status line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub text: String,
    pub error: bool,
}

/// Everything the browser shows.
#[derive(Debug)]
pub struct App {
    server: String,
    tree: Tree,
    rows: Vec<Row>,
    selected: usize,
    /// First row shown: kept by the app so the list scrolls only when the
    /// selection would leave the page.
    offset: usize,
    page_rows: usize,
    /// The node the loader was last told to follow.
    following: Option<String>,
    detail: Detail,
    mode: Mode,
    status: Option<Status>,
    connection: ConnectionState,
    /// The session timeout the server granted, for the time an outage has.
    session_timeout: Duration,
    /// Since when the server has been unreachable, while it is.
    outage: Option<Outage>,
    /// The last search.
    query: String,
    /// Expanded nodes that changed while their load was in flight.
    stale: HashSet<String>,
    /// The collapsed rows the loader was last told to watch; `None` to send
    /// them again.
    rows_watched: Option<Vec<String>>,
    /// Collapsed nodes whose stat is being read.
    stat_loading: HashSet<String>,
    /// Collapsed nodes that changed while their stat read was in flight.
    stat_stale: HashSet<String>,
    /// The text of the save in flight, kept for a conflict.
    saving: Option<(String, String, i32)>,
    quit: bool,
}

impl App {
    /// A browser of `server` (shown in the title), knowing only the root.
    pub fn new(server: impl Into<String>) -> App {
        let tree = Tree::new();
        let rows = tree.rows();
        App {
            server: server.into(),
            tree,
            rows,
            selected: 0,
            offset: 0,
            page_rows: DEFAULT_PAGE_ROWS,
            following: None,
            detail: Detail::None,
            mode: Mode::Browse,
            status: None,
            connection: ConnectionState::Connected,
            session_timeout: Duration::ZERO,
            outage: None,
            query: String::new(),
            stale: HashSet::new(),
            rows_watched: Some(Vec::new()),
            stat_loading: HashSet::new(),
            stat_stale: HashSet::new(),
            saving: None,
            quit: false,
        }
    }

    /// The first requests: the root's children, and the root's data.
    pub fn start(&mut self) -> Vec<Request> {
        let mut out = Vec::new();
        if self.tree.expand(ROOT) {
            out.push(Request::Expand(ROOT.to_owned()));
        }
        self.refresh_rows(&mut out);
        out
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    pub fn selected(&self) -> usize {
        self.selected
    }

    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The selected node's path, if a node row is selected.
    pub fn selected_path(&self) -> Option<&str> {
        self.rows.get(self.selected).and_then(Row::path)
    }

    pub fn detail(&self) -> &Detail {
        &self.detail
    }

    pub fn mode(&self) -> &Mode {
        &self.mode
    }

    pub fn status(&self) -> Option<&Status> {
        self.status.as_ref()
    }

    pub fn connection(&self) -> ConnectionState {
        self.connection
    }

    /// The session timeout the server granted (for the time an outage has).
    pub fn set_session_timeout(&mut self, session_timeout: Duration) {
        self.session_timeout = session_timeout;
    }

    /// The server's outage, while it is unreachable.
    pub fn outage(&self) -> Option<&Outage> {
        self.outage.as_ref()
    }

    pub fn should_quit(&self) -> bool {
        self.quit
    }

    /// Tells the app how many tree rows fit on screen (for paging, and for
    /// which rows are watched).
    pub fn set_page_rows(&mut self, rows: usize) -> Vec<Request> {
        let mut out = Vec::new();
        self.page_rows = rows.max(1);
        self.scroll_to_selection();
        self.watch_rows(&mut out);
        out
    }

    /// One key press.
    pub fn handle_key(&mut self, key: KeyEvent) -> Vec<Request> {
        let mut out = Vec::new();
        if keys::is_interrupt(key) {
            self.quit = true;
            return out;
        }
        // Take the mode out so its fields can move; every branch puts back
        // the mode that follows.
        match std::mem::replace(&mut self.mode, Mode::Browse) {
            Mode::Browse => {
                if let Some(action) = keys::action(key) {
                    self.act(action, &mut out);
                }
            }
            // Any key closes the help.
            Mode::Help => {}
            Mode::Search(mut input) => match input.handle(key) {
                Edit::Changed => self.mode = Mode::Search(input),
                Edit::Cancel => {}
                Edit::Submit => {
                    self.query = input.text();
                    self.find_next(&mut out);
                }
            },
            Mode::ConfirmDelete { path, version } => match key.code {
                KeyCode::Char('y' | 'Y') => {
                    self.set_status(format!("deleting {path}…"), false);
                    out.push(Request::Delete { path, version });
                }
                KeyCode::Char('n' | 'N') | KeyCode::Esc | KeyCode::Char('q') => {
                    self.set_status(format!("{path} not deleted"), false);
                }
                _ => self.mode = Mode::ConfirmDelete { path, version },
            },
            Mode::Edit {
                path,
                version,
                mut input,
            } => match input.handle(key) {
                Edit::Changed => {
                    self.mode = Mode::Edit {
                        path,
                        version,
                        input,
                    }
                }
                Edit::Cancel => self.set_status("edit cancelled".to_owned(), false),
                Edit::Submit => self.save(path, input.text(), version, &mut out),
            },
            Mode::Conflict {
                path,
                mine,
                refused,
            } => self.resolve_conflict(key, path, mine, refused, &mut out),
        }
        out
    }

    /// Sends `text` as the data of `path`, if it is still at `version`.
    fn save(&mut self, path: String, text: String, version: i32, out: &mut Vec<Request>) {
        self.set_status(format!("saving {path}…"), false);
        self.saving = Some((path.clone(), text.clone(), version));
        out.push(Request::SetData {
            path,
            data: text.into_bytes(),
            version,
        });
    }

    /// A key in the conflict dialog: [o]verwrite the version now shown
    /// (still conditional: a third change is another conflict), [e]dit the
    /// kept text again (or Esc), or [r]eload, dropping it.
    fn resolve_conflict(
        &mut self,
        key: KeyEvent,
        path: String,
        mine: String,
        refused: i32,
        out: &mut Vec<Request>,
    ) {
        let current = self.conflict_version(&path, refused);
        match (key.code, current) {
            (KeyCode::Char('o' | 'O'), Some(version)) => self.save(path, mine, version, out),
            (KeyCode::Char('e' | 'E') | KeyCode::Esc, Some(version)) => {
                self.mode = Mode::Edit {
                    path,
                    version,
                    input: LineInput::new(&mine),
                };
            }
            (KeyCode::Char('r' | 'R'), _) => {
                self.set_status(
                    format!("kept the server's {path}; your text dropped"),
                    false,
                );
            }
            (KeyCode::Char('o' | 'O' | 'e' | 'E') | KeyCode::Esc, None) => {
                self.set_status(format!("reading the current {path}…"), false);
                self.mode = Mode::Conflict {
                    path,
                    mine,
                    refused,
                };
            }
            _ => {
                self.mode = Mode::Conflict {
                    path,
                    mine,
                    refused,
                }
            }
        }
    }

    /// The version of `path` the node panel shows, once it shows one newer
    /// than the save expected (until the reload lands it shows that one).
    pub fn conflict_version(&self, path: &str, refused: i32) -> Option<i32> {
        match &self.detail {
            Detail::Loaded {
                path: shown, stat, ..
            } if shown == path && stat.version != refused => Some(stat.version),
            _ => None,
        }
    }

    fn act(&mut self, action: Action, out: &mut Vec<Request>) {
        let last = self.rows.len().saturating_sub(1);
        match action {
            Action::Up => self.select(self.selected.saturating_sub(1), out),
            Action::Down => self.select((self.selected + 1).min(last), out),
            Action::PageUp => self.select(self.selected.saturating_sub(self.page_rows), out),
            Action::PageDown => self.select((self.selected + self.page_rows).min(last), out),
            Action::First => self.select(0, out),
            Action::Last => self.select(last, out),
            Action::Expand => self.expand(out),
            Action::Collapse => self.collapse(out),
            Action::Search => self.mode = Mode::Search(LineInput::new("")),
            Action::NextMatch => {
                if self.query.is_empty() {
                    self.set_status("no search yet: press / first".to_owned(), false);
                } else {
                    self.find_next(out);
                }
            }
            Action::Delete => self.ask_delete(),
            Action::Edit => self.start_edit(),
            Action::Refresh => {
                self.refresh(out);
                self.set_status("reloading…".to_owned(), false);
            }
            Action::Help => self.mode = Mode::Help,
            Action::Dismiss => self.status = None,
            Action::Quit => self.quit = true,
        }
    }

    fn select(&mut self, row: usize, out: &mut Vec<Request>) {
        self.selected = row.min(self.rows.len().saturating_sub(1));
        self.scroll_to_selection();
        self.follow_selection(out);
        self.watch_rows(out);
    }

    /// Tells the loader which collapsed rows are on screen, if that changed:
    /// their watches keep their markers and counts true.
    fn watch_rows(&mut self, out: &mut Vec<Request>) {
        let rows: Vec<String> = self
            .rows
            .iter()
            .skip(self.offset)
            .take(self.page_rows.min(ROWS_WATCHED_MAX))
            .filter_map(Row::path)
            .filter(|path| !self.tree.get(path).is_some_and(|node| node.expanded))
            .map(str::to_owned)
            .collect();
        if self.rows_watched.as_ref() != Some(&rows) {
            self.rows_watched = Some(rows.clone());
            out.push(Request::WatchRows(rows));
        }
    }

    fn scroll_to_selection(&mut self) {
        if self.selected < self.offset {
            self.offset = self.selected;
        } else if self.selected >= self.offset + self.page_rows {
            self.offset = self.selected + 1 - self.page_rows;
        }
    }

    /// Tells the loader to follow the selected node, if it changed.
    fn follow_selection(&mut self, out: &mut Vec<Request>) {
        let path = self.selected_path().map(str::to_owned);
        if path == self.following {
            return;
        }
        self.detail = match &path {
            Some(path) => Detail::Loading(path.clone()),
            None => Detail::None,
        };
        self.following = path.clone();
        out.push(Request::Select(path));
    }

    fn expand(&mut self, out: &mut Vec<Request>) {
        let Some(path) = self.selected_path().map(str::to_owned) else {
            return;
        };
        let node_expanded = self.tree.get(&path).is_some_and(|node| node.expanded);
        if node_expanded {
            // Already open: step into it.
            let has_child = self
                .rows
                .get(self.selected + 1)
                .is_some_and(|row| row.depth > self.rows[self.selected].depth);
            if has_child {
                self.select(self.selected + 1, out);
            }
            return;
        }
        if self.tree.expanded().len() >= EXPANDED_MAX {
            self.set_status(
                format!("at most {EXPANDED_MAX} nodes can be open: collapse some first"),
                true,
            );
            return;
        }
        // Expand even when the listing said "no children": that count may be
        // stale (only expanded nodes are watched), and expanding refreshes it.
        if self.tree.expand(&path) {
            out.push(Request::Expand(path));
            self.refresh_rows(out);
        }
    }

    fn collapse(&mut self, out: &mut Vec<Request>) {
        let Some(row) = self.rows.get(self.selected) else {
            return;
        };
        let path = match &row.kind {
            RowKind::Node(path) => path.clone(),
            RowKind::More { parent, .. } | RowKind::Loading { parent } => {
                let parent = parent.clone();
                self.select_path(&parent, out);
                return;
            }
        };
        if self.tree.get(&path).is_some_and(|node| node.expanded) {
            let unwatched = self.tree.collapse(&path);
            for path in &unwatched {
                self.stale.remove(path);
            }
            out.push(Request::Unwatch(unwatched));
            self.refresh_rows(out);
        } else if let Some(parent) = tree::parent_of(&path) {
            let parent = parent.to_owned();
            self.select_path(&parent, out);
        }
    }

    fn select_path(&mut self, path: &str, out: &mut Vec<Request>) {
        if let Some(row) = self.rows.iter().position(|row| row.path() == Some(path)) {
            self.select(row, out);
        }
    }

    /// Moves to the next loaded node (after the selection, wrapping) whose
    /// name contains the query, ignoring case. Only loaded nodes are
    /// searched: fetching the whole tree is what this browser never does.
    fn find_next(&mut self, out: &mut Vec<Request>) {
        let query = self.query.to_lowercase();
        let count = self.rows.len();
        let found = (1..=count)
            .map(|step| (self.selected + step) % count.max(1))
            .find(|&row| {
                self.rows[row]
                    .path()
                    .is_some_and(|path| tree::name_of(path).to_lowercase().contains(&query))
            });
        match found {
            Some(row) => {
                self.select(row, out);
                self.status = None;
            }
            None => self.set_status(
                format!(
                    "no loaded node matches {:?} (search covers expanded nodes only)",
                    self.query
                ),
                true,
            ),
        }
    }

    /// The loaded detail of the selected node, if it is current.
    fn selected_detail(&self) -> Option<(&str, &[u8], &Stat)> {
        match &self.detail {
            Detail::Loaded {
                path, data, stat, ..
            } if Some(path.as_str()) == self.selected_path() => Some((path, data, stat)),
            _ => None,
        }
    }

    fn ask_delete(&mut self) {
        let Some((path, _, stat)) = self.selected_detail() else {
            self.set_status("wait until the node is loaded".to_owned(), true);
            return;
        };
        let (path, version, children) = (path.to_owned(), stat.version, stat.num_children);
        if path == ROOT {
            self.set_status("the root cannot be deleted".to_owned(), true);
        } else if children > 0 {
            self.set_status(
                format!("cannot delete {path}: it has {children} children (delete them first)"),
                true,
            );
        } else {
            self.mode = Mode::ConfirmDelete { path, version };
        }
    }

    fn start_edit(&mut self) {
        let Some((path, data, stat)) = self.selected_detail() else {
            self.set_status("wait until the node is loaded".to_owned(), true);
            return;
        };
        let refusal = if data.len() < stat.data_length as usize {
            Some("the data is too large to edit here")
        } else if data::encoding_of(data) == Encoding::Hex {
            Some("binary data cannot be edited here")
        } else if data.contains(&b'\n') {
            Some("multi-line data cannot be edited here")
        } else {
            None
        };
        if let Some(refusal) = refusal {
            self.set_status(format!("{refusal}: use `arbor set`"), true);
            return;
        }
        let text = String::from_utf8_lossy(data).into_owned();
        self.mode = Mode::Edit {
            path: path.to_owned(),
            version: stat.version,
            input: LineInput::new(&text),
        };
    }

    /// Reloads every expanded node and the selected node's data, and sends
    /// the rows to watch again (the loader sets any watch it could not).
    fn refresh(&mut self, out: &mut Vec<Request>) {
        for path in self.tree.expanded() {
            self.reload(&path, out);
        }
        if let Some(path) = self.following.clone() {
            out.push(Request::Select(Some(path)));
        }
        self.rows_watched = None;
        self.watch_rows(out);
    }

    /// Reads a collapsed node's stat again, or marks it stale if a read is
    /// in flight.
    fn reload_stat(&mut self, path: &str, out: &mut Vec<Request>) {
        if self.stat_loading.insert(path.to_owned()) {
            out.push(Request::Stat(path.to_owned()));
        } else {
            self.stat_stale.insert(path.to_owned());
        }
    }

    /// A watch of an expanded node or of a row on screen fired.
    fn changed(&mut self, event: WatchEvent, out: &mut Vec<Request>) {
        // Data changes of the selected node arrive through the selection's
        // own watch (see the loader), and change no marker.
        if event.event_type == EventType::NodeDataChanged {
            return;
        }
        let path = event.path;
        let expanded = self.tree.get(&path).is_some_and(|node| node.expanded);
        let followed = self.following.as_deref() == Some(path.as_str());
        if event.event_type == EventType::NodeChildrenChanged && followed {
            // Its stat (num_children, cversion, pzxid) changed; its data
            // load brings the new one, and the row's with it.
            self.reselect(&path, out);
        }
        if expanded {
            self.reload(&path, out);
        } else if event.event_type == EventType::NodeChildrenChanged
            && !followed
            && self.tree.get(&path).is_some()
        {
            // A collapsed row: its marker and count. Its creation and
            // deletion show in its parent's listing instead.
            self.reload_stat(&path, out);
        }
    }

    /// Reloads `path`'s children, or marks it stale if a load is in flight.
    fn reload(&mut self, path: &str, out: &mut Vec<Request>) {
        if self.tree.start_reload(path) {
            out.push(Request::Reload(path.to_owned()));
        } else if self.tree.get(path).is_some_and(|node| node.expanded) {
            self.stale.insert(path.to_owned());
        }
    }

    /// A loader message.
    pub fn apply(&mut self, message: Message) -> Vec<Request> {
        let mut out = Vec::new();
        match message {
            Message::Children { path, result } => {
                match result {
                    Ok((entries, stat)) => {
                        let unwatched = self.tree.set_children(&path, entries, stat);
                        if !unwatched.is_empty() {
                            out.push(Request::Unwatch(unwatched));
                        }
                    }
                    // Gone: its parent's listing will drop it.
                    Err(Error::NoNode { .. }) => self.tree.load_failed(&path),
                    Err(error) => {
                        self.tree.load_failed(&path);
                        self.set_status(format!("cannot list {path}: {error}"), true);
                    }
                }
                if self.stale.remove(&path) {
                    self.reload(&path, &mut out);
                }
                self.refresh_rows(&mut out);
            }
            Message::Data { path, result } => {
                if self.following.as_deref() == Some(path.as_str()) {
                    self.detail = match result {
                        Ok((data, stat)) => {
                            self.tree.set_stat(&path, stat);
                            // A reload of the same node keeps the ACL shown
                            // until the fresh one lands.
                            let acl = match &self.detail {
                                Detail::Loaded {
                                    path: shown, acl, ..
                                } if *shown == path => acl.clone(),
                                _ => AclDetail::Loading,
                            };
                            Detail::Loaded {
                                path,
                                data,
                                stat,
                                acl,
                            }
                        }
                        Err(Error::NoNode { .. }) => Detail::Failed {
                            path,
                            message: "deleted".to_owned(),
                        },
                        Err(error) => Detail::Failed {
                            message: error.to_string(),
                            path,
                        },
                    };
                }
            }
            Message::Acl { path, result } => {
                if let Detail::Loaded {
                    path: shown, acl, ..
                } = &mut self.detail
                {
                    if *shown == path {
                        *acl = match result {
                            Ok(entries) => AclDetail::Loaded(entries),
                            Err(Error::NoAuth) => AclDetail::NotReadable,
                            Err(error) => AclDetail::Failed(error.to_string()),
                        };
                    }
                }
            }
            Message::Stat { path, result } => {
                self.stat_loading.remove(&path);
                // An error leaves the count of the last listing; the next
                // change or `r` tries again. `None`: the parent's listing
                // drops it.
                if let Ok(Some(stat)) = result {
                    self.tree.set_stat(&path, stat);
                    // The data load shown may predate the row's watch.
                    let shown = match &self.detail {
                        Detail::Loaded {
                            path: shown, stat, ..
                        } if *shown == path => Some(*stat),
                        _ => None,
                    };
                    if shown.is_some_and(|shown| shown != stat) {
                        self.reselect(&path, &mut out);
                    }
                }
                if self.stat_stale.remove(&path) {
                    self.reload_stat(&path, &mut out);
                }
            }
            Message::Event(event) => self.changed(event, &mut out),
            Message::WatchEnded { path, error } => match error {
                // Removed on purpose (collapsed), or the client is over (the
                // connection state says so).
                Error::WatchRemoved | Error::Closed | Error::SessionExpired => {}
                error => {
                    if self.tree.get(&path).is_some_and(|node| node.expanded) {
                        self.set_status(format!("{path} is not live: {error}"), true);
                    }
                }
            },
            Message::Saved { path, result } => {
                let mine = match self.saving.take() {
                    Some((saved, text, version)) if saved == path => Some((text, version)),
                    other => {
                        self.saving = other;
                        None
                    }
                };
                match (result, mine) {
                    (Ok(stat), _) => {
                        self.set_status(format!("saved {path} (version {})", stat.version), false)
                    }
                    // The dialog needs the node panel on the node, and no
                    // other dialog open.
                    (Err(Error::BadVersion { .. }), Some((mine, refused)))
                        if self.following.as_deref() == Some(path.as_str())
                            && matches!(self.mode, Mode::Browse) =>
                    {
                        self.set_status(format!("{path} changed meanwhile"), true);
                        self.reselect(&path, &mut out);
                        self.mode = Mode::Conflict {
                            path,
                            mine,
                            refused,
                        };
                    }
                    (Err(Error::BadVersion { .. }), _) => {
                        self.set_status(format!("{path} changed meanwhile, reloaded"), true);
                        self.reselect(&path, &mut out);
                    }
                    (Err(error), _) => {
                        self.set_status(format!("cannot save {path}: {error}"), true)
                    }
                }
            }
            Message::Deleted { path, result } => match result {
                Ok(()) => self.set_status(format!("deleted {path}"), false),
                Err(Error::BadVersion { .. }) => {
                    self.set_status(format!("{path} changed meanwhile, reloaded"), true);
                    self.reselect(&path, &mut out);
                }
                Err(Error::NotEmpty { .. }) => self.set_status(
                    format!("cannot delete {path}: it has children (delete them first)"),
                    true,
                ),
                Err(error) => self.set_status(format!("cannot delete {path}: {error}"), true),
            },
            Message::Connection(state) => {
                self.connection = state;
                self.outage = match state {
                    ConnectionState::Suspended => self
                        .outage
                        .or(Some(Outage::began(Instant::now(), self.session_timeout))),
                    _ => None,
                };
                // Watches were set again by the client; reload anyway so
                // nothing missed while away stays on screen.
                if state == ConnectionState::Reconnected {
                    self.refresh(&mut out);
                }
            }
        }
        out
    }

    /// Reloads the data of `path` if it is still the one followed.
    fn reselect(&mut self, path: &str, out: &mut Vec<Request>) {
        if self.following.as_deref() == Some(path) {
            out.push(Request::Select(Some(path.to_owned())));
        }
    }

    /// The loader could not take `request` (its queue is full, or it is
    /// gone): undo what waiting for it assumed.
    pub fn rejected(&mut self, request: Request) {
        match request {
            Request::Expand(path) | Request::Reload(path) => {
                self.tree.load_failed(&path);
                self.set_status(format!("too busy to load {path}: press r"), true);
            }
            Request::Stat(path) => {
                self.stat_loading.remove(&path);
                self.stat_stale.remove(&path);
            }
            Request::SetData { path, .. } => {
                self.set_status(format!("too busy: {path} not saved"), true)
            }
            Request::Delete { path, .. } => {
                self.set_status(format!("too busy: {path} not deleted"), true)
            }
            Request::Unwatch(_) | Request::Select(_) | Request::WatchRows(_) => {
                self.set_status("too busy: press r".to_owned(), true)
            }
        }
    }

    /// Rebuilds the rows after the tree changed, keeping the selected node
    /// selected (or, if it went away, the row now at its place).
    fn refresh_rows(&mut self, out: &mut Vec<Request>) {
        let selected = self.selected_path().map(str::to_owned);
        self.rows = self.tree.rows();
        let row = selected
            .and_then(|path| {
                self.rows
                    .iter()
                    .position(|row| row.path() == Some(path.as_str()))
            })
            .unwrap_or(self.selected);
        self.select(row, out);
    }

    fn set_status(&mut self, text: String, error: bool) {
        self.status = Some(Status { text, error });
    }
}
