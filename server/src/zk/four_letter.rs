//! ZooKeeper's four-letter words: a fresh connection on the ZooKeeper port
//! that starts with one of them instead of a frame length (`ruok`, `srvr`,
//! `mntr`, …) gets a line of text back and is closed. Tools that check a
//! ZooKeeper's health this way (and kazoo, which reads the server's version
//! from `envi`) work against Arbor.
//!
//! What is answered is what the server knows; a figure it does not keep is
//! left out rather than made up. The words that list sessions or watches
//! one by one (`cons`, `wchc`, `wchp`, `dump`) are not on the list, and are
//! answered as ZooKeeper answers a word its whitelist leaves out.

use std::fmt::Write;

use crate::context::Shared;

/// The ZooKeeper release whose client protocol Arbor speaks, as `envi`,
/// `srvr` and `mntr` report it (clients read features off it).
pub const ZOOKEEPER_VERSION: &str = "3.9.2";

/// The bytes a word takes: it is read in place of a frame's length.
pub const WORD_BYTES: usize = 4;

/// The words Arbor answers.
const ANSWERED: [&[u8; WORD_BYTES]; 7] = [
    b"ruok", b"srvr", b"stat", b"mntr", b"envi", b"conf", b"isro",
];

/// Words ZooKeeper knows that Arbor does not answer.
const NOT_ANSWERED: [&[u8; WORD_BYTES]; 12] = [
    b"cons", b"wchc", b"wchp", b"wchs", b"dump", b"crst", b"srst", b"dirs", b"gtmk", b"stmk",
    b"reqs", b"hash",
];

/// Whether `first` (a connection's first bytes) is a four-letter word
/// rather than the start of a frame. A frame length made of four lowercase
/// letters would be over 1.6 GB, far past any frame limit, so nothing a
/// client could send is mistaken for one.
pub fn is_word(first: &[u8; WORD_BYTES]) -> bool {
    ANSWERED.contains(&first) || NOT_ANSWERED.contains(&first)
}

/// The answer to `word`.
pub fn answer(word: &[u8; WORD_BYTES], shared: &Shared) -> String {
    match word {
        b"ruok" => "imok".to_owned(),
        b"isro" => "rw".to_owned(),
        b"srvr" | b"stat" => server(shared),
        b"mntr" => monitor(shared),
        b"envi" => environment(),
        b"conf" => configuration(shared),
        other => format!(
            "{} is not executed because it is not in the whitelist.\n",
            String::from_utf8_lossy(other)
        ),
    }
}

/// What the server's state says, read once.
struct Figures {
    mode: &'static str,
    zxid: u64,
    nodes: usize,
    sessions: usize,
    connections: usize,
}

fn figures(shared: &Shared) -> Figures {
    let mode = match shared.ensemble() {
        None => "standalone",
        Some(ensemble) if ensemble.is_leader() => "leader",
        Some(_) => "follower",
    };
    let (zxid, nodes, sessions) = {
        let state = shared.state.read();
        (state.last_zxid(), state.tree.len(), state.session_count())
    };
    Figures {
        mode,
        zxid,
        nodes,
        sessions,
        connections: shared.connections.lock().len(),
    }
}

fn version_line() -> String {
    format!(
        "{ZOOKEEPER_VERSION}-arbor-{}, built for Arbor",
        env!("CARGO_PKG_VERSION")
    )
}

fn server(shared: &Shared) -> String {
    let figures = figures(shared);
    let mut out = String::new();
    let _ = writeln!(out, "Zookeeper version: {}", version_line());
    let _ = writeln!(out, "Connections: {}", figures.connections);
    let _ = writeln!(out, "Zxid: {:#x}", figures.zxid);
    let _ = writeln!(out, "Mode: {}", figures.mode);
    let _ = writeln!(out, "Node count: {}", figures.nodes);
    out
}

fn monitor(shared: &Shared) -> String {
    let figures = figures(shared);
    let mut out = String::new();
    let mut line = |key: &str, value: &dyn std::fmt::Display| {
        let _ = writeln!(out, "zk_{key}\t{value}");
    };
    line("version", &version_line());
    line("server_state", &figures.mode);
    line("znode_count", &figures.nodes);
    line("global_sessions", &figures.sessions);
    line("num_alive_connections", &figures.connections);
    line("last_zxid", &figures.zxid);
    if let Some(fds) = open_file_descriptors() {
        line("open_file_descriptor_count", &fds);
    }
    out
}

fn open_file_descriptors() -> Option<usize> {
    std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|entries| entries.count())
}

fn environment() -> String {
    let mut out = String::from("Environment:\n");
    let _ = writeln!(out, "zookeeper.version={}", version_line());
    let _ = writeln!(out, "arbor.version={}", env!("CARGO_PKG_VERSION"));
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let _ = writeln!(out, "host.name={}", host.trim());
    }
    let _ = writeln!(out, "os.name={}", std::env::consts::OS);
    let _ = writeln!(out, "os.arch={}", std::env::consts::ARCH);
    if let Ok(dir) = std::env::current_dir() {
        let _ = writeln!(out, "user.dir={}", dir.display());
    }
    out
}

fn configuration(shared: &Shared) -> String {
    let config = &shared.config;
    let mut out = String::new();
    let _ = writeln!(out, "dataDir={}", config.data_dir.display());
    let _ = writeln!(out, "tickTime={}", config.tick_ms);
    let _ = writeln!(out, "maxClientCnxns={}", config.connections_per_ip_max);
    let _ = writeln!(
        out,
        "minSessionTimeout={}",
        config.tick_ms.saturating_mul(2)
    );
    let _ = writeln!(
        out,
        "maxSessionTimeout={}",
        config.tick_ms.saturating_mul(20)
    );
    let _ = writeln!(out, "jute.maxbuffer={}", config.frame_bytes_max);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_told_from_frame_lengths() {
        assert!(is_word(b"ruok") && is_word(b"mntr") && is_word(b"dump"));
        // A real handshake's length prefix (a ConnectRequest is 45 bytes).
        assert!(!is_word(&45u32.to_be_bytes()));
        assert!(!is_word(b"RUOK"));
    }
}
