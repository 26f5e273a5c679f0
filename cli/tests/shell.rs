//! End-to-end tests of `arbor shell` against a real `arbord`: with a script
//! piped into its stdin (no terminal, so no prompt and no history file), and
//! on a pseudo-terminal, as a person types at it.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use arbor_tests::TestServer;
use common::Terminal;

/// Starts `arbor --server <server> shell [flags]` with piped stdio (the
/// global flags may come after `shell` too).
fn spawn_shell(server: &TestServer, flags: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["--server", server.addr(), "shell"])
        .args(flags)
        // Were a history file written, it would land here, not in $HOME.
        .env("ARBOR_HISTORY", "/nonexistent/arbor-shell-test-history")
        // Only what a test passes proves an id.
        .env_remove("ARBOR_AUTH")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the arbor binary runs")
}

/// Runs the shell with `script` as its whole input.
fn shell(server: &TestServer, flags: &[&str], script: &str) -> Output {
    let mut child = spawn_shell(server, flags);
    let mut input = child.stdin.take().expect("stdin is piped");
    input
        .write_all(script.as_bytes())
        .expect("the shell reads its stdin");
    drop(input);
    child.wait_with_output().expect("the shell finishes")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("output is UTF-8")
}

fn send(stdin: &mut ChildStdin, line: &str) {
    stdin
        .write_all(format!("{line}\n").as_bytes())
        .expect("the shell reads its stdin");
    stdin.flush().expect("the line reaches the shell");
}

// Proves a piped script runs with --keep-going: cd/pwd, relative paths, quoting, errors (each naming its line) that do not stop it, exit, and the first failure's exit code at the end.
#[test]
fn script_with_cd_relative_paths_and_errors() {
    let server = TestServer::start();
    let script = "\
create /app hello
create /app/x 'two  words'
create /app/sub
# a comment line is skipped
create /app/sub/leaf 1
cd /app
pwd
ls
get x
get nope
cd sub
pwd
ls
cd ..
get ./sub/../x
cd ../..
pwd
cd /missing
pwd
get 'unterminated
bogus
delete
cd app
create -s job-
exit
ls /
";
    let output = shell(&server, &["--keep-going"], script);
    let stdout = text(&output.stdout);
    let stderr = text(&output.stderr);
    // The first failure is `get nope`: no node.
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    // The relative sequential create is the last output: `ls /` after `exit` never ran.
    let (stdout, created) = stdout
        .trim_end()
        .rsplit_once('\n')
        .expect("several lines of output");
    assert!(created.starts_with("/app/job-"), "{created}");
    assert_eq!(
        format!("{stdout}\n"),
        "/app\n/app/x\n/app/sub\n/app/sub/leaf\n\
         /app\nsub\nx\ntwo  words\n\
         /app/sub\nleaf\n\
         two  words\n\
         /\n/\n",
        "stderr: {stderr}"
    );
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("arbor: "))
        .collect();
    assert_eq!(
        errors,
        [
            "arbor: line 10: no node (/app/nope)",
            "arbor: line 18: no node (/missing)",
            "arbor: line 20: unterminated ' quote",
            "arbor: line 21: unrecognized subcommand 'bogus'",
            "arbor: line 22: the following required arguments were not provided:",
        ],
        "{stderr}"
    );
    assert!(
        stderr.contains("<PATH>"),
        "a bare delete needs its path: {stderr}"
    );
}

// Proves a piped script stops at its first failing line with that line's exit code and number, running nothing after it; usage errors stop it too (2), and with --json the error document names the line.
#[test]
fn script_stops_at_the_first_failure() {
    let server = TestServer::start();
    let output = shell(&server, &[], "create /s1\n\nget /nope\ncreate /s2\n");
    assert_eq!(output.status.code(), Some(4), "{output:?}");
    assert_eq!(text(&output.stdout), "/s1\n");
    assert_eq!(text(&output.stderr), "arbor: line 3: no node (/nope)\n");
    assert_eq!(
        root_children(&server),
        ["s1"],
        "nothing ran after the failure"
    );

    let output = shell(&server, &[], "create /s3\nbogus\ncreate /s4\n");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with("arbor: line 2: unrecognized subcommand 'bogus'"),
        "{stderr}"
    );
    let output = shell(&server, &[], "create /s5 'open\ncreate /s6\n");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert_eq!(
        text(&output.stderr),
        "arbor: line 1: unterminated ' quote\n"
    );
    assert_eq!(root_children(&server), ["s1", "s3"]);

    let output = shell(&server, &["--json"], "create /s1\ncreate /s7\n");
    assert_eq!(output.status.code(), Some(5), "{output:?}");
    let document: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("one JSON error document");
    assert_eq!(document["error"]["code"], "NodeExists");
    assert_eq!(document["error"]["line"], 1);
    assert_eq!(root_children(&server), ["s1", "s3"]);

    // A script that fails nowhere exits 0; so does one whose failure
    // comes after its `exit`.
    let output = shell(&server, &[], "create /s8\nexit\nget /nope\n");
    assert!(output.status.success(), "{output:?}");
}

