//! TLS over TCP against a real `arbord`, with certificates made by the test:
//! mutual TLS refuses clients without a certificate from its CA and names
//! those with one (their subject is their `x509` id, which ACLs grant to);
//! plain and TLS clients cannot talk to each other's port; a client checks
//! the server's certificate; a bad certificate file stops the start with
//! its name.

use std::time::Duration;

use arbor_client::acl::X509;
use arbor_client::{Acl, Client, ClientOptions, CreateMode, Error, Id, Perms, TlsOptions};
use arbor_tests::certs::{CertFiles, TestCa};
use arbor_tests::{TempDir, TestEnsemble, TestServer};
use rcgen::DnType;

fn options() -> ClientOptions {
    ClientOptions::default()
        .with_session_timeout(Duration::from_secs(4))
        .with_connect_timeout(Duration::from_secs(3))
}

fn tls_flags<'a>(server: &'a CertFiles, client_ca: Option<&'a str>) -> Vec<&'a str> {
    let mut flags = vec![
        "--tls-listen",
        "127.0.0.1:0",
        "--tls-cert",
        server.cert.to_str().expect("utf-8 path"),
        "--tls-key",
        server.key.to_str().expect("utf-8 path"),
    ];
    if let Some(ca) = client_ca {
        flags.extend_from_slice(&["--tls-client-ca", ca]);
    }
    flags
}

fn with_certificate(ca: &TestCa, files: &CertFiles) -> TlsOptions {
    TlsOptions::new(ca.ca())
        .and_then(|tls| tls.with_client_certificate(&files.cert, &files.key))
        .expect("TLS options")
}

fn refused_connect(result: Result<Client, Error>) -> bool {
    matches!(result, Err(Error::Connect { .. }))
}

#[tokio::test]
async fn mutual_tls_admits_only_certified_clients_and_names_them_by_subject() {
    let ca = TestCa::new("arbor-test-ca");
    let server_files = ca.server("server");
    let ca_path = ca.ca();
    let ca_text = ca_path.to_str().expect("utf-8 path");
    let server = TestServer::start_with(&tls_flags(&server_files, Some(ca_text)));

    // No certificate: the TLS handshake fails, no session is opened.
    let anonymous = TlsOptions::new(ca.ca()).expect("TLS options");
    let result = Client::connect(server.tls_addr(), options().with_tls(anonymous)).await;
    assert!(
        refused_connect(result),
        "a client without a certificate got in"
    );

    // A certificate from another CA: refused alike.
    let rogue_ca = TestCa::new("rogue-ca");
    let mallory = rogue_ca.client("mallory", &[(DnType::CommonName, "alice")]);
    let rogue = TlsOptions::new(ca.ca())
        .and_then(|tls| tls.with_client_certificate(&mallory.cert, &mallory.key))
        .expect("TLS options");
    let result = Client::connect(server.tls_addr(), options().with_tls(rogue)).await;
    assert!(refused_connect(result), "a foreign CA's certificate got in");

    // Alice's certificate: in, and her subject is her x509 id, most
    // specific part first.
    let alice_files = ca.client(
        "alice",
        &[
            (DnType::OrganizationName, "Example, Inc."),
            (DnType::OrganizationalUnitName, "batch"),
            (DnType::CommonName, "alice"),
        ],
    );
    let alice_subject = "CN=alice,OU=batch,O=Example\\, Inc.";
    let alice = Client::connect(
        server.tls_addr(),
        options().with_tls(with_certificate(&ca, &alice_files)),
    )
    .await
    .expect("alice connects");
    let ids = alice.who_am_i().await.expect("who am I");
    assert!(
        ids.contains(&Id::new(X509, alice_subject)),
        "alice's ids: {ids:?}"
    );

    // An ACL that names her subject lets her in and nobody else.
    let acl = vec![Acl::new(Perms::ALL, X509, alice_subject)];
    alice
        .create_with_acl("/alice", b"hers".to_vec(), CreateMode::Persistent, acl)
        .await
        .expect("alice creates her node");
    assert_eq!(alice.get_data("/alice").await.expect("read").0, b"hers");

    let bob_files = ca.client(
        "bob",
        &[
            (DnType::OrganizationName, "Example, Inc."),
            (DnType::CommonName, "bob"),
        ],
    );
    let bob = Client::connect(
        server.tls_addr(),
        options().with_tls(with_certificate(&ca, &bob_files)),
    )
    .await
    .expect("bob connects");
    assert!(matches!(bob.get_data("/alice").await, Err(Error::NoAuth)));
    let plain = Client::connect(server.addr(), options())
        .await
        .expect("plain client");
    assert!(matches!(plain.get_data("/alice").await, Err(Error::NoAuth)));
    assert!(!plain
        .who_am_i()
        .await
        .expect("who am I")
        .iter()
        .any(|id| id.scheme == X509));
}

