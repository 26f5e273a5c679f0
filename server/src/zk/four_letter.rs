//! ZooKeeper's four-letter words: a fresh connection on the ZooKeeper port
//! that starts with one of them instead of a frame length (`ruok`, `srvr`,
//! `mntr`, …) gets text back and is closed. Tools that check a ZooKeeper's
//! health this way (and kazoo, which reads the server's version from
//! `envi`) work against Arbor.
//!
//! Which words are answered is the [`Whitelist`] (`--4lw`), with the
//! semantics of ZooKeeper's `4lw.commands.whitelist`: a comma-separated
//! list, `*` for every word Arbor answers, and `srvr` always on (ZooKeeper's
//! own scripts need it). A word left out is answered "… is not executed
//! because it is not in the whitelist." as ZooKeeper answers it. By default
//! the words that list sessions, connections or watches one by one (`cons`,
//! `wchc`, `wchp`, `wchs`, `dump`) are left out: they tell whoever can reach
//! the port which sessions exist and what they watch.
//!
//! What is answered is what the server knows, laid out as ZooKeeper 3.8
//! lays it out; a figure it does not keep (per-connection packet counts,
//! latencies) is left out rather than made up. A listing is built under the
//! lock of the state it reads, and stops at [`LISTING_LINES_MAX`] lines or
//! [`LISTING_BYTES_MAX`] bytes with a line saying it was cut.

use std::fmt::{self, Write};
use std::net::SocketAddr;

use arbor_protocol::{Hex, SessionId};

use crate::context::Shared;
use crate::pipeline::apply::StateMachine;
use crate::watch::WatchManager;

/// The ZooKeeper release whose client protocol Arbor speaks, as `envi`,
/// `srvr` and `mntr` report it (clients read features off it).
pub const ZOOKEEPER_VERSION: &str = "3.9.2";

/// The bytes a word takes: it is read in place of a frame's length.
pub const WORD_BYTES: usize = 4;

/// The words Arbor answers; the first [`DEFAULT_WORDS`] are on by default.
const ANSWERED: [&[u8; WORD_BYTES]; 12] = [
    b"ruok", b"srvr", b"stat", b"mntr", b"envi", b"conf", b"isro", b"cons", b"wchc", b"wchp",
    b"wchs", b"dump",
];

/// How many of [`ANSWERED`] are on without `--4lw`: those that report
/// figures, not sessions one by one.
const DEFAULT_WORDS: usize = 7;

/// Words ZooKeeper knows that Arbor does not answer.
const NOT_ANSWERED: [&[u8; WORD_BYTES]; 7] = [
    b"crst", b"srst", b"dirs", b"gtmk", b"stmk", b"reqs", b"hash",
];

/// The word always on, whatever the list says (as in ZooKeeper, whose
/// `zkServer.sh status` asks it).
const ALWAYS_ON: &[u8; WORD_BYTES] = b"srvr";

/// Lines a listing (`cons`, `wchc`, `wchp`, `dump`) prints at most: it is
/// built while the write path waits on the same lock, and sent whole.
pub const LISTING_LINES_MAX: usize = 10_000;

/// Bytes a listing prints at most (paths may be 4 KiB each; ten thousand of
/// them would be 40 MB held for one four-letter word).
pub const LISTING_BYTES_MAX: usize = 1024 * 1024;

/// Whether `first` (a connection's first bytes) is a four-letter word
/// rather than the start of a frame. A frame length made of four lowercase
/// letters would be over 1.6 GB, far past any frame limit, so nothing a
/// client could send is mistaken for one.
pub fn is_word(first: &[u8; WORD_BYTES]) -> bool {
    ANSWERED.contains(&first) || NOT_ANSWERED.contains(&first)
}

/// The words a server answers (`--4lw`): one bit per entry of `ANSWERED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Whitelist {
    words: u16,
}

/// A `--4lw` list that names a word Arbor cannot answer: refused at start,
/// so a typo does not leave a monitor reading "not in the whitelist".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WhitelistError {
    #[error(
        "{word:?} is not a four-letter word; Arbor answers {}, or `*` for all",
        known_words()
    )]
    Unknown { word: String },
    #[error(
        "{word:?} is a ZooKeeper four-letter word Arbor does not answer; it answers {}",
        known_words()
    )]
    NotAnswered { word: String },
}

fn known_words() -> String {
    let words: Vec<_> = ANSWERED
        .iter()
        .map(|word| String::from_utf8_lossy(&word[..]))
        .collect();
    words.join(",")
}

