//! Bucketed deadlines, as ZooKeeper's `ExpiryQueue`.
//!
//! A deadline is rounded up to the next multiple of the tick, so all keys due
//! in the same tick share one bucket and the expirer wakes once per tick, not
//! once per key. Touching a key moves it to a later bucket, and does nothing
//! when the bucket would not change (the common case for a busy session).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;

#[derive(Debug)]
pub struct ExpiryQueue<K> {
    tick_ms: u64,
    deadline_of: HashMap<K, u64>,
    buckets: BTreeMap<u64, HashSet<K>>,
}

impl<K: Copy + Eq + Hash> ExpiryQueue<K> {
    pub fn new(tick_ms: u64) -> Self {
        assert!(tick_ms > 0, "tick must be positive");
        Self {
            tick_ms,
            deadline_of: HashMap::new(),
            buckets: BTreeMap::new(),
        }
    }

    /// The bucket a deadline of `now_ms + timeout_ms` falls in: the first tick
    /// boundary strictly after it.
    pub fn bucket_for(&self, now_ms: u64, timeout_ms: u64) -> u64 {
        ((now_ms + timeout_ms) / self.tick_ms + 1) * self.tick_ms
    }

    /// Sets `key` to expire `timeout_ms` after `now_ms`.
    pub fn update(&mut self, key: K, now_ms: u64, timeout_ms: u64) {
        let bucket = self.bucket_for(now_ms, timeout_ms);
        if let Some(old) = self.deadline_of.insert(key, bucket) {
            if old == bucket {
                return;
            }
            self.remove_from_bucket(key, old);
        }
        self.buckets.entry(bucket).or_default().insert(key);
    }

    pub fn remove(&mut self, key: K) {
        if let Some(old) = self.deadline_of.remove(&key) {
            self.remove_from_bucket(key, old);
        }
    }

    fn remove_from_bucket(&mut self, key: K, bucket: u64) {
        if let Some(set) = self.buckets.get_mut(&bucket) {
            set.remove(&key);
            if set.is_empty() {
                self.buckets.remove(&bucket);
            }
        }
    }

    /// Removes and returns every key whose bucket is at or before `now_ms`.
    pub fn poll_expired(&mut self, now_ms: u64) -> Vec<K> {
        let mut expired = Vec::new();
        while let Some(entry) = self.buckets.first_entry() {
            if *entry.key() > now_ms {
                break;
            }
            for key in entry.remove() {
                self.deadline_of.remove(&key);
                expired.push(key);
            }
        }
        expired
    }

    pub fn deadline(&self, key: K) -> Option<u64> {
        self.deadline_of.get(&key).copied()
    }

    pub fn len(&self) -> usize {
        self.deadline_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.deadline_of.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_round_up_to_the_next_tick() {
        let mut queue = ExpiryQueue::new(100);
        queue.update(1u64, 1_000, 250); // due 1250 → bucket 1300
        assert_eq!(queue.deadline(1), Some(1_300));
        assert!(queue.poll_expired(1_299).is_empty());
        assert_eq!(queue.poll_expired(1_300), vec![1]);
        assert!(queue.is_empty());
    }

    #[test]
    fn touch_moves_a_key_to_a_later_bucket() {
        let mut queue = ExpiryQueue::new(100);
        queue.update(1u64, 0, 200);
        queue.update(2u64, 0, 200);
        queue.update(1u64, 150, 200);
        assert_eq!(queue.poll_expired(300), vec![2]);
        assert_eq!(queue.poll_expired(400), vec![1]);
    }

    #[test]
    fn removed_keys_never_expire() {
        let mut queue = ExpiryQueue::new(10);
        queue.update(1u64, 0, 10);
        queue.remove(1);
        assert!(queue.poll_expired(1_000).is_empty());
    }
}
