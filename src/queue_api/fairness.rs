//! The fairness answer and register's receipts: both read the instance's
//! last look at the queue (once a second), never Redis.

use super::{input, QueueApi};
use crate::error::ApiError;
use crate::fairness::figures::Figures;
use crate::fairness::receipt::ReceiptClaims;
use crate::path::Endpoint;
use crate::queues::Queue;
use crate::reply::Reply;

impl QueueApi {
    /// `GET /api/v1/queue/fairness?queue=q`: public, and cacheable for the
    /// second it may be stale by.
    pub(super) async fn fairness(&self, query: Option<&str>) -> Reply {
        let queue = match input::parse_query(query).and_then(|q| self.queue(q.queue.as_deref())) {
            Ok(queue) => queue,
            Err(error) => return Reply::from(error),
        };
        // Before this instance's first look (just started), one look now.
        let mut look = self.durability.last_look(&queue.name);
        if look.is_none() {
            if let Err(e) = self.durability.look(&queue).await {
                return Reply::from(self.unavailable(Endpoint::Fairness, e));
            }
            look = self.durability.last_look(&queue.name);
        }
        let Some(look) = look else {
            return Reply::from(ApiError::RedisUnavailable);
        };
        let figures = Figures::from_look(&queue.name, &look.control, &look.admission, look.now_ms);
        Reply {
            cache_control: "public, max-age=1",
            ..Reply::json(200, &figures)
        }
        .about_queue(&queue.name)
    }

    /// The receipt of `user`'s registration at `arrival` (µs); a user
    /// pre-queued under the draw committed at `committed_at_ms` (0: none)
    /// has that draw's commitment in it.
    pub(super) async fn receipt(
        &self,
        queue: &Queue,
        user: &str,
        arrival: u64,
        committed_at_ms: u64,
    ) -> String {
        let mut commitment = None;
        if committed_at_ms > 0 {
            let known = |look: Option<std::sync::Arc<crate::durability::LastLook>>| {
                look.and_then(|l| Figures::commitment_of(&l.control, committed_at_ms))
            };
            commitment = known(self.durability.last_look(&queue.name));
            // Scheduled since the last look: one more look learns it.
            if commitment.is_none() && self.durability.look(queue).await.is_ok() {
                commitment = known(self.durability.last_look(&queue.name));
            }
        }
        self.receipts.sign(&ReceiptClaims {
            queue: queue.name.clone(),
            sub: user.to_string(),
            arrival,
            iat: crate::time::now_ms() / 1000,
            commitment,
        })
    }
}
