//! `arbord --config FILE` as an operator runs it: the file's settings are
//! in force, a flag wins over the file, an unknown key stops the start
//! with its name, and SIGHUP applies the connection limits while naming
//! what it ignored.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use arbor_tests::{fresh_data_dir, TestServer, TEST_TICK_MS};

fn write_config(dir: &Path, text: &str) -> String {
    let path = dir.join("arbor.toml");
    std::fs::write(&path, text).expect("config written");
    path.to_string_lossy().into_owned()
}

fn conf(server: &TestServer) -> serde_json::Value {
    let (status, body) = server.admin_get("/commands/conf");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("JSON")
}

// Proves the file's keys are in force and the harness's flags (here
// --tick-ms) win over the same keys in the file.
#[test]
fn the_files_settings_are_in_force_and_flags_win() {
    let dir = fresh_data_dir();
    let path = write_config(
        &dir,
        "snap_retain = 7\nmax_connections_per_ip = 3\n4lw = \"*\"\ntick_ms = 333\n",
    );
    let server = TestServer::start_with(&["--config", &path]);
    let conf = conf(&server);
    assert_eq!(conf["snap_retain"], 7);
    assert_eq!(conf["max_connections_per_ip"], 3);
    assert_eq!(conf["tick_ms"], TEST_TICK_MS);
    assert!(
        conf["4lw"].as_str().is_some_and(|w| w.contains("dump")),
        "{conf}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

// Proves a key arbord does not know stops it, named, with a failing exit.
#[test]
fn an_unknown_key_is_refused_by_name() {
    let dir = fresh_data_dir();
    let path = write_config(&dir, "tick_ms = 500\nmax_conections = 10\n");
    let output = Command::new(arbor_tests::arbord_path())
        .args(["--config", &path, "--data-dir"])
        .arg(dir.join("data"))
        .output()
        .expect("arbord runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown key `max_conections`"), "{stderr}");
    assert!(stderr.contains(&path), "{stderr}");
    assert!(!dir.join("data").exists(), "nothing was started");
    let _ = std::fs::remove_dir_all(dir);
}

// Proves SIGHUP takes the new connection limits at once, leaves a key that
// needs a restart as it was, and names it in the log.
#[test]
fn sighup_reloads_the_limits_and_names_what_it_ignored() {
    let dir = fresh_data_dir();
    let path = write_config(&dir, "max_connections_per_ip = 3\nsnap_retain = 4\n");
    let server = TestServer::start_with(&["--config", &path]);
    assert_eq!(conf(&server)["max_connections_per_ip"], 3);
    write_config(&dir, "max_connections_per_ip = 9\nsnap_retain = 6\n");
    let hup = Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .expect("kill runs");
    assert!(hup.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while conf(&server)["max_connections_per_ip"] != 9 {
        assert!(Instant::now() < deadline, "the limit was not reloaded");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(conf(&server)["snap_retain"], 4, "needs a restart");
    let line = server.wait_for_log(&["take a restart", "snap_retain"]);
    assert!(!line.contains("max_connections_per_ip"), "{line}");
    let _ = std::fs::remove_dir_all(dir);
}
