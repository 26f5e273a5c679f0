//! How `arbord` sets up its own process.

use arbor_tests::TestServer;

/// The `THP_enabled:` line of a process's status, where the kernel shows it
/// (Linux 5.0 on); `None` where it does not.
fn thp_enabled(pid: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("THP_enabled:"))
        .map(|value| value.trim().to_owned())
}

// Proves arbord turns transparent huge pages off for itself: with them, the
// allocator's arenas became resident 2 MiB at a time (a small tree cost four
// times its RSS per znode) and page compaction sat in the write tail.
#[test]
fn arbord_runs_without_transparent_huge_pages() {
    if thp_enabled("self").is_none() {
        eprintln!("this kernel does not report THP_enabled; nothing to check");
        return;
    }
    let server = TestServer::start();
    assert_eq!(
        thp_enabled(&server.pid().to_string()).as_deref(),
        Some("0"),
        "arbord's status should say THP_enabled: 0"
    );
}
