//! Arbor inside another program: `run()` serves from a current-thread
//! runtime and gives its data directory back when it returns; a
//! `TemporaryServer` dropped has stopped, its thread joined.

use arbor_protocol::{CreateMode, Op};
use arbor_server::{Config, Server, TemporaryServer};
use arbor_tests::{RawConnection, TempDir};

fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("lists threads")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn run_serves_from_a_current_thread_runtime_and_releases_its_directory() {
    let dir = TempDir::new();
    let config = Config {
        data_dir: dir.0.clone(),
        ..Config::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let addr = listener.local_addr().expect("has an address").to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(arbor_server::run(listener, config.clone(), async {
        let _ = stopped.await;
    }));

    let (mut conn, _) = RawConnection::session(&addr, 10_000).await;
    let create = Op::Create {
        path: "/kept".into(),
        data: b"v".to_vec(),
        mode: CreateMode::Persistent,
    };
    let (created, zxid) = conn.request(create).await;
    assert!(created.is_ok(), "{created:?}");
    drop(conn);

    let _ = stop.send(());
    server
        .await
        .expect("joins")
        .expect("serves and stops cleanly");
    // The lock is released and the write is on disk.
    let reopened = Server::open(config).expect("the directory opens again");
    assert!(reopened.last_zxid() >= zxid);
}

#[tokio::test(flavor = "current_thread")]
async fn a_dropped_temporary_server_has_stopped_and_joined_its_thread() {
    let server = TemporaryServer::start().await.expect("starts");
    let addr = server.addr().to_owned();
    let (mut conn, _) = RawConnection::session(&addr, 10_000).await;
    assert!(conn.request(Op::Ping).await.0.is_ok());
    assert!(thread_names().iter().any(|name| name == "arbor-embedded"));

    drop(server);
    assert!(
        !thread_names().iter().any(|name| name == "arbor-embedded"),
        "the server's thread outlived the handle"
    );
    assert!(
        tokio::net::TcpStream::connect(&addr).await.is_err(),
        "still listening"
    );
}
