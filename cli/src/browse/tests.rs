//! Tests of the browser: rendering through ratatui's `TestBackend` with
//! made-up loader messages, and the whole app (app + loader + view) against
//! an in-process server, changed by a second client.

use std::time::Duration;

use arbor_client::{Acl, ChildEntry, Client, ClientOptions, CreateMode, Error, Stat};
use arbor_server::TemporaryServer;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::Modifier;
use ratatui::Terminal;
use tokio::sync::mpsc;

use super::app::{App, Detail, Message, Mode, Request};
use super::sync::{Loader, MESSAGES_MAX};
use super::tree::CHILDREN_SHOWN_MAX;
use super::view;

/// How long a live test waits for the screen to catch up with the server.
const WAIT: Duration = Duration::from_secs(5);

fn stat(num_children: u32, data_length: u32, version: i32) -> Stat {
    Stat {
        czxid: 5,
        mzxid: 7,
        pzxid: 9,
        ctime_ms: 1_000,
        mtime_ms: 86_401_500,
        version,
        cversion: 0,
        aversion: 0,
        ephemeral_owner: 0,
        data_length,
        num_children,
    }
}

fn entry(name: &str, children: u32) -> ChildEntry {
    ChildEntry {
        name: name.to_owned(),
        stat: stat(children, 0, 0),
    }
}

fn key(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
}

