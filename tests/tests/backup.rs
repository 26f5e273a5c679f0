//! Backup and restore as an operator runs them: `Client::backup` (what
//! `arbor backup` calls) from a live server under write load, then
//! `arbord restore` into an empty directory, then a server started on it.
//! The restored tree must equal the source's as of the backup's zxid, node
//! by node and stat by stat, which the writers' own acknowledged results
//! say exactly.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arbor_client::{Client, CreateMode, Stat};
use arbor_tests::{client, fresh_data_dir, TestServer};

/// Writers running while the backup is taken, each under its own parent.
const WRITERS: usize = 3;

/// A node's data and stat.
type NodeState = (Vec<u8>, Stat);

/// Every node under `root`, at any depth, with its data and stat.
async fn tree(c: &Client, root: &str) -> BTreeMap<String, NodeState> {
    let mut nodes = BTreeMap::new();
    let mut pending = vec![root.to_owned()];
    while let Some(path) = pending.pop() {
        let (data, stat) = c.get_data(&path).await.expect("read");
        let (children, _) = c.get_children_with_stat(&path).await.expect("listed");
        for child in children {
            let child_path = if path == "/" {
                format!("/{}", child.name)
            } else {
                format!("{path}/{}", child.name)
            };
            pending.push(child_path);
        }
        nodes.insert(path, (data, stat));
    }
    nodes
}

/// Every state a writer's nodes went through, as its acknowledged writes
/// returned them: path → states in order.
type History = BTreeMap<String, Vec<NodeState>>;

/// Creates and rewrites nodes under `/load/w{writer}` until `stop`.
async fn write_load(c: Client, writer: usize, stop: Arc<AtomicBool>) -> History {
    let parent = format!("/load/w{writer}");
    let mut history = History::new();
    let mut created = 0usize;
    let mut round = 0usize;
    while !stop.load(Ordering::Acquire) || created < 20 {
        round += 1;
        if !round.is_multiple_of(3) || created == 0 {
            let path = format!("{parent}/n{created:05}");
            let data = format!("{writer}:{created}").into_bytes();
            let (_, stat) = c
                .create_with_stat(&path, data.clone(), CreateMode::Persistent)
                .await
                .expect("created");
            history.entry(path).or_default().push((data, stat));
            created += 1;
        } else {
            let path = format!("{parent}/n{:05}", (round * 7) % created);
            let data = format!("{writer}:{round}:set").into_bytes();
            let stat = c.set_data(&path, data.clone(), None).await.expect("set");
            history.entry(path).or_default().push((data, stat));
        }
    }
    history
}

/// Runs `arbord restore`; whether it succeeded, and its output.
fn arbord_restore(backup: &std::path::Path, data_dir: &std::path::Path) -> (bool, String) {
    let data_dir = std::ffi::OsString::from(data_dir);
    arbor_tests::run_arbord([
        "restore".as_ref(),
        backup.as_os_str(),
        "--data-dir".as_ref(),
        data_dir.as_os_str(),
    ])
}