fn bit(index: usize) -> u16 {
    1 << index
}

impl Whitelist {
    /// Every word Arbor answers (`*`).
    pub fn all() -> Self {
        Self {
            words: (0..ANSWERED.len()).map(bit).fold(0, |all, b| all | b),
        }
    }

    /// Parses a `--4lw` list: words separated by commas, blanks around
    /// them and empty entries ignored, `*` for all. `srvr` is on whatever
    /// the list says. Every entry is checked, `*` or not.
    pub fn parse(text: &str) -> Result<Self, WhitelistError> {
        let mut list = Self::only_always_on();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if entry == "*" {
                list = Self::all();
                continue;
            }
            let word = entry.as_bytes();
            match ANSWERED.iter().position(|known| &known[..] == word) {
                Some(index) => list.words |= bit(index),
                None if NOT_ANSWERED.iter().any(|known| &known[..] == word) => {
                    return Err(WhitelistError::NotAnswered {
                        word: entry.to_owned(),
                    })
                }
                None => {
                    return Err(WhitelistError::Unknown {
                        word: entry.to_owned(),
                    })
                }
            }
        }
        Ok(list)
    }

    fn only_always_on() -> Self {
        let index = ANSWERED
            .iter()
            .position(|known| *known == ALWAYS_ON)
            .expect("the always-on word is one Arbor answers");
        Self { words: bit(index) }
    }

    /// Whether `word` is answered rather than refused.
    pub fn allows(&self, word: &[u8; WORD_BYTES]) -> bool {
        ANSWERED
            .iter()
            .position(|known| *known == word)
            .is_some_and(|index| self.words & bit(index) != 0)
    }
}

impl Default for Whitelist {
    fn default() -> Self {
        Self {
            words: (0..DEFAULT_WORDS).map(bit).fold(0, |all, b| all | b),
        }
    }
}

/// The list as `--4lw` takes it, for logs.
impl fmt::Display for Whitelist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (index, word) in ANSWERED.iter().enumerate() {
            if self.words & bit(index) != 0 {
                let comma = if first { "" } else { "," };
                write!(f, "{comma}{}", String::from_utf8_lossy(&word[..]))?;
                first = false;
            }
        }
        Ok(())
    }
}

/// The answer to `word`.
pub fn answer(word: &[u8; WORD_BYTES], shared: &Shared) -> String {
    if !shared.config.four_letter_words.allows(word) {
        return not_in_whitelist(word);
    }
    match word {
        b"ruok" => "imok".to_owned(),
        b"isro" => "rw".to_owned(),
        b"srvr" | b"stat" => server(shared),
        b"mntr" => monitor(shared),
        b"envi" => environment(),
        b"conf" => configuration(shared),
        b"cons" => connections(shared),
        b"wchc" => watches_by_session(&shared.watches.lock()),
        b"wchp" => watches_by_path(&shared.watches.lock()),
        b"wchs" => watch_summary(&shared.watches.lock()),
        b"dump" => sessions_and_ephemerals(&shared.state.read()),
        // A word the list allows is one of the above.
        other => not_in_whitelist(other),
    }
}

/// ZooKeeper's answer to a word its whitelist leaves out.
fn not_in_whitelist(word: &[u8; WORD_BYTES]) -> String {
    format!(
        "{} is not executed because it is not in the whitelist.\n",
        String::from_utf8_lossy(word)
    )
}

/// Text with a bound: lines past [`LISTING_LINES_MAX`] or
/// [`LISTING_BYTES_MAX`] are dropped, and the end says so.
#[derive(Default)]
struct Listing {
    out: String,
    lines: usize,
    cut: bool,
}

impl Listing {
    /// Adds a line; false once the listing is full (the caller stops).
    /// A line of a fixed header may ignore the answer: past the limit it is
    /// dropped like any other.
    fn line(&mut self, text: fmt::Arguments<'_>) -> bool {
        if self.cut || self.lines >= LISTING_LINES_MAX || self.out.len() >= LISTING_BYTES_MAX {
            self.cut = true;
            return false;
        }
        let _ = self.out.write_fmt(text);
        self.out.push('\n');
        self.lines += 1;
        true
    }

    /// The text, with the note that it was cut if it was, then the blank
    /// line ZooKeeper ends a listing with.
    fn finish(mut self) -> String {
        if self.cut {
            let _ = writeln!(
                self.out,
                "(cut after {} lines: a listing stops at {LISTING_LINES_MAX} lines or {LISTING_BYTES_MAX} bytes)",
                self.lines
            );
        }
        self.out.push('\n');
        self.out
    }
}