#[tokio::test]
async fn plain_and_tls_clients_cannot_use_each_others_port() {
    let ca = TestCa::new("arbor-test-ca");
    let server_files = ca.server("server");
    let server = TestServer::start_with(&tls_flags(&server_files, None));

    let plain_to_tls = Client::connect(server.tls_addr(), options()).await;
    assert!(
        plain_to_tls.is_err(),
        "a plain client talked to the TLS port"
    );

    let tls = TlsOptions::new(ca.ca()).expect("TLS options");
    let tls_to_plain = Client::connect(server.addr(), options().with_tls(tls.clone())).await;
    assert!(
        refused_connect(tls_to_plain),
        "a TLS client talked to the plain port"
    );

    // Both ports still serve their own kind, and see one tree.
    let secure = Client::connect(server.tls_addr(), options().with_tls(tls))
        .await
        .expect("TLS client");
    secure
        .create("/shared", b"x".to_vec(), CreateMode::Persistent)
        .await
        .expect("create over TLS");
    let plain = Client::connect(server.addr(), options())
        .await
        .expect("plain client");
    assert_eq!(plain.get_data("/shared").await.expect("read").0, b"x");
}

#[tokio::test]
async fn a_client_checks_the_servers_certificate() {
    let ca = TestCa::new("arbor-test-ca");
    let server_files = ca.server("server");
    let server = TestServer::start_with(&tls_flags(&server_files, None));

    let trusting_another_ca = TlsOptions::new(TestCa::new("other-ca").ca()).expect("TLS options");
    let result = Client::connect(server.tls_addr(), options().with_tls(trusting_another_ca)).await;
    assert!(
        refused_connect(result),
        "trusted a server its CA did not issue"
    );

    let wrong_name = TlsOptions::new(ca.ca())
        .and_then(|tls| tls.with_server_name("arbor.elsewhere.example"))
        .expect("TLS options");
    let result = Client::connect(server.tls_addr(), options().with_tls(wrong_name)).await;
    assert!(
        refused_connect(result),
        "accepted a certificate for another name"
    );

    // The name in the certificate, asked for explicitly, is fine.
    let by_name = TlsOptions::new(ca.ca())
        .and_then(|tls| tls.with_server_name("localhost"))
        .expect("TLS options");
    let client = Client::connect(server.tls_addr(), options().with_tls(by_name))
        .await
        .expect("connects by the certificate's DNS name");
    client.exists("/").await.expect("served");
}

#[tokio::test]
async fn listen_off_serves_tls_clients_only_and_sessions_resume_over_tls() {
    let ca = TestCa::new("arbor-test-ca");
    let server_files = ca.server("server");
    let ca_path = ca.ca();
    let mut flags = tls_flags(&server_files, Some(ca_path.to_str().expect("utf-8 path")));
    flags.extend_from_slice(&["--listen", "off"]);
    let mut server = TestServer::start_with(&flags);
    let carol_files = ca.client("carol", &[(DnType::CommonName, "carol")]);
    let carol = Client::connect(
        server.tls_addr(),
        options().with_tls(with_certificate(&ca, &carol_files)),
    )
    .await
    .expect("carol connects");
    carol
        .create_with_acl(
            "/carol",
            b"1".to_vec(),
            CreateMode::Ephemeral,
            vec![Acl::new(Perms::ALL, X509, "CN=carol")],
        )
        .await
        .expect("create");

    // The server restarts on another TLS port; the client is pointed at it
    // by a resume of the same session, which must still be carol's.
    let credentials = carol.credentials();
    server.kill();
    drop(carol);
    server.restart();
    let resumed = Client::connect(
        server.tls_addr(),
        options()
            .with_tls(with_certificate(&ca, &carol_files))
            .with_resume(credentials),
    )
    .await
    .expect("resumes");
    assert_eq!(
        resumed.get_data("/carol").await.expect("still hers").0,
        b"1"
    );
    assert!(resumed
        .who_am_i()
        .await
        .expect("who am I")
        .contains(&Id::new(X509, "CN=carol")));
}