fn code(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

/// The buffer as text, one line per row, trailing blanks removed.
fn buffer_text(buffer: &Buffer) -> String {
    let area = buffer.area;
    let mut text = String::new();
    for y in area.top()..area.bottom() {
        let mut line = String::new();
        for x in area.left()..area.right() {
            line.push_str(buffer[(x, y)].symbol());
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

fn draw(app: &App, width: u16, height: u16) -> Buffer {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test terminal");
    terminal
        .draw(|frame| view::draw(frame, app))
        .expect("draws");
    terminal.backend().buffer().clone()
}

fn screen(app: &App) -> String {
    buffer_text(&draw(app, 100, 30))
}

/// An app whose root listing (`alpha` with two children, `beta` a leaf)
/// has arrived.
fn loaded_app() -> App {
    let mut app = App::new("test:7181");
    let start = app.start();
    assert_eq!(
        start,
        vec![
            Request::Expand("/".to_owned()),
            Request::Select(Some("/".to_owned()))
        ]
    );
    app.apply(Message::Children {
        path: "/".to_owned(),
        result: Ok((vec![entry("beta", 0), entry("alpha", 2)], stat(2, 0, 0))),
    });
    app
}

/// Moves to `path` (from the top, with `j`) and delivers its data.
fn select_loaded(app: &mut App, path: &str, data: &[u8], stat: Stat) {
    app.handle_key(code(KeyCode::Home));
    for _ in 0..app.rows().len() {
        if app.selected_path() == Some(path) {
            break;
        }
        app.handle_key(key('j'));
    }
    assert_eq!(app.selected_path(), Some(path));
    app.apply(Message::Data {
        path: path.to_owned(),
        result: Ok((data.to_vec(), stat)),
    });
}

// Proves the tree panel lists the root's children in name order with their
// expand markers, and highlights exactly the selected row.
#[test]
fn browse_tree_panel_shows_children_markers_and_selection() {
    let mut app = loaded_app();
    let requests = app.handle_key(key('j'));
    assert_eq!(requests, vec![Request::Select(Some("/alpha".to_owned()))]);
    let buffer = draw(&app, 100, 30);
    let text = buffer_text(&buffer);
    let lines: Vec<&str> = text.lines().collect();
    let row_of = |needle: &str| {
        lines
            .iter()
            .position(|line| line.contains(needle))
            .unwrap_or_else(|| panic!("{needle:?} not on screen:\n{text}"))
    };
    let root = row_of("│▾ /");
    let alpha = row_of("│  ▸ alpha (2)");
    let beta = row_of("│  · beta");
    assert!(root < alpha && alpha < beta, "order:\n{text}");
    let reversed = |y: usize| {
        let y = u16::try_from(y).expect("small");
        buffer[(3, y)].modifier.contains(Modifier::REVERSED)
    };
    assert!(reversed(alpha), "selected row highlighted");
    assert!(!reversed(root) && !reversed(beta), "others not highlighted");
}

// Proves the node panel shows the selected node's path, data and every stat
// field, ids in hex and times in UTC.
#[test]
fn browse_node_panel_shows_path_data_and_stat() {
    let mut app = loaded_app();
    select_loaded(&mut app, "/alpha", b"hello world", stat(2, 11, 3));
    let text = screen(&app);
    for expected in [
        "Path             /alpha",
        "czxid            0x5",
        "mzxid            0x7",
        "pzxid            0x9",
        "ctime            1970-01-01T00:00:01.000Z",
        "mtime            1970-01-02T00:00:01.500Z",
        "version          3",
        "ephemeral_owner  none (persistent)",
        "data_length      11 bytes",
        "num_children     2",
        "Data (11 bytes)",
        "hello world",
    ] {
        assert!(text.contains(expected), "{expected:?} missing:\n{text}");
    }
}

// Proves the node panel lists the selected node's ACL under its stat, keeps
// it across a data reload, says "(not readable)" for NoAuth, and ignores an
// ACL that arrives for a node no longer shown.
#[test]
fn browse_node_panel_shows_the_acl() {
    let mut app = loaded_app();
    select_loaded(&mut app, "/alpha", b"x", stat(2, 1, 0));
    assert!(screen(&app).contains("acl              loading…"));
    let acl = Acl::parse_list("digest:alice:x:cdrwa,world:anyone:r").expect("valid");
    app.apply(Message::Acl {
        path: "/alpha".to_owned(),
        result: Ok(acl),
    });
    let text = screen(&app);
    for expected in [
        "num_children     2",
        "acl              digest:alice:x:cdrwa",
        "                 world:anyone:r",
    ] {
        assert!(text.contains(expected), "{expected:?} missing:\n{text}");
    }
    app.apply(Message::Data {
        path: "/alpha".to_owned(),
        result: Ok((b"y".to_vec(), stat(2, 1, 1))),
    });
    assert!(screen(&app).contains("acl              digest:alice:x:cdrwa"));

    app.apply(Message::Acl {
        path: "/alpha".to_owned(),
        result: Err(Error::NoAuth),
    });
    assert!(screen(&app).contains("acl              (not readable)"));
    app.apply(Message::Acl {
        path: "/beta".to_owned(),
        result: Ok(Acl::open()),
    });
    assert!(!screen(&app).contains("world:anyone:cdrwa"));
}

// Proves node data is shown escaped, so it can never put a terminal escape
// sequence on the screen.
#[test]
fn browse_data_cannot_inject_escapes() {
    let mut app = loaded_app();
    select_loaded(&mut app, "/beta", b"\x1b[2Jboom", stat(0, 8, 0));
    let text = screen(&app);
    assert!(text.contains("\\x1b\\x5b"), "escaped:\n{text}");
    assert!(!text.contains('\x1b'));
}

// Proves `?` shows the help overlay listing the keys, and any key closes it.
#[test]
fn browse_help_overlay_lists_keys() {
    let mut app = loaded_app();
    assert!(!screen(&app).contains(" Keys "));
    app.handle_key(key('?'));
    let text = screen(&app);
    for expected in [
        " Keys ",
        "search the loaded nodes by name",
        "delete the node (asks first)",
        "edit the data",
        "q  Ctrl-C",
        "Search covers loaded (expanded) nodes only.",
    ] {
        assert!(text.contains(expected), "{expected:?} missing:\n{text}");
    }
    assert!(app.handle_key(key('x')).is_empty());
    assert!(!screen(&app).contains(" Keys "));
    assert!(!app.should_quit());
}

// Proves `d` asks "Delete <path>? y/n", `n` cancels without a request, and
// `y` asks the loader to delete at the version shown.
#[test]
fn browse_delete_dialog_confirms() {
    let mut app = loaded_app();
    select_loaded(&mut app, "/beta", b"", stat(0, 0, 4));
    assert!(app.handle_key(key('d')).is_empty());
    assert!(screen(&app).contains("Delete /beta? y/n"));
    assert!(app.handle_key(key('n')).is_empty());
    assert!(matches!(app.mode(), Mode::Browse));
    assert!(!screen(&app).contains("Delete /beta?"));
    app.handle_key(key('d'));
    assert_eq!(
        app.handle_key(key('y')),
        vec![Request::Delete {
            path: "/beta".to_owned(),
            version: 4
        }]
    );
}

// Proves a node with children is not offered for deletion, with a clear
// message in the status line.
#[test]
fn browse_delete_refuses_non_empty() {
    let mut app = loaded_app();
    select_loaded(&mut app, "/alpha", b"", stat(2, 0, 0));
    assert!(app.handle_key(key('d')).is_empty());
    assert!(matches!(app.mode(), Mode::Browse));
    let text = screen(&app);
    assert!(
        text.contains("cannot delete /alpha: it has 2 children"),
        "{text}"
    );
}

// Proves the editor is prefilled with the data and Enter saves the edited
// text at the version shown; binary data is refused.
#[test]
fn browse_edit_prefills_and_refuses_binary() {
    let mut app = loaded_app();
    select_loaded(&mut app, "/beta", b"v1", stat(0, 2, 6));
    app.handle_key(key('e'));
    assert!(screen(&app).contains("Edit /beta (version 6)"));
    app.handle_key(key('!'));
    assert_eq!(
        app.handle_key(code(KeyCode::Enter)),
        vec![Request::SetData {
            path: "/beta".to_owned(),
            data: b"v1!".to_vec(),
            version: 6
        }]
    );

    select_loaded(&mut app, "/alpha", b"\x00\xff", stat(2, 2, 0));
    app.handle_key(key('e'));
    assert!(matches!(app.mode(), Mode::Browse));
    assert!(screen(&app).contains("binary data cannot be edited here"));
}

// Proves `/` finds loaded nodes by name, `n` moves to the next match, and a
// miss says that only loaded nodes are searched.
#[test]
fn browse_search_jumps_to_matches() {
    let mut app = loaded_app();
    app.handle_key(key('/'));
    for c in "ET".chars() {
        app.handle_key(key(c));
    }
    assert!(screen(&app).contains("/ET"));
    app.handle_key(code(KeyCode::Enter));
    assert_eq!(app.selected_path(), Some("/beta"));
    app.handle_key(key('/'));
    app.handle_key(key('a'));
    app.handle_key(code(KeyCode::Enter));
    assert_eq!(app.selected_path(), Some("/alpha"));
    app.handle_key(key('n'));
    assert_eq!(app.selected_path(), Some("/beta"));
    app.handle_key(key('/'));
    app.handle_key(key('z'));
    app.handle_key(code(KeyCode::Enter));
    assert_eq!(app.selected_path(), Some("/beta"));
    assert!(screen(&app).contains("search covers expanded nodes only"));
}

// Proves a node's children beyond CHILDREN_SHOWN_MAX are summarised in one
// "… N more" row rather than held and drawn.
#[test]
fn browse_caps_children_shown() {
    let mut app = App::new("test");
    app.start();
    let entries: Vec<ChildEntry> = (0..CHILDREN_SHOWN_MAX + 5)
        .map(|i| entry(&format!("n{i:05}"), 0))
        .collect();
    app.apply(Message::Children {
        path: "/".to_owned(),
        result: Ok((entries, stat(0, 0, 0))),
    });
    assert_eq!(app.rows().len(), 1 + CHILDREN_SHOWN_MAX + 1);
    app.handle_key(code(KeyCode::End));
    assert!(screen(&app).contains("… 5 more"));
}

// Proves change events arriving while a listing is in flight coalesce into
// one more reload, not one per event.
#[test]
fn browse_reloads_coalesce() {
    let mut app = loaded_app();
    let changed = || {
        Message::Event(arbor_client::WatchEvent {
            event_type: arbor_client::EventType::NodeChildrenChanged,
            path: "/".to_owned(),
            zxid: 1,
        })
    };
    // Only the reloads: the root is also the selected node, whose stat is
    // reloaded through the selection (which keeps only the latest).
    let reloads = |requests: Vec<Request>| -> Vec<Request> {
        requests
            .into_iter()
            .filter(|request| matches!(request, Request::Reload(_)))
            .collect()
    };
    assert_eq!(
        reloads(app.apply(changed())),
        vec![Request::Reload("/".to_owned())]
    );
    assert!(reloads(app.apply(changed())).is_empty());
    assert!(reloads(app.apply(changed())).is_empty());
    let landed = app.apply(Message::Children {
        path: "/".to_owned(),
        result: Ok((vec![entry("alpha", 0)], stat(1, 0, 0))),
    });
    assert_eq!(reloads(landed), vec![Request::Reload("/".to_owned())]);
}

// Proves drawing never panics, whatever the terminal size and dialog.
#[test]
fn browse_tiny_terminals_draw() {
    let mut app = loaded_app();
    select_loaded(&mut app, "/beta", b"some data", stat(0, 9, 1));
    let modes: [&[KeyEvent]; 5] = [
        &[],
        &[key('?')],
        &[key('d')],
        &[key('e')],
        &[key('/'), key('x')],
    ];
    for keys in modes {
        let mut app = App::new("test");
        app.start();
        app.apply(Message::Children {
            path: "/".to_owned(),
            result: Ok((vec![entry("beta", 0)], stat(1, 0, 0))),
        });
        select_loaded(&mut app, "/beta", b"some data", stat(0, 9, 1));
        for &key in keys {
            app.handle_key(key);
        }
        for (width, height) in [(0, 0), (1, 1), (10, 3), (20, 5), (3, 40), (200, 2)] {
            draw(&app, width, height);
        }
    }
    draw(&app, 10, 3);
}

/// The app, a loader on a real server, and a log of what the app asked for.
struct Live {
    app: App,
    loader: Loader,
    inbox: mpsc::Receiver<Message>,
    requested: Vec<Request>,
}

impl Live {
    async fn start(addr: &str) -> Live {
        let client = Client::connect(addr, ClientOptions::default())
            .await
            .expect("connects");
        let (messages, inbox) = mpsc::channel(MESSAGES_MAX);
        let loader = Loader::start(client, messages);
        let mut live = Live {
            app: App::new(addr),
            loader,
            inbox,
            requested: Vec::new(),
        };
        let requests = live.app.start();
        live.dispatch(requests);
        live
    }

    fn dispatch(&mut self, requests: Vec<Request>) {
        self.requested.extend(requests.iter().cloned());
        self.loader.dispatch(&mut self.app, requests);
    }

    fn press(&mut self, key: KeyEvent) {
        let requests = self.app.handle_key(key);
        self.dispatch(requests);
    }

    /// Applies loader messages (no keys) until `done` holds, at most [`WAIT`].
    async fn until(&mut self, what: &str, done: impl Fn(&App) -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !done(&self.app) {
            let message = tokio::time::timeout_at(deadline, self.inbox.recv())
                .await
                .unwrap_or_else(|_| panic!("timed out waiting for {what}:\n{}", screen(&self.app)))
                .expect("loader alive");
            let requests = self.app.apply(message);
            self.dispatch(requests);
        }
    }

    /// Selects `path` (which must be on screen) and waits for its data.
    async fn select(&mut self, path: &str) {
        self.press(code(KeyCode::Home));
        for _ in 0..self.app.rows().len() {
            if self.app.selected_path() == Some(path) {
                break;
            }
            self.press(key('j'));
        }
        assert_eq!(self.app.selected_path(), Some(path));
        self.until(
            "the node's data",
            |app| matches!(app.detail(), Detail::Loaded { path: p, .. } if p == path),
        )
        .await;
    }
}

async fn other_client(server: &TemporaryServer) -> Client {
    Client::connect(server.addr(), ClientOptions::default())
        .await
        .expect("connects")
}

fn on_screen(needle: &'static str) -> impl Fn(&App) -> bool {
    move |app| screen(app).contains(needle)
}

// Proves nodes another client creates or deletes under an expanded node
// (and under the root) appear and disappear without any key press.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browse_live_updates_without_keys() {
    let server = TemporaryServer::start().await.expect("server starts");
    let other = other_client(&server).await;
    other
        .create("/app", b"".to_vec(), CreateMode::Persistent)
        .await
        .expect("created");
    let mut live = Live::start(server.addr()).await;
    live.until("the root listing", on_screen("· app")).await;
    live.select("/app").await;
    live.press(code(KeyCode::Right));
    live.until("/app listed", |app| {
        app.tree().get("/app").is_some_and(|n| n.children.is_some())
    })
    .await;

    other
        .create("/app/fresh-node", b"".to_vec(), CreateMode::Persistent)
        .await
        .expect("created");
    live.until("the new child", on_screen("· fresh-node")).await;
    other
        .create("/root-sibling", b"".to_vec(), CreateMode::Persistent)
        .await
        .expect("created");
    live.until("the new root child", on_screen("root-sibling"))
        .await;

    other
        .delete("/app/fresh-node", None)
        .await
        .expect("deleted");
    live.until("the child to go", |app| !screen(app).contains("fresh-node"))
        .await;
    assert!(live
        .requested
        .iter()
        .all(|request| !matches!(request, Request::Delete { .. } | Request::SetData { .. })));
}

// Proves `e`, typing and Enter store the new data on the server (and the
// panel follows), and a concurrent change is reported and reloaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browse_edit_saves_on_server() {
    let server = TemporaryServer::start().await.expect("server starts");
    let other = other_client(&server).await;
    other
        .create("/cfg", b"v1".to_vec(), CreateMode::Persistent)
        .await
        .expect("created");
    let mut live = Live::start(server.addr()).await;
    live.until("the root listing", on_screen("cfg")).await;
    live.select("/cfg").await;

    live.press(key('e'));
    live.press(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
    for c in "v2".chars() {
        live.press(key(c));
    }
    live.press(code(KeyCode::Enter));
    live.until("the save", on_screen("saved /cfg (version 1)"))
        .await;
    let (data, _) = other.get_data("/cfg").await.expect("read");
    assert_eq!(data, b"v2");
    live.until(
        "the panel to follow",
        |app| matches!(app.detail(), Detail::Loaded { data, .. } if data == b"v2"),
    )
    .await;

    // Someone else writes while the editor is open.
    live.press(key('e'));
    other
        .set_data("/cfg", b"theirs".to_vec(), None)
        .await
        .expect("set");
    live.press(key('!'));
    live.press(code(KeyCode::Enter));
    live.until(
        "the conflict",
        on_screen("/cfg changed while you edited it"),
    )
    .await;
    live.until("their version", on_screen("server (version 2): theirs"))
        .await;
    assert!(screen(&live.app).contains("yours:  v2!"));
    let (data, _) = other.get_data("/cfg").await.expect("read");
    assert_eq!(data, b"theirs");

    // `e` edits the kept text again, now against their version.
    live.press(key('e'));
    assert!(
        matches!(live.app.mode(), Mode::Edit { version: 2, input, .. } if input.text() == "v2!"),
        "{:?}",
        live.app.mode()
    );
    live.press(code(KeyCode::Enter));
    live.until("the save", on_screen("saved /cfg (version 3)"))
        .await;
    let (data, _) = other.get_data("/cfg").await.expect("read");
    assert_eq!(data, b"v2!");

    // `r` keeps the server's data and drops the text.
    live.until(
        "the panel to follow",
        |app| matches!(app.detail(), Detail::Loaded { stat, .. } if stat.version == 3),
    )
    .await;
    live.press(key('e'));
    other
        .set_data("/cfg", b"again".to_vec(), None)
        .await
        .expect("set");
    live.press(key('?'));
    live.press(code(KeyCode::Enter));
    live.until("their version", on_screen("server (version 4): again"))
        .await;
    live.press(key('r'));
    assert!(matches!(live.app.mode(), Mode::Browse));
    assert!(screen(&live.app).contains("kept the server's /cfg"));
    let (data, stat) = other.get_data("/cfg").await.expect("read");
    assert_eq!((data.as_slice(), stat.version), (&b"again"[..], 4));
    // Only the refused save sent it.
    let sent = live
        .requested
        .iter()
        .filter(|request| matches!(request, Request::SetData { data, .. } if data == b"v2!?"))
        .count();
    assert_eq!(sent, 1);
}

// Proves the loader reads the selected node's ACL from the server, digests
// hidden from a session without ADMIN on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browse_shows_acl_from_the_server() {
    let server = TemporaryServer::start().await.expect("server starts");
    let other = other_client(&server).await;
    let alice = arbor_client::acl::digest_id("alice:secret").expect("credentials");
    let acl = Acl::parse_list(&format!("digest:{alice}:cdrwa,world:anyone:r")).expect("valid");
    other
        .create_with_acl("/guarded", b"".to_vec(), CreateMode::Persistent, acl)
        .await
        .expect("created");
    let mut live = Live::start(server.addr()).await;
    live.until("the root listing", on_screen("guarded")).await;
    live.select("/guarded").await;
    live.until(
        "the ACL",
        on_screen("acl              digest:alice:x:cdrwa"),
    )
    .await;
    assert!(screen(&live.app).contains("                 world:anyone:r"));
}

// Proves `d` + `n` keeps the node on the server and `d` + `y` deletes it
// (and it leaves the screen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browse_delete_on_server() {
    let server = TemporaryServer::start().await.expect("server starts");
    let other = other_client(&server).await;
    other
        .create("/doomed", b"".to_vec(), CreateMode::Persistent)
        .await
        .expect("created");
    let mut live = Live::start(server.addr()).await;
    live.until("the root listing", on_screen("doomed")).await;
    live.select("/doomed").await;

    live.press(key('d'));
    live.press(key('n'));
    assert!(other.exists("/doomed").await.expect("exists").is_some());

    live.press(key('d'));
    live.press(key('y'));
    live.until("the delete", on_screen("deleted /doomed")).await;
    assert!(other.exists("/doomed").await.expect("exists").is_none());
    live.until("the row to go", |app| {
        app.rows().iter().all(|row| row.path() != Some("/doomed"))
    })
    .await;
}

// Proves loading the root fetches nothing below it: no deeper node is held,
// every listing requested was the root's, and the rows watched are the
// root's children on screen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browse_loads_lazily() {
    let server = TemporaryServer::start().await.expect("server starts");
    let other = other_client(&server).await;
    for path in ["/deep", "/deep/a", "/deep/a/b", "/deep/a/b/c", "/deep/e"] {
        other
            .create(path, b"".to_vec(), CreateMode::Persistent)
            .await
            .expect("created");
    }
    let mut live = Live::start(server.addr()).await;
    live.until("the root listing", on_screen("▸ deep (2)"))
        .await;
    live.until("the root's data", |app| {
        matches!(app.detail(), Detail::Loaded { .. })
    })
    .await;
    let held: Vec<&str> = live.app.tree().paths().collect();
    assert!(held.contains(&"/deep"), "{held:?}");
    assert!(
        held.iter().all(|path| !path.starts_with("/deep/")),
        "{held:?}"
    );
    for request in &live.requested {
        match request {
            Request::Expand(path) | Request::Reload(path) => assert_eq!(path, "/"),
            Request::Select(path) => assert_eq!(path.as_deref(), Some("/")),
            Request::WatchRows(rows) => assert_eq!(rows, &["/deep"]),
            other => panic!("unexpected request {other:?}"),
        }
    }

    // Expanding one level loads exactly that level; collapsing forgets it
    // and gives its watch back.
    live.select("/deep").await;
    live.press(key('l'));
    live.until("/deep listed", on_screen("▸ a (1)")).await;
    assert!(live.app.tree().get("/deep/a/b").is_none());
    let before = live.requested.len();
    live.press(key('h'));
    // Its own watch stays, as a collapsed row on screen; its children's go.
    assert_eq!(
        live.requested[before..],
        [
            Request::Unwatch(vec!["/deep".to_owned()]),
            Request::WatchRows(vec!["/deep".to_owned()]),
        ]
    );
    assert!(live.app.tree().get("/deep/a").is_none());
}

