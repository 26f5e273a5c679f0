//! What a member does so that its clients' sessions live exactly as long
//! as the ensemble says, and its clients know when they may not:
//!
//! * [`watch_leadership`]: follows who leads; a member that starts leading
//!   gives every session a full timeout from its own start, in its term
//!   (touches of the old term went to the old leader), and only then may
//!   decide expiries; a leader records each quorum acknowledgement.
//! * [`send_touches`]: a follower tells the leader which of its clients'
//!   sessions are alive, every touch interval and at once when the leader
//!   changes (ZooKeeper's batched session touches); the leader's answer is
//!   the follower's proof that its touches count.
//! * [`close_when_cut_off`]: a member that loses that proof closes its
//!   client connections and takes no new ones, so its clients move to a
//!   member of the majority before their sessions could expire there (see
//!   [`super::contact`]).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::contact::Role;
use super::member::Member;
use super::peer::{PeerReply, PeerRequest};
use super::records::MemberId;
use crate::context::{Ensemble, Shared, CUT_OFF_MESSAGE};

/// How often a member checks that it may still serve its clients.
const CUT_OFF_CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// Follows who leads and this member's term as leader; see the module
/// docs.
pub async fn watch_leadership(member: Arc<Member>, shared: Arc<Shared>, stop: CancellationToken) {
    let mut metrics = member.raft().metrics();
    let mut leading_term = None;
    loop {
        let (leader, term, quorum_ack_ms) = {
            let now = metrics.borrow_and_update();
            (
                now.current_leader,
                now.current_term,
                now.millis_since_quorum_ack,
            )
        };
        let now_ms = shared.clock.monotonic_ms();
        if member.set_leader(leader) != leader {
            info!(member = member.id(), leader = ?leader, term, "leader changed");
        }
        let leads = leader == Some(member.id());
        if let (true, Some(ago_ms)) = (leads, quorum_ack_ms) {
            member.contact.quorum_acked(now_ms.saturating_sub(ago_ms));
        }
        let now_leading = leads.then_some(term);
        if now_leading != leading_term {
            shared.tracker.lock().renew_all(now_ms, now_leading);
            leading_term = now_leading;
        }
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            () = stop.cancelled() => return,
        }
    }
}

/// Every touch interval, and as soon as the leader changes, a follower
/// touches its clients' sessions at the leader (an empty batch still
/// proves the way there works).
pub async fn send_touches(member: Arc<Member>, shared: Arc<Shared>, stop: CancellationToken) {
    let interval = Duration::from_millis(member.touch_interval_ms);
    let mut metrics = member.raft().metrics();
    let mut touched: Option<MemberId> = None;
    loop {
        let leader_changed = metrics.wait_for(|now| now.current_leader != touched);
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            changed = leader_changed => if changed.is_err() { return },
            () = stop.cancelled() => return,
        }
        touched = metrics.borrow().current_leader;
        let Some(leader) = touched.filter(|leader| *leader != member.id()) else {
            continue;
        };
        touch(&member, &shared, leader);
    }
}

/// Sends one batch of touches to `leader`; its answer, if the leader still
/// leads, is recorded as proof of contact from when it was sent.
fn touch(member: &Arc<Member>, shared: &Shared, leader: MemberId) {
    let sent_ms = shared.clock.monotonic_ms();
    let alive = {
        let connections = shared.connections.lock();
        let tracker = shared.tracker.lock();
        tracker.alive_among(connections.sessions(), sent_ms)
    };
    let Some(answer) = member
        .peer(leader)
        .and_then(|peer| peer.send(PeerRequest::Touch(alive)).ok())
    else {
        return;
    };
    let member = member.clone();
    tokio::spawn(async move {
        let wait = Duration::from_millis(super::contact::CONTACT_STALE_MS);
        match tokio::time::timeout(wait, answer).await {
            Ok(Ok(PeerReply::Touched)) => member.contact.touches_acked(sent_ms),
            Ok(Ok(other)) => debug!(leader, answer = ?other, "touches not taken"),
            Ok(Err(err)) => debug!(leader, error = %err, "touches not delivered"),
            Err(_) => debug!(leader, "touches not answered in time"),
        }
    });
}

/// Closes every client connection while this member may not vouch for its
/// clients (see [`super::contact`]); handshakes and requests are refused
/// meanwhile by prep.
pub async fn close_when_cut_off(member: Arc<Member>, shared: Arc<Shared>, stop: CancellationToken) {
    // A member starts with no proof; its first change is to serving.
    let mut cut_off = true;
    loop {
        tokio::select! {
            () = tokio::time::sleep(CUT_OFF_CHECK_INTERVAL) => {}
            () = stop.cancelled() => return,
        }
        let now_cut_off = !member.vouches();
        if now_cut_off == cut_off {
            continue;
        }
        cut_off = now_cut_off;
        let (role, term) = member.role();
        if !cut_off {
            info!(
                member = member.id(),
                ?role,
                term,
                "in contact with the majority again: serving clients"
            );
            continue;
        }
        let closed = shared.connections.lock().close_all(CUT_OFF_MESSAGE);
        if role == Role::Leader {
            warn!(
                member = member.id(),
                term,
                closed,
                "no quorum has acknowledged this leader lately: closed its client connections"
            );
        } else {
            warn!(
                member = member.id(),
                ?role,
                term,
                closed,
                "lost contact with the leader: closed client connections"
            );
        }
    }
}
