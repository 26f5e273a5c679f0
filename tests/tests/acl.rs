//! ACLs over TCP against a real `arbord`: every op against every permission
//! bit in every scheme, allowed exactly when ZooKeeper allows it (and
//! `exists`, where Arbor asks READ and ZooKeeper nothing); digests hidden
//! from readers (CVE-2019-0201); refused credentials; ACLs kept through a
//! restart from the log and from a snapshot.

use std::time::Duration;

use arbor_client::acl::digest_id;
use arbor_client::{multi, Acl, Client, ClientOptions, CreateMode, Error, Id, Perms};
use arbor_tests::TestServer;

/// `super:test`, ZooKeeper's documented test vector.
const SUPER_DIGEST: &str = "super:D/InIHSb7yEEbrWz8b9l71RjZJU=";

async fn connect(server: &TestServer, auth: Option<&str>) -> Result<Client, Error> {
    let mut options = ClientOptions::default().with_session_timeout(Duration::from_secs(4));
    if let Some(credentials) = auth {
        options = options.with_auth("digest", credentials);
    }
    Client::connect(server.addr(), options).await
}

fn alice_id() -> String {
    digest_id("alice:secret").expect("credentials")
}

/// The operations of the matrix and the permission ZooKeeper checks for
/// each, on the node the op names or (create, delete) on its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    GetData,
    Exists,
    GetChildren,
    SetData,
    Create,
    Delete,
    Check,
    SetAcl,
    GetAcl,
}

const OPERATIONS: [Operation; 9] = [
    Operation::GetData,
    Operation::Exists,
    Operation::GetChildren,
    Operation::SetData,
    Operation::Create,
    Operation::Delete,
    Operation::Check,
    Operation::SetAcl,
    Operation::GetAcl,
];

const PERMS: [(char, Perms); 5] = [
    ('r', Perms::READ),
    ('w', Perms::WRITE),
    ('c', Perms::CREATE),
    ('d', Perms::DELETE),
    ('a', Perms::ADMIN),
];

impl Operation {
    /// The table: whether a node whose ACL grants only `perm` lets the op
    /// through.
    fn allowed_by(self, perm: Perms) -> bool {
        match self {
            Operation::GetData | Operation::Exists | Operation::GetChildren | Operation::Check => {
                perm == Perms::READ
            }
            Operation::SetData => perm == Perms::WRITE,
            Operation::Create => perm == Perms::CREATE,
            Operation::Delete => perm == Perms::DELETE,
            Operation::SetAcl => perm == Perms::ADMIN,
            Operation::GetAcl => perm == Perms::READ || perm == Perms::ADMIN,
        }
    }

    /// Runs the op on `node` (which has a child `child`); `Ok` or the error.
    async fn run(self, client: &Client, node: &str, acl: &[Acl]) -> Result<(), Error> {
        match self {
            Operation::GetData => client.get_data(node).await.map(drop),
            Operation::Exists => client.exists(node).await.map(drop),
            Operation::GetChildren => client.get_children(node).await.map(drop),
            Operation::SetData => client.set_data(node, b"x".to_vec(), None).await.map(drop),
            Operation::Create => client
                .create(&format!("{node}/new"), Vec::new(), CreateMode::Persistent)
                .await
                .map(drop),
            Operation::Delete => client.delete(&format!("{node}/child"), None).await,
            Operation::Check => client.multi(vec![multi::check(node, None)]).await.map(drop),
            // The same list again: allowed or not, nothing changes but aversion.
            Operation::SetAcl => client.set_acl(node, acl.to_vec(), None).await.map(drop),
            Operation::GetAcl => client.get_acl(node).await.map(drop),
        }
    }
}

/// Puts back what a successful op changed, as the superuser.
async fn undo(admin: &Client, op: Operation, node: &str) {
    match op {
        Operation::Create => admin
            .delete(&format!("{node}/new"), None)
            .await
            .expect("removes the created child"),
        Operation::Delete => {
            admin
                .create(&format!("{node}/child"), Vec::new(), CreateMode::Persistent)
                .await
                .expect("puts the child back");
        }
        _ => {}
    }
}

fn refused(result: &Result<(), Error>) -> bool {
    match result {
        Err(Error::NoAuth) => true,
        Err(Error::MultiFailed { code, .. }) => *code == arbor_client::ErrorCode::NoAuth,
        _ => false,
    }
}

