//! End-to-end tests of `arbor browse` against a real `arbord`: the browser
//! runs on a pseudo-terminal of a fixed size, the test types keys at it,
//! changes the tree through `arbor_client` as another user would, and reads
//! what the screen shows afterwards.

mod common;
// Kept beside this file: only the browser's tests replay a full screen.
#[path = "browse/screen.rs"]
mod screen;

use std::fs::File;
use std::io::{Read, Write};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arbor_client::{Client, ClientOptions, CreateMode};
use arbor_tests::TestServer;
use screen::Screen;

/// The terminal's size: the node panel's lines fit on one line each.
const ROWS: u16 = 40;
const COLUMNS: u16 = 160;

/// How long the screen may take to show a change.
const SCREEN_WAIT: Duration = Duration::from_secs(15);

/// How often the screen is looked at while waiting.
const POLL: Duration = Duration::from_millis(20);

/// `arbor browse` on a pty, its screen replayed as it draws.
struct Browser {
    child: Child,
    keys: File,
    screen: Arc<Mutex<Screen>>,
}

impl Browser {
    /// Starts the browser on `server` and waits for the root's listing.
    fn start(server: &TestServer) -> Browser {
        let mut command = Command::new(env!("CARGO_BIN_EXE_arbor"));
        command
            .args(["--server", server.addr(), "browse"])
            // Only what a test passes proves an id.
            .env_remove("ARBOR_AUTH")
            .env_remove("ARBOR_TLS_CA")
            .env_remove("ARBOR_TLS_CERT")
            .env_remove("ARBOR_TLS_KEY");
        let (child, keys) = common::spawn_on_pty(&mut command, ROWS, COLUMNS);
        let screen = Arc::new(Mutex::new(Screen::new(ROWS, COLUMNS)));
        let mut output = keys.try_clone().expect("the pty's master end dups");
        let sink = Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            // Ends with EIO once the browser exits and the slave end closes.
            while let Ok(read) = output.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                sink.lock()
                    .expect("the screen lock is never poisoned")
                    .feed(&buffer[..read]);
            }
        });
        let browser = Browser {
            child,
            keys,
            screen,
        };
        browser.wait_for("the root's listing", &["▾ /", "  connected"]);
        browser
    }

    /// Types `keys` at the terminal.
    fn press(&mut self, keys: &str) {
        self.keys
            .write_all(keys.as_bytes())
            .expect("the pty takes the keys");
        self.keys.flush().expect("the keys reach the pty");
    }

    fn text(&self) -> String {
        self.screen
            .lock()
            .expect("the screen lock is never poisoned")
            .text()
    }

    /// Waits until the screen shows every one of `texts`; panics with the
    /// screen after [`SCREEN_WAIT`].
    fn wait_for(&self, what: &str, texts: &[&str]) -> String {
        self.wait_until(what, |screen| {
            texts.iter().all(|text| screen.contains(text))
        })
    }

    /// Waits until `done` holds for the screen's text.
    fn wait_until(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + SCREEN_WAIT;
        loop {
            let screen = self.text();
            if done(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} on screen within {SCREEN_WAIT:?}:\n{screen}"
            );
            std::thread::sleep(POLL);
        }
    }

    /// The tree panel's row of `name` (its marker, name and count).
    fn row_of(&self, name: &str) -> Option<String> {
        tree_row(&self.text(), name)
    }

    /// Moves the selection (from the top, with `j`) to the node at `path`,
    /// which must be on screen.
    fn select(&mut self, path: &str) {
        self.press("g");
        self.wait_until("the root selected", |screen| {
            field(screen, "Path").as_deref() == Some("/")
        });
        for _ in 0..ROWS {
            let shown = field(&self.text(), "Path");
            if shown.as_deref() == Some(path) {
                return;
            }
            self.press("j");
            self.wait_until("the selection to move", |screen| {
                field(screen, "Path") != shown
            });
        }
        panic!("{path} not found:\n{}", self.text());
    }

    /// Quits with `q` and checks the browser exits cleanly.
    fn quit(mut self) {
        self.press("q");
        let deadline = Instant::now() + SCREEN_WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("the browser is waitable") {
                assert!(status.success(), "{status:?}");
                return;
            }
            assert!(Instant::now() < deadline, "q did not quit");
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for Browser {
    /// A failed test must not leave the browser running.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The text of the tree row named `name`: from its marker to the panel's
/// border.
fn tree_row(screen: &str, name: &str) -> Option<String> {
    screen.lines().find_map(|line| {
        let tree = line.split('│').nth(1)?;
        let trimmed = tree.trim();
        let shown = trimmed.get(trimmed.find(' ')? + 1..)?;
        (shown == name || shown.starts_with(&format!("{name} ("))).then(|| trimmed.to_owned())
    })
}

/// The node panel's value for `label` (e.g. "num_children").
fn field(screen: &str, label: &str) -> Option<String> {
    screen.lines().find_map(|line| {
        let node = line.split('│').nth(3)?;
        let value = node.strip_prefix(label)?;
        Some(value.trim().to_owned())
    })
}

/// A client of the test's own, changing the tree as another user would,
/// and the runtime it runs on (in the background, so its session lives
/// while the test waits on the screen).
struct Other {
    runtime: tokio::runtime::Runtime,
    client: Client,
}

impl Other {
    fn connect(server: &TestServer) -> Other {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let client = runtime
            .block_on(Client::connect(server.addr(), ClientOptions::default()))
            .expect("connects");
        Other { runtime, client }
    }

    fn create(&self, path: &str, data: &[u8]) {
        self.runtime
            .block_on(
                self.client
                    .create(path, data.to_vec(), CreateMode::Persistent),
            )
            .unwrap_or_else(|error| panic!("create {path}: {error}"));
    }

    fn set(&self, path: &str, data: &[u8]) {
        self.runtime
            .block_on(self.client.set_data(path, data.to_vec(), None))
            .unwrap_or_else(|error| panic!("set {path}: {error}"));
    }

    fn get(&self, path: &str) -> (Vec<u8>, i32) {
        let (data, stat) = self
            .runtime
            .block_on(self.client.get_data(path))
            .unwrap_or_else(|error| panic!("get {path}: {error}"));
        (data, stat.version)
    }

    fn delete(&self, path: &str) {
        self.runtime
            .block_on(self.client.delete(path, None))
            .unwrap_or_else(|error| panic!("delete {path}: {error}"));
    }
}

/// Waits until the node panel shows `path` with `label` at `value`.
fn wait_for_field(browser: &Browser, path: &str, label: &str, value: &str) {
    browser.wait_until(&format!("{path} with {label} {value}"), |screen| {
        field(screen, "Path").as_deref() == Some(path)
            && field(screen, label).as_deref() == Some(value)
    });
}

// Proves the stat panel follows the selected node's children, created and
// deleted by another client: num_children and cversion change on screen,
// both while the node is collapsed and once it is expanded.
#[test]
fn browse_stat_panel_follows_children() {
    let server = TestServer::start();
    let other = Other::connect(&server);
    other.create("/app", b"");
    let mut browser = Browser::start(&server);
    browser.wait_for("/app", &["· app"]);
    browser.select("/app");
    wait_for_field(&browser, "/app", "num_children", "0");
    wait_for_field(&browser, "/app", "cversion", "0");

    // Collapsed.
    other.create("/app/one", b"");
    wait_for_field(&browser, "/app", "num_children", "1");
    wait_for_field(&browser, "/app", "cversion", "1");
    other.create("/app/two", b"");
    wait_for_field(&browser, "/app", "num_children", "2");

    // Expanded.
    browser.press("l");
    browser.wait_for("/app's children", &["· one", "· two"]);
    other.create("/app/three", b"");
    browser.wait_for("the new child", &["· three"]);
    wait_for_field(&browser, "/app", "num_children", "3");
    other.delete("/app/one");
    wait_for_field(&browser, "/app", "num_children", "2");
    wait_for_field(&browser, "/app", "cversion", "4");
    browser.quit();
}

// Proves a leaf row that is not selected and not expanded gets the
// expandable marker and count when another client gives it children (under
// an expanded node, and right under the root), can then be expanded to show
// them, and turns back into a leaf when its last child goes.
#[test]
fn browse_leaf_marker_follows_grandchildren() {
    let server = TestServer::start();
    let other = Other::connect(&server);
    for path in ["/app", "/app/leaf", "/app/sibling", "/zeta"] {
        other.create(path, b"");
    }
    let mut browser = Browser::start(&server);
    browser.wait_for("the root's children", &["▸ app (2)", "· zeta"]);
    browser.select("/app");
    browser.press("l");
    browser.wait_for("/app's children", &["· leaf", "· sibling"]);
    browser.select("/app/sibling");

    other.create("/app/leaf/kid", b"");
    browser.wait_until("leaf expandable", |screen| {
        tree_row(screen, "leaf").as_deref() == Some("▸ leaf (1)")
    });
    other.create("/app/leaf/kid2", b"");
    browser.wait_until("leaf's count", |screen| {
        tree_row(screen, "leaf").as_deref() == Some("▸ leaf (2)")
    });
    other.create("/zeta/kid", b"");
    browser.wait_until("zeta expandable", |screen| {
        tree_row(screen, "zeta").as_deref() == Some("▸ zeta (1)")
    });
    // The selection stayed where it was: the rows changed on their own.
    assert!(
        browser.text().contains("Path             /app/sibling"),
        "{}",
        browser.text()
    );

    // The new children can be seen.
    browser.select("/app/leaf");
    browser.press("l");
    browser.wait_for("leaf's children", &["▾ leaf", "· kid", "· kid2"]);
    browser.press("h");
    browser.wait_until("leaf collapsed", |screen| {
        tree_row(screen, "leaf").as_deref() == Some("▸ leaf (2)")
    });

    // And go again, while another row is selected.
    browser.select("/app/sibling");
    other.delete("/app/leaf/kid");
    other.delete("/app/leaf/kid2");
    browser.wait_until("leaf a leaf again", |screen| {
        tree_row(screen, "leaf").as_deref() == Some("· leaf")
    });
    assert_eq!(browser.row_of("sibling").as_deref(), Some("· sibling"));
    browser.quit();
}

// Proves an edit that loses the race keeps the user's text: the dialog
// shows the server's new data beside it, and `o` writes it over that
// version (conditionally, so the server ends with the user's text at the
// next version).
#[test]
fn browse_conflicting_edit_keeps_the_text_and_overwrites() {
    let server = TestServer::start();
    let other = Other::connect(&server);
    other.create("/cfg", b"v1");
    let mut browser = Browser::start(&server);
    browser.select("/cfg");
    wait_for_field(&browser, "/cfg", "version", "0");

    browser.press("e");
    browser.wait_for("the editor", &["Edit /cfg (version 0)"]);
    other.set("/cfg", b"theirs");
    wait_for_field(&browser, "/cfg", "version", "1");
    browser.press("-mine\r");
    browser.wait_for(
        "the conflict",
        &[
            "/cfg changed while you edited it",
            "server (version 1): theirs",
            "yours:  v1-mine",
        ],
    );
    assert_eq!(other.get("/cfg"), (b"theirs".to_vec(), 1));

    browser.press("o");
    browser.wait_for("the save", &["saved /cfg (version 2)"]);
    assert_eq!(other.get("/cfg"), (b"v1-mine".to_vec(), 2));
    wait_for_field(&browser, "/cfg", "version", "2");
    browser.quit();
}
