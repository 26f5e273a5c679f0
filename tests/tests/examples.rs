//! The lock examples (`examples/batch_workers.rs`, also in its `--queue`
//! mode, and `examples/fencing.rs`) run against a real server and show what
//! they claim to show.

use std::process::{Command, Output};

use arbor_client::CreateMode;
use arbor_tests::{client, example, TestServer};

/// Runs an example against `server`; returns its stdout once it succeeded.
fn run(name: &str, server: &TestServer, args: &[&str]) -> String {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(example(name))
        .args(["--server", server.addr()])
        .args(args)
        .env_remove("ARBOR_SERVER")
        .output()
        .expect("example runs");
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    assert!(
        status.success(),
        "{name} failed ({status})\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&stderr)
    );
    stdout
}

/// The value of `key=` in a `k=v k=v` line.
fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
        .parse()
        .expect("a number")
}

#[test]
fn batch_workers_do_every_job_once_with_no_double_grant() {
    // Proves: concurrent workers finish exactly the requested jobs, never two on one job, over a previous run's leftovers.
    let server = TestServer::start();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let admin = client(&server).await;
        for path in [
            "/batch",
            "/batch/jobs",
            "/batch/jobs/job-000003",
            "/batch/jobs/job-000003/x",
        ] {
            admin
                .create(path, b"left over".to_vec(), CreateMode::Persistent)
                .await
                .expect("leftover created");
        }
        admin.close().await.expect("closed");
    });

    let stdout = run(
        "batch_workers",
        &server,
        &["--workers", "4", "--jobs", "40"],
    );
    let last = stdout.lines().last().expect("a summary line");
    assert!(last.starts_with("jobs="), "last line: {last:?}\n{stdout}");
    assert_eq!(field(last, "jobs"), 40, "{stdout}");
    assert_eq!(field(last, "double_grants"), 0, "{stdout}");
    assert_eq!(field(last, "stale_writes_rejected"), 0, "{stdout}");

    runtime.block_on(async {
        let admin = client(&server).await;
        assert_eq!(
            admin.get_children("/batch/jobs").await.expect("listed"),
            Vec::<String>::new(),
            "every job left the queue"
        );
    });
}

#[test]
fn batch_workers_in_queue_mode_lose_no_job_and_do_none_twice() {
    // Proves: jobs taken from the distributed queue, each result written by the fenced transaction that completes it, leave exactly one result per job in Arbor and an empty queue.
    let server = TestServer::start();
    let stdout = run(
        "batch_workers",
        &server,
        &["--queue", "--workers", "4", "--jobs", "40"],
    );
    let last = stdout.lines().last().expect("a summary line");
    assert!(last.starts_with("jobs="), "last line: {last:?}\n{stdout}");
    assert_eq!(field(last, "jobs"), 40, "{stdout}");
    assert_eq!(field(last, "lost_jobs"), 0, "{stdout}");
    assert_eq!(field(last, "duplicate_jobs"), 0, "{stdout}");
    assert_eq!(field(last, "double_grants"), 0, "{stdout}");

    runtime_block_on(async {
        let admin = client(&server).await;
        let mut results = admin
            .get_children("/batch/results")
            .await
            .expect("results listed");
        results.sort();
        let jobs: Vec<String> = results
            .iter()
            .map(|r| r.rsplit_once('-').expect("<job>-<seq>").0.to_owned())
            .collect();
        let expected: Vec<String> = (0..40).map(|i| format!("job-{i:06}")).collect();
        assert_eq!(jobs, expected, "one result per job, read back from Arbor");
        assert_eq!(
            admin
                .get_children("/batch/queue/items")
                .await
                .expect("listed"),
            Vec::<String>::new(),
            "every job left the queue"
        );
    });
}

fn runtime_block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(future)
}

#[test]
fn fencing_rejects_the_paused_holder_and_a_plain_store_loses_the_update() {
    // Proves: after A's session expires mid-pause and B takes the lock, the fence refuses A's late write, and without it A overwrites B.
    let server = TestServer::start();
    let stdout = run("fencing", &server, &["--session-timeout-ms", "1000"]);
    let lines: Vec<&str> = stdout.lines().collect();
    let [.., with, without] = lines[..] else {
        panic!("too little output:\n{stdout}");
    };
    assert_eq!(
        with, "with fence: stale write rejected, final value from B",
        "{stdout}"
    );
    assert_eq!(
        without, "without fence: lost update, final value from A",
        "{stdout}"
    );
    // Both runs show the timeline: A's grant, B's newer grant, A's late write.
    let tokens = |who: &str| -> Vec<u64> {
        lines
            .iter()
            .filter_map(|l| l.split_once(&format!(" {who} acquired lock, token 0x")))
            .map(|(_, rest)| {
                let hex: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
                u64::from_str_radix(&hex, 16).expect("hex token")
            })
            .collect()
    };
    let (a, b) = (tokens("A"), tokens("B"));
    assert_eq!((a.len(), b.len()), (2, 2), "{stdout}");
    assert!(a[0] < b[0] && a[1] < b[1], "B's tokens are newer: {stdout}");
    assert!(
        stdout.contains("REJECTED by the fence"),
        "the fenced run refuses A:\n{stdout}"
    );
    assert!(
        lines.iter().all(|l| l.is_empty()
            || l.starts_with('+')
            || l.starts_with("==")
            || l.starts_with("with")),
        "timeline lines carry their offset:\n{stdout}"
    );
}

#[test]
fn leader_election_hands_over_to_each_next_candidate_with_growing_tokens() {
    // Killing each leader in turn makes the next candidate lead, seen by the observer.
    let server = TestServer::start();
    let out = run("leader_election", &server, &["--candidates", "4"]);
    for i in 0..4 {
        assert!(
            out.contains(&format!("candidate-{i} leads with token"))
                && out.contains(&format!("the observer sees candidate-{i}")),
            "candidate-{i} never led: {out}"
        );
    }
    assert_eq!(
        out.lines().last(),
        Some("takeovers=3 tokens_increasing=true"),
        "{out}"
    );
}
