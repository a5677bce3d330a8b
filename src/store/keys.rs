//! The Redis key names of a queue.
//!
//! Every key of a queue carries the hash tag `{<queue>}`, so that all of them
//! live in one Redis Cluster slot and one script may touch them together.

/// The keys of one queue, built once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueKeys {
    /// ZSET userId -> arrival order (microseconds, strictly increasing).
    pub waiting: String,
    /// ZSET userId -> last rank poll (ms).
    pub heartbeat: String,
    /// ZSET userId -> active-state expiry (ms).
    pub active: String,
    /// HASH userId -> arrival, for admitted users only (see
    /// `queue::credential`).
    pub credential: String,
    /// The global admission gate: the last admitted window.
    pub admission: String,
    /// HASH: the operator's live settings and the event schedule (see
    /// `lua/lib.lua`).
    pub control: String,
    /// ZSET userId -> arrival: users pre-queued before a scheduled open,
    /// kept for placed ones until they are admitted or leave.
    pub prequeue: String,
    /// ZSET userId -> revoked at (ms): whose tokens are refused.
    pub revoked: String,
}

impl QueueKeys {
    pub fn new(queue: &str) -> QueueKeys {
        let key = |kind: &str| format!("queue:{{{queue}}}:{kind}");
        QueueKeys {
            waiting: key("waiting"),
            heartbeat: key("heartbeat"),
            active: key("active"),
            credential: key("credential"),
            admission: key("admission"),
            control: key("control"),
            prequeue: key("prequeue"),
            revoked: key("revoked"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_keys_share_the_hash_tag() {
        let k = QueueKeys::new("baseball");
        assert_eq!(k.waiting, "queue:{baseball}:waiting");
        assert_eq!(k.heartbeat, "queue:{baseball}:heartbeat");
        assert_eq!(k.active, "queue:{baseball}:active");
        assert_eq!(k.credential, "queue:{baseball}:credential");
        assert_eq!(k.admission, "queue:{baseball}:admission");
        assert_eq!(k.control, "queue:{baseball}:control");
        assert_eq!(k.prequeue, "queue:{baseball}:prequeue");
        assert_eq!(k.revoked, "queue:{baseball}:revoked");
    }
}
