//! End-to-end tests of the `arbor` binary against a real `arbord`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use arbor_tests::TestServer;
use serde_json::Value;

/// Runs `arbor --server <server> args...` with `stdin` fed in.
fn arbor_with_stdin(server: &TestServer, args: &[&str], stdin: &[u8]) -> Output {
    arbor_at(server.addr(), args, stdin)
}

/// Runs `arbor --server <addr> args...` with `stdin` fed in.
fn arbor_at(addr: &str, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .arg("--server")
        .arg(addr)
        .args(args)
        // Only what a test passes proves an id.
        .env_remove("ARBOR_AUTH")
        .env_remove("ARBOR_TLS_CA")
        .env_remove("ARBOR_TLS_CERT")
        .env_remove("ARBOR_TLS_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the arbor binary runs");
    let mut input = child.stdin.take().expect("stdin is piped");
    input.write_all(stdin).expect("arbor reads its stdin");
    drop(input);
    child.wait_with_output().expect("arbor finishes")
}

fn arbor(server: &TestServer, args: &[&str]) -> Output {
    arbor_with_stdin(server, args, b"")
}

/// Runs a command that must succeed, and returns its stdout as JSON.
fn arbor_json(server: &TestServer, args: &[&str]) -> Value {
    let output = arbor(server, &[&["--json"], args].concat());
    assert_ok(&output);
    serde_json::from_slice(&output.stdout).expect("stdout is one JSON document")
}

