//! Revoked users: whose tokens the edge refuses although they verify.
//!
//! An operator's revocation, or the backend's early release, ends a user's
//! active state in Redis; the user's tokens would stay valid until `exp`.
//! Every instance keeps this set in memory, filled by a push from Redis
//! (pub/sub) and a sync every second (see `background::revocations`), so
//! the edge check still makes no Redis call. A token is refused when it was
//! issued (`iat`) no later than its user's revocation: a user who queues
//! and is admitted again afterwards gets a token that works.
//!
//! Imports nothing of ours.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::RwLock;

/// queue -> user -> revoked at (ms since the epoch, Redis clock).
type Map = HashMap<Box<str>, HashMap<Box<str>, u64>>;

#[derive(Default)]
pub struct Revoked {
    map: RwLock<Map>,
    /// Entries in `map`: with none (the usual case) a check takes no lock.
    len: AtomicUsize,
}

impl Revoked {
    /// Records a revocation; a later one for the same user replaces an
    /// earlier one. Returns whether it was news.
    pub fn insert(&self, queue: &str, user: &str, at_ms: u64) -> bool {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        let users = map.entry(queue.into()).or_default();
        let news = match users.get_mut(user) {
            Some(at) if *at >= at_ms => false,
            Some(at) => {
                *at = at_ms;
                true
            }
            None => {
                users.insert(user.into(), at_ms);
                self.len.fetch_add(1, Ordering::Relaxed);
                true
            }
        };
        news
    }

    /// Whether a token of `user` in `queue` issued at `issued_at_s`
    /// (seconds) is revoked.
    pub fn refuses(&self, queue: &str, user: &str, issued_at_s: u64) -> bool {
        if self.len.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let map = self.map.read().unwrap_or_else(|p| p.into_inner());
        map.get(queue)
            .and_then(|users| users.get(user))
            .is_some_and(|&at_ms| issued_at_s.saturating_mul(1000) <= at_ms)
    }

    /// Forgets revocations made before `before_ms`: no token issued before
    /// them is still alive. Returns how many remain.
    pub fn forget_before(&self, before_ms: u64) -> usize {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        for users in map.values_mut() {
            users.retain(|_, at| *at >= before_ms);
        }
        map.retain(|_, users| !users.is_empty());
        let len = map.values().map(HashMap::len).sum();
        self.len.store(len, Ordering::Relaxed);
        len
    }

    /// The revocations of `queue`: (user, revoked at ms).
    pub fn entries(&self, queue: &str) -> Vec<(String, u64)> {
        let map = self.map.read().unwrap_or_else(|p| p.into_inner());
        map.get(queue).map_or_else(Vec::new, |users| {
            users.iter().map(|(u, at)| (u.to_string(), *at)).collect()
        })
    }

    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_tokens_issued_until_the_revocation() {
        let revoked = Revoked::default();
        assert!(!revoked.refuses("q", "alice", 100));
        assert!(revoked.insert("q", "alice", 100_000));
        assert!(!revoked.insert("q", "alice", 99_000));
        assert!(revoked.refuses("q", "alice", 99));
        assert!(revoked.refuses("q", "alice", 100));
        assert!(!revoked.refuses("q", "alice", 101), "issued after");
        assert!(!revoked.refuses("q", "bob", 99));
        assert!(!revoked.refuses("other", "alice", 99));
        assert_eq!(revoked.len(), 1);
        revoked.insert("q", "bob", 200_000);
        assert_eq!(revoked.forget_before(150_000), 1);
        assert!(!revoked.refuses("q", "alice", 99));
        assert!(revoked.refuses("q", "bob", 150));
    }
}
