//! A create whose outcome is unknown, against a 3-member ensemble of real
//! `arbord` processes whose leader is killed mid-stream.
//!
//! Curator's protected mode, and every queue recipe of ours (locks,
//! semaphores, elections), make an ephemeral sequential node under a name
//! prefix unique to the attempt; when the reply is lost they list the
//! directory, and create again only if no child has the prefix. That is
//! safe only if the session's next read sees the lost create whenever it
//! takes effect at all. A node made twice this way is the worst kind of
//! leak: the first one stands in its queue, owned by a live session that
//! does not know it, and blocks everyone behind it for the session's life.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arbor_client::{Client, CreateMode, Error};
use arbor_tests::{ensemble_client_options as options, TestEnsemble};

const DIR: &str = "/protected";
/// Writers on one connection, each with one attempt in flight at a time:
/// enough that some create is between the leader and the reply whenever
/// the leader dies.
const WRITERS: usize = 16;
/// Leader kills; each round ends with every prefix counted.
const ROUNDS: usize = 4;

/// What the writers saw, summed.
#[derive(Default)]
struct Seen {
    attempts: AtomicUsize,
    /// Creates answered "outcome unknown" (a connection loss).
    unknown: AtomicUsize,
    /// Lookups after an unknown outcome that found the node.
    found: AtomicUsize,
}

fn transient(err: &Error) -> bool {
    matches!(
        err,
        Error::ConnectionLoss | Error::Timeout | Error::NotLeader | Error::Unavailable
    )
}

/// The lookup of protected mode: whether a child of `DIR` has `prefix`.
async fn look_up(client: &Client, prefix: &str) -> bool {
    loop {
        match client.get_children(DIR).await {
            Ok(children) => return children.iter().any(|child| child.starts_with(prefix)),
            Err(err) if transient(&err) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(err) => panic!("listing {DIR}: {err}"),
        }
    }
}

/// One protected create: made once, or found after an unknown outcome.
async fn protected_create(client: &Client, prefix: &str, seen: &Seen) {
    let path = format!("{DIR}/{prefix}");
    seen.attempts.fetch_add(1, Ordering::Relaxed);
    loop {
        match client
            .create(&path, Vec::new(), CreateMode::EphemeralSequential)
            .await
        {
            Ok(_) => return,
            Err(Error::ConnectionLoss | Error::Timeout) => {
                seen.unknown.fetch_add(1, Ordering::Relaxed);
                if look_up(client, prefix).await {
                    seen.found.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
            // Refused: nothing was written.
            Err(Error::NotLeader | Error::Unavailable) => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(err) => panic!("{path}: {err}"),
        }
    }
}

/// Prefixes with more than one node under `DIR`.
async fn made_twice(client: &Client) -> Vec<(String, usize)> {
    loop {
        match client.sync(DIR).await {
            Ok(()) => break,
            Err(err) if transient(&err) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(err) => panic!("sync: {err}"),
        }
    }
    let mut per_prefix: HashMap<String, usize> = HashMap::new();
    for child in client.get_children(DIR).await.expect("lists") {
        // `<prefix>` ends in '-', then the sequence number.
        let prefix = child
            .rsplit_once('-')
            .map_or(child.clone(), |(p, _)| p.to_owned());
        *per_prefix.entry(prefix).or_default() += 1;
    }
    per_prefix.into_iter().filter(|(_, n)| *n > 1).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_outcome_was_unknown_is_never_made_twice_by_protected_mode() {
    let mut ensemble = TestEnsemble::start(3);
    let admin = Client::connect(&ensemble.addrs(), options())
        .await
        .expect("connects");
    admin
        .create(DIR, Vec::new(), CreateMode::Persistent)
        .await
        .expect("creates the directory");
    let seen = Arc::new(Seen::default());
    let mut doubles = Vec::new();
    for round in 0..ROUNDS {
        let leader = ensemble.wait_for_leader(None);
        // The writers stay on one follower through the failover: it goes
        // on serving, and answers the creates the dead leader held.
        let follower = if leader == 1 { 2 } else { 1 };
        let client = Client::connect(ensemble.member(follower).addr(), options())
            .await
            .expect("connects to a follower");
        let stop = Arc::new(AtomicBool::new(false));
        let mut writers = tokio::task::JoinSet::new();
        for writer in 0..WRITERS {
            let (client, stop, seen) = (client.clone(), stop.clone(), seen.clone());
            writers.spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let prefix = format!("r{round}w{writer}n{n}-");
                    protected_create(&client, &prefix, &seen).await;
                    n += 1;
                }
            });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        ensemble.member(leader).kill();
        ensemble.wait_for_leader(Some(leader));
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.store(true, Ordering::Relaxed);
        while let Some(joined) = writers.join_next().await {
            joined.expect("a writer finished");
        }
        doubles.extend(made_twice(&client).await);
        client.close().await.expect("closes");
        ensemble.member(leader).restart();
    }
    let (attempts, unknown, found) = (
        seen.attempts.load(Ordering::Relaxed),
        seen.unknown.load(Ordering::Relaxed),
        seen.found.load(Ordering::Relaxed),
    );
    println!("{attempts} protected creates, {unknown} unknown outcomes, {found} found on lookup");
    assert!(
        doubles.is_empty(),
        "protected creates made twice (prefix, nodes): {doubles:?}; \
         {unknown} unknown outcomes, {found} found on lookup"
    );
    // Else the leader's deaths never caught a create in flight, and the
    // run proved nothing.
    assert!(unknown > 0, "no create's outcome was unknown in {attempts}");
}