/// `cons`: one line per connection that serves a session here, in
/// ZooKeeper's ` /ADDR(…)` form with the figures Arbor keeps: the session
/// id and its timeout. (ZooKeeper's `[interest ops]`, packet counts and
/// latencies are not kept.)
fn connections(shared: &Shared) -> String {
    // Taken from the registry first and looked up after, so the two locks
    // are never held together.
    let peers: Vec<(SessionId, SocketAddr)> = shared
        .connections
        .lock()
        .peers()
        .take(LISTING_LINES_MAX + 1)
        .collect();
    let state = shared.state.read();
    let mut listing = Listing::default();
    for (session_id, peer) in peers {
        let timeout = state.session(session_id).map(|record| record.timeout_ms);
        let more = match timeout {
            Some(ms) => listing.line(format_args!(" /{peer}(sid={session_id:#x},to={ms})")),
            None => listing.line(format_args!(" /{peer}(sid={session_id:#x})")),
        };
        if !more {
            break;
        }
    }
    listing.finish()
}

/// `wchc`: each session with watches, then its paths, tab-indented.
fn watches_by_session(watches: &WatchManager) -> String {
    grouped(
        watches
            .paths_by_session()
            .map(|(session_id, paths)| (Hex(session_id), paths)),
    )
}

/// `wchp`: each watched path, then the sessions watching it.
fn watches_by_path(watches: &WatchManager) -> String {
    grouped(
        watches
            .sessions_by_path()
            .map(|(path, sessions)| (path, sessions.map(Hex))),
    )
}

/// Each group's key on a line, then its items tab-indented, until the
/// listing's limits cut it.
fn grouped<K, V, I>(groups: impl Iterator<Item = (K, I)>) -> String
where
    K: fmt::Display,
    V: fmt::Display,
    I: Iterator<Item = V>,
{
    let mut listing = Listing::default();
    add_groups(&mut listing, groups);
    listing.finish()
}

/// [`grouped`]'s lines, added to `listing`.
fn add_groups<K, V, I>(listing: &mut Listing, groups: impl Iterator<Item = (K, I)>)
where
    K: fmt::Display,
    V: fmt::Display,
    I: Iterator<Item = V>,
{
    for (key, items) in groups {
        if !listing.line(format_args!("{key}")) {
            return;
        }
        for item in items {
            if !listing.line(format_args!("\t{item}")) {
                return;
            }
        }
    }
}

/// `wchs`: the counts, in ZooKeeper's two lines.
fn watch_summary(watches: &WatchManager) -> String {
    let summary = watches.summary();
    format!(
        "{} connections watching {} paths\nTotal watches:{}\n",
        summary.sessions, summary.paths, summary.watches
    )
}

/// `dump`: the session table with timeouts, then each session that owns
/// ephemerals with its paths, in the layout of a ZooKeeper member's dump.
/// The table takes at most half the listing, so that ephemerals show
/// however many sessions there are.
fn sessions_and_ephemerals(state: &StateMachine) -> String {
    let mut listing = Listing::default();
    let sessions = state.session_count();
    listing.line(format_args!("SessionTracker dump:"));
    listing.line(format_args!("Global Sessions({sessions}):"));
    let shown = sessions.min(LISTING_LINES_MAX / 2);
    for (session_id, record) in state.sessions().take(shown) {
        let timeout_ms = record.timeout_ms;
        listing.line(format_args!("{session_id:#x}\t{timeout_ms}ms"));
    }
    if shown < sessions {
        listing.line(format_args!(
            "({} more sessions not listed)",
            sessions - shown
        ));
    }
    let owners = state.tree.ephemerals_by_session();
    listing.line(format_args!("ephemeral nodes dump:"));
    listing.line(format_args!("Sessions with Ephemerals ({}):", owners.len()));
    let owners = owners.map(|(session_id, paths)| (Owner(session_id), paths));
    add_groups(&mut listing, owners);
    listing.finish()
}

