//! The double barrier against a real server: nobody enters before `count`
//! members are present; a member that dies before the barrier opens is not
//! counted, so it releases all the live members it counts or none; leave
//! waits for everyone; the path serves round after round.

use std::collections::BTreeSet;
use std::time::Duration;

use arbor_client::recipes::{BarrierError, DoubleBarrier, Entered};
use arbor_client::{Client, ClientOptions};
use arbor_tests::{client, wait_for_children, TestServer};
use tokio::task::JoinHandle;

/// Long enough for a wrongly released member to have returned.
const SETTLE: Duration = Duration::from_millis(300);
const GRANT_TIMEOUT: Duration = Duration::from_secs(10);

fn enter(client: &Client, path: &str, count: usize) -> JoinHandle<Result<Entered, BarrierError>> {
    let barrier = DoubleBarrier::new(client, path, count);
    tokio::spawn(async move { barrier.enter().await })
}

async fn entered(task: JoinHandle<Result<Entered, BarrierError>>) -> Entered {
    tokio::time::timeout(GRANT_TIMEOUT, task)
        .await
        .expect("released in time")
        .expect("joins")
        .expect("entered")
}

/// The member node names under `path`, as a set.
async fn members(client: &Client, path: &str) -> BTreeSet<String> {
    client
        .get_children(path)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|name| name.contains("member-"))
        .collect()
}

#[tokio::test]
async fn nobody_enters_until_the_last_member_arrives() {
    // count = 5: four members wait (no `ready`), the fifth releases all five
    // together, each told the same five members.
    let server = TestServer::start();
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let c = client(&server).await;
        tasks.push(enter(&c, "/barrier/a", 5));
        clients.push(c);
    }
    wait_for_children(&clients[0], "/barrier/a", 4).await;
    tokio::time::sleep(SETTLE).await;
    assert!(
        tasks.iter().all(|t| !t.is_finished()),
        "released with 4 of 5"
    );
    assert!(clients[0]
        .exists("/barrier/a/ready")
        .await
        .expect("asked")
        .is_none());
    let last = client(&server).await;
    tasks.push(enter(&last, "/barrier/a", 5));
    clients.push(last);
    let mut inside = Vec::new();
    for task in tasks {
        inside.push(entered(task).await);
    }
    let present = members(&clients[0], "/barrier/a").await;
    for member in &inside {
        let listed: BTreeSet<String> = member.members().iter().cloned().collect();
        assert_eq!(
            listed, present,
            "every member was released with the same five"
        );
    }
    assert_eq!(present.len(), 5);
}

/// Server tick for the freeze test: short sessions expire quickly.
const TICK_MS: u64 = 100;
const SHORT_SESSION: Duration = Duration::from_millis(3 * TICK_MS);
/// A member frozen this long has surely lost its session.
const PAUSE: Duration = Duration::from_millis(3 * TICK_MS + 7 * TICK_MS);

/// A member on its own thread and runtime that enters, then freezes (a
/// blocking sleep: no heartbeats) until its session is gone. Returns its
/// node's name (once its node exists) and, at the end, how its enter ended.
fn frozen_member(
    addr: String,
    path: &'static str,
    count: usize,
) -> (
    std::sync::mpsc::Receiver<String>,
    std::thread::JoinHandle<Result<(), String>>,
) {
    let (node_tx, node_rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let options = ClientOptions::default().with_session_timeout(SHORT_SESSION);
            let c = Client::connect(&addr, options).await.expect("connects");
            let before = members(&c, path).await;
            let task = enter(&c, path, count);
            let name = loop {
                let now = members(&c, path).await;
                if let Some(mine) = now.difference(&before).next() {
                    break mine.clone();
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            node_tx.send(name).expect("test alive");
            std::thread::sleep(PAUSE);
            match tokio::time::timeout(GRANT_TIMEOUT, task).await {
                Ok(Ok(Ok(_))) => Err("the frozen member was released".to_owned()),
                Ok(Ok(Err(_))) => Ok(()),
                Ok(Err(join)) => Err(format!("enter panicked: {join}")),
                Err(_) => Err("the frozen member's enter never ended".to_owned()),
            }
        })
    });
    (node_rx, thread)
}

