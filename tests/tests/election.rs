//! Leader election against a real server: the first candidate leads, a dead
//! or resigning leader hands over to the next in line, observers see each
//! leader once, tokens grow, and a withdrawn candidacy leaves no node.

use std::time::Duration;

use arbor_client::recipes::{Election, LeaderInfo, Leadership};
use arbor_client::Client;
use arbor_tests::{client, listings, wait_for_children, TestServer};
use tokio::task::JoinHandle;

/// Long enough for a wrongly elected candidate to have been elected.
const SETTLE: Duration = Duration::from_millis(300);

fn campaign(client: &Client, path: &str, value: &'static str) -> JoinHandle<Leadership> {
    let election = Election::new(client, path);
    tokio::spawn(async move { election.campaign(value).await.expect("elected") })
}

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .unwrap_or_else(|_| panic!("{what} in time"))
}

#[tokio::test]
async fn the_first_of_three_candidates_leads_and_leader_reports_it() {
    // Only the first candidate is elected, and leader() names it with its value.
    let server = TestServer::start();
    let (a, b, c) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let election = Election::new(&a, "/election/first");
    assert_eq!(election.leader().await.expect("read"), None, "nobody yet");
    let leading = election.campaign("a").await.expect("elected");
    let second = campaign(&b, "/election/first", "b");
    let third = campaign(&c, "/election/first", "c");
    wait_for_children(&a, "/election/first", 3).await;
    tokio::time::sleep(SETTLE).await;
    assert!(!second.is_finished() && !third.is_finished(), "one leader");
    let leader = Election::new(&c, "/election/first")
        .leader()
        .await
        .expect("read")
        .expect("a leader");
    assert_eq!(
        leader,
        LeaderInfo {
            node: leading.node().to_owned(),
            value: b"a".to_vec(),
            token: leading.fencing_token(),
        }
    );
    second.abort();
    third.abort();
}

#[tokio::test]
async fn leadership_passes_on_death_and_resignation_as_observed() {
    // A closed leader's session and a resignation each elect the next, seen once by observe().
    let server = TestServer::start();
    let watcher = client(&server).await;
    let mut observer = Election::new(&watcher, "/election/svc").observe();
    let (a, b, c) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let first = within("a leads", Election::new(&a, "/election/svc").campaign("a"))
        .await
        .expect("elected");
    let second = campaign(&b, "/election/svc", "b");
    wait_for_children(&watcher, "/election/svc", 2).await;
    let third = campaign(&c, "/election/svc", "c");
    wait_for_children(&watcher, "/election/svc", 3).await;

    let seen = within("observed", observer.next()).await.expect("observed");
    assert_eq!(seen.value, b"a");
    assert_eq!(seen.token, first.fencing_token());

    // Kill the leader's session: its node goes, and the next candidate leads.
    a.close().await.expect("closed");
    let seen = within("observed", observer.next()).await.expect("observed");
    assert_eq!(seen.value, b"b");
    let second = within("b leads", second).await.expect("joins");
    assert_eq!(seen.token, second.fencing_token());
    assert!(
        second.fencing_token() > first.fencing_token(),
        "tokens grow"
    );
    tokio::time::sleep(SETTLE).await;
    assert!(!third.is_finished(), "c still waits behind b");

    let second_token = second.fencing_token();
    second.resign().await.expect("resigned");
    let seen = within("observed", observer.next()).await.expect("observed");
    assert_eq!(seen.value, b"c");
    let third = within("c leads", third).await.expect("joins");
    assert_eq!(seen.token, third.fencing_token());
    assert!(third.fencing_token() > second_token, "tokens grow");
    assert_eq!(
        Election::new(&watcher, "/election/svc")
            .leader()
            .await
            .expect("read"),
        Some(seen)
    );
    third.resign().await.expect("resigned");
    assert_eq!(
        Election::new(&watcher, "/election/svc")
            .leader()
            .await
            .expect("read"),
        None
    );
}