#[test]
fn a_missing_or_bad_certificate_stops_the_start_naming_the_file() {
    let ca = TestCa::new("arbor-test-ca");
    let server_files = ca.server("server");
    let data = TempDir::new();
    let missing = data.path().join("no-such-cert.pem");
    let mut flags = tls_flags(&server_files, None);
    flags[3] = missing.to_str().expect("utf-8 path");
    let stderr = TestServer::try_start_in(data.path(), &flags)
        .err()
        .expect("arbord refuses to start");
    assert!(stderr.contains("no-such-cert.pem"), "stderr: {stderr}");

    // A key that is not a key.
    let mut flags = tls_flags(&server_files, None);
    let cert_as_key = server_files.cert.to_str().expect("utf-8 path");
    flags[5] = cert_as_key;
    let stderr = TestServer::try_start_in(data.path(), &flags)
        .err()
        .expect("arbord refuses to start");
    assert!(stderr.contains("private key"), "stderr: {stderr}");
}

fn peer_flags(files: &CertFiles, ca: &std::path::Path) -> Vec<String> {
    let path = |path: &std::path::Path| path.to_str().expect("utf-8 path").to_owned();
    vec![
        "--peer-tls-cert".to_owned(),
        path(&files.cert),
        "--peer-tls-key".to_owned(),
        path(&files.key),
        "--peer-tls-ca".to_owned(),
        path(ca),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensemble_over_peer_tls_elects_replicates_and_refuses_impostors() {
    let ca = TestCa::new("ensemble-ca");
    let certs: Vec<CertFiles> = (1..=3).map(|id| ca.member(id)).collect();
    let mut ensemble = TestEnsemble::start_with_member_flags(3, &[], |id| {
        peer_flags(&certs[id as usize - 1], &ca.ca())
    });
    let leader = ensemble.wait_for_leader(None);
    let victim = (1..=3).find(|id| *id != leader).expect("a follower");
    // The client knows only the two members that stay: what is tested is the
    // ensemble refusing impostors, not a client riding out its server's
    // death (a write in flight to the killed member ends in ConnectionLoss).
    let mut staying = Vec::new();
    for id in (1..=3).filter(|id| *id != victim) {
        staying.push(ensemble.member(id).addr().to_owned());
    }
    let client = Client::connect(&staying.join(","), options())
        .await
        .expect("client");
    client
        .create("/before", b"1".to_vec(), CreateMode::Persistent)
        .await
        .expect("write through the ensemble");

    // A follower goes away; in its place, at its addresses and with its id,
    // come impostors: one with a certificate from another CA naming it,
    // one with the ensemble's CA naming a member that does not exist.
    ensemble.member(victim).kill();
    let rogue_ca = TestCa::new("rogue-ca");
    let impostors = [
        (rogue_ca.member(victim), rogue_ca.ca()),
        (ca.peer("eve", &["arbor-member-9"]), ca.ca()),
    ];
    for (round, (files, trusted)) in impostors.iter().enumerate() {
        let dir = TempDir::new();
        let flags = peer_flags(files, trusted);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let impostor = ensemble.spawn_as(victim, dir.path(), &flags);
        // Writes go on with two of three, past several election timeouts.
        for k in 0..20 {
            client
                .create(
                    &format!("/during-{round}-{k}"),
                    b"x".to_vec(),
                    CreateMode::Persistent,
                )
                .await
                .expect("the majority writes on");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            impostor.leader_seen(),
            None,
            "impostor {round} was taken into the ensemble"
        );
        assert_eq!(ensemble.wait_for_leader(Some(victim)), leader);
        drop(impostor);
    }

    // The real member comes back, proves itself and catches up.
    ensemble.member(victim).restart();
    let member = Client::connect(ensemble.member(victim).addr(), options())
        .await
        .expect("the member serves again");
    member.sync("/").await.expect("sync");
    assert_eq!(
        member.get_data("/during-1-19").await.expect("caught up").0,
        b"x"
    );
}