// Proves with --json every answer, errors included (with their line), is one JSON document on stdout.
#[test]
fn json_mode_prints_documents() {
    let server = TestServer::start();
    let output = shell(
        &server,
        &["--json", "--keep-going"],
        "create /a\ncd a\npwd\nget nope\nls\n",
    );
    assert_eq!(output.status.code(), Some(4), "{output:?}");
    let documents: Vec<serde_json::Value> = text(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON document per line"))
        .collect();
    assert_eq!(documents.len(), 5, "{documents:?}");
    assert_eq!(documents[0]["path"], "/a");
    assert_eq!(documents[1]["path"], "/a");
    assert_eq!(documents[2]["path"], "/a");
    assert_eq!(documents[3]["error"]["code"], "NoNode");
    assert_eq!(documents[3]["error"]["line"], 4);
    assert_eq!(documents[4]["path"], "/a");
    assert_eq!(documents[4]["children"], serde_json::json!([]));
}

// Proves Ctrl-C stops a running `watch` and the shell goes on with the next line.
#[test]
fn ctrl_c_ends_watch_not_the_shell() {
    let server = TestServer::start();
    let mut child = spawn_shell(&server, &[]);
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    send(&mut stdin, "create /w");
    send(&mut stdin, "cd /w");
    send(&mut stdin, "watch");
    let next = |what: &str| {
        received
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{what} within 10 s"))
            .expect("stdout is UTF-8")
    };
    assert_eq!(next("the create"), "/w");
    // The watch may not be set yet: change the node until it reports.
    let mut event = None;
    for attempt in 0..50 {
        let set = Command::new(env!("CARGO_BIN_EXE_arbor"))
            .args(["--server", server.addr(), "set", "/w", &attempt.to_string()])
            .output()
            .expect("arbor set runs");
        assert!(set.status.success(), "{set:?}");
        if let Ok(line) = received.recv_timeout(Duration::from_millis(200)) {
            event = Some(line.expect("stdout is UTF-8"));
            break;
        }
    }
    let event = event.expect("a watch event");
    assert!(event.starts_with("NodeDataChanged /w "), "{event}");
    let interrupted = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(interrupted.success());
    send(&mut stdin, "pwd");
    assert_eq!(next("pwd after the watch"), "/w");
    drop(stdin);
    let status = child.wait().expect("the shell finishes");
    assert!(status.success(), "{status:?}");
}

// Proves the ACL commands run in the shell on the session of --auth: getacl of a relative path and of the working node, setacl, whoami.
#[test]
fn acl_commands_with_relative_paths() {
    let server = TestServer::start();
    let script = "\
create --acl world:anyone:cdra /app
create /app/x
cd app
getacl x
setacl x auth::cdrwa
getacl x
getacl
whoami
";
    let output = shell(&server, &["--auth", "alice:secret"], script);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    let alice = "alice:aYXlLOpEooaV1cRAvUL1fp9Qt7E=";
    assert_eq!(
        text(&output.stdout),
        format!(
            "/app\n/app/x\n\
             world:anyone:cdrwa\n\
             1\n\
             digest:{alice}:cdrwa\n\
             world:anyone:cdra\n\
             ip:127.0.0.1\ndigest:{alice}\n"
        ),
        "stderr: {stderr}"
    );
}

/// `arbor --server <server> shell` on a pty, once its first prompt is shown.
fn shell_on_terminal(server: &TestServer) -> Terminal {
    let mut command = Command::new(env!("CARGO_BIN_EXE_arbor"));
    command
        .args(["--server", server.addr(), "shell"])
        .env("ARBOR_HISTORY", "/nonexistent/arbor-shell-test-history")
        .env_remove("ARBOR_AUTH");
    let terminal = Terminal::spawn(&mut command);
    terminal.wait_for("/> ", 1);
    terminal
}

/// The data at `path` as a one-shot `arbor get` prints it (empty if none).
fn get(server: &TestServer, path: &str) -> String {
    let got = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["--server", server.addr(), "get", path])
        .output()
        .expect("arbor get runs");
    text(&got.stdout)
}

/// The children of the root, asked with a one-shot `arbor ls /`.
fn root_children(server: &TestServer) -> Vec<String> {
    let listed = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["--server", server.addr(), "ls", "/"])
        .output()
        .expect("arbor ls runs");
    assert!(listed.status.success(), "{listed:?}");
    text(&listed.stdout).lines().map(str::to_owned).collect()
}

// Proves several lines arriving in one read at a terminal (a paste, or keys typed while a command runs), and a bracketed paste of several lines, all run, in order, a failing one included.
#[test]
fn pasted_lines_on_a_terminal_all_run() {
    let server = TestServer::start();
    let mut terminal = shell_on_terminal(&server);
    // One write: the line editor reads it all at once, past the first Enter.
    // A failing line does not stop a terminal's shell.
    terminal.type_in(b"create /p1\nget /nope\ncreate /p2 a\nset /p2 b\ncreate /p3\n");
    // A bracketed paste (as terminals send one) is one entry with newlines
    // in it, accepted by the Enter after it.
    terminal.type_in(b"\x1b[200~create /p4\rset /p4 c\r\x1b[201~\r");
    // Give every line time to run before leaving (the prompt is redrawn
    // as keys are echoed, so the screen cannot tell).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while get(&server, "/p4") != "c\n" && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    terminal.type_in(b"exit\n");
    let status = terminal.wait();
    assert!(status.success(), "{status:?}: {}", terminal.screen());
    assert!(
        terminal.screen().contains("no node (/nope)"),
        "{}",
        terminal.screen()
    );
    assert_eq!(root_children(&server), ["p1", "p2", "p3", "p4"]);
    assert_eq!(get(&server, "/p2"), "b\n", "the set ran after its create");
    assert_eq!(
        get(&server, "/p4"),
        "c\n",
        "the pasted set ran after its create"
    );
}