#[tokio::test]
async fn a_withdrawn_candidacy_leaves_no_node_and_skips_the_queue() {
    // Dropping a waiting campaign removes its node; the one behind it leads next.
    let server = TestServer::start();
    let (a, b, c) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let first = Election::new(&a, "/election/w")
        .campaign("a")
        .await
        .expect("elected");
    let withdrawn = campaign(&b, "/election/w", "b");
    wait_for_children(&a, "/election/w", 2).await;
    let third = campaign(&c, "/election/w", "c");
    wait_for_children(&a, "/election/w", 3).await;
    withdrawn.abort();
    wait_for_children(&a, "/election/w", 2).await;
    let token = first.fencing_token();
    first.resign().await.expect("resigned");
    let third = within("c leads", third).await.expect("joins");
    assert_eq!(third.value(), b"c");
    assert!(third.fencing_token() > token);
}

#[tokio::test]
async fn a_waiting_candidate_and_an_observer_ride_out_a_server_restart() {
    // A restart within the session timeout keeps the queue: the waiter still leads next.
    let dir = arbor_tests::TempDir::new();
    let mut server = TestServer::start_in(dir.path(), &[]);
    let (a, b, watcher) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let mut observer = Election::new(&watcher, "/election/r").observe();
    let first = Election::new(&a, "/election/r")
        .campaign("a")
        .await
        .expect("elected");
    let second = campaign(&b, "/election/r", "b");
    wait_for_children(&a, "/election/r", 2).await;
    assert_eq!(
        within("observed", observer.next())
            .await
            .expect("observed")
            .value,
        b"a"
    );

    server.kill();
    let lost = within("lost() fires", first.lost()).await;
    assert!(!lost.is_connected());
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart();
    // Resigning rides out the reconnect instead of failing on ConnectionLoss.
    within("resigned", first.resign()).await.expect("resigned");
    let second = within("b leads", second).await.expect("joins");
    assert_eq!(second.value(), b"b");
    let seen = within("observed", observer.next()).await.expect("observed");
    assert_eq!(seen.token, second.fencing_token());
}

#[tokio::test]
async fn fifty_candidates_one_wake_per_resignation_and_no_listing() {
    // 50 candidates queue behind a leader: each resignation wakes only the
    // next candidate, and no candidate lists the election's children.
    const CANDIDATES: usize = 50;
    let server = TestServer::start_with(&["--max-connections-per-ip", "100"]);
    let first = client(&server).await;
    let path = "/election/herd";
    let leading = Election::new(&first, path)
        .campaign("first")
        .await
        .expect("elected");
    let listed_before = listings(&server);
    let (elected_tx, mut elected_rx) = tokio::sync::mpsc::channel(64);
    let (resign_tx, _) = tokio::sync::broadcast::channel::<usize>(64);
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..CANDIDATES {
        let c = client(&server).await;
        let election = Election::new(&c, path);
        let elected_tx = elected_tx.clone();
        let mut resign_rx = resign_tx.subscribe();
        tasks.push(tokio::spawn(async move {
            let leadership = election.campaign(format!("c{i}")).await.expect("elected");
            elected_tx
                .send((i, leadership.fencing_token()))
                .await
                .expect("reported");
            while resign_rx.recv().await.expect("test alive") != i {}
            leadership.resign().await.expect("resigned");
        }));
        clients.push(c);
        // Queue in a known order, seen by the directory's stat.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while first
            .exists(path)
            .await
            .expect("read")
            .map_or(0, |stat| stat.num_children as usize)
            != i + 2
        {
            assert!(tokio::time::Instant::now() < deadline, "queued in time");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let events =
        |clients: &[Client]| -> u64 { clients.iter().map(|c| c.watch_events_received()).sum() };
    let mut before = events(&clients);
    let mut last_token = leading.fencing_token();
    leading.resign().await.expect("resigned");
    for want in 0..CANDIDATES {
        let (i, token) = within("the next leader", elected_rx.recv())
            .await
            .expect("a leader");
        assert_eq!(i, want, "succession follows arrival order");
        assert!(token > last_token, "tokens grow");
        last_token = token;
        tokio::time::sleep(Duration::from_millis(5)).await;
        let after = events(&clients);
        assert_eq!(after - before, 1, "one wake for the resignation before {i}");
        before = after;
        let _ = resign_tx.send(i);
    }
    for task in tasks {
        within("the candidate ends", task).await.expect("joins");
    }
    assert_eq!(
        listings(&server) - listed_before,
        0,
        "no candidate listed the election"
    );
    // The count can move: one listing shows in it. (Of the root: the
    // election's directory is a container, which may be reaped by now.)
    first.get_children("/").await.expect("listed");
    assert_eq!(listings(&server) - listed_before, 1, "a listing is counted");
}
