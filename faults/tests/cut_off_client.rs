//! A lock holder whose member is cut off from the majority, against three
//! real `arbord` members in network namespaces (tick 2 s, sessions of
//! 6 s): its guard reports the lock may be lost well within a third of
//! the session timeout, long before anyone else could be granted the lock.
//! Given the other members too, it moves to one of them and keeps its
//! session and its lock; given only the cut-off member, it loses both, and
//! the next holder is granted only after it was told, with a larger token
//! its stale writes cannot get past.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use arbor_client::recipes::{Fence, Mutex};
use arbor_client::{Client, ClientOptions, ConnectionState};
use arbor_faults::arbor::{ArborEnsemble, ArborOptions};
use arbor_faults::lab::Lab;

const SESSION_TIMEOUT: Duration = Duration::from_secs(6);
const LOCK: &str = "/cut-off-lock";
/// How long any one wait may take.
const WAIT: Duration = Duration::from_secs(30);

struct Setup {
    lab: Lab,
    ensemble: ArborEnsemble,
    _dir: arbor_tests::TempDir,
}

fn setup() -> Setup {
    Lab::check_available().expect("the fault suite runs as root with ip netns");
    let lab = Lab::new(3).expect("a lab");
    let dir = arbor_tests::TempDir::new();
    let options = ArborOptions {
        binary: arbor_tests::arbord_path(),
        tick_ms: 2000,
    };
    let ensemble = ArborEnsemble::start(&lab, dir.path(), &options).expect("the ensemble serves");
    Setup {
        lab,
        ensemble,
        _dir: dir,
    }
}

fn addrs(setup: &Setup, members: &[usize]) -> String {
    let addrs: Vec<String> = members
        .iter()
        .map(|m| setup.ensemble.native_addr(*m).to_string())
        .collect();
    addrs.join(",")
}

async fn connect(servers: &str) -> Client {
    let options = ClientOptions::default().with_session_timeout(SESSION_TIMEOUT);
    Client::connect(servers, options).await.expect("a session")
}

/// The member (from 1) `client` is connected to.
fn member_of(setup: &Setup, client: &Client) -> usize {
    let server: SocketAddr = client
        .connected_server()
        .expect("connected")
        .parse()
        .expect("an address");
    (1..=3)
        .find(|m| setup.ensemble.native_addr(*m) == server)
        .expect("one of the members")
}

async fn until(state: ConnectionState, client: &Client) {
    let mut states = client.state_changes();
    tokio::time::timeout(WAIT, async {
        while client.state() != state {
            states.next().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never {state:?}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_on_a_cut_off_member_is_told_at_once_moves_and_keeps_its_lock() {
    let setup = setup();
    let holder = connect(&addrs(&setup, &[1, 2, 3])).await;
    let guard = Mutex::new(&holder, LOCK).lock().await.expect("the lock");
    let contender = connect(&addrs(&setup, &[1, 2, 3])).await;
    let mut waiting = tokio::spawn(async move {
        let guard = Mutex::new(&contender, LOCK).lock().await;
        (guard.map(|g| g.fencing_token()), contender)
    });
    let member = member_of(&setup, &holder);
    let cut = Instant::now();
    setup.lab.isolate(member).expect("cut off");
    let lost = tokio::time::timeout(WAIT, guard.lost())
        .await
        .expect("told");
    let told = cut.elapsed();
    assert_eq!(lost, ConnectionState::Suspended);
    assert!(
        told < SESSION_TIMEOUT / 3,
        "told after {told:?}, a third of the session timeout is {:?}",
        SESSION_TIMEOUT / 3
    );
    until(ConnectionState::Reconnected, &holder).await;
    assert_ne!(member_of(&setup, &holder), member, "moved to the majority");
    // Its session, and so its lock node, live on: nobody else is granted.
    tokio::time::sleep(SESSION_TIMEOUT + Duration::from_secs(2)).await;
    let node = holder.exists(guard.node()).await.expect("answers");
    assert!(node.is_some(), "the lock node outlived the partition");
    assert!(
        !waiting.is_finished(),
        "granted to another while its holder lived"
    );
    setup.lab.heal_all().expect("healed");
    let token = guard.fencing_token();
    guard.release().await.expect("released");
    let (next, _contender) = tokio::time::timeout(WAIT, &mut waiting)
        .await
        .expect("granted after the release")
        .expect("joins");
    assert!(next.expect("the lock") > token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stuck_on_a_cut_off_member_is_told_before_the_next_is_granted() {
    let mut setup = setup();
    let leader = tokio::task::block_in_place(|| setup.ensemble.leader()).expect("a leader");
    let alone = (1..=3).find(|m| *m != leader).expect("a follower");
    let others: Vec<usize> = (1..=3).filter(|m| *m != alone).collect();
    let holder = connect(&addrs(&setup, &[alone])).await;
    let guard = Mutex::new(&holder, LOCK).lock().await.expect("the lock");
    let fence = Fence::new();
    fence
        .admit(guard.fencing_token())
        .expect("the first holder writes");
    let contender = connect(&addrs(&setup, &others)).await;
    let waiting = tokio::spawn(async move {
        let guard = Mutex::new(&contender, LOCK).lock().await;
        let token = guard.map(|g| g.fencing_token());
        (token, Instant::now(), contender)
    });
    setup.lab.isolate(alone).expect("cut off");
    tokio::time::timeout(WAIT, guard.lost())
        .await
        .expect("told");
    let told = Instant::now();
    let (next, granted, _contender) = tokio::time::timeout(WAIT, waiting)
        .await
        .expect("granted once the session expired")
        .expect("joins");
    let next = next.expect("the lock");
    assert!(
        told < granted,
        "the next holder was granted before the first was told"
    );
    assert!(
        granted - told > SESSION_TIMEOUT / 2,
        "granted {:?} after the first holder was told",
        granted - told
    );
    assert!(next > guard.fencing_token());
    fence.admit(next).expect("the next holder writes");
    assert!(
        fence.admit(guard.fencing_token()).is_err(),
        "a stale holder's write is refused"
    );
    setup.lab.heal_all().expect("healed");
}