#[tokio::test]
async fn a_member_that_dies_before_the_barrier_opens_is_replaced_not_counted() {
    // count = 5: four enter, one of them freezes past its session and its
    // node expires; the fifth arrival finds four live members and waits with
    // the others; only a sixth opens the barrier, for exactly the five live.
    let tick = TICK_MS.to_string();
    let server = TestServer::start_with(&["--tick-ms", &tick]);
    let watcher = client(&server).await;
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let c = client(&server).await;
        tasks.push(enter(&c, "/barrier/b", 5));
        clients.push(c);
    }
    wait_for_children(&watcher, "/barrier/b", 3).await;
    let (frozen_node, frozen) = frozen_member(server.addr().to_owned(), "/barrier/b", 5);
    let frozen_name = frozen_node.recv().expect("the frozen member queued");
    wait_for_children(&watcher, "/barrier/b", 3).await; // its session expired
    assert!(!members(&watcher, "/barrier/b").await.contains(&frozen_name));

    let fifth = client(&server).await;
    tasks.push(enter(&fifth, "/barrier/b", 5));
    clients.push(fifth);
    wait_for_children(&watcher, "/barrier/b", 4).await;
    tokio::time::sleep(SETTLE).await;
    assert!(
        tasks.iter().all(|t| !t.is_finished()),
        "released with a dead member counted"
    );
    assert!(watcher
        .exists("/barrier/b/ready")
        .await
        .expect("asked")
        .is_none());

    let sixth = client(&server).await;
    tasks.push(enter(&sixth, "/barrier/b", 5));
    clients.push(sixth);
    let mut inside = Vec::new();
    for task in tasks {
        inside.push(entered(task).await);
    }
    let live = members(&watcher, "/barrier/b").await;
    assert_eq!(live.len(), 5);
    for member in &inside {
        let listed: BTreeSet<String> = member.members().iter().cloned().collect();
        assert_eq!(listed, live, "exactly the five live members passed");
        assert!(!listed.contains(&frozen_name));
    }
    frozen
        .join()
        .expect("frozen thread joins")
        .expect("the frozen member was not released");
}

#[tokio::test]
async fn leave_waits_for_every_member() {
    // Two of three members leave; neither returns until the third has left
    // too; then the round is gone (members and `ready`).
    let server = TestServer::start();
    let clients = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let tasks: Vec<_> = clients.iter().map(|c| enter(c, "/barrier/c", 3)).collect();
    let mut inside = Vec::new();
    for task in tasks {
        inside.push(entered(task).await);
    }
    let third = inside.pop().expect("three inside");
    let leaving: Vec<_> = inside
        .into_iter()
        .map(|member| tokio::spawn(member.leave()))
        .collect();
    tokio::time::sleep(SETTLE).await;
    assert!(
        leaving.iter().all(|t| !t.is_finished()),
        "left before the third member"
    );
    third.leave().await.expect("left");
    for task in leaving {
        tokio::time::timeout(GRANT_TIMEOUT, task)
            .await
            .expect("left in time")
            .expect("joins")
            .expect("left");
    }
    assert!(members(&clients[0], "/barrier/c").await.is_empty());
    assert!(clients[0]
        .exists("/barrier/c/ready")
        .await
        .expect("asked")
        .is_none());
}

