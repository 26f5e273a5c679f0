//! Which sessions are alive locally, and when each is due to expire.

use std::collections::HashMap;

use arbor_protocol::SessionId;

use super::ExpiryQueue;

#[derive(Debug, Clone, Copy)]
struct Tracked {
    timeout_ms: u32,
    /// Set once a close or expiry has been proposed: the session takes no new
    /// ephemerals and is not touched any more.
    closing: bool,
}

/// Tracks session deadlines. Methods take the current monotonic time.
#[derive(Debug)]
pub struct SessionTracker {
    sessions: HashMap<SessionId, Tracked>,
    expiry: ExpiryQueue<SessionId>,
    /// The ensemble term whose leader this member is and since whose start
    /// every deadline here was tracked (see [`Self::renew_all`]); `None` on
    /// a follower and on a standalone server.
    leading_term: Option<u64>,
}

impl SessionTracker {
    pub fn new(tick_ms: u32) -> Self {
        Self {
            sessions: HashMap::new(),
            expiry: ExpiryQueue::new(u64::from(tick_ms)),
            leading_term: None,
        }
    }

    /// Starts tracking a session with a full timeout from `now_ms`.
    pub fn add(&mut self, session_id: SessionId, timeout_ms: u32, now_ms: u64) {
        self.sessions.insert(
            session_id,
            Tracked {
                timeout_ms,
                closing: false,
            },
        );
        self.expiry
            .update(session_id, now_ms, u64::from(timeout_ms));
    }

    /// Extends a live session's deadline. False if the session is unknown or
    /// closing: the caller must treat it as expired.
    pub fn touch(&mut self, session_id: SessionId, now_ms: u64) -> bool {
        match self.sessions.get(&session_id) {
            Some(tracked) if !tracked.closing => {
                let timeout_ms = u64::from(tracked.timeout_ms);
                self.expiry.update(session_id, now_ms, timeout_ms);
                true
            }
            _ => false,
        }
    }

    /// True if the session exists and is not closing.
    pub fn is_active(&self, session_id: SessionId) -> bool {
        self.sessions.get(&session_id).is_some_and(|t| !t.closing)
    }

    /// Marks a session as closing. False if it was unknown or already closing,
    /// so only one close is ever proposed.
    pub fn start_closing(&mut self, session_id: SessionId) -> bool {
        match self.sessions.get_mut(&session_id) {
            Some(tracked) if !tracked.closing => {
                tracked.closing = true;
                self.expiry.remove(session_id);
                true
            }
            _ => false,
        }
    }

    /// Forgets a session whose close has been applied.
    pub fn remove(&mut self, session_id: SessionId) {
        self.sessions.remove(&session_id);
        self.expiry.remove(session_id);
    }

    /// Sessions whose deadline has passed; each is marked closing.
    pub fn take_expired(&mut self, now_ms: u64) -> Vec<SessionId> {
        let expired = self.expiry.poll_expired(now_ms);
        for id in &expired {
            if let Some(tracked) = self.sessions.get_mut(id) {
                tracked.closing = true;
            }
        }
        expired
    }

    /// Gives every session a full timeout from `now_ms` and forgets which
    /// were being closed: what a member does when it becomes the leader of
    /// `leading_term` (no live session may expire because of a failover:
    /// their touches went to the old leader) or stops leading (`None`: a
    /// close it proposed may never have been committed).
    pub fn renew_all(&mut self, now_ms: u64, leading_term: Option<u64>) {
        for (session_id, tracked) in &mut self.sessions {
            tracked.closing = false;
            self.expiry
                .update(*session_id, now_ms, u64::from(tracked.timeout_ms));
        }
        self.leading_term = leading_term;
    }

    /// The term this member leads in whose full timeouts its deadlines
    /// count, if it leads: an expiry may be decided only in that term.
    pub fn leading_term(&self) -> Option<u64> {
        self.leading_term
    }

    /// Of `sessions`, those alive here: not closing, deadline not passed.
    pub fn alive_among(
        &self,
        sessions: impl Iterator<Item = SessionId>,
        now_ms: u64,
    ) -> Vec<SessionId> {
        sessions
            .filter(|id| {
                self.is_active(*id) && self.expiry.deadline(*id).is_some_and(|due| due > now_ms)
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_expires_within_timeout_plus_one_tick() {
        let mut tracker = SessionTracker::new(100);
        tracker.add(1, 400, 0);
        assert!(tracker.take_expired(400).is_empty());
        assert_eq!(tracker.take_expired(500), vec![1]);
        assert!(!tracker.is_active(1), "expired sessions are closing");
        assert!(
            !tracker.touch(1, 500),
            "a closing session cannot be revived"
        );
    }

    #[test]
    fn touching_keeps_a_session_alive() {
        let mut tracker = SessionTracker::new(100);
        tracker.add(1, 400, 0);
        for now in (0..2_000).step_by(100) {
            assert!(tracker.touch(1, now));
            assert!(tracker.take_expired(now).is_empty());
        }
    }

    #[test]
    fn renewing_gives_every_session_a_full_timeout_again() {
        let mut tracker = SessionTracker::new(100);
        tracker.add(1, 400, 0);
        tracker.add(2, 400, 0);
        assert!(tracker.start_closing(2));
        tracker.renew_all(1_000, Some(7));
        assert_eq!(tracker.leading_term(), Some(7));
        assert!(tracker.take_expired(1_400).is_empty());
        assert_eq!(
            tracker.alive_among([1, 2, 3].into_iter(), 1_400),
            vec![1, 2]
        );
        let mut expired = tracker.take_expired(1_500);
        expired.sort_unstable();
        assert_eq!(expired, vec![1, 2]);
    }

    #[test]
    fn close_is_proposed_once() {
        let mut tracker = SessionTracker::new(100);
        tracker.add(1, 400, 0);
        assert!(tracker.start_closing(1));
        assert!(!tracker.start_closing(1));
        assert!(tracker.take_expired(10_000).is_empty());
    }
}
