//! arbord's ZooKeeper port across a failover: a ZooKeeper client that is
//! not ours (the `zookeeper-client` crate), given every member's ZooKeeper
//! port, is connected to the leader of a 3-member ensemble when the leader
//! is killed with SIGKILL. What ZooKeeper promises such a client must hold:
//! it comes back on another member with the same session, its ephemeral is
//! still there, what it wrote before reads back, it can write again, and the
//! one-shot data watch it set before the kill fires on the next change (the
//! client sets it again on the new connection; no event is lost).

use std::time::{Duration, Instant};

use arbor_tests::TestEnsemble;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_client as zk;

/// The longest session the members grant: 20 ticks of 500 ms. A failover
/// takes well under it, so the session outlives the election.
const TICK_MS: &str = "500";
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// How long any one wait may take.
const SOON: Duration = Duration::from_secs(20);

/// Sessions opened, at most, until one is served by the leader. The crate
/// shuffles its connect string, so each lands on the leader one time in
/// three: all of them missing has odds of (2/3)^40, about 1 in 10^7.
const CONNECT_ATTEMPTS_MAX: usize = 40;

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(SOON, future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within {SOON:?}"))
}

/// The answer to a four-letter word at `addr`.
async fn four_letter_word(addr: &str, word: &str) -> String {
    within(&format!("{word} at {addr}"), async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("the member's ZooKeeper port takes the connection");
        stream.write_all(word.as_bytes()).await.expect("sends");
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .await
            .expect("a text answer");
        answer
    })
    .await
}

/// The member (from 1, of those in `among`) whose `cons` lists `session`.
async fn serving_member(
    ensemble: &TestEnsemble,
    among: &[u64],
    session: zk::SessionId,
) -> Option<u64> {
    let sid = format!("sid={:#x}", session.0 as u64);
    for &id in among {
        let addr = ensemble.members[id as usize - 1].zk_addr();
        if four_letter_word(addr, "cons").await.contains(&sid) {
            return Some(id);
        }
    }
    None
}

/// A client given every member's port whose session the leader serves.
async fn client_on_the_leader(ensemble: &TestEnsemble, leader: u64) -> zk::Client {
    let members: Vec<u64> = (1..=ensemble.members.len() as u64).collect();
    let connect_string = ensemble.zk_addrs();
    for _ in 0..CONNECT_ATTEMPTS_MAX {
        let connecting = zk::Client::connector()
            .with_session_timeout(SESSION_TIMEOUT)
            .connect(&connect_string);
        let client = within("a ZooKeeper session", connecting)
            .await
            .expect("a ZooKeeper client connects to the ensemble");
        // Another member's session is dropped (closed) and we try again.
        if serving_member(ensemble, &members, client.session_id()).await == Some(leader) {
            return client;
        }
    }
    panic!("no session of {CONNECT_ATTEMPTS_MAX} landed on the leader");
}

/// Runs `write` until it is done, while the ensemble has no leader (the
/// port answers ConnectionLoss) or the request times out or the connection
/// is lost with it in flight; `done` is the error that says an earlier try
/// took.
async fn until_written<T, F, Fut>(what: &str, done: Option<zk::Error>, mut write: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, zk::Error>>,
{
    let deadline = Instant::now() + SOON;
    loop {
        assert!(
            Instant::now() < deadline,
            "{what}: not written within {SOON:?}"
        );
        match write().await {
            Ok(_) => return,
            Err(err) if Some(&err) == done.as_ref() => return,
            Err(zk::Error::Timeout | zk::Error::ConnectionLoss) => {
                // Back off while the members elect; there is no event to await.
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(err) => panic!("{what}: {err}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_session_rides_out_the_death_of_its_leader() {
    let mut ensemble = TestEnsemble::start_with(3, &["--tick-ms", TICK_MS, "--4lw", "cons"]);
    let leader = ensemble.wait_for_leader(None);
    let client = client_on_the_leader(&ensemble, leader).await;
    let session = client.session_id();
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    client
        .create("/config", b"before", &persistent)
        .await
        .expect("created");
    client
        .create("/worker", b"", &ephemeral)
        .await
        .expect("an ephemeral");
    let (_, _, watcher) = client
        .get_and_watch_data("/config")
        .await
        .expect("a data watch");
    let mut state = client.state_watcher();
    assert_eq!(state.state(), zk::SessionState::SyncConnected);

    ensemble.member(leader).kill();
    // Its server gone, the client is disconnected, then connected to
    // another member. (The state channel keeps only the latest state, so a
    // quick reconnect may show as SyncConnected alone.)
    let reconnected = async {
        loop {
            match state.changed().await {
                zk::SessionState::SyncConnected => break,
                zk::SessionState::Disconnected => {}
                other => panic!("the session ended: {other:?}"),
            }
        }
    };
    within("the reconnect to another member", reconnected).await;
    assert_eq!(client.session_id(), session, "the same session");
    let survivors: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    assert!(
        serving_member(&ensemble, &survivors, session)
            .await
            .is_some(),
        "a surviving member serves the session"
    );

    let (data, _) = client.get_data("/config").await.expect("read");
    assert_eq!(data, b"before", "written before the kill, read after");
    let owner = client
        .check_stat("/worker")
        .await
        .expect("exists")
        .expect("the ephemeral outlived its member")
        .ephemeral_owner;
    assert_eq!(owner, session.0);

    // A write after the failover, through the new leader, fires the watch
    // set before it.
    until_written("set /config", None, || {
        client.set_data("/config", b"after", None)
    })
    .await;
    let event = within("the data watch", watcher.changed()).await;
    assert_eq!(
        (event.event_type, event.path.as_str()),
        (zk::EventType::NodeDataChanged, "/config")
    );
    until_written("create /after", Some(zk::Error::NodeExists), || {
        client.create("/after", b"", &persistent)
    })
    .await;
    let (data, _) = client.get_data("/config").await.expect("read");
    assert_eq!(data, b"after");
    assert!(client.check_stat("/after").await.expect("exists").is_some());
}
