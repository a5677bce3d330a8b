//! Tokens already verified, so that a client's next request with the same
//! token skips the signature and claim checks (which cost about 7 µs, the
//! largest single cost on the protected route).
//!
//! The key is the whole token, so a hit is byte-for-byte the token that was
//! verified: nothing can be forged through the cache. What verification
//! decides once stays true (signature, issuer, audience, role, lifetime,
//! `iat`/`nbf` already reached), except expiry, which is checked again on
//! every hit. The cache is bounded: a full shard first drops its expired
//! entries, then everything.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What a verified token grants.
#[derive(Debug, Clone)]
pub struct Verified {
    pub exp: u64,
    pub user: Arc<str>,
    /// The token's own `queue` claim; routes compare it with theirs.
    pub queue: Arc<str>,
}

const SHARDS: usize = 16;

/// aHash with random keys: a token is a few hundred bytes hashed twice per
/// request (shard, then map), which SipHash made a measured share of the
/// direct lane's time; aHash is several times quicker and, keyed at random
/// per process, still resists chosen-collision floods.
type RandomState = ahash::RandomState;

pub struct VerifiedTokens {
    shards: Vec<Mutex<HashMap<Box<str>, Verified, RandomState>>>,
    per_shard: usize,
    hasher: RandomState,
}

impl VerifiedTokens {
    /// A cache of at most `capacity` tokens (0 turns it off).
    pub fn new(capacity: usize) -> VerifiedTokens {
        VerifiedTokens {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::with_hasher(RandomState::new())))
                .collect(),
            per_shard: capacity.div_ceil(SHARDS),
            hasher: RandomState::new(),
        }
    }

    fn shard(&self, token: &str) -> &Mutex<HashMap<Box<str>, Verified, RandomState>> {
        let i = self.hasher.hash_one(token) as usize % SHARDS;
        &self.shards[i]
    }

    pub fn get(&self, token: &str) -> Option<Verified> {
        if self.per_shard == 0 {
            return None;
        }
        // A poisoned lock only means another thread panicked mid-insert;
        // the map is still a valid map.
        let shard = self.shard(token).lock().unwrap_or_else(|p| p.into_inner());
        shard.get(token).cloned()
    }

    /// Remembers a token that passed every check; `now` and `leeway` decide
    /// which entries are dead when the shard is full.
    pub fn insert(&self, token: &str, verified: Verified, now: u64, leeway: u64) {
        if self.per_shard == 0 {
            return;
        }
        let mut shard = self.shard(token).lock().unwrap_or_else(|p| p.into_inner());
        if shard.len() >= self.per_shard {
            shard.retain(|_, v| v.exp + leeway >= now);
            if shard.len() >= self.per_shard {
                shard.clear();
            }
        }
        shard.insert(token.into(), verified);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(exp: u64) -> Verified {
        Verified {
            exp,
            user: "u".into(),
            queue: "q".into(),
        }
    }

    #[test]
    fn remembers_exact_tokens_only() {
        let c = VerifiedTokens::new(64);
        c.insert("a.b.c", v(100), 0, 5);
        assert_eq!(c.get("a.b.c").unwrap().exp, 100);
        assert!(c.get("a.b.C").is_none());
        assert!(c.get("a.b.c ").is_none());
    }

    #[test]
    fn stays_bounded() {
        let c = VerifiedTokens::new(32);
        for i in 0..10_000 {
            c.insert(&format!("t{i}"), v(100), 0, 5);
        }
        let total: usize = c.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(total <= 32, "{total}");
    }

    #[test]
    fn a_full_shard_drops_expired_entries_first() {
        let c = VerifiedTokens::new(SHARDS); // one per shard
        c.insert("old", v(10), 0, 0);
        // Same shard or not, an insert at a later time never keeps more than
        // the capacity, and a live entry survives when a dead one can go.
        c.insert("old2", v(10), 100, 0);
        let total: usize = c.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(total <= SHARDS);
    }

    #[test]
    fn zero_capacity_turns_it_off() {
        let c = VerifiedTokens::new(0);
        c.insert("a", v(100), 0, 5);
        assert!(c.get("a").is_none());
    }
}
