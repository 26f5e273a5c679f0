//! `/commands/<name>`: the server's figures and listings as JSON, for
//! scripts (ZooKeeper's AdminServer commands, by Arbor's names). Ids are
//! strings in the CLI's hex form (`"0x1a"`), so a session seen here can be
//! grepped for in the logs; a listing stops at
//! [`LISTING_LINES_MAX`] entries and says so (`"truncated": true`).

use arbor_protocol::Hex;
use serde_json::{json, Map, Value};

use crate::context::Shared;
use crate::stats::{CLASS_NAMES, OP_NAMES, RESULT_NAMES};
use crate::watch::WatchKind;
use crate::zk::four_letter::LISTING_LINES_MAX;

use super::figures;

/// The commands, as `/commands` lists them.
pub const NAMES: [&str; 5] = ["stat", "conf", "cons", "sessions", "watches"];

/// `/commands`: what there is.
pub fn index() -> String {
    let commands: Vec<String> = NAMES.iter().map(|n| format!("/commands/{n}")).collect();
    let page = json!({
        "commands": commands,
        "metrics": "/metrics",
        "health": "/health",
        "ready": "/ready",
    });
    pretty(&page)
}

/// The page of command `name`; `None` if there is no such command.
pub fn page(name: &str, shared: &Shared) -> Option<String> {
    let page = match name {
        "stat" => stat(shared),
        "conf" => conf(shared),
        "cons" => cons(shared),
        "sessions" => sessions(shared),
        "watches" => watches(shared),
        _ => return None,
    };
    Some(pretty(&page))
}

fn pretty(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_else(|_| "{}".into());
    text.push('\n');
    text
}

fn hex(id: u64) -> String {
    Hex(id).to_string()
}

/// `stat`: the figures `arbor stat` prints.
fn stat(shared: &Shared) -> Value {
    let figures = figures::read(shared);
    let stats = &shared.stats;
    let mut requests = Map::new();
    for (op, op_name) in OP_NAMES.iter().enumerate() {
        let mut by_result = Map::new();
        for (result, result_name) in RESULT_NAMES.iter().enumerate() {
            let count = stats.requests(op, result);
            if count > 0 {
                by_result.insert((*result_name).into(), count.into());
            }
        }
        if !by_result.is_empty() {
            requests.insert((*op_name).into(), by_result.into());
        }
    }
    let mut latency = Map::new();
    for (class, name) in CLASS_NAMES.iter().enumerate() {
        let reading = stats.latency(class);
        let mean_us = reading.sum.checked_div(reading.count).unwrap_or(0);
        latency.insert(
            (*name).into(),
            json!({ "count": reading.count, "mean_us": mean_us }),
        );
    }
    let ensemble = figures.ensemble.as_ref().map(|status| {
        json!({
            "member_id": status.member_id,
            "leader": status.leader,
            "term": status.term,
            "last_log_index": status.last_log_index,
            "applied_index": status.applied_index,
            "members": status.members.iter().map(|m| json!({
                "id": m.id,
                "client_addr": m.client_addr,
                "peer_addr": m.peer_addr,
                "voter": m.voter,
                "matched_index": m.matched_index,
            })).collect::<Vec<_>>(),
        })
    });
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "mode": figures.mode,
        "uptime_seconds": figures.uptime_seconds.floor(),
        "last_zxid": hex(figures.last_zxid),
        "znodes": figures.znodes,
        "data_bytes": figures.data_bytes,
        "ephemerals": figures.ephemerals,
        "sessions": figures.sessions,
        "connections": figures.connections.open,
        "connected_sessions": figures.attached_sessions,
        "watches": figures.watches.watches,
        "outstanding_requests": figures.outstanding,
        "log": { "segments": figures.log.count, "bytes": figures.log.bytes },
        "snapshots": {
            "files": figures.snapshots.count,
            "newest_bytes": figures.snapshots.newest_bytes,
            "age_seconds": figures.snapshot_age_seconds.map(f64::floor),
        },
        "requests": requests,
        "latency": latency,
        "ensemble": ensemble,
    })
}