#[tokio::test]
async fn a_late_member_waits_for_the_next_round_on_the_same_path() {
    // count = 2. A third member arriving after the first round opened is not
    // released with it, does not hold it up when it leaves, and opens the
    // second round with a fourth.
    let server = TestServer::start();
    let c = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let first = [enter(&c[0], "/barrier/d", 2), enter(&c[1], "/barrier/d", 2)];
    let mut round_one = Vec::new();
    for task in first {
        round_one.push(entered(task).await);
    }
    let late = enter(&c[2], "/barrier/d", 2);
    tokio::time::sleep(SETTLE).await;
    assert!(
        !late.is_finished(),
        "a late member joined a round already inside"
    );
    let leaving: Vec<_> = round_one
        .into_iter()
        .map(|member| tokio::spawn(member.leave()))
        .collect();
    for task in leaving {
        tokio::time::timeout(GRANT_TIMEOUT, task)
            .await
            .expect("round one left in time")
            .expect("joins")
            .expect("left");
    }
    tokio::time::sleep(SETTLE).await;
    assert!(!late.is_finished(), "the late member entered alone");
    let partner = enter(&c[3], "/barrier/d", 2);
    let round_two = [entered(late).await, entered(partner).await];
    let present = members(&c[0], "/barrier/d").await;
    assert_eq!(present.len(), 2);
    for member in &round_two {
        let listed: BTreeSet<String> = member.members().iter().cloned().collect();
        assert_eq!(
            listed, present,
            "round two is the late member and the fourth"
        );
    }
    let [a, b] = round_two;
    tokio::try_join!(a.leave(), b.leave()).expect("round two left");
    assert!(members(&c[0], "/barrier/d").await.is_empty());
    assert!(c[0]
        .exists("/barrier/d/ready")
        .await
        .expect("asked")
        .is_none());

    // A member that gives up leaves nothing behind.
    let alone = DoubleBarrier::new(&c[0], "/barrier/d", 2);
    assert!(matches!(
        alone.enter_timeout(Duration::from_millis(200)).await,
        Err(BarrierError::Timeout)
    ));
    tokio::time::sleep(SETTLE).await;
    assert!(members(&c[0], "/barrier/d").await.is_empty());
}

#[tokio::test]
async fn a_round_whose_members_all_died_does_not_block_the_path() {
    // count = 2: both members of round one end their sessions inside, so
    // nobody leaves and `ready` stays behind; the next two arrivals find no
    // member of that round left, remove its `ready`, and enter themselves.
    let server = TestServer::start();
    let gone = [client(&server).await, client(&server).await];
    let first = [
        enter(&gone[0], "/barrier/e", 2),
        enter(&gone[1], "/barrier/e", 2),
    ];
    let mut round_one = Vec::new();
    for task in first {
        round_one.push(entered(task).await);
    }
    let [a, b] = gone;
    a.close().await.expect("closed");
    b.close().await.expect("closed");
    drop(round_one);
    let c = [client(&server).await, client(&server).await];
    assert!(c[0]
        .exists("/barrier/e/ready")
        .await
        .expect("asked")
        .is_some());
    let next = [enter(&c[0], "/barrier/e", 2), enter(&c[1], "/barrier/e", 2)];
    let mut round_two = Vec::new();
    for task in next {
        round_two.push(entered(task).await);
    }
    let present = members(&c[0], "/barrier/e").await;
    for member in &round_two {
        let listed: BTreeSet<String> = member.members().iter().cloned().collect();
        assert_eq!(listed, present, "round two is the two new members");
    }
}

const STRESS_WORKERS: u64 = 7;
const STRESS_COUNT: usize = 5;
const STRESS_ROUNDS: u64 = 8;
/// How long a stress worker waits to enter before trying again: at the end
/// fewer than `STRESS_COUNT` workers are left, and they must give up.
const STRESS_ENTER_WAIT: Duration = Duration::from_secs(2);

/// What the stress workers saw.
#[derive(Default)]
struct Seen {
    /// Each released member's node and the round's member list it was told.
    released: std::sync::Mutex<Vec<(String, Vec<String>)>>,
    /// Nodes of members frozen while waiting to enter.
    frozen_waiting: std::sync::Mutex<BTreeSet<String>>,
}

