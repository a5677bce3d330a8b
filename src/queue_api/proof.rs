//! The queue API's side of proof of work: `GET /api/v1/queue/challenge`,
//! and the check of a register's `X-Waitgate-Proof` before any Redis call.
//! The challenges themselves are [`super::challenge`]'s.

use serde::Serialize;

use super::challenge::Spent;
use super::{input, QueueApi};
use crate::browser::Caller;
use crate::error::ApiError;
use crate::queues::Queue;
use crate::reply::Reply;

/// The answer of the challenge endpoint.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Answer<'a> {
    /// Absent for a queue that asks no proof (`difficultyBits` 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    challenge: Option<&'a str>,
    difficulty_bits: u8,
    expires_in_ms: u64,
}

impl QueueApi {
    /// `GET /api/v1/queue/challenge?queue=<q>`: a new challenge for a
    /// queue that asks a proof of work; for one that asks none,
    /// `difficultyBits` 0 and no challenge (a client may always ask).
    pub(super) fn challenge(&self, query: Option<&str>) -> Reply {
        let answer = input::parse_query(query).and_then(|q| self.queue(q.queue.as_deref()));
        let queue = match answer {
            Ok(queue) => queue,
            Err(error) => return Reply::from(error),
        };
        let reply = match queue.challenge {
            None => Reply::json(
                200,
                &Answer {
                    challenge: None,
                    difficulty_bits: 0,
                    expires_in_ms: 0,
                },
            ),
            Some(config) => {
                let issued = self.challenges.issue(
                    &queue.name,
                    config.difficulty_bits,
                    config.ttl,
                    crate::time::now_ms(),
                );
                self.metrics
                    .challenges
                    .with_label_values(&[&queue.name])
                    .inc();
                Reply::json(
                    200,
                    &Answer {
                        challenge: Some(&issued.challenge),
                        difficulty_bits: issued.difficulty_bits,
                        expires_in_ms: issued.expires_in_ms,
                    },
                )
            }
        };
        reply.about_queue(&queue.name)
    }

    /// The proof of work a register for `queue` carries, checked (no Redis
    /// call): `None` for a queue that asks none. A refusal is counted by
    /// its reason.
    pub(super) fn proof(&self, queue: &Queue, caller: &Caller) -> Result<Option<Spent>, ApiError> {
        let Some(config) = queue.challenge else {
            return Ok(None);
        };
        let Some(proof) = caller.proof.as_deref() else {
            self.proof_refused(queue, "required");
            return Err(ApiError::ProofRequired);
        };
        self.challenges
            .check(
                &queue.name,
                config.difficulty_bits,
                proof,
                crate::time::now_ms(),
            )
            .map(Some)
            .map_err(|refused| {
                self.proof_refused(queue, refused.reason());
                ApiError::ProofInvalid
            })
    }

    /// Counts a register refused for its proof of work.
    pub(super) fn proof_refused(&self, queue: &Queue, reason: &str) {
        self.metrics
            .proof_refused
            .with_label_values(&[&queue.name, reason])
            .inc();
    }
}
