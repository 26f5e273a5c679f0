//! Probes: one session per member writing its own node as often as it
//! can, to measure how long after a fault writes are acknowledged again.
//! A probe is pinned to its member: after a fault of member M, the first
//! write acknowledged by a probe of another member, among those sent after
//! the fault began, is when a client of a healthy member could write
//! again.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::{open_pinned, Context, ROOT};
use crate::client::Protocol;

/// Pause between a probe's writes.
const PROBE_INTERVAL: Duration = Duration::from_millis(10);
/// Pause before a probe opens a new session.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// One acknowledged probe write.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Ack {
    pub member: usize,
    pub call_us: u64,
    pub ret_us: u64,
}

pub type Acks = Arc<Mutex<Vec<Ack>>>;

pub fn probe_path(member: usize) -> String {
    format!("{ROOT}/probe-{member}")
}

/// Writes through member `member` (from 1) until the run stops.
pub async fn run(context: Context, member: usize, protocol: Protocol, acks: Acks) {
    let server = context.servers.one(protocol, member);
    let path = probe_path(member);
    while !context.stop.is_cancelled() {
        let Some(opened) = open_pinned(&context, protocol, &server, RETRY_PAUSE).await else {
            return;
        };
        let Some(session) = opened else {
            continue;
        };
        let mut written = 0u64;
        while !context.stop.is_cancelled() {
            written += 1;
            let call_us = context.recorder.now_us();
            let data = written.to_string();
            let setting = session.set(&path, data.as_bytes(), None);
            let set = tokio::select! {
                set = setting => set,
                () = context.stop.cancelled() => break,
            };
            match set {
                Ok(_) => acks.lock().push(Ack {
                    member,
                    call_us,
                    ret_us: context.recorder.now_us(),
                }),
                Err(crate::client::Failure::Expired) => break,
                Err(_) => {}
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
        session.close().await;
    }
}
