//! A revocation: a user's active state ended and their tokens refused, by
//! an operator (`POST /admin/v1/queues/<q>/revoke`) or by the backend
//! (`X-Waitgate-Release: true`). The list every instance checks tokens
//! against is `edge::revoked`; it is kept in step by the `revocations`
//! background task.

use crate::edge::jwt::Tokens;
use crate::metrics::Metrics;
use crate::queues::Queue;
use crate::store::{Store, StoreError};

/// Ends `user`'s active state and refuses the user's tokens: on every
/// instance through Redis (push and sync), and on this one at once.
/// Counted in `waitgate_revocations_total` under `source`. Returns whether
/// the user was active, and the revocation's time (Redis clock, ms).
pub async fn revoke(
    store: &Store,
    tokens: &Tokens,
    metrics: &Metrics,
    queue: &Queue,
    user: &str,
    source: &str,
) -> Result<(bool, u64), StoreError> {
    let (was_active, at_ms) = store
        .revoke(&queue.keys, &queue.name, user, tokens.longest_life())
        .await?;
    tokens.revoked().insert(&queue.name, user, at_ms);
    metrics
        .revocations
        .with_label_values(&[&queue.name, source])
        .inc();
    Ok((was_active, at_ms))
}