fn stress_worker(addr: String, seen: std::sync::Arc<Seen>, id: u64) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let options = ClientOptions::default().with_session_timeout(SHORT_SESSION);
            let connect = || async {
                loop {
                    if let Ok(c) = Client::connect(&addr, options.clone()).await {
                        return c;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            let mut c = connect().await;
            let pause_at = (id * 3 + 1) % STRESS_ROUNDS;
            for round in 0..STRESS_ROUNDS {
                if c.state().is_terminal() {
                    c = connect().await;
                }
                let barrier = DoubleBarrier::new(&c, "/barrier/stress", STRESS_COUNT);
                let entering = if round == pause_at && id.is_multiple_of(2) {
                    // Freeze while waiting: the node expires, counted or not.
                    let task =
                        tokio::spawn(async move { barrier.enter_timeout(STRESS_ENTER_WAIT).await });
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
                    while tokio::time::Instant::now() < deadline {
                        if let Some(mine) = own_member(&c, "/barrier/stress").await {
                            seen.frozen_waiting
                                .lock()
                                .expect("not poisoned")
                                .insert(mine);
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    std::thread::sleep(PAUSE);
                    task.await.expect("joins")
                } else {
                    barrier.enter_timeout(STRESS_ENTER_WAIT).await
                };
                let Ok(inside) = entering else { continue };
                seen.released
                    .lock()
                    .expect("not poisoned")
                    .push((path_name(inside.node()), inside.members().to_vec()));
                if round == pause_at && id % 2 == 1 {
                    std::thread::sleep(PAUSE); // freeze inside: counts as having left
                } else {
                    tokio::time::sleep(Duration::from_millis(id % 4)).await;
                }
                let _ = tokio::time::timeout(GRANT_TIMEOUT, inside.leave()).await;
            }
        });
    })
}

/// The member node under `path` owned by `client`'s session, if any.
async fn own_member(client: &Client, path: &str) -> Option<String> {
    let (children, _) = client.get_children_with_stat(path).await.ok()?;
    children
        .into_iter()
        .find(|child| {
            child.name.contains("member-") && child.stat.ephemeral_owner == client.session_id()
        })
        .map(|child| child.name)
}

fn path_name(node: &str) -> String {
    node.rsplit('/').next().unwrap_or(node).to_owned()
}

#[test]
fn under_freezes_each_round_releases_every_member_it_lists() {
    // 7 workers, count 5, each frozen once past its session (half while
    // waiting, half inside). Every round lists at least 5 members, no member
    // is in two rounds, all members told of a round were told the same list,
    // and every listed member was released unless it froze while waiting
    // (members that time out are never listed: enter_timeout decides
    // atomically against the opening).
    let tick = TICK_MS.to_string();
    let server = TestServer::start_with(&["--tick-ms", &tick]);
    let seen = std::sync::Arc::new(Seen::default());
    let workers: Vec<_> = (0..STRESS_WORKERS)
        .map(|id| stress_worker(server.addr().to_owned(), seen.clone(), id))
        .collect();
    for worker in workers {
        worker.join().expect("worker finishes");
    }
    let released = seen.released.lock().expect("not poisoned").clone();
    let frozen = seen.frozen_waiting.lock().expect("not poisoned").clone();
    let mut rounds: std::collections::BTreeMap<Vec<String>, BTreeSet<String>> = Default::default();
    for (node, listed) in &released {
        assert!(
            listed.contains(node),
            "{node} was released by a round without it"
        );
        rounds
            .entry(listed.clone())
            .or_default()
            .insert(node.clone());
    }
    println!(
        "{} releases in {} rounds; {} members frozen while waiting",
        released.len(),
        rounds.len(),
        frozen.len()
    );
    assert!(rounds.len() >= 3, "rounds went on through the freezes");
    let mut everyone = BTreeSet::new();
    for (listed, passed) in &rounds {
        assert!(
            listed.len() >= STRESS_COUNT,
            "a round opened with {listed:?}"
        );
        for member in listed {
            assert!(everyone.insert(member.clone()), "{member} is in two rounds");
            assert!(
                passed.contains(member) || frozen.contains(member),
                "{member} was listed, alive, and not released"
            );
        }
    }
}
