//! Keeps this instance's revoked users (`edge::revoked`) in step with
//! Redis, so that the edge refuses a revoked user's tokens within two
//! seconds with no Redis call per request.
//!
//! Two ways in, because either alone can miss: a subscription to the
//! channel `lua/revoke.lua` publishes on (an entry arrives within
//! milliseconds, but a message published while the subscription is down is
//! lost for good), and a read of every queue's revoked set each second
//! (slower, but it catches up whatever the push missed). Entries older than
//! the longest token lifetime are forgotten: no token they could refuse is
//! still alive.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use super::shared::{ticker, FailureLog, Shared, RETRY};
use crate::edge::revoked::Revoked;
use crate::store::REVOKED_CHANNEL;

/// How often every queue's revoked set is read again.
pub const SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// Each sync reads back this far before the newest entry it saw, so that an
/// entry written with an earlier Redis time than one already seen (a
/// failover to a replica whose clock lags) is still read.
const LOOK_BACK_MS: u64 = 5_000;

pub struct Revocations {
    pub shared: Shared,
    pub revoked: Arc<Revoked>,
    /// The longest a token lives (leeway included).
    pub keep: Duration,
}

#[async_trait]
impl BackgroundService for Revocations {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let push = tokio::spawn(subscribe(self.shared.clone(), self.revoked.clone()));
        let mut ticker = ticker(SYNC_INTERVAL);
        let mut log = FailureLog::new("revocation sync");
        // Per queue: the newest revocation seen (Redis clock, ms).
        let mut newest: HashMap<String, u64> = HashMap::new();
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = shutdown.changed() => break,
            }
            let queues = self.shared.queues.load_full();
            let mut failed = None;
            for queue in queues.iter() {
                let since = newest
                    .get(&queue.name)
                    .map_or(0, |n| n.saturating_sub(LOOK_BACK_MS));
                match self.shared.store.revoked_since(&queue.keys, since).await {
                    Ok(entries) => {
                        for (user, at) in entries {
                            if self.revoked.insert(&queue.name, &user, at) {
                                tracing::info!(queue = %queue.name, user, "revocation caught up by the sync");
                            }
                            let seen = newest.entry(queue.name.clone()).or_default();
                            *seen = (*seen).max(at);
                        }
                    }
                    Err(e) => failed = Some(e),
                }
            }
            match failed {
                Some(e) => {
                    self.shared.metrics.redis_error("revoked_sync");
                    log.failed("*", &e);
                }
                None => log.succeeded("*"),
            }
            let now_ms = crate::edge::jwt::now_s() * 1000;
            let left = self
                .revoked
                .forget_before(now_ms.saturating_sub(self.keep.as_millis() as u64));
            self.shared.metrics.revoked_users.set(left as i64);
        }
        push.abort();
    }
}

/// Listens for revocations pushed by any instance; reconnects after a drop.
async fn subscribe(shared: Shared, revoked: Arc<Revoked>) {
    let mut log = FailureLog::new("revocation push");
    loop {
        match shared.store.pubsub().await {
            Ok(mut pubsub) => match pubsub.subscribe(REVOKED_CHANNEL).await {
                Ok(()) => {
                    log.succeeded("*");
                    let mut messages = pubsub.on_message();
                    while let Some(message) = messages.next().await {
                        if let Some((queue, user, at)) = parse(message.get_payload_bytes()) {
                            revoked.insert(queue, user, at);
                        }
                    }
                    // The stream ended: the connection dropped.
                    log.failed("*", &"subscription dropped");
                }
                Err(e) => log.failed("*", &e),
            },
            Err(e) => log.failed("*", &e),
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// `queue\nuser\nat_ms`, as `lua/revoke.lua` publishes it.
fn parse(payload: &[u8]) -> Option<(&str, &str, u64)> {
    let text = std::str::from_utf8(payload).ok()?;
    let mut parts = text.split('\n');
    let (queue, user, at) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || queue.is_empty() || user.is_empty() {
        return None;
    }
    Some((queue, user, at.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushed_messages_are_parsed_strictly() {
        assert_eq!(parse(b"q\nalice\n123"), Some(("q", "alice", 123)));
        for (bad, why) in [
            (&b""[..], "empty"),
            (b"q\nalice", "no arrival"),
            (b"q\nalice\nx", "an arrival that is not a number"),
            (b"q\nalice\n1\n2", "a fourth line"),
            (b"\nalice\n1", "no queue"),
        ] {
            assert_eq!(parse(bad), None, "{why}");
        }
    }
}