#[tokio::test]
async fn every_op_is_allowed_exactly_by_the_permission_zookeeper_checks() {
    let server = TestServer::start_with(&["--super-digest", SUPER_DIGEST]);
    let admin = connect(&server, Some("super:test"))
        .await
        .expect("superuser");
    let anyone = connect(&server, None).await.expect("plain client");
    let alice = connect(&server, Some("alice:secret")).await.expect("alice");
    let bob = connect(&server, Some("bob:other")).await.expect("bob");
    admin
        .create("/m", Vec::new(), CreateMode::Persistent)
        .await
        .expect("root of the matrix");

    // (scheme, ACL id, who should be let in, who must not be).
    let schemes: [(&str, String, &Client, &Client); 4] = [
        ("world", "world:anyone".into(), &anyone, &anyone),
        ("digest", format!("digest:{}", alice_id()), &alice, &bob),
        ("ip", "ip:127.0.0.0/8".into(), &anyone, &anyone),
        ("auth", "auth:".into(), &alice, &bob),
    ];
    let mut mismatches = Vec::new();
    let mut cells = 0;
    for (scheme, id, granted, other) in &schemes {
        for (letter, perm) in PERMS {
            let node = format!("/m/{scheme}-{letter}");
            let acl = Acl::parse_list(&format!("{id}:{letter}")).expect("valid ACL text");
            // `auth` resolves to the creator's ids: alice creates those.
            let creator = if *scheme == "auth" { &alice } else { &admin };
            creator
                .create_with_acl(&node, Vec::new(), CreateMode::Persistent, acl.clone())
                .await
                .unwrap_or_else(|err| panic!("creating {node}: {err}"));
            admin
                .create(&format!("{node}/child"), Vec::new(), CreateMode::Persistent)
                .await
                .expect("child, as the superuser");
            let (stored, _) = admin.get_acl(&node).await.expect("superuser reads the ACL");
            let stored_acl = stored.clone();
            for op in OPERATIONS {
                cells += 1;
                let expected = op.allowed_by(perm);
                let result = op.run(granted, &node, &stored_acl).await;
                let allowed = result.is_ok();
                if allowed != expected || (!allowed && !refused(&result)) {
                    mismatches.push(format!(
                        "{scheme} {letter} {op:?}: expected {}, got {result:?}",
                        if expected { "allowed" } else { "NoAuth" }
                    ));
                }
                if allowed {
                    undo(&admin, op, &node).await;
                }
            }
            // An id the ACL does not name gets nothing, whatever the bit.
            if !std::ptr::eq(*granted, *other) {
                for op in OPERATIONS {
                    cells += 1;
                    let result = op.run(other, &node, &stored_acl).await;
                    if !refused(&result) {
                        mismatches.push(format!(
                            "{scheme} {letter} {op:?} by another id: {result:?}"
                        ));
                        if result.is_ok() {
                            undo(&admin, op, &node).await;
                        }
                    }
                }
            }
        }
    }
    // An ip range the client is outside of grants nothing either.
    let outside = "/m/ip-outside";
    admin
        .create_with_acl(
            outside,
            Vec::new(),
            CreateMode::Persistent,
            Acl::parse_list("ip:10.0.0.0/8:cdrwa").expect("valid"),
        )
        .await
        .expect("creates");
    admin
        .create(
            &format!("{outside}/child"),
            Vec::new(),
            CreateMode::Persistent,
        )
        .await
        .expect("child");
    for op in OPERATIONS {
        cells += 1;
        let result = op.run(&anyone, outside, &Acl::open()).await;
        if !refused(&result) {
            mismatches.push(format!("ip outside the range {op:?}: {result:?}"));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {cells} cells wrong:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert!(cells >= 4 * 5 * 9, "{cells} cells");
}

#[tokio::test]
async fn get_acl_hides_digests_from_readers_without_admin() {
    let server = TestServer::start();
    let alice = connect(&server, Some("alice:secret")).await.expect("alice");
    let anyone = connect(&server, None).await.expect("plain client");
    let acl = vec![
        Acl::new(Perms::ALL, "digest", alice_id()),
        Acl::new(Perms::READ, "world", "anyone"),
    ];
    alice
        .create_with_acl("/secret", Vec::new(), CreateMode::Persistent, acl.clone())
        .await
        .expect("creates");
    let (shown, _) = anyone
        .get_acl("/secret")
        .await
        .expect("READ lets it see the ACL");
    assert_eq!(
        shown[0],
        Acl::new(Perms::ALL, "digest", "alice:x"),
        "{shown:?}"
    );
    assert_eq!(shown[1], acl[1]);
    let (full, stat) = alice.get_acl("/secret").await.expect("ADMIN sees all");
    assert_eq!(full, acl);
    assert_eq!(stat.aversion, 0);
    // No READ and no ADMIN: nothing at all.
    alice
        .set_acl("/secret", vec![acl[0].clone()], Some(0))
        .await
        .expect("sets");
    assert!(matches!(
        anyone.get_acl("/secret").await,
        Err(Error::NoAuth)
    ));
    assert_eq!(alice.get_acl("/secret").await.expect("reads").1.aversion, 1);
    assert!(matches!(
        alice.set_acl("/secret", Acl::open(), Some(0)).await,
        Err(Error::BadVersion { .. })
    ));
}

#[tokio::test]
async fn credentials_are_checked_and_ids_listed() {
    let server = TestServer::start_with(&["--super-digest", SUPER_DIGEST]);
    for bad in ["no-colon", ":no-user"] {
        assert!(
            matches!(connect(&server, Some(bad)).await, Err(Error::AuthFailed)),
            "{bad}"
        );
    }
    let sasl = ClientOptions::default().with_auth("sasl", "alice");
    assert!(matches!(
        Client::connect(server.addr(), sasl).await,
        Err(Error::AuthFailed)
    ));
    let alice = connect(&server, Some("alice:secret")).await.expect("alice");
    let ids = alice.who_am_i().await.expect("lists");
    assert_eq!(
        ids,
        vec![Id::new("ip", "127.0.0.1"), Id::new("digest", alice_id())]
    );
    // `auth` with nothing proved is an invalid ACL; so is a made-up scheme.
    let anyone = connect(&server, None).await.expect("plain client");
    for text in ["auth::cdrwa", "nosuch:id:r", "world:somebody:r"] {
        let acl = Acl::parse_list(text).expect("parses");
        let result = anyone
            .create_with_acl("/bad", Vec::new(), CreateMode::Persistent, acl)
            .await;
        assert!(
            matches!(result, Err(Error::InvalidAcl)),
            "{text}: {result:?}"
        );
    }
    // The superuser passes every check, whatever the ACL.
    alice
        .create_with_acl(
            "/hers",
            Vec::new(),
            CreateMode::Persistent,
            Acl::parse_list("auth::cdrwa").expect("parses"),
        )
        .await
        .expect("creates");
    assert!(matches!(anyone.get_data("/hers").await, Err(Error::NoAuth)));
    let root = connect(&server, Some("super:test"))
        .await
        .expect("superuser");
    root.set_data("/hers", b"mine now".to_vec(), None)
        .await
        .expect("the superuser writes anything");
    assert!(root
        .who_am_i()
        .await
        .expect("lists")
        .contains(&Id::new("super", "")));
}

#[tokio::test]
async fn acls_and_proved_ids_survive_restarts_from_the_log_and_from_snapshots() {
    // A snapshot every few writes: the second restart loads one.
    let mut server = TestServer::start_with(&["--snap-count", "4"]);
    let acl = Acl::parse_list("auth::cdrwa,world:anyone:r").expect("parses");
    {
        let alice = connect(&server, Some("alice:secret")).await.expect("alice");
        alice
            .create_with_acl("/kept", b"v".to_vec(), CreateMode::Persistent, acl.clone())
            .await
            .expect("creates");
        alice
            .set_acl(
                "/kept",
                Acl::parse_list(&format!("digest:{}:cdrwa,world:anyone:r", alice_id()))
                    .expect("parses"),
                Some(0),
            )
            .await
            .expect("sets");
        alice.close().await.expect("closes");
    }
    for round in 0..2 {
        server.restart();
        let anyone = connect(&server, None).await.expect("plain client");
        assert!(
            matches!(
                anyone.set_data("/kept", b"no".to_vec(), None).await,
                Err(Error::NoAuth)
            ),
            "round {round}"
        );
        let alice = connect(&server, Some("alice:secret")).await.expect("alice");
        let (stored, stat) = alice.get_acl("/kept").await.expect("reads");
        assert_eq!(stat.aversion, 1, "round {round}");
        assert_eq!(
            stored,
            vec![
                Acl::new(Perms::ALL, "digest", alice_id()),
                Acl::new(Perms::READ, "world", "anyone"),
            ]
        );
        alice
            .set_data("/kept", format!("round {round}").into_bytes(), None)
            .await
            .expect("alice still writes");
        // Enough writes for a snapshot before the next restart.
        for i in 0..6 {
            alice
                .create(
                    &format!("/filler-{round}-{i}"),
                    Vec::new(),
                    CreateMode::Persistent,
                )
                .await
                .expect("creates");
        }
        alice.close().await.expect("closes");
    }
    assert!(
        std::fs::read_dir(server.data_dir().join("snapshots"))
            .expect("snapshot dir")
            .count()
            > 0,
        "a snapshot was taken"
    );
}

#[tokio::test]
async fn a_resumed_session_keeps_what_it_proved() {
    let mut server = TestServer::start();
    let alice = connect(&server, Some("alice:secret")).await.expect("alice");
    alice
        .create_with_acl(
            "/own",
            Vec::new(),
            CreateMode::Persistent,
            Acl::parse_list("auth::cdrwa").expect("parses"),
        )
        .await
        .expect("creates");
    // The server restarts within the session timeout; the client resumes
    // the session (and proves its credentials again on the new connection).
    server.restart();
    let mut attempts = 0;
    loop {
        match alice.set_data("/own", b"after".to_vec(), None).await {
            Ok(_) => break,
            Err(Error::ConnectionLoss | Error::Unavailable) if attempts < 50 => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => panic!("after the restart: {err}"),
        }
    }
    assert_eq!(alice.get_data("/own").await.expect("reads").0, b"after");
}

/// ZooKeeper's CVE-2024-23944: a recursive watch on `/` told its session of
/// every change below, readable or not.
#[tokio::test]
async fn a_recursive_watch_reveals_only_nodes_its_session_may_read() {
    use arbor_client::{AddWatchMode, EventType};
    let server = TestServer::start();
    let alice = connect(&server, Some("alice:secret")).await.expect("alice");
    let anyone = connect(&server, None).await.expect("plain client");
    let mut outsider = anyone
        .watch("/", AddWatchMode::PersistentRecursive)
        .await
        .expect("watches /");
    let mut owner = alice
        .watch("/", AddWatchMode::PersistentRecursive)
        .await
        .expect("watches /");
    let hers = Acl::parse_list("auth::cdrwa").expect("parses");
    alice
        .create("/open-a", Vec::new(), CreateMode::Persistent)
        .await
        .expect("creates");
    alice
        .create_with_acl("/secret", Vec::new(), CreateMode::Persistent, hers.clone())
        .await
        .expect("creates");
    alice
        .create_with_acl("/secret/child", Vec::new(), CreateMode::Persistent, hers)
        .await
        .expect("creates");
    alice
        .set_data("/secret/child", b"classified".to_vec(), None)
        .await
        .expect("sets");
    alice.delete("/secret/child", None).await.expect("deletes");
    alice
        .create("/open-b", Vec::new(), CreateMode::Persistent)
        .await
        .expect("creates");

    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(next_event(&mut outsider).await);
    }
    assert_eq!(
        seen,
        vec![
            (EventType::NodeCreated, "/open-a".to_owned()),
            (EventType::NodeCreated, "/open-b".to_owned()),
        ],
        "nothing of /secret reaches a session that may not read it"
    );
    let mut theirs = Vec::new();
    for _ in 0..6 {
        theirs.push(next_event(&mut owner).await);
    }
    assert_eq!(
        theirs,
        vec![
            (EventType::NodeCreated, "/open-a".to_owned()),
            (EventType::NodeCreated, "/secret".to_owned()),
            (EventType::NodeCreated, "/secret/child".to_owned()),
            (EventType::NodeDataChanged, "/secret/child".to_owned()),
            (EventType::NodeDeleted, "/secret/child".to_owned()),
            (EventType::NodeCreated, "/open-b".to_owned()),
        ]
    );
    // And a persistent watch cannot be set on a node it may not read.
    assert!(matches!(
        anyone.watch("/secret", AddWatchMode::Persistent).await,
        Err(Error::NoAuth)
    ));
}

async fn next_event(
    watch: &mut arbor_client::PersistentWatch,
) -> (arbor_client::EventType, String) {
    let event = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("an event in time")
        .expect("the watch lives");
    (event.event_type, event.path)
}

/// A watch outlives the ACL it was set under: a persistent watch stops
/// reporting once its session may no longer read the node, and a one-shot
/// watch the client registers again after a reconnect is dropped for a node
/// it may no longer read, rather than fired for it.
#[tokio::test]
async fn watches_follow_the_acl_the_node_has_now() {
    use arbor_client::{AddWatchMode, ConnectionState, EventType};
    let mut server = TestServer::start();
    let alice = connect(&server, Some("alice:secret")).await.expect("alice");
    let reader = connect(&server, None).await.expect("plain client");
    alice
        .create("/x", b"v0".to_vec(), CreateMode::Persistent)
        .await
        .expect("open for now");
    let mut lasting = reader
        .watch("/x", AddWatchMode::Persistent)
        .await
        .expect("readable now");
    let mut hers = alice
        .watch("/x", AddWatchMode::Persistent)
        .await
        .expect("watches");
    let (_, _, once) = reader.get_data_watch("/x").await.expect("readable now");
    let only_alice = Acl::parse_list("auth::cdrwa").expect("parses");
    alice
        .set_acl("/x", only_alice, None)
        .await
        .expect("alice closes /x");

    // The reader's one-shot watch is registered again on a new connection.
    server.restart();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while reader.state() != ConnectionState::Reconnected {
        assert!(
            tokio::time::Instant::now() < deadline,
            "reader did not reconnect"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Replies come in order: once this is answered, the watches were sent.
    let mut tries = 0;
    while let Err(err) = reader.sync("/").await {
        tries += 1;
        assert!(tries < 50, "sync: {err}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut tries = 0;
    while let Err(err) = alice.set_data("/x", b"v1".to_vec(), None).await {
        tries += 1;
        assert!(tries < 50, "set: {err}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        next_event(&mut hers).await,
        (EventType::NodeDataChanged, "/x".to_owned())
    );
    let quiet = Duration::from_millis(500);
    assert!(
        tokio::time::timeout(quiet, lasting.next()).await.is_err(),
        "the persistent watch told a session that may not read /x"
    );
    assert!(
        tokio::time::timeout(quiet, once).await.is_err(),
        "the one-shot watch fired for a node its session may no longer read"
    );
}

/// Recipes give their nodes the ACL they are told: a team's lock queue is
/// the team's alone.
#[tokio::test]
async fn a_lock_with_an_acl_queues_only_those_it_names() {
    use arbor_client::recipes::{LockError, Mutex};
    let server = TestServer::start();
    let alice = connect(&server, Some("alice:secret")).await.expect("alice");
    let alice_too = connect(&server, Some("alice:secret"))
        .await
        .expect("alice again");
    let bob = connect(&server, Some("bob:other")).await.expect("bob");
    let lock = Mutex::new(&alice, "/team/locks/job").with_acl(Acl::creator_all());
    let guard = lock.lock().await.expect("alice locks");
    let (dir_acl, _) = alice.get_acl("/team/locks/job").await.expect("reads");
    let (node_acl, _) = alice.get_acl(guard.node()).await.expect("reads");
    let hers = vec![Acl::new(Perms::ALL, "digest", alice_id())];
    assert_eq!((dir_acl, node_acl), (hers.clone(), hers));
    let refused = Mutex::new(&bob, "/team/locks/job").try_lock().await;
    assert!(
        matches!(refused, Err(LockError::Client(Error::NoAuth))),
        "{:?}",
        refused.map(|_| ())
    );
    // Another session of the same id queues behind the holder.
    let same = Mutex::new(&alice_too, "/team/locks/job").with_acl(Acl::creator_all());
    assert!(matches!(same.try_lock().await, Err(LockError::Locked)));
    guard.release().await.expect("releases");
    same.try_lock()
        .await
        .expect("free now")
        .release()
        .await
        .expect("releases");
}
