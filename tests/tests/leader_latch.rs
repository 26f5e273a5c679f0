//! `LeaderLatch` against real `arbord` processes: one latch of several
//! leads; a closed leader hands over; a leader whose session survives a
//! server restart leads again with the same token (keeping its place); a
//! leader frozen past its session timeout stops leading, and its fenced
//! write is refused once a successor leads.

use std::time::Duration;

use arbor_client::recipes::{Election, FencedError, LatchState, LeaderLatch};
use arbor_client::{Client, ClientOptions, CreateMode};
use arbor_tests::{client, TempDir, TestServer};

/// How long a latch may take to reach a state.
const STATE_WAIT: Duration = Duration::from_secs(10);

async fn connect(server: &TestServer, session: Duration) -> Client {
    let options = ClientOptions::default().with_session_timeout(session);
    Client::connect(server.addr(), options)
        .await
        .expect("connects")
}

/// Waits until `latch`'s state satisfies `done`.
async fn until(latch: &LeaderLatch, what: &str, done: impl Fn(&LatchState) -> bool) -> LatchState {
    let mut changes = latch.changes();
    let waited = tokio::time::timeout(STATE_WAIT, async {
        loop {
            let state = changes.borrow_and_update().clone();
            if done(&state) {
                return state;
            }
            changes.changed().await.expect("the latch task reports");
        }
    })
    .await;
    waited.unwrap_or_else(|_| panic!("{what}: still {:?}", latch.state()))
}

fn leaders(latches: &[&LeaderLatch]) -> usize {
    latches.iter().filter(|latch| latch.is_leader()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_three_leads_and_a_closed_leader_hands_over() {
    let server = TestServer::start();
    let (a, b, c) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let path = "/latch/handover";
    let first = LeaderLatch::start(&Election::new(&a, path), "a");
    let token = tokio::time::timeout(STATE_WAIT, first.wait_leader())
        .await
        .expect("the first leads in time")
        .expect("the first leads");
    // Queued one after the other, so the second is next in line.
    let queued = |count: usize| {
        let a = a.clone();
        async move {
            tokio::time::timeout(STATE_WAIT, async {
                while a.get_children(path).await.expect("listed").len() < count {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("{count} candidates queued in time"));
        }
    };
    let second = LeaderLatch::start(&Election::new(&b, path), "b");
    queued(2).await;
    let third = LeaderLatch::start(&Election::new(&c, path), "c");
    queued(3).await;
    let election = Election::new(&a, path);
    assert_eq!(leaders(&[&first, &second, &third]), 1);
    assert!(matches!(second.state(), LatchState::Waiting));

    tokio::time::timeout(STATE_WAIT, first.close())
        .await
        .expect("close in time")
        .expect("resigned");
    let next = tokio::time::timeout(STATE_WAIT, second.wait_leader())
        .await
        .unwrap_or_else(|_| panic!("the second leads next: {:?}", second.state()))
        .expect("the second leads next");
    assert!(next > token, "tokens grow: {next} after {token}");
    assert_eq!(leaders(&[&second, &third]), 1);
    let leader = election.leader().await.expect("read").expect("a leader");
    assert_eq!(leader.value, b"b");
    assert!(matches!(third.state(), LatchState::Waiting));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_session_leads_again_with_the_same_token() {
    let dir = TempDir::new();
    let mut server = TestServer::start_in(dir.path(), &[]);
    let (a, b) = (
        connect(&server, Duration::from_secs(10)).await,
        connect(&server, Duration::from_secs(10)).await,
    );
    let path = "/latch/resume";
    let leader = LeaderLatch::start(&Election::new(&a, path), "a");
    let token = leader.wait_leader().await.expect("leads");
    let follower = LeaderLatch::start(&Election::new(&b, path), "b");
    until(&follower, "the follower queues", |s| {
        matches!(s, LatchState::Waiting)
    })
    .await;

    server.kill();
    until(&leader, "suspended", |s| matches!(s, LatchState::Suspended)).await;
    assert!(!leader.is_leader(), "a suspended leader does not lead");
    server.restart();
    let again = until(&leader, "leading again", LatchState::is_leading).await;
    assert!(
        matches!(again, LatchState::Leading { token: t, .. } if t == token),
        "{again:?}"
    );
    assert!(leader.is_leader());
    assert!(!follower.is_leader());
}

#[test]
fn a_frozen_leader_stops_leading_and_its_fenced_write_is_refused() {
    // Short sessions: 2 ticks of 100 ms.
    let server = TestServer::start_with(&["--tick-ms", "100"]);
    let addr = server.addr().to_owned();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let path = "/latch/frozen";
    // Writes go through a client on this runtime, which runs on while the
    // leader's is frozen: its session outlives the pause.
    let data_client = runtime.block_on(async {
        let data_client = connect(&server, Duration::from_secs(10)).await;
        data_client
            .create("/config", b"v0".to_vec(), CreateMode::Persistent)
            .await
            .expect("created");
        data_client
    });

    // The leader runs on a runtime of its own, on its own thread, so a
    // blocking sleep freezes it entirely (heartbeats included).
    let (frozen_tx, frozen_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let leader_data_client = data_client.clone();
    let leader_thread = std::thread::spawn(move || {
        let data_client = leader_data_client;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let options = ClientOptions::default().with_session_timeout(Duration::from_millis(200));
            let lock_client = Client::connect(&addr, options).await.expect("connects");
            let latch = LeaderLatch::start(&Election::new(&lock_client, path), "frozen");
            latch.wait_leader().await.expect("leads first");
            let fenced = latch.fenced().expect("leading").via(&data_client);
            fenced
                .clone()
                .set_data("/config", b"v1".to_vec(), None)
                .commit()
                .await
                .expect("a leader's fenced write lands");
            frozen_tx.send(()).expect("the test waits");
            // Frozen past the session timeout, like a long GC pause.
            std::thread::sleep(Duration::from_millis(1500));
            // Woken: the test lets a successor lead first.
            go_rx.recv().expect("the test says go");
            let refused = fenced
                .set_data("/config", b"stale".to_vec(), None)
                .commit()
                .await;
            let unfenced = data_client
                .set_data("/config", b"unfenced".to_vec(), None)
                .await;
            let ended = until(&latch, "the frozen latch ends", |s| {
                matches!(s, LatchState::Ended(_))
            })
            .await;
            (refused, unfenced.is_ok(), ended, latch.is_leader())
        })
    });

    frozen_rx.recv().expect("the leader leads");
    runtime.block_on(async {
        let successor_client = client(&server).await;
        let successor = LeaderLatch::start(&Election::new(&successor_client, path), "next");
        successor.wait_leader().await.expect("a successor leads");
        go_tx.send(()).expect("the leader waits");
        let (refused, unfenced_landed, ended, still_leader) =
            leader_thread.join().expect("the leader thread ends");
        assert!(
            matches!(refused, Err(FencedError::GrantLost { .. })),
            "{refused:?}"
        );
        assert!(unfenced_landed, "the same write unfenced lands");
        assert!(
            matches!(ended, LatchState::Ended(ref err) if err.is_session_ended()),
            "{ended:?}"
        );
        assert!(!still_leader);
        assert!(successor.is_leader());
        let (data, _) = successor_client.get_data("/config").await.expect("read");
        assert_eq!(data, b"unfenced", "the refused write changed nothing");
    });
}