// Proves a lost connection shows in the title as the outage's countdown from the granted session timeout, and goes once the session is resumed.
#[test]
fn browse_title_counts_down_an_outage() {
    use arbor_client::ConnectionState;

    let mut app = App::new("test");
    app.set_session_timeout(Duration::from_secs(30));
    app.start();
    app.apply(Message::Connection(ConnectionState::Suspended));
    assert!(app.outage().is_some());
    let shown = screen(&app);
    assert!(
        shown.contains("server unreachable; retrying while the session lives (30 s left)"),
        "{shown}"
    );
    app.apply(Message::Connection(ConnectionState::Reconnected));
    assert!(app.outage().is_none());
    assert!(screen(&app).contains("connected"));
}

fn children_changed(path: &str) -> Message {
    Message::Event(arbor_client::WatchEvent {
        event_type: arbor_client::EventType::NodeChildrenChanged,
        path: path.to_owned(),
        zxid: 1,
    })
}

// Proves the collapsed rows on screen are handed to the loader to watch,
// and that a children change of one (not the selected one) reads its stat
// again, coalesced, and turns its leaf marker into an expandable one.
#[test]
fn browse_collapsed_rows_follow_their_children() {
    let mut app = loaded_app();
    let requests = app.set_page_rows(10);
    assert!(requests.is_empty(), "the rows were sent with the listing");
    assert!(screen(&app).contains("│  · beta"));
    assert_eq!(
        app.apply(children_changed("/beta")),
        vec![Request::Stat("/beta".to_owned())]
    );
    assert!(app.apply(children_changed("/beta")).is_empty(), "coalesced");
    let again = app.apply(Message::Stat {
        path: "/beta".to_owned(),
        result: Ok(Some(stat(1, 0, 0))),
    });
    assert_eq!(again, vec![Request::Stat("/beta".to_owned())]);
    let text = screen(&app);
    assert!(text.contains("│  ▸ beta (1)"), "{text}");
    app.apply(Message::Stat {
        path: "/beta".to_owned(),
        result: Ok(Some(stat(0, 0, 0))),
    });
    assert!(screen(&app).contains("│  · beta"));

    // Only the first page's rows are watched, none expanded.
    let mut app = loaded_app();
    let requests = app.set_page_rows(2);
    assert_eq!(
        requests,
        vec![Request::WatchRows(vec!["/alpha".to_owned()])]
    );
}

