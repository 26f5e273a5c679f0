//! A client rides out a server restart: within the session timeout it
//! resumes its session, ephemerals, watches and lock; past it, the session
//! expires, the lock goes to the next waiter with a larger token.

use std::time::Duration;

use arbor_client::recipes::Mutex;
use arbor_client::{Client, ClientOptions, ConnectionState, CreateMode, EventType};
use arbor_tests::{client, wait_for_state, TempDir, TestServer};

async fn connect(server: &TestServer, timeout_ms: u64) -> Client {
    let options = ClientOptions::default().with_session_timeout(Duration::from_millis(timeout_ms));
    Client::connect(server.addr(), options)
        .await
        .expect("connects")
}

#[tokio::test]
async fn a_restart_within_the_timeout_keeps_session_ephemerals_watches_and_lock() {
    let dir = TempDir::new();
    let mut server = TestServer::start_in(dir.path(), &[]);
    let c = connect(&server, 4000).await;
    let session = c.session_id();
    c.create("/mine", Vec::new(), CreateMode::Ephemeral)
        .await
        .expect("created");
    let (stat, born) = c.exists_watch("/later").await.expect("armed");
    assert!(stat.is_none());
    let guard = Mutex::new(&c, "/locks/r").lock().await.expect("granted");
    let token = guard.fencing_token();
    let mut states = c.state_changes();

    server.kill();
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() fires");
    assert_eq!(lost, ConnectionState::Suspended);
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart();
    wait_for_state(&c, ConnectionState::Reconnected).await;
    assert_eq!(states.next().await, Some(ConnectionState::Suspended));
    assert_eq!(states.next().await, Some(ConnectionState::Reconnected));

    assert_eq!(c.session_id(), session);
    let mine = c
        .exists("/mine")
        .await
        .expect("checked")
        .expect("the ephemeral survived");
    assert_eq!(mine.ephemeral_owner, session);
    let lock_node = c
        .exists(guard.node())
        .await
        .expect("checked")
        .expect("the lock node survived");
    assert_eq!(lock_node.czxid, token);
    let other = client(&server).await;
    other
        .create("/later", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    let event = tokio::time::timeout(Duration::from_secs(5), born)
        .await
        .expect("fires")
        .expect("event");
    assert_eq!(
        event.event_type,
        EventType::NodeCreated,
        "the watch was re-registered"
    );
    guard.release().await.expect("released");
}

#[tokio::test]
async fn a_restart_after_the_timeout_expires_the_session_and_hands_the_lock_on() {
    let dir = TempDir::new();
    let mut server = TestServer::start_in(dir.path(), &[]);
    let holder = connect(&server, 1000).await;
    let waiter = connect(&server, 4000).await;
    let guard = Mutex::new(&holder, "/locks/x")
        .lock()
        .await
        .expect("granted");
    let token = guard.fencing_token();
    let next = tokio::spawn({
        let lock = Mutex::new(&waiter, "/locks/x");
        async move { lock.lock().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;

    server.kill();
    // Down longer than the holder's timeout, shorter than the waiter's.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.restart();
    wait_for_state(&holder, ConnectionState::Expired).await;
    assert!(!guard.lost().await.is_connected());
    let granted = tokio::time::timeout(Duration::from_secs(10), next)
        .await
        .expect("the waiter gets the lock")
        .expect("joins")
        .expect("granted");
    assert!(
        granted.fencing_token() > token,
        "a larger token: {} after {token}",
        granted.fencing_token()
    );
    assert!(
        waiter
            .exists(guard.node())
            .await
            .expect("checked")
            .is_none(),
        "the old lock node is gone"
    );
    assert!(matches!(
        holder.exists("/").await,
        Err(arbor_client::Error::SessionExpired)
    ));
}

#[tokio::test]
async fn servers_that_accept_but_never_answer_do_not_cost_the_session() {
    // Two "hung" servers (they accept TCP, as a stopped process's kernel
    // does, and never answer) before the real one: resuming gives each
    // its share of what is left of the session timeout, so the real one
    // is still reached in time. One hung server may not eat it all.
    let hung: Vec<std::net::TcpListener> = (0..2)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("binds"))
        .collect();
    let dir = TempDir::new();
    let mut server = TestServer::start_in(dir.path(), &[]);
    let mut addrs: Vec<String> = hung
        .iter()
        .map(|l| l.local_addr().expect("bound").to_string())
        .collect();
    addrs.push(server.addr().to_owned());
    let options = ClientOptions::default()
        .with_session_timeout(Duration::from_millis(4000))
        .with_connect_timeout(Duration::from_secs(2));
    let c = Client::connect(&addrs.join(","), options)
        .await
        .expect("connects");
    let session = c.session_id();

    server.restart();
    wait_for_state(&c, ConnectionState::Reconnected).await;
    assert_eq!(c.session_id(), session);
    assert_eq!(c.connected_server().as_deref(), Some(server.addr()));
}
