//! Tokens already verified, so that a client's next request with the same
//! token skips the signature and claim checks (which cost about 7 µs, the
//! largest single cost on the protected route).
//!
//! The key is the whole token, so a hit is byte-for-byte the token that was
//! verified: nothing can be forged through the cache. What verification
//! decides once stays true (signature, issuer, audience, role, lifetime,
//! `iat`/`nbf` already reached), except expiry, which is checked again on
//! every hit. The cache is bounded: each shard is an LRU (the `lru` crate),
//! so a full shard forgets the token used least recently, one at a time.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;

/// What a verified token grants.
#[derive(Debug, Clone)]
pub struct Verified {
    pub exp: u64,
    /// `iat`, or for a token without one, the earliest it can have been
    /// issued (`exp` less the longest lifetime): for revocations.
    pub iat: u64,
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

type Shard = Mutex<LruCache<Box<str>, Verified, RandomState>>;

pub struct VerifiedTokens {
    /// Empty when the cache is off.
    shards: Vec<Shard>,
    hasher: RandomState,
}

impl VerifiedTokens {
    /// A cache of at most `capacity` tokens (0 turns it off).
    pub fn new(capacity: usize) -> VerifiedTokens {
        let shards = match NonZeroUsize::new(capacity.div_ceil(SHARDS)) {
            Some(per_shard) => (0..SHARDS)
                .map(|_| Mutex::new(LruCache::with_hasher(per_shard, RandomState::new())))
                .collect(),
            None => Vec::new(),
        };
        VerifiedTokens {
            shards,
            hasher: RandomState::new(),
        }
    }

    fn shard(&self, token: &str) -> Option<&Shard> {
        if self.shards.is_empty() {
            return None;
        }
        let i = self.hasher.hash_one(token) as usize % self.shards.len();
        Some(&self.shards[i])
    }

    pub fn get(&self, token: &str) -> Option<Verified> {
        // A poisoned lock only means another thread panicked mid-insert;
        // the cache is still a valid cache.
        let mut shard = self.shard(token)?.lock().unwrap_or_else(|p| p.into_inner());
        shard.get(token).cloned()
    }

    /// Remembers a token that passed every check.
    pub fn insert(&self, token: &str, verified: Verified) {
        if let Some(shard) = self.shard(token) {
            let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            shard.put(token.into(), verified);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(exp: u64) -> Verified {
        Verified {
            exp,
            iat: 0,
            user: "u".into(),
            queue: "q".into(),
        }
    }

    #[test]
    fn remembers_exact_tokens_only() {
        let c = VerifiedTokens::new(64);
        c.insert("a.b.c", v(100));
        assert_eq!(c.get("a.b.c").unwrap().exp, 100);
        assert!(c.get("a.b.C").is_none());
        assert!(c.get("a.b.c ").is_none());
    }

    #[test]
    fn stays_bounded() {
        let c = VerifiedTokens::new(32);
        for i in 0..10_000 {
            c.insert(&format!("t{i}"), v(100));
        }
        assert!(c.len() <= 32, "{}", c.len());
        assert!(c.len() >= 16, "{}", c.len());
    }

    #[test]
    fn a_full_shard_forgets_the_least_recently_used_token() {
        let c = VerifiedTokens::new(SHARDS); // one per shard
                                             // Find two tokens of one shard.
        let first = "t0".to_string();
        let same = (1..)
            .map(|i| format!("t{i}"))
            .find(|t| std::ptr::eq(c.shard(t).unwrap(), c.shard(&first).unwrap()))
            .unwrap();
        c.insert(&first, v(1));
        c.insert(&same, v(2));
        assert!(c.get(&first).is_none());
        assert_eq!(c.get(&same).unwrap().exp, 2);
    }

    #[test]
    fn zero_capacity_turns_it_off() {
        let c = VerifiedTokens::new(0);
        c.insert("a", v(100));
        assert!(c.get("a").is_none());
    }
}
