//! The final state, read from every member alone once the faults are
//! healed: `sync`, then the registers, the sequential children, the
//! markers and the lock queues. Members that do not agree at first, or
//! whose lock queues are not yet empty, are read again for a while (one
//! may still be catching up, a cancelled waiter's clean-up may still be on
//! its way); what is recorded is their last answer.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use arbor_check::linearizable::Register;
use arbor_check::{MemberFinal, QueueNode};

use super::locks::lock_path;
use super::registers::parse_value;
use super::{register_path, Context, MARKERS, REGISTERS, SEQUENTIAL_PARENT};
use crate::client::{Answer, Failure, Protocol, Refusal, Session};

/// How long members may take to agree.
const AGREE_WITHIN: Duration = Duration::from_secs(30);
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Reads every member's final state into the history.
pub async fn record(context: &Context, protocol: Protocol) {
    let deadline = Instant::now() + AGREE_WITHIN;
    let finals = loop {
        let mut finals = Vec::new();
        for member in 1..=context.servers.members() {
            if let Ok(last) = read_member(context, protocol, member).await {
                finals.push(last);
            }
        }
        let complete = finals.len() == context.servers.members();
        let agree = finals.windows(2).all(|pair| same_state(&pair[0], &pair[1]));
        let drained = finals
            .iter()
            .all(|last| last.lock_queues.values().all(Vec::is_empty));
        if (complete && agree && drained) || Instant::now() >= deadline {
            break finals;
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    };
    context.recorder.with(|history| history.finals = finals);
}

fn same_state(a: &MemberFinal, b: &MemberFinal) -> bool {
    a.registers == b.registers && a.children == b.children && a.markers == b.markers
}

async fn read_member(context: &Context, protocol: Protocol, member: usize) -> Answer<MemberFinal> {
    let server = context.servers.one(protocol, member);
    let session = Session::open(protocol, &server, context.session_timeout).await?;
    let state = read_state(&session, &context.servers.protocols(), member).await;
    session.close().await;
    state
}

async fn read_state(
    session: &Session,
    protocols: &[Protocol],
    member: usize,
) -> Answer<MemberFinal> {
    session.sync(super::ROOT).await?;
    let mut registers = BTreeMap::new();
    for key in 0..REGISTERS {
        let read = session.get(&register_path(key)).await?;
        let register = Register {
            value: parse_value(&read.data),
            version: read.version,
        };
        registers.insert(key, register);
    }
    let mut children = session.children(SEQUENTIAL_PARENT).await?;
    children.sort();
    let mut markers: Vec<String> = session
        .children(MARKERS)
        .await?
        .into_iter()
        .map(|name| format!("{MARKERS}/{name}"))
        .collect();
    markers.sort();
    let mut lock_queues = BTreeMap::new();
    for &protocol in protocols {
        let lock = lock_path(protocol);
        let names = match session.children(&lock).await {
            Ok(names) => names,
            // A container lock directory goes once its last node does.
            Err(Failure::Refused(Refusal::NoNode)) => Vec::new(),
            Err(failure) => return Err(failure),
        };
        let mut nodes = Vec::new();
        for name in names {
            match session.get(&format!("{lock}/{name}")).await {
                Ok(node) => nodes.push(QueueNode {
                    name,
                    owner: node.owner,
                    czxid: node.czxid,
                }),
                // Gone since the listing.
                Err(Failure::Refused(Refusal::NoNode)) => {}
                Err(failure) => return Err(failure),
            }
        }
        lock_queues.insert(lock, nodes);
    }
    Ok(MemberFinal {
        member: format!("member {member}"),
        registers,
        children,
        markers,
        lock_queues,
    })
}
