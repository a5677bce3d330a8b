//! The Redis key names of a queue.
//!
//! Every key of a queue carries the hash tag `{<queue>}`, so that all of them
//! live in one Redis Cluster slot and one script may touch them together.

/// Declares each key once: its field of [`QueueKeys`], its [`Key`], and
/// its name (the field's), which is both the name in the scripts' headers
/// and the end of the Redis key.
macro_rules! queue_keys {
    ($($(#[$doc:meta])* $field:ident: $variant:ident,)*) => {
        /// The keys of one queue, built once at start.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct QueueKeys {
            $($(#[$doc])* pub $field: String,)*
        }

        /// A key of a queue, by the name the scripts' headers give it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Key {
            $($variant,)*
        }

        impl Key {
            /// Every key, in the order declared.
            #[cfg(test)]
            pub const ALL: &'static [Key] = &[$(Key::$variant,)*];

            /// The name in a script's header, and in the key
            /// (`queue:{q}:<name>`).
            pub fn name(self) -> &'static str {
                match self {
                    $(Key::$variant => stringify!($field),)*
                }
            }
        }

        impl QueueKeys {
            pub fn new(queue: &str) -> QueueKeys {
                QueueKeys {
                    $($field: format!("queue:{{{queue}}}:{}", Key::$variant.name()),)*
                }
            }

            pub(super) fn of(&self, key: Key) -> &str {
                match key {
                    $(Key::$variant => &self.$field,)*
                }
            }
        }
    };
}

queue_keys! {
    /// ZSET userId -> arrival order (microseconds, strictly increasing).
    waiting: Waiting,
    /// ZSET userId -> when the next poll is due (ms), as versions before
    /// `due` kept heartbeats (see `heartbeats` in `lua/lib.lua`).
    heartbeat: Heartbeat,
    /// HASH userId -> when the next poll is due (ms): the heartbeats.
    due: Due,
    /// ZSET of the heartbeat buckets by their end (ms); the bucket ending
    /// at `e` is the LIST `<dues>:<e>` of the users whose heartbeat a poll
    /// set within it, the candidates cleanup looks at once it is past.
    dues: Dues,
    /// ZSET userId -> active-state expiry (ms).
    active: Active,
    /// HASH userId -> arrival, for admitted users only (see
    /// `queue::credential`).
    credential: Credential,
    /// The global admission gate: the last admitted window.
    admission: Admission,
    /// HASH: the operator's live settings and the event schedule (see
    /// `lua/lib.lua`).
    control: Control,
    /// ZSET userId -> arrival: users pre-queued before a scheduled open,
    /// kept for placed ones until they are admitted or leave.
    prequeue: Prequeue,
    /// ZSET userId -> revoked at (ms): whose tokens are refused.
    revoked: Revoked,
    /// ZSET userId -> the latest arrival of theirs that may not be seated
    /// again after a loss of state: one they left, or were seated at once
    /// already (see `lua/reseat.lua`).
    spent: Spent,
    /// ZSET challenge id -> its expiry (ms): the proofs of work registers
    /// used, kept until their challenge expires (see `lua/register.lua`).
    proofs: Proofs,
    /// STRING: the latest samples of the waiting set, published by the
    /// instance that holds `sampler`, read by every other (see
    /// `store::published`).
    samples: Samples,
    /// STRING: the id of the instance that samples the waiting set, on a
    /// lease of a few seconds.
    sampler: Sampler,
    /// STRING: the id of the instance that runs this cleanup interval's
    /// pass, held for most of the interval (see `Store::claim_sweep`).
    sweeper: Sweeper,
    /// HASH: `base` and `next`, the numbers of registrations (see `marks`
    /// in `lua/lib.lua`).
    numbering: Numbering,
    /// STRING: eight bytes a number, its heartbeat's mark (u32) then the
    /// tag of its arrival (u32, the arrival mod 2^32).
    marks: Marks,
    /// STRING: eight bytes a number, its registration's arrival (i64).
    arrivals: Arrivals,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_keys_share_the_hash_tag() {
        let k = QueueKeys::new("baseball");
        // The names on Redis: a change here strands every queue's data.
        let all: Vec<&str> = Key::ALL.iter().map(|key| k.of(*key)).collect();
        assert_eq!(
            all.join(" "),
            "queue:{baseball}:waiting queue:{baseball}:heartbeat queue:{baseball}:due queue:{baseball}:dues queue:{baseball}:active queue:{baseball}:credential queue:{baseball}:admission queue:{baseball}:control queue:{baseball}:prequeue queue:{baseball}:revoked queue:{baseball}:spent queue:{baseball}:proofs queue:{baseball}:samples queue:{baseball}:sampler queue:{baseball}:sweeper queue:{baseball}:numbering queue:{baseball}:marks queue:{baseball}:arrivals"
        );
    }
}
