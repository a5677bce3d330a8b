//! The queue API's calls that Redis may refuse as made on lost state
//! (see `durability`): the state is written back and the call made again;
//! and the seating again of a user whose place Redis lost, when they come
//! back with their credential (a rank poll, a page load).

use std::sync::Arc;
use std::time::Instant;

use super::QueueApi;
use crate::entry::challenge::Spent;
use crate::queues::Queue;
use crate::store::{Position, Registration, StoreError};

impl QueueApi {
    /// Registers `user` (with their proof of work and invite, where the
    /// queue asks them); when Redis refuses as lost, after writing back
    /// what this instance knows (a call refused so spent nothing).
    pub(super) async fn register_call(
        &self,
        queue: &Arc<Queue>,
        user: &str,
        spends: &[Spent],
    ) -> Result<Registration, StoreError> {
        let asked = Instant::now();
        match self.calls.register(queue, user, spends.to_vec()).await {
            Err(StoreError::Lost) => {
                self.durability.look_after(queue, Some(asked)).await?;
                self.calls.register(queue, user, spends.to_vec()).await
            }
            other => other,
        }
    }

    /// Where `user` stands. When they are not queued and `credential` is
    /// theirs (checked only then) and names a registration Redis lost, they
    /// are seated again there (`lua/reseat.lua` says when).
    pub(super) async fn rank_or_reseat(
        &self,
        queue: &Arc<Queue>,
        user: &str,
        credential: Option<&str>,
    ) -> Result<Position, StoreError> {
        // A numbered credential lets a poll far back read its mark alone.
        let numbered = credential
            .and_then(|c| self.credentials().check_numbered(&queue.name, user, c))
            .and_then(|(arrival, number)| Some((arrival, number?)));
        let polled = self.calls.rank(queue, user, numbered).await?;
        let path = polled.path.label();
        self.metrics
            .rank_polls
            .with_label_values(&[&queue.name, path])
            .inc();
        if let Some(age) = polled.sample_age {
            self.metrics
                .rank_sample_age
                .with_label_values(&[&queue.name, path])
                .observe(age.as_secs_f64());
        }
        let position = polled.position;
        if position != Position::NotQueued {
            self.estimates.saw(
                &self.metrics,
                &queue.name,
                user,
                &position,
                crate::time::now_ms(),
            );
            return Ok(position);
        }
        // Only a registration older than a loss whose users may still come
        // back can have lost its place (`lua/reseat.lua`'s first refusal, as
        // the call that found the user not queued read it): any other user
        // not queued left, and costs Redis no second call.
        let Some(lost_at) = polled.lost_at else {
            return Ok(position);
        };
        match credential.and_then(|c| self.credentials().check(&queue.name, user, c)) {
            Some(arrival) if arrival < lost_at.saturating_mul(1000) => {
                self.reseat(queue, user, arrival).await
            }
            _ => Ok(position),
        }
    }

    async fn reseat(
        &self,
        queue: &Queue,
        user: &str,
        arrival: u64,
    ) -> Result<Position, StoreError> {
        let call = || self.store.reseat(queue.store_ref(), user, arrival);
        let asked = Instant::now();
        let position = match call().await {
            Err(StoreError::Lost) => {
                self.durability.look_after(queue, Some(asked)).await?;
                call().await?
            }
            other => other?,
        };
        if position != Position::NotQueued {
            self.durability.spent(queue, user, arrival).await;
            self.metrics
                .reseated
                .with_label_values(&[&queue.name])
                .inc();
            tracing::info!(queue = %queue.name, user, arrival, "seated again at the credential's arrival after redis lost the place");
        }
        Ok(position)
    }

    /// Remembers a registration that left through this instance, so that
    /// a loss of state cannot bring it back.
    pub(super) async fn note_spent(&self, queue: &Queue, user: &str, arrival: u64) {
        self.durability.spent(queue, user, arrival).await;
    }
}