/// `conf`: the settings in force, under the names `arbor.toml` and the
/// flags use.
fn conf(shared: &Shared) -> Value {
    let config = &shared.config;
    let (timeout_min, timeout_max) = config.session_timeout_range_ms();
    json!({
        "data_dir": config.data_dir.display().to_string(),
        "tick_ms": config.tick_ms,
        "session_timeout_ms": { "min": timeout_min, "max": timeout_max },
        "max_frame_bytes": config.frame_bytes_max,
        "max_data_bytes": config.data_bytes_max,
        "max_connections": shared.limits.connections_max(),
        "max_connections_per_ip": shared.limits.connections_per_ip_max(),
        // Fewer than max_connections when the open-files limit leaves room
        // for fewer (net::open_files).
        "connections_allowed": shared.limits.connections_allowed(),
        "open_files_limit": shared.limits.open_files().map(|files| files.soft),
        "reap_interval_ms": config.reap_interval_ms,
        "fsync": format!("{:?}", config.fsync).to_lowercase(),
        "snap_count": config.snap_count,
        "snap_tree_percent": config.snap_tree_percent,
        "snap_retain": config.snap_retain,
        "segment_bytes": config.segment_bytes_max,
        "worker_threads": tokio::runtime::Handle::try_current()
            .map(|runtime| runtime.metrics().num_workers())
            .ok(),
        "idle_spin_us": crate::net::idle_spin::window().as_micros() as u64,
        "4lw": config.four_letter_words.to_string(),
        "superuser": config.super_digest.is_some(),
        "tls": config.tls.is_some(),
        "peer_tls": config.peer_tls.is_some(),
        "member_id": config.ensemble.as_ref().map(|e| e.member_id),
    })
}

/// `cons`: each connection that serves a session, with its peer.
fn cons(shared: &Shared) -> Value {
    let peers: Vec<_> = shared
        .connections
        .lock()
        .peers()
        .take(LISTING_LINES_MAX + 1)
        .collect();
    let truncated = peers.len() > LISTING_LINES_MAX;
    let state = shared.state.read();
    let connections: Vec<Value> = peers
        .into_iter()
        .take(LISTING_LINES_MAX)
        .map(|(session_id, peer)| {
            json!({
                "session_id": hex(session_id),
                "peer": peer.to_string(),
                "timeout_ms": state.session(session_id).map(|r| r.timeout_ms),
            })
        })
        .collect();
    json!({ "connections": connections, "truncated": truncated })
}

/// `sessions`: every session, with its timeout, whether a connection here
/// serves it, and how many ephemerals and watches it holds.
fn sessions(shared: &Shared) -> Value {
    let connected: std::collections::HashMap<_, _> = shared
        .connections
        .lock()
        .peers()
        .map(|(session_id, peer)| (session_id, peer.to_string()))
        .collect();
    let listed: Vec<(u64, u32, usize)> = {
        let state = shared.state.read();
        state
            .sessions()
            .take(LISTING_LINES_MAX + 1)
            .map(|(session_id, record)| {
                let ephemerals = state.tree.ephemerals_of(session_id).count();
                (session_id, record.timeout_ms, ephemerals)
            })
            .collect()
    };
    let total = shared.state.read().session_count();
    let watches = shared.watches.lock();
    let sessions: Vec<Value> = listed
        .iter()
        .take(LISTING_LINES_MAX)
        .map(|&(session_id, timeout_ms, ephemerals)| {
            json!({
                "session_id": hex(session_id),
                "timeout_ms": timeout_ms,
                "peer": connected.get(&session_id),
                "ephemerals": ephemerals,
                "watches": watches.count(session_id),
            })
        })
        .collect();
    json!({
        "sessions": sessions,
        "total": total,
        "truncated": listed.len() > LISTING_LINES_MAX,
    })
}

/// `watches`: the counts, by kind.
fn watches(shared: &Shared) -> Value {
    let summary = shared.watches.lock().summary();
    let mut by_kind = Map::new();
    for (index, kind) in WatchKind::ALL.iter().enumerate() {
        by_kind.insert(kind.name().into(), summary.by_kind[index].into());
    }
    json!({
        "sessions": summary.sessions,
        "paths": summary.paths,
        "watches": summary.watches,
        "by_kind": by_kind,
    })
}
