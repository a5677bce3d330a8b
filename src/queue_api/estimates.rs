//! How far off the wait estimates were, for a sample of users: the time the
//! last `WAITING` answer promised (now plus `estimatedWaitSeconds`), against
//! the time this instance first answers the user `ACTIVE`
//! (`waitgate_wait_estimate_error_seconds{queue,direction}`).
//!
//! - One user in [`SAMPLE_ONE_IN`] is followed, chosen by a fixed hash of
//!   the queue and user id, so every instance follows the same users.
//! - At most [`MAX_FOLLOWED`] users a process (an LRU of the `lru` crate):
//!   about 2 MiB. The users near the head poll most often, so they are the
//!   ones kept.
//! - Each instance compares what it told the user itself: behind a
//!   balancer without affinity, the last estimate this instance gave.
//! - The user learns of the admission at the next poll, so "late" includes
//!   up to one poll interval (at least `heartbeat.poll-min-ms`).

use std::hash::{Hash, Hasher};
use std::num::NonZeroUsize;
use std::sync::Mutex;

use lru::LruCache;

use crate::metrics::Metrics;
use crate::store::Position;

/// One user in this many is followed.
pub const SAMPLE_ONE_IN: u64 = 16;

/// The users a process follows at most.
pub const MAX_FOLLOWED: usize = 16_384;

/// A followed user: (queue, userId).
type Followed = (Box<str>, Box<str>);

/// The followed users' promised admission times (ms since the epoch).
pub struct Estimates {
    promised: Mutex<LruCache<Followed, u64>>,
}

impl Default for Estimates {
    fn default() -> Estimates {
        Estimates {
            promised: Mutex::new(LruCache::new(
                NonZeroUsize::new(MAX_FOLLOWED).expect("not zero"),
            )),
        }
    }
}

/// Whether `user` of `queue` is one of the followed: SipHash with fixed
/// keys (the standard library's `DefaultHasher::new()`), the same in every
/// process. A client that picks ids to be followed only fills the sample.
pub fn followed(queue: &str, user: &str) -> bool {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (queue, user).hash(&mut hasher);
    hasher.finish().is_multiple_of(SAMPLE_ONE_IN)
}

impl Estimates {
    /// Notes what a rank answer told `user`: a promise to remember, or an
    /// admission to compare with the last promise.
    pub fn saw(
        &self,
        metrics: &Metrics,
        queue: &str,
        user: &str,
        position: &Position,
        now_ms: u64,
    ) {
        let wait_ms = match position {
            Position::Waiting(place) => place.wait_ms,
            Position::Active { .. } => None,
            _ => return,
        };
        if !followed(queue, user) {
            return;
        }
        let key = (Box::from(queue), Box::from(user));
        let mut promised = self.promised.lock().unwrap_or_else(|p| p.into_inner());
        match wait_ms {
            Some(wait_ms) => {
                promised.put(key, now_ms + wait_ms);
            }
            // Paused: no promise now, and the last one no longer stands.
            None if matches!(position, Position::Waiting(_)) => {
                promised.pop(&key);
            }
            None => {
                if let Some(at) = promised.pop(&key) {
                    drop(promised);
                    let (direction, off_ms) = if now_ms >= at {
                        ("late", now_ms - at)
                    } else {
                        ("early", at - now_ms)
                    };
                    metrics
                        .wait_estimate_error
                        .with_label_values(&[queue, direction])
                        .observe(off_ms as f64 / 1000.0);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Place;

    #[test]
    fn a_followed_users_promise_is_compared_with_the_admission() {
        let config = crate::config::Config::from_yaml(
            "redis: {url: 'redis://127.0.0.1:1/0'}\nqueues: {q: {}}\nupstreams: {}\nroutes: []\n",
        )
        .unwrap();
        let metrics = Metrics::new(&config);
        let estimates = Estimates::default();
        let users: Vec<String> = (0..2_000).map(|i| format!("u{i}")).collect();
        let followed_users: Vec<&String> = users.iter().filter(|u| followed("q", u)).collect();
        // About one in 16, and the same choice every time.
        assert!(
            (80..=170).contains(&followed_users.len()),
            "{}",
            followed_users.len()
        );
        let waiting = |wait_ms| {
            Position::Waiting(Place {
                rank: 3,
                wait_ms,
                poll_after_ms: 1_000,
            })
        };
        let active = Position::Active { expires_at_ms: 0 };
        for user in &users {
            estimates.saw(&metrics, "q", user, &waiting(Some(10_000)), 1_000_000);
        }
        // Admitted 4 s late (the first followed), 2 s early (the second).
        estimates.saw(&metrics, "q", followed_users[0], &active, 1_014_000);
        estimates.saw(&metrics, "q", followed_users[1], &active, 1_008_000);
        // A second ACTIVE answer is not a second admission.
        estimates.saw(&metrics, "q", followed_users[0], &active, 1_020_000);
        // A pause withdraws the promise.
        estimates.saw(&metrics, "q", followed_users[2], &waiting(None), 1_001_000);
        estimates.saw(&metrics, "q", followed_users[2], &active, 1_030_000);
        let late = metrics
            .wait_estimate_error
            .with_label_values(&["q", "late"]);
        let early = metrics
            .wait_estimate_error
            .with_label_values(&["q", "early"]);
        assert_eq!((late.get_sample_count(), late.get_sample_sum()), (1, 4.0));
        assert_eq!((early.get_sample_count(), early.get_sample_sum()), (1, 2.0));
    }
}
