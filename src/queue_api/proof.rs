//! The queue API's side of what buys a place: `GET /api/v1/queue/challenge`,
//! and the checks of a register's proof of work (`X-Waitgate-Proof`) and
//! invite (`X-Waitgate-Invite`) before any Redis call. The challenges and
//! invites themselves are [`super::challenge`]'s and [`super::invite`]'s.

use serde::Serialize;

use super::{input, QueueApi};
use crate::browser::Caller;
use crate::entry::challenge::Spent;
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
        let reply = match queue.config.challenge {
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
        let Some(config) = queue.config.challenge else {
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

    /// The invite a register of `user` for `queue` carries, checked (no
    /// Redis call): `None` for a queue that is not invite-only. The page
    /// passes the one of its `invite` query parameter as `given`.
    pub(super) fn invite(
        &self,
        queue: &Queue,
        user: &str,
        given: Option<&str>,
    ) -> Result<Option<Spent>, ApiError> {
        let Some(invites) = &queue.invites else {
            return Ok(None);
        };
        let Some(token) = given else {
            self.invite_refused(queue, "required");
            return Err(ApiError::InviteRequired);
        };
        invites
            .check(&queue.name, user, token)
            .map(Some)
            .map_err(|refused| {
                self.invite_refused(queue, refused.reason());
                ApiError::InviteInvalid
            })
    }

    /// Counts a register refused for its proof of work.
    pub(super) fn proof_refused(&self, queue: &Queue, reason: &str) {
        count(&self.metrics.proof_refused, queue, reason);
    }

    /// Counts a register refused for its invite.
    pub(super) fn invite_refused(&self, queue: &Queue, reason: &str) {
        count(&self.metrics.invite_refused, queue, reason);
    }
}

/// One more refusal of `queue`'s registers, for `reason`.
fn count(refusals: &prometheus::IntCounterVec, queue: &Queue, reason: &str) {
    refusals.with_label_values(&[&queue.name, reason]).inc();
}