// Proves a backup taken under write load restores to exactly the source's
// tree at the backup's zxid: every node, its data and every field of its
// stat, the writers' parents' child counts and pzxid included; and that a
// session's ephemeral node comes back with its owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_load_restores_the_tree_as_of_its_zxid() {
    let source = TestServer::start();
    let c = client(&source).await;
    c.create("/app", b"config".to_vec(), CreateMode::Persistent)
        .await
        .expect("created");
    c.create("/app/e", b"me".to_vec(), CreateMode::Ephemeral)
        .await
        .expect("created");
    c.create("/load", Vec::new(), CreateMode::Persistent)
        .await
        .expect("created");
    let mut parents = BTreeMap::new();
    for writer in 0..WRITERS {
        let path = format!("/load/w{writer}");
        let (_, stat) = c
            .create_with_stat(&path, Vec::new(), CreateMode::Persistent)
            .await
            .expect("created");
        parents.insert(path, stat);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let writer_client = client(&source).await;
        writers.push(tokio::spawn(write_load(
            writer_client,
            writer,
            stop.clone(),
        )));
    }
    // Let the load run, then take the backup while it still does.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let dir = fresh_data_dir();
    let backup_path = dir.join("arbor.backup");
    let mut file = tokio::fs::File::create(&backup_path).await.expect("file");
    let backup = c.backup(&mut file).await.expect("backup");
    drop(file);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    stop.store(true, Ordering::Release);
    let mut history = History::new();
    for writer in writers {
        history.extend(writer.await.expect("writer"));
    }
    let z = backup.zxid;
    let last_write = history
        .values()
        .flatten()
        .map(|(_, stat)| stat.mzxid)
        .max()
        .expect("writes");
    assert!(last_write > z, "writes went on after the backup's zxid");
    assert!(
        history.values().flatten().any(|(_, stat)| stat.mzxid < z),
        "and before it"
    );
    // The untouched part of the tree is as the source has it now.
    let static_part = tree(&c, "/app").await;

    // The expected tree at z: each writer node's last state at or before z;
    // each parent counts the children created by then.
    let mut expected: BTreeMap<String, NodeState> = static_part.clone();
    for (path, states) in &history {
        if let Some(state) = states.iter().rev().find(|(_, stat)| stat.mzxid <= z) {
            expected.insert(path.clone(), state.clone());
        }
    }
    for (parent, created) in &parents {
        let prefix = format!("{parent}/");
        let children: Vec<Stat> = expected
            .iter()
            .filter(|(path, _)| path.starts_with(&prefix))
            .map(|(_, (_, stat))| *stat)
            .collect();
        let mut stat = *created;
        stat.num_children = children.len() as u32;
        stat.cversion = children.len() as i32;
        stat.pzxid = children
            .iter()
            .map(|s| s.czxid)
            .max()
            .unwrap_or(created.pzxid);
        expected.insert(parent.clone(), (Vec::new(), stat));
    }

    let restored_dir = dir.join("restored");
    let (ok, said) = arbord_restore(&backup_path, &restored_dir);
    assert!(ok, "{said}");
    assert!(said.contains(&format!("as of zxid {:#x}", z)), "{said}");
    let restored = TestServer::start_in(&restored_dir, &[]);
    let r = client(&restored).await;
    let mut got = tree(&r, "/app").await;
    let load = tree(&r, "/load").await;
    for (path, state) in &load {
        if path != "/load" {
            got.insert(path.clone(), state.clone());
        }
    }
    assert_eq!(got.len(), expected.len(), "the same nodes");
    for (path, (data, stat)) in &expected {
        let found = got.get(path).unwrap_or_else(|| panic!("{path} is missing"));
        assert_eq!(&found.0, data, "the data of {path}");
        assert_eq!(&found.1, stat, "the stat of {path}");
    }
    let ephemeral = &got["/app/e"].1;
    assert_eq!(ephemeral.ephemeral_owner, c.session_id());
    // Its own writes (our session's opening) are numbered in a new epoch,
    // above every zxid of the backup.
    let (_, body) = restored.admin_get("/commands/stat");
    let page: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let last = page["last_zxid"].as_str().expect("a hex zxid");
    let last = u64::from_str_radix(last.trim_start_matches("0x"), 16).expect("hex");
    assert_eq!(last >> 32, (z >> 32) + 1, "{body}");
    let _ = std::fs::remove_dir_all(dir);
}

// Proves restore refuses a directory that holds anything and a damaged
// backup, writing nothing in either case.
#[tokio::test]
async fn restore_refuses_a_used_directory_and_a_damaged_backup() {
    let source = TestServer::start();
    let c = client(&source).await;
    c.create("/a", b"1".to_vec(), CreateMode::Persistent)
        .await
        .expect("created");
    let mut bytes = Vec::new();
    let backup = c.backup(&mut bytes).await.expect("backup");
    assert_eq!(bytes.len() as u64, backup.bytes);
    let dir = fresh_data_dir();
    let path = dir.join("arbor.backup");
    std::fs::write(&path, &bytes).expect("written");

    let used = dir.join("used");
    std::fs::create_dir_all(&used).expect("dir");
    std::fs::write(used.join("something"), b"x").expect("written");
    let (ok, said) = arbord_restore(&path, &used);
    assert!(!ok);
    assert!(said.contains("is not empty"), "{said}");

    let mut damaged = bytes.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0xff;
    let damaged_path = dir.join("damaged.backup");
    std::fs::write(&damaged_path, &damaged).expect("written");
    let target = dir.join("fresh");
    let (ok, said) = arbord_restore(&damaged_path, &target);
    assert!(!ok);
    assert!(said.contains("cannot be restored"), "{said}");
    assert!(!target.join("snapshots").exists(), "nothing was written");
    let _ = std::fs::remove_dir_all(dir);
}
