//! The fairness answer and register's receipts: both read the instance's
//! last look at the queue (once a second), never Redis.

use super::{input, QueueApi};
use crate::error::ApiError;
use crate::fairness::figures::Figures;
use crate::fairness::receipt::ReceiptClaims;
use crate::queues::Queue;
use crate::reply::Reply;

impl QueueApi {
    /// The commitment of the draw committed at `committed_at_ms`: from the
    /// last look, else from the last one read (a schedule made since the
    /// look), else read now, once for each new draw; `None` when Redis
    /// has another draw in force by now, or cannot say.
    async fn commitment(&self, queue: &Queue, committed_at_ms: u64) -> Option<String> {
        if let Some(known) = self
            .durability
            .last_look(&queue.name)
            .and_then(|look| Figures::commitment_of(&look.control, committed_at_ms))
        {
            return Some(known);
        }
        let read_before = self
            .commitments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&queue.name)
            .filter(|(at, _)| *at == committed_at_ms)
            .map(|(_, commitment)| commitment.clone());
        if read_before.is_some() {
            return read_before;
        }
        let (at, commitment) = self.store.commitment(&queue.keys).await.ok()??;
        self.commitments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(queue.name.clone(), (at, commitment.clone()));
        (at == committed_at_ms).then_some(commitment)
    }

    /// `GET /api/v1/queue/fairness?queue=q`: public, and cacheable for the
    /// second it may be stale by.
    pub(super) fn fairness(&self, query: Option<&str>) -> Reply {
        let queue = match input::parse_query(query).and_then(|q| self.queue(q.queue.as_deref())) {
            Ok(queue) => queue,
            Err(error) => return Reply::from(error),
        };
        // Before this instance's first look (it has just started): nothing
        // to answer from yet, and no Redis call is made for it.
        let Some(look) = self.durability.last_look(&queue.name) else {
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
        let commitment = match committed_at_ms {
            0 => None,
            at => self.commitment(queue, at).await,
        };
        self.receipts.sign(&ReceiptClaims {
            queue: queue.name.clone(),
            sub: user.to_string(),
            arrival,
            iat: crate::time::now_ms() / 1000,
            commitment,
        })
    }
}