// Proves the listing that brings the rows asks the loader to watch them,
// and a children change of the selected node reloads its data and stat.
#[test]
fn browse_selected_node_reloads_on_children_change() {
    let mut app = App::new("test");
    app.start();
    let landed = app.apply(Message::Children {
        path: "/".to_owned(),
        result: Ok((vec![entry("beta", 0), entry("alpha", 2)], stat(2, 0, 0))),
    });
    assert!(landed.contains(&Request::WatchRows(vec![
        "/alpha".to_owned(),
        "/beta".to_owned()
    ])));
    select_loaded(&mut app, "/beta", b"", stat(0, 0, 0));
    assert!(screen(&app).contains("num_children     0"));
    assert_eq!(
        app.apply(children_changed("/beta")),
        vec![Request::Select(Some("/beta".to_owned()))]
    );
    app.apply(Message::Data {
        path: "/beta".to_owned(),
        result: Ok((Vec::new(), stat(1, 0, 0))),
    });
    let text = screen(&app);
    assert!(text.contains("num_children     1"), "{text}");
    assert!(text.contains("▸ beta (1)"), "{text}");
    // A row's stat read that differs from the data shown reloads it too.
    assert_eq!(
        app.apply(Message::Stat {
            path: "/beta".to_owned(),
            result: Ok(Some(stat(2, 0, 0))),
        }),
        vec![Request::Select(Some("/beta".to_owned()))]
    );
}