fn assert_ok(output: &Output) {
    assert!(
        output.status.success(),
        "status {:?}, stderr {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("stderr is UTF-8")
}

/// The digest of `super:test`, ZooKeeper's test vector: the superuser of the
/// ACL tests.
const SUPER_DIGEST: &str = "super:D/InIHSb7yEEbrWz8b9l71RjZJU=";

// Proves create/get/set/stat/ls/ls -l/delete -r work and their JSON has the documented fields.
#[test]
fn json_round_trip_of_every_basic_command() {
    let server = TestServer::start();
    assert_eq!(
        arbor_json(&server, &["create", "/app", "hello"])["path"],
        "/app"
    );
    arbor_json(&server, &["create", "/app/b", "two"]);
    arbor_json(&server, &["create", "/app/a"]);
    arbor_json(&server, &["create", "/app/a/deep", "x"]);

    let got = arbor_json(&server, &["get", "/app"]);
    assert_eq!(got["path"], "/app");
    assert_eq!(got["data"], "hello");
    assert_eq!(got["encoding"], "utf8");
    assert_eq!(got["stat"]["version"], 0);
    assert_eq!(got["stat"]["data_length"], 5);

    let set = arbor_json(&server, &["set", "-v", "0", "/app", "world"]);
    assert_eq!(set["path"], "/app");
    assert_eq!(set["stat"]["version"], 1);
    assert_eq!(stdout(&arbor(&server, &["set", "/app", "again"])), "2\n");

    let stat = arbor_json(&server, &["stat", "/app"]);
    let fields = [
        "czxid",
        "mzxid",
        "pzxid",
        "ctime",
        "mtime",
        "version",
        "cversion",
        "aversion",
        "data_length",
        "num_children",
    ];
    for field in fields {
        assert!(stat["stat"][field].is_u64(), "{field} in {stat}");
    }
    assert_eq!(stat["stat"]["ephemeral_owner"], "0x0");
    assert_eq!(stat["stat"]["num_children"], 2);
    assert_eq!(stat["stat"]["version"], 2);

    let listed = arbor_json(&server, &["ls", "/app"]);
    assert_eq!(listed["path"], "/app");
    assert_eq!(listed["children"], serde_json::json!(["a", "b"]));
    assert_eq!(stdout(&arbor(&server, &["ls", "/app"])), "a\nb\n");

    let long = arbor_json(&server, &["ls", "-l", "/app"]);
    assert_eq!(long["children"][0]["name"], "a");
    assert_eq!(long["children"][0]["stat"]["num_children"], 1);
    assert_eq!(long["children"][1]["name"], "b");
    assert_eq!(long["children"][1]["stat"]["data_length"], 3);
    let human = stdout(&arbor(&server, &["ls", "-l", "/app"]));
    let lines: Vec<&str> = human.lines().collect();
    assert_eq!(lines.len(), 3, "{human}");
    assert!(lines[0].starts_with("NAME"), "{human}");
    assert_eq!(lines[1].find("  0"), lines[2].find("  0"), "{human}");

    assert_eq!(
        arbor_json(&server, &["delete", "-r", "/app"])["path"],
        "/app"
    );
    assert_eq!(arbor(&server, &["stat", "/app"]).status.code(), Some(4));
}

// Proves `-` reads the data from stdin, for create and for set.
#[test]
fn data_from_stdin() {
    let server = TestServer::start();
    assert_ok(&arbor_with_stdin(
        &server,
        &["create", "/in", "-"],
        b"from stdin\n",
    ));
    assert_eq!(arbor_json(&server, &["get", "/in"])["data"], "from stdin\n");
    assert_ok(&arbor_with_stdin(&server, &["set", "/in", "-"], b"second"));
    assert_eq!(arbor_json(&server, &["get", "/in"])["data"], "second");
}

// Proves every byte value survives stdin in and `get --raw` out, and is shown as hex otherwise.
#[test]
fn binary_data_round_trips_raw() {
    let server = TestServer::start();
    let bytes: Vec<u8> = (0..=255).collect();
    assert_ok(&arbor_with_stdin(&server, &["create", "/bin", "-"], &bytes));
    let raw = arbor(&server, &["get", "--raw", "/bin"]);
    assert_ok(&raw);
    assert_eq!(raw.stdout, bytes);

    let shown = arbor_json(&server, &["get", "/bin"]);
    assert_eq!(shown["encoding"], "hex");
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    assert_eq!(shown["data"], hex);
    let human = stdout(&arbor(&server, &["get", "/bin"]));
    assert!(human.starts_with("\\x00\\x01\\x02"), "{human}");
}

// Proves each failure gives its documented exit code, a one-line message and a JSON error.
// Proves a forgotten DATA argument does not wipe a node: `set PATH` alone is
// a usage error and leaves the data; `''` empties it on purpose.
#[test]
fn set_without_data_is_refused_and_empty_data_is_explicit() {
    let server = TestServer::start();
    assert_ok(&arbor(&server, &["create", "/keep", "precious"]));
    let refused = arbor(&server, &["set", "/keep"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(stderr(&refused).contains("<DATA>"), "{refused:?}");
    assert_eq!(stdout(&arbor(&server, &["get", "/keep"])), "precious\n");
    assert_ok(&arbor(&server, &["set", "/keep", ""]));
    assert_eq!(stdout(&arbor(&server, &["get", "/keep"])), "");
}

// Proves `create -p` makes missing parents as persistent empty nodes, is fine with parents that exist, and still fails on an existing node; and that without -p the error names the highest missing parent (exit 4).
#[test]
fn create_with_parents_and_missing_parent_errors() {
    let server = TestServer::start();
    let refused = arbor(&server, &["create", "/a/b/c", "x"]);
    assert_eq!(refused.status.code(), Some(4), "{refused:?}");
    assert_eq!(
        stderr(&refused),
        "arbor: no node: parent /a does not exist (/a/b/c)\n"
    );
    assert_ok(&arbor(&server, &["create", "/a"]));
    let refused = arbor(&server, &["--json", "create", "/a/b/c", "x"]);
    assert_eq!(refused.status.code(), Some(4), "{refused:?}");
    let document: Value = serde_json::from_slice(&refused.stdout).expect("a JSON error");
    assert_eq!(document["error"]["code"], "NoNode");
    assert_eq!(
        document["error"]["message"],
        "no node: parent /a/b does not exist (/a/b/c)"
    );

    let created = arbor(&server, &["create", "-p", "/a/b/c", "x"]);
    assert_eq!(stdout(&created), "/a/b/c\n", "{}", stderr(&created));
    assert_eq!(stdout(&arbor(&server, &["get", "/a/b/c"])), "x\n");
    let parent = arbor_json(&server, &["get", "/a/b"]);
    assert_eq!(parent["data"], "");
    assert_eq!(parent["stat"]["ephemeral_owner"], "0x0");
    // Parents that exist are fine; the node itself must not.
    assert_ok(&arbor(&server, &["create", "-p", "/a/b/d"]));
    assert_eq!(
        arbor(&server, &["create", "-p", "/a/b/c"]).status.code(),
        Some(5)
    );
    let sequential = arbor_json(&server, &["create", "-p", "-s", "/q/jobs/job-"]);
    assert_eq!(sequential["path"], "/q/jobs/job-0000000000");
    assert_eq!(stdout(&arbor(&server, &["ls", "/a/b"])), "c\nd\n");
}

/// Creates `count` children under `parent` (made too) in one `arbor shell`.
fn create_children(server: &TestServer, parent: &str, count: usize) {
    let script: String = (0..count)
        .map(|n| format!("create -p {parent}/n{n}\n"))
        .collect();
    let created = arbor_with_stdin(server, &["shell"], script.as_bytes());
    assert_ok(&created);
}

/// How many children `path` has, by `arbor stat` (`None` if it is gone).
fn children_of(server: &TestServer, path: &str) -> Option<u64> {
    let stat = arbor(server, &["--json", "stat", path]);
    if stat.status.code() == Some(4) {
        return None;
    }
    let document: Value = serde_json::from_slice(&stat.stdout).expect("stat prints JSON");
    document["stat"]["num_children"].as_u64()
}

// Proves a piped `delete -r` of more than DELETE_WITHOUT_ASKING_MAX nodes is refused without --yes (exit 2, saying to pass it) before deleting anything, and deletes them all with --yes or -y, stdout kept clean.
#[test]
fn large_recursive_delete_needs_yes_without_a_terminal() {
    let server = TestServer::start();
    create_children(&server, "/big", 30);
    let refused = arbor(&server, &["delete", "-r", "/big"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        stderr(&refused).contains("31 nodes under /big"),
        "{refused:?}"
    );
    assert!(stderr(&refused).contains("pass --yes"), "{refused:?}");
    assert_eq!(children_of(&server, "/big"), Some(30), "nothing deleted");

    let deleted = arbor(&server, &["delete", "-r", "--yes", "/big"]);
    assert_ok(&deleted);
    assert!(deleted.stdout.is_empty(), "{deleted:?}");
    assert_eq!(children_of(&server, "/big"), None, "all deleted");

    create_children(&server, "/big", 30);
    let json = arbor_json(&server, &["delete", "-ry", "/big"]);
    assert_eq!(json, serde_json::json!({"path": "/big", "deleted": 31}));
    assert_eq!(children_of(&server, "/big"), None);

    // A handful goes without asking.
    create_children(&server, "/small", 5);
    assert_ok(&arbor(&server, &["delete", "-r", "/small"]));
    assert_eq!(children_of(&server, "/small"), None);
}

// Proves a large `delete -r` shows its progress on stderr only, ending with how many nodes went.
#[test]
fn large_recursive_delete_reports_progress_on_stderr() {
    let server = TestServer::start();
    create_children(&server, "/wide", 250);
    let deleted = arbor(&server, &["delete", "-r", "--yes", "/wide"]);
    assert_ok(&deleted);
    assert!(deleted.stdout.is_empty(), "{deleted:?}");
    let progress = stderr(&deleted);
    let lines: Vec<&str> = progress.lines().collect();
    assert_eq!(
        lines.last(),
        Some(&"arbor: deleted 251 nodes under /wide"),
        "{progress}"
    );
    // Without a terminal, no line is rewritten in place.
    assert!(!progress.contains('\r'), "{progress:?}");
    assert_eq!(children_of(&server, "/wide"), None);
}

// Proves on a terminal a large `delete -r` asks first: no (or just Enter) deletes nothing, y deletes the subtree.
#[test]
fn large_recursive_delete_asks_on_a_terminal() {
    let server = TestServer::start();
    create_children(&server, "/app", 25);
    let delete = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_arbor"));
        command.args(["--server", server.addr(), "delete", "-r", "/app"]);
        command.env_remove("ARBOR_AUTH");
        common::Terminal::spawn(&mut command)
    };
    for answer in [&b"n\n"[..], b"\n"] {
        let mut terminal = delete();
        terminal.wait_for("delete 26 nodes under /app? [y/N] ", 1);
        terminal.type_in(answer);
        let status = terminal.wait();
        assert_eq!(status.code(), Some(1), "{}", terminal.screen());
        assert!(
            terminal.screen().contains("nothing deleted"),
            "{}",
            terminal.screen()
        );
        assert_eq!(children_of(&server, "/app"), Some(25), "nothing deleted");
    }
    let mut terminal = delete();
    terminal.wait_for("[y/N] ", 1);
    terminal.type_in(b"y\n");
    let status = terminal.wait();
    assert!(status.success(), "{status:?}: {}", terminal.screen());
    assert_eq!(children_of(&server, "/app"), None, "all deleted");
}

// Proves `delete -r /` is refused as a usage error and deletes nothing.
#[test]
fn recursive_delete_of_the_root_is_refused() {
    let server = TestServer::start();
    assert_ok(&arbor(&server, &["create", "/a", "1"]));
    assert_ok(&arbor(&server, &["create", "/a/b", "2"]));
    let refused = arbor(&server, &["delete", "-r", "/"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        stderr(&refused).contains("refusing to delete -r /"),
        "{refused:?}"
    );
    assert_eq!(stdout(&arbor(&server, &["get", "/a/b"])), "2\n");
}

#[test]
fn errors_have_documented_exit_codes() {
    let server = TestServer::start();
    let missing = arbor(&server, &["get", "/missing"]);
    assert_eq!(missing.status.code(), Some(4));
    let message = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(message, "arbor: no node (/missing)\n");
    assert!(missing.stdout.is_empty());

    let json = arbor(&server, &["--json", "get", "/missing"]);
    assert_eq!(json.status.code(), Some(4));
    let document: Value = serde_json::from_slice(&json.stdout).expect("a JSON error");
    assert_eq!(document["error"]["code"], "NoNode");
    assert!(document["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("/missing")));

    assert_ok(&arbor(&server, &["create", "/x", "1"]));
    let exists = arbor(&server, &["create", "/x"]);
    assert_eq!(exists.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&exists.stderr).contains("(/x)"));

    let bad_version = arbor(&server, &["set", "-v", "7", "/x", "2"]);
    assert_eq!(bad_version.status.code(), Some(6));

    assert_ok(&arbor(&server, &["create", "/x/child"]));
    assert_eq!(arbor(&server, &["delete", "/x"]).status.code(), Some(7));

    for bad in ["relative", "/a//b", "/trailing/"] {
        let invalid = arbor(&server, &["get", bad]);
        assert_eq!(invalid.status.code(), Some(8), "{bad}");
    }

    assert_eq!(arbor(&server, &["ls"]).status.code(), Some(2));
}

// Proves the exit codes the audit fixed: `locks` of a missing or invalid path (4, 8: the
// client error inside the recipe's error was not seen), `lock` of an invalid path (8), a
// malformed `cluster add` member (2), and a server lost after connecting (3).
#[test]
fn audited_exit_codes() {
    let server = TestServer::start();
    let missing = arbor(&server, &["locks", "/missing"]);
    assert_eq!(missing.status.code(), Some(4), "{missing:?}");
    assert_eq!(stderr(&missing), "arbor: no node (/missing)\n");
    let json = arbor(&server, &["--json", "locks", "/missing"]);
    let document: Value = serde_json::from_slice(&json.stdout).expect("a JSON error");
    assert_eq!(document["error"]["code"], "NoNode");
    assert_eq!(arbor(&server, &["locks", "/a//b"]).status.code(), Some(8));

    let invalid = arbor(&server, &["lock", "/a//b", "--", "true"]);
    assert_eq!(invalid.status.code(), Some(8), "{invalid:?}");
    assert!(
        stderr(&invalid).starts_with("arbor: invalid path"),
        "{invalid:?}"
    );

    let malformed = arbor(&server, &["cluster", "add", "bogus"]);
    assert_eq!(malformed.status.code(), Some(2), "{malformed:?}");
    assert!(stderr(&malformed).contains("ID=CLIENT_ADDR/PEER_ADDR"));

    // The shell connects, then the server stops answering: the next
    // line's request times out, and the script stops with 3.
    let mut shell = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["--server", server.addr(), "--timeout", "1s", "shell"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the arbor binary runs");
    let mut input = shell.stdin.take().expect("stdin is piped");
    let mut output = BufReader::new(shell.stdout.take().expect("stdout is piped"));
    input
        .write_all(b"create /before\n")
        .expect("the shell reads");
    let mut line = String::new();
    output.read_line(&mut line).expect("the shell answers");
    assert_eq!(line, "/before\n");
    server.pause();
    input.write_all(b"get /before\n").expect("the shell reads");
    drop(input);
    let status = shell.wait().expect("the shell ends");
    server.unpause();
    assert_eq!(status.code(), Some(3), "a lost server is unreachable");
}

/// The sessions the server holds now, from its admin port's `stat`.
fn sessions(server: &TestServer) -> u64 {
    stat_figure(server, "sessions")
}

/// A count from the server's `/commands/stat`.
fn stat_figure(server: &TestServer, name: &str) -> u64 {
    let (status, body) = server.admin_get("/commands/stat");
    assert_eq!(status, 200, "{body}");
    let stat: Value = serde_json::from_str(&body).expect("stat is JSON");
    stat[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} in {stat}"))
}

// Proves a one-shot command closes its session on every exit path: success, failures (no node, node exists, a
// refusal after connecting), and SIGTERM (143) or Ctrl-C (0 for a watch) while it runs; else the server would
// keep the session until it timed out.
#[test]
fn one_shot_commands_close_their_session_on_every_path() {
    let server = TestServer::start();
    assert_eq!(sessions(&server), 0);
    let runs: [(&[&str], i32); 6] = [
        (&["get", "/missing"], 4),
        (&["create", "/x"], 0),
        (&["create", "/x"], 5),
        (&["locks", "/missing"], 4),
        (&["delete", "-r", "/"], 2),
        (&["lock", "/l", "--", "false"], 1),
    ];
    for (args, code) in runs {
        let output = arbor(&server, args);
        assert_eq!(output.status.code(), Some(code), "{args:?}: {output:?}");
        assert_eq!(sessions(&server), 0, "{args:?} left its session behind");
    }

    for (signal, code) in [("-TERM", 143), ("-INT", 0)] {
        let mut watcher = Command::new(env!("CARGO_BIN_EXE_arbor"))
            .args(["--server", server.addr(), "watch", "-r", "/"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the arbor binary runs");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while sessions(&server) == 0 {
            assert!(std::time::Instant::now() < deadline, "the watch connects");
            std::thread::sleep(Duration::from_millis(20));
        }
        let sent = Command::new("kill")
            .args([signal, &watcher.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        let status = watcher.wait().expect("the watch ends");
        assert_eq!(status.code(), Some(code), "{signal}");
        assert_eq!(sessions(&server), 0, "{signal} left the session behind");
    }
}

// Proves an unreachable server exits with 3 and names the address it tried.
#[test]
fn unreachable_server_exits_3() {
    let output = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["--server", "127.0.0.1:1", "--timeout", "2s", "ls", "/"])
        .output()
        .expect("the arbor binary runs");
    assert_eq!(output.status.code(), Some(3));
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(message.starts_with("arbor: "), "{message}");
    assert!(message.contains("127.0.0.1:1"), "{message}");
    assert_eq!(message.lines().count(), 1, "{message}");
}

// Proves `tree --depth` stops at the depth asked and marks nodes with unlisted children.
#[test]
fn tree_respects_depth() {
    let server = TestServer::start();
    for path in ["/t", "/t/a", "/t/a/b", "/t/a/b/c", "/t/z"] {
        assert_ok(&arbor(&server, &["create", path]));
    }
    let full = arbor_json(&server, &["tree", "/t"]);
    assert_eq!(full["path"], "/t");
    assert_eq!(
        full["children"][0]["children"][0]["children"][0]["path"],
        "/t/a/b/c"
    );

    let one = arbor_json(&server, &["tree", "--depth", "1", "/t"]);
    let children = one["children"].as_array().expect("children");
    assert_eq!(children.len(), 2);
    assert_eq!(children[0]["path"], "/t/a");
    assert_eq!(children[0]["children"], serde_json::json!([]));
    assert_eq!(children[0]["truncated"], true);
    assert_eq!(children[1]["path"], "/t/z");

    let human = stdout(&arbor(&server, &["tree", "--depth", "2", "/t"]));
    assert!(human.contains("b"), "{human}");
    assert!(!human.contains("c\n"), "{human}");
}

// Proves `tree` walks past a subtree it may not read, marking it, and that an unreadable root is exit 9.
#[test]
fn tree_shows_an_unreadable_subtree_and_goes_on() {
    let server = TestServer::start();
    let alice = stdout(&arbor(&server, &["digest", "alice:secret"]));
    let closed = format!("digest:{}:cdrwa", alice.trim_end());
    let as_alice = |args: &[&str]| arbor(&server, &[&["--auth", "alice:secret"], args].concat());
    assert_ok(&arbor(&server, &["create", "/t"]));
    assert_ok(&as_alice(&["create", "--acl", &closed, "/t/a"]));
    assert_ok(&as_alice(&["create", "/t/a/secret"]));
    assert_ok(&arbor(&server, &["create", "/t/b"]));
    assert_ok(&arbor(&server, &["create", "/t/b/open"]));

    let tree = arbor_json(&server, &["tree", "/t"]);
    assert_eq!(tree["children"][0]["path"], "/t/a");
    assert_eq!(tree["children"][0]["unreadable"], true);
    assert_eq!(tree["children"][0]["children"], serde_json::json!([]));
    assert_eq!(tree["children"][1]["children"][0]["path"], "/t/b/open");
    let human = stdout(&arbor(&server, &["tree", "/t"]));
    assert!(human.contains("a (not authorized)"), "{human}");
    assert!(!human.contains("secret"), "{human}");
    assert_eq!(stdout(&as_alice(&["tree", "/t/a"])), "/t/a\n└── secret\n");
    assert_eq!(arbor(&server, &["tree", "/t/a"]).status.code(), Some(9));
}

// Proves `watch -r` prints a line for a node created by another command.
#[test]
fn watch_prints_creation_event() {
    let server = TestServer::start();
    assert_ok(&arbor(&server, &["create", "/w"]));
    let mut watcher = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["--server", server.addr(), "watch", "-r", "/w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the arbor binary runs");
    let stdout = watcher.stdout.take().expect("stdout is piped");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    // The watch may not be set yet: create nodes until one is reported.
    let mut first = None;
    for attempt in 0..50 {
        assert_ok(&arbor(&server, &["create", &format!("/w/n{attempt}")]));
        if let Ok(line) = received.recv_timeout(Duration::from_millis(200)) {
            first = Some(line.expect("watch output is UTF-8"));
            break;
        }
    }
    watcher.kill().expect("the watcher can be killed");
    watcher.wait().expect("the watcher ends");
    let first = first.expect("a watch event within 10 seconds");
    assert!(first.starts_with("NodeCreated /w/n"), "{first}");
    assert!(first.contains(" zxid=0x"), "{first}");
}

/// The lines a child writes to `stream`, as they come, on a channel.
fn lines_of(stream: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    received
}

/// Waits up to `within` for a line of `lines` that contains `text`.
fn wait_for_line(lines: &mpsc::Receiver<String>, text: &str, within: Duration) -> String {
    let deadline = std::time::Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(text) => return line,
            Ok(line) => seen.push(line),
            Err(_) => panic!("no line with {text:?} within {within:?}; saw {seen:#?}"),
        }
    }
}

// Proves `watch` rides out about 15 s of server downtime (a restart on the same port): its session, asked
// for 30 s, is resumed; it says on stderr that it is retrying and for how long, and that the session came
// back; and it prints an event made after the restart.
#[test]
fn watch_survives_a_server_restart() {
    // The default tick lets sessions last up to 40 s (the test tick: 4 s).
    let mut server = TestServer::start_with(&["--tick-ms", "2000"]);
    let mut watcher = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["--server", server.addr(), "watch", "-r", "/"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the arbor binary runs");
    let events = lines_of(watcher.stdout.take().expect("stdout is piped"));
    let notes = lines_of(watcher.stderr.take().expect("stderr is piped"));
    // Killed once the watch is set, so the test is about riding out a
    // restart, not about connecting.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while stat_figure(&server, "watches") == 0 {
        assert!(std::time::Instant::now() < deadline, "the watch is set");
        std::thread::sleep(Duration::from_millis(20));
    }

    server.kill();
    let lost = wait_for_line(&notes, "server unreachable", Duration::from_secs(10));
    assert!(
        lost.starts_with("arbor: server unreachable; retrying while the session lives ("),
        "{lost}"
    );
    assert!(lost.ends_with(" s left)"), "{lost}");
    std::thread::sleep(Duration::from_secs(15));
    assert_eq!(
        watcher.try_wait().expect("waitable"),
        None,
        "the watch gave up"
    );
    server.restart();
    wait_for_line(&notes, "session resumed", Duration::from_secs(15));

    assert_ok(&arbor(&server, &["create", "/after-restart"]));
    let event = wait_for_line(&events, "/after-restart", Duration::from_secs(10));
    assert!(event.starts_with("NodeCreated /after-restart "), "{event}");
    watcher.kill().expect("the watcher can be killed");
    watcher.wait().expect("the watcher ends");
}

/// Runs `arbor` until `done` holds for its result, up to 10 s.
fn arbor_until(server: &TestServer, args: &[&str], done: impl Fn(&Output) -> bool) -> Output {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let output = arbor(server, args);
        if done(&output) || std::time::Instant::now() > deadline {
            return output;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// Proves -e lives only as long as the command's session, -s appends a sequence, --container and --ttl nodes are reaped by the server.
#[test]
fn node_kinds_from_the_command_line() {
    let server = TestServer::start();
    assert_eq!(
        arbor_json(&server, &["create", "-e", "/eph"])["path"],
        "/eph"
    );
    // The command closed its session on exit, which deleted the ephemeral.
    assert_eq!(arbor(&server, &["stat", "/eph"]).status.code(), Some(4));

    arbor_json(&server, &["create", "/jobs"]);
    let first = arbor_json(&server, &["create", "-s", "/jobs/job-"]);
    let second = arbor_json(&server, &["create", "-s", "/jobs/job-"]);
    assert_eq!(first["path"], "/jobs/job-0000000000");
    assert_eq!(second["path"], "/jobs/job-0000000001");

    arbor_json(&server, &["create", "--container", "/box"]);
    arbor_json(&server, &["create", "/box/item"]);
    arbor_json(&server, &["delete", "/box/item"]);
    let gone = arbor_until(&server, &["stat", "/box"], |o| o.status.code() == Some(4));
    assert_eq!(
        gone.status.code(),
        Some(4),
        "the empty container was reaped"
    );

    arbor_json(&server, &["create", "--ttl", "300ms", "/short"]);
    arbor_json(&server, &["create", "--ttl", "1h", "/long"]);
    let gone = arbor_until(&server, &["stat", "/short"], |o| o.status.code() == Some(4));
    assert_eq!(gone.status.code(), Some(4), "the TTL node expired");
    assert_ok(&arbor(&server, &["stat", "/long"]));

    // A container cannot be ephemeral: a usage error, nothing created.
    let refused = arbor(&server, &["create", "--container", "-e", "/both"]);
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(arbor(&server, &["stat", "/both"]).status.code(), Some(4));
}

// Proves `sync` succeeds on a path and prints its JSON document.
#[test]
fn sync_a_path() {
    let server = TestServer::start();
    arbor_json(&server, &["create", "/s", "x"]);
    assert_eq!(
        arbor_json(&server, &["sync", "/s"]),
        serde_json::json!({"path": "/s"})
    );
    assert_eq!(stdout(&arbor(&server, &["sync", "/"])), "");
}

// Proves colour is off when stdout is not a terminal or NO_COLOR is set, and `--color always` paints.
#[test]
fn colour_only_when_asked_or_on_a_terminal() {
    let server = TestServer::start();
    arbor_json(&server, &["create", "/dir"]);
    arbor_json(&server, &["create", "/dir/leaf"]);
    let plain = stdout(&arbor(&server, &["ls", "/"]));
    assert_eq!(plain, "dir\n");
    let painted = stdout(&arbor(&server, &["--color", "always", "ls", "/"]));
    assert_eq!(painted, "\u{1b}[1;34mdir\u{1b}[0m\n");
    let json = arbor(&server, &["--color", "always", "--json", "ls", "/"]);
    assert!(!stdout(&json).contains('\u{1b}'), "JSON is never painted");

    // On a terminal (util-linux `script` gives the command a pty), `auto`
    // paints unless NO_COLOR is set.
    let on_terminal = |no_color: Option<&str>| {
        let command = format!(
            "{} --server {} ls /",
            env!("CARGO_BIN_EXE_arbor"),
            server.addr()
        );
        let mut script = Command::new("script");
        script.args(["-qec", &command, "/dev/null"]);
        script.env_remove("NO_COLOR");
        if let Some(value) = no_color {
            script.env("NO_COLOR", value);
        }
        let output = script.output().expect("util-linux `script` runs");
        assert_ok(&output);
        stdout(&output)
    };
    assert_eq!(on_terminal(None), "\u{1b}[1;34mdir\u{1b}[0m\r\n");
    assert_eq!(on_terminal(Some("1")), "dir\r\n");
    assert_eq!(on_terminal(Some("")), "\u{1b}[1;34mdir\u{1b}[0m\r\n");
}

// Proves `locks` shows the holder's session and fencing token and the waiters in FIFO order, as built by the client's Mutex.
#[test]
fn locks_shows_holder_token_and_fifo_waiters() {
    use arbor_client::recipes::Mutex;

    let server = TestServer::start();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let (holder, guard) = runtime.block_on(async {
        let holder = arbor_tests::client(&server).await;
        let guard = Mutex::new(&holder, "/app/locks/job-7")
            .lock()
            .await
            .expect("uncontended lock");
        (holder, guard)
    });
    // Queue three waiters one at a time, so their order is known.
    let mut waiters = Vec::new();
    for queued in 1..=3 {
        let client = runtime.block_on(arbor_tests::client(&server));
        let session = client.session_id();
        let waiting = runtime.spawn({
            let client = client.clone();
            async move { Mutex::new(&client, "/app/locks/job-7").lock().await }
        });
        runtime.block_on(arbor_tests::wait_for_children(
            &holder,
            "/app/locks/job-7",
            1 + queued,
        ));
        waiters.push((client, session, waiting));
    }
    arbor_json(&server, &["create", "/app/config", "not a lock"]);

    let shown = arbor_json(&server, &["locks", "/app"]);
    assert_eq!(shown["path"], "/app");
    let queues = shown["queues"].as_array().expect("queues");
    assert_eq!(queues.len(), 1, "{shown}");
    let queue = &queues[0];
    assert_eq!(queue["path"], "/app/locks/job-7");
    assert_eq!(queue["kind"], "lock");
    let holders = queue["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 1);
    // Hex strings: session ids use all 64 bits, beyond a double's precision.
    assert_eq!(
        holders[0]["session_id"],
        format!("{:#x}", holder.session_id())
    );
    assert_eq!(holders[0]["fencing_token"], guard.fencing_token());
    let waiting: Vec<&str> = queue["waiters"]
        .as_array()
        .expect("waiters")
        .iter()
        .map(|w| w["session_id"].as_str().expect("a session id"))
        .collect();
    let expected: Vec<String> = waiters
        .iter()
        .map(|(_, session, _)| format!("{session:#x}"))
        .collect();
    assert_eq!(waiting, expected, "waiters in the order they queued");
    let tokens: Vec<u64> = queue["waiters"]
        .as_array()
        .expect("waiters")
        .iter()
        .map(|w| w["fencing_token"].as_u64().expect("a token"))
        .collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");

    // For people: the holder first, then waiters numbered 1, 2, 3.
    let human = stdout(&arbor(&server, &["locks", "/"]));
    let lines: Vec<&str> = human.lines().collect();
    assert!(
        lines[0].starts_with("/app/locks/job-7  lock, 1 held, 3 waiting"),
        "{human}"
    );
    assert!(
        lines[2].contains("holds") && lines[2].contains(&format!("{:#x}", holder.session_id()))
    );
    for (row, (_, session, _)) in lines[3..6].iter().zip(&waiters) {
        assert!(
            row.contains("waits") && row.contains(&format!("{session:#x}")),
            "{human}"
        );
    }

    // Releasing hands the lock to the first waiter, and `locks` follows.
    runtime.block_on(guard.release()).expect("release");
    let (_, first_session, first) = waiters.remove(0);
    let first_guard = runtime
        .block_on(first)
        .expect("task")
        .expect("the first waiter gets the lock");
    let shown = arbor_json(&server, &["locks", "/app/locks/job-7"]);
    let queue = &shown["queues"][0];
    assert_eq!(
        queue["holders"][0]["session_id"],
        format!("{first_session:#x}")
    );
    assert_eq!(
        queue["holders"][0]["fencing_token"],
        first_guard.fencing_token()
    );
    assert_eq!(queue["waiters"].as_array().expect("waiters").len(), 2);

    let empty = stdout(&arbor(&server, &["locks", "/app/config"]));
    assert_eq!(empty, "no lock queues under /app/config\n");
}

// Proves `version` reports the client version and the server's last zxid, and still succeeds when the server is down.
#[test]
fn version_with_and_without_a_server() {
    let server = TestServer::start();
    let created = arbor_json(&server, &["create", "/v"]);
    assert_eq!(created["path"], "/v");
    let czxid = arbor_json(&server, &["stat", "/v"])["stat"]["czxid"]
        .as_u64()
        .expect("a zxid");
    let shown = arbor_json(&server, &["version"]);
    assert_eq!(shown["client_version"], env!("CARGO_PKG_VERSION"));
    assert!(shown["server_last_zxid"].as_u64().expect("a zxid") >= czxid);

    let output = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args([
            "--server",
            "127.0.0.1:1",
            "--timeout",
            "300ms",
            "--json",
            "version",
        ])
        .output()
        .expect("arbor runs");
    assert_ok(&output);
    let shown: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert!(shown["server_last_zxid"].is_null(), "{shown}");
}

// Proves `browse` refuses to run without a terminal (a usage error), and in a real terminal draws the tree and quits on `q`.
#[test]
fn browse_needs_a_terminal_and_quits_on_q() {
    let server = TestServer::start();
    arbor_json(&server, &["create", "/visible-node"]);
    let piped = arbor(&server, &["browse"]);
    assert_eq!(piped.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&piped.stderr).contains("needs a terminal"),
        "{piped:?}"
    );

    // util-linux `script` runs it on a pty, sized so there is room to draw.
    let command = format!(
        "stty cols 100 rows 30; {} --server {} browse",
        env!("CARGO_BIN_EXE_arbor"),
        server.addr()
    );
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("util-linux `script` runs");
    let mut screen = child.stdout.take().expect("piped stdout");
    let (drawn, seen) = mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let mut buffer = [0u8; 4096];
        while let Ok(read) = std::io::Read::read(&mut screen, &mut buffer) {
            if read == 0 {
                break;
            }
            bytes.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&bytes);
            if text.contains("visible-node") && text.contains("connected") {
                let _ = drawn.send(());
            }
        }
    });
    seen.recv_timeout(Duration::from_secs(10))
        .expect("the tree is drawn with the root's children");
    let mut keys = child.stdin.take().expect("piped stdin");
    keys.write_all(b"q").expect("the pty takes keys");
    keys.flush().expect("flushed");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waitable") {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "q did not quit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn cluster_status_shows_each_member_its_leader_and_a_dead_members_lag() {
    // A standalone server says so; each member of an ensemble answers for
    // itself, they agree on the leader, and the leader tells how far behind
    // a killed member has fallen.
    let standalone = TestServer::start();
    let view = arbor_json(&standalone, &["cluster", "status"]);
    assert_eq!(view[0]["role"], "standalone", "{view}");

    let mut ensemble = arbor_tests::TestEnsemble::start(3);
    let status = |ensemble: &arbor_tests::TestEnsemble| -> Value {
        let output = Command::new(env!("CARGO_BIN_EXE_arbor"))
            .args(["--server", &ensemble.addrs(), "--json", "cluster", "status"])
            .output()
            .expect("arbor runs");
        assert_ok(&output);
        serde_json::from_slice(&output.stdout).expect("one JSON document")
    };
    let leader = ensemble.wait_for_leader(None);
    let views = status(&ensemble);
    let views = views.as_array().expect("one view per server");
    assert_eq!(views.len(), 3);
    for (k, view) in views.iter().enumerate() {
        assert_eq!(view["member_id"], k as u64 + 1, "{view}");
        assert_eq!(view["leader"], leader, "{view}");
        assert_eq!(view["members"].as_array().map(Vec::len), Some(3), "{view}");
    }
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    ensemble.member(follower).kill();
    let leader_addr = ensemble.member(leader).addr().to_owned();
    for i in 0..5 {
        let output = Command::new(env!("CARGO_BIN_EXE_arbor"))
            .args(["--server", &leader_addr, "create", &format!("/n{i}"), "x"])
            .output()
            .expect("arbor runs");
        assert_ok(&output);
    }
    let views = status(&ensemble);
    let dead = &views[follower as usize - 1];
    assert_eq!(dead["reachable"], false, "{views}");
    assert_eq!(dead["member_id"], follower, "{views}");
    assert!(
        dead["lag"].as_u64().is_some_and(|lag| lag >= 5),
        "five writes behind at least: {views}"
    );
}

// Proves `digest` needs no server, matches ZooKeeper's test vector, reads `-` from stdin, and never echoes bad credentials.
#[test]
fn digest_is_offline_and_matches_the_vector() {
    // No server listens there: digest must not need one.
    let digest = |args: &[&str], stdin: &[u8]| {
        arbor_at(
            "127.0.0.1:1",
            &[&["--timeout", "300ms"], args].concat(),
            stdin,
        )
    };
    let shown = digest(&["digest", "super:test"], b"");
    assert_ok(&shown);
    assert_eq!(stdout(&shown), format!("{SUPER_DIGEST}\n"));
    let json = digest(&["--json", "digest", "super:test"], b"");
    let document: Value = serde_json::from_slice(&json.stdout).expect("one JSON document");
    assert_eq!(document, serde_json::json!({"id": SUPER_DIGEST}));
    let piped = digest(&["digest", "-"], b"super:test\n");
    assert_eq!(stdout(&piped), format!("{SUPER_DIGEST}\n"));

    let bad = digest(&["digest", "hunter2"], b"");
    assert_eq!(bad.status.code(), Some(2));
    let message = stderr(&bad);
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(message.contains("USER:PASSWORD"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");
}

// Proves create --acl, getacl with and without ADMIN, NoAuth (exit 9) for a plain set, --auth and ARBOR_AUTH, setacl -v and its bad version, the superuser, and whoami.
#[test]
fn acls_from_the_command_line() {
    let server = TestServer::start_with(&["--super-digest", SUPER_DIGEST]);
    let alice = stdout(&arbor(&server, &["digest", "alice:secret"]));
    let alice = alice.trim_end();
    let acl = format!("digest:{alice}:cdrwa,world:anyone:r");
    let created = arbor(&server, &["create", "--acl", &acl, "/team", "v0"]);
    assert_eq!(stdout(&created), "/team\n", "{}", stderr(&created));
    let as_alice = |args: &[&str]| arbor(&server, &[&["--auth", "alice:secret"], args].concat());

    // With ADMIN the digest shows; without, it is `user:x`.
    assert_eq!(
        stdout(&as_alice(&["getacl", "/team"])),
        format!("digest:{alice}:cdrwa\nworld:anyone:r\n")
    );
    assert_eq!(
        stdout(&arbor(&server, &["getacl", "/team"])),
        "digest:alice:x:cdrwa\nworld:anyone:r\n"
    );
    assert_eq!(
        arbor_json(&server, &["--auth", "alice:secret", "getacl", "/team"]),
        serde_json::json!({
            "path": "/team",
            "acl": [
                {"scheme": "digest", "id": alice, "perms": "cdrwa"},
                {"scheme": "world", "id": "anyone", "perms": "r"},
            ],
            "aversion": 0,
        })
    );

    // Reading is open; writing is alice's.
    assert_eq!(stdout(&arbor(&server, &["get", "/team"])), "v0\n");
    let refused = arbor(&server, &["set", "/team", "v1"]);
    assert_eq!(refused.status.code(), Some(9));
    assert_eq!(stderr(&refused), "arbor: not authorized (/team)\n");
    let json = arbor(&server, &["--json", "set", "/team", "v1"]);
    let document: Value = serde_json::from_slice(&json.stdout).expect("a JSON error");
    assert_eq!(document["error"]["code"], "NoAuth");
    assert_eq!(stdout(&as_alice(&["set", "/team", "v1"])), "1\n");
    let from_env = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["--server", server.addr(), "set", "/team", "v2"])
        .env("ARBOR_AUTH", "alice:secret")
        .output()
        .expect("arbor runs");
    assert_eq!(stdout(&from_env), "2\n", "{}", stderr(&from_env));

    // setacl checks the ACL version, as set checks the data version.
    let only_alice = format!("digest:{alice}:cdrwa");
    assert_eq!(
        stdout(&as_alice(&["setacl", "-v", "0", "/team", &only_alice])),
        "1\n"
    );
    let stale = as_alice(&["setacl", "-v", "0", "/team", "world:anyone:r"]);
    assert_eq!(stale.status.code(), Some(6));
    assert_eq!(stderr(&stale), "arbor: bad version (/team)\n");
    assert_eq!(arbor(&server, &["get", "/team"]).status.code(), Some(9));
    let root = arbor(&server, &["--auth", "super:test", "get", "/team"]);
    assert_eq!(stdout(&root), "v2\n", "the superuser passes every check");

    assert_eq!(
        stdout(&as_alice(&["whoami"])),
        format!("ip:127.0.0.1\ndigest:{alice}\n")
    );
    assert_eq!(
        arbor_json(&server, &["whoami"]),
        serde_json::json!({"ids": [{"scheme": "ip", "id": "127.0.0.1"}]})
    );
}

// Proves --tls-ca/--tls-cert/--tls-key reach a mutual-TLS port (whoami shows the certificate's x509 id), that the
// ARBOR_TLS_* variables do the same, that no certificate is refused as unreachable (exit 3), and that half a pair is a
// usage error.
#[test]
fn tls_flags_and_variables_reach_a_mutual_tls_port() {
    use arbor_tests::certs::TestCa;
    let ca = TestCa::new("cli-ca");
    let server_files = ca.server("server");
    let alice = ca.client("alice", &[(rcgen::DnType::CommonName, "alice")]);
    let path = |path: &std::path::Path| path.to_str().expect("utf-8 path").to_owned();
    let (ca_path, cert, key) = (path(&ca.ca()), path(&alice.cert), path(&alice.key));
    let server = TestServer::start_with(&[
        "--tls-listen",
        "127.0.0.1:0",
        "--tls-cert",
        &path(&server_files.cert),
        "--tls-key",
        &path(&server_files.key),
        "--tls-client-ca",
        &ca_path,
    ]);
    let tls = |args: &[&str]| arbor_at(server.tls_addr(), args, b"");
    let flags = ["--tls-ca", &ca_path, "--tls-cert", &cert, "--tls-key", &key];
    let whoami = tls(&[&flags[..], &["whoami"]].concat());
    assert_ok(&whoami);
    assert_eq!(stdout(&whoami), "ip:127.0.0.1\nx509:CN=alice\n");

    let by_env = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["--server", server.tls_addr(), "whoami"])
        .env_remove("ARBOR_AUTH")
        .env("ARBOR_TLS_CA", &ca_path)
        .env("ARBOR_TLS_CERT", &cert)
        .env("ARBOR_TLS_KEY", &key)
        .output()
        .expect("arbor runs");
    assert_eq!(stdout(&by_env), "ip:127.0.0.1\nx509:CN=alice\n");

    let anonymous = tls(&["--tls-ca", &ca_path, "ls", "/"]);
    assert_eq!(anonymous.status.code(), Some(3), "{}", stderr(&anonymous));
    let half = tls(&["--tls-ca", &ca_path, "--tls-cert", &cert, "ls", "/"]);
    assert!(!half.status.success());
    assert!(stderr(&half).contains("--tls-cert and --tls-key go together"));
    let missing = tls(&["--tls-ca", "/nonexistent/ca.pem", "ls", "/"]);
    assert!(
        stderr(&missing).contains("/nonexistent/ca.pem"),
        "{}",
        stderr(&missing)
    );
}

// Proves malformed credentials fail with exit 10 and a message that never shows them.
#[test]
fn bad_auth_is_a_clear_failure() {
    let server = TestServer::start();
    let version = arbor(&server, &["--auth", "nopassword", "version"]);
    assert_eq!(
        version.status.code(),
        Some(10),
        "version hides a bad --auth"
    );
    let output = arbor(&server, &["--auth", "nopassword", "ls", "/"]);
    assert_eq!(output.status.code(), Some(10));
    assert_eq!(
        stderr(&output),
        "arbor: authentication failed: --auth (or ARBOR_AUTH) takes USER:PASSWORD\n"
    );
    let json = arbor(&server, &["--json", "--auth", "nopassword", "ls", "/"]);
    assert_eq!(json.status.code(), Some(10));
    let document: Value = serde_json::from_slice(&json.stdout).expect("a JSON error");
    assert_eq!(document["error"]["code"], "AuthFailed");
    assert!(!stdout(&json).contains("nopassword"), "{}", stdout(&json));
}

// Proves a malformed ACL is a usage error naming its bad entry, and one the server refuses exits 11.
#[test]
fn bad_acls_are_refused() {
    let server = TestServer::start();
    let bad = arbor(
        &server,
        &["create", "--acl", "world:anyone:r,world:anyone:q", "/x"],
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("bad ACL entry 'world:anyone:q'"),
        "{}",
        stderr(&bad)
    );
    assert_eq!(arbor(&server, &["stat", "/x"]).status.code(), Some(4));

    // `auth` stands for the ids this session proved: here none.
    let refused = arbor(&server, &["create", "--acl", "auth::cdrwa", "/x"]);
    assert_eq!(refused.status.code(), Some(11));
    assert!(
        stderr(&refused).starts_with("arbor: invalid ACL (/x): "),
        "{}",
        stderr(&refused)
    );
    assert_ok(&arbor(&server, &["create", "/y"]));
    let unknown = arbor(&server, &["setacl", "/y", "nosuch:scheme:r"]);
    assert_eq!(unknown.status.code(), Some(11));
}

// Proves `arbor lock` runs its command under the lock with the fencing
// token in its environment, exits with the command's status, waits behind a
// holder (and gives up with 12 after --timeout), and releases when done.
#[test]
fn lock_runs_a_command_while_holding_the_lock() {
    use arbor_client::recipes::Mutex;

    let server = TestServer::start();
    let ran = arbor(
        &server,
        &[
            "lock",
            "/jobs/nightly",
            "--",
            "sh",
            "-c",
            "echo \"$ARBOR_LOCK_PATH $ARBOR_FENCING_TOKEN $ARBOR_LOCK_NODE\"; exit 7",
        ],
    );
    assert_eq!(ran.status.code(), Some(7), "stderr {}", stderr(&ran));
    let printed = stdout(&ran);
    let fields: Vec<&str> = printed.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{printed}");
    assert_eq!(fields[0], "/jobs/nightly");
    let token: u64 = fields[1].parse().expect("a decimal token");
    assert!(token > 0);
    assert!(fields[2].starts_with("/jobs/nightly/_c_"), "{printed}");

    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let (holder, guard) = runtime.block_on(async {
        let holder = arbor_tests::client(&server).await;
        let guard = Mutex::new(&holder, "/jobs/nightly")
            .lock()
            .await
            .expect("released by the command's run");
        (holder, guard)
    });
    assert!(
        guard.fencing_token() > token,
        "the next holder's token is larger"
    );
    let refused = arbor(
        &server,
        &["lock", "/jobs/nightly", "--timeout", "300ms", "--", "true"],
    );
    assert_eq!(
        refused.status.code(),
        Some(12),
        "stderr {}",
        stderr(&refused)
    );
    assert!(
        stderr(&refused).contains("not granted"),
        "{}",
        stderr(&refused)
    );

    // A waiting `arbor lock` runs its command once the holder lets go.
    let (done_tx, done_rx) = mpsc::channel();
    let addr = server.addr().to_owned();
    std::thread::spawn(move || {
        let _ = done_tx.send(arbor_at(
            &addr,
            &["lock", "/jobs/nightly", "--", "true"],
            b"",
        ));
    });
    runtime.block_on(arbor_tests::wait_for_children(&holder, "/jobs/nightly", 2));
    assert!(
        done_rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "ran while another held the lock"
    );
    runtime.block_on(guard.release()).expect("released");
    let waited = done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("granted once released");
    assert_ok(&waited);
}

// Proves a client over the server's per-address limit is told so, with
// the limit, and exits 3: the server is up and said why.
#[test]
fn the_connection_limit_is_named() {
    let server = TestServer::start_with(&["--max-connections-per-ip", "1"]);
    let holder = std::net::TcpStream::connect(server.addr()).expect("holds the one connection");
    let output = arbor(&server, &["ls", "/"]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let said = stderr(&output);
    assert!(
        said.contains("refused the connection: too many connections from this address (limit 1)"),
        "{said}"
    );
    drop(holder);
}

// Proves the operator's commands over the client port: sessions lists a
// session with its ephemeral, `session close` evicts it (the ephemeral
// goes; a second close is "no session", exit 4), and `server stat` reports.
#[test]
fn sessions_can_be_listed_and_evicted() {
    let server = TestServer::start();
    let mut shell = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["--server", server.addr(), "shell"])
        .env("ARBOR_HISTORY", "/nonexistent/arbor-test-history")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the shell runs");
    let mut input = shell.stdin.take().expect("piped");
    input
        .write_all(b"create -e /lease\n")
        .expect("the shell reads");
    input.flush().expect("sent");
    let lines = lines_of(shell.stdout.take().expect("piped"));
    wait_for_line(&lines, "/lease", Duration::from_secs(10));
    let listed = arbor_json(&server, &["sessions"]);
    let holder = listed["sessions"]
        .as_array()
        .and_then(|all| all.iter().find(|s| s["ephemerals"] == 1))
        .unwrap_or_else(|| panic!("no session holds the lease: {listed}"));
    let id = holder["session_id"].as_str().expect("a hex id").to_owned();
    let table = stdout(&arbor(&server, &["sessions"]));
    assert!(
        table.starts_with("SESSION") && table.contains(&id),
        "{table}"
    );
    let cons = stdout(&arbor(&server, &["cons"]));
    assert!(cons.contains(&id), "{cons}");

    let closed = arbor(&server, &["session", "close", &id]);
    assert_ok(&closed);
    assert_eq!(stdout(&closed), format!("closed session {id}\n"));
    assert_eq!(arbor(&server, &["stat", "/lease"]).status.code(), Some(4));
    let again = arbor(&server, &["session", "close", &id]);
    assert_eq!(again.status.code(), Some(4));
    assert!(
        stderr(&again).contains(&format!("no session {id}")),
        "{}",
        stderr(&again)
    );
    let bad = arbor(&server, &["session", "close", "zz"]);
    assert_eq!(bad.status.code(), Some(2));

    let stat = arbor_json(&server, &["server", "stat"]);
    assert_eq!(stat["mode"], "standalone");
    assert!(stdout(&arbor(&server, &["server", "stat"])).contains("znodes"));
    drop(input);
    let _ = shell.wait();
}

// Proves `backup` writes a file `arbord restore` accepts, and that
// `export` then `import --to` copies a subtree's data and ACLs, stopping at
// a node that exists unless told --overwrite.
#[test]
fn backup_export_and_import() {
    let server = TestServer::start();
    arbor_json(&server, &["create", "-p", "/app/config/db", "url=x"]);
    arbor_json(
        &server,
        &[
            "create",
            "--acl",
            "world:anyone:rwa",
            "/app/shared",
            "frozen",
        ],
    );
    let dir = arbor_tests::fresh_data_dir();
    let backup = dir.join("b.snap");
    let backup_text = backup.to_string_lossy().into_owned();
    let made = arbor_json(&server, &["backup", &backup_text]);
    assert_eq!(made["nodes"], 5);
    let restored = Command::new(arbor_tests::arbord_path())
        .arg("restore")
        .arg(&backup)
        .arg("--data-dir")
        .arg(dir.join("restored"))
        .output()
        .expect("arbord runs");
    assert!(
        restored.status.success(),
        "{}",
        String::from_utf8_lossy(&restored.stderr)
    );

    let export = dir.join("app.json");
    let export_text = export.to_string_lossy().into_owned();
    assert_eq!(
        arbor_json(&server, &["export", "/app", &export_text])["nodes"],
        4
    );
    let imported = arbor_json(&server, &["import", &export_text, "--to", "/copy"]);
    assert_eq!(imported["created"], 4);
    assert_eq!(
        stdout(&arbor(&server, &["get", "/copy/config/db"])),
        "url=x\n"
    );
    assert_eq!(
        stdout(&arbor(&server, &["getacl", "/copy/shared"])),
        "world:anyone:rwa\n"
    );
    let again = arbor(&server, &["import", &export_text, "--to", "/copy"]);
    assert_eq!(again.status.code(), Some(5), "{}", stderr(&again));
    let replaced = arbor_json(
        &server,
        &["import", &export_text, "--to", "/copy", "--overwrite"],
    );
    assert_eq!(replaced["replaced"], 4);
    let _ = std::fs::remove_dir_all(dir);
}