/// A session owning ephemerals, as `dump` heads its paths (`0x…:`).
struct Owner(SessionId);

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}:", self.0)
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
    let _ = writeln!(
        out,
        "maxClientCnxns={}",
        shared.limits.connections_per_ip_max()
    );
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
    use crate::watch::WatchKind;

    #[test]
    fn words_are_told_from_frame_lengths() {
        assert!(is_word(b"ruok") && is_word(b"mntr") && is_word(b"dump") && is_word(b"hash"));
        // A real handshake's length prefix (a ConnectRequest is 45 bytes).
        assert!(!is_word(&45u32.to_be_bytes()));
        assert!(!is_word(b"RUOK"));
    }

    // Proves the default list is the seven words that list no sessions.
    #[test]
    fn the_default_list_leaves_the_listings_out() {
        let list = Whitelist::default();
        for word in [
            b"ruok", b"srvr", b"stat", b"mntr", b"envi", b"conf", b"isro",
        ] {
            assert!(list.allows(word), "{}", String::from_utf8_lossy(word));
        }
        for word in [b"cons", b"wchc", b"wchp", b"wchs", b"dump", b"crst"] {
            assert!(!list.allows(word), "{}", String::from_utf8_lossy(word));
        }
        assert_eq!(list.to_string(), "ruok,srvr,stat,mntr,envi,conf,isro");
    }

    // Proves `*` is every word Arbor answers and none it does not.
    #[test]
    fn a_star_is_every_word_arbor_answers() {
        let list = Whitelist::parse("*").expect("valid");
        assert_eq!(list, Whitelist::all());
        assert!(ANSWERED.iter().all(|word| list.allows(word)));
        assert!(NOT_ANSWERED.iter().all(|word| !list.allows(word)));
        assert_eq!(
            Whitelist::parse("ruok, *").expect("valid"),
            Whitelist::all()
        );
    }

    // Proves ZooKeeper's list semantics: trimmed entries, empties skipped,
    // and srvr on whatever the list says.
    #[test]
    fn a_list_is_trimmed_and_keeps_srvr() {
        let list = Whitelist::parse(" ruok ,, cons,").expect("valid");
        assert!(list.allows(b"ruok") && list.allows(b"cons") && list.allows(b"srvr"));
        assert!(!list.allows(b"mntr") && !list.allows(b"dump"));
        assert_eq!(list.to_string(), "ruok,srvr,cons");
        let empty = Whitelist::parse("").expect("valid");
        assert_eq!(empty.to_string(), "srvr");
    }

    // Proves a word Arbor cannot answer stops the start, named.
    #[test]
    fn an_unknown_word_is_refused_by_name() {
        let err = Whitelist::parse("ruok,rouk").expect_err("a typo");
        assert_eq!(
            err,
            WhitelistError::Unknown {
                word: "rouk".into()
            }
        );
        assert!(err.to_string().contains("\"rouk\""), "{err}");
        assert!(matches!(
            Whitelist::parse("*,crst"),
            Err(WhitelistError::NotAnswered { word }) if word == "crst"
        ));
        assert!(matches!(
            Whitelist::parse("RUOK"),
            Err(WhitelistError::Unknown { .. })
        ));
    }

    // Proves the watch listings name each session and path in ZooKeeper's
    // layout, and that wchs counts registrations.
    #[test]
    fn watch_listings_show_sessions_and_paths() {
        let mut watches = WatchManager::new(100);
        watches.add(0x1a, WatchKind::Data, "/a").expect("room");
        watches.add(0x1a, WatchKind::Child, "/a").expect("room");
        watches.add(0x2b, WatchKind::Data, "/a").expect("room");
        watches.add(0x2b, WatchKind::Data, "/b").expect("room");

        let by_session = watches_by_session(&watches);
        assert!(by_session.contains("0x1a\n\t/a\n"), "{by_session}");
        assert!(by_session.contains("0x2b\n"), "{by_session}");
        assert!(by_session.contains("\t/b\n"), "{by_session}");
        assert_eq!(
            by_session.lines().filter(|l| l.starts_with('\t')).count(),
            3
        );

        let by_path = watches_by_path(&watches);
        assert!(by_path.contains("/b\n\t0x2b\n"), "{by_path}");
        assert_eq!(by_path.lines().filter(|l| l.starts_with("\t0x")).count(), 3);

        assert_eq!(
            watch_summary(&watches),
            "2 connections watching 2 paths\nTotal watches:4\n"
        );
    }

    // Proves a listing stops at its line limit and says it was cut.
    #[test]
    fn a_listing_stops_at_its_limit_and_says_so() {
        let mut listing = Listing::default();
        let mut written = 0;
        while listing.line(format_args!("/n{written}")) {
            written += 1;
        }
        assert_eq!(written, LISTING_LINES_MAX);
        let text = listing.finish();
        assert!(
            text.contains("(cut after 10000 lines"),
            "{}",
            &text[text.len() - 200..]
        );
        assert!(text.len() < LISTING_BYTES_MAX + 200);
    }
}