// Proves, against a real server, that a collapsed row (not selected) turns
// expandable when a child is created under it elsewhere and a leaf again
// when it goes, and that the selected collapsed node's stat follows too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browse_rows_follow_grandchildren_on_server() {
    let server = TemporaryServer::start().await.expect("server starts");
    let other = other_client(&server).await;
    for path in ["/app", "/app/leaf", "/other"] {
        other
            .create(path, b"".to_vec(), CreateMode::Persistent)
            .await
            .expect("created");
    }
    let mut live = Live::start(server.addr()).await;
    live.until("the root listing", on_screen("▸ app (1)")).await;
    live.select("/app").await;
    live.press(key('l'));
    live.until("/app listed", on_screen("· leaf")).await;
    live.select("/other").await;

    other
        .create("/app/leaf/kid", b"".to_vec(), CreateMode::Persistent)
        .await
        .expect("created");
    live.until("the leaf to open", on_screen("▸ leaf (1)"))
        .await;
    other
        .create("/other/kid", b"".to_vec(), CreateMode::Persistent)
        .await
        .expect("created");
    live.until("the selected stat", on_screen("num_children     1"))
        .await;
    other.delete("/app/leaf/kid", None).await.expect("deleted");
    live.until("the leaf again", on_screen("· leaf")).await;
}
