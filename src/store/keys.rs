//! The Redis key names of a queue.
//!
//! Every key of a queue carries the hash tag `{<queue>}`, so that all of them
//! live in one Redis Cluster slot and one script may touch them together.

/// The keys of one queue, built once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueKeys {
    /// ZSET userId -> arrival order (microseconds, strictly increasing).
    pub waiting: String,
    /// ZSET userId -> when the next poll is due (ms), as versions before
    /// `due` kept heartbeats (see `heartbeats` in `lua/lib.lua`).
    pub heartbeat: String,
    /// HASH userId -> when the next poll is due (ms): the heartbeats.
    pub due: String,
    /// ZSET of the heartbeat buckets by their end (ms); the bucket ending
    /// at `e` is the LIST `<dues>:<e>` of the users whose heartbeat a poll
    /// set within it, the candidates cleanup looks at once it is past.
    pub dues: String,
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
    /// ZSET userId -> the latest arrival of theirs that may not be seated
    /// again after a loss of state: one they left, or were seated at once
    /// already (see `lua/reseat.lua`).
    pub spent: String,
    /// ZSET challenge id -> its expiry (ms): the proofs of work registers
    /// used, kept until their challenge expires (see `lua/register.lua`).
    pub proofs: String,
}

impl QueueKeys {
    pub fn new(queue: &str) -> QueueKeys {
        let key = |kind: Key| format!("queue:{{{queue}}}:{}", kind.name());
        QueueKeys {
            waiting: key(Key::Waiting),
            heartbeat: key(Key::Heartbeat),
            due: key(Key::Due),
            dues: key(Key::Dues),
            active: key(Key::Active),
            credential: key(Key::Credential),
            admission: key(Key::Admission),
            control: key(Key::Control),
            prequeue: key(Key::Prequeue),
            revoked: key(Key::Revoked),
            spent: key(Key::Spent),
            proofs: key(Key::Proofs),
        }
    }
}

/// A key of a queue, by the name the scripts' headers give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Waiting,
    Heartbeat,
    Due,
    Dues,
    Active,
    Credential,
    Admission,
    Control,
    Prequeue,
    Revoked,
    Spent,
    Proofs,
}

impl Key {
    /// The name in a script's header, and in the key (`queue:{q}:<name>`).
    pub fn name(self) -> &'static str {
        match self {
            Key::Waiting => "waiting",
            Key::Heartbeat => "heartbeat",
            Key::Due => "due",
            Key::Dues => "dues",
            Key::Active => "active",
            Key::Credential => "credential",
            Key::Admission => "admission",
            Key::Control => "control",
            Key::Prequeue => "prequeue",
            Key::Revoked => "revoked",
            Key::Spent => "spent",
            Key::Proofs => "proofs",
        }
    }
}

impl QueueKeys {
    pub(super) fn of(&self, key: Key) -> &str {
        match key {
            Key::Waiting => &self.waiting,
            Key::Heartbeat => &self.heartbeat,
            Key::Due => &self.due,
            Key::Dues => &self.dues,
            Key::Active => &self.active,
            Key::Credential => &self.credential,
            Key::Admission => &self.admission,
            Key::Control => &self.control,
            Key::Prequeue => &self.prequeue,
            Key::Revoked => &self.revoked,
            Key::Spent => &self.spent,
            Key::Proofs => &self.proofs,
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
        assert_eq!(k.due, "queue:{baseball}:due");
        assert_eq!(k.dues, "queue:{baseball}:dues");
        assert_eq!(k.active, "queue:{baseball}:active");
        assert_eq!(k.credential, "queue:{baseball}:credential");
        assert_eq!(k.admission, "queue:{baseball}:admission");
        assert_eq!(k.control, "queue:{baseball}:control");
        assert_eq!(k.prequeue, "queue:{baseball}:prequeue");
        assert_eq!(k.revoked, "queue:{baseball}:revoked");
        assert_eq!(k.spent, "queue:{baseball}:spent");
        assert_eq!(k.proofs, "queue:{baseball}:proofs");
    }
}
