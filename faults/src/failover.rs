//! How long writes stop after a fault of the leader: from the moment the
//! fault began to the first write acknowledged by a probe of another
//! member among those sent after it (see [`crate::workload::probes`]).

use serde::Serialize;

use crate::nemesis::{Event, FaultKind};
use crate::workload::probes::Ack;

/// One fault of the leader and what it cost writers.
#[derive(Debug, Clone, Serialize)]
pub struct Failover {
    pub kind: FaultKind,
    pub member: usize,
    /// Milliseconds to the first acknowledged write on a healthy member
    /// (after the heal, if none came sooner); `None` if none came before
    /// the next fault.
    pub first_write_ms: Option<f64>,
}

/// The failovers of `events`, from the probes' `acks`.
pub fn measure(events: &[Event], acks: &[Ack]) -> Vec<Failover> {
    events
        .iter()
        .enumerate()
        .filter(|(_, event)| event.kind.hits_leader())
        .map(|(at, event)| {
            let next_fault_us = events.get(at + 1).map_or(u64::MAX, |next| next.start_us);
            Failover {
                kind: event.kind,
                member: event.member,
                first_write_ms: first_write_us(event, next_fault_us, acks)
                    .map(|us| (us - event.start_us) as f64 / 1000.0),
            }
        })
        .collect()
}

fn first_write_us(event: &Event, next_fault_us: u64, acks: &[Ack]) -> Option<u64> {
    acks.iter()
        .filter(|ack| ack.member != event.member && ack.call_us >= event.start_us)
        .map(|ack| ack.ret_us)
        .filter(|ret| *ret < next_fault_us)
        .min()
}

/// The `q`-quantile (0..=1) of `values`, nearest rank.
pub fn quantile(values: &[f64], q: f64) -> Option<f64> {
    let mut sorted: Vec<f64> = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let last = sorted.len().checked_sub(1)?;
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, last + 1) - 1;
    sorted.get(rank).copied()
}
